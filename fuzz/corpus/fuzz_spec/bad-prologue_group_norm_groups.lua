return layer "t" {
  input = { "N", 4, 8, 8 },
  group_norm { groups = 3 },
  conv2d { out_channels = 6, kernel = 3 },
}
