/* lib_knobs.c — `emmy.knobs`: the knob table (src/knobs.h) for Lua — the rules' check of what they declare and
 * return, the EMMY_KNOBS pins, `emmy knobs` and the generated table of docs/formats.md. */
#include <stdio.h>

#include "bindings.h"
#include "knobs.h"

static void push_info(lua_State *L, int id) {
  const em_knob_info *k = &em_knob_table[id];
  lua_createtable(L, 0, 7);
  lua_pushstring(L, k->name);
  lua_setfield(L, -2, "name");
  lua_pushstring(L, k->family);
  lua_setfield(L, -2, "family");
  lua_pushnumber(L, (lua_Number)k->def);
  lua_setfield(L, -2, "default");
  lua_pushstring(L, k->values);
  lua_setfield(L, -2, "values");
  lua_pushstring(L, k->kinds);
  lua_setfield(L, -2, "kinds");
  lua_pushstring(L, k->doc);
  lua_setfield(L, -2, "doc");
  lua_pushboolean(L, em_knob_structural((em_knob_id)id));
  lua_setfield(L, -2, "structural");
}

/* knobs.list() -> {{name, family, default, values, kinds, doc, structural}, ...} in the table's order (a fresh table) */
static int l_list(lua_State *L) {
  lua_createtable(L, EM_NKNOBS, 0);
  for (int i = 0; i < EM_NKNOBS; i++) {
    push_info(L, i);
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

/* knobs.info(name) -> {name, family, default, values, kinds, doc, structural} | nil (structural: the kernel former
 * reads it, no emitter does) */
static int l_info(lua_State *L) {
  int id = em_knob_find(luaL_checkstring(L, 1));
  if (id < 0) {
    lua_pushnil(L);
    return 1;
  }
  push_info(L, id);
  return 1;
}

/* knobs.check(name, v) -> true | nil, msg ("'BMM' is not a knob (did you mean BM? …)", "BM=48 is not a legal
 * value of BM (it takes 16,32,64,128,256)"; a value that is not an integer is one too) */
static int l_check(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  char err[EM_ERR_MAX];
  if (em_knob_find(name) >= 0 && lua_type(L, 2) != LUA_TNUMBER) {
    snprintf(err, sizeof err, "%s=%s is not an integer", name, luaL_typename(L, 2));
    return em_lua_fail(L, err);
  }
  lua_Number v = lua_type(L, 2) == LUA_TNUMBER ? lua_tonumber(L, 2) : 0;
  if (!(v >= -9e18 && v <= 9e18) || v != (lua_Number)(int64_t)v) { /* (int64_t) of a larger v is undefined */
    snprintf(err, sizeof err, "%s=%.17g is not an integer", name, (double)v);
    return em_lua_fail(L, err);
  }
  if (em_knob_check(name, (int64_t)v, err)) return em_lua_fail(L, err);
  lua_pushboolean(L, 1);
  return 1;
}

int luaopen_emmy_knobs(lua_State *L) {
  static const luaL_Reg fns[] = {{"list", l_list}, {"info", l_info}, {"check", l_check}, {NULL, NULL}};
  lua_newtable(L);
  luaL_register(L, NULL, fns);
  return 1;
}
