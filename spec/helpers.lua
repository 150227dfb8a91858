-- Small helpers several specs share: a file's text, and the interpreter
-- running this spec (to run a script in a process of its own).
local M = {}

--- The whole text of the file at `path`.
function M.read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

--- A new temporary file holding `bytes`; returns its path.
function M.temp_file(bytes)
  local path = os.tmpname()
  local f = assert(io.open(path, "wb"))
  f:write(bytes)
  f:close()
  return path
end

--- The interpreter running this spec: luajit, lua5.4, lua5.3, lua5.2 or
--- lua5.1.
function M.interpreter()
  if rawget(_G, "jit") then return "luajit" end
  return (_VERSION:gsub("^Lua ", "lua"))
end

--- Runs `script` (shell text) in a process of its own through luv, with
--- an environment of its own: no sanitizer preloaded (a shell started
--- under ThreadSanitizer's preload crashes), and `require "stagehand"`
--- finding the plain build of this runtime even when this spec runs a
--- sanitized one. Returns what it wrote (stdout and stderr) and its exit
--- status.
-- (luv through stagehand's driver, which keeps luv's loop for the life of
-- the state: busted forgets modules between spec files, and a luv table
-- collected closes the loop under the next one.)
local function luv()
  require "stagehand.driver.luv"
  return require "luv"
end

function M.run_clean(script)
  local uv = luv()
  local cpath = package.cpath:gsub("build/sanitize/", "build/"):gsub("build/tsan/", "build/")
  local env = { "LUA_PATH=" .. package.path, "LUA_CPATH=" .. cpath }
  for _, name in ipairs { "PATH", "HOME", "STAGEHAND_BACKEND" } do
    local v = os.getenv(name)
    if v then env[#env + 1] = name .. "=" .. v end
  end
  local out, chunks, status = uv.new_pipe(false), {}, nil
  local proc = uv.spawn("sh", { args = { "-c", script .. " 2>&1" }, env = env, stdio = { nil, out, nil } },
    function(code)
      status = code
    end)
  assert(proc, "could not start sh")
  out:read_start(function(err, data)
    assert(not err, err)
    if data then chunks[#chunks + 1] = data else out:close() end
  end)
  while status == nil or not out:is_closing() do uv.run("once") end
  proc:close()
  uv.run("nowait")
  return table.concat(chunks), status
end

--- How many entries a directory of this process's /proc has ("task":
--- threads, "fd": descriptors), read through luv (no shell: see run_clean).
function M.proc_count(dir)
  local uv = luv()
  local req = assert(uv.fs_scandir("/proc/self/" .. dir))
  local n = 0
  while uv.fs_scandir_next(req) do n = n + 1 end
  return n
end

return M
