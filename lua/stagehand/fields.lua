-- Where a job keeps its fields: all in its table's array part, so a job is
-- one allocation (LuaJIT puts an array part of up to 16 slots right after
-- the table header) and its fields sit together in memory. A waiting job
-- is read again only when it wakes, by then far out of cache; with 100,000
-- waiting, a hash part of eight fields in a second block was a miss more
-- per wake, and 120 bytes more per job.
--
-- Slots 1 to 9 always hold a value (false for "none"), so `#job` counts
-- them; the callers' Handles follow, from H on. job.id, job.label and
-- job.key (the public fields) read these slots through the job's __index.
return {
  ORCH = 1, -- the orchestrator
  CID = 2, -- its core id while running (a small integer reused), false once ended
  CO = 3, -- its coroutine, false when it has none or it ended
  W = 4, -- what it is parked on (engine.lua), or false
  STATE = 5, -- false while running, then its end state
  OUT = 6, -- false while running, then its packed values or its Error
  ID = 7,
  LABEL = 8,
  KEY = 9, -- its key, or false
  H = 10, -- the first caller's Handle; more callers follow
}
