setmetatable({}, {})
