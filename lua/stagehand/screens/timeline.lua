-- stagehand.format_timeline: load:timeline()'s rows (tracker.lua) as an
-- aligned text table, each row checked to be one timeline() makes.
local options = require "stagehand.engine.options"

local M = {}

-- A row of load:timeline(): each field of the kind it has there, and no
-- other field.
local ROW_FIELDS = { phase = "a non-empty string", start_ms = "a number", end_ms = "a number or nil",
  busy_ms = "a number", spans = "a whole number >= 0", tasks = "a whole number >= 0", failed = "a whole number >= 0" }

local ROW_ORDER = { "phase", "start_ms", "end_ms", "busy_ms", "spans", "tasks", "failed" }

local function row_field_ok(k, v)
  if k == "phase" then return type(v) == "string" and v ~= "" end
  if k == "end_ms" and v == nil then return true end
  if type(v) ~= "number" or v ~= v then return false end
  if k == "start_ms" or k == "end_ms" or k == "busy_ms" then return true end
  return v >= 0 and v % 1 == 0
end

local function check_row(r, i)
  local where = "rows[" .. i .. "]"
  if type(r) ~= "table" then options.fail("stagehand.format_timeline", where, "a row of load:timeline()", r, 3) end
  local odd = options.first_key(r, function(f) return not ROW_FIELDS[f] end)
  if odd ~= nil then
    options.fail("stagehand.format_timeline", options.field(where, odd),
      "one of phase, start_ms, end_ms, busy_ms, spans, tasks, failed", r[odd], 3)
  end
  for j = 1, #ROW_ORDER do
    local k = ROW_ORDER[j]
    if not row_field_ok(k, r[k]) then
      options.fail("stagehand.format_timeline", where .. "." .. k, ROW_FIELDS[k], r[k], 3)
    end
  end
end

--- The rows of load:timeline() as an aligned text table.
---@param rows table[]
---@return string
function M.format_timeline(rows)
  if type(rows) ~= "table" then options.fail("stagehand.format_timeline", "rows", "a list of rows", rows) end
  local head = { "phase", "start ms", "end ms", "busy ms", "spans", "tasks", "failed" }
  local cells = { head }
  local function ms(v) return v and string.format("%.1f", v) or "-" end
  for i = 1, #rows do
    local r = rows[i]
    check_row(r, i)
    cells[#cells + 1] = { r.phase, ms(r.start_ms), ms(r.end_ms), ms(r.busy_ms), tostring(r.spans or 0),
      tostring(r.tasks or 0), tostring(r.failed or 0) }
  end
  local widths = {}
  for _, row in ipairs(cells) do
    for c, v in ipairs(row) do widths[c] = math.max(widths[c] or 0, #v) end
  end
  local lines = {}
  for _, row in ipairs(cells) do
    local parts = {}
    for c, v in ipairs(row) do
      -- (the phase to the left, the numbers to the right)
      parts[c] = c == 1 and v .. string.rep(" ", widths[c] - #v) or string.rep(" ", widths[c] - #v) .. v
    end
    lines[#lines + 1] = table.concat(parts, "  ")
  end
  return table.concat(lines, "\n")
end

return M
