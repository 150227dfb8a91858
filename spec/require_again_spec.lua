-- compat.require_again: the modules stagehand loads on first use (a
-- driver, newest, the trace, the threads) load again after a load that
-- raised. Lua 5.1 and LuaJIT mark such a module in package.loaded, and
-- a plain require of it raises "loop or previous error loading module"
-- from then on; the failing allocator's seeded mixes met it as a first
-- orch:newest that ran out of memory, after which no newest could run.
local require_again = require("stagehand.core.compat").require_again

describe("require_again", function()
  local names = { "stagehand_spec_outer", "stagehand_spec_inner" }
  local fail_inner
  before_each(function()
    for _, name in ipairs(names) do package.loaded[name] = nil end
    fail_inner = true
    package.preload.stagehand_spec_inner = function()
      if fail_inner then error("not enough memory", 0) end
      return { inner = true }
    end
    package.preload.stagehand_spec_outer = function()
      return { outer = true, inner = require "stagehand_spec_inner" }
    end
  end)
  after_each(function()
    for _, name in ipairs(names) do
      package.loaded[name] = nil
      package.preload[name] = nil
    end
  end)

  it("raises the load's own error, then loads the module and any it was loading", function()
    local ok, err = pcall(require_again, "stagehand_spec_outer")
    assert.is_false(ok)
    assert.equal("not enough memory", err)
    for _, name in ipairs(names) do
      local v = package.loaded[name]
      assert.is_true(v == nil or type(v) == "table", name .. " is left marked: " .. tostring(v))
    end
    fail_inner = false
    local m = require_again("stagehand_spec_outer")
    assert.is_true(m.outer)
    assert.is_true(m.inner.inner)
    assert.equal(m, require "stagehand_spec_outer")
  end)

  it("returns a module loaded already without loading it again", function()
    fail_inner = false
    local m = require_again("stagehand_spec_inner")
    package.preload.stagehand_spec_inner = function() error("loaded twice") end
    assert.equal(m, require_again("stagehand_spec_inner"))
  end)
end)
