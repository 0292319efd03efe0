local r = string.rep("x", 10)
