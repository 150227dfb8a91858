-- `make soak-threads`: worker pools and ports driven at random with real
-- threads, seed by seed (SOAK_SEEDS, from SOAK_FIRST). Each seed makes
-- pools of 1-3 workers and runs a few hundred operations on them: requests
-- of every payload kind (numbers, strings up to 9 KB, cyclic tables, ports,
-- nil, tables past a message's kept buffer), failures, progress, replies of
-- up to 50 KB, keyed requests, cancels, pause and resume, reprioritise,
-- priority functions that do any of those as a step reads them,
-- destroy mid-flight with and without respawn_on_abort, ports crossing both
-- ways, posted to and closed at random, jobs and workers receiving on them,
-- services (stagehand.spawn) fed and stopped, round barriers arrived at
-- and aborted, and mistakes: bad arguments to ports, round barriers,
-- pools and spawn on the game's side, and inside workers to the worker
-- API, a port and a round barrier. Then it closes every port, stops every
-- service, aborts every barrier and steps until everything ends. It fails
-- on any operation but a mistake that raises, on a mistake that raises an
-- error not meant for the game, on a Handle still running at the end, or
-- on an echo that failed or came back changed. A load tracker counts a third
-- of the requests in phases and a trace records everything: the bar may
-- never go back, and at the end each phase's task counts must be its
-- requests' ends, the bar full and the trace whole. Thread timing makes no two runs
-- of a seed alike: this is a soak, not a spec (the specs pin each
-- behaviour down).
-- Inside LÖVE (spec/soak/love, `make soak-love`) the workers are LÖVE
-- threads, and payloads and services' arguments also carry LÖVE objects
-- (ByteData, ImageData, alone or in tables, one object twice), which must
-- come back from an echo as the very objects sent.
--
--   [SOAK_DRIVER=luv] lua spec/soak/threads.lua SEED [OPERATIONS]
local stagehand = require "stagehand"
local here = debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./"
package.path = here .. "../fixtures/?.lua;" .. here .. "../?.lua;" .. package.path -- (the service's
-- module: fixture_worker; and seeded, for its check of a trace)
local seeded = require "seeded"

local seed = tonumber(arg[1]) or os.time()
local operations = tonumber(arg[2]) or 300
math.randomseed(seed)
local R = math.random

local SOURCE = [[
local W = require "stagehand.worker"
local M = {}
function M.echo(...) return ... end
function M.boom(x) error({ code = x }) end
function M.post(t) t.port:post(t.v) return t.port end
function M.recv(t) return t.port:receive_within(t.ms) end
function M.spin(ms)
  local t = os.clock()
  while os.clock() - t < ms / 1000 do
    if W.stopping() then return "stopped" end
  end
  return "spun"
end
function M.prog(n) for i = 1, n do W.progress(i, n) end return n end
function M.big(n) return ("y"):rep(n) end
function M.arrive(b) return b:arrive(1, 2) end
-- Worker-side mistakes: bad arguments to the worker API, a port and a
-- round barrier. Returns every error that was not meant for the game.
function M.mistakes(t)
  local x = t.seed
  local function r(n) x = (16807 * x) % 2147483647; return x % n + 1 end
  local deep = {}
  local d = deep
  for _ = 1, 300 do d.next = {}; d = d.next end
  local cyc = {}
  cyc.self = cyc
  local hostile = setmetatable({}, { __index = function() error("hostile __index") end,
    __tostring = function() error("hostile __tostring") end, __len = function() error("hostile __len") end })
  local V = { false, true, 0, -1, 1.5, 1e308, 1 / 0, -1 / 0, 0 / 0, 2 ^ 63, -0.0, 1, 2, "", "a\0b",
    ("s"):rep(70000), {}, { 1, 2 }, { 0 / 0, 1 / 0 }, { "a" }, cyc, deep, hostile, os.clock, function() end,
    coroutine.create(function() end) }
  local function v() return V[r(#V + 1)] end -- (nil too)
  local function short(ms) return (type(ms) ~= "number" or ms ~= ms or ms < 0 or ms <= 5) and ms or 1 end
  local port, b, said = t.port, t.rounds, {}
  for _ = 1, t.n do
    local m = r(12)
    local ok, err = pcall(function()
      if m == 1 then W.progress(v(), v())
      elseif m == 2 then W.sleep(short(v()))
      elseif m == 3 then port:post(v())
      elseif m == 4 then port:receive_within(short(v()))
      elseif m == 5 then port:drain(v())
      elseif m == 6 then port:drain_for(r(2) == 1 and v() or function() end, short(v()))
      elseif m == 7 then port:try_receive(); port:count(); port:closed()
      elseif m == 8 then
        local f = ({ "sum", "min", "max" })[r(3)]
        -- (a count of 1, or a bad one: a wait nobody else joins would hold the worker)
        local count = r(2) == 1 and 1 or v()
        b[f](b, v(), count, v(), v(), r(2) == 1 and {} or v())
      elseif m == 9 then b:arrive(v(), r(2) == 1 and 1 or v())
      elseif m == 10 then local q = W.port(); q:post(v()); q:close(); q:post(1)
      elseif m == 11 then -- (a dot where the colon belongs)
        local f = ({ "post", "try_receive", "receive_within", "drain", "count", "close" })[r(6)]
        local g = ({ "arrive", "sum", "abort", "aborted" })[r(4)]
        if r(2) == 1 then port[f](v(), v()) else b[g](v(), v()) end
      else local _ = tostring(port) .. tostring(b) end
    end)
    if not ok then
      local e = tostring(err)
      if e:find("attempt to", 1, true) or e:find("stack overflow", 1, true) or e:find("stagehand[/\\][%w_/\\]+%.lua:%d+")
        or e:find("bad argument #", 1, true) then
        said[#said + 1] = e
      end
    end
    if W.stopping() then break end
  end
  return said
end
return M
]]

local function fail(why) error("seed " .. seed .. ": " .. why, 0) end

-- (SOAK_DRIVER=luv: the game runs luv's loop, and the driver's timer and
-- its poll on the notifier must do every step; else the manual driver)
local DRIVER = os.getenv("SOAK_DRIVER") or "manual"
local uv = DRIVER == "luv" and require "luv"
local orch = stagehand.new { driver = DRIVER, stall_ms = 2000, log = function() end }

-- A loading screen over the requests, and a trace of it all. A request's
-- phase is its job's when the call started that job (the watcher heard
-- its start at the call's depth: a request made by game code inside it,
-- or a pool destroyed there, starts others); one that joins a keyed run
-- counts nothing.
local load, trace = stagehand.tracker(orch), orch:trace()
local phase_of, ended_as, started_at, depth = {}, {}, {}, 0
orch:watch(function(rec)
  if rec.ended_at then ended_as[rec.id] = rec.state else started_at[rec.id] = depth end
end)
local function bar()
  local _, back = seeded.bar(load)
  if back then error(("seed %d: %s"):format(seed, back), 0) end
end

local function pump()
  if uv then uv.run("nowait") else orch:step() end
  bar()
end
local pools, handles, echoes, ports, services, barriers = {}, {}, {}, {}, {}, {}
-- (appends v once the call that made it returned: a priority function read
-- inside that call may append a request of its own, which
-- `handles[#handles + 1] = call()` would write over)
local function add(list, v) list[#list + 1] = v end

local function new_pool()
  local p = stagehand.pool(orch, { module = "soak" .. #pools, source = SOURCE, size = R(1, 3),
    respawn_on_abort = R() < 0.5, close_timeout_ms = 50 })
  pools[#pools + 1] = p
  return p
end
new_pool()

local function live_pool()
  for _ = 1, 4 do
    local p = pools[R(#pools)]
    if not p.destroyed then return p end
  end
  return new_pool()
end

-- LÖVE's objects, when it runs inside LÖVE: they cross as themselves.
local love = rawget(_G, "love")
local LOVE = type(love) == "table" and love.data ~= nil and love.image ~= nil
local carries = setmetatable({}, { __mode = "k" }) -- the tables love_objects made
local function love_objects()
  local k = R(3)
  if k == 1 then return love.data.newByteData(("b"):rep(R(1, 4000))) end
  if k == 2 then return love.image.newImageData(R(1, 64), R(1, 64)) end
  local shared = love.data.newByteData("shared")
  local t = { a = shared, list = { love.image.newImageData(2, 2), shared }, n = R(10) }
  carries[t] = true
  return t
end

-- Whether `back` is `sent` with its LÖVE objects the very ones sent.
local function same_objects(sent, back)
  if type(sent) ~= "table" then return rawequal(sent, back) end
  return type(back) == "table" and rawequal(back.a, sent.a) and type(back.list) == "table"
    and rawequal(back.list[1], sent.list[1]) and rawequal(back.list[2], sent.a) and back.n == sent.n
end

-- Whether `back` is a copy of a table that holds itself and one table twice.
local tangles = setmetatable({}, { __mode = "k" })
local function same_tangle(sent, back)
  return type(back) == "table" and not rawequal(back, sent) and rawequal(back.self, back)
    and rawequal(back.again, back.a) and back.a[2] == 2 and back.s == sent.s
end

local function payload()
  if LOVE and R() < 0.2 then return love_objects() end
  local k = R(6)
  if k == 1 then return R(1000) end
  if k == 2 then return ("x"):rep(R(0, 9000)) end
  if k == 3 then
    local t = { a = { 1, 2 }, s = "a\0b" }
    t.self, t.again = t, t.a
    tangles[t] = true
    return t
  end
  if k == 4 then return { port = stagehand.port(), n = R(10) } end
  if k == 5 then return nil end
  return { big = ("z"):rep(R(5000, 20000)), list = { 1, 2, 3 } }
end

local FNS = { "echo", "echo", "echo", "boom", "prog", "big", "spin" }

-- Priority functions are game code, and a game's may do anything as a step
-- reads them: a third of these, when read, pause, resume, re-rank or
-- destroy a pool, cancel a Handle or make a request (not once the soak
-- winds down, whose steps must drain everything). What they raise is
-- checked at the end, as a mistake's is.
local meddle -- (below, after request)
local winding_down, meddled, meddle_errors = false, 0, {}
local function meddler(rank)
  return function()
    if not winding_down and R() < 0.3 then
      meddled = meddled + 1
      local ok, err = pcall(meddle[R(#meddle)])
      if not ok then meddle_errors[#meddle_errors + 1] = tostring(err) end
    end
    return rank
  end
end

local function request()
  local p, v, fn = live_pool(), payload(), FNS[R(#FNS)]
  local x = v
  if fn == "prog" then x = R(5) elseif fn == "big" then x = R(1, 50000) elseif fn == "spin" then x = R(0, 20) end
  local opts
  if R() < 0.3 then
    opts = { key = "k" .. R(5), priority = R(0, 3) }
  elseif R() < 0.3 then
    opts = { priority = R(0, 9) }
  elseif R() < 0.3 then
    opts = { priority = meddler(R(0, 9)), key = R() < 0.5 and "k" .. R(5) or nil }
  end
  if R() < 0.35 then
    opts = opts or {}
    opts.phase = R() < 0.5 and "fetch" or "decode"
  end
  depth = depth + 1
  local ok, h = pcall(p.run, p, fn, x, opts)
  depth = depth - 1
  if not ok then error(h, 0) end
  if started_at[h.id] == depth + 1 and phase_of[h.id] == nil then phase_of[h.id] = opts and opts.phase or false end
  handles[#handles + 1] = h
  -- (a keyed request may join a run of the key made with another payload)
  if fn == "echo" and type(v) == "string" and not (opts and opts.key) then
    echoes[#echoes + 1] = { handles[#handles], v }
  elseif fn == "echo" and (type(v) == "userdata" or carries[v]) and not (opts and opts.key) then
    echoes[#echoes + 1] = { handles[#handles], v, same_objects }
  elseif fn == "echo" and tangles[v] and not (opts and opts.key) then
    echoes[#echoes + 1] = { handles[#handles], v, same_tangle }
  end
end

-- (a number moves; a function stays)
local function rerank(_, priority)
  return type(priority) == "number" and priority + R(-2, 2) or priority
end
meddle = {
  function() live_pool():pause() end,
  function() live_pool():resume() end,
  function() live_pool():reprioritise(rerank) end,
  function()
    local h = handles[R(math.max(1, #handles))]
    if h then h:cancel("a priority function cancels it") end
  end,
  request,
  function()
    if R() < 0.2 then add(handles, live_pool():destroy()) end
  end,
}

-- Main-side mistakes: bad arguments to ports, round barriers, pools,
-- spawn. Each may raise, but only an error meant for the game.
local function internal(err)
  local e = tostring(err)
  return e:find("attempt to", 1, true) or e:find("stagehand[/\\][%w_/\\]+%.lua:%d+") or e:find("core refused", 1, true)
end
local mistaken = {}
local function bad()
  local cyc = {}
  cyc.self = cyc
  local V = { false, true, 0, -1, 1.5, 1 / 0, 0 / 0, 2 ^ 63, "", "a\0b", {}, { 1, 2 }, cyc, os.clock,
    setmetatable({}, { __index = function() error("hostile __index") end,
      __tostring = function() error("hostile __tostring") end }),
    coroutine.create(function() end), { priority = 0 / 0 }, { key = {} }, { stall_ms = -1 }, { module = 5 } }
  return V[R(#V + 1)]
end
local function small(ms) return (type(ms) ~= "number" or ms ~= ms or ms < 0 or ms <= 5) and ms or 1 end
local MISTAKES = {
  function() (ports[R(math.max(1, #ports))] or stagehand.port()):post(bad()) end,
  function() stagehand.port():receive_within(small(bad())) end,
  function() stagehand.port():drain(bad()) end,
  function() stagehand.port():drain_for(bad(), small(bad())) end,
  function() stagehand.port(bad()) end,
  function() stagehand.rounds(bad(), bad()) end,
  function() add(handles, live_pool():run(bad(), bad(), bad())) end,
  function() live_pool():reprioritise(bad()) end,
  function() stagehand.spawn(orch, bad(), bad()) end,
  function() stagehand.pool(orch, bad()) end,
  function()
    local b = stagehand.rounds(2, 2)
    barriers[#barriers + 1] = b
    handles[#handles + 1] = orch:run("a round's mistakes", function()
      local f = ({ "sum", "min", "max", "arrive" })[R(4)]
      return b[f](b, bad(), R() < 0.5 and 1 or bad(), bad(), bad(), bad())
    end)
  end,
}
local function worker_mistakes() -- and the worker's own (a third of them)
  local port = stagehand.port()
  ports[#ports + 1] = port
  local b = stagehand.rounds(2, 2)
  barriers[#barriers + 1] = b
  local h = live_pool():run("mistakes", { seed = R(1, 2147483646), n = R(10, 60), port = port, rounds = b })
  handles[#handles + 1] = h
  mistaken[#mistaken + 1] = h
end
for _ = 1, #MISTAKES / 2 do MISTAKES[#MISTAKES + 1] = worker_mistakes end
local mistakes, refused = 0, 0
local function mistake()
  mistakes = mistakes + 1
  local ok, err = pcall(MISTAKES[R(#MISTAKES)])
  if not ok then refused = refused + 1 end
  if not ok and internal(err) then fail("a mistake raised stagehand's own error: " .. tostring(err)) end
end

local ops = {
  request, request, request, request, request, mistake,
  function()
    local h = handles[R(math.max(1, #handles))]
    if h then h:cancel("the soak cancels it") end
  end,
  function() live_pool():pause() end,
  function() live_pool():resume() end,
  function() live_pool():reprioritise(rerank) end,
  function()
    if R() < 0.3 then add(handles, live_pool():destroy()) end
  end,
  function() -- a worker posts to a port a job receives on
    local port = stagehand.port()
    ports[#ports + 1] = port
    add(handles, live_pool():run("post", { port = port, v = { s = ("q"):rep(R(0, 300)) } }))
    add(handles, orch:run("listener", function() return port:receive() end))
  end,
  function()
    local port = ports[R(math.max(1, #ports))]
    if port then
      if R() < 0.5 then port:post({ n = R(100) }) else port:close() end
    end
  end,
  function() -- a worker receives on a port, for at most a few ms
    local port = stagehand.port()
    add(handles, live_pool():run("recv", { port = port, ms = R(0, 10) }))
    if R() < 0.5 then port:post(R(100)) end
  end,
  pump,
  function() -- a service over two ports, fed a value
    local inbox, outbox = stagehand.port(), stagehand.port()
    local w = stagehand.spawn(orch, "fixture_worker.service", inbox, outbox, LOVE and love_objects() or nil)
    services[#services + 1] = w
    ports[#ports + 1] = inbox
    handles[#handles + 1] = w.done
    inbox:post(R(100))
  end,
  function()
    local w = services[R(math.max(1, #services))]
    if w then w:stop() end
  end,
  function() -- two requests meet at a round barrier (or wait until it is aborted)
    local b = stagehand.rounds(2)
    barriers[#barriers + 1] = b
    for _ = 1, 2 do
      add(handles, live_pool():run("arrive", b))
    end
  end,
  function()
    local b = barriers[R(math.max(1, #barriers))]
    if b then b:abort() end
  end,
}

for i = 1, operations do
  -- (every operation is one a game may make at any moment: none raises)
  local ok, err = pcall(ops[R(#ops)])
  if not ok then fail("operation " .. i .. " raised: " .. tostring(err)) end
  if R() < 0.3 then pump() end
end

winding_down = true
for _, p in ipairs(pools) do
  if not p.destroyed then p:resume() end
end
for _, port in ipairs(ports) do port:close() end
for _, w in ipairs(services) do w:stop() end
for _, b in ipairs(barriers) do b:abort() end
local t0 = os.clock()
if uv then
  local guard, done = uv.new_timer(), uv.new_timer()
  guard:start(60000, 0, function() uv.stop() end)
  done:start(5, 5, function() if orch.nrunning == 0 then uv.stop() end end)
  uv.run()
  guard:close()
  done:close()
else
  while orch.nrunning > 0 and os.clock() - t0 < 60 do
    orch:step()
    orch:wait(stagehand.future(), 5)
  end
end
for i, h in ipairs(handles) do
  if h:state() == "running" then fail("Handle " .. i .. " (" .. h.label .. ") still running") end
end
for _, e in ipairs(echoes) do
  local st, v = e[1]:result()
  if st == "done" and not (e[3] or rawequal)(e[2], v) then fail("an echo came back changed") end
  -- (an echo ends done, or cancelled by a cancel or a destroy: never failed)
  if st == "failed" then fail("an echo failed: " .. tostring(v and v.message or v)) end
end
local heard = 0 -- (worker-side mistake requests that ran to their end)
for _, h in ipairs(mistaken) do
  local st, said = h:result()
  if st == "done" then heard = heard + 1 end
  if st == "failed" then fail("a worker's mistakes failed its request: " .. tostring(said and said.message or said)) end
  if st == "done" and said[1] then fail("a worker's mistake raised stagehand's own error: " .. said[1]) end
end
for _, e in ipairs(meddle_errors) do
  if internal(e) then fail("a priority function's call raised stagehand's own error: " .. e) end
  fail("a priority function's call raised: " .. e)
end
-- The load: each phase's tasks by state are its requests' ends; the bar
-- is full, the load idle, and the trace whole.
local want = {}
for id, phase in pairs(phase_of) do
  if phase then
    want[phase] = want[phase] or { running = 0, done = 0, failed = 0, cancelled = 0, stalled = 0 }
    local st = ended_as[id] or "running"
    want[phase][st] = want[phase][st] + 1
  end
end
for phase, w in pairs(want) do
  local c = load:counts(phase)
  for k, n in pairs(w) do
    if c[k] ~= n then fail(("phase %s counts %d %s, its requests %d"):format(phase, c[k], k, n)) end
  end
end
bar()
if next(want) and load:fraction() ~= 1 then fail("the bar ends at " .. load:fraction()) end
if load:idle():state() ~= "done" then fail("load:idle() is " .. load:idle():state()) end
seeded.traced(trace, "seed " .. seed)
for _, p in ipairs(pools) do orch:wait(p:destroy(), 5000) end
orch:close()
print(("seed %d: %d Handles ended, %d pools, %d services, %d round barriers, %d mistakes (%d refused),"
  .. " %d of %d workers' mistake runs done, %d calls from priority functions"):format(seed, #handles, #pools,
  #services, #barriers, mistakes, refused, heard, #mistaken, meddled))
