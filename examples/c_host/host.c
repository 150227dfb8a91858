/*
 * A C host embedding Lua, the way a C or C++ engine would run stagehand:
 * one Lua state, a frame loop that lets the game make its requests, calls
 * orch:step(budget) once a frame, and sleeps until the next frame or until
 * orch:next_wake() says stagehand has something to do, whichever is first.
 *
 * Built against LuaJIT, Lua 5.4 or 5.3 (make c-host); run from the tree with the
 * environment `make env` prints:
 *   eval "$(make -s env LUA=luajit)"; ./build/c_host/host_luajit examples/c_host/game.lua
 *
 * Built with SH_LINKED (host_static_*), the engine links Lua statically and
 * stagehand's core into the program itself, and registers the core with
 * package.preload["stagehand._core"]: nothing is loaded at run time. Linked
 * with -Wl,-E (-rdynamic), LuaJIT's FFI backend then finds the core's
 * functions in the program; without it, the C module runs, and says why.
 * (A program that links Lua statically and loads stagehand's _core.so
 * instead must export Lua's symbols the same way, -Wl,-E.)
 */
#define _POSIX_C_SOURCE 199309L /* clock_gettime, nanosleep */
#define _DARWIN_C_SOURCE /* (macOS hides CLOCK_MONOTONIC under a bare _POSIX_C_SOURCE) */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "lauxlib.h"
#include "lua.h"
#include "lualib.h"

#ifdef SH_LINKED
int luaopen_stagehand__core(lua_State *L); /* stagehand's module, linked in (csrc/lua/lstagehand.c) */
#endif

#define FRAME_MS 16.0 /* a 60 Hz frame */
#define STEP_BUDGET_MS 4.0 /* what stagehand may take of each frame */

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void sleep_ms(double ms) {
  struct timespec ts;
  if (ms <= 0) return;
  ts.tv_sec = (time_t)(ms / 1e3);
  ts.tv_nsec = (long)((ms - (double)ts.tv_sec * 1e3) * 1e6);
  nanosleep(&ts, NULL);
}

/* The engine's clock, handed to the game's orchestrator. */
static int l_now(lua_State *L) {
  lua_pushnumber(L, now_ms());
  return 1;
}

/* Calls game[name](game, ...) with nargs arguments on the stack; leaves
 * nres results. Any error ends the host with its message. */
static void call_game(lua_State *L, int game, const char *name, int nargs, int nres) {
  lua_getfield(L, game, name);
  lua_insert(L, -1 - nargs);
  lua_pushvalue(L, game);
  lua_insert(L, -1 - nargs);
  if (lua_pcall(L, nargs + 1, nres, 0) != 0) {
    fprintf(stderr, "host: game.%s: %s\n", name, lua_tostring(L, -1));
    exit(1);
  }
}

int main(int argc, char **argv) {
  lua_State *L;
  int game, orch, frame = 0, slept = 0;
  double start;
  if (argc < 2) {
    fprintf(stderr, "usage: %s game.lua\n", argv[0]);
    return 2;
  }
  L = luaL_newstate();
  luaL_openlibs(L); /* (package.path and cpath come from LUA_PATH and LUA_CPATH) */
#ifdef SH_LINKED
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "preload");
  lua_pushcfunction(L, luaopen_stagehand__core);
  lua_setfield(L, -2, "stagehand._core");
  lua_pop(L, 2);
#endif
  lua_pushcfunction(L, l_now);
  lua_setglobal(L, "engine_now");
  if (luaL_dofile(L, argv[1]) != 0) {
    fprintf(stderr, "host: %s\n", lua_tostring(L, -1));
    return 1;
  }
  game = lua_gettop(L); /* the script returns the game: {orch =, update =, done =, finish =} */
  lua_getfield(L, game, "orch");
  orch = lua_gettop(L);
  start = now_ms();
  for (;;) {
    double frame_start = now_ms(), wake, left;
    int done;
    frame++;
    lua_pushinteger(L, frame);
    call_game(L, game, "update", 1, 0); /* the frame's requests, then its drawing */
    /* orch:step(budget): after the game made this frame's requests */
    lua_getfield(L, orch, "step");
    lua_pushvalue(L, orch);
    lua_pushnumber(L, STEP_BUDGET_MS);
    if (lua_pcall(L, 2, 0, 0) != 0) {
      fprintf(stderr, "host: orch:step: %s\n", lua_tostring(L, -1));
      return 1;
    }
    call_game(L, game, "done", 0, 1);
    done = lua_toboolean(L, -1);
    lua_pop(L, 1);
    if (done || frame >= 600) break;
    /* Sleep to the next frame, or less if stagehand wakes sooner. */
    lua_getfield(L, orch, "next_wake");
    lua_pushvalue(L, orch);
    if (lua_pcall(L, 1, 1, 0) != 0) {
      fprintf(stderr, "host: orch:next_wake: %s\n", lua_tostring(L, -1));
      return 1;
    }
    wake = lua_isnil(L, -1) ? FRAME_MS : (double)lua_tonumber(L, -1);
    lua_pop(L, 1);
    left = frame_start + FRAME_MS - now_ms();
    if (wake < left) left = wake;
    if (left > 0) {
      sleep_ms(left);
      slept++;
    }
  }
  lua_pushinteger(L, frame);
  lua_pushnumber(L, now_ms() - start);
  call_game(L, game, "finish", 2, 0);
  printf("host: %d frames, slept between %d of them by next_wake and the frame time\n", frame, slept);
  lua_close(L);
  return 0;
}
