local stagehand = require "stagehand"
local T = require "stagehand.testing"

describe("the job object", function()
  local orch, clock
  before_each(function() orch, clock = T.new { log = function() end } end)

  describe(":call", function()
    it("turns an err-first callback into values", function()
      local deliver
      local function read(path, size, cb) deliver = function() cb(nil, path .. ":" .. size, "extra") end end
      local h = orch:run("read", function(job) return job:call(read, "hero.png", 64) end)
      deliver()
      orch:step()
      assert.same({ "done", "hero.png:64", "extra" }, { h:result() })
    end)

    it("raises the callback's err", function()
      local function open(path, cb) cb("ENOENT: no such file or directory: " .. path) end
      local h = orch:run("open", function(job) return job:call(open, "missing.png") end)
      local _, err = h:result()
      assert.equal("ENOENT: no such file or directory: missing.png", err.cause)
    end)

    -- (Lua code tests an error with `if err then`: a callback passing false
    -- in err's place succeeded.)
    it("takes a false err as no error, as `if err then` does", function()
      local function stat(path, cb) cb(false, { size = 64, path = path }) end
      local h = orch:run("stat", function(job) return job:call(stat, "hero.png").size end)
      assert.same({ "done", 64 }, { h:result() })
    end)

    it("takes the first call of a callback called twice", function()
      local cb
      local h = orch:run("twice", function(job) return job:call(function(c) cb = c end) end)
      cb(nil, "first")
      cb("a second call, an error")
      orch:step()
      assert.same({ "done", "first" }, { h:result() })
    end)

    it("passes nil arguments through", function()
      local got
      local function f(a, b, c, cb)
        got = { a, b, c }
        cb(nil, "ok")
      end
      local h = orch:run("nils", function(job) return job:call(f, nil, 2, nil) end)
      assert.same({ nil, 2, nil }, got)
      assert.same({ "done", "ok" }, { h:result() })
    end)

    it("ignores a callback that comes after the job ended", function()
      local late
      local h = orch:run("x", function(job) return job:call(function(cb) late = cb end) end)
      h:cancel()
      orch:step()
      late(nil, "too late")
      orch:step()
      assert.equal("cancelled", h:state())
      assert.no_leaks(orch)
    end)

    it("calls a callable table as it calls a function", function()
      local deliver
      local reader = setmetatable({ root = "assets/" }, { __call = function(self, path, cb)
        deliver = function() cb(nil, self.root .. path) end
      end })
      local h = orch:run("read", function(job) return job:call(reader, "hero.png") end)
      deliver()
      orch:step()
      assert.same({ "done", "assets/hero.png" }, { h:result() })
    end)

    it("names a bad fn", function()
      local h = orch:run("x", function(job) return job:call(5) end)
      local _, err = h:result()
      assert.matches("bad argument 'fn' to call", tostring(err.cause), 1, true)
      local t = orch:run("x", function(job) return job:call({}) end) -- (a table with no __call)
      _, err = t:result()
      assert.matches("bad argument 'fn' to call: expected a function, got table", tostring(err.cause), 1, true)
    end)
  end)

  describe(":pcall", function()
    it("catches an error after a wait, on every runtime", function()
      local h = orch:run("x", function(job)
        return job:pcall(function()
          job:sleep(10)
          error("late failure", 0)
        end)
      end)
      T.settle(orch, 50, 10)
      assert.same({ "done", false, "late failure" }, { h:result() })
    end)

    it("returns the values of fn after waits", function()
      local h = orch:run("x", function(job)
        return job:pcall(function(a)
          job:sleep(10)
          local f = stagehand.future()
          f:resolve(a * 2)
          return job:await(f), "more"
        end, 21)
      end)
      T.settle(orch, 50, 10)
      assert.same({ "done", true, 42, "more" }, { h:result() })
    end)

    it("nests", function()
      local h = orch:run("x", function(job)
        local ok, inner_ok, inner_err = job:pcall(function()
          local a, b = job:pcall(function()
            job:sleep(1)
            error("deep", 0)
          end)
          job:sleep(1)
          return a, b
        end)
        return ok, inner_ok, inner_err
      end)
      T.settle(orch, 50, 1)
      assert.same({ "done", true, false, "deep" }, { h:result() })
    end)

    it("calls what pcall calls: C functions, callable tables, non-callables", function()
      local callable = setmetatable({}, { __call = function(_, a)
        return a + 1
      end })
      local h = orch:run("x", function(job)
        job:sleep(1) -- a wait first: on Lua 5.1 fn then runs in a coroutine of its own
        local a = { job:pcall(string.rep, "ab", 2) }
        local b = { job:pcall(callable, 41) }
        local c = { job:pcall(42) }
        local d = { job:pcall(error, "raised", 0) }
        return a, b, c, d
      end)
      T.settle(orch, 10, 1)
      local st, a, b, c, d = h:result()
      assert.equal("done", st)
      assert.same({ true, "abab" }, a)
      assert.same({ true, 42 }, b)
      assert.equal(false, c[1])
      assert.matches("call", c[2])
      assert.same({ false, "raised" }, d)
    end)

    it("lets cleanup catch an aborted wait", function()
      local cleaned
      local h = orch:run("x", function(job)
        local ok, err = job:pcall(job.sleep, job, 100000)
        cleaned = { ok, err.kind }
      end)
      T.settle(orch, 10)
      h:cancel()
      orch:step()
      assert.same({ false, "cancelled" }, cleaned)
    end)
  end)

  describe(":sleep", function()
    it("resumes after ms of clock time", function()
      local times = {}
      orch:run("x", function(job)
        times[#times + 1] = clock.now
        job:sleep(250)
        times[#times + 1] = clock.now
      end)
      T.settle(orch, 1000, 50)
      assert.same({ 0, 250 }, times)
    end)

    it("wakes sleepers in the order of their ends", function()
      local order = {}
      for _, ms in ipairs { 30, 10, 20, 10 } do
        orch:run("s" .. ms, function(job)
          job:sleep(ms)
          order[#order + 1] = ms
        end)
      end
      clock:advance(30)
      orch:step()
      assert.same({ 10, 10, 20, 30 }, order)
    end)

    it("names a bad ms", function()
      local h = orch:run("x", function(job) job:sleep(-1) end)
      local _, err = h:result()
      assert.matches("bad argument 'ms' to sleep", tostring(err.cause), 1, true)
    end)

    it("does not spin a sleep(0) loop inside one step", function()
      local n = 0
      local h = orch:run("x", function(job)
        while true do
          n = n + 1
          job:sleep(0)
        end
      end)
      orch:step()
      orch:step()
      assert.equal(3, n)
      h:cancel()
      orch:step()
    end)
  end)

  describe(":slice", function()
    it("returns at once before slice_ms have passed", function()
      local h = orch:run("x", function(job)
        job:slice()
        return "no yield"
      end)
      assert.same({ "done", "no yield" }, { h:result() })
    end)

    it("yields to the driver after slice_ms, letting others run", function()
      local order = {}
      orch:run("long", function(job)
        for i = 1, 3 do
          clock:advance(10)
          order[#order + 1] = "long" .. i
          job:slice()
        end
      end)
      orch:run("short", function() order[#order + 1] = "short" end)
      orch:step()
      assert.same({ "long1", "short", "long2", "long3" }, order)
    end)

    it("lets step's budget hand the frame back", function()
      local chunks = 0
      orch:run("bake", function(job)
        for _ = 1, 10 do
          clock:advance(5)
          chunks = chunks + 1
          job:slice()
        end
      end, { stall_ms = 1e9 })
      orch:step(12)
      assert.is_true(chunks < 10)
      T.settle(orch, 1000)
      assert.equal(10, chunks)
    end)
  end)

  describe(":priority", function()
    it("is the default rank for a job that names none", function()
      local h = orch:run("x", function(job) return job:priority() end)
      assert.same({ "done", "scene" }, { h:result() })
    end)

    it("reads a priority function live", function()
      local on_screen = true
      local seen = {}
      orch:run("battle", function(job)
        seen[1] = job:priority()
        job:sleep(10)
        seen[2] = job:priority()
      end, { priority = function() return on_screen and "scene" or "background" end })
      on_screen = false
      T.settle(orch, 20, 10)
      assert.same({ "scene", "background" }, seen)
    end)

    it("counts a priority function that raises as the default, logging once", function()
      local lines = {}
      local o = T.new { log = function(m) lines[#lines + 1] = m end }
      local bad = function() error("no camera") end
      local h = o:run("x", function(job) return job:priority(), job:priority() end, { priority = bad })
      assert.same({ "done", "scene", "scene" }, { h:result() })
      assert.equal(1, #lines)
      assert.matches("no camera", lines[1], 1, true)
    end)

    it("counts an unknown rank from a function as the default", function()
      local h = orch:run("x", function(job) return job:priority() end, { priority = function() return "urgent" end })
      assert.same({ "done", "scene" }, { h:result() })
    end)
  end)

  describe(".signal", function()
    it("is not aborted while the job runs", function()
      local h = orch:run("x", function(job) return job.signal.aborted end)
      assert.same({ "done", false }, { h:result() })
    end)

    it("aborts with the failure when the job fails", function()
      local sig
      orch:run("x", function(job)
        sig = job.signal
        error("broken")
      end)
      assert.is_true(sig.aborted)
      assert.is_true(stagehand.is_error(sig.reason, "failed"))
    end)

    it("is aborted when first read after the job was cancelled", function()
      local job_ref
      local h = orch:run("x", function(job)
        job_ref = job
        job:sleep(100)
      end)
      h:cancel("bye")
      assert.is_true(job_ref.signal.aborted)
      assert.equal("bye", job_ref.signal.reason.reason)
    end)
  end)
end)

if _VERSION == "Lua 5.1" and not rawget(_G, "jit") then
  describe("a wait inside a plain pcall on Lua 5.1", function()
    -- It used to leave the job running with its wait still registered: the
    -- future's resolve then woke a job parked nowhere.
    it("fails the job with a message that says where waits may be made", function()
      local orch = T.new { log = function() end }
      local f = stagehand.future()
      local caught
      local h = orch:run("x", function(job)
        local ok, err = pcall(job.await, job, f)
        caught = { ok, err }
        f:resolve("resolved while not parked")
        job:sleep(10)
        return "unreached"
      end)
      T.settle(orch, 100, 10)
      local st, err = h:result()
      assert.equal("failed", st)
      assert.is_false(caught[1])
      assert.matches("in x could not suspend the job", err.cause, 1, true)
      assert.matches("use job:pcall", err.cause, 1, true)
      assert.no_leaks(orch)
    end)

    it("fails a job whose pcall'd wait was its last act", function()
      local orch = T.new { log = function() end, pools = { p = 1 } }
      local hold = stagehand.future()
      orch:run("holder", function(job)
        local release = job:slot("p")
        job:await(hold)
        release()
      end)
      local h = orch:run("x", function(job)
        pcall(job.slot, job, "p")
        return "done?"
      end)
      orch:step()
      assert.equal("failed", h:state())
      assert.same({ capacity = 1, in_use = 1, waiting = 0 }, orch:pools().p)
      hold:resolve()
      T.settle(orch, 10, 1)
      assert.no_leaks(orch)
    end)
  end)
end
