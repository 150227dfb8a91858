/* The platform layer over Win32 (sh_platform.h): slim reader/writer locks
 * and condition variables, threads from _beginthreadex, the performance
 * counter, and a connected pair of loopback sockets as the wake-up
 * descriptor (libuv polls only sockets on Windows). Nothing beyond the
 * system's own DLLs (kernel32, ws2_32) and the C runtime. */
#include <winsock2.h>
#include <ws2tcpip.h>

#include "../sh_platform.h"
#include "../../core/stagehand.h"

#include <errno.h>
#include <math.h>
#include <process.h>
#include <string.h>

double sh_now_ms(void) {
  static LARGE_INTEGER freq; /* (the same for the life of the system) */
  LARGE_INTEGER now;
  if (!freq.QuadPart) QueryPerformanceFrequency(&freq);
  QueryPerformanceCounter(&now);
  return (double)now.QuadPart * 1e3 / (double)freq.QuadPart;
}

int sh_cores(void) {
  SYSTEM_INFO si;
  GetSystemInfo(&si);
  return si.dwNumberOfProcessors >= 1 ? (int)si.dwNumberOfProcessors : 1;
}

/* Pins the DLL this code is in for the life of the process: no finalizer
 * can outlive it. (Linked into an executable, it pins the executable.) */
int sh_pin_library(void) {
  HMODULE self;
  return GetModuleHandleExW(GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS | GET_MODULE_HANDLE_EX_FLAG_PIN,
                            (LPCWSTR)(void *)&sh_pin_library, &self)
             ? SH_OK
             : SH_ESTATE;
}

/* A whole number of ms for the system's waits: rounded up, so a wait is
 * never shorter than asked; capped below INFINITE. */
static DWORD whole_ms(double ms) {
  if (!(ms > 0)) return 0;
  if (ms > 86400e3) ms = 86400e3;
  return (DWORD)ceil(ms);
}

void sh_sleep_ms(double ms) {
  if (ms > 0) Sleep(whole_ms(ms));
}

int sh__mutex_init(sh__mutex *m) {
  InitializeSRWLock(m);
  return 0;
}
void sh__mutex_destroy(sh__mutex *m) { (void)m; }
void sh__mutex_lock(sh__mutex *m) { AcquireSRWLockExclusive(m); }
void sh__mutex_unlock(sh__mutex *m) { ReleaseSRWLockExclusive(m); }

int sh__cond_init(sh__cond *c) {
  InitializeConditionVariable(c);
  return 0;
}
void sh__cond_destroy(sh__cond *c) { (void)c; }
void sh__cond_signal(sh__cond *c) { WakeConditionVariable(c); }
void sh__cond_broadcast(sh__cond *c) { WakeAllConditionVariable(c); }
void sh__cond_wait(sh__cond *c, sh__mutex *m) { SleepConditionVariableSRW(c, m, INFINITE, 0); }
/* (A relative timeout, on no wall clock: nothing to convert.) */
void sh__cond_wait_ms(sh__cond *c, sh__mutex *m, double ms) { SleepConditionVariableSRW(c, m, whole_ms(ms), 0); }

int sh__thread_start(sh__thread *t, sh__thread_fn fn, void *arg) {
  uintptr_t h = _beginthreadex(NULL, 0, fn, arg, 0, NULL);
  if (!h) return errno ? errno : -1;
  *t = (HANDLE)h;
  return 0;
}
void sh__thread_join(sh__thread t) {
  WaitForSingleObject(t, INFINITE);
  CloseHandle(t);
}
void sh__thread_detach(sh__thread t) { CloseHandle(t); }
void sh__thread_lower_priority(void) { (void)SetThreadPriority(GetCurrentThread(), THREAD_PRIORITY_BELOW_NORMAL); }
void sh__yield(void) { SwitchToThread(); }

/* Winsock, started once for the process (and never cleaned up: other
 * code in the process may use it). */
static INIT_ONCE wsa_once = INIT_ONCE_STATIC_INIT;
static int wsa_ok;
static BOOL CALLBACK start_wsa(PINIT_ONCE once, PVOID param, PVOID *ctx) {
  WSADATA data;
  (void)once, (void)param, (void)ctx;
  wsa_ok = WSAStartup(MAKEWORD(2, 2), &data) == 0;
  return TRUE;
}

static int nonblocking(SOCKET s) {
  u_long on = 1;
  return ioctlsocket(s, (long)(u_long)FIONBIO, &on) == 0;
}

/* A connected pair of TCP sockets on the loopback address: a listener on
 * a port the system picks, a connect to it, the accept. */
int sh__wake_open(sh__wake *w) {
  SOCKET listener, a = INVALID_SOCKET, b = INVALID_SOCKET;
  struct sockaddr_in addr;
  int len = (int)sizeof addr;
  InitOnceExecuteOnce(&wsa_once, start_wsa, NULL, NULL);
  if (!wsa_ok) return -1;
  listener = socket(AF_INET, SOCK_STREAM, IPPROTO_TCP);
  if (listener == INVALID_SOCKET) return -1;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (bind(listener, (struct sockaddr *)&addr, sizeof addr) || getsockname(listener, (struct sockaddr *)&addr, &len) ||
      listen(listener, 1))
    goto fail;
  b = socket(AF_INET, SOCK_STREAM, IPPROTO_TCP);
  if (b == INVALID_SOCKET || connect(b, (struct sockaddr *)&addr, sizeof addr)) goto fail;
  a = accept(listener, NULL, NULL);
  if (a == INVALID_SOCKET || !nonblocking(a) || !nonblocking(b)) goto fail;
  closesocket(listener);
  {
    BOOL one = TRUE; /* (each byte goes at once) */
    setsockopt(b, IPPROTO_TCP, TCP_NODELAY, (const char *)&one, sizeof one);
  }
  w->fd[0] = (intptr_t)a;
  w->fd[1] = (intptr_t)b;
  return 0;
fail:
  if (a != INVALID_SOCKET) closesocket(a);
  if (b != INVALID_SOCKET) closesocket(b);
  closesocket(listener);
  return -1;
}

void sh__wake_close(sh__wake *w) {
  closesocket((SOCKET)w->fd[0]);
  closesocket((SOCKET)w->fd[1]);
}

int sh__wake_signal(sh__wake *w) {
  char one = 1;
  return send((SOCKET)w->fd[1], &one, 1, 0) == 1 ? 0 : -1;
}

void sh__wake_clear(sh__wake *w) {
  char buf[64];
  while (recv((SOCKET)w->fd[0], buf, (int)sizeof buf, 0) > 0) {
  }
}
