-- The job object a job's `work` receives.
local E = require "stagehand.engine.engine"
local wait = require "stagehand.wait.wait"
local slots = require "stagehand.wait.slots"
local raise = require("stagehand.engine.errors").raise
local B = require "stagehand.core.backend"
local signal = require "stagehand.engine.signal"
local settle = require "stagehand.engine.settle"
local errors = require "stagehand.engine.errors"
local priority = require "stagehand.rank.priority"
local F = require "stagehand.engine.fields"
local options = require "stagehand.engine.options"

local ORCH, CID, STATE, OUT, ID, LABEL, KEY = F.ORCH, F.CID, F.STATE, F.OUT, F.ID, F.LABEL, F.KEY

local select, type = select, type
local unpack = unpack or table.unpack

---@class stagehand.Job
---@field id integer
---@field label string
---@field key string?
---@field signal stagehand.Signal aborts when the job is cancelled, stalls or fails
local Job = {}

-- Raises if a method was called on something else than a job (job.sleep(5)
-- for job:sleep(5)). Waits are checked by wait.check_wait.
local function check_self(self, method)
  if not F.is_job(self) then options.bad_self("job:" .. method, "a job (the one its work receives)", self, 3) end
end

local function is_callable(v)
  if type(v) == "function" then return true end
  local mt = getmetatable(v)
  return mt ~= nil and type(mt) == "table" and mt.__call ~= nil
end

local function bad_progress(arg, expected, got)
  options.fail("job:progress", arg, expected, got, 3)
end

--- The job advanced: resets its stall clock. `done` and `total`, when
--- given (0 <= done <= total), say how far it is, for progress bars and
--- report().
---@param done number?
---@param total number?
function Job:progress(done, total)
  check_self(self, "progress")
  if done ~= nil or total ~= nil then
    if type(done) ~= "number" or done ~= done or done < 0 or done == math.huge then
      bad_progress("done", "a finite number >= 0", done)
    end
    if type(total) ~= "number" or total ~= total or total == math.huge then
      bad_progress("total", "a finite number >= done (" .. tostring(done) .. ")", total)
    end
    if done > total then bad_progress("done", "a number <= total (" .. tostring(total) .. ")", done) end
    if self[STATE] == false then rawset(self, "done_n", done); rawset(self, "total_n", total) end
  end
  local slot = self[CID]
  if slot then
    local o = self[ORCH]
    B.check(B.clock_progress(o.cc, slot, E.now(o)), "count progress")
    if rawget(self, "phase") then E.phase_progressed(self) end
  end
end

--- The job's effective priority now: a rank name, or a number where no
--- rank has it.
---@return string|number
function Job:priority()
  check_self(self, "priority")
  return priority.name(self[ORCH], priority.effective(self))
end

-- A settle-able box that follows a foreign awaitable's on_end. (Its own
-- function: a closure in as_settle would stop LuaJIT compiling every await.)
local function box_of(x)
  local box = settle.box("an awaitable")
  x:on_end(function(st, ...)
    if st == "done" then
      settle.settle(box, "done", settle.pack(...))
    else
      settle.settle(box, st or "failed", (...))
    end
  end)
  return box
end

local SETTLE = settle.MARK

--- Wraps anything awaitable (a settle-able of ours, or any table with
--- on_end) as a settle-able.
local function as_settle(x)
  if type(x) == "table" then
    if x.__settle == SETTLE then return x end -- (not another copy's: settle.lua)
    if is_callable(x.on_end) then return box_of(x) end
  end
  return nil
end

--- Waits for a Handle, Future or any awaitable (a table with on_end);
--- returns its values or raises its error. Raises the abort reason at once if
--- the job's signal aborts.
---@param x stagehand.Handle|stagehand.Future|{on_end: fun(self, fn: fun(state: string, ...))}
---@return any ...
function Job:await(x)
  check_self(self, "await")
  local s = as_settle(x)
  if s == nil then
    wait.check_wait(self, "await")
    raise("bad argument 'x' to await: expected a Handle, Future or awaitable (a table with on_end), got "
      .. type(x), 2)
  end
  return wait.await(self, s)
end

--- Calls fn(..., callback) with an err-first callback and waits for it:
--- returns the callback's values after err, raises err (anything but nil
--- or false).
---@param fn fun(...): any
---@return any ...
function Job:call(fn, ...)
  check_self(self, "call")
  wait.check_wait(self, "call")
  if not is_callable(fn) then
    raise("bad argument 'fn' to call: expected a function, got " .. type(fn), 2)
  end
  local box = settle.box("a callback")
  local n = select("#", ...)
  local args = { ... }
  args[n + 1] = function(err, ...)
    if err then -- (nil or false: no error, as `if err then` reads it)
      settle.settle(box, "failed", err)
    else
      settle.settle(box, "done", settle.pack(...))
    end
  end
  fn(unpack(args, 1, n + 1))
  return wait.await(self, box)
end

-- (job:slot and job:permit are slots.lua's functions themselves, not
-- wrappers: a frame more at every wait is rebuilt by LuaJIT from a snapshot
-- at each yield.)

--- Waits for a slot of pool `name`, granted in the step's grant rounds by
--- effective priority then arrival; returns its release (idempotent;
--- ending releases it too).
---@type fun(self: stagehand.Job, name: string): fun()
Job.slot = slots.slot

--- Waits for one unit of the per-step budget `name`. A step grants its
--- permits once everything runnable in it has run, by effective priority
--- then arrival, and the holder runs in that same step.
---@type fun(self: stagehand.Job, name: string)
Job.permit = slots.permit

--- Pacing only: resumes after `ms` of clock time. Not progress.
---@param ms number
function Job:sleep(ms)
  check_self(self, "sleep")
  if type(ms) ~= "number" or ms < 0 or ms ~= ms then
    raise("bad argument 'ms' to sleep: expected a number >= 0, got " .. options.describe(ms), 2)
  end
  return wait.sleep(self, ms)
end

--- Yields to the driver when the job has run slice_ms since it was resumed.
function Job:slice()
  check_self(self, "slice")
  local slot = self[CID]
  if slot then
    local o = self[ORCH]
    if E.current == self and E.now(o) - E.current_at < o.slice_ms then return end
  end
  return wait.yield_turn(self)
end

-- Lua 5.1 cannot yield across pcall; LuaJIT and 5.2+ can.
local yieldable_pcall = coroutine.wrap(function()
  return pcall(coroutine.yield, true) and true
end)()
-- (the probe yields once through pcall; where that fails it returns false)

local function call(fn, ...) return fn(...) end

-- Lua 5.1: fn runs in a coroutine of its own, whose yields (a wait
-- parking) are passed up through the job's coroutine.
-- (The coroutine runs `call`, a Lua function: 5.1 makes coroutines of
-- Lua functions only, and fn may be a C function or a callable table.
-- Its own function: a closure made in job:pcall would close an upvalue at
-- its every return, which LuaJIT does not compile.)
local function pcall_51(fn, ...)
  local co = coroutine.create(call)
  local function continue(ok, ...)
    if coroutine.status(co) == "dead" then return ok, ... end
    -- fn parked (or yielded): pass the yield up, then carry on inside fn
    -- with what the job was resumed with (the token its wait checks).
    return continue(coroutine.resume(co, coroutine.yield(...)))
  end
  return continue(coroutine.resume(co, fn, ...))
end

--- A pcall that may wait inside fn, on every runtime.
---@param fn fun(...): any
---@return boolean ok
---@return any ...
function Job:pcall(fn, ...)
  check_self(self, "pcall")
  if yieldable_pcall or E.current ~= self then return pcall(fn, ...) end
  return pcall_51(fn, ...)
end

local methods = Job

-- The fields a job shows by name (fields.lua keeps them in its array part).
local PUBLIC = { id = ID, label = LABEL, key = KEY }
-- Names of slots that code must reach by index: writing one by name would
-- add a hash field that nothing reads.
local SLOT_NAMES = {
  orch = true, cid = true, co = true, w = true, state = true, out = true,
  id = true, label = true, key = true,
}

local function index(job, k)
  local m = methods[k]
  if m ~= nil then return m end
  local f = PUBLIC[k]
  if f then
    local v = job[f]
    if v == false then return nil end -- no key
    return v
  end
  if k == "signal" then
    -- Made on first use: most jobs never look at their signal.
    local sig = signal.new_signal(job[ORCH].log)
    if job[STATE] and job[STATE] ~= "done" then signal.abort(sig, job[OUT]) end
    rawset(job, "signal", sig)
    return sig
  end
  return nil
end
local function newindex(job, k, v)
  if SLOT_NAMES[k] then error("stagehand: job." .. tostring(k) .. " is not writable", 2) end
  rawset(job, k, v)
end
F.define_jobs(index, newindex, function(job) return "stagehand.Job(" .. job[ID] .. ", " .. job[LABEL] .. ")" end)

return { Job = Job, JobMT = F.JobMT, is_callable = is_callable, as_settle = as_settle, errors = errors }
