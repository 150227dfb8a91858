local stagehand = require "stagehand"
local T = require "stagehand.testing"

describe("job:await", function()
  local orch, clock
  before_each(function() orch, clock = T.new { log = function() end } end)

  it("returns a future's values once it resolves", function()
    local f = stagehand.future("texture upload")
    local h = orch:run("upload", function(job) return job:await(f) end)
    f:resolve("tex", 256)
    orch:step()
    assert.same({ "done", "tex", 256 }, { h:result() })
  end)

  it("returns at once when the future has already settled", function()
    local f = stagehand.future()
    f:resolve(5)
    local h = orch:run("fast", function(job) return job:await(f) + 1 end)
    assert.same({ "done", 6 }, { h:result() })
  end)

  it("raises a rejected future's error as given", function()
    local f = stagehand.future()
    local caught
    orch:run("catcher", function(job)
      local ok, err = job:pcall(job.await, job, f)
      caught = { ok, err }
    end)
    f:reject("decode failed")
    orch:step()
    assert.same({ false, "decode failed" }, caught)
  end)

  it("fails the job when an awaited future rejects and nothing catches it", function()
    local f = stagehand.future()
    local h = orch:run("loader", function(job) job:await(f) end)
    f:reject({ code = 7 })
    orch:step()
    local st, err = h:result()
    assert.equal("failed", st)
    assert.same({ code = 7 }, err.cause)
  end)

  it("returns another job's values through its Handle", function()
    local inner = orch:run("inner", function(job)
      job:sleep(50)
      return "armor"
    end)
    local outer = orch:run("outer", function(job) return "dressed in " .. job:await(inner) end)
    assert.equal(0, T.settle(orch, 100, 10))
    assert.same({ "done", "dressed in armor" }, { outer:result() })
  end)

  it("raises another job's Error through its Handle", function()
    local inner = orch:run("inner", function(job)
      job:sleep(10)
      error("cloth tore")
    end)
    local got
    orch:run("outer", function(job)
      local _, err = job:pcall(inner.await, inner)
      got = err
    end)
    T.settle(orch, 100, 10)
    assert.is_true(stagehand.is_error(got, "failed"))
    assert.matches("cloth tore", tostring(got.cause))
  end)

  it("waits on any table with on_end", function()
    local listeners = {}
    local custom = {
      on_end = function(_, fn) listeners[#listeners + 1] = fn end,
    }
    local h = orch:run("custom", function(job) return job:await(custom) end)
    assert.equal("running", h:state())
    listeners[1]("done", "uploaded")
    orch:step()
    assert.same({ "done", "uploaded" }, { h:result() })
  end)

  it("raises the error of a custom awaitable that fails", function()
    local custom = { on_end = function(_, fn) fn("failed", "gpu lost") end }
    local h = orch:run("custom", function(job) return job:await(custom) end)
    local _, err = h:result()
    assert.equal("gpu lost", err.cause)
  end)

  it("rejects what cannot be awaited, naming the argument", function()
    local h = orch:run("bad", function(job) job:await(42) end)
    local _, err = h:result()
    assert.matches("bad argument 'x' to await", tostring(err.cause), 1, true)
  end)

  it("raises the abort reason at once when the job is cancelled while waiting, so cleanup runs", function()
    local f = stagehand.future()
    local cleaned, reason
    local h = orch:run("loader", function(job)
      local _, err = job:pcall(job.await, job, f)
      cleaned = true
      reason = err
    end)
    h:cancel("left the page")
    assert.equal("cancelled", h:state())
    orch:step()
    assert.is_true(cleaned)
    assert.is_true(stagehand.is_error(reason, "cancelled"))
    assert.equal("left the page", reason.reason)
    assert.no_leaks(orch)
  end)

  it("makes every further wait of an ended job raise at once", function()
    local f = stagehand.future()
    local raised = 0
    local h = orch:run("stubborn", function(job)
      for _ = 1, 5 do
        local ok = job:pcall(job.await, job, f)
        if not ok then raised = raised + 1 end
      end
      return "still here"
    end)
    h:cancel()
    orch:step()
    assert.equal(5, raised)
    assert.equal("cancelled", h:state())
    assert.no_leaks(orch)
  end)

  it("drops a job that keeps waiting in a loop after it ended", function()
    local f = stagehand.future()
    local tries = 0
    local h = orch:run("spinner", function(job)
      while true do
        tries = tries + 1
        job:pcall(job.await, job, f)
      end
    end)
    h:cancel()
    orch:step()
    assert.is_true(tries > 1 and tries < 1000)
    assert.equal(0, orch:step())
    assert.no_leaks(orch)
  end)

  it("raises a clear error when called from a coroutine that is not the job's", function()
    local f = stagehand.future()
    local seen
    local h = orch:run("nested", function(job)
      local co = coroutine.create(function() return job:await(f) end)
      local _, yielded = coroutine.resume(co)
      local ok, err = coroutine.resume(co, "not stagehand")
      seen = { tostring(yielded), ok, err }
      job:sleep(1) -- the job's next wait finds the misplaced one: it fails
      return "unreached"
    end)
    f:resolve() -- must not wake the job through the misplaced wait
    T.settle(orch, 10, 1)
    local st, e = h:result()
    assert.equal("failed", st)
    assert.matches("job:await in nested could not suspend the job", e.cause, 1, true)
    assert.matches("wait only in the job's coroutine", seen[1], 1, true)
    assert.is_false(seen[2])
    assert.matches("inside the job's own work", seen[3], 1, true)
    assert.no_leaks(orch)
  end)

  it("raises a clear error when called from another job", function()
    local other_job
    local a = orch:run("a", function(job)
      other_job = job
      job:sleep(100)
    end)
    local b = orch:run("b", function() return other_job:sleep(1) end)
    local _, err = b:result()
    assert.matches("job:sleep must be called from inside the job's own work %(a%)", tostring(err.cause))
    a:cancel()
  end)

  it("counts an ended wait as progress", function()
    local f = stagehand.future()
    local h = orch:run("waits", function(job)
      job:await(f)
      job:await(stagehand.future())
    end, { stall_ms = 1000 })
    clock:advance(900)
    f:resolve()
    orch:step()
    clock:advance(900)
    orch:step()
    assert.equal("running", h:state())
    T.settle(orch, 2000)
    assert.equal("stalled", h:state())
  end)
end)

describe("Handle:await", function()
  it("points to orch:wait when called outside a job", function()
    local orch = T.new()
    local h = orch:run("x", function(job) job:sleep(1) end)
    local ok, err = pcall(h.await, h)
    assert.is_false(ok)
    assert.matches("orch:wait", err, 1, true)
  end)

  it("works as h:await() inside a job", function()
    local orch = T.new()
    local a = orch:run("a", function(job)
      job:sleep(5)
      return 1
    end)
    local b = orch:run("b", function() return a:await() + 1 end)
    T.settle(orch, 50, 5)
    assert.same({ "done", 2 }, { b:result() })
  end)
end)

describe("cycles", function()
  it("raise a cycle Error at once in the job whose await would close it", function()
    local orch = T.new { log = function() end }
    local f = stagehand.future()
    local a, b
    local err_b
    a = orch:run("A", function(job)
      job:await(f)
      return job:await(b)
    end)
    b = orch:run("B", function(job)
      local _, e = job:pcall(job.await, job, a)
      err_b = e
      return "B gave up"
    end)
    f:resolve()
    orch:step()
    -- B already waits on A; A now awaits B: A's await closes the cycle.
    local st, err = a:result()
    assert.equal("failed", st)
    assert.is_true(stagehand.is_error(err.cause, "cycle"))
    assert.matches("A %-> B %-> A", err.cause.message)
    assert.same({ "A", "B" }, err.cause.jobs)
    orch:step()
    assert.is_true(stagehand.is_error(err_b, "failed"))
    assert.same({ "done", "B gave up" }, { b:result() })
    assert.no_leaks(orch)
  end)

  it("are found through stagehand.all", function()
    local orch = T.new { log = function() end }
    local f = stagehand.future()
    local a, b, c
    a = orch:run("A", function(job)
      job:await(f)
      return job:await(stagehand.all { c })
    end)
    b = orch:run("B", function(job) return job:await(a) end)
    c = orch:run("C", function(job) return job:await(b) end)
    f:resolve()
    orch:step()
    local _, err = a:result()
    assert.is_true(stagehand.is_error(err.cause, "cycle"))
    orch:step()
    assert.equal("failed", b:state())
    assert.equal("failed", c:state())
  end)

  it("are found through a stagehand.all that also holds a future", function()
    local orch = T.new { log = function() end }
    local f, download = stagehand.future(), stagehand.future()
    local a, b
    a = orch:run("A", function(job)
      job:await(f)
      return job:await(stagehand.all { download, b })
    end)
    b = orch:run("B", function(job) return job:await(a) end)
    f:resolve()
    orch:step()
    -- (before, the open download hid B from the search: A and B waited on
    -- each other until A's own clock stalled it)
    local _, err = a:result()
    assert.is_true(stagehand.is_error(err.cause, "cycle"))
    assert.matches("A %-> B %-> A", err.cause.message)
    orch:step()
    assert.equal("failed", b:state())
    assert.no_leaks(orch)
  end)

  it("are raised when a job awaits its own Handle", function()
    local orch = T.new { log = function() end }
    local self_h
    self_h = orch:run("narcissus", function(job)
      job:sleep(1)
      return job:await(self_h)
    end)
    T.settle(orch, 10, 1)
    local _, err = self_h:result()
    assert.is_true(stagehand.is_error(err.cause, "cycle"))
  end)

  -- The search runs on a stack of its own: a recursive one overflowed
  -- LuaJIT's Lua stack at about 8,000 links and failed the awaiting job
  -- with "stack overflow". (The chain is built through pending `when`s,
  -- which a search does not follow, so building it costs O(n).) Each
  -- failure above quotes the one below it; unbounded, those messages made
  -- the chain's end O(n^2), 19 s here.
  it("are found down a chain of 10,000 awaits", function()
    local orch = T.new { log = function() end, stall_ms = 1e9 }
    local n = 10000
    local first
    for i = 1, n do
      local h = orch:run("link " .. i, function(job)
        if i < n then return job:await(orch:when("link" .. (i + 1))) end
        return job:await(first) -- closes the cycle, n links long
      end, { key = "link" .. i })
      if i == 1 then first = h end
    end
    local st, e = orch:wait(first, 1000)
    assert.equal("failed", st)
    -- The last link raised the cycle; each link above it failed with it,
    -- quoting the one below, within a bounded length.
    local root = e
    while stagehand.is_error(root.cause) do
      assert.is_true(#root.message < 1000)
      root = root.cause
    end
    assert.is_true(stagehand.is_error(root, "cycle"))
    assert.equal(n, #root.jobs) -- every link, the awaiting one first
    assert.equal("link " .. n, root.jobs[1])
    assert.matches("(9989 more)", root.message, 1, true) -- (6 named first, 5 last)
    assert.matches("cycle of waits", e.message, 1, true) -- (the end of the chain: its first cause)
    assert.equal(0, T.settle(orch, 1000))
    assert.no_leaks(orch)
  end)
end)

describe("a chain of awaits built one link at a time", function()
  -- Each link awaits the one made before it, as an ordered pipeline of
  -- loaders does. Nothing waits on a link as it awaits, so no search runs:
  -- building 10,000 links took 12 s on LuaJIT (78 s for 8,000 on Lua 5.4)
  -- while every await searched the whole chain below it for a cycle.
  -- (bench.lua times the chain against short ones: it must stay O(n).)
  it("ends, and a cycle closed at its far end is still found", function()
    local orch = T.new { log = function() end, stall_ms = 1e9 }
    local n = 2000 -- (each link fails with a traceback: the costly part)
    local top_f = stagehand.future("the top link's Handle")
    local bottom = orch:run("link 1", function(job)
      local top = job:await(top_f)
      return job:await(top) -- closes the cycle, n links long
    end)
    local prev = bottom
    for i = 2, n do
      local below = prev
      prev = orch:run("link " .. i, function(job) return job:await(below) end)
    end
    assert.equal(n, #orch:report())
    top_f:resolve(prev)
    assert.equal(0, T.settle(orch, 1000))
    local _, e = bottom:result()
    assert.is_true(stagehand.is_error(e.cause, "cycle"))
    assert.equal(n, #e.cause.jobs)
    assert.equal("link 1", e.cause.jobs[1])
    assert.equal("link " .. n, e.cause.jobs[2])
    local st, top_err = prev:result()
    assert.equal("failed", st) -- every link above heard the bottom fail
    assert.is_true(stagehand.is_error(top_err, "failed"))
    assert.no_leaks(orch)
  end)

  it("ends in order when its bottom link is done", function()
    local orch = T.new { stall_ms = 1e9 }
    local f = stagehand.future()
    local prev = orch:run("link 1", function(job) return job:await(f) end)
    for i = 2, 10000 do
      local below = prev
      prev = orch:run("link " .. i, function(job) return job:await(below) + 1 end)
    end
    f:resolve(1)
    assert.equal(0, T.settle(orch, 1000))
    assert.same({ "done", 10000 }, { prev:result() })
    assert.no_leaks(orch)
  end)

  it("still raises when a link awaits a group holding its own Handle", function()
    local orch = T.new { log = function() end }
    local f = stagehand.future()
    local other = orch:run("other", function(job) return job:await(f) end)
    local me
    me = orch:run("me", function(job)
      job:sleep(1)
      return job:await(stagehand.all { other, me })
    end)
    T.settle(orch, 10, 1)
    local _, err = me:result()
    assert.is_true(stagehand.is_error(err.cause, "cycle"))
    assert.matches("awaits its own Handle", err.cause.message, 1, true)
    f:resolve()
    assert.equal(0, T.settle(orch, 10, 1))
    assert.no_leaks(orch)
  end)
end)

describe("regressions", function()
  -- A job woken by its future and cancelled before its resume lost that
  -- resume: its cleanup never ran and its follow registration leaked.
  it("runs the cleanup of a job cancelled between its wake and its resume", function()
    local orch = T.new { log = function() end }
    local other = orch:run("other", function(job) job:sleep(100) end)
    local cleaned = false
    local h = orch:run("woken then cancelled", function(job)
      local ok = job:pcall(job.await, job, other)
      cleaned = not ok
    end)
    other:cancel() -- wakes h (its await raises cancelled)
    h:cancel() -- before h's resume
    orch:step()
    assert.is_true(cleaned)
    assert.no_leaks(orch)
  end)
end)
