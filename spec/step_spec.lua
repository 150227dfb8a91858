local stagehand = require "stagehand"
local T = require "stagehand.testing"

describe(":step", function()
  it("runs queued continuations oldest first and returns the jobs still running", function()
    local orch = T.new()
    local fs = { stagehand.future(), stagehand.future(), stagehand.future() }
    local order = {}
    for i = 1, 3 do
      orch:run("j" .. i, function(job)
        job:await(fs[i])
        order[#order + 1] = i
      end)
    end
    fs[3]:resolve()
    fs[1]:resolve()
    assert.equal(1, orch:step())
    assert.same({ 3, 1 }, order)
    fs[2]:resolve()
    assert.equal(0, orch:step())
  end)

  it("runs continuations queued during the step in the same step", function()
    local orch = T.new()
    local f1, f2 = stagehand.future(), stagehand.future()
    local done = {}
    orch:run("a", function(job)
      job:await(f1)
      f2:resolve()
      done.a = true
    end)
    orch:run("b", function(job)
      job:await(f2)
      done.b = true
    end)
    f1:resolve()
    orch:step()
    assert.same({ a = true, b = true }, done)
  end)

  -- Ten jobs that each run 3 ms of clock time once `f` settles; returns a
  -- function that says how many have run.
  local function ten_jobs(orch, clock, f)
    local ran = 0
    for i = 1, 10 do
      orch:run("j" .. i, function(job)
        job:await(f)
        clock:advance(3)
        ran = ran + 1
      end)
    end
    return function() return ran end
  end

  it("stops after budget_ms of clock time", function()
    local orch, clock = T.new()
    local f = stagehand.future()
    local ran = ten_jobs(orch, clock, f)
    f:resolve()
    orch:step(10)
    assert.equal(4, ran())
    orch:step()
    assert.equal(10, ran())
  end)

  it("keeps its budget and its sleeps' times after the game's clock was set back", function()
    -- The clock goes back an hour (a wall clock corrected): the
    -- orchestrator counts that as no time passing. Every reading inside the
    -- step counts the same way: the step still stops after budget_ms, and a
    -- sleep begun after the first continuation still lasts its length.
    local orch, clock = T.new()
    clock:advance(3600000)
    local f = stagehand.future()
    local ran, woke = ten_jobs(orch, clock, f), nil
    orch:run("sleeper", function(job)
      job:await(f)
      job:sleep(1000)
      woke = true
    end)
    orch:step()
    clock.now = 0
    f:resolve()
    orch:step(10)
    assert.equal(4, ran())
    orch:step()
    assert.equal(10, ran())
    clock:advance(100)
    orch:step()
    assert.is_nil(woke)
    assert.equal(0, T.settle(orch, 1000))
    assert.is_true(woke)
  end)

  it("cannot run inside a job", function()
    local orch = T.new()
    local h = orch:run("x", function() orch:step() end)
    local _, err = h:result()
    assert.matches("cannot be called inside a job", tostring(err.cause), 1, true)
  end)

  it("names the game's line when a helper steps inside a job (T.settle, orch:wait, orch:loop)", function()
    local orch = T.new()
    local line = debug.getinfo(1, "l").currentline
    local hs = {
      orch:run("settles", function() T.settle(orch, 10) end),
      orch:run("waits", function() orch:wait(stagehand.future()) end),
      orch:run("loops", function() orch:loop() end),
    }
    for i, h in ipairs(hs) do
      local _, err = h:result()
      assert.matches("step_spec.lua:" .. (line + 1 + i) .. ": orch:", tostring(err.cause), 1, true)
      assert.matches("cannot be called inside a job", tostring(err.cause), 1, true)
    end
  end)

  it("names a bad budget", function()
    local orch = T.new()
    assert.has_error(function() orch:step("8") end, "bad argument 'budget_ms' to step: expected a number >= 0, got \"8\"")
  end)
end)

describe(":next_wake", function()
  it("is nil with nothing pending", function()
    local orch = T.new()
    assert.is_nil(orch:next_wake())
  end)

  it("is 0 when work is queued", function()
    local orch = T.new()
    local f = stagehand.future()
    orch:run("x", function(job) job:await(f) end)
    f:resolve()
    assert.equal(0, orch:next_wake())
  end)

  it("is 0 while a permit waits, not for a budget changed with nobody waiting", function()
    local orch = T.new()
    orch:budget("finalize", { ops = 1 })
    orch:run("idle loader", function(job) job:sleep(300) end)
    assert.equal(300, orch:next_wake())
    orch:budget("finalize", { ops = 2 }) -- (a step would find nothing to grant)
    assert.equal(300, orch:next_wake())
    orch:run("chunk", function(job) job:permit("finalize") end)
    assert.equal(0, orch:next_wake())
    orch:step()
    assert.equal(300, orch:next_wake())
  end)

  it("is not 0 for jobs that start and wait on futures while a when_idle waits on a busy world", function()
    -- (a start, or a wait that follows no job, cannot leave the world idle:
    -- a host, or the luv driver, need not step for it)
    local orch = T.new { check_ms = 1000, stall_ms = 5000 }
    orch:run("preloader", function(job) job:await(orch:when_idle()) end)
    orch:run("loader", function(job) job:await(stagehand.future()) end)
    orch:step()
    assert.equal(5000, orch:next_wake()) -- (the loader's stall check)
    orch:run("another loader", function(job) job:await(stagehand.future()) end)
    orch:run("a sleeper", function(job) job:sleep(10000) end)
    assert.equal(5000, orch:next_wake())
  end)

  it("is not 0 for a job that queues in a full pool: only a slot freed (or the pool grown) makes a grant due", function()
    local orch = T.new { check_ms = 1000, stall_ms = 5000, pools = { p = 1 } }
    local release
    orch:run("holder", function(job)
      release = job:slot("p")
      job:await(stagehand.future())
    end)
    orch:step() -- (the holder takes the free slot)
    local waiter = orch:run("waiter", function(job) job:slot("p") end)
    assert.equal(5000, orch:next_wake())
    release()
    assert.equal(0, orch:next_wake())
    orch:step()
    assert.equal("done", waiter:state())
    orch:run("another waiter", function(job) job:slot("p") end)
    orch:pool("p", 2)
    assert.equal(0, orch:next_wake())
  end)

  it("is the time to the next sleep's end", function()
    local orch, clock = T.new()
    orch:run("x", function(job) job:sleep(300) end)
    clock:advance(100)
    assert.equal(200, orch:next_wake())
  end)

  it("is the time to the next stall check that can find a stall", function()
    local orch, clock = T.new { check_ms = 1000, log = function() end }
    orch:run("x", function(job) job:await(stagehand.future()) end, { stall_ms = 5000 })
    assert.equal(5000, orch:next_wake())
    clock:advance(4500)
    orch:step() -- a check runs now; the next is check_ms later
    assert.equal(1000, orch:next_wake())
    clock:advance(1000)
    orch:step()
    assert.is_nil(orch:next_wake())
  end)

  it("lets a host sleep exactly until the next thing happens", function()
    local orch, clock = T.new()
    local log = {}
    orch:run("x", function(job)
      job:sleep(120)
      log[#log + 1] = clock.now
      job:sleep(80)
      log[#log + 1] = clock.now
    end)
    local wakes = 0
    while true do
      local nw = orch:next_wake()
      if nw == nil then break end
      clock:advance(nw)
      orch:step()
      wakes = wakes + 1
    end
    assert.same({ 120, 200 }, log)
    assert.equal(2, wakes)
  end)
end)

describe(":set_visible", function()
  it("names a bad argument", function()
    local orch = T.new()
    assert.has_error(function() orch:set_visible("no") end)
  end)

  it("is idempotent", function()
    local orch, clock = T.new()
    local h = orch:run("x", function(job) job:await(stagehand.future()) end, { stall_ms = 1000 })
    orch:set_visible(false)
    orch:set_visible(false)
    clock:advance(5000)
    orch:set_visible(true)
    orch:set_visible(true)
    orch:step()
    assert.equal("running", h:state())
    assert.is_false(orch:visible() == false)
  end)
end)

describe(":loop", function()
  it("runs a manual orchestrator until no job runs", function()
    local orch = T.new()
    local h = orch:run("x", function(job)
      job:sleep(500)
      return "ok"
    end)
    assert.equal(0, orch:loop())
    assert.same({ "done", "ok" }, { h:result() })
  end)

  it("ends stuck jobs through their stalls", function()
    local orch = T.new { log = function() end }
    local h = orch:run("x", function(job) job:await(stagehand.future()) end)
    assert.equal(0, orch:loop())
    assert.equal("stalled", h:state())
  end)

  it("returns the jobs still running when nothing can end them: hidden, they cannot stall", function()
    local orch = T.new { log = function() end }
    local f = stagehand.future()
    local h = orch:run("x", function(job) return job:await(f) end)
    orch:set_visible(false)
    assert.equal(1, orch:loop())
    assert.equal("running", h:state())
    orch:set_visible(true)
    f:resolve("late")
    assert.equal(0, orch:loop())
    assert.same({ "done", "late" }, { h:result() })
  end)
end)

describe(".testing", function()
  it("settle returns the jobs still running after ms", function()
    local orch = T.new()
    orch:run("long", function(job)
      job:sleep(1000)
      job:progress()
      job:sleep(1000)
    end)
    assert.equal(1, T.settle(orch, 1500))
    assert.equal(0, T.settle(orch, 1500))
  end)

  it("clock advances and is callable", function()
    local c = T.clock(10)
    assert.equal(10, c())
    c:advance(5)
    assert.equal(15, c.now)
    assert.has_error(function() c:advance(-1) end)
  end)

  it("all_ended fails with the dump of what still runs", function()
    local orch = T.new()
    orch:run("Stuck portrait", function(job) job:await(stagehand.future("portrait upload")) end)
    local ok, err = pcall(function() assert.all_ended(orch) end)
    assert.is_false(ok)
    assert.matches("Stuck portrait", tostring(err), 1, true)
    assert.matches("future 'portrait upload'", tostring(err), 1, true)
  end)

  it("ended fails for a running Handle", function()
    local orch = T.new()
    local h = orch:run("x", function(job) job:sleep(1) end)
    assert.has_error(function() assert.ended(h) end)
    T.settle(orch, 10)
    assert.ended(h)
  end)
end)

describe("a callback that yields", function()
  -- Lua 5.4 and LuaJIT let a yield cross pcall: a priority function that
  -- yields while a step runs in a coroutine of the game's own suspends that
  -- step. Nothing can resume it but the game, so the next step says why it
  -- cannot run. (Lua 5.1 cannot yield there: the function counts as raising.)
  it("is named by the next step, which would otherwise only say 'already running'", function()
    local lines = {}
    local orch = T.new { pools = { p = 1 }, log = function(m) lines[#lines + 1] = m end }
    local yielding = false
    local function priority()
      if yielding then coroutine.yield("a frame") end
      return "scene"
    end
    local hold = stagehand.future()
    orch:run("holder", function(job)
      local release = job:slot("p")
      job:await(hold)
      release()
    end)
    local h = orch:run("waiter", function(job)
      job:slot("p")()
      return "ok"
    end, { priority = priority })
    hold:resolve()
    yielding = true
    local game = coroutine.create(function() return orch:step() end)
    assert.is_true((coroutine.resume(game)))
    yielding = false
    if coroutine.status(game) == "suspended" then
      local ok, err = pcall(orch.step, orch)
      assert.is_false(ok)
      assert.matches("an earlier step was suspended before it ended", err, 1, true)
      -- The game resumes its coroutine: that step carries on and ends.
      assert.is_true((coroutine.resume(game)))
      assert.equal("dead", coroutine.status(game))
    else
      assert.matches("a priority function raised: attempt to yield", lines[1], 1, true)
    end
    assert.equal(0, orch:step())
    assert.same({ "done", "ok" }, { h:result() })
    assert.no_leaks(orch)
  end)
end)
