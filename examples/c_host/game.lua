-- The game that examples/c_host/host.c runs: its frame loop is the host's,
-- in C. It loads five assets: each is read (a sleep stands in for the
-- disk), then decoded on a worker thread, then finalized on the main
-- thread, at most two a frame (a budget). It returns what the host calls.
local stagehand = require "stagehand"
print("stagehand on the " .. stagehand.backend .. " backend")

local orch = stagehand.new {
  driver = "manual", -- the host pumps it: orch:step once a frame
  clock = engine_now, -- luacheck: ignore 113 (the engine's clock: a C function the host made)
  log = function(message) io.stderr:write(message, "\n") end,
}
orch:budget("finalize", { ops = 2 })
local load = stagehand.tracker(orch)
local decoders = stagehand.pool(orch, { module = "decoder", size = 2, source = [[
  return { decode = function(name)
    local h = 0
    for i = 1, 200000 do h = (h * 31 + i + #name) % 1000003 end
    return name .. " decoded (" .. h .. ")"
  end }
]] })

local ASSETS = { "castle.mesh", "castle.png", "banner.png", "wind.ogg", "map.bin" }
local handles, finalized_in = {}, {}
local frame = 0

local game = { orch = orch }

function game:update(n)
  frame = n
  if n == 1 then
    for i, name in ipairs(ASSETS) do
      handles[i] = orch:run("Loading " .. name, function(job)
        job:sleep(10 * i) -- reading it
        local decoded = job:await(decoders:run("decode", name, { phase = "decode" }))
        job:permit("finalize")
        finalized_in[#finalized_in + 1] = frame
        return decoded
      end, { phase = "load" })
    end
  end
end

function game:done()
  for _, h in ipairs(handles) do
    if h:state() == "running" then return false end
  end
  return #handles > 0
end

function game:finish(frames, ms)
  orch:wait(decoders:destroy(), 2000)
  local done, total = load:progress("load")
  for _, h in ipairs(handles) do print(string.format("%-22s %s: %s", h.label, h:state(), select(2, h:result()))) end
  local per_frame, most = {}, 0
  for _, f in ipairs(finalized_in) do
    per_frame[f] = (per_frame[f] or 0) + 1
    if per_frame[f] > most then most = per_frame[f] end
  end
  print(string.format("loaded %d of %d in %d frames (%.0f ms); at most %d finalized in one frame",
    done, total, frames, ms, most))
  orch:close()
end

return game
