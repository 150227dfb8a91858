-- The models of worker pools (spec/offer_model_spec.lua) inside LÖVE,
-- where the pools' workers are LÖVE threads: the offer a worker takes
-- from is a LÖVE channel there, and on the pure-Lua core
-- (STAGEHAND_BACKEND=lua, as on a phone) so is everything else. Run by
-- scripts/love_specs.sh as `xvfb-run -a love spec/love_models`; the spec
-- files run as busted would run them (describe, it, assert and
-- assert.no_leaks are given here), CHAOS_SEEDS and CHAOS_SEED included.
-- Prints each case, then "love-models: N passed, N failed", and quits
-- with 1 on a failure.
local MODELS = { "spec/offer_model_spec.lua" }

function love.load()
  local top = love.filesystem.getSource():gsub("[/\\]spec[/\\]love_models[/\\]?$", "")
  package.path = top .. "/?.lua;" .. package.path
  local stagehand = require "stagehand"
  local T = require "stagehand.testing"

  -- The specs' worker module, handed over as text: a LÖVE worker finds
  -- `module` in the game's archive, and this game's archive is this folder.
  local f = assert(io.open(top .. "/spec/fixtures/fixture_worker.lua", "rb"))
  local fixture = f:read("*a")
  f:close()
  local make = stagehand.pool
  local on_love = 0
  stagehand.pool = function(orch, opts)
    if opts.module == "fixture_worker" and opts.source == nil then opts.source = fixture end
    local p = make(orch, opts)
    if p.love then on_love = on_love + 1 end
    return p
  end

  local cases, passed, failed = {}, 0, 0
  local raw_assert = assert
  _G.describe = function(_, fn) fn() end
  _G.it = function(name, fn) cases[#cases + 1] = { name = name, fn = fn } end
  _G.assert = setmetatable({
    no_leaks = function(orch)
      local left = T.leaks(orch)
      if #left > 0 then error("left behind: " .. table.concat(left, "; "), 2) end
    end,
  }, { __call = function(_, ...) return raw_assert(...) end })

  for _, file in ipairs(MODELS) do
    local prefix = #cases
    dofile(top .. "/" .. file)
    for i = prefix + 1, #cases do cases[i].name = file:match("([^/]+)_spec%.lua$") .. ": " .. cases[i].name end
  end
  for _, c in ipairs(cases) do
    local ok, err = xpcall(c.fn, debug.traceback)
    if ok then
      passed = passed + 1
      print("ok   " .. c.name)
    else
      failed = failed + 1
      print("FAIL " .. c.name .. "\n" .. tostring(err))
    end
  end
  if on_love == 0 then
    failed = failed + 1
    print("FAIL no pool ran on LÖVE threads")
  end
  stagehand.pool, _G.assert = make, raw_assert
  print(("love-models: %d passed, %d failed (%s core)"):format(passed, failed, stagehand.backend))
  io.stdout:flush()
  love.event.quit(failed == 0 and 0 or 1)
end
