-- The load tracker: what a loading screen reads. Times on the fake clock.
local stagehand = require "stagehand"
local T = require "stagehand.testing"

if not package.path:find("spec/fixtures/?.lua", 1, true) then
  package.path = "spec/fixtures/?.lua;" .. package.path
end

describe("stagehand.tracker", function()
  local orch, clock, load, logged
  before_each(function()
    logged = {}
    orch, clock = T.new { stall_ms = 1000, log = function(line) logged[#logged + 1] = line end }
    load = stagehand.tracker(orch)
  end)

  describe(":task", function()
    it("sums a phase's tasks: running ones as far as they are, finished ones whole", function()
      local a = load:task("fetch", { label = "hero.png", total = 4 })
      local b = load:task("fetch", { label = "map.bin", total = 6 })
      local c = load:task("decode")
      a:advance()
      a:advance(2)
      assert.same({ 3, 10 }, { load:progress("fetch") })
      b:finish()
      assert.same({ 9, 10 }, { load:progress("fetch") })
      assert.same({ 0, 1 }, { load:progress("decode") })
      assert.same({ 9, 11 }, { load:progress() })
      c:finish()
      assert.same({ 10, 11 }, { load:progress() })
    end)

    it("takes a failed task out of both sums, so the bar never shows what did not load", function()
      local a = load:task("fetch", { total = 2 })
      local b = load:task("fetch", { total = 2 })
      a:advance(1)
      b:advance(1)
      assert.same({ 2, 4 }, { load:progress("fetch") })
      b:fail("404")
      assert.same({ 1, 2 }, { load:progress("fetch") })
      assert.same({ running = 1, done = 0, failed = 1, cancelled = 0, stalled = 0 }, load:counts("fetch"))
    end)

    it("clamps a task advanced past its total and says so once", function()
      local a = load:task("fetch", { label = "hero.png", total = 3 })
      a:advance(2)
      a:advance(5)
      a:advance(1)
      assert.same({ 3, 3 }, { load:progress("fetch") })
      assert.equal(1, #logged)
      assert.matches("hero.png (phase 'fetch') advanced past its total (7 of 3)", logged[1], 1, true)
    end)

    it("ignores what a task is told after it ended", function()
      local a = load:task("fetch", { total = 2 })
      assert.is_true(a:finish())
      assert.is_false(a:finish())
      assert.is_false(a:fail("late"))
      a:advance(1)
      assert.same({ 2, 2 }, { load:progress("fetch") })
    end)

    -- Regression: the tracker kept every task it ever counted, so a game
    -- that kept one tracker while it streamed for hours grew by each task,
    -- and every load:fraction() a frame walked all of them.
    it("keeps nothing of a task once it ended, however many a long session makes", function()
      local gone = setmetatable({}, { __mode = "k" })
      local keep = load:task("stream", { total = 4 })
      keep:advance(1)
      for i = 1, 3000 do
        local t = load:task("stream", { label = "chunk " .. i, total = 2 })
        gone[t] = true
        if i % 3 == 0 then t:fail("corrupt") elseif i % 5 == 0 then t:advance(1) else t:finish() end
      end
      for i = 1, 40 do
        orch:run("job " .. i, function(job) job:sleep(10) end, { phase = "stream" })
      end
      T.settle(orch, 1000)
      collectgarbage()
      collectgarbage()
      local left = 0
      for t in pairs(gone) do
        if t.state == "running" then left = left + 1 end
      end
      -- Every task still running is kept (1 in 5 of those not failed); the
      -- ended ones went.
      local n = 0
      for _ in pairs(gone) do n = n + 1 end
      assert.equal(left, n)
      assert.equal(400, n)
      -- ... and what was read stays right: 1600 finished (2 of 2 each), 400
      -- running (1 of 2), the one kept (1 of 4), 40 jobs (1 of 1).
      assert.same({ 1600 * 2 + 400 + 1 + 40, 1600 * 2 + 400 * 2 + 4 + 40 }, { load:progress("stream") })
      assert.same({ running = 401, done = 1640, failed = 1000, cancelled = 0, stalled = 0 }, load:counts("stream"))
      local row = load:timeline()[1]
      assert.same({ 3041, 1000 }, { row.tasks, row.failed })
    end)

    -- Regression: load:task(phase, {weird = 1}) was accepted without a word.
    it("refuses an option it does not know", function()
      local ok, err = pcall(load.task, load, "fetch", { weird = 1 })
      assert.is_false(ok)
      assert.matches("bad argument 'opts.weird' to load:task: expected one of label, total, got 1", err, 1, true)
    end)

    it("names a bad phase, label or total", function()
      assert.has_error(function() load:task("") end,
        "bad argument 'phase' to load:task: expected a non-empty string, got \"\"")
      assert.has_error(function() load:task(3) end)
      assert.has_error(function() load:task("fetch", { total = 0 }) end)
      assert.has_error(function() load:task("fetch", { label = 5 }) end)
      assert.has_error(function() load:task("fetch", 5) end)
      assert.has_error(function() load:progress("") end)
      assert.has_error(function() load:counts(false) end)
      assert.has_error(function() load:task("fetch"):advance(-1) end)
      assert.has_error(function() stagehand.tracker({}) end)
    end)
  end)

  describe("jobs run with opts.phase", function()
    it("count as tasks of their phase, as far as job:progress says", function()
      local f = stagehand.future()
      local h = orch:run("Baking the atlas", function(job)
        job:progress(1, 4)
        job:await(f)
        job:progress(3, 4)
        job:await(f)
      end, { phase = "bake" })
      assert.same({ 1, 4 }, { load:progress("bake") })
      f:resolve()
      orch:step()
      assert.equal("done", h:state())
      assert.same({ 4, 4 }, { load:progress("bake") })
      assert.same({ running = 0, done = 1, failed = 0, cancelled = 0, stalled = 0 }, load:counts("bake"))
    end)

    it("count 1 of 1 when done without saying how far they were", function()
      orch:run("small", function() end, { phase = "fetch" })
      assert.same({ 1, 1 }, { load:progress("fetch") })
    end)

    it("leave the sums when they fail, are cancelled or stall", function()
      local f = stagehand.future()
      orch:run("ok", function(job) job:await(f) end, { phase = "fetch", stall_ms = 5000 })
      orch:run("broken", function() error("no such file") end, { phase = "fetch" })
      local c = orch:run("scrolled away", function(job) job:await(f) end, { phase = "fetch" })
      orch:run("stuck", function(job) job:await(stagehand.future()) end, { phase = "fetch", stall_ms = 500 })
      c:cancel("gone")
      clock:advance(1100)
      orch:step()
      assert.same({ running = 1, done = 0, failed = 1, cancelled = 1, stalled = 1 }, load:counts("fetch"))
      assert.same({ 0, 1 }, { load:progress("fetch") })
      f:resolve()
      orch:step()
      assert.same({ 1, 1 }, { load:progress("fetch") })
    end)

    it("are heard when they fail while a tracker counts them: no 'nobody waited' line", function()
      -- (the loading screen shows the failure: counts, timeline, :on)
      local f = stagehand.future()
      orch:run("portrait", function(job) job:await(f) error("no such file") end, { phase = "fetch" })
      orch:run("manifest", function() error("bad manifest") end, { phase = "fetch" })
      f:resolve()
      orch:step()
      assert.equal(2, load:counts("fetch").failed)
      assert.same({}, logged)
      -- Without a tracker counting it, nobody heard: a closed tracker
      -- counts nothing, and one made after the job began never counted it.
      local g = stagehand.future()
      orch:run("music", function(job) job:await(g) error("codec") end, { phase = "fetch" })
      load:close()
      local late = stagehand.tracker(orch)
      g:resolve()
      orch:step()
      orch:run("banner", function() error("no such file") end) -- (no phase)
      orch:step()
      assert.equal(2, #logged)
      assert.matches("music failed and nobody waited on it", logged[1], 1, true)
      assert.matches("banner failed and nobody waited on it", logged[2], 1, true)
      assert.equal(0, late:counts().failed)
    end)

    it("raise for a phase that is not a non-empty string", function()
      local ok, err = pcall(orch.run, orch, "x", function() end, { phase = "" })
      assert.is_false(ok)
      assert.matches("bad argument 'opts.phase' to run: expected a non-empty string", err, 1, true)
      assert.equal(0, orch.nrunning)
      -- (a `when` starts no work of its own: it has no phase to count in)
      ok, err = pcall(orch.when, orch, "k", "waiting for k", { phase = "fetch" })
      assert.is_false(ok)
      assert.matches("bad argument 'opts.phase' to when", err, 1, true)
    end)

    if stagehand.backend ~= "lua" then -- (worker threads: not on the pure-Lua core)
      it("count a worker's request, as far as worker.progress says", function()
        local pool = stagehand.pool(orch, { module = "fixture_worker", size = 1 })
        local ports = { ack = stagehand.port(), tick = stagehand.port(), n = 4 }
        local h = pool:run("ticks", ports, { phase = "decode", label = "decoding the atlas" })
        orch:step() -- (a grant round offers it to the worker)
        assert.equal(1, ports.ack:receive_within(10000))
        orch:step()
        assert.same({ 1, 4 }, { load:progress("decode") })
        ports.tick:close()
        orch:wait(h, 10000)
        assert.same({ 4, 4 }, { load:progress("decode") })
        orch:wait(pool:destroy(), 10000)
      end)
    end
  end)

  describe(":on", function()
    it("tells each start, progress and end in order, with the clock's time", function()
      local events = {}
      local off = load:on(function(e) events[#events + 1] = e end)
      local f = stagehand.future()
      clock:advance(10)
      local h = orch:run("hero.png", function(job)
        job:progress(1, 2)
        job:await(f)
        return "bytes"
      end, { phase = "fetch" })
      clock:advance(5)
      f:resolve()
      orch:step()
      assert.equal("done", h:state())
      local t0 = events[1].t
      local seen = {}
      for i, e in ipairs(events) do
        seen[i] = string.format("%s %s %s %s/%s %s +%g", e.kind, e.phase, e.label, e.done, e.total,
          tostring(e.state), e.t - t0)
      end
      assert.same({
        "start fetch hero.png 0/1 nil +0",
        "progress fetch hero.png 1/2 nil +0",
        "end fetch hero.png 2/2 done +5",
      }, seen)
      off()
      load:task("fetch"):finish()
      assert.equal(3, #events)
      assert.same({}, logged) -- (the listener is gone, not left as something that fails when called)
      off() -- (a second call changes nothing)
      local n = 0
      load:on(function() n = n + 1 end)
      load:task("fetch"):finish()
      assert.equal(2, n)
      assert.same({}, logged)
    end)

    -- Regression: a listener told of a tracked job's start ran before the
    -- job took its key, and before the tracker filed the task as the
    -- job's: a listener that closed the orchestrator there (the player
    -- quit to the menu) left the task running for good, so load:idle()
    -- never settled, and the key running for good, so the asset never
    -- loaded again (the callback scenes found it).
    it("lets a listener told of a job's start end that job: its task and its key end with it", function()
      -- (load, made first, is told of the start before screen's listener
      -- ends the job; later is told after, and hears it start, then end)
      local screen = stagehand.tracker(orch)
      screen:on(function(e)
        if e.kind == "start" and e.label == "portrait" then orch:close("quit to menu") end
      end)
      local later, heard = stagehand.tracker(orch), {}
      later:on(function(e) heard[#heard + 1] = e.kind .. " " .. tostring(e.state) end)
      local h = orch:run("portrait", function(job) return job:await(stagehand.future()) end,
        { phase = "fetch", key = "portrait" })
      orch:step()
      assert.equal("cancelled", h:state())
      assert.is_false(orch:running("portrait"))
      for _, tr in ipairs { load, screen, later } do
        assert.same({ running = 0, done = 0, failed = 0, cancelled = 1, stalled = 0 }, tr:counts())
        assert.equal("done", tr:idle():state())
      end
      assert.same({ "start nil", "end cancelled" }, heard)
      local again = orch:run("portrait", function() return "loaded" end, { key = "portrait" })
      assert.same({ "done", "loaded" }, { again:result() })
      assert.all_ended(orch)
    end)

    -- Regression: the threads soak met requests that a watcher's game
    -- code cancelled as it heard their start, which no tracker counted.
    it("counts a job that a watcher ended as it heard its start, started and ended at once", function()
      local heard = {}
      load:on(function(e) heard[#heard + 1] = e.kind .. " " .. tostring(e.state) end)
      orch:watch(function(rec)
        if rec.state == "running" and rec.label == "banner" then orch:close("quit to menu") end
      end)
      local h = orch:run("banner", function(job) return job:await(stagehand.future()) end, { phase = "fetch" })
      assert.equal("cancelled", h:state())
      assert.same({ running = 0, done = 0, failed = 0, cancelled = 1, stalled = 0 }, load:counts("fetch"))
      assert.same({ "start nil", "end cancelled" }, heard)
      assert.equal(1, load:fraction())
    end)

    it("logs a listener that raises, and goes on", function()
      load:on(function() error("the bar broke") end)
      local n = 0
      load:on(function() n = n + 1 end)
      load:task("fetch"):finish()
      assert.equal(2, n)
      assert.matches("a load tracker's listener raised: .*the bar broke", logged[1])
    end)
  end)

  describe(":timeline", function()
    it("gives each phase its span, busy time and the stretches it made, in order of first start", function()
      local t0 = 0 -- (rows count from when the tracker was made)
      clock:advance(0)
      local a = load:task("fetch")
      clock:advance(100)
      local b = load:task("decode")
      clock:advance(100)
      a:finish() -- fetch: 0..200
      clock:advance(300)
      local c = load:task("fetch") -- a second stretch of fetch: 500..600
      clock:advance(100)
      c:fail("timeout")
      b:finish() -- decode: 100..600
      local rows = load:timeline()
      assert.same({
        { phase = "fetch", start_ms = t0, end_ms = t0 + 600, busy_ms = 300, spans = 2, tasks = 2, failed = 1 },
        { phase = "decode", start_ms = t0 + 100, end_ms = t0 + 600, busy_ms = 500, spans = 1, tasks = 1, failed = 0 },
      }, rows)
    end)

    it("counts a phase still running up to now, with no end", function()
      load:task("upload")
      clock:advance(250)
      local row = load:timeline()[1]
      assert.equal(250, row.busy_ms)
      assert.is_nil(row.end_ms)
    end)

    it("is written as an aligned table by stagehand.format_timeline", function()
      local rows = {
        { phase = "fetch", start_ms = 0, end_ms = 812.5, busy_ms = 790, spans = 2, tasks = 8, failed = 1 },
        { phase = "decode", start_ms = 120, busy_ms = 64.4, spans = 1, tasks = 8, failed = 0 },
      }
      assert.equal(table.concat({
        "phase   start ms  end ms  busy ms  spans  tasks  failed",
        "fetch        0.0   812.5    790.0      2      8       1",
        "decode     120.0       -     64.4      1      8       0",
      }, "\n"), stagehand.format_timeline(rows))
      assert.has_error(function() stagehand.format_timeline(5) end)
      assert.has_error(function() stagehand.format_timeline({ 5 }) end)
    end)

    -- Regression: rows of the wrong shape were rendered without a word.
    it("refuses rows of the wrong shape, naming the row and field", function()
      local good = { phase = "fetch", start_ms = 0, end_ms = 10, busy_ms = 10, spans = 1, tasks = 2, failed = 0 }
      local function bad(change, what)
        local r = {}
        for k, v in pairs(good) do r[k] = v end
        for k, v in pairs(change) do r[k] = v end
        if change.end_ms == false then r.end_ms = nil end
        local ok, err = pcall(stagehand.format_timeline, { good, r })
        assert.is_false(ok)
        assert.matches(what, err, 1, true)
      end
      bad({ phase = 3 }, "bad argument 'rows[2].phase' to stagehand.format_timeline: expected a non-empty string")
      bad({ start_ms = "0" }, "bad argument 'rows[2].start_ms' to stagehand.format_timeline: expected a number")
      bad({ spans = 1.5 }, "'rows[2].spans' to stagehand.format_timeline: expected a whole number >= 0")
      bad({ failed = -1 }, "'rows[2].failed'")
      bad({ busy = 3 }, "bad argument 'rows[2].busy' to stagehand.format_timeline: expected one of phase, start_ms")
      assert.matches("fetch", stagehand.format_timeline({ good, { phase = "decode", start_ms = 1, busy_ms = 0,
        spans = 0, tasks = 0, failed = 0 } })) -- (end_ms nil: a phase still running)
    end)
  end)

  describe(":close", function()
    -- Regression: a tracker stayed in its orchestrator for good and counted
    -- every later job (200 loading screens of 1,000 jobs held 5.1 GB).
    it("stops tracking, and keeps what it recorded readable", function()
      local a = load:task("fetch", { total = 2 })
      a:advance(1)
      orch:run("decoded", function() end, { phase = "decode" })
      orch:step()
      load:close()
      load:close() -- (twice: nothing more)
      orch:run("late", function() end, { phase = "decode" })
      orch:step()
      a:advance(1)
      a:finish()
      assert.same({ 2, 3 }, { load:progress() })
      assert.same({ running = 1, done = 1, failed = 0, cancelled = 0, stalled = 0 }, load:counts())
      assert.equal(2, #load:timeline())
      local ok, err = pcall(load.task, load, "fetch")
      assert.is_false(ok)
      assert.matches("load:task: the load tracker was closed", err, 1, true)
      local other = stagehand.tracker(orch) -- (a tracker made afterwards tracks as ever)
      orch:run("next", function() end, { phase = "decode" })
      orch:step()
      assert.same({ 1, 1 }, { other:progress("decode") })
    end)

    it("lets a tracker the game drops be collected, and the rest track on", function()
      local weak = setmetatable({}, { __mode = "k" })
      for _ = 1, 50 do weak[stagehand.tracker(orch)] = true end
      collectgarbage()
      collectgarbage()
      local left = 0
      for _ in pairs(weak) do left = left + 1 end
      assert.equal(0, left)
      local h = orch:run("counted", function() end, { phase = "decode" })
      orch:step()
      assert.equal("done", h:state())
      assert.same({ 1, 1 }, { load:progress("decode") })
      assert.equal(1, #orch.trackers) -- (the empty boxes left the list)
    end)

    it("keeps no trace of dropped trackers while no job has a phase (a tracker a level)", function()
      for _ = 1, 100 do stagehand.tracker(orch) end
      collectgarbage()
      collectgarbage()
      local before = collectgarbage("count")
      for _ = 1, 10 do -- (levels: the collector runs between them)
        for _ = 1, 2000 do
          stagehand.tracker(orch)
          orch:run("no phase", function() end)
        end
        collectgarbage()
        collectgarbage()
      end
      local kept = collectgarbage("count") - before
      assert.is_true(kept < 600, "kB kept: " .. kept) -- (a box each: about 2 MB)
      assert.is_true(#orch.trackers <= 4100, #orch.trackers .. " boxes")
      local h = orch:run("counted", function() end, { phase = "decode" })
      orch:step()
      assert.equal("done", h:state())
      assert.same({ 1, 1 }, { load:progress("decode") }) -- (the one kept still counts)
    end)

    it("keeps a dropped tracker while a job awaits its idle Handle", function()
      local f = stagehand.future()
      local h
      do
        local tr = stagehand.tracker(orch)
        orch:run("load", function(job) job:await(f) end, { phase = "fetch" })
        h = orch:run("screen", function(job) return job:await(tr:idle()) end)
      end
      collectgarbage()
      collectgarbage()
      f:resolve()
      orch:step()
      orch:step()
      assert.equal("done", h:state())
    end)
  end)

  describe(":idle", function()
    it("settles once no tracked task is running", function()
      local done = load:idle()
      assert.equal("done", done:state()) -- (nothing running: at once)
      local a = load:task("fetch")
      local f = stagehand.future()
      orch:run("job", function(job) job:await(f) end, { phase = "decode" })
      local idle = load:idle()
      assert.equal("running", idle:state())
      a:finish()
      assert.equal("running", idle:state())
      f:resolve()
      orch:step()
      assert.equal("done", idle:state())
    end)

    it("ends cancelled once the tracker is closed with tasks running", function()
      load:task("fetch")
      local idle = load:idle()
      load:close()
      assert.equal("cancelled", idle:state())
      assert.equal("cancelled", load:idle():state())
    end)

    it("stalls, naming them, when only tasks made by hand run and none of them moves", function()
      -- A task the game forgot to finish: the loading screen awaiting the
      -- load ends stalled after the orchestrator's stall_ms, not never.
      load:task("fetch", { label = "manifest" })
      local atlas = load:task("decode", { label = "atlas", total = 4 })
      local screen = orch:run("screen", function(job) job:await(load:idle()) end)
      T.settle(orch, 600)
      atlas:advance() -- (progress: the clock starts again)
      T.settle(orch, 600)
      assert.equal("running", screen:state())
      atlas:finish()
      T.settle(orch, 2000) -- (stall checks run each second)
      assert.equal("failed", screen:state()) -- (its await raised the stall)
      local _, err = screen:result()
      assert.is_true(stagehand.is_error(err.cause, "stalled"))
      assert.equal("the load going idle made no progress for 1 s. Still running: manifest (fetch).", err.cause.message)
      assert.equal("[stagehand] " .. err.cause.message, logged[1])
      assert.equal(1, load:counts("fetch").running) -- (the task itself is the game's: it runs on)
      assert.all_ended(orch)
    end)

    it("takes anything the load does for progress while a task made by hand runs beside its jobs", function()
      local stuck = load:task("fetch", { label = "forgotten" })
      local download = stagehand.future("download")
      local loader = orch:run("loader", function(job)
        for _ = 1, 5 do
          job:sleep(500)
          job:progress()
        end
        job:await(download)
      end, { phase = "fetch", stall_ms = 100000 })
      local idle = load:idle()
      T.settle(orch, 3000) -- (three times the stall time: the loader says how far it is)
      assert.equal("running", idle:state())
      download:resolve()
      T.settle(orch, 900) -- (the loader ended: progress, the last)
      assert.equal("done", loader:state())
      assert.equal("running", idle:state())
      T.settle(orch, 300)
      assert.equal("stalled", idle:state())
      stuck:finish()
      assert.equal("stalled", idle:state())
      assert.equal("done", load:idle():state()) -- (a new one: nothing runs)
    end)

    it("pauses its clock while only jobs with a phase run: their own clocks end them", function()
      local download = stagehand.future("download")
      local loader = orch:run("loader", function(job) job:await(download) end, { phase = "fetch", stall_ms = 5000 })
      local idle = load:idle()
      T.settle(orch, 4000)
      assert.equal("running", idle:state())
      download:resolve()
      orch:step()
      assert.same({ "done", "done" }, { loader:state(), idle:state() })
    end)

    it("is idle with the preloaders it tracks, so when_idle and the load's idle both end", function()
      -- A preloader in a phase waits for when_idle before each task; a
      -- loading screen awaits the load. The load's idle Handle is idle as
      -- the preloader is (it would else hold when_idle back, and the
      -- preloader with it, for ever).
      local done = 0
      local preloader = orch:run("preloader", function(job)
        for _ = 1, 3 do
          job:await(orch:when_idle())
          done = done + 1
        end
      end, { phase = "preload" })
      local screen = orch:run("screen", function(job) job:await(load:idle()) return "shown" end)
      T.settle(orch, 500)
      assert.equal(3, done)
      assert.same({ "done", "done", "shown" }, { preloader:state(), screen:result() })
    end)

    it("lets when_idle settle once the last task made by hand ends beside idle jobs", function()
      local fetch = load:task("fetch")
      local woke
      orch:run("preloader", function(job) job:await(orch:when_idle()) woke = true end, { phase = "preload" })
      local idle = load:idle()
      T.settle(orch, 500)
      assert.is_nil(woke) -- (the load's idle Handle waits on the game's task: not idle)
      fetch:finish()
      orch:step()
      assert.is_true(woke)
      orch:step()
      assert.equal("done", idle:state())
    end)

    it("raises a cycle error in a tracked job that awaits its own load going idle", function()
      local h = orch:run("level", function(job) job:await(load:idle()) end, { phase = "level" })
      local _, err = h:result()
      assert.equal("failed", h:state())
      assert.is_true(stagehand.is_error(err.cause, "cycle"))
      assert.matches("the load going idle", err.cause.message)
      assert.all_ended(orch)
    end)

    it("is awaited from a job", function()
      local a = load:task("fetch")
      local h = orch:run("screen", function(job) job:await(load:idle()) return "shown" end)
      a:finish()
      orch:step()
      assert.same({ "done", "shown" }, { h:result() })
    end)
  end)
end)
