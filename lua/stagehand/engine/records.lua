-- What report, dump and watch show of a job, and telling the watchers.
local errors = require "stagehand.engine.errors"
local logm = require "stagehand.engine.log"
local F = require "stagehand.engine.fields"
local marks = require "stagehand.engine.marks"
local clock = require "stagehand.engine.clock"
local list = require "stagehand.engine.list"

local ORCH, CID, W, STATE, OUT, ID, LABEL, KEY, H = F.ORCH, F.CID, F.W, F.STATE, F.OUT, F.ID, F.LABEL, F.KEY, F.H
local SINCE, STARTED, SLEEP_UNTIL = F.SINCE, F.STARTED, F.SLEEP_UNTIL
local QUEUED, SLEEP, KEYWAIT = marks.QUEUED, marks.SLEEP, marks.KEYWAIT

local M = {}

-- How a job's priority reads in a record, and where it came from: told by
-- the priority layer above (rank/priority.lua), which the engine does not
-- require.
local describe_priority = function() return nil, nil end
function M.describe_priority_with(fn) describe_priority = fn end

-- What report and watch show of a job. A job keeps its start time; its end
-- time is given by whoever saw it end (notify).
function M.record(job, ended_at, cache)
  local o = job[ORCH]
  local slot = job[CID]
  local st = job[STATE]
  local err = st and st ~= "done" and job[OUT] or nil
  local rec = {
    id = job[ID],
    key = job[KEY] or nil, -- (false in the job: no key)
    label = job[LABEL],
    state = st or "running",
    started_at = job[STARTED],
    ended_at = ended_at,
    error = err and tostring(err) or nil,
    done = rawget(job, "done_n"), -- (job:progress(done, total): how far it is)
    total = rawget(job, "total_n"),
  }
  rec.priority, rec.priority_from = describe_priority(o, job, cache, st)
  if slot and job[W] then
    rec.waiting_on, rec.waiting_since = M.describe_wait(job), job[SINCE] or nil
  end
  return rec
end

-- Jobs whose start the watchers are being told, and the time of an end
-- that came meanwhile (a watcher that closed the orchestrator): that end is
-- told once every watcher has heard the start, so none hears a job end
-- before it starts.
local telling = setmetatable({}, { __mode = "k" })

local function tell_each(o, rec)
  local ws = o.watchers
  for i = 1, #ws do
    local fn = ws[i]
    if fn then logm.guard(o.log, "a watcher", fn, rec) end
  end
end

-- (orch:step names a watcher that calls it: o.watching counts the tells
-- under way, and is put back whatever a tell raises, memory running out
-- while a watcher's error was logged included, or no step would run again)
local function tell(o, rec)
  local before = o.watching
  o.watching = before + 1
  local ok, err = pcall(tell_each, o, rec)
  o.watching = before
  if not ok then error(err, 0) end
end

function M.notify(o, job, ending)
  local tr = o.tracer -- (orch:trace: recording, told first)
  if tr then tr:told(job, ending, clock.now_or_last(o)) end
  if o.watchers[1] == nil then return end
  if ending then
    -- (A job's end is told in the middle of ending it: a clock that breaks
    -- here gives way to the last good reading rather than stop the end.)
    local ended_at = clock.now_or_last(o)
    if telling[job] then
      telling[job] = ended_at
      return
    end
    return tell(o, M.record(job, ended_at))
  end
  telling[job] = true
  tell(o, M.record(job))
  local ended_at = telling[job]
  telling[job] = nil
  if ended_at ~= true then tell(o, M.record(job, ended_at)) end
end

function M.describe_wait(job)
  local w = job[W]
  if w == SLEEP then return "a sleep until " .. errors.ms(job[SLEEP_UNTIL]) end
  if w == QUEUED then return "its turn to run" end
  if w == KEYWAIT then return "a run of key " .. job[KEY] .. " to start" end
  if w == marks.IDLE then return "every other job to be waiting (when_idle)" end
  if w then return w:_describe() end
  return nil
end

--- Adds a watcher (told of every start and end); returns an unsubscribe.
function M.watch(o, fn)
  local ws = o.watchers
  ws[#ws + 1] = fn
  return function() list.remove_value(ws, fn) end
end

--- Logs each job of o.unhandled (ended failed in this step) that nobody
--- has heard of by the step's end: its label, cause and traceback.
--- (Each leaves the list once reported, marked false, and the list is
--- emptied in place at the end: memory that runs out while a line is
--- made leaves the rest for the next step's report.)
function M.report_unhandled(o)
  local failed = o.unhandled
  if failed[1] == nil then return end
  for i = 1, #failed do
    local job = failed[i]
    if job then
      local seen = false
      for j = H, #job do
        if job[j]._seen then seen = true end
      end
      if not seen then
        local err = job[OUT]
        local msg = "[stagehand] " .. job[LABEL] .. " failed and nobody waited on it: "
          .. errors.describe_raised(err.cause)
        if err.traceback then msg = msg .. "\n" .. err.traceback end
        logm.guard(nil, "the log function", o.log, msg)
      end
      job.unheard = nil
      failed[i] = false
    end
  end
  for i = #failed, 1, -1 do failed[i] = nil end
end

--- orch:dump()'s text: the report `rs` at time `now`, one job a line.
function M.dump(o, rs, now, visible)
  local lines = { string.format("stagehand: %d job(s) running%s", o.nrunning,
    visible and "" or " (hidden: stall clocks paused)") }
  for _, r in ipairs(rs) do
    local s = string.format("  #%d %s [%s, %s] running for %s ms", r.id, r.label, r.state, r.priority,
      errors.ms(now - r.started_at))
    if r.key then s = s .. " key " .. r.key end
    if r.total then s = s .. " progress " .. errors.ms(r.done) .. "/" .. errors.ms(r.total) end
    if r.waiting_on then
      s = s .. string.format("; waiting on %s for %s ms", r.waiting_on, errors.ms(now - r.waiting_since))
    end
    if r.priority_from then s = s .. "; " .. tostring(r.priority) .. " from " .. r.priority_from .. " awaiting it" end
    lines[#lines + 1] = s
  end
  return table.concat(lines, "\n")
end

return M
