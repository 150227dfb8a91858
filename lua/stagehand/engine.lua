-- The engine under the orchestrator: job records, the run queue, resuming,
-- parking and waking, stall checks and ending. Public methods live in
-- orchestrator.lua, job.lua and handle.lua; this file holds what they share.
--
-- A job parks on one thing at a time (job[W]): a settle-able (settle.lua),
-- SLEEP (a C timer under its slot) or QUEUED (in the run queue). Whatever it
-- parks on wakes it by queueing it; `step` resumes queued jobs oldest first.
-- The job's stall clock lives in the C core under the job's slot, a small
-- integer reused after the job ends.
local B = require "stagehand.backend"
local errors = require "stagehand.errors"
local settle = require "stagehand.settle"
local each = next -- (a table is walked with each, never pairs: see list.lua)
local signal = require "stagehand.signal"
local logm = require "stagehand.log"
local priority = require "stagehand.priority"
local keys = require "stagehand.keys"
local list = require "stagehand.list"
local F = require "stagehand.fields"
local nest = require "stagehand.nest"

local ORCH, CID, CO, W, STATE, OUT, ID, LABEL, KEY, H =
  F.ORCH, F.CID, F.CO, F.W, F.STATE, F.OUT, F.ID, F.LABEL, F.KEY, F.H
local SINCE, STARTED, SLEEP_UNTIL = F.SINCE, F.STARTED, F.SLEEP_UNTIL

local co_create, co_resume, co_yield = coroutine.create, coroutine.resume, coroutine.yield
local traceback = debug.traceback
local pack = settle.pack
local unpack = unpack or table.unpack

local clock_start, clock_stop = B.clock_start, B.clock_stop
local clock_pop_stalled = B.clock_pop_stalled
local timers_add, timers_cancel, timers_pop = B.timers_add, B.timers_cancel, B.timers_pop

local E = { errors = errors, F = F }

-- Hooks: what the engine tells the features that register for it
-- (E.on(name, fn)). The engine names no feature module: slots.lua
-- registers these when it loads.
local hooks = {
  job_ended = function() end, -- (o, job): it releases what the job holds
  grant_round = function() return false end, -- (o): grants what can be granted now; true if any
  budget_round = function() return false end, -- (o): grants the budgets' permits; true if any
  step_began = function() end, -- (o)
  ran = function() end, -- (o, job, ms): a job that held a permit of an ms budget ran ms
  budgets_waiting = function() return false end, -- (o): whether some budget has waiters
}

--- Registers `fn` as the hook `name` (one of the keys of hooks above).
function E.on(name, fn)
  if hooks[name] == nil then error("stagehand: no engine hook named " .. tostring(name), 2) end
  hooks[name] = fn
end
local is_job = F.is_job
local TOLD = F.TOLD

-- What a waiting job's coroutine yields. Only a coroutine of the user's own
-- inside a job ever shows it to user code (see check_wait), so its name says
-- what went wrong.
E.PARK = setmetatable({}, {
  __name = "stagehand.PARK",
  __tostring = function()
    return "stagehand.PARK (a job waited inside a coroutine of its own; wait only in the job's coroutine)"
  end,
})
E.QUEUED = setmetatable({}, { __name = "stagehand.QUEUED" })
E.SLEEP = setmetatable({}, { __name = "stagehand.SLEEP" })
-- A placeholder job's w: it waits for a run of its key to start.
E.KEYWAIT = setmetatable({}, { __name = "stagehand.KEYWAIT" })
-- A when_idle waiter's w.
E.IDLE = setmetatable({}, { __name = "stagehand.IDLE" })
local PARK, QUEUED, SLEEP, KEYWAIT = E.PARK, E.QUEUED, E.SLEEP, E.KEYWAIT

-- The job whose coroutine runs now and the time it was resumed (jobs may
-- start jobs, so both are saved and restored around every resume).
E.current = nil
E.current_at = 0

-- When true (stagehand.testing sets it), each orchestrator made keeps a
-- weak-keyed o.track_waits, where every await notes what the job listens
-- to, so a leak check can find an ended job still listening: a
-- registration nothing else can reach from the orchestrator.
E.track_waits = false

-- Waits tried after a job ended: each raises at once; past LATE_LIMIT the
-- coroutine is dropped, so a pcall loop cannot keep an ended job alive.
local late = setmetatable({}, { __mode = "k" })
local LATE_LIMIT = 100

---------------------------------------------------------------------------
-- The run queue: a ring buffer of jobs.

local function grow(o)
  local q, cap, h = o.q, o.qcap, o.qh
  local nq = {}
  for i = 1, o.qn do
    nq[i] = q[h]
    h = h + 1
    if h > cap then h = 1 end
  end
  for i = o.qn + 1, cap * 2 do nq[i] = false end
  o.q, o.qcap, o.qh, o.qt = nq, cap * 2, 1, o.qn + 1
end

local function enqueue(o, job)
  if o.qn == o.qcap then grow(o) end
  local t = o.qt
  o.q[t] = job
  t = t + 1
  if t > o.qcap then t = 1 end
  o.qt = t
  o.qn = o.qn + 1
  if not o.stepping then o.driver.reschedule(o) end
end
E.enqueue = enqueue

local function dequeue(o)
  local h = o.qh
  local job = o.q[h]
  o.q[h] = false
  h = h + 1
  if h > o.qcap then h = 1 end
  o.qh = h
  o.qn = o.qn - 1
  return job
end

function E.init_queue(o)
  o.q, o.qcap, o.qh, o.qt, o.qn = {}, 64, 1, 1, 0
  for i = 1, 64 do o.q[i] = false end
end

---------------------------------------------------------------------------
-- The clock. Every reading that reaches the core is checked: a game's clock
-- that once returns nil, a string, NaN or infinity raises a clear error at
-- the call that read it, before anything was changed, instead of an error
-- from deep in the core that leaves a job half made or a step half run.

local function bad_clock(now)
  error("stagehand: the clock returned " .. (type(now) == "string" and string.format("%q", now) or tostring(now))
    .. "; it must return a finite number of milliseconds", 0)
end
E.bad_clock = bad_clock

--- Whether v is a finite number: a time the core takes. (`v - v` is 0 for
--- every finite number, NaN for NaN and both infinities.)
local function finite(v) return type(v) == "number" and v - v == 0 end
E.finite = finite

-- The orchestrator's time never runs back. A clock that does (a wall
-- clock set back, a game resetting its own) counts as no time passing, and
-- the orchestrator's time goes on from where it was: o.clock_shift is what
-- the clock has lost so far, o.clock_high the latest time read. (Without
-- this a clock set back an hour held every sleep and stall clock for that
-- hour, and progress reported "earlier" than a job's last brought its
-- deadline forward under the one the core had filed.)
local function shifted(o, now)
  now = now + o.clock_shift
  local high = o.clock_high
  if now < high then
    o.clock_shift = o.clock_shift + (high - now)
    return high
  end
  o.clock_high = now
  return now
end

--- The orchestrator's clock, read and checked.
function E.now(o)
  local now = o.clock()
  if not finite(now) then bad_clock(now) end
  return shifted(o, now)
end
local read_clock = E.now

--- When a change happened: o.now inside a step; outside one (a future the
--- game settled between steps, a slot it freed, a caller it cancelled, or
--- a job's first resume inside run) the clock read now, kept as o.now.
--- What the change ended is progress then, not at the last step's time.
function E.game_now(o)
  if o.stepping then return o.now end
  local now = E.now_or_last(o)
  o.now = now
  return now
end

-- The time of the settle under way, for each wait it ends (settle.wake)
-- or each group it moves (settle.changed): o.now inside a step; outside
-- one, the clock read once per settle (settle.seq), not once per waiter
-- (a future that 10,000 loaders await wakes them all at one moment).
-- E.step forgets it. (A number, not what settled: that could hold a loaded
-- texture for as long as nobody steps.)
local function settle_time(o)
  if o.stepping then return o.now end
  local seq = settle.seq
  if o.settle_seq ~= seq then
    o.settle_seq = seq
    return E.game_now(o)
  end
  return o.now
end

--- The clock without raising: the last good reading if it breaks.
function E.now_or_last(o)
  local ok, now = pcall(o.clock)
  if ok and finite(now) then return shifted(o, now) end
  return o.clock_high
end

---------------------------------------------------------------------------
-- Slots: small integers naming a running job in the C core.

-- A new job takes the lowest id free, from the core: ids then stay as few
-- and as ordered as the jobs running, and so do the reads of every array
-- the core and by_slot keep by id. (A Lua stack of freed ids handed a
-- later wave of jobs the ids of the last wave in reverse order of ending:
-- 100,000 pooled jobs through an orchestrator kept from an earlier wave
-- cost 1.17-1.32x what they cost through a new one, 0.83-1.03x now.)
local ids_take, ids_give = B.ids_take, B.ids_give
local ALL_TAKEN = B.SH_ESTATE -- (every one of the core's 2^24 ids is out)

function E.alloc_slot(o)
  local s = ids_take(o.ids)
  if s < 0 then
    if s == ALL_TAKEN then errors.raise("stagehand: too many jobs running at once", 2) end
    errors.raise("stagehand: out of memory", 2)
  end
  return s
end

local function free_slot(o, slot)
  o.by_slot[slot] = nil
  ids_give(o.ids, slot)
end

---------------------------------------------------------------------------
-- Watchers and records.

-- What report and watch show of a job. A job keeps its start time; its end
-- time is given by whoever saw it end (notify).
function E.record(job, ended_at, cache)
  local o = job[ORCH]
  local slot = job[CID]
  local st = job[STATE]
  local err = st and st ~= "done" and job[OUT] or nil
  local rec = {
    id = job[ID],
    key = job[KEY] or nil, -- (false in the job: no key)
    label = job[LABEL],
    state = st or "running",
    priority = o.ranks[priority.effective(job, cache)],
    started_at = job[STARTED],
    ended_at = ended_at,
    error = err and tostring(err) or nil,
    done = rawget(job, "done_n"), -- (job:progress(done, total): how far it is)
    total = rawget(job, "total_n"),
  }
  if slot and job[W] then
    rec.waiting_on, rec.waiting_since = E.describe_wait(job), job[SINCE] or nil
  end
  return rec
end

local function notify(o, job, ending)
  local ws = o.watchers
  if ws[1] == nil then return end
  local ended_at
  if ending then
    -- (A job's end is told in the middle of ending it: a clock that breaks
    -- here gives way to the last good reading rather than stop the end.)
    ended_at = E.now_or_last(o)
  end
  local rec = E.record(job, ended_at)
  o.watching = o.watching + 1 -- (orch:step names a watcher that calls it)
  for i = 1, #ws do
    local fn = ws[i]
    if fn then logm.guard(o.log, "a watcher", fn, rec) end
  end
  o.watching = o.watching - 1
end
E.notify = notify

function E.describe_wait(job)
  local w = job[W]
  if w == SLEEP then return "a sleep until " .. errors.ms(job[SLEEP_UNTIL]) end
  if w == QUEUED then return "its turn to run" end
  if w == KEYWAIT then return "a run of key " .. job[KEY] .. " to start" end
  if w == E.IDLE then return "every other job to be waiting (when_idle)" end
  if w then return w:_describe() end
  return nil
end

---------------------------------------------------------------------------
-- Ending. Total: the job leaves the clock, the timers and whatever it waits
-- on, frees its slot, aborts its signal and settles every caller's Handle.

local function unpark(job)
  local w = job[W]
  if w == QUEUED then job[W] = false end
  if not w or w == QUEUED or w == KEYWAIT then return end
  if w == SLEEP then
    timers_cancel(job[ORCH].tm, job[CID])
  elseif w == E.IDLE or rawget(job, "barrier") then
    return -- a job with no work of its own: nothing to leave
  else
    settle.unlisten(w, job)
    priority.unfollow(job[ORCH], job)
    if w._abandon then w:_abandon(job) end -- it waited in a slot or budget queue
  end
  job[W] = false
end

-- Withdraws the callers a job made that still run, in the order it made
-- them. (Its own function: a closure in end_job, even one never made,
-- keeps LuaJIT from compiling end_job at all, which cost every job 3,000
-- instructions.)
local function withdraw(owned, v)
  local hs = list.members(owned, function(a, b) return owned[a] < owned[b] end)
  for i = 1, #hs do hs[i]:cancel(v) end
end

-- What ending a job ends in turn: those following its signal (signal.abort)
-- and the callers it made (withdraw). A loader that runs the next inside
-- itself, 10,000 deep, ended each inside the end of the one above,
-- overflowed the Lua stack partway down, and left the rest running for
-- good (silently, when the overflow came inside a signal's handler). So
-- these go through a Nest one level deep (nest.lua): the first end runs
-- them as before (its signal aborts before its Handles are told, its
-- callers are withdrawn last); an end that one of them reaches only pushes
-- its own, and the first end runs them after it. A cancel still ends
-- everything it reaches before it returns, and the stack of Lua calls
-- stays a few ends deep.
local ends = nest.new(1)

--- Ends a running job: st "done" with v its packed values, or another state
--- with v the Error. The job keeps both as job[STATE] and job[OUT], which its
--- Handles read (handle.lua), so ending writes nothing into them.
function E.end_job(job, st, v)
  if job[STATE] then return false end
  local o = job[ORCH]
  local slot = job[CID]
  -- A job already queued (woken, not yet resumed) keeps its place: that
  -- resume is its cleanup. One parked mid-work is queued for it below.
  local suspended = job[CO] and job[W] and job[W] ~= QUEUED
  if job[W] ~= QUEUED then unpark(job) end
  -- (Most jobs never enter the side tables below: each is asked only when
  -- some job is in it, which saved about 100 instructions a pooled job.)
  if o.nset_of > 0 then priority.forget_sets(o, job) end
  hooks.job_ended(o, job)
  if o.nidle > 0 and o.idle[job] then
    o.idle[job] = nil
    o.nidle = o.nidle - 1
  end
  o.idle_dirty = true
  clock_stop(o.cc, slot)
  free_slot(o, slot)
  job[CID] = false
  local told = job[OUT] == TOLD
  job[STATE], job[OUT] = st, v
  o.nrunning = o.nrunning - 1
  local key = job[KEY]
  if key then
    if job.pending then
      keys.leave_pending(o, job)
    elseif o.keyed[key] == job then
      o.keyed[key] = nil
      if st ~= "cancelled" then keys.remember(o, key, job) end
    end
  end
  if st ~= "done" then
    local sig = rawget(job, "signal")
    -- (At once, unless this end is itself one that an end reached: then
    -- it waits its turn; see `ends`.)
    if sig then ends:call(signal.abort, sig, v) end
  end
  -- A job parked mid-work gets one more resume: the wait raises its end, so
  -- its cleanup runs (and no further wait can hold it).
  if suspended and job[CO] then
    job[W] = QUEUED
    enqueue(o, job)
  end
  local hs = job -- the callers' Handles live in the job's array part
  if st == "failed" then
    local seen = false
    for i = H, #hs do
      local h = hs[i]
      if h._seen or settle.listened(h) then seen = true end
    end
    if not seen then
      o.unhandled[#o.unhandled + 1] = job
      job.unheard = true -- (until the report: a `when` on its key joins its Handles)
    end
  end
  if told then
    for i = H, #hs do settle.fire(hs[i], st, v) end
  end
  notify(o, job, true) -- (job[STARTED] is read only for a watcher: see fields.lua)
  -- Callers this job made (run or when inside its work, without a signal of
  -- their own) leave with it unless it finished: nothing it asked for is
  -- kept alive, or kept at its priority, by a job that is gone.
  local owned = o.nowners > 0 and o.owned[job]
  if owned then
    o.owned[job] = nil
    o.nowners = o.nowners - 1
    if st ~= "done" then ends:call(withdraw, owned, v) end
  end
  -- An end from outside a step (a barrier's last arrival, a cancel) may
  -- leave the world idle with nothing queued: the driver's timer, set for
  -- a stall check seconds away, must come back now for the idle check.
  if o.nidle > 0 and not o.stepping then o.driver.reschedule(o) end
  return true
end

function E.fail(job, cause, tb)
  return E.end_job(job, "failed", errors.failed(job[LABEL], cause, tb))
end

function E.cancel(job, reason)
  return E.end_job(job, "cancelled", errors.cancelled(job[LABEL], reason))
end

function E.report_unhandled(o)
  local failed = o.unhandled
  if failed[1] == nil then return end
  o.unhandled = {}
  for i = 1, #failed do
    local job = failed[i]
    job.unheard = nil
    local seen = false
    for j = H, #job do
      if job[j]._seen then seen = true end
    end
    if not seen then
      local err = job[OUT]
      local msg = "[stagehand] " .. job[LABEL] .. " failed and nobody waited on it: "
        .. errors.describe_raised(err.cause)
      if err.traceback then msg = msg .. "\n" .. err.traceback end
      logm.guard(nil, "the log function", o.log, msg)
    end
  end
end

---------------------------------------------------------------------------
-- Resuming.

-- A job's coroutine runs body(work, job): it returns work's values packed,
-- then DONE, and every wait yields PARK, so a finished job is told from a
-- parked one without asking coroutine.status (a C call that breaks
-- LuaJIT's trace). Frames matter here: a parked coroutine's stack is 47
-- slots until something deeper makes LuaJIT double it, so body is tiny and
-- the wait path (E.await) keeps few locals. They matter again when the job
-- wakes: its stack, from the bottom to the wait, is read back, so each
-- slot below the wait is memory read. DONE comes after the pack so that
-- work's frame starts a slot lower, and slots.wait yields with two locals
-- live: with 100,000 jobs waiting for a slot, each then reads 0.7 cache
-- lines fewer from memory when it wakes (counted: 8.56 to 7.9 per job).
--
-- (Finished coroutines are not reused. Measured again, counted on LuaJIT,
-- with a body that yields instead of returning and a spare list of 64: a
-- job that runs and ends costs 29% less with the collector running (4,030
-- instructions to 2,870; 17% less with it paused); the issue's pool case,
-- where every job is alive at once and none is reused, is unchanged with
-- the collector paused and 3% dearer with it running. Not taken, for what
-- a game would see: coroutine.running() in a job would name a coroutine an
-- earlier job ran in, and a spare coroutine parked in that body keeps the
-- last job, its values and its orchestrator alive in its frame until it
-- is reused. The second can be designed around; the first cannot.)
--
-- body packs work's values itself, so a resume always returns at most three
-- values and after_resume takes fixed arguments: LuaJIT never starts a
-- trace at a vararg function, and after_resume runs after every resume.
local DONE = setmetatable({}, { __name = "stagehand.DONE" })
local function body(work, job) return pack(work(job)), DONE end

-- What a yield that could not leave the coroutine raised: "attempt to yield
-- across a C-call boundary" (5.4, 5.1: "... metamethod/C-call boundary";
-- LuaJIT: "attempt to yield across C-call boundary").
local function unyieldable(e)
  return type(e) == "string" and e:find("attempt to yield", 1, true) ~= nil
end

local function after_resume(job, co, prev, prev_at, ok, a, done)
  E.current, E.current_at = prev, prev_at
  if a == PARK and ok then return end
  if job[W] and not job[STATE] and (ok or unyieldable(a)) then
    -- A wait marked the job parked, but its yield never reached here: it
    -- was made where the coroutine cannot yield, or in a coroutine of the
    -- game's own. The job leaves what it waited on and fails, saying so.
    local err = E.unyielded(job, not ok and a or nil)
    job[CO] = false
    E.fail(job, err, traceback(co, err))
    return
  end
  if done == DONE and ok then
    local packed = a
    job[CO] = false
    if job[STATE] then return end -- ended earlier; its cleanup has now run
    E.end_job(job, "done", packed)
    return
  end
  if not ok then
    if job[W] and not job[STATE] then unpark(job) end -- (a wait that raised after it parked)
    job[CO] = false
    if job[STATE] then return end
    E.fail(job, a, traceback(co, errors.describe_raised(a)))
    return
  end
  do
    -- work (or something it called) yielded past stagehand; resuming it
    -- later would hand it values it does not expect.
    job[CO] = false
    if not job[STATE] then
      E.fail(job, "work yielded with coroutine.yield; inside a job, wait with job:await, "
        .. "job:call, job:sleep or job:slice", traceback(co))
    end
  end
end

--- Resumes a job's coroutine; `work` is given on its first resume only. A
--- later resume hands the job itself back to its wait (the token check_wait
--- relies on).
function E.resume(job, now, work)
  local prev, prev_at = E.current, E.current_at
  E.current, E.current_at = job, now
  job[ORCH].now = now
  local co = job[CO]
  local ok, a, done
  if work then
    ok, a, done = co_resume(co, work, job)
  else
    ok, a, done = co_resume(co, job)
  end
  -- (Not `return after_resume(..., co_resume(...))`: that tail call passes
  -- a variable number of values, which costs more in the interpreter, where
  -- this runs after every resume.)
  return after_resume(job, co, prev, prev_at, ok, a, done)
end

--- The job whose work runs now, or nil. A resume that raised before the
--- job's coroutine ran (out of memory for the call itself) leaves a stale
--- E.current behind: its coroutine is suspended or dead, not running, and
--- it is cleared here, so no orchestrator refuses to step for good.
local co_status = coroutine.status
function E.in_job()
  local cur = E.current
  if cur == nil then return nil end
  local co = cur[CO]
  if co then
    local st = co_status(co)
    if st == "running" or st == "normal" then return cur end
  end
  E.current = nil
  return nil
end

--- Registers a new job; stall_ms false gives it no stall clock (when_idle).
--- The caller tells the watchers (E.notify) once the job is fully made:
--- a watcher is game code, and may run, join, cancel or report anything.
local rawset = rawset
function E.start(o, job, stall_ms, now)
  local slot = E.alloc_slot(o)
  -- (The one write here that may need memory: should it fail, the id goes
  -- back, and nothing of the job is left registered.)
  if not pcall(rawset, o.by_slot, slot, job) then
    ids_give(o.ids, slot)
    error("not enough memory", 0)
  end
  job[CID] = slot
  job[STARTED] = now
  o.nrunning = o.nrunning + 1
  if stall_ms then B.check(clock_start(o.cc, slot, stall_ms, now), "start a stall clock") end
  local doomed = o.closing_jobs
  if doomed then
    -- (close is under way: a job started inside the cleanup of one it
    -- ended, or in reaction to ending it, is close's to end too)
    local cur = E.current
    if o.close_cancelling or (cur and doomed[cur]) then doomed[job] = true end
  end
end

-- Runs made inside other jobs' first resumes, one inside another (counted
-- in E.start_depth by orch:run): each job's coroutine is resumed inside
-- the one before, and PUC Lua stops at about 200 (a "C stack overflow"
-- raised partway through making the job, which left the orchestrator
-- counting -1 jobs); LuaJIT's own C stack ran out at about 150,000, and
-- the process died. A run deeper than this starts its work from the run
-- queue instead, in the same step (or the next, outside one). (A few
-- levels more than any loader needs, and few enough that a level may also
-- nest a job:pcall or two of its own.)
E.MAX_NESTED_STARTS = 32
E.start_depth = 0

--- Runs a new job's work up to its first wait, nested in the current
--- job's resume when there is one; past MAX_NESTED_STARTS, from the run
--- queue instead.
function E.start_work(o, job, work, now)
  local depth = E.current and E.start_depth or 0 -- (outside every job: none, whatever was left)
  if depth >= E.MAX_NESTED_STARTS then
    E.queued_start(o, job, work)
  else
    E.start_depth = depth + 1
    E.resume(job, now, work)
    E.start_depth = depth
  end
end

--- Under stagehand.testing: orchestrators made from now on note what every
--- await listens to (track_waits above).
function E.set_track_waits(on) E.track_waits = on and true or false end

--- The coroutine a job's work runs in (placeholder jobs have none).
function E.coroutine()
  return co_create(body)
end

--- A coroutine for a job whose work starts from the run queue (a start
--- too deep: MAX_NESTED_STARTS). Its first resume is handed the job, as
--- every later one is; a job that ended before then never runs its work.
function E.queued_start(o, job, work)
  job[CO] = co_create(function(j)
    if j[STATE] then return pack(), DONE end
    return body(work, j)
  end)
  job[W] = QUEUED
  job[SINCE] = o.now -- (waiting for its turn: report and dump say since when)
  enqueue(o, job)
end

---------------------------------------------------------------------------
-- Waiting.

local function misplaced(job, what, level)
  if not is_job(job) then -- (the public methods ask first: this is for anything else)
    require("stagehand.options").bad_self("job:" .. what, "a job (the one its work receives)", job, level + 1)
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
    co_yield(PARK) -- never resumed: the coroutine is dropped
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
function E.raise_late(job, what)
  local n = (late[job] or 0) + 1
  late[job] = n
  if n > LATE_LIMIT and E.current == job then
    job[CO] = false
    co_yield(PARK) -- never resumed: the coroutine is dropped
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
--- (E.await): stagehand resumes a job with the job itself, and a wait made in
--- a coroutine of the user's own is resumed by the user, with anything else.
function E.check_wait(job, what)
  if type(job) ~= "table" then misplaced(job, what, 3) end -- (job.sleep(5): a dot for a colon)
  if job[STATE] then E.raise_late(job, what) end
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

-- What a job that made a wait its coroutine could not yield from is told:
-- where waits may be made. `raised` is what the failed yield raised, if
-- the job ended with it.
local WAIT_NAMES = { [QUEUED] = "a wait", [SLEEP] = "job:sleep" } -- (queued: woken since, what it was is gone)
function E.unyielded(job, raised)
  local w = job[W]
  unpark(job)
  local what = WAIT_NAMES[w] or (type(w) == "table" and w.kind == "pool" and "job:slot")
    or (type(w) == "table" and w.kind == "budget" and "job:permit") or "job:await"
  local msg = what .. " in " .. job[LABEL] .. " could not suspend the job: a wait must be made in the"
    .. " job's own coroutine, not inside a C function's callback (string.gsub, table.sort, ...), a"
    .. " coroutine of the game's own, or (Lua 5.1) a plain pcall (use job:pcall)"
  if raised ~= nil then msg = msg .. " [" .. errors.one_line(raised) .. "]" end
  return msg
end

local function settled_values(x)
  local v = x._v
  if x._st == "done" then return unpack(v, 1, v.n or 1) end
  error(v, 0)
end

-- What a wait on `x` follows, seen from orchestrator `o`: the job or jobs of
-- `o` it waits on, or nil. A wait on any job of another orchestrator follows
-- nothing, as a wait on a future does: that orchestrator may be hidden or
-- never stepped, so the waiter keeps its own stall clock running, and
-- priorities, cycles and idleness stay within each orchestrator (the core's
-- priority groups and stall clocks are each orchestrator's own).
--
-- With `loose`, the jobs of `o` it waits on among whatever else (a group
-- holding a Future beside them, or jobs of another orchestrator), and
-- whether there is nothing else: a job awaiting it awaits those jobs (its
-- rank reaches them, a cycle through them raises), and its own clock
-- pauses only when there is nothing else.
local function follows_in(o, x, loose)
  local f, whole = x:_follows(loose)
  if f == nil then return nil end
  if is_job(f) then
    if f[ORCH] ~= o then return nil end
    return f, true
  end
  for i = 1, #f do
    if f[i][ORCH] ~= o then
      if not loose then return nil end
      local own, n = {}, 0
      for j = 1, #f do
        if f[j][ORCH] == o then
          n = n + 1
          own[n] = f[j]
        end
      end
      if n == 0 then return nil end
      return own, false
    end
  end
  return f, whole ~= false
end
E.follows_in = follows_in

-- A path of jobs from `job` back to `target` through what each awaits, or
-- nil. `seen` and `path` may be shared by searches from several starts (the
-- parts of stagehand.all): a job explored once without reaching target
-- never will, and a search that fails leaves path as it found it. (No
-- closures here: LuaJIT cannot compile making one, and an await on a
-- list of 10,000 Handles searches from each.)
--
-- Depth first with a stack of its own, not by recursion: a chain of awaits
-- may be thousands deep (job i awaiting job i-1), past Lua's own stack. The
-- stack is kept between calls (the search runs no game code, so none can
-- start another in the middle): frame k is the job path[base + k] and what
-- it follows, and how far along that the search has gone.
local follows_stack, next_stack = {}, {}

local function find_cycle(target, job, seen, path)
  local base = #path
  local top = 0
  while true do
    if job == target then
      for k = 1, top do follows_stack[k] = false end
      return path
    end
    if not (seen[job] or job[STATE]) then
      seen[job] = true
      local w = job[W]
      if w and w ~= QUEUED and w ~= SLEEP and w ~= KEYWAIT and job[CO] then
        local f = follows_in(job[ORCH], w, true)
        if f ~= nil then
          top = top + 1
          path[base + top] = job
          follows_stack[top], next_stack[top] = f, 1
        end
      end
    end
    -- The next job to explore: the next one the deepest frame follows,
    -- dropping the frames that have none left.
    job = nil
    while top > 0 do
      local f, i = follows_stack[top], next_stack[top]
      if is_job(f) then
        if i == 1 then job = f end
      elseif i <= #f then
        job = f[i]
      end
      if job ~= nil then
        next_stack[top] = i + 1
        break
      end
      follows_stack[top] = false
      path[base + top] = nil
      top = top - 1
    end
    if job == nil then return nil end
  end
end

local function cycle_error(job, path)
  if path[1] == nil then
    return errors.new("cycle", job[LABEL], job[LABEL] .. " awaits its own Handle: a cycle of waits",
      { jobs = { job[LABEL] } })
  end
  -- Every job of the cycle is in `jobs`; the message names at most a dozen
  -- (a cycle may be thousands of links long).
  local n = #path
  local jobs = { job[LABEL] }
  for i = 1, n do jobs[i + 1] = path[i].label end
  local names
  if n <= 10 then
    names = table.concat(jobs, " -> ")
  else
    names = table.concat(jobs, " -> ", 1, 6) .. " -> ... (" .. (n - 10) .. " more) ... -> "
      .. table.concat(jobs, " -> ", n - 3, n + 1)
  end
  return errors.new("cycle", job[LABEL], "awaiting " .. path[1].label
    .. " would close a cycle of waits: " .. names .. " -> " .. job[LABEL], { jobs = jobs })
end

-- Raises a cycle Error if waiting on what `x` follows would close a cycle;
-- returns the job or jobs x follows (its priority flows to them), or nil,
-- and whether that is all it waits on (the waiter's own clock then pauses).
local function check_follows(job, x)
  local o = job[ORCH]
  local f, whole = follows_in(o, x, true)
  if f == nil then return nil end
  if o.awaiters[job] == nil then
    -- Nothing waits on `job` (priority.lua files every job parked on
    -- something that follows it), so no chain of waits leads back to it:
    -- only a wait on itself would close a cycle. A chain of loaders each
    -- awaiting the one made before it builds in O(n) this way, not O(n^2).
    if f == job or (not is_job(f) and list.has(f, job)) then error(cycle_error(job, {}), 0) end
    return f, whole
  end
  local path
  if is_job(f) then
    path = find_cycle(job, f, {}, {})
  else
    local seen, walked = {}, {}
    for i = 1, #f do
      path = find_cycle(job, f[i], seen, walked)
      if path then break end
    end
  end
  if path then error(cycle_error(job, path), 0) end
  return f, whole
end

-- Jobs parked on a group whose own clock runs (something beside jobs is
-- open in it): the stamp (settle.seq) of the last part it heard of, or
-- PAUSED once the group came to await only jobs (settle.changed). Weak: a
-- job that ends while parked leaves its entry.
local open_wait = setmetatable({}, { __mode = "k" })
local PAUSED = "paused"

--- Waits inside `job` for the settle-able `x`; returns its values or raises.
function E.await(job, x)
  E.check_wait(job, "await")
  -- (Awaiting an ended Handle hears its end now; one still running is
  -- heard while this job listens to it: see end_job.)
  if x._st then
    if x.__handle then x._seen = true end
    local o = job[ORCH]
    B.clock_progress(o.cc, job[CID], o.now)
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
    if follows then o.idle_dirty = true end
    job[SINCE] = o.now
    if whole then
      B.clock_pause(o.cc, job[CID])
    elseif rawget(x, "parts") then
      open_wait[job] = settle.seq -- (a group: each part that settles is progress)
    end
    if follows then priority.follow(o, job, follows) end
  end
  if co_yield(PARK) ~= job then misplaced(job, "await", 2) end
  local o = job[ORCH]
  if follows then priority.unfollow(o, job) end
  local open = rawget(x, "parts") and open_wait[job]
  if open then open_wait[job] = nil end
  if job[STATE] then raise_ended(job) end
  if (follows and not open) or open == PAUSED then
    B.clock_resume(o.cc, job[CID], E.current_at)
  else
    B.clock_progress(o.cc, job[CID], E.current_at)
  end
  return settled_values(x)
end

--- Parks `job` on a sleep of `ms`; the end of a sleep is not progress.
function E.sleep(job, ms)
  E.check_wait(job, "sleep")
  do -- (locals end before the yield: see E.await)
    local o = job[ORCH]
    local now = read_clock(o)
    job[SLEEP_UNTIL] = now + ms
    -- (A sleep of math.huge never wakes: the job's stall clock ends it.)
    if ms < math.huge then timers_add(o.tm, job[CID], now + ms) end
    job[W] = SLEEP
    job[SINCE] = now
  end
  if co_yield(PARK) ~= job then misplaced(job, "sleep", 2) end
  if job[STATE] then raise_ended(job) end
end

-- For waits that park in their own frame (slots.lua's M.wait).
E.misplaced, E.raise_ended = misplaced, raise_ended

--- Yields to the driver, to run again after what is queued.
function E.yield_turn(job)
  E.check_wait(job, "slice")
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
-- again from here. (Its resume counts once more: see E.await.)
settle.on_wake(function(job, from)
  if job[W] ~= from then return end
  job[W] = QUEUED
  local o = job[ORCH]
  if o.followed[job] then priority.unfollow(o, job) end
  B.clock_resume(o.cc, job[CID], settle_time(o))
  enqueue(o, job)
end)

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
  o.idle_dirty = true
  if left and o.followed[job] then
    priority.unfollow(o, job)
    local f = follows_in(o, g, true)
    if f then priority.follow(o, job, f) end
  end
  local ow = open_wait[job]
  if ow and ow ~= PAUSED then
    B.clock_progress(o.cc, job[CID], settle_time(o))
    open_wait[job] = settle.seq
    if freed and follows_in(o, g) ~= nil then
      B.clock_pause(o.cc, job[CID])
      open_wait[job] = PAUSED
    end
  end
  if o.nidle > 0 and not o.stepping then o.driver.reschedule(o) end
end)

---------------------------------------------------------------------------
-- Pumping.

function E.wake_sleeps(o, now)
  local tm, by_slot = o.tm, o.by_slot
  local slot = timers_pop(tm, now)
  while slot >= 0 do
    local job = by_slot[slot]
    if job and job[W] == SLEEP then
      job[W] = QUEUED
      enqueue(o, job)
    end
    slot = timers_pop(tm, now)
  end
end

---------------------------------------------------------------------------
-- Timeouts (orch:timeout): signals that abort at a time of this
-- orchestrator's clock. o.timeouts is kept sorted by due time, equal ones
-- in the order they were made; a game makes a few, so insertion is a walk.

function E.add_timeout(o, due, sig, ms)
  local ts = o.timeouts
  local i = #ts
  while i > 0 and ts[i].due > due do
    ts[i + 1] = ts[i]
    i = i - 1
  end
  ts[i + 1] = { due = due, sig = sig, ms = ms }
end

--- Aborts every timeout due by `now`, earliest first.
function E.fire_timeouts(o, now)
  local ts = o.timeouts
  while ts[1] ~= nil and ts[1].due <= now do
    local t = table.remove(ts, 1)
    signal.abort(t.sig, errors.new("timeout", "orch:timeout",
      "timed out after " .. errors.ms(t.ms) .. " ms", { ms = t.ms }))
  end
end

-- The earliest due time of a timeout something listens to (a run's signal,
-- an abortable), or nil: one nobody listens to keeps no host awake.
local function next_timeout(o)
  local ts = o.timeouts
  for i = 1, #ts do
    if ts[i].sig._ls ~= nil then return ts[i].due end
  end
  return nil
end

function E.check_stalls(o, now)
  local cc, by_slot = o.cc, o.by_slot
  local slot = clock_pop_stalled(cc, now)
  while slot >= 0 do
    local job = by_slot[slot]
    local ow = job and open_wait[job]
    local w = ow and ow ~= PAUSED and job[W]
    if w and w._settled_since and w:_settled_since(ow) then
      -- A part settled deep in the group it awaits since it last heard:
      -- progress (taken now), not a stall.
      open_wait[job] = settle.seq
      B.check(B.clock_start(cc, slot, B.clock_stall_ms(cc, slot), now), "restart a stall clock")
    elseif job then
      local err = errors.stalled(job[LABEL], B.clock_stall_ms(cc, slot))
      if job.barrier then
        local missing = job.barrier:missing()
        err.missing = missing
        err.message = err.message .. " Missing: " .. errors.list_keys(missing) .. "."
      end
      logm.guard(nil, "the log function", o.log, "[stagehand] " .. err.message)
      E.end_job(job, "stalled", err)
    end
    slot = clock_pop_stalled(cc, now)
  end
  o.next_check = now + o.check_ms
end

-- Runs queued continuations oldest first until nothing is left or the
-- deadline passes; leaves the last clock reading in o.now. Slots freed
-- while it runs are granted in passes: once every continuation queued at
-- the last round has run, one round grants all the slots freed meanwhile,
-- and the jobs it grants run in the next pass, in the same step. A round
-- reads each priority source once, however many it grants. (A round after
-- every continuation read each waiting job's closure again at every
-- release: with a closure per portrait, 4,000 through a pool of 4 ran 2.2x
-- the instructions they do now. A round only when the queue ran dry held
-- every grant back while a sliced job kept queueing itself.) The granted
-- jobs would have run after everything queued before them anyway; reading
-- later only reads what the game changed meanwhile.
--
-- (The loop ends by its condition or break, never by return: LuaJIT cannot
-- record a return out of a loop to a lower frame, and a loop whose traces
-- keep aborting is blacklisted, taking the step with it.)
local function run_queue(o, deadline)
  local clock = o.clock
  local now = o.now
  local grant_round, ran = hooks.grant_round, hooks.ran
  local permit_of = o.permit_of
  if o.grantable then grant_round(o) end
  local pass = o.qn -- continuations left before the next round of grants
  while o.qn > 0 do
    local job = dequeue(o)
    -- Entries whose job has since parked elsewhere (see check_wait) are stale.
    if job[W] == QUEUED and job[CO] then
      job[W] = false
      E.resume(job, now)
    end
    local before = now -- (the resume above ran from `now` on)
    now = clock()
    if not finite(now) then bad_clock(now) end
    o.now = now
    if permit_of[job] then ran(o, job, now - before) end
    if deadline and now >= deadline then break end
    pass = pass - 1
    if pass <= 0 then
      if o.grantable then grant_round(o) end
      pass = o.qn
    end
  end
end

-- run_queue, then budgets: they grant once everything runnable has run, so
-- all the jobs that asked for a permit in this step compete for it by
-- priority (a streaming world's chunks whose meshes came in this frame
-- finalize nearest first, not in the order they woke). Their holders run
-- in the same step.
local function drain(o, deadline)
  run_queue(o, deadline)
  while o.budget_due and not (deadline and o.now >= deadline) do
    if not hooks.budget_round(o) then break end
    run_queue(o, deadline)
  end
end

-- Every turn of the drain loop resumes a coroutine, which a LuaJIT trace
-- cannot follow: the trace stops there and another continues after it
-- ("stitching"). If the loop's own trace is first recorded on a turn that
-- resumes, LuaJIT (whose choices are partly random) may never close the
-- loop: each turn's continuation records the next turn up to its resume,
-- a new trace per turn, until the machine-code area runs out and every
-- trace is flushed. Measured: twice the instructions per pooled job in
-- about one process of three. So the loop is warmed here, at load, on a
-- queue of stale entries (jobs no longer waiting to run), which records it
-- as a closed loop; the resume is then a side exit whose stitched
-- continuation links back to that loop.
do
  local stale = { false, false, false, false, false, false, false, false, false, false }
  local warm = {
    qn = 0, stepping = true, grantable = false, budget_due = false, permit_of = {},
    clock = function() return 0 end, now = 0,
  }
  E.init_queue(warm)
  for _ = 1, 300 do enqueue(warm, stale) end
  drain(warm, nil)
end

-- Jobs that are, directly or through what they await, waiting on when_idle.
-- What a job is parked on that may follow other jobs (an awaitable, a
-- queue), or nil: it has no coroutine, or it runs, is queued, asleep or
-- waiting for its key's run to start. (Both idle checks below start here.)
local function parked_on(job)
  if not job[CO] then return nil end
  local w = job[W]
  if not w or w == QUEUED or w == SLEEP or w == KEYWAIT then return nil end
  return w
end

-- Whether `start` is, directly or through what it awaits, waiting on
-- when_idle: an idle waiter itself, or parked following jobs that all are.
-- memo holds each job's answer (false while it is being worked out: a cycle
-- of waits is not idle). Depth first on a stack of its own, like
-- find_cycle: a chain of awaits thousands deep overflowed Lua's stack and
-- made every step raise. Frame k is a job, what it follows, and which of
-- those comes next; `got` is the answer for the job last finished.
local idle_jobs, idle_follows, idle_next = {}, {}, {}

local function idle_blocked(o, start, memo)
  local m = memo[start]
  if m ~= nil then return m end
  local top = 0
  local job = start -- a job to work out, or nil
  local got
  while true do
    if job ~= nil then
      memo[job] = false
      got = false
      if o.idle[job] then
        memo[job] = true
        got = true
      else
        local w = parked_on(job)
        local f = w and follows_in(o, w)
        if f ~= nil and (is_job(f) or #f > 0) then
          top = top + 1
          idle_jobs[top], idle_follows[top], idle_next[top] = job, f, 1
          got = nil -- (a frame to work on, no answer yet)
        end
      end
      job = nil
    end
    -- The top frame takes the answer for its last job: a job not waiting
    -- on when_idle ends it false; else its next job, or true at the end.
    while top > 0 and job == nil do
      local finished
      if got == false then
        finished = false
      else
        local f, i = idle_follows[top], idle_next[top]
        local nxt
        if is_job(f) then
          if i == 1 then nxt = f end
        elseif i <= #f then
          nxt = f[i]
        end
        if nxt == nil then
          finished = true
        else
          idle_next[top] = i + 1
          local known = memo[nxt]
          if known == nil then job = nxt else got = known end
        end
      end
      if finished ~= nil then
        memo[idle_jobs[top]] = finished
        idle_jobs[top], idle_follows[top] = false, false
        top = top - 1
        got = finished
      end
    end
    if job == nil then return got end
  end
end

-- A job surely not waiting on when_idle, told in O(1): it has no
-- coroutine, is running, queued or asleep, or is parked on something that
-- follows no job (a future, a slot queue). The idle check looks for one of
-- these before it walks what the others await: a scene loader awaiting
-- `stagehand.all` of 10,000 assets made every step whose check met it first
-- list all 10,000 (half a millisecond a step), though any asset waiting on
-- its download already said "not idle".
local function surely_busy(o, job)
  if o.idle[job] then return false end
  local w = parked_on(job)
  if not w then return true end
  if rawget(w, "parts") then return false end -- a group: walked if need be
  return follows_in(o, w) == nil
end

local by_id = F.by_id

--- Every running job, in start order.
function E.running_jobs(o)
  local jobs = {}
  for _, job in each, o.by_slot do jobs[#jobs + 1] = job end
  table.sort(jobs, by_id)
  return jobs
end

--- Settles every when_idle waiter once each running job waits on one.
function E.idle_check(o)
  if o.nidle == 0 or not o.idle_dirty then return end
  o.idle_dirty = false
  for _, job in each, o.by_slot do
    if surely_busy(o, job) then return end
  end
  local memo = {}
  for _, job in each, o.by_slot do
    if not idle_blocked(o, job, memo) then return end
  end
  local waiters = {}
  for job in each, o.idle do waiters[#waiters + 1] = job end
  table.sort(waiters, by_id)
  for i = 1, #waiters do E.end_job(waiters[i], "done", pack()) end
end

-- The work of one step. Jobs' own errors end those jobs; anything raised
-- here (a clock that broke mid-step, a fault of stagehand's own) ends the
-- step, and E.step passes it on.
local function step_body(o, now, deadline)
  if o.prio_broken then priority.rebuild(o) end -- (memory ran out mid-change: priority.lua)
  E.wake_sleeps(o, now)
  if o.timeouts[1] ~= nil then E.fire_timeouts(o, now) end
  hooks.step_began(o)
  drain(o, deadline)
  now = o.now
  if now >= o.next_check then
    -- Jobs the check ends get their cleanup resume in this same step.
    E.check_stalls(o, now)
    if not deadline or now < deadline then drain(o, deadline) end
  end
  if o.qn == 0 then
    -- Once a step, so a preloader whose tasks end at once cannot spin here.
    E.idle_check(o)
    if o.qn > 0 and (not deadline or o.now < deadline) then drain(o, deadline) end
  end
end

local co_running = coroutine.running

--- One step. Whatever happens in it, the orchestrator leaves the step: an
--- error raised inside is raised again once the step is over, so the next
--- step runs as usual.
function E.step(o, budget_ms)
  if o.stepping then
    if co_running() ~= o.step_thread then
      -- The step is not on this thread's stack: it was suspended before it
      -- ended, inside a coroutine of the game's own. Only a callback that
      -- yielded does that (Lua 5.4 and LuaJIT let a yield cross pcall), and
      -- nothing can step this orchestrator again until that coroutine runs.
      error("orch:step is already running: an earlier step was suspended before it ended, in a coroutine"
        .. " of the game's own (a priority function, watcher, on_end or on_abort handler or the log"
        .. " function yielded; none may)", 3)
    end
    error("orch:step is already running: it cannot be called from inside a job, nor from a watcher, on_end,"
      .. " on_abort handler or priority function that a step runs", 3)
  end
  local now = read_clock(o)
  o.now = now
  local cur, cur_at = E.current, E.current_at -- (restored whatever the step raises)
  o.settle_seq = -1 -- (settle_time's, whose reading is past)
  o.round = o.round + 1 -- (each priority function is read once a step: slots.read_ranks)
  o.stepping = true
  o.step_thread = co_running()
  local ok, err = pcall(step_body, o, now, budget_ms and now + budget_ms)
  o.stepping = false
  E.current, E.current_at = cur, cur_at
  E.report_unhandled(o)
  if not ok then error(err, 0) end
  o.driver.reschedule(o)
  if o.qn > 0 then return o.nrunning + E.cleanups_queued(o) end
  return o.nrunning
end

--- Ended jobs whose cleanup (the resume after their aborted wait) is still
--- queued: a step that left them counts them, so `while step(0) > 0`
--- leaves nothing behind.
function E.cleanups_queued(o)
  local q, cap, i, n = o.q, o.qcap, o.qh, 0
  for _ = 1, o.qn do
    local job = q[i]
    if job and job[STATE] and job[CO] and job[W] == QUEUED then n = n + 1 end
    i = i + 1
    if i > cap then i = 1 end
  end
  return n
end

function E.next_wake(o)
  -- (Not o.budget_due: a budget changed while nobody waits for a permit
  -- marks it, and a step would find nothing to grant.)
  if o.qn > 0 or o.grantable or hooks.budgets_waiting(o) then return 0 end
  -- (a when_idle waiter, and something changed since the last idle check)
  if o.idle_dirty and o.nidle > 0 then return 0 end
  local tdue = o.timeouts[1] ~= nil and next_timeout(o)
  if o.nrunning == 0 and not tdue then return nil end
  local now = read_clock(o)
  local best
  if tdue then
    best = tdue - now
    if best < 0 then best = 0 end
  end
  if B.timers_count(o.tm) > 0 then
    local t = B.timers_peek(o.tm) - now
    if t < 0 then t = 0 end
    if best == nil or t < best then best = t end
  end
  local nd = B.clock_next_due(o.cc, now)
  if nd >= 0 then
    local c = o.next_check - now
    if nd > c then c = nd end
    if c < 0 then c = 0 end
    if best == nil or c < best then best = c end
  end
  return best
end

return E
