-- Barriers: waiting for several parallel loads. A barrier is a job with no
-- work of its own: it ends done when every named key has arrived, each
-- arrival is its progress, and if none comes for its stall time it stalls
-- with the keys still missing. Counting lives in the core (sh_barrier).
local B = require "stagehand.core.backend"
local E = require "stagehand.engine.engine"
local settle = require "stagehand.engine.settle"
local options = require "stagehand.engine.options"
local errors = require "stagehand.engine.errors"
local F = require "stagehand.engine.fields"
local ORCH, CID, STATE, W = F.ORCH, F.CID, F.STATE, F.W

local M = {}

---@class stagehand.Barrier
---@field settled stagehand.Handle ends done when every key arrived
---@field label string
local Barrier = {}
Barrier.__index = Barrier

local function check_self(self, method)
  if getmetatable(self) ~= Barrier then options.bad_self("b:" .. method, "a barrier", self, 3) end
end

--- Marks `key` arrived (a repeat counts once). Raises for a key not in the list.
---@param key string
function Barrier:arrive(key)
  check_self(self, "arrive")
  local i = self.index[key]
  if i == nil then
    options.fail("arrive", "key", "one of the barrier's keys (" .. self.label .. ")", key)
  end
  local job = self.job
  if job[STATE] then return end
  local o = job[ORCH]
  local now = E.now(o) -- (first: a clock that fails leaves the count as it was)
  if B.barrier_arrive(self.c, i) == 1 then
    B.check(B.clock_progress(o.cc, job[CID], now), "count a barrier's arrival as progress")
    if B.barrier_arrived(self.c) == #self.keys then E.end_job(job, "done", settle.pack(#self.keys)) end
  end
end

--- How many keys have arrived.
---@return integer
function Barrier:arrived()
  check_self(self, "arrived")
  return tonumber(B.barrier_arrived(self.c))
end

--- The keys not yet arrived, in the order given.
---@return string[]
function Barrier:missing()
  check_self(self, "missing")
  local out = {}
  local i = B.barrier_next_missing(self.c, -1)
  while i >= 0 do
    out[#out + 1] = self.keys[i + 1]
    i = B.barrier_next_missing(self.c, i)
  end
  return out
end

-- What report() shows a barrier waiting on.
local Waiting = {}
Waiting.__index = Waiting
Waiting.__settle = settle.MARK
function Waiting:_follows() return nil end
function Waiting:_describe()
  local b = self.b
  return string.format("%d of %d keys (missing: %s)", b:arrived(), #b.keys, table.concat(b:missing(), ", "))
end

function M.new(_, label, keys, opts, make_job, join_opts)
  -- Errors name orch:barrier's caller: this, orch:barrier, then the caller.
  if type(label) ~= "string" or label == "" then options.fail("barrier", "label", "a non-empty string", label, 3) end
  if type(keys) ~= "table" then options.fail("barrier", "keys", "a list of strings", keys, 3) end
  local list, index = {}, {}
  local extra = options.first_non_list_key(keys)
  if extra ~= nil then options.fail("barrier", "keys", "a list of strings (no other fields)", extra, 3) end
  for i = 1, #keys do
    local k = keys[i]
    if type(k) ~= "string" or k == "" then
      options.fail("barrier", "keys", "a list of non-empty strings (item " .. i .. ")", k, 3)
    end
    if index[k] == nil then
      list[#list + 1] = k
      index[k] = #list - 1
    end
  end
  join_opts(opts)
  local b = setmetatable({ label = label, keys = list, index = index, c = B.barrier_new(#list) }, Barrier)
  local job = make_job(label, opts, function(j, h)
    b.job, b.settled = j, h
    j.barrier = b
    j[W] = setmetatable({ b = b, _standing = true }, Waiting)
  end)
  if #list == 0 then E.end_job(job, "done", settle.pack(0)) end
  return b
end

-- A stalled barrier's Error lists its missing keys, and its line names them.
E.on("stalled", function(job, err)
  local b = rawget(job, "barrier")
  if not b then return end
  local missing = b:missing()
  err.missing = missing
  err.message = err.message .. " Missing: " .. errors.list_keys(missing) .. "."
end)

return M
