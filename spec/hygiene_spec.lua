-- Lua state hygiene: garbage collection mid-wait, odd error values, closed
-- coroutines, direct yields and orchestrators dropped without closing.
local stagehand = require "stagehand"
local T = require "stagehand.testing"

local function quiet() return T.new { log = function() end } end

describe("hygiene", function()
  it("survives full collections while jobs wait", function()
    local orch = quiet()
    local f = stagehand.future()
    local handles = {}
    for i = 1, 50 do
      handles[i] = orch:run("w" .. i, function(job)
        local t = { payload = string.rep("x", 100) }
        collectgarbage()
        local v = job:await(f)
        collectgarbage()
        return v .. #t.payload
      end)
    end
    collectgarbage()
    collectgarbage()
    f:resolve("got ")
    orch:step()
    for i = 1, 50 do assert.same({ "done", "got 100" }, { handles[i]:result() }) end
    assert.no_leaks(orch)
  end)

  it("keeps a userdata raised by work as the cause", function()
    local orch = quiet()
    local ud = io.tmpfile()
    local h = orch:run("x", function() error(ud) end)
    local st, err = h:result()
    assert.equal("failed", st)
    assert.equal(ud, err.cause)
    assert.is_string(tostring(err))
    ud:close()
  end)

  it("keeps error levels: position for level 1, none for level 0", function()
    local orch = quiet()
    local a = orch:run("a", function() error("with position") end)
    local b = orch:run("b", function() error("bare", 0) end)
    local function raise_at_caller() error("from the caller", 2) end
    local c = orch:run("c", function() raise_at_caller() end)
    assert.matches("hygiene_spec.lua:%d+: with position", select(2, a:result()).cause)
    assert.equal("bare", select(2, b:result()).cause)
    assert.matches("hygiene_spec.lua:%d+: from the caller", select(2, c:result()).cause)
  end)

  it("names a bad argument whose __tostring raises or returns a table, as a key or a value", function()
    local odd = {
      setmetatable({}, { __tostring = function() error("the game's __tostring raised") end }),
      setmetatable({}, { __tostring = function() return {} end }),
    }
    for _, v in ipairs(odd) do
      local orch, clock = quiet()
      local load = stagehand.tracker(orch)
      local calls = {
        { "bad argument 'ms' to sleep", function()
          local raised
          orch:run("sleeper", function(job) raised = select(2, pcall(job.sleep, job, v)) end)
          error(raised)
        end },
        { "bad argument 'ms' to settle", function() T.settle(orch, v) end },
        { "bad argument 'step_ms' to settle", function() T.settle(orch, 10, v) end },
        { "bad argument 'orch' to settle", function() T.settle(v, 10) end },
        { "bad argument 'ms' to advance", function() clock:advance(v) end },
        { "bad self to clock:advance", function() clock.advance(v, 1) end },
        { "bad argument 'start_ms' to clock", function() T.clock(v) end },
        { "bad option '[a table]' to stagehand.new", function() T.new { [v] = 1 } end },
        { "bad argument 'opts[a table]' to run", function() orch:run("x", function() end, { [v] = 1 }) end },
        { "bad argument 'spec[a table]' to budget", function() orch:budget("b", { [v] = 1 }) end },
        { "bad argument 'opts[a table]' to load:task", function() load:task("p", { [v] = 1 }) end },
        { "bad argument 'rows[1][a table]' to stagehand.format_timeline",
          function() stagehand.format_timeline { { [v] = 1 } } end },
      }
      if stagehand.backend ~= "lua" then -- (the pure-Lua core has no worker threads)
        calls[#calls + 1] = { "bad argument 'opts[a table]' to stagehand.pool",
          function() stagehand.pool(orch, { module = "m", [v] = 1 }) end }
      end
      for _, c in ipairs(calls) do
        local ok, err = pcall(c[2])
        assert.is_false(ok, c[1])
        assert.matches(c[1], tostring(err), 1, true)
        -- (the message stagehand meant, not one its own tostring raised)
        assert.not_matches("the game's __tostring raised", tostring(err), 1, true)
        assert.not_matches("must return a string", tostring(err), 1, true)
        assert.not_matches("concatenate", tostring(err), 1, true)
      end
      -- and the orchestrator goes on
      local h = orch:run("after", function(job) job:sleep(1) return "on" end)
      assert.equal(0, T.settle(orch, 100))
      assert.same({ "done", "on" }, { h:result() })
    end
  end)

  it("names a field of an odd kind by its place: opts[3], opts[\"two words\"]", function()
    local orch = quiet()
    local ok, err = pcall(orch.run, orch, "x", function() end, { "positional" })
    assert.is_false(ok)
    assert.matches("bad argument 'opts[1]' to run", tostring(err), 1, true)
    ok, err = pcall(orch.budget, orch, "b", { ["two words"] = 1 })
    assert.is_false(ok)
    assert.matches([[bad argument 'spec["two words"]' to budget]], tostring(err), 1, true)
  end)

  it("ends a job whose coroutine someone else resumes or closes", function()
    local orch = quiet()
    local co
    local f = stagehand.future()
    local h = orch:run("x", function(job)
      co = coroutine.running()
      job:await(f)
      return "never"
    end)
    if coroutine.close then
      assert.is_true(coroutine.close(co)) -- Lua 5.4: closed while waiting
    else
      coroutine.resume(co, "not stagehand") -- elsewhere: a stranger resumes it
    end
    f:resolve()
    T.settle(orch, 30000)
    assert.are_not.equal("running", h:state())
    assert.are_not.equal("done", h:state())
    assert.no_leaks(orch)
  end)

  it("fails a job whose work yields directly, with a clear message, not a hang", function()
    local orch = quiet()
    local h = orch:run("x", function() coroutine.yield() end)
    local _, err = h:result()
    assert.matches("coroutine.yield", tostring(err.cause), 1, true)
  end)

  it("frees orchestrators dropped without closing", function()
    for _ = 1, 200 do
      local orch = quiet()
      orch:pool("p", 1)
      orch:budget("b", { ops = 1 })
      orch:barrier("bar", { "a" })
      for i = 1, 5 do orch:run("w" .. i, function(job) job:slot("p") job:sleep(1e6) end) end
    end
    collectgarbage()
    collectgarbage()
    local orch = quiet() -- and the module still works
    assert.same({ "done", 1 }, { orch:run("x", function() return 1 end):result() })
  end)

  it("closes an orchestrator with close(), cancelling what runs", function()
    local orch = quiet()
    local h = orch:run("x", function(job) job:sleep(1e6) end)
    orch:close()
    assert.equal("cancelled", h:state())
    orch:step()
    assert.no_leaks(orch)
  end)

  it("runs the cleanup of every job close cancels, with nothing left queued", function()
    local orch = T.new { pools = { p = 1 }, log = function() end }
    orch:budget("b", { ops = 1 })
    local cleaned = {}
    local function loader(name, wait)
      return orch:run(name, function(job)
        local ok, err = job:pcall(wait, job)
        cleaned[#cleaned + 1] = name .. ": " .. tostring(ok) .. ", " .. tostring(err.kind)
      end)
    end
    loader("sleeping", function(job) job:sleep(1e6) end)
    loader("holding", function(job)
      job:slot("p")
      job:await(stagehand.future())
    end)
    loader("queued for the slot", function(job) job:slot("p") end)
    loader("waiting for a permit", function(job)
      job:permit("b")
      job:permit("b")
    end)
    orch:step()
    orch:close("level unloaded")
    assert.same({
      "sleeping: false, cancelled",
      "holding: false, cancelled",
      "queued for the slot: false, cancelled",
      "waiting for a permit: false, cancelled",
    }, cleaned)
    assert.no_leaks(orch)
  end)

  describe("closed from inside a job", function()
    -- A job parked mid-work, whose cleanup (a job:pcall handler) must run
    -- when close cancels it, without anyone stepping the closed orchestrator.
    local function sleeper(orch, cleaned)
      return orch:run("sleeper", function(job)
        local ok, err = job:pcall(job.sleep, job, 1e6)
        cleaned[#cleaned + 1] = tostring(ok) .. ", " .. tostring(err.kind)
      end)
    end

    -- A level whose cleanup starts work of its own (a save on exit): close
    -- cancels that at once, before its work runs (cleaned notes "save on
    -- exit: never ran"), so close ends whatever cleanup starts.
    local function level_with_save(orch, cleaned)
      orch:run("level", function(job)
        local _, err = job:pcall(job.sleep, job, 1e6)
        cleaned[#cleaned + 1] = "level: " .. err.kind
        local save = orch:run("save on exit", function(j)
          local _, e = j:pcall(j.sleep, j, 1e6)
          cleaned[#cleaned + 1] = "save on exit: " .. e.kind
        end)
        if save:state() == "cancelled" then cleaned[#cleaned + 1] = "save on exit: never ran" end
      end)
    end

    it("of its own, in the job's first resume", function()
      local orch = quiet()
      local cleaned = {}
      local h = sleeper(orch, cleaned)
      local closer = orch:run("closer", function()
        orch:close("level unloaded")
        return "went on"
      end)
      assert.same({ "false, cancelled" }, cleaned)
      assert.equal("cancelled", h:state())
      assert.equal("cancelled", closer:state()) -- (closed while it ran: its work went on to its end)
      assert.no_leaks(orch)
    end)

    it("of its own, in a run made inside that job", function()
      local orch = quiet()
      local cleaned = {}
      sleeper(orch, cleaned)
      local inner_cleaned
      orch:run("outer", function()
        orch:run("inner", function() orch:close("level unloaded") end)
        inner_cleaned = #cleaned -- (still inside a job of its own: not yet)
      end)
      assert.equal(0, inner_cleaned)
      assert.same({ "false, cancelled" }, cleaned)
      assert.no_leaks(orch)
    end)

    it("of its own, in a step, cancelling what that cleanup started too", function()
      local orch = quiet()
      local cleaned = {}
      level_with_save(orch, cleaned)
      local f = stagehand.future()
      orch:run("closer", function(job)
        job:await(f)
        orch:close("level unloaded")
      end)
      f:resolve()
      assert.equal(0, orch:step())
      assert.same({ "level: cancelled", "save on exit: never ran" }, cleaned)
      assert.no_leaks(orch)
    end)

    it("of another orchestrator, in its first resume or in its step", function()
      for _, in_step in ipairs { false, true } do
        local orch, other = quiet(), quiet()
        local cleaned = {}
        sleeper(orch, cleaned)
        local f = stagehand.future()
        other:run("closer", function(job)
          if in_step then job:await(f) end
          orch:close("level unloaded")
        end)
        if in_step then
          f:resolve()
          other:step()
        end
        assert.same({ "false, cancelled" }, cleaned)
        assert.no_leaks(orch)
        assert.no_leaks(other)
      end
    end)

    it("runs the cleanup of jobs that cleanup started while it closed", function()
      local orch = quiet()
      local cleaned = {}
      level_with_save(orch, cleaned)
      orch:close("quit")
      assert.same({ "level: cancelled", "save on exit: never ran" }, cleaned)
      assert.no_leaks(orch)
    end)

    it("ends the when, when_idle and barrier that cleanup made while it closed", function()
      local orch = quiet()
      local made
      orch:run("level", function(job)
        if not job:pcall(job.sleep, job, 1000) then
          made = { orch:when("save", "wait for the save"), orch:when_idle(), orch:barrier("tiles", { "a" }) }
        end
      end)
      orch:close("quit")
      assert.equal("cancelled", made[1]:state())
      assert.equal("cancelled", made[2]:state())
      assert.equal("cancelled", made[3].settled:state())
      assert.no_leaks(orch)
    end)

    -- It used to give up after 100 rounds, silently, leaving a continuation
    -- queued whose next step started a job close never ended.
    it("returns, with everything ended, even when every cleanup starts another job", function()
      local orch = quiet()
      local started, last = 0, nil
      local function stubborn(job)
        started = started + 1
        job:pcall(job.sleep, job, 1e6)
        last = orch:run("again", stubborn)
      end
      orch:run("again", stubborn)
      orch:close("quit")
      assert.equal(1, started) -- the job its cleanup started was cancelled before it ran
      assert.equal("cancelled", last:state())
      assert.equal(0, orch.qn)
      assert.equal(0, orch:step())
      assert.equal(1, started)
      assert.no_leaks(orch)
    end)

    it("leaves alone what the work that closed it starts afterwards", function()
      for _, in_step in ipairs { false, true } do
        local orch = quiet()
        local cleaned = {}
        level_with_save(orch, cleaned)
        local f = stagehand.future()
        local menu
        orch:run("quit to menu", function(job)
          if in_step then job:await(f) end
          orch:close("back to the menu")
          menu = orch:run("menu", function(j)
            j:sleep(10)
            return "menu loaded"
          end)
        end)
        if in_step then
          f:resolve()
          orch:step()
        end
        assert.same({ "level: cancelled", "save on exit: never ran" }, cleaned)
        assert.equal("running", menu:state())
        T.settle(orch, 100)
        assert.same({ "done", "menu loaded" }, { menu:result() })
        assert.no_leaks(orch)
      end
    end)

    it("ends what an on_end handler starts as it cancels, even past a close that handler makes", function()
      local orch = quiet()
      local retries = {}
      for i = 1, 2 do
        local h = orch:run("download " .. i, function(job) job:sleep(1e6) end)
        h:on_end(function(st)
          if i == 1 then orch:close("again") end -- (a close inside close's own cancelling)
          if st ~= "done" then retries[i] = orch:run("download again", function(job) job:sleep(1e6) end) end
        end)
      end
      orch:close("quit")
      assert.equal("cancelled", retries[1]:state())
      assert.equal("cancelled", retries[2]:state())
      assert.no_leaks(orch)
    end)

    it("of another orchestrator whose job is on the stack below it, in one step", function()
      local reads = 0
      local clock = T.clock()
      local cache = T.new { log = function() end, clock = function()
        reads = reads + 1
        return clock.now
      end }
      local orch = quiet()
      local h = cache:run("cache load", function()
        -- (this job's work is on the stack while close runs: nothing to wait for)
        orch:run("scene job", function() cache:close("cache dropped") end)
        return "went on"
      end)
      assert.equal("cancelled", h:state())
      assert.is_true(reads < 10, reads .. " clock readings")
      assert.no_leaks(cache)
      assert.no_leaks(orch)
    end)

    it("takes a second close from a cleanup it runs", function()
      local orch = quiet()
      local cleaned = 0
      for i = 1, 2 do
        orch:run("level " .. i, function(job)
          job:pcall(job.sleep, job, 1e6)
          cleaned = cleaned + 1
          orch:close("again")
        end)
      end
      orch:close("quit")
      assert.equal(2, cleaned)
      assert.equal(0, orch:step())
      assert.no_leaks(orch)
    end)

    it("and keeps working for runs made after it", function()
      local orch = quiet()
      orch:run("closer", function() orch:close() end)
      local h = orch:run("later", function(job)
        job:sleep(10)
        return "loaded"
      end)
      T.settle(orch, 100)
      assert.same({ "done", "loaded" }, { h:result() })
      assert.no_leaks(orch)
    end)
  end)

  if _VERSION == "Lua 5.4" then
    it("closes an orchestrator at the end of a <close> scope", function()
      local chunk = assert(load([[
        local stagehand, T = ...
        local h
        do
          local orch <close> = T.new { log = function() end }
          h = orch:run("x", function(job) job:sleep(1e6) end)
        end
        return h:state()
      ]]))
      assert.equal("cancelled", chunk(stagehand, T))
    end)

    -- A coroutine that ends with an error, or is never resumed again, does
    -- not unwind: its to-be-closed variables close only when something
    -- calls coroutine.close. Work that holds a file in one expects it
    -- closed however the job ends.
    describe("closes the to-be-closed variables of work", function()
      -- run(orch, body): runs body(job, held) as a job's work, where held
      -- makes a to-be-closed value that records the error it closed with.
      -- closing(value, fn) runs fn with value held in a to-be-closed
      -- variable. (In chunks: the spec file itself parses on every runtime.)
      local make = assert(load([[
        local closes = ...
        local function closing(value, fn)
          local held <close> = value
          return fn()
        end
        return function(body)
          return function(job)
            local function held(name, raise)
              return setmetatable({}, { __close = function(_, err)
                closes[#closes + 1] = { name = name, err = err }
                if raise then error(raise, 0) end
              end })
            end
            local run_body <close> = held("work")
            return body(job, held)
          end
        end, closing
      ]]))
      local closes, work, closing
      before_each(function()
        closes = {}
        work, closing = make(closes)
      end)
      it("when the work raises, with the error it raised", function()
        local orch = quiet()
        local h = orch:run("x", work(function() error("no such file", 0) end))
        assert.equal("failed", h:state())
        assert.equal(1, #closes)
        assert.equal("no such file", closes[1].err)
        assert.equal("no such file", select(2, h:result()).cause)
        assert.no_leaks(orch)
      end)

      it("when it is cancelled, stalls or its orchestrator closes while it waits", function()
        local orch = T.new { log = function() end, stall_ms = 1000 }
        local f = stagehand.future()
        local a = orch:run("a", work(function(job) job:await(f) end))
        local b = orch:run("b", work(function(job) job:sleep(1e6) end))
        local c = orch:run("c", work(function(job) job:await(f) end), { stall_ms = 1e9 })
        a:cancel("not needed")
        T.settle(orch, 2000)
        assert.equal("cancelled", a:state())
        assert.equal("stalled", b:state())
        assert.equal(2, #closes)
        orch:close("quit")
        T.settle(orch, 10)
        assert.equal(3, #closes)
        for i, h in ipairs { a, b, c } do
          assert.equal(select(2, h:result()), closes[i].err) -- the job's own end
        end
        assert.no_leaks(orch)
      end)

      it("once, when the work returns", function()
        local orch = quiet()
        local h = orch:run("x", work(function(job) job:sleep(0) return "ok" end))
        T.settle(orch, 10)
        assert.same({ "done", "ok" }, { h:result() })
        assert.equal(1, #closes)
        assert.is_nil(closes[1].err)
      end)

      it("when the work yields past stagehand", function()
        local orch = quiet()
        local h = orch:run("x", work(function() coroutine.yield("stray") end))
        assert.equal("failed", h:state())
        assert.equal(1, #closes) -- (closed as a suspended coroutine is: with no error)
        assert.matches("coroutine.yield", tostring(select(2, h:result())))
      end)

      it("when an ended job's work keeps catching its end and waiting", function()
        local orch = quiet()
        local tries = 0
        local h = orch:run("x", work(function(job)
          while true do
            tries = tries + 1
            pcall(job.sleep, job, 10)
          end
        end))
        h:cancel("enough")
        T.settle(orch, 100)
        assert.equal("cancelled", h:state())
        assert.is_true(tries > 100)
        assert.equal(1, #closes)
        assert.no_leaks(orch)
      end)

      it("innermost first, and an error a closing method raises becomes the job's", function()
        local orch = quiet()
        local h = orch:run("x", work(function(job, held)
          return closing(held("outer", "could not flush"), function()
            return closing(held("inner"), function()
              job:sleep(0)
              error("read failed", 0)
            end)
          end)
        end))
        T.settle(orch, 10)
        assert.same({ "inner", "outer", "work" }, { closes[1].name, closes[2].name, closes[3].name })
        assert.equal("read failed", closes[1].err)
        assert.equal("could not flush", closes[3].err)
        assert.equal("failed", h:state())
        assert.equal("could not flush", select(2, h:result()).cause)
        assert.no_leaks(orch)
      end)

      it("and a closing method may end other jobs or start new ones", function()
        local orch = quiet()
        local f = stagehand.future()
        local other = orch:run("other", function(job) return job:await(f) end)
        local started
        local h = orch:run("x", work(function(job)
          return closing(setmetatable({}, { __close = function()
            other:cancel("its user failed")
            started = orch:run("retry", function(j) j:sleep(0) return "again" end)
          end }), function()
            job:sleep(0)
            error("bad", 0)
          end)
        end))
        T.settle(orch, 10)
        assert.equal("failed", h:state())
        assert.equal("cancelled", other:state())
        assert.same({ "done", "again" }, { started:result() })
        assert.no_leaks(orch)
      end)
    end)
  end
end)

describe("an end that ends others in turn", function()
  -- (no stall while 10,000 levels settle)
  local function patient() return T.new { log = function() end, stall_ms = 1e9 } end
  -- Each loader runs the next inside itself, after a first wait, and
  -- awaits it: 10,000 levels. Ending one ended the next inside its own end,
  -- so cancelling the root overflowed the Lua stack partway down and left
  -- thousands running for good (silently, when the chain went through
  -- signals: the overflow came inside a guarded on_abort handler).
  local function nested(orch, n, tie)
    local f = stagehand.future()
    local depth = 0
    local function work(job)
      job:sleep(0)
      depth = depth + 1
      if depth < n then
        return job:await(orch:run("level " .. depth, work, tie and { signal = job.signal } or nil))
      end
      return job:await(f)
    end
    local root = orch:run("root", work)
    T.settle(orch, 100000, 1)
    assert.equal(n, depth)
    return root
  end

  it("ends all 10,000 callers made inside one another", function()
    local orch = patient()
    local ended = 0
    orch:watch(function(r) if r.state == "cancelled" then ended = ended + 1 end end)
    local root = nested(orch, 10000, false)
    assert.equal(10000, #orch:report())
    assert.is_true(root:cancel("quit to menu"))
    assert.equal(10000, ended) -- all of it before cancel returned
    assert.equal(0, T.settle(orch, 1000))
    assert.no_leaks(orch)
  end)

  it("ends all 10,000 jobs that follow one another's signals", function()
    local orch = patient()
    local root = nested(orch, 10000, true)
    assert.equal(10000, #orch:report())
    assert.is_true(root:cancel("quit to menu"))
    assert.equal(0, #orch:report())
    assert.equal(0, T.settle(orch, 1000))
    assert.no_leaks(orch)
  end)

  it("aborts a job's signal before its Handles hear its end, and withdraws the callers it made last", function()
    local orch = patient()
    local order = {}
    local f = stagehand.future()
    local parent = orch:run("parent", function(job)
      job.signal:on_abort(function() order[#order + 1] = "parent's signal" end)
      local child = orch:run("child", function(j) return j:await(f) end)
      child:on_end(function(st) order[#order + 1] = "child " .. st end)
      return job:await(child)
    end)
    parent:on_end(function(st) order[#order + 1] = "parent " .. st end)
    parent:cancel("closed")
    assert.same({ "parent's signal", "parent cancelled", "child cancelled" }, order)
    orch:step()
    assert.no_leaks(orch)
  end)

  -- A handler must not yield (none may), but one that does suspends only
  -- the end it runs in: ends elsewhere go on, and that end finishes when
  -- its coroutine runs again. Before, the next ends left what they reached
  -- to the suspended one, for good. (Lua 5.1 cannot yield across the
  -- handler's pcall: there the handler fails, is logged, and the end goes
  -- on at once.)
  it("goes on elsewhere while a handler of the game's own that yielded holds one end", function()
    local orch = patient()
    local f = stagehand.future()
    local function parent_with_children(label, yielding)
      local kids = {}
      local h = orch:run(label, function(job)
        if yielding then job.signal:on_abort(function() coroutine.yield() end) end
        for i = 1, 3 do kids[i] = orch:run(label .. " child " .. i, function(j) return j:await(f) end) end
        return job:await(stagehand.all(kids))
      end)
      return h, kids
    end
    local p, p_kids = parent_with_children("p", true)
    local q, q_kids = parent_with_children("q", false)
    local game = coroutine.create(function() p:cancel("gone") end)
    assert.is_true(coroutine.resume(game))
    q:cancel("gone too")
    for i = 1, 3 do assert.equal("cancelled", q_kids[i]:state()) end
    if coroutine.status(game) == "suspended" then
      assert.equal("running", p_kids[1]:state()) -- (p's end is still in its handler)
      assert.is_true(coroutine.resume(game))
    end
    assert.equal("dead", coroutine.status(game))
    for i = 1, 3 do assert.equal("cancelled", p_kids[i]:state()) end
    orch:step()
    assert.no_leaks(orch)
  end)

  it("goes on after a coroutine that yielded in the middle of an end is resumed later", function()
    local yields = select(2, coroutine.resume(coroutine.create(function() return pcall(coroutine.yield, 1) end))) == 1
    local orch = patient()
    local f = stagehand.future()
    local function started(label)
      local job
      local h = orch:run(label, function(j)
        job = j
        return j:await(f)
      end)
      return h, job
    end
    -- y's end, made in coroutine `game`, stops in a handler that yields.
    local y, yjob = started("y")
    yjob.signal:on_abort(function() if yields then coroutine.yield() end end)
    local game = coroutine.create(function() y:cancel("gone") end)
    -- x's end, in the main coroutine, starts `game` from its own handler.
    local x, xjob = started("x")
    xjob.signal:on_abort(function() coroutine.resume(game) end)
    x:cancel("gone")
    assert.equal(yields and "suspended" or "dead", coroutine.status(game))
    coroutine.resume(game) -- (its end goes on and returns, long after)
    assert.equal("dead", coroutine.status(game))
    -- An end in the main coroutine still reaches what follows it.
    local z, zjob = started("z")
    local w = orch:run("w", function(j) return j:await(f) end, { signal = zjob.signal })
    z:cancel("gone")
    assert.equal("cancelled", w:state())
    orch:step()
    assert.no_leaks(orch)
  end)
end)

describe("runs made inside one another's first run", function()
  -- Each level runs the next before its own first wait, so each work
  -- starts inside the coroutine of the one above. PUC Lua stops at about
  -- 200 coroutines inside one another: a "C stack overflow" came partway
  -- through making a job, and the orchestrator then counted -1 running.
  local function nested(orch, n, started)
    local f = stagehand.future()
    local function work(job)
      started[#started + 1] = job.label
      if #started < n then return job:await(orch:run("level " .. #started, work)) end
      return job:await(f)
    end
    return orch:run("root", work), f
  end

  it("start 32 deep at once and the rest from the run queue, 1,000 deep in all", function()
    local orch = quiet()
    local started = {}
    local root, f = nested(orch, 1000, started)
    assert.equal(32, #started) -- (E.MAX_NESTED_STARTS: outside a step, the rest wait for one)
    assert.equal(33, #orch:report())
    orch:step()
    assert.equal(1000, #started)
    assert.equal("level 999", started[1000])
    f:resolve("the deepest")
    assert.equal(0, T.settle(orch, 1000))
    assert.same({ "done", "the deepest" }, { root:result() })
    assert.no_leaks(orch)
  end)

  it("start them all within the step that runs the first", function()
    local orch = quiet()
    local go = stagehand.future()
    local started = {}
    local inner
    orch:run("outer", function(job)
      job:await(go)
      inner = nested(orch, 100, started)
    end)
    go:resolve()
    orch:step()
    assert.equal(100, #started)
    assert.equal("running", inner:state())
    inner:cancel("done looking")
    orch:step()
    assert.no_leaks(orch)
  end)

  it("report a start waiting in the run queue, and since when", function()
    local orch, clock = T.new { log = function() end }
    clock:advance(250)
    local started = {}
    nested(orch, 40, started)
    local queued = orch:report()[33]
    assert.equal("level 32", queued.label)
    assert.equal("its turn to run", queued.waiting_on)
    assert.equal(250, queued.waiting_since)
    clock:advance(40)
    assert.matches("#33 level 32 %[running, scene%] running for 40 ms; waiting on its turn to run for 40 ms",
      orch:dump())
    orch:step()
    assert.equal(40, #started)
  end)

  it("never start the work of one cancelled before its turn", function()
    local orch = quiet()
    local started = {}
    local root = nested(orch, 40, started)
    assert.equal(32, #started)
    root:cancel("left the menu")
    orch:step()
    assert.equal(32, #started)
    assert.equal(0, #orch:report())
    assert.no_leaks(orch)
  end)
end)

describe("a second copy of stagehand in the same Lua state", function()
  -- A game that reloads its code by clearing package.loaded requires
  -- stagehand again, and holds objects of both copies. Each copy's job
  -- took the other's Future for one of its own, so the Future's settle
  -- woke nothing: the job hung until its stall, and dump() raised.
  local function second_copy()
    local function ours()
      local found = {}
      for name, m in pairs(package.loaded) do
        if name == "stagehand" or name:find("^stagehand%.") then found[name] = m end
      end
      for name in pairs(found) do package.loaded[name] = nil end
      return found
    end
    local first = ours()
    local ok, copy = pcall(require, "stagehand")
    ours()
    for name, m in pairs(first) do package.loaded[name] = m end
    assert(ok, copy)
    assert.are_not.equal(stagehand, copy)
    return copy
  end
  -- An orchestrator of the second copy on the first one's fake clock.
  local function new2(s2, clock)
    return s2.new { driver = "manual", clock = clock, log = function() end }
  end
  local function settle_both(orch, orch2)
    for _ = 1, 3 do
      T.settle(orch, 10)
      orch2:step()
    end
  end

  it("lets each copy's jobs await the other's futures, handles and groups", function()
    local s2 = second_copy()
    local orch, clock = T.new { log = function() end }
    local orch2 = new2(s2, clock)
    local f, f2 = stagehand.future(), s2.future()
    local theirs = orch:run("theirs", function(job) return job:await(f) end)
    local h2 = orch2:run("waits on the first copy", function(job)
      local a = job:await(f)
      local b = job:await(theirs)
      local both = job:await(s2.all { theirs, f2 })
      return a .. b .. both[1] .. both[2]
    end)
    local h = orch:run("waits on the second copy", function(job) return job:await(h2) end)
    assert.matches("waiting on", orch2:dump())
    f:resolve("a")
    settle_both(orch, orch2)
    assert.equal("running", h2:state())
    f2:resolve("c")
    settle_both(orch, orch2)
    assert.same({ "done", "aaac" }, { h2:result() })
    assert.same({ "done", "aaac" }, { h:result() })
    assert.no_leaks(orch)
    assert.equal(0, orch2:step())
  end)

  it("hears the other copy's failures and cancellations", function()
    local s2 = second_copy()
    local orch, clock = T.new { log = function() end }
    local orch2 = new2(s2, clock)
    local f2 = s2.future()
    local h = orch:run("x", function(job) return job:await(f2) end)
    local g = orch:run("y", function(job) return job:await(orch2:run("z", function(j) j:sleep(1e6) end)) end)
    f2:reject("gone")
    orch2:close("quit")
    settle_both(orch, orch2)
    assert.same({ "failed", "gone" }, { h:state(), select(2, h:result()).cause })
    -- (as for a job of another orchestrator of the same copy)
    assert.same({ "failed", "cancelled" }, { g:state(), select(2, g:result()).cause.kind })
    assert.no_leaks(orch)
  end)
end)
