/* lib_knobs.c — `emmy.knobs`: the knob table (src/knobs.h) for Lua — the rules' check of what they declare and
 * return, the EMMY_KNOBS pins, `emmy knobs`, the generated table of docs/formats.md — and the contraction's
 * legality table (src/ctr_legal.h) that the rules' resource check shares with the emitter. */
#include <stdio.h>
#include <string.h>

#include "bindings.h"
#include "ctr_legal.h"
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

/* The kernel summary's fields ctr_refusal reads. */
enum { F_DUAL, F_SIBLINGS, F_STAGE, F_STEP, F_REDUCTIONS, F_K, F_N, F_FUSED, F_STORE, F_WIDTHS, F_COUNT };
static const char *const fact_keys[F_COUNT] = {"dual", "siblings", "stage", "stage_step", "epilogue_reductions",
                                               "K", "N", "tma_fused", "tma_store", "sibling_widths"};

/* ctr_refusal's second upvalue: the ids of the knobs it reads from a candidate (the contraction's), in the order of
 * their names in the first upvalue, which has the summary's field names after them. */
typedef struct {
  int n;
  int id[EM_NKNOBS];
} ctr_keys;

/* The integer at the stack top (a number, a boolean as 1 or 0; def where it is nil or another type), popped; name
 * for the message where a number is not an integer in reach (raised). */
static int64_t pop_int(lua_State *L, const char *name, int64_t def) {
  int64_t v = def;
  if (lua_type(L, -1) == LUA_TBOOLEAN) v = lua_toboolean(L, -1);
  else if (lua_type(L, -1) == LUA_TNUMBER) {
    lua_Number x = lua_tonumber(L, -1);
    if (!(x >= -9e18 && x <= 9e18) || x != (lua_Number)(int64_t)x) luaL_error(L, "%s=%f is not an integer", name, (double)x);
    v = (int64_t)x;
  }
  lua_pop(L, 1);
  return v;
}

/* The kernel summary at index 1 as the table's facts. */
static void summary_facts(lua_State *L, int nk, em_ctr_facts *f) {
  int64_t v[F_COUNT];
  static const int64_t def[F_COUNT] = {0, 0, 0, 1, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < F_WIDTHS; i++) {
    lua_rawgeti(L, lua_upvalueindex(1), nk + 1 + i);
    lua_gettable(L, 1);
    v[i] = pop_int(L, fact_keys[i], def[i]);
  }
  f->dual = (int)v[F_DUAL], f->siblings = (int)v[F_SIBLINGS], f->stage = v[F_STAGE], f->stage_step = v[F_STEP];
  f->head_reductions = (int)v[F_REDUCTIONS], f->K = v[F_K], f->N = v[F_N];
  f->tma_fused = (int)v[F_FUSED], f->tma_store = (int)v[F_STORE];
  lua_rawgeti(L, lua_upvalueindex(1), nk + 1 + F_WIDTHS);
  lua_gettable(L, 1);
  for (int i = 1; lua_istable(L, -1) && i <= (int)lua_objlen(L, -1) && f->nwidths < EM_CTR_MAX_WIDTHS; i++) {
    lua_rawgeti(L, -1, i);
    f->widths[f->nwidths++] = pop_int(L, fact_keys[F_WIDTHS], 0);
  }
  lua_pop(L, 1);
}

/* The facts of the kernel summary at index 1: read once per summary table and kept in the third upvalue (a table
 * with weak keys, summary -> userdata), since the rules call ctr_refusal for every leaf of a kernel and a summary
 * does not change once made. */
static const em_ctr_facts *facts_of(lua_State *L, int nk) {
  lua_pushvalue(L, 1);
  lua_rawget(L, lua_upvalueindex(3));
  const em_ctr_facts *got = lua_touserdata(L, -1);
  lua_pop(L, 1);
  if (got) return got;
  em_ctr_facts *f = lua_newuserdata(L, sizeof *f);
  memset(f, 0, sizeof *f);
  summary_facts(L, nk, f);
  lua_pushvalue(L, 1);
  lua_pushvalue(L, -2);
  lua_rawset(L, lua_upvalueindex(3));
  lua_pop(L, 1); /* (the weak table keeps it while the summary lives) */
  return f;
}

/* knobs.ctr_refusal(k, c) -> nil | reason: the contraction legality table's verdict on candidate c (knob values by
 * name; a knob c leaves out is at the table's default, as the emitter takes it) for the kernel summary k of
 * scripts/emmy/kernels.lua (dual, siblings, sibling_widths, stage, stage_step, epilogue_reductions, tma_fused,
 * tma_store: the emitter's, from ir.ctr_facts; K and N at the shape hint; read once per table: facts_of). Only the
 * contraction's non-structural knobs are read from c (the table's rules read no other), as numbers. The rules call it
 * for every leaf of a kernel, so the names come from the upvalues rather than from C strings hashed at each call. */
/* The knob plan of candidate c at index 2 (knob values by name) into kv: the contraction's non-structural knobs c
 * has as numbers, every other knob at the table's default. */
static void candidate_plan(lua_State *L, const ctr_keys *ks, int64_t kv[EM_NKNOBS]) {
  for (int i = 0; i < EM_NKNOBS; i++) kv[i] = em_knob_table[i].def;
  luaL_checkstack(L, ks->n, "knobs: a candidate's plan");
  for (int j = 0; j < ks->n; j++) {
    int isnum;
    lua_rawgeti(L, lua_upvalueindex(1), j + 1);
    lua_gettable(L, 2);
    lua_Number x = lua_tonumberx(L, -1, &isnum);
    if (!isnum) continue;
    if (!(x >= -9e18 && x <= 9e18) || x != (lua_Number)(int64_t)x)
      luaL_error(L, "%s=%f is not an integer", em_knob_table[ks->id[j]].name, (double)x);
    kv[ks->id[j]] = (int64_t)x;
  }
  lua_settop(L, 2);
}

static int l_ctr_refusal(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_checktype(L, 2, LUA_TTABLE);
  const ctr_keys *ks = lua_touserdata(L, lua_upvalueindex(2));
  const em_ctr_facts *f = facts_of(L, ks->n);
  int64_t kv[EM_NKNOBS];
  candidate_plan(L, ks, kv);
  char why[EM_ERR_MAX];
  if (em_ctr_refusal(f, kv, why)) lua_pushstring(L, why);
  else lua_pushnil(L);
  return 1;
}

/* knobs.ctr_smem(k, c) -> bytes, barrier bytes: the shared memory candidate c of contraction summary k (its dual
 * field) takes on a TMA ring — the launch's dynamic shared memory and the static mbarriers besides — by the emitter's
 * own arithmetic (em_ctr_tma_smem, src/ctr_legal.c), for the rules' resource check. */
static int l_ctr_smem(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_checktype(L, 2, LUA_TTABLE);
  lua_getfield(L, 1, "dual");
  int dual = lua_toboolean(L, -1) || (lua_type(L, -1) == LUA_TNUMBER && lua_tonumber(L, -1) != 0);
  lua_pop(L, 1);
  int64_t kv[EM_NKNOBS];
  candidate_plan(L, lua_touserdata(L, lua_upvalueindex(2)), kv);
  em_ctr_smem s;
  em_ctr_tma_smem(kv, dual, &s);
  lua_pushnumber(L, (lua_Number)s.total);
  lua_pushnumber(L, (lua_Number)s.barriers);
  return 2;
}

int luaopen_emmy_knobs(lua_State *L) {
  static const luaL_Reg fns[] = {{"list", l_list}, {"info", l_info}, {"check", l_check}, {NULL, NULL}};
  lua_newtable(L);
  luaL_register(L, NULL, fns);
  /* ctr_refusal's upvalues: the contraction's knob names, then the summary's field names; the knobs' ids; the
   * summaries' facts */
  lua_createtable(L, EM_NKNOBS + F_COUNT, 0);
  ctr_keys *ks = lua_newuserdata(L, sizeof *ks);
  ks->n = 0;
  for (int i = 0; i < EM_NKNOBS; i++)
    if (em_knob_for_kind((em_knob_id)i, "contraction") && !em_knob_structural((em_knob_id)i)) {
      lua_pushstring(L, em_knob_table[i].name);
      lua_rawseti(L, -3, ++ks->n);
      ks->id[ks->n - 1] = i;
    }
  for (int i = 0; i < F_COUNT; i++) {
    lua_pushstring(L, fact_keys[i]);
    lua_rawseti(L, -3, ks->n + 1 + i);
  }
  lua_newtable(L);
  lua_createtable(L, 0, 1);
  lua_pushliteral(L, "k");
  lua_setfield(L, -2, "__mode");
  lua_setmetatable(L, -2);
  lua_pushvalue(L, -3); /* (ctr_smem's: the names and the ids) */
  lua_pushvalue(L, -3);
  lua_pushcclosure(L, l_ctr_smem, 2);
  lua_setfield(L, -5, "ctr_smem");
  lua_pushcclosure(L, l_ctr_refusal, 3);
  lua_setfield(L, -2, "ctr_refusal");
  return 1;
}
