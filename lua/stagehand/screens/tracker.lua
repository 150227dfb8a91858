-- Folder screens/ (layer 4): loading screens, and looking back at a load.
-- tracker.lua (progress in phases, a bar that never moves back, the
-- timeline), timeline.lua (stagehand.format_timeline), newest.lua
-- (orch:newest: the newest run wins), trace.lua (orch:trace, written as
-- Chrome Trace Event JSON). It hears jobs through the engine's phase
-- hooks; nothing below requires it.
--
-- The load tracker: how far a load is, in phases, for a loading screen.
-- Tasks are made by hand (load:task) or are jobs run with opts.phase (the
-- engine's phase hooks tell this module of their start, progress and end).
local E = require "stagehand.engine.engine"
local F = require "stagehand.engine.fields"
local settle = require "stagehand.engine.settle"
local options = require "stagehand.engine.options"
local logm = require "stagehand.engine.log"
local errors = require "stagehand.engine.errors"
local B = require "stagehand.core.backend"
local idle = require "stagehand.wait.idle"
local each = require("stagehand.core.compat").each

local LABEL, ORCH = F.LABEL, F.ORCH

local M = {}

-- An orchestrator's trackers are in its field trackers, in the order they
-- were made (not in a table keyed by it: see outside.lua), each in a box
-- that holds it weakly: a tracker the game drops is collected, and stops
-- counting every later job. (Closed ones leave the list: see close.)
local BOX = { __mode = "v" }
local PRUNE_MIN = 16

-- o's trackers without the boxes the collector emptied, nor `without`: a
-- new list, never the one a phase hook may be walking.
local function prune(o, without)
  local list, kept = rawget(o, "trackers") or {}, {}
  for i = 1, #list do
    local tr = list[i][1]
    if tr and tr ~= without then kept[#kept + 1] = list[i] end
  end
  kept.prune_at = 2 * #kept + PRUNE_MIN
  o.trackers = kept
end

---@class stagehand.Tracker
local Tracker = {}
Tracker.__index = Tracker

---@class stagehand.Task
---@field label string
---@field phase string
local Task = {}
Task.__index = Task

local function check_tracker(self, method)
  if getmetatable(self) ~= Tracker then options.bad_self("load:" .. method, "a load tracker", self, 3) end
end

local function check_phase(phase, fn, level)
  if type(phase) ~= "string" or phase == "" then options.fail(fn, "phase", "a non-empty string", phase, level + 1) end
end

local function now(tr) return E.now(tr.orch) end

-- A phase's record: its running tasks (live, in no order: a task knows its
-- place, at), what its ended tasks add up to (a game that keeps one
-- tracker for hours of streaming keeps no record of each task it ended,
-- and reads it at a cost that grows with what runs, not with what ran),
-- and the stretches of time a task of it ran.
local function phase_of(tr, name, t)
  local ph = tr.phases[name]
  if not ph then
    ph = { name = name, live = {}, made = 0, done = 0, done_total = 0, failed = 0, cancelled = 0, stalled = 0,
      running = 0, start = t, finish = nil, busy = 0, spans = 0, since = nil }
    -- (in the order, then by name: a name that runs out of memory takes
    -- its place in the order back, so no phase is listed twice)
    local order = tr.order
    local n = #order + 1
    order[n] = ph
    if not pcall(rawset, tr.phases, name, ph) then
      order[n] = nil
      error("not enough memory", 0)
    end
  end
  return ph
end

local function emit(tr, ev)
  local ls = tr.listeners
  for i = 1, #ls do
    local fn = ls[i]
    if fn then logm.guard(tr.orch.log, "a load tracker's listener", fn, ev) end
  end
end

local function event(task, kind, t)
  local tr = task.tracker
  if #tr.listeners == 0 then return end
  emit(tr, { phase = task.phase, kind = kind, label = task.label, done = task.done, total = task.total,
    state = kind == "end" and task.state or nil, t = t })
end

-- (Counted only: each caller tells the listeners once its own filing of
-- the task is done.)
local function begin(tr, phase, label, total, t)
  local ph = phase_of(tr, phase, t)
  local task = setmetatable({ tracker = tr, phase = phase, label = label, done = 0, total = total,
    state = "running", clamped = false, at = false, by_hand = false }, Task)
  -- (its place made before it is counted: memory that runs out leaves no
  -- task counted that is not there)
  local at = ph.running + 1
  ph.live[at] = task
  task.at = at
  ph.made = ph.made + 1
  if ph.running == 0 then
    ph.spans = ph.spans + 1
    ph.since = t
  end
  ph.running = ph.running + 1
  tr.running = tr.running + 1
  return task
end

-- load:idle()'s Handles have a stall clock of their own, which runs while
-- a task made by hand does: that is the game's, with no clock of its own,
-- and a task the game forgot to finish would otherwise hold a loading
-- screen forever. As for a job awaiting a group with a future beside its
-- jobs, anything the tasks do is progress; while only jobs with a phase
-- run, it pauses (their own clocks end them).
local function idle_sync(tr)
  local waiting = tr.idle_jobs
  if not waiting[1] then return end
  local o = tr.orch
  local runs = tr.running > tr.job_tasks
  local t = runs and E.game_now(o)
  local kept = 0 -- (those that ended, stalled or cancelled, leave the list)
  for i = 1, #waiting do
    local job = waiting[i]
    waiting[i] = nil
    if not job[F.STATE] then
      kept = kept + 1
      waiting[kept] = job
      if runs then
        B.check(B.clock_resume(o.cc, job[F.CID], t), "resume a stall clock")
      else
        B.check(B.clock_pause(o.cc, job[F.CID]), "pause a stall clock")
      end
    end
  end
end

-- A task made by hand ended: an idle Handle waiting only on tracked jobs
-- now may be idle with them, so when_idle's check is due (and, between
-- steps, the driver is told).
local function hand_ended(tr)
  idle_sync(tr)
  local o = tr.orch
  if not idle.waiting(o) or not tr.idle_jobs[1] then return end
  idle.mark_due(o)
  if not o.stepping then o.driver.reschedule(o) end
end

-- (Each waits in the list until it has ended, and those a listener adds
-- meanwhile stay: an end that memory cut short leaves the rest listed,
-- and the next step ends them, below.)
local function settle_idle(tr)
  local waiting = tr.idle_jobs
  local n = #waiting
  for i = 1, n do
    local job = waiting[i]
    if not job[F.STATE] then E.end_job(job, "done", settle.pack()) end
  end
  for i = 1, #waiting do waiting[i] = waiting[i + n] end
end

local function finish(task, state, t)
  if task.state ~= "running" or task.tracker.closed then return false end
  local tr = task.tracker
  local ph = tr.phases[task.phase]
  task.state = state
  if state == "done" then
    task.done = task.total
    ph.done_total = ph.done_total + task.total
  end
  ph[state] = ph[state] + 1
  local live, last, at = ph.live, ph.running, task.at
  live[at] = live[last]
  live[at].at = at
  live[last] = nil
  task.at = nil
  ph.running = last - 1
  if ph.running == 0 then
    ph.busy = ph.busy + (t - ph.since)
    ph.since = nil
  end
  ph.finish = t
  tr.running = tr.running - 1
  event(task, "end", t)
  if tr.running == 0 and tr.idle_jobs[1] then settle_idle(tr) end
  return true
end

-- A task advanced past its total: clamped, said once in the log.
local function clamp(task, done)
  if done <= task.total then return done end
  if not task.clamped then
    task.clamped = true
    logm.guard(nil, "the log function", task.tracker.orch.log, string.format(
      "[stagehand] %s (phase '%s') advanced past its total (%s of %s): counted as %s", task.label, task.phase,
      tostring(done), tostring(task.total), tostring(task.total)))
  end
  return task.total
end

--- Adds `n` (default 1) to how far the task is.
---@param n number?
function Task:advance(n)
  if getmetatable(self) ~= Task then options.bad_self("task:advance", "a task of a load tracker", self, 2) end
  if n == nil then n = 1 end
  if type(n) ~= "number" or n ~= n or n < 0 or n == math.huge then
    options.fail("task:advance", "n", "a finite number >= 0", n)
  end
  if self.state ~= "running" or self.tracker.closed then return end
  self.done = clamp(self, self.done + n)
  idle_sync(self.tracker)
  event(self, "progress", now(self.tracker))
end

--- The task is done: it counts its whole total.
function Task:finish()
  if getmetatable(self) ~= Task then options.bad_self("task:finish", "a task of a load tracker", self, 2) end
  local ended = finish(self, "done", now(self.tracker))
  if ended then hand_ended(self.tracker) end
  return ended
end

--- The task failed: it leaves its phase's sums.
---@param err any
function Task:fail(err)
  if getmetatable(self) ~= Task then options.bad_self("task:fail", "a task of a load tracker", self, 2) end
  self.error = err
  local ended = finish(self, "failed", now(self.tracker))
  if ended then hand_ended(self.tracker) end
  return ended
end

local function announce(tr, task, t)
  event(task, "start", t)
  idle_sync(tr)
end

local TASK_FIELDS = { label = true, total = true }
local function not_task_field(f) return not TASK_FIELDS[f] end -- (no closure in load:task: jit_spec says why)

--- A task of `phase` made by hand: `opts.label` (default the phase),
--- `opts.total` (a number > 0, default 1).
---@param phase string
---@param opts table?
---@return stagehand.Task
function Tracker:task(phase, opts)
  check_tracker(self, "task")
  check_phase(phase, "load:task", 2)
  local label, total = phase, 1
  if opts ~= nil then
    if type(opts) ~= "table" then options.fail("load:task", "opts", "a table {label =, total =}", opts) end
    if not options.fields_within(opts, TASK_FIELDS) then
      local k = options.first_key(opts, not_task_field)
      options.fail("load:task", options.field("opts", k), "one of label, total", opts[k])
    end
    if opts.label ~= nil then
      if type(opts.label) ~= "string" or opts.label == "" then
        options.fail("load:task", "opts.label", "a non-empty string", opts.label)
      end
      label = opts.label
    end
    if opts.total ~= nil then
      local t = opts.total
      if type(t) ~= "number" or t ~= t or t <= 0 or t == math.huge then
        options.fail("load:task", "opts.total", "a finite number > 0", t)
      end
      total = t
    end
  end
  if self.closed then error("load:task: the load tracker was closed (load:close())", 2) end
  local t = now(self)
  local task = begin(self, phase, label, total, t)
  task.by_hand = true
  -- (Told once it is counted. Memory that runs out then cancels it: no
  -- task is left running that the game never had to finish.)
  local ok, err = pcall(announce, self, task, t)
  if not ok then
    pcall(finish, task, "cancelled", t)
    error(err, 0)
  end
  return task
end

local function sums(ph, done, total)
  done, total = done + ph.done_total, total + ph.done_total
  local live = ph.live
  for i = 1, ph.running do
    local task = live[i]
    done = done + task.done
    total = total + task.total
  end
  return done, total
end

--- How far `phase` is (every phase when nil): done, total, summed over
--- its tasks. A finished task counts its total; a failed or cancelled one
--- leaves both sums.
---@param phase string?
---@return number done
---@return number total
function Tracker:progress(phase)
  check_tracker(self, "progress")
  if phase ~= nil then
    check_phase(phase, "load:progress", 2)
    local ph = self.phases[phase]
    if not ph then return 0, 0 end
    return sums(ph, 0, 0)
  end
  local done, total = 0, 0
  for i = 1, #self.order do done, total = sums(self.order[i], done, total) end
  return done, total
end

-- A phase's part of a bar: the sum of its tasks' completions (an ended
-- task, however it ended, is complete; a running one is done / total) and
-- how many tasks it counts (at least the number expected).
local function bar_sums(ph, expected, sum, slots)
  if not ph then return sum, slots + (expected or 0) end
  sum = sum + (ph.made - ph.running)
  local live = ph.live
  for i = 1, ph.running do
    local task = live[i]
    sum = sum + task.done / task.total
  end
  return sum, slots + math.max(ph.made, expected or 0)
end

-- Whether `phase` (every phase when nil) has made at least the tasks it
-- was said to expect.
local function expectations_met(tr, phase)
  if phase ~= nil then
    local ph = tr.phases[phase]
    return (ph and ph.made or 0) >= (tr.expected[phase] or 0)
  end
  for name in each, tr.expected do
    if not expectations_met(tr, name) then return false end
  end
  return true
end

--- A number from 0 to 1 for drawing a bar: how far `phase` is (the whole
--- load when nil), each task counting as one part, an ended task (done,
--- failed, cancelled or stalled) as a whole one. It never decreases while
--- the load runs, whatever tasks are added or however their totals are
--- refined: a bar that would go back holds where it is until the work
--- catches up. It is 1 once no task runs and every task expected
--- (load:expect) has come; before any task starts or is expected, 0.
---@param phase string?
---@return number
function Tracker:fraction(phase)
  check_tracker(self, "fraction")
  if phase ~= nil then check_phase(phase, "load:fraction", 2) end
  local key = phase or true
  local shown = self.shown[key] or 0
  if shown >= 1 then return 1 end
  local sum, slots = 0, 0
  if phase ~= nil then
    sum, slots = bar_sums(self.phases[phase], self.expected[phase], 0, 0)
  else
    for i = 1, #self.order do
      local ph = self.order[i]
      sum, slots = bar_sums(ph, self.expected[ph.name], sum, slots)
    end
    for name, n in each, self.expected do
      if not self.phases[name] then slots = slots + n end
    end
  end
  if slots == 0 then return shown end
  local f = sum / slots
  local ph = phase and self.phases[phase]
  local running = phase and (ph and ph.running or 0) or self.running
  if running == 0 and expectations_met(self, phase) then f = 1 end
  if f > shown then
    shown = f
    self.shown[key] = f
  end
  return shown
end

--- Says that `n` tasks of `phase` make up its part of the load (those
--- already made count among them), so load:fraction is in proportion
--- from the first frame, and does not read as finished between phases.
--- A later call for the same phase replaces the number.
---@param phase string
---@param n integer
function Tracker:expect(phase, n)
  check_tracker(self, "expect")
  check_phase(phase, "load:expect", 2)
  if type(n) ~= "number" or n < 0 or n % 1 ~= 0 or n == math.huge then
    options.fail("load:expect", "n", "a whole number >= 0", n)
  end
  self.expected[phase] = n
end

--- Tasks of `phase` (every phase when nil) by state: {running =, done =,
--- failed =, cancelled =, stalled =}.
---@param phase string?
---@return table
function Tracker:counts(phase)
  check_tracker(self, "counts")
  if phase ~= nil then check_phase(phase, "load:counts", 2) end
  local c = { running = 0, done = 0, failed = 0, cancelled = 0, stalled = 0 }
  for i = 1, #self.order do
    local ph = self.order[i]
    if phase == nil or ph.name == phase then
      c.running = c.running + ph.running
      c.done, c.failed = c.done + ph.done, c.failed + ph.failed
      c.cancelled, c.stalled = c.cancelled + ph.cancelled, c.stalled + ph.stalled
    end
  end
  return c
end

--- Calls fn(event) for each task's start, progress and end: {phase =,
--- kind = "start" | "progress" | "end", label =, done =, total =, state =
--- (at "end"), t =}. Returns a function that unsubscribes.
---@param fn fun(event: table)
---@return fun()
function Tracker:on(fn)
  check_tracker(self, "on")
  if type(fn) ~= "function" then options.fail("load:on", "fn", "a function", fn) end
  local ls = self.listeners
  local i = #ls + 1
  ls[i] = fn
  return function() if ls[i] == fn then ls[i] = false end end
end

--- One row a phase, in order of first start: {phase =, start_ms =,
--- end_ms = (nil while a task of it runs; both count from when the tracker
--- was made), busy_ms = (the time at least one
--- of its tasks ran), spans = (how many separate stretches that made),
--- tasks =, failed =}.
---@return table[]
function Tracker:timeline()
  check_tracker(self, "timeline")
  local t = now(self)
  local rows = {}
  for i = 1, #self.order do
    local ph = self.order[i]
    rows[i] = {
      phase = ph.name,
      start_ms = ph.start - self.t0,
      end_ms = ph.running == 0 and ph.finish - self.t0 or nil,
      busy_ms = ph.busy + (ph.since and (t - ph.since) or 0),
      spans = ph.spans,
      tasks = ph.made,
      failed = ph.failed + ph.cancelled + ph.stalled,
    }
  end
  return rows
end

-- What a job of load:idle() waits on (orch:report, orch:dump). It holds
-- the tracker: a game that awaits idle() and drops the tracker still
-- hears the load end.
local GoingIdle = { _describe = function() return "every task of the load tracker to end" end, _through = true }
GoingIdle.__index = GoingIdle

-- The jobs it waits on (idle.lua, follows.lua): the tracked jobs running,
-- in start order, so a job awaiting it is idle when they are (a preloader
-- tracked in a phase that awaits when_idle) and a tracked job awaiting it
-- closes a cycle, which raises. With a task made by hand running too, it
-- waits on the game besides: only `loose` gets the jobs, and not whole.
function GoingIdle:_follows(loose)
  local tr = self.tracker
  if tr.closed or tr.job_tasks == 0 then return nil end
  local beside = tr.running > tr.job_tasks
  if beside and not loose then return nil end
  local jobs = {}
  for job in each, tr.jobs do
    if not job[F.STATE] then jobs[#jobs + 1] = job end
  end
  if not jobs[1] then return nil end
  -- (in start order for a cycle's search, whose Error names the path it
  -- found first; an idle check's answer does not hang on the order)
  if loose then table.sort(jobs, F.by_id) end
  return jobs, not beside
end

-- Whether an idle Handle of a tracker of `o` waits on `job` (one of its
-- tracked jobs): follows.lua then looks for a cycle its await may close.
E.on("followed_outside", function(o, job)
  if not rawget(job, "phase") then return false end
  local list = rawget(o, "trackers")
  if not list then return false end
  for i = 1, #list do
    local tr = list[i][1]
    if tr and not tr.closed and tr.jobs[job] then
      local waiting = tr.idle_jobs
      for k = #waiting, 1, -1 do
        if not waiting[k][F.STATE] then return true end
      end
    end
  end
  return false
end)

local CLOSED = "the load tracker was closed"

--- A Handle that ends done once no tracked task is running (at once when
--- none is). Once the tracker is closed with tasks running, it ends
--- cancelled: nothing would end them any more. While a task made by hand
--- runs, it has a stall clock (the orchestrator's stall_ms; anything the
--- load's tasks do is progress), and stalls naming the tasks made by hand
--- still running; while only jobs with a phase run, their clocks count.
---@return stagehand.Handle
function Tracker:idle()
  check_tracker(self, "idle")
  local o = self.orch
  local h, job = o:_awaiting("the load going idle", setmetatable({ tracker = self }, GoingIdle), o.stall_ms)
  if self.running == 0 then
    E.end_job(job, "done", settle.pack())
  elseif self.closed then
    E.cancel(job, CLOSED)
  else
    self.idle_jobs[#self.idle_jobs + 1] = job
    idle_sync(self)
  end
  return h
end

-- A stalled idle Handle's Error names the tasks made by hand still running.
E.on("stalled", function(job, err)
  local w = job[F.W]
  if getmetatable(w) ~= GoingIdle then return end
  local tr, left = w.tracker, {}
  for i = 1, #tr.order do
    local ph = tr.order[i]
    for k = 1, ph.running do
      local task = ph.live[k]
      if task.by_hand then left[#left + 1] = string.format("%s (%s)", task.label, task.phase) end
    end
  end
  table.sort(left)
  if left[1] then err.message = err.message .. " Still running: " .. errors.list_keys(left) .. "." end
end)

-- What closing does once the tracker is marked closed. Its idle Handles
-- leave the list only once each has ended: memory that runs out partway
-- leaves the close on settle's stack, and the next step's settle.recover
-- calls this again (each part does nothing twice), so no loading screen
-- waits on a closed tracker for good.
local function close_rest(tr)
  prune(tr.orch, tr)
  tr.jobs, tr.job_tasks = {}, 0
  local waiting = tr.idle_jobs
  for i = 1, #waiting do
    local job = waiting[i]
    if not job[F.STATE] then E.cancel(job, CLOSED) end
  end
  for i = #waiting, 1, -1 do waiting[i] = nil end
end
settle.on_rest(Tracker, close_rest)

--- Stops tracking: later jobs and tasks change nothing, and what was
--- recorded stays readable (progress, counts, timeline). Handles from
--- load:idle() still waiting end cancelled. A tracker the game drops
--- stops by itself once collected.
function Tracker:close()
  check_tracker(self, "close")
  if self.closed then return end
  self.closed = true
  local level = settle.entered(self)
  close_rest(self)
  settle.left(level)
end

--- A load tracker over `orch`: tasks by hand (load:task), and every job
--- run with `opts.phase`.
---@param orch stagehand.Orchestrator
---@return stagehand.Tracker
function M.new(orch)
  if not E.is_orchestrator(orch) then
    options.fail("stagehand.tracker", "orch", "an orchestrator", orch)
  end
  local tr = setmetatable({ orch = orch, phases = {}, order = {}, listeners = {}, running = 0, idle_jobs = {},
    job_tasks = 0, -- (tasks that are jobs, running: the others are made by hand, see idle_sync)
    jobs = setmetatable({}, { __mode = "k" }), t0 = E.now(orch), closed = false, expected = {}, shown = {} },
    Tracker)
  local list = rawget(orch, "trackers")
  if not list then
    list = {}
    orch.trackers = list
  elseif #list >= (list.prune_at or PRUNE_MIN) then
    -- (a game that makes a tracker per level and never has a job with a
    -- phase would otherwise keep every emptied box: pruned here each time
    -- the list doubles, a constant cost per tracker made)
    prune(orch)
    list = orch.trackers
  end
  list[#list + 1] = setmetatable({ tr }, BOX)
  return tr
end

-- Jobs with a phase: a task in each tracker of their orchestrator. Boxes
-- the collector emptied leave the list (prune). True if fn said so of
-- any tracker.
local function each_tracker(o, fn, a, b)
  local list = rawget(o, "trackers")
  if not list then return false end
  local gone, any = false, false
  for i = 1, #list do
    local tr = list[i][1]
    if not tr then
      gone = true
    elseif not tr.closed then
      any = fn(tr, a, b) or any
    end
  end
  if gone and rawget(o, "trackers") == list then prune(o) end
  return any
end

-- (Named functions, not a closure per event: every job with a phase calls
-- these at its start, its progress and its end.)
-- (The task is the job's before its start is told: a listener that ends
-- the job then ends its task. A job that game code told of its start
-- first (a watcher, another tracker's listener) has ended already counts
-- all the same: it starts and ends at once.)
local job_ended
local function job_began(tr, job)
  local t = now(tr)
  -- (the job's place made first: a task begun and then not filed for want
  -- of memory would run in the tracker for good)
  tr.jobs[job] = false
  local task = begin(tr, job.phase, job[LABEL], 1, t)
  tr.jobs[job] = task
  tr.job_tasks = tr.job_tasks + 1
  idle_sync(tr)
  event(task, "start", t)
  local st = job[F.STATE]
  if st and tr.jobs[job] == task then job_ended(tr, job, st) end
end

local function job_progressed(tr, job)
  local task = tr.jobs[job]
  if not task or task.state ~= "running" then return end
  local done, total = rawget(job, "done_n"), rawget(job, "total_n")
  if done and total and total > 0 then
    task.total = total
    task.done = clamp(task, done)
  end
  idle_sync(tr)
  event(task, "progress", now(tr))
end

-- (true: it counted the job, so a failure is heard.) The job leaves the
-- list only once its task is finished: an end that memory running out
-- cuts short calls this again at the next step (engine/mend.lua), and a
-- task dropped from the list unfinished would run in the tracker for good.
function job_ended(tr, job, state)
  local task = tr.jobs[job]
  if not task then return false end
  if task.state == "running" then finish(task, state, now(tr)) end
  tr.jobs[job] = nil
  tr.job_tasks = tr.job_tasks - 1
  idle_sync(tr)
  return true
end

-- (A load gone idle whose Handles could not all be ended then: now.)
local function idle_left(tr)
  if tr.running == 0 and tr.idle_jobs[1] then settle_idle(tr) end
end
E.on("step_began", function(o) each_tracker(o, idle_left) end)
E.on("phase_began", function(o, job) each_tracker(o, job_began, job) end)
E.on("phase_progressed", function(job) each_tracker(job[ORCH], job_progressed, job) end)
E.on("phase_ended", function(o, job, st) return each_tracker(o, job_ended, job, st) end)

return M
