-- Where a job keeps its fields: all in its table's array part, so a job is
-- one allocation (LuaJIT puts an array part of up to 16 slots right after
-- the table header) and its fields sit together in memory. A waiting job
-- is read again only when it wakes, by then far out of cache; with 100,000
-- waiting, a hash part of eight fields in a second block was a miss more
-- per wake, and 120 bytes more per job.
--
-- Slots 1 to 14 always hold a value (false for "none"), so `#job` counts
-- them; the callers' Handles follow, from H on. (What a job keeps per slot
-- lives here too, not in arrays of the orchestrator indexed by core id: a
-- job waking after 100,000 others then touches one block, not six.) job.id, job.label and
-- job.key (the public fields) read these slots through the job's __index.
local F = {
  -- What a pooled job's grant and end read, first: with 100,000 jobs
  -- waiting, each is far out of cache by then, and the fewer of the
  -- table's cache lines its grant and end touch, the fewer misses.
  ORCH = 1, -- the orchestrator
  CID = 2, -- its core id while running (a small integer reused), false once ended
  CO = 3, -- its coroutine, false when it has none or it ended
  W = 4, -- what it is parked on (engine.lua), or false
  STATE = 5, -- false while running, then its end state
  OUT = 6, -- false or TOLD while running, then its packed values or its Error
  HELD = 7, -- its slot's release, {n =, [queue] = release} for several, or false (slots.lua)
  WAITQ = 8, -- the slot or budget queue it waits in, or false
  KEY = 9, -- its key, or false
  ID = 10,
  LABEL = 11,
  SINCE = 12, -- when it parked, or false
  STARTED = 13, -- when it started
  SLEEP_UNTIL = 14, -- when its sleep ends, or false
  H = 15, -- the first caller's Handle; more callers follow
}

-- job[OUT] while the job runs once any of its callers' Handles has gained
-- a field (a listener, a signal subscription, an owner: handle.lua's
-- __newindex). Until then its end has nobody to tell, and ending does not
-- read the Handles at all: with 100,000 jobs waiting, each Handle read at
-- the end was a cache miss more per job.
F.TOLD = setmetatable({}, { __name = "stagehand.TOLD" })

-- The metatable every job has. It lives here, where nothing is required,
-- so any module can tell a job from a list of jobs (what a settle-able
-- follows is one or the other) without a require cycle; job.lua gives it
-- its behaviour through define_jobs.
local JobMT = { __name = "stagehand.Job" }
F.JobMT = JobMT
local getmetatable = getmetatable
function F.is_job(f) return getmetatable(f) == JobMT end

--- How a job reads, writes and prints (job.lua's, set once).
function F.define_jobs(index, newindex, tostring)
  JobMT.__index, JobMT.__newindex, JobMT.__tostring = index, newindex, tostring
end

--- Orders jobs by id, which is their start order (table.sort's less-than).
local ID = F.ID
function F.by_id(a, b) return a[ID] < b[ID] end

return F
