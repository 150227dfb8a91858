local signal = require "stagehand.engine.signal"
local errors = require "stagehand.engine.errors"
local E = require "stagehand.engine.engine"

local M = {}

-- Timeouts (orch:timeout): signals that abort at a time of this
-- orchestrator's clock. o.timeouts is kept sorted by due time, equal ones
-- in the order they were made; a game makes a few, so insertion is a walk.

function M.add(o, due, sig, ms)
  local ts = o.timeouts
  local i = #ts
  while i > 0 and ts[i].due > due do
    ts[i + 1] = ts[i]
    i = i - 1
  end
  ts[i + 1] = { due = due, sig = sig, ms = ms }
end

--- Aborts every timeout due by `now`, earliest first.
function M.fire(o, now)
  local ts = o.timeouts
  while ts[1] ~= nil and ts[1].due <= now do
    local t = table.remove(ts, 1)
    signal.abort(t.sig, errors.new("timeout", "orch:timeout",
      "timed out after " .. errors.ms(t.ms) .. " ms", { ms = t.ms }))
  end
end

-- The earliest due time of a timeout something listens to (a run's signal,
-- an abortable), or nil: one nobody listens to keeps no host awake.
function M.next_due(o)
  local ts = o.timeouts
  for i = 1, #ts do
    if ts[i].sig._ls ~= nil then return ts[i].due end
  end
  return nil
end

E.on("step_began", function(o, now)
  if o.timeouts[1] ~= nil then M.fire(o, now) end
end)
E.on("next_due", function(o)
  if o.timeouts[1] == nil then return nil end
  return M.next_due(o)
end)

return M
