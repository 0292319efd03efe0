-- SPDX-License-Identifier: Apache-2.0
-- A/B spec (bench/RESULTS.md 2026-12-02, v12): a bf16 64->128 3x3 conv on 256x256 (batch 64 in the A/B)
return layer "ab_bf16_64_128_256" {
  input = { "N", 64, 256, 256 },
  dtype = "bf16",
  conv2d { name = "conv", out_channels = 128, kernel = 3, padding = 1 },
  relu {},
}
