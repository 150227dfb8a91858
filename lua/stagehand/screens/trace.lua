-- orch:trace(): every job's life recorded, for a timeline in Perfetto or
-- chrome://tracing. The engine tells the tracer (o.tracer) when a job
-- resumes and when it parks; slots tell it of holds; a watcher tells it of
-- starts and ends. Times are the orchestrator's clock.
local F = require "stagehand.engine.fields"
local records = require "stagehand.engine.records"
local options = require "stagehand.engine.options"
local E = require "stagehand.engine.engine"
local each = require("stagehand.core.compat").each

local ID, LABEL, STATE, W, SINCE, STARTED = F.ID, F.LABEL, F.STATE, F.W, F.SINCE, F.STARTED

local M = {}

---@class stagehand.Trace
local Trace = {}
Trace.__index = Trace

local function check_trace(self, method)
  if getmetatable(self) ~= Trace then options.bad_self("tr:" .. method, "a trace (orch:trace())", self, 3) end
end

local function add(tr, ev)
  local evs = tr.evs
  evs[#evs + 1] = ev
  return ev
end

-- The engine's and slots' calls (o.tracer is the Trace while it records).

-- A job runs again: the wait it was parked on ends now.
function Trace:resumed(job, now)
  local w = self.waiting[job]
  if w then
    self.waiting[job] = nil
    w.to = now
  end
end

-- A job ran until it parked (or ended): a wait begins, on what it is
-- parked on, from when it parked.
function Trace:parked(job, now)
  if job[STATE] or not job[W] or self.waiting[job] then return end
  -- (parked before the watchers heard of its start: a worker's request)
  if not self.started[job] then self:told(job, false, now) end
  -- (from the recording's start at the earliest: a job already waiting
  -- when it began starts there, and its wait's slice stays inside its own)
  local since = job[SINCE]
  local from = type(since) == "number" and since or now
  if from < self.t0 then from = self.t0 end
  local ev = add(self, { kind = "wait", id = job[ID], label = job[LABEL], what = records.describe_wait(job),
    from = from, to = false })
  self.waiting[job] = ev
end

-- A slot of `what` is held from now until released (unhold).
function Trace:hold(job, what, now)
  local key = what .. "\0" .. job[ID]
  self.holds[key] = add(self, { kind = "hold", id = job[ID], label = job[LABEL], what = what, from = now,
    to = false })
end

function Trace:unhold(job, what, now)
  local key = what .. "\0" .. job[ID]
  local ev = self.holds[key]
  if ev then
    self.holds[key] = nil
    ev.to = now
  end
end

-- A worker took a request: its effective priority then, and the job
-- awaiting it that raised it (from; nil when its own callers give it).
function Trace:dispatched(job, prio, from, now)
  add(self, { kind = "dispatch", id = job[ID], label = job[LABEL], t = now, priority = prio, from = from })
end

-- A permit granted (it lasts as long as the holder runs in that step).
function Trace:permit(job, what, now)
  add(self, { kind = "permit", id = job[ID], label = job[LABEL], what = what, t = now })
end

-- A job started, or ended (records.notify tells the tracer first).
function Trace:told(job, ending, t)
  if not ending then
    if self.started[job] then return end
    self.started[job] = true
    add(self, { kind = "start", id = job[ID], label = job[LABEL], t = job[STARTED] or t })
    return
  end
  -- (a job it never saw start, it does not see end: one whose end was
  -- under way, out of the running jobs, as this trace began)
  if not self.started[job] then return end
  add(self, { kind = "end", id = job[ID], label = job[LABEL], state = job[STATE], t = t })
  local w = self.waiting[job]
  if w then
    self.waiting[job] = nil
    w.to = t
  end
end

--- Stops recording (what was recorded stays: events, write).
function Trace:stop()
  check_trace(self, "stop")
  if not self.stopped then
    self.stopped = true
    if self.orch.tracer == self then self.orch.tracer = nil end
  end
end

--- What was recorded, in order, as Lua tables: {kind = "start" | "end" |
--- "wait" | "hold" | "permit" | "dispatch", id =, label =, t = (start,
--- end, permit, dispatch), from =, to = (wait, hold: to is false while it
--- lasts), what = (wait, hold, permit), state = (end), priority = and
--- from = (dispatch: a worker took the request, at that effective
--- priority; from names the job awaiting it that raised it, or is nil)}.
---@return table[]
function Trace:events()
  check_trace(self, "events")
  local out = {}
  for i = 1, #self.evs do
    local e = {}
    for k, v in each, self.evs[i] do e[k] = v end
    out[i] = e
  end
  return out
end

local byte, sub, find = string.byte, string.sub, string.find

-- How long the UTF-8 sequence at i of s is (1 to 4), or nil when the bytes
-- there are no valid sequence (RFC 3629: no overlong forms, no
-- surrogates, nothing past U+10FFFF).
local function utf8_len(s, i)
  local c = byte(s, i)
  if c < 0x80 then return 1 end
  local lo, hi, n = 0x80, 0xBF, 2
  if c >= 0xE0 and c <= 0xEF then
    n = 3
    if c == 0xE0 then lo = 0xA0 elseif c == 0xED then hi = 0x9F end
  elseif c >= 0xF0 and c <= 0xF4 then
    n = 4
    if c == 0xF0 then lo = 0x90 elseif c == 0xF4 then hi = 0x8F end
  elseif c < 0xC2 or c > 0xDF then
    return nil
  end
  local c2 = byte(s, i + 1)
  if not c2 or c2 < lo or c2 > hi then return nil end
  for k = 2, n - 1 do
    local ck = byte(s, i + k)
    if not ck or ck < 0x80 or ck > 0xBF then return nil end
  end
  return n
end

local function escape(c)
  if c == '"' then return '\\"' end
  if c == "\\" then return "\\\\" end
  if c == "\n" then return "\\n" end
  if c == "\t" then return "\\t" end
  return string.format("\\u%04x", c:byte())
end

-- A JSON string that strict readers take: quotes, backslashes and every
-- control byte escaped, and each byte that starts no valid UTF-8 sequence
-- (a label may hold any bytes) written as U+FFFD, the replacement
-- character.
local function json_string(s)
  s = tostring(s)
  if not find(s, "[\128-\255]") then return '"' .. s:gsub('[%c"\\]', escape) .. '"' end
  local out, i, n = {}, 1, #s
  while i <= n do
    local len = utf8_len(s, i)
    if len then
      local piece = sub(s, i, i + len - 1)
      out[#out + 1] = len == 1 and piece:gsub('[%c"\\]', escape) or piece
      i = i + len
    else
      out[#out + 1] = "\\ufffd"
      i = i + 1
    end
  end
  return '"' .. table.concat(out) .. '"'
end

local function us(ms) return string.format("%.3f", ms * 1000) end

--- Writes what was recorded to `path` in the Chrome Trace Event format
--- ({"traceEvents": [...]}, times in microseconds): one track per job,
--- named by its label; waits and slot holds as slices inside it. It opens
--- in Perfetto (ui.perfetto.dev) or chrome://tracing.
---@param path string
---@return string path
function Trace:write(path)
  check_trace(self, "write")
  if type(path) ~= "string" or path == "" then options.fail("tr:write", "path", "a file path", path) end
  local now = E.now(self.orch)
  local t0 = self.t0
  local out = { '{"displayTimeUnit":"ms","traceEvents":[' }
  local first = true
  local function emit(fields)
    out[#out + 1] = (first and "" or ",\n") .. "{" .. table.concat(fields, ",") .. "}"
    first = false
  end
  emit({ '"name":"process_name"', '"ph":"M"', '"pid":1', '"tid":0',
    '"args":{"name":' .. json_string(self.name) .. "}" })
  for _, e in ipairs(self.evs) do
    if e.kind == "start" then
      emit({ '"name":"thread_name"', '"ph":"M"', '"pid":1', '"tid":' .. e.id,
        '"args":{"name":' .. json_string(e.label .. " #" .. e.id) .. "}" })
    end
  end
  local ends = {}
  for _, e in ipairs(self.evs) do
    if e.kind == "end" then ends[e.id] = e end
  end
  for _, e in ipairs(self.evs) do
    if e.kind == "start" then
      local fin = ends[e.id]
      local to = fin and fin.t or now
      emit({ '"name":' .. json_string(e.label), '"cat":"job"', '"ph":"X"', '"pid":1', '"tid":' .. e.id,
        '"ts":' .. us(e.t - t0), '"dur":' .. us(math.max(0, to - e.t)),
        '"args":{"state":' .. json_string(fin and fin.state or "running") .. "}" })
    elseif e.kind == "wait" or e.kind == "hold" then
      local to = e.to or now
      emit({ '"name":' .. json_string((e.kind == "wait" and "waiting on " or "holding ") .. e.what),
        '"cat":"' .. e.kind .. '"', '"ph":"X"', '"pid":1', '"tid":' .. e.id, '"ts":' .. us(e.from - t0),
        '"dur":' .. us(math.max(0, to - e.from)) })
    elseif e.kind == "dispatch" then
      emit({ '"name":' .. json_string("to a worker at " .. tostring(e.priority)
        .. (e.from and " (from " .. e.from .. ")" or "")), '"cat":"dispatch"', '"ph":"i"', '"s":"t"', '"pid":1',
        '"tid":' .. e.id, '"ts":' .. us(e.t - t0),
        '"args":{"priority":' .. json_string(tostring(e.priority))
        .. (e.from and ',"from":' .. json_string(e.from) or "") .. "}" })
    elseif e.kind == "permit" then
      emit({ '"name":' .. json_string("granted " .. e.what), '"cat":"permit"', '"ph":"i"', '"s":"t"', '"pid":1',
        '"tid":' .. e.id, '"ts":' .. us(e.t - t0) })
    end
  end
  out[#out + 1] = "]}\n"
  local f, err = io.open(path, "wb")
  if not f then error("tr:write: cannot write " .. path .. ": " .. tostring(err), 2) end
  local ok, werr = f:write(table.concat(out))
  f:close()
  if not ok then error("tr:write: cannot write " .. path .. ": " .. tostring(werr), 2) end
  return path
end

--- Starts recording every job's life in `o` (orch:trace).
function M.start(o)
  local old = o.tracer
  if old then old:stop() end
  local tr = setmetatable({ orch = o, evs = {}, waiting = setmetatable({}, { __mode = "k" }), holds = {},
    started = setmetatable({}, { __mode = "k" }), stopped = false, name = "stagehand",
    t0 = E.now(o) }, Trace)
  o.tracer = tr
  -- Jobs running already: a start now, and the wait each is parked on.
  local running = E.running_jobs(o)
  for i = 1, #running do
    local job = running[i]
    tr.started[job] = true
    add(tr, { kind = "start", id = job[ID], label = job[LABEL], t = tr.t0 })
    tr:parked(job, tr.t0)
  end
  return tr
end

return M
