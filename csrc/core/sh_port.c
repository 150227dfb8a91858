#include "sh_sync.h"
#include "sh_threads.h"
#include "sh_watchers.h"
#include "stagehand.h"

#include <stdlib.h>

struct sh_port {
  sh__mutex mu;
  sh__cond cv;
  sh_msg **ring; /* queued messages, oldest at head */
  int32_t head, len, cap;
  int refs, closed;
  sh__watchers watchers;
  char name[SH_PORT_NAME_LEN];
};

void sh_port_set_name(sh_port *p, const char *name) { sh__copy_cut(p->name, sizeof p->name, name); }

const char *sh_port_name(const sh_port *p) { return p->name; }

sh_port *sh_port_new(void) {
  sh_port *p = (sh_port *)calloc(1, sizeof *p);
  if (!p) return NULL;
  if (sh__mutex_init(&p->mu)) {
    free(p);
    return NULL;
  }
  if (sh__cond_init(&p->cv)) {
    sh__mutex_destroy(&p->mu);
    free(p);
    return NULL;
  }
  p->refs = 1;
  return p;
}

void sh_port_ref(sh_port *p) {
  sh__mutex_lock(&p->mu);
  p->refs++;
  sh__mutex_unlock(&p->mu);
}

static void drop_queue(sh_port *p) {
  while (p->len > 0) {
    sh_msg *m = p->ring[p->head];
    p->head = (p->head + 1) % p->cap;
    p->len--;
    sh_msg_free(m); /* (may unref other ports: never this one, which is still counted) */
  }
}

void sh_port_unref(sh_port *p) {
  int left;
  if (!p) return;
  sh__mutex_lock(&p->mu);
  left = --p->refs;
  sh__mutex_unlock(&p->mu);
  if (left) return;
  /* A message queued in a port may hold a count of the port itself (a port
   * posted into its own queue): its count keeps the port alive until the
   * queue is dropped, by close or by this last unref. */
  drop_queue(p);
  free(p->ring);
  sh__drop_watchers(&p->watchers);
  sh__cond_destroy(&p->cv);
  sh__mutex_destroy(&p->mu);
  free(p);
}

int sh_port_post(sh_port *p, sh_msg *m) {
  sh__mutex_lock(&p->mu);
  if (p->closed) {
    sh__mutex_unlock(&p->mu);
    return SH_ECLOSED;
  }
  if (p->len == p->cap) {
    int32_t cap = p->cap ? p->cap * 2 : 8, i;
    sh_msg **grown = (sh_msg **)malloc((size_t)cap * sizeof *grown);
    if (!grown) {
      sh__mutex_unlock(&p->mu);
      return SH_ENOMEM;
    }
    for (i = 0; i < p->len; i++) grown[i] = p->ring[(p->head + i) % p->cap];
    free(p->ring);
    p->ring = grown;
    p->head = 0;
    p->cap = cap;
  }
  p->ring[(p->head + p->len) % p->cap] = m;
  p->len++;
  sh__signal_all(&p->watchers);
  sh__mutex_unlock(&p->mu);
  /* (woken after the unlock: a receiver woken under it would at once wait
   * again for the lock; one that waits later saw the message under it,
   * and the poster's reference keeps p alive) */
  sh__cond_broadcast(&p->cv);
  return SH_OK;
}

int sh_port_take(sh_port *p, sh_msg **out) {
  int rc = SH_OK;
  sh__mutex_lock(&p->mu);
  if (p->len > 0) {
    *out = p->ring[p->head];
    p->head = (p->head + 1) % p->cap;
    p->len--;
  } else {
    rc = p->closed ? SH_ECLOSED : SH_EAGAIN;
  }
  sh__mutex_unlock(&p->mu);
  return rc;
}

int sh_port_wait(sh_port *p, double timeout_ms, const int *stop) {
  int rc;
  double until = sh_now_ms() + timeout_ms;
  sh__mutex_lock(&p->mu);
  for (;;) {
    double left;
    if (p->len > 0) { rc = SH_OK; break; }
    if (p->closed) { rc = SH_ECLOSED; break; }
    if (stop && SH__LOAD(stop)) { rc = SH_ESTOPPED; break; }
    left = until - sh_now_ms();
    if (left <= 0) { rc = SH_ETIMEDOUT; break; }
    if (stop && left > SH__STOP_SLICE_MS) left = SH__STOP_SLICE_MS;
    sh__cond_wait_ms(&p->cv, &p->mu, left);
  }
  sh__mutex_unlock(&p->mu);
  return rc;
}

void sh_port_close(sh_port *p) {
  sh_msg **ring;
  int32_t head, len, cap, i;
  sh__mutex_lock(&p->mu);
  if (p->closed) {
    sh__mutex_unlock(&p->mu);
    return;
  }
  p->closed = 1;
  /* The queue is freed outside the lock: a message may hold this port. */
  ring = p->ring, head = p->head, len = p->len, cap = p->cap;
  p->ring = NULL, p->head = p->len = p->cap = 0;
  sh__cond_broadcast(&p->cv);
  sh__signal_all(&p->watchers);
  sh__mutex_unlock(&p->mu);
  for (i = 0; i < len; i++) sh_msg_free(ring[(head + i) % cap]);
  free(ring);
}

int sh_port_closed(sh_port *p) {
  int c;
  sh__mutex_lock(&p->mu);
  c = p->closed;
  sh__mutex_unlock(&p->mu);
  return c;
}

int32_t sh_port_count(sh_port *p) {
  int32_t n;
  sh__mutex_lock(&p->mu);
  n = p->len;
  sh__mutex_unlock(&p->mu);
  return n;
}

int sh_port_watch(sh_port *p, sh_notify *n) {
  int rc;
  sh__mutex_lock(&p->mu);
  rc = sh__watch(&p->watchers, n);
  sh__mutex_unlock(&p->mu);
  return rc;
}

void sh_port_unwatch(sh_port *p, sh_notify *n) {
  sh__mutex_lock(&p->mu);
  sh__unwatch(&p->watchers, n);
  sh__mutex_unlock(&p->mu);
}
