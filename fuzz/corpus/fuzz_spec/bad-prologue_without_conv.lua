return layer "t" {
  input = { "N", 4, 8, 8 },
  group_norm { groups = 2 },
  silu {},
}
