-- SPDX-License-Identifier: Apache-2.0
-- A/B spec (v18: wide inputs on wgmma): ConvNeXt-T's second pointwise conv, 384 -> 96 with
-- its layer scale (specs/blocks/convnext.lua's layer c without the residual); 384 TF32
-- channels a pixel were past the wgmma input pack's tile, so it ran on mma.sync
return layer "ab_convnext_pw2" {
  input = { "N", 384, 56, 56 },
  conv2d { name = "pwconv2", out_channels = 96, kernel = 1 },
  mul { param = "gamma", shape = { 96, 1, 1 } },
}
