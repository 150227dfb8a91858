-- What differs between the runtimes, in one place.
--
-- Walking a table: stagehand writes `for k, v in each, t do`, never
-- `pairs(t)` nor `in next, t`. This is the one place that says why.
--
-- The LuaJIT Debian ships (2.1.0-beta3, a snapshot of 2022-03-20, which
-- LÖVE 11.4 on Debian runs on too) ends a pairs loop early once the JIT
-- blacklists it: the loop's specialised iteration (the ITERN bytecode) is
-- patched back to a call of next with the specialisation's own index as
-- the key (LuaJIT issue #827, fixed upstream soon after; #1510, fixed in
-- 2026, drops an entry the same way). A close from another orchestrator's
-- job once found no job to cancel in an orchestrator running five. LuaJIT's
-- parser specialises only a loop whose iterator is spelled pairs or next;
-- `each` is next by another name, so its loops call next plainly.
--
-- Enforced by spec/jit_spec.lua (no function of stagehand's holds a
-- specialised loop) and by luacheck (.luacheckrc: pairs is no global in
-- lua/). It can go once the LuaJIT stagehand supports on Debian has the
-- fix: then `each` is next again, and pairs is fine.
--
-- on_collect(fn): a value whose collection calls fn, for the owner of
-- something a game may drop (an orchestrator's luv handles, a spawned
-- worker): a table's __gc on Lua 5.2 and later, a proxy's on Lua 5.1 and
-- LuaJIT, whose tables run no __gc.
local newproxy = rawget(_G, "newproxy")
local function on_collect(fn)
  if newproxy then
    local p = newproxy(true)
    getmetatable(p).__gc = fn
    return p
  end
  return setmetatable({}, { __gc = fn })
end

-- require_luv(): pcall(require, "luv"), made safe for a game that first
-- reaches luv inside a coroutine (a scene script that makes the game's
-- first orchestrator, a job that makes one). luv before 1.50 on Lua 5.2
-- and later, and every luv on 5.1 and LuaJIT (Debian 12 ships 1.44), keeps
-- the Lua thread that first required it and runs every callback on it
-- (luvit/luv#503): once that coroutine is collected, the next callback or
-- the close at exit works in freed memory, and the process dies. Off the
-- main thread, luv is required inside a coroutine of its own that returns
-- at once and is kept for the life of the state: a thread that has
-- returned is as good as a new one to call functions on.
local LUV_HOME = "stagehand.luv home thread"
local homes = {} -- (where the registry is hidden, as in a sandbox)
local function on_main_thread()
  local co, main = coroutine.running()
  return co == nil or main == true -- (nil: the main thread on 5.1 and LuaJIT)
end
local function require_luv()
  local loaded = package.loaded.luv
  if loaded then return true, loaded end
  if on_main_thread() then return pcall(require, "luv") end
  local home = coroutine.create(function() return require "luv" end)
  local ok, uv = coroutine.resume(home)
  if ok then
    local reg = debug and debug.getregistry and debug.getregistry()
    if type(reg) == "table" then reg[LUV_HOME] = home else homes[#homes + 1] = home end
  end
  return ok, uv
end

-- close_coroutine(co, err, died): Lua 5.4 does not unwind a coroutine that
-- dies with an error or is never resumed, so its to-be-closed variables
-- close only in coroutine.close. This closes co (dead or suspended) and
-- returns err, or what a closing method raised in its place (an error
-- other than the one co `died` with), as a pcall would have it. Before
-- 5.4 there is nothing to close.
local co_close = coroutine.close
local function close_coroutine(co, err, died)
  if not co_close then return err end
  local ok, raised = co_close(co)
  if ok or rawequal(raised, died) then return err end
  return raised
end

-- LuaJIT bug #829 (fixed upstream on 2022-04-05, two weeks after the
-- snapshot Debian 12 ships): on x64 with GC64, a compiled call of next()
-- (IR_NEXT, which LuaJIT 2.1 compiles since 2020; the 2017 release does
-- not) may come out of the register allocator as a 32-bit exchange of a
-- pointer, and the trace then reads memory it does not own: the process
-- dies with SIGSEGV, now and then, wherever a loop or a check over a
-- table's keys is hot. It was met running the spec suite on the pure-Lua
-- core (about one run in five of spec/keys_model_spec.lua; never with
-- the JIT off). Where this LuaJIT compiles next and its version predates
-- the fix's (2.1.0-beta3: later builds say 2.1.<time>), `each` is the C
-- module's next, around which traces stitch, or, without it, a wrapper
-- the JIT never records: no IR_NEXT is compiled from stagehand's code.
local function next_compiles()
  local jit = rawget(_G, "jit")
  if type(jit) ~= "table" or jit.version ~= "LuaJIT 2.1.0-beta3" or jit.arch ~= "x64"
      or not jit.attach or not jit.status() then
    return false
  end
  local ok, ffi = pcall(require, "ffi")
  if not ok or not ffi.abi("gc64") then return false end
  local function probe(t)
    local n = 0
    for _ = 1, 200 do
      local k = next(t)
      while k ~= nil do
        n = n + 1
        k = next(t, k)
      end
    end
    return n
  end
  local mine, compiled = {}, false
  local function on_trace(what, tr, func)
    if what == "start" and func == probe then mine[tr] = true end
    if what == "stop" and mine[tr] then compiled = true end
  end
  -- LuaJIT keeps one handler an event, in the registry's _VMEVENTS: the
  -- probe's would replace the game's own, -jv's or a profiler's for good.
  -- The one it replaced is found there and attached again afterwards.
  local registry = type(debug) == "table" and debug.getregistry and debug.getregistry()
  -- (a copy of the handlers, and the key `fn` is under; walked without a
  -- for-in loop over next, which LuaJIT #827 may end early)
  local function handlers(fn)
    local events = type(registry) == "table" and rawget(registry, "_VMEVENTS")
    local copy, at = {}, nil
    if type(events) == "table" then
      local k, v = next(events)
      while k ~= nil do
        copy[k] = v
        if v == fn then at = k end
        k, v = next(events, k)
      end
    end
    return copy, at
  end
  local before = handlers()
  jit.attach(on_trace, "trace")
  local _, at = handlers(on_trace)
  local previous = at ~= nil and before[at] or nil
  probe({ a = 1, b = 2, c = 3, d = 4 })
  jit.attach(on_trace)
  if type(previous) == "function" then jit.attach(previous, "trace") end
  return compiled
end

local each, next_unsafe = next, next_compiles()
local function use_c_next() end
if next_unsafe then
  -- (until the C module is known, a wrapper the JIT never records; a
  -- module loaded later, as LÖVE's first run writes the core out, is
  -- handed over by backend.lua)
  local impl = function(t, k) return next(t, k) end
  rawget(_G, "jit").off(impl)
  each = function(t, k) return impl(t, k) end
  use_c_next = function(fn) if type(fn) == "function" then impl = fn end end
  local found, core = pcall(require, "stagehand._core")
  if found and type(core) == "table" then use_c_next(core.next) end
end

-- require_again(name): require, for a module stagehand loads on first
-- use (a driver, newest, the trace, the threads). Lua 5.1 and LuaJIT mark
-- a module whose loading raised, memory running out partway say, in
-- package.loaded, and every later require of it (and of any module it
-- was loading) raised "loop or previous error loading module": the
-- feature was gone for good. Those marks are cleared here as the error
-- passes, so the next call loads it again. (Lua 5.2 and later leave none.
-- The mark is a light userdata, which LuaJIT's type() calls a number:
-- anything but the table every such module returns.)
local function require_again(name)
  local loaded = package.loaded
  local m = loaded[name]
  if type(m) == "table" then return m end
  local ok, got = pcall(require, name)
  if ok then return got end
  local mark = loaded[name]
  if mark ~= nil and type(mark) ~= "table" then
    for k, v in each, loaded do
      if v == mark then loaded[k] = nil end
    end
  end
  error(got, 0)
end

return { each = each, on_collect = on_collect, close_coroutine = close_coroutine, next_unsafe = next_unsafe,
  use_c_next = use_c_next, require_luv = require_luv, require_again = require_again }
