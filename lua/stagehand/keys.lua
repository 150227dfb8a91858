-- Nothing loads twice: running keyed jobs, `when` waiters for keys nobody
-- has started, and the remembered outcomes of ended runs.
--
-- o.keyed[key]        the running job of that key
-- o.pending[key]      list of placeholder jobs, one per `when` still waiting
--                     for a run of the key to start (each has its own stall
--                     clock and shows in report() like any job)
-- remembered outcomes an ordered map from key to the ended job: insert at the
--                     newest end, evict from the oldest, look up and forget
--                     by key, each O(1) (a list linked through two maps)
local list_m = require "stagehand.list"
local F = require "stagehand.fields"
local KEY = F.KEY

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
function M.remember(o, key, job)
  M.forget(o, key)
  o.mem[key] = job
  local newest = o.mem_newest
  o.mem_older[key] = newest
  if newest ~= nil then o.mem_newer[newest] = key else o.mem_oldest = key end
  o.mem_newest = key
  o.mem_count = o.mem_count + 1
  while o.mem_count > o.remember do unlink(o, o.mem_oldest) end
end

function M.recall(o, key) return o.mem[key] end

--- A placeholder job stops waiting for its key (it ended, or joined a run).
function M.leave_pending(o, p)
  local key = p[KEY]
  local list = o.pending[key]
  if not list then return end
  list_m.remove_value(list, p)
  if list[1] == nil then o.pending[key] = nil end
end

return M
