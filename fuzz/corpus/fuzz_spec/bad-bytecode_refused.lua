LuaT
