-- How stagehand's modules fit together: each owns its state. No module
-- assigns into a table another module owns (a module required, or a table
-- read out of one); where one must tell another something, it calls a
-- function the other offers (engine.on, settle.on_wake, sources.on_moved,
-- fields.define_jobs).
local each = require("stagehand.compat").each

local function files()
  local out = {}
  for f in io.popen("ls lua/stagehand/*.lua lua/stagehand/driver/*.lua"):lines() do out[#out + 1] = f end
  table.sort(out)
  return out
end

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
end)
