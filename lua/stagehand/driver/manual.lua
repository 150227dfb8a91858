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
  local waited = 0 -- (real ms a fake clock's passes waited on other threads for nothing)
  -- Lets `ms` of time pass while orch:wait or orch:loop has nothing to run:
  -- a fake clock (one with :advance) is advanced, a real one slept on.
  -- While work on other threads may end a job, the wait is on them: it
  -- returns as soon as one sends something. (A fake clock stands still
  -- while they run, and moves on only once `ms`, at most a second, of real
  -- time brought nothing. A wait cut short, by a source looked at more
  -- often than it signals (a LÖVE thread still starting), counts toward
  -- that second, and the caller steps and passes again: else a spec's
  -- first orch:wait on a new LÖVE pool timed out at once.)
  function d.pass(o, ms)
    local fake = o.fake_clock
    if E.outside_pending(o) then
      if not fake then
        E.outside_wait(o, ms)
        return
      end
      local want, t0 = math.min(ms, 1000), B.now_ms()
      if E.outside_wait(o, want) then
        waited = 0
        return
      end
      waited = waited + (B.now_ms() - t0)
      if waited < want then return end
      waited = 0
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
