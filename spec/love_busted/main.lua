-- The thread specs run by busted itself inside LÖVE, where the pools'
-- workers are LÖVE threads: worker pools, ports and round barriers, the
-- priorities of requests, and the offer model (CHAOS_SEEDS and CHAOS_SEED
-- work as outside). Run by scripts/love_specs.sh as `xvfb-run -a love
-- spec/love_busted [spec files]`, from the top of the tree (busted reads
-- .busted and its helper there); ends with busted's own summary.
--
-- A LÖVE worker finds `module` through love.filesystem, which sees this
-- folder and the game's save directory: the specs' worker module is
-- written into the latter first, so it loads under its own file name.
local SPECS = {
  "spec/threads_spec.lua", "spec/ports_spec.lua", "spec/request_priority_spec.lua", "spec/offer_model_spec.lua",
}

function love.load(args)
  local top = love.filesystem.getSource():gsub("[/\\]spec[/\\]love_busted[/\\]?$", "")
  package.path = top .. "/?.lua;" .. package.path
  local f = assert(io.open(top .. "/spec/fixtures/fixture_worker.lua", "rb"))
  assert(love.filesystem.write("fixture_worker.lua", f:read("*a")))
  f:close()
  -- (named from the top, as busted names them outside: specs match their
  -- own file names in messages)
  local files = #args > 0 and args or SPECS
  -- (busted reads its command line from the global `arg`; on failures it
  -- raises nil, as it does on Lua 5.1 when it may not exit)
  arg = { "-o", "plainTerminal", (table.unpack or unpack)(files) }
  local ok, err = pcall(require "busted.runner", { standalone = false })
  if not ok and err ~= nil then print("busted raised: " .. tostring(err)) end
  io.stdout:flush()
  love.event.quit(ok and 0 or 1)
end
