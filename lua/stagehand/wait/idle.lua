-- Idleness: whether every running job waits, directly or through what it
-- awaits, on when_idle (a background preloader's cue).
local F = require "stagehand.engine.fields"
local marks = require "stagehand.engine.marks"
local follows_in = require("stagehand.wait.follows").follows_in

local CO, W = F.CO, F.W
local QUEUED, SLEEP, KEYWAIT = marks.QUEUED, marks.SLEEP, marks.KEYWAIT
local is_job, by_id = F.is_job, F.by_id
local each = require("stagehand.core.compat").each

local E = require "stagehand.engine.engine"
local settle = require "stagehand.engine.settle"

local M = {}

-- Jobs that are, directly or through what they await, waiting on when_idle.
-- What a job is parked on that may follow other jobs (an awaitable, a
-- queue), or nil: it runs, is queued, asleep or waiting for its key's run
-- to start, or it has no coroutine (unless what it waits on follows jobs:
-- a load tracker's idle Handle, idle once the jobs it tracks are). (Both
-- idle checks below start here.)
local function parked_on(job)
  local w = job[W]
  if not w or w == QUEUED or w == SLEEP or w == KEYWAIT then return nil end
  if not job[CO] and not w._through then return nil end
  return w
end

-- Whether `start` is, directly or through what it awaits, waiting on
-- when_idle: an idle waiter itself, or parked following jobs that all are.
-- memo holds each job's answer (false while it is being worked out: a cycle
-- of waits is not idle). Depth first on a stack of its own, like
-- find_cycle: a chain of awaits thousands deep overflowed Lua's stack and
-- made every step raise. Frame k is a job, what it follows, and which of
-- those comes next; `got` is the answer for the job last finished.
local idle_jobs, idle_follows, idle_next = {}, {}, {}

local function idle_blocked(o, start, memo)
  local m = memo[start]
  if m ~= nil then return m end
  local top = 0
  local job = start -- a job to work out, or nil
  local got
  while true do
    if job ~= nil then
      memo[job] = false
      got = false
      if o.idle[job] then
        memo[job] = true
        got = true
      else
        local w = parked_on(job)
        local f = w and follows_in(o, w)
        if f ~= nil and (is_job(f) or #f > 0) then
          top = top + 1
          idle_jobs[top], idle_follows[top], idle_next[top] = job, f, 1
          got = nil -- (a frame to work on, no answer yet)
        end
      end
      job = nil
    end
    -- The top frame takes the answer for its last job: a job not waiting
    -- on when_idle ends it false; else its next job, or true at the end.
    while top > 0 and job == nil do
      local finished
      if got == false then
        finished = false
      else
        local f, i = idle_follows[top], idle_next[top]
        local nxt
        if is_job(f) then
          if i == 1 then nxt = f end
        elseif i <= #f then
          nxt = f[i]
        end
        if nxt == nil then
          finished = true
        else
          idle_next[top] = i + 1
          local known = memo[nxt]
          if known == nil then job = nxt else got = known end
        end
      end
      if finished ~= nil then
        memo[idle_jobs[top]] = finished
        idle_jobs[top], idle_follows[top] = false, false
        top = top - 1
        got = finished
      end
    end
    if job == nil then return got end
  end
end

-- A job surely not waiting on when_idle, told in O(1): it has no
-- coroutine, is running, queued or asleep, or is parked on something that
-- follows no job (a future, a slot queue). The idle check looks for one of
-- these before it walks what the others await: a scene loader awaiting
-- `stagehand.all` of 10,000 assets made every step whose check met it first
-- list all 10,000 (half a millisecond a step), though any asset waiting on
-- its download already said "not idle".
local function surely_busy(o, job)
  if o.idle[job] then return false end
  local w = parked_on(job)
  if not w then return true end
  if rawget(w, "_group") then return false end -- a group: walked if need be
  return follows_in(o, w) == nil
end

--- The when_idle waiters to settle, in start order, once each running job
--- waits on one; nil while the world is busy (or no check is due).
--- (The check stays due until it has an answer: one that memory running
--- out cut short is made again, not forgotten with a waiter left waiting.)
function M.settled(o)
  if o.nidle == 0 or not o.idle_dirty then return nil end
  for _, job in each, o.by_slot do
    if surely_busy(o, job) then
      o.idle_dirty = false
      return nil
    end
  end
  local memo = {}
  for _, job in each, o.by_slot do
    if not idle_blocked(o, job, memo) then
      o.idle_dirty = false
      return nil
    end
  end
  local waiters = {}
  for job in each, o.idle do waiters[#waiters + 1] = job end
  table.sort(waiters, by_id)
  o.idle_dirty = false
  return waiters
end

--- Makes `job` a when_idle waiter (a job with no work of its own).
function M.add_waiter(job)
  local o = job[F.ORCH]
  job[W] = marks.IDLE
  o.idle[job] = true
  -- (No idle check is marked due: with no waiter the mark is never
  -- cleared, a new orchestrator starts with it set, and a world a check
  -- found busy since is busy still.)
  o.nidle = o.nidle + 1
end

--- Something changed that may leave the world idle: a check is due.
function M.mark_due(o) o.idle_dirty = true end

--- Whether any when_idle waiter waits.
function M.waiting(o) return o.nidle > 0 end

-- What the engine tells idleness. A job that ends may leave the world
-- idle: the check is due; an end from outside a step (a barrier's last
-- arrival, a cancel) reschedules, for the driver's timer may be set for a
-- stall check seconds away.
E.on("leave_idle", function(o, job)
  if o.nidle > 0 and o.idle[job] then
    o.idle[job] = nil
    o.nidle = o.nidle - 1
  end
  o.idle_dirty = true
end)
E.on("job_gone", function(o)
  if o.nidle > 0 and not o.stepping then o.driver.reschedule(o) end
end)
-- Once a step, when its run queue ran dry: settles the waiters.
E.on("quiet", function(o)
  local waiters = M.settled(o)
  if waiters then
    local done = settle.pack()
    for i = 1, #waiters do E.end_job(waiters[i], "done", done) end
  end
end)
-- (a when_idle waiter, and something changed since the last idle check)
E.on("idle_due", function(o) return o.idle_dirty and o.nidle > 0 end)

return M
