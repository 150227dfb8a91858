-- A modder's preload, beside the game's own loading (the manual driver, on
-- the game's frame clock, so the output is the same on every runtime).
--
-- * The mod adds keyed preload tasks for its assets. Each waits until the
--   game is idle (`when_idle`: no job of the game's busy), then starts at
--   `background` priority: the mod never holds up the game's own loads.
-- * Files come through one disk slot (a pool of 1), so whoever is first in
--   line matters.
-- * When the game asks for an asset the mod is already preloading, it joins
--   that load (same key: nothing loads twice) and lends it its `visible`
--   rank, so it goes ahead of the mod's other preloads.
-- * When the game asks for one the mod already finished, it is served from
--   memory (get-or-load: `reuse`), with no second read.
--
--   eval "$(make -s env)"; luajit examples/mod_preload.lua   (lua5.4, lua5.3, lua5.2, lua5.1 too)
local stagehand = require "stagehand"

local FRAME_MS = 10
local frame = 0
local orch = stagehand.new {
  driver = "manual",
  clock = function() return frame * FRAME_MS end,
  pools = { disk = 1 }, -- one file read at a time
  log = function(message) io.stderr:write(message, "\n") end,
}

local reads = {} -- file -> how many times it was read from disk
local function say(fmt, ...) print(string.format("frame %2d  " .. fmt, frame, ...)) end

-- Reading a file: the disk slot, then `frames` frames of reading.
local function reader(name, frames)
  return function(job)
    local release = job:slot("disk")
    say("reading %s (%s)", name, job:priority())
    reads[name] = (reads[name] or 0) + 1
    job:sleep(frames * FRAME_MS)
    release()
    return name .. " bytes"
  end
end

local function load(name, frames, priority)
  return orch:run("Loading " .. name, reader(name, frames), { key = name, reuse = true, priority = priority })
end

-- The game's level: three files, the first frames of the game.
local level = {}
for i, name in ipairs { "level/map.bin", "level/tiles.png", "level/music.ogg" } do
  level[i] = load(name, 2, "scene")
end

-- The mod: a preload task per asset, each waiting for the game to be idle.
local MOD = { "mod/banner.png", "mod/horn.ogg", "mod/armor.mesh", "mod/cape.png" }
for _, name in ipairs(MOD) do
  orch:run("Preloading " .. name, function(job)
    job:await(orch:when_idle())
    say("the game is idle: the mod preloads %s", name)
    return job:await(load(name, 3, "background"))
  end, { priority = "background" })
end

local armor, banner
for _ = 1, 32 do
  frame = frame + 1
  if frame == 10 then
    -- The player opens the armory: the game wants the armor now.
    say("the game asks for mod/armor.mesh (visible)")
    armor = load("mod/armor.mesh", 3, "visible")
  end
  if frame == 30 then
    say("the game asks for mod/banner.png again")
    banner = load("mod/banner.png", 3, "visible")
    say("banner: %s, at once (%s)", banner:state(), select(2, banner:result()))
  end
  orch:step()
end

print()
for _, h in ipairs(level) do print(string.format("%-28s %s", h.label, h:state())) end
print(string.format("%-28s %s", "the game's armor", armor:state()))
print(string.format("%-28s %s", "the game's banner", banner:state()))
local once = true
local names = {}
for name, n in pairs(reads) do
  names[#names + 1] = name .. "=" .. n
  if n ~= 1 then once = false end
end
table.sort(names)
print("reads: " .. table.concat(names, " "))
print(once and "every file was read once" or "a file was read twice")
orch:close()
