-- SPDX-License-Identifier: Apache-2.0
-- A/B spec (v17): KernelBench #23 (specs/kb23.lua) with precision tf32
-- KernelBench level 2 #23: Conv3d -> GroupNorm(8 groups) -> mean over every dim but the batch.
return layer "kb23_conv3d_groupnorm_mean" { precision = "tf32",
  input = { "N", 3, 24, 32, 32 },
  conv3d { name = "conv", out_channels = 24, kernel = 3 },
  group_norm { name = "group_norm", groups = 8 },
  mean { dims = { 1, 2, 3, 4 } },
}
-- SPDX-License-Identifier: Apache-2.0
