-- `make soak-love`: spec/soak/threads.lua inside LÖVE, where the pools'
-- workers and the services are LÖVE threads and LÖVE objects cross too.
--
--   xvfb-run -a love spec/soak/love SEED [OPERATIONS]
--
-- Also fails when a destroyed pool left a LÖVE object in its channels.
-- Prints the soak's line and "soak-love: ok" and quits with 0, or prints
-- "soak-love: " and why, and quits with 1.
function love.load(args)
  local soak = love.filesystem.getSource():gsub("[/\\]love[/\\]?$", "") .. "/threads.lua"
  arg = { [0] = soak, args[1] or tostring(os.time()), args[2] }
  local stagehand = require "stagehand"
  local make, on_love = stagehand.pool, {}
  stagehand.pool = function(...) -- (the pools on LÖVE threads: all of them, or the soak proves nothing)
    local p = make(...)
    if p.love then on_love[#on_love + 1] = p end
    return p
  end
  local ok, err = pcall(dofile, soak)
  stagehand.pool = make
  if ok and #on_love == 0 then ok, err = false, "no pool ran on LÖVE threads" end
  -- (once every pool is destroyed, no LÖVE object may be left in their
  -- channels: each one held there is an image's memory kept for good)
  for i = 1, ok and #on_love or 0 do
    local lt = on_love[i].love
    local left = next(lt.carried) and 1 or 0
    for j = 1, #lt.inbox do left = left + lt.inbox[j]:getCount() + lt.outbox[j]:getCount() end
    if left > 0 then ok, err = false, ("pool %d kept LÖVE objects in its channels after its destroy"):format(i) end
  end
  print(ok and "soak-love: ok" or ("soak-love: " .. tostring(err)))
  io.stdout:flush()
  love.event.quit(ok and 0 or 1)
end
