/*
 * stagehand._core's threads: a worker pool's queue and threads as the main
 * side holds them (the `stagehand.workers` userdata), and the threads'
 * table of the module (sh__open_threads). csrc/sh_work.c holds the queue,
 * without Lua.
 */
#include "lthreads.h"

/* ------------------------------------------------------------------------
 * A worker pool's queue and threads, as the main side holds them. */

typedef struct thread_slot {
  sh__thread thread;
  int started, joined; /* joined: joined or detached */
} thread_slot;

/* Events taken from the queue in bulk (one lock for many) and handed to
 * Lua as many at a time (_drain): the owner's side of a busy pool reads
 * hundreds a step. */
#define EVENT_BATCH 256
/* _drain's kind for a reply of one value, left unpacked (after sh_work_event's kinds) */
#define SH_DRAIN_DONE_ONE 6

typedef struct pool_ud {
  const void *tag; /* &pool_tag: what check_pool looks for */
  sh_work *work;
  sh_msg *staged; /* a request copied by stage, until commit queues it (_stage, _commit) */
  double staged_prio;
  lua_Number staged_seq;
  int32_t ev_at, ev_n;
  int64_t ev_id[EVENT_BATCH];
  int ev_kind[EVENT_BATCH];
  int32_t ev_worker[EVENT_BATCH];
  sh_msg *ev_msg[EVENT_BATCH];
  double ev_a[EVENT_BATCH], ev_b[EVENT_BATCH];
  thread_slot *threads;
  int32_t nthreads, capthreads;
  char *module, *source, *path, *cpath;
  size_t source_len;
  int objects; /* LÖVE objects cross its messages (its workers are hosted: _host) */
} pool_ud;

/* Marks a block as a pool's: check_pool takes a full userdata of a
 * pool's size holding this address as one. Checking self is then three
 * reads, where comparing metatables took twice as many calls into the
 * Lua API, and a busy pool checks twice a request. (A userdata of another
 * library's can hold this address only if C code put it there.) */
static const char pool_tag = 0;

static pool_ud *check_pool(lua_State *L) {
  pool_ud *p = NULL;
  if (lua_type(L, 1) == LUA_TUSERDATA && rawlen(L, 1) == sizeof(pool_ud)) {
    p = (pool_ud *)lua_touserdata(L, 1);
    if (p->tag != &pool_tag) p = NULL;
  }
  if (!p) p = (pool_ud *)luaL_checkudata(L, 1, WORK_MT); /* (raises, naming what it got) */
  if (!p->work) luaL_argerror(L, 1, "already closed");
  return p;
}

static void detach_all(pool_ud *p) {
  int32_t i;
  for (i = 0; i < p->nthreads; i++) {
    if (p->threads[i].started && !p->threads[i].joined) {
      sh__thread_detach(p->threads[i].thread);
      p->threads[i].joined = 1;
    }
  }
}

/* Hosted workers no host thread served: they exit here. */
static void unhost_all(pool_ud *p) {
  worker_ctx *w;
  while ((w = shl_unhost(0, p->work, -1)) != NULL) shl_worker_exit(w);
}

static int l_pool_gc(lua_State *L) {
  pool_ud *p = (pool_ud *)lua_touserdata(L, 1);
  for (; p->ev_at < p->ev_n; p->ev_at++) sh_msg_free(p->ev_msg[p->ev_at]);
  sh_msg_free(p->staged);
  p->staged = NULL;
  if (p->work) {
    /* Collected without destroy: every worker is told to stop, and each
     * closes its own state when its function returns. */
    sh_work_close(p->work);
    detach_all(p);
    unhost_all(p);
    sh_work_unref(p->work);
    p->work = NULL;
  }
  free(p->threads);
  free(p->module);
  free(p->source);
  free(p->path);
  free(p->cpath);
  p->threads = NULL, p->module = p->source = p->path = p->cpath = NULL;
  return 0;
}

/* _new_pool(notifier, module, source|nil, path, cpath) */
static int l_pool_new(lua_State *L) {
  sh_notify *n = (sh_notify *)shl_check_box(L, 1, NOTIFY_MT);
  size_t mlen, slen = 0, plen, clen;
  const char *module = luaL_checklstring(L, 2, &mlen);
  const char *source = luaL_optlstring(L, 3, NULL, &slen);
  const char *path = luaL_checklstring(L, 4, &plen), *cpath = luaL_checklstring(L, 5, &clen);
  pool_ud *p = (pool_ud *)lua_newuserdata(L, sizeof *p);
  memset(p, 0, sizeof *p);
  p->tag = &pool_tag;
  luaL_getmetatable(L, WORK_MT);
  lua_setmetatable(L, -2);
  p->module = shl_dup_str(module, mlen);
  p->source = shl_dup_str(source, slen);
  p->source_len = slen;
  p->path = shl_dup_str(path, plen);
  p->cpath = shl_dup_str(cpath, clen);
  if (!p->module || (source && !p->source) || !p->path || !p->cpath) return luaL_error(L, "not enough memory");
  p->work = sh_work_new(n);
  if (!p->work) return luaL_error(L, "not enough memory");
  return 1;
}

/* pool:_add_worker(hosted): starts a worker thread; returns its number
 * (from 0). Hosted (true): starts none, and returns its number and the
 * token its host's thread serves it under (shl_serve). */
static int l_pool_add_worker(lua_State *L) {
  pool_ud *p = check_pool(L);
  int is_hosted = lua_toboolean(L, 2);
  worker_ctx *w;
  int32_t idx;
  int rc;
  if (p->nthreads == p->capthreads) {
    int32_t cap = p->capthreads ? p->capthreads * 2 : 4;
    thread_slot *grown = (thread_slot *)realloc(p->threads, (size_t)cap * sizeof *grown);
    if (!grown) return luaL_error(L, "not enough memory");
    p->threads = grown;
    p->capthreads = cap;
  }
  w = (worker_ctx *)calloc(1, sizeof *w);
  if (!w) return luaL_error(L, "not enough memory");
  w->module = shl_dup_str(p->module, strlen(p->module));
  w->source = p->source ? shl_dup_str(p->source, p->source_len) : NULL;
  w->source_len = p->source_len;
  w->path = shl_dup_str(p->path, strlen(p->path));
  w->cpath = shl_dup_str(p->cpath, strlen(p->cpath));
  w->request = -1;
  if (!w->module || (p->source && !w->source) || !w->path || !w->cpath) {
    shl_free_ctx(w);
    return luaL_error(L, "not enough memory");
  }
  idx = sh_work_add_worker(p->work);
  if (idx < 0) {
    shl_free_ctx(w);
    return luaL_error(L, idx == SH_ECLOSED ? "the pool is closed" : "not enough memory");
  }
  if (idx != p->nthreads) {
    /* (workers and threads are numbered alike: one thread per worker) */
    sh_work_exited(p->work, idx);
    shl_free_ctx(w);
    return luaL_error(L, "stagehand: internal error: worker numbers out of step");
  }
  w->work = p->work;
  w->index = idx;
  sh_work_ref(p->work);
  if (is_hosted) {
    double token;
    w->hosted = 1;
    p->objects = 1;
    p->nthreads++;
    p->threads[idx].started = 0;
    p->threads[idx].joined = 1;
    token = shl_host_worker(w);
    if (token == 0) {
      shl_worker_exit(w);
      return luaL_error(L, "not enough memory");
    }
    lua_pushinteger(L, idx);
    lua_pushnumber(L, (lua_Number)token);
    return 2;
  }
  rc = sh__thread_start(&p->threads[idx].thread, shl_worker_main, w);
  p->nthreads++;
  p->threads[idx].started = rc == 0;
  p->threads[idx].joined = 0;
  if (rc != 0) {
    sh_work_exited(p->work, idx);
    sh_work_unref(p->work);
    shl_free_ctx(w);
    return luaL_error(L, "cannot start a worker thread (error %d)", rc);
  }
  lua_pushinteger(L, idx);
  return 1;
}

/* Pushes what a push's status says: true; false once the pool is closed;
 * false and "not enough memory". */
static int push_status(lua_State *L, int rc) {
  lua_pushboolean(L, rc == SH_OK);
  if (rc != SH_ENOMEM) return 1;
  lua_pushliteral(L, "not enough memory");
  return 2;
}

/* pool:_stage(priority, root, fn_name, ...): copies a request (the
 * function's name, then its arguments) for _commit to queue once its job
 * is made. Returns the staging's number; or nil and the reason when a
 * value cannot cross ("<root>.mesh.on_done is a function; ..."), with
 * nothing staged. A request staged earlier and never committed (its job
 * was never made) is dropped. (No lock: the queue is not touched here.)
 *
 * A method every pool shares, not a function bound to each: LuaJIT
 * compiles a call to a C function as a call to that very function, and
 * the trace then holds it, so a function bound to a pool kept the pool,
 * and its threads, alive after the game dropped it (one pool more each
 * time a new one went through the same code). */
static int l_pool_stage(lua_State *L) {
  pool_ud *p = check_pool(L);
  lua_Number prio = luaL_checknumber(L, 2);
  const char *root = luaL_checkstring(L, 3);
  sh_msg *m;
  int last = lua_gettop(L), objs = 0;
  luaL_checkstring(L, 4);
  if (p->objects) {
    lua_newtable(L);
    objs = lua_gettop(L);
  }
  /* Copied into the pool's own staging message (made here when a commit
   * took the last one): a copy the Lua API cuts short for memory leaves
   * it the pool's, where a new message would be lost. The number goes up
   * first, so an earlier staging, overwritten now, is no longer taken. */
  if (!p->staged && !(p->staged = sh_msg_new())) return luaL_error(L, "not enough memory");
  p->staged_seq = p->staged_seq + 1;
  m = shl_try_encode_objects(L, 4, last, root, 1, p->staged, objs);
  if (!m) {
    lua_pushnil(L);
    lua_insert(L, -2);
    return 2;
  }
  p->staged_prio = (double)prio;
  lua_pushnumber(L, p->staged_seq);
  if (objs && rawlen(L, objs) > 0) { /* (seq, nil, the LÖVE objects the request carries) */
    lua_pushnil(L);
    lua_pushvalue(L, objs);
    return 3;
  }
  return 1;
}

/* The request staged under number seq, now the caller's (NULL when a
 * later stage replaced it). */
static sh_msg *take_staged(pool_ud *p, lua_Number seq) {
  sh_msg *m = p->staged;
  if (!m || seq != p->staged_seq) return NULL;
  p->staged = NULL;
  return m;
}

/* pool:_commit(staging, id): queues the request staged under that number
 * as `id`: true; false once the pool is closed; false and "not enough
 * memory" (the request is dropped unless queued); nil when it is no longer
 * staged (a later stage replaced it). */
static int l_pool_commit(lua_State *L) {
  pool_ud *p = check_pool(L);
  lua_Number seq = luaL_checknumber(L, 2), id = luaL_checknumber(L, 3);
  sh_msg *m = take_staged(p, seq);
  int rc;
  if (!m) return 0;
  rc = sh_work_push(p->work, (int64_t)id, p->staged_prio, m);
  if (rc != SH_OK) sh_msg_free(m);
  return push_status(L, rc);
}

static int64_t check_request(lua_State *L, int arg) { return (int64_t)luaL_checknumber(L, arg); }

/* pool:_hold(staging, id): holds the request staged under that number as
 * `id` for the owner to offer (sh_work_hold): its slot (>= 0); false once
 * the pool is closed; false and "not enough memory"; nil when it is no
 * longer staged (a later stage replaced it). */
static int l_pool_hold(lua_State *L) {
  pool_ud *p = check_pool(L);
  lua_Number seq = luaL_checknumber(L, 2);
  int64_t id = check_request(L, 3);
  sh_msg *m = take_staged(p, seq);
  int32_t slot;
  if (!m) return 0;
  slot = sh_work_hold(p->work, id, m);
  if (slot < 0) {
    sh_msg_free(m);
    return push_status(L, slot);
  }
  lua_pushinteger(L, slot);
  return 1;
}

/* pool:_drop(slot, id): true if the held request was taken back. */
static int l_pool_drop(lua_State *L) {
  pool_ud *p = check_pool(L);
  lua_Number slot = luaL_checknumber(L, 2);
  if (slot < 0 || slot > INT32_MAX) return luaL_argerror(L, 2, "a slot");
  lua_pushboolean(L, sh_work_drop(p->work, (int32_t)slot, check_request(L, 3)) == SH_OK);
  return 1;
}

/* pool:_offer(list, n): offers the n held requests list names (slot, id,
 * slot, id, ...), best first; returns how many of the last offer were
 * still held. */
static int l_pool_offer(lua_State *L) {
  pool_ud *p = check_pool(L);
  lua_Integer n = luaL_checkinteger(L, 3), i;
  int32_t *slots;
  int64_t *ids;
  int32_t left;
  luaL_checktype(L, 2, LUA_TTABLE);
  if (n < 0 || n > 1 << 20) return luaL_argerror(L, 3, "a count from 0 to 2^20");
  ids = (int64_t *)lua_newuserdata(L, (size_t)(n > 0 ? n : 1) * (sizeof *slots + sizeof *ids));
  slots = (int32_t *)(void *)(ids + (n > 0 ? n : 1));
  for (i = 0; i < n; i++) {
    lua_Number s, id;
    lua_rawgeti(L, 2, (int)(2 * i + 1));
    lua_rawgeti(L, 2, (int)(2 * i + 2));
    s = lua_tonumber(L, -2), id = lua_tonumber(L, -1);
    lua_pop(L, 2);
    if (s < 0 || s > INT32_MAX) return luaL_argerror(L, 2, "slots from _hold");
    slots[i] = (int32_t)s;
    ids[i] = (int64_t)id;
  }
  left = sh_work_offer(p->work, slots, ids, (int32_t)n);
  if (left == SH_ENOMEM) return luaL_error(L, "not enough memory");
  lua_pushinteger(L, left < 0 ? 0 : left);
  return 1;
}

/* pool:_held(slot, id): whether the request is still held (no worker took it). */
static int l_pool_held(lua_State *L) {
  pool_ud *p = check_pool(L);
  lua_Number slot = luaL_checknumber(L, 2);
  lua_pushboolean(L, slot >= 0 && slot <= INT32_MAX && sh_work_held(p->work, (int32_t)slot, check_request(L, 3)));
  return 1;
}

static int l_pool_offered(lua_State *L) {
  pool_ud *p = check_pool(L);
  lua_pushinteger(L, sh_work_offered(p->work));
  return 1;
}

static int l_pool_remove(lua_State *L) {
  pool_ud *p = check_pool(L);
  lua_pushboolean(L, sh_work_remove(p->work, check_request(L, 2)) == SH_OK);
  return 1;
}
static int l_pool_abort(lua_State *L) {
  pool_ud *p = check_pool(L);
  int32_t on = sh_work_abort_running(p->work, check_request(L, 2), lua_toboolean(L, 3));
  if (on < 0) return 0;
  lua_pushinteger(L, on);
  return 1;
}
static int l_pool_counts(lua_State *L) {
  pool_ud *p = check_pool(L);
  lua_pushinteger(L, sh_work_queued(p->work));
  lua_pushinteger(L, sh_work_running(p->work));
  lua_pushinteger(L, sh_work_live_workers(p->work));
  return 3;
}
static int l_pool_pause(lua_State *L) {
  pool_ud *p = check_pool(L);
  sh_work_pause(p->work, lua_toboolean(L, 2));
  return 0;
}
static int l_pool_close(lua_State *L) {
  pool_ud *p = check_pool(L);
  sh_work_close(p->work);
  unhost_all(p); /* (a hosted worker no thread serves yet has nothing to wait for) */
  return 0;
}
static int l_pool_stop_worker(lua_State *L) {
  pool_ud *p = check_pool(L);
  lua_Number i = luaL_checknumber(L, 2);
  sh_work_stop_worker(p->work, (int32_t)i, lua_toboolean(L, 3));
  return 0;
}

/* pool:_drain(buf, handled): copies up to EVENT_BATCH events into buf,
 * three entries an event (what, a, b, from buf[1] on), and returns how
 * many: one call for a step's events, not one an event (on LuaJIT each
 * call of a C function ends a trace). `what` is the request's id times 8
 * plus the event's kind (an exit's: its worker's index times 8 plus the
 * kind). a and b are, by kind: progress's done and total; a reply's
 * values (a packed table; b is left as it was), or for a reply of one
 * value the value itself, under the kind SH_DRAIN_DONE_ONE; a failure's
 * message and traceback; none for a start or an exit (both left as they
 * were).
 *
 * The events stay the pool's until a later call says the Lua side has
 * handled them (`handled`, the first that many of the last batch): memory
 * that runs out while a reply is copied, or while the Lua side handles
 * the batch, loses no reply (its events come again, and handling one
 * twice changes nothing), and no message (each is freed once handled). */
static int l_pool_drain(lua_State *L) {
  pool_ud *p = check_pool(L);
  lua_Integer handled = luaL_checkinteger(L, 3);
  int fetch = lua_type(L, 4) == LUA_TFUNCTION ? 4 : 0; /* (a LÖVE pool's: its replies' objects) */
  int32_t at, k, n;
  luaL_checktype(L, 2, LUA_TTABLE);
  for (; handled > 0 && p->ev_at < p->ev_n; handled--, p->ev_at++) {
    sh_msg_free(p->ev_msg[p->ev_at]);
    p->ev_msg[p->ev_at] = NULL;
  }
  if (p->ev_at == p->ev_n) {
    p->ev_at = 0;
    p->ev_n = sh_work_next_events(p->work, EVENT_BATCH, p->ev_id, p->ev_kind, p->ev_worker, p->ev_msg, p->ev_a,
                                  p->ev_b);
  }
  for (n = 0, at = p->ev_at; at < p->ev_n; n++, at++) {
    int kind = p->ev_kind[at];
    int32_t wk = p->ev_worker[at];
    sh_msg *m = p->ev_msg[at];
    int slots = 0, wants = 0; /* (a and b: what the kind left on the stack; how many it writes) */
    k = n * 3;
    if (kind == SH_EV_PROGRESS) {
      lua_pushnumber(L, (lua_Number)p->ev_a[at]);
      lua_pushnumber(L, (lua_Number)p->ev_b[at]);
      slots = wants = 2;
    } else if (kind == SH_EV_EXITED) {
      if (wk >= 0 && wk < p->nthreads && p->threads[wk].started && !p->threads[wk].joined) {
        sh__thread_join(p->threads[wk].thread);
        p->threads[wk].joined = 1;
      }
    } else if ((kind == SH_EV_DONE || kind == SH_EV_FAILED) && !m) {
      lua_pushstring(L, "not enough memory for a worker's reply");
      kind = SH_EV_FAILED;
      slots = 1, wants = 2;
    } else if (kind == SH_EV_DONE || kind == SH_EV_FAILED) {
      int base = lua_gettop(L), i, nv = shl_decode_objects(L, m, 1, fetch, (double)p->ev_id[at], NULL);
      if (kind == SH_EV_FAILED) {
        slots = nv < 2 ? nv : 2, wants = 2;
        lua_settop(L, base + slots);
      } else if (nv == 1) {
        /* (one value, as most replies are, left for the Lua side to pack:
         * a table made in compiled code costs less than one made here) */
        lua_settop(L, base + 1);
        kind = SH_DRAIN_DONE_ONE;
        slots = wants = 1;
      } else {
        /* (packed as the Lua side packs values) */
        lua_createtable(L, nv, 1);
        for (i = nv; i >= 1; i--) {
          lua_pushvalue(L, base + i);
          lua_rawseti(L, -2, i);
        }
        lua_pushinteger(L, nv);
        lua_setfield(L, -2, "n");
        if (nv > 0) { /* (none: the table is at base + 1 already) */
          lua_replace(L, base + 1);
          lua_settop(L, base + 1);
        }
        slots = wants = 1;
      }
    }
    while (slots < wants) {
      lua_pushnil(L);
      slots++;
    }
    if (wants == 2) lua_rawseti(L, 2, k + 3);
    if (wants >= 1) lua_rawseti(L, 2, k + 2);
    /* (what the event is about, times 8, plus its kind: one entry, not
     * two; an exit is about its worker) */
    lua_pushnumber(L, (lua_Number)(kind == SH_EV_EXITED ? wk : p->ev_id[at]) * 8 + kind);
    lua_rawseti(L, 2, k + 1);
  }
  lua_pushinteger(L, n);
  return 1;
}

/* pool:_worker(i): its request (or nil), and what it waits on and since
 * when (sh_now_ms), or nil. */
static int l_pool_worker(lua_State *L) {
  pool_ud *p = check_pool(L);
  int32_t i = (int32_t)luaL_checknumber(L, 2);
  int64_t cur = sh_work_current(p->work, i);
  double since = 0;
  char what[SH_WAITING_LEN];
  int waits = sh_work_waiting(p->work, i, what, &since);
  if (cur >= 0) lua_pushnumber(L, (lua_Number)cur);
  else lua_pushnil(L);
  if (waits) {
    lua_pushstring(L, what);
    lua_pushnumber(L, (lua_Number)since);
    return 3;
  }
  return 1;
}

/* pool:_unhost(i): hosted worker i, if no host thread served it yet (its
 * thread failed to start), exits now; returns whether it did. */
static int l_pool_unhost(lua_State *L) {
  pool_ud *p = check_pool(L);
  int32_t i = (int32_t)luaL_checknumber(L, 2);
  worker_ctx *w = shl_unhost(0, p->work, i);
  if (w) shl_worker_exit(w);
  lua_pushboolean(L, w != NULL);
  return 1;
}

/* pool:_objects(): LÖVE objects cross its messages from now on (its
 * workers will be hosted: LÖVE threads). */
static int l_pool_objects(lua_State *L) {
  pool_ud *p = check_pool(L);
  p->objects = 1;
  return 0;
}

/* pool:_unserved(): how many of its hosted workers no thread serves yet. */
static int l_pool_unserved(lua_State *L) {
  pool_ud *p = check_pool(L);
  lua_pushinteger(L, shl_hosted_count(p->work));
  return 1;
}

/* pool:_detach(): the threads still running go on alone. */
static int l_pool_detach(lua_State *L) {
  pool_ud *p = check_pool(L);
  detach_all(p);
  return 0;
}

static const luaL_Reg pool_methods[] = {
    {"_add_worker", l_pool_add_worker}, {"_remove", l_pool_remove},
    {"_abort", l_pool_abort}, {"_counts", l_pool_counts},
    {"_pause", l_pool_pause}, {"_close", l_pool_close},
    {"_stop_worker", l_pool_stop_worker}, {"_drain", l_pool_drain},
    {"_stage", l_pool_stage}, {"_commit", l_pool_commit}, {"_worker", l_pool_worker},
    {"_detach", l_pool_detach}, {"_hold", l_pool_hold}, {"_drop", l_pool_drop}, {"_offer", l_pool_offer},
    {"_offered", l_pool_offered}, {"_held", l_pool_held}, {"_unhost", l_pool_unhost},
    {"_unserved", l_pool_unserved}, {"_objects", l_pool_objects}, {NULL, NULL}};

static int l_threads_default(lua_State *L) {
  lua_pushinteger(L, sh_threads_default());
  return 1;
}

static const luaL_Reg funcs[] = {
    {"notifier", shl_notify_new}, {"notifier_gen", shl_notify_gen}, {"notifier_wait", shl_notify_wait},
    {"notifier_signal", shl_notify_signal}, {"notifier_fd", shl_notify_fd}, {"notifier_clear", shl_notify_clear},
    {"port", shl_port_new}, {"rounds", shl_rounds_new}, {"pool", l_pool_new},
    {"default_threads", l_threads_default}, {"serve", shl_serve}, {NULL, NULL}};

/* Pushes the threads' table of stagehand._core (`threads`), with the
 * metatables of ports and round barriers (shl_port_methods, shl_rounds_methods:
 * the Lua side adds the waits a job makes). */
int sh__open_threads(lua_State *L);
int sh__open_threads(lua_State *L) {
  shl_open_types(L);
  if (luaL_newmetatable(L, WORK_MT)) {
    lua_pushcfunction(L, l_pool_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushstring(L, WORK_MT);
    lua_setfield(L, -2, "__name");
    lua_newtable(L);
    shl_set_methods(L, pool_methods);
    lua_setfield(L, -2, "__index");
  }
  lua_pop(L, 1);
  lua_newtable(L);
  shl_set_methods(L, funcs);
  luaL_getmetatable(L, PORT_MT);
  lua_getfield(L, -1, "__index");
  lua_setfield(L, -3, "port_methods");
  lua_pop(L, 1);
  luaL_getmetatable(L, ROUNDS_MT);
  lua_getfield(L, -1, "__index");
  lua_setfield(L, -3, "rounds_methods");
  lua_pop(L, 1);
  return 1;
}

