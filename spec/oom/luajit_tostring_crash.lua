-- A LuaJIT fault, not stagehand's: run in build/oom_host_luajit (whose
-- allocator fails on demand), this crashes LuaJIT 2.1's interpreter, both
-- Debian's (2022) and upstream's of August 2026, where Lua 5.1 and 5.4 end
-- every run with "not enough memory". Memory that runs out inside
-- tostring(number), after a C function's call left the Lua stack's top
-- below the running frame, writes the error over that frame's link, and
-- the unwinder then walks garbage. scripts/oom.sh runs this first: while
-- it crashes, the scenarios that meet it (a job's wait on a round barrier
-- names its round this way) are left out on LuaJIT, and the line says so.
-- luacheck: no unused, globals oom
local getenv = os.getenv
local function park(a, b, label, c, d) return label end
local function wait(b2, op, round, count, index, share, out)
  local job = {}
  local ok, begun
  ok, begun = pcall(newproxy, false)
  local st
  st = getenv("HOME", round, out)
  return park(job, b2, "round " .. tostring(round) .. " of a round barrier", round, out)
end
local function body() return wait(nil, "sum", 1, 2, 1, { 1 }, {}) end
for n = 0, 30 do
  local co = coroutine.create(body)
  oom.fail_after(n)
  local ok = coroutine.resume(co)
  oom.off()
  if ok then break end
end
print("every run ended with \"not enough memory\"")
