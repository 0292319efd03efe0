local a = 1
local b = "oops
