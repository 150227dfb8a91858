-- A game's clock is input too: a reading that is not a finite number of
-- milliseconds raises a clear error at the call that read it, changes
-- nothing, and the next call with a good reading carries on.
local stagehand = require "stagehand"
local T = require "stagehand.testing"

-- A manual orchestrator on a clock the spec can break: `t.v` is what it
-- reads, or `t.once` for one reading after `t.arm` is set.
local function breakable()
  local t = { v = 0 }
  local function clock()
    if t.arm then
      t.arm = false
      return t.once
    end
    return t.v
  end
  local orch = stagehand.new { driver = "manual", clock = clock, log = function() end }
  return orch, t
end

local BAD = {
  { "nil", nil, "returned nil" },
  { "NaN", 0 / 0, "returned nan;" },
  { "infinity", math.huge, "returned inf" },
  { "a string", "12", 'returned "12"' },
}

local SAYS = "it must return a finite number of milliseconds"

describe("a clock that cannot tell the time", function()
  for _, case in ipairs(BAD) do
    local what, value, said = case[1], case[2], case[3]

    it("(" .. what .. ") fails the step that read it, and the next step runs as usual", function()
      local orch, t = breakable()
      local f = stagehand.future()
      local h = orch:run("loader", function(job)
        job:await(f)
        return "loaded"
      end)
      f:resolve()
      t.v = value
      local ok, err = pcall(orch.step, orch)
      assert.is_false(ok)
      assert.matches(said, err)
      assert.truthy(err:find(SAYS, 1, true))
      assert.equal("running", h:state()) -- the step ran nothing
      t.v = 10
      assert.equal(0, orch:step()) -- not "step is already running"
      assert.same({ "done", "loaded" }, { h:result() })
    end)

    it("(" .. what .. ") fails a run before anything is made", function()
      local orch, t = breakable()
      t.v = value
      local ran = false
      local ok, err = pcall(orch.run, orch, "loader", function() ran = true end, { key = "k" })
      assert.is_false(ok)
      assert.truthy(err:find(SAYS, 1, true))
      assert.is_false(ran)
      assert.is_falsy(orch:running("k"))
      assert.same({}, orch:report())
      t.v = 10
      assert.equal(0, orch:step())
      assert.no_leaks(orch)
      local h = orch:run("loader", function() return 1 end, { key = "k" })
      assert.same({ "done", 1 }, { h:result() })
    end)

    it("(" .. what .. ") fails a when, a barrier and a when_idle before anything is made", function()
      local orch, t = breakable()
      t.v = value
      for _, call in ipairs {
        function() return orch:when("k") end,
        function() return orch:barrier("party", { "a" }) end,
        function() return orch:when_idle() end,
      } do
        local ok, err = pcall(call)
        assert.is_false(ok)
        assert.truthy(err:find(SAYS, 1, true))
      end
      assert.same({}, orch:report())
      t.v = 10
      assert.equal(0, orch:step())
      assert.no_leaks(orch)
    end)
  end

  it("fails a barrier's arrival without counting it", function()
    local orch, t = breakable()
    local b = orch:barrier("party", { "knight", "queen" })
    t.v = nil
    assert.has_error(function() b:arrive("knight") end)
    t.v = 10
    assert.equal(0, b:arrived())
    assert.same({ "knight", "queen" }, b:missing())
    b:arrive("knight")
    b:arrive("queen")
    assert.equal("done", b.settled:state())
  end)

  it("never fails the game settling a future, freeing a slot or cancelling a caller between steps", function()
    -- (what they end counts from the last good reading; the next step reads again)
    local orch, t = breakable()
    orch:pool("p", 1)
    local download, parts, release = stagehand.future(), { stagehand.future(), stagehand.future() }, nil
    local holder = orch:run("holder", function(job)
      release = job:slot("p")
      job:await(stagehand.future())
    end)
    local waiter = orch:run("waiter", function(job) job:slot("p") end)
    local loader = orch:run("loader", function(job) return job:await(download) end)
    local gather = orch:run("gather", function(job) return #job:await(stagehand.all(parts)) end)
    for _, case in ipairs(BAD) do
      t.v = case[2]
      assert.has_no_error(function()
        if case[1] == "nil" then download:resolve("atlas") end
        if case[1] == "NaN" then parts[1]:resolve(true) end
        if case[1] == "infinity" then release() end
        if case[1] == "a string" then holder:cancel("scene left") end
      end, case[1])
    end
    t.v = 10
    orch:step()
    assert.same({ "done", "atlas" }, { loader:result() })
    assert.equal("done", waiter:state())
    assert.equal("cancelled", holder:state())
    parts[2]:resolve(true)
    orch:step()
    assert.same({ "done", 2 }, { gather:result() })
    assert.no_leaks(orch)
  end)

  it("fails job:progress, job:slice and job:sleep inside the job, which then fails", function()
    for _, wait in ipairs { "progress", "slice", "sleep" } do
      local orch, t = breakable()
      local f = stagehand.future()
      local h = orch:run("worker", function(job)
        job:await(f)
        t.v = 10
        t.arm = true -- (the next reading is nil, the one after it 10)
        if wait == "sleep" then job:sleep(5) else job[wait](job) end
      end)
      f:resolve()
      orch:step()
      local st, err = h:result()
      assert.equal("failed", st, wait)
      assert.truthy(tostring(err.cause):find(SAYS, 1, true), wait)
      assert.no_leaks(orch)
    end
  end)

  it("fails next_wake, dump, set_visible and orch:wait with the same words", function()
    local orch, t = breakable()
    local h = orch:run("sleeper", function(job) job:sleep(100) end)
    t.v = 0 / 0
    for _, call in ipairs {
      function() return orch:next_wake() end,
      function() return orch:dump() end,
      function() return orch:set_visible(false) end,
      function() return orch:wait(h, 10) end,
    } do
      local ok, err = pcall(call)
      assert.is_false(ok)
      assert.truthy(err:find(SAYS, 1, true))
    end
    t.v = 100
    assert.equal(0, orch:step())
    assert.equal("done", h:state())
  end)

  it("is named at stagehand.new when its first reading is bad or it raises", function()
    for _, clock in ipairs {
      function() return nil end,
      function() return 0 / 0 end,
      function() return "now" end,
      function() error("no clock here") end,
    } do
      local ok, err = pcall(stagehand.new, { driver = "manual", clock = clock })
      assert.is_false(ok)
      assert.matches("bad option 'clock' to stagehand.new", err)
    end
  end)
end)

describe("the fake clock", function()
  it("refuses a start, an advance or a settle that is not finite", function()
    assert.has_error(function() T.clock(math.huge) end,
      "bad argument 'start_ms' to clock: expected a finite number, got inf")
    local c = T.clock()
    for _, ms in ipairs { math.huge, 0 / 0, -1 } do
      assert.has_error(function() c:advance(ms) end)
    end
    assert.equal(0, c.now)
    local orch = T.new()
    orch:run("sleeper", function(job) job:sleep(1e9) end)
    assert.has_error(function() T.settle(orch, math.huge) end,
      "bad argument 'ms' to settle: expected a finite number >= 0, got inf")
    assert.has_error(function() T.settle(orch, 10, math.huge) end,
      "bad argument 'step_ms' to settle: expected a finite number > 0, got inf")
    assert.equal(1, orch:step())
  end)
end)

describe("the testing helpers", function()
  it("name a missing orchestrator or bad options instead of failing inside", function()
    local missing -- luacheck: ignore 221 -- (a typo in a spec: a variable never set)
    for _, case in ipairs {
      { function() T.settle(missing, 10) end, "bad argument 'orch' to settle: expected an orchestrator, got nil" },
      { function() T.leaks(missing) end, "bad argument 'orch' to leaks: expected an orchestrator, got nil" },
      { function() T.core_faults(missing) end, "bad argument 'orch' to core_faults: expected an orchestrator, got nil" },
      { function() assert.no_leaks(missing) end, "bad argument 'orch' to assert.no_leaks: expected an orchestrator" },
      { function() assert.all_ended(missing) end, "bad argument 'orch' to assert.all_ended: expected an orchestrator" },
      { function() T.new(5) end, "bad argument 'opts' to new: expected a table of stagehand.new's options, got 5" },
    } do
      local ok, err = pcall(case[1])
      assert.is_false(ok)
      assert.matches(case[2], tostring(err), 1, true)
    end
  end)
end)

describe("the testing helpers, on a scene not yet over", function()
  -- Each scene leaves something behind that the assertions must name: a
  -- spec that proves loaders end is only as good as these failing.
  local function leaks_of(build)
    local orch = T.new { pools = { p = 1 }, log = function() end }
    orch:budget("b", { ops = 1 })
    build(orch)
    return table.concat(T.leaks(orch), "; "), orch
  end

  it("name a running job, its stall clock and its sleep", function()
    local found = leaks_of(function(orch) orch:run("nap", function(job) job:sleep(1000) end) end)
    assert.matches("1 job(s) running", found, 1, true)
    assert.matches("1 stall clock(s) running", found, 1, true)
    assert.matches("1 sleep timer(s) set", found, 1, true)
    assert.matches("1 core id(s) still taken", found, 1, true)
  end)

  it("name a slot in use, a pool waiter, a permit waiter and a keyed run", function()
    local found = leaks_of(function(orch)
      local f = stagehand.future()
      orch:run("holder", function(job)
        job:slot("p")
        job:await(f)
      end, { key = "atlas" })
      orch:run("waiter", function(job) job:slot("p") end)
      orch:step()
      orch:run("finalize 1", function(job) job:permit("b") end)
      orch:run("finalize 2", function(job) job:permit("b") end)
      orch:step() -- (the first permit of this step goes; the second waits)
    end)
    assert.matches("1 slot(s) of pool 'p' in use", found, 1, true)
    assert.matches("1 waiter(s) in pool 'p'", found, 1, true)
    assert.matches("waiter(s) for budget 'b'", found, 1, true)
    assert.matches("keyed run(s) still registered", found, 1, true)
  end)

  it("list what they find in the same order on every run: by name", function()
    local names = { "zeta", "alpha", "mu", "beta", "omega", "kappa", "delta", "sigma" }
    local pools = {}
    for _, name in ipairs(names) do pools[name] = 0 end
    local orch = T.new { pools = pools, log = function() end }
    for _, name in ipairs(names) do orch:run("wants " .. name, function(job) job:slot(name) end) end
    local waiting = {}
    for _, line in ipairs(T.leaks(orch)) do
      local pool = line:match("^1 waiter%(s%) in pool '(%a+)'$")
      if pool then waiting[#waiting + 1] = pool end
    end
    table.sort(names)
    assert.same(names, waiting)
  end)

  it("name a core structure that fails its own check", function()
    -- (The core cannot be broken from Lua, which is the point: the checks
    -- are answered "inconsistent" for this one call instead.)
    local B = require "stagehand.core.backend"
    local saved = {}
    for _, name in ipairs { "clock_check", "timers_check", "pool_check", "ids_check" } do
      saved[name], B[name] = B[name], function() return -3 end
    end
    local ok, found = pcall(leaks_of, function() end)
    local direct = #T.core_faults((T.new { pools = { p = 1 } }))
    for name, fn in pairs(saved) do B[name] = fn end
    assert.equal(3 + 1, direct) -- (ids, clocks, timers, and its one pool)
    assert.is_true(ok, found)
    assert.matches("the core's ids are inconsistent", found, 1, true)
    assert.matches("the core's stall clocks are inconsistent", found, 1, true)
    assert.matches("the core's sleep timers are inconsistent", found, 1, true)
    assert.matches("the core's pool 'p' is inconsistent", found, 1, true)
    assert.matches("the core's queue of budget 'b' is inconsistent", found, 1, true)
    assert.equal("", leaks_of(function() end))
    assert.same({}, T.core_faults((T.new())))
  end)

  it("name a pending when and a queued continuation", function()
    local found = leaks_of(function(orch)
      orch:when("never started")
      local f = stagehand.future()
      orch:run("woken", function(job) job:await(f) end)
      f:resolve() -- (its continuation waits for a step)
    end)
    assert.matches("when waiter(s) still pending", found, 1, true)
    assert.matches("1 continuation(s) queued", found, 1, true)
  end)

  it("fail assert.no_leaks and assert.all_ended with what is left, and pass once it has ended", function()
    local _, orch = leaks_of(function(orch) orch:run("nap", function(job) job:sleep(1000) end) end)
    local ok, err = pcall(assert.no_leaks, orch)
    assert.is_false(ok)
    assert.matches("1 job(s) running", tostring(err), 1, true)
    assert.matches("nap", tostring(err), 1, true) -- (the dump follows)
    ok, err = pcall(assert.all_ended, orch)
    assert.is_false(ok)
    assert.matches("nap", tostring(err), 1, true)
    assert.equal(0, T.settle(orch, 2000))
    assert.all_ended(orch)
    assert.no_leaks(orch)
  end)
end)

describe("job:sleep(math.huge)", function()
  it("never wakes: the job's stall clock ends it", function()
    local orch = T.new { stall_ms = 1000, log = function() end }
    local h = orch:run("forever", function(job) job:sleep(math.huge) end)
    assert.equal(0, T.settle(orch, 5000))
    assert.equal("stalled", h:state())
    assert.no_leaks(orch)
  end)
end)
