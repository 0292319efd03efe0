return layer "seed" {
  input = { "N", 2, 10, 10 },
  conv2d { out_channels = 4, kernel = 3 },
  relu {},
}
