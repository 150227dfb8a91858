-- A command-line scene loader: one job per asset file in examples/assets,
-- read through luv, each with the stall time its kind deserves. Two assets
-- misbehave on purpose: knight.portrait is broken, so its job fails with a
-- clear message; tavern.stream waits on a server that never answers, so its
-- job stalls after 1.5 s instead of hanging the loading screen. The rest of
-- the scene loads anyway. Decoding shares a pool of two slots, opened once
-- every file is read (a barrier), so the slots go by priority: portraits on
-- screen first, background sound last. Each decode (and a checksum of the
-- bytes) runs on a worker thread, from examples/scene_decoder.lua: the main
-- thread only reads files and hands work out. Ends with every job's end
-- state.
--
--   make demo          (or: eval "$(make -s env)"; luajit examples/scene_loader.lua)
local stagehand = require "stagehand"
local uv = require "luv"

local here = (arg and arg[0] or ""):match("^(.*)[/\\]") or "."
local dir = here .. "/assets"

-- What each kind of asset needs: its stall time and how it is decoded.
local KINDS = {
  sprite = { stall_ms = 2000, priority = "scene" },
  tiles = { stall_ms = 3000, priority = "scene" },
  shader = { stall_ms = 5000, priority = "scene" }, -- compiles are slow
  portrait = { stall_ms = 1000, priority = "visible" }, -- on screen: first
  sound = { stall_ms = 2000, priority = "background" },
  stream = { stall_ms = 1500, priority = "background" },
}

-- A streamed asset's bytes come from a server; this one never answers.
local function open_stream(url)
  local f = stagehand.future("stream " .. url)
  return f -- nobody will ever resolve it
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

local orch = stagehand.new {
  driver = "luv",
  check_ms = 250, -- look for stalls four times a second
  pools = { decode = 0 }, -- closed until every file is read; then two at a time
  log = function(message) io.stderr:write(message, "\n") end,
}

-- Two worker threads decode: they read examples/scene_decoder.lua, found
-- through package.path as it is now (each worker's state gets a copy).
package.path = here .. "/?.lua;" .. package.path
local decoders = stagehand.pool(orch, { module = "scene_decoder", size = 2 })

local started = uv.hrtime()
local handles = {}
local decode_order = {}

local files_read -- a barrier over the asset names, made once they are listed

local function load_asset(name)
  local kind = name:match("%.(%w+)$")
  local spec = KINDS[kind]
  if not spec then return end
  handles[#handles + 1] = orch:run("Loading " .. name, function(job)
    local text = read_file(job, dir .. "/" .. name)
    job:progress()
    files_read:arrive(name)
    local release = job:slot("decode")
    decode_order[#decode_order + 1] = name
    local decoding = decoders:run("decode", { name = name, kind = kind, text = text }, { label = "decoding " .. name })
    local ok, asset = job:pcall(job.await, job, decoding)
    release()
    if not ok then error(asset.cause or asset, 0) end -- (the decoder's own message)
    if kind == "stream" then asset.bytes = job:await(open_stream(asset.url)) end
    return asset
  end, { key = "asset:" .. name, stall_ms = spec.stall_ms, priority = spec.priority })
end

-- The scene itself is a job too: it lists the directory and waits for all.
local scene = orch:run("Preparing the scene", function(job)
  local entries = job:call(uv.fs_scandir, dir)
  local names = {}
  while true do
    local name = uv.fs_scandir_next(entries)
    if not name then break end
    names[#names + 1] = name
  end
  table.sort(names)
  local assets = {}
  for _, name in ipairs(names) do
    if KINDS[name:match("%.(%w+)$")] then assets[#assets + 1] = name end
  end
  files_read = orch:barrier("Reading every file", assets)
  for _, name in ipairs(assets) do load_asset(name) end
  job:await(files_read.settled)
  orch:pool("decode", 2) -- every file is in: decode two at a time, by priority
  local outcomes = job:await(stagehand.all_settled(handles))
  local loaded = 0
  for _, o in ipairs(outcomes) do
    if o.state == "done" then loaded = loaded + 1 end
  end
  return loaded, #outcomes
end, {
  -- A job waiting on others lends them its rank. The scene waits at
  -- background rank, so each asset keeps its own; at `scene` it would lift
  -- the background sound up to `scene` too.
  priority = "background",
})

orch:loop()
orch:wait(decoders:destroy(), 2000)

local ms = (uv.hrtime() - started) / 1e6
print(string.format("%-28s %-9s %s", "job", "state", "details"))
print(string.rep("-", 72))
for _, h in ipairs(handles) do
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
print("decode slots went to: " .. table.concat(decode_order, ", "))
print(string.format("each decode ran on one of %d worker threads (examples/scene_decoder.lua)", 2))
local st, loaded, total = scene:result()
print(string.format("%s: %s, %d of %d assets loaded in %.1f ms (backend: %s)",
  scene.label, st, loaded or 0, total or 0, ms, stagehand.backend))
orch:close()
