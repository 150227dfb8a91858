#include "sh_checks.h"
#include "sh_grow.h"
#include "sh_heap.h"
#include "stagehand.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

enum { FREE = 0, RUNNING = 1, PAUSED = 2 };

typedef struct entry {
  double last;     /* visible time of the last progress */
  double stall;    /* stall time in ms */
  uint64_t order;  /* when it started, counted over all ids: equal deadlines stall in this order */
  uint64_t joined; /* the touch count when it joined its group: later touches count */
  int32_t group;   /* a group whose activity counts as progress, or -1 */
  uint8_t state;
} entry;

typedef struct group_entry {
  double last;  /* visible time it was last touched */
  uint64_t seq; /* which touch that was, counted over all groups from 1 */
} group_entry;

struct sh_clock {
  sh__heap heap;  /* running ids, keyed by a deadline never later than the true one */
  entry *entries; /* indexed by id; as many as heap.pos_cap */
  size_t cap;
  int32_t count; /* started ids, running or paused */
  group_entry *groups; /* by group id */
  size_t ngroups;
  uint64_t touches; /* touches so far, of any group */
  uint64_t starts;  /* clocks started so far (entry.order) */
  int visible;
  double vis_acc;   /* visible ms before vis_since */
  double vis_since; /* caller time when visibility last turned on */
  double vis_high;  /* the latest visible time recorded anywhere */
#ifdef SH_DEBUG_CHECKS
  sh__checks checks;
#endif
};

#define CHECKED(c) SH__CHECKED(c, (c)->cap, sh_clock_check)

sh_clock *sh_clock_new(void) {
  sh_clock *c = (sh_clock *)calloc(1, sizeof *c);
  if (!c) return NULL;
  /* Equal deadlines stall in the order their clocks started (the order
   * the jobs started), not in filing order: an id's item keeps its filing
   * from an earlier clock of that id until a check re-files or drops it,
   * so filing order hangs on when checks ran (a host that steps every
   * frame and one that sleeps by next_wake ended two stalls in opposite
   * orders). Nor by id: ids are reused lowest first, so a later job may
   * hold a lower one. */
  sh__heap_init(&c->heap);
  c->visible = 1;
  c->vis_high = -HUGE_VAL;
  return c;
}

void sh_clock_free(sh_clock *c) {
  if (!c) return;
  sh__heap_free(&c->heap);
  sh__free_kept(c->entries, c->cap, sizeof *c->entries);
  free(c->groups);
  free(c);
}

/* (Comparisons, not isnan and isinf: MinGW's macros narrow to float
 * under -Wconversion.) */
static int valid_time(double t) { return t == t && t != HUGE_VAL && t != -HUGE_VAL; }

/* A time as the double it is stored as. On 32-bit x86 with x87 maths
 * (FLT_EVAL_METHOD 2: GCC's -m32 without -mfpmath=sse, MinGW's i686) a sum
 * is kept in an 80-bit register, so a deadline computed and compared at
 * once could differ from the same deadline filed in the heap: near 2^53 ms
 * a check then found a key later than its true deadline. Rounding where
 * each time is computed makes every comparison see what is stored. */
#if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD != 0 && FLT_EVAL_METHOD != 1 /* (-1: unknown, so rounded too) */
static double stored(double x) {
  volatile double v = x;
  return v;
}
#else
#define stored(x) (x)
#endif

/* Visible time never runs back, even when the caller's clock does: a time
 * earlier than one already recorded reads as that one. Every time an entry
 * or group records then only grows, so a deadline is never brought forward
 * past its filed key (the heap's lazy invariant, sh_clock_check). */
static double vnow(const sh_clock *c, double now) {
  double t = c->visible ? stored(c->vis_acc + stored(now - c->vis_since)) : c->vis_acc;
  return t > c->vis_high ? t : c->vis_high;
}

/* vnow, for a call that records the time it reads. */
static double vrecord(sh_clock *c, double now) {
  c->vis_high = vnow(c, now);
  return c->vis_high;
}

/* The later of an entry's own progress and its group's last activity since
 * it joined: activity before it joined was no progress of its own (a job
 * that asks for a slot just after another was handed one has not advanced).
 * Touches are counted rather than timed, so this holds for a touch and a
 * join at the same reading too. */
static double last_of(const sh_clock *c, const entry *e) {
  if (e->group >= 0 && (size_t)e->group < c->ngroups) {
    const group_entry *g = &c->groups[e->group];
    if (g->seq > e->joined && g->last > e->last) return g->last;
  }
  return e->last;
}

/* When e stalls: the later of its progress and its group's, plus its stall time. */
static double due_of(const sh_clock *c, const entry *e) { return stored(last_of(c, e) + e->stall); }

static entry *get(const sh_clock *c, int32_t id) {
  if (id < 0 || (size_t)id >= c->cap) return NULL;
  return c->entries[id].state == FREE ? NULL : &c->entries[id];
}

/* Starts id's clock; `order` is its place among equal deadlines, 0 for a
 * new one (after every clock started so far). */
static int start(sh_clock *c, int32_t id, double stall_ms, double now, uint64_t order) {
  entry *e;
  int rc;
  if (!c || !valid_time(now) || !(stall_ms > 0)) return SH_EINVAL; /* (inf: never stalls) */
  rc = sh__heap_reserve(&c->heap, id);
  if (rc != SH_OK) return rc;
  if (c->heap.pos_cap > c->cap) {
    size_t got;
    entry *grown = (entry *)sh__grow_kept(c->entries, c->cap, c->heap.pos_cap, sizeof *grown, 1, &got);
    if (!grown) return SH_ENOMEM;
    c->entries = grown;
    c->cap = got;
  }
  e = &c->entries[id];
  if (e->state != FREE) return SH_ESTATE;
  e->state = RUNNING;
  e->stall = stall_ms;
  e->last = vrecord(c, now);
  e->group = -1;
  e->order = order ? order : ++c->starts;
  c->count++;
  if (sh__heap_contains(&c->heap, id)) {
    /* The id's last clock stopped lazily and its item is still filed. A key
     * earlier than the new deadline stands as it is, order and all: it is
     * re-filed under this clock's deadline and order when it reaches the
     * top, before it could stall. A key equal to the deadline could stall
     * as it is, so it takes this clock's order (behind every equal key); a
     * later one would break the lazy invariant, and is brought down to the
     * deadline. (Re-filing every restarted id at once sifted it down the
     * heap: a kept orchestrator's next wave of 100,000 jobs took 75 ns a
     * start where a new one's took 5.) */
    double key = sh__heap_key(&c->heap, id), due = stored(e->last + e->stall);
    if (key >= due) sh__heap_rekey_tie(&c->heap, id, due, e->order);
    rc = SH_OK;
  } else {
    rc = sh__heap_insert_tie(&c->heap, id, stored(e->last + e->stall), e->order);
  }
  CHECKED(c);
  return rc;
}

int sh_clock_start(sh_clock *c, int32_t id, double stall_ms, double now) {
  return start(c, id, stall_ms, now, 0);
}

int sh_clock_restart(sh_clock *c, int32_t id, double now) {
  const entry *e;
  if (!c || id < 0 || (size_t)id >= c->cap) return SH_EINVAL;
  e = &c->entries[id];
  if (e->state != FREE || !(e->stall > 0)) return SH_EINVAL;
  return start(c, id, e->stall, now, e->order);
}

int sh_clock_progress(sh_clock *c, int32_t id, double now) {
  entry *e;
  if (!c || !valid_time(now)) return SH_EINVAL;
  e = get(c, id);
  if (!e) return SH_EINVAL;
  e->last = vrecord(c, now); /* no reordering: the heap finds out lazily */
  return SH_OK;
}

int sh_clock_pause(sh_clock *c, int32_t id) {
  entry *e;
  if (!c) return SH_EINVAL;
  e = get(c, id);
  if (!e) return SH_EINVAL;
  e->state = PAUSED; /* left in the heap; dropped when it reaches the top */
  return SH_OK;
}

int sh_clock_resume(sh_clock *c, int32_t id, double now) {
  entry *e;
  int rc = SH_OK;
  if (!c || !valid_time(now)) return SH_EINVAL;
  e = get(c, id);
  if (!e) return SH_EINVAL;
  e->state = RUNNING;
  e->last = vrecord(c, now);
  if (!sh__heap_contains(&c->heap, id)) rc = sh__heap_insert_tie(&c->heap, id, stored(e->last + e->stall), e->order);
  CHECKED(c);
  return rc;
}

int sh_clock_stop(sh_clock *c, int32_t id) {
  entry *e;
  if (!c) return SH_EINVAL;
  e = get(c, id);
  if (!e) return SH_EINVAL;
  /* Left in the heap, like a paused clock: dropped when it reaches the top,
   * or taken over if the id starts again first. */
  e->state = FREE;
  c->count--;
  CHECKED(c);
  return SH_OK;
}

int sh_clock_set_visible(sh_clock *c, int visible, double now) {
  if (!c || !valid_time(now)) return SH_EINVAL;
  visible = visible != 0;
  if (visible == c->visible) return SH_OK;
  if (visible) {
    c->vis_since = now;
  } else {
    c->vis_acc = vrecord(c, now);
  }
  c->visible = visible;
  return SH_OK;
}

int sh_clock_visible(const sh_clock *c) { return c ? c->visible : 0; }

double sh_clock_visible_time(const sh_clock *c, double now) {
  if (!c || !valid_time(now)) return -1;
  return vnow(c, now);
}

double sh_clock_next_due(const sh_clock *c, double now) {
  const sh__heap_item *top;
  double d;
  if (!c || !c->visible || !valid_time(now)) return -1;
  top = sh__heap_top(&c->heap);
  if (!top || top->key == HUGE_VAL || top->key == -HUGE_VAL) return -1; /* (only clocks that never stall) */
  d = top->key - vnow(c, now);
  return d > 0 ? d : 0;
}

int32_t sh_clock_pop_stalled(sh_clock *c, double now) {
  const sh__heap_item *top;
  double t;
  if (!c || !c->visible || !valid_time(now)) return -1;
  t = vnow(c, now);
  while ((top = sh__heap_top(&c->heap)) != NULL && top->key <= t) {
    int32_t id = top->id;
    entry *e = &c->entries[id];
    double due = due_of(c, e);
    if (e->state != RUNNING) { /* paused, or stopped: filed lazily */
      sh__heap_remove(&c->heap, id);
    } else if (due == top->key) {
      /* Only an entry filed under its true deadline may come out, so stalls
       * come out in true deadline order. */
      sh__heap_remove(&c->heap, id);
      e->state = FREE;
      c->count--;
      CHECKED(c);
      return id;
    } else {
      sh__heap_rekey_tie(&c->heap, id, due, e->order);
    }
  }
  CHECKED(c);
  return -1;
}

double sh_clock_stall_ms(const sh_clock *c, int32_t id) {
  /* Read from the entry even when it is free: a stopped entry keeps its
   * stall time until the id is started again. */
  if (!c || id < 0 || (size_t)id >= c->cap || !(c->entries[id].stall > 0)) return -1;
  return c->entries[id].stall;
}

int32_t sh_clock_count(const sh_clock *c) { return c ? c->count : 0; }

int sh_clock_join(sh_clock *c, int32_t id, int32_t group) {
  entry *e;
  if (!c || group < -1 || group >= SH_MAX_ID) return SH_EINVAL;
  e = get(c, id);
  if (!e) return SH_EINVAL;
  if (group >= 0 && (size_t)group >= c->ngroups) {
    size_t n = c->ngroups ? c->ngroups : 8, i;
    group_entry *g;
    while (n <= (size_t)group) n *= 2;
    g = (group_entry *)realloc(c->groups, n * sizeof *g);
    if (!g) return SH_ENOMEM;
    for (i = c->ngroups; i < n; i++) {
      g[i].last = -HUGE_VAL;
      g[i].seq = 0;
    }
    c->groups = g;
    c->ngroups = n;
  }
  /* Leaving a group keeps what it gave: the latest activity becomes the
   * entry's own progress, so leaving never brings a deadline forward. A
   * group joined counts only the touches after this one: neither does
   * joining bring a deadline forward. */
  e->last = last_of(c, e);
  e->group = group;
  e->joined = c->touches;
  return SH_OK;
}

int sh_clock_touch(sh_clock *c, int32_t group, double now) {
  if (!c || group < 0 || !valid_time(now)) return SH_EINVAL;
  if ((size_t)group >= c->ngroups) return SH_OK; /* nobody ever joined it */
  c->groups[group].last = vrecord(c, now);
  c->groups[group].seq = ++c->touches;
  return SH_OK;
}

int sh_clock_check(const sh_clock *c) {
  size_t i;
  int32_t n = 0;
  if (!c) return SH_EINVAL;
  if (sh__heap_check(&c->heap) != SH_OK) return SH_ESTATE;
  for (i = 0; i < c->cap; i++) {
    const entry *e = &c->entries[i];
    int in_heap = sh__heap_contains(&c->heap, (int32_t)i);
    if (e->state == RUNNING && !in_heap) return SH_ESTATE;
    if (e->state != FREE) n++;
    if (e->state != FREE && e->last > c->vis_high) return SH_ESTATE;
    /* A filed deadline is never later than the true one: that is what makes
     * the lazy re-filing safe. */
    if (in_heap && e->state == RUNNING &&
        c->heap.items[c->heap.pos[i] - 1].key > due_of(c, e))
      return SH_ESTATE;
  }
  return n == c->count ? SH_OK : SH_ESTATE;
}
