-- What bench.lua (timed) and count.lua (counted) both run: the baselines
-- stagehand's pool is measured against, the holders that fill a pool, and
-- loads that all wait on one future.
local stagehand = require "stagehand"
local T = require "stagehand.testing"
local co_create, co_resume, co_yield = coroutine.create, coroutine.resume, coroutine.yield

local M = {}

--- n loads, each awaiting one future, that all finish; opts_of() gives
--- each its run options.
function M.loads(n, opts_of)
  local o = T.new { stall_ms = 1e12 }
  local f = stagehand.future()
  for _ = 1, n do o:run("load", function(job) job:await(f) end, opts_of()) end
  f:resolve()
  o:step()
  assert(o.nrunning == 0, "loads left running")
end

--- Four holders (or n) take every slot of a 4-slot pool (or an n-slot
--- one) and keep them until `hold` resolves, so the jobs run after them
--- queue up.
function M.fill_pool(o, pool, hold, n)
  for _ = 1, n or 4 do
    o:run("holder", function(job)
      local release = job:slot(pool)
      job:await(hold)
      release()
    end)
  end
end

--- The floor under any scheduler here: n bare coroutines parked at once,
--- then run to their end.
function M.bare(n)
  local cos = {}
  local function body() co_yield() return 1 end
  for i = 1, n do
    local co = co_create(body)
    co_resume(co)
    cos[i] = co
  end
  for i = 1, n do co_resume(cos[i]) end
end

--- A pool with nothing else: a coroutine per job, a FIFO of waiters, no
--- priorities, stall clocks, Handles or results. Four holders keep its
--- slots while n jobs queue up, as in stagehand's own case.
function M.minimal(n)
  local used, q, qh, qt, ready, rh, rt = 0, {}, 1, 0, {}, 1, 0
  local function slot()
    if used < 4 then used = used + 1 return end
    qt = qt + 1
    q[qt] = coroutine.running()
    co_yield()
  end
  local function release()
    if qh <= qt then
      rt = rt + 1
      ready[rt] = q[qh]
      q[qh] = nil
      qh = qh + 1
    else
      used = used - 1
    end
  end
  local function body() slot() release() end
  local function holder() slot() co_yield() release() end
  local holders = {}
  for i = 1, 4 do
    holders[i] = co_create(holder)
    co_resume(holders[i])
  end
  for _ = 1, n do co_resume(co_create(body)) end
  assert(qt == n, "minimal pool: the jobs did not queue")
  for i = 1, 4 do co_resume(holders[i]) end
  while rh <= rt do
    local co = ready[rh]
    ready[rh] = nil
    rh = rh + 1
    co_resume(co)
  end
  assert(qh > qt, "minimal pool left waiters")
end

--- The same minimal pool with a FIFO lane for each of three priorities,
--- the best lane first, the i-th job in lane i % 3 + 1 as stagehand's case
--- gives the i-th job the i % 3 + 1-th source. Granted by priority, the
--- jobs run every third one in the order they were made, as stagehand's
--- do: what that order alone costs a pool with nothing else. (Written out
--- in full, holders and ready loop as in minimal: a baseline calls no
--- helper it shares with another, whose shape could move its timing.)
function M.minimal_lanes(n)
  local used, lanes, heads, tails, ready, rh, rt = 0, { {}, {}, {} }, { 1, 1, 1 }, { 0, 0, 0 }, {}, 1, 0
  local function slot(lane)
    if used < 4 then used = used + 1 return end
    local t = tails[lane] + 1
    tails[lane] = t
    lanes[lane][t] = coroutine.running()
    co_yield()
  end
  local function release()
    for l = 3, 1, -1 do
      local h = heads[l]
      if h <= tails[l] then
        rt = rt + 1
        ready[rt] = lanes[l][h]
        lanes[l][h] = nil
        heads[l] = h + 1
        return
      end
    end
    used = used - 1
  end
  local function body(lane) slot(lane) release() end
  local function holder() slot(1) co_yield() release() end
  local holders = {}
  for i = 1, 4 do
    holders[i] = co_create(holder)
    co_resume(holders[i])
  end
  for i = 1, n do co_resume(co_create(body), i % 3 + 1) end
  assert(tails[1] + tails[2] + tails[3] == n, "minimal pool with lanes: the jobs did not queue")
  for i = 1, 4 do co_resume(holders[i]) end
  while rh <= rt do
    local co = ready[rh]
    ready[rh] = nil
    rh = rh + 1
    co_resume(co)
  end
  for l = 1, 3 do assert(heads[l] > tails[l], "minimal pool with lanes left waiters") end
end

return M
