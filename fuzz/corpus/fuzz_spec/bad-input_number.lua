return layer "t" {
  input = 5,
  conv2d { out_channels = 6, kernel = 3 },
}
