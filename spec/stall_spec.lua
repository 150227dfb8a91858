local stagehand = require "stagehand"
local T = require "stagehand.testing"

local function new(opts)
  local lines = {}
  opts = opts or {}
  opts.log = function(m) lines[#lines + 1] = m end
  local orch, clock = T.new(opts)
  return orch, clock, lines
end

describe("stall clocks", function()
  it("stall a job that makes no progress for its stall time, and log one line", function()
    local orch, _, lines = new()
    local h = orch:run("Painting the floor", function(job) job:await(stagehand.future()) end)
    T.settle(orch, 19000)
    assert.equal("running", h:state())
    T.settle(orch, 2000)
    local st, err = h:result()
    assert.equal("stalled", st)
    assert.is_true(stagehand.is_error(err, "stalled"))
    assert.equal("Painting the floor made no progress for 20 s.", err.message)
    assert.same({ "[stagehand] Painting the floor made no progress for 20 s." }, lines)
    assert.no_leaks(orch)
  end)

  it("honour a job's own stall_ms", function()
    local orch = new()
    local h = orch:run("request", function(job) job:await(stagehand.future()) end, { stall_ms = 1500 })
    T.settle(orch, 3000)
    local _, err = h:result()
    assert.equal("request made no progress for 1.5 s.", err.message)
  end)

  it("are checked every check_ms", function()
    local orch, clock = new { check_ms = 500 }
    local h = orch:run("x", function(job) job:await(stagehand.future()) end, { stall_ms = 100 })
    clock:advance(200)
    orch:step()
    assert.equal("running", h:state())
    clock:advance(300)
    orch:step()
    assert.equal("stalled", h:state())
  end)

  it("are reset by job:progress", function()
    local orch = new()
    local f = stagehand.future()
    local h = orch:run("decoder", function(job)
      for _ = 1, 5 do
        job:sleep(10000)
        job:progress()
      end
      job:await(f)
    end)
    T.settle(orch, 50000, 1000)
    assert.equal("running", h:state())
    T.settle(orch, 25000, 1000)
    assert.equal("stalled", h:state())
  end)

  it("never count hidden time", function()
    local orch = new()
    local h = orch:run("x", function(job) job:await(stagehand.future()) end)
    T.settle(orch, 10000)
    orch:set_visible(false)
    T.settle(orch, 600000)
    assert.equal("running", h:state())
    assert.is_nil(orch:next_wake())
    orch:set_visible(true)
    T.settle(orch, 9000)
    assert.equal("running", h:state())
    T.settle(orch, 2000)
    assert.equal("stalled", h:state())
  end)

  it("do not count a sleep's end as progress: a job that only sleeps and polls stalls", function()
    local orch = new()
    local polls = 0
    local h = orch:run("poller", function(job)
      while true do
        polls = polls + 1
        job:sleep(100)
      end
    end)
    T.settle(orch, 30000)
    assert.equal("stalled", h:state())
    assert.is_true(polls > 150)
    assert.no_leaks(orch)
  end)

  it("pause while a job awaits another job, which alone can stall", function()
    local orch, _, lines = new()
    local slow = orch:run("slow build", function(job)
      for _ = 1, 10 do
        job:sleep(10000)
        job:progress()
      end
      return "built"
    end)
    local waiter = orch:run("portrait", function(job) return job:await(slow) end, { stall_ms = 1000 })
    T.settle(orch, 200000, 1000)
    assert.same({ "done", "built" }, { waiter:result() })
    assert.same({}, lines)
  end)

  it("raise the awaited job's stall in the waiter", function()
    local orch = new()
    local stuck = orch:run("stuck", function(job) job:await(stagehand.future()) end, { stall_ms = 5000 })
    local waiter = orch:run("waiter", function(job) return job:await(stuck) end)
    T.settle(orch, 7000)
    local st, err = waiter:result()
    assert.equal("failed", st)
    assert.is_true(stagehand.is_error(err.cause, "stalled"))
    assert.equal("stuck", err.cause.label)
  end)

  it("run again for a waiter once the awaited job ends", function()
    local orch = new()
    local a = orch:run("a", function(job)
      job:sleep(100)
      job:progress()
      return 1
    end)
    local b = orch:run("b", function(job)
      job:await(a)
      job:await(stagehand.future())
    end, { stall_ms = 1000 })
    T.settle(orch, 1000, 100)
    assert.equal("running", b:state())
    T.settle(orch, 2000, 100)
    assert.equal("stalled", b:state())
  end)

  it("keep running for a job awaiting a mix of a job and a future", function()
    local orch = new()
    local a = orch:run("a", function(job)
      for _ = 1, 100 do
        job:sleep(500)
        job:progress()
      end
    end)
    local b = orch:run("b", function(job)
      job:await(stagehand.all { a, stagehand.future() })
    end, { stall_ms = 3000 })
    T.settle(orch, 5000)
    assert.equal("stalled", b:state())
    assert.equal("running", a:state())
    a:cancel()
    assert.equal(0, orch:step())
  end)

  it("count each download a loader awaits through stagehand.all as its progress", function()
    local orch = new { stall_ms = 20000 }
    local downloads = {}
    for i = 1, 100 do downloads[i] = stagehand.future("download " .. i) end
    local loader = orch:run("loader", function(job) return #job:await(stagehand.all(downloads)) end)
    -- one a second for 100 s: far past its 20 s, and never 20 s without one
    for i = 1, 100 do
      T.settle(orch, 1000, 500)
      downloads[i]:resolve(i)
    end
    orch:step()
    assert.same({ "done", 100 }, { loader:result() })
    -- nested, and through all_settled: each part that settles counts
    local late = { stagehand.future(), stagehand.future(), stagehand.future() }
    local nested = orch:run("nested", function(job)
      return job:await(stagehand.all_settled { stagehand.all { late[1], late[2] }, late[3] })
    end)
    for i = 1, 3 do
      T.settle(orch, 15000, 500)
      late[i]:resolve(i)
    end
    orch:step()
    assert.equal("done", nested:state())
    -- and one that stops arriving stalls it 20 s after the last
    local more = { stagehand.future(), stagehand.future() }
    local stuck = orch:run("stuck", function(job) return job:await(stagehand.all(more)) end)
    T.settle(orch, 15000, 500)
    more[1]:resolve()
    T.settle(orch, 19000, 500)
    assert.equal("running", stuck:state())
    T.settle(orch, 2000, 500)
    assert.equal("stalled", stuck:state())
    assert.no_leaks(orch)
  end)

  it("count a part settling deep inside nested groups as progress", function()
    local orch = new { stall_ms = 20000 }
    -- the usual way to gather as loads are made: one level per load
    local fs, acc = {}, nil
    for i = 1, 40 do
      fs[i] = stagehand.future("download " .. i)
      acc = acc and stagehand.all { acc, fs[i] } or stagehand.all { fs[i] }
    end
    local loader = orch:run("loader", function(job) return job:await(acc) end)
    for i = 1, 40 do -- the deepest first: each one a second, 40 s in all
      T.settle(orch, 1000, 500)
      fs[i]:resolve(i)
    end
    orch:step()
    assert.equal("done", loader:state())
    -- and the clock still runs out once they stop coming: a part that
    -- settles below the group awaited is found when the clock runs out,
    -- and counts from then, so the stall comes within twice the stall
    -- time of the last one
    local more = { stagehand.future(), stagehand.future() }
    local stuck = orch:run("stuck", function(job)
      return job:await(stagehand.all { stagehand.all { more[1], more[2] }, stagehand.future() })
    end)
    T.settle(orch, 10000, 500)
    more[1]:resolve()
    T.settle(orch, 19000, 500)
    assert.equal("running", stuck:state())
    T.settle(orch, 22000, 500)
    assert.equal("stalled", stuck:state())
    assert.no_leaks(orch)
  end)

  it("follow only jobs once the futures nested beside them settle, through all_settled and abortable", function()
    local orch, _, lines = new { stall_ms = 20000 }
    local function weaver(name)
      return orch:run(name, function(job)
        for _ = 1, 60 do
          job:sleep(1000)
          job:progress()
        end
        return name
      end)
    end
    local cloth, dye = weaver("cloth"), weaver("dye")
    local f1, f2 = stagehand.future(), stagehand.future()
    local ctl = stagehand.controller()
    local a = orch:run("a", function(job)
      return job:await(stagehand.all_settled { stagehand.all { f1, cloth }, dye })
    end)
    local b = orch:run("b", function(job)
      return job:await(stagehand.abortable(stagehand.all { f2, cloth }, ctl.signal))
    end)
    T.settle(orch, 10000, 500)
    f1:resolve()
    f2:resolve()
    -- Only jobs left below each: their own clocks pause, and 50 s more
    -- of the weavers' progress stalls neither.
    T.settle(orch, 55000, 500)
    assert.equal("done", a:state())
    assert.equal("done", b:state())
    assert.same({}, lines)
    assert.no_leaks(orch)
  end)

  it("follow only the job once the future beside it in a stagehand.all settles", function()
    local orch, _, lines = new { stall_ms = 20000 }
    local atlas = stagehand.future("atlas download")
    local cloth = orch:run("cloth", function(job)
      for _ = 1, 60 do
        job:sleep(1000)
        job:progress()
      end
      return "woven"
    end)
    local loader = orch:run("loader", function(job) return job:await(stagehand.all { atlas, cloth }) end)
    T.settle(orch, 15000, 500)
    atlas:resolve("atlas")
    -- Waiting only on cloth, which keeps making progress: the loader's own
    -- clock no longer runs (it ran while the download was open).
    T.settle(orch, 50000, 500)
    assert.same({ "done", { "atlas", "woven" } }, { loader:result() })
    assert.same({}, lines)
    -- and if that job stalls, the wait raises its stall
    local gate = stagehand.future()
    local stuck = orch:run("stuck", function(job) job:await(gate) end, { stall_ms = 30000 })
    local other = stagehand.future()
    local waiter = orch:run("waiter", function(job) return job:await(stagehand.all { other, stuck }) end)
    T.settle(orch, 1000, 500)
    other:resolve()
    T.settle(orch, 30000, 500)
    local st, err = waiter:result()
    assert.equal("failed", st)
    assert.is_true(stagehand.is_error(err.cause, "stalled"))
    assert.equal("stuck", err.cause.label)
    assert.no_leaks(orch)
  end)

  it("abort the job's signal with the stalled Error and run its cleanup", function()
    local orch = new()
    local seen, cleanup
    local h = orch:run("x", function(job)
      job.signal:on_abort(function(reason) seen = reason end)
      local _, err = job:pcall(job.await, job, stagehand.future())
      cleanup = err
    end, { stall_ms = 1000 })
    T.settle(orch, 5000)
    assert.equal("stalled", h:state())
    assert.is_true(stagehand.is_error(seen, "stalled"))
    assert.equal(seen, cleanup)
  end)

  -- (The stall's log line is game code, and it ran once the core had
  -- dropped the job's clock but before the job ended: settling what the
  -- job awaited woke it, and the wake restarted a clock the core no longer
  -- had, an internal error raised out of the game's resolve.)
  it("end the job before the log function hears of it, so what the log does cannot wake it", function()
    local f = stagehand.future()
    local resolved, raised
    local orch = T.new { log = function(m)
      if resolved == nil and m:find("Loading the hero", 1, true) then
        resolved, raised = pcall(f.resolve, f, "too late")
      end
    end }
    local h = orch:run("Loading the hero", function(job) return job:await(f) end, { stall_ms = 1000 })
    T.settle(orch, 1500)
    assert.is_true(resolved, tostring(raised))
    assert.equal("stalled", h:state())
    assert.no_leaks(orch)
  end)

  it("run from the start on a clock that starts below zero", function()
    local orch = new { clock = T.clock(-100000) }
    local h = orch:run("x", function(job) job:await(stagehand.future()) end, { stall_ms = 1000 })
    T.settle(orch, 900)
    assert.equal("running", h:state())
    T.settle(orch, 1200)
    assert.equal("stalled", h:state())
  end)

  it("count a clock that runs back as no time passing, and go on from there", function()
    -- A game's clock set back 10 s (reset, or a wall clock corrected):
    -- stall clocks and sleeps neither wait those 10 s again nor jump.
    local clock = T.clock(10000)
    local orch = new { clock = clock, check_ms = 100 }
    local stuck = orch:run("stuck", function(job) job:await(stagehand.future()) end, { stall_ms = 1000 })
    local woke
    local pacer = orch:run("pacer", function(job)
      job:sleep(500)
      woke = true
      job:progress()
      job:await(stagehand.future())
    end, { stall_ms = 1000 })
    local started = orch:report()
    clock.now = 0
    -- times reported go on from the orchestrator's, not the clock's
    local late = orch:run("late", function(job) job:sleep(1) end)
    assert.equal(10000, orch:report()[3].started_at)
    T.settle(orch, 400)
    assert.equal("done", late:state())
    assert.is_nil(woke)
    T.settle(orch, 100)
    assert.is_true(woke)
    T.settle(orch, 400)
    assert.equal("running", stuck:state())
    T.settle(orch, 100)
    assert.equal("stalled", stuck:state())
    -- the pacer's progress, 500 ms in, counts from there
    T.settle(orch, 400)
    assert.equal("running", pacer:state())
    T.settle(orch, 100)
    assert.equal("stalled", pacer:state())
    assert.equal(10000, started[1].started_at)
    assert.no_leaks(orch)
  end)

  it("count a wait's end when it ends: a job left queued by a spent step budget stalls from there", function()
    local orch, clock = new { check_ms = 10 }
    local download, go = stagehand.future(), stagehand.future()
    local loader = orch:run("loader", function(job) job:await(download) end, { stall_ms = 100 })
    local busy = orch:run("busy", function(job)
      job:await(go)
      clock:advance(10) -- it runs for 10 ms: the step's budget is spent
      job:sleep(0)
    end, { stall_ms = 1000 })
    clock:advance(90)
    orch:step()
    go:resolve()
    download:resolve() -- at 90 ms: the loader's progress, queued behind the busy job
    clock:advance(60)
    orch:step(4) -- a check at 160 ms, with the loader still queued
    assert.equal("running", loader:state())
    clock:advance(10)
    orch:step()
    assert.equal("done", loader:state())
    assert.equal("done", busy:state())
    -- and the queue holds no stall off: from the wait's end, its time counts
    local never, go_again = stagehand.future(), stagehand.future()
    local starved = orch:run("starved", function(job) job:await(never) end, { stall_ms = 100 })
    orch:run("busy again", function(job)
      job:await(go_again)
      clock:advance(10)
      job:sleep(0)
    end, { stall_ms = 1000 })
    go_again:resolve()
    never:resolve() -- at 170 ms, queued behind the busy job
    clock:advance(150) -- a long frame: no step
    orch:step(4) -- the busy job spends the budget; a check at 330 ms
    assert.equal("stalled", starved:state())
    T.settle(orch, 100)
    assert.no_leaks(orch)
  end)

  -- The game's own calls come between steps, when its clock has moved on
  -- since the last one: what they end or free is progress at their time.
  it("count a wait the game ends between steps as progress then, not at the last step", function()
    -- a part of a group, settled by the game
    local orch, clock = new { check_ms = 10 }
    local parts = { stagehand.future(), stagehand.future() }
    local gather = orch:run("gather", function(job) job:await(stagehand.all(parts)) end, { stall_ms = 100 })
    orch:step() -- at 0 ms
    clock:advance(80)
    parts[1]:resolve() -- at 80 ms, with no step since 0
    clock:advance(70)
    orch:step() -- a check at 150 ms: 70 ms since the part settled
    assert.equal("running", gather:state())
    clock:advance(40)
    orch:step()
    assert.equal("stalled", gather:state())
    assert.no_leaks(orch)
    -- a wait the game ends, left queued by a spent step budget
    orch, clock = new { check_ms = 10 }
    local download, go = stagehand.future(), stagehand.future()
    local busy = orch:run("busy", function(job)
      job:await(go)
      clock:advance(10) -- it runs for 10 ms: the step's budget is spent
    end, { stall_ms = 1000 })
    local loader = orch:run("loader", function(job) job:await(download) end, { stall_ms = 100 })
    orch:step() -- at 0 ms
    clock:advance(80)
    go:resolve() -- at 80 ms, with no step since 0
    download:resolve() -- the loader's wait ends, and it queues behind the busy job
    clock:advance(70)
    orch:step(4) -- a check at 160 ms with the loader still queued: 80 ms since its wait ended
    assert.equal("done", busy:state())
    assert.equal("running", loader:state())
    orch:step()
    assert.equal("done", loader:state())
    assert.no_leaks(orch)
  end)

  it("count a slot the game frees between steps as progress then, not at the last step", function()
    for _, how in ipairs({ "its release", "a cancel of its holder" }) do
      local orch, clock = new { pools = { p = 2 }, check_ms = 10 }
      local holders, releases = {}, {}
      for i = 1, 2 do
        holders[i] = orch:run("holder " .. i, function(job)
          releases[i] = job:slot("p")
          job:await(stagehand.future())
        end)
      end
      local waiter = orch:run("waiter", function(job) job:slot("p") end, { stall_ms = 100 })
      orch:step() -- at 0 ms
      orch:pool("p", 1) -- (so the freed slot is not handed on: freeing alone is the progress)
      clock:advance(80)
      if how == "its release" then releases[1]() else holders[1]:cancel() end -- at 80 ms, no step since 0
      clock:advance(70)
      orch:step() -- a check at 150 ms: 70 ms since a slot was freed in its pool
      assert.equal("running", waiter:state(), how)
      clock:advance(40)
      orch:step()
      assert.equal("stalled", waiter:state(), how)
      holders[1]:cancel()
      holders[2]:cancel()
      orch:step()
      assert.no_leaks(orch)
    end
  end)

  it("count a pool's traffic only from when a job starts waiting in it", function()
    local orch, clock = new { check_ms = 10, pools = { decode = 1 } }
    local first, second = stagehand.future(), stagehand.future()
    orch:run("holder", function(job)
      local release = job:slot("decode")
      job:await(first)
      release()
    end, { stall_ms = 1000 })
    orch:run("next", function(job)
      local release = job:slot("decode") -- waits: the pool has traffic from here
      job:await(second)
      release()
    end, { stall_ms = 1000 })
    local late = orch:run("late", function(job)
      job:sleep(95) -- no progress since its start, at 0
      job:slot("decode")
    end, { stall_ms = 100 })
    clock:advance(90)
    orch:step()
    first:resolve() -- at 90 ms "next" is handed the slot; "late" does not wait yet
    orch:step()
    for _ = 1, 2 do
      clock:advance(5)
      orch:step() -- at 95 ms "late" starts waiting
    end
    assert.equal("stalled", late:state()) -- at 100 ms: the grant at 90 was not its progress
    second:resolve()
    T.settle(orch, 100)
    assert.no_leaks(orch)
  end)

  it("end stalls that come due together in one order, whenever the host stepped", function()
    -- (one host steps every frame, another sleeps by next_wake and skips
    -- the steps in between: the same two stalls must end in the same order)
    local function play(every_frame)
      local orch, clock, lines = new { check_ms = 1 }
      local download = stagehand.future()
      orch:run("title", function(job) job:await(download) end, { stall_ms = 50 })
      clock:advance(5)
      download:resolve() -- ("title" ends; its stall clock's id is free again)
      orch:step()
      if every_frame then
        for _ = 1, 55 do
          clock:advance(1)
          orch:step()
        end
      else
        clock:advance(55)
      end
      orch:run("portrait", function(job) job:await(stagehand.future()) end, { stall_ms = 40 })
      orch:run("banner", function(job) job:await(stagehand.future()) end, { stall_ms = 40 })
      clock:advance(40)
      orch:step()
      return lines
    end
    local expected = {
      "[stagehand] portrait made no progress for 0.04 s.",
      "[stagehand] banner made no progress for 0.04 s.",
    }
    assert.same(expected, play(true))
    assert.same(expected, play(false))
  end)

  -- (They went by the core's slot of each, lowest first: a slot freed by
  -- an ended job goes to the next job started, so a later job could stall
  -- first, and keyed runs were remembered, and forgotten, out of order.)
  it("end stalls that come due together in the order their jobs started", function()
    local orch, clock, lines = new { check_ms = 1 }
    local early = stagehand.future()
    orch:run("intro", function(job) job:await(early) end) -- (takes the lowest slot)
    orch:run("map", function(job) job:await(stagehand.future()) end, { stall_ms = 100 })
    early:resolve() -- (intro ends: its slot, below map's, is free)
    orch:step()
    clock:advance(40)
    orch:run("music", function(job) job:await(stagehand.future()) end, { stall_ms = 60 }) -- (due with map)
    clock:advance(60)
    orch:step()
    assert.same({
      "[stagehand] map made no progress for 0.1 s.",
      "[stagehand] music made no progress for 0.06 s.",
    }, lines)
  end)

  it("report stalls of one check in the order they came due", function()
    local orch, clock, lines = new { check_ms = 10000 }
    orch:run("late", function(job) job:await(stagehand.future()) end, { stall_ms = 3000 })
    orch:run("early", function(job) job:await(stagehand.future()) end, { stall_ms = 1000 })
    clock:advance(10000)
    orch:step()
    assert.same({
      "[stagehand] early made no progress for 1 s.",
      "[stagehand] late made no progress for 3 s.",
    }, lines)
  end)
end)
