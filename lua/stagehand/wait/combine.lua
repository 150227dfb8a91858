-- Awaitables made of others: all, all_settled, abortable.
local settle = require "stagehand.engine.settle"
local raise = require("stagehand.engine.errors").raise
local signal = require "stagehand.engine.signal"
local jobm = require "stagehand.wait.job"
local F = require "stagehand.engine.fields"
local is_job, STATE = F.is_job, F.STATE
local nest = require "stagehand.engine.nest"
local options = require "stagehand.engine.options"
local errors = require "stagehand.engine.errors"

local M = {}

---@class stagehand.Group
---@field what string what it gathers ("all of 3", "abortable ...")
local Group = settle.extend({})
-- (Every group is made with _group = true: how a wait tells a group, whose
-- parts settling is progress, from any other awaitable.)

--- "pending", "done", or the state of the part that ended it otherwise
--- ("failed", "cancelled", "stalled"). Also `g:result()` and `g:on_end(fn)`,
--- as on a Future.
---@return string
function Group:state() return self._st or "pending" end
function Group:_describe() return self.what end
Group.__tostring = function(g) return "stagehand.Group(" .. g.what .. ", " .. g:state() .. ")" end
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
      if p._st then -- luacheck: ignore 542 (an empty branch, on purpose)
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
  if type(list) ~= "table" or getmetatable(list) ~= nil and list.__settle then
    raise("bad argument 'list' to " .. name .. ": expected a list of awaitables, got "
      .. (type(list) == "table" and "an awaitable (wrap it in a list: {x})" or type(list)), 3)
  end
  local extra = options.first_non_list_key(list)
  if extra ~= nil then
    raise("bad argument 'list' to " .. name .. ": expected a list of awaitables, got a table with key "
      .. options.describe(extra)
      .. " (a list has only the keys 1 to n)", 3)
  end
  local parts = {}
  for i = 1, #list do
    local s = jobm.as_settle(list[i])
    if s == nil then
      raise("bad argument 'list' to " .. name .. ": item " .. i .. " is not awaitable (" .. type(list[i]) .. ")", 3)
    end
    if s.__handle then s._seen = true end -- (its failure is heard through the group)
    parts[i] = s
  end
  return parts
end

-- Whether a part still running holds the group made over it open: it is
-- loose, following no job of its own (a Future, a job:call box, any
-- awaitable but a Handle or a group), or it is a group itself open (see
-- below). While one does, a job awaiting the group keeps its own stall
-- clock running.
local function holds_open(p)
  if getmetatable(p) == Group then return (p.open or 0) > 0 end
  return not p.__handle
end

-- What holds a group open: its loose parts still running, and its groups
-- that were open when it was made. g.open counts them; g.open_at[i] marks
-- part i while it counts. A job awaiting a group that is no longer open
-- awaits only jobs (if they are its orchestrator's): its own clock pauses.
-- Each group stops being open once, and tells the groups it is a part of
-- then, so the counting costs O(1) a part, however deep groups nest.
local function uncount(g, i)
  local at = g.open_at
  if not (at and at[i]) then return false end
  at[i] = nil
  local n = g.open - 1
  g.open = n
  return n == 0
end

-- The listeners of h hear that a part of it settled. A job parked on h
-- hears settle.changed (progress while its own clock runs, a pause once
-- `freed`, its awaits listed again if `left`, and the idle check marked
-- due). With `climb`, each group h is a part of is pushed on `up` as
-- (group, place, freed), to be told in turn. (No loop in the usual case,
-- one job awaiting: a loop run once per part made LuaJIT give up the
-- traces around it, "loop unroll limit".)
local function tell_one(e, h, freed, left, up, climb)
  if is_job(e) then
    settle.changed(e, h, freed, left)
    return up
  end
  local pg = climb and rawget(e, "g")
  if pg and not pg._st and rawget(e, "on_part") then
    up = up or {}
    local n = #up
    up[n + 1], up[n + 2], up[n + 3] = pg, rawget(e, "i") or 1, freed
  end
  return up
end
local function tell(h, freed, left, up, climb)
  local w1 = rawget(h, "_w1")
  if w1 then up = tell_one(w1, h, freed, left, up, climb) end
  local ls = rawget(h, "_ls")
  if ls then
    for k = 1, #ls do
      local e = ls[k]
      if e then up = tell_one(e, h, freed, left, up, climb) end
    end
  end
  return up
end

-- Part i of g settled (in state st) and g did not. Its stamp (g.seq) is
-- how a job awaiting a group above hears of it: a part settled anywhere
-- below is progress, looked for only when its clock runs out (the stall
-- check), not by walking up at every settle. The jobs parked on g hear it
-- at once. Walked up, only when g stops being open (once per group), or
-- when `left`: the part ended while jobs it listed run on (a Handle
-- withdrawn from its job, or a group that failed: an all whose Future
-- rejected beside jobs still loading). An all_settled waits on after
-- that, and every job awaiting it from above no longer awaits those jobs:
-- their rank leaves them, and no loop of awaits is left for a later await
-- to close. (No stack kept between calls: telling a job may reschedule its
-- driver, which reads the game's clock.)
local function part_settled(g, i, st)
  if g.open == nil then return end -- (still being gathered: nobody listens yet)
  g.seq = settle.stamp()
  local p = g.parts[i]
  local left
  if getmetatable(p) == Group then
    left = st ~= "done" -- (done: every part done, every job in it ended)
  else
    local job = rawget(p, 1) -- (a Handle's job)
    left = job ~= nil and is_job(job) and not job[STATE]
  end
  local freed = uncount(g, i)
  if not (freed or left) then
    -- (a group no longer open, the usual gather of loads: its waiters'
    -- clocks are paused, and the end of the part's job marked the idle
    -- check due; one whose clock runs, following another orchestrator's
    -- jobs, finds the stamp when its clock runs out)
    if g.open == 0 then return end
    tell(g, false, false, nil, false)
    return
  end
  local up = tell(g, freed, left, nil, true)
  while up do
    local n = #up
    if n == 0 then break end
    local pg, pi, child_freed = up[n - 2], up[n - 1], up[n]
    up[n], up[n - 1], up[n - 2] = nil, nil, nil
    local pfreed = child_freed and uncount(pg, pi)
    if pfreed or left then up = tell(pg, pfreed, left, up, true) end
  end
end

-- Whether a part settled anywhere in g (below the jobs' own telling) after
-- stamp `since`: the stall check asks before it stalls a job awaiting g.
local ss = {}
function Group:_settled_since(since)
  local top, found = 1, false
  ss[1] = self
  while top > 0 do
    local g = ss[top]
    ss[top] = false
    top = top - 1
    if (g.seq or 0) > since then
      found = true
      break
    end
    local parts = g.parts
    for k = 1, #parts do
      local p = parts[k]
      if not p._st and getmetatable(p) == Group then
        top = top + 1
        ss[top] = p
      end
    end
  end
  for k = 1, top do ss[k] = false end
  return found
end

-- Part i of g has given its value (in g.values): the group is done with
-- the last, and hears of the others' progress.
local function one_fewer(g, i, st)
  local left = g.left - 1
  g.left = left
  if left == 0 then
    settle_group(g, "done", settle.pack(g.values))
  else
    part_settled(g, i, st)
  end
end

local function all_part(e, st, v)
  local g = e.g
  if st ~= "done" then
    settle_group(g, st, v)
  elseif not g._st then
    g.values[e.i] = v[1]
    one_fewer(g, e.i, st)
  end
end

local function settled_part(e, st, v)
  local g = e.g
  if st == "done" then
    g.values[e.i] = { state = st, value = v[1] }
  else
    g.values[e.i] = { state = st, error = v }
  end
  one_fewer(g, e.i, st)
end

-- A group over `parts` that gathers their ends in g.values: on_part(e, st,
-- v) hears each part, through a listener {on_part =, g =, i =} (settle.lua)
-- until the group has settled. A part settled already reports at once; no
-- parts at all settle the group at once, done with an empty list.
local function gather(parts, what, on_part)
  local g = setmetatable({ _group = true, parts = parts, what = what, values = {}, left = #parts,
    on_part = on_part }, Group)
  if #parts == 0 then settle.settle(g, "done", settle.pack(g.values)) end
  -- (what holds it open is counted here: a gather of Handles only, the
  -- usual gather of loads, then asks nothing more of a part that settles)
  local open, at = 0, nil
  for i = 1, #parts do
    if g._st then break end
    local p = parts[i]
    local entry = { on_part = on_part, g = g, i = i }
    local st = p._st
    if st then
      on_part(entry, st, p._v)
    else
      settle.listen(p, entry)
      if holds_open(p) then
        open = open + 1
        at = at or {}
        at[i] = true
      end
    end
  end
  if not g._st then g.open, g.open_at = open, at end
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

-- any: the first part done settles it with its values; a part that ends
-- otherwise leaves its Error in g.values, and once every part has, the
-- group fails with all of them.
local function any_part(e, st, v)
  local g = e.g
  if g._st then return end
  if st == "done" then
    settle_group(g, "done", v)
    return
  end
  g.values[e.i] = v
  local left = g.left - 1
  g.left = left
  if left == 0 then
    settle_group(g, "failed", M.every_part_failed(g.what, g.values))
  else
    part_settled(g, e.i, st)
  end
end

--- The Error of an `any` whose every part failed: `errors` lists each
--- part's, in list order.
function M.every_part_failed(what, errs)
  local shown = {}
  for i = 1, math.min(#errs, 3) do
    local e = errs[i]
    shown[i] = getmetatable(e) == errors.Error and errors.quoted(e) or errors.one_line(e)
  end
  if #errs > 3 then shown[#shown + 1] = "and " .. (#errs - 3) .. " more" end
  local msg = what .. " failed: no part ended done"
  if #errs > 0 then msg = msg .. " (" .. table.concat(shown, "; ") .. ")" end
  return errors.new("failed", what, msg, { errors = errs })
end

-- race: the first part to end settles it as that part ended.
local function race_part(e, st, v)
  settle_group(e.g, st, v)
end

--- An awaitable of the first part to end done (its values); it fails only
--- when every part failed, with an Error whose `errors` lists each part's.
function M.any(list)
  local parts = parts_of(list, "any")
  if #parts == 0 then -- (none can end done)
    local g = setmetatable({ _group = true, parts = parts, what = "any of 0", values = {}, left = 0 }, Group)
    settle.settle(g, "failed", M.every_part_failed(g.what, {}))
    return g
  end
  return gather(parts, "any of " .. #parts, any_part)
end

--- An awaitable that ends as the first of its parts to end, done or not.
function M.race(list)
  local parts = parts_of(list, "race")
  if #parts == 0 then
    raise("bad argument 'list' to race: expected a list of at least one awaitable (a race of none never ends)", 2)
  end
  return gather(parts, "race of " .. #parts, race_part)
end

-- abortable: the part ended first (e is its listener), or the signal
-- aborted first (e is the same table, watched by the signal).
-- (The group settles first, then stops listening: memory running out in
-- between leaves a listener that finds it settled, not a group nobody
-- will settle.)
local function abortable_part(e, st, v)
  settle_group(e.g, st, v)
  signal.unwatch(e.sub)
end
local function abortable_signal(e, reason)
  settle_group(e.g, "cancelled", reason)
  settle.unlisten(e.part, e)
end

--- Ends with `awaitable`'s outcome, or is cancelled with the signal's
--- reason if it aborts first (or had aborted already: then it wins even
--- over a part that had ended).
function M.abortable(awaitable, sig)
  local part = jobm.as_settle(awaitable)
  if part == nil then
    raise("bad argument 'awaitable' to abortable: expected a Handle, Future or awaitable, got " .. type(awaitable), 2)
  end
  if not signal.is_signal(sig) then
    raise("bad argument 'signal' to abortable: expected a Signal, got " .. type(sig), 2)
  end
  -- (Unlike all's, its part is heard only while it listens, or if it had
  -- ended: one it gave up on is nobody's, and its failure is logged.)
  -- (open while its part is: a loose part settles it, an open group below
  -- may stop being open first)
  local open = holds_open(part) and 1 or 0
  local g = setmetatable({ _group = true, parts = { part }, what = "abortable " .. part:_describe(), open = open,
    open_at = open == 1 and { true } or nil, on_part = abortable_part, signal = sig }, Group)
  if sig.aborted then
    settle.settle(g, "cancelled", sig.reason)
  elseif part._st then
    part._seen = true
    settle.settle(g, part._st, part._v)
  else
    local e = { on_part = abortable_part, g = g, i = 1, part = part }
    e.sub = signal.watch(sig, abortable_signal, e)
    settle.listen(part, e)
  end
  return g
end

-- A group whose parts' ends a fire cut short may not have heard (settle.lua:
-- M.recover), or one a job is parked on after memory ran out (engine.lua):
-- counted again from its parts' states, as its on_part would have, groups
-- below first. Idempotent: a part heard already counts the same again.
local function count_again(g)
  if g._st then return end
  local fn, parts, values = g.on_part, g.parts, g.values
  local sig = fn == abortable_part and g.signal
  if sig and sig.aborted then return settle_group(g, "cancelled", sig.reason) end
  local left = #parts
  for i = 1, #parts do
    local p = parts[i]
    local st = p._st
    if st then
      local v = p._v
      if fn == race_part or fn == abortable_part then
        return settle_group(g, st, v)
      elseif fn == all_part then
        if st ~= "done" then return settle_group(g, st, v) end
        values[i] = v[1]
      elseif fn == any_part then
        if st == "done" then return settle_group(g, "done", v) end
        values[i] = v
      elseif values[i] == nil then -- (all_settled)
        values[i] = st == "done" and { state = st, value = v[1] } or { state = st, error = v }
      end
      left = left - 1
    end
  end
  g.left = left
  if left == 0 then
    if fn == any_part then return settle_group(g, "failed", M.every_part_failed(g.what, values)) end
    return settle_group(g, "done", settle.pack(values))
  end
  -- (parts that held it open and ended unheard: their waiters hear it now)
  local at = g.open_at
  if at then
    for i = 1, #parts do
      local st = parts[i]._st
      if st and at[i] then part_settled(g, i, st) end
    end
  end
end

function M.recount(g)
  local order, n, k = { g }, 1, 1
  while k <= n do
    local parts = order[k].parts
    for i = 1, #parts do
      local p = parts[i]
      if getmetatable(p) == Group and not p._st then
        n = n + 1
        order[n] = p
      end
    end
    k = k + 1
  end
  for j = n, 1, -1 do count_again(order[j]) end
end
settle.on_recount(M.recount)

return M
