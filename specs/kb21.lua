-- KernelBench level 2 #21: Conv2d -> + bias -> x scale -> sigmoid -> GroupNorm(8 groups).
-- `bias` and `scale` are [32,1,1] module parameters, separate from the conv's own bias.
return layer "kb21_conv2d_add_mul_sigmoid_groupnorm" {
  input = { "N", 8, 256, 256 },
  conv2d { name = "conv", out_channels = 32, kernel = 3 },
  add { param = "bias", shape = { 32, 1, 1 } },
  mul { param = "scale", shape = { 32, 1, 1 } },
  sigmoid {},
  group_norm { name = "group_norm", groups = 8 },
}
-- SPDX-License-Identifier: Apache-2.0
