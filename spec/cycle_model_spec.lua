-- Cycles of waits, checked against a model that knows nothing of
-- stagehand's insides. Seeded scenes run keyed loaders; each time one
-- resumes it picks its next wait among any loader's Handle (its own
-- included), a `when` on any loader's key (running, ended or not started
-- yet: its own included), `stagehand.all` of such waits and futures, a
-- future or a sleep. Between steps the game settles futures, starts
-- loaders, cancels loaders and `when`s, and moves the clock.
--
-- The model: a loader parked on a wait follows the loaders its Handle or
-- `when` leads to (a `when` whose run has not started, or a run that has
-- ended, leads nowhere), and for a group the ones its open parts lead to;
-- a loader that runs, sleeps, awaits a future, or was woken and has not
-- run yet follows nobody.
-- - An await raises a `cycle` Error exactly when what it would wait on
--   leads back to the loader awaiting, and the Error's `jobs` are a real
--   cycle: the loader, then a path of follows back to it.
-- - Every other await parks (or returns) as usual; the loader carries on
--   after either.
-- The model reads nothing but public Handles', groups' and futures'
-- states. CHAOS_SEEDS=n runs more, CHAOS_SEED=s replays one.
local stagehand = require "stagehand"
local T = require "stagehand.testing"
local seeded = require "spec.seeded"

local function scene(seed, tally)
  local r = seeded.rng(seed)
  local orch, clock = T.new { stall_ms = 1e12, log = function() end }
  local loaders, by_label, whens, handles = {}, {}, {}, {}
  local futures, new_future = seeded.futures()
  local winding, turn, violation = false, 0, nil
  local function running(h) return h:state() == "running" end
  local function fail(why) violation = violation or ("seed %d, turn %d: %s"):format(seed, turn, why) end

  -- The model.
  local function alive(rec) return rec ~= nil and not rec.dead end
  -- The loader a running Handle or `when` of a wait part leads to, or nil.
  local function leads_to(part)
    if part.kind == "job" then
      return running(part.x) and part.rec or nil
    elseif part.kind == "when" then
      if not running(part.x) then return nil end
      local rec = loaders[tonumber(part.key:sub(2))]
      return alive(rec) and rec or nil -- (else it waits for a run to start)
    end
    return nil -- a future
  end
  local function targets(w)
    local out = {}
    if w.kind == "all" then
      for _, part in ipairs(w.parts) do out[#out + 1] = leads_to(part) end
    elseif w.kind == "job" or w.kind == "when" then
      out[1] = leads_to(w)
    end
    return out
  end
  local function follows(rec) -- whom a loader follows now
    if not alive(rec) or not rec.on or rec.woken then return {} end
    return targets(rec.on)
  end
  local function reaches(from, goal)
    local seen, stack = {}, { from }
    while stack[1] do
      local rec = table.remove(stack)
      if rec == goal then return true end
      if not seen[rec] then
        seen[rec] = true
        for _, t in ipairs(follows(rec)) do stack[#stack + 1] = t end
      end
    end
    return false
  end
  local function closes_cycle(rec, w)
    -- (a wait on what has settled already returns at once: it waits on nothing)
    if not w.x or not (w.x:state() == "running" or w.x:state() == "pending") then return false end
    for _, t in ipairs(targets(w)) do
      if t == rec or reaches(t, rec) then return true end
    end
    return false
  end
  local function contains(list, x)
    for _, y in ipairs(list) do
      if y == x then return true end
    end
    return false
  end
  -- Err.jobs must be the awaiting loader, then a path of follows that
  -- starts at what the wait leads to and leads back to it.
  local function check_cycle(rec, w, err)
    local jobs = err.jobs or {}
    if jobs[1] ~= rec.label then return "its jobs do not start at the loader awaiting" end
    local prev_targets = targets(w)
    for k = 2, #jobs do
      local cur = by_label[jobs[k]]
      if not cur or not contains(prev_targets, cur) then
        return "its jobs name " .. tostring(jobs[k]) .. ", which the one before does not follow"
      end
      prev_targets = follows(cur)
    end
    if not contains(prev_targets, rec) then return "its path does not lead back to the loader" end
    return nil
  end

  -- The scene.
  local function any_key()
    return "k" .. r(#loaders + 2)
  end
  local function track_when(key)
    local h = orch:when(key)
    whens[#whens + 1], handles[#handles + 1] = { h = h, key = key }, h
    return h
  end
  -- (a loader has no Handle to await until its run returned it: not in
  -- its own first stretch of work)
  local function a_part(i)
    local x = r(5)
    local rec = loaders[r(#loaders)]
    if x <= 2 and rec.h then
      return { kind = "job", x = rec.h, rec = rec }
    elseif x <= 4 then
      local key = r(6) == 1 and ("k" .. i) or any_key()
      return { kind = "when", x = track_when(key), key = key }
    end
    return { kind = "future", x = new_future() }
  end
  local function next_wait(i)
    local x = r(winding and 1 or 13)
    if x == 1 then return nil end
    local rec = r(8) == 1 and loaders[i] or loaders[r(#loaders)]
    if x <= 4 and rec.h then
      return { kind = "job", x = rec.h, rec = rec }
    elseif x <= 6 then
      local key = r(8) == 1 and ("k" .. i) or any_key()
      return { kind = "when", x = track_when(key), key = key }
    elseif x <= 9 then
      local parts, list = {}, {}
      for k = 1, 1 + r(3) do
        parts[k] = a_part(i)
        list[k] = parts[k].x
      end
      return { kind = "all", parts = parts, x = stagehand.all(list) }
    elseif x <= 11 then
      local f = new_future()
      return { kind = "future", x = f }
    end
    return { kind = "sleep" }
  end
  local function start_loader()
    local i = #loaders + 1
    local rec = { label = "loader " .. i }
    loaders[i], by_label[rec.label] = rec, rec
    rec.h = orch:run(rec.label, function(job)
      job.signal:on_abort(function() rec.dead = true end)
      while true do
        local w = next_wait(i)
        if w == nil then
          rec.dead = true
          return i
        end
        local cycle = closes_cycle(rec, w)
        rec.on, rec.woken = w, false
        if w.x then
          w.x:on_end(function() if rec.on == w then rec.woken = true end end)
        end
        local ok, err = job:pcall(function()
          if w.kind == "sleep" then return job:sleep(1 + r(20)) end
          return job:await(w.x)
        end)
        rec.on = nil
        if job.signal.aborted then return end
        local raised_cycle = not ok and stagehand.is_error(err, "cycle")
        if cycle and not raised_cycle then
          fail(("loader %d awaited a %s that leads back to it, and %s"):format(i, w.kind,
            ok and "nothing was raised" or ("raised " .. tostring(err))))
        elseif raised_cycle and not cycle then
          fail(("loader %d got a cycle Error awaiting a %s that does not lead back to it: %s"):format(
            i, w.kind, tostring(err)))
        elseif raised_cycle then
          local wrong = check_cycle(rec, w, err)
          if wrong then fail(("loader %d's cycle Error is wrong: %s (%s)"):format(i, wrong, tostring(err))) end
          tally.cycles = tally.cycles + 1
          tally.longest = math.max(tally.longest, #err.jobs)
        end
      end
    end, { key = "k" .. i })
    handles[#handles + 1] = rec.h
  end

  local ops = {
    start_loader,
    function() -- a future settles
      local f = seeded.pending_one(r, futures)
      if f then f:resolve(true) end
    end,
    function() -- a loader is cancelled
      if r(3) == 1 then loaders[r(#loaders)].h:cancel("left") end
    end,
    function() -- a when is withdrawn
      local w = whens[r(#whens + 1)]
      if w then w.h:cancel("left") end
    end,
    function() clock:advance(r(20)) end,
  }
  local function step()
    orch:step()
    if violation then error(violation) end
  end
  for _ = 1, 2 + r(3) do start_loader() end
  for t = 1, 80 do
    turn = t
    for _ = 1, r(3) do ops[r(#ops)]() end
    step()
  end
  -- Then futures settle, `when`s no run will answer leave, and loaders
  -- return as they next wake.
  winding = true
  local guard = 0
  while orch.nrunning > 0 and guard < 200 do
    guard = guard + 1
    turn = 80 + guard
    seeded.resolve_pending(futures)
    for _, w in ipairs(whens) do
      local rec = loaders[tonumber(w.key:sub(2))]
      if running(w.h) and not alive(rec) then w.h:cancel("never loaded") end
    end
    clock:advance(25)
    step()
  end
  seeded.assert_none_failed(seed, loaders)
  tally.loaders = tally.loaders + #loaders
  return orch, handles
end

describe("cycles of waits", function()
  local which, seeds = seeded.seeds()
  it("raise exactly when a model of who follows whom says an await closes one" .. which, function()
    local tally = { cycles = 0, loaders = 0, longest = 0 }
    seeded.run_scenes("cycles", seeds, scene, tally, "CYCLE_TALLY")
  end)
end)
