-- Run by build/oom_host after failing_alloc.lua (`make test-oom`): worker
-- pools under an allocator that fails on demand. Each operation runs with
-- its first allocation failing, then its second, and so on until it runs
-- through; each time it must finish or raise "not enough memory", and once
-- the dust settles every Handle it made has ended, on the orchestrator's
-- own clock (a request whose reply was lost stalls; one left queued, whose
-- clock is paused, would wait for good), and nothing is left behind. The
-- workers' own states use the system's allocator, so only the main side's
-- memory runs out: making requests, collecting replies, destroying.
local stagehand = require "stagehand"
local T = require "stagehand.testing"

local SOURCE = [[
local M = {}
function M.echo(x) return x end
function M.boom() error("boom") end
return M
]]

local function new_scene()
  local orch, clock = T.new { log = function() end, stall_ms = 5000 }
  local pool = stagehand.pool(orch, { module = "w", source = SOURCE, size = 2 })
  assert(orch:wait(pool:run("echo", 0), 10000) == "done", "the workers never came up")
  return { orch = orch, clock = clock, pool = pool, handles = {} }
end

-- Real time for the workers to answer (their replies wait to be collected).
local function let_workers_answer(ms)
  local t = os.clock()
  while os.clock() - t < ms / 1000 do end
end

-- Each: {name, setup(s) with memory to spare, op(s) under the failing allocator}.
local scenarios = {
  { "pool:run with a table payload, a key and a priority", function() end, function(s)
    s.handles[1] = s.pool:run("echo", { a = 1, b = { 2, 3 } }, { key = "k", priority = 5 })
    s.handles[2] = s.pool:run("echo", "x", { label = "second" })
  end },
  { "joining a keyed request, and when on it", function(s)
    s.handles[1] = s.pool:run("echo", 1, { key = "k" })
  end, function(s)
    s.handles[2] = s.pool:run("echo", 2, { key = "k" })
    s.handles[3] = s.orch:when("k")
  end },
  { "a step that collects replies and failures", function(s)
    for i = 1, 8 do s.handles[i] = s.pool:run(i == 4 and "boom" or "echo", { i = i }) end
    let_workers_answer(20)
  end, function(s) s.orch:step() end },
  { "pool:run inside a job that awaits it", function() end, function(s)
    s.handles[1] = s.orch:run("loader", function(job) return job:await(s.pool:run("echo", 7)) end)
  end },
  { "reprioritise and cancel queued requests", function(s)
    s.pool:pause()
    for i = 1, 6 do s.handles[i] = s.pool:run("echo", i) end
  end, function(s)
    s.pool:reprioritise(function(_, p) return p + 1 end)
    s.handles[2]:cancel("scrolled away")
    s.pool:resume()
  end },
  { "destroy with queued requests", function(s)
    s.pool:pause()
    for i = 1, 4 do s.handles[i] = s.pool:run("echo", i) end
  end, function(s) s.handles[#s.handles + 1] = s.pool:destroy() end },
}

-- The dust settles with memory to spare: the orchestrator's clock run on
-- past every stall time, and the workers given real time for what is
-- still queued (a queued request's clock is paused: only a worker, or the
-- pool's end, ends it); by then every Handle has ended. Then the pool is
-- destroyed and the orchestrator closed.
local function settle(s, fail)
  if not s.pool.destroyed then s.pool:resume() end
  let_workers_answer(5)
  T.settle(s.orch, 20000, 250)
  for _, h in ipairs(s.handles) do
    if h:state() == "running" then s.orch:wait(h, 10000) end
  end
  for i, h in ipairs(s.handles) do
    if h:state() == "running" then fail("Handle " .. i .. " (" .. h.label .. ") never ended") end
  end
  s.orch:wait(s.pool:destroy(), 10000)
  s.orch:close("the spec ends")
  while s.orch:step() > 0 do end
end

local here = debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./"
dofile(here .. "driver.lua")(scenarios, new_scene, settle, "pool operations")
