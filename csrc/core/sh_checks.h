#ifndef SH_CHECKS_H
#define SH_CHECKS_H
/* Internal to the core: when a debug build (SH_DEBUG_CHECKS) checks a
 * structure's invariants after a change.
 *
 * A check walks the whole structure (a stall clock's every entry, a pool's
 * every waiter), so checking after every change made a run with n entries
 * cost n checks of O(n) each: a spec that awaits down a chain of 10,000
 * loaders took 21 s under the sanitizers, and the sanitized suite took
 * nearly three minutes a runtime, against half a minute without checks.
 * Instead every change is checked while the structure is small (at most
 * SH__CHECK_EVERY entries), and one change in n / SH__CHECK_EVERY beyond
 * that, so a change costs O(SH__CHECK_EVERY) checking whatever n is. A
 * fault that stays is found within n / SH__CHECK_EVERY changes of the one
 * that made it. (The C tests' random sequences and the fuzzer call the
 * checks themselves after every step, at any size.) */
#include <stddef.h>
#include <stdint.h>

#define SH__CHECK_EVERY ((size_t)64)

typedef struct sh__checks {
  uint64_t changes; /* changes so far */
  uint64_t next;    /* the change that is checked next */
} sh__checks;

/* Counts a change to a structure of n entries; 1 when it is to be checked. */
static inline int sh__check_due(sh__checks *k, size_t n) {
  if (++k->changes < k->next) return 0;
  k->next = k->changes + (n > SH__CHECK_EVERY ? n / SH__CHECK_EVERY : 1);
  return 1;
}

/* CHECKED in each structure's file: check(obj) must return SH_OK when a
 * change to obj, holding n entries, is due a check (obj->checks counts
 * them). Nothing is evaluated outside debug builds. */
#ifdef SH_DEBUG_CHECKS
#include <assert.h>
#define SH__CHECKED(obj, n, check) \
  do { \
    if (sh__check_due(&(obj)->checks, (n))) assert((check)(obj) == SH_OK); \
  } while (0)
#else
#define SH__CHECKED(obj, n, check) ((void)0)
#endif

#endif
