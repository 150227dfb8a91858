/*
 * stagehand._core: the classic C module over the core, for PUC Lua 5.1-5.4
 * (and LuaJIT when STAGEHAND_BACKEND=c). It mirrors the flat C API one
 * function for one function, so lua/stagehand/backend.lua can treat it and
 * the FFI library alike. Objects are full userdata whose __gc calls the one
 * destroy function; statuses come back as integers, as from the FFI.
 */
#include "../core/stagehand.h"

#include <math.h>

#include "lauxlib.h"
#include "lua.h"

#define CLOCK_MT "stagehand.clock"
#define TIMERS_MT "stagehand.timers"
#define IDS_MT "stagehand.ids"
#define POOL_MT "stagehand.pool"
#define BARRIER_MT "stagehand.barrier"

typedef struct box {
  void *p;
} box;

/* Every function of the module carries the five metatables as upvalues, in
 * this order, so a check compares the argument's metatable with one of them
 * directly. (luaL_checkudata looks the metatable up in the registry by
 * name on every call; on Lua 5.4 that interns the name, with a strcmp,
 * and the lookup came to about 3% of a pooled job's instructions.) */
enum { CLOCK_UV = 1, TIMERS_UV, IDS_UV, POOL_UV, BARRIER_UV, NUM_UV = BARRIER_UV };
static const char *const uv_names[NUM_UV + 1] = {NULL, CLOCK_MT, TIMERS_MT, IDS_MT, POOL_MT, BARRIER_MT};

#if LUA_VERSION_NUM >= 502
#define udata_len(L, i) lua_rawlen(L, i)
#else
#define udata_len(L, i) lua_objlen(L, i)
#endif

static void *check_obj(lua_State *L, int arg, int uv) {
  box *b = NULL;
  if (lua_type(L, arg) == LUA_TUSERDATA && udata_len(L, arg) == sizeof(box) && lua_getmetatable(L, arg)) {
    if (lua_rawequal(L, -1, lua_upvalueindex(uv))) b = (box *)lua_touserdata(L, arg);
    lua_pop(L, 1);
  }
  if (!b) {
    const char *got = luaL_typename(L, arg), *msg;
    if (luaL_getmetafield(L, arg, "__name") && lua_type(L, -1) == LUA_TSTRING) got = lua_tostring(L, -1);
    msg = lua_pushfstring(L, "%s expected, got %s", uv_names[uv], got);
    luaL_argerror(L, arg, msg);
    return NULL;
  }
  if (!b->p) luaL_argerror(L, arg, "object already freed");
  return b->p;
}
#define CLOCK(L) ((sh_clock *)check_obj(L, 1, CLOCK_UV))
#define TIMERS(L) ((sh_timers *)check_obj(L, 1, TIMERS_UV))
#define IDS(L) ((sh_ids *)check_obj(L, 1, IDS_UV))
#define POOL(L) ((sh_pool *)check_obj(L, 1, POOL_UV))
#define BARRIER(L) ((sh_barrier *)check_obj(L, 1, BARRIER_UV))

/* Ids arrive as Lua numbers; anything not a whole number in range maps to -1,
 * which the core refuses with SH_EINVAL, instead of an undefined cast. */
static int32_t check_id(lua_State *L, int arg) {
  lua_Number n = luaL_checknumber(L, arg);
  if (!(n >= 0 && n < (lua_Number)SH_MAX_ID) || floor(n) != n) return -1;
  return (int32_t)n;
}

/* The box first, empty (its __gc frees nothing), then the object: made
 * the other way round, a box that ran out of Lua memory left the object
 * unreachable and never freed. */
static box *new_box(lua_State *L, const char *mt) {
  box *b = (box *)lua_newuserdata(L, sizeof *b);
  b->p = NULL;
  luaL_getmetatable(L, mt);
  lua_setmetatable(L, -2);
  return b;
}
static int filled(lua_State *L, box *b) {
  if (!b->p) return luaL_error(L, "stagehand: not enough memory");
  return 1;
}

static int ret_int(lua_State *L, int v) {
  lua_pushinteger(L, v);
  return 1;
}

static int l_clock_new(lua_State *L) {
  box *b = new_box(L, CLOCK_MT);
  b->p = sh_clock_new();
  return filled(L, b);
}
static int l_clock_gc(lua_State *L) {
  box *b = (box *)luaL_checkudata(L, 1, CLOCK_MT);
  sh_clock_free((sh_clock *)b->p);
  b->p = NULL;
  return 0;
}
static int l_clock_start(lua_State *L) {
  sh_clock *c = CLOCK(L);
  return ret_int(L, sh_clock_start(c, check_id(L, 2), luaL_checknumber(L, 3), luaL_checknumber(L, 4)));
}
static int l_clock_restart(lua_State *L) {
  sh_clock *c = CLOCK(L);
  return ret_int(L, sh_clock_restart(c, check_id(L, 2), luaL_checknumber(L, 3)));
}
static int l_clock_progress(lua_State *L) {
  sh_clock *c = CLOCK(L);
  return ret_int(L, sh_clock_progress(c, check_id(L, 2), luaL_checknumber(L, 3)));
}
static int l_clock_pause(lua_State *L) {
  sh_clock *c = CLOCK(L);
  return ret_int(L, sh_clock_pause(c, check_id(L, 2)));
}
static int l_clock_resume(lua_State *L) {
  sh_clock *c = CLOCK(L);
  return ret_int(L, sh_clock_resume(c, check_id(L, 2), luaL_checknumber(L, 3)));
}
static int l_clock_stop(lua_State *L) {
  sh_clock *c = CLOCK(L);
  return ret_int(L, sh_clock_stop(c, check_id(L, 2)));
}
static int l_clock_set_visible(lua_State *L) {
  sh_clock *c = CLOCK(L);
  luaL_checkany(L, 2);
  return ret_int(L, sh_clock_set_visible(c, lua_toboolean(L, 2), luaL_checknumber(L, 3)));
}
static int l_clock_visible(lua_State *L) { return ret_int(L, sh_clock_visible(CLOCK(L))); }
static int l_clock_visible_time(lua_State *L) {
  sh_clock *c = CLOCK(L);
  lua_pushnumber(L, sh_clock_visible_time(c, luaL_checknumber(L, 2)));
  return 1;
}
static int l_clock_next_due(lua_State *L) {
  sh_clock *c = CLOCK(L);
  lua_pushnumber(L, sh_clock_next_due(c, luaL_checknumber(L, 2)));
  return 1;
}
static int l_clock_pop_stalled(lua_State *L) {
  sh_clock *c = CLOCK(L);
  return ret_int(L, sh_clock_pop_stalled(c, luaL_checknumber(L, 2)));
}
static int l_clock_stall_ms(lua_State *L) {
  sh_clock *c = CLOCK(L);
  lua_pushnumber(L, sh_clock_stall_ms(c, check_id(L, 2)));
  return 1;
}
static int l_clock_count(lua_State *L) { return ret_int(L, sh_clock_count(CLOCK(L))); }
static int l_clock_check(lua_State *L) { return ret_int(L, sh_clock_check(CLOCK(L))); }

static int l_ids_new(lua_State *L) {
  box *b = new_box(L, IDS_MT);
  b->p = sh_ids_new();
  return filled(L, b);
}
static int l_ids_gc(lua_State *L) {
  box *b = (box *)luaL_checkudata(L, 1, IDS_MT);
  sh_ids_free((sh_ids *)b->p);
  b->p = NULL;
  return 0;
}
static int l_ids_take(lua_State *L) { return ret_int(L, sh_ids_take(IDS(L))); }
static int l_ids_give(lua_State *L) {
  sh_ids *s = IDS(L);
  return ret_int(L, sh_ids_give(s, check_id(L, 2)));
}
static int l_ids_count(lua_State *L) { return ret_int(L, sh_ids_count(IDS(L))); }
static int l_ids_check(lua_State *L) { return ret_int(L, sh_ids_check(IDS(L))); }

static int l_timers_new(lua_State *L) {
  box *b = new_box(L, TIMERS_MT);
  b->p = sh_timers_new();
  return filled(L, b);
}
static int l_timers_gc(lua_State *L) {
  box *b = (box *)luaL_checkudata(L, 1, TIMERS_MT);
  sh_timers_free((sh_timers *)b->p);
  b->p = NULL;
  return 0;
}
static int l_timers_add(lua_State *L) {
  sh_timers *t = TIMERS(L);
  return ret_int(L, sh_timers_add(t, check_id(L, 2), luaL_checknumber(L, 3)));
}
static int l_timers_cancel(lua_State *L) {
  sh_timers *t = TIMERS(L);
  return ret_int(L, sh_timers_cancel(t, check_id(L, 2)));
}
static int l_timers_peek(lua_State *L) {
  lua_pushnumber(L, sh_timers_peek(TIMERS(L)));
  return 1;
}
static int l_timers_pop(lua_State *L) {
  sh_timers *t = TIMERS(L);
  return ret_int(L, sh_timers_pop(t, luaL_checknumber(L, 2)));
}
static int l_timers_count(lua_State *L) { return ret_int(L, sh_timers_count(TIMERS(L))); }
static int l_timers_check(lua_State *L) { return ret_int(L, sh_timers_check(TIMERS(L))); }

static int l_clock_join(lua_State *L) {
  sh_clock *c = CLOCK(L);
  int32_t id = check_id(L, 2);
  lua_Number g = luaL_checknumber(L, 3);
  /* -1 unlinks; any other value out of range maps to one the core refuses */
  int32_t group = (g == -1) ? -1 : check_id(L, 3);
  if (g != -1 && group < 0) group = -2;
  return ret_int(L, sh_clock_join(c, id, group));
}
static int l_clock_touch(lua_State *L) {
  sh_clock *c = CLOCK(L);
  return ret_int(L, sh_clock_touch(c, check_id(L, 2), luaL_checknumber(L, 3)));
}

static int l_pool_new(lua_State *L) {
  box *b = new_box(L, POOL_MT);
  b->p = sh_pool_new();
  return filled(L, b);
}
static int l_pool_gc(lua_State *L) {
  box *b = (box *)luaL_checkudata(L, 1, POOL_MT);
  sh_pool_free((sh_pool *)b->p);
  b->p = NULL;
  return 0;
}
static int l_pool_set_capacity(lua_State *L) {
  sh_pool *p = POOL(L);
  return ret_int(L, sh_pool_set_capacity(p, check_id(L, 2)));
}
static int l_pool_capacity(lua_State *L) { return ret_int(L, sh_pool_capacity(POOL(L))); }
static int l_pool_in_use(lua_State *L) { return ret_int(L, sh_pool_in_use(POOL(L))); }
static int l_pool_waiting(lua_State *L) { return ret_int(L, sh_pool_waiting(POOL(L))); }
static int l_pool_try_acquire(lua_State *L) { return ret_int(L, sh_pool_try_acquire(POOL(L))); }
static int l_pool_release(lua_State *L) { return ret_int(L, sh_pool_release(POOL(L))); }
static int l_pool_reset_use(lua_State *L) { return ret_int(L, sh_pool_reset_use(POOL(L))); }
static int l_pool_enqueue(lua_State *L) {
  sh_pool *p = POOL(L);
  return ret_int(L, sh_pool_enqueue(p, check_id(L, 2), check_id(L, 3)));
}
static int l_pool_remove(lua_State *L) {
  sh_pool *p = POOL(L);
  return ret_int(L, sh_pool_remove(p, check_id(L, 2)));
}
static int l_pool_move(lua_State *L) {
  sh_pool *p = POOL(L);
  return ret_int(L, sh_pool_move(p, check_id(L, 2), check_id(L, 3)));
}
static int l_pool_group_of(lua_State *L) {
  sh_pool *p = POOL(L);
  return ret_int(L, sh_pool_group_of(p, check_id(L, 2)));
}
static int l_pool_is_waiting(lua_State *L) {
  sh_pool *p = POOL(L);
  return ret_int(L, sh_pool_is_waiting(p, check_id(L, 2)));
}
static int l_pool_next_group(lua_State *L) {
  sh_pool *p = POOL(L);
  lua_Number a = luaL_checknumber(L, 2);
  return ret_int(L, sh_pool_next_group(p, a < 0 ? -1 : check_id(L, 2)));
}
static int l_pool_set_rank(lua_State *L) {
  sh_pool *p = POOL(L);
  return ret_int(L, sh_pool_set_rank(p, check_id(L, 2), luaL_checknumber(L, 3)));
}
static int l_pool_fix_rank(lua_State *L) {
  sh_pool *p = POOL(L);
  return ret_int(L, sh_pool_fix_rank(p, check_id(L, 2), luaL_checknumber(L, 3)));
}
static int l_pool_forget_group(lua_State *L) {
  sh_pool *p = POOL(L);
  return ret_int(L, sh_pool_forget_group(p, check_id(L, 2)));
}
static int l_pool_reread(lua_State *L) {
  sh_pool *p = POOL(L);
  return ret_int(L, sh_pool_reread(p, check_id(L, 2)));
}
static int l_pool_next_live(lua_State *L) {
  sh_pool *p = POOL(L);
  lua_Number a = luaL_checknumber(L, 2);
  return ret_int(L, sh_pool_next_live(p, a < 0 ? -1 : check_id(L, 2)));
}
static int l_pool_new_reads(lua_State *L) { return ret_int(L, sh_pool_new_reads(POOL(L))); }
static int l_pool_next_unread(lua_State *L) { return ret_int(L, sh_pool_next_unread(POOL(L))); }
static int l_pool_grantable(lua_State *L) { return ret_int(L, sh_pool_grantable(POOL(L))); }
static int l_pool_best(lua_State *L) { return ret_int(L, sh_pool_best(POOL(L))); }
static int l_pool_rank_of(lua_State *L) {
  sh_pool *p = POOL(L);
  lua_pushnumber(L, sh_pool_rank_of(p, check_id(L, 2)));
  return 1;
}
static int l_pool_arrival(lua_State *L) {
  sh_pool *p = POOL(L);
  lua_pushnumber(L, sh_pool_arrival(p, check_id(L, 2)));
  return 1;
}
static int l_pool_grant(lua_State *L) {
  sh_pool *p = POOL(L);
  return ret_int(L, sh_pool_grant(p, check_id(L, 2)));
}
static int l_pool_check(lua_State *L) { return ret_int(L, sh_pool_check(POOL(L))); }
static int l_pool_peek_next(lua_State *L) { return ret_int(L, sh_pool_peek_next(POOL(L))); }
static int l_pool_peek_end(lua_State *L) { return ret_int(L, sh_pool_peek_end(POOL(L))); }

static int l_barrier_new(lua_State *L) {
  int32_t n = check_id(L, 1);
  box *b;
  if (n < 0) return luaL_argerror(L, 1, "a barrier size from 0 to 2^24 - 1");
  b = new_box(L, BARRIER_MT);
  b->p = sh_barrier_new(n); /* (NULL: out of memory, the size was checked) */
  return filled(L, b);
}
static int l_barrier_gc(lua_State *L) {
  box *b = (box *)luaL_checkudata(L, 1, BARRIER_MT);
  sh_barrier_free((sh_barrier *)b->p);
  b->p = NULL;
  return 0;
}
static int l_barrier_arrive(lua_State *L) {
  sh_barrier *b = BARRIER(L);
  return ret_int(L, sh_barrier_arrive(b, check_id(L, 2)));
}
static int l_barrier_arrived(lua_State *L) { return ret_int(L, sh_barrier_arrived(BARRIER(L))); }
static int l_barrier_size(lua_State *L) { return ret_int(L, sh_barrier_size(BARRIER(L))); }
static int l_barrier_next_missing(lua_State *L) {
  sh_barrier *b = BARRIER(L);
  lua_Number a = luaL_checknumber(L, 2);
  return ret_int(L, sh_barrier_next_missing(b, a < 0 ? -1 : check_id(L, 2)));
}

static int l_now_ms(lua_State *L) {
  lua_pushnumber(L, sh_now_ms());
  return 1;
}
static int l_cores(lua_State *L) { return ret_int(L, sh_cores()); }
static int l_sleep_ms(lua_State *L) {
  sh_sleep_ms(luaL_checknumber(L, 1));
  return 0;
}

/* fields_within(t, set): whether every key of table t is a key of table set
 * with a true value. Options tables are checked for unknown fields on every
 * run; LuaJIT compiles no call of `next`, so the walk is done here. */
static int l_fields_within(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_checktype(L, 2, LUA_TTABLE);
  lua_pushnil(L);
  while (lua_next(L, 1)) {
    int known;
    lua_pop(L, 1);
    lua_pushvalue(L, -1);
    lua_rawget(L, 2);
    known = lua_toboolean(L, -1);
    lua_pop(L, 1);
    if (!known) {
      lua_pushboolean(L, 0);
      return 1;
    }
  }
  lua_pushboolean(L, 1);
  return 1;
}

/* is_list(t): whether every key of table t is a whole number from 1 to #t
 * (the lists stagehand.all and its kind take, walked here for the same
 * reason as fields_within). */
static int l_is_list(lua_State *L) {
  lua_Number n;
  luaL_checktype(L, 1, LUA_TTABLE);
#if LUA_VERSION_NUM >= 502
  n = (lua_Number)lua_rawlen(L, 1);
#else
  n = (lua_Number)lua_objlen(L, 1);
#endif
  lua_pushnil(L);
  while (lua_next(L, 1)) {
    lua_Number k;
    lua_pop(L, 1);
    k = lua_type(L, -1) == LUA_TNUMBER ? lua_tonumber(L, -1) : -1;
    if (!(k >= 1 && k <= n && k == (lua_Number)(long long)k)) {
      lua_pushboolean(L, 0);
      return 1;
    }
  }
  lua_pushboolean(L, 1);
  return 1;
}

/* next(t, k): Lua's next, as a plain C function. On a LuaJIT that compiles
 * next() into IR_NEXT with LuaJIT bug #829 (lua/stagehand/core/compat.lua),
 * stagehand's loops call this instead: a trace stitches around it, and no
 * IR_NEXT is compiled. */
static int l_next(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 2);
  if (lua_next(L, 1)) return 2;
  lua_pushnil(L);
  return 1;
}

static const luaL_Reg funcs[] = {
    {"next", l_next},
    {"fields_within", l_fields_within},
    {"is_list", l_is_list},
    {"clock_new", l_clock_new},
    {"clock_free", l_clock_gc},
    {"clock_start", l_clock_start},
    {"clock_restart", l_clock_restart},
    {"clock_progress", l_clock_progress},
    {"clock_pause", l_clock_pause},
    {"clock_resume", l_clock_resume},
    {"clock_stop", l_clock_stop},
    {"clock_set_visible", l_clock_set_visible},
    {"clock_visible", l_clock_visible},
    {"clock_visible_time", l_clock_visible_time},
    {"clock_next_due", l_clock_next_due},
    {"clock_pop_stalled", l_clock_pop_stalled},
    {"clock_stall_ms", l_clock_stall_ms},
    {"clock_count", l_clock_count},
    {"clock_check", l_clock_check},
    {"clock_join", l_clock_join},
    {"clock_touch", l_clock_touch},
    {"pool_new", l_pool_new},
    {"pool_free", l_pool_gc},
    {"pool_set_capacity", l_pool_set_capacity},
    {"pool_capacity", l_pool_capacity},
    {"pool_in_use", l_pool_in_use},
    {"pool_waiting", l_pool_waiting},
    {"pool_try_acquire", l_pool_try_acquire},
    {"pool_release", l_pool_release},
    {"pool_reset_use", l_pool_reset_use},
    {"pool_enqueue", l_pool_enqueue},
    {"pool_remove", l_pool_remove},
    {"pool_move", l_pool_move},
    {"pool_group_of", l_pool_group_of},
    {"pool_is_waiting", l_pool_is_waiting},
    {"pool_next_group", l_pool_next_group},
    {"pool_set_rank", l_pool_set_rank},
    {"pool_fix_rank", l_pool_fix_rank},
    {"pool_forget_group", l_pool_forget_group},
    {"pool_next_live", l_pool_next_live},
    {"pool_new_reads", l_pool_new_reads},
    {"pool_next_unread", l_pool_next_unread},
    {"pool_reread", l_pool_reread},
    {"pool_grantable", l_pool_grantable},
    {"pool_best", l_pool_best},
    {"pool_rank_of", l_pool_rank_of},
    {"pool_arrival", l_pool_arrival},
    {"pool_grant", l_pool_grant},
    {"pool_check", l_pool_check},
    {"pool_peek_next", l_pool_peek_next},
    {"pool_peek_end", l_pool_peek_end},
    {"barrier_new", l_barrier_new},
    {"barrier_free", l_barrier_gc},
    {"barrier_arrive", l_barrier_arrive},
    {"barrier_arrived", l_barrier_arrived},
    {"barrier_size", l_barrier_size},
    {"barrier_next_missing", l_barrier_next_missing},
    {"timers_new", l_timers_new},
    {"timers_free", l_timers_gc},
    {"timers_add", l_timers_add},
    {"timers_cancel", l_timers_cancel},
    {"timers_peek", l_timers_peek},
    {"timers_pop", l_timers_pop},
    {"timers_count", l_timers_count},
    {"timers_check", l_timers_check},
    {"ids_new", l_ids_new},
    {"ids_free", l_ids_gc},
    {"ids_take", l_ids_take},
    {"ids_give", l_ids_give},
    {"ids_count", l_ids_count},
    {"ids_check", l_ids_check},
    {"now_ms", l_now_ms},
    {"cores", l_cores},
    {"sleep_ms", l_sleep_ms},
    {NULL, NULL},
};

static void set_funcs(lua_State *L, const luaL_Reg *l) {
  int i;
  for (; l->name; l++) {
    for (i = 1; i <= NUM_UV; i++) luaL_getmetatable(L, uv_names[i]);
    lua_pushcclosure(L, l->func, NUM_UV);
    lua_setfield(L, -2, l->name);
  }
}

/* (lchannels.c: the metatable `name`, with its __gc and __name) */
void sh__new_type(lua_State *L, const char *name, lua_CFunction gc, const luaL_Reg *methods);

#if defined(_WIN32)
#define SH_EXPORT __declspec(dllexport)
#else
#define SH_EXPORT __attribute__((visibility("default")))
#endif

int sh__open_threads(lua_State *L); /* lpool.c */

SH_EXPORT int luaopen_stagehand__core(lua_State *L);
SH_EXPORT int luaopen_stagehand__core(lua_State *L) {
  sh_pin_library(); /* __gc of our userdata may run after the module is closed */
  sh__new_type(L, CLOCK_MT, l_clock_gc, NULL);
  sh__new_type(L, TIMERS_MT, l_timers_gc, NULL);
  sh__new_type(L, POOL_MT, l_pool_gc, NULL);
  sh__new_type(L, BARRIER_MT, l_barrier_gc, NULL);
  sh__new_type(L, IDS_MT, l_ids_gc, NULL);
  lua_newtable(L);
  set_funcs(L, funcs);
  /* the statuses, by the names the header gives them */
  lua_pushinteger(L, SH_OK);
  lua_setfield(L, -2, "SH_OK");
  lua_pushinteger(L, SH_EINVAL);
  lua_setfield(L, -2, "SH_EINVAL");
  lua_pushinteger(L, SH_ENOMEM);
  lua_setfield(L, -2, "SH_ENOMEM");
  lua_pushinteger(L, SH_ESTATE);
  lua_setfield(L, -2, "SH_ESTATE");
  sh__open_threads(L);
  lua_setfield(L, -2, "threads");
  return 1;
}
