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
local logm = require "stagehand.log"
local list = require "stagehand.list"
local F = require "stagehand.fields"
local ORCH, H = F.ORCH, F.H
local is_job = F.is_job

local pairs = pairs

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
    local why = ok and ("returned " .. tostring(r) .. ", not a rank") or ("raised: " .. tostring(r))
    logm.guard(nil, "the log function", o.log,
      "[stagehand] a priority function " .. why .. "; counting it as '" .. o.ranks[o.default_rank] .. "'")
  end
  return o.default_rank
end

--- A job's effective rank: the highest of its callers' sources and of the
--- effective ranks of the jobs waiting on it.
function M.effective(job, cache)
  cache = cache or {}
  local r = cache[job]
  if r then return r end
  local o = job[ORCH]
  local worst = #o.ranks + 1
  cache[job] = worst -- a guard: a wait cycle cannot recurse forever
  local best = worst
  for i = H, #job do
    local h = job[i]
    local s = M.source_rank(o, rawget(h, 2), cache) -- raw: a Handle's __index is a function
    if s < best then best = s end
    if best == 1 then break end
  end
  if best > 1 then
    local aw = o.awaiters[job]
    if aw then
      for w in pairs(aw) do
        local s = M.effective(w, cache)
        if s < best then best = s end
        if best == 1 then break end
      end
    end
  end
  if best == worst then best = o.default_rank end
  cache[job] = best
  return best
end

-- Set by slots.lua: tells a queue that a waiter's rank may have risen.
M.changed = function() end

local function add(o, job, waiter)
  list.at(o.awaiters, job)[waiter] = true
  M.changed(o, job)
end

-- Registers `waiter` as waiting on what `f` names (a job or a list of jobs).
function M.follow(o, waiter, f)
  o.followed[waiter] = f
  if is_job(f) then return add(o, f, waiter) end
  for i = 1, #f do add(o, f[i], waiter) end
end

local function leave(aws, job, waiter)
  local set = aws[job]
  if set then
    set[waiter] = nil
    if next(set) == nil then aws[job] = nil end
  end
end

--- The waiter stops waiting on whatever it registered with.
function M.unfollow(o, waiter)
  local f = o.followed[waiter]
  if not f then return end
  o.followed[waiter] = nil
  local aws = o.awaiters
  if is_job(f) then
    leave(aws, f, waiter)
  else
    for i = 1, #f do leave(aws, f[i], waiter) end
  end
end

--- Everyone waiting on `from` now waits on `to` (a `when` joining a run).
function M.move_awaiters(o, from, to)
  local set = o.awaiters[from]
  if not set then return end
  o.awaiters[from] = nil
  local dest = list.at(o.awaiters, to)
  M.changed(o, to)
  for w in pairs(set) do
    dest[w] = true
    local f = o.followed[w]
    if f == from then
      o.followed[w] = to
    elseif f and not is_job(f) then
      for i = 1, #f do
        if f[i] == from then f[i] = to end
      end
    end
  end
end

return M
