-- stagehand.Error: how a job's end other than `done` reaches its waiters.
local M = {}

---@class stagehand.Error
---@field kind "failed"|"stalled"|"cancelled"|"cycle"
---@field label string      label of the job (or future) that ended
---@field message string    one readable line
---@field cause any         what `work` raised (failed)
---@field reason any        the abort reason (cancelled)
---@field missing string[]? a stalled barrier's missing keys
---@field traceback string? where a failure was raised
local Error = {}
Error.__index = Error
Error.__tostring = function(e) return e.message end
M.Error = Error

local KINDS = { failed = true, stalled = true, cancelled = true, cycle = true }

--- tostring of a value the game handed in (what work raised, an abort
--- reason, what a priority function returned) that cannot raise: a
--- __tostring that raises, or returns something other than a string, is
--- described instead. A message is made in the middle of ending a job,
--- where a raise would leave it half ended.
local function show(v)
  local ok, s = pcall(tostring, v)
  if ok and type(s) == "string" then return s end
  return "(a " .. type(v) .. " whose __tostring " .. (ok and "returned a " .. type(s) or "raised") .. ")"
end
M.show = show

-- (find and sub, not gsub: LuaJIT compiles those two, and every cancel
-- and failure makes a message.)
local function one_line(v)
  local s = show(v)
  local nl = s:find("\n", 1, true)
  if nl then return s:sub(1, nl - 1) end
  return s
end
M.one_line = one_line

-- The message of an Error quoted in another's: a failure down a chain of
-- awaits quotes the one below it, so without a bound a chain of n links
-- made messages of O(n) each (O(n^2) in all). A long one keeps its start
-- (the nearest links) and its end (the first cause).
local MAX_QUOTE = 600
local function quoted(e)
  local s = e.message
  if #s <= MAX_QUOTE then return s end
  return s:sub(1, 200) .. " ... " .. s:sub(-(MAX_QUOTE - 205))
end
M.quoted = quoted

--- A time or duration in ms as dump and report show it, the same text on
--- every runtime: whole numbers in full (1234567, not %g's 1.23457e+06,
--- nor Lua 5.4's 1234567.0), others to a tenth of a ms; past 10^15 (a
--- sleep of 1e300 ms) in %g's short form.
function M.ms(v)
  if v ~= v or v >= 1e15 or v <= -1e15 then return string.format("%g", v) end
  local s = string.format("%.1f", v)
  return (s:gsub("%.0$", ""))
end

--- Formats a duration in ms as the log shows it: 20000 -> "20 s", 1500 -> "1.5 s".
function M.seconds(ms)
  return string.format("%g s", ms / 1000)
end

function M.new(kind, label, message, fields)
  assert(KINDS[kind], "unknown error kind")
  local e = fields or {}
  e.kind, e.label, e.message = kind, label, message
  return setmetatable(e, Error)
end

function M.failed(label, cause, traceback)
  local what
  if getmetatable(cause) == Error then what = quoted(cause) else what = one_line(cause) end
  return M.new("failed", label, label .. " failed: " .. what,
    { cause = cause, traceback = traceback })
end

function M.stalled(label, stall_ms)
  return M.new("stalled", label, label .. " made no progress for " .. M.seconds(stall_ms) .. ".")
end

function M.cancelled(label, reason)
  local msg = label .. " was cancelled"
  if reason ~= nil then
    if getmetatable(reason) == Error then
      msg = msg .. ": " .. quoted(reason)
    else
      msg = msg .. ": " .. one_line(reason)
    end
  end
  return M.new("cancelled", label, msg, { reason = reason })
end

--- True when `e` is a stagehand.Error (of `kind`, when given).
---@param e any
---@param kind? string
---@return boolean
function M.is_error(e, kind)
  if getmetatable(e) ~= Error then return false end
  return kind == nil or e.kind == kind
end

return M
