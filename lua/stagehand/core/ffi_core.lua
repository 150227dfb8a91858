-- The LuaJIT FFI backend: the core's flat C API called directly, so the calls
-- stay inside JIT traces. It loads the same stagehand/_core.so the C module
-- lives in, found through package.cpath.
local ffi = require "ffi"

-- A copy of the FFI block of csrc/core/stagehand.h; spec/cdef_spec.lua keeps the
-- two in step.
local CDEF = [[
enum sh_status { SH_OK = 0, SH_EINVAL = -1, SH_ENOMEM = -2, SH_ESTATE = -3 };

typedef struct sh_clock sh_clock;
typedef struct sh_timers sh_timers;
typedef struct sh_pool sh_pool;
typedef struct sh_barrier sh_barrier;
typedef struct sh_ids sh_ids;

sh_clock *sh_clock_new(void);
void sh_clock_free(sh_clock *c);
int sh_clock_start(sh_clock *c, int32_t id, double stall_ms, double now);
int sh_clock_restart(sh_clock *c, int32_t id, double now);
int sh_clock_progress(sh_clock *c, int32_t id, double now);
int sh_clock_pause(sh_clock *c, int32_t id);
int sh_clock_resume(sh_clock *c, int32_t id, double now);
int sh_clock_stop(sh_clock *c, int32_t id);
int sh_clock_set_visible(sh_clock *c, int visible, double now);
int sh_clock_visible(const sh_clock *c);
double sh_clock_visible_time(const sh_clock *c, double now);
double sh_clock_next_due(const sh_clock *c, double now);
int32_t sh_clock_pop_stalled(sh_clock *c, double now);
double sh_clock_stall_ms(const sh_clock *c, int32_t id);
int32_t sh_clock_count(const sh_clock *c);
int sh_clock_join(sh_clock *c, int32_t id, int32_t group);
int sh_clock_touch(sh_clock *c, int32_t group, double now);
int sh_clock_check(const sh_clock *c);

sh_timers *sh_timers_new(void);
void sh_timers_free(sh_timers *t);
int sh_timers_add(sh_timers *t, int32_t id, double due);
int sh_timers_cancel(sh_timers *t, int32_t id);
double sh_timers_peek(const sh_timers *t);
int32_t sh_timers_pop(sh_timers *t, double now);
int32_t sh_timers_count(const sh_timers *t);
int sh_timers_check(const sh_timers *t);

sh_pool *sh_pool_new(void);
void sh_pool_free(sh_pool *p);
int sh_pool_set_capacity(sh_pool *p, int32_t capacity);
int32_t sh_pool_capacity(const sh_pool *p);
int32_t sh_pool_in_use(const sh_pool *p);
int32_t sh_pool_waiting(const sh_pool *p);
int sh_pool_try_acquire(sh_pool *p);
int sh_pool_release(sh_pool *p);
int sh_pool_reset_use(sh_pool *p);
int sh_pool_enqueue(sh_pool *p, int32_t id, int32_t group);
int sh_pool_remove(sh_pool *p, int32_t id);
int sh_pool_move(sh_pool *p, int32_t id, int32_t group);
int32_t sh_pool_group_of(const sh_pool *p, int32_t id);
int sh_pool_is_waiting(const sh_pool *p, int32_t id);
int32_t sh_pool_next_group(const sh_pool *p, int32_t after);
int sh_pool_set_rank(sh_pool *p, int32_t group, double rank);
int sh_pool_fix_rank(sh_pool *p, int32_t group, double rank);
int sh_pool_forget_group(sh_pool *p, int32_t group);
int32_t sh_pool_next_live(const sh_pool *p, int32_t after);
int sh_pool_new_reads(sh_pool *p);
int32_t sh_pool_next_unread(sh_pool *p);
int sh_pool_reread(sh_pool *p, int32_t group);
int32_t sh_pool_grantable(const sh_pool *p);
int32_t sh_pool_best(const sh_pool *p);
double sh_pool_rank_of(const sh_pool *p, int32_t id);
double sh_pool_arrival(const sh_pool *p, int32_t id);
int sh_pool_grant(sh_pool *p, int32_t id);
int sh_pool_check(const sh_pool *p);
int32_t sh_pool_peek_next(sh_pool *p);
int sh_pool_peek_end(sh_pool *p);

sh_barrier *sh_barrier_new(int32_t size);
void sh_barrier_free(sh_barrier *b);
int sh_barrier_arrive(sh_barrier *b, int32_t index);
int32_t sh_barrier_arrived(const sh_barrier *b);
int32_t sh_barrier_size(const sh_barrier *b);
int32_t sh_barrier_next_missing(const sh_barrier *b, int32_t after);

sh_ids *sh_ids_new(void);
void sh_ids_free(sh_ids *s);
int32_t sh_ids_take(sh_ids *s);
int sh_ids_give(sh_ids *s, int32_t id);
int32_t sh_ids_count(const sh_ids *s);
int sh_ids_check(const sh_ids *s);

double sh_now_ms(void);
int sh_cores(void);
void sh_sleep_ms(double ms);
int sh_pin_library(void);
]]

-- A second load of this module (busted loads modules again for each spec
-- file) finds the types declared already: "attempt to redefine". Anything
-- else is a fault in the declarations, raised.
local ok, cdef_err = pcall(ffi.cdef, CDEF)
if not ok and not tostring(cdef_err):find("redefine", 1, true) then
  error("stagehand: the FFI declarations of the core failed: " .. tostring(cdef_err), 0)
end
local native = require "stagehand.core.native"
local path, err = native.path()
-- A program that linked the core in (package.preload["stagehand._core"])
-- and exports its symbols (-Wl,-E) holds the functions itself.
local in_program = not path and package.preload["stagehand._core"] ~= nil
if in_program then
  if not pcall(function() return ffi.C.sh_pin_library end) then
    error("stagehand: the core is linked into this program (package.preload), but the program does not export"
      .. " its functions: link it with -Wl,-E (-rdynamic) for the FFI backend", 0)
  end
  path = "this program"
elseif not path then
  error(native.missing(err), 0)
end
local C
if in_program then
  C = ffi.C
else
  local loaded, lib = pcall(ffi.load, path)
  if not loaded then
    -- (Windows: a path LuaJIT's own call cannot name, loaded by the wide
    -- one; then found by its file name. native.preload says why.)
    local name = native.preload(path)
    if name then loaded, lib = pcall(ffi.load, name) end
  end
  if not loaded then error("stagehand: the FFI backend cannot load " .. path .. ": " .. tostring(lib), 0) end
  C = lib
end
-- Every function the block declares must be in the library (a DLL built
-- exporting only luaopen_* has none of them): the first one missing is
-- named, and the C module runs instead (backend.lua says so).
for name in CDEF:gmatch("[%w_%*]+%s+%**(sh_[%w_]+)%(") do
  if not pcall(function() return C[name] end) then
    error("stagehand: " .. path .. " does not export " .. name .. ", which the FFI backend needs", 0)
  end
end
-- Keep the library loaded past lua_close: ffi.gc finalizers call into it.
C.sh_pin_library()

local M = { name = "ffi", CDEF = CDEF }
for _, name in ipairs { "SH_OK", "SH_EINVAL", "SH_ENOMEM", "SH_ESTATE" } do M[name] = tonumber(ffi.C[name]) end

-- Gives a new core object to the collector: its finalizer frees it.
-- ffi.gc files the object in a table that may need memory, and one that
-- could not be filed is freed here. (What no order can guard is LuaJIT's
-- box for the pointer C returned, made after the call: when that runs out
-- of memory the object is lost, a few hundred bytes once, on a path the C
-- module takes in the other order.)
-- (Called in tail position: level 2 is the constructor's caller.)
local function own(c, free)
  if c == nil then error("stagehand: not enough memory", 2) end
  if not pcall(ffi.gc, c, free) then
    free(c)
    error("stagehand: not enough memory", 2)
  end
  return c
end

function M.clock_new() return own(C.sh_clock_new(), C.sh_clock_free) end
function M.clock_free(c) C.sh_clock_free(ffi.gc(c, nil)) end

function M.timers_new() return own(C.sh_timers_new(), C.sh_timers_free) end
function M.timers_free(t) C.sh_timers_free(ffi.gc(t, nil)) end

function M.pool_new() return own(C.sh_pool_new(), C.sh_pool_free) end
function M.pool_free(p) C.sh_pool_free(ffi.gc(p, nil)) end

function M.barrier_new(size)
  local b = C.sh_barrier_new(size)
  if b == nil then
    -- (a size in range that gave none: out of memory)
    if size >= 0 and size < 2 ^ 24 then error("stagehand: not enough memory", 2) end
    error("stagehand: cannot make a barrier of " .. tostring(size) .. " keys", 2)
  end
  return own(b, C.sh_barrier_free)
end
function M.barrier_free(b) C.sh_barrier_free(ffi.gc(b, nil)) end

function M.ids_new() return own(C.sh_ids_new(), C.sh_ids_free) end
function M.ids_free(s) C.sh_ids_free(ffi.gc(s, nil)) end

for _, name in ipairs {
  "clock_start", "clock_restart", "clock_progress", "clock_pause", "clock_resume", "clock_stop",
  "clock_set_visible", "clock_visible", "clock_visible_time", "clock_next_due",
  "clock_pop_stalled", "clock_stall_ms", "clock_count", "clock_check",
  "clock_join", "clock_touch",
  "timers_add", "timers_cancel", "timers_peek", "timers_pop", "timers_count", "timers_check",
  "pool_set_capacity", "pool_capacity", "pool_in_use", "pool_waiting", "pool_try_acquire",
  "pool_release", "pool_reset_use", "pool_enqueue", "pool_remove", "pool_move", "pool_group_of", "pool_is_waiting",
  "pool_next_group", "pool_set_rank", "pool_fix_rank", "pool_forget_group", "pool_next_live",
  "pool_new_reads", "pool_next_unread", "pool_reread", "pool_grantable", "pool_best", "pool_rank_of", "pool_arrival",
  "pool_grant", "pool_check", "pool_peek_next", "pool_peek_end",
  "barrier_arrive", "barrier_arrived", "barrier_size", "barrier_next_missing",
  "ids_take", "ids_give", "ids_count", "ids_check",
  "now_ms", "cores", "sleep_ms",
} do
  M[name] = C["sh_" .. name]
end

local set_visible = C.sh_clock_set_visible
function M.clock_set_visible(c, v, now) return set_visible(c, v and 1 or 0, now) end

return M
