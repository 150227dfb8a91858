-- The worker module of the LÖVE specs: found through love.filesystem (the
-- game's archive), run on LÖVE threads, where love.image loads.
require "love.image"
require "love.filesystem"
local worker = require "stagehand.worker"

local M = {}

function M.decode(path)
  local data = love.image.newImageData(path) -- (read from the archive)
  return data, data:getWidth(), data:getHeight()
end

-- An ImageData it was given, changed in place, and handed back with its
-- pointer as this thread saw it.
function M.tint(t)
  t.image:setPixel(0, 0, 1, 0, 0, 1)
  return t.image, tostring(t.image:getPointer()), t.note
end

function M.bytes(data) return data:getSize(), data:getString() end

-- How many LÖVE objects this worker's state still has a Lua face of (each
-- one keeps its object, an image's pixels say, alive).
function M.objects_held()
  local n = 0
  for _ in pairs(debug.getregistry()._loveobjects or {}) do n = n + 1 end
  return n
end

function M.boom() error("the decoder raised") end

-- Raises a table holding the ImageData it was given and one it made.
function M.raise_objects(img) error({ code = 7, given = img, made = love.image.newImageData(1, 1) }) end

-- Runs until stopped (an abort, a destroy), then says so on the port.
function M.until_stopped(port)
  port:post("running")
  while not worker.stopping() do worker.sleep(5) end
  port:post("stopped")
  return "stopped"
end

-- The same, saying so on the LÖVE channel named (no port: on the pure-Lua
-- core, ports need the native core).
function M.until_stopped_on(name)
  local ch = love.thread.getChannel(name)
  ch:push("running")
  while not worker.stopping() do worker.sleep(5) end
  ch:push("stopped")
  return "stopped"
end

function M.echo(...) return ... end

-- Sleeps ms, then says so.
function M.nap(ms)
  worker.sleep(ms)
  return ms
end

-- Returns v twice (one table in two replies), and raises it when asked.
function M.twice(v) return v, v end
function M.raise_value(v) error(v) end

-- Whether the table and the shared one arrived whole: t holds itself and
-- one table at two places and as a key (as the game's side builds it).
function M.whole(t)
  return rawequal(t.self, t) and rawequal(t.a, t.b) and t[t.a] == "key" and t.a[2] == 2
end

-- Waits for "go" on the LÖVE channel named (a worker held busy).
function M.hold(name)
  love.thread.getChannel(name .. "-held"):push("held")
  return love.thread.getChannel(name):demand(10)
end

-- Says `tag` on the LÖVE channel named, in the order requests run.
function M.note(t)
  love.thread.getChannel(t[1]):push(t[2])
  return t[2]
end

-- Makes a port here, posts to it, and returns it.
function M.make_port(name)
  local p = worker.port(name)
  p:post("from the worker")
  return p
end

-- Posts t.value to t.port.
function M.post_to(t) return t.port:post(t.value) end

-- What one receive on `port` answers, and whether it was told to stop.
function M.receive_once(port)
  local v = port:receive()
  return v, worker.stopping() or nil
end

-- Arrives at round 1 of t.rounds, of t.count participants.
function M.wait_round(t) return t.rounds:arrive(1, t.count) end

-- A long-lived worker: answers each number on the LÖVE channel `inbox`
-- on `outbox`, doubled, until stopped; returns how many it answered.
function M.relay(inbox, outbox)
  local a, b, n = love.thread.getChannel(inbox), love.thread.getChannel(outbox), 0
  while not worker.stopping() do
    local v = a:demand(0.005)
    if v then
      n = n + 1
      b:push(v * 2)
    end
  end
  return n
end

-- Says it runs, then waits on a LÖVE channel of its own, deaf to
-- stopping() (as a long decode is), and returns an ImageData: a reply that
-- comes after its pool stopped waiting for it.
function M.late()
  love.thread.getChannel("stagehand-spec-late"):push("running")
  love.thread.getChannel("stagehand-spec-late-go"):demand(10)
  return love.image.newImageData(4, 4)
end

function M.nothing() end

-- This thread's nice value (Linux: a thread's own).
function M.nice()
  local ffi = require "ffi"
  pcall(ffi.cdef, "int getpriority(int, unsigned int);")
  return ffi.C.getpriority(0, 0)
end

-- Meets the other participant of `b` in round 1 and adds both shares.
-- (with t.two, a second number too: the index itself)
function M.meet(t)
  local out = {}
  local ok = t.rounds:sum(1, 2, t.index, { t.index * 10, t.two and t.index or nil }, out)
  return ok, out[1], out[2]
end

-- Meets the other participant of `b` in t.n rounds, numbered 1 and 2 in
-- turn (each number reused once the round before it is over), adding
-- t.index * round to the sum each time; the sums it got, joined by spaces.
function M.take_turns(t)
  local out, got = {}, {}
  for i = 1, t.n do
    if not t.rounds:sum(2 - i % 2, 2, t.index, { t.index * i }, out) then return false, i end
    got[i] = out[1]
  end
  return true, table.concat(got, " ")
end

-- A long-lived worker: answers each value on `inbox` on `outbox`, doubled,
-- until the port closes or it is stopped.
function M.doubler(inbox, outbox)
  local n = 0
  while true do
    local v = inbox:receive()
    if v == nil then return n end
    n = n + 1
    outbox:post(v * 2)
  end
end

return M
