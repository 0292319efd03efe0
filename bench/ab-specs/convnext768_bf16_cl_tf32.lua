-- SPDX-License-Identifier: Apache-2.0
-- A/B spec (v37): ConvNeXt-T stage 4 block (768 channels at 7x7) in bf16, channels last, every layer at precision "tf32"
-- (the peer of PyTorch's bf16 run): the 96-channel block's layers (convnext_bf16_cl_tf32.lua) at this stage's width
return block "convnext" {
  input = { "N", 768, 7, 7 }, dtype = "bf16", layout = "channels_last",
  layer "a" { precision = "tf32",
    conv2d { name = "dwconv", out_channels = 768, kernel = 7, padding = 3, groups = 768 },
    layer_norm { name = "norm", dim = 1, eps = 1e-6 },
  },
  layer "b" { precision = "tf32",
    conv2d { name = "pwconv1", out_channels = 3072, kernel = 1 },
    gelu {},
  },
  layer "c" { precision = "tf32",
    conv2d { name = "pwconv2", out_channels = 768, kernel = 1 },
    mul { param = "gamma", shape = { 768, 1, 1 } },
    add { tensor = "input" },   -- the residual
  },
}
