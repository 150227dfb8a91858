/*
 * C unit tests for the core's structures: stall clocks and timers, with
 * their invariants checked after every step of long random sequences.
 * Prints "N passed, N failed" and exits non-zero on any failure.
 */
#include "test_core.h"

int passed, failed;


static uint64_t rng_state = 88172645463325252ull;
uint32_t rnd(uint32_t n) {
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
  /* a growth whose size in bytes overflows is refused, not wrapped to a
   * small block that later writes run past */
  {
    size_t got = 0;
    CHECK(sh__grow_kept(NULL, 0, SIZE_MAX / 8 + 2, 8, 0, &got) == NULL);
    CHECK(sh__grow_kept(NULL, 0, 4, 0, 0, &got) == NULL);
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
  pool_reread_hands_a_group_out_again();
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
