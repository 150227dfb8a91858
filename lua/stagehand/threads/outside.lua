-- Work on other threads, as an orchestrator sees it: one notifier per
-- orchestrator that worker threads, ports and round barriers signal, and
-- the sources (worker pools, jobs waiting on ports and rounds) whose news
-- a step collects. The drivers wait on the notifier when nothing else is
-- due: the manual one blocks on it, the luv one watches its descriptor.
local E = require "stagehand.engine.engine"
local native = require "stagehand.core.threads_native"
local B = require "stagehand.core.backend"
local logm = require "stagehand.engine.log"

local M = {}

-- Each orchestrator's, in its field outside_state (not in a table keyed by
-- the orchestrator: LuaJIT's and Lua 5.1's weak keys are no ephemerons, and
-- a state that refers back to its orchestrator would keep it forever):
-- { n = notifier, seen = generation collected, sources = {list} }.
local function states_of(o) return rawget(o, "outside_state") end

local function state(o)
  local s = states_of(o)
  if not s then
    s = { n = native.notifier(), seen = -1, sources = {} }
    o.outside_state = s
  end
  return s
end

--- The notifier of `o` (made on first use).
function M.notifier(o) return state(o).n end

--- Adds a source to o: a table with collect(src, o) (takes what arrived),
--- outside_pending(src) (whether more may come) and waiting(src, now) (lines
--- naming what its threads wait on, for the log).
function M.add(o, src)
  local list = state(o).sources
  list[#list + 1] = src
end

--- o's sources now (worker pools, jobs waiting on ports and rounds): a
--- list a caller may walk while sources leave (removing makes a new one).
function M.sources(o)
  local s = states_of(o)
  return s and s.sources or {}
end

-- (A new list, never the one a step may be walking: a source removed while
-- step_began walks them, a service whose worker exited, shifted the next
-- one out of that walk, and its reply went unheard until a timeout.)
local function without(list, src)
  local kept = {}
  for i = 1, #list do
    if list[i] ~= src then kept[#kept + 1] = list[i] end
  end
  return kept
end

function M.remove(o, src)
  local s = states_of(o)
  if not s then return end
  local list = s.sources
  local ok, kept = pcall(without, list, src)
  if ok then
    s.sources = kept
  else
    -- (memory ran out making the new list: removed in place, which needs
    -- none; a walk under way may then miss one source until next step)
    for i = #list, 1, -1 do
      if list[i] == src then table.remove(list, i) end
    end
  end
end

local gen = native.notifier_gen

E.on("step_began", function(o)
  local s = states_of(o)
  if not s then return end
  s.seen = gen(s.n)
  local list = s.sources
  for i = 1, #list do
    local src = list[i]
    if src then src:collect(o) end
  end
end)

-- (Ready too while a source has news the notifier may not have rung for:
-- a job that parked on a port or a round during a step began to watch it
-- after it last looked, and what came between signalled nobody. The
-- driver must step again before it sleeps on the notifier.)
E.on("outside_ready", function(o)
  local s = states_of(o)
  if s == nil then return false end
  if gen(s.n) ~= s.seen then return true end
  local list = s.sources
  for i = 1, #list do
    local src = list[i]
    if src.ready and src:ready() then return true end
  end
  return false
end)

local function pending(o)
  local s = states_of(o)
  if not s then return false end
  local list = s.sources
  for i = 1, #list do
    if list[i]:outside_pending() then return true end
  end
  return false
end
E.on("outside_pending", pending)

-- (A source whose news may come without the notifier, wait_cap(src)
-- giving at most how long to wait for it, is looked at that often: a LÖVE
-- thread that fails before it loads the C module cannot signal.)
E.on("outside_wait", function(o, ms)
  local s = states_of(o)
  if not s then return false end
  local list = s.sources
  for i = 1, #list do
    local cap = list[i].wait_cap and list[i]:wait_cap()
    if cap and cap < ms then ms = cap end
  end
  return native.notifier_wait(s.n, s.seen, ms)
end)

--- The descriptor that turns readable when o's notifier is signalled
--- (the luv driver polls it), and its kind: "fd", or "socket" (Windows,
--- where libuv polls only sockets); and the call that makes a notifier's
--- quiet again (given the notifier, not o: the driver clears it even once
--- o is gone).
function M.fd(o) return native.notifier_fd(state(o).n) end
M.clear = native.notifier_clear
--- The notifier's generation (it moves on each signal): what a driver
--- with no descriptor to watch compares.
M.gen = gen
M.pending = pending

-- At close, and when orch:loop returns: each worker still waiting on a
-- port, a round or a sleep is named in the log, with for how long.
E.on("closed", function(o)
  local s = states_of(o)
  if not s then return end
  local now = B.now_ms()
  for i = 1, #s.sources do
    local lines = s.sources[i]:waiting(now)
    for j = 1, #(lines or {}) do
      logm.guard(nil, "the log function", o.log, "[stagehand] " .. lines[j])
    end
  end
end)

return M
