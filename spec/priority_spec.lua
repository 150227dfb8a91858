local stagehand = require "stagehand"
local T = require "stagehand.testing"

local function quiet(opts)
  opts = opts or {}
  opts.log = opts.log or function() end
  return T.new(opts)
end

-- A job that reports its effective priority each time it is asked, until released.
local function observed(orch, label, opts)
  local f = stagehand.future()
  local seen = {}
  local job_ref
  local h = orch:run(label, function(job)
    job_ref = job
    job:await(f)
  end, opts)
  return h, function() return job_ref:priority() end, f
end

describe("priorities", function()
  it("take the highest rank of the run's callers", function()
    local orch = quiet()
    local h, prio, f = observed(orch, "armor", { key = "armor", priority = "background" })
    assert.equal("background", prio())
    local page = orch:run("armor", function() end, { key = "armor", priority = "visible" })
    assert.equal("visible", prio())
    page:cancel()
    assert.equal("background", prio()) -- a caller that leaves takes its rank with it
    f:resolve()
  end)

  it("count a caller that names none as the default", function()
    local orch = quiet()
    local h, prio, f = observed(orch, "armor", { key = "armor", priority = "background" })
    orch:when("armor")
    assert.equal("scene", prio())
    f:resolve()
  end)

  it("raise a garment build queued behind an army to visible while a portrait awaits it, then drop it", function()
    local orch = quiet()
    local garment, prio, f = observed(orch, "Building the cape", { key = "armor-build:cape", priority = "background" })
    assert.equal("background", prio())
    local portrait = orch:run("Hero portrait", function(job)
      return job:await(orch:when("armor-build:cape"))
    end, { priority = "visible" })
    -- the portrait's `when` is itself a caller of default rank; the portrait
    -- awaiting it brings visible
    assert.equal("visible", prio())
    portrait:cancel("portrait closed")
    orch:step()
    assert.equal("background", prio())
    f:resolve()
  end)

  it("flow through a chain: a visible portrait awaiting a garment that waits on a cloth job raises both", function()
    local orch = quiet()
    local cloth, cloth_prio, f = observed(orch, "cloth", { priority = "background" })
    local garment_job
    local garment = orch:run("garment", function(job)
      garment_job = job
      return job:await(cloth)
    end, { priority = "background" })
    assert.equal("background", cloth_prio())
    local portrait = orch:run("portrait", function(job) return job:await(garment) end, { priority = "visible" })
    assert.equal("visible", garment_job:priority())
    assert.equal("visible", cloth_prio())
    portrait:cancel()
    orch:step()
    assert.equal("background", cloth_prio())
    f:resolve()
  end)

  it("read a priority function live: a battle scrolled off screen drops to background", function()
    local orch = quiet()
    local on_screen = true
    local battle = function() return on_screen and "scene" or "background" end
    local h, prio, f = observed(orch, "Placing soldiers", { priority = battle })
    assert.equal("scene", prio())
    on_screen = false
    assert.equal("background", prio())
    on_screen = true
    assert.equal("scene", prio())
    f:resolve()
  end)

  it("show the effective rank in the report", function()
    local orch = quiet()
    local h, prio, f = observed(orch, "cloth", { priority = "background" })
    orch:run("portrait", function(job) return job:await(h) end, { priority = "visible" })
    local r = orch:report()
    assert.equal("visible", r[1].priority)
    assert.equal("visible", r[2].priority)
    f:resolve()
  end)

  it("call each distinct priority function once per reading, however many callers share it", function()
    local orch = quiet()
    local calls = 0
    local fns = {}
    for i = 1, 3 do
      fns[i] = function()
        calls = calls + 1
        return "background"
      end
    end
    local h, prio, f = observed(orch, "army", { key = "army", priority = fns[1] })
    for i = 1, 999 do orch:run("army", function() end, { key = "army", priority = fns[i % 3 + 1] }) end
    calls = 0
    assert.equal("background", prio())
    assert.is_true(calls <= 3, "called " .. calls .. " times")
    f:resolve()
  end)

  it("log a priority function that raises once and count it as the default", function()
    local lines = {}
    local orch = T.new { log = function(m) lines[#lines + 1] = m end }
    local bad = function() error("camera missing") end
    local h, prio, f = observed(orch, "x", { priority = bad })
    assert.equal("scene", prio())
    assert.equal("scene", prio())
    assert.equal(1, #lines)
    assert.matches("camera missing", lines[1], 1, true)
    f:resolve()
  end)

  it("use the configured ranks", function()
    local orch = quiet { ranks = { "now", "soon", "later" }, default_priority = "later" }
    local h, prio, f = observed(orch, "x")
    assert.equal("later", prio())
    orch:run("y", function(job) job:await(h) end, { priority = "now" })
    assert.equal("now", prio())
    f:resolve()
  end)
end)
