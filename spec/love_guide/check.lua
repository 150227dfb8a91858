-- What scripts/guide_love_check.sh appends to each of the guide's LÖVE
-- programs: it watches the program load the game's textures and, once
-- nothing runs, prints "guide NAME: ok" or what the guide promised and the
-- program did not do, then quits.
local M = {}

-- (the screen-first run's visible textures are tile1.png... and its
-- background ones bg1.png...)
local function on_screen(name) return name:match("^tile%d") ~= nil end

-- The screen-first loop's list: the visible textures given after the
-- rest, so that going first is the priorities' doing.
function M.textures(files)
  local list = {}
  for _, name in ipairs(files) do
    list[#list + 1] = { name = name, path = "textures/" .. name, visible = on_screen(name) }
  end
  table.sort(list, function(a, b)
    if a.visible ~= b.visible then return b.visible end
    return a.name < b.name
  end)
  return list
end

function M.watch(program, orch, images, load)
  local files = love.filesystem.getDirectoryItems("textures")
  local uploads, ended, problems = {}, {}, {}
  local started = love.timer.getTime()
  local frames, back, last = 0, 0, 0 -- (load:fraction() each frame: did it move back?)
  local function problem(fmt, ...) problems[#problems + 1] = string.format(fmt, ...) end

  local new_image = love.graphics.newImage
  love.graphics.newImage = function(data, ...)
    local image = new_image(data, ...)
    uploads[#uploads + 1] = image
    return image
  end
  orch:watch(function(rec)
    if rec.state ~= "running" then ended[#ended + 1] = rec end
  end)

  local draw = love.draw
  function love.draw()
    if draw then draw() end
    frames = frames + 1
    local f = load:fraction()
    if f < last then back = back + 1 end
    last = f
    if #orch:report() > 0 and frames < 3000 then return end
    if frames >= 3000 then problem("still loading after %d frames:\n%s", frames, orch:dump()) end

    -- every good texture uploaded, under its name; each corrupt one not,
    -- and its job failed naming the file
    local good = 0
    for _, name in ipairs(files) do
      if not name:find("corrupt", 1, true) then
        good = good + 1
        if not images[name] then problem("%s was not uploaded", name) end
      else
        if images[name] then problem("the corrupt %s was uploaded", name) end
        local named = false
        for _, rec in ipairs(ended) do
          if rec.state == "failed" and rec.error and rec.error:find(name, 1, true) then named = true end
        end
        if not named then problem("no job failed naming %s", name) end
      end
    end
    if #uploads ~= good then problem("%d uploads for %d good textures", #uploads, good) end
    if program == "full" then -- (the program that draws a bar)
      if back > 0 then problem("the bar moved back %d times", back) end
      if last ~= 1 then problem("the bar ended at %s, not 1", tostring(last)) end
    elseif program == "screen_first" then
      -- every visible texture up before any other
      local seen_background, name_of, each = nil, {}, next -- (each: never pairs, LuaJIT #827)
      for n, im in each, images do name_of[im] = n end
      for _, image in ipairs(uploads) do
        local name = name_of[image]
        local visible = name and on_screen(name)
        if not visible then seen_background = name or "?" end
        if visible and seen_background then problem("%s went up after %s", name, seen_background) end
      end
    end
    print(string.format("guide %s: %d textures up, %d jobs ended, %d frames, %.0f ms, on the %s core", program,
      #uploads, #ended, frames, (love.timer.getTime() - started) * 1000, require("stagehand").backend))
    for _, p in ipairs(problems) do print("guide " .. program .. ": " .. p) end
    if #problems == 0 then print("guide " .. program .. ": ok") end
    love.event.quit()
  end
end

return M
