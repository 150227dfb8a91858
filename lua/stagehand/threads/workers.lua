-- Folder threads/ (layer 4): work on other threads. workers.lua (pools),
-- dispatch.lua (offering queued requests in the grant rounds, and
-- re-ranking them for pool:reprioritise), spawn.lua
-- (long-lived workers), ports.lua (ports and round barriers in jobs),
-- outside.lua (collecting what threads send; waking the step),
-- love_threads.lua (pools on LÖVE's threads). It offers outside.add, for
-- any source of work from other threads.
--
-- A request is a job with no coroutine, and follows every rule of jobs: it
-- waits for a worker as a job waits for a slot (its stall clock paused),
-- then for its reply. Its payload is copied into the core at once and held
-- there (csrc/core/sh_work.c); the job waits in the pool's dispatch queue
-- (slots.worker_queue) under its set of priority sources, so it inherits
-- priority as any job does, and the step's grant rounds offer the best to
-- the workers (dispatch.lua). Each step collects what workers reported.
local E = require "stagehand.engine.engine"
local F = require "stagehand.engine.fields"
local native = require "stagehand.core.threads_native"
local outside = require "stagehand.threads.outside"
local settle = require "stagehand.engine.settle"
local wait = require "stagehand.wait.wait"
local options = require "stagehand.engine.options"
local each = require("stagehand.core.compat").each
local signal = require "stagehand.engine.signal"
local logm = require "stagehand.engine.log"
local B = require "stagehand.core.backend"
local errors = require "stagehand.engine.errors"
local slots = require "stagehand.wait.slots"
local dispatch = require "stagehand.threads.dispatch"
local priority = require "stagehand.rank.priority"
local love_threads = require "stagehand.threads.love_threads"

local STATE, WAITQ, H, ID, LABEL, W, CID = F.STATE, F.WAITQ, F.H, F.ID, F.LABEL, F.W, F.CID
local failed = errors.failed
local fail, pool_waiting = options.fail, B.pool_waiting

local M = {}

-- Events a pool's queue reports (csrc/core/sh_threads.h, enum sh_work_event).
local STARTED, PROGRESS, DONE, FAILED, EXITED, DONE_ONE = 1, 2, 3, 4, 5, 6 -- (DONE_ONE, _drain's: a reply of one value)

--- The default number of worker threads: one fewer than the cores, at
--- least 1, at most 4.
---@return integer
function M.threads() return native.default_threads() end

---------------------------------------------------------------------------
-- Requests. A request is its job (a job with no coroutine: orch:_external),
-- under the job's id: until the reply the pool keeps the job in `reqs`,
-- the core's slot holding its payload in `holds` until a worker takes it,
-- and for reprioritise its payload in `payloads` and the Handle of the
-- pool:run that made it in `own`. The job is parked on one of its pool's
-- two Waiting objects, `w_queued` until a worker takes it, then
-- `w_running`: a request makes no table of its own.

local Waiting = {}
Waiting.__index = Waiting
function Waiting:_describe() return self.what end
-- The job stopped waiting before the reply (cancelled, stalled, its last
-- caller withdrew): a queued request leaves the queue; a running one's
-- worker is told to stop, and its reply is dropped when it comes.
function Waiting:_abandon(job)
  local pool, id = self.pool, job[ID]
  if pool.reqs[id] ~= job then -- (its reply came; a take memory cut short left it queued)
    if job[WAITQ] then slots.leave(job[WAITQ], job) end
    pool.holds[id] = nil
    return
  end
  pool.reqs[id] = nil
  pool.payloads[id], pool.own[id] = nil, nil
  pool.nreq = pool.nreq - 1
  if pool.love then love_threads.forget(pool.love, id) end
  if pool.service then return pool.ud:_close() end -- (a long-lived worker: told to stop, it exits)
  local slot = pool.holds[id]
  if slot then
    pool.holds[id] = nil
    slots.leave(pool.q, job)
    if pool.ud:_drop(slot, id) then return end -- (still held: nothing ran)
  end
  local retire = pool.respawn
  local on = pool.ud:_abort(id, retire)
  if on and retire and not pool.destroyed then pool:_add_worker() end
end

---------------------------------------------------------------------------
-- Pools.

---@class stagehand.PoolOpts
---@field module string? the module each worker requires (or names `source` in messages)
---@field source string? the module's Lua text, for hosts whose require reads an archive
---@field size integer? worker threads, 1 to 64 (stagehand.threads())
---@field respawn_on_abort boolean? a fresh worker replaces an aborted one at once
---@field close_timeout_ms number? how long destroy waits for workers (1000)
---@field stall_ms number? its requests' stall time (the orchestrator's)

---@class stagehand.PoolRunOpts
---@field priority (string|number|fun(): (string|number))? a rank name, a number (higher first) or a function
---returning either, read live (0)
---@field signal stagehand.Signal? withdraws this caller when it aborts
---@field label string? the job's label ("module.fn_name")
---@field key string? the orchestrator's key space
---@field stall_ms number? the request's stall time while it runs
---@field phase string? the load tracker's phase it counts in

---@class stagehand.WorkerPool
---@field module string
local Pool = {}
Pool.__index = Pool

local function check_pool(self, method)
  if getmetatable(self) ~= Pool then options.bad_self("pool:" .. method, "a worker pool", self, 3) end
end

function Pool:_describe() return "pool '" .. self.module .. "'" end

function Pool:_add_worker()
  local idx, token = self.ud:_add_worker(self.love and true or false)
  if token then love_threads.start(self.love, idx, token) end
  self.workers[idx] = true
  self.live = self.live + 1
end

local function is_int(v, lo, hi) return type(v) == "number" and v >= lo and v <= hi and v % 1 == 0 end

local POOL_FIELDS = { module = true, source = true, size = true, respawn_on_abort = true, close_timeout_ms = true,
  stall_ms = true, threads = true }

local function check_orch(orch, fn)
  if not E.is_orchestrator(orch) then fail(fn, "orch", "an orchestrator", orch, 3, options.orch_hint(fn, orch)) end
end

--- A pool of worker threads running the functions of a module: `module`
--- (a name each worker `require`s) or `source` (the module's Lua text, for
--- hosts whose `require` reads an archive a worker cannot see; `module`
--- then names it in messages), `size` (1 to 64, default
--- stagehand.threads()), `respawn_on_abort`, `close_timeout_ms` (default
--- 1000), `stall_ms` (default the orchestrator's).
---@param orch stagehand.Orchestrator
---@param opts stagehand.PoolOpts
---@return stagehand.WorkerPool
function M.pool(orch, opts) return M.new_pool(orch, opts, true) end

-- (spawn makes its pool without its worker, and starts it once its
-- arguments are copied: see spawn)
function M.new_pool(orch, opts, start_workers)
  check_orch(orch, "stagehand.pool")
  if type(opts) ~= "table" then fail("stagehand.pool", "opts", "a table with module or source", opts) end
  for k in each, opts do
    if not POOL_FIELDS[k] then
      fail("stagehand.pool", options.field("opts", k), "one of module, source, size, respawn_on_abort,"
        .. " close_timeout_ms, stall_ms, threads", opts[k])
    end
  end
  local module, source = opts.module, opts.source
  if source ~= nil and type(source) ~= "string" then fail("stagehand.pool", "opts.source", "a string", source) end
  if module == nil and source == nil then
    fail("stagehand.pool", "opts.module", "a module name (or opts.source, a module's text)", module)
  end
  if module ~= nil and (type(module) ~= "string" or module == "") then
    fail("stagehand.pool", "opts.module", "a non-empty string", module)
  end
  local size = opts.size
  if size == nil then size = M.threads() end
  if not is_int(size, 1, 64) then fail("stagehand.pool", "opts.size", "an integer from 1 to 64", size) end
  local respawn = opts.respawn_on_abort
  if respawn ~= nil and type(respawn) ~= "boolean" then
    fail("stagehand.pool", "opts.respawn_on_abort", "a boolean", respawn)
  end
  local close_ms = opts.close_timeout_ms
  if close_ms == nil then close_ms = 1000 end
  if type(close_ms) ~= "number" or close_ms ~= close_ms or close_ms < 0 then
    fail("stagehand.pool", "opts.close_timeout_ms", "a number >= 0", close_ms)
  end
  local stall_ms = opts.stall_ms
  if stall_ms ~= nil and not (type(stall_ms) == "number" and stall_ms > 0) then
    fail("stagehand.pool", "opts.stall_ms", options.STALL_EXPECTED, stall_ms)
  end
  local kind = love_threads.kind(opts.threads, "stagehand.pool")
  module = module or "source"
  local self = setmetatable({
    orch = orch,
    module = module,
    ud = native.pool(outside.notifier(orch), module, source, package.path, package.cpath),
    respawn = respawn or false,
    close_ms = close_ms,
    stall_ms = stall_ms,
    reqs = {}, -- job id -> the request's job, until its reply or the job's end
    payloads = {}, -- job id -> the payload it was given (reprioritise's)
    own = {}, -- job id -> the Handle of the pool:run that made it (reprioritise's)
    holds = {}, -- job id -> the core's slot holding it, until a worker takes it
    q = false, -- the dispatch queue (slots.worker_queue; none for a long-lived worker)
    size = 0, -- workers asked for (stagehand.pool's size)
    depth = 0, -- the lookahead beyond one request a worker (_offer_round)
    offer_list = {}, -- the last offer: slot, id, slot, id, ...
    offer_ranks = {}, -- each offered request's rank, as read then
    offer_k = 0, -- how many the last offer listed
    offer_want = 0, -- how many it asked the queue for
    events = {}, -- the batch of events _drain copied (collect)
    ev_n = 0, -- how many events it holds
    ev_at = 0, -- how many of them are handled
    ev_more = false, -- whether the queue may hold more than the batch did
    labels = {}, -- fn_name -> "module.fn_name", the default label
    run_opts = {}, -- a request's options, filled by each pool:run
    nreq = 0, live = 0, -- requests in flight; worker threads running
    workers = {}, -- worker number -> true while its thread runs
    destroyed = false, -- the Handle destroy returned (its job: destroy_job)
    destroy_job = false,
    destroy_reason = false, -- what its requests are cancelled with
    destroy_done = false, -- its requests all cancelled, and its end armed
    destroy_ended = false,
    is_paused = false, -- (pool:paused)
    service = false, -- a long-lived worker's "module.function" (spawn.lua)
  }, Pool)
  self.love = kind == "love" and love_threads.new(self) -- (its LÖVE threads and channels)
  local name = self:_describe()
  self.w_queued = setmetatable({ pool = self, what = "a worker of " .. name .. " (queued)" }, Waiting)
  self.w_running = setmetatable({ pool = self, what = "a reply from a worker of " .. name }, Waiting)
  if start_workers then
    self.size, self.depth = size, size
    self.q = slots.worker_queue(orch, self)
    for _ = 1, size do self:_add_worker() end
  end
  outside.add(orch, self)
  return self
end

-- Dispatch (dispatch.lua): grant rounds offer a pool's best requests.
function Pool:_offer_round(q) return dispatch.offer_round(self, q) end
function Pool:_reranked(q, g, job, added) return dispatch.cut(self, q, g, job, added) end

local RUN_FIELDS = { priority = true, signal = true, label = true, key = true, stall_ms = true, phase = true }
local function not_run_field(f) return not RUN_FIELDS[f] end -- (no closure in pool:run: jit_spec says why)

-- The request whose job orch:_external is making: park (its setup, called
-- inside it, before any game code hears of the job) queues it under the
-- job's id. One function for every request, no closure each; request
-- keeps the last ones around the call, as game code run inside it (a
-- clock, a tracker's listener) may make requests of its own.
local st_pool, st_seq, st_root, st_fn, st_payload, st_objs, st_lost = nil, 0, nil, nil, nil, nil, nil

local function park(job)
  local pool, id = st_pool, job[ID]
  local ud = pool.ud
  local objs = st_objs
  job[W] = pool.w_queued -- (first: a job whose making is cut short leaves through _abandon)
  pool.reqs[id] = job
  pool.nreq = pool.nreq + 1
  if st_payload ~= nil then pool.payloads[id] = st_payload end
  pool.own[id] = job[H]
  -- Held for a grant round, or (a long-lived worker's) committed to be
  -- taken at once: either way its LÖVE objects go first.
  if objs then love_threads.carry(pool.love, id, objs) end
  local place = pool.q and ud._hold or ud._commit
  local queued, err = place(ud, st_seq, id)
  if queued == nil then
    -- (a request made meanwhile took its place: copied again, as given)
    if objs then love_threads.forget(pool.love, id) end
    local seq
    seq, err, objs = ud:_stage(0, st_root, st_fn, st_payload)
    if objs then love_threads.carry(pool.love, id, objs) end
    if seq then queued, err = place(ud, seq, id) else queued = false end
  end
  if not queued and objs then love_threads.forget(pool.love, id) end
  if queued and pool.q then pool.holds[id] = queued end
  wait.park_outside(job, pool.w_queued)
  if queued and pool.q then dispatch.queue(pool, job) end
  if not queued then st_lost = err or false end
end

-- Stages `fn_name(...)` as a request and makes its job; root names the
-- arguments in errors ("payload", "args"). A payload that cannot cross
-- raises, with nothing queued and no job made.
local function request(pool, fn_name, label, run_opts, root, level, staged, err, payload, objs)
  local called = root == "args" and "stagehand.spawn" or "pool:run"
  if not staged then errors.raise("bad argument '" .. root .. "' to " .. called .. ": " .. tostring(err), level + 1) end
  local p_pool, p_seq, p_root, p_fn, p_payload, p_objs = st_pool, st_seq, st_root, st_fn, st_payload, st_objs
  st_pool, st_seq, st_root, st_fn, st_payload, st_objs, st_lost = pool, staged, root, fn_name, payload, objs, nil
  local h, job = pool.orch:_external(label, run_opts, park)
  local lost = st_lost
  st_pool, st_seq, st_root, st_fn, st_payload, st_objs, st_lost = p_pool, p_seq, p_root, p_fn, p_payload, p_objs, nil
  if lost ~= nil and job and not job[STATE] then
    -- Game code run while the job was made destroyed the pool (the job is
    -- cancelled), or changed the payload so that it cannot cross any more;
    -- or memory ran out (the job fails).
    if lost then
      E.fail(job, called .. ": " .. tostring(lost))
    else
      E.cancel(job, pool:_describe() .. " was destroyed")
    end
  end
  return h
end

-- A request's options when it names none: priority 0, the pool's stall time (one table a pool).
local function plain_opts(pool)
  local po = pool.plain
  if not po then
    po = { priority = 0, stall_ms = pool.stall_ms }
    pool.plain = po
  end
  return po
end

--- Runs `module[fn_name](payload)` on a worker; returns a Handle on a job
--- of the pool's orchestrator. `opts`: `priority` (a rank name, a number,
--- higher first, or a function returning either, read live; default 0),
--- `signal`, `label`, `key`, `stall_ms`, `phase` (the load tracker's:
--- stagehand.tracker). A request's priority is inherited like a job's: the
--- highest of its callers' and of every job awaiting it.
---@param fn_name string
---@param payload any plain data, ports and round barriers
---@param opts stagehand.PoolRunOpts?
---@return stagehand.Handle
function Pool:run(fn_name, payload, opts)
  check_pool(self, "run")
  if type(fn_name) ~= "string" or fn_name == "" then fail("pool:run", "fn_name", "a non-empty string", fn_name) end
  local label, run_opts = nil, nil
  if opts ~= nil then
    if type(opts) ~= "table" then fail("pool:run", "opts", "a table", opts) end
    if not options.fields_within(opts, RUN_FIELDS) then
      local k = options.first_key(opts, not_run_field)
      fail("pool:run", options.field("opts", k), "one of priority, signal, label, key, stall_ms, phase", opts[k])
    end
    local prio = opts.priority
    if prio == nil then
      prio = 0
    elseif not options.is_priority(self.orch, prio) then
      options.bad_priority(self.orch, "pool:run", "opts.priority", prio, 2)
    end
    label = opts.label
    if label ~= nil and (type(label) ~= "string" or label == "") then
      fail("pool:run", "opts.label", "a non-empty string", label)
    end
    if opts.key ~= nil and (type(opts.key) ~= "string" or opts.key == "") then
      fail("pool:run", "opts.key", "a non-empty string", opts.key)
    end
    if opts.signal ~= nil and not signal.is_signal(opts.signal) then
      fail("pool:run", "opts.signal", "a Signal (stagehand.controller().signal)", opts.signal)
    end
    if opts.stall_ms ~= nil and not (type(opts.stall_ms) == "number" and opts.stall_ms > 0) then
      fail("pool:run", "opts.stall_ms", options.STALL_EXPECTED, opts.stall_ms)
    end
    if opts.phase ~= nil and (type(opts.phase) ~= "string" or opts.phase == "") then
      fail("pool:run", "opts.phase", "a non-empty string (a phase of the load tracker)", opts.phase)
    end
    -- (one table a pool, filled for each request: _external reads it
    -- before it runs anything that could make another request)
    run_opts = self.run_opts
    run_opts.signal, run_opts.key, run_opts.stall_ms = opts.signal, opts.key, opts.stall_ms or self.stall_ms
    run_opts.phase, run_opts.priority = opts.phase, prio
  end
  if self.destroyed then error("pool:run: " .. self:_describe() .. " was destroyed", 2) end
  run_opts = run_opts or plain_opts(self)
  -- (The payload is copied now: one that cannot cross raises here, with nothing queued.)
  if not label then
    label = self.labels[fn_name]
    if not label then
      label = self.module .. "." .. fn_name
      self.labels[fn_name] = label
    end
  end
  local key = run_opts.key
  if key and self.orch:running(key) then return (self.orch:_external(label, run_opts, park)) end
  local staged, err, objs = self.ud:_stage(0, "payload", fn_name, payload)
  return request(self, fn_name, label, run_opts, "payload", 2, staged, err, payload, objs)
end

--- Requests queued, not started.
---@return integer
function Pool:queued()
  check_pool(self, "queued")
  return (self.ud:_counts())
end

--- Requests queued or running.
---@return integer
function Pool:pending()
  check_pool(self, "pending")
  return self.nreq
end

--- Starts nothing new until resume; running requests go on.
function Pool:pause()
  check_pool(self, "pause")
  self.ud:_pause(true)
  self.is_paused = true
  dispatch.withdraw(self) -- (on resume, workers wait for the next step's round)
end

--- Starts queued requests again.
function Pool:resume()
  check_pool(self, "resume")
  self.ud:_pause(false)
  self.is_paused = false
  dispatch.resumed(self)
end

--- Whether the pool is paused (pool:pause until pool:resume).
---@return boolean
function Pool:paused()
  check_pool(self, "paused")
  return self.is_paused
end

--- Gives each queued request the priority `fn(payload, priority)` returns
--- (`priority`: what its pool:run gave, 0 when none; the answer: a rank
--- name, a number or a function); within a priority, requests keep their
--- queue order. Priorities inherited from other callers and awaiting jobs
--- still count.
---@param fn fun(payload: any, priority: string|number|function): (string|number|function)
function Pool:reprioritise(fn)
  check_pool(self, "reprioritise")
  if type(fn) ~= "function" then fail("pool:reprioritise", "fn", "a function", fn) end
  dispatch.reprioritise(self, fn)
end

-- Ends the destroy: every worker exited, or close_timeout_ms passed (the
-- rest are named in the log and go on alone).
local function end_destroy(self)
  if self.destroy_ended then return end
  -- (What needs memory comes before the mark: memory that runs out leaves
  -- the end to the next step, not undone for good: see collect.)
  local lines = self.live > 0 and self:waiting(B.now_ms(), true)
  local done = settle.pack()
  self.destroy_ended = true
  if lines then
    for i = 1, #lines do logm.guard(nil, "the log function", self.orch.log, "[stagehand] " .. lines[i]) end
    self.ud:_detach()
    if self.love then love_threads.detach(self.love) end
  end
  outside.remove(self.orch, self)
  if self.close_watch then signal.unwatch(self.close_watch) end -- (its close timeout keeps no host awake now)
  if self.love and self.live == 0 then love_threads.join(self.love) end
  local job = self.destroy_job
  if not job[STATE] then E.end_job(job, "done", done) end
  self.orch.driver.reschedule(self.orch)
end

-- What the destroy's job waits on (orch:report, orch:dump).
local Exiting = {}
Exiting.__index = Exiting
function Exiting:_describe() return "the workers of " .. self.pool:_describe() .. " to exit" end

-- What destroy does once the pool is marked destroyed: its requests are
-- cancelled and its end armed. Memory that runs out partway leaves the
-- rest to the next step (collect) or destroy call: a queued request's
-- stall clock is paused, and left uncancelled it would wait for good.
local function finish_destroy(self)
  self.ud:_close() -- (every worker told to stop; again, should a collect have raised before: no harm)
  local jobs = {}
  for _, req in each, self.reqs do jobs[#jobs + 1] = req end
  table.sort(jobs, F.by_id)
  for i = 1, #jobs do
    local j = jobs[i]
    if not j[STATE] then E.cancel(j, self.destroy_reason) end
  end
  if self.live == 0 then
    end_destroy(self)
  else
    local sig = self.orch:timeout(self.close_ms)
    self.close_watch = signal.watch(sig, end_destroy, self)
    self.orch.driver.reschedule(self.orch)
  end
  self.destroy_done = true
end

--- Cancels queued and running requests, tells every worker to stop, and
--- returns a Handle that ends done once every worker thread has exited (or
--- after close_timeout_ms, the workers still running named in the log and
--- left to close their own state when their function returns). Until then
--- the pool is its orchestrator's: dropping it does not stop its threads.
---@return stagehand.Handle
function Pool:destroy()
  check_pool(self, "destroy")
  if self.destroyed then
    if not self.destroy_done then finish_destroy(self) end
    return self.destroyed
  end
  local reason = self:_describe() .. " was destroyed"
  local h, job = self.orch:_awaiting("destroying " .. self:_describe(), setmetatable({ pool = self }, Exiting))
  self.destroyed, self.destroy_job, self.destroy_reason = h, job, reason
  if self.q then slots.drop_worker_queue(self.orch, self.q) end
  -- (A reply that arrived before the destroy ends its request done: its
  -- work is over, whenever the step that would collect it comes. Collected
  -- before finish_destroy tells the workers to stop: a worker whose wait
  -- the stop cuts short may reply at once, and that reply is no finished
  -- work.)
  self:_collect_events()
  if not self.destroy_done then finish_destroy(self) end
  return h
end

-- A worker took a queued request: it leaves the dispatch queue (and a
-- trace records the priority it went at); its job waits for the reply.
local function taken(pool, job)
  local id = job[ID]
  if not pool.holds[id] then return end
  local o = pool.orch
  local tr = o.tracer
  local g = tr and job[WAITQ] and not job[STATE] and priority.set_of(o, job)
  -- (out of the queue before the trace reads priority functions: game
  -- code that cancels the request there ends a job that waits in none; a
  -- leave memory cuts short is made by its end: Waiting:_abandon)
  slots.leave(pool.q, job)
  pool.holds[id] = nil
  if g then
    -- (its rank as the last round read it; where it came from, found now)
    local rank = o.fixed_rank[g] or pool.q.last[g] or priority.effective(job)
    tr:dispatched(job, priority.name(o, rank), priority.origin(job), o.now)
  end
end

local function started(pool, job)
  if job[W] == pool.w_queued then
    job[W] = pool.w_running
    taken(pool, job)
    wait.outside_started(job)
  end
end

-- Outside source: what the workers reported since the last step, read a
-- batch at a time (_drain: three entries an event, the first its
-- request's id times 8 plus its kind). Where the batch is and
-- how far it is handled are the pool's, not this call's: ending a job runs
-- game code, which may step, and a collect inside this one goes on from
-- the next event, as this one does once it returns. An event is counted
-- handled before it is, and the pool frees a batch's events only when
-- the next is asked for: memory that runs out while one is copied or
-- handled loses none of the rest (they come again; handling one twice
-- changes nothing).
local BATCH = 256 -- (csrc/lua/lpool.c's EVENT_BATCH)
function Pool:collect()
  if self.destroyed then
    if not self.destroy_done then finish_destroy(self) end
    if self.live == 0 and not self.destroy_ended then end_destroy(self) end
  end
  self:_collect_events()
  if self.love then love_threads.check(self) end
  -- Every step is a grant round for a pool with requests queued: their
  -- priority functions are read again, and the offer chosen again.
  local q = self.q
  if q and not self.destroyed and pool_waiting(q.p) > 0 then slots.dirty(self.orch, q) end
end

function Pool:_collect_events()
  local ud, reqs, buf = self.ud, self.reqs, self.events
  self.ev_more = true
  while true do
    local i = self.ev_at
    if i >= self.ev_n then
      if not self.ev_more then break end
      -- (cleared first: a drain that raises leaves nothing counted as
      -- handled twice)
      self.ev_at, self.ev_n = 0, 0
      local n = ud:_drain(buf, i, self.love and self.love.fetch)
      self.ev_n, self.ev_more = n, n == BATCH
      if n == 0 then break end
      i = 0
    end
    local k = i * 3
    local what = buf[k + 1]
    local kind = what % 8
    local id = (what - kind) / 8
    local job = reqs[id]
    local err, one, packed
    if kind == DONE_ONE then kind, one = DONE, true end
    if (kind == DONE or kind == FAILED) and job and not job[STATE] then
      -- Before the event counts as handled, so that memory running out
      -- here leaves it to come again: a failure's Error is made, a reply
      -- of one value is packed, and the clock of a job whose start went
      -- unread (paused while it was queued) runs, so that should its end
      -- fail for memory, it stalls.
      if kind == FAILED then err = failed(job[LABEL], buf[k + 2], buf[k + 3]) end
      if one then packed = { buf[k + 2] } end
      if job[W] == self.w_queued then
        local o = self.orch
        B.check(B.clock_resume(o.cc, job[CID], o.now), "resume a stall clock")
      end
    end
    self.ev_at = i + 1
    if kind == STARTED then
      if job then started(self, job) end
    elseif kind == PROGRESS then
      if job and not job[STATE] then
        local a, b = buf[k + 2], buf[k + 3] -- (first: game code in started() may read events into buf)
        started(self, job) -- (its start was read late, or dropped: started now; that may end it)
        if not job[STATE] then
          if a >= 0 then job:progress(a, b) else job:progress() end
        end
      end
    elseif kind == DONE or kind == FAILED then
      local a = packed or buf[k + 2] -- (packed above when the reply is one value, for a job still running)
      buf[k + 2], buf[k + 3] = nil, nil -- (the buffer keeps no reply alive)
      if job then
        reqs[id] = nil
        self.payloads[id], self.own[id] = nil, nil
        if self.love then love_threads.forget(self.love, id) end
        taken(self, job) -- (its start went unread)
        self.nreq = self.nreq - 1
        if not job[STATE] then
          job[W] = false -- (the reply ends its wait: it has nothing to leave)
          E.end_job(job, kind == DONE and "done" or "failed", kind == DONE and a or err)
        end
        if self.service then ud:_close() end -- (its one request is over: its worker exits)
      end
    elseif kind == EXITED then
      local worker = id -- (an exit is about its worker)
      if self.workers[worker] then
        self.workers[worker] = nil
        self.live = self.live - 1
      end
      if self.destroy_done and self.live == 0 then end_destroy(self) end
      if self.service and self.live == 0 then outside.remove(self.orch, self) end
    end
  end
end

function Pool:outside_pending() return self.nreq > 0 or (self.destroyed and not self.destroy_ended) end
function Pool:wait_cap() return self.love and love_threads.wait_cap(self) end -- (outside.lua)

-- Lines naming each worker that waits on a port, a round or a sleep (or,
-- with `all`, that still runs at all), for the log.
function Pool:waiting(now, all)
  local lines = {}
  local idxs = {}
  for i in each, self.workers do idxs[#idxs + 1] = i end
  table.sort(idxs)
  for k = 1, #idxs do
    local i = idxs[k]
    local cur, what, since = self.ud:_worker(i)
    local job = cur and self.reqs[cur]
    local doing = job and (" (running " .. job[LABEL] .. ")")
      or (cur and " (running a request whose job ended)" or "")
    -- (a long-lived worker by the function it runs: a pool of one, made for it)
    local who = self.service and "long-lived worker " .. self.service
      or string.format("worker %d of %s", i + 1, self:_describe())
    if self.service then doing = "" end
    if what then
      lines[#lines + 1] = string.format("%s waits on %s for %.1f s%s", who, what, (now - since) / 1000, doing)
    elseif all and cur then
      lines[#lines + 1] = string.format("%s still runs%s; it is left to end alone", who, doing)
    end
  end
  return lines
end

-- (Long-lived workers, stagehand.spawn, are pools of one: spawn.lua.)
M.request, M.check_orch = request, check_orch
M.Pool = Pool
return M
