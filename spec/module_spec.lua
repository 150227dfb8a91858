local stagehand = require "stagehand"
local T = require "stagehand.testing"
local helpers = require "spec.helpers"

describe("stagehand", function()
  it("has a semantic VERSION", function()
    assert.matches("^%d+%.%d+%.%d+$", stagehand.VERSION)
  end)

  it("reports at least one core", function()
    local n = stagehand.cores()
    assert.is_number(n)
    assert.is_true(n >= 1 and n % 1 == 0)
  end)

  it("names the core it uses", function()
    assert.is_true(stagehand.backend == "ffi" or stagehand.backend == "c" or stagehand.backend == "lua")
    if os.getenv("STAGEHAND_BACKEND") == "lua" then
      assert.equal("lua", stagehand.backend)
    elseif os.getenv("STAGEHAND_BACKEND") == "c" or not rawget(_G, "jit")
        or (os.getenv("STAGEHAND_BACKEND") ~= "ffi" and not rawget(_G, "jit").status()) then -- (luajit -joff)
      assert.equal("c", stagehand.backend)
    else
      assert.equal("ffi", stagehand.backend)
    end
  end)
end)

describe("LuaJIT with its compiler off", function()
  -- (as LÖVE runs it on ARM, and iOS does: the FFI's calls are interpreted
  -- there, and the C module, the same file, costs less a job)
  if not rawget(_G, "jit") then return end
  local function backend_of(pre, env)
    local out = io.popen((env or "STAGEHAND_BACKEND=") .. " luajit " .. " -e '" .. pre
      .. "; local s = require \"stagehand\"; print(\"backend \" .. s.backend)' 2>&1"):read("*a")
    return out
  end

  it("takes the C module when the compiler is off, and the FFI backend when it is on", function()
    assert.equal("backend c\n", backend_of("jit.off()"))
    assert.equal("backend ffi\n", backend_of("jit.on()"))
  end)

  it("still takes the FFI backend when asked for by name", function()
    assert.equal("backend ffi\n", backend_of("jit.off()", "STAGEHAND_BACKEND=ffi"))
  end)

  it("takes the FFI backend, saying nothing, when the C module does not load", function()
    -- (a host that links LuaJIT in without exporting its functions: the
    -- dynamic linker refuses the C module; the FFI needs none of them)
    local refuse = "package.loadlib = function() return nil, \"undefined symbol: lua_settop\" end"
      .. "; package.preload[\"stagehand._core\"] = function() error(\"undefined symbol: lua_settop\") end"
    assert.equal("backend ffi\n", backend_of("jit.off(); " .. refuse))
  end)
end)

describe("the module names from before the folders", function()
  it("still load, each as the module that took its place", function()
    local n = 0
    local files = io.popen("find lua/stagehand -mindepth 2 -name '*.lua' | sort")
    for path in files:lines() do
      local folder, name = path:match("^lua/stagehand/([%w_]+)/([%w_]+)%.lua$")
      local old = "stagehand." .. name
      if folder ~= "driver" and package.preload[old] then
        n = n + 1
        local loads, mod = pcall(require, "stagehand." .. folder .. "." .. name)
        if loads then
          assert.equal(mod, require(old), old)
        else -- (the FFI backend, on a runtime with no FFI: the old name fails alike)
          assert.is_false(pcall(require, old), old)
        end
      end
    end
    files:close()
    assert.equal(42, n) -- (every module of the flat folder they came from)
    assert.equal(require "stagehand.wait.slots", require "stagehand.slots")
    assert.equal(require "stagehand.engine.engine", require "stagehand.engine")
  end)

  it("leave a module of the game's own under an old name alone", function()
    local own = { "the game's own" }
    package.loaded["stagehand.nest"] = nil
    package.preload["stagehand.nest"] = function() return own end
    package.loaded.stagehand = nil -- (stagehand loaded again: it registers the names as it loads)
    require "stagehand"
    assert.equal(own, require "stagehand.nest")
    assert.equal(require "stagehand.engine.engine", require "stagehand.engine")
    package.loaded["stagehand.nest"], package.preload["stagehand.nest"] = nil, nil
    package.loaded.stagehand = stagehand
  end)
end)

describe("the rockspec", function()
  it("lists every module under lua/, each at its own path", function()
    local fh = assert(io.open("rockspec/stagehand-scm-1.rockspec", "rb"))
    local text = fh:read("*a")
    fh:close()
    local listed = {}
    for name, path in text:gmatch('%["([%w%._]+)"%]%s*=%s*"(lua/[^"]+)"') do listed[path] = name end
    local files = io.popen("find lua -name '*.lua' | sort")
    local n = 0
    for path in files:lines() do
      n = n + 1
      local name = path:gsub("^lua/", ""):gsub("%.lua$", ""):gsub("/init$", ""):gsub("/", ".")
      assert.equal(name, listed[path], path .. " is not in the rockspec as " .. name)
    end
    files:close()
    assert.is_true(n > 10)
  end)
end)

describe(".new", function()
  it("defaults to the luv driver when luv loads", function()
    local orch = stagehand.new()
    assert.equal("luv", orch.driver.name)
    orch:close()
  end)

  it("takes a manual driver and an injected clock", function()
    local clock = T.clock(500)
    local orch = stagehand.new { driver = "manual", clock = clock }
    local h = orch:run("sleeper", function(job) job:sleep(100) return "woke" end)
    assert.equal(100, orch:next_wake())
    clock:advance(100)
    orch:step()
    assert.same({ "done", "woke" }, { h:result() })
  end)

  local bad = {
    { { nope = 1 }, "nope" },
    { { driver = "sdl" }, "driver" },
    { { clock = 5 }, "clock" },
    { { stall_ms = 0 }, "stall_ms" },
    { { stall_ms = -1 }, "stall_ms" },
    { { stall_ms = "20" }, "stall_ms" },
    { { check_ms = 0 }, "check_ms" },
    { { remember = -1 }, "remember" },
    { { remember = 2.5 }, "remember" },
    { { slice_ms = -1 }, "slice_ms" },
    { { ranks = {} }, "ranks" },
    { { ranks = { "a", "a" } }, "ranks" },
    { { ranks = { "a", 3 } }, "ranks" },
    { { default_priority = "urgent" }, "default_priority" },
    { { ranks = { "now", "later" }, default_priority = "scene" }, "default_priority" },
    { { pools = { dressing = -1 } }, "pools" },
    { { pools = { dressing = 1.5 } }, "pools" },
    -- (past the core's counts: these once made a pool of capacity 0, which
    -- held every job that asked until it stalled)
    { { pools = { dressing = 2 ^ 31 } }, "pools" },
    { { pools = { dressing = 2 ^ 24 } }, "pools" },
    { { pools = { dressing = math.huge } }, "pools" },
    { { pools = 4 }, "pools" },
    { { log = "stderr" }, "log" },
  }
  for _, case in ipairs(bad) do
    it("rejects a bad '" .. case[2] .. "' naming the field", function()
      local ok, err = pcall(stagehand.new, case[1])
      assert.is_false(ok)
      assert.matches("'" .. case[2] .. "'", err, 1, true)
      assert.matches("stagehand.new", err, 1, true)
    end)
  end

  -- With several mistakes in one table, the error names the first in
  -- sorted order: pairs' order follows string hashes, which Lua 5.4 seeds
  -- at random, so the message once changed from one run to the next.
  it("names the first of several mistakes in sorted order", function()
    local function says(pattern, fn, ...)
      local ok, err = pcall(fn, ...)
      assert.is_false(ok)
      assert.matches(pattern, err, 1, true)
    end
    local orch = T.new()
    local work = function() end
    for _, typos in ipairs {
      { "alpha", "omega", "zeta" }, { "delta", "sigma", "tau" }, { "kappa", "mu", "rho" },
      { "eta", "nu", "xi" }, { "beta", "gamma", "psi" }, { "chi", "phi", "upsilon" },
    } do
      local opts = { priority = "scene", stall_ms = 50 }
      for _, k in ipairs(typos) do opts[k] = true end
      says("'opts." .. typos[1] .. "' to run", orch.run, orch, "x", work, opts)
      says("'opts." .. typos[1] .. "' to when", orch.when, orch, "k", nil, opts)
      opts.priority = nil
      says("option '" .. typos[1] .. "' to stagehand.new", stagehand.new, opts)
      local pools = {}
      for i, k in ipairs(typos) do pools[k] = -i end
      says("for pool '" .. typos[1] .. "'", stagehand.new, { pools = pools })
    end
    says("(not both), got \"a\"", stagehand.new, { ranks = { "x", "y", b = 1, a = 2, c = 3 } })
    says("'spec.frames' to budget", orch.budget, orch, "b", { zz = 1, frames = 2, ops = 1, sprites = 3 })
    says("(no other fields), got \"x\"", orch.barrier, orch, "b", { "a", z = 1, x = 2, y = 3 })
    says("(no other fields), got 2.5", orch.barrier, orch, "b", { "a", z = 1, [2.5] = 4 }) -- (numbers first)
    -- a key of another type: booleans sort before numbers and strings
    says("'opts[true]' to run", orch.run, orch, "x", work, { [true] = 1, [5] = 2, zz = 3 })
    assert.equal(0, orch.nrunning) -- (nothing was started)
  end)

  it("takes a pool as large as the core counts", function()
    local orch = T.new { pools = { dressing = 2 ^ 24 - 1 } }
    assert.equal(2 ^ 24 - 1, orch:pools().dressing.capacity)
    local h = orch:run("x", function(job) job:slot("dressing")() return 1 end)
    orch:step()
    assert.same({ "done", 1 }, { h:result() })
  end)

  it("points the error at the caller's line", function()
    local ok, err = pcall(function() stagehand.new { stall_ms = -5 } end)
    assert.is_false(ok)
    assert.matches("module_spec.lua:%d+:", err)
  end)

  it("rejects options that are not a table", function()
    assert.has_error(function() stagehand.new(42) end)
  end)

  it("takes custom ranks and picks a middle default", function()
    local orch = T.new { ranks = { "now", "soon", "later" } }
    local h
    h = orch:run("x", function(job) return job:priority() end)
    assert.same({ "done", "soon" }, { h:result() })
  end)
end)

describe("a C module built for another runtime", function()
  local here = helpers.interpreter()
  local TITLE = { luajit = "LuaJIT", ["lua5.1"] = "Lua 5.1", ["lua5.2"] = "Lua 5.2", ["lua5.3"] = "Lua 5.3",
    ["lua5.4"] = "Lua 5.4" }
  local function require_from(cpath)
    local p = io.popen("STAGEHAND_BACKEND=c LUA_PATH='lua/?.lua;lua/?/init.lua' LUA_CPATH='" .. cpath .. "' "
      .. here .. " -e 'require \"stagehand\"' 2>&1")
    local out = p:read("*a")
    p:close()
    return out
  end
  for _, other in ipairs { "luajit", "lua5.4", "lua5.3", "lua5.2", "lua5.1" } do
    -- (LuaJIT and Lua 5.1 share one ABI: each loads the other's build)
    local same = other == here or (other == "luajit" and here == "lua5.1") or (other == "lua5.1" and here == "luajit")
    local so = "build/" .. other .. "/stagehand/_core.so"
    if not same then
      it("fails to load " .. other .. "'s build, naming the runtime it was built for and the fix", function()
        if not io.open(so) then error(so .. " is missing: make build makes every runtime's") end
        local out = require_from("build/" .. other .. "/?.so")
        assert.matches(so .. " was built for " .. TITLE[other] .. ", not for ", out, 1, true)
        assert.matches("undefined symbol: lua", out, 1, true) -- (lua_... or luaL_...: whichever the linker meets first)
        assert.matches("make -s env LUA=" .. here .. ")", out, 1, true)
      end)

      it("names the runtimes that have the function it lacks when " .. other .. "'s build is outside the tree",
          function()
        if not io.open(so) then error(so .. " is missing: make build makes every runtime's") end
        local dir = os.tmpname()
        os.remove(dir)
        assert(os.execute("mkdir -p " .. dir .. "/stagehand && cp " .. so .. " " .. dir .. "/stagehand/"))
        local out = require_from(dir .. "/?.so")
        os.execute("rm -rf " .. dir)
        local built = out:match("was built for (.-), not for " .. TITLE[here]:gsub("%.", "%%.") .. " %(undefined")
        assert.is_string(built, out)
        assert.matches(TITLE[other], built, 1, true)
        assert.not_matches(TITLE[here], built, 1, true)
      end)
    end
  end
end)

describe("native.imported_lua", function()
  -- (Windows: a core importing another Lua's DLL is refused unloaded;
  -- scripts/win_foreign_core_check.sh runs that under wine)
  local native = require "stagehand.core.native"
  local file_of = helpers.temp_file
  it("names the Lua DLL a core's file imports, whatever its case", function()
    local path = file_of("MZ\144\0" .. string.rep("\0", 300) .. "KERNEL32.dll\0LUA54.DLL\0lua_settop\0")
    assert.equal("lua54.dll", native.imported_lua(path))
    os.remove(path)
    path = file_of("MZ\0lua51.dll\0")
    assert.equal("lua51.dll", native.imported_lua(path))
    os.remove(path)
    path = file_of("MZ\0lua5.3.dll\0") -- (as some distributions name it)
    assert.equal("lua53.dll", native.imported_lua(path))
    os.remove(path)
  end)

  it("answers nil for a file that imports none, and for one that is not there", function()
    local path = file_of("MZ\0KERNEL32.dll\0lua_settop\0")
    assert.is_nil(native.imported_lua(path))
    os.remove(path)
    assert.is_nil(native.imported_lua(path))
  end)
end)

describe("no native core anywhere", function()
  -- Regression: LuaJIT said it fell back to the C module, then the C
  -- module's require listed Lua's search paths: two messages, and neither
  -- said what to do.
  local here = helpers.interpreter()
  local function run(backend)
    return io.popen("STAGEHAND_BACKEND=" .. backend .. " LUA_PATH='lua/?.lua;lua/?/init.lua'"
      .. " LUA_CPATH='/nowhere/?.so;/nor/here/?.so' " .. here .. " -e '"
      .. "local s = require \"stagehand\"; print(\"backend \" .. s.backend)"
      .. "; package.loaded[\"stagehand.core.backend\"] = nil; require \"stagehand.core.backend\"' 2>&1"):read("*a")
  end
  local function says_why(out)
    assert.matches("stagehand: cannot find its native core (stagehand/_core.so) for linux-x64. Build it (make build",
      out, 1, true)
    assert.matches('eval "$(make -s env LUA=' .. here .. ')"', out, 1, true)
    assert.matches("Looked for it in:\n\tno file '/nowhere/stagehand/_core.so'\n\tno file '/nor/here/stagehand/_core.so'",
      out, 1, true)
    assert.is_nil(out:find("C module, not the FFI backend", 1, true))
    assert.is_nil(out:find("module 'stagehand._core' not found", 1, true))
  end

  it("runs on the pure-Lua core, saying once why: this system, the fix, and where it looked", function()
    local out = run("")
    says_why(out)
    local _, n = out:gsub("runs on its pure%-Lua core", "")
    assert.equal(1, n, out) -- (a second load says nothing more)
    assert.matches("\nbackend lua\n", out, 1, true)
  end)

  it("fails to load with that message when the native core is asked for by name", function()
    local out = run("c")
    says_why(out)
    assert.is_nil(out:find("pure-Lua", 1, true))
    assert.is_nil(out:find("backend lua", 1, true))
  end)

  -- (pre is Lua run on the first line, before the require; cpath the
  -- LUA_CPATH; after, what runs with stagehand as s, from the second line:
  -- by default it prints the backend)
  local function run_with(pre, cpath, after)
    return io.popen("STAGEHAND_BACKEND= LUA_PATH='lua/?.lua;lua/?/init.lua' LUA_CPATH='" .. cpath .. "' " .. here .. " -e '" .. pre
      .. "\nlocal s = require \"stagehand\"; " .. (after or "print(\"backend \" .. s.backend)") .. "' 2>&1"):read("*a")
  end

  it("lists no empty search when package.cpath is empty", function()
    -- Regression: "Looked for it in:" was followed by nothing.
    local out = run_with("package.cpath = \"\"", "")
    assert.matches("stagehand: cannot find its native core (stagehand/_core.so) for linux-x64.", out, 1, true)
    assert.is_nil(out:find("Looked for it in", 1, true), out)
    assert.matches("\nbackend lua\n", out, 1, true)
  end)

  it("refuses worker threads at the game's line, saying why for a program, a game without love.thread, a browser", function()
    local function refused(pre)
      return run_with(pre, "/nowhere/?.so", "local o = s.new { driver = \"manual\" }"
        .. "\nprint(select(2, pcall(s.pool, o, { module = \"decode\" })))\nprint(select(2, pcall(s.port)))")
    end
    local out = refused("")
    assert.matches("%(command line%):3: stagehand.pool: worker threads need stagehand's native core, and this program"
      .. " runs on the pure%-Lua core: stagehand: cannot find its native core", out)
    assert.matches("%(command line%):4: stagehand.port: worker threads need stagehand's native core", out)
    out = refused("love = { system = { getOS = function() return \"Linux\" end } }")
    assert.matches("stagehand.pool: worker threads need stagehand's native core or LÖVE's love.thread, and this game"
      .. " runs on the pure-Lua core with love.thread turned off (t.modules.thread in conf.lua): ", out, 1, true)
    out = refused("love = { system = { getOS = function() return \"Web\" end } }")
    assert.matches("stagehand.pool: worker threads need stagehand's native core, and this program runs on the"
      .. " pure-Lua core: stagehand: cannot find its native core (stagehand/_core.so) for web. LÖVE in a web browser",
      out, 1, true)
  end)

  it("names the browser as the reason in LÖVE on the web (love.js), with nothing to build", function()
    -- (love.system.getOS() is "Web" there, and no native library loads)
    local out = run_with("love = { system = { getOS = function() return \"Web\" end } }", "/nowhere/?.so")
    assert.matches("stagehand: cannot find its native core (stagehand/_core.so) for web. LÖVE in a web browser"
      .. " (love.js) loads no native libraries: stagehand runs on its pure-Lua core there", out, 1, true)
    assert.is_nil(out:find("Looked for it in", 1, true), out)
    assert.is_nil(out:find("make build", 1, true), out)
    assert.is_nil(out:find("love-kit", 1, true), out)
    assert.matches("\nbackend lua\n", out, 1, true)
  end)
end)

describe("a native core built for another system or processor", function()
  it("fails to load naming what it found, this system, and the fix", function()
    local here = helpers.interpreter()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir .. "/stagehand"))
    -- (a Windows DLL's first bytes: no loader here takes it)
    local f = assert(io.open(dir .. "/stagehand/_core.so", "wb"))
    f:write("MZ\144\0\3\0\0\0" .. string.rep("\0", 120))
    f:close()
    local out = io.popen("STAGEHAND_BACKEND=c LUA_PATH='lua/?.lua;lua/?/init.lua' LUA_CPATH='" .. dir .. "/?.so' "
      .. here .. " -e 'require \"stagehand\"' 2>&1"):read("*a")
    os.execute("rm -rf " .. dir)
    assert.matches(dir .. "/stagehand/_core.so is a library for another system or processor", out, 1, true)
    assert.matches("this is linux%-x64%. Build the core here %(make build", out)
    assert.matches("stagehand/native/linux-x64/_core.so", out, 1, true)
  end)
end)
