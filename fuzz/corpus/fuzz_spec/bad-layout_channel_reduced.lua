return layer "t" {
  input = { "N", 4, 8, 8 },
  layout = "channels_last",
  conv2d { out_channels = 6, kernel = 3 },
  max { dim = 1 },
}
