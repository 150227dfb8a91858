/* The platform layer over POSIX (sh_platform.h): Linux, macOS, the BSDs,
 * Android, iOS. What a system may lack is chosen by what the build found
 * (SH_HAVE_*), never by the name of the system. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pipe2, dladdr, RTLD_NODELETE (glibc; harmless elsewhere) */
#endif
#include "../sh_platform.h"
#include "../../core/stagehand.h"

#include <dlfcn.h>
#if defined(SH_HAVE_THREAD_NICE)
#include <sys/resource.h>
#include <sys/syscall.h>
#endif
#if defined(SH_HAVE_QOS_CLASS)
#include <pthread/qos.h>
#endif
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

/* The monotonic clock; a system without one (none this code meets) reads
 * the wall clock. */
#if defined(CLOCK_MONOTONIC)
#define SH__CLOCK CLOCK_MONOTONIC
#else
#define SH__CLOCK CLOCK_REALTIME
#endif

double sh_now_ms(void) {
  struct timespec ts;
  clock_gettime(SH__CLOCK, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int sh_cores(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n >= 1 ? (int)n : 1;
}

/* An extra reference to the library this code is in, never dropped: no
 * finalizer can outlive it. A core linked into the executable has no
 * library to pin (dladdr names the executable, whose dlopen is harmless). */
int sh_pin_library(void) {
  Dl_info info;
  void *self;
  if (!dladdr((void *)&sh_pin_library, &info) || !info.dli_fname) return SH_ESTATE;
#if defined(RTLD_NODELETE)
  self = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
#else
  self = dlopen(info.dli_fname, RTLD_NOW); /* (never closed: the same) */
#endif
  return self ? SH_OK : SH_ESTATE;
}

void sh_sleep_ms(double ms) {
  struct timespec ts;
  if (!(ms > 0)) return;
  if (ms > 86400e3) ms = 86400e3;
  ts.tv_sec = (time_t)(ms / 1e3);
  ts.tv_nsec = (long)((ms - (double)ts.tv_sec * 1e3) * 1e6);
  while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
  }
}

int sh__mutex_init(sh__mutex *m) { return pthread_mutex_init(m, NULL) ? -1 : 0; }
void sh__mutex_destroy(sh__mutex *m) { pthread_mutex_destroy(m); }
void sh__mutex_lock(sh__mutex *m) { pthread_mutex_lock(m); }
void sh__mutex_unlock(sh__mutex *m) { pthread_mutex_unlock(m); }

int sh__cond_init(sh__cond *c) {
#if defined(SH_HAVE_CONDATTR_SETCLOCK)
  pthread_condattr_t a;
  int rc;
  if (pthread_condattr_init(&a)) return -1;
  rc = pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  if (rc == 0) rc = pthread_cond_init(c, &a);
  pthread_condattr_destroy(&a);
  return rc ? -1 : 0;
#else
  return pthread_cond_init(c, NULL) ? -1 : 0;
#endif
}
void sh__cond_destroy(sh__cond *c) { pthread_cond_destroy(c); }
void sh__cond_signal(sh__cond *c) { pthread_cond_signal(c); }
void sh__cond_broadcast(sh__cond *c) { pthread_cond_broadcast(c); }
void sh__cond_wait(sh__cond *c, sh__mutex *m) { pthread_cond_wait(c, m); }

#if defined(SH_HAVE_CONDATTR_SETCLOCK) || !defined(SH_HAVE_COND_TIMEDWAIT_RELATIVE)
/* The deadline `ms` from now on `clock`, as a timespec. */
static struct timespec deadline(clockid_t clock, double ms) {
  struct timespec ts;
  double secs;
  clock_gettime(clock, &ts);
  secs = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9 + ms / 1e3;
  ts.tv_sec = (time_t)secs;
  ts.tv_nsec = (long)((secs - (double)ts.tv_sec) * 1e9);
  if (ts.tv_nsec >= 1000000000L) ts.tv_nsec = 999999999L;
  return ts;
}
#endif

void sh__cond_wait_ms(sh__cond *c, sh__mutex *m, double ms) {
  struct timespec ts;
  if (ms > 86400e3) ms = 86400e3;
  if (!(ms > 0)) ms = 0;
#if defined(SH_HAVE_CONDATTR_SETCLOCK)
  ts = deadline(CLOCK_MONOTONIC, ms); /* (the variable was made on this clock: sh__cond_init) */
  pthread_cond_timedwait(c, m, &ts);
#elif defined(SH_HAVE_COND_TIMEDWAIT_RELATIVE)
  /* (macOS: a relative wait, which no change of the wall clock moves) */
  ts.tv_sec = (time_t)(ms / 1e3);
  ts.tv_nsec = (long)((ms - (double)ts.tv_sec * 1e3) * 1e6);
  pthread_cond_timedwait_relative_np(c, m, &ts);
#else
  /* The portable path: a deadline on the wall clock, the one every
   * pthread_cond_timedwait reads. A wall clock set back would stretch the
   * wait, so it is cut into slices of at most a second: callers wait again
   * for what is left, on the monotonic clock. */
  if (ms > 1000) ms = 1000;
  ts = deadline(CLOCK_REALTIME, ms);
  pthread_cond_timedwait(c, m, &ts);
#endif
}

int sh__thread_start(sh__thread *t, sh__thread_fn fn, void *arg) { return pthread_create(t, NULL, fn, arg); }
void sh__thread_join(sh__thread t) { pthread_join(t, NULL); }
void sh__thread_detach(sh__thread t) { pthread_detach(t); }

void sh__thread_lower_priority(void) {
#if defined(SH_HAVE_THREAD_NICE)
  /* (a thread's own nice value: 19 gives way to the frame's 0, some seventy to one) */
  (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19);
#elif defined(SH_HAVE_QOS_CLASS)
  (void)pthread_set_qos_class_self_np(QOS_CLASS_UTILITY, 0);
#endif
}
void sh__yield(void) { sched_yield(); }

/* A pipe whose ends are non-blocking and closed across exec. */
int sh__wake_open(sh__wake *w) {
  int fds[2], i;
#if defined(SH_HAVE_PIPE2)
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK)) return -1;
#else
  if (pipe(fds)) return -1;
  for (i = 0; i < 2; i++) {
    int fl = fcntl(fds[i], F_GETFL), fd = fcntl(fds[i], F_GETFD);
    if (fl == -1 || fd == -1 || fcntl(fds[i], F_SETFL, fl | O_NONBLOCK) == -1 ||
        fcntl(fds[i], F_SETFD, fd | FD_CLOEXEC) == -1) {
      close(fds[0]);
      close(fds[1]);
      return -1;
    }
  }
#endif
  for (i = 0; i < 2; i++) w->fd[i] = fds[i];
  return 0;
}

void sh__wake_close(sh__wake *w) {
  close((int)w->fd[0]);
  close((int)w->fd[1]);
}

int sh__wake_signal(sh__wake *w) {
  char one = 1;
  return write((int)w->fd[1], &one, 1) == 1 ? 0 : -1;
}

void sh__wake_clear(sh__wake *w) {
  char buf[64];
  while (read((int)w->fd[0], buf, sizeof buf) > 0) {
  }
}
