return layer { input = { "N", 4, 8, 8 } }
