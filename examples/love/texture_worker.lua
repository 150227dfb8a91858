-- The example's worker module. It runs on LÖVE threads (stagehand's pools
-- do, inside LÖVE), found through love.filesystem like any of the game's
-- files, so it can read the archive and decode with love.image. The
-- ImageData it returns reaches the game as itself, without a copy.
require "love.image"
require "love.filesystem"

local M = {}

function M.decode(path)
  if not love.filesystem.getInfo(path) then error("no such file: " .. path, 0) end
  return love.image.newImageData(path)
end

return M
