-- Where the native core (stagehand/_core.so, _core.dll on Windows) is, for
-- both backends: on package.cpath, or, inside LÖVE, where LÖVE's own C
-- loader looks (the save directory, the game's folder when it runs
-- unpacked) and beside a fused executable or the .love
-- (love.filesystem.getSourceBaseDirectory). A game packaged by `make
-- love-dist` carries the core for its system inside the archive, at
-- stagehand/native/OS-ARCH/_core.EXT, where no loader can read it: it is
-- written to the save directory the first time, and again when it
-- changes.
local M = {}

local windows = package.config:sub(1, 1) == "\\"

--- The file name a Lua C module has here: LÖVE and LuaRocks name it .so
--- on every system but Windows.
M.EXT = windows and "dll" or "so"

-- Windows: LuaJIT opens files and libraries through the system's "ANSI"
-- calls, which cannot name a path with a character outside the system's
-- code page. A player whose user folder is "Łukasz" or "小明" has a save
-- directory that io.open, package.loadlib and ffi.load cannot reach, so
-- the core written there would load only through LÖVE's own loader (on
-- the C module). LÖVE's paths are UTF-8: `wide` turns one into the
-- UTF-16 that the wide calls take.
local wide
if windows and rawget(_G, "jit") then
  local ok, ffi = pcall(require, "ffi")
  if ok then
    -- (a game that declared these already keeps its declarations)
    pcall(ffi.cdef, "int MultiByteToWideChar(unsigned int, unsigned long, const char *, int, wchar_t *, int);")
    pcall(ffi.cdef, "unsigned long GetFileAttributesW(const wchar_t *);")
    pcall(ffi.cdef, "void *LoadLibraryW(const wchar_t *);")
    wide = function(path)
      local n = ffi.C.MultiByteToWideChar(65001, 0, path, -1, nil, 0)
      if n <= 0 then return nil end
      local w = ffi.new("wchar_t[?]", n)
      if ffi.C.MultiByteToWideChar(65001, 0, path, -1, w, n) <= 0 then return nil end
      return w, ffi.C
    end
  end
end
local function beyond_ascii(path) return path:find("[\128-\255]") ~= nil end

local function exists(path)
  if wide and beyond_ascii(path) then
    local w, C = wide(path)
    return w ~= nil and C.GetFileAttributesW(w) ~= 0xFFFFFFFF -- (INVALID_FILE_ATTRIBUTES)
  end
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

--- Windows, a path beyond ASCII (see wide): loads the library there
--- through the wide call, and returns its file name, under which
--- ffi.load and package.loadlib then find it among the libraries loaded.
--- nil anywhere else, or when it cannot be loaded.
---@param path string
---@return string?
function M.preload(path)
  if not (wide and beyond_ascii(path)) then return nil end
  local w, C = wide((path:gsub("/", "\\")))
  if w == nil or C.LoadLibraryW(w) == nil then return nil end
  return path:match("[^/\\]+$")
end

--- This system's folder in an archive: "linux-x64", "windows-x64"...
--- (PUC Lua cannot tell its processor: `uname` answers on POSIX systems;
--- "this system" where nothing does.)
local UNAME_OS = { Linux = "linux", Darwin = "osx", FreeBSD = "bsd", OpenBSD = "bsd", NetBSD = "bsd" }
local UNAME_ARCH = { x86_64 = "x64", amd64 = "x64", aarch64 = "arm64", arm64 = "arm64", i686 = "x86", i386 = "x86" }

--- Whether this is LÖVE in a web browser (love.js: LÖVE and Lua 5.1
--- compiled to WebAssembly), where no native library can load.
function M.web()
  local love = rawget(_G, "love")
  local sys = type(love) == "table" and love.system
  local ok, name = pcall(function() return sys.getOS() end)
  return ok and name == "Web"
end

function M.system()
  if M.web() then return "web" end
  local jit = rawget(_G, "jit")
  if jit then return jit.os:lower() .. "-" .. jit.arch end
  if windows then return "windows" end
  local ok, f = pcall(io.popen, "uname -s -m 2>/dev/null")
  local line = ok and f and f:read("*l")
  if ok and f then f:close() end
  local os_name, arch = (line or ""):match("^(%S+)%s+(%S+)")
  if not os_name then return "this system" end
  return (UNAME_OS[os_name] or os_name:lower()) .. "-" .. (UNAME_ARCH[arch] or arch)
end

-- Inside LÖVE: the core's path, extracted from the archive first if the
-- game carries one; nil when none is found (LÖVE absent too).
local function in_love()
  local love = rawget(_G, "love")
  local lf = type(love) == "table" and love.filesystem
  if not lf or not lf.getInfo then return nil end
  local name = "stagehand/_core." .. M.EXT
  local packed = "stagehand/native/" .. M.system() .. "/_core." .. M.EXT
  if lf.getInfo(packed) then
    local data = lf.read(packed)
    if data and (not lf.getInfo(name) or lf.read(name) ~= data) then
      lf.createDirectory("stagehand")
      lf.write(name, data)
    end
  end
  local dir = lf.getInfo(name) and lf.getRealDirectory(name)
  if dir and exists(dir .. "/" .. name) then return dir .. "/" .. name end
  local base = lf.getSourceBaseDirectory and lf.getSourceBaseDirectory()
  if base then
    for _, p in ipairs { base .. "/" .. name, base .. "/_core." .. M.EXT } do
      if exists(p) then return p end
    end
  end
  return nil
end

-- package.searchpath, which Lua 5.1 lacks.
local searchpath = package.searchpath or function(name, path)
  local file = name:gsub("%.", package.config:sub(1, 1))
  local tried = {}
  for pattern in path:gmatch("[^;]+") do
    local candidate = pattern:gsub("%?", file)
    if exists(candidate) then return candidate end
    tried[#tried + 1] = "\n\tno file '" .. candidate .. "'"
  end
  return nil, table.concat(tried)
end

--- Windows: the Lua DLL the core at `path` imports, read from its file
--- ("lua51.dll" is LuaJIT's and Lua 5.1's, "lua54.dll" Lua 5.4's; one
--- some distributions name "lua5.1.dll" answers "lua51.dll"), or nil
--- where it names none (a core for a program that links Lua in) or the
--- file cannot be read. A core built for another Lua would load that DLL
--- beside the running one, where it can be found, and the first call
--- into it crashes the process: the backend refuses such a core unloaded.
---@param path string
---@return string?
function M.imported_lua(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local data = f:read("*a")
  f:close()
  local minor = type(data) == "string" and data:lower():match("lua5%.?(%d)%.dll")
  return minor and "lua5" .. minor .. ".dll" or nil
end

--- Windows: where require would find the C module's file (nil elsewhere,
--- or where a core linked into the program is preloaded).
---@return string?
function M.c_module_file()
  if not windows or package.loaded["stagehand._core"] ~= nil or package.preload["stagehand._core"] ~= nil then
    return nil
  end
  return (searchpath("stagehand._core", package.cpath))
end

--- The runtime running now, and the name `make env LUA=...` knows it by.
---@return string, string
function M.runtime()
  if rawget(_G, "jit") then return "LuaJIT", "luajit" end
  local v = _VERSION:match("^Lua (5%.[1-4])$")
  if v then return _VERSION, "lua" .. v end
  return _VERSION, "luajit, lua5.4, lua5.3, lua5.2 or lua5.1"
end

--- Why no core was found, for a developer to act on: which system's core
--- is wanted, the systems a LÖVE game carries cores for (a folder from
--- make love-kit, say, with Windows' and Linux' only, run on a Mac), the
--- fix, and where it was looked for (`looked`, from M.path).
---@param looked string?
---@return string
function M.missing(looked)
  local here = M.system()
  local msg = "stagehand: cannot find its native core (stagehand/_core." .. M.EXT .. ") for " .. here .. "."
  local love = rawget(_G, "love")
  local lf = type(love) == "table" and love.filesystem
  if M.web() then
    -- (nothing to build, and nowhere it was looked for is worth a line)
    return msg .. " LÖVE in a web browser (love.js) loads no native libraries: stagehand runs on its"
      .. " pure-Lua core there, and a web build of the game may leave out the cores under stagehand/native/."
  end
  if lf and lf.getDirectoryItems then
    local have = {}
    for _, d in ipairs(lf.getDirectoryItems("stagehand/native")) do
      if lf.getInfo("stagehand/native/" .. d .. "/_core." .. (d:match("^windows") and "dll" or "so")) then
        have[#have + 1] = d
      end
    end
    table.sort(have)
    msg = msg .. (#have > 0 and " The game carries cores for " .. table.concat(have, ", ") .. " under"
      .. " stagehand/native/, but none for " .. here .. ": build it on " .. here .. " (sh src/build.sh in"
      .. " stagehand's love-kit zip) and add it as stagehand/native/" .. here .. "/_core." .. M.EXT .. "."
      or " Put the stagehand folder that make love-kit makes (the Lua files and the cores) in the game's"
      .. " folder, beside main.lua.")
  else
    local _, rt = M.runtime()
    msg = msg .. " Build it (make build in stagehand's tree, or luarocks make) and put it on package.cpath:"
      .. " in stagehand's tree, eval \"$(make -s env LUA=" .. rt .. ")\" sets the paths."
  end
  -- (Lua 5.1 starts the list it returns with "\n\t", 5.4 does not; an
  -- empty package.cpath gives none)
  looked = looked and looked:gsub("^%s+", "")
  if looked == "" then looked = nil end
  return msg .. (looked and "\nLooked for it in:\n\t" .. looked or "")
end

--- The core's path, or nil and where it was looked for.
function M.path()
  local path, err = nil, "" -- (Lua 5.4 lists an empty cpath as "no file ''")
  if package.cpath ~= "" then path, err = searchpath("stagehand._core", package.cpath) end
  if path then return path end
  local found = in_love()
  if found then return found end
  if not rawget(_G, "love") then return nil, err end
  return nil, err .. (err == "" and "\n\twhere" or "\n\tnor where") .. " LÖVE's C loader looks (the save directory,"
    .. " the game's folder), nor beside the game"
end

return M
