-- stagehand in LÖVE 11: a loading screen whose bar never moves back, then
-- the scene.
--
-- * require("stagehand.love").new gives an orchestrator on love.timer's
--   clock, stepped right after love.update (at most 4 ms of loading a
--   frame), its stall clocks paused while the window is hidden, and shut
--   down when the game quits.
-- * Every PNG in textures/, and one name with no file, is read and decoded
--   on worker threads (LÖVE threads: texture_worker.lua requires
--   love.image and reads the game's archive), then uploaded on the main
--   thread under a budget of 2 ms a frame.
-- * The first row is on screen: its textures are `visible` and go first,
--   and the rest upload once that row is up (they decode meanwhile).
-- * A corrupt PNG and the missing file get a stand-in and a logged reason.
-- * Where no worker thread can run (a web build made with love.js, or a
--   game whose conf.lua turns love.thread off), the same decodes run on
--   the main thread instead, one a frame.
--
--   eval "$(make -s env LUA=luajit)"; love examples/love
--   (--screenshot FILE writes the scene to FILE and quits; --loading-screenshot
--   FILE also writes the loading screen halfway through)
local stagehand = require "stagehand"
local for_love = require "stagehand.love"

local ROW = 6 -- (textures a row; the first row is on screen first)
local orch, load, ready, decoded_on
local names, images, uploaded, stand_ins = {}, {}, {}, {}
local shot_loading, shot_scene, quit_after
local frames, went_back, last_fraction = 0, 0, 0

local function option(list, name)
  for i = 1, #list do
    if list[i] == name then return list[i + 1] end
  end
end

-- What a texture that did not load shows: a checkerboard.
local function stand_in()
  local data = love.image.newImageData(128, 128)
  data:mapPixel(function(x, y)
    local on = (math.floor(x / 16) + math.floor(y / 16)) % 2 == 0
    return on and 0.9 or 0.3, 0.2, on and 0.9 or 0.3, 1
  end)
  return data
end

function love.load(arglist)
  print(string.format("stagehand %s on the %s backend", stagehand.VERSION, stagehand.backend))
  shot_scene = option(arglist or {}, "--screenshot")
  shot_loading = option(arglist or {}, "--loading-screenshot")
  for _, file in ipairs(love.filesystem.getDirectoryItems("textures")) do
    if file:match("%.png$") then names[#names + 1] = file end
  end
  table.sort(names, function(a, b) -- (tile2 before tile10)
    local na, nb = tonumber(a:match("%d+")), tonumber(b:match("%d+"))
    if na and nb then return na < nb end
    return (na and 0 or 1) < (nb and 0 or 1) or (not na and not nb and a < b)
  end)
  names[#names + 1] = "missing.png"

  orch = for_love.new { step_ms = 4, stall_ms = 10000 }
  orch:budget("upload", { ms = 2 }) -- GPU uploads: at most 2 ms of them a frame
  load = stagehand.tracker(orch)
  load:expect("decode", #names)
  load:expect("upload", #names)
  -- Decodes: on LÖVE worker threads, or, where there are none, as jobs
  -- on the main thread under a budget of one a frame.
  local decode
  local made, pool = pcall(stagehand.pool, orch, { module = "texture_worker" })
  if made then
    decode = function(path, opts) return pool:run("decode", path, opts) end
    decoded_on = "on " .. stagehand.threads() .. " LÖVE worker thread(s)"
  else
    print("decoding on the main thread: " .. tostring(pool))
    decoded_on = "on the main thread, one a frame (no worker threads here)"
    local texture_worker = require "texture_worker"
    orch:budget("decode", { ops = 1 })
    decode = function(path, opts)
      return orch:run(opts.label, function(job)
        job:permit("decode")
        local data = texture_worker.decode(path) -- (not a tail call: an error names this line, not stagehand's)
        return data
      end, { phase = opts.phase })
    end
  end
  ready = orch:barrier("the scene is ready", names)
  local fallback = stand_in()
  local first_row, first_row_up = {}, nil
  for i, name in ipairs(names) do
    local h = orch:run("Loading " .. name, function(job)
      local ok, data = job:pcall(job.await, job, decode("textures/" .. name,
        { label = "Decoding " .. name, phase = "decode" }))
      if i > ROW then job:await(first_row_up) end -- (the screen first: decoded already, uploads after it)
      if not ok then
        stand_ins[#stand_ins + 1] = name
        print(string.format("stand-in for %s: %s", name, tostring(data.message or data)))
        data = fallback
      end
      job:await(orch:run("Uploading " .. name, function(up)
        up:permit("upload")
        images[i] = { name = name, image = love.graphics.newImage(data), stand_in = not ok }
        if ok then data:release() end -- (its pixels are on the GPU now: freed at once, not at the next collect)
        uploaded[#uploaded + 1] = name
      end, { phase = "upload" }))
      ready:arrive(name)
    end, { priority = i <= ROW and "visible" or "background" })
    if i <= ROW then first_row[#first_row + 1] = h end
  end
  first_row_up = stagehand.all_settled(first_row)
end

local function write_screenshot(path, what)
  love.graphics.captureScreenshot(function(data)
    -- (how many colours it holds: a blank capture has one)
    local colours, n = {}, 0
    for y = 0, data:getHeight() - 1, 8 do
      for x = 0, data:getWidth() - 1, 8 do
        local r, g, b = data:getPixel(x, y)
        local key = string.format("%.2f %.2f %.2f", r, g, b)
        if not colours[key] then colours[key], n = true, n + 1 end
      end
    end
    local f = assert(io.open(path, "wb"))
    f:write(data:encode("png"):getString())
    f:close()
    print(string.format("%s screenshot: %s (%d colours)", what, path, n))
    if what == "scene" then quit_after = 2 end
  end)
end

local function bar(label, y, f)
  love.graphics.setColor(0.8, 0.8, 0.85)
  love.graphics.print(string.format("%s  %3d%%", label, math.floor(f * 100)), 40, y - 22)
  love.graphics.setColor(0.25, 0.25, 0.3)
  love.graphics.rectangle("fill", 40, y, 560, 20)
  love.graphics.setColor(0.35, 0.75, 0.45)
  love.graphics.rectangle("fill", 40, y, 560 * f, 20)
end

local function draw_loading()
  love.graphics.clear(0.08, 0.08, 0.12)
  love.graphics.setColor(1, 1, 1)
  love.graphics.print("Loading the scene", 40, 40, 0, 2, 2)
  bar("loading", 130, load:fraction())
  bar("decode", 200, load:fraction("decode"))
  bar("upload", 260, load:fraction("upload"))
end

local function draw_scene()
  love.graphics.clear(0.1, 0.1, 0.1)
  love.graphics.setColor(1, 1, 1)
  for i, t in ipairs(images) do
    local col, row = (i - 1) % ROW, math.floor((i - 1) / ROW)
    local x, y = 20 + col * 102, 40 + row * 118
    love.graphics.draw(t.image, x, y, 0, 0.75, 0.75)
    love.graphics.print(t.name, x, y + 98)
    if t.stand_in then love.graphics.print("(a stand-in)", x + 8, y + 40) end
  end
  love.graphics.print("the scene is ready: " .. #images .. " textures", 20, 12)
end

function love.draw()
  local scene = ready.settled:state() == "done"
  local f = load:fraction()
  frames = frames + 1
  if f < last_fraction then went_back = went_back + 1 end
  last_fraction = f
  if scene then draw_scene() else draw_loading() end
  if shot_loading and not scene and f >= 0.5 then
    write_screenshot(shot_loading, "loading")
    shot_loading = nil
  end
  if scene and shot_scene then
    write_screenshot(shot_scene, "scene")
    shot_scene = nil
  end
  if quit_after then
    quit_after = quit_after - 1
    if quit_after == 0 then
      print(string.format("loaded %d of %d textures (%d stand-ins); decoded %s", #names - #stand_ins, #names,
        #stand_ins, decoded_on))
      print("uploaded first: " .. table.concat(uploaded, ", ", 1, ROW))
      print(string.format("the bar moved back %d times in %d frames", went_back, frames))
      love.event.quit()
    end
  end
end
