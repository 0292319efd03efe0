-- SPDX-License-Identifier: Apache-2.0
-- A/B spec (v30): specs/blocks/nnunet_stage.lua in bf16, channels last, every layer at precision "tf32"
-- (the peer of PyTorch's bf16 run; bench/RESULTS.md 2026-12-02, tenth session)
-- An nnU-Net encoder stage: 2 x (Conv3d 3x3x3 -> InstanceNorm3d(affine) -> LeakyReLU(0.01)),
-- 32 -> 64 channels at 64^3 (bench/blocks.py's Stage: conv1, norm1, conv2, norm2).
return block "nnunet_stage" {
  input = { "N", 32, 64, 64, 64 }, dtype = "bf16", layout = "channels_last",
  layer "a" { precision = "tf32",
    conv3d { name = "conv1", out_channels = 64, kernel = 3, padding = 1 },
    instance_norm { name = "norm1", affine = true }, leaky_relu { negative_slope = 0.01 },
  },
  layer "b" { precision = "tf32",
    conv3d { name = "conv2", out_channels = 64, kernel = 3, padding = 1 },
    instance_norm { name = "norm2", affine = true }, leaky_relu { negative_slope = 0.01 },
  },
}
