return layer "t"
