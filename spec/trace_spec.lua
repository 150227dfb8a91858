-- orch:trace(): a load's timeline, written as Chrome Trace Event JSON.
local stagehand = require "stagehand"
local T = require "stagehand.testing"
local cjson = require "cjson" -- (Debian's lua-cjson: make deps installs it)

-- A small load on the fake clock: a sleep, a slot, a future, a failure.
local function small_load()
  local orch, clock = T.new { pools = { decode = 1 }, log = function() end }
  local tr = orch:trace()
  local atlas = stagehand.future("atlas")
  local hero = orch:run("Loading \"hero\"", function(job)
    job:sleep(10)
    local release = job:slot("decode")
    job:await(atlas)
    release()
    return "hero"
  end)
  local map = orch:run("Loading map", function(job)
    local release = job:slot("decode")
    job:sleep(5)
    release()
    error("map.bin: bad checksum", 0)
  end)
  clock:advance(10)
  orch:step()
  clock:advance(5)
  orch:step()
  clock:advance(20)
  atlas:resolve()
  orch:step()
  return orch, clock, tr, hero, map
end

local function read(path)
  local f = assert(io.open(path, "rb"))
  local text = f:read("*a")
  f:close()
  return text
end

describe(":trace", function()
  it("records each job's start, waits, slot holds and end on the orchestrator's clock", function()
    local _, _, tr, hero, map = small_load()
    assert.equal("done", hero:state())
    assert.equal("failed", map:state())
    local seen = {}
    for _, e in ipairs(tr:events()) do
      if e.kind == "start" or e.kind == "end" then
        seen[#seen + 1] = string.format("%s %s %s", e.kind, e.label, e.state or "")
      else
        seen[#seen + 1] = string.format("%s %s %s %g..%g", e.kind, e.label, e.what, e.from, e.to)
      end
    end
    assert.same({
      'start Loading "hero" ',
      'wait Loading "hero" a sleep until 10 0..10',
      "start Loading map ",
      "wait Loading map a slot of pool 'decode' 0..10",
      "hold Loading map a slot of pool 'decode' 10..15",
      "wait Loading \"hero\" a slot of pool 'decode' 10..15",
      "wait Loading map a sleep until 15 10..15",
      "end Loading map failed",
      "hold Loading \"hero\" a slot of pool 'decode' 15..35",
      "wait Loading \"hero\" future 'atlas' 15..35",
      'end Loading "hero" done',
    }, seen)
  end)

  it("writes JSON that parses, with the fields a trace viewer needs on every event", function()
    local _, _, tr = small_load()
    local path = os.tmpname()
    assert.equal(path, tr:write(path))
    local doc = cjson.decode(read(path))
    os.remove(path)
    assert.is_table(doc.traceEvents)
    local names, tracks = {}, {}
    for _, e in ipairs(doc.traceEvents) do
      assert.is_string(e.ph)
      assert.is_string(e.name)
      assert.is_number(e.pid)
      assert.is_number(e.tid)
      if e.ph ~= "M" then
        assert.is_number(e.ts)
        assert.is_true(e.ts >= 0)
      end
      if e.ph == "X" then assert.is_true(e.dur >= 0) end
      if e.ph == "M" and e.name == "thread_name" then tracks[e.tid] = e.args.name end
      names[#names + 1] = e.name
    end
    assert.same({ [1] = 'Loading "hero" #1', [2] = "Loading map #2" }, tracks)
    -- (times in microseconds: the map's slot was held 5 ms)
    for _, e in ipairs(doc.traceEvents) do
      if e.cat == "hold" and e.tid == 2 then assert.equal(5000, e.dur) end
      if e.cat == "job" and e.tid == 2 then assert.equal("failed", e.args.state) end
    end
    assert.is_true(#names >= 10)
  end)

  -- Whether the bytes of s are valid UTF-8 (RFC 3629), checked here by a
  -- table of the ranges each lead byte allows, not by stagehand's code.
  local function valid_utf8(s)
    local i = 1
    while i <= #s do
      local c = s:byte(i)
      local ranges
      if c < 0x80 then ranges = {}
      elseif c >= 0xC2 and c <= 0xDF then ranges = { { 0x80, 0xBF } }
      elseif c == 0xE0 then ranges = { { 0xA0, 0xBF }, { 0x80, 0xBF } }
      elseif (c >= 0xE1 and c <= 0xEC) or c == 0xEE or c == 0xEF then ranges = { { 0x80, 0xBF }, { 0x80, 0xBF } }
      elseif c == 0xED then ranges = { { 0x80, 0x9F }, { 0x80, 0xBF } }
      elseif c == 0xF0 then ranges = { { 0x90, 0xBF }, { 0x80, 0xBF }, { 0x80, 0xBF } }
      elseif c >= 0xF1 and c <= 0xF3 then ranges = { { 0x80, 0xBF }, { 0x80, 0xBF }, { 0x80, 0xBF } }
      elseif c == 0xF4 then ranges = { { 0x80, 0x8F }, { 0x80, 0xBF }, { 0x80, 0xBF } }
      else return false, i end
      for k, r in ipairs(ranges) do
        local ck = s:byte(i + k)
        if not ck or ck < r[1] or ck > r[2] then return false, i end
      end
      i = i + 1 + #ranges
    end
    return true
  end

  -- Regression: label bytes were copied unchanged, so a label holding
  -- \255 made a file that strict JSON readers reject.
  it("writes every label as valid UTF-8 JSON, whatever bytes it holds", function()
    local orch = T.new { log = function() end }
    local tr = orch:trace()
    local labels = {
      "bad \255 byte", "lone \192 lead", "cut \226\130", "overlong \192\175", "surrogate \237\160\128",
      "past U+10FFFF \244\144\128\128", "control \1\2\31\127 bytes", "nul \0 inside", "fine é ✓ 🎮",
      "quote \" and \\ backslash", string.rep("\200", 3),
      -- (each valid range's edges: U+0080, U+07FF, U+0800, U+D7FF, U+E000, U+FFFF, U+10000, U+10FFFF)
      "edges \194\128 \223\191 \224\160\128 \237\159\191 \238\128\128 \239\191\191 \240\144\128\128 \244\143\191\191",
      "héros \"quoted\"\tand \\ beside é", -- (escapes among multibyte characters)
    }
    for i = 1, #labels do orch:run(labels[i], function() end) end
    orch:step()
    local path = os.tmpname()
    tr:write(path)
    local text = read(path)
    os.remove(path)
    local ok, at = valid_utf8(text)
    assert.is_true(ok, "the file is not valid UTF-8 at byte " .. tostring(at))
    assert.is_nil(text:find("[%z\1-\9\11-\31]"), "a raw control byte in the file (newlines part events)")
    local doc = cjson.decode(text)
    local names = {}
    for _, e in ipairs(doc.traceEvents) do
      assert.is_true(valid_utf8(e.name), "not UTF-8: " .. e.name)
      if e.ph == "M" and e.name == "thread_name" then names[#names + 1] = e.args.name end
    end
    assert.equal(#labels, #names)
    assert.equal("bad \239\191\189 byte #1", names[1])
    assert.equal("fine é ✓ 🎮 #9", names[9]) -- (valid UTF-8 stays as it was)
    assert.equal("control \1\2\31\127 bytes #7", names[7]) -- (escaped, and read back as they were)
    assert.equal("quote \" and \\ backslash #10", names[10])
    assert.equal(string.rep("\239\191\189", 3) .. " #11", names[11])
    assert.equal(labels[12] .. " #12", names[12]) -- (valid at every edge: stays as it was)
    assert.equal(labels[13] .. " #13", names[13])
  end)

  it("starts a job already waiting, and its wait, where the recording starts", function()
    -- A trace begun mid-load sees nothing before its time zero: a job
    -- parked 30 ms earlier starts, and waits, from that zero on, so its
    -- wait's slice lies inside its track (a viewer drops or misnests a
    -- slice that begins before its parent, or before time zero).
    local orch, clock = T.new()
    local f = stagehand.future("atlas")
    orch:run("early", function(job) job:await(f) end)
    clock:advance(30)
    local tr = orch:trace()
    clock:advance(10)
    f:resolve()
    orch:step()
    local seen = {}
    for _, e in ipairs(tr:events()) do
      seen[#seen + 1] = string.format("%s %s %s", e.kind, e.t or "", e.from and (e.from .. ".." .. e.to) or "")
    end
    assert.same({ "start 30 ", "wait  30..40", "end 40 " }, seen)
    local path = os.tmpname()
    tr:write(path)
    local doc = cjson.decode(read(path))
    os.remove(path)
    for _, e in ipairs(doc.traceEvents) do
      if e.ph == "X" then assert.is_true(e.ts >= 0) end
    end
  end)

  it("records no end of a job whose end was under way as it began", function()
    -- A trace begun by game code that a job's end runs (an on_end, an
    -- abort handler): the job is no longer running then, so the trace saw
    -- no start of it, and shows no end either.
    local orch = T.new()
    local traces = {}
    local h = orch:run("doomed", function(job)
      job.signal:on_abort(function() traces[#traces + 1] = orch:trace() end)
      job:await(stagehand.future())
    end)
    h:on_end(function() traces[#traces + 1] = orch:trace() end)
    h:cancel("closed")
    assert.equal(2, #traces)
    for _, tr in ipairs(traces) do assert.same({}, tr:events()) end
  end)

  it("shows a job still running up to now, and stops recording on stop", function()
    local orch, clock = T.new()
    local tr = orch:trace()
    orch:run("slow", function(job) job:await(stagehand.future()) end)
    clock:advance(40)
    local path = os.tmpname()
    tr:write(path)
    local doc = cjson.decode(read(path))
    os.remove(path)
    local job
    for _, e in ipairs(doc.traceEvents) do
      if e.cat == "job" then job = e end
    end
    assert.equal("running", job.args.state)
    assert.equal(40000, job.dur)
    tr:stop()
    orch:run("after", function() end)
    local n = #tr:events()
    orch:run("after again", function() end)
    assert.equal(n, #tr:events())
  end)

  if stagehand.backend ~= "lua" then -- (worker threads: not on the pure-Lua core)
    it("follows a worker's request: queued, then waiting for the reply", function()
      if not package.path:find("spec/fixtures/?.lua", 1, true) then
        package.path = "spec/fixtures/?.lua;" .. package.path
      end
      local orch = T.new()
      local tr = orch:trace()
      local pool = stagehand.pool(orch, { module = "fixture_worker", size = 1 })
      orch:wait(pool:run("add", { a = 1, b = 2 }), 10000)
      local kinds = {}
      for _, e in ipairs(tr:events()) do kinds[#kinds + 1] = e.kind .. (e.what and (" " .. e.what) or "") end
      assert.equal("start", kinds[1])
      assert.matches("wait a worker of pool 'fixture_worker' %(queued%)", kinds[2])
      assert.equal("end", kinds[#kinds])
      orch:wait(pool:destroy(), 10000)
    end)
  end

  it("raises a clear error for a path it cannot write, and keeps the recording", function()
    local _, _, tr = small_load()
    local n = #tr:events()
    local ok, err = pcall(tr.write, tr, "/nonexistent/dir/trace.json")
    assert.is_false(ok)
    assert.matches("tr:write: cannot write /nonexistent/dir/trace.json", err, 1, true)
    assert.equal(n, #tr:events())
    assert.has_error(function() tr:write(5) end)
    assert.has_error(function() tr.write({}, "x") end)
  end)
end)
