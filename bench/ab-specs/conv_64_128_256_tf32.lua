-- SPDX-License-Identifier: Apache-2.0
-- A/B spec (v20): the same conv in precision tf32 (one TF32 product)
return layer "ab_conv_64_128_256_tf32" { precision = "tf32",
  input = { "N", 64, 256, 256 },
  conv2d { name = "conv", out_channels = 128, kernel = 3, padding = 1 },
  relu {},
}
