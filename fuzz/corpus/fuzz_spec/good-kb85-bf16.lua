-- KernelBench level 2 #85: Conv2d -> GroupNorm(16 groups) -> x scale -> MaxPool2d(4) -> clamp(0, 1).
return layer "kb85_bf16_conv2d_groupnorm_scale_maxpool_clamp" {
  input = { "N", 8, 128, 128 },
  dtype = "bf16",
  conv2d { name = "conv", out_channels = 64, kernel = 3 },
  group_norm { name = "group_norm", groups = 16 },
  mul { param = "scale", shape = { 64, 1, 1 } },
  max_pool { kernel = 4 },
  clamp { min = 0.0, max = 1.0 },
}
-- SPDX-License-Identifier: Apache-2.0
