-- How a game proves its own loader ends, written as a game programmer would.
-- The loader below stands for a game's module (load_level); the spec drives
-- it on a fake clock with stagehand.testing and checks that every loader
-- ends, whatever the asset server does.
local stagehand = require "stagehand"
local T = require "stagehand.testing"

-- The game's loader: fetches a level's assets, decodes them within a frame
-- budget, and builds the level once all of them are in.
local function load_level(orch, server, level)
  return orch:run("Loading level " .. level.name, function(job)
    local assets = {}
    for i, name in ipairs(level.assets) do
      assets[i] = orch:run("Fetching " .. name, function(fetch)
        local bytes = fetch:await(server.fetch(name))
        fetch:permit("decode")
        return #bytes
      end, { key = "asset:" .. name, stall_ms = 5000 })
    end
    local sizes = job:await(stagehand.all(assets))
    local total = 0
    for _, n in ipairs(sizes) do total = total + n end
    return total
  end, { priority = "visible" })
end

-- A fake asset server: each fetch is a future the spec settles (or not).
local function fake_server()
  local pending = {}
  return {
    fetch = function(name)
      local f = stagehand.future("fetch " .. name)
      pending[name] = f
      return f
    end,
    answer = function(name, bytes) pending[name]:resolve(bytes) end,
    fail = function(name, why) pending[name]:reject(why) end,
  }
end

describe("load_level", function()
  local orch, server
  before_each(function()
    orch = T.new { log = function() end }
    orch:budget("decode", { ops = 2 })
    server = fake_server()
  end)

  it("builds the level once every asset arrived", function()
    local h = load_level(orch, server, { name = "crypt", assets = { "floor", "torch", "ghost" } })
    server.answer("floor", "1234")
    server.answer("torch", "12")
    server.answer("ghost", "123456")
    T.settle(orch, 1000)
    assert.ended(h)
    assert.same({ "done", 12 }, { h:result() })
    assert.all_ended(orch)
    assert.no_leaks(orch)
  end)

  it("ends, failed, when the server refuses an asset", function()
    local h = load_level(orch, server, { name = "crypt", assets = { "floor", "torch" } })
    server.fail("torch", "404 torch")
    server.answer("floor", "1")
    assert.equal(0, T.settle(orch, 1000))
    local st, err = h:result()
    assert.equal("failed", st)
    assert.matches("404 torch", tostring(err))
    assert.all_ended(orch)
    assert.no_leaks(orch)
  end)

  it("ends, stalled, when the server never answers", function()
    local h = load_level(orch, server, { name = "crypt", assets = { "floor" } })
    assert.equal(0, T.settle(orch, 60000))
    assert.ended(h)
    assert.equal("failed", h:state()) -- the fetch stalled; the level heard it
    assert.is_true(stagehand.is_error(select(2, h:result()).cause, "stalled"))
    assert.no_leaks(orch)
  end)

  it("fetches an asset two levels share only once", function()
    local fetches = 0
    local fetch = server.fetch
    server.fetch = function(name)
      fetches = fetches + 1
      return fetch(name)
    end
    local a = load_level(orch, server, { name = "crypt", assets = { "torch" } })
    local b = load_level(orch, server, { name = "tower", assets = { "torch" } })
    server.answer("torch", "abc")
    T.settle(orch, 1000)
    assert.equal(1, fetches)
    assert.same({ "done", 3 }, { a:result() })
    assert.same({ "done", 3 }, { b:result() })
  end)

  it("ends when the player leaves the level mid-load", function()
    local h = load_level(orch, server, { name = "crypt", assets = { "floor", "torch" } })
    h:cancel("player left")
    assert.equal(0, T.settle(orch, 1000))
    assert.equal("cancelled", h:state())
    assert.all_ended(orch) -- the fetches it started went with it
    assert.no_leaks(orch)
  end)
end)
