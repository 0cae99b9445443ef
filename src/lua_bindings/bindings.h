/* bindings.h — the C/Lua boundary: every emmy module registers in package.preload from one list, and every
 * C resource exposed to Lua follows one recipe (named metatable, check helper rejecting closed handles,
 * idempotent __gc that is also :close(), __tostring). */
#ifndef EM_BINDINGS_H
#define EM_BINDINGS_H

#include <stdint.h>

#include "lauxlib.h"
#include "lua.h"

/* X(module suffix) — require "emmy.<suffix>" opens luaopen_emmy_<suffix>. */
#define EM_LUA_MODULES(X) \
  X(budget)               \
  X(cuda)                 \
  X(http_c)               \
  X(ir)                   \
  X(knobs)                \
  X(nvrtc)                \
  X(prior_c)              \
  X(ref)                  \
  X(safetensors)          \
  X(sqlite)               \
  X(sys)                  \
  X(tokenizer_c)

#define X(m) int luaopen_emmy_##m(lua_State *L);
EM_LUA_MODULES(X)
#undef X

/* Registers every emmy module and cjson in package.preload. */
void em_preload_modules(lua_State *L);

/* The memory ceiling of the rule sandbox (lib_budget.c): the state's allocator, wrapped. Owned by the host. */
typedef struct em_budget {
  lua_Alloc inner;   /* LuaJIT's own allocator and its state */
  void *inner_ud;
  size_t used;       /* bytes the state holds now */
  size_t ceiling;    /* 0: none; else the most bytes it may hold */
  int refused;       /* an allocation was refused since the ceiling was set */
} em_budget;

/* Wraps L's allocator with b (caller-owned; it must outlive L) and registers b for `emmy.budget`; does nothing
 * where this LuaJIT takes no custom allocator (a non-GC64 build). Call once, right after the state is created. */
void em_budget_install(lua_State *L, em_budget *b);

/* Userdata recipe: a box holding one pointer; NULL once closed. */
typedef struct {
  void *p;
} em_box;

/* Creates the class metatable (methods in __index) if needed; leaves nothing on the stack. */
void em_lua_class(lua_State *L, const char *tname, const luaL_Reg *methods, lua_CFunction gc, lua_CFunction tostr);
/* Pushes a new userdata of class tname owning p. */
em_box *em_lua_push(lua_State *L, const char *tname, void *p);
/* Returns the live pointer at idx or raises "closed <what>" / a type error. */
void *em_lua_check(lua_State *L, int idx, const char *tname, const char *what);
/* Pushes nil, msg and returns 2: the expected-failure return. */
int em_lua_fail(lua_State *L, const char *msg);

/* An integer from the Lua number at idx: 0 and *out when it is integral and within ±2^53 (a double holds
 * every such integer exactly), else -1. Never casts an out-of-range double. */
int em_lua_toint(lua_State *L, int idx, int64_t *out);
/* Reads the binding table {symbol = integer} at idx (absent or nil: none) into given (EM_MAX_SYMS entries,
 * EM_SYM_UNBOUND where a symbol is not given). 0, or -1 with err naming the key or value that is wrong. */
struct em_graph;
int em_lua_binding(lua_State *L, int idx, const struct em_graph *g, int64_t *given, char *err);
/* 0 when the string at idx is valid UTF-8 without NUL bytes (a name JSON and C strings both hold exactly),
 * else -1 with err "<what> ... " saying which. */
int em_lua_checktext(lua_State *L, int idx, const char *what, char *err);

#endif
