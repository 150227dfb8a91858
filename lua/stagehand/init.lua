--- stagehand: runs a game's loading work as jobs that always end, never load
--- twice, put what is on screen first and keep the frame free.
local B = require "stagehand.backend"
local Orchestrator = require "stagehand.orchestrator"
local errors = require "stagehand.errors"
local signal = require "stagehand.signal"
local future = require "stagehand.future"
local combine = require "stagehand.combine"

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
---@type fun(options: table?): stagehand.Orchestrator
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

--- The name of the native backend in use: "ffi" or "c".
---@type string
M.backend = B.name

return M
