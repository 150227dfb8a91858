local stagehand = require "stagehand"
local T = require "stagehand.testing"

describe(".future", function()
  it("is pending until resolved, then done with its values", function()
    local f = stagehand.future("texture")
    assert.equal("pending", f:state())
    assert.is_true(f:resolve(1, 2))
    assert.equal("done", f:state())
    assert.same({ "done", 1, 2 }, { f:result() })
  end)

  it("settles only once", function()
    local f = stagehand.future()
    f:reject("first")
    assert.is_false(f:resolve("second"))
    assert.is_false(f:reject("third"))
    assert.same({ "failed", "first" }, { f:result() })
  end)

  it("tells on_end listeners in the order they came", function()
    local f = stagehand.future()
    local order = {}
    for i = 1, 5 do f:on_end(function() order[#order + 1] = i end) end
    f:resolve()
    assert.same({ 1, 2, 3, 4, 5 }, order)
  end)

  it("wakes waiting jobs in the order they waited", function()
    local orch = T.new()
    local f = stagehand.future()
    local order = {}
    for i = 1, 5 do
      orch:run("w" .. i, function(job)
        job:await(f)
        order[#order + 1] = i
      end)
    end
    f:resolve()
    orch:step()
    assert.same({ 1, 2, 3, 4, 5 }, order)
  end)

  it("wakes the jobs still waiting in the order they waited, after most of the others left", function()
    -- 1,000 sprites wait on one atlas; the player closes most of their
    -- pages. Those leave in O(1) each, and the rest wake in order.
    local orch = T.new()
    local atlas = stagehand.future("atlas")
    local order, hs = {}, {}
    for i = 1, 1000 do
      hs[i] = orch:run("sprite " .. i, function(job)
        job:await(atlas)
        order[#order + 1] = i
      end)
    end
    local want = {}
    for i = 1, 1000 do
      if i % 7 == 0 or i == 1 then want[#want + 1] = i else hs[i]:cancel("page closed") end
    end
    -- one comes back: it waits again, after everyone still waiting
    local again = orch:run("sprite again", function(job)
      job:await(atlas)
      order[#order + 1] = "again"
    end)
    want[#want + 1] = "again"
    atlas:resolve()
    orch:step()
    assert.same(want, order)
    assert.equal("done", again:state())
    assert.no_leaks(orch)
  end)

  it("names a bad label", function()
    assert.has_error(function() stagehand.future(5) end,
      "bad argument 'label' to future: expected a non-empty string, got number")
    -- (an empty one is named as itself: "got string" read as a contradiction)
    assert.has_error(function() stagehand.future("") end,
      "bad argument 'label' to future: expected a non-empty string, got \"\"")
  end)
end)

describe(".controller", function()
  it("aborts its signal once, with the reason", function()
    local ctl = stagehand.controller()
    local sig = ctl.signal
    assert.is_false(sig.aborted)
    local heard = {}
    sig:on_abort(function(r) heard[#heard + 1] = r end)
    assert.is_true(ctl:abort("bye"))
    assert.is_false(ctl:abort("again"))
    assert.is_true(sig.aborted)
    assert.equal("bye", sig.reason)
    assert.same({ "bye" }, heard)
  end)

  it("gives a cancelled Error as the default reason", function()
    local ctl = stagehand.controller()
    ctl:abort()
    assert.is_true(stagehand.is_error(ctl.signal.reason, "cancelled"))
  end)

  it("calls an on_abort handler at once on an aborted signal", function()
    local ctl = stagehand.controller()
    ctl:abort("x")
    local got
    ctl.signal:on_abort(function(r) got = r end)
    assert.equal("x", got)
  end)

  it("names a handler that cannot be called, and keeps the ones it has", function()
    local ctl = stagehand.controller()
    local heard = {}
    ctl.signal:on_abort(function(r) heard[#heard + 1] = r end)
    for _, bad in ipairs { 5, "abort", {}, setmetatable({}, { __index = { __call = print } }) } do
      assert.has_error(function() ctl.signal:on_abort(bad) end,
        "bad argument 'fn' to on_abort: expected a function, got " .. type(bad))
    end
    local called = setmetatable({}, { __call = function(_, r) heard[#heard + 1] = "table " .. r end })
    ctl.signal:on_abort(called) -- (a callable table is a handler)
    ctl:abort("closed")
    assert.same({ "closed", "table closed" }, heard)
  end)

  it("unsubscribes handlers", function()
    local ctl = stagehand.controller()
    local called = false
    local unsub = ctl.signal:on_abort(function() called = true end)
    unsub()
    ctl:abort()
    assert.is_false(called)
  end)

  it("keeps the order of the handlers left after most unsubscribe, and skips one unsubscribed during the abort", function()
    local ctl = stagehand.controller()
    local heard, unsubs = {}, {}
    for i = 1, 50 do
      unsubs[i] = ctl.signal:on_abort(function() heard[#heard + 1] = i end)
    end
    for i = 1, 50 do
      if i % 10 ~= 0 then unsubs[i]() end
    end
    unsubs[1]() -- twice: nothing more happens
    ctl.signal:on_abort(function() heard[#heard + 1] = 51 unsubs[30]() end)
    ctl:abort()
    assert.same({ 10, 20, 30, 40, 50, 51 }, heard)
    local late = stagehand.controller()
    local u = {}
    u[1] = late.signal:on_abort(function() heard[#heard + 1] = "first" u[2]() end)
    u[2] = late.signal:on_abort(function() heard[#heard + 1] = "never" end)
    late:abort()
    assert.equal("first", heard[#heard])
  end)

  it("keeps calling handlers after one raises", function()
    local ctl = stagehand.controller()
    local second = false
    local written = {}
    local old = io.stderr
    io.stderr = { write = function(_, ...) written[#written + 1] = table.concat({ ... }) end }
    ctl.signal:on_abort(function() error("handler bug") end)
    ctl.signal:on_abort(function() second = true end)
    ctl:abort()
    io.stderr = old
    assert.is_true(second)
    assert.matches("handler bug", written[1], 1, true)
  end)

  it("throw_if_aborted raises the reason", function()
    local ctl = stagehand.controller()
    ctl.signal:throw_if_aborted()
    ctl:abort("stop")
    assert.has_error(function() ctl.signal:throw_if_aborted() end, "stop")
  end)
end)

describe(".abortable", function()
  it("ends with the awaitable's values when it settles first", function()
    local orch = T.new()
    local f = stagehand.future()
    local ctl = stagehand.controller()
    local h = orch:run("x", function(job) return job:await(stagehand.abortable(f, ctl.signal)) end)
    f:resolve("pixels")
    orch:step()
    assert.same({ "done", "pixels" }, { h:result() })
  end)

  it("raises the signal's reason when it aborts first", function()
    local orch = T.new { log = function() end }
    local f = stagehand.future()
    local ctl = stagehand.controller()
    local h = orch:run("x", function(job) return job:await(stagehand.abortable(f, ctl.signal)) end)
    ctl:abort("shader compile abandoned")
    orch:step()
    local _, err = h:result()
    assert.equal("shader compile abandoned", err.cause)
  end)

  it("ends at once when its signal aborted already, or its awaitable settled", function()
    local ctl = stagehand.controller()
    ctl:abort("left the level")
    local f = stagehand.future()
    assert.same({ "cancelled", "left the level" }, { stagehand.abortable(f, ctl.signal):result() })
    local done = stagehand.future()
    done:resolve("mesh", 2)
    local live = stagehand.controller()
    assert.same({ "done", "mesh", 2 }, { stagehand.abortable(done, live.signal):result() })
    local broke = stagehand.future()
    broke:reject("corrupt")
    assert.same({ "failed", "corrupt" }, { stagehand.abortable(broke, live.signal):result() })
    live:abort("late") -- (nothing listens any more)
  end)

  it("keeps its first outcome when the other side ends later", function()
    local f, g = stagehand.future(), stagehand.future()
    local ctl1, ctl2 = stagehand.controller(), stagehand.controller()
    local aborted = stagehand.abortable(f, ctl1.signal)
    local settled = stagehand.abortable(g, ctl2.signal)
    local heard = {}
    aborted:on_end(function(st, ...) heard[#heard + 1] = { st, ... } end)
    settled:on_end(function(st, ...) heard[#heard + 1] = { st, ... } end)
    ctl1:abort("scrolled away")
    g:resolve("tile")
    f:resolve("too late")
    ctl2:abort("too late")
    assert.same({ { "cancelled", "scrolled away" }, { "done", "tile" } }, heard)
    assert.same({ "cancelled", "scrolled away" }, { aborted:result() })
    assert.same({ "done", "tile" }, { settled:result() })
  end)

  it("withdraws a caller whose Handle it wraps only from the wait", function()
    local orch = T.new { log = function() end }
    local f = stagehand.future()
    local ctl = stagehand.controller()
    local build = orch:run("build", function(job) return job:await(f) end)
    local h = orch:run("x", function(job) return job:await(stagehand.abortable(build, ctl.signal)) end)
    ctl:abort("hurry")
    orch:step()
    assert.equal("failed", h:state())
    assert.equal("running", build:state()) -- (abortable ends the wait, not the work)
    f:resolve("built")
    orch:step()
    assert.same({ "done", "built" }, { build:result() })
    assert.no_leaks(orch)
  end)

  it("names bad arguments", function()
    assert.has_error(function() stagehand.abortable(5, stagehand.controller().signal) end)
    assert.has_error(function() stagehand.abortable(stagehand.future(), {}) end)
  end)
end)

describe(".all", function()
  it("gives a list of each one's first value", function()
    local orch = T.new()
    local a, b = stagehand.future(), stagehand.future()
    local j = orch:run("j", function(job)
      job:sleep(10)
      return "job"
    end)
    local h = orch:run("x", function(job) return job:await(stagehand.all { a, b, j }) end)
    b:resolve("B", "ignored")
    a:resolve("A")
    T.settle(orch, 100, 10)
    local st, list = h:result()
    assert.equal("done", st)
    assert.same({ "A", "B", "job" }, list)
  end)

  it("fails with the first failure", function()
    local orch = T.new { log = function() end }
    local a, b = stagehand.future(), stagehand.future()
    local h = orch:run("x", function(job) return job:await(stagehand.all { a, b }) end)
    b:reject("b broke")
    a:reject("a broke")
    orch:step()
    local _, err = h:result()
    assert.equal("b broke", err.cause)
  end)

  it("takes parts that settled before it was made", function()
    local a, b = stagehand.future(), stagehand.future()
    a:resolve("A")
    local g = stagehand.all { a, b }
    assert.equal("pending", g:state())
    b:resolve("B")
    assert.same({ "done", { "A", "B" } }, { g:result() })
    local broke = stagehand.future()
    broke:reject("b broke")
    local later = stagehand.future()
    local failed = stagehand.all { broke, later }
    assert.same({ "failed", "b broke" }, { failed:result() })
    later:resolve("ignored")
    assert.same({ "failed", "b broke" }, { failed:result() })
  end)

  it("fails with a part's end other than done, and hears nothing after", function()
    local orch = T.new { log = function() end }
    local f = stagehand.future()
    local a = orch:run("a", function(job) return job:await(f) end)
    local b = orch:run("b", function(job) return job:await(f) end)
    local c = orch:run("c", function() return "c" end)
    local heard = 0
    local g = stagehand.all { c, a, b }
    g:on_end(function() heard = heard + 1 end)
    a:cancel("not needed")
    local st, err = g:result()
    assert.equal("cancelled", st)
    assert.is_true(stagehand.is_error(err, "cancelled"))
    f:resolve()
    orch:step()
    assert.equal("done", b:state())
    assert.equal(1, heard)
    assert.no_leaks(orch)
  end)

  it("settles at once for an empty list", function()
    local orch = T.new()
    local h = orch:run("x", function(job) return #job:await(stagehand.all {}) end)
    assert.same({ "done", 0 }, { h:result() })
  end)

  it("names what is not awaitable", function()
    assert.has_error(function() stagehand.all { stagehand.future(), 5 } end,
      "bad argument 'list' to all: item 2 is not awaitable (number)")
    assert.has_error(function() stagehand.all(5) end)
  end)
end)

describe("groups nested deep", function()
  -- The usual way to gather loads as they are made nests one group per load.
  local function gather(orch, n)
    local fs, acc = {}, stagehand.all {}
    for i = 1, n do
      local fi = stagehand.future()
      fs[i] = fi
      acc = stagehand.all { acc, orch:run("load " .. i, function(job) return job:await(fi) end) }
    end
    return fs, acc
  end

  -- Whether this runtime lets a coroutine yield through a pcall (Lua 5.1
  -- does not).
  local yields = select(2, coroutine.resume(coroutine.create(function() return pcall(coroutine.yield, 1) end))) == 1

  -- How many of n groups nested over a fresh future, each with a listener,
  -- hear it settle before its resolve returns.
  local function levels_told(n)
    local f = stagehand.future()
    local g, heard = f, 0
    for _ = 1, n do
      g = stagehand.all { g }
      g:on_end(function() heard = heard + 1 end)
    end
    f:resolve()
    return heard
  end

  -- (5,000 levels: the old recursion overflowed LuaJIT's stack from 4,000)
  it("gathers 5,000 loads as they are made (acc = all {acc, load}) and hears every value", function()
    local orch = T.new()
    local fs, acc = gather(orch, 5000)
    local got
    local top = orch:run("level", function(job)
      got = job:await(acc)
      return "ready"
    end)
    -- The first load finishing last settles all 5,000 levels at once.
    for i = 5000, 1, -1 do fs[i]:resolve(i) end
    orch:step()
    assert.same({ "done", "ready" }, { top:result() })
    local cur, k = got, 5000
    while k > 0 and cur[2] == k do
      cur, k = cur[1], k - 1
    end
    assert.equal(0, k)
    assert.same({}, cur)
    assert.no_leaks(orch)
  end)

  it("fails every level when the first load is cancelled, and the loader awaiting it hears that", function()
    local orch = T.new { log = function() end }
    local f = stagehand.future()
    local first = orch:run("first", function(job) return job:await(f) end)
    local acc = first
    for i = 2, 5000 do
      acc = stagehand.all { acc, orch:run("load " .. i, function(job) return job:await(f) end) }
    end
    local top = orch:run("level", function(job) return job:await(acc) end)
    first:cancel("scrolled away")
    assert.equal("cancelled", acc:state())
    orch:step()
    local st, err = top:result()
    assert.equal("failed", st)
    assert.is_true(stagehand.is_error(err.cause, "cancelled"))
    f:resolve()
    orch:step()
    assert.equal(0, orch.nrunning)
    assert.no_leaks(orch)
  end)

  it("tells a group's listeners inside its part's telling, as for any listener", function()
    local f = stagehand.future()
    local heard = {}
    local g1 = stagehand.all { f }
    f:on_end(function() heard[#heard + 1] = "f" end)
    local g2 = stagehand.all { g1 }
    g1:on_end(function() heard[#heard + 1] = "g1" end)
    g2:on_end(function() heard[#heard + 1] = "g2" end)
    f:resolve()
    assert.same({ "g2", "g1", "f" }, heard)
  end)

  it("has told every level by the time the settle returns, however deep", function()
    for _, make in ipairs {
      function(g) return stagehand.all { g } end,
      function(g) return stagehand.all_settled { g } end,
      function(g) return stagehand.abortable(g, stagehand.controller().signal) end,
    } do
      local f = stagehand.future()
      local g, heard = f, 0
      for _ = 1, 5000 do
        g = make(g)
        g:on_end(function() heard = heard + 1 end)
      end
      f:resolve(1)
      assert.equal(5000, heard)
      assert.equal("done", g:state())
    end
  end)

  it("finds a cycle through a group nested 10,000 deep", function()
    local orch = T.new { log = function() end }
    local me
    me = orch:run("loader", function(job)
      job:sleep(1)
      local g = me
      for _ = 1, 10000 do g = stagehand.all { g } end
      return job:await(g)
    end)
    T.settle(orch, 10, 1)
    local st, err = me:result()
    assert.equal("failed", st)
    assert.is_true(stagehand.is_error(err.cause, "cycle"))
    assert.no_leaks(orch)
  end)

  it("holds up no other settle when a handler yields in the middle of one", function()
    -- (A handler must not yield; one that does, where the runtime lets it
    -- yield through a pcall, leaves its levels of telling suspended.)
    local orch = T.new { log = function() end }
    local h = orch:run("yields", function()
      local f = stagehand.future()
      local g = f
      for _ = 1, 40 do g = stagehand.all { g } end
      g:on_end(function() if yields then coroutine.yield() end end)
      f:resolve()
      return "went on"
    end)
    if yields then
      assert.equal("failed", h:state())
    else
      assert.equal("done", h:state())
    end
    assert.equal(100, levels_told(100))
    assert.no_leaks(orch)
  end)

  it("holds up no settle when a coroutine that yielded in the middle of one is resumed later", function()
    local inner = stagehand.future()
    local g_inner = stagehand.all { inner }
    g_inner:on_end(function() if yields then coroutine.yield() end end)
    local co = coroutine.create(function() inner:resolve() end)
    -- A settle 40 levels deep whose 32nd level starts that coroutine,
    -- which yields inside a settle of its own.
    local outer = stagehand.future()
    local g, heard = outer, 0
    for level = 1, 40 do
      g = stagehand.all { g }
      if level == 32 then g:on_end(function() coroutine.resume(co) end) end
      g:on_end(function() heard = heard + 1 end)
    end
    outer:resolve()
    assert.equal(40, heard)
    assert.equal(yields and "suspended" or "dead", coroutine.status(co))
    coroutine.resume(co) -- (its settle goes on and returns, long after)
    assert.equal("dead", coroutine.status(co))
    assert.equal(5, levels_told(5))
  end)
end)

describe(".all_settled", function()
  it("lists every outcome and never fails", function()
    local orch = T.new()
    local a, b = stagehand.future(), stagehand.future()
    local h = orch:run("x", function(job) return job:await(stagehand.all_settled { a, b }) end)
    a:reject("nope")
    b:resolve(2)
    orch:step()
    local st, list = h:result()
    assert.equal("done", st)
    assert.same({ state = "failed", error = "nope" }, list[1])
    assert.same({ state = "done", value = 2 }, list[2])
  end)

  it("takes parts that ended before it was made, in list order", function()
    local orch = T.new { log = function() end }
    local f = stagehand.future()
    local early = orch:run("early", function() error("no such sprite") end)
    local waits = orch:run("waits", function(job) return job:await(f) end)
    local done = stagehand.future()
    done:resolve("first", "second")
    local g = stagehand.all_settled { waits, early, done }
    assert.equal("pending", g:state())
    waits:cancel("scrolled away")
    local st, list = g:result()
    assert.equal("done", st)
    assert.equal("cancelled", list[1].state)
    assert.is_true(stagehand.is_error(list[1].error, "cancelled"))
    assert.equal("failed", list[2].state)
    assert.matches("no such sprite", tostring(list[2].error))
    assert.same({ state = "done", value = "first" }, list[3])
    orch:step() -- (the cancelled job's cleanup)
    assert.no_leaks(orch)
  end)
end)

describe(".is_error", function()
  it("tells stagehand Errors apart, by kind when asked", function()
    local orch = T.new()
    local h = orch:run("x", function(job) job:await(stagehand.future()) end)
    h:cancel()
    local _, err = h:result()
    assert.is_true(stagehand.is_error(err))
    assert.is_true(stagehand.is_error(err, "cancelled"))
    assert.is_false(stagehand.is_error(err, "stalled"))
    assert.is_false(stagehand.is_error("cancelled"))
    assert.is_false(stagehand.is_error({ kind = "cancelled" }))
  end)
end)
