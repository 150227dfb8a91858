-- Diagnostics: one line per message to stderr unless the orchestrator is given
-- its own `log`, and a guard that keeps user callbacks from harming anything.
local M = {}

function M.stderr(message)
  io.stderr:write(tostring(message), "\n")
end

local show = require("stagehand.engine.errors").show
local traceback = debug.traceback
local function handler(e)
  return traceback(show(e), 2)
end

-- Lua 5.1's xpcall passes no arguments to the function it calls.
local xpcall_args = select(2, xpcall(function(a) return a end, handler, true)) == true
local unpack = unpack or table.unpack

-- (Lua 5.1's way: a closure over the arguments. Its own function: a
-- closure made in guard would close an upvalue at guard's every return,
-- and LuaJIT cannot compile that (NYI: UCLO), so no loop that tells game
-- code of anything would compile.)
local function xpcall_packed(fn, ...)
  local args = { n = select("#", ...), ... }
  return xpcall(function() return fn(unpack(args, 1, args.n)) end, handler)
end

--- Calls fn(...) protected; an error is written through `log` with `what`:
--- a string, or a settle-able whose callback this is (described only when
--- it raised: building the text for every callback cost more than the call).
function M.guard(log, what, fn, ...)
  local ok, err
  if select("#", ...) == 0 then
    ok, err = xpcall(fn, handler)
  elseif xpcall_args then
    ok, err = xpcall(fn, handler, ...)
  else
    ok, err = xpcall_packed(fn, ...)
  end
  if not ok then
    if type(what) ~= "string" then what = "an on_end callback of " .. what:_describe() end
    local logged = pcall(log or M.stderr, "[stagehand] " .. what .. " raised: " .. tostring(err))
    if not logged then M.stderr("[stagehand] " .. what .. " raised: " .. tostring(err)) end
  end
  return ok
end

return M
