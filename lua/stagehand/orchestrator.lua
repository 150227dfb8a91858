-- The orchestrator: stagehand.new and the methods a game calls on it.
local B = require "stagehand.core.backend"
local E = require "stagehand.engine.engine"
local timeouts = require "stagehand.engine.timeouts"
local idle = require "stagehand.wait.idle"
local records = require "stagehand.engine.records"
local options = require "stagehand.engine.options"
local signal = require "stagehand.engine.signal"
local jobm = require "stagehand.wait.job"
local handle = require "stagehand.wait.handle"
local logm = require "stagehand.engine.log"
local keys = require "stagehand.rank.keys"
local slots = require "stagehand.wait.slots"
local barrier = require "stagehand.wait.barrier"
local sources = require "stagehand.rank.sources"
local owners = require "stagehand.engine.owners"
local errors = require "stagehand.engine.errors"
local closing = require "stagehand.engine.closing"

local JobMT = jobm.JobMT
local F = require "stagehand.engine.fields"
local ORCH, CO, W, STATE, LABEL, SINCE, H = F.ORCH, F.CO, F.W, F.STATE, F.LABEL, F.SINCE, F.H
local settle_empty = require("stagehand.engine.settle").pack()
local mend = require "stagehand.engine.mend"
local require_again = require("stagehand.core.compat").require_again -- (a feature loaded on first use)
local new_handle, read_clock = handle.new, E.now
local setmetatable, type = setmetatable, type

---@class stagehand.Orchestrator
local Orchestrator = {}
Orchestrator.__index = Orchestrator
E.orchestrators_are(Orchestrator)

-- Whether luv loads (through the luv driver, which keeps luv's loop open);
-- memory running out there raises, rather than pick the manual driver.
local function has_luv()
  local ok, err = pcall(require_again, "stagehand.driver.luv")
  if not ok and tostring(err):find("not enough memory", 1, true) then error(err, 0) end
  return ok
end

local function as_clock(c)
  if type(c) == "function" then return c end
  -- (stagehand.testing's fake clock keeps its time in c.now: read it there)
  return c.__now_field and function() return c.now end or function() return c() end
end

---@class stagehand.Options
---@field driver "luv"|"manual"? who pumps it (default "luv" when luv loads)
---@field clock (fun(): number)? milliseconds, read live (default the core's monotonic clock)
---@field stall_ms number? a job's default stall time (20000; math.huge: never)
---@field check_ms number? how often stall clocks are checked (1000)
---@field remember integer? how many keyed outcomes are remembered (256)
---@field slice_ms number? job:slice()'s slice, and the luv driver's step budget (8)
---@field ranks (string[]|table<string, number>)? priority names: a list, highest first, or names to numbers
---@field default_priority (string|number)? the priority of a job that names none ("scene")
---@field pools table<string, integer>? slot pools, {name = capacity}
---@field log fun(message: string)? where diagnostics go (a line to stderr)

---@class stagehand.RunOpts
---@field key string? the key space: a second run with a running key joins it
---@field signal stagehand.Signal? withdraws this caller when it aborts
---@field stall_ms number? this job's stall time (math.huge: never)
---@field priority (string|number|fun(): (string|number))? a rank name, a number (higher first) or a function, read live
---@field reuse boolean? settle at once from a remembered outcome of the key
---@field phase string? the load tracker's phase this job counts in

--- Makes an orchestrator; docs/guide.md lists the options.
---@param opts stagehand.Options?
---@return stagehand.Orchestrator
function Orchestrator.new(opts)
  local v = options.new_options(opts, has_luv)
  local clock = v.clock and as_clock(v.clock)
  if clock then
    -- Read once here, so a clock that cannot tell the time is named now.
    local ok, now = pcall(clock)
    if not ok or not E.finite(now) then
      error("bad option 'clock' to stagehand.new: expected a function returning a finite number of ms, got one "
        .. (ok and "returning " .. tostring(now) or "raising " .. tostring(now)), 2)
    end
  end
  local driver = require_again("stagehand.driver." .. v.driver).new(clock or nil)
  local o = setmetatable({
    driver = driver,
    clock = driver.clock,
    fake_clock = (type(v.clock) == "table" and type(v.clock.advance) == "function") and v.clock or nil,
    stall_ms = v.stall_ms,
    check_ms = v.check_ms,
    remember = v.remember,
    slice_ms = v.slice_ms,
    ranks = v.ranks,
    rank_of = v.rank_of,
    rank_list = v.rank_list,
    default_rank = v.default_rank,
    num_box = setmetatable({}, { __mode = "v" }), -- number -> its box (priority.source)
    log = v.log or logm.stderr,
    cc = B.clock_new(),
    tm = B.timers_new(),
    by_slot = {},
    ids = B.ids_new(), -- the jobs' core ids: the lowest free first (engine.alloc_slot)
    nrunning = 0, -- jobs running (orch:running(key) is the keyed question)
    next_id = 0,
    stepping = false,
    closing = false, -- close's reason while its own step or job still runs (close)
    closing_jobs = false, -- the jobs close ends, until it is done (close)
    close_cancelling = false,
    close_depth = 0,
    unhandled = {},
    watchers = {},
    bad_sources = setmetatable({}, { __mode = "k" }),
    awaiters = {},
    followed = {},
    owned = {}, -- job -> counted set {[Handle] = order} of the callers it made, still running (list.lua)
    nowned = 0,
    nowners = 0, -- how many jobs have an o.owned set
    idle = {}, -- when_idle waiters (jobs with no work and no stall clock)
    -- (due until a check finds the world busy: no check has yet, and a
    -- when_idle asked of a world that never ended or awaited anything
    -- settles at the next step)
    idle_dirty = true,
    nidle = 0,
    clock_high = 0, -- the latest time read, and what a clock that ran back lost (engine.now)
    clock_shift = 0,
    settle_seq = -1, -- the settle outside a step last read at o.now (engine.settle_time)
    timeouts = {}, timeout_seq = 0, -- orch:timeout's signals still to abort: a heap by due time (timeouts.lua)
    watching = 0, -- watchers being told of a start or an end now (engine.notify)
    tracer = false, -- the Trace recording, while orch:trace() records (trace.lua)
    mended = 0, -- the errors its jobs were last looked over after (mend.lua)
    nstart = 0, nstarted = 0, -- makings and first resumes begun and ended (one that raised: mend.lua)
    track_waits = E.track_waits and setmetatable({}, { __mode = "k" }), -- (engine.track_waits)
  }, Orchestrator)
  E.init_queue(o)
  keys.init(o)
  slots.init(o, v.pools, v.pool_names)
  o.now = o.clock()
  o.clock_high = o.now
  o.next_check = o.now + o.check_ms
  return o
end

local check_run_opts = options.run_options
local finish_close = closing.finish_close

-- Raises if a method was called on something else than an orchestrator
-- (orch.step() for orch:step()). run and when, called in games' own loops,
-- ask only once an argument already looks wrong: a dot call shifts the
-- arguments, so their label or key check always fails first.
local function check_self(self, method)
  if getmetatable(self) ~= Orchestrator then options.bad_self("orch:" .. method, "an orchestrator", self, 3) end
end

local own = owners.own -- (callers made inside a job belong to it: owners.lua)

-- A new caller of a running job: its own Handle, its priority counted, its
-- signal withdrawing only it.
local function join(o, job, prio, sig)
  local h = new_handle(job, prio)
  sources.add_caller(o, job, h) -- (its rank may rise: see sources.lua)
  own(o, h, sig)
  handle.bind_signal(h, sig)
  return h
end

-- A job record: its fields in the array part (fields.lua), then a false
-- holding the place of its first caller's Handle: one allocation at its
-- final size. (`no` is false in a local on purpose: LuaJIT copies a
-- constructor of constants from a template too big for one block.) Its
-- core id is taken by E.start, once everything the job needs is made.
local no = false
local function new_job(o, label, key)
  local id = o.next_id + 1
  o.next_id = id
  return setmetatable({
    o, no, no, no, no, no, no, no, key or no,
    id, label, no, no, no, no,
  }, JobMT)
end

-- close is under way (o.closing_jobs): a job started inside the cleanup of
-- one it ended, or in reaction to ending it, is close's to end too (run
-- cancels one before its work runs).
local function doom(o, job)
  local doomed = o.closing_jobs
  local cur = E.current
  if o.close_cancelling or (cur and doomed[cur]) then doomed[job] = true end
end

-- Makes a job and registers it, for run and _external: its record (with
-- `co`, its coroutine, or false), its first caller's Handle, its core id
-- and stall clock, its phase, and its key (the `when`s waiting for a run of
-- it become its callers). setup(job), when given, parks a job with no work
-- before any game code hears of it. Then game code runs: its watchers,
-- then the placeholders' ends; any of it may end this job. Returns the
-- job, its Handle and the time it started; the caller binds the signal.
local function enter(o, label, key, prio, sig, stall_ms, phase, co, setup)
  local now = read_clock(o) -- (first: a clock that fails leaves nothing half made)
  local job = new_job(o, label, key)
  job[CO] = co
  local h = new_handle(job, prio)
  job[H] = h
  o.now = now
  E.start(o, job, stall_ms, now)
  o.nstart = o.nstart + 1 -- (until it is whole: a making cut short from here is failed by the next step, mend.lua)
  -- (Owned once started: a Handle filed under its owner before a start
  -- that ran out of memory was withdrawn later, ending a job never begun.)
  if E.current and E.in_job() then own(o, h, sig) end
  if phase then job.phase = phase end
  if o.closing_jobs then doom(o, job) end
  local waiting = false
  -- A caller withdrawn before it asked (its signal aborted already) starts
  -- no run of its key: `when`s waiting for one go on waiting for the next.
  if key and not (sig and sig.aborted) then
    -- (`when` waiters for this key become callers before the work starts)
    waiting = keys.join_pending(o, key, job) or false
  end
  local ok, err = true, nil
  if setup then ok, err = pcall(setup, job) end
  if not ok then mend.unmade(job) error(err, 0) end -- (memory ran out: the next step fails it, mend.lua)
  -- (Game code from here on: the watchers told of the start, then the
  -- trackers' listeners. The job is whole by now, its key taken: should
  -- that code end it, close the orchestrator say, the key is let go, and a
  -- tracker told after counts it as started and ended at once.)
  E.notify(o, job)
  if phase then E.phase_began(o, job) end
  if waiting then
    for i = 1, #waiting do E.end_job(waiting[i], "done", settle_empty) end
  end
  -- A job started while close ends this orchestrator's jobs (inside their
  -- cleanup, or in reaction to their cancellation) is close's to end: it
  -- is cancelled at once, before its work runs, so close ends in a
  -- bounded number of rounds whatever cleanup starts.
  local doomed = o.closing_jobs
  if doomed and doomed[job] and not job[STATE] then E.cancel(job, o.close_reason) end
  o.nstarted = o.nstarted + 1
  return job, h, now
end

--- Starts `work(job)` in a new coroutine at once, up to its first wait.
---@param label string
---@param work fun(job: stagehand.Job): any
---@param opts stagehand.RunOpts?
---@return stagehand.Handle
function Orchestrator:run(label, work, opts)
  check_self(self, "run")
  if type(label) ~= "string" or label == "" then options.bad_label("run", label) end
  if type(work) ~= "function" then options.fail("run", "work", "a function", work) end
  local prio, sig, stall_ms, key
  if opts ~= nil then
    check_run_opts(self, opts, "run", signal.is_signal, true)
    prio, sig, stall_ms, key = opts.priority, opts.signal, opts.stall_ms, opts.key
    if key then
      local running = keys.running(self, key)
      if running then return join(self, running, prio, sig) end
      if opts.reuse then
        -- Get-or-load: a remembered `done` settles this call at once.
        local ended = keys.recall(self, key)
        if ended and ended[STATE] == "done" then return new_handle(ended, prio) end
      end
    end
  end
  local job, h, now = enter(self, label, key, prio, sig, stall_ms or self.stall_ms, opts and opts.phase,
    E.coroutine(), nil)
  -- (Counted from here until its work has started: a signal's binding or
  -- a first resume that raises, memory running out, leaves a job never
  -- started, which the next step fails: mend.lua.)
  self.nstart = self.nstart + 1
  if handle.bind_signal(h, sig) or job[STATE] then
    job[CO] = false -- (withdrawn already: its work never runs, its coroutine goes)
    self.nstarted = self.nstarted + 1
    return h
  end
  E.start_work(self, job, work, now)
  self.nstarted = self.nstarted + 1
  if self.closing then
    -- The work closed this orchestrator (close, above); unless this run
    -- was itself made inside another of its jobs' first resume, nothing
    -- of it is on the stack now.
    local cur = E.current
    if not self.stepping and not (cur and cur[ORCH] == self) then finish_close(self) end
  end
  if not self.stepping then self.driver.reschedule(self) end
  return h
end

-- A job whose work runs elsewhere (a worker thread's request): no
-- coroutine; whoever owns the work ends it (E.end_job). Keys, callers,
-- signals and watchers as for run: a key that is running is joined (then
-- `setup` is not called and no job is returned). `opts` is checked by the
-- caller. setup(job) parks it on what it waits for, before game code hears
-- of it.
function Orchestrator:_external(label, opts, setup)
  local prio, sig, stall_ms, key
  if opts ~= nil then prio, sig, stall_ms, key = opts.priority, opts.signal, opts.stall_ms, opts.key end
  if key then
    local running = keys.running(self, key)
    if running then return join(self, running, prio, sig), nil end
  end
  local job, h = enter(self, label, key, prio, sig, stall_ms or self.stall_ms, opts and opts.phase, false, setup)
  handle.bind_signal(h, sig)
  if not self.stepping then self.driver.reschedule(self) end
  return h, job
end

-- A job with no work that waits on `what` (a table with _describe), for
-- an end that comes from outside any job (a pool's threads exiting, a load
-- tracker going idle): its owner ends it with E.end_job. It never stalls,
-- unless `stall_ms` gives it a stall clock (its owner then pauses it and
-- counts progress). Returns its Handle and the job.
local NEVER_STALLS = { stall_ms = math.huge }
function Orchestrator:_awaiting(label, what, stall_ms)
  local h, job = self:_external(label, stall_ms and { stall_ms = stall_ms } or NEVER_STALLS, function(j)
    j[W] = what
    j[SINCE] = self.now
  end)
  return h, job
end

--- Runs like orch:run, and the newest call under `name` wins: it cancels
--- the older run (keyed work the older shared with other callers runs on)
--- and the older Handles end with the newer's end, however it ends.
---@param name string
---@param label string
---@param work fun(job: stagehand.Job): any
---@param opts stagehand.RunOpts?
---@return stagehand.Handle
function Orchestrator:newest(name, label, work, opts)
  check_self(self, "newest")
  if type(name) ~= "string" or name == "" then options.fail("newest", "name", "a non-empty string", name) end
  if type(label) ~= "string" or label == "" then options.bad_label("newest", label) end
  if type(work) ~= "function" then options.fail("newest", "work", "a function", work) end
  check_run_opts(self, opts, "newest", signal.is_signal, true)
  return require_again("stagehand.screens.newest").run(self, name, label, work, opts)
end

--- Starts recording every job's life (its start, each wait, slot holds
--- and permits, its end); returns `tr` with tr:stop(), tr:events() and
--- tr:write(path) (the Chrome Trace Event format, for Perfetto).
---@return stagehand.Trace
function Orchestrator:trace()
  check_self(self, "trace")
  return require_again("stagehand.screens.trace").start(self)
end

--- Waits for the outcome of `key`: follows its running job, settles at once
--- from a remembered outcome, or waits until a run of the key starts (with a
--- stall clock of its own until then). Every Handle from `when` that follows
--- a run is one of its callers.
---@param key string
---@param label string?
---@param opts table?
---@return stagehand.Handle
function Orchestrator:when(key, label, opts)
  check_self(self, "when")
  if type(key) ~= "string" or key == "" then options.fail("when", "key", "a non-empty string", key) end
  if label == nil then label = "when " .. key end
  if type(label) ~= "string" or label == "" then options.fail("when", "label", "a non-empty string", label) end
  local prio, sig, stall_ms
  if opts ~= nil then
    check_run_opts(self, opts, "when", signal.is_signal, false)
    prio, sig, stall_ms = opts.priority, opts.signal, opts.stall_ms
  end
  local running = keys.running(self, key)
  if running then return join(self, running, prio, sig) end
  local ended = keys.recall(self, key)
  if ended then
    local h = new_handle(ended, prio)
    -- A run that failed unheard in this step (or inside run since the
    -- last) is told to the log at the step's end, unless one of its Handles
    -- was heard by then: this one joins them, so reading it counts.
    if rawget(ended, "unheard") then
      ended[#ended + 1] = h
      h[3] = #ended
    end
    return h
  end
  -- Nothing has started it: a placeholder job waits, on its own clock.
  local now = read_clock(self)
  local p = new_job(self, label, key)
  p[W] = E.KEYWAIT
  p[SINCE] = now -- (before start: its watchers may ask for a report)
  local h = new_handle(p, prio)
  p[H] = h
  self.now = now
  E.start(self, p, stall_ms or self.stall_ms, now)
  if self.closing_jobs then doom(self, p) end
  keys.add_pending(self, p)
  own(self, h, sig)
  E.notify(self, p)
  if not handle.bind_signal(h, sig) and not self.stepping then self.driver.reschedule(self) end
  return h
end

-- A job with no work of its own (a barrier, a when_idle waiter): a slot, a
-- stall clock (unless stall_ms is false) and one caller. setup(job, h)
-- makes it what it is before any game code hears of it.
local function standing_job(o, label, prio, sig, stall_ms, setup)
  local now = read_clock(o)
  local job = new_job(o, label, nil)
  o.now = now
  job[SINCE] = now -- (it waits from its start: the report says since when)
  local h = new_handle(job, prio)
  job[H] = h
  E.start(o, job, stall_ms, now)
  if o.closing_jobs then doom(o, job) end
  own(o, h, sig)
  setup(job, h)
  E.notify(o, job)
  handle.bind_signal(h, sig)
  -- (Made outside a step, it may be the first stall clock, the one due
  -- soonest, or a when_idle the world satisfies: the driver's timer is set.)
  if not o.stepping then o.driver.reschedule(o) end
  return job, h
end

--- Creates or resizes a slot pool (capacity 0 holds everyone; shrinking
--- never takes back slots already held).
---@param name string
---@param capacity integer
function Orchestrator:pool(name, capacity)
  check_self(self, "pool")
  if type(name) ~= "string" or name == "" then options.fail("pool", "name", "a non-empty string", name) end
  if not options.count_from(capacity, 0) then
    options.fail("pool", "capacity", "a whole number from 0 to " .. options.MAX_COUNT, capacity)
  end
  slots.pool(self, name, capacity)
  if not self.stepping then self.driver.reschedule(self) end
end

--- {[name] = {capacity =, in_use =, waiting =}} for every slot pool, and
--- for every budget {budget = "ops" | "ms", limit =, in_use =, waiting =}
--- (in_use: permits granted in this step, or the ms their holders ran),
--- under its name ("NAME (budget)" where a pool has the name).
---@return table<string, {capacity: integer?, in_use: number, waiting: integer, budget: string?, limit: number?}>
function Orchestrator:pools()
  check_self(self, "pools")
  return slots.report(self)
end

--- Declares a per-step budget: {ops = n} permits a step, or {ms = m} of
--- permit holders' running time a step; math.huge for either is no limit
--- (a headless tool that wants every permit at once).
---@param name string
---@param spec {ops: integer?, ms: number?}
function Orchestrator:budget(name, spec)
  check_self(self, "budget")
  if type(name) ~= "string" or name == "" then options.fail("budget", "name", "a non-empty string", name) end
  if type(spec) ~= "table" then options.fail("budget", "spec", "{ops = n} or {ms = m}", spec) end
  local k = options.first_key(spec, function(kind) return kind ~= "ops" and kind ~= "ms" end)
  if k ~= nil then options.fail("budget", options.field("spec", k), "ops or ms (unknown budget kind)", k) end
  local ops, ms = spec.ops, spec.ms
  if (ops == nil) == (ms == nil) then options.fail("budget", "spec", "exactly one of ops or ms", spec) end
  if ops == math.huge then
    ops = options.MAX_COUNT -- (as many as can wait at once: no limit)
  elseif ops ~= nil and not options.count_from(ops, 1) then
    options.fail("budget", "spec.ops", "a number > 0 (math.huge: no limit), whole, at most " .. options.MAX_COUNT, ops)
  end
  if ms ~= nil and (type(ms) ~= "number" or ms ~= ms or ms <= 0) then
    options.fail("budget", "spec.ms", "a number > 0 (math.huge: no limit)", ms)
  end
  slots.budget(self, name, ops, ms)
end

--- A barrier over `keys_list` (the keys, each a string; one listed twice is
--- one key): b:arrive(key), b:arrived(), b:missing(), b.settled.
---@param label string
---@param keys_list string[]
---@param opts table?
---@return stagehand.Barrier
function Orchestrator:barrier(label, keys_list, opts)
  check_self(self, "barrier")
  local o = self
  -- (Not a tail call: Lua 5.1 reports an error raised past one with no
  -- position, and these errors name the caller's line.)
  local b = barrier.new(self, label, keys_list, opts, function(lbl, op, setup)
    op = op or {}
    return standing_job(o, lbl, op.priority, op.signal, op.stall_ms or o.stall_ms, setup)
  end, function(op)
    if op ~= nil then check_run_opts(o, op, "barrier", signal.is_signal, false, 2) end
  end)
  return b
end

--- A Handle that settles when every running job is itself waiting, directly
--- or through what it awaits, on when_idle. It never stalls.
---@param sig stagehand.Signal?
---@return stagehand.Handle
function Orchestrator:when_idle(sig)
  check_self(self, "when_idle")
  if sig ~= nil and not signal.is_signal(sig) then options.fail("when_idle", "signal", "a Signal", sig) end
  local _, h = standing_job(self, "when idle", nil, sig, false, idle.add_waiter)
  return h
end

--- A Signal that aborts after `ms` of this orchestrator's clock, with a
--- `timeout` Error as its reason (math.huge: never).
---@param ms number
---@return stagehand.Signal
function Orchestrator:timeout(ms)
  check_self(self, "timeout")
  if type(ms) ~= "number" or ms ~= ms or ms < 0 then options.fail("timeout", "ms", "a number >= 0", ms) end
  local sig = signal.new_signal(self.log)
  if ms == math.huge then return sig end
  timeouts.add(self, read_clock(self) + ms, sig, ms)
  signal.timed_by(sig, self) -- (its first listener wakes the driver)
  if not self.stepping then self.driver.reschedule(self) end
  return sig
end

--- Whether a job of `key` is running.
---@param key string
---@return boolean
function Orchestrator:running(key)
  check_self(self, "running")
  if type(key) ~= "string" then options.fail("running", "key", "a string", key) end
  return keys.running(self, key) ~= nil
end

--- Drops the remembered outcome of `key` (a no-op for an unknown key).
---@param key string
function Orchestrator:forget(key)
  check_self(self, "forget")
  if type(key) ~= "string" then options.fail("forget", "key", "a string", key) end
  keys.forget(self, key)
end

-- wait and loop step in slices, as the luv driver does: a job that slices
-- its work re-queues itself into the same step, and an unbudgeted step
-- would run it to its end before waking any sleeper or checking stalls.
local function slice_of(o)
  local ms = o.slice_ms
  if ms > 0 then return ms end
  return 1
end

--- Outside jobs: pumps the driver until `h` ends or `timeout_ms` passes.
--- Returns like h:result(), or nil, "timeout".
---@param h stagehand.Handle
---@param timeout_ms number?
function Orchestrator:wait(h, timeout_ms)
  check_self(self, "wait")
  if not handle.is_handle(h) and not (type(h) == "table" and h.__settle) then
    options.fail("wait", "h", "a Handle", h)
  end
  if timeout_ms ~= nil and (type(timeout_ms) ~= "number" or timeout_ms < 0 or timeout_ms ~= timeout_ms) then
    options.fail("wait", "timeout_ms", "a number >= 0", timeout_ms)
  end
  if E.in_job() then
    errors.raise("orch:wait cannot be called inside a job (" .. E.current[LABEL] .. "): use h:await()", 2)
  end
  if self.stepping then error("orch:wait cannot be called while orch:step runs", 2) end
  -- The game hears the end while it waits (the end may come, and the step
  -- report unheard failures, inside this loop); a wait that gives up
  -- before the end heard nothing.
  local seen = rawget(h, "_seen")
  h._seen = true
  -- (a timeout of math.huge is none: wait until the end)
  local deadline = timeout_ms and timeout_ms < math.huge and read_clock(self) + timeout_ms
  while not h._st do
    self:step(slice_of(self))
    if h._st then break end
    local now = read_clock(self)
    if deadline and now >= deadline then
      h._seen = seen
      return nil, "timeout"
    end
    local nw = self:next_wake()
    local outside = E.outside_pending(self) -- (a worker's reply may end it)
    if nw == nil then
      if outside then
        nw = deadline and (deadline - now) or 1000
      elseif not self.driver.has_events then
        if not deadline then
          h._seen = seen
          error("orch:wait: nothing can end " .. tostring(h) .. " (no job is due to wake or stall;"
            .. " is the orchestrator hidden, or does it wait on a future nobody settles?)", 2)
        end
        nw = deadline - now
      else
        nw = deadline and (deadline - now) or 1000
      end
    end
    if deadline and now + nw > deadline then nw = deadline - now end
    if nw > 0 or self.driver.has_events or outside then self.driver.pass(self, nw) end
  end
  return h:result()
end

--- Runs until no job is running (under luv: runs the loop).
---@return integer running
function Orchestrator:loop()
  check_self(self, "loop")
  if E.in_job() then errors.raise("orch:loop cannot be called inside a job", 2) end
  while self.nrunning > 0 do
    self:step(slice_of(self))
    if self.nrunning == 0 then break end
    local nw = self:next_wake()
    local outside = E.outside_pending(self) -- (a worker's reply may end one)
    if nw == nil then
      if not self.driver.has_events and not outside then break end
      nw = 1000
    end
    if nw > 0 or self.driver.has_events or outside then self.driver.pass(self, nw) end
  end
  self:step()
  E.closed(self) -- (workers still waiting are named in the log)
  return self.nrunning
end

--- Runs what can run now (docs/guide.md, Pumping). Returns the jobs still running.
---@param budget_ms number?
---@return integer
function Orchestrator:step(budget_ms)
  check_self(self, "step")
  if budget_ms ~= nil and (type(budget_ms) ~= "number" or budget_ms < 0 or budget_ms ~= budget_ms) then
    options.fail("step", "budget_ms", "a number >= 0", budget_ms)
  end
  if self.watching > 0 then
    error("orch:step cannot be called from a watcher (orch:watch): a watcher is told of a job's start or"
      .. " end in the middle of it; step from the game's frame loop", 2)
  end
  if E.in_job() then
    errors.raise("orch:step cannot be called inside a job (" .. E.current[LABEL] .. "); the driver runs it", 2)
  end
  local left = E.step(self, budget_ms)
  if self.closing then
    finish_close(self) -- (closed inside this step)
    left = self.nrunning
  end
  return left
end

--- Ms until the orchestrator next has something to do by itself; 0 if work
--- is queued; nil if nothing is pending.
---@return number?
function Orchestrator:next_wake()
  check_self(self, "next_wake")
  return E.next_wake(self)
end

--- Pauses (false) or resumes (true) every stall clock: hidden time never counts.
---@param visible boolean
function Orchestrator:set_visible(visible)
  check_self(self, "set_visible")
  if type(visible) ~= "boolean" then options.fail("set_visible", "visible", "a boolean", visible) end
  B.check(B.clock_set_visible(self.cc, visible, read_clock(self)), "show or hide the stall clocks")
  if not self.stepping then self.driver.reschedule(self) end
end

--- Whether stall clocks run (set_visible).
---@return boolean
function Orchestrator:visible()
  check_self(self, "visible")
  return B.clock_visible(self.cc) ~= 0
end

--- Every running job, in start order.
---@return table[]
function Orchestrator:report()
  check_self(self, "report")
  local jobs = E.running_jobs(self)
  local cache = {} -- each priority function is read once per report
  for i = 1, #jobs do jobs[i] = E.record(jobs[i], nil, cache) end
  return jobs
end

--- Calls fn(record) at every job start and end; returns an unsubscribe.
---@param fn fun(record: table)
---@return fun()
function Orchestrator:watch(fn)
  check_self(self, "watch")
  if not options.callable(fn) then options.fail("watch", "fn", "a function", fn) end
  return records.watch(self, fn)
end

--- The report as readable text, one job a line.
---@return string
function Orchestrator:dump()
  check_self(self, "dump")
  local now = read_clock(self) -- (first, as the report is made after it)
  return records.dump(self, self:report(), now, B.clock_visible(self.cc) ~= 0)
end

-- `local orch <close> = stagehand.new()` (Lua 5.4) closes it at scope end.
Orchestrator.__close = function(o) o:close("orchestrator closed") end

--- Cancels every running job and runs the cleanup of those parked
--- mid-work (jobs that cleanup starts are cancelled too), then stops the
--- driver's timers. The orchestrator still takes new runs afterwards.
---@param reason any
function Orchestrator:close(reason)
  check_self(self, "close")
  reason = reason or "orchestrator closed"
  E.closed(self) -- (workers still waiting are named in the log, before their jobs are cancelled)
  closing.close(self, reason)
end

return Orchestrator
