/* infer.c — shape and dtype inference for every op of the vocabulary, exact on symbolic dims.
 * Each rule follows PyTorch's semantics for the overload; a refusal names the argument and the sizes. */
#include <stdio.h>
#include <string.h>

#include "graph.h"

#define FMT_DIM(d) em_dim_format(&g->syms, (d), (char[128]){0}, 128)
#define FMT_SHAPE(s) em_shape_format(&g->syms, (s), (char[512]){0}, 512)

static const em_value *tv(const em_graph *g, int id) { return &g->values.v[id]; }

/* Normalizes an axis argument (constant, may be negative) against rank (rank+extra for unsqueeze). */
static em_status axis(const em_graph *g, const em_dim *d, int rank, const char *what, int *out, char *err) {
  int64_t c;
  if (!em_dim_is_const(d, &c)) return em_fail(err, EM_EINPUT, "%s must be a constant, got %s", what, FMT_DIM(d));
  if (c < -rank || c >= rank || rank == 0)
    return em_fail(err, EM_EINPUT, "%s=%lld is out of range for rank %d", what, (long long)c, rank);
  *out = (int)(c < 0 ? c + rank : c);
  return EM_OK;
}

static int is_one(const em_dim *d) {
  int64_t c;
  return em_dim_is_const(d, &c) && c == 1;
}

static em_status broadcast(const em_graph *g, const em_shape *a, const em_shape *b, em_shape *out, char *err) {
  int r = a->rank > b->rank ? a->rank : b->rank;
  out->rank = r;
  for (int i = 0; i < r; i++) {
    int ia = a->rank - r + i, ib = b->rank - r + i;
    const em_dim *da = ia >= 0 ? &a->d[ia] : NULL, *db = ib >= 0 ? &b->d[ib] : NULL;
    if (!da) out->d[i] = *db;
    else if (!db) out->d[i] = *da;
    else if (em_dim_eq(da, db) || is_one(db)) out->d[i] = *da;
    else if (is_one(da)) out->d[i] = *db;
    else
      return em_fail(err, EM_EINPUT, "shapes %s and %s do not broadcast (dim %d: %s vs %s)", FMT_SHAPE(a),
                     FMT_SHAPE(b), i, FMT_DIM(da), FMT_DIM(db));
  }
  return EM_OK;
}

static em_dtype float_of(em_dtype t) { return em_dtype_is_float(t) ? t : EM_F32; }

/* dtype of a tensor combined with a Python scalar: the scalar only lifts the category. */
static em_dtype with_scalar(em_dtype t, const em_arg *s) {
  if (s->is_float && !em_dtype_is_float(t)) return EM_F32;
  return t;
}

static em_status reduce_dims(const em_graph *g, const em_shape *in, const em_arg *dims, int keepdim,
                             em_shape *out, char *err) {
  int mark[EM_MAX_RANK] = {0};
  if (!dims->present || dims->n == 0) {
    for (int i = 0; i < in->rank; i++) mark[i] = 1;
  } else {
    for (int k = 0; k < dims->n; k++) {
      int ax;
      if (axis(g, &dims->ilist[k], in->rank, "dim", &ax, err)) return EM_EINPUT;
      if (mark[ax]) return em_fail(err, EM_EINPUT, "dim %d appears twice", ax);
      mark[ax] = 1;
    }
  }
  out->rank = 0;
  for (int i = 0; i < in->rank; i++) {
    if (!mark[i]) out->d[out->rank++] = in->d[i];
    else if (keepdim) out->d[out->rank++] = em_dim_const(1);
  }
  return EM_OK;
}

static em_status matmul_shape(const em_graph *g, const em_shape *a0, const em_shape *b0, em_shape *out,
                              char *err) {
  if (a0->rank == 0 || b0->rank == 0) return em_fail(err, EM_EINPUT, "matmul of a 0-d tensor");
  em_shape a = *a0, b = *b0;
  int sq_a = 0, sq_b = 0;
  if (a.rank == 1) {
    memmove(&a.d[1], &a.d[0], sizeof a.d[0]);
    a.d[0] = em_dim_const(1);
    a.rank = 2;
    sq_a = 1;
  }
  if (b.rank == 1) {
    b.d[1] = em_dim_const(1);
    b.rank = 2;
    sq_b = 1;
  }
  if (!em_dim_eq(&a.d[a.rank - 1], &b.d[b.rank - 2]))
    return em_fail(err, EM_EINPUT, "inner dims differ: %s @ %s", FMT_SHAPE(a0), FMT_SHAPE(b0));
  em_shape ba = a, bb = b, bo;
  ba.rank -= 2;
  bb.rank -= 2;
  if (broadcast(g, &ba, &bb, &bo, err)) return EM_EINPUT;
  *out = bo;
  if (!sq_a) out->d[out->rank++] = a.d[a.rank - 2];
  if (!sq_b) out->d[out->rank++] = b.d[b.rank - 1];
  return EM_OK;
}

static em_status same_dtype(const em_graph *g, int x, int y, const char *nx, const char *ny, char *err) {
  if (tv(g, x)->dtype != tv(g, y)->dtype)
    return em_fail(err, EM_EINPUT, "%s is %s but %s is %s (cast one first)", nx, em_dtype_name(tv(g, x)->dtype), ny,
                   em_dtype_name(tv(g, y)->dtype));
  return EM_OK;
}

static em_status view_shape(em_graph *g, const em_shape *in, const em_arg *sz, em_shape *out, char *err) {
  if (sz->n > EM_MAX_RANK) return em_fail(err, EM_EINPUT, "rank %d is over %d", sz->n, EM_MAX_RANK);
  em_dim numel, known = em_dim_const(1);
  int rc = em_shape_numel(in, &numel);
  if (rc) return em_fail(err, EM_EINPUT, "the input's element count: %s", em_dim_strerror(rc));
  int infer_at = -1;
  out->rank = sz->n;
  for (int i = 0; i < sz->n; i++) {
    int64_t c;
    if (em_dim_is_const(&sz->ilist[i], &c) && c == -1) {
      if (infer_at >= 0) return em_fail(err, EM_EINPUT, "size has more than one -1");
      infer_at = i;
      continue;
    }
    if (em_dim_is_const(&sz->ilist[i], &c) && c < 0) return em_fail(err, EM_EINPUT, "size %lld is negative", (long long)c);
    out->d[i] = sz->ilist[i];
    if ((rc = em_dim_mul(&known, &sz->ilist[i], &known))) return em_fail(err, EM_EINPUT, "size: %s", em_dim_strerror(rc));
  }
  if (infer_at >= 0) {
    if (em_dim_divexact(&numel, &known, &out->d[infer_at]))
      return em_fail(err, EM_EINPUT, "cannot infer -1: %s elements are not a multiple of %s", FMT_DIM(&numel),
                     FMT_DIM(&known));
  } else if (!em_dim_eq(&numel, &known)) {
    return em_fail(err, EM_EINPUT, "input %s has %s elements but size asks for %s", FMT_SHAPE(in), FMT_DIM(&numel),
                   FMT_DIM(&known));
  }
  return EM_OK;
}

/* Length of [start, end) by step on a dim of size n, following Python's clamping where it is decidable. */
static em_status slice_len(em_graph *g, const em_dim *n, const em_arg *sa, const em_arg *ea, const em_dim *stepd,
                           em_dim *out, char *err) {
  int64_t step;
  if (!em_dim_is_const(stepd, &step) || step <= 0) return em_fail(err, EM_EINPUT, "step must be a positive constant");
  em_dim start = sa->present ? sa->i : em_dim_const(0), end = ea->present ? ea->i : *n;
  int64_t c, nc;
  int nconst = em_dim_is_const(n, &nc);
  if (em_dim_is_const(&start, &c) && c < 0) {
    if (!nconst) {
      em_dim k = em_dim_const(c);
      if (em_dim_add(n, &k, &start)) return em_fail(err, EM_EINPUT, "start: symbolic size too complex");
    } else start = em_dim_const(c + nc < 0 ? 0 : c + nc);
  }
  if (em_dim_is_const(&end, &c)) {
    if (c < 0) {
      if (nconst) end = em_dim_const(c + nc < 0 ? 0 : c + nc);
      else {
        em_dim k = em_dim_const(c);
        if (em_dim_add(n, &k, &end)) return em_fail(err, EM_EINPUT, "end: symbolic size too complex");
      }
    } else if (nconst && c > nc) end = em_dim_const(nc);
    else if (!nconst && c >= (int64_t)1 << 62) end = *n;
  } else if (nconst) {
    /* symbolic end on a constant dim: the symbol's range must keep it inside */
    for (int k = 0; k < end.n; k++)
      for (int s = 0; s < EM_MAX_SYMS; s++)
        if (end.t[k].pow[s] && end.n == 1 && end.t[k].coef == 1 && g->syms.s[s].max > nc)
          return em_fail(err, EM_EINPUT, "slice end %s can exceed the dim's size %lld (symbol max %lld)",
                         FMT_DIM(&end), (long long)nc, (long long)g->syms.s[s].max);
  }
  em_dim len;
  int rc = em_dim_sub(&end, &start, &len);
  if (rc) return em_fail(err, EM_EINPUT, "end - start: %s", em_dim_strerror(rc));
  if (em_dim_is_const(&len, &c) && c < 0) len = em_dim_const(0);
  if (step == 1) *out = len;
  else if (em_dim_cdiv(&g->syms, &len, step, out, err)) return EM_EINPUT;
  return EM_OK;
}

/* An op group's answer: not an op of this group (em_infer asks the next). */
#define INFER_PASS ((em_status)-1)

/* The checks every op shares: tensor references exist and required arguments are present. */
static em_status infer_args(em_graph *g, const em_opspec *sp, const em_arg *a, char *err) {
  for (int i = 0; i < sp->nargs; i++) {
    const em_argspec *as = &sp->args[i];
    const em_arg *x = &a[i];
    int needs = as->kind == EM_ARG_T || as->kind == EM_ARG_TLIST || as->kind == EM_ARG_TS ||
                as->kind == EM_ARG_INT || as->kind == EM_ARG_INTLIST || as->kind == EM_ARG_FLOAT ||
                as->kind == EM_ARG_BOOL || as->kind == EM_ARG_SCALAR;
    if (needs && !x->present) return em_fail(err, EM_EINPUT, "argument '%s' is missing", as->name);
    if (!x->present) continue;
    int is_t = as->kind == EM_ARG_T || as->kind == EM_ARG_TOPT || (as->kind == EM_ARG_TS && x->is_tensor);
    if (is_t && (x->tensor < 0 || x->tensor >= g->values.n))
      return em_fail(err, EM_EINPUT, "argument '%s' refers to an unknown value", as->name);
    if (as->kind == EM_ARG_TLIST)
      for (int k = 0; k < x->n; k++)
        if (x->tlist[k] < 0 || x->tlist[k] >= g->values.n)
          return em_fail(err, EM_EINPUT, "argument '%s'[%d] refers to an unknown value", as->name, k);
  }
  return EM_OK;
}

/* Embedding lookups and the matrix products: operand ranks, contracted dims, dtypes.
 * Returns INFER_PASS for an op of another group. */
static em_status infer_matmuls(em_graph *g, em_op op, const em_arg *a, const em_value *s0, em_dtype *dt, em_shape *sh, char *err) {
  switch (op) {
  case EM_OP_EMBEDDING: {
    const em_value *w = s0, *ix = tv(g, a[1].tensor);
    if (w->shape.rank != 2) return em_fail(err, EM_EINPUT, "weight must be 2-d, got %s", FMT_SHAPE(&w->shape));
    if (em_dtype_is_float(ix->dtype)) return em_fail(err, EM_EINPUT, "indices must be integer, got %s", em_dtype_name(ix->dtype));
    if (ix->shape.rank + 1 > EM_MAX_RANK) return em_fail(err, EM_EINPUT, "indices rank too high");
    *sh = ix->shape;
    sh->d[sh->rank++] = w->shape.d[1];
    *dt = w->dtype;
    return EM_OK;
  }
  case EM_OP_MM:
  case EM_OP_BMM: {
    const em_value *b = tv(g, a[1].tensor);
    int r = op == EM_OP_MM ? 2 : 3;
    if (s0->shape.rank != r || b->shape.rank != r)
      return em_fail(err, EM_EINPUT, "expects %d-d operands, got %s and %s", r, FMT_SHAPE(&s0->shape), FMT_SHAPE(&b->shape));
    if (r == 3 && !em_dim_eq(&s0->shape.d[0], &b->shape.d[0]))
      return em_fail(err, EM_EINPUT, "batch dims differ: %s and %s", FMT_SHAPE(&s0->shape), FMT_SHAPE(&b->shape));
    if (same_dtype(g, a[0].tensor, a[1].tensor, "self", "mat2", err)) return EM_EINPUT;
    *dt = s0->dtype;
    return matmul_shape(g, &s0->shape, &b->shape, sh, err);
  }
  case EM_OP_MATMUL:
    if (same_dtype(g, a[0].tensor, a[1].tensor, "self", "other", err)) return EM_EINPUT;
    *dt = s0->dtype;
    return matmul_shape(g, &s0->shape, &tv(g, a[1].tensor)->shape, sh, err);
  case EM_OP_LINEAR: {
    const em_value *w = tv(g, a[1].tensor);
    if (w->shape.rank != 2) return em_fail(err, EM_EINPUT, "weight must be 2-d, got %s", FMT_SHAPE(&w->shape));
    if (s0->shape.rank < 1) return em_fail(err, EM_EINPUT, "input is 0-d");
    if (!em_dim_eq(&s0->shape.d[s0->shape.rank - 1], &w->shape.d[1]))
      return em_fail(err, EM_EINPUT, "input %s has last dim %s but weight %s expects %s", FMT_SHAPE(&s0->shape),
                     FMT_DIM(&s0->shape.d[s0->shape.rank - 1]), FMT_SHAPE(&w->shape), FMT_DIM(&w->shape.d[1]));
    if (same_dtype(g, a[0].tensor, a[1].tensor, "input", "weight", err)) return EM_EINPUT;
    if (a[2].present) {
      const em_value *bias = tv(g, a[2].tensor);
      if (bias->shape.rank != 1 || !em_dim_eq(&bias->shape.d[0], &w->shape.d[0]))
        return em_fail(err, EM_EINPUT, "bias %s does not match weight %s", FMT_SHAPE(&bias->shape), FMT_SHAPE(&w->shape));
      if (same_dtype(g, a[0].tensor, a[2].tensor, "input", "bias", err)) return EM_EINPUT;
    }
    *sh = s0->shape;
    sh->d[sh->rank - 1] = w->shape.d[0];
    *dt = s0->dtype;
    return EM_OK;
  }
  default: return INFER_PASS;
  }
}

/* Elementwise ops and dtype conversion: broadcasting, PyTorch's type promotion with scalars.
 * Returns INFER_PASS for an op of another group. */
static em_status infer_pointwise(em_graph *g, em_op op, const em_arg *a, const em_value *s0, em_dtype *dt, em_shape *sh, char *err) {
  switch (op) {
  case EM_OP_ADD:
  case EM_OP_SUB:
  case EM_OP_MUL:
  case EM_OP_DIV: {
    if (a[1].is_tensor) {
      const em_value *o = tv(g, a[1].tensor);
      if (broadcast(g, &s0->shape, &o->shape, sh, err)) return EM_EINPUT;
      /* a 0-d tensor of the same category does not promote, as in PyTorch */
      int same_cat = em_dtype_is_float(s0->dtype) == em_dtype_is_float(o->dtype);
      if (o->shape.rank == 0 && s0->shape.rank > 0 && same_cat) *dt = s0->dtype;
      else if (s0->shape.rank == 0 && o->shape.rank > 0 && same_cat) *dt = o->dtype;
      else *dt = em_dtype_promote(s0->dtype, o->dtype);
    } else {
      *sh = s0->shape;
      *dt = with_scalar(s0->dtype, &a[1]);
    }
    if (op == EM_OP_DIV) *dt = float_of(*dt);
    return EM_OK;
  }
  case EM_OP_POW:
  case EM_OP_CLAMP_MIN:
    *sh = s0->shape;
    *dt = with_scalar(s0->dtype, &a[1]);
    return EM_OK;
  case EM_OP_NEG:
  case EM_OP_CONTIGUOUS:
  case EM_OP_CLONE:
    *sh = s0->shape;
    *dt = s0->dtype;
    return EM_OK;
  case EM_OP_RECIPROCAL:
  case EM_OP_RSQRT:
  case EM_OP_SQRT:
  case EM_OP_EXP:
  case EM_OP_SILU:
  case EM_OP_SIGMOID:
  case EM_OP_TANH:
  case EM_OP_COS:
  case EM_OP_SIN:
    *sh = s0->shape;
    *dt = float_of(s0->dtype);
    return EM_OK;
  case EM_OP_TO_COPY:
    *sh = s0->shape;
    *dt = a[1].present ? (em_dtype)a[1].dtype : s0->dtype;
    return EM_OK;
  default: return INFER_PASS;
  }
}

/* SDPA's seq_pos (an emmy extension, docs/formats.md): each query row's position within its sequence, the sequences
 * packed end to end along L; with is_causal (and no attn_mask) row l attends to keys l - seq_pos[l] .. l. An integer
 * [1 or the first batch dim, L] tensor; the keys are the queries' rows (S = L). */
static em_status sdpa_seq_pos(const em_graph *g, const em_arg *a, const em_shape *q, const em_shape *k, char *err) {
  const em_value *p = tv(g, a[8].tensor);
  int r = q->rank;
  if (!a[5].b || a[3].present) return em_fail(err, EM_EINPUT, "seq_pos needs is_causal=True and no attn_mask");
  if (p->dtype != EM_I64 && p->dtype != EM_I32)
    return em_fail(err, EM_EINPUT, "seq_pos must be an integer tensor, got %s", em_dtype_name(p->dtype));
  int64_t one;
  if (p->shape.rank != 2 || !em_dim_eq(&p->shape.d[1], &q->d[r - 2]) ||
      !((em_dim_is_const(&p->shape.d[0], &one) && one == 1) || (r >= 3 && em_dim_eq(&p->shape.d[0], &q->d[0]))))
    return em_fail(err, EM_EINPUT, "seq_pos %s must be [1 or the first batch dim, L] for query %s", FMT_SHAPE(&p->shape), FMT_SHAPE(q));
  if (!em_dim_eq(&k->d[r - 2], &q->d[r - 2]))
    return em_fail(err, EM_EINPUT, "seq_pos packs the queries' own keys: key length %s differs from the query's %s", FMT_DIM(&k->d[r - 2]),
                   FMT_DIM(&q->d[r - 2]));
  return EM_OK;
}

/* Reductions, softmax and attention: reduced dims, accumulation dtypes, SDPA's head and mask shapes.
 * Returns INFER_PASS for an op of another group. */
static em_status infer_reductions(em_graph *g, em_op op, const em_arg *a, const em_value *s0, em_dtype *dt, em_shape *sh, char *err) {
  int ax;
  switch (op) {
  case EM_OP_MEAN:
  case EM_OP_SUM:
    if (reduce_dims(g, &s0->shape, &a[1], a[2].b, sh, err)) return EM_EINPUT;
    if (a[3].present) *dt = (em_dtype)a[3].dtype;
    else if (op == EM_OP_SUM && !em_dtype_is_float(s0->dtype)) *dt = EM_I64;
    else *dt = s0->dtype;
    if (op == EM_OP_MEAN && !em_dtype_is_float(*dt))
      return em_fail(err, EM_EINPUT, "mean of a %s tensor needs a float dtype", em_dtype_name(*dt));
    return EM_OK;
  case EM_OP_AMAX:
    *dt = s0->dtype;
    return reduce_dims(g, &s0->shape, &a[1], a[2].b, sh, err);
  case EM_OP_VECTOR_NORM: {
    int64_t ord;
    if (a[1].is_float || !em_dim_is_const(&a[1].i, &ord) || ord != 2)
      return em_fail(err, EM_EINPUT, "only ord=2 is supported");
    *dt = a[4].present ? (em_dtype)a[4].dtype : s0->dtype;
    if (!em_dtype_is_float(*dt)) return em_fail(err, EM_EINPUT, "norm of a %s tensor", em_dtype_name(*dt));
    return reduce_dims(g, &s0->shape, &a[2], a[3].b, sh, err);
  }
  case EM_OP_SOFTMAX:
  case EM_OP_SOFTMAX_INT:
    if (axis(g, &a[1].i, s0->shape.rank, "dim", &ax, err)) return EM_EINPUT;
    *sh = s0->shape;
    if (op == EM_OP_SOFTMAX) *dt = (a[2].b && (s0->dtype == EM_BF16 || s0->dtype == EM_F16)) ? EM_F32 : s0->dtype;
    else *dt = a[2].present ? (em_dtype)a[2].dtype : s0->dtype;
    if (!em_dtype_is_float(*dt)) return em_fail(err, EM_EINPUT, "softmax of a %s tensor", em_dtype_name(*dt));
    return EM_OK;
  case EM_OP_SDPA: {
    const em_value *k = tv(g, a[1].tensor), *v = tv(g, a[2].tensor);
    const em_shape *q = &s0->shape;
    int r = q->rank;
    if (r < 2 || k->shape.rank != r || v->shape.rank != r)
      return em_fail(err, EM_EINPUT, "query, key and value must have the same rank >= 2 (got %s, %s, %s)", FMT_SHAPE(q),
                     FMT_SHAPE(&k->shape), FMT_SHAPE(&v->shape));
    if (!em_dim_eq(&q->d[r - 1], &k->shape.d[r - 1]))
      return em_fail(err, EM_EINPUT, "query head dim %s differs from key's %s", FMT_DIM(&q->d[r - 1]), FMT_DIM(&k->shape.d[r - 1]));
    if (!em_dim_eq(&k->shape.d[r - 2], &v->shape.d[r - 2]))
      return em_fail(err, EM_EINPUT, "key length %s differs from value's %s", FMT_DIM(&k->shape.d[r - 2]), FMT_DIM(&v->shape.d[r - 2]));
    if (same_dtype(g, a[0].tensor, a[1].tensor, "query", "key", err) || same_dtype(g, a[0].tensor, a[2].tensor, "query", "value", err))
      return EM_EINPUT;
    if (a[4].f != 0.0) return em_fail(err, EM_EINPUT, "dropout_p=%g is not supported (inference graphs only)", a[4].f);
    for (int i = 0; i < r - 2; i++) {
      const em_dim *qd = &q->d[i], *kd = &k->shape.d[i];
      if (em_dim_eq(qd, kd) && em_dim_eq(kd, &v->shape.d[i])) continue;
      int64_t qc, kc;
      if (i == r - 3 && a[7].b && em_dim_is_const(qd, &qc) && em_dim_is_const(kd, &kc) && kc > 0 && qc % kc == 0 &&
          em_dim_eq(kd, &v->shape.d[i]))
        continue;
      return em_fail(err, EM_EINPUT, "query %s and key %s differ in dim %d%s", FMT_SHAPE(q), FMT_SHAPE(&k->shape), i,
                     i == r - 3 && !a[7].b ? " (pass enable_gqa=True for grouped-query attention)" : "");
    }
    if (a[3].present) {
      const em_value *m = tv(g, a[3].tensor);
      em_shape want = *q, bo;
      want.d[r - 1] = k->shape.d[r - 2];
      if (broadcast(g, &m->shape, &want, &bo, err) || !em_shape_eq(&bo, &want))
        return em_fail(err, EM_EINPUT, "attn_mask %s does not broadcast to %s", FMT_SHAPE(&m->shape), FMT_SHAPE(&want));
      if (m->dtype != EM_BOOL && m->dtype != s0->dtype)
        return em_fail(err, EM_EINPUT, "attn_mask must be bool or %s, got %s", em_dtype_name(s0->dtype), em_dtype_name(m->dtype));
      if (a[5].b) return em_fail(err, EM_EINPUT, "attn_mask and is_causal=True are exclusive");
    }
    if (a[8].present && sdpa_seq_pos(g, a, q, &k->shape, err)) return EM_EINPUT;
    *sh = *q;
    sh->d[r - 1] = v->shape.d[r - 1];
    *dt = s0->dtype;
    return EM_OK;
  }
  default: return INFER_PASS;
  }
}

/* Concatenation, slicing, indexing, views and dim permutations.
 * Returns INFER_PASS for an op of another group. */
static em_status infer_layout(em_graph *g, em_op op, const em_arg *a, const em_value *s0, em_dtype *dt, em_shape *sh, char *err) {
  int ax;
  switch (op) {
  case EM_OP_CAT: {
    if (a[0].n == 0) return em_fail(err, EM_EINPUT, "tensors is empty");
    const em_value *f = tv(g, a[0].tlist[0]);
    if (axis(g, &a[1].i, f->shape.rank, "dim", &ax, err)) return EM_EINPUT;
    *sh = f->shape;
    *dt = f->dtype;
    for (int k = 1; k < a[0].n; k++) {
      const em_value *t = tv(g, a[0].tlist[k]);
      if (t->shape.rank != f->shape.rank) return em_fail(err, EM_EINPUT, "tensors[%d] has rank %d, tensors[0] %d", k, t->shape.rank, f->shape.rank);
      for (int i = 0; i < f->shape.rank; i++)
        if (i != ax && !em_dim_eq(&t->shape.d[i], &f->shape.d[i]))
          return em_fail(err, EM_EINPUT, "tensors[%d] %s does not match tensors[0] %s outside dim %d", k, FMT_SHAPE(&t->shape),
                         FMT_SHAPE(&f->shape), ax);
      int rc = em_dim_add(&sh->d[ax], &t->shape.d[ax], &sh->d[ax]);
      if (rc) return em_fail(err, EM_EINPUT, "the concatenated size: %s", em_dim_strerror(rc));
      *dt = em_dtype_promote(*dt, t->dtype);
    }
    return EM_OK;
  }
  case EM_OP_SLICE:
    if (axis(g, &a[1].i, s0->shape.rank, "dim", &ax, err)) return EM_EINPUT;
    *sh = s0->shape;
    *dt = s0->dtype;
    return slice_len(g, &s0->shape.d[ax], &a[2], &a[3], &a[4].i, &sh->d[ax], err);
  case EM_OP_SELECT: {
    if (axis(g, &a[1].i, s0->shape.rank, "dim", &ax, err)) return EM_EINPUT;
    int64_t c, n;
    if (em_dim_is_const(&a[2].i, &c) && em_dim_is_const(&s0->shape.d[ax], &n) && (c < -n || c >= n))
      return em_fail(err, EM_EINPUT, "index %lld is out of range for size %lld", (long long)c, (long long)n);
    *sh = s0->shape;
    memmove(&sh->d[ax], &sh->d[ax + 1], sizeof(em_dim) * (size_t)(sh->rank - ax - 1));
    sh->rank--;
    *dt = s0->dtype;
    return EM_OK;
  }
  case EM_OP_INDEX_SELECT: {
    const em_value *ix = tv(g, a[2].tensor);
    if (axis(g, &a[1].i, s0->shape.rank, "dim", &ax, err)) return EM_EINPUT;
    if (ix->shape.rank > 1 || em_dtype_is_float(ix->dtype))
      return em_fail(err, EM_EINPUT, "index must be a 1-d integer tensor, got %s %s", em_dtype_name(ix->dtype), FMT_SHAPE(&ix->shape));
    *sh = s0->shape;
    sh->d[ax] = ix->shape.rank ? ix->shape.d[0] : em_dim_const(1);
    *dt = s0->dtype;
    return EM_OK;
  }
  case EM_OP_VIEW:
  case EM_OP_RESHAPE:
  case EM_OP_UNSAFE_VIEW:
    *dt = s0->dtype;
    return view_shape(g, &s0->shape, &a[1], sh, err);
  case EM_OP_TRANSPOSE: {
    int d0, d1;
    if (axis(g, &a[1].i, s0->shape.rank, "dim0", &d0, err) || axis(g, &a[2].i, s0->shape.rank, "dim1", &d1, err))
      return EM_EINPUT;
    *sh = s0->shape;
    sh->d[d0] = s0->shape.d[d1];
    sh->d[d1] = s0->shape.d[d0];
    *dt = s0->dtype;
    return EM_OK;
  }
  case EM_OP_T:
    if (s0->shape.rank > 2) return em_fail(err, EM_EINPUT, "t() expects a tensor of rank <= 2, got %s", FMT_SHAPE(&s0->shape));
    *sh = s0->shape;
    if (sh->rank == 2) {
      sh->d[0] = s0->shape.d[1];
      sh->d[1] = s0->shape.d[0];
    }
    *dt = s0->dtype;
    return EM_OK;
  case EM_OP_PERMUTE: {
    int seen[EM_MAX_RANK] = {0};
    if (a[1].n != s0->shape.rank) return em_fail(err, EM_EINPUT, "dims has %d entries for rank %d", a[1].n, s0->shape.rank);
    sh->rank = s0->shape.rank;
    for (int i = 0; i < a[1].n; i++) {
      if (axis(g, &a[1].ilist[i], s0->shape.rank, "dims entry", &ax, err)) return EM_EINPUT;
      if (seen[ax]++) return em_fail(err, EM_EINPUT, "dims repeats %d", ax);
      sh->d[i] = s0->shape.d[ax];
    }
    *dt = s0->dtype;
    return EM_OK;
  }
  default: return INFER_PASS;
  }
}

/* Broadcast views, unit dims and ranges.
 * Returns INFER_PASS for an op of another group. */
static em_status infer_shape_ops(em_graph *g, em_op op, const em_arg *a, const em_value *s0, em_dtype *dt, em_shape *sh, char *err) {
  int ax;
  switch (op) {
  case EM_OP_EXPAND: {
    int r = a[1].n, off = r - s0->shape.rank;
    if (off < 0 || r > EM_MAX_RANK) return em_fail(err, EM_EINPUT, "size has %d entries for rank %d", r, s0->shape.rank);
    sh->rank = r;
    for (int i = 0; i < r; i++) {
      int64_t c;
      const em_dim *want = &a[1].ilist[i];
      int keep = em_dim_is_const(want, &c) && c == -1;
      if (i < off) {
        if (keep) return em_fail(err, EM_EINPUT, "-1 is not allowed for a new leading dim");
        sh->d[i] = *want;
        continue;
      }
      const em_dim *have = &s0->shape.d[i - off];
      if (keep || em_dim_eq(want, have)) sh->d[i] = *have;
      else if (is_one(have)) sh->d[i] = *want;
      else
        return em_fail(err, EM_EINPUT, "cannot expand %s to size %s at dim %d (%s vs %s)", FMT_SHAPE(&s0->shape),
                       FMT_DIM(want), i, FMT_DIM(have), FMT_DIM(want));
    }
    *dt = s0->dtype;
    return EM_OK;
  }
  case EM_OP_UNSQUEEZE:
    if (s0->shape.rank == EM_MAX_RANK) return em_fail(err, EM_EINPUT, "rank would exceed %d", EM_MAX_RANK);
    if (axis(g, &a[1].i, s0->shape.rank + 1, "dim", &ax, err)) return EM_EINPUT;
    *sh = s0->shape;
    memmove(&sh->d[ax + 1], &sh->d[ax], sizeof(em_dim) * (size_t)(sh->rank - ax));
    sh->d[ax] = em_dim_const(1);
    sh->rank++;
    *dt = s0->dtype;
    return EM_OK;
  case EM_OP_SQUEEZE:
    *sh = s0->shape;
    *dt = s0->dtype;
    if (s0->shape.rank == 0) return EM_OK;
    if (axis(g, &a[1].i, s0->shape.rank, "dim", &ax, err)) return EM_EINPUT;
    if (is_one(&sh->d[ax])) {
      memmove(&sh->d[ax], &sh->d[ax + 1], sizeof(em_dim) * (size_t)(sh->rank - ax - 1));
      sh->rank--;
    }
    return EM_OK;
  case EM_OP_ARANGE:
  case EM_OP_ARANGE_START: {
    const em_arg *st = op == EM_OP_ARANGE ? NULL : &a[0], *en = op == EM_OP_ARANGE ? &a[0] : &a[1];
    const em_arg *dta = op == EM_OP_ARANGE ? &a[1] : &a[2];
    int isf = en->is_float || (st && st->is_float);
    sh->rank = 1;
    if (isf) {
      double s = st ? (st->is_float ? st->f : 0) : 0, e;
      int64_t c;
      if (st && !st->is_float && !em_dim_is_const(&st->i, &c)) return em_fail(err, EM_EINPUT, "symbolic start with a float end");
      if (st && !st->is_float) s = (double)c;
      if (!en->is_float && !em_dim_is_const(&en->i, &c)) return em_fail(err, EM_EINPUT, "symbolic end with a float start");
      e = en->is_float ? en->f : (double)c;
      if (!(e - s < 9.2e18)) /* also NaN and infinity: the length must convert to a 64-bit integer */
        return em_fail(err, EM_EINPUT, "arange from %g to %g is not a finite 64-bit length", s, e);
      int64_t n = e - s > 0 ? (int64_t)(e - s) : 0;
      if ((double)n < e - s) n++;
      sh->d[0] = em_dim_const(n < 0 ? 0 : n);
    } else {
      em_dim len = en->i;
      int rc = st ? em_dim_sub(&en->i, &st->i, &len) : 0;
      if (rc) return em_fail(err, EM_EINPUT, "end - start: %s", em_dim_strerror(rc));
      sh->d[0] = len;
    }
    *dt = dta->present ? (em_dtype)dta->dtype : (isf ? EM_F32 : EM_I64);
    return EM_OK;
  }
  default: return INFER_PASS;
  }
}

em_status em_infer(em_graph *g, em_op op, const em_arg *a, em_dtype *dt, em_shape *sh, char *err) {
  const em_opspec *sp = em_op_spec(op);
  if (infer_args(g, sp, a, err)) return EM_EINPUT;
  const em_value *s0 = (sp->args[0].kind == EM_ARG_T) ? tv(g, a[0].tensor) : NULL;
  static em_status (*const groups[])(em_graph *, em_op, const em_arg *, const em_value *, em_dtype *, em_shape *, char *) = {
      infer_matmuls, infer_pointwise, infer_reductions, infer_layout, infer_shape_ops};
  for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++) {
    em_status st = groups[i](g, op, a, s0, dt, sh, err);
    if (st != INFER_PASS) return st;
  }
  return em_fail(err, EM_EINPUT, "no inference rule");
}
