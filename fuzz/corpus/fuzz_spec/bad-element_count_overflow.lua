return layer "t" {
  input = { "N", 65536, 65536, 65536 },
  conv2d { out_channels = 6, kernel = 3 },
}
