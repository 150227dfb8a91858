/*
 * stagehand._core's threads: a worker's Lua state and its main loop. A
 * worker is a thread (sh_platform.h) with a Lua state of its own, made with
 * the same runtime the module was built for (luaL_newstate of the host's
 * own library): standard libraries, the creating state's package.path and
 * package.cpath, and `stagehand.worker` preloaded. A hosted worker runs
 * the same loop in a state its host made (a LÖVE thread's).
 */
#include "lthreads.h"

#include <limits.h>

/* ------------------------------------------------------------------------
 * Worker threads. */

char *shl_dup_str(const char *s, size_t n) {
  char *d;
  if (!s) return NULL;
  d = (char *)malloc(n + 1);
  if (!d) return NULL;
  memcpy(d, s, n);
  d[n] = '\0';
  return d;
}

void shl_free_ctx(worker_ctx *w) {
  free(w->module);
  free(w->source);
  free(w->path);
  free(w->cpath);
  free(w);
}

#ifndef LUAJIT_VERSION
/* A worker retired (its pool destroyed, or its request aborted with
 * respawn_on_abort) whose function never looks at stopping(): PUC Lua runs
 * this hook every HOOK_COUNT instructions, and it ends the function.
 * (LuaJIT's compiled loops run no hooks, and a count hook there would keep
 * every worker from compiling: LuaJIT workers get none.) */
#define HOOK_COUNT 10000
static void stop_hook(lua_State *L, lua_Debug *ar) {
  worker_ctx *w = shl_this_worker(L);
  (void)ar;
  if (w && shl_stopped(sh_work_stop_flag(w->work, w->index)) && sh_work_retired(w->work, w->index))
    luaL_error(L, "stopped: the worker was retired while its function ran");
}
#endif

/* Pushes what the value at idx says of itself: a string or number as
 * itself, else its __tostring, a table's message, or its type. */
static const char *push_said(lua_State *L, int idx) {
  int t = lua_type(L, idx);
  if (t == LUA_TSTRING || t == LUA_TNUMBER) {
    lua_pushvalue(L, idx);
    return lua_tostring(L, -1);
  }
  if (luaL_callmeta(L, idx, "__tostring")) {
    if (lua_type(L, -1) == LUA_TSTRING) return lua_tostring(L, -1);
    lua_pop(L, 1);
  }
  if (t == LUA_TTABLE) {
    lua_getfield(L, idx, "message");
    if (lua_type(L, -1) == LUA_TSTRING) return lua_tostring(L, -1);
    lua_pop(L, 1);
  }
  return lua_pushfstring(L, "(a %s was raised)", luaL_typename(L, idx));
}

static int protected_run(lua_State *L);

/* How many frames lie below the request's own (protected_run's): none on
 * stagehand's threads, where C calls it; on a LÖVE thread, the Lua code
 * that started the worker and called serve, which a worker's traceback
 * has no use for. The request's frame is the topmost protected_run among
 * the bottom few (a request that itself serves a hosted worker has its own
 * below it). The depth is found by halving: lua_getstack walks from the
 * top, so a walk level by level would take a stack overflow's traceback
 * minutes on Lua 5.4. */
static int frames_below_run(lua_State *L) {
  lua_Debug ar;
  int lo = 0, hi = 1, level, below = 0;
  while (lua_getstack(L, hi, &ar)) {
    lo = hi;
    if (hi > INT_MAX / 2) return 0;
    hi *= 2;
  }
  while (hi - lo > 1) { /* (lo has a frame, hi none) */
    int mid = lo + (hi - lo) / 2;
    if (lua_getstack(L, mid, &ar)) lo = mid;
    else hi = mid;
  }
  for (level = lo; level >= 0 && level > lo - 16; level--) {
    if (lua_getstack(L, level, &ar) && lua_getinfo(L, "f", &ar)) {
      if (lua_tocfunction(L, -1) == protected_run) below = lo - level;
      lua_pop(L, 1);
    }
  }
  return below;
}

/* The message handler of a worker's function: keeps what was raised, as
 * it was, in the registry (a plain-data table crosses to the main side as
 * the failure's cause), and returns the traceback, headed by what the
 * value says of itself, down to the request's own frame. */
static int traceback(lua_State *L) {
  const char *msg;
  int below = frames_below_run(L);
  lua_settop(L, 1);
  lua_pushvalue(L, 1);
  lua_setfield(L, LUA_REGISTRYINDEX, ERROR_KEY);
  msg = push_said(L, 1);
  lua_getglobal(L, "debug");
  if (lua_type(L, -1) == LUA_TTABLE) {
    lua_getfield(L, -1, "traceback");
    if (lua_type(L, -1) == LUA_TFUNCTION) {
      size_t len, cut;
      const char *tb;
      lua_pushstring(L, msg);
      lua_pushinteger(L, 2);
      lua_call(L, 2, 1);
      tb = lua_tolstring(L, -1, &len);
      if (tb == NULL || below == 0) return 1;
      /* (the bottom frames are always written out in full, one a line) */
      for (cut = len; cut > 0 && below > 0; cut--)
        if (tb[cut - 1] == '\n') below--;
      if (below == 0) lua_pushlstring(L, tb, cut);
      return 1;
    }
  }
  lua_pushstring(L, msg);
  return 1;
}

/* Builds the worker's module: its table, or an error message, left in the
 * registry under "stagehand.worker module" / "stagehand.worker load error". */
static int load_module(lua_State *L) {
  worker_ctx *w = (worker_ctx *)lua_touserdata(L, 1);
  lua_getglobal(L, "package");
  if (w->path) {
    lua_pushstring(L, w->path);
    lua_setfield(L, -2, "path");
  }
  if (w->cpath) {
    lua_pushstring(L, w->cpath);
    lua_setfield(L, -2, "cpath");
  }
  lua_getfield(L, -1, "preload");
  lua_pushcfunction(L, shl_open_worker_api);
  lua_setfield(L, -2, "stagehand.worker");
  lua_pop(L, 2);
  if (w->source) {
    lua_pushfstring(L, "=%s", w->module);
    if (luaL_loadbuffer(L, w->source, w->source_len, lua_tostring(L, -1)) != 0) return lua_error(L);
    lua_pushstring(L, w->module);
    lua_call(L, 1, 1);
  } else {
    lua_getglobal(L, "require");
    lua_pushstring(L, w->module);
    lua_call(L, 1, 1);
  }
  if (lua_type(L, -1) != LUA_TTABLE)
    return luaL_error(L, "it returned %s, not a table of functions", luaL_typename(L, -1));
  lua_setfield(L, LUA_REGISTRYINDEX, "stagehand.worker module");
  return 0;
}

/* A request, run under lua_pcall: its message (the function's name, then
 * its arguments) decoded, the function called under a traceback handler,
 * its results encoded. Raises the failure's message; leaves the encoded
 * results in upvalue-free form in the ctx. */
typedef struct running {
  worker_ctx *w;
  sh_msg *payload, *result;
  int oom; /* the function ran out of memory (its message handler never ran) */
} running;

/* A request, run under lua_pcall: its message (the function's name, then
 * its arguments) decoded, the function called under the traceback handler,
 * its results encoded into r->result. A failure raises its message; when
 * the function itself raised, its traceback is left in the registry. */
static int protected_run(lua_State *L) {
  running *r = (running *)lua_touserdata(L, 1);
  int base, n;
  const char *fname;
  sh_msg *payload = r->payload;
  lua_settop(L, 0);
  if (r->w->tb_ref != LUA_NOREF) lua_rawgeti(L, LUA_REGISTRYINDEX, r->w->tb_ref); /* 1 */
  else lua_pushcfunction(L, traceback);
  if (r->w->hosted) lua_rawgeti(L, LUA_REGISTRYINDEX, r->w->fetch_ref); /* 2 */
  base = lua_gettop(L);
  /* (the payload stays r's until the reply is written into it: whatever
   * raises before then leaves it to run_request to free) */
  /* (the name at base + 1, the arguments after) */
  n = shl_decode_objects(L, payload, 1, r->w->hosted ? 2 : 0, (double)r->w->request, &r->w->moved_objects);
  fname = lua_tostring(L, base + 1);
  if (r->w->mod_ref != LUA_NOREF) lua_rawgeti(L, LUA_REGISTRYINDEX, r->w->mod_ref);
  else lua_getfield(L, LUA_REGISTRYINDEX, "stagehand.worker module");
  if (lua_type(L, -1) != LUA_TTABLE) {
    lua_getfield(L, LUA_REGISTRYINDEX, "stagehand.worker load error");
    return luaL_error(L, "module '%s' failed to load: %s", r->w->module, lua_tostring(L, -1));
  }
  lua_pushvalue(L, base + 1); /* (the name decoded: no string made again) */
  lua_gettable(L, -2);
  if (lua_type(L, -1) != LUA_TFUNCTION)
    return luaL_error(L, "module '%s' has no function '%s'", r->w->module, fname ? fname : "?");
  lua_replace(L, base + 1);
  lua_settop(L, base + n);
  n = lua_pcall(L, n - 1, LUA_MULTRET, 1);
  if (n != 0) {
    /* (A memory error skips the message handler: what the registry holds
     * is an earlier failure's, and the message is Lua's own.) */
    if (n == LUA_ERRMEM) r->oom = 1;
    else if (n == LUA_ERRRUN) {
      r->w->tb_set = 1;
      lua_setfield(L, LUA_REGISTRYINDEX, TRACEBACK_KEY);
      lua_getfield(L, LUA_REGISTRYINDEX, ERROR_KEY);
      lua_pushnil(L);
      lua_setfield(L, LUA_REGISTRYINDEX, ERROR_KEY); /* (nothing kept alive for good) */
    }
    return lua_error(L);
  }
  /* (written into the payload, which stays r's until it is the reply:
   * results that cannot cross, or memory that runs out, leave it to
   * run_request to free) */
  if (r->w->hosted) {
    int last = lua_gettop(L), objs;
    sh_msg *m;
    lua_newtable(L);
    objs = lua_gettop(L);
    m = shl_try_encode_objects(L, base + 1, last, "result", 1, payload, objs);
    if (!m) lua_error(L);
    if (rawlen(L, objs) > 0) { /* (sent before the reply: the owner fetches them as it reads it) */
      r->w->moved_objects = 1;
      lua_rawgeti(L, LUA_REGISTRYINDEX, r->w->put_ref);
      lua_pushnumber(L, (lua_Number)r->w->request);
      lua_pushvalue(L, objs);
      lua_call(L, 2, 0);
    }
    r->result = m;
  } else {
    r->result = shl_encode_values(L, base + 1, lua_gettop(L), "result", 1, payload);
  }
  r->payload = NULL;
  return 0;
}

/* A message of strings (counted), or NULL without memory. */
static sh_msg *strings_msg(const char *const *s, const size_t *lens, uint32_t n) {
  sh_msg *m = sh_msg_new();
  uint32_t k, no_tables = 0;
  int ok;
  if (!m) return NULL;
  ok = sh_msg_put(m, &no_tables, sizeof no_tables) == SH_OK && sh_msg_put(m, &n, sizeof n) == SH_OK;
  for (k = 0; k < n && ok; k++) {
    char tag = 's';
    uint32_t len = (uint32_t)lens[k];
    ok = sh_msg_put(m, &tag, 1) == SH_OK && sh_msg_put(m, &len, sizeof len) == SH_OK &&
         sh_msg_put(m, s[k], lens[k]) == SH_OK;
  }
  if (!ok) {
    sh_msg_free(m);
    return NULL;
  }
  return m;
}

/* Hands the C heap's free memory back to the system (glibc keeps a
 * thread's freed blocks in that thread's own arena, where the game's
 * thread cannot reuse them). */
static void sh__trim_heap(void) {
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

/* A raised plain-data table at 2 and the traceback at 3 as a hosted
 * worker's failure, written into `into`: the LÖVE objects the table holds
 * go as a result's do. Leaves the stack as it was; the message, or NULL
 * (`into` stays the caller's either way). */
static sh_msg *hosted_failure(lua_State *L, worker_ctx *w, sh_msg *into) {
  sh_msg *m;
  lua_newtable(L); /* 4: the objects */
  m = shl_try_encode_objects(L, 2, 3, "error", 1, into, 4);
  if (!m) {
    lua_settop(L, 3); /* (the reason it cannot cross: it goes by what it says) */
    return NULL;
  }
  if (rawlen(L, 4) > 0) {
    w->moved_objects = 1;
    lua_rawgeti(L, LUA_REGISTRYINDEX, w->put_ref);
    lua_pushnumber(L, (lua_Number)w->request);
    lua_pushvalue(L, 4);
    if (lua_pcall(L, 2, 0, 0) != 0) { /* (out of memory: the table goes by what it says) */
      if (m != into) sh_msg_free(m);
      m = NULL;
    }
  }
  lua_settop(L, 3);
  return m;
}

/* A failure's message, run under lua_pcall: what was raised (a plain-data
 * table copied as it is, LÖVE objects in it included on a hosted worker,
 * anything else as the string it says of itself) and the traceback (the
 * function's, or the message again when the failure came before or after
 * it ran). Written into *out, the request's message, as a reply is (a new
 * one when it is NULL): a copy the Lua API cuts short for memory leaves
 * it in *out, for run_request to free, where a new one would be lost. */
static int failure_msg(lua_State *L) {
  sh_msg **out = (sh_msg **)lua_touserdata(L, 1), *into = *out, *m;
  worker_ctx *w;
  lua_settop(L, 2); /* (what was raised at 2) */
  lua_getfield(L, LUA_REGISTRYINDEX, TRACEBACK_KEY);
  if (lua_type(L, 3) != LUA_TSTRING) {
    lua_pop(L, 1);
    push_said(L, 2);
  }
  if (lua_type(L, 2) == LUA_TTABLE) {
    w = shl_this_worker(L);
    if (lua_getmetatable(L, 2)) lua_pop(L, 1);
    else if (w && w->hosted) {
      if ((m = hosted_failure(L, w, into)) != NULL) {
        *out = m;
        return 0;
      }
    } else if ((m = shl_try_encode_values(L, 2, 3, "error", 1, into)) != NULL) {
      *out = m;
      return 0;
    } else lua_pop(L, 1); /* (the reason it cannot cross: it goes by what it says) */
  }
  if (lua_type(L, 2) != LUA_TSTRING) {
    push_said(L, 2);
    lua_replace(L, 2);
  }
  lua_settop(L, 3);
  *out = shl_encode_values(L, 2, 3, "error", 1, into);
  return 0;
}

static void run_request(lua_State *L, worker_ctx *w, int64_t id, sh_msg *payload) {
  running r;
  int rc;
  r.w = w, r.payload = payload, r.result = NULL, r.oom = 0;
  w->request = id;
  if (w->tb_set) { /* (an earlier failure's) */
    w->tb_set = 0;
    lua_pushnil(L);
    lua_setfield(L, LUA_REGISTRYINDEX, TRACEBACK_KEY);
  }
  if (w->run_ref != LUA_NOREF) lua_rawgeti(L, LUA_REGISTRYINDEX, w->run_ref);
  else lua_pushcfunction(L, protected_run);
  lua_pushlightuserdata(L, &r);
  rc = lua_pcall(L, 1, 0, 0);
  if (rc == 0) {
    if (sh_work_report(w->work, w->index, id, SH_EV_DONE, r.result, 0, 0) != SH_OK) sh_msg_free(r.result);
  } else {
    /* (it failed before its reply took the payload: the failure is
     * written into it instead) */
    sh_msg *m = r.payload;
    r.payload = NULL;
    if (rc == LUA_ERRMEM || r.oom) {
      /* What the failed request allocated goes back now, not when the
       * worker's next request happens to collect it: the game's own state
       * may be the one short of memory. */
      sh_msg_free(m);
      m = NULL;
      lua_settop(L, 0);
      lua_gc(L, LUA_GCCOLLECT, 0);
      sh__trim_heap();
    } else {
      if (w->fail_ref != LUA_NOREF) lua_rawgeti(L, LUA_REGISTRYINDEX, w->fail_ref);
      else lua_pushcfunction(L, failure_msg);
      lua_insert(L, -2);
      lua_pushlightuserdata(L, &m);
      lua_insert(L, -2);
      if (lua_pcall(L, 2, 0, 0) != 0) {
        sh_msg_free(m);
        m = NULL;
        lua_settop(L, 0);
        lua_gc(L, LUA_GCCOLLECT, 0);
      }
    }
    if (!m) {
      static const char *const oom[2] = {"not enough memory", "not enough memory"};
      static const size_t lens[2] = {17, 17};
      m = strings_msg(oom, lens, 2);
    }
    if (sh_work_report(w->work, w->index, id, SH_EV_FAILED, m, 0, 0) != SH_OK) sh_msg_free(m);
  }
  w->request = -1;
  lua_settop(L, 0);
  if (w->moved_objects) { /* (after the reply: the game does not wait for it) */
    w->moved_objects = 0;
    lua_gc(L, LUA_GCCOLLECT, 0);
  }
}

/* Keeps what every request uses in the registry (worker_ctx's refs): run
 * under lua_pcall once the module is loaded; on failure (out of memory)
 * the refs left unset are made anew for each request instead. */
static int keep_refs(lua_State *L) {
  worker_ctx *w = (worker_ctx *)lua_touserdata(L, 1);
  lua_pushcfunction(L, protected_run);
  w->run_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_pushcfunction(L, traceback);
  w->tb_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_pushcfunction(L, failure_msg);
  w->fail_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_getfield(L, LUA_REGISTRYINDEX, "stagehand.worker module");
  if (lua_type(L, -1) == LUA_TTABLE) w->mod_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  return 0;
}

/* Readies a worker's state: its context in the registry, its module
 * loaded (or why it failed, kept for each request to report), the refs
 * every request uses. */
static void set_up_worker(lua_State *L, worker_ctx *w) {
  w->run_ref = w->tb_ref = w->mod_ref = w->fail_ref = LUA_NOREF;
  w->tb_set = 0;
  shl_open_types(L);
  lua_pushlightuserdata(L, w);
  lua_setfield(L, LUA_REGISTRYINDEX, WORKER_KEY);
#ifndef LUAJIT_VERSION
  if (!w->hosted) lua_sethook(L, stop_hook, LUA_MASKCOUNT, HOOK_COUNT);
#endif
  lua_pushcfunction(L, load_module);
  lua_pushlightuserdata(L, w);
  if (lua_pcall(L, 1, 0, 0) != 0) {
    if (!lua_tostring(L, -1)) {
      lua_pop(L, 1);
      lua_pushstring(L, "(an error without a message)");
    }
    lua_setfield(L, LUA_REGISTRYINDEX, "stagehand.worker load error");
  }
  lua_settop(L, 0);
  lua_pushcfunction(L, keep_refs);
  lua_pushlightuserdata(L, w);
  lua_pcall(L, 1, 0, 0);
  lua_settop(L, 0);
}

/* Runs requests until the worker is told to stop or retired (L NULL: no
 * state could be made, and every request fails, with no message). */
static void serve_requests(lua_State *L, worker_ctx *w) {
  int64_t id;
  sh_msg *payload;
  while (sh_work_take(w->work, w->index, &id, &payload) == SH_OK) {
    if (!L) {
      sh_msg_free(payload);
      sh_work_report(w->work, w->index, id, SH_EV_FAILED, NULL, 0, 0);
      continue;
    }
    run_request(L, w, id, payload);
    if (sh_work_retired(w->work, w->index)) break;
  }
}

void shl_worker_exit(worker_ctx *w) {
  sh_work_exited(w->work, w->index);
  sh_work_unref(w->work);
  shl_free_ctx(w);
}

SH__THREAD_RETURN shl_worker_main(void *arg) {
  worker_ctx *w = (worker_ctx *)arg;
  lua_State *L = luaL_newstate();
  if (L) {
    luaL_openlibs(L);
    set_up_worker(L, w);
  }
  serve_requests(L, w);
  if (L) lua_close(L);
  shl_worker_exit(w);
  return 0;
}

/* ------------------------------------------------------------------------
 * Hosted workers: a pool's worker whose thread the host starts (LÖVE's
 * love.thread, whose states can require love.image and read the game's
 * archive). _add_worker(true) registers it under a token, a number; the
 * host's thread calls threads.serve(token, fetch, put), which runs its
 * requests in that thread's own state and returns once the worker stops.
 * A token is served once; one the registry does not hold is refused, so
 * no number from Lua reaches a pointer. */

typedef struct hosted {
  double token;
  worker_ctx *w;
  struct hosted *next;
} hosted;

static sh__mutex hosted_lock = SH__MUTEX_INIT;
static hosted *hosted_list;
static double hosted_tokens;

/* Registers w; its token, or 0 without memory. */
double shl_host_worker(worker_ctx *w) {
  hosted *h = (hosted *)malloc(sizeof *h);
  double token;
  if (!h) return 0;
  sh__mutex_lock(&hosted_lock);
  token = ++hosted_tokens;
  h->token = token, h->w = w, h->next = hosted_list;
  hosted_list = h;
  sh__mutex_unlock(&hosted_lock);
  return token;
}

/* Takes the worker out of the registry: by token (work NULL), or by its
 * pool and number (index -1: any of the pool's). NULL when none is there. */
worker_ctx *shl_unhost(double token, const sh_work *work, int32_t index) {
  hosted **at, *h;
  worker_ctx *w = NULL;
  sh__mutex_lock(&hosted_lock);
  for (at = &hosted_list; (h = *at) != NULL; at = &h->next) {
    if (work ? (h->w->work == work && (index < 0 || h->w->index == index)) : h->token == token) {
      *at = h->next;
      w = h->w;
      free(h);
      break;
    }
  }
  sh__mutex_unlock(&hosted_lock);
  return w;
}

/* How many of the pool's hosted workers wait for a thread to serve them. */
int shl_hosted_count(const sh_work *work) {
  hosted *h;
  int n = 0;
  sh__mutex_lock(&hosted_lock);
  for (h = hosted_list; h; h = h->next) n += h->w->work == work;
  sh__mutex_unlock(&hosted_lock);
  return n;
}

/* threads.serve(token, fetch, put): in the host's thread. fetch(id)
 * returns the LÖVE objects of request id's payload; put(id, objects) sends
 * those of its result. */
int shl_serve(lua_State *L) {
  double token = luaL_checknumber(L, 1);
  int fetch_ref, put_ref;
  worker_ctx *w;
  luaL_checktype(L, 2, LUA_TFUNCTION);
  luaL_checktype(L, 3, LUA_TFUNCTION);
  lua_pushvalue(L, 2);
  fetch_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_pushvalue(L, 3);
  put_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  w = shl_unhost(token, NULL, -1);
  if (!w) {
    luaL_unref(L, LUA_REGISTRYINDEX, fetch_ref);
    luaL_unref(L, LUA_REGISTRYINDEX, put_ref);
    return luaL_error(L, "bad argument 'token' to threads.serve: no worker waits under %f (served already, or its"
                         " pool is gone)", token);
  }
  w->fetch_ref = fetch_ref, w->put_ref = put_ref;
  sh__thread_lower_priority(); /* (the host's thread is the worker's for good) */
  lua_settop(L, 0);
  set_up_worker(L, w);
  serve_requests(L, w);
  /* (the state is the host's and lives on: nothing in it points at w) */
  lua_pushnil(L);
  lua_setfield(L, LUA_REGISTRYINDEX, WORKER_KEY);
  luaL_unref(L, LUA_REGISTRYINDEX, fetch_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, put_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, w->run_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, w->tb_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, w->fail_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, w->mod_ref);
  shl_worker_exit(w);
  return 0;
}

