-- Small list helpers shared by the modules that keep ordered lists.
local M = {}

--- Removes the last occurrence of `v` from the array `list` (at `from` or
--- later, default 1); true if found.
function M.remove_value(list, v, from)
  for i = #list, from or 1, -1 do
    if list[i] == v then
      table.remove(list, i)
      return true
    end
  end
  return false
end

--- The table at map[key], made there if missing (a list or set per key).
function M.at(map, key)
  local t = map[key]
  if not t then
    t = {}
    map[key] = t
  end
  return t
end

return M
