-- SPDX-License-Identifier: Apache-2.0
-- A/B spec (v40, narrower channel blocks): Stable Diffusion's ResnetBlock2D of bench/blocks.py at 640
-- channels on 32x32 latents, bf16, channels last, at the default precision (fp32: 3xTF32)
return block "ab_sd640_bf16_cl" {
  input = { "N", 640, 32, 32 }, dtype = "bf16", layout = "channels_last",
  inputs = { temb = { "N", 640 } },
  layer "h" {
    group_norm { name = "norm1", groups = 32, eps = 1e-5 }, silu {},
    conv2d { name = "conv1", out_channels = 640, kernel = 3, padding = 1 },
    add { tensor = "temb" },
  },
  layer "out" {
    group_norm { name = "norm2", groups = 32, eps = 1e-5 }, silu {},
    conv2d { name = "conv2", out_channels = 640, kernel = 3, padding = 1 },
    add { tensor = "input" },
  },
}
