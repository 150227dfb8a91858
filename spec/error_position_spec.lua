-- Bad input raises at the call that was wrong: every error below must carry
-- this file's name and the line of the bad call, on every runtime. (Lua 5.1
-- gives an error raised past a tail call no position at all, so a public
-- method that hands its checks to a helper must not tail-call it.)
local stagehand = require "stagehand"
local T = require "stagehand.testing"

local HERE = "error_position_spec.lua:(%d+):"

-- Runs fn, which must raise from the line `line` of this file.
local function raises_here(fn, line, what)
  local ok, err = pcall(fn)
  assert.is_false(ok, what .. " did not raise")
  local at = tostring(err):match(HERE)
  assert(at, what .. " raised without this file's position: " .. tostring(err))
  assert.equal(line, tonumber(at), what .. ": " .. tostring(err))
  return err
end

local function line() return debug.getinfo(2, "l").currentline end

describe("error positions", function()
  local orch
  before_each(function()
    orch = T.new { pools = { p = 1 }, log = function() end }
    orch:budget("b", { ops = 1 })
  end)

  it("stagehand.new and the orchestrator's methods", function()
    local cases = {
      { "new", function() stagehand.new { foo = 1 } end },
      { "new pools", function() stagehand.new { pools = { a = -1 } } end },
      { "new ranks", function() stagehand.new { ranks = { "a", "a" } } end },
      { "new ranks table", function() stagehand.new { ranks = { a = "high" } } end },
      { "new default_priority", function() stagehand.new { default_priority = "zz" } end },
      { "testing new ranks", function() T.new { ranks = 5 } end },
      { "testing new", function() T.new { pools = { a = -1 } } end },
      { "testing new option", function() T.new { zz = 1 } end },
      { "run label", function() orch:run(nil, function() end) end },
      { "run opts", function() orch:run("x", function() end, { zz = 1 }) end },
      { "run priority", function() orch:run("x", function() end, { priority = "zz" }) end },
      { "when key", function() orch:when(5) end },
      { "pool name", function() orch:pool(nil, 1) end },
      { "pool capacity", function() orch:pool("x", -1) end },
      { "pool fraction", function() orch:pool("x", 1.5) end },
      { "budget kind", function() orch:budget("x", { zz = 1 }) end },
      { "budget ops", function() orch:budget("x", { ops = 0 }) end },
      { "barrier label", function() orch:barrier(nil, {}) end },
      { "barrier keys", function() orch:barrier("l", "a") end },
      { "barrier key item", function() orch:barrier("l", { "a", 5 }) end },
      { "barrier opts", function() orch:barrier("l", {}, { zz = 1 }) end },
      { "barrier stall", function() orch:barrier("l", {}, { stall_ms = -1 }) end },
      { "when_idle", function() orch:when_idle(5) end },
    }
    for _, c in ipairs(cases) do
      -- Each case is one line: the bad call is on the line it is defined on.
      raises_here(c[2], debug.getinfo(c[2], "S").linedefined, c[1])
    end
    local b = orch:barrier("ok", { "a" })
    raises_here(function() b:arrive("zz") end, line(), "arrive")
    assert.equal(0, b:arrived()) -- and the barrier kept working
    b:arrive("a")
    assert.equal("done", b.settled:state())
    assert.no_leaks(orch)
  end)

  it("a job's own calls: slot, permit, a second slot of one pool", function()
    local seen = {}
    local h = orch:run("asks", function(job)
      seen[1] = raises_here(function() job:slot("nope") end, line(), "slot")
      seen[2] = raises_here(function() job:slot(nil) end, line(), "slot nil")
      seen[3] = raises_here(function() job:permit("nope") end, line(), "permit")
      local release = job:slot("p")
      seen[4] = raises_here(function() job:slot("p") end, line(), "second slot")
      release()
      seen[5] = raises_here(function() job:sleep(-1) end, line(), "sleep")
      seen[6] = raises_here(function() job:permit(true) end, line(), "permit true")
      return "still working"
    end)
    orch:step()
    assert.same({ "done", "still working" }, { h:result() })
    assert.matches("no pool named 'nope'", tostring(seen[1]), 1, true)
    assert.matches("no budget named 'nope'", tostring(seen[3]), 1, true)
    assert.matches("already holds a slot of pool 'p'", tostring(seen[4]), 1, true)
    assert.matches("bad argument 'pool' to job:slot: expected the name of a pool (a string), got nil", tostring(seen[2]),
      1, true)
    assert.matches("bad argument 'budget' to job:permit: expected the name of a budget (a string), got true",
      tostring(seen[6]), 1, true)
    assert.no_leaks(orch)
  end)

  -- The most common slip in Lua: a dot where a colon belongs shifts every
  -- argument by one. Each must say so, at the line of the call.
  it("a method called with a dot instead of a colon", function()
    local f = stagehand.future()
    local h = orch:run("sleeper", function(job) job:await(f) end)
    local b = orch:barrier("party", { "a" })
    local ctl = stagehand.controller()
    local clock = T.clock()
    local cases = {
      { "orch:run", function() orch.run("Loading", function() end) end },
      { "orch:when", function() orch.when("key") end },
      { "orch:step", function() orch.step() end },
      { "orch:pool", function() orch.pool("p", 2) end },
      { "orch:budget", function() orch.budget("b", { ops = 1 }) end },
      { "orch:barrier", function() orch.barrier("l", { "a" }) end },
      { "orch:when_idle", function() orch.when_idle() end },
      { "orch:wait", function() orch.wait(h, 10) end },
      { "orch:report", function() orch.report() end },
      { "orch:dump", function() orch.dump() end },
      { "orch:pools", function() orch.pools() end },
      { "orch:next_wake", function() orch.next_wake() end },
      { "orch:set_visible", function() orch.set_visible(false) end },
      { "orch:running", function() orch.running("key") end },
      { "orch:forget", function() orch.forget("key") end },
      { "orch:watch", function() orch.watch(print) end },
      { "orch:close", function() orch.close() end },
      { "h:state", function() h.state() end },
      { "h:result", function() h.result() end },
      { "h:cancel", function() h.cancel("why") end },
      { "h:await", function() h.await() end },
      { "h:on_end", function() h.on_end(print) end },
      { "f:resolve", function() f.resolve(1) end },
      { "f:reject", function() f.reject("no") end },
      { "f:state", function() f.state() end },
      { "b:arrive", function() b.arrive("a") end },
      { "b:missing", function() b.missing() end },
      { "ctl:abort", function() ctl.abort("why") end },
      { "signal:on_abort", function() ctl.signal.on_abort(print) end },
      { "clock:advance", function() clock.advance(5) end },
    }
    for _, c in ipairs(cases) do
      local err = raises_here(c[2], debug.getinfo(c[2], "S").linedefined, c[1])
      assert.matches("bad self to " .. c[1] .. ": ", tostring(err), 1, true)
      assert.matches("call it with a colon", tostring(err), 1, true)
    end
    -- The right arguments on the wrong object (before, run read the clock
    -- of whatever it was given: "attempt to call field 'clock'").
    local wrong = {
      { "orch:run", function() orch.run(h, "Loading", function() end) end },
      { "orch:run", function() orch.run({ stall_ms = 5 }, "Loading", function() end, { key = "k" }) end },
      { "orch:when", function() orch.when(h, "key") end },
    }
    for _, c in ipairs(wrong) do
      local err = raises_here(c[2], debug.getinfo(c[2], "S").linedefined, c[1])
      assert.matches("bad self to " .. c[1] .. ": expected an orchestrator", tostring(err), 1, true)
    end
    local seen = {}
    local asks = orch:run("asks", function(job)
      local jcases = {
        { "job:slot", function() job.slot("p") end },
        { "job:permit", function() job.permit("b") end },
        { "job:await", function() job.await(f) end },
        { "job:call", function() job.call(print) end },
        { "job:sleep", function() job.sleep(5) end },
        { "job:slice", function() job.slice() end },
        { "job:pcall", function() job.pcall(print) end },
        { "job:progress", function() job.progress() end },
        { "job:priority", function() job.priority() end },
      }
      for i, c in ipairs(jcases) do
        seen[i] = { c[1], raises_here(c[2], debug.getinfo(c[2], "S").linedefined, c[1]) }
      end
      return "still working"
    end)
    assert.same({ "done", "still working" }, { asks:result() })
    assert.equal(9, #seen)
    for _, s in ipairs(seen) do
      assert.matches("bad self to " .. s[1] .. ": expected a job", tostring(s[2]), 1, true)
    end
    -- Nothing above changed anything: the orchestrator carries on.
    assert.equal("running", h:state())
    f:resolve()
    b:arrive("a")
    assert.equal(0, orch:step())
    assert.no_leaks(orch)
  end)
end)
