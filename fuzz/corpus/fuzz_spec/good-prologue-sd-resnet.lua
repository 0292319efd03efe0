return layer "prologue_sd_resnet" {
  input = { "N", 64, 16, 16 },
  group_norm { name = "norm1", groups = 32, eps = 1e-6 },
  silu {},
  conv2d { name = "conv1", out_channels = 64, kernel = 3, padding = 1 },
  group_norm { name = "norm2", groups = 32, eps = 1e-6 },
  silu {},
}
