-- Nothing loads twice, checked against a model that knows nothing of
-- stagehand's insides. Seeded scenes ask for a few keys again and again:
-- by `run` (joining a run of the key if one is going, else starting one,
-- now and then with a signal that has already aborted; a third with
-- `reuse`, which a remembered `done` outcome settles at once) and by `when`
-- (following a run, settling from a remembered outcome, or waiting for a
-- run to start). Between steps the game ends runs (done or failed), lets
-- time pass so that runs and `when`s given a short stall time stall,
-- withdraws callers (by `h:cancel` and by their signals), and forgets keys.
--
-- The model keeps, per key, the run going and its callers, the `when`s
-- waiting for a run, and the last `remember` outcomes, oldest forgotten
-- first (a new outcome of a key replaces its old one as the newest; a
-- cancelled run leaves what was remembered as it was). After every call
-- and every step:
-- - every run's work has been called once, and `orch:running(key)` says
--   what the model does;
-- - every Handle is running while the model says so, and else ended as
--   the model says: its run's outcome and values, `cancelled` for a caller
--   that left (and for every caller of a run whose last caller left), the
--   remembered outcome for a `when` on a key that was not running.
-- The model reads nothing but public Handles' states and results.
-- CHAOS_SEEDS=n runs more, CHAOS_SEED=s replays one (spec/seeded.lua).
local stagehand = require "stagehand"
local T = require "stagehand.testing"
local seeded = require "spec.seeded"

local KEYS = { "armor", "floor", "hero", "music", "torch" }
local REMEMBER = 3
local SHORT = 50 -- the stall time of a doomed run or when (check_ms is 10)

local function scene(seed, tally)
  local r = seeded.rng(seed)
  local orch, clock = T.new { remember = REMEMBER, stall_ms = 1e9, check_ms = 10, log = function() end }
  local runs = {} -- every run the model knows, by number
  local going = {} -- key -> the run going
  local pending = {} -- key -> list of callers waiting for a run to start
  local mem = {} -- remembered outcomes, oldest first: {key =, run =}
  local callers = {} -- every caller: {h =, expect = nil (running) or {state, value}}
  local handles = {}
  local works = {} -- run number -> how many times its work was called
  local turn = 0

  local function fail(why) error(("seed %d, turn %d: %s"):format(seed, turn, why)) end
  local function remembered(key)
    for i, m in ipairs(mem) do
      if m.key == key then return m, i end
    end
  end
  -- A run ended: its callers hear how, and a run that was not cancelled
  -- becomes the newest outcome of its key.
  local function ended(run, state, value)
    going[run.key] = nil
    run.outcome = { state, value }
    for _, c in ipairs(run.callers) do
      if not c.expect then c.expect = run.outcome end
    end
    if state ~= "cancelled" then
      local _, i = remembered(run.key)
      if i then table.remove(mem, i) end
      mem[#mem + 1] = { key = run.key, run = run }
      if #mem > REMEMBER then table.remove(mem, 1) end
    end
    tally[state] = (tally[state] or 0) + 1
  end
  local function live(run)
    for _, c in ipairs(run.callers) do
      if not c.expect then return true end
    end
    return false
  end
  -- A caller leaves: its Handle is cancelled, and a run whose last caller
  -- left is cancelled (not remembered).
  local function leave(c)
    if c.expect then return end
    c.expect = { "cancelled" }
    local run = c.run
    if run then
      if not live(run) then ended(run, "cancelled") end
    else
      local list = pending[c.key]
      for i, p in ipairs(list) do
        if p == c then table.remove(list, i) break end
      end
    end
  end
  local function new_caller(h, key)
    local c = { h = h, key = key }
    callers[#callers + 1], handles[#handles + 1] = c, h
    return c
  end

  local function check(what)
    if works[0] then fail("after " .. what .. ", a caller that must not run its work (an aborted signal, a reuse) ran it") end
    for n, run in ipairs(runs) do
      if works[n] ~= 1 then fail(("after %s, run %d of %s worked %d times"):format(what, n, run.key, works[n] or 0)) end
    end
    for _, key in ipairs(KEYS) do
      if orch:running(key) ~= (going[key] ~= nil) then
        fail(("after %s, running(%s) is %s"):format(what, key, tostring(orch:running(key))))
      end
    end
    for i, c in ipairs(callers) do
      local st, v = c.h:result()
      local want = c.expect
      local ok
      if not want then
        ok = st == "running"
      elseif want[1] == "done" then
        ok = st == "done" and v == want[2]
      else
        ok = st == want[1] and stagehand.is_error(v, want[1])
          and (want[1] ~= "failed" or v.cause == want[2])
      end
      if not ok then
        fail(("after %s, caller %d (%s) is %s %s, not %s %s"):format(what, i, c.key, st, tostring(v),
          want and want[1] or "running", want and tostring(want[2]) or ""))
      end
    end
  end

  local function start_run(key, doomed, reuse)
    local n = #runs + 1
    local run = { key = key, n = n, gate = stagehand.future(), callers = {} }
    runs[n] = run
    going[key] = run
    -- `when`s waiting for this key join before its work runs
    for _, p in ipairs(pending[key] or {}) do
      p.run = run
      run.callers[#run.callers + 1] = p
    end
    pending[key] = nil
    local h = orch:run("loading " .. key, function(job)
      works[n] = (works[n] or 0) + 1
      job:await(run.gate)
      return n
    end, { key = key, stall_ms = doomed and SHORT or nil, reuse = reuse })
    run.doomed = doomed
    local c = new_caller(h, key)
    c.run = run
    table.insert(run.callers, 1, c)
    return c
  end

  local ops = {
    function() -- a run is asked for: it joins the run going, or starts one
      local key = KEYS[r(#KEYS)]
      if r(12) == 1 then -- (with a signal that has already aborted: it never runs)
        local ctl = stagehand.controller()
        ctl:abort("gone")
        local c = new_caller(orch:run("loading " .. key, function() works[0] = 1 end,
          { key = key, signal = ctl.signal }), key)
        c.expect = { "cancelled" }
        return "a run with an aborted signal"
      end
      local run = going[key]
      local reuse = r(3) == 1 -- (get-or-load: a remembered `done` settles it, and no work runs)
      if not run then
        local m = reuse and remembered(key)
        if m and m.run.outcome[1] == "done" then
          local c = new_caller(orch:run("loading " .. key, function() works[0] = 1 end, { key = key, reuse = true }),
            key)
          c.expect = m.run.outcome
          tally.reused = (tally.reused or 0) + 1
          return "a run of " .. key .. " reusing run " .. m.run.n
        end
        start_run(key, r(4) == 1, reuse)
        return "a run of " .. key
      end
      local ctl = r(2) == 1 and stagehand.controller() or nil
      local c = new_caller(orch:run("joining " .. key, function() works[0] = 1 end,
        { key = key, signal = ctl and ctl.signal }), key)
      c.run, c.ctl = run, ctl
      run.callers[#run.callers + 1] = c
      if c.h.id ~= run.callers[1].h.id then fail("a joining Handle follows another job") end
      return "a run joining " .. key
    end,
    function() -- a when: follows, settles from memory, or waits
      local key = KEYS[r(#KEYS)]
      local ctl = r(3) == 1 and stagehand.controller() or nil
      local doomed = not going[key] and r(6) == 1
      local c = new_caller(orch:when(key, nil, { signal = ctl and ctl.signal, stall_ms = doomed and SHORT or nil }), key)
      c.ctl = ctl
      local run = going[key]
      if run then
        c.run = run
        run.callers[#run.callers + 1] = c
      else
        local m = remembered(key)
        if m then
          c.expect = m.run.outcome
          tally.recalled = tally.recalled + 1
        else
          c.doomed = doomed
          pending[key] = pending[key] or {}
          table.insert(pending[key], c)
        end
      end
      return "a when on " .. key
    end,
    function() -- a run ends, done or failed
      local list = {}
      for _, key in ipairs(KEYS) do
        if going[key] then list[#list + 1] = going[key] end
      end
      local run = list[r(#list + 1)]
      if not run then return "nothing" end
      if r(3) == 1 then
        ended(run, "failed", "bad " .. run.n)
        run.gate:reject("bad " .. run.n)
      else
        ended(run, "done", run.n)
        run.gate:resolve()
      end
      orch:step() -- (its work returns)
      return "the end of run " .. run.n
    end,
    function() -- a caller leaves, by h:cancel or by its signal
      local c = callers[r(#callers + 1)]
      if not c or c.expect then return "nothing" end
      leave(c)
      if c.ctl and r(2) == 1 then c.ctl:abort("left") else c.h:cancel("left") end
      return "caller " .. c.key .. " leaving"
    end,
    function() -- a key is forgotten
      local key = KEYS[r(#KEYS)]
      local _, i = remembered(key)
      if i then table.remove(mem, i) end
      orch:forget(key)
      return "forgetting " .. key
    end,
    function() -- time passes: doomed runs and whens stall
      -- (runs stall in the order they came due: the order they started,
      -- since the clock moves only here; each is remembered as it stalls)
      local doomed = {}
      for _, key in ipairs(KEYS) do
        if going[key] and going[key].doomed then doomed[#doomed + 1] = going[key] end
      end
      table.sort(doomed, function(a, b) return a.n < b.n end)
      for _, run in ipairs(doomed) do ended(run, "stalled") end
      for _, key in ipairs(KEYS) do
        local still = {}
        for _, p in ipairs(pending[key] or {}) do
          if p.doomed then p.expect = { "stalled" } else still[#still + 1] = p end
        end
        pending[key] = still[1] and still or nil
      end
      clock:advance(SHORT + 20)
      orch:step()
      return "time passing"
    end,
  }

  for t = 1, 120 do
    turn = t
    for _ = 1, r(3) do check(ops[r(#ops)]()) end
    orch:step() -- (the clock moves only when time passes, above)
    check("a step")
  end
  -- Then every run ends and every when still waiting leaves.
  for _, key in ipairs(KEYS) do
    if going[key] then
      local run = going[key]
      ended(run, "done", run.n)
      run.gate:resolve()
    end
    for _, p in ipairs(pending[key] or {}) do
      p.expect = { "cancelled" }
      p.h:cancel("closing")
    end
    pending[key] = nil
  end
  orch:step()
  check("the end")
  tally.runs = tally.runs + #runs
  tally.callers = tally.callers + #callers
  return orch, handles
end

describe("keys", function()
  local which, seeds = seeded.seeds()
  it("run each load once and end every caller as a model of runs, callers and memory says" .. which, function()
    local tally = { runs = 0, callers = 0, recalled = 0 }
    seeded.run_scenes("keys", seeds, scene, tally, "KEYS_TALLY")
  end)
end)
