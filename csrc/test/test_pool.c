/*
 * C unit tests for the core's slot pools, key barriers, job ids, the debug
 * checks' cost and the fuzz corpus (run by test_core.c's main).
 */
#include "test_core.h"

#if defined(_WIN32)
#include <windows.h> /* (MSVC has no <dirent.h>: FindFirstFile lists a folder) */
#else
#include <dirent.h>
#endif

/* Peeking lists the best waiters in grant order and leaves the queue as
 * it was; a queue changed between peek_next and peek_end stays whole. */
void pool_peeks_without_granting(void) {
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

void pool_grants_by_rank_then_arrival(void) {
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
void pool_move_keeps_arrival(void) {
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
void pool_forget_group_resets_the_id(void) {
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
void pool_grantable_counts_free_slots_and_waiters(void) {
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

/* Each epoch hands out every active group whose rank is not fixed once,
 * and a group that turns active later in the epoch once more; a group set
 * in the epoch is not handed out again. */
void pool_unread_groups_once_an_epoch(void) {
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

/* A group whose sources changed under its waiters (a set changed in place)
 * is handed out again in the epoch that already read it, once, and its new
 * rank moves it; one with no waiters is handed out when one comes. */
void pool_reread_hands_a_group_out_again(void) {
  sh_pool *p = sh_pool_new();
  int32_t g;
  CHECK(sh_pool_reread(NULL, 1) == SH_EINVAL);
  CHECK(sh_pool_reread(p, -1) == SH_EINVAL);
  CHECK(sh_pool_reread(p, SH_MAX_ID) == SH_EINVAL);
  CHECK(sh_pool_reread(p, 500) == SH_OK); /* never used: nothing to read */
  CHECK(sh_pool_enqueue(p, 0, 1) == SH_OK); /* group 1: arrived first */
  CHECK(sh_pool_enqueue(p, 1, 2) == SH_OK);
  CHECK(sh_pool_new_reads(p) == SH_OK);
  while ((g = sh_pool_next_unread(p)) >= 0) CHECK(sh_pool_set_rank(p, g, g == 1 ? 5 : 3) == SH_OK);
  CHECK(sh_pool_best(p) == 1); /* group 2 ranks 3 */
  CHECK(sh_pool_reread(p, 1) == SH_OK);
  CHECK(sh_pool_reread(p, 1) == SH_OK); /* (stacked once) */
  CHECK(sh_pool_check(p) == SH_OK);
  CHECK(sh_pool_next_unread(p) == 1);
  CHECK(sh_pool_next_unread(p) == -1);
  CHECK(sh_pool_set_rank(p, 1, 0) == SH_OK);
  CHECK(sh_pool_best(p) == 0); /* raised past group 2 */
  CHECK(sh_pool_fix_rank(p, 3, 1) == SH_OK);
  CHECK(sh_pool_enqueue(p, 2, 3) == SH_OK);
  CHECK(sh_pool_reread(p, 3) == SH_OK);
  CHECK(sh_pool_next_unread(p) == -1); /* a fixed rank is never read */
  CHECK(sh_pool_remove(p, 1) == SH_OK); /* group 2 has no waiter now */
  CHECK(sh_pool_reread(p, 2) == SH_OK);
  CHECK(sh_pool_next_unread(p) == -1);
  CHECK(sh_pool_enqueue(p, 1, 2) == SH_OK);
  CHECK(sh_pool_next_unread(p) == 2); /* read when a waiter came */
  CHECK(sh_pool_check(p) == SH_OK);
  sh_pool_free(p);
}

/* Random sequences against a model: the best waiter is the lowest rank,
 * then the earliest arrival, and every structure stays consistent. Even
 * groups have fixed ranks (told at each enqueue, as the Lua side does);
 * only the odd ones are walked by next_live and read again. */
void pool_random_sequences_keep_invariants(void) {
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

void barrier_counts_each_index_once(void) {
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

void sys_reports_time_and_cores(void) {
  double a = sh_now_ms(), b;
  sh_sleep_ms(2);
  b = sh_now_ms();
  CHECK(b - a >= 2);
  CHECK(sh_cores() >= 1);
}

/* Every input the fuzzer kept (csrc/test/corpus) replays here on every run. */
void ids_hand_out_the_lowest_free(void) {
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

void ids_refuse_bad_input(void) {
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
void ids_run_out_at_the_limit(void) {
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

void ids_random_sequences_match_a_model(void) {
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
void debug_checks_cost_a_bounded_share_of_changes(void) {
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

/* Replays one file of the corpus; 0 when it cannot be read. */
static int replay_corpus_file(const char *name) {
  char path[4096];
  FILE *f;
  static uint8_t buf[65536];
  size_t n;
  if (name[0] == '.') return 0;
  snprintf(path, sizeof path, "%s/%s", CORPUS_DIR, name);
  f = fopen(path, "rb");
  if (!f) return 0;
  n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  sh_fuzz_one(buf, n); /* aborts on a broken invariant */
  return 1;
}

void fuzz_corpus_replays(void) {
  int files = 0;
#if defined(_WIN32)
  WIN32_FIND_DATAA e;
  HANDLE dir = FindFirstFileA(CORPUS_DIR "/*", &e);
  CHECK(dir != INVALID_HANDLE_VALUE); /* (the fuzz corpus's folder is there) */
  if (dir == INVALID_HANDLE_VALUE) return;
  do files += replay_corpus_file(e.cFileName);
  while (FindNextFileA(dir, &e));
  FindClose(dir);
#else
  DIR *dir = opendir(CORPUS_DIR);
  struct dirent *e;
  CHECK(dir != NULL); /* (the fuzz corpus's folder is there) */
  if (!dir) return;
  while ((e = readdir(dir)) != NULL) files += replay_corpus_file(e->d_name);
  closedir(dir);
#endif
  CHECK(files > 0);
}
