local d = debug.getinfo(1)
