rockspec_format = "3.0"
package = "stagehand"
version = "0.1.0-1"
source = {
  url = "git+https://stagehand.invalid/stagehand.git",
  tag = "v0.1.0",
  dir = "stagehand",
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
    ["stagehand.backend"] = "lua/stagehand/backend.lua",
    ["stagehand.combine"] = "lua/stagehand/combine.lua",
    ["stagehand.dispatch"] = "lua/stagehand/dispatch.lua",
    ["stagehand.engine"] = "lua/stagehand/engine.lua",
    ["stagehand.errors"] = "lua/stagehand/errors.lua",
    ["stagehand.fields"] = "lua/stagehand/fields.lua",
    ["stagehand.ffi_core"] = "lua/stagehand/ffi_core.lua",
    ["stagehand.future"] = "lua/stagehand/future.lua",
    ["stagehand.handle"] = "lua/stagehand/handle.lua",
    ["stagehand.job"] = "lua/stagehand/job.lua",
    ["stagehand.barrier"] = "lua/stagehand/barrier.lua",
    ["stagehand.keys"] = "lua/stagehand/keys.lua",
    ["stagehand.list"] = "lua/stagehand/list.lua",
    ["stagehand.nest"] = "lua/stagehand/nest.lua",
    ["stagehand.priority"] = "lua/stagehand/priority.lua",
    ["stagehand.slots"] = "lua/stagehand/slots.lua",
    ["stagehand.log"] = "lua/stagehand/log.lua",
    ["stagehand.love"] = "lua/stagehand/love.lua",
    ["stagehand.love_threads"] = "lua/stagehand/love_threads.lua",
    ["stagehand.options"] = "lua/stagehand/options.lua",
    ["stagehand.orchestrator"] = "lua/stagehand/orchestrator.lua",
    ["stagehand.settle"] = "lua/stagehand/settle.lua",
    ["stagehand.signal"] = "lua/stagehand/signal.lua",
    ["stagehand.spawn"] = "lua/stagehand/spawn.lua",
    ["stagehand.testing"] = "lua/stagehand/testing.lua",
    ["stagehand.clock"] = "lua/stagehand/clock.lua",
    ["stagehand.follows"] = "lua/stagehand/follows.lua",
    ["stagehand.idle"] = "lua/stagehand/idle.lua",
    ["stagehand.marks"] = "lua/stagehand/marks.lua",
    ["stagehand.timeouts"] = "lua/stagehand/timeouts.lua",
    ["stagehand.wait"] = "lua/stagehand/wait.lua",
    ["stagehand.runqueue"] = "lua/stagehand/runqueue.lua",
    ["stagehand.records"] = "lua/stagehand/records.lua",
    ["stagehand.sources"] = "lua/stagehand/sources.lua",
    ["stagehand.compat"] = "lua/stagehand/compat.lua",
    ["stagehand.owners"] = "lua/stagehand/owners.lua",
    ["stagehand.tracker"] = "lua/stagehand/tracker.lua",
    ["stagehand.newest"] = "lua/stagehand/newest.lua",
    ["stagehand.trace"] = "lua/stagehand/trace.lua",
    ["stagehand.closing"] = "lua/stagehand/closing.lua",
    ["stagehand.outside"] = "lua/stagehand/outside.lua",
    ["stagehand.workers"] = "lua/stagehand/workers.lua",
    ["stagehand.worker"] = "lua/stagehand/worker.lua",
    ["stagehand.ports"] = "lua/stagehand/ports.lua",
    ["stagehand.threads_native"] = "lua/stagehand/threads_native.lua",
    ["stagehand.native"] = "lua/stagehand/native.lua",
    ["stagehand.driver.luv"] = "lua/stagehand/driver/luv.lua",
    ["stagehand.driver.manual"] = "lua/stagehand/driver/manual.lua",
    ["stagehand._core"] = {
      sources = {
        "csrc/core/sh_grow.c", "csrc/core/sh_heap.c", "csrc/core/sh_clock.c", "csrc/core/sh_timer.c", "csrc/core/sh_pool.c", "csrc/core/sh_barrier.c",
        "csrc/core/sh_ids.c", "csrc/core/sh_notify.c", "csrc/core/sh_msg.c", "csrc/core/sh_port.c",
        "csrc/core/sh_rounds.c", "csrc/core/sh_work.c", "csrc/lua/lstagehand.c", "csrc/lua/lvalues.c", "csrc/lua/lchannels.c", "csrc/lua/lworkers.c", "csrc/lua/lpool.c", "csrc/platform/unix/sh_unix.c",
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
    -- a platform's list into the main one entry by entry), and Winsock for
    -- the wake-up sockets.
    windows = { modules = { ["stagehand._core"] = { sources = { [18] = "csrc/platform/win/sh_win.c" }, libraries = { "ws2_32" } } } },
  },
  copy_directories = { "examples", "types" },
}
