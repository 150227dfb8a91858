-- The reference and the LuaLS meta file are generated from the code's
-- annotations (scripts/docgen.lua): they must be up to date, and every
-- public function must have an entry.
local stagehand = require "stagehand"
local T = require "stagehand.testing"

local helpers = require "spec.helpers"
local interpreter, read = helpers.interpreter, helpers.read

describe("the reference", function()
  it("and the meta file are what scripts/docgen.lua makes of the code now", function()
    local out = io.popen(interpreter() .. " scripts/docgen.lua --check 2>&1; echo \"exit=$?\""):read("*a")
    assert.matches("up to date", out, 1, true)
    assert.matches("exit=0", out, 1, true)
  end)

  it("has an entry for every public function", function()
    local ref = read("docs/reference.md")
    local missing = {}
    local function want(entry)
      if not ref:find("### `" .. entry, 1, true) then missing[#missing + 1] = entry end
    end
    local each = require("stagehand.core.compat").each
    local function methods(class, prefix, skip)
      local names = {}
      for name, v in each, class do
        if type(v) == "function" and not name:match("^_") and not (skip and skip[name]) then names[#names + 1] = name end
      end
      table.sort(names)
      for _, name in ipairs(names) do want(prefix .. name .. "(") end
    end
    local fields = {}
    for name in each, stagehand do fields[#fields + 1] = name end
    table.sort(fields)
    for _, name in ipairs(fields) do want("stagehand." .. name) end
    local orch = T.new { log = function() end }
    methods(getmetatable(orch), "orch:", { new = true })
    methods(require("stagehand.wait.job").Job, "job:")
    local base = { result = true, on_end = true } -- (documented once, as h:result and h:on_end)
    methods(require("stagehand.wait.handle").Handle, "h:")
    methods(getmetatable(stagehand.future()), "f:", base)
    methods(getmetatable(stagehand.all({})), "g:", base)
    local ctl = stagehand.controller()
    methods(getmetatable(ctl), "ctl:")
    methods(getmetatable(ctl.signal), "sig:")
    methods(getmetatable(orch:barrier("b", {})), "b:")
    local testing = {}
    for name, v in each, T do
      if type(v) == "function" and name ~= "engine" then testing[name] = v end
    end
    methods(testing, "T.")
    assert.same({}, missing)
  end)
end)

-- A reader copies the examples in the README and the guide: each ```lua
-- block must at least be Lua. (Lua 5.4's to-be-closed variables parse
-- only there, so a block that uses one is checked on 5.4 alone.)
describe("the documentation's Lua examples", function()
  for _, path in ipairs { "README.md", "docs/guide.md", "docs/testing.md", "docs/platforms.md", "docs/performance.md" } do
    it("compile, in " .. path, function()
      local text = read(path)
      local blocks, bad, pos = 0, {}, 1
      while true do
        local s, e, body = text:find("```lua\n(.-)\n```", pos)
        if not s then break end
        local _, newlines = text:sub(1, s):gsub("\n", "")
        if _VERSION == "Lua 5.4" or not body:find("<close>", 1, true) then
          blocks = blocks + 1
          local ok, err = (loadstring or load)(body, "=" .. path .. ":" .. (newlines + 2))
          if not ok then bad[#bad + 1] = err end
        end
        pos = e + 1
      end
      assert.same({}, bad)
      if path == "README.md" or path == "docs/guide.md" then assert.is_true(blocks > 5) end
    end)
  end
end)
