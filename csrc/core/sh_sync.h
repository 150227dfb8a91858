#ifndef SH_SYNC_H
#define SH_SYNC_H
/* Internal to the core: the slices a stoppable wait takes (the waits
 * themselves, locks and atomics are sh_platform.h's), and a bounded copy
 * of a string into a record's fixed buffer. */
#include "../platform/sh_platform.h"

/* A wait that can be stopped (a worker told to stop) looks at its stop
 * flag at least this often. */
#define SH__STOP_SLICE_MS 10.0

/* Copies the string src (NULL: none) into dst, cap bytes, cut to fit. */
static inline void sh__copy_cut(char *dst, size_t cap, const char *src) {
  size_t n = 0;
  if (src)
    for (; n + 1 < cap && src[n]; n++) dst[n] = src[n];
  dst[n] = '\0';
}

#endif
