-- A small runner for stagehand's busted specs where busted itself cannot
-- run: Windows, under wine, whose Lua has none of busted's C helpers (lfs,
-- term, system). It gives the spec files what they use of busted:
-- describe, it, before_each, after_each, setup, teardown, and luassert's assert (pure Lua,
-- loaded from Debian's copy), each file insulated as busted insulates it
-- (the modules it loaded are forgotten after it). It prints each failure
-- and one line at the end: "N passed, N failed".
--
--   luajit.exe spec_runner.lua [--lua-dir=DIR] spec/a_spec.lua spec/b_spec.lua ...
local files, lua_dir = {}, nil
for i = 1, #arg do
  local v = arg[i]
  local dir = v:match("^%-%-lua%-dir=(.+)$")
  if dir then lua_dir = dir else files[#files + 1] = v end
end
local sep = package.config:sub(1, 1)
if lua_dir then
  package.path = package.path .. ";" .. lua_dir .. sep .. "?.lua;" .. lua_dir .. sep .. "?" .. sep .. "init.lua"
end

local assert_lib = require "luassert"
-- (stagehand.testing checks for busted to know it runs specs)
package.loaded.busted = package.loaded.busted or { runner = "scripts/spec_runner.lua" }
local say = require "say"

local passed, failed = 0, 0
local failures = {}

local function run_file(path)
  local loaded = {}
  for k in pairs(package.loaded) do loaded[k] = true end
  local saved = { describe = rawget(_G, "describe"), it = rawget(_G, "it"), before_each = rawget(_G, "before_each"),
    after_each = rawget(_G, "after_each"), setup = rawget(_G, "setup"), teardown = rawget(_G, "teardown"),
    assert = rawget(_G, "assert") }

  -- A describe block: its name, its hooks, and its children (tests and
  -- blocks) in the order written.
  local root = { name = nil, before = {}, after = {}, setup = {}, teardown = {}, children = {} }
  local current = root
  rawset(_G, "describe", function(name, fn)
    local block = { name = name, parent = current, before = {}, after = {}, setup = {}, teardown = {}, children = {} }
    current.children[#current.children + 1] = block
    local outer = current
    current = block
    fn()
    current = outer
  end)
  rawset(_G, "it", function(name, fn)
    current.children[#current.children + 1] = { name = name, test = fn, parent = current }
  end)
  rawset(_G, "before_each", function(fn) current.before[#current.before + 1] = fn end)
  rawset(_G, "after_each", function(fn) current.after[#current.after + 1] = fn end)
  -- (once a block, around its tests)
  rawset(_G, "setup", function(fn) current.setup[#current.setup + 1] = fn end)
  rawset(_G, "teardown", function(fn) current.teardown[#current.teardown + 1] = fn end)
  rawset(_G, "assert", assert_lib)

  local chunk, err = loadfile(path)
  local ok
  if chunk then ok, err = pcall(chunk) end
  if not chunk or not ok then
    failed = failed + 1
    failures[#failures + 1] = path .. ": " .. tostring(err)
  else
    local function full_name(node)
      local parts = {}
      while node do
        if node.name then table.insert(parts, 1, node.name) end
        node = node.parent
      end
      return table.concat(parts, " ")
    end
    local function run(block)
      for _, h in ipairs(block.setup) do
        local ok2, msg2 = xpcall(h, debug.traceback)
        if not ok2 then
          failed = failed + 1
          failures[#failures + 1] = path .. ": " .. full_name(block) .. " (setup)\n" .. tostring(msg2)
          return
        end
      end
      for _, child in ipairs(block.children) do
        if child.test then
          -- Hooks from the outermost block in, and after them from the innermost out.
          local chain = {}
          local b = block
          while b do
            table.insert(chain, 1, b)
            b = b.parent
          end
          local good, msg = true, nil
          for _, c in ipairs(chain) do
            for _, h in ipairs(c.before) do
              if good then good, msg = xpcall(h, debug.traceback) end
            end
          end
          if good then good, msg = xpcall(child.test, debug.traceback) end
          for i = #chain, 1, -1 do
            for _, h in ipairs(chain[i].after) do
              local ok2, msg2 = xpcall(h, debug.traceback)
              if good and not ok2 then good, msg = false, msg2 end
            end
          end
          if good then
            passed = passed + 1
            io.write(".")
          else
            failed = failed + 1
            io.write("F")
            failures[#failures + 1] = path .. ": " .. full_name(child) .. "\n" .. tostring(msg)
          end
          io.flush()
        else
          run(child)
        end
      end
      for _, h in ipairs(block.teardown) do
        local ok2, msg2 = xpcall(h, debug.traceback)
        if not ok2 then
          failed = failed + 1
          failures[#failures + 1] = path .. ": " .. full_name(block) .. " (teardown)\n" .. tostring(msg2)
        end
      end
    end
    run(root)
  end
  for k, v in pairs(saved) do rawset(_G, k, v) end
  for k in pairs(package.loaded) do
    if not loaded[k] then package.loaded[k] = nil end
  end
end

for _, f in ipairs(files) do run_file(f) end
io.write("\n")
for _, f in ipairs(failures) do print("FAILED " .. f .. "\n") end
local _ = say -- (luassert's messages come through it)
print(string.format("%d passed, %d failed", passed, failed))
os.exit(failed == 0 and 0 or 1)
