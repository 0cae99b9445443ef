/* ref.c — the CPU reference interpreter: binds the symbols, checks the inputs against the binding, runs the
 * graph's nodes in order (each op in ref_ops.c) and frees every value after its last use unless asked to
 * keep them all. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ref_impl.h"

#define R EM_TENSOR_MAX_RANK
#define SHAPE(t) ref_fmt_shape((t)->rank, (t)->shape, (char[160]){0}, 160)

/* ---- the interpreter --------------------------------------------------------------------------------- */

/* Calls fn for each value id a node reads. */
static void node_inputs(const em_node *nd, void (*fn)(void *ctx, int v), void *ctx) {
  const em_opspec *sp = em_op_spec(nd->op);
  for (int i = 0; i < sp->nargs; i++) {
    const em_arg *a = &nd->args[i];
    if (!a->present) continue;
    switch (sp->args[i].kind) {
    case EM_ARG_T:
    case EM_ARG_TOPT: fn(ctx, a->tensor); break;
    case EM_ARG_TS:
      if (a->is_tensor) fn(ctx, a->tensor);
      break;
    case EM_ARG_TLIST:
      for (int k = 0; k < a->n; k++) fn(ctx, a->tlist[k]);
      break;
    default: break;
    }
  }
}

typedef struct {
  int *last, node;
  const em_tensor *const *vals;
  int missing;
  em_tensor **owned; /* release: the run's values */
  const char *is_out;
  const em_graph *g;
} use_ctx;

static void mark_use(void *p, int v) {
  use_ctx *u = p;
  u->last[v] = u->node;
}

/* Frees a computed value at its last use unless it is a graph output (inputs are borrowed, never freed). */
static void release(void *p, int v) {
  use_ctx *u = p;
  if (u->last[v] == u->node && !u->is_out[v] && u->g->values.v[v].kind == EM_V_NODE && u->owned[v]) {
    em_tensor_free(u->owned[v]);
    u->owned[v] = NULL;
  }
}

static void check_live(void *p, int v) {
  use_ctx *u = p;
  if (!u->vals[v] && u->missing < 0) u->missing = v;
}

em_status em_ref_bind(const em_graph *g, const int64_t *given, int64_t *out, char *err) {
  const em_symtab *st = &g->syms;
  for (int i = 0; i < EM_MAX_SYMS; i++) out[i] = 0;
  for (int i = 0; i < st->n; i++) {
    const em_sym *s = &st->s[i];
    if (s->derived) continue;
    int has = given && given[i] != EM_SYM_UNBOUND;
    int64_t v = has ? given[i] : s->hint;
    if (!has && v < 0)
      return em_fail(err, EM_EINPUT, "symbol '%s' is unbound: give it a value (--bind %s=N)", s->name, s->name);
    if (v < s->min || v > s->max)
      return em_fail(err, EM_EINPUT, "symbol '%s' = %lld is outside its range [%lld, %lld]: give %lld <= %s <= %lld",
                     s->name, (long long)v, (long long)s->min, (long long)s->max, (long long)s->min, s->name,
                     (long long)s->max);
    out[i] = v;
  }
  for (int i = 0; i < st->n; i++)
    if (st->s[i].derived) {
      em_dim d = em_dim_sym(i);
      if (em_dim_eval_checked(st, &d, out, &out[i]))
        return em_fail(err, EM_EINPUT, "symbol '%s' is beyond 64 bits at this binding: bind smaller sizes", st->s[i].name);
    }
  return em_graph_check_binding(g, out, err);
}

/* Evaluates a graph value's shape at the binding; -1 when a dim is negative. */
static int eval_shape(const rctx *c, const em_value *v, int64_t *shape) {
  for (int i = 0; i < v->shape.rank; i++) {
    shape[i] = ref_ev(c, &v->shape.d[i]);
    if (shape[i] < 0) return -1;
  }
  return 0;
}

static int same_shape(const em_tensor *t, int rank, const int64_t *shape) {
  if (t->rank != rank) return 0;
  for (int i = 0; i < rank; i++)
    if (t->shape[i] != shape[i]) return 0;
  return 1;
}

em_status em_ref_run(const em_graph *g, const int64_t *symvals, em_tensor *const *inputs, const em_ref_opts *opts,
                     em_ref_result *res, char *err) {
  em_status st = EM_OK;
  int nv = g->values.n;
  em_tensor **vals = em_alloc(sizeof(em_tensor *) * (size_t)(nv ? nv : 1));
  int *last = em_alloc(sizeof(int) * (size_t)(nv ? nv : 1));
  char *is_out = em_alloc((size_t)(nv ? nv : 1));
  char e2[EM_ERR_MAX], b1[160], b2[160];
  memset(res, 0, sizeof *res);
  rctx c = {g, symvals, opts ? opts->nthreads : 0, vals};
  if (c.nthreads <= 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    c.nthreads = n > 0 ? (int)n : 1;
  }
  int keep_all = opts && opts->keep_all;

  for (int i = 0; i < g->inputs.n; i++) {
    int id = g->inputs.v[i];
    const em_value *v = &g->values.v[id];
    const em_tensor *t = inputs ? inputs[i] : NULL;
    int64_t shape[R];
    if (eval_shape(&c, v, shape)) {
      st = em_fail(err, EM_EINPUT, "input '%s': its shape is negative at this binding", v->name);
      goto cleanup;
    }
    if (!t) {
      st = em_fail(err, EM_EINPUT, "input '%s' is missing: give a %s %s tensor", v->name, em_dtype_name(v->dtype),
                   ref_fmt_shape(v->shape.rank, shape, b1, sizeof b1));
      goto cleanup;
    }
    if (t->dtype != v->dtype || !same_shape(t, v->shape.rank, shape)) {
      st = em_fail(err, EM_EINPUT, "input '%s': expected %s %s, got %s %s", v->name, em_dtype_name(v->dtype),
                   ref_fmt_shape(v->shape.rank, shape, b1, sizeof b1), em_dtype_name(t->dtype), SHAPE(t));
      goto cleanup;
    }
    em_tensor *b = em_alloc(sizeof *b);
    *b = *t;
    b->borrowed = 1;
    vals[id] = b;
  }

  for (int v = 0; v < nv; v++) last[v] = -1;
  for (int n = 0; n < g->nodes.n; n++) {
    use_ctx u = {last, n, NULL, -1};
    node_inputs(&g->nodes.v[n], mark_use, &u);
  }
  for (int i = 0; i < g->outputs.n; i++) is_out[g->outputs.v[i]] = 1;

  for (int n = 0; n < g->nodes.n; n++) {
    const em_node *nd = &g->nodes.v[n];
    const em_value *ov = &g->values.v[nd->out];
    use_ctx u = {last, n, (const em_tensor *const *)vals, -1};
    node_inputs(nd, check_live, &u);
    if (u.missing >= 0) {
      st = em_fail(err, EM_ERUN, "node '%s' (%s): input '%s' has no value (a graph that is not in topological order?)",
                   ov->name, em_op_name(nd->op), g->values.v[u.missing].name);
      goto cleanup;
    }
    em_tensor *o = NULL;
    e2[0] = 0;
    st = ref_exec_node(&c, nd, &o, e2);
    if (st != EM_OK) {
      em_tensor_free(o);
      em_fail(err, st, "node '%s' (%s): %s", ov->name, em_op_name(nd->op), e2);
      goto cleanup;
    }
    vals[nd->out] = o;
    int64_t shape[R];
    if (eval_shape(&c, ov, shape) || o->dtype != ov->dtype || !same_shape(o, ov->shape.rank, shape)) {
      st = em_fail(err, EM_ERUN, "node '%s' (%s): produced %s %s but the graph says %s %s", ov->name,
                   em_op_name(nd->op), em_dtype_name(o->dtype), SHAPE(o), em_dtype_name(ov->dtype),
                   ref_fmt_shape(ov->shape.rank, shape, b2, sizeof b2));
      goto cleanup;
    }
    if (!keep_all) {
      /* free what this node read for the last time, and its own result when nothing reads it */
      use_ctx r = {last, n, NULL, -1};
      r.owned = vals;
      r.is_out = is_out;
      r.g = g;
      node_inputs(nd, release, &r);
      if (last[nd->out] < 0 && !is_out[nd->out]) {
        em_tensor_free(vals[nd->out]);
        vals[nd->out] = NULL;
      }
    }
  }
  res->nvalues = nv;
  res->vals = vals;
  vals = NULL;
  for (int i = 0; i < g->syms.n; i++) res->symvals[i] = symvals[i];
cleanup:
  if (vals)
    for (int v = 0; v < nv; v++) em_tensor_free(vals[v]);
  free(vals);
  free(last);
  free(is_out);
  return st;
}

void em_ref_result_free(em_ref_result *res) {
  if (!res) return;
  for (int v = 0; v < res->nvalues; v++) em_tensor_free(res->vals[v]);
  free(res->vals);
  memset(res, 0, sizeof *res);
}

void em_packed_mask_bytes(unsigned char *m, const int64_t *lens, int n, int64_t T) {
  memset(m, 0, (size_t)(T * T));
  int64_t start = 0;
  for (int i = 0; i < n; i++) {
    for (int64_t q = start; q < start + lens[i]; q++) memset(m + q * T + start, 1, (size_t)(q - start + 1));
    start += lens[i];
  }
}
