-- What the seeded scene specs (chaos_spec, reentry_spec) share: numbers
-- that are the same on every runtime, the check that a scene ended whole,
-- and how many seeds to run. CHAOS_SEEDS=n runs n seeds (20 by default;
-- make chaos runs 500), CHAOS_SEED=s replays one, and CHAOS_FIRST=f starts
-- the n seeds at f (new ground for a long run: seeds 1..n are the usual ones).
local stagehand = require "stagehand"
local each = require("stagehand.core.compat").each
local T = require "stagehand.testing"

local M = {}

--- Park-Miller: r(n) is 1..n, the same numbers on every runtime (no 64-bit
--- products).
function M.rng(seed)
  local x = seed % 2147483646 + 1
  return function(n)
    x = (16807 * x) % 2147483647
    return x % n + 1
  end
end

-- One value of an end, the same text on every runtime: numbers in full
-- (Lua 5.4 would print 4.0 for a float), no addresses, one line.
local function shown(v)
  local t = type(v)
  if t == "number" then return string.format("%.17g", v) end
  if t == "table" and v.kind then
    return "Error(" .. v.kind .. ": " .. shown(v.message) .. " missing " .. shown(v.missing) .. ")"
  end
  if t == "table" and #v > 0 then
    local parts = {}
    for i = 1, #v do parts[i] = shown(v[i]) end
    return "{" .. table.concat(parts, ", ") .. "}"
  end
  if t == "string" then return "'" .. v:gsub("\n", "\\n"):gsub("0x%x+", "0x?") .. "'" end
  if t == "function" or t == "userdata" or t == "thread" or t == "table" then return "a " .. t end
  return tostring(v)
end

--- How each of a scene's Handles ended, a line each ("chaos 12 #3
--- 'failed' Error(...)"): the same text on every runtime.
function M.ends(scene, seed, handles)
  local lines = {}
  for i, h in ipairs(handles) do
    local r = { n = select("#", h:result()), h:result() }
    local parts = { scene, seed, "#" .. i }
    for j = 1, r.n do parts[#parts + 1] = shown(r[j]) end
    lines[i] = table.concat(parts, " ")
  end
  return lines
end

--- Appends a scene's ends (above) to the file STAGEHAND_ENDS names, if it
--- names one. `scene` is one word (same_ends.sh counts scenes by it). A seed's scene is the same on every runtime (rng above), so
--- its ends must be too: scripts/test.sh compares the files its busted
--- runs wrote on LuaJIT (both backends) and Lua 5.4, 5.3, 5.2 and 5.1.
function M.record_ends(scene, seed, handles)
  local path = os.getenv("STAGEHAND_ENDS")
  if path == nil or path == "" then return end
  local f = assert(io.open(path, "a"))
  f:write(table.concat(M.ends(scene, seed, handles), "\n"), "\n")
  f:close()
end

--- After a scene: nothing runs, every Handle ended, the report is empty and
--- nothing is left behind. Each failure names the seed. (`handles` may hold
--- groups too, whose ends are recorded beside the Handles': a group may
--- stay pending, on a future the scene never settled.)
function M.assert_whole(seed, orch, handles, left)
  assert(left == 0, "seed " .. seed .. ": " .. left .. " job(s) still running\n" .. orch:dump())
  for i, h in ipairs(handles) do
    if h:state() == "running" then
      error("seed " .. seed .. ": Handle " .. i .. " (" .. tostring(h.label) .. ") never ended")
    end
  end
  assert(#orch:report() == 0, "seed " .. seed .. ": report not empty\n" .. orch:dump())
  local leaks = T.leaks(orch)
  assert(#leaks == 0, "seed " .. seed .. ": left behind: " .. table.concat(leaks, "; "))
end

--- A scene's futures: the list that keeps them, and new(), which makes one
--- and keeps it there.
function M.futures()
  local list = {}
  return list, function()
    local f = stagehand.future()
    list[#list + 1] = f
    return f
  end
end

--- Resolves (with true) every future of `futures` still pending, telling
--- `after(f)` of each if it is given.
function M.resolve_pending(futures, after)
  for _, f in ipairs(futures) do
    if f:state() == "pending" then
      f:resolve(true)
      if after then after(f) end
    end
  end
end

--- A future of `futures` still pending, picked with `r`, or nil.
function M.pending_one(r, futures)
  local open = {}
  for _, f in ipairs(futures) do
    if f:state() == "pending" then open[#open + 1] = f end
  end
  return open[r(#open + 1)]
end

--- Raises unless none of `loaders` (records with a Handle `h`) ended
--- failed: a model scene's loaders end done, cancelled or stalled, and one
--- that failed ran into an error of the scene's own code.
function M.assert_none_failed(seed, loaders)
  for _, rec in ipairs(loaders) do
    local st, err = rec.h:result()
    if st == "failed" then error(("seed %d: %s failed: %s"):format(seed, rec.h.label, tostring(err))) end
  end
end

--- Prints a scene's tally ({name = count}), sorted by name, when the
--- environment variable `var` is set: how far the scenes went.
function M.print_tally(var, tally)
  if not os.getenv(var) then return end
  local parts = {}
  for k, v in each, tally do parts[#parts + 1] = k .. " " .. v end
  table.sort(parts)
  print("\n" .. table.concat(parts, ", "))
end

--- Runs `scene(seed, tally)` (which returns the orchestrator and every
--- Handle it made) for each seed: each must end whole, and records its
--- ends as `name`. Then prints the tally if the variable `var` is set.
function M.run_scenes(name, seeds, scene, tally, var)
  for _, seed in ipairs(seeds) do
    local orch, handles = scene(seed, tally)
    M.assert_whole(seed, orch, handles, orch.nrunning)
    M.record_ends(name, seed, handles)
  end
  M.print_tally(var, tally)
end

--- Sorts a scene's drawn events ({t =, ...}) by time, then in the order
--- they were drawn (table.sort is not stable).
function M.sort_events(events)
  for i, e in ipairs(events) do e.i = i end
  table.sort(events, function(a, b)
    if a.t ~= b.t then return a.t < b.t end
    return a.i < b.i
  end)
end

--- What a scene of timed game events draws with (the pump and pair
--- scenes): event(t, what, arg) adds one to sc.events; future() draws a
--- future into sc.futures ({how = "resolve"|"reject", t = when the game
--- settles it, within last_event, or nil: never}) and returns its number.
function M.drawers(r, sc, last_event)
  local function event(t, what, arg) sc.events[#sc.events + 1] = { t = t, what = what, arg = arg } end
  local function future()
    local f = { how = r(5) == 1 and "reject" or "resolve" }
    if r(6) > 1 then
      f.t = r(last_event)
      event(f.t, "settle", #sc.futures + 1)
    end
    sc.futures[#sc.futures + 1] = f
    return #sc.futures
  end
  return event, future
end

--- A value as one line of a story: its first line, with no addresses.
function M.line(v)
  return (tostring(v):match("^[^\n]*"):gsub("0x%x+", "0x?"))
end

--- How a Handle ended, in a story: its state, and what it ended with
--- unless done (an Error by its kind).
function M.end_text(st, v)
  if st == "done" then return st end
  if type(v) == "table" and v.kind then return st .. " " .. v.kind end
  return st .. " " .. M.line(v)
end

--- Awaits `x` in `job` through job:pcall: "ok", or what it raised.
function M.wait_on(job, x)
  local ok, err = job:pcall(job.await, job, x)
  if ok then return "ok" end
  if type(err) == "table" and err.kind then return "raised " .. err.kind end
  return "raised " .. M.line(err)
end

--- A loader's work in the pump and pair scenes: runs its drawn steps
--- ({kind, ...}) in order, telling each through env.say as "<label> step
--- n kind out". It runs the kinds both scenes draw: "sleep" (s[2] ms),
--- "future" (env.futures[s[2]]), "await" (the Handle env.by_loader[s[2]],
--- if made yet), "all" (of env.futures[s[2]] and env.by_loader[s[3]]),
--- "busy" (s[2] ms of main-thread work on env.clock, then a slice), "slot"
--- (of pool "p", released s[2] steps on) and "fail"; any other by
--- more(job, s, n, held), which returns what to tell ("ok" if nil), where
--- held.release is the slot's release while one is held (more may take
--- it, setting it nil). Returns "left" once the job's signal aborted, else
--- `result` after the last step.
function M.loader(env, steps, label, result, more)
  local wait_on = M.wait_on
  return function(job)
    local held, hold = {}, 0
    for n, s in ipairs(steps) do
      local kind, out = s[1], "ok"
      if kind == "sleep" then
        out = job:pcall(job.sleep, job, s[2]) and "ok" or "raised"
      elseif kind == "future" then out = wait_on(job, env.futures[s[2]])
      elseif kind == "await" then
        local h = env.by_loader[s[2]]
        out = h and wait_on(job, h) or "none yet"
      elseif kind == "all" then
        local f, h = env.futures[s[2]], env.by_loader[s[3]]
        out = wait_on(job, stagehand.all({ f, h or f }))
      elseif kind == "busy" then
        env.clock:advance(s[2])
        out = job:pcall(job.slice, job) and "ok" or "raised"
      elseif kind == "slot" then
        if held.release then
          out = "holds"
        else
          local ok, rel = job:pcall(job.slot, job, "p")
          if ok then held.release, hold = rel, s[2] else out = "raised" end
        end
      elseif kind == "fail" then error("the loader broke", 0)
      else
        out = more(job, s, n, held) or "ok"
      end
      env.say(("%s step %d %s %s"):format(label, n, kind, out))
      if job.signal.aborted then return "left" end
      if held.release then
        hold = hold - 1
        if hold < 0 then
          held.release()
          held.release = nil
        end
      end
    end
    return result
  end
end

--- Watches `orch`'s jobs for a story (the pump and pair scenes): each
--- start and end is told through say(text), prefixed by `name` if given,
--- and each job must be watched starting once, then ending once, no
--- sooner than it started, with an error if and only if it did not end
--- done. What is wrong goes to wrong(text), not raised: a watcher that
--- raises is only logged. Returns the watch records by job id, for
--- M.check_watched.
function M.watch_once(orch, name, say, wrong)
  local watched, pre = {}, name and name .. " " or ""
  orch:watch(function(rec)
    local was = watched[rec.id]
    if rec.state == "running" then
      if was ~= nil then wrong(("%sjob #%d watched starting twice"):format(pre, rec.id)) end
      watched[rec.id] = "started"
    else
      if was ~= "started" then
        wrong(("%sjob #%d watched ending %s"):format(pre, rec.id, was and "twice" or "unstarted"))
      end
      if rec.ended_at < rec.started_at then wrong(("%sjob #%d ended before it started"):format(pre, rec.id)) end
      if (rec.error ~= nil) ~= (rec.state ~= "done") then
        wrong(("%sjob #%d ended %s with error %s"):format(pre, rec.id, rec.state, tostring(rec.error)))
      end
      watched[rec.id] = "ended"
    end
    say(("%s%s %s #%d"):format(pre, rec.state == "running" and "start" or "end " .. rec.state, rec.label, rec.id))
  end)
  return watched
end

--- Raises with `name` if a job M.watch_once watched started but never
--- ended.
function M.check_watched(seed, watched, name)
  for id, was in each, watched do
    if was ~= "ended" then
      error(("seed %d: %sjob #%d watched starting, never ending"):format(seed, name and name .. " " or "", id))
    end
  end
end

--- Keeps a timer for `orch` as the luv driver keeps its uv timer: set from
--- next_wake whenever the orchestrator asks (at the end of each step, and
--- after a call from outside a step that may have given it something to
--- do), moved only ever earlier, stopped on nil and by close. Returns it:
--- `t.due` is when it fires (on `clock`), or nil.
function M.luv_timer(orch, clock)
  local t = {}
  orch.driver.reschedule = function(o)
    local nw = o:next_wake()
    if nw == nil then t.due = nil return end
    if t.due == nil or clock.now + nw < t.due then t.due = clock.now + nw end
  end
  orch.driver.close = function() t.due = nil end
  return t
end

--- Raises unless `orch`'s timer `t` (M.luv_timer) fires no later than its
--- next_wake says, after `what` (a call that gave the orchestrator
--- something to do sooner must have set the timer again).
function M.check_timer(seed, t, orch, clock, what)
  local nw = orch:next_wake()
  if nw and not (t.due and t.due <= clock.now + nw) then
    error(("seed %d: after %s at %g ms, next_wake says %g but the timer is %s\n%s"):format(
      seed, what, clock.now, nw, t.due and "set for " .. t.due or "stopped", orch:dump()))
  end
end

--- Raises unless each story of `others` ({name, lines}) tells the
--- reference's (a list of lines), line for line, showing where they part.
--- STORY_DUMP=path writes both whole stories to path.ref and path.other.
function M.same_stories(seed, ref_name, ref, others)
  for _, other in ipairs(others) do
    local name, lines = other[1], other[2]
    for i = 1, math.max(#ref, #lines) do
      if ref[i] ~= lines[i] then
        local dump = os.getenv("STORY_DUMP")
        if dump then
          local f = io.open(dump .. ".ref", "w") f:write(table.concat(ref, "\n")) f:close()
          f = io.open(dump .. ".other", "w") f:write(name .. "\n" .. table.concat(lines, "\n")) f:close()
        end
        local from = math.max(1, i - 8)
        error(("seed %d: the hosts part at line %d\n%s:\n  %s\n%s:\n  %s"):format(seed, i, ref_name,
          table.concat(ref, "\n  ", from, math.min(#ref, i)), name, table.concat(lines, "\n  ", from, math.min(#lines, i))))
      end
    end
  end
end

M.NAMES = { "visible", "scene", "background" }
M.RANK = { visible = 1, scene = 2, background = 3 }

--- The priorities of a scene's callers (grant and priority models): three
--- functions whose answers the scene changes by writing `level[k]` (now and
--- then a rank that does not exist, or "raise": either counts as the
--- default, scene). Returns `level`; `source()`, a random caller's priority
--- as run takes it and as the model keeps it (a rank name, one of the
--- functions, with `closures` a closure of its own that answers what one
--- of them does, or none); and `rank_of(kept)`, its rank now.
function M.priorities(r, closures)
  local NAMES, RANK = M.NAMES, M.RANK
  local level = { "scene", "background", "visible" }
  local fns = {}
  for k = 1, 3 do
    fns[k] = function()
      if level[k] == "raise" then error("the camera is not ready") end
      return level[k]
    end
  end
  local function source()
    local x = r(closures and 9 or 7)
    if x <= 3 then return NAMES[x], NAMES[x] end
    if x <= 6 then return fns[x - 3], x - 3 end
    if closures and x <= 8 then
      local k = r(3)
      return function() return fns[k]() end, k
    end
    return nil, nil -- none: the default, scene
  end
  local function rank_of(kept)
    if kept == nil then return RANK.scene end
    if type(kept) == "number" then return RANK[level[kept]] or RANK.scene end
    return RANK[kept]
  end
  return level, source, rank_of
end

--- Checks each slot and permit of `o` as it is granted (a tracer's hold
--- and permit are told then, the job just out of its queue): no job still
--- waiting in that queue may rank better, wherever the step knows both
--- ranks without reading a function (fixed, or read already in this
--- step). A rank a queue kept for a group whose sources changed would
--- grant out of order. Each fault goes to `faults` (a list). White-box: it
--- takes the place of orch:trace's recorder, and tells the trace recording
--- when watch_grants was called (if any) what it is told.
function M.watch_grants(o, faults)
  local priority = require "stagehand.rank.priority"
  local F = require "stagehand.engine.fields"
  local function known_of(job)
    local g = priority.set_of(o, job)
    local ms = o.members[g]
    if not ms then return priority.known_rank(o, g) end
    local best
    for i = 1, #ms do
      local k = priority.known_rank(o, ms[i])
      if k == nil then return nil end
      if best == nil or k < best then best = k end
    end
    return best
  end
  local function granted(_, job, what)
    local name = what:match("'(.*)'$")
    local q = what:find("^a slot") and o.pool_q[name] or o.budget_q[name]
    local mine = q and known_of(job)
    if not mine then return end
    for _, other in each, o.by_slot do
      if other[F.WAITQ] == q then
        local theirs = known_of(other)
        if theirs and theirs < mine then
          faults[#faults + 1] = ("%s went to %s (rank %s) while %s (rank %s) waited"):format(what,
            job[F.LABEL], mine, other[F.LABEL], theirs)
        end
      end
    end
  end
  -- (Beside a trace, when one records: each call goes on to it.)
  local inner = o.tracer or nil
  local function pass(name)
    return inner and function(_, ...) return inner[name](inner, ...) end or function() end
  end
  local hold, permit = pass("hold"), pass("permit")
  o.tracer = setmetatable({
    hold = function(self, job, what, now) granted(self, job, what) return hold(self, job, what, now) end,
    permit = function(self, job, what, now) granted(self, job, what) return permit(self, job, what, now) end,
  }, { __index = function(t, name) local fn = pass(name) rawset(t, name, fn) return fn end })
end

--- Reads `load`'s bar (`phase`'s, or the whole load's when nil): its
--- fraction, and a line saying how it went back, or out of 0..1, since the
--- last reading made here (nil when it did not).
local bars = setmetatable({}, { __mode = "k" })
function M.bar(load, phase)
  local seen = bars[load] or {}
  bars[load] = seen
  local key, f = phase or true, load:fraction(phase)
  local was = seen[key] or 0
  seen[key] = f
  if f < was or f > 1 then return f, ("%s's bar went from %s to %s"):format(phase or "the load", was, f) end
  return f
end

--- The trace of a scene whose jobs all ended: each job one start and one
--- end, after it; its waits and holds closed, inside its life, one at a
--- time; and the file it writes read back as JSON with a track for each.
function M.traced(tr, where)
  local evs, life, ends, open = tr:events(), {}, {}, {}
  local function fail(why, e)
    error(("%s: the trace %s (%s #%s)"):format(where, why, tostring(e.label), tostring(e.id)))
  end
  for _, e in ipairs(evs) do
    if e.kind == "start" then
      if life[e.id] then fail("starts a job twice", e) end
      life[e.id] = e
    elseif e.kind == "end" then
      if not life[e.id] then fail("ends a job it never started", e) end
      if ends[e.id] then fail("ends a job twice", e) end
      if e.t < life[e.id].t then fail("ends a job before its start", e) end
      ends[e.id] = e
    end
  end
  for _, e in ipairs(evs) do
    local s, fin = life[e.id], ends[e.id]
    if not s or not fin then fail("has a " .. e.kind .. " of a job it never saw start and end", e) end
    if e.kind == "wait" or e.kind == "hold" then
      if e.to == false then fail("leaves a " .. e.kind .. " on " .. e.what .. " open", e) end
      if e.from > e.to or e.from < s.t or e.to > fin.t then
        fail(("has a %s on %s from %s to %s outside the job's life (%s to %s)"):format(e.kind, e.what, e.from, e.to,
          s.t, fin.t), e)
      end
      if e.kind == "wait" then
        local prev = open[e.id]
        if prev and e.from < prev.to then fail("overlaps two waits", e) end
        open[e.id] = e
      end
    end
  end
  local ok, cjson = pcall(require, "cjson")
  if not ok then return end
  local path = os.tmpname()
  tr:write(path)
  local f = assert(io.open(path, "rb"))
  local text = f:read("*a")
  f:close()
  os.remove(path)
  local okj, doc = pcall(cjson.decode, text)
  if not okj then error(where .. ": the trace's file is no JSON: " .. tostring(doc)) end
  local tracks = 0
  for _, ev in ipairs(doc.traceEvents) do
    if ev.cat == "job" then tracks = tracks + 1 end
  end
  local jobs = 0
  for _ in each, life do jobs = jobs + 1 end
  if tracks ~= jobs then error(("%s: the trace's file has %d job tracks for %d jobs"):format(where, tracks, jobs)) end
end

--- The seeds to run, and the words that say which: " (seed s)" for
--- CHAOS_SEED=s, else " across n seeded scenes" (CHAOS_SEEDS, 20).
--- (busted's describe and it are the spec file's own: not reachable here.)
function M.seeds()
  local only = tonumber(os.getenv("CHAOS_SEED") or "")
  if only then return " (seed " .. only .. ")", { only } end
  local n = tonumber(os.getenv("CHAOS_SEEDS") or "") or 20
  local first = tonumber(os.getenv("CHAOS_FIRST") or "") or 1
  local list = {}
  for i = 1, n do list[i] = first + i - 1 end
  local from = first == 1 and "" or " from seed " .. first
  return " across " .. n .. " seeded scenes" .. from, list
end

return M
