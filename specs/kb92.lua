-- KernelBench level 2 #92: Conv2d -> GroupNorm(16) -> tanh -> hardswish -> + the conv output
-- (a residual, named with `as`) -> logsumexp over channels, keepdim.
return layer "kb92_conv2d_groupnorm_tanh_hardswish_residual_logsumexp" {
  input = { "N", 8, 128, 128 },
  conv2d { name = "conv", out_channels = 64, kernel = 3, as = "c" },
  group_norm { name = "group_norm", groups = 16 },
  tanh {},
  hardswish {},
  add { value = "c" },
  logsumexp { dim = 1, keepdim = true },
}
-- SPDX-License-Identifier: Apache-2.0
