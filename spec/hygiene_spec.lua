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
  end
end)
