#include "sh_checks.h"
#include "sh_grow.h"
#include "stagehand.h"

#include <stdlib.h>

/* Waiters are linked into their group's queue through the waiter table
 * (indexed by id); groups with waiters are linked into an active list, and
 * kept in a binary heap by (rank, arrival of their oldest waiter), so the
 * best waiter is the top group's head and a grant costs O(log groups).
 *
 * Ranks are read in epochs (a host's step): new_reads starts one, and
 * next_unread hands out each active group whose rank is not fixed and was
 * not set in this epoch, once; a group that turns active later in the
 * epoch is handed out then. So a host reads each of its priority sources
 * once an epoch, however many grants it makes. */

typedef struct waiter {
  uint64_t seq; /* arrival order; 0 when not waiting */
  int32_t group;
  int32_t prev, next; /* within the group's queue, -1 at the ends */
} waiter;

typedef struct group {
  int32_t head, tail, count;
  double rank;        /* lower first (the host's priority, negated) */
  int32_t prev, next; /* within the active list, -1 at the ends */
  int32_t fixed;      /* its rank never changes: next_live skips it */
  int32_t hpos;       /* index + 1 in the heap; 0 when not active */
  uint32_t read;      /* the epoch its rank was last set in */
  int32_t unread;     /* it is on the unread stack */
} group;

/* A waiter peek_next took out, to be put back as it was by peek_end. */
typedef struct peek_entry {
  int32_t id, group;
  uint64_t seq;
} peek_entry;

struct sh_pool {
  int32_t capacity, in_use, waiting;
  waiter *waiters;
  size_t nwaiters;
  group *groups;
  size_t ngroups;
  int32_t active; /* first active group, or -1 */
  uint64_t next_seq;
  int32_t *heap; /* active groups, best first; room for ngroups */
  size_t heap_len;
  int32_t *stack; /* groups to read in this epoch; room for ngroups */
  size_t stack_len;
  uint32_t epoch;
  peek_entry *peeked; /* (peek_next) */
  size_t npeeked, cappeeked;
#ifdef SH_DEBUG_CHECKS
  sh__checks checks;
#endif
};

#define CHECKED(p) SH__CHECKED(p, (p)->nwaiters + (p)->ngroups, sh_pool_check)

sh_pool *sh_pool_new(void) {
  sh_pool *p = (sh_pool *)calloc(1, sizeof *p);
  if (!p) return NULL;
  p->active = -1;
  p->next_seq = 1;
  p->epoch = 1;
  return p;
}

void sh_pool_free(sh_pool *p) {
  if (!p) return;
  sh__free_kept(p->waiters, p->nwaiters, sizeof *p->waiters);
  free(p->groups);
  free(p->heap);
  free(p->stack);
  free(p->peeked);
  free(p);
}

/* The heap of active groups: a group ranks before another by its rank,
 * then by its oldest waiter's arrival (distinct across groups). */
static int better(const sh_pool *p, int32_t a, int32_t b) {
  const group *ga = &p->groups[a], *gb = &p->groups[b];
  if (ga->rank != gb->rank) return ga->rank < gb->rank;
  return p->waiters[ga->head].seq < p->waiters[gb->head].seq;
}

static void hplace(sh_pool *p, size_t i, int32_t g) {
  p->heap[i] = g;
  p->groups[g].hpos = (int32_t)(i + 1);
}

static void sift_up(sh_pool *p, size_t i) {
  int32_t g = p->heap[i];
  while (i > 0) {
    size_t up = (i - 1) / 2;
    if (!better(p, g, p->heap[up])) break;
    hplace(p, i, p->heap[up]);
    i = up;
  }
  hplace(p, i, g);
}

static void sift_down(sh_pool *p, size_t i) {
  int32_t g = p->heap[i];
  for (;;) {
    size_t l = 2 * i + 1, b;
    if (l >= p->heap_len) break;
    b = l;
    if (l + 1 < p->heap_len && better(p, p->heap[l + 1], p->heap[l])) b = l + 1;
    if (!better(p, p->heap[b], g)) break;
    hplace(p, i, p->heap[b]);
    i = b;
  }
  hplace(p, i, g);
}

/* Group g's rank or oldest waiter changed: it takes its new place. */
static void reorder(sh_pool *p, int32_t g) {
  if (p->groups[g].hpos == 0) return;
  sift_up(p, (size_t)(p->groups[g].hpos - 1));
  sift_down(p, (size_t)(p->groups[g].hpos - 1));
}

static void heap_del(sh_pool *p, int32_t g) {
  size_t i = (size_t)(p->groups[g].hpos - 1);
  int32_t last = p->heap[--p->heap_len];
  p->groups[g].hpos = 0;
  if (i < p->heap_len) {
    hplace(p, i, last);
    reorder(p, last);
  }
}

/* Group g is to be read in this epoch (once: it is marked while stacked). */
static void stack_unread(sh_pool *p, int32_t g) {
  group *gr = &p->groups[g];
  if (gr->fixed || gr->unread || gr->read == p->epoch) return;
  gr->unread = 1;
  p->stack[p->stack_len++] = g;
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
  size_t n = p->nwaiters ? p->nwaiters : 64, got;
  waiter *w;
  if ((size_t)id < p->nwaiters) return SH_OK;
  while (n <= (size_t)id) n *= 2;
  w = (waiter *)sh__grow_kept(p->waiters, p->nwaiters, n, sizeof *w, 1, &got);
  if (!w) return SH_ENOMEM;
  p->waiters = w;
  p->nwaiters = got;
  return SH_OK;
}

static int grow_groups(sh_pool *p, int32_t g) {
  size_t n = p->ngroups ? p->ngroups : 8, i;
  group *gs;
  int32_t *heap, *stack;
  if ((size_t)g < p->ngroups) return SH_OK;
  while (n <= (size_t)g) n *= 2;
  /* (The heap and the stack hold each group at most once: with room for
   * every group, nothing that links a waiter can fail for want of it.) */
  heap = (int32_t *)realloc(p->heap, n * sizeof *heap);
  if (!heap) return SH_ENOMEM;
  p->heap = heap;
  stack = (int32_t *)realloc(p->stack, n * sizeof *stack);
  if (!stack) return SH_ENOMEM;
  p->stack = stack;
  gs = (group *)realloc(p->groups, n * sizeof *gs);
  if (!gs) return SH_ENOMEM;
  for (i = p->ngroups; i < n; i++) {
    gs[i].head = gs[i].tail = gs[i].prev = gs[i].next = -1;
    gs[i].count = 0;
    gs[i].rank = 0;
    gs[i].fixed = 0;
    gs[i].hpos = 0;
    gs[i].read = 0;
    gs[i].unread = 0;
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
    hplace(p, p->heap_len++, g);
    sift_up(p, p->heap_len - 1);
    stack_unread(p, g);
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
  if (--gr->count == 0) { /* no longer active: unlink */
    if (gr->prev >= 0) p->groups[gr->prev].next = gr->next; else p->active = gr->next;
    if (gr->next >= 0) p->groups[gr->next].prev = gr->prev;
    gr->prev = gr->next = -1;
    heap_del(p, g);
  } else if (w->prev < 0) {
    reorder(p, g); /* its oldest waiter left: a later one heads it now */
  }
  w->seq = 0;
  w->prev = w->next = -1;
  p->waiting--;
  CHECKED(p);
  return SH_OK;
}

/* Links id (not waiting) into group g right after waiter `at` (at the
 * head when at is -1), as having arrived at seq: the caller chose `at` so
 * the group stays in arrival order. */
static void link_after(sh_pool *p, int32_t id, int32_t g, uint64_t seq, int32_t at) {
  waiter *w = &p->waiters[id];
  group *gr = &p->groups[g];
  w->seq = seq;
  w->group = g;
  w->prev = at;
  w->next = at >= 0 ? p->waiters[at].next : gr->head;
  if (w->next >= 0) p->waiters[w->next].prev = id; else gr->tail = id;
  if (at >= 0) p->waiters[at].next = id; else gr->head = id;
  joined(p, g);
  if (at < 0 && gr->count > 1) reorder(p, g); /* it heads the group now */
}

/* Files a waiting id under another group, in arrival order there: it keeps
 * its place among equals. The walk starts from the tail, where an id
 * moved soon after it arrived (the usual case) belongs. */
int sh_pool_move(sh_pool *p, int32_t id, int32_t g) {
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
  for (at = p->groups[g].tail; at >= 0 && p->waiters[at].seq > seq; at = p->waiters[at].prev) {
  }
  link_after(p, id, g, seq, at);
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

int sh_pool_set_rank(sh_pool *p, int32_t g, double rank) {
  if (!p || g < 0 || (size_t)g >= p->ngroups || rank != rank) return SH_EINVAL;
  p->groups[g].rank = rank;
  p->groups[g].read = p->epoch;
  reorder(p, g);
  CHECKED(p);
  return SH_OK;
}

int sh_pool_fix_rank(sh_pool *p, int32_t g, double rank) {
  int rc;
  if (!p || g < 0 || g >= SH_MAX_ID || rank != rank) return SH_EINVAL;
  if ((rc = grow_groups(p, g)) != SH_OK) return rc;
  if (p->groups[g].fixed && p->groups[g].rank == rank) return SH_OK; /* (told already: the usual case) */
  p->groups[g].rank = rank;
  p->groups[g].fixed = 1;
  reorder(p, g);
  CHECKED(p);
  return SH_OK;
}

int sh_pool_new_reads(sh_pool *p) {
  size_t i;
  if (!p) return SH_EINVAL;
  p->epoch++;
  for (i = 0; i < p->stack_len; i++) p->groups[p->stack[i]].unread = 0;
  p->stack_len = 0;
  for (i = 0; i < p->heap_len; i++) stack_unread(p, p->heap[i]);
  return SH_OK;
}

int32_t sh_pool_next_unread(sh_pool *p) {
  if (!p) return -1;
  while (p->stack_len > 0) {
    int32_t g = p->stack[--p->stack_len];
    group *gr = &p->groups[g];
    gr->unread = 0;
    if (gr->count > 0 && !gr->fixed && gr->read != p->epoch) return g;
  }
  return -1;
}

/* Group g stands for other sources than when its rank was set (a set of
 * sources changed in place: its waiters stay in it), so it is handed out
 * again in this epoch. A group with no waiters is read when one comes. */
int sh_pool_reread(sh_pool *p, int32_t g) {
  group *gr;
  if (!p || g < 0 || g >= SH_MAX_ID) return SH_EINVAL;
  if ((size_t)g >= p->ngroups) return SH_OK; /* never used here */
  gr = &p->groups[g];
  gr->read = p->epoch - 1;
  if (gr->count > 0) stack_unread(p, g);
  CHECKED(p);
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
  p->groups[g].read = 0;
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
  if (!p || p->heap_len == 0) return -1;
  return p->groups[p->heap[0]].head;
}

double sh_pool_rank_of(const sh_pool *p, int32_t id) {
  if (!p || !waiting_id(p, id)) return 0;
  return p->groups[p->waiters[id].group].rank;
}

double sh_pool_arrival(const sh_pool *p, int32_t id) {
  if (!p || !waiting_id(p, id)) return -1;
  return (double)p->waiters[id].seq;
}

/* Peeking: the best waiters in grant order, without granting them. Each
 * is taken out in turn (the best is then the next one), and peek_end puts
 * them back at the heads of their groups, the last taken first: each was
 * its group's head when it was taken, so the queue is as it was. */
int32_t sh_pool_peek_next(sh_pool *p) {
  int32_t id;
  peek_entry *e;
  if (!p || p->heap_len == 0) return -1;
  if (p->npeeked == p->cappeeked) {
    size_t cap = p->cappeeked ? p->cappeeked * 2 : 16;
    peek_entry *grown = (peek_entry *)realloc(p->peeked, cap * sizeof *grown);
    if (!grown) return SH_ENOMEM;
    p->peeked = grown;
    p->cappeeked = cap;
  }
  id = p->groups[p->heap[0]].head;
  e = &p->peeked[p->npeeked++];
  e->id = id;
  e->group = p->waiters[id].group;
  e->seq = p->waiters[id].seq;
  sh_pool_remove(p, id);
  return id;
}

int sh_pool_peek_end(sh_pool *p) {
  if (!p) return SH_EINVAL;
  while (p->npeeked > 0) {
    const peek_entry *e = &p->peeked[--p->npeeked];
    int32_t at, nx;
    /* (Called as documented, each goes back at its group's head; a caller
     * that queued or moved waiters meanwhile gets a queue still whole:
     * an id waiting again stays as it is, and the rest go back in arrival
     * order.) */
    if (waiting_id(p, e->id)) continue;
    /* after the last waiter older than it (from the head: it was the head) */
    at = -1;
    for (nx = p->groups[e->group].head; nx >= 0 && p->waiters[nx].seq < e->seq; nx = p->waiters[nx].next) at = nx;
    link_after(p, e->id, e->group, e->seq, at);
  }
  CHECKED(p);
  return SH_OK;
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
  /* the heap: every active group once, each no better than its parent */
  {
    size_t nactive = 0;
    for (g = p->active; g >= 0; g = p->groups[g].next) {
      int32_t at = p->groups[g].hpos;
      nactive++;
      if (at <= 0 || (size_t)at > p->heap_len || p->heap[at - 1] != g) return SH_ESTATE;
    }
    if (nactive != p->heap_len) return SH_ESTATE;
    for (i = 1; i < p->heap_len; i++)
      if (better(p, p->heap[i], p->heap[(i - 1) / 2])) return SH_ESTATE;
    for (i = 0; i < p->stack_len; i++)
      if (!p->groups[p->stack[i]].unread) return SH_ESTATE;
  }
  for (i = 0; i < p->nwaiters; i++)
    if (p->waiters[i].seq != 0) total--;
  return total == 0 ? SH_OK : SH_ESTATE;
}
