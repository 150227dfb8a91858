-- Folder rank/ (layer 2): what goes first, and what loads once.
-- priority.lua (rank names and numbers, priority functions read once a
-- step, a job's effective rank), sources.lua (who reaches whom: the sets of
-- priority sources callers and awaiters lend a job), keys.lua (running
-- keyed jobs, `when` waiters, remembered outcomes). It offers the waits
-- above sources.on_moved and sources' filing of waiters by set of sources.
--
-- What is on screen goes first: ranks, priority sources read live, and a
-- job's effective rank, which it inherits from everyone following or
-- waiting on it.
--
-- A rank is a priority number negated: lower goes first, as the core's
-- pools order their groups (options.ranks makes the names' ranks). A
-- source is a rank name, a number (kept boxed: handle.box), a function
-- returning either (read at every decision), or nil (the default). A decision
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
local logm = require "stagehand.engine.log"
local errors = require "stagehand.engine.errors"
local list = require "stagehand.engine.list"
local F = require "stagehand.engine.fields"
local ORCH, H, STATE = F.ORCH, F.H, F.STATE
local by_id = F.by_id

local rawget, sort, concat = rawget, table.sort, table.concat

local M = {}

local rank_key = require("stagehand.engine.options").rank_key

--- What a rank shows as: its name, or the number it stands for.
function M.name(o, r)
  local ranks = o.rank_list
  for i = 1, #ranks do
    if ranks[i] == r then return o.ranks[i] end
  end
  r = -r
  if r == 0 then r = 0 end
  return r
end

-- The rank of what a priority function answered: nil for anything but a
-- rank name or a number.
local function answer_rank(o, v)
  if type(v) == "string" then return o.rank_of[v] end
  if type(v) == "number" and v == v then return rank_key(v) end
  return nil
end

--- The rank of one source in a decision; a function that raises or answers
--- something other than a rank name or a number counts as the default and
--- is logged once.
function M.source_rank(o, src, cache)
  if src == nil then return o.default_rank end
  local t = type(src)
  if t == "string" then return o.rank_of[src] or o.default_rank end
  if t == "table" then return rank_key(src[1]) end -- (a number's box)
  if cache then
    local r = cache[src]
    if r then return r end
  end
  local ok, r = pcall(src)
  local rank = ok and answer_rank(o, r) or M.bad_source(o, src, ok, r)
  if cache then cache[src] = rank end
  return rank
end

--- The rank of a priority function that raised (ok false, r its error) or
--- answered r, not a rank: the default, logged once per function.
function M.bad_source(o, src, ok, r)
  if not o.bad_sources[src] then
    o.bad_sources[src] = true
    local show = errors.show
    local why = ok and ("returned " .. show(r) .. ", not a rank name or a number") or ("raised: " .. show(r))
    logm.guard(nil, "the log function", o.log,
      "[stagehand] a priority function " .. why .. "; counting it as '" .. tostring(M.name(o, o.default_rank)) .. "'")
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
  if r ~= nil then return r or nil end -- (false: the guard below)
  local o = job[ORCH]
  cache[job] = false -- a guard: a wait cycle cannot recurse forever
  local best -- (nil: nothing reaches it yet)
  local sources, n = {}, 0 -- (a caller's source may be nil: the default)
  for i = H, #job do
    n = n + 1
    sources[n] = rawget(job[i], 2) -- raw: a Handle's __index is a function
  end
  local aw = o.awaiters[job]
  local waiters = aw and list.members(aw, by_id) -- (in start order: see counts_of_many)
  for i = 1, n do
    local s = M.source_rank(o, sources[i], cache)
    if best == nil or s < best then best = s end
  end
  if waiters then
    for i = 1, #waiters do
      if budget then
        if budget.left <= 0 then break end
        budget.left = budget.left - 1
      end
      local s = walk(waiters[i], cache, budget)
      if s ~= nil and (best == nil or s < best) then best = s end
    end
  end
  if best == nil then best = o.default_rank end
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

--- Where a job's effective rank comes from, for report, dump and the
--- trace: nil when one of its own callers gives it (or nothing does: the
--- default), else the job awaiting it that gives it, found down the
--- awaiters ("#7 portrait", or "#9 loader, through #7 portrait").
function M.origin(job, cache)
  cache = cache or {}
  local o = job[ORCH]
  local rank = M.effective(job, cache)
  -- (a priority function read here is game code, and may end one of the
  -- callers: a caller gone from the list is passed over)
  for i = H, #job do
    local h = job[i]
    if h and M.source_rank(o, rawget(h, 2), cache) == rank then return nil end
  end
  local through = {}
  local seen = { [job] = true }
  local at = job
  for _ = 1, 16 do -- (a chain of awaits named a few links deep)
    local aw = o.awaiters[at]
    local ws = aw and list.members(aw, by_id)
    local next_job
    for i = 1, ws and #ws or 0 do
      local w = ws[i]
      if not seen[w] and M.effective(w, cache) == rank then
        next_job = w
        break
      end
    end
    if not next_job then break end
    seen[next_job] = true
    through[#through + 1] = "#" .. next_job[F.ID] .. " " .. next_job[F.LABEL]
    at = next_job
    for i = H, #at do
      local h = at[i]
      if h and M.source_rank(o, rawget(h, 2), cache) == rank then
        local n = #through
        if n == 1 then return through[1] end
        local path = {}
        for k = n - 1, 1, -1 do path[#path + 1] = through[k] end
        return through[n] .. ", through " .. concat(path, ", through ")
      end
    end
  end
  return through[1]
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
-- follow, unfollow and move_awaiters (sources.lua), and a set that changes
-- is passed on to what the job waits on (waits never form a cycle:
-- awaiting one raises) and re-files the job in its queue.

-- Registered by sources.lua (on_repair): makes the counts anew once a
-- change that ran out of memory left them broken (o.prio_broken).
local repair = function() end
function M.on_repair(fn) repair = fn end

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
  o.fn_group = {} -- group -> true, for groups of one function or one number's box (collectable)
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
  -- a function in several sets is called once per round. (Keyed by the
  -- function's group, an array index: keyed by the function, a game that
  -- gives every job a closure of its own paid two inserts into weak hash
  -- tables a job. A reused id is cleared by new_group.)
  o.prio_broken = false -- (memory ran out mid-change: sources.rebuild)
  o.prio_snapshot = false
  o.round = 0
  o.seen_round = {}
  o.seen_rank = {}
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
      o.fixed_rank[g] = nil -- (a number's box had one)
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
  o.seen_round[g] = nil -- (read for another source before)
  return g
end

function M.group(o, src)
  if src == nil then return 0 end
  local g = o.group_of[src]
  if g then return g end
  local t = type(src)
  if t ~= "string" then -- (a function or a number's box: the collector may take it)
    local made = o.fn_made + 1
    o.fn_made = made
    if made >= o.sweep_at and o.free_groups[1] == nil then sweep(o) end
  end
  g = new_group(o)
  o.group_of[src] = g
  o.source_of[g] = src
  if t ~= "function" then o.fixed_rank[g] = M.source_rank(o, src, nil) end
  if t ~= "string" then o.fn_group[g] = true end
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
  local fixed = o.fixed_rank[ids[1]]
  for i = 2, #ids do
    if fixed == nil then break end
    local r = o.fixed_rank[ids[i]]
    if r == nil then
      fixed = nil
    elseif r < fixed then
      fixed = r
    end
  end
  o.fixed_rank[g] = fixed
  return g
end

--- The group a job waits under: its set of sources.
function M.set_of(o, job)
  if o.prio_broken then repair(o) end
  local g = o.set_of[job]
  if g then return g end
  local h = rawget(job, H)
  if not h then return 0 end
  return M.group(o, rawget(h, 2)) -- (raw: a Handle's __index is a function)
end

--- The rank of source group g, whose function is src, in this grant
--- round: read once a round, and remembered under g only while g still
--- names src (the read runs game code, which may let g go and its id be
--- reused).
function M.round_rank(o, g, src)
  local round = o.round
  if o.seen_round[g] == round then return o.seen_rank[g] end
  local r = M.source_rank(o, src, nil)
  if o.source_of[g] == src then o.seen_round[g], o.seen_rank[g] = round, r end
  return r
end

--- The rank of source group g if this round knows it without reading a
--- function (a fixed rank, or one read already in this round), else nil.
function M.known_rank(o, g)
  local r = o.fixed_rank[g]
  if r then return r end
  if o.seen_round[g] == o.round then return o.seen_rank[g] end
  return nil
end

--- The rank of a set group in this grant round: the best of its members'.
function M.set_rank(o, g)
  local ms = o.members[g]
  local best = math.huge -- (a set has members: one of them sets it)
  local fixed = o.fixed_rank
  for i = 1, #ms do
    local m = ms[i]
    local r = fixed[m]
    if not r then
      local src = o.source_of[m]
      if src == nil then
        r = o.default_rank -- (a function no longer referenced: no job reads it)
      else
        r = M.round_rank(o, m, src)
      end
    end
    if r <= best then best = r end
  end
  return best
end

-- The rank of group g in one decision (cache: source -> rank).
set_rank_in = function(o, g, cache)
  local fixed = o.fixed_rank[g]
  if fixed then return fixed end
  local ms = o.members[g]
  if not ms then return M.source_rank(o, o.source_of[g], cache) end
  local best = math.huge -- (a set has members: one of them sets it)
  for i = 1, #ms do
    local m = ms[i]
    local r = o.fixed_rank[m] or M.source_rank(o, o.source_of[m], cache)
    if r <= best then best = r end
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

-- What sources.lua builds its counts with.
M.members, M.take_set, M.drop_set, M.next_big, M.next_set = members, take_set, drop_set, next_big, next_set

-- A job's record (report, dump, watch) shows its priority by name and,
-- while it runs, the job awaiting it that raised it.
require("stagehand.engine.records").describe_priority_with(function(o, job, cache, st)
  return M.name(o, M.effective(job, cache)), not st and M.origin(job, cache) or nil
end)

return M
