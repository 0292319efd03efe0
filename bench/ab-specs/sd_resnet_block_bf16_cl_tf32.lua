-- SPDX-License-Identifier: Apache-2.0
-- A/B spec (v30): specs/blocks/sd_resnet_block.lua in bf16, channels last, every layer at precision "tf32"
-- (the peer of PyTorch's bf16 run; bench/RESULTS.md 2026-12-02, tenth session)
-- Stable Diffusion's UNet ResnetBlock2D at 320 channels, 64x64 (diffusers; in = out
-- channels, so no shortcut conv). The time embedding's projection time_emb_proj(silu(temb))
-- is a Linear outside the convs: the block takes its result, [N, 320], as the input "temb",
-- broadcast over H and W (temb[:, :, None, None] in diffusers).
return block "sd_resnet_block" {
  input = { "N", 320, 64, 64 }, dtype = "bf16", layout = "channels_last",
  inputs = { temb = { "N", 320 } },
  layer "h" { precision = "tf32",
    group_norm { name = "norm1", groups = 32, eps = 1e-5 }, silu {},
    conv2d { name = "conv1", out_channels = 320, kernel = 3, padding = 1 },
    add { tensor = "temb" },
  },
  layer "out" { precision = "tf32",
    group_norm { name = "norm2", groups = 32, eps = 1e-5 }, silu {},
    conv2d { name = "conv2", out_channels = 320, kernel = 3, padding = 1 },
    add { tensor = "input" },   -- input_tensor + hidden_states (output_scale_factor 1)
  },
}
