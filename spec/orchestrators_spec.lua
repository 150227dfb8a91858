-- A game may run several orchestrators (one per scene, one for a shared
-- asset cache). Each keeps its own stall clocks, priorities and queues; a
-- job awaiting a Handle of another orchestrator waits on it as on a future.
local stagehand = require "stagehand"
local T = require "stagehand.testing"

-- Two manual orchestrators on one fake clock.
local function two(opts_a, opts_b)
  local clock = T.clock()
  local function new(opts)
    local o = { clock = clock, log = function() end }
    for k, v in pairs(opts or {}) do o[k] = v end
    return T.new(o)
  end
  return new(opts_a), new(opts_b), clock
end

-- Steps both until neither runs anything or `ms` passed.
local function settle_both(a, b, clock, ms)
  local passed = 0
  while (a:step() + b:step() > 0 or a.nrunning + b.nrunning > 0) and passed < ms do
    clock:advance(100)
    passed = passed + 100
  end
end

describe("several orchestrators", function()
  it("let a job await a Handle of another one and get its values", function()
    local a, b, clock = two()
    local cache = b:run("atlas", function(job)
      job:sleep(300)
      return "atlas.png"
    end)
    local h = a:run("sprite", function(job) return "drawn with " .. job:await(cache) end)
    settle_both(a, b, clock, 5000)
    assert.same({ "done", "drawn with atlas.png" }, { h:result() })
    assert.no_leaks(a)
    assert.no_leaks(b)
  end)

  it("keep the waiter's own stall clock running: a hidden other orchestrator cannot hold it", function()
    local a, b, clock = two({ stall_ms = 1000 }, { stall_ms = 1000 })
    local cache = b:run("atlas", function(job) job:await(stagehand.future()) end)
    b:set_visible(false) -- (its jobs never stall while hidden)
    local h = a:run("sprite", function(job) return job:await(cache) end)
    for _ = 1, 30 do
      clock:advance(100)
      a:step()
      b:step()
    end
    assert.equal("stalled", h:state())
    assert.equal("running", cache:state())
    assert.no_leaks(a)
  end)

  it("keep priorities apart: a waiter elsewhere neither lifts a job nor disturbs its pool", function()
    local a, b, clock = two(nil, { pools = { decode = 1 } })
    local hold = stagehand.future()
    b:run("holder", function(job)
      local release = job:slot("decode")
      job:await(hold)
      release()
    end)
    local order = {}
    local function decode(name)
      return b:run(name, function(job)
        local release = job:slot("decode")
        order[#order + 1] = name
        release()
        return name
      end, { priority = "background" })
    end
    local first, second = decode("first"), decode("second")
    -- A visible job of `a` awaits the second decode: within `b` it stays
    -- background, so it is still granted after the first.
    local h = a:run("portrait", function(job) return job:await(second) end, { priority = "visible" })
    assert.equal("background", b:report()[3].priority)
    hold:resolve()
    settle_both(a, b, clock, 5000)
    assert.same({ "first", "second" }, order)
    assert.same({ "done", "second" }, { h:result() })
    assert.equal("done", first:state())
    assert.no_leaks(a)
    assert.no_leaks(b)
  end)

  it("lift only its own orchestrator's jobs from a group holding both, and keep its clock running", function()
    local a, b, clock = two({ stall_ms = 1000 }, { stall_ms = 100000 })
    local gate = stagehand.future()
    local local_job, foreign_job
    local mine = a:run("tiles", function(job)
      local_job = job
      for _ = 1, 30 do
        job:sleep(100)
        job:progress()
      end
    end, { priority = "background" })
    local theirs = b:run("atlas", function(job)
      foreign_job = job
      job:await(gate)
    end, { priority = "background" })
    local h = a:run("portrait", function(job)
      return job:await(stagehand.all { mine, theirs })
    end, { priority = "visible" })
    assert.equal("visible", local_job:priority())
    assert.equal("background", foreign_job:priority())
    -- The other orchestrator's job holds the group open: the portrait's own
    -- clock runs (tiles progressing does not keep it), and it stalls.
    for _ = 1, 20 do
      clock:advance(100)
      a:step()
      b:step()
    end
    assert.equal("stalled", h:state())
    assert.equal("background", local_job:priority())
    gate:resolve()
    settle_both(a, b, clock, 5000)
    assert.no_leaks(a)
    assert.no_leaks(b)
  end)

  it("end two jobs that each await the other orchestrator's when_idle, rather than hang", function()
    local a, b, clock = two({ stall_ms = 1000 }, { stall_ms = 1000 })
    local ha = a:run("preload a", function(job) job:await(b:when_idle()) end)
    local hb = b:run("preload b", function(job) job:await(a:when_idle()) end)
    settle_both(a, b, clock, 10000)
    assert.equal(0, a.nrunning + b.nrunning)
    assert.is_true(ha:state() ~= "running" and hb:state() ~= "running")
    assert.no_leaks(a)
    assert.no_leaks(b)
  end)

  it("let a job await the when_idle of another that has run nothing yet", function()
    local a, b, clock = two({ stall_ms = 1000 }, { stall_ms = 1000 })
    local h = a:run("preload", function(job) return job:await(b:when_idle()) end)
    assert.equal(0, b:next_wake()) -- (the cache's idle check is due)
    b:step()
    a:step()
    assert.equal("done", h:state())
    assert.equal(0, clock.now)
    assert.no_leaks(a)
    assert.no_leaks(b)
  end)

  it("still find a cycle of waits within one orchestrator", function()
    local a = T.new { log = function() end }
    local f = stagehand.future()
    local h1
    local h2 = a:run("two", function(job)
      job:await(f)
      return job:await(h1)
    end)
    h1 = a:run("one", function(job) return job:await(h2) end)
    f:resolve()
    a:step()
    local st, err = h2:result()
    assert.equal("failed", st)
    assert.is_true(stagehand.is_error(err.cause, "cycle"))
  end)

  it("refuse a step of one orchestrator inside a job of another", function()
    local a, b = two()
    local h = a:run("stepper", function() return b:step() end)
    local st, err = h:result()
    assert.equal("failed", st)
    assert.matches("orch:step cannot be called inside a job (stepper)", tostring(err.cause), 1, true)
    assert.equal(0, b:step()) -- b itself is untouched
  end)
end)
