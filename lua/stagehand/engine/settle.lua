-- The settle-able base every awaitable here is made of (Future, Handle, the
-- combinators, the boxes behind job:call). It settles once, to a state and
-- its values (`done`) or an error (anything else), and tells its listeners:
-- functions subscribed with on_end, and parked jobs, which it wakes.
--
-- The first listener sits in _w1 (most awaitables have one, and then no
-- table is made); later ones go in _ls, a list in the order they came, with
-- _li mapping each to its place. One that stops waiting (cancelled,
-- stalled) is marked false where it was, in O(1) however many others wait,
-- and the list is compacted once half of it is marked; so all are told in
-- the order they came, with nothing to sort. A listener is a job, a
-- subscription table {on_end = fn}, or one of stagehand's own {on_part =
-- fn, ...}: fn(entry, st, v) with v packed or the error, unguarded, and no
-- closure made per listener (LuaJIT cannot compile making one; a group of
-- 10,000 parts listens to each).
local logm = require "stagehand.engine.log"
local raise = require("stagehand.engine.errors").raise
local options = require "stagehand.engine.options"
local each = require("stagehand.core.compat").each
local F = require "stagehand.engine.fields"
local is_job, STATE, H = F.is_job, F.STATE, F.H

local unpack = unpack or table.unpack

local M = {}

-- The engine's, registered with on_wake and on_changed: wake(job, from)
-- queues a parked job's continuation; changed(job, group, freed, left)
-- says a part of the group `job` is parked on settled and the group did
-- not (combine.lua).
local wake = function() end
local changed = function() end
function M.on_wake(fn) local was = wake; wake = fn; return was end -- (the one it replaced)
function M.on_changed(fn) changed = fn end
function M.changed(job, g, freed, left) return changed(job, g, freed, left) end
function M.wake(job, from) return wake(job, from) end
-- Counts settles, in order: every fire below, and each partial settle of
-- a group (combine.lua: M.stamp). Everything one settle tells happens at
-- one moment (engine.settle_time). Read it; only this module writes it.
M.seq = 0

--- A new stamp in the count of settles (a group's part settled).
function M.stamp()
  local s = M.seq + 1
  M.seq = s
  return s
end

-- _w1 once its listener left: later listeners still come after it.
local VACANT = setmetatable({}, { __name = "stagehand.VACANT" })

-- Fires cut short. Memory can run out while a settle tells its listeners
-- (a job's wake grows the run queue, a group's count makes a table), and
-- the error leaves the rest untold: a job awaiting a Handle, whose clock
-- is paused while the job it awaits runs, would wait for good. So each
-- fire under way sits on `firing` (made at load, 128 deep: pushing needs
-- no memory), its listeners leave only once told, and a fire that an
-- error cut short is set aside (`unfinished`) when next seen: by the next
-- step (M.recover), or by the game's function it ran inside. M.recover
-- tells what is left: a job again (a wake of one woken already does
-- nothing), a group by counting its parts again (M.on_recount). M.broken
-- counts the errors that may have left something undone, these and the
-- others engine/mend.lua lists: after each, every orchestrator looks its
-- own jobs over once. `base`: the depth under way when a game's function
-- was called (it may step).
local firing = {}
for i = 1, 128 do firing[i] = false end
local depth, base = 0, 0
local unfinished = {}
M.broken = 0
local recount = function() end
function M.on_recount(fn) recount = fn end
function M.recount(g) return recount(g) end
--- Counts an error that may have left something undone (a step's).
function M.note_broken() M.broken = M.broken + 1 end
logm.on_out_of_memory(M.note_broken)
--- Whether a fire was cut short (outside any: read by a step's start).
function M.cut_short() return depth ~= base or unfinished[1] ~= nil end

--- An end under way (engine.lua's, until its Handles are told) sits
--- on the same stack: one cut short has its orchestrator look its jobs
--- over (the job is found waiting on nothing, and failed). Returns the
--- level for M.left.
function M.entered(job)
  local d = depth + 1
  firing[d] = job
  depth = d
  return d
end
function M.left(d)
  firing[d] = false
  depth = d - 1
end

local function set_aside(from)
  if depth <= from then return end
  for i = from + 1, depth do
    local o = firing[i]
    firing[i] = false
    if o then unfinished[#unfinished + 1] = o end
  end
  depth = from
  M.broken = M.broken + 1
end

-- Listener fields are read raw: a Handle's __index is a function, and these
-- run for every wait and every end.

--- Adds a listener (a job, or a subscription table {on_end = fn}).
function M.listen(o, entry)
  if not rawget(o, "_w1") then
    o._w1 = entry
    return
  end
  local ls = rawget(o, "_ls")
  local li
  if not ls then
    ls, li = {}, {}
    o._ls, o._li = ls, li
  else
    li = rawget(o, "_li")
    if li[entry] then return end -- (listening already: told once)
  end
  local i = #ls + 1
  ls[i] = entry
  li[entry] = i
end

function M.unlisten(o, entry)
  if rawget(o, "_w1") == entry then
    o._w1 = VACANT
    return
  end
  local li = rawget(o, "_li")
  local i = li and li[entry]
  if not i then return end
  li[entry] = nil
  local ls = rawget(o, "_ls")
  ls[i] = false
  local dead = (rawget(o, "_dead") or 0) + 1
  if dead > 8 and dead * 2 > #ls then
    local kept, n = {}, 0
    for j = 1, #ls do
      local e = ls[j]
      if e then
        n = n + 1
        kept[n] = e
        li[e] = n
      end
    end
    o._ls, dead = kept, 0
  end
  o._dead = dead
end

--- Whether anything listens to `o` now: a parked job, an on_end still
--- subscribed, a group. (A listener that left is VACANT in _w1, false in
--- _ls.)
function M.listened(o)
  local w1 = rawget(o, "_w1")
  if w1 and w1 ~= VACANT then return true end
  local ls = rawget(o, "_ls")
  if ls then
    for i = 1, #ls do
      if ls[i] then return true end
    end
  end
  return false
end

local function tell(o, entry, st, v)
  local fn = rawget(entry, "on_end")
  if fn == nil then
    fn = rawget(entry, "on_part")
    if fn == nil then return wake(entry, o) end
    return fn(entry, st, v)
  end
  -- (A game's function: it may step an orchestrator, whose step must not
  -- take the fires under way here for fires cut short; see M.recover.)
  local was = base
  base = depth
  if st == "done" then
    logm.guard(o:_log(), o, fn, st, unpack(v, 1, v.n or 1))
  else
    logm.guard(o:_log(), o, fn, st, v)
  end
  set_aside(base) -- (fires cut short inside it, whose error it kept)
  base = was
end

--- Settles `o` once: st is "done" with v a packed list, or another state with
--- v the error. Returns false when it had already settled.
function M.settle(o, st, v)
  if o._st then return false end
  o._st, o._v = st, v
  M.fire(o, st, v)
  return true
end

--- Tells o's listeners it settled, for an object whose _st and _v are
--- already readable (stored by settle, or derived, as a Handle's are).
-- Tells each listener still listening to o with teller(o, entry, st, v),
-- then o's own _settled. Each listener leaves once told, not before: a
-- fire that memory running out cuts short leaves the rest listening, for
-- M.recover (whose _settled call does nothing twice what had run).
local function tell_listening(o, st, v, teller)
  local w1 = rawget(o, "_w1")
  if w1 then
    if w1 ~= VACANT then teller(o, w1, st, v) end
    o._w1 = VACANT
  end
  local ls = rawget(o, "_ls")
  if ls then
    for i = 1, #ls do
      local e = ls[i]
      if e then
        teller(o, e, st, v)
        ls[i] = false
      end
    end
    o._ls, o._li = nil, nil
  end
  local settled = o._settled -- (read once: on a Handle each read calls its __index)
  if settled then settled(o) end
end

function M.fire(o, st, v)
  M.seq = M.seq + 1
  local d = depth + 1
  firing[d] = o
  depth = d
  tell_listening(o, st, v, tell)
  firing[d] = false
  depth = d - 1
end

-- What a fire cut short left untold, told now: a group (a part's listener
-- {on_part =, g =}: combine.lua) by counting its parts again; any other
-- listener as a fire tells it.
local function tell_again(o, e, st, v)
  local g = rawget(e, "on_part") and rawget(e, "g")
  if g then return recount(g) end
  return tell(o, e, st, v)
end
local function tell_rest(o) return tell_listening(o, o._st, o._v, tell_again) end

--- At the start of a step (never inside a fire): sets aside the fires cut
--- short, and tells their listeners what is left. An end cut short (a
--- job) before its state was written needs nothing here: the look over
--- its jobs that M.broken asks of its orchestrator finds it; one cut short
--- after has end_rest(job) finish what else its end does (engine/mend.lua),
--- then each of its Handles tell what is left. Anything else on the stack
--- whose metatable was given a function by M.on_rest (a signal's abort)
--- has that function finish it. Returns M.broken.
local rests = {}
function M.on_rest(mt, fn) rests[mt] = fn end
function M.recover(end_rest)
  set_aside(base)
  local u = unfinished
  while #u > 0 do
    local o = u[#u]
    local rest = rests[getmetatable(o)]
    if rest then
      rest(o)
    elseif not is_job(o) then
      tell_rest(o)
    elseif o[STATE] then
      end_rest(o)
      for i = H, #o do tell_rest(o[i]) end
    end
    u[#u] = nil
  end
  return M.broken
end

--- The common methods: state, result, on_end. `Class` gets them unless it
--- defines its own.
local Base = {}

function Base:_log() return nil end
function Base:_describe() return "an awaitable" end
function Base:_follows() return nil end

--- Never waits: the state, then the values (done) or the error.
---@return string state
---@return any ...
function Base:result()
  if type(self) ~= "table" or not self.__settle then
    options.bad_self("h:result", "a Handle, Future or awaitable", self, 2)
  end
  self._seen = true
  local st = self._st
  if not st then return self:state() end
  if st == "done" then
    local v = self._v
    return st, unpack(v, 1, v.n or 1)
  end
  return st, self._v
end

local function callable(v)
  if type(v) == "function" then return true end
  local mt = getmetatable(v)
  return type(mt) == "table" and mt.__call ~= nil
end

--- Calls fn(state, ...) once it ends (at once if it has); returns an unsubscribe.
---@param fn fun(state: string, ...)
---@return fun()
function Base:on_end(fn)
  if type(self) ~= "table" or not self.__settle then
    options.bad_self("h:on_end", "a Handle, Future or awaitable", self, 2)
  end
  if not callable(fn) then
    raise("bad argument 'fn' to on_end: expected a function, got " .. type(fn), 2)
  end
  if self._st then
    self._seen = true -- (heard now; a subscription that leaves before the end hears nothing)
    tell(self, { on_end = fn }, self._st, self._v)
    return function() end
  end
  local entry = { on_end = fn }
  M.listen(self, entry)
  return function() M.unlisten(self, entry) end
end

-- What marks this copy's settle-ables (Class.__settle). A game that
-- clears package.loaded and requires stagehand again has two copies, each
-- waking only its own jobs: an awaitable of the other copy is awaited
-- through its on_end like any foreign awaitable (job.lua: as_settle).
local MARK = setmetatable({}, { __name = "stagehand.settle-able" })
M.MARK = MARK

function M.extend(Class)
  for k, v in each, Base do
    if Class[k] == nil then Class[k] = v end
  end
  Class.__index = Class.__index or Class
  Class.__settle = MARK
  return Class
end

--- A plain settle-able: the box behind job:call and generic awaitables.
local Box = M.extend({})
function Box:state() return self._st or "pending" end
function Box:_describe() return self.what or "an awaitable" end
function M.box(what) return setmetatable({ what = what }, Box) end
M.Box = Box

-- Values as a list with their count n; a pack of one value leaves n out
-- (readers take `v.n or 1`), so it needs no hash part. The usual counts get
-- their own constructors: `{ ... }` (TSETM) is a bytecode LuaJIT does not
-- compile, and packing runs once per job and per resolve. Packs are never
-- written to, so values may share one.
local EMPTY = { n = 0 }
function M.pack(...)
  local n = select("#", ...)
  if n == 0 then return EMPTY end
  if n == 1 then return { (...) } end
  if n == 2 then
    local a, b = ...
    return { n = 2, a, b }
  end
  return { n = n, ... }
end

return M
