-- Small helpers several specs share: a file's text, and the interpreter
-- running this spec (to run a script in a process of its own).
local M = {}

--- The whole text of the file at `path`.
function M.read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

--- The interpreter running this spec: luajit, lua5.4 or lua5.1.
function M.interpreter()
  if rawget(_G, "jit") then return "luajit" end
  return _VERSION == "Lua 5.4" and "lua5.4" or "lua5.1"
end

return M
