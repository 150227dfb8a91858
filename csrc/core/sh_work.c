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
  char apart_[64]; /* (in_tail on a line of its own: a pusher writes it for every request) */
  uint32_t in_tail; /* written under pmu */
  char apart2_[64];
  uint32_t in_head; /* written under mu */
};

static int32_t queued(const sh_work *w) { return w->nheap + w->llen; }

/* What a worker could take now: the lane and the heap, and what is left
 * of the offer (an upper bound: an entry may have been dropped since). */
static int32_t takeable(const sh_work *w) { return w->nheap + w->llen + (w->noffers - w->onext); }

/* (mu held) After every change to the queue: what spinning workers and
 * pushers read without mu. */
static void set_ready(sh_work *w) {
  SH__STORE(&w->nq, queued(w));
  SH__STORE(&w->ready, w->paused || w->closed ? 0 : takeable(w));
}

static request *lane_at(const sh_work *w, int32_t k) { return &w->lane[(w->lhead + k) % w->lcap]; }

static int better(const request *a, const request *b) {
  if (a->priority != b->priority) return a->priority > b->priority;
  return a->seq < b->seq;
}

static void sift_up(request *h, int32_t i) {
  request r = h[i];
  while (i > 0) {
    int32_t up = (i - 1) / 2;
    if (!better(&r, &h[up])) break;
    h[i] = h[up];
    i = up;
  }
  h[i] = r;
}

static void sift_down(request *h, int32_t n, int32_t i) {
  request r = h[i];
  for (;;) {
    int32_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && better(&h[c + 1], &h[c])) c++;
    if (!better(&h[c], &r)) break;
    h[i] = h[c];
    i = c;
  }
  h[i] = r;
}

sh_work *sh_work_new(sh_notify *owner) {
  sh_work *w;
  if (!owner) return NULL;
  w = (sh_work *)calloc(1, sizeof *w);
  if (!w) return NULL;
  w->inbox = (request *)malloc(INBOX * sizeof *w->inbox);
  if (!w->inbox) goto no_inbox;
  if (sh__mutex_init(&w->mu)) goto no_mu;
  if (sh__mutex_init(&w->emu)) goto no_emu;
  if (sh__mutex_init(&w->pmu)) goto no_pmu;
  if (sh__cond_init(&w->cv)) goto no_cv;
  sh_notify_ref(owner);
  w->owner = owner;
  w->free_held = -1;
  w->refs = 1;
  return w;
no_cv:
  sh__mutex_destroy(&w->pmu);
no_pmu:
  sh__mutex_destroy(&w->emu);
no_emu:
  sh__mutex_destroy(&w->mu);
no_mu:
  free(w->inbox);
no_inbox:
  free(w);
  return NULL;
}

void sh_work_ref(sh_work *w) {
  sh__mutex_lock(&w->mu);
  w->refs++;
  sh__mutex_unlock(&w->mu);
}

void sh_work_unref(sh_work *w) {
  int left;
  int32_t i;
  if (!w) return;
  sh__mutex_lock(&w->mu);
  left = --w->refs;
  sh__mutex_unlock(&w->mu);
  if (left) return;
  for (i = 0; i < w->nheap; i++) sh_msg_free(w->heap[i].payload);
  for (i = 0; i < w->llen; i++) sh_msg_free(lane_at(w, i)->payload);
  for (; w->in_head != w->in_tail; w->in_head++) sh_msg_free(w->inbox[w->in_head % INBOX].payload);
  for (i = 0; i < w->elen; i++) sh_msg_free(w->events[(w->ehead + i) % w->ecap].msg);
  for (i = 0; i < w->nheld; i++) sh_msg_free(w->held[i].payload);
  free(w->held);
  free(w->offers);
  for (i = 0; i < w->nworkers; i++) free(w->workers[i]);
  sh__free_kept(w->heap, (size_t)w->capheap, sizeof *w->heap);
  sh__free_kept(w->lane, (size_t)w->lcap, sizeof *w->lane);
  free(w->inbox);
  sh__free_kept(w->events, (size_t)w->ecap, sizeof *w->events);
  free(w->workers);
  sh_notify_unref(w->owner);
  sh__cond_destroy(&w->cv);
  sh__mutex_destroy(&w->pmu);
  sh__mutex_destroy(&w->emu);
  sh__mutex_destroy(&w->mu);
  free(w);
}

/* A queue's capacity from the elements a kept block holds (it may hold
 * more than asked for; the counts here are int32_t). */
static int32_t cap_of(size_t got) { return got > INT32_MAX ? INT32_MAX : (int32_t)got; }

/* (emu held) Queues an event for the owner; the owner hears of the first
 * one queued since it last looked: *tell is set, and the caller signals
 * the owner once it has let go of emu (signalled under it, the owner woke
 * only to wait for emu, a sleep and a wake more on every round trip). */
static int add_event(sh_work *w, int64_t id, int kind, int32_t wk, sh_msg *m, double a, double b, int *tell) {
  event *e;
  if (w->elen == w->ecap) {
    int32_t cap = w->ecap ? w->ecap * 2 : 64, i;
    size_t got;
    event *grown = (event *)sh__alloc_kept((size_t)cap, sizeof *grown, &got);
    if (!grown) return SH_ENOMEM;
    for (i = 0; i < w->elen; i++) grown[i] = w->events[(w->ehead + i) % w->ecap];
    sh__free_kept(w->events, (size_t)w->ecap, sizeof *w->events);
    w->events = grown;
    w->ehead = 0;
    w->ecap = cap_of(got);
  }
  e = &w->events[(w->ehead + w->elen) % w->ecap];
  e->id = id, e->kind = kind, e->worker = wk, e->msg = m, e->a = a, e->b = b;
  w->elen++;
  /* The owner hears of the first event since it last emptied them, but not
   * of a start alone: a start only moves a stall clock, and waking the
   * owner for it, then again for the reply, doubled the round trip of a
   * short request (it is read with the next event, or the next step). */
  if (!w->told && kind != SH_EV_STARTED) {
    w->told = 1;
    *tell = 1;
  }
  return SH_OK;
}

/* (mu held) Makes the lane and the heap each hold `need` requests, so that
 * filing never allocates: pushers admit a request to the inbox only while
 * the queue and the inbox together fit in `room` (see push). */
static int reserve(sh_work *w, int32_t need) {
  int32_t cap = w->room, k;
  if (need <= cap) return SH_OK;
  cap = cap ? cap * 2 : 16;
  if (cap < need) cap = need;
  if (w->capheap < cap) {
    size_t got;
    request *grown = (request *)sh__grow_kept(w->heap, (size_t)w->capheap, (size_t)cap, sizeof *grown, 0, &got);
    if (!grown) return SH_ENOMEM;
    w->heap = grown;
    w->capheap = cap_of(got);
  }
  if (w->lcap < cap) {
    size_t got;
    request *grown = (request *)sh__alloc_kept((size_t)cap, sizeof *grown, &got);
    if (!grown) return SH_ENOMEM;
    for (k = 0; k < w->llen; k++) grown[k] = *lane_at(w, k);
    sh__free_kept(w->lane, (size_t)w->lcap, sizeof *w->lane);
    w->lane = grown;
    w->lhead = 0;
    w->lcap = cap_of(got);
  }
  SH__STORE(&w->room, cap);
  return SH_OK;
}

/* (mu held, room reserved) Files r in the heap. */
static void heap_add(sh_work *w, request r) {
  w->heap[w->nheap] = r;
  sift_up(w->heap, w->nheap++);
}

/* (mu held, room reserved) Files r, the newest request: at the lane's tail
 * when the lane is empty or holds its priority, else in the heap. */
static void add(sh_work *w, request r) {
  if (w->llen > 0 && r.priority != w->lane_prio) {
    heap_add(w, r);
    return;
  }
  w->lane_prio = r.priority;
  w->lane[(w->lhead + w->llen) % w->lcap] = r;
  w->llen++;
}

/* (mu held) Files what the inbox holds, oldest first. Pushers admitted it
 * within the room reserved, so this allocates nothing and cannot fail. */
static void absorb(sh_work *w) {
  uint32_t head = w->in_head, tail = SH__LOAD_U32(&w->in_tail);
  if (head == tail) return;
  for (; head != tail; head++) add(w, w->inbox[head % INBOX]);
  set_ready(w); /* (nq before in_head: a pusher that sees the slots free sees them counted) */
  SH__STORE_U32(&w->in_head, head);
}

/* The inbox was full, or the queue may need room: under both locks, the
 * inbox is filed, room made, and r filed after it. */
static int push_filed(sh_work *w, request r) {
  int rc = SH_ECLOSED;
  sh__mutex_lock(&w->mu);
  sh__mutex_lock(&w->pmu);
  if (!w->closed) {
    absorb(w);
    rc = reserve(w, queued(w) + 1);
    if (rc == SH_OK) {
      r.seq = w->seq++;
      add(w, r);
      set_ready(w);
      if (!w->paused) sh__cond_signal(&w->cv);
    }
  }
  sh__mutex_unlock(&w->pmu);
  sh__mutex_unlock(&w->mu);
  return rc;
}

/* A request goes to the inbox under pmu alone while the inbox has a free
 * slot and the queue has room for everything admitted (nq and the inbox's
 * count may overstate it, never understate: in_head is read first, and
 * absorb stores nq before in_head). A worker asleep is woken; one still
 * looking finds it through in_tail. */
int sh_work_push(sh_work *w, int64_t id, double priority, sh_msg *payload) {
  request r;
  uint32_t head, tail;
  int wake;
  if (priority != priority) return SH_EINVAL;
  r.id = id, r.priority = priority, r.payload = payload;
  sh__mutex_lock(&w->pmu);
  if (w->closed) {
    sh__mutex_unlock(&w->pmu);
    return SH_ECLOSED;
  }
  tail = w->in_tail;
  head = SH__LOAD_U32(&w->in_head);
  if (tail - head >= INBOX || (int64_t)SH__LOAD(&w->nq) + (tail - head) >= SH__LOAD(&w->room)) {
    sh__mutex_unlock(&w->pmu);
    return push_filed(w, r);
  }
  r.seq = w->seq++;
  w->inbox[tail % INBOX] = r;
  /* (sequentially consistent, with sleeping: a worker about to sleep
   * either sees this slot or is seen asleep) */
  SH__STORE_U32_SC(&w->in_tail, tail + 1);
  wake = SH__LOAD_SC(&w->sleeping) > 0 && !w->paused;
  sh__mutex_unlock(&w->pmu);
  if (wake) {
    sh__mutex_lock(&w->mu);
    sh__cond_signal(&w->cv);
    sh__mutex_unlock(&w->mu);
  }
  return SH_OK;
}

/* Where a queued request is: (in the lane) its index there, or (in the
 * heap) -2 - its index there; -1 when it is not queued. */
static int32_t find(const sh_work *w, int64_t id) {
  int32_t i;
  for (i = 0; i < w->llen; i++)
    if (lane_at(w, i)->id == id) return i;
  for (i = 0; i < w->nheap; i++)
    if (w->heap[i].id == id) return -2 - i;
  return -1;
}

/* (lock held) Takes out and returns the request find() placed at `at`. */
static request take_at(sh_work *w, int32_t at) {
  request r;
  if (at >= 0) {
    int32_t k;
    r = *lane_at(w, at);
    if (at == 0) {
      w->lhead = (w->lhead + 1) % w->lcap;
    } else {
      for (k = at; k < w->llen - 1; k++) *lane_at(w, k) = *lane_at(w, k + 1);
    }
    w->llen--;
    return r;
  }
  at = -2 - at;
  r = w->heap[at];
  w->heap[at] = w->heap[--w->nheap];
  if (at < w->nheap) {
    sift_down(w->heap, w->nheap, at);
    sift_up(w->heap, at);
  }
  return r;
}

/* (lock held) Puts r back where take_at(w, from) took it from, as the
 * next request: in its place at the lane's head, or in the heap (whose
 * room it left). */
static void put_back(sh_work *w, int32_t from, request r) {
  if (from == 0) {
    w->lhead = (w->lhead + w->lcap - 1) % w->lcap;
    w->lane[w->lhead] = r;
    w->llen++;
  } else {
    w->heap[w->nheap] = r;
    sift_up(w->heap, w->nheap++);
  }
}

/* (lock held, something queued) Where the next request is, as find says. */
static int32_t best_at(const sh_work *w) {
  if (w->nheap == 0) return 0;
  if (w->llen == 0 || better(&w->heap[0], lane_at(w, 0))) return -2;
  return 0;
}

int sh_work_remove(sh_work *w, int64_t id) {
  sh_msg *m = NULL;
  int32_t at;
  sh__mutex_lock(&w->mu);
  absorb(w);
  at = find(w, id);
  if (at != -1) {
    m = take_at(w, at).payload;
    set_ready(w);
  }
  sh__mutex_unlock(&w->mu);
  if (at == -1) return SH_ESTATE;
  sh_msg_free(m);
  return SH_OK;
}

int32_t sh_work_running_on(sh_work *w, int64_t id) {
  int32_t i, on = -1;
  sh__mutex_lock(&w->mu);
  for (i = 0; i < w->nworkers; i++)
    if (!w->workers[i]->exited && w->workers[i]->current == id) on = i;
  sh__mutex_unlock(&w->mu);
  return on;
}

int sh_work_set_priority(sh_work *w, int64_t id, double priority) {
  int32_t at;
  int rc = SH_ESTATE;
  if (priority != priority) return SH_EINVAL;
  sh__mutex_lock(&w->mu);
  absorb(w);
  at = find(w, id);
  if (at <= -2) {
    at = -2 - at;
    w->heap[at].priority = priority;
    sift_down(w->heap, w->nheap, at);
    sift_up(w->heap, at);
    rc = SH_OK;
  } else if (at >= 0) {
    /* (out of the lane, into the heap, keeping its place among requests
     * of its new priority: its seq) */
    request r = lane_at(w, at)[0];
    r.priority = priority;
    heap_add(w, r); /* (room: the heap holds as many as are queued) */
    take_at(w, at);
    rc = SH_OK;
  }
  sh__mutex_unlock(&w->mu);
  return rc;
}

int32_t sh_work_queued(sh_work *w) {
  int32_t n;
  sh__mutex_lock(&w->mu);
  absorb(w);
  n = queued(w) + w->held_count;
  sh__mutex_unlock(&w->mu);
  return n;
}

int32_t sh_work_running(sh_work *w) {
  int32_t n;
  sh__mutex_lock(&w->mu);
  n = w->running;
  sh__mutex_unlock(&w->mu);
  return n;
}

static int by_order(const void *a, const void *b) {
  const request *x = (const request *)a, *y = (const request *)b;
  return better(x, y) ? -1 : better(y, x) ? 1 : 0;
}

int32_t sh_work_queued_ids(sh_work *w, int64_t *ids, int32_t cap) {
  int32_t i, n, total;
  request *copy;
  sh__mutex_lock(&w->mu);
  absorb(w);
  total = queued(w);
  n = total < cap ? total : cap;
  copy = (request *)malloc((size_t)(total ? total : 1) * sizeof *copy);
  if (!copy) {
    sh__mutex_unlock(&w->mu);
    return SH_ENOMEM;
  }
  if (w->nheap) memcpy(copy, w->heap, (size_t)w->nheap * sizeof *copy);
  for (i = 0; i < w->llen; i++) copy[w->nheap + i] = *lane_at(w, i);
  qsort(copy, (size_t)total, sizeof *copy, by_order);
  for (i = 0; i < n; i++) ids[i] = copy[i].id;
  sh__mutex_unlock(&w->mu);
  free(copy);
  return n;
}

void sh_work_pause(sh_work *w, int paused) {
  sh__mutex_lock(&w->mu);
  sh__mutex_lock(&w->pmu); /* (pushers read it) */
  w->paused = paused != 0;
  sh__mutex_unlock(&w->pmu);
  set_ready(w);
  if (!w->paused) sh__cond_broadcast(&w->cv);
  sh__mutex_unlock(&w->mu);
}

void sh_work_close(sh_work *w) {
  int32_t i, n, nlane, lhead, lcap, capheap;
  request *heap, *lane;
  sh__mutex_lock(&w->mu);
  sh__mutex_lock(&w->pmu); /* (pushers read it: none pushes after this) */
  w->closed = 1;
  sh__mutex_unlock(&w->pmu);
  absorb(w);
  for (i = 0; i < w->nworkers; i++) SH__STORE(&w->workers[i]->stop, 1);
  heap = w->heap, n = w->nheap, capheap = w->capheap;
  lane = w->lane, nlane = w->llen, lhead = w->lhead, lcap = w->lcap;
  w->heap = NULL, w->nheap = w->capheap = 0;
  w->lane = NULL, w->llen = w->lcap = w->lhead = 0;
  for (i = 0; i < w->nheld; i++) {
    sh_msg_free(w->held[i].payload);
    w->held[i].payload = NULL;
  }
  w->free_held = -1;
  w->nheld = w->held_count = 0;
  w->noffers = w->onext = 0;
  SH__STORE(&w->room, 0);
  set_ready(w);
  sh__cond_broadcast(&w->cv);
  sh__mutex_unlock(&w->mu);
  for (i = 0; i < n; i++) sh_msg_free(heap[i].payload);
  for (i = 0; i < nlane; i++) sh_msg_free(lane[(lhead + i) % lcap].payload);
  sh__free_kept(heap, (size_t)capheap, sizeof *heap);
  sh__free_kept(lane, (size_t)lcap, sizeof *lane);
}

int sh_work_closed(sh_work *w) {
  int c;
  sh__mutex_lock(&w->mu);
  c = w->closed;
  sh__mutex_unlock(&w->mu);
  return c;
}

int32_t sh_work_add_worker(sh_work *w) {
  worker *k;
  int32_t i;
  sh__mutex_lock(&w->mu);
  if (w->closed) {
    sh__mutex_unlock(&w->mu);
    return SH_ECLOSED;
  }
  if (w->nworkers == w->capworkers) {
    int32_t cap = w->capworkers ? w->capworkers * 2 : 4;
    worker **grown = (worker **)realloc(w->workers, (size_t)cap * sizeof *grown);
    if (!grown) goto nomem;
    w->workers = grown;
    w->capworkers = cap;
  }
  k = (worker *)calloc(1, sizeof *k);
  if (!k) goto nomem;
  k->current = -1;
  i = w->nworkers++;
  w->workers[i] = k;
  w->live++;
  sh__mutex_unlock(&w->mu);
  return i;
nomem:
  sh__mutex_unlock(&w->mu);
  return SH_ENOMEM;
}

static worker *at(sh_work *w, int32_t i) { return i >= 0 && i < w->nworkers ? w->workers[i] : NULL; }

int sh_work_stop_worker(sh_work *w, int32_t i, int retire) {
  worker *k;
  sh__mutex_lock(&w->mu);
  k = at(w, i);
  if (k) {
    k->halted = 1;
    SH__STORE(&k->stop, 1);
    if (retire) k->retired = 1;
    sh__cond_broadcast(&w->cv);
  }
  sh__mutex_unlock(&w->mu);
  return k ? SH_OK : SH_EINVAL;
}

int32_t sh_work_abort_running(sh_work *w, int64_t id, int retire) {
  int32_t i, on = -1;
  sh__mutex_lock(&w->mu);
  for (i = 0; i < w->nworkers; i++) {
    worker *k = w->workers[i];
    if (k->exited || !k->taken || k->current != id) continue;
    SH__STORE(&k->stop, 1);
    if (retire) k->retired = 1;
    on = i;
    break;
  }
  sh__mutex_unlock(&w->mu);
  return on;
}

const int *sh_work_stop_flag(sh_work *w, int32_t i) {
  worker *k;
  sh__mutex_lock(&w->mu);
  k = at(w, i);
  sh__mutex_unlock(&w->mu);
  return k ? &k->stop : NULL;
}

int sh_work_retired(sh_work *w, int32_t i) {
  worker *k;
  int r;
  sh__mutex_lock(&w->mu);
  k = at(w, i);
  r = !k || k->retired || w->closed;
  sh__mutex_unlock(&w->mu);
  return r;
}

int32_t sh_work_live_workers(sh_work *w) {
  int32_t n;
  sh__mutex_lock(&w->mu);
  n = w->live;
  sh__mutex_unlock(&w->mu);
  return n;
}

/* (mu held) Whether slot holds request id (not taken, not dropped). */
static int holds(const sh_work *w, int32_t slot, int64_t id) {
  return slot >= 0 && slot < w->nheld && w->held[slot].payload && w->held[slot].id == id;
}

/* (mu held) Slot is free again; its payload was taken from it. */
static void free_slot(sh_work *w, int32_t slot) {
  w->held[slot].payload = NULL;
  w->held[slot].next_free = w->free_held;
  w->free_held = slot;
  w->held_count--;
  set_ready(w);
}

/* (mu held) How many entries of the offer are still held. */
static int32_t offer_left(const sh_work *w) {
  int32_t i, left = 0;
  for (i = w->onext; i < w->noffers; i++) left += holds(w, w->offers[i].slot, w->offers[i].id);
  return left;
}

/* (mu held) Worker i takes the next request offered that is still held:
 * returns 1 with *rc the status (SH_OK: taken; else the owner could not be
 * told and the request is held and offered again), or 0 when the offer
 * has nothing left. */
static int take_offered(sh_work *w, worker *k, int32_t i, int64_t *id, sh_msg **payload, int *rc) {
  int tell = 0;
  while (w->onext < w->noffers) {
    offer o = w->offers[w->onext++];
    if (!holds(w, o.slot, o.id)) continue; /* (dropped, or taken, since) */
    sh__mutex_lock(&w->emu);
    *rc = add_event(w, o.id, SH_EV_STARTED, i, NULL, 0, 0, &tell); /* (a start tells nobody) */
    sh__mutex_unlock(&w->emu);
    if (*rc != SH_OK) {
      w->onext--;
      set_ready(w);
      return 1;
    }
    *id = o.id;
    *payload = w->held[o.slot].payload;
    free_slot(w, o.slot);
    SH__STORE(&k->stop, k->halted);
    k->current = o.id;
    k->taken = 1;
    w->running++;
    return 1;
  }
  return 0;
}

int32_t sh_work_hold(sh_work *w, int64_t id, sh_msg *payload) {
  int32_t slot;
  if (!w || !payload) return SH_EINVAL;
  sh__mutex_lock(&w->mu);
  if (w->closed) {
    sh__mutex_unlock(&w->mu);
    return SH_ECLOSED;
  }
  if (w->free_held < 0) {
    if (w->nheld == w->capheld) {
      int32_t cap = w->capheld ? w->capheld * 2 : 64;
      held_req *grown = cap > 0 ? (held_req *)realloc(w->held, (size_t)cap * sizeof *grown) : NULL;
      if (!grown) {
        sh__mutex_unlock(&w->mu);
        return SH_ENOMEM;
      }
      w->held = grown;
      w->capheld = cap;
    }
    slot = w->nheld++;
  } else {
    slot = w->free_held;
    w->free_held = w->held[slot].next_free;
  }
  w->held[slot].id = id;
  w->held[slot].payload = payload;
  w->held[slot].next_free = -1;
  w->held_count++;
  set_ready(w);
  sh__mutex_unlock(&w->mu);
  return slot;
}

int sh_work_drop(sh_work *w, int32_t slot, int64_t id) {
  sh_msg *m = NULL;
  if (!w) return SH_EINVAL;
  sh__mutex_lock(&w->mu);
  if (holds(w, slot, id)) {
    m = w->held[slot].payload;
    free_slot(w, slot);
  }
  sh__mutex_unlock(&w->mu);
  if (!m) return SH_ESTATE;
  sh_msg_free(m);
  return SH_OK;
}

int32_t sh_work_offer(sh_work *w, const int32_t *slots, const int64_t *ids, int32_t n) {
  int32_t i, left, wake;
  if (!w || n < 0 || (n > 0 && (!slots || !ids))) return SH_EINVAL;
  sh__mutex_lock(&w->mu);
  left = offer_left(w);
  if (n > w->capoffers) {
    int32_t cap = w->capoffers ? w->capoffers : 16;
    offer *grown;
    while (cap < n) cap *= 2;
    grown = (offer *)realloc(w->offers, (size_t)cap * sizeof *grown);
    if (!grown) {
      sh__mutex_unlock(&w->mu);
      return SH_ENOMEM;
    }
    w->offers = grown;
    w->capoffers = cap;
  }
  for (i = 0; i < n; i++) {
    if (slots[i] < 0 || slots[i] >= w->nheld) break; /* (never: the owner's own slots) */
    w->offers[i].slot = slots[i];
    w->offers[i].id = ids[i];
  }
  w->noffers = i;
  w->onext = 0;
  set_ready(w);
  wake = !w->paused && n > 0;
  if (wake) sh__cond_broadcast(&w->cv);
  sh__mutex_unlock(&w->mu);
  return left;
}

int sh_work_held(sh_work *w, int32_t slot, int64_t id) {
  int held_now;
  if (!w) return 0;
  sh__mutex_lock(&w->mu);
  held_now = holds(w, slot, id);
  sh__mutex_unlock(&w->mu);
  return held_now;
}

int32_t sh_work_offered(sh_work *w) {
  int32_t left;
  if (!w) return 0;
  sh__mutex_lock(&w->mu);
  left = offer_left(w);
  sh__mutex_unlock(&w->mu);
  return left;
}

/* Whether the inbox holds requests not yet filed (read without a lock). */
static int inbox_filled(sh_work *w) {
  return SH__LOAD_U32_SC(&w->in_tail) != SH__LOAD_U32(&w->in_head);
}

int sh_work_take(sh_work *w, int32_t i, int64_t *id, sh_msg **payload) {
  worker *k;
  int rc, spun = 0, tell = 0;
  sh__mutex_lock(&w->mu);
  k = at(w, i);
  if (k && k->taken) { /* the last request is over */
    k->taken = 0;
    k->current = -1;
    w->running--;
  }
  for (;;) {
    if (!k || w->closed || k->retired) {
      rc = SH_ECLOSED;
      break;
    }
    absorb(w);
    if (!w->paused && queued(w) == 0 && take_offered(w, k, i, id, payload, &rc)) {
      if (rc == SH_OK) break;
      sh__mutex_unlock(&w->mu); /* (the owner could not be told: see below) */
      sh_sleep_ms(1);
      sh__mutex_lock(&w->mu);
      continue;
    }
    if (!w->paused && queued(w) > 0) {
      int32_t from = best_at(w);
      request r = take_at(w, from);
      set_ready(w);
      SH__STORE(&k->stop, k->halted);
      k->current = r.id;
      k->taken = 1;
      w->running++;
      *id = r.id;
      *payload = r.payload;
      sh__mutex_lock(&w->emu);
      rc = add_event(w, r.id, SH_EV_STARTED, i, NULL, 0, 0, &tell); /* (a start tells nobody) */
      sh__mutex_unlock(&w->emu);
      if (rc != SH_OK) { /* the owner could not be told: give the request back */
        k->taken = 0, k->current = -1, w->running--;
        put_back(w, from, r);
        set_ready(w);
        sh__mutex_unlock(&w->mu);
        sh_sleep_ms(1);
        sh__mutex_lock(&w->mu);
        continue;
      }
      break;
    }
    if (!spun) {
      /* (unlocked: the owner may queue meanwhile, and the stop flag is read
       * as the queue is) */
      double until = sh_now_ms() + SPIN_MS;
      spun = 1;
      sh__mutex_unlock(&w->mu);
      while (!SH__LOAD(&w->ready) && !inbox_filled(w) && !SH__LOAD(&k->stop) && sh_now_ms() < until) sh__yield();
      sh__mutex_lock(&w->mu);
      continue;
    }
    spun = 0;
    /* Counted asleep before the inbox is looked at: a pusher that fills it
     * afterwards sees the count and wakes us (see push). */
    (void)SH__ADD(&w->sleeping, 1);
    if (!inbox_filled(w) || w->paused) sh__cond_wait(&w->cv, &w->mu);
    (void)SH__ADD(&w->sleeping, -1);
  }
  sh__mutex_unlock(&w->mu);
  return rc;
}

/* (lock held) A request that ends before its owner read that it started:
 * the start is no news any more, and is dropped (the owner looks at a few
 * of the latest events only: a busy pool's starts are that near). */
static void drop_unread_start(sh_work *w, int64_t id) {
  int32_t k, seen = 0;
  for (k = w->elen - 1; k >= 0 && seen < 16; k--, seen++) {
    event *e = &w->events[(w->ehead + k) % w->ecap];
    if (e->id == id && e->kind == SH_EV_STARTED) {
      e->kind = 0; /* (skipped by next_event) */
      return;
    }
  }
}

int sh_work_report(sh_work *w, int32_t i, int64_t id, int kind, sh_msg *m, double a, double b) {
  int rc, tell = 0;
  if (kind < SH_EV_STARTED || kind > SH_EV_FAILED) return SH_EINVAL;
  sh__mutex_lock(&w->emu);
  if (kind == SH_EV_DONE || kind == SH_EV_FAILED) drop_unread_start(w, id);
  rc = add_event(w, id, kind, i, m, a, b, &tell);
  sh__mutex_unlock(&w->emu);
  if (tell) sh_notify_signal(w->owner);
  return rc;
}

void sh_work_exited(sh_work *w, int32_t i) {
  worker *k;
  int tell = 0;
  sh__mutex_lock(&w->mu);
  k = at(w, i);
  if (k && !k->exited) {
    if (k->taken) w->running--;
    k->exited = 1, k->taken = 0, k->current = -1;
    w->live--;
    /* (out of memory here loses the event; the owner also counts live) */
    sh__mutex_lock(&w->emu);
    add_event(w, -1, SH_EV_EXITED, i, NULL, 0, 0, &tell);
    sh__mutex_unlock(&w->emu);
    sh_notify_signal(w->owner); /* (always: the owner also counts live) */
  }
  sh__mutex_unlock(&w->mu);
}

int sh_work_next_event(sh_work *w, int64_t *id, int *kind, int32_t *wk, sh_msg **m, double *a, double *b) {
  sh__mutex_lock(&w->emu);
  for (;;) {
    event *e;
    if (w->elen == 0) {
      w->told = 0;
      sh__mutex_unlock(&w->emu);
      return SH_EAGAIN;
    }
    e = &w->events[w->ehead];
    w->ehead = (w->ehead + 1) % w->ecap;
    w->elen--;
    if (e->kind == 0) continue; /* (a start dropped: drop_unread_start) */
    *id = e->id, *kind = e->kind, *wk = e->worker, *m = e->msg, *a = e->a, *b = e->b;
    break;
  }
  sh__mutex_unlock(&w->emu);
  return SH_OK;
}

int32_t sh_work_next_events(sh_work *w, int32_t cap, int64_t *ids, int *kinds, int32_t *workers, sh_msg **msgs,
                            double *as, double *bs) {
  int32_t n = 0;
  sh__mutex_lock(&w->emu);
  while (n < cap && w->elen > 0) {
    event *e = &w->events[w->ehead];
    w->ehead = (w->ehead + 1) % w->ecap;
    w->elen--;
    if (e->kind == 0) continue; /* (a start dropped: drop_unread_start) */
    ids[n] = e->id, kinds[n] = e->kind, workers[n] = e->worker, msgs[n] = e->msg, as[n] = e->a, bs[n] = e->b;
    n++;
  }
  if (w->elen == 0) w->told = 0;
  sh__mutex_unlock(&w->emu);
  return n;
}

int64_t sh_work_current(sh_work *w, int32_t i) {
  worker *k;
  int64_t id;
  sh__mutex_lock(&w->mu);
  k = at(w, i);
  id = k && !k->exited ? k->current : -1;
  sh__mutex_unlock(&w->mu);
  return id;
}

void sh_work_set_waiting(sh_work *w, int32_t i, const char *what) {
  worker *k;
  sh__mutex_lock(&w->mu);
  k = at(w, i);
  if (k) {
    sh__copy_cut(k->waiting, sizeof k->waiting, what);
    k->since = sh_now_ms();
  }
  sh__mutex_unlock(&w->mu);
}

int sh_work_waiting(sh_work *w, int32_t i, char *what, double *since) {
  worker *k;
  int waits = 0;
  sh__mutex_lock(&w->mu);
  k = at(w, i);
  if (k && !k->exited && k->waiting[0]) {
    memcpy(what, k->waiting, sizeof k->waiting);
    *since = k->since;
    waits = 1;
  }
  sh__mutex_unlock(&w->mu);
  return waits;
}
