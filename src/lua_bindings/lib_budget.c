/* lib_budget.c — `emmy.budget`: a ceiling on the bytes the Lua state holds, for the rule sandbox
 * (scripts/emmy/sandbox.lua). main.c wraps the state's allocator once (em_budget_install); while a ceiling is
 * set, an allocation that would pass it fails, which LuaJIT raises as "not enough memory" in the code that asked.
 * The ceiling lifts itself at that refusal, so the error unwinds and the host's own allocations succeed. */
#include <stdlib.h>
#include <time.h>

#include "bindings.h"

static const char BUDGET_KEY[] = "emmy.budget";

static void *budget_alloc(void *ud, void *p, size_t osize, size_t nsize) {
  em_budget *b = ud;
  size_t old = p ? osize : 0;
  if (nsize > old && b->ceiling && (b->used >= b->ceiling || nsize - old > b->ceiling - b->used)) {
    b->ceiling = 0;
    b->refused = 1;
    return NULL;
  }
  void *q = b->inner(b->inner_ud, p, osize, nsize);
  if (nsize == 0 || q) b->used = (b->used > old ? b->used - old : 0) + nsize;
  return q;
}

/* A plain allocator for the probe below. */
static void *probe_alloc(void *ud, void *p, size_t osize, size_t nsize) {
  (void)ud;
  (void)osize;
  if (nsize == 0) {
    free(p);
    return NULL;
  }
  return realloc(p, nsize);
}

void em_budget_install(lua_State *L, em_budget *b) {
  /* LuaJIT takes a custom allocator only in GC64 builds (the x86-64 default since 2.1's 2020 sources; Debian's
   * 2.1.0~beta3+git20220320 is one): elsewhere lua_newstate refuses one, and the wrapper is left out, so the
   * sandbox keeps only its hook's check (budget.ceiling returns false) */
  lua_State *probe = lua_newstate(probe_alloc, NULL);
  if (!probe) return;
  lua_close(probe);
  b->inner = lua_getallocf(L, &b->inner_ud);
  b->used = (size_t)lua_gc(L, LUA_GCCOUNT, 0) * 1024 + (size_t)lua_gc(L, LUA_GCCOUNTB, 0);
  b->ceiling = 0;
  b->refused = 0;
  lua_setallocf(L, budget_alloc, b);
  lua_pushlightuserdata(L, b);
  lua_setfield(L, LUA_REGISTRYINDEX, BUDGET_KEY);
}

static em_budget *get_budget(lua_State *L) {
  lua_getfield(L, LUA_REGISTRYINDEX, BUDGET_KEY);
  em_budget *b = lua_touserdata(L, -1);
  lua_pop(L, 1);
  return b;
}

/* budget.ceiling(bytes) -> true: from now the state may hold `bytes` more than it does, and budget.refused() is
 * false again; nil or 0 lifts the ceiling. false when the host did not install the budget (a state main.c did
 * not make). */
static int l_ceiling(lua_State *L) {
  em_budget *b = get_budget(L);
  lua_Number n = luaL_optnumber(L, 1, 0);
  if (!b) {
    lua_pushboolean(L, 0);
    return 1;
  }
  if (n > 0) {
    b->refused = 0;
    b->ceiling = b->used + (n < 1e18 ? (size_t)n : (size_t)1e18);
  } else {
    b->ceiling = 0;
  }
  lua_pushboolean(L, 1);
  return 1;
}

/* budget.used() -> bytes the state holds | nil (not installed) */
static int l_used(lua_State *L) {
  em_budget *b = get_budget(L);
  if (!b) return 0;
  lua_pushnumber(L, (lua_Number)b->used);
  return 1;
}

/* budget.refused() -> whether an allocation was refused since the ceiling was last set */
static int l_refused(lua_State *L) {
  em_budget *b = get_budget(L);
  lua_pushboolean(L, b && b->refused);
  return 1;
}

/* budget.cpu() -> CPU seconds this thread has run (the sandbox's time budget: other threads, such as NVRTC's,
 * do not count) */
static int l_cpu(lua_State *L) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  lua_pushnumber(L, (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9);
  return 1;
}

int luaopen_emmy_budget(lua_State *L) {
  static const luaL_Reg fns[] = {
      {"ceiling", l_ceiling}, {"used", l_used}, {"refused", l_refused}, {"cpu", l_cpu}, {NULL, NULL}};
  lua_newtable(L);
  luaL_register(L, NULL, fns);
  return 1;
}
