#include "sh_grow.h"
#include "../platform/sh_platform.h"

#include <stdint.h>

/* What is kept: at most SPARE_SLOTS blocks, SH__SPARE_MAX bytes. */
#define SPARE_SLOTS 16

static sh__mutex spare_mu = SH__MUTEX_INIT;
static struct {
  void *p;
  size_t bytes;
} spare[SPARE_SLOTS];
static size_t spare_bytes;
static int spare_closed; /* the library is unloading: nothing more is kept */

/* Takes the smallest kept block of at least `bytes`, or NULL. */
static void *take(size_t bytes, size_t *got_bytes) {
  size_t i, best = SPARE_SLOTS;
  void *p = NULL;
  sh__mutex_lock(&spare_mu);
  for (i = 0; i < SPARE_SLOTS; i++)
    if (spare[i].p && spare[i].bytes >= bytes && (best == SPARE_SLOTS || spare[i].bytes < spare[best].bytes))
      best = i;
  if (best < SPARE_SLOTS) {
    p = spare[best].p;
    *got_bytes = spare[best].bytes;
    spare_bytes -= spare[best].bytes;
    spare[best].p = NULL;
    spare[best].bytes = 0;
  }
  sh__mutex_unlock(&spare_mu);
  return p;
}

void *sh__grow_kept(void *p, size_t old_n, size_t new_n, size_t size, int zero, size_t *got) {
  size_t bytes, have = 0;
  unsigned char *grown = NULL;
  if (size == 0 || new_n > SIZE_MAX / size) return NULL;
  bytes = new_n * size;
  if (bytes >= SH__SPARE_MIN) grown = (unsigned char *)take(bytes, &have);
  if (grown) {
    if (old_n) memcpy(grown, p, old_n * size);
    sh__free_kept(p, old_n, size);
  } else {
    grown = (unsigned char *)realloc(p, bytes);
    if (!grown) return NULL;
    have = bytes;
  }
  if (zero) memset(grown + old_n * size, 0, have - old_n * size);
  *got = have / size;
  return grown;
}

void *sh__alloc_kept(size_t n, size_t size, size_t *got) {
  if (n == 0) return NULL;
  return sh__grow_kept(NULL, 0, n, size, 0, got); /* (realloc of NULL is malloc) */
}

void sh__free_kept(void *p, size_t n, size_t size) {
  size_t bytes = n * size, i;
  if (!p) return;
  if (bytes >= SH__SPARE_MIN) {
    sh__mutex_lock(&spare_mu);
    if (!spare_closed && spare_bytes + bytes <= SH__SPARE_MAX) {
      for (i = 0; i < SPARE_SLOTS; i++) {
        if (!spare[i].p) {
          spare[i].p = p;
          spare[i].bytes = bytes;
          spare_bytes += bytes;
          p = NULL;
          break;
        }
      }
    }
    sh__mutex_unlock(&spare_mu);
  }
  free(p);
}

size_t sh__kept_blocks(size_t *bytes) {
  size_t i, n = 0;
  sh__mutex_lock(&spare_mu);
  for (i = 0; i < SPARE_SLOTS; i++) n += spare[i].p != NULL;
  if (bytes) *bytes = spare_bytes;
  sh__mutex_unlock(&spare_mu);
  return n;
}

#if defined(__GNUC__)
/* At exit, or when the library is unloaded (Lua 5.4 closes a C module's
 * library with its state), what is kept is freed. */
__attribute__((destructor)) static void drop_kept(void) {
  size_t i;
  sh__mutex_lock(&spare_mu);
  spare_closed = 1;
  for (i = 0; i < SPARE_SLOTS; i++) {
    free(spare[i].p);
    spare[i].p = NULL;
    spare[i].bytes = 0;
  }
  spare_bytes = 0;
  sh__mutex_unlock(&spare_mu);
}
#endif
