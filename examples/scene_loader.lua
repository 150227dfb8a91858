-- A command-line scene loader: the entities of a small scene and the asset
-- files in examples/assets they use, loaded through luv.
--
-- Each asset is read (a luv file job), decoded and checksummed on one of two
-- worker threads (examples/scene_decoder.lua), then uploaded on the main
-- thread, at most two a step (a budget). Entities share assets by key: three
-- goblins load goblin.sprite once. Decodes wait for a slot of a pool of two,
-- opened once every file is read (a barrier), so the slots go by priority:
-- portraits on screen first, background sound last. Two assets misbehave on
-- purpose: knight.portrait is broken, so its load fails with a clear message
-- and the knight is placed with a stand-in; tavern.stream waits on a server
-- that never answers, so its load stalls after 1.5 s instead of hanging the
-- loading screen. The scene is ready when every entity is placed (a second
-- barrier). A progress bar per phase is drawn while it loads (redrawn in
-- place on a terminal), then the jobs' ends, the timeline of the phases,
-- and a trace of the whole load for Perfetto.
--
--   make demo          (or: eval "$(make -s env)"; luajit examples/scene_loader.lua [trace.json])
local stagehand = require "stagehand"
local uv = require "luv"

local here = (arg and arg[0] or ""):match("^(.*)[/\\]") or "."
local dir = here .. "/assets"
-- (build/ beside examples/, named as the reader would: "build/...", not
-- "examples/../build/...")
local build = here == "examples" and "build" or here == "." and "../build"
  or (here:match("^(.*)[/\\]examples$") or (here .. "/..")) .. "/build"
local trace_path = arg and arg[1] or (build .. "/scene_loader.trace.json")

-- What each kind of asset needs: its stall time, and its priority.
local KINDS = {
  sprite = { stall_ms = 2000, priority = "scene" },
  tiles = { stall_ms = 3000, priority = "scene" },
  shader = { stall_ms = 5000, priority = "scene" }, -- compiles are slow
  portrait = { stall_ms = 1000, priority = "visible" }, -- on screen: first
  sound = { stall_ms = 2000, priority = "background" },
  stream = { stall_ms = 1500, priority = "background" },
}

-- The scene: what each entity needs, and how much the player sees of it
-- (its priority, "scene" unless said). An entity waiting on an asset lends
-- it its rank, so the sound of a torch on the wall loads as background
-- only if the torch itself is background.
local ENTITIES = {
  { name = "hero", uses = { "hero.sprite" } },
  { name = "goblin 1", uses = { "goblin.sprite" } },
  { name = "goblin 2", uses = { "goblin.sprite" } },
  { name = "goblin 3", uses = { "goblin.sprite" } },
  { name = "dungeon floor", uses = { "floor.tiles", "water.shader" } },
  { name = "pond", uses = { "water.shader" } },
  { name = "queen's dialogue", uses = { "queen.portrait" }, priority = "visible" },
  { name = "knight's dialogue", uses = { "knight.portrait" }, priority = "visible" },
  { name = "wall torch", uses = { "torch.sound" }, priority = "background" },
  { name = "tavern", uses = { "tavern.stream" }, priority = "background" },
}

local orch = stagehand.new {
  driver = "luv",
  clock = function() return uv.hrtime() / 1e6 end, -- (finer than the loop's ms: the timeline shows short phases)
  check_ms = 250, -- look for stalls four times a second
  pools = { decode = 0 }, -- closed until every file is read; then two at a time
  log = function(message) io.stderr:write(message, "\n") end,
}
orch:budget("upload", { ops = 2 }) -- the main thread finalizes at most two assets a step
local load = stagehand.tracker(orch)
local trace = orch:trace()

-- Two worker threads decode: they read examples/scene_decoder.lua, found
-- through package.path as it is now (each worker's state gets a copy).
package.path = here .. "/?.lua;" .. package.path
local decoders = stagehand.pool(orch, { module = "scene_decoder", size = 2 })

local started = uv.hrtime()
local loads = {} -- asset name -> its load's Handle (the first caller's)
local asset_runs = {} -- asset name -> how many runs of it were made
local decode_order = {}

-- A streamed asset's bytes come from a server; this one never answers.
local function open_stream(url)
  return stagehand.future("stream " .. url) -- nobody will ever resolve it
end

local function read_file(job, path)
  local fd = job:call(uv.fs_open, path, "r", 420)
  local ok, data = job:pcall(function()
    local stat = job:call(uv.fs_fstat, fd)
    job:progress()
    return job:call(uv.fs_read, fd, stat.size, 0)
  end)
  job:call(uv.fs_close, fd)
  if not ok then error(data, 0) end
  return data
end

local files_read -- a barrier over the asset names, made once they are listed

-- One asset: read, decoded on a worker, uploaded. Keyed, so each runs once
-- however many entities ask for it: while it runs they join it, and once it
-- is done they are served what it loaded (reuse).
local function load_asset(name)
  local kind = name:match("%.(%w+)$")
  local spec = KINDS[kind]
  return orch:run("Loading " .. name, function(job)
    asset_runs[name] = (asset_runs[name] or 0) + 1
    local text = job:await(orch:run("Reading " .. name, function(reader)
      return read_file(reader, dir .. "/" .. name)
    end, { phase = "read" }))
    files_read:arrive(name)
    local release = job:slot("decode")
    decode_order[#decode_order + 1] = name
    local decoding = decoders:run("decode", { name = name, kind = kind, text = text, steps = 3e6 },
      { label = "Decoding " .. name, phase = "decode" })
    local ok, asset = job:pcall(job.await, job, decoding)
    release()
    if not ok then error(asset.cause or asset, 0) end -- (the decoder's own message)
    if kind == "stream" then asset.bytes = job:await(open_stream(asset.url)) end
    job:await(orch:run("Uploading " .. name, function(up)
      up:permit("upload") -- (two a step: the frame stays free)
      up:slice()
    end, { phase = "upload" }))
    return asset
  end, { key = "asset:" .. name, reuse = true, stall_ms = spec.stall_ms, priority = spec.priority })
end

-- An entity is placed once its assets are in; one whose asset failed is
-- placed with a stand-in, so the scene still becomes ready.
local placed = {}
local scene_ready
local function place(entity)
  return orch:run("Placing " .. entity.name, function(job)
    local missing = {}
    for _, name in ipairs(entity.uses) do
      local ok = job:pcall(job.await, job, load_asset(name))
      if not ok then missing[#missing + 1] = name end
    end
    placed[#placed + 1] = entity.name .. (#missing > 0 and " (stand-in for " .. table.concat(missing, ", ") .. ")"
      or "")
    scene_ready:arrive(entity.name)
  end, { priority = entity.priority or "scene" })
end

local scene = orch:run("Preparing the scene", function(job)
  local names, seen = {}, {}
  for _, e in ipairs(ENTITIES) do
    for _, name in ipairs(e.uses) do
      if not seen[name] then
        seen[name] = true
        names[#names + 1] = name
      end
    end
  end
  table.sort(names)
  files_read = orch:barrier("Reading every file", names)
  local entity_names = {}
  for i, e in ipairs(ENTITIES) do entity_names[i] = e.name end
  scene_ready = orch:barrier("The scene is ready", entity_names, { stall_ms = 5000 })
  for _, e in ipairs(ENTITIES) do place(e) end
  for _, name in ipairs(names) do loads[name] = load_asset(name) end
  job:await(files_read.settled)
  orch:pool("decode", 2) -- every file is in: decode two at a time, by priority
  job:await(scene_ready.settled)
  local loaded = 0
  for _, name in ipairs(names) do
    if loads[name]:state() == "done" then loaded = loaded + 1 end
  end
  return loaded, #names
end, {
  -- A job waiting on others lends them its rank. The scene waits at
  -- background rank, so each asset keeps its own.
  priority = "background",
})

-- Progress bars, one a phase: redrawn in place on a terminal, as lines
-- when they change otherwise (a log, a pipe).
local PHASES = { "read", "decode", "upload" }
local tty = uv.guess_handle(1) == "tty"
local drawn, last_text = 0, nil
local function bars()
  local lines = {}
  for _, phase in ipairs(PHASES) do
    local done, total = load:progress(phase)
    local c = load:counts(phase)
    local width = 24
    local filled = total > 0 and math.floor(width * done / total + 0.5) or 0
    lines[#lines + 1] = string.format("%-7s [%s%s] %2d/%-2d %s", phase, string.rep("#", filled),
      string.rep(".", width - filled), done, total,
      (c.failed + c.stalled + c.cancelled) > 0 and string.format("(%d failed)", c.failed + c.stalled + c.cancelled)
      or "")
  end
  return lines
end
local function draw(final)
  local lines = bars()
  local text = table.concat(lines, "\n")
  if tty then
    if drawn > 0 then io.stdout:write(string.format("\27[%dA", drawn)) end
    for _, l in ipairs(lines) do io.stdout:write("\27[2K", l, "\n") end
    drawn = #lines
  elseif text ~= last_text or final then
    if text ~= last_text then print(text) end
  end
  last_text = text
  io.stdout:flush()
end
local frame = uv.new_timer()
frame:start(0, 50, function() draw(false) end)

orch:loop()
frame:stop()
frame:close()
draw(true)
orch:wait(decoders:destroy(), 2000)
trace:stop()

local ms = (uv.hrtime() - started) / 1e6
print()
print(string.format("%-28s %-9s %s", "job", "state", "details"))
print(string.rep("-", 72))
local names = {}
for name in pairs(loads) do names[#names + 1] = name end
table.sort(names)
for _, name in ipairs(names) do
  local h = loads[name]
  local st, v = h:result()
  local details
  if st == "done" then
    local parts = {}
    for k, val in pairs(v) do parts[#parts + 1] = k .. "=" .. val end
    table.sort(parts)
    details = table.concat(parts, " ")
  else
    details = tostring(v)
  end
  print(string.format("%-28s %-9s %s", h.label, st, details))
end
print(string.rep("-", 72))
local once = true
for _, n in pairs(asset_runs) do if n ~= 1 then once = false end end
print(string.format("each asset loaded once for %d entities: %s", #ENTITIES, once and "yes" or "NO"))
print("decode slots went to: " .. table.concat(decode_order, ", "))
print(string.format("each decode ran on one of %d worker threads (examples/scene_decoder.lua)", 2))
print("placed: " .. table.concat(placed, "; "))
print()
print(stagehand.format_timeline(load:timeline()))
print()
local ok, err = pcall(trace.write, trace, trace_path)
print(ok and ("trace written to " .. trace_path .. " (open it in https://ui.perfetto.dev)")
  or ("no trace written: " .. tostring(err)))
local st, loaded, total = scene:result()
print(string.format("%s: %s, %d of %d assets loaded in %.1f ms (backend: %s)",
  scene.label, st, loaded or 0, total or 0, ms, stagehand.backend))
orch:close()
