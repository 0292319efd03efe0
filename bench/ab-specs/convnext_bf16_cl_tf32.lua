-- SPDX-License-Identifier: Apache-2.0
-- A/B spec (v30): specs/blocks/convnext.lua in bf16, channels last, every layer at precision "tf32"
-- (the peer of PyTorch's bf16 run; bench/RESULTS.md 2026-12-02, tenth session)
-- ConvNeXt-T block (stage 1: 96 channels at 56x56): depthwise 7x7 conv, LayerNorm over each
-- pixel's channels (layer_norm { dim = 1 }), 1x1 conv 96 -> 384, GELU, 1x1 conv 384 -> 96,
-- layer scale (a per-channel gamma), plus the block input (drop path is the identity in
-- inference). Parameter names follow facebookresearch/ConvNeXt's Block: dwconv, norm,
-- pwconv1, pwconv2, gamma; there pwconv1/pwconv2 are nn.Linear ([384, 96] weights: the
-- same numbers as these 1x1 convs' [384, 96, 1, 1]) and gamma is [96] (here [96, 1, 1]).
return block "convnext" {
  input = { "N", 96, 56, 56 }, dtype = "bf16", layout = "channels_last",
  layer "a" { precision = "tf32",
    conv2d { name = "dwconv", out_channels = 96, kernel = 7, padding = 3, groups = 96 },
    layer_norm { name = "norm", dim = 1, eps = 1e-6 },
  },
  layer "b" { precision = "tf32",
    conv2d { name = "pwconv1", out_channels = 384, kernel = 1 },
    gelu {},
  },
  layer "c" { precision = "tf32",
    conv2d { name = "pwconv2", out_channels = 96, kernel = 1 },
    mul { param = "gamma", shape = { 96, 1, 1 } },
    add { tensor = "input" },   -- the residual
  },
}
