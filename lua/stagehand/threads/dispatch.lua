-- Dispatch for worker pools (workers.lua). A grant round (slots.grant, in
-- the step) offers a pool's best queued requests, by effective priority
-- read then and queue order, to its workers: a free worker takes the first
-- at once, and a worker that finishes before the next step takes the next. So a frame's requests all
-- compete (nothing is offered until the step), and workers do not wait a
-- frame for work between steps.
--
-- How deep: one request a worker, plus a lookahead that starts at one a
-- worker and doubles while workers take everything offered before the
-- next round (short requests: a round trip to the main thread would idle
-- them), up to LOOKAHEAD a worker, and halves when most of it is left.
-- (Deep for tiny requests: each step reads every queued priority function,
-- so the fewer steps a queue takes to drain the fewer reads a request; 64
-- a worker read 36 functions a request over 4,000 closures, 512 reads 13.) A
-- round chooses the whole offer again, and a request that would go
-- before part of it (a new one, or one whose set of sources changed,
-- whose rank is known now, or bounded by a source that joined it: M.cut)
-- cuts that part off the offer at once: what a worker takes between
-- steps is never worse than what waits.
local B = require "stagehand.core.backend"
local F = require "stagehand.engine.fields"
local priority = require "stagehand.rank.priority"
local slots = require "stagehand.wait.slots"
local options = require "stagehand.engine.options"
local handle = require "stagehand.wait.handle"
local sources = require "stagehand.rank.sources"

local ID, WAITQ, STATE, LABEL = F.ID, F.WAITQ, F.STATE, F.LABEL

local M = {}

local LOOKAHEAD = 512
local pool_peek_next, pool_peek_end, pool_waiting = B.pool_peek_next, B.pool_peek_end, B.pool_waiting
local set_of, source_known, check = priority.set_of, priority.known_rank, B.check

-- The rank of group g if known without reading a function now: fixed, or
-- read in this step.
local function known_rank(o, q, g)
  local r = o.fixed_rank[g]
  if r then return r end
  if q.last_at[g] == o.round then return q.last[g] end
  return nil
end

-- Lists the best `want` waiters of q (peeked in the core) with a slot
-- held for their payload, in pool.offer_list and their ranks in
-- pool.offer_ranks; returns how many.
local function list_best(pool, o, p, q, want)
  local list, ranks, k = pool.offer_list, pool.offer_ranks, 0
  local holds, by_slot, fixed, last = pool.holds, o.by_slot, o.fixed_rank, q.last
  while k < want do
    local cid = pool_peek_next(p)
    if cid < 0 then break end
    local job = by_slot[cid]
    local id = job[ID]
    local slot = holds[id]
    if slot then
      k = k + 1
      list[2 * k - 1], list[2 * k] = slot, id
      local g = set_of(o, job)
      ranks[k] = fixed[g] or last[g] or math.huge
    end
  end
  return k
end

function M.offer_round(pool, q)
  if pool.destroyed then return end
  local o, p = pool.orch, q.p
  if pool_waiting(p) == 0 then return end
  -- (Paused, no worker takes anything: reading 20,000 closures a step would
  -- be for nothing. The first round after resume reads them, and re-offers
  -- if a rank moved meanwhile.)
  if pool.is_paused then return end
  slots.read_ranks(o, q) -- (each priority function once a step: runs game code)
  if pool.destroyed or q ~= pool.q or pool.is_paused then return end -- (game code paused it, say)
  local ud = pool.ud
  if not q.stale and ud:_offered() > 0 then return end -- (unchanged, and not yet taken up)
  local want = pool.live + pool.depth
  -- (The peek takes each waiter out of the core's queue until peek_end
  -- puts them back: it ends whatever the listing raises, memory running
  -- out as the lists grow, say, or the waiters would be lost.)
  local ok, k = pcall(list_best, pool, o, p, q, want)
  check(pool_peek_end(p), "end a peek")
  if not ok then error(k, 0) end
  local list = pool.offer_list
  local left = ud:_offer(list, k)
  local per = pool.size
  if left == 0 and pool.offer_k >= pool.offer_want and pool.offer_want > 0 then
    if pool.depth < LOOKAHEAD * per then pool.depth = pool.depth * 2 end
  elseif left * 2 > pool.offer_k and pool.depth > per then
    pool.depth = math.max(per, math.floor(pool.depth / 2))
  end
  pool.offer_k, pool.offer_want = k, want
  q.stale = false
end

-- A request whose rank (group g's) is known and goes before part of the
-- offer cuts that part off; an unknown one waits for the next round. A
-- request offered already (job) whose rank fell cuts the offer from its
-- own place. A source that joined a request's set (added) and whose rank
-- is known bounds the set's rank unknown yet: the set is at least that
-- high, so what the offer holds below it is cut off too (a visible HUD
-- that follows a queued mesh between steps takes the background rival
-- out of the way). A rank change that leaves the offer cut, or the rank
-- unknown, asks for another round: in a step, one later in the same step
-- reads the changed set and offers again.
function M.cut(pool, q, g, job, added)
  q.stale = true
  local k = pool.offer_k
  if k == 0 then return end
  local o = pool.orch
  local r = known_rank(o, q, g)
  local ranks, list = pool.offer_ranks, pool.offer_list
  local keep = k
  if job then
    local id = job[ID]
    for i = 1, k do
      if list[2 * i] == id then
        if r == nil or r > ranks[i] then keep = i - 1 end
        break
      end
    end
  end
  local bound = r
  if bound == nil and added then bound = source_known(o, added) end
  if bound ~= nil then
    while keep > 0 and ranks[keep] > bound do keep = keep - 1 end
  end
  if job and (r == nil or keep < k) then slots.dirty(o, q) end
  if keep == k then return end
  pool.ud:_offer(list, keep)
  pool.offer_k = keep
end

-- A pause withdraws the offer: it was ranked before the pause, and a
-- worker would take from it the moment the pool resumed, before the next
-- round ranked the queue again (a texture for where the player was).
function M.withdraw(pool)
  local q = pool.q
  if q then q.stale = true end
  if pool.offer_k == 0 then return end
  pool.ud:_offer(pool.offer_list, 0)
  pool.offer_k, pool.offer_want = 0, 0
end

-- The pool resumed: the pause withdrew the offer, so a round must offer
-- the queue again, and a host that sleeps until next_wake (or luv's loop)
-- must hear of it now, not at the next stall check.
function M.resumed(pool)
  local q, o = pool.q, pool.orch
  if not q or pool.destroyed or pool_waiting(q.p) == 0 then return end
  slots.dirty(o, q)
  if not o.stepping then o.driver.reschedule(o) end
end

-- A new request joins the queue: stale if it may belong in the offer (its
-- rank unknown yet, or the offer listed every request: there is room), and
-- if its rank is known and goes before the offer's last, what it goes
-- before is cut off at once, whether or not the offer is stale already
-- (it is the offer workers take from until the next round).
function M.queue(pool, job)
  local q = pool.q
  local o = pool.orch
  local g = slots.enqueue(o, q, job)
  local k = pool.offer_k
  local r = known_rank(o, q, g)
  if r == nil or k < pool.offer_want then q.stale = true end
  if r ~= nil and k > 0 and r < pool.offer_ranks[k] then M.cut(pool, q, g) end
end

---------------------------------------------------------------------------
-- pool:reprioritise: each queued request's own caller gets the priority
-- the game's function gives it; the next round offers by the new ranks.

-- Lists in `jobs` the requests still held in core queue p, peeked.
local function list_held(pool, p, jobs)
  local holds, ud, by_slot, cid = pool.holds, pool.ud, pool.orch.by_slot, pool_peek_next(p)
  while cid >= 0 do
    local job = by_slot[cid] -- (still held: one a worker took, its start not yet read, is running)
    if ud:_held(holds[job[ID]], job[ID]) then jobs[#jobs + 1] = job end
    cid = pool_peek_next(p)
  end
end

--- pool:reprioritise(fn), its arguments checked.
function M.reprioritise(pool, fn)
  local o, jobs, q = pool.orch, {}, pool.q -- (in queue order: by rank as last read, then arrival)
  if q and not pool.destroyed then
    -- (the peek takes each out of the core's queue until peek_end puts
    -- them back: ended whatever the listing raises, memory running out)
    local ok, err = pcall(list_held, pool, q.p, jobs)
    check(pool_peek_end(q.p), "end a peek")
    if not ok then error(err, 0) end
  end
  local new = {}
  for i = 1, #jobs do
    local job = jobs[i]
    local h = pool.own[job[ID]]
    local src = h and rawget(h, 2)
    if type(src) == "table" then src = src[1] end -- (a number's box)
    local p = fn(pool.payloads[job[ID]], src == nil and 0 or src)
    if not options.is_priority(o, p) then
      error("pool:reprioritise: fn returned " .. options.describe(p) .. " for a request of " .. job[LABEL]
        .. "; expected a rank name (" .. table.concat(o.ranks, ", ") .. "), a number or a function", 3)
    end
    new[i] = p
  end
  for i = 1, #jobs do
    local job = jobs[i]
    local h = pool.own[job[ID]]
    -- (its own caller still in: a caller that left took its priority along)
    if job[WAITQ] and h and not job[STATE] and rawget(job, rawget(h, 3)) == h then
      local p = new[i]
      if type(p) == "number" then p = handle.box(o, p) end
      local old = rawget(h, 2)
      sources.remove_caller(o, job, h)
      rawset(h, 2, p)
      local ok, err = pcall(sources.add_caller, o, job, h)
      if not ok then
        -- (memory ran out: the caller goes back as it was, and the counts
        -- are made anew from the callers before anything reads them)
        rawset(h, 2, old)
        local n = #job + 1
        job[n] = h
        rawset(h, 3, n)
        o.prio_broken = true
        error(err, 0)
      end
    end
  end
  if pool.q then slots.dirty(o, pool.q) end
  if not o.stepping then o.driver.reschedule(o) end
end

return M
