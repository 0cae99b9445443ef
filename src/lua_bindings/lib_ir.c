/* lib_ir.c — `emmy.ir`: build and inspect graphs from Lua. Values are referred to by name; arguments are
 * given by ATen argument name and checked against the op's schema; expected failures return nil, message. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bindings.h"
#include "graph.h"
#include "ref.h"
#include "emit.h"

#define GRAPH_T "emmy.graph"

em_graph *em_lua_checkgraph(lua_State *L, int idx) { return em_lua_check(L, idx, GRAPH_T, "graph"); }

static int g_gc(lua_State *L) {
  em_box *b = luaL_checkudata(L, 1, GRAPH_T);
  em_graph_free(b->p);
  b->p = NULL;
  return 0;
}

static int g_tostring(lua_State *L) {
  em_box *b = luaL_checkudata(L, 1, GRAPH_T);
  em_graph *g = b->p;
  if (!g) lua_pushstring(L, "emmy.graph (closed)");
  else lua_pushfstring(L, "emmy.graph '%s' (%d nodes)", g->name, g->nodes.n);
  return 1;
}

static int is_null(lua_State *L, int idx) {
  return lua_isnoneornil(L, idx) || (lua_islightuserdata(L, idx) && lua_touserdata(L, idx) == NULL);
}

/* A dim from a Lua number (integral) or an expression string. */
static int to_dim(lua_State *L, int idx, em_graph *g, em_dim *out, const char *what, char *err) {
  if (lua_type(L, idx) == LUA_TNUMBER) {
    double v = lua_tonumber(L, idx);
    if (v != floor(v) || fabs(v) > 9.007199254740992e15) {
      em_fail(err, EM_EINPUT, "%s: %g is not an integer", what, v);
      return -1;
    }
    *out = em_dim_const((int64_t)v);
    return 0;
  }
  if (lua_type(L, idx) == LUA_TSTRING) {
    char e2[EM_ERR_MAX];
    size_t n;
    const char *s = lua_tolstring(L, idx, &n);
    if (strlen(s) != n) {
      em_fail(err, EM_EINPUT, "%s: a dim expression with a NUL byte", what);
      return -1;
    }
    if (em_dim_parse(&g->syms, s, out, e2)) {
      em_fail(err, EM_EINPUT, "%s: %s", what, e2);
      return -1;
    }
    return 0;
  }
  em_fail(err, EM_EINPUT, "%s: expected an integer or a dim expression, got %s", what, luaL_typename(L, idx));
  return -1;
}

/* A constant within ±2^53 as a number; any other dim as its canonical text, so that a constant a double
 * cannot hold (up to 2^63-1) is written to graph JSON, and read back, exactly. */
static void push_dim(lua_State *L, const em_graph *g, const em_dim *d) {
  int64_t c;
  if (em_dim_is_const(d, &c) && c >= -((int64_t)1 << 53) && c <= (int64_t)1 << 53) lua_pushnumber(L, (lua_Number)c);
  else {
    char buf[4096];
    lua_pushstring(L, em_dim_format(&g->syms, d, buf, sizeof buf));
  }
}

static int to_shape(lua_State *L, int idx, em_graph *g, em_shape *s, char *err) {
  if (!lua_istable(L, idx)) {
    em_fail(err, EM_EINPUT, "shape must be a list of dims");
    return -1;
  }
  int n = (int)lua_objlen(L, idx);
  if (n > EM_MAX_RANK) {
    em_fail(err, EM_EINPUT, "rank %d is over %d", n, EM_MAX_RANK);
    return -1;
  }
  s->rank = n;
  for (int i = 0; i < n; i++) {
    lua_rawgeti(L, idx, i + 1);
    char what[32];
    snprintf(what, sizeof what, "shape[%d]", i);
    int rc = to_dim(L, lua_gettop(L), g, &s->d[i], what, err);
    lua_pop(L, 1);
    if (rc) return -1;
    int64_t c;
    if (em_dim_is_const(&s->d[i], &c) && c < 0) {
      em_fail(err, EM_EINPUT, "shape[%d] is negative (%lld)", i, (long long)c);
      return -1;
    }
  }
  return 0;
}

static void push_shape(lua_State *L, const em_graph *g, const em_shape *s) {
  lua_createtable(L, s->rank, 0);
  for (int i = 0; i < s->rank; i++) {
    push_dim(L, g, &s->d[i]);
    lua_rawseti(L, -2, i + 1);
  }
}

static int to_dtype(lua_State *L, int idx, int *out, const char *what, char *err) {
  const char *s = lua_type(L, idx) == LUA_TSTRING ? lua_tostring(L, idx) : NULL;
  int d = em_dtype_parse(s);
  if (d < 0) {
    em_fail(err, EM_EINPUT, "%s: unknown dtype '%s' (bf16, f16, f32, f64, i32, i64, bool)", what, s ? s : luaL_typename(L, idx));
    return -1;
  }
  *out = d;
  return 0;
}

static int to_tensor(lua_State *L, int idx, em_graph *g, int *out, const char *what, char *err) {
  if (lua_type(L, idx) != LUA_TSTRING) {
    em_fail(err, EM_EINPUT, "%s: expected a value name, got %s", what, luaL_typename(L, idx));
    return -1;
  }
  int v = em_graph_find(g, lua_tostring(L, idx));
  if (v < 0) {
    em_fail(err, EM_EINPUT, "%s: unknown value '%s'", what, lua_tostring(L, idx));
    return -1;
  }
  *out = v;
  return 0;
}

/* A scalar: number, {float = x} (an integral Python float), or a dim expression string. */
static int to_scalar(lua_State *L, int idx, em_graph *g, em_arg *a, const char *what, char *err) {
  if (lua_type(L, idx) == LUA_TNUMBER) {
    double v = lua_tonumber(L, idx);
    if (v == floor(v) && fabs(v) < 9.007199254740992e15) a->i = em_dim_const((int64_t)v);
    else {
      a->is_float = 1;
      a->f = v;
    }
    return 0;
  }
  if (lua_istable(L, idx)) {
    lua_getfield(L, idx, "float");
    int ok = lua_type(L, -1) == LUA_TNUMBER;
    a->f = lua_tonumber(L, -1);
    lua_pop(L, 1);
    if (!ok) {
      em_fail(err, EM_EINPUT, "%s: a table scalar must be {float = number}", what);
      return -1;
    }
    a->is_float = 1;
    return 0;
  }
  return to_dim(L, idx, g, &a->i, what, err);
}

static int list_len(lua_State *L, int idx, const char *what, char *err) {
  if (!lua_istable(L, idx)) {
    em_fail(err, EM_EINPUT, "%s: expected a list, got %s", what, luaL_typename(L, idx));
    return -1;
  }
  return (int)lua_objlen(L, idx);
}

/* Converts the Lua value at idx into argument a of kind spec->kind. */
static int to_arg(lua_State *L, int idx, em_graph *g, const em_argspec *sp, em_arg *a, char *err) {
  char what[64];
  snprintf(what, sizeof what, "argument '%s'", sp->name);
  memset(a, 0, sizeof *a);
  if (is_null(L, idx)) {
    int optional = sp->kind == EM_ARG_TOPT || sp->kind == EM_ARG_INTOPT || sp->kind == EM_ARG_INTLISTOPT ||
                   sp->kind == EM_ARG_FLOATOPT || sp->kind == EM_ARG_DTYPEOPT;
    if (!optional) {
      em_fail(err, EM_EINPUT, "%s (%s) cannot be null", what, em_argkind_name(sp->kind));
      return -1;
    }
    return 0;
  }
  a->present = 1;
  switch (sp->kind) {
  case EM_ARG_T:
  case EM_ARG_TOPT: return to_tensor(L, idx, g, &a->tensor, what, err);
  case EM_ARG_TS:
    if (lua_type(L, idx) == LUA_TSTRING) {
      a->is_tensor = 1;
      return to_tensor(L, idx, g, &a->tensor, what, err);
    }
    if (lua_type(L, idx) != LUA_TNUMBER && !lua_istable(L, idx)) {
      em_fail(err, EM_EINPUT, "%s: expected a value name or a number, got %s", what, luaL_typename(L, idx));
      return -1;
    }
    return to_scalar(L, idx, g, a, what, err);
  case EM_ARG_TLIST: {
    int n = list_len(L, idx, what, err);
    if (n < 0) return -1;
    a->n = n;
    a->tlist = em_alloc(sizeof(int) * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++) {
      lua_rawgeti(L, idx, i + 1);
      int rc = to_tensor(L, lua_gettop(L), g, &a->tlist[i], what, err);
      lua_pop(L, 1);
      if (rc) return -1;
    }
    return 0;
  }
  case EM_ARG_INT:
  case EM_ARG_INTOPT: return to_dim(L, idx, g, &a->i, what, err);
  case EM_ARG_INTLIST:
  case EM_ARG_INTLISTOPT: {
    int n = list_len(L, idx, what, err);
    if (n < 0) return -1;
    a->n = n;
    a->ilist = em_alloc(sizeof(em_dim) * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++) {
      lua_rawgeti(L, idx, i + 1);
      int rc = to_dim(L, lua_gettop(L), g, &a->ilist[i], what, err);
      lua_pop(L, 1);
      if (rc) return -1;
    }
    return 0;
  }
  case EM_ARG_FLOAT:
  case EM_ARG_FLOATOPT:
    if (lua_type(L, idx) == LUA_TNUMBER) {
      a->f = lua_tonumber(L, idx);
      return 0;
    }
    if (lua_istable(L, idx)) {
      em_arg s;
      memset(&s, 0, sizeof s);
      if (to_scalar(L, idx, g, &s, what, err)) return -1;
      a->f = s.f;
      return 0;
    }
    em_fail(err, EM_EINPUT, "%s: expected a number, got %s", what, luaL_typename(L, idx));
    return -1;
  case EM_ARG_BOOL:
    if (!lua_isboolean(L, idx)) {
      em_fail(err, EM_EINPUT, "%s: expected true or false, got %s", what, luaL_typename(L, idx));
      return -1;
    }
    a->b = lua_toboolean(L, idx);
    return 0;
  case EM_ARG_SCALAR: return to_scalar(L, idx, g, a, what, err);
  case EM_ARG_DTYPEOPT: return to_dtype(L, idx, &a->dtype, what, err);
  }
  return -1;
}

static void push_scalar(lua_State *L, const em_graph *g, const em_arg *a) {
  if (!a->is_float) {
    push_dim(L, g, &a->i);
  } else if (a->f == floor(a->f) && isfinite(a->f)) {
    lua_createtable(L, 0, 1);
    lua_pushnumber(L, a->f);
    lua_setfield(L, -2, "float");
  } else {
    lua_pushnumber(L, a->f);
  }
}

static void push_null(lua_State *L) { lua_pushlightuserdata(L, NULL); }

static void push_arg(lua_State *L, const em_graph *g, const em_argspec *sp, const em_arg *a) {
  if (!a->present) {
    push_null(L);
    return;
  }
  switch (sp->kind) {
  case EM_ARG_T:
  case EM_ARG_TOPT: lua_pushstring(L, g->values.v[a->tensor].name); break;
  case EM_ARG_TS:
    if (a->is_tensor) lua_pushstring(L, g->values.v[a->tensor].name);
    else push_scalar(L, g, a);
    break;
  case EM_ARG_TLIST:
    lua_createtable(L, a->n, 0);
    for (int i = 0; i < a->n; i++) {
      lua_pushstring(L, g->values.v[a->tlist[i]].name);
      lua_rawseti(L, -2, i + 1);
    }
    break;
  case EM_ARG_INT:
  case EM_ARG_INTOPT: push_dim(L, g, &a->i); break;
  case EM_ARG_INTLIST:
  case EM_ARG_INTLISTOPT:
    lua_createtable(L, a->n, 0);
    for (int i = 0; i < a->n; i++) {
      push_dim(L, g, &a->ilist[i]);
      lua_rawseti(L, -2, i + 1);
    }
    break;
  case EM_ARG_FLOAT:
  case EM_ARG_FLOATOPT: lua_pushnumber(L, a->f); break;
  case EM_ARG_BOOL: lua_pushboolean(L, a->b); break;
  case EM_ARG_SCALAR: push_scalar(L, g, a); break;
  case EM_ARG_DTYPEOPT: lua_pushstring(L, em_dtype_name((em_dtype)a->dtype)); break;
  }
}

/* ir.new([name]) -> graph */
static int l_new(lua_State *L) {
  const char *name = luaL_optstring(L, 1, "graph");
  char err[EM_ERR_MAX];
  if (!lua_isnoneornil(L, 1) && em_lua_checktext(L, 1, "graph name", err)) return em_lua_fail(L, err);
  em_lua_push(L, GRAPH_T, em_graph_new(name));
  return 1;
}

/* Field k of the table at t as an integer (def when absent); -1 with err when it is not one. */
static int opt_int(lua_State *L, int t, const char *k, int64_t def, int64_t *out, const char *sym, char *err) {
  lua_getfield(L, t, k);
  *out = def;
  int rc = 0;
  if (!lua_isnil(L, -1) && em_lua_toint(L, -1, out)) {
    em_fail(err, EM_EINPUT, "symbol '%s': \"%s\" must be an integer within ±2^53, got %s", sym, k,
            lua_type(L, -1) == LUA_TNUMBER ? lua_tostring(L, -1) : luaL_typename(L, -1));
    rc = -1;
  }
  lua_pop(L, 1);
  return rc;
}

/* g:symbol(name, {hint=, min=, max=}) -> index (0-based) | nil, msg */
static int g_symbol(lua_State *L) {
  em_graph *g = em_lua_checkgraph(L, 1);
  const char *name = luaL_checkstring(L, 2);
  int64_t hint = -1, mn = 1, mx = 2147483647;
  char err[EM_ERR_MAX];
  if (em_lua_checktext(L, 2, "symbol name", err)) return em_lua_fail(L, err);
  if (lua_istable(L, 3) && (opt_int(L, 3, "hint", -1, &hint, name, err) || opt_int(L, 3, "min", 1, &mn, name, err) ||
                            opt_int(L, 3, "max", 2147483647, &mx, name, err)))
    return em_lua_fail(L, err);
  int i = em_symtab_add(&g->syms, name, hint, mn, mx, err);
  if (i < 0) return em_lua_fail(L, err);
  lua_pushinteger(L, i);
  return 1;
}

/* g:input(name, dtype, shape [, {kind="activation"|"param", weight=}]) -> name | nil, msg */
static int g_input(lua_State *L) {
  em_graph *g = em_lua_checkgraph(L, 1);
  const char *name = luaL_checkstring(L, 2);
  char err[EM_ERR_MAX], e2[EM_ERR_MAX];
  int dt;
  em_shape s;
  if (em_lua_checktext(L, 2, "input name", err)) return em_lua_fail(L, err);
  if (to_dtype(L, 3, &dt, "dtype", e2) || to_shape(L, 4, g, &s, e2)) {
    snprintf(err, sizeof err, "input '%s': %s", name, e2);
    return em_lua_fail(L, err);
  }
  em_vkind kind = EM_V_INPUT;
  const char *weight = NULL;
  if (lua_istable(L, 5)) {
    lua_getfield(L, 5, "kind");
    const char *k = lua_tostring(L, -1);
    if (k && !strcmp(k, "param")) kind = EM_V_PARAM;
    else if (k && strcmp(k, "activation")) {
      snprintf(err, sizeof err, "input '%s': kind must be 'activation' or 'param', got '%s'", name, k);
      lua_pop(L, 1);
      return em_lua_fail(L, err);
    }
    lua_pop(L, 1);
    lua_getfield(L, 5, "weight");
    weight = lua_tostring(L, -1); /* kept alive by the options table */
    int bad = weight && em_lua_checktext(L, -1, "weight name", e2);
    lua_pop(L, 1);
    if (bad) {
      snprintf(err, sizeof err, "input '%s': %s", name, e2);
      return em_lua_fail(L, err);
    }
  }
  if (em_graph_add_input(g, name, kind, weight, (em_dtype)dt, &s, err) < 0) return em_lua_fail(L, err);
  lua_pushstring(L, name);
  return 1;
}

/* Checks the dtype and shape that the options table at opt declares (graph JSON's "dtype" and "shape", each
 * optional) against inference, before the node is added; 0, or -1 with err "node 'x' (op): \"shape\" says …
 * but inference gives …". Inference runs again when the node is added: it is deterministic, and a derived
 * symbol it creates is found again, not created twice. */
static int check_declared(lua_State *L, int opt, em_graph *g, em_op op, const em_arg *args, const char *name,
                          const char *opname, char *err) {
  lua_getfield(L, opt, "dtype");
  lua_getfield(L, opt, "shape");
  int rc = 0;
  if (lua_isnil(L, -1) && lua_isnil(L, -2)) goto done;
  em_dtype dt;
  em_shape sh;
  char e2[EM_ERR_MAX], b1[512], b2[512];
  if (em_infer(g, op, args, &dt, &sh, e2) != EM_OK) goto done; /* em_graph_add_node reports it */
  if (!lua_isnil(L, -2)) {
    const char *want = lua_tostring(L, -2);
    if (!want || em_dtype_parse(want) != (int)dt) {
      em_fail(err, EM_EINPUT, "node '%s' (%s): \"dtype\" says %s but inference gives %s", name ? name : "(new)",
              opname, want ? want : luaL_typename(L, -2), em_dtype_name(dt));
      rc = -1;
      goto done;
    }
  }
  if (!lua_isnil(L, -1)) {
    em_shape decl;
    int same = to_shape(L, lua_gettop(L), g, &decl, e2) == 0 && em_shape_eq(&decl, &sh);
    if (!same) {
      /* the declared shape as written when it does not parse, so the message shows what the file says */
      if (to_shape(L, lua_gettop(L), g, &decl, e2) == 0) em_shape_format(&g->syms, &decl, b1, sizeof b1);
      else snprintf(b1, sizeof b1, "an unreadable shape (%s)", e2);
      em_fail(err, EM_EINPUT, "node '%s' (%s): \"shape\" says %s but inference gives %s", name ? name : "(new)",
              opname, b1, em_shape_format(&g->syms, &sh, b2, sizeof b2));
      rc = -1;
    }
  }
done:
  lua_pop(L, 2);
  return rc;
}

/* g:node(op, args [, {name=, module=, op=, dtype=, shape=}]) -> value name | nil, msg
 * dtype and shape, when given, are what the caller expects inference to give; a difference is an error and
 * the node is not added. */
static int g_node(lua_State *L) {
  em_graph *g = em_lua_checkgraph(L, 1);
  const char *opname = luaL_checkstring(L, 2);
  luaL_checktype(L, 3, LUA_TTABLE);
  const char *name = NULL, *mod = NULL, *srcop = NULL;
  char err[EM_ERR_MAX], e2[EM_ERR_MAX];
  if (lua_istable(L, 4)) {
    static const char *const keys[] = {"name", "module", "op"}, *const whats[] = {"node name", "node module", "node source op"};
    const char **dst[] = {&name, &mod, &srcop};
    for (int k = 0; k < 3; k++) {
      lua_getfield(L, 4, keys[k]);
      *dst[k] = lua_tostring(L, -1); /* strings stay alive in the options table */
      int bad = *dst[k] && em_lua_checktext(L, -1, whats[k], err);
      lua_pop(L, 1);
      if (bad) return em_lua_fail(L, err);
    }
  }
  char label[96];
  snprintf(label, sizeof label, "node '%s'", name ? name : "(new)");
  int op = em_op_find(opname);
  if (op < 0) {
    snprintf(err, sizeof err, "%s: unknown op '%s' (see src/ops.h for the vocabulary)", label, opname);
    return em_lua_fail(L, err);
  }
  const em_opspec *sp = em_op_spec((em_op)op);
  /* reject argument names the schema does not have */
  lua_pushnil(L);
  while (lua_next(L, 3)) {
    lua_pop(L, 1);
    const char *k = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    if (!k || em_op_argindex((em_op)op, k) < 0) {
      char names[256] = "";
      for (int i = 0; i < sp->nargs; i++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", sp->args[i].name);
      snprintf(err, sizeof err, "%s (%s): unknown argument '%s' (takes %s)", label, opname, k ? k : "?", names);
      lua_pop(L, 1);
      return em_lua_fail(L, err);
    }
  }
  em_arg args[EM_MAX_ARGS];
  memset(args, 0, sizeof args);
  for (int i = 0; i < sp->nargs; i++) {
    lua_getfield(L, 3, sp->args[i].name);
    int rc = 0;
    if (lua_isnil(L, -1)) {
      if (em_arg_set_default(&sp->args[i], &args[i])) {
        int optional = sp->args[i].kind == EM_ARG_TOPT || sp->args[i].kind == EM_ARG_INTOPT ||
                       sp->args[i].kind == EM_ARG_INTLISTOPT || sp->args[i].kind == EM_ARG_FLOATOPT ||
                       sp->args[i].kind == EM_ARG_DTYPEOPT;
        if (!optional) {
          em_fail(e2, EM_EINPUT, "argument '%s' is missing", sp->args[i].name);
          rc = -1;
        }
      }
    } else {
      rc = to_arg(L, lua_gettop(L), g, &sp->args[i], &args[i], e2);
    }
    lua_pop(L, 1);
    if (rc) {
      em_args_free(args, EM_MAX_ARGS);
      snprintf(err, sizeof err, "%s (%s): %s", label, opname, e2);
      return em_lua_fail(L, err);
    }
  }
  if (lua_istable(L, 4) && check_declared(L, 4, g, (em_op)op, args, name, opname, err)) {
    em_args_free(args, EM_MAX_ARGS);
    return em_lua_fail(L, err);
  }
  int v = em_graph_add_node(g, (em_op)op, args, name, mod, srcop, err);
  if (v < 0) return em_lua_fail(L, err);
  lua_pushstring(L, g->values.v[v].name);
  return 1;
}

/* g:output(name) -> true | nil, msg */
static int g_output(lua_State *L) {
  em_graph *g = em_lua_checkgraph(L, 1);
  const char *name = luaL_checkstring(L, 2);
  char err[EM_ERR_MAX];
  if (em_lua_checktext(L, 2, "output name", err)) return em_lua_fail(L, err);
  int v = em_graph_find(g, name);
  if (v < 0) {
    snprintf(err, sizeof err, "output '%s' is not a value of the graph", name);
    return em_lua_fail(L, err);
  }
  em_graph_add_output(g, v, NULL);
  lua_pushboolean(L, 1);
  return 1;
}

static void push_value(lua_State *L, const em_graph *g, int id) {
  const em_value *v = &g->values.v[id];
  lua_createtable(L, 0, 6);
  lua_pushstring(L, v->name);
  lua_setfield(L, -2, "name");
  lua_pushstring(L, v->kind == EM_V_INPUT ? "activation" : v->kind == EM_V_PARAM ? "param" : "node");
  lua_setfield(L, -2, "kind");
  lua_pushstring(L, em_dtype_name(v->dtype));
  lua_setfield(L, -2, "dtype");
  push_shape(L, g, &v->shape);
  lua_setfield(L, -2, "shape");
  if (v->weight) {
    lua_pushstring(L, v->weight);
    lua_setfield(L, -2, "weight");
  }
}

/* g:inputs() -> list of {name, kind, weight, dtype, shape} */
static int g_inputs(lua_State *L) {
  em_graph *g = em_lua_checkgraph(L, 1);
  lua_createtable(L, g->inputs.n, 0);
  for (int i = 0; i < g->inputs.n; i++) {
    push_value(L, g, g->inputs.v[i]);
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

/* g:value(name) -> {name, kind, dtype, shape, weight} | nil, msg */
static int g_value(lua_State *L) {
  em_graph *g = em_lua_checkgraph(L, 1);
  int v = em_graph_find(g, luaL_checkstring(L, 2));
  if (v < 0) return em_lua_fail(L, "no such value");
  push_value(L, g, v);
  return 1;
}

/* g:nodes() -> list of {name, op, args = {{name, value}, …} (non-default, schema order), dtype, shape,
 * module, src_op}; JSON null is a NULL light userdata (cjson.null). */
static int g_nodes(lua_State *L) {
  em_graph *g = em_lua_checkgraph(L, 1);
  lua_createtable(L, g->nodes.n, 0);
  for (int i = 0; i < g->nodes.n; i++) {
    const em_node *nd = &g->nodes.v[i];
    const em_opspec *sp = em_op_spec(nd->op);
    push_value(L, g, nd->out);
    lua_pushstring(L, sp->aten);
    lua_setfield(L, -2, "op");
    lua_newtable(L);
    int k = 0;
    for (int a = 0; a < sp->nargs; a++) {
      if (em_arg_is_default(&sp->args[a], &nd->args[a])) continue;
      lua_createtable(L, 2, 0);
      lua_pushstring(L, sp->args[a].name);
      lua_rawseti(L, -2, 1);
      push_arg(L, g, &sp->args[a], &nd->args[a]);
      lua_rawseti(L, -2, 2);
      lua_rawseti(L, -2, ++k);
    }
    lua_setfield(L, -2, "args");
    if (nd->src_module) {
      lua_pushstring(L, nd->src_module);
      lua_setfield(L, -2, "module");
    }
    if (nd->src_op) {
      lua_pushstring(L, nd->src_op);
      lua_setfield(L, -2, "src_op");
    }
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

/* g:outputs() -> list of names */
static int g_outputs(lua_State *L) {
  em_graph *g = em_lua_checkgraph(L, 1);
  lua_createtable(L, g->outputs.n, 0);
  for (int i = 0; i < g->outputs.n; i++) {
    lua_pushstring(L, g->values.v[g->outputs.v[i]].name);
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

/* g:symbols() -> list of {name, hint, min, max, derived} (hint nil when none) */
static int g_symbols(lua_State *L) {
  em_graph *g = em_lua_checkgraph(L, 1);
  lua_createtable(L, g->syms.n, 0);
  for (int i = 0; i < g->syms.n; i++) {
    const em_sym *s = &g->syms.s[i];
    lua_createtable(L, 0, 5);
    lua_pushstring(L, s->name);
    lua_setfield(L, -2, "name");
    if (s->hint >= 0) {
      lua_pushnumber(L, (lua_Number)s->hint);
      lua_setfield(L, -2, "hint");
    }
    lua_pushnumber(L, (lua_Number)s->min);
    lua_setfield(L, -2, "min");
    lua_pushnumber(L, (lua_Number)s->max);
    lua_setfield(L, -2, "max");
    lua_pushboolean(L, s->derived);
    lua_setfield(L, -2, "derived");
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

/* g:hash() -> 16 hex digits */
static int g_hash(lua_State *L) {
  em_graph *g = em_lua_checkgraph(L, 1);
  char buf[17];
  snprintf(buf, sizeof buf, "%016llx", (unsigned long long)em_graph_hash(g));
  lua_pushstring(L, buf);
  return 1;
}

/* g:name() -> string; g:counts() -> {nodes, values, inputs, outputs, symbols} */
static int g_name(lua_State *L) {
  lua_pushstring(L, em_lua_checkgraph(L, 1)->name);
  return 1;
}

static int g_counts(lua_State *L) {
  em_graph *g = em_lua_checkgraph(L, 1);
  lua_createtable(L, 0, 5);
  lua_pushinteger(L, g->nodes.n);
  lua_setfield(L, -2, "nodes");
  lua_pushinteger(L, g->values.n);
  lua_setfield(L, -2, "values");
  lua_pushinteger(L, g->inputs.n);
  lua_setfield(L, -2, "inputs");
  lua_pushinteger(L, g->outputs.n);
  lua_setfield(L, -2, "outputs");
  lua_pushinteger(L, g->syms.n);
  lua_setfield(L, -2, "symbols");
  return 1;
}

/* g:bind({sym = n, …}) -> {sym = n, …} with hints filled in | nil, msg */
int em_lua_binding(lua_State *L, int idx, const em_graph *g, int64_t *given, char *err) {
  for (int i = 0; i < EM_MAX_SYMS; i++) given[i] = EM_SYM_UNBOUND;
  if (lua_isnoneornil(L, idx)) return 0;
  if (!lua_istable(L, idx)) {
    em_fail(err, EM_EINPUT, "a binding must be a table {symbol = integer}, got %s", luaL_typename(L, idx));
    return -1;
  }
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "?";
    int i = em_symtab_find(&g->syms, k);
    if (i < 0 || g->syms.s[i].derived) {
      em_fail(err, EM_EINPUT, "graph '%s' has no symbol '%s'", g->name, k);
      lua_pop(L, 2);
      return -1;
    }
    if (em_lua_toint(L, -1, &given[i])) {
      em_fail(err, EM_EINPUT, "symbol '%s' = %s is not an integer within ±2^53: give %lld <= %s <= %lld", k,
              lua_type(L, -1) == LUA_TNUMBER || lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1)
                                                                                : luaL_typename(L, -1),
              (long long)g->syms.s[i].min, k, (long long)g->syms.s[i].max);
      lua_pop(L, 2);
      return -1;
    }
    lua_pop(L, 1);
  }
  return 0;
}

static int g_bind(lua_State *L) {
  em_graph *g = em_lua_checkgraph(L, 1);
  int64_t given[EM_MAX_SYMS], vals[EM_MAX_SYMS];
  char err[EM_ERR_MAX];
  if (em_lua_binding(L, 2, g, given, err) || em_ref_bind(g, given, vals, err)) return em_lua_fail(L, err);
  lua_newtable(L);
  for (int i = 0; i < g->syms.n; i++) {
    if (g->syms.s[i].derived) continue;
    lua_pushnumber(L, (lua_Number)vals[i]);
    lua_setfield(L, -2, g->syms.s[i].name);
  }
  return 1;
}

/* g:eval's evaluation; derived symbols the expression adds stay in g (g_eval takes them back). */
static int g_eval_in(lua_State *L, em_graph *g, em_dim *d, char *err) {
  if (to_dim(L, 2, g, d, "dim", err)) return em_lua_fail(L, err);
  int64_t given[EM_MAX_SYMS], vals[EM_MAX_SYMS], v;
  for (int i = 0; i < EM_MAX_SYMS; i++) given[i] = EM_SYM_UNBOUND;
  if (lua_istable(L, 3))
    for (int i = 0; i < g->syms.n; i++) {
      if (g->syms.s[i].derived) continue; /* a bind table may carry them; they are recomputed */
      lua_getfield(L, 3, g->syms.s[i].name);
      int bad = !lua_isnil(L, -1) && em_lua_toint(L, -1, &given[i]);
      lua_pop(L, 1);
      if (bad) {
        snprintf(err, EM_ERR_MAX, "symbol '%s': the value must be an integer within ±2^53", g->syms.s[i].name);
        return em_lua_fail(L, err);
      }
    }
  if (em_ref_bind(g, given, vals, err)) return em_lua_fail(L, err);
  if (em_dim_eval_checked(&g->syms, d, vals, &v)) return em_lua_fail(L, "dim: beyond 64 bits at this binding");
  lua_pushnumber(L, (lua_Number)v);
  return 1;
}

/* g:eval(dim, {sym = n}) -> integer | nil, msg (dim: number or expression string). The graph is left as it was: a
 * cdiv the expression names becomes a derived symbol only for this evaluation (the emitter declares every derived
 * symbol of the graph, so one kept would change the source of every variant emitted afterwards — a launch's grid
 * evaluated in the bench worker made its later builds miss the cubins the tuner had compiled ahead). */
static int g_eval(lua_State *L) {
  em_graph *g = em_lua_checkgraph(L, 1);
  em_dim d;
  char err[EM_ERR_MAX];
  int nsyms = g->syms.n;
  int rc = g_eval_in(L, g, &d, err);
  g->syms.n = nsyms;
  return rc;
}

/* g:subgraph({node names}, {output names} [, name]) -> graph | nil, msg — a self-contained reproducer */
static int g_subgraph(lua_State *L) {
  em_graph *g = em_lua_checkgraph(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  luaL_checktype(L, 3, LUA_TTABLE);
  const char *name = luaL_optstring(L, 4, g->name);
  int n = (int)lua_objlen(L, 2), no = (int)lua_objlen(L, 3);
  int *nodes = em_alloc(sizeof(int) * (size_t)(n + 1)), *outs = em_alloc(sizeof(int) * (size_t)(no + 1));
  char err[EM_ERR_MAX];
  for (int i = 0; i < n + no; i++) {
    lua_rawgeti(L, i < n ? 2 : 3, i < n ? i + 1 : i - n + 1);
    const char *vn = lua_tostring(L, -1);
    int v = vn ? em_graph_find(g, vn) : -1;
    lua_pop(L, 1);
    if (v < 0 || (i < n && g->values.v[v].kind != EM_V_NODE)) {
      snprintf(err, sizeof err, "subgraph: '%s' is not a node of the graph", vn ? vn : "?");
      free(nodes);
      free(outs);
      return em_lua_fail(L, err);
    }
    if (i < n) nodes[i] = g->values.v[v].node;
    else outs[i - n] = v;
  }
  em_graph *sub = em_graph_subgraph(g, nodes, n, outs, no, name, err);
  free(nodes);
  free(outs);
  if (!sub) return em_lua_fail(L, err);
  for (int i = 0; i < g->meta.n; i++) em_graph_set_meta(sub, g->meta.v[i].key, g->meta.v[i].val);
  em_lua_push(L, GRAPH_T, sub);
  return 1;
}

/* g:meta() -> {key = value} ; g:meta(key) -> value | nil ; g:meta(key, value|nil) sets or removes */
static int g_meta(lua_State *L) {
  em_graph *g = em_lua_checkgraph(L, 1);
  if (lua_gettop(L) == 1) {
    lua_createtable(L, 0, g->meta.n);
    for (int i = 0; i < g->meta.n; i++) {
      lua_pushstring(L, g->meta.v[i].val);
      lua_setfield(L, -2, g->meta.v[i].key);
    }
    return 1;
  }
  const char *key = luaL_checkstring(L, 2);
  if (lua_gettop(L) == 2) {
    const char *v = em_graph_get_meta(g, key);
    if (v) lua_pushstring(L, v);
    else lua_pushnil(L);
    return 1;
  }
  const char *val = lua_isnil(L, 3) ? NULL : luaL_checkstring(L, 3);
  char err[EM_ERR_MAX];
  if (em_lua_checktext(L, 2, "meta key", err) || (val && em_lua_checktext(L, 3, "meta value", err)))
    return em_lua_fail(L, err);
  em_graph_set_meta(g, key, val);
  lua_pushboolean(L, 1);
  return 1;
}

/* g:dim(x) -> the canonical form of a dim (number or expression string) | nil, msg */
static int g_dim(lua_State *L) {
  em_graph *g = em_lua_checkgraph(L, 1);
  em_dim d;
  char err[EM_ERR_MAX];
  if (to_dim(L, 2, g, &d, "dim", err)) return em_lua_fail(L, err);
  push_dim(L, g, &d);
  return 1;
}

/* ir.emit(graph, {kind=, anchor=name|nil, knobs={K=V}, name=}) -> source, launch | nil, msg
 * (a knob that is not in the knob table, or a value it does not take, is the message)
 * launch = {grid = {text, text, text}, block = {x, y, z}, smem = bytes, syms = {names of symbol args},
 *           tmaps = {{input = 1-based input position | output = 1-based output position, inner = row elements
 *                     (only where not the tensor's last dim), box = {inner, rows}, own = true where the map has the
 *                     tensor's own dims (box[2] rows of the second innermost, one of each outer dim)}, ...},
 *           scratch_per_tile = bytes per block (SPLIT_K > 1, STAMP=1; 0 otherwise),
 *           persistent = 0, or the cluster size (1, 2) when grid[1] counts tiles and the launcher caps it at the
 *           SM count (a multiple of the cluster size), sm_blocks = a persistent grid's CTAs an SM (the cap's
 *           multiplier, 1 but for MINB=2 persistent attention), group = the CTAs of a persistent grid in groups
 *           of this many beyond the cluster (SPLIT_L2=1: a tile's K parts; the cap a multiple of it), 1 for none} */
static int l_emit(lua_State *L) {
  em_graph *g = em_lua_checkgraph(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  em_tile t;
  memset(&t, 0, sizeof t);
  t.g = g;
  t.anchor = -1;
  lua_getfield(L, 2, "kind");
  int k = em_kkind_parse(lua_tostring(L, -1));
  lua_pop(L, 1);
  if (k < 0) return em_lua_fail(L, "emit: unknown kernel kind");
  t.kind = (em_kkind)k;
  lua_getfield(L, 2, "anchor");
  if (lua_isstring(L, -1)) t.anchor = em_graph_find(g, lua_tostring(L, -1));
  lua_pop(L, 1);
  lua_getfield(L, 2, "name");
  char name[128];
  snprintf(name, sizeof name, "%s", lua_isstring(L, -1) ? lua_tostring(L, -1) : "kernel");
  lua_pop(L, 1);
  t.name = name;
  char err[EM_ERR_MAX];
  lua_getfield(L, 2, "knobs");
  if (lua_istable(L, -1)) {
    lua_pushnil(L);
    while (lua_next(L, -2)) {
      const char *key = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
      lua_Number v = lua_isnumber(L, -1) ? lua_tonumber(L, -1) : 0.5;
      if (!key || !(v >= -9e18 && v <= 9e18) || v != (lua_Number)(int64_t)v) {
        snprintf(err, sizeof err, "emit %s: knob %s needs an integer value", name, key ? key : "(not a name)");
        return em_lua_fail(L, err);
      }
      char kerr[EM_ERR_MAX];
      if (em_knob_set(&t.knobs, key, (int64_t)v, kerr)) {
        snprintf(err, sizeof err, "emit %s: %s", name, kerr);
        return em_lua_fail(L, err);
      }
      lua_pop(L, 1);
    }
  }
  lua_pop(L, 1);
  char *src = NULL;
  em_launch la;
  if (em_emit(&t, &src, &la, err)) return em_lua_fail(L, err);
  lua_pushstring(L, src);
  free(src);
  lua_createtable(L, 0, 4);
  lua_createtable(L, 3, 0);
  for (int i = 0; i < 3; i++) {
    lua_pushstring(L, la.grid[i]);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "grid");
  lua_createtable(L, 3, 0);
  for (int i = 0; i < 3; i++) {
    lua_pushinteger(L, la.block[i]);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "block");
  lua_pushnumber(L, (lua_Number)la.smem);
  lua_setfield(L, -2, "smem");
  lua_createtable(L, la.nsyms, 0);
  for (int i = 0; i < la.nsyms; i++) {
    lua_pushstring(L, g->syms.s[la.syms[i]].name);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "syms");
  lua_pushnumber(L, (lua_Number)la.scratch_per_tile);
  lua_setfield(L, -2, "scratch_per_tile");
  lua_pushinteger(L, la.persistent);
  lua_setfield(L, -2, "persistent");
  lua_pushinteger(L, la.sm_blocks > 1 ? la.sm_blocks : 1);
  lua_setfield(L, -2, "sm_blocks");
  lua_pushinteger(L, la.group > 1 ? la.group : 1);
  lua_setfield(L, -2, "group");
  lua_pushboolean(L, la.pdl);
  lua_setfield(L, -2, "pdl");
  lua_createtable(L, la.ntmaps, 0);
  for (int i = 0; i < la.ntmaps; i++) {
    lua_createtable(L, 0, 2);
    lua_pushinteger(L, la.tmaps[i].input + 1);
    lua_setfield(L, -2, la.tmaps[i].output ? "output" : "input");
    if (la.tmaps[i].inner > 0) {
      lua_pushnumber(L, (lua_Number)la.tmaps[i].inner);
      lua_setfield(L, -2, "inner");
    }
    if (la.tmaps[i].own) {
      lua_pushboolean(L, 1);
      lua_setfield(L, -2, "own");
    }
    lua_createtable(L, 2, 0);
    lua_pushinteger(L, la.tmaps[i].box[0]);
    lua_rawseti(L, -2, 1);
    lua_pushinteger(L, la.tmaps[i].box[1]);
    lua_rawseti(L, -2, 2);
    lua_setfield(L, -2, "box");
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "tmaps");
  return 2;
}

/* ir.ctr_facts(graph, anchor) -> {dual, siblings, sibling_widths, stage, stage_step, epilogue_reductions,
 * prologue_reductions, K, N, tma_fused, tma_store, tma_heads} | nil, msg: the legality table's facts of the
 * contraction over value anchor (a name) as the emitter resolves them (em_emit_ctr_facts; stage, K, N: 0 where
 * there is none or the dim is symbolic; sibling_widths: the widths of the linears on the anchor's operand, none for
 * a matmul). The message says why the emitter builds no contraction there. */
static int l_ctr_facts(lua_State *L) {
  em_graph *g = em_lua_checkgraph(L, 1);
  const char *name = luaL_checkstring(L, 2);
  em_ctr_facts f;
  char err[EM_ERR_MAX];
  if (em_emit_ctr_facts(g, em_graph_find(g, name), &f, err)) return em_lua_fail(L, err);
  static const char *const flag[] = {"dual", "tma_fused", "tma_store", "tma_heads"};
  const int flags[] = {f.dual, f.tma_fused, f.tma_store, f.tma_heads};
  static const char *const num[] = {"siblings", "stage", "stage_step", "epilogue_reductions", "prologue_reductions",
                                    "K", "N"};
  const int64_t nums[] = {f.siblings, f.stage, f.stage_step, f.head_reductions, f.prologue_reductions, f.K, f.N};
  lua_createtable(L, 0, 12);
  for (int i = 0; i < (int)(sizeof flag / sizeof flag[0]); i++) {
    lua_pushboolean(L, flags[i]);
    lua_setfield(L, -2, flag[i]);
  }
  for (int i = 0; i < (int)(sizeof num / sizeof num[0]); i++) {
    lua_pushnumber(L, (lua_Number)nums[i]);
    lua_setfield(L, -2, num[i]);
  }
  lua_createtable(L, f.nwidths, 0);
  for (int i = 0; i < f.nwidths; i++) {
    lua_pushnumber(L, (lua_Number)f.widths[i]);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "sibling_widths");
  return 1;
}

/* ir.ops() -> list of {name, args = {{name, kind, default}, …}} — the vocabulary */
static int l_ops(lua_State *L) {
  lua_createtable(L, EM_NOPS, 0);
  for (int op = 0; op < EM_NOPS; op++) {
    const em_opspec *sp = em_op_spec((em_op)op);
    lua_createtable(L, 0, 3);
    lua_pushstring(L, sp->aten);
    lua_setfield(L, -2, "name");
    lua_pushstring(L, sp->schema);
    lua_setfield(L, -2, "schema");
    lua_createtable(L, sp->nargs, 0);
    for (int a = 0; a < sp->nargs; a++) {
      lua_createtable(L, 0, 3);
      lua_pushstring(L, sp->args[a].name);
      lua_setfield(L, -2, "name");
      lua_pushstring(L, em_argkind_name(sp->args[a].kind));
      lua_setfield(L, -2, "kind");
      if (sp->args[a].has_default) {
        lua_pushstring(L, sp->args[a].def);
        lua_setfield(L, -2, "default");
      }
      lua_rawseti(L, -2, a + 1);
    }
    lua_setfield(L, -2, "args");
    lua_rawseti(L, -2, op + 1);
  }
  return 1;
}

int luaopen_emmy_ir(lua_State *L) {
  static const luaL_Reg methods[] = {
      {"symbol", g_symbol}, {"input", g_input},     {"node", g_node},       {"output", g_output},
      {"inputs", g_inputs}, {"value", g_value},     {"nodes", g_nodes},     {"outputs", g_outputs},
      {"symbols", g_symbols}, {"hash", g_hash},     {"name", g_name},       {"counts", g_counts},
      {"bind", g_bind},     {"eval", g_eval},       {"dim", g_dim},         {"meta", g_meta},       {"subgraph", g_subgraph}, {NULL, NULL}};
  em_lua_class(L, GRAPH_T, methods, g_gc, g_tostring);
  static const luaL_Reg fns[] = {{"new", l_new}, {"ops", l_ops}, {"emit", l_emit}, {"ctr_facts", l_ctr_facts},
                                 {NULL, NULL}};
  lua_newtable(L);
  luaL_register(L, NULL, fns);
  push_null(L);
  lua_setfield(L, -2, "null");
  return 1;
}
