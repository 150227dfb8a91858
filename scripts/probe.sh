#!/bin/sh
# Prints the -D flags for what this system's C library has, for the core's
# POSIX layer (csrc/platform/sh_platform.h): each is tried by compiling a few lines
# with the compiler given ($1, default cc). Feature checks, not guesses
# from the system's name; a system that has none gets the portable paths.
cc=${1:-cc}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
try() { # $1: the flag to print if $2 (a C file's text) compiles and links
  printf '%s\n' "$2" >"$dir/t.c"
  if "$cc" -o "$dir/t" "$dir/t.c" -lpthread >/dev/null 2>&1; then printf ' %s' "$1"; fi
}
try -DSH_HAVE_PIPE2 '#define _GNU_SOURCE
#include <fcntl.h>
#include <unistd.h>
int main(void) { int fds[2]; return pipe2(fds, O_CLOEXEC | O_NONBLOCK); }'
try -DSH_HAVE_CONDATTR_SETCLOCK '#include <pthread.h>
#include <time.h>
int main(void) { pthread_condattr_t a; pthread_condattr_init(&a); return pthread_condattr_setclock(&a, CLOCK_MONOTONIC); }'
try -DSH_HAVE_COND_TIMEDWAIT_RELATIVE '#include <pthread.h>
#include <time.h>
int main(void) { pthread_cond_t c; pthread_mutex_t m; struct timespec t = {0, 0};
  return pthread_cond_timedwait_relative_np(&c, &m, &t); }'
try -DSH_HAVE_THREAD_NICE '#define _GNU_SOURCE
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(void) { return setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 0); }'
try -DSH_HAVE_QOS_CLASS '#include <pthread/qos.h>
int main(void) { return pthread_set_qos_class_self_np(QOS_CLASS_UTILITY, 0); }'
echo
