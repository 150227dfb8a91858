-- Bad input at random: seeded scenes call every public method of the
-- single-threaded surface (the module, the orchestrator, jobs, Handles,
-- futures, signals, barriers, the load tracker, the testing helpers) with
-- arguments drawn from the values a game gets wrong: nil, NaN, infinities,
-- huge numbers, empty and 5,000-byte strings, strings with NUL bytes,
-- tables of the wrong shape, tables whose every metamethod raises,
-- functions that raise or return nonsense, coroutines, userdata, and
-- stagehand's own objects where another belongs. A job's reference is kept
-- and used after its job ended. After each call: whatever was raised is an
-- error meant for the game (never Lua's own "attempt to ...", nor a
-- position inside stagehand), and the core's structures hold. After the
-- scene: every loader ends, nothing is left behind, and a new job runs.
-- CHAOS_SEEDS=n runs more (make chaos), CHAOS_SEED=s replays one.
local stagehand = require "stagehand"
local T = require "stagehand.testing"
local seeded = require "spec.seeded"

-- An error of stagehand's own rather than one meant for the game.
local function internal(err)
  local s = tostring(err)
  return s:find("attempt to", 1, true) or s:find("stagehand/[%w_/]+%.lua:%d+")
    or s:find("core refused", 1, true) or s:find("bad argument #", 1, true)
    or s:find("must return a string", 1, true)
end

local function raising(what) return function() error("the game's " .. what .. " raised", 0) end end
local HOSTILE = {
  __index = raising "__index", __newindex = raising "__newindex", __len = raising "__len",
  __eq = raising "__eq", __lt = raising "__lt", __le = raising "__le", __call = raising "__call",
  __tostring = raising "__tostring", __pairs = raising "__pairs", __concat = raising "__concat",
}

-- The values a scene draws its arguments from (nil among them: index 1).
local function values(orch)
  local f = stagehand.future("a future")
  local ctl = stagehand.controller()
  local h = orch:run("a sleeper", function(job) job:sleep(5) return 1 end)
  return {
    nil, false, true, 0, -1, 1.5, 1e308, math.huge, -math.huge, 0 / 0, 2 ^ 63, -0.0, 3,
    "", "visible", "background", "scene", "x\0y", string.rep("a", 5000), "k1",
    {}, { 1, 2, 3 }, { "a", "b" }, { ms = 1 }, { ops = 1 }, { priority = "zz" }, { stall_ms = 0 / 0 },
    { priority = 0 / 0 }, { key = {} }, { signal = {} }, { ms = -1 }, { {} }, { h }, { f, h }, { n = -1 },
    setmetatable({}, HOSTILE), setmetatable({ 1 }, { __tostring = function() return {} end }),
    function() end, raising "function", function() return 0 / 0 end,
    function() return {} end, function() return "zz" end, function() return math.huge end,
    coroutine.create(function() end), io.stdout,
    h, f, ctl, ctl.signal, orch, stagehand.all { h, f }, stagehand.race { f },
  }
end

local function scene(seed)
  local r = seeded.rng(seed)
  local orch, clock = T.new { pools = { p = 2 }, log = function() end }
  orch:budget("b", { ops = 2 })
  local vals = values(orch)
  local nv = 0
  for i in pairs(vals) do nv = math.max(nv, i) end
  local function v() return vals[r(nv)] end
  local ctl = stagehand.controller()
  local load = stagehand.tracker(orch)
  local bar = orch:barrier("bar", { "a", "b" })
  local fut = stagehand.future("fut")
  local handles = {}
  local kept_job
  local function any_handle() return handles[r(#handles + 1)] end
  local function ranked() return ({ "visible", "scene", "background" })[r(3)] end
  local targets = {
    { "stagehand.new", function(a) stagehand.new(a) end },
    { "T.new", function(a) T.new(a) end },
    { "stagehand.future", function(a) stagehand.future(a) end },
    { "stagehand.abortable", function(a, b) stagehand.abortable(a, b) end },
    { "stagehand.all", function(a) stagehand.all(a) end },
    { "stagehand.all_settled", function(a) stagehand.all_settled(a) end },
    { "stagehand.any", function(a) stagehand.any(a) end },
    { "stagehand.race", function(a) stagehand.race(a) end },
    { "stagehand.is_error", function(a, b) stagehand.is_error(a, b) end },
    { "stagehand.tracker", function(a) stagehand.tracker(a) end },
    { "stagehand.format_timeline", function(a) stagehand.format_timeline(a) end },
    { "orch:run", function(a, b, c) handles[#handles + 1] = orch:run(a, b, c) end },
    { "job methods", function(a, b)
      handles[#handles + 1] = orch:run("a loader", function(job)
        kept_job = job
        local m = r(8)
        if m == 1 then job:await(a)
        elseif m == 2 then job:slot(a)
        elseif m == 3 then job:permit(a)
        elseif m == 4 then job:sleep(a)
        elseif m == 5 then job:progress(a, b)
        elseif m == 6 then job:call(a, b)
        elseif m == 7 then job:pcall(a, b)
        else job:slice() end
        return "fine"
      end, { priority = ranked(), key = r(3) == 1 and ("k" .. r(3)) or nil })
    end },
    { "a kept job", function(a, b)
      if not kept_job then return end
      local m = r(5)
      if m == 1 then kept_job:progress(a, b)
      elseif m == 2 then kept_job:await(a)
      elseif m == 3 then kept_job:sleep(a)
      elseif m == 4 then kept_job:slot(a)
      else kept_job:priority() end
    end },
    { "orch:newest", function(a, b, c) orch:newest(a, b, c) end },
    { "orch:when", function(a, b, c) orch:when(a, b, c) end },
    { "orch:pool", function(a, b) orch:pool(a, b) end },
    { "orch:budget", function(a, b) orch:budget(a, b) end },
    { "orch:barrier", function(a, b, c) orch:barrier(a, b, c) end },
    { "orch:when_idle", function(a) orch:when_idle(a) end },
    { "orch:timeout", function(a) orch:timeout(a) end },
    { "orch:running", function(a) orch:running(a) end },
    { "orch:forget", function(a) orch:forget(a) end },
    { "orch:step", function(a) orch:step(a) end },
    { "orch:set_visible", function(a) orch:set_visible(a) end },
    { "orch:watch", function(a) orch:watch(a) end },
    { "orch:report", function() orch:report() end },
    { "orch:dump", function() orch:dump() end },
    { "orch:pools", function() orch:pools() end },
    { "orch:trace", function() local tr = orch:trace(); tr:stop(); tr:events() end },
    { "orch:wait", function(a)
      local h = any_handle()
      -- (a long timeout on a hidden orchestrator moves the fake clock that
      -- far: the game asked for it, and the rest of the scene needs a clock)
      if h then orch:wait(h, (type(a) ~= "number" or a < 1e6) and a or 1000) end
    end },
    { "h:cancel", function(a) local h = any_handle(); if h and h.cancel then h:cancel(a) end end },
    { "h:on_end", function(a) local h = any_handle(); if h then h:on_end(a) end end },
    { "h:result", function() local h = any_handle(); if h then h:result() end end },
    { "f:resolve", function(a, b) fut:resolve(a, b) end },
    { "f:reject", function(a) fut:reject(a) end },
    { "f:on_end", function(a) fut:on_end(a) end },
    { "ctl:abort", function(a) ctl:abort(a); ctl = stagehand.controller() end },
    { "sig:on_abort", function(a) ctl.signal:on_abort(a) end },
    { "sig:throw_if_aborted", function() ctl.signal:throw_if_aborted() end },
    { "abortable of a signal", function() handles[#handles + 1] = stagehand.abortable(fut, ctl.signal) end },
    { "b:arrive", function(a) bar:arrive(a) end },
    { "b:missing", function() bar:missing() end },
    { "load:task", function(a, b) load:task(a, b) end },
    { "load:progress", function(a) load:progress(a) end },
    { "load:fraction", function(a) load:fraction(a) end },
    { "load:expect", function(a, b) load:expect(a, b) end },
    { "load:counts", function(a) load:counts(a) end },
    { "load:on", function(a) load:on(a) end },
    { "load:timeline", function() load:timeline() end },
    { "a task", function(a, b)
      local t = load:task("phase", {})
      local m = r(3)
      if m == 1 then t:advance(a) elseif m == 2 then t:fail(a) else t:finish() end
      t:advance(b)
    end },
    { "clock:advance", function() clock:advance(r(50)) end },
    { "T.settle", function() T.settle(orch, r(200)) end },
  }
  local faults = {}
  for turn = 1, 400 do
    local t = targets[r(#targets)]
    local ok, err = pcall(t[2], v(), v(), v())
    if not ok and internal(err) then
      faults[#faults + 1] = "turn " .. turn .. ", " .. t[1] .. ": " .. tostring(err)
    end
    T.core_faults(orch, faults)
    if #faults > 0 then break end
  end
  -- Then the game stops making mistakes: everything it left open ends.
  orch:set_visible(true)
  if fut:state() == "pending" then fut:resolve(1) end
  ctl:abort("the scene is over")
  if bar:missing()[1] then
    for _, k in ipairs(bar:missing()) do bar:arrive(k) end
  end
  local left = T.settle(orch, 1e7, 1000)
  local after = orch:run("after", function(job) job:sleep(1) return "alive" end)
  left = left + T.settle(orch, 1000)
  return orch, handles, faults, after, left
end

describe("bad input at random", function()
  local which, seeds = seeded.seeds()
  it("is refused with the game's errors, and leaves stagehand whole and working" .. which, function()
    for _, seed in ipairs(seeds) do
      -- (a controller belongs to no orchestrator: its handlers' errors go
      -- to stderr, here to nowhere)
      local stderr = io.stderr
      io.stderr = { write = function() end }
      local ok, orch, handles, faults, after, left = pcall(scene, seed)
      io.stderr = stderr
      assert(ok, "seed " .. seed .. ": the scene raised: " .. tostring(orch))
      assert(#faults == 0, "seed " .. seed .. ": " .. table.concat(faults, "\n"))
      seeded.assert_whole(seed, orch, handles, left)
      assert.same({ "done", "alive" }, { after:result() }, "seed " .. seed)
    end
  end)
end)
