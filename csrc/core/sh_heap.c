#include "sh_grow.h"
#include "sh_heap.h"
#include "stagehand.h"

#include <stdlib.h>
#include <string.h>

void sh__heap_init(sh__heap *h) { memset(h, 0, sizeof *h); }

void sh__heap_free(sh__heap *h) {
  sh__free_kept(h->items, h->cap, sizeof *h->items);
  sh__free_kept(h->pos, h->pos_cap, sizeof *h->pos);
  sh__heap_init(h);
}

int sh__heap_reserve(sh__heap *h, int32_t id) {
  size_t need, cap, got;
  uint32_t *pos;
  sh__heap_item *items;
  if (id < 0 || id >= SH_MAX_ID) return SH_EINVAL;
  need = (size_t)id + 1;
  if (need > h->pos_cap) {
    cap = h->pos_cap ? h->pos_cap : 64;
    while (cap < need) cap *= 2;
    pos = (uint32_t *)sh__grow_kept(h->pos, h->pos_cap, cap, sizeof *pos, 1, &got);
    if (!pos) return SH_ENOMEM;
    h->pos = pos;
    h->pos_cap = got;
  }
  /* The heap never holds more items than there are ids, so growing the item
   * array here means insert cannot fail later. */
  if (h->pos_cap > h->cap) {
    items = (sh__heap_item *)sh__grow_kept(h->items, h->cap, h->pos_cap, sizeof *items, 0, &got);
    if (!items) return SH_ENOMEM;
    h->items = items;
    h->cap = got;
  }
  return SH_OK;
}

int sh__heap_contains(const sh__heap *h, int32_t id) {
  return id >= 0 && (size_t)id < h->pos_cap && h->pos[id] != 0;
}

static int less(const sh__heap_item *a, const sh__heap_item *b) {
  if (a->key != b->key) return a->key < b->key;
  return a->seq < b->seq;
}

static void place(sh__heap *h, size_t i, sh__heap_item it) {
  h->items[i] = it;
  h->pos[it.id] = (uint32_t)(i + 1);
}

static void sift_up(sh__heap *h, size_t i) {
  sh__heap_item it = h->items[i];
  while (i > 0) {
    size_t parent = (i - 1) / 2;
    if (!less(&it, &h->items[parent])) break;
    place(h, i, h->items[parent]);
    i = parent;
  }
  place(h, i, it);
}

static void sift_down(sh__heap *h, size_t i) {
  sh__heap_item it = h->items[i];
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    const sh__heap_item *best = &it;
    if (l < h->len && less(&h->items[l], best)) m = l, best = &h->items[l];
    if (r < h->len && less(&h->items[r], best)) m = r;
    if (m == i) break;
    place(h, i, h->items[m]);
    i = m;
  }
  place(h, i, it);
}

int sh__heap_insert_tie(sh__heap *h, int32_t id, double key, uint64_t tie) {
  sh__heap_item it;
  int rc = sh__heap_reserve(h, id);
  if (rc != SH_OK) return rc;
  if (h->pos[id]) return SH_ESTATE;
  it.key = key;
  it.seq = tie;
  it.id = id;
  h->items[h->len] = it;
  h->pos[id] = (uint32_t)(h->len + 1);
  h->len++;
  sift_up(h, h->len - 1);
  return SH_OK;
}

int sh__heap_insert(sh__heap *h, int32_t id, double key) {
  int rc = sh__heap_insert_tie(h, id, key, h->next_seq);
  if (rc == SH_OK) h->next_seq++;
  return rc;
}

void sh__heap_rekey_tie(sh__heap *h, int32_t id, double key, uint64_t tie) {
  size_t i = h->pos[id] - 1;
  const sh__heap_item was = h->items[i];
  h->items[i].key = key;
  h->items[i].seq = tie;
  if (less(&h->items[i], &was))
    sift_up(h, i);
  else
    sift_down(h, i);
}

void sh__heap_remove(sh__heap *h, int32_t id) {
  size_t i = h->pos[id] - 1;
  sh__heap_item last;
  h->pos[id] = 0;
  h->len--;
  if (i == h->len) return;
  last = h->items[h->len];
  place(h, i, last);
  if (i > 0 && less(&last, &h->items[(i - 1) / 2]))
    sift_up(h, i);
  else
    sift_down(h, i);
}

double sh__heap_key(const sh__heap *h, int32_t id) { return h->items[h->pos[id] - 1].key; }

const sh__heap_item *sh__heap_top(const sh__heap *h) {
  return h->len ? &h->items[0] : NULL;
}

int sh__heap_check(const sh__heap *h) {
  size_t i, n = 0;
  for (i = 0; i < h->len; i++) {
    const sh__heap_item *it = &h->items[i];
    if (it->id < 0 || (size_t)it->id >= h->pos_cap) return SH_ESTATE;
    if (h->pos[it->id] != i + 1) return SH_ESTATE;
    if (i > 0 && less(it, &h->items[(i - 1) / 2])) return SH_ESTATE;
  }
  for (i = 0; i < h->pos_cap; i++)
    if (h->pos[i]) n++;
  return n == h->len ? SH_OK : SH_ESTATE;
}
