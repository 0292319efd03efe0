-- KernelBench level 2 #85 with a channels-last (NHWC) input and output.
return layer "kb85_cl_conv2d_groupnorm_scale_maxpool_clamp" {
  input = { "N", 8, 128, 128 },
  layout = "channels_last",
  conv2d { name = "conv", out_channels = 64, kernel = 3 },
  group_norm { name = "group_norm", groups = 16 },
  mul { param = "scale", shape = { 64, 1, 1 } },
  max_pool { kernel = 4 },
  clamp { min = 0.0, max = 1.0 },
}
-- SPDX-License-Identifier: Apache-2.0
