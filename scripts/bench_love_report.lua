-- Reads bench/love's result lines (scripts/bench_love.sh) and prints each
-- loader's medians side by side, then stagehand's targets against the peers.
local rows, objects = {}, nil
for line in io.lines(arg[1]) do
  local r = {}
  for k, v in line:gmatch("([%w_]+)=(%S+)") do r[k] = tonumber(v) or v end
  if line:match("^objects ") then
    objects = r
  else
    rows[r.loader] = rows[r.loader] or {}
    table.insert(rows[r.loader], r)
  end
end
local function median(list, field)
  local xs = {}
  for i, r in ipairs(list) do xs[i] = r[field] end
  table.sort(xs)
  return xs[math.ceil(#xs / 2)]
end
local order = { "stagehand", "love-loader", "lily" }
print(string.format("%-12s %5s %10s %8s %10s %9s  %-24s %s", "loader", "runs", "load ms", "frames", "worst ms",
  "p95 ms", "visible finished at", "loaded/failed"))
local med = {}
for _, name in ipairs(order) do
  local list = rows[name]
  if list then
    local m = { load = median(list, "load_ms"), frames = median(list, "frames"), worst = median(list, "worst_ms"),
      p95 = median(list, "p95_ms") }
    med[name] = m
    local places = {}
    for _, r in ipairs(list) do places[#places + 1] = r.visible end
    print(string.format("%-12s %5d %10.1f %8d %10.2f %9.2f  %-24s %d/%d", name, #list, m.load, m.frames, m.worst,
      m.p95, places[1], list[1].loaded, list[1].failed))
    for i = 2, #places do print(string.format("%63s %s", "", places[i])) end
  end
end
local s, ll, li = med.stagehand, med["love-loader"], med.lily
local missed = 0
local function target(what, ok, detail)
  print(string.format("  %-58s %s (%s)", what, ok and "met" or "MISSED", detail))
  if not ok then missed = missed + 1 end
end
if s then
  print("targets (medians):")
  if li then
    target("load time at most lily's", s.load <= li.load, string.format("%.1f vs %.1f ms", s.load, li.load))
  end
  if ll then
    target("worst frame at most 1.25x love-loader's", s.worst <= 1.25 * ll.worst,
      string.format("%.2f vs %.2f ms", s.worst, ll.worst))
    target("95th-percentile frame at most love-loader's", s.p95 <= ll.p95,
      string.format("%.2f vs %.2f ms", s.p95, ll.p95))
  end
  local first = 0
  for _, r in ipairs(rows.stagehand) do
    if r.visible == "1,2,3,4,5,6,7,8" then first = first + 1 end
  end
  target("the 8 visible textures finish first", first == #rows.stagehand,
    string.format("%d of %d runs", first, #rows.stagehand))
  local whole = 0
  for _, r in ipairs(rows.stagehand) do
    if r.loaded == 62 and r.failed == 2 then whole = whole + 1 end
  end
  target("a corrupt PNG and a missing file: 62 loaded, 2 named failures", whole == #rows.stagehand,
    string.format("%d of %d runs", whole, #rows.stagehand))
end
-- (information: the 95th percentile of the frames that made an upload and
-- of the others, each loader's own; what one upload frame costs the frame)
print("frames with an upload and without (information, medians):")
for _, name in ipairs(order) do
  local list = rows[name]
  if list and list[1].upload_frames then
    print(string.format("  %-12s %4d of %4d frames uploaded   p95 with an upload %5.2f ms, without %5.2f ms", name,
      median(list, "upload_frames"), median(list, "frames"), median(list, "upload_p95_ms"),
      median(list, "other_p95_ms")))
  end
end
if objects then
  print(string.format("LÖVE objects (information): %d requests queued at once on 2 LÖVE workers, %.1f µs a request"
    .. " carrying a ByteData, %.1f µs answered with one, %.1f µs carrying a number", objects.n, objects.objects_us,
    objects.back_us, objects.plain_us))
end
print(missed == 0 and "every target met" or (missed .. " target(s) missed"))
