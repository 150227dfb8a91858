-- Folder driver/ (layer 5): what pumps an orchestrator. manual.lua (a
-- host's frame loop, a spec, orch:wait) and luv.lua (a luv loop, woken by
-- timers and by work on other threads).
--
-- The manual driver: a host frame loop (love.update, an engine tick, a spec)
-- calls orch:step. The clock is the core's monotonic ms unless one is given.
local B = require "stagehand.core.backend"
local E = require "stagehand.engine.engine"

local M = {}

function M.new(clock)
  -- (has_events: false, nothing happens between steps but the host's calls)
  local d = { name = "manual", clock = clock or B.now_ms, has_events = false }
  d.reschedule = function() end
  -- Lets `ms` of time pass while orch:wait or orch:loop has nothing to run:
  -- a fake clock (one with :advance) is advanced, a real one slept on.
  -- While work on other threads may end a job, the wait is on them: it
  -- returns as soon as one sends something. (A fake clock stands still
  -- while they run, and moves on only if `ms` of real time brought nothing.)
  function d.pass(o, ms)
    local fake = o.fake_clock
    if E.outside_pending(o) then
      if E.outside_wait(o, fake and math.min(ms, 1000) or ms) or not fake then return end
    end
    if fake then
      fake:advance(ms)
    else
      B.sleep_ms(ms)
    end
  end
  function d.close() end
  return d
end

return M
