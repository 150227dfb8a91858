-- luacheck (Debian lua-check): `make test` runs it over lua/, spec/,
-- bench/ and examples/, and wants no warnings.
std = "max" -- Lua 5.1 to 5.4 and LuaJIT: stagehand runs on all three
self = false -- a method need not use its self
max_line_length = 120
files["spec/"] = {
  std = "+busted",
  globals = { "io" }, -- (specs that check what reaches stderr swap io.stderr)
  max_line_length = 140, -- (a spec's name is a sentence)
}
-- A pairs loop can end early on Debian's LuaJIT: walk tables with
-- require("stagehand.core.compat").each (lua/stagehand/core/compat.lua says why).
files["lua/"] = { not_globals = { "pairs" } }

-- The LÖVE example runs inside LÖVE, whose `love` global it fills in.
files["examples/love"] = { globals = { "love" } }
files["spec/love"] = { std = "max", globals = { "love" }, max_line_length = 120 }
files["spec/love_pure"] = { std = "max", globals = { "love" }, max_line_length = 120 }
files["spec/love_luv"] = { std = "max", globals = { "love" }, max_line_length = 120 }
files["spec/love_guide"] = { std = "max", globals = { "love" }, max_line_length = 120 }
files["spec/love_busted"] = { std = "max", globals = { "love", "arg" }, max_line_length = 120 }
-- (the threads soak inside LÖVE hands the soak its seed through `arg`)
files["spec/soak/love"] = { std = "max", globals = { "love", "arg" }, max_line_length = 120 }
files["scripts/textures"] = { globals = { "love" } }
files["bench/love"] = { globals = { "love" } }
