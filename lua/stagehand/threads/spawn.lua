-- Long-lived workers (stagehand.spawn): a pool of one worker running one
-- request that is never stalled by its own clock (workers.lua's pools,
-- made without a dispatch queue: its one request goes straight to its
-- worker).
local W = require "stagehand.threads.workers"
local options = require "stagehand.engine.options"
local outside = require "stagehand.threads.outside"
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
  -- Its arguments are copied before its thread starts: arguments that
  -- cannot cross leave nothing behind (the pool has no worker yet).
  local pool = W.new_pool(orch, { module = module, size = 1, stall_ms = math.huge }, false)
  pool.service = name
  local w = setmetatable({ pool = pool, stopped = false }, Service)
  local staged, err, objs = pool.ud:_stage(0, "args", fn, ...)
  local ok, h = pcall(W.request, pool, fn, name, { stall_ms = math.huge }, "args", 1, staged, err, (...), objs)
  if not ok then
    pool.ud:_close()
    outside.remove(orch, pool)
    error(h, 0) -- (request raised it at the game's line)
  end
  pool:_add_worker()
  w.done = h
  -- A worker whose `w` the game drops is told to stop when `w` is
  -- collected: nothing could stop it any more. (The pool is the
  -- orchestrator's until the worker exits; w.done may outlive w.)
  w.collected = on_collect(function()
    if not pool.destroyed and not h._st then pcall(pool.ud._stop_worker, pool.ud, 0, false) end
  end)
  return w
end


M.Service = Service
return M
