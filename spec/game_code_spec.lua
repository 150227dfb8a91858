-- What game code meets first: get-or-load keys, promise helpers, timeouts,
-- progress fractions, stall times that never run out, step counts that
-- include cleanups, and what the log and errors say to the game.
local stagehand = require "stagehand"
local T = require "stagehand.testing"

local function quiet(opts)
  opts = opts or {}
  opts.log = opts.log or function() end
  return T.new(opts)
end

local function logger()
  local lines = {}
  return lines, function(m) lines[#lines + 1] = m end
end

describe("get-or-load", function()
  it("runs the work once across three callers and serves the later ones from memory", function()
    local orch = quiet()
    local loads = 0
    local function load(job)
      loads = loads + 1
      job:sleep(10)
      return "castle.png", 512
    end
    local a = orch:run("Loading the castle", load, { key = "castle", reuse = true })
    local b = orch:run("Loading the castle", load, { key = "castle", reuse = true })
    T.settle(orch, 100, 5)
    local c = orch:run("Loading the castle", load, { key = "castle", reuse = true })
    assert.equal(1, loads)
    assert.equal("done", c:state()) -- settled at once, without a step
    assert.same({ "done", "castle.png", 512 }, { a:result() })
    assert.same({ "done", "castle.png", 512 }, { b:result() })
    assert.same({ "done", "castle.png", 512 }, { c:result() })
    assert.no_leaks(orch)
  end)

  it("runs again after a remembered failure, stall or forget", function()
    local orch = quiet { stall_ms = 50, check_ms = 10 }
    local loads, fail, hang = 0, true, false
    local function load(job)
      loads = loads + 1
      if hang then
        hang = false
        local never = stagehand.future()
        job:await(never)
      end
      job:sleep(1)
      if fail then
        fail = false
        error("disk busy")
      end
      return "ok"
    end
    local opts = { key = "tile", reuse = true }
    local h = orch:run("Loading a tile", load, opts)
    T.settle(orch, 100, 1)
    assert.equal("failed", h:state())
    h = orch:run("Loading a tile", load, opts)
    T.settle(orch, 100, 1)
    assert.equal("done", h:state())
    assert.equal(2, loads)
    orch:forget("tile")
    hang = true
    h = orch:run("Loading a tile", load, opts)
    T.settle(orch, 200, 10)
    assert.equal("stalled", h:state())
    h = orch:run("Loading a tile", load, opts)
    T.settle(orch, 100, 1)
    assert.equal("done", h:state())
    assert.equal(4, loads)
    assert.equal("done", orch:run("Loading a tile", load, opts):state())
    assert.equal(4, loads)
  end)

  it("without reuse starts a new run even when an outcome is remembered", function()
    local orch = quiet()
    local loads = 0
    local function load() loads = loads + 1 return loads end
    orch:run("a", load, { key = "k" })
    local h = orch:run("a", load, { key = "k" })
    assert.same({ "done", 2 }, { h:result() })
  end)

  it("remembers nothing with remember = 0", function()
    local orch = quiet { remember = 0 }
    local loads = 0
    local function load() loads = loads + 1 return loads end
    orch:run("a", load, { key = "k", reuse = true })
    local h = orch:run("a", load, { key = "k", reuse = true })
    assert.same({ "done", 2 }, { h:result() })
    local w = orch:when("k")
    assert.equal("running", w:state()) -- nothing remembered: it waits for a run
    w:cancel()
    assert.no_leaks(orch)
  end)

  it("rejects a reuse that is not a boolean, or one without a key, naming it", function()
    local orch = quiet()
    local ok, err = pcall(orch.run, orch, "a", function() end, { key = "k", reuse = "yes" })
    assert.is_false(ok)
    assert.matches("bad argument 'opts.reuse' to run: expected a boolean", err, 1, true)
    ok, err = pcall(orch.run, orch, "a", function() end, { reuse = true })
    assert.is_false(ok)
    assert.matches("'opts.reuse'", err, 1, true)
    assert.matches("needs a key", err, 1, true)
    ok, err = pcall(orch.when, orch, "k", nil, { reuse = true })
    assert.is_false(ok)
    assert.matches("'opts.reuse' to when", err, 1, true)
    assert.equal(0, orch:step())
    assert.no_leaks(orch)
  end)
end)

describe(".any", function()
  it("ends with the first part done, after parts that failed", function()
    local orch = quiet()
    local mirror1, mirror2, mirror3 = stagehand.future("m1"), stagehand.future("m2"), stagehand.future("m3")
    local h = orch:run("Fetching from any mirror", function(job)
      return job:await(stagehand.any { mirror1, mirror2, mirror3 })
    end)
    mirror1:reject("404")
    orch:step()
    assert.equal("running", h:state())
    mirror3:resolve("bytes", 3)
    mirror2:resolve("late")
    orch:step()
    assert.same({ "done", "bytes", 3 }, { h:result() })
  end)

  it("fails only when every part failed, with an Error listing each part's", function()
    local orch = quiet()
    local a, b = stagehand.future("a"), stagehand.future("b")
    local h = orch:run("Fetching", function(job) return job:await(stagehand.any { a, b }) end)
    b:reject("timeout on b")
    a:reject("404 on a")
    orch:step()
    local st, err = h:result()
    assert.equal("failed", st)
    local e = err.cause
    assert.is_true(stagehand.is_error(e, "failed"))
    assert.equal(2, #e.errors)
    assert.matches("404 on a", tostring(e.errors[1]), 1, true)
    assert.matches("timeout on b", tostring(e.errors[2]), 1, true)
    assert.matches("no part ended done", e.message, 1, true)
  end)

  it("over parts already ended decides in list order", function()
    local a, b = stagehand.future(), stagehand.future()
    a:reject("first")
    b:resolve("second")
    assert.same({ "done", "second" }, { stagehand.any({ a, b }):result() })
    assert.equal("failed", stagehand.any({}):state())
  end)

  it("counts a part that settles as progress for the job awaiting it", function()
    local orch = quiet { stall_ms = 100 }
    local parts = {}
    for i = 1, 5 do parts[i] = stagehand.future() end
    local h = orch:run("waits on any", function(job) return job:await(stagehand.any(parts)) end)
    for i = 1, 4 do
      T.settle(orch, 80, 10)
      parts[i]:reject("no " .. i)
    end
    T.settle(orch, 80, 10)
    assert.equal("running", h:state()) -- 320 ms in, each failure was progress
    parts[5]:resolve("yes")
    T.settle(orch, 10, 1)
    assert.same({ "done", "yes" }, { h:result() })
  end)
end)

describe(".race", function()
  it("ends done as the first part to end done", function()
    local orch = quiet()
    local fast, slow = stagehand.future(), stagehand.future()
    local h = orch:run("race", function(job) return job:await(stagehand.race { slow, fast }) end)
    fast:resolve("fast")
    slow:reject("slow")
    orch:step()
    assert.same({ "done", "fast" }, { h:result() })
  end)

  it("ends failed as the first part to end failed", function()
    local orch = quiet()
    local fast, slow = stagehand.future(), stagehand.future()
    local h = orch:run("race", function(job) return job:await(stagehand.race { slow, fast }) end)
    fast:reject("broken")
    slow:resolve("fine")
    orch:step()
    local st, err = h:result()
    assert.equal("failed", st)
    assert.equal("broken", err.cause)
  end)

  it("over parts already ended takes the first in list order", function()
    local a, b = stagehand.future(), stagehand.future()
    a:reject("a")
    b:resolve("b")
    assert.equal("failed", stagehand.race({ a, b }):state())
    assert.same({ "done", "b" }, { stagehand.race({ b, a }):result() })
  end)
end)

describe("combinators' bad input", function()
  for _, name in ipairs { "all", "all_settled", "any", "race" } do
    it(name .. " rejects what is not a list of awaitables, naming it", function()
      local f = stagehand.future()
      local cases = {
        { 42, "got number" },
        { { f, x = 1 }, "key \"x\"" },
        { { f, 7 }, "item 2 is not awaitable" },
        { f, "wrap it in a list" },
      }
      for _, c in ipairs(cases) do
        local ok, err = pcall(stagehand[name], c[1])
        assert.is_false(ok)
        assert.matches("bad argument 'list' to " .. name, err, 1, true)
        assert.matches(c[2], err, 1, true)
      end
    end)
  end

  it("race rejects an empty list: a race of none never ends", function()
    local ok, err = pcall(stagehand.race, {})
    assert.is_false(ok)
    assert.matches("never ends", err, 1, true)
  end)
end)

describe(":timeout", function()
  it("aborts after ms of the orchestrator's clock with a timeout Error", function()
    local orch, clock = quiet()
    local slow = stagehand.future()
    local h = orch:run("download", function(job)
      return job:await(stagehand.abortable(slow, orch:timeout(250)))
    end)
    clock:advance(200)
    orch:step()
    assert.equal("running", h:state())
    assert.equal(50, orch:next_wake())
    clock:advance(50)
    orch:step()
    local st, err = h:result()
    assert.equal("failed", st)
    assert.is_true(stagehand.is_error(err.cause, "timeout"))
    assert.matches("timed out after 250 ms", tostring(err.cause), 1, true)
  end)

  it("withdraws a run whose signal it is", function()
    local orch, clock = quiet()
    local h = orch:run("slow", function(job) job:sleep(1000) end, { signal = orch:timeout(100) })
    clock:advance(100)
    orch:step()
    local st, err = h:result()
    assert.equal("cancelled", st)
    assert.equal("timeout", err.reason.kind)
    assert.all_ended(orch)
  end)

  it("lets orch:wait wait on a group when no job runs", function()
    local orch = quiet()
    local never = stagehand.future()
    local st, err = orch:wait(stagehand.abortable(never, orch:timeout(30)))
    assert.equal("cancelled", st)
    assert.equal("timeout", err.kind)
  end)

  it("keeps no host awake when nothing listens to it", function()
    local orch = quiet()
    orch:timeout(100)
    assert.is_nil(orch:next_wake())
  end)

  it("keeps no host awake once what listened to it has ended", function()
    local orch = quiet()
    local f = stagehand.future()
    local a = orch:run("guarded", function(job) return job:await(f) end, { signal = orch:timeout(60000) })
    local b = orch:run("abortable", function(job) return job:await(stagehand.abortable(f, orch:timeout(30000))) end)
    assert.is_not_nil(orch:next_wake()) -- (their stall clocks run)
    f:resolve("here")
    orch:step()
    assert.same({ "done", "here" }, { a:result() })
    assert.same({ "done", "here" }, { b:result() })
    assert.equal(0, orch.nrunning)
    assert.is_nil(orch:next_wake()) -- (both timeouts are still to come, but nothing listens to them)
  end)

  it("aborts the earliest first, equal ones in the order they were made, however they were made", function()
    local orch, clock = quiet()
    local r = require("spec.seeded").rng(7)
    local made, fired = {}, {}
    for i = 1, 3000 do
      local ms = r(40) * 25 -- (many equal, made in no order of due time)
      local sig = orch:timeout(ms)
      made[i] = { ms = ms, i = i }
      sig:on_abort(function() fired[#fired + 1] = i end)
    end
    -- one made by an abort handler, already due, aborts in the same step
    local late
    orch:timeout(500):on_abort(function()
      late = orch:timeout(0)
    end)
    for step = 1, 5 do
      clock:advance(200)
      orch:step()
      for _, i in ipairs(fired) do assert.is_true(made[i].ms <= step * 200) end
    end
    assert.is_true(late.aborted)
    table.sort(made, function(a, b) return a.ms < b.ms or (a.ms == b.ms and a.i < b.i) end)
    assert.equal(#made, #fired)
    for k = 1, #made do
      if fired[k] ~= made[k].i then
        error(("timeout %d aborted %dth, where %d (due at %d ms) should have"):format(fired[k], k, made[k].i, made[k].ms))
      end
    end
  end)

  it("keeps the host awake for the earliest timeout listened to, not an earlier one nobody hears", function()
    local orch = quiet()
    for _ = 1, 50 do orch:timeout(100) end -- (nobody listens)
    local f = stagehand.future()
    orch:run("guarded", function(job) return job:await(stagehand.abortable(f, orch:timeout(700))) end,
      { stall_ms = 1e6 })
    orch:timeout(300)
    assert.equal(700, orch:next_wake())
    f:resolve()
    orch:step()
    assert.is_nil(orch:next_wake())
  end)

  it("rejects a negative or NaN time, naming it, and math.huge never aborts", function()
    local orch, clock = quiet()
    for _, bad in ipairs { -1, 0 / 0, "10" } do
      local ok, err = pcall(orch.timeout, orch, bad)
      assert.is_false(ok)
      assert.matches("bad argument 'ms' to timeout", err, 1, true)
    end
    local sig = orch:timeout(math.huge)
    clock:advance(1e12)
    orch:step()
    assert.is_false(sig.aborted)
  end)
end)

describe("job:progress(done, total)", function()
  it("records how far a job is for report and dump, and is progress", function()
    local orch, clock = quiet { stall_ms = 100 }
    local f = stagehand.future()
    orch:run("Baking the atlas", function(job)
      for i = 1, 3 do
        job:progress(i, 4)
        clock:advance(80)
      end
      job:await(f)
    end)
    orch:step()
    local r = orch:report()[1]
    assert.equal(3, r.done)
    assert.equal(4, r.total)
    assert.matches("progress 3/4", orch:dump(), 1, true)
    f:resolve()
    orch:step()
    assert.all_ended(orch)
  end)

  it("with no arguments is the plain heartbeat", function()
    local orch, clock = quiet { stall_ms = 100 }
    local h = orch:run("beats", function(job)
      for _ = 1, 5 do
        clock:advance(60)
        job:progress()
      end
      return "ok"
    end)
    assert.equal("done", h:state())
    assert.is_nil(orch:report()[1])
  end)

  it("rejects a bad pair, naming it, and changes nothing", function()
    local orch = quiet()
    local errs = {}
    orch:run("bad progress", function(job)
      job:progress(1, 2)
      for _, pair in ipairs { { -1, 2 }, { 3, 2 }, { 0 / 0, 2 }, { 1, 0 / 0 }, { 1 }, { "1", 2 }, { 1, math.huge } } do
        local ok, err = pcall(function() job:progress(pair[1], pair[2]) end)
        assert.is_false(ok)
        errs[#errs + 1] = err
      end
      job:sleep(1)
    end)
    assert.matches("bad argument 'done' to job:progress", errs[1], 1, true)
    assert.matches("bad argument 'done' to job:progress: expected a number <= total", errs[2], 1, true)
    assert.matches("'done'", errs[3], 1, true)
    assert.matches("bad argument 'total' to job:progress", errs[4], 1, true)
    assert.matches("'total'", errs[5], 1, true)
    assert.matches("'done'", errs[6], 1, true)
    assert.matches("'total'", errs[7], 1, true)
    assert.matches("game_code_spec.lua", errs[1], 1, true) -- at the caller's line
    assert.equal(1, orch:report()[1].done)
    assert.equal(2, orch:report()[1].total)
  end)
end)

describe("stall_ms = math.huge", function()
  it("never stalls a when on a key the player triggers much later", function()
    local orch, clock = quiet { stall_ms = 1000 }
    local w = orch:when("boss-door", nil, { stall_ms = math.huge })
    local j = orch:run("idle loader", function(job) job:await(stagehand.future()) end, { stall_ms = math.huge })
    for _ = 1, 60 do
      clock:advance(1000)
      orch:step()
    end
    assert.equal("running", w:state())
    assert.equal("running", j:state())
    assert.is_nil(orch:next_wake())
    assert.has_error(function() assert.all_ended(orch) end)
    orch:run("open the door", function() return "open" end, { key = "boss-door" })
    assert.same({ "done", "open" }, { w:result() })
    j:cancel()
    orch:step()
    assert.all_ended(orch)
    assert.no_leaks(orch)
  end)

  it("is accepted as the orchestrator's default, and 0, negatives and NaN still raise", function()
    assert.has_no_error(function() quiet { stall_ms = math.huge } end)
    local orch = quiet()
    for _, bad in ipairs { 0, -5, 0 / 0 } do
      local ok, err = pcall(orch.run, orch, "x", function() end, { stall_ms = bad })
      assert.is_false(ok)
      assert.matches("a number > 0 (math.huge: never stall)", err, 1, true)
    end
    assert.equal(0, orch:step())
  end)
end)

describe(":step's count", function()
  it("counts ended jobs whose cleanup is still queued, so step(0) loops leave nothing", function()
    local orch = quiet()
    local cleaned = 0
    local hs = {}
    for i = 1, 3 do
      hs[i] = orch:run("loader " .. i, function(job)
        local ok = job:pcall(job.sleep, job, 1000)
        if not ok then cleaned = cleaned + 1 end
      end)
    end
    for i = 1, 3 do hs[i]:cancel("level unloaded") end
    assert.equal(0, orch.nrunning)
    local steps, left = 0, orch:step(0)
    while left > 0 do
      assert.equal(3 - cleaned, left) -- (each count is exactly the cleanups still queued)
      steps = steps + 1
      left = orch:step(0)
    end
    assert.equal(3, cleaned)
    assert.is_true(steps >= 1)
    assert.equal(0, orch.qn)
    assert.no_leaks(orch)
  end)
end)

describe("diagnostics", function()
  it("names a stalled barrier's first eight missing keys, then how many more", function()
    local lines, log = logger()
    local orch = T.new { log = log }
    local keys = {}
    for i = 1, 11 do keys[i] = "tile" .. i end
    orch:barrier("World tiles", keys, { stall_ms = 100 })
    T.settle(orch, 2000)
    assert.equal(1, #lines)
    assert.equal("[stagehand] World tiles made no progress for 0.1 s. Missing: tile1, tile2, tile3, tile4,"
      .. " tile5, tile6, tile7, tile8 and 3 more.", lines[1])
  end)

  it("does not log a failure a loading screen polls every frame as unheard", function()
    local lines, log = logger()
    local orch = T.new { log = log }
    local f = stagehand.future()
    local h = orch:run("Loading the map", function(job)
      job:await(f)
      error("corrupt map")
    end)
    for _ = 1, 3 do
      orch:step()
      assert.equal("running", h:state())
    end
    f:resolve()
    orch:step()
    assert.equal("failed", h:state())
    assert.same({}, lines)
  end)

  it("still logs a failure nobody polled or waited on", function()
    local lines, log = logger()
    local orch = T.new { log = log }
    local f = stagehand.future()
    orch:run("Loading the map", function(job)
      job:await(f)
      error("corrupt map")
    end)
    f:resolve()
    orch:step()
    assert.equal(1, #lines)
    assert.matches("Loading the map failed and nobody waited on it: .*corrupt map", lines[1])
  end)
end)

describe("errors that point at the caller", function()
  it("a wait on a job that has ended names the method, the job and the line", function()
    local orch = quiet()
    local kept
    orch:run("Loading x", function(job) kept = job end)
    local ok, err = pcall(function() kept:sleep(5) end)
    assert.is_false(ok)
    assert.matches('job:sleep: "Loading x" has already ended %(at [^)]*game_code_spec.lua:%d+%)', tostring(err))
  end)

  it("a wait on a job that was cancelled or stalled says how it ended, with the reason", function()
    local orch, clock = T.new { stall_ms = 100, check_ms = 50, log = function() end }
    local cancelled, stalled
    local h1 = orch:run("Loading y", function(job)
      cancelled = job
      job:await(stagehand.future())
    end)
    local h2 = orch:run("Loading z", function(job)
      stalled = job
      job:await(stagehand.future())
    end)
    h1:cancel("the menu closed")
    clock:advance(200)
    orch:step()
    assert.equal("stalled", h2:state())
    local _, err = pcall(function() cancelled:sleep(5) end)
    assert.is_true(stagehand.is_error(err, "cancelled"))
    assert.equal("the menu closed", err.reason)
    assert.equal(select(2, h1:result()), err.ended)
    assert.matches('job:sleep: "Loading y" has already ended (cancelled)', tostring(err), 1, true)
    _, err = pcall(function() stalled:await(stagehand.future()) end)
    assert.is_true(stagehand.is_error(err, "stalled"))
    assert.equal(select(2, h2:result()), err.ended)
    assert.matches('job:await: "Loading z" has already ended (stalled)', tostring(err), 1, true)
  end)

  it("an error raised through a tail call names the game's file, not stagehand's", function()
    local orch = quiet()
    local h = orch:run("tail", function(job)
      return job:await(42)
    end)
    local _, err = h:result()
    assert.matches("game_code_spec.lua", tostring(err.cause), 1, true)
    assert.not_matches("stagehand[/\\]%w+%.lua", tostring(err.cause))
  end)

  it("a job that raises a table fails with a readable message and keeps the table as cause", function()
    local orch = quiet()
    local with_message = { code = 7, message = "atlas too big" }
    local plain = { code = 404, path = "hero.png" }
    local shown = setmetatable({}, { __tostring = function() return "a custom error" end })
    local a = orch:run("a", function() error(with_message) end)
    local b = orch:run("b", function() error(plain) end)
    local c = orch:run("c", function() error(shown) end)
    local d = orch:run("d", function() error(42) end)
    local _, ea = a:result()
    local _, eb = b:result()
    local _, ec = c:result()
    local _, ed = d:result()
    assert.equal("a failed: atlas too big", ea.message)
    assert.equal(with_message, ea.cause)
    assert.equal('b failed: a table {code = 404, path = "hero.png"}', eb.message)
    assert.equal(plain, eb.cause)
    assert.equal("c failed: a custom error", ec.message)
    assert.matches("d failed: .*42", ed.message)
    -- Keys of every kind, tables among them, in a stable order by kind.
    local mixed = { code = 3, [2] = "two", [true] = 1, [{}] = {}, [{}] = {} }
    local _, ee = orch:run("e", function() error(mixed) end):result()
    assert.equal(mixed, ee.cause)
    assert.matches('^e failed: a table {%[true%] = 1, %[2%] = "two", code = 3, %[table: [^%]]+%] = {...},'
      .. ' %[table: [^%]]+%] = {...}}$', ee.message)
  end)
end)

-- These used to end the job but leave it queued in the pool or subscribed
-- to the future: the next job given its core id failed, the pool kept a
-- phantom waiter, and resolving the future raised out of f:resolve.
describe("a wait where the job's coroutine cannot yield", function()
  local where = {
    ["a string.gsub callback"] = function(wait) string.gsub("a", "a", function() wait() end) end,
    ["a table.sort comparator"] = function(wait) table.sort({ 3, 2, 1 }, function(a, b) wait() return a < b end) end,
    ["a coroutine.wrap of the job's own"] = function(wait) coroutine.wrap(wait)() end,
  }
  local names = {}
  for name in next, where do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    local inside = where[name]
    it("inside " .. name .. " fails the job and leaves nothing behind (future)", function()
      local orch = quiet()
      local f = stagehand.future()
      local other = orch:run("other", function(job) return job:await(f) end)
      local h = orch:run("bad waiter", function(job)
        inside(function() job:await(f) end)
        return "should not be done"
      end)
      assert.equal("failed", h:state())
      local _, err = h:result()
      assert.matches("could not suspend the job", tostring(err), 1, true)
      f:resolve("ok") -- must not raise, and must wake the other waiter
      orch:step()
      assert.same({ "done", "ok" }, { other:result() })
      -- a new job gets the ended job's core id, and works
      local again = orch:run("again", function(job) job:sleep(1) return "fine" end)
      T.settle(orch, 10, 1)
      assert.same({ "done", "fine" }, { again:result() })
      assert.no_leaks(orch)
    end)

    it("inside " .. name .. " fails the job and leaves nothing behind (slot)", function()
      local orch = quiet { pools = { p = 1 } }
      local hold = stagehand.future()
      orch:run("holder", function(job)
        local release = job:slot("p")
        job:await(hold)
        release()
      end)
      orch:step()
      local h = orch:run("bad waiter", function(job)
        inside(function() job:slot("p") end)
      end)
      assert.equal("failed", h:state())
      assert.equal(0, orch:pools().p.waiting)
      hold:resolve()
      local later = orch:run("later", function(job)
        local release = job:slot("p")
        release()
        return "got it"
      end)
      T.settle(orch, 10, 1)
      assert.same({ "done", "got it" }, { later:result() })
      assert.no_leaks(orch)
    end)
  end
end)

describe("a frame's requests", function()
  it("compete by priority: one visible asset asked for after thirty background ones gets the first slot", function()
    local orch = quiet { pools = { decode = 2 } }
    local order = {}
    local function asset(name, prio)
      orch:run("Loading " .. name, function(job)
        local release = job:slot("decode")
        order[#order + 1] = name
        job:sleep(5)
        release()
      end, { priority = prio })
    end
    -- one frame: the game asks for everything, then steps
    for i = 1, 30 do asset("bg" .. i, "background") end
    asset("hero", "visible")
    asset("hud", "scene")
    assert.same({}, order) -- nothing granted at the moment of asking
    orch:step()
    assert.same({ "hero", "hud" }, order)
    T.settle(orch, 1000, 5)
    assert.equal(32, #order)
    assert.equal("bg1", order[3])
    assert.no_leaks(orch)
  end)

  it("compete by priority for permits too", function()
    local orch = quiet()
    orch:budget("finalize", { ops = 1 })
    local order = {}
    for i = 1, 5 do
      orch:run("bg" .. i, function(job) job:permit("finalize") order[#order + 1] = "bg" .. i end,
        { priority = "background" })
    end
    orch:run("near", function(job) job:permit("finalize") order[#order + 1] = "near" end, { priority = "visible" })
    orch:step()
    assert.same({ "near" }, order)
  end)
end)

-- orch:loop and orch:wait stepped with no budget: a job doing a second of
-- sliced work re-queued itself into the same step, so a 50 ms sleeper was
-- never woken and then stalled, blamed for what it did not do.
describe("sliced work under orch:loop and orch:wait", function()
  local function scene()
    local orch, clock = quiet { stall_ms = 200, check_ms = 10 }
    local woke_at
    local bake = orch:run("Baking lightmaps", function(job)
      for _ = 1, 1000 do
        clock:advance(1) -- a millisecond of baking
        job:progress()
        job:slice()
      end
      return "baked"
    end)
    local sleeper = orch:run("Fading in", function(job)
      job:sleep(50)
      woke_at = clock.now
      return "faded"
    end)
    return orch, clock, bake, sleeper, function() return woke_at end
  end

  it("orch:loop gives sleepers, stall checks and other jobs their turn", function()
    local orch, _, bake, sleeper, woke_at = scene()
    orch:loop()
    assert.same({ "done", "faded" }, { sleeper:result() })
    assert.same({ "done", "baked" }, { bake:result() })
    assert.is_true(woke_at() < 100, "woke at " .. tostring(woke_at()))
  end)

  it("orch:wait does too", function()
    local orch, _, bake, sleeper, woke_at = scene()
    assert.same({ "done", "faded" }, { orch:wait(sleeper) })
    assert.is_true(woke_at() < 100, "woke at " .. tostring(woke_at()))
    assert.same({ "done", "baked" }, { orch:wait(bake) })
  end)
end)

describe("misplaced calls", function()
  it("job:slot and job:permit called from outside the job name the caller's line", function()
    local orch = quiet { pools = { p = 1 } }
    orch:budget("b", { ops = 1 })
    local kept
    orch:run("x", function(job) kept = job job:sleep(10) end)
    for _, call in ipairs { function() kept:slot("p") end, function() kept:permit("b") end } do
      local ok, err = pcall(call)
      assert.is_false(ok)
      assert.matches("^[^:]*game_code_spec.lua:%d+: job:%a+ must be called from inside the job's own work", err)
    end
  end)

  it("job:await, sleep, call and slice called from outside the job name the caller's line", function()
    local orch = quiet()
    local kept
    orch:run("x", function(job) kept = job job:sleep(10) end)
    local calls = {
      await = function() kept:await(stagehand.future()) end,
      sleep = function() kept:sleep(5) end,
      call = function() kept:call(function(cb) cb() end) end,
      slice = function() kept:slice() end,
    }
    for name, call in pairs(calls) do
      local ok, err = pcall(call) -- (from the spec's own code)
      assert.is_false(ok)
      assert.matches("^[^:]*game_code_spec.lua:%d+: job:" .. name .. " must be called from inside the job's own work",
        err)
      local co = coroutine.create(call) -- (from a coroutine of the game's own)
      ok, err = coroutine.resume(co)
      assert.is_false(ok)
      assert.matches("^[^:]*game_code_spec.lua:%d+: job:" .. name .. " must be called from inside the job's own work",
        err)
    end
  end)

  it("a watcher that calls step is told it is a watcher", function()
    local orch = quiet()
    local said
    orch:watch(function(rec)
      if rec.state ~= "running" and not said then
        local _, err = pcall(orch.step, orch)
        said = err
      end
    end)
    orch:run("w", function(job) job:sleep(1) end)
    T.settle(orch, 10, 1)
    assert.matches("watcher", said, 1, true)
    assert.not_matches("inside a job", said, 1, true)
  end)
end)

describe("assert.no_leaks", function()
  -- The registrations an unyieldable wait used to leave behind: a check
  -- that cannot see them proves nothing about them.
  it("finds an ended job still listening to what it awaited", function()
    local orch = quiet()
    local f = stagehand.future()
    local kept
    local h = orch:run("x", function(job)
      kept = job
      job:await(f)
    end)
    h:cancel()
    orch:step()
    assert.no_leaks(orch)
    -- what the fault left: the ended job among the future's listeners,
    -- as its await had noted it
    require("stagehand.engine.settle").listen(f, kept)
    orch.track_waits[kept] = f
    local ok, err = pcall(function() assert.no_leaks(orch) end)
    assert.is_false(ok)
    assert.matches("1 ended job(s) still listening", tostring(err), 1, true)
  end)

  it("finds a pool waiter that no running job is", function()
    local B = require "stagehand.core.backend"
    local orch = quiet { pools = { p = 0 } }
    assert.equal(0, B.pool_enqueue(orch.pool_q.p.p, 77, 0)) -- what the fault left
    local ok, err = pcall(function() assert.no_leaks(orch) end)
    assert.is_false(ok)
    assert.matches("1 waiter(s) in pool 'p' that no running job is", tostring(err), 1, true)
  end)

  it("counts only the pool waiters no running job is, beside jobs that wait there", function()
    local B = require "stagehand.core.backend"
    local orch = quiet { pools = { p = 0 } }
    local waiters = {}
    for i = 1, 2 do waiters[i] = orch:run("waiter " .. i, function(job) job:slot("p") end) end
    orch:step()
    assert.equal(0, B.pool_enqueue(orch.pool_q.p.p, 77, 0)) -- what the fault left
    local ok, err = pcall(function() assert.no_leaks(orch) end)
    assert.is_false(ok)
    assert.matches("3 waiter(s) in pool 'p';", tostring(err), 1, true)
    assert.matches("1 waiter(s) in pool 'p' that no running job is", tostring(err), 1, true)
    for i = 1, 2 do waiters[i]:cancel() end
  end)

  it("finds a remembered outcome that still holds a coroutine, a slot or a place in a queue", function()
    local F = require "stagehand.engine.fields"
    for _, case in ipairs {
      { F.CO, "holds a live coroutine" },
      { F.HELD, "still holds a slot" },
      { F.WAITQ, "still waits in a queue" },
    } do
      local orch = quiet()
      orch:run("load", function() return "loaded" end, { key = "castle" })
      orch:step()
      assert.no_leaks(orch)
      orch.mem.castle[case[1]] = {} -- what the fault left
      local ok, err = pcall(function() assert.no_leaks(orch) end)
      assert.is_false(ok)
      assert.matches("the remembered outcome of castle " .. case[2], tostring(err), 1, true)
    end
  end)
end)
