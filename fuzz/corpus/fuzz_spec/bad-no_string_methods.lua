local r = ("x"):rep(100)
