-- Awaitables made of others: all, all_settled, abortable.
local settle = require "stagehand.settle"
local signal = require "stagehand.signal"
local jobm = require "stagehand.job"
local is_job = require("stagehand.fields").is_job

local M = {}

local Group = settle.extend({})
function Group:state() return self._st or "pending" end
function Group:_describe() return self.what end
-- While each part still running follows a job, so does the group: a job
-- awaiting it then stalls only if one of those jobs does.
function Group:_follows()
  if self._st then return nil end
  local list = {}
  for i = 1, #self.parts do
    local p = self.parts[i]
    if not p._st then
      local f = p:_follows()
      if f == nil then return nil end
      if is_job(f) then
        list[#list + 1] = f
      else
        for j = 1, #f do list[#list + 1] = f[j] end
      end
    end
  end
  return list
end

local function parts_of(list, name)
  if type(list) ~= "table" then
    error("bad argument 'list' to " .. name .. ": expected a list of awaitables, got " .. type(list), 3)
  end
  local parts = {}
  for i = 1, #list do
    local s = jobm.Job.as_settle(list[i])
    if s == nil then
      error("bad argument 'list' to " .. name .. ": item " .. i .. " is not awaitable (" .. type(list[i]) .. ")", 3)
    end
    s._seen = true
    parts[i] = s
  end
  return parts
end

--- An awaitable of a list of each one's first value, or the first failure.
function M.all(list)
  local parts = parts_of(list, "all")
  local g = setmetatable({ parts = parts, what = "all of " .. #parts }, Group)
  local n, left, values = #parts, #parts, {}
  if n == 0 then
    settle.settle(g, "done", settle.pack(values))
    return g
  end
  for i = 1, n do
    parts[i]:on_end(function(st, ...)
      if st == "done" then
        values[i] = (...)
        left = left - 1
        if left == 0 then settle.settle(g, "done", settle.pack(values)) end
      else
        settle.settle(g, st, (...))
      end
    end)
  end
  return g
end

--- An awaitable of a list of {state =, value =, error =}; it never fails.
function M.all_settled(list)
  local parts = parts_of(list, "all_settled")
  local g = setmetatable({ parts = parts, what = "all settled of " .. #parts }, Group)
  local n, left, out = #parts, #parts, {}
  if n == 0 then
    settle.settle(g, "done", settle.pack(out))
    return g
  end
  for i = 1, n do
    parts[i]:on_end(function(st, ...)
      if st == "done" then
        out[i] = { state = st, value = (...) }
      else
        out[i] = { state = st, error = (...) }
      end
      left = left - 1
      if left == 0 then settle.settle(g, "done", settle.pack(out)) end
    end)
  end
  return g
end

--- Ends with `awaitable`'s outcome, or fails with the signal's reason if it
--- aborts first.
function M.abortable(awaitable, sig)
  local part = jobm.Job.as_settle(awaitable)
  if part == nil then
    error("bad argument 'awaitable' to abortable: expected a Handle, Future or awaitable, got " .. type(awaitable), 2)
  end
  if not signal.is_signal(sig) then
    error("bad argument 'signal' to abortable: expected a Signal, got " .. type(sig), 2)
  end
  part._seen = true
  local g = setmetatable({ parts = { part }, what = "abortable " .. part:_describe() }, Group)
  local unsub = sig:on_abort(function(reason) settle.settle(g, "cancelled", reason) end)
  if not g._st then
    part:on_end(function(st, ...)
      unsub()
      if st == "done" then
        settle.settle(g, "done", settle.pack(...))
      else
        settle.settle(g, st, (...))
      end
    end)
  end
  return g
end

return M
