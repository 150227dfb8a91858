/*
 * Internal to stagehand._core's threads' bindings (lvalues.c, lchannels.c,
 * lworkers.c, lpool.c): what the four files share. Each file is one
 * concern: copying values between states; notifiers, ports and round
 * barriers and the worker's own API; worker states and their main loop;
 * a pool's queue and threads as the main side holds them.
 */
#ifndef SH_LTHREADS_H
#define SH_LTHREADS_H
#include "../platform/sh_platform.h"
#include "../core/sh_threads.h"
#include "../core/stagehand.h"

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

typedef struct box {
  void *p;
  /* (a port's) A value taken from the port whose decoding ran out of
   * memory: the next receive through this box gives it, so it is neither
   * lost nor leaked (the box's __gc frees one never received). */
  sh_msg *held;
  /* (a port's) The message a post copies its value into, made by the
   * post: one that the Lua API cut short for memory stays here, for the
   * next post or the box's __gc, instead of being lost. */
  sh_msg *spare;
} box;


/* lchannels.c: a box's object, or an argument error */
void *shl_check_box(lua_State *L, int arg, const char *mt);

/* lvalues.c: messages from and to Lua values */
sh_msg *shl_try_encode_objects(lua_State *L, int first, int last, const char *root, int counted, sh_msg *into,
                               int objs);
sh_msg *shl_try_encode_values(lua_State *L, int first, int last, const char *root, int counted, sh_msg *into);
sh_msg *shl_encode_values(lua_State *L, int first, int last, const char *root, int counted, sh_msg *into);
int shl_decode_objects(lua_State *L, const sh_msg *m, int counted, int fetch, double id, int *fetched);
int shl_decode_values(lua_State *L, const sh_msg *m, int counted);

/* The worker a thread runs, as its state knows it. */
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
  /* (hosted) The request now running moved LÖVE objects, in or out: once
   * it ends, the state is collected, so that the objects' Lua faces here
   * let go of them (a decoder's images would otherwise stay alive until
   * this state's own collector came round, which its small heap seldom
   * makes it do). */
  int moved_objects;
} worker_ctx;

/* lchannels.c */
worker_ctx *shl_this_worker(lua_State *L);
int shl_stopped(const int *stop);
void shl_push_port(lua_State *L, sh_port *p);
void shl_push_rounds(lua_State *L, sh_rounds *r);
void shl_set_methods(lua_State *L, const luaL_Reg *l);
int shl_open_worker_api(lua_State *L);
void shl_open_types(lua_State *L);
int shl_notify_new(lua_State *L);
int shl_notify_gen(lua_State *L);
int shl_notify_wait(lua_State *L);
int shl_notify_signal(lua_State *L);
int shl_notify_fd(lua_State *L);
int shl_notify_clear(lua_State *L);
int shl_port_new(lua_State *L);
int shl_rounds_new(lua_State *L);
extern const luaL_Reg shl_port_methods[];
extern const luaL_Reg shl_rounds_methods[];
void sh__new_type(lua_State *L, const char *name, lua_CFunction gc, const luaL_Reg *methods);

/* lworkers.c */
char *shl_dup_str(const char *s, size_t n);
void shl_free_ctx(worker_ctx *w);
void shl_worker_exit(worker_ctx *w);
SH__THREAD_RETURN shl_worker_main(void *arg);
double shl_host_worker(worker_ctx *w);
worker_ctx *shl_unhost(double token, const sh_work *work, int32_t index);
int shl_serve(lua_State *L);
int shl_hosted_count(const sh_work *work);

#endif
