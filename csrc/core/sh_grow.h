#ifndef SH_GROW_H
#define SH_GROW_H
/* Internal to the core: growing an array indexed by id. */
#include <stdlib.h>
#include <string.h>

/* Reallocates p (old_n elements of size bytes) to new_n > old_n elements,
 * the new ones zeroed. Returns the new array, or NULL with p untouched. */
static inline void *sh__grow_zeroed(void *p, size_t old_n, size_t new_n, size_t size) {
  unsigned char *grown = (unsigned char *)realloc(p, new_n * size);
  if (grown) memset(grown + old_n * size, 0, (new_n - old_n) * size);
  return grown;
}

/* The arrays a core keeps one entry of per job id (a stall clock's entries,
 * a heap's items and places, a pool's waiters) grow with the jobs running
 * and are freed with their core. Fresh memory costs a page fault at its
 * first touch (about 1.3 us each on the development VM: 30-50 ns a job
 * when a new orchestrator runs 100,000), and the C library hands arrays
 * this big back to the system once freed. So those of SH__SPARE_MIN bytes
 * or more are kept when freed, SH__SPARE_MAX bytes in all, and the next
 * core to grow one takes the smallest kept block that holds what it needs.
 * A worker pool's queues (an entry a request or an event) are kept the same
 * way. Any thread may grow and free them (a lock guards what is kept). */
#define SH__SPARE_MIN ((size_t)256 * 1024)
#define SH__SPARE_MAX ((size_t)32 * 1024 * 1024)

/* Grows p from old_n to at least new_n > old_n elements of size bytes,
 * copying the first old_n and zeroing the rest when `zero`. *got is set
 * to how many elements the array now holds (new_n or more: a kept block
 * may be bigger). Returns the array, or NULL with p untouched. */
void *sh__grow_kept(void *p, size_t old_n, size_t new_n, size_t size, int zero, size_t *got);
/* A new array of at least n elements of size bytes, not zeroed (a kept
 * block, or malloc's); *got as for sh__grow_kept. NULL when out of memory. */
void *sh__alloc_kept(size_t n, size_t size, size_t *got);
/* Frees an array of n elements of size bytes from sh__grow_kept or
 * sh__alloc_kept. */
void sh__free_kept(void *p, size_t n, size_t size);
/* How many blocks are kept, and their bytes (for tests). */
size_t sh__kept_blocks(size_t *bytes);

#endif
