#ifndef SH_SYNC_H
#define SH_SYNC_H
/* Internal to the core: waiting on a condition variable for at most some
 * milliseconds (CLOCK_MONOTONIC, so a change of the wall clock neither
 * shortens nor stretches a wait), and the slices a stoppable wait takes. */
#include <pthread.h>
#include <time.h>

/* A wait that can be stopped (a worker told to stop) looks at its stop
 * flag at least this often. */
#define SH__STOP_SLICE_MS 10.0

/* A flag one thread sets and another reads without a lock. */
#define SH__LOAD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define SH__STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)

int sh__cond_init(pthread_cond_t *c);
/* Waits on c (m held) until signalled or ms passed; 0, or ETIMEDOUT. */
int sh__cond_wait_ms(pthread_cond_t *c, pthread_mutex_t *m, double ms);

#endif
