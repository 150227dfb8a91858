#include "sh_sync.h"
#include "sh_threads.h"
#include "stagehand.h"

#include <stdlib.h>

struct sh_notify {
  sh__mutex mu;
  sh__cond cv;
  uint64_t gen;
  int refs;
  int armed; /* a byte sits in the wake-up descriptor */
  sh__wake wake;
};

sh_notify *sh_notify_new(void) {
  sh_notify *n = (sh_notify *)calloc(1, sizeof *n);
  if (!n) return NULL;
  if (sh__mutex_init(&n->mu)) goto fail_mu;
  if (sh__cond_init(&n->cv)) goto fail_cv;
  if (sh__wake_open(&n->wake)) goto fail_wake;
  n->refs = 1;
  return n;
fail_wake:
  sh__cond_destroy(&n->cv);
fail_cv:
  sh__mutex_destroy(&n->mu);
fail_mu:
  free(n);
  return NULL;
}

void sh_notify_ref(sh_notify *n) {
  sh__mutex_lock(&n->mu);
  n->refs++;
  sh__mutex_unlock(&n->mu);
}

void sh_notify_unref(sh_notify *n) {
  int left;
  if (!n) return;
  sh__mutex_lock(&n->mu);
  left = --n->refs;
  sh__mutex_unlock(&n->mu);
  if (left) return;
  sh__wake_close(&n->wake);
  sh__cond_destroy(&n->cv);
  sh__mutex_destroy(&n->mu);
  free(n);
}

void sh_notify_signal(sh_notify *n) {
  sh__mutex_lock(&n->mu);
  n->gen++;
  if (!n->armed && sh__wake_signal(&n->wake) == 0) n->armed = 1;
  sh__mutex_unlock(&n->mu);
  /* Woken after the lock is let go: woken under it, a waiter at once waited
   * again for the lock. (A waiter reads gen under the lock, so none misses
   * this one; the caller holds a reference, so n outlives the call.) */
  sh__cond_broadcast(&n->cv);
}

uint64_t sh_notify_gen(sh_notify *n) {
  uint64_t g;
  sh__mutex_lock(&n->mu);
  g = n->gen;
  sh__mutex_unlock(&n->mu);
  return g;
}

int sh_notify_wait(sh_notify *n, uint64_t seen, double timeout_ms) {
  int woke;
  double until = sh_now_ms() + timeout_ms;
  sh__mutex_lock(&n->mu);
  while (n->gen == seen) {
    double left = until - sh_now_ms();
    if (left <= 0) break;
    sh__cond_wait_ms(&n->cv, &n->mu, left);
  }
  woke = n->gen != seen;
  sh__mutex_unlock(&n->mu);
  return woke;
}

intptr_t sh_notify_fd(const sh_notify *n) { return n->wake.fd[0]; }

void sh_notify_clear(sh_notify *n) {
  sh__mutex_lock(&n->mu);
  sh__wake_clear(&n->wake);
  n->armed = 0;
  sh__mutex_unlock(&n->mu);
}

int sh_threads_default(void) {
  int n = sh_cores() - 1;
  if (n < 1) n = 1;
  if (n > 4) n = 4;
  return n;
}
