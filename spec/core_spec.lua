-- The native core through the backend seam: bad input from Lua never crashes
-- the process; the core answers with a status.
local B = require "stagehand.core.backend"

local EINVAL, ESTATE = B.SH_EINVAL, B.SH_ESTATE

describe("the core's statuses", function()
  it("have the header's names and values, in either backend", function()
    local f = assert(io.open("csrc/core/stagehand.h", "rb"))
    local header = f:read("*a")
    f:close()
    local enum = assert(header:match("enum sh_status {(.-)}"))
    local n = 0
    for name, value in enum:gmatch("(SH_%u+) = (%-?%d+)") do
      n = n + 1
      assert.equal(tonumber(value), B[name], name)
    end
    assert.equal(4, n)
  end)

  it("turn into one clear internal error through B.check", function()
    assert.has_no_error(function() B.check(B.SH_OK, "do nothing") end)
    local ok, err = pcall(B.check, B.SH_ESTATE, "grant a slot")
    assert.is_false(ok)
    assert.equal("stagehand: internal error: the core refused to grant a slot (SH_ESTATE: not in the state the call"
      .. " needs)", err)
    ok, err = pcall(B.check, -42, "queue a waiter")
    assert.is_false(ok)
    assert.matches("(status -42)", err, 1, true)
  end)

  it("say out of memory as Lua does, not as a fault of stagehand's", function()
    local ok, err = pcall(B.check, B.SH_ENOMEM, "link a stall clock to a queue")
    assert.is_false(ok)
    assert.equal("stagehand: not enough memory to link a stall clock to a queue", err)
    assert.has_no_error(function() B.check(B.SH_ENOMEM, "grow a list", B.SH_ENOMEM) end)
  end)
end)

describe("the native core", function()
  it("refuses ids out of range", function()
    local c = B.clock_new()
    assert.equal(EINVAL, B.clock_start(c, -1, 10, 0))
    assert.equal(EINVAL, B.clock_start(c, 2 ^ 24, 10, 0))
    assert.equal(EINVAL, B.clock_progress(c, 5, 0))
    assert.equal(EINVAL, B.clock_stop(c, 99))
    assert.equal(EINVAL, B.clock_pause(c, 1e9))
    assert.equal(0, B.clock_check(c))
  end)

  it("refuses bad times and stall lengths", function()
    local c = B.clock_new()
    assert.equal(EINVAL, B.clock_start(c, 0, 0, 0))
    assert.equal(EINVAL, B.clock_start(c, 0, -1, 0))
    assert.equal(EINVAL, B.clock_start(c, 0, 0 / 0, 0))
    assert.equal(EINVAL, B.clock_start(c, 0, -math.huge, 0))
    assert.equal(EINVAL, B.clock_start(c, 0, 10, 0 / 0))
    assert.equal(0, B.clock_start(c, 0, 10, 0))
    assert.equal(ESTATE, B.clock_start(c, 0, 10, 0))
    -- math.huge is a clock that never stalls
    assert.equal(0, B.clock_stop(c, 0))
    assert.equal(0, B.clock_start(c, 1, math.huge, 0))
    assert.equal(-1, B.clock_pop_stalled(c, 1e300))
  end)

  it("keeps timers consistent under bad input", function()
    local t = B.timers_new()
    assert.equal(EINVAL, B.timers_add(t, -5, 1))
    assert.equal(EINVAL, B.timers_add(t, 1, 0 / 0))
    assert.equal(ESTATE, B.timers_cancel(t, 3))
    assert.equal(0, B.timers_add(t, 3, 10))
    assert.equal(-1, B.timers_pop(t, 0 / 0))
    assert.equal(3, B.timers_pop(t, 10))
    assert.equal(0, B.timers_check(t))
  end)

  it("refuses bad pool ids and groups, and reuses only a group nobody waits in", function()
    local p = B.pool_new()
    assert.equal(0, B.pool_set_capacity(p, 0))
    assert.equal(EINVAL, B.pool_set_capacity(p, -1))
    assert.equal(EINVAL, B.pool_enqueue(p, -1, 0))
    assert.equal(EINVAL, B.pool_enqueue(p, 0, 2 ^ 24))
    assert.equal(0, B.pool_enqueue(p, 7, 3))
    assert.equal(ESTATE, B.pool_enqueue(p, 7, 3))
    assert.equal(EINVAL, B.pool_move(p, 7, -1))
    assert.equal(ESTATE, B.pool_move(p, 8, 1))
    assert.equal(EINVAL, B.pool_set_rank(p, 1000, 1))
    assert.equal(EINVAL, B.pool_fix_rank(p, -1, 1))
    assert.equal(EINVAL, B.pool_forget_group(p, -1))
    assert.equal(EINVAL, B.pool_forget_group(p, 2 ^ 24))
    assert.equal(ESTATE, B.pool_forget_group(p, 3)) -- 7 waits in it
    assert.equal(0, B.pool_remove(p, 7))
    assert.equal(0, B.pool_forget_group(p, 3))
    assert.equal(0, B.pool_forget_group(p, 500)) -- never used: nothing to forget
    assert.equal(0, B.pool_check(p))
  end)

  it("hands out the lowest free id, and refuses ids not out", function()
    local s = B.ids_new()
    assert.equal(EINVAL, B.ids_give(s, 0)) -- never taken
    for i = 0, 99 do assert.equal(i, B.ids_take(s)) end
    for _, id in ipairs { 70, 5, 64, 63, 99 } do assert.equal(0, B.ids_give(s, id)) end
    assert.equal(ESTATE, B.ids_give(s, 64)) -- given back twice
    assert.equal(EINVAL, B.ids_give(s, 100))
    assert.equal(EINVAL, B.ids_give(s, -1))
    assert.equal(EINVAL, B.ids_give(s, 2 ^ 24))
    assert.equal(95, B.ids_count(s))
    for _, id in ipairs { 5, 63, 64, 70, 99, 100 } do assert.equal(id, B.ids_take(s)) end
    assert.equal(0, B.ids_check(s))
  end)

  it("gives a later wave of jobs the lowest ids, in the order they start", function()
    -- (Ids kept low and in order keep the core's arrays read in order: see
    -- engine.alloc_slot.) The first wave ends in an order of its own.
    local T = require "stagehand.testing"
    local F = require "stagehand.engine.fields"
    local o = T.new()
    local fs, cid = {}, {}
    for i = 1, 10 do
      fs[i] = require("stagehand").future()
      cid[i] = o:run("first " .. i, function(job) job:await(fs[i]) end)[1][F.CID]
    end
    assert.same({ 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 }, cid)
    for _, i in ipairs { 7, 2, 9, 4, 1 } do fs[i]:resolve() end
    o:step()
    local ids = {}
    for i = 1, 5 do
      local h = o:run("second " .. i, function(job) job:sleep(10) end)
      ids[i] = h[1][F.CID]
    end
    -- (A stack of freed ids gave 0, 3, 8, 1, 6: the reverse of the ends.)
    assert.same({ 0, 1, 3, 6, 8 }, ids)
    for i = 1, 10 do fs[i]:resolve() end
    T.settle(o, 100)
    assert.all_ended(o)
    assert.no_leaks(o)
  end)

  it("survives many clocks being made and collected", function()
    for _ = 1, 200 do
      local c = B.clock_new()
      B.clock_start(c, 1000, 5, 0)
    end
    collectgarbage()
    collectgarbage()
    assert.is_true(true)
  end)

  if B.name == "c" then
    it("raises a clear error for a wrong object type", function()
      local function says(pattern, fn, ...)
        local ok, err = pcall(fn, ...)
        assert.is_false(ok)
        assert.matches(pattern, err, 1, true)
      end
      says("stagehand.clock expected, got table", B.clock_start, {}, 0, 1, 0)
      says("stagehand.clock expected, got stagehand.timers", B.clock_start, B.timers_new(), 0, 1, 0)
      says("stagehand.pool expected, got stagehand.clock", B.pool_best, B.clock_new())
      says("stagehand.ids expected, got stagehand.barrier", B.ids_take, B.barrier_new(2))
      says("stagehand.barrier expected, got stagehand.ids", B.barrier_arrive, B.ids_new(), 0)
      says("stagehand.timers expected, got nil", B.timers_pop, nil, 0)
      -- another library's userdata, with a metatable of its own
      says("stagehand.pool expected, got", B.pool_release, io.stdout)
      local p = B.pool_new()
      B.pool_free(p)
      says("object already freed", B.pool_release, p)
      assert.has_error(function() B.clock_start(B.clock_new(), "x", 1, 0) end)
      assert.equal(0, B.pool_check(B.pool_new())) -- (and every kind still works)
    end)

    it("maps fractional ids to a refusal, not a cast", function()
      assert.equal(EINVAL, B.clock_start(B.clock_new(), 1.5, 1, 0))
    end)
  end

  -- Every function of the C module (what any Lua code can require) called
  -- at random with anything: its objects, ids in and out of range, times
  -- that run back or overflow, NaN, wrong types, objects freed. Nothing
  -- crashes, and every live object's invariants hold after every call.
  -- (Before 7df0918 a clock given a time earlier than one it had recorded
  -- failed its check: at call 1,140 of seed 1.)
  it("keeps its invariants whatever the C module is called with", function()
    local C = require "stagehand._core"
    local rng = require("spec.seeded").rng
    local names = {}
    for k, v in pairs(C) do
      if type(v) == "function" and k ~= "sleep_ms" then names[#names + 1] = k end
    end
    table.sort(names)
    local checks = { clock = C.clock_check, pool = C.pool_check, timers = C.timers_check, ids = C.ids_check }
    local specials = { true, false, 0.5, -0.5, 1e9, -1e9, 2 ^ 31, 2 ^ 53, -2 ^ 63, 0 / 0, 1 / 0, -1 / 0, "7", "", {} }
    for seed = 1, 4 do
      local r = rng(seed)
      local objs, kind_of, freed, of_kind = {}, {}, {}, {}
      for _, kind in ipairs { "clock", "pool", "barrier", "timers", "ids" } do
        of_kind[kind] = {}
        for i = 1, 2 do
          local o = C[kind .. "_new"](r(20))
          objs[#objs + 1], kind_of[o], of_kind[kind][i] = o, kind, o
        end
      end
      -- Mostly small numbers, so ids meet again and times run both ways.
      local function any()
        local k = r(20)
        if k <= 2 then return objs[r(#objs)] end
        if k <= 17 then return r(12) - 3 end
        if k == 18 then return nil end
        return specials[r(#specials)]
      end
      for step = 1, 10000 do
        local name = names[r(#names)]
        if not name:find("_free$") or r(40) == 1 then
          -- (the first argument mostly an object of the function's own kind)
          local own = of_kind[name:match("^(%a+)_")]
          local a = own and r(10) > 1 and own[r(2)] or any()
          local b, c, d = any(), any(), any()
          local ok = pcall(C[name], a, b, c, d)
          if ok and name:find("_free$") and kind_of[a] then freed[a] = true end
          for i = 1, #objs do
            local o = objs[i]
            local check = checks[kind_of[o]]
            if check and not freed[o] and check(o) ~= 0 then
              error(("seed %d, call %d (%s): a %s's invariants broke"):format(seed, step, name, kind_of[o]))
            end
          end
        end
      end
    end
  end)
end)
