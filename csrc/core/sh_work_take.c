/* A worker pool's queue, the workers' side (sh_threads.h): requests held
 * for the owner to offer, the offer a worker takes from, taking a request,
 * reports and the owner's events. sh_work.c holds the queue itself. */
#include "sh_work_impl.h"

/* (mu held) Whether slot holds request id (not taken, not dropped). */
static int holds(const sh_work *w, int32_t slot, int64_t id) {
  return slot >= 0 && slot < w->nheld && w->held[slot].payload && w->held[slot].id == id;
}

/* (mu held) Slot is free again; its payload was taken from it. */
static void free_slot(sh_work *w, int32_t slot) {
  w->held[slot].payload = NULL;
  w->held[slot].next_free = w->free_held;
  w->free_held = slot;
  w->held_count--;
  sh__work_set_ready(w);
}

/* (mu held) How many entries of the offer are still held. */
static int32_t offer_left(const sh_work *w) {
  int32_t i, left = 0;
  for (i = w->onext; i < w->noffers; i++) left += holds(w, w->offers[i].slot, w->offers[i].id);
  return left;
}

/* (mu held) Worker i takes the next request offered that is still held:
 * returns 1 with *rc the status (SH_OK: taken; else the owner could not be
 * told and the request is held and offered again), or 0 when the offer
 * has nothing left. */
static int take_offered(sh_work *w, worker *k, int32_t i, int64_t *id, sh_msg **payload, int *rc) {
  int tell = 0;
  while (w->onext < w->noffers) {
    offer o = w->offers[w->onext++];
    if (!holds(w, o.slot, o.id)) continue; /* (dropped, or taken, since) */
    sh__mutex_lock(&w->emu);
    *rc = sh__work_add_event(w, o.id, SH_EV_STARTED, i, NULL, 0, 0, &tell); /* (a start tells nobody) */
    sh__mutex_unlock(&w->emu);
    if (*rc != SH_OK) {
      w->onext--;
      sh__work_set_ready(w);
      return 1;
    }
    *id = o.id;
    *payload = w->held[o.slot].payload;
    free_slot(w, o.slot);
    SH__STORE(&k->stop, k->halted);
    k->current = o.id;
    k->taken = 1;
    w->running++;
    return 1;
  }
  return 0;
}

int32_t sh_work_hold(sh_work *w, int64_t id, sh_msg *payload) {
  int32_t slot;
  if (!w || !payload) return SH_EINVAL;
  sh__mutex_lock(&w->mu);
  if (w->closed) {
    sh__mutex_unlock(&w->mu);
    return SH_ECLOSED;
  }
  if (w->free_held < 0) {
    if (w->nheld == w->capheld) {
      int32_t cap = w->capheld ? w->capheld * 2 : 64;
      held_req *grown = cap > 0 ? (held_req *)realloc(w->held, (size_t)cap * sizeof *grown) : NULL;
      if (!grown) {
        sh__mutex_unlock(&w->mu);
        return SH_ENOMEM;
      }
      w->held = grown;
      w->capheld = cap;
    }
    slot = w->nheld++;
  } else {
    slot = w->free_held;
    w->free_held = w->held[slot].next_free;
  }
  w->held[slot].id = id;
  w->held[slot].payload = payload;
  w->held[slot].next_free = -1;
  w->held_count++;
  sh__work_set_ready(w);
  sh__mutex_unlock(&w->mu);
  return slot;
}

int sh_work_drop(sh_work *w, int32_t slot, int64_t id) {
  sh_msg *m = NULL;
  if (!w) return SH_EINVAL;
  sh__mutex_lock(&w->mu);
  if (holds(w, slot, id)) {
    m = w->held[slot].payload;
    free_slot(w, slot);
  }
  sh__mutex_unlock(&w->mu);
  if (!m) return SH_ESTATE;
  sh_msg_free(m);
  return SH_OK;
}

int32_t sh_work_offer(sh_work *w, const int32_t *slots, const int64_t *ids, int32_t n) {
  int32_t i, left, wake, asleep;
  if (!w || n < 0 || (n > 0 && (!slots || !ids))) return SH_EINVAL;
  sh__mutex_lock(&w->mu);
  left = offer_left(w);
  if (n > w->capoffers) {
    int32_t cap = w->capoffers ? w->capoffers : 16;
    offer *grown;
    while (cap < n) cap *= 2;
    grown = (offer *)realloc(w->offers, (size_t)cap * sizeof *grown);
    if (!grown) {
      sh__mutex_unlock(&w->mu);
      return SH_ENOMEM;
    }
    w->offers = grown;
    w->capoffers = cap;
  }
  for (i = 0; i < n; i++) {
    if (slots[i] < 0 || slots[i] >= w->nheld) break; /* (never: the owner's own slots) */
    w->offers[i].slot = slots[i];
    w->offers[i].id = ids[i];
  }
  w->noffers = i;
  w->onext = 0;
  sh__work_set_ready(w);
  /* Only the sleepers the offer needs are woken: one an entry, less the
   * workers still looking (each looks at the offer under mu before it
   * sleeps), and after the unlock. A worker woken for nothing, or woken
   * while mu is held, sleeps again on the mutex and costs two more wakes:
   * on a 2-core VM a request's round trip on an idle pool went from 11 to
   * 35 us. Waking after the unlock loses nothing: a worker counts itself
   * asleep under mu, after it looked at the offer, so one that sleeps
   * later saw this offer first. */
  asleep = SH__LOAD(&w->sleeping);
  wake = w->paused ? 0 : i - (queued(w) == 0 ? w->looking : 0); /* (a looker takes the queue first) */
  if (wake > asleep) wake = asleep;
  sh__mutex_unlock(&w->mu);
  while (wake-- > 0) sh__cond_signal(&w->cv);
  return left;
}

int sh_work_held(sh_work *w, int32_t slot, int64_t id) {
  int held_now;
  if (!w) return 0;
  sh__mutex_lock(&w->mu);
  held_now = holds(w, slot, id);
  sh__mutex_unlock(&w->mu);
  return held_now;
}

int32_t sh_work_offered(sh_work *w) {
  int32_t left;
  if (!w) return 0;
  sh__mutex_lock(&w->mu);
  left = offer_left(w);
  sh__mutex_unlock(&w->mu);
  return left;
}

/* Whether the inbox holds requests not yet filed (read without a lock). */
static int inbox_filled(sh_work *w) {
  return SH__LOAD_U32_SC(&w->in_tail) != SH__LOAD_U32(&w->in_head);
}

int sh_work_take(sh_work *w, int32_t i, int64_t *id, sh_msg **payload) {
  worker *k;
  int rc, spun = 0, tell = 0;
  sh__mutex_lock(&w->mu);
  k = at(w, i);
  if (k && k->taken) { /* the last request is over */
    k->taken = 0;
    k->current = -1;
    w->running--;
  }
  for (;;) {
    if (!k || w->closed || k->retired) {
      rc = SH_ECLOSED;
      break;
    }
    sh__work_absorb(w);
    if (!w->paused && queued(w) == 0 && take_offered(w, k, i, id, payload, &rc)) {
      if (rc == SH_OK) break;
      sh__mutex_unlock(&w->mu); /* (the owner could not be told: see below) */
      sh_sleep_ms(1);
      sh__mutex_lock(&w->mu);
      continue;
    }
    if (!w->paused && queued(w) > 0) {
      int32_t from = sh__work_best_at(w);
      request r = sh__work_take_at(w, from);
      sh__work_set_ready(w);
      SH__STORE(&k->stop, k->halted);
      k->current = r.id;
      k->taken = 1;
      w->running++;
      *id = r.id;
      *payload = r.payload;
      sh__mutex_lock(&w->emu);
      rc = sh__work_add_event(w, r.id, SH_EV_STARTED, i, NULL, 0, 0, &tell); /* (a start tells nobody) */
      sh__mutex_unlock(&w->emu);
      if (rc != SH_OK) { /* the owner could not be told: give the request back */
        k->taken = 0, k->current = -1, w->running--;
        sh__work_put_back(w, from, r);
        sh__work_set_ready(w);
        sh__mutex_unlock(&w->mu);
        sh_sleep_ms(1);
        sh__mutex_lock(&w->mu);
        continue;
      }
      break;
    }
    if (!spun) {
      /* (unlocked: the owner may queue meanwhile, and the stop flag is read
       * as the queue is) */
      double until = sh_now_ms() + SPIN_MS;
      spun = 1;
      w->looking++;
      sh__mutex_unlock(&w->mu);
      while (!SH__LOAD(&w->ready) && !inbox_filled(w) && !SH__LOAD(&k->stop) && sh_now_ms() < until) sh__yield();
      sh__mutex_lock(&w->mu);
      w->looking--;
      continue;
    }
    spun = 0;
    /* Counted asleep before the inbox is looked at: a pusher that fills it
     * afterwards sees the count and wakes us (see push). */
    (void)SH__ADD(&w->sleeping, 1);
    if (!inbox_filled(w) || w->paused) sh__cond_wait(&w->cv, &w->mu);
    (void)SH__ADD(&w->sleeping, -1);
  }
  sh__mutex_unlock(&w->mu);
  return rc;
}

/* (lock held) A request that ends before its owner read that it started:
 * the start is no news any more, and is dropped (the owner looks at a few
 * of the latest events only: a busy pool's starts are that near). */
static void drop_unread_start(sh_work *w, int64_t id) {
  int32_t k, seen = 0;
  for (k = w->elen - 1; k >= 0 && seen < 16; k--, seen++) {
    event *e = &w->events[(w->ehead + k) % w->ecap];
    if (e->id == id && e->kind == SH_EV_STARTED) {
      e->kind = 0; /* (skipped by next_event) */
      return;
    }
  }
}

int sh_work_report(sh_work *w, int32_t i, int64_t id, int kind, sh_msg *m, double a, double b) {
  int rc, tell = 0;
  if (kind < SH_EV_STARTED || kind > SH_EV_FAILED) return SH_EINVAL;
  for (;;) {
    sh__mutex_lock(&w->emu);
    if (kind == SH_EV_DONE || kind == SH_EV_FAILED) drop_unread_start(w, id);
    rc = sh__work_add_event(w, id, kind, i, m, a, b, &tell);
    sh__mutex_unlock(&w->emu);
    /* An end the owner is never told of leaves its request running for
     * good (only a stall could end it): without memory for it, the worker
     * waits, as a take waits to record a start, while the queue is open.
     * (Progress is dropped: the next report says more.) */
    if (rc != SH_ENOMEM || kind < SH_EV_DONE || sh_work_closed(w)) break;
    sh_sleep_ms(1);
  }
  if (tell) sh_notify_signal(w->owner);
  return rc;
}

void sh_work_exited(sh_work *w, int32_t i) {
  worker *k;
  int tell = 0;
  sh__mutex_lock(&w->mu);
  k = at(w, i);
  if (k && !k->exited) {
    if (k->taken) w->running--;
    k->exited = 1, k->taken = 0, k->current = -1;
    w->live--;
    /* (out of memory here loses the event; the owner also counts live) */
    sh__mutex_lock(&w->emu);
    sh__work_add_event(w, -1, SH_EV_EXITED, i, NULL, 0, 0, &tell);
    sh__mutex_unlock(&w->emu);
    sh_notify_signal(w->owner); /* (always: the owner also counts live) */
  }
  sh__mutex_unlock(&w->mu);
}

int sh_work_next_event(sh_work *w, int64_t *id, int *kind, int32_t *wk, sh_msg **m, double *a, double *b) {
  sh__mutex_lock(&w->emu);
  for (;;) {
    event *e;
    if (w->elen == 0) {
      w->told = 0;
      sh__mutex_unlock(&w->emu);
      return SH_EAGAIN;
    }
    e = &w->events[w->ehead];
    w->ehead = (w->ehead + 1) % w->ecap;
    w->elen--;
    if (e->kind == 0) continue; /* (a start dropped: drop_unread_start) */
    *id = e->id, *kind = e->kind, *wk = e->worker, *m = e->msg, *a = e->a, *b = e->b;
    break;
  }
  sh__mutex_unlock(&w->emu);
  return SH_OK;
}

int32_t sh_work_next_events(sh_work *w, int32_t cap, int64_t *ids, int *kinds, int32_t *workers, sh_msg **msgs,
                            double *as, double *bs) {
  int32_t n = 0;
  sh__mutex_lock(&w->emu);
  while (n < cap && w->elen > 0) {
    event *e = &w->events[w->ehead];
    w->ehead = (w->ehead + 1) % w->ecap;
    w->elen--;
    if (e->kind == 0) continue; /* (a start dropped: drop_unread_start) */
    ids[n] = e->id, kinds[n] = e->kind, workers[n] = e->worker, msgs[n] = e->msg, as[n] = e->a, bs[n] = e->b;
    n++;
  }
  if (w->elen == 0) w->told = 0;
  sh__mutex_unlock(&w->emu);
  return n;
}

int64_t sh_work_current(sh_work *w, int32_t i) {
  worker *k;
  int64_t id;
  sh__mutex_lock(&w->mu);
  k = at(w, i);
  id = k && !k->exited ? k->current : -1;
  sh__mutex_unlock(&w->mu);
  return id;
}

void sh_work_set_waiting(sh_work *w, int32_t i, const char *what) {
  worker *k;
  sh__mutex_lock(&w->mu);
  k = at(w, i);
  if (k) {
    sh__copy_cut(k->waiting, sizeof k->waiting, what);
    k->since = sh_now_ms();
  }
  sh__mutex_unlock(&w->mu);
}

int sh_work_waiting(sh_work *w, int32_t i, char *what, double *since) {
  worker *k;
  int waits = 0;
  sh__mutex_lock(&w->mu);
  k = at(w, i);
  if (k && !k->exited && k->waiting[0]) {
    memcpy(what, k->waiting, sizeof k->waiting);
    *since = k->since;
    waits = 1;
  }
  sh__mutex_unlock(&w->mu);
  return waits;
}
