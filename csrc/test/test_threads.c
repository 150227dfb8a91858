#define _GNU_SOURCE
/*
 * C tests for the threads' core: messages, notifiers, ports, round barriers
 * and work queues, each driven from several threads at once. `make tsan`
 * builds them under ThreadSanitizer, which fails the run on any data race.
 * Prints "N passed, N failed" and exits non-zero on any failure.
 */
#include "test_threads.h"

int passed, failed;
sh__mutex count_mu = SH__MUTEX_INIT;


sh_msg *int_msg(int v) {
  sh_msg *m = sh_msg_new();
  sh_msg_put(m, &v, sizeof v);
  return m;
}

int msg_int(const sh_msg *m) {
  size_t len;
  int v;
  const unsigned char *d = sh_msg_data(m, &len);
  memcpy(&v, d, sizeof v);
  return v;
}

static void messages_hold_bytes_and_counted_refs(void) {
  sh_msg *m = sh_msg_new();
  sh_port *p = sh_port_new();
  size_t len;
  int kind = 0;
  char big[1000];
  memset(big, 'x', sizeof big);
  CHECK(sh_msg_put(m, "ab\0c", 4) == SH_OK);
  CHECK(sh_msg_put(m, big, sizeof big) == SH_OK);
  CHECK(memcmp(sh_msg_data(m, &len), "ab\0c", 4) == 0 && len == 1004);
  CHECK(sh_msg_add_ref(m, SH_REF_PORT, p) == 0);
  CHECK(sh_msg_add_ref(m, 99, p) == SH_EINVAL);
  CHECK(sh_msg_nrefs(m) == 1 && sh_msg_ref(m, 0, &kind) == p && kind == SH_REF_PORT);
  CHECK(sh_msg_ref(m, 1, &kind) == NULL);
  /* (a round barrier too: the message's count is its last one below, and
   * freeing the message lets it go; make sanitize checks nothing leaks) */
  {
    sh_rounds *r = sh_rounds_new(2, 8);
    CHECK(r != NULL && sh_msg_add_ref(m, SH_REF_ROUNDS, r) == 1);
    CHECK(sh_msg_nrefs(m) == 2 && sh_msg_ref(m, 1, &kind) == r && kind == SH_REF_ROUNDS);
    sh_rounds_unref(r);
  }
  /* a u32 written in place: inside the bytes only, never past their end */
  CHECK(sh_msg_set_u32(m, 1000, 0x01020304u) == SH_OK);
  {
    uint32_t back = 0;
    memcpy(&back, sh_msg_data(m, &len) + 1000, sizeof back);
    CHECK(back == 0x01020304u && len == 1004);
  }
  CHECK(sh_msg_set_u32(m, 1001, 7) == SH_EINVAL); /* (its last byte past the end) */
  CHECK(sh_msg_set_u32(m, 1004, 7) == SH_EINVAL);
  CHECK(sh_msg_set_u32(m, 5000, 7) == SH_EINVAL); /* (an offset past the end) */
  CHECK(sh_msg_set_u32(m, (size_t)-1, 7) == SH_EINVAL);
  sh_port_unref(p); /* the message's count keeps it */
  CHECK(sh_port_post(p, int_msg(1)) == SH_OK);
  sh_msg_free(m); /* the last count: the port and its queue go */
}

/* A message cleared for another value (a worker's reply written into its
 * request) starts again empty, and lets go of what it referred to; a
 * buffer grown past what a message keeps goes back to the allocator
 * (make valgrind: neither the port nor a buffer leaks). */
static void cleared_messages_are_written_again(void) {
  sh_msg *m = sh_msg_new();
  sh_port *p = sh_port_new();
  size_t len;
  int v = 7;
  static char huge[10000];
  CHECK(sh_msg_put(m, "request", 7) == SH_OK);
  CHECK(sh_msg_add_ref(m, SH_REF_PORT, p) == 0);
  sh_port_unref(p); /* the message holds the port's last count */
  sh_msg_clear(m); /* and lets it go: the port goes */
  CHECK(sh_msg_nrefs(m) == 0);
  sh_msg_data(m, &len);
  CHECK(len == 0);
  CHECK(sh_msg_put(m, &v, sizeof v) == SH_OK && msg_int(m) == 7);
  CHECK(sh_msg_put(m, huge, sizeof huge) == SH_OK);
  sh_msg_data(m, &len);
  CHECK(len == sizeof v + sizeof huge);
  sh_msg_clear(m); /* (its grown buffer goes) */
  v = 9;
  CHECK(sh_msg_put(m, &v, sizeof v) == SH_OK && msg_int(m) == 9);
  sh_msg_data(m, &len);
  CHECK(len == sizeof v);
  sh_msg_free(m);
}

/* ---- ports ---- */

static void ports_keep_order_and_refuse_after_close(void) {
  sh_port *p = sh_port_new();
  sh_msg *m = NULL;
  int i, stop = 0;
  for (i = 0; i < 20; i++) CHECK(sh_port_post(p, int_msg(i)) == SH_OK);
  CHECK(sh_port_count(p) == 20);
  for (i = 0; i < 10; i++) {
    CHECK(sh_port_take(p, &m) == SH_OK && msg_int(m) == i);
    sh_msg_free(m);
  }
  for (i = 20; i < 40; i++) CHECK(sh_port_post(p, int_msg(i)) == SH_OK); /* (wraps the ring, then grows it) */
  for (i = 10; i < 40; i++) {
    CHECK(sh_port_take(p, &m) == SH_OK && msg_int(m) == i);
    sh_msg_free(m);
  }
  CHECK(sh_port_take(p, &m) == SH_EAGAIN);
  CHECK(sh_port_wait(p, 5, NULL) == SH_ETIMEDOUT);
  stop = 1;
  CHECK(sh_port_wait(p, 1000, &stop) == SH_ESTOPPED);
  CHECK(sh_port_post(p, int_msg(1)) == SH_OK);
  sh_port_close(p);
  CHECK(sh_port_closed(p));
  CHECK(sh_port_count(p) == 0); /* closing drops the queue */
  m = int_msg(2);
  CHECK(sh_port_post(p, m) == SH_ECLOSED);
  sh_msg_free(m);
  CHECK(sh_port_take(p, &m) == SH_ECLOSED);
  CHECK(sh_port_wait(p, 1000, NULL) == SH_ECLOSED);
  sh_port_unref(p);
}

#define PRODUCERS 4
#define PER_PRODUCER 5000

typedef struct port_run {
  sh_port *p;
  int id;
  int got[PRODUCERS];
  int in_order;
} port_run;

static SH__THREAD_RETURN producer(void *arg) {
  port_run *r = (port_run *)arg;
  int i;
  for (i = 0; i < PER_PRODUCER; i++) sh_port_post(r->p, int_msg(r->id * PER_PRODUCER + i));
  return 0;
}

static SH__THREAD_RETURN consumer(void *arg) {
  port_run *r = (port_run *)arg;
  int last[PRODUCERS], i;
  for (i = 0; i < PRODUCERS; i++) last[i] = -1;
  r->in_order = 1;
  for (;;) {
    sh_msg *m = NULL;
    int rc = sh_port_wait(r->p, 5000, NULL);
    if (rc != SH_OK) break;
    if (sh_port_take(r->p, &m) != SH_OK) continue; /* (the other consumer took it) */
    {
      int v = msg_int(m), who = v / PER_PRODUCER;
      if (v % PER_PRODUCER <= last[who]) r->in_order = 0;
      last[who] = v % PER_PRODUCER;
      r->got[who]++;
    }
    sh_msg_free(m);
  }
  return 0;
}

static void ports_carry_everything_between_threads_in_order(void) {
  sh_port *p = sh_port_new();
  sh__thread prod[PRODUCERS], cons[2];
  port_run pr[PRODUCERS], cr[2];
  int i, k, total = 0;
  memset(cr, 0, sizeof cr);
  for (i = 0; i < 2; i++) {
    cr[i].p = p;
    sh__thread_start(&cons[i], consumer, &cr[i]);
  }
  for (i = 0; i < PRODUCERS; i++) {
    pr[i].p = p;
    pr[i].id = i;
    sh__thread_start(&prod[i], producer, &pr[i]);
  }
  for (i = 0; i < PRODUCERS; i++) sh__thread_join(prod[i]);
  while (sh_port_count(p) > 0) sh_sleep_ms(1);
  sh_port_close(p);
  for (i = 0; i < 2; i++) sh__thread_join(cons[i]);
  for (i = 0; i < 2; i++) {
    CHECK(cr[i].in_order); /* each producer's values arrive in the order it posted them */
    for (k = 0; k < PRODUCERS; k++) total += cr[i].got[k];
  }
  CHECK(total == PRODUCERS * PER_PRODUCER);
  sh_port_unref(p);
}

/* ---- notifiers ---- */

/* Whether the notifier's descriptor reads as readable now (a pipe on
 * POSIX, a socket on Windows). */
static int readable(intptr_t fd) {
#if defined(_WIN32)
  fd_set set;
  struct timeval none = {0, 0};
  FD_ZERO(&set);
  FD_SET((SOCKET)fd, &set);
  return select(0, &set, NULL, NULL, &none) == 1;
#else
  struct pollfd pfd;
  pfd.fd = (int)fd;
  pfd.events = POLLIN;
  return poll(&pfd, 1, 0) == 1;
#endif
}

static SH__THREAD_RETURN signal_later(void *arg) {
  sh_sleep_ms(5);
  sh_notify_signal((sh_notify *)arg);
  return 0;
}

static void notifiers_wake_a_waiter_and_its_descriptor(void) {
  sh_notify *n = sh_notify_new();
  sh_port *p = sh_port_new();
  sh__thread t;
  uint64_t seen = sh_notify_gen(n);
  CHECK(sh_notify_wait(n, seen, 1) == 0);
  CHECK(!readable(sh_notify_fd(n)));
  sh__thread_start(&t, signal_later, n);
  CHECK(sh_notify_wait(n, seen, 5000) == 1);
  sh__thread_join(t);
  CHECK(readable(sh_notify_fd(n)));
  sh_notify_clear(n);
  CHECK(!readable(sh_notify_fd(n)));
  /* a port it watches signals it at every post */
  CHECK(sh_port_watch(p, n) == SH_OK);
  seen = sh_notify_gen(n);
  sh_port_post(p, int_msg(3));
  CHECK(sh_notify_gen(n) != seen);
  sh_port_unwatch(p, n);
  seen = sh_notify_gen(n);
  sh_port_post(p, int_msg(4));
  CHECK(sh_notify_gen(n) == seen);
  sh_port_unref(p);
  /* a round barrier it watches signals it when a round completes; a port
   * and a barrier freed while still watching let go of it (make
   * sanitize: nothing is left of the notifier after its last unref) */
  {
    sh_rounds *r = sh_rounds_new(1, 0);
    sh_port *q = sh_port_new();
    CHECK(sh_rounds_watch(r, n) == SH_OK && sh_port_watch(q, n) == SH_OK);
    seen = sh_notify_gen(n);
    CHECK(sh_rounds_arrive(r, 1, 1, SH_OP_COUNT, 0, NULL) == SH_OK);
    CHECK(sh_notify_gen(n) != seen);
    sh_rounds_leave(r, 1);
    sh_rounds_unref(r);
    sh_port_unref(q);
  }
  sh_notify_unref(n);
}

/* ---- round barriers ---- */

#define RB_THREADS 4
#define RB_ROUNDS 200

typedef struct rb_run {
  sh_rounds *b;
  int index;
  double results[RB_ROUNDS][2];
  int ok;
} rb_run;

static SH__THREAD_RETURN rounds_participant(void *arg) {
  rb_run *r = (rb_run *)arg;
  int round;
  r->ok = 1;
  for (round = 0; round < RB_ROUNDS; round++) {
    /* shares whose sum depends on the order they are added in */
    double share[2];
    share[0] = (r->index == 2 ? 1e16 : r->index == 3 ? -1e16 : 0.1 * r->index) + round;
    share[1] = 1.0 / (r->index + round + 1);
    if (sh_rounds_arrive(r->b, round, RB_THREADS, SH_OP_SUM, r->index, share) != SH_OK) r->ok = 0;
    if (sh_rounds_wait(r->b, round, r->results[round], 10000, NULL) != SH_OK) r->ok = 0;
    sh_rounds_leave(r->b, round);
  }
  return 0;
}

static void rounds_give_every_participant_the_same_bits(void) {
  sh_rounds *b = sh_rounds_new(RB_THREADS, 2);
  sh__thread t[RB_THREADS];
  rb_run *r = calloc(RB_THREADS, sizeof *r);
  int i, round, same = 1;
  for (i = 0; i < RB_THREADS; i++) {
    r[i].b = b;
    r[i].index = i + 1;
    sh__thread_start(&t[i], rounds_participant, &r[i]);
  }
  for (i = 0; i < RB_THREADS; i++) sh__thread_join(t[i]);
  for (i = 0; i < RB_THREADS; i++) CHECK(r[i].ok);
  for (round = 0; round < RB_ROUNDS; round++) {
    double want = 0;
    for (i = 0; i < RB_THREADS; i++) {
      int ix = i + 1;
      double s = (ix == 2 ? 1e16 : ix == 3 ? -1e16 : 0.1 * ix) + round;
      want = i == 0 ? s : want + s; /* index order */
    }
    for (i = 0; i < RB_THREADS; i++) {
      if (memcmp(&r[i].results[round], &r[0].results[round], sizeof r[0].results[round]) != 0) same = 0;
      if (r[i].results[round][0] != want) same = 0;
    }
  }
  CHECK(same);
  /* every round was left by all: nothing is kept */
  CHECK(sh_rounds_poll(b, 0, NULL) == SH_EINVAL);
  free(r);
  sh_rounds_unref(b);
}

typedef struct arrival {
  sh_rounds *b;
  int rc;
} arrival;

static SH__THREAD_RETURN arrive_and_wait(void *arg) {
  arrival *a = (arrival *)arg;
  int rc = sh_rounds_arrive(a->b, 7, 3, SH_OP_COUNT, 0, NULL);
  if (rc == SH_OK) rc = sh_rounds_wait(a->b, 7, NULL, 10000, NULL);
  sh_rounds_leave(a->b, 7);
  a->rc = rc;
  return 0;
}

static void rounds_abort_releases_everyone(void) {
  sh_rounds *b = sh_rounds_new(3, 0);
  sh__thread t[2];
  arrival a[2];
  int i, stop = 1;
  double share[1] = {1};
  for (i = 0; i < 2; i++) {
    a[i].b = b, a[i].rc = -1;
    sh__thread_start(&t[i], arrive_and_wait, &a[i]);
  }
  sh_sleep_ms(5); /* (they wait for a third that never comes) */
  sh_rounds_abort(b);
  for (i = 0; i < 2; i++) {
    sh__thread_join(t[i]);
    CHECK(a[i].rc == SH_ECLOSED);
  }
  CHECK(sh_rounds_arrive(b, 8, 1, SH_OP_COUNT, 0, NULL) == SH_ECLOSED);
  CHECK(sh_rounds_aborted(b));
  sh_rounds_unref(b);
  /* bad arguments, repeats and a stopped wait */
  b = sh_rounds_new(2, 1);
  CHECK(sh_rounds_new(0, 1) == NULL);
  CHECK(sh_rounds_arrive(b, 1, 3, SH_OP_COUNT, 0, NULL) == SH_EINVAL);
  CHECK(sh_rounds_arrive(b, 1, 0, SH_OP_COUNT, 0, NULL) == SH_EINVAL);
  CHECK(sh_rounds_arrive(b, 1, 2, SH_OP_COUNT - 1, 1, share) == SH_EINVAL); /* (no such operation) */
  CHECK(sh_rounds_arrive(b, 1, 2, SH_OP_MAX + 1, 1, share) == SH_EINVAL);
  CHECK(sh_rounds_arrive(b, 0.0 / 0.0, 2, SH_OP_COUNT, 0, NULL) == SH_EINVAL); /* (a NaN round) */
  CHECK(sh_rounds_arrive(b, 1, 2, SH_OP_SUM, 3, share) == SH_EINVAL);
  CHECK(sh_rounds_arrive(b, 1, 2, SH_OP_SUM, 1, share) == SH_OK);
  CHECK(sh_rounds_arrive(b, 1, 2, SH_OP_SUM, 1, share) == SH_ESTATE);
  CHECK(sh_rounds_arrive(b, 1, 2, SH_OP_MAX, 2, share) == SH_EINVAL);
  CHECK(sh_rounds_poll(b, 1, NULL) == SH_EAGAIN);
  CHECK(sh_rounds_wait(b, 1, NULL, 1000, &stop) == SH_ESTOPPED);
  CHECK(sh_rounds_wait(b, 1, NULL, 2, NULL) == SH_ETIMEDOUT);
  sh_rounds_unref(b);
  /* with no numbers to share, a sum needs no share: NULL is taken */
  b = sh_rounds_new(1, 0);
  CHECK(sh_rounds_arrive(b, 1, 1, SH_OP_SUM, 1, NULL) == SH_OK);
  CHECK(sh_rounds_poll(b, 1, NULL) == SH_OK);
  sh_rounds_unref(b);
}

int main(void) {
  timed_waits_sleep_their_time();
  messages_hold_bytes_and_counted_refs();
  cleared_messages_are_written_again();
  ports_keep_order_and_refuse_after_close();
  ports_carry_everything_between_threads_in_order();
  notifiers_wake_a_waiter_and_its_descriptor();
  rounds_give_every_participant_the_same_bits();
  rounds_abort_releases_everyone();
  work_queues_run_by_priority_and_report_everything();
  work_queues_give_held_requests_only_as_offered();
  work_queues_keep_priority_then_arrival_order();
  work_queues_take_from_several_pushing_threads();
  work_queues_wake_a_sleeping_worker();
  work_queues_wake_as_many_workers_as_offered();
  work_queues_free_what_was_never_taken();
  work_queues_grow_into_what_a_freed_queue_kept();
  work_queues_drop_only_the_start_of_a_request_that_ended();
  cores_freed_on_several_threads_keep_their_arrays();
  printf("threads: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
