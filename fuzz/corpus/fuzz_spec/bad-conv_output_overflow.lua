return layer "t" {
  input = { "N", 1, 40000, 40000 },
  conv2d { out_channels = 2, kernel = 1 },
}
