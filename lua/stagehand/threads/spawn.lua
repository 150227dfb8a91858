-- Long-lived workers (stagehand.spawn): a pool of one worker running one
-- request that is never stalled by its own clock (workers.lua's pools,
-- made without a dispatch queue: its one request goes straight to its
-- worker).
local W = require "stagehand.threads.workers"
local options = require "stagehand.engine.options"
local outside = require "stagehand.threads.outside"
local errors = require "stagehand.engine.errors"
local on_collect = require("stagehand.core.compat").on_collect

local fail = options.fail
local M = {}

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

-- spawn's steps, inside its pcall, so that one a call cannot even begin
-- (on Lua 5.1 to 5.4 a call may need memory for its frame) has made
-- nothing: each thing made is noted in `made`, whose fields exist already.
-- Its arguments are copied before its thread starts: arguments that
-- cannot cross leave nothing behind (the pool has no worker yet).
local function start(orch, module, name, fn, made, ...)
  local pool = W.new_pool(orch, { module = module, size = 1, stall_ms = math.huge }, false)
  made.pool = pool
  pool.service = name
  local staged, err, objs = pool.ud:_stage(0, "args", fn, ...)
  local h = W.request(pool, fn, name, { stall_ms = math.huge }, "args", 1, staged, err, (...), objs)
  made.h = h
  if h._st then return end
  pool:_add_worker()
  made.started = true
end

--- Runs `module.function(...)` on a thread of its own (the part after the
--- last dot names the function), its arguments copied in. Returns `w`:
--- `w.done` (a Handle on what it returned; it never stalls), `w:stop()`,
--- `w:state()`.
---@param orch stagehand.Orchestrator
---@param name string "module.function"
---@return stagehand.Worker
function M.spawn(orch, name, ...)
  W.check_orch(orch, "stagehand.spawn")
  local module, fn
  if type(name) == "string" then module, fn = name:match("^(.+)%.([^.]+)$") end
  if not module then fail("stagehand.spawn", "name", "\"module.function\"", name) end
  -- What Lua needs is made first, and what is written once the thread
  -- runs is there already: memory that runs out leaves no worker running
  -- that nothing could stop. A worker whose `w` the game drops is told to
  -- stop when `w` is collected: nothing could stop it any more. (The pool
  -- is the orchestrator's until the worker exits; w.done may outlive w.)
  local made = { pool = false, h = false, started = false }
  local w = setmetatable({ pool = false, stopped = false, done = false, collected = false }, Service)
  w.collected = on_collect(function()
    local pool, h = made.pool, made.h
    if made.started and not pool.destroyed and not h._st then pcall(pool.ud._stop_worker, pool.ud, 0, false) end
  end)
  local ok, err = pcall(start, orch, module, name, fn, made, ...)
  local pool, h = made.pool, made.h
  if not made.started and pool then
    -- (Made in part: the request, if any, is withdrawn, which closes the
    -- pool, and the pool leaves the orchestrator, which only a worker's
    -- exit would tell it otherwise.)
    if h and not h._st then pcall(h.cancel, h, "stagehand.spawn: its worker could not start") end
    pool.ud:_close()
    outside.remove(orch, pool)
  end
  if not ok then
    if tostring(err):find("not enough memory", 1, true) then errors.raise("stagehand.spawn: not enough memory", 2) end
    error(err, 0) -- (raised at the game's line: a payload that cannot cross)
  end
  -- (A request that ended as it was made, memory having run out queueing
  -- it, started no worker: w.done says why.)
  w.pool, w.done = pool, h
  return w
end


M.Service = Service
return M
