--- Inside a worker thread: what a pool's or a spawned worker's module gets
--- from `require "stagehand.worker"`. Each worker's Lua state has these
--- preloaded, bound to that worker; this file stands for them anywhere
--- else, where each raises.
local M = {}

local function elsewhere(name)
  error("stagehand.worker." .. name .. " works only inside a worker thread (a function of a"
    .. " stagehand.pool's or stagehand.spawn's module)", 3)
end

--- Counts as the request's progress on the game's side, as job:progress
--- does: with `done` and `total`, also how far it is. The pair is checked
--- here as job:progress checks it (finite, 0 <= done <= total): a bad one
--- raises in the worker, at the line that reported it.
---@param done number?
---@param total number?
function M.progress(done, total) elsewhere("progress") end -- luacheck: ignore 212

--- True once this request was aborted, or the pool or worker is stopping:
--- a long loop should look now and then, and return.
---@return boolean
function M.stopping() elsewhere("stopping") end

--- Sleeps `ms`, waking early when the worker is told to stop. Returns
--- false if it was.
---@param ms number
---@return boolean
function M.sleep(ms) elsewhere("sleep") end -- luacheck: ignore 212

--- A new port (as stagehand.port()), for a worker that makes its own.
---@return userdata
function M.port() elsewhere("port") end

return M
