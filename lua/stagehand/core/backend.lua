-- Folder core/ (layer 0): the seam to the native core. backend.lua picks
-- the FFI backend on LuaJIT (ffi_core.lua) or the classic C module
-- elsewhere, and the pure-Lua core (lua_core.lua, with lua_clock.lua and
-- lua_pool.lua) where neither loads; native.lua finds the core's file (a LÖVE archive's too);
-- threads_native.lua is the C module's threads' table; compat.lua is what
-- differs between runtimes. It requires nothing of stagehand's above it;
-- every layer calls it (B.check, the core's statuses, B.now_ms).
--
-- The one seam between the Lua surface and the native core. On LuaJIT the
-- FFI backend calls the core directly; elsewhere (or with
-- STAGEHAND_BACKEND=c) the classic C module does. Both expose the same
-- functions, named after the C API without its sh_ prefix, and the same
-- statuses, by the header's names (SH_OK, SH_EINVAL, SH_ENOMEM, SH_ESTATE);
-- B.check is the one place a status that is not SH_OK turns into an error.
local want = os.getenv and os.getenv("STAGEHAND_BACKEND")
if want ~= nil and want ~= "" and want ~= "ffi" and want ~= "c" and want ~= "lua" then
  error("stagehand: STAGEHAND_BACKEND must be 'ffi', 'c' or 'lua', got '" .. want .. "'", 0)
end

-- What a status means, for the message of an internal error.
local MEANING = {
  SH_EINVAL = "an argument out of range",
  SH_ENOMEM = "out of memory",
  SH_ESTATE = "not in the state the call needs",
}

local function with_statuses(M)
  local names = {}
  local walk = require("stagehand.core.compat").each
  for name in walk, MEANING do names[M[name]] = name end
  --- Raises a clear internal error unless rc is SH_OK: the core refused
  --- what the Lua side's records said it would take, a fault of
  --- stagehand's own, raised rather than left to grow. `what` says what
  --- was asked ("queue job 12"); `also_fine`, a status the caller expects
  --- at times and may ignore (named where it is passed). Out of memory is
  --- no fault of stagehand's: it raises "not enough memory", as Lua's own
  --- allocations do.
  local ENOMEM = M.SH_ENOMEM
  function M.check(rc, what, also_fine)
    if rc == 0 or rc == also_fine then return end
    if tonumber(rc) == ENOMEM then error("stagehand: not enough memory to " .. what, 0) end
    local name = names[tonumber(rc)] or "status " .. tostring(rc)
    error("stagehand: internal error: the core refused to " .. what .. " (" .. name
      .. (MEANING[name] and ": " .. MEANING[name] or "") .. ")", 0)
  end
  return M
end

-- LuaJIT that ends up on the C module without being asked to says so,
-- once a process (busted and hot reloads load this module again), and why.
local function fell_back(why)
  local reg = debug and debug.getregistry and debug.getregistry()
  local said = "stagehand: said the backend fell back"
  if type(reg) == "table" then
    if reg[said] then return end
    reg[said] = true
  end
  io.stderr:write("[stagehand] LuaJIT runs on the C module, not the FFI backend: " .. tostring(why) .. "\n")
end

-- A core linked against a newer glibc than the system's: "version
-- `GLIBC_2.34' not found". (The kit's Linux core, make love-kit, asks for
-- nothing newer than 2.17.)
local function newer_libc(err)
  local e = tostring(err)
  local v = e:match("version [`']GLIBC_([%d.]+)' not found")
  if not v then return nil end
  local path = e:match("from file '([^']+)'") or e:match("cannot load ([^:]+):") or "stagehand/_core.so"
  return "stagehand: " .. path .. " was built against a newer C library (glibc " .. v .. ") than this system has."
    .. " Build the core here (make build in stagehand's tree, or luarocks make), or use the one make love-kit"
    .. " makes, which loads on glibc 2.17 and later.\n" .. e
end

-- The pure-Lua core (lua_core.lua): asked for with STAGEHAND_BACKEND=lua,
-- or taken when no native core loads and none was asked for by name. It
-- says so once a process, with the reason the native core did not load;
-- the threads' calls raise with that reason (init.lua).
local function lua_core(why)
  local M = { why = why }
  local core = require "stagehand.core.lua_core"
  for k, v in require("stagehand.core.compat").each, core do M[k] = v end
  return with_statuses(M)
end
if want == "lua" then return lua_core("STAGEHAND_BACKEND=lua asked for the pure-Lua core") end
local function pure_lua(why)
  local reg = debug and debug.getregistry and debug.getregistry()
  local said = "stagehand: said it runs on the pure-Lua core"
  if type(reg) ~= "table" or not reg[said] then
    if type(reg) == "table" then reg[said] = true end
    local stderr = io and io.stderr
    if stderr then
      local threads = require("stagehand.core.love_work").available()
        and ", and worker pools, ports and round barriers run on LÖVE's threads; the native core did not load: "
        or "; worker threads need the native core, which did not load: "
      pcall(stderr.write, stderr, "[stagehand] runs on its pure-Lua core: jobs, keys, priorities, slots, budgets"
        .. " and stall clocks work" .. threads .. tostring(why) .. "\n")
    end
  end
  return lua_core(tostring(why))
end

-- The C module's helpers for the Lua side (fields_within, is_list, next)
-- beside the FFI backend, where it loads: the same file as the core.
local function c_helpers()
  local ok, core = pcall(require, "stagehand._core")
  if not (ok and type(core) == "table") then
    local path = require("stagehand.core.native").path()
    local open = path and package.loadlib(path, "luaopen_stagehand__core")
    ok, core = pcall(open or error, "stagehand._core")
  end
  return ok and type(core) == "table" and core or nil
end
local compat = require "stagehand.core.compat"

-- The FFI backend, or nil and why not.
local function ffi_backend()
  local ok, ffi_core = pcall(require, "stagehand.core.ffi_core")
  if not ok then return nil, ffi_core end
  local M = { helpers = c_helpers() }
  for k, v in compat.each, ffi_core do M[k] = v end
  if M.helpers then compat.use_c_next(M.helpers.next) end
  return with_statuses(M)
end

-- LuaJIT with its compiler off: LÖVE turns it off on ARM (phones, Macs
-- on Apple Silicon, single-board computers), iOS allows none, and a game
-- may call jit.off(). The FFI's calls then run in the interpreter, where a
-- job costs more instructions than through the C module (about a fifth
-- more for a pooled job: docs/performance.md), so the C module goes
-- first, and the FFI backend is taken where the C module does not load
-- (a host that links LuaJIT in without exporting its functions). Read
-- when stagehand is first required.
local jit = rawget(_G, "jit")
local interpreted = jit ~= nil and want ~= "ffi" and type(jit.status) == "function" and not jit.status()

-- (Said once the C module has loaded: when neither backend finds a core,
-- the one reason given says why, with no word of falling back.)
local ffi_why
if want ~= "c" and jit and not interpreted then
  local M, why = ffi_backend()
  if M then return M end
  if want == "ffi" then error(newer_libc(why) or why, 0) end
  ffi_why = why
end

local native = require "stagehand.core.native"

-- A C module built for another runtime fails to load with the dynamic
-- linker's "undefined symbol: lua_objlen" (a 5.1/LuaJIT build under 5.4),
-- "lua_newuserdatauv" (a 5.4 build under 5.3) and their kin: say which.
-- HAVE: the runtimes that export each function one runtime's build of the
-- core imports and another's lacks (a macro there, or new or gone); a
-- build imports nothing else that any of them lacks.
local HAVE = {}
for _, row in ipairs {
  { "luajit lua5.1", "lua_objlen lua_setfenv lua_getfenv lua_call lua_pcall lua_tonumber luaL_loadbuffer"
    .. " luaL_prepbuffer" },
  { "luajit lua5.1 lua5.2", "lua_insert lua_remove lua_replace" },
  { "luajit lua5.1 lua5.2 lua5.3", "lua_newuserdata" },
  { "luajit lua5.2 lua5.3 lua5.4", "lua_copy lua_tonumberx lua_tointegerx luaL_loadbufferx" },
  { "lua5.2 lua5.3 lua5.4", "lua_callk lua_pcallk lua_getglobal lua_rawlen luaL_prepbuffsize" },
  { "lua5.3 lua5.4", "lua_isinteger lua_rotate" },
  { "lua5.4", "lua_newuserdatauv lua_getiuservalue lua_setiuservalue" },
} do
  for name in row[2]:gmatch("%S+") do HAVE[name] = " " .. row[1] .. " " end
end
local TITLE = { luajit = "LuaJIT", ["lua5.1"] = "Lua 5.1", ["lua5.2"] = "Lua 5.2", ["lua5.3"] = "Lua 5.3",
  ["lua5.4"] = "Lua 5.4" }

-- The runtimes a core was built for (`have`, as " luajit lua5.1 "), named
-- for a message ("LuaJIT or Lua 5.1"); nil when the one running now is
-- among them.
local function built_for(have, make_name)
  if have:find(" " .. make_name .. " ", 1, true) then return nil end
  local names = {}
  for rt in have:gmatch("%S+") do names[#names + 1] = TITLE[rt] end
  return #names == 1 and names[1] or table.concat(names, ", ", 1, #names - 1) .. " or " .. names[#names]
end

local function wrong_build(err)
  local sym = tostring(err):match("undefined symbol: ([%w_]+)")
  if not sym or not sym:match("^lua") then return nil end
  local path = tostring(err):match("from file '([^']+)'") or "stagehand/_core.so"
  local name, make_name = native.runtime()
  -- (built in stagehand's tree, its folder names the runtime; elsewhere
  -- the symbol narrows it down; a function every runtime has means the
  -- build is this runtime's own)
  local tree = path:match("build/(luajit)/") or path:match("build/(lua5%.%d)/")
  local have = tree and " " .. tree .. " " or HAVE[sym]
  local built = have and built_for(have, make_name)
  if not built then
    -- Built for this runtime after all: the program that runs it links Lua
    -- in and does not export Lua's functions to the libraries it loads.
    return "stagehand: " .. path .. " needs " .. sym .. " from the Lua the program runs, and the program does not"
      .. " export it: a program that links Lua statically must export its symbols (link it with -Wl,-E, or"
      .. " -rdynamic), or link stagehand's core in and register it as package.preload[\"stagehand._core\"]"
      .. " (the guide's section on C hosts)."
  end
  return "stagehand: " .. path .. " was built for " .. built .. ", not for " .. name .. " (undefined symbol: "
    .. sym .. "). Point LUA_CPATH at a build for " .. name .. ": eval \"$(make -s env LUA=" .. make_name
    .. ")\" in stagehand's tree, or install the rock with this runtime's luarocks."
end

-- Windows: a core whose file imports another Lua's DLL (native.imported_lua)
-- is refused before it is loaded: loaded, it would call that DLL with this
-- runtime's state and crash the process, or fail with only "Module not
-- found".
local DLL_OF = { ["lua51.dll"] = " luajit lua5.1 ", ["lua52.dll"] = " lua5.2 ", ["lua53.dll"] = " lua5.3 ",
  ["lua54.dll"] = " lua5.4 " }
local function foreign_dll(path)
  local dll = path and native.imported_lua(path)
  if not DLL_OF[dll] then return nil end
  local name, make_name = native.runtime()
  local built = built_for(DLL_OF[dll], make_name)
  if not built then return nil end
  return "stagehand: " .. path .. " was built for " .. built .. " (it links " .. dll
    .. "), not for " .. name .. "; loading it would crash the program. Use a core built for " .. name
    .. " (luarocks installs one with this runtime's luarocks; make windows builds LuaJIT's and Lua 5.4's)."
end

-- A core built for another system or processor: the loader's own words
-- for it (ELF's, Mach-O's, Windows' error 193), and what would fix it.
local function wrong_system(err)
  local e = tostring(err)
  if not (e:find("invalid ELF header", 1, true) or e:find("wrong ELF class", 1, true)
      or e:find("ELF file", 1, true) or e:find("mach-o", 1, true) or e:find("Mach-O", 1, true)
      or e:find("not a valid Win32 application", 1, true) or e:find("error 193", 1, true)) then
    return nil
  end
  local path = e:match("from file '([^']+)'") or "stagehand/_core." .. native.EXT
  local detail = e:match("[^\n]*$"):gsub("^%s+", "")
  local here = native.system()
  return "stagehand: " .. path .. " is a library for another system or processor (" .. detail .. "); this is "
    .. here .. ". Build the core here (make build in stagehand's tree, or luarocks make), or ship the one built"
    .. " for " .. here .. " (a .love carries it as stagehand/native/" .. here .. "/_core." .. native.EXT .. ")."
end

-- The C module, or false and why not. (A sandbox without package.loadlib
-- or package.cpath gets its reason too, not an error.)
local function load_c()
  local foreign = foreign_dll(native.c_module_file())
  if foreign then return false, foreign end
  local ok, C = pcall(require, "stagehand._core")
  if ok then return true, C end
  -- (Inside LÖVE, native.path writes a core the game's archive carries to
  -- the save directory; it, or one found only beside the game, is opened
  -- directly. Found nowhere, and require's own searchers found nothing
  -- either: the message says what to do rather than list Lua's paths.)
  local found, looked = native.path()
  local open, why = nil, nil
  if found and native.EXT == "dll" then
    foreign = foreign_dll(found)
    if foreign then return false, foreign end
  end
  if found then open, why = package.loadlib(found, "luaopen_stagehand__core") end
  if found and not open then -- (Windows: see native.preload)
    local name = native.preload(found)
    if name then open, why = package.loadlib(name, "luaopen_stagehand__core") end
  end
  if open then
    ok, C = pcall(open, "stagehand._core")
  elseif found then -- (in require's words, which wrong_build and wrong_system read)
    C = "error loading module 'stagehand._core' from file '" .. found .. "':\n\t" .. tostring(why)
  elseif tostring(C):find("module 'stagehand._core' not found", 1, true) then
    C = native.missing(looked)
  end
  return ok, C
end
local looked_ok, ok, C = pcall(load_c)
if not looked_ok then ok, C = false, ok end
if not ok then
  local why = wrong_build(C) or wrong_system(C) or newer_libc(C) or C
  if want == "c" then error(why, 0) end
  if interpreted then
    local M = ffi_backend()
    if M then return M end
  end
  return pure_lua(why)
end
if ffi_why then fell_back(ffi_why) end
local M = { name = "c", helpers = C }
for k, v in compat.each, C do M[k] = v end
compat.use_c_next(C.next)
return with_statuses(M)
