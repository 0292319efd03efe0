-- SPDX-License-Identifier: Apache-2.0
-- A/B spec (v20): the sweep's large fp32 conv, 64->128 3x3 on 256x256 (batch 64 in the A/B)
return layer "ab_conv_64_128_256" {
  input = { "N", 64, 256, 256 },
  conv2d { name = "conv", out_channels = 128, kernel = 3, padding = 1 },
  relu {},
}
