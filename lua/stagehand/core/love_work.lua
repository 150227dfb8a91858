-- Worker pools on LÖVE's threads for the pure-Lua core: where no native
-- core loads (LÖVE on a Mac the game carries no core for, on a phone), a
-- pool's workers are still LÖVE threads, and everything between them and
-- the game goes through love.thread's channels, which copy plain data and
-- hand LÖVE objects over as themselves. This file stands for the threads'
-- half of the C module (threads_native.lua: csrc/lua/lpool.c's pool, the
-- notifier, the worker's loop and `stagehand.worker`), method for method,
-- so the pools above it (threads/workers.lua) are the same code on both.
--
-- A pool's channels: `offers` (the requests the last grant round offered,
-- best first: a worker takes the head), `taken` (what each worker took,
-- pushed in the same atomic step as its take, so the game's side knows
-- exactly what no worker has taken), `bell` (rung when an offer is made:
-- idle workers wait on it), `events` (started, progress, replies,
-- failures, exits) and `news` (the orchestrator's notifier). Each worker
-- has `ctl` (-1: stop and exit; -2: stop every request, this one and
-- those it takes next, as a stopped service is; a request's id: that
-- request is aborted) and `info`
-- (what it runs and waits on, for the log). Ports and round barriers are
-- love_ports.lua's, on channels too; each state, the game's and every
-- worker's, builds its own from the same bytes.
local each = require("stagehand.core.compat").each
local love_ports = require "stagehand.core.love_ports"

local M = {}

-- Whether pools can run here: LÖVE's threads are loaded (and not in a web
-- browser, where love.js's build has none to give).
function M.available()
  local love = rawget(_G, "love")
  if type(love) ~= "table" or type(love.thread) ~= "table" or not love.thread.newThread then return false end
  return not (love.system and love.system.getOS and love.system.getOS() == "Web")
end

local function love_thread() return rawget(_G, "love").thread end
local function new_channel() return love_thread().newChannel() end

-- What may cross a channel, checked before anything is pushed, naming the
-- first value that cannot (as the native core names it). Shared with the
-- worker's side: BOOT loads the same text.
local CHECK = [[
local MAX_DEPTH = 200 -- (the native core's: a table 201 below the value is one too deep)
local MARK = "\0stagehand" -- (a port or a round barrier: love_ports.lua)
local each = next -- (no loop spelled pairs or next: see compat.lua on Debian's LuaJIT)
local function is_ident(s) return s:match("^[%a_][%w_]*$") ~= nil end
local function path_of(root, keys)
  local out = { root }
  for i = 1, #keys do
    local k = keys[i]
    if type(k) == "string" then
      if is_ident(k) then out[#out + 1] = "." .. k
      else out[#out + 1] = '["' .. (#k > 40 and k:sub(1, 40) .. '..."]' or k .. '"]') end
    elseif type(k) == "number" then
      out[#out + 1] = (k == math.floor(k) and math.abs(k) < 1e15) and string.format("[%.0f]", k)
        or string.format("[%.17g]", k)
    else
      out[#out + 1] = "[<" .. type(k) .. " key>]"
    end
  end
  return table.concat(out)
end
-- (in a state that has not loaded an object's module, a LÖVE thread
-- handed an ImageData without require "love.image", the object has no
-- methods: LÖVE's registry of the objects it pushed here knows it)
local function is_love_object(v)
  local ok, is = pcall(function() return v.typeOf ~= nil and v:typeOf("Object") end)
  if ok and is then return true end
  local reg = debug.getregistry()._loveobjects
  if type(reg) ~= "table" then return false end
  for _, o in each, reg do
    if rawequal(o, v) then return true end
  end
  return false
end
local objects_seen, cross_seen, shared_seen, objects_ok = false, false, false, true
local function type_of(v)
  local ok, name = pcall(function() return v:type() end)
  return ok and type(name) == "string" and name or "object"
end
local walk
walk = function(v, root, keys, seen, depth)
  local t = type(v)
  if t == "nil" or t == "boolean" or t == "number" or t == "string" then return nil end
  if t == "userdata" and is_love_object(v) then
    if not objects_ok then
      return path_of(root, keys) .. " is a LÖVE " .. type_of(v) .. "; LÖVE objects cross only to and from"
        .. " workers on LÖVE threads (requests, results and a service's arguments), not through ports nor to"
        .. " stagehand's own threads"
    end
    objects_seen = true
    return nil
  end
  if t ~= "table" then
    return path_of(root, keys) .. " is a " .. t .. "; only plain data, ports"
      .. (objects_ok and ", round barriers and LÖVE objects" or " and round barriers") .. " cross threads"
  end
  if rawget(v, MARK) ~= nil then
    cross_seen = true
    return nil
  end
  if depth > MAX_DEPTH then
    return path_of(root, keys) .. " is nested deeper than " .. MAX_DEPTH .. " tables; it cannot cross threads"
  end
  if seen[v] then -- (met twice, or it holds itself: the values cross as a graph, love_ports.pack)
    shared_seen = true
    return nil
  end
  seen[v] = true
  for k, x in each, v do
    local n = #keys + 1
    keys[n] = k
    local why = (type(k) == "table" or type(k) == "userdata") and walk(k, root, keys, seen, depth + 1)
      or walk(x, root, keys, seen, depth + 1)
    keys[n] = nil
    if why then return why end
  end
  return nil
end
-- Why values first..n of ... cannot cross (root[i] names each), or nil;
-- then whether they hold LÖVE objects (refused unless objects_ok),
-- whether they hold ports or round barriers, and whether a table is met
-- twice among them (shared, or holding itself).
return function(root, objects_ok_, first, n, ...)
  objects_seen, cross_seen, shared_seen, objects_ok = false, false, false, objects_ok_
  local seen = {}
  for i = first, n do
    local why = walk((select(i, ...)), root, {}, seen, 0)
    if why then return why, objects_seen, cross_seen, shared_seen end
  end
  return nil, objects_seen, cross_seen, shared_seen
end
]]
local load_text = rawget(_G, "loadstring") or load
local why_not = load_text(CHECK, "=stagehand.core.love_work")()

-- The game's state's ports and round barriers (a worker's builds its own).
local P = love_ports.build {
  new_channel = new_channel,
  now = function() return rawget(_G, "love").timer.getTime() * 1000 end,
  stopped = function() return false end,
  waiting = function() end,
  check = why_not,
}
M.port, M.rounds, M.port_methods, M.rounds_methods = P.port, P.rounds, P.port_methods, P.rounds_methods

---------------------------------------------------------------------------
-- The notifier: a channel workers push to when they report.

function M.notifier() return { ch = new_channel(), gen = 0 } end
function M.notifier_gen(n)
  if n.ch:getCount() > 0 then
    n.ch:clear()
    n.gen = n.gen + 1
  end
  return n.gen
end
function M.notifier_wait(n, seen, ms)
  if M.notifier_gen(n) ~= seen then return true end
  if ms and ms > 0 and n.ch:demand(ms / 1000) ~= nil then
    n.ch:clear()
    n.gen = n.gen + 1
  end
  return n.gen ~= seen
end
function M.notifier_signal(n) n.ch:push(true) end
function M.notifier_fd() return nil end
function M.notifier_clear() end

--- The default number of worker threads: one fewer than the cores, at
--- least 1, at most 4.
function M.default_threads()
  local love = rawget(_G, "love")
  local cores = love.system and love.system.getProcessorCount and love.system.getProcessorCount() or 2
  return math.max(1, math.min(4, cores - 1))
end

---------------------------------------------------------------------------
-- The worker: what each LÖVE thread runs (its arguments: its number, the
-- pool's channels, its own two, the module, its source or nil, the game's
-- package.path, the text of CHECK, and love_ports.build's bytes).

M.BOOT = [[
local idx, chans, ctl, info, module, source, path, check_text, ports_bytes = ...
local offers, taken, bell, events, news, failures =
  chans.offers, chans.taken, chans.bell, chans.events, chans.news, chans.failures
local ok_all, err_all = pcall(function()
require "love.timer"
require "love.thread"
local load_text = rawget(_G, "loadstring") or load
local why_not = load_text(check_text, "=stagehand.core.love_work")()
local unpack = rawget(table, "unpack") or rawget(_G, "unpack")
local function now() return love.timer.getTime() * 1000 end
local function ring() if news:getCount() == 0 then news:push(true) end end
local current = -1
local function stopped()
  local s = ctl:peek()
  return s == -1 or s == -2 or (s ~= nil and s == current)
end
local function waiting(what)
  info:performAtomic(function(c) c:clear(); c:push({ current, what, what and now() or nil }) end)
end
-- This thread gives way to the game's (as the native core's workers do,
-- in csrc/platform: without it two decoding workers on two cores take
-- whole frames from the game): through LuaJIT's FFI, where LÖVE has it;
-- elsewhere, or where a call fails, it keeps the priority it was born with.
local function lower_priority()
  local jit_ = rawget(_G, "jit")
  local has_ffi, ffi = pcall(require, "ffi")
  if type(jit_) ~= "table" or not has_ffi then return false end
  local ok, lowered = pcall(function()
    if jit_.os == "Windows" then
      ffi.cdef "void * __stdcall GetCurrentThread(void); int __stdcall SetThreadPriority(void *, int);"
      return ffi.C.SetThreadPriority(ffi.C.GetCurrentThread(), -1) ~= 0 -- (THREAD_PRIORITY_BELOW_NORMAL)
    elseif jit_.os == "OSX" then -- (macOS and iOS)
      ffi.cdef "int pthread_set_qos_class_self_np(unsigned int, int);"
      return ffi.C.pthread_set_qos_class_self_np(0x11, 0) == 0 -- (QOS_CLASS_UTILITY)
    elseif jit_.os == "Linux" then -- (Android too: a nice value is a thread's own there, and 0 is this one)
      ffi.cdef "int setpriority(int, unsigned int, int);"
      return ffi.C.setpriority(0, 0, 19) == 0
    end
    return false
  end)
  return ok and lowered
end
lower_priority()
local P = load_text(ports_bytes, "=stagehand.core.love_ports")({
  new_channel = love.thread.newChannel, now = now, stopped = stopped, waiting = waiting, check = why_not,
})
local got_of = P.got_of
local api = {}
function api.stopping() return stopped() end
function api.progress(done, total)
  if done ~= nil or total ~= nil then
    if type(done) ~= "number" or not (done >= 0) or done == math.huge then
      error("bad argument 'done' to worker.progress: expected a finite number >= 0, got " .. got_of(done), 2)
    end
    if type(total) ~= "number" or not (total >= done) or total == math.huge then
      error(string.format("bad argument 'total' to worker.progress: expected a finite number >= done (%f), got %s",
        done, got_of(total)), 2)
    end
  else
    done, total = -1, -1
  end
  if current >= 0 then
    events:push({ 2, current, done, total })
    ring()
  end
end
function api.sleep(ms)
  if type(ms) ~= "number" or not (ms >= 0) then
    error("bad argument 'ms' to worker.sleep: expected a number >= 0, got " .. got_of(ms), 2)
  end
  local untl = now() + ms
  waiting("a sleep")
  while not stopped() do
    local left = untl - now()
    if left <= 0 then break end
    love.timer.sleep((left > 10 and 10 or left) / 1000)
  end
  waiting(nil)
  return not stopped()
end
api.port = P.port
package.preload["stagehand.worker"] = function() return api end
package.path = path
local mod, load_err
do
  local ok, got = pcall(function()
    local m
    if source then
      local f, err = load_text(source, "=" .. module)
      if not f then error(err, 0) end
      m = f(module)
    else
      -- (called through pcall, require's message carries no position of
      -- this chunk's: it names only the module and where it looked)
      local found, got = pcall(require, module)
      if not found then error(got, 0) end
      m = got
    end
    if type(m) ~= "table" then error("it returned " .. type(m) .. ", not a table of functions", 0) end
    return m
  end)
  if ok then mod = got else load_err = tostring(got) end
end
local function said(e)
  if type(e) == "string" or type(e) == "number" then return tostring(e) end
  local mt = getmetatable(e)
  if mt and mt.__tostring then
    local ok, s = pcall(tostring, e)
    if ok and type(s) == "string" then return s end
  end
  if type(e) == "table" and type(e.message) == "string" then return e.message end
  return "(a " .. type(e) .. " was raised)"
end
-- (the traceback ends at the call that ran the request: what lies below
-- it, this thread's loop, is none of the game's)
local raised, handled
local function handler(e)
  raised, handled = e, true
  local tb = debug.traceback(said(e), 2)
  local _, cut = tb:find("\n[^\n]*in function 'xpcall'[^\n]*")
  return cut and tb:sub(1, cut) or tb
end
local function take_one(c)
  local e = c:pop()
  if e ~= nil and e ~= "stop" then taken:push({ e[1], idx }) end
  return e
end
local function run(e)
  local id, fn, n = e[1], e[2], e[3]
  local moved = e.objects -- (the payload holds LÖVE objects: _stage found them)
  current = id
  if e.graph then -- (the values hold a table twice: e[4] is their graph)
    local t = P.relink(e[4])
    for i = 1, n do e[i + 3] = t[i] end
  elseif e.cross then -- (the payload holds ports or round barriers: this state's own for each)
    for i = 4, n + 3 do e[i] = P.relink(e[i]) end
  end
  events:push({ 1, id })
  ring()
  waiting(nil)
  local res
  if not mod then
    res = { n = 2, false, "module '" .. module .. "' failed to load: " .. load_err }
  elseif type(mod[fn]) ~= "function" then
    res = { n = 2, false, "module '" .. module .. "' has no function '" .. tostring(fn) .. "'" }
  else
    raised, handled = nil, false
    local f = mod[fn]
    res = { n = 0 }
    local function after(ok, ...)
      res.n = select("#", ...) + 1
      res[1] = ok
      for i = 1, res.n - 1 do res[i + 1] = (select(i, ...)) end
    end
    after(xpcall(function() return f(unpack(e, 4, n + 3)) end, handler))
  end
  if res[1] then
    local why, objs, cross, shared = why_not("result", true, 2, res.n, unpack(res, 1, res.n))
    moved = moved or objs
    if why then
      events:push({ 4, id, why, why })
    else
      local out = { n = res.n - 1 }
      for i = 2, res.n do out[i - 1] = res[i] end
      if shared then out, cross = P.pack(out), true end
      if not pcall(events.push, events, { 3, id, out, cross or nil }) then
        events:push({ 4, id, "result cannot cross threads", "result cannot cross threads" })
      end
    end
  else
    local msg, tb = res[2], res[3] or res[2]
    -- (the function raised: the cause is what it raised, as the native
    -- core says it, and the handler's traceback goes apart; a handler that
    -- could not run, the stack overflowing, left xpcall's own message)
    if handled then msg = said(raised) end
    local cause = raised
    local plain, cross = type(cause) == "table" and getmetatable(cause) == nil, false
    if plain then
      local why, _, holds, shared = why_not("error", true, 1, 1, cause)
      plain, cross = not why, holds or shared
      if plain and shared then cause = P.pack(cause) end
    end
    if plain then
      if not pcall(events.push, events, { 4, id, cause, tb, cross or nil }) then
        events:push({ 4, id, said(cause), tb })
      end
    else
      events:push({ 4, id, type(msg) == "string" and msg or said(msg), type(tb) == "string" and tb or said(msg) })
    end
  end
  raised, handled, res, e = nil, false, nil, nil
  current = -1
  waiting(nil)
  ring()
  -- (the objects it moved are let go of now, not when this state happens
  -- to collect: each may hold a texture's pixels)
  if moved then collectgarbage() end
end
while true do
  if ctl:peek() == -1 then break end
  local e = offers:performAtomic(take_one)
  if e == "stop" then break end
  if e == nil then bell:demand(0.05) else run(e) end
end
end)
if not ok_all then failures:push({ idx, tostring(err_all) }) end
events:push({ 5, idx })
if news:getCount() == 0 then news:push(true) end
]]
M.CHECK = CHECK

---------------------------------------------------------------------------
-- A pool, as the game's side holds it: the methods of lpool.c's.

local Work = {}
Work.__index = Work
local EVENT_BATCH = 256 -- (lpool.c's)

function M.pool(notifier, module, source, path)
  if type(module) ~= "string" then error("bad argument 'module' to pool: expected a string", 2) end
  return setmetatable({
    pure = true, module = module, source = source, path = path, notifier = notifier,
    chans = { offers = new_channel(), taken = new_channel(), bell = new_channel(), events = new_channel(),
      news = notifier.ch, failures = new_channel() },
    ctl = {}, info = {}, halted = {}, nworkers = 0, live = 0, closed = false,
    staged = nil, staged_seq = 0,
    slot_of = {}, entry_of = {}, next_slot = 0, nheld = 0, -- held requests (id -> slot, id -> entry)
    offered = {}, -- id -> true while in the offer
    running = {}, -- id -> the worker that took it, until its reply is read
    nrunning = 0,
  }, Work)
end

-- Reads what workers took since the last look: each leaves the held.
function Work:_sync()
  local taken = self.chans.taken
  local t = taken:pop()
  while t ~= nil do
    local id, idx = t[1], t[2]
    if self.slot_of[id] then
      self.slot_of[id], self.entry_of[id] = nil, nil
      self.nheld = self.nheld - 1
    end
    self.offered[id] = nil
    if not self.running[id] then
      self.running[id] = idx
      self.nrunning = self.nrunning + 1
    end
    t = taken:pop()
  end
end

function Work:_add_worker()
  if self.closed then error("the pool is closed", 2) end
  local idx = self.nworkers
  self.nworkers = idx + 1
  self.ctl[idx], self.info[idx] = new_channel(), new_channel()
  self.live = self.live + 1
  return idx, idx + 1 -- (a token: love_threads.start starts the thread, with boot_args)
end

--- What love_threads.start passes to worker idx's thread.
function Work:_boot_args(idx)
  return idx, self.chans, self.ctl[idx], self.info[idx], self.module, self.source, self.path or package.path, CHECK,
    love_ports.bytes
end

-- A copy of v as a channel would make it (checked already: no table
-- met twice), LÖVE objects kept as themselves: a request is copied when
-- it is made, so what the game changes afterwards is not what the worker
-- gets. (Values that hold a table twice are packed instead, which copies
-- them as well.)
local function copy(v)
  if type(v) ~= "table" or rawget(v, P.MARK) ~= nil then return v end -- (a port: itself)
  local t = {}
  for k, x in each, v do t[copy(k)] = copy(x) end
  return t
end

function Work:_stage(_, root, fn_name, ...)
  local n = select("#", ...)
  local why, objects, cross, shared = why_not(root, true, 1, n, ...)
  if why then return nil, why end
  self.staged_seq = self.staged_seq + 1
  local e
  if shared then -- (all of them in one graph: a table shared between two arguments stays one)
    e = { 0, fn_name, n, P.pack({ ... }) }
    e.graph = true
  else
    e = { 0, fn_name, n, ... }
    e.cross = cross or nil
    for i = 4, n + 3 do e[i] = copy(e[i]) end
  end
  e.objects = objects or nil
  self.staged = e
  return self.staged_seq
end

local function take_staged(self, seq, id)
  local e = self.staged
  if not e or seq ~= self.staged_seq then return nil end
  self.staged = nil
  e[1] = id
  return e
end

function Work:_hold(seq, id)
  local e = take_staged(self, seq, id)
  if not e then return nil end
  if self.closed then return false end
  local slot = self.next_slot
  self.next_slot = slot + 1
  self.slot_of[id], self.entry_of[id] = slot, e
  self.nheld = self.nheld + 1
  return slot
end

function Work:_commit(seq, id)
  local e = take_staged(self, seq, id)
  if not e then return nil end
  if self.closed then return false end
  self.chans.offers:push(e)
  self.chans.bell:push(true)
  return true
end

function Work:_held(slot, id)
  self:_sync()
  return self.slot_of[id] == slot
end

function Work:_drop(slot, id)
  self:_sync()
  if self.slot_of[id] ~= slot then return false end
  if self.offered[id] then
    -- (taken out of the offer, unless a worker takes it first)
    local gone = false
    self.chans.offers:performAtomic(function(c)
      for _ = 1, c:getCount() do
        local e = c:pop()
        if e[1] == id then gone = true else c:push(e) end
      end
    end)
    self:_sync()
    if not gone then return false end
    self.offered[id] = nil
  end
  self.slot_of[id], self.entry_of[id] = nil, nil
  self.nheld = self.nheld - 1
  return true
end

function Work:_offer(list, n)
  local left = 0
  local offers = self.chans.offers
  offers:performAtomic(function(c)
    left = c:getCount()
    c:clear()
  end)
  self:_sync()
  self.offered = {}
  if self.closed then return left end
  local pushed = 0
  offers:performAtomic(function(c)
    for i = 1, n do
      local slot, id = list[2 * i - 1], list[2 * i]
      if self.slot_of[id] == slot then
        c:push(self.entry_of[id])
        self.offered[id] = true
        pushed = pushed + 1
      end
    end
  end)
  local bell = self.chans.bell
  bell:clear()
  for _ = 1, math.min(pushed, self.live) do bell:push(true) end
  return left
end

function Work:_offered() return self.chans.offers:getCount() end

-- Worker idx's control: -1 (stop and exit: for good, never replaced), -2
-- (halted: every request it runs is told to stop; replaced only by -1)
-- or the id of its request that was aborted.
local function set_ctl(self, idx, v)
  local was = self.halted[idx]
  if was == -1 or (was == -2 and v ~= -1) then return end
  if v < 0 then self.halted[idx] = v end
  self.ctl[idx]:performAtomic(function(c)
    c:clear()
    c:push(v)
  end)
end

function Work:_abort(id, retire)
  self:_sync()
  local idx = self.running[id]
  if not idx then return nil end
  set_ctl(self, idx, retire and -1 or id)
  return idx
end

function Work:_counts()
  self:_sync()
  return self.nheld, self.nrunning, self.live
end

function Work:_pause() end -- (the grant rounds withdraw the offer: dispatch.withdraw)

function Work:_close()
  if self.closed then return end
  self.closed = true
  local offers = self.chans.offers
  offers:performAtomic(function(c)
    c:clear()
    for _ = 1, self.live do c:push("stop") end
  end)
  for idx = 0, self.nworkers - 1 do set_ctl(self, idx, -1) end
  for _ = 1, self.live do self.chans.bell:push(true) end
end

-- (as the native core's: a stopped worker still takes what is queued,
-- told to stop; with `retire` it exits once its request returns)
function Work:_stop_worker(i, retire)
  if self.ctl[i] then set_ctl(self, i, retire and -1 or -2) end
end

function Work:_drain(buf, _)
  self:_sync()
  local events = self.chans.events
  local n = 0
  while n < EVENT_BATCH do
    local ev = events:pop()
    if ev == nil then break end
    local kind, id = ev[1], ev[2]
    local k = n * 3
    if kind == 5 then
      self.live = self.live - 1
    elseif kind == 2 then
      buf[k + 2], buf[k + 3] = ev[3], ev[4]
    elseif kind == 3 or kind == 4 then
      if self.running[id] then
        self.running[id] = nil
        self.nrunning = self.nrunning - 1
      end
      if kind == 4 then
        buf[k + 2], buf[k + 3] = ev[5] and P.relink(ev[3]) or ev[3], ev[4]
      else
        local out = ev[4] and P.relink(ev[3]) or ev[3]
        if out.n == 1 then
          kind = 6
          buf[k + 2] = out[1]
        else
          buf[k + 2] = out
        end
      end
    end
    buf[k + 1] = id * 8 + kind
    n = n + 1
  end
  return n
end

function Work:_worker(i)
  local ch = self.info[i]
  local s = ch and ch:peek()
  if not s then return nil end
  local cur = s[1] ~= nil and s[1] >= 0 and s[1] or nil
  if s[2] then return cur, s[2], s[3] end
  return cur
end

-- (the pool gave up waiting for its workers: what waits in its channels
-- goes, and it takes new ones, so a late reply's objects are freed once
-- its thread ends, not kept as long as the game keeps the pool)
function Work:_detach()
  local c = self.chans
  c.offers:clear()
  c.taken:clear()
  c.events:clear()
  self.chans = { offers = new_channel(), taken = new_channel(), bell = new_channel(), events = new_channel(),
    news = c.news, failures = c.failures }
end
function Work:_unhost() return true end -- (a thread that failed has reported its exit)
function Work:_unserved() return 0 end
function Work:_objects() end

return M
