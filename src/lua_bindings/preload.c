/* preload.c — the one place that lists emmy's Lua modules, and the shared userdata recipe. */
#include <stdio.h>
#include <string.h>

#include "base.h"
#include "bindings.h"

int luaopen_cjson(lua_State *L);

void em_preload_modules(lua_State *L) {
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "preload");
#define X(m)                                \
  lua_pushcfunction(L, luaopen_emmy_##m);   \
  lua_setfield(L, -2, "emmy." #m);
  EM_LUA_MODULES(X)
#undef X
  lua_pushcfunction(L, luaopen_cjson);
  lua_setfield(L, -2, "cjson");
  lua_pop(L, 2);
}

void em_lua_class(lua_State *L, const char *tname, const luaL_Reg *methods, lua_CFunction gc, lua_CFunction tostr) {
  if (luaL_newmetatable(L, tname)) {
    lua_newtable(L);
    luaL_register(L, NULL, methods);
    lua_pushcfunction(L, gc);
    lua_setfield(L, -2, "close");
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, tostr);
    lua_setfield(L, -2, "__tostring");
  }
  lua_pop(L, 1);
}

em_box *em_lua_push(lua_State *L, const char *tname, void *p) {
  em_box *b = lua_newuserdata(L, sizeof *b);
  b->p = p;
  luaL_getmetatable(L, tname);
  lua_setmetatable(L, -2);
  return b;
}

void *em_lua_check(lua_State *L, int idx, const char *tname, const char *what) {
  em_box *b = luaL_checkudata(L, idx, tname);
  if (!b->p) luaL_error(L, "use of a closed %s", what);
  return b->p;
}

int em_lua_fail(lua_State *L, const char *msg) {
  lua_pushnil(L);
  lua_pushstring(L, msg);
  return 2;
}

int em_lua_toint(lua_State *L, int idx, int64_t *out) {
  if (lua_type(L, idx) != LUA_TNUMBER) return -1;
  double v = lua_tonumber(L, idx);
  if (!(v >= -9007199254740992.0 && v <= 9007199254740992.0) || v != (double)(int64_t)v) return -1;
  *out = (int64_t)v;
  return 0;
}

int em_lua_checktext(lua_State *L, int idx, const char *what, char *err) {
  size_t n;
  const char *s = lua_tolstring(L, idx, &n);
  char q[160];
  if (!s) {
    snprintf(err, EM_ERR_MAX, "%s must be a string, got %s", what, luaL_typename(L, idx));
    return -1;
  }
  const char *nul = memchr(s, 0, n);
  if (nul) {
    snprintf(err, EM_ERR_MAX, "%s '%s' has a NUL byte at byte %d: a name or text in a graph cannot hold one", what,
             em_quote_bytes(s, n, q, sizeof q), (int)(nul - s));
    return -1;
  }
  size_t ok = em_utf8_valid_prefix(s, n);
  if (ok < n) {
    snprintf(err, EM_ERR_MAX, "%s '%s' is not valid UTF-8 (at byte %d): write it as UTF-8 text", what,
             em_quote_bytes(s, n, q, sizeof q), (int)ok);
    return -1;
  }
  return 0;
}
