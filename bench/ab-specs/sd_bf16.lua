-- SPDX-License-Identifier: Apache-2.0
-- A/B spec (v16): the GroupNorm -> SiLU -> conv layer in bf16
return layer "ab_sd_gn_silu_conv_bf16" {
  input = { "N", 320, 64, 64 }, dtype = "bf16",
  group_norm { name = "norm1", groups = 32, eps = 1e-5 }, silu {},
  conv2d { name = "conv1", out_channels = 320, kernel = 3, padding = 1 },
}
