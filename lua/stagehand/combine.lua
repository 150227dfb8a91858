-- Awaitables made of others: all, all_settled, abortable.
local settle = require "stagehand.settle"
local signal = require "stagehand.signal"
local jobm = require "stagehand.job"
local F = require "stagehand.fields"
local is_job, STATE = F.is_job, F.STATE
local nest = require "stagehand.nest"

local M = {}

---@class stagehand.Group
---@field what string what it gathers ("all of 3", "abortable ...")
local Group = settle.extend({})

--- "pending", "done", or the state of the part that ended it otherwise
--- ("failed", "cancelled", "stalled"). Also `g:result()` and `g:on_end(fn)`,
--- as on a Future.
---@return string
function Group:state() return self._st or "pending" end
function Group:_describe() return self.what end
-- While each part still running follows a job, so does the group: a job
-- awaiting it then stalls only if one of those jobs does. The jobs are
-- listed depth first, in part order. (With a stack of its own, not by
-- recursion: groups nest as deep as a game builds them, and the usual
-- way to gather as loads are made, acc = stagehand.all({acc, load}),
-- nests one level per load.)
--
-- With `loose`, the jobs among the parts still running, whatever else is
-- open beside them (a Future, a job:call), and whether there is nothing
-- else (true) or there is (false); nil when no part follows a job. A job
-- awaiting the group awaits those jobs: its rank reaches them, and a wait
-- that closes a cycle through them raises. Its own clock runs while the
-- rest is open.
local gs, is = {}, {}
function Group:_follows(loose)
  if self._st then return nil end
  local whole = true
  local list, n = {}, 0
  local top = 1
  gs[1], is[1] = self, 1
  while top > 0 do
    local parts, i = gs[top].parts, is[top]
    local p = parts[i]
    if p == nil then
      gs[top] = false
      top = top - 1
    else
      is[top] = i + 1
      if p._st then
        -- (ended: follows nothing, and holds nothing up)
      elseif getmetatable(p) == Group then
        top = top + 1
        gs[top], is[top] = p, 1
      else
        local f = p:_follows()
        if f == nil then
          if not loose then
            for k = 1, top do gs[k] = false end
            return nil
          end
          whole = false
        elseif is_job(f) then
          n = n + 1
          list[n] = f
        else
          for j = 1, #f do list[n + j] = f[j] end
          n = n + #f
        end
      end
    end
  end
  if n == 0 and not whole then return nil end
  return list, whole
end

-- A group settling tells its listeners, and one of them may be the group
-- above it, which settles in turn: nested groups settle one inside
-- another. Their telling goes through a Nest (nest.lua) 32 levels deep: a
-- group settles at once (its state and values readable), and its
-- listeners are told at once up to 32 levels down, the order of telling
-- as for any listener; below that, just after, before the settle that
-- reached them returns. (From 4,000 levels on, plain recursion overflowed
-- LuaJIT's stack, and the step ended with an error.)
M.settles = nest.new(32) -- (the callback scenes lower its limit to 1-2, so their groups push)

local function settle_group(g, st, v)
  if g._st then return end
  g._st, g._v = st, v
  M.settles:call(settle.fire, g, st, v)
end

local function parts_of(list, name)
  if type(list) ~= "table" then
    error("bad argument 'list' to " .. name .. ": expected a list of awaitables, got " .. type(list), 3)
  end
  local parts = {}
  for i = 1, #list do
    local s = jobm.Job.as_settle(list[i])
    if s == nil then
      error("bad argument 'list' to " .. name .. ": item " .. i .. " is not awaitable (" .. type(list[i]) .. ")", 3)
    end
    s._seen = true
    parts[i] = s
  end
  return parts
end

-- Whether a part follows no job of its own (a Future, a job:call box, any
-- awaitable but a Handle or a group): while one is open, a job awaiting
-- the group keeps its own stall clock running.
local function is_loose(p)
  return getmetatable(p) ~= Group and not p.__handle
end

-- Part i of g settled and g did not: each job awaiting g, directly or
-- through groups above it, hears it (settle.changed: progress, and a world
-- that may have turned idle). `freed` says g's last loose part settled,
-- and so did those of every group on the way up: the job may now await
-- only jobs. (No loop in the usual case, one job awaiting the group: a
-- loop here, run once per part, made LuaJIT give up the traces around
-- it, "loop unroll limit". No stack kept between calls either: telling a
-- job may reschedule its driver, which reads the game's clock.)
-- `left` says the part ended while jobs it listed may run on: a Handle
-- withdrawn from its job, or a group that failed (an all whose Future
-- rejected, beside jobs still loading). Only an all_settled waits on after
-- that: the jobs awaiting it no longer await those, and their rank leaves
-- them (and no loop of awaits is left behind for a later await to close).
local function tell_one(e, h, freed, left, up)
  if is_job(e) then
    settle.changed(e, h, freed, left)
    return up
  end
  local pg = rawget(e, "g")
  if pg and not pg._st and rawget(e, "on_part") then
    up = up or {}
    up[#up + 1] = pg
    up[#up + 1] = freed and pg.loose == 0
  end
  return up
end

local function tell_listeners(h, freed, left, up)
  local w1 = rawget(h, "_w1")
  if w1 then up = tell_one(w1, h, freed, left, up) end
  local ls = rawget(h, "_ls")
  if ls then
    for k = 1, #ls do
      local e = ls[k]
      if e then up = tell_one(e, h, freed, left, up) end
    end
  end
  return up
end

local function part_settled(g, i, st)
  local loose = g.loose
  if loose == nil then return end -- (still being gathered: nobody listens yet)
  local at = g.loose_at
  local left = false
  if at and at[i] then
    loose = loose - 1
    g.loose = loose
  else
    local p = g.parts[i]
    if getmetatable(p) == Group then
      left = st ~= "done" -- (done: every part done, every job in it ended)
    else
      local job = rawget(p, 1) -- (a Handle's job)
      left = job ~= nil and not job[STATE]
    end
  end
  local up = tell_listeners(g, loose == 0, left, nil)
  if up then
    local n = #up
    while n > 0 do
      local pg, freed = up[n - 1], up[n]
      up[n], up[n - 1] = nil, nil
      up = tell_listeners(pg, freed, left, up)
      n = #up
    end
  end
end

local function all_part(e, st, v)
  local g = e.g
  if st ~= "done" then
    settle_group(g, st, v)
  elseif not g._st then
    g.values[e.i] = v[1]
    local left = g.left - 1
    g.left = left
    if left == 0 then
      settle_group(g, "done", settle.pack(g.values))
    else
      part_settled(g, e.i, st)
    end
  end
end

local function settled_part(e, st, v)
  local g = e.g
  if st == "done" then
    g.values[e.i] = { state = st, value = v[1] }
  else
    g.values[e.i] = { state = st, error = v }
  end
  local left = g.left - 1
  g.left = left
  if left == 0 then
    settle_group(g, "done", settle.pack(g.values))
  else
    part_settled(g, e.i, st)
  end
end

-- A group over `parts` that gathers their ends in g.values: on_part(e, st,
-- v) hears each part, through a listener {on_part =, g =, i =} (settle.lua)
-- until the group has settled. A part settled already reports at once; no
-- parts at all settle the group at once, done with an empty list.
local function gather(parts, what, on_part)
  local g = setmetatable({ parts = parts, what = what, values = {}, left = #parts }, Group)
  if #parts == 0 then settle.settle(g, "done", settle.pack(g.values)) end
  -- (which parts are loose is kept: a gather of Handles only, the usual
  -- gather of loads, then asks nothing more of each part that settles)
  local loose, at = 0, nil
  for i = 1, #parts do
    if g._st then break end
    local p = parts[i]
    local entry = { on_part = on_part, g = g, i = i }
    local st = p._st
    if st then
      on_part(entry, st, p._v)
    else
      settle.listen(p, entry)
      if is_loose(p) then
        loose = loose + 1
        at = at or {}
        at[i] = true
      end
    end
  end
  if not g._st then g.loose, g.loose_at = loose, at end
  return g
end

--- An awaitable of a list of each one's first value, or the first failure.
function M.all(list)
  local parts = parts_of(list, "all")
  return gather(parts, "all of " .. #parts, all_part)
end

--- An awaitable of a list of {state =, value =, error =}; it never fails.
function M.all_settled(list)
  local parts = parts_of(list, "all_settled")
  return gather(parts, "all settled of " .. #parts, settled_part)
end

-- abortable: the part ended first (e is its listener), or the signal
-- aborted first (e is the same table, watched by the signal).
local function abortable_part(e, st, v)
  signal.unwatch(e.sub)
  settle_group(e.g, st, v)
end
local function abortable_signal(e, reason)
  settle.unlisten(e.part, e)
  settle_group(e.g, "cancelled", reason)
end

--- Ends with `awaitable`'s outcome, or fails with the signal's reason if it
--- aborts first.
function M.abortable(awaitable, sig)
  local part = jobm.Job.as_settle(awaitable)
  if part == nil then
    error("bad argument 'awaitable' to abortable: expected a Handle, Future or awaitable, got " .. type(awaitable), 2)
  end
  if not signal.is_signal(sig) then
    error("bad argument 'signal' to abortable: expected a Signal, got " .. type(sig), 2)
  end
  part._seen = true
  -- (loose 0: a loose part settling settles it, so only a group below can
  -- settle a part without settling it)
  local g = setmetatable({ parts = { part }, what = "abortable " .. part:_describe(), loose = 0 }, Group)
  if sig.aborted then
    settle.settle(g, "cancelled", sig.reason)
  elseif part._st then
    settle.settle(g, part._st, part._v)
  else
    local e = { on_part = abortable_part, g = g, part = part }
    e.sub = signal.watch(sig, abortable_signal, e)
    settle.listen(part, e)
  end
  return g
end

return M
