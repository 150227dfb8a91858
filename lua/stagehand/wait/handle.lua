-- Handles: each caller's view of a job it started, joined or waits on.
local E = require "stagehand.engine.engine"
local wait = require "stagehand.wait.wait"
local owners = require "stagehand.engine.owners"
local raise = require("stagehand.engine.errors").raise
local settle = require "stagehand.engine.settle"
local sources = require "stagehand.rank.sources"
local F = require "stagehand.engine.fields"
local options = require "stagehand.engine.options"
local signal = require "stagehand.engine.signal"

local ORCH, STATE, OUT, ID, LABEL, KEY, H = F.ORCH, F.STATE, F.OUT, F.ID, F.LABEL, F.KEY, F.H
local TOLD = F.TOLD

---@class stagehand.Handle
---@field id integer     id of the job it follows
---@field label string
---@field key string?
local Handle = settle.extend({})
Handle.__handle = true

-- A Handle still following its job reads its end from the job (_st, _v);
-- only one withdrawn early (cancel) holds its own.
local FROM_JOB = { id = ID, label = LABEL, key = KEY, _st = STATE, _v = OUT }

local HandleMT = {
  __name = "stagehand.Handle",
  __index = function(h, k)
    local m = Handle[k]
    if m ~= nil then return m end
    local f = FROM_JOB[k]
    if f then
      local v = h[1][f]
      if v == false or v == TOLD then return nil end -- running (no state yet), or no key
      return v
    end
    return nil
  end,
  -- A field new to this Handle (_w1, _ls, _unsig, _own, ...): its running
  -- job now has someone to tell when it ends (fields.TOLD).
  __newindex = function(h, k, v)
    rawset(h, k, v)
    local job = rawget(h, 1)
    if not job[STATE] then job[OUT] = TOLD end
  end,
  __tostring = function(h)
    return "stagehand.Handle(" .. h[1][LABEL] .. ", " .. h:state() .. ")"
  end,
}

local function bad_self(method, got) options.bad_self(method, "a Handle", got, 3) end

--- "running", "done", "failed", "stalled" or "cancelled", as this caller sees it.
---@return string
function Handle:state()
  if getmetatable(self) ~= HandleMT then bad_self("h:state", self) end
  -- (A game polling this hears the end: its failure is not also logged.)
  if not rawget(self, "_seen") then self._seen = true end
  return self._st or "running"
end

--- Inside a job: suspends until the end; values on done, raises the Error otherwise.
---@return any ...
function Handle:await()
  if getmetatable(self) ~= HandleMT then bad_self("h:await", self) end
  local job = E.current
  if job == nil then
    raise("h:await() must be called inside a job (" .. self[1][LABEL]
      .. "); outside jobs use orch:wait(h, timeout_ms)", 2)
  end
  return wait.await(job, self)
end

--- Withdraws this caller, as if its signal aborted. The job itself is
--- cancelled when its last caller leaves. Returns false if this Handle had
--- already ended.
---@param reason any
---@return boolean
function Handle:cancel(reason)
  if getmetatable(self) ~= HandleMT then bad_self("h:cancel", self) end
  if self._st then return false end
  local relay = rawget(self, "_relay")
  if relay then return relay:withdraw(self, reason) end
  local job = self[1]
  if job[H] == self and rawget(job, H + 1) == nil then
    -- Its last caller: the job ends first, and this Handle reads its end.
    -- (Taking the caller's source out first left the job with none for a
    -- moment, which counts as the default rank, and that was passed down
    -- everything it awaits and back: cancelling each link of a chain of
    -- 10,000 awaits from the top walked the whole chain twice.)
    E.cancel(job, reason)
    return true
  end
  sources.remove_caller(job[ORCH], job, self)
  settle.settle(self, "cancelled", E.errors.cancelled(job[LABEL], reason))
  if job[H] == nil and not job[STATE] then E.cancel(job, reason) end
  return true
end

function Handle:_log() return self[1][ORCH].log end
function Handle:_describe()
  local job = self[1]
  local s = "job " .. job[ID] .. " '" .. job[LABEL] .. "'"
  if job[KEY] then s = s .. " (key " .. job[KEY] .. ")" end
  return s
end
function Handle:_follows()
  if self._st then return nil end
  local relay = rawget(self, "_relay")
  local job = relay and relay:job() or self[1]
  if job[STATE] then return nil end
  return job
end
function Handle:_settled()
  local sub = rawget(self, "_unsig") -- (set by follow_signal, or absent)
  if sub then
    self._unsig = nil
    signal.unwatch(sub)
  end
  owners.settled(self) -- (a caller a job made leaves its owner's set)
end

local M = { Handle = Handle, HandleMT = HandleMT }

-- Withdraws the caller when `sig` aborts, until the Handle ends.
local function cancel(h, reason) h:cancel(reason) end
function M.follow_signal(h, sig)
  h._unsig = signal.watch(sig, cancel, h)
end

--- Binds a caller's Handle to its signal (if any): an already aborted one
--- withdraws it at once (and returns true), a live one when it aborts.
function M.bind_signal(h, sig)
  if not sig then return false end
  if sig.aborted then
    h:cancel(sig.reason)
    return true
  end
  M.follow_signal(h, sig)
  return false
end

-- A Handle is {job, priority source, its index in the job} in its array
-- part: a small table LuaJIT makes in one allocation, with no hash part,
-- and one is made per caller. Its index lets a caller leave a job shared
-- by 10,000 in O(1) (sources.remove_caller); a new Handle is its job's
-- first caller until placed elsewhere. Fields it gains later (_w1, _seen,
-- ...) are rare. Read the source with rawget(h, 2): a Handle's __index is
-- a function, and a missing [2] would call it.
-- A number given as a priority is kept boxed, one box per number while
-- some caller holds it ({n}, interned in o.num_box, weak): priority.lua
-- files sources by identity, and a box the collector takes gives its
-- group back, as a function does, where a bare number would hold one for
-- good (a game ranking by distance passes a new number per request).
local function box(o, n)
  local b = o.num_box[n]
  if not b then
    b = { n }
    o.num_box[n] = b
  end
  return b
end
M.box = box

function M.new(job, prio)
  if type(prio) == "number" then prio = box(job[ORCH], prio) end
  return setmetatable({ job, prio, H }, HandleMT)
end

function M.is_handle(v) return getmetatable(v) == HandleMT end

--- Hands a running Handle over to `relay`, which now ends it (with
--- settle.settle) and answers for it: relay:job() is the job it follows
--- now, for whoever awaits it, and relay:withdraw(h, reason) is its
--- h:cancel. It stops being its job's caller first (newest.lua's older
--- calls, which follow whichever run is newest).
function M.relay(h, relay)
  rawset(h, "_st", false) -- (its own state from now on, not its job's)
  rawset(h, "_v", false) -- (its place made now: settling it needs no memory)
  rawset(h, "_relay", relay)
end

--- Ends a relayed Handle's relay: it is an ordinary settled Handle.
function M.unrelay(h) rawset(h, "_relay", nil) end

return M
