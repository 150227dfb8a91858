#define _GNU_SOURCE
/*
 * C tests for a worker pool's queue (csrc/core/sh_work.c, sh_work_take.c),
 * driven from several threads at once; test_threads.c's main runs them.
 */
#include "test_threads.h"

/* ---- work queues ---- */

/* Reads the owner's events until `count` replies came (or `ms` passed);
 * returns how many came, the last one's id in *last. */
static int await_replies(sh_notify *n, sh_work *w, int count, double ms, int64_t *last) {
  double until = sh_now_ms() + ms;
  int got = 0;
  while (got < count && sh_now_ms() < until) {
    uint64_t seen_gen = sh_notify_gen(n);
    int64_t id;
    int kind;
    int32_t wk;
    sh_msg *m;
    double a, b;
    if (sh_work_next_event(w, &id, &kind, &wk, &m, &a, &b) != SH_OK) {
      sh_notify_wait(n, seen_gen, 100);
      continue;
    }
    if (m) sh_msg_free(m);
    if (kind == SH_EV_DONE) {
      got++;
      if (last) *last = id;
    }
  }
  return got;
}

/* Frees the events nobody will read. */
static void drop_events(sh_work *w) {
  int64_t id;
  int kind;
  int32_t wk;
  sh_msg *m;
  double a, b;
  while (sh_work_next_event(w, &id, &kind, &wk, &m, &a, &b) == SH_OK)
    if (m) sh_msg_free(m);
}

typedef struct wq_worker {
  sh_work *w;
  int32_t index;
  int ran;
} wq_worker;

static SH__THREAD_RETURN queue_worker(void *arg) {
  wq_worker *k = (wq_worker *)arg;
  int64_t id;
  sh_msg *payload;
  while (sh_work_take(k->w, k->index, &id, &payload) == SH_OK) {
    const int *stop = sh_work_stop_flag(k->w, k->index);
    int v = msg_int(payload);
    if (v < 0) { /* a request that runs until told to stop */
      while (!__atomic_load_n(stop, __ATOMIC_ACQUIRE)) sh_sleep_ms(1);
    }
    k->ran++;
    sh_work_report(k->w, k->index, id, SH_EV_PROGRESS, NULL, 1, 2);
    v *= 2;
    if (payload) { /* (the reply in the request's message, as csrc/lua/lworkers.c writes it) */
      sh_msg_clear(payload);
      sh_msg_put(payload, &v, sizeof v);
    }
    sh_work_report(k->w, k->index, id, SH_EV_DONE, payload, 0, 0);
    if (sh_work_retired(k->w, k->index)) break;
  }
  sh_work_exited(k->w, k->index);
  return 0;
}

/* Gated dispatch: held requests are taken only once offered, in the
 * offer's order; a new offer replaces the last (reporting what it left
 * untaken); a dropped or taken request is passed over; close frees what
 * is held. */
void work_queues_give_held_requests_only_as_offered(void) {
  sh_notify *n = sh_notify_new();
  sh_work *w = sh_work_new(n);
  wq_worker k;
  sh__thread t;
  int32_t slots[4], offer_slots[4];
  int64_t offer_ids[4], id;
  int i, kind, order[4], got = 0;
  int32_t wk;
  sh_msg *m;
  double a, b;
  for (i = 0; i < 4; i++) {
    slots[i] = sh_work_hold(w, 10 + i, int_msg(i));
    CHECK(slots[i] >= 0);
  }
  CHECK(sh_work_hold(w, 99, NULL) == SH_EINVAL);
  CHECK(sh_work_queued(w) == 4);
  CHECK(sh_work_held(w, slots[2], 12) && !sh_work_held(w, slots[2], 11));
  CHECK(sh_work_drop(w, slots[1], 11) == SH_OK); /* taken back before any offer */
  CHECK(sh_work_drop(w, slots[1], 11) == SH_ESTATE);
  CHECK(sh_work_queued(w) == 3);
  k.w = w, k.ran = 0, k.index = sh_work_add_worker(w);
  sh_work_ref(w);
  sh__thread_start(&t, queue_worker, &k);
  sh_sleep_ms(5);
  CHECK(k.ran == 0); /* held, not offered: nothing taken */
  /* offered: 13 first, then the dropped 11 (passed over), then 10; 12 stays held */
  offer_slots[0] = slots[3], offer_ids[0] = 13;
  offer_slots[1] = slots[1], offer_ids[1] = 11;
  offer_slots[2] = slots[0], offer_ids[2] = 10;
  CHECK(sh_work_offer(w, offer_slots, offer_ids, 3) == 0);
  while (got < 2) {
    uint64_t seen = sh_notify_gen(n);
    if (sh_work_next_event(w, &id, &kind, &wk, &m, &a, &b) != SH_OK) {
      sh_notify_wait(n, seen, 1000);
      continue;
    }
    if (kind == SH_EV_DONE) {
      order[got++] = (int)id;
      sh_msg_free(m);
    }
  }
  CHECK(order[0] == 13 && order[1] == 10);
  CHECK(sh_work_queued(w) == 1 && sh_work_offered(w) == 0);
  CHECK(sh_work_offer(w, NULL, NULL, -1) == SH_EINVAL);
  sh_work_pause(w, 1);
  offer_slots[0] = slots[2], offer_ids[0] = 12;
  CHECK(sh_work_offer(w, offer_slots, offer_ids, 1) == 0);
  CHECK(sh_work_offered(w) == 1);
  CHECK(sh_work_offer(w, offer_slots, offer_ids, 0) == 1); /* replaced: one was left untaken */
  sh_work_close(w); /* frees 12, still held */
  m = int_msg(0);
  CHECK(sh_work_hold(w, 20, m) == SH_ECLOSED); /* (refused: the message is the caller's) */
  sh_msg_free(m);
  sh__thread_join(t);
  while (sh_work_next_event(w, &id, &kind, &wk, &m, &a, &b) == SH_OK)
    if (m) sh_msg_free(m);
  sh_work_unref(w);
  sh_work_unref(w);
  sh_notify_unref(n);
}

void work_queues_run_by_priority_and_report_everything(void) {
  sh_notify *n = sh_notify_new();
  sh_work *w = sh_work_new(n);
  wq_worker k[3];
  sh__thread t[3];
  int i, started = 0, done = 0, progress = 0, exited = 0, sum = 0;
  int64_t ids[8];
  int64_t id;
  int kind;
  int32_t wk;
  sh_msg *m;
  double a, b;
  sh_work_pause(w, 1);
  for (i = 0; i < 6; i++) CHECK(sh_work_push(w, i, i % 3, int_msg(i)) == SH_OK);
  m = int_msg(0);
  CHECK(sh_work_push(w, 99, 0.0 / 0.0, m) == SH_EINVAL); /* (NaN: refused, the message is the caller's) */
  sh_msg_free(m);
  CHECK(sh_work_queued(w) == 6);
  CHECK(sh_work_queued_ids(w, ids, 8) == 6);
  CHECK(ids[0] == 2 && ids[1] == 5 && ids[2] == 1 && ids[3] == 4 && ids[4] == 0 && ids[5] == 3);
  CHECK(sh_work_set_priority(w, 3, 10) == SH_OK);
  CHECK(sh_work_queued_ids(w, ids, 8) == 6 && ids[0] == 3);
  CHECK(sh_work_remove(w, 4) == SH_OK);
  CHECK(sh_work_remove(w, 4) == SH_ESTATE);
  for (i = 0; i < 3; i++) {
    k[i].w = w;
    k[i].ran = 0;
    k[i].index = sh_work_add_worker(w);
    CHECK(k[i].index == i);
    sh_work_ref(w);
    sh__thread_start(&t[i], queue_worker, &k[i]);
  }
  sh_sleep_ms(5);
  CHECK(sh_work_queued(w) == 5); /* paused: nothing taken */
  sh_work_pause(w, 0);
  for (i = 100; i < 400; i++) sh_work_push(w, i, 0, int_msg(i));
  while (done < 305) {
    uint64_t seen = sh_notify_gen(n);
    if (sh_work_next_event(w, &id, &kind, &wk, &m, &a, &b) != SH_OK) {
      sh_notify_wait(n, seen, 1000);
      continue;
    }
    if (kind == SH_EV_STARTED) started++;
    if (kind == SH_EV_PROGRESS) progress += a == 1 && b == 2;
    if (kind == SH_EV_DONE) {
      done++;
      sum += msg_int(m);
      sh_msg_free(m);
    }
  }
  CHECK(started <= 305 && progress == 305); /* (a start read after its end is dropped) */
  {
    int want = 0;
    for (i = 0; i < 6; i++) want += i == 4 ? 0 : 2 * i;
    for (i = 100; i < 400; i++) want += 2 * i;
    CHECK(sum == want);
  }
  /* a request that runs until aborted, on a worker that then retires */
  CHECK(sh_work_push(w, 500, 0, int_msg(-1)) == SH_OK);
  while (sh_work_running_on(w, 500) < 0) sh_sleep_ms(1);
  CHECK(sh_work_abort_running(w, 12345, 0) == -1);
  CHECK(sh_work_abort_running(w, 500, 1) >= 0);
  sh_work_close(w);
  m = int_msg(1);
  CHECK(sh_work_push(w, 600, 0, m) == SH_ECLOSED);
  sh_msg_free(m);
  for (i = 0; i < 3; i++) sh__thread_join(t[i]);
  while (sh_work_next_event(w, &id, &kind, &wk, &m, &a, &b) == SH_OK) {
    if (kind == SH_EV_EXITED) exited++;
    if (m) sh_msg_free(m);
  }
  CHECK(exited == 3);
  CHECK(sh_work_live_workers(w) == 0);
  for (i = 0; i < 3; i++) sh_work_unref(w);
  sh_work_unref(w);
  sh_notify_unref(n);
}

/* The queue's order against a model: random pushes (mostly in runs of one
 * priority, as games queue), removes, reprioritisations and takes; after
 * each, the queue's order is the model's (priority, then arrival). */
typedef struct model_req {
  int64_t id;
  double prio;
  uint64_t seq;
  int live;
} model_req;

static int model_better(const model_req *a, const model_req *b) {
  if (a->prio != b->prio) return a->prio > b->prio;
  return a->seq < b->seq;
}

static int model_order(model_req *ms, int n, int64_t *out) {
  int k = 0, i;
  for (;;) {
    int best = -1;
    for (i = 0; i < n; i++)
      if (ms[i].live == 1 && (best < 0 || model_better(&ms[i], &ms[best]))) best = i;
    if (best < 0) break;
    out[k++] = ms[best].id;
    ms[best].live = 2; /* (listed) */
  }
  for (i = 0; i < n; i++)
    if (ms[i].live == 2) ms[i].live = 1;
  return k;
}

void work_queues_keep_priority_then_arrival_order(void) {
  enum { N = 600 };
  static model_req ms[N];
  static int64_t got[N], want[N];
  sh_notify *n = sh_notify_new();
  sh_work *w = sh_work_new(n);
  uint32_t x = 12345;
  int made = 0, i, step, worker, same = 1, run_left = 0;
  double run_prio = 0;
  int64_t id;
  sh_msg *m;
  sh_work_pause(w, 1);
  worker = sh_work_add_worker(w);
  for (step = 0; step < 2000; step++) {
    int op;
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    op = (int)(x % 10);
    if (op < 6 && made < N) { /* push: runs of one priority, now and then another */
      if (run_left == 0) {
        run_prio = (double)((x >> 8) % 4);
        run_left = 1 + (int)((x >> 12) % 12);
      }
      run_left--;
      ms[made].id = made, ms[made].prio = run_prio, ms[made].seq = (uint64_t)step, ms[made].live = 1;
      same &= sh_work_push(w, made, run_prio, int_msg(made)) == SH_OK;
      made++;
    } else if (op < 7 && made > 0) { /* remove one, queued or not */
      int k = (int)((x >> 8) % (uint32_t)made);
      same &= sh_work_remove(w, k) == (ms[k].live ? SH_OK : SH_ESTATE);
      ms[k].live = 0;
    } else if (op < 8 && made > 0) { /* give one a new priority */
      int k = (int)((x >> 8) % (uint32_t)made);
      double p = (double)((x >> 16) % 4);
      same &= sh_work_set_priority(w, k, p) == (ms[k].live ? SH_OK : SH_ESTATE);
      if (ms[k].live) ms[k].prio = p;
    } else if (op < 9) { /* a worker takes the next */
      int k = model_order(ms, made, want);
      if (k > 0) {
        sh_work_pause(w, 0);
        same &= sh_work_take(w, worker, &id, &m) == SH_OK && id == want[0] && msg_int(m) == (int)id;
        sh_work_pause(w, 1);
        sh_msg_free(m);
        ms[id].live = 0;
      }
    }
    {
      int k = model_order(ms, made, want), got_n = sh_work_queued_ids(w, got, N);
      int ok = got_n == k && sh_work_queued(w) == k;
      for (i = 0; ok && i < k; i++) ok = got[i] == want[i];
      same &= ok;
    }
  }
  CHECK(same);
  CHECK(made == N || made > 300);
  sh_work_close(w);
  drop_events(w);
  sh_work_unref(w);
  sh_notify_unref(n);
}

/* Requests wait in an inbox until a worker (or the owner) files them in
 * the queue. Several threads push at once, past the inbox's size, while
 * one worker takes: every request runs once, each thread's in the order it
 * pushed them (one priority); a pause holds everything pushed meanwhile. */
enum { PUSHERS = 3, PUSHED = 20000 };

typedef struct pusher {
  sh_work *w;
  int base;
  int refused;
} pusher;

static SH__THREAD_RETURN push_many(void *arg) {
  pusher *p = (pusher *)arg;
  int i;
  for (i = 0; i < PUSHED; i++) {
    sh_msg *m = int_msg(p->base + i);
    if (sh_work_push(p->w, p->base + i, 0, m) != SH_OK) {
      sh_msg_free(m);
      p->refused++;
    }
  }
  return 0;
}

typedef struct recorder {
  sh_work *w;
  int32_t index;
  int n;
  int *order; /* the values taken, in the order taken */
} recorder;

static SH__THREAD_RETURN record_takes(void *arg) {
  recorder *r = (recorder *)arg;
  int64_t id;
  sh_msg *payload;
  while (sh_work_take(r->w, r->index, &id, &payload) == SH_OK) {
    r->order[r->n++] = msg_int(payload);
    sh_work_report(r->w, r->index, id, SH_EV_DONE, payload, 0, 0);
  }
  sh_work_exited(r->w, r->index);
  return 0;
}

/* A worker thread recording what it takes into `order`. */
static void start_recorder(recorder *rec, sh_work *w, int *order, sh__thread *thread) {
  rec->w = w, rec->n = 0, rec->order = order;
  rec->index = sh_work_add_worker(w);
  sh_work_ref(w);
  sh__thread_start(thread, record_takes, rec);
}

/* Closes the queue, waits for the recorder, and lets go of everything. */
static void stop_recorder(sh_notify *n, sh_work *w, sh__thread thread) {
  sh_work_close(w);
  sh__thread_join(thread);
  drop_events(w);
  sh_work_unref(w);
  sh_work_unref(w);
  sh_notify_unref(n);
}

void work_queues_take_from_several_pushing_threads(void) {
  sh_notify *n = sh_notify_new();
  sh_work *w = sh_work_new(n);
  static int order[PUSHERS * PUSHED + 1000];
  static char seen[PUSHERS * PUSHED + 1000];
  pusher ps[PUSHERS];
  sh__thread pt[PUSHERS], rt;
  recorder rec;
  int i, in_order = 1, once = 1, refused = 0;
  int last[PUSHERS + 1];
  start_recorder(&rec, w, order, &rt);
  for (i = 0; i < PUSHERS; i++) {
    ps[i].w = w, ps[i].base = i * PUSHED, ps[i].refused = 0;
    sh__thread_start(&pt[i], push_many, &ps[i]);
  }
  /* (the owner reads replies meanwhile) */
  CHECK(await_replies(n, w, PUSHERS * PUSHED, 60000, NULL) == PUSHERS * PUSHED);
  for (i = 0; i < PUSHERS; i++) {
    sh__thread_join(pt[i]);
    refused += ps[i].refused;
  }
  CHECK(refused == 0);
  /* paused: what is pushed now stays queued, counted, until resumed */
  sh_work_pause(w, 1);
  for (i = 0; i < 1000; i++) sh_work_push(w, PUSHERS * PUSHED + i, 0, int_msg(PUSHERS * PUSHED + i));
  sh_sleep_ms(2);
  CHECK(sh_work_queued(w) == 1000);
  sh_work_pause(w, 0);
  CHECK(await_replies(n, w, 1000, 60000, NULL) == 1000);
  stop_recorder(n, w, rt); /* (then what it took can be read) */
  CHECK(rec.n == PUSHERS * PUSHED + 1000);
  for (i = 0; i <= PUSHERS; i++) last[i] = -1;
  for (i = 0; i < rec.n; i++) {
    int v = order[i], from = v / PUSHED;
    once &= !seen[v];
    seen[v] = 1;
    in_order &= v > last[from];
    last[from] = v;
  }
  CHECK(once);
  CHECK(in_order);
}

/* A worker asleep is woken by the next push however the push finds the
 * queue: 50 requests one at a time, each after the worker fell asleep. */
void work_queues_wake_a_sleeping_worker(void) {
  sh_notify *n = sh_notify_new();
  sh_work *w = sh_work_new(n);
  recorder rec;
  sh__thread rt;
  static int order[64];
  int i, woken = 0;
  start_recorder(&rec, w, order, &rt);
  for (i = 0; i < 50; i++) {
    int64_t last = -1;
    sh_sleep_ms(1); /* (longer than a worker looks before it sleeps) */
    sh_work_push(w, i, 0, int_msg(i));
    woken += await_replies(n, w, 1, 2000, &last) == 1 && last == i;
  }
  CHECK(woken == 50);
  stop_recorder(n, w, rt);
}

/* An offer of k requests gets k workers, whether they sleep or still look
 * for work: each request below holds its worker until the round is
 * released, so a worker left asleep would leave one untaken. Rounds come
 * after a pause (every worker asleep) or at once (some still looking). */
typedef struct held_worker {
  sh_work *w;
  int32_t index;
  int *started, *released;
} held_worker;

static SH__THREAD_RETURN hold_until_released(void *arg) {
  held_worker *k = (held_worker *)arg;
  int64_t id;
  sh_msg *payload;
  while (sh_work_take(k->w, k->index, &id, &payload) == SH_OK) {
    int round = msg_int(payload);
    (void)SH__ADD(k->started, 1);
    while (SH__LOAD(k->released) < round) sh_sleep_ms(1);
    sh_work_report(k->w, k->index, id, SH_EV_DONE, payload, 0, 0);
  }
  sh_work_exited(k->w, k->index);
  return 0;
}

void work_queues_wake_as_many_workers_as_offered(void) {
  enum { WORKERS = 4, ROUNDS = 120 };
  sh_notify *n = sh_notify_new();
  sh_work *w = sh_work_new(n);
  held_worker ks[WORKERS];
  sh__thread t[WORKERS];
  int started = 0, released = 0, want = 0, round, i, all_taken = 0, all_done = 0;
  for (i = 0; i < WORKERS; i++) {
    ks[i].w = w, ks[i].index = sh_work_add_worker(w);
    ks[i].started = &started, ks[i].released = &released;
    sh_work_ref(w);
    sh__thread_start(&t[i], hold_until_released, &ks[i]);
  }
  for (round = 1; round <= ROUNDS; round++) {
    int k = 1 + round % WORKERS;
    int32_t slots[WORKERS];
    int64_t ids[WORKERS];
    double until;
    if (round % 3 == 0) sh_sleep_ms(2); /* (longer than a worker looks before it sleeps) */
    for (i = 0; i < k; i++) {
      ids[i] = round * 10 + i;
      slots[i] = sh_work_hold(w, ids[i], int_msg(round));
    }
    sh_work_offer(w, slots, ids, k);
    want += k;
    /* (an entry left untaken stays so: the next offer replaces this one;
     * the waits sleep, for valgrind, whose threads run one at a time) */
    until = sh_now_ms() + 5000;
    while (SH__LOAD(&started) < want && sh_now_ms() < until) sh_sleep_ms(0.05);
    all_taken += SH__LOAD(&started) == want;
    SH__STORE(&released, round);
    all_done += await_replies(n, w, k, 5000, NULL) == k;
    if (all_taken < round || all_done < round) break;
  }
  CHECK(all_taken == ROUNDS);
  CHECK(all_done == ROUNDS);
  sh_work_close(w);
  for (i = 0; i < WORKERS; i++) sh__thread_join(t[i]);
  drop_events(w);
  for (i = 0; i < WORKERS; i++) sh_work_unref(w);
  sh_work_unref(w);
  sh_notify_unref(n);
}

/* Requests pushed and never taken are freed at close, and by the last
 * unref when nobody closed the queue (memory checks see no leak). */
void work_queues_free_what_was_never_taken(void) {
  sh_notify *n = sh_notify_new();
  sh_work *w = sh_work_new(n);
  int i, ok = 1;
  for (i = 0; i < 1300; i++) ok &= sh_work_push(w, i, i < 1000 ? i % 2 : 0, int_msg(i)) == SH_OK;
  CHECK(ok);
  CHECK(sh_work_remove(w, 1299) == SH_OK); /* (the newest, in the inbox or filed) */
  CHECK(sh_work_queued(w) == 1299);
  sh_work_close(w);
  CHECK(sh_work_queued(w) == 0);
  sh_work_unref(w);
  w = sh_work_new(n);
  for (i = 0; i < 700; i++) sh_work_push(w, i, 0, int_msg(i));
  sh_work_unref(w);
  /* and, by the last unref, replies never read and requests held but
   * never taken (make sanitize: no message leaks) */
  w = sh_work_new(n);
  CHECK(sh_work_add_worker(w) == 0);
  for (i = 0; i < 3; i++) CHECK(sh_work_push(w, i, 0, int_msg(i)) == SH_OK);
  for (i = 0; i < 3; i++) {
    int64_t id;
    sh_msg *m;
    CHECK(sh_work_take(w, 0, &id, &m) == SH_OK && id == i);
    CHECK(sh_work_report(w, 0, id, i == 1 ? SH_EV_FAILED : SH_EV_DONE, m, 0, 0) == SH_OK);
  }
  for (i = 0; i < 4; i++) CHECK(sh_work_hold(w, 10 + i, int_msg(i)) >= 0);
  sh_work_exited(w, 0);
  sh_work_unref(w);
  sh_notify_unref(n);
}

/* A queue that held 20,000 requests is freed with all of them never
 * taken; the next queue grows into the arrays it kept (a request and an
 * event each) and still runs each request once, by priority then in
 * order of pushing. */
void work_queues_grow_into_what_a_freed_queue_kept(void) {
  enum { N = 20000 };
  static int order[N];
  static char seen[N];
  sh_notify *n = sh_notify_new();
  sh_work *w = sh_work_new(n);
  recorder rec;
  sh__thread rt;
  size_t after;
  int i, ok = 1, once = 1, in_order = 1;
  for (i = 0; i < N; i++) ok &= sh_work_push(w, i, i % 3, int_msg(i)) == SH_OK;
  CHECK(ok);
  CHECK(sh_work_queued(w) == N);
  sh_work_unref(w); /* (never closed: the last unref frees it) */
  sh__kept_blocks(&after);
  /* (its heap and its lane, 20,000 requests of 32 bytes each, are kept, or
   * were grown into blocks kept before and handed back, counted then at
   * what the queue used of them: the total may shrink, never below these) */
  CHECK(after >= (size_t)2 * N * 32);
  w = sh_work_new(n);
  start_recorder(&rec, w, order, &rt);
  sh_work_pause(w, 1);
  for (i = 0; i < N; i++) ok &= sh_work_push(w, i, i % 3, int_msg(i)) == SH_OK;
  CHECK(ok);
  sh_work_pause(w, 0);
  CHECK(await_replies(n, w, N, 60000, NULL) == N);
  stop_recorder(n, w, rt);
  CHECK(rec.n == N);
  for (i = 0; i < rec.n; i++) {
    int v = order[i];
    once &= v >= 0 && v < N && !seen[v];
    if (v >= 0 && v < N) seen[v] = 1;
    /* priority 2 first (i % 3 == 2), then 1, then 0, each in pushing order */
    if (i > 0) {
      int u = order[i - 1];
      in_order &= u % 3 > v % 3 || (u % 3 == v % 3 && u < v);
    }
  }
  CHECK(once);
  CHECK(in_order);
}

/* Cores made and freed on several threads at once (an orchestrator in
 * each of several Lua states): the arrays freed cores keep are handed to
 * one grower each, and every core starts from zeroed entries. */
static SH__THREAD_RETURN clock_churn(void *arg) {
  int t = (int)(intptr_t)arg, r;
  for (r = 0; r < 6; r++) {
    sh_clock *c = sh_clock_new();
    int32_t i, n = 7000 + 500 * t, bad = 0;
    for (i = 0; i < n; i++) bad |= sh_clock_start(c, i, 10 + t, 0) != SH_OK;
    for (i = 0; i < n; i += 2) bad |= sh_clock_stop(c, i) != SH_OK;
    CHECK(!bad);
    CHECK(sh_clock_count(c) == n / 2);
    CHECK(sh_clock_pop_stalled(c, 10 + t) == 1);
    sh_clock_free(c);
  }
  return 0;
}

void cores_freed_on_several_threads_keep_their_arrays(void) {
  sh__thread th[4];
  int t;
  size_t bytes;
  for (t = 0; t < 4; t++) CHECK(sh__thread_start(&th[t], clock_churn, (void *)(intptr_t)t) == 0);
  for (t = 0; t < 4; t++) sh__thread_join(th[t]);
  CHECK(sh__kept_blocks(&bytes) > 0);
  CHECK(bytes <= SH__SPARE_MAX);
}

/* A timed wait sleeps until its time is up: it wakes at most a few times
 * in 300 ms (a wait timed against a deadline the system reads on another
 * clock, as Windows' and macOS' condition variables would an absolute
 * CLOCK_MONOTONIC one, returns at once and spins: 8,116 wake-ups once). */
void timed_waits_sleep_their_time(void) {
  sh__mutex m;
  sh__cond c;
  int wakes = 0;
  double t0, left;
  CHECK(sh__mutex_init(&m) == 0);
  CHECK(sh__cond_init(&c) == 0);
  sh__mutex_lock(&m);
  t0 = sh_now_ms();
  while ((left = t0 + 300 - sh_now_ms()) > 0) {
    sh__cond_wait_ms(&c, &m, left);
    wakes++;
  }
  sh__mutex_unlock(&m);
  CHECK(sh_now_ms() - t0 >= 299);
  CHECK(wakes >= 1 && wakes <= 5);
  if (wakes > 5) printf("  a 300 ms wait woke %d times\n", wakes);
  sh__cond_destroy(&c);
  sh__mutex_destroy(&m);
}

/* Reads up to cap events waiting: their ids and kinds; how many (their
 * messages freed). */
static int read_events(sh_work *w, int64_t *ids, int *kinds, int cap) {
  int64_t id;
  int kind, n = 0;
  int32_t wk;
  sh_msg *m;
  double a, b;
  while (n < cap && sh_work_next_event(w, &id, &kind, &wk, &m, &a, &b) == SH_OK) {
    ids[n] = id, kinds[n++] = kind;
    if (m) sh_msg_free(m);
  }
  return n;
}

/* A request that ends before the owner read its start has that start
 * dropped, and only that one: the start of the request beside it, still
 * running, stays (the owner pauses a request's stall clock until it reads
 * the start; a start dropped in its place would leave that clock paused,
 * and a hung request would never stall). Driven from this thread alone:
 * two workers take, one ends, then the owner reads. */
void work_queues_drop_only_the_start_of_a_request_that_ended(void) {
  sh_notify *n = sh_notify_new();
  sh_work *w = sh_work_new(n);
  int64_t id, got[4];
  int kinds[4];
  sh_msg *pa, *pb;
  CHECK(sh_work_add_worker(w) == 0 && sh_work_add_worker(w) == 1);
  CHECK(sh_work_push(w, 7, 0, int_msg(7)) == SH_OK);
  CHECK(sh_work_push(w, 8, 0, int_msg(8)) == SH_OK);
  CHECK(sh_work_take(w, 0, &id, &pa) == SH_OK && id == 7);
  CHECK(sh_work_take(w, 1, &id, &pb) == SH_OK && id == 8);
  CHECK(sh_work_report(w, 1, 8, SH_EV_DONE, pb, 0, 0) == SH_OK);
  CHECK(read_events(w, got, kinds, 4) == 2);
  CHECK(got[0] == 7 && kinds[0] == SH_EV_STARTED); /* (still running: its start is news) */
  CHECK(got[1] == 8 && kinds[1] == SH_EV_DONE);    /* (its start is not) */
  /* (a failure drops its start the same way) */
  CHECK(sh_work_push(w, 9, 0, int_msg(9)) == SH_OK);
  CHECK(sh_work_take(w, 1, &id, &pb) == SH_OK && id == 9);
  CHECK(sh_work_report(w, 1, 9, SH_EV_FAILED, pb, 0, 0) == SH_OK);
  CHECK(sh_work_report(w, 0, 7, SH_EV_DONE, pa, 0, 0) == SH_OK);
  CHECK(read_events(w, got, kinds, 4) == 2);
  CHECK(got[0] == 9 && kinds[0] == SH_EV_FAILED);
  CHECK(got[1] == 7 && kinds[1] == SH_EV_DONE); /* (its start was read before) */
  sh_work_close(w);
  drop_events(w);
  sh_work_unref(w);
  sh_notify_unref(n);
}
