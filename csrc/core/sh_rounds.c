#include "sh_sync.h"
#include "sh_threads.h"
#include "sh_watchers.h"
#include "stagehand.h"

#include <stdlib.h>
#include <string.h>

/* One round under way: its arrivals, the shares by index, and once
 * complete, the combined result. */
typedef struct round {
  struct round *next;
  double number;
  int32_t count, arrived, left;
  int op, complete;
  double *shares; /* participants * share_len, by index */
  uint8_t *have;  /* which indices brought a share */
  double *result;
} round;

struct sh_rounds {
  sh__mutex mu;
  sh__cond cv;
  int32_t participants, share_len;
  int refs, aborted;
  round *rounds;
  sh__watchers watchers;
};

sh_rounds *sh_rounds_new(int32_t participants, int32_t share_len) {
  sh_rounds *b;
  if (participants < 1 || participants > 4096 || share_len < 0 || share_len > 65536) return NULL;
  b = (sh_rounds *)calloc(1, sizeof *b);
  if (!b) return NULL;
  if (sh__mutex_init(&b->mu)) {
    free(b);
    return NULL;
  }
  if (sh__cond_init(&b->cv)) {
    sh__mutex_destroy(&b->mu);
    free(b);
    return NULL;
  }
  b->participants = participants;
  b->share_len = share_len;
  b->refs = 1;
  return b;
}

static void free_round(round *r) {
  free(r->shares);
  free(r->have);
  free(r->result);
  free(r);
}

void sh_rounds_ref(sh_rounds *b) {
  sh__mutex_lock(&b->mu);
  b->refs++;
  sh__mutex_unlock(&b->mu);
}

void sh_rounds_unref(sh_rounds *b) {
  int left;
  if (!b) return;
  sh__mutex_lock(&b->mu);
  left = --b->refs;
  sh__mutex_unlock(&b->mu);
  if (left) return;
  while (b->rounds) {
    round *r = b->rounds;
    b->rounds = r->next;
    free_round(r);
  }
  sh__drop_watchers(&b->watchers);
  sh__cond_destroy(&b->cv);
  sh__mutex_destroy(&b->mu);
  free(b);
}

int32_t sh_rounds_participants(const sh_rounds *b) { return b->participants; }
int32_t sh_rounds_share_len(const sh_rounds *b) { return b->share_len; }

static round *find(sh_rounds *b, double number) {
  round *r;
  for (r = b->rounds; r; r = r->next)
    if (r->number == number) return r;
  return NULL;
}

/* The last arrival combines every share in index order: the same
 * additions in the same order, whoever arrives last. */
static void combine(sh_rounds *b, round *r) {
  int32_t i, k, n = b->share_len, first = 1;
  if (r->op == SH_OP_COUNT) return;
  for (i = 0; i < b->participants; i++) {
    const double *s;
    if (!r->have[i]) continue;
    s = r->shares + (size_t)i * (size_t)n;
    for (k = 0; k < n; k++) {
      if (first) r->result[k] = s[k];
      else if (r->op == SH_OP_SUM) r->result[k] += s[k];
      else if (r->op == SH_OP_MIN) r->result[k] = s[k] < r->result[k] ? s[k] : r->result[k];
      else r->result[k] = s[k] > r->result[k] ? s[k] : r->result[k];
    }
    first = 0;
  }
}

int sh_rounds_arrive(sh_rounds *b, double round_no, int32_t count, int op, int32_t index, const double *share) {
  round *r;
  int rc = SH_OK, complete = 0;
  const int32_t len = b->share_len; /* (fixed at sh_rounds_new) */
  if (count < 1 || count > b->participants || op < SH_OP_COUNT || op > SH_OP_MAX || round_no != round_no)
    return SH_EINVAL;
  if (op != SH_OP_COUNT && (index < 1 || index > b->participants || (!share && len > 0)))
    return SH_EINVAL;
  sh__mutex_lock(&b->mu);
  if (b->aborted) {
    sh__mutex_unlock(&b->mu);
    return SH_ECLOSED;
  }
  r = find(b, round_no);
  if (!r) {
    size_t n = (size_t)b->participants * (size_t)b->share_len;
    r = (round *)calloc(1, sizeof *r);
    if (!r) goto nomem;
    r->number = round_no;
    r->count = count;
    r->op = op;
    if (op != SH_OP_COUNT) {
      r->shares = (double *)calloc(n ? n : 1, sizeof(double));
      r->have = (uint8_t *)calloc((size_t)b->participants, 1);
      r->result = (double *)calloc(b->share_len ? (size_t)b->share_len : 1, sizeof(double));
      if (!r->shares || !r->have || !r->result) {
        free_round(r);
        goto nomem;
      }
    }
    r->next = b->rounds;
    b->rounds = r;
  } else if (r->count != count || r->op != op || r->complete) {
    rc = SH_EINVAL; /* a different count or operation, or a round already complete */
  } else if (op != SH_OP_COUNT && r->have[index - 1]) {
    rc = SH_ESTATE; /* this index arrived already */
  }
  if (rc == SH_OK) {
    if (op != SH_OP_COUNT) {
      r->have[index - 1] = 1;
      if (len > 0) /* (share was checked non-null for it above) */
        memcpy(r->shares + (size_t)(index - 1) * (size_t)len, share, (size_t)len * sizeof(double));
    }
    if (++r->arrived == r->count) {
      combine(b, r);
      r->complete = 1;
      complete = 1;
      sh__signal_all(&b->watchers);
    }
  }
  sh__mutex_unlock(&b->mu);
  /* (the waiters woken after the unlock, as a port's receivers are) */
  if (complete) sh__cond_broadcast(&b->cv);
  return rc;
nomem:
  sh__mutex_unlock(&b->mu);
  return SH_ENOMEM;
}

static int answer(sh_rounds *b, round *r, double *out) {
  if (b->aborted) return SH_ECLOSED;
  if (!r) return SH_EINVAL;
  if (!r->complete) return SH_EAGAIN;
  if (out && r->op != SH_OP_COUNT && b->share_len)
    memcpy(out, r->result, (size_t)b->share_len * sizeof(double));
  return SH_OK;
}

int sh_rounds_poll(sh_rounds *b, double round_no, double *out) {
  int rc;
  sh__mutex_lock(&b->mu);
  rc = answer(b, find(b, round_no), out);
  sh__mutex_unlock(&b->mu);
  return rc;
}

int sh_rounds_wait(sh_rounds *b, double round_no, double *out, double timeout_ms, const int *stop) {
  int rc;
  double until = sh_now_ms() + timeout_ms;
  sh__mutex_lock(&b->mu);
  for (;;) {
    double left;
    rc = answer(b, find(b, round_no), out);
    if (rc != SH_EAGAIN) break;
    if (stop && SH__LOAD(stop)) { rc = SH_ESTOPPED; break; }
    left = until - sh_now_ms();
    if (left <= 0) { rc = SH_ETIMEDOUT; break; }
    if (stop && left > SH__STOP_SLICE_MS) left = SH__STOP_SLICE_MS;
    sh__cond_wait_ms(&b->cv, &b->mu, left);
  }
  sh__mutex_unlock(&b->mu);
  return rc;
}

void sh_rounds_leave(sh_rounds *b, double round_no) {
  round **at, *r;
  sh__mutex_lock(&b->mu);
  for (at = &b->rounds; (r = *at) != NULL; at = &r->next) {
    if (r->number != round_no) continue;
    if (++r->left >= r->count && (r->complete || b->aborted)) {
      *at = r->next;
      free_round(r);
    }
    break;
  }
  sh__mutex_unlock(&b->mu);
}

void sh_rounds_abort(sh_rounds *b) {
  sh__mutex_lock(&b->mu);
  b->aborted = 1;
  while (b->rounds) {
    round *r = b->rounds;
    b->rounds = r->next;
    free_round(r);
  }
  sh__cond_broadcast(&b->cv);
  sh__signal_all(&b->watchers);
  sh__mutex_unlock(&b->mu);
}

int sh_rounds_aborted(sh_rounds *b) {
  int a;
  sh__mutex_lock(&b->mu);
  a = b->aborted;
  sh__mutex_unlock(&b->mu);
  return a;
}

int sh_rounds_watch(sh_rounds *b, sh_notify *n) {
  int rc;
  sh__mutex_lock(&b->mu);
  rc = sh__watch(&b->watchers, n);
  sh__mutex_unlock(&b->mu);
  return rc;
}

void sh_rounds_unwatch(sh_rounds *b, sh_notify *n) {
  sh__mutex_lock(&b->mu);
  sh__unwatch(&b->watchers, n);
  sh__mutex_unlock(&b->mu);
}
