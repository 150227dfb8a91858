-- orch:newest: the newest run under a name wins. Each newer call takes the
-- older calls' Handles along: they leave the older job (which, with no
-- caller left, is cancelled; shared keyed work runs on for its other
-- callers) and become callers of the newer one, so they end with its end,
-- however it ends. An older call never settles with its own result.
local E = require "stagehand.engine"
local F = require "stagehand.fields"
local settle = require "stagehand.settle"
local sources = require "stagehand.sources"

local STATE, OUT, H, TOLD = F.STATE, F.OUT, F.H, F.TOLD

local M = {}

-- An orchestrator's field newest_names: name -> the Handles that follow
-- the newest run under it (the newest's own first). (Not a table keyed by
-- the orchestrator: see outside.lua.)

-- Moves the older Handle `h` to follow `job`.
local function move(o, h, job, name)
  local old = h[1]
  if old == job then return end
  if not old[STATE] then
    sources.remove_caller(o, old, h)
    if not rawget(old, H) then
      -- Nobody else called it: whoever awaited it awaited this Handle, and
      -- now awaits the newer job; the older one is cancelled.
      sources.move_awaiters(o, old, job)
      E.cancel(old, "a newer run of '" .. name .. "' replaced it")
    end
  end
  h[1] = job
  if job[STATE] then
    settle.fire(h, job[STATE], job[OUT]) -- (the newer ended already: h reads its end now)
    return
  end
  sources.add_caller(o, job, h)
  if settle.listened(h) then job[OUT] = TOLD end
end

--- orch:newest(name, label, work, opts): runs like orch:run; a newer call
--- under `name` takes over every older call still waiting.
function M.run(o, name, label, work, opts)
  local h = o:run(label, work, opts)
  local by_name = rawget(o, "newest_names")
  if not by_name then
    by_name = {}
    o.newest_names = by_name
  end
  local job = h[1]
  local followers = { h }
  local older = by_name[name]
  if older then
    for i = 1, #older do
      -- (one withdrawn on its own, or whose run ended before this call,
      -- has its end already)
      local oh = older[i]
      if oh ~= h and not rawget(oh, "_st") and not oh[1][STATE] then
        move(o, oh, job, name)
        followers[#followers + 1] = oh
      end
    end
  end
  by_name[name] = followers
  return h
end

return M
