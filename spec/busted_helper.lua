-- Loaded by busted before any spec (.busted's helper). On a LuaJIT with
-- bug #829 (lua/stagehand/core/compat.lua says which: Debian 12's), a
-- compiled next() may crash the process. stagehand's own code compiles
-- none (spec/jit_spec.lua checks), but busted's did: penlight's
-- tablex.copy, which copies package.loaded for every file and insulate
-- block, compiled a call of lj_vm_next and took the pure-Lua core's suite
-- down with SIGSEGV about once in twenty runs. So here, on such a LuaJIT,
-- the global `next` is compat's `each` (the C module's next, around which
-- traces stitch) and `pairs` walks with it, and the functions of busted,
-- penlight, luassert and say (some keep `pairs` or `next` in locals of
-- their own) stay out of the JIT. (spec/jit_spec.lua puts LuaJIT's next
-- back while it watches what stagehand's code compiles.)
local compat = require "stagehand.core.compat"
package.loaded["spec.busted_helper"] = { raw_next = next }
if compat.next_unsafe then
  local each, raw_pairs, off = compat.each, pairs, rawget(_G, "jit").off
  _G.next = each
  _G.pairs = function(t)
    if type(t) ~= "table" then return raw_pairs(t) end -- (its error, as it says it)
    return each, t, nil
  end
  local seen = {}
  local function keep_out(v)
    if seen[v] then return end
    seen[v] = true
    if type(v) == "function" then
      pcall(off, v, true) -- (with every function made inside it; a C function is refused, harmlessly)
    elseif type(v) == "table" then
      for _, field in each, v do keep_out(field) end
    end
  end
  seen[_G], seen[package.loaded] = true, true
  for name, module in each, package.loaded do
    if type(name) == "string" and (name:find("^pl%.") or name:find("^busted") or name:find("^luassert")
        or name:find("^say")) then
      keep_out(module)
    end
  end
end
