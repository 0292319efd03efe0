-- SPDX-License-Identifier: Apache-2.0
-- A/B spec (v17): KernelBench #79 (specs/kb79.lua) with precision tf32
-- KernelBench level 2 #79: Conv3d -> x multiplier -> InstanceNorm3d -> clamp -> x multiplier
-- -> max over channels. The same `multiplier` tensor ([16,1,1,1], per channel) is used twice.
return layer "kb79_conv3d_mul_instnorm_clamp_mul_max" { precision = "tf32",
  input = { "N", 3, 16, 32, 32 },
  conv3d { name = "conv", out_channels = 16, kernel = 3 },
  mul { param = "multiplier", shape = { 16, 1, 1, 1 } },
  instance_norm { eps = 1e-5 },
  clamp { min = -1.0, max = 1.0 },
  mul { param = "multiplier" },
  max { dim = 1 },
}
-- SPDX-License-Identifier: Apache-2.0
