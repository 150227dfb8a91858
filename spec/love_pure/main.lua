-- stagehand in a LÖVE game that has no native core, as on a phone or in a
-- browser: it runs on its pure-Lua core. Run by scripts/love_specs.sh
-- (make test) as `xvfb-run -a love spec/love_pure`, with stagehand's Lua
-- files on LUA_PATH and no core anywhere LÖVE looks: the loading scene
-- below runs on love.timer's clock through stagehand.love's helper, for
-- real frames. Prints each case, then "love-pure: N passed, N failed".
package.cpath = "" -- (no native core: none under the game's stagehand/native/, none on the path)
local stagehand = require "stagehand"

local cases, passed, failed = {}, 0, 0
local function it(name, fn) cases[#cases + 1] = { name = name, fn = fn } end
local function check(cond, what, ...)
  if not cond then error(string.format(what, ...), 2) end
end

local logged = {}
local orch = require("stagehand.love").new { step_ms = 4, stall_ms = 3000,
  log = function(line) logged[#logged + 1] = line end }
orch:pool("disk", 2)
orch:budget("upload", { ops = 3 })
local load = stagehand.tracker(orch)
local order, loads, frames, started = {}, {}, 0, love.timer.getTime()

it("runs on the pure-Lua core", function()
  check(stagehand.backend == "lua", "the backend is %s", tostring(stagehand.backend))
end)

-- A worker pool: on LÖVE's threads, with no native core; in a web
-- browser (love.js, where scripts/browser_check.sh runs this game), where
-- no thread runs, it is refused at the game's line, naming the browser.
local web = love.system.getOS() == "Web"
local sum_pool, sum_h, heard_h
if web then
  it("names why at the game's line when a worker pool is asked for in a browser", function()
    local ok, err = pcall(stagehand.pool, orch, { module = "decode" })
    check(not ok, "stagehand.pool made a pool")
    check(tostring(err):find("main.lua:%d+: stagehand.pool: worker threads need stagehand's native core"),
      "the error was: %s", tostring(err))
    check(tostring(err):find("LÖVE in a web browser (love.js) loads no native libraries", 1, true),
      "the reason was: %s", tostring(err))
    ok, err = pcall(stagehand.port)
    check(not ok and tostring(err):find("main.lua:%d+: stagehand.port: worker threads need stagehand's native core"),
      "stagehand.port: %s", tostring(err))
  end)
else
  sum_pool = stagehand.pool(orch, { module = "sum", size = 1,
    source = "local w = require 'stagehand.worker'\n"
      .. "return { add = function(t) w.progress(1, 2); t[3]:post(t[1] * t[2]);"
      .. " return t[1] + t[2], love.thread ~= nil end }" })
  local products = stagehand.port("products")
  sum_h = sum_pool:run("add", { 2, 3, products })
  heard_h = orch:run("hear", function() return products:receive() end) -- (a job waiting on the worker's post)
end
-- A scene: 24 textures "read" (a sleep on love.timer's clock) two at a
-- time and "uploaded" three a frame, the visible row asked for last and
-- loaded first, each file once however many entities share it, a broken
-- one failing alone and a lost one stalling.
local visible, by_name = {}, {}
for i = 1, 24 do
  local name = "tex" .. (i % 20) -- (20 files, four shared)
  local row = i > 18 and "visible" or "background"
  local h = orch:run(name, function(job)
    local release = job:slot("disk")
    if name == "tex7" then error("tex7.png: not a PNG") end
    if name == "tex9" then job:await(stagehand.future("a server that never answers")) end
    job:sleep(5)
    release()
    job:permit("upload")
    order[#order + 1] = name
    loads[name] = (loads[name] or 0) + 1
    return name
  end, { key = name, priority = row, phase = "load" })
  if row == "visible" then visible[#visible + 1] = h end
  by_name[name] = h
end

local function finish()
  it("loads the scene on real frames: visible first, each file once, the broken and the lost one named", function()
    check(load:fraction() == 1, "the bar ended at %s", tostring(load:fraction()))
    check(#order == 18, "%d textures uploaded, not 18", #order)
    for name, n in pairs(loads) do check(n == 1, "%s loaded %d times", name, n) end
    for i = 1, #visible do
      check(visible[i]:state() == "done", "visible %d ended %s", i, visible[i]:state())
    end
    local first = {}
    for i = 1, 6 do first[order[i]] = true end
    for i = 1, #visible do
      local _, name = visible[i]:result()
      check(first[name], "visible %s was not among the first six uploaded (%s)", name, table.concat(order, " "))
    end
    -- (the broken one is named by its Handle and counted by the loading
    -- screen, whose tracker heard it: no "nobody waited on it" line)
    local said = table.concat(logged, "\n")
    local st, err = by_name.tex7:result()
    check(st == "failed" and tostring(err):find("tex7.png: not a PNG", 1, true), "the broken file ended %s, %s",
      st, tostring(err))
    check(load:counts("load").failed == 1, "the screen counted %d failed", load:counts("load").failed)
    check(not said:find("nobody waited", 1, true), "a failure the screen counted was logged as unheard: %s", said)
    check(said:find("tex9 made no progress for 3 s", 1, true), "the stall was not logged: %s", said)
    check(frames > 10, "only %d frames", frames)
  end)
  if sum_h then
    it("runs a worker pool on LÖVE's threads with no native core, a port from it waking a job", function()
      local heard, product = heard_h:result()
      check(heard == "done" and product == 6, "the job on the port ended %s, %s", tostring(heard), tostring(product))
      local st, v, in_love = sum_h:result()
      check(st == "done" and v == 5 and in_love == true, "the request ended %s, %s, %s", tostring(st), tostring(v),
        tostring(in_love))
      check(sum_pool.ud.pure and sum_pool.love.threads[0], "the pool is not the pure-Lua core's, on a LÖVE thread")
    end)
  end
  for _, c in ipairs(cases) do
    local ok, err = pcall(c.fn)
    if ok then
      passed = passed + 1
      print("ok   " .. c.name)
    else
      failed = failed + 1
      print("FAIL " .. c.name .. "\n     " .. tostring(err))
    end
  end
  print(string.format("love-pure: %d passed, %d failed", passed, failed))
  love.event.quit(failed == 0 and 0 or 1)
end

function love.update()
  frames = frames + 1
  if orch.nrunning == 0 or love.timer.getTime() - started > 20 then finish() end
end
