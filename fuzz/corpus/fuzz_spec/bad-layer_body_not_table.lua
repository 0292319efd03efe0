return layer "t" (42)
