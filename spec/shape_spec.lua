-- How stagehand's modules fit together: each owns its state. No module
-- assigns into a table another module owns (a module required, or a table
-- read out of one); where one must tell another something, it calls a
-- function the other offers (engine.on, settle.on_wake, sources.on_moved,
-- fields.define_jobs).
local each = require("stagehand.core.compat").each

local function listed(cmd)
  local out = {}
  for f in io.popen(cmd):lines() do out[#out + 1] = f end
  table.sort(out)
  return out
end
local function files() return listed("find lua/stagehand -name '*.lua'") end

local read = require("spec.helpers").read

describe("stagehand's modules", function()
  it("never assign into another module's tables", function()
    local found = {}
    for _, path in ipairs(files()) do
      local foreign = {} -- local name -> what it is
      local n = 0
      for line in (read(path) .. "\n"):gmatch("([^\n]*)\n") do
        n = n + 1
        if not line:match("^%s*%-%-") then
          local name, mod = line:match('^%s*local ([%w_]+) = require%(?%s*["\'](stagehand[%w_%.]*)["\']')
          if name then foreign[name] = mod end
          -- (a table read out of such a module is that module's too)
          local alias, from = line:match("^%s*local ([%w_]+) = ([%w_]+)%.[%w_]+%s*$")
          if alias and foreign[from] then foreign[alias] = foreign[from] end
          for local_name, owner in each, foreign do
            local lhs = line:match("^%s*(" .. local_name .. "%.[%w_%.]+)[%s,][^=]*=[^=]")
              or line:match("^%s*(" .. local_name .. "%.[%w_%.]+)=[^=]")
              or line:match("^%s*(" .. local_name .. "%[[^%]]+%])%s*=[^=]")
            if lhs then found[#found + 1] = path .. ":" .. n .. ": " .. lhs .. " (" .. owner .. ")" end
          end
        end
      end
    end
    assert.same({}, found)
  end)

  it("are each at most 700 lines, so the file list reads as the architecture", function()
    local long = {}
    for _, path in ipairs(files()) do
      local n = select(2, read(path):gsub("\n", "\n"))
      if n > 700 then long[#long + 1] = path .. " (" .. n .. " lines)" end
    end
    assert.same({}, long)
  end)

  -- The folders' layers, as the head of each folder's main file states
  -- them ("Folder wait/ (layer 3)"; lua/stagehand/ itself in init.lua).
  local function layers()
    local of = {}
    for _, path in ipairs(files()) do
      local head = read(path):match("^(.-)\n[^%-]") or ""
      local folder, n = head:match("Folder ([%w_]+)/ %(layer (%d+)%)")
      if folder then
        assert.is_nil(of[folder], "two heads state folder " .. folder .. "/'s layer")
        of[folder] = tonumber(n)
      end
      local top = head:match("^%-%- lua/stagehand/ %(layer (%d+)%)")
      if top then of["."] = tonumber(top) end
    end
    return of
  end

  it("are in folders whose main files state their layer", function()
    local of = layers()
    local missing = {}
    for _, path in ipairs(files()) do
      local folder = path:match("^lua/stagehand/([%w_]+)/") or "."
      if not of[folder] then missing[folder] = true end
    end
    assert.same({}, missing)
    assert.equal(0, of.core)
    assert.is_true(of["."] > of.driver and of.driver > of.threads and of.threads > of.wait)
  end)

  it("require only their own folder and the layers below it", function()
    local of, bad = layers(), {}
    local function folder_of(name) -- (a module's name: stagehand.wait.slots, stagehand.testing)
      local f = name:match("^stagehand%.([%w_]+)%.")
      if f and of[f] then return f end
      return "."
    end
    for _, path in ipairs(files()) do
      local mine = path:match("^lua/stagehand/([%w_]+)/") or "."
      local n = 0
      for line in (read(path) .. "\n"):gmatch("([^\n]*)\n") do
        n = n + 1
        for name in line:gmatch('require%(?%s*["\'](stagehand[%w_%.]*)["\']') do
          if name ~= "stagehand._core" then
            local theirs = folder_of(name)
            if theirs ~= mine and of[theirs] >= of[mine] then
              bad[#bad + 1] = path .. ":" .. n .. ": " .. name .. " (layer " .. of[theirs] .. " from " .. of[mine] .. ")"
            end
          end
        end
      end
    end
    assert.same({}, bad)
  end)
end)

describe("stagehand's C files", function()
  it("are each at most 800 lines, one concern a file", function()
    local long = {}
    for _, path in ipairs(listed("find csrc -name '*.c' -o -name '*.h'")) do
      local n = select(2, read(path):gsub("\n", "\n"))
      if n > 800 then long[#long + 1] = path .. " (" .. n .. " lines)" end
    end
    assert.same({}, long)
  end)

  it("keep the core free of Lua, and the platform layer under it", function()
    local bad = {}
    for _, path in ipairs(listed("find csrc/core csrc/platform -name '*.c' -o -name '*.h'")) do
      local src = read(path)
      if src:find('#include "lua', 1, true) or src:find('#include "lauxlib', 1, true) then
        bad[#bad + 1] = path .. " includes Lua"
      end
      if path:match("^csrc/platform/") and src:find('#include "[^"]*core/', 1) and not path:match("sh_platform%.h$")
        and not src:find('#include "../../core/stagehand.h"', 1, true) then
        bad[#bad + 1] = path .. " reaches into the core"
      end
    end
    assert.same({}, bad)
  end)
end)
