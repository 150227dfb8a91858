-- A host may sleep exactly as long as `orch:next_wake()` says. Each seeded
-- scene plays three times from its seed, each time on a fake clock of its
-- own: under a host that steps every millisecond; under one that steps
-- only when next_wake says 0 (after the game's own calls too) and
-- otherwise sleeps until next_wake falls due or the game's next event
-- does; and under one that keeps a timer as the luv driver does (set from
-- next_wake when the orchestrator reschedules: at the end of each step and
-- after a call from outside a step that gives it something to do) and
-- steps only when that fires. Scenes whose steps have a budget_ms of the
-- orchestrator's slice_ms (orch:wait steps in slices of it) play a
-- fourth time, pumped by orch:wait on a future nobody settles, with a
-- timeout that ends a millisecond before the game's next event. All must
-- tell the same story: every start, resume and end of a job, every
-- Handle's end and every log line, at the same clock time and in the same
-- order.
-- - A next_wake too late shows as a sleep, a grant, an idle settle or a
--   stall that the sleeping host saw later; so does one of nil, or more
--   than 0, while work is queued or a step could grant or settle.
-- - One that says 0 for ever: a host that never gets to sleep.
-- - A call from outside a step that does not reschedule when it should:
--   the timer's host sees what it started late, or never.
-- - A step taken before next_wake falls due changes nothing: the first
--   host takes one every millisecond.
-- - And on every host, each job is watched starting once, then ending
--   once, no sooner than it started, with an error if it did not end done.
-- Loaders sleep, await futures the game settles (or never does), hold a
-- slot across waits (or hand its release to the game, which calls it
-- later), take permits of an ops budget and of an ms budget, run busy
-- (moving the clock) and slice, await one another, keyed `when`s, a
-- barrier, `stagehand.all`, `any`, `race` and `when_idle`, a future given
-- up after an `orch:timeout` or through the game's controller
-- (`abortable`), a `job:call` the game answers later (or never) and the
-- loading screen's `load:idle()`, and fail; some count in a phase of the
-- screen's tracker, some are given up by a timeout of their own;
-- preloaders await `when_idle` before each task. Some scenes give each
-- step a budget_ms, which busy loaders overrun. The game starts loaders
-- (some sharing a key) and bursts of finalizers that each take a permit,
-- cancels callers, hides and shows the window, resizes the pool, changes
-- priorities, arrives at the barrier, changes the budgets, makes `when`s
-- and `when_idle`s of its own (some given up by a timeout, some
-- cancelled), makes gates (barriers) with stall clocks of their own, calls
-- `orch:newest` under one name, makes, advances and ends tasks of the
-- tracker by hand, forgets keys, and aborts the controller some loaders'
-- futures wait through.
-- Stall checks run every millisecond (check_ms = 1), so every host checks
-- at the same moments. (With a longer interval, a host that sleeps checks
-- when a stall clock falls due, and one that steps every frame at the
-- interval's ticks: the same stall, seen up to an interval apart.)
-- next_wake may wake a host early, never late: a stall clock's deadline
-- is filed lazily (progress does not move it in the core's heap), so a
-- wake may find the clock was reset meanwhile. The tally counts those
-- "empty wakes".
-- CHAOS_SEEDS=n runs more, CHAOS_SEED=s replays one (spec/seeded.lua);
-- PUMP_STORY=1 prints each scene's story, PUMP_TALLY=1 the tally.
local stagehand = require "stagehand"
local T = require "stagehand.testing"
local seeded = require "spec.seeded"

local LAST_EVENT = 300 -- the game's events fall within 0..LAST_EVENT ms
local LIMIT = 5000 -- a scene still running then has hung
local STALLS = { 20, 60, 150 }
local KEYS = { "k1", "k2", "k3" }

-- A scene, drawn from its seed alone: the same for both hosts.
local function draw(seed)
  local r = seeded.rng(seed)
  local sc = {
    capacity = r(3) - 1, -- (0 holds every slot until the game opens it)
    ops = r(2),
    ms = 1 + r(4),
    -- each step's budget_ms: none, or 1 to 4 (3 is the orchestrator's
    -- slice_ms, what orch:wait steps by: those scenes play under it too)
    budget_ms = ({ false, 1, 2, 3, 3, 4 })[r(6)] or nil,
    futures = {}, -- {t = when the game settles it (nil: never), how = "resolve"|"reject"}
    loaders = {},
    preloaders = {},
    bursts = {},
    events = {},
  }
  local event, future = seeded.drawers(r, sc, LAST_EVENT)
  local nloaders = 4 + r(6)
  local ncalls, ntasks = 0, 0 -- (job:call callbacks handed to the game; tasks it makes by hand)
  local function steps()
    local list = {}
    for _ = 1, 1 + r(5) do
      local x = r(21)
      local s
      if x == 1 then s = { "sleep", r(20) }
      elseif x == 2 then s = { "future", future() }
      elseif x == 3 then s = { "slot", r(3) } -- (released that many steps on, if it gets there)
      elseif x == 4 then s = { "permit", r(2) == 1 and "b" or "m", r(3) - 1 }
      elseif x == 5 then s = { "busy", r(5) }
      elseif x == 6 then s = { "progress" }
      elseif x == 7 then s = { "await", r(nloaders) }
      elseif x == 8 then s = { "when", KEYS[r(#KEYS)] }
      elseif x == 9 then s = { "barrier" }
      elseif x == 10 then s = { "all", future(), r(nloaders) }
      elseif x == 11 then s = { "idle" }
      elseif x == 12 then s = { "fail" }
      elseif x == 13 then s = { "grind", 2 + r(5), r(2) } -- (that many slices of that many ms)
      elseif x == 14 then s = { "hand" } -- (hands its slot's release to the game, which calls it later)
      elseif x == 16 then s = { "timed", future(), r(60) } -- (a future, given up after that many ms)
      elseif x == 17 then
        -- (an err-first callback the game calls later, or never)
        ncalls = ncalls + 1
        s = { "call", ncalls }
        if r(4) > 1 then event(r(LAST_EVENT), "answer", { ncalls, r(3) == 1 }) end
      elseif x == 18 then s = { "race", future(), r(nloaders) }
      elseif x == 19 then s = { "any", future(), r(nloaders) }
      elseif x == 20 then s = { "screen" } -- (awaits the loading screen's load:idle())
      elseif x == 21 then s = { "abortable", future() } -- (given up with the game's controller)
      else s = { "sleep", 0 }
      end
      list[#list + 1] = s
    end
    return list
  end
  for i = 1, nloaders do
    local rec = {
      t = i <= 2 and 0 or r(LAST_EVENT) - 1,
      key = r(3) == 1 and KEYS[r(#KEYS)] or nil,
      priority = r(3) == 1 and r(3) or seeded.NAMES[r(3)], -- (a number: a function reading level[n])
      stall_ms = STALLS[r(#STALLS)],
      -- (counted in a phase of the loading screen; some given up after a timeout)
      phase = r(3) == 1 and "fetch" or nil,
      timeout = r(5) == 1 and r(200) or nil,
    }
    rec.steps = steps()
    if r(3) == 1 then event(rec.t + r(100), "cancel", i) end
    sc.loaders[i] = rec
    event(rec.t, "start", i)
  end
  -- Newest-wins calls the game makes under one name (a search box):
  -- each cancels the one before.
  sc.newest = {}
  for i = 1, r(4) - 1 do
    sc.newest[i] = { steps = steps(), priority = seeded.NAMES[r(3)] }
    event(r(LAST_EVENT), "newest", i)
  end
  -- Tasks the game counts by hand on the loading screen: advanced, and
  -- finished or failed later, or never (then load:idle() stalls).
  for _ = 1, r(3) - 1 do
    ntasks = ntasks + 1
    local t = r(LAST_EVENT)
    event(t, "task", ntasks)
    if r(2) == 1 then event(t + r(80), "advance", ntasks) end
    if r(5) > 1 then event(t + r(120), "finish", { ntasks, r(4) == 1 }) end
  end
  for _ = 1, r(4) - 1 do
    -- A burst of finalizers: each takes a permit, then runs a while.
    local burst = {}
    for j = 1, 2 + r(6) do burst[j] = { budget = r(3) == 1 and "m" or "b", ms = r(3) - 1 } end
    sc.bursts[#sc.bursts + 1] = burst
    event(r(LAST_EVENT), "burst", #sc.bursts)
  end
  for i = 1, r(3) do
    sc.preloaders[i] = { tasks = 1 + r(3), ms = r(6) - 1 } -- (0: no pause between tasks)
    event(r(LAST_EVENT), "preload", i)
  end
  for _ = 1, r(3) - 1 do
    local from = r(LAST_EVENT - 50)
    event(from, "hide")
    event(from + r(60), "show")
  end
  for _ = 1, r(4) do event(r(LAST_EVENT), "pool", r(3) - 1) end
  for _ = 1, r(3) do event(r(LAST_EVENT), "level", { r(3), seeded.NAMES[r(3)] }) end
  for _, k in ipairs({ "a", "b", "c" }) do
    if r(4) > 1 then event(r(LAST_EVENT), "arrive", k) end
  end
  for _ = 1, r(3) - 1 do event(r(LAST_EVENT), "when", KEYS[r(#KEYS)]) end
  for _ = 1, r(3) - 1 do event(r(LAST_EVENT), "idle", r(3) == 1 and r(100) or nil) end -- (some given up after ms)
  for _ = 1, r(3) - 1 do event(r(LAST_EVENT), "forget", KEYS[r(#KEYS)]) end
  -- A download the game gives up on: loaders await a future through a
  -- controller's signal, which the game aborts later, or never.
  sc.gave_up = r(3) == 1 and r(LAST_EVENT) or nil
  if sc.gave_up then event(sc.gave_up, "give_up") end
  for _ = 1, r(3) - 1 do event(r(LAST_EVENT), "drop", r(4)) end
  for n = 1, r(3) do event(r(LAST_EVENT), "give_back", n) end -- (cancels the game's nth when or when_idle)
  for _ = 1, r(3) - 1 do event(r(LAST_EVENT), "budget", { r(2) == 1 and "b" or "m", r(4) }) end
  for id = 1, r(3) - 1 do
    -- A gate the game makes later: some of its keys arrive, some never do.
    local t = r(LAST_EVENT)
    event(t, "gate", id)
    for _, k in ipairs({ "x", "y" }) do
      if r(3) > 1 then event(t + r(60), "open", { id, k }) end
    end
  end
  event(LAST_EVENT, "pool", 2) -- (the pool opens at last: a closed one holds its waiters until they stall)
  seeded.sort_events(sc.events)
  return sc
end

-- Plays `sc` under `host` ("every ms", "next_wake" or "timer"); returns
-- its story (a list of lines), and the orchestrator and Handles for the
-- end checks.
local function play(seed, sc, host, tally)
  local story = {}
  local clock = T.clock(0)
  local function say(text) story[#story + 1] = ("%.17g %s"):format(clock.now, text) end
  local orch = T.new {
    clock = clock,
    pools = { p = sc.capacity },
    check_ms = 1,
    stall_ms = 200, -- (a `when` whose key never starts stalls by this)
    slice_ms = 3,
    log = function(m) say("log " .. m:match("^[^\n]*"):gsub("0x%x+", "0x?")) end,
  }
  orch:budget("b", { ops = sc.ops })
  orch:budget("m", { ms = sc.ms })
  local wrong -- (the first thing watch_once found wrong)
  local watched = seeded.watch_once(orch, nil, say, function(text)
    wrong = wrong or ("seed %d (%s): %s"):format(seed, host, text)
  end)
  local level = { "scene", "background", "visible" }
  local fns = {}
  for k = 1, 3 do fns[k] = function() return level[k] end end
  local futures = {}
  for i = 1, #sc.futures do futures[i] = stagehand.future("f" .. i) end
  local barrier = orch:barrier("party", { "a", "b", "c" }, { stall_ms = 150 })
  local handles, ctls, by_loader = { barrier.settled }, {}, {}
  local mine, gates = {}, {} -- the game's own whens and when_idles; its gates, by event
  local handed = {} -- slots' releases loaders handed to the game
  local calls, tasks = {}, {} -- job:call callbacks handed to the game; its tasks by hand
  local load = stagehand.tracker(orch)
  local give_up = stagehand.controller()
  local function follow(h, name)
    handles[#handles + 1] = h
    h:on_end(function(st, v) say(("%s ended %s"):format(name, seeded.end_text(st, v))) end)
  end
  local wait_on = seeded.wait_on
  local env = { say = say, clock = clock, futures = futures, by_loader = by_loader }
  -- (the kinds only this scene draws; seeded.loader runs the rest)
  local function more(job, s, _, held)
    local kind = s[1]
    if kind == "permit" then
      local ok = job:pcall(job.permit, job, s[2])
      if ok and s[3] > 0 then clock:advance(s[3]) end -- (its finalize takes main-thread time)
      return ok and "ok" or "raised"
    elseif kind == "hand" then
      if not held.release then return "nothing" end
      handed[#handed + 1] = held.release
      held.release = nil
    elseif kind == "grind" then
      for _ = 1, s[2] do
        clock:advance(s[3])
        if not job:pcall(job.slice, job) then return "raised" end
      end
    elseif kind == "progress" then job:progress()
    elseif kind == "when" then return wait_on(job, orch:when(s[2]))
    elseif kind == "barrier" then return wait_on(job, barrier.settled)
    elseif kind == "idle" then return wait_on(job, orch:when_idle())
    elseif kind == "timed" then return wait_on(job, stagehand.abortable(futures[s[2]], orch:timeout(s[3])))
    elseif kind == "call" then
      local ok, v = job:pcall(job.call, job, function(cb) calls[s[2]] = cb end)
      return ok and "answered " .. tostring(v) or "raised " .. seeded.line(type(v) == "table" and v.kind or v)
    elseif kind == "race" or kind == "any" then
      local f, h = futures[s[2]], by_loader[s[3]]
      return wait_on(job, stagehand[kind]({ f, h or f }))
    elseif kind == "screen" then return wait_on(job, load:idle())
    elseif kind == "abortable" then return wait_on(job, stagehand.abortable(futures[s[2]], give_up.signal))
    end
  end
  local function loader(i) return seeded.loader(env, sc.loaders[i].steps, "L" .. i, i, more) end
  local function preloader(i)
    local p = sc.preloaders[i]
    return function(job)
      for n = 1, p.tasks do
        local out = wait_on(job, orch:when_idle())
        say(("P%d idle %d %s"):format(i, n, out))
        if job.signal.aborted then return end
        if p.ms > 0 then job:sleep(p.ms) end
      end
    end
  end

  local apply = {
    start = function(i)
      local rec = sc.loaders[i]
      local ctl = stagehand.controller()
      ctls[i] = ctl
      local prio = rec.priority
      if type(prio) == "number" then prio = fns[prio] end
      local signal = ctl.signal
      if rec.timeout then signal = orch:timeout(rec.timeout) end -- (cancel then does nothing)
      local h = orch:run("L" .. i, loader(i), { key = rec.key, priority = prio, stall_ms = rec.stall_ms, signal = signal,
        phase = rec.phase })
      by_loader[i] = h
      follow(h, "L" .. i)
    end,
    preload = function(i) follow(orch:run("P" .. i, preloader(i), { priority = "background" }), "P" .. i) end,
    burst = function(i)
      for j, f in ipairs(sc.bursts[i]) do
        follow(orch:run(("B%d.%d"):format(i, j), function(job)
          job:permit(f.budget)
          if f.ms > 0 then clock:advance(f.ms) end
          return j
        end), ("B%d.%d"):format(i, j))
      end
    end,
    cancel = function(i) ctls[i]:abort("scrolled away") end,
    settle = function(i)
      local f = futures[i]
      if sc.futures[i].how == "resolve" then f:resolve(i) else f:reject("no such file") end
    end,
    hide = function() orch:set_visible(false) end,
    show = function() orch:set_visible(true) end,
    pool = function(n) orch:pool("p", n) end,
    level = function(x) level[x[1]] = x[2] end,
    arrive = function(k) barrier:arrive(k) end,
    when = function(key)
      local h = orch:when(key)
      mine[#mine + 1] = h
      follow(h, "when " .. key)
    end,
    idle = function(ms)
      local h = orch:when_idle(ms and orch:timeout(ms))
      mine[#mine + 1] = h
      follow(h, "when_idle")
    end,
    drop = function(n) if mine[n] then mine[n]:cancel("not needed") end end,
    budget = function(x)
      if x[1] == "b" then orch:budget("b", { ops = x[2] }) else orch:budget("m", { ms = x[2] }) end
    end,
    gate = function(id)
      gates[id] = orch:barrier("gate " .. id, { "x", "y" }, { stall_ms = 40 })
      follow(gates[id].settled, "gate " .. id)
    end,
    open = function(x) gates[x[1]]:arrive(x[2]) end,
    give_back = function(n) if handed[n] then handed[n]() end end,
    answer = function(x)
      local cb = calls[x[1]]
      if cb then if x[2] then cb("no reply") else cb(nil, x[1]) end end
    end,
    newest = function(i)
      local label = "N" .. i
      local h = orch:newest("search", label, seeded.loader(env, sc.newest[i].steps, label, i, more),
        { priority = sc.newest[i].priority, stall_ms = 100 })
      follow(h, label)
    end,
    task = function(n) tasks[n] = load:task("fetch", { label = "T" .. n, total = 2 }) end,
    advance = function(n) tasks[n]:advance() end,
    forget = function(key) orch:forget(key) end,
    give_up = function() give_up:abort("the player gave up") end,
    finish = function(x) if x[2] then tasks[x[1]]:fail("dropped") else tasks[x[1]]:finish() end end,
  }

  local events, ev = sc.events, 1
  local wakes, empty, woke, before = 0, 0, false, 0
  local timer = host == "timer" and seeded.luv_timer(orch, clock) -- (the "timer" host's)
  local never = stagehand.future("never") -- (what the "wait" host waits on)
  while true do
    while ev <= #events and events[ev].t <= clock.now do
      local e = events[ev]
      say("game " .. e.what)
      apply[e.what](e.arg)
      ev = ev + 1
      if timer then seeded.check_timer(seed, timer, orch, clock, "the game's " .. e.what) end
    end
    if host == "wait" then
      -- (orch:wait pumps until a millisecond before the game's next event:
      -- on a future nobody settles, so it returns by its timeout)
      if ev > #events and orch.nrunning == 0 then
        while orch:next_wake() == 0 do orch:step(sc.budget_ms) end -- (a cancelled job's cleanup, still queued)
        break
      end
      local last = ev <= #events and events[ev].t - 1 or LIMIT
      if last >= clock.now then
        local st, why = orch:wait(never, last - clock.now)
        if st ~= nil or why ~= "timeout" then
          error(("seed %d (wait): orch:wait returned %s, %s"):format(seed, tostring(st), tostring(why)))
        end
        -- (it returns once a step ends past its time, a busy loader's
        -- doing, with work maybe still queued: the other hosts run that
        -- before the game's next event, so this one does too)
        while orch:next_wake() == 0 do orch:step(sc.budget_ms) end
      end
      if ev > #events then
        if orch.nrunning > 0 then
          error(("seed %d (wait): still running at %g ms\n%s"):format(seed, clock.now, orch:dump()))
        end
        break
      end
      if clock.now < events[ev].t then clock.now = events[ev].t end
    else
    if host == "timer" then
      -- (the timer fires: one step, whose end sets it again)
      while timer.due and timer.due <= clock.now do
        timer.due = nil
        orch:step(sc.budget_ms)
      end
    end
    -- (the host that sleeps steps only when next_wake says 0, as a luv
    -- loop does: after the game's events too)
    if host == "every ms" then orch:step(sc.budget_ms) end
    local spins = 0
    while host ~= "timer" and orch:next_wake() == 0 do
      spins = spins + 1
      if spins > 1000 then
        error(("seed %d (%s): next_wake says 0 after 1,000 steps at %g ms\n%s"):format(seed, host, clock.now, orch:dump()))
      end
      orch:step(sc.budget_ms)
    end
    if woke then
      -- (an empty wake: next_wake woke the host for nothing the story shows)
      wakes = wakes + 1
      if #story == before then empty = empty + 1 end
      woke = false
    end
    if ev > #events and orch.nrunning == 0 then break end
    if clock.now > LIMIT then
      error(("seed %d (%s): still running at %g ms\n%s"):format(seed, host, clock.now, orch:dump()))
    end
    local at = ev <= #events and math.max(events[ev].t, clock.now) or nil -- (a busy loader may run past one)
    if host == "every ms" then
      if not at or at > clock.now then at = clock.now + 1 end
    elseif host == "timer" then
      if timer.due and (not at or timer.due < at) then at = timer.due end
    else
      local w = orch:next_wake()
      if w and (not at or clock.now + w < at) then at, woke, before = clock.now + w, true, #story end
    end
    if not at then
      error(("seed %d: %d job(s) running, nothing left to happen, and %s at %g ms\n%s"):format(seed, orch.nrunning,
        host == "timer" and "the timer stopped" or "next_wake says nil", clock.now, orch:dump()))
    end
    clock.now = at
    end
  end
  if wrong then error(wrong) end
  seeded.check_watched(seed, watched)
  if host == "next_wake" then
    tally.wakes = tally.wakes + wakes
    tally["empty wakes"] = tally["empty wakes"] + empty
  end
  return story, orch, handles
end

local function scene(seed, tally)
  local sc = draw(seed)
  local fine = play(seed, sc, "every ms", tally)
  local story, orch, handles = play(seed, sc, "next_wake", tally)
  local timed = play(seed, sc, "timer", tally)
  if os.getenv("PUMP_STORY") then print(table.concat(story, "\n")) end
  local others = { { "sleeping by next_wake", story }, { "on a timer set as the luv driver sets it", timed } }
  -- (orch:wait steps by slice_ms: only scenes whose steps have that budget)
  if sc.budget_ms == 3 then
    others[3] = { "pumped by orch:wait", (play(seed, sc, "wait", tally)) }
    tally["waited scenes"] = (tally["waited scenes"] or 0) + 1
  end
  seeded.same_stories(seed, "stepping every ms", fine, others)
  tally.lines = tally.lines + #story
  for _, line in ipairs(story) do
    local what = line:match("^%S+ end (%a+)") or line:match("^%S+ L%d+ step %d+ (%a+)")
    if what then tally[what] = (tally[what] or 0) + 1 end
  end
  return orch, handles
end

describe("next_wake", function()
  local which, seeds = seeded.seeds()
  it("lets a host sleep as long as it says and miss nothing" .. which, function()
    local tally = { wakes = 0, ["empty wakes"] = 0, lines = 0 }
    seeded.run_scenes("pump", seeds, scene, tally, "PUMP_TALLY")
    -- (every kind of wait, and every kind of end, over 20 scenes or more)
    if #seeds >= 20 then
      for _, kind in ipairs({ "sleep", "future", "slot", "permit", "busy", "grind", "await", "when", "barrier",
        "all", "idle", "hand", "timed", "call", "race", "any", "screen", "abortable", "done", "failed", "cancelled", "stalled",
        "wakes" }) do
        assert.is_true((tally[kind] or 0) > 0, "none of: " .. kind)
      end
    end
  end)
end)
