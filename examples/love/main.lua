-- stagehand in LÖVE 11: a loading screen with a bar per phase, then the
-- scene once every texture is in.
--
-- * love.update pumps a manual orchestrator on love.timer's clock, after
--   the frame's requests: orch:step(4), at most 4 ms of loading a frame.
-- * Each texture is "read" (a short sleep stands in for the disk), decoded
--   on a stagehand worker pool (texture_worker.lua, passed as text), then
--   uploaded to the GPU on the main thread, at most two a frame (a budget).
-- * A barrier over every texture says when the scene is ready.
-- * love.visible and love.focus tell the orchestrator: time while the game
--   is hidden never counts towards a stall.
--
--   eval "$(make -s env LUA=luajit)"; love examples/love
--   (--screenshot FILE writes the scene to FILE and quits; --loading-screenshot
--   FILE also writes the loading screen halfway through)
local stagehand = require "stagehand"

local TEXTURES = {
  "stone", "moss", "water", "lava", "sand", "ice",
  "bark", "rust", "slate", "clay", "ember", "frost",
}
local SIZE = 64
local PHASES = { "read", "decode", "upload" }

local orch, load, pool, ready
local images, args = {}, {}
local shot_loading, shot_scene, quit_after

local function option(list, name)
  for i = 1, #list do
    if list[i] == name then return list[i + 1] end
  end
end

function love.load(arglist)
  args = arglist or {}
  print(string.format("stagehand %s on the %s backend", stagehand.VERSION, stagehand.backend))
  shot_scene = option(args, "--screenshot")
  shot_loading = option(args, "--loading-screenshot")
  orch = stagehand.new {
    driver = "manual",
    clock = function() return love.timer.getTime() * 1000 end,
    stall_ms = 10000,
  }
  orch:budget("upload", { ops = 2 }) -- two GPU uploads a frame
  load = stagehand.tracker(orch)
  pool = stagehand.pool(orch, {
    module = "texture_worker",
    source = love.filesystem.read("texture_worker.lua"),
    size = stagehand.threads(),
  })
  ready = orch:barrier("the scene is ready", TEXTURES)
  for i, name in ipairs(TEXTURES) do
    orch:run("Loading " .. name, function(job)
      job:await(orch:run("Reading " .. name, function(r) r:sleep(20 + 10 * i) end, { phase = "read" }))
      local bytes = job:await(pool:run("texture", { size = SIZE, seed = i * 1.7, work = 12 },
        { label = "Decoding " .. name, phase = "decode", priority = -i }))
      job:await(orch:run("Uploading " .. name, function(up)
        up:permit("upload")
        local data = love.image.newImageData(SIZE, SIZE, "rgba8", bytes)
        images[#images + 1] = { name = name, image = love.graphics.newImage(data) }
      end, { phase = "upload" }))
      ready:arrive(name)
    end)
  end
end

function love.update()
  orch:step(4)
end

function love.visible(v) orch:set_visible(v) end
function love.focus(f) orch:set_visible(f) end

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
    local png = data:encode("png")
    local f = assert(io.open(path, "wb"))
    f:write(png:getString())
    f:close()
    print(string.format("%s screenshot: %s (%d colours)", what, path, n))
    if what == "scene" then quit_after = 2 end
  end)
end

local function draw_bars()
  love.graphics.clear(0.08, 0.08, 0.12)
  love.graphics.setColor(1, 1, 1)
  love.graphics.print("Loading the scene", 40, 40, 0, 2, 2)
  for i, phase in ipairs(PHASES) do
    local done, total = load:progress(phase)
    local y = 100 + i * 60
    love.graphics.setColor(0.8, 0.8, 0.85)
    love.graphics.print(string.format("%s  %d / %d", phase, done, total), 40, y - 22)
    love.graphics.setColor(0.25, 0.25, 0.3)
    love.graphics.rectangle("fill", 40, y, 560, 20)
    love.graphics.setColor(0.35, 0.75, 0.45)
    love.graphics.rectangle("fill", 40, y, total > 0 and 560 * done / total or 0, 20)
  end
end

local function draw_scene()
  love.graphics.clear(0.1, 0.1, 0.1)
  love.graphics.setColor(1, 1, 1)
  for i, t in ipairs(images) do
    local col, row = (i - 1) % 6, math.floor((i - 1) / 6)
    local x, y = 40 + col * 96, 60 + row * 120
    love.graphics.draw(t.image, x, y, 0, 1.25, 1.25)
    love.graphics.print(t.name, x, y + 84)
  end
  love.graphics.print("the scene is ready: " .. #images .. " textures", 40, 20)
end

function love.draw()
  local scene = ready.settled:state() == "done"
  if scene then draw_scene() else draw_bars() end
  if shot_loading and not scene then
    local done, total = load:progress("decode")
    if total > 0 and done >= total / 2 then
      write_screenshot(shot_loading, "loading")
      shot_loading = nil
    end
  end
  if scene and shot_scene then
    write_screenshot(shot_scene, "scene")
    shot_scene = nil
  end
  if quit_after then
    quit_after = quit_after - 1
    if quit_after == 0 then
      print(string.format("loaded %d of %d textures; decoded on %d worker thread(s)", #images, #TEXTURES,
        stagehand.threads()))
      orch:wait(pool:destroy(), 2000)
      love.event.quit()
    end
  end
end
