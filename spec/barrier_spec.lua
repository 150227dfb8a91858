local stagehand = require "stagehand"
local T = require "stagehand.testing"

local function quiet(opts)
  opts = opts or {}
  opts.log = opts.log or function() end
  return T.new(opts)
end

describe(":barrier", function()
  it("settles a battle once every soldier arrived", function()
    local orch = quiet()
    local soldiers = {}
    for i = 1, 5 do soldiers[i] = "soldier:" .. i end
    local b = orch:barrier("Battle with armies", soldiers)
    local started = false
    orch:run("Battle", function(job)
      job:await(b.settled)
      started = true
    end)
    for i = 1, 5 do
      orch:run("Placing soldier " .. i, function(job)
        job:sleep(100 * i)
        b:arrive("soldier:" .. i)
      end)
    end
    T.settle(orch, 250, 50)
    assert.equal(2, b:arrived())
    assert.same({ "soldier:3", "soldier:4", "soldier:5" }, b:missing())
    assert.is_false(started)
    T.settle(orch, 1000, 50)
    assert.is_true(started)
    assert.equal("done", b.settled:state())
    assert.no_leaks(orch)
  end)

  it("stalls a party barrier and names the missing portrait", function()
    local lines = {}
    local orch = T.new { log = function(m) lines[#lines + 1] = m end }
    local b = orch:barrier("Party portraits", { "portrait:knight", "portrait:mage", "portrait:thief" },
      { stall_ms = 2000 })
    b:arrive("portrait:knight")
    b:arrive("portrait:thief")
    local caught
    orch:run("Maze", function(job)
      local _, err = job:pcall(job.await, job, b.settled)
      caught = err
    end)
    T.settle(orch, 5000)
    assert.equal("stalled", b.settled:state())
    assert.is_true(stagehand.is_error(caught, "stalled"))
    assert.same({ "portrait:mage" }, caught.missing)
    assert.same({ "[stagehand] Party portraits made no progress for 2 s. Missing: portrait:mage." }, lines)
  end)

  it("counts each arrival as progress", function()
    local orch = quiet()
    local b = orch:barrier("slow party", { "a", "b", "c" }, { stall_ms = 1000 })
    T.settle(orch, 800)
    b:arrive("a")
    T.settle(orch, 800)
    b:arrive("b")
    T.settle(orch, 800)
    b:arrive("c")
    assert.equal("done", b.settled:state())
  end)

  it("counts a repeated arrival once and raises for an unknown key", function()
    local orch = quiet()
    local b = orch:barrier("b", { "x", "y" })
    b:arrive("x")
    b:arrive("x")
    assert.equal(1, b:arrived())
    assert.has_error(function() b:arrive("z") end)
    assert.equal("running", b.settled:state())
    b:arrive("y")
    assert.equal("done", b.settled:state())
    b:arrive("y") -- after the end: nothing happens
  end)

  it("counts a key listed twice as one key", function()
    local orch = quiet()
    local b = orch:barrier("party", { "hero", "hero", "mage" })
    assert.same({ "hero", "mage" }, b:missing())
    b:arrive("hero")
    assert.equal(1, b:arrived())
    assert.same({ "mage" }, b:missing())
    assert.equal("running", b.settled:state())
    b:arrive("mage")
    assert.equal("done", b.settled:state())
    assert.no_leaks(orch)
  end)

  it("settles at once over an empty list", function()
    local orch = quiet()
    local b = orch:barrier("nobody", {})
    assert.equal("done", b.settled:state())
    assert.same({}, b:missing())
  end)

  it("shows in the report what it still waits for", function()
    local orch = quiet()
    local b = orch:barrier("party", { "a", "b" })
    b:arrive("b")
    local r = orch:report()
    assert.equal("1 of 2 keys (missing: a)", r[1].waiting_on)
  end)

  it("is cancelled through its signal", function()
    local orch = quiet()
    local ctl = stagehand.controller()
    local b = orch:barrier("b", { "x" }, { signal = ctl.signal })
    ctl:abort("left")
    assert.equal("cancelled", b.settled:state())
    assert.no_leaks(orch)
  end)

  it("ends at once, cancelled, on a signal that aborted already", function()
    local orch = quiet()
    local ctl = stagehand.controller()
    ctl:abort("left")
    local b = orch:barrier("b", { "x" }, { signal = ctl.signal })
    assert.equal("cancelled", b.settled:state())
    assert.same({}, orch:report())
    b:arrive("x") -- (too late: nothing changes)
    assert.equal("cancelled", b.settled:state())
    assert.no_leaks(orch)
  end)

  it("names keys that are not a list of strings", function()
    local orch = quiet()
    assert.has_error(function() orch:barrier("b", "x") end)
    assert.has_error(function() orch:barrier("b", { "x", 5 }) end)
    assert.has_error(function() orch:barrier("b", { x = "y" }) end)
    assert.has_error(function() orch:barrier("", { "x" }) end)
    assert.no_leaks(orch)
  end)
end)

describe(":when_idle", function()
  it("lets an idle preloader run only between page work", function()
    local orch = quiet()
    local log = {}
    local page_done = stagehand.future()
    orch:run("Page", function(job)
      log[#log + 1] = "page starts"
      job:await(page_done)
      log[#log + 1] = "page done"
    end)
    orch:run("Idle preloader", function(job)
      for i = 1, 3 do
        job:await(orch:when_idle())
        log[#log + 1] = "preload " .. i
        job:sleep(10)
      end
    end)
    T.settle(orch, 1000, 10)
    assert.same({ "page starts" }, log)
    page_done:resolve()
    T.settle(orch, 1000, 10)
    assert.same({ "page starts", "page done", "preload 1", "preload 2", "preload 3" }, log)
  end)

  it("settles at the next step when asked of an orchestrator that has run nothing yet", function()
    -- (a loading screen that asks before anything loads; with nothing ever
    -- ended or awaited, no idle check was marked due, and it hung)
    local orch = quiet { check_ms = 1000 }
    local h = orch:when_idle()
    assert.equal(0, orch:next_wake())
    assert.equal(0, orch:step())
    assert.equal("done", h:state())
    -- and again once that waiter is gone: the world it left is idle still
    local again = orch:when_idle()
    assert.equal(0, orch:next_wake())
    orch:step()
    assert.equal("done", again:state())
    assert.no_leaks(orch)
  end)

  it("settles for a game that asks before its loaders start, once they are all done", function()
    local orch = quiet { check_ms = 1000 }
    local h = orch:when_idle()
    local download = stagehand.future()
    orch:run("loader", function(job) job:await(download) end)
    orch:step()
    assert.equal("running", h:state()) -- (a loader waits on its download)
    download:resolve()
    orch:step()
    assert.equal("done", h:state())
  end)

  it("tells a busy world from an idle one without listing what a loader awaits", function()
    local orch = quiet()
    local downloads = stagehand.future("downloads")
    local preloaded = false
    -- (started first, so the check meets the preloader and the loader
    -- before any asset, whatever order it goes in)
    orch:run("preloader", function(job)
      job:await(orch:when_idle())
      preloaded = true
    end)
    local all_assets
    local loader = orch:run("scene loader", function(job)
      local hs = {}
      for i = 1, 1000 do
        hs[i] = orch:run("asset " .. i, function(asset) asset:await(downloads) end)
      end
      all_assets = stagehand.all(hs)
      job:await(all_assets)
    end)
    -- Count the listings of the 1,000 parts: any asset waiting on its
    -- download already says the world is not idle, and listing them in
    -- every step cost half a millisecond a step.
    local listed, follows = 0, all_assets._follows
    all_assets._follows = function(g)
      listed = listed + 1
      return follows(g)
    end
    for _ = 1, 5 do
      orch:run("page work", function(job) job:sleep(1) end) -- (each step has something new to check)
      orch:step()
    end
    assert.equal(0, listed)
    assert.is_false(preloaded)
    downloads:resolve()
    T.settle(orch, 1000, 10)
    assert.is_true(preloaded)
    assert.equal("done", loader:state())
    assert.no_leaks(orch)
  end)

  it("sees a job awaiting a loader whose wait mixes a download with an idle preloader as busy", function()
    local orch = quiet()
    local download = stagehand.future("atlas download")
    local log = {}
    local warm = orch:run("warm shader cache", function(job)
      job:await(orch:when_idle())
      log[#log + 1] = "shaders warmed"
    end)
    local loader = orch:run("scene loader", function(job)
      job:await(stagehand.all { download, warm })
      log[#log + 1] = "scene loaded"
    end)
    local menu = orch:run("menu", function(job)
      job:await(loader)
      log[#log + 1] = "menu shown"
    end)
    local music = orch:when_idle()
    -- Every job waits, none surely busy: the check walks menu -> loader,
    -- whose wait still holds the download.
    T.settle(orch, 1000, 10)
    assert.same({}, log)
    assert.equal("running", music:state())
    download:resolve()
    -- (the driver is asked to step at once: the idle check looks again)
    assert.equal(0, orch:next_wake())
    T.settle(orch, 100, 10)
    -- The download done, the loader waits only on the idle preloader:
    -- the world is idle, and the preloaders run first.
    assert.same({ "shaders warmed", "scene loaded", "menu shown" }, log)
    assert.equal("done", music:state())
    assert.equal("done", menu:state())
    assert.no_leaks(orch)
  end)

  it("never blocks two preloaders on each other", function()
    local orch = quiet()
    local ran = {}
    for _, name in ipairs { "music", "portraits" } do
      orch:run("preload " .. name, function(job)
        job:await(orch:when_idle())
        ran[#ran + 1] = name
      end)
    end
    orch:step()
    table.sort(ran)
    assert.same({ "music", "portraits" }, ran)
  end)

  it("never stalls, nor does a job awaiting it", function()
    local lines = {}
    local orch = T.new { log = function(m) lines[#lines + 1] = m end }
    orch:run("page", function(job)
      for _ = 1, 100 do
        job:sleep(1000)
        job:progress()
      end
    end)
    local pre = orch:run("preloader", function(job) job:await(orch:when_idle()) end, { stall_ms = 1000 })
    T.settle(orch, 60000, 1000)
    assert.equal("running", pre:state())
    assert.same({}, lines)
  end)

  it("withdraws through its signal", function()
    local orch = quiet()
    local ctl = stagehand.controller()
    orch:run("page", function(job) job:sleep(1000) end)
    local h = orch:when_idle(ctl.signal)
    ctl:abort()
    assert.equal("cancelled", h:state())
    assert.has_error(function() orch:when_idle({}) end)
  end)

  -- The idle check walks what each job awaits on a stack of its own: a
  -- recursive walk overflowed LuaJIT's Lua stack down a chain of 10,000
  -- awaits, and every step raised "stack overflow" for good.
  it("looks down a chain of 10,000 awaits that ends at when_idle", function()
    local orch = T.new { log = function() end, stall_ms = 1e9 }
    local n = 10000
    for i = 1, n do -- (built through pending whens, so in O(n))
      orch:run("link " .. i, function(job)
        if i < n then return job:await(orch:when("link" .. (i + 1))) end
        return job:await(orch:when_idle())
      end, { key = "link" .. i })
    end
    local preloader = orch:when_idle()
    assert.equal(0, orch:step())
    assert.equal("done", preloader:state())
    assert.no_leaks(orch)
  end)

  it("ends at once, cancelled, on a signal that aborted already, and leaves no waiter", function()
    local orch = quiet()
    local ctl = stagehand.controller()
    ctl:abort()
    local h = orch:when_idle(ctl.signal)
    assert.equal("cancelled", h:state())
    assert.equal(0, orch:step())
    assert.no_leaks(orch)
    -- and the next when_idle still settles once the world is idle
    local later = orch:when_idle()
    assert.equal(0, orch:step())
    assert.equal("done", later:state())
  end)
end)
