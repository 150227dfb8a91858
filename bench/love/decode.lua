-- stagehand's worker module for the LÖVE bench: decodes on LÖVE threads.
require "love.image"
require "love.filesystem"

local M = {}

function M.png(path)
  if not love.filesystem.getInfo(path) then error("no such file: " .. path, 0) end
  return love.image.newImageData(path)
end

return M
