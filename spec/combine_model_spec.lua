-- stagehand.all, all_settled, any, race and abortable, checked against a model that
-- knows nothing of stagehand's insides. Seeded scenes build groups over
-- futures, jobs' Handles and each other (a part may sit in several groups,
-- and groups nest), some of them abortable by signals; then, one at a time,
-- futures settle (done or failed), jobs finish, fail or are cancelled,
-- signals abort, and more groups are made over what is there, ended or
-- not. After each, every group must be as the model says:
-- - all: pending; or done with each part's first value, in order; or ended
--   as its first part to end otherwise did (that part's state and error;
--   made over parts that had failed already, the first of them in its list);
-- - all_settled: pending until every part has ended, then done with a
--   {state, value, error} per part;
-- - abortable: its part's outcome, or cancelled with the signal's reason
--   if the signal aborted first (or had aborted when it was made);
-- - race: as its first part to end ended (made over parts that had ended
--   already, the first of them in its list);
-- - any: done with the first part to end done (made over parts that had
--   ended already, the first of them done in its list), or, once every
--   part has ended otherwise, failed with an Error listing each part's.
-- (Groups over futures, jobs, all and all_settled: race and any are never
-- parts themselves, nor are abortables parts of them.)
-- Parts that end in the same moment (one future under several groups, or
-- a group that an abort ended beside an abortable on the same signal) may
-- be heard in any order: a group's first failure is then any of them, and
-- an abortable may end either way.
-- CHAOS_SEEDS=n runs more, CHAOS_SEED=s replays one (spec/seeded.lua).
local stagehand = require "stagehand"
local T = require "stagehand.testing"
local seeded = require "spec.seeded"

local function scene(seed, tally)
  local r = seeded.rng(seed)
  local orch = T.new { stall_ms = 1e12, log = function() end }
  local nodes, handles, ctls = {}, {}, {}
  local moment = 0 -- which event we are in: parts that end in one may be heard in any order
  local function fail(why) error(("seed %d, event %d: %s"):format(seed, moment, why)) end

  -- The model: each node's outcome {state, value, err, at = moment}, or nil.
  local function first_value(node) -- what a part contributes to its group, once done
    return node.out.value
  end
  -- A part's end state ("?" for a group whose first failure is one of a
  -- tie, known once checked: a failure all the same).
  local function state_of(p)
    if p.out.from then return state_of(p.out.from) end
    return p.out.state
  end
  -- Of parts that have ended, those that ended first, in one moment.
  local function first_to_end(ended)
    local first = ended[1].out.at
    for _, p in ipairs(ended) do first = math.min(first, p.out.at) end
    local ties = {}
    for _, p in ipairs(ended) do
      if p.out.at == first then ties[#ties + 1] = p end
    end
    return ties
  end
  local function evaluate(node)
    if node.out then return end
    local k = node.kind
    if k == "all" then
      local failed, done = {}, 0
      for _, p in ipairs(node.parts) do
        if p.out and state_of(p) ~= "done" then failed[#failed + 1] = p end
        if p.out and state_of(p) == "done" then done = done + 1 end
      end
      if failed[1] and node.made == moment then
        -- made over parts of which some failed already: the first of those
        -- in the list (as Promise.all hears settled parts, in order)
        node.out = { from = failed[1], at = moment }
      elseif failed[1] then
        -- the first to end otherwise; those that ended in the same moment tie
        node.out = { state = "?", ties = first_to_end(failed), at = moment }
      elseif done == #node.parts then
        node.out = { state = "done", at = moment }
      end
    elseif k == "all_settled" then
      for _, p in ipairs(node.parts) do
        if not p.out then return end
      end
      node.out = { state = "done", settled = true, at = moment }
    elseif k == "race" or k == "any" then
      -- (the parts that count: any part for race, the done ones for any)
      local ended, all_ended = {}, true
      for _, p in ipairs(node.parts) do
        if not p.out then
          all_ended = false
        elseif k == "race" or state_of(p) == "done" then
          ended[#ended + 1] = p
        end
      end
      if ended[1] and node.made == moment then
        node.out = { from = ended[1], at = moment }
      elseif ended[1] then
        local ties = first_to_end(ended)
        node.out = ties[2] and { either = ties, at = moment } or { from = ties[1], at = moment }
      elseif k == "any" and all_ended then
        node.out = { state = "failed", every = true, at = moment }
      end
    elseif k == "abortable" then
      local p = node.parts[1]
      -- (a signal aborted already when it was made wins, as it would over a
      -- part that ended later)
      if node.ctl.signal.aborted and p.out and p.out.at == node.aborted_at then
        -- the abort itself ended the part (through a group beside it on the
        -- same signal): either may be heard first
        node.out = { from = p, or_cancelled = node.ctl.signal.reason, at = moment }
      elseif node.ctl.signal.aborted and not (p.out and p.out.at < node.aborted_at) then
        node.out = { state = "cancelled", err = node.ctl.signal.reason, at = moment }
      elseif p.out then
        node.out = { from = p, at = moment } -- (its part's end: read once the part is checked)
      end
    end
  end
  -- What the group says, against what the model says.
  local function check(node)
    local st, v = node.obj:state(), select(2, node.obj:result())
    local out = node.out
    if not out then
      if st ~= "pending" then fail(node.name .. " ended " .. st .. "; the model has it pending") end
      return
    end
    if out.from then -- (parts come before the groups over them: checked already)
      local p = out.from
      out.state, out.value, out.err, out.from = p.out.state, p.out.value, p.out.err, nil
      if out.or_cancelled ~= nil and st == "cancelled" and v == out.or_cancelled then
        out.state, out.value, out.err = "cancelled", nil, v
      end
      out.or_cancelled = nil
    end
    if out.either then -- ended as one of the parts that ended first, in one moment
      for _, p in ipairs(out.either) do
        local po = p.out
        if st == po.state and (st == "done" and v == po.value or st ~= "done" and v == po.err) then
          out.state, out.value, out.err, out.either = po.state, po.value, po.err, nil
          return
        end
      end
      fail(node.name .. " ended " .. st .. " " .. tostring(v) .. ", as none of the parts that ended first")
    end
    if out.every then -- every part failed: an Error listing each part's, in order
      if st ~= "failed" or not stagehand.is_error(v) or type(v.errors) ~= "table" then
        fail(node.name .. " is " .. st .. ", not failed with every part's error")
      end
      for i, p in ipairs(node.parts) do
        if v.errors[i] ~= p.out.err then
          fail(node.name .. "'s error " .. i .. " is " .. tostring(v.errors[i]) .. ", not " .. tostring(p.out.err))
        end
      end
      out.err, out.every = v, nil
      return
    end
    if out.ties then -- ended as one of its first failures
      for _, p in ipairs(out.ties) do
        if st == p.out.state and v == p.out.err then
          out.state, out.err, out.ties = st, v, nil
          return
        end
      end
      fail(node.name .. " ended " .. st .. " " .. tostring(v) .. ", as none of the parts that failed first")
    end
    if st ~= out.state then fail(node.name .. " is " .. st .. ", not " .. out.state) end
    if st ~= "done" then
      if v ~= out.err then fail(node.name .. " raised " .. tostring(v) .. ", not " .. tostring(out.err)) end
      return
    end
    if node.kind == "all" then
      for i, p in ipairs(node.parts) do
        local want = first_value(p)
        if v[i] ~= want then fail(node.name .. "'s value " .. i .. " is " .. tostring(v[i]) .. ", not " .. tostring(want)) end
      end
      if #v ~= #node.parts then fail(node.name .. " has " .. #v .. " values, not " .. #node.parts) end
      out.value = v
    elseif node.kind == "all_settled" then
      for i, p in ipairs(node.parts) do
        local e = v[i]
        if not e or e.state ~= p.out.state or e.value ~= (p.out.state == "done" and p.out.value or nil)
          or e.error ~= p.out.err then
          fail(node.name .. "'s entry " .. i .. " is not its part's end (" .. p.out.state .. ")")
        end
      end
      out.value = v
    elseif v ~= out.value then
      fail(node.name .. "'s value is " .. tostring(v) .. ", not " .. tostring(out.value))
    end
  end

  -- The leaves: futures, and jobs that await a future of their own, then
  -- return a value or raise.
  local function add(node)
    nodes[#nodes + 1] = node
    node.name = node.kind .. " " .. #nodes
    return node
  end
  for i = 1, 4 + r(5) do
    add({ kind = "future", obj = stagehand.future("f" .. i), value = "v" .. i })
  end
  for i = 1, 1 + r(3) do
    local gate = stagehand.future()
    local raises = r(3) == 1
    local node = add({ kind = "job", gate = gate, value = "j" .. i, raises = raises })
    node.obj = orch:run("job " .. i, function(job)
      job:await(gate)
      if raises then error("job " .. i .. " broke", 0) end
      return "j" .. i
    end)
    handles[#handles + 1] = node.obj
  end
  for i = 1, 2 do ctls[i] = stagehand.controller() end
  -- A group over what exists so far.
  local SIMPLE = { future = true, job = true, all = true, all_settled = true }
  local function make_group()
    local x = r(7)
    if x >= 6 then
      local pool = {}
      for _, n in ipairs(nodes) do
        if SIMPLE[n.kind] then pool[#pool + 1] = n end
      end
      local parts, objs = {}, {}
      for k = 1, r(4) do
        parts[k] = pool[r(#pool)]
        objs[k] = parts[k].obj
      end
      local kind = x == 6 and "race" or "any"
      add({ kind = kind, obj = stagehand[kind](objs), parts = parts, made = moment })
    elseif x <= 3 then
      local parts, objs = {}, {}
      for k = 1, r(5) - 1 do
        local p = nodes[r(#nodes)]
        while not SIMPLE[p.kind] and p.kind ~= "abortable" do p = nodes[r(#nodes)] end
        parts[k] = p
        objs[k] = parts[k].obj
      end
      local kind = x <= 2 and "all" or "all_settled"
      add({ kind = kind, obj = stagehand[kind](objs), parts = parts, made = moment })
    else
      local p = nodes[r(#nodes)]
      while not SIMPLE[p.kind] and p.kind ~= "abortable" do p = nodes[r(#nodes)] end
      local ctl = ctls[r(2)]
      local node = add({ kind = "abortable", parts = { p }, ctl = ctl, made = moment,
        obj = stagehand.abortable(p.obj, ctl.signal) })
      node.aborted_at = ctl.signal.aborted and -math.huge or math.huge
    end
  end
  for _ = 1, 5 + r(6) do make_group() end
  local function settle_model()
    for _, node in ipairs(nodes) do evaluate(node) end
    for _, node in ipairs(nodes) do
      if node.parts then check(node) end -- (groups: the leaves are the events)
    end
  end
  settle_model()

  -- One event at a time.
  local function leaf_ends(node, state, value, err)
    node.out = { state = state, value = value, err = err, at = moment }
  end
  for _ = 1, 30 do
    moment = moment + 1
    local x = r(10)
    local open = {}
    for _, node in ipairs(nodes) do
      if (node.kind == "future" or node.kind == "job") and not node.out then open[#open + 1] = node end
    end
    local node = open[r(#open + 1)]
    if x == 10 then -- a group is made now, over parts some of which may have ended
      make_group()
    elseif x <= 2 then -- a signal aborts
      local i = r(2)
      local ctl = ctls[i]
      if not ctl.signal.aborted then
        ctl.at = moment
        ctl:abort("aborted " .. i)
        for _, n in ipairs(nodes) do
          if n.ctl == ctl then n.aborted_at = moment end
        end
      end
    elseif node and node.kind == "future" then
      if r(3) == 1 then
        local err = "broke " .. node.name
        node.obj:reject(err)
        leaf_ends(node, "failed", nil, err)
      else
        node.obj:resolve(node.value)
        leaf_ends(node, "done", node.value)
      end
    elseif node then -- a job: it finishes, or fails, in the next step; or it is cancelled
      if r(4) == 1 then
        node.obj:cancel("not needed")
      else
        node.gate:resolve()
        orch:step()
      end
      local st, v = node.obj:result()
      if node.raises and st == "failed" or not node.raises and st == "done" or st == "cancelled" then
        leaf_ends(node, st, st == "done" and v or nil, st ~= "done" and v or nil)
      else
        fail(node.name .. " ended " .. st)
      end
    end
    settle_model()
  end
  for _, node in ipairs(nodes) do
    tally[node.kind] = (tally[node.kind] or 0) + 1
    if node.out and node.kind ~= "future" and node.kind ~= "job" then
      local key = "ended " .. node.out.state
      tally[key] = (tally[key] or 0) + 1
    end
  end
  -- The rest let go, so every job ends.
  for _, node in ipairs(nodes) do
    if node.kind == "job" and not node.out then node.gate:resolve() end
  end
  orch:step()
  -- (the groups' ends are recorded with the jobs': the same on every runtime)
  for _, node in ipairs(nodes) do
    if node.parts then handles[#handles + 1] = node.obj end
  end
  return orch, handles
end

describe("stagehand.all, all_settled, any, race and abortable", function()
  local which, seeds = seeded.seeds()
  it("end as a model of their parts says, nested and shared, as parts end one at a time" .. which, function()
    seeded.run_scenes("groups", seeds, scene, {}, "GROUP_TALLY")
  end)
end)
