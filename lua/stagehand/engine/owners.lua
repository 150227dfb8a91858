-- Callers made inside a job belong to it: a `run` or `when` called inside
-- a job's work, without a signal of its own, is withdrawn if that job ends
-- other than done. o.owned[job] is a counted set (list.lua) of the callers
-- it made that still run, each with its order; o.nowners counts the jobs
-- that have one. A caller leaves the set as it settles, so a streamer that
-- runs sub-jobs for a whole session keeps none of the finished ones.
local E = require "stagehand.engine.engine"
local list = require "stagehand.engine.list"
local settle = require "stagehand.engine.settle"
local F = require "stagehand.engine.fields"

local ORCH, STATE = F.ORCH, F.STATE

local M = {}

--- Files the caller `h` (no signal of its own: `sig` nil) under the job
--- whose work runs now, if it is one of `o`'s.
function M.own(o, h, sig)
  if sig then return end
  local cur = E.current
  if cur and cur[ORCH] == o and not cur[STATE] then
    -- (Each write that may need memory comes before what counts it: memory
    -- that runs out leaves the counts true and h in no set. An _own left
    -- on h then names an owner whose set it is not in, which settled and
    -- the owner's end both take in their stride.)
    local n = o.nowned + 1
    local first = o.owned[cur] == nil
    h._own = cur
    list.set_add(o.owned, cur, h, n)
    o.nowned = n
    if first then o.nowners = o.nowners + 1 end
  end
end

--- The caller `h` settled: it leaves its owner's set.
function M.settled(h)
  local owner = rawget(h, "_own")
  if owner then
    h._own = nil
    local o = owner[ORCH]
    if list.set_remove(o.owned, owner, h) and o.owned[owner] == nil then o.nowners = o.nowners - 1 end
  end
end

-- Withdraws the callers the ended `job` made that still run, in the order
-- it made them; each leaves the set as it settles (M.settled), and the set
-- goes with the last (or after them all). (Its own function, not a closure made at each end.)
-- Memory that runs out partway leaves the rest in the set, and the job on
-- settle's stack: the next step finishes its end (engine/mend.lua), which
-- withdraws them.
local function withdraw(o, job)
  local owned = o.owned[job]
  if not owned then return end
  local level = settle.entered(job)
  local hs = list.members(owned, function(a, b) return owned[a] < owned[b] end)
  local v = job[F.OUT]
  for i = 1, #hs do hs[i]:cancel(v) end
  if o.owned[job] then -- (a caller that had settled, its leaving cut short)
    o.owned[job] = nil
    o.nowners = o.nowners - 1
  end
  settle.left(level)
end

-- Once a job's end is told: the callers it made leave with it unless it
-- finished, so nothing it asked for is kept alive, or kept at its
-- priority, by a job that is gone. (After the end that reached them, as
-- every end an end reaches: E.after_end.)
E.on("owned_left", function(o, job)
  local owned = o.nowners > 0 and o.owned[job]
  if not owned then return end
  if job[STATE] ~= "done" then return E.after_end(withdraw, o, job) end
  o.owned[job] = nil
  o.nowners = o.nowners - 1
end)

return M
