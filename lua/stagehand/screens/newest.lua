-- orch:newest: the newest run under a name wins. A newer call cancels the
-- older run (keyed work it shared with other callers runs on), and every
-- older call's Handle ends with the newest run's end, however it ends. An
-- older call never settles with its own result.
--
-- Each name has a chain: the newest run (chain.job), its own Handle (the
-- head, a caller of it like any), and the older calls' Handles, which
-- follow the chain rather than a job (handle.relay). Their priority
-- sources reach the newest run through carriers: one internal caller per
-- distinct source, counting the older Handles it stands for. A newer call
-- moves the carriers and the head, not every older Handle, so a thousand
-- calls in one frame (a search box typed into fast) cost a thousand moves,
-- not half a million.
local E = require "stagehand.engine.engine"
local F = require "stagehand.engine.fields"
local settle = require "stagehand.engine.settle"
local sources = require "stagehand.rank.sources"
local handle = require "stagehand.wait.handle"
local errors = require "stagehand.engine.errors"
local follows = require "stagehand.wait.follows"
local wait = require "stagehand.wait.wait"

local STATE, OUT, H, TOLD, LABEL, W = F.STATE, F.OUT, F.H, F.TOLD, F.LABEL, F.W

local M = {}

-- (An orchestrator's chains are in its field newest_names, by name: not in
-- a table keyed by the orchestrator, see outside.lua.)

local NIL = {} -- the key of carriers for Handles whose source is nil

local Chain = {}
Chain.__index = Chain

-- The job a relayed Handle follows now (for whoever awaits it).
function Chain:job() return self.run end

-- Every older Handle still following ends as the newest run ended. (The
-- empty lists are made first; the followers wait in chain.ending until
-- each is settled: a finish that memory cut short goes on when its
-- carrier is told again, settle.recover.)
local function finish(chain, st, v)
  local fs = chain.ending
  if not fs then
    if chain.over then return end
    local nf, nc, nn, nk = {}, {}, {}, {}
    fs = chain.followers
    chain.ending, chain.over = fs, true
    local names = rawget(chain.o, "newest_names")
    if names and names[chain.name] == chain then names[chain.name] = nil end
    chain.followers, chain.carriers, chain.count, chain.keys = nf, nc, nn, nk
  end
  for i = 1, #fs do
    local h = fs[i]
    if h then
      handle.unrelay(h)
      settle.settle(h, st, v) -- (told again, one settled already does nothing)
      fs[i] = false
    end
  end
  chain.ending = false
end

-- A carrier's listener: the run it stands in ended. (settle reads a
-- listener's on_part raw.)
local function carrier_ends(entry, st, v) finish(entry.chain, st, v) end

-- An older Handle withdraws on its own (h:cancel, its signal): its share
-- of its carrier goes, and a run nobody calls any more is cancelled.
function Chain:withdraw(h, reason)
  local i = rawget(h, "_fi")
  if self.followers[i] ~= h then return false end
  self.followers[i] = false
  local key = rawget(h, 2)
  if key == nil then key = NIL end
  local c = self.carriers[key]
  local n = self.count[c] - 1
  self.count[c] = n
  local job = self.run
  if n == 0 then
    self.carriers[key], self.count[c] = nil, nil
    if not job[STATE] then sources.remove_caller(self.o, job, c) end
  end
  handle.unrelay(h)
  settle.settle(h, "cancelled", errors.cancelled(job[LABEL], reason))
  if not job[STATE] and rawget(job, H) == nil then E.cancel(job, reason) end
  return true
end

-- `h` stops calling its run and follows the chain, counted by the carrier
-- of its source (made on the chain's run when it has none).
local function follow(chain, h)
  local o, job = chain.o, chain.run
  local key = rawget(h, 2)
  if key == nil then key = NIL end
  local c = chain.carriers[key]
  if not c then
    c = handle.new(job, rawget(h, 2))
    settle.listen(c, { on_part = carrier_ends, chain = chain })
    if not job[STATE] then sources.add_caller(o, job, c) end
    chain.carriers[key] = c
    chain.keys[#chain.keys + 1] = key
    chain.count[c] = 0
  end
  chain.count[c] = chain.count[c] + 1
  local fs = chain.followers
  fs[#fs + 1] = h
  rawset(h, "_fi", #fs)
  handle.relay(h, chain)
end

-- Every job parked on one of the chain's older Handles (directly, or
-- through groups over it), filed again under what that Handle follows now:
-- the newest run. (For a hand-over whose older run lives on, for another
-- caller of its key: whoever awaited the older run only through those
-- Handles awaits the newer one now, its rank with it, and a search for a
-- cycle through them, which starts from what is filed, finds it.)
local function refile(chain)
  local o, seen, stack = chain.o, {}, {}
  for i = 1, #chain.followers do
    local h = chain.followers[i]
    if h then stack[#stack + 1] = h end
  end
  while stack[1] do
    local x = table.remove(stack)
    local ls = { rawget(x, "_w1") }
    local more = rawget(x, "_ls")
    for i = 1, more and #more or 0 do ls[#ls + 1] = more[i] end
    for i = 1, #ls do
      local e = ls[i]
      if type(e) == "table" and not seen[e] then
        seen[e] = true
        if F.is_job(e) then
          if e[W] == x and not e[STATE] and sources.following(o, e) then
            sources.unfollow(o, e)
            local f = follows.follows_in(o, x, true)
            if f ~= nil then sources.follow(o, e, f) end
          end
        elseif type(rawget(e, "g")) == "table" and not rawget(e.g, "_st") then
          stack[#stack + 1] = e.g -- (a group over it: the jobs parked on the group)
        end
      end
    end
  end
end

-- Whether `h` still calls `job` (it may have withdrawn on its own).
local function calls(h, job) return h[1] == job and not rawget(h, "_st") and not job[STATE] end

--- orch:newest(name, label, work, opts): runs like orch:run; a newer call
--- under `name` takes over every older call still waiting.
function M.run(o, name, label, work, opts)
  local h = o:run(label, work, opts)
  local job = h[1]
  local names = rawget(o, "newest_names")
  if not names then
    names = {}
    o.newest_names = names
  end
  local chain = names[name]
  if chain and (chain.over or chain.run[STATE]) then chain = nil end
  if not chain then
    names[name] = setmetatable({ o = o, name = name, run = job, head = h, followers = {}, carriers = {},
      keys = {}, count = {}, over = false, ending = false }, Chain)
    return h
  end
  local old, head = chain.run, chain.head
  -- The carriers go over to the newer run (none when it ended already: the
  -- older Handles end now, below).
  if old ~= job then
    -- (in the order they came, not pairs': a source is a rank's name, a
    -- function or a number's box, and the callers' order makes the run's
    -- priority groups, and so the order their functions are read in)
    local keys, kept, seen = chain.keys, {}, {}
    for i = 1, #keys do
      local key = keys[i]
      local c = chain.carriers[key]
      if c and not seen[key] then
        seen[key] = true
        kept[#kept + 1] = key
        sources.remove_caller(o, old, c)
        c[1] = job
        if not job[STATE] then
          sources.add_caller(o, job, c)
          job[OUT] = TOLD -- (the carrier listens: the run's end tells it)
        end
      end
    end
    chain.keys = kept
  end
  chain.run, chain.head = job, h
  -- The older run's own caller follows the chain too.
  -- (It follows first, then leaves: following needs memory, and one that
  -- runs out leaves it its old run's caller, not a caller of nothing.
  -- Leaving never raises.)
  if head ~= h and calls(head, old) then
    follow(chain, head)
    sources.remove_caller(o, old, head)
  end
  if old ~= job and not old[STATE] and rawget(old, H) == nil then
    -- Nobody else calls it: whoever awaited it awaits the newer run; the
    -- older one is cancelled. (Keyed work shared with another caller runs on.)
    if not job[STATE] then sources.move_awaiters(o, old, job) end
    E.cancel(old, "a newer run of '" .. name .. "' replaced it")
  elseif old ~= job and not job[STATE] then
    refile(chain)
  end
  -- The older Handles end with the newer run's end now. A newer run whose
  -- first wait (made before they came over) leads to one of them waits on
  -- its own end: that cycle closed here, and every edge it gained leads to
  -- the newer run, so a search from its wait finds any. That wait raises
  -- the cycle, as an await that closed one does (the work may catch it).
  local w = not job[STATE] and job[W]
  if w and w._follows then
    local ok, err = pcall(follows.check_follows, job, w)
    if not ok then wait.raise_in(job, err) end
  end
  if job[STATE] then finish(chain, job[STATE], job[OUT]) end -- (the newer ended inside its own call)
  return h
end

return M
