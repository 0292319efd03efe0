local m = getmetatable("")
