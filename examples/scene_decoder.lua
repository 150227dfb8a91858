-- The worker module of examples/scene_loader.lua: runs on a stagehand worker
-- pool's threads, each in a Lua state of its own, so the decode and the hash
-- never hold up the frame. Values come in and go back out as copies.
local M = {}

-- djb2 over the bytes: a stand-in for the checksum a real loader checks
-- (the same number on every runtime: no step passes 2^53).
local function checksum(s)
  local h = 5381
  for i = 1, #s do h = (h * 33 + s:byte(i)) % 4294967296 end
  return h
end

-- Decodes an asset: a header line `asset <kind>`, then `field: value` lines.
function M.decode(req)
  local name, kind, text = req.name, req.kind, req.text
  local header, rest = text:match("^([^\n]*)\n(.*)$")
  if header ~= "asset " .. kind then
    local shown = (header or text):sub(1, 24):gsub("[^\32-\126]", "?")
    error(string.format("%s: not a %s asset (header '%s')", name, kind, shown), 0)
  end
  local fields = {}
  for k, v in rest:gmatch("([%w_]+):%s*([^\n]*)") do fields[k] = v end
  fields.sum = string.format("%08x", checksum(text))
  -- A real decoder works for a while: `steps` of it (the main thread never
  -- waits for them; the loading screen keeps drawing).
  local x = 0
  for i = 1, req.steps or 0 do x = (x * 31 + i) % 1000003 end
  if x < 0 then fields.never = x end -- (x is used: the loop cannot be left out)
  return fields
end

return M
