-- Nothing loads twice: running keyed jobs, `when` waiters for keys nobody
-- has started, and the remembered outcomes of ended runs.
--
-- o.keyed[key]        the running job of that key
-- o.pending[key]      counted set (list.lua) of placeholder jobs, one per `when` still waiting
--                     for a run of the key to start (each has its own stall
--                     clock and shows in report() like any job); a set, so
--                     10,000 of them leaving one by one cost O(1) each
-- remembered outcomes an ordered map from key to the ended job: insert at the
--                     newest end, evict from the oldest, look up and forget
--                     by key, each O(1) (a list linked through two maps)
local list = require "stagehand.engine.list"
local F = require "stagehand.engine.fields"
local KEY, OUT, H, TOLD = F.KEY, F.OUT, F.H, F.TOLD
local E = require "stagehand.engine.engine"
local sources = require "stagehand.rank.sources"

local M = {}

function M.init(o)
  o.keyed, o.pending = {}, {}
  o.mem, o.mem_newer, o.mem_older = {}, {}, {}
  o.mem_oldest, o.mem_newest, o.mem_count = nil, nil, 0
end

local function unlink(o, key)
  local newer, older = o.mem_newer[key], o.mem_older[key]
  if older ~= nil then o.mem_newer[older] = newer else o.mem_oldest = newer end
  if newer ~= nil then o.mem_older[newer] = older else o.mem_newest = older end
  o.mem_newer[key], o.mem_older[key] = nil, nil
  o.mem[key] = nil
  o.mem_count = o.mem_count - 1
end

--- Drops the remembered outcome of `key`, if any.
function M.forget(o, key)
  if o.mem[key] ~= nil then unlink(o, key) end
end

--- Remembers an ended keyed job as the newest outcome of its key.
-- (The writes that may need memory, made together: one that runs out
-- leaves the others to be taken back.)
local function link(o, key, job, newest)
  o.mem_older[key] = newest
  if newest ~= nil then o.mem_newer[newest] = key end
  o.mem[key] = job
end

function M.remember(o, key, job)
  M.forget(o, key)
  local newest = o.mem_newest
  local ok, err = pcall(link, o, key, job, newest)
  if not ok then -- (taking back needs no memory: the key is not remembered)
    o.mem[key], o.mem_older[key] = nil, nil
    if newest ~= nil then o.mem_newer[newest] = nil end
    error(err, 0)
  end
  if newest == nil then o.mem_oldest = key end
  o.mem_newest = key
  o.mem_count = o.mem_count + 1
  while o.mem_count > o.remember do unlink(o, o.mem_oldest) end
end

function M.recall(o, key) return o.mem[key] end

--- The running job of `key`, or nil.
function M.running(o, key) return o.keyed[key] end

--- A placeholder job stops waiting for its key (it ended, or joined a run).
function M.leave_pending(o, p)
  list.set_remove(o.pending, p[KEY], p)
end

--- Adds a placeholder job waiting for a run of its key.
function M.add_pending(o, p)
  p.pending = true
  list.set_add(o.pending, p[KEY], p)
end

local by_id = F.by_id

-- A keyed job's end: a placeholder stops waiting; a run leaves its key,
-- and is remembered unless it was cancelled.
E.on("job_ended", function(o, job, st)
  local key = job[KEY]
  if not key then return end
  if job.pending then
    M.leave_pending(o, job)
  elseif o.keyed[key] == job then
    o.keyed[key] = nil
    if st ~= "cancelled" then M.remember(o, key, job) end
  end
end)

-- The placeholders waiting for `key`, oldest first; they stop waiting.
local function take_pending(o, key)
  local set = o.pending[key]
  if not set then return nil end
  o.pending[key] = nil
  return list.members(set, by_id)
end

--- A run of `key` starts as `job`: the `when` waiters for it become its
--- callers before its work starts (their Handles follow the run, and what
--- awaited them awaits it). Returns the placeholders, to be ended once the
--- game has heard of the run, or nil.
function M.join_pending(o, key, job)
  o.keyed[key] = job
  local waiting = take_pending(o, key)
  if not waiting then return nil end
  for i = 1, #waiting do
    local p = waiting[i]
    if p[OUT] == TOLD then job[OUT] = TOLD end -- (its Handles had listeners)
    for j = H, #p do
      local ph = p[j]
      ph[1] = job
      p[j] = nil
      sources.add_caller(o, job, ph)
    end
    sources.move_awaiters(o, p, job)
    p.pending = false -- it joined: nothing to leave, nothing to remember
  end
  return waiting
end

return M
