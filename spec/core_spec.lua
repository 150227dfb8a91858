-- The native core through the backend seam: bad input from Lua never crashes
-- the process; the core answers with a status.
local B = require "stagehand.backend"

local EINVAL, ESTATE = -1, -3

describe("the native core", function()
  it("refuses ids out of range", function()
    local c = B.clock_new()
    assert.equal(EINVAL, B.clock_start(c, -1, 10, 0))
    assert.equal(EINVAL, B.clock_start(c, 2 ^ 24, 10, 0))
    assert.equal(EINVAL, B.clock_progress(c, 5, 0))
    assert.equal(EINVAL, B.clock_stop(c, 99))
    assert.equal(EINVAL, B.clock_pause(c, 1e9))
    assert.equal(0, B.clock_check(c))
  end)

  it("refuses bad times and stall lengths", function()
    local c = B.clock_new()
    assert.equal(EINVAL, B.clock_start(c, 0, 0, 0))
    assert.equal(EINVAL, B.clock_start(c, 0, -1, 0))
    assert.equal(EINVAL, B.clock_start(c, 0, 0 / 0, 0))
    assert.equal(EINVAL, B.clock_start(c, 0, math.huge, 0))
    assert.equal(EINVAL, B.clock_start(c, 0, 10, 0 / 0))
    assert.equal(0, B.clock_start(c, 0, 10, 0))
    assert.equal(ESTATE, B.clock_start(c, 0, 10, 0))
  end)

  it("keeps timers consistent under bad input", function()
    local t = B.timers_new()
    assert.equal(EINVAL, B.timers_add(t, -5, 1))
    assert.equal(EINVAL, B.timers_add(t, 1, 0 / 0))
    assert.equal(ESTATE, B.timers_cancel(t, 3))
    assert.equal(0, B.timers_add(t, 3, 10))
    assert.equal(-1, B.timers_pop(t, 0 / 0))
    assert.equal(3, B.timers_pop(t, 10))
    assert.equal(0, B.timers_check(t))
  end)

  it("refuses bad pool ids and groups, and reuses only a group nobody waits in", function()
    local p = B.pool_new()
    assert.equal(0, B.pool_set_capacity(p, 0))
    assert.equal(EINVAL, B.pool_set_capacity(p, -1))
    assert.equal(EINVAL, B.pool_enqueue(p, -1, 0))
    assert.equal(EINVAL, B.pool_enqueue(p, 0, 2 ^ 24))
    assert.equal(0, B.pool_enqueue(p, 7, 3))
    assert.equal(ESTATE, B.pool_enqueue(p, 7, 3))
    assert.equal(EINVAL, B.pool_move(p, 7, -1))
    assert.equal(ESTATE, B.pool_move(p, 8, 1))
    assert.equal(EINVAL, B.pool_set_rank(p, 1000, 1))
    assert.equal(EINVAL, B.pool_fix_rank(p, -1, 1))
    assert.equal(EINVAL, B.pool_forget_group(p, -1))
    assert.equal(EINVAL, B.pool_forget_group(p, 2 ^ 24))
    assert.equal(ESTATE, B.pool_forget_group(p, 3)) -- 7 waits in it
    assert.equal(0, B.pool_remove(p, 7))
    assert.equal(0, B.pool_forget_group(p, 3))
    assert.equal(0, B.pool_forget_group(p, 500)) -- never used: nothing to forget
    assert.equal(0, B.pool_check(p))
  end)

  it("survives many clocks being made and collected", function()
    for _ = 1, 200 do
      local c = B.clock_new()
      B.clock_start(c, 1000, 5, 0)
    end
    collectgarbage()
    collectgarbage()
    assert.is_true(true)
  end)

  if B.name == "c" then
    it("raises a clear error for a wrong object type", function()
      assert.has_error(function() B.clock_start({}, 0, 1, 0) end)
      assert.has_error(function() B.clock_start(B.timers_new(), 0, 1, 0) end)
      assert.has_error(function() B.clock_start(B.clock_new(), "x", 1, 0) end)
    end)

    it("maps fractional ids to a refusal, not a cast", function()
      assert.equal(EINVAL, B.clock_start(B.clock_new(), 1.5, 1, 0))
    end)
  end
end)
