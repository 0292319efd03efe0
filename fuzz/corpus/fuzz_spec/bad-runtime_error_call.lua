local x = 1
error("boom")
