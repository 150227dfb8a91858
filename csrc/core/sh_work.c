/* A worker pool's queue (sh_threads.h): requests queued by priority, the
 * workers, their stop flags, pausing and closing. The held requests and
 * offers that workers take, and what they report, are in sh_work_take.c. */
#include "sh_work_impl.h"


/* What a worker could take now: the lane and the heap, and what is left
 * of the offer (an upper bound: an entry may have been dropped since). */
static int32_t takeable(const sh_work *w) { return w->nheap + w->llen + (w->noffers - w->onext); }

/* (mu held) After every change to the queue: what spinning workers and
 * pushers read without mu. */
void sh__work_set_ready(sh_work *w) {
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
int sh__work_add_event(sh_work *w, int64_t id, int kind, int32_t wk, sh_msg *m, double a, double b, int *tell) {
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
void sh__work_absorb(sh_work *w) {
  uint32_t head = w->in_head, tail = SH__LOAD_U32(&w->in_tail);
  if (head == tail) return;
  for (; head != tail; head++) add(w, w->inbox[head % INBOX]);
  sh__work_set_ready(w); /* (nq before in_head: a pusher that sees the slots free sees them counted) */
  SH__STORE_U32(&w->in_head, head);
}

/* The inbox was full, or the queue may need room: under both locks, the
 * inbox is filed, room made, and r filed after it. */
static int push_filed(sh_work *w, request r) {
  int rc = SH_ECLOSED;
  sh__mutex_lock(&w->mu);
  sh__mutex_lock(&w->pmu);
  if (!w->closed) {
    sh__work_absorb(w);
    rc = reserve(w, queued(w) + 1);
    if (rc == SH_OK) {
      r.seq = w->seq++;
      add(w, r);
      sh__work_set_ready(w);
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
 * sh__work_absorb stores nq before in_head). A worker asleep is woken; one still
 * looking finds it through in_tail. */
int sh_work_push(sh_work *w, int64_t id, double priority, sh_msg *payload) {
  request r;
  uint32_t head, tail;
  int wake;
  if (priority != priority) return SH_EINVAL;
  r.id = id, r.priority = priority, r.payload = payload, r.seq = 0; /* (seq: set once the request is placed) */
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
    /* (mu taken and let go first: a worker counted asleep holds it until
     * it waits, so it waits now; woken under mu, it would wait for it) */
    sh__mutex_lock(&w->mu);
    sh__mutex_unlock(&w->mu);
    sh__cond_signal(&w->cv);
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
request sh__work_take_at(sh_work *w, int32_t at) {
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

/* (lock held) Puts r back where sh__work_take_at(w, from) took it from, as the
 * next request: in its place at the lane's head, or in the heap (whose
 * room it left). */
void sh__work_put_back(sh_work *w, int32_t from, request r) {
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
int32_t sh__work_best_at(const sh_work *w) {
  if (w->nheap == 0) return 0;
  if (w->llen == 0 || better(&w->heap[0], lane_at(w, 0))) return -2;
  return 0;
}

int sh_work_remove(sh_work *w, int64_t id) {
  sh_msg *m = NULL;
  int32_t at;
  sh__mutex_lock(&w->mu);
  sh__work_absorb(w);
  at = find(w, id);
  if (at != -1) {
    m = sh__work_take_at(w, at).payload;
    sh__work_set_ready(w);
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
  sh__work_absorb(w);
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
    sh__work_take_at(w, at);
    rc = SH_OK;
  }
  sh__mutex_unlock(&w->mu);
  return rc;
}

int32_t sh_work_queued(sh_work *w) {
  int32_t n;
  sh__mutex_lock(&w->mu);
  sh__work_absorb(w);
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
  sh__work_absorb(w);
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
  sh__work_set_ready(w);
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
  sh__work_absorb(w);
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
  sh__work_set_ready(w);
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
