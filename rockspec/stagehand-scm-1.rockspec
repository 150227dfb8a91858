rockspec_format = "3.0"
package = "stagehand"
version = "scm-1"
source = {
  url = "git+file://.",
}
description = {
  summary = "Runs a game's loading work as jobs that always end, never load twice and put what is on screen first.",
  detailed = [[
stagehand runs loading work (requests, file reads, decodes, bakes, compiles)
as jobs: every job ends (done, failed, cancelled or stalled), work asked for
under one key runs once, scarce capacity goes to what is on screen, and a
frame's main-thread work stays within budget. A C core (stall clocks,
timers, worker threads, ports) under a Lua surface; LuaJIT reaches it through the FFI, PUC Lua
5.1-5.4 through a C module. Drivers for luv and for a host's frame loop.
]],
  license = "MIT",
  labels = { "game", "loading", "coroutines", "scheduler", "luajit" },
}
dependencies = {
  "lua >= 5.1, < 5.5",
}
-- luv is optional: with it the default driver runs on its loop.
build = {
  type = "builtin",
  modules = {
    ["stagehand"] = "lua/stagehand/init.lua",
    ["stagehand.core.backend"] = "lua/stagehand/core/backend.lua",
    ["stagehand.wait.combine"] = "lua/stagehand/wait/combine.lua",
    ["stagehand.threads.dispatch"] = "lua/stagehand/threads/dispatch.lua",
    ["stagehand.engine.engine"] = "lua/stagehand/engine/engine.lua",
    ["stagehand.engine.errors"] = "lua/stagehand/engine/errors.lua",
    ["stagehand.engine.fields"] = "lua/stagehand/engine/fields.lua",
    ["stagehand.core.ffi_core"] = "lua/stagehand/core/ffi_core.lua",
    ["stagehand.wait.future"] = "lua/stagehand/wait/future.lua",
    ["stagehand.wait.handle"] = "lua/stagehand/wait/handle.lua",
    ["stagehand.wait.job"] = "lua/stagehand/wait/job.lua",
    ["stagehand.wait.barrier"] = "lua/stagehand/wait/barrier.lua",
    ["stagehand.rank.keys"] = "lua/stagehand/rank/keys.lua",
    ["stagehand.engine.list"] = "lua/stagehand/engine/list.lua",
    ["stagehand.engine.nest"] = "lua/stagehand/engine/nest.lua",
    ["stagehand.rank.priority"] = "lua/stagehand/rank/priority.lua",
    ["stagehand.wait.slots"] = "lua/stagehand/wait/slots.lua",
    ["stagehand.engine.log"] = "lua/stagehand/engine/log.lua",
    ["stagehand.love"] = "lua/stagehand/love.lua",
    ["stagehand.threads.love_threads"] = "lua/stagehand/threads/love_threads.lua",
    ["stagehand.engine.options"] = "lua/stagehand/engine/options.lua",
    ["stagehand.orchestrator"] = "lua/stagehand/orchestrator.lua",
    ["stagehand.engine.settle"] = "lua/stagehand/engine/settle.lua",
    ["stagehand.engine.signal"] = "lua/stagehand/engine/signal.lua",
    ["stagehand.threads.spawn"] = "lua/stagehand/threads/spawn.lua",
    ["stagehand.testing"] = "lua/stagehand/testing.lua",
    ["stagehand.engine.clock"] = "lua/stagehand/engine/clock.lua",
    ["stagehand.wait.follows"] = "lua/stagehand/wait/follows.lua",
    ["stagehand.wait.idle"] = "lua/stagehand/wait/idle.lua",
    ["stagehand.engine.marks"] = "lua/stagehand/engine/marks.lua",
    ["stagehand.engine.mend"] = "lua/stagehand/engine/mend.lua",
    ["stagehand.engine.timeouts"] = "lua/stagehand/engine/timeouts.lua",
    ["stagehand.wait.wait"] = "lua/stagehand/wait/wait.lua",
    ["stagehand.engine.runqueue"] = "lua/stagehand/engine/runqueue.lua",
    ["stagehand.engine.records"] = "lua/stagehand/engine/records.lua",
    ["stagehand.rank.sources"] = "lua/stagehand/rank/sources.lua",
    ["stagehand.core.compat"] = "lua/stagehand/core/compat.lua",
    ["stagehand.engine.owners"] = "lua/stagehand/engine/owners.lua",
    ["stagehand.screens.tracker"] = "lua/stagehand/screens/tracker.lua",
    ["stagehand.screens.timeline"] = "lua/stagehand/screens/timeline.lua",
    ["stagehand.screens.newest"] = "lua/stagehand/screens/newest.lua",
    ["stagehand.screens.trace"] = "lua/stagehand/screens/trace.lua",
    ["stagehand.engine.closing"] = "lua/stagehand/engine/closing.lua",
    ["stagehand.threads.outside"] = "lua/stagehand/threads/outside.lua",
    ["stagehand.threads.workers"] = "lua/stagehand/threads/workers.lua",
    ["stagehand.worker"] = "lua/stagehand/worker.lua",
    ["stagehand.threads.ports"] = "lua/stagehand/threads/ports.lua",
    ["stagehand.core.threads_native"] = "lua/stagehand/core/threads_native.lua",
    ["stagehand.core.love_work"] = "lua/stagehand/core/love_work.lua",
    ["stagehand.core.love_ports"] = "lua/stagehand/core/love_ports.lua",
    ["stagehand.core.native"] = "lua/stagehand/core/native.lua",
    ["stagehand.core.lua_core"] = "lua/stagehand/core/lua_core.lua",
    ["stagehand.core.lua_clock"] = "lua/stagehand/core/lua_clock.lua",
    ["stagehand.core.lua_pool"] = "lua/stagehand/core/lua_pool.lua",
    ["stagehand.driver.luv"] = "lua/stagehand/driver/luv.lua",
    ["stagehand.driver.manual"] = "lua/stagehand/driver/manual.lua",
    ["stagehand._core"] = {
      sources = {
        "csrc/core/sh_grow.c", "csrc/core/sh_heap.c", "csrc/core/sh_clock.c", "csrc/core/sh_timer.c", "csrc/core/sh_pool.c", "csrc/core/sh_barrier.c",
        "csrc/core/sh_ids.c", "csrc/core/sh_notify.c", "csrc/core/sh_msg.c", "csrc/core/sh_port.c",
        "csrc/core/sh_rounds.c", "csrc/core/sh_work.c", "csrc/core/sh_work_take.c", "csrc/lua/lstagehand.c", "csrc/lua/lvalues.c", "csrc/lua/lchannels.c", "csrc/lua/lworkers.c", "csrc/lua/lpool.c", "csrc/platform/unix/sh_unix.c",
      },
      incdirs = { "csrc" },
    },
  },
  -- (LuaRocks runs no probe: scripts/probe.sh's findings for the systems
  -- whose C libraries are known to have them; others get the portable
  -- paths, csrc/platform/sh_platform.h)
  platforms = {
    unix = { modules = { ["stagehand._core"] = { libraries = { "m", "dl", "pthread" } } } },
    linux = { modules = { ["stagehand._core"] = { defines = { "SH_HAVE_PIPE2", "SH_HAVE_CONDATTR_SETCLOCK", "SH_HAVE_THREAD_NICE" } } } },
    macosx = { modules = { ["stagehand._core"] = { defines = { "SH_HAVE_COND_TIMEDWAIT_RELATIVE", "SH_HAVE_QOS_CLASS" } } } },
    -- Win32's layer in place of POSIX's (the last source: LuaRocks merges
    -- a platform's list into the main one entry by entry), Winsock for
    -- the wake-up sockets, and the core's functions exported beside
    -- luaopen (SH_BUILDING_DLL: csrc/core/stagehand.h), where LuaJIT's FFI
    -- finds them.
    windows = { modules = { ["stagehand._core"] = { sources = { [19] = "csrc/platform/win/sh_win.c" }, libraries = { "ws2_32" }, defines = { "SH_BUILDING_DLL" } } } },
  },
  copy_directories = { "examples", "types" },
}
