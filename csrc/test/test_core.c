/*
 * C unit tests for the core's structures: stall clocks and timers, with
 * their invariants checked after every step of long random sequences.
 * Prints "N passed, N failed" and exits non-zero on any failure.
 */
#include "../core/sh_checks.h"
#include "../core/sh_grow.h"
#include "../core/stagehand.h"
#include "fuzz_core.h"

#include <dirent.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int passed, failed;

#define CHECK(cond)                                                                   \
  do {                                                                                \
    if (cond) {                                                                       \
      passed++;                                                                       \
    } else {                                                                          \
      failed++;                                                                       \
      fprintf(stderr, "%s:%d: %s: check failed: %s\n", __FILE__, __LINE__, __func__, #cond); \
    }                                                                                 \
  } while (0)

static uint64_t rng_state = 88172645463325252ull;
static uint32_t rnd(uint32_t n) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (uint32_t)(rng_state % n);
}

static void clock_stalls_after_its_time(void) {
  sh_clock *c = sh_clock_new();
  CHECK(sh_clock_start(c, 3, 100, 0) == SH_OK);
  CHECK(sh_clock_pop_stalled(c, 99) == -1);
  CHECK(sh_clock_pop_stalled(c, 100) == 3);
  CHECK(sh_clock_stall_ms(c, 3) == 100); /* still readable for the log line */
  CHECK(sh_clock_stall_ms(c, 2) == -1);
  CHECK(sh_clock_stall_ms(c, -1) == -1);
  CHECK(sh_clock_count(c) == 0);
  CHECK(sh_clock_pop_stalled(c, 1000) == -1);
  sh_clock_free(c);
}

static void clock_progress_defers_without_reordering(void) {
  sh_clock *c = sh_clock_new();
  sh_clock_start(c, 0, 100, 0);
  sh_clock_start(c, 1, 150, 0);
  CHECK(sh_clock_progress(c, 0, 90) == SH_OK);
  CHECK(sh_clock_next_due(c, 90) == 10); /* stale key: a lower bound */
  CHECK(sh_clock_pop_stalled(c, 150) == 1);
  CHECK(sh_clock_pop_stalled(c, 189) == -1);
  CHECK(sh_clock_next_due(c, 150) == 40); /* re-filed at its true deadline */
  CHECK(sh_clock_pop_stalled(c, 190) == 0);
  CHECK(sh_clock_check(c) == SH_OK);
  sh_clock_free(c);
}

static void clock_ties_stall_in_start_order(void) {
  sh_clock *c = sh_clock_new();
  int32_t i;
  for (i = 9; i >= 0; i--) sh_clock_start(c, i, 50, 0);
  for (i = 9; i >= 0; i--) CHECK(sh_clock_pop_stalled(c, 50) == i);
  sh_clock_free(c);
}

/* Ties stall in the order the clocks started, whenever earlier checks ran.
 * Each case runs twice, once with a check between that re-files or drops
 * an item, and must stall the same way both times. (Ties went by filing
 * order: an id started again kept its old item's place in line unless a
 * check had dropped it, and hosts that checked at different moments ended
 * the same two stalls in opposite orders. Then by id: ids are reused
 * lowest first, so a job started later stalled first.) */
static void clock_ties_stall_in_start_order_whenever_checked(void) {
  int k;
  /* an ended clock's item, dropped by a check or not */
  for (k = 0; k < 2; k++) {
    sh_clock *c = sh_clock_new();
    CHECK(sh_clock_start(c, 1, 50, 0) == SH_OK);
    CHECK(sh_clock_stop(c, 1) == SH_OK); /* its item stays filed, under 50 */
    if (k == 1) CHECK(sh_clock_pop_stalled(c, 50) == -1); /* a check drops it */
    CHECK(sh_clock_start(c, 1, 40, 60) == SH_OK);
    CHECK(sh_clock_start(c, 0, 40, 60) == SH_OK);
    CHECK(sh_clock_check(c) == SH_OK);
    CHECK(sh_clock_pop_stalled(c, 100) == 1);
    CHECK(sh_clock_pop_stalled(c, 100) == 0);
    sh_clock_free(c);
  }
  /* the same with the lower id started first, its item filed lazily */
  for (k = 0; k < 2; k++) {
    sh_clock *c = sh_clock_new();
    CHECK(sh_clock_start(c, 0, 50, 0) == SH_OK);
    CHECK(sh_clock_stop(c, 0) == SH_OK);
    if (k == 1) CHECK(sh_clock_pop_stalled(c, 50) == -1);
    CHECK(sh_clock_start(c, 1, 40, 60) == SH_OK);
    CHECK(sh_clock_start(c, 0, 40, 60) == SH_OK); /* its old item, if kept, is behind 1 now */
    CHECK(sh_clock_check(c) == SH_OK);
    CHECK(sh_clock_pop_stalled(c, 100) == 1);
    CHECK(sh_clock_pop_stalled(c, 100) == 0);
    sh_clock_free(c);
  }
  /* a paused clock's item, dropped by a check or not, then resumed: it
   * keeps its start's place */
  for (k = 0; k < 2; k++) {
    sh_clock *c = sh_clock_new();
    CHECK(sh_clock_start(c, 1, 50, 0) == SH_OK);
    CHECK(sh_clock_pause(c, 1) == SH_OK);
    if (k == 1) CHECK(sh_clock_pop_stalled(c, 50) == -1); /* a check drops it */
    CHECK(sh_clock_resume(c, 1, 60) == SH_OK); /* due at 110 */
    CHECK(sh_clock_start(c, 0, 50, 60) == SH_OK); /* due at 110 too */
    CHECK(sh_clock_check(c) == SH_OK);
    CHECK(sh_clock_pop_stalled(c, 110) == 1);
    CHECK(sh_clock_pop_stalled(c, 110) == 0);
    sh_clock_free(c);
  }
  /* a clock whose progress a check re-filed, or not */
  for (k = 0; k < 2; k++) {
    sh_clock *c = sh_clock_new();
    CHECK(sh_clock_start(c, 5, 50, 0) == SH_OK);
    CHECK(sh_clock_progress(c, 5, 10) == SH_OK); /* due at 60, filed under 50 */
    CHECK(sh_clock_start(c, 2, 50, 10) == SH_OK); /* due at 60 too */
    if (k == 1) CHECK(sh_clock_pop_stalled(c, 55) == -1); /* re-files 5 at 60 */
    CHECK(sh_clock_pop_stalled(c, 60) == 5);
    CHECK(sh_clock_pop_stalled(c, 60) == 2);
    sh_clock_free(c);
  }
  /* a clock stalled and started again by sh_clock_restart keeps its place,
   * ahead of one started after it (a restart, unlike a start, comes when a
   * check runs: its order must not hang on that) */
  {
    sh_clock *c = sh_clock_new();
    CHECK(sh_clock_start(c, 3, 50, 0) == SH_OK);
    CHECK(sh_clock_pop_stalled(c, 50) == 3);
    CHECK(sh_clock_stall_ms(c, 3) == 50);
    CHECK(sh_clock_start(c, 1, 50, 50) == SH_OK); /* due at 100 */
    CHECK(sh_clock_restart(c, 3, 50) == SH_OK);    /* due at 100 too */
    CHECK(sh_clock_restart(c, 3, 50) == SH_EINVAL); /* running: not one to restart */
    CHECK(sh_clock_restart(c, 7, 50) == SH_EINVAL); /* never started */
    CHECK(sh_clock_check(c) == SH_OK);
    CHECK(sh_clock_pop_stalled(c, 100) == 3);
    CHECK(sh_clock_pop_stalled(c, 100) == 1);
    CHECK(sh_clock_count(c) == 0);
    sh_clock_free(c);
  }
  /* a paused clock a check finds at the top is dropped: nothing can stall
   * then, and resumed it is filed under its new deadline */
  {
    sh_clock *c = sh_clock_new();
    CHECK(sh_clock_start(c, 0, 10, 0) == SH_OK);
    CHECK(sh_clock_pause(c, 0) == SH_OK);
    CHECK(sh_clock_next_due(c, 100) == 0); /* (its old key: a lower bound) */
    CHECK(sh_clock_pop_stalled(c, 100) == -1);
    CHECK(sh_clock_next_due(c, 100) == -1);
    CHECK(sh_clock_count(c) == 1);
    CHECK(sh_clock_check(c) == SH_OK);
    CHECK(sh_clock_resume(c, 0, 200) == SH_OK);
    CHECK(sh_clock_next_due(c, 200) == 10);
    CHECK(sh_clock_pop_stalled(c, 209) == -1);
    CHECK(sh_clock_pop_stalled(c, 210) == 0);
    CHECK(sh_clock_check(c) == SH_OK);
    sh_clock_free(c);
  }
}

static void clock_hidden_time_never_counts(void) {
  sh_clock *c = sh_clock_new();
  sh_clock_start(c, 0, 100, 0);
  CHECK(sh_clock_set_visible(c, 0, 60) == SH_OK);
  CHECK(sh_clock_next_due(c, 60) == -1);
  CHECK(sh_clock_pop_stalled(c, 10000) == -1);
  CHECK(sh_clock_set_visible(c, 1, 10000) == SH_OK);
  CHECK(sh_clock_visible_time(c, 10000) == 60);
  CHECK(sh_clock_pop_stalled(c, 10039) == -1);
  CHECK(sh_clock_pop_stalled(c, 10040) == 0);
  sh_clock_free(c);
}

static void clock_paused_never_stalls_and_resume_is_progress(void) {
  sh_clock *c = sh_clock_new();
  sh_clock_start(c, 0, 100, 0);
  CHECK(sh_clock_pause(c, 0) == SH_OK);
  CHECK(sh_clock_pop_stalled(c, 500) == -1);
  CHECK(sh_clock_count(c) == 1);
  CHECK(sh_clock_resume(c, 0, 500) == SH_OK);
  CHECK(sh_clock_pop_stalled(c, 599) == -1);
  CHECK(sh_clock_pop_stalled(c, 600) == 0);
  /* pause then resume before the check reaches it */
  sh_clock_start(c, 1, 100, 600);
  sh_clock_pause(c, 1);
  sh_clock_resume(c, 1, 650);
  CHECK(sh_clock_pop_stalled(c, 749) == -1);
  CHECK(sh_clock_pop_stalled(c, 750) == 1);
  sh_clock_free(c);
}

/* A stop leaves the id's heap item in place; the id started again takes
 * it over. Neither may change what stalls, or when. */
static void clock_stopped_ids_restart_on_their_new_deadline(void) {
  sh_clock *c = sh_clock_new();
  CHECK(sh_clock_start(c, 0, 100, 0) == SH_OK);
  CHECK(sh_clock_start(c, 1, 100, 0) == SH_OK);
  CHECK(sh_clock_stop(c, 0) == SH_OK);
  CHECK(sh_clock_count(c) == 1);
  CHECK(sh_clock_check(c) == SH_OK);
  CHECK(sh_clock_start(c, 0, 100, 50) == SH_OK); /* later than its old item's key */
  CHECK(sh_clock_pop_stalled(c, 120) == 1);
  CHECK(sh_clock_pop_stalled(c, 149) == -1);
  CHECK(sh_clock_pop_stalled(c, 150) == 0);
  CHECK(sh_clock_start(c, 0, 100, 200) == SH_OK); /* stopped by the pop: filed anew */
  CHECK(sh_clock_stop(c, 0) == SH_OK);
  CHECK(sh_clock_start(c, 0, 10, 200) == SH_OK); /* earlier than its old item's key */
  CHECK(sh_clock_pop_stalled(c, 210) == 0);
  CHECK(sh_clock_start(c, 2, 10, 300) == SH_OK);
  CHECK(sh_clock_stop(c, 2) == SH_OK);
  CHECK(sh_clock_pop_stalled(c, 1000) == -1); /* a stopped id never comes out */
  CHECK(sh_clock_count(c) == 0);
  CHECK(sh_clock_check(c) == SH_OK);
  sh_clock_free(c);
}

/* A stopped id's item left in the heap, taken over by the id's next
 * clock: a key earlier than the new deadline stands as it was filed, and
 * one equal to it takes the new clock's order. Either way equal deadlines
 * stall in the order their clocks started. */
static void clock_restarted_ids_stall_in_start_order(void) {
  sh_clock *c = sh_clock_new();
  int k;
  CHECK(sh_clock_start(c, 0, 100, 0) == SH_OK); /* filed under 100, started first */
  CHECK(sh_clock_stop(c, 0) == SH_OK);
  CHECK(sh_clock_start(c, 1, 100, 50) == SH_OK); /* due at 150 */
  CHECK(sh_clock_start(c, 0, 100, 50) == SH_OK); /* due at 150 too, started after 1 */
  CHECK(sh_clock_check(c) == SH_OK);
  CHECK(sh_clock_next_due(c, 50) == 50); /* (its old key: a lower bound) */
  CHECK(sh_clock_pop_stalled(c, 149) == -1);
  CHECK(sh_clock_check(c) == SH_OK);
  CHECK(sh_clock_pop_stalled(c, 150) == 1);
  CHECK(sh_clock_pop_stalled(c, 150) == 0);
  sh_clock_free(c);
  /* the same, with the new deadline equal to the old key, checked before
   * the deadline (k == 1) or only at it */
  for (k = 0; k < 2; k++) {
    c = sh_clock_new();
    CHECK(sh_clock_start(c, 0, 100, 0) == SH_OK); /* filed under 100 */
    CHECK(sh_clock_stop(c, 0) == SH_OK);
    CHECK(sh_clock_start(c, 1, 50, 50) == SH_OK); /* due at 100 */
    CHECK(sh_clock_start(c, 0, 50, 50) == SH_OK); /* due at 100 too, started after 1 */
    CHECK(sh_clock_check(c) == SH_OK);
    if (k == 1) CHECK(sh_clock_pop_stalled(c, 99) == -1);
    CHECK(sh_clock_pop_stalled(c, 100) == 1);
    CHECK(sh_clock_pop_stalled(c, 100) == 0);
    sh_clock_free(c);
  }
  /* 1,000 ids stopped and restarted a wave later, in reverse: they stall
   * in the new wave's start order, not the old one's */
  c = sh_clock_new();
  for (k = 0; k < 1000; k++) CHECK(sh_clock_start(c, k, 100, 0) == SH_OK);
  for (k = 0; k < 1000; k++) CHECK(sh_clock_stop(c, k) == SH_OK);
  for (k = 999; k >= 0; k--) CHECK(sh_clock_start(c, k, 100, 10) == SH_OK);
  CHECK(sh_clock_check(c) == SH_OK);
  CHECK(sh_clock_pop_stalled(c, 109) == -1);
  for (k = 999; k >= 0; k--) CHECK(sh_clock_pop_stalled(c, 110) == k);
  CHECK(sh_clock_pop_stalled(c, 110) == -1);
  CHECK(sh_clock_count(c) == 0);
  sh_clock_free(c);
}

/* A core's per-id arrays, once it is freed, are kept for the next core
 * to grow into: the next one starts from zeroed entries all the same
 * (every id free, nothing filed), and what is kept stays within its
 * bound however many cores are freed. */
static void cores_grow_into_the_arrays_freed_cores_kept(void) {
  enum { N = 11000 }; /* (the clock's entries, the heap's items and the pool's waiters: 256 KB or more each) */
  size_t bytes = 0, blocks;
  int32_t i;
  int k;
  for (k = 0; k < 2; k++) { /* (the second grows into what the first kept) */
    sh_clock *c = sh_clock_new();
    sh_pool *p = sh_pool_new();
    for (i = 0; i < N; i++) {
      if (sh_clock_start(c, i, 1000 + k, 0) != SH_OK || sh_pool_enqueue(p, i, i % 3) != SH_OK) {
        CHECK(0); /* (a kept entry not zeroed reads as running: SH_ESTATE) */
        break;
      }
      if (i % 1000 == 0) CHECK(sh_clock_join(c, i, 1) == SH_OK);
    }
    CHECK(sh_clock_count(c) == N);
    CHECK(sh_clock_check(c) == SH_OK);
    CHECK(sh_pool_check(p) == SH_OK);
    CHECK(sh_pool_waiting(p) == N);
    CHECK(sh_clock_pop_stalled(c, 999 + k) == -1);
    /* (the first core is freed with every clock running and every waiter
     * queued: what it leaves in its arrays must not reach the second) */
    if (k == 1) {
      for (i = 0; i < N; i++) {
        if (sh_clock_pop_stalled(c, 1000 + k) != i) {
          CHECK(0);
          break;
        }
      }
      CHECK(sh_clock_pop_stalled(c, 1e9) == -1);
      for (i = 0; i < N; i++) {
        if (sh_pool_remove(p, i) != SH_OK) {
          CHECK(0);
          break;
        }
      }
    }
    sh_clock_free(c);
    sh_pool_free(p);
    blocks = sh__kept_blocks(&bytes);
    CHECK(blocks > 0);
    CHECK(bytes >= (size_t)N * 40); /* (the stall clock's entries, at least) */
    CHECK(bytes <= SH__SPARE_MAX);
  }
  /* a small core never takes a kept block: it grows as ever */
  {
    sh_clock *c = sh_clock_new();
    size_t before;
    blocks = sh__kept_blocks(&before);
    for (i = 0; i < 100; i++) CHECK(sh_clock_start(c, i, 5, 0) == SH_OK);
    CHECK(sh__kept_blocks(&bytes) == blocks && bytes == before);
    CHECK(sh_clock_pop_stalled(c, 5) == 0);
    sh_clock_free(c);
  }
  /* freeing more than the bound keeps no more than it */
  {
    sh_clock *cs[8];
    for (k = 0; k < 8; k++) {
      cs[k] = sh_clock_new();
      CHECK(sh_clock_start(cs[k], 400000, 10, 0) == SH_OK); /* (grown at once to 400,001 ids) */
    }
    for (k = 0; k < 8; k++) sh_clock_free(cs[k]);
    sh__kept_blocks(&bytes);
    CHECK(bytes <= SH__SPARE_MAX);
    CHECK(bytes > SH__SPARE_MAX / 2);
  }
}

static void clock_refuses_bad_input(void) {
  sh_clock *c = sh_clock_new();
  CHECK(sh_clock_start(c, -1, 10, 0) == SH_EINVAL);
  CHECK(sh_clock_start(c, SH_MAX_ID, 10, 0) == SH_EINVAL);
  CHECK(sh_clock_start(c, 0, 0, 0) == SH_EINVAL);
  CHECK(sh_clock_start(c, 0, -5, 0) == SH_EINVAL);
  CHECK(sh_clock_start(c, 0, NAN, 0) == SH_EINVAL);
  CHECK(sh_clock_start(c, 0, -INFINITY, 0) == SH_EINVAL);
  CHECK(sh_clock_start(c, 0, 10, NAN) == SH_EINVAL);
  CHECK(sh_clock_progress(c, 0, 0) == SH_EINVAL);
  CHECK(sh_clock_progress(c, 1 << 30, 0) == SH_EINVAL);
  CHECK(sh_clock_stop(c, 7) == SH_EINVAL);
  CHECK(sh_clock_start(c, 0, 10, 0) == SH_OK);
  CHECK(sh_clock_start(c, 0, 10, 0) == SH_ESTATE);
  CHECK(sh_clock_start(NULL, 0, 10, 0) == SH_EINVAL);
  CHECK(sh_clock_pop_stalled(NULL, 0) == -1);
  CHECK(sh_clock_check(c) == SH_OK);
  sh_clock_free(c);
  sh_clock_free(NULL);
}

/* A stall time of infinity never stalls, and next_due does not count it;
 * the clock still starts, pauses, resumes and stops like any other. */
static void clock_of_infinity_never_stalls(void) {
  sh_clock *c = sh_clock_new();
  CHECK(sh_clock_start(c, 0, INFINITY, 0) == SH_OK);
  CHECK(sh_clock_next_due(c, 0) == -1);
  CHECK(sh_clock_pop_stalled(c, 1e300) == -1);
  CHECK(sh_clock_start(c, 1, 50, 0) == SH_OK);
  CHECK(sh_clock_next_due(c, 0) == 50);
  CHECK(sh_clock_pop_stalled(c, 60) == 1);
  CHECK(sh_clock_next_due(c, 60) == -1);
  CHECK(sh_clock_pause(c, 0) == SH_OK);
  CHECK(sh_clock_resume(c, 0, 70) == SH_OK);
  CHECK(sh_clock_progress(c, 0, 80) == SH_OK);
  CHECK(sh_clock_pop_stalled(c, 1e300) == -1);
  CHECK(sh_clock_stall_ms(c, 0) == INFINITY);
  CHECK(sh_clock_stop(c, 0) == SH_OK);
  CHECK(sh_clock_start(c, 0, 10, 90) == SH_OK); /* the id's old item is re-filed earlier */
  CHECK(sh_clock_pop_stalled(c, 100) == 0);
  CHECK(sh_clock_count(c) == 0);
  CHECK(sh_clock_check(c) == SH_OK);
  sh_clock_free(c);
}

/* A model of what each clock should do, checked against the real thing.
 * Groups are modelled the long way: a touch moves the progress of every
 * clock in the group then, where the core takes the later time lazily. */
static void clock_random_sequences_keep_invariants(void) {
  enum { IDS = 64, STEPS = 20000, GROUPS = 2 };
  double last[IDS], stall[IDS];
  int state[IDS]; /* 0 free, 1 running, 2 paused */
  int group[IDS];
  int round;
  for (round = 0; round < 20; round++) {
    sh_clock *c = sh_clock_new();
    double now = 0;
    int visible = 1, ok = 1, step, joined = 0;
    /* The model of visible time: what was visible before `since`, the time
     * visibility last turned on, and the latest time recorded. From round
     * 10 on the caller's clock also runs back, which must never bring
     * visible time, or any deadline, back with it. */
    double acc = 0, since = 0, high = -HUGE_VAL, vis;
    memset(state, 0, sizeof state);
    for (step = 0; step < IDS; step++) group[step] = -1;
    for (step = 0; step < STEPS && ok; step++) {
      int32_t id = (int32_t)rnd(IDS);
      uint32_t op = rnd(12);
      double dt = rnd(4) == 0 ? (double)rnd(200) : 0;
      if (round >= 10 && rnd(8) == 0) dt = -(double)rnd(400);
      now += dt;
      vis = visible ? acc + (now - since) : acc;
      if (vis < high) vis = high;
      switch (op) {
      case 0:
      case 1:
        if (state[id] == 0) {
          stall[id] = 1 + rnd(500);
          last[id] = high = vis;
          state[id] = 1;
          group[id] = -1;
          ok &= sh_clock_start(c, id, stall[id], now) == SH_OK;
        } else {
          ok &= sh_clock_start(c, id, 10, now) == SH_ESTATE;
        }
        break;
      case 2:
      case 3:
        ok &= sh_clock_progress(c, id, now) == (state[id] ? SH_OK : SH_EINVAL);
        if (state[id]) last[id] = high = vis;
        break;
      case 4:
        ok &= sh_clock_pause(c, id) == (state[id] ? SH_OK : SH_EINVAL);
        if (state[id]) state[id] = 2;
        break;
      case 5:
        ok &= sh_clock_resume(c, id, now) == (state[id] ? SH_OK : SH_EINVAL);
        if (state[id]) state[id] = 1, last[id] = high = vis;
        break;
      case 6:
        ok &= sh_clock_stop(c, id) == (state[id] ? SH_OK : SH_EINVAL);
        state[id] = 0;
        break;
      case 7:
        visible = !visible;
        sh_clock_set_visible(c, visible, now);
        if (visible) {
          since = now;
        } else {
          acc = high = vis;
        }
        break;
      case 8: /* join a group, or leave (-1): touches from now on count */
        group[id] = (int)rnd(GROUPS + 1) - 1;
        ok &= sh_clock_join(c, id, group[id]) == (state[id] ? SH_OK : SH_EINVAL);
        if (state[id] && group[id] >= 0) joined = 1;
        break;
      case 9: {
        int g = (int)rnd(GROUPS), i;
        ok &= sh_clock_touch(c, g, now) == SH_OK;
        if (joined) high = vis; /* (a group nobody ever joined records nothing) */
        for (i = 0; i < IDS; i++)
          if (state[i] && group[i] == g && vis > last[i]) last[i] = vis;
        break;
      }
      default: {
        /* Every id the model says is overdue must come out, in deadline order. */
        int32_t got;
        double prev = -HUGE_VAL; /* (deadlines fall below 0 once the clock runs back) */
        while ((got = sh_clock_pop_stalled(c, now)) >= 0) {
          double due = last[got] + stall[got];
          ok &= state[got] == 1 && due <= vis && due >= prev;

          prev = due;
          state[got] = 0;
        }
        if (visible) {
          int i;
          for (i = 0; i < IDS; i++) ok &= !(state[i] == 1 && last[i] + stall[i] <= vis);
        }
      }
      }
      ok &= sh_clock_check(c) == SH_OK;
      ok &= fabs(sh_clock_visible_time(c, now) - vis) < 1e-9;
    }
    CHECK(ok);
    sh_clock_free(c);
  }
}

/* A caller's clock that runs back (a wall clock set back, a game's own
 * clock reset) counts as no time passing: progress reported "earlier" keeps
 * the deadline it had, and so does a group touched earlier. */
static void clock_running_back_never_brings_a_deadline_forward(void) {
  sh_clock *c = sh_clock_new();
  CHECK(sh_clock_start(c, 1, 1000, 10000) == SH_OK);
  CHECK(sh_clock_progress(c, 1, 0) == SH_OK); /* the clock went back by 10 s */
  CHECK(sh_clock_check(c) == SH_OK);
  CHECK(sh_clock_visible_time(c, 0) == 10000);
  CHECK(sh_clock_pop_stalled(c, 10999) == -1);
  CHECK(sh_clock_pop_stalled(c, 11000) == 1);
  CHECK(sh_clock_start(c, 2, 1000, 20000) == SH_OK);
  CHECK(sh_clock_join(c, 2, 0) == SH_OK);
  CHECK(sh_clock_touch(c, 0, 20500) == SH_OK);
  CHECK(sh_clock_touch(c, 0, 5) == SH_OK);
  CHECK(sh_clock_resume(c, 2, 7) == SH_OK);
  CHECK(sh_clock_check(c) == SH_OK);
  CHECK(sh_clock_pop_stalled(c, 21499) == -1);
  CHECK(sh_clock_pop_stalled(c, 21500) == 2);
  /* A clock that starts below zero is no clock running back. */
  {
    sh_clock *n = sh_clock_new();
    CHECK(sh_clock_start(n, 0, 100, -5000) == SH_OK);
    CHECK(sh_clock_pop_stalled(n, -4901) == -1);
    CHECK(sh_clock_pop_stalled(n, -4900) == 0);
    sh_clock_free(n);
  }
  sh_clock_free(c);
}

static void timers_pop_in_due_then_added_order(void) {
  sh_timers *t = sh_timers_new();
  CHECK(sh_timers_peek(t) == -1);
  sh_timers_add(t, 5, 30);
  sh_timers_add(t, 2, 10);
  sh_timers_add(t, 9, 30);
  sh_timers_add(t, 1, 20);
  CHECK(sh_timers_add(t, 1, 40) == SH_ESTATE);
  CHECK(sh_timers_peek(t) == 10);
  CHECK(sh_timers_pop(t, 9) == -1);
  CHECK(sh_timers_pop(t, 30) == 2);
  CHECK(sh_timers_cancel(t, 1) == SH_OK);
  CHECK(sh_timers_cancel(t, 1) == SH_ESTATE);
  CHECK(sh_timers_pop(t, 30) == 5);
  CHECK(sh_timers_pop(t, 30) == 9);
  CHECK(sh_timers_pop(t, 30) == -1);
  CHECK(sh_timers_count(t) == 0);
  CHECK(sh_timers_add(t, -3, 1) == SH_EINVAL);
  CHECK(sh_timers_add(t, 3, NAN) == SH_EINVAL);
  sh_timers_free(t);
}

static void timers_random_sequences_keep_invariants(void) {
  enum { IDS = 100 };
  double due[IDS];
  int on[IDS];
  int round, ok = 1;
  for (round = 0; round < 20; round++) {
    sh_timers *t = sh_timers_new();
    double now = 0;
    int step;
    memset(on, 0, sizeof on);
    for (step = 0; step < 20000; step++) {
      int32_t id = (int32_t)rnd(IDS);
      switch (rnd(4)) {
      case 0:
        if (!on[id]) {
          due[id] = now + rnd(100);
          on[id] = 1;
          ok &= sh_timers_add(t, id, due[id]) == SH_OK;
        }
        break;
      case 1:
        ok &= sh_timers_cancel(t, id) == (on[id] ? SH_OK : SH_ESTATE);
        on[id] = 0;
        break;
      default: {
        int32_t got;
        double prev = -1;
        now += rnd(10);
        while ((got = sh_timers_pop(t, now)) >= 0) {
          ok &= on[got] && due[got] <= now && due[got] >= prev;
          prev = due[got];
          on[got] = 0;
        }
      }
      }
      ok &= sh_timers_check(t) == SH_OK;
    }
    sh_timers_free(t);
  }
  CHECK(ok);
}

static void clock_groups_count_pool_activity_as_progress(void) {
  sh_clock *c = sh_clock_new();
  sh_clock_start(c, 0, 100, 0);
  sh_clock_start(c, 1, 100, 0);
  CHECK(sh_clock_join(c, 0, 3) == SH_OK);
  CHECK(sh_clock_join(c, 0, SH_MAX_ID) == SH_EINVAL);
  CHECK(sh_clock_join(c, 9, 3) == SH_EINVAL);
  CHECK(sh_clock_touch(c, 3, 80) == SH_OK);
  CHECK(sh_clock_touch(c, -1, 80) == SH_EINVAL);
  CHECK(sh_clock_touch(c, 100, 80) == SH_OK); /* never joined: nothing to do */
  CHECK(sh_clock_pop_stalled(c, 100) == 1);   /* not in the group: stalls */
  CHECK(sh_clock_pop_stalled(c, 179) == -1);  /* the touch at 80 counted */
  CHECK(sh_clock_join(c, 0, -1) == SH_OK);    /* leaving keeps what it gave */
  CHECK(sh_clock_touch(c, 3, 150) == SH_OK);
  CHECK(sh_clock_pop_stalled(c, 180) == 0);
  CHECK(sh_clock_check(c) == SH_OK);
  sh_clock_free(c);
}

/* A group's activity before a clock joined it was no progress of that
 * clock's (a job that asks for a slot just after another was handed one has
 * not advanced); activity after it joined is, at the same reading too. */
static void clock_groups_count_only_activity_after_joining(void) {
  sh_clock *c = sh_clock_new();
  sh_clock_start(c, 0, 100, 0);
  sh_clock_start(c, 1, 100, 0);
  sh_clock_start(c, 2, 100, 0);
  CHECK(sh_clock_join(c, 0, 1) == SH_OK);
  CHECK(sh_clock_touch(c, 1, 90) == SH_OK); /* 0 waits: its progress */
  CHECK(sh_clock_join(c, 1, 1) == SH_OK);   /* 1 joins after it */
  CHECK(sh_clock_check(c) == SH_OK);
  CHECK(sh_clock_pop_stalled(c, 100) == 1); /* 1 made none since 0 */
  CHECK(sh_clock_pop_stalled(c, 100) == 2);
  CHECK(sh_clock_pop_stalled(c, 189) == -1);
  CHECK(sh_clock_pop_stalled(c, 190) == 0);
  sh_clock_start(c, 1, 100, 200);
  sh_clock_start(c, 2, 100, 200);
  CHECK(sh_clock_touch(c, 1, 250) == SH_OK);
  CHECK(sh_clock_join(c, 1, 1) == SH_OK);    /* at the same reading as the touch, after it */
  CHECK(sh_clock_join(c, 2, 1) == SH_OK);
  CHECK(sh_clock_touch(c, 1, 250) == SH_OK); /* now after both joined */
  CHECK(sh_clock_join(c, 1, -1) == SH_OK);   /* 1 leaves with it */
  CHECK(sh_clock_touch(c, 1, 280) == SH_OK); /* only 2 is in the group */
  CHECK(sh_clock_pop_stalled(c, 349) == -1);
  CHECK(sh_clock_pop_stalled(c, 350) == 1);
  CHECK(sh_clock_pop_stalled(c, 379) == -1);
  CHECK(sh_clock_pop_stalled(c, 380) == 2);
  CHECK(sh_clock_check(c) == SH_OK);
  sh_clock_free(c);
}

/* Peeking lists the best waiters in grant order and leaves the queue as
 * it was; a queue changed between peek_next and peek_end stays whole. */
static void pool_peeks_without_granting(void) {
  sh_pool *p = sh_pool_new();
  int32_t i;
  sh_pool_set_capacity(p, 1);
  for (i = 0; i < 6; i++) CHECK(sh_pool_enqueue(p, i, i % 2) == SH_OK);
  CHECK(sh_pool_fix_rank(p, 0, 0.5) == SH_OK);
  CHECK(sh_pool_fix_rank(p, 1, -2.25) == SH_OK); /* (a fraction, lower first) */
  CHECK(sh_pool_set_rank(p, 1, 0.0 / 0.0) == SH_EINVAL);
  CHECK(sh_pool_peek_next(p) == 1 && sh_pool_peek_next(p) == 3 && sh_pool_peek_next(p) == 5);
  CHECK(sh_pool_peek_next(p) == 0 && sh_pool_waiting(p) == 2);
  CHECK(sh_pool_peek_end(p) == SH_OK);
  CHECK(sh_pool_waiting(p) == 6 && sh_pool_check(p) == SH_OK);
  CHECK(sh_pool_best(p) == 1 && sh_pool_rank_of(p, 3) == -2.25);
  CHECK(sh_pool_peek_next(p) == 1);
  CHECK(sh_pool_enqueue(p, 1, 0) == SH_OK); /* (queued again meanwhile: it stays where it is) */
  CHECK(sh_pool_peek_next(p) == 3);
  CHECK(sh_pool_peek_end(p) == SH_OK && sh_pool_check(p) == SH_OK);
  CHECK(sh_pool_waiting(p) == 6 && sh_pool_best(p) == 3 && sh_pool_group_of(p, 1) == 0);
  CHECK(sh_pool_peek_end(NULL) == SH_EINVAL && sh_pool_peek_next(NULL) == -1);
  sh_pool_free(p);
}

static void pool_grants_by_rank_then_arrival(void) {
  sh_pool *p = sh_pool_new();
  int32_t g;
  CHECK(sh_pool_set_capacity(p, 1) == SH_OK);
  CHECK(sh_pool_try_acquire(p) == SH_OK);
  CHECK(sh_pool_try_acquire(p) == SH_ESTATE);
  CHECK(sh_pool_enqueue(p, 10, 2) == SH_OK); /* background */
  CHECK(sh_pool_enqueue(p, 11, 1) == SH_OK); /* scene */
  CHECK(sh_pool_enqueue(p, 12, 2) == SH_OK);
  CHECK(sh_pool_enqueue(p, 13, 0) == SH_OK); /* visible */
  CHECK(sh_pool_enqueue(p, 13, 0) == SH_ESTATE);
  CHECK(sh_pool_waiting(p) == 4);
  for (g = sh_pool_next_group(p, -1); g >= 0; g = sh_pool_next_group(p, g)) sh_pool_set_rank(p, g, g + 1);
  CHECK(sh_pool_best(p) == 13);
  CHECK(sh_pool_grant(p, 13) == SH_ESTATE); /* no free slot */
  CHECK(sh_pool_release(p) == SH_OK);
  CHECK(sh_pool_grant(p, 13) == SH_OK);
  CHECK(sh_pool_in_use(p) == 1);
  CHECK(sh_pool_release(p) == SH_OK);
  CHECK(sh_pool_best(p) == 11);
  sh_pool_set_rank(p, 2, 0); /* a priority function now says visible */
  CHECK(sh_pool_best(p) == 10);
  CHECK(sh_pool_rank_of(p, 12) == 0);
  CHECK(sh_pool_arrival(p, 10) < sh_pool_arrival(p, 12));
  CHECK(sh_pool_remove(p, 10) == SH_OK);
  CHECK(sh_pool_remove(p, 10) == SH_ESTATE);
  CHECK(sh_pool_best(p) == 12);
  CHECK(sh_pool_set_capacity(p, 0) == SH_OK); /* holds everyone */
  CHECK(sh_pool_grant(p, 12) == SH_ESTATE);
  CHECK(sh_pool_set_capacity(p, -1) == SH_EINVAL);
  CHECK(sh_pool_reset_use(p) == SH_OK);
  CHECK(sh_pool_release(p) == SH_ESTATE);
  CHECK(sh_pool_enqueue(p, -1, 0) == SH_EINVAL);
  CHECK(sh_pool_enqueue(p, 1, SH_MAX_ID) == SH_EINVAL);
  CHECK(sh_pool_check(p) == SH_OK);
  sh_pool_free(p);
  sh_pool_free(NULL);
}

/* A waiter whose set of priority sources changes moves to another group and
 * keeps its arrival: it is filed among that group's waiters in arrival
 * order, wherever that falls. */
static void pool_move_keeps_arrival(void) {
  sh_pool *p = sh_pool_new();
  int32_t id;
  CHECK(sh_pool_set_capacity(p, 0) == SH_OK);
  for (id = 0; id < 6; id++) CHECK(sh_pool_enqueue(p, id, id % 2) == SH_OK); /* 0 2 4 in 0; 1 3 5 in 1 */
  sh_pool_set_rank(p, 0, 1);
  sh_pool_set_rank(p, 1, 2);
  CHECK(sh_pool_move(p, 5, 0) == SH_OK); /* after 4: the tail */
  CHECK(sh_pool_move(p, 3, 0) == SH_OK); /* between 2 and 4 */
  CHECK(sh_pool_move(p, 1, 0) == SH_OK); /* between 0 and 2; group 1 empties */
  CHECK(sh_pool_group_of(p, 1) == 0);
  CHECK(sh_pool_next_group(p, -1) == 0 && sh_pool_next_group(p, 0) == -1);
  CHECK(sh_pool_check(p) == SH_OK);
  CHECK(sh_pool_set_capacity(p, 6) == SH_OK);
  for (id = 0; id < 6; id++) {
    CHECK(sh_pool_best(p) == id);
    CHECK(sh_pool_grant(p, id) == SH_OK);
  }
  CHECK(sh_pool_enqueue(p, 7, 3) == SH_OK);
  CHECK(sh_pool_enqueue(p, 8, 3) == SH_OK);
  CHECK(sh_pool_move(p, 8, 2) == SH_OK);
  CHECK(sh_pool_move(p, 7, 2) == SH_OK); /* ahead of 8: the head */
  CHECK(sh_pool_move(p, 7, 2) == SH_OK); /* already there: nothing moves */
  CHECK(sh_pool_check(p) == SH_OK);
  CHECK(sh_pool_set_capacity(p, 7) == SH_OK);
  CHECK(sh_pool_best(p) == 7);
  CHECK(sh_pool_move(p, 6, 2) == SH_ESTATE);  /* not waiting */
  CHECK(sh_pool_move(p, -1, 2) == SH_ESTATE);
  CHECK(sh_pool_move(p, 7, -1) == SH_EINVAL);
  CHECK(sh_pool_move(p, 7, SH_MAX_ID) == SH_EINVAL);
  CHECK(sh_pool_move(NULL, 7, 1) == SH_EINVAL);
  CHECK(sh_pool_group_of(p, 6) == -1);
  CHECK(sh_pool_check(p) == SH_OK);
  sh_pool_free(p);
}

/* A group id given back forgets its rank and that the rank was fixed, so
 * it can name a live source next; an id with waiters is refused. */
static void pool_forget_group_resets_the_id(void) {
  sh_pool *p = sh_pool_new();
  CHECK(sh_pool_set_capacity(p, 0) == SH_OK);
  CHECK(sh_pool_fix_rank(p, 2, 1) == SH_OK);
  CHECK(sh_pool_enqueue(p, 0, 2) == SH_OK);
  CHECK(sh_pool_forget_group(p, 2) == SH_ESTATE); /* still has a waiter */
  CHECK(sh_pool_next_live(p, -1) == -1);          /* and is still fixed */
  CHECK(sh_pool_remove(p, 0) == SH_OK);
  CHECK(sh_pool_forget_group(p, 2) == SH_OK);
  CHECK(sh_pool_enqueue(p, 1, 2) == SH_OK);
  CHECK(sh_pool_next_live(p, -1) == 2); /* no longer fixed: read live again */
  CHECK(sh_pool_rank_of(p, 1) == 0);
  CHECK(sh_pool_forget_group(p, 1000) == SH_OK); /* never used: nothing to forget */
  CHECK(sh_pool_forget_group(p, -1) == SH_EINVAL);
  CHECK(sh_pool_forget_group(p, SH_MAX_ID) == SH_EINVAL);
  CHECK(sh_pool_forget_group(NULL, 1) == SH_EINVAL);
  CHECK(sh_pool_check(p) == SH_OK);
  sh_pool_free(p);
}

/* grantable: how many waiters a grant could serve now. */
static void pool_grantable_counts_free_slots_and_waiters(void) {
  sh_pool *p = sh_pool_new();
  int32_t id;
  CHECK(sh_pool_grantable(p) == 0);
  CHECK(sh_pool_set_capacity(p, 3) == SH_OK);
  CHECK(sh_pool_grantable(p) == 0); /* free slots, nobody waiting */
  for (id = 0; id < 5; id++) CHECK(sh_pool_enqueue(p, id, id % 2) == SH_OK);
  CHECK(sh_pool_grantable(p) == 3);
  CHECK(sh_pool_grant(p, 0) == SH_OK);
  CHECK(sh_pool_grant(p, 1) == SH_OK);
  CHECK(sh_pool_grantable(p) == 1);
  CHECK(sh_pool_set_capacity(p, 1) == SH_OK); /* below the count in use */
  CHECK(sh_pool_grantable(p) == 0);
  CHECK(sh_pool_set_capacity(p, 100) == SH_OK);
  CHECK(sh_pool_grantable(p) == 3); /* all three left waiting */
  CHECK(sh_pool_fix_rank(p, -1, 1) == SH_EINVAL);
  CHECK(sh_pool_fix_rank(NULL, 0, 1) == SH_EINVAL);
  CHECK(sh_pool_fix_rank(p, 9, 2) == SH_OK); /* a group with no waiter yet */
  CHECK(sh_pool_next_live(NULL, -1) == -1);
  CHECK(sh_pool_grantable(NULL) == 0);
  CHECK(sh_pool_check(p) == SH_OK);
  sh_pool_free(p);
}

/* Random sequences against a model: the best waiter is the lowest rank,
 * then the earliest arrival, and every structure stays consistent. Even
 * groups have fixed ranks (told at each enqueue, as the Lua side does);
 * only the odd ones are walked by next_live and read again. */
/* Each epoch hands out every active group whose rank is not fixed once,
 * and a group that turns active later in the epoch once more; a group set
 * in the epoch is not handed out again. */
static void pool_unread_groups_once_an_epoch(void) {
  sh_pool *p = sh_pool_new();
  int32_t g, seen[8] = {0};
  int n = 0;
  CHECK(sh_pool_next_unread(NULL) == -1);
  CHECK(sh_pool_new_reads(NULL) == SH_EINVAL);
  sh_pool_set_capacity(p, 0);
  CHECK(sh_pool_fix_rank(p, 0, 1) == SH_OK);
  CHECK(sh_pool_enqueue(p, 0, 0) == SH_OK); /* fixed: never handed out */
  CHECK(sh_pool_enqueue(p, 1, 1) == SH_OK);
  CHECK(sh_pool_enqueue(p, 2, 2) == SH_OK);
  CHECK(sh_pool_enqueue(p, 3, 2) == SH_OK);
  CHECK(sh_pool_new_reads(p) == SH_OK);
  while ((g = sh_pool_next_unread(p)) >= 0) {
    seen[g]++;
    n++;
    CHECK(sh_pool_set_rank(p, g, g == 2 ? 0 : 5) == SH_OK);
  }
  CHECK(n == 2 && seen[1] == 1 && seen[2] == 1);
  CHECK(sh_pool_best(p) == 2); /* group 2 ranks 0: best, its oldest first */
  CHECK(sh_pool_enqueue(p, 4, 3) == SH_OK); /* turns active in the epoch */
  CHECK(sh_pool_next_unread(p) == 3);
  CHECK(sh_pool_next_unread(p) == -1);
  CHECK(sh_pool_set_rank(p, 3, -1) == SH_OK);
  CHECK(sh_pool_best(p) == 4);
  CHECK(sh_pool_remove(p, 4) == SH_OK);
  CHECK(sh_pool_enqueue(p, 4, 3) == SH_OK); /* read this epoch: not again */
  CHECK(sh_pool_next_unread(p) == -1);
  CHECK(sh_pool_new_reads(p) == SH_OK);
  n = 0;
  while ((g = sh_pool_next_unread(p)) >= 0) {
    n++;
    CHECK(sh_pool_set_rank(p, g, 3) == SH_OK);
  }
  CHECK(n == 3);
  CHECK(sh_pool_best(p) == 0); /* the fixed 1 beats every 3 */
  CHECK(sh_pool_check(p) == SH_OK);
  sh_pool_free(p);
}

static void pool_random_sequences_keep_invariants(void) {
  enum { IDS = 80, GROUPS = 6 };
  int round, ok = 1;
  for (round = 0; round < 20; round++) {
    sh_pool *p = sh_pool_new();
    int in[IDS], grp[IDS], rank[GROUPS], step, i;
    uint64_t order[IDS], clock = 0;
    memset(in, 0, sizeof in);
    for (i = 0; i < GROUPS; i++) rank[i] = (int)rnd(3);
    sh_pool_set_capacity(p, 1000);
    for (step = 0; step < 20000 && ok; step++) {
      int32_t id = (int32_t)rnd(IDS);
      switch (rnd(5)) {
      case 0:
      case 1:
        if (!in[id]) {
          grp[id] = (int)rnd(GROUPS);
          in[id] = 1;
          order[id] = ++clock;
          ok &= sh_pool_enqueue(p, id, grp[id]) == SH_OK;
          if (grp[id] % 2 == 0) ok &= sh_pool_fix_rank(p, grp[id], rank[grp[id]]) == SH_OK;
        }
        break;
      case 2:
        ok &= sh_pool_remove(p, id) == (in[id] ? SH_OK : SH_ESTATE);
        in[id] = 0;
        break;
      case 3: {
        int g = (int)rnd(GROUPS);
        if (g % 2) rank[g] = (int)rnd(3); /* a fixed rank never changes */
        break;
      }
      default: {
        int32_t g, best, want = -1;
        int live = 0, active_live = 0, seen[GROUPS] = {0};
        for (g = sh_pool_next_live(p, -1); g >= 0; g = sh_pool_next_live(p, g)) {
          ok &= g % 2 == 1 && !seen[g];
          seen[g] = 1;
          sh_pool_set_rank(p, g, rank[g]);
          live++;
        }
        for (i = 0; i < GROUPS; i++) {
          int j, any = 0;
          for (j = 0; j < IDS; j++) any |= in[j] && grp[j] == i;
          active_live += any && i % 2;
        }
        ok &= live == active_live;
        for (i = 0; i < IDS; i++)
          if (in[i] && (want < 0 || rank[grp[i]] < rank[grp[want]] ||
                        (rank[grp[i]] == rank[grp[want]] && order[i] < order[want])))
            want = i;
        best = sh_pool_best(p);
        ok &= best == want;
        if (best >= 0) {
          ok &= sh_pool_grant(p, best) == SH_OK;
          sh_pool_release(p);
          in[best] = 0;
        }
      }
      }
      ok &= sh_pool_check(p) == SH_OK;
    }
    sh_pool_free(p);
  }
  CHECK(ok);
}

static void barrier_counts_each_index_once(void) {
  sh_barrier *b = sh_barrier_new(4);
  CHECK(sh_barrier_size(b) == 4);
  CHECK(sh_barrier_arrive(b, 2) == 1);
  CHECK(sh_barrier_arrive(b, 2) == 0);
  CHECK(sh_barrier_arrive(b, 4) == SH_EINVAL);
  CHECK(sh_barrier_arrive(b, -1) == SH_EINVAL);
  CHECK(sh_barrier_arrived(b) == 1);
  CHECK(sh_barrier_next_missing(b, -1) == 0);
  CHECK(sh_barrier_next_missing(b, 1) == 3);
  sh_barrier_arrive(b, 0);
  sh_barrier_arrive(b, 1);
  sh_barrier_arrive(b, 3);
  CHECK(sh_barrier_arrived(b) == 4);
  CHECK(sh_barrier_next_missing(b, -1) == -1);
  sh_barrier_free(b);
  b = sh_barrier_new(0);
  CHECK(b != NULL && sh_barrier_size(b) == 0 && sh_barrier_next_missing(b, -1) == -1);
  sh_barrier_free(b);
  CHECK(sh_barrier_new(-1) == NULL);
}

static void sys_reports_time_and_cores(void) {
  double a = sh_now_ms(), b;
  sh_sleep_ms(2);
  b = sh_now_ms();
  CHECK(b - a >= 2);
  CHECK(sh_cores() >= 1);
}

/* Every input the fuzzer kept (csrc/test/corpus) replays here on every run. */
static void ids_hand_out_the_lowest_free(void) {
  sh_ids *s = sh_ids_new();
  int32_t i;
  CHECK(s != NULL);
  for (i = 0; i < 200; i++) CHECK(sh_ids_take(s) == i);
  /* Given back out of order (as a wave of jobs ends): handed out again
   * lowest first, then past the highest ever taken. */
  CHECK(sh_ids_give(s, 150) == SH_OK);
  CHECK(sh_ids_give(s, 3) == SH_OK);
  CHECK(sh_ids_give(s, 64) == SH_OK);
  CHECK(sh_ids_give(s, 63) == SH_OK);
  CHECK(sh_ids_count(s) == 196);
  CHECK(sh_ids_check(s) == SH_OK);
  CHECK(sh_ids_take(s) == 3);
  CHECK(sh_ids_take(s) == 63);
  CHECK(sh_ids_take(s) == 64);
  CHECK(sh_ids_take(s) == 150);
  CHECK(sh_ids_take(s) == 200);
  CHECK(sh_ids_count(s) == 201);
  CHECK(sh_ids_check(s) == SH_OK);
  sh_ids_free(s);
}

static void ids_refuse_bad_input(void) {
  sh_ids *s = sh_ids_new();
  CHECK(sh_ids_give(s, 0) == SH_EINVAL); /* never taken */
  CHECK(sh_ids_take(s) == 0);
  CHECK(sh_ids_give(s, 1) == SH_EINVAL);
  CHECK(sh_ids_give(s, -1) == SH_EINVAL);
  CHECK(sh_ids_give(s, SH_MAX_ID) == SH_EINVAL);
  CHECK(sh_ids_give(s, 0) == SH_OK);
  CHECK(sh_ids_give(s, 0) == SH_ESTATE); /* given back twice */
  CHECK(sh_ids_count(s) == 0);
  CHECK(sh_ids_check(s) == SH_OK);
  CHECK(sh_ids_take(NULL) == SH_EINVAL);
  CHECK(sh_ids_give(NULL, 0) == SH_EINVAL);
  CHECK(sh_ids_count(NULL) == 0);
  CHECK(sh_ids_check(NULL) == SH_EINVAL);
  sh_ids_free(NULL);
  sh_ids_free(s);
}

/* Every id up to SH_MAX_ID, then none: the last level's words all fill. */
static void ids_run_out_at_the_limit(void) {
  sh_ids *s = sh_ids_new();
  int32_t i, ok = 1;
  for (i = 0; i < SH_MAX_ID && ok; i++) ok = sh_ids_take(s) == i;
  CHECK(ok);
  CHECK(sh_ids_take(s) == SH_ESTATE);
  CHECK(sh_ids_give(s, SH_MAX_ID - 1) == SH_OK);
  CHECK(sh_ids_give(s, 4097 * 64 + 5) == SH_OK);
  CHECK(sh_ids_take(s) == 4097 * 64 + 5);
  CHECK(sh_ids_take(s) == SH_MAX_ID - 1);
  CHECK(sh_ids_take(s) == SH_ESTATE);
  CHECK(sh_ids_count(s) == SH_MAX_ID);
  CHECK(sh_ids_check(s) == SH_OK);
  sh_ids_free(s);
}

static void ids_random_sequences_match_a_model(void) {
  enum { MAXN = 20000 };
  static unsigned char taken[MAXN];
  int round, ok = 1;
  for (round = 0; round < 10 && ok; round++) {
    sh_ids *s = sh_ids_new();
    int32_t high = 0, count = 0, step;
    int32_t span = round < 5 ? 300 : MAXN; /* small: words fill and empty often */
    memset(taken, 0, sizeof taken);
    for (step = 0; step < 40000 && ok; step++) {
      if (rnd(2) == 0 && count < span) {
        int32_t want = 0;
        while (want < high && taken[want]) want++;
        ok &= sh_ids_take(s) == want;
        taken[want] = 1;
        if (want == high) high++;
        count++;
      } else {
        int32_t id = (int32_t)rnd((uint32_t)high + 2);
        int rc = sh_ids_give(s, id);
        ok &= rc == (id >= high ? SH_EINVAL : taken[id] ? SH_OK : SH_ESTATE);
        if (rc == SH_OK) {
          taken[id] = 0;
          count--;
        }
      }
      ok &= sh_ids_count(s) == count;
      if (step % 97 == 0) ok &= sh_ids_check(s) == SH_OK;
    }
    ok &= sh_ids_check(s) == SH_OK;
    sh_ids_free(s);
  }
  CHECK(ok);
}

/* Debug builds check a structure after every change while it is small,
 * and after one change in n / SH__CHECK_EVERY when it holds n entries. */
static void debug_checks_cost_a_bounded_share_of_changes(void) {
  sh__checks k = {0, 0};
  int i, due = 0;
  for (i = 0; i < 1000; i++) due += sh__check_due(&k, SH__CHECK_EVERY);
  CHECK(due == 1000); /* small: every change */
  due = 0;
  for (i = 0; i < 10000; i++) due += sh__check_due(&k, 100 * SH__CHECK_EVERY);
  CHECK(due == 100); /* 6,400 entries: one change in 100 */
  due = 0;
  for (i = 0; i < 100; i++) due += sh__check_due(&k, 1);
  CHECK(due >= 1); /* shrunk: checked again within the old interval */
  due = 0;
  for (i = 0; i < 50; i++) due += sh__check_due(&k, 1);
  CHECK(due == 50); /* and then at every change */
}

static void fuzz_corpus_replays(void) {
  DIR *dir = opendir(CORPUS_DIR);
  struct dirent *e;
  int files = 0;
  if (!dir) {
    CHECK(!"the fuzz corpus directory is missing");
    return;
  }
  while ((e = readdir(dir)) != NULL) {
    char path[4096];
    FILE *f;
    uint8_t buf[65536];
    size_t n;
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "%s/%s", CORPUS_DIR, e->d_name);
    f = fopen(path, "rb");
    if (!f) continue;
    n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    sh_fuzz_one(buf, n); /* aborts on a broken invariant */
    files++;
  }
  closedir(dir);
  CHECK(files > 0);
}

int main(void) {
  clock_stalls_after_its_time();
  clock_progress_defers_without_reordering();
  clock_ties_stall_in_start_order();
  clock_ties_stall_in_start_order_whenever_checked();
  clock_hidden_time_never_counts();
  clock_paused_never_stalls_and_resume_is_progress();
  clock_stopped_ids_restart_on_their_new_deadline();
  clock_restarted_ids_stall_in_start_order();
  cores_grow_into_the_arrays_freed_cores_kept();
  clock_refuses_bad_input();
  clock_of_infinity_never_stalls();
  clock_random_sequences_keep_invariants();
  clock_running_back_never_brings_a_deadline_forward();
  timers_pop_in_due_then_added_order();
  timers_random_sequences_keep_invariants();
  clock_groups_count_pool_activity_as_progress();
  clock_groups_count_only_activity_after_joining();
  pool_grants_by_rank_then_arrival();
  pool_peeks_without_granting();
  pool_move_keeps_arrival();
  pool_forget_group_resets_the_id();
  pool_grantable_counts_free_slots_and_waiters();
  pool_unread_groups_once_an_epoch();
  pool_random_sequences_keep_invariants();
  barrier_counts_each_index_once();
  ids_hand_out_the_lowest_free();
  ids_refuse_bad_input();
  ids_run_out_at_the_limit();
  ids_random_sequences_match_a_model();
  debug_checks_cost_a_bounded_share_of_changes();
  fuzz_corpus_replays();
  sys_reports_time_and_cores();
  printf("c: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
