#include "fuzz_core.h"
#include "../core/stagehand.h"

#include <stdio.h>
#include <stdlib.h>

#define IDS 32
#define GROUPS 4

static void fail(const char *what, size_t at) {
  fprintf(stderr, "fuzz: %s (operation at byte %zu)\n", what, at);
  abort();
}

int sh_fuzz_one(const uint8_t *d, size_t n) {
  sh_clock *c = sh_clock_new();
  sh_timers *t = sh_timers_new();
  sh_pool *p = sh_pool_new();
  sh_barrier *b = sh_barrier_new(8);
  sh_ids *ids = sh_ids_new();
  unsigned char taken[256] = {0}; /* (at most 170 operations in 512 bytes) */
  int32_t high = 0;
  double now = 0;
  int waiting[IDS] = {0}, ranks[GROUPS] = {0};
  int group_of[IDS] = {0};
  size_t i = 0;
  if (!c || !t || !p || !b || !ids) fail("out of memory", 0);
  sh_pool_set_capacity(p, 2);
  sh_pool_fix_rank(p, 0, ranks[0]); /* group 0's rank is fixed: told, never read back */
  while (i + 2 < n) {
    uint8_t op = d[i], a = d[i + 1], v = d[i + 2];
    int32_t id = (int32_t)(a % IDS);
    size_t at = i;
    i += 3;
    switch (op % 16) {
    case 0: sh_clock_start(c, id, 1 + v, now); break;
    case 1: sh_clock_progress(c, id, now); break;
    case 2: sh_clock_pause(c, id); break;
    case 3: sh_clock_resume(c, id, now); break;
    case 4: sh_clock_stop(c, id); break;
    case 5: sh_clock_set_visible(c, v & 1, now); break;
    case 6: now += v & 0x80 ? -(double)(v & 0x7f) : v; break; /* (a caller's clock may run back) */
    case 7: {
      int32_t s;
      double prev = -1;
      while ((s = sh_clock_pop_stalled(c, now)) >= 0) {
        double st = sh_clock_stall_ms(c, s);
        if (s >= IDS || st <= 0) fail("pop_stalled gave a bad id", at);
        (void)prev;
      }
      break;
    }
    case 8: sh_clock_join(c, id, (int32_t)(v % 3) - 1); break;
    case 9: sh_clock_touch(c, (int32_t)(v % 2), now); break;
    case 10: sh_timers_add(t, id, now + v); break;
    case 11: {
      int32_t s;
      while ((s = sh_timers_pop(t, now)) >= 0)
        if (s >= IDS) fail("timers_pop gave a bad id", at);
      break;
    }
    case 12:
      if (!waiting[id]) {
        group_of[id] = v % GROUPS;
        if (sh_pool_enqueue(p, id, group_of[id]) != SH_OK) fail("enqueue refused a fresh id", at);
        waiting[id] = 1;
      } else if (sh_pool_enqueue(p, id, 0) != SH_ESTATE) {
        fail("enqueue took an id twice", at);
      } else if (v & 0x80) { /* its set of sources changed: another group, same arrival */
        double arrival = sh_pool_arrival(p, id);
        group_of[id] = v % GROUPS;
        if (sh_pool_move(p, id, group_of[id]) != SH_OK) fail("move refused a waiting id", at);
        if (sh_pool_arrival(p, id) != arrival) fail("move changed an arrival", at);
        if (sh_pool_group_of(p, id) != group_of[id]) fail("group_of disagreed with the model", at);
      }
      break;
    case 13:
      if (v & 0x80) { /* a group id given back: refused while it has waiters */
        int32_t g = 1 + (int32_t)(v % (GROUPS - 1)), k, busy = 0; /* (group 0 stays fixed) */
        for (k = 0; k < IDS; k++) busy |= waiting[k] && group_of[k] == g;
        if (sh_pool_forget_group(p, g) != (busy ? SH_ESTATE : SH_OK)) fail("forget_group disagreed with the model", at);
        break;
      }
      if (!waiting[id] && sh_pool_move(p, id, v % GROUPS) != SH_ESTATE) fail("move took an id not waiting", at);
      if (sh_pool_remove(p, id) != (waiting[id] ? SH_OK : SH_ESTATE)) fail("remove disagreed with the model", at);
      waiting[id] = 0;
      break;
    case 14: {
      int32_t g, best, want = -1, k;
      ranks[v % GROUPS] = a % 3;
      sh_pool_fix_rank(p, 0, ranks[0]);
      if (v & 0x80) {
        /* a new epoch of reads: every active group not fixed, once each */
        int seen[GROUPS] = {0};
        sh_pool_new_reads(p);
        while ((g = sh_pool_next_unread(p)) >= 0) {
          if (g == 0) fail("next_unread handed out a fixed group", at);
          if (g >= GROUPS || seen[g]++) fail("next_unread handed out a group twice", at);
          sh_pool_set_rank(p, g, ranks[g]);
        }
        for (k = 0; k < IDS; k++)
          if (waiting[k] && group_of[k] != 0 && !seen[group_of[k]]) fail("next_unread missed an active group", at);
      } else {
        if (a & 0x40) {
          /* the group changed (a set of sources changed in place): handed
           * out again in this epoch, if it has waiters and is not fixed */
          int32_t changed = (int32_t)(v % GROUPS), handed = 0, active = 0;
          for (k = 0; k < IDS; k++) active |= waiting[k] && group_of[k] == changed;
          if (sh_pool_reread(p, changed) != SH_OK) fail("reread refused a group", at);
          while ((g = sh_pool_next_unread(p)) >= 0) {
            if (g == 0) fail("next_unread handed out a fixed group", at);
            handed |= g == changed;
            sh_pool_set_rank(p, g, ranks[g]);
          }
          if (changed != 0 && active && !handed) fail("reread did not hand the group out again", at);
        }
        /* (and every live group, as the model changes idle ones too) */
        for (g = sh_pool_next_live(p, -1); g >= 0; g = sh_pool_next_live(p, g)) {
          if (g == 0) fail("next_live walked a fixed group", at);
          sh_pool_set_rank(p, g, ranks[g]);
        }
      }
      {
        int32_t nw = 0, free_slots = sh_pool_capacity(p) - sh_pool_in_use(p), want_g;
        for (k = 0; k < IDS; k++) nw += waiting[k];
        want_g = free_slots <= 0 ? 0 : (nw < free_slots ? nw : free_slots);
        if (sh_pool_grantable(p) != want_g) fail("grantable disagreed with the model", at);
      }
      best = sh_pool_best(p);
      for (k = 0; k < IDS; k++)
        if (waiting[k] && (want < 0 || ranks[group_of[k]] < ranks[group_of[want]] ||
                           (ranks[group_of[k]] == ranks[group_of[want]] &&
                            sh_pool_arrival(p, k) < sh_pool_arrival(p, want))))
          want = k;
      if (best != want) fail("pool_best disagreed with the model", at);
      if (best >= 0 && sh_pool_in_use(p) < sh_pool_capacity(p)) {
        if (sh_pool_grant(p, best) != SH_OK) fail("grant refused the best waiter", at);
        waiting[best] = 0;
      } else if (sh_pool_in_use(p) > 0) {
        sh_pool_release(p);
      }
      break;
    }
    default:
      if (op & 0x10) { /* ids: take the lowest free, or give one back */
        if (v & 1) {
          int32_t want = 0;
          while (want < high && taken[want]) want++;
          if (want >= 256) break;
          if (sh_ids_take(ids) != want) fail("ids_take did not give the lowest free id", at);
          taken[want] = 1;
          if (want == high) high++;
        } else {
          int32_t k = (int32_t)(a % (high + 2)) - (v & 2 ? 1 : 0);
          int rc = sh_ids_give(ids, k);
          if (rc != (k < 0 || k >= high ? SH_EINVAL : taken[k] ? SH_OK : SH_ESTATE))
            fail("ids_give disagreed with the model", at);
          if (rc == SH_OK) taken[k] = 0;
        }
        if (sh_ids_check(ids) != SH_OK) fail("ids invariant", at);
      } else {
        int r = sh_barrier_arrive(b, (int32_t)(v % 10) - 1);
        if (r == SH_EINVAL && v % 10 >= 1 && v % 10 <= 8) fail("barrier refused a good index", at);
        if (sh_barrier_arrived(b) > 8) fail("barrier counted past its size", at);
      }
      break;
    }
    if (sh_clock_check(c) != SH_OK) fail("clock invariant", at);
    if (sh_timers_check(t) != SH_OK) fail("timer heap invariant", at);
    if (sh_pool_check(p) != SH_OK) fail("pool invariant", at);
  }
  sh_clock_free(c);
  sh_timers_free(t);
  sh_pool_free(p);
  sh_barrier_free(b);
  sh_ids_free(ids);
  return 0;
}

#ifdef SH_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return sh_fuzz_one(data, size); }
#endif
