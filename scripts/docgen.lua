-- Writes docs/reference.md and types/stagehand.lua (a LuaLS meta file)
-- from one source: the LuaLS annotations on stagehand's public functions.
--
--   lua scripts/docgen.lua          writes both files
--   lua scripts/docgen.lua --check  exits 1 if either is stale
--
-- Runs on any Lua (5.1, 5.4, LuaJIT) from the top of the tree. A public
-- function is one defined as `function Table:name(...)`, `function
-- Table.name(...)` or `Table.name = ...` in the files listed below, whose
-- name does not start with "_", with a `---` comment block just above it.
local each = next -- (never pairs: see lua/stagehand/core/compat.lua)

-- Each part of the reference: the file, the table its functions are
-- defined on, how a game writes a call, and a heading.
local PARTS = {
  { "init.lua", "M", "stagehand.", "The module", "stagehand" },
  { "orchestrator.lua", "Orchestrator", "orch:", "The orchestrator", "stagehand.Orchestrator" },
  { "wait/job.lua", "Job", "job:", "The job object (inside work)", "stagehand.Job" },
  { "wait/handle.lua", "Handle", "h:", "Handles", "stagehand.Handle" },
  { "engine/settle.lua", "Base", "h:", "Every awaitable (Handles, Futures, groups)", "stagehand.Handle" },
  { "wait/future.lua", "Future", "f:", "Futures", "stagehand.Future" },
  { "wait/combine.lua", "Group", "g:", "Groups (all, all_settled, any, race, abortable)", "stagehand.Group" },
  { "engine/signal.lua", "Signal", "sig:", "Signals", "stagehand.Signal" },
  { "engine/signal.lua", "Controller", "ctl:", "Controllers", "stagehand.Controller" },
  { "wait/barrier.lua", "Barrier", "b:", "Barriers", "stagehand.Barrier" },
  { "threads/workers.lua", "Pool", "pool:", "Worker pools", "stagehand.WorkerPool" },
  { "threads/workers.lua", "Service", "w:", "Long-lived workers (stagehand.spawn)", "stagehand.Worker" },
  { "worker.lua", "M", "worker.", "Inside a worker (require \"stagehand.worker\")", "stagehand.worker" },
  { "threads/ports.lua", "Port", "port:", "Ports", "stagehand.Port" },
  { "threads/ports.lua", "Rounds", "b:", "Round barriers", "stagehand.Rounds" },
  { "screens/tracker.lua", "Tracker", "load:", "The load tracker", "stagehand.Tracker" },
  { "screens/tracker.lua", "Task", "task:", "Tasks of a load tracker", "stagehand.Task" },
  { "screens/trace.lua", "Trace", "tr:", "Traces (orch:trace)", "stagehand.Trace" },
  { "engine/errors.lua", false, nil, nil, "stagehand.Error" }, -- (its class only: its fields)
  { "testing.lua", "T", "T.", "Testing helpers (require \"stagehand.testing\")", "stagehand.testing" },
  { "love.lua", "M", "stagehand.love.", "LÖVE in one call (require \"stagehand.love\")", "stagehand.love" },
}

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

local function lines_of(s)
  local out = {}
  for line in (s .. "\n"):gmatch("([^\n]*)\n") do out[#out + 1] = line end
  return out
end

-- The `---` block ending just above line i: its text lines and its tags.
local function block_above(lines, i)
  local first = i
  while first > 1 and lines[first - 1]:match("^%-%-%-") do first = first - 1 end
  local text, tags = {}, {}
  for k = first, i - 1 do
    local l = lines[k]
    local tag, rest = l:match("^%-%-%-@(%w+)%s*(.*)$")
    if tag then
      tags[#tags + 1] = { tag, rest }
    else
      text[#text + 1] = (l:gsub("^%-%-%-%s?", ""))
    end
  end
  return text, tags, first
end

-- The classes (---@class blocks, with their ---@field lines) of a file.
local function classes_of(lines)
  local out = {}
  for i, l in ipairs(lines) do
    local name = l:match("^%-%-%-@class%s+([%w%.]+)")
    if name then
      local fields = {}
      local k = i + 1
      while lines[k] and lines[k]:match("^%-%-%-@field") do
        fields[#fields + 1] = lines[k]
        k = k + 1
      end
      out[#out + 1] = { name = name, fields = fields }
    end
  end
  return out
end

-- Tables whose functions are methods (called with a colon); a `.`
-- function on one of them (Orchestrator.new) belongs to the module.
local method_of = setmetatable({ M = false, T = false }, { __index = function() return true end })

local function entries_of(path, tbl)
  local lines = lines_of(read(path))
  local out = {}
  for i, l in ipairs(lines) do
    local sep, name, args = l:match("^function " .. tbl .. "([:%.])([%w_]+)%((.-)%)")
    local assigned = not name and l:match("^" .. tbl .. "%.([%w_]+)%s*=")
    if assigned then name, sep, args = assigned, method_of[tbl] and ":" or ".", nil end
    -- (a class's methods only: its `.` functions, like Orchestrator.new,
    -- are the module's, documented there)
    if name and not name:match("^_") and not (method_of[tbl] and sep == ".") then
      local text, tags = block_above(lines, i)
      if #text > 0 or #tags > 0 then
        local field = false
        if args == nil then -- (an assignment: its arguments come from ---@type fun(...))
          field = true
          for _, t in ipairs(tags) do
            local fun = t[1] == "type" and t[2]:match("^fun%((.-)%)")
            if fun then
              local names = {}
              for a in (fun .. ","):gmatch("%s*([%w_%.]+)%??%s*:?[^,]*,") do names[#names + 1] = a end
              if names[1] == "self" then table.remove(names, 1) end
              args = table.concat(names, ", ")
              field = false
            end
          end
        end
        out[#out + 1] = { name = name, sep = sep, args = args or "", text = text, tags = tags, field = field,
          assigned = assigned and true or false }
      end
    end
  end
  return out, classes_of(lines)
end

local function reference()
  local md = {
    "# stagehand reference",
    "",
    "Every public function, generated by `scripts/docgen.lua` from the LuaLS",
    "annotations in `lua/stagehand/` (do not edit by hand: `make docs` writes it,",
    "and a spec fails when it is stale). [guide.md](guide.md) explains how they",
    "work together.",
    "",
  }
  local meta = {
    "---@meta",
    "-- stagehand's public API for LuaLS (sumneko) editors: generated by",
    "-- scripts/docgen.lua from the annotations in lua/stagehand/; do not edit.",
    "",
  }
  local seen_class = {}
  for _, part in ipairs(PARTS) do
    local file, tbl, prefix, title, class = part[1], part[2], part[3], part[4], part[5]
    local entries, classes = entries_of("lua/stagehand/" .. file, tbl or "%z")
    if class == "stagehand" and not seen_class.stagehand then
      seen_class.stagehand = true
      meta[#meta + 1] = "---@class stagehand"
      meta[#meta + 1] = "local stagehand = {}"
      meta[#meta + 1] = ""
    end
    for _, c in ipairs(classes) do
      if not seen_class[c.name] then
        seen_class[c.name] = true
        meta[#meta + 1] = "---@class " .. c.name
        for _, f in ipairs(c.fields) do meta[#meta + 1] = f end
        meta[#meta + 1] = "local " .. c.name:gsub("%.", "_") .. " = {}"
        meta[#meta + 1] = ""
      end
    end
    if #entries > 0 then
      md[#md + 1] = "## " .. title
      md[#md + 1] = ""
      local holder = class:gsub("%.", "_")
      if not seen_class[class] then
        seen_class[class] = true
        meta[#meta + 1] = "local " .. holder .. " = {}"
      end
      for _, e in ipairs(entries) do
        md[#md + 1] = "### `" .. prefix .. e.name .. (e.field and "" or "(" .. e.args .. ")") .. "`"
        md[#md + 1] = ""
        if #e.text > 0 then
          md[#md + 1] = table.concat(e.text, "\n")
          md[#md + 1] = ""
        end
        local params, returns = {}, {}
        for _, t in ipairs(e.tags) do
          if t[1] == "param" then params[#params + 1] = t[2] end
          if t[1] == "return" then returns[#returns + 1] = t[2] end
        end
        for _, p in ipairs(params) do
          local name, ty, desc = p:match("^(%S+)%s+(%S+)%s*(.*)$")
          md[#md + 1] = "- `" .. (name or p) .. "`" .. (ty and " (`" .. ty .. "`)" or "")
            .. (desc and desc ~= "" and ": " .. desc or "")
        end
        for _, r in ipairs(returns) do md[#md + 1] = "- returns `" .. r .. "`" end
        if #params + #returns > 0 then md[#md + 1] = "" end
        -- the meta file: the same block over an empty function
        for _, l in ipairs(e.text) do meta[#meta + 1] = "--- " .. l end
        for _, t in ipairs(e.tags) do meta[#meta + 1] = "---@" .. t[1] .. " " .. t[2] end
        local sep = e.sep == ":" and ":" or "."
        if e.assigned then -- (its ---@type says what it is)
          meta[#meta + 1] = holder .. "." .. e.name .. " = nil"
        else
          meta[#meta + 1] = "function " .. holder .. sep .. e.name .. "(" .. e.args .. ") end"
        end
        meta[#meta + 1] = ""
      end
    end
  end
  meta[#meta + 1] = "return stagehand"
  return table.concat(md, "\n") .. "\n", table.concat(meta, "\n") .. "\n"
end

local md, meta = reference()
local targets = { ["docs/reference.md"] = md, ["types/stagehand.lua"] = meta }
if arg[1] == "--check" then
  local stale = {}
  for path, text in each, targets do
    local f = io.open(path, "rb")
    local now = f and f:read("*a")
    if f then f:close() end
    if now ~= text then stale[#stale + 1] = path end
  end
  table.sort(stale)
  if #stale > 0 then
    io.stderr:write("stale (run make docs): " .. table.concat(stale, ", ") .. "\n")
    os.exit(1)
  end
  print("docs/reference.md and types/stagehand.lua are up to date")
else
  for path, text in each, targets do
    local f = assert(io.open(path, "wb"))
    f:write(text)
    f:close()
  end
end
