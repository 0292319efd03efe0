-- SPDX-License-Identifier: Apache-2.0
-- A/B spec (v18: wide inputs on wgmma): Stable Diffusion's ResnetBlock2D at 640 channels on
-- 32x32 latents, its first half (GroupNorm -> SiLU -> conv3x3)
return layer "ab_sd_640_gn_silu_conv" {
  input = { "N", 640, 32, 32 },
  group_norm { name = "norm1", groups = 32, eps = 1e-6 },
  silu {},
  conv2d { name = "conv1", out_channels = 640, kernel = 3, padding = 1 },
}
