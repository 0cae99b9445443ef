/* lib_ref.c — `emmy.ref`: host tensors (userdata) and the CPU reference run of a graph. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bindings.h"
#include "ref.h"

#define TENSOR_T "emmy.tensor"

em_graph *em_lua_checkgraph(lua_State *L, int idx);

static em_tensor *check_tensor(lua_State *L, int idx) { return em_lua_check(L, idx, TENSOR_T, "tensor"); }

static int t_gc(lua_State *L) {
  em_box *b = luaL_checkudata(L, 1, TENSOR_T);
  em_tensor_free(b->p);
  b->p = NULL;
  return 0;
}

static int t_tostring(lua_State *L) {
  em_box *b = luaL_checkudata(L, 1, TENSOR_T);
  em_tensor *t = b->p;
  if (!t) {
    lua_pushstring(L, "emmy.tensor (closed)");
    return 1;
  }
  char buf[160];
  int o = snprintf(buf, sizeof buf, "emmy.tensor %s [", em_dtype_name(t->dtype));
  for (int i = 0; i < t->rank && o < (int)sizeof buf; i++)
    o += snprintf(buf + o, sizeof buf - (size_t)o, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
  if (o < (int)sizeof buf) snprintf(buf + o, sizeof buf - (size_t)o, "]");
  lua_pushstring(L, buf);
  return 1;
}

static int push_tensor(lua_State *L, em_tensor *t) {
  em_lua_push(L, TENSOR_T, t);
  return 1;
}

/* Reads dtype (arg i) and shape (arg i+1); raises on misuse. */
static em_tensor *new_from_args(lua_State *L, int i) {
  int dt = em_dtype_parse(luaL_checkstring(L, i));
  if (dt < 0) luaL_argerror(L, i, "unknown dtype");
  luaL_checktype(L, i + 1, LUA_TTABLE);
  int rank = (int)lua_objlen(L, i + 1);
  if (rank > EM_TENSOR_MAX_RANK) luaL_argerror(L, i + 1, "rank too high");
  int64_t shape[EM_TENSOR_MAX_RANK];
  for (int k = 0; k < rank; k++) {
    lua_rawgeti(L, i + 1, k + 1);
    int bad = em_lua_toint(L, -1, &shape[k]);
    lua_pop(L, 1);
    if (bad) luaL_argerror(L, i + 1, "sizes must be integers within ±2^53");
    if (shape[k] < 0) luaL_argerror(L, i + 1, "negative size");
  }
  char err[EM_ERR_MAX];
  em_tensor *t = em_tensor_new((em_dtype)dt, rank, shape, err);
  if (!t) luaL_error(L, "%s", err);
  return t;
}

/* ref.tensor(dtype, shape [, values]) — values is a flat list in row-major order */
static int l_tensor(lua_State *L) {
  em_tensor *t = new_from_args(L, 1);
  push_tensor(L, t);
  if (lua_istable(L, 3)) {
    int64_t n = (int64_t)lua_objlen(L, 3);
    if (n != t->numel) luaL_error(L, "ref.tensor: %d values for %d elements", (int)n, (int)t->numel);
    for (int64_t k = 0; k < n; k++) {
      lua_rawgeti(L, 3, (int)k + 1);
      em_t_set(t, k, lua_isboolean(L, -1) ? lua_toboolean(L, -1) : lua_tonumber(L, -1));
      lua_pop(L, 1);
    }
  }
  return 1;
}

/* The mask of l_packed_mask as T*T bytes (0/1, the device's bool): em_packed_mask_bytes's, as a string (the
 * reference tensor holds a double an element: 537 MB and seconds at 8,192 tokens). */
static int packed_mask_bytes(lua_State *L, int n, int64_t T) {
  if (T > 46340) luaL_argerror(L, 1, "more than 46,340 tokens: the mask would pass 2 GB");
  unsigned char *m = malloc((size_t)(T * T));
  int64_t *lens = malloc(sizeof *lens * (size_t)(n ? n : 1));
  if (!m || !lens) {
    free(m), free(lens);
    return luaL_error(L, "packed_mask: out of host memory for %lld bytes", (long long)(T * T));
  }
  for (int i = 1; i <= n; i++) {
    lua_rawgeti(L, 1, i);
    lens[i - 1] = (int64_t)lua_tonumber(L, -1);
    lua_pop(L, 1);
  }
  em_packed_mask_bytes(m, lens, n, T);
  free(lens);
  lua_pushlstring(L, (const char *)m, (size_t)(T * T));
  free(m);
  return 1;
}

/* ref.pack_ids({seq1, seq2, ...}, pad) -> ids, pos: i64 [1, T] tensors of the sequences' token ids end to end and each
 * token's position in its own sequence (from 0), then pad zeros at positions 0.. (T = the lengths' sum + pad) — emmy
 * serve's packing of a batch in one call instead of two :set a token */
static int l_pack_ids(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  int n = (int)lua_objlen(L, 1);
  int64_t pad = (int64_t)luaL_optnumber(L, 2, 0), T = pad;
  if (pad < 0) luaL_argerror(L, 2, "pad must be >= 0");
  for (int i = 1; i <= n; i++) {
    lua_rawgeti(L, 1, i);
    if (!lua_istable(L, -1)) luaL_argerror(L, 1, "a list of sequences (lists of token ids)");
    T += (int64_t)lua_objlen(L, -1);
    lua_pop(L, 1);
  }
  int64_t shape[2] = {1, T};
  char err[EM_ERR_MAX];
  em_tensor *ids = em_tensor_new(EM_I64, 2, shape, err), *pos = ids ? em_tensor_new(EM_I64, 2, shape, err) : NULL;
  if (!pos) {
    em_tensor_free(ids);
    return luaL_error(L, "%s", err);
  }
  push_tensor(L, ids);
  push_tensor(L, pos);
  int64_t k = 0;
  for (int i = 1; i <= n; i++) {
    lua_rawgeti(L, 1, i);
    int len = (int)lua_objlen(L, -1);
    for (int j = 1; j <= len; j++, k++) {
      lua_rawgeti(L, -1, j);
      int64_t id;
      int bad = em_lua_toint(L, -1, &id);
      lua_pop(L, 1);
      if (bad) luaL_argerror(L, 1, "token ids must be integers");
      em_t_set(ids, k, (double)id);
      em_t_set(pos, k, (double)(j - 1));
    }
    lua_pop(L, 1);
  }
  for (int64_t j = 0; j < pad; j++, k++) em_t_set(pos, k, (double)j); /* (ids: zeros already) */
  return 2;
}

/* ref.packed_mask({len1, len2, ...} [, "bytes"]) -> bool [1, 1, T, T], T the lengths' sum: sequences packed end to
 * end, each query attending to the keys of its own sequence up to itself (block-diagonal and causal: emmy serve's
 * batches); "bytes": the same as a string of T*T bytes, for buf:upload */
static int l_packed_mask(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  int n = (int)lua_objlen(L, 1);
  int64_t T = 0;
  for (int i = 1; i <= n; i++) {
    lua_rawgeti(L, 1, i);
    int64_t len;
    int bad = em_lua_toint(L, -1, &len);
    lua_pop(L, 1);
    if (bad || len < 1) luaL_argerror(L, 1, "lengths must be positive integers");
    T += len;
  }
  const char *form = luaL_optstring(L, 2, "tensor");
  if (!strcmp(form, "bytes")) return packed_mask_bytes(L, n, T);
  if (strcmp(form, "tensor")) luaL_argerror(L, 2, "\"tensor\" or \"bytes\"");
  int64_t shape[4] = {1, 1, T, T};
  char err[EM_ERR_MAX];
  em_tensor *t = em_tensor_new(EM_BOOL, 4, shape, err);
  if (!t) return luaL_error(L, "%s", err);
  push_tensor(L, t);
  int64_t start = 0;
  for (int i = 1; i <= n; i++) {
    lua_rawgeti(L, 1, i);
    int64_t len = (int64_t)lua_tonumber(L, -1);
    lua_pop(L, 1);
    for (int64_t q = start; q < start + len; q++)
      for (int64_t k = start; k <= q; k++) em_t_set(t, q * T + k, 1);
    start += len;
  }
  return 1;
}

/* ref.random(dtype, shape, {seed=, mean=0, std=1, lo=0, hi=}) — normal for floats, uniform [lo,hi) for ints */
static int l_random(lua_State *L) {
  em_tensor *t = new_from_args(L, 1);
  push_tensor(L, t);
  double mean = 0, std = 1;
  uint64_t seed = 0;
  int64_t lo = 0, hi = 2;
  if (lua_istable(L, 3)) {
    lua_getfield(L, 3, "seed");
    seed = (uint64_t)luaL_optnumber(L, -1, 0);
    lua_getfield(L, 3, "mean");
    mean = luaL_optnumber(L, -1, 0);
    lua_getfield(L, 3, "std");
    std = luaL_optnumber(L, -1, 1);
    lua_getfield(L, 3, "lo");
    lo = (int64_t)luaL_optnumber(L, -1, 0);
    lua_getfield(L, 3, "hi");
    hi = (int64_t)luaL_optnumber(L, -1, (lua_Number)(t->dtype == EM_BOOL ? 2 : 100));
    lua_pop(L, 5);
  }
  if (em_dtype_is_float(t->dtype)) em_tensor_fill_normal(t, seed, mean, std);
  else {
    if (hi <= lo) luaL_error(L, "ref.random: empty integer range [%d, %d)", (int)lo, (int)hi);
    em_tensor_fill_int(t, seed, lo, hi);
  }
  return 1;
}

/* ref.full(dtype, shape, value) */
static int l_full(lua_State *L) {
  em_tensor *t = new_from_args(L, 1);
  push_tensor(L, t);
  em_tensor_fill_const(t, luaL_checknumber(L, 3));
  return 1;
}

/* ref.load(path, dtype) -> tensor | nil, msg */
static int l_load(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  int dt = em_dtype_parse(luaL_checkstring(L, 2));
  if (dt < 0) luaL_argerror(L, 2, "unknown dtype");
  char err[EM_ERR_MAX];
  em_tensor *t = em_tensor_load_npy(path, (em_dtype)dt, err);
  if (!t) return em_lua_fail(L, err);
  return push_tensor(L, t);
}

static int t_save(lua_State *L) {
  em_tensor *t = check_tensor(L, 1);
  char err[EM_ERR_MAX];
  if (em_tensor_save_npy(t, luaL_checkstring(L, 2), err)) return em_lua_fail(L, err);
  lua_pushboolean(L, 1);
  return 1;
}

static int t_shape(lua_State *L) {
  em_tensor *t = check_tensor(L, 1);
  lua_createtable(L, t->rank, 0);
  for (int i = 0; i < t->rank; i++) {
    lua_pushnumber(L, (lua_Number)t->shape[i]);
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

static int t_dtype(lua_State *L) {
  lua_pushstring(L, em_dtype_name(check_tensor(L, 1)->dtype));
  return 1;
}

static int t_numel(lua_State *L) {
  lua_pushnumber(L, (lua_Number)check_tensor(L, 1)->numel);
  return 1;
}

/* t:cast(dtype) -> a new tensor with every value rounded to dtype */
static int t_cast(lua_State *L) {
  em_tensor *t = check_tensor(L, 1);
  int dt = em_dtype_parse(luaL_checkstring(L, 2));
  if (dt < 0) luaL_argerror(L, 2, "unknown dtype");
  char err[EM_ERR_MAX];
  em_tensor *o = em_tensor_new((em_dtype)dt, t->rank, t->shape, err);
  if (!o) return luaL_error(L, "%s", err);
  for (int64_t i = 0; i < t->numel; i++) em_t_set(o, i, em_t_get(t, i));
  return push_tensor(L, o);
}

/* t:get(i) — 1-based flat index */
static int t_get(lua_State *L) {
  em_tensor *t = check_tensor(L, 1);
  int64_t i = (int64_t)luaL_checknumber(L, 2);
  if (i < 1 || i > t->numel) luaL_argerror(L, 2, "index out of range");
  lua_pushnumber(L, em_t_get(t, i - 1));
  return 1;
}

/* t:set(i, v) — 1-based flat index; v rounded to the dtype */
static int t_set(lua_State *L) {
  em_tensor *t = check_tensor(L, 1);
  int64_t i = (int64_t)luaL_checknumber(L, 2);
  if (i < 1 || i > t->numel) luaL_argerror(L, 2, "index out of range");
  em_t_set(t, i - 1, lua_isboolean(L, 3) ? lua_toboolean(L, 3) : luaL_checknumber(L, 3));
  return 0;
}

/* t:to_table() — flat row-major list (bool as booleans) */
static int t_to_table(lua_State *L) {
  em_tensor *t = check_tensor(L, 1);
  lua_createtable(L, (int)t->numel, 0);
  for (int64_t i = 0; i < t->numel; i++) {
    if (t->dtype == EM_BOOL) lua_pushboolean(L, em_t_get(t, i) != 0);
    else lua_pushnumber(L, em_t_get(t, i));
    lua_rawseti(L, -2, (int)i + 1);
  }
  return 1;
}

/* t:stats() -> {mean, std, min, max, nonfinite} over the finite values (bool as 0/1), in one pass in C: a
 * Lua table of a large tensor's values would cost gigabytes. */
static int t_stats(lua_State *L) {
  em_tensor *t = check_tensor(L, 1);
  double sum = 0, sq = 0, mn = HUGE_VAL, mx = -HUGE_VAL;
  int64_t bad = 0;
  for (int64_t i = 0; i < t->numel; i++) {
    double v = em_t_get(t, i);
    if (!isfinite(v)) {
      bad++;
      continue;
    }
    sum += v;
    sq += v * v;
    if (v < mn) mn = v;
    if (v > mx) mx = v;
  }
  int64_t k = t->numel - bad;
  double mean = k > 0 ? sum / (double)k : 0, var = k > 0 ? sq / (double)k - mean * mean : 0;
  lua_createtable(L, 0, 5);
  lua_pushnumber(L, mean);
  lua_setfield(L, -2, "mean");
  lua_pushnumber(L, var > 0 ? sqrt(var) : 0);
  lua_setfield(L, -2, "std");
  lua_pushnumber(L, mn);
  lua_setfield(L, -2, "min");
  lua_pushnumber(L, mx);
  lua_setfield(L, -2, "max");
  lua_pushnumber(L, (lua_Number)bad);
  lua_setfield(L, -2, "nonfinite");
  return 1;
}

static void push_cmp(lua_State *L, const em_cmp *c) {
  lua_createtable(L, 0, 8);
  lua_pushboolean(L, c->shape_ok && c->mismatches == 0);
  lua_setfield(L, -2, "ok");
  lua_pushboolean(L, c->shape_ok);
  lua_setfield(L, -2, "shape_ok");
  lua_pushnumber(L, c->max_abs);
  lua_setfield(L, -2, "max_abs");
  lua_pushnumber(L, c->max_rel);
  lua_setfield(L, -2, "max_rel");
  lua_pushnumber(L, (lua_Number)c->mismatches);
  lua_setfield(L, -2, "mismatches");
  lua_pushnumber(L, (lua_Number)c->numel);
  lua_setfield(L, -2, "numel");
  lua_pushnumber(L, c->rtol);
  lua_setfield(L, -2, "rtol");
  lua_pushnumber(L, c->atol);
  lua_setfield(L, -2, "atol");
}

/* ref.compare(got, want [, {rtol=, atol=, terms = {tensor, ...}}]) -> {ok, max_abs, max_rel, mismatches, numel, rtol, atol}
 * terms: want is their sum or difference (em_tensor_compare_terms: the tolerance at the terms' magnitude) */
static int l_compare(lua_State *L) {
  em_tensor *a = check_tensor(L, 1), *b = check_tensor(L, 2);
  double rtol, atol;
  em_tolerance(b->dtype, &rtol, &atol);
  if (a->dtype != b->dtype) {
    double r2, a2;
    em_tolerance(a->dtype, &r2, &a2);
    if (r2 > rtol) rtol = r2, atol = a2;
  }
  if (lua_istable(L, 3)) {
    lua_getfield(L, 3, "rtol");
    rtol = luaL_optnumber(L, -1, rtol);
    lua_getfield(L, 3, "atol");
    atol = luaL_optnumber(L, -1, atol);
    lua_pop(L, 2);
  }
  const em_tensor *terms[4];
  int nterms = 0;
  if (lua_istable(L, 3)) {
    lua_getfield(L, 3, "terms");
    if (lua_istable(L, -1))
      for (int i = 1; i <= 4; i++) {
        lua_rawgeti(L, -1, i);
        if (!lua_isnil(L, -1)) terms[nterms++] = check_tensor(L, lua_gettop(L));
        lua_pop(L, 1);
      }
    lua_pop(L, 1);
  }
  em_cmp c = em_tensor_compare_terms(a, b, terms, nterms, rtol, atol);
  push_cmp(L, &c);
  return 1;
}

/* ref.tolerance(dtype) -> rtol, atol */
static int l_tolerance(lua_State *L) {
  int dt = em_dtype_parse(luaL_checkstring(L, 1));
  if (dt < 0) luaL_argerror(L, 1, "unknown dtype");
  double r, a;
  em_tolerance((em_dtype)dt, &r, &a);
  lua_pushnumber(L, r);
  lua_pushnumber(L, a);
  return 2;
}

/* ref.run(graph, inputs {name = tensor}, {bind = {sym = n}, keep_all = bool, threads = n})
 *   -> values {name = tensor} (outputs, or every value with keep_all), binding {sym = n}
 *    | nil, msg, code (1 a runtime failure such as memory, 2 bad input: the exit code a command gives)
 * Input tensors are copied into the result table's ownership only by reference: they stay the caller's. */
static int l_run(lua_State *L) {
  em_graph *g = em_lua_checkgraph(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  em_ref_opts opts = {0, 0};
  int64_t given[EM_MAX_SYMS], vals[EM_MAX_SYMS];
  for (int i = 0; i < EM_MAX_SYMS; i++) given[i] = EM_SYM_UNBOUND;
  char err[EM_ERR_MAX];
  if (lua_istable(L, 3)) {
    lua_getfield(L, 3, "keep_all");
    opts.keep_all = lua_toboolean(L, -1);
    lua_getfield(L, 3, "threads");
    opts.nthreads = (int)luaL_optnumber(L, -1, 0);
    lua_pop(L, 2);
    lua_getfield(L, 3, "bind");
    int bad = em_lua_binding(L, lua_gettop(L), g, given, err);
    lua_pop(L, 1);
    if (bad) return em_lua_fail(L, err);
  }
  if (em_ref_bind(g, given, vals, err)) return em_lua_fail(L, err);
  em_tensor **ins = em_alloc(sizeof(em_tensor *) * (size_t)(g->inputs.n ? g->inputs.n : 1));
  for (int i = 0; i < g->inputs.n; i++) {
    const char *name = g->values.v[g->inputs.v[i]].name;
    lua_getfield(L, 2, name);
    em_box *b = luaL_testudata(L, -1, TENSOR_T);
    lua_pop(L, 1); /* the tensor stays referenced by the inputs table */
    if (!b || !b->p) {
      free(ins);
      snprintf(err, sizeof err, "input '%s' was not given a tensor", name);
      return em_lua_fail(L, err);
    }
    ins[i] = b->p;
  }
  em_ref_result res;
  em_status st = em_ref_run(g, vals, ins, &opts, &res, err);
  free(ins);
  if (st) {
    em_lua_fail(L, err);
    lua_pushinteger(L, st); /* 1: a runtime failure (memory); 2: the graph or its inputs */
    return 3;
  }
  lua_newtable(L);
  for (int v = 0; v < res.nvalues; v++) {
    if (!res.vals[v] || g->values.v[v].kind != EM_V_NODE) continue;
    push_tensor(L, res.vals[v]);
    res.vals[v] = NULL; /* ownership moves to Lua */
    lua_setfield(L, -2, g->values.v[v].name);
  }
  em_ref_result_free(&res);
  lua_newtable(L);
  for (int i = 0; i < g->syms.n; i++) {
    if (g->syms.s[i].derived) continue;
    lua_pushnumber(L, (lua_Number)vals[i]);
    lua_setfield(L, -2, g->syms.s[i].name);
  }
  return 2;
}

/* ref.rope_tables(dtype, max_pos, inv_freq {f32 values}, attention_scaling) -> cos, sin [max_pos, 2·#inv_freq]
 * As Hugging Face computes them: freqs = f32(inv_freq[i] · p), emb = cat(freqs, freqs), cos/sin in f32,
 * times attention_scaling, then rounded to dtype. */
static int l_rope_tables(lua_State *L) {
  int dt = em_dtype_parse(luaL_checkstring(L, 1));
  if (dt < 0) luaL_argerror(L, 1, "unknown dtype");
  int64_t P;
  if (em_lua_toint(L, 2, &P)) luaL_argerror(L, 2, "rows must be an integer within ±2^53");
  luaL_checktype(L, 3, LUA_TTABLE);
  double scaling = luaL_optnumber(L, 4, 1.0);
  int half = (int)lua_objlen(L, 3);
  if (P <= 0 || half <= 0) luaL_error(L, "rope_tables: empty table");
  float *inv = malloc(sizeof(float) * (size_t)half);
  if (!inv) luaL_error(L, "out of memory");
  for (int i = 0; i < half; i++) {
    lua_rawgeti(L, 3, i + 1);
    inv[i] = (float)lua_tonumber(L, -1);
    lua_pop(L, 1);
  }
  int64_t shape[2] = {P, 2 * (int64_t)half};
  char err[EM_ERR_MAX];
  em_tensor *c = em_tensor_new((em_dtype)dt, 2, shape, err), *s = c ? em_tensor_new((em_dtype)dt, 2, shape, err) : NULL;
  if (!s) {
    free(inv);
    em_tensor_free(c);
    return luaL_error(L, "%s", err);
  }
  for (int64_t p = 0; p < P; p++)
    for (int i = 0; i < half; i++) {
      float f = inv[i] * (float)p;
      float cv = (float)cos((double)f), sv = (float)sin((double)f);
      double cs = (double)(float)(cv * (float)scaling), ss = (double)(float)(sv * (float)scaling);
      int64_t k = p * 2 * half + i;
      em_t_set(c, k, cs);
      em_t_set(c, k + half, cs);
      em_t_set(s, k, ss);
      em_t_set(s, k + half, ss);
    }
  free(inv);
  push_tensor(L, c);
  push_tensor(L, s);
  return 2;
}

int luaopen_emmy_ref(lua_State *L) {
  static const luaL_Reg methods[] = {{"save", t_save},   {"shape", t_shape}, {"dtype", t_dtype},
                                     {"numel", t_numel}, {"get", t_get},     {"set", t_set},     {"cast", t_cast},     {"to_table", t_to_table}, {"stats", t_stats},
                                     {NULL, NULL}};
  em_lua_class(L, TENSOR_T, methods, t_gc, t_tostring);
  static const luaL_Reg fns[] = {{"tensor", l_tensor},   {"random", l_random},   {"full", l_full},
                                 {"load", l_load},       {"compare", l_compare}, {"tolerance", l_tolerance},
                                 {"run", l_run},         {"rope_tables", l_rope_tables}, {"packed_mask", l_packed_mask}, {"pack_ids", l_pack_ids},
                                 {NULL, NULL}};
  lua_newtable(L);
  luaL_register(L, NULL, fns);
  return 1;
}
