-- The pure-Lua core (stagehand.core.lua_core) against the native one: the
-- same random calls made of both, every answer compared, and both
-- structures' invariant checks passing as they go. The C module is the
-- reference (make test builds it for every runtime); the whole suite also
-- runs on the pure-Lua core (STAGEHAND_BACKEND=lua, scripts/test.sh).
local C = require "stagehand._core"
local L = require "stagehand.core.lua_core"
local rng = require("spec.seeded").rng

local SEEDS = tonumber(os.getenv("CHAOS_SEEDS") or "") or 6
local CALLS = 6000

-- Two answers agree: the same number (NaN with NaN), or the same value.
local function same(a, b)
  if type(a) == "number" and type(b) == "number" then return a == b or (a ~= a and b ~= b) end
  return a == b
end

-- The calls of each structure, with how their arguments are drawn: "id"
-- (a small id, now and then one out of range or not whole), "time" (a
-- clock that mostly moves on and now and then runs back or is not
-- finite), "rank", "any" (a number of any kind), "bool".
local CALLS_OF = {
  clock = {
    { "clock_start", "id", "stall", "time" }, { "clock_restart", "id", "time" }, { "clock_progress", "id", "time" },
    { "clock_pause", "id" }, { "clock_resume", "id", "time" }, { "clock_stop", "id" },
    { "clock_set_visible", "bool", "time" }, { "clock_visible" }, { "clock_visible_time", "time" },
    { "clock_next_due", "time" }, { "clock_pop_stalled", "time" }, { "clock_pop_stalled", "time" },
    { "clock_stall_ms", "id" }, { "clock_count" }, { "clock_join", "id", "group" }, { "clock_touch", "group", "time" },
  },
  timers = {
    { "timers_add", "id", "time" }, { "timers_add", "id", "time" }, { "timers_cancel", "id" }, { "timers_peek" },
    { "timers_pop", "time" }, { "timers_pop", "time" }, { "timers_count" },
  },
  pool = {
    { "pool_set_capacity", "small" }, { "pool_capacity" }, { "pool_in_use" }, { "pool_waiting" },
    { "pool_try_acquire" }, { "pool_release" }, { "pool_reset_use" },
    { "pool_enqueue", "id", "group" }, { "pool_enqueue", "id", "group" }, { "pool_enqueue", "id", "group" },
    { "pool_remove", "id" }, { "pool_move", "id", "group" }, { "pool_group_of", "id" }, { "pool_is_waiting", "id" },
    { "pool_next_group", "group" }, { "pool_set_rank", "group", "rank" }, { "pool_fix_rank", "group", "rank" },
    { "pool_forget_group", "group" }, { "pool_next_live", "group" }, { "pool_new_reads" },
    { "pool_next_unread" }, { "pool_reread", "group" }, { "pool_grantable" }, { "pool_best" }, { "pool_rank_of", "id" },
    { "pool_arrival", "id" }, { "pool_grant", "id" }, { "pool_grant", "best" }, { "pool_peek" },
  },
  ids = {
    { "ids_take" }, { "ids_take" }, { "ids_give", "id" }, { "ids_give", "id" }, { "ids_count" },
  },
  barrier = {
    { "barrier_arrive", "id" }, { "barrier_arrived" }, { "barrier_size" }, { "barrier_next_missing", "any" },
  },
}

local CHECK = { clock = "clock_check", timers = "timers_check", pool = "pool_check", ids = "ids_check" }

-- Out of memory, as the pure-Lua core meets it: a write that adds a key to
-- one of its tables raises "not enough memory" when fail() says so (a
-- __newindex on each of them: it runs for exactly the writes that may make
-- a table grow).
local function starve(obj, fail)
  local mt = {
    __newindex = function(t, k, v)
      if fail() then error("not enough memory", 0) end
      rawset(t, k, v)
    end,
  }
  local function walk(t, depth)
    setmetatable(t, mt)
    if depth < 2 then
      for _, v in pairs(t) do
        if type(v) == "table" then walk(v, depth + 1) end
      end
    end
  end
  walk(obj, 0)
end

-- Random calls made of both cores. With `starving`, one write in eight
-- that adds a key to the Lua core's tables fails: the call raises, the
-- core must still be whole (its check), and the call made again must
-- answer as the native core's did, as though nothing had failed.
local function drive(kind, seed, starving)
  local r = rng(seed * 7 + #kind)
  local size = r(16) - 1
  local c_obj = kind == "barrier" and C.barrier_new(size) or C[kind .. "_new"]()
  local l_obj = kind == "barrier" and L.barrier_new(size) or L[kind .. "_new"]()
  local failing, failures = false, 0
  if starving then
    starve(l_obj, function() return failing and r(8) == 1 end)
  end
  local check = CHECK[kind]
  -- The Lua core's answer to fn(...) (every call answers one value),
  -- made again until it runs through.
  local function lua_call(fn, ...)
    failing = starving
    for _ = 1, 100 do
      local ok, got = pcall(fn, ...)
      if ok then
        failing = false
        return got
      end
      assert.equal("not enough memory", got)
      failures = failures + 1
      failing = false
      assert.equal(0, L[check](l_obj), "the Lua " .. kind .. " after a write failed, seed " .. seed)
      failing = starving
    end
    error("a call failed 100 times in a row")
  end
  local now = r(1000)
  local odd = { 0 / 0, math.huge, -math.huge, 0.5, -1, 2 ^ 24, 2 ^ 31, 1e300 }
  local function draw(how)
    if how == "id" then
      if r(40) == 1 then return odd[r(#odd)] end
      return r(kind == "ids" and 64 or 24) - 1
    elseif how == "group" then
      if r(40) == 1 then return odd[r(#odd)] end
      return r(10) - 2 -- (-1 now and then: unlinks a clock, walks from the start)
    elseif how == "small" then
      return r(40) == 1 and odd[r(#odd)] or r(6) - 1
    elseif how == "stall" then
      if r(30) == 1 then return odd[r(#odd)] end
      return r(8) == 1 and math.huge or r(200)
    elseif how == "time" then
      local k = r(50)
      if k == 1 then return odd[r(3)] end
      if k <= 5 then return now - r(100) end -- (a clock that runs back)
      now = now + r(60) - 1
      return now
    elseif how == "rank" then
      return r(30) == 1 and odd[r(#odd)] or r(7) - 4
    elseif how == "bool" then
      return r(2) == 1
    end
    return r(3) == 1 and odd[r(#odd)] or r(20) - 3
  end
  for call = 1, CALLS do
    local list = CALLS_OF[kind]
    local spec = list[r(#list)]
    local name = spec[1]
    local a, b
    local ca, la
    if name == "pool_peek" then -- (a worker pool's offer: the best n, then put back)
      local n = r(4)
      local got_c, got_l = {}, {}
      for i = 1, n do got_c[i], got_l[i] = C.pool_peek_next(c_obj), lua_call(L.pool_peek_next, l_obj) end
      ca, la = table.concat(got_c, ","), table.concat(got_l, ",")
      if ca == la then ca, la = C.pool_peek_end(c_obj), lua_call(L.pool_peek_end, l_obj) end
    elseif spec[2] == "best" then
      a = C.pool_best(c_obj)
      local lb = lua_call(L.pool_best, l_obj)
      if a ~= lb then ca, la = a, lb else ca, la = C[name](c_obj, a), lua_call(L[name], l_obj, a) end
    else
      a = spec[2] and draw(spec[2])
      b = spec[3] and draw(spec[3])
      local d = spec[4] and draw(spec[4])
      if d ~= nil then
        ca, la = C[name](c_obj, a, b, d), lua_call(L[name], l_obj, a, b, d)
      else
        ca, la = C[name](c_obj, a, b), lua_call(L[name], l_obj, a, b)
      end
    end
    if not same(ca, la) then
      error(("seed %d, call %d: %s(%s, %s) answered %s natively and %s in Lua"):format(seed, call, name,
        tostring(a), tostring(b), tostring(ca), tostring(la)))
    end
    if check and call % 25 == 0 then
      assert.equal(0, C[check](c_obj), "the native " .. kind .. "'s invariants, seed " .. seed .. " call " .. call)
      assert.equal(0, L[check](l_obj), "the Lua " .. kind .. "'s invariants, seed " .. seed .. " call " .. call)
    end
  end
  return failures
end

describe("the pure-Lua core", function()
  for _, kind in ipairs { "clock", "timers", "pool", "ids", "barrier" } do
    it("answers every call of a " .. kind .. " as the native core does", function()
      for seed = 1, SEEDS do drive(kind, seed) end
    end)
  end

  for _, kind in ipairs { "clock", "timers", "pool", "ids" } do
    it("stays whole when a table of a " .. kind .. " cannot grow, and answers the same once it can", function()
      local failures = 0
      for seed = 1, SEEDS do failures = failures + drive(kind, seed, true) end
      assert.is_true(failures > 100, "only " .. failures .. " writes failed")
    end)
  end

  it("has every function the native core's flat API has", function()
    local missing = {}
    local helpers = { fields_within = true, is_list = true, next = true } -- (the C module's, for the Lua side)
    for name, v in pairs(C) do
      if type(v) == "function" and not helpers[name] and L[name] == nil then
        missing[#missing + 1] = name
      end
    end
    table.sort(missing)
    assert.same({}, missing)
  end)

  it("refuses a barrier size out of range, as the native one does", function()
    for _, n in ipairs { -1, 0.5, 2 ^ 24, 0 / 0 } do
      assert.is_false(pcall(C.barrier_new, n))
      assert.is_false(pcall(L.barrier_new, n))
    end
  end)
end)
