#ifndef SH_TEST_CORE_H
#define SH_TEST_CORE_H
/* What the core's C tests share: the counts, CHECK, a seeded random
 * number, and the tests test_pool.c holds for test_core.c's main. */
#include "../core/sh_checks.h"
#include "../core/sh_grow.h"
#include "../core/stagehand.h"
#include "fuzz_core.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


extern int passed, failed;

#define CHECK(cond)                                                                   \
  do {                                                                                \
    if (cond) {                                                                       \
      passed++;                                                                       \
    } else {                                                                          \
      failed++;                                                                       \
      fprintf(stderr, "%s:%d: %s: check failed: %s\n", __FILE__, __LINE__, __func__, #cond); \
    }                                                                                 \
  } while (0)

uint32_t rnd(uint32_t n);
void pool_peeks_without_granting(void);
void pool_grants_by_rank_then_arrival(void);
void pool_move_keeps_arrival(void);
void pool_forget_group_resets_the_id(void);
void pool_grantable_counts_free_slots_and_waiters(void);
void pool_unread_groups_once_an_epoch(void);
void pool_reread_hands_a_group_out_again(void);
void pool_random_sequences_keep_invariants(void);
void barrier_counts_each_index_once(void);
void sys_reports_time_and_cores(void);
void ids_hand_out_the_lowest_free(void);
void ids_refuse_bad_input(void);
void ids_run_out_at_the_limit(void);
void ids_random_sequences_match_a_model(void);
void debug_checks_cost_a_bounded_share_of_changes(void);
void fuzz_corpus_replays(void);

#endif
