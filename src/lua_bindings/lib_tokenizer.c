/* lib_tokenizer.c — `emmy.tokenizer_c`: the byte-level BPE core (src/tokenizer.c) as userdata "emmy.tokenizer";
 * scripts/emmy/tokenizer.lua fills it from a model's tokenizer.json and is what callers use. */
#include <stdlib.h>
#include <string.h>

#include "bindings.h"
#include "tokenizer.h"

#define TOK_T "emmy.tokenizer"

static em_tok *check_tok(lua_State *L, int idx) { return em_lua_check(L, idx, TOK_T, "tokenizer"); }

static int h_gc(lua_State *L) {
  em_box *b = luaL_checkudata(L, 1, TOK_T);
  em_tok_free(b->p);
  b->p = NULL;
  return 0;
}

static int h_tostring(lua_State *L) {
  em_box *b = luaL_checkudata(L, 1, TOK_T);
  lua_pushstring(L, b->p ? "emmy.tokenizer" : "emmy.tokenizer (closed)");
  return 1;
}

/* tokenizer_c.new() -> handle */
static int l_new(lua_State *L) {
  em_lua_push(L, TOK_T, em_tok_new());
  return 1;
}

/* h:vocab({token = id, ...}) */
static int h_vocab(lua_State *L) {
  em_tok *t = check_tok(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  lua_pushnil(L);
  while (lua_next(L, 2)) {
    size_t n;
    const char *s = lua_tolstring(L, -2, &n);
    if (s && lua_type(L, -1) == LUA_TNUMBER) em_tok_vocab(t, s, n, (int)lua_tointeger(L, -1));
    lua_pop(L, 1);
  }
  return 0;
}

/* h:merges({ {a, b}, ... }) in rank order */
static int h_merges(lua_State *L) {
  em_tok *t = check_tok(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  int n = (int)lua_objlen(L, 2);
  for (int i = 1; i <= n; i++) {
    lua_rawgeti(L, 2, i);
    lua_rawgeti(L, -1, 1);
    lua_rawgeti(L, -2, 2);
    const char *a = lua_tostring(L, -2), *b = lua_tostring(L, -1);
    if (!a || !b) return luaL_error(L, "merge %d is not a pair of strings", i);
    em_tok_merge(t, a, b, i - 1);
    lua_pop(L, 3);
  }
  return 0;
}

/* h:pattern(regex) -> true | nil, msg */
static int h_pattern(lua_State *L) {
  char err[EM_ERR_MAX];
  if (em_tok_pattern(check_tok(L, 1), luaL_checkstring(L, 2), err)) return em_lua_fail(L, err);
  lua_pushboolean(L, 1);
  return 1;
}

/* h:added(text, id) */
static int h_added(lua_State *L) {
  em_tok_added(check_tok(L, 1), luaL_checkstring(L, 2), (int)luaL_checkinteger(L, 3));
  return 0;
}

/* h:nfc(bool) */
static int h_nfc(lua_State *L) {
  em_tok_set_nfc(check_tok(L, 1), lua_toboolean(L, 2));
  return 0;
}

/* h:ignore_merges(bool) */
static int h_ignore_merges(lua_State *L) {
  em_tok_set_ignore_merges(check_tok(L, 1), lua_toboolean(L, 2));
  return 0;
}

/* h:encode(text) -> {ids} | nil, msg */
static int h_encode(lua_State *L) {
  size_t n, k;
  const char *s = luaL_checklstring(L, 2, &n);
  int *ids;
  char err[EM_ERR_MAX];
  if (em_tok_encode(check_tok(L, 1), s, n, &ids, &k, err)) return em_lua_fail(L, err);
  lua_createtable(L, (int)k, 0);
  for (size_t i = 0; i < k; i++) {
    lua_pushinteger(L, ids[i]);
    lua_rawseti(L, -2, (int)i + 1);
  }
  free(ids);
  return 1;
}

int luaopen_emmy_tokenizer_c(lua_State *L) {
  static const luaL_Reg methods[] = {{"vocab", h_vocab}, {"merges", h_merges}, {"pattern", h_pattern}, {"added", h_added},
                                     {"nfc", h_nfc},     {"ignore_merges", h_ignore_merges}, {"encode", h_encode}, {NULL, NULL}};
  em_lua_class(L, TOK_T, methods, h_gc, h_tostring);
  static const luaL_Reg fns[] = {{"new", l_new}, {NULL, NULL}};
  lua_newtable(L);
  luaL_register(L, NULL, fns);
  return 1;
}
