-- Run by build/oom_host (csrc/test/oom_host.c), a Lua 5.4 host whose
-- allocator fails on demand: `make test-oom`. Each operation below runs
-- with its first allocation failing, then its second, and so on until it
-- runs through. Each time it must either finish or raise "not enough
-- memory" cleanly, and once the dust settles (futures resolved, the clock
-- run on, the orchestrator closed) the orchestrator must be whole: no job
-- running, nothing left behind (T.leaks), and this orchestrator and any
-- other still stepping.
local oom = assert(rawget(_G, "oom"), "run me with build/oom_host")
local stagehand = require "stagehand"
local T = require "stagehand.testing"
local E = require "stagehand.engine"

local function quiet_log() end

local function new_scene()
  local orch, clock = T.new { pools = { p = 2 }, log = quiet_log, stall_ms = 5000 }
  orch:budget("b", { ops = 1 })
  return { orch = orch, clock = clock, futures = {}, handles = {} }
end

local function future(s, label)
  local f = stagehand.future(label)
  s.futures[#s.futures + 1] = f
  return f
end

local function loader(s, i, opts)
  local f = future(s, "download " .. i)
  return s.orch:run("loader " .. i, function(job)
    local release = job:slot("p")
    local data = job:await(f)
    job:permit("b")
    release()
    return data
  end, opts)
end

-- Each: {name, setup(s) with memory to spare, op(s) under the failing allocator}.
local scenarios = {
  { "run a job that sleeps", function() end, function(s)
    s.handles[1] = s.orch:run("sleeper", function(job) job:sleep(10) return 1 end)
  end },
  { "run a keyed loader with a priority function", function() end, function(s)
    s.handles[1] = loader(s, 1, { key = "k", priority = function() return "visible" end })
  end },
  { "join a keyed run, and when on it", function(s) loader(s, 1, { key = "k" }) end, function(s)
    s.handles[1] = s.orch:run("join", function() end, { key = "k", priority = "visible" })
    s.handles[2] = s.orch:when("k", "following k", { priority = "background" })
  end },
  { "runs and whens made inside a job (each caller it makes is its own)", function() end, function(s)
    s.handles[1] = s.orch:run("scene", function(job)
      local a = s.orch:run("prop", function(j) return j:await(future(s, "mesh")) end, { priority = "visible" })
      local b = s.orch:when("k", "following k")
      local c = loader(s, 1, { key = "k" })
      return job:await(stagehand.all({ a, b, c }))
    end)
  end },
  { "when on a key nobody started", function() end, function(s)
    s.handles[1] = s.orch:when("later", nil, { stall_ms = 100 })
  end },
  { "get-or-load from memory", function(s)
    s.orch:run("loaded", function() return "tex" end, { key = "tex" })
  end, function(s)
    s.handles[1] = s.orch:run("loaded", function() return "again" end, { key = "tex", reuse = true })
  end },
  { "a step that grants slots and resumes", function(s)
    for i = 1, 12 do loader(s, i) end
  end, function(s) s.orch:step() end },
  { "resolving a future jobs await, then a step", function(s)
    local f = future(s, "atlas")
    for i = 1, 8 do
      s.orch:run("sprite " .. i, function(job) return job:await(f) end)
    end
    s.orch:step()
    s.f = f
  end, function(s)
    s.f:resolve("atlas bytes")
    s.orch:step()
  end },
  { "groups over loaders", function(s)
    for i = 1, 4 do s.handles[i] = loader(s, i) end
    s.orch:step()
  end, function(s)
    local hs = s.handles
    s.orch:run("scene", function(job)
      job:await(stagehand.all(hs))
      job:await(stagehand.any(hs))
      return job:await(stagehand.race(hs))
    end)
  end },
  { "a barrier and its arrivals", function() end, function(s)
    local b = s.orch:barrier("portraits", { "a", "b", "c" })
    b:arrive("a")
    b:arrive("b")
    s.orch:step()
  end },
  { "cancelling parked loaders", function(s)
    for i = 1, 6 do s.handles[i] = loader(s, i) end
    s.orch:step()
  end, function(s)
    for i = 1, 6 do s.handles[i]:cancel("scrolled away") end
    s.orch:step()
  end },
  { "close with jobs parked mid-work", function(s)
    for i = 1, 6 do loader(s, i) end
    s.orch:run("sleeper", function(job) job:pcall(job.sleep, job, 1e6) end)
    s.orch:step()
  end, function(s) s.orch:close("level unloaded") end },
  { "a timeout and progress", function() end, function(s)
    s.orch:run("baker", function(job)
      job:progress(1, 4)
      job:sleep(5)
      job:progress(4, 4)
    end, { signal = s.orch:timeout(1000) })
    s.clock:advance(10)
    s.orch:step()
  end },
}

local failures = {}
local function fail(name, n, what)
  failures[#failures + 1] = ("%s, allocation %d failing: %s"):format(name, n, what)
end

-- The dust settles with memory to spare: every future resolved, the clock
-- run on, the orchestrator closed; then it must be whole.
local function settle_and_check(s, other, name, n)
  local ok, err = pcall(function()
    for _, f in ipairs(s.futures) do f:resolve("late") end
    T.settle(s.orch, 20000, 250)
    s.orch:close("the spec ends")
    while s.orch:step() > 0 do end
  end)
  if not ok then return fail(name, n, "settling afterwards raised: " .. tostring(err)) end
  if E.current ~= nil then fail(name, n, "a job is still marked as running (E.current)") end
  if s.orch.nrunning ~= 0 then fail(name, n, s.orch.nrunning .. " job(s) still running") end
  local leaks = T.leaks(s.orch)
  if #leaks > 0 then fail(name, n, "left behind: " .. table.concat(leaks, "; ")) end
  local stepped, serr = pcall(other.step, other)
  if not stepped then fail(name, n, "another orchestrator cannot step: " .. tostring(serr)) end
end

local other = T.new { log = quiet_log }
local ops = 0
for _, sc in ipairs(scenarios) do
  local name, setup, op = sc[1], sc[2], sc[3]
  for n = 0, 100000 do
    local s = new_scene()
    setup(s)
    collectgarbage()
    local where, used
    local off = oom.off
    local function handler(e)
      used = off() -- (first: the handler itself needs memory)
      if os.getenv("OOM_WHERE") then where = debug.traceback("", 2):match("\n%s*([^\n]*stagehand/[^\n]*)") end
      return e
    end
    oom.fail_after(n)
    local ok, err = xpcall(op, handler, s)
    local after = off() -- (a memory error skips the handler: Lua calls none for it)
    used = used or after
    if os.getenv("OOM_WHERE") and not ok then print(name, n, where) end
    ops = ops + 1
    if not ok and not tostring(err):find("not enough memory", 1, true) then
      fail(name, n, "raised something else: " .. tostring(err))
    end
    settle_and_check(s, other, name, n)
    if ok and used < n then break end -- it ran through with memory to spare
  end
end

if #failures > 0 then
  local shown = {}
  for i = 1, math.min(#failures, 40) do shown[i] = "  " .. failures[i] end
  error(("%d of %d failing runs went wrong:\n%s"):format(#failures, ops, table.concat(shown, "\n")), 0)
end
print(("%d passed, 0 failed (%d operations, each allocation failing in turn)"):format(ops, #scenarios))
