#define _GNU_SOURCE /* dladdr, RTLD_NODELETE */
#include "stagehand.h"

#include <dlfcn.h>
#include <errno.h>
#include <time.h>
#include <unistd.h>

double sh_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int sh_cores(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n >= 1 ? (int)n : 1;
}

int sh_pin_library(void) {
  Dl_info info;
  void *self;
  if (!dladdr((void *)&sh_pin_library, &info) || !info.dli_fname) return SH_ESTATE;
  self = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
  return self ? SH_OK : SH_ESTATE; /* the extra reference is never closed */
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
