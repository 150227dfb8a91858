/*
 * stagehand._core's threads: Lua values as messages between states (deep
 * copies, ports and round barriers as references, LÖVE objects beside the
 * message). csrc/sh_msg.c holds the bytes; this file reads and writes them.
 */
#include "lthreads.h"

/* Deeper tables than this are refused (a copy recurses once a level). */
#define MAX_DEPTH 200

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
 * then raises (shl_encode_values). */
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

/* Whether the userdata at idx (an absolute index) is one of the objects
 * LÖVE keeps in this state's registry (_loveobjects: its Lua face of each
 * object pushed here). Walks them: only a state that has not loaded an
 * object's module asks, and such a state (a worker's) holds few. */
static int in_love_registry(lua_State *L, int idx) {
  int found = 0;
  if (!lua_checkstack(L, 3)) return 0;
  lua_getfield(L, LUA_REGISTRYINDEX, "_loveobjects");
  if (lua_type(L, -1) == LUA_TTABLE) {
    lua_pushnil(L);
    while (!found && lua_next(L, -2)) {
      found = lua_rawequal(L, -1, idx);
      lua_pop(L, 1);
    }
    if (found) lua_pop(L, 1); /* (the key the walk stopped at) */
  }
  lua_pop(L, 1);
  return found;
}

/* Whether the userdata at idx (absolute) is a LÖVE object: its metatable
 * holds LÖVE's typeOf, or, in a state that has not loaded the object's
 * module (a LÖVE thread handed an ImageData without require "love.image"),
 * where LÖVE's methods would be there is only its __gc, and LÖVE knows
 * the object. */
static int is_love_object(lua_State *L, int idx) {
  int is;
  if (!lua_getmetatable(L, idx)) return 0;
  lua_pushstring(L, "typeOf");
  lua_rawget(L, -2);
  is = lua_type(L, -1) == LUA_TFUNCTION;
  lua_pop(L, 2);
  return is || in_love_registry(L, idx);
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
    /* (a key is copied like any value; what a table key holds is named
     * under it, "t[<table key>].f", as the pure-Lua core names it) */
    encode(e, key, &here, depth + 1);
    if (!e->failed) encode(e, val, &here, depth + 1);
    lua_pop(L, 1);
    if (e->failed) {
      lua_pop(L, 1); /* (the key: the walk ends here) */
      return;
    }
  }
  put_tag(e, 'E');
}

/* A LÖVE object where none crosses: a port, or a pool on stagehand's own
 * threads (their states have no LÖVE). Named by its type where its module
 * is loaded here (the object's own `type` method). */
static void refuse_love_object(enc *e, int idx, const seg *s) {
  lua_State *L = e->L;
  const char *name = "object";
  push_path(L, e->root, s);
  lua_getmetatable(L, idx);
  lua_pushstring(L, "type");
  lua_rawget(L, -2);
  lua_remove(L, -2);
  if (lua_type(L, -1) == LUA_TFUNCTION) {
    lua_pushvalue(L, idx);
    if (lua_pcall(L, 1, 1, 0) == 0 && lua_type(L, -1) == LUA_TSTRING) name = lua_tostring(L, -1);
  }
  lua_pushfstring(L,
                  "%s is a LÖVE %s; LÖVE objects cross only to and from workers on LÖVE threads (requests, "
                  "results and a service's arguments), not through ports nor to stagehand's own threads",
                  lua_tostring(L, -2), name);
  lua_remove(L, -2);
  lua_remove(L, -2);
  fail_enc(e);
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
      else if (is_love_object(L, idx)) {
        if (e->objs) encode_object(e, idx);
        else refuse_love_object(e, idx, s);
      } else refuse(e, idx, s, "");
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
 * lost, which is why the main thread's callers, a pool's stage and a
 * port's post, pass one they keep). */
sh_msg *shl_try_encode_objects(lua_State *L, int first, int last, const char *root, int counted, sh_msg *into,
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

/* shl_try_encode_objects where no LÖVE object crosses. */
sh_msg *shl_try_encode_values(lua_State *L, int first, int last, const char *root, int counted, sh_msg *into) {
  return shl_try_encode_objects(L, first, last, root, counted, into, 0);
}

/* shl_try_encode_values, raising the reason. */
sh_msg *shl_encode_values(lua_State *L, int first, int last, const char *root, int counted, sh_msg *into) {
  sh_msg *m = shl_try_encode_values(L, first, last, root, counted, into);
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
  int fetched; /* whether fetch was called */
  double id; /* the request the message is of, for fetch */
} dec;

static void get(dec *d, void *out, size_t n) {
  if ((size_t)(d->end - d->p) < n) luaL_error(d->L, "stagehand: a message was cut short");
  memcpy(out, d->p, n);
  d->p += n;
}


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
      if (tag == 'P') shl_push_port(L, (sh_port *)obj);
      else shl_push_rounds(L, (sh_rounds *)obj);
      break;
    }
    case 'O':
      get(d, &u, sizeof u);
      if (!d->fetch) luaL_error(L, "stagehand: a message holds a LÖVE object where none can cross");
      if (lua_isnil(L, d->objs)) {
        lua_pushvalue(L, d->fetch);
        lua_pushnumber(L, (lua_Number)d->id);
        d->fetched = 1;
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
 * index, or 0) gives the LÖVE objects of request `id`'s message;
 * `*fetched` (when not NULL) is set once it is called. */
int shl_decode_objects(lua_State *L, const sh_msg *m, int counted, int fetch, double id, int *fetched) {
  dec d;
  size_t len;
  uint32_t n = 1, i, ntables;
  d.L = L, d.m = m, d.tables = 0, d.fetch = fetch, d.objs = 0, d.id = id, d.fetched = 0;
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
  if (fetched && d.fetched) *fetched = 1;
  return (int)n;
}

int shl_decode_values(lua_State *L, const sh_msg *m, int counted) {
  return shl_decode_objects(L, m, counted, 0, 0, NULL);
}

