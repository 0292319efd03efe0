return layer "t" {
  input = { "N", 4, 8, 8 },
  relu { as = "r" },
  conv2d { out_channels = 6, kernel = 3 },
}
