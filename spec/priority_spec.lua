local stagehand = require "stagehand"
local T = require "stagehand.testing"

local function quiet(opts)
  opts = opts or {}
  opts.log = opts.log or function() end
  return T.new(opts)
end

-- An orchestrator whose only decode slot is held until `hold` resolves.
local function decode_slot_held()
  local orch = quiet { pools = { decode = 1 }, stall_ms = 1e9 }
  local hold = stagehand.future()
  orch:run("holder", function(job)
    local release = job:slot("decode")
    job:await(hold)
    release()
  end)
  return orch, hold
end

-- A job that reports its effective priority each time it is asked, until released.
local function observed(orch, label, opts)
  local f = stagehand.future()
  local job_ref
  local h = orch:run(label, function(job)
    job_ref = job
    job:await(f)
  end, opts)
  return h, function() return job_ref:priority() end, f
end

describe("priorities", function()
  it("take the highest rank of the run's callers", function()
    local orch = quiet()
    local _, prio, f = observed(orch, "armor", { key = "armor", priority = "background" })
    assert.equal("background", prio())
    local page = orch:run("armor", function() end, { key = "armor", priority = "visible" })
    assert.equal("visible", prio())
    page:cancel()
    assert.equal("background", prio()) -- a caller that leaves takes its rank with it
    f:resolve()
  end)

  it("count a caller that names none as the default", function()
    local orch = quiet()
    local _, prio, f = observed(orch, "armor", { key = "armor", priority = "background" })
    orch:when("armor")
    assert.equal("scene", prio())
    f:resolve()
  end)

  it("raise a garment build queued behind an army to visible while a portrait awaits it, then drop it", function()
    local orch = quiet()
    local _, prio, f = observed(orch, "Building the cape", { key = "armor-build:cape", priority = "background" })
    assert.equal("background", prio())
    local portrait = orch:run("Hero portrait", function(job)
      return job:await(orch:when("armor-build:cape"))
    end, { priority = "visible" })
    -- the portrait's `when` is itself a caller of default rank; the portrait
    -- awaiting it brings visible
    assert.equal("visible", prio())
    portrait:cancel("portrait closed")
    orch:step()
    assert.equal("background", prio())
    f:resolve()
  end)

  it("flow through a chain: a visible portrait awaiting a garment that waits on a cloth job raises both", function()
    local orch = quiet()
    local cloth, cloth_prio, f = observed(orch, "cloth", { priority = "background" })
    local garment_job
    local garment = orch:run("garment", function(job)
      garment_job = job
      return job:await(cloth)
    end, { priority = "background" })
    assert.equal("background", cloth_prio())
    local portrait = orch:run("portrait", function(job) return job:await(garment) end, { priority = "visible" })
    assert.equal("visible", garment_job:priority())
    assert.equal("visible", cloth_prio())
    portrait:cancel()
    orch:step()
    assert.equal("background", cloth_prio())
    f:resolve()
  end)

  it("read a priority function live: a battle scrolled off screen drops to background", function()
    local orch = quiet()
    local on_screen = true
    local battle = function() return on_screen and "scene" or "background" end
    local _, prio, f = observed(orch, "Placing soldiers", { priority = battle })
    assert.equal("scene", prio())
    on_screen = false
    assert.equal("background", prio())
    on_screen = true
    assert.equal("scene", prio())
    f:resolve()
  end)

  it("follow a portrait awaiting several pending whens to each run that starts, and leave with it", function()
    local orch = quiet()
    local portrait = orch:run("Hero portrait", function(job)
      return job:await(stagehand.all { orch:when("cape"), orch:when("boots") })
    end, { priority = "visible" })
    -- Neither garment has started: the portrait waits on two placeholders.
    local cape, cape_prio, cape_go = observed(orch, "cape", { key = "cape", priority = "background" })
    local boots, boots_prio, boots_go = observed(orch, "boots", { key = "boots", priority = "background" })
    assert.equal("visible", cape_prio())
    assert.equal("visible", boots_prio())
    -- The portrait closes: its awaits and the whens it made leave each
    -- garment, which keeps its own run's background.
    portrait:cancel("portrait closed")
    orch:step()
    assert.equal("background", cape_prio())
    assert.equal("background", boots_prio())
    cape_go:resolve()
    boots_go:resolve()
    orch:step()
    assert.equal("done", cape:state())
    assert.equal("done", boots:state())
    assert.no_leaks(orch)
  end)

  it("keep a portrait awaiting a pending when and a running garment on both when the when's run starts", function()
    local orch = quiet()
    local boots, boots_prio, boots_go = observed(orch, "boots", { key = "boots", priority = "background" })
    local portrait = orch:run("Hero portrait", function(job)
      return job:await(stagehand.all { orch:when("cape"), boots })
    end, { priority = "visible" })
    assert.equal("visible", boots_prio())
    local cape, cape_prio, cape_go = observed(orch, "cape", { key = "cape", priority = "background" })
    assert.equal("visible", cape_prio())
    cape_go:resolve()
    orch:step()
    assert.equal("done", cape:state())
    assert.equal("running", portrait:state())
    assert.equal("visible", boots_prio()) -- still awaited, through the same list
    portrait:cancel()
    orch:step()
    assert.equal("background", boots_prio())
    boots_go:resolve()
    orch:step()
    assert.no_leaks(orch)
  end)

  it("reach a garment build a portrait awaits beside a download in one stagehand.all", function()
    local orch = quiet()
    local download = stagehand.future("face download")
    local cape, cape_prio, cape_go = observed(orch, "cape", { priority = "background" })
    local portrait = orch:run("Hero portrait", function(job)
      return job:await(stagehand.all { download, cape })
    end, { priority = "visible" })
    assert.equal("visible", cape_prio())
    download:resolve("face")
    assert.equal("visible", cape_prio()) -- still awaited
    portrait:cancel()
    orch:step()
    assert.equal("background", cape_prio())
    cape_go:resolve()
    orch:step()
    assert.no_leaks(orch)
  end)

  it("leave a shared build when the Handle a portrait awaited through all_settled is withdrawn", function()
    local orch = quiet()
    local gate = stagehand.future()
    local cloth_job
    local mine = orch:run("cloth", function(job)
      cloth_job = job
      job:await(gate)
    end, { key = "cloth", priority = "background" })
    local theirs = orch:run("cloth", function() end, { key = "cloth", priority = "background" })
    local face = stagehand.future("face")
    local portrait = orch:run("Hero portrait", function(job)
      return job:await(stagehand.all_settled { mine, face })
    end, { priority = "visible" })
    assert.equal("visible", cloth_job:priority())
    mine:cancel("the portrait no longer needs it")
    orch:step()
    -- The build goes on for its other caller, at that caller's rank: the
    -- portrait awaits only the face now.
    assert.equal("running", theirs:state())
    assert.equal("background", cloth_job:priority())
    face:resolve("face")
    orch:step()
    assert.equal("done", portrait:state())
    gate:resolve()
    orch:step()
    assert.equal("done", theirs:state())
    assert.no_leaks(orch)
  end)

  it("leave the jobs of a failed all inside an all_settled, which may then await the waiter", function()
    local orch = quiet()
    local fx, fy, face = stagehand.future("x"), stagehand.future("y"), stagehand.future("face")
    local xj, portrait
    local x = orch:run("cloth", function(job)
      xj = job
      job:await(fx)
      return job:await(portrait) -- (awaits the portrait once it no longer awaits this)
    end, { priority = "background" })
    local y = orch:run("dye", function(job) return job:await(fy) end, { priority = "background" })
    portrait = orch:run("Hero portrait", function(job)
      return job:await(stagehand.all_settled { stagehand.all { y, x }, face })
    end, { priority = "visible" })
    assert.equal("visible", xj:priority())
    fy:reject("no dye") -- the inner all fails; the portrait waits on for the face
    orch:step()
    assert.equal("failed", y:state())
    assert.equal("running", portrait:state())
    assert.equal("background", xj:priority())
    fx:resolve()
    orch:step() -- cloth now awaits the portrait: no cycle, and the portrait's rank comes back
    assert.equal("running", x:state())
    face:resolve("face")
    orch:step()
    assert.equal("done", portrait:state())
    assert.equal("done", x:state())
    assert.no_leaks(orch)
  end)

  it("leave the jobs of a failed all however deep the all_settled groups around it nest", function()
    for depth = 1, 4 do
      local orch = quiet()
      local fy, open = stagehand.future("y"), {}
      local xj
      local x = orch:run("cloth", function(job)
        xj = job
        return job:await(stagehand.future("x"))
      end, { priority = "background" })
      local y = orch:run("dye", function(job) return job:await(fy) end, { priority = "background" })
      local g = stagehand.all { y, x }
      for d = 1, depth do
        open[d] = stagehand.future("open " .. d) -- (keeps each group around it waiting)
        g = stagehand.all_settled { g, open[d] }
      end
      local portrait = orch:run("Hero portrait", function(job) return job:await(g) end, { priority = "visible" })
      assert.equal("visible", xj:priority())
      fy:reject("no dye")
      orch:step()
      assert.equal("running", portrait:state())
      assert.equal("background", xj:priority(), "nested " .. depth .. " deep")
      for d = 1, depth do open[d]:resolve() end
      orch:step()
      assert.equal("done", portrait:state())
      x:cancel()
      orch:step()
      assert.no_leaks(orch)
    end
  end)

  it("leave what a job awaited as soon as the wait ends, not at its next resume", function()
    local orch = quiet()
    local fa, fb = stagehand.future(), stagehand.future()
    local a = orch:run("A", function(job) job:await(fa) end)
    local bj
    local b = orch:run("B", function(job)
      bj = job
      job:await(fb)
    end, { priority = "background" })
    local w = orch:run("W", function(job) return job:await(stagehand.all { a, b }) end, { priority = "visible" })
    assert.equal("visible", bj:priority())
    a:cancel() -- between steps: the group fails and W is queued to hear it
    assert.equal("background", bj:priority())
    w:cancel()
    orch:step()
    assert.equal("cancelled", w:state())
    assert.equal("background", bj:priority())
    fb:resolve()
    orch:step()
    assert.equal("done", b:state())
    assert.no_leaks(orch)
  end)

  it("show the effective rank in the report", function()
    local orch = quiet()
    local h, _, f = observed(orch, "cloth", { priority = "background" })
    orch:run("portrait", function(job) return job:await(h) end, { priority = "visible" })
    local r = orch:report()
    assert.equal("visible", r[1].priority)
    assert.equal("visible", r[2].priority)
    f:resolve()
  end)

  it("call each distinct priority function once per reading, however many callers share it", function()
    local orch = quiet()
    local calls = 0
    local fns = {}
    for i = 1, 3 do
      fns[i] = function()
        calls = calls + 1
        return "background"
      end
    end
    local _, prio, f = observed(orch, "army", { key = "army", priority = fns[1] })
    for i = 1, 999 do orch:run("army", function() end, { key = "army", priority = fns[i % 3 + 1] }) end
    calls = 0
    assert.equal("background", prio())
    assert.is_true(calls <= 3, "called " .. calls .. " times")
    f:resolve()
  end)

  it("log a priority function that raises once and count it as the default", function()
    local lines = {}
    local orch = T.new { log = function(m) lines[#lines + 1] = m end }
    local bad = function() error("camera missing") end
    local _, prio, f = observed(orch, "x", { priority = bad })
    assert.equal("scene", prio())
    assert.equal("scene", prio())
    assert.equal(1, #lines)
    assert.matches("camera missing", lines[1], 1, true)
    f:resolve()
  end)

  it("read a fresh closure whose group id a collected one had, in the same step", function()
    -- A function's group id is reused once the collector took the function.
    -- Here that happens inside one step, between two grant rounds: the new
    -- function must be read, not given the rank the old one had this step.
    local orch = quiet { pools = { p = 1 }, stall_ms = 1e9 }
    orch.sweep_min, orch.sweep_at = 1, 1 -- (sweep at every new function group)
    local order, reads, new_group = {}, 0, nil
    local function waiter(label, prio)
      return orch:run(label, function(job)
        local release = job:slot("p")
        order[#order + 1] = label
        release()
      end, { priority = prio })
    end
    local doomed = {}
    local function make_old() -- (a frame of its own: no register of this one keeps it)
      local old = function() return "background" end
      doomed[1] = waiter("old", old)
      return orch.group_of[old]
    end
    local old_group = make_old()
    local go = stagehand.future()
    orch:run("first", function(job)
      local release = job:slot("p") -- (fixed scene: granted before "old", whose function is read)
      doomed[1]:cancel("scrolled away")
      doomed[1] = nil
      go:resolve() -- ("then" wakes after the cancelled job's cleanup, which lets go of it)
      release()
    end, { priority = "scene" })
    orch:run("then", function(job)
      job:await(go)
      -- (LuaJIT: a compiled trace that called the old function may hold it
      -- as a constant, and a trace keeps what it holds alive: flushed, the
      -- collector can take it. Without this the id was not reused in one
      -- run of the suite in 27, and in 3 runs of this file in 80 under
      -- varied collector settings: the spec failed on the line after step.)
      if jit then jit.flush() end
      collectgarbage()
      collectgarbage()
      waiter("scene", "scene")
      local fresh = function()
        reads = reads + 1
        return "visible"
      end
      waiter("fresh", fresh)
      new_group = orch.group_of[fresh]
    end)
    orch:step()
    assert.equal(old_group, new_group) -- (the id was reused: otherwise this proves nothing)
    assert.same({ "fresh", "scene" }, order)
    assert.equal(1, reads)
  end)

  it("use the configured ranks", function()
    local orch = quiet { ranks = { "now", "soon", "later" }, default_priority = "later" }
    local h, prio, f = observed(orch, "x")
    assert.equal("later", prio())
    orch:run("y", function(job) job:await(h) end, { priority = "now" })
    assert.equal("now", prio())
    f:resolve()
  end)
end)

describe("priority down a long chain of awaits", function()
  -- A chain of loaders, each awaiting the one made before it; the first
  -- waits for the only decode slot, behind three background jobs that
  -- asked first. Passing a rank down the chain once recursed a call per
  -- link: at 10,000 links it overflowed LuaJIT's Lua stack and failed the
  -- portrait's await.
  local function chain_behind_others(n)
    local orch, hold = decode_slot_held()
    local order = {}
    for i = 1, 3 do
      orch:run("other " .. i, function(job)
        job:slot("decode")
        order[#order + 1] = "other " .. i
      end, { priority = "background" })
    end
    local first_job
    local links = {}
    links[1] = orch:run("link 1", function(job)
      first_job = job
      job:slot("decode")
      order[#order + 1] = "link 1"
    end, { priority = "background" })
    for i = 2, n do
      local below = links[i - 1]
      links[i] = orch:run("link " .. i, function(job) return job:await(below) end, { priority = "background" })
    end
    return orch, hold, order, links, function() return first_job:priority() end
  end

  it("reaches the far end of a chain of 10,000: its first link gets the next slot", function()
    local orch, hold, order, links, first_prio = chain_behind_others(10000)
    assert.equal("background", first_prio())
    local portrait = orch:run("Hero portrait", function(job) return job:await(links[#links]) end,
      { priority = "visible" })
    assert.equal("running", portrait:state())
    assert.equal("visible", first_prio())
    hold:resolve()
    assert.equal(0, T.settle(orch, 1000))
    assert.same({ "link 1", "other 1", "other 2", "other 3" }, order)
    assert.equal("done", portrait:state())
    assert.no_leaks(orch)
  end)

  it("leaves the chain when the portrait that brought it is cancelled", function()
    local orch, hold, order, links, first_prio = chain_behind_others(10000)
    local portrait = orch:run("Hero portrait", function(job) return job:await(links[#links]) end,
      { priority = "visible" })
    assert.equal("visible", first_prio())
    portrait:cancel("closed the party screen")
    orch:step()
    assert.equal("background", first_prio())
    hold:resolve()
    assert.equal(0, T.settle(orch, 1000))
    assert.same({ "other 1", "other 2", "other 3", "link 1" }, order)
    assert.no_leaks(orch)
  end)

  -- Each link's last caller leaving once lent the chain below it the
  -- default rank for a moment, passed all the way down and back: O(n) a
  -- cancel, 3 s for 2,000 links and minutes for 10,000.
  it("ends every link when each is cancelled from the top", function()
    local orch, hold, order, links = chain_behind_others(10000)
    for i = #links, 1, -1 do assert.is_true(links[i]:cancel("level unloaded")) end
    hold:resolve()
    assert.equal(0, T.settle(orch, 1000))
    for i = 1, #links do assert.equal("cancelled", links[i]:state()) end
    assert.same({ "other 1", "other 2", "other 3" }, order)
    assert.no_leaks(orch)
  end)

  it("a last caller's cancel settles its Handle with the job's end and tells its listeners once", function()
    local orch = quiet()
    local f = stagehand.future()
    local h = orch:run("tile", function(job) return job:await(f) end)
    local heard = {}
    h:on_end(function(st, err) heard[#heard + 1] = { st, err.reason } end)
    local ended = {}
    orch:watch(function(r) if r.ended_at then ended[#ended + 1] = r.state end end)
    assert.is_true(h:cancel("scrolled away"))
    assert.is_false(h:cancel("again"))
    local st, err = h:result()
    assert.equal("cancelled", st)
    assert.is_true(stagehand.is_error(err, "cancelled"))
    assert.equal("scrolled away", err.reason)
    assert.same({ { "cancelled", "scrolled away" } }, heard)
    assert.same({ "cancelled" }, ended)
    orch:step()
    assert.no_leaks(orch)
  end)
end)

describe("priority from thousands of callers, a closure each", function()
  -- An army's mesh, one keyed run joined by 10,000 soldiers, each passing a
  -- closure over its own rank. The run waits for the only decode slot
  -- (directly, or through the skeleton job it awaits) behind a rival of
  -- rank scene that asked first. Its set of sources, past 16 members, is
  -- named by a hash and changes in place; named by its sorted members,
  -- each join and each leave cost the set's size: 18 s for this army on
  -- LuaJIT.
  local function army(through_skeleton)
    local orch, hold = decode_slot_held()
    local order = {}
    orch:run("rival", function(job)
      job:slot("decode")
      order[#order + 1] = "rival"
    end, { priority = "scene" })
    local waiting -- the job whose rank decides the grant
    local skeleton
    if through_skeleton then
      skeleton = orch:run("skeleton", function(job)
        waiting = job
        job:slot("decode")
        order[#order + 1] = "skeleton"
      end, { priority = "background" })
    end
    local rank, hs = {}, {}
    local function mesh(job)
      if skeleton then return job:await(skeleton) end
      waiting = job
      job:slot("decode")
      order[#order + 1] = "mesh"
    end
    for i = 1, 10000 do
      rank[i] = "background"
      hs[i] = orch:run("army mesh", mesh, { key = "army mesh", priority = function() return rank[i] end })
    end
    return orch, hold, order, rank, hs, function() return waiting:priority() end
  end

  for _, through_skeleton in ipairs { false, true } do
    local what = through_skeleton and "the skeleton their mesh awaits" or "their shared mesh"
    it("reads each soldier's closure live for " .. what .. ", and follows soldiers as they leave", function()
      local orch, hold, order, rank, hs, prio = army(through_skeleton)
      assert.equal("background", prio())
      rank[5000] = "visible"
      assert.equal("visible", prio())
      hs[5000]:cancel("fell")
      assert.equal("background", prio())
      rank[7777] = "visible"
      -- All but two leave, in an order that keeps swapping members around.
      for i = 1, 10000, 2 do
        if i ~= 7777 then hs[i]:cancel("fell") end
      end
      for i = 10000, 2, -2 do
        if i ~= 5000 and i ~= 4444 then hs[i]:cancel("fell") end
      end
      assert.equal("visible", prio())
      rank[7777] = "background"
      assert.equal("background", prio())
      rank[4444] = "visible"
      assert.equal("visible", prio())
      hold:resolve()
      assert.equal(0, T.settle(orch, 1000))
      assert.same({ through_skeleton and "skeleton" or "mesh", "rival" }, order)
      assert.equal("done", hs[4444]:state())
      assert.equal(0, orch.nsets)
      assert.no_leaks(orch)
    end)
  end

  it("keeps 1,000 assets awaited by 20 panels, each with a closure of its own, in one shared set", function()
    local orch, hold = decode_slot_held()
    local assets, first = {}, nil
    for i = 1, 1000 do
      assets[i] = orch:run("asset", function(job)
        first = first or job
        job:slot("decode")
      end, { priority = "background" })
    end
    local rank, panels = {}, {}
    for k = 1, 20 do
      rank[k] = "background"
      panels[k] = orch:run("panel " .. k, function(job) return job:await(stagehand.all(assets)) end,
        { priority = function() return rank[k] end })
    end
    -- One set of 21 sources (the assets' own rank and the 20 panels'),
    -- named by its hash, not one per asset: a grant reads it once.
    assert.equal(1, orch.nsets)
    assert.equal("background", first:priority())
    rank[13] = "visible"
    assert.equal("visible", first:priority())
    panels[13]:cancel("closed")
    assert.equal("background", first:priority())
    assert.equal(1, orch.nsets)
    hold:resolve()
    assert.equal(0, T.settle(orch, 1000))
    assert.equal("done", panels[1]:state())
    assert.equal(0, orch.nsets)
    assert.no_leaks(orch)
  end)

  it("names a big set that shrinks back to a small one as that small set", function()
    local orch = quiet { stall_ms = 1e9 }
    orch.big_set = 3 -- (16 by default)
    local fns = {}
    -- (each a closure of its own: Lua 5.2 and 5.3 hand back one cached
    -- closure for a function with no upvalues made again in a loop)
    for i = 1, 5 do fns[i] = function() return i and "background" end end
    local f = stagehand.future()
    local a = {}
    for _, i in ipairs { 5, 4, 3, 2 } do
      a[i] = orch:run("a", function(job) job:await(f) end, { key = "a", priority = fns[i] })
    end
    a[5]:cancel("left") -- four sources (big) down to three (small)
    for _, i in ipairs { 2, 3, 4 } do
      orch:run("b", function(job) job:await(f) end, { key = "b", priority = fns[i] })
    end
    assert.equal(1, orch.nsets) -- both runs have the set {2, 3, 4}
    f:resolve()
    orch:step()
    assert.equal(0, orch.nsets)
    assert.no_leaks(orch)
  end)

  -- A mesh joined by 17 soldiers, each with a closure of its own: a big set
  -- that only the mesh has, so a visible portrait starting to await the
  -- mesh changes it in place. The portrait does so in the middle of a
  -- step, after that step's grant round read the set as background: the
  -- next grant of the same step must read it again.
  local function mesh_of_17(orch, work)
    local hs = {}
    for i = 1, 17 do
      hs[i] = orch:run("mesh", work, { key = "mesh", priority = function() return i and "background" end })
    end
    return hs[1]
  end

  -- Work that takes a slot of "decode", lets it go, and notes its name in
  -- `order`: the order the slots were granted in.
  local function decoder(order)
    return function(name)
      return function(job)
        job:slot("decode")()
        order[#order + 1] = name
      end
    end
  end

  it("reads a big set changed in place mid-step again before the next slot is granted", function()
    local orch, hold = decode_slot_held()
    orch:step() -- (the holder takes the only slot)
    local order = {}
    local decode = decoder(order)
    orch:run("rival", decode("rival"), { priority = "scene" })
    local mesh = mesh_of_17(orch, decode("mesh"))
    orch:run("portrait", function(job)
      job:slot("decode")() -- (granted first, let go at once)
      order[#order + 1] = "portrait"
      job:await(mesh)
    end, { priority = "visible" })
    orch:step()
    assert.same({}, order)
    hold:resolve()
    orch:step() -- (the holder lets go; portrait, then the best of the rest)
    assert.same({ "portrait", "mesh", "rival" }, order)
    assert.no_leaks(orch)
  end)

  it("reads a big set changed in place mid-step again before the next permit is granted", function()
    local orch, clock = quiet { stall_ms = 1e9 }
    orch:budget("upload", { ms = 10 })
    local order = {}
    local function upload(name)
      return function(job)
        job:permit("upload")
        order[#order + 1] = name
        clock:advance(1)
      end
    end
    orch:run("rival", upload("rival"), { priority = "scene" })
    local mesh = mesh_of_17(orch, upload("mesh"))
    orch:run("portrait", function(job)
      upload("portrait")(job)
      job:await(mesh)
    end, { priority = "visible" })
    orch:step() -- (one permit at a time, each holder running before the next)
    assert.same({ "portrait", "mesh", "rival" }, order)
    assert.equal(0, T.settle(orch, 1000))
    assert.no_leaks(orch)
  end)

  it("reads a big set again when a priority function of its own changes it as the grant reads it", function()
    local orch, hold = decode_slot_held()
    orch:step() -- (the holder takes the only slot)
    local order = {}
    local decode = decoder(order)
    orch:run("rival", decode("rival"), { priority = "scene" })
    -- The mesh: a visible general, 16 soldiers, and a scout whose function,
    -- read in the grant round, sends the general away (a big set of 18
    -- that only the mesh has: it changes in place, in the middle of its
    -- own read). Without the general the mesh is background.
    local general = orch:run("mesh", decode("mesh"), { key = "mesh", priority = "visible" })
    for i = 1, 16 do
      orch:run("mesh", decode("mesh"), { key = "mesh", priority = function() return i and "background" end })
    end
    orch:run("mesh", decode("mesh"), {
      key = "mesh",
      priority = function()
        if general:state() == "running" then general:cancel("called away") end
        return "background"
      end,
    })
    orch:step()
    assert.same({}, order)
    hold:resolve()
    orch:step()
    assert.equal("cancelled", general:state())
    assert.same({ "rival", "mesh" }, order)
    assert.no_leaks(orch)
  end)

  it("loses a soldier's rank when it leaves, and the grant goes to the rival", function()
    local orch, hold, order, rank, hs, prio = army(false)
    rank[1] = "visible"
    assert.equal("visible", prio())
    hs[1]:cancel("fell")
    assert.equal("background", prio())
    hold:resolve()
    assert.equal(0, T.settle(orch, 1000))
    assert.same({ "rival", "mesh" }, order)
    assert.no_leaks(orch)
  end)
end)
