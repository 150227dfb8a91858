-- Worker pools and long-lived workers: CPU work on other threads, each
-- request a job of the orchestrator that follows every rule of jobs.
--
-- A request is a job whose work pushes the request onto the pool's queue
-- (csrc/sh_work.c) and awaits its reply, with its stall clock paused until
-- a worker takes it. The pool is one of the orchestrator's outside sources
-- (outside.lua): each step collects what its workers reported (a request
-- started, progress, a reply, a failure, a worker's exit).
local E = require "stagehand.engine"
local F = require "stagehand.fields"
local native = require "stagehand.threads_native"
local outside = require "stagehand.outside"
local settle = require "stagehand.settle"
local wait = require "stagehand.wait"
local options = require "stagehand.options"
local each = require("stagehand.compat").each
local signal = require "stagehand.signal"
local logm = require "stagehand.log"
local B = require "stagehand.backend"

local STATE = F.STATE
local fail = options.fail

local M = {}

-- Events a pool's queue reports (csrc/sh_threads.h, enum sh_work_event).
local STARTED, PROGRESS, DONE, FAILED, EXITED = 1, 2, 3, 4, 5

--- The default number of worker threads: one fewer than the cores, at
--- least 1, at most 4.
---@return integer
function M.threads() return native.default_threads() end

---------------------------------------------------------------------------
-- Requests: what a request's job is parked on. A request is a small array
-- (one allocation, as jobs are: fields.lua), its fields by these indices.
local R_POOL, R_ID, R_JOB, R_PAYLOAD, R_PRIORITY, R_STARTED = 1, 2, 3, 4, 5, 6

local Request = {}
Request.__index = Request
function Request:_describe()
  return (self[R_STARTED] and "a reply from a worker of " or "a worker of ") .. self[R_POOL]:_describe()
    .. (self[R_STARTED] and "" or " (queued)")
end
-- The job stopped waiting before the reply (cancelled, stalled, its last
-- caller withdrew): a queued request leaves the queue; a running one's
-- worker is told to stop, and its reply is dropped when it comes.
function Request:_abandon()
  local pool, id = self[R_POOL], self[R_ID]
  if pool.reqs[id] ~= self then return end
  pool.reqs[id] = nil
  pool.nreq = pool.nreq - 1
  if pool.service then return pool.ud:_close() end -- (a long-lived worker: told to stop, it exits)
  if pool.ud:_remove(id) then return end
  local retire = pool.respawn
  local on = pool.ud:_abort(id, retire)
  if on and retire and not pool.destroyed then pool:_add_worker() end
end

---------------------------------------------------------------------------
-- Pools.

---@class stagehand.WorkerPool
---@field module string
local Pool = {}
Pool.__index = Pool

local function check_pool(self, method)
  if getmetatable(self) ~= Pool then options.bad_self("pool:" .. method, "a worker pool", self, 3) end
end

function Pool:_describe() return "pool '" .. self.module .. "'" end

function Pool:_add_worker()
  local idx = self.ud:_add_worker()
  self.workers[idx] = true
  self.live = self.live + 1
end

local function is_int(v, lo, hi) return type(v) == "number" and v >= lo and v <= hi and v % 1 == 0 end

local POOL_FIELDS = { module = true, source = true, size = true, respawn_on_abort = true, close_timeout_ms = true,
  stall_ms = true }

local function check_orch(orch, fn)
  local Orchestrator = require "stagehand.orchestrator"
  if getmetatable(orch) ~= Orchestrator then fail(fn, "orch", "an orchestrator", orch, 3) end
end

--- A pool of worker threads running the functions of a module: `module`
--- (a name each worker `require`s) or `source` (the module's Lua text, for
--- hosts whose `require` reads an archive a worker cannot see; `module`
--- then names it in messages), `size` (1 to 64, default
--- stagehand.threads()), `respawn_on_abort`, `close_timeout_ms` (default
--- 1000), `stall_ms` (default the orchestrator's).
---@param orch stagehand.Orchestrator
---@param opts table
---@return stagehand.WorkerPool
function M.pool(orch, opts) return M.new_pool(orch, opts, true) end

-- (spawn makes its pool without its worker, and starts it once its
-- arguments are copied: see spawn)
function M.new_pool(orch, opts, start_workers)
  check_orch(orch, "stagehand.pool")
  if type(opts) ~= "table" then fail("stagehand.pool", "opts", "a table with module or source", opts) end
  for k in each, opts do
    if not POOL_FIELDS[k] then
      fail("stagehand.pool", "opts." .. tostring(k), "one of module, source, size, respawn_on_abort,"
        .. " close_timeout_ms, stall_ms", opts[k])
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
  module = module or "source"
  local self = setmetatable({
    orch = orch,
    module = module,
    ud = native.pool(outside.notifier(orch), module, source, package.path, package.cpath),
    respawn = respawn or false,
    close_ms = close_ms,
    stall_ms = stall_ms,
    reqs = {}, -- id -> Request, until its reply or its job's end
    labels = {}, -- fn_name -> "module.fn_name", the default label
    nreq = 0,
    next_id = 0,
    workers = {}, -- worker number -> true while its thread runs
    live = 0,
    destroyed = false, -- the Handle destroy returned (its job: destroy_job)
    destroy_ended = false,
  }, Pool)
  if start_workers then
    for _ = 1, size do self:_add_worker() end
  end
  outside.add(orch, self)
  return self
end

local RUN_FIELDS = { priority = true, signal = true, label = true, key = true, stall_ms = true, phase = true }

local no = false -- (a constructor of constants is copied from a template: see orchestrator.new_job)

-- The request whose job orch:_external is making (its setup is called at
-- once, inside it: one function for every request, no closure each).
local staging

local function park(job)
  local req = staging
  req[R_JOB] = job
  wait.park_outside(job, req)
end

-- Queues `fn_name(...)` as a request and makes its job; root names the
-- arguments in errors ("payload", "args").
local function request(pool, fn_name, label, priority, run_opts, root, level, ...)
  local key = run_opts and run_opts.key
  if key and pool.orch:running(key) then return (pool.orch:_external(label, run_opts, park)) end
  local id = pool.next_id + 1
  local ok, queued = pcall(pool.ud._push, pool.ud, id, priority, root, fn_name, ...)
  if not ok then
    error("bad argument '" .. root .. "' to " .. (root == "args" and "stagehand.spawn" or "pool:run") .. ": "
      .. tostring(queued):gsub("^[^:]*:%d+: ", ""), level + 1)
  end
  if not queued then error("pool:run: " .. pool:_describe() .. " was destroyed", level + 1) end
  pool.next_id = id
  local req = setmetatable({ pool, id, no, (...), priority, no }, Request)
  pool.reqs[id] = req
  pool.nreq = pool.nreq + 1
  staging = req
  local made, h = pcall(pool.orch._external, pool.orch, label, run_opts, park)
  staging = nil
  if not made then
    Request._abandon(req)
    error(h, 0)
  end
  return h
end

--- Runs `module[fn_name](payload)` on a worker; returns a Handle on a job
--- of the pool's orchestrator. `opts`: `priority` (a number, higher
--- first), `signal`, `label`, `key`, `stall_ms`, `phase` (the load
--- tracker's: stagehand.tracker).
---@param fn_name string
---@param payload any plain data, ports and round barriers
---@param opts table?
---@return stagehand.Handle
function Pool:run(fn_name, payload, opts)
  check_pool(self, "run")
  if type(fn_name) ~= "string" or fn_name == "" then fail("pool:run", "fn_name", "a non-empty string", fn_name) end
  local priority, label, run_opts = 0, nil, nil
  if opts ~= nil then
    if type(opts) ~= "table" then fail("pool:run", "opts", "a table", opts) end
    for k in each, opts do
      if not RUN_FIELDS[k] then
        fail("pool:run", "opts." .. tostring(k), "one of priority, signal, label, key, stall_ms, phase", opts[k])
      end
    end
    if opts.priority ~= nil then
      priority = opts.priority
      if type(priority) ~= "number" or priority ~= priority then
        fail("pool:run", "opts.priority", "a number (higher first)", priority)
      end
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
    run_opts = { signal = opts.signal, key = opts.key, stall_ms = opts.stall_ms, phase = opts.phase }
  end
  if self.destroyed then error("pool:run: " .. self:_describe() .. " was destroyed", 2) end
  if self.stall_ms and not (run_opts and run_opts.stall_ms) then
    run_opts = run_opts or {}
    run_opts.stall_ms = self.stall_ms
  end
  -- (The payload is copied now: one that cannot cross raises here, with
  -- nothing queued.)
  if not label then
    label = self.labels[fn_name]
    if not label then
      label = self.module .. "." .. fn_name
      self.labels[fn_name] = label
    end
  end
  return request(self, fn_name, label, priority, run_opts, "payload", 2, payload)
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
end

function Pool:resume()
  check_pool(self, "resume")
  self.ud:_pause(false)
end

--- Gives each queued request the priority `fn(payload, priority)` returns;
--- within a priority, requests keep their queue order.
---@param fn fun(payload: any, priority: number): number
function Pool:reprioritise(fn)
  check_pool(self, "reprioritise")
  if type(fn) ~= "function" then fail("pool:reprioritise", "fn", "a function", fn) end
  local ids = self.ud:_queued_ids()
  local new = {}
  for i = 1, #ids do
    local req = self.reqs[ids[i]]
    if req then
      local p = fn(req[R_PAYLOAD], req[R_PRIORITY])
      if type(p) ~= "number" or p ~= p then
        error("pool:reprioritise: fn returned " .. tostring(p) .. " for a request of " .. req[R_JOB][F.LABEL]
          .. "; expected a number", 2)
      end
      new[i] = p
    end
  end
  for i = 1, #ids do
    local req = self.reqs[ids[i]]
    if req and new[i] then
      req[R_PRIORITY] = new[i]
      self.ud:_set_priority(ids[i], new[i])
    end
  end
end

-- Ends the destroy: every worker exited, or close_timeout_ms passed (the
-- rest are named in the log and go on alone).
local function end_destroy(self)
  if self.destroy_ended then return end
  self.destroy_ended = true
  if self.live > 0 then
    local lines = self:waiting(B.now_ms(), true)
    for i = 1, #lines do logm.guard(nil, "the log function", self.orch.log, "[stagehand] " .. lines[i]) end
    self.ud:_detach()
  end
  outside.remove(self.orch, self)
  local job = self.destroy_job
  if not job[STATE] then E.end_job(job, "done", settle.pack()) end
  self.orch.driver.reschedule(self.orch)
end

-- What the destroy's job waits on (orch:report, orch:dump).
local Exiting = {}
Exiting.__index = Exiting
function Exiting:_describe() return "the workers of " .. self.pool:_describe() .. " to exit" end

--- Cancels queued and running requests, tells every worker to stop, and
--- returns a Handle that ends done once every worker thread has exited (or
--- after close_timeout_ms, the workers still running named in the log and
--- left to close their own state when their function returns).
---@return stagehand.Handle
function Pool:destroy()
  check_pool(self, "destroy")
  if self.destroyed then return self.destroyed end
  local h, job = self.orch:_awaiting("destroying " .. self:_describe(), setmetatable({ pool = self }, Exiting))
  self.destroyed, self.destroy_job = h, job
  local jobs = {}
  for _, req in each, self.reqs do
    if req[R_JOB] then jobs[#jobs + 1] = req[R_JOB] end
  end
  table.sort(jobs, F.by_id)
  self.ud:_close()
  for i = 1, #jobs do
    local j = jobs[i]
    if not j[STATE] then E.cancel(j, self:_describe() .. " was destroyed") end
  end
  if self.live == 0 then
    end_destroy(self)
  else
    local sig = self.orch:timeout(self.close_ms)
    signal.watch(sig, end_destroy, self)
    self.orch.driver.reschedule(self.orch)
  end
  return h
end

-- Outside source: what the workers reported since the last step.
function Pool:collect()
  local ud, reqs = self.ud, self.reqs
  local next_event = ud._next_event
  while true do
    local id, kind, worker, a, b = next_event(ud)
    if id == nil then break end
    local req = reqs[id]
    if kind == STARTED then
      if req and not req[R_STARTED] then
        req[R_STARTED] = true
        if req[R_JOB] then wait.outside_started(req[R_JOB]) end
      end
    elseif kind == PROGRESS then
      local job = req and req[R_JOB]
      if job and not job[STATE] then
        if not req[R_STARTED] then -- (its start was read late, or dropped: started now)
          req[R_STARTED] = true
          wait.outside_started(job)
        end
        if a >= 0 then job:progress(a, b) else job:progress() end
      end
    elseif kind == DONE or kind == FAILED then
      if req then
        reqs[id] = nil
        self.nreq = self.nreq - 1
        local job = req[R_JOB]
        if job and not job[STATE] then
          if kind == DONE then E.end_job(job, "done", a) else E.fail(job, a, b) end
        end
        if self.service then ud:_close() end -- (its one request is over: its worker exits)
      end
    elseif kind == EXITED then
      if self.workers[worker] then
        self.workers[worker] = nil
        self.live = self.live - 1
      end
      if self.destroyed and self.live == 0 then end_destroy(self) end
      if self.service and self.live == 0 then outside.remove(self.orch, self) end
    end
  end
end

function Pool:outside_pending() return self.nreq > 0 or (self.destroyed and not self.destroy_ended) end

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
    local req = cur and self.reqs[cur]
    local doing = req and req[R_JOB] and (" (running " .. req[R_JOB][F.LABEL] .. ")")
      or (cur and " (running a request whose job ended)" or "")
    if what then
      lines[#lines + 1] = string.format("worker %d of %s waits on %s for %.1f s%s", i + 1, self:_describe(), what,
        (now - since) / 1000, doing)
    elseif all and cur then
      lines[#lines + 1] = string.format("worker %d of %s still runs%s; it is left to end alone", i + 1,
        self:_describe(), doing)
    end
  end
  return lines
end

---------------------------------------------------------------------------
-- Long-lived workers: a pool of one worker running one request that is
-- never stalled by its own clock.

---@class stagehand.Worker
---@field done stagehand.Handle
local Service = {}
Service.__index = Service

--- Tells the worker to stop: stopping() turns true in it, and its waits
--- on ports and rounds return nil or false from now on.
function Service:stop()
  if getmetatable(self) ~= Service then options.bad_self("w:stop", "a worker from stagehand.spawn", self, 2) end
  self.stopped = true
  if not self.done._st then self.pool.ud:_stop_worker(0, false) end
end

--- "running", "done", "failed" or "stopped".
---@return string
function Service:state()
  if getmetatable(self) ~= Service then options.bad_self("w:state", "a worker from stagehand.spawn", self, 2) end
  local st = self.done._st
  if not st then return "running" end
  if st == "failed" then return "failed" end
  if st ~= "done" or self.stopped then return "stopped" end
  return "done"
end

--- Runs `module.function(...)` on a thread of its own (the part after the
--- last dot names the function), its arguments copied in. Returns `w`:
--- `w.done` (a Handle on what it returned; it never stalls), `w:stop()`,
--- `w:state()`.
---@param orch stagehand.Orchestrator
---@param name string "module.function"
---@return stagehand.Worker
function M.spawn(orch, name, ...)
  check_orch(orch, "stagehand.spawn")
  local module, fn
  if type(name) == "string" then module, fn = name:match("^(.+)%.([^.]+)$") end
  if not module then fail("stagehand.spawn", "name", "\"module.function\"", name) end
  -- Its arguments are copied before its thread starts: arguments that
  -- cannot cross leave nothing behind (the pool has no worker yet).
  local pool = M.new_pool(orch, { module = module, size = 1, stall_ms = math.huge }, false)
  pool.service = true
  local w = setmetatable({ pool = pool, stopped = false }, Service)
  local ok, h = pcall(request, pool, fn, name, 0, { stall_ms = math.huge }, "args", 1, ...)
  if not ok then
    pool.ud:_close()
    outside.remove(orch, pool)
    error(h, 2)
  end
  pool:_add_worker()
  w.done = h
  return w
end

M.Pool = Pool
return M
