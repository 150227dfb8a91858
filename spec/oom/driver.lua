-- What failing_alloc.lua and failing_alloc_pools.lua share: each runs its
-- scenarios under an oom_host's allocator, failing the first allocation,
-- then the second, and so on until an operation runs through. The module
-- make test-oom builds for it (build/oom/<runtime>) counts its C allocations
-- on the main thread with Lua's, and fails them alike. Each time it
-- must finish or raise "not enough memory"; then, with memory to spare,
-- settle(s, fail) lets the dust settle (raising if that goes wrong, and
-- calling fail(what) for anything it finds amiss), and the orchestrator
-- s.orch must be whole: no job running, nothing left behind (T.leaks).
-- Then each scenario runs again with one C allocation alone refused, the
-- first, then the second..., while Lua has memory to spare: the same
-- checks, and a job that failed for it says it ran out of memory, not that
-- stagehand broke. OOM_WHERE=1 in the environment prints where each
-- failing run raised; OOM_ONLY=text runs the scenarios whose name holds
-- it, OOM_SKIP=text all the others; OOM_FROM=n begins at allocation n.
local T = require "stagehand.testing"
local E = require "stagehand.engine.engine"
local B = require "stagehand.core.backend"

-- What the core says of its own structures: each must be whole (its
-- *_check), whatever a failure cut short. The pure-Lua core's are Lua
-- tables that a memory error can leave half written; the native core's
-- change only once they have the memory.
local function core_broken(o)
  local bad = {}
  local function look(what, fn, x)
    local ok, rc = pcall(fn, x)
    if not ok or rc ~= B.SH_OK then bad[#bad + 1] = what .. (ok and "" or ": " .. tostring(rc)) end
  end
  look("the stall clocks", B.clock_check, o.cc)
  look("the sleep timers", B.timers_check, o.tm)
  look("the job ids", B.ids_check, o.ids)
  for _, list in ipairs { o.pool_list, o.budget_list, o.worker_list } do
    for _, q in ipairs(list or {}) do look("queue " .. tostring(q.name), B.pool_check, q.p) end
  end
  return #bad > 0 and table.concat(bad, ", ") or nil
end

--- Runs {name, setup(s), op(s)} scenarios, each on a scene new_scene()
--- makes; raises listing what went wrong, else prints the count. `what`
--- names the operations in that line.
return function(scenarios, new_scene, settle, what)
  local oom = assert(rawget(_G, "oom"), "run me with build/oom_host (scripts/oom.sh)")
  if os.getenv("OOM_WHERE") then io.stdout:setvbuf("no") end -- (in step with the host's lines on stderr)
  -- (OOM_ONLY: the scenarios whose name holds it, alone; OOM_SKIP: all
  -- but those, as scripts/oom.sh asks where the runtime itself crashes)
  local only, skip = os.getenv("OOM_ONLY"), os.getenv("OOM_SKIP")
  if only or skip then
    local kept = {}
    for _, sc in ipairs(scenarios) do
      local name = sc[1]
      if (not only or name:find(only, 1, true)) and not (skip and name:find(skip, 1, true)) then
        kept[#kept + 1] = sc
      end
    end
    scenarios = kept
  end
  local failures, ops, refusals = {}, 0, 0

  -- One run: s made with memory to spare, op(s) under `start()` (which
  -- arms the failure), `stop()` (which disarms it and returns whether op
  -- ran through what was armed), then the checks. Returns whether op went
  -- past what was armed.
  local function run(name, setup, op, label, start, stop)
    local function fail(why) failures[#failures + 1] = ("%s, %s: %s"):format(name, label, why) end
    local s = new_scene()
    setup(s)
    collectgarbage()
    local where, past
    local function handler(e)
      past = stop() -- (first: the handler itself needs memory)
      if os.getenv("OOM_WHERE") then where = debug.traceback("", 2):match("\n%s*([^\n]*stagehand/[^\n]*)") end
      return e
    end
    local function go() return op(s) end -- (Lua 5.1's xpcall passes no arguments)
    start()
    local ok, err = xpcall(go, handler)
    local after = stop() -- (a memory error skips the handler: Lua calls none for it)
    if past == nil then past = after end
    if os.getenv("OOM_WHERE") and not ok then print(name, label, where) end
    ops = ops + 1
    if not ok and not tostring(err):find("not enough memory", 1, true) then
      fail("raised something else: " .. tostring(err))
    end
    local broken = core_broken(s.orch)
    if broken then fail("the core's structures are broken: " .. broken) end
    local settled, serr = pcall(settle, s, fail)
    if not settled then
      fail("settling afterwards raised: " .. tostring(serr))
    else
      if E.current ~= nil then fail("a job is still marked as running (E.current)") end
      if s.orch.nrunning ~= 0 then fail(s.orch.nrunning .. " job(s) still running") end
      local leaks = T.leaks(s.orch)
      if #leaks > 0 then fail("left behind: " .. table.concat(leaks, "; ")) end
      for i, h in ipairs(s.handles or {}) do
        local why = h._st ~= "done" and tostring(h._v) or ""
        if why:find("internal error", 1, true) then fail("Handle " .. i .. " failed with " .. why) end
      end
    end
    return ok and past
  end

  for _, sc in ipairs(scenarios) do
    local name, setup, op = sc[1], sc[2], sc[3]
    for n = tonumber(os.getenv("OOM_FROM")) or 0, 100000 do
      local function stop() return oom.off() < n end
      -- (ran through with memory to spare: done)
      if run(name, setup, op, ("allocation %d failing"):format(n), function() oom.fail_after(n) end, stop) then
        break
      end
    end
    for n = 0, 100000 do
      local refused
      local function stop()
        refused = oom.refuse_c() -- (whether it was refused; the same at a second call)
        return not refused
      end
      run(name, setup, op, ("C allocation %d alone refused"):format(n), function() oom.refuse_c(n) end, stop)
      if not refused then break end -- (op made fewer than n + 1 C allocations)
      refusals = refusals + 1
    end
  end
  -- (the pure-Lua core, STAGEHAND_BACKEND=lua, has no C allocations)
  -- (and a pick of scenarios, OOM_ONLY, may hold none that allocate in C)
  if B.name ~= "lua" and not only and (oom.c_calls() == 0 or refusals == 0) then
    failures[#failures + 1] = "the core's C allocations were never counted: run with the module built for"
      .. " its oom_host on package.cpath (build/oom/<runtime>, as scripts/oom.sh does)"
  end
  if #failures > 0 then
    local shown = {}
    for i = 1, math.min(#failures, 40) do shown[i] = "  " .. failures[i] end
    error(("%d of %d failing runs went wrong:\n%s"):format(#failures, ops, table.concat(shown, "\n")), 0)
  end
  print(("%d passed, 0 failed (%d %s, each allocation failing in turn, then each C allocation alone: %d)")
    :format(ops, #scenarios, what, refusals))
end
