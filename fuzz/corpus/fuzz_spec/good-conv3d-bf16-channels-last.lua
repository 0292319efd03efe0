-- A 3D layer in bf16 with channels-last (NDHWC) input and output, a keepdim channel max.
return layer "conv3d_bf16_cl_instnorm_max" {
  input = { "N", 3, 8, 20, 20 },
  layout = "channels_last",
  dtype = "bf16",
  conv3d { name = "conv", out_channels = 16, kernel = 3 },
  instance_norm { eps = 1e-5 },
  clamp { min = -1.0, max = 1.0 },
  max { dim = 1, keepdim = true },
}
-- SPDX-License-Identifier: Apache-2.0
