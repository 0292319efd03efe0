return layer "t" {
  input = { "N", 4, 8, 8 },
  layer_norm { normalized_shape = { 7, 8 } },
  conv2d { out_channels = 6, kernel = 3 },
}
