-- Worker pools against luv's uv.new_work (libuv's thread pool, a Lua state
-- per thread), measured in the same run: bench.lua's section 10. Times
-- here are wall-clock (work runs on other threads), each the median of
-- several rounds.
local stagehand = require "stagehand"
local B = require "stagehand.core.backend"
local has_luv, uv = pcall(require, "luv")

local M = {}

local function median(xs)
  table.sort(xs)
  return xs[math.ceil(#xs / 2)]
end

local function wall() return B.now_ms() end

-- A worker module given as source, as a game in LÖVE would.
local SOURCE = [[
local M = {}
function M.noop(x) return x end
function M.hash(n)
  local h = 0
  for i = 1, n do h = (h * 31 + i) % 4294967296 end
  return h
end
-- (meets the game's job in rounds 1..n, a share of one number each)
function M.meet(t)
  local b, out, share = t.b, {}, { 0 }
  for r = 1, t.n do
    share[1] = r
    if not b:sum(r, 2, 2, share, out) then return false end
  end
  return out[1]
end
-- (sends back each of n values)
function M.relay(t)
  for _ = 1, t.n do t.outbox:post(t.inbox:receive()) end
end
return M
]]

local function new_orch() return stagehand.new { driver = "manual", stall_ms = 1e9, log = function() end } end

function M.run(report, results)
  local ROUNDS = 5
  if not has_luv then
    print("(luv is not installed: the worker pool has nothing to be measured against)")
    return
  end

  -- 1. 100,000 trivial requests through a pool of 2: queued at once, then
  -- all their replies collected; µs per request from the first run to the
  -- last reply.
  local N = 100000
  -- (opts_of(i): request i's options)
  local function ranked(n, opts_of)
    local orch = new_orch()
    local pool = stagehand.pool(orch, { module = "bench", source = SOURCE, size = 2 })
    orch:wait(pool:run("noop", 0), 10000) -- (the workers are up before the clock starts)
    local t0 = wall()
    for i = 1, n do pool:run("noop", i, opts_of(i)) end
    orch:loop()
    local ms = wall() - t0
    orch:wait(pool:destroy(), 10000)
    return ms * 1e6 / n
  end
  local function no_opts() return nil end
  local function ours(n) return ranked(n, no_opts) end
  local function luvs(n)
    local done = 0
    local work = uv.new_work(function(x) return x end, function() done = done + 1 end)
    work:queue(0)
    uv.run()
    done = 0
    local t0 = wall()
    for i = 1, n do work:queue(i) end
    uv.run()
    local ms = wall() - t0
    assert(done == n, "luv's work did not all come back")
    return ms * 1e6 / n
  end
  -- (libuv's pool has 4 threads unless UV_THREADPOOL_SIZE says otherwise:
  -- it is measured as a game would meet it)
  local xs, ys = {}, {}
  for r = 1, ROUNDS do
    collectgarbage()
    ys[r] = luvs(N)
    collectgarbage()
    xs[r] = ours(N)
  end
  report("100,000 trivial requests, a pool of 2", median(xs), "luv's uv.new_work, each", median(ys), 1)
  -- The same requests ranked by three priority sources (a rank name, a
  -- number and a function, in turn), against a fixed number: requests are
  -- ranked like jobs, and dispatched by the step's grant rounds.
  local function near() return 70 end
  local three = { { priority = "visible" }, { priority = 30 }, { priority = near } }
  local fixed = { priority = 30 }
  local function by_three(i) return three[i % 3 + 1] end
  local function by_fixed() return fixed end
  local ts, fs = {}, {}
  for r = 1, ROUNDS do
    collectgarbage()
    fs[r] = ranked(N, by_fixed)
    collectgarbage()
    ts[r] = ranked(N, by_three)
  end
  report("  ... three priority sources", median(ts), "a fixed number", median(fs), 1.25)
  report("  ... three priority sources", median(ts), "luv's uv.new_work, each", median(ys), 1)
  -- 4,000 requests, each with a priority closure of its own (a distance
  -- read live), against the same with one shared function.
  local M4 = 4000
  local function shared_fn() return 10 end
  local function with_closures(n)
    return ranked(n, function(i)
      local d = i % 97
      return { priority = function() return 100 - d end }
    end)
  end
  local shared_opts = { priority = shared_fn }
  local function with_shared(n) return ranked(n, function() return shared_opts end) end
  local cs, ss = {}, {}
  for r = 1, ROUNDS do
    collectgarbage()
    ss[r] = with_shared(M4)
    collectgarbage()
    cs[r] = with_closures(M4)
  end
  report("4,000 requests, a priority closure each", median(cs), "one shared function", median(ss), 2)
  -- What a game gets from luv alone keeps none of stagehand's promises (a
  -- request that never comes back hangs its caller). The same requests
  -- through luv, each awaited by a job of its own (a future its callback
  -- resolves), as a game would build them to keep them (information).
  local function luv_jobs(n)
    local orch = new_orch()
    local futures = {}
    local work = uv.new_work(function(x) return x end, function(i) futures[i]:resolve(i) end)
    local pending -- (the future the job started now awaits)
    local function await_it(job) return job:await(pending) end
    local t0 = wall()
    for i = 1, n do
      pending = stagehand.future()
      futures[i] = pending
      orch:run("request", await_it)
      work:queue(i)
    end
    uv.run()
    orch:step()
    local ms = wall() - t0
    assert(orch.nrunning == 0, "luv's requests left jobs running")
    orch:close()
    return ms * 1e6 / n
  end
  local zs = {}
  for r = 1, ROUNDS do
    collectgarbage()
    zs[r] = luv_jobs(N)
  end
  report("  ... the same requests (information)", median(xs), "uv.new_work, each awaited by a job", median(zs))

  -- 2. The round trip of one request on an idle pool: the main thread
  -- waits for the reply (orch:wait; luv: uv.run). Each trip comes 2 ms
  -- after the last, so the workers are asleep (a worker that finds no
  -- work looks again for 50 us before it sleeps); back to back, the same
  -- trips find a worker still looking (information).
  local orch = new_orch()
  local pool = stagehand.pool(orch, { module = "bench", source = SOURCE, size = 2 })
  orch:wait(pool:run("noop", 0), 10000)
  local function trips_of(queue_one, gap_ms)
    local trips = {}
    collectgarbage() -- (the sections before leave garbage that either side's trips would pay for)
    for i = 1, 201 do
      if gap_ms > 0 then B.sleep_ms(gap_ms) end
      local t0 = wall()
      queue_one(i)
      trips[i] = (wall() - t0) * 1e6
    end
    return median(trips)
  end
  local function ours_one(i) orch:wait(pool:run("noop", i), 10000) end
  local work = uv.new_work(function(x) return x end, function() end)
  local function luv_one(i)
    work:queue(i)
    uv.run()
  end
  report("round trip of one request, idle pool (median)", trips_of(ours_one, 2), "luv's uv.new_work",
    trips_of(luv_one, 2), 1.5)
  local back_to_back = trips_of(ours_one, 0)
  report("  ... back to back (information)", back_to_back, "luv's uv.new_work", trips_of(luv_one, 0))

  -- 2b. A job and a worker talking while both run (information): 2,000
  -- rounds of a round barrier, and 2,000 values sent through a port and
  -- back, per exchange, beside a request's round trip back to back.
  -- (Each exchange wakes the job's orchestrator: a wake it missed showed
  -- here as whole milliseconds.)
  local EX = 2000
  local function exchanges(kind)
    local t0 = wall()
    local h, w
    if kind == "rounds" then
      local b = stagehand.rounds(2, 1)
      w = pool:run("meet", { b = b, n = EX })
      h = orch:run("meet", function()
        local out = {}
        for r = 1, EX do
          if not b:sum(r, 2, 1, { r }, out) then return false end
        end
        return out[1]
      end)
    else
      local inbox, outbox = stagehand.port(), stagehand.port()
      w = pool:run("relay", { inbox = inbox, outbox = outbox, n = EX })
      h = orch:run("relay", function()
        for i = 1, EX do
          inbox:post(i)
          assert(outbox:receive() == i)
        end
        return true
      end)
    end
    assert(orch:wait(h, 60000) == "done" and orch:wait(w, 60000) == "done", kind .. ": an exchange did not end")
    return (wall() - t0) * 1e6 / EX
  end
  for _, kind in ipairs { "rounds", "port" } do
    local xs2 = {}
    for r = 1, 3 do xs2[r] = exchanges(kind) end
    report(kind == "rounds" and "a job and a worker meet in a round (median)"
      or "a job and a worker, a value to and fro (median)", median(xs2), "a request, back to back", back_to_back)
  end

  -- 3. A CPU-bound batch: 8 hashes of 3,000,000 steps, on 2 workers and
  -- on 1. The ratio is how much faster two are (target >= 1.7x).
  local STEPS = 3000000
  local function batch(size)
    local p = stagehand.pool(orch, { module = "bench", source = SOURCE, size = size })
    orch:wait(p:run("noop", 0), 10000)
    local t0 = wall()
    local hs = {}
    for i = 1, 8 do hs[i] = p:run("hash", STEPS) end
    orch:wait(stagehand.all(hs), 60000)
    local ms = wall() - t0
    orch:wait(p:destroy(), 10000)
    return ms
  end
  local one, two = {}, {}
  for r = 1, 3 do
    one[r] = batch(1)
    two[r] = batch(2)
  end
  local speedup = median(one) / median(two)
  local ok = speedup >= 1.7
  results[#results + 1] = { name = "two workers", ok = ok }
  print(string.format("%-46s %9.1f ms      %-28s %9.1f ms      %.2fx faster (target >= 1.7x: %s)",
    "8 hashes of 3,000,000 steps on 2 workers", median(two), "on 1 worker", median(one), speedup,
    ok and "met" or "MISSED"))
  orch:wait(pool:destroy(), 10000)
end

return M
