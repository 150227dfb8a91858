local stagehand = require "stagehand"
local T = require "stagehand.testing"

local function logger()
  local lines = {}
  return lines, function(m) lines[#lines + 1] = m end
end

describe(":run", function()
  it("runs work at once, up to its first wait", function()
    local orch = T.new()
    local f = stagehand.future()
    local seen = {}
    local h = orch:run("loader", function(job)
      seen[#seen + 1] = "before"
      job:await(f)
      seen[#seen + 1] = "after"
    end)
    assert.same({ "before" }, seen)
    assert.equal("running", h:state())
    f:resolve()
    assert.same({ "before" }, seen) -- continuations wait for the driver
    orch:step()
    assert.same({ "before", "after" }, seen)
    assert.equal("done", h:state())
  end)

  it("ends done with every value work returned", function()
    local orch = T.new()
    local h = orch:run("values", function() return 1, nil, "three" end)
    local r = { h:result() }
    assert.equal("done", r[1])
    assert.equal(1, r[2])
    assert.is_nil(r[3])
    assert.equal("three", r[4])
  end)

  it("passes the job its identity", function()
    local orch = T.new()
    local got
    local h = orch:run("identity", function(job) got = { job.id, job.label, job.key } end)
    assert.same({ h.id, "identity" }, got)
    assert.equal("identity", h.label)
    assert.is_nil(h.key)
  end)

  it("shows a keyed job its key, and keeps its identity read-only", function()
    local orch = T.new()
    local got, err
    local h = orch:run("keyed", function(job)
      got = { job.id, job.label, job.key }
      err = select(2, pcall(function() job.label = "renamed" end))
      for _, name in ipairs { "id", "key", "orch", "cid", "co", "w", "state", "out" } do
        local ok, e = pcall(function() job[name] = "overwritten" end)
        assert(not ok and tostring(e):find("job." .. name .. " is not writable", 1, true), name)
      end
      got[4] = { job.id, job.label, job.key }
      job.notes = "a field of the game's own" -- other names are the game's to use
      return job.notes
    end, { key = "armor:7" })
    assert.same({ h.id, "keyed", "armor:7", { h.id, "keyed", "armor:7" } }, got)
    assert.equal("armor:7", h.key)
    assert.truthy(tostring(err):find("job.label is not writable", 1, true))
    assert.same({ "done", "a field of the game's own" }, { h:result() })
  end)

  it("reads opts and keeps nothing of it: one table may serve many runs", function()
    local lines, log = logger()
    local orch = T.new { check_ms = 10, log = log }
    local opts = { priority = "background", stall_ms = 500 }
    local f = stagehand.future()
    local function work(job)
      job:await(f)
      return job:priority()
    end
    local a = orch:run("a", work, opts)
    opts.priority, opts.stall_ms = "visible", 50
    local b = orch:run("b", work, opts)
    opts.priority, opts.stall_ms, opts.key = nil, nil, "changed"
    assert.equal(2, orch:step()) -- (both still wait: neither took a key)
    assert.is_falsy(orch:running("changed"))
    T.settle(orch, 100, 10) -- b stalls at 50; a's clock is 500
    assert.equal("stalled", b:state())
    assert.equal("running", a:state())
    assert.same({ "[stagehand] b made no progress for 0.05 s." }, lines)
    f:resolve()
    T.settle(orch, 10)
    assert.same({ "done", "background" }, { a:result() })
    assert.no_leaks(orch)
  end)

  it("says the label comes first when it is given the work there, and runs nothing", function()
    local orch = T.new()
    local ran = false
    local ok, err = pcall(orch.run, orch, function() ran = true end)
    assert.is_false(ok)
    assert.matches("^spec/run_spec%.lua:%d+: bad argument 'label' to run: expected a non%-empty string, got function", err)
    assert.matches("(the label comes first: orch:run(label, work, opts))", err, 1, true)
    assert.is_false(ran)
    assert.equal(0, orch.nrunning)
    ok, err = pcall(orch.run, orch, 7, function() end)
    assert.is_false(ok)
    assert.is_nil(err:find("comes first", 1, true))
  end)

  it("names the option an unknown one most likely meant, and only one it takes", function()
    local orch = T.new()
    local function said(fn, ...)
      local ok, err = pcall(fn, ...)
      assert.is_false(ok)
      return err
    end
    local err = said(orch.run, orch, "x", function() end, { stall = 100 })
    assert.matches("bad argument 'opts.stall' to run: expected a known option (unknown field), got \"stall\" "
      .. "(did you mean 'stall_ms'?)", err, 1, true)
    assert.matches("(did you mean 'priority'?)", said(orch.run, orch, "x", function() end, { priorty = 1 }), 1, true)
    assert.matches("(did you mean 'ranks'?)", said(stagehand.new, { rank = { "a" } }), 1, true)
    -- (when takes no key nor phase: it names neither)
    assert.is_nil(said(orch.when, orch, "k", "l", { key = "k" }):find("did you mean", 1, true))
    assert.is_nil(said(orch.when, orch, "k", "l", { phases = 1 }):find("did you mean", 1, true))
    assert.is_nil(said(orch.run, orch, "x", function() end, { colour = 1 }):find("did you mean", 1, true))
    assert.equal(0, orch.nrunning)
  end)

  it("gives each job a new id", function()
    local orch = T.new()
    local a = orch:run("a", function() end)
    local b = orch:run("b", function() end)
    assert.is_true(b.id > a.id)
  end)

  it("ends failed with the cause and a traceback", function()
    local orch, _ = T.new { log = function() end }
    local h = orch:run("Decoding hero.png", function() error("corrupt header") end)
    local st, err = h:result()
    assert.equal("failed", st)
    assert.is_true(stagehand.is_error(err, "failed"))
    assert.equal("Decoding hero.png", err.label)
    assert.matches("corrupt header", err.cause)
    assert.matches("stack traceback", err.traceback)
    assert.matches("Decoding hero.png failed: .*corrupt header", tostring(err))
  end)

  it("puts the list an error's first line announces on that line, cut after whole items", function()
    local orch = T.new { log = function() end }
    local h = orch:run("Loading the map", function() require "spec_nowhere_to_be_found" end)
    local _, err = h:result()
    local msg = tostring(err)
    assert.matches("Loading the map failed: .*module 'spec_nowhere_to_be_found' not found: "
      .. "no field package.preload%['spec_nowhere_to_be_found'%]; no file '", msg)
    assert.is_nil(msg:find("\n", 1, true))
    -- (a long list is cut after the last whole item that fits, and says so)
    local items = {}
    for i = 1, 40 do items[i] = "\tno file 'dir" .. i .. "/thing.lua'" end
    h = orch:run("long", function() error("not found:\n" .. table.concat(items, "\n"), 0) end)
    _, err = h:result()
    msg = tostring(err)
    assert.matches("^long failed: not found: no file 'dir1/thing.lua'; no file 'dir2/thing.lua'; .*'; %.%.%.$", msg)
    assert.is_true(#msg < 480)
    -- (a list of megabytes is read no further than it is shown)
    h = orch:run("huge", function() error("not found:\n\tno file 'a'\n" .. string.rep(" ", 2000000) .. "\tz", 0) end)
    assert.equal("huge failed: not found: no file 'a'; ...", tostring(select(2, h:result())))
    -- (a first line that announces nothing, or a list of blank lines, stays as it was)
    h = orch:run("plain", function() error("bad header\nmore detail", 0) end)
    assert.equal("plain failed: bad header", tostring(select(2, h:result())))
    h = orch:run("blank", function() error("bad header:\n  \n", 0) end)
    assert.equal("blank failed: bad header:", tostring(select(2, h:result())))
  end)

  it("keeps a table raised by work as the cause", function()
    local orch = T.new { log = function() end }
    local cause = { code = 404 }
    local h = orch:run("fetch", function() error(cause) end)
    local _, err = h:result()
    assert.equal(cause, err.cause)
  end)

  it("keeps nil raised by work as the cause", function()
    local orch = T.new { log = function() end }
    local h = orch:run("nil error", function() error(nil) end)
    local st, err = h:result()
    assert.equal("failed", st)
    assert.is_nil(err.cause)
  end)

  it("ends whatever the game's error values do when shown: a __tostring that raises", function()
    -- An error class with a broken __tostring, raised by work, given as a
    -- cancel reason and as a rejection. Before, showing it raised out of
    -- orch:run half way through failing the job, which then never ended.
    local broken = setmetatable({}, { __tostring = function() error("no name yet") end })
    local lines, log = logger()
    local orch = T.new { log = log }
    local failed = orch:run("fetch", function() error(broken) end)
    local st, err = failed:result()
    assert.equal("failed", st)
    assert.equal(broken, err.cause)
    assert.equal("fetch failed: (a table whose __tostring raised)", err.message)
    local f = stagehand.future("upload")
    local rejected = orch:run("upload", function(job) return job:await(f) end)
    local cancelled = orch:run("decode", function(job) job:await(stagehand.future()) end)
    cancelled:cancel(broken)
    f:reject(broken)
    orch:step()
    assert.equal("decode was cancelled: (a table whose __tostring raised)", tostring(select(2, cancelled:result())))
    assert.equal("failed", rejected:state())
    assert.equal(broken, select(2, rejected:result()).cause)
    -- a priority function answering it is logged, and counts as the default
    local asks = orch:run("asks", function(job) return job:priority() end, { priority = function() return broken end })
    assert.same({ "done", "scene" }, { asks:result() })
    assert.matches("a priority function returned (a table whose __tostring raised), not a rank", table.concat(lines, "\n"), 1, true)
    -- one whose __tostring answers a number (LuaJIT and 5.1 hand the
    -- number on as tostring's result; 5.4 turns it into a string)
    local odd = setmetatable({}, { __tostring = function() return 42 end })
    local _, oerr = orch:run("parse", function() error(odd) end):result()
    assert.equal(odd, oerr.cause)
    local said = oerr.message == "parse failed: 42" and "42" or oerr.message
    assert.is_true(said == "42" or said == "parse failed: (a table whose __tostring returned a number)", said)
    assert.all_ended(orch)
    assert.no_leaks(orch)
  end)

  it("never nests a continuation inside another job's resume", function()
    local orch = T.new()
    local f = stagehand.future()
    local depth, max_depth = 0, 0
    local function work(job)
      job:await(f)
      depth = depth + 1
      if depth > max_depth then max_depth = depth end
      depth = depth - 1
    end
    orch:run("settler", function(job)
      job:await(f)
    end)
    for i = 1, 5 do orch:run("w" .. i, work) end
    orch:run("resolver", function() f:resolve() end)
    orch:step()
    assert.equal(1, max_depth)
    assert.equal(0, orch.nrunning)
  end)

  it("lets a job start another job", function()
    local orch = T.new()
    local h = orch:run("parent", function()
      local child = orch:run("child", function(c)
        c:sleep(10)
        return "inner"
      end)
      return "outer+" .. child:await()
    end)
    assert.equal(0, T.settle(orch, 100, 10))
    assert.same({ "done", "outer+inner" }, { h:result() })
  end)

  it("fails a job whose work yields with coroutine.yield, with a clear message", function()
    local orch = T.new { log = function() end }
    local h = orch:run("yielder", function() coroutine.yield("oops") end)
    local st, err = h:result()
    assert.equal("failed", st)
    assert.matches("coroutine.yield", tostring(err.cause))
    assert.is_nil(orch:next_wake())
    assert.no_leaks(orch)
  end)

  describe("bad input", function()
    local orch
    before_each(function() orch = T.new() end)
    local cases = {
      { "label", function() local h = orch:run(nil, function() end) return h end },
      { "label", function() local h = orch:run("", function() end) return h end },
      { "label", function() local h = orch:run(12, function() end) return h end },
      { "work", function() local h = orch:run("x") return h end },
      { "work", function() local h = orch:run("x", "not a function") return h end },
      { "opts", function() local h = orch:run("x", function() end, 5) return h end },
      { "opts.key", function() local h = orch:run("x", function() end, { key = 5 }) return h end },
      { "opts.key", function() local h = orch:run("x", function() end, { key = "" }) return h end },
      { "opts.signal", function() local h = orch:run("x", function() end, { signal = {} }) return h end },
      { "opts.stall_ms", function() local h = orch:run("x", function() end, { stall_ms = 0 }) return h end },
      { "opts.stall_ms", function() local h = orch:run("x", function() end, { stall_ms = "1" }) return h end },
      { "opts.priority", function() local h = orch:run("x", function() end, { priority = "urgent" }) return h end },
      { "opts.priority", function() local h = orch:run("x", function() end, { priority = 0 / 0 }) return h end },
      { "opts.priority", function() local h = orch:run("x", function() end, { priority = true }) return h end },
      { "opts.colour", function() local h = orch:run("x", function() end, { colour = "red" }) return h end },
      -- (a Future where the options go: named as what it is, not by its fields)
      { "opts", function() local h = orch:run("x", function() end, stagehand.future("tex")) return h end },
    }
    for _, case in ipairs(cases) do
      it("names '" .. case[1] .. "' and leaves the orchestrator working", function()
        local ok, err = pcall(case[2])
        assert.is_false(ok)
        assert.matches("bad argument '" .. case[1] .. "' to run", err, 1, true)
        assert.matches("run_spec.lua:%d+:", err)
        local h = orch:run("still works", function() return 7 end)
        assert.same({ "done", 7 }, { h:result() })
        assert.no_leaks(orch)
      end)
    end

    -- Regression: a string given where something else belongs went into
    -- the message whole: a 10 MB one made a 10 MB message, and a newline
    -- split it over lines (Lua 5.1's %q keeps it, behind a backslash).
    it("shows a Handle, Future or group it was given where its options go as what it is", function()
      local h = orch:run("done already", function() end)
      local _, err = pcall(orch.run, orch, "x", function() end, stagehand.future("tex"))
      assert.matches("bad argument 'opts' to run: expected a plain table of options, got stagehand.Future(tex, pending)",
        err, 1, true)
      _, err = pcall(orch.when, orch, "k", nil, h)
      assert.matches("got stagehand.Handle(done already, done)", err, 1, true)
      _, err = pcall(orch.run, orch, "x", function() end, stagehand.all { h })
      assert.matches("got stagehand.Group(all of 1, done)", err, 1, true)
    end)

    it("shows a string it was given on one line, cut after 60 bytes with its length", function()
      local _, err = pcall(orch.run, orch, "x", string.rep("k", 10000))
      assert.matches('got "' .. string.rep("k", 57) .. '"... (10000 bytes)', err, 1, true)
      _, err = pcall(orch.run, orch, "x", 'one\ntwo\0"three"\\')
      assert.matches([[got "one\ntwo\000\"three\"\\"]], err, 1, true)
      assert.is_nil(err:find("\n", 1, true))
      -- (cut where a character starts, never inside one)
      _, err = pcall(orch.pool, orch, "p", string.rep("\195\169", 40))
      assert.matches('got "' .. string.rep("\195\169", 28) .. '"... (80 bytes)', err, 1, true)
      _, err = pcall(orch.pool, orch, "p", string.rep("\226\130\172", 30)) -- (euro signs: three bytes each)
      assert.matches('got "' .. string.rep("\226\130\172", 19) .. '"... (90 bytes)', err, 1, true)
      _, err = pcall(orch.pool, orch, "p", "ab" .. string.rep("\226\130\172", 30))
      assert.matches('got "ab' .. string.rep("\226\130\172", 18) .. '"... (92 bytes)', err, 1, true)
      _, err = pcall(orch.pool, orch, "p", string.rep("k", 56) .. string.rep("\226\130\172", 4))
      assert.matches('got "' .. string.rep("k", 56) .. '"... (68 bytes)', err, 1, true)
    end)
  end)
end)

-- A job that waits for f, then raises `cause`.
local function fails_after(orch, f, label, cause)
  return orch:run(label, function(job)
    job:await(f)
    error(cause)
  end)
end

describe("unhandled failures", function()
  it("are logged once the step that ended them is over", function()
    local lines, log = logger()
    local orch = T.new { log = log }
    local f = stagehand.future()
    fails_after(orch, f, "Baking the floor", "out of texture memory")
    f:resolve()
    assert.equal(0, #lines)
    orch:step()
    assert.equal(1, #lines)
    assert.matches("Baking the floor", lines[1], 1, true)
    assert.matches("out of texture memory", lines[1], 1, true)
    assert.matches("stack traceback", lines[1], 1, true)
    orch:step()
    assert.equal(1, #lines)
  end)

  it("are not logged when someone awaits the job", function()
    local lines, log = logger()
    local orch = T.new { log = log }
    local caught
    local h = orch:run("fails", function(job)
      job:sleep(1)
      error("bad")
    end)
    orch:run("waiter", function(job)
      local _, err = job:pcall(h.await, h)
      caught = err
    end)
    T.settle(orch, 10, 1)
    assert.equal(0, #lines)
    assert.is_true(stagehand.is_error(caught, "failed"))
  end)

  -- "while nobody waits on it": a wait or a subscription that ended before
  -- the failure heard nothing of it.
  it("are logged when the only job that awaited it left before it failed", function()
    local lines, log = logger()
    local orch = T.new { log = log }
    local f = stagehand.future()
    local garment = fails_after(orch, f, "Building the cloak", "cloth atlas missing")
    local portrait = orch:run("Painting the portrait", function(job) return job:await(garment) end)
    portrait:cancel("scrolled away")
    orch:step()
    assert.equal(1, #orch:report()) -- (the garment runs; polling its state would hear it)
    f:resolve()
    orch:step()
    assert.equal(1, #lines)
    assert.matches("Building the cloak failed and nobody waited on it", lines[1], 1, true)
    assert.matches("cloth atlas missing", lines[1], 1, true)
  end)

  it("are not logged while a job still awaits it, though another that awaited it left", function()
    local lines, log = logger()
    local orch = T.new { log = log }
    local f = stagehand.future()
    local garment = fails_after(orch, f, "Building the cloak", "cloth atlas missing")
    local a = orch:run("portrait a", function(job) return job:pcall(job.await, job, garment) end)
    local heard
    local b = orch:run("portrait b", function(job)
      local _, err = job:pcall(job.await, job, garment)
      heard = err
    end)
    a:cancel("scrolled away")
    f:resolve()
    orch:step()
    assert.equal(0, #lines)
    assert.is_true(stagehand.is_error(heard, "failed"))
    assert.equal("done", (b:result()))
    assert.equal("cancelled", (a:result()))
  end)

  it("are logged when on_end was unsubscribed before it failed", function()
    local lines, log = logger()
    local orch = T.new { log = log }
    local f = stagehand.future()
    local h = fails_after(orch, f, "Baking the floor", "out of texture memory")
    local heard = false
    local unsubscribe = h:on_end(function() heard = true end)
    unsubscribe()
    f:resolve()
    orch:step()
    assert.is_false(heard)
    assert.equal(1, #lines)
    assert.matches("Baking the floor failed", lines[1], 1, true)
  end)

  it("are logged when orch:wait timed out before it failed, and not when it returned the failure", function()
    local lines, log = logger()
    local orch = T.new { log = log }
    local h = orch:run("Baking the floor", function(job)
      job:sleep(500)
      error("out of texture memory")
    end)
    assert.same({ nil, "timeout" }, { orch:wait(h, 100) })
    T.settle(orch, 1000)
    assert.equal("failed", h:state())
    assert.equal(1, #lines)
    local h2 = orch:run("Baking the wall", function(job)
      job:sleep(500)
      error("out of texture memory")
    end)
    assert.equal("failed", (orch:wait(h2)))
    orch:step()
    assert.equal(1, #lines)
  end)

  it("are logged when an abortable over it was aborted before it failed", function()
    local lines, log = logger()
    local orch = T.new { log = log }
    local f = stagehand.future()
    local download = fails_after(orch, f, "Downloading the map", "connection reset")
    local timeout = stagehand.controller()
    local gave_up
    orch:run("loading screen", function(job)
      local _, err = job:pcall(job.await, job, stagehand.abortable(download, timeout.signal))
      gave_up = err
    end)
    timeout:abort("took too long")
    orch:step()
    assert.equal("took too long", gave_up)
    f:resolve()
    orch:step()
    assert.equal(1, #lines)
    assert.matches("Downloading the map failed and nobody waited on it", lines[1], 1, true)
  end)

  it("are not logged when an abortable still waits on it and its waiter hears the failure", function()
    local lines, log = logger()
    local orch = T.new { log = log }
    local f = stagehand.future()
    local download = fails_after(orch, f, "Downloading the map", "connection reset")
    local heard
    orch:run("loading screen", function(job)
      local _, err = job:pcall(job.await, job, stagehand.abortable(download, stagehand.controller().signal))
      heard = err
    end)
    f:resolve()
    orch:step()
    assert.equal(0, #lines)
    assert.is_true(stagehand.is_error(heard, "failed"))
  end)

  it("are not logged when a job awaits the Handle after the failure, within the step", function()
    local lines, log = logger()
    local orch = T.new { log = log }
    local f = stagehand.future()
    local h = fails_after(orch, f, "fails", "bad")
    local caught
    f:on_end(function()
      orch:run("late reader", function(job) caught = select(2, job:pcall(h.await, h)) end)
    end)
    f:resolve()
    orch:step()
    assert.equal(0, #lines)
    assert.is_true(stagehand.is_error(caught, "failed"))
  end)

  it("are not logged when on_end is registered, even after the failure in the same code", function()
    local lines, log = logger()
    local orch = T.new { log = log }
    local got
    local h = orch:run("fails at once", function() error("nope") end)
    h:on_end(function(st) got = st end)
    orch:step()
    assert.equal(0, #lines)
    assert.equal("failed", got)
  end)

  it("are not logged when the caller reads the result", function()
    local lines, log = logger()
    local orch = T.new { log = log }
    local h = orch:run("fails at once", function() error("nope") end)
    assert.equal("failed", (h:result()))
    orch:step()
    assert.equal(0, #lines)
  end)

  it("are not logged when the game reads a `when` on the key before the step ends, and are when it only asks", function()
    local lines, log = logger()
    local orch = T.new { log = log }
    orch:run("Reading the manifest", function() error("no such file") end, { key = "manifest" })
    assert.equal("failed", (orch:when("manifest"):result())) -- (a game polling its key hears it)
    orch:step()
    assert.equal(0, #lines)
    orch:run("Reading the manifest", function() error("no such file") end, { key = "manifest" })
    orch:when("manifest") -- (asked, never read: nobody heard)
    orch:step()
    assert.equal(1, #lines)
    assert.matches("Reading the manifest failed and nobody waited on it", lines[1], 1, true)
    -- (once told, the remembered failure keeps none of the whens asked of
    -- it: a game polling its key every frame holds no memory)
    collectgarbage()
    local before = collectgarbage("count")
    for _ = 1, 10000 do orch:when("manifest"):result() end
    collectgarbage()
    assert.is_true(collectgarbage("count") - before < 100, "kB kept: " .. collectgarbage("count") - before)
    assert.no_leaks(orch)
  end)
end)
