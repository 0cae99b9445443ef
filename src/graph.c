/* graph.c — building graphs (inputs, nodes with inference, outputs) and their structural hash. */
#include "graph.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

em_graph *em_graph_new(const char *name) {
  em_graph *g = em_alloc(sizeof *g);
  g->name = em_strdup(name ? name : "graph");
  return g;
}

void em_args_free(em_arg *args, int nargs) {
  for (int i = 0; i < nargs; i++) {
    free(args[i].ilist);
    free(args[i].tlist);
    args[i].ilist = NULL;
    args[i].tlist = NULL;
  }
}

void em_graph_free(em_graph *g) {
  if (!g) return;
  for (int i = 0; i < g->values.n; i++) {
    free(g->values.v[i].name);
    free(g->values.v[i].weight);
  }
  for (int i = 0; i < g->nodes.n; i++) {
    em_args_free(g->nodes.v[i].args, EM_MAX_ARGS);
    free(g->nodes.v[i].src_module);
    free(g->nodes.v[i].src_op);
  }
  for (int i = 0; i < g->meta.n; i++) {
    free(g->meta.v[i].key);
    free(g->meta.v[i].val);
  }
  free(g->meta.v);
  free(g->values.v);
  free(g->nodes.v);
  free(g->inputs.v);
  free(g->outputs.v);
  free(g->name_ix);
  free(g->name);
  free(g);
}

void em_graph_set_meta(em_graph *g, const char *key, const char *val) {
  int i = 0;
  while (i < g->meta.n && strcmp(g->meta.v[i].key, key) < 0) i++;
  if (i < g->meta.n && !strcmp(g->meta.v[i].key, key)) {
    free(g->meta.v[i].val);
    if (val) {
      g->meta.v[i].val = em_strdup(val);
      return;
    }
    free(g->meta.v[i].key);
    memmove(&g->meta.v[i], &g->meta.v[i + 1], sizeof(em_meta) * (size_t)(g->meta.n - i - 1));
    g->meta.n--;
    return;
  }
  if (!val) return;
  em_meta m = {em_strdup(key), em_strdup(val)};
  EM_VEC_PUSH(g->meta, m);
  memmove(&g->meta.v[i + 1], &g->meta.v[i], sizeof(em_meta) * (size_t)(g->meta.n - 1 - i));
  g->meta.v[i] = m;
}

const char *em_graph_get_meta(const em_graph *g, const char *key) {
  for (int i = 0; i < g->meta.n; i++)
    if (!strcmp(g->meta.v[i].key, key)) return g->meta.v[i].val;
  return NULL;
}

static uint64_t name_hash(const char *name) { return em_fnv1a(EM_FNV_SEED, name, strlen(name)); }

int em_graph_find(const em_graph *g, const char *name) {
  if (!g->name_cap) return -1;
  size_t mask = (size_t)g->name_cap - 1;
  for (size_t i = (size_t)name_hash(name) & mask;; i = (i + 1) & mask) {
    int id = g->name_ix[i] - 1;
    if (id < 0) return -1;
    if (!strcmp(g->values.v[id].name, name)) return id;
  }
}

static void ix_put(int *ix, int cap, const em_graph *g, int id) {
  size_t mask = (size_t)cap - 1, i = (size_t)name_hash(g->values.v[id].name) & mask;
  while (ix[i]) i = (i + 1) & mask;
  ix[i] = id + 1;
}

/* Indexes the value just pushed (the last one), doubling the index when it would pass half full. */
static void index_last(em_graph *g) {
  int id = g->values.n - 1;
  if (2 * g->values.n > g->name_cap) {
    int cap = g->name_cap ? 2 * g->name_cap : 64;
    int *ix = em_alloc(sizeof(int) * (size_t)cap);
    for (int v = 0; v < id; v++) ix_put(ix, cap, g, v);
    free(g->name_ix);
    g->name_ix = ix;
    g->name_cap = cap;
  }
  ix_put(g->name_ix, g->name_cap, g, id);
}

static int check_name(em_graph *g, const char *name, char *err) {
  if (!name || !*name) {
    em_fail(err, EM_EINPUT, "a value has an empty name");
    return -1;
  }
  if (em_graph_find(g, name) >= 0) {
    em_fail(err, EM_EINPUT, "value name '%s' is used twice", name);
    return -1;
  }
  return 0;
}

int em_graph_add_input(em_graph *g, const char *name, em_vkind kind, const char *weight, em_dtype dt,
                       const em_shape *shape, char *err) {
  if (check_name(g, name, err)) return -1;
  if (shape->rank < 0 || shape->rank > EM_MAX_RANK) {
    em_fail(err, EM_EINPUT, "input '%s': rank %d is over %d", name, shape->rank, EM_MAX_RANK);
    return -1;
  }
  char e2[EM_ERR_MAX];
  if (em_shape_check(&g->syms, shape, dt, e2)) {
    em_fail(err, EM_EINPUT, "input '%s': %s", name, e2);
    return -1;
  }
  em_value v;
  memset(&v, 0, sizeof v);
  v.name = em_strdup(name);
  v.kind = kind;
  v.dtype = dt;
  v.shape = *shape;
  v.weight = em_strdup(kind == EM_V_PARAM ? (weight ? weight : name) : NULL);
  v.node = -1;
  EM_VEC_PUSH(g->values, v);
  index_last(g);
  EM_VEC_PUSH(g->inputs, g->values.n - 1);
  return g->values.n - 1;
}

int em_graph_add_node(em_graph *g, em_op op, em_arg *args, const char *name, const char *src_module,
                      const char *src_op, char *err) {
  char nbuf[32];
  if (!name) {
    snprintf(nbuf, sizeof nbuf, "v%d", g->values.n);
    name = nbuf;
  }
  em_dtype dt;
  em_shape shape;
  char e2[EM_ERR_MAX];
  if (check_name(g, name, err)) goto fail;
  if (em_infer(g, op, args, &dt, &shape, e2) != EM_OK || em_shape_check(&g->syms, &shape, dt, e2) != EM_OK) {
    em_fail(err, EM_EINPUT, "node '%s' (%s): %s", name, em_op_name(op), e2);
    goto fail;
  }
  em_node nd;
  memset(&nd, 0, sizeof nd);
  nd.op = op;
  memcpy(nd.args, args, sizeof nd.args);
  nd.out = g->values.n;
  nd.src_module = em_strdup(src_module);
  nd.src_op = em_strdup(src_op);
  em_value v;
  memset(&v, 0, sizeof v);
  v.name = em_strdup(name);
  v.kind = EM_V_NODE;
  v.dtype = dt;
  v.shape = shape;
  v.node = g->nodes.n;
  EM_VEC_PUSH(g->nodes, nd);
  EM_VEC_PUSH(g->values, v);
  index_last(g);
  return g->values.n - 1;
fail:
  em_args_free(args, EM_MAX_ARGS);
  return -1;
}

em_status em_graph_add_output(em_graph *g, int value, char *err) {
  if (value < 0 || value >= g->values.n) return em_fail(err, EM_EINPUT, "output refers to unknown value %d", value);
  EM_VEC_PUSH(g->outputs, value);
  return EM_OK;
}

/* Canonical position of each value: inputs by declaration order, then node results by node order, so that
 * interleaving input declarations with nodes (as builders do) does not change the hash. Computed once per
 * hash into a table, so hashing is linear in the graph's size. */
static int32_t *canon_ids(const em_graph *g) {
  int32_t *c = em_alloc(sizeof(int32_t) * (size_t)(g->values.n ? g->values.n : 1));
  for (int v = 0; v < g->values.n; v++)
    c[v] = g->values.v[v].kind == EM_V_NODE ? g->inputs.n + g->values.v[v].node : -1;
  for (int i = 0; i < g->inputs.n; i++) c[g->inputs.v[i]] = i;
  return c;
}

static uint64_t hash_ref(uint64_t h, const int32_t *canon, int v) { return em_fnv1a(h, &canon[v], sizeof canon[v]); }

static uint64_t hash_arg(uint64_t h, const int32_t *canon, const em_argspec *sp, const em_arg *a) {
  h = em_fnv1a(h, &a->present, sizeof a->present);
  if (!a->present) return h;
  switch (sp->kind) {
  case EM_ARG_T:
  case EM_ARG_TOPT: h = hash_ref(h, canon, a->tensor); break;
  case EM_ARG_TLIST:
    h = em_fnv1a(h, &a->n, sizeof a->n);
    for (int i = 0; i < a->n; i++) h = hash_ref(h, canon, a->tlist[i]);
    break;
  case EM_ARG_TS:
    h = em_fnv1a(h, &a->is_tensor, sizeof a->is_tensor);
    if (a->is_tensor) {
      h = hash_ref(h, canon, a->tensor);
      break;
    }
    __attribute__((fallthrough)); /* a scalar */
  case EM_ARG_SCALAR:
    h = em_fnv1a(h, &a->is_float, sizeof a->is_float);
    if (a->is_float) h = em_fnv1a(h, &a->f, sizeof a->f);
    else h = em_dim_hash(h, &a->i);
    break;
  case EM_ARG_INT:
  case EM_ARG_INTOPT: h = em_dim_hash(h, &a->i); break;
  case EM_ARG_INTLIST:
  case EM_ARG_INTLISTOPT:
    h = em_fnv1a(h, &a->n, sizeof a->n);
    for (int i = 0; i < a->n; i++) h = em_dim_hash(h, &a->ilist[i]);
    break;
  case EM_ARG_FLOAT:
  case EM_ARG_FLOATOPT: h = em_fnv1a(h, &a->f, sizeof a->f); break;
  case EM_ARG_BOOL: h = em_fnv1a(h, &a->b, sizeof a->b); break;
  case EM_ARG_DTYPEOPT: h = em_fnv1a(h, &a->dtype, sizeof a->dtype); break;
  }
  return h;
}

static uint64_t hash_value_type(uint64_t h, const em_value *v) {
  int k = (int)v->kind, dt = (int)v->dtype;
  h = em_fnv1a(h, &k, sizeof k);
  h = em_fnv1a(h, &dt, sizeof dt);
  h = em_fnv1a(h, &v->shape.rank, sizeof v->shape.rank);
  for (int i = 0; i < v->shape.rank; i++) h = em_dim_hash(h, &v->shape.d[i]);
  return h;
}

/* Values are hashed in canonical order (inputs, then node results); every field is hashed with a fixed
 * width so the hash is the same on every machine of the same endianness (x86-64 and arm64). */
uint64_t em_graph_hash(const em_graph *g) {
  uint64_t h = EM_FNV_SEED;
  int32_t *canon = canon_ids(g);
  int nsyms = g->syms.n;
  h = em_fnv1a(h, &nsyms, sizeof nsyms);
  for (int i = 0; i < g->syms.n; i++) {
    const em_sym *s = &g->syms.s[i];
    h = em_fnv1a(h, &s->derived, sizeof s->derived);
    if (s->derived) {
      h = em_dim_hash(h, &s->num);
      h = em_fnv1a(h, &s->den, sizeof s->den);
    }
  }
  for (int i = 0; i < g->inputs.n; i++) h = hash_value_type(h, &g->values.v[g->inputs.v[i]]);
  for (int i = 0; i < g->nodes.n; i++) h = hash_value_type(h, &g->values.v[g->nodes.v[i].out]);
  for (int i = 0; i < g->nodes.n; i++) {
    const em_node *nd = &g->nodes.v[i];
    int op = (int)nd->op;
    h = em_fnv1a(h, &op, sizeof op);
    const em_opspec *sp = em_op_spec(nd->op);
    for (int a = 0; a < sp->nargs; a++)
      if (!sp->args[a].ext || nd->args[a].present) h = hash_arg(h, canon, &sp->args[a], &nd->args[a]);
  }
  h = em_fnv1a(h, &g->outputs.n, sizeof g->outputs.n);
  for (int i = 0; i < g->outputs.n; i++) h = hash_ref(h, canon, g->outputs.v[i]);
  free(canon);
  return h;
}

char *em_shape_format(const em_symtab *st, const em_shape *s, char *buf, int n) {
  int o = snprintf(buf, (size_t)n, "[");
  for (int i = 0; i < s->rank && o < n; i++) {
    char d[128];
    o += snprintf(buf + o, (size_t)(n - o), "%s%s", i ? ", " : "", em_dim_format(st, &s->d[i], d, sizeof d));
  }
  if (o < n) snprintf(buf + o, (size_t)(n - o), "]");
  return buf;
}

int em_shape_eq(const em_shape *a, const em_shape *b) {
  if (a->rank != b->rank) return 0;
  for (int i = 0; i < a->rank; i++)
    if (!em_dim_eq(&a->d[i], &b->d[i])) return 0;
  return 1;
}

int em_shape_numel(const em_shape *s, em_dim *out) {
  em_dim p = em_dim_const(1);
  for (int i = 0; i < s->rank; i++)
    if (s->d[i].n == 0) { /* a size 0: no elements, however large the others */
      *out = em_dim_const(0);
      return 0;
    }
  for (int i = 0; i < s->rank; i++) {
    int rc = em_dim_mul(&p, &s->d[i], &p);
    if (rc) return rc;
  }
  *out = p;
  return 0;
}

em_status em_shape_check(const em_symtab *st, const em_shape *s, em_dtype dt, char *err) {
  char b[512];
  em_dim n;
  for (int i = 0; i < s->rank; i++) {
    int64_t c;
    if (em_dim_is_const(&s->d[i], &c) && c < 0)
      return em_fail(err, EM_EINPUT, "shape %s has a negative size at dim %d", em_shape_format(st, s, b, sizeof b), i);
  }
  int rc = em_shape_numel(s, &n);
  if (rc == EM_DIM_EOVERFLOW)
    return em_fail(err, EM_EINPUT, "shape %s has more than 2^63-1 elements", em_shape_format(st, s, b, sizeof b));
  if (rc)
    return em_fail(err, EM_EINPUT, "the element count of shape %s has more than %d terms (a simpler symbolic shape)",
                   em_shape_format(st, s, b, sizeof b), EM_MAX_TERMS);
  int64_t c, bytes;
  if (em_dim_is_const(&n, &c) && c > 0 && __builtin_mul_overflow(c, (int64_t)em_dtype_bytes(dt), &bytes))
    return em_fail(err, EM_EINPUT, "shape %s of %s is more than 2^63-1 bytes", em_shape_format(st, s, b, sizeof b),
                   em_dtype_name(dt));
  return EM_OK;
}

/* "seq_len=5, batch=2" (user symbols) into buf. */
static char *fmt_binding(const em_graph *g, const int64_t *vals, char *buf, size_t n) {
  size_t o = 0;
  buf[0] = 0;
  for (int i = 0; i < g->syms.n && o < n; i++)
    if (!g->syms.s[i].derived)
      o += (size_t)snprintf(buf + o, n - o, "%s%s=%lld", o ? ", " : "", g->syms.s[i].name, (long long)vals[i]);
  if (!o) snprintf(buf, n, "no symbols");
  return buf;
}

/* Checks one value's dims, element count and bytes at the binding. */
static int value_fits(const em_graph *g, const em_value *v, const int64_t *vals) {
  int64_t numel = 1, bytes, d[EM_MAX_RANK];
  for (int i = 0; i < v->shape.rank; i++) {
    if (em_dim_eval_checked(&g->syms, &v->shape.d[i], vals, &d[i])) return 0;
    if (d[i] == 0) return 1; /* no elements */
  }
  for (int i = 0; i < v->shape.rank; i++)
    if (d[i] > 0 && __builtin_mul_overflow(numel, d[i], &numel)) return 0;
  return !__builtin_mul_overflow(numel, (int64_t)em_dtype_bytes(v->dtype), &bytes);
}

static int dim_fits(const em_graph *g, const em_dim *d, const int64_t *vals) {
  int64_t x;
  return em_dim_eval_checked(&g->syms, d, vals, &x) == 0;
}

em_status em_graph_check_binding(const em_graph *g, const int64_t *vals, char *err) {
  char bb[256], sb[512];
  for (int v = 0; v < g->values.n; v++) {
    const em_value *x = &g->values.v[v];
    if (!value_fits(g, x, vals))
      return em_fail(err, EM_EINPUT, "at %s, value '%s' %s is more than 2^63-1 bytes: bind smaller sizes",
                     fmt_binding(g, vals, bb, sizeof bb), x->name, em_shape_format(&g->syms, &x->shape, sb, sizeof sb));
  }
  for (int n = 0; n < g->nodes.n; n++) {
    const em_node *nd = &g->nodes.v[n];
    const em_opspec *sp = em_op_spec(nd->op);
    for (int a = 0; a < sp->nargs; a++) {
      const em_arg *x = &nd->args[a];
      if (!x->present) continue;
      int ok = 1;
      switch (sp->args[a].kind) {
      case EM_ARG_INT:
      case EM_ARG_INTOPT: ok = dim_fits(g, &x->i, vals); break;
      case EM_ARG_INTLIST:
      case EM_ARG_INTLISTOPT:
        for (int k = 0; k < x->n && ok; k++) ok = dim_fits(g, &x->ilist[k], vals);
        break;
      case EM_ARG_SCALAR:
      case EM_ARG_TS: ok = x->is_tensor || x->is_float || dim_fits(g, &x->i, vals); break;
      default: break;
      }
      if (!ok)
        return em_fail(err, EM_EINPUT, "at %s, argument '%s' of node '%s' (%s) is beyond 64 bits: bind smaller sizes",
                       fmt_binding(g, vals, bb, sizeof bb), sp->args[a].name, g->values.v[nd->out].name,
                       em_op_name(nd->op));
    }
  }
  return EM_OK;
}

int em_arg_set_default(const em_argspec *sp, em_arg *a) {
  memset(a, 0, sizeof *a);
  if (!sp->has_default) return -1;
  const char *d = sp->def;
  if (!strcmp(d, "None")) return 0;
  a->present = 1;
  switch (sp->kind) {
  case EM_ARG_BOOL: a->b = !strcmp(d, "True"); break;
  case EM_ARG_INT:
  case EM_ARG_INTOPT: a->i = em_dim_const(strtoll(d, NULL, 10)); break;
  case EM_ARG_INTLIST:
  case EM_ARG_INTLISTOPT: a->n = 0; break; /* only "[]" is used as a list default */
  case EM_ARG_FLOAT:
  case EM_ARG_FLOATOPT: a->f = strtod(d, NULL); break;
  case EM_ARG_SCALAR:
  case EM_ARG_TS: {
    double v = strtod(d, NULL);
    if (v == floor(v)) a->i = em_dim_const((int64_t)v);
    else {
      a->is_float = 1;
      a->f = v;
    }
    break;
  }
  default: return -1;
  }
  return 0;
}

int em_arg_is_default(const em_argspec *sp, const em_arg *a) {
  if (!sp->has_default) return 0;
  em_arg d;
  em_arg_set_default(sp, &d);
  if (d.present != a->present) return 0;
  if (!a->present) return 1;
  switch (sp->kind) {
  case EM_ARG_BOOL: return d.b == a->b;
  case EM_ARG_INT:
  case EM_ARG_INTOPT: return em_dim_eq(&d.i, &a->i);
  case EM_ARG_INTLIST:
  case EM_ARG_INTLISTOPT: return a->n == 0;
  case EM_ARG_FLOAT:
  case EM_ARG_FLOATOPT: return d.f == a->f;
  case EM_ARG_SCALAR: return d.is_float == a->is_float && (a->is_float ? d.f == a->f : em_dim_eq(&d.i, &a->i));
  case EM_ARG_TS:
    return !a->is_tensor && d.is_float == a->is_float && (a->is_float ? d.f == a->f : em_dim_eq(&d.i, &a->i));
  default: return 0;
  }
}

/* Maps a value of g into sub, adding it as an input the first time it is read from outside. */
static int sub_ref(const em_graph *g, em_graph *sub, int *map, int v, char *err) {
  if (map[v] >= 0) return map[v];
  const em_value *x = &g->values.v[v];
  em_vkind k = x->kind == EM_V_PARAM ? EM_V_PARAM : EM_V_INPUT;
  map[v] = em_graph_add_input(sub, x->name, k, x->weight, x->dtype, &x->shape, err);
  return map[v];
}

em_graph *em_graph_subgraph(const em_graph *g, const int *nodes, int n, const int *outs, int nouts, const char *name,
                            char *err) {
  em_graph *sub = em_graph_new(name);
  int *map = em_alloc(sizeof(int) * (size_t)g->values.n);
  for (int i = 0; i < g->values.n; i++) map[i] = -1;
  sub->syms = g->syms;
  for (int i = 0; i < n; i++) {
    if (nodes[i] < 0 || nodes[i] >= g->nodes.n) {
      em_fail(err, EM_EINPUT, "subgraph: node index %d out of range", nodes[i]);
      goto fail;
    }
    const em_node *nd = &g->nodes.v[nodes[i]];
    const em_opspec *sp = em_op_spec(nd->op);
    em_arg args[EM_MAX_ARGS];
    memcpy(args, nd->args, sizeof args);
    for (int a = 0; a < sp->nargs; a++) {
      em_arg *x = &args[a];
      x->ilist = NULL;
      x->tlist = NULL;
      if (!nd->args[a].present) continue;
      em_argkind k = sp->args[a].kind;
      if (k == EM_ARG_T || k == EM_ARG_TOPT || (k == EM_ARG_TS && x->is_tensor)) {
        if ((x->tensor = sub_ref(g, sub, map, nd->args[a].tensor, err)) < 0) goto fail_args;
      } else if (k == EM_ARG_TLIST) {
        x->tlist = em_alloc(sizeof(int) * (size_t)(x->n ? x->n : 1));
        for (int j = 0; j < x->n; j++)
          if ((x->tlist[j] = sub_ref(g, sub, map, nd->args[a].tlist[j], err)) < 0) goto fail_args;
      } else if (k == EM_ARG_INTLIST || k == EM_ARG_INTLISTOPT) {
        x->ilist = em_alloc(sizeof(em_dim) * (size_t)(x->n ? x->n : 1));
        memcpy(x->ilist, nd->args[a].ilist, sizeof(em_dim) * (size_t)x->n);
      }
      continue;
    fail_args:
      em_args_free(args, EM_MAX_ARGS);
      goto fail;
    }
    int v = em_graph_add_node(sub, nd->op, args, g->values.v[nd->out].name, nd->src_module, nd->src_op, err);
    if (v < 0) goto fail;
    map[nd->out] = v;
  }
  for (int i = 0; i < nouts; i++) {
    int v = outs[i] >= 0 && outs[i] < g->values.n ? map[outs[i]] : -1;
    if (v < 0) {
      em_fail(err, EM_EINPUT, "subgraph: output '%s' is not computed by the chosen nodes",
              outs[i] >= 0 && outs[i] < g->values.n ? g->values.v[outs[i]].name : "?");
      goto fail;
    }
    em_graph_add_output(sub, v, err);
  }
  free(map);
  return sub;
fail:
  free(map);
  em_graph_free(sub);
  return NULL;
}
