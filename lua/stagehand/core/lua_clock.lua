-- The pure-Lua core's stall clocks and sleep timers (lua_core.lua gathers
-- it): csrc/core/sh_clock.c, sh_timer.c and sh_heap.c, call for call, with
-- the same statuses and the same order of equal deadlines, for programs
-- that cannot load the native core. Ids are the caller's (0 and up);
-- arrays are indexed by id + 1. The header csrc/core/stagehand.h says what
-- each call does; the comments here say only where Lua differs.
local each = require("stagehand.core.compat").each
local M = {}

local OK, EINVAL, ESTATE = 0, -1, -3
local MAX_ID = 16777216 -- (SH_MAX_ID, 2^24)
local HUGE = math.huge
local floor = math.floor

M.MAX_ID = MAX_ID

-- A whole number from 0 to MAX_ID - 1 (what the C module's check_id lets
-- through; anything else reaches the core as -1).
local function bad_id(id)
  return type(id) ~= "number" or not (id >= 0 and id < MAX_ID) or id % 1 ~= 0
end
M.bad_id = bad_id

local function valid_time(t)
  return type(t) == "number" and t == t and t ~= HUGE and t ~= -HUGE
end

-- An indexed binary min-heap of ids: key, then seq (a tie given by the
-- caller, or the filing order). Items at 1..len in three arrays; pos[id +
-- 1] is an item's index, nil when the id is not filed.
local function heap_new()
  return { key = {}, seq = {}, ids = {}, pos = {}, len = 0, next_seq = 0 }
end

local function less(ka, sa, kb, sb)
  if ka ~= kb then return ka < kb end
  return sa < sb
end

local function sift_up(h, i)
  local key, seq, ids, pos = h.key, h.seq, h.ids, h.pos
  local k, s, id = key[i], seq[i], ids[i]
  while i > 1 do
    local up = floor(i / 2)
    local uk, us = key[up], seq[up]
    if not less(k, s, uk, us) then break end
    local uid = ids[up]
    key[i], seq[i], ids[i] = uk, us, uid
    pos[uid + 1] = i
    i = up
  end
  key[i], seq[i], ids[i] = k, s, id
  pos[id + 1] = i
end

local function sift_down(h, i)
  local key, seq, ids, pos, len = h.key, h.seq, h.ids, h.pos, h.len
  local k, s, id = key[i], seq[i], ids[i]
  while true do
    local l = 2 * i
    if l > len then break end
    local m, mk, ms = l, key[l], seq[l]
    local r = l + 1
    if r <= len and less(key[r], seq[r], mk, ms) then m, mk, ms = r, key[r], seq[r] end
    if not less(mk, ms, k, s) then break end
    local mid = ids[m]
    key[i], seq[i], ids[i] = mk, ms, mid
    pos[mid + 1] = i
    i = m
  end
  key[i], seq[i], ids[i] = k, s, id
  pos[id + 1] = i
end

-- Out of memory: a write that makes a table grow raises, and the core's
-- structures must stay whole, as the native core's do (it changes nothing
-- until it has the memory). So each call writes what may need memory first,
-- where nothing reads it yet (past len, an id's data before its state),
-- and the writes that make it seen last; removing and moving entries
-- writes only keys that exist, which needs none.
local function heap_insert(h, id, key, tie)
  local i = h.len + 1
  h.key[i], h.seq[i], h.ids[i] = key, tie, id -- (past len: unseen until it moves)
  h.pos[id + 1] = i -- (the last write that may need memory)
  h.len = i
  sift_up(h, i)
end

local function heap_rekey(h, id, key, tie)
  local i = h.pos[id + 1]
  local was_k, was_s = h.key[i], h.seq[i]
  h.key[i], h.seq[i] = key, tie
  if less(key, tie, was_k, was_s) then sift_up(h, i) else sift_down(h, i) end
end

local function heap_remove(h, id)
  local pos = h.pos
  local i = pos[id + 1]
  pos[id + 1] = nil
  local len = h.len
  h.len = len - 1
  local key, seq, ids = h.key, h.seq, h.ids
  if i == len then
    key[len], seq[len], ids[len] = nil, nil, nil
    return
  end
  key[i], seq[i], ids[i] = key[len], seq[len], ids[len]
  pos[ids[i] + 1] = i
  key[len], seq[len], ids[len] = nil, nil, nil
  local up = floor(i / 2)
  if i > 1 and less(key[i], seq[i], key[up], seq[up]) then sift_up(h, i) else sift_down(h, i) end
end

local function heap_check(h)
  local n = 0
  for i = 1, h.len do
    local id = h.ids[i]
    if h.pos[id + 1] ~= i then return false end
    local up = floor(i / 2)
    if i > 1 and less(h.key[i], h.seq[i], h.key[up], h.seq[up]) then return false end
  end
  for _ in each, h.pos do n = n + 1 end
  return n == h.len
end

-- Stall clocks. An entry's fields are arrays by id + 1: state (nil free,
-- RUNNING, PAUSED), last, stall (kept once stopped), order, joined, group.
local RUNNING, PAUSED = 1, 2

function M.clock_new()
  return { heap = heap_new(), state = {}, last = {}, stall = {}, order = {}, joined = {}, group = {},
    count = 0, g_last = {}, g_seq = {}, ngroups = 0, touches = 0, starts = 0,
    visible = 1, vis_acc = 0, vis_since = 0, vis_high = -HUGE }
end
function M.clock_free() end

local function vnow(c, now)
  local t = c.visible == 1 and c.vis_acc + (now - c.vis_since) or c.vis_acc
  return t > c.vis_high and t or c.vis_high
end

local function vrecord(c, now)
  local t = vnow(c, now)
  c.vis_high = t
  return t
end

local function last_of(c, i)
  local g = c.group[i]
  if g >= 0 and g < c.ngroups then
    local gl = c.g_last[g + 1]
    if c.g_seq[g + 1] > c.joined[i] and gl > c.last[i] then return gl end
  end
  return c.last[i]
end

local function start(c, id, stall_ms, now, order)
  if not valid_time(now) or type(stall_ms) ~= "number" or stall_ms ~= stall_ms or stall_ms <= 0 then return EINVAL end
  if bad_id(id) then return EINVAL end
  local i = id + 1
  if c.state[i] then return ESTATE end
  -- (the id's data, then its filing, then its state: see heap_insert)
  c.stall[i] = stall_ms
  local last = vrecord(c, now)
  c.last[i] = last
  c.group[i] = -1
  c.joined[i] = c.joined[i] or 0
  if not order then order = c.starts + 1 end
  c.order[i] = order
  local h, due = c.heap, last + stall_ms
  local at = h.pos[i]
  if at then -- (filed still from a clock that stopped lazily: sh_clock.c's start says why)
    if h.key[at] >= due then heap_rekey(h, id, due, order) end
  else
    heap_insert(h, id, due, order)
  end
  c.state[i] = RUNNING
  if order > c.starts then c.starts = order end
  c.count = c.count + 1
  return OK
end

function M.clock_start(c, id, stall_ms, now) return start(c, id, stall_ms, now, nil) end

function M.clock_restart(c, id, now)
  if bad_id(id) then return EINVAL end
  local i = id + 1
  local stall = c.stall[i]
  if c.state[i] or not (stall and stall > 0) then return EINVAL end
  return start(c, id, stall, now, c.order[i])
end

function M.clock_progress(c, id, now)
  if not valid_time(now) or bad_id(id) or not c.state[id + 1] then return EINVAL end
  c.last[id + 1] = vrecord(c, now)
  return OK
end

function M.clock_pause(c, id)
  if bad_id(id) or not c.state[id + 1] then return EINVAL end
  c.state[id + 1] = PAUSED
  return OK
end

function M.clock_resume(c, id, now)
  if not valid_time(now) or bad_id(id) or not c.state[id + 1] then return EINVAL end
  local i = id + 1
  local last = vrecord(c, now)
  -- (filed first: see heap_insert; a paused id filed is passed over)
  if not c.heap.pos[i] then heap_insert(c.heap, id, last + c.stall[i], c.order[i]) end
  c.state[i] = RUNNING
  c.last[i] = last
  return OK
end

function M.clock_stop(c, id)
  if bad_id(id) or not c.state[id + 1] then return EINVAL end
  c.state[id + 1] = nil
  c.count = c.count - 1
  return OK
end

function M.clock_set_visible(c, visible, now)
  if not valid_time(now) then return EINVAL end
  visible = visible and 1 or 0 -- (Lua's truth, as the C module reads it: 0 shows)
  if visible == c.visible then return OK end
  if visible == 1 then
    c.vis_since = now
  else
    c.vis_acc = vrecord(c, now)
  end
  c.visible = visible
  return OK
end

function M.clock_visible(c) return c.visible end

function M.clock_visible_time(c, now)
  if not valid_time(now) then return -1 end
  return vnow(c, now)
end

function M.clock_next_due(c, now)
  if c.visible ~= 1 or not valid_time(now) then return -1 end
  local h = c.heap
  if h.len == 0 then return -1 end
  local key = h.key[1]
  if key == HUGE or key == -HUGE then return -1 end
  local d = key - vnow(c, now)
  return d > 0 and d or 0
end

function M.clock_pop_stalled(c, now)
  if c.visible ~= 1 or not valid_time(now) then return -1 end
  local t = vnow(c, now)
  local h = c.heap
  while h.len > 0 and h.key[1] <= t do
    local id = h.ids[1]
    local i = id + 1
    local due = last_of(c, i) + c.stall[i]
    if c.state[i] ~= RUNNING then
      heap_remove(h, id)
    elseif due == h.key[1] then
      heap_remove(h, id)
      c.state[i] = nil
      c.count = c.count - 1
      return id
    else
      heap_rekey(h, id, due, c.order[i])
    end
  end
  return -1
end

function M.clock_stall_ms(c, id)
  if bad_id(id) then return -1 end
  local s = c.stall[id + 1]
  if not (s and s > 0) then return -1 end
  return s
end

function M.clock_count(c) return c.count end

function M.clock_join(c, id, group)
  if type(group) ~= "number" or group % 1 ~= 0 or group < -1 or group >= MAX_ID then return EINVAL end
  if bad_id(id) or not c.state[id + 1] then return EINVAL end
  if group >= 0 and group >= c.ngroups then
    local n = c.ngroups > 0 and c.ngroups or 8
    while n <= group do n = n * 2 end
    for g = c.ngroups + 1, n do c.g_last[g], c.g_seq[g] = -HUGE, 0 end
    c.ngroups = n
  end
  local i = id + 1
  c.last[i] = last_of(c, i)
  c.group[i] = group
  c.joined[i] = c.touches
  return OK
end

function M.clock_touch(c, group, now)
  if bad_id(group) or not valid_time(now) then return EINVAL end
  if group >= c.ngroups then return OK end
  c.g_last[group + 1] = vrecord(c, now)
  local n = c.touches + 1
  c.touches = n
  c.g_seq[group + 1] = n
  return OK
end

function M.clock_check(c)
  local h = c.heap
  if not heap_check(h) then return ESTATE end
  local n = 0
  for i, state in each, c.state do
    n = n + 1
    local at = h.pos[i]
    if state == RUNNING and not at then return ESTATE end
    if c.last[i] > c.vis_high then return ESTATE end
    if at and state == RUNNING and h.key[at] > last_of(c, i) + c.stall[i] then return ESTATE end
  end
  return n == c.count and OK or ESTATE
end

-- Sleep timers: one per id, ties in the order they were added.
function M.timers_new() return { heap = heap_new() } end
function M.timers_free() end

function M.timers_add(t, id, due)
  if type(due) ~= "number" or due ~= due or due == HUGE or due == -HUGE then return EINVAL end
  if bad_id(id) then return EINVAL end
  local h = t.heap
  if h.pos[id + 1] then return ESTATE end
  local seq = h.next_seq
  h.next_seq = seq + 1
  heap_insert(h, id, due, seq)
  return OK
end

function M.timers_cancel(t, id)
  if bad_id(id) or not t.heap.pos[id + 1] then return ESTATE end
  heap_remove(t.heap, id)
  return OK
end

function M.timers_peek(t)
  local h = t.heap
  return h.len > 0 and h.key[1] or -1
end

function M.timers_pop(t, now)
  local h = t.heap
  if h.len == 0 or now ~= now or h.key[1] > now then return -1 end
  local id = h.ids[1]
  heap_remove(h, id)
  return id
end

function M.timers_count(t) return t.heap.len end

function M.timers_check(t) return heap_check(t.heap) and OK or ESTATE end

return M
