-- SPDX-License-Identifier: Apache-2.0
-- A/B spec (v40, flat tiles): the ResNet-50 bottleneck of bench/blocks.py at 1024 channels, 14x14,
-- bf16, channels last, every layer at precision "tf32" (the peer of PyTorch's bf16 run)
return block "ab_resnet1024_bf16_cl_tf32" {
  input = { "N", 1024, 14, 14 }, dtype = "bf16", layout = "channels_last",
  layer "a" { precision = "tf32",
    conv2d { name = "conv1", out_channels = 256, kernel = 1, bias = false },
    batch_norm { name = "bn1", stats = "running" }, relu {},
  },
  layer "b" { precision = "tf32",
    conv2d { name = "conv2", out_channels = 256, kernel = 3, padding = 1, bias = false },
    batch_norm { name = "bn2", stats = "running" }, relu {},
  },
  layer "c" { precision = "tf32",
    conv2d { name = "conv3", out_channels = 1024, kernel = 1, bias = false },
    batch_norm { name = "bn3", stats = "running" },
    add { tensor = "input" },   -- the identity shortcut
    relu {},
  },
}
