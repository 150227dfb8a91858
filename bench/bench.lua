-- stagehand benchmarks: `make bench` (LuaJIT). Every figure is a ratio to a
-- baseline measured in this same process, because the machine is small and
-- noisy. Each case is timed several times and the median kept.
local stagehand = require "stagehand"
local T = require "stagehand.testing"

local clock = os.clock
local co_create, co_resume, co_yield = coroutine.create, coroutine.resume, coroutine.yield

local ROUNDS = 7

local function median(xs)
  table.sort(xs)
  return xs[math.ceil(#xs / 2)]
end

-- ns per op of fn(n), the median of ROUNDS runs.
local function time(n, fn)
  fn(math.max(1, math.floor(n / 10))) -- warm the JIT
  local xs = {}
  for r = 1, ROUNDS do
    collectgarbage()
    local t0 = clock()
    fn(n)
    xs[r] = (clock() - t0) * 1e9 / n
  end
  return median(xs)
end

local results = {}
local function report(name, ns, base_name, base_ns, target)
  local ratio = ns / base_ns
  local ok = target == nil or ratio <= target
  results[#results + 1] = { name = name, ok = ok }
  print(string.format("%-46s %9.1f ns/op   %-28s %9.1f ns/op   ratio %5.2fx%s", name, ns, base_name, base_ns, ratio,
    target and string.format("  (target <= %gx: %s)", target, ok and "met" or "MISSED") or ""))
end

print(string.format("stagehand %s on %s, backend %s", stagehand.VERSION, jit and jit.version or _VERSION, stagehand.backend))
print()

-- 1. run -> done of a trivial job, against a bare coroutine create + finish.
local N = 200000
local function noop() end
local bare_create = time(N, function(n)
  for _ = 1, n do co_resume(co_create(noop)) end
end)
local orch = T.new()
local function trivial() return 1 end
local run_done = time(N, function(n)
  for _ = 1, n do orch:run("trivial", trivial) end
end)
report("run -> done of a trivial job", run_done, "coroutine create+resume", bare_create, 5)

-- 2. await of a future settled by another, against a bare resume/yield trip.
local bare_trip = time(N, function(n)
  local co = co_create(function()
    while true do co_yield() end
  end)
  for _ = 1, n do co_resume(co) end
end)
do
  local o = T.new { stall_ms = 1e12 }
  local futures = {}
  local function await_loop(n)
    local i = 0
    local f = stagehand.future()
    futures[1] = f
    local h = o:run("awaiter", function(job)
      while i < n do
        i = i + 1
        job:await(futures[1])
      end
    end)
    while i < n do
      local cur = futures[1]
      local nxt = stagehand.future()
      futures[1] = nxt
      cur:resolve(i)
      o:step()
    end
    futures[1]:resolve()
    o:step()
    assert(h:state() == "done")
  end
  local await_pending = time(N, await_loop)
  report("await of a future settled by another", await_pending, "coroutine resume/yield", bare_trip, 6)
end
do
  local o = T.new()
  local f = stagehand.future()
  f:resolve(1)
  local await_settled = time(N, function(n)
    o:run("settled", function(job)
      for _ = 1, n do job:await(f) end
    end)
  end)
  report("await of an already-settled future", await_settled, "coroutine resume/yield", bare_trip)
end

-- 3. An idle step with many jobs waiting costs what it does with few.
local function idle_step_cost(waiting)
  local o = T.new()
  local f = stagehand.future()
  for i = 1, waiting do o:run("waiter", function(job) job:await(f) end) end
  local ns = time(200000, function(n)
    for _ = 1, n do o:step() end
  end)
  f:resolve()
  o:step()
  return ns
end
local step_100 = idle_step_cost(100)
local step_100k = idle_step_cost(100000)
report("idle step() with 100,000 jobs waiting", step_100k, "idle step() with 100 waiting", step_100, 1.5)

-- 4. Lua memory per waiting job.
do
  local o = T.new()
  local f = stagehand.future()
  local n = 100000
  local keep = {}
  collectgarbage()
  collectgarbage()
  local before = collectgarbage("count")
  for i = 1, n do keep[i] = o:run("waiter", function(job) job:await(f) end) end
  collectgarbage()
  collectgarbage()
  local bytes = (collectgarbage("count") - before) * 1024 / n
  local ok = bytes <= 1000
  results[#results + 1] = { name = "memory", ok = ok }
  print(string.format("%-46s %9.0f bytes/job (Handle kept; target <= 1000: %s)", "Lua memory per waiting job", bytes,
    ok and "met" or "MISSED"))
  f:resolve()
  o:step()
end

print()
local missed = 0
for _, r in ipairs(results) do
  if not r.ok then missed = missed + 1 end
end
print(missed == 0 and "every target met" or (missed .. " target(s) missed"))
