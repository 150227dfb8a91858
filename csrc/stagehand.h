/*
 * stagehand core: the flat C API.
 *
 * Plain C with no Lua in it, so a C or C++ engine can link it directly.
 * Objects are opaque; ids are small non-negative integers chosen by the
 * caller (the Lua layer uses job slot numbers); times are milliseconds as
 * doubles on any monotonic clock the caller likes, passed in on every call.
 * Functions that can fail return an int status: SH_OK or a negative SH_E*.
 *
 * The block between FFI-BEGIN and FFI-END is read by LuaJIT's ffi.cdef
 * (lua/stagehand/ffi_core.lua keeps a copy; spec/cdef_spec.lua checks that
 * the two agree), so it holds no preprocessor lines.
 */
#ifndef STAGEHAND_H
#define STAGEHAND_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SH_OK 0
#define SH_EINVAL (-1) /* an argument out of range: a bad id, a bad time */
#define SH_ENOMEM (-2)
#define SH_ESTATE (-3) /* the id is not in the state the call needs */

/* Ids run from 0 to SH_MAX_ID - 1; larger ones are refused, so a wild id
 * cannot make the core allocate without bound. */
#define SH_MAX_ID (1 << 24)

/* FFI-BEGIN */
typedef struct sh_clock sh_clock;
typedef struct sh_timers sh_timers;

sh_clock *sh_clock_new(void);
void sh_clock_free(sh_clock *c);
int sh_clock_start(sh_clock *c, int32_t id, double stall_ms, double now);
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
int sh_clock_check(const sh_clock *c);

sh_timers *sh_timers_new(void);
void sh_timers_free(sh_timers *t);
int sh_timers_add(sh_timers *t, int32_t id, double due);
int sh_timers_cancel(sh_timers *t, int32_t id);
double sh_timers_peek(const sh_timers *t);
int32_t sh_timers_pop(sh_timers *t, double now);
int32_t sh_timers_count(const sh_timers *t);
int sh_timers_check(const sh_timers *t);

double sh_now_ms(void);
int sh_cores(void);
void sh_sleep_ms(double ms);
int sh_pin_library(void);
/* FFI-END */

/*
 * Stall clocks (sh_clock_*)
 *
 * Each started id has a stall time and the visible time of its last
 * progress; it stalls once visible time passes last + stall. Visible time
 * is the caller's clock with every hidden stretch (set_visible(0)) cut out.
 *
 * progress is O(1): it writes the new time and leaves the heap alone. The
 * heap keeps each id under the deadline it had when it was last filed, which
 * is never later than its true one; pop_stalled re-files an early entry in
 * O(log n) when it reaches the top. Checking with nothing due reads the top
 * only. A paused id (a job waiting on another job) cannot stall; resume
 * counts as progress.
 *
 * pop_stalled returns one stalled id (the earliest deadline, then the
 * earliest started) and stops its clock, or -1 when none is due.
 * stall_ms gives an id's stall time, also just after pop_stalled stopped it
 * (until the id is started again); -1 for an id never started.
 * next_due is the visible-time distance to the earliest deadline the heap
 * knows, a lower bound of the true one; -1 when nothing can stall (no
 * running clock, or hidden).
 *
 * Sleep timers (sh_timers_*)
 *
 * At most one timer per id, due at an absolute time; pop returns ids whose
 * time has come, earliest first, ties in the order they were added. peek
 * returns the earliest due time, or -1 when empty.
 *
 * sh_pin_library keeps the shared object holding the core loaded until the
 * process exits (RTLD_NODELETE). LuaJIT's FFI backend calls it: at
 * lua_close, the library ffi.load opened may be closed before the ffi.gc
 * finalizers that call into it have run. Returns SH_OK, or SH_ESTATE when
 * the object cannot be found (a static link: nothing to pin).
 *
 * *_check verify every heap and index invariant and return SH_OK or
 * SH_ESTATE; debug builds (SH_DEBUG_CHECKS) run them after each change.
 */

#ifdef __cplusplus
}
#endif

#endif
