-- Diagnostics: one line per message to stderr unless the orchestrator is given
-- its own `log`, and a guard that keeps user callbacks from harming anything.
local M = {}

function M.stderr(message)
  io.stderr:write(tostring(message), "\n")
end

local traceback = debug.traceback
local function handler(e)
  return traceback(tostring(e), 2)
end

--- Calls fn(...) protected; an error is written through `log` with `what`.
function M.guard(log, what, fn, ...)
  local ok, err
  if select("#", ...) == 0 then
    ok, err = xpcall(fn, handler)
  else
    local args = { n = select("#", ...), ... }
    ok, err = xpcall(function() return fn((unpack or table.unpack)(args, 1, args.n)) end, handler)
  end
  if not ok then
    local logged = pcall(log or M.stderr, "[stagehand] " .. what .. " raised: " .. tostring(err))
    if not logged then M.stderr("[stagehand] " .. what .. " raised: " .. tostring(err)) end
  end
  return ok
end

return M
