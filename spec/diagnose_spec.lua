local stagehand = require "stagehand"
local T = require "stagehand.testing"

describe(":report", function()
  it("lists every running job with what it waits on and since when", function()
    local orch, clock = T.new()
    local a = orch:run("Loading hero", function(job) job:await(stagehand.future("hero.png")) end,
      { key = "hero", priority = "visible" })
    clock:advance(50)
    local b = orch:run("Baking", function(job) job:sleep(1000) end)
    local c = orch:run("Dressing", function(job) job:await(a) end)
    orch:run("done already", function() end)
    local r = orch:report()
    assert.equal(3, #r)
    assert.same({ a.id, b.id, c.id }, { r[1].id, r[2].id, r[3].id })
    assert.equal("hero", r[1].key)
    assert.equal("Loading hero", r[1].label)
    assert.equal("running", r[1].state)
    assert.equal("visible", r[1].priority)
    assert.equal(0, r[1].started_at)
    assert.is_nil(r[1].ended_at)
    assert.equal("future 'hero.png'", r[1].waiting_on)
    assert.equal(0, r[1].waiting_since)
    assert.matches("sleep", r[2].waiting_on)
    assert.equal(50, r[2].waiting_since)
    assert.is_nil(r[2].key) -- a job without a key has none, not false
    assert.is_nil(r[2].error)
    assert.equal("job " .. a.id .. " 'Loading hero' (key hero)", r[3].waiting_on)
  end)

  it("says since when for jobs that wait from their start: a pending when, a barrier, when_idle", function()
    local orch, clock = T.new()
    clock:advance(100)
    orch:when("portrait:hero", "Minimap portrait")
    orch:barrier("Party", { "hero", "knight" })
    local idle = orch:when_idle()
    clock:advance(250)
    local since = {}
    for _, r in ipairs(orch:report()) do since[r.label] = r.waiting_since end
    assert.same({ ["Minimap portrait"] = 100, Party = 100, ["when idle"] = 100 }, since)
    -- and the text says it (it raised on a pending when)
    local text = orch:dump()
    assert.matches("Minimap portrait .*waiting on a run of key portrait:hero to start for 250 ms", text)
    assert.matches("Party .*missing: hero, knight%) for 250 ms", text)
    idle:cancel()
    orch:close()
  end)

  it("is empty when nothing runs", function()
    local orch = T.new()
    assert.same({}, orch:report())
  end)

  it("names the chain of awaits a priority comes down, from the job that gives it", function()
    local orch = T.new()
    local cloth = stagehand.future()
    local garment = orch:run("garment", function(job) return job:await(cloth) end, { priority = "background" })
    local cape = orch:run("cape", function(job) return job:await(garment) end, { priority = "background" })
    local portrait = orch:run("portrait", function(job) return job:await(cape) end, { priority = "background" })
    local screen = orch:run("screen", function(job) return job:await(portrait) end, { priority = "visible" })
    orch:step()
    local from = {}
    for _, r in ipairs(orch:report()) do
      assert.equal("visible", r.priority)
      from[r.label] = r.priority_from or false
    end
    local function tag(h) return "#" .. h.id .. " " .. h.label end
    assert.same({
      screen = false, -- (its own caller gives it)
      portrait = tag(screen),
      cape = tag(screen) .. ", through " .. tag(portrait),
      garment = tag(screen) .. ", through " .. tag(portrait) .. ", through " .. tag(cape),
    }, from)
    cloth:resolve("wool")
    orch:step()
    assert.equal("wool", select(2, screen:result()))
  end)

  it("names where a priority comes from though the priority functions it reads change the callers", function()
    -- (The report reads a keyed job's callers' priority functions to find
    -- where its rank comes from. Each runs once in the report; one first
    -- read there, by a caller that joined as another was read, cancelled
    -- a caller the loop had still to reach: the report raised "bad
    -- argument #1 to 'rawget'" from stagehand's own file.)
    local orch = T.new()
    local download = stagehand.future()
    local first = orch:run("load", function(job) return job:await(download) end,
      { key = "castle", priority = "background" })
    local armed, once = false, {}
    local function first_time(name)
      if armed and not once[name] then
        once[name] = true
        return true
      end
    end
    local second, third, fourth
    local function p4()
      if first_time("p4") then third:cancel("the minimap closed") end
      return "background"
    end
    local function p3()
      if first_time("p3") then
        fourth = orch:run("load", function() end, { key = "castle", priority = p4 })
        second:cancel("the menu closed")
      end
      return "background"
    end
    local function p2()
      if first_time("p2") then third = orch:run("load", function() end, { key = "castle", priority = p3 }) end
      return "background"
    end
    second = orch:run("load", function() end, { key = "castle", priority = p2 })
    local portrait = orch:run("portrait", function(job) return job:await(first) end, { priority = "visible" })
    orch:step()
    armed = true
    local rows = orch:report()
    assert.same({ p2 = true, p3 = true, p4 = true }, once)
    assert.equal(2, #rows)
    assert.equal("visible", rows[1].priority)
    assert.equal("#" .. portrait.id .. " portrait", rows[1].priority_from)
    assert.equal("running", fourth:state())
    download:resolve("castle.png")
    orch:step()
    assert.equal("castle.png", select(2, fourth:result()))
  end)
end)

describe(":watch", function()
  it("hears every start and end", function()
    local orch = T.new { log = function() end }
    local seen = {}
    local unwatch = orch:watch(function(rec) seen[#seen + 1] = rec.label .. ":" .. rec.state end)
    orch:run("a", function(job) job:sleep(10) end)
    orch:run("b", function() error("x") end)
    T.settle(orch, 20, 10)
    unwatch()
    orch:run("c", function() end)
    assert.same({ "a:running", "b:running", "b:failed", "a:done" }, seen)
  end)

  it("gives end records their error, start and end time", function()
    local orch, clock = T.new { log = function() end }
    local last
    orch:watch(function(rec) last = rec end)
    clock:advance(5)
    orch:run("x", function(job)
      job:sleep(40)
      error("boom", 0)
    end)
    T.settle(orch, 100, 10)
    assert.equal("failed", last.state)
    assert.equal(5, last.started_at)
    assert.equal(45, last.ended_at)
    assert.matches("boom", last.error)
  end)

  it("hears a job's end when the clock breaks as it ends, at the last good time", function()
    local clock = T.clock(0)
    local broken = false
    local orch = T.new { clock = function()
      if broken then error("clock broke", 0) end
      return clock()
    end, log = function() end }
    local recs = {}
    orch:watch(function(rec) recs[#recs + 1] = rec end)
    local f = stagehand.future()
    local h = orch:run("x", function(job)
      job:await(f)
      broken = true
      return 1
    end)
    clock:advance(30)
    f:resolve()
    pcall(orch.step, orch)
    assert.same({ "done", 1 }, { h:result() })
    assert.equal(2, #recs)
    assert.equal("done", recs[2].state)
    assert.equal(30, recs[2].ended_at)
    broken = false
    assert.no_leaks(orch)
  end)

  it("contains a watcher that raises", function()
    local lines = {}
    local orch = T.new { log = function(m) lines[#lines + 1] = m end }
    local fine = 0
    orch:watch(function() error("watcher bug") end)
    orch:watch(function() fine = fine + 1 end)
    local h = orch:run("x", function() return 1 end)
    assert.same({ "done", 1 }, { h:result() })
    assert.equal(2, fine)
    assert.equal(2, #lines)
    assert.matches("watcher bug", lines[1], 1, true)
  end)

  -- Regression: a watcher that ended a job as it heard the start (the
  -- player quit to the menu: orch:close) made the watchers after it hear
  -- the end first, then the start: a list of loads in flight kept that one
  -- for good.
  it("tells every watcher a job's start before its end, though a watcher ends it at its start", function()
    local orch = T.new { log = function() end }
    local heard, loading = {}, {}
    orch:watch(function(rec)
      heard[#heard + 1] = "first " .. rec.state
      if rec.state == "running" then orch:close("quit to menu") end
    end)
    orch:watch(function(rec)
      heard[#heard + 1] = "second " .. rec.state
      loading[rec.id] = rec.state == "running" or nil
    end)
    local h = orch:run("portrait", function(job) return job:await(stagehand.future()) end)
    assert.equal("cancelled", h:state())
    assert.same({ "first running", "second running", "first cancelled", "second cancelled" }, heard)
    assert.is_nil(next(loading))
  end)

  it("names a bad fn", function()
    local orch = T.new()
    assert.has_error(function() orch:watch(5) end, "bad argument 'fn' to watch: expected a function, got 5")
  end)

  -- A watcher is game code, told of a start once the job is whole.
  it("hears of a keyed start once the key is taken: a run it makes joins, nothing loads twice", function()
    local orch = T.new { log = function() end }
    local loads, joined = 0, nil
    orch:watch(function(rec)
      if rec.state == "running" and rec.label == "floor" and not joined then
        joined = orch:run("floor again", function() loads = loads + 100 end, { key = "floor" })
      end
    end)
    local h = orch:run("floor", function(job)
      loads = loads + 1
      job:sleep(10)
      return "tiles"
    end, { key = "floor" })
    assert.equal(1, loads)
    assert.equal(h.id, joined.id)
    T.settle(orch, 100, 10)
    assert.same({ "done", "tiles" }, { joined:result() })
    assert.no_leaks(orch)
  end)

  it("can end a job as it starts: its work never runs and its coroutine goes", function()
    local orch = T.new { log = function() end }
    local ran = false
    orch:watch(function(rec)
      if rec.state == "running" and rec.label == "doomed" then orch:close("level unloaded") end
    end)
    local h = orch:run("doomed", function() ran = true end, { key = "doomed" })
    assert.equal("cancelled", h:state())
    assert.is_false(ran)
    assert.no_leaks(orch)
  end)

  it("can dump as a pending when starts: it says since when", function()
    local orch = T.new { log = function() end }
    local text
    orch:watch(function(rec)
      if rec.state == "running" then text = orch:dump() end
    end)
    orch:when("portrait", "Waiting for the portrait")
    assert.matches("waiting on a run of key portrait to start for 0 ms", text, 1, true)
  end)
end)

describe(":watch down a chain of 9,000 awaits", function()
  -- An ended job's record reads its priority by walking up the jobs that
  -- awaited it. Unbounded and recursive, that walk overflowed LuaJIT's Lua
  -- stack here (every step then raised "stack overflow") and cost O(n^2)
  -- on every runtime. (LuaJIT only: the others' stacks are deeper, and
  -- there the chain is just slow to end without the bound.)
  if not rawget(_G, "jit") then return end
  it("hears every end, and the chain ends", function()
    local orch = T.new { log = function() end, stall_ms = 1e9 }
    local ends = 0
    orch:watch(function(rec) if rec.state ~= "running" then ends = ends + 1 end end)
    local n = 9000
    local f = stagehand.future()
    local first
    for i = 1, n do -- (built through pending whens, so in O(n))
      local h = orch:run("link " .. i, function(job)
        if i < n then return job:await(orch:when("link" .. (i + 1))) end
        return job:await(f)
      end, { key = "link" .. i })
      if i == 1 then first = h end
    end
    f:resolve("deep")
    assert.equal(0, T.settle(orch, 1000))
    assert.same({ "done", "deep" }, { first:result() })
    assert.equal(2 * n - 1, ends) -- n links and the n - 1 pending whens they joined
    assert.no_leaks(orch)
  end)
end)

describe("a log function that raises", function()
  it("is reported on stderr, and nothing else is harmed", function()
    local written = {}
    local real = io.stderr
    io.stderr = { write = function(_, ...) written[#written + 1] = table.concat({ ... }) end }
    local ok, err = pcall(function()
      local orch = T.new { stall_ms = 1000, log = function() error("log sink down") end }
      local h = orch:run("Painting the floor", function(job) job:await(stagehand.future()) end)
      h:on_end(function() error("the bar broke") end) -- (game code that raises, told through the broken log)
      assert.equal(0, T.settle(orch, 5000))
      assert.equal("stalled", h:state())
      assert.no_leaks(orch)
      -- A log that works takes what game code raised; stderr gets none of it.
      local lines = {}
      local fine = T.new { log = function(line) lines[#lines + 1] = line end }
      fine:run("Painting the walls", function() end):on_end(function() error("the brush broke") end)
      assert.matches("the brush broke", table.concat(lines, "\n"), 1, true)
    end)
    io.stderr = real
    assert(ok, err)
    local all = table.concat(written)
    assert.matches("the log function raised", all, 1, true)
    assert.matches("log sink down", all, 1, true)
    assert.matches("an on_end callback of .* raised: .*the bar broke", all)
    assert.is_nil(all:find("the brush broke", 1, true))
  end)
end)

describe(":dump", function()
  it("renders the report as text", function()
    local orch, clock = T.new()
    orch:run("Loading hero", function(job) job:await(stagehand.future("hero.png")) end, { key = "hero" })
    clock:advance(250)
    local text = orch:dump()
    assert.matches("1 job%(s%) running", text)
    assert.matches("Loading hero", text, 1, true)
    assert.matches("waiting on future 'hero.png' for 250 ms", text, 1, true)
    assert.matches("key hero", text, 1, true)
  end)

  it("writes long times and clock readings in full, the same on every runtime", function()
    local orch, clock = T.new { stall_ms = 1e12 }
    orch:run("Baking the lightmap", function(job) job:sleep(1e9) end)
    orch:run("Streaming the city", function(job) job:await(stagehand.future("tile 7")) end)
    clock:advance(1234567.5)
    orch:step()
    local text = orch:dump()
    -- (%g wrote 1.23457e+06; Lua 5.4's tostring 1000000000.0)
    assert.matches("Baking the lightmap [running, scene] running for 1234567.5 ms; "
      .. "waiting on a sleep until 1000000000 for 1234567.5 ms", text, 1, true)
    assert.matches("waiting on future 'tile 7' for 1234567.5 ms", text, 1, true)
    assert.equal("a sleep until 1000000000", orch:report()[1].waiting_on)
    clock:advance(0.04)
    assert.matches("running for 1234567.5 ms", orch:dump(), 1, true)
    clock:advance(765432.46)
    assert.matches("running for 2000000 ms", orch:dump(), 1, true)
    orch:run("Waiting for the sequel", function(job) job:sleep(1e300) end)
    assert.matches("a sleep until 1e+300 for 0 ms", orch:dump(), 1, true)
  end)

  it("says when stall clocks are paused", function()
    local orch = T.new()
    orch:set_visible(false)
    assert.matches("hidden", orch:dump())
  end)
end)
