-- One priority system: worker requests ranked like jobs (names, numbers and
-- functions on one scale, inherited from callers and awaiting jobs) and
-- given to workers in the step's grant rounds. The workers run
-- spec/fixtures/fixture_worker.lua; a pool of one worker is held inside
-- `hold` (waiting on a port) while the spec queues what competes for it.
local stagehand = require "stagehand"
local T = require "stagehand.testing"

if not package.path:find("spec/fixtures/?.lua", 1, true) then
  package.path = "spec/fixtures/?.lua;" .. package.path
end

local WAIT = 10000 -- (ms a worker may take on a loaded host before a spec gives up)

describe("worker requests by priority", function()
  local orch, pools, logged
  before_each(function()
    logged = {}
    orch = T.new { stall_ms = 60000, log = function(line) logged[#logged + 1] = line end }
    pools = {}
  end)
  after_each(function()
    for _, p in ipairs(pools) do orch:wait(p:destroy(), WAIT) end
    orch:close()
  end)

  local function pool(size)
    local p = stagehand.pool(orch, { module = "fixture_worker", size = size or 1 })
    pools[#pools + 1] = p
    return p
  end

  -- A pool of one whose worker is inside `hold` once this returns.
  local function held_pool()
    local p = pool(1)
    local ports = { started = stagehand.port(), go = stagehand.port() }
    local h = p:run("hold", ports)
    orch:step() -- (a grant round offers it)
    assert.is_not_nil(ports.started:receive_within(WAIT), "the worker never started")
    orch:step() -- (hears that it started)
    return p, function()
      ports.go:post(true)
      return h
    end
  end

  -- A running job's effective priority, as report() shows it.
  local function prio_of(h)
    for _, r in ipairs(orch:report()) do
      if r.id == h.id then return r.priority end
    end
  end

  -- Releases the held worker, waits for everything, and returns the
  -- names the requests ran in.
  local function order_after(release, out, hs)
    local first = release()
    orch:wait(stagehand.all(hs), WAIT)
    orch:wait(first, WAIT)
    local order = {}
    out:drain(function(v) order[#order + 1] = v end)
    return order
  end

  it("raises the garment two visible portraits await ahead of the army queued before it", function()
    local p, release = held_pool()
    local out = stagehand.port()
    local hs = {}
    for i = 1, 4 do
      hs[#hs + 1] = p:run("mark", { out = out, name = "soldier " .. i }, { priority = "background" })
    end
    local garment = p:run("mark", { out = out, name = "garment" }, { priority = "background", key = "armor:cape" })
    hs[#hs + 1] = garment
    for i = 1, 2 do
      hs[#hs + 1] = orch:run("portrait " .. i, function(job) return job:await(garment) end, { priority = "visible" })
    end
    orch:step()
    assert.equal(5, p:queued())
    assert.same({ "garment", "soldier 1", "soldier 2", "soldier 3", "soldier 4" }, order_after(release, out, hs))
  end)

  it("raises a queued request that a `when` on its key follows", function()
    local p, release = held_pool()
    local out = stagehand.port()
    local hs = {}
    for i = 1, 3 do hs[#hs + 1] = p:run("mark", { out = out, name = "tile " .. i }, { priority = 10 }) end
    hs[#hs + 1] = p:run("mark", { out = out, name = "atlas" }, { priority = 1, key = "atlas" })
    hs[#hs + 1] = orch:when("atlas", "the HUD waits for the atlas", { priority = "visible" })
    assert.same({ "atlas", "tile 1", "tile 2", "tile 3" }, order_after(release, out, hs))
  end)

  -- A request offered to workers whose rank then rises: the rival ranked
  -- ahead of it when the offer was made must not be what a worker freed
  -- next takes. (The mesh's priority is a function, so the rank of its new
  -- set of sources is not known until read.)
  local function rival_and_mesh(p, out)
    local rival = p:run("mark", { out = out, name = "rival" }, { priority = "scene" })
    local mesh = p:run("mark", { out = out, name = "mesh" }, { key = "mesh", priority = function() return 0 end })
    orch:step() -- (offered: the rival, then the mesh)
    return rival, mesh
  end

  it("offers again in the same step once a job raises an offered request mid-step", function()
    orch:pool("gate", 1)
    local p, release = held_pool()
    local out = stagehand.port()
    local rival, mesh = rival_and_mesh(p, out)
    local portrait = orch:run("portrait", function(job)
      job:slot("gate")() -- (granted in the step's round, so it awaits after the offer was made)
      return job:await(mesh)
    end, { priority = "visible" })
    orch:step()
    assert.equal("visible", prio_of(mesh))
    local first = release()
    assert.equal("mesh", out:receive_within(WAIT)) -- (taken by the freed worker before any other step)
    orch:wait(stagehand.all { first, rival, mesh, portrait }, WAIT)
    assert.equal("rival", out:receive_within(0))
  end)

  it("takes back what an offer holds behind a request the game raises between steps", function()
    local p, release = held_pool()
    local out = stagehand.port()
    local rival, mesh = rival_and_mesh(p, out)
    local hud = orch:when("mesh", "the HUD waits for the mesh", { priority = "visible" })
    local first = release()
    assert.is_nil(out:receive_within(100)) -- (nothing is taken until the next step ranks the queue)
    orch:wait(stagehand.all { first, rival, mesh, hud }, WAIT)
    assert.same({ "mesh", "rival" }, { out:receive_within(0), out:receive_within(0) })
  end)

  it("offers nothing from a round whose priority functions paused the pool as it read them", function()
    local p, release = held_pool()
    local out = stagehand.port()
    local old_rank, new_rank, paused = "scene", "background", false
    local hs = {
      p:run("mark", { out = out, name = "old" }, { priority = function() return old_rank end }),
      p:run("mark", { out = out, name = "new" }, { priority = function() return new_rank end }),
      p:run("mark", { out = out, name = "pauser" }, {
        priority = function()
          if not paused then -- (game code: the player opened a menu)
            paused = true
            p:pause()
          end
          return "background"
        end,
      }),
    }
    orch:step()
    assert.is_true(p:paused())
    old_rank, new_rank = "background", "visible" -- (the player moved meanwhile)
    p:resume()
    local first = release()
    assert.is_nil(out:receive_within(100)) -- (nothing ranked before the pause is taken)
    orch:wait(first, WAIT)
    orch:wait(stagehand.all(hs), WAIT)
    local order = {}
    out:drain(function(v) order[#order + 1] = v end)
    assert.same({ "new", "old", "pauser" }, order)
  end)

  it("drops a request back when the visible job awaiting it leaves", function()
    local p, release = held_pool()
    local out = stagehand.port()
    local a = p:run("mark", { out = out, name = "first" })
    local b = p:run("mark", { out = out, name = "second" })
    local portrait = orch:run("portrait", function(job) return job:await(b) end, { priority = "visible" })
    orch:step()
    assert.equal("visible", prio_of(b))
    portrait:cancel("scrolled away")
    assert.equal("background", prio_of(b)) -- (0: a request that names none)
    assert.same({ "first", "second" }, order_after(release, out, { a, b }))
  end)

  it("gives a free worker the visible request made after thirty background ones in the same frame", function()
    local p = pool(1)
    local out = stagehand.port()
    local hs = {}
    for i = 1, 30 do hs[i] = p:run("mark", { out = out, name = "bg" .. i }, { priority = "background" }) end
    hs[31] = p:run("mark", { out = out, name = "visible" }, { priority = "visible" })
    orch:wait(stagehand.all(hs), WAIT)
    local order = {}
    out:drain(function(v) order[#order + 1] = v end)
    assert.equal("visible", order[1])
    for i = 1, 30 do assert.equal("bg" .. i, order[i + 1]) end
  end)

  it("reads a priority function once a step however many requests it ranks and workers take", function()
    local p = pool(2)
    local reads = 0
    local function near()
      reads = reads + 1
      return 60
    end
    local hs = {}
    for i = 1, 40 do hs[i] = p:run("add", { a = i, b = 0 }, { priority = near }) end
    local round = orch.round
    orch:step()
    assert.equal(1, reads)
    orch:wait(stagehand.all(hs), WAIT)
    assert.is_true(reads <= orch.round - round, reads .. " reads in " .. (orch.round - round) .. " steps")
  end)

  it("mixes names, numbers and functions on one scale for jobs and requests", function()
    local p, release = held_pool()
    local out = stagehand.port()
    local hs = {}
    local cases = {
      { "number 75", 75 }, { "scene", "scene" }, { "function 60", function() return 60 end },
      { "visible", "visible" }, { "function visible", function() return "visible" end }, { "number -1", -1 },
    }
    for _, c in ipairs(cases) do hs[#hs + 1] = p:run("mark", { out = out, name = c[1] }, { priority = c[2] }) end
    assert.same({ "visible", "function visible", "number 75", "function 60", "scene", "number -1" },
      order_after(release, out, hs))
    -- The same on jobs waiting for a slot.
    local o = T.new { pools = { decode = 1 } }
    local gate = stagehand.future()
    local order = {}
    o:run("holder", function(job)
      local r = job:slot("decode")
      job:await(gate)
      r()
    end)
    o:step()
    for _, c in ipairs(cases) do
      o:run(c[1], function(job)
        job:slot("decode")
        order[#order + 1] = c[1]
      end, { priority = c[2] })
    end
    gate:resolve()
    o:step()
    assert.same({ "visible", "function visible", "number 75", "function 60", "scene", "number -1" }, order)
  end)

  it("takes custom ranks as a table of numbers and as a list", function()
    local o = T.new { ranks = { urgent = 10, normal = 0, idle = -10 }, default_priority = "normal" }
    local h = o:run("x", function(job) return job:priority() end, { priority = "urgent" })
    assert.same({ "done", "urgent" }, { h:result() })
    assert.same({ "done", 5 }, { o:run("y", function(job) return job:priority() end, { priority = 5 }):result() })
    assert.same({ "done", "normal" }, { o:run("z", function(job) return job:priority() end):result() })
    local l = T.new { ranks = { "now", "soon", "later" } }
    -- (a list maps its names 50 apart, the last to 0)
    assert.same({ "done", "soon" }, { l:run("a", function(job) return job:priority() end, { priority = 50 }):result() })
    assert.same({ "done", 75 }, { l:run("b", function(job) return job:priority() end, { priority = 75 }):result() })
  end)

  it("refuses a bad priority or ranks table, naming it, with nothing queued", function()
    local p = pool(1)
    local function says(pattern, fn, ...)
      local ok, err = pcall(fn, ...)
      assert.is_false(ok)
      assert.matches(pattern, err, 1, true)
    end
    says("bad argument 'opts.priority' to pool:run", p.run, p, "add", {}, { priority = 0 / 0 })
    says("'urgent' is no rank", p.run, p, "add", {}, { priority = "urgent" })
    says("bad argument 'opts.priority' to pool:run", p.run, p, "add", {}, { priority = {} })
    says("bad argument 'opts.priority' to run", orch.run, orch, "x", function() end, { priority = 0 / 0 })
    -- (NaN reads "nan" on every runtime: Lua 5.4 on Linux prints 0/0 as "-nan")
    says("got nan", orch.run, orch, "x", function() end, { priority = 0 / 0 })
    says("got nan", orch.pool, orch, "x", 0 / 0)
    says("bad argument 'opts.priority' to when", orch.when, orch, "k", nil, { priority = "urgent" })
    assert.equal(0, p:pending())
    assert.equal(0, orch.nrunning)
    says("bad option 'ranks' to stagehand.new", stagehand.new, { ranks = { visible = "high" } })
    says("a number for rank 'visible'", stagehand.new, { ranks = { visible = "high" } })
    says("a number for rank 'x'", stagehand.new, { ranks = { x = 0 / 0 } })
    says("distinct names", stagehand.new, { ranks = { "a", "b", "a" } })
    says("bad option 'default_priority'", stagehand.new, { ranks = { a = 1 }, default_priority = "b" })
    assert.same({ "done", 2 }, { orch:wait(p:run("add", { a = 1, b = 1 }), WAIT) })
  end)

  it("re-ranks queued requests with reprioritise, inherited priority still counting", function()
    local p, release = held_pool()
    local out = stagehand.port()
    local far = p:run("mark", { out = out, name = "far" }, { priority = 1 })
    local near = p:run("mark", { out = out, name = "near" }, { priority = 2 })
    local watched = p:run("mark", { out = out, name = "watched" }, { priority = 0 })
    local viewer = orch:run("viewer", function(job) return job:await(watched) end, { priority = "visible" })
    local seen = {}
    p:reprioritise(function(payload, prio)
      seen[payload.name] = prio
      return payload.name == "far" and 3 or "background"
    end)
    assert.same({ far = 1, near = 2, watched = 0 }, seen)
    assert.same({ "watched", "far", "near" }, order_after(release, out, { far, near, watched, viewer }))
  end)

  it("shows a request's effective priority and where it came from in dump and the trace", function()
    local p, release = held_pool()
    local out = stagehand.port()
    local tr = orch:trace()
    local garment = p:run("mark", { out = out, name = "garment" }, { label = "fitting the cape" })
    local portrait = orch:run("portrait", function(job) return job:await(garment) end, { priority = "visible" })
    orch:step()
    local text = orch:dump()
    assert.matches("fitting the cape [running, visible]", text, 1, true)
    assert.matches("visible from #" .. portrait.id .. " portrait awaiting it", text, 1, true)
    local rec
    for _, r in ipairs(orch:report()) do
      if r.label == "fitting the cape" then rec = r end
    end
    assert.equal("visible", rec.priority)
    assert.equal("#" .. portrait.id .. " portrait", rec.priority_from)
    order_after(release, out, { garment, portrait })
    local dispatched
    for _, e in ipairs(tr:events()) do
      if e.kind == "dispatch" and e.label == "fitting the cape" then dispatched = e end
    end
    assert.is_not_nil(dispatched)
    assert.equal("visible", dispatched.priority)
    assert.equal("#" .. portrait.id .. " portrait", dispatched.from)
  end)

  it("lists budgets with their waiting counts in orch:pools()", function()
    local o = T.new { pools = { decode = 2 } }
    o:budget("upload", { ops = 1 })
    o:budget("decode", { ms = math.huge })
    for i = 1, 3 do o:run("upload " .. i, function(job) job:permit("upload") end) end
    local listed = o:pools()
    assert.same({ capacity = 2, in_use = 0, waiting = 0 }, listed.decode)
    assert.same({ budget = "ops", limit = 1, in_use = 0, waiting = 3 }, listed.upload)
    assert.same({ budget = "ms", limit = math.huge, in_use = 0, waiting = 0 }, listed["decode (budget)"])
    o:step()
    assert.equal(2, o:pools().upload.waiting)
  end)
end)
