return layer "t" {
  conv2d { out_channels = 6, kernel = 3 },
}
