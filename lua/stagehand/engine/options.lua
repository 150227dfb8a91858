-- Checking what callers hand in: every mistake raises at the call that was
-- wrong, naming the argument.
local M = {}

local function callable(v)
  if type(v) == "function" then return true end
  local mt = getmetatable(v)
  return type(mt) == "table" and mt.__call ~= nil
end
M.callable = callable

local show = require("stagehand.engine.errors").show
local quote = require("stagehand.engine.errors").quote
local each = require("stagehand.core.compat").each
local is_list_c -- (the C module's is_list, where it is loaded: set below with fields_within)
local function describe(v)
  if type(v) == "string" then return quote(v, 60) end
  return show(v)
end
M.describe = describe

--- The path of a field of a caller's table, for an error: `opts.stall`,
--- `opts["two words"]`, `opts[3]`, `opts[true]`, `opts[a table]` (with no
--- root: `stall`, `[3]`). Never tostring on a key: its __tostring may raise or return a
--- table.
function M.field(root, k)
  if type(k) == "string" and k:match("^[%a_][%w_]*$") then return root and root .. "." .. k or k end
  local inner = ((type(k) == "number" or type(k) == "boolean") and show(k)) or (type(k) == "string" and quote(k, 40))
    or "a " .. type(k)
  return (root or "") .. "[" .. inner .. "]"
end

-- (errors.raise, not error: the position named is the game's line even
-- when stagehand's own frames, or a tail call, lie between.)
local raise = require("stagehand.engine.errors").raise

function M.fail(fn, arg, expected, got, level, hint)
  raise("bad argument '" .. arg .. "' to " .. fn .. ": expected " .. expected .. ", got " .. describe(got)
    .. (hint or ""), (level or 2) + 1)
end

--- For an orchestrator argument that is not one: what the caller most
--- likely did (stagehand.pool given its options first, stagehand.spawn
--- its "module.function" first), said after the message; or nil.
function M.orch_hint(fn, got)
  if fn == "stagehand.pool" and type(got) == "table" and (rawget(got, "module") ~= nil or rawget(got, "source") ~= nil)
  then
    return " (the options come second: stagehand.pool(orch, opts))"
  elseif fn == "stagehand.spawn" and type(got) == "string" and got:find(".", 1, true) then
    return " (the orchestrator comes first: stagehand.spawn(orch, \"module.function\", ...))"
  end
end

--- A label that is not one (orch:run, orch:newest). Given a function, the
--- work most likely came first, as other libraries take it: say so.
function M.bad_label(fn, label)
  local hint = type(label) == "function" and (fn == "newest" and
    " (a name, then a label: orch:newest(name, label, work, opts))" or
    " (the label comes first: orch:" .. fn .. "(label, work, opts))") or nil
  M.fail(fn, "label", "a non-empty string", label, 3, hint)
end

--- A method called on something other than its object: most often a dot
--- where a colon belongs (`orch.run("Loading", work)` for `orch:run(...)`),
--- which shifts every argument by one. `method` is written as called
--- ("orch:run"); `level` as for error, from the caller of bad_self.
function M.bad_self(method, expected, got, level)
  raise("bad self to " .. method .. ": expected " .. expected .. ", got " .. describe(got)
    .. " (call it with a colon: " .. method .. "(...))", (level or 2) + 1)
end

local function positive(v) return type(v) == "number" and v > 0 and v < math.huge end
-- A stall time: a number > 0, or math.huge for a job that never stalls by
-- its own clock.
local function stall_time(v) return type(v) == "number" and v > 0 end
M.STALL_EXPECTED = "a number > 0 (math.huge: never stall)"

-- The largest slot pool capacity and per-step ops budget: the core counts
-- in 32-bit integers, and no more jobs than its 2^24 ids can run at once,
-- so this many is as good as unbounded.
M.MAX_COUNT = 16777215 -- (2^24 - 1, written out: an integer on Lua 5.4)

--- Whether v is a whole number from lo to MAX_COUNT.
function M.count_from(v, lo)
  return type(v) == "number" and v >= lo and v <= M.MAX_COUNT and v % 1 == 0
end

-- Ranks: priority names, aliases for numbers (higher first). A list maps
-- its names 50 apart, the last to 0 (the default list is visible = 100,
-- scene = 50, background = 0); a table gives each name its number. Inside,
-- a rank is the number negated (lower goes first, as the core's pools
-- order their groups): o.rank_of[name] is that, o.ranks the names from
-- highest to lowest (for messages), o.rank_list[i] the rank of o.ranks[i]
-- (a rank shows as the first name in that order that has it), o.default_rank
-- the rank of a caller that names no priority. (A list, not a table keyed by
-- rank: LuaJIT aborts a trace that looks up a negative integer key.)
M.RANK_STEP = 50

local function rank_key(v)
  v = -v
  if v == 0 then v = 0 end -- (-0 and 0 are one key)
  return v
end
M.rank_key = rank_key

function M.ranks(o, ranks, dp, bad_option)
  -- One call deeper than the caller's own checks: the error still points at
  -- the line that called stagehand.new.
  local function bad(field, expected, got) bad_option(field, expected, got, 2) end
  if ranks == nil then ranks = { "visible", "scene", "background" } end
  if type(ranks) ~= "table" or each(ranks) == nil then
    bad("ranks", "a non-empty list of rank names, or a table of names to numbers", ranks)
  end
  local rank_of, names = {}, {}
  if ranks[1] ~= nil then
    local n = #ranks
    for i = 1, n do
      local r = ranks[i]
      if type(r) ~= "string" or r == "" then bad("ranks", "a list of non-empty strings", r) end
      if rank_of[r] then bad("ranks", "distinct names", r) end
      rank_of[r] = rank_key((n - i) * M.RANK_STEP)
      names[i] = r
    end
    local extra = M.first_non_list_key(ranks)
    if extra ~= nil then bad("ranks", "a list of names, or a table of names to numbers (not both)", extra) end
  else
    for _, name in ipairs(M.sorted_keys(ranks)) do
      local v = ranks[name]
      if type(name) ~= "string" or name == "" then bad("ranks", "rank names that are non-empty strings", name) end
      if type(v) ~= "number" or v ~= v then
        bad("ranks", "a number for rank '" .. name .. "' (higher first)", v)
      end
      rank_of[name] = rank_key(v)
      names[#names + 1] = name
    end
    table.sort(names, function(a, b)
      if rank_of[a] ~= rank_of[b] then return rank_of[a] < rank_of[b] end
      return a < b
    end)
  end
  local rank_list = {}
  for i = 1, #names do rank_list[i] = rank_of[names[i]] end
  o.ranks, o.rank_of, o.rank_list = names, rank_of, rank_list
  if dp == nil then dp = rank_of.scene and "scene" or names[math.ceil(#names / 2)] end
  if type(dp) == "number" and dp == dp then
    o.default_rank = rank_key(dp)
  elseif type(dp) == "string" and rank_of[dp] then
    o.default_rank = rank_of[dp]
  else
    bad("default_priority", "one of the ranks (" .. table.concat(names, ", ") .. ") or a number", dp)
  end
end

-- Keys of a caller's table in a fixed order, whatever their types: strings
-- and numbers by value, others by type, then by what tostring shows.
local function key_before(a, b)
  local ta, tb = type(a), type(b)
  if ta ~= tb then return ta < tb end
  if ta == "string" or ta == "number" then return a < b end
  return tostring(a) < tostring(b)
end

--- The keys of t in key_before's order (for messages and checks that must
--- not follow pairs' order: Lua 5.4 seeds its string hashes at random, so
--- that order changes from process to process).
function M.sorted_keys(t)
  local ks = {}
  for k in each, t do ks[#ks + 1] = k end
  table.sort(ks, key_before)
  return ks
end

--- The first key of t in sorted order for which bad(k) is true, or nil: the
--- field an error names, so a table with two mistakes names the same one on
--- every run.
function M.first_key(t, bad)
  local ks = M.sorted_keys(t)
  for i = 1, #ks do
    if bad(ks[i]) then return ks[i] end
  end
end

--- The first key of t in sorted order that is not an index of its list
--- (1 to #t), or nil. A list, the usual case, is not sorted.
-- (The closure over n is made in a function of its own, reached only
-- once a key is found: LuaJIT closes upvalues at every return of a
-- function that makes one, and compiles no trace through that.)
local function not_index(k, n) return type(k) ~= "number" or k % 1 ~= 0 or k < 1 or k > n end
local function first_not_index(t, n)
  return M.first_key(t, function(k) return not_index(k, n) end)
end
function M.first_non_list_key(t)
  if is_list_c and is_list_c(t) then return nil end
  local n = #t
  for k in each, t do
    if not_index(k, n) then return first_not_index(t, n) end
  end
end

-- How many one-letter edits turn a into b (both short: option names).
local function edits(a, b)
  local prev = {}
  for j = 0, #b do prev[j] = j end
  for i = 1, #a do
    local cur = { [0] = i }
    for j = 1, #b do
      local cost = a:byte(i) == b:byte(j) and 0 or 1
      cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
    end
    prev = cur
  end
  return prev[#b]
end

--- For an unknown option `k`: the known one (of the set `fields`) it most
--- likely meant, said after the message (" (did you mean 'stall_ms'?)"),
--- or nil. A known name that starts with k, or that k starts with, or one
--- or two letters away from it.
function M.meant(k, fields)
  if type(k) ~= "string" or k == "" then return nil end
  local best, best_d
  for _, name in ipairs(M.sorted_keys(fields)) do
    local d
    if name == k then
      d = nil -- (known, but not taken here: when has no key)
    elseif type(name) == "string" and (name:sub(1, #k) == k or k:sub(1, #name) == name) then
      d = 0
    elseif type(name) == "string" and #k <= 40 then
      d = edits(k:lower(), name)
      if d > 2 or d >= #name then d = nil end
    end
    if d and (not best_d or d < best_d) then best, best_d = name, d end
  end
  return best and " (did you mean '" .. best .. "'?)" or nil
end

-- The unknown field of a caller's table, if it has any (see first_key).
local function first_unknown(t, fields, allow_key)
  return M.first_key(t, function(k) return not fields[k] or (k == "key" and not allow_key) end)
end

local FIELDS = {
  driver = true, clock = true, stall_ms = true, check_ms = true, remember = true,
  slice_ms = true, ranks = true, default_priority = true, pools = true, log = true,
}

--- Validates stagehand.new's options; returns a table of settled values.
function M.new_options(opts, has_luv)
  local function bad(field, expected, got, deeper, hint)
    error("bad option '" .. field .. "' to stagehand.new: expected " .. expected .. ", got " .. describe(got)
      .. (hint or ""), 4 + (deeper or 0))
  end
  if opts == nil then opts = {} end
  if type(opts) ~= "table" then
    error("bad argument 'options' to stagehand.new: expected a table, got " .. type(opts), 3)
  end
  local unknown = first_unknown(opts, FIELDS)
  if unknown ~= nil then
    bad(M.field(nil, unknown), "a known option (unknown field)", unknown, nil, M.meant(unknown, FIELDS))
  end
  local o = {}
  local driver = opts.driver
  if driver == nil then driver = has_luv() and "luv" or "manual" end
  if driver ~= "luv" and driver ~= "manual" then bad("driver", "\"luv\" or \"manual\"", driver) end
  if driver == "luv" and not has_luv() then bad("driver", "\"manual\" (luv cannot be loaded here)", driver) end
  o.driver = driver
  if opts.clock ~= nil and not callable(opts.clock) then bad("clock", "a function returning ms", opts.clock) end
  o.clock = opts.clock
  o.stall_ms = opts.stall_ms or 20000
  if not stall_time(o.stall_ms) then bad("stall_ms", M.STALL_EXPECTED, opts.stall_ms) end
  o.check_ms = opts.check_ms or 1000
  if not positive(o.check_ms) then bad("check_ms", "a number > 0", opts.check_ms) end
  o.remember = opts.remember or 256
  if type(o.remember) ~= "number" or o.remember < 0 or o.remember % 1 ~= 0 or o.remember == math.huge then
    bad("remember", "a whole number >= 0 (0: remember nothing)", opts.remember)
  end
  o.slice_ms = opts.slice_ms or 8
  local slice = o.slice_ms
  if type(slice) ~= "number" or slice ~= slice or slice < 0 or slice == math.huge then
    bad("slice_ms", "a number >= 0", opts.slice_ms)
  end
  M.ranks(o, opts.ranks, opts.default_priority, bad)
  local pools = opts.pools or {}
  if type(pools) ~= "table" then bad("pools", "a table {name = capacity}", pools) end
  local names = M.sorted_keys(pools)
  for i = 1, #names do
    local name = names[i]
    local cap = pools[name]
    if type(name) ~= "string" or name == "" then bad("pools", "pool names that are non-empty strings", name) end
    if not M.count_from(cap, 0) then
      bad("pools", "a capacity for pool '" .. name .. "' (a whole number from 0 to " .. M.MAX_COUNT .. ")", cap)
    end
  end
  o.pools, o.pool_names = pools, names
  if opts.log ~= nil and not callable(opts.log) then bad("log", "a function(message)", opts.log) end
  o.log = opts.log
  return o
end

local RUN_FIELDS = { key = true, signal = true, stall_ms = true, priority = true, reuse = true, phase = true }
local WHEN_FIELDS = { signal = true, stall_ms = true, priority = true }

-- Whether every field of `opts` is in the set `fields` (pool:run's check).
-- LuaJIT compiles neither a loop over `next` nor a call of it (a loop
-- aborts the caller's trace; each call ends one), so the C module walks the
-- table where it is loaded; run's own check is unrolled, below.
local function lua_fields_within(opts, fields)
  for k in each, opts do
    if not fields[k] then return false end
  end
  return true
end
do
  local core = require("stagehand.core.backend").helpers
  M.fields_within = core and core.fields_within or lua_fields_within
  is_list_c = core and core.is_list or nil
end

-- Raises for the unknown field of a run's opts that sorts first.
local function unknown_run_field(opts, fn, allow_key, lv)
  local k = M.first_key(opts, function(f)
    return not RUN_FIELDS[f] or ((f == "key" or f == "reuse" or f == "phase") and not allow_key)
  end)
  M.fail(fn, M.field("opts", k), "a known option (unknown field)", k, lv + 1,
    M.meant(k, allow_key and RUN_FIELDS or WHEN_FIELDS))
end

-- The same check unrolled for run's six known fields: a run's table has
-- a few fields, and each call of `next` stitches the trace where the C
-- module's walk costs a call through the Lua API (`make bench-count`: 800
-- instructions more a job). A seventh field is unknown.
-- (`each`: next, or what stands for it where LuaJIT #829 makes a compiled
-- next unsafe: compat.lua.)
local function fields_within_unrolled(opts, fields)
  local k = each(opts)
  if k == nil then return true elseif not fields[k] then return false end
  k = each(opts, k)
  if k == nil then return true elseif not fields[k] then return false end
  k = each(opts, k)
  if k == nil then return true elseif not fields[k] then return false end
  k = each(opts, k)
  if k == nil then return true elseif not fields[k] then return false end
  k = each(opts, k)
  if k == nil then return true elseif not fields[k] then return false end
  k = each(opts, k)
  if k == nil then return true elseif not fields[k] then return false end
  return each(opts, k) == nil
end

-- Where a compiled next is unsafe (LuaJIT #829: compat.lua), one call of
-- the C module's walk costs less than the unrolled check's calls of its
-- next, each of which a trace stitches around.
local fields_check = fields_within_unrolled
if require("stagehand.core.compat").next_unsafe and M.fields_within ~= lua_fields_within then
  fields_check = M.fields_within
end

--- Validates run's (or when's, with allow_key false) opts against the
--- orchestrator `o`. `depth` counts the calls between the public method
--- and this one (0 when the method calls it itself), so errors name the
--- method's caller.
function M.run_options(o, opts, fn, is_signal, allow_key, depth)
  if opts == nil then return nil end
  local lv = 3 + (depth or 0)
  if type(opts) ~= "table" then M.fail(fn, "opts", "a table", opts, lv) end
  if not fields_check(opts, allow_key and RUN_FIELDS or WHEN_FIELDS) then
    -- (a Handle or Future passed where the options go, its own fields
    -- named as unknown options, read as nonsense)
    if getmetatable(opts) ~= nil then M.fail(fn, "opts", "a plain table of options", opts, lv) end
    unknown_run_field(opts, fn, allow_key, lv)
  end
  if opts.phase ~= nil and (type(opts.phase) ~= "string" or opts.phase == "") then
    M.fail(fn, "opts.phase", "a non-empty string (a phase of the load tracker)", opts.phase, lv)
  end
  if opts.reuse ~= nil and type(opts.reuse) ~= "boolean" then
    M.fail(fn, "opts.reuse", "a boolean", opts.reuse, lv)
  end
  if opts.reuse and opts.key == nil then
    M.fail(fn, "opts.reuse", "false or nil without opts.key (get-or-load needs a key)", opts.reuse, lv)
  end
  if opts.key ~= nil and (type(opts.key) ~= "string" or opts.key == "") then
    M.fail(fn, "opts.key", "a non-empty string", opts.key, lv)
  end
  if opts.signal ~= nil and not is_signal(opts.signal) then
    M.fail(fn, "opts.signal", "a Signal (stagehand.controller().signal)", opts.signal, lv)
  end
  if opts.stall_ms ~= nil and not stall_time(opts.stall_ms) then
    M.fail(fn, "opts.stall_ms", M.STALL_EXPECTED, opts.stall_ms, lv)
  end
  local p = opts.priority
  if p ~= nil and not M.is_priority(o, p) then M.bad_priority(o, fn, "opts.priority", p, lv) end
  return opts
end

--- Whether p is a priority: a rank name, a number (not NaN), or a function.
function M.is_priority(o, p)
  local t = type(p)
  if t == "string" then return o.rank_of[p] ~= nil end
  if t == "number" then return p == p end
  return t == "function"
end

function M.bad_priority(o, fn, arg, p, lv)
  local what = "a rank name (" .. table.concat(o.ranks, ", ") .. "), a number (higher first) or a function"
  if type(p) == "string" then
    M.fail(fn, arg, what .. "; '" .. p .. "' is no rank", p, (lv or 2) + 1)
  end
  M.fail(fn, arg, what, p, (lv or 2) + 1)
end

return M
