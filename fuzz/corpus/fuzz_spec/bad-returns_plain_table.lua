return { input = { "N", 4, 8, 8 } }
