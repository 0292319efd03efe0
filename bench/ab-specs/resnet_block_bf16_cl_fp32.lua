-- SPDX-License-Identifier: Apache-2.0
-- A/B spec (the half tiling at small batches, FUSEGEN_WGMMA_M64): specs/blocks/resnet50_bottleneck.lua
-- in bf16, channels last, precision fp32 (the weights in two parts)
return block "ab_resnet_bf16_cl_fp32" {
  input = { "N", 256, 56, 56 },
  dtype = "bf16",
  layout = "channels_last",
  layer "a" {
    conv2d { name = "conv1", out_channels = 64, kernel = 1, bias = false },
    batch_norm { name = "bn1", stats = "running" }, relu {},
  },
  layer "b" {
    conv2d { name = "conv2", out_channels = 64, kernel = 3, padding = 1, bias = false },
    batch_norm { name = "bn2", stats = "running" }, relu {},
  },
  layer "c" {
    conv2d { name = "conv3", out_channels = 256, kernel = 1, bias = false },
    batch_norm { name = "bn3", stats = "running" },
    add { tensor = "input" },   -- the identity shortcut
    relu {},
  },
}
