#include "sh_grow.h"
#include "stagehand.h"

#include <stdlib.h>

/* Waiters are linked into their group's queue through the waiter table
 * (indexed by id); groups with waiters are linked into an active list so
 * a grant visits only them. */

typedef struct waiter {
  uint64_t seq; /* arrival order; 0 when not waiting */
  int32_t group;
  int32_t prev, next; /* within the group's queue, -1 at the ends */
} waiter;

typedef struct group {
  int32_t head, tail, count;
  int32_t rank;
  int32_t prev, next; /* within the active list, -1 at the ends */
  int32_t fixed;      /* its rank never changes: next_live skips it */
} group;

struct sh_pool {
  int32_t capacity, in_use, waiting;
  waiter *waiters;
  size_t nwaiters;
  group *groups;
  size_t ngroups;
  int32_t active; /* first active group, or -1 */
  uint64_t next_seq;
};

#ifdef SH_DEBUG_CHECKS
#include <assert.h>
#define CHECKED(p) assert(sh_pool_check(p) == SH_OK)
#else
#define CHECKED(p) ((void)0)
#endif

sh_pool *sh_pool_new(void) {
  sh_pool *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->active = -1;
  p->next_seq = 1;
  return p;
}

void sh_pool_free(sh_pool *p) {
  if (!p) return;
  free(p->waiters);
  free(p->groups);
  free(p);
}

int sh_pool_set_capacity(sh_pool *p, int32_t capacity) {
  if (!p || capacity < 0) return SH_EINVAL;
  p->capacity = capacity;
  return SH_OK;
}

int32_t sh_pool_capacity(const sh_pool *p) { return p ? p->capacity : 0; }
int32_t sh_pool_in_use(const sh_pool *p) { return p ? p->in_use : 0; }
int32_t sh_pool_waiting(const sh_pool *p) { return p ? p->waiting : 0; }

int sh_pool_try_acquire(sh_pool *p) {
  if (!p) return SH_EINVAL;
  if (p->waiting > 0 || p->in_use >= p->capacity) return SH_ESTATE;
  p->in_use++;
  return SH_OK;
}

int sh_pool_release(sh_pool *p) {
  if (!p) return SH_EINVAL;
  if (p->in_use <= 0) return SH_ESTATE;
  p->in_use--;
  return SH_OK;
}

int sh_pool_reset_use(sh_pool *p) {
  if (!p) return SH_EINVAL;
  p->in_use = 0;
  return SH_OK;
}

static int grow_waiters(sh_pool *p, int32_t id) {
  size_t n = p->nwaiters ? p->nwaiters : 64;
  waiter *w;
  if ((size_t)id < p->nwaiters) return SH_OK;
  while (n <= (size_t)id) n *= 2;
  w = sh__grow_zeroed(p->waiters, p->nwaiters, n, sizeof *w);
  if (!w) return SH_ENOMEM;
  p->waiters = w;
  p->nwaiters = n;
  return SH_OK;
}

static int grow_groups(sh_pool *p, int32_t g) {
  size_t n = p->ngroups ? p->ngroups : 8, i;
  group *gs;
  if ((size_t)g < p->ngroups) return SH_OK;
  while (n <= (size_t)g) n *= 2;
  gs = realloc(p->groups, n * sizeof *gs);
  if (!gs) return SH_ENOMEM;
  for (i = p->ngroups; i < n; i++) {
    gs[i].head = gs[i].tail = gs[i].prev = gs[i].next = -1;
    gs[i].count = 0;
    gs[i].rank = 0;
    gs[i].fixed = 0;
  }
  p->groups = gs;
  p->ngroups = n;
  return SH_OK;
}

static int waiting_id(const sh_pool *p, int32_t id) {
  return id >= 0 && (size_t)id < p->nwaiters && p->waiters[id].seq != 0;
}

/* A waiter was linked into group g: count it, and a group that had none
 * becomes active (linked at the front of the active list). */
static void joined(sh_pool *p, int32_t g) {
  group *gr = &p->groups[g];
  if (gr->count++ == 0) {
    gr->prev = -1;
    gr->next = p->active;
    if (p->active >= 0) p->groups[p->active].prev = g;
    p->active = g;
  }
  p->waiting++;
}

int sh_pool_enqueue(sh_pool *p, int32_t id, int32_t g) {
  waiter *w;
  group *gr;
  int rc;
  if (!p || id < 0 || id >= SH_MAX_ID || g < 0 || g >= SH_MAX_ID) return SH_EINVAL;
  if ((rc = grow_waiters(p, id)) != SH_OK || (rc = grow_groups(p, g)) != SH_OK) return rc;
  w = &p->waiters[id];
  if (w->seq != 0) return SH_ESTATE;
  gr = &p->groups[g];
  w->seq = p->next_seq++;
  w->group = g;
  w->next = -1;
  w->prev = gr->tail;
  if (gr->tail >= 0)
    p->waiters[gr->tail].next = id;
  else
    gr->head = id;
  gr->tail = id;
  joined(p, g);
  CHECKED(p);
  return SH_OK;
}

int sh_pool_remove(sh_pool *p, int32_t id) {
  waiter *w;
  group *gr;
  int32_t g;
  if (!p) return SH_EINVAL;
  if (!waiting_id(p, id)) return SH_ESTATE;
  w = &p->waiters[id];
  g = w->group;
  gr = &p->groups[g];
  if (w->prev >= 0) p->waiters[w->prev].next = w->next; else gr->head = w->next;
  if (w->next >= 0) p->waiters[w->next].prev = w->prev; else gr->tail = w->prev;
  w->seq = 0;
  w->prev = w->next = -1;
  if (--gr->count == 0) { /* no longer active: unlink */
    if (gr->prev >= 0) p->groups[gr->prev].next = gr->next; else p->active = gr->next;
    if (gr->next >= 0) p->groups[gr->next].prev = gr->prev;
    gr->prev = gr->next = -1;
  }
  p->waiting--;
  CHECKED(p);
  return SH_OK;
}

/* Files a waiting id under another group, in arrival order there: it keeps
 * its place among equals. The walk starts from the tail, where an id
 * moved soon after it arrived (the usual case) belongs. */
int sh_pool_move(sh_pool *p, int32_t id, int32_t g) {
  waiter *w;
  group *gr;
  int32_t at;
  uint64_t seq;
  int rc;
  if (!p || g < 0 || g >= SH_MAX_ID) return SH_EINVAL;
  if (!waiting_id(p, id)) return SH_ESTATE;
  if (p->waiters[id].group == g) return SH_OK;
  if ((rc = grow_groups(p, g)) != SH_OK) return rc;
  seq = p->waiters[id].seq;
  rc = sh_pool_remove(p, id); /* (keeps nothing of id but seq, restored below) */
  if (rc != SH_OK) return rc;
  w = &p->waiters[id];
  gr = &p->groups[g];
  w->seq = seq;
  w->group = g;
  for (at = gr->tail; at >= 0 && p->waiters[at].seq > seq; at = p->waiters[at].prev) {
  }
  /* id goes right after `at` (at the head when at is -1) */
  w->prev = at;
  w->next = at >= 0 ? p->waiters[at].next : gr->head;
  if (w->next >= 0) p->waiters[w->next].prev = id; else gr->tail = id;
  if (at >= 0) p->waiters[at].next = id; else gr->head = id;
  joined(p, g);
  CHECKED(p);
  return SH_OK;
}

int32_t sh_pool_group_of(const sh_pool *p, int32_t id) {
  if (!p || !waiting_id(p, id)) return -1;
  return p->waiters[id].group;
}

int sh_pool_is_waiting(const sh_pool *p, int32_t id) { return p && waiting_id(p, id); }

int32_t sh_pool_next_group(const sh_pool *p, int32_t after) {
  if (!p) return -1;
  if (after < 0) return p->active;
  if ((size_t)after >= p->ngroups || p->groups[after].count == 0) return -1;
  return p->groups[after].next;
}

int sh_pool_set_rank(sh_pool *p, int32_t g, int32_t rank) {
  if (!p || g < 0 || (size_t)g >= p->ngroups) return SH_EINVAL;
  p->groups[g].rank = rank;
  return SH_OK;
}

int sh_pool_fix_rank(sh_pool *p, int32_t g, int32_t rank) {
  int rc;
  if (!p || g < 0 || g >= SH_MAX_ID) return SH_EINVAL;
  if ((rc = grow_groups(p, g)) != SH_OK) return rc;
  p->groups[g].rank = rank;
  p->groups[g].fixed = 1;
  return SH_OK;
}

/* A group id given back for reuse (its set of sources is gone, or its
 * function was collected): it must have no waiters, and it forgets its rank
 * and whether that rank was fixed, so the id can name any source next. */
int sh_pool_forget_group(sh_pool *p, int32_t g) {
  if (!p || g < 0 || g >= SH_MAX_ID) return SH_EINVAL;
  if ((size_t)g >= p->ngroups) return SH_OK; /* never used here */
  if (p->groups[g].count != 0) return SH_ESTATE;
  p->groups[g].rank = 0;
  p->groups[g].fixed = 0;
  CHECKED(p);
  return SH_OK;
}

int32_t sh_pool_next_live(const sh_pool *p, int32_t after) {
  int32_t g = sh_pool_next_group(p, after);
  while (g >= 0 && p->groups[g].fixed) g = p->groups[g].next;
  return g;
}

int32_t sh_pool_grantable(const sh_pool *p) {
  int32_t free_slots;
  if (!p) return 0;
  free_slots = p->capacity - p->in_use;
  if (free_slots <= 0) return 0;
  return p->waiting < free_slots ? p->waiting : free_slots;
}

int32_t sh_pool_best(const sh_pool *p) {
  int32_t g, best = -1, best_rank = 0;
  uint64_t best_seq = 0;
  if (!p) return -1;
  for (g = p->active; g >= 0; g = p->groups[g].next) {
    const group *gr = &p->groups[g];
    uint64_t seq = p->waiters[gr->head].seq;
    if (best < 0 || gr->rank < best_rank || (gr->rank == best_rank && seq < best_seq)) {
      best = gr->head;
      best_rank = gr->rank;
      best_seq = seq;
    }
  }
  return best;
}

int32_t sh_pool_rank_of(const sh_pool *p, int32_t id) {
  if (!p || !waiting_id(p, id)) return -1;
  return p->groups[p->waiters[id].group].rank;
}

double sh_pool_arrival(const sh_pool *p, int32_t id) {
  if (!p || !waiting_id(p, id)) return -1;
  return (double)p->waiters[id].seq;
}

int sh_pool_grant(sh_pool *p, int32_t id) {
  int rc;
  if (!p) return SH_EINVAL;
  if (p->in_use >= p->capacity) return SH_ESTATE;
  rc = sh_pool_remove(p, id);
  if (rc != SH_OK) return rc;
  p->in_use++;
  return SH_OK;
}

int sh_pool_check(const sh_pool *p) {
  int32_t g, total = 0;
  size_t i;
  if (!p) return SH_EINVAL;
  if (p->in_use < 0 || p->capacity < 0 || p->waiting < 0) return SH_ESTATE;
  for (g = p->active; g >= 0; g = p->groups[g].next) {
    const group *gr = &p->groups[g];
    int32_t id, n = 0, prev = -1;
    uint64_t last = 0;
    if (gr->count <= 0) return SH_ESTATE;
    if (gr->next >= 0 && p->groups[gr->next].prev != g) return SH_ESTATE;
    for (id = gr->head; id >= 0; id = p->waiters[id].next) {
      const waiter *w = &p->waiters[id];
      if (w->group != g || w->prev != prev || w->seq <= last) return SH_ESTATE;
      last = w->seq;
      prev = id;
      n++;
    }
    if (n != gr->count || gr->tail != prev) return SH_ESTATE;
    total += n;
  }
  if (total != p->waiting) return SH_ESTATE;
  for (i = 0; i < p->nwaiters; i++)
    if (p->waiters[i].seq != 0) total--;
  return total == 0 ? SH_OK : SH_ESTATE;
}
