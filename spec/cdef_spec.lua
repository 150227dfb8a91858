-- STYLE practice 2: the Lua-side cdef must match the header's FFI block.
-- The header's FFI block.
local function ffi_block()
  return require("spec.helpers").read("csrc/core/stagehand.h"):match("/%* FFI%-BEGIN %*/(.-)/%* FFI%-END %*/")
end

describe("the FFI cdef", function()
  local read = require("spec.helpers").read

  local function normalise(s)
    s = s:gsub("/%*.-%*/", "")
    s = s:gsub("%s+", " ")
    return (s:gsub("^ ", ""):gsub(" $", ""))
  end

  it("matches the FFI block of csrc/core/stagehand.h", function()
    local block = ffi_block()
    assert.is_string(block)
    assert.is_nil(block:find("#", 1, true))
    local src = read("lua/stagehand/core/ffi_core.lua")
    local cdef = src:match("local CDEF = %[%[(.-)%]%]")
    assert.is_string(cdef)
    assert.equal(normalise((block:gsub("SH_API ", ""))), normalise(cdef))
  end)

  -- (SH_API exports a function from a Windows DLL built by Visual Studio:
  -- one left unmarked would be missing there, and LuaJIT's FFI with it)
  it("marks every function of the header's FFI block SH_API", function()
    local block = ffi_block()
    local functions, unmarked = 0, {}
    for line in block:gmatch("[^\n]+") do
      local name = line:match("^[%w_ ]-[%w_]+%s+%**(sh_[%w_]+)%(")
      if name then
        functions = functions + 1
        if not line:match("^SH_API ") then unmarked[#unmarked + 1] = name end
      end
    end
    assert.is_true(functions > 50)
    assert.same({}, unmarked)
  end)

  if rawget(_G, "jit") then
    it("is accepted by ffi.cdef", function()
      local ffi = require "ffi"
      local src = read("lua/stagehand/core/ffi_core.lua")
      local cdef = src:match("local CDEF = %[%[(.-)%]%]")
      local ok = pcall(ffi.cdef, (cdef:gsub("sh_", "sh_probe_"):gsub("SH_", "SH_PROBE_")))
      assert.is_true(ok)
    end)
  end
end)

-- The C API is declared once, in the header's FFI block; both backends
-- export every function of it by the same name, without its sh_ prefix.
describe("the backends", function()
  it("export every function the header declares", function()
    local block = ffi_block()
    local B = require "stagehand.core.backend"
    local missing, n = {}, 0
    for name in block:gmatch("[%w_%*]+%s+%**sh_([%w_]+)%(") do
      n = n + 1
      if B[name] == nil and not name:match("_free$") and name ~= "pin_library" then missing[#missing + 1] = name end
    end
    assert.is_true(n > 50)
    assert.same({}, missing)
  end)
end)
