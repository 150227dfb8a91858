-- The threads' half of the C module (csrc/lua/: lvalues.c, lchannels.c, lworkers.c, lpool.c): worker states,
-- notifiers, ports, round barriers, and copying values between states.
-- Always the classic module, on every runtime: LuaJIT's FFI backend is for
-- the hot paths of jobs, and these copy Lua values, which only the Lua C
-- API can read.
local B = require "stagehand.core.backend"
if B.threads then return B.threads end
if B.name == "lua" and require("stagehand.core.love_work").available() then
  -- (inside LÖVE: pools on LÖVE's threads, in Lua; ports and rounds raise)
  return require "stagehand.core.love_work"
end
if B.name == "lua" then -- (the calls raise: stagehand.pool and its kin say why first)
  return setmetatable({}, { __index = function(_, name)
    return function()
      error("stagehand: " .. name .. " needs the native core (this program runs on the pure-Lua core)", 2)
    end
  end })
end
return require("stagehand._core").threads
