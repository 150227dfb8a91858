-- Worker pools on LÖVE's threads (love.thread). A Lua state stagehand makes
-- itself has no `love`: it cannot require love.image nor read the game's
-- archive. So inside LÖVE a pool's workers are LÖVE threads, each running
-- BOOT: it loads stagehand's C module and serves its worker
-- (threads.serve, csrc/lua/lworkers.c) in that thread's own state, with every
-- rule of pools unchanged.
--
-- LÖVE objects (ImageData, FileData, SoundData, ByteData...) cross as
-- themselves, never copied: the core's message holds each one's number,
-- and the objects go beside it through the pool's love.thread channels
-- (`inbox` to the workers, `outbox` back), as {request id, objects}. A
-- reader takes the entry of its own request (performAtomic: the others
-- stay), so workers may take requests in any order. Each way is CHANNELS
-- channels, a request's entry in the one at id % CHANNELS + 1: a reader
-- looks through the entries of one. With one channel each way, a take
-- looked through every entry, holding the channel (and the other side's
-- next push) meanwhile: 2,000 queued requests carrying a ByteData took
-- 1 ms each, and a step that read 8,000 replies carrying one took 107 ms.
local native = require "stagehand.core.native"
local options = require "stagehand.engine.options"
local each = require("stagehand.core.compat").each
local on_collect = require("stagehand.core.compat").on_collect
local B = require "stagehand.core.backend"
local threads_native = require "stagehand.core.threads_native"
local E = require "stagehand.engine.engine"
local F = require "stagehand.engine.fields"
local logm = require "stagehand.engine.log"

local M = {}

M.CHANNELS = 64 -- (see the top)
local CHANNELS = M.CHANNELS

-- What runs in each LÖVE thread: its arguments are the worker's token and
-- number, the C module's path, the creating state's package.path and
-- cpath, and the pool's channels. It never raises: an error in a LÖVE
-- thread reaches love.threaderror, whose default ends the game, so what
-- fails goes to the pool's `failures` channel instead.
local BOOT = [[
local token, idx, core, path, cpath, inbox, outbox, failures = ...
local channels = #inbox
local function take(channel, id)
  local found
  channel:performAtomic(function(ch)
    for _ = 1, ch:getCount() do
      local entry = ch:pop()
      if entry[1] == id then
        found = entry[2]
        break
      end
      ch:push(entry)
    end
  end)
  return found
end
local ok, err = pcall(function()
  package.path, package.cpath = path, cpath
  local open, why = package.loadlib(core, "luaopen_stagehand__core")
  if not open then error("cannot load " .. core .. ": " .. tostring(why), 0) end
  local C = open("stagehand._core")
  package.loaded["stagehand._core"] = C
  C.threads.serve(token, function(id) return take(inbox[id % channels + 1], id) end,
    function(id, objects) outbox[id % channels + 1]:push({ id, objects }) end)
end)
if not ok then failures:push({ idx, tostring(err) }) end
]]

-- LÖVE's own table, or nil outside LÖVE.
local function love_table()
  local love = rawget(_G, "love")
  return type(love) == "table" and love or nil
end

--- Whether LÖVE's threads are here.
function M.present()
  local love = love_table()
  return love ~= nil and type(love.thread) == "table" and love.thread.newThread ~= nil
end

--- The kind of threads a pool made with `threads` (nil: the default) runs
--- on: "love" inside LÖVE, "native" elsewhere.
function M.kind(threads, fn)
  if threads == nil then return M.present() and "love" or "native" end
  if threads ~= "love" and threads ~= "native" then
    options.fail(fn, "opts.threads", '"love" or "native"', threads, 4)
  end
  if threads == "love" and not M.present() then
    options.fail(fn, "opts.threads", '"native" outside LÖVE (love.thread is not loaded here)', threads, 4)
  end
  if threads == "native" and B.name == "lua" then
    options.fail(fn, "opts.threads", '"love" on the pure-Lua core (stagehand\'s own threads need its native core)',
      threads, 4)
  end
  return threads
end

-- Takes request id's entry from a channel: its objects, or nil. Entries
-- of requests that ended (`gone(id)`) met on the way are dropped; the
-- others go to the back.
local function take(channel, id, gone)
  local found
  channel:performAtomic(function(ch)
    for _ = 1, ch:getCount() do
      local entry = ch:pop()
      if entry[1] == id then
        found = entry[2]
        return
      end
      if not (gone and gone(entry[1])) then ch:push(entry) end
    end
  end)
  return found
end

--- The LÖVE half of a pool: its channels and threads. (On the pure-Lua
--- core, core/love_work.lua's pool holds the channels, and its threads
--- run that file's BOOT.)
function M.new(pool)
  if pool.ud.pure then
    return {
      pure = true, inbox = {}, outbox = {}, threads = {}, carried = {}, failures = pool.ud.chans.failures,
      ud = pool.ud, close_ms = pool.close_ms, collected = false,
    }
  end
  local core, err = native.path()
  if not core then error("stagehand.pool: cannot find stagehand's C module for LÖVE threads: " .. tostring(err), 3) end
  local lt = {
    core = core,
    inbox = {}, -- CHANNELS channels: a request's objects wait in inbox[id % CHANNELS + 1]
    outbox = {}, -- CHANNELS channels: a reply's objects wait in outbox[id % CHANNELS + 1]
    failures = love_table().thread.newChannel(), -- {worker number, message} from BOOT
    threads = {}, -- worker number -> its LÖVE thread, while it may run
    carried = {}, -- request id -> true while its objects wait in the inbox
    ud = pool.ud, close_ms = pool.close_ms, -- (for finish, once collected)
    nap = threads_native.port(), -- (finish's pause between looks)
    collected = false, -- (finish's hook: see start)
  }
  for i = 1, CHANNELS do
    lt.inbox[i], lt.outbox[i] = love_table().thread.newChannel(), love_table().thread.newChannel()
  end
  pool.ud:_objects() -- (from the first request, a spawned worker's arguments included)
  local reqs = pool.reqs
  local function gone(id) return reqs[id] == nil end
  -- (a reply's objects, for the core's decoder: _drain's fetch. Two
  -- workers may send their objects in one order and their replies in the
  -- other, so a fetch may have dropped the objects of a request that has
  -- ended before its reply is read: that reply is dropped too, and reads
  -- as none.)
  lt.fetch = function(id)
    local channel = lt.outbox[id % CHANNELS + 1]
    if not channel then return {} end -- (detached: every request has ended)
    local found = take(channel, id, gone)
    if found == nil and gone(id) then return {} end
    return found
  end
  return lt
end

-- A pool the game dropped, or one still alive when its Lua state closes
-- (love.event.quit("restart") closes it, then starts the game again): its
-- workers are told to stop, and its LÖVE threads are given up to the
-- pool's close_timeout_ms to finish. A thread still running holds LÖVE's
-- modules, and the restarted game's love.filesystem could not start.
local function finish(lt)
  pcall(lt.ud._close, lt.ud)
  local deadline = B.now_ms() + lt.close_ms
  for _, t in each, lt.threads do
    local ok, running = pcall(t.isRunning, t)
    while ok and running and B.now_ms() < deadline do
      if lt.nap then lt.nap:receive_within(1) else love_table().timer.sleep(0.001) end
      ok, running = pcall(t.isRunning, t)
    end
  end
end

--- Starts worker `idx` (its token from _add_worker(true)) on a LÖVE thread.
function M.start(lt, idx, token)
  local t
  if lt.pure then
    t = love_table().thread.newThread(require("stagehand.core.love_work").BOOT)
    lt.threads[idx] = t
    t:start(lt.ud:_boot_args(idx))
  else
    t = love_table().thread.newThread(BOOT)
    lt.threads[idx] = t
    t:start(token, idx, lt.core, package.path, package.cpath, lt.inbox, lt.outbox, lt.failures)
  end
  -- (A new hook after each thread: when a Lua state closes, the newest
  -- objects are finalized first, so the newest hook runs while the
  -- threads' own objects are still whole. One replaced is collected while
  -- the pool lives, and does nothing: only the pool's current hook acts.)
  local hook
  hook = on_collect(function()
    if lt.collected == hook then finish(lt) end
  end)
  lt.collected = hook
end

--- Sends the objects a request's payload carries.
function M.carry(lt, id, objects)
  lt.inbox[id % CHANNELS + 1]:push({ id, objects })
  lt.carried[id] = true
end

--- A request ended: objects it carried that no worker took are dropped.
function M.forget(lt, id)
  if lt.carried[id] then
    lt.carried[id] = nil
    take(lt.inbox[id % CHANNELS + 1], id)
  end
end

--- The pool gave up waiting for its workers (close_timeout_ms passed):
--- nothing reads its channels again. What waits there goes now, and the
--- pool lets go of them, so the objects a late reply carries are freed
--- once its thread ends and closes its state (the last to hold them), not
--- kept as long as the game keeps the pool.
function M.detach(lt)
  for i = 1, #lt.inbox do
    lt.inbox[i]:clear()
    lt.outbox[i]:clear()
  end
  lt.inbox, lt.outbox = {}, {}
  lt.carried = {}
end

--- The pool's workers have all exited: waits for their LÖVE threads to
--- finish too (each closes its Lua state, and with it its hold on LÖVE's
--- modules, just after its worker exits). A game that restarts
--- (love.event.quit("restart")) then finds love.filesystem free to start
--- again; left to finish on their own, one restart in about sixty failed
--- with "Failed to initialize filesystem: already initialized".
function M.join(lt)
  for idx, t in each, lt.threads do
    t:wait()
    lt.threads[idx] = nil
  end
end

--- How long a wait for the pool's news may last while one of its LÖVE
--- threads has not yet taken up its worker (a failure there signals
--- nothing): 20 ms; nil once all have.
function M.wait_cap(pool)
  if pool.ud:_unserved() > 0 then return 20 end
  return nil
end

--- Each step: a thread that failed before it served its worker (its
--- state could not load the C module) takes its worker with it, and the
--- log says why; once no worker is left, queued requests fail with that
--- message rather than wait. Threads that ended leave the list.
function M.check(pool)
  local lt = pool.love
  local failure = lt.failures:pop()
  while failure do
    local idx = failure[1]
    lt.threads[idx] = nil
    if pool.ud:_unhost(idx) then -- (else it served, and ended: its exit is an event)
      pool.boot_error = pool:_describe() .. ": a LÖVE worker thread failed: " .. failure[2]
      logm.guard(nil, "the log function", pool.orch.log, "[stagehand] " .. pool.boot_error)
    end
    failure = lt.failures:pop()
  end
  for idx, t in each, lt.threads do
    if not t:isRunning() then lt.threads[idx] = nil end
  end
  if pool.boot_error and pool.live == 0 then
    for id, job in each, pool.reqs do
      if pool.holds[id] and not job[F.STATE] then E.fail(job, pool.boot_error) end
    end
  end
end

return M
