-- What a worker pool offers its workers between steps, checked against a
-- model. A pool of two workers is kept busy (each inside `hold`) most of
-- the time, so what the last grant round offered stays on offer; seeded
-- scenes then queue keyed requests with names, priority functions and
-- closures, join them by key, follow them with `when`, make jobs await
-- them, cancel any of those, re-rank the queue with pool:reprioritise,
-- pause and resume the pool, let a worker go (it then takes from the offer
-- between steps, as a game's workers do) and hold it again, and change
-- what the functions answer just before a step; some functions do any of
-- that themselves as the step reads them. After every change and every
-- step, no request still on offer may rank below one that waits and would
-- be taken after it (the model's effective rank: the best of a request's
-- live callers', followers' and awaiting jobs' priorities), where the
-- model knows both ranks: a name always, a function once a step has read
-- it. A source whose rank is not known yet bounds nothing. The offer the
-- pool keeps is the one its workers take from (counted on both sides while
-- no worker is free), a paused pool offers nothing and starts nothing,
-- and requests that wait on idle workers with nothing offered make
-- next_wake 0 (a host that sleeps until then would never start them).
-- (White-box: the offer is read from the pool's own fields; the spec says
-- nothing of how it is chosen.) A trace records it all, and half the
-- requests count in a phase of a loading screen, whose listener meddles
-- as the functions do. CHAOS_SEEDS=n runs more, CHAOS_SEED=s replays one.
local stagehand = require "stagehand"
local T = require "stagehand.testing"
local seeded = require "spec.seeded"

if not package.path:find("spec/fixtures/?.lua", 1, true) then
  package.path = "spec/fixtures/?.lua;" .. package.path
end

local WAIT = 10000
local RANK = seeded.RANK

local function scene(seed)
  local r = seeded.rng(seed)
  local orch = T.new { stall_ms = 1e12, log = function() end }
  orch.big_set = 1 + seed % 3
  local level, random_source = seeded.priorities(r, true)
  local pool = stagehand.pool(orch, { module = "fixture_worker", size = 2 })
  local ud = pool.ud
  -- (a trace and a loading screen beside it: each reads priorities, and
  -- tells game code, at moments of its own)
  local trace, load = orch:trace(), stagehand.tracker(orch)
  local started = stagehand.port()
  -- The workers held busy: { h = the hold's Handle, go = its port }.
  local holding = {}
  local function hold()
    local go = stagehand.port()
    local h = pool:run("hold", { started = started, go = go }, { priority = 1e6 })
    holding[#holding + 1] = { h = h, go = go }
  end
  hold()
  hold()
  orch:step()
  for _ = 1, 2 do assert(started:receive_within(WAIT), "a worker never started") end
  orch:step()
  local paused_held -- (while paused: the requests held when it paused)

  local steps = 0 -- how many steps have read the functions
  local stepping = false -- (inside a step: what comes now is read in the next)
  local meddle -- (below: what a meddling priority function does as it is read)
  -- A source: { h = its Handle, kept = a name or a function's number,
  -- step = the steps done when it came }. One in eight is a function that
  -- does what the game may do from inside it (a request, a join, a when,
  -- a re-rank, a pause or resume, a source leaving) as the step reads it.
  local function source()
    local prio, kept
    if r(8) == 1 then
      kept = r(3)
      prio = function()
        meddle()
        return level[kept]
      end
    else
      prio, kept = random_source()
      if prio == nil then prio, kept = "scene", "scene" end
    end
    return prio, { kept = kept, step = stepping and steps + 1 or steps }
  end
  local function step()
    stepping = true
    orch:step()
    stepping = false
    steps = steps + 1
  end
  local function wait(h)
    stepping = true
    orch:wait(h, WAIT)
    stepping = false
    steps = steps + 1
  end
  -- Its rank, or nil while no step has read its function.
  local function known(src)
    if type(src.kept) == "string" then return RANK[src.kept] end
    if src.step < steps then return RANK[level[src.kept]] end
    return nil
  end

  local reqs, by_id, made = {}, {}, 0
  local function live(rec) return pool.reqs[rec.id] ~= nil end
  -- Waiting for a worker, as the workers' side has it now (one the last
  -- step offered may be running, its start not heard yet).
  local function waits(rec)
    local slot = pool.holds[rec.id]
    return slot ~= nil and ud:_held(slot, rec.id)
  end
  -- The best rank among the request's live sources that are known, and
  -- whether every live one is.
  local function ranked(rec)
    local best, all = nil, true
    for _, s in ipairs(rec.sources) do
      if s.h:state() == "running" then
        local k = known(s)
        if k == nil then all = false elseif best == nil or k < best then best = k end
      end
    end
    return best, all
  end

  local function check(what)
    local k = pool.offer_k
    local list = pool.offer_list
    local before, on_offer = {}, 0
    for j = 1, k do
      local e = by_id[list[2 * j]]
      before[list[2 * j]] = true
      local still = ud:_held(list[2 * j - 1], list[2 * j])
      if still then on_offer = on_offer + 1 end
      if e and still then
        local exact, all = ranked(e)
        if all and exact then
          for _, rec in ipairs(reqs) do
            if not before[rec.id] and live(rec) and waits(rec) then
              local lb = ranked(rec)
              if lb and lb < exact then
                error(("seed %d, after %s: offered #%d (%s, rank %d) is taken before %s (rank %d)")
                  :format(seed, what, j, e.key, exact, rec.key, lb), 0)
              end
            end
          end
        end
      end
    end
    -- What the workers take from is what the pool says it offered: the
    -- same while every worker is held, no more once one is free.
    local left = ud:_offered()
    if left > on_offer or (#holding == 2 and left ~= on_offer) then
      error(("seed %d, after %s: the workers' offer holds %d, the pool's %d"):format(seed, what, left, on_offer), 0)
    end
    -- Nothing waits unseen: while the pool is not paused and holds
    -- requests no worker can take (nothing offered, no worker busy), the
    -- host that sleeps until next_wake must be told to step now. (The
    -- offer is read first: once it is empty, only the main thread fills it.)
    if not pool:paused() and ud:_offered() == 0 then
      local held, running, workers = ud:_counts()
      if held > 0 and running == 0 and workers > 0 and orch:next_wake() ~= 0 then
        error(("seed %d, after %s: %d request(s) wait on idle workers, and next_wake is %s"):format(seed, what, held,
          tostring(orch:next_wake())), 0)
      end
    end
    if paused_held then
      if k ~= 0 or left ~= 0 then
        error(("seed %d, after %s: a paused pool offers %d (%d left)"):format(seed, what, k, left), 0)
      end
      for _, rec in ipairs(reqs) do
        if paused_held[rec] and live(rec) and not waits(rec) then
          error(("seed %d, after %s: %s started while the pool was paused"):format(seed, what, rec.key), 0)
        end
      end
    end
  end

  local function pick_live()
    local open = {}
    for _, rec in ipairs(reqs) do if live(rec) then open[#open + 1] = rec end end
    if #open == 0 then return nil end
    return open[r(#open)]
  end

  local ops = {
    function() -- a new request
      local prio, src = source()
      made = made + 1 -- (before the run: a listener told of its start may make one too)
      local key = "req " .. made
      local h = pool:run("echo", key, { key = key, priority = prio, phase = #reqs % 2 == 0 and "decode" or nil })
      src.h, src.caller = h, true
      local rec = { key = key, id = h.id, sources = { src } }
      reqs[#reqs + 1], by_id[h.id] = rec, rec
      return "a new request " .. key
    end,
    function() -- another caller joins by key
      local rec = pick_live()
      if not rec then return nil end
      local prio, src = source()
      src.h, src.caller = pool:run("echo", 1, { key = rec.key, priority = prio }), true
      rec.sources[#rec.sources + 1] = src
      return "a caller joining " .. rec.key
    end,
    function() -- a when follows it
      local rec = pick_live()
      if not rec then return nil end
      local prio, src = source()
      src.h = orch:when(rec.key, "a follower", { priority = prio })
      rec.sources[#rec.sources + 1] = src
      return "a when on " .. rec.key
    end,
    function() -- a job awaits it
      local rec = pick_live()
      if not rec then return nil end
      local h
      for _, c in ipairs(rec.sources) do
        if c.caller and c.h:state() == "running" then h = c.h end
      end
      if not h then return nil end
      local prio, src = source()
      src.h = orch:run("awaiter", function(job) return job:await(h) end, { priority = prio })
      rec.sources[#rec.sources + 1] = src
      return "a job awaiting " .. rec.key
    end,
    function() -- the game re-ranks the queue: each request's own caller gets a name
      local names = {}
      for _, rec in ipairs(reqs) do names[rec.key] = seeded.NAMES[r(3)] end
      pool:reprioritise(function(key) return names[key] end)
      for _, rec in ipairs(reqs) do
        local own = rec.sources[1]
        if live(rec) and own.h:state() == "running" then own.kept, own.step = names[rec.key], steps end
      end
      return "reprioritise"
    end,
    function() -- the game pauses the pool, or resumes it
      if pool:paused() then
        pool:resume()
        paused_held = nil
        return "resume"
      end
      pool:pause()
      paused_held = {}
      for _, rec in ipairs(reqs) do
        if live(rec) and waits(rec) then paused_held[rec] = true end
      end
      return "pause"
    end,
    function() -- a worker is let go: it takes what is offered between steps
      if #holding == 0 then return nil end
      local w = table.remove(holding, r(#holding))
      w.go:post(true)
      wait(w.h)
      assert(w.h:state() == "done", "a hold did not end done")
      return "a worker let go"
    end,
    function() -- a free worker is held again
      if #holding == 2 or pool:paused() then return nil end
      hold()
      local was = meddle
      meddle = function() end -- (a pause now would keep the hold from its worker)
      step()
      meddle = was
      assert(started:receive_within(WAIT), "a worker never took its hold")
      return "a worker held again"
    end,
    function() -- a caller, follower or awaiting job leaves
      local rec = pick_live()
      if not rec then return nil end
      local s = rec.sources[r(#rec.sources)]
      if s.h:state() ~= "running" then return nil end
      s.h:cancel("gone")
      return "a source of " .. rec.key .. " leaving"
    end,
  }

  local meddling = { ops[1], ops[2], ops[3], ops[5], ops[6], ops[#ops] }
  meddle = function()
    if r(3) == 1 then meddling[r(#meddling)]() end
  end
  -- (the loading screen's listener meddles too, told as requests start,
  -- move and end: inside the step's collect of replies, say)
  load:on(function() meddle() end)

  for _ = 1, 40 do
    for _ = 1, r(5) do
      local what = ops[r(#ops)]()
      if what then check(what) end
    end
    for k = 1, 3 do
      if r(3) == 1 then level[k] = seeded.NAMES[r(3)] end
    end
    step()
    check("a step")
  end
  meddle = function() end -- (the scene is over: what is left runs to its end)
  if pool:paused() then pool:resume() end
  for _, w in ipairs(holding) do w.go:post(true) end
  for _, w in ipairs(holding) do orch:wait(w.h, WAIT) end
  for _, rec in ipairs(reqs) do
    for _, s in ipairs(rec.sources) do
      if s.h:state() == "running" then orch:wait(s.h, WAIT) end
    end
  end
  orch:wait(pool:destroy(), WAIT)
  assert.no_leaks(orch)
  trace:stop()
  seeded.traced(trace, "seed " .. seed)
  if load:fraction() ~= 1 then error(("seed %d: the bar ends at %g"):format(seed, load:fraction())) end
  orch:close()
end

describe("a worker pool's offer", function()
  local which, seeds = seeded.seeds()
  it("never holds a request that ranks below one it goes before" .. which, function()
    for _, seed in ipairs(seeds) do scene(seed) end
  end)
end)
