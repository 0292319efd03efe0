local a = 1
function helper() end
