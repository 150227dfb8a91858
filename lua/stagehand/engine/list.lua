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

--- Whether the array `list` holds `v`.
function M.has(list, v)
  for i = 1, #list do
    if list[i] == v then return true end
  end
  return false
end

-- Counted sets: map[key] is {[member] = value, n = how many}, dropped from
-- map when its last member leaves. The count is how a set knows it emptied:
-- next() right after removing a key crashed the compiled code of the LuaJIT
-- this project runs on (Debian's 2.1.0-beta3 snapshot). Walk one with
-- M.members, or skip the key "n".

--- Adds v (with value x, default true) to the set at map[key]; true if new.
function M.set_add(map, key, v, x)
  local set = map[key]
  if not set then
    -- (made whole before it is filed: memory that runs out here leaves
    -- no empty set behind)
    set = { n = 1, [v] = x == nil and true or x }
    map[key] = set
    return true
  end
  local fresh = set[v] == nil
  set[v] = x == nil and true or x -- (first: it may need memory)
  if fresh then set.n = set.n + 1 end
  return fresh
end

--- Removes v from the set at map[key]; true if it was there.
function M.set_remove(map, key, v)
  local set = map[key]
  if not (set and set[v] ~= nil) then return false end
  set[v] = nil
  local n = set.n - 1
  set.n = n
  if n == 0 then map[key] = nil end
  return true
end

local each = require("stagehand.core.compat").each

--- A counted set's members as a list, sorted by `before` if given.
function M.members(set, before)
  local out = {}
  for v in each, set do
    if v ~= "n" then out[#out + 1] = v end
  end
  if before then table.sort(out, before) end
  return out
end

return M
