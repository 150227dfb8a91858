-- The LÖVE half of a pool (threads/love_threads.lua) fetching a reply's
-- LÖVE objects from the pool's outbox channel, outside LÖVE: a stand-in
-- channel with love.thread's Channel methods. spec/love runs the real
-- threads; the order this spec sets up is a race there.
local love_threads = require "stagehand.threads.love_threads"

-- A love.thread Channel's methods that the pool uses.
local function channel()
  local items = {}
  local ch = {}
  function ch:push(v) items[#items + 1] = v end
  function ch:pop() return table.remove(items, 1) end
  function ch:getCount() return #items end
  function ch:performAtomic(fn) return fn(self) end
  return ch
end

-- A love.thread Thread that runs until told to stop (looks = how many
-- times isRunning answers true after that).
local stopped_after = {}
local function thread()
  local t = { started = false }
  function t:start() self.started = true end
  function t:isRunning()
    if not stopped_after.told then return true end
    stopped_after.looks = stopped_after.looks + 1
    return stopped_after.looks <= 2
  end
  return t
end

describe("a LÖVE pool's channels", function()
  local saved_love = rawget(_G, "love")
  before_each(function() rawset(_G, "love", { thread = { newChannel = channel, newThread = thread } }) end)
  after_each(function() rawset(_G, "love", saved_love) end)

  local function lt_for(reqs)
    return love_threads.new { ud = { _objects = function() end }, reqs = reqs }
  end
  -- (a reply's objects go to the outbox channel its id picks, as a worker
  -- sends them; ids that far apart share one)
  local N = love_threads.CHANNELS
  local function send(lt, id, objects) lt.outbox[id % N + 1]:push({ id, objects }) end
  local function left(lt)
    local n = 0
    for _, ch in ipairs(lt.outbox) do n = n + ch:getCount() end
    return n
  end

  it("gives each reply its own objects, whatever order they were sent in", function()
    local a, b = 1, 1 + N
    local reqs = { [a] = {}, [b] = {}, [2] = {} }
    local lt = lt_for(reqs)
    send(lt, b, { "image of b" })
    send(lt, 2, { "image of 2" })
    send(lt, a, { "image of a" })
    assert.same({ "image of a" }, lt.fetch(a))
    assert.same({ "image of 2" }, lt.fetch(2))
    assert.same({ "image of b" }, lt.fetch(b))
    assert.equal(0, left(lt))
  end)

  -- Regression: two workers sent their objects in one order and their
  -- replies in the other; the first reply read dropped the objects of a
  -- request cancelled meanwhile, and reading that request's reply then
  -- raised "the LÖVE objects of a message were lost" out of orch:step (at
  -- a game's quit: out of love.quit, into LÖVE's error screen).
  it("reads a cancelled request's reply as having no objects once another reply dropped them", function()
    local a, b = 1, 1 + N -- (one channel's)
    local reqs = { [a] = {}, [b] = {} }
    local lt = lt_for(reqs)
    send(lt, a, { "image of a" }) -- (worker one sent its objects first...)
    send(lt, b, { "image of b" })
    reqs[a] = nil -- (request a cancelled)
    assert.same({ "image of b" }, lt.fetch(b)) -- (...worker two's reply came first, and dropped a's)
    assert.equal(0, left(lt))
    assert.same({}, lt.fetch(a)) -- (its reply is dropped anyway)
    -- A live request whose objects are not there is still a loss the
    -- decoder names (nil), not hidden.
    reqs[4] = {}
    assert.is_nil(lt.fetch(4))
  end)

  it("drops from the inbox only the objects of the request that ended, not those it shares a channel with", function()
    local a, b, c = 3, 3 + N, 3 + 2 * N -- (one channel's)
    local lt = lt_for({})
    love_threads.carry(lt, a, { "image of a" })
    love_threads.carry(lt, b, { "image of b" })
    love_threads.carry(lt, c, { "image of c" })
    love_threads.forget(lt, b) -- (request b cancelled before a worker took it)
    local inbox = lt.inbox[a % N + 1]
    local ids = {}
    for _ = 1, inbox:getCount() do ids[#ids + 1] = inbox:pop()[1] end
    table.sort(ids)
    assert.same({ a, c }, ids)
    love_threads.forget(lt, b) -- (a second time: nothing carried, nothing taken)
  end)

  -- Regression: a pool still alive when its Lua state closed (LÖVE's
  -- love.event.quit("restart") closes it) told its workers to stop, but
  -- nothing waited for their LÖVE threads, which still held LÖVE's modules
  -- when the game started again: "Failed to initialize filesystem: already
  -- initialized", at the first or second restart.
  it("tells its workers to stop and waits for its threads to finish once it is collected", function()
    local ud = { _objects = function() end }
    function ud:_close() stopped_after.told, stopped_after.looks = true, 0 end
    local lt = love_threads.new { ud = ud, reqs = {}, close_ms = 5000 }
    love_threads.start(lt, 0, 1)
    love_threads.start(lt, 1, 2)
    assert.is_true(lt.threads[0].started and lt.threads[1].started)
    for _ = 1, 4 do collectgarbage() end
    assert.is_nil(stopped_after.told) -- (nothing of a pool still alive is collected: it runs on)
    lt = nil -- luacheck: ignore 311 (dropped, as a closing state drops everything)
    for _ = 1, 4 do collectgarbage() end
    assert.is_true(stopped_after.told)
    assert.is_true(stopped_after.looks >= 3) -- (looked until the threads no longer ran)
  end)
end)
