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
      return "still working"
    end)
    orch:step()
    assert.same({ "done", "still working" }, { h:result() })
    assert.matches("no pool named 'nope'", tostring(seen[1]), 1, true)
    assert.matches("no budget named 'nope'", tostring(seen[3]), 1, true)
    assert.matches("already holds a slot of pool 'p'", tostring(seen[4]), 1, true)
    assert.no_leaks(orch)
  end)
end)
