#ifndef SH_GROW_H
#define SH_GROW_H
/* Internal to the core: growing an array indexed by id. */
#include <stdlib.h>
#include <string.h>

/* Reallocates p (old_n elements of size bytes) to new_n > old_n elements,
 * the new ones zeroed. Returns the new array, or NULL with p untouched. */
static inline void *sh__grow_zeroed(void *p, size_t old_n, size_t new_n, size_t size) {
  unsigned char *grown = realloc(p, new_n * size);
  if (grown) memset(grown + old_n * size, 0, (new_n - old_n) * size);
  return grown;
}

#endif
