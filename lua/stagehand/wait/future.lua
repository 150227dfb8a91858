-- Futures: how a leaf event (a thread's reply, a luv callback, an engine's
-- "texture uploaded") ends work.
local errors = require "stagehand.engine.errors"
local settle = require "stagehand.engine.settle"
local options = require "stagehand.engine.options"

---@class stagehand.Future
---@field label string
local Future = settle.extend({})

local function check_self(self, method)
  if getmetatable(self) ~= Future then options.bad_self("f:" .. method, "a Future", self, 3) end
end

--- "pending", "done" or "failed".
---@return string
function Future:state()
  check_self(self, "state")
  return self._st or "pending"
end

--- Settles the future with values; a second settle is ignored (returns false).
---@param ... any the values its awaiters receive
---@return boolean settled
function Future:resolve(...)
  check_self(self, "resolve")
  return settle.settle(self, "done", settle.pack(...))
end

--- Fails the future with `err`; awaiting it raises `err` as given.
---@param err any
---@return boolean settled
function Future:reject(err)
  check_self(self, "reject")
  return settle.settle(self, "failed", err)
end

function Future:_describe() return "future '" .. self.label .. "'" end
-- (as a Handle shows itself, in messages and when printed)
Future.__tostring = function(f) return "stagehand.Future(" .. f.label .. ", " .. f:state() .. ")" end

local M = { Future = Future }

function M.new(label)
  if label == nil then label = "future" end
  if type(label) ~= "string" or label == "" then
    error("bad argument 'label' to future: expected a non-empty string, got "
      .. (label == "" and '""' or type(label)), 2)
  end
  -- Every field it will get, up front: no rehash while it is awaited and
  -- settled, which is most of a short-lived future's life.
  return setmetatable({ label = label, _st = false, _v = false, _w1 = false }, Future)
end

M.errors = errors
return M
