-- When a job stalls, checked against a model that knows nothing of
-- stagehand's insides. Seeded scenes run loaders with stall times of their
-- own; each time one resumes it reports progress or picks its next wait: a
-- future, a sleep, a slot it then holds across a future, a budget's
-- permit, another loader's Handle, `stagehand.all` of futures and loaders,
-- or a barrier's `settled`. Between steps the game settles futures, starts
-- and cancels loaders, makes barriers and arrives at them, resizes the
-- pool, hides and shows the window, and moves the clock, now and then by
-- more than a stall time at once; it moves it between its own calls too,
-- so what it does comes later than the last step. Some steps have a budget, which a busy
-- loader (one that moves the clock as it runs) spends, leaving jobs queued.
--
-- The model keeps each job's last progress, as the contract counts it: the
-- job's start, `job:progress()`, the end of any wait but a sleep (and the
-- job's resume after an await, when it sees that end), every
-- slot handed out or freed in the pool a job waits for, every permit
-- granted in its budget, a barrier's first arrival of each key, and each
-- part of a group that settles. A job that awaits jobs only (a Handle, a
-- barrier, a group whose futures have all settled) follows them and never
-- stalls by its own clock. Hidden time never counts.
-- - A job that stalls is not following, and has had no progress for its
--   stall time of visible time.
-- - A job that has had none for its stall time a check interval ago, while
--   the window stayed visible since, has stalled.
-- The model reads nothing but public Handles' and futures' states.
-- CHAOS_SEEDS=n runs more, CHAOS_SEED=s replays one (spec/seeded.lua).
local stagehand = require "stagehand"
local T = require "stagehand.testing"
local seeded = require "spec.seeded"

local CHECK_MS = 50
local STALLS = { 100, 150, 250 }

local function scene(seed, tally)
  local r = seeded.rng(seed)
  local orch, clock = T.new { pools = { p = 1 }, check_ms = CHECK_MS, log = function() end }
  orch:budget("b", { ops = 1 })
  local jobs = {} -- the model's records: loaders and barriers
  local loaders, barriers, handles = {}, {}, {}
  local futures, new_future = seeded.futures()
  local capacity, winding, turn, violation = 1, false, 0, nil
  local function running(h) return h:state() == "running" end

  -- Visible time: clock time less every hidden stretch before it.
  local hidden = {} -- {from, to}; the last one's `to` is nil while hidden
  local function vis(t)
    local v = t
    for _, s in ipairs(hidden) do
      if s[1] < t then v = v - (math.min(t, s[2] or t) - s[1]) end
    end
    return v
  end
  local function shown_since() -- clock time since which the window is visible, or nil
    local last = hidden[#hidden]
    if not last then return -math.huge end
    return last[2]
  end

  -- The model. Each job's last progress is known to lie between rec.at and
  -- rec.hi. A slot or permit granted in a step is seen only when its job
  -- runs: later in that step (the clock may have moved meanwhile: a busy
  -- job moves it), or in a later one if the step's budget ran out first.
  -- So the grant came at some time since the first step after the last
  -- one that ran everything (`floor_step`, which began at `floor_at`), and
  -- a job that began waiting since then may have begun before or after it
  -- (only after counts).
  local steps, in_step, drained = 0, false, true
  local floor_step, floor_at = 1, 0
  local function progress(rec) rec.at, rec.hi = clock.now, clock.now end
  local function granted_since(rec, t)
    rec.at, rec.hi = math.max(rec.at, t), clock.now
  end
  -- Whether a job follows jobs only now: its own clock is paused.
  local function following(rec)
    local on = rec.on
    if not on then return false end
    if on.kind == "job" or on.kind == "barrier" then return running(on.x) end
    if on.kind == "all" then
      local jobs_open = false
      for _, part in ipairs(on.parts) do
        if part.kind == "future" and part.x:state() == "pending" then return false end
        if part.kind == "job" and running(part.x) then jobs_open = true end
      end
      return jobs_open
    end
    return false
  end
  local function waits_on(rec, x)
    local on = rec.on
    if not on then return false end
    if on.x == x then return true end
    if on.kind == "all" then
      for _, part in ipairs(on.parts) do
        if part.x == x then return true end
      end
    end
    return false
  end
  -- x settled or ended: the end of a wait, or a part's settle, for whoever waits on it.
  local function settled(x)
    for _, rec in ipairs(jobs) do
      if not rec.dead and waits_on(rec, x) then progress(rec) end
    end
  end
  -- A slot handed out or freed in the pool, a permit granted in the budget:
  -- progress for each job waiting there since before it (`granted`: it was
  -- granted earlier in this step, see above).
  local function queue_moved(kind, granted)
    for _, rec in ipairs(jobs) do
      if not rec.dead and rec.on and rec.on.kind == kind then
        if not granted then
          progress(rec)
        elseif rec.on.step >= floor_step then
          rec.hi = clock.now
        else
          granted_since(rec, floor_at)
        end
      end
    end
  end
  local function fail(why)
    violation = violation or ("seed %d, turn %d: %s"):format(seed, turn, why)
  end
  -- A job's record, made before the job is (its work starts at once) and
  -- told of its Handle's end once it has one.
  local function new_record(stall)
    local rec = { stall = stall, at = clock.now, hi = clock.now }
    jobs[#jobs + 1] = rec
    return rec
  end
  local function track(rec)
    handles[#handles + 1] = rec.h
    rec.h:on_end(function(state)
      rec.dead = true
      if state == "stalled" then
        tally.stalls = tally.stalls + 1
        local kind = rec.b and "barrier itself" or rec.on and rec.on.kind or "running"
        tally[kind] = (tally[kind] or 0) + 1
        local quiet = vis(clock.now) - vis(rec.at)
        if following(rec) then
          fail(rec.h.label .. " stalled while it followed jobs only")
        elseif quiet < rec.stall then -- (even its earliest last progress is too recent)
          fail(("%s stalled after %g ms of visible time without progress; its stall time is %d ms")
            :format(rec.h.label, quiet, rec.stall))
        end
      end
      if rec.holds then -- (ending releases the slot it held: freed)
        rec.holds = false
        queue_moved("slot")
      end
      settled(rec.h)
    end)
  end

  -- The scene.
  local function later_loader(i)
    local n = #loaders - i
    if n <= 0 then return nil end
    local rec = loaders[i + r(n)]
    if running(rec.h) then return rec.h end
  end
  -- One of a loader's turns; false once it returns.
  local function act(job, rec, i)
    local x = r(winding and 1 or 13)
    if x == 1 then return false end
    if x == 2 then
      job:progress()
      progress(rec)
      return true
    end
    local w
    if x <= 4 then
      w = { kind = "future", x = new_future() }
    elseif x == 5 then
      w = { kind = "sleep" }
    elseif x <= 7 then
      w = { kind = "slot", step = steps }
    elseif x <= 9 then
      w = { kind = "permit", step = steps }
    elseif x == 10 then
      local h = later_loader(i)
      w = h and { kind = "job", x = h } or { kind = "sleep" }
    elseif x == 11 then
      local parts, list = {}, {}
      for k = 1, 1 + r(3) do
        local h = r(2) == 1 and later_loader(i)
        parts[k] = h and { kind = "job", x = h } or { kind = "future", x = new_future() }
        list[k] = parts[k].x
      end
      w = { kind = "all", parts = parts, x = stagehand.all(list) }
    else
      local b = barriers[#barriers]
      w = (b and running(b.h)) and { kind = "barrier", x = b.h } or { kind = "future", x = new_future() }
    end
    rec.on = w
    local asked, awaited = clock.now, false
    -- A job that waited longer than its stall time for a slot or permit
    -- and did not stall: the pool's and budget's traffic kept it going.
    local function long_wait(kind)
      if vis(clock.now) - vis(asked) >= rec.stall then tally[kind] = tally[kind] + 1 end
    end
    local ok, err = job:pcall(function()
      if w.kind == "sleep" then
        -- (now and then busy first: it runs for a while, moving the clock)
        if in_step and r(2) == 1 then clock:advance(2 + r(10)) end
        return job:sleep(r(150))
      end
      if w.kind == "permit" then
        job:permit("b")
        long_wait("long permit waits")
        rec.on = nil
        granted_since(rec, math.max(asked, floor_at))
        queue_moved("permit", true)
        return
      end
      if w.kind ~= "slot" then
        awaited = true
        return job:await(w.x)
      end
      rec.holds = job:slot("p")
      long_wait("long slot waits")
      rec.on = nil
      granted_since(rec, math.max(asked, floor_at)) -- (or taken at once, while nobody waited)
      queue_moved("slot", true)
      -- held across a wait of its own
      w = { kind = "future", x = new_future() }
      rec.on = w
      awaited = true
      job:await(w.x)
    end)
    -- (a wait may fail, as the game made it; the model itself may not)
    if not ok and err ~= "no such file" and not stagehand.is_error(err) then fail("the scene raised: " .. tostring(err)) end
    rec.on = nil
    -- An await that ended counts again when the job runs: it was progress
    -- when it ended (see `settled`), and the job sees it now.
    if awaited and not job.signal.aborted then progress(rec) end
    if rec.holds and not job.signal.aborted then
      rec.holds()
      rec.holds = false
      queue_moved("slot")
    end
    return not job.signal.aborted
  end
  local function start_loader()
    local i = #loaders + 1
    local rec = new_record(STALLS[r(#STALLS)])
    loaders[i] = rec
    rec.h = orch:run("loader " .. i, function(job)
      while act(job, rec, i) do end
    end, { stall_ms = rec.stall })
    track(rec)
  end
  local KEYS = { "hero", "mage", "rogue" }
  local ops = {
    start_loader,
    function() -- a future settles (now and then by failing)
      local f = seeded.pending_one(r, futures)
      if not f then return end
      if r(4) == 1 then f:reject("no such file") else f:resolve(true) end
      settled(f)
    end,
    function() -- a loader is cancelled
      local rec = loaders[r(#loaders)]
      if r(4) == 1 then rec.h:cancel("scene left") end
    end,
    function() -- a barrier is made, or a key arrives at one (again, now and then)
      local b = barriers[#barriers]
      if b and running(b.h) then
        local k = KEYS[r(3)]
        local first = not b.arrived[k]
        b.arrived[k] = true
        b.b:arrive(k)
        if first then progress(b) end -- (a repeat counts once: it is no progress)
      elseif r(2) == 1 then
        b = new_record(STALLS[r(#STALLS)])
        b.arrived = {}
        b.b = orch:barrier("party " .. (#barriers + 1), KEYS, { stall_ms = b.stall })
        b.h = b.b.settled
        barriers[#barriers + 1] = b
        track(b)
      end
    end,
    function() -- the pool is resized
      capacity = r(3) - 1
      orch:pool("p", capacity)
    end,
    function() -- time passes between steps: what the game does next, it does then
      clock:advance(r(100))
    end,
    function() -- the window is hidden, or shown again
      local last = hidden[#hidden]
      if last and last[2] == nil then
        last[2] = clock.now
        orch:set_visible(true)
      elseif r(3) == 1 then
        hidden[#hidden + 1] = { clock.now }
        orch:set_visible(false)
      end
    end,
  }

  local function step_and_check(t)
    turn = t
    clock:advance(r(8) == 1 and r(300) or r(40))
    steps, in_step = steps + 1, true
    if drained then floor_step, floor_at = steps, clock.now end
    -- (now and then with a budget a busy job spends, leaving jobs queued)
    local budget = r(3) == 1 and 4 or nil
    orch:step(budget)
    in_step, drained = false, budget == nil
    if violation then error(violation) end
    -- Every job that has gone a stall time without progress a check
    -- interval ago, visible all along since, has stalled by now.
    local now = clock.now
    local since = shown_since()
    if since == nil or since > now - CHECK_MS then return end
    for _, rec in ipairs(jobs) do
      -- (after a step whose budget ran out, a job waiting for a slot or a
      -- permit may have been granted one, or seen another's grant, unseen)
      local unseen = not drained and rec.on and (rec.on.kind == "slot" or rec.on.kind == "permit")
      if not rec.dead and not following(rec) and not unseen and vis(now - CHECK_MS) - vis(rec.hi) >= rec.stall then
        error(("seed %d, turn %d: %s has made no progress since %g (visible time %g), yet it runs at %g"
          .. " (its stall time is %d ms)"):format(seed, t, rec.h.label, rec.hi, vis(rec.hi), now, rec.stall))
      end
    end
  end
  for _ = 1, 2 + r(3) do start_loader() end
  for t = 1, 80 do
    for _ = 1, r(3) do ops[r(#ops)]() end
    step_and_check(t)
  end
  -- Then everything lets go, and loaders return as they next wake.
  winding = true
  if hidden[#hidden] and not hidden[#hidden][2] then
    hidden[#hidden][2] = clock.now
    orch:set_visible(true)
  end
  orch:pool("p", 3)
  -- (until nothing is queued either: a step whose budget ran out may
  -- leave the cleanup of jobs that ended in its stall check for the next)
  local guard = 0
  while (orch.nrunning > 0 or orch:next_wake() == 0) and guard < 300 do
    guard = guard + 1
    seeded.resolve_pending(futures, settled)
    step_and_check(80 + guard)
  end
  seeded.assert_none_failed(seed, loaders)
  tally.loaders = tally.loaders + #loaders
  return orch, handles
end

describe("stall clocks", function()
  local which, seeds = seeded.seeds()
  it("stall a job when, and only when, a model of its progress says so" .. which, function()
    local tally = { stalls = 0, loaders = 0, ["long permit waits"] = 0, ["long slot waits"] = 0 }
    seeded.run_scenes("stall", seeds, scene, tally, "STALL_TALLY")
    -- (jobs stall in every way the scenes wait, and wait in queues longer
    -- than their stall time without stalling: over 20 scenes or more, that
    -- is; one scene replayed alone need not have them all)
    if #seeds >= 20 then
      for _, kind in ipairs({ "future", "sleep", "slot", "all", "barrier itself", "long slot waits", "long permit waits" }) do
        assert.is_true((tally[kind] or 0) > 0, "none of: " .. kind)
      end
    end
  end)
end)
