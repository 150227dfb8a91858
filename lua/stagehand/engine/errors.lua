-- stagehand.Error: how a job's end other than `done` reaches its waiters.
local M = {}

---@class stagehand.Error
---@field kind "failed"|"stalled"|"cancelled"|"cycle"|"timeout"
---@field label string      label of the job (or future) that ended
---@field message string    one readable line
---@field cause any         what `work` raised (failed)
---@field reason any        the abort reason (cancelled)
---@field missing string[]? a stalled barrier's missing keys
---@field errors stagehand.Error[]? each part's error, when stagehand.any failed
---@field traceback string? where a failure was raised
local Error = {}
Error.__index = Error
Error.__tostring = function(e) return e.message end
M.Error = Error

local KINDS = { failed = true, stalled = true, cancelled = true, cycle = true, timeout = true }

-- A string as a message shows it: quoted, on one line (a newline or a
-- control byte written as \n, \r, \t or \ddd), and cut after `max`
-- bytes (at a character's start) with how long it was: a 10 MB string
-- given where a name belongs makes a one-line message, not a 10 MB one.
local ESC = { ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t", ["\\"] = "\\\\", ['"'] = '\\"' }
local function quote(str, max)
  local cut = nil
  if #str > max then
    local n = max - 3
    -- (not inside a UTF-8 character: back to the byte that starts it)
    while n > 0 and str:byte(n + 1) and str:byte(n + 1) >= 0x80 and str:byte(n + 1) < 0xC0 do n = n - 1 end
    cut, str = #str, str:sub(1, n)
  end
  local q = '"' .. str:gsub('[%c\\"]', function(c) return ESC[c] or string.format("\\%03d", c:byte()) end) .. '"'
  return cut and q .. "... (" .. cut .. " bytes)" or q
end
M.quote = quote

--- tostring of a value the game handed in (what work raised, an abort
--- reason, what a priority function returned) that cannot raise: a
--- __tostring that raises, or returns something other than a string, is
--- described instead. A message is made in the middle of ending a job,
--- where a raise would leave it half ended.
local function show(v)
  if v ~= v then return "nan" end -- (Lua 5.4 on Linux prints 0/0 as "-nan", LuaJIT as "nan")
  local ok, s = pcall(tostring, v)
  if ok and type(s) == "string" then return s end
  return "(a " .. type(v) .. " whose __tostring " .. (ok and "returned a " .. type(s) or "raised") .. ")"
end
M.show = show

-- A short, stable text of a value's fields: `{code = 42, path = "a.png"}`,
-- the first six keys in sorted order. (Sorted, since pairs' order changes
-- from run to run on Lua 5.4.)
local function fields_of(t)
  local ks, n = {}, 0
  local each = require("stagehand.core.compat").each
  for k in each, t do
    n = n + 1
    ks[n] = k
  end
  table.sort(ks, function(a, b)
    local ta, tb = type(a), type(b)
    if ta ~= tb then return ta < tb end
    if ta == "string" or ta == "number" then return a < b end
    return false
  end)
  local out = {}
  for i = 1, math.min(n, 6) do
    local k, v = ks[i], rawget(t, ks[i])
    local ks_ = type(k) == "string" and k:match("^[%a_][%w_]*$") and k or "[" .. show(k) .. "]"
    local vs = type(v) == "string" and quote(v, 40)
      or (type(v) == "table" and "{...}") or show(v)
    out[i] = ks_ .. " = " .. vs
  end
  if n > 6 then out[#out + 1] = "... (" .. (n - 6) .. " more)" end
  return "{" .. table.concat(out, ", ") .. "}"
end

--- What a job raised, as one readable text: a string as it is; a table
--- with a string `message` field, or a __tostring of its own, as that says;
--- any other table as "a table {k = v, ...}"; other values by type.
function M.describe_raised(v)
  local tv = type(v)
  if tv == "string" then return v end
  if tv == "table" then
    local mt = getmetatable(v)
    if type(mt) == "table" and rawget(mt, "__tostring") ~= nil then return show(v) end
    local msg = rawget(v, "message")
    if type(msg) == "string" then return msg end
    return "a table " .. fields_of(v)
  end
  if tv == "number" or tv == "boolean" or tv == "nil" then return "a " .. tv .. " (" .. show(v) .. ")" end
  return "a " .. tv
end

-- A value's first line. A first line that ends in a colon announces a list
-- (Lua's "module 'x' not found:" and the places require looked): the list
-- comes onto the line, its lines joined by "; " and cut after the last
-- whole item within LIST_MAX bytes, rather than a message that stops at
-- "not found:". (The cause keeps every line.) (find and sub, not gsub, on
-- the common paths: LuaJIT compiles those two, and every cancel and
-- failure makes a message.)
local LIST_MAX = 400
local function one_line(v)
  local s = show(v)
  local nl = s:find("\n", 1, true)
  if not nl then return s end
  local first = s:sub(1, nl - 1)
  if s:byte(nl - 1) ~= 58 then return first end -- (58: ":")
  -- (at most twice LIST_MAX of it is read: a cause of megabytes costs no more)
  local more = #s - nl > 2 * LIST_MAX
  local list = s:sub(nl + 1, nl + 2 * LIST_MAX):gsub("^%s+", ""):gsub("%s*\n%s*", "; "):gsub("[%s;]+$", "")
  if list == "" and not more then return first end
  if more or #list > LIST_MAX then -- (cut before the last "; " that fits, if any)
    list = (list:sub(1, LIST_MAX + 1):match("^(.*); ") or list:sub(1, LIST_MAX)) .. "; ..."
  end
  return first .. " " .. list
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
  if getmetatable(cause) == Error then
    what = quoted(cause)
  elseif type(cause) == "string" then
    what = one_line(cause)
  else
    what = one_line(M.describe_raised(cause))
  end
  return M.new("failed", label, label .. " failed: " .. what,
    { cause = cause, traceback = traceback })
end

function M.stalled(label, stall_ms)
  return M.new("stalled", label, label .. " made no progress for " .. M.seconds(stall_ms) .. ".")
end

-- Whether a frame's source is one of stagehand's own files.
local function ours(src)
  return src:find("stagehand[/\\][%w_/\\]*%.lua$") ~= nil
end

--- "file:line" of the game's code that called into stagehand: the first
--- frame from `level` up (as for error) that is not stagehand's own. A
--- call made as a tail call (`return job:await(x)`) left no frame of its
--- caller; then the job's work function, where it was defined, is named.
function M.where(level)
  level = (level or 1) + 1
  for l = level, level + 40 do
    local info = debug.getinfo(l, "Sln")
    if info == nil then return nil end
    if info.what ~= "C" and info.what ~= "tail" and not ours(info.source) then
      return info.short_src .. ":" .. (info.currentline or "?")
    end
    if ours(info.source) and debug.getinfo(l + 1, "S") == nil then
      -- The bottom of a job's coroutine: the game's frame was a tail call.
      -- The work function is body's first argument.
      local _, work = debug.getlocal(l, 1)
      if type(work) == "function" then
        local w = debug.getinfo(work, "S")
        return w.short_src .. ":" .. w.linedefined .. " (a tail call in this job's work)"
      end
      return nil
    end
  end
  return nil
end

--- Raises `msg` at the game's code that called into stagehand (see where):
--- "file:line: msg", however many of stagehand's own frames lie between.
function M.raise(msg, level)
  local at = M.where((level or 1) + 1)
  error(at and at .. ": " .. msg or msg, 0)
end

--- Keys as a log line names them: the first eight, then how many more.
function M.list_keys(keys)
  local n = #keys
  if n <= 8 then return table.concat(keys, ", ") end
  return table.concat(keys, ", ", 1, 8) .. " and " .. (n - 8) .. " more"
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

-- What a yield that could not leave the coroutine raised: "attempt to yield
-- across a C-call boundary" (5.2 to 5.4; 5.1: "... metamethod/C-call boundary";
-- LuaJIT: "attempt to yield across C-call boundary").
function M.unyieldable(e)
  return type(e) == "string" and e:find("attempt to yield", 1, true) ~= nil
end

-- Why a job's wait (`what`) could not suspend it, with what the failed
-- yield raised, if anything.
function M.unyielded(what, label, raised)
  local msg = what .. " in " .. label .. " could not suspend the job: a wait must be made in the"
    .. " job's own coroutine, not inside a C function's callback (string.gsub, table.sort, ...), a"
    .. " coroutine of the game's own, or (Lua 5.1) a plain pcall (use job:pcall)"
  if raised ~= nil then msg = msg .. " [" .. one_line(raised) .. "]" end
  return msg
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
