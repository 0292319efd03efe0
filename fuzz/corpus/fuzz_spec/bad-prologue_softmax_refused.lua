return layer "t" {
  input = { "N", 4, 8, 8 },
  softmax { dim = 1 },
  conv2d { out_channels = 6, kernel = 3 },
}
