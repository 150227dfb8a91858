-- Who reaches whom: for each job, the set of priority sources that reach
-- it (its callers' and, through the waits that lead to it, its awaiters'),
-- counted as callers and awaiters come and go, and passed down what the job
-- itself waits on. A slot or budget queue files a waiting job under that
-- set (priority.lua names the sets and reads their ranks), and a set that
-- changes re-files the job (the hook slots.lua registers with on_moved).
-- o.awaiters[job] is the set of jobs parked on something that follows
-- `job`; o.followed[waiter] is what the waiter registered with.
local list = require "stagehand.engine.list"
local F = require "stagehand.engine.fields"
local priority = require "stagehand.rank.priority"
local E = require "stagehand.engine.engine"

local H, STATE = F.H, F.STATE
local is_job, by_id = F.is_job, F.by_id
local rawget, sort = rawget, table.sort
local has = list.has
local members, take_set, drop_set = priority.members, priority.take_set, priority.drop_set
local next_big, next_set = priority.next_big, priority.next_set

local M = {}

--- Whether any job waits on `job` (through what it awaits).
function M.awaited(o, job) return o.awaiters[job] ~= nil end

--- Whether `waiter` is registered as waiting on jobs (follow).
function M.following(o, waiter) return o.followed[waiter] ~= nil end

-- Registered by slots.lua: re-files a waiting job under its new set, or
-- (in_place true) has the rank of its set, changed in place, read again;
-- `added` is the source group that joined the set, if one did (its rank,
-- if known, bounds the set's: the set is at least that high).
local moved = function() end
function M.on_moved(fn) moved = fn end

-- A job's counts, made from its callers and awaiters the first time it
-- needs them (until then it has one caller and no awaiter).
local function counts_of_many(o, job)
  local cnt = {}
  for i = H, #job do
    local h = job[i]
    if h then
      local g = priority.group(o, rawget(h, 2))
      cnt[g] = (cnt[g] or 0) + 1
    end
  end
  local aw = o.awaiters[job]
  if aw then
    -- In start order, not pairs' (which follows addresses): set_of may
    -- make a group, and ids given in a different order would read the
    -- priority functions in a different order on another run.
    local ws = list.members(aw, by_id)
    for j = 1, #ws do
      local ms = members(o, priority.set_of(o, ws[j]))
      for i = 1, #ms do cnt[ms[i]] = (cnt[ms[i]] or 0) + 1 end
    end
  end
  return cnt
end

-- (The usual case, one caller and nobody waiting, without a loop: a loop
-- here sits inside the loop of follow, over every job a group follows,
-- and LuaJIT gives up compiling such a loop ("loop unroll limit").)
local function counts(o, job)
  local cnt = o.src_count[job]
  if cnt then return cnt end
  local set = priority.set_of(o, job)
  local h = rawget(job, H)
  if h and rawget(job, H + 1) == nil and o.awaiters[job] == nil then
    cnt = { [priority.group(o, rawget(h, 2))] = 1 }
  else
    cnt = counts_of_many(o, job)
  end
  o.src_count[job] = cnt
  o.set_of[job] = set
  o.nset_of = o.nset_of + 1
  return cnt
end

-- Changes waiting to be made, as (job, group, d) triples on a stack of
-- their own, not by recursion: a change passes down a chain of awaits, and
-- a chain may be thousands of jobs deep (a visible portrait awaiting the
-- top of a chain of 10,000 loaders overflowed LuaJIT's Lua stack, and the
-- portrait's await failed). The order the changes are made in does not
-- matter: counts add up, and no game code runs in between.
local cj, cg, cd, cn = {}, {}, {}, 0

local function push(job, g, d)
  cn = cn + 1
  cj[cn], cg[cn], cd[cn] = job, g, d
end

-- An awaiter's set went from om to nm (member lists): so does its share of
-- the counts of `job`, which it follows.
local function pass(job, om, nm)
  if job[STATE] then return end
  for i = 1, #nm do
    if not has(om, nm[i]) then push(job, nm[i], 1) end
  end
  for i = 1, #om do
    if not has(nm, om[i]) then push(job, om[i], -1) end
  end
end

-- The set of a job that follows f changed: from the member lists om to
-- nm, or (om nil) by source group g joining (d 1) or leaving (d -1). Once
-- per job followed: a list may follow one job twice (stagehand.all of two
-- Handles on one run), and it is one awaiter of that job (add).
local function pass_one(t, om, nm, g, d)
  if om then
    pass(t, om, nm)
  elseif not t[STATE] then
    push(t, g, d)
  end
end

local function pass_to(f, om, nm, g, d)
  if is_job(f) then return pass_one(f, om, nm, g, d) end
  local done = {}
  for i = 1, #f do
    local t = f[i]
    if not done[t] then
      done[t] = true
      pass_one(t, om, nm, g, d)
    end
  end
end

-- Counts d more (or fewer) of source group g reaching `job`; what that
-- changes for the jobs it follows is pushed, not made.
local function change_one(o, job, g, d)
  local cnt = counts(o, job)
  local was = cnt[g]
  local n = (was or 0) + d
  if n <= 0 then n = nil end
  cnt[g] = n
  if (was == nil) == (n == nil) then return end
  local old = o.set_of[job]
  local f = o.followed[job]
  local added = n ~= nil
  -- (set 0 with no count for group 0 is no source at all)
  local from_none = old == 0 and added and (g == 0 and was or cnt[0]) == nil
  local ms = o.members[old] -- (nil for one source: no list made for it here)
  if not from_none and (ms and #ms or 1) + (added and 1 or -1) > o.big_set then
    local new = next_big(o, old, ms or { old }, g, added)
    if new ~= old then
      o.set_of[job] = new
      take_set(o, new)
      moved(o, job, new, false, added and g)
    else
      moved(o, job, old, true, added and g) -- (changed in place: same group, another rank)
    end
    if f then pass_to(f, nil, nil, g, added and 1 or -1) end
    if new ~= old then drop_set(o, old) end
    return
  end
  local new = next_set(o, old, g, added, from_none)
  if old == new then return end
  o.set_of[job] = new
  take_set(o, new)
  if f then pass_to(f, members(o, old), members(o, new)) end
  moved(o, job, new, false, added and g)
  drop_set(o, old)
end

-- Makes the changes pushed above `base`, and those they push in turn.
local function pass_on(o, base)
  while cn > base do
    local j, jg, jd = cj[cn], cg[cn], cd[cn]
    cj[cn] = false
    cn = cn - 1
    change_one(o, j, jg, jd)
  end
end

-- Counts d more (or fewer) of source group g reaching `job`, and passes
-- what changes down everything it awaits. (Loops only when a change is
-- passed on, as add_set only for a set of several sources: see counts.)
local function change(o, job, g, d)
  local base = cn
  change_one(o, job, g, d)
  if cn > base then pass_on(o, base) end
end

local function add_set(o, job, set, d)
  local ms = o.members[set]
  if not ms then return change(o, job, set, d) end
  for i = 1, #ms do change(o, job, ms[i], d) end
end

--- A new caller's Handle joins a running job.
local function add_caller(o, job, h)
  if not rawget(job, H) and not o.src_count[job] and not o.awaiters[job] then
    job[H] = h -- its only caller: its set is h's source, nothing to count
    h[3] = H
    return
  end
  counts(o, job)
  local i = #job + 1
  job[i] = h
  h[3] = i
  change(o, job, priority.group(o, rawget(h, 2)), 1)
end

--- A caller's Handle leaves a running job: the last caller takes its
--- place (callers have no order among them, and 10,000 soldiers leaving
--- a shared job one by one must not shift the rest each time).
local function remove_caller(o, job, h)
  counts(o, job)
  local i, n = rawget(h, 3), #job
  if job[i] == h then
    local last = job[n]
    job[i] = last
    last[3] = i
    job[n] = nil
  else
    list.remove_value(job, h, H) -- (not where it was placed: never expected)
  end
  change(o, job, priority.group(o, rawget(h, 2)), -1)
end

--- The job ended: nothing changes its counts again. Its set stays while it
--- still follows something (an ended job queued for its last resume leaves
--- what it waited on then, and takes its set's share back).
---
--- Most jobs have neither entry, so each is cleared only if present: LuaJIT
--- compiles `t[k] = nil` for a missing k as an insertion (a new hash node
--- holding nil).
local function forget_sets(o, job)
  local counted = o.src_count
  if counted[job] ~= nil then counted[job] = nil end
  if not o.followed[job] then
    local set_of = o.set_of
    local g = set_of[job]
    if g ~= nil then
      drop_set(o, g)
      set_of[job] = nil
      o.nset_of = o.nset_of - 1
    end
  end
end



-- (o.awaiters[job] is a counted set: list.lua.)
local function add(o, job, waiter)
  local set = o.awaiters[job]
  if set and set[waiter] then return end -- (a list may follow one job twice: it counts once)
  counts(o, job) -- (before the waiter joins: counts() counts the awaiters already there)
  list.set_add(o.awaiters, job, waiter)
  add_set(o, job, priority.set_of(o, waiter), 1)
end

-- Registers `waiter` as waiting on what `f` names (a job or a list of jobs).
local function follow(o, waiter, f)
  o.followed[waiter] = f
  if is_job(f) then return add(o, f, waiter) end
  for i = 1, #f do add(o, f[i], waiter) end
end

local function leave(o, aws, job, waiter)
  if list.set_remove(aws, job, waiter) and not job[STATE] then
    add_set(o, job, priority.set_of(o, waiter), -1)
  end
end

--- The waiter stops waiting on whatever it registered with.
local function unfollow(o, waiter)
  local f = o.followed[waiter]
  if not f then return end
  o.followed[waiter] = nil
  local aws = o.awaiters
  if is_job(f) then
    leave(o, aws, f, waiter)
  else
    for i = 1, #f do leave(o, aws, f[i], waiter) end
  end
  if waiter[STATE] then forget_sets(o, waiter) end
end

--- Everyone waiting on `from` now waits on `to` (a `when` joining a run;
--- `from` ends right after).
local function move_awaiters(o, from, to)
  local set = o.awaiters[from]
  if not set then return end
  o.awaiters[from] = nil
  counts(o, to)
  local waiters = list.members(set, by_id) -- (start order: see counts_of_many)
  for i = 1, #waiters do
    local w = waiters[i]
    local fresh = list.set_add(o.awaiters, to, w) -- (w may follow both: it counts once)
    local f = o.followed[w]
    if f == from then
      o.followed[w] = to
    elseif f and not is_job(f) then
      for k = 1, #f do
        if f[k] == from then f[k] = to end
      end
    end
    if fresh then add_set(o, to, priority.set_of(o, w), 1) end
  end
end

-- Memory that runs out in the middle of a change of callers or awaiters
-- leaves the counts half changed. So each change runs protected: one that
-- raises marks the orchestrator's counts broken (o.prio_broken), and they
-- are made anew (M.rebuild) from what they are counted from, each job's
-- callers and what each waiter follows, before anything reads them again:
-- at the next change, wait in a queue or step.
local WAITQ = F.WAITQ
local each = require("stagehand.core.compat").each

local function broke(o)
  for i = 1, cn do cj[i] = false end -- (changes pushed and not made)
  cn = 0
  o.prio_broken = true
end

-- An addition that fails raises (the caller's operation failed); a
-- removal does not: what it removes from (a job's callers, what a waiter
-- follows) is changed before any count, so the rebuild counts without it,
-- and ending a job, which removes, never stops halfway.
local function guarded(fn, raises)
  return function(o, a, b)
    if o.prio_broken then M.rebuild(o) end
    local ok, err = pcall(fn, o, a, b)
    if not ok then
      broke(o)
      if raises then error(err, 0) end
    end
  end
end

M.add_caller = guarded(add_caller, true)
M.follow = guarded(follow, true)
M.move_awaiters = guarded(move_awaiters, true)
M.remove_caller = guarded(remove_caller, false)
M.unfollow = guarded(unfollow, false)
M.forget_sets = guarded(forget_sets, false)

local function queued_jobs(o)
  local js = {}
  for _, job in each, o.by_slot do
    if job[WAITQ] then js[#js + 1] = job end
  end
  sort(js, by_id)
  return js
end

local function first_source(job)
  local h = rawget(job, H)
  return h and rawget(h, 2) or nil
end

local function rebuild(o)
  o.prio_broken = false -- (what it calls reads the counts; a rebuild that fails marks them again)
  -- What the counts are made from, kept until a rebuild ends: one that
  -- runs out of memory itself starts again from the same list.
  local snap = o.prio_snapshot
  if not snap then
    snap = {}
    for w, f in each, o.followed do
      if not w[STATE] then snap[#snap + 1] = { w, f } end
    end
    sort(snap, function(a, b) return a[1][F.ID] < b[1][F.ID] end)
    o.prio_snapshot = snap
  end
  -- Every queued job waits under its first caller's source for a moment,
  -- so that no set group is left with waiters when the sets are dropped.
  local queued = queued_jobs(o)
  for i = 1, #queued do moved(o, queued[i], priority.group(o, first_source(queued[i]))) end
  local sets = {}
  for g in each, o.members do sets[#sets + 1] = g end
  sort(sets)
  for i = 1, #sets do
    local g = sets[i]
    o.members[g], o.fixed_rank[g], o.set_users[g] = nil, nil, nil
    o.free_groups[#o.free_groups + 1] = g
  end
  o.set_group, o.set_key, o.set_plus, o.set_minus = {}, {}, {}, {}
  o.set_pos, o.set_hash, o.big_by_hash = {}, {}, {}
  o.nsets = 0
  o.src_count, o.set_of, o.nset_of = {}, {}, 0
  o.awaiters, o.followed = {}, {}
  -- A job's callers first, as they joined: counted from its first, each
  -- other one added as add_caller adds it.
  local running = {}
  for _, job in each, o.by_slot do
    if rawget(job, H + 1) ~= nil then running[#running + 1] = job end
  end
  sort(running, by_id)
  for i = 1, #running do
    local job = running[i]
    local g1 = priority.group(o, rawget(job[H], 2))
    o.src_count[job] = { [g1] = 1 }
    o.set_of[job] = g1
    o.nset_of = o.nset_of + 1
    for k = H + 1, #job do change(o, job, priority.group(o, rawget(job[k], 2)), 1) end
  end
  -- then what each waiter follows, as it came to follow it
  for i = 1, #snap do
    local w, f = snap[i][1], snap[i][2]
    -- (jobs it followed that ended since count for nothing: left out)
    if is_job(f) then
      if f[STATE] then f = nil end
    else
      local live = {}
      for k = 1, #f do
        if not f[k][STATE] then live[#live + 1] = f[k] end
      end
      f = live[1] and live or nil
    end
    if f and not w[STATE] then follow(o, w, f) end
  end
  for i = 1, #queued do
    local job = queued[i]
    if job[WAITQ] then moved(o, job, priority.set_of(o, job)) end
  end
  o.prio_snapshot = false
end

--- Makes the counts anew after a change that raised (see guarded).
function M.rebuild(o)
  local ok, err = pcall(rebuild, o)
  if not ok then
    broke(o)
    error(err, 0)
  end
end

priority.on_repair(M.rebuild)

-- What the engine tells this module: a job stops waiting; a job ends (its
-- counts go, asked only when some job has any); a step begins (counts that
-- memory ran out on are made anew first).
E.on("wait_left", function(o, job) M.unfollow(o, job) end)
E.on("forget_counts", function(o, job)
  if o.nset_of > 0 then M.forget_sets(o, job) end
end)
E.on("step_began", function(o)
  if o.prio_broken then M.rebuild(o) end
end)

return M
