return layer "t" {
  input = { "N", 4, 8, 8 },
  group_norm { groups = 2 },
  silu {},
  instance_norm {},
  conv2d { out_channels = 6, kernel = 3 },
}
