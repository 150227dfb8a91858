-- Signals and controllers: how a caller withdraws. A signal aborts once, with
-- a reason, and tells its on_abort handlers in the order they came.
local errors = require "stagehand.engine.errors"
local logm = require "stagehand.engine.log"
local options = require "stagehand.engine.options"
local settle = require "stagehand.engine.settle"

local M = {}

---@class stagehand.Signal
---@field aborted boolean
---@field reason any
local Signal = {}
Signal.__index = Signal
M.Signal = Signal

function M.is_signal(v) return getmetatable(v) == Signal end

local function new_signal(log)
  return setmetatable({ aborted = false, _log = log }, Signal)
end
M.new_signal = new_signal

--- Calls fn(reason) when the signal aborts (at once if it has). Returns a
--- function that unsubscribes.
---@param fn fun(reason: any)
---@return fun()
function Signal:on_abort(fn)
  if getmetatable(self) ~= Signal then options.bad_self("signal:on_abort", "a Signal", self, 2) end
  local mt = type(fn) == "table" and getmetatable(fn)
  if type(fn) ~= "function" and not (type(mt) == "table" and mt.__call) then
    error("bad argument 'fn' to on_abort: expected a function, got " .. type(fn), 2)
  end
  if self.aborted then
    logm.guard(self._log, "an on_abort handler", fn, self.reason)
    return function() end
  end
  local entry = M.watch(self, fn)
  return function() M.unwatch(entry) end
end

-- orch:timeout's signals, each to its orchestrator (weak both ways: a
-- signal the game keeps does not keep a dropped orchestrator alive).
local timed = setmetatable({}, { __mode = "kv" })

--- `sig` aborts at a time of `o`'s clock (orch:timeout).
function M.timed_by(sig, o) timed[sig] = o end

-- The subscription under on_abort, for stagehand's own use: fn(arg, reason)
-- runs when `sig` aborts (fn(reason) when arg is nil). No closure is made:
-- LuaJIT cannot compile making one, and every caller with a signal of its
-- own subscribes its Handle. Returns the entry that M.unwatch takes. `sig`
-- must not have aborted yet.
function M.watch(sig, fn, arg)
  local ls = sig._ls
  if not ls then
    ls = {}
    sig._ls = ls
    -- A timeout nobody listened to kept no host awake (timeouts.next_due):
    -- now that one listens, its orchestrator's driver must wake for it.
    local o = timed[sig]
    if o ~= nil and not o.stepping then o.driver.reschedule(o) end
  end
  local entry = { fn, arg, sig }
  ls[#ls + 1] = entry
  return entry
end

-- Ends a subscription made by M.watch; a second call does nothing.
function M.unwatch(entry)
  -- Left in the list, marked: one signal shared by a level's 10,000 loads
  -- sees each unsubscribe, and searching the list for each was quadratic.
  -- Marked entries are dropped once they are half the list.
  if entry[1] == nil then return end
  entry[1] = nil
  local sig = entry[3]
  local live = sig._ls
  if not live then return end
  local dead = (sig._dead or 0) + 1
  if dead * 2 > #live then
    local kept = {}
    for i = 1, #live do
      if live[i][1] ~= nil then kept[#kept + 1] = live[i] end
    end
    -- (none left: nil, so a timeout nobody listens to any more keeps no
    -- host awake: timeouts.next_due)
    sig._ls, dead = kept[1] ~= nil and kept or nil, 0
  end
  sig._dead = dead
end

--- Raises the abort reason if the signal has aborted.
function Signal:throw_if_aborted()
  if getmetatable(self) ~= Signal then options.bad_self("signal:throw_if_aborted", "a Signal", self, 2) end
  if self.aborted then error(self.reason, 0) end
end

-- Tells the handlers of an aborted signal that are not told yet. Each
-- leaves the list once told, not before (marked as unwatch marks it): an
-- abort that memory running out cuts short sits on settle's stack, and the
-- next step's settle.recover tells the rest. (The handlers run guarded, so
-- only the guard's own call can raise.)
local function tell_handlers(sig)
  local reason = sig.reason
  local ls = sig._ls
  if ls then
    for i = 1, #ls do
      local entry = ls[i]
      local fn, arg = entry[1], entry[2]
      if fn == nil then -- luacheck: ignore 542 (unsubscribed: nothing to call)
      elseif arg == nil then
        logm.guard(sig._log, "an on_abort handler", fn, reason)
      else
        logm.guard(sig._log, "an on_abort handler", fn, arg, reason)
      end
      entry[1] = nil
    end
  end
  sig._ls = nil
end
settle.on_rest(Signal, tell_handlers)

-- Aborts `sig` with `reason`; returns false if it had already aborted.
function M.abort(sig, reason)
  if sig.aborted then return false end
  sig.aborted, sig.reason = true, reason
  local level = settle.entered(sig)
  tell_handlers(sig)
  settle.left(level)
  return true
end

---@class stagehand.Controller
---@field signal stagehand.Signal
local Controller = {}
Controller.__index = Controller

--- Aborts the controller's signal. `reason` defaults to a `cancelled` Error.
---@param reason any?
function Controller:abort(reason)
  if getmetatable(self) ~= Controller then options.bad_self("ctl:abort", "a controller", self, 2) end
  if reason == nil then reason = errors.new("cancelled", "signal", "the signal was aborted") end
  return M.abort(self.signal, reason)
end

function M.controller()
  return setmetatable({ signal = new_signal() }, Controller)
end

return M
