-- A streaming world pumped by a game's frame loop (the manual driver). The
-- player walks along a road of 16 chunks; each frame the game keeps the
-- chunks within three of the player loading.
--
-- * A chunk's mesh is built by a worker thread (here: a queue the frame loop
--   finishes a few frames later), then finalized on the main thread, at
--   most two chunks a frame (a budget), nearest the player first: each
--   chunk's priority is a function of the player's position, read again at
--   every grant, so a chunk the player walks towards moves ahead.
-- * The minimap follows the chunk ahead of the player with `when`: it never
--   loads a chunk a second time, and it lends that chunk its `visible` rank.
-- * Chunk 6's worker is slow; the player walks past before it is done, and
--   the game drops the load (its only caller leaves, so the job is cancelled).
-- * Chunk 11's mesh is corrupt: its job fails, and the world goes on.
-- * A preloader fetches the next area's sounds, one at a time, only while no
--   chunk is loading (`when_idle`).
--
--   eval "$(make -s env)"; luajit examples/streaming_world.lua   (lua5.4, lua5.3, lua5.2, lua5.1 too)
local stagehand = require "stagehand"

local FRAME_MS = 16
local CHUNKS = 16
local frame = 0
local orch = stagehand.new {
  driver = "manual",
  clock = function() return frame * FRAME_MS end, -- the game's own clock
  log = function(message) io.stderr:write(message, "\n") end,
}
orch:budget("finalize", { ops = 2 }) -- two chunk uploads a frame

-- What happened in each frame, printed at the end.
local events, finalized_in = {}, {}
local function note(fmt, ...)
  local list = events[frame]
  if not list then
    list = {}
    events[frame] = list
  end
  list[#list + 1] = string.format(fmt, ...)
end

-- The worker threads: a job hands them a piece of work and awaits its
-- future; the frame loop finishes the piece `frames` frames later.
local pieces = {}
local function in_worker(what, frames, result)
  local f = stagehand.future(what)
  pieces[#pieces + 1] = { due = frame + frames, future = f, result = result }
  return f
end
local function run_workers()
  local left = {}
  for _, piece in ipairs(pieces) do
    if piece.due > frame then
      left[#left + 1] = piece
    elseif piece.result == "corrupt" then
      piece.future:reject("checksum mismatch")
    else
      piece.future:resolve(piece.result)
    end
  end
  pieces = left
end

local player = 1 -- the chunk the player stands on

-- Each chunk's rank, read live. (A dozen small closures is fine; a game
-- queueing thousands of jobs shares a few functions instead: docs/guide.md, Slots.)
local function nearness(n)
  return function()
    local d = math.abs(n - player)
    if d <= 1 then return "visible" end
    if d == 2 then return "scene" end
    return "background"
  end
end

local loads = {} -- chunk -> how many times its work ran
local chunks = {} -- chunk -> the game's Handle on its load

local function build_frames(n)
  if n == 6 then return 100 end -- a slow worker: the player will be gone
  return 4
end

local function stream(n)
  chunks[n] = orch:run("Streaming chunk " .. n, function(job)
    loads[n] = (loads[n] or 0) + 1
    local mesh = job:await(in_worker("mesh " .. n, build_frames(n), n == 11 and "corrupt" or "mesh " .. n))
    job:permit("finalize") -- this frame's turn on the main thread
    finalized_in[frame] = (finalized_in[frame] or 0) + 1
    note("finalized chunk %d (%s)", n, job:priority())
    return mesh
  end, { key = "chunk:" .. n, priority = nearness(n), stall_ms = 2000 })
  chunks[n]:on_end(function(st, v)
    if st == "failed" then note("chunk %d failed: %s", n, v.cause) end
    if st == "cancelled" then note("dropped chunk %d: %s", n, v.reason) end
  end)
end

-- The minimap shows the chunk ahead: it follows that chunk's run (or its
-- remembered outcome), and lets go of it once the player moves on.
local minimap = { chunk = nil, handle = nil }
local function show_on_minimap(n)
  if n > CHUNKS or minimap.chunk == n then return end
  if minimap.handle then minimap.handle:cancel("the minimap moved on") end
  minimap.chunk = n
  minimap.handle = orch:when("chunk:" .. n, "Minimap of chunk " .. n, { priority = "visible" })
end

-- The preloader: the next area's sounds, one each time the world is idle.
local SOUNDS = { "river ambience", "forest birds", "bridge creak", "night wind" }
local preloaded = {}
local preloader = orch:run("Preloading the next area's sounds", function(job)
  for _, sound in ipairs(SOUNDS) do
    job:await(orch:when_idle())
    local loading = 0
    for n = 1, CHUNKS do
      local h = chunks[n]
      if h and h:state() == "running" then loading = loading + 1 end
    end
    assert(loading == 0, "the preloader ran while chunks were loading")
    job:await(in_worker("sound " .. sound, 2, sound))
    preloaded[#preloaded + 1] = sound
    note("preloaded %s", sound)
  end
end, { priority = "background" })

local running = 1
while running > 0 or player < CHUNKS do
  frame = frame + 1
  if frame % 8 == 0 and player < CHUNKS then
    player = player + 1
    note("player walks to chunk %d", player)
  end
  -- Keep the ring around the player loading: from its edge in, so it is
  -- priority, not the order asked, that finalizes the nearest first.
  for d = 3, 0, -1 do
    for _, n in ipairs { player - d, player + d } do
      if n >= 1 and n <= CHUNKS and not chunks[n] then stream(n) end
    end
  end
  show_on_minimap(player + 1)
  -- Loads the player walked away from are dropped.
  for n = 1, player - 4 do
    local h = chunks[n]
    if h and h:state() == "running" then h:cancel("out of range") end
  end
  run_workers()
  running = orch:step()
  assert(frame < 1000, "the world never finished streaming")
end

for f = 1, frame do
  if events[f] then print(string.format("frame %3d  %s", f, table.concat(events[f], "; "))) end
end
print(string.rep("-", 72))
local most, twice = 0, {}
for _, n in pairs(finalized_in) do most = math.max(most, n) end
for n, count in pairs(loads) do
  if count > 1 then twice[#twice + 1] = n end
end
local states = {}
for n = 1, CHUNKS do states[#states + 1] = n .. "=" .. chunks[n]:state() end
print("chunks: " .. table.concat(states, " "))
print(string.format("at most %d chunks finalized in one frame (budget 2)", most))
print(#twice == 0 and "every chunk loaded at most once (the minimap followed, never loaded)"
  or "loaded twice: " .. table.concat(twice, ", "))
print(string.format("preloaded %d sounds, each while no chunk was loading: %s (%s)",
  #preloaded, table.concat(preloaded, ", "), preloader:state()))
print(string.format("the world streamed in %d frames (backend: %s)", frame, stagehand.backend))
orch:close()
if #twice > 0 or most > 2 or preloader:state() ~= "done" then os.exit(1) end
