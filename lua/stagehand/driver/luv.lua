-- The luv driver: a uv timer pumps the orchestrator on the loop. The timer is
-- set for the orchestrator's next wake (0 when work is queued) and stopped
-- when nothing is pending, so the loop ends when the jobs do.
local compat = require "stagehand.core.compat"
local found, uv = compat.require_luv() -- (not require "luv": compat.lua says why)
if not found then error(uv, 0) end
local logm = require "stagehand.engine.log"
local E = require "stagehand.engine.engine"
local on_collect = compat.on_collect

local M = {}

-- luv (1.44) keeps its loop alive through the first module table it returns
-- (that table's `_loop`): when that table is collected, a finalizer closes
-- the loop and frees it. A later `require "luv"`, after something cleared
-- package.loaded.luv (a game's hot reload, busted between spec files), gets
-- a new table on the same loop, and its next timer writes into freed memory.
-- Holding the loop's owner in the registry keeps the loop for the life of
-- the Lua state.
local PIN = "stagehand.luv loop owner"
local function pin(mod)
  local reg = debug and debug.getregistry and debug.getregistry() -- (a sandbox may hide it)
  if type(reg) == "table" and type(mod) == "table" and rawget(mod, "_loop") ~= nil and reg[PIN] == nil then
    reg[PIN] = mod
  end
end
pin(uv)

local function loop_clock()
  uv.update_time()
  return uv.now()
end

-- A luv timer takes a whole number of ms that fits a 64-bit integer (Lua
-- 5.4's luv raises "number has no integer representation" past it). A
-- wait longer than about 24 days (2^31 - 1 ms, as JavaScript's timers cap
-- it) is cut to that: the step it wakes finds nothing due, and sets the
-- timer again.
local MAX_DELAY = 2147483647
local NO_FD_MS = 2 -- (how often a notifier with no descriptor is looked at while threads work)
local function delay(ms, least)
  return math.min(MAX_DELAY, math.max(least, math.ceil(ms)))
end

-- Handles of orchestrators the game dropped. A handle is closed only where
-- the loop completes the close in the same pass: luv 1.44 crashes at
-- lua_close on a handle whose close never completed (luvit/luv#437), and
-- the collector may run a finalizer anywhere, inside a luv callback or
-- after the game's last line. So a dropped orchestrator's handles are
-- stopped at once (safe anywhere: they keep neither the loop nor the
-- orchestrator alive) and closed by the reaper's callback, on the loop;
-- at exit, luv closes what is left as it closes any open handle.
local doomed = {}

-- Whether a pass (orch:wait, orch:loop) is running the loop once. A step
-- pumped inside it, from a timer, must end it: libuv runs timers before it
-- polls, and the poll would then wait out the pass's whole timeout for
-- nothing (the pure-Lua core's notifier inside LÖVE, looked at by a timer,
-- made orch:wait take a second, or its whole timeout, after the reply).
local passing = false
local reaper = uv.new_timer() -- (made with the module: older than any orchestrator, so it outlives their finalizers)

-- Whether a handle is still luv's to use. At lua_close luv finalizes
-- handles before the finalizers of older values run, and a timer's or a
-- poll's own methods read a finalized handle through a null pointer;
-- is_closing checks it first, and raises instead.
local function usable(hd)
  local ok, closing = pcall(hd.is_closing, hd)
  return ok and not closing
end

local function reap()
  for i = #doomed, 1, -1 do
    local hd = doomed[i]
    doomed[i] = nil
    if usable(hd) then hd:close() end
  end
end
local function doom(hd)
  if not hd or not usable(hd) then return end
  hd:stop()
  doomed[#doomed + 1] = hd
  if usable(reaper) then reaper:start(0, 0, reap) end
end

function M.new(clock)
  -- (has_events: callbacks on the loop may end work while nothing is due,
  -- so a wait passes the loop even when next_wake says nil)
  local d = { name = "luv", clock = clock or loop_clock, has_events = true }
  local timer -- made on first need
  local due -- absolute clock time the timer is set for, or nil
  -- The orchestrator, held weakly: the timer's and the poll's callbacks
  -- stay with luv while the handles live, and must not keep a dropped
  -- orchestrator (its pools, threads and descriptors) alive. d is its own.
  local ref = setmetatable({}, { __mode = "v" })
  local in_fire = false

  -- A step that raised (a given clock that broke, a fault of stagehand's
  -- own) must not leave this callback: luv ends the whole process on an
  -- error a callback lets out. It is logged instead, and the loop goes on
  -- pumping (a step leaves the orchestrator whole whatever happens in it),
  -- after check_ms: a clock broken for good is then one line a check, not
  -- a loop spinning on its error.
  local fire
  local function pump()
    local orch = ref.o
    if orch and not orch.stepping then
      in_fire = true
      local ok, err = pcall(orch.step, orch, orch.slice_ms > 0 and orch.slice_ms or nil)
      in_fire = false
      if passing then uv.stop() end
      if not ok then
        logm.guard(nil, "the log function", orch.log, "[stagehand] a step raised: " .. tostring(err))
        -- (unless the step closed the driver: the next reschedule starts one)
        if timer and not timer:is_closing() then timer:start(delay(orch.check_ms, 1), 0, fire) end
      end
    end
  end
  -- The timer's own callback: only then has its deadline passed. (A step
  -- the poll wakes leaves `due` as it is, so a timer still armed is
  -- stopped when nothing is left to wait for, and does not hold the loop
  -- open until a stall time passes.)
  function fire()
    due = nil
    pump()
  end

  -- While work on other threads may end a job, the loop polls the
  -- orchestrator's notifier (a pipe its threads write to: outside.lua), so
  -- a reply wakes the loop and steps it, with no polling by time; and the
  -- poll keeps the loop alive until then. Made once, it then stays
  -- started, and only stops keeping the loop alive (unref) while nothing
  -- can come: closed, its close would be left unfinished if the game ended
  -- outside the loop (see reap), and stopped and started again, it missed
  -- wake-ups now and then.
  local poll, polling, timed = nil, false, false
  local function watch_threads(o)
    local want = E.outside_pending(o)
    if want and not polling then
      if not poll then
        local outside = compat.require_again "stagehand.threads.outside"
        -- (The callback holds the notifier, not the orchestrator: its
        -- descriptor stays open while the poll watches it, so the number
        -- is never another's by then.)
        local notifier = outside.notifier(o)
        local fd, kind = outside.fd(o)
        -- (kept once started: out of memory in between left a handle that
        -- was never started, which later calls took for a watch)
        local made, ok, err
        if fd == nil then
          -- (no descriptor: the pure-Lua core's notifier inside LÖVE is a
          -- channel. A short timer looks at it, stepping only on news.)
          local gen, seen = outside.gen, nil
          made = uv.new_timer()
          ok, err = pcall(made.start, made, NO_FD_MS, NO_FD_MS, function()
            local n = gen(notifier)
            if n ~= seen then
              seen = n
              pump()
            end
          end)
        else
          made = kind == "socket" and uv.new_socket_poll(fd) or uv.new_poll(fd)
          ok, err = pcall(made.start, made, "r", function()
            outside.clear(notifier) -- (even once the orchestrator is gone: a pipe left readable would fire on and on)
            pump()
          end)
        end
        if not ok then
          pcall(made.close, made)
          error(err, 0)
        end
        poll, timed = made, fd == nil
      elseif timed then
        poll:again()
      else
        poll:ref()
      end
      polling = true
    elseif not want and polling then
      if timed then poll:stop() else poll:unref() end
      polling = false
    end
  end

  function d.reschedule(o)
    ref.o = o
    if poll and poll:is_closing() then poll, polling = nil, false end -- (closed from outside: made again)
    watch_threads(o)
    if timer and timer:is_closing() then
      -- Closed from outside (shutdown code that walks every handle and
      -- closes it): a new timer takes its place.
      timer, due = nil, nil
    end
    -- (A clock that cannot tell the time makes next_wake raise: the step
    -- run at once reads it again, and says so through the log.)
    local ok, nw = pcall(o.next_wake, o)
    if not ok then nw = 0 end
    if nw == nil then
      if due then
        timer:stop()
        due = nil
      end
      return
    end
    local read, now = pcall(o.clock)
    local at = read and type(now) == "number" and now + nw or nil
    if due and at and due <= at then return end
    -- (The timer made and started before `due` says so: out of memory in
    -- either left `due` naming a timer that was never made or started, and
    -- the next reschedule indexed a nil timer, or waited on nothing.)
    if not timer then timer = uv.new_timer() end
    timer:start(delay(nw, 0), 0, fire)
    due = at
  end

  -- Runs the loop until something happens or `ms` passes.
  function d.pass(_, ms)
    local t = uv.new_timer()
    t:start(delay(ms, 0), 0, function() end)
    passing = true
    uv.run("once")
    passing = false
    if not t:is_closing() then t:close() end
    uv.run("nowait")
  end

  function d.close()
    local orch = ref.o
    if poll and not poll:is_closing() and not (orch and E.outside_pending(orch)) then
      poll:close()
      poll, polling = nil, false
    end
    if timer and not timer:is_closing() then
      timer:close()
      timer, due = nil, nil
    end
    -- luv 1.44 crashes at lua_close on a handle whose close never
    -- completed (luvit/luv#437): complete it now unless the loop is
    -- running us, in which case this pass completes it.
    if not in_fire then pcall(uv.run, "nowait") end
  end

  -- The game dropped the orchestrator: its handles are stopped now and
  -- closed on the loop (doom), and nothing of luv's holds it.
  d.collected = on_collect(function()
    doom(timer)
    doom(poll)
    timer, poll, polling = nil, nil, false
  end)
  return d
end

return M
