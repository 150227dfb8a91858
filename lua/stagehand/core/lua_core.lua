-- The pure-Lua core: the native core's data structures written in Lua,
-- for a program that cannot load stagehand/_core (LÖVE on iOS, Android
-- or the web, Defold, a Mac with no core built, a sandbox that loads no
-- C). Stall clocks and timers are lua_clock.lua, slot pools lua_pool.lua;
-- ids, key barriers and the system's calls are here. Every call takes and
-- returns what the C API's does (csrc/core/stagehand.h), statuses included,
-- so the layers above run unchanged; spec/lua_core_spec.lua drives both
-- with the same random calls and compares every answer.
--
-- What it cannot do is threads: worker pools, long-lived workers, ports
-- and round barriers need the native core, and raise saying so (init.lua),
-- except inside LÖVE, where love_work.lua and love_ports.lua run them on
-- LÖVE's threads and channels.
local compat = require "stagehand.core.compat"
local each = compat.each
local clock = require "stagehand.core.lua_clock"
local pool = require "stagehand.core.lua_pool"

local M = { name = "lua", SH_OK = 0, SH_EINVAL = -1, SH_ENOMEM = -2, SH_ESTATE = -3 }
for k, v in each, clock do M[k] = v end
for k, v in each, pool do M[k] = v end
M.MAX_ID, M.bad_id, M.ENOMEM = nil, nil, nil

local OK, EINVAL, ESTATE = 0, -1, -3
local MAX_ID = clock.MAX_ID
local bad_id = clock.bad_id
local floor = math.floor

-- Ids: always the lowest one free. Ids given back wait in a min-heap
-- (and a set, free[id] true, to refuse one given back twice); `high` is
-- the next id never taken. Giving an id back needs no memory (the engine
-- gives ids back as jobs end, memory or none): taking an id for the first
-- time makes its room in both, false until used.
function M.ids_new() return { high = 0, taken = 0, heap = {}, len = 0, free = {} } end
function M.ids_free() end

function M.ids_take(s)
  local len = s.len
  if len == 0 then
    local id = s.high
    if id >= MAX_ID then return ESTATE end
    s.free[id], s.heap[id + 1] = false, false -- (room for its giving back; may need memory)
    s.high = id + 1
    s.taken = s.taken + 1
    return id
  end
  local heap = s.heap
  local id, last = heap[1], heap[len]
  heap[len] = false
  len = len - 1
  s.len = len
  if len > 0 then -- (last sifts down from the top)
    local i = 1
    while true do
      local l = 2 * i
      if l > len then break end
      if l < len and heap[l + 1] < heap[l] then l = l + 1 end
      if heap[l] >= last then break end
      heap[i] = heap[l]
      i = l
    end
    heap[i] = last
  end
  s.free[id] = false
  s.taken = s.taken + 1
  return id
end

function M.ids_give(s, id)
  if bad_id(id) or id >= s.high then return EINVAL end
  if s.free[id] then return ESTATE end
  s.free[id] = true
  local heap = s.heap
  local i = s.len + 1
  s.len = i
  while i > 1 do
    local up = floor(i / 2)
    if heap[up] <= id then break end
    heap[i] = heap[up]
    i = up
  end
  heap[i] = id
  s.taken = s.taken - 1
  return OK
end

function M.ids_count(s) return s.taken end

function M.ids_check(s)
  local n = 0
  for id, free in each, s.free do
    if id >= s.high then return ESTATE end
    if free then n = n + 1 end
  end
  if n ~= s.len then return ESTATE end
  for i = 2, s.len do
    if s.heap[i] < s.heap[floor(i / 2)] or not s.free[s.heap[i]] then return ESTATE end
  end
  return s.taken == s.high - n and OK or ESTATE
end

-- Key barriers: which of `size` indices have arrived.
function M.barrier_new(size)
  if bad_id(size) then error("stagehand: cannot make a barrier of " .. tostring(size) .. " keys", 2) end
  return { size = size, arrived = 0, seen = {} }
end
function M.barrier_free() end

function M.barrier_arrive(b, index)
  if bad_id(index) or index >= b.size then return EINVAL end
  if b.seen[index] then return 0 end
  b.seen[index] = true
  b.arrived = b.arrived + 1
  return 1
end

function M.barrier_arrived(b) return b.arrived end
function M.barrier_size(b) return b.size end

function M.barrier_next_missing(b, after)
  local i = bad_id(after) and 0 or after + 1
  while i < b.size do
    if not b.seen[i] then return i end
    i = i + 1
  end
  return -1
end

-- The system's calls: the host's clock, cores and sleep, from what the
-- program has (LÖVE's love.timer and love.system, luv, LuaSocket, as
-- Defold has it); failing those, os.clock, which counts the CPU time the
-- program used (a game that gives stagehand.new a clock of its own does
-- not read it).
local function find_system()
  local love = rawget(_G, "love")
  local lt = type(love) == "table" and love.timer
  local ls = type(love) == "table" and love.system
  local now, sleep, cores
  if lt and lt.getTime then
    now = function() return lt.getTime() * 1000 end
    sleep = lt.sleep and function(ms) lt.sleep(ms / 1000) end
  end
  if ls and ls.getProcessorCount then cores = function() return ls.getProcessorCount() end end
  if not now then
    local ok, uv = compat.require_luv() -- (compat.lua says why not require "luv")
    if ok and type(uv) == "table" and uv.hrtime then
      now = function() return uv.hrtime() / 1e6 end
      sleep = function(ms) uv.sleep(floor(ms)) end
      cores = cores or uv.available_parallelism or (uv.cpu_info and function() return #uv.cpu_info() end)
    end
  end
  if not now then
    local socket = rawget(_G, "socket")
    if type(socket) ~= "table" or not socket.gettime then
      local ok, s = pcall(require, "socket")
      socket = ok and type(s) == "table" and s or nil
    end
    if socket and socket.gettime then
      now = function() return socket.gettime() * 1000 end
      sleep = socket.sleep and function(ms) socket.sleep(ms / 1000) end
    end
  end
  return now or function() return os.clock() * 1000 end, sleep or function() end, cores or function() return 1 end
end

local now, sleep, cores = find_system()
function M.now_ms() return now() end
function M.sleep_ms(ms) -- (as the C's: nothing for NaN or less, at most a day)
  if type(ms) == "number" and ms > 0 then sleep(ms < 86400e3 and ms or 86400e3) end
end
function M.cores()
  local ok, n = pcall(cores)
  n = ok and tonumber(n) or 1
  return n >= 1 and floor(n) or 1
end
function M.pin_library() return ESTATE end

return M
