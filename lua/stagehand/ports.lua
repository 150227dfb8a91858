-- Ports and round barriers on the game's side. Both are C objects
-- (csrc/sh_port.c, csrc/sh_rounds.c) shared with worker threads, whose
-- methods block a worker; here, in the state that loads stagehand, a wait
-- made in a job suspends the job instead: the job awaits a box that a
-- step fills once the port has a value or the round is complete (each
-- orchestrator's waits are one of its outside sources: outside.lua).
local E = require "stagehand.engine"
local F = require "stagehand.fields"
local native = require "stagehand.threads_native"
local outside = require "stagehand.outside"
local settle = require "stagehand.settle"
local wait = require "stagehand.wait"
local options = require "stagehand.options"

local ORCH = F.ORCH
local PORT_MT = getmetatable(native.port())
local ROUNDS_MT = getmetatable(native.rounds(1))

local M = {}

-- orch -> its source: the waits its jobs make, oldest first.
local sources = setmetatable({}, { __mode = "k" })

local Waits = {}
Waits.__index = Waits

local function waits_of(o)
  local w = sources[o]
  if not w then
    w = setmetatable({ o = o, list = {} }, Waits)
    sources[o] = w
    outside.add(o, w)
  end
  return w
end

local function unwatch(box)
  box.obj:_unwatch(outside.notifier(box.owner.o))
end

local function drop(box)
  local list = box.owner.list
  for i = 1, #list do
    if list[i] == box then
      table.remove(list, i)
      break
    end
  end
  unwatch(box)
end

-- A job that stops waiting before its answer (cancelled, stalled) leaves
-- the list; one waiting on a round has arrived, and leaves it too.
local function abandon(box)
  if box._st then return end
  drop(box)
  if box.round then box.obj:_leave(box.round) end
  box._st = "cancelled" -- (never told to anyone: its job has gone)
end

function Waits:collect()
  local list = self.list
  local i = 1
  while i <= #list do
    local box = list[i]
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
      table.remove(list, i)
      unwatch(box)
      settle.settle(box, "done", settle.pack(v))
    else
      i = i + 1
    end
  end
end

function Waits:outside_pending() return self.list[1] ~= nil end
function Waits:waiting() return nil end

local function park(job, obj, what, round, out)
  local o = job[ORCH]
  local box = settle.box(what)
  box.obj, box.round, box.out, box.owner = obj, round, out, waits_of(o)
  box._abandon = abandon
  obj:_watch(outside.notifier(o))
  local list = box.owner.list
  list[#list + 1] = box
  if not o.stepping then o.driver.reschedule(o) end
  return wait.await(job, box)
end

---------------------------------------------------------------------------
-- Ports.

local port_methods = native.port_methods
local c_receive = port_methods.receive

--- A port: a channel between threads, in either direction.
---@return userdata
function M.port() return native.port() end

-- In a job: suspends the job until a value comes (a value arriving is
-- progress) or the port closes (nil). Elsewhere in this state it would
-- block the game: it raises, pointing to receive_within.
function port_methods.receive(p)
  local job = E.in_job()
  if not job then
    if getmetatable(p) ~= PORT_MT then
      return c_receive(p) -- (raises naming what p is)
    end
    error("port:receive cannot wait on the main thread outside a job (it would block the game):"
      .. " use port:receive_within(ms), or receive inside a job", 2)
  end
  local ok, v = p:try_receive()
  if ok then
    job:progress()
    return v
  end
  if v == "closed" then return nil end
  return park(job, p, "a value on a port")
end

---------------------------------------------------------------------------
-- Round barriers.

local rounds_methods = native.rounds_methods
local blocking = {
  arrive = rounds_methods.arrive,
  sum = rounds_methods.sum,
  min = rounds_methods.min,
  max = rounds_methods.max,
}

--- Round barriers: `participants` threads meet in numbered rounds, each
--- bringing `share_len` numbers to sum, min or max.
---@param participants integer
---@param share_len integer?
---@return userdata
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

local function round_wait(op)
  local c_fn = blocking[op]
  return function(b, round, count, index, share, out)
    local job = E.in_job()
    if not job then
      if getmetatable(b) ~= ROUNDS_MT then return c_fn(b, round, count, index, share, out) end
      error("b:" .. op .. " cannot wait on the main thread outside a job (it would block the game):"
        .. " wait inside a job, or on a worker", 2)
    end
    if not b:_begin(round, count, index, share, out, op) then return false end
    local st = b:_poll(round, out)
    if st ~= "wait" then
      b:_leave(round)
      job:progress()
      return st == "done"
    end
    return park(job, b, "round " .. tostring(round) .. " of a round barrier", round, out)
  end
end
for op in require("stagehand.compat").each, blocking do rounds_methods[op] = round_wait(op) end

return M
