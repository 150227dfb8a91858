-- stagehand's worker module for the LÖVE bench: decodes on LÖVE threads.
require "love.image"
require "love.filesystem"

local M = {}

function M.png(path)
  if not love.filesystem.getInfo(path) then error("no such file: " .. path, 0) end
  return love.image.newImageData(path)
end

-- (the `objects` bench: a request carrying a number, one carrying a
-- ByteData, and one whose result is a ByteData)
function M.plain(x) return x end

function M.size(data) return data:getSize() end

function M.bytes(n)
  require "love.data"
  return love.data.newByteData(n)
end

return M
