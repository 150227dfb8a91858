-- Run by scripts/oom.sh in build/oom_host (csrc/test/oom_host.c), a Lua
-- host whose allocator fails on demand, one for each of Lua 5.4, LuaJIT
-- and 5.1: `make test-oom`. Each operation below runs
-- with its first allocation failing, then its second, and so on until it
-- runs through. Each time it must either finish or raise "not enough
-- memory" cleanly, and once the dust settles (futures resolved, the clock
-- run on, the orchestrator closed) the orchestrator must be whole: no job
-- running, nothing left behind (T.leaks), and this orchestrator and any
-- other still stepping.
local stagehand = require "stagehand"
local T = require "stagehand.testing"

local function quiet_log() end

local function new_scene()
  local orch, clock = T.new { pools = { p = 2 }, log = quiet_log, stall_ms = 5000 }
  orch:budget("b", { ops = 1 })
  return { orch = orch, clock = clock, futures = {}, handles = {} }
end

local function future(s, label)
  local f = stagehand.future(label)
  s.futures[#s.futures + 1] = f
  return f
end

local function loader(s, i, opts)
  local f = future(s, "download " .. i)
  return s.orch:run("loader " .. i, function(job)
    local release = job:slot("p")
    local data = job:await(f)
    job:permit("b")
    release()
    return data
  end, opts)
end

-- A job holding a slot of `pool` until the future it returns settles.
local function holder(s, pool)
  local f = future(s, "held")
  return s.orch:run("holder", function(job)
    local release = job:slot(pool)
    job:await(f)
    release()
  end), f
end

-- Each: {name, setup(s) with memory to spare, op(s) under the failing allocator}.
local scenarios = {
  { "run a job that sleeps", function() end, function(s)
    s.handles[1] = s.orch:run("sleeper", function(job) job:sleep(10) return 1 end)
  end },
  { "run a keyed loader with a priority function", function() end, function(s)
    s.handles[1] = loader(s, 1, { key = "k", priority = function() return "visible" end })
  end },
  -- (nothing loads twice: the join never runs work of its own, checked
  -- once settled)
  { "join a keyed run, and when on it", function(s)
    loader(s, 1, { key = "k" })
    s.loaded_twice = false
  end, function(s)
    s.handles[1] = s.orch:run("join", function() s.loaded_twice = true end, { key = "k", priority = "visible" })
    s.handles[2] = s.orch:when("k", "following k", { priority = "background" })
  end },
  { "runs and whens made inside a job (each caller it makes is its own)", function() end, function(s)
    s.handles[1] = s.orch:run("scene", function(job)
      local a = s.orch:run("prop", function(j) return j:await(future(s, "mesh")) end, { priority = "visible" })
      local b = s.orch:when("k", "following k")
      local c = loader(s, 1, { key = "k" })
      return job:await(stagehand.all({ a, b, c }))
    end)
  end },
  { "when on a key nobody started", function(s) s.may_stall = true end, function(s)
    s.handles[1] = s.orch:when("later", nil, { stall_ms = 100 })
  end },
  { "get-or-load from memory", function(s)
    s.orch:run("loaded", function() return "tex" end, { key = "tex" })
  end, function(s)
    s.handles[1] = s.orch:run("loaded", function() return "again" end, { key = "tex", reuse = true })
  end },
  { "a step that grants slots and resumes", function(s)
    for i = 1, 12 do loader(s, i) end
  end, function(s) s.orch:step() end },
  { "resolving a future jobs await, then a step", function(s)
    local f = future(s, "atlas")
    for i = 1, 8 do
      s.orch:run("sprite " .. i, function(job) return job:await(f) end)
    end
    s.orch:step()
    s.f = f
  end, function(s)
    s.f:resolve("atlas bytes")
    s.orch:step()
  end },
  { "groups over loaders", function(s)
    for i = 1, 4 do s.handles[i] = loader(s, i) end
    s.orch:step()
  end, function(s)
    local hs = s.handles
    s.orch:run("scene", function(job)
      job:await(stagehand.all(hs))
      job:await(stagehand.any(hs))
      return job:await(stagehand.race(hs))
    end)
  end },
  { "a barrier and its arrivals", function() end, function(s)
    local b = s.orch:barrier("portraits", { "a", "b", "c" })
    b:arrive("a")
    b:arrive("b")
    s.orch:step()
  end },
  -- (checked once settled: a cancel that returned left its Handle
  -- cancelled)
  { "cancelling parked loaders", function(s)
    for i = 1, 6 do s.handles[i] = loader(s, i) end
    s.orch:step()
    s.cancelled = { false, false, false, false, false, false }
    s.check = function(fail)
      for i = 1, 6 do
        local st = s.handles[i]._st
        if s.cancelled[i] and st ~= "cancelled" then fail("loader " .. i .. " cancelled, and ended " .. st) end
      end
    end
  end, function(s)
    for i = 1, 6 do
      s.handles[i]:cancel("scrolled away")
      s.cancelled[i] = true
    end
    s.orch:step()
  end },
  { "close with jobs parked mid-work", function(s)
    for i = 1, 6 do loader(s, i) end
    s.orch:run("sleeper", function(job) job:pcall(job.sleep, job, 1e6) end)
    s.orch:step()
  end, function(s) s.orch:close("level unloaded") end },
  -- when_idle: settles once every running job waits on it.
  { "when_idle beside loaders, then a step", function(s)
    for i = 1, 3 do loader(s, i) end
  end, function(s)
    s.handles[1] = s.orch:when_idle()
    s.orch:step()
  end },
  -- A controller's abort reaches every loader following its signal (the
  -- ends an end reaches run in turn, not nested: nest.lua).
  { "a controller aborting the loaders that follow it", function(s)
    s.ctl = stagehand.controller()
    s.followers = { true, true, true, true }
    for i = 1, 4 do s.handles[i] = loader(s, i, { signal = s.ctl.signal }) end
  end, function(s) s.ctl:abort("the player left") end },
  -- job:call (a callback's values), job:pcall (an error kept) and
  -- job:slice (a turn given back) inside one job.
  { "job:call, job:pcall and job:slice", function() end, function(s)
    s.handles[1] = s.orch:run("caller", function(job)
      local ok = job:pcall(function() error("kept") end)
      local v = job:call(function(x, cb) cb(nil, x + 1) end, 41)
      job:slice()
      return ok, v
    end)
    s.orch:step()
  end },
  -- A loading screen's tracker: its tasks, their phases and the fraction
  -- its bar is drawn from (checked once settled: 1, and never above).
  { "tracked loaders in two phases, and the bar's fraction", function(s)
    s.load = stagehand.tracker(s.orch)
    s.load:expect("decode", 2)
    s.load:expect("upload", 1)
  end, function(s)
    for i = 1, 3 do s.handles[i] = loader(s, i, { phase = i < 3 and "decode" or "upload" }) end
    s.bar = s.load:fraction()
  end },
  -- A tracker's listener, and a task the game makes and finishes by hand
  -- beside a tracked loader (a task made is kept at once, so the dust
  -- settling finishes it, as the game would).
  { "a tracker's listener and a task made by hand", function(s)
    s.load = stagehand.tracker(s.orch)
    s.load:expect("decode", 2)
    s.expect_tasks = 2
    s.heard = 0
    s.unhear = s.load:on(function() s.heard = s.heard + 1 end)
    s.task = false -- (its field made now: keeping the task needs no memory)
  end, function(s)
    s.task = s.load:task("decode", { label = "atlas", total = 4 })
    s.task:advance(2)
    s.task:finish()
    s.handles[1] = loader(s, 1, { phase = "decode" })
    s.bar = s.load:fraction()
    s.unhear()
  end },
  -- The window hidden and shown again (every stall clock paused, then
  -- resumed), and a slot pool grown, which grants its waiting loaders.
  { "hiding and showing the game, and a pool grown", function(s)
    for i = 1, 4 do s.handles[i] = loader(s, i) end
    s.orch:step()
  end, function(s)
    s.orch:set_visible(false)
    s.clock:advance(100)
    s.orch:set_visible(true)
    s.orch:pool("p", 4)
    s.orch:step()
  end },
  -- A watcher hearing a start, a report and a dump of parked loaders.
  { "a watcher, a report and a dump", function(s)
    s.seen = 0
    s.unwatch = s.orch:watch(function() s.seen = s.seen + 1 end)
    for i = 1, 3 do s.handles[i] = loader(s, i) end
    s.orch:step()
  end, function(s)
    s.report = s.orch:report()
    s.dump = s.orch:dump()
    s.handles[4] = loader(s, 4)
    s.unwatch()
  end },
  -- on_end callbacks on parked loaders (each must be called once, as its
  -- loader ends), then one of them cancelled.
  { "on_end callbacks, then a cancel", function(s)
    for i = 1, 3 do s.handles[i] = loader(s, i) end
    s.orch:step()
    s.subscribed, s.told = 0, 0
  end, function(s)
    for i = 1, 3 do
      s.handles[i]:on_end(function() s.told = s.told + 1 end)
      s.subscribed = i
    end
    s.handles[2]:cancel("scrolled away")
  end },
  -- Futures rejected under loaders an all_settled gathers, in a job that
  -- raises its own priority while it waits.
  { "rejected futures gathered by all_settled", function(s)
    for i = 1, 3 do s.handles[i] = loader(s, i) end
    s.orch:step()
  end, function(s)
    local hs = { s.handles[1], s.handles[2], s.handles[3] }
    s.handles[4] = s.orch:run("gather", function(job)
      local got = job:await(stagehand.all_settled(hs))
      return #got, job:priority()
    end, { priority = "visible" })
    s.futures[1]:reject("404")
    s.futures[2]:reject("timed out")
    s.orch:step()
  end },
  -- A budget of milliseconds: permits granted while the step's time lasts.
  { "a budget in milliseconds", function(s)
    s.orch:budget("frame", { ms = 2 })
  end, function(s)
    for i = 1, 3 do
      s.handles[i] = s.orch:run("uploader " .. i, function(job)
        job:permit("frame")
        s.clock:advance(1)
        job:permit("frame")
        return i
      end)
    end
    s.orch:step()
    s.orch:step()
  end },
  -- The newest run under a name takes over the older one's callers.
  { "newest runs under one name", function(s)
    s.newest = { 1, 2, 3 } -- (once all three are made, the older end as the newest)
    s.handles[1] = s.orch:newest("scene", "scene 1", function(job) return job:await(future(s, "level 1")) end)
  end, function(s)
    s.handles[2] = s.orch:newest("scene", "scene 2", function(job) return job:await(future(s, "level 2")) end)
    s.handles[3] = s.orch:newest("scene", "scene 3", function(job) job:sleep(1) return 3 end)
  end },
  -- A job awaiting a loader's Handle (its own clock paused while the
  -- loader runs: a wake lost there would leave it waiting for good), the
  -- loader cancelled.
  { "a job awaiting a loader that is cancelled", function(s)
    s.handles[1] = loader(s, 1)
    local h1 = s.handles[1]
    s.handles[2] = s.orch:run("waiter", function(job) return job:await(h1) end)
    s.orch:step()
  end, function(s)
    s.handles[1]:cancel("scrolled away")
    s.orch:step()
  end },
  -- Five jobs each awaiting the next, the last a download; and an on_end
  -- beside a job on the same Handle: one end tells both.
  { "a chain of five jobs awaiting each other, and an on_end beside one", function(s)
    local f = future(s, "download")
    local prev = s.orch:run("link 5", function(job) return job:await(f) end)
    s.handles[5] = prev
    for i = 4, 1, -1 do
      local next_one = prev
      prev = s.orch:run("link " .. i, function(job) return job:await(next_one) end)
      s.handles[i] = prev
    end
    s.told = 0
    s.handles[5]:on_end(function() s.told = s.told + 1 end)
    s.orch:step()
    s.f = f
  end, function(s)
    s.f:resolve("bytes")
    s.orch:step()
  end },
  -- A job awaiting the first of three loaders to load, given up on when
  -- a controller aborts, one loader failing before.
  { "abortable over any of three loaders, then an abort", function(s)
    s.ctl = stagehand.controller()
    for i = 1, 3 do s.handles[i] = loader(s, i) end
    local hs = { s.handles[1], s.handles[2], s.handles[3] }
    s.handles[4] = s.orch:run("pick", function(job)
      return job:await(stagehand.abortable(stagehand.any(hs), s.ctl.signal))
    end)
    s.orch:step()
  end, function(s)
    s.futures[1]:reject("404")
    s.orch:step()
    s.ctl:abort("the player left")
    s.orch:step()
  end },
  -- A loader whose signal is a timeout of the orchestrator's clock.
  -- (checked once settled, the clock run past it: the timeout aborted)
  { "a loader ended by orch:timeout", function(s) s.timeout = false end, function(s)
    s.timeout = s.orch:timeout(100)
    s.handles[1] = loader(s, 1, { signal = s.timeout })
    s.orch:step()
    s.clock:advance(200)
    s.orch:step()
  end },
  -- A battle awaiting a barrier whose soldiers arrive from their own jobs.
  { "a job awaiting a barrier that jobs arrive at", function(s)
    s.b = s.orch:barrier("armies", { "a", "b", "c" })
    local settled = s.b.settled
    s.handles[1] = s.orch:run("battle", function(job) return job:await(settled) end)
    -- (checked once settled: when all three arrivals returned, the
    -- battle ended done, or failed for memory its own resume lacked)
    s.arrived = { a = false, b = false, c = false }
    s.check = function(fail)
      local h = s.handles[1]
      local ok = h._st == "done" or h._st == "failed" and tostring(h._v):find("not enough memory", 1, true)
      if s.arrived.a and s.arrived.b and s.arrived.c and not ok then
        fail("all arrived, and the battle ended " .. tostring(s.handles[1]._st) .. ": " .. tostring(s.handles[1]._v))
      end
    end
    for i, k in ipairs { "a", "b" } do
      s.handles[i + 1] = s.orch:run("soldier " .. k, function(job)
        job:sleep(10)
        s.b:arrive(k)
        s.arrived[k] = true
      end)
    end
    s.orch:step()
  end, function(s)
    s.orch:run("soldier c", function()
      s.b:arrive("c")
      s.arrived.c = true
    end)
    s.clock:advance(20)
    s.orch:step()
  end },
  -- A scene that made loaders of its own, cancelled: the callers it made
  -- are withdrawn with it, and a visible job awaiting one of them keeps
  -- its own Handle.
  { "cancelling a scene whose loaders a visible job awaits", function(s)
    s.handles[1] = s.orch:run("scene", function(job)
      s.inner = loader(s, 1)
      return job:await(s.inner)
    end)
    s.orch:step()
    local inner = s.inner
    s.handles[2] = s.orch:run("hud", function(job) return job:await(inner) end, { priority = "visible" })
    s.orch:step()
  end, function(s)
    s.handles[1]:cancel("level left")
    s.orch:step()
  end },
  -- A loader holding slots of two pools, the second granted when a
  -- holder releases it.
  { "slots of two pools, one granted on a release", function(s)
    s.orch:pool("q", 1)
    s.handles[1], s.f = holder(s, "q")
    s.handles[2] = s.orch:run("two pools", function(job)
      local r1 = job:slot("p")
      local r2 = job:slot("q")
      r2()
      r1()
      return 2
    end)
    s.orch:step()
  end, function(s)
    s.f:resolve()
    s.orch:step()
  end },
  -- A preloader awaiting when_idle while loaders finish, and a job whose
  -- job:call's callback comes later, from the game's code.
  { "a preloader awaiting when_idle, and a callback that comes later", function(s)
    for i = 1, 2 do s.handles[i] = loader(s, i) end
    s.handles[3] = s.orch:run("preloader", function(job) return job:await(s.orch:when_idle()) end)
    s.cb = false -- (its field made now; the dust settling calls it, as the game would)
    s.handles[4] = s.orch:run("caller", function(job)
      return job:call(function(cb) s.cb = cb end)
    end)
    s.orch:step()
  end, function(s)
    s.futures[1]:resolve("a")
    s.futures[2]:resolve("b")
    s.orch:step()
    s.cb(nil, "called back")
    s.orch:step()
  end },
  -- A loading screen awaiting its load going idle while tracked loaders,
  -- one failing, finish.
  { "a job awaiting load:idle() while tracked loaders finish, one failing", function(s)
    s.load = stagehand.tracker(s.orch)
    s.expect_tasks = 2
    for i = 1, 2 do s.handles[i] = loader(s, i, { phase = "decode" }) end
    local load = s.load
    s.handles[3] = s.orch:run("loading screen", function(job) return job:await(load:idle()) end)
    s.orch:step()
  end, function(s)
    s.futures[1]:reject("corrupt")
    s.futures[2]:resolve("pixels")
    s.orch:step()
  end },
  -- A job awaiting the first of two newest runs, handed over to the
  -- second, which then loads.
  { "a job awaiting a newest run that is handed over", function(s)
    s.newest = { 1, 3 }
    local f1 = future(s, "level 1")
    s.handles[1] = s.orch:newest("scene", "scene 1", function(job) return job:await(f1) end)
    local first = s.handles[1]
    s.handles[2] = s.orch:run("hud", function(job) return job:await(first) end)
    s.orch:step()
  end, function(s)
    local f2 = future(s, "level 2")
    s.handles[3] = s.orch:newest("scene", "scene 2", function(job) return job:await(f2) end)
    s.orch:step()
    f2:resolve("level 2 data")
    s.orch:step()
  end },
  -- A slot held, background loaders queued behind it, then a visible job
  -- awaiting the last of them (raising it) and the holder releasing: the
  -- raised one is granted first, and every loader ends.
  { "a visible job raising a queued loader, then a slot released", function(s)
    s.orch:pool("one", 1)
    s.handles[1], s.f = holder(s, "one")
    for i = 2, 4 do
      s.handles[i] = s.orch:run("background " .. i, function(job)
        local release = job:slot("one")
        release()
        return i
      end, { priority = "background" })
    end
    s.orch:step()
  end, function(s)
    local last = s.handles[4]
    s.handles[5] = s.orch:run("portrait", function(job) return job:await(last) end, { priority = "visible" })
    s.orch:step()
    s.f:resolve()
    s.orch:step()
  end },
  -- A priority function that changes its answer between steps, read when
  -- a slot is granted, and a job raising itself by awaiting a keyed run
  -- another job started.
  { "priorities read live while slots are granted", function(s)
    s.orch:pool("one", 1)
    s.near = false
    for i = 1, 3 do
      s.handles[i] = loader(s, i, {
        priority = function() return (s.near == i) and "visible" or "background" end,
      })
    end
    s.orch:step()
  end, function(s)
    s.near = 3
    s.handles[4] = s.orch:run("keyed", function(job) return job:await(s.futures[1]) end, { key = "k" })
    s.handles[5] = s.orch:run("joiner", function(job) return job:await(s.orch:when("k")) end,
      { priority = "visible" })
    s.orch:step()
    s.futures[2]:resolve("b")
    s.orch:step()
  end },
  -- A loading screen's tracker over newest runs: the second hands the
  -- first's callers over, and the tracker's bar still reaches 1.
  { "a tracker over newest runs under one name", function(s)
    s.newest = { 1, 2 }
    s.load = stagehand.tracker(s.orch)
    s.expect_tasks = 0
    local f1 = future(s, "level 1")
    s.handles[1] = s.orch:newest("scene", "scene 1", function(job) return job:await(f1) end,
      { phase = "decode" })
    s.orch:step()
  end, function(s)
    local f2 = future(s, "level 2")
    s.handles[2] = s.orch:newest("scene", "scene 2", function(job) return job:await(f2) end,
      { phase = "decode" })
    s.orch:step()
    f2:resolve("level 2 data")
    s.orch:step()
  end },
  -- Closing with newest runs handed over and jobs awaiting their Handles.
  { "close with newest runs handed over and awaited", function(s)
    for i = 1, 2 do
      local f = future(s, "level " .. i)
      s.handles[i] = s.orch:newest("scene", "scene " .. i, function(job) return job:await(f) end)
    end
    local first = s.handles[1]
    s.handles[3] = s.orch:run("hud", function(job) return job:await(first) end)
    s.orch:step()
  end, function(s) s.orch:close("level unloaded") end },
  -- Tracked, keyed jobs parked inside a job:pcall, cancelled: each is
  -- resumed once more, its wait raising its end, and puts back what it
  -- took (checked once settled: every one whose wait began cleaned up,
  -- and the handler on its signal heard the cancel).
  { "cancelling tracked jobs parked in job:pcall, each cleaning up", function(s)
    s.waiting, s.cleaned, s.heard = {}, {}, {}
    s.load = stagehand.tracker(s.orch)
    s.expect_tasks = 4
    s.orch:watch(function() end)
    for i = 1, 4 do
      s.waiting[i], s.cleaned[i], s.heard[i] = false, false, false
      local f = future(s, "asset " .. i)
      s.handles[i] = s.orch:run("holder " .. i, function(job)
        job.signal:on_abort(function() s.heard[i] = true end)
        job:pcall(function()
          s.waiting[i] = true
          job:await(f)
        end)
        s.cleaned[i] = true
      end, { phase = "decode", key = "asset " .. i })
    end
    s.orch:step()
  end, function(s)
    for i = 1, 4 do s.handles[i]:cancel("scrolled away") end
  end },
  -- A scene that made loaders of its own, cancelled: the loaders it made
  -- are withdrawn with it (checked once settled: none finished).
  { "cancelling a scene withdraws the loaders it made", function(s)
    s.made_by_scene = {}
    s.handles[1] = s.orch:run("scene", function(job)
      for i = 1, 3 do s.made_by_scene[i] = loader(s, i) end
      return job:await(stagehand.all(s.made_by_scene))
    end)
    s.orch:step()
  end, function(s)
    s.handles[1]:cancel("level left")
    s.orch:step()
  end },
  -- Keyed loaders finishing while the orchestrator remembers two
  -- outcomes: each end files its key as the newest and evicts the oldest
  -- (checked once settled: the list of remembered keys is whole, and a
  -- get-or-load of each key still answers).
  { "keyed loaders ending, remembered two at a time", function(s)
    s.orch.remember = 2
    for i = 1, 4 do s.handles[i] = loader(s, i, { key = "asset " .. i }) end
    s.orch:step()
    s.check = function(fail)
      local o, seen, n, k = s.orch, {}, 0, s.orch.mem_oldest
      while k ~= nil and n <= 10 do
        seen[k], n = true, n + 1
        k = o.mem_newer[k]
      end
      if n ~= o.mem_count or n > 2 then fail(("remembers %d keys, its list links %d"):format(o.mem_count, n)) end
      for key in pairs(o.mem) do
        if not seen[key] then fail("remembers " .. tostring(key) .. " outside its list") end
      end
      for i = 1, 4 do
        local h = o:run("again " .. i, function() return "again" end, { key = "asset " .. i, reuse = true })
        T.settle(o, 1000)
        if h:state() ~= "done" then fail("a get-or-load of asset " .. i .. " ended " .. h:state()) end
      end
    end
  end, function(s)
    for i = 1, 4 do s.futures[i]:resolve("bytes " .. i) end
    s.orch:step()
  end },
  -- A loading screen's tracker closed while Handles of load:idle() wait
  -- on its loaders: each ends cancelled, none waits for good.
  { "closing a tracker that load:idle() Handles wait on", function(s)
    local load = stagehand.tracker(s.orch)
    for i = 1, 2 do s.handles[i] = loader(s, i, { phase = "decode" }) end
    for i = 3, 5 do s.handles[i] = load:idle() end
    s.handles[6] = s.orch:run("loading screen", function(job) return job:await(load:idle()) end)
    s.orch:step()
    s.closing = load
  end, function(s) s.closing:close() end },
  -- A job failing with nobody waiting on it: its failure is logged at the
  -- end of the step (checked once settled: logged once).
  { "a failure nobody waited on, logged at the step's end", function(s)
    s.reported = 0
    s.made = T.new { log = function(msg)
      if msg:find("nobody waited", 1, true) then s.reported = s.reported + 1 end
    end }
    s.check = function(fail)
      if s.handles[1] and s.handles[1]._st == "failed" and s.reported ~= 1 then
        fail("a failure nobody waited on was logged " .. s.reported .. " time(s)")
      end
    end
  end, function(s)
    s.handles[1] = s.made:run("doomed", function() error("corrupt file") end)
    s.made:step()
  end },
  -- A trace recording every wait of a loader and its slot.
  { "a trace recording loaders", function(s)
    s.trace = s.orch:trace()
  end, function(s)
    for i = 1, 2 do s.handles[i] = loader(s, i) end
    s.orch:step()
  end },
  -- An orchestrator made under the failing allocator: its clock, timers,
  -- ids and pools in the core; one that raises is never handed out.
  { "making an orchestrator with two pools and a budget", function() end, function(s)
    s.made = T.new { pools = { a = 2, b = 3 }, log = quiet_log }
    s.made:budget("uploads", { ops = 2 })
    s.handles[1] = s.made:run("first", function(job) job:sleep(1) return 1 end)
  end },
  { "a timeout and progress", function() end, function(s)
    s.orch:run("baker", function(job)
      job:progress(1, 4)
      job:sleep(5)
      job:progress(4, 4)
    end, { signal = s.orch:timeout(1000) })
    s.clock:advance(10)
    s.orch:step()
  end },
}

-- Seeded mixes: a run of operations a game makes over a few frames,
-- chosen by a seed (the same on every runtime), under the failing
-- allocator as one operation. What one operation leaves half done, the
-- next meets.
local function mix(seed)
  return function(s)
    local x = seed
    local function pick(n) -- (Park and Miller's: exact in a double, the same picks on every runtime)
      x = x * 16807 % 2147483647
      return x % n + 1
    end
    local keys, ranks = { "atlas", "mesh", "voice" }, { "visible", "scene", "background" }
    local ctl = s.ctl
    for _ = 1, 14 do
      local op, n = pick(9), #s.handles
      if op == 1 or op == 2 then
        local opts = { priority = pick(2) == 1 and ranks[pick(3)] or function() return ranks[pick(3)] end }
        if pick(2) == 1 then opts.key = keys[pick(3)] end
        if pick(3) == 1 then opts.phase = "decode" end
        if pick(4) == 1 then opts.signal = ctl.signal end
        s.handles[n + 1] = loader(s, n + 1, opts)
      elseif op == 3 and n > 0 then
        local f = s.futures[pick(#s.futures)]
        if f:state() == "pending" then
          if pick(3) == 1 then f:reject("404") else f:resolve("bytes") end
        end
      elseif op == 4 and n > 0 then
        s.handles[pick(n)]:cancel("scrolled away")
      elseif op == 5 and n > 0 then
        local a, b = s.handles[pick(n)], s.handles[pick(n)]
        s.handles[n + 1] = s.orch:run("gather", function(job)
          return job:await(pick(2) == 1 and stagehand.all { a, b } or stagehand.any { a, b })
        end, { priority = ranks[pick(3)] })
      elseif op == 6 then
        local f = future(s, "level")
        s.handles[n + 1] = s.orch:newest("scene", "scene", function(job) return job:await(f) end)
      elseif op == 7 then
        s.clock:advance(pick(50))
      elseif op == 8 and pick(6) == 1 then
        ctl:abort("the player left")
      end
      s.orch:step()
    end
  end
end
for _, seed in ipairs { 7, 42, 99, 2024, 31337 } do
  scenarios[#scenarios + 1] = { "a seeded mix of a game's operations, seed " .. seed, function(s)
    s.ctl = stagehand.controller()
    s.load = stagehand.tracker(s.orch)
    s.expect_tasks = 0
  end, mix(seed) }
end

-- The dust settles with memory to spare: every future resolved, the clock
-- run on, the orchestrator closed; and another orchestrator still steps.
local other = T.new { log = quiet_log }
local function settle(s, fail)
  for _, f in ipairs(s.futures) do f:resolve("late") end
  if s.task then s.task:finish() end -- (the game's own task: finished, whatever the op did)
  if s.cb then s.cb(nil, "late") end -- (the game's callback: called, whatever the op did; a second call is ignored)
  if s.subscribed then
    T.settle(s.orch, 20000, 250)
    -- (each on_end made was called once, its loader ended; one the failure
    -- cut short of being made, never)
    if s.told < s.subscribed or s.told > 3 then
      fail(s.subscribed .. " on_end callbacks made, " .. s.told .. " called")
    end
  end
  T.settle(s.orch, 20000, 250)
  if s.made then T.settle(s.made, 20000, 250) end
  for i, h in ipairs(s.handles) do
    if h._st == "stalled" and not s.may_stall then fail("Handle " .. i .. " stalled: " .. tostring(h._v)) end
    if h._st == nil or h._st == "running" then fail("Handle " .. i .. " still runs: " .. tostring(h._st)) end
  end
  -- (an abort that began reaches every loader following it; a cleanup
  -- whose wait began runs; a scene that ended cancelled takes the
  -- loaders it made with it)
  if s.ctl and s.ctl.signal.aborted then
    for i, h in ipairs(s.handles) do
      if s.followers and s.followers[i] and h._st == "done" then fail("Handle " .. i .. " finished after its abort") end
    end
  end
  for i, began in ipairs(s.waiting or {}) do
    if began and not s.cleaned[i] then fail("job " .. i .. " never cleaned up after its wait") end
    if began and s.handles[i]._st == "cancelled" and not s.heard[i] then
      fail("job " .. i .. "'s signal never told its handler of the cancel")
    end
  end
  if s.made_by_scene and s.handles[1]._st == "cancelled" then
    for i, h in ipairs(s.made_by_scene) do
      if h._st == "done" then fail("the scene's loader " .. i .. " finished after the scene was cancelled") end
    end
  end
  if s.load then
    -- (1 once every task expected came and ended; short of 1 while one
    -- that the failure kept from being made is still expected; never
    -- below what it read before)
    local made = 0
    for _, phase in ipairs { "decode", "upload" } do
      local c = s.load:counts(phase)
      if c.running ~= 0 then fail("a tracked " .. phase .. " task still runs") end
      made = made + c.running + c.done + c.failed + c.cancelled + c.stalled
    end
    local f, expected = s.load:fraction(), s.expect_tasks or 3
    if made >= expected and made > 0 and f ~= 1 then fail("the bar's fraction is " .. tostring(f) .. " with every task ended") end
    if made < expected and not (f >= 0 and f < 1) then
      fail("the bar's fraction is " .. tostring(f) .. " with a task not made")
    end
    if s.bar and not (s.bar >= 0 and s.bar <= f) then
      fail("the bar's fraction read " .. tostring(s.bar) .. ", then " .. tostring(f))
    end
    s.load:close()
  end
  if s.check then s.check(fail) end
  if s.loaded_twice then fail("a join ran work of its own while its key's run was running") end
  if s.newest and s.handles[s.newest[#s.newest]] then
    -- (each older run's Handle settles with the newest's end, however it ends)
    local last = s.handles[s.newest[#s.newest]]
    for i = 1, #s.newest - 1 do
      local h = s.handles[s.newest[i]]
      if h._st ~= last._st or (h._st == "done" and h._v[1] ~= last._v[1]) then
        fail(("newest run %d ended %s (%s), the newest %s (%s)"):format(s.newest[i], tostring(h._st),
          tostring(h._st == "done" and h._v[1] or h._v), tostring(last._st),
          tostring(last._st == "done" and last._v[1] or last._v)))
      end
    end
  end
  if s.timeout then -- (a step once its time is long past, jobs running or not)
    s.clock:advance(1000)
    s.orch:step()
    if not s.timeout.aborted then fail("the timeout never aborted, its time long past") end
  end
  if s.trace then s.trace:stop() end
  if s.made then
    T.settle(s.made, 20000, 250)
    s.made:close("the spec ends")
    s.made:step()
    local leaks = T.leaks(s.made)
    if #leaks > 0 then fail("the orchestrator made left behind: " .. table.concat(leaks, "; ")) end
  end
  s.orch:close("the spec ends")
  local steps = 0
  while s.orch:step() > 0 do
    steps = steps + 1
    if steps == 1000 then error("closed, and still running jobs after 1000 steps", 0) end
  end
  local stepped, serr = pcall(other.step, other)
  if not stepped then fail("another orchestrator cannot step: " .. tostring(serr)) end
end

local here = debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./"
dofile(here .. "driver.lua")(scenarios, new_scene, settle, "operations")
