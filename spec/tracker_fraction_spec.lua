-- load:fraction and load:expect: a bar for a loading screen that never moves
-- back, however tasks are found, refined, finished, failed or cancelled.
local stagehand = require "stagehand"
local T = require "stagehand.testing"

describe("load:fraction", function()
  local orch, clock, load
  before_each(function()
    orch, clock = T.new { stall_ms = 1000, log = function() end }
    load = stagehand.tracker(orch)
  end)

  -- Reads the bar and checks it did not go back since the last read.
  local function reader(phase)
    local last = 0
    return function()
      local f = load:fraction(phase)
      assert.is_true(f >= last, ("the bar went back from %s to %s"):format(last, f))
      assert.is_true(f >= 0 and f <= 1)
      last = f
      return f
    end
  end

  it("is 0 before anything starts, and counts each task as one part", function()
    assert.equal(0, load:fraction())
    local a = load:task("fetch", { total = 4 })
    local b = load:task("fetch")
    assert.equal(0, load:fraction())
    a:advance(2)
    assert.equal(0.25, load:fraction("fetch"))
    b:finish()
    assert.equal(0.75, load:fraction())
    a:finish()
    assert.equal(1, load:fraction())
    assert.equal(1, load:fraction("fetch"))
  end)

  it("holds where it is when tasks are discovered, and moves on once the work catches up", function()
    local bar = reader()
    local a, b = load:task("fetch"), load:task("fetch")
    a:finish()
    assert.equal(0.5, bar())
    -- Two more found: the honest share falls to a quarter; the bar holds.
    local c, d = load:task("decode"), load:task("decode")
    assert.equal(0.5, bar())
    b:finish()
    c:finish()
    assert.equal(0.75, bar())
    d:finish()
    assert.equal(1, bar())
  end)

  it("never goes back when a task first counted as one unit refines its total", function()
    local bar = reader()
    local fetch = load:task("fetch")
    local decoded = {}
    local h = orch:run("decode hero.png", function(job)
      for row = 1, 4 do
        job:progress(row, 512)
        decoded[#decoded + 1] = row
        job:sleep(10)
      end
      job:progress(1, 1024) -- (the total was wrong: twice the rows)
      job:sleep(10)
    end, { phase = "decode" })
    for _ = 1, 8 do
      orch:step()
      bar()
      clock:advance(10)
    end
    fetch:finish()
    T.settle(orch, 1000, 10)
    assert.ended(h)
    assert.equal(4, #decoded)
    assert.equal(1, bar())
  end)

  it("counts failed, cancelled and stalled tasks as ended parts", function()
    local bar = reader()
    local ctl = stagehand.controller()
    local a = load:task("fetch")
    local b = load:task("fetch")
    orch:run("cancelled", function(job) job:await(stagehand.future()) end, { phase = "fetch", signal = ctl.signal })
    orch:run("stalls", function(job) job:await(stagehand.future()) end, { phase = "fetch", stall_ms = 50 })
    orch:step()
    assert.equal(0, bar())
    a:fail("404")
    assert.equal(0.25, bar())
    ctl:abort("left the scene")
    orch:step()
    assert.equal(0.5, bar())
    T.settle(orch, 2000, 100) -- (stalls are checked every check_ms, 1000 by default)
    assert.equal(0.75, bar())
    assert.same({ running = 1, done = 0, failed = 1, cancelled = 1, stalled = 1 }, load:counts("fetch"))
    b:finish()
    assert.equal(1, bar())
  end)

  it("is in proportion from the first frame with load:expect, and not finished between phases", function()
    load:expect("fetch", 4)
    load:expect("decode", 4)
    local bar = reader()
    assert.equal(0, bar())
    local fetches = {}
    for i = 1, 4 do fetches[i] = load:task("fetch", { label = "tex" .. i }) end
    for i = 1, 4 do
      fetches[i]:finish()
      assert.equal(i / 8, bar())
    end
    -- No task runs now, but the decodes are still to come: not finished.
    assert.equal(0.5, bar())
    assert.equal(1, load:fraction("fetch"))
    assert.equal(0, load:fraction("decode"))
    local decodes = {}
    for i = 1, 4 do decodes[i] = load:task("decode") end
    for i = 1, 3 do decodes[i]:finish() end
    assert.equal(7 / 8, bar())
    decodes[4]:fail("corrupt")
    assert.equal(1, bar())
  end)

  it("counts more tasks than expected, and a later expect replaces the first", function()
    load:expect("fetch", 2)
    local bar = reader()
    local ts = {}
    for i = 1, 4 do ts[i] = load:task("fetch") end
    ts[1]:finish()
    assert.equal(0.25, bar())
    load:expect("fetch", 8)
    for i = 2, 4 do ts[i]:finish() end
    assert.equal(0.5, bar())
    for _ = 5, 8 do load:task("fetch"):finish() end
    assert.equal(1, bar())
  end)

  it("keeps each phase's bar apart from the whole load's", function()
    local fetch_bar, decode_bar, all_bar = reader("fetch"), reader("decode"), reader()
    local f1, f2 = load:task("fetch"), load:task("fetch")
    local d1 = load:task("decode", { total = 10 })
    f1:finish()
    d1:advance(5)
    assert.equal(0.5, fetch_bar())
    assert.equal(0.5, decode_bar())
    assert.equal(0.5, all_bar())
    f2:finish()
    assert.equal(1, fetch_bar())
    assert.equal(0.5, decode_bar())
    d1:finish()
    assert.equal(1, decode_bar())
    assert.equal(1, all_bar())
  end)

  it("rejects a bad phase or count, naming the argument", function()
    assert.has_error(function() load:fraction(3) end,
      "bad argument 'phase' to load:fraction: expected a non-empty string, got 3")
    assert.error_matches(function() load:expect("fetch", -1) end, "'n' to load:expect: expected a whole number >= 0")
    assert.error_matches(function() load:expect("fetch", 1.5) end, "'n' to load:expect")
    assert.error_matches(function() load:expect("", 1) end, "'phase' to load:expect")
    assert.error_matches(function() load.fraction({}) end, "load:fraction")
    assert.equal(0, load:fraction())
  end)
end)
