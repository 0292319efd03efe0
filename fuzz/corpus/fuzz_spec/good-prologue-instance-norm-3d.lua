return layer "prologue_instance_norm_3d" {
  input = { "N", 8, 6, 10, 12 },
  layout = "channels_last",
  add { scalar = 0.5 },
  instance_norm { affine = true },
  leaky_relu { negative_slope = 0.1 },
  conv3d { out_channels = 12, kernel = 3, padding = 1, stride = { 1, 2, 2 } },
}
