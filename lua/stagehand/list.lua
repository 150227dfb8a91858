-- Small list helpers shared by the modules that keep ordered lists.
local M = {}

--- Removes the last occurrence of `v` from the array `list`; true if found.
function M.remove_value(list, v)
  for i = #list, 1, -1 do
    if list[i] == v then
      table.remove(list, i)
      return true
    end
  end
  return false
end

return M
