-- stagehand.love's hooks, outside LÖVE: a stand-in `love` table whose
-- love.timer is a fake clock, so the frame, visibility and quit hooks are
-- checked on every runtime without LÖVE (spec/love runs the real thing).
local stagehand = require "stagehand"
local T = require "stagehand.testing"

describe("stagehand.love", function()
  local saved_love = rawget(_G, "love")
  local clock = T.clock(0)
  local heard = {}
  -- (one `love` for the whole file: the helper hooks a game's love table once)
  local love = {
    timer = { getTime = function() return clock.now / 1000 end },
    handlers = {
      visible = function(v) heard[#heard + 1] = "visible " .. tostring(v) end,
      focus = function(f) heard[#heard + 1] = "focus " .. tostring(f) end,
    },
  }
  local for_love
  setup(function()
    rawset(_G, "love", love)
    for_love = require "stagehand.love"
  end)
  teardown(function() rawset(_G, "love", saved_love) end)

  it("refuses to run outside LÖVE, and a driver or clock of the game's own", function()
    rawset(_G, "love", nil)
    assert.error_matches(function() for_love.new() end, "LÖVE is not running here")
    rawset(_G, "love", love)
    assert.error_matches(function() for_love.new { clock = os.clock } end, "'opts.clock' to stagehand.love.new")
    assert.error_matches(function() for_love.new { driver = "luv" } end, "'opts.driver' to stagehand.love.new")
    assert.error_matches(function() for_love.new { step_ms = 0 } end, "'opts.step_ms' to stagehand.love.new")
    assert.error_matches(function() for_love.new(5) end, "'opts' to stagehand.love.new")
  end)

  it("steps after the game's love.update, on love.timer's clock", function()
    local updates = {}
    love.update = function(dt) updates[#updates + 1] = dt end -- (the game's, before the call)
    local orch = for_love.new { step_ms = 3 }
    local woke
    orch:run("sleeper", function(job)
      job:sleep(50)
      woke = orch.now
    end)
    love.update(0.016)
    assert.same({ 0.016 }, updates)
    assert.is_nil(woke)
    clock:advance(60)
    love.update(0.016)
    assert.equal(60, woke)
    assert.equal(2, #updates)
    -- A love.update the game defines after the call runs too, and the step after it.
    local later = 0
    love.update = function() later = later + 1 end
    local h = orch:run("later", function(job) job:sleep(10) return "ran" end)
    clock:advance(20)
    love.update(0.016)
    love.update(0.016)
    assert.equal(2, later)
    assert.same({ "done", "ran" }, { h:result() })
  end)

  it("pauses stall clocks while the window is hidden or loses focus, and still calls the game's handlers", function()
    local logged = {}
    local orch = for_love.new { stall_ms = 100, check_ms = 10, log = function(line) logged[#logged + 1] = line end }
    local h = orch:run("waits", function(job) job:await(stagehand.future()) end)
    love.update(0)
    love.handlers.visible(false)
    assert.is_false(orch:visible())
    clock:advance(500)
    love.update(0)
    assert.equal("running", h:state()) -- (hidden time never counts)
    love.handlers.focus(true)
    assert.is_true(orch:visible())
    assert.same({ "visible false", "focus true" }, { heard[#heard - 1], heard[#heard] })
    clock:advance(200)
    love.update(0)
    love.update(0)
    assert.equal("stalled", h:state())
    assert.same({ "[stagehand] waits made no progress for 0.1 s." }, logged) -- (through the game's log, once)
  end)

  if stagehand.backend ~= "lua" then -- (worker threads: not on the pure-Lua core)
    it("shuts the orchestrator and destroys its pools when the game quits, after the game's love.quit", function()
      local orch = for_love.new()
      local pool = stagehand.pool(orch, { source = "return { echo = function(x) return x end }", size = 1 })
      local asked = 0
      love.quit = function()
        asked = asked + 1
        return asked == 1 -- (the first time, the game keeps running)
      end
      local h = orch:run("forever", function(job) job:await(stagehand.future()) end)
      assert.is_true(love.quit())
      assert.equal("running", h:state())
      assert.is_false(love.quit())
      assert.equal(2, asked)
      assert.equal("cancelled", h:state())
      assert.has_error(function() pool:run("echo", 1) end)
      -- (the pool's threads exited: its destroy settled inside quit)
      assert.equal("done", pool.destroyed:state())
      love.quit = nil
    end)
  end

  if stagehand.backend ~= "lua" then -- (worker threads: not on the pure-Lua core)
    it("ends a load the player quits in the middle of as cancelled, requests included, and logs no failure", function()
      local lines = {}
      local orch = for_love.new { log = function(line) lines[#lines + 1] = line end }
      local pool = stagehand.pool(orch, { source = "return { hold = function(p) return p:receive() end }", size = 1 })
      local inbox = stagehand.port()
      local decoding = orch:run("decoding", function(job) return job:await(pool:run("hold", inbox)) end)
      local queued = orch:run("queued", function(job) return job:await(pool:run("hold", inbox)) end)
      love.update(0)
      assert.is_false(love.quit())
      assert.equal("cancelled", decoding:state())
      assert.equal("cancelled", queued:state())
      assert.equal("done", pool.destroyed:state())
      for _, line in ipairs(lines) do assert.not_matches("failed", line) end
    end)
  end

  it("hooks one orchestrator at a time: a second call closes the first", function()
    local first = for_love.new()
    local h = first:run("waits", function(job) job:await(stagehand.future()) end)
    local second = for_love.new()
    assert.equal("cancelled", h:state())
    local ran
    second:run("runs", function() ran = true end)
    love.update(0)
    assert.is_true(ran)
  end)
end)
