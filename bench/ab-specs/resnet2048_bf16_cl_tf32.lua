-- SPDX-License-Identifier: Apache-2.0
-- A/B spec (v40, flat tiles): the ResNet-50 bottleneck of bench/blocks.py at 2048 channels, 7x7,
-- bf16, channels last, every layer at precision "tf32" (the peer of PyTorch's bf16 run)
return block "ab_resnet2048_bf16_cl_tf32" {
  input = { "N", 2048, 7, 7 }, dtype = "bf16", layout = "channels_last",
  layer "a" { precision = "tf32",
    conv2d { name = "conv1", out_channels = 512, kernel = 1, bias = false },
    batch_norm { name = "bn1", stats = "running" }, relu {},
  },
  layer "b" { precision = "tf32",
    conv2d { name = "conv2", out_channels = 512, kernel = 3, padding = 1, bias = false },
    batch_norm { name = "bn2", stats = "running" }, relu {},
  },
  layer "c" { precision = "tf32",
    conv2d { name = "conv3", out_channels = 2048, kernel = 1, bias = false },
    batch_norm { name = "bn3", stats = "running" },
    add { tensor = "input" },   -- the identity shortcut
    relu {},
  },
}
