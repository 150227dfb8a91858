-- Folder wait/ (layer 3): waiting, and what can be waited on. wait.lua
-- (parking a job and waking it), job.lua (the job object `work`
-- receives), handle.lua, future.lua, combine.lua (all, any, race...),
-- barrier.lua, follows.lua (what a wait follows; cycles of waits), idle.lua
-- (when_idle), and slots.lua (slot pools and per-step budgets: the queues a
-- job waits in, granted in the step's grant rounds). It offers the layers
-- above slots.worker_queue (a worker pool's requests wait and are granted
-- like slot waiters) and wait.park_outside.
--
-- Waiting: the job methods that park a job (await, sleep, slice; slots.lua
-- parks in its own queues with check_wait and raise_ended), and what wakes
-- a parked job (the settle hooks this module registers).
local B = require "stagehand.core.backend"
local check = B.check
local E = require "stagehand.engine.engine"
local errors = require "stagehand.engine.errors"
local settle = require "stagehand.engine.settle"
local sources = require "stagehand.rank.sources"
local idle = require "stagehand.wait.idle"
local F = require "stagehand.engine.fields"
local marks = require "stagehand.engine.marks"
local clock = require "stagehand.engine.clock"
local follows_m = require "stagehand.wait.follows"

local ORCH, CID, CO, W, STATE, OUT, LABEL = F.ORCH, F.CID, F.CO, F.W, F.STATE, F.OUT, F.LABEL
local SINCE, SLEEP_UNTIL = F.SINCE, F.SLEEP_UNTIL
local PARK, QUEUED, SLEEP = marks.PARK, marks.QUEUED, marks.SLEEP
local open_wait, PAUSED = marks.open_wait, marks.PAUSED
local is_job = F.is_job
local follows_in, check_follows = follows_m.follows_in, follows_m.check_follows
local read_clock, settle_time = clock.now, clock.settle_time
local co_yield = coroutine.yield
local traceback = debug.traceback
local unpack = unpack or table.unpack
local timers_add = B.timers_add
local enqueue = E.enqueue

local M = {}

-- Waits tried after a job ended: each raises at once; past LATE_LIMIT the
-- coroutine is dropped, so a pcall loop cannot keep an ended job alive.
local late = setmetatable({}, { __mode = "k" })
local LATE_LIMIT = 100


local function misplaced(job, what, level)
  if not is_job(job) then -- (the public methods ask first: this is for anything else)
    require("stagehand.engine.options").bad_self("job:" .. what, "a job (the one its work receives)", job, level + 1)
  end
  errors.raise("job:" .. what .. " must be called from inside the job's own work (" .. job[LABEL]
    .. "), not from another coroutine", level + 1)
end

-- Raises the end of an ended job at a wait inside its work.
local function raise_ended(job)
  local n = (late[job] or 0) + 1
  late[job] = n
  if n > LATE_LIMIT then
    job[CO] = false
    co_yield() -- never resumed: the coroutine is dropped (and closed: engine.lua)
  end
  local err = job[STATE] ~= "done" and job[OUT] or nil
  if err == nil then
    err = errors.new("cancelled", job[LABEL], job[LABEL] .. " has already ended")
  end
  error(err, 0)
end

-- Raises at a wait made after the job ended (a pcall that caught its end
-- and waited again, or a job kept and used later): which method, on which
-- job, and where in the game's code. The Error keeps the end's kind and
-- what caused it.
local function raise_late(job, what)
  local n = (late[job] or 0) + 1
  late[job] = n
  if n > LATE_LIMIT and E.current == job then
    job[CO] = false
    co_yield() -- never resumed: the coroutine is dropped (and closed: engine.lua)
  end
  local st, ended = job[STATE], job[OUT]
  local at = errors.where(3)
  local msg = "job:" .. what .. ": \"" .. job[LABEL] .. "\" has already ended"
    .. (st ~= "done" and " (" .. st .. ")" or "") .. (at and " (at " .. at .. ")" or "")
  local fields = { ended = st ~= "done" and ended or nil }
  if st ~= "done" then fields.cause, fields.reason, fields.missing = ended.cause, ended.reason, ended.missing end
  local kind = st == "done" and "cancelled" or ended.kind
  error(errors.new(kind, job[LABEL], msg, fields), 0)
end

--- Checks a wait is legal: inside the job's run, the job not ended.
---
--- Asking coroutine.running() here would stop LuaJIT's trace on every wait,
--- so the coroutine is checked by the token the wait is resumed with
--- (M.await): stagehand resumes a job with the job itself, and a wait made in
--- a coroutine of the user's own is resumed by the user, with anything else.
function M.check_wait(job, what)
  if type(job) ~= "table" then misplaced(job, what, 3) end -- (job.sleep(5): a dot for a colon)
  if job[STATE] then raise_late(job, what) end
  if E.current ~= job then misplaced(job, what, 3) end
  if job[W] then
    -- A running job still marked as parked: its last wait could not yield
    -- (it was made inside a plain pcall on Lua 5.1, or in a coroutine of
    -- the game's own). The job fails here, leaving what it waited on.
    local err = E.unyielded(job)
    E.fail(job, err, traceback(err, 2))
    error(job[OUT], 0)
  end
end

-- Jobs woken from an await to raise, not to read what they awaited
-- (M.raise_in), with what they raise.
local raising = setmetatable({}, { __mode = "k" })

local function settled_values(x, job)
  local v, st = x._v, x._st
  if st == "done" then return unpack(v, 1, v.n or 1) end
  if not st then -- (not settled: woken by M.raise_in)
    v = raising[job]
    raising[job] = nil
  end
  error(v, 0)
end

--- Waits inside `job` for the settle-able `x`; returns its values or raises.
function M.await(job, x)
  M.check_wait(job, "await")
  -- (Awaiting an ended Handle hears its end now; one still running is
  -- heard while this job listens to it: see end_job.)
  if x._st then
    if x.__handle then x._seen = true end
    local o = job[ORCH]
    check(B.clock_progress(o.cc, job[CID], o.now), "count progress")
    return settled_values(x)
  end
  -- Parking here, not in a helper, with only job, x and follows live at
  -- the yield: a parked job's stack, down to the yield, is read back when
  -- it wakes (see body).
  local follows
  do
    local whole
    follows, whole = check_follows(job, x)
    local o = job[ORCH]
    settle.listen(x, job)
    local tw = o.track_waits -- (under stagehand.testing: assert.no_leaks reads it)
    if tw then tw[job] = x end
    job[W] = x
    -- (Only a wait that follows jobs may leave the world idle: one on a
    -- future, like a start, a slot's queue or a sleep, keeps it busy.)
    if follows then idle.mark_due(o) end
    job[SINCE] = o.now
    if whole then
      check(B.clock_pause(o.cc, job[CID]), "pause a stall clock")
    elseif rawget(x, "_group") then
      open_wait[job] = settle.seq -- (a group: each part that settles is progress)
    end
    if follows then sources.follow(o, job, follows) end
  end
  if co_yield(PARK) ~= job then misplaced(job, "await", 2) end
  local o = job[ORCH]
  if follows then sources.unfollow(o, job) end
  local open = rawget(x, "_group") and open_wait[job]
  if open then open_wait[job] = nil end
  if job[STATE] then raise_ended(job) end
  if (follows and not open) or open == PAUSED then
    check(B.clock_resume(o.cc, job[CID], E.current_at), "resume a stall clock")
  else
    check(B.clock_progress(o.cc, job[CID], E.current_at), "count progress")
  end
  return settled_values(x, job)
end

local wake -- (the settle hook below)

--- Ends the await `job` is parked on with `err` raised there, as if the
--- await had raised it when it was made: the job leaves what it awaited
--- and runs on from its next turn (its code may catch it). For a cycle of
--- waits that something other than the await closed (newest.lua's
--- hand-over).
function M.raise_in(job, err)
  local x = job[W]
  settle.unlisten(x, job)
  raising[job] = err
  wake(job, x)
end

--- Parks `job`, a job with no coroutine of its own, on `x`: work another
--- thread does for it (a worker's request), whose owner ends the job.
--- While the work waits its turn there, the job's stall clock is paused
--- (queued time is not stalling); outside_started, called once, runs it.
function M.park_outside(job, x)
  local o = job[ORCH]
  job[W] = x
  job[SINCE] = o.now
  check(B.clock_pause(o.cc, job[CID]), "pause a stall clock")
  local tr = o.tracer
  if tr then tr:parked(job, o.now) end
end

--- The work `job` waits on, on another thread, has begun: its stall clock
--- runs from now (a resume is progress).
function M.outside_started(job)
  if not job[STATE] then
    local o = job[ORCH]
    local now = read_clock(o)
    check(B.clock_resume(o.cc, job[CID], now), "resume a stall clock")
    local tr = o.tracer -- (a trace shows the queued wait end, and the wait for the reply begin)
    if tr then
      tr:resumed(job, now)
      job[SINCE] = now
      tr:parked(job, now)
    end
  end
end

--- Parks `job` on a sleep of `ms`; the end of a sleep is not progress.
function M.sleep(job, ms)
  M.check_wait(job, "sleep")
  do -- (locals end before the yield: see M.await)
    local o = job[ORCH]
    local now = read_clock(o)
    job[SLEEP_UNTIL] = now + ms
    -- (A sleep of math.huge never wakes: the job's stall clock ends it.)
    if ms < math.huge then check(timers_add(o.tm, job[CID], now + ms), "set a sleep") end
    job[W] = SLEEP
    job[SINCE] = now
  end
  if co_yield(PARK) ~= job then misplaced(job, "sleep", 2) end
  if job[STATE] then raise_ended(job) end
end

-- For waits that park in their own frame (slots.lua's M.wait).
M.misplaced, M.raise_ended = misplaced, raise_ended

--- Yields to the driver, to run again after what is queued.
function M.yield_turn(job)
  M.check_wait(job, "slice")
  do
    local o = job[ORCH]
    job[W] = QUEUED
    job[SINCE] = read_clock(o)
    enqueue(o, job)
  end
  if co_yield(PARK) ~= job then misplaced(job, "slice", 2) end
  if job[STATE] then raise_ended(job) end
end

-- Called by a settle-able when it settles with `job` among its listeners.
-- A job woken from an await on jobs stops awaiting them now, not at its
-- resume: jobs that run before it in this step may come to await it, and
-- its rank still flowing to what it awaited then closed a loop in the
-- priority counts (the chaos scenes found it: a set's member list changed
-- under the walk that was passing a change along it).
--
-- The wait's end is the job's progress now, not when it next runs: a job
-- left in the queue (a step's budget spent before its turn) counts its
-- stall time from here, and a clock paused while it awaited jobs runs
-- again from here. (Its resume counts once more: see M.await.)
function wake(job, from)
  if job[W] ~= from then return end
  job[W] = QUEUED
  local o = job[ORCH]
  if sources.following(o, job) then sources.unfollow(o, job) end
  check(B.clock_resume(o.cc, job[CID], settle_time(o)), "resume a stall clock")
  enqueue(o, job)
end
settle.on_wake(wake)

-- Called when a part of the group `g` that `job` is parked on settled and
-- g did not (combine.lua). A wait of the job's that ended: progress, while
-- its own clock runs. With `freed`, nothing but jobs may be left open in
-- g: if so, its clock pauses as for an await on jobs. With `left`, a
-- part ended while jobs it listed run on (a Handle withdrawn from its job,
-- a group that failed, in an all_settled): the jobs the waiter awaits are
-- listed again, so its rank leaves those. And the world may
-- have turned idle (a loader whose download came in, waiting now only on
-- a preloader that waits on when_idle): the idle check looks again.
settle.on_changed(function(job, g, freed, left)
  if job[W] ~= g or job[STATE] then return end
  local o = job[ORCH]
  idle.mark_due(o)
  if left and sources.following(o, job) then
    sources.unfollow(o, job)
    local f = follows_in(o, g, true)
    if f then sources.follow(o, job, f) end
  end
  local ow = open_wait[job]
  if ow and ow ~= PAUSED then
    check(B.clock_progress(o.cc, job[CID], settle_time(o)), "count progress")
    open_wait[job] = settle.seq
    if freed and follows_in(o, g) ~= nil then
      check(B.clock_pause(o.cc, job[CID]), "pause a stall clock")
      open_wait[job] = PAUSED
    end
  end
  if idle.waiting(o) and not o.stepping then o.driver.reschedule(o) end
end)

return M
