-- SPDX-License-Identifier: Apache-2.0
-- A/B spec (v13): GroupNorm(32) -> SiLU -> conv3x3 at SD's 320 channels on 64x64 (batch 2)
return layer "ab_sd_gn_silu_conv" {
  input = { "N", 320, 64, 64 },
  group_norm { name = "norm1", groups = 32, eps = 1e-5 }, silu {},
  conv2d { name = "conv1", out_channels = 320, kernel = 3, padding = 1 },
}
