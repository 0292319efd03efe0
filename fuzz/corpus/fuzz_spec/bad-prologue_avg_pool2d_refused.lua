return layer "t" {
  input = { "N", 4, 8, 8 },
  avg_pool2d { kernel = 2 },
  conv2d { out_channels = 6, kernel = 3 },
}
