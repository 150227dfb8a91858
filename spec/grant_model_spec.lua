-- Who gets a slot or a permit, checked against a model that knows nothing
-- of stagehand's insides. Seeded scenes queue keyed jobs in a pool that
-- starts closed (or for a budget's permits, {ops} or {ms}: an ms budget's
-- holders each run for a cost of their own); between steps the game changes
-- what its priority functions answer, callers join runs (by run and by
-- when, and by a when made before the run started) and leave them, jobs
-- start awaiting the queued ones (and each other, in chains) and are
-- cancelled, the pool grows and holders release their slots (or the
-- budget's ops or ms change). After every step each grant it made must be the
-- model's pick among the jobs then waiting: the best effective rank (the
-- best of its live callers' and of every job awaiting it, transitively),
-- then the one that asked first. A job may take a free slot at once only
-- while nobody waits, and a step grants its ops' worth of permits while
-- jobs wait (or, for ms, one at a time exactly while its holders have run
-- less than ms). The model reads nothing but public Handles' states.
-- An ms budget's holders also change things in the middle of a step (a
-- job starts awaiting a queued one, a caller joins or leaves), so each of
-- its grants is checked as it is made, against the jobs waiting then; and
-- sets of more than 1-3 sources are big (16 outside specs), named by a hash
-- and changed in place.
-- CHAOS_SEEDS=n runs more, CHAOS_SEED=s replays one (spec/seeded.lua).
local stagehand = require "stagehand"
local T = require "stagehand.testing"
local seeded = require "spec.seeded"

local NAMES = seeded.NAMES

-- kind: "pool" (slots of pool p), "budget" (permits of budget b, {ops = n})
-- or "ms" (permits of budget b, {ms = m}: each holder runs for a cost of
-- its own, moving the clock, and a step grants the next while its holders
-- have run less than m)
local function scene(seed, kind, tally)
  local r = seeded.rng(seed)
  local orch, clock = T.new { pools = { p = 0 }, stall_ms = 1e12, log = function() end }
  orch.big_set = 1 + seed % 3
  local ops_now, ms_now = 1, 10
  if kind == "budget" then orch:budget("b", { ops = ops_now }) end
  if kind == "ms" then orch:budget("b", { ms = ms_now }) end
  -- Three priority functions whose answers the game changes between steps.
  -- Now and then one answers a rank that does not exist, or raises: it
  -- counts as the default then (and is logged once).
  local level, random_source, rank_of = seeded.priorities(r, false)

  -- The model. A record per job: its callers {h, src}, the jobs awaiting
  -- it, and for a queued job its place in line.
  local queued, parents = {}, {}
  local handles = {} -- every Handle, in the order made (for the ends)
  local function made(h)
    handles[#handles + 1] = h
    return h
  end
  local grants = {} -- the queued jobs' records in the order their slots came
  local function eff(rec)
    local best = 4
    for _, c in ipairs(rec.callers) do
      if c.h:state() == "running" and rank_of(c.src) < best then best = rank_of(c.src) end
    end
    for _, p in ipairs(rec.awaiters) do
      if p.callers[1].h:state() == "running" then
        local e = eff(p)
        if e < best then best = e end
      end
    end
    return best
  end
  local function pick()
    local best, be
    for _, rec in ipairs(queued) do
      if rec.waiting then
        local e = eff(rec)
        if best == nil or e < be then best, be = rec, e end -- (queued is in arrival order)
      end
    end
    return best, be
  end
  local function describe(rec)
    return rec and (rec.label .. " (rank " .. eff(rec) .. ", arrival " .. rec.arrival .. ")") or "nobody"
  end

  -- Starts asset i's run (it asks at once, so it queues now: its arrival
  -- is its place in `queued`); `early` are the callers a pending `when`
  -- made before the run started, which join it before its work runs.
  local mid_step -- (below: what an ms budget's holder may change as it runs)
  local wrong -- (the first permit an ms budget's holder found given wrongly)
  local function start(i, early)
    local src, key = random_source()
    local rec = { label = "asset " .. i, key = "asset " .. i, arrival = #queued + 1, waiting = true, awaiters = {} }
    if kind == "ms" then rec.cost = r(8) end -- (ms its holder runs once granted)
    rec.gate = stagehand.future()
    queued[#queued + 1] = rec
    rec.callers = { false } -- (its own Handle comes first once run returns)
    for _, c in ipairs(early or {}) do rec.callers[#rec.callers + 1] = c end
    local before = #grants
    local h = made(orch:run(rec.label, function(job)
      if kind ~= "pool" then
        job:permit("b")
        if kind == "ms" then
          -- (granted one at a time, each holder running before the next
          -- grant: nothing else ran since this one's, so the model's pick
          -- among the jobs waiting now is the pick it had to make)
          -- (told after the step: an error here would fail only this job)
          local want = pick()
          if want ~= rec and not wrong then
            wrong = ("seed %d: a permit went to %s, not %s"):format(seed, describe(rec), describe(want))
          end
          rec.waiting = false
        end
        grants[#grants + 1] = rec
        if rec.cost then clock:advance(rec.cost) end -- (it runs for a while)
        if kind == "ms" and r(2) == 1 then mid_step[r(#mid_step)]() end
        job:await(rec.gate)
        return
      end
      local release = job:slot("p")
      grants[#grants + 1] = rec
      job:await(rec.gate)
      release()
    end, { key = rec.key, priority = src }))
    rec.callers[1] = { h = h, src = key }
    if #grants > before then
      -- It took a free slot at once (the pool has grown): right only while
      -- nobody waits for one.
      for _, other in ipairs(queued) do
        if other ~= rec and other.waiting then
          error(("seed %d: %s took a free slot while %s waited"):format(seed, rec.label, other.label))
        end
      end
      rec.waiting = false
    end
  end
  local n = 20 + r(30)
  for i = 1, n do start(i) end
  -- Keys a `when` waits on before anyone runs them: key -> its callers.
  local pending, pending_keys, next_asset = {}, {}, n
  -- The run of the key `when`s have waited on longest starts: they join it
  -- before its work runs.
  local function start_pending()
    if not pending_keys[1] then return end
    local i = table.remove(pending_keys, 1)
    next_asset = math.max(next_asset, i)
    start(i, pending[i])
    pending[i] = nil
  end

  local capacity = 0
  local function live(list, pred)
    local out = {}
    for _, x in ipairs(list) do
      if pred(x) then out[#out + 1] = x end
    end
    return out
  end
  local function running(x) return x.callers[1].h:state() == "running" end
  local ops = {
    function() -- the counts are made anew, as after memory ran out mid-change
      if r(3) == 1 then require("stagehand.rank.sources").rebuild(orch) end
    end,
    function() -- the game's priority functions answer otherwise
      local x = r(10)
      level[r(3)] = x <= 8 and NAMES[x % 3 + 1] or x == 9 and "urgent" or "raise"
    end,
    function() -- a caller joins a run, by run or by when
      local rec = queued[r(#queued)]
      if not running(rec) then return end
      local src, key = random_source()
      local h
      if r(2) == 1 then
        h = made(orch:run(rec.label, function() error("a joined run's work never runs") end, { key = rec.key, priority = src }))
      else
        h = made(orch:when(rec.key, nil, { priority = src }))
      end
      rec.callers[#rec.callers + 1] = { h = h, src = key }
    end,
    function() -- a `when` waits for a run nobody started yet
      local src, key = random_source()
      local i = next_asset + r(3)
      local c = { h = made(orch:when("asset " .. i, nil, { priority = src })), src = key }
      if not pending[i] then
        pending[i] = {}
        pending_keys[#pending_keys + 1] = i
      end
      table.insert(pending[i], c)
    end,
    function() start_pending() end, -- a run that `when`s wait for starts
    function() -- a caller that joined leaves (the first stays: parents await its Handle)
      local rec, extra = queued[r(#queued)], {}
      for i = 2, #rec.callers do
        if rec.callers[i].h:state() == "running" then extra[#extra + 1] = rec.callers[i] end
      end
      if extra[1] then extra[r(#extra)].h:cancel("scrolled away") end
    end,
    function() -- a job starts awaiting a queued job, or a job that awaits one
      local targets = live(queued, function(rec) return rec.waiting end)
      local chained = live(parents, running)
      local pool_of = (chained[1] and r(3) == 1) and chained or targets
      if not pool_of[1] then return end
      local target = pool_of[r(#pool_of)]
      local src, key = random_source()
      local awaited = target.callers[1].h
      local p = { label = "panel " .. (#parents + 1), awaiters = {} }
      local h = made(orch:run(p.label, function(job) job:await(awaited) end, { priority = src }))
      p.callers = { { h = h, src = key } }
      parents[#parents + 1] = p
      target.awaiters[#target.awaiters + 1] = p
    end,
    function() -- a job awaiting one is cancelled: what it brought leaves with it
      local chained = live(parents, running)
      if chained[1] then chained[r(#chained)].callers[1].h:cancel("closed") end
    end,
    function() -- the pool grows (or the budget's ops or ms per step change)
      if kind == "budget" then
        ops_now = r(3)
        orch:budget("b", { ops = ops_now })
      elseif kind == "ms" then
        ms_now = 5 * r(4)
        orch:budget("b", { ms = ms_now })
      elseif capacity < 6 then
        capacity = capacity + 1
        orch:pool("p", capacity)
      end
    end,
    function() -- a holder lets its slot go
      local holding = live(queued, function(rec) return not rec.waiting and rec.gate:state() == "pending" end)
      if holding[1] then holding[r(#holding)].gate:resolve() end
    end,
  }

  -- What a holder may change while the step runs: every change of who
  -- reaches a queued job, none of what the functions answer (they are read
  -- once a step).
  mid_step = { ops[3], ops[6], ops[7], ops[8] }

  local turns = 0
  local function step_and_check(t)
    local before = #grants
    orch:step()
    if wrong then error(wrong .. " (turn " .. t .. ")") end
    -- (levels, callers and awaiters change only between steps: the ranks
    -- the model reads now are the ones the step's grants read)
    for i = before + 1, #grants do
      local got = grants[i]
      if kind ~= "ms" then -- (an ms budget's are checked as they are made: start)
        local want = pick()
        if got ~= want then
          error(("seed %d, turn %d: the slot went to %s, not %s"):format(seed, t, describe(got), describe(want)))
        end
      end
      got.waiting = false
    end
    local left = #live(queued, function(rec) return rec.waiting end)
    if kind == "budget" then
      -- (a step grants up to ops permits, and no fewer while jobs wait)
      local n_granted = #grants - before
      if n_granted > ops_now or (n_granted < ops_now and left > 0) then
        error(("seed %d, turn %d: %d permit(s) granted with ops = %d and %d waiting"):format(
          seed, t, n_granted, ops_now, left))
      end
    elseif kind == "ms" then
      -- (a step grants one permit at a time while its holders have run
      -- less than ms in all, and goes on doing so while jobs wait)
      local spent = 0
      for i = before + 1, #grants do
        if spent >= ms_now then
          error(("seed %d, turn %d: a permit granted after holders ran %d ms of a %d ms budget"):format(
            seed, t, spent, ms_now))
        end
        spent = spent + grants[i].cost
      end
      if spent < ms_now and left > 0 then
        error(("seed %d, turn %d: the step stopped granting after %d ms of a %d ms budget, %d waiting"):format(
          seed, t, spent, ms_now, left))
      end
      tally.ms_grants = (tally.ms_grants or 0) + #grants - before
      if #grants - before > 1 then tally.ms_steps_many = (tally.ms_steps_many or 0) + 1 end
    end
  end
  for t = 1, 60 do
    for _ = 1, r(4) do ops[r(#ops)]() end
    step_and_check(t)
    turns = t
  end
  -- Then everyone through: the runs `when`s wait for start, the pool opens,
  -- holders release as they go.
  while pending_keys[1] do start_pending() end
  if kind == "pool" and capacity == 0 then orch:pool("p", 1) end
  local guard = 0
  while orch.nrunning > 0 and guard < 1000 do
    guard = guard + 1
    for _, rec in ipairs(queued) do
      if not rec.waiting and rec.gate:state() == "pending" and r(2) == 1 then rec.gate:resolve() end
    end
    step_and_check(turns + guard)
  end
  return orch, queued, grants, handles
end

local function scenes(kind, seeds)
  local tally = {}
  for _, seed in ipairs(seeds) do
    local orch, queued, grants, handles = scene(seed, kind, tally)
    assert(orch.nrunning == 0, "seed " .. seed .. ": jobs still running\n" .. orch:dump())
    assert(#grants == #queued, "seed " .. seed .. ": " .. #grants .. " grants for " .. #queued .. " queued jobs")
    seeded.assert_whole(seed, orch, handles, orch.nrunning)
    seeded.record_ends("grants-" .. kind, seed, handles)
  end
  seeded.print_tally("GRANT_TALLY", tally)
end

describe("grants", function()
  local which, seeds = seeded.seeds()
  it("of slots go as a model of rank then arrival says, through joins, leaves, awaits and live priorities"
    .. which, function() scenes("pool", seeds) end)
  it("of a budget's permits go the same way, ops a step" .. which, function() scenes("budget", seeds) end)
  it("of an ms budget's permits go the same way, while a step's holders have run less than ms" .. which,
    function() scenes("ms", seeds) end)
end)
