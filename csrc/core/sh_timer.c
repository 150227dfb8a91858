#include "sh_checks.h"
#include "sh_heap.h"
#include "stagehand.h"

#include <math.h>
#include <stdlib.h>

struct sh_timers {
  sh__heap heap;
#ifdef SH_DEBUG_CHECKS
  sh__checks checks;
#endif
};

#define CHECKED(t) SH__CHECKED(t, (t)->heap.pos_cap, sh_timers_check)

sh_timers *sh_timers_new(void) {
  sh_timers *t = (sh_timers *)calloc(1, sizeof *t);
  if (t) sh__heap_init(&t->heap);
  return t;
}

void sh_timers_free(sh_timers *t) {
  if (!t) return;
  sh__heap_free(&t->heap);
  free(t);
}

int sh_timers_add(sh_timers *t, int32_t id, double due) {
  int rc;
  if (!t || due != due || due == HUGE_VAL || due == -HUGE_VAL) return SH_EINVAL; /* (NaN, or infinite) */
  rc = sh__heap_insert(&t->heap, id, due);
  CHECKED(t);
  return rc;
}

int sh_timers_cancel(sh_timers *t, int32_t id) {
  if (!t) return SH_EINVAL;
  if (!sh__heap_contains(&t->heap, id)) return SH_ESTATE;
  sh__heap_remove(&t->heap, id);
  CHECKED(t);
  return SH_OK;
}

double sh_timers_peek(const sh_timers *t) {
  const sh__heap_item *top = t ? sh__heap_top(&t->heap) : NULL;
  return top ? top->key : -1;
}

int32_t sh_timers_pop(sh_timers *t, double now) {
  const sh__heap_item *top = t ? sh__heap_top(&t->heap) : NULL;
  int32_t id;
  if (!top || now != now || top->key > now) return -1;
  id = top->id;
  sh__heap_remove(&t->heap, id);
  CHECKED(t);
  return id;
}

int32_t sh_timers_count(const sh_timers *t) { return t ? (int32_t)t->heap.len : 0; }

int sh_timers_check(const sh_timers *t) { return t ? sh__heap_check(&t->heap) : SH_EINVAL; }
