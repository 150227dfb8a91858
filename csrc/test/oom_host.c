/*
 * A Lua host (5.4, 5.1 or LuaJIT: make test-oom builds one of each) whose
 * allocator fails on demand, as Lua's own ltests does: oom.fail_after(n)
 * lets n more allocations (or growths) through and fails every one after;
 * oom.off() turns failing off and returns how many went through;
 * oom.c_calls() counts the C allocations of a module built with the hooks
 * below, and oom.refuse_c(n) refuses one of them alone. It runs the script
 * named on its command line, which loads stagehand and fails each
 * allocation of each operation in turn.
 */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#ifdef LUA_JITLIBNAME
#include <luajit.h>
#endif

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static long limit = -1; /* allocations still allowed; -1: no limit */
static long used = 0;
static lua_State *main_state; /* for OOM_WHERE: where the first failure came */
static int told;

/* With OOM_WHERE set, the first failed allocation of each run prints the
 * main thread's Lua stack (lua_getstack and lua_getinfo "Sl" allocate
 * nothing). */
static void tell_where(void) {
  lua_Debug ar;
  int level;
  if (told || !main_state || !getenv("OOM_WHERE")) return;
  told = 1;
  fprintf(stderr, "  failed at allocation %ld:", used);
  for (level = 0; level < 14 && lua_getstack(main_state, level, &ar); level++) {
    if (lua_getinfo(main_state, "Sl", &ar) && ar.currentline > 0) fprintf(stderr, " %s:%d", ar.short_src, ar.currentline);
  }
  fprintf(stderr, "\n");
}

static void *oom_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  (void)ud;
  if (nsize == 0) {
    free(ptr);
    return NULL;
  }
  /* (osize is a type tag when ptr is NULL: every new block counts) */
  if (limit >= 0 && (ptr == NULL || nsize > osize)) {
    if (used >= limit) {
      tell_where();
      return NULL;
    }
    used++;
  }
  return realloc(ptr, nsize);
}

/* The core's and the module's own C allocations, in a module built with
 * malloc, calloc and realloc renamed to these (make test-oom's
 * build/oom/lua5.4): on the main thread they count and fail with Lua's.
 * Worker threads allocate freely, as their Lua states do. */
static pthread_t main_thread;
static long c_calls; /* the hooks' calls on the main thread: none when the module has no hooks */
void *sh_test_malloc(size_t n);
void *sh_test_calloc(size_t n, size_t size);
void *sh_test_realloc(void *p, size_t n);
static long c_refuse_at = -1, c_seen; /* oom.refuse_c: that C allocation alone, counted from 0 */
static int c_refused;
static int c_allowed(void) {
  if (!pthread_equal(pthread_self(), main_thread)) return 1;
  c_calls++;
  if (c_refuse_at >= 0 && c_seen++ == c_refuse_at) {
    c_refused = 1;
    return 0;
  }
  if (limit < 0) return 1;
  if (used >= limit) {
    tell_where();
    return 0;
  }
  used++;
  return 1;
}
void *sh_test_malloc(size_t n) { return c_allowed() ? malloc(n) : NULL; }
void *sh_test_calloc(size_t n, size_t size) { return c_allowed() ? calloc(n, size) : NULL; }
void *sh_test_realloc(void *p, size_t n) { return c_allowed() ? realloc(p, n) : NULL; }

static int l_fail_after(lua_State *L) {
  limit = (long)luaL_checkinteger(L, 1);
  used = 0;
  told = 0;
  return 0;
}

static int l_off(lua_State *L) {
  limit = -1;
  lua_pushinteger(L, (lua_Integer)used);
  return 1;
}

/* oom.refuse_c(n): the n-th C allocation from now (0: the next) is
 * refused, and no other; oom.refuse_c() turns it off and says whether it
 * was refused. (Lua has memory to spare: what the core's refusal does, not
 * what a Lua allocation's does.) */
static int l_refuse_c(lua_State *L) {
  if (lua_isnoneornil(L, 1)) {
    c_refuse_at = -1;
    lua_pushboolean(L, c_refused);
    return 1;
  }
  c_refuse_at = (long)luaL_checkinteger(L, 1);
  c_seen = 0;
  c_refused = 0;
  return 0;
}

static int l_c_calls(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)c_calls);
  return 1;
}

#ifndef LUA_OK /* Lua 5.1 (LuaJIT 2.1 has these) */
#define LUA_OK 0
#define luaL_newlib(L, l) (lua_newtable(L), luaL_register(L, NULL, l))
#endif

static int traceback(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
#if LUA_VERSION_NUM >= 502 || defined(luaL_newlibtable)
  luaL_traceback(L, L, msg ? msg : "(an error that is not a string)", 1);
#else
  lua_getglobal(L, "debug");
  lua_getfield(L, -1, "traceback");
  lua_pushstring(L, msg ? msg : "(an error that is not a string)");
  lua_pushinteger(L, 2);
  lua_call(L, 2, 1);
#endif
  return 1;
}

int main(int argc, char **argv) {
  lua_State *L;
  int rc;
  static const luaL_Reg fns[] = {{"fail_after", l_fail_after}, {"off", l_off}, {"c_calls", l_c_calls},
                                   {"refuse_c", l_refuse_c}, {NULL, NULL}};
  if (argc < 2) {
    fprintf(stderr, "usage: %s script.lua\n", argv[0]);
    return 2;
  }
  main_thread = pthread_self();
  L = lua_newstate(oom_alloc, NULL);
  if (!L) return 1;
  main_state = L;
  luaL_openlibs(L);
#ifdef LUA_JITLIBNAME
  /* LuaJIT's interpreter only: the LuaJIT 2.1 this runs on (Debian's,
   * 2022) crashes when memory runs out inside a compiled trace (lj_err_mem,
   * called from a trace's table allocation, reads a frame the trace never
   * wrote back; a loop that fills tables is enough; upstream's of 2026
   * does not), which no Lua code can prevent. The interpreter runs the
   * same code in the same order. */
  luaJIT_setmode(L, 0, LUAJIT_MODE_ENGINE | LUAJIT_MODE_OFF);
#endif
  luaL_newlib(L, fns);
  lua_setglobal(L, "oom");
  lua_pushcfunction(L, traceback);
  rc = luaL_loadfile(L, argv[1]);
  if (rc == LUA_OK) rc = lua_pcall(L, 0, 0, -2);
  if (rc != LUA_OK) fprintf(stderr, "%s\n", lua_tostring(L, -1));
  lua_close(L);
  return rc == LUA_OK ? 0 : 1;
}
