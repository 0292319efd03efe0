local ops = { input = { "N", 4, 8, 8 }, conv2d { out_channels = 6, kernel = 3 } }
for i = 1, 60 do ops[#ops + 1] = relu {} end
return layer "t" (ops)
