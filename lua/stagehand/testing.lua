--- stagehand.testing: a fake clock and helpers for specs that prove loaders end.
---
---     local T = require "stagehand.testing"
---     local orch, clock = T.new()
---     local h = orch:run("Loading", work)
---     assert.equal(0, T.settle(orch, 30000))
---     assert.ended(h)
local stagehand = require "stagehand"
local E = require "stagehand.engine.engine"
local B = require "stagehand.core.backend"
local each = require("stagehand.core.compat").each
local F = require "stagehand.engine.fields"
local STATE, CO, HELD, WAITQ = F.STATE, F.CO, F.HELD, F.WAITQ
-- (T.leaks and T.core_faults list what they find in the same order on every
-- run and runtime: by pool, budget and key name, not in pairs' order)
local sorted_keys = require("stagehand.engine.options").sorted_keys
local describe_value = require("stagehand.engine.options").describe

local T = {}

-- Which runtime and backend the specs run on, said once a process (busted
-- loads this module again for each spec file; the registry outlives that):
-- Debian's `busted` starts `lua`, which is 5.1, and LuaJIT falls back to
-- the C module when the FFI backend cannot load, both easy to miss.
do
  local reg = debug and debug.getregistry and debug.getregistry()
  local said = "stagehand.testing said its runtime"
  if type(reg) ~= "table" or not reg[said] then
    if type(reg) == "table" then reg[said] = true end
    io.stderr:write(string.format("[stagehand.testing] %s, %s backend\n",
      rawget(_G, "jit") and jit.version or _VERSION, stagehand.backend))
  end
end

local Orchestrator = require "stagehand.orchestrator"

-- A helper handed something other than an orchestrator (a nil from a typo,
-- most often) says so, rather than fail inside. (level nil: no position,
-- for the assertions, which luassert calls from inside itself.)
local function check_orch(fn, orch, level)
  if getmetatable(orch) ~= Orchestrator then
    error("bad argument 'orch' to " .. fn .. ": expected an orchestrator, got " .. describe_value(orch),
      level and level + 1 or 0)
  end
end

---@class stagehand.FakeClock
---@field now number
local Clock = {}
Clock.__index = Clock
Clock.__call = function(c) return c.now end
Clock.__now_field = true -- orchestrators may read c.now directly

local finite = E.finite -- (not NaN, not an infinity)

--- Moves the clock forward by `ms`.
---@param ms number
---@return number now
function Clock:advance(ms)
  if getmetatable(self) ~= Clock then
    error("bad self to clock:advance: expected a fake clock, got " .. describe_value(self)
      .. " (call it with a colon: clock:advance(...))", 2)
  end
  if not finite(ms) or ms < 0 then
    error("bad argument 'ms' to advance: expected a finite number >= 0, got " .. describe_value(ms), 2)
  end
  self.now = self.now + ms
  return self.now
end

--- A fake clock: c.now, c:advance(ms), and c() for the time.
---@param start_ms number?
---@return stagehand.FakeClock
function T.clock(start_ms)
  if start_ms ~= nil and not finite(start_ms) then
    error("bad argument 'start_ms' to clock: expected a finite number, got " .. describe_value(start_ms), 2)
  end
  return setmetatable({ now = start_ms or 0 }, Clock)
end

--- A manual orchestrator on a fake clock. `opts` are stagehand.new's; a
--- `clock` among them is used instead of a new one.
---@param opts table?
---@return stagehand.Orchestrator orch, stagehand.FakeClock clock
function T.new(opts)
  if opts ~= nil and type(opts) ~= "table" then
    error("bad argument 'opts' to new: expected a table of stagehand.new's options, got " .. describe_value(opts), 2)
  end
  local o = {}
  for k, v in each, opts or {} do o[k] = v end
  o.driver = "manual"
  o.clock = o.clock or T.clock(0)
  -- (Bad options raise at the line that called T.new, not at this one.)
  local ok, orch = pcall(stagehand.new, o)
  if not ok then
    if type(orch) ~= "string" then error(orch, 0) end
    error((orch:gsub("^[^\n]-testing%.lua:%d+: ", "", 1)), 2)
  end
  return orch, o.clock
end

--- Advances the orchestrator's fake clock in steps of `step_ms` (100), pumping,
--- until no job runs or `ms` passed. Returns the number of jobs still running.
---@param orch stagehand.Orchestrator
---@param ms number
---@param step_ms number?
---@return integer running
function T.settle(orch, ms, step_ms)
  check_orch("settle", orch, 2)
  local clock = orch.fake_clock
  if not clock then error("bad argument 'orch' to settle: expected an orchestrator on a fake clock (T.new)", 2) end
  -- (finite: a settle that could never end would hang the spec)
  if not finite(ms) or ms < 0 then
    error("bad argument 'ms' to settle: expected a finite number >= 0, got " .. describe_value(ms), 2)
  end
  step_ms = step_ms or 100
  if not finite(step_ms) or step_ms <= 0 then
    error("bad argument 'step_ms' to settle: expected a finite number > 0, got " .. describe_value(step_ms), 2)
  end
  local left = orch:step()
  local passed = 0
  while left > 0 and passed < ms do
    local dt = math.min(step_ms, ms - passed)
    clock:advance(dt)
    passed = passed + dt
    left = orch:step()
  end
  return left
end

--- The core's structures (ids, stall clocks, sleep timers, pools and
--- budgets' queues) that fail their own consistency check, named in a
--- list (`out`, when given, is appended to): empty when all hold. Any time
--- is a good time to ask, a scene half run included.
---@param orch stagehand.Orchestrator
---@param out string[]?
---@return string[]
function T.core_faults(orch, out)
  check_orch("core_faults", orch, 2)
  out = out or {}
  if B.ids_check(orch.ids) ~= 0 then out[#out + 1] = "the core's ids are inconsistent" end
  if B.clock_check(orch.cc) ~= 0 then out[#out + 1] = "the core's stall clocks are inconsistent" end
  if B.timers_check(orch.tm) ~= 0 then out[#out + 1] = "the core's sleep timers are inconsistent" end
  for _, name in ipairs(sorted_keys(orch.pool_q)) do
    if B.pool_check(orch.pool_q[name].p) ~= 0 then
      out[#out + 1] = "the core's pool '" .. name .. "' is inconsistent"
    end
  end
  for _, name in ipairs(sorted_keys(orch.budget_q)) do
    if B.pool_check(orch.budget_q[name].p) ~= 0 then
      out[#out + 1] = "the core's queue of budget '" .. name .. "' is inconsistent"
    end
  end
  return out
end

-- What each job awaited (engine.track_waits): an ended job still among
-- its awaitable's listeners is a leak no table of the orchestrator shows.
E.set_track_waits(package.loaded["busted"] ~= nil) -- (in specs; a bench pays nothing)

local function still_listens(x, job)
  if rawget(x, "_w1") == job then return true end
  local li = rawget(x, "_li")
  return li ~= nil and li[job] ~= nil
end

--- What an orchestrator still holds, for assert.no_leaks: an empty list when
--- nothing is left behind.
---@param orch stagehand.Orchestrator
---@return string[]
function T.leaks(orch)
  check_orch("leaks", orch, 2)
  local out = {}
  if orch.nrunning ~= 0 then out[#out + 1] = orch.nrunning .. " job(s) running" end
  if orch.qn ~= 0 then out[#out + 1] = orch.qn .. " continuation(s) queued" end
  if orch.closing or orch.closing_jobs then out[#out + 1] = "a close that never finished" end
  for _, name in ipairs(sorted_keys(orch.pool_q)) do
    local q = orch.pool_q[name]
    local in_use, waiting = tonumber(B.pool_in_use(q.p)), tonumber(B.pool_waiting(q.p))
    if in_use ~= 0 then out[#out + 1] = in_use .. " slot(s) of pool '" .. name .. "' in use" end
    if waiting ~= 0 then out[#out + 1] = waiting .. " waiter(s) in pool '" .. name .. "'" end
  end
  for _, name in ipairs(sorted_keys(orch.budget_q)) do
    local waiting = tonumber(B.pool_waiting(orch.budget_q[name].p))
    if waiting ~= 0 then out[#out + 1] = waiting .. " waiter(s) for budget '" .. name .. "'" end
  end
  -- Ended jobs it keeps (remembered outcomes) must have let their coroutine go.
  for _, key in ipairs(sorted_keys(orch.mem)) do
    local job = orch.mem[key]
    if job[CO] then out[#out + 1] = "the remembered outcome of " .. key .. " holds a live coroutine" end
    if job[HELD] then out[#out + 1] = "the remembered outcome of " .. key .. " still holds a slot" end
    if job[WAITQ] then out[#out + 1] = "the remembered outcome of " .. key .. " still waits in a queue" end
  end
  for i = 1, orch.qcap do
    local job = orch.q[i]
    if job and job[STATE] and not job[CO] then out[#out + 1] = "a queued entry of an ended job" end
  end
  if orch.prio_broken then out[#out + 1] = "priority counts broken and not yet made anew" end
  local deaf, waits = 0, orch.track_waits or {}
  local done = {}
  for job, x in each, waits do
    if job[STATE] then
      if still_listens(x, job) then deaf = deaf + 1 else done[#done + 1] = job end
    end
  end
  for i = 1, #done do waits[done[i]] = nil end -- (ended and heard of: nothing more to check)
  if deaf ~= 0 then out[#out + 1] = deaf .. " ended job(s) still listening to what they awaited" end
  -- Every waiter a pool's core holds must be a running job waiting in it.
  for _, name in ipairs(sorted_keys(orch.pool_q)) do
    local q = orch.pool_q[name]
    local live = 0
    for _, job in each, orch.by_slot do
      if job[WAITQ] == q then live = live + 1 end
    end
    local held = tonumber(B.pool_waiting(q.p))
    if held > live then
      out[#out + 1] = (held - live) .. " waiter(s) in pool '" .. name .. "' that no running job is"
    end
  end
  local n = tonumber(B.clock_count(orch.cc))
  if n ~= 0 then out[#out + 1] = n .. " stall clock(s) running" end
  n = tonumber(B.timers_count(orch.tm))
  if n ~= 0 then out[#out + 1] = n .. " sleep timer(s) set" end
  if each(orch.by_slot) ~= nil then out[#out + 1] = "job slots still in use" end
  n = tonumber(B.ids_count(orch.ids))
  if n ~= 0 then out[#out + 1] = n .. " core id(s) still taken" end
  T.core_faults(orch, out)
  local left = {
    keyed = "keyed run(s) still registered", pending = "when waiter(s) still pending",
    awaiters = "awaiter registrations", followed = "follow registrations",
    owned = "owned-caller lists", permit_of = "permit(s) held", idle = "when_idle waiter(s)",
    src_count = "priority source counts", set_of = "priority source sets",
    set_users = "sets of priority sources still counted as in use",
  }
  for _, t in ipairs(sorted_keys(left)) do
    if each(orch[t]) ~= nil then out[#out + 1] = left[t] .. " left behind" end
  end
  -- The counts that let a job's end skip those tables must agree with them.
  local counted = { nset_of = "set_of", nowners = "owned", nidle = "idle" }
  for _, count in ipairs(sorted_keys(counted)) do
    local t = counted[count]
    local entries = 0
    for _ in each, orch[t] do entries = entries + 1 end
    if orch[count] ~= entries then
      out[#out + 1] = count .. " is " .. orch[count] .. " for " .. entries .. " entries"
    end
  end
  return out
end

-- busted assertions, registered when luassert is there.
local ok_say, say = pcall(require, "say")
local ok_assert, luassert = pcall(require, "luassert")
if ok_say and ok_assert then
  local function ended(_, args)
    local h = args[1]
    return type(h) == "table" and type(h.state) == "function" and h:state() ~= "running"
      and h:state() ~= "pending"
  end
  say:set("assertion.ended.positive", "Expected the handle to have ended, but it is:\n%s")
  say:set("assertion.ended.negative", "Expected the handle to be running, but it is:\n%s")
  luassert:register("assertion", "ended", ended, "assertion.ended.positive", "assertion.ended.negative")

  local function all_ended(_, args)
    local orch = args[1]
    check_orch("assert.all_ended", orch)
    local ok = orch.nrunning == 0
    -- luassert formats the arguments it is handed; give it the dump.
    args[1] = orch:dump()
    args.n = 1
    return ok
  end
  say:set("assertion.all_ended.positive", "Expected every job to have ended:\n%s")
  say:set("assertion.all_ended.negative", "Expected some job to be running:\n%s")
  luassert:register("assertion", "all_ended", all_ended, "assertion.all_ended.positive",
    "assertion.all_ended.negative")

  local function no_leaks(_, args)
    local orch = args[1]
    check_orch("assert.no_leaks", orch)
    local leaks = T.leaks(orch)
    args[1] = #leaks == 0 and "nothing" or table.concat(leaks, "; ") .. "\n" .. orch:dump()
    args.n = 1
    return #leaks == 0
  end
  say:set("assertion.no_leaks.positive", "Expected nothing left behind, found: %s")
  say:set("assertion.no_leaks.negative", "Expected something left behind, found: %s")
  luassert:register("assertion", "no_leaks", no_leaks, "assertion.no_leaks.positive",
    "assertion.no_leaks.negative")
end

return T
