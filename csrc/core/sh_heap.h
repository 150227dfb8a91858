/*
 * An indexed binary min-heap of ids, shared by stall clocks and timers.
 *
 * Items order by key, then by a sequence number: given when filed, so equal
 * keys come out in filing order (libuv's timers break ties the same way);
 * or given by the caller (the _tie functions), so that the order of equal
 * keys never hangs on when each was filed (stall clocks, filed lazily,
 * order equal deadlines by when each clock started).
 * pos[id] remembers where each id sits, so any id can be re-keyed or removed
 * in O(log n). Internal to the core: the sh__ prefix.
 */
#ifndef SH_HEAP_H
#define SH_HEAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct sh__heap_item {
  double key;
  uint64_t seq;
  int32_t id;
} sh__heap_item;

typedef struct sh__heap {
  sh__heap_item *items;
  size_t len, cap;
  uint32_t *pos; /* pos[id] = index + 1; 0 when id is not in the heap */
  size_t pos_cap;
  uint64_t next_seq;
} sh__heap;

void sh__heap_init(sh__heap *h);
void sh__heap_free(sh__heap *h);
/* Makes room for ids up to and including id; SH_OK or SH_ENOMEM. */
int sh__heap_reserve(sh__heap *h, int32_t id);
int sh__heap_contains(const sh__heap *h, int32_t id);
/* Files id (not yet in the heap, room reserved) under key. */
int sh__heap_insert(sh__heap *h, int32_t id, double key);
/* The same, with the caller's sequence number (tie) for equal keys; and
 * gives an id already in the heap a new key and tie. A heap files with
 * sh__heap_insert or with these, never both. */
int sh__heap_insert_tie(sh__heap *h, int32_t id, double key, uint64_t tie);
void sh__heap_rekey_tie(sh__heap *h, int32_t id, double key, uint64_t tie);
void sh__heap_remove(sh__heap *h, int32_t id);
/* The key id is filed under (id must be in the heap). */
double sh__heap_key(const sh__heap *h, int32_t id);
/* The top item, or NULL when empty. */
const sh__heap_item *sh__heap_top(const sh__heap *h);
int sh__heap_check(const sh__heap *h);

#endif
