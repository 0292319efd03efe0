rawset(_ENV, "x", 1)
