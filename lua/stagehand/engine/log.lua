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

-- (Lua 5.1's way. The arguments wait in a table made once, for a function
-- made once that unpacks them before anything else runs: the call needs
-- no memory before it is protected, so memory running out never skips a
-- callback, an on_end's included. A guard nested in the callback may
-- reuse the table: the outer call's arguments are on its stack by then.
-- Beyond HELD_N arguments, a closure over a table of their own.)
local HELD_N = 8
local held_fn, held_n, held = nil, 0, {}
for i = 1, HELD_N do held[i] = false end
local function call_held() return held_fn(unpack(held, 1, held_n)) end
local function xpcall_packed(fn, ...)
  local n = select("#", ...)
  if n > HELD_N then
    local args = { n = n, ... }
    return xpcall(function() return fn(unpack(args, 1, args.n)) end, handler)
  end
  for i = 1, n do held[i] = (select(i, ...)) end
  held_fn, held_n = fn, n
  local ok, err = xpcall(call_held, handler)
  for i = 1, n do held[i] = false end -- (no callback's arguments kept alive)
  held_fn = nil
  return ok, err
end

-- Called when a guarded call ran out of memory: what it was doing (an
-- abort's handlers settle groups) may be left undone, for the next step to
-- mend (settle.lua registers it).
local out_of_memory = function() end
function M.on_out_of_memory(fn) out_of_memory = fn end
local find = string.find

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
    if type(err) == "string" and (find(err, "not enough memory", 1, true)
      or find(err, "error in error handling", 1, true)) then out_of_memory() end
    if type(what) ~= "string" then what = "an on_end callback of " .. what:_describe() end
    local logged = pcall(log or M.stderr, "[stagehand] " .. what .. " raised: " .. tostring(err))
    if not logged then M.stderr("[stagehand] " .. what .. " raised: " .. tostring(err)) end
  end
  return ok
end

return M
