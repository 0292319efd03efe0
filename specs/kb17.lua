-- KernelBench level 2 #17: Conv2d(64 -> 128) -> InstanceNorm2d (no affine) -> divide by 2.
return layer "kb17_conv2d_instnorm_div" {
  input = { "N", 64, 128, 128 },
  conv2d { name = "conv", out_channels = 128, kernel = 3 },
  instance_norm {},
  div { scalar = 2.0 },
}
-- SPDX-License-Identifier: Apache-2.0
