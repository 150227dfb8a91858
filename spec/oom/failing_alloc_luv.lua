-- Run by scripts/oom.sh after failing_alloc_pools.lua (`make test-oom`):
-- the luv driver under an allocator that fails on demand. Each operation
-- runs with its first allocation failing, then its second, and so on until
-- it runs through (then each C allocation alone); each time it must finish
-- or raise "not enough memory", and once luv's loop has run with memory to
-- spare, every Handle it made has ended on the loop's own time, none of
-- them stalled (a wake, an answer or an end that was lost shows as a
-- stall, at 2 s: ten times what any of them takes on a busy machine), the
-- loop has nothing left to run, and nothing is left behind. The driver's timer and its watch of the worker
-- pool's notifier are what the manual driver's scenarios never reach.
-- (Run with LeakSanitizer off: luv itself loses a handle when Lua's memory
-- runs out between its malloc and its registry reference, in uv.new_poll.
-- The other two scripts check for leaks.)
local stagehand = require "stagehand"
local uv = require "luv"

local SOURCE = [[
local M = {}
function M.echo(x) return x end
return M
]]

local function quiet_log() end

local function new_scene()
  local orch = stagehand.new { driver = "luv", log = quiet_log, stall_ms = 2000, check_ms = 20 }
  return { orch = orch, futures = {}, handles = {} }
end

-- Each: {name, setup(s) with memory to spare, op(s) under the failing allocator}.
local scenarios = {
  { "a job that sleeps, on the loop", function() end, function(s)
    s.handles[1] = s.orch:run("sleeper", function(job) job:sleep(5) return 1 end)
  end },
  { "a future settled from a timer's callback", function(s)
    s.f = stagehand.future("atlas")
    for i = 1, 4 do s.handles[i] = s.orch:run("sprite " .. i, function(job) return job:await(s.f) end) end
    s.timer = uv.new_timer()
  end, function(s)
    s.timer:start(1, 0, function()
      s.timer:close()
      s.f:resolve("atlas")
    end)
  end },
  { "a request on a worker pool the loop watches", function(s)
    s.pool = stagehand.pool(s.orch, { module = "w", source = SOURCE, size = 1 })
  end, function(s)
    s.handles[1] = s.pool:run("echo", { 1, 2 })
    s.handles[2] = s.orch:run("awaits it", function(job) return job:await(s.pool:run("echo", 3)) end)
  end },
  -- A preloader awaiting when_idle while sleepers run on the loop, one of
  -- them cancelled: the driver's timer must still come for the rest.
  { "when_idle beside sleepers, one cancelled, on the loop", function(s)
    for i = 1, 3 do s.handles[i] = s.orch:run("sleeper " .. i, function(job) job:sleep(2 * i) return i end) end
  end, function(s)
    s.handles[4] = s.orch:run("preloader", function(job) return job:await(s.orch:when_idle()) end)
    s.handles[2]:cancel("scrolled away")
  end },
}

-- The loop runs until it has nothing left, or 10 s pass: every Handle must
-- have ended by then. Then the pool goes, the orchestrator closes, and the
-- loop must end with nothing of stagehand's left on it.
local function settle(s, fail)
  if s.f and s.f:state() == "pending" then s.f:resolve("late") end
  if s.timer and not s.timer:is_closing() then s.timer:close() end
  local until_ms = uv.now() + 10000
  local function ended()
    for _, h in ipairs(s.handles) do
      if h:state() == "running" then return false end
    end
    return true
  end
  while not ended() and uv.now() < until_ms do
    uv.run("once")
    uv.update_time()
  end
  for i, h in ipairs(s.handles) do
    if h:state() == "running" then fail("Handle " .. i .. " (" .. h.label .. ") never ended") end
    if h:state() == "stalled" then fail("Handle " .. i .. " (" .. h.label .. ") stalled: " .. tostring(h._v)) end
  end
  if s.pool then s.orch:wait(s.pool:destroy(), 10000) end
  s.orch:close("the spec ends")
  local turns = 0
  while uv.run("nowait") do
    turns = turns + 1
    if turns == 10000 then fail("the loop still had something to run after close") break end
  end
end

local here = debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./"
dofile(here .. "driver.lua")(scenarios, new_scene, settle, "operations on the luv driver")
