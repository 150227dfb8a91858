-- Bounded concurrency (slot pools) and bounded main-thread work per step
-- (budgets), over the core's sh_pool.
--
-- Waiters queue in C grouped by the set of priority sources that reach them
-- (priority.lua, Source sets): a grant reads each active group's rank once
-- (live) and the core picks the best group's oldest waiter. A job that gains
-- a caller, or a job waiting on it, while it waits moves to its new set's
-- group and keeps its place in arrival order; so inherited priority feeds
-- grants, and a grant never walks the waiters, their callers or awaiters.
--
-- Every grant and every release touches the pool's clock group, which each
-- waiter's stall clock is linked to: a busy pool is not a stall.
local B = require "stagehand.core.backend"
local check = B.check
local raise = require("stagehand.engine.errors").raise
local E = require "stagehand.engine.engine"
local wait = require "stagehand.wait.wait"
local each = require("stagehand.core.compat").each
local priority = require "stagehand.rank.priority"
local sources = require "stagehand.rank.sources"
local F = require "stagehand.engine.fields"
local ORCH, CID, W, LABEL, HELD, WAITQ = F.ORCH, F.CID, F.W, F.LABEL, F.HELD, F.WAITQ
local STATE, SINCE = F.STATE, F.SINCE
local co_yield, PARK = coroutine.yield, E.PARK
local set_of = priority.set_of
local is_job = F.is_job
local options = require "stagehand.engine.options"

-- Hot paths here iterate arrays and keep counts instead of calling pairs
-- or next: LuaJIT 2.1 does not compile those, and a loop that keeps
-- aborting its trace (the step's drain calls grant) gets blacklisted.
local M = {}

-- Marks pool q as needing a grant round: o.grantable is false, the one
-- pool that changed, or true for "look at every pool". The usual case (one
-- slot freed) grants in that pool alone, with no loop over pools: a loop
-- that runs once per call keeps aborting LuaJIT's traces.
--
-- A budget is marked in o.budget_due instead: budgets grant only once
-- everything runnable in the step has run (engine.drain), so every job that
-- asked for a permit in this step competes for it by priority, not just the
-- first to ask.
local function dirty(o, q)
  if q.kind == "budget" then
    o.budget_due = true
    return
  end
  local g = o.grantable
  if not g then
    o.grantable = q
  elseif g ~= q then
    o.grantable = true
  end
end

-- A queue is also what a waiting job parks on (job[W]): a grant wakes the
-- job directly, with no box or listener in between.
local Queue = {}
Queue.__index = Queue

local function new_queue(o, name, kind)
  local q = setmetatable({
    o = o,
    name = name,
    kind = kind, -- "pool" or "budget"
    p = B.pool_new(),
    clock_group = o.next_clock_group,
    bumped = {}, -- group -> how many times its set changed in place (read_group)
  }, Queue)
  o.next_clock_group = o.next_clock_group + 1
  return q
end

--- `names` are the pools' names, sorted (options.new_options sorts them).
function M.init(o, pools, names)
  o.pool_q, o.budget_q = {}, {} -- by name
  o.pool_list, o.budget_list = {}, {} -- the same queues, in creation order
  o.worker_list = {} -- worker pools' dispatch queues (worker_queue), in creation order
  priority.init_groups(o)
  o.next_clock_group = 0
  o.permit_of = {} -- job -> the ms budget whose permit it holds this step
  o.grantable = false
  o.budget_due = false
  -- Made in name order: a step that frees slots of several pools grants
  -- pool by pool in the order they were made, and pairs' order over names
  -- changes from run to run on Lua 5.4 (its string hashes are seeded at
  -- random), which made the order granted jobs ran in change with it.
  for i = 1, #names do M.pool(o, names[i], pools[names[i]]) end
end

-- The queue of that name, made (and listed in creation order) if new.
local function named_queue(o, name, kind, by_name, in_order)
  local q = by_name[name]
  if not q then
    q = new_queue(o, name, kind)
    by_name[name] = q
    in_order[#in_order + 1] = q
  end
  return q
end

--- Creates or resizes a pool; capacity 0 holds everyone, shrinking never
--- takes back slots already held.
function M.pool(o, name, capacity)
  local q = named_queue(o, name, "pool", o.pool_q, o.pool_list)
  B.pool_set_capacity(q.p, capacity)
  -- (a round grants what a larger pool can give its waiters; one nobody
  -- waits in has nothing to grant)
  if B.pool_waiting(q.p) > 0 then dirty(o, q) end
  return q
end

--- Declares a per-step budget: {ops = n} or {ms = m}.
function M.budget(o, name, ops, ms)
  local q = named_queue(o, name, "budget", o.budget_q, o.budget_list)
  q.ops, q.ms, q.spent = ops, ms, 0
  B.pool_set_capacity(q.p, ops or 1)
  dirty(o, q)
  return q
end

--- A worker pool's dispatch queue (workers.lua): its requests wait in it
--- as slot waiters do, each filed under its set of sources, and its grant
--- round offers the best of them to the pool's workers
--- (owner:_offer_round) rather than waking anyone: a worker is a slot, so a
--- request's inherited priority and a frame's competition work as for
--- slots. q.last[g] is each group's rank as last read, so a round knows
--- whether a priority function's answer moved (q.stale), and q.last_at[g]
--- the round that read it (a rank read in an earlier step is not known
--- now: dispatch.cut).
function M.worker_queue(o, owner)
  local q = new_queue(o, owner:_describe(), "workers")
  q.owner, q.last, q.last_at, q.stale = owner, {}, {}, true
  local list = o.worker_list
  list[#list + 1] = q
  return q
end

--- The pool is gone: its queue leaves the grant rounds.
function M.drop_worker_queue(o, q)
  local kept = {} -- (a new list: a round may be walking the old one)
  local list = o.worker_list
  for i = 1, #list do
    if list[i] ~= q then kept[#kept + 1] = list[i] end
  end
  o.worker_list = kept
  if o.grantable == q then o.grantable = false end
end

-- Group g's rank, when it never changes, told to q's core (once: the
-- core ignores a repeat).
local function fix_rank(o, q, g)
  local fixed = o.fixed_rank[g]
  if fixed then check(B.pool_fix_rank(q.p, g, fixed), "fix a group's rank") end
end

-- Files job in q's core under its set of sources; returns the set's group.
local function file(o, q, job)
  local g = set_of(o, job)
  check(B.pool_enqueue(q.p, job[CID], g), "queue a waiter")
  fix_rank(o, q, g)
  return g
end

--- A request joins its pool's queue under its set of sources.
function M.enqueue(o, q, job)
  local g = file(o, q, job)
  job[WAITQ] = q
  dirty(o, q)
  return g
end

--- A request leaves its pool's queue (a worker took it, or its job ended).
function M.leave(q, job)
  if job[WAITQ] ~= q then return end
  check(B.pool_remove(q.p, job[CID]), "take a request out of its queue")
  job[WAITQ] = false
end

M.dirty = dirty

function Queue:_describe()
  if self.kind == "pool" then return "a slot of pool '" .. self.name .. "'" end
  if self.kind == "workers" then return "a worker of " .. self.name end
  return "a permit of budget '" .. self.name .. "'"
end
function Queue:_follows() return nil end
-- The job stopped waiting (it ended): it leaves the queue.
function Queue:_abandon(job)
  local o = job[ORCH]
  check(B.pool_remove(self.p, job[CID]), "take a waiter out of a queue")
  -- (SH_EINVAL: the stall check stopped its clock as it stalled the job)
  check(B.clock_join(o.cc, job[CID], -1), "unlink a stall clock from a queue", B.SH_EINVAL)
  job[WAITQ] = false
  dirty(o, self) -- the queue changed; what stays may be grantable
end

local function touch(o, q)
  check(B.clock_touch(o.cc, q.clock_group, o.now), "count a queue's activity")
end

-- A waiting job's set of sources changed (priority.lua): it moves to that
-- set's group, keeping its place in arrival order. A big set that only
-- this job has changes in place (priority.next_big): the job stays in its
-- group, and the rank this step read for the group is stale, so the queue
-- reads it again before its next grant (else a visible portrait awaiting
-- an army's mesh left the mesh behind a scene job until the next step).
local function moved(o, job, g, in_place, added)
  local q = job[WAITQ]
  if not q then return end
  if in_place then
    local bumped = q.bumped
    bumped[g] = (bumped[g] or 0) + 1
    check(B.pool_reread(q.p, g), "read a changed set's rank again")
    local last = q.last
    if last then last[g] = nil end -- (unknown until read: dispatch.cut)
  else
    fix_rank(o, q, g)
    check(B.pool_move(q.p, job[CID], g), "move a waiter to its new group")
  end
  if q.kind == "workers" then q.owner:_reranked(q, g, job, added) end
end

-- A slot's release: called as release(), idempotent. A callable object, not
-- a closure, because LuaJIT cannot compile making a closure (FNEW) and a
-- grant makes one release per slot.
local Release = {}
Release.__index = Release
Release.__name = "stagehand.Release"
-- A release is {queue, job}, in the array part (the smallest table LuaJIT
-- makes); its queue becomes false once it has released.
Release.__call = function(r)
  local q = r[1]
  if not q then return end
  local o, job = q.o, r[2]
  if not o.stepping then E.game_now(o) end -- (freed by the game: progress now)
  local tr = o.tracer
  if tr then tr:unhold(job, "a slot of pool '" .. q.name .. "'", o.now) end
  -- (The queue's touch, the freed slot's progress for its waiters, comes
  -- before the slot is back: the core's clock may need memory for it.)
  touch(o, q)
  -- (Marked released only now: what comes before may run out of memory,
  -- and a release that raised must still be owed, to the job's end if not
  -- to a second call. Below, only the driver's reschedule, last, may
  -- allocate: the slot is back by then.)
  r[1] = false
  local held = job[HELD]
  if held == r then
    job[HELD] = false
  elseif held then
    held[q] = nil
    held.n = held.n - 1
    if held.n == 0 then job[HELD] = false end
  end
  check(B.pool_release(q.p), "release a slot")
  dirty(o, q)
  if not o.stepping then o.driver.reschedule(o) end
end

local function holds(held, q)
  if not held then return false end
  if getmetatable(held) == Release then return held[1] == q end
  return held[q] ~= nil
end

local function releaser(job, q)
  return setmetatable({ q, job }, Release)
end

-- job[HELD] is the job's one release, or {n =, [queue] = release} once it
-- holds slots of several pools (most jobs hold one: no table for them).
-- Everything a hold needs is allocated before the core counts the slot
-- (prepare_hold): memory that runs out then leaves no slot counted in use
-- that nobody holds.
local function prepare_hold(job, q)
  local release = releaser(job, q)
  local held = job[HELD]
  if held then
    if getmetatable(held) == Release then held = { n = 1, [held[1]] = held } end
    held[q] = false -- (its place made now; filled by hold)
  end
  return release, held
end

local function hold(job, q, release, held)
  if not held then
    job[HELD] = release
  else
    job[HELD] = held
    held[q] = release
    held.n = held.n + 1
  end
  return release
end

-- The queue a job:slot or job:permit names; an unknown name raises in the job,
-- at the line that called job:slot (this, then M.slot, which is Job.slot).
local KINDS = {
  slot = { "pool_q", "pool", "make it with orch:pool(name, capacity) or the pools option" },
  permit = { "budget_q", "budget", "declare it with orch:budget(name, {ops = n}) or {ms = m}" },
}
local function queue_of(job, what, name)
  wait.check_wait(job, what)
  local kind = KINDS[what]
  if type(name) ~= "string" then
    options.fail("job:" .. what, kind[2], "the name of a " .. kind[2] .. " (a string)", name, 3)
  end
  local q = job[ORCH][kind[1]][name]
  if q == nil then
    raise("job:" .. what .. ": no " .. kind[2] .. " named '" .. tostring(name) .. "' (" .. kind[3] .. ")", 3)
  end
  return q
end

--- job:slot(name): waits for a slot; returns its release.
function M.slot(job, name)
  if not is_job(job) then options.bad_self("job:slot", "a job (the one its work receives)", job, 2) end
  local q = queue_of(job, "slot", name)
  if holds(job[HELD], q) then
    raise("job:slot: " .. job[LABEL] .. " already holds a slot of pool '" .. name
      .. "' (asking for a second one is how slot deadlocks start)", 2)
  end
  -- (Never granted here, even from a free pool: grants are made in the
  -- step's grant rounds, so a frame's requests compete by priority.)
  return M.wait(job, q)
end

--- job:permit(name): waits for one unit of a per-step budget.
function M.permit(job, name)
  if not is_job(job) then options.bad_self("job:permit", "a job (the one its work receives)", job, 2) end
  local q = queue_of(job, "permit", name)
  M.wait(job, q)
end

function M.wait(job, q)
  do -- (its locals end here, so the yield below sits just above job and q: see body in engine.lua)
    local o, slot = job[ORCH], job[CID]
    -- (Linked first: a link that runs out of memory after the filing left
    -- a waiter in the core that no job waited as. A link left by a filing
    -- that fails is dropped when the job's clock next starts.)
    check(B.clock_join(o.cc, slot, q.clock_group), "link a stall clock to a queue")
    file(o, q, job)
    job[WAITQ] = q
    -- (A budget grants once a step has run everything: the step must know.
    -- A pool needs a round for a new waiter only when it has a slot free;
    -- a full one is marked by the release or resize that frees one.)
    if q.kind == "budget" or B.pool_grantable(q.p) > 0 then
      dirty(o, q)
      if not o.stepping then o.driver.reschedule(o) end
    end
    job[W] = q
    job[SINCE] = o.now
  end
  -- Parked here, not in a helper: on LuaJIT the yield is a trace exit that
  -- rebuilds every frame down to it from a snapshot. A grant queues the
  -- job again (grant_one).
  if co_yield(PARK) ~= job then wait.misplaced(job, q.kind == "pool" and "slot" or "permit", 2) end
  if job[STATE] then wait.raise_ended(job) end
  -- Granted; the grant counted as the job's progress (grant_one).
  if q.kind == "pool" then
    local held = job[HELD]
    if getmetatable(held) == Release then return held end
    return held[q]
  end
end

-- The best waiter of q now: the core's pick by group rank and arrival. The
-- groups' ranks were read by read_ranks for this round of grants.
local pool_best = B.pool_best
local function best(o, q)
  local slot = pool_best(q.p)
  if slot < 0 then return nil end
  return o.by_slot[slot]
end

local function grant_one(o, q, job)
  -- What needs memory comes before the core counts the grant (the hold's
  -- tables, the queue's touch, an ms permit's note, room in the run
  -- queue): memory that runs out leaves the job waiting where it was, not
  -- granted and parked on a queue that no longer holds it.
  local release, held
  local ms = q.kind ~= "pool" and q.ms
  if q.kind == "pool" then release, held = prepare_hold(job, q) end
  -- Touched before the job leaves the group, so leaving takes the grant's
  -- time as its own progress: the wait that ends is progress.
  touch(o, q)
  if job[W] == q then E.make_room(o) end
  if ms then o.permit_of[job] = q end -- (last: nothing after it needs memory)
  local rc = B.pool_grant(q.p, job[CID])
  if rc ~= B.SH_OK and ms then o.permit_of[job] = nil end
  check(rc, "grant a slot")
  check(B.clock_join(o.cc, job[CID], -1), "unlink a stall clock from a queue")
  job[WAITQ] = false
  if q.kind == "pool" then hold(job, q, release, held) end
  if job[W] == q then
    job[W] = E.QUEUED
    E.enqueue(o, job)
  end
  -- (Told last: a trace's record needs memory, and one that runs out must
  -- not leave the job parked on a queue that no longer holds it.)
  local tr = o.tracer
  if tr then
    if q.kind == "pool" then tr:hold(job, "a slot of pool '" .. q.name .. "'", o.now)
    else tr:permit(job, "a permit of budget '" .. q.name .. "'", o.now) end
  end
end

-- Hands the core the rank of every group of q that it has not been told
-- in this step (the core's unread groups: those that turned active since,
-- or all of them at the step's first round). Each priority function is
-- called at most once a step, however many grants and queues read it: the
-- game's state does not move inside a step, and a game that gives every
-- asset a closure of its own pays one call per asset a step, not one per
-- waiter per grant. (o.round is the step's number: engine.step.)
--
-- Only the priority functions themselves run game code here, and that code
-- may do anything: cancel waiters, start jobs, resize the pool. So a rank
-- is handed to the core only if its group still means what it meant when
-- the read began (a set whose last waiter left may be given back and its
-- id reused, and a big set may change in place: a scout's function that
-- sends the army's general away), and grant_free asks again what can be
-- granted once the reading is done.
local pool_set_rank, pool_new_reads, pool_next_unread = B.pool_set_rank, B.pool_new_reads, B.pool_next_unread

-- (A worker queue notes each group's rank: one that moved makes its
-- offer stale.)
local function noted(q, g, rank)
  local last = q.last
  if last then q.last_at[g] = q.read_round end
  if last and last[g] ~= rank then
    last[g] = rank
    q.stale = true
  end
end

local function read_group(o, q, p, g)
  local src = o.source_of[g]
  if src ~= nil then
    local rank = priority.round_rank(o, g, src)
    if o.source_of[g] == src then
      check(pool_set_rank(p, g, rank), "set a group's rank")
      noted(q, g, rank)
    end
  else
    -- (a set that changed in place while it was read, by one of its own
    -- functions, is on the unread stack again: read_ranks reads it anew)
    local ms, bumped = o.members[g], q.bumped
    local was = bumped[g]
    local rank = priority.set_rank(o, g) -- a set of sources: the best of its members
    if o.members[g] == ms and bumped[g] == was then
      check(pool_set_rank(p, g, rank), "set a set's rank")
      noted(q, g, rank)
    end
  end
end

local function read_ranks(o, q)
  local p = q.p
  if q.read_round ~= o.round then
    q.read_round = o.round
    check(pool_new_reads(p), "start a step's reads")
  end
  local g = pool_next_unread(p)
  while g >= 0 do
    read_group(o, q, p, g)
    g = pool_next_unread(p)
  end
end
M.read_ranks = read_ranks

local pool_grantable = B.pool_grantable

local function grant_rest(o, q)
  while pool_grantable(q.p) > 0 do
    local job = best(o, q)
    if not job then break end
    grant_one(o, q, job)
  end
end

-- Grants q's best waiters while it has free capacity (a pool, or an {ops}
-- budget this step), the first without a loop (one slot freed is the usual
-- case). Returns true if anything was granted.
local function grant_free(o, q)
  if pool_grantable(q.p) == 0 then return false end
  read_ranks(o, q)
  if pool_grantable(q.p) == 0 then return false end -- (the priority functions took it)
  local job = best(o, q)
  if not job then return false end
  grant_one(o, q, job)
  if pool_grantable(q.p) > 0 then grant_rest(o, q) end
  return true
end

-- An {ms} budget grants one permit at a time, while this step's holders
-- have run less than ms.
local function grant_ms(o, q)
  local p = q.p
  if B.pool_waiting(p) > 0 and B.pool_in_use(p) == 0 and q.spent < q.ms then
    read_ranks(o, q)
    local job = pool_grantable(p) > 0 and best(o, q) -- (asked again: see grant_free)
    if job then
      grant_one(o, q, job)
      return true
    end
  end
  return false
end

local function grant_all(o)
  local any = false
  local pools = o.pool_list
  for i = 1, #pools do
    if grant_free(o, pools[i]) then any = true end
  end
  local workers = o.worker_list
  for i = 1, #workers do
    local q = workers[i]
    q.owner:_offer_round(q) -- (an offer wakes no job here: nothing granted)
  end
  return any
end

--- Grants the slots that can be granted now, and offers worker pools'
--- requests to their workers. Returns true if any slot was granted.
function M.grant(o)
  local g = o.grantable
  if not g then return false end
  o.grantable = false
  if g == true then return grant_all(o) end
  if g.kind == "workers" then
    g.owner:_offer_round(g)
    return false
  end
  return grant_free(o, g)
end

--- Grants the permits that can be granted now, once nothing else can run
--- (engine.drain). Returns true if any was.
function M.grant_budgets(o)
  o.budget_due = false
  local any = false
  local budgets = o.budget_list
  for i = 1, #budgets do
    local q = budgets[i]
    local granted
    if q.ms then granted = grant_ms(o, q) else granted = grant_free(o, q) end
    if granted then any = true end
  end
  return any
end

--- True while some budget has waiters: a next step would grant them
--- (engine.next_wake asks, so the luv driver steps again at once rather
--- than when the next stall check is due).
function M.budget_waiting(o)
  local budgets = o.budget_list
  for i = 1, #budgets do
    if B.pool_waiting(budgets[i].p) > 0 then return true end
  end
  return false
end

--- A new step: every budget's permits count from zero again.
function M.new_step(o)
  -- (A holder whose run memory cut short ends later, by its stall or a
  -- close, and no run gives its permit back: forgotten once it has ended,
  -- the count being zeroed below.)
  local permit_of = o.permit_of
  if each(permit_of) ~= nil then
    for job in each, permit_of do
      if job[STATE] then permit_of[job] = nil end
    end
  end
  local budgets = o.budget_list
  for i = 1, #budgets do
    local q = budgets[i]
    check(B.pool_reset_use(q.p), "reset a budget")
    q.spent = 0
    if B.pool_waiting(q.p) > 0 then dirty(o, q) end
  end
end

--- After an ms-budget permit holder ran: count its time, free the turn.
function M.ran(o, job, ms)
  local q = o.permit_of[job]
  if not q then return end
  o.permit_of[job] = nil
  q.spent = q.spent + ms
  -- (SH_ESTATE: the step's start zeroed the budget's count)
  check(B.pool_release(q.p), "give back a permit", B.SH_ESTATE)
  dirty(o, q)
end

--- Ending is total: every slot a job holds goes back.
function M.release_all(_, job)
  local held = job[HELD]
  if getmetatable(held) == Release then
    held()
  elseif held then
    local list = {}
    for q, release in each, held do
      if q ~= "n" then list[#list + 1] = release end
    end
    for i = 1, #list do list[i]() end
  end
  -- An ms-budget permit is given back by the step that ran its holder
  -- (engine.drain), which counts the time it ran; the holder is always
  -- queued to run once more, ended or not. (Unless memory ran out between
  -- its grant and that run: new_step forgets the permits of ended jobs.)
end

--- orch:pools(): {[name] = {capacity =, in_use =, waiting =}} for each
--- slot pool, and for each budget {budget = "ops" | "ms", limit =, in_use
--- = (permits granted in this step), waiting =}, under its name (or
--- "NAME (budget)" where a pool has that name).
function M.report(o)
  local out = {}
  for name, q in each, o.pool_q do
    out[name] = {
      capacity = tonumber(B.pool_capacity(q.p)),
      in_use = tonumber(B.pool_in_use(q.p)),
      waiting = tonumber(B.pool_waiting(q.p)),
    }
  end
  for name, q in each, o.budget_q do
    local key = out[name] and name .. " (budget)" or name
    out[key] = {
      budget = q.ms and "ms" or "ops",
      limit = q.ms or q.ops,
      in_use = q.ms and q.spent or tonumber(B.pool_in_use(q.p)),
      waiting = tonumber(B.pool_waiting(q.p)),
    }
  end
  return out
end

-- What the engine tells this module (engine.lua, hooks), and priority.lua.
E.on("release_holds", M.release_all)
E.on("grant_round", M.grant)
E.on("budget_round", M.grant_budgets)
E.on("step_began", M.new_step)
E.on("ran", M.ran)
E.on("budgets_waiting", M.budget_waiting)
sources.on_moved(moved)
-- A group id about to be reused: no queue has waiters under it (its set or
-- function is gone), and each queue's core forgets its rank.
priority.on_forget(function(o, g)
  local lists = { o.pool_list, o.budget_list, o.worker_list }
  for l = 1, 3 do
    local qs = lists[l]
    for i = 1, #qs do
      check(B.pool_forget_group(qs[i].p, g), "reuse a priority group")
      if qs[i].last then qs[i].last[g] = nil end
    end
  end
end)
return M
