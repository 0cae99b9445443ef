/* lib_prior.c — require "emmy.prior_c": the prior's math (src/prior.c) for emmy.prior, emmy.online, emmy.search
 * and the cost formulas of rules/prior/. The Lua module emmy.prior keeps the editable parts (features, weights).
 *
 *   C.roofline(features, weights) -> µs      -- features: rules/prior/features.lua's table; weights: offline.lua's W
 *   C.spearman(a, b) -> rho                  -- two lists of numbers of one length
 *   C.gbt_fit(X, y, params) -> gbt | nil, msg
 *       X: a list of n rows, each a list of p numbers (nil, NaN and ±inf are missing); y: n numbers;
 *       params: {trees=, depth=, rate=, min_leaf=, shrink=, min_gain = 0}
 *   C.gbt_load(t) -> gbt | nil, msg          -- t: what gbt:totable() returned (e.g. read back from JSON)
 *   gbt:predict(x) -> number                 -- x: a list of p numbers, missing as in X
 *   gbt:predict_many(X) -> {number, ...}
 *   gbt:totable() -> {ncols, depth, base, trees = {{feat = {...}, miss = {...}, thr = {...}, value = {...}}, ...}}
 *       per tree the nodes breadth-first (node i's children are 2i and 2i+1), feat a 1-based column or 0 (a leaf)
 *   gbt:close()                              -- idempotent (also __gc)
 * A wrong argument type, a missing feature or weight and a value the formula cannot take raise (they are bugs in
 * the caller or in a rules file); a fit on bad data or a malformed saved model returns nil, msg. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "bindings.h"
#include "prior.h"

#define GBT_T "emmy.gbt"

/* ---- helpers ------------------------------------------------------------------------------------------ */

/* t[key] at table idx as a number; raises naming `what` and key when it is not one. */
static double need_number(lua_State *L, int idx, const char *key, const char *what) {
  lua_getfield(L, idx, key);
  if (lua_type(L, -1) != LUA_TNUMBER) luaL_error(L, "%s '%s' is %s, not a number", what, key, luaL_typename(L, -1));
  double v = lua_tonumber(L, -1);
  lua_pop(L, 1);
  return v;
}

/* t[key] at idx as a number, def when absent; raises when present and not a number. */
static double opt_number(lua_State *L, int idx, const char *key, const char *what, double def) {
  lua_getfield(L, idx, key);
  int t = lua_type(L, -1);
  lua_pop(L, 1);
  return t == LUA_TNIL ? def : need_number(L, idx, key, what);
}

/* t[i] as a number (nil -> NaN: missing); raises on anything else. */
static double cell(lua_State *L, int idx, int i, const char *what) {
  lua_rawgeti(L, idx, i);
  double v = NAN;
  if (lua_type(L, -1) == LUA_TNUMBER) v = lua_tonumber(L, -1);
  else if (!lua_isnil(L, -1)) luaL_error(L, "%s: entry %d is %s, not a number", what, i, luaL_typename(L, -1));
  lua_pop(L, 1);
  return v;
}

/* Scratch memory owned by Lua (a userdata left on the stack), so a raise in the middle of reading frees it. */
static double *scratch(lua_State *L, size_t n) { return lua_newuserdata(L, (n ? n : 1) * sizeof(double)); }

/* Reads the matrix at idx into Lua-owned scratch (pushed); *n rows, *p columns (p: the first row's length). */
static double *read_matrix(lua_State *L, int idx, int *n, int *p) {
  luaL_checktype(L, idx, LUA_TTABLE);
  *n = (int)lua_objlen(L, idx);
  *p = 0;
  if (*n > 0) {
    lua_rawgeti(L, idx, 1);
    if (!lua_istable(L, -1)) luaL_error(L, "gbt: row 1 is %s, not a list of numbers", luaL_typename(L, -1));
    *p = (int)lua_objlen(L, -1);
    lua_pop(L, 1);
  }
  double *X = scratch(L, (size_t)*n * (size_t)*p);
  for (int r = 0; r < *n; r++) {
    lua_rawgeti(L, idx, r + 1);
    if (!lua_istable(L, -1)) luaL_error(L, "gbt: row %d is %s, not a list of numbers", r + 1, luaL_typename(L, -1));
    int row = lua_gettop(L);
    if ((int)lua_objlen(L, row) > *p) luaL_error(L, "gbt: row %d has %d columns, row 1 has %d", r + 1, (int)lua_objlen(L, row), *p);
    char what[40];
    snprintf(what, sizeof what, "gbt: row %d", r + 1);
    for (int j = 0; j < *p; j++) X[(size_t)r * (size_t)*p + (size_t)j] = cell(L, row, j + 1, what);
    lua_pop(L, 1);
  }
  return X;
}

/* ---- roofline, spearman ------------------------------------------------------------------------------- */

/* C.roofline(features, weights) -> µs */
static int l_roofline(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_checktype(L, 2, LUA_TTABLE);
  const char *fw = "roofline: features", *ww = "roofline: weights";
  em_prior_features f = {
      .tier = need_number(L, 1, "tier", fw),
      .transport = need_number(L, 1, "transport", fw),
      .stages = need_number(L, 1, "stages", fw),
      .warps = need_number(L, 1, "warps", fw),
      .reuse = need_number(L, 1, "reuse", fw),
      .bk = need_number(L, 1, "bk", fw),
      .busiest = need_number(L, 1, "busiest", fw),
      .per_sm = need_number(L, 1, "per_sm", fw),
      .tile_flops = need_number(L, 1, "tile_flops", fw),
      .l2_bytes = need_number(L, 1, "l2_bytes", fw),
      .bytes = need_number(L, 1, "bytes", fw),
      .split = need_number(L, 1, "split", fw),
      .split_bytes = need_number(L, 1, "split_bytes", fw),
  };
  em_prior_weights w = {
      .clock_ghz = need_number(L, 2, "clock_ghz", ww),
      .stage_hide = need_number(L, 2, "stage_hide", ww),
      .warps_full = need_number(L, 2, "warps_full", ww),
      .bk_sync = need_number(L, 2, "bk_sync", ww),
      .reuse_half = need_number(L, 2, "reuse_half", ww),
      .l2_gbps = need_number(L, 2, "l2_gbps", ww),
      .dram_gbps = need_number(L, 2, "dram_gbps", ww),
      .fixed_us = need_number(L, 2, "fixed_us", ww),
      .split_us = need_number(L, 2, "split_us", ww),
  };
  /* rate and transport are indexed by tier and transport from 0: only the entry used must be present */
  static const char *const lists[2] = {"rate", "transport"};
  double *dst[2] = {w.rate, w.transport}, at[2] = {f.tier, f.transport};
  for (int i = 0; i < 2; i++) {
    lua_getfield(L, 2, lists[i]);
    if (!lua_istable(L, -1)) luaL_error(L, "roofline: weights '%s' is %s, not a table", lists[i], luaL_typename(L, -1));
    for (int k = 0; k < 3; k++) {
      lua_rawgeti(L, -1, k);
      dst[i][k] = lua_type(L, -1) == LUA_TNUMBER ? lua_tonumber(L, -1) : NAN;
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
    if (at[i] >= 0 && at[i] <= 2 && at[i] == floor(at[i]) && isnan(dst[i][(int)at[i]]))
      luaL_error(L, "roofline: weights %s[%d] is not a number", lists[i], (int)at[i]);
  }
  char err[EM_ERR_MAX];
  double us;
  if (em_prior_roofline(&f, &w, &us, err)) luaL_error(L, "%s", err);
  lua_pushnumber(L, us);
  return 1;
}

/* C.spearman(a, b) -> rho */
static int l_spearman(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_checktype(L, 2, LUA_TTABLE);
  int n = (int)lua_objlen(L, 1);
  if ((int)lua_objlen(L, 2) != n) luaL_error(L, "spearman: lists of %d and %d values", n, (int)lua_objlen(L, 2));
  double *a = scratch(L, (size_t)n), *b = scratch(L, (size_t)n);
  for (int i = 0; i < n; i++) {
    a[i] = cell(L, 1, i + 1, "spearman: first list");
    b[i] = cell(L, 2, i + 1, "spearman: second list");
    if (isnan(a[i]) || isnan(b[i])) luaL_error(L, "spearman: value %d is missing or NaN", i + 1);
  }
  char err[EM_ERR_MAX];
  double rho;
  if (em_prior_spearman(a, b, n, &rho, err)) luaL_error(L, "%s", err);
  lua_pushnumber(L, rho);
  return 1;
}

/* ---- gbt ---------------------------------------------------------------------------------------------- */

static em_gbt *check_gbt(lua_State *L) { return em_lua_check(L, 1, GBT_T, "gbt"); }

static int g_gc(lua_State *L) {
  em_box *b = luaL_checkudata(L, 1, GBT_T);
  em_prior_gbt_free(b->p);
  b->p = NULL;
  return 0;
}

static int g_tostring(lua_State *L) {
  em_box *b = luaL_checkudata(L, 1, GBT_T);
  em_gbt *m = b->p;
  if (!m) lua_pushstring(L, "emmy.gbt (closed)");
  else lua_pushfstring(L, "emmy.gbt (%d trees of depth %d over %d columns)", m->ntrees, m->depth, m->ncols);
  return 1;
}

/* C.gbt_fit(X, y, params) -> gbt | nil, msg */
static int l_gbt_fit(lua_State *L) {
  int n, p;
  double *X = read_matrix(L, 1, &n, &p);
  luaL_checktype(L, 2, LUA_TTABLE);
  luaL_checktype(L, 3, LUA_TTABLE);
  if ((int)lua_objlen(L, 2) != n) luaL_error(L, "gbt: %d rows and %d targets", n, (int)lua_objlen(L, 2));
  double *y = scratch(L, (size_t)n);
  for (int r = 0; r < n; r++) y[r] = cell(L, 2, r + 1, "gbt: targets");
  const char *pw = "gbt: params";
  em_gbt_params prm = {
      .ntrees = (int)need_number(L, 3, "trees", pw),
      .depth = (int)need_number(L, 3, "depth", pw),
      .rate = need_number(L, 3, "rate", pw),
      .min_leaf = (int)need_number(L, 3, "min_leaf", pw),
      .shrink = need_number(L, 3, "shrink", pw),
      .min_gain = opt_number(L, 3, "min_gain", pw, 0),
  };
  char err[EM_ERR_MAX];
  em_gbt *m = NULL;
  if (p < 1 && n > 0) return em_lua_fail(L, "gbt: the rows have no columns");
  if (em_prior_gbt_fit(X, y, n, p, &prm, &m, err)) return em_lua_fail(L, err);
  em_lua_push(L, GBT_T, m);
  return 1;
}

/* gbt:predict(x) -> number */
static int g_predict(lua_State *L) {
  em_gbt *m = check_gbt(L);
  luaL_checktype(L, 2, LUA_TTABLE);
  double *x = scratch(L, (size_t)m->ncols);
  for (int j = 0; j < m->ncols; j++) x[j] = cell(L, 2, j + 1, "gbt:predict");
  lua_pushnumber(L, em_prior_gbt_predict(m, x));
  return 1;
}

/* gbt:predict_many(X) -> {number, ...} */
static int g_predict_many(lua_State *L) {
  em_gbt *m = check_gbt(L);
  luaL_checktype(L, 2, LUA_TTABLE);
  int n = (int)lua_objlen(L, 2);
  double *x = scratch(L, (size_t)m->ncols);
  lua_createtable(L, n, 0);
  int out = lua_gettop(L);
  for (int r = 0; r < n; r++) {
    lua_rawgeti(L, 2, r + 1);
    if (!lua_istable(L, -1)) luaL_error(L, "gbt:predict_many: row %d is %s, not a list of numbers", r + 1, luaL_typename(L, -1));
    int row = lua_gettop(L);
    char what[48];
    snprintf(what, sizeof what, "gbt:predict_many: row %d", r + 1);
    for (int j = 0; j < m->ncols; j++) x[j] = cell(L, row, j + 1, what);
    lua_pop(L, 1);
    lua_pushnumber(L, em_prior_gbt_predict(m, x));
    lua_rawseti(L, out, r + 1);
  }
  return 1;
}

/* gbt:totable() -> plain data for JSON */
static int g_totable(lua_State *L) {
  em_gbt *m = check_gbt(L);
  int ts = em_prior_gbt_tree_size(m->depth);
  lua_createtable(L, 0, 4);
  lua_pushinteger(L, m->ncols);
  lua_setfield(L, -2, "ncols");
  lua_pushinteger(L, m->depth);
  lua_setfield(L, -2, "depth");
  lua_pushnumber(L, m->base);
  lua_setfield(L, -2, "base");
  lua_createtable(L, m->ntrees, 0);
  static const char *const keys[4] = {"feat", "miss", "thr", "value"};
  for (int t = 0; t < m->ntrees; t++) {
    const em_gbt_node *nodes = m->nodes + (size_t)t * (size_t)ts;
    lua_createtable(L, 0, 4);
    for (int k = 0; k < 4; k++) {
      lua_createtable(L, ts, 0);
      for (int i = 0; i < ts; i++) {
        double v = k == 0 ? nodes[i].feat + 1 : k == 1 ? nodes[i].miss_left : k == 2 ? nodes[i].thr : nodes[i].value;
        lua_pushnumber(L, v);
        lua_rawseti(L, -2, i + 1);
      }
      lua_setfield(L, -2, keys[k]);
    }
    lua_rawseti(L, -2, t + 1);
  }
  lua_setfield(L, -2, "trees");
  return 1;
}

/* Reads t[key] as a number into *v; returns 0 when it is not one. */
static int get_number(lua_State *L, int idx, const char *key, double *v) {
  lua_getfield(L, idx, key);
  int ok = lua_type(L, -1) == LUA_TNUMBER;
  *v = ok ? lua_tonumber(L, -1) : 0;
  lua_pop(L, 1);
  return ok;
}

/* Fills tree t of m from the table at the top of the stack; returns 0 with msg when it is malformed. */
static int load_tree(lua_State *L, em_gbt *m, int t, char *msg) {
  static const char *const keys[4] = {"feat", "miss", "thr", "value"};
  int ts = em_prior_gbt_tree_size(m->depth), top = lua_gettop(L);
  em_gbt_node *nodes = m->nodes + (size_t)t * (size_t)ts;
  if (!lua_istable(L, top)) return snprintf(msg, EM_ERR_MAX, "gbt: tree %d is not a table", t + 1), 0;
  for (int k = 0; k < 4; k++) {
    lua_getfield(L, top, keys[k]);
    if (!lua_istable(L, -1) || (int)lua_objlen(L, -1) != ts) {
      lua_settop(L, top);
      return snprintf(msg, EM_ERR_MAX, "gbt: tree %d's '%s' is not a list of %d numbers", t + 1, keys[k], ts), 0;
    }
    for (int i = 0; i < ts; i++) {
      lua_rawgeti(L, -1, i + 1);
      int num = lua_type(L, -1) == LUA_TNUMBER;
      double v = lua_tonumber(L, -1);
      lua_pop(L, 1);
      if (!num) {
        lua_settop(L, top);
        return snprintf(msg, EM_ERR_MAX, "gbt: tree %d's '%s' entry %d is not a number", t + 1, keys[k], i + 1), 0;
      }
      if (k == 0) nodes[i].feat = v >= 0 && v <= m->ncols && v == floor(v) ? (int)v - 1 : -2; /* -2: checked below */
      else if (k == 1) nodes[i].miss_left = v != 0;
      else if (k == 2) nodes[i].thr = v;
      else nodes[i].value = v;
    }
    lua_pop(L, 1);
  }
  return 1;
}

/* C.gbt_load(t) -> gbt | nil, msg */
static int l_gbt_load(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  double ncols, depth, base;
  if (!get_number(L, 1, "ncols", &ncols) || !get_number(L, 1, "depth", &depth) || !get_number(L, 1, "base", &base))
    return em_lua_fail(L, "gbt: a saved model needs the numbers ncols, depth and base");
  lua_getfield(L, 1, "trees");
  if (!lua_istable(L, -1)) return em_lua_fail(L, "gbt: a saved model needs a list of trees");
  int trees = lua_gettop(L), ntrees = (int)lua_objlen(L, trees);
  char err[EM_ERR_MAX];
  em_gbt *m = NULL;
  if (em_prior_gbt_new((int)ncols, ntrees, (int)depth, base, &m, err)) return em_lua_fail(L, err);
  /* m is C-owned until pushed: nothing below raises (only rawgeti, getfield on tables and number reads) */
  int ok = 1;
  for (int t = 0; t < ntrees && ok; t++) {
    lua_rawgeti(L, trees, t + 1);
    ok = load_tree(L, m, t, err);
    lua_settop(L, trees);
  }
  if (ok && em_prior_gbt_check(m, err)) ok = 0;
  if (!ok) {
    em_prior_gbt_free(m);
    return em_lua_fail(L, err);
  }
  em_lua_push(L, GBT_T, m);
  return 1;
}

int luaopen_emmy_prior_c(lua_State *L) {
  static const luaL_Reg methods[] = {
      {"predict", g_predict}, {"predict_many", g_predict_many}, {"totable", g_totable}, {NULL, NULL}};
  static const luaL_Reg funcs[] = {{"roofline", l_roofline},
                                   {"spearman", l_spearman},
                                   {"gbt_fit", l_gbt_fit},
                                   {"gbt_load", l_gbt_load},
                                   {NULL, NULL}};
  em_lua_class(L, GBT_T, methods, g_gc, g_tostring);
  lua_newtable(L);
  luaL_register(L, NULL, funcs);
  return 1;
}
