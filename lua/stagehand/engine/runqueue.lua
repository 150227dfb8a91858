-- The run queue: a ring buffer of the jobs whose continuation is due, oldest
-- first (o.q, o.qcap, o.qh, o.qt, o.qn). Queueing from outside a step
-- tells the driver, so the host steps soon.
local F = require "stagehand.engine.fields"
local QUEUED = require("stagehand.engine.marks").QUEUED
local STATE, CO, W = F.STATE, F.CO, F.W

local M = {}

local function grow(o)
  local q, cap, h = o.q, o.qcap, o.qh
  local nq = {}
  for i = 1, o.qn do
    nq[i] = q[h]
    h = h + 1
    if h > cap then h = 1 end
  end
  for i = o.qn + 1, cap * 2 do nq[i] = false end
  o.q, o.qcap, o.qh, o.qt = nq, cap * 2, 1, o.qn + 1
end

function M.push(o, job)
  if o.qn == o.qcap then grow(o) end
  local t = o.qt
  o.q[t] = job
  t = t + 1
  if t > o.qcap then t = 1 end
  o.qt = t
  o.qn = o.qn + 1
  if not o.stepping then o.driver.reschedule(o) end
end

--- Makes room for one more job now, so that the push that follows needs
--- no memory (a grant's: slots.lua).
function M.room(o)
  if o.qn == o.qcap then grow(o) end
end

function M.pop(o)
  local h = o.qh
  local job = o.q[h]
  o.q[h] = false
  h = h + 1
  if h > o.qcap then h = 1 end
  o.qh = h
  o.qn = o.qn - 1
  return job
end

-- (k: how many entries from the head were walked; no closure is made, for
-- a step cut short by its budget counts its cleanups with it)
local function next_queued(o, k)
  local cap = o.qcap
  while k < o.qn do
    local i = o.qh + k
    if i > cap then i = i - cap end
    k = k + 1
    local job = o.q[i]
    if job then return k, job end
  end
end

--- Each queued job in turn, oldest first: `for _, job in M.queued(o)`.
function M.queued(o) return next_queued, o, 0 end

--- Ended jobs whose cleanup (the resume after their aborted wait) is still
--- queued: a step that left them counts them, so `while step(0) > 0`
--- leaves nothing behind.
function M.cleanups(o)
  local n = 0
  for _, job in M.queued(o) do
    if job[STATE] and job[CO] and job[W] == QUEUED then n = n + 1 end
  end
  return n
end

function M.init(o)
  o.q, o.qcap, o.qh, o.qt, o.qn = {}, 64, 1, 1, 0
  for i = 1, 64 do o.q[i] = false end
end

return M
