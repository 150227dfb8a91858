-- Run by scripts/oom.sh after failing_alloc.lua (`make test-oom`): worker
-- pools and ports under an allocator that fails on demand. Each operation
-- runs with its first allocation failing, then its second, and so on until
-- it runs through; each time it must finish or raise "not enough memory",
-- and once the dust settles every Handle it made has ended, on the
-- orchestrator's own clock (a request whose reply was lost stalls; one left
-- queued, whose clock is paused, would wait for good), and nothing is left
-- behind. The workers' own states and threads use the system's
-- allocator, so only the main side's memory runs out (Lua's and the
-- core's): making requests, collecting replies, destroying, receiving from
-- a port.
local stagehand = require "stagehand"
local T = require "stagehand.testing"
local outside = require "stagehand.threads.outside"
local E = require "stagehand.engine.engine"

if not package.path:find("spec/fixtures/?.lua", 1, true) then -- (fixture_worker, for spawn)
  package.path = "spec/fixtures/?.lua;" .. package.path
end

local SOURCE = [[
local M = {}
function M.echo(x) return x end
function M.boom() error("boom") end
function M.steps(n)
  local w = require "stagehand.worker"
  for i = 1, n do w.progress(i, n) end
  return n
end
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
  -- (nothing loads twice: a join that ends done has the first's reply)
  { "joining a keyed request, and when on it", function(s)
    s.handles[1] = s.pool:run("echo", 1, { key = "k" })
    s.check = function(fail)
      local h = s.handles[2]
      if h and h._st == "done" and h._v[1] ~= 1 then fail("the join's request ran: " .. tostring(h._v[1])) end
    end
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
  -- A value taken from a port whose decoding runs out of memory stays
  -- with the port's handle: the next receive gives it (check, below).
  -- (What the op stores goes where memory was made for it in setup: a
  -- value received and then dropped by the op's own store is not lost by
  -- the port.)
  { "receiving from a port", function(s)
    s.port = stagehand.port()
    s.port:post({ name = "tile", cells = { 1, 2, 3 }, text = ("x"):rep(200) })
    s.port:post("second")
    s.got = { false, false }
    s.check = function(fail)
      local got = s.got
      if not got[1] then got[1], got[2] = s.port:try_receive() end
      local v = got[2]
      if not (got[1] and type(v) == "table" and v.name == "tile" and v.cells[3] == 3 and #v.text == 200) then
        fail("the first value was lost or changed")
      end
      local ok, second = s.port:try_receive()
      if not (ok and second == "second") or s.port:count() ~= 0 then fail("the second value did not follow it") end
    end
  end, function(s) s.got[1], s.got[2] = s.port:try_receive() end },
  { "draining a port", function(s)
    s.port = stagehand.port()
    for i = 1, 4 do s.port:post({ i = i }) end
    s.seen, s.n = { 0, 0, 0, 0 }, 0
    s.keep = function(v)
      s.n = s.n + 1
      s.seen[s.n] = v.i
    end
    s.check = function(fail)
      s.port:drain(s.keep)
      local seen = table.concat(s.seen, ",", 1, s.n)
      if seen ~= "1,2,3,4" then fail("drained " .. seen .. " where 1,2,3,4 were posted") end
    end
  end, function(s) s.port:drain(s.keep) end },
  -- A pool made under the failing allocator: its queue, notifier and
  -- workers (each made in turn, their threads started or not); a pool that
  -- raises is never handed out, and settling must leave no thread behind.
  { "making a pool of two workers", function() end, function(s)
    s.second = stagehand.pool(s.orch, { module = "w2", source = SOURCE, size = 2 })
    s.handles[1] = s.second:run("echo", "first")
  end },
  { "posting forty values to a port, then receiving them", function(s)
    s.port = stagehand.port()
    s.posted = 0
    s.check = function(fail)
      for i = s.posted + 1, 40 do s.port:post(i) end -- (what the op did not post)
      for i = 1, 40 do
        local ok, v = s.port:try_receive()
        if not ok or v ~= i then fail("value " .. i .. " came as " .. tostring(v)) return end
      end
    end
  end, function(s)
    for i = 1, 40 do
      s.port:post(i)
      s.posted = i
    end
  end },
  -- A long-lived worker doubling what comes in on one port onto another.
  { "spawning a long-lived worker between two ports", function(s)
    require "stagehand.threads.spawn" -- (loaded with memory to spare, as any game's first spawn)
    s.inbox, s.outbox = stagehand.port(), stagehand.port()
  end, function(s)
    s.service = stagehand.spawn(s.orch, "fixture_worker.service", s.inbox, s.outbox)
    s.handles[1] = s.service.done
    s.inbox:post(21)
  end },
  -- Two jobs meeting in a round and summing their shares: one the failure
  -- kept from being made, or that failed, leaves the other waiting until
  -- its clock stalls (and only then may it stall).
  { "two jobs summing their shares in a round", function(s)
    s.rounds = stagehand.rounds(2, 1)
    s.may_stall = function(i)
      local other = s.handles[3 - i]
      return other == nil or other:state() == "failed"
    end
  end, function(s)
    for i = 1, 2 do
      s.handles[i] = s.orch:run("participant " .. i, function()
        local out = {}
        assert(s.rounds:sum(1, 2, i, { i }, out), "the round was aborted")
        return out[1]
      end)
    end
    s.orch:step()
  end },
  -- A paused pool resumed: its queued requests go to the workers, one of
  -- them awaited by a job (whose clock is paused while it waits).
  { "resuming a paused pool, a job awaiting a request", function(s)
    s.pool:pause()
    for i = 1, 3 do s.handles[i] = s.pool:run("echo", i) end
    local r = s.handles[1]
    s.handles[4] = s.orch:run("awaiter", function(job) return job:await(r) end)
    s.orch:step()
  end, function(s)
    s.pool:resume()
    s.orch:step()
  end },
  -- Requests withdrawn by their signal, queued and running.
  { "a controller aborting requests", function(s)
    s.ctl = stagehand.controller()
    s.pool:pause()
    for i = 1, 3 do s.handles[i] = s.pool:run("echo", i, { signal = s.ctl.signal }) end
    s.orch:step()
    s.check = function(fail) -- (an abort that began reaches every request following it)
      for i = 1, 3 do
        if s.ctl.signal.aborted and s.handles[i]._st == "done" then fail("request " .. i .. " ran after its abort") end
      end
    end
  end, function(s)
    s.ctl:abort("the player left")
    s.orch:step()
  end },
  -- A job awaiting a queued request that its caller cancels.
  { "cancelling a queued request a job awaits", function(s)
    s.pool:pause()
    s.handles[1] = s.pool:run("echo", "mesh")
    local r = s.handles[1]
    s.handles[2] = s.orch:run("awaiter", function(job) return job:await(r) end)
    s.orch:step()
    s.cancelled = false
    s.check = function(fail)
      if s.cancelled and s.handles[1]._st ~= "cancelled" then fail("cancelled, and ended " .. s.handles[1]._st) end
    end
  end, function(s)
    s.handles[1]:cancel("scrolled away")
    s.cancelled = true
    s.orch:step()
  end },
  -- Jobs receiving from a port that is closed: each gets nil (and may
  -- stall only if the close itself could not be made).
  { "closing a port two jobs receive from", function(s)
    s.port = stagehand.port()
    s.may_stall = function() return not s.port:closed() end
    for i = 1, 2 do s.handles[i] = s.orch:run("receiver " .. i, function() return s.port:receive() end) end
    s.orch:step()
  end, function(s)
    s.port:close()
    s.orch:step()
  end },
  -- Requests queued behind a paused pool, one raised by a visible job
  -- awaiting it and one followed by a `when` on its key, then the pool
  -- resumed: every request is still answered.
  { "a visible job and a when raising queued requests", function(s)
    s.pool:pause()
    for i = 1, 4 do
      s.handles[i] = s.pool:run("echo", i, { priority = "background", key = "r" .. i })
    end
  end, function(s)
    local last = s.handles[4]
    s.handles[5] = s.orch:run("portrait", function(job) return job:await(last) end, { priority = "visible" })
    s.handles[6] = s.orch:when("r3", "following r3", { priority = "visible" })
    s.orch:step()
    s.pool:resume()
    s.orch:step()
  end },
  -- Requests whose priority functions are read as workers come free, one
  -- joined by key from a job at a higher rank.
  { "requests with priority functions, one joined by key", function(s)
    s.near = 0
    for i = 1, 4 do
      s.handles[i] = s.pool:run("echo", i, {
        key = "q" .. i,
        priority = function() return s.near == i and 100 or i end,
      })
    end
  end, function(s)
    s.near = 2
    s.handles[5] = s.orch:run("joiner", function(job)
      return job:await(s.pool:run("echo", 0, { key = "q1", priority = "visible" }))
    end)
    s.orch:step()
  end },
  -- Tracked requests whose workers report their progress: collecting
  -- the reports and the replies (checked once settled: no task of the
  -- loading screen still runs, and its bar is full).
  { "collecting progress and replies of tracked requests", function(s)
    s.load = stagehand.tracker(s.orch)
    s.load:expect("decode", 3)
    for i = 1, 3 do s.handles[i] = s.pool:run("steps", 4, { phase = "decode" }) end
    s.check = function(fail)
      local c = s.load:counts("decode")
      if c.running ~= 0 then fail(c.running .. " tracked request(s) still run") end
      if s.load:fraction() ~= 1 then fail("the bar's fraction is " .. tostring(s.load:fraction())) end
      s.load:close()
    end
    s.orch:step() -- (the requests go to the workers)
    let_workers_answer(20)
  end, function(s) s.orch:step() end },
  { "destroy with queued requests", function(s)
    s.pool:pause()
    for i = 1, 4 do s.handles[i] = s.pool:run("echo", i) end
  end, function(s) s.handles[#s.handles + 1] = s.pool:destroy() end },
}

-- Steps s.orch while the workers answer in real time, until done() or 2 s
-- have passed: each wait blocks until a worker sends something, or 5 ms,
-- so the workers get the cores.
local function step_until(s, done)
  for _ = 1, 400 do
    if done() then return end
    E.outside_wait(s.orch, 5)
    s.orch:step()
  end
end

-- The dust settles with memory to spare: the orchestrator's clock run on
-- past every stall time, and the workers given real time for what is
-- still queued (a queued request's clock is paused: only a worker, or the
-- pool's end, ends it); by then every Handle has ended. Then the pool is
-- destroyed and the orchestrator closed.
local function settle(s, fail)
  if not s.pool.destroyed then s.pool:resume() end
  if s.service then
    s.service:stop()
    s.orch:wait(s.service.done, 10000)
    local st = s.service:state()
    if st ~= "stopped" and st ~= "failed" then fail("the long-lived worker is " .. st .. " once stopped") end
  end
  if s.inbox then
    -- (a long-lived worker's pool leaves the orchestrator once its worker
    -- exits, or at once when none could start: its exit is given up to
    -- 2 s, a busy machine's thread may take that long to end)
    local function listed()
      for _, src in ipairs(outside.sources(s.orch)) do
        if src.service then return src.service end
      end
    end
    step_until(s, function() return not listed() end)
    local still = listed()
    if still then fail("a long-lived worker's pool is still the orchestrator's: " .. still) end
  end
  -- (the workers of the scene's pool, not of one made under the failure,
  -- answer in real time on a fake clock that stands still meanwhile: a
  -- request stalls only if its reply was lost)
  step_until(s, function() return s.pool.destroyed or s.pool:pending() == 0 end)
  T.settle(s.orch, 20000, 250)
  if not s.pool.destroyed and s.pool:pending() > 0 then
    fail("pool:pending() is " .. s.pool:pending() .. " once every request has ended")
  end
  for _, h in ipairs(s.handles) do
    if h:state() == "running" then s.orch:wait(h, 10000) end
  end
  for i, h in ipairs(s.handles) do
    if h:state() == "running" then fail("Handle " .. i .. " (" .. h.label .. ") never ended") end
    if h:state() == "stalled" and not (s.may_stall and s.may_stall(i)) then
      fail("Handle " .. i .. " (" .. h.label .. ") stalled: " .. tostring(h._v))
    end
  end
  if s.check then s.check(fail) end
  if s.rounds then
    -- (both ran: each got the sum of both shares)
    if s.handles[2] and s.handles[1]:state() == "done" and s.handles[2]:state() == "done" then
      for i = 1, 2 do
        local v = select(2, s.orch:wait(s.handles[i], 0))
        if v ~= 3 then fail("participant " .. i .. " summed " .. tostring(v)) end
      end
    end
    s.rounds:abort()
  end
  if s.second then s.orch:wait(s.second:destroy(), 10000) end
  s.orch:wait(s.pool:destroy(), 10000)
  s.orch:close("the spec ends")
  local steps = 0
  while s.orch:step() > 0 do
    steps = steps + 1
    if steps == 1000 then error("closed, and still running jobs after 1000 steps", 0) end
  end
end

local here = debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./"
dofile(here .. "driver.lua")(scenarios, new_scene, settle, "pool operations")
