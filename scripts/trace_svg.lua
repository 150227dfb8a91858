-- Draws a trace that orch:trace() wrote (Chrome Trace Event JSON) as an SVG
-- timeline: a row per job, its life as a bar, its waits and slot holds as
-- slices on it. The picture in docs/guide.md is the demo's trace drawn so:
--
--   luajit scripts/trace_svg.lua build/scene_loader.trace.json docs/trace.svg
local cjson = require "cjson"

local src, dst = arg[1], arg[2]
if not src or not dst then
  io.stderr:write("usage: luajit scripts/trace_svg.lua trace.json out.svg\n")
  os.exit(2)
end
local f = assert(io.open(src, "rb"))
local doc = cjson.decode(f:read("*a"))
f:close()

local names, jobs, slices, t_end = {}, {}, {}, 0
for _, e in ipairs(doc.traceEvents) do
  if e.ph == "M" and e.name == "thread_name" then names[e.tid] = e.args.name end
  if e.ph == "X" then
    if e.cat == "job" then jobs[#jobs + 1] = e else slices[#slices + 1] = e end
    t_end = math.max(t_end, e.ts + e.dur)
  end
end
table.sort(jobs, function(a, b) return a.tid < b.tid end)
local row_of = {}
for i, j in ipairs(jobs) do row_of[j.tid] = i end

local LEFT, WIDTH, ROW, TOP = 220, 760, 18, 40
local function x(ts) return LEFT + WIDTH * ts / math.max(t_end, 1) end
local function esc(s) return (tostring(s):gsub("&", "&amp;"):gsub("<", "&lt;"):gsub(">", "&gt;")) end
local COLOUR = { job = "#9ab", wait = "#e8c36a", hold = "#5aa86b", done = "#9ab", failed = "#d9534f",
  stalled = "#a25fb8", cancelled = "#888" }

local out = {}
local height = TOP + ROW * #jobs + 40
out[#out + 1] = string.format('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
  .. 'font-family="sans-serif" font-size="11">', LEFT + WIDTH + 20, height)
out[#out + 1] = string.format('<rect width="100%%" height="100%%" fill="#fff"/>')
out[#out + 1] = string.format('<text x="10" y="20" font-size="13">%s: %d jobs over %.1f ms '
  .. '(bars: a job\'s life, by how it ended; yellow: waiting; green: holding a slot)</text>',
  esc(src:match("[^/]*$")), #jobs, t_end / 1000)
for i, j in ipairs(jobs) do
  local y = TOP + (i - 1) * ROW
  out[#out + 1] = string.format('<text x="10" y="%d">%s</text>', y + 12, esc(names[j.tid] or j.name))
  out[#out + 1] = string.format('<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"/>', x(j.ts), y + 2,
    math.max(1, x(j.ts + j.dur) - x(j.ts)), ROW - 4, COLOUR[j.args and j.args.state] or COLOUR.job)
end
for _, s in ipairs(slices) do
  local row = row_of[s.tid]
  if row then
    local y = TOP + (row - 1) * ROW
    local h = s.cat == "hold" and 4 or 8
    out[#out + 1] = string.format('<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>%s</title></rect>',
      x(s.ts), y + (s.cat == "hold" and ROW - 6 or 5), math.max(1, x(s.ts + s.dur) - x(s.ts)), h,
      COLOUR[s.cat] or "#ccc", esc(s.name))
  end
end
for k = 0, 4 do
  local ts = t_end * k / 4
  out[#out + 1] = string.format('<text x="%.1f" y="%d" fill="#555">%.0f ms</text>', x(ts) - 10, height - 12,
    ts / 1000)
end
out[#out + 1] = "</svg>\n"
local w = assert(io.open(dst, "wb"))
w:write(table.concat(out, "\n"))
w:close()
print("wrote " .. dst .. " (" .. #jobs .. " jobs)")
