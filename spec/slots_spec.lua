local stagehand = require "stagehand"
local T = require "stagehand.testing"

local function quiet(opts)
  opts = opts or {}
  opts.log = opts.log or function() end
  return T.new(opts)
end

-- A job that takes a slot of `pool`, notes its name in `order`, holds the
-- slot until `gate` resolves, then releases it.
-- A holder ("holder ...") takes its slot in a step of its own, before the
-- jobs that queue behind it ask: slots are granted only in steps.
local function dresser(orch, order, pool, name, gate, opts)
  local h = orch:run(name, function(job)
    local release = job:slot(pool)
    order[#order + 1] = name
    if gate then job:await(gate) end
    release()
  end, opts)
  if name:find("^holder") then orch:step() end
  return h
end

-- A one-slot pool "p" whose slot a holder keeps until `hold` resolves, so
-- the jobs run after it queue up; `order` lists who got the slot.
local function behind_holder()
  local orch = quiet { pools = { p = 1 } }
  local order = {}
  local hold = stagehand.future()
  dresser(orch, order, "p", "holder", hold)
  return orch, order, hold
end

describe("slot pools", function()
  describe("job:slot", function()
    it("grants free slots at the next step, never at the moment of asking, and queues the rest", function()
      local orch = quiet { pools = { dressing = 2 } }
      local order = {}
      local gate = stagehand.future()
      for i = 1, 4 do dresser(orch, order, "dressing", "soldier " .. i, gate) end
      assert.same({}, order)
      assert.same({ capacity = 2, in_use = 0, waiting = 4 }, orch:pools().dressing)
      assert.equal(0, orch:next_wake())
      orch:step()
      assert.same({ "soldier 1", "soldier 2" }, order)
      assert.same({ capacity = 2, in_use = 2, waiting = 2 }, orch:pools().dressing)
      gate:resolve()
      orch:step()
      assert.same({ "soldier 1", "soldier 2", "soldier 3", "soldier 4" }, order)
      assert.same({ capacity = 2, in_use = 0, waiting = 0 }, orch:pools().dressing)
      assert.no_leaks(orch)
    end)

    it("grants by effective priority, then by who asked first", function()
      local orch = quiet { pools = { layering = 1 } }
      local order = {}
      local gate = stagehand.future()
      dresser(orch, order, "layering", "holder", gate)
      dresser(orch, order, "layering", "bg 1", nil, { priority = "background" })
      dresser(orch, order, "layering", "scene 1", nil, { priority = "scene" })
      dresser(orch, order, "layering", "bg 2", nil, { priority = "background" })
      dresser(orch, order, "layering", "visible 1", nil, { priority = "visible" })
      dresser(orch, order, "layering", "scene 2", nil)
      gate:resolve()
      orch:step()
      assert.same({ "holder", "visible 1", "scene 1", "scene 2", "bg 1", "bg 2" }, order)
    end)

    it("reads a priority function at every grant", function()
      local orch = quiet { pools = { dressing = 1 } }
      local order = {}
      local gates = {}
      local on_screen = false
      local battle = function() return on_screen and "visible" or "background" end
      local hold = stagehand.future()
      dresser(orch, order, "dressing", "holder", hold)
      for i = 1, 2 do
        gates[i] = stagehand.future()
        dresser(orch, order, "dressing", "battle " .. i, gates[i], { priority = battle })
      end
      dresser(orch, order, "dressing", "shop", nil, { priority = "scene" })
      hold:resolve()
      orch:step()
      -- off screen, the battle waits for the shop; then the slot is the battle's
      assert.same({ "holder", "shop", "battle 1" }, order)
      dresser(orch, order, "dressing", "late shop", nil, { priority = "scene" })
      on_screen = true -- scrolled back: the second battle goes before the late shop
      gates[1]:resolve()
      orch:step()
      assert.same({ "holder", "shop", "battle 1", "battle 2" }, order)
      gates[2]:resolve()
      T.settle(orch, 100)
      assert.same({ "holder", "shop", "battle 1", "battle 2", "late shop" }, order)
    end)

    it("reads six priority functions at each grant, not only the first four", function()
      local orch = quiet { pools = { dressing = 1 } }
      local order = {}
      local hold = stagehand.future()
      dresser(orch, order, "dressing", "holder", hold)
      -- six distinct functions; the one that answers visible is the sixth
      -- to queue, so a grant must read past the first four sources
      local answers = { "background", "background", "scene", "background", "scene", "visible" }
      for i = 1, 6 do
        local answer = answers[i]
        dresser(orch, order, "dressing", "source " .. i, nil, { priority = function() return answer end })
      end
      hold:resolve()
      orch:step()
      assert.same({ "holder", "source 6", "source 3", "source 5", "source 1", "source 2", "source 4" }, order)
      assert.no_leaks(orch)
    end)

    it("counts a priority function that raises or answers no rank as the default at a grant, logging each once", function()
      local logged = {}
      local orch = T.new { pools = { dressing = 1 }, log = function(msg) logged[#logged + 1] = msg end }
      local order = {}
      local hold = stagehand.future()
      dresser(orch, order, "dressing", "holder", hold)
      dresser(orch, order, "dressing", "background", nil, { priority = "background" })
      dresser(orch, order, "dressing", "raises", nil, { priority = function() error("no camera yet") end })
      dresser(orch, order, "dressing", "answers a table", nil, { priority = function() return {} end })
      dresser(orch, order, "dressing", "visible", nil, { priority = "visible" })
      hold:resolve()
      orch:step()
      -- the default rank (scene) sits between visible and background
      assert.same({ "holder", "visible", "raises", "answers a table", "background" }, order)
      assert.equal(2, #logged) -- once each, though both were read at every grant
      local all = table.concat(logged, "\n")
      assert.truthy(all:find("raised: [^\n]*no camera yet"))
      assert.truthy(all:find("returned table[^\n]*, not a rank name or a number"))
      assert.no_leaks(orch)
    end)

    it("grants the slots freed by one pass of the run queue together, reading each source once", function()
      -- Four holders release in one pass: one round of grants reads each
      -- waiter's closure once and grants four; those four release in the
      -- next pass, and a second round grants the four left on the same
      -- readings. A round per release read every waiter still queued at
      -- every release: 36 calls.
      local orch = quiet { pools = { portraits = 4 } }
      local order, calls = {}, 0
      local hold = stagehand.future()
      for i = 1, 4 do dresser(orch, order, "portraits", "holder " .. i, hold) end
      local on_screen = { [3] = true, [6] = true }
      for i = 1, 8 do
        dresser(orch, order, "portraits", "portrait " .. i, nil, { priority = function()
          calls = calls + 1
          return on_screen[i] and "visible" or "background"
        end })
      end
      hold:resolve()
      orch:step()
      assert.equal(8, calls) -- (each once this step: the second round reads none again)
      assert.same({ "holder 1", "holder 2", "holder 3", "holder 4",
        "portrait 3", "portrait 6", "portrait 1", "portrait 2",
        "portrait 4", "portrait 5", "portrait 7", "portrait 8" }, order)
      assert.no_leaks(orch)
    end)

    it("grants between passes while a sliced job keeps the run queue busy", function()
      -- A bake that slices its work is queued again at every slice, so the
      -- run queue never runs dry while it bakes; the pool still turns over
      -- once every continuation queued before the last round has run.
      local orch, clock = quiet { pools = { p = 1 } }
      local baked, got = 0, {}
      orch:run("bake", function(job)
        for _ = 1, 40 do
          clock:advance(3) -- three ms of baking; a slice is 8
          baked = baked + 1
          job:slice()
        end
      end)
      for i = 1, 5 do
        orch:run("load " .. i, function(job)
          local release = job:slot("p")
          got[#got + 1] = baked -- how far the bake was when this load got the slot
          clock:advance(9) -- a decode as long as a slice
          job:slice()
          release()
        end)
      end
      orch:step()
      -- Each load got the slot a few bake slices after the one before: not
      -- all of them after the bake ended, as when grants waited for the
      -- queue to run dry.
      assert.same({ 6, 12, 18, 24, 30 }, got)
      assert.equal(40, baked)
      assert.no_leaks(orch)
    end)

    it("reads each priority function once a step, when the step first needs it", function()
      -- A step reads a source at its first grant round that needs it: what
      -- a holder's continuation changed before it released counts then.
      -- Later rounds of that step use the same reading.
      local orch = quiet { pools = { p = 1 } }
      local order = {}
      local near, reads = false, 0
      local hold = stagehand.future()
      orch:run("holder", function(job)
        local release = job:slot("p")
        order[#order + 1] = "holder"
        job:await(hold)
        near = true -- the camera turned to the far tree before letting go
        release()
      end)
      orch:step() -- (the holder takes the slot)
      dresser(orch, order, "p", "bush", nil, { priority = "scene" })
      dresser(orch, order, "p", "tree", nil, { priority = function()
        reads = reads + 1
        return near and "visible" or "background"
      end })
      dresser(orch, order, "p", "shrub", nil, { priority = function()
        reads = reads + 1
        return "background"
      end })
      hold:resolve()
      orch:step()
      assert.same({ "holder", "tree", "bush", "shrub" }, order)
      assert.equal(2, reads) -- one a source, in a step of three grants
      assert.no_leaks(orch)
    end)

    it("grants in every pool that freed a slot in the same turn", function()
      local orch = quiet { pools = { decode = 1, upload = 1 } }
      local order = {}
      local hold = stagehand.future()
      orch:run("holder", function(job)
        local free_decode = job:slot("decode")
        local free_upload = job:slot("upload")
        job:await(hold)
        free_decode()
        free_upload()
      end)
      dresser(orch, order, "decode", "decode waiter")
      dresser(orch, order, "upload", "upload waiter")
      assert.same({}, order)
      hold:resolve()
      orch:step()
      table.sort(order) -- both in this step; pools are not ordered among themselves
      assert.same({ "decode waiter", "upload waiter" }, order)
      assert.no_leaks(orch)
    end)

    it("lets inherited priority feed grants: a visible when on a queued background build", function()
      local orch = quiet { pools = { ["armor-builds"] = 1 } }
      local order = {}
      local hold = stagehand.future()
      dresser(orch, order, "armor-builds", "army build 0", hold, { priority = "background" })
      orch:step() -- (it takes the slot before the rest ask)
      for i = 1, 5 do
        dresser(orch, order, "armor-builds", "army build " .. i, nil, { priority = "background" })
      end
      dresser(orch, order, "armor-builds", "cape", nil, { priority = "background", key = "armor-build:cape" })
      orch:run("Hero portrait", function(job)
        return job:await(orch:when("armor-build:cape", nil, { priority = "visible" }))
      end, { priority = "visible" })
      hold:resolve()
      orch:step()
      assert.equal("cape", order[2])
      assert.no_leaks(orch)
    end)

    it("puts a queued job ahead once a visible caller joins its key", function()
      local orch, order, hold = behind_holder()
      dresser(orch, order, "p", "first in line", nil, { priority = "scene" })
      dresser(orch, order, "p", "cape", nil, { priority = "background", key = "cape" })
      orch:run("cape", function() end, { key = "cape", priority = "visible" }) -- joins it
      hold:resolve()
      orch:step()
      assert.same({ "holder", "cape", "first in line" }, order)
    end)

    it("drops a queued job back once its visible caller leaves", function()
      local orch, order, hold = behind_holder()
      dresser(orch, order, "p", "first in line", nil, { priority = "scene" })
      dresser(orch, order, "p", "cape", nil, { priority = "background", key = "cape" })
      local visible = orch:run("cape", function() end, { key = "cape", priority = "visible" })
      visible:cancel("scrolled away")
      hold:resolve()
      orch:step()
      assert.same({ "holder", "first in line", "cape" }, order)
      assert.no_leaks(orch)
    end)

    it("keeps arrival order among queued jobs raised by what waits on them", function()
      local orch, order, hold = behind_holder()
      local hs = {}
      for _, name in ipairs { "a", "b", "c" } do
        hs[name] = dresser(orch, order, "p", name, nil, { priority = "background" })
      end
      dresser(orch, order, "p", "d", nil, { priority = "scene" })
      -- c is raised before a, but a asked first
      orch:run("portrait of c", function(job) job:await(hs.c) end, { priority = "visible" })
      orch:run("portrait of a", function(job) job:await(hs.a) end, { priority = "visible" })
      hold:resolve()
      orch:step()
      assert.same({ "holder", "a", "c", "d", "b" }, order)
      assert.no_leaks(orch)
    end)

    it("raises a queued job through a chain of waits, and drops it when the chain's head leaves", function()
      for _, leaves in ipairs { false, true } do
        local orch, order, hold = behind_holder()
        dresser(orch, order, "p", "first in line", nil, { priority = "scene" })
        local cloth = dresser(orch, order, "p", "cloth", nil, { priority = "background" })
        local garment = orch:run("garment", function(job) job:await(cloth) end, { priority = "background" })
        local portrait = orch:run("portrait", function(job) job:await(garment) end, { priority = "visible" })
        if leaves then portrait:cancel("closed") end
        hold:resolve()
        orch:step()
        if leaves then
          assert.same({ "holder", "first in line", "cloth" }, order)
        else
          assert.same({ "holder", "cloth", "first in line" }, order)
        end
        assert.equal(0, T.settle(orch, 1000))
        assert.no_leaks(orch)
      end
    end)

    it("counts a job awaited twice in one list once: it drops back when the waiter leaves", function()
      local orch, order, hold = behind_holder()
      dresser(orch, order, "p", "first in line", nil, { priority = "scene" })
      local cape = dresser(orch, order, "p", "cape", nil, { priority = "background", key = "cape" })
      local portrait = orch:run("portrait", function(job)
        job:await(stagehand.all { cape, orch:when("cape"), cape })
      end, { priority = "visible" })
      local function rank_of(label)
        for _, r in ipairs(orch:report()) do
          if r.label == label then return r.priority end
        end
      end
      assert.equal("visible", rank_of("cape"))
      portrait:cancel("closed")
      orch:step()
      assert.equal("background", rank_of("cape"))
      hold:resolve()
      orch:step()
      assert.same({ "holder", "first in line", "cape" }, order)
      assert.no_leaks(orch)
    end)

    it("files a thousand jobs a scene loader awaits as one group, raised and dropped with the loader", function()
      local B = require "stagehand.core.backend"
      local orch, order, hold = behind_holder()
      dresser(orch, order, "p", "earlier scene job", nil, { priority = "scene" })
      local loader_rank = "visible"
      local loader = orch:run("scene loader", function(job)
        local children = {}
        for i = 1, 1000 do
          children[i] = orch:run("asset " .. i, function(child)
            local release = child:slot("p")
            order[#order + 1] = "asset " .. i
            if i == 10 then
              loader_rank = "background" -- the player turned away: the next step reads it
              child:sleep(1)
            end
            release()
          end)
        end
        job:await(stagehand.all(children))
      end, { priority = function() return loader_rank end })
      -- the 1,000 waiters are in two groups of the core: the loader's set and the earlier job's source
      local groups, p = 0, orch.pool_q.p.p
      local g = B.pool_next_group(p, -1)
      while g >= 0 do
        groups = groups + 1
        g = B.pool_next_group(p, g)
      end
      assert.equal(2, groups)
      hold:resolve()
      T.settle(orch, 10, 1)
      assert.equal("asset 10", order[11])
      assert.equal("earlier scene job", order[12])
      assert.equal("asset 11", order[13])
      assert.equal("asset 1000", order[1002])
      assert.equal("done", loader:state())
      assert.no_leaks(orch)
    end)

    it("keeps nothing of the sets once their jobs end, even with a fresh priority closure per job", function()
      local orch, order, hold = behind_holder()
      local loader = orch:run("loader", function(job)
        local hs = {}
        for i = 1, 30 do
          -- (an upvalue makes each its own closure: Lua 5.2 and 5.3 would
          -- hand back one cached closure for a function with none)
          hs[i] = dresser(orch, order, "p", "asset " .. i, nil, { priority = function() return i and "background" end })
        end
        job:await(stagehand.all(hs))
      end, { priority = function() return "visible" end })
      assert.is_true(orch.nsets >= 30) -- each asset: its own closure and the loader's
      hold:resolve()
      orch:step()
      assert.equal("done", loader:state())
      assert.equal("asset 30", order[31])
      assert.equal(0, orch.nsets)
      assert.no_leaks(orch) -- (no set still counted as in use)
    end)

    it("reuses the core's group ids once closures are collected: a closure per job does not grow them for good", function()
      local orch = quiet { pools = { p = 1 } }
      local function round()
        local order, hold = {}, stagehand.future()
        dresser(orch, order, "p", "holder", hold)
        local hs = {}
        for i = 1, 600 do
          local rank = i % 2 == 0 and "visible" or "background"
          hs[i] = dresser(orch, order, "p", rank .. " " .. i, nil, { priority = function() return rank end })
        end
        -- a loader with a closure of its own raises the last background job
        -- to scene: a set of two closures, under a reused id too
        orch:run("loader", function(job) job:await(hs[599]) end, { priority = function() return "scene" end })
        hold:resolve()
        orch:step()
        -- grants still read each job's own closure, reused id or not
        assert.equal("visible 2", order[2])
        assert.equal("visible 600", order[301])
        assert.equal("background 599", order[302])
        assert.equal("background 1", order[303])
        assert.equal("background 597", order[601])
      end
      for _ = 1, 5 do
        round()
        collectgarbage() -- (out of round(): nothing of it is on the stack)
        collectgarbage()
      end
      -- 3,000 closures in all, at most 600 alive at once
      assert.is_true(orch.next_group < 1500, "group ids in use: " .. orch.next_group)
      assert.no_leaks(orch)
    end)

    it("makes a reused group id forget the fixed rank of the set it named", function()
      local orch, order, hold = behind_holder()
      -- a cape with two callers of fixed ranks waits under their set, whose rank is fixed at visible
      local a = dresser(orch, order, "p", "cape", nil, { key = "cape", priority = "background" })
      local b = dresser(orch, order, "p", "cape", nil, { key = "cape", priority = "visible" })
      assert.equal(1, orch.nsets)
      local set_id = next(orch.members)
      a:cancel("closed")
      b:cancel("closed") -- the cape ends: its set's id is free
      assert.equal(0, orch.nsets)
      -- that id now names a function answering background, read live at each grant
      local banner = function() return "background" end
      dresser(orch, order, "p", "banner", nil, { priority = banner })
      assert.equal(set_id, orch.group_of[banner])
      dresser(orch, order, "p", "scene prop", nil, { priority = "scene" })
      hold:resolve()
      orch:step()
      assert.same({ "holder", "scene prop", "banner" }, order)
      assert.no_leaks(orch)
    end)

    it("reads a set's priority functions in the order they first came, not by reused ids", function()
      local orch, order, hold = behind_holder()
      -- a set of two fixed ranks takes the next id, then a function the one after
      local a = dresser(orch, order, "p", "tmp", nil, { key = "tmp", priority = "background" })
      local b = dresser(orch, order, "p", "tmp", nil, { key = "tmp", priority = "visible" })
      local set_id = next(orch.members)
      local calls = {}
      local first = function() calls[#calls + 1] = "first" return "scene" end
      local second = function() calls[#calls + 1] = "second" return "scene" end
      dresser(orch, order, "p", "cape", nil, { key = "cape", priority = first })
      assert.is_true(orch.group_of[first] > set_id)
      -- the set ends, and the function that comes next takes its lower id
      a:cancel("closed")
      b:cancel("closed")
      orch:run("cape", function() end, { key = "cape", priority = second })
      assert.equal(set_id, orch.group_of[second])
      -- a grant reads the cape's set of both: first, then second (as it
      -- would had no id been free), whatever their ids
      calls = {}
      hold:resolve()
      orch:step()
      assert.same({ "holder", "cape" }, order)
      assert.same({ "first", "second" }, calls)
      assert.no_leaks(orch)
    end)

    it("hands its release to anything that calls a function back", function()
      local orch = quiet { pools = { p = 1 } }
      local f = stagehand.future()
      orch:run("x", function(job)
        local release = job:slot("p")
        f:on_end(release) -- the slot goes back when the upload ends
        job.signal:on_abort(release)
        job:sleep(1e6)
      end)
      orch:step()
      assert.equal(1, orch:pools().p.in_use)
      f:resolve()
      assert.equal(0, orch:pools().p.in_use)
    end)

    it("counts a slot handed out or freed as progress: a busy pool is not a stall", function()
      local lines = {}
      local orch = T.new { pools = { bake = 1 }, log = function(m) lines[#lines + 1] = m end }
      local handles = {}
      for i = 1, 40 do
        handles[i] = orch:run("bake " .. i, function(job)
          local release = job:slot("bake")
          job:sleep(1000)
          job:progress()
          release()
        end, { stall_ms = 3000 })
      end
      assert.equal(0, T.settle(orch, 60000))
      for i = 1, 40 do assert.equal("done", handles[i]:state()) end
      assert.same({}, lines)
    end)

    it("stalls a waiter when the pool stops turning over", function()
      local orch = quiet { pools = { bake = 1 } }
      orch:run("stuck holder", function(job)
        job:slot("bake")
        job:await(stagehand.future())
      end, { stall_ms = 1e9 })
      local waiter = orch:run("waiter", function(job) job:slot("bake") end, { stall_ms = 2000 })
      T.settle(orch, 5000)
      assert.equal("stalled", waiter:state())
    end)

    it("leaks no slot after errors, stalls and cancellations of holders and waiters", function()
      local orch = quiet { pools = { p = 1 } }
      local failing = orch:run("fails holding", function(job)
        job:slot("p")
        job:sleep(10)
        error("dropped the armor")
      end)
      local queued_cancel = orch:run("queued, cancelled", function(job) job:slot("p") end)
      local stalls = orch:run("stalls holding", function(job)
        job:slot("p")
        job:await(stagehand.future())
      end, { stall_ms = 1000 })
      local holding_cancel = orch:run("holding, cancelled", function(job)
        job:slot("p")
        job:sleep(1e6)
      end)
      local last = orch:run("last", function(job)
        local release = job:slot("p")
        release()
        release() -- idempotent
        return "got it"
      end)
      queued_cancel:cancel()
      T.settle(orch, 100, 10)
      assert.equal("failed", failing:state())
      T.settle(orch, 3000)
      assert.equal("stalled", stalls:state())
      orch:step()
      holding_cancel:cancel()
      T.settle(orch, 100)
      assert.same({ "done", "got it" }, { last:result() })
      assert.same({ capacity = 1, in_use = 0, waiting = 0 }, orch:pools().p)
      assert.no_leaks(orch)
    end)

    it("raises when a job asks for a second slot of a pool it holds", function()
      local orch = quiet { pools = { p = 2 } }
      local h = orch:run("greedy", function(job)
        job:slot("p")
        job:slot("p")
      end)
      orch:step()
      local _, err = h:result()
      assert.matches("already holds a slot of pool 'p'", tostring(err.cause), 1, true)
      assert.equal(0, orch:pools().p.in_use)
    end)

    it("raises for a second slot of a pool held among several, and frees every one", function()
      local orch = quiet { pools = { cpu = 2, gpu = 1, disk = 1 } }
      local got
      local h = orch:run("bake", function(job)
        job:slot("cpu")
        job:slot("gpu")
        local ok, err = job:pcall(job.slot, job, "cpu")
        got = err
        job:slot("disk") -- a pool it does not hold is still granted
        return ok
      end)
      orch:step()
      assert.matches("already holds a slot of pool 'cpu'", tostring(got), 1, true)
      assert.same({ "done", false }, { h:result() })
      for name, cap in pairs { cpu = 2, gpu = 1, disk = 1 } do
        assert.same({ capacity = cap, in_use = 0, waiting = 0 }, orch:pools()[name])
      end
      assert.no_leaks(orch)
    end)

    it("holds nothing once it frees the slots of several pools itself, remembered outcome included", function()
      local orch = quiet { pools = { cpu = 1, gpu = 1 } }
      local h = orch:run("bake", function(job)
        local cpu = job:slot("cpu")
        local gpu = job:slot("gpu")
        gpu()
        cpu()
        return "baked"
      end, { key = "bake:castle" })
      orch:step()
      assert.same({ "done", "baked" }, { h:result() })
      assert.same({ capacity = 1, in_use = 0, waiting = 0 }, orch:pools().cpu)
      assert.no_leaks(orch) -- (the outcome the key remembers holds no slot)
    end)

    it("raises a clear error for a slot wait made in a coroutine that is not the job's", function()
      local orch = quiet { pools = { p = 1 } }
      local seen
      local hold = stagehand.future()
      local holder = orch:run("holder", function(job)
        local release = job:slot("p")
        job:await(hold)
        release()
      end)
      local h = orch:run("nested", function(job)
        local co = coroutine.create(function() return job:slot("p") end)
        local _, yielded = coroutine.resume(co) -- the pool is full: the wait parks
        local ok, err = coroutine.resume(co, "not stagehand")
        seen = { tostring(yielded), ok, err }
        job:slot("p") -- the job's next wait finds the misplaced one: it fails
        return "unreached"
      end)
      hold:resolve()
      T.settle(orch, 10, 1)
      local st, e = h:result()
      assert.equal("failed", st)
      assert.matches("job:slot in nested could not suspend the job", e.cause, 1, true)
      assert.matches("wait only in the job's coroutine", seen[1], 1, true)
      assert.is_false(seen[2])
      assert.matches("job:slot must be called from inside the job's own work (nested)", seen[3], 1, true)
      assert.equal("done", holder:state())
      assert.same({ capacity = 1, in_use = 0, waiting = 0 }, orch:pools().p)
      assert.no_leaks(orch)
    end)

    it("fails the job with a message naming an unknown pool", function()
      local orch = quiet()
      local h = orch:run("x", function(job) job:slot("nope") end)
      local _, err = h:result()
      assert.matches("no pool named 'nope'", tostring(err.cause), 1, true)
    end)
  end)

  describe(":pool", function()
    it("resizes: growing grants waiters, shrinking takes nothing back", function()
      local orch = quiet()
      orch:pool("p", 1)
      local order = {}
      local gate = stagehand.future()
      for i = 1, 4 do dresser(orch, order, "p", "j" .. i, gate) end
      orch:step()
      assert.same({ "j1" }, order)
      orch:pool("p", 3)
      orch:step()
      assert.same({ "j1", "j2", "j3" }, order)
      orch:pool("p", 1)
      assert.same({ capacity = 1, in_use = 3, waiting = 1 }, orch:pools().p)
      gate:resolve()
      T.settle(orch, 100)
      assert.same({ "j1", "j2", "j3", "j4" }, order)
    end)

    it("makes the pools option's pools in name order: jobs granted in one step run in the same order every run", function()
      -- (pairs' order over the names changes from process to process on
      -- Lua 5.4, and a step that frees slots of several pools grants pool
      -- by pool; so this spec also holds in each process it runs in)
      local names = { "upload", "mix", "decode", "bake", "zip", "cloth", "audio", "fx" }
      local pools = {}
      for _, p in ipairs(names) do pools[p] = 1 end
      local orch = quiet { pools = pools }
      local order, hold = {}, stagehand.future()
      for _, p in ipairs(names) do dresser(orch, {}, p, "holder of " .. p, hold) end
      for _, p in ipairs(names) do dresser(orch, order, p, p) end
      hold:resolve()
      orch:step()
      assert.same({ "audio", "bake", "cloth", "decode", "fx", "mix", "upload", "zip" }, order)
    end)

    it("holds everyone at capacity 0", function()
      local orch = quiet { pools = { closed = 0 } }
      local h = orch:run("x", function(job) job:slot("closed") end, { stall_ms = 1e9 })
      T.settle(orch, 1000)
      assert.equal("running", h:state())
      orch:pool("closed", 1)
      orch:step()
      assert.equal("done", h:state())
    end)

    it("names bad arguments and keeps working", function()
      local orch = quiet()
      assert.has_error(function() orch:pool("p", -1) end,
        "bad argument 'capacity' to pool: expected a whole number from 0 to 16777215, got -1")
      assert.has_error(function() orch:pool("p", 2147483648) end,
        "bad argument 'capacity' to pool: expected a whole number from 0 to 16777215, got 2147483648")
      assert.has_error(function() orch:pool("p", 1.5) end)
      assert.has_error(function() orch:pool("", 1) end)
      assert.has_error(function() orch:pool(nil, 1) end)
      orch:pool("p", 1)
      local h = orch:run("x", function(job) job:slot("p") return 1 end)
      orch:step()
      assert.same({ "done", 1 }, { h:result() })
    end)
  end)
end)

describe("budgets", function()
  it("grant up to ops permits a step, by priority then arrival", function()
    local orch = quiet()
    orch:budget("finalize", { ops = 2 })
    local order = {}
    local function finalize(name, prio)
      orch:run(name, function(job)
        job:permit("finalize")
        order[#order + 1] = name
      end, { priority = prio })
    end
    finalize("bg 1", "background")
    finalize("scene 1")
    finalize("visible 1", "visible")
    finalize("bg 2", "background")
    finalize("scene 2")
    assert.same({}, order)
    orch:step()
    assert.same({ "visible 1", "scene 1" }, order)
    orch:step()
    assert.same({ "visible 1", "scene 1", "scene 2", "bg 1" }, order)
    orch:step()
    assert.equal(5, #order)
    assert.no_leaks(orch)
  end)

  it("grant a step's permits by priority among every job that asked in that step", function()
    -- A streaming world: meshes built by workers come in together, and the
    -- chunks wake in the order their workers finished, far ones first.
    local orch = quiet()
    orch:budget("finalize", { ops = 2 })
    local order = {}
    local built = stagehand.future()
    local function chunk(name, prio)
      orch:run(name, function(job)
        job:await(built)
        job:permit("finalize")
        order[#order + 1] = name
      end, { priority = prio })
    end
    chunk("far", "background")
    chunk("near", "scene")
    chunk("under the player", "visible")
    chunk("ahead", "visible")
    built:resolve()
    orch:step() -- all four wake and ask in this step; two finalize
    assert.same({ "under the player", "ahead" }, order)
    orch:step()
    assert.same({ "under the player", "ahead", "near", "far" }, order)
    assert.no_leaks(orch)
  end)

  it("grant a permit asked for during a step in that same step, however many steps ran before", function()
    local orch = quiet()
    orch:budget("finalize", { ops = 1 })
    local built, done = stagehand.future(), false
    orch:run("chunk", function(job)
      job:await(built)
      job:permit("finalize")
      done = true
    end)
    orch:step()
    orch:step() -- (steps with nobody waiting for a permit)
    built:resolve()
    orch:step() -- the chunk wakes, asks and is granted in this step
    assert.is_true(done)
    assert.no_leaks(orch)
  end)

  it("ask for the next step at once while permits are waiting", function()
    -- (the luv driver steps when next_wake says: it once said the next
    -- stall check, so each permit of a finalize queue took seconds)
    local orch = quiet { stall_ms = 60000, check_ms = 30000 }
    orch:budget("finalize", { ops = 1 })
    for i = 1, 3 do
      orch:run("chunk " .. i, function(job) job:permit("finalize") end)
    end
    assert.equal(0, orch:next_wake())
    orch:step()
    assert.equal(2, orch.nrunning)
    assert.equal(0, orch:next_wake())
    orch:step()
    orch:step()
    assert.equal(0, orch.nrunning)
    assert.is_nil(orch:next_wake())
  end)

  it("run the permit holders in the step that granted them", function()
    local orch = quiet()
    orch:budget("b", { ops = 1 })
    local ran_in = {}
    local step_no = 0
    orch:run("x", function(job)
      job:permit("b")
      ran_in[#ran_in + 1] = step_no
      job:permit("b")
      ran_in[#ran_in + 1] = step_no
    end)
    step_no = 1
    orch:step()
    step_no = 2
    orch:step()
    assert.same({ 1, 2 }, ran_in)
  end)

  it("with ms, grant one at a time while the step's holders ran less than ms", function()
    local orch, clock = quiet()
    orch:budget("upload", { ms = 10 })
    local done = 0
    for i = 1, 10 do
      orch:run("upload " .. i, function(job)
        job:permit("upload")
        clock:advance(4)
        done = done + 1
      end)
    end
    orch:step()
    assert.equal(3, done) -- 4 + 4 < 10, then 12 >= 10
    orch:step()
    assert.equal(6, done)
  end)

  it("count every permit granted as progress for jobs waiting on the budget", function()
    local lines = {}
    local orch = T.new { log = function(m) lines[#lines + 1] = m end }
    orch:budget("finalize", { ops = 1 })
    local handles = {}
    for i = 1, 30 do
      handles[i] = orch:run("finalize " .. i, function(job) job:permit("finalize") end, { stall_ms = 1000 })
    end
    T.settle(orch, 30 * 500, 500)
    for i = 1, 30 do assert.equal("done", handles[i]:state()) end
    assert.same({}, lines)
  end)

  it("let a waiter that is cancelled leave the queue", function()
    local orch = quiet()
    orch:budget("b", { ops = 1 })
    local got = {}
    local a = orch:run("a", function(job) job:permit("b") got[#got + 1] = "a" end)
    orch:run("b", function(job) job:permit("b") got[#got + 1] = "b" end)
    a:cancel()
    orch:step()
    assert.same({ "b" }, got)
    assert.no_leaks(orch)
  end)

  it("take math.huge as no limit, for ops and for ms", function()
    local orch = quiet()
    orch:budget("all", { ops = math.huge })
    orch:budget("forever", { ms = math.huge })
    local done = 0
    for i = 1, 300 do
      orch:run("permit " .. i, function(job)
        job:permit(i % 2 == 0 and "all" or "forever")
        done = done + 1
      end)
    end
    orch:step()
    assert.equal(300, done) -- (one step grants them all)
    assert.no_leaks(orch)
  end)

  it("fail a job asking an unknown budget, naming it", function()
    local orch = quiet()
    local h = orch:run("x", function(job) job:permit("nope") end)
    assert.matches("no budget named 'nope'", tostring(select(2, h:result()).cause), 1, true)
  end)

  it("name bad declarations", function()
    local orch = quiet()
    assert.has_error(function() orch:budget("b", { frames = 2 }) end)
    assert.has_error(function() orch:budget("b", { ops = 0 }) end)
    assert.has_error(function() orch:budget("b", { ops = 1099511627776 }) end,
      "bad argument 'spec.ops' to budget: expected a number > 0 (math.huge: no limit), whole, at most 16777215,"
      .. " got 1099511627776")
    assert.has_error(function() orch:budget("b", { ops = 1, ms = 2 }) end)
    assert.has_error(function() orch:budget("b", { ms = -1 }) end,
      "bad argument 'spec.ms' to budget: expected a number > 0 (math.huge: no limit), got -1")
    assert.has_error(function() orch:budget("b", { ms = 0 / 0 }) end)
    assert.has_error(function() orch:budget("b", 5) end)
    assert.has_error(function() orch:budget(5, { ops = 1 }) end)
  end)
end)

describe(".cores", function()
  it("sizes a pool as the guide suggests: one slot per core beyond 2, at least 1", function()
    local n = math.max(1, stagehand.cores() - 2)
    local orch = quiet { pools = { dressing = n, layering = 1 } }
    assert.equal(n, orch:pools().dressing.capacity)
    assert.equal(1, orch:pools().layering.capacity)
  end)
end)
