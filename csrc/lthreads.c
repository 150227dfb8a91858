/*
 * stagehand._core's threads: worker states, and the Lua side of messages,
 * ports and round barriers (csrc/sh_threads.h holds everything that needs
 * no Lua). Part of the classic C module on every runtime: LuaJIT's FFI
 * backend reaches the hot paths of jobs, not these.
 *
 * A worker is a thread (sh_platform.h) with a Lua state of its own, made with the
 * same runtime the module was built for (luaL_newstate of the host's own
 * library): standard libraries, the creating state's package.path and
 * package.cpath, and `stagehand.worker` preloaded. Values cross as deep
 * copies (encode/decode below); ports and round barriers as references.
 */
#include "sh_platform.h"
#include "sh_threads.h"
#include "stagehand.h"

#include <math.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lauxlib.h"
#include "lua.h"
#include "lualib.h"

#define NOTIFY_MT "stagehand.notifier"
#define PORT_MT "stagehand.port"
#define ROUNDS_MT "stagehand.rounds"
#define WORK_MT "stagehand.workers"
#define WORKER_KEY "stagehand.worker context"
#define ERROR_KEY "stagehand.worker error"         /* what the last failing function raised */
#define TRACEBACK_KEY "stagehand.worker traceback" /* and its traceback */

#if LUA_VERSION_NUM >= 502
#define rawlen(L, i) lua_rawlen(L, i)
#else
#define rawlen(L, i) lua_objlen(L, i)
#endif

#if LUA_VERSION_NUM >= 503
#define HAS_INTEGERS 1
#else
#define HAS_INTEGERS 0
#endif

/* Deeper tables than this are refused (a copy recurses once a level). */
#define MAX_DEPTH 200

typedef struct box {
  void *p;
  /* (a port's) A value taken from the port whose decoding ran out of
   * memory: the next receive through this box gives it, so it is neither
   * lost nor leaked (the box's __gc frees one never received). */
  sh_msg *held;
} box;

static void *check_box(lua_State *L, int arg, const char *mt) {
  box *b = (box *)luaL_checkudata(L, arg, mt);
  if (!b->p) luaL_argerror(L, arg, "already closed");
  return b->p;
}

/* ------------------------------------------------------------------------
 * Values across threads. A message's bytes are tags, each followed by what
 * it needs:
 *   'n' nil, 'f' false, 't' true, 'd' a double, 'i' an integer (5.3+),
 *   's' a length and bytes, 'T' a new table (numbered in order of first
 *   sight) then key, value pairs and 'E', 'R' a table seen already (its
 *   number), 'P' / 'B' a port / round barrier (an index into the refs),
 *   'O' a LÖVE object (its number in the message's objects: see below).
 *
 * LÖVE objects (ImageData, FileData, SoundData...) cross only where LÖVE's
 * own channels carry them: an encoder given a table of objects (`objs`)
 * appends each one it meets there and writes its number; the Lua side
 * sends that table through a love.thread channel beside the message, and
 * the decoder fetches it (`fetch(id)`) the first time it meets an 'O'.
 */

typedef struct seg { /* one step of the path to a value, for messages */
  const struct seg *up;
  int key; /* stack index of the key, or 0 at the root */
} seg;

typedef struct enc {
  lua_State *L;
  sh_msg *m;
  int seen; /* stack index of {table = number}, or 0 while no table was met */
  uint32_t ntables;
  int failed; /* the reason is in the registry (ENC_ERROR) */
  const char *root; /* "payload", "result", "value" */
  int objs; /* stack index of the table of LÖVE objects met, or 0 where they cannot cross */
} enc;

/* An encoder that fails does not raise at once: it would leave the message
 * it was building to nobody. It notes why, unwinds, frees the message,
 * then raises (encode_values). */
#define ENC_ERROR "stagehand.encode error"

static void fail_enc(enc *e) {
  e->failed = 1;
  lua_setfield(e->L, LUA_REGISTRYINDEX, ENC_ERROR); /* (the reason, on the top) */
}

/* Room for n bytes of the message, or NULL once the encoder has failed. */
static unsigned char *room(enc *e, size_t n) {
  unsigned char *d;
  if (e->failed) return NULL;
  d = sh_msg_room(e->m, n);
  if (!d) {
    lua_pushstring(e->L, "not enough memory");
    fail_enc(e);
  }
  return d;
}
static void put(enc *e, const void *p, size_t n) {
  unsigned char *d = room(e, n);
  if (d) memcpy(d, p, n);
}
static void put_tag(enc *e, char t) {
  unsigned char *d = room(e, 1);
  if (d) *d = (unsigned char)t;
}
static void put_u32(enc *e, uint32_t v) { put(e, &v, sizeof v); }
/* A tag and the n bytes at p after it, then the `tail` bytes at t (a
 * string's), in one piece of room: most values are one. */
static void put_tagged(enc *e, char t, const void *p, size_t n, const void *tail, size_t ntail) {
  unsigned char *d = room(e, 1 + n + ntail);
  if (!d) return;
  d[0] = (unsigned char)t;
  memcpy(d + 1, p, n);
  if (ntail) memcpy(d + 1 + n, tail, ntail);
}

static int is_ident(const char *s, size_t n) {
  size_t i;
  if (n == 0 || !(s[0] == '_' || (s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z'))) return 0;
  for (i = 1; i < n; i++)
    if (!(s[i] == '_' || (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9')))
      return 0;
  return 1;
}

/* Pushes the path of a value: payload.mesh.on_done, payload[3], ... */
static void push_path(lua_State *L, const char *root, const seg *s) {
  luaL_Buffer b;
  const seg *chain[MAX_DEPTH + 2];
  int n = 0, i;
  for (; s && s->key && n < MAX_DEPTH + 2; s = s->up) chain[n++] = s;
  luaL_buffinit(L, &b);
  luaL_addstring(&b, root);
  for (i = n - 1; i >= 0; i--) {
    int k = chain[i]->key;
    if (lua_type(L, k) == LUA_TSTRING) {
      size_t len;
      const char *str = lua_tolstring(L, k, &len);
      if (is_ident(str, len)) {
        luaL_addchar(&b, '.');
        luaL_addlstring(&b, str, len);
      } else {
        luaL_addstring(&b, "[\"");
        luaL_addlstring(&b, str, len > 40 ? 40 : len);
        luaL_addstring(&b, len > 40 ? "...\"]" : "\"]");
      }
    } else if (lua_type(L, k) == LUA_TNUMBER) {
      char num[64];
      lua_Number x = lua_tonumber(L, k);
      if (x == floor(x) && fabs(x) < 1e15) snprintf(num, sizeof num, "[%.0f]", (double)x);
      else snprintf(num, sizeof num, "[%.17g]", (double)x);
      luaL_addstring(&b, num);
    } else {
      luaL_addstring(&b, "[<");
      luaL_addstring(&b, luaL_typename(L, k));
      luaL_addstring(&b, " key>]");
    }
  }
  luaL_pushresult(&b);
}

static void refuse(enc *e, int idx, const seg *s, const char *why) {
  lua_State *L = e->L;
  const char *tn = luaL_typename(L, idx);
  push_path(L, e->root, s);
  lua_pushfstring(L, "%s is a %s%s; only plain data, ports%s round barriers%s cross threads", lua_tostring(L, -1),
                  tn, why, e->objs ? "," : " and", e->objs ? " and LÖVE objects" : "");
  lua_remove(L, -2);
  fail_enc(e);
}

static int is_box_of(lua_State *L, int idx, const char *mt) {
  int same = 0;
  if (lua_type(L, idx) != LUA_TUSERDATA || !lua_getmetatable(L, idx)) return 0;
  luaL_getmetatable(L, mt);
  same = lua_rawequal(L, -1, -2);
  lua_pop(L, 2);
  return same && rawlen(L, idx) == sizeof(box);
}

static void encode(enc *e, int idx, const seg *s, int depth);

/* Whether the userdata at idx is a LÖVE object: its metatable holds LÖVE's
 * typeOf. */
static int is_love_object(lua_State *L, int idx) {
  int is;
  if (!lua_getmetatable(L, idx)) return 0;
  lua_pushstring(L, "typeOf");
  lua_rawget(L, -2);
  is = lua_type(L, -1) == LUA_TFUNCTION;
  lua_pop(L, 2);
  return is;
}

static void encode_object(enc *e, int idx) {
  lua_State *L = e->L;
  uint32_t k = (uint32_t)rawlen(L, e->objs) + 1;
  lua_pushvalue(L, idx);
  lua_rawseti(L, e->objs, (int)k);
  put_tag(e, 'O');
  put_u32(e, k);
}

static void encode_ref(enc *e, int idx, const seg *s, int kind, char tag) {
  box *b = (box *)lua_touserdata(e->L, idx);
  int32_t r;
  if (!b->p) {
    refuse(e, idx, s, " that is closed");
    return;
  }
  r = sh_msg_add_ref(e->m, kind, b->p);
  if (r < 0) {
    lua_pushstring(e->L, "not enough memory");
    fail_enc(e);
    return;
  }
  put_tag(e, tag);
  put_u32(e, (uint32_t)r);
}

static void encode_table(enc *e, int idx, const seg *s, int depth) {
  lua_State *L = e->L;
  uint32_t num;
  if (depth > MAX_DEPTH) {
    push_path(L, e->root, s);
    lua_pushfstring(L, "%s is nested deeper than %d tables; it cannot cross threads", lua_tostring(L, -1),
                    MAX_DEPTH);
    lua_remove(L, -2);
    fail_enc(e);
    return;
  }
  if (!lua_checkstack(L, 8)) {
    lua_pushstring(L, "a table too deep to copy");
    fail_enc(e);
    return;
  }
  lua_pushvalue(L, idx);
  lua_rawget(L, e->seen);
  if (!lua_isnil(L, -1)) {
    num = (uint32_t)lua_tonumber(L, -1);
    lua_pop(L, 1);
    put_tag(e, 'R');
    put_u32(e, num);
    return;
  }
  lua_pop(L, 1);
  num = e->ntables++;
  lua_pushvalue(L, idx);
  lua_pushnumber(L, (lua_Number)num);
  lua_rawset(L, e->seen);
  put_tag(e, 'T');
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    seg here;
    int key = lua_gettop(L) - 1, val = lua_gettop(L);
    here.up = s;
    here.key = key;
    if (lua_type(L, key) == LUA_TTABLE || lua_type(L, key) == LUA_TUSERDATA) {
      /* (a table key is copied like any table; its path is its holder's) */
      seg at_key = *s;
      encode(e, key, &at_key, depth + 1);
    } else {
      encode(e, key, &here, depth + 1);
    }
    if (!e->failed) encode(e, val, &here, depth + 1);
    lua_pop(L, 1);
    if (e->failed) {
      lua_pop(L, 1); /* (the key: the walk ends here) */
      return;
    }
  }
  put_tag(e, 'E');
}

static void encode(enc *e, int idx, const seg *s, int depth) {
  lua_State *L = e->L;
  if (e->failed) return;
  switch (lua_type(L, idx)) {
    case LUA_TNIL: put_tag(e, 'n'); break;
    case LUA_TBOOLEAN: put_tag(e, lua_toboolean(L, idx) ? 't' : 'f'); break;
    case LUA_TNUMBER: {
#if HAS_INTEGERS
      if (lua_isinteger(L, idx)) {
        lua_Integer i = lua_tointeger(L, idx);
        put_tagged(e, 'i', &i, sizeof i, NULL, 0);
        break;
      }
#endif
      {
        double d = (double)lua_tonumber(L, idx);
        put_tagged(e, 'd', &d, sizeof d, NULL, 0);
      }
      break;
    }
    case LUA_TSTRING: {
      size_t len;
      const char *str = lua_tolstring(L, idx, &len);
      if (len > 0xffffffffu) {
        lua_pushstring(L, "a string of 4 GB or more cannot cross threads");
        fail_enc(e);
        break;
      }
      {
        uint32_t len32 = (uint32_t)len;
        put_tagged(e, 's', &len32, sizeof len32, str, len);
      }
      break;
    }
    case LUA_TTABLE: encode_table(e, idx, s, depth); break;
    case LUA_TUSERDATA:
      if (is_box_of(L, idx, PORT_MT)) encode_ref(e, idx, s, SH_REF_PORT, 'P');
      else if (is_box_of(L, idx, ROUNDS_MT)) encode_ref(e, idx, s, SH_REF_ROUNDS, 'B');
      else if (e->objs && is_love_object(L, idx)) encode_object(e, idx);
      else refuse(e, idx, s, "");
      break;
    default: refuse(e, idx, s, ""); break;
  }
}

/* Encodes the values at first..last (absolute indices) into a message:
 * `into`, emptied, or (NULL) a new one; `root` names them in errors. A
 * message starts with how many tables it holds, then (counted) how many
 * values. Leaves the stack as it was and returns the message, which the
 * caller owns; or NULL, with the reason pushed, naming the first value
 * that cannot cross, and a new message freed (`into` stays the caller's,
 * as it does when the Lua API raises for memory; a new message is then
 * lost). */
static sh_msg *try_encode_objects(lua_State *L, int first, int last, const char *root, int counted, sh_msg *into,
                                  int objs) {
  enc e;
  seg top;
  int i, base = lua_gettop(L);
  uint32_t zero = 0;
  sh_msg *m = into;
  if (m) sh_msg_clear(m);
  else if (!(m = sh_msg_new())) luaL_error(L, "not enough memory");
  e.L = L, e.m = m, e.seen = 0, e.ntables = 0, e.failed = 0, e.root = root, e.objs = objs;
  for (i = first; i <= last && !e.seen; i++) {
    if (lua_type(L, i) == LUA_TTABLE) {
      lua_newtable(L);
      e.seen = lua_gettop(L);
    }
  }
  top.up = NULL, top.key = 0;
  if (counted) { /* (the count of tables, written below, then of values: one put) */
    uint32_t head[2];
    head[0] = zero, head[1] = (uint32_t)(last - first + 1);
    put(&e, head, sizeof head);
  } else {
    put(&e, &zero, sizeof zero);
  }
  for (i = first; i <= last && !e.failed; i++) encode(&e, i, &top, 0);
  lua_settop(L, base);
  if (e.failed) {
    if (m != into) sh_msg_free(m);
    lua_getfield(L, LUA_REGISTRYINDEX, ENC_ERROR);
    lua_pushnil(L);
    lua_setfield(L, LUA_REGISTRYINDEX, ENC_ERROR);
    return NULL;
  }
  sh_msg_set_u32(m, 0, e.ntables);
  return m;
}

/* try_encode_objects where no LÖVE object crosses. */
static sh_msg *try_encode_values(lua_State *L, int first, int last, const char *root, int counted, sh_msg *into) {
  return try_encode_objects(L, first, last, root, counted, into, 0);
}

/* try_encode_values, raising the reason. */
static sh_msg *encode_values(lua_State *L, int first, int last, const char *root, int counted, sh_msg *into) {
  sh_msg *m = try_encode_values(L, first, last, root, counted, into);
  if (!m) lua_error(L);
  return m;
}

typedef struct dec {
  lua_State *L;
  const unsigned char *p, *end;
  const sh_msg *m;
  int tables; /* stack index of {number = table} */
  int fetch; /* stack index of fetch(id), which returns the message's LÖVE objects; 0: none can come */
  int objs; /* stack index of what fetch returned (nil until an 'O' needs it) */
  double id; /* the request the message is of, for fetch */
} dec;

static void get(dec *d, void *out, size_t n) {
  if ((size_t)(d->end - d->p) < n) luaL_error(d->L, "stagehand: a message was cut short");
  memcpy(out, d->p, n);
  d->p += n;
}

static void push_port(lua_State *L, sh_port *p);
static void push_rounds(lua_State *L, sh_rounds *b);

static void decode(dec *d, int depth) {
  lua_State *L = d->L;
  char tag;
  uint32_t u;
  luaL_checkstack(L, 4, "a message too deep to read");
  get(d, &tag, 1);
  switch (tag) {
    case 'n': lua_pushnil(L); break;
    case 'f': lua_pushboolean(L, 0); break;
    case 't': lua_pushboolean(L, 1); break;
    case 'd': {
      double x;
      get(d, &x, sizeof x);
      lua_pushnumber(L, (lua_Number)x);
      break;
    }
#if HAS_INTEGERS
    case 'i': {
      lua_Integer i;
      get(d, &i, sizeof i);
      lua_pushinteger(L, i);
      break;
    }
#endif
    case 's':
      get(d, &u, sizeof u);
      if ((size_t)(d->end - d->p) < u) luaL_error(L, "stagehand: a message was cut short");
      lua_pushlstring(L, (const char *)d->p, u);
      d->p += u;
      break;
    case 'T': {
      int t;
      lua_newtable(L);
      t = lua_gettop(L);
      lua_pushvalue(L, t);
      lua_rawseti(L, d->tables, (int)rawlen(L, d->tables) + 1);
      for (;;) {
        if (d->p < d->end && *d->p == 'E') {
          d->p++;
          break;
        }
        decode(d, depth + 1);
        decode(d, depth + 1);
        if (lua_isnil(L, -2)) lua_pop(L, 2); /* (cannot happen: nil keys are never written) */
        else lua_rawset(L, t);
      }
      break;
    }
    case 'R':
      get(d, &u, sizeof u);
      lua_rawgeti(L, d->tables, (int)u + 1);
      break;
    case 'P':
    case 'B': {
      int kind = 0;
      void *obj;
      get(d, &u, sizeof u);
      obj = sh_msg_ref(d->m, (int32_t)u, &kind);
      if (!obj) luaL_error(L, "stagehand: a message names a reference it does not hold");
      if (tag == 'P') push_port(L, (sh_port *)obj);
      else push_rounds(L, (sh_rounds *)obj);
      break;
    }
    case 'O':
      get(d, &u, sizeof u);
      if (!d->fetch) luaL_error(L, "stagehand: a message holds a LÖVE object where none can cross");
      if (lua_isnil(L, d->objs)) {
        lua_pushvalue(L, d->fetch);
        lua_pushnumber(L, (lua_Number)d->id);
        lua_call(L, 1, 1);
        if (lua_type(L, -1) != LUA_TTABLE) luaL_error(L, "stagehand: the LÖVE objects of a message were lost");
        lua_replace(L, d->objs);
      }
      lua_rawgeti(L, d->objs, (int)u);
      break;
    default: luaL_error(L, "stagehand: a message holds an unknown tag"); break;
  }
  (void)depth;
}

/* Pushes the values of a message (all of them: `counted` messages hold
 * their number) and returns how many. Frees nothing. `fetch` (a stack
 * index, or 0) gives the LÖVE objects of request `id`'s message. */
static int decode_objects(lua_State *L, const sh_msg *m, int counted, int fetch, double id) {
  dec d;
  size_t len;
  uint32_t n = 1, i, ntables;
  d.L = L, d.m = m, d.tables = 0, d.fetch = fetch, d.objs = 0, d.id = id;
  if (fetch) {
    lua_pushnil(L);
    d.objs = lua_gettop(L);
  }
  d.p = sh_msg_data(m, &len);
  d.end = d.p + len;
  get(&d, &ntables, sizeof ntables);
  if (ntables > 0) {
    lua_createtable(L, ntables < 1000000 ? (int)ntables : 0, 0);
    d.tables = lua_gettop(L);
  }
  if (counted) get(&d, &n, sizeof n);
  luaL_checkstack(L, (int)(n > 200 ? 200 : n) + 4, "too many values to read");
  for (i = 0; i < n; i++) {
    if (i >= 200) luaL_checkstack(L, 4, "too many values to read");
    decode(&d, 0);
  }
  if (d.tables) lua_remove(L, d.tables);
  if (d.objs) lua_remove(L, d.objs);
  return (int)n;
}

static int decode_values(lua_State *L, const sh_msg *m, int counted) { return decode_objects(L, m, counted, 0, 0); }

/* ------------------------------------------------------------------------
 * The worker a thread runs, as its state knows it. */

typedef struct worker_ctx {
  sh_work *work;
  int32_t index;
  int64_t request;
  char *module, *source, *path, *cpath;
  size_t source_len;
  /* (worker thread only) What every request uses, kept in the registry
   * once (LUA_NOREF until then): the request runner, the traceback
   * handler, the module's table, the failure's message maker. tb_set: a failure's traceback is in the
   * registry. */
  int run_ref, tb_ref, mod_ref, fail_ref, tb_set;
  /* A hosted worker runs on a thread and in a state the host made (a LÖVE
   * thread: see serve); its messages carry LÖVE objects, through fetch and
   * put, two functions of that state kept in its registry. */
  int hosted, fetch_ref, put_ref;
} worker_ctx;

static worker_ctx *this_worker(lua_State *L) {
  worker_ctx *w;
  lua_getfield(L, LUA_REGISTRYINDEX, WORKER_KEY);
  w = (worker_ctx *)lua_touserdata(L, -1);
  lua_pop(L, 1);
  return w;
}

static const int *stop_flag(lua_State *L) {
  worker_ctx *w = this_worker(L);
  return w ? sh_work_stop_flag(w->work, w->index) : NULL;
}

/* Whether this state's worker was told to stop: its waits then return
 * nil or false at once, without taking a value or arriving. */
static int stopped(const int *stop) { return stop && SH__LOAD(stop); }

/* What a bad argument was, for a message: a number or string as itself,
 * anything else by its type. */
static const char *got_of(lua_State *L, int arg) {
  switch (lua_type(L, arg)) {
  case LUA_TNUMBER: return lua_pushfstring(L, "%f", (double)lua_tonumber(L, arg));
  case LUA_TSTRING: return lua_pushfstring(L, "\"%s\"", lua_tostring(L, arg));
  default: return luaL_typename(L, arg);
  }
}

static void set_waiting(lua_State *L, const char *what) {
  worker_ctx *w = this_worker(L);
  if (w) sh_work_set_waiting(w->work, w->index, what);
}

/* A wait on a port, named for the log: by the name it was given, or by
 * its address, as tostring(port) shows it. */
static void set_waiting_port(lua_State *L, const sh_port *p) {
  char what[SH_WAITING_LEN];
  const char *name = sh_port_name(p);
  worker_ctx *w = this_worker(L);
  if (!w) return;
  if (name[0]) {
    snprintf(what, sizeof what, "port '%s'", name);
  } else { /* (Lua's %p, as tostring(port) writes it: C's differs from one C library to another) */
    snprintf(what, sizeof what, "a port (%s)", lua_pushfstring(L, "%p", (const void *)p));
    lua_pop(L, 1);
  }
  sh_work_set_waiting(w->work, w->index, what);
}

/* ------------------------------------------------------------------------
 * Notifiers (the main side's; a worker never needs one). */

static int l_notify_new(lua_State *L) {
  box *b = (box *)lua_newuserdata(L, sizeof *b);
  b->p = NULL, b->held = NULL;
  luaL_getmetatable(L, NOTIFY_MT);
  lua_setmetatable(L, -2);
  b->p = sh_notify_new();
  if (!b->p) return luaL_error(L, "stagehand: cannot make a notifier (out of memory or file descriptors)");
  return 1;
}
static int l_notify_gc(lua_State *L) {
  box *b = (box *)lua_touserdata(L, 1);
  if (b->p) sh_notify_unref((sh_notify *)b->p);
  b->p = NULL;
  return 0;
}
static int l_notify_gen(lua_State *L) {
  lua_pushnumber(L, (lua_Number)sh_notify_gen((sh_notify *)check_box(L, 1, NOTIFY_MT)));
  return 1;
}
static int l_notify_wait(lua_State *L) {
  sh_notify *n = (sh_notify *)check_box(L, 1, NOTIFY_MT);
  uint64_t seen = (uint64_t)luaL_checknumber(L, 2);
  double ms = (double)luaL_checknumber(L, 3);
  lua_pushboolean(L, sh_notify_wait(n, seen, ms));
  return 1;
}
static int l_notify_signal(lua_State *L) {
  sh_notify_signal((sh_notify *)check_box(L, 1, NOTIFY_MT));
  return 0;
}
/* The descriptor an event loop watches, and what it is: "socket" on
 * Windows (luv polls it with new_socket_poll), else "fd". */
static int l_notify_fd(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)sh_notify_fd((sh_notify *)check_box(L, 1, NOTIFY_MT)));
#if defined(_WIN32)
  lua_pushliteral(L, "socket");
#else
  lua_pushliteral(L, "fd");
#endif
  return 2;
}
static int l_notify_clear(lua_State *L) {
  sh_notify_clear((sh_notify *)check_box(L, 1, NOTIFY_MT));
  return 0;
}

/* ------------------------------------------------------------------------
 * Ports. */

static void push_port(lua_State *L, sh_port *p) {
  box *b = (box *)lua_newuserdata(L, sizeof *b);
  b->p = NULL, b->held = NULL;
  luaL_getmetatable(L, PORT_MT);
  lua_setmetatable(L, -2);
  sh_port_ref(p);
  b->p = p;
}
/* port([name]): a name, for the log, is optional. */
static int l_port_new(lua_State *L) {
  sh_port *p;
  if (!lua_isnoneornil(L, 1) && lua_type(L, 1) != LUA_TSTRING)
    return luaL_error(L, "bad argument 'name' to port: expected a string or nil, got %s", got_of(L, 1));
  p = sh_port_new();
  if (!p) return luaL_error(L, "not enough memory");
  if (lua_type(L, 1) == LUA_TSTRING) sh_port_set_name(p, lua_tostring(L, 1));
  push_port(L, p);
  sh_port_unref(p);
  return 1;
}
static int l_port_gc(lua_State *L) {
  box *b = (box *)lua_touserdata(L, 1);
  sh_msg_free(b->held);
  b->held = NULL;
  if (b->p) sh_port_unref((sh_port *)b->p);
  b->p = NULL;
  return 0;
}
#define PORT(L) ((sh_port *)check_box(L, 1, PORT_MT))

static box *port_box(lua_State *L) {
  check_box(L, 1, PORT_MT);
  return (box *)lua_touserdata(L, 1);
}

/* Pushes the port's next value (one held from a receive that ran out of
 * memory first), or returns the take's status with nothing pushed. The
 * value stays the box's until it is decoded: decoding that runs out of
 * memory raises and leaves it there for the next receive. */
static int take_value(lua_State *L, box *b) {
  if (!b->held) {
    sh_msg *m = NULL;
    int rc = sh_port_take((sh_port *)b->p, &m);
    if (rc != SH_OK) return rc;
    b->held = m;
  }
  decode_values(L, b->held, 0);
  sh_msg_free(b->held);
  b->held = NULL;
  return SH_OK;
}

static int l_port_post(lua_State *L) {
  sh_port *p = PORT(L);
  sh_msg *m;
  int rc;
  luaL_checkany(L, 2);
  if (lua_isnil(L, 2)) return luaL_error(L, "port:post: nil cannot be posted (a closed port answers nil)");
  lua_settop(L, 2);
  m = encode_values(L, 2, 2, "value", 0, NULL);
  rc = sh_port_post(p, m);
  if (rc != SH_OK) sh_msg_free(m);
  if (rc == SH_ENOMEM) return luaL_error(L, "not enough memory");
  lua_pushboolean(L, rc == SH_OK);
  return 1;
}

/* port:try_receive(): true and the value, or false and "empty" / "closed". */
static int l_port_try(lua_State *L) {
  box *b = port_box(L);
  int rc;
  lua_settop(L, 1);
  lua_pushboolean(L, 1);
  rc = take_value(L, b);
  if (rc != SH_OK) {
    lua_pushboolean(L, 0);
    lua_pushstring(L, rc == SH_ECLOSED ? "closed" : "empty");
  }
  return 2;
}

/* Waits for a value at most ms (math.huge: no limit; a worker's wait also
 * ends when it is told to stop). The value, or nil. */
static int receive_for(lua_State *L, double ms) {
  box *b = port_box(L);
  sh_port *p = (sh_port *)b->p;
  const int *stop = stop_flag(L);
  double until = sh_now_ms() + ms; /* (another reader may take what woke us: the time left is what is left) */
  if (stopped(stop)) return 0;
  for (;;) {
    double left = until - sh_now_ms();
    int rc = take_value(L, b);
    if (rc == SH_OK) return 1;
    if (rc == SH_ECLOSED || !(left > 0)) return 0;
    set_waiting_port(L, p);
    rc = sh_port_wait(p, left, stop);
    set_waiting(L, NULL);
    if (rc == SH_ECLOSED || rc == SH_ESTOPPED || rc == SH_ETIMEDOUT) return 0;
  }
}

static double check_ms(lua_State *L, int arg) {
  lua_Number ms = luaL_checknumber(L, arg);
  if (!(ms >= 0)) luaL_argerror(L, arg, "a number of ms >= 0");
  return (double)ms;
}

static int l_port_receive(lua_State *L) { return receive_for(L, HUGE_VAL); }
static int l_port_receive_within(lua_State *L) { return receive_for(L, check_ms(L, 2)); }

/* drain(fn[, ms]): fn(v) for each value queued when it began, without
 * waiting, for at most ms (at least one when any is queued). Returns the
 * count. (Values posted meanwhile, by fn itself or by a busy worker, wait
 * for the next drain: one that took them too might never return.) */
static int drain_for(lua_State *L, double ms) {
  box *b = port_box(L);
  double until = sh_now_ms() + ms;
  lua_Integer n = 0, queued;
  luaL_checktype(L, 2, LUA_TFUNCTION);
  queued = (lua_Integer)sh_port_count((sh_port *)b->p) + (b->held ? 1 : 0);
  for (;;) {
    if (n >= queued || (n > 0 && sh_now_ms() >= until)) break;
    lua_pushvalue(L, 2);
    if (take_value(L, b) != SH_OK) {
      lua_pop(L, 1);
      break;
    }
    lua_call(L, 1, 0);
    n++;
  }
  lua_pushinteger(L, n);
  return 1;
}
static int l_port_drain(lua_State *L) { return drain_for(L, HUGE_VAL); }
static int l_port_drain_for(lua_State *L) { return drain_for(L, check_ms(L, 3)); }

static int l_port_close(lua_State *L) {
  sh_port_close(PORT(L));
  return 0;
}
static int l_port_closed(lua_State *L) {
  lua_pushboolean(L, sh_port_closed(PORT(L)));
  return 1;
}
static int l_port_count(lua_State *L) {
  box *b = port_box(L);
  lua_pushinteger(L, sh_port_count((sh_port *)b->p) + (b->held ? 1 : 0));
  return 1;
}
static int l_port_watch(lua_State *L) {
  sh_port *p = PORT(L);
  if (sh_port_watch(p, (sh_notify *)check_box(L, 2, NOTIFY_MT)) != SH_OK) return luaL_error(L, "not enough memory");
  return 0;
}
static int l_port_unwatch(lua_State *L) {
  sh_port *p = PORT(L);
  sh_port_unwatch(p, (sh_notify *)check_box(L, 2, NOTIFY_MT));
  return 0;
}

/* ------------------------------------------------------------------------
 * Round barriers. */

static void push_rounds(lua_State *L, sh_rounds *r) {
  box *b = (box *)lua_newuserdata(L, sizeof *b);
  b->p = NULL, b->held = NULL;
  luaL_getmetatable(L, ROUNDS_MT);
  lua_setmetatable(L, -2);
  sh_rounds_ref(r);
  b->p = r;
}
static int l_rounds_new(lua_State *L) {
  lua_Number n = luaL_checknumber(L, 1), len = luaL_optnumber(L, 2, 0);
  sh_rounds *r;
  if (!(n >= 1 && n <= 4096 && floor(n) == n)) return luaL_argerror(L, 1, "an integer from 1 to 4096");
  if (!(len >= 0 && len <= 65536 && floor(len) == len)) return luaL_argerror(L, 2, "an integer from 0 to 65536");
  r = sh_rounds_new((int32_t)n, (int32_t)len);
  if (!r) return luaL_error(L, "not enough memory");
  push_rounds(L, r);
  sh_rounds_unref(r);
  return 1;
}
static int l_rounds_gc(lua_State *L) {
  box *b = (box *)lua_touserdata(L, 1);
  if (b->p) sh_rounds_unref((sh_rounds *)b->p);
  b->p = NULL;
  return 0;
}
#define ROUNDS(L) ((sh_rounds *)check_box(L, 1, ROUNDS_MT))

static const char *const OPS[] = {"arrive", "sum", "min", "max", NULL};

/* Reads share_len numbers from the table at arg into out. */
static void read_share(lua_State *L, int arg, int32_t len, double *out, const char *method) {
  int32_t i;
  if (lua_type(L, arg) != LUA_TTABLE)
    luaL_error(L, "bad argument 'share' to b:%s: expected a table of %d numbers, got %s", method, (int)len,
               luaL_typename(L, arg));
  for (i = 0; i < len; i++) {
    lua_rawgeti(L, arg, i + 1);
    if (lua_type(L, -1) != LUA_TNUMBER)
      luaL_error(L, "bad argument 'share' to b:%s: share[%d] is %s, not a number", method, (int)i + 1,
                 luaL_typename(L, -1));
    out[i] = (double)lua_tonumber(L, -1);
    lua_pop(L, 1);
  }
}

static void write_out(lua_State *L, int arg, int32_t len, const double *res) {
  int32_t i;
  for (i = 0; i < len; i++) {
    lua_pushnumber(L, (lua_Number)res[i]);
    lua_rawseti(L, arg, i + 1);
  }
}

/* The arrival a wait makes: b:_arrive(op, round, count[, index, share])
 * returns a status name: "ok", or raises naming the bad argument. */
static int arrive_args(lua_State *L, sh_rounds *r, int op, double *round_no, double **share) {
  const char *method = OPS[op];
  lua_Number rn = luaL_checknumber(L, 2), count = luaL_checknumber(L, 3);
  int32_t len = sh_rounds_share_len(r), index = 0;
  int rc;
  if (rn != rn) luaL_error(L, "bad argument 'round' to b:%s: expected a number, got nan", method);
  if (!(count >= 1 && count <= sh_rounds_participants(r) && floor(count) == count))
    luaL_error(L, "bad argument 'count' to b:%s: expected an integer from 1 to %d", method,
               (int)sh_rounds_participants(r));
  *round_no = (double)rn;
  *share = NULL;
  if (op != SH_OP_COUNT) {
    lua_Number ix = luaL_checknumber(L, 4);
    if (!(ix >= 1 && ix <= sh_rounds_participants(r) && floor(ix) == ix))
      luaL_error(L, "bad argument 'index' to b:%s: expected an integer from 1 to %d", method,
                 (int)sh_rounds_participants(r));
    index = (int32_t)ix;
    if (lua_type(L, 6) != LUA_TTABLE)
      luaL_error(L, "bad argument 'out' to b:%s: expected a table, got %s", method, luaL_typename(L, 6));
    *share = (double *)lua_newuserdata(L, (size_t)(len ? len : 1) * sizeof(double));
    read_share(L, 5, len, *share, method);
  }
  rc = sh_rounds_arrive(r, *round_no, (int32_t)count, op, index, *share);
  if (rc == SH_EINVAL)
    luaL_error(L, "b:%s: round %f was begun with another count or operation, or is complete", method,
               (double)rn);
  if (rc == SH_ESTATE) luaL_error(L, "b:%s: index %d arrived at round %f already", method, (int)index, (double)rn);
  if (rc == SH_ENOMEM) luaL_error(L, "not enough memory");
  return rc;
}

/* b:arrive / sum / min / max as a thread waits: blocking (a worker stops
 * waiting when told to stop). */
static int rounds_blocking(lua_State *L, int op) {
  sh_rounds *r = ROUNDS(L);
  double round_no, *share, *res = NULL;
  int32_t len = sh_rounds_share_len(r);
  int rc;
  if (stopped(stop_flag(L))) {
    lua_pushboolean(L, 0);
    return 1;
  }
  rc = arrive_args(L, r, op, &round_no, &share);
  if (rc == SH_ECLOSED) {
    lua_pushboolean(L, 0);
    return 1;
  }
  if (op != SH_OP_COUNT) res = (double *)lua_newuserdata(L, (size_t)(len ? len : 1) * sizeof(double));
  set_waiting(L, "a round barrier");
  rc = sh_rounds_wait(r, round_no, res, HUGE_VAL, stop_flag(L));
  set_waiting(L, NULL);
  sh_rounds_leave(r, round_no);
  if (rc == SH_OK && op != SH_OP_COUNT) write_out(L, 6, len, res);
  lua_pushboolean(L, rc == SH_OK);
  return 1;
}
static int l_rounds_arrive(lua_State *L) { return rounds_blocking(L, SH_OP_COUNT); }
static int l_rounds_sum(lua_State *L) { return rounds_blocking(L, SH_OP_SUM); }
static int l_rounds_min(lua_State *L) { return rounds_blocking(L, SH_OP_MIN); }
static int l_rounds_max(lua_State *L) { return rounds_blocking(L, SH_OP_MAX); }

/* The main side's halves: b:_begin(op, round, count[, index, share, out])
 * arrives without waiting (true; false when aborted); b:_poll(round, op,
 * out) answers "done" (out written), "wait" or "aborted"; b:_leave(round). */
static int l_rounds_begin(lua_State *L) {
  sh_rounds *r = ROUNDS(L);
  int op = luaL_checkoption(L, 7, NULL, OPS);
  double round_no, *share;
  int rc;
  lua_settop(L, 6);
  rc = arrive_args(L, r, op, &round_no, &share);
  lua_pushboolean(L, rc == SH_OK);
  return 1;
}
static int l_rounds_poll(lua_State *L) {
  sh_rounds *r = ROUNDS(L);
  double round_no = (double)luaL_checknumber(L, 2);
  int32_t len = sh_rounds_share_len(r);
  double *res = (double *)lua_newuserdata(L, (size_t)(len ? len : 1) * sizeof(double));
  int rc = sh_rounds_poll(r, round_no, res);
  if (rc == SH_OK) {
    if (lua_type(L, 3) == LUA_TTABLE) write_out(L, 3, len, res);
    lua_pushstring(L, "done");
  } else {
    lua_pushstring(L, rc == SH_EAGAIN ? "wait" : "aborted");
  }
  return 1;
}
static int l_rounds_leave(lua_State *L) {
  sh_rounds_leave(ROUNDS(L), (double)luaL_checknumber(L, 2));
  return 0;
}
static int l_rounds_abort(lua_State *L) {
  sh_rounds_abort(ROUNDS(L));
  return 0;
}
static int l_rounds_aborted(lua_State *L) {
  lua_pushboolean(L, sh_rounds_aborted(ROUNDS(L)));
  return 1;
}
static int l_rounds_info(lua_State *L) {
  sh_rounds *r = ROUNDS(L);
  lua_pushinteger(L, sh_rounds_participants(r));
  lua_pushinteger(L, sh_rounds_share_len(r));
  return 2;
}
static int l_rounds_watch(lua_State *L) {
  sh_rounds *r = ROUNDS(L);
  if (sh_rounds_watch(r, (sh_notify *)check_box(L, 2, NOTIFY_MT)) != SH_OK) return luaL_error(L, "not enough memory");
  return 0;
}
static int l_rounds_unwatch(lua_State *L) {
  sh_rounds *r = ROUNDS(L);
  sh_rounds_unwatch(r, (sh_notify *)check_box(L, 2, NOTIFY_MT));
  return 0;
}

/* ------------------------------------------------------------------------
 * Inside a worker: require "stagehand.worker". */

static int w_stopping(lua_State *L) {
  const int *stop = stop_flag(L);
  lua_pushboolean(L, stopped(stop));
  return 1;
}

static int w_progress(lua_State *L) {
  worker_ctx *w = this_worker(L);
  lua_Number done = luaL_optnumber(L, 1, -1), total = luaL_optnumber(L, 2, -1);
  if (lua_gettop(L) >= 1) {
    if (!(done >= 0)) return luaL_error(L, "bad argument 'done' to worker.progress: expected a number >= 0");
    if (!(total > 0) || done > total)
      return luaL_error(L, "bad argument 'total' to worker.progress: expected a number > 0 and >= done");
  }
  if (w && w->request >= 0) sh_work_report(w->work, w->index, w->request, SH_EV_PROGRESS, NULL, done, total);
  return 0;
}

static int w_sleep(lua_State *L) {
  double ms, until;
  if (lua_type(L, 1) != LUA_TNUMBER || !(lua_tonumber(L, 1) >= 0))
    return luaL_error(L, "bad argument 'ms' to worker.sleep: expected a number >= 0, got %s", got_of(L, 1));
  ms = (double)lua_tonumber(L, 1), until = sh_now_ms() + ms;
  const int *stop = stop_flag(L);
  set_waiting(L, "a sleep");
  for (;;) {
    double left = until - sh_now_ms();
    if (left <= 0) break;
    if (stopped(stop)) break;
    sh_sleep_ms(left > 10 ? 10 : left);
  }
  set_waiting(L, NULL);
  lua_pushboolean(L, !stopped(stop));
  return 1;
}


/* ------------------------------------------------------------------------
 * Metatables, in any state (the main one and each worker's). */

static void set_methods(lua_State *L, const luaL_Reg *l) {
  for (; l->name; l++) {
    lua_pushcfunction(L, l->func);
    lua_setfield(L, -2, l->name);
  }
}

static const luaL_Reg worker_api[] = {
    {"stopping", w_stopping}, {"progress", w_progress}, {"sleep", w_sleep}, {"port", l_port_new}, {NULL, NULL}};

static int open_worker_api(lua_State *L) {
  lua_newtable(L);
  set_methods(L, worker_api);
  return 1;
}

static const luaL_Reg port_methods[] = {
    {"post", l_port_post}, {"try_receive", l_port_try}, {"receive", l_port_receive},
    {"receive_within", l_port_receive_within}, {"drain", l_port_drain}, {"drain_for", l_port_drain_for},
    {"close", l_port_close}, {"closed", l_port_closed}, {"count", l_port_count},
    {"_watch", l_port_watch}, {"_unwatch", l_port_unwatch}, {NULL, NULL}};

static const luaL_Reg rounds_methods[] = {
    {"arrive", l_rounds_arrive}, {"sum", l_rounds_sum}, {"min", l_rounds_min}, {"max", l_rounds_max},
    {"abort", l_rounds_abort}, {"aborted", l_rounds_aborted}, {"_begin", l_rounds_begin},
    {"_poll", l_rounds_poll}, {"_leave", l_rounds_leave}, {"_info", l_rounds_info},
    {"_watch", l_rounds_watch}, {"_unwatch", l_rounds_unwatch}, {NULL, NULL}};

/* A port or a round barrier as text: its kind and the object it holds. */
static int box_tostring(lua_State *L) {
  box *b = (box *)lua_touserdata(L, 1);
  luaL_getmetafield(L, 1, "__name");
  lua_pushfstring(L, "%s (%p)", lua_tostring(L, -1), b ? b->p : NULL);
  return 1;
}

/* Two boxes are equal when they hold the same object (a port received is a
 * new userdata for the port it names); one of another kind never is. */
static int box_eq(lua_State *L) {
  int same = lua_getmetatable(L, 1) && lua_getmetatable(L, 2) && lua_rawequal(L, -1, -2);
  box *a = (box *)lua_touserdata(L, 1), *b = (box *)lua_touserdata(L, 2);
  lua_pushboolean(L, same && a && b && a->p == b->p);
  return 1;
}

/* Makes the metatable `name` (its __gc and __name) unless this state has
 * it; with methods, also its __index, __tostring and __eq. Shared with
 * lstagehand.c's types. */
void sh__new_type(lua_State *L, const char *name, lua_CFunction gc, const luaL_Reg *methods);
void sh__new_type(lua_State *L, const char *name, lua_CFunction gc, const luaL_Reg *methods) {
  if (luaL_newmetatable(L, name)) {
    lua_pushcfunction(L, gc);
    lua_setfield(L, -2, "__gc");
    lua_pushstring(L, name);
    lua_setfield(L, -2, "__name");
    if (methods) {
      lua_pushcfunction(L, box_tostring);
      lua_setfield(L, -2, "__tostring");
      lua_pushcfunction(L, box_eq);
      lua_setfield(L, -2, "__eq");
      lua_newtable(L);
      set_methods(L, methods);
      lua_setfield(L, -2, "__index");
    }
  }
  lua_pop(L, 1);
}

static void open_types(lua_State *L) {
  sh__new_type(L, PORT_MT, l_port_gc, port_methods);
  sh__new_type(L, ROUNDS_MT, l_rounds_gc, rounds_methods);
  sh__new_type(L, NOTIFY_MT, l_notify_gc, NULL);
}

/* ------------------------------------------------------------------------
 * Worker threads. */

static char *dup_str(const char *s, size_t n) {
  char *d;
  if (!s) return NULL;
  d = (char *)malloc(n + 1);
  if (!d) return NULL;
  memcpy(d, s, n);
  d[n] = '\0';
  return d;
}

static void free_ctx(worker_ctx *w) {
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
  worker_ctx *w = this_worker(L);
  (void)ar;
  if (w && stopped(sh_work_stop_flag(w->work, w->index)) && sh_work_retired(w->work, w->index))
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

/* The message handler of a worker's function: keeps what was raised, as
 * it was, in the registry (a plain-data table crosses to the main side as
 * the failure's cause), and returns the traceback, headed by what the
 * value says of itself. */
static int traceback(lua_State *L) {
  const char *msg;
  lua_settop(L, 1);
  lua_pushvalue(L, 1);
  lua_setfield(L, LUA_REGISTRYINDEX, ERROR_KEY);
  msg = push_said(L, 1);
  lua_getglobal(L, "debug");
  if (lua_type(L, -1) == LUA_TTABLE) {
    lua_getfield(L, -1, "traceback");
    if (lua_type(L, -1) == LUA_TFUNCTION) {
      lua_pushstring(L, msg);
      lua_pushinteger(L, 2);
      lua_call(L, 2, 1);
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
  lua_pushcfunction(L, open_worker_api);
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
  n = decode_objects(L, payload, 1, r->w->hosted ? 2 : 0, (double)r->w->request); /* the name at base + 1, the
                                                                                    arguments after */
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
    m = try_encode_objects(L, base + 1, last, "result", 1, payload, objs);
    if (!m) lua_error(L);
    if (rawlen(L, objs) > 0) { /* (sent before the reply: the owner fetches them as it reads it) */
      lua_rawgeti(L, LUA_REGISTRYINDEX, r->w->put_ref);
      lua_pushnumber(L, (lua_Number)r->w->request);
      lua_pushvalue(L, objs);
      lua_call(L, 2, 0);
    }
    r->result = m;
  } else {
    r->result = encode_values(L, base + 1, lua_gettop(L), "result", 1, payload);
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

/* A failure's message, run under lua_pcall: what was raised (a plain-data
 * table copied as it is, anything else as the string it says of itself)
 * and the traceback (the function's, or the message again when the
 * failure came before or after it ran). */
static int failure_msg(lua_State *L) {
  sh_msg **out = (sh_msg **)lua_touserdata(L, 1);
  lua_settop(L, 2); /* (what was raised at 2) */
  lua_getfield(L, LUA_REGISTRYINDEX, TRACEBACK_KEY);
  if (lua_type(L, 3) != LUA_TSTRING) {
    lua_pop(L, 1);
    push_said(L, 2);
  }
  if (lua_type(L, 2) == LUA_TTABLE) {
    if (lua_getmetatable(L, 2)) lua_pop(L, 1);
    else if ((*out = try_encode_values(L, 2, 3, "error", 1, NULL)) != NULL) return 0;
    else lua_pop(L, 1); /* (the reason it cannot cross: it goes by what it says) */
  }
  if (lua_type(L, 2) != LUA_TSTRING) {
    push_said(L, 2);
    lua_replace(L, 2);
  }
  lua_settop(L, 3);
  *out = encode_values(L, 2, 3, "error", 1, NULL);
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
    sh_msg *m = NULL;
    if (r.payload) sh_msg_free(r.payload); /* (it failed before its reply took the payload) */
    if (rc == LUA_ERRMEM || r.oom) {
      /* What the failed request allocated goes back now, not when the
       * worker's next request happens to collect it: the game's own state
       * may be the one short of memory. */
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
  open_types(L);
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

static void worker_exit(worker_ctx *w) {
  sh_work_exited(w->work, w->index);
  sh_work_unref(w->work);
  free_ctx(w);
}

static SH__THREAD_RETURN worker_main(void *arg) {
  worker_ctx *w = (worker_ctx *)arg;
  lua_State *L = luaL_newstate();
  if (L) {
    luaL_openlibs(L);
    set_up_worker(L, w);
  }
  serve_requests(L, w);
  if (L) lua_close(L);
  worker_exit(w);
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
static double host_worker(worker_ctx *w) {
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
static worker_ctx *unhost(double token, const sh_work *work, int32_t index) {
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

/* threads.serve(token, fetch, put): in the host's thread. fetch(id)
 * returns the LÖVE objects of request id's payload; put(id, objects) sends
 * those of its result. */
static int l_serve(lua_State *L) {
  double token = luaL_checknumber(L, 1);
  int fetch_ref, put_ref;
  worker_ctx *w;
  luaL_checktype(L, 2, LUA_TFUNCTION);
  luaL_checktype(L, 3, LUA_TFUNCTION);
  lua_pushvalue(L, 2);
  fetch_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_pushvalue(L, 3);
  put_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  w = unhost(token, NULL, -1);
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
  worker_exit(w);
  return 0;
}

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
  while ((w = unhost(0, p->work, -1)) != NULL) worker_exit(w);
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
  sh_notify *n = (sh_notify *)check_box(L, 1, NOTIFY_MT);
  size_t mlen, slen = 0, plen, clen;
  const char *module = luaL_checklstring(L, 2, &mlen);
  const char *source = luaL_optlstring(L, 3, NULL, &slen);
  const char *path = luaL_checklstring(L, 4, &plen), *cpath = luaL_checklstring(L, 5, &clen);
  pool_ud *p = (pool_ud *)lua_newuserdata(L, sizeof *p);
  memset(p, 0, sizeof *p);
  p->tag = &pool_tag;
  luaL_getmetatable(L, WORK_MT);
  lua_setmetatable(L, -2);
  p->module = dup_str(module, mlen);
  p->source = dup_str(source, slen);
  p->source_len = slen;
  p->path = dup_str(path, plen);
  p->cpath = dup_str(cpath, clen);
  if (!p->module || (source && !p->source) || !p->path || !p->cpath) return luaL_error(L, "not enough memory");
  p->work = sh_work_new(n);
  if (!p->work) return luaL_error(L, "not enough memory");
  return 1;
}

/* pool:_add_worker(hosted): starts a worker thread; returns its number
 * (from 0). Hosted (true): starts none, and returns its number and the
 * token its host's thread serves it under (l_serve). */
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
  w->module = dup_str(p->module, strlen(p->module));
  w->source = p->source ? dup_str(p->source, p->source_len) : NULL;
  w->source_len = p->source_len;
  w->path = dup_str(p->path, strlen(p->path));
  w->cpath = dup_str(p->cpath, strlen(p->cpath));
  w->request = -1;
  if (!w->module || (p->source && !w->source) || !w->path || !w->cpath) {
    free_ctx(w);
    return luaL_error(L, "not enough memory");
  }
  idx = sh_work_add_worker(p->work);
  if (idx < 0) {
    free_ctx(w);
    return luaL_error(L, idx == SH_ECLOSED ? "the pool is closed" : "not enough memory");
  }
  if (idx != p->nthreads) {
    /* (workers and threads are numbered alike: one thread per worker) */
    sh_work_exited(p->work, idx);
    free_ctx(w);
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
    token = host_worker(w);
    if (token == 0) {
      worker_exit(w);
      return luaL_error(L, "not enough memory");
    }
    lua_pushinteger(L, idx);
    lua_pushnumber(L, (lua_Number)token);
    return 2;
  }
  rc = sh__thread_start(&p->threads[idx].thread, worker_main, w);
  p->nthreads++;
  p->threads[idx].started = rc == 0;
  p->threads[idx].joined = 0;
  if (rc != 0) {
    sh_work_exited(p->work, idx);
    sh_work_unref(p->work);
    free_ctx(w);
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

/* pool:_push(id, priority, root, fn_name, ...): queues a request (the
 * function's name, then its arguments, copied now): true; false once the
 * pool is closed; false and "not enough memory"; nil and the reason naming
 * the first value that cannot cross ("<root>.mesh.on_done is a function;
 * ..."), with nothing queued. */
static int l_pool_push(lua_State *L) {
  pool_ud *p = check_pool(L);
  lua_Number id = luaL_checknumber(L, 2), prio = luaL_checknumber(L, 3);
  const char *root = luaL_checkstring(L, 4);
  sh_msg *m;
  int rc;
  luaL_checkstring(L, 5);
  m = try_encode_values(L, 5, lua_gettop(L), root, 1, NULL);
  if (!m) {
    lua_pushnil(L);
    lua_insert(L, -2);
    return 2;
  }
  rc = sh_work_push(p->work, (int64_t)id, (double)prio, m);
  if (rc != SH_OK) sh_msg_free(m);
  return push_status(L, rc);
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
  m = try_encode_objects(L, 4, last, root, 1, NULL, objs);
  if (!m) {
    lua_pushnil(L);
    lua_insert(L, -2);
    return 2;
  }
  sh_msg_free(p->staged);
  p->staged = m;
  p->staged_prio = (double)prio;
  p->staged_seq = p->staged_seq + 1;
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
 * as `id`, returning as _push does (the request is dropped unless
 * queued); nil when it is no longer staged (a later stage replaced it). */
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
static int l_pool_set_priority(lua_State *L) {
  pool_ud *p = check_pool(L);
  lua_pushboolean(L, sh_work_set_priority(p->work, check_request(L, 2), (double)luaL_checknumber(L, 3)) == SH_OK);
  return 1;
}
static int l_pool_counts(lua_State *L) {
  pool_ud *p = check_pool(L);
  lua_pushinteger(L, sh_work_queued(p->work));
  lua_pushinteger(L, sh_work_running(p->work));
  lua_pushinteger(L, sh_work_live_workers(p->work));
  return 3;
}
static int l_pool_queued_ids(lua_State *L) {
  pool_ud *p = check_pool(L);
  int32_t n = sh_work_queued(p->work), got, i;
  int64_t *ids = (int64_t *)lua_newuserdata(L, (size_t)(n > 0 ? n : 1) * sizeof(int64_t));
  got = sh_work_queued_ids(p->work, ids, n);
  if (got < 0) return luaL_error(L, "not enough memory");
  lua_createtable(L, got, 0);
  for (i = 0; i < got; i++) {
    lua_pushnumber(L, (lua_Number)ids[i]);
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}
static int l_pool_pause(lua_State *L) {
  pool_ud *p = check_pool(L);
  sh_work_pause(p->work, lua_toboolean(L, 2));
  return 0;
}
static int l_pool_close(lua_State *L) {
  pool_ud *p = check_pool(L);
  sh_work_close(p->work);
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
      int base = lua_gettop(L), i, nv = decode_objects(L, m, 1, fetch, (double)p->ev_id[at]);
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
        lua_replace(L, base + 1);
        lua_settop(L, base + 1);
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
  worker_ctx *w = unhost(0, p->work, i);
  if (w) worker_exit(w);
  lua_pushboolean(L, w != NULL);
  return 1;
}

/* pool:_detach(): the threads still running go on alone. */
static int l_pool_detach(lua_State *L) {
  pool_ud *p = check_pool(L);
  detach_all(p);
  return 0;
}

static const luaL_Reg pool_methods[] = {
    {"_add_worker", l_pool_add_worker}, {"_push", l_pool_push}, {"_remove", l_pool_remove},
    {"_abort", l_pool_abort}, {"_set_priority", l_pool_set_priority}, {"_counts", l_pool_counts},
    {"_queued_ids", l_pool_queued_ids}, {"_pause", l_pool_pause}, {"_close", l_pool_close},
    {"_stop_worker", l_pool_stop_worker}, {"_drain", l_pool_drain},
    {"_stage", l_pool_stage}, {"_commit", l_pool_commit}, {"_worker", l_pool_worker},
    {"_detach", l_pool_detach}, {"_hold", l_pool_hold}, {"_drop", l_pool_drop}, {"_offer", l_pool_offer},
    {"_offered", l_pool_offered}, {"_held", l_pool_held}, {"_unhost", l_pool_unhost}, {NULL, NULL}};

static int l_threads_default(lua_State *L) {
  lua_pushinteger(L, sh_threads_default());
  return 1;
}

static const luaL_Reg funcs[] = {
    {"notifier", l_notify_new}, {"notifier_gen", l_notify_gen}, {"notifier_wait", l_notify_wait},
    {"notifier_signal", l_notify_signal}, {"notifier_fd", l_notify_fd}, {"notifier_clear", l_notify_clear},
    {"port", l_port_new}, {"rounds", l_rounds_new}, {"pool", l_pool_new},
    {"default_threads", l_threads_default}, {"serve", l_serve}, {NULL, NULL}};

/* Pushes the threads' table of stagehand._core (`threads`), with the
 * metatables of ports and round barriers (port_methods, rounds_methods:
 * the Lua side adds the waits a job makes). */
int sh__open_threads(lua_State *L);
int sh__open_threads(lua_State *L) {
  open_types(L);
  if (luaL_newmetatable(L, WORK_MT)) {
    lua_pushcfunction(L, l_pool_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushstring(L, WORK_MT);
    lua_setfield(L, -2, "__name");
    lua_newtable(L);
    set_methods(L, pool_methods);
    lua_setfield(L, -2, "__index");
  }
  lua_pop(L, 1);
  lua_newtable(L);
  set_methods(L, funcs);
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
