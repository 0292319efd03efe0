collectgarbage()
