-- Folder engine/ (layer 1): jobs and their life. engine.lua (records,
-- resuming, ending, stall checks, the step), runqueue.lua, clock.lua,
-- fields.lua and marks.lua (where a job keeps its fields, what it is
-- parked on), nest.lua, settle.lua (the base of every awaitable),
-- signal.lua, timeouts.lua, owners.lua, closing.lua, records.lua (what
-- report, dump and watch show), errors.lua, options.lua, log.lua, list.lua,
-- mend.lua (what memory running out left undone, mended at the next step).
-- It offers the layers above engine.on (a job ending, its holds released,
-- idleness, other threads' work), settle.on_wake, settle.on_recount,
-- fields.define_jobs, records.describe_priority_with,
-- engine.orchestrators_are.
--
-- A job parks on one thing at a time (job[W]): a settle-able (settle.lua),
-- SLEEP (a C timer under its slot) or QUEUED (in the run queue); what it
-- parks on wakes it by queueing it, and `step` resumes queued jobs oldest
-- first. Its stall clock lives in the C core under its slot.
local B = require "stagehand.core.backend"
local errors = require "stagehand.engine.errors"
local settle = require "stagehand.engine.settle"
local compat = require "stagehand.core.compat"
local each = compat.each
local signal = require "stagehand.engine.signal"
local logm = require "stagehand.engine.log"
local F = require "stagehand.engine.fields"
local nest = require "stagehand.engine.nest"
local marks = require "stagehand.engine.marks"
local clock = require "stagehand.engine.clock"
local runqueue = require "stagehand.engine.runqueue"
local records = require "stagehand.engine.records"
local mend = require "stagehand.engine.mend"
local settle_entered, settle_left = settle.entered, settle.left

local ORCH, CID, CO, W, STATE, OUT, LABEL, H, SINCE, STARTED =
  F.ORCH, F.CID, F.CO, F.W, F.STATE, F.OUT, F.LABEL, F.H, F.SINCE, F.STARTED

local co_create, co_resume = coroutine.create, coroutine.resume
local traceback = debug.traceback
local pack = settle.pack

local clock_start, clock_stop = B.clock_start, B.clock_stop
local check, EINVAL = B.check, B.SH_EINVAL
local clock_pop_stalled = B.clock_pop_stalled
local timers_cancel, timers_pop = B.timers_cancel, B.timers_pop

local E = { errors = errors, F = F }

-- Hooks: what the engine tells the features that register for them
-- (E.on(name, fn)) when they load. The engine names no feature module.
local function none() end
local hooks = {
  -- A job is ending, its end not yet seen, (o, job): sources forget its
  -- counts, slots release what it holds, idle forgets a when_idle waiter.
  -- (Three hooks called from end_job itself, not one chained: ending is
  -- kept as shallow as it can be, for memory may run out in it.)
  forget_counts = none,
  release_holds = none,
  leave_idle = none,
  job_ended = none, -- (o, job, st): its end is set (keys forget or remember it)
  owned_left = none, -- (o, job): its end is told (the callers it made leave with it: owners)
  job_gone = none, -- (o, job): all of its end is done (idle reschedules)
  wait_left = none, -- (o, job): a job stops waiting on what it awaited (sources)
  stalled = none, -- (job, err): a job stalls with err (a barrier names its missing keys)
  step_began = none, -- (o, now): a step begins (budgets reset, timeouts fire)
  quiet = none, -- (o): a step's run queue ran dry (idle settles when_idle waiters)
  grant_round = function() return false end, -- (o): grants what can be granted now; true if any
  budget_round = function() return false end, -- (o): grants the budgets' permits; true if any
  ran = none, -- (o, job, ms): a job that held a permit of an ms budget ran ms
  budgets_waiting = function() return false end, -- (o): whether some budget has waiters
  idle_due = function() return false end, -- (o): whether an idle check is due
  -- Work on other threads (outside.lua): whether something they sent waits
  -- to be collected by a step; whether any may still come; and a wait
  -- (o, ms) that blocks until something comes or ms pass (true if it came).
  outside_ready = function() return false end,
  outside_pending = function() return false end,
  outside_wait = function() return false end,
  closed = none, -- (o): close begins, or orch:loop returns (threads name what they still wait on)
  -- A job run with opts.phase (job.phase) counts as a task of that phase
  -- for the load tracker: (o, job) it began, (job) it said how far it is,
  -- (o, job, st) it ended (true if a tracker counted it: its failure is
  -- heard).
  phase_began = none,
  phase_progressed = none,
  phase_ended = none,
  next_due = none, -- (o): the time of the next timeout something listens to, or nil
  -- (o, job): whether a job with no work follows `job` unfiled (a load tracker's idle Handle)
  followed_outside = function() return false end,
}
-- Hooks every registration adds to, in the order they came; the others
-- take one function.
local CHAINED = { step_began = true, stalled = true }

-- The hooks every job's end calls, also kept in locals (set by E.on): a
-- local is read faster than a table's field, and every job ends.
local forget_counts, release_holds, leave_idle, job_ended, owned_left, job_gone =
  none, none, none, none, none, none

--- Registers `fn` for the hook `name` (one of the keys of hooks above).
-- The orchestrators' metatable, told by orchestrator.lua (the layer on
-- top): the layers between check what they are given with it, without
-- requiring the orchestrator.
local orchestrator_mt
function E.orchestrators_are(mt) orchestrator_mt = mt end
function E.is_orchestrator(o) return orchestrator_mt ~= nil and getmetatable(o) == orchestrator_mt end

function E.on(name, fn)
  local prev = hooks[name]
  if prev == nil then error("stagehand: no engine hook named " .. tostring(name), 2) end
  if CHAINED[name] and prev ~= none then
    hooks[name] = function(a, b, c) prev(a, b, c) fn(a, b, c) end
  else
    hooks[name] = fn
  end
  forget_counts, release_holds, leave_idle = hooks.forget_counts, hooks.release_holds, hooks.leave_idle
  job_ended, owned_left, job_gone = hooks.job_ended, hooks.owned_left, hooks.job_gone
end
local TOLD = F.TOLD

-- The job whose coroutine runs now and the time it was resumed (jobs may
-- start jobs, so both are saved and restored around every resume).
E.current = nil
E.current_at = 0

-- When true (stagehand.testing sets it), each orchestrator made keeps a
-- weak-keyed o.track_waits, where every await notes what the job listens
-- to, so a leak check can find an ended job still listening: a
-- registration nothing else can reach from the orchestrator.
E.track_waits = false

-- What a job is parked on besides an awaitable or a queue, and what a
-- parking coroutine yields (marks.lua); the clock (clock.lua). Both read
-- through the engine too.
local PARK, QUEUED, SLEEP, KEYWAIT = marks.PARK, marks.QUEUED, marks.SLEEP, marks.KEYWAIT
E.PARK, E.QUEUED, E.KEYWAIT = PARK, QUEUED, KEYWAIT
local open_wait, PAUSED = marks.open_wait, marks.PAUSED
local read_clock = clock.now
E.now, E.game_now, E.finite = clock.now, clock.game_now, clock.finite

-- The run queue (runqueue.lua): jobs whose continuation is due, oldest first.
local enqueue, dequeue = runqueue.push, runqueue.pop
E.enqueue, E.init_queue, E.make_room = runqueue.push, runqueue.init, runqueue.room

---------------------------------------------------------------------------
-- Slots: small integers naming a running job in the C core.
-- A new job takes the lowest id free, from the core: ids then stay as few
-- and as ordered as the jobs running, and so do the reads of every array
-- the core and by_slot keep by id (docs/performance.md, kept orchestrators).
local ids_take, ids_give = B.ids_take, B.ids_give
local ALL_TAKEN = B.SH_ESTATE -- (every one of the core's 2^24 ids is out)

function E.alloc_slot(o)
  local s = ids_take(o.ids)
  if s < 0 then
    if s == ALL_TAKEN then errors.raise("stagehand: too many jobs running at once", 2) end
    errors.raise("stagehand: not enough memory", 2)
  end
  return s
end

local function free_slot(o, slot)
  o.by_slot[slot] = nil
  check(ids_give(o.ids, slot), "give back a job's id")
end

-- What report and watch show of a job (records.lua).
local notify = records.notify
E.notify, E.record = records.notify, records.record

---------------------------------------------------------------------------
-- Ending. Total: the job leaves the clock, the timers and whatever it waits
-- on, frees its slot, aborts its signal and settles every caller's Handle.

local function unpark(job)
  local w = job[W]
  if w == QUEUED then job[W] = false end
  if not w or w == QUEUED or w == KEYWAIT then return end
  if w == SLEEP then
    -- (SH_ESTATE: no timer, a sleep of math.huge)
    B.check(timers_cancel(job[ORCH].tm, job[CID]), "cancel a sleep", B.SH_ESTATE)
  elseif w == marks.IDLE or rawget(w, "_standing") then
    return -- a job with no work of its own (when_idle, a barrier): nothing to leave
  else
    -- (wait_left first: one that runs out of memory leaves the job listening)
    hooks.wait_left(job[ORCH], job)
    settle.unlisten(w, job)
    if w._abandon then w:_abandon(job) end -- it waited in a slot or budget queue
  end
  job[W] = false
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
  local level = settle_entered(job) -- (until all of it is done: mend.lua)
  local o = job[ORCH]
  local slot = job[CID]
  -- A job already queued (woken, not yet resumed) keeps its place: that
  -- resume is its cleanup. One parked mid-work is queued for it below.
  local suspended = job[CO] and job[W] and job[W] ~= QUEUED
  if job[W] ~= QUEUED then unpark(job) end
  forget_counts(o, job)
  release_holds(o, job)
  leave_idle(o, job)
  -- (SH_EINVAL: no clock to stop, a when_idle waiter's, or one the stall
  -- check stopped as it stalled the job)
  check(clock_stop(o.cc, slot), "stop a stall clock", EINVAL)
  free_slot(o, slot)
  job[CID] = false
  local told = job[OUT] == TOLD
  job[STATE], job[OUT] = st, v
  o.nrunning = o.nrunning - 1
  job_ended(o, job, st)
  -- (a tracker counting it hears its failure: its loading screen shows it)
  local tracked = rawget(job, "phase") and hooks.phase_ended(o, job, st)
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
    local seen = tracked or false
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
  owned_left(o, job)
  job_gone(o, job)
  settle_left(level)
  return true
end

--- Runs fn(a, b) as an end that an end reached: at once, unless this end
--- is itself one that an end reached; then after it (see `ends`).
function E.after_end(fn, a, b) return ends:call(fn, a, b) end
E.hooks = hooks -- (read by mend.lua, which finishes an end cut short)

function E.fail(job, cause, tb)
  return E.end_job(job, "failed", errors.failed(job[LABEL], cause, tb))
end

function E.cancel(job, reason)
  return E.end_job(job, "cancelled", errors.cancelled(job[LABEL], reason))
end

E.report_unhandled = records.report_unhandled -- (the failures nobody heard, logged after a step)

---------------------------------------------------------------------------
-- Resuming.

-- A job's coroutine runs body(work, job): it returns work's values packed,
-- then DONE, and every wait yields PARK, so a finished job is told from a
-- parked one without asking coroutine.status (a C call that breaks
-- LuaJIT's trace). Frames matter here: a parked coroutine's stack is 47
-- slots until something deeper makes LuaJIT double it, so body is tiny and
-- the wait path (wait.await) keeps few locals; a woken job's stack, from
-- the bottom to the wait, is read back, so each slot below the wait is
-- memory read (docs/performance.md). Finished coroutines are not reused:
-- coroutine.running() in a job would name one an earlier job ran in.
--
-- body packs work's values itself, so a resume always returns at most three
-- values and after_resume takes fixed arguments: LuaJIT never starts a
-- trace at a vararg function, and after_resume runs after every resume.
local DONE = setmetatable({}, { __name = "stagehand.DONE" })
local function body(work, job) return pack(work(job)), DONE end

local unyieldable = errors.unyieldable

-- Fails a job whose coroutine is left dead by an error, or is never to be
-- resumed, once that coroutine is closed: Lua 5.4 closes the work's
-- to-be-closed variables then, and not otherwise (compat.lua). A closing
-- method may raise in err's place, or end the job itself.
local closed = compat.close_coroutine
local function fail_closed(job, co, err, died, tb)
  err = closed(co, err, died)
  if not job[STATE] then E.fail(job, err, tb) end
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
    return fail_closed(job, co, err, not ok and a or nil, traceback(co, err))
  end
  if done == DONE and ok then
    local packed = a
    job[CO] = false
    if job[STATE] then return end -- ended earlier; its cleanup has now run
    E.end_job(job, "done", packed)
    return
  end
  if not ok then
    if a == "not enough memory" then settle.note_broken() end -- (it may have left more undone: mend.lua)
    if job[W] and not job[STATE] then unpark(job) end -- (a wait that raised after it parked)
    job[CO] = false
    if job[STATE] then closed(co, a, a) return end -- (its cleanup after an abort)
    return fail_closed(job, co, a, a, traceback(co, errors.describe_raised(a)))
  end
  -- work (or something it called) yielded past stagehand; resuming it
  -- later would hand it values it does not expect.
  job[CO] = false
  if job[STATE] then closed(co) return end
  fail_closed(job, co, "work yielded with coroutine.yield; inside a job, wait with job:await, "
    .. "job:call, job:sleep or job:slice", nil, traceback(co))
end

--- Resumes a job's coroutine; `work` is given on its first resume only. A
--- later resume hands the job itself back to its wait (the token check_wait
--- relies on).
function E.resume(job, now, work)
  local o = job[ORCH]
  -- (orch:trace: the wait it was parked on ends here. Told first: a record
  -- that runs out of memory leaves E.current as it was.)
  local tr = o.tracer
  if tr then tr:resumed(job, now) end
  local prev, prev_at = E.current, E.current_at
  E.current, E.current_at = job, now
  o.now = now
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
  after_resume(job, co, prev, prev_at, ok, a, done)
  if tr then tr:parked(job, o.now) end
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

-- Takes the lowest free id for job, and files the job under it.
local function take_id(o, job)
  local slot = E.alloc_slot(o)
  job[CID] = slot
  o.by_slot[slot] = job
end

--- Registers a new job; stall_ms false gives it no stall clock (when_idle).
--- The caller tells the watchers (E.notify) once the job is fully made:
--- a watcher is game code, and may run, join, cancel or report anything.
--- (On Lua 5.1 to 5.4 any call may need memory for its frame, so the id
--- is taken inside a pcall: one that cannot be called has taken nothing,
--- and one that fails gives the id back, in frames that pcall made. Its
--- last step files the job, so by_slot holds nothing to clear: a nil
--- stored under an absent key needs memory on LuaJIT and 5.1.)
function E.start(o, job, stall_ms, now)
  local ok, err = pcall(take_id, o, job)
  if not ok then
    local slot = job[CID]
    if slot then
      job[CID] = false
      ids_give(o.ids, slot)
    end
    error(err, 0)
  end
  job[STARTED] = now
  o.nrunning = o.nrunning + 1
  if stall_ms then check(clock_start(o.cc, job[CID], stall_ms, now), "start a stall clock") end
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

-- What a job that made a wait its coroutine could not yield from is told:
-- where waits may be made. `raised` is what the failed yield raised, if
-- the job ended with it.
local WAIT_NAMES = { [QUEUED] = "a wait", [SLEEP] = "job:sleep" } -- (queued: woken since, what it was is gone)
function E.unyielded(job, raised)
  local w = job[W]
  unpark(job)
  local what = WAIT_NAMES[w] or (type(w) == "table" and w.kind == "pool" and "job:slot")
    or (type(w) == "table" and w.kind == "budget" and "job:permit") or "job:await"
  return errors.unyielded(what, job[LABEL], raised)
end

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
      B.check(B.clock_restart(cc, slot, now), "restart a stall clock")
    elseif job then
      -- (Ended before the log function, game code, may wake it: the core
      -- has dropped its clock, which a wake would restart.)
      local err = errors.stalled(job[LABEL], B.clock_stall_ms(cc, slot))
      hooks.stalled(job, err)
      E.end_job(job, "stalled", err)
      logm.guard(nil, "the log function", o.log, "[stagehand] " .. err.message)
    end
    slot = clock_pop_stalled(cc, now)
  end
  o.next_check = now + o.check_ms
end

-- Runs queued continuations oldest first until nothing is left or the
-- deadline passes; leaves the last clock reading in o.now. Slots freed
-- while it runs are granted in passes: once every continuation queued at
-- the last round has run, one round grants all the slots freed meanwhile,
-- and the jobs it grants run in the next pass, in the same step. (A round
-- per continuation costs a grant per release; a round only when the queue
-- ran dry held every grant back while a sliced job kept queueing itself.)
--
-- (The loop ends by its condition or break, never by return: LuaJIT cannot
-- record a return out of a loop to a lower frame, and a loop whose traces
-- keep aborting is blacklisted, taking the step with it.)
local function run_queue(o, deadline)
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
    now = read_clock(o) -- (a clock set back counts as no time passing: the budget holds)
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
-- trace is flushed. So the loop is warmed here, at load, on a
-- queue of stale entries (jobs no longer waiting to run), which records it
-- as a closed loop; the resume is then a side exit whose stitched
-- continuation links back to that loop.
do
  local stale = { false, false, false, false, false, false, false, false, false, false }
  local warm = {
    qn = 0, stepping = true, grantable = false, budget_due = false, permit_of = {},
    clock = function() return 0 end, now = 0, clock_shift = 0, clock_high = 0,
  }
  E.init_queue(warm)
  for _ = 1, 300 do enqueue(warm, stale) end
  drain(warm, nil)
end

local by_id = F.by_id

--- Every running job, in start order.
function E.running_jobs(o)
  local jobs = {}
  for _, job in each, o.by_slot do jobs[#jobs + 1] = job end
  table.sort(jobs, by_id)
  return jobs
end

-- The work of one step. Jobs' own errors end those jobs; anything raised
-- here (a clock that broke mid-step, a fault of stagehand's own) ends the
-- step, and E.step passes it on.
local function step_body(o, now, deadline)
  if mend.due(o) then mend.mend(o, E) end -- (after memory ran out: mend.lua)
  E.wake_sleeps(o, now)
  hooks.step_began(o, now)
  drain(o, deadline)
  now = o.now
  if now >= o.next_check then
    -- Jobs the check ends get their cleanup resume in this same step.
    E.check_stalls(o, now)
    if not deadline or now < deadline then drain(o, deadline) end
  end
  if o.qn == 0 then
    -- Once a step, so a preloader whose tasks end at once cannot spin here.
    hooks.quiet(o)
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
  if not ok then
    settle.note_broken() -- (it may have left a job that nothing moves: mend.lua)
    error(err, 0)
  end
  o.driver.reschedule(o)
  if o.qn > 0 then return o.nrunning + E.cleanups_queued(o) end
  return o.nrunning
end

E.cleanups_queued = runqueue.cleanups

--- A job with a phase began (its job.phase is set), or said how far it is.
function E.phase_began(o, job) return hooks.phase_began(o, job) end
function E.phase_progressed(job) return hooks.phase_progressed(job) end
function E.followed_outside(o, job) return hooks.followed_outside(o, job) end

--- Says that o is closing, or that orch:loop returned (the closed hook).
function E.closed(o) return hooks.closed(o) end

--- Whether work on other threads may still end one of o's jobs.
function E.outside_pending(o) return hooks.outside_pending(o) end
--- Blocks until other threads send o something or `ms` pass: true if they did.
function E.outside_wait(o, ms) return hooks.outside_wait(o, ms) end

function E.next_wake(o)
  -- (Not o.budget_due: a budget changed while nobody waits for a permit
  -- marks it, and a step would find nothing to grant.)
  if o.qn > 0 or o.grantable or hooks.budgets_waiting(o) then return 0 end
  if hooks.idle_due(o) or hooks.outside_ready(o) then return 0 end
  local tdue = hooks.next_due(o)
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
