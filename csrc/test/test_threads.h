#ifndef SH_TEST_THREADS_H
#define SH_TEST_THREADS_H
/* What the threads' C tests share: the counts under their lock, CHECK,
 * messages of one int, and the work queues' tests (test_work.c) that
 * test_threads.c's main runs. */
#include "../core/sh_grow.h"
#include "../core/sh_threads.h"
#include "../core/stagehand.h"

#include "../platform/sh_platform.h"
#if defined(_WIN32)
#include <winsock2.h>
#else
#include <poll.h>
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


extern int passed, failed;
extern sh__mutex count_mu;

#define CHECK(cond)                                                                            \
  do {                                                                                         \
    int ok_ = (cond) ? 1 : 0;                                                                  \
    sh__mutex_lock(&count_mu);                                                             \
    if (ok_) passed++;                                                                         \
    else {                                                                                     \
      failed++;                                                                                \
      fprintf(stderr, "%s:%d: %s: check failed: %s\n", __FILE__, __LINE__, __func__, #cond); \
    }                                                                                          \
    sh__mutex_unlock(&count_mu);                                                           \
  } while (0)

sh_msg *int_msg(int v);
int msg_int(const sh_msg *m);
void work_queues_give_held_requests_only_as_offered(void);
void work_queues_run_by_priority_and_report_everything(void);
void work_queues_keep_priority_then_arrival_order(void);
void work_queues_take_from_several_pushing_threads(void);
void work_queues_wake_a_sleeping_worker(void);
void work_queues_wake_as_many_workers_as_offered(void);
void work_queues_free_what_was_never_taken(void);
void work_queues_grow_into_what_a_freed_queue_kept(void);
void work_queues_drop_only_the_start_of_a_request_that_ended(void);
void cores_freed_on_several_threads_keep_their_arrays(void);
void timed_waits_sleep_their_time(void);

#endif
