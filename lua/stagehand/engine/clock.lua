local settle = require "stagehand.engine.settle"
local describe = require("stagehand.engine.options").describe

local M = {}

-- The orchestrator's clock. Every reading that reaches the core is checked: a game's clock
-- that once returns nil, a string, NaN or infinity raises a clear error at
-- the call that read it, before anything was changed, instead of an error
-- from deep in the core that leaves a job half made or a step half run.

local function bad_clock(now)
  error("stagehand: the clock returned " .. describe(now) .. "; it must return a finite number of milliseconds", 0)
end
M.bad_clock = bad_clock

--- Whether v is a finite number: a time the core takes. (`v - v` is 0 for
--- every finite number, NaN for NaN and both infinities.)
local function finite(v) return type(v) == "number" and v - v == 0 end
M.finite = finite

-- The orchestrator's time never runs back. A clock that does (a wall
-- clock set back, a game resetting its own) counts as no time passing, and
-- the orchestrator's time goes on from where it was: o.clock_shift is what
-- the clock has lost so far, o.clock_high the latest time read. (Without
-- this a clock set back an hour held every sleep and stall clock for that
-- hour, and progress reported "earlier" than a job's last brought its
-- deadline forward under the one the core had filed.)
local function shifted(o, now)
  now = now + o.clock_shift
  local high = o.clock_high
  if now < high then
    o.clock_shift = o.clock_shift + (high - now)
    return high
  end
  o.clock_high = now
  return now
end

--- The orchestrator's clock, read and checked.
function M.now(o)
  local now = o.clock()
  if not finite(now) then bad_clock(now) end
  return shifted(o, now)
end

--- When a change happened: o.now inside a step; outside one (a future the
--- game settled between steps, a slot it freed, a caller it cancelled, or
--- a job's first resume inside run) the clock read now, kept as o.now.
--- What the change ended is progress then, not at the last step's time.
function M.game_now(o)
  if o.stepping then return o.now end
  local now = M.now_or_last(o)
  o.now = now
  return now
end

-- The time of the settle under way, for each wait it ends (settle.wake)
-- or each group it moves (settle.changed): o.now inside a step; outside
-- one, the clock read once per settle (settle.seq), not once per waiter
-- (a future that 10,000 loaders await wakes them all at one moment).
-- A step forgets it (engine.step). (A number, not what settled: that could hold a loaded
-- texture for as long as nobody steps.)
function M.settle_time(o)
  if o.stepping then return o.now end
  local seq = settle.seq
  if o.settle_seq ~= seq then
    o.settle_seq = seq
    return M.game_now(o)
  end
  return o.now
end

--- The clock without raising: the last good reading if it breaks.
function M.now_or_last(o)
  local ok, now = pcall(o.clock)
  if ok and finite(now) then return shifted(o, now) end
  return o.clock_high
end

return M
