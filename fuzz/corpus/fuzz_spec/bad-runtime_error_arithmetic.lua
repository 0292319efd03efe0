local t = {}
local y = t.missing + 1
