-- Runs on stagehand's worker threads, inside LÖVE: the game passes this
-- file's text (love.filesystem.read), since a worker's Lua state cannot see
-- the game's archive. It "decodes" a texture: RGBA bytes for a pattern.
local worker = require "stagehand.worker"

local M = {}

function M.texture(t)
  local size, seed = t.size, t.seed
  local rows = {}
  local char = string.char
  for y = 0, size - 1 do
    if worker.stopping() then return nil end
    local row = {}
    for x = 0, size - 1 do
      -- a few waves, and some work per pixel as a real decoder would do
      local v = 0
      for k = 1, t.work do v = v + math.sin((x * k + seed) * 0.07) * math.cos((y * k - seed) * 0.05) end
      local r = math.floor(127 + 120 * math.sin(v + seed))
      local g = math.floor(127 + 120 * math.sin(v * 0.7 + seed * 2))
      local b = math.floor(127 + 120 * math.cos(v * 1.3 - seed))
      row[#row + 1] = char(r, g, b, 255)
    end
    rows[#rows + 1] = table.concat(row)
    worker.progress(y + 1, size)
  end
  return table.concat(rows)
end

return M
