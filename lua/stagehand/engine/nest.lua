-- Calls that reach others in turn, kept off the Lua stack.
--
-- An end can end more jobs (those following its signal, the callers it
-- made), and a group settling can settle the group above it: each inside
-- the last, as deep as a game builds them. Made by plain recursion, 10,000
-- levels overflowed the Lua stack partway down and left the rest undone.
-- A Nest runs a call at once while fewer than `limit` of its calls are
-- under way in this coroutine; past that, the call waits on a stack of the
-- Nest's own, and the deepest level under way runs the stack before it
-- returns. So whatever the first call reaches is done by the time it
-- returns, and the Lua stack stays at most `limit` levels deep.
--
-- Levels are counted per coroutine: one that a game's handler suspended
-- by yielding (none may) keeps its count to itself, holds up no call
-- elsewhere, and goes on where it was if resumed. (A count shared by every
-- coroutine, saved and restored around each call, was restored out of date
-- by such a coroutine resumed long after; every later call in the main
-- coroutine then waited on a level that did not exist, and was never run.)
-- The outermost level of each coroutine is protected: a fault leaves its
-- count at zero, and what was pushed (the call that raised included) for
-- the next outermost call to run.
local co_running, pcall = coroutine.running, pcall
local MAIN = {} -- (the main coroutine, which Lua 5.1 and LuaJIT do not name)

local Nest = {}
Nest.__index = Nest

local M = {}

local made = {} -- (every Nest, for M.flush: a few, made at load)

--- A Nest running calls at once up to `limit` levels deep per coroutine.
function M.new(limit)
  local t = setmetatable({
    limit = limit,
    depth_of = setmetatable({}, { __mode = "k" }),
    fn = {}, a = {}, b = {}, c = {}, n = 0,
  }, Nest)
  made[#made + 1] = t
  return t
end

-- (Each call stays on the stack until it returns, those it pushes going
-- above it, and is then marked done: one that raises, memory running out
-- in it, is still there for the next outermost call, which runs it again.
-- The calls pushed here, an abort, a withdrawal and a group's fire, do
-- nothing twice; M.flush, at the next step, runs what a fault left.)
local function run_pending(t)
  local fns, as, bs, cs = t.fn, t.a, t.b, t.c
  while t.n > 0 do
    local k = t.n
    local fn = fns[k]
    if fn then
      fn(as[k], bs[k], cs[k])
      fns[k], as[k], bs[k], cs[k] = false, false, false, false
    else
      t.n = k - 1
    end
  end
end

--- Calls fn(a, b, c): at once, or, `limit` levels deep in this coroutine,
--- once the deepest level under way has finished its own call.
function Nest:call(fn, a, b, c)
  local me = co_running() or MAIN
  local depth_of = self.depth_of
  local d = depth_of[me] or 0
  local limit = self.limit
  if d >= limit then
    local k = self.n + 1
    self.n = k
    self.fn[k], self.a[k], self.b[k], self.c[k] = fn, a, b, c
    return
  end
  depth_of[me] = d + 1
  if d > 0 then
    fn(a, b, c)
    if d + 1 == limit and self.n > 0 then run_pending(self) end
    depth_of[me] = d
    return
  end
  local ok, err = pcall(fn, a, b, c)
  if ok and self.n > 0 then ok, err = pcall(run_pending, self) end
  depth_of[me] = nil
  if not ok then error(err, 0) end
end

local function nothing() end
--- Runs what calls left pending when one raised (engine/mend.lua, at the
--- start of a step once memory ran out).
function M.flush()
  for i = 1, #made do
    local t = made[i]
    if t.n > 0 then t:call(nothing) end
  end
end

return M
