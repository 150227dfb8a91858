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
 * (lua/stagehand/ffi_core.lua keeps a copy, without SH_API;
 * spec/cdef_spec.lua checks that the two agree), so it holds no
 * preprocessor lines.
 */
#ifndef STAGEHAND_H
#define STAGEHAND_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* SH_API marks the core's functions. Compiled into a Windows DLL with
 * SH_BUILDING_DLL defined, they are exported from it, so LuaJIT's FFI finds
 * them there: a Windows DLL exports only what is marked or listed (unless
 * MinGW links it with --export-all-symbols), and one built by Visual
 * Studio or by LuaRocks with cl.exe would export only luaopen_*. Anywhere
 * else it is nothing: a shared library elsewhere exports its functions, and
 * a program linking the core in needs no mark. (As libuv's UV_EXTERN.) */
#if defined(_WIN32) && defined(SH_BUILDING_DLL)
#define SH_API __declspec(dllexport)
#else
#define SH_API
#endif

/* Ids run from 0 to SH_MAX_ID - 1; larger ones are refused, so a wild id
 * cannot make the core allocate without bound. */
#define SH_MAX_ID (1 << 24)

/* FFI-BEGIN */
/* Every status a call returns. SH_EINVAL: an argument out of range (a bad
 * id, a bad time); SH_ESTATE: the id is not in the state the call needs. */
enum sh_status { SH_OK = 0, SH_EINVAL = -1, SH_ENOMEM = -2, SH_ESTATE = -3 };

typedef struct sh_clock sh_clock;
typedef struct sh_timers sh_timers;
typedef struct sh_pool sh_pool;
typedef struct sh_barrier sh_barrier;
typedef struct sh_ids sh_ids;

SH_API sh_clock *sh_clock_new(void);
SH_API void sh_clock_free(sh_clock *c);
SH_API int sh_clock_start(sh_clock *c, int32_t id, double stall_ms, double now);
/* Starts again a clock that sh_clock_pop_stalled just took out, with its
 * stall time, and its place among equal deadlines (its start's order). */
SH_API int sh_clock_restart(sh_clock *c, int32_t id, double now);
SH_API int sh_clock_progress(sh_clock *c, int32_t id, double now);
SH_API int sh_clock_pause(sh_clock *c, int32_t id);
SH_API int sh_clock_resume(sh_clock *c, int32_t id, double now);
SH_API int sh_clock_stop(sh_clock *c, int32_t id);
SH_API int sh_clock_set_visible(sh_clock *c, int visible, double now);
SH_API int sh_clock_visible(const sh_clock *c);
SH_API double sh_clock_visible_time(const sh_clock *c, double now);
SH_API double sh_clock_next_due(const sh_clock *c, double now);
SH_API int32_t sh_clock_pop_stalled(sh_clock *c, double now);
SH_API double sh_clock_stall_ms(const sh_clock *c, int32_t id);
SH_API int32_t sh_clock_count(const sh_clock *c);
SH_API int sh_clock_join(sh_clock *c, int32_t id, int32_t group);
SH_API int sh_clock_touch(sh_clock *c, int32_t group, double now);
SH_API int sh_clock_check(const sh_clock *c);

SH_API sh_timers *sh_timers_new(void);
SH_API void sh_timers_free(sh_timers *t);
SH_API int sh_timers_add(sh_timers *t, int32_t id, double due);
SH_API int sh_timers_cancel(sh_timers *t, int32_t id);
SH_API double sh_timers_peek(const sh_timers *t);
SH_API int32_t sh_timers_pop(sh_timers *t, double now);
SH_API int32_t sh_timers_count(const sh_timers *t);
SH_API int sh_timers_check(const sh_timers *t);

SH_API sh_pool *sh_pool_new(void);
SH_API void sh_pool_free(sh_pool *p);
SH_API int sh_pool_set_capacity(sh_pool *p, int32_t capacity);
SH_API int32_t sh_pool_capacity(const sh_pool *p);
SH_API int32_t sh_pool_in_use(const sh_pool *p);
SH_API int32_t sh_pool_waiting(const sh_pool *p);
SH_API int sh_pool_try_acquire(sh_pool *p);
SH_API int sh_pool_release(sh_pool *p);
SH_API int sh_pool_reset_use(sh_pool *p);
SH_API int sh_pool_enqueue(sh_pool *p, int32_t id, int32_t group);
SH_API int sh_pool_remove(sh_pool *p, int32_t id);
SH_API int sh_pool_move(sh_pool *p, int32_t id, int32_t group);
SH_API int32_t sh_pool_group_of(const sh_pool *p, int32_t id);
SH_API int sh_pool_is_waiting(const sh_pool *p, int32_t id);
SH_API int32_t sh_pool_next_group(const sh_pool *p, int32_t after);
SH_API int sh_pool_set_rank(sh_pool *p, int32_t group, double rank);
SH_API int sh_pool_fix_rank(sh_pool *p, int32_t group, double rank);
SH_API int sh_pool_forget_group(sh_pool *p, int32_t group);
SH_API int32_t sh_pool_next_live(const sh_pool *p, int32_t after);
SH_API int sh_pool_new_reads(sh_pool *p);
SH_API int32_t sh_pool_next_unread(sh_pool *p);
SH_API int sh_pool_reread(sh_pool *p, int32_t group);
SH_API int32_t sh_pool_grantable(const sh_pool *p);
SH_API int32_t sh_pool_best(const sh_pool *p);
SH_API double sh_pool_rank_of(const sh_pool *p, int32_t id);
SH_API double sh_pool_arrival(const sh_pool *p, int32_t id);
SH_API int sh_pool_grant(sh_pool *p, int32_t id);
SH_API int sh_pool_check(const sh_pool *p);
SH_API int32_t sh_pool_peek_next(sh_pool *p);
SH_API int sh_pool_peek_end(sh_pool *p);

SH_API sh_barrier *sh_barrier_new(int32_t size);
SH_API void sh_barrier_free(sh_barrier *b);
SH_API int sh_barrier_arrive(sh_barrier *b, int32_t index);
SH_API int32_t sh_barrier_arrived(const sh_barrier *b);
SH_API int32_t sh_barrier_size(const sh_barrier *b);
SH_API int32_t sh_barrier_next_missing(const sh_barrier *b, int32_t after);

SH_API sh_ids *sh_ids_new(void);
SH_API void sh_ids_free(sh_ids *s);
SH_API int32_t sh_ids_take(sh_ids *s);
SH_API int sh_ids_give(sh_ids *s, int32_t id);
SH_API int32_t sh_ids_count(const sh_ids *s);
SH_API int sh_ids_check(const sh_ids *s);

SH_API double sh_now_ms(void);
SH_API int sh_cores(void);
SH_API void sh_sleep_ms(double ms);
SH_API int sh_pin_library(void);
/* FFI-END */

/*
 * Stall clocks (sh_clock_*)
 *
 * Each started id has a stall time and the visible time of its last
 * progress; it stalls once visible time passes last + stall. Visible time
 * is the caller's clock with every hidden stretch (set_visible(0)) cut out.
 * It never runs back: a time earlier than one a call already recorded
 * (start, progress, resume, touch, hiding) reads as that one, so a caller's
 * clock that runs back stands still until it passes it again, and never
 * brings a deadline forward.
 *
 * progress is O(1): it writes the new time and leaves the heap alone. The
 * heap keeps each id under the deadline it had when it was last filed, which
 * is never later than its true one; pop_stalled re-files an early entry in
 * O(log n) when it reaches the top. Checking with nothing due reads the top
 * only. A paused id (a job waiting on another job) cannot stall; resume
 * counts as progress.
 *
 * A stall time of infinity (HUGE_VAL) is a clock that never stalls: it is
 * started, paused and stopped like any other, and next_due ignores it.
 *
 * pop_stalled returns one stalled id (the earliest deadline, then the
 * lowest id, whenever earlier checks ran) and stops its clock, or -1 when
 * none is due.
 * stall_ms gives an id's stall time, also just after pop_stalled stopped it
 * (until the id is started again); -1 for an id never started.
 * next_due is the visible-time distance to the earliest deadline the heap
 * knows, a lower bound of the true one; -1 when nothing can stall (no
 * running clock, or hidden).
 *
 * join links an id's clock to a group (a pool, a budget; -1 unlinks), and
 * touch marks the group active now: every clock linked to it counts that as
 * its own progress, in O(1) however many are linked (the lazy deadline check
 * takes the later of the two times). Only touches after the join count:
 * activity before a clock joined was no progress of its own. Leaving keeps
 * what the group gave.
 *
 * Sleep timers (sh_timers_*)
 *
 * At most one timer per id, due at an absolute time; pop returns ids whose
 * time has come, earliest first, ties in the order they were added. peek
 * returns the earliest due time, or -1 when empty.
 *
 * Slot pools (sh_pool_*)
 *
 * A capacity, a count in use, and waiters: ids queued first in, first out
 * within groups (one group per priority source, chosen by the caller). The
 * caller sets each active group's rank (next_group walks them; a number,
 * lower wins; NaN is refused with SH_EINVAL) before asking for the best waiter: the one in the best-ranked
 * group, the earliest to arrive among equals. fix_rank gives a group a rank
 * that never changes (a priority source that is a constant), and next_live
 * walks only the active groups whose rank is not fixed: those the caller
 * must read again. move files a waiting id under another group, keeping
 * its arrival (a job whose set of priority sources changed while it
 * waits); group_of is the group an id waits in (-1 if none). grantable is
 * how many waiters a grant could serve now. The active groups are kept in a
 * heap, so best is O(1) and a grant O(log groups), whatever the number of
 * waiters. new_reads starts an epoch of reading (a host's step), and
 * next_unread hands out, once each, the active groups whose rank is not
 * fixed and was not set since: a host that reads only those reads each of
 * its priority sources once an epoch, however many grants it makes.
 * reread hands a group out again in this epoch, though its rank was set
 * (the sources it stands for changed, and its waiters stay in it).
 * peek_next takes the best waiter out (-1 when none, SH_ENOMEM) without
 * granting it, so the next call sees the next best; peek_end puts every
 * waiter taken so back as it was. Between the two nothing else may be
 * called (an owner lists the best n waiters: a worker pool's offer).
 * try_acquire takes a slot at once only when
 * one is free and nobody waits; grant hands the best (or any) waiter a slot
 * and needs one free. Capacity may shrink below the count in use (slots
 * held are never taken back). reset_use zeroes the count (a per-step budget).
 *
 * Barriers (sh_barrier_*)
 *
 * size indices; arrive returns 1 for a first arrival, 0 for a repeat,
 * SH_EINVAL for an index out of range; next_missing walks the indices not
 * yet arrived (-1 at the end).
 *
 * Ids (sh_ids_*)
 *
 * Hands out ids from 0 up, always the lowest one free: take returns it (or
 * SH_ESTATE once all SH_MAX_ID are taken), give hands one back (SH_EINVAL
 * for an id never taken, SH_ESTATE for one given back already). Both cost
 * a word per level of a four-level bitmap, however many ids are out. Ids
 * kept low and in order are what keep the other structures' arrays, indexed
 * by id, read in order: a stack of freed ids handed a later wave of jobs
 * its ids in the reverse of the order the last wave ended in, and every
 * array indexed by them was then read out of order.
 *
 * sh_pin_library keeps the shared object holding the core loaded until the
 * process exits (RTLD_NODELETE). LuaJIT's FFI backend calls it: at
 * lua_close, the library ffi.load opened may be closed before the ffi.gc
 * finalizers that call into it have run. Returns SH_OK, or SH_ESTATE when
 * the object cannot be found (a static link: nothing to pin).
 *
 * *_check verify every heap and index invariant and return SH_OK or
 * SH_ESTATE; debug builds (SH_DEBUG_CHECKS) run them after each change
 * to a small structure, and after one change in n/64 to one of n entries.
 */

#ifdef __cplusplus
}
#endif

#endif
