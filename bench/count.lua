-- stagehand's cost per job counted, not timed: `make bench-count` (LuaJIT,
-- under cachegrind). A clock on a small shared host swings by 2x from one
-- minute to the next; cachegrind's count of instructions run, and of reads
-- that missed its simulated last-level cache and went to memory, does not
-- (what is left is LuaJIT choosing its traces a little differently in each
-- process: about 1.5%, so each count is the median of three processes).
--
-- Each case runs at n jobs and at none, in processes of their own, and
-- the difference over n is its cost per job: loading LuaJIT, stagehand and
-- the case's setup falls out. Every figure is printed next to the same
-- count for a bare coroutine parked and resumed, taken in this same run.
--
--   luajit bench/count.lua            runs every case under cachegrind
--   luajit bench/count.lua CASE N     runs one case (what cachegrind runs)
local stagehand = require "stagehand"
local T = require "stagehand.testing"
local shared = dofile((arg[0]:match("^(.*[/\\])") or "./") .. "cases.lua")

local N = 100000
local sources = {
  function() return "scene" end,
  function() return "background" end,
  "visible",
}

-- n jobs queued behind four holders (as in bench.lua, section 7).
local function through_pool(n)
  local o = T.new { pools = { dressing = 4 }, stall_ms = 1e12 }
  local hold = stagehand.future()
  shared.fill_pool(o, "dressing", hold)
  local function pooled(job)
    local release = job:slot("dressing")
    release()
  end
  for i = 1, n do o:run("dress", pooled, { priority = sources[i % 3 + 1] }) end
  hold:resolve()
  o:step()
  assert(o.nrunning == 0, "pool jobs left running")
end

local cases = {
  -- n coroutines parked at once, then run to their end: the floor.
  bare = shared.bare,
  -- A pool with nothing else: a FIFO of waiting coroutines.
  minimal = shared.minimal,
  -- The same with a FIFO lane for each of three priorities: its jobs run
  -- every third one in the order they were made, as the pool case's do.
  minimal_lanes = shared.minimal_lanes,
  -- A trivial job: run to done, no wait.
  trivial = function(n)
    local o = T.new { stall_ms = 1e12 }
    local work = function() return 1 end
    for _ = 1, n do o:run("trivial", work) end
  end,
  -- The target of issue 4: 100,000 jobs through a pool of 4, three sources.
  pool = through_pool,
  -- The same jobs 1,000 at a time: what the size adds.
  batches = function(n)
    for _ = 1, n / 1000 do through_pool(1000) end
  end,
  -- n jobs awaited through one stagehand.all by a loader.
  all = function(n)
    local o = T.new { stall_ms = 1e12 }
    local f = stagehand.future()
    local hs = {}
    for i = 1, n do hs[i] = o:run("asset", function(job) return job:await(f) end) end
    o:run("loader", function(job) return job:await(stagehand.all(hs)) end)
    f:resolve(1)
    o:step()
    assert(o.nrunning == 0, "assets left running")
  end,
  -- n loads, each with a controller of its own (a tile withdrawn when it
  -- scrolls away), that all finish.
  controller = function(n)
    shared.loads(n, function() return { signal = stagehand.controller().signal } end)
  end,
  -- n waiting loads cancelled (their cleanup runs: the wait raises).
  cancel = function(n)
    local o = T.new { stall_ms = 1e12 }
    local f = stagehand.future()
    local hs = {}
    for i = 1, n do hs[i] = o:run("tile", function(job) return job:await(f) end) end
    for i = 1, n do hs[i]:cancel("scrolled away") end
    o:step()
    assert(o.nrunning == 0 and o.qn == 0, "tiles left running")
  end,
}
local ORDER = { "bare", "minimal", "minimal_lanes", "trivial", "pool", "batches", "all", "controller", "cancel" }

local case, n = arg[1], tonumber(arg[2])
if case then
  assert(cases[case], "unknown case " .. tostring(case))
  collectgarbage("stop") -- (as bench.lua's paused rounds: the collector's walks are not the scheduler's cost)
  cases[case](n or N)
  os.exit(0) -- (no lua_close: freeing 100,000 coroutines is not part of any case)
end

-- The driver: each case at N and at 0, three processes each.
local interp = arg[-1] or "luajit"
local me = arg[0]
local function counted(name, jobs)
  local cmd = string.format(
    "valgrind --tool=cachegrind --cache-sim=yes --LL=33554432,16,64 --smc-check=all-non-file "
      .. "--cachegrind-out-file=/dev/null %q %q %s %d 2>&1 >/dev/null",
    interp, me, name, jobs)
  local f = assert(io.popen(cmd))
  local text = f:read("*a")
  f:close()
  local irefs = text:match("I%s+refs:%s+([%d,]+)")
  local llrd = text:match("LLd misses:%s+[%d,]+%s+%(%s*([%d,]+) rd")
  if not irefs or not llrd then error("cachegrind said:\n" .. text) end
  return tonumber((irefs:gsub(",", ""))), tonumber((llrd:gsub(",", "")))
end
local function median3(xs)
  table.sort(xs)
  return xs[2]
end
-- (The last three cost 2-5x a pooled job each: 20,000 of them keep the
-- run short. Their memory reads are not comparable with the 100,000.)
local SIZE = { all = 20000, controller = 20000, cancel = 20000 }
local function per_job(name)
  local is, ms = {}, {}
  local jobs = SIZE[name] or N
  for r = 1, 3 do
    local i1, m1 = counted(name, jobs)
    local i0, m0 = counted(name, 0)
    is[r], ms[r] = (i1 - i0) / jobs, (m1 - m0) / jobs
  end
  return median3(is), median3(ms)
end

print(string.format("stagehand %s on %s, backend %s: per job, %d jobs (all, controller, cancel: 20,000),"
  .. " collector paused (cachegrind, median of 3)", stagehand.VERSION, jit and jit.version or _VERSION,
  stagehand.backend, N))
print(string.format("%-34s %12s %8s %14s %8s", "case", "instructions", "x bare", "memory reads", "x bare"))
local bare_i, bare_m
for _, name in ipairs(ORDER) do
  local i, m = per_job(name)
  if name == "bare" then bare_i, bare_m = i, m end
  print(string.format("%-34s %12.0f %7.2fx %14.2f %7.2fx", name, i, i / bare_i, m, bare_m > 0 and m / bare_m or 0))
end
