-- engine/mend.lua and settle.recover: what memory running out can leave
-- undone, mended at the next step so that every job still ends. The
-- failing allocator (spec/oom, `make test-oom`) reaches these states by
-- failing real allocations; here each is made by hand, one at a time, so
-- each mend is seen to work on all three runtimes and both cores.
local stagehand = require "stagehand"
local T = require "stagehand.testing"
local settle = require "stagehand.engine.settle"
local mend = require "stagehand.engine.mend"
local F = require "stagehand.engine.fields"

local W, QUEUED = F.W, require("stagehand.engine.marks").QUEUED

local function quiet() end

-- Settles `f` as a fire that memory cut short before it told anyone:
-- its state is readable, its listeners were never told.
local function settled_untold(f, ...)
  rawset(f, "_st", "done")
  rawset(f, "_v", settle.pack(...))
end

local function awaiting(orch, f, label)
  return orch:run(label, function(job) return job:await(f) end)
end

describe("mending after memory ran out", function()
  it("tells the listeners a fire left untold at the next step, each once", function()
    local orch = T.new { log = quiet }
    local f = stagehand.future("atlas")
    local hs = {}
    for i = 1, 3 do hs[i] = awaiting(orch, f, "sprite " .. i) end
    orch:step()
    local woken = 0
    local real
    real = settle.on_wake(function(job, from)
      woken = woken + 1
      if woken == 2 then error("not enough memory", 0) end -- (the second wake's push)
      return real(job, from)
    end)
    local ok, err = pcall(f.resolve, f, "atlas bytes")
    settle.on_wake(real)
    assert.is_false(ok)
    assert.equal("not enough memory", err)
    assert.equal("done", f:state())
    assert.is_true(mend.due(orch))
    T.settle(orch, 1000)
    for i = 1, 3 do
      assert.equal("done", hs[i]:state(), "sprite " .. i)
      assert.equal("atlas bytes", select(2, hs[i]:result()))
    end
    assert.is_false(mend.due(orch))
    assert.same({}, T.leaks(orch))
  end)

  it("has a group that a cut-short fire left untold count its parts again", function()
    local orch = T.new { log = quiet }
    local f, g = stagehand.future("f"), stagehand.future("g")
    local first = awaiting(orch, f, "first") -- (told first: its wake raises)
    local both = orch:run("both", function(job) return job:await(stagehand.all { f, g }) end)
    orch:step()
    local real
    real = settle.on_wake(function() error("not enough memory", 0) end)
    local ok = pcall(f.resolve, f, "F")
    settle.on_wake(real)
    assert.is_false(ok)
    g:resolve("G")
    T.settle(orch, 1000)
    assert.equal("done", first:state())
    assert.equal("done", both:state())
    assert.same({ "F", "G" }, select(2, both:result()))
  end)

  it("tells a newest run's hand-over again when the fire that told it was cut short", function()
    local orch = T.new { log = quiet }
    local f1, f2 = stagehand.future("level 1"), stagehand.future("level 2")
    local first = orch:newest("scene", "scene 1", function(job) return job:await(f1) end)
    local hud = awaiting(orch, first, "hud")
    orch:step()
    orch:newest("scene", "scene 2", function(job) return job:await(f2) end) -- (takes over `first`)
    orch:step()
    local real
    real = settle.on_wake(function(job, from)
      if job == hud[1] then error("not enough memory", 0) end -- (the hud's wake, deep in the hand-over's end)
      return real(job, from)
    end)
    f2:resolve("level 2 data")
    local ok = pcall(orch.step, orch)
    settle.on_wake(real)
    assert.is_false(ok)
    T.settle(orch, 1000)
    assert.equal("done", hud:state())
    assert.equal("level 2 data", select(2, hud:result()))
    assert.same({}, T.leaks(orch))
  end)

  it("wakes a job parked on an awaitable that settled unheard", function()
    local orch = T.new { log = quiet }
    local f = stagehand.future("level")
    local h = awaiting(orch, f, "scene")
    orch:step()
    settled_untold(f, "level data")
    orch:step()
    assert.equal("running", h:state()) -- (nothing told it, and nothing says anything went wrong)
    settle.note_broken()
    T.settle(orch, 1000)
    assert.equal("done", h:state())
    assert.equal("level data", select(2, h:result()))
  end)

  it("counts a group's parts again when one ended unheard, and the group ends with every value", function()
    local orch = T.new { log = quiet }
    local a, b, c = stagehand.future("a"), stagehand.future("b"), stagehand.future("c")
    local h = orch:run("gather", function(job)
      return job:await(stagehand.all { a, stagehand.all_settled { b, c } })
    end)
    orch:step()
    settled_untold(a, "A")
    settled_untold(b, "B") -- (inside the nested group)
    settle.note_broken()
    orch:step()
    assert.equal("running", h:state())
    c:resolve("C") -- (heard as usual: the groups finish their count)
    T.settle(orch, 1000)
    assert.equal("done", h:state())
    local _, got = h:result()
    assert.equal("A", got[1])
    assert.same({ state = "done", value = "B" }, got[2][1])
    assert.same({ state = "done", value = "C" }, got[2][2])
  end)

  it("settles a race whose winner ended unheard", function()
    local orch = T.new { log = quiet }
    local a, b = stagehand.future("a"), stagehand.future("b")
    local h = orch:run("race", function(job) return job:await(stagehand.race { a, b }) end)
    orch:step()
    settled_untold(b, "second first")
    settle.note_broken()
    T.settle(orch, 1000)
    assert.equal("done", h:state())
    assert.equal("second first", select(2, h:result()))
  end)

  it("cancels an abortable whose signal aborted while it could not settle", function()
    local orch = T.new { log = quiet }
    local f, ctl = stagehand.future("download"), stagehand.controller()
    local h = orch:run("fetch", function(job) return job:await(stagehand.abortable(f, ctl.signal)) end)
    orch:step()
    rawset(ctl.signal, "aborted", true) -- (its handlers never ran)
    rawset(ctl.signal, "reason", "the player left")
    settle.note_broken()
    T.settle(orch, 1000)
    assert.equal("failed", h:state()) -- (the await raised the cancel, and the work did not catch it)
    assert.matches("the player left", tostring(select(2, h:result())), 1, true)
  end)

  it("looks the jobs over after a guarded call ran out of memory", function()
    local orch = T.new { log = quiet }
    local f = stagehand.future("x")
    local h = awaiting(orch, f, "a")
    orch:step()
    assert.is_false(mend.due(orch))
    h:on_end(function() error("not enough memory", 0) end)
    h:cancel("scrolled away")
    assert.is_true(mend.due(orch)) -- (the guard kept the error; what it cut short is looked for)
    orch:step()
    assert.is_false(mend.due(orch))
    assert.equal("cancelled", h:state())
    assert.same({}, T.leaks(orch))
  end)

  it("queues a job marked queued whose push never happened", function()
    local orch = T.new { log = quiet }
    local f = stagehand.future("mesh")
    local h = awaiting(orch, f, "prop")
    orch:step()
    local job = h[1]
    settle.unlisten(f, job)
    settled_untold(f, "mesh data")
    job[W] = QUEUED -- (as a wake marks it before its push)
    settle.note_broken()
    T.settle(orch, 1000)
    assert.equal("done", h:state())
    assert.equal("mesh data", select(2, h:result()))
  end)

  it("fails a job taken off the run queue whose resume never ran, and runs its cleanup", function()
    local orch = T.new { log = quiet }
    local f = stagehand.future("texture")
    local h = awaiting(orch, f, "loader")
    orch:step()
    local job = h[1]
    settle.unlisten(f, job)
    job[W] = false -- (taken off the queue: its resume never came)
    settle.note_broken()
    T.settle(orch, 1000)
    assert.equal("failed", h:state())
    assert.matches("not enough memory", tostring(select(2, h:result())), 1, true)
    assert.same({}, T.leaks(orch)) -- (its coroutine ran its cleanup and is gone)
    assert.equal(0, orch.nrunning)
  end)

  it("fails a job whose end was cut short before its state was written", function()
    local orch = T.new { log = quiet }
    local f = stagehand.future("texture")
    local h = awaiting(orch, f, "loader")
    orch:step()
    local job = h[1]
    settle.entered(job) -- (as an end begins; it never gets to settle.left)
    settle.unlisten(f, job)
    job[W] = false -- (it left what it awaited, then memory ran out)
    assert.is_true(mend.due(orch))
    T.settle(orch, 1000)
    assert.equal("failed", h:state())
    assert.matches("not enough memory", tostring(select(2, h:result())), 1, true)
    assert.same({}, T.leaks(orch))
    f:resolve("late") -- (heard by nobody: the job left it)
    assert.is_false(mend.due(orch))
  end)

  it("fails a job whose making was cut short, at the next step", function()
    local orch = T.new { log = quiet }
    local made
    local ok, err = pcall(orch._external, orch, "request", nil, function(job)
      made = job
      error("not enough memory", 0)
    end)
    assert.is_false(ok)
    assert.equal("not enough memory", err)
    assert.equal(1, orch.nrunning) -- (a job no Handle of which reached the game)
    orch:step()
    assert.equal(0, orch.nrunning)
    assert.equal("failed", made[F.STATE])
    assert.same({}, T.leaks(orch))
  end)

  it("finishes an end cut short after its state was written: task, cleanup, abort and the loaders it made", function()
    local E = require "stagehand.engine.engine"
    local orch = T.new { log = quiet }
    local load = stagehand.tracker(orch)
    local f = stagehand.future("level")
    local inner, cleaned, heard
    local scene = orch:run("scene", function(job)
      inner = orch:run("prop", function(j) return j:await(stagehand.future("mesh")) end)
      job.signal:on_abort(function() heard = true end)
      job:pcall(job.await, job, f)
      cleaned = true
    end, { phase = "decode" })
    orch:step()
    local real = E.hooks.phase_ended
    E.hooks.phase_ended = function() error("not enough memory", 0) end -- (the tracker's part of the end)
    local ok, err = pcall(scene.cancel, scene, "level left")
    E.hooks.phase_ended = real
    assert.is_false(ok)
    assert.equal("not enough memory", err)
    assert.equal("cancelled", scene:state()) -- (its state was written: the rest was cut short)
    assert.is_nil(cleaned)
    assert.is_true(mend.due(orch))
    T.settle(orch, 1000)
    assert.equal(0, load:counts("decode").running)
    assert.equal(1, load:counts("decode").cancelled)
    assert.is_true(heard)
    assert.is_true(cleaned)
    assert.equal("cancelled", inner:state())
    assert.same({}, T.leaks(orch))
    load:close()
  end)

  it("tells the rest of a signal's handlers when its abort was cut short", function()
    local logm = require "stagehand.engine.log"
    local orch = T.new { log = quiet }
    local ctl = stagehand.controller()
    local hs = {}
    for i = 1, 3 do
      hs[i] = orch:run("follower " .. i, function(job) return job:await(stagehand.future("f" .. i)) end,
        { signal = ctl.signal })
    end
    orch:step()
    local real, calls = logm.guard, 0
    logm.guard = function(...)
      calls = calls + 1
      if calls == 2 then error("not enough memory", 0) end -- (the second handler's guard)
      return real(...)
    end
    local ok = pcall(ctl.abort, ctl, "the player left")
    logm.guard = real
    assert.is_false(ok)
    assert.is_true(ctl.signal.aborted)
    assert.equal("cancelled", hs[1]:state())
    assert.equal("running", hs[2]:state())
    orch:step()
    for i = 1, 3 do assert.equal("cancelled", hs[i]:state(), "follower " .. i) end
    T.settle(orch, 1000)
  end)

  it("ends the load:idle() Handles of a tracker whose close was cut short", function()
    local E = require "stagehand.engine.engine"
    local orch = T.new { log = quiet }
    local load = stagehand.tracker(orch)
    local f = stagehand.future("pixels")
    orch:run("decoder", function(job) return job:await(f) end, { phase = "decode" })
    orch:step()
    local idles = { load:idle(), load:idle(), load:idle() }
    local real, calls = E.cancel, 0
    E.cancel = function(...)
      calls = calls + 1
      if calls == 2 then error("not enough memory", 0) end
      return real(...)
    end
    local ok = pcall(load.close, load)
    E.cancel = real
    assert.is_false(ok)
    assert.equal("cancelled", idles[1]:state())
    assert.equal("running", idles[2]:state())
    orch:step()
    for i = 1, 3 do assert.equal("cancelled", idles[i]:state(), "idle Handle " .. i) end
    f:resolve("late")
    T.settle(orch, 1000)
    assert.same({}, T.leaks(orch))
  end)

  it("fails a keyed run whose signal could not be bound, and lets its key go", function()
    local signal = require "stagehand.engine.signal"
    local orch = T.new { log = quiet }
    local ctl = stagehand.controller()
    local real = signal.watch
    signal.watch = function() error("not enough memory", 0) end
    local ran = false
    local ok, err = pcall(orch.run, orch, "voice", function() ran = true end, { key = "voice", signal = ctl.signal })
    signal.watch = real
    assert.is_false(ok)
    assert.equal("not enough memory", err)
    assert.is_true(orch:running("voice")) -- (made, its work never started)
    orch:step()
    assert.is_false(orch:running("voice"))
    assert.is_false(ran)
    assert.same({}, T.leaks(orch)) -- (its coroutine, never run, is gone)
    local again = orch:run("voice", function() return "line" end, { key = "voice" })
    T.settle(orch, 1000)
    assert.equal("done", again:state())
  end)

  it("fails a run whose first resume could not be made, at the next step", function()
    local E = require "stagehand.engine.engine"
    local orch = T.new { log = quiet }
    local real = E.start_work
    E.start_work = function() error("not enough memory", 0) end -- (the resume's own call)
    local ran = false
    local ok, err = pcall(orch.run, orch, "mesh", function() ran = true end, { key = "mesh" })
    E.start_work = real
    assert.is_false(ok)
    assert.equal("not enough memory", err)
    assert.is_true(mend.due(orch))
    orch:step()
    assert.is_false(orch:running("mesh"))
    assert.is_false(ran)
    assert.equal(0, orch.nrunning)
    assert.same({}, T.leaks(orch))
  end)

  it("fails a job whose making raised once it was started, and a when still gets the next run", function()
    local keys = require "stagehand.rank.keys"
    local orch = T.new { log = quiet }
    local waiting = orch:when("mesh")
    local real = keys.join_pending
    keys.join_pending = function() error("not enough memory", 0) end -- (the when's joining)
    local ran = false
    local ok, err = pcall(orch.run, orch, "mesh", function() ran = true end, { key = "mesh" })
    keys.join_pending = real
    assert.is_false(ok)
    assert.equal("not enough memory", err)
    assert.is_true(mend.due(orch))
    orch:step()
    assert.is_false(ran)
    assert.equal("running", waiting:state()) -- (still waiting for a run of its key)
    local again = orch:run("mesh", function() return "verts" end, { key = "mesh" })
    T.settle(orch, 1000)
    assert.equal("done", again:state())
    assert.equal("done", waiting:state())
    assert.same({}, T.leaks(orch))
  end)

  it("looks nothing over while nothing went wrong", function()
    local orch = T.new { log = quiet }
    local f = stagehand.future("x")
    awaiting(orch, f, "a")
    orch:step()
    f:resolve(1)
    orch:step()
    assert.is_false(mend.due(orch))
  end)
end)
