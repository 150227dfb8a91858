local signal = require "stagehand.engine.signal"
local errors = require "stagehand.engine.errors"
local E = require "stagehand.engine.engine"

local M = {}

-- Timeouts (orch:timeout): signals that abort at a time of this
-- orchestrator's clock. o.timeouts is a binary heap of {due, seq, sig, ms},
-- earliest due first and, among equal ones, the first made (seq). (A list
-- kept sorted cost a walk per timeout made out of order and a shift per
-- one fired: 50,000 coming due in one step held that step for 1.5 s.)

local function before(a, b)
  return a[1] < b[1] or (a[1] == b[1] and a[2] < b[2])
end

local function sift_up(h, i)
  local x = h[i]
  while i > 1 do
    local p = (i - i % 2) / 2
    if not before(x, h[p]) then break end
    h[i] = h[p]
    i = p
  end
  h[i] = x
end

local function sift_down(h, i, n)
  local x = h[i]
  while true do
    local c = 2 * i
    if c > n then break end
    if c < n and before(h[c + 1], h[c]) then c = c + 1 end
    if not before(h[c], x) then break end
    h[i] = h[c]
    i = c
  end
  h[i] = x
end

function M.add(o, due, sig, ms)
  local h = o.timeouts
  local seq = o.timeout_seq + 1
  o.timeout_seq = seq
  local n = #h + 1
  h[n] = { due, seq, sig, ms }
  sift_up(h, n)
end

local function pop(h)
  local n = #h
  local top = h[1]
  h[1] = h[n]
  h[n] = nil
  if n > 2 then sift_down(h, 1, n - 1) end
  return top
end

--- Aborts every timeout due by `now`, earliest first (and one made by an
--- abort handler meanwhile, if it is due too). Each leaves the heap only
--- once its Error is made (popping needs no memory; the abort, once
--- begun, is finished by the next step should memory run out in it), so
--- memory running out loses no timeout: the next step fires it.
function M.fire(o, now)
  local h = o.timeouts
  while h[1] ~= nil and h[1][1] <= now do
    local t = h[1]
    local err = errors.new("timeout", "orch:timeout", "timed out after " .. errors.ms(t[4]) .. " ms", { ms = t[4] })
    pop(h)
    signal.abort(t[3], err)
  end
end

-- The earliest due time of a timeout something listens to (a run's signal,
-- an abortable), or nil: one nobody listens to keeps no host awake. (The
-- earliest is listened to, mostly; otherwise every one is looked at.)
function M.next_due(o)
  local h = o.timeouts
  local top = h[1]
  if top[3]._ls ~= nil then return top[1] end
  local due
  for i = 2, #h do
    local t = h[i]
    if t[3]._ls ~= nil and (due == nil or t[1] < due) then due = t[1] end
  end
  return due
end

E.on("step_began", function(o, now)
  local top = o.timeouts[1]
  if top ~= nil and top[1] <= now then M.fire(o, now) end
end)
E.on("next_due", function(o)
  if o.timeouts[1] == nil then return nil end
  return M.next_due(o)
end)

return M
