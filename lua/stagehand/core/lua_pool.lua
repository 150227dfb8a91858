-- The pure-Lua core's slot pools (lua_core.lua gathers it):
-- csrc/core/sh_pool.c, call for call, with the same statuses and the same
-- grant order, for programs that cannot load the native core. Waiters are
-- linked into their group's queue; groups with waiters are in an active
-- list and in a heap by (rank, arrival of their oldest waiter). The header
-- csrc/core/stagehand.h says what each call does. Arrays are indexed by
-- id + 1 (waiters) and group + 1 (groups); -1 ends a link, as in C.
local C = require "stagehand.core.lua_clock"

local each = require("stagehand.core.compat").each
local M = {}

local OK, EINVAL, ENOMEM, ESTATE = 0, -1, -2, -3
local MAX_ID = C.MAX_ID
local bad_id = C.bad_id
local floor = math.floor

function M.pool_new()
  return {
    capacity = 0, in_use = 0, waiting = 0,
    -- waiters: seq (0 or nil when not waiting), group, prev, next
    w_seq = {}, w_group = {}, w_prev = {}, w_next = {},
    -- groups (grown as in C, so a rank set on a group never queued in is
    -- refused alike): head, tail, count, rank, prev, next, fixed, hpos, read, unread
    g_head = {}, g_tail = {}, g_count = {}, g_rank = {}, g_prev = {}, g_next = {}, g_fixed = {},
    g_hpos = {}, g_read = {}, g_unread = {}, ngroups = 0,
    active = -1, next_seq = 1,
    heap = {}, heap_len = 0, stack = {}, stack_len = 0, epoch = 1,
    pk_id = {}, pk_group = {}, pk_seq = {}, npeeked = 0,
  }
end
function M.pool_free() end

local function better(p, a, b)
  local ra, rb = p.g_rank[a + 1], p.g_rank[b + 1]
  if ra ~= rb then return ra < rb end
  return p.w_seq[p.g_head[a + 1] + 1] < p.w_seq[p.g_head[b + 1] + 1]
end

local function hplace(p, i, g)
  p.heap[i] = g
  p.g_hpos[g + 1] = i
end

local function sift_up(p, i)
  local heap = p.heap
  local g = heap[i]
  while i > 1 do
    local up = floor(i / 2)
    if not better(p, g, heap[up]) then break end
    hplace(p, i, heap[up])
    i = up
  end
  hplace(p, i, g)
end

local function sift_down(p, i)
  local heap, len = p.heap, p.heap_len
  local g = heap[i]
  while true do
    local l = 2 * i
    if l > len then break end
    local b = l
    if l + 1 <= len and better(p, heap[l + 1], heap[l]) then b = l + 1 end
    if not better(p, heap[b], g) then break end
    hplace(p, i, heap[b])
    i = b
  end
  hplace(p, i, g)
end

local function reorder(p, g)
  local at = p.g_hpos[g + 1]
  if at == 0 then return end
  sift_up(p, at)
  sift_down(p, p.g_hpos[g + 1])
end

local function heap_del(p, g)
  local i = p.g_hpos[g + 1]
  local len = p.heap_len
  local last = p.heap[len]
  p.heap[len] = false -- (kept: see grow_groups)
  p.heap_len = len - 1
  p.g_hpos[g + 1] = 0
  if i < len then
    hplace(p, i, last)
    reorder(p, last)
  end
end

local function stack_unread(p, g)
  local k = g + 1
  if p.g_fixed[k] ~= 0 or p.g_unread[k] ~= 0 or p.g_read[k] == p.epoch then return end
  p.g_unread[k] = 1
  local n = p.stack_len + 1
  p.stack_len = n
  p.stack[n] = g
end

function M.pool_set_capacity(p, capacity)
  if bad_id(capacity) then return EINVAL end
  p.capacity = capacity
  return OK
end

function M.pool_capacity(p) return p.capacity end
function M.pool_in_use(p) return p.in_use end
function M.pool_waiting(p) return p.waiting end

function M.pool_try_acquire(p)
  if p.waiting > 0 or p.in_use >= p.capacity then return ESTATE end
  p.in_use = p.in_use + 1
  return OK
end

function M.pool_release(p)
  if p.in_use <= 0 then return ESTATE end
  p.in_use = p.in_use - 1
  return OK
end

function M.pool_reset_use(p)
  p.in_use = 0
  return OK
end

-- Out of memory: a write that makes a table grow raises, and the pool
-- must stay whole, as the native core's does (it changes nothing until it
-- has the memory). So the memory is made first: a group's entries, and
-- room in the heap and the stack (each holds a group at most once), when
-- the groups grow; a waiter's entries before it is linked (pool_enqueue).
-- Linking, unlinking and moving then write only keys that exist, which
-- needs none; entries that go are set to false or a value, never nil, so
-- their keys stay.
local function grow_groups(p, g)
  local have = p.ngroups
  if g < have then return end
  local n = have > 0 and have or 8
  while n <= g do n = n * 2 end
  local heap, stack = p.heap, p.stack
  for k = have + 1, n do
    p.g_head[k], p.g_tail[k], p.g_prev[k], p.g_next[k] = -1, -1, -1, -1
    p.g_count[k], p.g_rank[k], p.g_fixed[k], p.g_hpos[k], p.g_read[k], p.g_unread[k] = 0, 0, 0, 0, 0, 0
    if heap[k] == nil then heap[k] = false end
    if stack[k] == nil then stack[k] = false end
  end
  p.ngroups = n -- (last: a growth cut short is made again)
end

local function waiting_id(p, id)
  if bad_id(id) then return false end
  local s = p.w_seq[id + 1]
  return s ~= nil and s ~= 0
end

local function joined(p, g)
  local k = g + 1
  local n = p.g_count[k]
  p.g_count[k] = n + 1
  if n == 0 then
    p.g_prev[k] = -1
    p.g_next[k] = p.active
    if p.active >= 0 then p.g_prev[p.active + 1] = g end
    p.active = g
    local len = p.heap_len + 1
    p.heap_len = len
    hplace(p, len, g)
    sift_up(p, len)
    stack_unread(p, g)
  end
  p.waiting = p.waiting + 1
end

function M.pool_enqueue(p, id, g)
  if bad_id(id) or bad_id(g) then return EINVAL end
  grow_groups(p, g)
  local i = id + 1
  local s = p.w_seq[i]
  if s ~= nil and s ~= 0 then return ESTATE end
  local k = g + 1
  -- (its entries first, its seq, which says it waits, the last of them:
  -- see grow_groups)
  local tail = p.g_tail[k]
  p.w_group[i], p.w_next[i], p.w_prev[i] = g, -1, tail
  s = p.next_seq
  p.w_seq[i] = s
  p.next_seq = s + 1
  if tail >= 0 then p.w_next[tail + 1] = id else p.g_head[k] = id end
  p.g_tail[k] = id
  joined(p, g)
  return OK
end

local function remove(p, id)
  local i = id + 1
  local g = p.w_group[i]
  local k = g + 1
  local prev, nxt = p.w_prev[i], p.w_next[i]
  if prev >= 0 then p.w_next[prev + 1] = nxt else p.g_head[k] = nxt end
  if nxt >= 0 then p.w_prev[nxt + 1] = prev else p.g_tail[k] = prev end
  local n = p.g_count[k] - 1
  p.g_count[k] = n
  if n == 0 then
    local gp, gn = p.g_prev[k], p.g_next[k]
    if gp >= 0 then p.g_next[gp + 1] = gn else p.active = gn end
    if gn >= 0 then p.g_prev[gn + 1] = gp end
    p.g_prev[k], p.g_next[k] = -1, -1
    heap_del(p, g)
  elseif prev < 0 then
    reorder(p, g)
  end
  p.w_seq[i] = 0
  p.w_prev[i], p.w_next[i] = -1, -1
  p.waiting = p.waiting - 1
end

function M.pool_remove(p, id)
  if not waiting_id(p, id) then return ESTATE end
  remove(p, id)
  return OK
end

local function link_after(p, id, g, seq, at)
  local i, k = id + 1, g + 1
  p.w_seq[i], p.w_group[i], p.w_prev[i] = seq, g, at
  local nxt
  if at >= 0 then nxt = p.w_next[at + 1] else nxt = p.g_head[k] end
  p.w_next[i] = nxt
  if nxt >= 0 then p.w_prev[nxt + 1] = id else p.g_tail[k] = id end
  if at >= 0 then p.w_next[at + 1] = id else p.g_head[k] = id end
  joined(p, g)
  if at < 0 and p.g_count[k] > 1 then reorder(p, g) end
end

function M.pool_move(p, id, g)
  if bad_id(g) then return EINVAL end
  if not waiting_id(p, id) then return ESTATE end
  if p.w_group[id + 1] == g then return OK end
  grow_groups(p, g)
  local seq = p.w_seq[id + 1]
  remove(p, id)
  local at = p.g_tail[g + 1]
  while at >= 0 and p.w_seq[at + 1] > seq do at = p.w_prev[at + 1] end
  link_after(p, id, g, seq, at)
  return OK
end

function M.pool_group_of(p, id)
  if not waiting_id(p, id) then return -1 end
  return p.w_group[id + 1]
end

function M.pool_is_waiting(p, id) return waiting_id(p, id) and 1 or 0 end

function M.pool_next_group(p, after)
  if bad_id(after) then return p.active end -- (what the C module makes of -1, and of anything out of range)
  if after >= p.ngroups or p.g_count[after + 1] == 0 then return -1 end
  return p.g_next[after + 1]
end

function M.pool_set_rank(p, g, rank)
  if bad_id(g) or g >= p.ngroups or type(rank) ~= "number" or rank ~= rank then return EINVAL end
  p.g_rank[g + 1] = rank
  p.g_read[g + 1] = p.epoch
  reorder(p, g)
  return OK
end

function M.pool_fix_rank(p, g, rank)
  if bad_id(g) or type(rank) ~= "number" or rank ~= rank then return EINVAL end
  grow_groups(p, g)
  local k = g + 1
  if p.g_fixed[k] ~= 0 and p.g_rank[k] == rank then return OK end
  p.g_rank[k] = rank
  p.g_fixed[k] = 1
  reorder(p, g)
  return OK
end

function M.pool_new_reads(p)
  p.epoch = p.epoch + 1
  local stack = p.stack
  for n = 1, p.stack_len do
    p.g_unread[stack[n] + 1] = 0
    stack[n] = false
  end
  p.stack_len = 0
  local heap = p.heap
  for n = 1, p.heap_len do stack_unread(p, heap[n]) end
  return OK
end

function M.pool_next_unread(p)
  local stack = p.stack
  while p.stack_len > 0 do
    local n = p.stack_len
    local g = stack[n]
    stack[n] = false
    p.stack_len = n - 1
    local k = g + 1
    p.g_unread[k] = 0
    if p.g_count[k] > 0 and p.g_fixed[k] == 0 and p.g_read[k] ~= p.epoch then return g end
  end
  return -1
end

function M.pool_reread(p, g)
  if bad_id(g) then return EINVAL end
  if g >= p.ngroups then return OK end
  local k = g + 1
  p.g_read[k] = p.epoch - 1
  if p.g_count[k] > 0 then stack_unread(p, g) end
  return OK
end

function M.pool_forget_group(p, g)
  if bad_id(g) then return EINVAL end
  if g >= p.ngroups then return OK end
  local k = g + 1
  if p.g_count[k] ~= 0 then return ESTATE end
  p.g_rank[k], p.g_fixed[k], p.g_read[k] = 0, 0, 0
  return OK
end

function M.pool_next_live(p, after)
  local g = M.pool_next_group(p, after)
  while g >= 0 and p.g_fixed[g + 1] ~= 0 do g = p.g_next[g + 1] end
  return g
end

function M.pool_grantable(p)
  local free = p.capacity - p.in_use
  if free <= 0 then return 0 end
  return p.waiting < free and p.waiting or free
end

function M.pool_best(p)
  if p.heap_len == 0 then return -1 end
  return p.g_head[p.heap[1] + 1]
end

function M.pool_rank_of(p, id)
  if not waiting_id(p, id) then return 0 end
  return p.g_rank[p.w_group[id + 1] + 1]
end

function M.pool_arrival(p, id)
  if not waiting_id(p, id) then return -1 end
  return p.w_seq[id + 1]
end

function M.pool_peek_next(p)
  if p.heap_len == 0 then return -1 end
  local id = p.g_head[p.heap[1] + 1]
  local n = p.npeeked + 1
  p.pk_id[n], p.pk_group[n], p.pk_seq[n] = id, p.w_group[id + 1], p.w_seq[id + 1] -- (then counted)
  p.npeeked = n
  remove(p, id)
  return id
end

function M.pool_peek_end(p)
  while p.npeeked > 0 do
    local n = p.npeeked
    p.npeeked = n - 1
    local id, g, seq = p.pk_id[n], p.pk_group[n], p.pk_seq[n]
    if not waiting_id(p, id) then
      local at, nx = -1, p.g_head[g + 1]
      while nx >= 0 and p.w_seq[nx + 1] < seq do
        at = nx
        nx = p.w_next[nx + 1]
      end
      link_after(p, id, g, seq, at)
    end
  end
  return OK
end

function M.pool_grant(p, id)
  if p.in_use >= p.capacity then return ESTATE end
  if not waiting_id(p, id) then return ESTATE end
  remove(p, id)
  p.in_use = p.in_use + 1
  return OK
end

function M.pool_check(p)
  if p.in_use < 0 or p.capacity < 0 or p.waiting < 0 then return ESTATE end
  local total, nactive = 0, 0
  local g = p.active
  while g >= 0 do
    local k = g + 1
    if p.g_count[k] <= 0 then return ESTATE end
    local gn = p.g_next[k]
    if gn >= 0 and p.g_prev[gn + 1] ~= g then return ESTATE end
    local id, n, prev, last = p.g_head[k], 0, -1, 0
    while id >= 0 do
      local i = id + 1
      if p.w_group[i] ~= g or p.w_prev[i] ~= prev or p.w_seq[i] <= last then return ESTATE end
      last, prev, n = p.w_seq[i], id, n + 1
      id = p.w_next[i]
    end
    if n ~= p.g_count[k] or p.g_tail[k] ~= prev then return ESTATE end
    total = total + n
    local at = p.g_hpos[k]
    if at <= 0 or at > p.heap_len or p.heap[at] ~= g then return ESTATE end
    nactive = nactive + 1
    g = gn
  end
  if total ~= p.waiting or nactive ~= p.heap_len then return ESTATE end
  for i = 2, p.heap_len do
    if better(p, p.heap[i], p.heap[floor(i / 2)]) then return ESTATE end
  end
  for n = 1, p.stack_len do
    if p.g_unread[p.stack[n] + 1] == 0 then return ESTATE end
  end
  for _, s in each, p.w_seq do
    if s ~= 0 then total = total - 1 end
  end
  return total == 0 and OK or ESTATE
end

M.MAX_ID, M.ENOMEM = MAX_ID, ENOMEM

return M
