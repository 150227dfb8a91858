#define _POSIX_C_SOURCE 200809L
#include "stagehand.h"

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

void sh_sleep_ms(double ms) {
  struct timespec ts;
  if (!(ms > 0)) return;
  if (ms > 86400e3) ms = 86400e3;
  ts.tv_sec = (time_t)(ms / 1e3);
  ts.tv_nsec = (long)((ms - (double)ts.tv_sec * 1e3) * 1e6);
  while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
  }
}
