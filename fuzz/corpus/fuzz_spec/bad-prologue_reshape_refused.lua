return layer "t" {
  input = { "N", 4, 8, 8 },
  view { shape = { "N", 4, 8, 8 } },
  conv2d { out_channels = 6, kernel = 3 },
}
