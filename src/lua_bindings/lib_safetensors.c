/* lib_safetensors.c — `emmy.safetensors`: open a .safetensors file (userdata "emmy.safetensors"), list its
 * tensors and metadata, load entries as emmy.tensor values, and write a table of tensors to a new file. */
#include <stdio.h>
#include <string.h>

#include "bindings.h"
#include "safetensors.h"

#define ST_T "emmy.safetensors"
#define TENSOR_T "emmy.tensor"

static em_st_file *check_st(lua_State *L, int idx) { return em_lua_check(L, idx, ST_T, "safetensors file"); }

static int h_gc(lua_State *L) {
  em_box *b = luaL_checkudata(L, 1, ST_T);
  em_st_close(b->p);
  b->p = NULL;
  return 0;
}

static int h_tostring(lua_State *L) {
  em_box *b = luaL_checkudata(L, 1, ST_T);
  if (!b->p) lua_pushstring(L, "emmy.safetensors (closed)");
  else lua_pushfstring(L, "emmy.safetensors %s (%d tensors)", em_st_path(b->p), em_st_count(b->p));
  return 1;
}

/* st.open(path) -> handle | nil, msg */
static int l_open(lua_State *L) {
  char err[EM_ERR_MAX];
  em_st_file *f = em_st_open(luaL_checkstring(L, 1), err);
  if (!f) return em_lua_fail(L, err);
  em_lua_push(L, ST_T, f);
  return 1;
}

/* h:tensors() -> { {name=, dtype=, shape={...}, bytes=}, ... } in file order (ascending data offset) */
static int h_tensors(lua_State *L) {
  em_st_file *f = check_st(L, 1);
  int n = em_st_count(f);
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    lua_createtable(L, 0, 4);
    lua_pushstring(L, em_st_name(f, i));
    lua_setfield(L, -2, "name");
    lua_pushstring(L, em_st_dtype(f, i));
    lua_setfield(L, -2, "dtype");
    int rank = em_st_rank(f, i);
    const int64_t *d = em_st_shape(f, i);
    lua_createtable(L, rank, 0);
    for (int k = 0; k < rank; k++) {
      lua_pushnumber(L, (lua_Number)d[k]);
      lua_rawseti(L, -2, k + 1);
    }
    lua_setfield(L, -2, "shape");
    size_t bytes;
    em_st_data(f, i, &bytes);
    lua_pushnumber(L, (lua_Number)bytes);
    lua_setfield(L, -2, "bytes");
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

/* h:has(name) -> boolean */
static int h_has(lua_State *L) {
  em_st_file *f = check_st(L, 1);
  lua_pushboolean(L, em_st_find(f, luaL_checkstring(L, 2)) >= 0);
  return 1;
}

/* The emmy dtype a safetensors dtype loads as when h:load is given none. */
static int natural_dtype(const char *st) {
  static const char *const map[][2] = {{"BF16", "bf16"}, {"F16", "f16"}, {"F32", "f32"}, {"F64", "f64"},
                                       {"I32", "i32"},   {"I64", "i64"}, {"BOOL", "bool"}, {"U8", "i32"},
                                       {"I8", "i32"},    {"I16", "i32"}, {"U16", "i32"},  {"U32", "i64"},
                                       {"U64", "i64"}};
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (!strcmp(st, map[i][0])) return em_dtype_parse(map[i][1]);
  return EM_F32; /* F8: em_st_load reports it */
}

/* h:load(name [, dtype]) -> emmy.tensor (a copy; it outlives the handle) | nil, msg. dtype defaults to the
 * file's (BF16→bf16, F32→f32, …; narrow integers → i32, U32/U64 → i64). */
static int h_load(lua_State *L) {
  em_st_file *f = check_st(L, 1);
  const char *name = luaL_checkstring(L, 2);
  int dt = -1;
  if (!lua_isnoneornil(L, 3)) {
    dt = em_dtype_parse(luaL_checkstring(L, 3));
    if (dt < 0) luaL_argerror(L, 3, "unknown dtype");
  }
  char err[EM_ERR_MAX];
  int i = em_st_find(f, name);
  if (i < 0) {
    snprintf(err, sizeof err, "%s: no tensor '%s' (%d tensors in the file)", em_st_path(f), name, em_st_count(f));
    return em_lua_fail(L, err);
  }
  if (dt < 0) dt = natural_dtype(em_st_dtype(f, i));
  em_tensor *t = em_st_load(f, i, (em_dtype)dt, err);
  if (!t) return em_lua_fail(L, err);
  em_lua_push(L, TENSOR_T, t);
  return 1;
}

/* h:metadata() -> { key = value } (empty when the file has none) */
static int h_metadata(lua_State *L) {
  em_st_file *f = check_st(L, 1);
  int n = em_st_meta_count(f);
  lua_createtable(L, 0, n);
  for (int i = 0; i < n; i++) {
    lua_pushstring(L, em_st_meta_value(f, i));
    lua_setfield(L, -2, em_st_meta_key(f, i));
  }
  return 1;
}

/* st.write(path, {name = tensor, ...} [, {key = "value", ...}]) -> true | nil, msg
 * Wrong argument types raise before anything is written; the scratch arrays are Lua userdata, so a raise
 * leaks nothing. */
static int l_write(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  int has_meta = !lua_isnoneornil(L, 3);
  if (has_meta) luaL_checktype(L, 3, LUA_TTABLE);
  int n = 0, nmeta = 0;
  lua_pushnil(L);
  while (lua_next(L, 2)) {
    if (lua_type(L, -2) != LUA_TSTRING) luaL_argerror(L, 2, "tensor names must be strings");
    n++;
    lua_pop(L, 1);
  }
  if (has_meta) {
    lua_pushnil(L);
    while (lua_next(L, 3)) {
      if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
        luaL_argerror(L, 3, "metadata must map strings to strings");
      nmeta++;
      lua_pop(L, 1);
    }
  }
  const char **names = lua_newuserdata(L, sizeof(char *) * (size_t)(n ? n : 1));
  const em_tensor **ts = lua_newuserdata(L, sizeof(em_tensor *) * (size_t)(n ? n : 1));
  const char **kv = lua_newuserdata(L, sizeof(char *) * (size_t)(2 * nmeta + 1));
  int i = 0;
  lua_pushnil(L);
  while (lua_next(L, 2)) { /* strings stay alive: the tables are on the stack */
    names[i] = lua_tostring(L, -2);
    ts[i] = em_lua_check(L, -1, TENSOR_T, "tensor");
    i++;
    lua_pop(L, 1);
  }
  i = 0;
  if (has_meta) {
    lua_pushnil(L);
    while (lua_next(L, 3)) {
      kv[i++] = lua_tostring(L, -2);
      kv[i++] = lua_tostring(L, -1);
      lua_pop(L, 1);
    }
  }
  kv[i] = NULL;
  char err[EM_ERR_MAX];
  if (em_st_write(path, n, names, ts, has_meta ? kv : NULL, err)) return em_lua_fail(L, err);
  lua_pushboolean(L, 1);
  return 1;
}

int luaopen_emmy_safetensors(lua_State *L) {
  /* h:load hands out emmy.tensor values, whose class emmy.ref defines. */
  luaL_getmetatable(L, TENSOR_T);
  int have_tensor = !lua_isnil(L, -1);
  lua_pop(L, 1);
  if (!have_tensor) {
    lua_pushcfunction(L, luaopen_emmy_ref);
    lua_call(L, 0, 0);
  }
  static const luaL_Reg methods[] = {{"tensors", h_tensors}, {"has", h_has},           {"load", h_load},
                                     {"metadata", h_metadata}, {NULL, NULL}};
  em_lua_class(L, ST_T, methods, h_gc, h_tostring);
  static const luaL_Reg fns[] = {{"open", l_open}, {"write", l_write}, {NULL, NULL}};
  lua_newtable(L);
  luaL_register(L, NULL, fns);
  return 1;
}
