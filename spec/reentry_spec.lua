-- Game code runs inside stagehand's own work: priority functions (read in
-- the middle of a grant), watchers (told as a job starts and ends), on_end
-- and on_abort handlers, load trackers' listeners, the log function. Each
-- of them may do anything the API allows: cancel, run, join, resize a
-- pool, turn a budget from ops to ms and back, settle a future, report,
-- close an orchestrator, raise.
-- Seeded scenes do exactly that at random; afterwards every loader has
-- ended, nothing stagehand-internal was raised, every waiting job is filed
-- where its priority says, every slot and permit went to a job no waiting
-- rival outranked (where both ranks were known), and nothing is left
-- behind. A second
-- orchestrator (a shared cache) runs beside the first: jobs of each await
-- Handles of the other, and callbacks act on both. The jobs' own waits are
-- every kind a loader makes: slots, permits, futures, Handles, sleeps,
-- `all`, `any`, `race`, `abortable`, `when_idle` (of either orchestrator), `slice` and
-- `job:call` answered from game code.
-- CHAOS_SEEDS=n runs more (make chaos), CHAOS_SEED=s replays one.
local stagehand = require "stagehand"
local each = require("stagehand.core.compat").each
local T = require "stagehand.testing"
local priority = require "stagehand.rank.priority"
local B = require "stagehand.core.backend"
local F = require "stagehand.engine.fields"
local seeded = require "spec.seeded"

local rng = seeded.rng

local RANKS = { "visible", "scene", "background" }
local PHASES = { "fetch", "decode" }

-- An error of stagehand's own rather than one the game asked for: Lua's
-- own runtime errors, or a stagehand file's position.
local function internal(err)
  local s = tostring(err)
  return s:find("attempt to", 1, true) or s:find("stagehand/[%w_/]+%.lua:%d+") or s:find("core refused", 1, true)
end

-- Appends v, counted once the call that made it has returned: game code in
-- that call's callbacks appends too, and `list[#list + 1] = call()` counts
-- first, so the outer one wrote over what the inner one added.
local function add(list, v) list[#list + 1] = v end

local function scene(seed)
  local r = rng(seed)
  local clock = T.clock()
  local faults = {}
  local function note(ok, err)
    if not ok and internal(err) then faults[#faults + 1] = tostring(err) end
  end
  local orch, cache
  local handles, futures, ctls = {}, { stagehand.future() }, { stagehand.controller() }
  local function pick(t) return t[r(#t)] end
  local function any_handle() return handles[r(#handles + 1)] end
  -- Every job waiting in a queue is filed under the group of its set of
  -- priority sources, and that group is one the orchestrator still knows.
  local function check_filed(where)
    for _, o in ipairs { orch, cache } do
      for _, job in each, o.by_slot do
        local q = job[F.WAITQ]
        if q then
          local g = B.pool_group_of(q.p, job[F.CID])
          local known = g == 0 or o.members[g] or o.fn_group[g] or o.fixed_rank[g]
          if g ~= priority.set_of(o, job) or not known then
            faults[#faults + 1] = where .. ": " .. job[F.LABEL] .. " is filed under group " .. g
          end
        end
      end
    end
  end
  local work
  local depth = 0
  -- Loading screens and a trace, made, fed, read and closed from callbacks.
  local loads, tasks, trace = {}, {}, nil
  local function bar(load, phase)
    local _, back = seeded.bar(load, phase)
    if back then faults[#faults + 1] = back end
  end
  -- What game code does from a callback.
  local function mischief()
    if depth > 2 then return end
    depth = depth + 1
    local what = r(17)
    local ok, err = pcall(function()
      if what == 1 then
        local h = any_handle()
        if h then h:cancel("from a callback") end
      elseif what == 2 then
        add(handles, orch:run("callback run", work,
          { priority = pick(RANKS), key = r(3) == 1 and ("k" .. r(3)) or nil }))
      elseif what == 3 then
        pick(futures):resolve("from a callback")
        futures[#futures + 1] = stagehand.future()
      elseif what == 4 then
        pick(ctls):abort("from a callback")
        ctls[#ctls + 1] = stagehand.controller()
      elseif what == 5 then
        orch:pool("p", r(4) - 1)
      elseif what == 6 then
        add(handles, orch:when("k" .. r(3)))
      elseif what == 7 then
        orch:forget("k" .. r(3))
      elseif what == 8 then
        error("a callback raised")
      elseif what == 9 then
        orch:report()
        orch:dump()
        orch:pools()
        -- (weak tables cleared in the middle of stagehand's work; a full
        -- collection only now and then: in a suite that has run long, each
        -- walks everything it kept)
        if r(8) == 1 then collectgarbage() else collectgarbage("step", 64) end
      elseif what == 10 then
        orch:set_visible(r(5) > 1)
      elseif what == 11 then
        orch:barrier("callback barrier", { "a" }):arrive("a")
      elseif what == 12 and r(10) == 1 then
        pick({ orch, cache }):close("closed from a callback")
      elseif what == 12 then
        orch:budget("f", r(2) == 1 and { ops = r(3) } or { ms = r(5) })
      elseif what == 14 then
        local k = r(8)
        if k == 1 or #loads == 0 then
          local load = stagehand.tracker(pick({ orch, cache }))
          loads[#loads + 1] = load
          -- (its listener is game code too: told as tasks start, move and
          -- end, in the middle of a job's start or end)
          if r(2) == 1 then load:on(function() if r(4) == 1 then mischief() end end) end
        elseif k == 2 then
          add(tasks, pick(loads):task(pick(PHASES), { total = r(4) }))
        elseif k == 3 and #tasks > 0 then
          local task, m = pick(tasks), r(3)
          if m == 1 then task:advance(r(3)) elseif m == 2 then task:finish() else task:fail("from a callback") end
        elseif k == 4 then
          pick(loads):close()
        elseif k == 5 then
          pick(loads):expect(pick(PHASES), r(3) - 1)
        elseif k == 6 then
          add(handles, pick(loads):idle())
        else
          local load = pick(loads)
          bar(load, r(3) < 3 and pick(PHASES) or nil)
          load:progress()
          load:counts()
          stagehand.format_timeline(load:timeline())
        end
      elseif what == 16 then
        -- the newest wins: an older call under the name is cancelled and
        -- settles with the newer's end
        add(handles, orch:newest("n" .. r(2), "newest", work,
          { priority = pick(RANKS), key = r(4) == 1 and ("k" .. r(3)) or nil, phase = r(3) == 1 and pick(PHASES) or nil }))
      elseif what == 17 then
        -- a loader with a deadline on this orchestrator's clock
        add(handles, orch:run("timed", work, { signal = orch:timeout(r(400) - 1), priority = pick(RANKS) }))
      elseif what == 15 then
        local k = r(5)
        if k == 1 or not trace then
          trace = orch:trace() -- (and the grant watch beside it again)
          seeded.watch_grants(orch, faults)
        elseif k == 2 then
          trace:stop()
          trace, orch.tracer = nil, false -- (white-box: the grant watch alone)
          seeded.watch_grants(orch, faults)
        elseif k == 3 then
          trace:events() -- (a copy of all of it: now and then)
        end
      else
        add(handles, cache:run("cache load", work, { key = r(2) == 1 and ("c" .. r(2)) or nil }))
      end
    end)
    note(ok, err)
    depth = depth - 1
  end
  local sources = {}
  for i = 1, 4 do
    sources[i] = function()
      local _ = i -- (four closures: Lua 5.2 and 5.3 hand back one cached closure for one with no upvalue of its own)
      if r(3) == 1 then mischief() end
      return pick(RANKS)
    end
  end
  -- Now and then a loader gets a closure of its own, which the collector
  -- takes once it ends (its group id is then swept for reuse).
  local function source()
    if r(4) == 1 then
      local rank = pick(RANKS)
      return function()
        if r(4) == 1 then mischief() end
        return rank
      end
    end
    return pick(sources)
  end
  local function log(m)
    if internal(m) and not m:find("a callback raised", 1, true) then faults[#faults + 1] = "logged: " .. m end
    if r(5) == 1 then mischief() end
  end
  orch = T.new { clock = clock, pools = { p = 2 }, stall_ms = 2000, log = log }
  cache = T.new { clock = clock, pools = { p = 1 }, stall_ms = 2000, log = log }
  cache:budget("f", { ops = 1 })
  seeded.watch_grants(orch, faults)
  seeded.watch_grants(cache, faults)
  orch.sweep_min, orch.sweep_at = 4, 4
  -- Sets of more than 1-3 sources are big (16 outside specs): see chaos.
  orch.big_set = 1 + seed % 3
  orch:budget("f", { ops = 2 })
  orch:watch(function() if r(3) == 1 then mischief() end end)
  work = function(job)
    for _ = 1, r(4) do
      local what = r(13)
      local ok, err = job:pcall(function()
        if what == 1 then
          local release = job:slot("p")
          job:sleep(r(200) - 1)
          release()
        elseif what == 2 then
          job:permit("f")
        elseif what == 3 then
          job:await(pick(futures))
        elseif what == 4 then
          local h = any_handle()
          if h then job:await(h) end
        elseif what == 5 then
          job:sleep(r(300) - 1)
        elseif what == 6 then
          -- (a child follows a controller's signal, its job's own, or
          -- none: then it is the job's, withdrawn if the job ends first)
          local tie = r(3)
          local h = orch:run("child", work, {
            priority = source(),
            signal = tie == 1 and pick(ctls).signal or tie == 2 and job.signal or nil,
          })
          handles[#handles + 1] = h
          h:on_end(function() if r(2) == 1 then mischief() end end)
          job:await(h)
        elseif what == 7 then
          pick(ctls).signal:on_abort(mischief)
        elseif what == 8 then
          mischief()
        elseif what == 9 then
          if r(2) == 1 then
            job:await(stagehand.all { any_handle() or pick(futures), pick(futures) })
          else
            -- Groups of groups, a few deep, heard by game code on the way up.
            local g = any_handle() or pick(futures)
            for _ = 1, r(4) do
              local k = r(5)
              g = k == 1 and stagehand.all { g, pick(futures) } or k == 2 and stagehand.all_settled { g }
                or k == 3 and stagehand.any { pick(futures), g } or k == 4 and stagehand.race { g, any_handle() or g }
                or stagehand.abortable(g, pick(ctls).signal)
              g:on_end(function() if r(3) == 1 then mischief() end end)
            end
            job:await(g)
          end
        elseif what == 10 then
          job:await(stagehand.abortable(pick(futures), pick(ctls).signal))
        elseif what == 11 then
          job:await(pick({ orch, cache }):when_idle(r(2) == 1 and pick(ctls).signal or nil))
        elseif what == 12 then
          job:slice()
        else
          -- (luv style: the callback comes from game code, here a future's end)
          job:call(function(cb)
            pick(futures):on_end(function()
              if r(2) == 1 then mischief() end
              cb(nil, "called back")
            end)
          end)
        end
      end)
      note(ok, err)
    end
    return "ok"
  end
  for turn = 1, 300 do
    local what = r(6)
    local ok, err = pcall(function()
      if what <= 2 then
        local h = orch:run("loader", work, {
          priority = source(),
          signal = r(3) == 1 and pick(ctls).signal or nil,
          key = r(5) == 1 and ("k" .. r(3)) or nil,
          phase = r(3) == 1 and pick(PHASES) or nil,
        })
        handles[#handles + 1] = h
        h:on_end(function() if r(3) == 1 then mischief() end end)
      elseif what == 3 then
        mischief()
      elseif what == 4 then
        clock:advance(r(150) - 1)
      else
        orch:step()
        cache:step()
      end
    end)
    note(ok, err)
    check_filed("turn " .. turn)
  end
  -- Then no more game mischief: every loader must end on its own.
  depth = 100
  orch:set_visible(true)
  cache:set_visible(true)
  local passed = 0
  -- (Until nothing runs or waits to run: a job of one orchestrator that
  -- ends in the other's step can end a child of the first, whose cleanup
  -- then waits for the first's next step.)
  while orch.nrunning + cache.nrunning + orch.qn + cache.qn > 0 and passed < 600000 do
    clock:advance(100)
    passed = passed + 100
    orch:step()
    cache:step()
  end
  -- Every job has ended: a tracker still counting counts as running only
  -- the tasks made by hand and left running, and the trace recording
  -- holds together.
  if orch.nrunning + cache.nrunning == 0 then
    for _, load in ipairs(loads) do
      if not load.closed then
        local left = 0
        for _, task in ipairs(tasks) do
          if task.tracker == load and task.state == "running" then left = left + 1 end
        end
        if load:counts().running ~= left then
          faults[#faults + 1] = ("a tracker counts %d running, %d hand-made tasks run"):format(load:counts().running, left)
        end
        bar(load)
      end
    end
    if trace then seeded.traced(trace, "seed " .. seed .. ", settled") end
  end
  return orch, cache, handles, faults
end

local E = require "stagehand.engine.engine"
local combine = require "stagehand.wait.combine"

local function check(seed)
  -- (starts inside first runs go through the run queue after 1-3 levels,
  -- and nested group settles through their stack after 1-2)
  local max_nested, max_settles = E.MAX_NESTED_STARTS, combine.settles.limit
  E.MAX_NESTED_STARTS = tonumber(os.getenv("MAXN") or "") or (1 + seed % 3)
  combine.settles.limit = 1 + seed % 2
  local ok, orch, cache, handles, faults = pcall(scene, seed)
  E.MAX_NESTED_STARTS, combine.settles.limit = max_nested, max_settles
  assert(ok, "seed " .. seed .. ": the scene raised: " .. tostring(orch))
  assert(#faults == 0, "seed " .. seed .. ": " .. table.concat(faults, "\n"))
  seeded.assert_whole(seed, orch, handles, orch.nrunning)
  seeded.assert_whole(seed, cache, {}, cache.nrunning)
  return handles
end

describe("game code inside callbacks", function()
  local which, seeds = seeded.seeds()
  local everyone = (os.getenv("CHAOS_SEEDS") or "") ~= "" or #seeds == 1
  -- Each scene's ends are recorded, and scripts/test.sh compares them
  -- across runtimes: game code here reads random numbers inside priority
  -- functions, so it sees the order they are read in, and that order may
  -- not hang on the runtime. (By default seed 224 too: it ended otherwise
  -- on LuaJIT and Lua 5.4 while a set's functions were read in the order of
  -- their group ids, which the collector's timing decides once ids are
  -- reused. They are read in the order they first came now.)
  local whole = {}
  for i = 1, #seeds do whole[i] = seeds[i] end
  if not everyone then whole[#whole + 1] = 224 end
  it("leaves stagehand whole" .. which .. (everyone and "" or " and seed 224"), function()
    for _, seed in ipairs(whole) do seeded.record_ends("reentry", seed, check(seed)) end
  end)

  -- A seed replays. What stagehand does follows what the game did, never
  -- where its tables landed in memory (pairs over tables keyed by jobs
  -- goes by address) or when the collector ran: the same scene run again
  -- with the heap moved, which moves the collector's work too, ends every
  -- Handle the same way.
  -- (Each scene runs three times: by default the first 4 seeds and the
  -- two below, whose ends once moved with the heap, as awaiters moved to a
  -- run in pairs' order made priority groups in that order; CHAOS_SEEDS=n
  -- runs all n, CHAOS_SEED=s the one.)
  local list = {}
  for i = 1, everyone and #seeds or math.min(4, #seeds) do list[i] = seeds[i] end
  if #seeds > 1 then list[#list + 1], list[#list + 2] = 5060, 5130 end
  local layout_which = everyone and which or (" (" .. #list .. " seeded scenes)")
  it("ends the same way whatever the memory layout" .. layout_which, function()
    local function ends_with_ballast(seed, n)
      local ballast = {} -- luacheck: ignore 241 -- moves every table the scene makes
      for i = 1, n do ballast[i] = { i } end
      collectgarbage()
      local ok, handles = pcall(check, seed)
      assert(ok, handles)
      return seeded.ends("reentry", seed, handles)
    end
    for _, seed in ipairs(list) do
      local ends = ends_with_ballast(seed, 0)
      for _, n in ipairs { 97, 1000 + seed % 500 } do
        local moved = ends_with_ballast(seed, n)
        for i = 1, math.max(#ends, #moved) do
          if moved[i] ~= ends[i] then
            error("seed " .. seed .. " ended otherwise with " .. n .. " tables more on the heap: "
              .. tostring(ends[i]) .. " became " .. tostring(moved[i]))
          end
        end
      end
    end
  end)
end)
