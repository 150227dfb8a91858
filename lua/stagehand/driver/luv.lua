-- The luv driver: a uv timer pumps the orchestrator on the loop. The timer is
-- set for the orchestrator's next wake (0 when work is queued) and stopped
-- when nothing is pending, so the loop ends when the jobs do.
local uv = require "luv"

local M = {}

local function loop_clock()
  uv.update_time()
  return uv.now()
end

function M.new(clock)
  local d = { name = "luv", clock = clock or loop_clock }
  local timer = uv.new_timer()
  local due -- absolute clock time the timer is set for, or nil
  local orch

  local function fire()
    due = nil
    if orch and not orch.stepping then orch:step(orch.slice_ms > 0 and orch.slice_ms or nil) end
  end

  function d.reschedule(o)
    orch = o
    local nw = o:next_wake()
    if nw == nil then
      if due then
        timer:stop()
        due = nil
      end
      return
    end
    local at = o.clock() + nw
    if due and due <= at then return end
    due = at
    timer:start(math.max(0, math.ceil(nw)), 0, fire)
  end

  -- Runs the loop until something happens or `ms` passes.
  function d.pass(_, ms)
    local t = uv.new_timer()
    t:start(math.max(0, math.ceil(ms)), 0, function() end)
    uv.run("once")
    t:close()
  end

  function d.close()
    if not timer:is_closing() then timer:close() end
  end
  return d
end

return M
