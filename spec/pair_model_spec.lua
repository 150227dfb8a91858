-- Two orchestrators on one clock (a scene's and a shared asset cache's),
-- whose jobs wait on each other: each seeded scene plays three times, each
-- on a fake clock of its own, under three hosts, which must tell the same
-- story (every start, resume and end of a job, every Handle's end and
-- every log line, at the same clock time and in the same order):
-- - one that, every millisecond, steps both orchestrators in turn until a
--   round of the two steps tells nothing new (it never asks next_wake);
-- - one that steps an orchestrator only while its next_wake says 0, and
--   otherwise sleeps until the sooner of the two next_wakes, or the game's
--   next event, falls due;
-- - one that keeps a timer for each, set as the luv driver sets it (from
--   next_wake when that orchestrator reschedules, moved only ever earlier,
--   stopped on nil or by close), and steps an orchestrator only when its
--   timer fires. After every game call and every step, each
--   orchestrator's timer must be no later than its next_wake: a job of
--   one that ends in the other's step must set the other's timer.
-- And on every host each job is watched starting once, then ending once,
-- and the scene ends whole on both orchestrators (seeded.assert_whole).
--
-- What crosses: loaders await Handles of the other orchestrator's loaders,
-- `when`s of its keys, its `when_idle` and its barrier, `stagehand.all`
-- over Handles of both, and sub-jobs they start in the other from inside
-- their own work (a first resume of one orchestrator's job inside
-- another's); they settle futures the other's jobs await and arrive at
-- either barrier; now and then a loader closes the other from inside its
-- work (a close "at once": the other's last step runs inside this one's
-- job), or the game closes one. A job waiting on the other orchestrator waits as on
-- a future (its own stall clock runs), so scenes whose other side is
-- hidden or slow end by stalls.
-- CHAOS_SEEDS=n runs more, CHAOS_SEED=s replays one (spec/seeded.lua);
-- PAIR_STORY=1 prints each scene's story, PAIR_TALLY=1 the tally.
local stagehand = require "stagehand"
local T = require "stagehand.testing"
local seeded = require "spec.seeded"

local LAST_EVENT = 300 -- the game's events fall within 0..LAST_EVENT ms
local LIMIT = 5000 -- a scene still running then has hung
local STALLS = { 20, 60, 150 }
local KEYS = { "k1", "k2" }
local SIDES = { "A", "B" }
local PARTY = { "hero", "mage", "rogue" } -- (each side's barrier waits for these)

-- A scene, drawn from its seed alone: the same for every host.
local function draw(seed)
  local r = seeded.rng(seed)
  local sc = {
    capacity = { r(3) - 1, r(3) - 1 }, -- (0 holds every slot until the game opens it)
    party = { r(3) > 1, r(3) > 1 }, -- whether each side has a barrier from the start
    futures = {}, -- {t = when the game settles it (nil: never), how = "resolve"|"reject"}
    loaders = {},
    events = {},
  }
  local event, future = seeded.drawers(r, sc, LAST_EVENT)
  -- (now and then the game asks one side's when_idle before anything runs)
  if r(3) == 1 then event(0, "idle", r(2)) end
  local nloaders = 5 + r(7)
  -- (now and then every loader is one side's: the other, a cache nobody
  -- has used yet, only takes sub-jobs, `when`s and `when_idle`s)
  local lone = r(4) == 1 and r(2) or nil
  for i = 1, nloaders do
    local rec = {
      side = lone or r(2),
      t = i <= 2 and 0 or r(LAST_EVENT) - 1,
      key = r(3) == 1 and KEYS[r(#KEYS)] or nil,
      priority = seeded.NAMES[r(3)],
      stall_ms = STALLS[r(#STALLS)],
      steps = {},
    }
    for _ = 1, 1 + r(5) do
      local x = r(17)
      local s
      if x == 1 then s = { "sleep", r(20) }
      elseif x == 2 then s = { "future", future() }
      elseif x <= 4 then s = { "await", r(nloaders) } -- (of either side)
      elseif x == 5 then s = { "when", r(2), KEYS[r(#KEYS)] } -- (1: its own side's key, 2: the other's)
      elseif x == 6 then
        -- (a job of the other side; now and then it closes this side, from
        -- inside its first resume when it does not sleep first)
        s = { "sub", r(3) - 1, r(3) == 1 and KEYS[r(#KEYS)] or nil, r(8) == 1 }
      elseif x == 7 then s = { "slot", r(3) }
      elseif x == 8 then s = { "idle", r(2) }
      elseif x == 9 then s = { "all", future(), r(nloaders) }
      elseif x == 10 then s = { "busy", r(5) }
      elseif x == 11 then s = { "fail" }
      elseif x == 12 and r(4) == 1 then s = { "close" } -- (the other side, from inside this work)
      elseif x == 13 then s = { "give", r(#sc.futures + 1) } -- (settles a future, if any, from inside this work)
      elseif x == 14 then s = { "arrive", r(2), PARTY[r(#PARTY)] } -- (at its own side's barrier, or the other's)
      elseif x == 15 then s = { "gate", r(2) } -- (awaits that barrier)
      else s = { "sleep", 0 }
      end
      rec.steps[#rec.steps + 1] = s
    end
    if r(4) == 1 then event(rec.t + r(100), "cancel", i) end
    sc.loaders[i] = rec
    event(rec.t, "start", i)
  end
  for _ = 1, r(3) - 1 do
    local side, from = r(2), r(LAST_EVENT - 50)
    event(from, "hide", side)
    event(from + r(80), "show", side)
  end
  for _ = 1, r(3) do event(r(LAST_EVENT), "pool", { r(2), r(3) - 1 }) end
  for _ = 1, r(3) - 1 do event(r(LAST_EVENT), "when", { r(2), KEYS[r(#KEYS)] }) end
  for _ = 1, r(3) - 1 do event(r(LAST_EVENT), "idle", r(2)) end
  for _ = 1, r(3) - 1 do event(r(LAST_EVENT), "drop", r(4)) end
  for _ = 1, r(3) - 1 do event(r(LAST_EVENT), "arrive", { r(2), PARTY[r(#PARTY)] }) end
  if r(4) == 1 then event(r(LAST_EVENT), "close", r(2)) end
  event(LAST_EVENT, "pool", { 1, 2 }) -- (the pools open at last: a closed one holds its waiters until they stall)
  event(LAST_EVENT, "pool", { 2, 2 })
  seeded.sort_events(sc.events)
  return sc
end

-- Plays `sc` under `host` ("rounds", "next_wake" or "timer"); returns its
-- story (a list of lines), the two orchestrators and each one's Handles.
local function play(seed, sc, host, tally)
  local story = {}
  local clock = T.clock(0)
  local function say(text) story[#story + 1] = ("%.17g %s"):format(clock.now, text) end
  local watched, wrong = {}, nil -- (by side; the first thing watch_once found wrong)
  local function found(text) wrong = wrong or ("seed %d (%s): %s"):format(seed, host, text) end
  local orchs, handles = {}, { {}, {} }
  local timers = {} -- the "timer" host's, by side
  for s = 1, 2 do
    local name = SIDES[s]
    local o = T.new {
      clock = clock,
      pools = { p = sc.capacity[s] },
      check_ms = 1,
      stall_ms = 200, -- (a `when` whose key never starts stalls by this)
      log = function(m) say(name .. " log " .. m:match("^[^\n]*"):gsub("0x%x+", "0x?")) end,
    }
    orchs[s] = o
    watched[s] = seeded.watch_once(o, name, say, found)
    if host == "timer" then timers[s] = seeded.luv_timer(o, clock) end
  end
  local futures = {}
  for i = 1, #sc.futures do futures[i] = stagehand.future("f" .. i) end
  local parties = {}
  local ctls, by_loader, mine = {}, {}, {}
  local function follow(s, h, name)
    local list = handles[s]
    list[#list + 1] = h
    h:on_end(function(st, v) say(("%s ended %s"):format(name, seeded.end_text(st, v))) end)
  end
  for s = 1, 2 do
    if sc.party[s] then
      parties[s] = orchs[s]:barrier("party", PARTY, { stall_ms = 150 })
      follow(s, parties[s].settled, SIDES[s] .. " party")
    end
  end
  local wait_on = seeded.wait_on
  local env = { say = say, clock = clock, futures = futures, by_loader = by_loader }
  local function loader(i)
    local rec = sc.loaders[i]
    local own, other = orchs[rec.side], orchs[3 - rec.side]
    local own_party, other_party = parties[rec.side], parties[3 - rec.side]
    local label = "L" .. i
    -- (the kinds only this scene draws; seeded.loader runs the rest)
    local function more(job, s, n)
      local kind = s[1]
      if kind == "when" then return wait_on(job, (s[2] == 1 and own or other):when(s[3]))
      elseif kind == "sub" then
        -- (a job of the other side, started from inside this work: its
        -- first resume runs here, inside this job's)
        local sub = label .. "." .. n
        local h = other:run(sub, function(j)
          if s[2] > 0 then j:sleep(s[2] * 7) end
          if s[4] then own:close("called back") end
          return n
        end, { key = s[3], stall_ms = 100 })
        follow(3 - rec.side, h, sub)
        return wait_on(job, h)
      elseif kind == "idle" then return wait_on(job, (s[2] == 1 and own or other):when_idle())
      elseif kind == "close" then other:close("quit to menu")
      elseif kind == "arrive" or kind == "gate" then
        local party = s[2] == 1 and own_party or other_party
        if not party then return "none" end
        if kind == "gate" then return wait_on(job, party.settled) end
        party:arrive(s[3])
      elseif kind == "give" then
        local f = futures[s[2]]
        if not (f and f:state() == "pending") then return "nothing" end
        f:resolve("given")
      end
    end
    return seeded.loader(env, rec.steps, label, i, more)
  end

  local apply = {
    start = function(i)
      local rec = sc.loaders[i]
      local ctl = stagehand.controller()
      ctls[i] = ctl
      local h = orchs[rec.side]:run("L" .. i, loader(i),
        { key = rec.key, priority = rec.priority, stall_ms = rec.stall_ms, signal = ctl.signal })
      by_loader[i] = h
      follow(rec.side, h, "L" .. i)
    end,
    cancel = function(i) ctls[i]:abort("scrolled away") end,
    settle = function(i)
      local f = futures[i]
      if f:state() ~= "pending" then return end -- (a loader gave it already)
      if sc.futures[i].how == "resolve" then f:resolve(i) else f:reject("no such file") end
    end,
    hide = function(s) orchs[s]:set_visible(false) end,
    show = function(s) orchs[s]:set_visible(true) end,
    pool = function(x) orchs[x[1]]:pool("p", x[2]) end,
    when = function(x)
      local h = orchs[x[1]]:when(x[2])
      mine[#mine + 1] = h
      follow(x[1], h, SIDES[x[1]] .. " when " .. x[2])
    end,
    idle = function(s)
      local h = orchs[s]:when_idle()
      mine[#mine + 1] = h
      follow(s, h, SIDES[s] .. " when_idle")
    end,
    drop = function(n) if mine[n] then mine[n]:cancel("not needed") end end,
    close = function(s) orchs[s]:close("game over") end,
    arrive = function(x) if parties[x[1]] then parties[x[1]]:arrive(x[2]) end end,
  }

  -- (the timer host: every orchestrator whose next_wake is due no later
  -- than its timer, after whatever the host or the game just did)
  local function timers_hold(after)
    for s = 1, 2 do seeded.check_timer(seed, timers[s], orchs[s], clock, after .. " (" .. SIDES[s] .. "'s timer)") end
  end
  local function running() return orchs[1].nrunning + orchs[2].nrunning end

  local events, ev = sc.events, 1
  while true do
    while ev <= #events and events[ev].t <= clock.now do
      local e = events[ev]
      say("game " .. e.what)
      apply[e.what](e.arg)
      ev = ev + 1
      if host == "timer" then timers_hold("the game's " .. e.what) end
    end
    local spins = 0
    local function spin()
      spins = spins + 1
      if spins > 1000 then
        error(("seed %d (%s): still stepping after 1,000 steps at %g ms\n%s\n%s"):format(
          seed, host, clock.now, orchs[1]:dump(), orchs[2]:dump()))
      end
    end
    if host == "rounds" then
      -- (both, in turn, until a round tells nothing new)
      repeat
        spin()
        local before = #story
        orchs[1]:step()
        orchs[2]:step()
      until #story == before
    elseif host == "next_wake" then
      while orchs[1]:next_wake() == 0 or orchs[2]:next_wake() == 0 do
        spin()
        for s = 1, 2 do
          if orchs[s]:next_wake() == 0 then orchs[s]:step() end
        end
      end
    else
      -- (a timer fires: one step, whose end sets that timer again)
      local function fires(s) return timers[s].due and timers[s].due <= clock.now end
      while fires(1) or fires(2) do
        spin()
        for s = 1, 2 do
          if fires(s) then
            timers[s].due = nil
            orchs[s]:step()
            timers_hold(SIDES[s] .. "'s step")
          end
        end
      end
    end
    if ev > #events and running() == 0 then break end
    if clock.now > LIMIT then
      if os.getenv("PAIR_STORY") then print(table.concat(story, "\n")) end -- (the story so far)
      error(("seed %d (%s): still running at %g ms\n%s\n%s"):format(seed, host, clock.now, orchs[1]:dump(), orchs[2]:dump()))
    end
    local at = ev <= #events and math.max(events[ev].t, clock.now) or nil -- (a busy loader may run past one)
    if host == "rounds" then
      if not at or at > clock.now then at = clock.now + 1 end
    else
      for s = 1, 2 do
        local w
        if host == "timer" then w = timers[s].due else w = orchs[s]:next_wake() and clock.now + orchs[s]:next_wake() end
        if w and (not at or w < at) then at = w end
      end
    end
    if not at then
      error(("seed %d (%s): %d job(s) running and nothing left to happen at %g ms\n%s\n%s"):format(
        seed, host, running(), clock.now, orchs[1]:dump(), orchs[2]:dump()))
    end
    clock.now = at
  end
  if wrong then error(wrong) end
  for s = 1, 2 do seeded.check_watched(seed, watched[s], SIDES[s]) end
  tally.scenes = tally.scenes + 1
  return story, orchs, handles
end

local function scene(seed, tally)
  local sc = draw(seed)
  local fine = play(seed, sc, "rounds", tally)
  local story, orchs, handles = play(seed, sc, "next_wake", tally)
  local timed = play(seed, sc, "timer", tally)
  if os.getenv("PAIR_STORY") then print(table.concat(story, "\n")) end
  seeded.same_stories(seed, "stepping both every ms", fine,
    { { "sleeping by next_wake", story }, { "on timers set as the luv driver sets them", timed } })
  tally.lines = tally.lines + #story
  for _, line in ipairs(story) do
    local what = line:match("^%S+ %a end (%a+)") or line:match("^%S+ L%d+ step %d+ (%a+)")
    if what then tally[what] = (tally[what] or 0) + 1 end
    if line:match("^%S+ L%d+ step %d+ %a+ raised") then tally.raised = (tally.raised or 0) + 1 end
  end
  return orchs, handles
end

describe("two orchestrators", function()
  local which, seeds = seeded.seeds()
  it("wake each other on time and end whole, whichever way the host pumps them" .. which, function()
    local tally = { scenes = 0, lines = 0 }
    for _, seed in ipairs(seeds) do
      local orchs, handles = scene(seed, tally)
      for s = 1, 2 do seeded.assert_whole(seed, orchs[s], handles[s], orchs[s].nrunning) end
      local all = {}
      for s = 1, 2 do
        for _, h in ipairs(handles[s]) do all[#all + 1] = h end
      end
      seeded.record_ends("pair", seed, all)
    end
    seeded.print_tally("PAIR_TALLY", tally)
    -- (every kind of wait, and every kind of end, over 20 scenes or more)
    if #seeds >= 20 then
      for _, kind in ipairs({ "sleep", "future", "await", "when", "sub", "slot", "idle", "all", "busy", "close", "give", "arrive", "gate",
        "done", "failed", "cancelled", "stalled", "raised" }) do
        assert.is_true((tally[kind] or 0) > 0, "none of: " .. kind)
      end
    end
  end)
end)
