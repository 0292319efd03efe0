-- SPDX-License-Identifier: Apache-2.0
-- A/B spec (v40, narrower channel blocks): Stable Diffusion's ResnetBlock2D of bench/blocks.py at 1280
-- channels on 16x16 latents, bf16, channels last, every layer at precision "tf32" (the peer of PyTorch bf16)
return block "ab_sd1280_bf16_cl_tf32" {
  input = { "N", 1280, 16, 16 }, dtype = "bf16", layout = "channels_last",
  inputs = { temb = { "N", 1280 } },
  layer "h" { precision = "tf32",
    group_norm { name = "norm1", groups = 32, eps = 1e-5 }, silu {},
    conv2d { name = "conv1", out_channels = 1280, kernel = 3, padding = 1 },
    add { tensor = "temb" },
  },
  layer "out" { precision = "tf32",
    group_norm { name = "norm2", groups = 32, eps = 1e-5 }, silu {},
    conv2d { name = "conv2", out_channels = 1280, kernel = 3, padding = 1 },
    add { tensor = "input" },
  },
}
