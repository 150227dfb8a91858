-- love scripts/textures OUTDIR COUNT SIZE [PREFIX]: writes COUNT PNG files of
-- SIZE x SIZE pixels, OUTDIR/PREFIX1.png..., each a different pattern (a
-- seeded mix of waves, so a decode has real work and files differ).
-- Also writes OUTDIR/PREFIX-corrupt.png (a PNG cut short) when COUNT > 1.
local function write(path, bytes)
  local f = assert(io.open(path, "wb"))
  f:write(bytes)
  f:close()
end

function love.load(args)
  local out, count, size, prefix = args[1], tonumber(args[2]), tonumber(args[3]), args[4] or "texture"
  assert(out and count and size, "usage: love scripts/textures OUTDIR COUNT SIZE [PREFIX]")
  for i = 1, count do
    local data = love.image.newImageData(size, size)
    local a, b, c = 3 + i % 5, 2 + (i * 7) % 9, i * 0.37
    data:mapPixel(function(x, y)
      local u, v = x / size, y / size
      local r = 0.5 + 0.5 * math.sin(a * 6.283 * u + c)
      local g = 0.5 + 0.5 * math.sin(b * 6.283 * v - c)
      local bl = 0.5 + 0.5 * math.sin(6.283 * (u + v) * (1 + i % 3))
      return r, g, bl, 1
    end)
    write(out .. "/" .. prefix .. i .. ".png", data:encode("png"):getString())
  end
  if count > 1 then
    local whole = love.image.newImageData(size, size):encode("png"):getString()
    write(out .. "/" .. prefix .. "-corrupt.png", whole:sub(1, math.floor(#whole / 3)))
  end
  love.event.quit()
end
