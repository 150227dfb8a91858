-- lua/stagehand/ (layer 6) holds the public modules over the folders:
-- init.lua (`stagehand`), orchestrator.lua (`stagehand.new` and its
-- methods), worker.lua (`stagehand.worker`), testing.lua
-- (`stagehand.testing`) and love.lua (`stagehand.love`). Folder by layer:
-- core/ 0, engine/ 1, rank/ 2, wait/ 3, threads/ and screens/ 4, driver/ 5.
-- A module requires only its own folder and lower layers.
--
--- stagehand: runs a game's loading work as jobs that always end, never load
--- twice, put what is on screen first and keep the frame free.
local B = require "stagehand.core.backend"
local Orchestrator = require "stagehand.orchestrator"
local errors = require "stagehand.engine.errors"
local signal = require "stagehand.engine.signal"
local future = require "stagehand.wait.future"
local combine = require "stagehand.wait.combine"
local require_again = require("stagehand.core.compat").require_again -- (a feature loaded on first use)

local M = {}

--- The version, "MAJOR.MINOR.PATCH".
---@type string
M.VERSION = "0.1.0"
--- The metatable of every stagehand.Error (`getmetatable(e) == stagehand.Error`).
---@type table
M.Error = errors.Error

--- CPU cores the OS reports (>= 1).
---@return integer
function M.cores() return tonumber(B.cores()) end

--- Makes an orchestrator (docs/guide.md lists the options).
---@type fun(options: stagehand.Options?): stagehand.Orchestrator
M.new = Orchestrator.new

--- A Future: f:resolve(...), f:reject(err), f:state(); awaitable.
---@type fun(label: string?): stagehand.Future
M.future = future.new

--- A controller: ctl.signal, ctl:abort(reason).
---@type fun(): stagehand.Controller
M.controller = signal.controller

--- Ends with the awaitable's outcome, or is cancelled with the signal's reason if it aborts first.
---@type fun(awaitable: any, signal: stagehand.Signal): stagehand.Group
M.abortable = combine.abortable
--- An awaitable of a list of each one's first value, or the first failure.
---@type fun(list: any[]): stagehand.Group
M.all = combine.all
--- An awaitable of a list of {state =, value =, error =}; it never fails.
---@type fun(list: any[]): stagehand.Group
M.all_settled = combine.all_settled
--- An awaitable of the first part to end done (its values); it fails only
--- when every part failed, with an Error whose `errors` lists each part's.
---@type fun(list: any[]): stagehand.Group
M.any = combine.any
--- An awaitable that ends as the first part to end, done or not.
---@type fun(list: any[]): stagehand.Group
M.race = combine.race
--- True when e is a stagehand.Error (of kind, when given).
---@type fun(e: any, kind: string?): boolean
M.is_error = errors.is_error

-- Threads: loaded on first use (a game that runs no worker makes no
-- notifier and loads none of it).
-- On the pure-Lua core (no native core loaded) they raise, saying why;
-- inside LÖVE they run on its threads there (core/love_work.lua).
local function no_threads(what)
  if B.name ~= "lua" or require("stagehand.core.love_work").available() then return end
  local love = rawget(_G, "love")
  if type(love) == "table" and not love.thread and not (love.system and love.system.getOS
    and love.system.getOS() == "Web") then
    errors.raise("stagehand." .. what .. ": worker threads need stagehand's native core or LÖVE's love.thread,"
      .. " and this game runs on the pure-Lua core with love.thread turned off (t.modules.thread in conf.lua): "
      .. B.why, 2)
  end
  errors.raise("stagehand." .. what .. ": worker threads need stagehand's native core, and this program runs"
    .. " on the pure-Lua core: " .. B.why, 2)
end
local function workers(what)
  no_threads(what)
  return require_again "stagehand.threads.workers"
end
local function ports(what)
  no_threads(what)
  return require_again "stagehand.threads.ports"
end

--- The default number of worker threads: one fewer than the cores, at
--- least 1, at most 4.
---@return integer
function M.threads() return workers("threads").threads() end

--- A pool of worker threads running a module's functions (docs/guide.md,
--- Threads): `pool:run(fn_name, payload, opts)` returns a Handle.
---@param orch stagehand.Orchestrator
---@param opts stagehand.PoolOpts
---@return stagehand.WorkerPool
function M.pool(orch, opts) return workers("pool").pool(orch, opts) end

--- A long-lived worker running `module.function(...)` on a thread of its own.
---@param orch stagehand.Orchestrator
---@param name string
---@return stagehand.Worker
function M.spawn(orch, name, ...)
  no_threads("spawn")
  return require_again("stagehand.threads.spawn").spawn(orch, name, ...)
end

--- A port: a channel between threads, in either direction. `name`
--- (optional) names it in the log, where a worker waiting on it is named.
---@param name string?
---@return stagehand.Port
function M.port(name) return ports("port").port(name) end

--- Round barriers for `participants` threads, each share `share_len` numbers.
---@param participants integer
---@param share_len integer?
---@return userdata
function M.rounds(participants, share_len) return ports("rounds").rounds(participants, share_len) end

--- A load tracker over `orch`: progress in phases for a loading screen
--- (docs/guide.md, Loading screens).
---@param orch stagehand.Orchestrator
---@return stagehand.Tracker
function M.tracker(orch) return require("stagehand.screens.tracker").new(orch) end

--- The rows of load:timeline() as an aligned text table.
---@param rows table[]
---@return string
function M.format_timeline(rows) return require("stagehand.screens.timeline").format_timeline(rows) end

--- The core in use: "ffi" (LuaJIT's FFI over the native core), "c" (the
--- C module over it: on Lua 5.1 to 5.4, and on LuaJIT whose compiler is
--- off when stagehand is first required, as LÖVE runs it on ARM) or "lua"
--- (the pure-Lua core: worker threads, ports and round barriers only inside
--- LÖVE, on its threads and channels).
---@type string
M.backend = B.name

-- Module names from before the folders (lua/stagehand/ was one room):
-- `require "stagehand.slots"` still loads what is now stagehand.wait.slots.
-- Deprecated: a later release drops these names. (Registered here, so they
-- work once stagehand is loaded, as every game loads it first.)
local MOVED = {
  core = { "backend", "compat", "ffi_core", "native", "threads_native" },
  engine = { "clock", "closing", "engine", "errors", "fields", "list", "log", "marks", "nest", "options", "owners",
    "records", "runqueue", "settle", "signal", "timeouts" },
  rank = { "keys", "priority", "sources" },
  wait = { "barrier", "combine", "follows", "future", "handle", "idle", "job", "slots", "wait" },
  threads = { "dispatch", "love_threads", "outside", "ports", "spawn", "workers" },
  screens = { "newest", "trace", "tracker" },
}
for folder, names in require("stagehand.core.compat").each, MOVED do
  for _, name in ipairs(names) do
    local old, new = "stagehand." .. name, "stagehand." .. folder .. "." .. name
    if package.preload[old] == nil and package.loaded[old] == nil then
      package.preload[old] = function() return require(new) end
    end
  end
end

return M
