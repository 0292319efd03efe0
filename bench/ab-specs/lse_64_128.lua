-- SPDX-License-Identifier: Apache-2.0
-- A/B spec (v10, v14): a 64->128 3x3 conv and a logsumexp over the channels
return layer "ab_lse_64_128" {
  input = { "N", 64, 128, 128 },
  conv2d { name = "conv", out_channels = 128, kernel = 3, padding = 1 },
  logsumexp { dim = 1 },
}
