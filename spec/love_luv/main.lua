-- The luv driver inside LÖVE, on either core (scripts/test.sh runs this
-- game with and without STAGEHAND_BACKEND=lua): luv's loop steps the
-- orchestrator, and a worker's reply wakes it, through the native core's
-- notifier descriptor or, on the pure-Lua core, whose notifier is a LÖVE
-- channel with none, through the driver's timer. Apart from spec/love:
-- Debian's lua-luv is a dependency of stagehand's checkout (make installs
-- it), not of a player's machine, where the kit's LÖVE specs run too.
-- Prints each case, then "love-luv: N passed, N failed".
local stagehand = require "stagehand"

local WAIT = 10000
local cases, passed, failed = {}, 0, 0
local function it(name, fn) cases[#cases + 1] = { name = name, fn = fn } end
local function same(want, got, what)
  if want ~= got then error(string.format("%s: expected %s, got %s", what, tostring(want), tostring(got)), 2) end
end

it("steps under luv's loop inside LÖVE, a reply waking it, with or without a descriptor to poll", function()
  local uv = require "luv" -- (Debian's lua-luv, which LÖVE's LuaJIT loads too)
  local lines = {}
  local o = stagehand.new { driver = "luv", log = function(line) lines[#lines + 1] = line end }
  local p = stagehand.pool(o, { module = "echo", size = 1, source = "return { echo = function(...) return ... end }" })
  local hs = {}
  for i = 1, 3 do hs[i] = p:run("echo", i) end
  local guard = uv.new_timer()
  guard:start(WAIT, 0, function() uv.stop() end)
  local function all_ended()
    for i = 1, #hs do if hs[i]:state() == "running" then return false end end
    return true
  end
  local check_t = uv.new_timer()
  check_t:start(1, 1, function() if all_ended() then uv.stop() end end)
  uv.run()
  for i = 1, 3 do
    local st, v = hs[i]:result()
    same("done", st, "request " .. i .. " (" .. table.concat(lines, " / ") .. ")")
    same(i, v, "request " .. i .. "'s reply")
  end
  local d = p:destroy()
  check_t:stop()
  check_t:start(1, 1, function() if d:state() ~= "running" then uv.stop() end end)
  uv.run()
  same("done", d:state(), "the destroy")
  guard:close()
  check_t:close()
  o:close()
  uv.run("nowait")
end)

function love.load()
  print(string.format("stagehand %s in LÖVE, %s backend", stagehand.VERSION, stagehand.backend))
  for _, case in ipairs(cases) do
    local ok, err = xpcall(case.fn, debug.traceback)
    if ok then
      passed = passed + 1
      print("ok    " .. case.name)
    else
      failed = failed + 1
      print("FAIL  " .. case.name .. "\n      " .. tostring(err):gsub("\n", "\n      "))
    end
  end
  print(string.format("love-luv: %d passed, %d failed", passed, failed))
  love.event.quit(failed > 0 and 1 or 0)
end
