-- orch:newest: the newest request under a name wins (a search box, a
-- level select the player changes their mind about).
local stagehand = require "stagehand"
local T = require "stagehand.testing"

-- The message of the cycle a run failed with, or false.
local function is_cycle(h)
  local st, err = h:result()
  return st == "failed" and stagehand.is_error(err.cause, "cycle") and err.cause.message
end

-- Each running job's priority, by label.
local function ranks_of(orch)
  local ranks = {}
  for _, rec in ipairs(orch:report()) do ranks[rec.label] = rec.priority end
  return ranks
end

describe(":newest", function()
  local orch
  before_each(function() orch = T.new { log = function() end } end)

  it("cancels the older run and ends the older Handle with the newer's values", function()
    local f1, f2 = stagehand.future(), stagehand.future()
    local cleaned = false
    local old = orch:newest("preview", "preview a", function(job)
      local ok, err = job:pcall(job.await, job, f1)
      if not ok then cleaned = true error(err, 0) end
      return "a"
    end)
    local new = orch:newest("preview", "preview b", function(job) return job:await(f2) end)
    orch:step()
    assert.is_true(cleaned) -- (the older run was cancelled, its cleanup ran)
    assert.equal("running", old:state())
    f1:resolve("too late") -- (nothing of the older run is applied)
    f2:resolve("b")
    orch:step()
    assert.same({ "done", "b" }, { new:result() })
    assert.same({ "done", "b" }, { old:result() })
    assert.no_leaks(orch)
  end)

  it("hands the newer's failure to every older Handle, however many calls came between", function()
    local fs = { stagehand.future(), stagehand.future(), stagehand.future() }
    local hs = {}
    for i = 1, 3 do
      hs[i] = orch:newest("search", "search " .. i, function(job) return job:await(fs[i]) end)
    end
    fs[3]:reject("offline")
    orch:step()
    for i = 1, 3 do
      local st, err = hs[i]:result()
      assert.equal("failed", st)
      assert.equal("offline", err.cause)
    end
  end)

  it("wakes a job awaiting the older Handle with the newer's values", function()
    local f = stagehand.future()
    local older = orch:newest("level", "load level 1", function(job) return job:await(stagehand.future()) end)
    local screen = orch:run("loading screen", function(job) return job:await(older) end)
    orch:newest("level", "load level 2", function(job) return job:await(f) end)
    f:resolve("level 2")
    orch:step()
    assert.same({ "done", "level 2" }, { screen:result() })
  end)

  it("fails a newer run that awaits an older call's Handle, as a wait on itself, rather than hang", function()
    -- The older Handle ends with the newer run's end: a newer run waiting
    -- on it waits on its own end. Its first wait began before the call
    -- took the older Handles over, so the cycle closes as the call ends,
    -- and that wait raises it on the run's next turn.
    local first = orch:newest("search", "search 1", function(job) return job:await(stagehand.future()) end)
    local second = orch:newest("search", "search 2", function(job)
      return job:await(stagehand.all { first, stagehand.future() })
    end)
    orch:step()
    assert.matches("search 2", is_cycle(second))
    assert.equal("failed", first:state())
    -- and through another job awaiting the older Handle
    local level1 = orch:newest("level", "level 1", function(job) return job:await(stagehand.future()) end)
    local screen = orch:run("screen", function(job) return job:await(level1) end)
    local level2 = orch:newest("level", "level 2", function(job) return job:await(screen) end)
    orch:step()
    assert.matches("level 2", is_cycle(level2))
    orch:step()
    assert.same({ "failed", "failed" }, { level1:state(), screen:state() })
    assert.all_ended(orch)
  end)

  it("raises the cycle a hand-over closed at the newer run's wait, where its work may catch it", function()
    local cleaned = 0
    local first = orch:newest("search", "search 1", function(job) return job:await(stagehand.future()) end)
    local f = stagehand.future()
    local second = orch:newest("search", "search 2", function(job)
      local ok, err = job:pcall(job.await, job, first) -- (the older search's results, if they come first)
      if not ok then
        assert(stagehand.is_error(err, "cycle"), tostring(err))
        cleaned = cleaned + 1
      end
      return "fresh " .. job:await(f)
    end)
    orch:step()
    assert.equal(1, cleaned)
    assert.equal("running", second:state())
    f:resolve("results")
    orch:step()
    assert.same({ "done", "fresh results" }, { second:result() })
    assert.same({ "done", "fresh results" }, { first:result() })
    assert.no_leaks(orch)
  end)

  it("fails a newer run whose wait leads to an older Handle, when the older run keeps another caller", function()
    -- The older keyed run lives on for its other caller, so whoever awaited
    -- its newest call's Handle stays filed under it, though that Handle now
    -- ends with the newer run: a cycle through it is still found, whether it
    -- closed as the newer call took over or at a later await.
    local f = stagehand.future()
    local level1 = orch:newest("level", "level 1", function(job) return job:await(f) end, { key = "lvl" })
    local again = orch:run("level 1 again", function() end, { key = "lvl" })
    local screen = orch:run("screen", function(job) return job:await(level1) end)
    local level2 = orch:newest("level", "level 2", function(job) return job:await(screen) end)
    orch:step()
    assert.matches("level 2", is_cycle(level2))
    local g = stagehand.future()
    local art1 = orch:newest("art", "art 1", function(job) return job:await(f) end, { key = "art" })
    orch:run("art 1 again", function() end, { key = "art" })
    local gallery = orch:run("gallery", function(job) return job:await(art1) end)
    local art2 = orch:newest("art", "art 2", function(job)
      job:await(g)
      return job:await(gallery) -- (the cycle closes here, after the call)
    end)
    g:resolve()
    orch:step()
    assert.matches("art 2", is_cycle(art2))
    f:resolve("loaded")
    orch:step()
    assert.equal("done", again:state())
    assert.all_ended(orch)
  end)

  it("leaves keyed work the older run shared with another caller running", function()
    local f, g = stagehand.future(), stagehand.future()
    local older = orch:newest("portrait", "portrait knight", function(job) return job:await(f) end,
      { key = "portrait:knight" })
    local other = orch:when("portrait:knight")
    orch:newest("portrait", "portrait queen", function(job) return job:await(g) end)
    assert.is_true(orch:running("portrait:knight"))
    f:resolve("knight")
    g:resolve("queen")
    orch:step()
    assert.same({ "done", "knight" }, { other:result() })
    assert.same({ "done", "queen" }, { older:result() })
  end)

  it("leaves an older Handle the game cancelled cancelled, though its keyed run goes on for another caller", function()
    local f, g = stagehand.future(), stagehand.future()
    local older = orch:newest("portrait", "portrait knight", function(job) return job:await(f) end,
      { key = "portrait:knight" })
    local other = orch:when("portrait:knight")
    older:cancel("the player looked away")
    local newer = orch:newest("portrait", "portrait queen", function(job) return job:await(g) end)
    assert.equal("cancelled", older:state()) -- (not taken back into the chain)
    f:resolve("knight")
    g:resolve("queen")
    orch:step()
    local st, err = older:result()
    assert.equal("cancelled", st)
    assert.matches("the player looked away", tostring(err), 1, true)
    assert.same({ "done", "knight" }, { other:result() })
    assert.same({ "done", "queen" }, { newer:result() })
    assert.no_leaks(orch)
  end)

  it("leaves an older Handle whose run ended before the newer call with its own end", function()
    local first = orch:newest("x", "first", function() return 1 end)
    local second = orch:newest("x", "second", function() return 2 end)
    assert.same({ "done", 1 }, { first:result() })
    assert.same({ "done", 2 }, { second:result() })
  end)

  it("settles an older Handle at once when the newer ends inside its own call", function()
    local older = orch:newest("x", "slow", function(job) return job:await(stagehand.future()) end)
    orch:newest("x", "instant", function() return "now" end)
    assert.same({ "done", "now" }, { older:result() })
  end)

  it("lets an older caller withdraw on its own signal without ending the newer", function()
    local ctl = stagehand.controller()
    local f = stagehand.future()
    local older = orch:newest("x", "a", function(job) return job:await(stagehand.future()) end,
      { signal = ctl.signal })
    local newer = orch:newest("x", "b", function(job) return job:await(f) end)
    ctl:abort("player left")
    assert.equal("cancelled", older:state())
    assert.equal("running", newer:state())
    f:resolve("b")
    orch:step()
    assert.same({ "done", "b" }, { newer:result() })
  end)

  it("gives the newest run the highest rank of every call still waiting, and takes a withdrawn one's away", function()
    local job_ref
    local f = stagehand.future()
    local ctl = stagehand.controller()
    orch:newest("portrait", "portrait 1", function(job) job:await(stagehand.future()) end,
      { priority = "visible", signal = ctl.signal })
    orch:newest("portrait", "portrait 2", function(job) job:await(stagehand.future()) end, { priority = "scene" })
    orch:newest("portrait", "portrait 3", function(job)
      job_ref = job
      job:await(f)
      return "3"
    end, { priority = "background" })
    assert.equal("visible", job_ref:priority()) -- (the first call's rank reaches the newest run)
    ctl:abort("closed")
    assert.equal("scene", job_ref:priority())
    f:resolve()
    orch:step()
  end)

  it("raises the newer run for a job awaiting an older call's Handle, though the older run lives on", function()
    -- The older keyed run keeps another caller, so it runs on; the loading
    -- screen awaiting the older call's Handle now waits for the newer run,
    -- and its rank goes with it.
    local f = stagehand.future()
    local level1 = orch:newest("level", "level 1", function(job) return job:await(f) end,
      { key = "lvl", priority = "background" })
    orch:run("level 1 again", function(job) return job:await(f) end, { key = "lvl", priority = "background" })
    local screen = orch:run("screen", function(job)
      return job:await(stagehand.all { level1, stagehand.future() })
    end, { priority = "visible" })
    orch:newest("level", "level 2", function(job) return job:await(f) end, { priority = "background" })
    assert.same({ ["level 1"] = "background", ["level 2"] = "visible", screen = "visible" }, ranks_of(orch))
    screen:cancel("menu")
    assert.same({ ["level 1"] = "background", ["level 2"] = "background" }, ranks_of(orch))
    f:resolve()
    orch:step()
    assert.all_ended(orch)
  end)

  it("raises the newer run for every job awaiting an older call's Handle, not only the first", function()
    local f = stagehand.future()
    local level1 = orch:newest("level", "level 1", function(job) return job:await(f) end,
      { key = "lvl", priority = "background" })
    orch:run("level 1 again", function(job) return job:await(f) end, { key = "lvl", priority = "background" })
    local map = orch:run("map", function(job) return job:await(level1) end, { priority = "scene" })
    local screen = orch:run("screen", function(job) return job:await(level1) end, { priority = "visible" })
    local hud = orch:run("hud", function(job) return job:await(level1) end, { priority = "background" })
    orch:newest("level", "level 2", function(job) return job:await(f) end, { priority = "background" })
    assert.same({ ["level 1"] = "background", ["level 2"] = "visible", map = "scene", screen = "visible",
      hud = "background" }, ranks_of(orch))
    screen:cancel("menu")
    assert.equal("scene", ranks_of(orch)["level 2"])
    map:cancel("menu")
    hud:cancel("menu")
    f:resolve()
    orch:step()
    assert.all_ended(orch)
  end)

  it("ends the newest run once every call under the name withdrew", function()
    local hs = {}
    for i = 1, 3 do hs[i] = orch:newest("x", "x " .. i, function(job) return job:await(stagehand.future()) end) end
    for i = 1, 3 do assert.is_true(hs[i]:cancel("gone")) end
    for i = 1, 3 do assert.equal("cancelled", hs[i]:state()) end
    assert.equal(0, orch.nrunning)
    orch:step() -- (the cancelled runs' last resumes: their cleanup)
    assert.no_leaks(orch)
  end)

  it("wakes a job awaiting a Handle two calls old, and starts a new chain once the newest ended", function()
    local f = stagehand.future()
    local first = orch:newest("level", "level 1", function(job) return job:await(stagehand.future()) end)
    local screen = orch:run("screen", function(job) return job:await(first) end)
    orch:step()
    orch:newest("level", "level 2", function(job) return job:await(stagehand.future()) end)
    orch:newest("level", "level 3", function(job) return job:await(f) end)
    f:resolve("three")
    orch:step()
    assert.same({ "done", "three" }, { screen:result() })
    local again = orch:newest("level", "level 4", function() return "four" end)
    assert.same({ "done", "four" }, { again:result() })
    assert.same({ "done", "three" }, { first:result() })
  end)

  -- Regression: each newer call moved every older Handle onto the newer
  -- run, so n calls within a frame took O(n^2) (10k: 12 s on LuaJIT).
  it("keeps the newest run's callers to its own and one a priority source, however many calls came", function()
    local last
    for i = 1, 2000 do
      last = orch:newest("search", "search " .. i, function(job) return job:await(stagehand.future()) end,
        { priority = i % 2 == 0 and "visible" or "background" })
    end
    local job = last[1]
    local callers = 0
    for i = require("stagehand.engine.fields").H, #job do
      if job[i] then callers = callers + 1 end
    end
    assert.equal(3, callers) -- (its own, and a carrier for each of the two ranks the older calls had)
    assert.equal(1, orch.nrunning)
    last:cancel()
  end)

  it("names bad arguments", function()
    local function bad(what, ...)
      local ok, err = pcall(orch.newest, orch, ...)
      assert.is_false(ok)
      assert.matches(what, err, 1, true)
    end
    bad("bad argument 'name' to newest: expected a non-empty string, got 5", 5, "l", function() end)
    bad("bad argument 'name' to newest", "", "l", function() end)
    bad("bad argument 'label' to newest", "n", nil, function() end)
    bad("(a name, then a label: orch:newest(name, label, work, opts))", "n", function() end)
    bad("bad argument 'work' to newest", "n", "l", 3)
    bad("bad argument 'opts.colour' to newest", "n", "l", function() end, { colour = 1 })
    assert.equal(0, orch.nrunning)
  end)
end)
