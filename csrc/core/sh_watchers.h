#ifndef SH_WATCHERS_H
#define SH_WATCHERS_H
/* Internal to the core: the notifiers an object signals when it changes
 * (a port posted to, a round completed), each held once per watch. The
 * owner's mutex guards them. */
#include "sh_threads.h"

#include <stdlib.h>

typedef struct sh__watchers {
  sh_notify **n;
  int32_t len, cap;
} sh__watchers;

static inline int sh__watch(sh__watchers *w, sh_notify *n) {
  if (w->len == w->cap) {
    int32_t cap = w->cap ? w->cap * 2 : 2;
    sh_notify **grown = (sh_notify **)realloc(w->n, (size_t)cap * sizeof *grown);
    if (!grown) return -2; /* SH_ENOMEM */
    w->n = grown;
    w->cap = cap;
  }
  sh_notify_ref(n);
  w->n[w->len++] = n;
  return 0;
}

static inline void sh__unwatch(sh__watchers *w, sh_notify *n) {
  int32_t i;
  for (i = 0; i < w->len; i++) {
    if (w->n[i] == n) {
      w->n[i] = w->n[--w->len];
      sh_notify_unref(n);
      return;
    }
  }
}

static inline void sh__signal_all(sh__watchers *w) {
  int32_t i;
  for (i = 0; i < w->len; i++) sh_notify_signal(w->n[i]);
}

static inline void sh__drop_watchers(sh__watchers *w) {
  int32_t i;
  for (i = 0; i < w->len; i++) sh_notify_unref(w->n[i]);
  free(w->n);
  w->n = NULL;
  w->len = w->cap = 0;
}

#endif
