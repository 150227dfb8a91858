local stagehand = require "stagehand"
local each = require("stagehand.core.compat").each
local T = require "stagehand.testing"

local function quiet(opts)
  opts = opts or {}
  opts.log = opts.log or function() end
  return T.new(opts)
end

describe("keys", function()
  describe(":run with a key", function()
    it("runs the work once for two pages asking for the same armor build", function()
      local orch = quiet()
      local builds = 0
      local function build(job)
        builds = builds + 1
        job:sleep(100)
        return "plate armor"
      end
      local page1 = orch:run("Building armor for page 1", build, { key = "armor-build:plate" })
      local page2 = orch:run("Building armor for page 2", build, { key = "armor-build:plate" })
      assert.are_not.equal(page1, page2)
      assert.equal(page1.id, page2.id)
      assert.equal("Building armor for page 1", page2.label) -- the label of the run it follows
      assert.equal("armor-build:plate", page2.key)
      T.settle(orch, 200, 50)
      assert.equal(1, builds)
      assert.same({ "done", "plate armor" }, { page1:result() })
      assert.same({ "done", "plate armor" }, { page2:result() })
    end)

    it("withdraws one caller without stopping the run the other still needs", function()
      local orch = quiet()
      local function build(job)
        job:sleep(100)
        return "cloth"
      end
      local page1 = orch:run("build", build, { key = "armor-build:cloth" })
      local page2 = orch:run("build", build, { key = "armor-build:cloth" })
      page1:cancel("page 1 closed")
      assert.equal("cancelled", page1:state())
      assert.equal("running", page2:state())
      assert.is_true(orch:running("armor-build:cloth"))
      T.settle(orch, 200, 50)
      assert.same({ "done", "cloth" }, { page2:result() })
    end)

    it("cancels the run when its last caller leaves, through signals", function()
      local orch = quiet()
      local c1, c2 = stagehand.controller(), stagehand.controller()
      local cleaned = false
      local function build(job)
        local ok = job:pcall(job.sleep, job, 1000)
        if not ok then cleaned = true end
      end
      local h1 = orch:run("build", build, { key = "k", signal = c1.signal })
      local h2 = orch:run("build", build, { key = "k", signal = c2.signal })
      c1:abort("left")
      assert.is_true(orch:running("k"))
      c2:abort("left too")
      assert.is_false(orch:running("k"))
      orch:step()
      assert.is_true(cleaned)
      assert.equal("cancelled", h1:state())
      assert.equal("cancelled", h2:state())
      assert.equal("left too", select(2, h2:result()).reason)
      assert.no_leaks(orch)
    end)

    it("lets an army's callers leave a shared run in any order: the rest hear its end, its rank follows who is left", function()
      local orch = quiet()
      local f = stagehand.future()
      local job_of
      local hs = {}
      for i = 1, 40 do
        local prio = i == 17 and "visible" or (i % 2 == 0 and "background" or nil)
        hs[i] = orch:run("sword mesh", function(job)
          job_of = job
          return job:await(f)
        end, { key = "mesh:sword", priority = prio })
      end
      assert.equal("visible", job_of:priority())
      -- soldiers fall from the middle, the front and the back
      local gone = { [1] = true, [17] = true, [40] = true, [2] = true, [25] = true }
      for i = 3, 39, 3 do gone[i] = true end
      for _, i in ipairs { 17, 1, 40, 2, 25 } do hs[i]:cancel("fell") end
      for i = 3, 39, 3 do hs[i]:cancel("fell") end
      assert.equal("scene", job_of:priority()) -- the visible one left; odd soldiers name none
      for i = 1, 39, 2 do
        if not gone[i] then hs[i]:cancel("fell") gone[i] = true end
      end
      assert.equal("background", job_of:priority())
      assert.is_true(orch:running("mesh:sword"))
      f:resolve("mesh")
      orch:step()
      for i = 1, 40 do
        if gone[i] then
          assert.equal("cancelled", hs[i]:state())
        else
          assert.same({ "done", "mesh" }, { hs[i]:result() })
        end
      end
      assert.no_leaks(orch)
    end)

    it("starts a new run when the key is not running, even with an outcome remembered", function()
      local orch = quiet()
      local n = 0
      local function load()
        n = n + 1
        return n
      end
      orch:run("load", load, { key = "k" })
      local h = orch:run("load", load, { key = "k" })
      assert.equal(2, n)
      assert.same({ "done", 2 }, { h:result() })
      assert.same({ "done", 2 }, { orch:when("k"):result() }) -- the new outcome replaced the old
    end)

    it("names a key that is not a string", function()
      local orch = quiet()
      assert.has_error(function() orch:run("x", function() end, { key = 5 }) end,
        "bad argument 'opts.key' to run: expected a non-empty string, got 5")
    end)
  end)

  describe(":when", function()
    it("follows a running job: a shop page waits for an item analysis another page started", function()
      local orch = quiet()
      local analyses = 0
      orch:run("Measuring items at level 3", function(job)
        analyses = analyses + 1
        job:sleep(500)
        return { sword = 12 }
      end, { key = "item-analysis:3" })
      local shop = orch:run("Shop page", function(job)
        local analysis = job:await(orch:when("item-analysis:3"))
        return analysis.sword
      end)
      T.settle(orch, 1000, 100)
      assert.equal(1, analyses)
      assert.same({ "done", 12 }, { shop:result() })
    end)

    it("settles at once from a remembered outcome", function()
      local orch = quiet()
      orch:run("floor", function() return "painted" end, { key = "floor-surface:1" })
      local h = orch:when("floor-surface:1")
      assert.same({ "done", "painted" }, { h:result() })
      orch:run("bad", function() error("no paint") end, { key = "floor-surface:2" })
      local st, err = orch:when("floor-surface:2"):result()
      assert.equal("failed", st)
      assert.matches("no paint", tostring(err.cause))
    end)

    it("waits for a run that has not started, which its waiters join before the work starts", function()
      local orch = quiet()
      local w = orch:when("craft-stone:7", "Waiting for the craft stone")
      assert.equal("running", w:state())
      assert.equal("Waiting for the craft stone", w.label)
      assert.is_false(orch:running("craft-stone:7"))
      local callers_at_start
      local run = orch:run("Preparing the craft stone", function(job)
        -- the when waiter already follows the run (callers' Handles sit in
        -- the job's array part from fields.H on)
        callers_at_start = #job - require("stagehand.engine.fields").H + 1
        job:sleep(10)
        return "stone"
      end, { key = "craft-stone:7" })
      assert.equal(2, callers_at_start)
      assert.equal(run.id, w.id)
      T.settle(orch, 100, 10)
      assert.same({ "done", "stone" }, { w:result() })
    end)

    it("leaves its waiters waiting when a run is asked for by a caller already withdrawn", function()
      local orch = quiet()
      local w = orch:when("portrait:hero")
      local ctl = stagehand.controller()
      ctl:abort("the page closed")
      local ran = false
      local gone = orch:run("Loading the hero", function() ran = true end,
        { key = "portrait:hero", signal = ctl.signal })
      assert.equal("cancelled", gone:state())
      assert.is_false(ran)
      assert.is_false(orch:running("portrait:hero"))
      assert.equal("running", w:state()) -- still waiting, for the next run
      orch:run("Loading the hero", function() return "hero.png" end, { key = "portrait:hero" })
      assert.same({ "done", "hero.png" }, { w:result() })
      assert.no_leaks(orch)
    end)

    it("tells the listeners a waiter gathered before the run started", function()
      local orch = quiet()
      local heard = {}
      local w = orch:when("portrait:hero")
      w:on_end(function(st, v) heard[#heard + 1] = st .. " " .. v end)
      -- (the run's own caller has no listener: only the waiter's tells)
      local run = orch:run("Painting the hero", function(job)
        job:sleep(10)
        return "portrait"
      end, { key = "portrait:hero" })
      T.settle(orch, 100, 10)
      assert.equal("done", run:state())
      assert.same({ "done portrait" }, heard)
      assert.no_leaks(orch)
    end)

    it("keeps a run going for a when waiter after the run's own caller leaves", function()
      local orch = quiet()
      local w = orch:when("k")
      local run = orch:run("run", function(job)
        job:sleep(10)
        return 1
      end, { key = "k" })
      run:cancel()
      assert.is_true(orch:running("k"))
      T.settle(orch, 100, 10)
      assert.same({ "done", 1 }, { w:result() })
    end)

    it("lets pending waiters leave in any order; the rest join the run in the order they came", function()
      local orch = quiet()
      local hs, heard = {}, {}
      for i = 1, 30 do
        hs[i] = orch:when("atlas", "tile " .. i)
        hs[i]:on_end(function(st) heard[#heard + 1] = i .. st end)
      end
      for _, i in ipairs { 30, 1, 15, 16, 2, 29 } do hs[i]:cancel("scrolled away") end
      heard = {}
      orch:run("atlas", function() return "atlas" end, { key = "atlas" })
      local want = {}
      for i = 1, 30 do
        if i == 1 or i == 2 or i == 15 or i == 16 or i == 29 or i == 30 then
          assert.equal("cancelled", hs[i]:state())
        else
          want[#want + 1] = i .. "done"
          assert.same({ "done", "atlas" }, { hs[i]:result() })
        end
      end
      assert.same(want, heard)
      assert.no_leaks(orch)
    end)

    it("runs its own stall clock while nothing has started the key", function()
      local lines = {}
      local orch = T.new { log = function(m) lines[#lines + 1] = m end }
      local w = orch:when("never-started", nil, { stall_ms = 2000 })
      T.settle(orch, 5000)
      local st, err = w:result()
      assert.equal("stalled", st)
      assert.equal("when never-started made no progress for 2 s.", err.message)
      assert.same({ "[stagehand] when never-started made no progress for 2 s." }, lines)
      -- a later run of the key does not find the stalled waiter
      local run = orch:run("run", function() return 1 end, { key = "never-started" })
      assert.same({ "done", 1 }, { run:result() })
      assert.no_leaks(orch)
    end)

    it("shows a pending waiter in the report", function()
      local orch = quiet()
      orch:when("ammo", "Waiting for physics")
      local r = orch:report()
      assert.equal(1, #r)
      assert.equal("Waiting for physics", r[1].label)
      assert.equal("ammo", r[1].key)
      assert.equal("a run of key ammo to start", r[1].waiting_on)
    end)

    it("lets a job awaiting a pending when follow the run once it starts", function()
      local orch = quiet()
      local got
      orch:run("Craft", function(job)
        got = job:await(orch:when("craft-stone:1"))
      end, { stall_ms = 1000 })
      T.settle(orch, 500)
      orch:run("Stone", function(job)
        for _ = 1, 5 do
          job:sleep(800)
          job:progress()
        end
        return "stone"
      end, { key = "craft-stone:1" })
      T.settle(orch, 10000)
      assert.equal("stone", got)
      assert.equal(0, orch.nrunning)
    end)

    it("withdraws a pending waiter through its signal", function()
      local orch = quiet()
      local ctl = stagehand.controller()
      local w = orch:when("k", nil, { signal = ctl.signal })
      ctl:abort("gone")
      assert.equal("cancelled", w:state())
      local run = orch:run("run", function() return 1 end, { key = "k" })
      assert.same({ "done", 1 }, { run:result() })
      assert.no_leaks(orch)
    end)

    it("names bad arguments", function()
      local orch = quiet()
      assert.has_error(function() orch:when(5) end, "bad argument 'key' to when: expected a non-empty string, got 5")
      assert.has_error(function() orch:when("k", 5) end)
      assert.has_error(function() orch:when("k", nil, { key = "x" }) end)
      assert.has_error(function() orch:when("k", nil, { priority = "urgent" }) end)
    end)
  end)

  describe("remembered outcomes", function()
    it("keep the last `remember` outcomes, oldest forgotten first", function()
      local orch = quiet { remember = 3 }
      for i = 1, 5 do orch:run("load", function() return i end, { key = "k" .. i }) end
      assert.equal("running", orch:when("k1"):state())
      assert.equal("running", orch:when("k2"):state())
      for i = 3, 5 do assert.same({ "done", i }, { orch:when("k" .. i):result() }) end
    end)

    it("do not keep a cancelled run", function()
      local orch = quiet()
      orch:run("first", function() return "old" end, { key = "k" })
      local h = orch:run("second", function(job) job:sleep(100) end, { key = "k" })
      h:cancel()
      assert.same({ "done", "old" }, { orch:when("k"):result() })
      local h2 = orch:run("only", function(job) job:sleep(100) end, { key = "fresh" })
      h2:cancel()
      assert.equal("running", orch:when("fresh"):state())
    end)

    it("keep stalled runs", function()
      local orch = quiet()
      orch:run("stuck", function(job) job:await(stagehand.future()) end, { key = "k", stall_ms = 1000 })
      T.settle(orch, 3000)
      assert.equal("stalled", orch:when("k"):state())
    end)

    it("let a preloader key be forgotten and loaded again", function()
      local orch = quiet()
      local loads = 0
      local function preload()
        loads = loads + 1
        return loads
      end
      orch:run("preload", preload, { key = "preload:music" })
      assert.equal("done", orch:when("preload:music"):state())
      orch:forget("preload:music")
      local w = orch:when("preload:music")
      assert.equal("running", w:state())
      orch:run("preload", preload, { key = "preload:music" })
      assert.same({ "done", 2 }, { w:result() })
      assert.equal(2, loads)
    end)

    it("treat forget of an unknown key as a no-op, and name a bad key", function()
      local orch = quiet()
      orch:forget("never")
      assert.has_error(function() orch:forget(5) end)
      assert.has_error(function() orch:running(nil) end)
    end)
  end)

  describe("cycles through keys", function()
    it("raise a cycle Error when two keyed jobs wait on each other through when", function()
      local orch = quiet()
      local a = orch:run("A", function(job)
        job:sleep(1)
        return job:await(orch:when("b"))
      end, { key = "a" })
      local b = orch:run("B", function(job)
        job:sleep(2)
        return job:await(orch:when("a"))
      end, { key = "b" })
      T.settle(orch, 100, 1)
      local _, err = b:result()
      assert.is_true(stagehand.is_error(err.cause, "cycle"))
      assert.matches("B %-> A %-> B", err.cause.message)
      assert.equal("failed", a:state()) -- A heard B fail
      assert.no_leaks(orch)
    end)

    it("are found when the when was pending as the wait began", function()
      local orch = quiet()
      local a = orch:run("A", function(job) return job:await(orch:when("b")) end, { key = "a" })
      local b = orch:run("B", function(job) return job:await(orch:when("a")) end, { key = "b" })
      T.settle(orch, 100)
      local _, err = b:result()
      assert.is_true(stagehand.is_error(err.cause, "cycle"))
      assert.equal("failed", a:state())
    end)
  end)
end)

describe("callers made inside a job", function()
  it("are withdrawn when that job is cancelled, so what it asked for stops", function()
    local orch = quiet()
    local child_cleaned = false
    local child
    local parent = orch:run("Scene", function(job)
      child = orch:run("Floor", function(c)
        local ok = c:pcall(c.sleep, c, 10000)
        child_cleaned = not ok
      end, { key = "floor" })
      job:await(child)
    end)
    parent:cancel("left the scene")
    orch:step()
    assert.equal("cancelled", child:state())
    assert.is_true(child_cleaned)
    assert.is_false(orch:running("floor"))
    assert.no_leaks(orch)
  end)

  it("are withdrawn in the order the job made them", function()
    local orch = quiet()
    local heard = {}
    local parent = orch:run("Scene", function(job)
      for i = 1, 5 do
        orch:run("part " .. i, function(c) c:sleep(1000) end):on_end(function() heard[#heard + 1] = i end)
      end
      job:sleep(10)
      error("the scene broke")
    end)
    T.settle(orch, 100, 10)
    assert.equal("failed", parent:state())
    assert.same({ 1, 2, 3, 4, 5 }, heard)
    assert.no_leaks(orch)
  end)

  it("are not kept once they end: a streamer running sub-jobs all session holds none of the finished ones", function()
    local orch = quiet()
    local made = setmetatable({}, { __mode = "k" })
    local gate = stagehand.future()
    local function chunk(job, i)
      local h = orch:run("chunk " .. i, function(c) c:sleep(1) return i end)
      made[h] = true
      return job:await(h)
    end
    local streamer = orch:run("streamer", function(job)
      for i = 1, 50 do chunk(job, i) end
      job:await(gate)
    end)
    T.settle(orch, 1000, 5)
    assert.equal("running", streamer:state())
    collectgarbage()
    collectgarbage()
    local left = 0
    for _ in each, made do left = left + 1 end
    assert.equal(0, left)
    gate:resolve()
    orch:step()
    assert.no_leaks(orch)
  end)

  it("carry on after that job finished", function()
    local orch = quiet()
    local child
    local parent = orch:run("Menu", function()
      child = orch:run("Preload music", function(c)
        c:sleep(100)
        return "music"
      end)
      return "shown"
    end)
    assert.equal("done", parent:state())
    T.settle(orch, 200, 50)
    assert.same({ "done", "music" }, { child:result() })
  end)

  it("stay with their own signal when they were given one", function()
    local orch = quiet()
    local ctl = stagehand.controller()
    local child
    local parent = orch:run("Scene", function(job)
      child = orch:run("Floor", function(c) c:sleep(100) return "floor" end, { signal = ctl.signal })
      job:sleep(10000)
    end)
    parent:cancel()
    T.settle(orch, 200, 50)
    assert.same({ "done", "floor" }, { child:result() })
  end)
end)
