-- When `when_idle` settles, checked against a model that knows nothing of
-- stagehand's insides. Seeded scenes run keyed loaders; each time one
-- resumes it picks its next wait: a `when_idle` (its own or one the scene
-- made), another loader's Handle, a `when` on a loader's key (running,
-- ended or not started yet), `stagehand.all`, `any` or `race` of a mix of
-- those and futures, or one of them through `abortable`, a future, a
-- sleep, a slot of a pool that is mostly closed, or a
-- barrier's `settled`, or a load tracker's `load:idle()`. Between steps
-- the game settles futures, moves the
-- clock, arrives at barriers, opens and closes the pool, starts loaders
-- (some by `orch:newest`, each call cancelling the one before),
-- cancels loaders and `when_idle` waits, and makes `when_idle` waits and
-- `when`s of its own, makes and ends tasks of the tracker by hand and asks
-- it for `load:idle()`; now and then it asks for idle before anything ran.
-- A third of the loaders count in a phase of the tracker.
--
-- The model: a loader is idle when it awaits a `when_idle`, or a loader
-- that is idle (by its Handle or its key; an older newest-wins call's
-- Handle by the newest call's loader), or a group whose open parts are
-- all of those; anything else it waits on (a future, a sleep, a slot, a
-- barrier, a `when` whose run has not started, a part that is a future)
-- keeps it busy, as does running. A `load:idle()` is idle when no task
-- made by hand runs and every loader counted in a phase is idle. The world
-- is idle when every running loader is, every `load:idle()` still waiting
-- is, and no barrier or unstarted `when` is waiting.
-- - A `when_idle` that settles `done` does so while the world is idle.
-- - After a step that settled none, the world is not idle while one waits.
-- - After a step that did settle some, and whose woken loaders went idle
--   again, the next step settles every one still waiting.
-- The model reads nothing but public Handles' and futures' states.
-- CHAOS_SEEDS=n runs more, CHAOS_SEED=s replays one (spec/seeded.lua).
local stagehand = require "stagehand"
local T = require "stagehand.testing"
local seeded = require "spec.seeded"

local function scene(seed, tally)
  local r = seeded.rng(seed)
  local orch, clock = T.new { pools = { p = 0 }, stall_ms = 1e12, log = function() end }
  local loaders = {} -- by number; loader i is keyed "k" .. i
  local idles = {} -- every when_idle Handle, whoever made it
  local whens = {} -- every when Handle: {h =, key =}
  local futures, new_future = seeded.futures() -- every future a loader or a group waits on
  local barriers = {} -- {b =, keys =}
  local handles = {} -- every Handle, for the end
  local ctls = {} -- controllers of the scene's own when_idle waits
  local capacity, winding, turn = 0, false, 0
  local load, hand, load_idles = stagehand.tracker(orch), {}, {} -- (tasks made by hand; idle Handles)
  local settled, violation = 0, nil

  -- The model.
  local in_batch = false -- true inside a when_idle's on_end: the settle under way
  local function running(h) return h:state() == "running" end
  -- A loader's job runs until its work returns or its signal aborts: its
  -- own Handle may have left while `when`s still follow it.
  local function alive(rec) return rec ~= nil and not rec.dead end
  local function loader_of_key(key)
    local rec = loaders[tonumber(key:sub(2))]
    if alive(rec) then return rec end
  end
  local idle_of
  local function load_idle(seen)
    for _, task in ipairs(hand) do
      if not task.ended then return false end
    end
    for _, rec in ipairs(loaders) do
      if rec.phase and alive(rec) and not idle_of(rec, seen) then return false end
    end
    return true
  end
  -- What a wait is on: {kind = "idle"|"job"|"when"|"future"|..., h =, rec =, key =, f =}.
  local function open(w)
    if w.kind == "future" then return w.f:state() == "pending" end
    return running(w.h)
  end
  -- (an older newest-wins call's Handle follows the newest call's run)
  local function latest(rec)
    while rec.follow do rec = rec.follow end
    return rec
  end
  local function idle_on(w, seen)
    if w.kind == "idle" then return true end
    if w.kind == "job" then return idle_of(latest(w.rec), seen) end
    if w.kind == "load" then return load_idle(seen) end
    if w.kind == "when" then
      local rec = loader_of_key(w.key)
      return rec ~= nil and idle_of(rec, seen) -- (else the when waits for its run to start: busy)
    end
    return false -- a future
  end
  idle_of = function(rec, seen)
    local m = seen[rec]
    if m ~= nil then return m end
    seen[rec] = false
    local on, v = rec.on, false
    if on == nil then
      v = false -- running, or queued to run
    elseif on.kind == "group" then
      v = true
      for _, part in ipairs(on.parts) do
        if open(part) and not idle_on(part, seen) then v = false end
      end
    elseif on.kind == "idle" then
      -- (a when_idle the settle under way has ended still counts: the
      -- settle was decided before it ended any)
      v = running(on.h) or (in_batch and on.h:state() == "done")
    elseif on.kind == "job" or on.kind == "when" or on.kind == "load" then
      v = open(on) and idle_on(on, seen)
    end -- a future, a sleep, a slot, a barrier: busy
    seen[rec] = v
    return v
  end
  local function world_idle()
    local seen = {}
    for _, rec in ipairs(loaders) do
      if alive(rec) and not idle_of(rec, seen) then return false, rec.h.label end
    end
    for _, w in ipairs(whens) do
      if running(w.h) and not loader_of_key(w.key) then return false, "a when on " .. w.key .. " (not started)" end
    end
    for _, b in ipairs(barriers) do
      if running(b.b.settled) then return false, b.b.settled.label end
    end
    for _, h in ipairs(load_idles) do
      if running(h) and not load_idle(seen) then return false, "the load going idle" end
    end
    return true
  end
  local function waiting_idles()
    local list = {}
    for _, h in ipairs(idles) do
      if running(h) then list[#list + 1] = h end
    end
    return list
  end

  -- The scene.
  local function track_idle(h)
    idles[#idles + 1], handles[#handles + 1] = h, h
    h:on_end(function(state)
      if state ~= "done" then return end
      settled = settled + 1
      in_batch = true
      local idle, busy = world_idle()
      in_batch = false
      if not idle and not violation then
        violation = ("seed %d, turn %d: a when_idle settled while %s was busy"):format(seed, turn, busy)
      end
    end)
    return h
  end
  local function track_load_idle()
    local h = load:idle()
    load_idles[#load_idles + 1], handles[#handles + 1] = h, h
    return h
  end
  local function track_when(key)
    local h = orch:when(key)
    whens[#whens + 1], handles[#handles + 1] = { h = h, key = key }, h
    return h
  end
  local function later_loader(i) -- a running loader made after loader i, or nil
    local n = #loaders - i
    if n <= 0 then return nil end
    local rec = loaders[i + r(n)]
    if running(rec.h) then return rec end
  end
  local function later_key(i) -- a key of a loader after i: running, ended or not made yet
    return "k" .. (i + r(#loaders - i + 3))
  end
  local function a_part(i)
    local x = r(4)
    if x == 1 then return { kind = "future", f = new_future() } end
    if x == 2 then
      local rec = later_loader(i)
      if rec then return { kind = "job", rec = rec, h = rec.h } end
    end
    if x == 3 then
      local key = later_key(i)
      return { kind = "when", key = key, h = track_when(key) }
    end
    return { kind = "idle", h = track_idle(orch:when_idle()) }
  end
  -- A loader's next wait, made inside its work (nil: it returns).
  local function next_wait(i)
    local x = r(winding and 1 or 20)
    if x == 1 then return nil end
    if x <= 7 then
      local shared = idles[#idles]
      if shared and running(shared) and r(3) == 1 then return { kind = "idle", h = shared } end
      return { kind = "idle", h = track_idle(orch:when_idle()) }
    end
    if x <= 10 then
      local rec = later_loader(i)
      if rec then return { kind = "job", rec = rec, h = rec.h } end
      return { kind = "idle", h = track_idle(orch:when_idle()) }
    end
    if x <= 11 then
      if r(3) == 1 then return { kind = "load", h = track_load_idle() } end
      local key = later_key(i)
      return { kind = "when", key = key, h = track_when(key) }
    end
    if x <= 14 then
      -- (a group is idle while its open parts are: all, any, race, or
      -- one part given up through a signal nobody aborts)
      local parts = {}
      local y = r(4)
      for k = 1, y == 4 and 1 or 1 + r(3) do parts[k] = a_part(i) end
      local list = {}
      for k, part in ipairs(parts) do list[k] = part.f or part.h end
      local group
      if y == 4 then group = stagehand.abortable(list[1], stagehand.controller().signal)
      else group = stagehand[({ "all", "any", "race" })[y]](list) end
      return { kind = "group", parts = parts, group = group }
    end
    if x <= 16 then local f = new_future() return { kind = "future", f = f, h = f } end
    if x == 17 then return { kind = "sleep" } end
    if x == 18 then return { kind = "slot" } end
    local b = barriers[r(#barriers + 1)]
    if b and running(b.b.settled) then return { kind = "barrier", h = b.b.settled } end
    local f = new_future()
    return { kind = "future", f = f, h = f }
  end
  local function wait(job, w)
    if w.kind == "group" then return job:await(w.group) end
    if w.kind == "sleep" then return job:sleep(1 + r(30)) end
    if w.kind == "slot" then return job:slot("p")() end
    return job:await(w.h)
  end
  local search -- the newest-wins call under "search" made last
  local function start_loader(newest)
    local i = #loaders + 1
    local rec = { phase = r(3) == 1 }
    loaders[i] = rec
    local start = orch.run
    if newest then
      -- (the game searches again: the older call's run is cancelled,
      -- unless a `when` on its key keeps it, and its Handle follows this)
      if search then search.follow = rec end
      search = rec
      start = function(o, ...) return o:newest("search", ...) end
    end
    rec.h = start(orch, "loader " .. i, function(job)
      job.signal:on_abort(function() rec.dead = true end)
      while true do
        local w = next_wait(i)
        if w == nil then
          rec.dead = true
          return i
        end
        rec.on = w
        local ok, err = job:pcall(wait, job, w)
        -- (a wait may fail, as the game made it; the model itself may not)
        if not ok and err ~= "no such file" and not stagehand.is_error(err) and not violation then
          violation = "seed " .. seed .. ": the scene raised: " .. tostring(err)
        end
        rec.on = nil
        if job.signal.aborted then return end
      end
    end, { key = "k" .. i, phase = rec.phase and "fetch" or nil })
    handles[#handles + 1] = rec.h
  end

  local ops = {
    start_loader,
    function() -- a future settles (now and then by failing)
      local f = seeded.pending_one(r, futures)
      if not f then return end
      if r(4) == 1 then f:reject("no such file") else f:resolve(true) end
    end,
    function() clock:advance(r(40)) end,
    function() -- a new barrier, or an arrival at one
      local b = barriers[#barriers]
      if b and running(b.b.settled) then
        b.b:arrive(b.keys[r(3)])
      elseif r(3) == 1 then
        local keys = { "hero", "mage", "rogue" }
        b = { b = orch:barrier("party " .. (#barriers + 1), keys), keys = keys }
        barriers[#barriers + 1] = b
        handles[#handles + 1] = b.b.settled
      end
    end,
    function() -- the pool opens a little, or closes again
      capacity = (capacity + 1) % 3
      orch:pool("p", capacity)
    end,
    function() -- a loader is cancelled
      local rec = loaders[r(#loaders + 1)]
      if rec and r(3) == 1 then rec.h:cancel("scene left") end
    end,
    function() -- the game waits for idle itself (now and then with a signal it aborts)
      local ctl = stagehand.controller()
      ctls[#ctls + 1] = ctl
      track_idle(orch:when_idle(r(2) == 1 and ctl.signal or nil))
    end,
    function() -- the game aborts one of its own idle waits
      local ctl = ctls[r(#ctls + 1)]
      if ctl and r(2) == 1 then ctl:abort("menu closed") end
    end,
    function() track_when(later_key(0)) end, -- the game follows a key
    function() start_loader(true) end, -- the game searches, newest wins
    function() -- the game makes a task by hand, or ends one, or asks for the load's idle
      local x = r(3)
      if x == 1 then
        hand[#hand + 1] = { task = load:task("manifest") }
      elseif x == 2 then
        local t = hand[r(#hand + 1)]
        if t and not t.ended then
          t.ended = true
          if r(3) == 1 then t.task:fail("no such file") else t.task:finish() end
        end
      else
        track_load_idle()
      end
    end,
  }

  local function check()
    if violation then error(violation) end
    local idle, busy = world_idle()
    local waiting = waiting_idles()
    return idle and #waiting > 0, waiting, busy
  end
  local function step_and_check(t)
    turn = t
    local before = settled
    orch:step()
    if settled > before and not winding then tally.steps = tally.steps + 1 end
    local idle, waiting = check(t)
    if not idle then return end
    if settled == before then
      error(("seed %d, turn %d: every loader waits on when_idle, yet none of %d when_idle waits settled")
        :format(seed, t, #waiting))
    end
    -- It settled some, and the loaders those woke are idle again: the
    -- next step settles the rest.
    tally.again = tally.again + 1
    orch:step()
    check(t)
    for _, h in ipairs(waiting) do
      if running(h) then
        error(("seed %d, turn %d: the world stayed idle for a step, yet a when_idle did not settle"):format(seed, t))
      end
    end
  end
  -- Everything that keeps the world busy lets go: futures settle,
  -- barriers fill, the pool opens, sleeps end, the keys `when`s wait on
  -- start (or the `when` leaves, if its run was cancelled: that is not
  -- remembered, so nothing would come). Loaders then wait again as they
  -- choose, and the world often turns idle.
  local function calm()
    seeded.resolve_pending(futures)
    for _, t in ipairs(hand) do
      if not t.ended then
        t.ended = true
        t.task:finish()
      end
    end
    for _, b in ipairs(barriers) do
      for _, k in ipairs(b.keys) do b.b:arrive(k) end
    end
    for _, w in ipairs(whens) do
      if running(w.h) and not loader_of_key(w.key) then
        if tonumber(w.key:sub(2)) > #loaders then start_loader() else w.h:cancel("never loaded") end
      end
    end
    capacity = 3
    orch:pool("p", capacity)
    clock:advance(50)
  end
  -- (now and then the game asks for idle before anything ever ran: the
  -- loading screen's first question, which the next step must answer)
  if r(4) == 1 then
    track_idle(orch:when_idle())
    step_and_check(0)
  end
  for _ = 1, 2 + r(3) do start_loader() end
  for t = 1, 80 do
    if r(3) == 1 then
      calm()
    else
      for _ = 1, r(4) do ops[r(#ops)]() end
    end
    step_and_check(t)
  end
  -- Then loaders return as they next wake.
  winding = true
  local guard = 0
  while orch.nrunning > 0 and guard < 200 do
    guard = guard + 1
    calm()
    step_and_check(80 + guard)
  end
  seeded.assert_none_failed(seed, loaders)
  tally.settled = tally.settled + settled
  tally.loaders = tally.loaders + #loaders
  return orch, handles
end

describe("when_idle", function()
  local which, seeds = seeded.seeds()
  it("settles when, and only when, a model of who waits on what says every job is idle" .. which, function()
    local tally = { settled = 0, loaders = 0, again = 0, steps = 0 }
    seeded.run_scenes("idle", seeds, scene, tally, "IDLE_TALLY")
    -- (the scenes turn idle again and again, not only once they wind down)
    assert.is_true(tally.steps >= #seeds, "idle in only " .. tally.steps .. " steps before the scenes wound down")
  end)
end)
