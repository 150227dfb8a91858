-- `make soak-love`: spec/soak/threads.lua inside LÖVE, where the pools'
-- workers and the services are LÖVE threads and LÖVE objects cross too.
--
--   xvfb-run -a love spec/soak/love SEED [OPERATIONS]
--
-- Also fails when a destroyed pool left a LÖVE object in its channels, or
-- one that gave up on a worker still holds them.
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
  -- channels: each one held there is an image's memory kept for good. A
  -- pool whose destroy gave up on a worker still running (live > 0) holds
  -- no channel at all: its late replies' objects go with the thread.)
  for i = 1, ok and #on_love or 0 do
    local p = on_love[i]
    local lt = p.love
    local left = next(lt.carried) and 1 or 0
    if p.live > 0 and #lt.inbox + #lt.outbox > 0 then left = left + 1 end
    for j = 1, #lt.inbox do left = left + lt.inbox[j]:getCount() + lt.outbox[j]:getCount() end
    if left > 0 then
      ok, err = false, ("pool %d kept LÖVE objects in its channels after its destroy (%d workers left running)")
        :format(i, p.live)
    end
  end
  print(ok and "soak-love: ok" or ("soak-love: " .. tostring(err)))
  io.stdout:flush()
  love.event.quit(ok and 0 or 1)
end
