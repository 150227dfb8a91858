-- What the seeded scene specs (chaos_spec, reentry_spec) share: numbers
-- that are the same on every runtime, the check that a scene ended whole,
-- and how many seeds to run. CHAOS_SEEDS=n runs n seeds (20 by default;
-- make chaos runs 500), CHAOS_SEED=s replays one, and CHAOS_FIRST=f starts
-- the n seeds at f (new ground for a long run: seeds 1..n are the usual ones).
local stagehand = require "stagehand"
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
--- runs wrote on LuaJIT (both backends), Lua 5.4 and 5.1.
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
  for k, v in pairs(tally) do parts[#parts + 1] = k .. " " .. v end
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
