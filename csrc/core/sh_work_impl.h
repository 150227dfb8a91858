#ifndef SH_WORK_IMPL_H
#define SH_WORK_IMPL_H
/* Internal to a worker pool's queue: what sh_work.c (the queue, its
 * requests and workers, as the owner drives them) and sh_work_take.c (held
 * requests and offers, a worker taking one, reports and events) share. */
#include "sh_grow.h"
#include "sh_sync.h"
#include "sh_threads.h"
#include "stagehand.h"

#include <stdlib.h>
#include <string.h>


/* A worker that finds the queue empty looks again for this long before it
 * sleeps: a thread woken from sleep takes 20 to 50 us on a small VM, far
 * longer than a small request runs, and a game queueing a burst would
 * otherwise wake a worker for nearly every request. */
#define SPIN_MS 0.05

/* Requests pushed wait in an inbox of this many slots (a power of two)
 * until a worker, or the owner, moves them into the queue under its lock.
 * A game's main thread queueing a burst then takes no lock that workers
 * take and wakes nobody who is not asleep: with workers looking for work
 * on the other cores, each push under the queue's own lock passed that
 * lock (and the queue's memory) from core to core, and the main thread
 * waited for it. A full inbox is moved into the queue by the push that
 * found it full. */
#define INBOX 512

typedef struct request {
  int64_t id;
  double priority;
  uint64_t seq;
  sh_msg *payload;
} request;

/* A request held for the owner to offer (gated dispatch, see hold): its
 * payload is NULL while the slot is free; free slots are chained through
 * next_free. */
typedef struct held_req {
  int64_t id;
  sh_msg *payload;
  int32_t next_free;
} held_req;

/* One entry of an offer: a held request by its slot and id (a slot may
 * have been taken and filled again since: the id tells). */
typedef struct offer {
  int32_t slot;
  int64_t id;
} offer;

typedef struct event {
  int64_t id;
  int kind;
  int32_t worker;
  sh_msg *msg;
  double a, b;
} event;

/* One worker's state. Each is allocated on its own and never moves: its
 * thread holds a pointer to its stop flag. */
typedef struct worker {
  int stop; /* read by the worker's thread without the lock (SH__LOAD) */
  int halted; /* told to stop for good: each request it takes starts stopped */
  int retired, exited, taken;
  int64_t current;
  char waiting[SH_WAITING_LEN]; /* what it waits on ("" while it waits on nothing) */
  double since;
} worker;

/* Two locks: mu guards the queue and the workers, emu the events, so a
 * worker reporting does not hold up the owner queueing (or the reverse).
 * Where both are taken, mu comes first. */
struct sh_work {
  sh__mutex mu, emu;
  sh__cond cv; /* workers wait here for requests */
  sh_notify *owner;
  /* The queue: better first (higher priority, then lower seq). Requests
   * asked for in a row at one priority, as most are, go to the lane, a FIFO
   * (taking one is O(1), where a heap of 100,000 sifts 17 levels down under
   * the lock the owner queues with); the others to the heap. The next
   * request is the better of the lane's head and the heap's top. */
  request *lane; /* a ring, oldest at lhead; all of priority lane_prio, in seq order */
  int32_t lhead, llen, lcap;
  double lane_prio;
  request *heap;
  int32_t nheap, capheap;
  uint64_t seq;
  /* Held requests (hold), and the offer workers take them from, in order:
   * entries before onext are taken or passed over. */
  held_req *held;
  int32_t nheld, capheld, free_held, held_count;
  offer *offers;
  int32_t noffers, capoffers, onext;
  event *events; /* a ring, oldest at ehead */
  int32_t ehead, elen, ecap;
  worker **workers;
  int32_t nworkers, capworkers, live, running;
  int refs, paused, closed;
  int told; /* the owner was signalled since it last emptied the events */
  int ready; /* queued when not paused, else 0: read without the lock by spinning workers (SH__LOAD) */
  /* The inbox (see push): pushers fill it under pmu alone, and whoever
   * holds mu moves it into the queue (absorb). mu comes before pmu. */
  sh__mutex pmu;
  request *inbox; /* INBOX slots, filled from in_head up to in_tail */
  int32_t nq; /* queued(w) as of its last change (set_ready): read by pushers (SH__LOAD) */
  int32_t room; /* the lane and the heap each hold this many (reserve): read by pushers */
  int sleeping; /* workers waiting on cv: read by pushers */
  int looking; /* workers looking for work without sleeping (under mu): each looks at the offer before it sleeps */
  char apart_[64]; /* (in_tail on a line of its own: a pusher writes it for every request) */
  uint32_t in_tail; /* written under pmu */
  char apart2_[64];
  uint32_t in_head; /* written under mu */
};

static inline int32_t queued(const sh_work *w) { return w->nheap + w->llen; }
static inline worker *at(sh_work *w, int32_t i) { return i >= 0 && i < w->nworkers ? w->workers[i] : NULL; }

void sh__work_set_ready(sh_work *w);
int sh__work_add_event(sh_work *w, int64_t id, int kind, int32_t wk, sh_msg *m, double a, double b, int *tell);
void sh__work_absorb(sh_work *w);
request sh__work_take_at(sh_work *w, int32_t at);
void sh__work_put_back(sh_work *w, int32_t from, request r);
int32_t sh__work_best_at(const sh_work *w);

#endif
