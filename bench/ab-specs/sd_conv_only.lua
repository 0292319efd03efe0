-- SPDX-License-Identifier: Apache-2.0
-- A/B spec (v13): the same conv alone, the control
return layer "ab_sd_conv_only" {
  input = { "N", 320, 64, 64 },
  conv2d { name = "conv1", out_channels = 320, kernel = 3, padding = 1 },
}
