/*
 * An indexed binary min-heap of ids, shared by stall clocks and timers.
 *
 * Items order by key, then by a sequence number given when filed, so equal
 * keys come out in filing order (libuv's timers break ties the same way).
 * A re-filed id may keep its place in line (refile).
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
/* Files id (not yet in the heap, room reserved) under key, in line after
 * every item filed before it under an equal key. */
int sh__heap_insert(sh__heap *h, int32_t id, double key);
/* Gives an id already in the heap a new key and place in line: seq, its
 * own (kept) or a new one taken from next_seq. */
void sh__heap_refile(sh__heap *h, int32_t id, double key, uint64_t seq);
void sh__heap_remove(sh__heap *h, int32_t id);
/* The key id is filed under, and its place in line (id must be in the heap). */
double sh__heap_key(const sh__heap *h, int32_t id);
uint64_t sh__heap_seq(const sh__heap *h, int32_t id);
/* The top item, or NULL when empty. */
const sh__heap_item *sh__heap_top(const sh__heap *h);
int sh__heap_check(const sh__heap *h);

#endif
