-- Ports and round barriers for the pure-Lua core, on LÖVE's channels:
-- where no native core loads (LÖVE on a Mac the game carries no core
-- for, on a phone), love_work.lua runs pools on LÖVE's threads, and this
-- file gives them what csrc/core/sh_port.c and sh_rounds.c give native
-- ones, method for method (the C module's names, its messages), so
-- threads/ports.lua above it is the same code on both cores.
--
-- A port is a table of three channels: its values, a flag set once it is
-- closed, and the notifiers watching it (the game's orchestrators, whose
-- jobs wait on it). A round barrier holds its rounds in one channel, as
-- one table every arrival takes and puts back inside the channel's lock
-- (Channel:performAtomic), beside a flag set once it is aborted and its
-- watchers. Both cross threads as themselves: love.thread copies the
-- table, the channels in it stay the same objects, and the receiving
-- state gives the copy its own methods (`relink`), the same table each
-- time while it keeps one.
--
-- Each state has its own copy of these functions: the game's (through
-- love_work.lua) and each worker's, which loads `build` from its bytes
-- (string.dump: the same runtime on both sides). So `build` holds no
-- upvalue; what differs between the states comes in `env`.
local M = {}

---@param env table new_channel, now (ms), stopped(), waiting(what), check (love_work's CHECK)
local function build(env)
  local new_channel, now, stopped, waiting, check = env.new_channel, env.now, env.stopped, env.waiting, env.check
  local MARK = "\0stagehand" -- (a crossing object's kind: "port", "rounds"; "wrap": a value holding one;
  -- "graph": values that hold a table twice)
  local SLICE = 0.01 -- (s: how often a blocked wait looks whether its worker was told to stop)
  local each = next -- (not spelled next in a loop: see compat.lua on Debian's LuaJIT)
  local floor = math.floor
  local P = {}

  local function fail(level, msg) error(msg, level + 1) end

  -- What a bad argument was, as the C module's messages show one: a
  -- string quoted on one line, cut after 57 bytes.
  local ESC = { ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t", ['"'] = '\\"', ["\\"] = "\\\\" }
  local function quote(s)
    return '"' .. s:gsub('[%c\\"]', function(c) return ESC[c] or string.format("\\%03d", c:byte()) end) .. '"'
  end
  local function got_of(v)
    if type(v) == "number" then return v ~= v and "nan" or tostring(v) end
    if type(v) == "string" then
      if #v > 60 then return quote(v:sub(1, 57)) .. "... (" .. #v .. " bytes)" end
      return quote(v)
    end
    return type(v)
  end
  P.got_of = got_of

  local function num(x) return string.format("%.14g", x) end -- (C's %f in a Lua message)

  ---------------------------------------------------------------------------
  -- Watchers: the notifiers ({ch = a channel}) of the orchestrators whose
  -- jobs wait on an object, each with how many of its waits do.

  local function ring(w)
    local list = w:peek()
    if not list then return end
    for i = 1, #list do
      local ch = list[i][1]
      if ch:getCount() == 0 then ch:push(true) end
    end
  end

  local function rewatch(c, ch, d)
    local list = c:pop() or {}
    local found = false
    for i = 1, #list do
      if rawequal(list[i][1], ch) then
        list[i][2] = list[i][2] + d
        if list[i][2] <= 0 then table.remove(list, i) end
        found = true
        break
      end
    end
    if not found and d > 0 then list[#list + 1] = { ch, d } end
    if #list > 0 then c:push(list) end
  end

  local function watch(self, n) self.w:performAtomic(rewatch, n.ch, 1) end
  local function unwatch(self, n) self.w:performAtomic(rewatch, n.ch, -1) end

  ---------------------------------------------------------------------------
  -- Crossing: this state's object for a copy that came through a channel.

  local PORT = { __name = "stagehand.port" }
  local ROUNDS = { __name = "stagehand.rounds" }
  local known = setmetatable({}, { __mode = "kv" }) -- (its first channel -> the object)

  local function adopt(t)
    local kind = rawget(t, MARK)
    local key = kind == "port" and t.v or t.s
    local have = known[key]
    if have then return have end
    setmetatable(t, kind == "port" and PORT or ROUNDS)
    known[key] = t
    return t
  end

  -- A table met twice: a channel copies a table once for each place it
  -- holds it, and refuses one that holds itself, so values in which the
  -- check met a table twice (shared, or a cycle) cross as a graph
  -- instead: each plain table a list of its keys and values, in which a
  -- plain table is {n}, the nth of the list (a port, a round barrier and
  -- a LÖVE object stay themselves). The receiving state rebuilds it, each
  -- table once.
  function P.pack(v)
    local index, nodes = {}, {}
    local function ref(t)
      if type(t) ~= "table" or rawget(t, MARK) ~= nil then return t end
      local i = index[t]
      if i == nil then
        i = #nodes + 1
        index[t] = i
        local node = {}
        nodes[i] = node
        for k, x in each, t do
          node[#node + 1] = ref(k)
          node[#node + 1] = ref(x)
        end
      end
      return { i }
    end
    return { [MARK] = "graph", r = ref(v), g = nodes }
  end

  local relink
  local function unpack_graph(graph)
    local nodes, built = graph.g, {}
    local function get(x)
      if type(x) ~= "table" then return x end
      if rawget(x, MARK) ~= nil then return relink(x) end
      local i = x[1]
      local t = built[i]
      if t == nil then
        t = {}
        built[i] = t
        local node = nodes[i]
        for j = 1, #node, 2 do t[get(node[j])] = get(node[j + 1]) end
      end
      return t
    end
    return get(graph.r)
  end

  relink = function(v)
    if type(v) ~= "table" then return v end
    local kind = rawget(v, MARK)
    if kind == "port" or kind == "rounds" then return adopt(v) end
    if kind == "wrap" then return relink(v.v) end
    if kind == "graph" then return unpack_graph(v) end
    local keys
    for k, x in each, v do
      if type(x) == "table" then v[k] = relink(x) end
      if type(k) == "table" then
        keys = keys or {}
        keys[#keys + 1] = k
      end
    end
    if keys then -- (a key that is a port: moved once the walk is over)
      for i = 1, #keys do
        local k = keys[i]
        local x = v[k]
        v[k] = nil
        v[relink(k)] = x
      end
    end
    return v
  end
  P.relink = relink

  local function is_of(self, mt) return type(self) == "table" and getmetatable(self) == mt end

  local function bad_self(self, mt, method, expected)
    if is_of(self, mt) then return nil end
    return "bad self to " .. method .. ": expected " .. expected .. ", got " .. (self == nil and "nil" or got_of(self))
      .. " (call it with a colon: " .. method .. "(...))"
  end

  ---------------------------------------------------------------------------
  -- Ports.

  local port_methods = {}
  PORT.__index = port_methods
  PORT.__tostring = function(self) return "stagehand.port (" .. (tostring(self.v):match(": (.*)$") or "?") .. ")" end
  PORT.__eq = function(a, b) return is_of(a, PORT) and is_of(b, PORT) and rawequal(a.v, b.v) end
  P.port_methods = port_methods

  --- A new port; `name` names it in the log.
  function P.port(name)
    if name ~= nil and type(name) ~= "string" then
      fail(2, "bad argument 'name' to port: expected a string or nil, got " .. got_of(name))
    end
    local p = setmetatable({ [MARK] = "port", v = new_channel(), c = new_channel(), w = new_channel(), name = name },
      PORT)
    known[p.v] = p
    return p
  end

  local function check_port(self, method, level)
    local bad = bad_self(self, PORT, "port:" .. method, "a port (stagehand.port())")
    if bad then fail(level + 1, bad) end
  end

  local function push_open(c, closed, v)
    if closed:getCount() > 0 then return false end
    c:push(v)
    return true
  end

  -- post, raising at `level` above post_at.
  local function post_at(self, level, n, v)
    check_port(self, "post", level)
    if n < 1 then fail(level, "bad argument #1 to 'post' (value expected)") end
    if v == nil then fail(level, "port:post: nil cannot be posted (a closed port answers nil)") end
    local why, _, cross, shared = check("v", false, 1, 1, v)
    if why then fail(level, "bad argument 'v' to port:post: " .. why) end
    local posted = self.v:performAtomic(push_open, self.c,
      shared and P.pack(v) or cross and { [MARK] = "wrap", v = v } or v)
    if posted then ring(self.w) end
    return posted
  end
  function port_methods.post(self, ...)
    local posted = post_at(self, 3, select("#", ...), (...))
    return posted
  end
  function port_methods._post(self, ...) -- (the game's side: through ports.lua's post, one call deeper)
    local posted = post_at(self, 4, select("#", ...), (...))
    return posted
  end

  local function unwrap(x)
    if type(x) ~= "table" then return x end
    local kind = rawget(x, MARK)
    if kind == "wrap" or kind == "graph" then return relink(x) end
    return x
  end

  -- The next value: true and it, or false and "empty" or "closed". (A
  -- closed port holds its closed flag's channel, which wakes whoever
  -- waits: each that takes it puts it back.)
  local function take(self, x)
    if x == nil then x = self.v:pop() end
    if x == nil then return false, self.c:getCount() > 0 and "closed" or "empty" end
    if rawequal(x, self.c) then
      self.v:push(x)
      return false, "closed"
    end
    return true, unwrap(x)
  end

  function port_methods.try_receive(self)
    check_port(self, "try_receive", 2)
    local ok, v = take(self)
    return ok, v
  end

  local function waiting_on(self)
    if self.name then return "port '" .. self.name .. "'" end
    return "a port (" .. (tostring(self.v):match(": (.*)$") or "?") .. ")"
  end

  -- Waits at most ms for a value (a worker's wait also ends when it is
  -- told to stop): the value, or nothing.
  local function receive_for(self, ms)
    if stopped() then return end
    local untl, named = now() + ms, false
    local x
    while true do
      local ok, v = take(self, x)
      if ok then
        if named then waiting(nil) end
        return v
      end
      local left = untl - now()
      if v == "closed" or left <= 0 or stopped() then break end -- (ms was checked: no NaN)
      if not named then
        waiting(waiting_on(self))
        named = true
      end
      x = self.v:demand(left / 1000 < SLICE and left / 1000 or SLICE)
    end
    if named then waiting(nil) end
  end

  local function check_ms(ms, method, level)
    if type(ms) ~= "number" or ms ~= ms or ms < 0 then
      fail(level + 1, "bad argument 'ms' to port:" .. method .. ": expected a number >= 0, got " .. got_of(ms))
    end
  end

  function port_methods.receive(self)
    check_port(self, "receive", 2)
    local v = receive_for(self, math.huge)
    return v
  end

  function port_methods.receive_within(self, ms)
    check_port(self, "receive_within", 2)
    check_ms(ms, "receive_within", 2)
    local v = receive_for(self, ms)
    return v
  end

  local function count(self)
    if self.c:getCount() > 0 then return 0 end
    return self.v:getCount()
  end

  -- fn(v) for each value queued when it began, for at most ms (at least
  -- one when any is queued). (Values posted meanwhile wait for the next.)
  local function drain(self, fn, ms, method)
    if type(fn) ~= "function" then
      fail(3, "bad argument 'fn' to port:" .. method .. ": expected a function, got " .. got_of(fn))
    end
    if method == "drain_for" then check_ms(ms, method, 3) else ms = math.huge end
    local untl, n, queued = now() + ms, 0, count(self)
    while n < queued and not (n > 0 and now() >= untl) do
      local ok, v = take(self)
      if not ok then break end
      fn(v)
      n = n + 1
    end
    return n
  end

  function port_methods.drain(self, fn)
    check_port(self, "drain", 2)
    local n = drain(self, fn, nil, "drain")
    return n
  end

  function port_methods.drain_for(self, fn, ms)
    check_port(self, "drain_for", 2)
    local n = drain(self, fn, ms, "drain_for")
    return n
  end

  local function shut(c, closed)
    c:clear()
    if closed:getCount() == 0 then closed:push(true) end
    c:push(closed) -- (what wakes every wait)
  end

  function port_methods.close(self)
    check_port(self, "close", 2)
    self.v:performAtomic(shut, self.c)
    ring(self.w)
  end

  function port_methods.closed(self)
    check_port(self, "closed", 2)
    return self.c:getCount() > 0
  end

  function port_methods.count(self)
    check_port(self, "count", 2)
    return count(self)
  end

  port_methods._watch, port_methods._unwatch = watch, unwatch

  ---------------------------------------------------------------------------
  -- Round barriers. The barrier's table holds the rounds begun and not yet
  -- over, each: count, op, arrived, complete, shares (by index, until
  -- complete), gone (participants that left before taking their answer)
  -- and bell, a channel of its own. The last arrival puts the answer in
  -- the bell once for each participant (the combined numbers, or true),
  -- and an abort puts false in every bell; a participant takes one and
  -- has left. So an arrival copies the table out and back once, and a wait
  -- takes one small value: nothing else goes through the barrier's lock.
  -- A round is over, and dropped by the next arrival, once it is complete
  -- and its bell holds no more answers than its gone participants left.

  local rounds_methods = {}
  ROUNDS.__index = rounds_methods
  ROUNDS.__tostring = function(self)
    return "stagehand.rounds (" .. (tostring(self.s):match(": (.*)$") or "?") .. ")"
  end
  ROUNDS.__eq = function(a, b) return is_of(a, ROUNDS) and is_of(b, ROUNDS) and rawequal(a.s, b.s) end
  P.rounds_methods = rounds_methods

  --- Round barriers for `participants` threads, each share `share_len` numbers.
  function P.rounds(participants, share_len)
    local b = setmetatable({ [MARK] = "rounds", s = new_channel(), a = new_channel(), w = new_channel(),
      n = participants, len = share_len or 0 }, ROUNDS)
    b.s:push({})
    known[b.s] = b
    return b
  end

  local function combine(r, n, len)
    local res, first = {}, true
    for i = 1, n do
      local s = r.shares[i]
      if s then
        for k = 1, len do
          local x = s[k]
          if first then res[k] = x
          elseif r.op == "sum" then res[k] = res[k] + x
          elseif r.op == "min" then res[k] = x < res[k] and x or res[k]
          else res[k] = x > res[k] and x or res[k] end
        end
        first = false
      end
    end
    r.shares = nil
    return res
  end

  local function over(r) return r.complete and r.bell:getCount() <= r.gone end

  local function arrive_in(c, aborted, rn, count_, op, index, share, n, len)
    if aborted:getCount() > 0 then return "closed" end
    local st = c:pop() or {}
    for k, r in each, st do
      if over(r) then st[k] = nil end -- (every participant has its answer, or has gone)
    end
    local r, rc = st[rn], "ok"
    if not r then
      r = { count = count_, op = op, arrived = 0, gone = 0, complete = false, shares = {}, bell = new_channel() }
      st[rn] = r
    elseif r.count ~= count_ or r.op ~= op or r.complete then
      rc = "inval" -- (another count or operation, or a round already complete)
    elseif op ~= "arrive" and r.shares[index] then
      rc = "state" -- (this index arrived already)
    end
    if rc == "ok" then
      if op ~= "arrive" then r.shares[index] = share end
      r.arrived = r.arrived + 1
      if r.arrived == r.count then
        local answer = op == "arrive" or combine(r, n, len)
        r.complete = true
        for _ = 1, r.count do r.bell:push(answer) end
      end
    end
    c:push(st)
    return rc, r.bell, r.complete
  end

  -- The arrival b:op(round, count[, index, share, out]) makes: "ok" and
  -- the round's bell, or "closed" when aborted; or nil and why an
  -- argument is bad.
  local function arrive(self, op, rn, count_, index, share, out)
    local n, len = self.n, self.len
    if type(rn) ~= "number" or rn ~= rn then
      return nil, "bad argument 'round' to b:" .. op .. ": expected a number, got " .. got_of(rn)
    end
    if type(count_) ~= "number" or not (count_ >= 1 and count_ <= n and floor(count_) == count_) then
      return nil, "bad argument 'count' to b:" .. op .. ": expected an integer from 1 to " .. n .. ", got "
        .. got_of(count_)
    end
    local copy
    if op ~= "arrive" then
      local ix = type(index) == "number" and index or 0
      if not (ix >= 1 and ix <= n and floor(ix) == ix) then
        return nil, "bad argument 'index' to b:" .. op .. ": expected an integer from 1 to " .. n .. ", got "
          .. got_of(index)
      end
      if type(out) ~= "table" then
        return nil, "bad argument 'out' to b:" .. op .. ": expected a table, got " .. type(out)
      end
      if type(share) ~= "table" then
        return nil, "bad argument 'share' to b:" .. op .. ": expected a table of " .. len .. " numbers, got "
          .. type(share)
      end
      copy = {}
      for i = 1, len do
        local x = rawget(share, i)
        if type(x) ~= "number" then
          return nil, "bad argument 'share' to b:" .. op .. ": share[" .. i .. "] is " .. type(x) .. ", not a number"
        end
        copy[i] = x
      end
    end
    local rc, bell, complete = self.s:performAtomic(arrive_in, self.a, rn, count_, op, index, copy, n, len)
    if rc == "inval" then
      return nil, "b:" .. op .. ": round " .. num(rn) .. " was begun with another count or operation, or is complete"
    end
    if rc == "state" then
      return nil, "b:" .. op .. ": index " .. num(index) .. " arrived at round " .. num(rn) .. " already"
    end
    if complete then ring(self.w) end
    return rc, bell
  end

  -- What an answer taken from a bell says: "done" (out written) or
  -- "aborted" (an abort's false, or an answer taken once the barrier was
  -- aborted: the abort wins, as on the native core).
  local function answer(self, got, out)
    if got == false or self.a:getCount() > 0 then return "aborted" end
    if type(got) == "table" and type(out) == "table" then
      for i = 1, self.len do out[i] = got[i] end
    end
    return "done"
  end

  -- A participant leaving before it took its answer (its job cancelled,
  -- its worker stopped): the round counts it as gone.
  local function gone_in(c, rn, bell)
    local st = c:pop() or {}
    local r = st[rn]
    if r and rawequal(r.bell, bell) then r.gone = r.gone + 1 end
    c:push(st)
  end

  -- b:op as a worker waits: blocking, until the round is complete, the
  -- barrier aborted, or the worker told to stop.
  local function blocking(self, op, rn, count_, index, share, out)
    local bad = bad_self(self, ROUNDS, "b:" .. op, "a round barrier (stagehand.rounds())")
    if bad then fail(3, bad) end
    if stopped() then return false end
    local rc, bell = arrive(self, op, rn, count_, index, share, out)
    if not rc then fail(3, bell) end
    if rc == "closed" then return false end
    local got = bell:pop()
    if got == nil then
      waiting("a round barrier")
      repeat
        got = bell:demand(SLICE)
      until got ~= nil or stopped()
      waiting(nil)
      if got == nil then
        self.s:performAtomic(gone_in, rn, bell)
        return false
      end
    end
    return answer(self, got, out) == "done"
  end

  function rounds_methods.arrive(self, rn, count_)
    local ok = blocking(self, "arrive", rn, count_)
    return ok
  end
  for _, op in ipairs { "sum", "min", "max" } do
    rounds_methods[op] = function(self, rn, count_, index, share, out)
      local ok = blocking(self, op, rn, count_, index, share, out) -- (not a tail call: errors name the caller's line)
      return ok
    end
  end

  local function abort_in(c, aborted, n)
    if aborted:getCount() == 0 then aborted:push(true) end
    local st = c:pop() or {}
    for _, r in each, st do
      if not r.complete then
        for _ = 1, n do r.bell:push(false) end
      end
    end
    c:push({})
  end

  function rounds_methods.abort(self)
    local bad = bad_self(self, ROUNDS, "b:abort", "a round barrier (stagehand.rounds())")
    if bad then fail(2, bad) end
    self.s:performAtomic(abort_in, self.a, self.n)
    ring(self.w)
  end

  function rounds_methods.aborted(self)
    local bad = bad_self(self, ROUNDS, "b:aborted", "a round barrier (stagehand.rounds())")
    if bad then fail(2, bad) end
    return self.a:getCount() > 0
  end

  -- The game's side's halves (threads/ports.lua): _begin arrives without
  -- waiting (true; false when aborted), raising without a position (the
  -- caller gives it the game's line); _poll answers "done" (out written),
  -- "wait" or "aborted"; _leave, called right after a _poll that did not
  -- answer "wait", or when the wait is abandoned. The bells of this
  -- state's arrivals wait in `bells` (by barrier, then round: one bell
  -- for all of this state's participants in a round), with how many of
  -- them have not yet taken an answer.
  local bells = setmetatable({}, { __mode = "k" })
  local took = false -- (the last _poll took an answer: the _leave after it has nothing to do)

  function rounds_methods._begin(self, rn, count_, index, share, out, op)
    local rc, bell = arrive(self, op, rn, count_, index, share, out)
    if not rc then error(bell, 0) end
    if rc ~= "ok" then return false end
    local mine = bells[self]
    if not mine then mine = {}; bells[self] = mine end
    local at = mine[rn]
    if at then at[2] = at[2] + 1 else mine[rn] = { bell, 1 } end
    return true
  end

  -- (one of this state's participants in round rn has its answer or has gone)
  local function forget(self, rn)
    local mine = bells[self]
    local at = mine and mine[rn]
    if not at then return nil end
    at[2] = at[2] - 1
    if at[2] <= 0 then mine[rn] = nil end
    return at[1]
  end

  function rounds_methods._poll(self, rn, out)
    took = false
    local mine = bells[self]
    local at = mine and mine[rn]
    local got = at and at[1]:pop()
    if got == nil then
      if at and self.a:getCount() == 0 then return "wait" end
      return "aborted"
    end
    took = true
    return answer(self, got, out)
  end

  function rounds_methods._leave(self, rn)
    local bell = forget(self, rn)
    if took then
      took = false
    elseif bell and self.a:getCount() == 0 then
      self.s:performAtomic(gone_in, rn, bell)
    end
  end
  function rounds_methods._info(self) return self.n, self.len end
  rounds_methods._watch, rounds_methods._unwatch = watch, unwatch

  P.MARK = MARK
  return P
end

M.build = build
-- (what a worker's state loads: `build` with no upvalue, so its bytes
-- stand alone; Lua 5.2 and later give every function _ENV, which load
-- sets again)
do
  local up = debug.getupvalue(build, 1)
  assert(up == nil or up == "_ENV", "love_ports.build holds an upvalue")
end
M.bytes = string.dump(build)

return M
