-- Worker pools: requests that run on other threads and come back as jobs
-- that always end. The workers run spec/fixtures/fixture_worker.lua.
--
-- Time: the orchestrators run on fake clocks; what a worker does takes
-- real time, which these specs wait for with orch:wait (woken by the
-- reply, not by sleeping) or by receiving on a port the worker posts to.
-- They also run inside LÖVE (spec/love_busted), where the workers are
-- LÖVE threads: the few lines that differ there say how.
local stagehand = require "stagehand"
local T = require "stagehand.testing"

local love = rawget(_G, "love")
local in_love = type(love) == "table" and love.thread ~= nil

if not package.path:find("spec/fixtures/?.lua", 1, true) then
  package.path = "spec/fixtures/?.lua;" .. package.path
end

local WAIT = 10000 -- (ms: what a worker may take on a loaded host before a spec gives up)

local function new_pool(orch, opts)
  opts = opts or {}
  opts.module = opts.module or "fixture_worker"
  return stagehand.pool(orch, opts)
end

local function pack(...) return { n = select("#", ...), ... } end

-- A worker held inside `hold` until the spec lets it go.
local function holder()
  return { started = stagehand.port(), go = stagehand.port() }
end

-- (Requests go to workers in the step's grant rounds: a step first.)
local stepped
local function started(p)
  stepped:step()
  assert.is_not_nil(p.started:receive_within(WAIT), "the worker never started")
end

describe("stagehand.pool", function()
  local orch, clock, pools, logged
  before_each(function()
    logged = {}
    orch, clock = T.new { stall_ms = 1000, log = function(line) logged[#logged + 1] = line end }
    stepped = orch
    pools = {}
  end)
  after_each(function()
    for _, p in ipairs(pools) do orch:wait(p:destroy(), WAIT) end
    orch:close()
  end)
  local function pool(opts)
    local p = new_pool(orch, opts)
    pools[#pools + 1] = p
    return p
  end

  describe(":run", function()
    it("runs a module's function on a worker and ends done with what it returned", function()
      local p = pool { size = 2 }
      local h = p:run("add", { a = 2, b = 40 })
      assert.same({ "done", 42 }, { orch:wait(h, WAIT) })
      assert.equal("fixture_worker.add", h.label)
    end)

    it("copies tables both ways, keeping cycles, shared tables, NUL bytes and every value", function()
      local p = pool { size = 1 }
      local shared = { "shared" }
      local t = { name = "mesh", bytes = "a\0b\0c", list = { shared, shared }, flag = false, n = 1.5, [3] = "three" }
      t.self = t
      local st, back, two = orch:wait(p:run("echo", t), WAIT)
      assert.equal("done", st)
      assert.is_nil(two)
      assert.are_not.equal(t, back) -- (a copy)
      assert.equal(back, back.self)
      assert.equal(back.list[1], back.list[2])
      assert.equal("shared", back.list[1][1])
      assert.equal("a\0b\0c", back.bytes)
      assert.equal(5, #back.bytes)
      assert.is_false(back.flag)
      assert.equal(1.5, back.n)
      assert.equal("three", back[3])
    end)

    it("hands back ports and round barriers it was given as the same channels, and replies larger than the request", function()
      local p = pool { size = 1 }
      local port, rounds = stagehand.port(), stagehand.rounds(1)
      local st, back = orch:wait(p:run("echo", { port = port, again = port, rounds = rounds }), WAIT)
      assert.equal("done", st)
      assert.is_true(back.port == back.again and back.port == port and back.rounds == rounds)
      assert.is_true(back.port:post("through the reply"))
      assert.equal("through the reply", port:receive_within(WAIT))
      -- (the reply is written into the request's message: one that outgrows it, and the next one after it)
      local big = ("x"):rep(100000)
      st, back = orch:wait(p:run("echo", big), WAIT)
      assert.equal("done", st)
      assert.equal(big, back)
      st, back = orch:wait(p:run("echo", "small"), WAIT)
      assert.same({ "done", "small" }, { st, back })
    end)

    it("hands every value the function returns back, nils included", function()
      local p = pool { size = 1 }
      local h = p:run("echo", "one")
      assert.same({ "done", "one" }, { orch:wait(h, WAIT) })
      local st, v = orch:wait(p:run("echo", nil), WAIT)
      assert.equal("done", st)
      assert.is_nil(v)
      assert.same({ n = 4, "done", 1, nil, nil }, pack(orch:wait(p:run("several", { n = 3, 1 }), WAIT)))
    end)

    -- Regression: a function that returned nothing ended its request done
    -- with no values recorded at all, and reading them raised inside
    -- stagehand (h:result(), an await).
    it("ends done with no values a request whose function returns none", function()
      local p = pool { size = 1 }
      local h = p:run("nothing")
      assert.same({ n = 1, "done" }, pack(orch:wait(h, WAIT)))
      assert.same({ n = 1, "done" }, pack(h:result()))
      local awaited = orch:run("awaits it", function(job) return select("#", job:await(p:run("nothing"))) end)
      assert.same({ "done", 0 }, { orch:wait(awaited, WAIT) })
    end)

    if math.type then
      it("keeps Lua 5.4's integers integers, both ways", function()
        local p = pool { size = 1 }
        local st, ikind, fkind, back = orch:wait(p:run("kinds", { i = 3, f = 3.0 }), WAIT)
        assert.equal("done", st)
        assert.equal("integer", ikind)
        assert.equal("float", fkind)
        assert.equal("integer", math.type(back.i))
        assert.equal("float", math.type(back.f))
      end)
    end

    it("refuses a payload holding a function, naming where it is, and queues nothing", function()
      local p = pool { size = 1 }
      local line = debug.getinfo(1, "l").currentline + 1
      local ok, err = pcall(function() p:run("echo", { mesh = { on_done = function() end } }) end)
      assert.is_false(ok)
      assert.matches("threads_spec.lua:" .. line .. ": bad argument 'payload' to pool:run: payload.mesh.on_done is a"
        .. " function; only plain data, ports" .. (in_love and ", round barriers and LÖVE objects" or " and round barriers")
        .. " cross threads", err, 1, true)
      assert.equal(0, p:pending())
      assert.equal(0, orch.nrunning)
    end)

    it("runs on native threads when asked, on LÖVE threads only inside LÖVE, and refuses an unknown kind", function()
      if stagehand.backend == "lua" then -- (inside LÖVE, with no native core: its threads are LÖVE's only)
        assert.error_matches(function() new_pool(orch, { threads = "native" }) end,
          "'opts.threads' to stagehand.pool: expected \"love\" on the pure-Lua core", nil, true)
      else
        local p = pool { size = 1, threads = "native" }
        assert.is_falsy(p.love)
        assert.same({ "done", 4 }, { orch:wait(p:run("echo", 4), WAIT) })
      end
      if in_love then
        local lp = pool { size = 1, threads = "love" }
        assert.is_truthy(lp.love)
        assert.same({ "done", 5 }, { orch:wait(lp:run("echo", 5), WAIT) })
      else
        assert.has_error(function() new_pool(orch, { threads = "love" }) end,
          "bad argument 'opts.threads' to stagehand.pool: expected \"native\" outside LÖVE (love.thread is not"
          .. " loaded here), got \"love\"")
      end
      assert.error_matches(function() new_pool(orch, { threads = "green" }) end,
        "'opts.threads' to stagehand.pool: expected \"love\" or \"native\"", nil, true)
      -- (nothing was left behind by the refused ones)
      assert.same({ "done", 6 }, { orch:wait(pool({ size = 1 }):run("echo", 6), WAIT) })
      assert.equal(0, orch.nrunning)
    end)

    it("refuses coroutines and userdata, with their paths", function()
      local p = pool { size = 1 }
      local ok, err = pcall(p.run, p, "echo", { 1, { co = coroutine.create(function() end) } })
      assert.is_false(ok)
      assert.matches("payload[2].co is a thread", err, 1, true)
      ok, err = pcall(p.run, p, "echo", { ["a key"] = io.stdout })
      assert.is_false(ok)
      assert.matches('payload["a key"] is a userdata', err, 1, true)
      -- (number keys as Lua would read them back: whole ones in full, others to 17 digits)
      for key, path in pairs { [1.5] = "[1.5]", [-0.25] = "[-0.25]", [1e20] = "[1e+20]", [2 ^ 53] = "[9007199254740992]" } do
        ok, err = pcall(p.run, p, "echo", { [key] = { x = print } })
        assert.is_false(ok)
        assert.matches("payload" .. path .. ".x is a function", err, 1, true)
      end
      -- (what a table used as a key holds is named under that key)
      ok, err = pcall(p.run, p, "echo", { mesh = { [{ f = print }] = 1 } })
      assert.is_false(ok)
      assert.matches("payload.mesh[<table key>].f is a function", err, 1, true)
      ok, err = pcall(p.run, p, "echo", { mesh = { [true] = print } })
      assert.is_false(ok)
      assert.matches("payload.mesh[<boolean key>] is a function", err, 1, true)
      assert.equal(0, p:pending())
    end)

    it("fails a request whose result cannot cross, naming it", function()
      local p = pool { size = 1 }
      local st, err = orch:wait(p:run("give_function"), WAIT)
      assert.equal("failed", st)
      assert.matches("result is a function", tostring(err.cause), 1, true)
    end)

    it("fails only the request whose function raised, with the worker's message and traceback", function()
      local p = pool { size = 1 }
      local st, err = orch:wait(p:run("boom"), WAIT)
      assert.equal("failed", st)
      assert.matches("fixture_worker.lua:%d+: decode failed: bad header", err.cause)
      assert.matches("stack traceback", err.traceback, 1, true)
      assert.matches("fixture_worker.lua", err.traceback, 1, true)
      assert.same({ "done", 3 }, { orch:wait(p:run("add", { a = 1, b = 2 }), WAIT) })
    end)

    -- Regression: the traceback of a stack overflow looked for the
    -- request's frame level by level, each lua_getstack walking from the
    -- top: on Lua 5.4 the request stalled instead of failing.
    it("fails a request whose function overflows the stack, with a traceback, at once", function()
      -- (some 200,000 frames on Lua 5.4: 0.5 s, 2 s under the sanitizers,
      -- so on a real clock with 20 s to make progress; the search it
      -- replaced stalled there)
      local now_ms = require("stagehand.core.backend").now_ms
      local o = stagehand.new { driver = "manual", stall_ms = 2 * WAIT, log = function() end,
        clock = function() return now_ms() end }
      local p = new_pool(o, { size = 1 })
      local st, err = o:wait(p:run("overflow", 1), 3 * WAIT)
      assert.equal("failed", st)
      assert.matches("stack overflow", err.message, 1, true)
      assert.matches("fixture_worker.lua", err.traceback, 1, true)
      assert.same({ "done", 3 }, { o:wait(p:run("add", { a = 1, b = 2 }), WAIT) })
      assert.equal("done", (o:wait(p:destroy(), WAIT)))
      o:close()
    end)

    it("reads a raised table by its message, and hands the table over as the cause", function()
      local p = pool { size = 1 }
      local st, err = orch:wait(p:run("raise_table"), WAIT)
      assert.equal("failed", st)
      assert.same({ message = "a table with a message" }, err.cause)
      assert.equal("fixture_worker.raise_table failed: a table with a message", err.message)
    end)

    -- Regression: error({code = 42}) in a worker reached the game as the
    -- string "(a table was raised)".
    it("hands a raised plain-data table over as the cause, copied, with a readable message", function()
      local p = pool { size = 1 }
      local st, err = orch:wait(p:run("raise_code", 42), WAIT)
      assert.equal("failed", st)
      assert.same({ code = 42, where = { "deep", 1 } }, err.cause)
      assert.matches("^fixture_worker.raise_code failed: a table {code = 42", err.message)
      assert.matches("stack traceback", err.traceback, 1, true)
      -- (what cannot cross goes as what it says of itself)
      st, err = orch:wait(p:run("raise_with_function"), WAIT)
      assert.equal("failed", st)
      assert.equal("(a table was raised)", err.cause)
      assert.same({ "done", 3 }, { orch:wait(p:run("add", { a = 1, b = 2 }), WAIT) })
    end)

    -- Regression: a worker that ran out of memory reported the previous
    -- request's error (memory errors skip the message handler), and kept
    -- what it had allocated while the game's state went short. (POSIX:
    -- the limit is a shell's ulimit; Windows has no such command. The
    -- process is started through luv, which the 32-bit x86 run, make
    -- test-x86, does not have: luv_spec fails wherever luv should load.)
    -- (Native threads: not on the pure-Lua core, which runs them only as
    -- LÖVE's, in spec/love_busted.)
    local posix = package.config:sub(1, 1) == "/"
    if posix and stagehand.backend ~= "lua" and pcall(require, "stagehand.driver.luv") then
      it("fails a request that runs out of memory with \"not enough memory\", and gives the memory back", function()
        -- (in a process of its own, under a limit on its address space)
        local out, status = require("spec.helpers").run_clean("ulimit -v 700000; exec "
          .. require("spec.helpers").interpreter() .. " spec/fixtures/worker_oom.lua")
        out = out .. "exit=" .. tostring(status)
        assert.matches("first: fixture_worker.boom failed: [^\n]*an earlier failure\n", out)
        assert.matches("hog: failed: not enough memory\n", out, 1, true)
        assert.matches("next: done %d+\n", out)
        assert.matches("exit=0", out, 1, true)
        local rss = tonumber(out:match("rss after: (%d+)"))
        assert.is_true(rss ~= nil and rss < 300, "the process holds " .. tostring(rss) .. " MB after the failure")
        assert.is_true(tonumber(out:match("next: done (%d+)")) < 50, out)
      end)
    end

    -- Regression: worker.sleep's errors said "bad argument #1 to '?'".
    it("names worker.sleep and its argument when given a bad time", function()
      local p = pool { size = 1 }
      for _, bad in ipairs { -1, 0 / 0, "x" } do
        local st, ok, err = orch:wait(p:run("sleep_bad", bad), WAIT)
        assert.equal("done", st)
        assert.is_false(ok)
        assert.matches("bad argument 'ms' to worker.sleep: expected a number >= 0, got ", err, 1, true)
      end
    end)

    it("fails a request for a function the module lacks, naming both, and stays usable", function()
      local p = pool { size = 1 }
      local st, err = orch:wait(p:run("nope"), WAIT)
      assert.equal("failed", st)
      assert.matches("module 'fixture_worker' has no function 'nope'", tostring(err.cause), 1, true)
      assert.same({ "done", 5 }, { orch:wait(p:run("add", { a = 2, b = 3 }), WAIT) })
    end)

    it("fails every request of a module that does not load, naming the module and why", function()
      local p = pool { module = "fixture_broken", size = 1 }
      local st, err = orch:wait(p:run("anything"), WAIT)
      assert.equal("failed", st)
      assert.matches("module 'fixture_broken' failed to load: .*the texture codec is missing", tostring(err.cause))
      st = orch:wait(p:run("again"), WAIT)
      assert.equal("failed", st)
    end)

    it("fails a request of a module nobody can find, its message listing where require looked", function()
      local p = pool { module = "fixture_nowhere", size = 1 }
      local st, err = orch:wait(p:run("anything"), WAIT)
      assert.equal("failed", st)
      local msg = tostring(err)
      assert.matches("module 'fixture_nowhere' failed to load: module 'fixture_nowhere' not found: "
        .. "no field package.preload['fixture_nowhere']; no "
        .. (in_love and "'fixture_nowhere' in LOVE game directories" or "file '"), msg, 1, true)
      assert.is_nil(msg:find("\n", 1, true))
      assert.matches("\n%s*no file '[^']*fixture_nowhere", tostring(err.cause)) -- (the cause keeps every line)
    end)

    it("runs a module given as source text, named by `module`", function()
      local p = pool { module = "inline", source = "return { twice = function(x) return x * 2 end }", size = 1 }
      assert.same({ "done", 42 }, { orch:wait(p:run("twice", 21), WAIT) })
      local st, err = orch:wait(p:run("thrice", 1), WAIT)
      assert.equal("failed", st)
      assert.matches("module 'inline' has no function 'thrice'", tostring(err.cause), 1, true)
    end)

    it("is awaited from a job like any Handle", function()
      local p = pool { size = 2 }
      local h = orch:run("loader", function(job)
        local sum = job:await(p:run("add", { a = 1, b = 1 }))
        local again = job:await(p:run("add", { a = sum, b = 10 }))
        return again
      end)
      assert.same({ "done", 12 }, { orch:wait(h, WAIT) })
    end)

    it("runs keyed requests once, shared with when", function()
      local p = pool { size = 1 }
      local hold, out = holder(), stagehand.port()
      local first = p:run("hold", hold)
      started(hold)
      local follower = orch:when("texture:stone")
      local a = p:run("counted", { out = out, key = "texture:stone" }, { key = "texture:stone" })
      local b = p:run("counted", { out = out, key = "texture:stone" }, { key = "texture:stone" })
      assert.equal(1, p:pending() - 1) -- (one keyed request queued, behind the holder)
      hold.go:post("go")
      assert.same({ "done", "ran texture:stone" }, { orch:wait(a, WAIT) })
      assert.same({ "done", "ran texture:stone" }, { b:result() })
      assert.same({ "done", "ran texture:stone" }, { orch:wait(follower, WAIT) })
      assert.equal("done", orch:wait(first, WAIT))
      assert.equal(1, out:drain(function() end))
    end)

    it("runs queued requests by priority, then in the order they came", function()
      local p = pool { size = 1 }
      local hold, out = holder(), stagehand.port()
      local first = p:run("hold", hold)
      started(hold)
      local hs = {}
      for _, r in ipairs { { "low", 1 }, { "high-a", 5 }, { "mid", 3 }, { "high-b", 5 }, { "none" } } do
        hs[#hs + 1] = p:run("mark", { out = out, name = r[1] }, { priority = r[2] })
      end
      assert.equal(5, p:queued())
      hold.go:post(true)
      orch:wait(stagehand.all(hs), WAIT)
      orch:wait(first, WAIT)
      local order = {}
      out:drain(function(v) order[#order + 1] = v end)
      assert.same({ "high-a", "high-b", "mid", "low", "none" }, order)
    end)

    it("re-sorts the queue by reprioritise, keeping queue order within a priority", function()
      local p = pool { size = 1 }
      local hold, out = holder(), stagehand.port()
      local first = p:run("hold", hold)
      started(hold)
      local near = { a = 1, b = 9, c = 1, d = 5 }
      local hs = {}
      for _, name in ipairs { "a", "b", "c", "d" } do
        hs[#hs + 1] = p:run("mark", { out = out, name = name }, { priority = 10 - near[name] })
      end
      local seen = {}
      p:reprioritise(function(payload, prio)
        seen[#seen + 1] = payload.name .. "=" .. prio
        return near[payload.name] -- the player moved: what was far is near now
      end)
      assert.same({ "a=9", "c=9", "d=5", "b=1" }, seen) -- (asked in queue order)
      hold.go:post(true)
      orch:wait(stagehand.all(hs), WAIT)
      orch:wait(first, WAIT)
      local order = {}
      out:drain(function(v) order[#order + 1] = v end)
      assert.same({ "b", "d", "a", "c" }, order)
    end)

    it("collects in one step every reply that came, however many batches they fill", function()
      local p = pool { size = 1 }
      local out, quick = stagehand.port(), {}
      for i = 1, 600 do quick[i] = p:run("nothing", true) end
      local last = p:run("mark", { out = out, name = "last" })
      p.depth = 700 -- (white-box: the whole queue offered in one round)
      orch:step() -- (offered to the worker, which takes them and replies in turn)
      assert.equal("last", out:receive_within(WAIT)) -- (every quick reply was sent before it)
      orch:step()
      local left = 0
      for i = 1, 600 do
        if quick[i]:state() ~= "done" then left = left + 1 end
      end
      assert.equal(0, left)
      orch:wait(last, WAIT)
    end)
  end)

  -- Game code may run while pool:run makes a request's job: the
  -- orchestrator's clock, a load tracker's listener.
  describe("with game code running while a request's job is made", function()
    -- (a real clock: what a worker does takes real time, and a spec that
    -- breaks gives up after WAIT instead of hanging)
    local now_ms = require("stagehand.core.backend").now_ms
    local function clocked(read)
      local o = stagehand.new { driver = "manual", stall_ms = 10 * WAIT, log = function() end,
        clock = function() if read then read() end return now_ms() end }
      local p = new_pool(o, { size = 1 })
      return o, p, function(fn) read = fn end
    end

    it("runs a request made inside it and its own, each with its function and payload", function()
      local o, p, on_read = clocked()
      local inner
      on_read(function()
        on_read(nil)
        inner = p:run("add", { a = 10, b = 20 })
      end)
      local outer = p:run("echo", "outer")
      assert.same({ "done", "outer" }, { o:wait(outer, WAIT) })
      assert.same({ "done", 30 }, { o:wait(inner, WAIT) })
      assert.equal(0, p:pending())
      o:wait(p:destroy(), WAIT)
      o:close()
    end)

    it("fails the request when that code made its payload one that cannot cross", function()
      local o, p, on_read = clocked()
      local payload = { a = 1, b = 2 }
      local inner
      on_read(function()
        on_read(nil)
        inner = p:run("add", { a = 1, b = 1 }) -- (takes the staged request's place)
        payload.on_done = print
      end)
      local outer = p:run("add", payload)
      local st, err = o:wait(outer, WAIT)
      assert.equal("failed", st)
      assert.matches("payload.on_done is a function", tostring(err), 1, true)
      assert.same({ "done", 2 }, { o:wait(inner, WAIT) })
      assert.equal(0, p:pending())
      o:wait(p:destroy(), WAIT)
      o:close()
    end)

    it("cancels the request when that code destroyed the pool", function()
      local o, p, on_read = clocked()
      local destroyed
      on_read(function()
        on_read(nil)
        destroyed = p:destroy()
      end)
      local h = p:run("add", { a = 1, b = 1 })
      local st, err = o:wait(h, WAIT)
      assert.equal("cancelled", st)
      assert.matches("pool 'fixture_worker' was destroyed", tostring(err), 1, true)
      assert.same({ "done" }, { o:wait(destroyed, WAIT) })
      assert.equal(0, p:pending())
      o:close()
    end)
  end)

  describe(":pause and :resume", function()
    it("starts nothing while paused, and the queue's requests once resumed", function()
      local p = pool { size = 1 }
      local out = stagehand.port()
      p:pause()
      local h = p:run("mark", { out = out, name = "later" })
      orch:step()
      assert.is_nil(out:receive_within(50)) -- (nothing starts, however long it waits)
      assert.equal(1, p:queued())
      assert.equal(1, p:pending())
      p:resume()
      assert.same({ "done", "later" }, { orch:wait(h, WAIT) })
      assert.equal(0, p:pending())
    end)

    it("reads no priority function while paused, and ranks by what they say once resumed", function()
      local p = pool { size = 1 }
      local out = stagehand.port()
      local hold = holder()
      local first = p:run("hold", hold) -- (the worker is busy: the rest wait)
      started(hold)
      local reads, near = 0, "a"
      local hs = {}
      for _, name in ipairs { "a", "b", "c" } do
        hs[name] = p:run("mark", { out = out, name = name }, { priority = function()
          reads = reads + 1
          return name == near and "visible" or "background"
        end })
      end
      orch:step()
      assert.is_true(reads > 0)
      p:pause()
      hold.go:post(true)
      assert.equal("done", (orch:wait(first, WAIT)))
      reads = 0
      for _ = 1, 5 do orch:step() end
      assert.equal(0, reads)
      near = "c" -- (the player moved while the pool was paused)
      p:resume()
      -- (what was offered before the pause is withdrawn: nothing starts
      -- until the next step ranks the queue again)
      assert.is_nil(out:receive_within(100))
      for _, name in ipairs { "c", "a", "b" } do assert.equal("done", (orch:wait(hs[name], WAIT))) end
      assert.same({ "c", "a", "b" }, { out:receive_within(0), out:receive_within(0), out:receive_within(0) })
    end)

    -- Regression: resume asked for no step, so a host that sleeps until
    -- next_wake (or luv's loop) never started the queue.
    it("asks the host for a step once resumed, while its queue waits for a round", function()
      local p = pool { size = 1 }
      p:pause()
      local h = p:run("add", { a = 1, b = 1 })
      orch:step()
      assert.is_not_equal(0, orch:next_wake()) -- (nothing to do while paused)
      p:resume()
      assert.equal(0, orch:next_wake())
      assert.same({ "done", 2 }, { orch:wait(h, WAIT) })
    end)

    it("keeps a paused request's stall clock stopped: queued time is not stalling", function()
      local p = pool { size = 1 }
      p:pause()
      local h = p:run("add", { a = 1, b = 1 })
      clock:advance(5000)
      orch:step()
      assert.equal("running", h:state())
      p:resume()
      assert.same({ "done", 2 }, { orch:wait(h, WAIT) })
    end)
  end)

  describe("aborting", function()
    it("takes a queued request out of the queue at once; its function never runs", function()
      local p = pool { size = 1 }
      local hold, out = holder(), stagehand.port()
      local first = p:run("hold", hold)
      started(hold)
      local ctl = stagehand.controller()
      local h = p:run("mark", { out = out, name = "aborted" }, { signal = ctl.signal })
      assert.equal(1, p:queued())
      ctl:abort("scrolled away")
      assert.equal("cancelled", h:state())
      assert.equal(0, p:queued())
      hold.go:post(true)
      assert.equal("done", orch:wait(first, WAIT))
      assert.same({ "done", "after" }, { orch:wait(p:run("mark", { out = out, name = "after" }), WAIT) })
      local ran = {}
      out:drain(function(v) ran[#ran + 1] = v end)
      assert.same({ "after" }, ran)
    end)

    it("ends a running request's Handle at once, tells its worker, and drops the result", function()
      local p = pool { size = 1 }
      local go = stagehand.port()
      local ctl = stagehand.controller()
      local h = p:run("until_stopped", go, { signal = ctl.signal })
      orch:step() -- (a grant round offers it to the worker)
      assert.is_not_nil(go:receive_within(WAIT))
      orch:step()
      ctl:abort("not needed")
      assert.equal("cancelled", h:state())
      assert.equal(0, p:pending())
      -- The same worker, once its function returned, runs the next request.
      assert.same({ "done", 7 }, { orch:wait(p:run("add", { a = 3, b = 4 }), WAIT) })
    end)

    it("with respawn_on_abort, puts a fresh worker in the aborted one's place at once", function()
      local p = pool { size = 1, respawn_on_abort = true }
      local hold = holder()
      local ctl = stagehand.controller()
      local h = p:run("hold", hold, { signal = ctl.signal })
      started(hold)
      orch:step()
      ctl:abort("gone")
      assert.equal("cancelled", h:state())
      -- (the old worker is still inside hold: a new one answers meanwhile)
      assert.same({ "done", 9 }, { orch:wait(p:run("add", { a = 4, b = 5 }), WAIT) })
      hold.go:post("late") -- the old worker's result comes, and is dropped
      assert.same({ "done", 1 }, { orch:wait(p:run("add", { a = 0, b = 1 }), WAIT) })
    end)
  end)

  describe("stall clocks", function()
    it("stall a running request that makes no progress, and tell its worker to stop", function()
      local p = pool { size = 1 }
      local hold = holder()
      local h = p:run("hold", hold)
      started(hold)
      orch:step() -- (the step hears it started: its clock runs from here)
      clock:advance(1500)
      orch:step()
      assert.equal("stalled", h:state())
      assert.matches("fixture_worker.hold made no progress for 1 s", logged[1], 1, true)
      -- Told to stop, its receive returned nil and the worker is free again.
      assert.same({ "done", 2 }, { orch:wait(p:run("add", { a = 1, b = 1 }), WAIT) })
    end)

    it("run on a fake clock in orch:wait once a real wait brought nothing from a busy worker", function()
      -- (Fake time stands still while workers run, and orch:wait moves it
      -- on when a real wait of up to a second, here to the next stall check,
      -- brought nothing: the request stalls long before its worker's own
      -- 3 s wait would end it.)
      local o = T.new { stall_ms = 40, check_ms = 20, log = function() end }
      local p = new_pool(o, { size = 1 })
      local h = p:run("wait_within", { port = stagehand.port(), ms = 3000 })
      assert.equal("stalled", (o:wait(h, WAIT)))
      o:wait(p:destroy(), WAIT)
      o:close()
    end)

    it("stall a hung request whose start came just before another request ended, both unread", function()
      -- (A request that ends before the step reads that it started has
      -- its start dropped as no news; only its own: the start of the
      -- request beside it is what starts that one's stall clock.)
      local p = pool { size = 2 }
      local hold, out = holder(), stagehand.port()
      local hung = p:run("hold", hold)
      local quick = p:run("nothing", true)
      local after = p:run("mark", { out = out, name = "after the quick one" }) -- (on the quick one's worker)
      p.depth = 8 -- (white-box: all three offered in one round)
      started(hold)
      assert.equal("after the quick one", out:receive_within(WAIT)) -- (the quick one ended before it)
      assert.same({ "done" }, { orch:wait(quick, WAIT) })
      orch:wait(after, WAIT)
      clock:advance(1500)
      orch:step()
      assert.equal("stalled", hung:state())
    end)

    it("keep a request alive while its worker reports progress", function()
      local p = pool { size = 1 }
      local ports = { ack = stagehand.port(), tick = stagehand.port(), n = 3 }
      local h = p:run("ticks", ports)
      orch:step()
      for i = 1, 3 do
        assert.equal(i, ports.ack:receive_within(WAIT))
        orch:step() -- (hears the progress)
        clock:advance(800) -- (< stall_ms since the last progress, > since the start)
        orch:step()
        assert.equal("running", h:state())
        ports.tick:post(true)
      end
      assert.same({ "done", "all ticks" }, { orch:wait(h, WAIT) })
    end)

    it("show a worker's progress fraction in report()", function()
      local p = pool { size = 1 }
      local ports = { ack = stagehand.port(), tick = stagehand.port(), n = 4 }
      local h = p:run("ticks", ports, { label = "baking lightmap" })
      orch:step()
      assert.equal(1, ports.ack:receive_within(WAIT))
      orch:step()
      local r = orch:report()
      local line
      for _, job in ipairs(r.jobs or r) do
        if job.label == "baking lightmap" then line = job end
      end
      assert.is_not_nil(line)
      assert.equal(1, line.done)
      assert.equal(4, line.total)
      ports.tick:close()
      assert.same({ "done", "stopped" }, { orch:wait(h, WAIT) })
    end)

    it("fail a request whose worker reports a bad progress pair", function()
      local p = pool { size = 1 }
      local st, err = orch:wait(p:run("bad_progress"), WAIT)
      assert.equal("failed", st)
      assert.matches("bad argument 'total' to worker.progress", tostring(err.cause), 1, true)
    end)

    it("refuse in the worker every pair that job:progress would refuse, so no bad pair reaches the game", function()
      local p = pool { size = 1 }
      local h = p:run("progress_pairs")
      local st, refused = orch:wait(h, WAIT)
      assert.equal("done", st)
      local want = { "total", "total", "done", "total", "done", "done", "total", "total", "done", "done" }
      assert.equal(#want, #refused)
      for i = 1, #want do
        assert.matches("bad argument '" .. want[i] .. "' to worker.progress: expected a finite number", refused[i], 1, true)
      end
      assert.matches('got "1"', refused[6], 1, true)
      assert.matches("got nil", refused[8], 1, true)
      assert.matches("got nan", refused[3], 1, true) -- (not glibc's "-nan")
      assert.matches("got nan", refused[4], 1, true)
      assert.equal(0, orch:step()) -- (and the orchestrator steps on)
    end)

    -- Regression: a string given where a number belongs went into the
    -- message whole, newlines and all.
    it("shows a long string it was given on one line, cut, with its length", function()
      local p = pool { size = 1 }
      local st, msg = orch:wait(p:run("progress_long_string"), WAIT)
      assert.equal("done", st)
      assert.matches('got "' .. string.rep("x", 57) .. '"... (101 bytes)', msg, 1, true)
      assert.is_nil(msg:find("\n", 1, true))
    end)
  end)

  describe(":pause", function()
    it("says whether the pool is paused", function()
      local p = pool { size = 1 }
      assert.is_false(p:paused())
      p:pause()
      assert.is_true(p:paused())
      local h = p:run("add", { a = 1, b = 1 })
      assert.equal(1, p:queued())
      p:resume()
      assert.is_false(p:paused())
      assert.same({ "done", 2 }, { orch:wait(h, WAIT) })
      local ok, err = pcall(p.paused)
      assert.is_false(ok)
      assert.matches("bad self to pool:paused", err, 1, true)
    end)
  end)

  -- Until a reply waits to be collected (the manual driver's next wake is
  -- then 0), a millisecond at a time on a port nothing posts to.
  local function until_a_reply_waits(idle_port)
    local waited = 0
    while orch:next_wake() ~= 0 and waited < WAIT do
      idle_port:receive_within(1)
      waited = waited + 1
    end
  end

  describe("with a trace recording", function()
    -- Regression: the threads soak (seed 620) met a step that raised
    -- "bad argument #2 to 'pool_remove'". A request done before the step
    -- read that its worker took it is recorded as dispatched as its reply
    -- is collected; the trace reads its priority then, and a priority
    -- function that cancelled the request there left it in its pool's
    -- queue after its end.
    it("lets a priority function read as a reply is collected cancel that request", function()
      local p = pool { size = 1 }
      local tr = orch:trace()
      local h
      local armed = false
      local function prio()
        if armed then h:cancel("scrolled away") end
        return "scene"
      end
      h = p:run("add", { a = 1, b = 2 }, { priority = prio })
      orch:step() -- (offered to the worker, which takes it and replies)
      until_a_reply_waits(stagehand.port())
      armed = true
      orch:step()
      assert.equal("cancelled", h:state())
      armed = false
      assert.same({ "done", 7 }, { orch:wait(p:run("add", { a = 3, b = 4 }), WAIT) })
      assert.equal(0, p:pending())
      assert.no_leaks(orch)
      tr:stop()
    end)

    -- Regression: the threads soak (seed 1298) met a step that raised
    -- "attempt to compare number with nil". A request that said how far it
    -- was and replied before the step read that its worker took it is
    -- started as its progress is read; the trace read its priority then,
    -- and a function that destroyed the pool there collected the pool's
    -- events again, under the progress still being read.
    it("lets a priority function read as a request's progress comes in destroy the pool", function()
      local p = pool { size = 1 }
      local tr = orch:trace()
      local armed, destroyed = false, nil
      local function prio()
        if armed and not destroyed then destroyed = p:destroy() end
        return "scene"
      end
      local ports = { ack = stagehand.port(), tick = stagehand.port(), n = 1 }
      ports.tick:close() -- (it says 1 of 1, then returns at once)
      local h = p:run("ticks", ports, { priority = prio })
      -- (then enough quick requests that their replies fill more than the
      -- batch a step reads the pool's events in: the destroy reads the
      -- next batch into the same buffer)
      local out, rest = stagehand.port(), {}
      for i = 1, 300 do
        rest[i] = i == 280 and p:run("mark", { out = out, name = "280th" }, { priority = "background" })
          or p:run("nothing", true, { priority = "background" })
      end
      p.depth = 400 -- (white-box: the whole queue offered in one round)
      orch:step() -- (offered to the worker, which takes them and replies)
      assert.equal("280th", out:receive_within(WAIT))
      armed = true
      orch:step()
      assert.is_not_nil(destroyed)
      assert.same({ "done", "stopped" }, { h:result() })
      assert.same({ "done" }, { orch:wait(destroyed, WAIT) })
      for i = 1, 279 do assert.equal("done", rest[i]:state()) end -- (their replies came before the mark)
      tr:stop()
    end)
  end)

  describe(":destroy", function()
    it("cancels queued and running requests, stops every worker and settles once all exited", function()
      local p = new_pool(orch, { size = 3, close_timeout_ms = 10 * WAIT }) -- (fake ms: out of reach of a slow host)
      local a, b = holder(), holder()
      local ha, hb = p:run("hold", a), p:run("hold", b)
      started(a)
      started(b)
      p:pause()
      local q1, q2 = p:run("add", { a = 1, b = 1 }), p:run("add", { a = 2, b = 2 })
      orch:step()
      local d = p:destroy()
      for i, h in ipairs { ha, hb, q1, q2 } do
        assert.equal("cancelled", h:state(), ({ "ha", "hb", "q1", "q2" })[i] .. ": " .. tostring(h:result()))
      end
      assert.same({ "done" }, { orch:wait(d, WAIT) })
      assert.same({}, logged) -- (every worker exited: none named as left running at the close timeout)
      assert.equal(0, p:pending())
      -- (its close timeout, armed while workers ran, keeps no host awake
      -- now: once what the workers sent last is collected, nothing is due)
      assert.equal(0, orch.nrunning)
      for _ = 1, 100 do
        if orch:next_wake() ~= 0 then break end
        orch:step()
      end
      assert.is_nil(orch:next_wake())
      assert.equal(d, p:destroy()) -- (a second destroy: the same Handle)
      local ok, err = pcall(p.run, p, "add", { a = 1, b = 1 })
      assert.is_false(ok)
      assert.matches("pool 'fixture_worker' was destroyed", err, 1, true)
    end)

    it("leaves every other pool of the orchestrator taking requests", function()
      local first, second, third = new_pool(orch, { size = 1 }), new_pool(orch, { size = 1 }),
        new_pool(orch, { size = 1 })
      assert.same({ "done" }, { orch:wait(second:destroy(), WAIT) })
      local h1, h3 = first:run("add", { a = 1, b = 2 }), third:run("add", { a = 3, b = 4 })
      assert.same({ "done", 3 }, { orch:wait(h1, WAIT) })
      assert.same({ "done", 7 }, { orch:wait(h3, WAIT) })
      orch:wait(first:destroy(), WAIT)
      local h = third:run("add", { a = 5, b = 6 })
      assert.same({ "done", 11 }, { orch:wait(h, WAIT) })
      assert.same({ "done" }, { orch:wait(third:destroy(), WAIT) })
    end)

    -- Regression: destroy cancelled a request whose reply had arrived and
    -- waited only for the step that collects it.
    it("ends done a request whose reply arrived before the destroy, with its values", function()
      local p = new_pool(orch, { size = 2 })
      local a = holder()
      local held = p:run("hold", a)
      started(a)
      orch:step()
      local h = p:run("add", { a = 20, b = 22 })
      orch:step() -- (offered to the free worker)
      until_a_reply_waits(a.started)
      assert.equal("running", h:state())
      local d = p:destroy()
      assert.same({ "done", 42 }, { h:result() })
      assert.equal("cancelled", held:state())
      assert.same({ "done" }, { orch:wait(d, WAIT) })
    end)

    -- Regression: destroy told the workers to stop before it collected the
    -- replies that had arrived, so a worker that returned at once when told
    -- (a port's receive gives nil) could end its request done, with nil,
    -- if its reply came in between. make test, its lanes loading both
    -- cores, once saw it. Here the reply always comes in between: telling
    -- the workers to stop waits until a reply is in.
    it("cancels a request whose worker replies only because the destroy stopped it", function()
      local p = new_pool(orch, { size = 1 })
      local a = holder()
      local h = p:run("hold", a)
      started(a)
      orch:step()
      local methods = getmetatable(p.ud).__index
      local close = methods._close
      methods._close = function(ud)
        close(ud)
        methods._close = close
        until_a_reply_waits(a.started)
      end
      local ok, d = pcall(p.destroy, p)
      methods._close = close
      assert(ok, d)
      assert.equal("cancelled", h:state(), tostring(h:result()))
      assert.same({ "done" }, { orch:wait(d, WAIT) })
    end)

    -- A worker whose function never looks at stopping(): LuaJIT's compiled
    -- loops run no hooks, so it runs on; PUC Lua's count hook ends it.
    if rawget(_G, "jit") then
      it("names a worker still running after close_timeout_ms in the log, and leaves it to end alone", function()
        local lines = {}
        local o, c = T.new { log = function(line) lines[#lines + 1] = line end }
        local p = new_pool(o, { size = 1, close_timeout_ms = 100 })
        local started_port = stagehand.port()
        p:run("runaway", { started = started_port, ms = 300 })
        o:step()
        assert.is_not_nil(started_port:receive_within(WAIT))
        o:step()
        local d = p:destroy()
        c:advance(150)
        o:step()
        assert.equal("done", d:state())
        local text = table.concat(lines, "\n")
        assert.matches("worker 1 of pool 'fixture_worker' still runs", text, 1, true)
        o:close()
      end)
    else
      it("ends a worker's function that never looks at stopping() once its pool is destroyed", function()
        local lines = {}
        local o = T.new { log = function(line) lines[#lines + 1] = line end }
        local p = new_pool(o, { size = 1, close_timeout_ms = 60000 })
        local started_port = stagehand.port()
        local h = p:run("runaway", { started = started_port, ms = 60000 })
        o:step()
        assert.is_not_nil(started_port:receive_within(WAIT))
        o:step()
        local d = p:destroy()
        assert.equal("cancelled", h:state())
        assert.same({ "done" }, { o:wait(d, WAIT) }) -- (long before the minute it would spin)
        assert.equal(0, #lines)
        o:close()
      end)
    end
  end)

  describe("bad input", function()
    it("names each bad argument of stagehand.pool", function()
      local function bad(opts, what)
        local ok, err = pcall(stagehand.pool, orch, opts)
        assert.is_false(ok)
        assert.matches(what, err, 1, true)
      end
      bad({}, "bad argument 'opts.module' to stagehand.pool")
      bad({ module = 42 }, "bad argument 'opts.module' to stagehand.pool: expected a non-empty string, got 42")
      bad({ module = "m", size = 0 }, "bad argument 'opts.size' to stagehand.pool: expected an integer from 1 to 64")
      bad({ module = "m", size = 65 }, "opts.size")
      bad({ module = "m", size = 1.5 }, "opts.size")
      bad({ module = "m", respawn_on_abort = "yes" }, "opts.respawn_on_abort")
      bad({ module = "m", close_timeout_ms = -1 }, "opts.close_timeout_ms")
      bad({ module = "m", stall_ms = 0 }, "opts.stall_ms")
      bad({ module = "m", sise = 2 }, "bad argument 'opts.sise' to stagehand.pool")
      bad({ source = 7 }, "opts.source")
      local ok, err = pcall(stagehand.pool, {}, { module = "m" })
      assert.is_false(ok)
      assert.matches("bad argument 'orch' to stagehand.pool", err, 1, true)
      -- (the options given first, with no orchestrator: the message says where they go)
      ok, err = pcall(stagehand.pool, { module = "m", size = 2 })
      assert.is_false(ok)
      assert.matches("bad argument 'orch' to stagehand.pool: expected an orchestrator, got", err, 1, true)
      assert.matches("(the options come second: stagehand.pool(orch, opts))", err, 1, true)
      ok, err = pcall(stagehand.spawn, "game.gen.bake", 1)
      assert.is_false(ok)
      assert.matches("bad argument 'orch' to stagehand.spawn: expected an orchestrator, got \"game.gen.bake\""
        .. " (the orchestrator comes first: stagehand.spawn(orch, \"module.function\", ...))", err, 1, true)
    end)

    it("names each bad argument of pool:run, and queues nothing", function()
      local p = pool { size = 1 }
      local function bad(what, ...)
        local ok, err = pcall(p.run, p, ...)
        assert.is_false(ok)
        assert.matches(what, err, 1, true)
      end
      bad("bad argument 'fn_name' to pool:run: expected a non-empty string, got 5", 5)
      bad("bad argument 'opts.priority' to pool:run: expected a rank name (visible, scene, background), a number"
        .. " (higher first) or a function", "add", {}, { priority = "urgent" })
      bad("bad argument 'opts.priority'", "add", {}, { priority = true })
      bad("bad argument 'opts.priority'", "add", {}, { priority = 0 / 0 })
      bad("bad argument 'opts.label'", "add", {}, { label = "" })
      bad("bad argument 'opts.key'", "add", {}, { key = 3 })
      bad("bad argument 'opts.signal'", "add", {}, { signal = {} })
      bad("bad argument 'opts.stall_ms'", "add", {}, { stall_ms = -1 })
      bad("bad argument 'opts.colour'", "add", {}, { colour = "red" })
      bad("bad argument 'opts' to pool:run", "add", {}, 5)
      local ok, err = pcall(p.run, {}, "add")
      assert.is_false(ok)
      assert.matches("bad self to pool:run", err, 1, true)
      assert.equal(0, p:pending())
      assert.equal(0, orch.nrunning)
      assert.same({ "done", 2 }, { orch:wait(p:run("add", { a = 1, b = 1 }), WAIT) })
    end)

    it("names a reprioritise function that returns something else than a priority", function()
      local p = pool { size = 1 }
      local hold = holder()
      local first = p:run("hold", hold)
      started(hold)
      local h = p:run("add", { a = 1, b = 1 })
      local ok, err = pcall(p.reprioritise, p, function() return "soon" end)
      assert.is_false(ok)
      assert.matches('pool:reprioritise: fn returned "soon" for a request of fixture_worker.add', err, 1, true)
      ok, err = pcall(p.reprioritise, p, 3)
      assert.is_false(ok)
      assert.matches("bad argument 'fn' to pool:reprioritise", err, 1, true)
      hold.go:post(true)
      orch:wait(first, WAIT)
      assert.same({ "done", 2 }, { orch:wait(h, WAIT) })
    end)
  end)
end)

describe("stagehand.threads", function()
  it("is one fewer than the cores, at least 1, at most 4", function()
    local n = stagehand.threads()
    assert.equal(math.max(1, math.min(4, stagehand.cores() - 1)), n)
  end)
end)

describe("an orchestrator that used threads", function()
  -- (its per-orchestrator state refers back to it: kept in tables keyed by
  -- it, LuaJIT and Lua 5.1, whose weak keys are no ephemerons, kept it forever)
  it("is collected once the game drops it, pool, ports, tracker and all", function()
    local weak = setmetatable({}, { __mode = "v" })
    do
      local orch = T.new()
      local pool = new_pool(orch, { size = 1 })
      local load = stagehand.tracker(orch)
      local p = stagehand.port()
      assert.same({ "done", 3 }, { orch:wait(pool:run("add", { a = 1, b = 2 }, { phase = "decode" }), WAIT) })
      orch:run("listener", function() return p:receive() end)
      orch:newest("search", "search", function() return 1 end)
      p:post("hello")
      orch:step()
      assert.same({ 1, 1 }, { load:progress("decode") })
      weak[1], weak[2] = orch, pool
    end
    for _ = 1, 4 do collectgarbage() end
    assert.is_nil(weak[1])
    assert.is_nil(weak[2])
  end)

  -- (LuaJIT compiles a call to a C function as a call to that very one, and
  -- the compiled code holds it: functions bound to each pool kept the
  -- pools a hot loop had met, threads and all, after the game dropped them)
  it("lets each of many pools made by the same code go, with its threads", function()
    local cores = setmetatable({}, { __mode = "k" }) -- each pool's C side
    local function level()
      local orch = T.new()
      local pool = new_pool(orch, { size = 1 })
      cores[pool.ud] = true
      local hs = {}
      for i = 1, 20 do hs[i] = pool:run("add", { a = i, b = 1 }) end
      for i = 1, 20 do assert.same({ "done", i + 1 }, { orch:wait(hs[i], WAIT) }) end
    end
    for _ = 1, 60 do level() end
    for _ = 1, 4 do collectgarbage() end
    local kept = 0
    for _ in pairs(cores) do kept = kept + 1 end
    assert.equal(0, kept)
  end)
end)
