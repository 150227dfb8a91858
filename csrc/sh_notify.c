#define _GNU_SOURCE /* pipe2 */
#include "sh_sync.h"
#include "sh_threads.h"
#include "stagehand.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

struct sh_notify {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t gen;
  int refs;
  int armed; /* a byte sits in the pipe */
  int fds[2];
};

int sh__cond_init(pthread_cond_t *c) {
  pthread_condattr_t a;
  int rc;
  if (pthread_condattr_init(&a)) return -1;
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  rc = pthread_cond_init(c, &a);
  pthread_condattr_destroy(&a);
  return rc ? -1 : 0;
}

int sh__cond_wait_ms(pthread_cond_t *c, pthread_mutex_t *m, double ms) {
  struct timespec ts;
  double secs;
  if (ms > 86400e3) ms = 86400e3;
  if (!(ms > 0)) ms = 0;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  secs = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9 + ms / 1e3;
  ts.tv_sec = (time_t)secs;
  ts.tv_nsec = (long)((secs - (double)ts.tv_sec) * 1e9);
  if (ts.tv_nsec >= 1000000000L) ts.tv_nsec = 999999999L;
  return pthread_cond_timedwait(c, m, &ts);
}

sh_notify *sh_notify_new(void) {
  sh_notify *n = calloc(1, sizeof *n);
  if (!n) return NULL;
  if (pthread_mutex_init(&n->mu, NULL)) goto fail_mu;
  if (sh__cond_init(&n->cv)) goto fail_cv;
  if (pipe2(n->fds, O_CLOEXEC | O_NONBLOCK)) goto fail_pipe;
  n->refs = 1;
  return n;
fail_pipe:
  pthread_cond_destroy(&n->cv);
fail_cv:
  pthread_mutex_destroy(&n->mu);
fail_mu:
  free(n);
  return NULL;
}

void sh_notify_ref(sh_notify *n) {
  pthread_mutex_lock(&n->mu);
  n->refs++;
  pthread_mutex_unlock(&n->mu);
}

void sh_notify_unref(sh_notify *n) {
  int left;
  if (!n) return;
  pthread_mutex_lock(&n->mu);
  left = --n->refs;
  pthread_mutex_unlock(&n->mu);
  if (left) return;
  close(n->fds[0]);
  close(n->fds[1]);
  pthread_cond_destroy(&n->cv);
  pthread_mutex_destroy(&n->mu);
  free(n);
}

void sh_notify_signal(sh_notify *n) {
  pthread_mutex_lock(&n->mu);
  n->gen++;
  if (!n->armed) {
    char one = 1;
    /* (a full pipe is readable already: nothing lost) */
    if (write(n->fds[1], &one, 1) == 1) n->armed = 1;
  }
  pthread_mutex_unlock(&n->mu);
  /* Woken after the lock is let go: woken under it, a waiter at once waited
   * again for the lock. (A waiter reads gen under the lock, so none misses
   * this one; the caller holds a reference, so n outlives the call.) */
  pthread_cond_broadcast(&n->cv);
}

uint64_t sh_notify_gen(sh_notify *n) {
  uint64_t g;
  pthread_mutex_lock(&n->mu);
  g = n->gen;
  pthread_mutex_unlock(&n->mu);
  return g;
}

int sh_notify_wait(sh_notify *n, uint64_t seen, double timeout_ms) {
  int woke;
  double until = sh_now_ms() + timeout_ms;
  pthread_mutex_lock(&n->mu);
  while (n->gen == seen) {
    double left = until - sh_now_ms();
    if (left <= 0) break;
    sh__cond_wait_ms(&n->cv, &n->mu, left);
  }
  woke = n->gen != seen;
  pthread_mutex_unlock(&n->mu);
  return woke;
}

int sh_notify_fd(const sh_notify *n) { return n->fds[0]; }

void sh_notify_clear(sh_notify *n) {
  char buf[64];
  pthread_mutex_lock(&n->mu);
  while (read(n->fds[0], buf, sizeof buf) > 0) {
  }
  n->armed = 0;
  pthread_mutex_unlock(&n->mu);
}

int sh_threads_default(void) {
  int n = sh_cores() - 1;
  if (n < 1) n = 1;
  if (n > 4) n = 4;
  return n;
}
