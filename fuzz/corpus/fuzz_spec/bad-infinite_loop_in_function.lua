local function spin()
  while true do end
end
spin()
