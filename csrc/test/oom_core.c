/*
 * The core when memory runs out. make test-oom builds the core with its
 * malloc, calloc and realloc renamed to the hooks below (-Dmalloc=...),
 * under AddressSanitizer with leak checks, and runs one scene of every
 * structure's allocating calls: ids, timers, stall clocks, slot pools, a
 * barrier, messages, ports, round barriers, a notifier and a work queue
 * driven from this thread (a worker's take and reports included). The scene
 * runs once to count its allocations, then once for each of them, in a
 * child process of its own (the core keeps freed blocks for reuse, process
 * wide), with that allocation refused. Every call that fails says so
 * (NULL, SH_ENOMEM), leaves its structure whole (its invariant check, where
 * it has one) and as it was: the scene calls it again and goes on, and must
 * end with the same results as the run that refused nothing, with nothing
 * leaked and no error the sanitizers see.
 */
/* (the hooks call the real functions: the renaming is for the core) */
#undef malloc
#undef calloc
#undef realloc
#include "../core/sh_threads.h"
#include "../core/stagehand.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

void *sh_test_malloc(size_t n);
void *sh_test_calloc(size_t n, size_t size);
void *sh_test_realloc(void *p, size_t n);

static long refuse_at = -1; /* the allocation refused (counted from 0); -1: none */
static long allocations, refused;

static int allowed(void) {
  if (allocations++ != refuse_at) return 1;
  refused++;
  return 0;
}
void *sh_test_malloc(size_t n) { return allowed() ? malloc(n) : NULL; }
void *sh_test_calloc(size_t n, size_t size) { return allowed() ? calloc(n, size) : NULL; }
void *sh_test_realloc(void *p, size_t n) { return allowed() ? realloc(p, n) : NULL; }

/* ---- the scene (in a child) ---- */

static unsigned long digest = 5381;
static void note(double v) { digest = digest * 33u + (unsigned long)(long long)(v * 8); }

static void fail(int line, const char *what) {
  fprintf(stderr, "oom_core.c:%d: %s (allocation %ld refused)\n", line, what, refuse_at);
  exit(3);
}
#define CHECK(c) ((c) ? (void)0 : fail(__LINE__, #c))

/* Calls `call` again while `failed` holds: a failure must be the refused
 * allocation's (one a run: the next call goes through), and `whole` must
 * hold after it. */
#define AGAIN(call, failed, whole)                                                                 \
  do {                                                                                             \
    int tries_ = 0;                                                                                \
    for (;;) {                                                                                     \
      long before_ = refused;                                                                      \
      call;                                                                                        \
      if (!(failed)) break;                                                                        \
      if (refused == before_ || ++tries_ > 1) fail(__LINE__, #call " failed with no allocation refused"); \
      if (!(whole)) fail(__LINE__, #call " left its structure broken");                           \
    }                                                                                              \
  } while (0)

static sh_msg *int_msg(int v) {
  sh_msg *m;
  AGAIN(m = sh_msg_new(), m == NULL, 1);
  AGAIN(, sh_msg_put(m, &v, sizeof v) == SH_ENOMEM, 1);
  return m;
}
static int msg_int(const sh_msg *m) {
  size_t len;
  int v = 0;
  const unsigned char *d = sh_msg_data(m, &len);
  if (len >= sizeof v) memcpy(&v, d, sizeof v);
  return v;
}

static void ids_and_timers(void) {
  sh_ids *s;
  sh_timers *t;
  int32_t i, id;
  AGAIN(s = sh_ids_new(), s == NULL, 1);
  for (i = 0; i < 5000; i++) { /* (past a level of its bitmap) */
    AGAIN(id = sh_ids_take(s), id == SH_ENOMEM, sh_ids_check(s) == SH_OK);
    if (i % 700 == 0) note(id);
    CHECK(id == i);
  }
  for (i = 0; i < 5000; i += 3) CHECK(sh_ids_give(s, i) == SH_OK);
  AGAIN(id = sh_ids_take(s), id == SH_ENOMEM, sh_ids_check(s) == SH_OK);
  CHECK(id == 0);
  sh_ids_free(s);
  AGAIN(t = sh_timers_new(), t == NULL, 1);
  for (i = 0; i < 300; i++) {
    int rc;
    AGAIN(rc = sh_timers_add(t, i, (i * 7919) % 301), rc == SH_ENOMEM, sh_timers_check(t) == SH_OK);
    CHECK(rc == SH_OK);
  }
  while ((id = sh_timers_pop(t, 1000)) >= 0) note(id);
  CHECK(sh_timers_count(t) == 0);
  sh_timers_free(t);
}

static void clocks(void) {
  sh_clock *c;
  int32_t i, id;
  int rc;
  AGAIN(c = sh_clock_new(), c == NULL, 1);
  for (i = 0; i < 400; i++) {
    AGAIN(rc = sh_clock_start(c, i, 10 + i % 50, 0), rc == SH_ENOMEM, sh_clock_check(c) == SH_OK);
    CHECK(rc == SH_OK);
    AGAIN(rc = sh_clock_join(c, i, i % 90), rc == SH_ENOMEM, sh_clock_check(c) == SH_OK);
    CHECK(rc == SH_OK);
  }
  for (i = 0; i < 90; i += 2) CHECK(sh_clock_touch(c, i, 30) == SH_OK);
  while ((id = sh_clock_pop_stalled(c, 45)) >= 0) note(id);
  note(sh_clock_count(c));
  CHECK(sh_clock_check(c) == SH_OK);
  sh_clock_free(c);
}

static void pools(void) {
  sh_pool *p;
  int32_t i, id, g;
  int rc;
  AGAIN(p = sh_pool_new(), p == NULL, 1);
  CHECK(sh_pool_set_capacity(p, 3) == SH_OK);
  for (i = 0; i < 600; i++) {
    AGAIN(rc = sh_pool_enqueue(p, i * 3, i % 70), rc == SH_ENOMEM, sh_pool_check(p) == SH_OK);
    CHECK(rc == SH_OK);
  }
  sh_pool_new_reads(p);
  while ((g = sh_pool_next_unread(p)) >= 0) CHECK(sh_pool_set_rank(p, g, (g * 37) % 11) == SH_OK);
  for (i = 0; i < 40; i++) { /* (peeking grows a list) */
    AGAIN(id = sh_pool_peek_next(p), id == SH_ENOMEM, sh_pool_check(p) == SH_OK);
    note(id);
  }
  CHECK(sh_pool_peek_end(p) == SH_OK && sh_pool_check(p) == SH_OK);
  while (sh_pool_waiting(p) > 0) {
    id = sh_pool_best(p);
    CHECK(sh_pool_grant(p, id) == SH_OK);
    note(id);
    CHECK(sh_pool_release(p) == SH_OK);
  }
  sh_pool_free(p);
}

static void messages_and_ports(sh_notify *n) {
  static unsigned char big[9000];
  sh_msg *m;
  sh_port *p;
  sh_rounds *r;
  unsigned char *room;
  int32_t i, at;
  int rc;
  size_t len;
  AGAIN(p = sh_port_new(), p == NULL, 1);
  sh_port_set_name(p, "inbox");
  AGAIN(r = sh_rounds_new(3, 2), r == NULL, 1);
  m = int_msg(1);
  AGAIN(rc = sh_msg_put(m, big, sizeof big), rc == SH_ENOMEM, 1);
  AGAIN(room = sh_msg_room(m, 5000), room == NULL, 1);
  memset(room, 7, 5000);
  for (i = 0; i < 12; i++) {
    AGAIN(at = sh_msg_add_ref(m, i % 2 ? SH_REF_ROUNDS : SH_REF_PORT, i % 2 ? (void *)r : (void *)p),
          at == SH_ENOMEM, sh_msg_nrefs(m) == i);
    CHECK(at == i);
  }
  sh_msg_data(m, &len);
  CHECK(len == sizeof(int) + sizeof big + 5000 && msg_int(m) == 1);
  sh_msg_clear(m);
  CHECK(sh_msg_nrefs(m) == 0);
  sh_msg_free(m);
  /* a port: watched twice (its list of notifiers grows), 100 posts */
  for (i = 0; i < 3; i++) {
    AGAIN(rc = sh_port_watch(p, n), rc == SH_ENOMEM, 1);
    CHECK(rc == SH_OK);
  }
  for (i = 0; i < 100; i++) {
    m = int_msg(i);
    AGAIN(rc = sh_port_post(p, m), rc == SH_ENOMEM, sh_port_count(p) == i); /* (refused: still ours) */
    CHECK(rc == SH_OK);
  }
  for (i = 0; i < 100; i++) {
    CHECK(sh_port_take(p, &m) == SH_OK && msg_int(m) == i);
    sh_msg_free(m);
  }
  for (i = 0; i < 3; i++) sh_port_unwatch(p, n);
  /* round barriers: 30 rounds of three sums */
  AGAIN(rc = sh_rounds_watch(r, n), rc == SH_ENOMEM, 1);
  for (i = 0; i < 30; i++) {
    int32_t k;
    double out[2];
    for (k = 1; k <= 3; k++) {
      double share[2];
      share[0] = i + k, share[1] = -k;
      AGAIN(rc = sh_rounds_arrive(r, i, 3, SH_OP_SUM, k, share), rc == SH_ENOMEM,
            sh_rounds_poll(r, i, NULL) != SH_OK);
      CHECK(rc == SH_OK);
    }
    CHECK(sh_rounds_poll(r, i, out) == SH_OK);
    note(out[0]), note(out[1]);
    for (k = 0; k < 3; k++) sh_rounds_leave(r, i);
  }
  sh_rounds_unwatch(r, n);
  sh_port_close(p);
  sh_port_unref(p);
  sh_rounds_unref(r);
}

/* Reads every event waiting; each reply's message is freed. */
static int drain(sh_work *w) {
  int64_t ids[16];
  int kinds[16];
  int32_t workers[16], k, got, total = 0;
  sh_msg *msgs[16];
  double as[16], bs[16];
  while ((got = sh_work_next_events(w, 16, ids, kinds, workers, msgs, as, bs)) > 0) {
    for (k = 0; k < got; k++) {
      note((double)ids[k]), note(kinds[k]), note(as[k]);
      if (msgs[k]) note(msg_int(msgs[k])), sh_msg_free(msgs[k]);
    }
    total += got;
  }
  return total;
}

static void work_queue(sh_notify *n) {
  enum { PUSHED = 400, HELD = 70, WORKERS = 6 };
  sh_work *w;
  int64_t ids[PUSHED], held_ids[HELD];
  int32_t slots[HELD], i, got, taken;
  int rc;
  AGAIN(w = sh_work_new(n), w == NULL, 1);
  sh_work_pause(w, 1);
  for (i = 0; i < PUSHED; i++) {
    sh_msg *m = int_msg(i);
    AGAIN(rc = sh_work_push(w, i, i % 5 == 0 ? 2 : 0, m), rc == SH_ENOMEM, sh_work_queued(w) == i);
    CHECK(rc == SH_OK);
  }
  CHECK(sh_work_set_priority(w, 7, 9) == SH_OK && sh_work_remove(w, 8) == SH_OK);
  AGAIN(got = sh_work_queued_ids(w, ids, PUSHED), got == SH_ENOMEM, sh_work_queued(w) == PUSHED - 1);
  CHECK(got == PUSHED - 1);
  for (i = 0; i < got; i += 37) note((double)ids[i]);
  for (i = 0; i < WORKERS; i++) {
    int32_t k;
    AGAIN(k = sh_work_add_worker(w), k == SH_ENOMEM, 1);
    CHECK(k == i);
  }
  for (i = 0; i < HELD; i++) {
    sh_msg *m = int_msg(1000 + i);
    AGAIN(slots[i] = sh_work_hold(w, 1000 + i, m), slots[i] == SH_ENOMEM, 1); /* (refused: still ours) */
    CHECK(slots[i] >= 0);
    held_ids[i] = 1000 + i;
  }
  CHECK(sh_work_drop(w, slots[3], held_ids[3]) == SH_OK);
  AGAIN(rc = sh_work_offer(w, slots, held_ids, HELD), rc == SH_ENOMEM, 1);
  CHECK(rc == 0 && sh_work_offered(w) == HELD - 1);
  sh_work_pause(w, 0);
  /* this thread as the workers, in turn: each request taken, a progress,
   * its reply; the events read every hundred requests */
  for (taken = 0; taken < PUSHED - 1 + HELD - 1; taken++) {
    int32_t k = taken % WORKERS;
    int64_t id;
    sh_msg *m;
    CHECK(sh_work_take(w, k, &id, &m) == SH_OK); /* (a start it cannot record waits for memory) */
    if (taken % 5) { /* (not every time: so that ends, too, come when the events need room) */
      AGAIN(rc = sh_work_report(w, k, id, SH_EV_PROGRESS, NULL, 1, 2), rc == SH_ENOMEM, 1);
      CHECK(rc == SH_OK);
    }
    sh_msg_clear(m);
    {
      int v = (int)id * 2;
      AGAIN(rc = sh_msg_put(m, &v, sizeof v), rc == SH_ENOMEM, 1);
    }
    /* (an end is never lost: the worker waits for memory to record it) */
    CHECK(sh_work_report(w, k, id, taken % 9 ? SH_EV_DONE : SH_EV_FAILED, m, 0, 0) == SH_OK);
    if (taken % 100 == 0) note(drain(w));
  }
  CHECK(sh_work_queued(w) == 0 && sh_work_offered(w) == 0);
  note(drain(w));
  sh_work_close(w);
  for (i = 0; i < WORKERS; i++) sh_work_exited(w, i); /* (an exit it cannot record is counted all the same) */
  drain(w);
  CHECK(sh_work_live_workers(w) == 0);
  sh_work_unref(w);
}

static void scene(void) {
  sh_notify *n;
  sh_barrier *b;
  AGAIN(n = sh_notify_new(), n == NULL, 1);
  AGAIN(b = sh_barrier_new(500), b == NULL, 1);
  CHECK(sh_barrier_arrive(b, 499) == 1 && sh_barrier_arrived(b) == 1);
  sh_barrier_free(b);
  ids_and_timers();
  clocks();
  pools();
  messages_and_ports(n);
  work_queue(n);
  sh_notify_unref(n);
}

/* ---- the runs (in this process) ---- */

typedef struct outcome {
  unsigned long digest;
  long allocations, refused;
} outcome;

/* Runs the scene in a child with allocation `at` refused; 0 when it ended
 * well (what it found in *out), else a status. */
static int run(long at, outcome *out) {
  int fds[2], status;
  pid_t pid;
  ssize_t got;
  if (pipe(fds) != 0) return -1;
  fflush(stdout);
  pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    outcome o;
    close(fds[0]);
    refuse_at = at;
    scene();
    o.digest = digest, o.allocations = allocations, o.refused = refused;
    if (write(fds[1], &o, sizeof o) != (ssize_t)sizeof o) exit(4);
    close(fds[1]);
    exit(0); /* (LeakSanitizer looks now) */
  }
  close(fds[1]);
  got = read(fds[0], out, sizeof *out);
  close(fds[0]);
  if (waitpid(pid, &status, 0) != pid) return -1;
  if (!WIFEXITED(status)) return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  if (WEXITSTATUS(status) != 0) return WEXITSTATUS(status);
  return got == (ssize_t)sizeof *out ? 0 : 5;
}

int main(void) {
  outcome whole, o;
  long at;
  int passed = 0, failed = 0, rc;
  if ((rc = run(-1, &whole)) != 0 || whole.refused != 0) {
    printf("oom core: the scene failed with nothing refused (status %d)\n", rc);
    return 1;
  }
  for (at = 0; at < whole.allocations; at++) {
    rc = run(at, &o);
    if (rc == 0 && o.refused == 1 && o.digest == whole.digest) {
      passed++;
      continue;
    }
    failed++;
    if (rc == 0)
      printf("oom core: allocation %ld refused: %s\n", at,
             o.refused != 1 ? "the scene never reached it" : "the scene ended with other results");
    else
      printf("oom core: allocation %ld refused: the scene failed (status %d)\n", at, rc);
  }
  printf("oom core: %ld allocations, each refused in turn: %d passed, %d failed\n", whole.allocations, passed,
         failed);
  return failed ? 1 : 0;
}
