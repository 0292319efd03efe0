return layer "t" {
  input = { "N", 4, 8, 8 },
  sum { dim = 1, keepdim = true },
  conv2d { out_channels = 6, kernel = 3 },
}
