-- What is on screen goes first: ranks, priority sources read live, and a
-- job's effective rank, which it inherits from everyone following or
-- waiting on it.
--
-- Ranks are numbers, 1 the highest. A source is a rank name, a function
-- returning one (read at every decision), or nil (the default). A decision
-- (one report, one job:priority(), one grant) carries a cache, so each
-- distinct function is called at most once however many callers share it,
-- and each job's rank is worked out once however many paths lead to it.
--
-- Who waits on whom: o.awaiters[job] is the set of jobs parked on something
-- that follows `job` (its Handle, a `when` on its key, a group holding
-- those); o.followed[waiter] is what the waiter registered with, so it can
-- leave again. Both change only when a job parks or wakes.
--
-- Source sets (the second half of this file) keep, for every job, the set
-- of priority sources that reach it, so a slot or budget queue can file a
-- waiting job under that set and a grant never walks callers or awaiters.
local logm = require "stagehand.log"
local errors = require "stagehand.errors"
local list = require "stagehand.list"
local F = require "stagehand.fields"
local ORCH, H, STATE = F.ORCH, F.H, F.STATE
local is_job, by_id = F.is_job, F.by_id

local rawget, sort, concat = rawget, table.sort, table.concat

local M = {}

function M.name(o, r) return o.ranks[r] end

--- The rank of one source in a decision; a function that raises or answers
--- an unknown rank counts as the default and is logged once.
function M.source_rank(o, src, cache)
  if src == nil then return o.default_rank end
  if type(src) == "string" then return o.rank_of[src] or o.default_rank end
  if cache then
    local r = cache[src]
    if r then return r end
  end
  local ok, r = pcall(src)
  local rank = ok and o.rank_of[r] or M.bad_source(o, src, ok, r)
  if cache then cache[src] = rank end
  return rank
end

--- The rank of a priority function that raised (ok false, r its error) or
--- answered r, not a rank: the default, logged once per function.
function M.bad_source(o, src, ok, r)
  if not o.bad_sources[src] then
    o.bad_sources[src] = true
    local show = errors.show
    local why = ok and ("returned " .. show(r) .. ", not a rank") or ("raised: " .. show(r))
    logm.guard(nil, "the log function", o.log,
      "[stagehand] a priority function " .. why .. "; counting it as '" .. o.ranks[o.default_rank] .. "'")
  end
  return o.default_rank
end

--- A job's effective rank worked out the long way: the highest of its
--- callers' sources and of the effective ranks of the jobs waiting on it.
--- For a job that ended (it keeps no set), and for specs to check the sets
--- against.
--- (The callers and awaiters are copied before any priority function runs:
--- a function is game code, and may cancel a caller or start a waiter.)
---
--- `budget` (optional, {left = n}) bounds how many jobs it visits; past
--- that it counts what it has seen. A job's end told to a watcher walks up
--- the jobs awaiting it: unbounded, down a chain of 10,000 awaits that was
--- O(n^2) in all, and its recursion overflowed LuaJIT's stack. (Jobs still
--- running read their set instead, which is exact and O(distinct sources);
--- specs check the sets against the unbounded walk.)
local function walk(job, cache, budget)
  cache = cache or {}
  local r = cache[job]
  if r then return r end
  local o = job[ORCH]
  local worst = #o.ranks + 1
  cache[job] = worst -- a guard: a wait cycle cannot recurse forever
  local best = worst
  local sources, n = {}, 0 -- (a caller's source may be nil: the default)
  for i = H, #job do
    n = n + 1
    sources[n] = rawget(job[i], 2) -- raw: a Handle's __index is a function
  end
  local aw = o.awaiters[job]
  local waiters = aw and list.members(aw, by_id) -- (in start order: see counts_of_many)
  for i = 1, n do
    local s = M.source_rank(o, sources[i], cache)
    if s < best then best = s end
    if best == 1 then break end
  end
  if best > 1 and waiters then
    for i = 1, #waiters do
      if budget then
        if budget.left <= 0 then break end
        budget.left = budget.left - 1
      end
      local s = walk(waiters[i], cache, budget)
      if s < best then best = s end
      if best == 1 then break end
    end
  end
  if best == worst then best = o.default_rank end
  cache[job] = best
  return best
end
M.walk_effective = function(job, cache) return walk(job, cache) end

-- How many jobs an ended job's walk visits at most (see walk).
local WALK_LIMIT = 64

local set_rank_in

--- A job's effective rank: the best rank among the sources that reach it,
--- read from its set (below), so a job with 1,000 callers sharing three
--- functions costs three calls and no walk. `cache` (optional) is one
--- decision's: each distinct function is called once in it.
function M.effective(job, cache)
  if job[STATE] then return walk(job, cache, { left = WALK_LIMIT }) end
  return set_rank_in(job[ORCH], M.set_of(job[ORCH], job), cache or {})
end

---------------------------------------------------------------------------
-- Source sets.
--
-- A job's effective rank is the best rank among the sources that reach it:
-- its callers' own, and those reaching every job waiting on it. A group id
-- names either one source (a rank name, a function, or 0 for nil: the
-- default) or a set of two or more source groups. A slot or budget queue
-- files a waiting job in the core under its set's group; a grant reads each
-- group's rank once (a set's is the best of its members') and the core picks
-- the best group's oldest waiter. So a grant costs the same whether a
-- thousand jobs wait on one scene loader or each waits for itself.
--
-- Most jobs have one caller and nobody waiting on them: their set is their
-- caller's source, and nothing is stored. Any other job keeps counts:
-- o.src_count[job][g] is how many of its callers have source g plus how many
-- of its awaiters' sets hold g, and o.set_of[job] is its set's group. Every
-- change of callers or awaiters goes through add_caller, remove_caller,
-- follow, unfollow and move_awaiters below, and a set that changes is
-- passed on to what the job waits on (waits never form a cycle: awaiting
-- one raises) and re-files the job in its queue (the hook slots.lua
-- registers with on_moved).

-- Registered by slots.lua (on_moved): re-files a waiting job under its new set.
local moved = function() end
function M.on_moved(fn) moved = fn end

function M.init_groups(o)
  o.group_of = setmetatable({}, { __mode = "k" }) -- source -> group
  o.source_of = setmetatable({}, { __mode = "v" }) -- group -> source
  o.fixed_rank = { [0] = o.default_rank } -- group -> rank, for groups whose rank never changes
  o.members = {} -- set group -> list of its source groups, in birth order (below)
  o.set_group, o.set_key = {}, {} -- "g1,g2,..." <-> set group
  o.set_users = {} -- set group -> how many jobs have it as their set
  o.nsets = 0
  o.next_group = 1
  -- Group ids are reused (slots.lua's queues keep a C entry per id): a set's
  -- when no job has it any more, a function's once the collector took it.
  o.free_groups = {} -- ids ready for reuse
  -- A set lists its members in the order their groups were made (birth),
  -- not by id: ids are reused once the collector takes a function, and
  -- members read in id order would call priority functions in an order
  -- that followed the collector's timing.
  o.birth = { [0] = 0 } -- group -> when it was made (a reused id is born again)
  o.births = 0
  local birth = o.birth
  o.by_birth = function(a, b) return birth[a] < birth[b] end
  o.fn_group = {} -- group -> true, for groups of one function
  o.fn_made = 0 -- function groups made since the last sweep
  o.sweep_min = 256 -- (chaos lowers it, to sweep often)
  o.sweep_at = o.sweep_min
  o.src_count, o.set_of = {}, {}
  o.nset_of = 0 -- how many jobs have a set_of entry (end_job skips forget_sets at 0)
  o.set_plus, o.set_minus = {}, {} -- set -> source group -> the set with it added / taken out
  -- Sets of more than big_set sources (see below): set_pos[g] maps each
  -- member to its index in members[g], set_hash[g] is the set's hash, and
  -- big_by_hash[hash] a big set with that hash, to share.
  o.big_set = 16 -- (chaos lowers it, so big sets come and go in every scene)
  o.set_pos, o.set_hash, o.big_by_hash = {}, {}, {}
  -- A grant round's reading of each source group (see slots.read_live):
  -- a function in several sets is called once per round.
  -- (Keyed by the function, weakly: fresh closures come and go.)
  o.prio_broken = false -- (memory ran out mid-change: M.rebuild, at the end of this file)
  o.prio_snapshot = false
  o.round = 0
  o.seen_round = setmetatable({}, { __mode = "k" })
  o.seen_rank = setmetatable({}, { __mode = "k" })
end

--- The group of one source (0 for nil, the default). A rank name's group
--- has a fixed rank: the core is told it once and grants never read it.
---
--- Ids are reused, so a game that passes a fresh closure per job does not
--- grow every queue's C group array for good. A set's id is given back when
--- its last job lets go of it (drop_set). A function's id is given back once
--- the collector has taken the function (source_of is weak): nothing else
--- can still name it then, since a job counting a source holds the Handle
--- that holds the function. Those ids are found by a sweep over all ids,
--- run when no id is free and at least half as many function groups as
--- there are ids were made since the last sweep: its cost per group made
--- stays constant.
local forget_in_queues -- (set by slots.lua: tells each queue's core the id is free)

local function sweep(o)
  local free, fn_group, source_of = o.free_groups, o.fn_group, o.source_of
  for g = 1, o.next_group - 1 do
    if fn_group[g] and source_of[g] == nil then
      fn_group[g] = nil
      free[#free + 1] = g
    end
  end
  -- (no remembered set change can name a freed id: any set holding one
  -- was dropped, and dropping clears them; cleared here all the same)
  if free[1] then o.set_plus, o.set_minus = {}, {} end
  o.fn_made = 0
  o.sweep_at = math.max(o.sweep_min, math.floor(o.next_group / 2))
end

local function new_group(o)
  local free = o.free_groups
  local n = #free
  local b = o.births + 1
  o.births = b
  if n == 0 then
    local g = o.next_group
    o.next_group = g + 1
    o.birth[g] = b
    return g
  end
  local g = free[n]
  free[n] = nil
  forget_in_queues(o, g)
  o.birth[g] = b
  return g
end

function M.group(o, src)
  if src == nil then return 0 end
  local g = o.group_of[src]
  if g then return g end
  if type(src) == "function" then
    local made = o.fn_made + 1
    o.fn_made = made
    if made >= o.sweep_at and o.free_groups[1] == nil then sweep(o) end
  end
  g = new_group(o)
  o.group_of[src] = g
  o.source_of[g] = src
  if type(src) == "string" then
    o.fixed_rank[g] = M.source_rank(o, src, nil)
  else
    o.fn_group[g] = true
  end
  return g
end

--- Set by slots.lua: fn(o, g) resets a reused id in every queue.
function M.on_forget(fn) forget_in_queues = fn end

-- The group of a list of two or more source groups in birth order.
local function group_of_set(o, ids)
  local k = concat(ids, ",")
  local g = o.set_group[k]
  if g then return g end
  g = new_group(o)
  o.set_group[k], o.set_key[g] = g, k
  o.members[g] = ids
  o.set_users[g] = 0
  o.nsets = o.nsets + 1
  local fixed = #o.ranks + 1
  for i = 1, #ids do
    local r = o.fixed_rank[ids[i]]
    if not r then
      fixed = nil
      break
    end
    if r < fixed then fixed = r end
  end
  o.fixed_rank[g] = fixed
  return g
end

--- The group a job waits under: its set of sources.
function M.set_of(o, job)
  if o.prio_broken then M.rebuild(o) end
  local g = o.set_of[job]
  if g then return g end
  local h = rawget(job, H)
  if not h then return 0 end
  return M.group(o, rawget(h, 2)) -- (raw: a Handle's __index is a function)
end

--- The rank of a set group in this grant round: the best of its members'.
function M.set_rank(o, g)
  local ms = o.members[g]
  local best = #o.ranks + 1
  local fixed, seen_round, seen_rank, round = o.fixed_rank, o.seen_round, o.seen_rank, o.round
  for i = 1, #ms do
    local m = ms[i]
    local r = fixed[m]
    if not r then
      local src = o.source_of[m]
      if src == nil then
        r = o.default_rank -- (a function no longer referenced: no job reads it)
      elseif seen_round[src] == round then
        r = seen_rank[src]
      else
        r = M.source_rank(o, src, nil)
        seen_round[src], seen_rank[src] = round, r
      end
    end
    if r < best then best = r end
  end
  return best
end

-- The rank of group g in one decision (cache: source -> rank).
set_rank_in = function(o, g, cache)
  local fixed = o.fixed_rank[g]
  if fixed then return fixed end
  local ms = o.members[g]
  if not ms then return M.source_rank(o, o.source_of[g], cache) end
  local best = #o.ranks + 1
  for i = 1, #ms do
    local m = ms[i]
    local r = o.fixed_rank[m] or M.source_rank(o, o.source_of[m], cache)
    if r < best then best = r end
  end
  return best
end

local function members(o, g)
  return o.members[g] or { g }
end

-- How many jobs have each set. A set no job has any more is forgotten,
-- with every remembered transition (some may lead to it): a game passing a
-- fresh priority closure per job makes a new set per job, and keeping them
-- all grew memory by 500 bytes a job. A job takes its new set before the
-- change is passed on (so nothing the change reaches can forget that set
-- under it) and lets go of its old one after (passing it on reads old's
-- members).
local function take_set(o, g)
  if o.members[g] then o.set_users[g] = o.set_users[g] + 1 end
end

local function drop_set(o, g)
  if not (g and o.members[g]) then return end
  local n = o.set_users[g] - 1
  if n > 0 then
    o.set_users[g] = n
    return
  end
  o.set_users[g] = nil
  o.members[g], o.fixed_rank[g] = nil, nil
  o.nsets = o.nsets - 1
  local h = o.set_hash[g]
  if h then
    -- (a big set: no remembered change leads to or from one)
    if o.big_by_hash[h] == g then o.big_by_hash[h] = nil end
    o.set_hash[g], o.set_pos[g] = nil, nil
  else
    o.set_group[o.set_key[g]] = nil
    o.set_key[g] = nil
    o.set_plus, o.set_minus = {}, {}
  end
  local free = o.free_groups
  free[#free + 1] = g
end

-- Big sets. A small set is named by its members in birth order, and each
-- change is remembered, so 10,000 assets gaining the same sources share one
-- set and each gains it in O(1). Past o.big_set members that costs too much:
-- a keyed mesh joined by 10,000 soldiers, each passing a priority closure
-- of its own, made a new set the size of the army at every join and every
-- leave (18 s on LuaJIT, 54 s on Lua 5.4). A big set is named by a hash
-- of its members instead, kept as they change (the sum of a key per
-- member): a job whose change makes a big set that exists takes it
-- (checked member by member, in O(size)), so assets awaited by 20 panels
-- with closures of their own still share one set; otherwise a job that
-- alone has its set changes it in place, in O(1), and one that shares it
-- takes a copy. Either way only the source that joined or left is passed
-- on to what the job awaits.
local HASH_MOD = 1125899906842597 -- (a prime below 2^50: sums stay exact in a double)
local function key_of(g) return (g * 2654435761 + 40503) % HASH_MOD end

local function hash_of(o, set, ms)
  local h = o.set_hash[set]
  if h then return h end
  h = 0
  for i = 1, #ms do h = (h + key_of(ms[i])) % HASH_MOD end
  return h
end

-- Whether big set s is the set ms (old's members) with g added or taken out.
local has = list.has
local function same_after(o, s, old, ms, g, added)
  local sm = o.members[s]
  if #sm ~= #ms + (added and 1 or -1) then return false end
  local pos = o.set_pos[old]
  for i = 1, #sm do
    local m = sm[i]
    if m == g then
      if not added then return false end
    elseif not (pos and pos[m] or not pos and has(ms, m)) then
      return false
    end
  end
  return true
end

-- The big set after g joins or leaves `old` (members ms), for a job that
-- has old as its set: an existing one, old itself changed in place, or a
-- new one.
local function next_big(o, old, ms, g, added)
  local k = key_of(g)
  local h = hash_of(o, old, ms)
  local nh = added and (h + k) % HASH_MOD or (h - k) % HASH_MOD
  local by_hash = o.big_by_hash
  local s = by_hash[nh]
  if s and s ~= old and same_after(o, s, old, ms, g, added) then return s end
  local pos = o.set_pos[old]
  if pos and o.set_users[old] == 1 then
    if by_hash[h] == old then by_hash[h] = nil end
    if added then
      local n = #ms + 1
      ms[n], pos[g] = g, n
    else
      local i, n = pos[g], #ms
      local last = ms[n]
      ms[i], pos[last] = last, i
      ms[n], pos[g] = nil, nil
    end
    o.set_hash[old] = nh
    if by_hash[nh] == nil then by_hash[nh] = old end
    return old
  end
  s = new_group(o)
  local ids, at, n = {}, {}, 0
  for i = 1, #ms do
    local m = ms[i]
    if m ~= g then
      n = n + 1
      ids[n], at[m] = m, n
    end
  end
  if added then
    n = n + 1
    ids[n], at[g] = g, n
  end
  o.members[s], o.set_pos[s], o.set_hash[s] = ids, at, nh
  o.set_users[s] = 0
  o.nsets = o.nsets + 1
  if by_hash[nh] == nil then by_hash[nh] = s end
  return s
end

-- The set after source group g joins (added) or leaves the set `old`,
-- remembered per set and group: a set changes one member at a time, and a
-- scene loader starting to await 10,000 assets makes the same change 10,000
-- times. `from_none` says old is 0 for no source at all (not the default's
-- own group 0).
local function next_set(o, old, g, added, from_none)
  if from_none then return g end -- (only a source can join an empty set)
  -- (A big set changes: nothing is remembered for it, see next_big.)
  local row
  if not o.set_hash[old] then
    local memo = added and o.set_plus or o.set_minus
    row = memo[old]
    if not row then
      row = {}
      memo[old] = row
    end
    local new = row[g]
    if new then return new end
  end
  local ms, ids, n = members(o, old), {}, 0
  if added then
    -- (g goes in among old's members by birth: see init_groups)
    local birth = o.birth
    local bg = birth[g]
    for i = 1, #ms do
      local m = ms[i]
      if bg and birth[m] > bg then
        n = n + 1
        ids[n] = g
        bg = nil
      end
      n = n + 1
      ids[n] = m
    end
    if bg then ids[n + 1] = g end
  else
    for i = 1, #ms do
      if ms[i] ~= g then
        n = n + 1
        ids[n] = ms[i]
      end
    end
  end
  -- (In birth order, as every small set's name is; a big set shrinking to
  -- a small one lists its members in no order.)
  if o.set_hash[old] then sort(ids, o.by_birth) end
  local new
  if ids[1] == nil then
    new = 0
  elseif ids[2] == nil then
    new = ids[1]
  else
    new = group_of_set(o, ids)
  end
  if row then row[g] = new end
  return new
end

-- A job's counts, made from its callers and awaiters the first time it
-- needs them (until then it has one caller and no awaiter).
local function counts_of_many(o, job)
  local cnt = {}
  for i = H, #job do
    local h = job[i]
    if h then
      local g = M.group(o, rawget(h, 2))
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
      local ms = members(o, M.set_of(o, ws[j]))
      for i = 1, #ms do cnt[ms[i]] = (cnt[ms[i]] or 0) + 1 end
    end
  end
  return cnt
end

-- (The usual case, one caller and nobody waiting, without a loop: a loop
-- here sat inside the loop of follow, over every job a group follows,
-- and LuaJIT gave up compiling that loop ("loop unroll limit"), so a
-- loader awaiting 10,000 assets took about 9,000 instructions for each.)
local function counts(o, job)
  local cnt = o.src_count[job]
  if cnt then return cnt end
  local set = M.set_of(o, job)
  local h = rawget(job, H)
  if h and rawget(job, H + 1) == nil and o.awaiters[job] == nil then
    cnt = { [M.group(o, rawget(h, 2))] = 1 }
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
      moved(o, job, new)
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
  moved(o, job, new)
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
  change(o, job, M.group(o, rawget(h, 2)), 1)
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
  change(o, job, M.group(o, rawget(h, 2)), -1)
end

--- The job ended: nothing changes its counts again. Its set stays while it
--- still follows something (an ended job queued for its last resume leaves
--- what it waited on then, and takes its set's share back).
---
--- Most jobs have neither entry, so each is cleared only if present: LuaJIT
--- compiles `t[k] = nil` for a missing k as an insertion (a new hash node
--- holding nil), which cost every job two node inserts and the tables a
--- rehash now and then.
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
  add_set(o, job, M.set_of(o, waiter), 1)
end

-- Registers `waiter` as waiting on what `f` names (a job or a list of jobs).
local function follow(o, waiter, f)
  o.followed[waiter] = f
  if is_job(f) then return add(o, f, waiter) end
  for i = 1, #f do add(o, f[i], waiter) end
end

local function leave(o, aws, job, waiter)
  if list.set_remove(aws, job, waiter) and not job[STATE] then
    add_set(o, job, M.set_of(o, waiter), -1)
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
    if fresh then add_set(o, to, M.set_of(o, w), 1) end
  end
end

-- Memory that runs out in the middle of a change of callers or awaiters
-- leaves the counts half changed. So each change runs protected: one that
-- raises marks the orchestrator's counts broken (o.prio_broken), and they
-- are made anew (M.rebuild) from what they are counted from, each job's
-- callers and what each waiter follows, before anything reads them again:
-- at the next change, wait in a queue or step.
local WAITQ = F.WAITQ
local each = next -- (a table is walked with each, never pairs: see list.lua)

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
  for i = 1, #queued do moved(o, queued[i], M.group(o, first_source(queued[i]))) end
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
    local g1 = M.group(o, rawget(job[H], 2))
    o.src_count[job] = { [g1] = 1 }
    o.set_of[job] = g1
    o.nset_of = o.nset_of + 1
    for k = H + 1, #job do change(o, job, M.group(o, rawget(job[k], 2)), 1) end
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
    if job[WAITQ] then moved(o, job, M.set_of(o, job)) end
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

return M
