-- Chaos: seeded random loading scenes. Hundreds of jobs mix keys, when,
-- awaits on other jobs, slots, permits, barriers, futures that never settle,
-- errors, cancellations and hidden stretches. After enough fake time every
-- Handle has ended, nothing runs and nothing is left behind; on the way,
-- every slot and permit went to a job no waiting rival outranked
-- (seeded.watch_grants). A failure names
-- its seed; CHAOS_SEEDS=n runs more (make chaos), CHAOS_SEED=s replays one.
local stagehand = require "stagehand"
local each = require("stagehand.core.compat").each
local T = require "stagehand.testing"
local priority = require "stagehand.rank.priority"
local B = require "stagehand.core.backend"
local F = require "stagehand.engine.fields"
local seeded = require "spec.seeded"

-- Every job waiting in a queue is filed under the set of sources that
-- reach it (kept incrementally as callers and awaiters come and go): the
-- rank of its group must be its effective rank worked out the long way,
-- walking its callers and everyone waiting on it.
local function check_sets(orch, seed, t)
  local cache = {} -- one reading: nothing changes between these calls
  -- (The slot is read from the job: the key pairs() gives for by_slot's
  -- array part is compared wrongly by this LuaJIT's compiled code: a 3
  -- that is not equal to 3.)
  for _, job in each, orch.by_slot do
    local slot = job[F.CID]
    local walked = priority.walk_effective(job, cache)
    local ok, why = priority.effective(job) == walked, "job:priority() disagrees with the long way"
    local q = job[F.WAITQ]
    if ok and q then
      local g = B.pool_group_of(q.p, slot)
      orch.round = orch.round + 1
      local rank = orch.fixed_rank[g] or (orch.members[g] and priority.set_rank(orch, g))
        or priority.source_rank(orch, orch.source_of[g], nil)
      ok, why = g == priority.set_of(orch, job), "filed under a stale set"
      if ok and rank ~= walked then
        ok, why = false, "its set's rank " .. rank .. " is not its effective rank " .. walked
      end
    end
    if not ok then error("seed " .. seed .. ", turn " .. t .. ", " .. job[F.LABEL] .. ": " .. why) end
  end
  -- and the core's own structures hold together in the middle of it all
  local faults = T.core_faults(orch)
  if faults[1] then error("seed " .. seed .. ", turn " .. t .. ": " .. table.concat(faults, "; ")) end
end

local rng = seeded.rng

local KEYS = { "armor:plate", "armor:cloth", "floor", "ammo", "portrait:hero", "item-analysis:3" }
local PHASES = { "fetch", "decode", "upload" } -- (by a number mod 4: one run in four has none)

-- The tracker against what the watcher saw: each phase's tasks by state
-- are its runs' jobs by their end (a key's job counts in the phase of the
-- run that started it); the bar never goes back and is never behind the
-- tasks that ended; what a phase reports done never passes its total.
local function check_load(load, phase_of, ended_as, where)
  local want = {}
  for _, p in ipairs(PHASES) do want[p] = { running = 0, done = 0, failed = 0, cancelled = 0, stalled = 0 } end
  for id, phase in each, phase_of do
    if phase then
      local w = want[phase]
      local st = ended_as[id] or "running"
      w[st] = w[st] + 1
    end
  end
  local _, back = seeded.bar(load)
  if back then error(where .. ": " .. back) end
  for _, p in ipairs(PHASES) do
    local c, w = load:counts(p), want[p]
    for k, n in each, w do
      if c[k] ~= n then
        error(("%s: phase %s counts %d %s, its jobs %d"):format(where, p, c[k], k, n))
      end
    end
    local made = c.running + c.done + c.failed + c.cancelled + c.stalled
    local f, went = seeded.bar(load, p)
    if went then error(where .. ": " .. went) end
    if made > 0 and f < (made - c.running) / made - 1e-9 then
      error(("%s: %s's bar at %s behind its %d ended tasks of %d"):format(where, p, f, made - c.running, made))
    end
    local done, total = load:progress(p)
    if done > total + 1e-9 then error(("%s: %s done %s of %s"):format(where, p, done, total)) end
  end
end

local E = require "stagehand.engine.engine"

-- What the game reads against what it can see another way: each slot
-- pool's holders are the trace's open holds, its waiters (and each
-- budget's) the report's jobs waiting on a slot (a permit) of it; a key
-- runs while a running job has it (not a `when` still waiting for the
-- key's run to start).
local function check_readouts(orch, trace, where)
  local pools, held, waiting, keyed = orch:pools(), {}, {}, {}
  -- (white-box: the trace's open holds, not a copy of every event a turn)
  for _, e in each, trace.holds do held[e.what] = (held[e.what] or 0) + 1 end
  local now = E.now(orch)
  for _, rec in ipairs(orch:report()) do
    if rec.waiting_on then waiting[rec.waiting_on] = (waiting[rec.waiting_on] or 0) + 1 end
    -- (a `when` placeholder shows its key too, waiting for a run of it to start)
    if rec.key and rec.waiting_on ~= "a run of key " .. rec.key .. " to start" then keyed[rec.key] = true end
    -- (times on the orchestrator's own clock, which never runs back)
    local since = rec.waiting_since or rec.started_at
    if rec.started_at > now or since < rec.started_at or since > now then
      error(("%s: %s started at %s, waits since %s, at %s"):format(where, rec.label, rec.started_at,
        tostring(rec.waiting_since), now))
    end
  end
  for _, name in ipairs { "dressing", "layering" } do
    local what, p = "a slot of pool '" .. name .. "'", pools[name]
    if p.in_use ~= (held[what] or 0) or p.waiting ~= (waiting[what] or 0) then
      error(("%s: pool %s reads %d in use, %d waiting; the trace holds %d, the report waits %d"):format(where, name,
        p.in_use, p.waiting, held[what] or 0, waiting[what] or 0))
    end
  end
  for _, name in ipairs { "finalize", "upload" } do
    local what, b = "a permit of budget '" .. name .. "'", pools[name]
    if b.waiting ~= (waiting[what] or 0) then
      error(("%s: budget %s reads %d waiting; the report waits %d"):format(where, name, b.waiting, waiting[what] or 0))
    end
  end
  for _, key in ipairs(KEYS) do
    if (orch:running(key) and true or false) ~= (keyed[key] or false) then
      error(where .. ": orch:running(" .. key .. ") disagrees with the report")
    end
  end
end

-- Once the load has ended: a full bar, an idle tracker, a timeline whose
-- rows add up.
local function loaded(load, where, fetches)
  if load:fraction() ~= 1 then error(where .. ": the bar ends at " .. load:fraction()) end
  if load:idle():state() ~= "done" then error(where .. ": load:idle() is " .. load:idle():state()) end
  for _, row in ipairs(load:timeline()) do
    local c = load:counts(row.phase)
    if row.tasks ~= c.done + c.failed + c.cancelled + c.stalled or row.failed ~= row.tasks - c.done
      or not row.end_ms or row.busy_ms > row.end_ms - row.start_ms + 1e-9 or row.spans < 1 then
      error(where .. ": a timeline row that does not add up: " .. stagehand.format_timeline({ row }))
    end
    local done, total = load:progress(row.phase)
    if done ~= total then error(("%s: %s ended at %s of %s"):format(where, row.phase, done, total)) end
  end
  local c = load:counts("fetch")
  if c.done + c.failed + c.cancelled + c.stalled < fetches then
    error(("%s: %d fetch tasks expected, %d made"):format(where, fetches, c.done + c.failed + c.cancelled + c.stalled))
  end
end


local function scene(seed)
  local r = rng(seed)
  local orch, clock = T.new {
    pools = { dressing = 2, layering = 1 },
    log = function() end,
    check_ms = 500,
  }
  -- Group ids of collected closures are swept for reuse after every few
  -- new ones, not every 256 (the collector runs every 16 turns below).
  orch.sweep_min, orch.sweep_at = 4, 4
  -- Sets of more than 1-3 sources are big (16 outside specs): named by a
  -- hash, shared, copied, changed in place and let go of in every scene.
  orch.big_set = 1 + seed % 3
  local misgranted = {}
  local trace = orch:trace() -- (told through the grant watch)
  seeded.watch_grants(orch, misgranted)
  orch:budget("finalize", { ops = 3 })
  orch:budget("upload", { ms = 6 })
  local handles, futures, ctls = {}, {}, {}
  local atlas = stagehand.future("atlas")
  futures[1] = atlas
  local barrier_keys = { "b1", "b2", "b3", "b4" }
  local barrier = orch:barrier("Party", barrier_keys, { stall_ms = 4000 + 1000 * r(10) })
  handles[#handles + 1] = barrier.settled
  local on_screen = true
  -- A loading screen over it all: most runs count in a phase of a load
  -- tracker (chosen by their number, so the scene draws no more numbers
  -- than it did without one), checked against what the watcher saw end.
  local load = stagehand.tracker(orch)
  local early = stagehand.tracker(orch) -- closed half-way: what it read then stays
  stagehand.tracker(orch) -- dropped at once: collected in the scene, and pruned
  -- A run's phase is its job's when the run starts one (the watcher hears
  -- that start before the work runs); a run that joins a keyed job
  -- starts none, and counts nothing.
  local phase_of, ended_as, starting = {}, {}, nil
  orch:watch(function(rec)
    if rec.ended_at then
      ended_as[rec.id] = rec.state
    elseif starting ~= nil then
      phase_of[rec.id], starting = starting, nil
    end
  end)
  local function start(label, work, opts)
    starting = opts.phase or false
    local h = orch:run(label, work, opts)
    starting = nil
    return h
  end
  local function prio()
    local p = r(4)
    if p == 1 then return "visible" end
    if p == 2 then return "background" end
    if p == 3 then return function() return on_screen and "scene" or "background" end end
    return nil
  end

  -- One job's work: a short random script of waits.
  local function work_for(n_steps)
    local script = {}
    for i = 1, n_steps do script[i] = { r(15), r(1000) } end
    return function(job)
      for i = 1, #script do
        local op, arg = script[i][1], script[i][2]
        if op == 1 then
          job:sleep(arg % 300)
          -- (a total refined, some past it: the tracker clamps them)
          if arg % 3 == 0 then job:progress(arg % 6, 4) else job:progress() end
        elseif op == 2 and arg % 5 == 0 then
          job:await(atlas) -- one future many jobs wait on, some of them leaving
        elseif op == 2 then
          local f = stagehand.future("leaf " .. arg)
          futures[#futures + 1] = f
          job:await(f)
        elseif op == 3 and #handles > 0 then
          job:await(handles[arg % #handles + 1])
        elseif op == 4 then
          job:await(orch:when(KEYS[arg % #KEYS + 1]))
        elseif op == 5 then
          local release = job:slot(arg % 2 == 0 and "dressing" or "layering")
          job:sleep(arg % 200)
          if arg % 7 ~= 0 then release() end -- sometimes kept until the end
        elseif op == 6 then
          job:permit("finalize")
        elseif op == 7 then
          if arg % 5 == 0 then error("chaos " .. arg) end
        elseif op == 8 then
          job:pcall(job.await, job, stagehand.future("never"))
        elseif op == 9 then
          barrier:arrive(barrier_keys[arg % #barrier_keys + 1])
        elseif op == 10 then
          job:slice()
        elseif op == 11 then
          job:await(orch:when_idle())
        elseif op == 12 then
          -- (its Handle is kept by nobody but the job: its closure can be collected)
          -- (some follow the job's own signal: they end when it does)
          local child = start("child " .. arg, work_for(2), {
            key = arg % 3 == 0 and KEYS[arg % #KEYS + 1] or nil,
            priority = prio(),
            signal = arg % 4 == 1 and job.signal or nil,
            phase = PHASES[arg % 4],
          })
          if arg % 2 == 0 then job:await(child) end
        elseif op == 13 then
          local h = handles[arg % #handles + 1]
          if arg % 4 == 0 then
            job:await(stagehand.all { h, h }) -- one job followed twice
          else
            -- a download beside a job, settled by the scene's faults (or
            -- not): until then the waiter's own clock runs
            local f = stagehand.future("a")
            futures[#futures + 1] = f
            if arg % 4 == 1 then
              job:await(stagehand.all { f, h })
            else
              local other = handles[(arg * 7) % #handles + 1]
              job:await(stagehand.all_settled { stagehand.all { f, h }, other })
            end
          end
        elseif op == 14 then
          job:permit("upload")
          clock:advance(arg % 5) -- the upload takes main-thread time
        else
          job:call(function(cb) if arg % 3 == 0 then cb(nil, arg) else futures[#futures + 1] = { cb = cb } end end)
        end
      end
      return seed
    end
  end

  local n_jobs = 150 + r(100)
  for i = 1, n_jobs do
    local opts = { priority = prio(), stall_ms = 2000 + 500 * r(20), phase = PHASES[i % 4] }
    if r(3) == 1 then opts.key = KEYS[r(#KEYS)] end
    if r(6) == 1 then
      local ctl = stagehand.controller()
      ctls[#ctls + 1] = ctl
      opts.signal = ctl.signal
    end
    if r(10) == 1 then
      handles[#handles + 1] = orch:when(KEYS[r(#KEYS)], nil, { priority = prio() })
    else
      handles[#handles + 1] = start("job " .. i, work_for(1 + r(6)), opts)
    end
  end
  -- The fetches made so far are said up front, and a phase that will
  -- have none (it counts nothing: the bar still reaches 1).
  local fetches = 0
  for _, phase in each, phase_of do
    if phase == "fetch" then fetches = fetches + 1 end
  end
  load:expect("fetch", fetches)
  load:expect("ghost", 0)
  local early_counts

  -- Time passes with faults: futures settle or not, callers leave, the
  -- window hides and comes back, the battle scrolls away and back, the
  -- clock is set back.
  for t = 1, 400 do
    local ev = r(20)
    if ev == 1 and #futures > 0 then
      local f = futures[r(#futures)]
      if f.cb then f.cb(nil, "late") elseif r(2) == 1 then f:resolve(t) else f:reject("bad " .. t) end
    elseif ev == 2 and #ctls > 0 then
      ctls[r(#ctls)]:abort("left")
    elseif ev == 3 then
      handles[r(#handles)]:cancel("closed")
    elseif ev == 4 then
      orch:set_visible(false)
    elseif ev == 5 then
      orch:set_visible(true)
    elseif ev == 6 then
      on_screen = not on_screen
    elseif ev == 7 then
      orch:pool("dressing", r(4) - 1)
    elseif ev == 8 then
      -- the game's clock is set back (no time passes for stagehand); no
      -- number is drawn, so every scene is the one it was before this
      clock.now = clock.now - 1000 * (t % 30)
    end
    clock:advance(r(200))
    orch:step(r(3) == 1 and 5 or nil)
    if misgranted[1] then error("seed " .. seed .. ", turn " .. t .. ": " .. misgranted[1]) end
    if t % 4 == 0 then
      check_sets(orch, seed, t)
      check_load(load, phase_of, ended_as, "seed " .. seed .. ", turn " .. t)
      -- (the report every 8 turns: it describes every running job's wait)
      if t % 8 == 0 then check_readouts(orch, trace, "seed " .. seed .. ", turn " .. t) end
    end
    if t == 200 then
      early:close()
      early_counts = early:counts()
    end -- (every turn costs 5x the scene on Lua 5.1)
    if t % 16 == 0 then collectgarbage() end
  end
  orch:set_visible(true)
  orch:pool("dressing", 2)
  local left = T.settle(orch, 600000, 250)
  if misgranted[1] then error("seed " .. seed .. ", settling: " .. misgranted[1]) end
  if left == 0 then
    local where = "seed " .. seed .. ", settled"
    check_load(load, phase_of, ended_as, where)
    loaded(load, where, fetches)
    seeded.traced(trace, where)
    local now_counts = early:counts()
    for k, n in each, early_counts do
      if now_counts[k] ~= n then error(where .. ": a closed tracker counted on (" .. k .. ")") end
    end
  end
  return orch, handles, left
end

local function check(seed)
  -- Children started inside a job's first run go through the run queue
  -- after one to three levels, not 32, so those starts happen often.
  local max_nested = E.MAX_NESTED_STARTS
  E.MAX_NESTED_STARTS = 1 + seed % 3
  local ok, orch, handles, left = pcall(scene, seed)
  E.MAX_NESTED_STARTS = max_nested
  assert(ok, "seed " .. seed .. ": the scene raised: " .. tostring(orch))
  seeded.assert_whole(seed, orch, handles, left)
  seeded.record_ends("chaos", seed, handles)
end

describe("chaos", function()
  local which, seeds = seeded.seeds()
  it("ends every loader and leaves nothing behind" .. which, function()
    for _, seed in ipairs(seeds) do check(seed) end
  end)
end)
