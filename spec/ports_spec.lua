-- Ports, round barriers and long-lived workers: threads that talk while
-- they run. Workers run spec/fixtures/fixture_worker.lua.
local stagehand = require "stagehand"
local T = require "stagehand.testing"

if not package.path:find("spec/fixtures/?.lua", 1, true) then
  package.path = "spec/fixtures/?.lua;" .. package.path
end

local WAIT = 10000 -- (ms a worker may take on a loaded host before a spec gives up)

-- Makes a post to `p` land inside a job's first look at it that finds it
-- empty: as a worker posting just after the job looked, before it watches
-- the port. Returns whether it has happened (a function) and what undoes it.
local function post_after_look(p)
  local methods = getmetatable(p).__index
  local try_receive, injected = methods.try_receive, false
  methods.try_receive = function(self, ...)
    local got, v = try_receive(self, ...)
    if not got and rawequal(self, p) and not injected then
      injected = true
      p:post("between")
    end
    return got, v
  end
  return function() return injected end, function() methods.try_receive = try_receive end
end

-- A wait answered and stepped past, so that `orch` has looked at its
-- notifier once (its first wait ever is looked at regardless).
local function warm_up(orch)
  local q = stagehand.port()
  local warm = orch:run("warm", function() return q:receive() end)
  q:post(1)
  orch:step()
  assert.equal("done", warm:state())
end

describe("stagehand.port", function()
  it("carries values in order, copied, between states", function()
    local p = stagehand.port()
    assert.is_true(p:post({ n = 1 }))
    assert.is_true(p:post("two"))
    assert.same({ n = 1 }, p:receive_within(0))
    assert.equal("two", p:receive_within(0))
    assert.equal(0, p:count())
  end)

  it("crosses as a reference: a port received equals the one posted, and never a round barrier", function()
    local p, inbox = stagehand.port(), stagehand.port()
    inbox:post({ reply_to = p })
    local got = inbox:receive_within(0).reply_to
    assert.is_true(got == p)
    assert.matches("^stagehand.port %(", tostring(got))
    assert.is_false(p == stagehand.rounds(2)) -- (comparing kinds raised on Lua 5.4)
  end)

  it("refuses to post nil, and anything that cannot cross, naming where it is", function()
    local p = stagehand.port()
    assert.has_error(function() p:post(nil) end, "port:post: nil cannot be posted (a closed port answers nil)")
    local line = debug.getinfo(1, "l").currentline + 1
    local ok, err = pcall(function() p:post({ cb = print }) end)
    assert.is_false(ok)
    -- at the caller's line, naming the argument and where in it
    assert.matches("ports_spec.lua:" .. line .. ": bad argument 'v' to port:post: v.cb is a function; "
      .. "only plain data, ports and round barriers cross threads", err, 1, true)
    assert.equal(0, p:count())
  end)

  it("answers false and nil once closed, and drops what was queued", function()
    local p = stagehand.port()
    p:post(1)
    p:close()
    assert.is_true(p:closed())
    assert.is_false(p:post(2))
    assert.is_nil(p:receive_within(0))
    assert.same({ false, "closed" }, { p:try_receive() })
    assert.equal(0, p:drain(function() end))
  end)

  it("returns nil from receive_within once the time passes with nothing posted", function()
    local p = stagehand.port()
    assert.is_nil(p:receive_within(20))
  end)

  it("returns nil from receive_within in a worker once the time passes", function()
    local orch = T.new()
    local pool = stagehand.pool(orch, { module = "fixture_worker", size = 1 })
    local p = stagehand.port()
    assert.same({ "done", nil, "timed out" }, { orch:wait(pool:run("wait_within", { port = p, ms = 20 }), WAIT) })
    p:post("in time")
    assert.same({ "done", "in time", "timed out" },
      { orch:wait(pool:run("wait_within", { port = p, ms = 5000 }), WAIT) })
    orch:wait(pool:destroy(), WAIT)
  end)

  it("drains every queued value without waiting, and drain_for at least one", function()
    local p = stagehand.port()
    for i = 1, 5 do p:post(i) end
    local got = {}
    -- (each takes 20 ms of the wall clock drain_for reads: os.clock, the
    -- process's CPU time, runs faster while other threads are busy)
    local now_ms = require("stagehand.core.backend").now_ms
    local function slow(v) -- (drain_for stops after the first)
      got[#got + 1] = v
      local t0 = now_ms()
      while now_ms() - t0 < 20 do end
    end
    assert.equal(1, p:drain_for(slow, 10))
    assert.equal(4, p:drain(function(v) got[#got + 1] = v end))
    assert.same({ 1, 2, 3, 4, 5 }, got)
  end)

  -- Regression: a drain whose fn posted back to the same port never returned.
  it("drains only what was queued when it began, when fn posts back to the port", function()
    local p = stagehand.port()
    for i = 1, 3 do p:post(i) end
    local seen = {}
    assert.equal(3, p:drain(function(v)
      seen[#seen + 1] = v
      p:post(v + 10)
    end))
    assert.same({ 1, 2, 3 }, seen)
    assert.equal(3, p:count())
    assert.equal(3, p:drain_for(function(v) p:post(v) end, 1000))
    assert.equal(3, p:count())
  end)

  it("ends a drain while a worker keeps posting to the port", function()
    local orch = T.new()
    local pool = stagehand.pool(orch, { module = "fixture_worker", size = 1 })
    local p = stagehand.port()
    local h = pool:run("flood", p)
    orch:step() -- (a grant round offers it to the worker)
    assert.is_not_nil(p:receive_within(WAIT))
    for _ = 1, 20 do
      local before = p:count()
      local n = p:drain(function() end)
      assert.is_true(n >= before, "took fewer than were queued")
    end
    h:cancel()
    orch:wait(pool:destroy(), WAIT)
  end)

  it("raises when receive would block the main thread outside a job", function()
    local p = stagehand.port()
    local ok, err = pcall(p.receive, p)
    assert.is_false(ok)
    assert.matches("port:receive cannot wait on the main thread outside a job", err, 1, true)
    assert.matches("receive_within", err, 1, true)
  end)

  it("names a bad argument or self at the caller's line", function()
    local p = stagehand.port()
    local function err_of(f)
      local ok, err = pcall(f)
      assert.is_false(ok)
      assert.matches("^spec/ports_spec.lua:%d+: ", err)
      return err
    end
    assert.matches("bad argument 'ms' to port:receive_within: expected a number >= 0, got -1",
      err_of(function() p:receive_within(-1) end), 1, true)
    assert.matches("bad argument 'ms' to port:drain_for", err_of(function() p:drain_for(print, 0 / 0) end), 1, true)
    assert.matches([[expected a number >= 0, got "a\nb\001\"c\\"]], err_of(function() p:receive_within("a\nb\1\"c\\") end),
      1, true) -- (a string on one line, as Lua would read it back)
    assert.matches('got "' .. string.rep("x", 57) .. '"... (70 bytes)',
      err_of(function() p:receive_within(string.rep("x", 70)) end), 1, true)
    assert.matches("bad argument 'fn' to port:drain: expected a function, got 5", err_of(function() p:drain(5) end),
      1, true)
    assert.matches("bad self to port:post", err_of(function() p.post({}, 1) end), 1, true)
    local b = stagehand.rounds(2, 1)
    assert.matches("bad self to b:arrive", err_of(function() b.arrive({}, 1, 1) end), 1, true)
    assert.matches("bad self to b:abort", err_of(function() b.abort(5) end), 1, true)
    assert.matches("b:sum cannot wait on the main thread", err_of(function() b:sum(1, 2, 1, { 1 }, {}) end), 1, true)
  end)

  describe("in a job", function()
    it("suspends the job until a value is posted, and hands it over", function()
      local orch = T.new()
      local p = stagehand.port()
      local h = orch:run("listener", function(job) return p:receive(), job end)
      assert.equal("running", h:state())
      orch:step()
      assert.equal("running", h:state())
      p:post("hello")
      assert.equal(0, orch:next_wake()) -- (what was posted waits to be collected)
      orch:step()
      assert.equal("hello", select(2, h:result()))
    end)

    it("steps again before sleeping when a value came between a job's look and its watch", function()
      -- (a worker posting just after the job looked rings no bell: the job
      -- watches the port only once it parks. Made here by posting from
      -- inside the job's look. Without the step that looks again, orch:wait
      -- slept on the notifier and let the fake clock run on.)
      local orch, clock = T.new()
      local p = stagehand.port()
      local injected, undo = post_after_look(p)
      local ok, err = pcall(function()
        warm_up(orch)
        local h = orch:run("listener", function(job)
          job:sleep(10)
          return p:receive()
        end)
        clock:advance(10)
        orch:step() -- (the job wakes in this step, looks, and parks)
        assert.is_true(injected())
        assert.equal("running", h:state())
        assert.equal(0, orch:next_wake())
        assert.same({ "done", "between" }, { orch:wait(h, 5000) })
        assert.equal(10, clock.now)
      end)
      undo()
      assert(ok, err)
      assert.no_leaks(orch)
    end)

    it("takes a value queued already at once", function()
      local orch = T.new()
      local p = stagehand.port()
      p:post(42)
      local h = orch:run("listener", function() return p:receive() end)
      assert.same({ "done", 42 }, { h:result() })
    end)

    it("wakes waiting jobs in the order they waited, and with nil once the port closes", function()
      local orch = T.new()
      local p = stagehand.port()
      local a = orch:run("a", function() return p:receive() end)
      local b = orch:run("b", function() return p:receive() end)
      local c = orch:run("c", function() return p:receive() end)
      p:post("first")
      p:post("second")
      orch:step()
      assert.same({ "done", "first" }, { a:result() })
      assert.same({ "done", "second" }, { b:result() })
      assert.equal("running", c:state())
      p:close()
      orch:step()
      assert.same({ "done" }, { c:result() })
      assert.no_leaks(orch)
    end)

    it("keeps the order of waits when many leave early, out of order", function()
      local orch = T.new { log = function() end }
      local p = stagehand.port()
      local r = require("spec.seeded").rng(3)
      local hs, gone = {}, {}
      for i = 1, 400 do hs[i] = orch:run("w" .. i, function() return p:receive() end) end
      for _ = 1, 300 do -- (three quarters leave: the list is compacted on the way)
        local i = r(400)
        if not gone[i] then
          gone[i] = true
          hs[i]:cancel("not needed")
        end
      end
      local left = {}
      for i = 1, 400 do
        if not gone[i] then left[#left + 1] = i end
      end
      for k = 1, #left do p:post(k) end
      orch:step()
      for k, i in ipairs(left) do assert.same({ "done", k }, { hs[i]:result() }) end
      assert.no_leaks(orch)
    end)

    it("polls no port in a step when none has had news since the last", function()
      local orch = T.new()
      local ports, hs = {}, {}
      for i = 1, 50 do
        ports[i] = stagehand.port()
        local p = ports[i]
        hs[i] = orch:run("w" .. i, function() return p:receive() end)
      end
      local methods = getmetatable(ports[1]).__index
      local try_receive, polls = methods.try_receive, 0
      methods.try_receive = function(...)
        polls = polls + 1
        return try_receive(...)
      end
      local ok, err = pcall(function()
        orch:step() -- (the waits made since the last step are looked at once)
        polls = 0
        for _ = 1, 10 do orch:step() end
        assert.equal(0, polls)
        ports[7]:post("news")
        orch:step()
        assert.same({ "done", "news" }, { hs[7]:result() })
        assert.is_true(polls >= 1)
      end)
      methods.try_receive = try_receive
      assert(ok, err)
      for i = 1, 50 do ports[i]:close() end
      orch:step()
      assert.no_leaks(orch)
    end)

    it("stalls a job that waits longer than its stall time, and leaves the port", function()
      local orch, clock = T.new { stall_ms = 500, log = function() end }
      local p = stagehand.port()
      local h = orch:run("listener", function() return p:receive() end)
      clock:advance(400)
      orch:step()
      assert.equal("running", h:state())
      clock:advance(1100) -- (past its stall time, and the next stall check)
      orch:step()
      assert.equal("stalled", h:state())
      p:post("late")
      orch:step()
      assert.equal("late", p:receive_within(0)) -- (nobody took it)
      assert.no_leaks(orch)
    end)

    it("hears a worker's reply posted through a port", function()
      local orch = T.new()
      local pool = stagehand.pool(orch, { module = "fixture_worker", size = 1 })
      local back = stagehand.port()
      local h = orch:run("asker", function(job)
        job:await(pool:run("mark", { out = back, name = "from a worker" }))
        return back:receive()
      end)
      assert.same({ "done", "from a worker" }, { orch:wait(h, WAIT) })
      orch:wait(pool:destroy(), WAIT)
    end)
  end)
end)

-- Whether a long-lived worker is in a wait (what it waits on is set just
-- before it waits): looked at for up to about 2 s.
local function waits_on_something(w)
  for _ = 1, 2000 do
    local _, what = w.pool.ud:_worker(0)
    if what then return true end
    stagehand.port():receive_within(1)
  end
  return false
end

describe("stagehand.spawn", function()
  it("runs a service over ports until stopped while blocked on receive", function()
    local orch = T.new()
    local inbox, outbox = stagehand.port(), stagehand.port()
    local w = stagehand.spawn(orch, "fixture_worker.service", inbox, outbox)
    assert.equal("running", w:state())
    inbox:post(21)
    assert.equal(42, outbox:receive_within(WAIT))
    w:stop()
    assert.same({ "done", "stopped" }, { orch:wait(w.done, WAIT) })
    assert.equal("stopped", w:state())
  end)

  -- Regression: a stop made before the worker reached its first wait was
  -- lost (its thread cleared it when it took its request), and the
  -- service blocked in receive for good.
  it("holds a stop made at once after spawn, before the worker first waits", function()
    local orch = T.new()
    for _ = 1, 20 do
      local inbox, outbox = stagehand.port(), stagehand.port()
      local w = stagehand.spawn(orch, "fixture_worker.service", inbox, outbox)
      w:stop()
      assert.same({ "done", "stopped" }, { orch:wait(w.done, WAIT) })
      assert.equal("stopped", w:state())
    end
  end)

  it("answers nil from receive, false from a round and false from sleep once stopped, with values queued", function()
    local orch = T.new()
    local inbox, b = stagehand.port(), stagehand.rounds(1)
    inbox:post("queued before the stop")
    local w = stagehand.spawn(orch, "fixture_worker.all_waits", inbox, b)
    w:stop()
    assert.same({ "done", "nil", false, false, true }, { orch:wait(w.done, WAIT) })
    assert.equal(1, inbox:count())
  end)

  -- Regression: from the second spawn on, under the manual driver, a worker
  -- that returned before orch:wait began was heard only when the wait's
  -- time ran out (removing a finished service shifted the next source out
  -- of the step's walk over them).
  it("hears each of three spawns end at once under the manual driver", function()
    local B = require "stagehand.core.backend"
    local orch = stagehand.new { driver = "manual" }
    for i = 1, 3 do
      local out = stagehand.port()
      local w = stagehand.spawn(orch, "fixture_worker.post_and_return", out, i)
      assert.equal(i, out:receive_within(WAIT))
      out:receive_within(20) -- (time for it to return: nothing more comes)
      local t0 = B.now_ms()
      assert.same({ "done", i }, { orch:wait(w.done, 3000) })
      local took = B.now_ms() - t0
      assert.is_true(took < 1000, "spawn " .. i .. " heard after " .. took .. " ms")
    end
  end)

  it("names the port it waits on in the log, by the name it was given", function()
    local lines = {}
    local orch = T.new { log = function(line) lines[#lines + 1] = line end }
    local inbox, outbox = stagehand.port("mixer inbox"), stagehand.port()
    local w = stagehand.spawn(orch, "fixture_worker.service", inbox, outbox)
    assert.is_true(waits_on_something(w))
    orch:close()
    assert.matches("long-lived worker fixture_worker.service waits on port 'mixer inbox' for ", table.concat(lines, "\n"),
      1, true)
    local ok, err = pcall(stagehand.port, 5)
    assert.is_false(ok)
    assert.matches("bad argument 'name' to stagehand.port: expected a string or nil, got 5", err, 1, true)
  end)

  it("stops a worker whose handle the game drops", function()
    local orch = T.new()
    local inbox, outbox = stagehand.port(), stagehand.port()
    local done
    do
      local w = stagehand.spawn(orch, "fixture_worker.service", inbox, outbox)
      done = w.done
      inbox:post(1)
      assert.equal(2, outbox:receive_within(WAIT))
    end
    collectgarbage()
    collectgarbage()
    assert.same({ "done", "stopped" }, { orch:wait(done, WAIT) })
  end)

  it("never stalls by its own clock", function()
    local orch, clock = T.new { stall_ms = 100 }
    local inbox, outbox = stagehand.port(), stagehand.port()
    local w = stagehand.spawn(orch, "fixture_worker.service", inbox, outbox)
    orch:step()
    clock:advance(60000)
    orch:step()
    assert.equal("running", w:state())
    inbox:close()
    assert.same({ "done", "stopped" }, { orch:wait(w.done, WAIT) })
    assert.equal("done", w:state())
  end)

  it("ends failed when its function raises", function()
    local orch = T.new()
    local w = stagehand.spawn(orch, "fixture_worker.boom", "the mixer broke")
    local st, err = orch:wait(w.done, WAIT)
    assert.equal("failed", st)
    assert.matches("the mixer broke", tostring(err.cause), 1, true)
    assert.equal("failed", w:state())
  end)

  it("names a bad name and arguments that cannot cross", function()
    local orch = T.new()
    local ok, err = pcall(stagehand.spawn, orch, "nodot")
    assert.is_false(ok)
    assert.matches("bad argument 'name' to stagehand.spawn: expected \"module.function\"", err, 1, true)
    local line = debug.getinfo(1, "l").currentline + 1
    ok, err = pcall(function() stagehand.spawn(orch, "fixture_worker.service", { f = print }) end)
    assert.is_false(ok)
    assert.matches("ports_spec.lua:" .. line .. ": bad argument 'args' to stagehand.spawn: args.f is a function", err,
      1, true)
    assert.equal(0, orch.nrunning)
  end)

  it("is named in the log when its orchestrator closes while it waits on a port", function()
    local lines = {}
    local orch = T.new { log = function(line) lines[#lines + 1] = line end }
    local inbox, outbox = stagehand.port(), stagehand.port()
    local w = stagehand.spawn(orch, "fixture_worker.service", inbox, outbox)
    inbox:post(1)
    assert.equal(2, outbox:receive_within(WAIT))
    assert.is_true(waits_on_something(w)) -- (back inside receive)
    orch:close()
    local address = tostring(inbox):match("%((0x%x+)%)") or tostring(inbox):match("%((%x+)%)")
    assert.matches("long-lived worker fixture_worker.service waits on a port (" .. address .. ") for ",
      table.concat(lines, "\n"), 1, true)
    assert.equal("cancelled", w.done:state())
  end)
end)

describe("stagehand.rounds", function()
  -- Shares whose sum depends on the order it is added in: a different
  -- order on some participant would show in the last bits.
  local shares = {
    { 0.1, 1e16, 3 },
    { 0.2, -1e16, 1e-3 },
    { 0.3, 1, 7 },
    { 1e-17, 0.7, -2 },
  }

  it("steps again before sleeping when a round completed between a job's look and its watch", function()
    -- (the other participant, arriving just after the job looked, rang no
    -- bell: made here by arriving from inside the job's look)
    local orch, clock = T.new()
    local b = stagehand.rounds(2, 1)
    local methods = getmetatable(b).__index
    local poll, injected = methods._poll, false
    methods._poll = function(self, rn, out)
      local st = poll(self, rn, out)
      if st == "wait" and rawequal(self, b) and not injected then
        injected = true
        assert(self:_begin(rn, 2, 2, { 5 }, {}, "sum"))
      end
      return st
    end
    local ok, err = pcall(function()
      warm_up(orch)
      local out = {}
      local h = orch:run("participant", function(job)
        job:sleep(10)
        return b:sum(1, 2, 1, { 4 }, out)
      end)
      clock:advance(10)
      orch:step()
      assert.is_true(injected)
      assert.equal("running", h:state())
      assert.equal(0, orch:next_wake())
      assert.same({ "done", true }, { orch:wait(h, 5000) })
      assert.equal(9, out[1])
      assert.equal(10, clock.now)
    end)
    methods._poll = poll
    assert(ok, err)
    b:_leave(1) -- (the participant that arrived from inside the look)
    assert.no_leaks(orch)
  end)

  it("sums four workers' shares in index order, giving each the same bits", function()
    local orch = T.new()
    local pool = stagehand.pool(orch, { module = "fixture_worker", size = 4 })
    local b = stagehand.rounds(4, 3)
    local hs = {}
    for i = 4, 1, -1 do -- (started in the reverse order: arrival order is not index order)
      hs[#hs + 1] = pool:run("sum", { b = b, index = i, count = 4, share = shares[i] })
    end
    local want = {}
    for k = 1, 3 do
      local s = shares[1][k]
      for i = 2, 4 do s = s + shares[i][k] end
      want[k] = s
    end
    for _, h in ipairs(hs) do
      local st, ok, out = orch:wait(h, WAIT)
      assert.equal("done", st)
      assert.is_true(ok)
      for k = 1, 3 do assert.equal(string.format("%.17g", want[k]), string.format("%.17g", out[k])) end
    end
    orch:wait(pool:destroy(), WAIT)
  end)

  it("takes min and max", function()
    local orch = T.new()
    local pool = stagehand.pool(orch, { module = "fixture_worker", size = 2 })
    local b = stagehand.rounds(2, 2)
    local h1 = pool:run("sum", { b = b, op = "max", index = 1, count = 2, share = { 1, 9 } })
    local h2 = pool:run("sum", { b = b, op = "max", index = 2, count = 2, share = { 5, -1 } })
    assert.same({ 5, 9 }, select(3, orch:wait(h1, WAIT)))
    assert.same({ 5, 9 }, select(3, orch:wait(h2, WAIT)))
    local c = stagehand.rounds(2, 1)
    h1 = pool:run("sum", { b = c, op = "min", index = 1, count = 2, share = { 3 } })
    h2 = pool:run("sum", { b = c, op = "min", index = 2, count = 2, share = { -4 } })
    assert.same({ -4 }, select(3, orch:wait(h1, WAIT)))
    assert.same({ -4 }, select(3, orch:wait(h2, WAIT)))
    orch:wait(pool:destroy(), WAIT)
  end)

  it("lets a job on the game's side meet workers at a round", function()
    local orch = T.new()
    local pool = stagehand.pool(orch, { module = "fixture_worker", size = 2 })
    local b = stagehand.rounds(3, 1)
    local w1 = pool:run("sum", { b = b, index = 1, count = 3, share = { 1 } })
    local w2 = pool:run("sum", { b = b, index = 2, count = 3, share = { 2 } })
    local main = orch:run("main side", function()
      local out = {}
      local ok = b:sum(1, 3, 3, { 4 }, out)
      return ok, out[1]
    end)
    assert.same({ "done", true, 7 }, { orch:wait(main, WAIT) })
    assert.same({ 7 }, select(3, orch:wait(w1, WAIT)))
    assert.same({ 7 }, select(3, orch:wait(w2, WAIT)))
    orch:wait(pool:destroy(), WAIT)
  end)

  it("releases every waiter with false on abort, now and later", function()
    local orch = T.new()
    local pool = stagehand.pool(orch, { module = "fixture_worker", size = 3 })
    local b = stagehand.rounds(5)
    local hs = {}
    for i = 1, 3 do hs[i] = pool:run("arrive", { b = b, round = 1, count = 5 }) end
    local in_job = orch:run("main side", function() return b:arrive(1, 5) end)
    -- (three workers and a job wait for a fifth that never comes)
    b:abort()
    for i = 1, 3 do assert.same({ "done", false }, { orch:wait(hs[i], WAIT) }) end
    assert.same({ "done", false }, { orch:wait(in_job, WAIT) })
    assert.is_true(b:aborted())
    local late = orch:run("late", function() return b:arrive(2, 1) end)
    assert.same({ "done", false }, { late:result() })
    orch:wait(pool:destroy(), WAIT)
  end)

  it("names bad arguments", function()
    assert.has_error(function() stagehand.rounds(0) end,
      "bad argument 'participants' to stagehand.rounds: expected an integer from 1 to 4096, got 0")
    for _, bad in ipairs { 4097, 1.5, "2", -1 } do
      assert.error_matches(function() stagehand.rounds(bad) end,
        "bad argument 'participants' to stagehand.rounds: expected an integer from 1 to 4096", nil, true)
    end
    for _, bad in ipairs { -1, 65537, 1.5, "8", true } do
      assert.error_matches(function() stagehand.rounds(2, bad) end,
        "bad argument 'share_len' to stagehand.rounds: expected an integer from 0 to 65536, got "
        .. (type(bad) == "string" and '"8"' or tostring(bad)), nil, true)
    end
    assert.is_false(stagehand.rounds(4096):aborted()) -- (each limit taken)
    assert.is_false(stagehand.rounds(2, 65536):aborted())
    local orch = T.new()
    local b = stagehand.rounds(2, 2)
    local h = orch:run("bad share", function() return b:sum(1, 2, 1, { 1, "x" }, {}) end)
    assert.equal("failed", h:state())
    assert.matches("share[2] is string, not a number", tostring(select(2, h:result()).cause), 1, true)
    h = orch:run("bad index", function() return b:sum(1, 2, 3, { 1, 2 }, {}) end)
    assert.matches("bad argument 'index' to b:sum", tostring(select(2, h:result()).cause), 1, true)
    h = orch:run("bad count", function() return b:arrive(1, 3) end)
    assert.matches("bad argument 'count' to b:arrive", tostring(select(2, h:result()).cause), 1, true)
    local ok, err = pcall(b.arrive, b, 1, 2)
    assert.is_false(ok)
    assert.matches("b:arrive cannot wait on the main thread outside a job", err, 1, true)
    -- at the game's line in a job, and at the worker's line in a worker
    local line = debug.getinfo(1, "l").currentline + 2
    h = orch:run("bad round", function()
      local done = b:arrive(0 / 0, 1)
      return done
    end)
    assert.matches("ports_spec.lua:" .. line .. ": bad argument 'round' to b:arrive: expected a number, got ",
      tostring(select(2, h:result()).cause), 1, true)
    h = orch:run("bad count type", function()
      local done = b:arrive(1, "2")
      return done
    end)
    assert.matches("ports_spec.lua:" .. (line + 6) .. ": bad argument 'count' to b:arrive: expected an integer from 1 "
      .. "to 2, got \"2\"", tostring(select(2, h:result()).cause), 1, true)
    local pool = stagehand.pool(orch, { module = "fixture_worker", size = 1 })
    local st, wok, werr, wline, dotted = orch:wait(pool:run("bad_round", stagehand.rounds(1, 1)), WAIT)
    assert.same({ "done", false }, { st, wok })
    assert.matches("fixture_worker.lua:" .. wline .. ": bad argument 'index' to b:sum: expected an integer from 1 to 1, "
      .. "got 7", werr, 1, true)
    assert.matches("fixture_worker.lua:" .. (wline + 1) .. ": bad self to b:arrive: expected a round barrier "
      .. "(stagehand.rounds()), got 1 (call it with a colon: b:arrive(...))", dotted, 1, true)
    -- A worker's port calls name their arguments, and a bad self, as the game's side does.
    local said, first
    st, said, first = orch:wait(pool:run("bad_port_calls", stagehand.port()), WAIT)
    assert.equal("done", st)
    local expected = {
      "bad argument 'ms' to port:receive_within: expected a number >= 0, got \"so\\non\\001\"",
      "bad argument 'ms' to port:receive_within: expected a number >= 0, got nan",
      "bad argument 'fn' to port:drain: expected a function, got 5",
      "bad argument 'fn' to port:drain_for: expected a function, got nil",
      "bad argument 'ms' to port:drain_for: expected a number >= 0, got -1",
      "bad self to port:receive_within: expected a port (stagehand.port()), got 5 (call it with a colon: "
        .. "port:receive_within(...))",
      "bad self to port:count: expected a port (stagehand.port()), got nil (call it with a colon: port:count(...))",
      "bad self to port:post: expected a port (stagehand.port()), got \"v\" (call it with a colon: port:post(...))",
    }
    for i, want in ipairs(expected) do
      assert.matches("fixture_worker.lua:" .. (first + i - 1) .. ": " .. want, said[i], 1, true)
    end
    orch:wait(pool:destroy(), WAIT)
    assert.equal(0, T.settle(orch, 1000))
  end)
end)

describe("threads under the luv driver", function()
  local has_luv = pcall(require, "luv")
  if not has_luv then return end

  -- Runs the game's own loop (uv.run, not orch:loop(): it ends when no
  -- handle holds it) under a watchdog that never holds the loop itself
  -- and stops it after WAIT. Returns whether the watchdog fired, then
  -- what pcall said of the run.
  local function run_watched()
    local uv = require "luv"
    local hung = false
    local watchdog = uv.new_timer()
    watchdog:start(WAIT, 0, function()
      hung = true
      uv.stop()
    end)
    watchdog:unref()
    local ok, err = pcall(uv.run)
    watchdog:close()
    return hung, ok, err
  end
  it("wakes the loop with a worker's reply, with nothing else due", function()
    local uv = require "luv"
    local orch = stagehand.new { driver = "luv", log = function() end }
    local pool = stagehand.pool(orch, { module = "fixture_worker", size = 1 })
    -- (t0 before the run: the worker may start its 30 ms sleep before run
    -- returns, and a main thread held up after that saw less of it)
    local t0 = uv.hrtime()
    local h = pool:run("sleep", 30)
    orch:loop()
    assert.same({ "done", true }, { h:result() })
    assert.is_true((uv.hrtime() - t0) / 1e6 >= 25) -- (the loop waited for the reply, rather than return)
    orch:wait(pool:destroy(), WAIT)
    orch:close()
  end)

  -- Regression: a worker's reply stepped the orchestrator through the
  -- timer's callback, which forgot the timer was still armed for the stall
  -- check; with nothing left to wait for it was never stopped, and held the
  -- game's own uv.run() open until the stall time passed.
  it("leaves the game's own uv.run() once a worker's reply ends the last job", function()
    local uv = require "luv"
    local orch = stagehand.new { driver = "luv", stall_ms = 600000, log = function() end }
    local pool = stagehand.pool(orch, { module = "fixture_worker", size = 1 })
    local h = orch:run("decode", function(job) return job:await(pool:run("add", { a = 1, b = 2 })) end)
    local hung, ok, err = run_watched()
    assert(ok, err)
    assert.is_false(hung)
    assert.same({ "done", 3 }, { h:result() })
    local held = {}
    uv.walk(function(hd)
      if hd:is_active() and hd:has_ref() then held[#held + 1] = tostring(hd) end
    end)
    assert.same({}, held)
    orch:wait(pool:destroy(), WAIT)
    orch:close()
  end)

  -- Regression: resume asked for no step, so the request a paused pool
  -- held waited for the next stall check (minutes on), or for ever.
  it("starts what a paused pool holds once the game resumes it from its own loop", function()
    local uv = require "luv"
    local orch = stagehand.new { driver = "luv", stall_ms = 600000, log = function() end }
    local pool = stagehand.pool(orch, { module = "fixture_worker", size = 1 })
    pool:pause()
    local h = pool:run("add", { a = 1, b = 2 })
    local later = uv.new_timer()
    later:start(0, 0, function() pool:resume() end) -- (the player closed the menu)
    local hung, ok, err = run_watched()
    later:close()
    assert(ok, err)
    assert.is_false(hung)
    assert.same({ "done", 3 }, { h:result() })
    orch:wait(pool:destroy(), WAIT)
    orch:close()
  end)

  it("steps again before the loop sleeps when a value came between a job's look and its watch", function()
    local orch = stagehand.new { driver = "luv", stall_ms = 600000, log = function() end }
    local q, p = stagehand.port(), stagehand.port()
    local warm = orch:run("warm", function() return q:receive() end)
    q:post(1)
    assert.equal("done", (orch:wait(warm, WAIT)))
    local injected, undo = post_after_look(p)
    local h = orch:run("listener", function(job)
      job:sleep(5)
      return p:receive()
    end)
    local hung, ok, err = run_watched()
    undo()
    assert(ok, err)
    assert.is_true(injected())
    assert.is_false(hung)
    assert.same({ "done", "between" }, { h:result() })
    orch:close()
  end)

  local count = require("spec.helpers").proc_count

  -- Regression: the luv driver's timer and poll callbacks held their
  -- orchestrator, so a dropped one stayed, with its threads and its
  -- notifier's descriptors.
  it("lets dropped orchestrators go, with their threads and descriptors", function()
    local uv = require "luv"
    local weak = setmetatable({}, { __mode = "k" })
    local function settle()
      for _ = 1, 3 do
        collectgarbage()
        collectgarbage()
        uv.run("nowait") -- (where their handles are closed)
      end
    end
    settle()
    local threads0, fds0 = count("task"), count("fd")
    for i = 1, 5 do
      local orch = stagehand.new { driver = "luv", log = function() end }
      local pool = stagehand.pool(orch, { module = "fixture_worker", size = 2 })
      assert.same({ "done", i + 1 }, { orch:wait(pool:run("add", { a = i, b = 1 }), WAIT) })
      if i % 2 == 0 then orch:wait(pool:destroy(), WAIT) end -- (some destroyed, some dropped with their pools)
      weak[orch] = true
    end
    assert.is_true(count("task") > threads0)
    local left, threads, fds
    for _ = 1, 200 do
      settle()
      left, threads, fds = 0, count("task"), count("fd")
      for _ in pairs(weak) do left = left + 1 end
      if left == 0 and threads <= threads0 and fds <= fds0 then break end
      stagehand.port():receive_within(10) -- (time for the workers' threads to exit)
    end
    assert.equal(0, left)
    assert.is_true(threads <= threads0, threads .. " threads, " .. threads0 .. " before")
    assert.is_true(fds <= fds0, fds .. " descriptors, " .. fds0 .. " before")
  end)
end)
