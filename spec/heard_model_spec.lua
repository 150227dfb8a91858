-- Which failures are logged as unheard, checked against a model that knows
-- nothing of stagehand's insides. Seeded scenes run keyed loaders that
-- await a download and then return or fail (now and then one fails at
-- once, inside run). The game makes callers of them (run with a key,
-- `when`), reads some Handles' results (and polls keys: a `when` read at
-- once), subscribes and unsubscribes `on_end`s, makes `all`,
-- `all_settled`, `any` and `race` groups and `abortable`s over them (and
-- aborts their signals), starts watchers (jobs that await a Handle, an
-- abortable or a group, under job:pcall), cancels watchers and callers,
-- opens and closes a loading screen (a load tracker; a third of the
-- loaders count in one of its phases), and settles downloads.
--
-- The model: a failure is heard if, when it happens, the loading screen
-- open as the job began counts it still (not closed), or one of the job's
-- callers still in has had its result read, is awaited by a watcher parked
-- on it, has an `on_end` still subscribed, has an `abortable` still
-- pending over it, or has been made a part of a group.
-- A failure inside run is heard too if, before the next step ends, one of
-- its Handles (a `when` on its key among them) is read, subscribed to,
-- awaited or put in a group.
-- - After each step, the log names exactly the unheard failures it ended
--   (and those before it, outside a step): each once.
-- The model reads nothing but public Handles' and groups' states.
-- CHAOS_SEEDS=n runs more, CHAOS_SEED=s replays one (spec/seeded.lua).
local stagehand = require "stagehand"
local each = require("stagehand.core.compat").each
local T = require "stagehand.testing"
local seeded = require "spec.seeded"
local is_handle = require("stagehand.wait.handle").is_handle

local KEYS = { "hero", "mage", "rogue", "bard" }

local function scene(seed, tally)
  local r = seeded.rng(seed)
  local logged = {}
  local orch = T.new {
    stall_ms = 1e12,
    log = function(m)
      local label = m:match("^%[stagehand%] (.-) failed and nobody waited on it")
      if label then logged[#logged + 1] = label end
    end,
  }
  local jobs = {} -- the model's runs: {label =, key =, f =, fails =, callers = {hrec...}, resolved =, over =, ended =}
  local hrecs = {} -- every caller Handle the game made: {h =, job =, key =, seen =, subs =, left =}
  local pending_whens = {} -- by key: hrecs of `when`s waiting for a run to start
  local watchers = {} -- {h =, on = hrec (parked on it directly) or nil}
  local aborts = {} -- {a =, part = hrec, ctl =}
  local subs = {} -- {hrec =, unsubscribe =, done =}
  local handles = {} -- every Handle and group, for the end
  local later = {} -- job -> heard: runs that failed outside a step, reported at the next step's end
  local screen -- the loading screen open now: {load =, closed =}, or nil
  local runs, turn = 0, 0

  -- (The model peeks at a Handle's state without h:state(): a game that
  -- polls state() hears the end, and the model's own looks are no game's.)
  local function running(h)
    if is_handle(h) then return h._st == nil end
    return h:state() == "running"
  end
  local function callers_in(j)
    local n = 0
    for _, hrec in ipairs(j.callers) do
      if not hrec.left then n = n + 1 end
    end
    return n
  end
  local function listened(hrec)
    if not running(hrec.h) then return false end
    if hrec.subs > 0 then return true end
    for _, w in ipairs(watchers) do
      if w.on == hrec and running(w.h) then return true end
    end
    for _, a in ipairs(aborts) do
      if a.part == hrec and a.a:state() == "pending" then return true end
    end
    return false
  end
  local function heard_now(j)
    -- (a tracker that counted it from its start, and counts still)
    if j.screen and not j.screen.closed then return true end
    for _, hrec in ipairs(j.callers) do
      if not hrec.left and (hrec.seen or listened(hrec)) then return true end
    end
    return false
  end
  -- hrec was read, subscribed after its end, awaited after it, or made a
  -- part of a group: a failure its run had outside a step is heard.
  local function mark(hrec)
    hrec.seen = true
    local j = hrec.job
    if j and later[j] == false and not hrec.left then later[j] = true end
  end
  -- One of `list`, often one of the last few made; nil now and then.
  local function pick(list)
    if r(2) == 1 then return list[#list - r(3) + 1] end
    return list[r(#list + 1)]
  end
  local function new_hrec(h, j, key)
    local hrec = { h = h, job = j, key = key, seen = false, subs = 0 }
    hrecs[#hrecs + 1] = hrec
    handles[#handles + 1] = h
    if j then j.callers[#j.callers + 1] = hrec end
    return hrec
  end
  local function running_job(key)
    for i = #jobs, 1, -1 do
      local j = jobs[i]
      if j.key == key and not j.over then return j end
    end
  end
  local function remembered(key) -- (a cancelled run is not remembered)
    for i = #jobs, 1, -1 do
      local j = jobs[i]
      if j.key == key and j.over and j.ended ~= "cancelled" then return j end
    end
  end

  local function start()
    local key = KEYS[r(#KEYS)]
    local j = running_job(key)
    if j then
      new_hrec(orch:run("join " .. key, function() error("a join runs no work") end, { key = key }), j, key)
      return
    end
    runs = runs + 1
    j = { label = "L" .. runs, key = key, f = stagehand.future(), fails = r(2) == 1, callers = {} }
    local at_once = r(5) == 1
    local phase = r(3) == 1 and "fetch" or nil -- (counted by the loading screen, if one is open)
    if phase then j.screen = screen end
    jobs[#jobs + 1] = j
    -- (the `when`s waiting for this key join the run before its work starts)
    for _, hrec in ipairs(pending_whens[key] or {}) do
      hrec.job = j
      j.callers[#j.callers + 1] = hrec
    end
    pending_whens[key] = nil
    local heard
    if at_once then heard = heard_now(j) end -- (as it fails, inside run)
    local h = orch:run(j.label, function(job)
      if at_once then error("the manifest is missing", 0) end
      job:await(j.f)
      if j.fails then error("the atlas is corrupt", 0) end
      return key
    end, { key = key, phase = phase })
    new_hrec(h, j, key)
    if at_once then
      j.over, j.ended = true, "failed"
      tally["failed at once"] = tally["failed at once"] + 1
      later[j] = heard
    end
  end

  local function make_when() -- a `when` on a key
    local key = KEYS[r(#KEYS)]
    local j = running_job(key) or remembered(key)
    local hrec = new_hrec(orch:when(key), j, key)
    if not j then
      pending_whens[key] = pending_whens[key] or {}
      table.insert(pending_whens[key], hrec)
    end
  end

  local ops = {
    start, start, make_when,
    function() -- the game polls a key: a `when` whose result it reads at once
      make_when()
      local hrec = hrecs[#hrecs]
      hrec.h:result()
      mark(hrec)
    end,
    function() -- the game reads a Handle's result
      local hrec = pick(hrecs)
      if hrec then
        hrec.h:result()
        mark(hrec)
      end
    end,
    function() -- the game subscribes to a Handle's end
      local hrec = pick(hrecs)
      if not hrec then return end
      if running(hrec.h) then
        hrec.subs = hrec.subs + 1
        subs[#subs + 1] = { hrec = hrec, unsubscribe = hrec.h:on_end(function() end) }
      else
        hrec.h:on_end(function() end)
        mark(hrec)
      end
    end,
    function() -- ... and unsubscribes
      local sub = pick(subs)
      if sub and not sub.done then
        sub.done = true
        sub.hrec.subs = sub.hrec.subs - 1
        sub.unsubscribe()
      end
    end,
    function() -- a group over some Handles
      local list, parts = {}, {}
      for _ = 1, r(3) do
        local hrec = pick(hrecs)
        if hrec then
          list[#list + 1] = hrec.h
          parts[#parts + 1] = hrec
        end
      end
      if #list == 0 then return end
      handles[#handles + 1] = stagehand[({ "all", "all_settled", "any", "race" })[r(4)]](list)
      for _, hrec in ipairs(parts) do mark(hrec) end
    end,
    function() -- an abortable over a Handle
      local hrec = pick(hrecs)
      if not hrec then return end
      local ctl = stagehand.controller()
      local a = stagehand.abortable(hrec.h, ctl.signal)
      aborts[#aborts + 1] = { a = a, part = hrec, ctl = ctl }
      handles[#handles + 1] = a
      if not running(hrec.h) then mark(hrec) end
    end,
    function() -- an abortable gives up
      local ab = pick(aborts)
      if ab then ab.ctl:abort("timed out") end
    end,
    function() -- a watcher awaits a Handle, an abortable over one or a group
      local hrec = pick(hrecs)
      if not hrec then return end
      local w, x = {}, r(3)
      local target
      if x == 1 then
        target, w.on = hrec.h, hrec
      elseif x == 2 then
        local ctl = stagehand.controller()
        target = stagehand.abortable(hrec.h, ctl.signal)
        aborts[#aborts + 1] = { a = target, part = hrec, ctl = ctl }
      else
        target = stagehand.all({ hrec.h })
      end
      -- (awaiting one that has ended, or making a group over it, hears it)
      if x == 3 or not running(hrec.h) then mark(hrec) end
      w.h = orch:run("watcher", function(job) job:pcall(job.await, job, target) end)
      watchers[#watchers + 1] = w
      handles[#handles + 1] = w.h
    end,
    function() -- a watcher is cancelled
      local w = pick(watchers)
      if w then w.h:cancel("scene left") end
    end,
    function() -- a caller is withdrawn
      local hrec = pick(hrecs)
      if not (hrec and running(hrec.h)) then return end
      hrec.h:cancel("scrolled away")
      hrec.left = true
      local j = hrec.job
      if not j then -- (a `when` still waiting for its run)
        local list = pending_whens[hrec.key]
        for i = #list, 1, -1 do
          if list[i] == hrec then table.remove(list, i) end
        end
      elseif callers_in(j) == 0 then
        j.over, j.ended = true, "cancelled" -- (its last caller left)
      end
    end,
    function() -- a loading screen opens, or the one open closes
      if screen then
        screen.load:close()
        screen.closed, screen = true, nil
      else
        screen = { load = stagehand.tracker(orch), closed = false }
      end
    end,
    function() -- a download comes in
      local open = {}
      for _, j in ipairs(jobs) do
        if not j.over and not j.resolved then open[#open + 1] = j end
      end
      local j = pick(open)
      if j then
        j.f:resolve()
        j.resolved = true
      end
    end,
  }

  local function step_and_check()
    turn = turn + 1
    -- Who fails in this step, and whether they are heard as it happens.
    local expect = later
    later = {}
    for _, j in ipairs(jobs) do
      if not j.over and j.resolved and j.fails then expect[j] = heard_now(j) end
    end
    logged = {}
    orch:step()
    for _, j in ipairs(jobs) do
      if not j.over and j.resolved then
        j.over, j.ended = true, j.fails and "failed" or "done"
        for _, hrec in ipairs(j.callers) do
          if not hrec.left then assert(hrec.h:state() == j.ended, j.label .. " did not end " .. j.ended) end
        end
      end
    end
    local want = {}
    for j, heard in each, expect do
      if not heard then want[#want + 1] = j.label end
      tally[heard and "heard" or "unheard"] = tally[heard and "heard" or "unheard"] + 1
    end
    table.sort(want)
    table.sort(logged)
    local w, g = table.concat(want, ", "), table.concat(logged, ", ")
    if w ~= g then
      error(("seed %d, turn %d: the log named [%s]; the model, [%s]\n%s"):format(seed, turn, g, w, orch:dump()))
    end
  end

  for _ = 1, 40 do
    for _ = 1, 1 + r(4) do ops[r(#ops)]() end
    step_and_check()
  end
  -- Then every download comes in, every abortable gives up and the
  -- `when`s still waiting for a run leave.
  for _, j in ipairs(jobs) do
    if not j.over and not j.resolved then
      j.f:resolve()
      j.resolved = true
    end
  end
  step_and_check()
  for _, ab in ipairs(aborts) do ab.ctl:abort("the end") end
  for _, list in each, pending_whens do
    for _, hrec in ipairs(list) do hrec.h:cancel("the end") end
  end
  step_and_check()
  return orch, handles
end

describe("unheard failures", function()
  local which, seeds = seeded.seeds()
  it("are logged when, and only when, a model of who hears them says so" .. which, function()
    local tally = { heard = 0, unheard = 0, ["failed at once"] = 0 }
    seeded.run_scenes("heard", seeds, scene, tally, "HEARD_TALLY")
    if #seeds >= 20 then
      for _, kind in ipairs({ "heard", "unheard", "failed at once" }) do
        assert.is_true(tally[kind] > 0, "none of: " .. kind)
      end
    end
  end)
end)
