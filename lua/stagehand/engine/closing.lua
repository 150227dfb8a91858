-- Closing an orchestrator: every job running is cancelled and the cleanup
-- of those parked mid-work runs before close returns, in as many rounds as
-- cleanup needs (it may start jobs of its own, which are cancelled too).
local E = require "stagehand.engine.engine"
local F = require "stagehand.engine.fields"
local each = require("stagehand.core.compat").each

local ORCH, CO, W, STATE = F.ORCH, F.CO, F.W, F.STATE

local M = {}

-- What close ends (o.closing_jobs, a set): every job running when it was
-- called, and every job started inside their cleanup or in reaction to
-- their cancellation (an on_end or abort handler, a watcher): E.start adds
-- those. A job started otherwise after close, say by the work that called
-- it, is not close's to end.
local function cancel(o, jobs, reason) -- (jobs in start order)
  local was = o.close_cancelling -- (a close from a handler it runs nests here)
  o.close_cancelling = true
  for i = 1, #jobs do E.cancel(jobs[i], reason) end
  o.close_cancelling = was
end

local function cancel_running(o, reason)
  o.close_reason = reason
  local doomed = o.closing_jobs
  if not doomed then
    doomed = {}
    o.closing_jobs = doomed
  end
  local running, cur = E.running_jobs(o), E.current
  for i = 1, #running do
    -- (the job that called close is cancelled, but what its work goes on
    -- to start is not close's)
    if running[i] ~= cur then doomed[running[i]] = true end
  end
  cancel(o, running, reason)
end

-- A job cancelled while parked mid-work is queued for one more resume, in
-- which its wait raises its end and its cleanup runs. Nobody steps a
-- closed orchestrator, so close gives those resumes a step of their own
-- (E.step: orch:step refuses inside a job, and this may run inside a job
-- of another orchestrator, whose resume this nests in like any callback).
-- Jobs that cleanup starts are cancelled before their work runs (run),
-- so they have no cleanup of their own: the rounds end once every cleanup
-- has run, however many jobs cleanup starts.
local function finish(o, reason)
  local doomed = o.closing_jobs or {}
  while true do
    o.closing = false -- (a close called again in these rounds adds to doomed: it ends here too)
    E.step(o)
    local running, cleaning = {}, false
    for job in each, doomed do
      if not job[STATE] then
        running[#running + 1] = job
      elseif job[CO] and job[W] == E.QUEUED then
        cleaning = true -- (ended, its cleanup resume still to run; one whose
        -- work is on the stack below this close goes on when close returns)
      end
    end
    if running[1] == nil and not cleaning then break end
    table.sort(running, F.by_id)
    cancel(o, running, reason)
  end
  o.closing = false
  o.driver.close()
end

-- Runs fn(o, reason) as a close under way (o.close_depth counts them: a
-- close may be made inside another's handlers or cleanup). The set of jobs
-- they end is let go once none is under way and none waits to finish.
local function under_way(fn, o, reason)
  o.close_depth = o.close_depth + 1
  local ok, err = pcall(fn, o, reason)
  o.close_depth = o.close_depth - 1
  if o.close_depth == 0 then
    o.close_cancelling = false -- (even after an error mid-cancel)
    if not o.closing then o.closing_jobs = false end
  end
  if not ok then error(err, 0) end
end

--- Finishes a close made inside the step or run now ending (orch:step, orch:run).
function M.finish_close(o)
  under_way(finish, o, o.closing)
end

local function close(o, reason)
  cancel_running(o, reason)
  local cur = E.current
  if o.stepping or (cur and cur[ORCH] == o) then
    -- Inside its own step, or inside one of its own jobs started by a run
    -- outside any step: that step or run finishes the close once it is
    -- over (orch:step, orch:run).
    o.closing = reason
    o.driver.close()
  else
    finish(o, reason)
  end
end

--- Closes `o` (orch:close): cancels its running jobs, and runs their
--- cleanup now unless the close was made inside o's own step or job.
function M.close(o, reason)
  under_way(close, o, reason)
end

return M
