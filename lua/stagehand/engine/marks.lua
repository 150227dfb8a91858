-- Markers shared by the engine and the waits: what a job is parked on
-- (job[W]) besides an awaitable or a slot queue, and what its coroutine
-- yields when it parks.
local M = {}

-- What a waiting job's coroutine yields. Only a coroutine of the user's own
-- inside a job ever shows it to user code (see check_wait), so its name says
-- what went wrong.
M.PARK = setmetatable({}, {
  __name = "stagehand.PARK",
  __tostring = function()
    return "stagehand.PARK (a job waited inside a coroutine of its own; wait only in the job's coroutine)"
  end,
})
M.QUEUED = setmetatable({}, { __name = "stagehand.QUEUED" })
M.SLEEP = setmetatable({}, { __name = "stagehand.SLEEP" })
-- A placeholder job's w: it waits for a run of its key to start.
M.KEYWAIT = setmetatable({}, { __name = "stagehand.KEYWAIT" })
-- A when_idle waiter's w.
M.IDLE = setmetatable({}, { __name = "stagehand.IDLE" })

-- Jobs parked on a group whose own clock runs (something beside jobs is
-- open in it): the stamp (settle.seq) of the last part it heard of, or
-- PAUSED once the group came to await only jobs (the wait's changed hook).
-- Weak: a job that ends while parked leaves its entry. The waits write
-- it; the stall check reads it.
M.open_wait = setmetatable({}, { __mode = "k" })
M.PAUSED = "paused"

return M
