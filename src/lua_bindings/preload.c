/* preload.c — the one place that lists emmy's Lua modules, and the shared userdata recipe. */
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
