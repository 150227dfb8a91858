-- engine/nest.lua: calls that reach others in turn (an end ending the
-- jobs that follow it, a group settling the group above), run at once up
-- to a depth, then from a stack of the Nest's own. The ends of a 10,000
-- deep chain of loaders rest on it; here it is checked on its own.
local nest = require "stagehand.engine.nest"

-- How many Lua frames are under way below the caller.
local function frames()
  local n = 2
  while debug.getinfo(n, "l") do n = n + 1 end
  return n
end

describe("a Nest", function()
  it("runs every call of a chain 10,000 long, on a stack that stays shallow", function()
    for _, limit in ipairs { 1, 2, 32 } do
      local ns = nest.new(limit)
      local ran, deepest, base = 0, 0, frames()
      local function link(i)
        ran = ran + 1
        deepest = math.max(deepest, frames() - base)
        if i < 10000 then ns:call(link, i + 1) end
      end
      ns:call(link, 1)
      assert.equal(10000, ran)
      assert.is_true(deepest < 8 * limit + 16, "limit " .. limit .. ": " .. deepest .. " frames deep")
    end
  end)

  it("has the deepest level under way run what waits before it returns, so each call's reach is done when it returns", function()
    local ns = nest.new(2)
    local order = {}
    local function leaf(name) order[#order + 1] = name end
    local function second()
      order[#order + 1] = "second"
      ns:call(leaf, "third") -- (two levels deep: waits)
      ns:call(leaf, "fourth")
      order[#order + 1] = "second returns"
    end
    ns:call(function()
      order[#order + 1] = "first"
      ns:call(second)
      order[#order + 1] = "back in first"
    end)
    assert.same({ "first", "second", "second returns", "fourth", "third", "back in first" }, order)
  end)

  it("passes a call's three arguments", function()
    local ns = nest.new(1)
    local got
    ns:call(function()
      ns:call(function(a, b, c) got = { a, b, c } end, "a", false, 3)
    end)
    assert.same({ "a", false, 3 }, got)
  end)

  it("raises a fault at the outermost call and then works as before, what was waiting run by the next", function()
    local ns = nest.new(1)
    local ran = {}
    for i = 1, 5 do
      local ok, err = pcall(ns.call, ns, function()
        ns:call(function() ran[#ran + 1] = "pushed " .. i end) -- (waits: one level deep)
        error("fault " .. i, 0)
      end)
      assert.is_false(ok)
      assert.equal("fault " .. i, err)
    end
    assert.same({}, ran) -- (a fault leaves what waits for the next outermost call)
    ns:call(function() ran[#ran + 1] = "next" end)
    assert.same({ "next", "pushed 5", "pushed 4", "pushed 3", "pushed 2", "pushed 1" }, ran)
    -- and a chain still runs whole
    local n = 0
    local function link(i)
      n = n + 1
      if i < 100 then ns:call(link, i + 1) end
    end
    ns:call(link, 1)
    assert.equal(100, n)
  end)

  -- (Lua 5.1 cannot yield across the pcall that guards the outermost level.)
  local pcall_yields = coroutine.wrap(function() return pcall(coroutine.yield, true) end)() == true
  if pcall_yields then
    it("counts levels per coroutine: one suspended inside a call holds up no call elsewhere", function()
      local ns = nest.new(1)
      local ran = {}
      local co = coroutine.create(function()
        ns:call(function()
          coroutine.yield()
          ns:call(function() ran[#ran + 1] = "inside, resumed" end)
        end)
      end)
      assert(coroutine.resume(co))
      ns:call(function() ran[#ran + 1] = "main" end)
      assert.same({ "main" }, ran)
      assert(coroutine.resume(co))
      assert.same({ "main", "inside, resumed" }, ran)
      assert.equal("dead", coroutine.status(co))
    end)
  end
  it("keeps a waiting call that raised for the next outermost call, and flush runs it", function()
    local ns = nest.new(1)
    local ran, tries = {}, 0
    local function flaky()
      tries = tries + 1
      if tries == 1 then error("not enough memory", 0) end
      ran[#ran + 1] = "flaky"
    end
    local ok, err = pcall(ns.call, ns, function()
      ns:call(function() ran[#ran + 1] = "after" end) -- (waits: runs after flaky, pushed later)
      ns:call(flaky)
    end)
    assert.is_false(ok)
    assert.equal("not enough memory", err)
    assert.same({}, ran) -- (flaky raised as it ran first, and is still waiting, with the other)
    nest.flush()
    assert.same({ "flaky", "after" }, ran)
    assert.equal(2, tries)
    nest.flush() -- (nothing waits: nothing runs)
    assert.same({ "flaky", "after" }, ran)
  end)
end)
