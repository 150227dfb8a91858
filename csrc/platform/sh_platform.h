#ifndef SH_PLATFORM_H
#define SH_PLATFORM_H
/* Internal to the core: the little it needs of the system, in one place.
 * Locks, condition variables and timed waits on them, threads, atomic
 * flags and counters, and the wake-up descriptor a notifier signals.
 * csrc/unix/ implements it over POSIX (Linux, macOS, the BSDs, Android,
 * iOS), csrc/win/ over Win32; nothing else in the core names either.
 *
 * Where a POSIX system may lack something, the build says what it has
 * (the Makefile probes; a build that says nothing gets the portable path):
 *   SH_HAVE_PIPE2             pipe2(O_CLOEXEC | O_NONBLOCK), one call
 *   SH_HAVE_CONDATTR_SETCLOCK condition variables timed on CLOCK_MONOTONIC
 *   SH_HAVE_COND_TIMEDWAIT_RELATIVE  pthread_cond_timedwait_relative_np
 *                             (macOS, iOS), when the above is missing
 *   SH_HAVE_THREAD_NICE       setpriority on one thread's id (Linux,
 *                             Android): a worker's lower priority
 *   SH_HAVE_QOS_CLASS         pthread_set_qos_class_self_np (macOS, iOS)
 * SH_FORCE_FALLBACKS ignores both, so the portable paths (pipe + fcntl,
 * waits timed against the wall clock from a relative deadline) are built
 * and tested on Linux too. SH_NO_BUILTINS does the same for the atomics:
 * C11's <stdatomic.h> instead of the compiler's __atomic builtins. */
#include <stddef.h>
#include <stdint.h>

#if defined(SH_FORCE_FALLBACKS)
#undef SH_HAVE_PIPE2
#undef SH_HAVE_CONDATTR_SETCLOCK
#undef SH_HAVE_COND_TIMEDWAIT_RELATIVE
#undef SH_HAVE_THREAD_NICE
#undef SH_HAVE_QOS_CLASS
#endif

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>
typedef SRWLOCK sh__mutex;
typedef CONDITION_VARIABLE sh__cond;
typedef HANDLE sh__thread;
#define SH__MUTEX_INIT SRWLOCK_INIT
typedef unsigned(__stdcall *sh__thread_fn)(void *);
#define SH__THREAD_RETURN unsigned __stdcall
#else
#include <pthread.h>
typedef pthread_mutex_t sh__mutex;
typedef pthread_cond_t sh__cond;
typedef pthread_t sh__thread;
#define SH__MUTEX_INIT PTHREAD_MUTEX_INITIALIZER
typedef void *(*sh__thread_fn)(void *);
#define SH__THREAD_RETURN void *
#endif

/* 0 on success. */
int sh__mutex_init(sh__mutex *m);
void sh__mutex_destroy(sh__mutex *m);
void sh__mutex_lock(sh__mutex *m);
void sh__mutex_unlock(sh__mutex *m);

int sh__cond_init(sh__cond *c);
void sh__cond_destroy(sh__cond *c);
void sh__cond_signal(sh__cond *c);
void sh__cond_broadcast(sh__cond *c);
void sh__cond_wait(sh__cond *c, sh__mutex *m);
/* Waits on c (m held) until signalled or ms passed (a spurious wake-up may
 * end it early; callers look again). A change of the wall clock neither
 * shortens nor stretches the wait where the system allows. */
void sh__cond_wait_ms(sh__cond *c, sh__mutex *m, double ms);

/* A thread running fn(arg): 0 on success, else the system's error. A
 * thread is joined or detached once. */
int sh__thread_start(sh__thread *t, sh__thread_fn fn, void *arg);
void sh__thread_join(sh__thread t);
void sh__thread_detach(sh__thread t);
/* Lowers the calling thread's priority below the game's frame thread's, so
 * a worker takes the cores the frame leaves (a no-op where the system
 * offers no way for one thread). */
void sh__thread_lower_priority(void);
void sh__yield(void);

/* The wake-up descriptor of a notifier: a pipe on POSIX, a connected pair
 * of loopback sockets on Windows (libuv polls only sockets there). w[0]
 * turns readable once w[1] is written to. */
typedef struct sh__wake {
  intptr_t fd[2];
} sh__wake;
int sh__wake_open(sh__wake *w);
void sh__wake_close(sh__wake *w);
/* Makes fd[0] readable; 0 when a byte was written (a full pipe is
 * readable already: nothing is lost). */
int sh__wake_signal(sh__wake *w);
/* Reads fd[0] empty. */
void sh__wake_clear(sh__wake *w);

/* Flags one thread sets and another reads without a lock, and counters
 * several change, by pointer: LOAD/STORE acquire and release an int,
 * _U32 a uint32_t; _SC are sequentially consistent (a store and a later
 * load that must not pass each other: the work queue's inbox and its count
 * of sleeping workers); ADD returns the new value, sequentially
 * consistent. */
#if defined(SH_NO_BUILTINS) || !(defined(__GNUC__) || defined(__clang__))
#if defined(_MSC_VER) && !defined(SH_NO_BUILTINS)
/* (Interlocked calls are full barriers: every order below is met.) */
#include <intrin.h>
#define SH__LOAD(p) ((int)_InterlockedOr((volatile long *)(p), 0))
#define SH__STORE(p, v) ((void)_InterlockedExchange((volatile long *)(p), (long)(v)))
#define SH__LOAD_SC(p) SH__LOAD(p)
#define SH__LOAD_U32(p) ((uint32_t)_InterlockedOr((volatile long *)(p), 0))
#define SH__LOAD_U32_SC(p) SH__LOAD_U32(p)
#define SH__STORE_U32(p, v) ((void)_InterlockedExchange((volatile long *)(p), (long)(v)))
#define SH__STORE_U32_SC(p, v) SH__STORE_U32(p, v)
#define SH__ADD(p, v) ((int)_InterlockedExchangeAdd((volatile long *)(p), (long)(v)) + (v))
#else
/* C11 (SH_NO_BUILTINS, or a compiler without GCC's builtins): the same
 * orders through <stdatomic.h>, on plain ints and uint32_ts viewed as
 * atomic ones, which C11 compilers lay out alike. */
#include <stdatomic.h>
#define SH__AI(p) ((_Atomic int *)(p))
#define SH__AU(p) ((_Atomic uint32_t *)(p))
#define SH__LOAD(p) atomic_load_explicit(SH__AI(p), memory_order_acquire)
#define SH__STORE(p, v) atomic_store_explicit(SH__AI(p), (v), memory_order_release)
#define SH__LOAD_SC(p) atomic_load_explicit(SH__AI(p), memory_order_seq_cst)
#define SH__LOAD_U32(p) atomic_load_explicit(SH__AU(p), memory_order_acquire)
#define SH__LOAD_U32_SC(p) atomic_load_explicit(SH__AU(p), memory_order_seq_cst)
#define SH__STORE_U32(p, v) atomic_store_explicit(SH__AU(p), (v), memory_order_release)
#define SH__STORE_U32_SC(p, v) atomic_store_explicit(SH__AU(p), (v), memory_order_seq_cst)
#define SH__ADD(p, v) (atomic_fetch_add_explicit(SH__AI(p), (v), memory_order_seq_cst) + (v))
#endif
#else
#define SH__LOAD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define SH__STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define SH__LOAD_SC(p) __atomic_load_n((p), __ATOMIC_SEQ_CST)
#define SH__LOAD_U32(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define SH__LOAD_U32_SC(p) __atomic_load_n((p), __ATOMIC_SEQ_CST)
#define SH__STORE_U32(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define SH__STORE_U32_SC(p, v) __atomic_store_n((p), (v), __ATOMIC_SEQ_CST)
#define SH__ADD(p, v) __atomic_add_fetch((p), (v), __ATOMIC_SEQ_CST)
#endif

#ifdef __cplusplus
}
#endif

#endif
