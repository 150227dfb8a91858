/*
 * stagehand._core's threads: the waits that cross threads as Lua sees them.
 * Notifiers (what wakes the game's step), ports and round barriers in any
 * state, the worker's own API (`require "stagehand.worker"`), and the
 * metatables every state of stagehand's gets (csrc/sh_port.c,
 * sh_rounds.c and sh_notify.c hold the objects, without Lua).
 */
#include <stdarg.h>
#include "lthreads.h"

void *shl_check_box(lua_State *L, int arg, const char *mt) {
  box *b = (box *)luaL_checkudata(L, arg, mt);
  if (!b->p) luaL_argerror(L, arg, "already closed");
  return b->p;
}

/* ------------------------------------------------------------------------
 * The worker a thread runs, as its state knows it. */



worker_ctx *shl_this_worker(lua_State *L) {
  worker_ctx *w;
  lua_getfield(L, LUA_REGISTRYINDEX, WORKER_KEY);
  w = (worker_ctx *)lua_touserdata(L, -1);
  lua_pop(L, 1);
  return w;
}

static const int *shl_stop_flag(lua_State *L) {
  worker_ctx *w = shl_this_worker(L);
  return w ? sh_work_stop_flag(w->work, w->index) : NULL;
}

/* Whether this state's worker was told to stop: its waits then return
 * nil or false at once, without taking a value or arriving. */
int shl_stopped(const int *stop) { return stop && SH__LOAD(stop); }

/* A string as the Lua side's messages show one (errors.quote): quoted on
 * one line, control bytes escaped, cut after 60 bytes (at a character's
 * start) with its length. Leaves it on the stack. */
static const char *quoted(lua_State *L, int arg) {
  size_t len, n, i;
  const char *str = lua_tolstring(L, arg, &len);
  luaL_Buffer b;
  n = len;
  if (len > 60) {
    n = 57;
    while (n > 0 && ((unsigned char)str[n] & 0xC0) == 0x80) n--; /* (not inside a UTF-8 character) */
  }
  luaL_buffinit(L, &b);
  luaL_addchar(&b, '"');
  for (i = 0; i < n; i++) {
    unsigned char c = (unsigned char)str[i];
    if (c == '"' || c == '\\') {
      luaL_addchar(&b, '\\');
      luaL_addchar(&b, (char)c);
    } else if (c == '\n') {
      luaL_addstring(&b, "\\n");
    } else if (c == '\r') {
      luaL_addstring(&b, "\\r");
    } else if (c == '\t') {
      luaL_addstring(&b, "\\t");
    } else if (c < 32 || c == 127) {
      char esc[5];
      esc[0] = '\\';
      esc[1] = (char)('0' + c / 100);
      esc[2] = (char)('0' + c / 10 % 10);
      esc[3] = (char)('0' + c % 10);
      esc[4] = '\0';
      luaL_addstring(&b, esc);
    } else {
      luaL_addchar(&b, (char)c);
    }
  }
  luaL_addchar(&b, '"');
  luaL_pushresult(&b);
  if (n < len) {
    lua_pushfstring(L, "%s... (%d bytes)", lua_tostring(L, -1), (int)len);
    lua_remove(L, -2);
  }
  return lua_tostring(L, -1);
}

/* What a bad argument was, for a message: a number or string as itself,
 * anything else by its type. */
static const char *got_of(lua_State *L, int arg) {
  switch (lua_type(L, arg)) {
  case LUA_TNUMBER: /* (as tostring shows it: Lua 5.4's integers without ".0";
                      * NaN as "nan", which glibc's printf makes "-nan") */
    if (lua_tonumber(L, arg) != lua_tonumber(L, arg)) return "nan";
    lua_pushvalue(L, arg);
    return lua_tostring(L, -1);
  case LUA_TSTRING: return quoted(L, arg);
  default: return luaL_typename(L, arg);
  }
}

static void set_waiting(lua_State *L, const char *what) {
  worker_ctx *w = shl_this_worker(L);
  if (w) sh_work_set_waiting(w->work, w->index, what);
}

/* A wait on a port, named for the log: by the name it was given, or by
 * its address, as tostring(port) shows it. */
static void set_waiting_port(lua_State *L, const sh_port *p) {
  char what[SH_WAITING_LEN];
  const char *name = sh_port_name(p);
  worker_ctx *w = shl_this_worker(L);
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

int shl_notify_new(lua_State *L) {
  box *b = (box *)lua_newuserdata(L, sizeof *b);
  b->p = NULL, b->held = NULL, b->spare = NULL;
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
int shl_notify_gen(lua_State *L) {
  lua_pushnumber(L, (lua_Number)sh_notify_gen((sh_notify *)shl_check_box(L, 1, NOTIFY_MT)));
  return 1;
}
int shl_notify_wait(lua_State *L) {
  sh_notify *n = (sh_notify *)shl_check_box(L, 1, NOTIFY_MT);
  uint64_t seen = (uint64_t)luaL_checknumber(L, 2);
  double ms = (double)luaL_checknumber(L, 3);
  lua_pushboolean(L, sh_notify_wait(n, seen, ms));
  return 1;
}
int shl_notify_signal(lua_State *L) {
  sh_notify_signal((sh_notify *)shl_check_box(L, 1, NOTIFY_MT));
  return 0;
}
/* The descriptor an event loop watches, and what it is: "socket" on
 * Windows (luv polls it with new_socket_poll), else "fd". */
int shl_notify_fd(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)sh_notify_fd((sh_notify *)shl_check_box(L, 1, NOTIFY_MT)));
#if defined(_WIN32)
  lua_pushliteral(L, "socket");
#else
  lua_pushliteral(L, "fd");
#endif
  return 2;
}
int shl_notify_clear(lua_State *L) {
  sh_notify_clear((sh_notify *)shl_check_box(L, 1, NOTIFY_MT));
  return 0;
}

/* ------------------------------------------------------------------------
 * Ports. */

void shl_push_port(lua_State *L, sh_port *p) {
  box *b = (box *)lua_newuserdata(L, sizeof *b);
  b->p = NULL, b->held = NULL, b->spare = NULL;
  luaL_getmetatable(L, PORT_MT);
  lua_setmetatable(L, -2);
  sh_port_ref(p);
  b->p = p;
}
/* port([name]): a name, for the log, is optional. */
int shl_port_new(lua_State *L) {
  sh_port *p;
  box *b;
  if (!lua_isnoneornil(L, 1) && lua_type(L, 1) != LUA_TSTRING)
    return luaL_error(L, "bad argument 'name' to port: expected a string or nil, got %s", got_of(L, 1));
  /* (the box first, as shl_push_port makes it: a box that ran out of Lua
   * memory after the port was made left the port never freed) */
  b = (box *)lua_newuserdata(L, sizeof *b);
  b->p = NULL, b->held = NULL, b->spare = NULL;
  luaL_getmetatable(L, PORT_MT);
  lua_setmetatable(L, -2);
  p = sh_port_new();
  if (!p) return luaL_error(L, "not enough memory");
  if (lua_type(L, 1) == LUA_TSTRING) sh_port_set_name(p, lua_tostring(L, 1));
  b->p = p;
  return 1;
}
static int l_port_gc(lua_State *L) {
  box *b = (box *)lua_touserdata(L, 1);
  sh_msg_free(b->held);
  b->held = NULL;
  sh_msg_free(b->spare);
  b->spare = NULL;
  if (b->p) sh_port_unref((sh_port *)b->p);
  b->p = NULL;
  return 0;
}
#define PORT(L) ((sh_port *)shl_check_box(L, 1, PORT_MT))

static int fail_at(lua_State *L, int level, const char *fmt, ...);
/* (after a call that raises, for the compilers' and analyzers' sake:
 * nothing after it runs) */
#if defined(__GNUC__) || defined(__clang__)
#define NOT_REACHED() __builtin_unreachable()
#elif defined(_MSC_VER)
#define NOT_REACHED() __assume(0)
#else
#define NOT_REACHED() ((void)0)
#endif

/* The box of a method's self, as a worker calls the method (the game's
 * side checks in ports.lua first, with the same words): a dot where the
 * colon belongs shifts every argument, so self is checked first. */
static box *self_box(lua_State *L, const char *mt, const char *method, const char *expected) {
  box *b = (box *)lua_touserdata(L, 1);
  int ok = 0;
  if (b && lua_getmetatable(L, 1)) {
    luaL_getmetatable(L, mt);
    ok = lua_rawequal(L, -1, -2);
    lua_pop(L, 2);
  }
  if (!ok) {
    fail_at(L, 1, "bad self to %s: expected %s, got %s (call it with a colon: %s(...))", method, expected,
            lua_isnoneornil(L, 1) ? "nil" : got_of(L, 1), method);
    NOT_REACHED();
  }
  if (!b->p) luaL_argerror(L, 1, "already closed");
  return b;
}
#define PORT_SELF(L, method) self_box(L, PORT_MT, "port:" method, "a port (stagehand.port())")

static box *port_box(lua_State *L) {
  shl_check_box(L, 1, PORT_MT);
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
  shl_decode_values(L, b->held, 0);
  sh_msg_free(b->held);
  b->held = NULL;
  return SH_OK;
}

/* Raises "where: message" with where the line `level` up, as luaL_error
 * does for level 1. A worker calls post and the round methods directly
 * (level 1); the game's side calls post through a Lua method (level 2), and
 * _begin from ports.lua, which positions the message itself (level 0). */
static int fail_at(lua_State *L, int level, const char *fmt, ...) {
  va_list ap;
  luaL_where(L, level);
  va_start(ap, fmt);
  lua_pushvfstring(L, fmt, ap);
  va_end(ap);
  lua_concat(L, 2);
  return lua_error(L);
}

/* port:post(v), raising at the line `level` up (see fail_at). */
static int port_post_at(lua_State *L, int level) {
  box *b = PORT_SELF(L, "post");
  sh_port *p = (sh_port *)b->p;
  sh_msg *m;
  int rc;
  luaL_checkany(L, 2);
  lua_settop(L, 2);
  if (lua_isnil(L, 2)) return fail_at(L, level, "port:post: nil cannot be posted (a closed port answers nil)");
  if (!b->spare && !(b->spare = sh_msg_new())) return luaL_error(L, "not enough memory");
  m = shl_try_encode_values(L, 2, 2, "v", 0, b->spare);
  if (!m) /* (the reason, on the top) */
    return fail_at(L, level, "bad argument 'v' to port:post: %s", lua_tostring(L, -1));
  b->spare = NULL; /* (the port's, or freed below) */
  rc = sh_port_post(p, m);
  if (rc != SH_OK) sh_msg_free(m);
  if (rc == SH_ENOMEM) return luaL_error(L, "not enough memory");
  lua_pushboolean(L, rc == SH_OK);
  return 1;
}

static int l_port_post(lua_State *L) { return port_post_at(L, 1); }

/* The game's side wraps post in Lua (ports.lua), one call deeper. */
static int l_port_post_wrapped(lua_State *L) { return port_post_at(L, 2); }

/* port:try_receive(): true and the value, or false and "empty" / "closed". */
static int l_port_try(lua_State *L) {
  box *b = PORT_SELF(L, "try_receive");
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
  box *b = port_box(L); /* (self checked by the callers, before ms) */
  sh_port *p = (sh_port *)b->p;
  const int *stop = shl_stop_flag(L);
  double until = sh_now_ms() + ms; /* (another reader may take what woke us: the time left is what is left) */
  if (shl_stopped(stop)) return 0;
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

/* A worker calls the port's methods here directly (the game's side checks
 * in ports.lua first, with the same words). */
static double check_ms(lua_State *L, int arg, const char *method) {
  if (lua_type(L, arg) != LUA_TNUMBER || !(lua_tonumber(L, arg) >= 0))
    fail_at(L, 1, "bad argument 'ms' to port:%s: expected a number >= 0, got %s", method, got_of(L, arg));
  return (double)lua_tonumber(L, arg);
}

static int l_port_receive(lua_State *L) {
  PORT_SELF(L, "receive");
  return receive_for(L, HUGE_VAL);
}
static int l_port_receive_within(lua_State *L) {
  PORT_SELF(L, "receive_within");
  return receive_for(L, check_ms(L, 2, "receive_within"));
}

/* drain(fn[, ms]): fn(v) for each value queued when it began, without
 * waiting, for at most ms (at least one when any is queued; ms_arg 0: no
 * limit). Returns the count. (Values posted meanwhile, by fn itself or by
 * a busy worker, wait for the next drain: one that took them too might
 * never return.) */
static int drain_for(lua_State *L, int ms_arg, const char *method) {
  box *b = self_box(L, PORT_MT, ms_arg ? "port:drain_for" : "port:drain", "a port (stagehand.port())");
  double ms, until;
  lua_Integer n = 0, queued;
  if (lua_type(L, 2) != LUA_TFUNCTION) /* (fn before ms, as the game's side checks) */
    fail_at(L, 1, "bad argument 'fn' to port:%s: expected a function, got %s", method, got_of(L, 2));
  ms = ms_arg ? check_ms(L, ms_arg, method) : HUGE_VAL;
  until = sh_now_ms() + ms;
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
static int l_port_drain(lua_State *L) { return drain_for(L, 0, "drain"); }
static int l_port_drain_for(lua_State *L) { return drain_for(L, 3, "drain_for"); }

static int l_port_close(lua_State *L) {
  sh_port_close((sh_port *)PORT_SELF(L, "close")->p);
  return 0;
}
static int l_port_closed(lua_State *L) {
  lua_pushboolean(L, sh_port_closed((sh_port *)PORT_SELF(L, "closed")->p));
  return 1;
}
static int l_port_count(lua_State *L) {
  box *b = PORT_SELF(L, "count");
  lua_pushinteger(L, sh_port_count((sh_port *)b->p) + (b->held ? 1 : 0));
  return 1;
}
static int l_port_watch(lua_State *L) {
  sh_port *p = PORT(L);
  if (sh_port_watch(p, (sh_notify *)shl_check_box(L, 2, NOTIFY_MT)) != SH_OK) return luaL_error(L, "not enough memory");
  return 0;
}
static int l_port_unwatch(lua_State *L) {
  sh_port *p = PORT(L);
  sh_port_unwatch(p, (sh_notify *)shl_check_box(L, 2, NOTIFY_MT));
  return 0;
}

/* ------------------------------------------------------------------------
 * Round barriers. */

void shl_push_rounds(lua_State *L, sh_rounds *r) {
  box *b = (box *)lua_newuserdata(L, sizeof *b);
  b->p = NULL, b->held = NULL, b->spare = NULL;
  luaL_getmetatable(L, ROUNDS_MT);
  lua_setmetatable(L, -2);
  sh_rounds_ref(r);
  b->p = r;
}
int shl_rounds_new(lua_State *L) {
  lua_Number n = luaL_checknumber(L, 1), len = luaL_optnumber(L, 2, 0);
  sh_rounds *r;
  box *b;
  if (!(n >= 1 && n <= 4096 && floor(n) == n)) return luaL_argerror(L, 1, "an integer from 1 to 4096");
  if (!(len >= 0 && len <= 65536 && floor(len) == len)) return luaL_argerror(L, 2, "an integer from 0 to 65536");
  /* (the box first: see shl_port_new) */
  b = (box *)lua_newuserdata(L, sizeof *b);
  b->p = NULL, b->held = NULL, b->spare = NULL;
  luaL_getmetatable(L, ROUNDS_MT);
  lua_setmetatable(L, -2);
  r = sh_rounds_new((int32_t)n, (int32_t)len);
  if (!r) return luaL_error(L, "not enough memory");
  b->p = r;
  return 1;
}
static int l_rounds_gc(lua_State *L) {
  box *b = (box *)lua_touserdata(L, 1);
  if (b->p) sh_rounds_unref((sh_rounds *)b->p);
  b->p = NULL;
  return 0;
}
#define ROUNDS(L) ((sh_rounds *)shl_check_box(L, 1, ROUNDS_MT))

static const char *const OPS[] = {"arrive", "sum", "min", "max", NULL};

/* Reads share_len numbers from the table at arg into out. */
static void read_share(lua_State *L, int level, int arg, int32_t len, double *out, const char *method) {
  int32_t i;
  if (lua_type(L, arg) != LUA_TTABLE)
    fail_at(L, level, "bad argument 'share' to b:%s: expected a table of %d numbers, got %s", method, (int)len,
            luaL_typename(L, arg));
  for (i = 0; i < len; i++) {
    lua_rawgeti(L, arg, i + 1);
    if (lua_type(L, -1) != LUA_TNUMBER)
      fail_at(L, level, "bad argument 'share' to b:%s: share[%d] is %s, not a number", method, (int)i + 1,
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

/* The arrival a wait makes, from b:method(round, count[, index, share,
 * out]) on the stack: SH_OK, SH_ECLOSED when aborted, or raises naming the
 * bad argument at the line `level` up (see fail_at). */
static int arrive_args(lua_State *L, int level, sh_rounds *r, int op, double *round_no, double **share) {
  const char *method = OPS[op];
  lua_Number rn, count;
  int32_t len = sh_rounds_share_len(r), index = 0, n = sh_rounds_participants(r);
  int rc;
  if (lua_type(L, 2) != LUA_TNUMBER || lua_tonumber(L, 2) != lua_tonumber(L, 2))
    fail_at(L, level, "bad argument 'round' to b:%s: expected a number, got %s", method, got_of(L, 2));
  if (lua_type(L, 3) != LUA_TNUMBER)
    fail_at(L, level, "bad argument 'count' to b:%s: expected an integer from 1 to %d, got %s", method, (int)n,
            got_of(L, 3));
  rn = lua_tonumber(L, 2), count = lua_tonumber(L, 3);
  if (!(count >= 1 && count <= n && floor(count) == count))
    fail_at(L, level, "bad argument 'count' to b:%s: expected an integer from 1 to %d, got %s", method, (int)n,
            got_of(L, 3));
  *round_no = (double)rn;
  *share = NULL;
  if (op != SH_OP_COUNT) {
    lua_Number ix = lua_type(L, 4) == LUA_TNUMBER ? lua_tonumber(L, 4) : 0;
    if (!(ix >= 1 && ix <= n && floor(ix) == ix))
      fail_at(L, level, "bad argument 'index' to b:%s: expected an integer from 1 to %d, got %s", method, (int)n,
              got_of(L, 4));
    index = (int32_t)ix;
    if (lua_type(L, 6) != LUA_TTABLE)
      fail_at(L, level, "bad argument 'out' to b:%s: expected a table, got %s", method, luaL_typename(L, 6));
    *share = (double *)lua_newuserdata(L, (size_t)(len ? len : 1) * sizeof(double));
    read_share(L, level, 5, len, *share, method);
  }
  rc = sh_rounds_arrive(r, *round_no, (int32_t)count, op, index, *share);
  if (rc == SH_EINVAL)
    fail_at(L, level, "b:%s: round %f was begun with another count or operation, or is complete", method,
            (double)rn);
  if (rc == SH_ESTATE)
    fail_at(L, level, "b:%s: index %d arrived at round %f already", method, (int)index, (double)rn);
  if (rc == SH_ENOMEM) luaL_error(L, "not enough memory");
  return rc;
}

#define ROUNDS_SELF(L, method) ((sh_rounds *)self_box(L, ROUNDS_MT, method, "a round barrier (stagehand.rounds())")->p)

/* b:arrive / sum / min / max as a thread waits: blocking (a worker stops
 * waiting when told to stop). */
static int rounds_blocking(lua_State *L, int op) {
  static const char *const METHODS[] = {"b:arrive", "b:sum", "b:min", "b:max"};
  sh_rounds *r = ROUNDS_SELF(L, METHODS[op]);
  double round_no, *share, *res = NULL;
  int32_t len = sh_rounds_share_len(r);
  int rc;
  if (shl_stopped(shl_stop_flag(L))) {
    lua_pushboolean(L, 0);
    return 1;
  }
  rc = arrive_args(L, 1, r, op, &round_no, &share);
  if (rc == SH_ECLOSED) {
    lua_pushboolean(L, 0);
    return 1;
  }
  if (op != SH_OP_COUNT) res = (double *)lua_newuserdata(L, (size_t)(len ? len : 1) * sizeof(double));
  set_waiting(L, "a round barrier");
  rc = sh_rounds_wait(r, round_no, res, HUGE_VAL, shl_stop_flag(L));
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
  rc = arrive_args(L, 0, r, op, &round_no, &share);
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
  sh_rounds_abort(ROUNDS_SELF(L, "b:abort"));
  return 0;
}
static int l_rounds_aborted(lua_State *L) {
  lua_pushboolean(L, sh_rounds_aborted(ROUNDS_SELF(L, "b:aborted")));
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
  if (sh_rounds_watch(r, (sh_notify *)shl_check_box(L, 2, NOTIFY_MT)) != SH_OK) return luaL_error(L, "not enough memory");
  return 0;
}
static int l_rounds_unwatch(lua_State *L) {
  sh_rounds *r = ROUNDS(L);
  sh_rounds_unwatch(r, (sh_notify *)shl_check_box(L, 2, NOTIFY_MT));
  return 0;
}

/* ------------------------------------------------------------------------
 * Inside a worker: require "stagehand.worker". */

static int w_stopping(lua_State *L) {
  const int *stop = shl_stop_flag(L);
  lua_pushboolean(L, shl_stopped(stop));
  return 1;
}

/* worker.progress(done, total) checks what job:progress checks on the game's
 * side, where it is applied: a pair that passes here never raises there. */
static int w_progress(lua_State *L) {
  worker_ctx *w = shl_this_worker(L);
  lua_Number done = -1, total = -1;
  if (!lua_isnoneornil(L, 1) || !lua_isnoneornil(L, 2)) {
    if (lua_type(L, 1) != LUA_TNUMBER || !(lua_tonumber(L, 1) >= 0) || lua_tonumber(L, 1) == HUGE_VAL)
      return luaL_error(L, "bad argument 'done' to worker.progress: expected a finite number >= 0, got %s",
                        got_of(L, 1));
    done = lua_tonumber(L, 1);
    if (lua_type(L, 2) != LUA_TNUMBER || !(lua_tonumber(L, 2) >= done) || lua_tonumber(L, 2) == HUGE_VAL)
      return luaL_error(L, "bad argument 'total' to worker.progress: expected a finite number >= done (%f), got %s",
                        (double)done, got_of(L, 2));
    total = lua_tonumber(L, 2);
  }
  if (w && w->request >= 0) sh_work_report(w->work, w->index, w->request, SH_EV_PROGRESS, NULL, done, total);
  return 0;
}

static int w_sleep(lua_State *L) {
  double ms, until;
  if (lua_type(L, 1) != LUA_TNUMBER || !(lua_tonumber(L, 1) >= 0))
    return luaL_error(L, "bad argument 'ms' to worker.sleep: expected a number >= 0, got %s", got_of(L, 1));
  ms = (double)lua_tonumber(L, 1), until = sh_now_ms() + ms;
  const int *stop = shl_stop_flag(L);
  set_waiting(L, "a sleep");
  for (;;) {
    double left = until - sh_now_ms();
    if (left <= 0) break;
    if (shl_stopped(stop)) break;
    sh_sleep_ms(left > 10 ? 10 : left);
  }
  set_waiting(L, NULL);
  lua_pushboolean(L, !shl_stopped(stop));
  return 1;
}


/* ------------------------------------------------------------------------
 * Metatables, in any state (the main one and each worker's). */

void shl_set_methods(lua_State *L, const luaL_Reg *l) {
  for (; l->name; l++) {
    lua_pushcfunction(L, l->func);
    lua_setfield(L, -2, l->name);
  }
}

static const luaL_Reg worker_api[] = {
    {"stopping", w_stopping}, {"progress", w_progress}, {"sleep", w_sleep}, {"port", shl_port_new}, {NULL, NULL}};

int shl_open_worker_api(lua_State *L) {
  lua_newtable(L);
  shl_set_methods(L, worker_api);
  return 1;
}

const luaL_Reg shl_port_methods[] = {
    {"post", l_port_post}, {"_post", l_port_post_wrapped}, {"try_receive", l_port_try}, {"receive", l_port_receive},
    {"receive_within", l_port_receive_within}, {"drain", l_port_drain}, {"drain_for", l_port_drain_for},
    {"close", l_port_close}, {"closed", l_port_closed}, {"count", l_port_count},
    {"_watch", l_port_watch}, {"_unwatch", l_port_unwatch}, {NULL, NULL}};

const luaL_Reg shl_rounds_methods[] = {
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
      shl_set_methods(L, methods);
      lua_setfield(L, -2, "__index");
    }
  }
  lua_pop(L, 1);
}

void shl_open_types(lua_State *L) {
  sh__new_type(L, PORT_MT, l_port_gc, shl_port_methods);
  sh__new_type(L, ROUNDS_MT, l_rounds_gc, shl_rounds_methods);
  sh__new_type(L, NOTIFY_MT, l_notify_gc, NULL);
}

