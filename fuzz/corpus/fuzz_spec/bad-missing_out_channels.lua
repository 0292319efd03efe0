return layer "t" {
  input = { "N", 4, 8, 8 },
  conv2d { kernel = 3 },
}
