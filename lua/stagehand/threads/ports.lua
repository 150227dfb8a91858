-- Ports and round barriers on the game's side. Both are C objects
-- (csrc/core/sh_port.c, sh_rounds.c) shared with worker threads, whose
-- methods block a worker; here, in the state that loads stagehand, a wait
-- made in a job suspends the job instead: the job awaits a box that a
-- step fills once the port has a value or the round is complete (each
-- orchestrator's waits are one of its outside sources: outside.lua).
local E = require "stagehand.engine.engine"
local F = require "stagehand.engine.fields"
local native = require "stagehand.core.threads_native"
local outside = require "stagehand.threads.outside"
local settle = require "stagehand.engine.settle"
local wait = require "stagehand.wait.wait"
local options = require "stagehand.engine.options"
local raise = require("stagehand.engine.errors").raise
local each = require("stagehand.core.compat").each

local ORCH = F.ORCH
local PORT_MT = getmetatable(native.port())
local ROUNDS_MT = getmetatable(native.rounds(1))

local M = {}

-- An orchestrator's source (its field port_waits: see outside.lua on why
-- not a table keyed by it): the waits its jobs make, oldest first. A wait
-- that leaves early is marked false where it was (the list is compacted
-- once half of it is marked), and a step polls the waits only when one of
-- their ports or rounds has signalled the orchestrator's notifier since
-- the last poll, or a wait was made since: so a step costs the same with
-- 20,000 jobs waiting on ports as with none, and 20,000 leaving or
-- answered at once cost 20,000 times one. (Each was a walk of the list,
-- and every step polled every port: 8 ms a step with 20,000 waiting.)

local Waits = {}
Waits.__index = Waits

local gen = native.notifier_gen

local function waits_of(o)
  local w = rawget(o, "port_waits")
  if not w then
    w = setmetatable({ o = o, list = {}, live = 0, dead = 0, seen = -1, dirty = false }, Waits)
    o.port_waits = w
    outside.add(o, w)
  end
  return w
end

local function unwatch(box)
  box.obj:_unwatch(outside.notifier(box.owner.o))
end

-- Drops the marked waits, keeping the order of the rest.
local function compact(w)
  local list, n = w.list, 0
  for i = 1, #list do
    local box = list[i]
    if box then
      n = n + 1
      list[n], box.at = box, n
    end
  end
  for i = #list, n + 1, -1 do list[i] = nil end
  w.dead = 0
end

local function drop(box)
  local w = box.owner
  if w.list[box.at] == box then
    w.list[box.at] = false
    w.live, w.dead = w.live - 1, w.dead + 1
    if w.dead * 2 > #w.list then compact(w) end
  end
  unwatch(box)
end

-- A job that stops waiting before its answer (cancelled, stalled) leaves
-- the list; one waiting on a round has arrived, and leaves it too.
local function abandon(box)
  if box._st or box.answered then return end -- (answered: it has left, and its round too)
  drop(box)
  if box.round then box.obj:_leave(box.round) end
  box._st = "cancelled" -- (never told to anyone: its job has gone)
end

-- Takes each wait's answer, if it has come, oldest first, then tells the
-- answered in that order (what they wake may make new waits, which join
-- the list's end). An answer is kept on its wait (box.value), which leaves
-- the list only as it is told: one that memory running out kept from
-- being told is told by the next collect (dirty stays set until then).
function Waits:collect()
  local n = gen(outside.notifier(self.o))
  if n == self.seen and not self.dirty then return end
  self.seen, self.dirty = n, true -- (before polling: what comes meanwhile signals again)
  local list, found = self.list, false
  for i = 1, #list do
    local box = list[i]
    if box and box.answered then
      found = true
    elseif box then
      local done, v = false, nil
      if box.round then
        local st = box.obj:_poll(box.round, box.out)
        if st ~= "wait" then
          box.obj:_leave(box.round)
          done, v = true, st == "done"
        end
      else
        local ok, got = box.obj:try_receive()
        if ok then
          done, v = true, got
        elseif got == "closed" then
          done = true
        end
      end
      if done then
        box.answered, box.value = true, v
        found = true
        unwatch(box)
      end
    end
  end
  if found then
    for i = 1, #list do
      local box = list[i]
      if box and box.answered then
        -- (told before it leaves the list: a settle that memory cut short
        -- before its state was written leaves it to the next collect,
        -- and one cut short while it told its job, to the next step)
        if not box._st then settle.settle(box, "done", settle.pack(box.value)) end
        list[i], box.value = false, false
        self.live, self.dead = self.live - 1, self.dead + 1
      end
    end
    compact(self)
    -- (counted again: a finalizer the walk's allocations ran may have
    -- cancelled a job that waits here, marking its wait)
    local live = 0
    for i = 1, #list do
      if list[i] then live = live + 1 end
    end
    self.live, self.dead = live, 0
  end
  self.dirty = false
end

function Waits:outside_pending() return self.live > 0 end
-- (a wait made since the last look: what came before its watch rang no bell)
function Waits:ready() return self.dirty end
function Waits:waiting() return nil end

local function park(job, obj, what, round, out)
  local o = job[ORCH]
  local box = settle.box(what)
  box.obj, box.round, box.out, box.owner = obj, round, out, waits_of(o)
  box._abandon = abandon
  box.answered, box.value = false, false -- (their places made now: collect needs no memory for them)
  obj:_watch(outside.notifier(o))
  local w = box.owner
  local list = w.list
  box.at = #list + 1
  list[box.at] = box
  w.live, w.dirty = w.live + 1, true -- (an answer that came before the watch: the next step looks)
  if not o.stepping then o.driver.reschedule(o) end
  return wait.await(job, box)
end

---------------------------------------------------------------------------
-- Ports.

local port_methods = native.port_methods
local c_port = {} -- (the C methods; a worker's state has only these)
for k, v in each, port_methods do c_port[k] = v end

--- A port: a channel between threads, in either direction. `name`
--- (optional) names it in the log, where a worker waiting on it is named.
---@param name string?
---@return stagehand.Port
function M.port(name)
  if name ~= nil and type(name) ~= "string" then options.fail("stagehand.port", "name", "a string or nil", name) end
  return native.port(name)
end

-- The methods a port has in the game's state: the C ones (called by tail
-- calls, so an error names the game's line), and receive, which suspends a
-- job instead of blocking.

---@class stagehand.Port
local Port = {}

local function check_port(self, method)
  if getmetatable(self) ~= PORT_MT then
    options.bad_self("port:" .. method, "a port (stagehand.port())", self, 3)
  end
end

local function check_ms(ms, method)
  if type(ms) ~= "number" or ms ~= ms or ms < 0 then options.fail("port:" .. method, "ms", "a number >= 0", ms, 3) end
end

local function check_fn(fn, method)
  if type(fn) ~= "function" then options.fail("port:" .. method, "fn", "a function", fn, 3) end
end

--- Copies `v` into the port, from any thread. False once the port is
--- closed; posting nil raises (nil is what a closed port answers).
---@param v any plain data, ports and round barriers
---@return boolean posted
function Port:post(v)
  check_port(self, "post")
  local posted = c_port._post(self, v) -- (not a tail call: its errors point one level up, at the caller)
  return posted
end

--- In a job: suspends the job until a value comes (a value arriving is
--- progress) and returns it, or nil once the port is closed. On the main
--- thread outside a job it raises (it would freeze the game): use
--- receive_within. In a worker it blocks, and returns nil once the worker
--- is told to stop.
---@return any
function Port:receive()
  check_port(self, "receive")
  local job = E.in_job()
  if not job then
    error("port:receive cannot wait on the main thread outside a job (it would block the game):"
      .. " use port:receive_within(ms), or receive inside a job", 2)
  end
  local ok, v = self:try_receive()
  if ok then
    job:progress()
    return v
  end
  if v == "closed" then return nil end
  return park(job, self, "a value on a port")
end

--- Waits at most `ms` for a value (blocking: the main thread or a worker);
--- returns it, or nil.
---@param ms number
---@return any
function Port:receive_within(ms)
  check_port(self, "receive_within")
  check_ms(ms, "receive_within")
  return c_port.receive_within(self, ms)
end

--- Without waiting: true and the oldest value, or false and "empty" or
--- "closed".
---@return boolean
---@return any
function Port:try_receive()
  check_port(self, "try_receive")
  return c_port.try_receive(self)
end

--- Calls fn(v) for every value queued now, without waiting; returns how many.
---@param fn fun(v: any)
---@return integer
function Port:drain(fn)
  check_port(self, "drain")
  check_fn(fn, "drain")
  return c_port.drain(self, fn)
end

--- As drain, but stops after `ms` (at least one value when any is queued).
---@param fn fun(v: any)
---@param ms number
---@return integer
function Port:drain_for(fn, ms)
  check_port(self, "drain_for")
  check_fn(fn, "drain_for")
  check_ms(ms, "drain_for")
  return c_port.drain_for(self, fn, ms)
end

--- Closes the port: what is queued is dropped, posts return false and
--- receives nil.
function Port:close()
  check_port(self, "close")
  return c_port.close(self)
end

--- Whether the port is closed.
---@return boolean
function Port:closed()
  check_port(self, "closed")
  return c_port.closed(self)
end

--- How many values are queued.
---@return integer
function Port:count()
  check_port(self, "count")
  return c_port.count(self)
end

for k, v in each, Port do port_methods[k] = v end

---------------------------------------------------------------------------
-- Round barriers.

local rounds_methods = native.rounds_methods
local c_abort, c_aborted = rounds_methods.abort, rounds_methods.aborted

--- Round barriers: `participants` threads meet in numbered rounds, each
--- bringing `share_len` numbers to sum, min or max.
---@param participants integer
---@param share_len integer?
---@return stagehand.Rounds
function M.rounds(participants, share_len)
  if type(participants) ~= "number" or participants < 1 or participants > 4096 or participants % 1 ~= 0 then
    options.fail("stagehand.rounds", "participants", "an integer from 1 to 4096", participants)
  end
  if share_len ~= nil and (type(share_len) ~= "number" or share_len < 0 or share_len > 65536
      or share_len % 1 ~= 0) then
    options.fail("stagehand.rounds", "share_len", "an integer from 0 to 65536", share_len)
  end
  return native.rounds(participants, share_len or 0)
end

-- In a job a wait suspends the job; in a worker (the C method) it blocks;
-- on the main thread outside a job it raises. (Called from the methods
-- below, not as a tail call: the levels of its errors count that.)
local function round_wait(b, op, round, count, index, share, out)
  if getmetatable(b) ~= ROUNDS_MT then
    options.bad_self("b:" .. op, "a round barrier (stagehand.rounds())", b, 4)
  end
  local job = E.in_job()
  if not job then
    error("b:" .. op .. " cannot wait on the main thread outside a job (it would block the game):"
      .. " wait inside a job, or on a worker", 3)
  end
  local ok, begun = pcall(b._begin, b, round, count, index, share, out, op)
  if not ok then raise(tostring(begun), 3) end -- (a bad argument: named at the game's line)
  if not begun then return false end
  local st = b:_poll(round, out)
  if st ~= "wait" then
    b:_leave(round)
    job:progress()
    return st == "done"
  end
  return park(job, b, "round " .. tostring(round) .. " of a round barrier", round, out)
end

---@class stagehand.Rounds
local Rounds = {}

--- Waits until `count` participants arrived at `round`. True once it is
--- complete; false when aborted, or when its worker is told to stop.
---@param round number
---@param count integer
---@return boolean
function Rounds:arrive(round, count)
  local ok = round_wait(self, "arrive", round, count) -- (not a tail call: errors name the caller's line)
  return ok
end

--- Brings `share` (share_len numbers) as participant `index` and waits for
--- `count` participants; `out` receives every share summed in index order,
--- the same bits for every participant.
---@param round number
---@param count integer
---@param index integer
---@param share number[]
---@param out number[]
---@return boolean
function Rounds:sum(round, count, index, share, out)
  local ok = round_wait(self, "sum", round, count, index, share, out)
  return ok
end

--- As sum, with the smallest of each number.
---@param round number
---@param count integer
---@param index integer
---@param share number[]
---@param out number[]
---@return boolean
function Rounds:min(round, count, index, share, out)
  local ok = round_wait(self, "min", round, count, index, share, out)
  return ok
end

--- As sum, with the largest of each number.
---@param round number
---@param count integer
---@param index integer
---@param share number[]
---@param out number[]
---@return boolean
function Rounds:max(round, count, index, share, out)
  local ok = round_wait(self, "max", round, count, index, share, out)
  return ok
end

--- Every wait, now and later, returns false.
function Rounds:abort()
  if getmetatable(self) ~= ROUNDS_MT then options.bad_self("b:abort", "a round barrier", self, 2) end
  return c_abort(self)
end

--- Whether abort was called.
---@return boolean
function Rounds:aborted()
  if getmetatable(self) ~= ROUNDS_MT then options.bad_self("b:aborted", "a round barrier", self, 2) end
  return c_aborted(self)
end

for k, v in each, Rounds do rounds_methods[k] = v end

return M
