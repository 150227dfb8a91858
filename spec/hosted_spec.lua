-- Hosted workers: a pool's worker whose thread the host starts (inside
-- LÖVE, a love.thread thread; spec/love runs that). Here a native worker
-- plays the host, so the core's side (the registry of tokens, serving in
-- a state it did not make, leaving it clean) runs on every runtime and
-- under the sanitizers.
local stagehand = require "stagehand"
local T = require "stagehand.testing"

if not package.path:find("spec/fixtures/?.lua", 1, true) then
  package.path = "spec/fixtures/?.lua;" .. package.path
end

local WAIT = 10000

describe("a hosted worker", function()
  local orch
  before_each(function() orch = T.new { stall_ms = 10000, log = function() end } end)
  after_each(function() orch:close() end)

  -- One worker of the pool is held, so the next request can only go to
  -- the other: returns where each ran (the set of the two) and the held
  -- request with the port that lets it go.
  local function both_answer(pool)
    local ports = { started = stagehand.port(), go = stagehand.port() }
    local held = pool:run("hold_where", ports)
    orch:step()
    local first = ports.started:receive_within(WAIT)
    local state, second = orch:wait(pool:run("where"), WAIT)
    assert.equal("done", state)
    return { [first] = true, [second] = true }, held, ports.go
  end

  it("runs a pool's requests in the state of the thread that serves its token, and returns once stopped", function()
    local pool = stagehand.pool(orch, { module = "fixture_worker", size = 1 })
    local idx, token = pool.ud:_add_worker(true)
    assert.equal(1, idx)
    assert.is_number(token)
    local host = stagehand.spawn(orch, "fixture_worker.host", token)
    -- (one of the two runs in the hosting state)
    local seen, held, go = both_answer(pool)
    assert.same({ hosted = true, native = true }, seen)
    local s2, sum = orch:wait(pool:run("add", { a = 2, b = 3 }), WAIT)
    assert.same({ "done", 5 }, { s2, sum })
    go:post("go")
    assert.equal("done", (orch:wait(held, WAIT)))
    assert.equal("done", (orch:wait(pool:destroy(), WAIT)))
    assert.same({ "done", "served" }, { orch:wait(host.done, WAIT) })
  end)

  it("serves a token once, and refuses one no pool made", function()
    local pool = stagehand.pool(orch, { module = "fixture_worker", size = 1 })
    local _, token = pool.ud:_add_worker(true)
    local host = stagehand.spawn(orch, "fixture_worker.host", token)
    -- (both workers answering proves the host has taken the token)
    local seen, held, go = both_answer(pool)
    assert.same({ hosted = true, native = true }, seen)
    go:post("go")
    assert.equal("done", (orch:wait(held, WAIT)))
    local state, ok, err = orch:wait(stagehand.spawn(orch, "fixture_worker.serve_bad", token).done, WAIT)
    assert.equal("done", state)
    assert.is_false(ok)
    assert.matches("bad argument 'token' to threads.serve: no worker waits under", err, 1, true)
    state, ok = orch:wait(stagehand.spawn(orch, "fixture_worker.serve_bad", 1e15).done, WAIT)
    assert.same({ "done", false }, { state, ok })
    assert.equal("done", (orch:wait(pool:destroy(), WAIT)))
    assert.equal("done", (orch:wait(host.done, WAIT)))
  end)

  it("ends a failure's traceback at the request's own frame, as a native worker's does", function()
    local pool = stagehand.pool(orch, { module = "fixture_worker", size = 1 })
    local _, token = pool.ud:_add_worker(true)
    local host = stagehand.spawn(orch, "fixture_worker.host", token)
    -- Hold the native worker, so the next request runs on the hosted one.
    local started, go = stagehand.port(), stagehand.port()
    local held = pool:run("hold_where", { started = started, go = go })
    orch:step()
    if started:receive_within(WAIT) == "hosted" then
      local go_native = stagehand.port()
      local native = pool:run("hold_where", { started = started, go = go_native })
      orch:step()
      assert.equal("native", started:receive_within(WAIT))
      go:post("go")
      assert.equal("done", (orch:wait(held, WAIT)))
      held, go = native, go_native
    end
    local state, err = orch:wait(pool:run("deep_boom", 3), WAIT)
    assert.equal("failed", state)
    assert.matches("deep in a hosted worker", err.message, 1, true)
    local hosted_tb = err.traceback
    go:post("go")
    assert.equal("done", (orch:wait(held, WAIT)))
    -- (the host's own frames, serve and the spawned worker that called it,
    -- are none of the request's)
    assert.is_nil(hosted_tb:find("'serve'", 1, true))
    local _, frames = hosted_tb:gsub("fixture_worker%.lua:%d+: in ", "") -- (the raise and its three callers)
    assert.equal(4, frames, hosted_tb)
    -- The same request on a pool of native workers fails with the same
    -- traceback, but for where it ran.
    local natives = stagehand.pool(orch, { module = "fixture_worker", size = 1 })
    local _, native_err = orch:wait(natives:run("deep_boom", 3), WAIT)
    assert.equal(native_err.traceback, (hosted_tb:gsub("a hosted worker", "a native worker")))
    assert.equal("done", (orch:wait(natives:destroy(), WAIT)))
    assert.equal("done", (orch:wait(pool:destroy(), WAIT)))
    assert.same({ "done", "served" }, { orch:wait(host.done, WAIT) })
  end)

  it("exits with its pool when no thread ever served it", function()
    local pool = stagehand.pool(orch, { module = "fixture_worker", size = 1 })
    local idx, token = pool.ud:_add_worker(true)
    assert.equal(1, pool.ud:_unserved())
    assert.is_true(pool.ud:_unhost(idx))
    assert.equal(0, pool.ud:_unserved()) -- (a thread that failed to start: its worker exits)
    assert.is_false(pool.ud:_unhost(idx))
    local _, later = pool.ud:_add_worker(true) -- (and one left for the pool's end to take)
    assert.equal("done", (orch:wait(pool:destroy(), WAIT)))
    -- Neither token is served any more: the first left, the second went with the pool's close.
    for _, t in ipairs { token, later } do
      local state, ok = orch:wait(stagehand.spawn(orch, "fixture_worker.serve_bad", t).done, WAIT)
      assert.same({ "done", false }, { state, ok })
    end
  end)
end)
