-- What a wait follows (the jobs it waits on, through Handles, keys,
-- `when`s, barriers and groups), and the search for a cycle of waits that
-- an await would close.
local errors = require "stagehand.engine.errors"
local list = require "stagehand.engine.list"
local F = require "stagehand.engine.fields"
local marks = require "stagehand.engine.marks"
local sources = require "stagehand.rank.sources"
local E = require "stagehand.engine.engine"

local ORCH, CO, W, STATE, LABEL = F.ORCH, F.CO, F.W, F.STATE, F.LABEL
local QUEUED, SLEEP, KEYWAIT = marks.QUEUED, marks.SLEEP, marks.KEYWAIT
local is_job = F.is_job

local M = {}

-- What a wait on `x` follows, seen from orchestrator `o`: the job or jobs of
-- `o` it waits on, or nil. A wait on any job of another orchestrator follows
-- nothing, as a wait on a future does: that orchestrator may be hidden or
-- never stepped, so the waiter keeps its own stall clock running, and
-- priorities, cycles and idleness stay within each orchestrator (the core's
-- priority groups and stall clocks are each orchestrator's own).
--
-- With `loose`, the jobs of `o` it waits on among whatever else (a group
-- holding a Future beside them, or jobs of another orchestrator), and
-- whether there is nothing else: a job awaiting it awaits those jobs (its
-- rank reaches them, a cycle through them raises), and its own clock
-- pauses only when there is nothing else.
local function follows_in(o, x, loose)
  local f, whole = x:_follows(loose)
  if f == nil then return nil end
  if is_job(f) then
    if f[ORCH] ~= o then return nil end
    return f, true
  end
  for i = 1, #f do
    if f[i][ORCH] ~= o then
      if not loose then return nil end
      local own, n = {}, 0
      for j = 1, #f do
        if f[j][ORCH] == o then
          n = n + 1
          own[n] = f[j]
        end
      end
      if n == 0 then return nil end
      return own, false
    end
  end
  return f, whole ~= false
end
M.follows_in = follows_in

-- A path of jobs from `job` back to `target` through what each awaits, or
-- nil. `seen` and `path` may be shared by searches from several starts (the
-- parts of stagehand.all): a job explored once without reaching target
-- never will, and a search that fails leaves path as it found it. (No
-- closures here: LuaJIT cannot compile making one, and an await on a
-- list of 10,000 Handles searches from each.)
--
-- Depth first with a stack of its own, not by recursion: a chain of awaits
-- may be thousands deep (job i awaiting job i-1), past Lua's own stack. The
-- stack is kept between calls (the search runs no game code, so none can
-- start another in the middle): frame k is the job path[base + k] and what
-- it follows, and how far along that the search has gone.
local follows_stack, next_stack = {}, {}

local function find_cycle(target, job, seen, path)
  local base = #path
  local top = 0
  while true do
    if job == target then
      for k = 1, top do follows_stack[k] = false end
      return path
    end
    if not (seen[job] or job[STATE]) then
      seen[job] = true
      local w = job[W]
      -- (a job with no work follows what it waits on only where that says
      -- so: a load tracker's idle Handle follows the jobs it tracks)
      if w and w ~= QUEUED and w ~= SLEEP and w ~= KEYWAIT and (job[CO] or w._through) then
        local f = follows_in(job[ORCH], w, true)
        if f ~= nil then
          top = top + 1
          path[base + top] = job
          follows_stack[top], next_stack[top] = f, 1
        end
      end
    end
    -- The next job to explore: the next one the deepest frame follows,
    -- dropping the frames that have none left.
    job = nil
    while top > 0 do
      local f, i = follows_stack[top], next_stack[top]
      if is_job(f) then
        if i == 1 then job = f end
      elseif i <= #f then
        job = f[i]
      end
      if job ~= nil then
        next_stack[top] = i + 1
        break
      end
      follows_stack[top] = false
      path[base + top] = nil
      top = top - 1
    end
    if job == nil then return nil end
  end
end

local function cycle_error(job, path)
  if path[1] == nil then
    return errors.new("cycle", job[LABEL], job[LABEL] .. " awaits its own Handle: a cycle of waits",
      { jobs = { job[LABEL] } })
  end
  -- Every job of the cycle is in `jobs`; the message names at most a dozen
  -- (a cycle may be thousands of links long).
  local n = #path
  local jobs = { job[LABEL] }
  for i = 1, n do jobs[i + 1] = path[i].label end
  local names
  if n <= 10 then
    names = table.concat(jobs, " -> ")
  else
    names = table.concat(jobs, " -> ", 1, 6) .. " -> ... (" .. (n - 10) .. " more) ... -> "
      .. table.concat(jobs, " -> ", n - 3, n + 1)
  end
  return errors.new("cycle", job[LABEL], "awaiting " .. path[1].label
    .. " would close a cycle of waits: " .. names .. " -> " .. job[LABEL], { jobs = jobs })
end

-- Raises a cycle Error if waiting on what `x` follows would close a cycle;
-- returns the job or jobs x follows (its priority flows to them), or nil,
-- and whether that is all it waits on (the waiter's own clock then pauses).
function M.check_follows(job, x)
  local o = job[ORCH]
  local f, whole = follows_in(o, x, true)
  if f == nil then return nil end
  if not sources.awaited(o, job) and not E.followed_outside(o, job) then
    -- Nothing waits on `job` (sources.lua files every job parked on
    -- something that follows it), so no chain of waits leads back to it:
    -- only a wait on itself would close a cycle. A chain of loaders each
    -- awaiting the one made before it builds in O(n) this way, not O(n^2).
    if f == job or (not is_job(f) and list.has(f, job)) then error(cycle_error(job, {}), 0) end
    return f, whole
  end
  local path
  if is_job(f) then
    path = find_cycle(job, f, {}, {})
  else
    local seen, walked = {}, {}
    for i = 1, #f do
      path = find_cycle(job, f[i], seen, walked)
      if path then break end
    end
  end
  if path then error(cycle_error(job, path), 0) end
  return f, whole
end

return M
