-- The one seam between the Lua surface and the native core. On LuaJIT the
-- FFI backend calls the core directly; elsewhere (or with
-- STAGEHAND_BACKEND=c) the classic C module does. Both expose the same
-- functions, named after the C API without its sh_ prefix.
local want = os.getenv("STAGEHAND_BACKEND")
if want ~= nil and want ~= "" and want ~= "ffi" and want ~= "c" then
  error("stagehand: STAGEHAND_BACKEND must be 'ffi' or 'c', got '" .. want .. "'", 0)
end

if want ~= "c" and rawget(_G, "jit") then
  local ok, ffi_core = pcall(require, "stagehand.ffi_core")
  if ok then return ffi_core end
  if want == "ffi" then error(ffi_core, 0) end
end

local C = require "stagehand._core"
local M = { name = "c" }
local each = next -- (a table is walked with each, never pairs: see list.lua)
for k, v in each, C do M[k] = v end
return M
