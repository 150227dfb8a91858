-- stagehand inside LÖVE in one call: require("stagehand.love").new(opts)
-- returns an orchestrator that runs on love.timer's clock, steps once a
-- frame right after love.update (so a frame's requests compete before any
-- of them starts), pauses its stall clocks while the window is hidden or
-- loses focus, and at quit closes itself and destroys its worker pools.
--
-- How it hooks in: love.handlers' visible and focus are wrapped (the
-- game's love.visible and love.focus still run), and `update` and `quit`
-- are served through a metatable on the `love` table, so the game's own
-- love.update and love.quit, defined before or after this call, run first
-- and the step or the shutdown after them.
local stagehand = require "stagehand"
local options = require "stagehand.engine.options"
local outside = require "stagehand.threads.outside"
local each = require("stagehand.core.compat").each

local M = {}

local function love_table()
  local love = rawget(_G, "love")
  if type(love) ~= "table" or type(love.timer) ~= "table" or type(love.handlers) ~= "table" then
    error("stagehand.love.new: LÖVE is not running here (no love.timer, no love.handlers)", 3)
  end
  return love
end

-- The orchestrator the hooks serve (one a game), how long its step may
-- take, and whether the helper closed it.
local hooked, hooked_step_ms, hooked_shut = nil, 4, false

local function install(love)
  local game = { update = rawget(love, "update"), quit = rawget(love, "quit") }
  rawset(love, "update", nil)
  rawset(love, "quit", nil)
  local function update(...)
    if game.update then game.update(...) end
    if hooked and not hooked_shut then hooked:step(hooked_step_ms) end
  end
  local function quit(...)
    if game.quit and game.quit(...) then return true end -- (the game keeps running)
    if hooked and not hooked_shut then M.shut(hooked) end
    return false
  end
  local own = { update = update, quit = quit }
  local mt = getmetatable(love) or {}
  local index, newindex = mt.__index, mt.__newindex
  mt.__index = function(t, k)
    if own[k] then return own[k] end
    if type(index) == "function" then return index(t, k) end
    return index and index[k]
  end
  mt.__newindex = function(t, k, v)
    if own[k] then
      game[k] = v
    elseif newindex then
      newindex(t, k, v)
    else
      rawset(t, k, v)
    end
  end
  setmetatable(love, mt)
  for _, name in ipairs { "visible", "focus" } do
    local handler = love.handlers[name]
    love.handlers[name] = function(shown, ...)
      if hooked and not hooked_shut then hooked:set_visible(shown and true or false) end
      if handler then return handler(shown, ...) end
    end
  end
end

--- Closes `orch` and destroys the worker pools it has, waiting for their
--- threads at most their close_timeout_ms: what the helper does at quit.
--- A load the player quits in the middle of ends cancelled, its worker
--- requests included, and logs no failure.
---@param orch stagehand.Orchestrator
function M.shut(orch)
  if orch == hooked then hooked_shut = true end
  -- (Closed before the pools are destroyed: a destroyed pool cancels its
  -- requests, and each job awaiting one would fail, and be logged.)
  orch:close("the game quit")
  local pools = {}
  for _, src in ipairs(outside.sources(orch)) do
    if type(src.destroy) == "function" and not src.service then pools[#pools + 1] = src:destroy() end
  end
  if #pools > 0 then orch:wait(stagehand.all(pools), 2000) end
end

local FIELDS = { step_ms = true }

--- An orchestrator for a LÖVE game (see the file's head). `opts`: what
--- stagehand.new takes (its driver and clock are set here), and `step_ms`,
--- how much of a frame loading may take (default 4).
---@param opts table?
---@return stagehand.Orchestrator
function M.new(opts)
  local love = love_table()
  if opts ~= nil and type(opts) ~= "table" then options.fail("stagehand.love.new", "opts", "a table", opts) end
  local given = {}
  for k, v in each, opts or {} do
    if not FIELDS[k] then given[k] = v end
  end
  if given.driver ~= nil or given.clock ~= nil then
    options.fail("stagehand.love.new", given.driver ~= nil and "opts.driver" or "opts.clock",
      "nothing (LÖVE's helper steps the orchestrator on love.timer's clock)", given.driver or given.clock)
  end
  local step_ms = opts and opts.step_ms
  if step_ms == nil then step_ms = 4 end
  if type(step_ms) ~= "number" or step_ms ~= step_ms or step_ms <= 0 then
    options.fail("stagehand.love.new", "opts.step_ms", "a number > 0 (ms of loading a frame)", step_ms)
  end
  given.driver = "manual"
  local timer = love.timer
  given.clock = function() return timer.getTime() * 1000 end
  local orch = stagehand.new(given)
  if not hooked then install(love) end
  if hooked and not hooked_shut then hooked:close("another orchestrator took over LÖVE's frame") end
  hooked, hooked_step_ms, hooked_shut = orch, step_ms, false
  return orch
end

return M
