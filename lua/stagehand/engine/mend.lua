-- Mending after memory ran out. Every operation that needs memory makes
-- it before it changes anything, where it can (the C core, a grant, a
-- start); what cannot be ordered so is mended here, at the start of the
-- next step of each orchestrator, so that every job still ends:
--
-- * fires cut short: the settles whose listeners were not all told
--   (settle.recover tells them), a signal's abort likewise, and an end
--   cut short once its state was written (end_rest below finishes it);
-- * then, once after each error that may have left something undone
--   (settle.broken counts them: a fire or an end cut short, a step that
--   raised, a job's work that ran out of memory, a guarded call that did,
--   a job whose making raised), a look over this orchestrator's running
--   jobs for one that nothing will move again:
--   - parked on an awaitable that has settled, or on a group whose parts
--     have (counted again): woken;
--   - queued, but not in the run queue (its wake was cut short): queued;
--   - waiting on a slot queue or a budget: every queue grants again;
--   - waiting on when_idle: the idle check is made again;
--   - marked as parked on nothing, not running: its resume, its end or
--     the end of its work was cut short (taken off the queue, its
--     coroutine left suspended or dead), or a reply from another thread
--     was; or its making was (M.unmade). It fails with "not enough
--     memory": what it would have done is lost.
-- The look over costs a walk of the running jobs, after an error only.
local settle = require "stagehand.engine.settle"
local runqueue = require "stagehand.engine.runqueue"
local F = require "stagehand.engine.fields"
local marks = require "stagehand.engine.marks"
local signal = require "stagehand.engine.signal"
local nest = require "stagehand.engine.nest"

local W, CO, STATE, ORCH, CID = F.W, F.CO, F.STATE, F.ORCH, F.CID
local timers_cancel = require("stagehand.core.backend").timers_cancel
local QUEUED, MARK = marks.QUEUED, settle.MARK
local co_status, getinfo = coroutine.status, debug.getinfo
local cut_short = settle.cut_short
local compat = require "stagehand.core.compat"
local each, close_coroutine = compat.each, compat.close_coroutine

local M = {}

-- Jobs whose making memory cut short (orch:_external's setup): a running
-- job no Handle of which reached the game, waiting on something that may
-- be half made. Noted without memory (the list is made at load; past 16
-- at once, the rest are left to their stall clocks), failed by the next
-- step of their orchestrator.
local unmade, UNMADE_N = {}, 16
for i = 1, UNMADE_N do unmade[i] = false end

--- Notes `job`, whose making was cut short: the next step fails it.
function M.unmade(job)
  for i = 1, UNMADE_N do
    if not unmade[i] then
      unmade[i] = job
      break
    end
  end
  settle.note_broken()
end

--- Whether `o`'s next step must mend first: a fire left cut short, or an
--- error since its last look over its jobs. (A read and a call a step.)
function M.due(o)
  return o.mended ~= settle.broken or cut_short() or o.nstart ~= o.nstarted
end

-- An ended job's coroutine that nothing will resume: one dead, or that
-- never ran, is closed and dropped; one suspended in its work gets a
-- cleanup resume, as an end gives a parked job, so its wait raises the
-- end and its to-be-closed variables close. (One running is left be.)
local function clean_up(o, job)
  local co = job[CO]
  if not co then return end
  local status = co_status(co)
  if status == "dead" or status == "suspended" and getinfo(co, 0, "l") == nil then
    job[CO] = false
    close_coroutine(co)
  elseif status == "suspended" then
    job[W] = QUEUED
    runqueue.push(o, job)
  end
end

local function look_over(o, E)
  -- (a grant round cut short may have left waiters a slot is free for,
  -- with nothing marked for a round: every queue gets one)
  o.grantable, o.budget_due = true, true
  o.idle_dirty = true -- (and when_idle's check is made again)
  local queued = {}
  for _, job in runqueue.queued(o) do queued[job] = true end
  local lost = {}
  for i = 1, UNMADE_N do
    local job = unmade[i]
    if job and job[ORCH] == o then
      unmade[i] = false
      lost[#lost + 1] = job
    end
  end
  for _, job in each, o.by_slot do
    if not job[STATE] then
      local w, co = job[W], job[CO]
      if w == false then
        -- (one whose coroutine runs, a job inside whose run this step
        -- was called, is where it should be; a dead one is a resume whose
        -- aftermath could not be called)
        if not co or co_status(co) ~= "running" and co_status(co) ~= "normal" then lost[#lost + 1] = job end
      elseif w == QUEUED then
        if co and not queued[job] then runqueue.push(o, job) end
      elseif type(w) == "table" and w.__settle == MARK and not rawget(w, "_standing") then
        if rawget(w, "_group") and not w._st then settle.recount(w) end
        if w._st then settle.wake(job, w) end
      end
    end
  end
  for i = 1, #lost do
    local job = lost[i]
    if not job[STATE] then
      -- (a sleep whose timer was set before memory ran out, the job not
      -- yet parked on it: its end would not find it)
      timers_cancel(o.tm, job[CID])
      E.fail(job, "not enough memory")
      if job[W] == false then clean_up(o, job) end
    end
  end
end

-- The rest of an end cut short after its state was written (engine.lua's
-- end_job: it stays on settle's stack until all of it is done). Each part
-- does nothing twice: keys forget the job, a tracker ends its task, its
-- signal aborts (or finishes telling its handlers), a coroutine left
-- suspended gets its cleanup resume, the callers it made leave. (Its
-- watchers' record of the end and the report's note of an unheard failure
-- are not made again: a second would repeat them.)
local engine
local function end_rest(job)
  local o, st, v = job[ORCH], job[STATE], job[F.OUT]
  local hooks = engine.hooks
  hooks.job_ended(o, job, st)
  if rawget(job, "phase") then hooks.phase_ended(o, job, st) end
  local sig = st ~= "done" and rawget(job, "signal")
  if sig then engine.after_end(signal.abort, sig, v) end
  local queued = false -- (its cleanup resume, should it be queued already)
  for _, j in runqueue.queued(o) do
    if j == job then queued = true end
  end
  if not queued then clean_up(o, job) end
  hooks.owned_left(o, job)
  hooks.job_gone(o, job)
end

--- Mends what memory running out left undone (see above); `E` is the
--- engine, whose fail it calls.
function M.mend(o, E)
  engine = E
  -- (a job's making, or a run's first resume, that raised: memory ran
  -- out partway, say, for a `when` joining it or for the resume's own
  -- call; the look over fails a job left half made or never started)
  if o.nstart ~= o.nstarted then
    o.nstarted = o.nstart
    settle.note_broken()
  end
  nest.flush() -- (what ends and group fires left pending, one having raised: run now)
  local broken = settle.recover(end_rest)
  if o.mended ~= broken then
    look_over(o, E)
    o.mended = broken
  end
end

return M
