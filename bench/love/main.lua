-- One loading scene, measured inside LÖVE (scripts/bench_love.sh runs it):
-- 64 textures of 512x512 asked for in the first frame, 56 `background` ones
-- then 8 `visible` ones, each decoded off the main thread and uploaded on
-- it. Prints one line:
--   result loader=NAME load_ms= frames= worst_ms= p95_ms= visible= loaded= failed=
--     upload_frames= upload_p95_ms= other_p95_ms=
-- where `visible` lists the places (1 = first finished) the 8 visible
-- textures finished in, and the last three split the frames into those
-- that made a GPU upload (love.graphics.newImage) and the others.
--
--   love bench/love prepare              writes the textures (once)
--   love bench/love stagehand THREADS    stagehand, THREADS LÖVE worker threads
--   love bench/love love-loader PEERS    kikito/love-loader from PEERS/love-loader
--   love bench/love lily PEERS           MikuAuahDark/lily from PEERS/lily
--   love bench/love objects N            N requests carrying a ByteData each,
--                                        N whose results are one, beside N
--                                        carrying a number (prints "objects
--                                        n= plain_us= objects_us= back_us=")
--
-- The scene for stagehand holds 62 PNGs, one PNG cut short and one name
-- with no file; love-loader and lily raise on those, so theirs is the 62
-- PNGs alone (they do a little less work).
local N, SIZE, VISIBLE = 64, 512, 8
local DIR = "bench-textures"

local args, names, finished, frame_ms, frame_up = {}, {}, {}, {}, {}
local upload_seen = false -- (an upload since the last frame was counted)
local loader_name, t0, t_done, last_frame
local loaded, failed = 0, 0
local is_visible = {}
local update_loader = function() end

-- BENCH_DEBUG=1: where a frame's time goes (uploads, stagehand's steps,
-- frame-time quantiles), printed after the result.
local DEBUG = os.getenv("BENCH_DEBUG")
local upload_ms, uploads, step_ms, steps = 0, 0, 0, 0

local function now_ms() return love.timer.getTime() * 1000 end

local function texture_name(i) return DIR .. "/t" .. i .. ".png" end

local function prepare()
  love.filesystem.createDirectory(DIR)
  for i = 1, N - 2 do
    local path = texture_name(i)
    if not love.filesystem.getInfo(path) then
      local data = love.image.newImageData(SIZE, SIZE)
      local a, b, c = 3 + i % 5, 2 + (i * 7) % 9, i * 0.37
      data:mapPixel(function(x, y)
        local u, v = x / SIZE, y / SIZE
        local n = love.math.noise(x / 23 + i, y / 17) -- (texture, so the PNG does not shrink to nothing)
        return 0.5 + 0.4 * math.sin(a * 6.283 * u + c) + 0.1 * n, 0.5 + 0.4 * math.sin(b * 6.283 * v - c) + 0.1 * n,
          0.5 + 0.5 * n, 1
      end)
      love.filesystem.write(path, data:encode("png"))
    end
  end
  local whole = love.filesystem.read(texture_name(1))
  love.filesystem.write(DIR .. "/corrupt.png", whole:sub(1, math.floor(#whole / 3)))
  print("textures ready in " .. love.filesystem.getSaveDirectory() .. "/" .. DIR)
  love.event.quit()
end

-- A texture ended (an Image made, or a named failure).
local function ended(name, image, err)
  if image then loaded = loaded + 1 else
    failed = failed + 1
    print("failed: " .. name .. ": " .. tostring(err))
  end
  finished[#finished + 1] = name
end

-- The scene's names: 56 background, then 8 visible; the last two
-- background ones are the corrupt PNG and the missing file when `bad`.
local function scene(bad)
  local list = {}
  for i = 1, N - VISIBLE - 2 do list[#list + 1] = texture_name(i) end
  if bad then
    list[#list + 1] = DIR .. "/corrupt.png"
    list[#list + 1] = DIR .. "/missing.png"
  end
  for i = N - VISIBLE - 1, N - 2 do
    local name = texture_name(i)
    list[#list + 1] = name
    is_visible[name] = true
  end
  return list
end

-- Copies a peer's Lua files from the folder given into the save directory,
-- where LÖVE's require and love.thread.newThread find them.
local function install_peer(peers, name, files, patch)
  love.filesystem.createDirectory("peers")
  for _, file in ipairs(files) do
    local path = peers .. "/" .. name .. "/" .. file
    local f = assert(io.open(path, "rb"), "no " .. path)
    local text = f:read("*a")
    f:close()
    if patch then text = patch(text) end
    love.filesystem.write("peers/" .. file, text)
  end
end

local starters = {}

function starters.stagehand(threads)
  local stagehand = require "stagehand"
  local orch = require("stagehand.love").new { step_ms = 4, stall_ms = 60000, log = print }
  orch:budget("upload", { ops = 1 }) -- (one GPU upload a frame, as love-loader does)
  if DEBUG then
    local step = orch.step
    rawset(orch, "step", function(self, ms)
      local t = now_ms()
      step(self, ms)
      steps, step_ms = steps + 1, step_ms + now_ms() - t
    end)
  end
  local pool = stagehand.pool(orch, { module = "decode", size = tonumber(threads) or stagehand.threads() })
  names = scene(true)
  -- The screen first: a background texture decodes as soon as a worker is
  -- free, but uploads once every visible one has ended.
  local screen, screen_up = {}, nil
  for _, name in ipairs(names) do
    local h = orch:run(name, function(job)
      local ok, data = job:pcall(job.await, job, pool:run("png", name))
      if not ok then return ended(name, nil, data.message) end
      if not is_visible[name] then job:await(screen_up) end
      job:permit("upload")
      ended(name, love.graphics.newImage(data))
    end, { priority = is_visible[name] and "visible" or "background" })
    if is_visible[name] then screen[#screen + 1] = h end
  end
  screen_up = stagehand.all_settled(screen)
end

starters["love-loader"] = function(peers)
  -- (LÖVE 11.4's threads have no love.graphics: line 114 needs a guard)
  install_peer(peers, "love-loader", { "love-loader.lua" }, function(text)
    return (text:gsub("constructor = love%.graphics%.newVideo",
      "constructor = love.graphics and love.graphics.newVideo"))
  end)
  local loader = require "peers.love-loader"
  names = scene(false)
  local holder = {}
  for _, name in ipairs(names) do loader.newImage(holder, name, name) end
  loader.start(function() end, function(_, h, key) ended(key, h[key]) end)
  update_loader = loader.update
end

function starters.lily(peers)
  install_peer(peers, "lily", { "lily.lua", "lily_thread.lua" })
  local lily = require "peers.lily"
  names = scene(false)
  for _, name in ipairs(names) do
    lily.newImage(name):onComplete(function(_, image) ended(name, image) end)
      :onError(function(_, err) ended(name, nil, err) end)
  end
  print("lily threads: " .. lily.getThreadCount())
end

-- What LÖVE objects add to a request: N requests queued at once on two
-- LÖVE workers, each carrying a ByteData, or each answered with one,
-- beside N carrying a number, in microseconds a request, the median of
-- three rounds each.
local function objects(n)
  n = tonumber(n) or 2000
  local stagehand = require "stagehand"
  local orch = stagehand.new { driver = "manual", clock = now_ms, stall_ms = 60000 }
  local pool = stagehand.pool(orch, { module = "decode", size = 2 })
  orch:wait(pool:run("plain", 0), 10000) -- (the threads started)
  local function round(fn, make)
    local hs = {}
    local t = now_ms()
    for i = 1, n do hs[i] = pool:run(fn, make(i)) end
    orch:wait(stagehand.all(hs), 60000)
    return (now_ms() - t) * 1000 / n
  end
  local function median(fn, make)
    local r = { round(fn, make), round(fn, make), round(fn, make) }
    table.sort(r)
    return r[2]
  end
  local plain = median("plain", function(i) return i end)
  local carried = median("size", function() return love.data.newByteData(64) end)
  local back = median("bytes", function() return 64 end)
  print(string.format("objects n=%d plain_us=%.1f objects_us=%.1f back_us=%.1f", n, plain, carried, back))
  orch:wait(pool:destroy(), 10000)
  love.event.quit()
end

function love.load(arglist)
  args = arglist or {}
  if args[1] == "objects" then
    loader_name = "prepare" -- (no scene: update and draw do nothing)
    return objects(args[2])
  end
  local new_image = love.graphics.newImage
  love.graphics.newImage = function(...)
    upload_seen = true
    if not DEBUG then return new_image(...) end
    local t = now_ms()
    local img = new_image(...)
    upload_ms, uploads = upload_ms + now_ms() - t, uploads + 1
    return img
  end
  loader_name = args[1]
  if loader_name == "prepare" then return prepare() end
  assert(starters[loader_name], "usage: love bench/love prepare | stagehand THREADS | love-loader PEERS | lily PEERS")
  assert(love.filesystem.getInfo(texture_name(1)), "no textures: run `love bench/love prepare` first")
  t0 = now_ms()
  last_frame = t0
  starters[loader_name](args[2])
end

function love.update()
  if loader_name == "prepare" then return end
  update_loader()
  local t = now_ms()
  if not t_done then
    frame_ms[#frame_ms + 1] = t - last_frame
    frame_up[#frame_ms] = upload_seen
    upload_seen = false
    if #finished == #names then t_done = t end
  end
  last_frame = t
end

function love.draw()
  if loader_name == "prepare" then return end
  love.graphics.print(string.format("%s: %d of %d", loader_name, #finished, #names), 20, 20)
  if t_done and not args.reported then
    args.reported = true
    local sorted = {}
    for i, v in ipairs(frame_ms) do sorted[i] = v end
    table.sort(sorted)
    local places = {}
    for i, name in ipairs(finished) do
      if is_visible[name] then places[#places + 1] = i end
    end
    local up, other = {}, {}
    for i, v in ipairs(frame_ms) do
      local list = frame_up[i] and up or other
      list[#list + 1] = v
    end
    local function p95(list)
      table.sort(list)
      return list[math.max(1, math.ceil(#list * 0.95))] or 0
    end
    print(string.format("result loader=%s load_ms=%.1f frames=%d worst_ms=%.2f p95_ms=%.2f visible=%s loaded=%d"
      .. " failed=%d upload_frames=%d upload_p95_ms=%.2f other_p95_ms=%.2f", loader_name, t_done - t0, #frame_ms,
      sorted[#sorted], sorted[math.ceil(#sorted * 0.95)], table.concat(places, ","), loaded, failed, #up, p95(up),
      p95(other)))
    if DEBUG then
      print(string.format("frames: p50 %.2f p75 %.2f p90 %.2f p95 %.2f ms", sorted[math.ceil(#sorted * 0.5)],
        sorted[math.ceil(#sorted * 0.75)], sorted[math.ceil(#sorted * 0.9)], sorted[math.ceil(#sorted * 0.95)]))
      if uploads > 0 then print(string.format("uploads %d, %.2f ms each", uploads, upload_ms / uploads)) end
      if steps > 0 then
        print(string.format("steps %d, %.3f ms each (their uploads included)", steps, step_ms / steps))
      end
      local first = {}
      for i = 1, math.min(12, #finished) do first[i] = finished[i]:match("[^/]*$") end
      print("finished first: " .. table.concat(first, " "))
    end
    love.event.quit()
  end
end
