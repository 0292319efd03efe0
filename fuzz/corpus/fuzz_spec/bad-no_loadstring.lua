local f = loadstring("return 1")
