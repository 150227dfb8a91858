-- stagehand's specs inside LÖVE: worker pools on love.thread. Run by
-- scripts/love_specs.sh (make test) as `xvfb-run -a love spec/love`; prints
-- each case, then "love: N passed, N failed", and quits with 1 on a failure.
--
-- Time here is real (love.timer): a worker's work takes real time, and the
-- waits below are bounded (orch:wait, receive_within), never sleeps.
-- (STAGEHAND_JIT=off: LuaJIT's compiler off before stagehand loads, as
-- LÖVE runs it on ARM: phones, Macs on Apple Silicon; stagehand then
-- reaches its core through the C module, which the first case checks)
local jit_off = os.getenv("STAGEHAND_JIT") == "off"
if jit_off then jit.off() end
local stagehand = require "stagehand"

local WAIT = 10000
local cases, passed, failed = {}, 0, 0
local function it(name, fn) cases[#cases + 1] = { name = name, fn = fn } end
-- (STAGEHAND_BACKEND=lua: the same cases on the pure-Lua core, whose
-- pools run on LÖVE's threads without a native core, as on a phone; the
-- few that differ say how)
local pure = stagehand.backend == "lua"
local function native_only(name, fn) if not pure then it(name, fn) end end
local function pure_only(name, fn) if pure then it(name, fn) end end
-- What the LÖVE channel named `name` says next, within WAIT.
local function said_on(name) return love.thread.getChannel(name):demand(WAIT / 1000) end

local function check(cond, what, ...)
  if not cond then error(string.format(what, ...), 2) end
end
local function same(want, got, what)
  if want ~= got then error(string.format("%s: expected %s, got %s", what, tostring(want), tostring(got)), 2) end
end

local logged = {}
local orch = stagehand.new {
  driver = "manual",
  clock = function() return love.timer.getTime() * 1000 end,
  check_ms = 20,
  log = function(line) logged[#logged + 1] = line end,
}
local pools = {}
local function pool(opts)
  opts.module = opts.module or "love_worker"
  local p = stagehand.pool(orch, opts)
  pools[#pools + 1] = p
  return p
end

if jit_off then
  it("reaches the native core through the C module with LuaJIT's compiler off", function()
    same(false, (jit.status()), "the compiler's state")
    same("c", stagehand.backend, "the backend")
  end)
end

it("runs workers on LÖVE threads by default inside LÖVE", function()
  local p = pool { size = 1 }
  check(p.love ~= nil, "the pool has no LÖVE threads")
  local t = p.love.threads[0]
  check(t and t:typeOf("Thread"), "worker 0 is not a LÖVE Thread")
end)

-- Regression: with a fake clock, a wait on other threads was cut short
-- every 20 ms while a LÖVE thread was still starting, and each time the
-- fake clock moved on by the whole wait: a spec's first orch:wait on a new
-- pool timed out at once.
it("lets no fake time pass (stagehand.testing) while a new pool's LÖVE threads start", function()
  local T = require "stagehand.testing"
  local o = T.new { log = function() end }
  local p = stagehand.pool(o, { module = "love_worker", size = 2 })
  local a, b = p:run("nap", 100), p:run("nap", 50) -- (each longer than a look at a starting thread)
  same("done", (o:wait(a, 5000)), "the first request, with fake time")
  same("done", (o:wait(b, 5000)), "the second")
  same("done", (o:wait(p:destroy(), WAIT)), "the destroy")
  o:close()
end)

it("requires love.image in a worker and decodes a PNG read from the game's archive", function()
  local p = pool { size = 2 }
  local state, data, w, h = orch:wait(p:run("decode", "fixture.png"), WAIT)
  same("done", state, "the decode")
  check(type(data) == "userdata" and data:typeOf("ImageData"), "the reply is %s, not an ImageData", tostring(data))
  same(32, w, "the width")
  same(32, h, "the height")
  same(32, data:getWidth(), "the ImageData's width on this side")
end)

it("hands an ImageData to a worker and back as the same object, never copied", function()
  local p = pool { size = 1 }
  local img = love.image.newImageData(4, 4)
  local state, back, pointer, note = orch:wait(p:run("tint", { image = img, note = "kept" }), WAIT)
  same("done", state, "the request")
  check(rawequal(back, img), "the ImageData came back as another object")
  same(tostring(img:getPointer()), pointer, "the pointer the worker saw")
  same("kept", note, "the plain data beside it")
  local r, g = img:getPixel(0, 0)
  check(r == 1 and g == 0, "the worker's change is not in the game's ImageData (a copy crossed)")
end)

it("hands LÖVE objects back from a worker that loaded none of their modules", function()
  -- (in its thread an ImageData has LÖVE's __gc and no methods: it is
  -- still LÖVE's, and crosses as itself)
  local p = pool { size = 1, module = "love_plain" }
  local img, sound = love.image.newImageData(2, 2), love.sound.newSoundData(8)
  local state, back_img, back_sound, t = orch:wait(p:run("pass", { image = img, sound = sound, n = 3 }), WAIT)
  same("done", state, "the request (" .. tostring(back_img) .. ")")
  check(rawequal(back_img, img), "the ImageData came back as another object")
  check(rawequal(back_sound, sound), "the SoundData came back as another object")
  check(rawequal(t.image, img) and t.n == 3, "the table holding them came back changed")
  local w = stagehand.spawn(orch, "love_plain.pass", { image = img })
  local wstate, wimg = orch:wait(w.done, WAIT)
  same("done", wstate, "the service (" .. tostring(wimg) .. ")")
  check(rawequal(wimg, img), "the service's ImageData came back as another object")
end)

it("lets go of the LÖVE objects a request moved once it ends", function()
  -- (else each stays alive, pixels and all, until the worker's own
  -- collector comes round, which its small heap seldom makes it do: a
  -- load of 400 4 MB images held 1.7 GB)
  local p = pool { size = 1 }
  local _, before = orch:wait(p:run("objects_held"), WAIT) -- (its own: the pool's channels)
  for _ = 1, 5 do
    local state = orch:wait(p:run("tint", { image = love.image.newImageData(4, 4) }), WAIT)
    same("done", state, "a request handing an ImageData over")
    same("done", (orch:wait(p:run("decode", "fixture.png"), WAIT)), "a request decoding one")
  end
  local state, held = orch:wait(p:run("objects_held"), WAIT)
  same("done", state, "the count")
  same(before, held, "LÖVE objects the worker's state holds after ten requests moved some")
end)

it("carries FileData and ByteData too", function()
  local p = pool { size = 1 }
  local state, size, text = orch:wait(p:run("bytes", love.filesystem.newFileData("stagehand", "a.txt")), WAIT)
  same("done", state, "the FileData request")
  same(9, size, "its size")
  same("stagehand", text, "its bytes")
  state, size = orch:wait(p:run("bytes", love.data.newByteData("abc")), WAIT)
  same("done", state, "the ByteData request")
  same(3, size, "its size")
end)

it("hands LÖVE objects to a long-lived worker's arguments, and back", function()
  local img = love.image.newImageData(2, 2)
  local w = stagehand.spawn(orch, "love_worker.echo", img, "beside it")
  local state, back, note = orch:wait(w.done, WAIT)
  same("done", state, "the service")
  check(rawequal(back, img), "the ImageData came back as another object")
  same("beside it", note, "the plain value beside it")
end)

it("fails only the request whose worker raised, and the pool goes on", function()
  local p = pool { size = 1 }
  local state, err = orch:wait(p:run("boom"), WAIT)
  same("failed", state, "the raising request")
  check(tostring(err.message):find("the decoder raised", 1, true), "the message is %s", tostring(err.message))
  local tb = tostring(err.traceback)
  check(tb:find("love_worker", 1, true), "no traceback through the module")
  -- (it ends at the request's own frame, as on stagehand's threads: the
  -- LÖVE thread's code that started the worker is none of the game's)
  check(not tb:find("'serve'", 1, true) and not tb:find("main chunk", 1, true) and not tb:find("'pcall'", 1, true),
    "the traceback runs into the worker's start-up:\n%s", tb)
  check(tb:match("love_worker%.lua:%d+: in [^\n]*\n[^\n]*$"), "the module's frame is not the last but one:\n%s", tb)
  same("done", (orch:wait(p:run("echo", 1), WAIT)), "the next request")
end)

it("ends done with no values a request whose function returns none", function()
  local p = pool { size = 1 }
  local h = p:run("nothing")
  same(1, select("#", orch:wait(h, WAIT)), "the values orch:wait returns")
  same("done", (h:result()), "the request")
  same(1, select("#", h:result()), "the values h:result() returns")
end)

it("stalls a request that makes no progress, and its worker sees stopping()", function()
  local p = pool { size = 1 }
  love.thread.getChannel("stagehand-spec-stall"):clear()
  local h = p:run("until_stopped_on", "stagehand-spec-stall", { stall_ms = 100 })
  local state = orch:wait(h, WAIT)
  same("stalled", state, "the silent request")
  same("running", said_on("stagehand-spec-stall"), "the worker's first word")
  same("stopped", said_on("stagehand-spec-stall"), "the worker's last word")
end)

it("replaces an aborted worker at once with respawn_on_abort", function()
  local p = pool { size = 1, respawn_on_abort = true }
  love.thread.getChannel("stagehand-spec-abort"):clear()
  local h = p:run("until_stopped_on", "stagehand-spec-abort")
  orch:step()
  same("running", said_on("stagehand-spec-abort"), "the worker's first word")
  h:cancel("the player left")
  same("cancelled", h:state(), "the aborted request")
  same("stopped", said_on("stagehand-spec-abort"), "the aborted worker's last word")
  local state, v = orch:wait(p:run("echo", 7), WAIT)
  same("done", state, "a request after the abort")
  same(7, v, "its reply")
  check(p.love.threads[1] ~= nil or p.live >= 1, "no worker replaced the aborted one")
end)

it("passes values between LÖVE workers through ports (stagehand.spawn on LÖVE threads)", function()
  local a_in, mid, b_out = stagehand.port(), stagehand.port(), stagehand.port()
  local a = stagehand.spawn(orch, "love_worker.doubler", a_in, mid)
  local b = stagehand.spawn(orch, "love_worker.doubler", mid, b_out)
  check(a.pool.love ~= nil and b.pool.love ~= nil, "the services do not run on LÖVE threads")
  orch:step()
  a_in:post(5)
  a_in:post(6)
  same(20, b_out:receive_within(WAIT), "5 through both workers")
  same(24, b_out:receive_within(WAIT), "6 through both workers")
  a_in:close()
  local state, n = orch:wait(a.done, WAIT)
  same("done", state, "the first service")
  same(2, n, "what it answered")
  mid:close()
  same("done", (orch:wait(b.done, WAIT)), "the second service")
end)

it("meets in a round barrier between LÖVE workers", function()
  local p = pool { size = 2 }
  local b = stagehand.rounds(2, 1)
  local h1 = p:run("meet", { rounds = b, index = 1 })
  local h2 = p:run("meet", { rounds = b, index = 2 })
  local s1, ok1, sum1 = orch:wait(h1, WAIT)
  local s2, ok2, sum2 = orch:wait(h2, WAIT)
  same("done", s1, "participant 1")
  same("done", s2, "participant 2")
  check(ok1 and ok2, "a wait returned false")
  same(30, sum1, "participant 1's sum")
  same(30, sum2, "participant 2's sum")
end)

it("carries the LÖVE objects of a table a worker raises into the failure's cause", function()
  local p = pool { size = 1 }
  local img = love.image.newImageData(2, 2)
  local state, err = orch:wait(p:run("raise_objects", img), WAIT)
  same("failed", state, "the request")
  check(type(err.cause) == "table", "the cause is %s (%s)", tostring(err.cause), tostring(err.message))
  same(7, err.cause.code, "the plain value in the cause")
  check(rawequal(err.cause.given, img), "the ImageData came back as another object")
  local made = err.cause.made
  check(type(made) == "userdata" and made:typeOf("ImageData"), "the worker's ImageData is %s", tostring(made))
  same("done", (orch:wait(p:run("echo", 1), WAIT)), "the next request")
  local left = 0
  for _, channel in ipairs(p.love.outbox) do left = left + channel:getCount() end
  same(0, left, "objects left in the outbox")
end)

it("refuses what love.thread cannot carry, naming where it is, with nothing queued", function()
  local p = pool { size = 1 }
  local ok, err = pcall(p.run, p, "echo", { mesh = { on_done = print } })
  check(not ok, "a function crossed")
  local only = "only plain data, ports, round barriers and LÖVE objects cross threads"
  check(err:find("main.lua:%d+: bad argument 'payload' to pool:run: payload.mesh.on_done is a function; ")
    and err:find(only, 1, true), "the message was: %s", err)
  ok, err = pcall(p.run, p, "echo", { co = coroutine.create(print) })
  check(not ok and err:find("payload.co is a thread", 1, true), "a coroutine: %s", tostring(err))
  ok, err = pcall(p.run, p, "echo", { io.stdout })
  check(not ok and err:find("payload[1] is a userdata", 1, true), "a file: %s", tostring(err))
  same(0, p:pending(), "requests queued")
end)

-- A table that holds itself, and one table at two places and as a key.
local function tangled()
  local shared = { 1, 2 }
  local t = { a = shared, b = shared, name = "tangled" }
  t.self, t[shared] = t, "key"
  return t
end
local function check_tangled(t, what)
  check(type(t) == "table", "%s is %s, not a table", what, tostring(t))
  check(rawequal(t.self, t), "%s: the table that held itself came as two", what)
  check(rawequal(t.a, t.b), "%s: the shared table came as two copies", what)
  same("key", t[t.a], what .. ": the shared table as a key")
  same(2, t.a[2], what .. ": the shared table's contents")
  same("tangled", t.name, what .. ": the plain value")
end

it("copies tables that hold themselves and tables shared twice, each way, as the native core does", function()
  local p = pool { size = 1 }
  local sent = tangled()
  local state, whole = orch:wait(p:run("whole", sent), WAIT)
  same("done", state, "the request")
  same(true, whole, "the payload as the worker saw it")
  local one, two
  state, one, two = orch:wait(p:run("twice", sent), WAIT)
  same("done", state, "the echo")
  check(not rawequal(one, sent), "the reply is the game's own table, not a copy")
  check_tangled(one, "the reply")
  check(rawequal(one, two), "one table in two replies came back as two")
  sent.name = "at the request"
  local h = p:run("echo", sent)
  sent.name = "tangled" -- (the request was copied when it was made: the worker sees the name it had then)
  state, one = orch:wait(h, WAIT)
  same("done", state, "the copied request")
  same("at the request", one.name, "the name the worker saw")
  local err
  state, err = orch:wait(p:run("raise_value", tangled()), WAIT)
  same("failed", state, "the raising request")
  check_tangled(err.cause, "the raised table")
  local w = stagehand.spawn(orch, "love_worker.echo", sent, sent.a)
  local back, a
  state, back, a = orch:wait(w.done, WAIT)
  same("done", state, "the service")
  check_tangled(back, "the service's argument")
  check(rawequal(back.a, a), "a table shared between two arguments came back as two")
  local port = stagehand.port()
  same(true, port:post(sent), "the post")
  sent.name = "changed after the post"
  local ok, got = port:try_receive()
  same(true, ok, "a value in the port")
  check_tangled(got, "the port's value")
  same("done", (orch:wait(p:run("post_to", { port = port, value = tangled() }), WAIT)), "the worker's post")
  check_tangled(port:receive_within(WAIT), "the value a worker posted")
end)

it("copies tables nested 201 deep, and refuses one deeper naming it, as the native core does", function()
  local function nest(depth)
    local t = {}
    local d = t
    for _ = 2, depth do d.n = {}; d = d.n end
    return t
  end
  local p = pool { size = 1 }
  local state, back = orch:wait(p:run("echo", nest(201)), WAIT)
  same("done", state, "201 deep")
  local depth = 0
  while back do depth, back = depth + 1, back.n end
  same(201, depth, "the depth of the reply")
  local ok, err = pcall(p.run, p, "echo", nest(202))
  check(not ok and err:find("bad argument 'payload' to pool:run: payload" .. (".n"):rep(201)
    .. " is nested deeper than 200 tables; it cannot cross threads", 1, true), "202 deep: %s", tostring(err))
  local port = stagehand.port()
  same(true, port:post(nest(201)), "a post 201 deep")
  ok, err = pcall(port.post, port, nest(202))
  check(not ok and err:find("is nested deeper than 200 tables", 1, true), "a post 202 deep: %s", tostring(err))
  same(1, port:count(), "values in the port")
  same(0, p:pending(), "requests queued")
end)

it("refuses a LÖVE object in a port, saying where one crosses", function()
  local img, port = love.image.newImageData(2, 2), stagehand.port()
  local ok, err = pcall(function()
    local posted = port:post({ image = img }) -- (not a tail call: the message names this line)
    return posted
  end)
  check(not ok, "an ImageData went into a port")
  check(err:find("main.lua:%d+: bad argument 'v' to port:post: v.image is a LÖVE ImageData; LÖVE objects cross only"
    .. " to and from workers on LÖVE threads"), "the message was: %s", err)
  same(0, port:count(), "values in the port")
  same(true, port:post(1), "the port, after")
end)

native_only("refuses a LÖVE object going to a native thread, saying where one crosses", function()
  local p = pool { size = 1, threads = "native", module = "love_worker" }
  local ok, err = pcall(p.run, p, "echo", love.data.newByteData("abc"))
  check(not ok, "a ByteData went to a native thread")
  check(err:find("bad argument 'payload' to pool:run: payload is a LÖVE ByteData;", 1, true),
    "the message was: %s", err)
  same(0, p:pending(), "requests queued")
end)

it("fails every request of a module the archive does not hold, naming it and where require looked", function()
  local p = pool { module = "no_such_worker", size = 1 }
  local state, err = orch:wait(p:run("decode", "fixture.png"), WAIT)
  same("failed", state, "the request")
  local msg = tostring(err.message)
  -- (one line, with no position inside stagehand's thread, and the places
  -- LÖVE's require looked: the game's own files first)
  check(msg:find("module 'no_such_worker' failed to load: module 'no_such_worker' not found: "
    .. "no field package.preload['no_such_worker']; no 'no_such_worker' in LOVE game directories.; ", 1, true),
    "the message was: %s", msg)
  check(not msg:find("\n", 1, true), "the message has more than one line: %s", msg)
end)

native_only("runs native threads inside LÖVE when asked, where love.image cannot load", function()
  local p = pool { size = 1, threads = "native", module = "love_worker" }
  check(not p.love, "a native pool made LÖVE threads")
  local state = orch:wait(p:run("echo", 1), WAIT)
  same("failed", state, "a request to a module a native state cannot find")
end)

it("names a LÖVE thread that fails before it serves its worker, fails queued requests once no worker is left,"
  .. " never ends the game", function()
  -- (on the native core: the thread cannot load the core; on the pure-Lua
  -- core: its start-up raises before its loop)
  local ok, p, why
  if pure then
    local lw = require "stagehand.core.love_work"
    local boot = lw.BOOT
    lw.BOOT = boot:gsub('require "love.timer"', 'error("no love.timer in this thread", 0)', 1)
    ok, p = pcall(stagehand.pool, orch, { module = "love_worker", size = 1 })
    lw.BOOT = boot
    why = "no love.timer in this thread"
  else
    local native = require "stagehand.core.native"
    local path = native.path
    native.path = function() return "/no/such/stagehand/_core.so" end
    ok, p = pcall(stagehand.pool, orch, { module = "love_worker", size = 1 })
    native.path = path
    why = "cannot load /no/such/stagehand/_core.so"
  end
  check(ok, "the pool was not made: %s", tostring(p))
  pools[#pools + 1] = p
  local state, err = orch:wait(p:run("echo", 1), WAIT)
  same("failed", state, "a request no worker can take")
  check(tostring(err.message):find("a LÖVE worker thread failed: " .. why, 1, true),
    "the message was: %s", tostring(err.message))
  local named = false
  for _, line in ipairs(logged) do
    if line:find("LÖVE worker thread failed", 1, true) then named = true end
  end
  check(named, "the log does not name the thread")
end)

-- (Finished, not only their workers exited, by the time the destroy
-- settles: a thread still closing its state held LÖVE's modules, and a
-- game restarting then failed now and then with "Failed to initialize
-- filesystem: already initialized".)
it("destroys a pool: its LÖVE threads have finished when the destroy settles", function()
  local p = stagehand.pool(orch, { module = "love_worker", size = 2 })
  same("done", (orch:wait(p:run("echo", 1), WAIT)), "a request")
  collectgarbage()
  collectgarbage()
  same("done", (orch:wait(p:run("echo", 2), WAIT)), "a request after a full collection") -- (the pool runs on)
  local threads = {}
  for i, t in pairs(p.love.threads) do threads[i] = t end
  same("done", (orch:wait(p:destroy(), WAIT)), "the destroy")
  same(nil, next(p.love.threads), "a thread the pool still holds")
  for i, t in pairs(threads) do
    check(not t:isRunning(), "thread %d still runs", i)
    check(t:getError() == nil, "thread %d: %s", i, tostring(t:getError()))
  end
end)

-- A pool of one worker, its close timeout 20 ms, running `late` (deaf to
-- stopping(): it waits for "go" on a LÖVE channel): the pool, the
-- request and that channel, once the worker has said it runs.
local function late_pool()
  local p = pool { size = 1, close_timeout_ms = 20 }
  local running, go = love.thread.getChannel("stagehand-spec-late"), love.thread.getChannel("stagehand-spec-late-go")
  running:clear()
  go:clear()
  local h = p:run("late", nil, { label = "a late decode" })
  local says
  local t_run = love.timer.getTime()
  repeat -- (the step's grant round hands the request to the worker)
    orch:step()
    says = running:demand(0.001)
  until says or love.timer.getTime() - t_run > WAIT / 1000
  same("running", says, "the worker")
  return p, h, go
end

-- Regression: a pool that gave up on a worker still running at its
-- close_timeout_ms kept its channels, so the objects that worker's late
-- reply carried stayed in them as long as the game kept the pool.
native_only("lets go of its channels when its destroy gives up on a worker, late replies' objects with them", function()
  local p, h, go = late_pool()
  local held = {}
  for i, ch in ipairs(p.love.outbox) do held[i] = ch end
  local thread = select(2, next(p.love.threads))
  local before = #logged
  same("done", (orch:wait(p:destroy(), WAIT)), "the destroy")
  same("cancelled", h:state(), "the request")
  check(#logged > before and logged[#logged]:find("worker 1 of pool 'love_worker' still runs", 1, true),
    "the log did not name the worker: %s",
    tostring(logged[#logged]))
  same(nil, next(p.love.outbox), "a reply channel the pool still holds")
  same(nil, next(p.love.inbox), "a request channel the pool still holds")
  go:push("go")
  local t0 = love.timer.getTime()
  while thread:isRunning() and love.timer.getTime() - t0 < WAIT / 1000 do love.timer.sleep(0.001) end
  check(not thread:isRunning(), "the late worker's thread still runs")
  local left = 0
  for _, ch in ipairs(held) do left = left + ch:getCount() end
  same(1, left, "late replies' objects in the channels only this case now holds")
  for _, ch in ipairs(held) do ch:clear() end
end)

pure_only("runs pools on LÖVE threads with no native core, refusing native threads, and copies a payload at once",
  function()
  local p = pool { size = 1 }
  check(p.ud.pure and p.love and p.love.threads[0], "the pool does not run on LÖVE threads in Lua")
  local ok, err = pcall(stagehand.pool, orch, { module = "love_worker", threads = "native" })
  check(not ok and tostring(err):find("bad argument 'opts.threads' to stagehand.pool: expected \"love\" on the"
    .. " pure-Lua core", 1, true), "threads = native: %s", tostring(err))
  local payload = { name = "tile1.png", size = { 512, 512 } }
  local h = p:run("echo", payload)
  payload.name, payload.size[1] = "changed", 0 -- (after the request was made: not what the worker gets)
  local st, got = orch:wait(h, WAIT)
  same("done", st, "a request whose payload changed after")
  check(got ~= payload and got.name == "tile1.png" and got.size[1] == 512, "the worker got the payload as changed")
end)

it("wakes a job receiving on a port when a LÖVE worker posts to it", function()
  local port = stagehand.port("to the job")
  local h = orch:run("receive", function() return port:receive() end)
  orch:step()
  same("running", h:state(), "the job before the post")
  local p = pool { size = 1 }
  same("done", (orch:wait(p:run("post_to", { port = port, value = { n = 42, tag = "x" } }), WAIT)), "the post")
  local state, v = orch:wait(h, WAIT)
  same("done", state, "the receiving job")
  check(type(v) == "table" and v.n == 42 and v.tag == "x", "it received %s", tostring(v))
end)

it("meets a job and a LÖVE worker in one round, both with the same sum", function()
  local b = stagehand.rounds(2, 2)
  local p = pool { size = 1 }
  local hw = p:run("meet", { rounds = b, index = 2, two = true })
  local out = {}
  local hj = orch:run("meet", function()
    local ok = b:sum(1, 2, 1, { 10, 1 }, out)
    return ok, out[1], out[2]
  end)
  local s1, ok1, sum1, second = orch:wait(hj, WAIT)
  local s2, ok2, sum2, second2 = orch:wait(hw, WAIT)
  same("done", s1, "the job")
  same("done", s2, "the worker")
  check(ok1 and ok2, "a wait returned false")
  same(30, sum1, "the job's sum")
  same(30, sum2, "the worker's sum")
  same(3, second, "the second number's sum")
  same(3, second2, "the second number's sum, on the worker")
end)

it("takes a job and a LÖVE worker through many rounds, reusing each number once its round is over", function()
  local b = stagehand.rounds(2, 1)
  local p = pool { size = 1 }
  local n = 300
  local hw = p:run("take_turns", { rounds = b, index = 2, n = n })
  local hj = orch:run("taking turns", function()
    local out, got = {}, {}
    for i = 1, n do
      if not b:sum(2 - i % 2, 2, 1, { i }, out) then return false, i end
      got[i] = out[1]
    end
    return true, table.concat(got, " ")
  end)
  local want = {}
  for i = 1, n do want[i] = 3 * i end
  want = table.concat(want, " ")
  local s1, ok1, got1 = orch:wait(hj, WAIT)
  local s2, ok2, got2 = orch:wait(hw, WAIT)
  check(s1 == "done" and ok1 == true, "the job: %s, %s, %s", tostring(s1), tostring(ok1), tostring(got1))
  check(s2 == "done" and ok2 == true, "the worker: %s, %s, %s", tostring(s2), tostring(ok2), tostring(got2))
  same(want, got1, "the job's sums")
  same(want, got2, "the worker's sums")

  -- A round complete whose answers are not all taken refuses another
  -- arrival; once every participant has its answer, its number begins a
  -- new round.
  local out1, out2, out3 = {}, {}, {}
  local h1 = orch:run("waits", function() return b:sum(6, 2, 1, { 4 }, out1) end)
  orch:step() -- (h1 arrives and waits: its answer is not taken before the next step)
  local h2 = orch:run("completes", function()
    local done = b:sum(6, 2, 2, { 5 }, out2)
    local ok, err = pcall(b.sum, b, 6, 2, 1, { 1 }, {})
    return done, out2[1], ok, tostring(err)
  end)
  local st, done, sum, ok, err = orch:wait(h2, WAIT)
  check(st == "done" and done == true and sum == 9, "the second participant: %s, %s, %s", tostring(st),
    tostring(done), tostring(sum))
  check(ok == false and err:find("b:sum: round 6 was begun with another count or operation, or is complete", 1, true),
    "an arrival at a complete round: %s", err)
  st, done = orch:wait(h1, WAIT)
  check(st == "done" and done == true and out1[1] == 9, "the first participant: %s, %s, %s", tostring(st),
    tostring(done), tostring(out1[1]))
  st, done = orch:wait(orch:run("again", function() return b:sum(6, 1, 1, { 7 }, out3) end), WAIT)
  check(st == "done" and done == true and out3[1] == 7, "round 6 again: %s, %s, %s", tostring(st), tostring(done),
    tostring(out3[1]))

  -- A participant that leaves before its answer (its job cancelled) still
  -- counts: the round completes for the other, and is over once it has
  -- its answer.
  local gone = orch:run("leaves", function() return b:sum(8, 2, 1, { 100 }, {}) end)
  orch:step()
  gone:cancel("not needed")
  same("cancelled", gone:state(), "the job that left")
  local hw8 = orch:run("stays", function() return b:sum(8, 2, 2, { 1 }, out2), out2[1] end)
  st, done, sum = orch:wait(hw8, WAIT)
  check(st == "done" and done == true and sum == 101, "the one that stayed: %s, %s, %s", tostring(st),
    tostring(done), tostring(sum))
  st, done = orch:wait(orch:run("8 again", function() return b:sum(8, 1, 2, { 3 }, out3) end), WAIT)
  check(st == "done" and done == true and out3[1] == 3, "round 8 again: %s, %s, %s", tostring(st), tostring(done),
    tostring(out3[1]))
end)

it("hands back a port a LÖVE worker made, and the very port it was given", function()
  local p = pool { size = 1 }
  local state, made = orch:wait(p:run("make_port", "made there"), WAIT)
  same("done", state, "the request")
  same("from the worker", made:receive_within(WAIT), "what the worker posted before returning it")
  check(tostring(made):find("^stagehand.port"), "the port is %s", tostring(made))
  local port = stagehand.port()
  local st, back = orch:wait(p:run("echo", { port, nested = { port } }), WAIT)
  same("done", st, "the echo")
  check(back[1] == port and back.nested[1] == port, "the port came back as another")
  check(not pure or rawequal(back[1], port), "the port came back as another table")
  port:post("one")
  same("one", back[1]:receive_within(WAIT), "a value through the port as it came back")
  local ok, bad
  ok, bad = pcall(function() return p:run("make_port", 5) end)
  same(true, ok, "the request")
  state, bad = orch:wait(bad, WAIT)
  same("failed", state, "a port named with a number")
  check(tostring(bad.message):find("bad argument 'name' to port: expected a string or nil, got 5", 1, true),
    "the message was: %s", tostring(bad.message))
end)

it("wakes a LÖVE worker blocked on a port when it closes, on a round when it is aborted, and when stopped",
  function()
  local p = pool { size = 2 }
  local port, b = stagehand.port("quiet"), stagehand.rounds(3)
  local hp = p:run("receive_once", port)
  local hr = p:run("wait_round", { rounds = b, count = 3 })
  local t0 = love.timer.getTime()
  repeat
    orch:step()
    local _, w0 = p.ud:_worker(0)
    local _, w1 = p.ud:_worker(1)
    local waiting = w0 and w1
  until waiting or love.timer.getTime() - t0 > WAIT / 1000
  port:close()
  local state, v, again = orch:wait(hp, WAIT)
  same("done", state, "the receive")
  check(v == nil and again == nil, "a closed port answered %s, %s", tostring(v), tostring(again))
  b:abort()
  state, v = orch:wait(hr, WAIT)
  same("done", state, "the round")
  same(false, v, "an aborted round's answer")
  check(b:aborted(), "the barrier does not say it was aborted")
  local inbox = stagehand.port()
  local w = stagehand.spawn(orch, "love_worker.receive_once", inbox)
  t0 = love.timer.getTime()
  repeat
    orch:step()
    local _, what = w.pool.ud:_worker(0)
  until what or love.timer.getTime() - t0 > WAIT / 1000
  w:stop()
  state, v = orch:wait(w.done, WAIT)
  same("done", state, "the stopped service")
  check(v == nil, "a stopped worker's receive answered %s", tostring(v))
  same("stopped", w:state(), "its state")
end)

it("keeps every rule of ports and round barriers on the game's side", function()
  local port = stagehand.port()
  local ok, err = pcall(port.post, port, nil)
  check(not ok and tostring(err):find("port:post: nil cannot be posted (a closed port answers nil)", 1, true),
    "posting nil: %s", tostring(err))
  for i = 1, 3 do same(true, port:post({ i = i }), "post " .. i) end
  same(3, port:count(), "the count")
  local got, v = port:try_receive()
  check(got and v.i == 1, "try_receive answered %s, %s", tostring(got), tostring(v))
  local seen = {}
  same(2, port:drain(function(x) seen[#seen + 1] = x.i end), "drained")
  same("2 3", table.concat(seen, " "), "the order drained")
  got, v = port:try_receive()
  check(got == false and v == "empty", "an empty port answered %s, %s", tostring(got), tostring(v))
  same(nil, port:receive_within(0), "receive_within(0) on an empty port")
  for i = 1, 3 do port:post(i) end
  check(port:drain_for(function() end, 0) >= 1, "drain_for(fn, 0) took none")
  port:drain(function() end)
  ok, err = pcall(port.receive_within, port, -1)
  check(not ok and tostring(err):find("bad argument 'ms' to port:receive_within: expected a number >= 0", 1, true),
    "ms -1: %s", tostring(err))
  ok, err = pcall(port.drain, port, 5)
  check(not ok and tostring(err):find("bad argument 'fn' to port:drain: expected a function", 1, true),
    "fn 5: %s", tostring(err))
  ok, err = pcall(port.receive, port)
  check(not ok and tostring(err):find("cannot wait on the main thread outside a job", 1, true),
    "receive outside a job: %s", tostring(err))
  check(port == port and tostring(port):find("^stagehand.port"), "tostring(port) is %s", tostring(port))
  local inner = stagehand.port("inner")
  port:post({ inner, list = { inner } })
  got, v = port:try_receive()
  check(got and v[1] == inner and v.list[1] == inner, "a port in a port's value came out as another")
  check(not pure or rawequal(v[1], inner), "a port in a port's value came out as another table")
  -- A job that stops waiting leaves what comes after it in the port.
  local h = orch:run("receiver", function() return port:receive() end)
  orch:step()
  h:cancel("gone")
  orch:step()
  port:post("kept")
  orch:step()
  same(1, port:count(), "values left for the next receiver")
  port:close()
  same(false, port:post(1), "a post to a closed port")
  same(true, port:closed(), "closed()")
  same(0, port:count(), "a closed port's count")
  got, v = port:try_receive()
  check(got == false and v == "closed", "a closed port answered %s, %s", tostring(got), tostring(v))
  same(nil, port:receive_within(1), "receive_within on a closed port")
  same("done", (orch:wait(orch:run("late receiver", function() return port:receive() end), WAIT)),
    "a job receiving on a closed port")

  local b = stagehand.rounds(3, 1)
  local outs, hs = {}, {}
  for i = 1, 3 do
    outs[i] = {}
    hs[i] = orch:run("participant " .. i, function() return b:min(7, 3, i, { 10 - i }, outs[i]) end)
  end
  for i = 1, 3 do
    local st, done = orch:wait(hs[i], WAIT)
    check(st == "done" and done == true, "participant %d: %s, %s", i, tostring(st), tostring(done))
    same(7, outs[i][1], "participant " .. i .. "'s minimum")
  end
  local st, e = orch:wait(orch:run("bad", function() return b:sum(8, 3, 9, { 1 }, {}) end), WAIT)
  check(st == "failed" and tostring(e.message):find("bad argument 'index' to b:sum: expected an integer from 1 to 3,"
    .. " got 9", 1, true), "a bad index: %s %s", tostring(st), tostring(e and e.message))
  local first = orch:run("first", function() return b:arrive(9, 2) end)
  orch:step()
  st, e = orch:wait(orch:run("other", function() return b:arrive(9, 3) end), WAIT)
  check(st == "failed" and tostring(e.message):find("b:arrive: round 9 was begun with another count or operation,"
    .. " or is complete", 1, true), "another count: %s %s", tostring(st), tostring(e and e.message))
  ok, err = pcall(b.arrive, b, 1, 1)
  check(not ok and tostring(err):find("cannot wait on the main thread outside a job", 1, true),
    "arrive outside a job: %s", tostring(err))
  b:abort()
  st, v = orch:wait(first, WAIT)
  check(st == "done" and v == false, "a wait in an aborted round answered %s, %s", tostring(st), tostring(v))
  same(false, (select(2, orch:wait(orch:run("after", function() return b:arrive(10, 1) end), WAIT))),
    "a wait after the abort")
end)

it("runs a service stopped before its thread took it, told to stop, to its end", function()
  local w = stagehand.spawn(orch, "love_worker.receive_once", stagehand.port())
  w:stop()
  local state, v, stopping = orch:wait(w.done, WAIT)
  same("done", state, "the service")
  check(v == nil and stopping == true, "it answered %s, %s", tostring(v), tostring(stopping))
  same("stopped", w:state(), "its state")
end)

it("runs its LÖVE workers below the game's thread, which keeps the cores' contended time", function()
  local ffi = require "ffi"
  pcall(ffi.cdef, "int getpriority(int, unsigned int);")
  local game = ffi.C.getpriority(0, 0)
  local p = pool { size = 1 }
  local state, nice = orch:wait(p:run("nice"), WAIT)
  same("done", state, "the request")
  check(type(nice) == "number" and nice > game, "the worker's nice value is %s, the game's %s", tostring(nice), game)
  same(19, nice, "the worker's nice value")
end)

it("names the port a LÖVE worker waits on in the log when its orchestrator closes", function()
  local lines = {}
  local o = stagehand.new {
    driver = "manual", clock = function() return love.timer.getTime() * 1000 end,
    log = function(line) lines[#lines + 1] = line end,
  }
  local port = stagehand.port("mixer inbox")
  local w = stagehand.spawn(o, "love_worker.receive_once", port)
  local t0 = love.timer.getTime()
  repeat
    o:step()
    local _, what = w.pool.ud:_worker(0)
  until what or love.timer.getTime() - t0 > WAIT / 1000
  o:close()
  local all = table.concat(lines, "\n")
  check(all:find("long-lived worker love_worker.receive_once waits on port 'mixer inbox' for ", 1, true),
    "the log said: %s", all)
  port:close()
end)

pure_only("runs a frame's requests by priority on a busy worker, the visible one first", function()
  local p = pool { size = 1 }
  local held, notes = love.thread.getChannel("stagehand-spec-prio"), love.thread.getChannel("stagehand-spec-notes")
  held:clear()
  notes:clear()
  love.thread.getChannel("stagehand-spec-prio-held"):clear()
  local hold = p:run("hold", "stagehand-spec-prio")
  local t0 = love.timer.getTime()
  repeat orch:step() until love.thread.getChannel("stagehand-spec-prio-held"):demand(0.001)
    or love.timer.getTime() - t0 > WAIT / 1000
  local hs = {}
  for i = 1, 4 do hs[#hs + 1] = p:run("note", { "stagehand-spec-notes", "background " .. i }) end
  hs[#hs + 1] = p:run("note", { "stagehand-spec-notes", "visible" }, { priority = 100 })
  held:push("go")
  same("done", (orch:wait(hold, WAIT)), "the held request")
  for i = 1, #hs do same("done", (orch:wait(hs[i], WAIT)), "request " .. i) end
  local order = {}
  for i = 1, 5 do order[i] = notes:pop() end
  same("visible", order[1], "the first to run after the hold (" .. table.concat(order, ", ") .. ")")
  same("background 1", order[2], "the next")
end)

pure_only("runs a long-lived worker (stagehand.spawn) on a LÖVE thread until stopped", function()
  local a, b = love.thread.getChannel("stagehand-spec-in"), love.thread.getChannel("stagehand-spec-out")
  a:clear()
  b:clear()
  local w = stagehand.spawn(orch, "love_worker.relay", "stagehand-spec-in", "stagehand-spec-out")
  check(w.pool.love and w.pool.love.threads[0], "the service does not run on a LÖVE thread")
  orch:step()
  a:push(5)
  a:push(6)
  same(10, b:demand(WAIT / 1000), "5, doubled")
  same(12, b:demand(WAIT / 1000), "6, doubled")
  w:stop()
  local state, n = orch:wait(w.done, WAIT)
  same("done", state, "the service")
  same(2, n, "what it answered")
  same("stopped", w:state(), "its state")
end)

pure_only("lets go of its channels when its destroy gives up on a worker, late replies' objects with them",
  function()
  local p, h, go = late_pool()
  local events = p.ud.chans.events
  local thread = p.love.threads[0]
  local before = #logged
  same("done", (orch:wait(p:destroy(), WAIT)), "the destroy")
  same("cancelled", h:state(), "the request")
  check(#logged > before and logged[#logged]:find("worker 1 of pool 'love_worker' still runs", 1, true),
    "the log did not name the worker: %s", tostring(logged[#logged]))
  check(p.ud.chans.events ~= events, "the pool still holds the channel its workers reply on")
  go:push("go")
  local t0 = love.timer.getTime()
  while thread:isRunning() and love.timer.getTime() - t0 < WAIT / 1000 do love.timer.sleep(0.001) end
  check(not thread:isRunning(), "the late worker's thread still runs (%s)", tostring(thread:getError()))
  local reply = events:pop()
  check(reply and reply[1] == 3 and reply[3][1]:typeOf("ImageData"),
    "the late reply is not in the channel only this case now holds")
  same(0, p.ud.chans.events:getCount(), "events in the pool's new channel")
end)

-- Regression: two workers may send their objects in one order and their
-- replies in the other; a request cancelled between the two made reading
-- its reply raise out of orch:step ("the LÖVE objects of a message were
-- lost"), so a game that cancelled decodes as the player scrolled ended in
-- LÖVE's error screen. Cancelled here as they finish, frame after frame.
it("cancels requests whose replies carry LÖVE objects as they finish, and the step never raises", function()
  local p = pool { size = 2 }
  local live, ended, made = {}, { done = 0, cancelled = 0 }, 0
  local t0 = love.timer.getTime()
  for frame = 1, 300 do
    for _ = 1, 6 do
      made = made + 1
      live[#live + 1] = p:run("echo", love.image.newImageData(8, 8), { label = "echo " .. made })
    end
    orch:step()
    for i = #live, 1, -1 do
      local h = live[i]
      if h:state() ~= "running" then
        ended[h:state()] = (ended[h:state()] or 0) + 1
        table.remove(live, i)
      elseif (i + frame) % 3 == 0 then
        h:cancel("scrolled away")
      end
    end
    love.timer.sleep(0.0005)
  end
  for _, h in ipairs(live) do h:cancel("the case ends") end
  orch:step()
  check(ended.done > 0 and ended.cancelled > 0, "%d done, %d cancelled of %d", ended.done, ended.cancelled, made)
  same(0, (ended.failed or 0) + (ended.stalled or 0), "requests that failed or stalled")
  check(love.timer.getTime() - t0 < WAIT / 1000, "the case took too long")
end)

it("wires an orchestrator into LÖVE's frame with stagehand.love: step after update, visibility, quit", function()
  local for_love = require "stagehand.love"
  local updates = 0
  function love.update() updates = updates + 1 end -- (the game's own, defined before the call)
  local o = for_love.new { step_ms = 2, check_ms = 20 }
  function love.focus() end -- (and one defined after: the helper still hears focus)
  local p = stagehand.pool(o, { module = "love_worker", size = 1 })
  local h = p:run("echo", "stepped")
  same("queued", p:queued() == 1 and "queued" or "not queued", "the request before a frame")
  -- A frame: the game's update, then the step that offers the request.
  love.update(1 / 60)
  same(1, updates, "the game's love.update calls")
  local t0 = love.timer.getTime()
  while h:state() == "running" and love.timer.getTime() - t0 < WAIT / 1000 do
    love.update(1 / 60)
    love.timer.sleep(0.001)
  end
  same("done", h:state(), "the request, stepped by frames alone")
  love.handlers.visible(false)
  same(false, o:visible(), "visibility while hidden")
  love.handlers.focus(true)
  same(true, o:visible(), "visibility once focused")
  -- Quitting: love.quit (served by the helper) shuts the orchestrator and its pools.
  local kept = love.quit()
  same(false, kept, "love.quit's answer")
  check(p.destroyed ~= false, "the pool was not destroyed at quit")
  local ok = pcall(p.run, p, "echo", 1)
  check(not ok, "the pool still runs requests after quit")
  local bad = pcall(for_love.new, { clock = os.clock })
  check(not bad, "the helper took a clock of its own")
  love.update = nil
end)

function love.load()
  print(string.format("stagehand %s in LÖVE %s, %s backend", stagehand.VERSION, table.concat({ love.getVersion() },
    ".", 1, 3), stagehand.backend))
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
  for _, p in ipairs(pools) do orch:wait(p:destroy(), WAIT) end
  orch:close()
  print(string.format("love: %d passed, %d failed", passed, failed))
  love.event.quit(failed > 0 and 1 or 0)
end
