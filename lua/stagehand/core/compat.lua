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

return { each = next, on_collect = on_collect, close_coroutine = close_coroutine }
