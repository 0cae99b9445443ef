/* emit.c — CUDA C++ emission for the scalar tiers: pointwise, row (reduction over the last dim with its
 * prologue and epilogue), reduce (any other reduction), contraction (smem-tiled, register-tiled) and
 * attention (one query row per thread, online softmax). Values are computed by index remapping from the
 * kernel's inputs; every string built here lives in an arena freed when em_emit returns. */
#include "emit.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- arena strings and the output buffer ---------------------------------------------------------- */

typedef struct {
  char *s;
  size_t n, cap;
} sbuf;

static void sb_vadd(sbuf *b, const char *fmt, va_list ap) {
  va_list aq;
  va_copy(aq, ap);
  int need = vsnprintf(NULL, 0, fmt, aq);
  va_end(aq);
  if (b->n + (size_t)need + 1 > b->cap) {
    b->cap = (b->n + (size_t)need + 1) * 2;
    b->s = em_realloc(b->s, b->cap);
  }
  vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
  b->n += (size_t)need;
}

static void sb_add(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(sbuf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  sb_vadd(b, fmt, ap);
  va_end(ap);
}

#define MAXR EM_MAX_RANK

typedef struct {
  int rank;
  const char *e[MAXR];
} ivec;

typedef struct {
  int v;
  char *key;
  const char *var;
} memo_ent;

typedef struct {
  const em_tile *t;
  const em_graph *g;
  sbuf *out;
  int indent;
  int tmp;
  EM_VEC(char *) arena;
  EM_VEC(memo_ent) memo;
  const char *anchor_var;  /* the anchor's value at the current domain index */
  const char *softmax_mx, *softmax_sum; /* row softmax: the row's max and sum of exp */
  int cache_mode;          /* row CACHE=1: 1 records the first input load of pass 1, 2 serves it from smem */
  const char *cache_key;   /* that load, as text ("in2[i1a2b3c4d]") */
  int anchor;              /* the anchor whose value anchor_var holds (merged siblings switch it) */
  int npre;                /* contraction prologue reductions (SPLIT_CONE=0): value ids, their smem rows */
  int pre_v[4];
  const char *pre_arr[4];
  ivec *al;                /* alignment of each value with the domain (NULL entries: not aligned) */
  int *bij;                /* 1 when the alignment is a bijection (the value may be written from it) */
  char *dimc[EM_MAX_SYMS]; /* C expressions of the symbols */
  int failed;
  char err[EM_ERR_MAX];
} ectx;

static char *A(ectx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *A(ectx *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  sbuf b = {0};
  sb_vadd(&b, fmt, ap);
  va_end(ap);
  if (!b.s) b.s = em_strdup("");
  EM_VEC_PUSH(c->arena, b.s);
  return b.s;
}

static void line(ectx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void line(ectx *c, const char *fmt, ...) {
  for (int i = 0; i < c->indent; i++) sb_add(c->out, "  ");
  va_list ap;
  va_start(ap, fmt);
  sb_vadd(c->out, fmt, ap);
  va_end(ap);
  sb_add(c->out, "\n");
}

static void fail(ectx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(ectx *c, const char *fmt, ...) {
  if (c->failed) return;
  c->failed = 1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->err, sizeof c->err, fmt, ap);
  va_end(ap);
}

/* ---- knobs ----------------------------------------------------------------------------------------- */

int em_knob_get(const em_knobs *k, const char *key, int64_t def) {
  for (int i = 0; i < k->n; i++)
    if (!strcmp(k->key[i], key)) return (int)k->val[i];
  return (int)def;
}

void em_knob_set(em_knobs *k, const char *key, int64_t v) {
  for (int i = 0; i < k->n; i++)
    if (!strcmp(k->key[i], key)) {
      k->val[i] = v;
      return;
    }
  if (k->n == EM_MAX_KNOBS) return;
  /* kept sorted by key, so the knob list prints canonically */
  int i = k->n;
  while (i > 0 && strcmp(k->key[i - 1], key) > 0) {
    memcpy(k->key[i], k->key[i - 1], sizeof k->key[0]);
    k->val[i] = k->val[i - 1];
    i--;
  }
  snprintf(k->key[i], sizeof k->key[0], "%s", key);
  k->val[i] = v;
  k->n++;
}

static const char *kind_names[EM_NKINDS] = {"pointwise", "row", "reduce", "contraction", "attention"};
const char *em_kkind_name(em_kkind k) { return (unsigned)k < EM_NKINDS ? kind_names[k] : "?"; }
int em_kkind_parse(const char *s) {
  for (int i = 0; i < EM_NKINDS; i++)
    if (s && !strcmp(s, kind_names[i])) return i;
  return -1;
}

/* ---- dims, types ------------------------------------------------------------------------------------ */

static const char *dim_c(ectx *c, const em_dim *d) {
  em_symtab st = c->g->syms;
  for (int i = 0; i < st.n; i++) snprintf(st.s[i].name, sizeof st.s[i].name, "%s", c->dimc[i]);
  char buf[512];
  em_dim_format(&st, d, buf, sizeof buf);
  int64_t k;
  if (em_dim_is_const(d, &k)) return A(c, "%lldLL", (long long)k);
  return A(c, "(%s)", buf);
}

static const em_value *V(ectx *c, int v) { return &c->g->values.v[v]; }
static const em_shape *S(ectx *c, int v) { return &c->g->values.v[v].shape; }

static const char *ctype(em_dtype t) {
  switch (t) {
  case EM_F64: return "double";
  case EM_I32:
  case EM_I64: return "long long";
  case EM_BOOL: return "int";
  default: return "float";
  }
}

static const char *stype(em_dtype t) {
  switch (t) {
  case EM_BF16:
  case EM_F16: return "unsigned short";
  case EM_F32: return "float";
  case EM_F64: return "double";
  case EM_I32: return "int";
  case EM_I64: return "long long";
  case EM_BOOL: return "unsigned char";
  default: return "?";
  }
}

static const char *load_conv(ectx *c, em_dtype t, const char *x) {
  switch (t) {
  case EM_BF16: return A(c, "em_bf2f(%s)", x);
  case EM_F16: return A(c, "em_h2f(%s)", x);
  case EM_BOOL: return A(c, "(int)%s", x);
  default: return A(c, "(%s)%s", ctype(t), x);
  }
}

static const char *store_conv(ectx *c, em_dtype t, const char *x) {
  switch (t) {
  case EM_BF16: return A(c, "em_f2bf(%s)", x);
  case EM_F16: return A(c, "em_f2h(%s)", x);
  case EM_BOOL: return A(c, "(unsigned char)((%s) != 0)", x);
  default: return A(c, "(%s)(%s)", stype(t), x);
  }
}

/* Rounds an expression computed in the compute type to what dtype t holds. */
static const char *round_to(ectx *c, em_dtype t, const char *x) {
  switch (t) {
  case EM_BF16: return A(c, "em_rbf(%s)", x);
  case EM_F16: return A(c, "em_rh(%s)", x);
  case EM_BOOL: return A(c, "((%s) != 0)", x);
  case EM_I32: return A(c, "(long long)(int)(%s)", x);
  case EM_I64: return A(c, "(long long)(%s)", x);
  case EM_F32: return A(c, "(float)(%s)", x);
  default: return x;
  }
}

/* ---- index vectors ---------------------------------------------------------------------------------- */

/* Keeps index expressions short by naming long ones. */
/* Keeps index expressions short by naming long ones. The name is a function of the expression and is
 * declared once per scope (index temps live in the memo table, so leaving a scope forgets them), so the same
 * index computed in two scopes reads the same — the row kernel's single pass relies on that. */
static const char *idx_name(ectx *c, const char *e) {
  if (strlen(e) < 48) return e;
  for (int i = c->memo.n - 1; i >= 0; i--)
    if (c->memo.v[i].v == -1 && !strcmp(c->memo.v[i].key, e)) return c->memo.v[i].var;
  uint64_t h = em_fnv1a(EM_FNV_SEED, e, strlen(e));
  const char *n = A(c, "i%08llx", (unsigned long long)(h & 0xffffffffULL));
  line(c, "const long long %s = %s;", n, e);
  memo_ent m = {-1, A(c, "%s", e), n};
  EM_VEC_PUSH(c->memo, m);
  return n;
}

static const char *linearize(ectx *c, const ivec *ix, const em_shape *s) {
  if (s->rank == 0) return "0LL";
  const char *e = ix->e[0];
  for (int i = 1; i < s->rank; i++) e = A(c, "(%s) * %s + %s", e, dim_c(c, &s->d[i]), ix->e[i]);
  return idx_name(c, e);
}

static ivec unravel(ectx *c, const char *lin, const em_shape *s) {
  ivec r = {s->rank};
  const char *rest = lin;
  for (int i = s->rank - 1; i >= 0; i--) {
    int64_t k;
    if (i == 0) r.e[i] = rest;
    else if (em_dim_is_const(&s->d[i], &k) && k == 1) r.e[i] = "0LL";
    else {
      const char *dm = dim_c(c, &s->d[i]);
      r.e[i] = idx_name(c, A(c, "(%s) %% %s", rest, dm));
      rest = idx_name(c, A(c, "(%s) / %s", rest, dm));
    }
  }
  return r;
}

static int is_one(const em_dim *d) {
  int64_t k;
  return em_dim_is_const(d, &k) && k == 1;
}

/* Index of a broadcast operand u of an op whose output has shape out. */
static ivec bcast(ectx *c, const ivec *ix, const em_shape *out, const em_shape *u) {
  ivec r = {u->rank};
  int off = out->rank - u->rank;
  for (int i = 0; i < u->rank; i++) r.e[i] = (is_one(&u->d[i]) && !is_one(&out->d[i + off])) ? "0LL" : ix->e[i + off];
  return r;
}

static int axis_of_dim(const em_dim *d, int rank) {
  int64_t k = 0;
  em_dim_is_const(d, &k);
  return (int)(k < 0 ? k + rank : k);
}

static int axis_of(const em_arg *a, int rank) { return axis_of_dim(&a->i, rank); }

/* ---- values ------------------------------------------------------------------------------------------ */

static const char *memo_key(ectx *c, int v, const ivec *ix) {
  sbuf b = {0};
  sb_add(&b, "%d", v);
  for (int i = 0; i < ix->rank; i++) sb_add(&b, "|%s", ix->e[i]);
  EM_VEC_PUSH(c->arena, b.s);
  return b.s;
}

static const char *val(ectx *c, int v, const ivec *ix);

static int input_pos(ectx *c, int v) {
  for (int i = 0; i < c->g->inputs.n; i++)
    if (c->g->inputs.v[i] == v) return i;
  return -1;
}

static const char *scalar_lit(ectx *c, const em_arg *a, em_dtype out) {
  if (a->is_float) return A(c, em_dtype_is_float(out) ? "%.9gf" : "%.17g", a->f);
  return A(c, "(%s)%s", ctype(out), dim_c(c, &a->i));
}

static const char *operand(ectx *c, const em_node *nd, int ai, const ivec *ix, em_dtype out) {
  const em_arg *a = &nd->args[ai];
  if (!a->is_tensor && em_op_spec(nd->op)->args[ai].kind == EM_ARG_TS) return scalar_lit(c, a, out);
  ivec u = bcast(c, ix, &V(c, nd->out)->shape, S(c, a->tensor));
  return val(c, a->tensor, &u);
}

/* View ops: output index -> input index. */
static ivec view_back(ectx *c, const em_node *nd, const ivec *ix) {
  const em_shape *in = S(c, nd->args[0].tensor), *o = &V(c, nd->out)->shape;
  ivec r = {in->rank};
  switch (nd->op) {
  case EM_OP_VIEW:
  case EM_OP_RESHAPE:
  case EM_OP_UNSAFE_VIEW: return unravel(c, linearize(c, ix, o), in);
  case EM_OP_TRANSPOSE: {
    int d0 = axis_of(&nd->args[1], in->rank), d1 = axis_of(&nd->args[2], in->rank);
    for (int i = 0; i < in->rank; i++) r.e[i] = ix->e[i];
    r.e[d0] = ix->e[d1];
    r.e[d1] = ix->e[d0];
    return r;
  }
  case EM_OP_T:
    for (int i = 0; i < in->rank; i++) r.e[i] = ix->e[in->rank - 1 - i];
    return r;
  case EM_OP_PERMUTE:
    for (int i = 0; i < in->rank; i++) r.e[axis_of_dim(&nd->args[1].ilist[i], in->rank)] = ix->e[i];
    return r;
  case EM_OP_EXPAND: {
    int off = o->rank - in->rank;
    for (int i = 0; i < in->rank; i++) r.e[i] = (is_one(&in->d[i]) && !is_one(&o->d[i + off])) ? "0LL" : ix->e[i + off];
    return r;
  }
  case EM_OP_UNSQUEEZE: {
    int d = axis_of(&nd->args[1], o->rank);
    for (int i = 0, k = 0; i < o->rank; i++)
      if (i != d) r.e[k++] = ix->e[i];
    return r;
  }
  case EM_OP_SQUEEZE: {
    if (in->rank == o->rank) {
      for (int i = 0; i < in->rank; i++) r.e[i] = ix->e[i];
      return r;
    }
    int d = axis_of(&nd->args[1], in->rank);
    for (int i = 0, k = 0; i < in->rank; i++) r.e[i] = i == d ? "0LL" : ix->e[k++];
    return r;
  }
  case EM_OP_SLICE: {
    int d = axis_of(&nd->args[1], in->rank);
    for (int i = 0; i < in->rank; i++) r.e[i] = ix->e[i];
    const char *start = "0LL";
    if (nd->args[2].present) {
      int64_t k;
      if (em_dim_is_const(&nd->args[2].i, &k) && k < 0) {
        em_dim kd = em_dim_const(k), s;
        em_dim_add(&in->d[d], &kd, &s);
        start = dim_c(c, &s);
      } else start = dim_c(c, &nd->args[2].i);
    }
    const char *step = dim_c(c, &nd->args[4].i);
    r.e[d] = idx_name(c, A(c, "%s + (%s) * %s", start, ix->e[d], step));
    return r;
  }
  case EM_OP_SELECT: {
    int d = axis_of(&nd->args[1], in->rank);
    int64_t k;
    const char *at;
    if (em_dim_is_const(&nd->args[2].i, &k) && k < 0) {
      em_dim kd = em_dim_const(k), s;
      em_dim_add(&in->d[d], &kd, &s);
      at = dim_c(c, &s);
    } else at = dim_c(c, &nd->args[2].i);
    for (int i = 0, j = 0; i < in->rank; i++) r.e[i] = i == d ? at : ix->e[j++];
    return r;
  }
  case EM_OP_CONTIGUOUS:
  case EM_OP_CLONE:
    for (int i = 0; i < in->rank; i++) r.e[i] = ix->e[i];
    return r;
  default: fail(c, "%s is not a view", em_op_name(nd->op)); return r;
  }
}

static const char *ew(ectx *c, const em_node *nd, const ivec *ix) {
  em_dtype od = V(c, nd->out)->dtype;
  const char *ct = ctype(od);
  const char *x = NULL, *y;
  switch (nd->op) {
  case EM_OP_ADD:
  case EM_OP_SUB: {
    x = operand(c, nd, 0, ix, od);
    y = operand(c, nd, 1, ix, od);
    const char *alpha = scalar_lit(c, &nd->args[2], od);
    int one = !nd->args[2].is_float && is_one(&nd->args[2].i);
    return A(c, "(%s)%s %s %s%s%s", ct, x, nd->op == EM_OP_ADD ? "+" : "-", one ? "" : alpha, one ? "" : " * ", y);
  }
  case EM_OP_MUL: return A(c, "(%s)%s * (%s)%s", ct, operand(c, nd, 0, ix, od), ct, operand(c, nd, 1, ix, od));
  case EM_OP_DIV: return A(c, "(%s)%s / (%s)%s", ct, operand(c, nd, 0, ix, od), ct, operand(c, nd, 1, ix, od));
  case EM_OP_POW: {
    x = operand(c, nd, 0, ix, od);
    const em_arg *e = &nd->args[1];
    int64_t k;
    if (!e->is_float && em_dim_is_const(&e->i, &k) && k == 2) return A(c, "(%s)%s * (%s)%s", ct, x, ct, x);
    return A(c, "powf((float)%s, (float)%s)", x, scalar_lit(c, e, EM_F32));
  }
  case EM_OP_CLAMP_MIN: return A(c, "fmaxf((float)%s, %s)", operand(c, nd, 0, ix, od), scalar_lit(c, &nd->args[1], EM_F32));
  case EM_OP_NEG: return A(c, "-(%s)%s", ct, operand(c, nd, 0, ix, od));
  case EM_OP_RECIPROCAL: return A(c, "1.0f / (float)%s", operand(c, nd, 0, ix, od));
  case EM_OP_RSQRT: return A(c, "1.0f / sqrtf((float)%s)", operand(c, nd, 0, ix, od));
  case EM_OP_SQRT: return A(c, "sqrtf((float)%s)", operand(c, nd, 0, ix, od));
  case EM_OP_EXP: return A(c, "expf((float)%s)", operand(c, nd, 0, ix, od));
  case EM_OP_SILU: x = operand(c, nd, 0, ix, od); return A(c, "(float)%s / (1.0f + expf(-(float)%s))", x, x);
  case EM_OP_SIGMOID: return A(c, "1.0f / (1.0f + expf(-(float)%s))", operand(c, nd, 0, ix, od));
  case EM_OP_TANH: return A(c, "tanhf((float)%s)", operand(c, nd, 0, ix, od));
  case EM_OP_COS: return A(c, "cosf((float)%s)", operand(c, nd, 0, ix, od));
  case EM_OP_SIN: return A(c, "sinf((float)%s)", operand(c, nd, 0, ix, od));
  case EM_OP_TO_COPY: return A(c, "(%s)%s", ct, val(c, nd->args[0].tensor, ix));
  case EM_OP_ARANGE:
  case EM_OP_ARANGE_START: {
    const em_arg *st = nd->op == EM_OP_ARANGE ? NULL : &nd->args[0];
    const char *s0 = st ? scalar_lit(c, st, od) : A(c, "(%s)0", ct);
    return A(c, "%s + (%s)%s", s0, ct, ix->e[0]);
  }
  case EM_OP_EMBEDDING:
  case EM_OP_INDEX_SELECT: {
    int emb = nd->op == EM_OP_EMBEDDING;
    int w = nd->args[0].tensor, ids = nd->args[emb ? 1 : 2].tensor;
    const em_shape *ws = S(c, w), *is = S(c, ids);
    ivec ii = {is->rank}, wi = {ws->rank};
    if (emb) {
      for (int i = 0; i < is->rank; i++) ii.e[i] = ix->e[i];
      wi.e[0] = A(c, "(long long)%s", val(c, ids, &ii));
      wi.e[1] = ix->e[ix->rank - 1];
    } else {
      int d = axis_of(&nd->args[1], ws->rank);
      if (is->rank) ii.e[0] = ix->e[d];
      for (int i = 0; i < ws->rank; i++) wi.e[i] = ix->e[i];
      wi.e[d] = A(c, "(long long)%s", val(c, ids, &ii));
    }
    return A(c, "(%s)%s", ct, val(c, w, &wi));
  }
  case EM_OP_CAT: {
    int d = axis_of(&nd->args[1], V(c, nd->out)->shape.rank);
    const char *res = A(c, "v%d", c->tmp++);
    line(c, "%s %s;", ct, res);
    const char *offs = "0LL";
    for (int k = 0; k < nd->args[0].n; k++) {
      int u = nd->args[0].tlist[k];
      const char *end = A(c, "(%s + %s)", offs, dim_c(c, &S(c, u)->d[d]));
      if (k < nd->args[0].n - 1) line(c, "%sif (%s < %s) {", k ? "} else " : "", ix->e[d], end);
      else line(c, "%s{", k ? "} else " : "");
      c->indent++;
      int mark = c->memo.n;
      ivec ui = *ix;
      ui.e[d] = A(c, "(%s - %s)", ix->e[d], offs); /* offs is parenthesized */
      line(c, "%s = (%s)%s;", res, ct, val(c, u, &ui));
      c->memo.n = mark; /* values computed inside a branch are not visible after it */
      c->indent--;
      offs = end;
    }
    line(c, "}");
    return res;
  }
  default: fail(c, "op %s has no elementwise emission", em_op_name(nd->op)); return "0";
  }
}

static const char *val(ectx *c, int v, const ivec *ix) {
  if (c->failed) return "0";
  const char *key = memo_key(c, v, ix);
  for (int i = c->memo.n - 1; i >= 0; i--)
    if (c->memo.v[i].v == v && !strcmp(c->memo.v[i].key, key)) return c->memo.v[i].var;
  const em_value *x = V(c, v);
  const char *expr;
  for (int j = 0; j < c->npre; j++)
    if (v == c->pre_v[j]) {
      /* a prologue row reduction: its value for row m of the block, computed before the K loop */
      const em_node *rn = &c->g->nodes.v[x->node];
      const em_shape *xs = S(c, rn->args[0].tensor);
      em_shape lead = *xs;
      lead.rank--;
      ivec li = {lead.rank};
      for (int i = 0; i < lead.rank; i++) li.e[i] = ix->e[i];
      return A(c, "%s[%s - m0]", c->pre_arr[j], linearize(c, &li, &lead));
    }
  if (v == c->anchor) {
    if (c->softmax_mx) {
      const em_node *nd = &c->g->nodes.v[x->node];
      const char *in = val(c, nd->args[0].tensor, ix);
      expr = A(c, "expf((float)%s - %s) / %s", in, c->softmax_mx, c->softmax_sum);
      expr = round_to(c, x->dtype, expr);
    } else {
      return c->anchor_var;
    }
  } else if (x->kind != EM_V_NODE) {
    int p = input_pos(c, v);
    const char *ld = A(c, "in%d[%s]", p, linearize(c, ix, &x->shape));
    expr = load_conv(c, x->dtype, ld);
    if (c->cache_mode == 1 && !c->cache_key) {
      c->cache_key = ld;
      const char *var = A(c, "v%d", c->tmp++);
      line(c, "const %s %s = %s; /* %s, kept for the second pass */", ctype(x->dtype), var, expr, x->name);
      line(c, "em_row[threadIdx.y][col] = (float)%s;", var);
      memo_ent m = {v, (char *)key, var};
      EM_VEC_PUSH(c->memo, m);
      return var;
    }
    if (c->cache_mode == 2 && c->cache_key && !strcmp(ld, c->cache_key)) expr = A(c, "(%s)em_row[threadIdx.y][col]", ctype(x->dtype));
  } else {
    const em_node *nd = &c->g->nodes.v[x->node];
    if (em_op_spec(nd->op)->args[0].kind == EM_ARG_T && nd->op != EM_OP_EMBEDDING && nd->op != EM_OP_INDEX_SELECT &&
        (nd->op == EM_OP_VIEW || nd->op == EM_OP_RESHAPE || nd->op == EM_OP_UNSAFE_VIEW || nd->op == EM_OP_TRANSPOSE ||
         nd->op == EM_OP_T || nd->op == EM_OP_PERMUTE || nd->op == EM_OP_EXPAND || nd->op == EM_OP_UNSQUEEZE ||
         nd->op == EM_OP_SQUEEZE || nd->op == EM_OP_SLICE || nd->op == EM_OP_SELECT || nd->op == EM_OP_CONTIGUOUS ||
         nd->op == EM_OP_CLONE)) {
      ivec u = view_back(c, nd, ix);
      return val(c, nd->args[0].tensor, &u);
    }
    switch (nd->op) {
    case EM_OP_MM:
    case EM_OP_BMM:
    case EM_OP_MATMUL:
    case EM_OP_LINEAR:
    case EM_OP_SDPA:
    case EM_OP_MEAN:
    case EM_OP_SUM:
    case EM_OP_AMAX:
    case EM_OP_VECTOR_NORM:
    case EM_OP_SOFTMAX:
    case EM_OP_SOFTMAX_INT:
      fail(c, "value '%s' (%s) is a second anchor inside the kernel", x->name, em_op_name(nd->op));
      return "0";
    default: break;
    }
    expr = round_to(c, x->dtype, ew(c, nd, ix));
  }
  const char *var = A(c, "v%d", c->tmp++);
  line(c, "const %s %s = %s; /* %s */", ctype(x->dtype), var, expr, x->name);
  memo_ent m = {v, (char *)key, var};
  EM_VEC_PUSH(c->memo, m);
  return var;
}

/* ---- alignment with the domain ---------------------------------------------------------------------- */

static int is_ew_same_index(em_op op) {
  switch (op) {
  case EM_OP_ADD: case EM_OP_SUB: case EM_OP_MUL: case EM_OP_DIV: case EM_OP_POW: case EM_OP_CLAMP_MIN:
  case EM_OP_NEG: case EM_OP_RECIPROCAL: case EM_OP_RSQRT: case EM_OP_SQRT: case EM_OP_EXP: case EM_OP_SILU:
  case EM_OP_SIGMOID: case EM_OP_TANH: case EM_OP_COS: case EM_OP_SIN: case EM_OP_TO_COPY: return 1;
  default: return 0;
  }
}

static int is_bijective_view(const em_node *nd, const em_graph *g) {
  switch (nd->op) {
  case EM_OP_VIEW: case EM_OP_RESHAPE: case EM_OP_UNSAFE_VIEW: case EM_OP_TRANSPOSE: case EM_OP_T:
  case EM_OP_PERMUTE: case EM_OP_UNSQUEEZE: case EM_OP_SQUEEZE: case EM_OP_CONTIGUOUS: case EM_OP_CLONE: return 1;
  default: return 0;
  }
  (void)g;
}

/* Input index -> output index of a bijective view. */
static ivec view_fwd(ectx *c, const em_node *nd, const ivec *ix) {
  const em_shape *in = S(c, nd->args[0].tensor), *o = &V(c, nd->out)->shape;
  ivec r = {o->rank};
  switch (nd->op) {
  case EM_OP_VIEW:
  case EM_OP_RESHAPE:
  case EM_OP_UNSAFE_VIEW: return unravel(c, linearize(c, ix, in), o);
  case EM_OP_TRANSPOSE: {
    int d0 = axis_of(&nd->args[1], in->rank), d1 = axis_of(&nd->args[2], in->rank);
    for (int i = 0; i < o->rank; i++) r.e[i] = ix->e[i];
    r.e[d0] = ix->e[d1];
    r.e[d1] = ix->e[d0];
    return r;
  }
  case EM_OP_T:
    for (int i = 0; i < o->rank; i++) r.e[i] = ix->e[o->rank - 1 - i];
    return r;
  case EM_OP_PERMUTE:
    for (int i = 0; i < o->rank; i++) r.e[i] = ix->e[axis_of_dim(&nd->args[1].ilist[i], in->rank)];
    return r;
  case EM_OP_UNSQUEEZE: {
    int d = axis_of(&nd->args[1], o->rank);
    for (int i = 0, k = 0; i < o->rank; i++) r.e[i] = i == d ? "0LL" : ix->e[k++];
    return r;
  }
  case EM_OP_SQUEEZE: {
    if (in->rank == o->rank) {
      for (int i = 0; i < o->rank; i++) r.e[i] = ix->e[i];
      return r;
    }
    int d = axis_of(&nd->args[1], in->rank);
    for (int i = 0, k = 0; i < in->rank; i++)
      if (i != d) r.e[k++] = ix->e[i];
    return r;
  }
  default:
    for (int i = 0; i < o->rank; i++) r.e[i] = ix->e[i];
    return r;
  }
}

/* Propagates the alignment from the seeded values (domain, anchor) over same-index elementwise ops and
 * bijective views, in both directions, until nothing changes. */
static void align(ectx *c) {
  const em_graph *g = c->g;
  for (int changed = 1; changed && !c->failed;) {
    changed = 0;
    for (int i = 0; i < g->nodes.n; i++) {
      const em_node *nd = &g->nodes.v[i];
      int o = nd->out;
      if (o == c->anchor) continue;
      const em_opspec *sp = em_op_spec(nd->op);
      if (!c->bij[o]) {
        if (is_ew_same_index(nd->op)) {
          for (int a = 0; a < sp->nargs; a++) {
            int isT = sp->args[a].kind == EM_ARG_T || (sp->args[a].kind == EM_ARG_TS && nd->args[a].is_tensor);
            if (!isT || !nd->args[a].present) continue;
            int u = nd->args[a].tensor;
            if (c->bij[u] && em_shape_eq(S(c, u), S(c, o))) {
              c->al[o] = c->al[u];
              c->bij[o] = changed = 1;
              break;
            }
          }
        } else if (is_bijective_view(nd, g) && c->bij[nd->args[0].tensor]) {
          c->al[o] = view_fwd(c, nd, &c->al[nd->args[0].tensor]);
          c->bij[o] = changed = 1;
        }
      }
      if (c->bij[o]) {
        if (is_ew_same_index(nd->op)) {
          for (int a = 0; a < sp->nargs; a++) {
            int isT = sp->args[a].kind == EM_ARG_T || (sp->args[a].kind == EM_ARG_TS && nd->args[a].is_tensor);
            if (!isT || !nd->args[a].present) continue;
            int u = nd->args[a].tensor;
            if (!c->bij[u] && u != c->anchor && em_shape_eq(S(c, u), S(c, o))) {
              c->al[u] = c->al[o];
              c->bij[u] = changed = 1;
            }
          }
        } else if (is_bijective_view(nd, g)) {
          int u = nd->args[0].tensor;
          if (!c->bij[u] && u != c->anchor) {
            c->al[u] = view_back(c, nd, &c->al[o]);
            c->bij[u] = changed = 1;
          }
        }
      }
    }
  }
}

/* Writes every kernel output whose alignment is known; rank_filter selects outputs by numel class:
 * 0 all aligned outputs, 1 only those aligned from the anchor seed (row values). */
static void write_outputs(ectx *c, const int *which, int nwhich) {
  for (int k = 0; k < nwhich; k++) {
    int j = which[k];
    int o = c->g->outputs.v[j];
    const em_value *x = V(c, o);
    const char *v = val(c, o, &c->al[o]);
    line(c, "out%d[%s] = %s;", j, linearize(c, &c->al[o], &x->shape), store_conv(c, x->dtype, v));
  }
}

static ivec domain_vars(ectx *c, const em_shape *s, const char *lin) {
  ivec u = unravel(c, lin, s), r = {s->rank};
  for (int i = 0; i < s->rank; i++) {
    r.e[i] = A(c, "x%d", i);
    line(c, "const long long x%d = %s;", i, u.e[i]);
  }
  return r;
}

static const char *numel_c(ectx *c, const em_shape *s) {
  em_dim n;
  if (em_shape_numel(s, &n)) return "0LL";
  return dim_c(c, &n);
}

static char *numel_text(ectx *c, const em_shape *s) {
  em_dim n;
  char buf[256];
  if (em_shape_numel(s, &n)) return A(c, "0");
  return A(c, "%s", em_dim_format(&c->g->syms, &n, buf, sizeof buf));
}

static void reset_alignment(ectx *c) {
  memset(c->bij, 0, sizeof(int) * (size_t)c->g->values.n);
}

/* Splits the kernel outputs into those aligned with the domain and the rest (an error unless handled). */
static int aligned_outputs(ectx *c, int *which) {
  int n = 0;
  for (int j = 0; j < c->g->outputs.n; j++) {
    int o = c->g->outputs.v[j];
    if (c->bij[o]) which[n++] = j;
  }
  return n;
}

/* ---- kernel kinds ------------------------------------------------------------------------------------ */

/* Pointwise: a grid-stride loop; each thread takes VEC consecutive elements, EPT times per loop trip. */
static void k_pointwise(ectx *c, em_launch *L) {
  int threads = em_knob_get(&c->t->knobs, "BLOCK", 256), vec = em_knob_get(&c->t->knobs, "VEC", 1),
      ept = em_knob_get(&c->t->knobs, "EPT", 1);
  if (vec < 1 || ept < 1) {
    fail(c, "VEC=%d and EPT=%d must be at least 1", vec, ept);
    return;
  }
  int o0 = c->g->outputs.v[0];
  const em_shape *ds = S(c, o0);
  L->block[0] = threads;
  snprintf(L->grid[0], sizeof L->grid[0], "cdiv(%s,%d)", numel_text(c, ds), threads * vec * ept);
  line(c, "const long long total = %s, stride = (long long)gridDim.x * blockDim.x * %d;", numel_c(c, ds), vec);
  line(c, "for (long long l0 = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * %d; l0 < total; l0 += stride * %d) {", vec,
       ept);
  c->indent++;
  line(c, "#pragma unroll");
  line(c, "for (int em_e = 0; em_e < %d; em_e++) {", ept);
  c->indent++;
  line(c, "#pragma unroll");
  line(c, "for (int em_v = 0; em_v < %d; em_v++) {", vec);
  c->indent++;
  line(c, "const long long lin = l0 + em_e * stride + em_v;");
  line(c, "if (lin >= total) break;");
  ivec d = domain_vars(c, ds, "lin");
  c->al[o0] = d;
  c->bij[o0] = 1;
  align(c);
  int which[EM_MAX_ARGS * 8] = {0}, n = aligned_outputs(c, which);
  if (n != c->g->outputs.n) fail(c, "a pointwise kernel's outputs must share one index space");
  write_outputs(c, which, n);
  c->indent--;
  line(c, "}");
  c->indent--;
  line(c, "}");
  c->indent--;
  line(c, "}");
}

static const char *red_init(em_op op) { return op == EM_OP_AMAX ? "-INFINITY" : "0.0f"; }

static void k_row(ectx *c, em_launch *L) {
  int threads = em_knob_get(&c->t->knobs, "THREADS", 256), rpb = em_knob_get(&c->t->knobs, "RPB", 1);
  int cache = em_knob_get(&c->t->knobs, "CACHE", 0);
  if (threads % 32 || rpb < 1 || threads * rpb > 1024) {
    fail(c, "THREADS=%d x RPB=%d: threads per row must be a multiple of 32, at most 1024 per block", threads, rpb);
    return;
  }
  int a = c->t->anchor;
  const em_node *an = &c->g->nodes.v[V(c, a)->node];
  int xin = an->args[0].tensor;
  const em_shape *xs = S(c, xin);
  int r = xs->rank;
  const char *Lc = dim_c(c, &xs->d[r - 1]);
  L->block[0] = threads;
  L->block[1] = rpb;
  em_shape lead = *xs;
  lead.rank = r - 1;
  snprintf(L->grid[0], sizeof L->grid[0], "cdiv(%s,%d)", numel_text(c, &lead), rpb);
  int softmax = an->op == EM_OP_SOFTMAX || an->op == EM_OP_SOFTMAX_INT;
  /* RPB rows per block, THREADS threads (x) per row; every thread runs the same loop trips so the
   * block-wide barriers of the reductions stay uniform, and 'live' guards the work of rows past the end */
  int64_t Lk = 0;
  if (cache) {
    if (!em_dim_is_const(&xs->d[r - 1], &Lk) || Lk * rpb * 4 > 49152) {
      fail(c, "CACHE=1 needs a constant row of at most %d floats per block", 49152 / 4 / rpb);
      return;
    }
    line(c, "__shared__ float em_row[%d][%lld];", rpb, (long long)Lk);
  }
  line(c, "__shared__ float em_red_all[%d][32];", rpb);
  line(c, "float *em_red = em_red_all[threadIdx.y];");
  line(c, "const long long rows = %s, L = %s;", numel_c(c, &lead), Lc);
  line(c, "for (long long rb = (long long)blockIdx.x * %d; rb < rows; rb += (long long)gridDim.x * %d) {", rpb, rpb);
  c->indent++;
  line(c, "const long long row = rb + threadIdx.y;");
  line(c, "const bool live = row < rows;");
  ivec pre = unravel(c, "row", &lead);
  ivec xi = {r};
  for (int i = 0; i < r - 1; i++) {
    xi.e[i] = A(c, "x%d", i);
    line(c, "const long long x%d = %s;", i, pre.e[i]);
  }
  xi.e[r - 1] = "col";
  int mark = c->memo.n;
  const char *red = "em_r";
  if (softmax) {
    line(c, "float em_mx = -INFINITY, em_sum = 0.0f;");
    line(c, "for (long long col = threadIdx.x; live && col < L; col += blockDim.x) {");
    c->indent++;
    line(c, "em_mx = fmaxf(em_mx, (float)%s);", val(c, xin, &xi));
    c->memo.n = mark;
    c->indent--;
    line(c, "}");
    line(c, "em_mx = em_block_max(em_mx, em_red);");
    line(c, "for (long long col = threadIdx.x; live && col < L; col += blockDim.x) {");
    c->indent++;
    line(c, "em_sum += expf((float)%s - em_mx);", val(c, xin, &xi));
    c->memo.n = mark;
    c->indent--;
    line(c, "}");
    line(c, "em_sum = em_block_sum(em_sum, em_red);");
    c->softmax_mx = "em_mx";
    c->softmax_sum = "em_sum";
  } else {
    line(c, "float em_acc = %s;", red_init(an->op));
    line(c, "for (long long col = threadIdx.x; live && col < L; col += blockDim.x) {");
    c->indent++;
    c->cache_mode = cache ? 1 : 0;
    const char *x = val(c, xin, &xi);
    c->cache_mode = 0;
    if (an->op == EM_OP_AMAX) line(c, "em_acc = fmaxf(em_acc, (float)%s);", x);
    else if (an->op == EM_OP_VECTOR_NORM) line(c, "em_acc += (float)%s * (float)%s;", x, x);
    else line(c, "em_acc += (float)%s;", x);
    c->memo.n = mark;
    c->indent--;
    line(c, "}");
    line(c, "em_acc = %s(em_acc, em_red);", an->op == EM_OP_AMAX ? "em_block_max" : "em_block_sum");
    const char *fin = an->op == EM_OP_MEAN ? "em_acc / (float)L" : an->op == EM_OP_VECTOR_NORM ? "sqrtf(em_acc)" : "em_acc";
    line(c, "const %s %s = %s;", ctype(V(c, a)->dtype), red, round_to(c, V(c, a)->dtype, fin));
    c->anchor_var = red;
  }
  /* full-row outputs: aligned with the reduction input (CACHE=1: the row's input from shared memory; each
   * thread reads back only the columns it stored, so no barrier is needed) */
  line(c, "for (long long col = threadIdx.x; live && col < L; col += blockDim.x) {");
  c->indent++;
  c->cache_mode = cache && !softmax ? 2 : 0;
  reset_alignment(c);
  c->al[xin] = xi;
  c->bij[xin] = 1;
  if (softmax) {
    c->al[a] = xi;
    c->bij[a] = 1;
  }
  align(c);
  int which[64] = {0}, n = aligned_outputs(c, which);
  write_outputs(c, which, n);
  c->cache_mode = 0;
  c->memo.n = mark;
  c->indent--;
  line(c, "}");
  /* per-row outputs (e.g. a kept reduction) aligned with the anchor */
  int done = n;
  if (!softmax && done < c->g->outputs.n) {
    int wrote[64];
    memcpy(wrote, which, sizeof(int) * (size_t)n);
    reset_alignment(c);
    ivec ai = {S(c, a)->rank};
    for (int i = 0; i < ai.rank; i++) ai.e[i] = i < r - 1 ? xi.e[i] : "0LL";
    c->al[a] = ai;
    c->bij[a] = 1;
    line(c, "if (live && threadIdx.x == 0) {");
    c->indent++;
    align(c);
    int w2[64], n2 = 0;
    for (int j = 0; j < c->g->outputs.n; j++) {
      int seen = 0;
      for (int k = 0; k < n; k++) seen |= wrote[k] == j;
      if (!seen && c->bij[c->g->outputs.v[j]]) w2[n2++] = j;
    }
    write_outputs(c, w2, n2);
    done += n2;
    c->memo.n = mark;
    c->indent--;
    line(c, "}");
  }
  if (done != c->g->outputs.n) fail(c, "an output of the row kernel is not aligned with its rows");
  line(c, "__syncthreads();");
  c->indent--;
  line(c, "}");
}

static void k_reduce(ectx *c, em_launch *L) {
  int threads = em_knob_get(&c->t->knobs, "BLOCK", 256);
  int a = c->t->anchor;
  const em_node *an = &c->g->nodes.v[V(c, a)->node];
  int xin = an->args[0].tensor;
  const em_shape *xs = S(c, xin), *os = S(c, a);
  int softmax = an->op == EM_OP_SOFTMAX || an->op == EM_OP_SOFTMAX_INT;
  int vn = an->op == EM_OP_VECTOR_NORM;
  int di = vn ? 2 : 1, ki = di + 1;
  int mark_r[MAXR] = {0};
  if (softmax) mark_r[axis_of(&an->args[1], xs->rank)] = 1;
  else if (!an->args[di].present || an->args[di].n == 0)
    for (int i = 0; i < xs->rank; i++) mark_r[i] = 1;
  else
    for (int k = 0; k < an->args[di].n; k++) mark_r[axis_of_dim(&an->args[di].ilist[k], xs->rank)] = 1;
  int keep = softmax ? 1 : an->args[ki].b;
  L->block[0] = threads;
  snprintf(L->grid[0], sizeof L->grid[0], "cdiv(%s,%d)", numel_text(c, os), threads);
  em_shape rs = {0};
  for (int i = 0; i < xs->rank; i++)
    if (mark_r[i]) rs.d[rs.rank++] = xs->d[i];
  line(c, "const long long total = %s, nred = %s;", numel_c(c, os), numel_c(c, &rs));
  line(c, "for (long long lin = (long long)blockIdx.x * blockDim.x + threadIdx.x; lin < total; lin += (long long)gridDim.x * blockDim.x) {");
  c->indent++;
  ivec d = domain_vars(c, os, "lin");
  int mark = c->memo.n;
  /* input index: kept dims from the output index, reduced dims from the loop counter */
  ivec xi = {xs->rank};
  int k = 0;
  line(c, "float em_acc = %s, em_mx = -INFINITY;", red_init(an->op));
  for (int pass = softmax ? 0 : 1; pass < 2; pass++) {
    line(c, "for (long long j = 0; j < nred; j++) {");
    c->indent++;
    ivec ri = unravel(c, "j", &rs);
    k = 0;
    for (int i = 0, rr = 0; i < xs->rank; i++) {
      if (mark_r[i]) {
        xi.e[i] = ri.e[rr++];
        if (keep) k++;
      } else xi.e[i] = d.e[k++];
    }
    const char *x = val(c, xin, &xi);
    if (softmax && pass == 0) line(c, "em_mx = fmaxf(em_mx, (float)%s);", x);
    else if (softmax) line(c, "em_acc += expf((float)%s - em_mx);", x);
    else if (an->op == EM_OP_AMAX) line(c, "em_acc = fmaxf(em_acc, (float)%s);", x);
    else if (vn) line(c, "em_acc += (float)%s * (float)%s;", x, x);
    else line(c, "em_acc += (float)%s;", x);
    c->memo.n = mark;
    c->indent--;
    line(c, "}");
  }
  if (softmax) {
    c->softmax_mx = "em_mx";
    c->softmax_sum = "em_acc";
  } else {
    const char *fin = an->op == EM_OP_MEAN ? "em_acc / (float)nred" : vn ? "sqrtf(em_acc)" : "em_acc";
    line(c, "const %s em_r = %s;", ctype(V(c, a)->dtype), round_to(c, V(c, a)->dtype, fin));
    c->anchor_var = "em_r";
  }
  c->al[a] = d;
  c->bij[a] = 1;
  align(c);
  int which[64] = {0}, n = aligned_outputs(c, which);
  if (n != c->g->outputs.n) fail(c, "an output of the reduce kernel is not aligned with the reduction");
  write_outputs(c, which, n);
  c->indent--;
  line(c, "}");
}

/* Contractions. MMA=0: the scalar tier, a TM x TN register tile per thread over float tiles in shared
 * memory. MMA=1: the warp tier, WM x WN warps each computing a (BM/WM) x (BN/WN) tile with
 * mma.sync.m16n8k16 (bf16/f16 in, f32 accumulation) on fragments loaded by ldmatrix from bf16/f16 tiles.
 * Both fill the tiles element by element through the operand's expression (views, a folded RMSNorm,
 * merged siblings' weights), masked at M, N and K edges, and share one epilogue. */
static void k_contraction(ectx *c, em_launch *L) {
  int mma = em_knob_get(&c->t->knobs, "MMA", 0);
  int BM = em_knob_get(&c->t->knobs, "BM", 64), BN = em_knob_get(&c->t->knobs, "BN", 64);
  int BK = em_knob_get(&c->t->knobs, "BK", 16), TM = em_knob_get(&c->t->knobs, "TM", 4), TN = em_knob_get(&c->t->knobs, "TN", 4);
  int WM = em_knob_get(&c->t->knobs, "WM", 2), WN = em_knob_get(&c->t->knobs, "WN", 2);
  int async = em_knob_get(&c->t->knobs, "ASYNC", 0), stages = em_knob_get(&c->t->knobs, "STAGES", 1);
  int threads;
  int a = c->t->anchor;
  em_dtype opdt = V(c, a)->dtype;
  const char *mma_t = opdt == EM_F16 ? "f16" : "bf16";
  if (mma) {
    if (opdt != EM_BF16 && opdt != EM_F16) {
      fail(c, "MMA=1 needs bf16/f16 operands, got %s", em_dtype_name(opdt));
      return;
    }
    if (BM % (16 * WM) || BN % (16 * WN) || BK % 16 || BK < 16) {
      fail(c, "MMA=1 needs BM %% (16*WM) == 0, BN %% (16*WN) == 0, BK %% 16 == 0 (BM=%d BN=%d BK=%d WM=%d WN=%d)", BM, BN,
           BK, WM, WN);
      return;
    }
    threads = 32 * WM * WN;
  } else {
    if (BM % TM || BN % TN) {
      fail(c, "BM=%d, BN=%d are not multiples of TM=%d, TN=%d", BM, BN, TM, TN);
      return;
    }
    threads = (BM / TM) * (BN / TN);
  }
  if (threads > 1024 || threads < 32) {
    fail(c, "%d threads is outside 32..1024", threads);
    return;
  }
  const em_node *an = &c->g->nodes.v[V(c, a)->node];
  const em_shape *os = S(c, a);
  int lin_op = an->op == EM_OP_LINEAR;
  int A_ = an->args[0].tensor, B_ = an->args[1].tensor;
  const em_shape *as = S(c, A_), *bs = S(c, B_);
  if (!lin_op && (as->rank < 2 || bs->rank < 2)) {
    fail(c, "matmul with a 1-d operand has no contraction emission");
    return;
  }
  /* merged siblings (MERGE_SIBLINGS=1): linears of the kernel reading the same operand, N side by side */
  int sib[4], nsib = 0;
  int64_t sibN[4], sibOff[5] = {0};
  if (lin_op)
    for (int i = 0; i < c->g->nodes.n && nsib < 4; i++) {
      const em_node *sn = &c->g->nodes.v[i];
      if (sn->op == EM_OP_LINEAR && sn->args[0].tensor == A_) {
        const em_shape *ws = S(c, sn->args[1].tensor);
        if (!em_dim_is_const(&ws->d[0], &sibN[nsib])) {
          fail(c, "merged siblings need constant output widths");
          return;
        }
        sib[nsib] = sn->out;
        sibOff[nsib + 1] = sibOff[nsib] + sibN[nsib];
        nsib++;
      }
    }
  if (nsib == 0) {
    sib[0] = a;
    nsib = 1;
  }
  /* out = [batch..., M-dims..., N]; linear folds all leading dims into M, the others keep batch dims */
  int r = os->rank;
  em_shape mdims = {0}, bdims = {0};
  if (lin_op)
    for (int i = 0; i < r - 1; i++) mdims.d[mdims.rank++] = os->d[i];
  else {
    for (int i = 0; i < r - 2; i++) bdims.d[bdims.rank++] = os->d[i];
    mdims.d[mdims.rank++] = os->d[r - 2];
  }
  const em_dim *Kd = &as->d[as->rank - 1];
  L->block[0] = threads;
  if (nsib > 1) snprintf(L->grid[0], sizeof L->grid[0], "cdiv(%lld,%d)", (long long)sibOff[nsib], BN);
  else snprintf(L->grid[0], sizeof L->grid[0], "cdiv(%s,%d)", em_dim_format(&c->g->syms, &os->d[r - 1], (char[128]){0}, 128), BN);
  snprintf(L->grid[1], sizeof L->grid[1], "cdiv(%s,%d)", numel_text(c, &mdims), BM);
  snprintf(L->grid[2], sizeof L->grid[2], "%s", bdims.rank ? numel_text(c, &bdims) : "1");
  /* ASYNC=1: operand rows copied 16 bytes at a time with cp.async into a STAGES-deep ring of tiles; needs
   * the warp tier and operands that are kernel inputs with a contiguous K (a multiple of 8) */
  if (async) {
    int64_t kc = 0;
    int a_in = V(c, A_)->kind != EM_V_NODE;
    int b_in = 1;
    for (int j = 0; j < nsib; j++) b_in &= V(c, c->g->nodes.v[V(c, sib[j])->node].args[1].tensor)->kind != EM_V_NODE;
    if (!mma || !lin_op || !a_in || !b_in || !em_dim_is_const(Kd, &kc) || kc % 8 || stages < 1 || stages > 4) {
      fail(c, "ASYNC=1 needs MMA=1, a linear whose operands are kernel inputs, K a multiple of 8, STAGES 1..4");
      return;
    }
    line(c, "__shared__ __align__(16) unsigned short As[%d][%d][%d], Bs[%d][%d][%d];", stages, BM, BK + 8, stages, BN, BK + 8);
  } else if (mma) line(c, "__shared__ __align__(16) unsigned short As[%d][%d], Bs[%d][%d];", BM, BK + 8, BN, BK + 8);
  else line(c, "__shared__ float As[%d][%d], Bs[%d][%d];", BK, BM + 1, BK, BN + 1);
  line(c, "const long long M = %s, N = %s, K = %s;", numel_c(c, &mdims),
       nsib > 1 ? A(c, "%lldLL", (long long)sibOff[nsib]) : dim_c(c, &os->d[r - 1]), dim_c(c, Kd));
  line(c, "const long long m0 = (long long)blockIdx.y * %d, n0 = (long long)blockIdx.x * %d, bz = blockIdx.z;", BM, BN);
  int FM = BM / WM / 16, FN = BN / WN / 8;
  if (mma) {
    line(c, "const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5, wm = wid / %d, wn = wid %% %d;", WN, WN);
    line(c, "float acc[%d][%d][4];", FM, FN);
    line(c, "#pragma unroll");
    line(c, "for (int i = 0; i < %d; i++)", FM);
    line(c, "  for (int j = 0; j < %d; j++)", FN);
    line(c, "    for (int q = 0; q < 4; q++) acc[i][j][q] = 0.0f;");
  } else {
    line(c, "const int tid = threadIdx.x, tr = tid / %d, tc = tid %% %d;", BN / TN, BN / TN);
    line(c, "float acc[%d][%d];", TM, TN);
    line(c, "#pragma unroll");
    line(c, "for (int i = 0; i < %d; i++)", TM);
    line(c, "  for (int j = 0; j < %d; j++) acc[i][j] = 0.0f;", TN);
  }
  ivec bz = unravel(c, "bz", &bdims);
  /* prologue row reductions (a folded RMSNorm): one warp per row of the block, before the K loop */
  for (int i = 0; i < c->g->nodes.n && !c->failed; i++) {
    const em_node *rn = &c->g->nodes.v[i];
    if (rn->out == a || !(rn->op == EM_OP_MEAN || rn->op == EM_OP_SUM || rn->op == EM_OP_AMAX || rn->op == EM_OP_VECTOR_NORM))
      continue;
    int vn = rn->op == EM_OP_VECTOR_NORM, di = vn ? 2 : 1;
    const em_shape *xs = S(c, rn->args[0].tensor);
    if (!rn->args[di].present || rn->args[di].n != 1 || axis_of_dim(&rn->args[di].ilist[0], xs->rank) != xs->rank - 1 ||
        c->npre == 4) {
      fail(c, "a reduction in a contraction's prologue must be over the last dim");
      return;
    }
    int j = c->npre++;
    c->pre_v[j] = rn->out;
    c->pre_arr[j] = A(c, "em_pre%d", j);
    em_shape lead = *xs;
    lead.rank--;
    line(c, "__shared__ float em_pre%d[%d];", j, BM);
    line(c, "for (int rr = tid >> 5; rr < %d; rr += %d) {", BM, threads / 32);
    c->indent++;
    line(c, "const long long m = m0 + rr;");
    line(c, "float em_acc = %s;", rn->op == EM_OP_AMAX ? "-INFINITY" : "0.0f");
    line(c, "if (m < M) {");
    c->indent++;
    line(c, "for (long long col = tid & 31; col < %s; col += 32) {", dim_c(c, &xs->d[xs->rank - 1]));
    c->indent++;
    int mark0 = c->memo.n;
    ivec li = unravel(c, "m", &lead), xi = {xs->rank};
    for (int q = 0; q < lead.rank; q++) xi.e[q] = li.e[q];
    xi.e[xs->rank - 1] = "col";
    const char *xv = val(c, rn->args[0].tensor, &xi);
    if (rn->op == EM_OP_AMAX) line(c, "em_acc = fmaxf(em_acc, (float)%s);", xv);
    else if (vn) line(c, "em_acc += (float)%s * (float)%s;", xv, xv);
    else line(c, "em_acc += (float)%s;", xv);
    c->memo.n = mark0;
    c->indent--;
    line(c, "}");
    c->indent--;
    line(c, "}");
    if (rn->op == EM_OP_AMAX)
      line(c, "for (int o = 16; o > 0; o >>= 1) em_acc = fmaxf(em_acc, __shfl_xor_sync(0xffffffffu, em_acc, o));");
    else
      line(c, "for (int o = 16; o > 0; o >>= 1) em_acc += __shfl_xor_sync(0xffffffffu, em_acc, o);");
    const char *fin = rn->op == EM_OP_MEAN ? A(c, "em_acc / (float)%s", dim_c(c, &xs->d[xs->rank - 1]))
                      : vn                  ? "sqrtf(em_acc)"
                                            : "em_acc";
    line(c, "if ((tid & 31) == 0) em_pre%d[rr] = %s;", j, round_to(c, V(c, rn->out)->dtype, fin));
    c->indent--;
    line(c, "}");
  }
  if (c->npre) line(c, "__syncthreads();");
  if (async) {
    int ap = input_pos(c, A_);
    line(c, "const int nk = (int)((K + %d - 1) / %d);", BK, BK);
    /* one tile into ring slot st: A rows m0.., B rows n0.. (each merged sibling from its own weight) */
    line(c, "auto em_load = [&](int st, long long k0) {");
    c->indent++;
    line(c, "for (int e = tid; e < %d; e += %d) {", BM * BK / 8, threads);
    line(c, "  const int r = e / %d, cc = (e %% %d) * 8;", BK / 8, BK / 8);
    line(c, "  const long long m = m0 + r, k = k0 + cc;");
    line(c, "  const bool ok = m < M && k < K;");
    line(c, "  em_cp_async16(&As[st][r][cc], in%d + (ok ? m * K + k : 0), ok ? 16 : 0);", ap);
    line(c, "}");
    line(c, "for (int e = tid; e < %d; e += %d) {", BN * BK / 8, threads);
    line(c, "  const int r = e / %d, cc = (e %% %d) * 8;", BK / 8, BK / 8);
    line(c, "  const long long n = n0 + r, k = k0 + cc;");
    line(c, "  const bool ok = n < N && k < K;");
    if (nsib > 1) {
      sbuf chain = {0};
      for (int j = 0; j < nsib; j++) {
        int wp = input_pos(c, c->g->nodes.v[V(c, sib[j])->node].args[1].tensor);
        if (j < nsib - 1) sb_add(&chain, "n < %lldLL ? in%d + (n - %lldLL) * K + k : ", (long long)sibOff[j + 1], wp, (long long)sibOff[j]);
        else sb_add(&chain, "in%d + (n - %lldLL) * K + k", wp, (long long)sibOff[j]);
      }
      line(c, "  em_cp_async16(&Bs[st][r][cc], ok ? (%s) : in%d, ok ? 16 : 0);", chain.s,
           input_pos(c, c->g->nodes.v[V(c, sib[0])->node].args[1].tensor));
      EM_VEC_PUSH(c->arena, chain.s);
    } else {
      line(c, "  em_cp_async16(&Bs[st][r][cc], in%d + (ok ? n * K + k : 0), ok ? 16 : 0);", input_pos(c, B_));
    }
    line(c, "}");
    c->indent--;
    line(c, "};");
    for (int st = 0; st < stages - 1; st++) {
      line(c, "if (%d < nk) em_load(%d, %dLL);", st, st, st * BK);
      line(c, "em_cp_commit();");
    }
    line(c, "for (int kt = 0; kt < nk; kt++) {");
    c->indent++;
    line(c, "const int st = kt %% %d;", stages);
    if (stages == 1) {
      line(c, "em_load(0, (long long)kt * %d);", BK);
      line(c, "em_cp_commit();");
    }
    line(c, "em_cp_wait<%d>();", stages > 1 ? stages - 2 : 0);
    line(c, "__syncthreads();");
    if (stages > 1) {
      line(c, "if (kt + %d < nk) em_load((kt + %d) %% %d, (long long)(kt + %d) * %d);", stages - 1, stages - 1, stages,
           stages - 1, BK);
      line(c, "em_cp_commit();");
    }
    line(c, "#pragma unroll");
    line(c, "for (int kk = 0; kk < %d; kk += 16) {", BK);
    line(c, "  unsigned af[%d][4], bf[%d][2];", FM, FN);
    line(c, "  #pragma unroll");
    line(c, "  for (int i = 0; i < %d; i++)", FM);
    line(c, "    em_ldsm_x4(af[i], &As[st][wm * %d + i * 16 + (lane & 15)][kk + (lane >> 4) * 8]);", BM / WM);
    line(c, "  #pragma unroll");
    line(c, "  for (int j = 0; j < %d; j += 2) {", FN);
    line(c, "    unsigned t4[4];");
    line(c, "    em_ldsm_x4(t4, &Bs[st][wn * %d + j * 8 + (lane >> 4) * 8 + (lane & 7)][kk + ((lane >> 3) & 1) * 8]);", BN / WN);
    line(c, "    bf[j][0] = t4[0]; bf[j][1] = t4[1]; bf[j + 1][0] = t4[2]; bf[j + 1][1] = t4[3];");
    line(c, "  }");
    line(c, "  #pragma unroll");
    line(c, "  for (int i = 0; i < %d; i++)", FM);
    line(c, "    #pragma unroll");
    line(c, "    for (int j = 0; j < %d; j++) em_mma_%s(acc[i][j], af[i], bf[j]);", FN, mma_t);
    line(c, "}");
    if (stages == 1) line(c, "__syncthreads();");
    c->indent--;
    line(c, "}");
    line(c, "em_cp_wait<0>();");
    goto epilogue;
  }
  line(c, "for (long long k0 = 0; k0 < K; k0 += %d) {", BK);
  c->indent++;
  int mark = c->memo.n;
  /* A tile: element (m, k) of the left operand */
  line(c, "for (int e = tid; e < %d; e += %d) {", BM * BK, threads);
  c->indent++;
  line(c, "const int mm = e / %d, kk = e %% %d;", BK, BK);
  line(c, "const long long m = m0 + mm, k = k0 + kk;");
  line(c, "float av = 0.0f;");
  line(c, "if (m < M && k < K) {");
  c->indent++;
  {
    ivec mi = unravel(c, "m", &mdims), ai = {as->rank};
    em_shape outm = *os;
    if (lin_op) {
      for (int i = 0; i < as->rank - 1; i++) ai.e[i] = mi.e[i];
    } else {
      ivec full = {r};
      for (int i = 0; i < bdims.rank; i++) full.e[i] = bz.e[i];
      full.e[r - 2] = "m";
      full.e[r - 1] = "0LL";
      ivec bb = bcast(c, &full, &outm, as);
      for (int i = 0; i < as->rank - 1; i++) ai.e[i] = bb.e[i];
      ai.e[as->rank - 2] = "m";
    }
    ai.e[as->rank - 1] = "k";
    line(c, "av = (float)%s;", val(c, A_, &ai));
  }
  c->memo.n = mark;
  c->indent--;
  line(c, "}");
  if (mma) line(c, "As[mm][kk] = %s;", opdt == EM_F16 ? "em_f2h(av)" : "em_f2bf(av)");
  else line(c, "As[kk][mm] = av;");
  c->indent--;
  line(c, "}");
  /* B tile: element (n, k) of the right operand (weight [N, K] for linear, [.., K, N] otherwise) */
  line(c, "for (int e = tid; e < %d; e += %d) {", BN * BK, threads);
  c->indent++;
  line(c, "const int nn = e / %d, kk = e %% %d;", BK, BK);
  line(c, "const long long n = n0 + nn, k = k0 + kk;");
  line(c, "float bv = 0.0f;");
  line(c, "if (n < N && k < K) {");
  c->indent++;
  {
    ivec bi = {bs->rank};
    if (lin_op && nsib > 1) {
      for (int j = 0; j < nsib; j++) {
        const em_node *sn = &c->g->nodes.v[V(c, sib[j])->node];
        if (j < nsib - 1) line(c, "%sif (n < %lldLL) {", j ? "} else " : "", (long long)sibOff[j + 1]);
        else line(c, "} else {");
        c->indent++;
        int m2 = c->memo.n;
        ivec bj = {2, {A(c, "(n - %lldLL)", (long long)sibOff[j]), "k"}};
        line(c, "bv = (float)%s;", val(c, sn->args[1].tensor, &bj));
        c->memo.n = m2;
        c->indent--;
      }
      line(c, "}");
    } else if (lin_op) {
      bi.e[0] = "n";
      bi.e[1] = "k";
    } else {
      ivec full = {r};
      for (int i = 0; i < bdims.rank; i++) full.e[i] = bz.e[i];
      full.e[r - 2] = "0LL";
      full.e[r - 1] = "n";
      ivec bb = bcast(c, &full, os, bs);
      for (int i = 0; i < bs->rank; i++) bi.e[i] = bb.e[i];
      bi.e[bs->rank - 2] = "k";
      bi.e[bs->rank - 1] = "n";
    }
    if (!(lin_op && nsib > 1)) line(c, "bv = (float)%s;", val(c, B_, &bi));
  }
  c->memo.n = mark;
  c->indent--;
  line(c, "}");
  if (mma) line(c, "Bs[nn][kk] = %s;", opdt == EM_F16 ? "em_f2h(bv)" : "em_f2bf(bv)");
  else line(c, "Bs[kk][nn] = bv;");
  c->indent--;
  line(c, "}");
  line(c, "__syncthreads();");
  if (mma) {
    line(c, "#pragma unroll");
    line(c, "for (int kk = 0; kk < %d; kk += 16) {", BK);
    line(c, "  unsigned af[%d][4], bf[%d][2];", FM, FN);
    line(c, "  #pragma unroll");
    line(c, "  for (int i = 0; i < %d; i++)", FM);
    line(c, "    em_ldsm_x4(af[i], &As[wm * %d + i * 16 + (lane & 15)][kk + (lane >> 4) * 8]);", BM / WM);
    line(c, "  #pragma unroll");
    line(c, "  for (int j = 0; j < %d; j += 2) {", FN);
    line(c, "    unsigned t4[4];");
    line(c, "    em_ldsm_x4(t4, &Bs[wn * %d + j * 8 + (lane >> 4) * 8 + (lane & 7)][kk + ((lane >> 3) & 1) * 8]);", BN / WN);
    line(c, "    bf[j][0] = t4[0]; bf[j][1] = t4[1]; bf[j + 1][0] = t4[2]; bf[j + 1][1] = t4[3];");
    line(c, "  }");
    line(c, "  #pragma unroll");
    line(c, "  for (int i = 0; i < %d; i++)", FM);
    line(c, "    #pragma unroll");
    line(c, "    for (int j = 0; j < %d; j++) em_mma_%s(acc[i][j], af[i], bf[j]);", FN, mma_t);
    line(c, "}");
  } else {
  line(c, "#pragma unroll");
  line(c, "for (int kk = 0; kk < %d; kk++) {", BK);
  line(c, "  float ar[%d], br[%d];", TM, TN);
  line(c, "  #pragma unroll");
  line(c, "  for (int i = 0; i < %d; i++) ar[i] = As[kk][tr * %d + i];", TM, TM);
  line(c, "  #pragma unroll");
  line(c, "  for (int j = 0; j < %d; j++) br[j] = Bs[kk][tc * %d + j];", TN, TN);
  line(c, "  #pragma unroll");
  line(c, "  for (int i = 0; i < %d; i++)", TM);
  line(c, "    #pragma unroll");
  line(c, "    for (int j = 0; j < %d; j++) acc[i][j] += ar[i] * br[j];", TN);
  line(c, "}");
  }
  line(c, "__syncthreads();");
  c->indent--;
  line(c, "}");
epilogue:;
  /* epilogue: every accumulator element (m, n) of this thread */
  const char *accel = mma ? "acc[i][j][q]" : "acc[i][j]";
  line(c, "#pragma unroll");
  line(c, "for (int i = 0; i < %d; i++) {", mma ? FM : TM);
  c->indent++;
  line(c, "#pragma unroll");
  line(c, "for (int j = 0; j < %d; j++) {", mma ? FN : TN);
  c->indent++;
  if (mma) {
    line(c, "#pragma unroll");
    line(c, "for (int q = 0; q < 4; q++) {");
    c->indent++;
    line(c, "const long long m = m0 + wm * %d + i * 16 + (lane >> 2) + (q >> 1) * 8, n = n0 + wn * %d + j * 8 + (lane & 3) * 2 + (q & 1);",
         BM / WM, BN / WN);
  } else {
    line(c, "const long long m = m0 + tr * %d + i, n = n0 + tc * %d + j;", TM, TN);
  }
  line(c, "if (m >= M || n >= N) continue;");
  ivec mi = unravel(c, "m", &mdims);
  int written[64] = {0}, nwritten = 0;
  for (int j = 0; j < nsib && !c->failed; j++) {
    const em_node *sn = &c->g->nodes.v[V(c, sib[j])->node];
    const char *nl = "n";
    if (nsib > 1) {
      line(c, "%sif (n < %lldLL) {", j ? "} else " : "", (long long)sibOff[j + 1]);
      c->indent++;
      line(c, "const long long nl = n - %lldLL;", (long long)sibOff[j]);
      nl = "nl";
    }
    int m2 = c->memo.n;
    const char *accv = accel;
    if (lin_op && sn->args[2].present) {
      ivec bi = {1, {nl}};
      accv = A(c, "(%s + (float)%s)", accel, val(c, sn->args[2].tensor, &bi));
    }
    line(c, "const %s em_r = %s;", ctype(V(c, sib[j])->dtype), round_to(c, V(c, sib[j])->dtype, accv));
    c->anchor = sib[j];
    c->anchor_var = "em_r";
    ivec di = {r};
    for (int i = 0; i < bdims.rank; i++) di.e[i] = bz.e[i];
    for (int i = 0; i < mdims.rank; i++) di.e[bdims.rank + i] = mi.e[i];
    di.e[r - 1] = nl;
    reset_alignment(c);
    c->al[sib[j]] = di;
    c->bij[sib[j]] = 1;
    align(c);
    int which[64] = {0}, n = 0;
    for (int q = 0; q < c->g->outputs.n; q++)
      if (!written[q] && c->bij[c->g->outputs.v[q]]) {
        which[n++] = q;
        written[q] = 1;
      }
    nwritten += n;
    write_outputs(c, which, n);
    c->memo.n = m2;
    if (nsib > 1) c->indent--;
  }
  if (nsib > 1) line(c, "}");
  if (nwritten != c->g->outputs.n) fail(c, "an output of the contraction is not aligned with its result");
  if (mma) {
    c->indent--;
    line(c, "}");
  }
  c->indent--;
  line(c, "}");
  c->indent--;
  line(c, "}");
}

/* Scalar attention: a block of QROWS query rows of one (batch, head); each thread keeps its query row and an
 * f32 accumulator in registers and runs an online softmax over the keys. KV_TILE > 0 stages KV_TILE keys and
 * values in shared memory, loaded by the whole block; causal blocks stop at their last row's diagonal. */
static void k_attention(ectx *c, em_launch *L) {
  int threads = em_knob_get(&c->t->knobs, "QROWS", 64), kvt = em_knob_get(&c->t->knobs, "KV_TILE", 0);
  int a = c->t->anchor;
  const em_node *an = &c->g->nodes.v[V(c, a)->node];
  int q = an->args[0].tensor, k = an->args[1].tensor, v = an->args[2].tensor;
  const em_shape *qs = S(c, q), *ks = S(c, k), *vs = S(c, v), *os = S(c, a);
  int r = qs->rank;
  int64_t E, Ev;
  if (!em_dim_is_const(&qs->d[r - 1], &E) || !em_dim_is_const(&vs->d[r - 1], &Ev) || E > 256 || Ev > 256) {
    fail(c, "attention needs constant head dims up to 256");
    return;
  }
  if (kvt < 0 || kvt * (E + Ev) * 4 > 49152) {
    fail(c, "KV_TILE=%d needs %lld B of shared memory", kvt, (long long)(kvt * (E + Ev) * 4));
    return;
  }
  double scale = an->args[6].present ? an->args[6].f : 1.0 / sqrt((double)E);
  int causal = an->args[5].b, gqa = an->args[7].b;
  em_shape bat = *os;
  bat.rank = r - 2;
  L->block[0] = threads;
  snprintf(L->grid[0], sizeof L->grid[0], "cdiv(%s,%d)", em_dim_format(&c->g->syms, &os->d[r - 2], (char[128]){0}, 128), threads);
  snprintf(L->grid[1], sizeof L->grid[1], "%s", bat.rank ? numel_text(c, &bat) : "1");
  line(c, "const long long Lq = %s, S = %s;", dim_c(c, &os->d[r - 2]), dim_c(c, &ks->d[r - 2]));
  line(c, "const long long l = (long long)blockIdx.x * %d + threadIdx.x, bh = blockIdx.y;", threads);
  line(c, "const bool live = l < Lq;");
  ivec bi = unravel(c, "bh", &bat);
  ivec oi = {r};
  for (int i = 0; i < r - 2; i++) {
    oi.e[i] = A(c, "x%d", i);
    line(c, "const long long x%d = %s;", i, bi.e[i]);
  }
  oi.e[r - 2] = "l";
  line(c, "float qr[%lld], acc[%lld];", (long long)E, (long long)Ev);
  int mark = c->memo.n;
  line(c, "for (int e = 0; e < %lld; e++) {", (long long)E);
  c->indent++;
  ivec qi = oi;
  qi.e[r - 1] = "e";
  line(c, "qr[e] = live ? (float)%s : 0.0f;", val(c, q, &qi));
  c->memo.n = mark;
  c->indent--;
  line(c, "}");
  line(c, "for (int e = 0; e < %lld; e++) acc[e] = 0.0f;", (long long)Ev);
  line(c, "float em_m = -INFINITY, em_l = 0.0f;");
  line(c, "const long long send = %s;", causal ? "(l + 1 < S ? l + 1 : S)" : "S");
  /* key/value index: batch dims broadcast from the output, the kv head divided for GQA */
  ivec full = oi;
  full.e[r - 2] = "s";
  full.e[r - 1] = "0LL";
  ivec kb = bcast(c, &full, os, ks), vb = bcast(c, &full, os, vs);
  if (gqa && r >= 3 && !em_dim_eq(&qs->d[r - 3], &ks->d[r - 3])) {
    const char *ratio = A(c, "(%s / %s)", dim_c(c, &qs->d[r - 3]), dim_c(c, &ks->d[r - 3]));
    kb.e[r - 3] = A(c, "(%s / %s)", oi.e[r - 3], ratio);
    vb.e[r - 3] = kb.e[r - 3];
  }
  ivec kk = kb, vv = vb;
  kk.e[r - 2] = "s";
  kk.e[r - 1] = "e";
  vv.e[r - 2] = "s";
  vv.e[r - 1] = "e";
  const char *kval = "0", *vval = "0";
  if (kvt > 0) {
    line(c, "__shared__ float Ks[%d][%lld], Vs[%d][%lld];", kvt, (long long)E, kvt, (long long)Ev);
    line(c, "const long long bend = %s;",
         causal ? A(c, "((long long)blockIdx.x * %d + %d < S ? (long long)blockIdx.x * %d + %d : S)", threads, threads, threads, threads)
                : "S");
    line(c, "for (long long s0 = 0; s0 < bend; s0 += %d) {", kvt);
    c->indent++;
    line(c, "for (int t = threadIdx.x; t < %lld; t += %d) {", (long long)(kvt * (E > Ev ? E : Ev)), threads);
    c->indent++;
    line(c, "const int ss = t / %lld, e = t %% %lld;", (long long)(E > Ev ? E : Ev), (long long)(E > Ev ? E : Ev));
    line(c, "const long long s = s0 + ss;");
    /* both loads in one scope: their index temporaries are shared, forgotten only when the loop closes */
    line(c, "if (s < S && e < %lld) Ks[ss][e] = (float)%s;", (long long)E, val(c, k, &kk));
    line(c, "if (s < S && e < %lld) Vs[ss][e] = (float)%s;", (long long)Ev, val(c, v, &vv));
    c->memo.n = mark;
    c->indent--;
    line(c, "}");
    line(c, "__syncthreads();");
    line(c, "for (int ss = 0; live && ss < %d; ss++) {", kvt);
    c->indent++;
    line(c, "const long long s = s0 + ss;");
    line(c, "if (s >= send) break;");
    kval = "Ks[ss][e]";
    vval = "Vs[ss][e]";
  } else {
    line(c, "for (long long s = 0; live && s < send; s++) {");
    c->indent++;
  }
  line(c, "float sc = 0.0f;");
  line(c, "for (int e = 0; e < %lld; e++) {", (long long)E);
  c->indent++;
  line(c, "sc += qr[e] * (float)%s;", kvt > 0 ? kval : val(c, k, &kk));
  c->memo.n = mark;
  c->indent--;
  line(c, "}");
  line(c, "sc *= %.17gf;", scale);
  if (an->args[3].present) {
    int m = an->args[3].tensor;
    ivec full2 = oi;
    full2.e[r - 1] = "s";
    ivec mi = bcast(c, &full2, os, S(c, m));
    const char *mv = val(c, m, &mi);
    if (V(c, m)->dtype == EM_BOOL) line(c, "if (!(%s)) continue;", mv);
    else line(c, "sc += (float)%s;", mv);
  }
  line(c, "const float mn = fmaxf(em_m, sc), corr = expf(em_m - mn), p = expf(sc - mn);");
  line(c, "em_l = em_l * corr + p;");
  line(c, "for (int e = 0; e < %lld; e++) {", (long long)Ev);
  c->indent++;
  line(c, "acc[e] = acc[e] * corr + p * (float)%s;", kvt > 0 ? vval : val(c, v, &vv));
  c->memo.n = mark;
  c->indent--;
  line(c, "}");
  line(c, "em_m = mn;");
  c->memo.n = mark;
  c->indent--;
  line(c, "}");
  if (kvt > 0) {
    line(c, "__syncthreads();");
    c->indent--;
    line(c, "}");
  }
  line(c, "if (!live) return;");
  line(c, "for (int ev = 0; ev < %lld; ev++) {", (long long)Ev);
  c->indent++;
  line(c, "const %s em_r = %s;", ctype(V(c, a)->dtype), round_to(c, V(c, a)->dtype, "(em_l > 0.0f ? acc[ev] / em_l : 0.0f)"));
  c->anchor_var = "em_r";
  ivec di = oi;
  di.e[r - 1] = "ev";
  c->al[a] = di;
  c->bij[a] = 1;
  align(c);
  int which[64] = {0}, n = aligned_outputs(c, which);
  if (n != c->g->outputs.n) fail(c, "an output of the attention kernel is not aligned with its result");
  write_outputs(c, which, n);
  c->memo.n = mark;
  c->indent--;
  line(c, "}");
}

static const char PRELUDE[] =
    "/* generated by emmy: scalar tier */\n"
    "#ifndef INFINITY\n#define INFINITY __int_as_float(0x7f800000)\n#endif\n"
    "static __device__ __forceinline__ float em_bf2f(unsigned short x) { return __uint_as_float(((unsigned)x) << 16); }\n"
    "static __device__ __forceinline__ unsigned short em_f2bf(float f) { unsigned short r; asm(\"cvt.rn.bf16.f32 %0, %1;\" : \"=h\"(r) : \"f\"(f)); return r; }\n"
    "static __device__ __forceinline__ float em_h2f(unsigned short x) { float f; asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(x)); return f; }\n"
    "static __device__ __forceinline__ unsigned short em_f2h(float f) { unsigned short r; asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(r) : \"f\"(f)); return r; }\n"
    "static __device__ __forceinline__ float em_rbf(float f) { return em_bf2f(em_f2bf(f)); }\n"
    "static __device__ __forceinline__ float em_rh(float f) { return em_h2f(em_f2h(f)); }\n"
    "static __device__ __forceinline__ unsigned em_smem(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }\n"
    "static __device__ __forceinline__ void em_ldsm_x4(unsigned *r, const void *p) {\n"
    "  asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\"\n"
    "               : \"=r\"(r[0]), \"=r\"(r[1]), \"=r\"(r[2]), \"=r\"(r[3]) : \"r\"(em_smem(p)));\n"
    "}\n"
    "static __device__ __forceinline__ void em_cp_async16(void *dst, const void *src, int bytes) {\n"
    "  asm volatile(\"cp.async.cg.shared.global [%0], [%1], 16, %2;\" :: \"r\"(em_smem(dst)), \"l\"(src), \"r\"(bytes));\n"
    "}\n"
    "static __device__ __forceinline__ void em_cp_commit() { asm volatile(\"cp.async.commit_group;\"); }\n"
    "template <int N> static __device__ __forceinline__ void em_cp_wait() { asm volatile(\"cp.async.wait_group %0;\" :: \"n\"(N)); }\n"
    "static __device__ __forceinline__ void em_mma_bf16(float *c, const unsigned *a, const unsigned *b) {\n"
    "  asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\"\n"
    "               : \"+f\"(c[0]), \"+f\"(c[1]), \"+f\"(c[2]), \"+f\"(c[3])\n"
    "               : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b[0]), \"r\"(b[1]));\n"
    "}\n"
    "static __device__ __forceinline__ void em_mma_f16(float *c, const unsigned *a, const unsigned *b) {\n"
    "  asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\"\n"
    "               : \"+f\"(c[0]), \"+f\"(c[1]), \"+f\"(c[2]), \"+f\"(c[3])\n"
    "               : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b[0]), \"r\"(b[1]));\n"
    "}\n"
    "static __device__ __forceinline__ float em_block_sum(float v, float *sm) {\n"
    "  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);\n"
    "  const int w = threadIdx.x >> 5, ln = threadIdx.x & 31, nw = (blockDim.x + 31) >> 5;\n"
    "  __syncthreads();\n"
    "  if (ln == 0) sm[w] = v;\n"
    "  __syncthreads();\n"
    "  v = ln < nw ? sm[ln] : 0.0f;\n"
    "  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);\n"
    "  return v;\n"
    "}\n"
    "static __device__ __forceinline__ float em_block_max(float v, float *sm) {\n"
    "  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));\n"
    "  const int w = threadIdx.x >> 5, ln = threadIdx.x & 31, nw = (blockDim.x + 31) >> 5;\n"
    "  __syncthreads();\n"
    "  if (ln == 0) sm[w] = v;\n"
    "  __syncthreads();\n"
    "  v = ln < nw ? sm[ln] : -INFINITY;\n"
    "  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));\n"
    "  return v;\n"
    "}\n";

em_status em_emit(const em_tile *t, char **src, em_launch *launch, char *err) {
  ectx c;
  memset(&c, 0, sizeof c);
  c.t = t;
  c.g = t->g;
  c.anchor = t->anchor;
  memset(launch, 0, sizeof *launch);
  for (int i = 0; i < 3; i++) {
    snprintf(launch->grid[i], sizeof launch->grid[i], "1");
    launch->block[i] = 1;
  }
  sbuf body = {0}, head = {0};
  c.out = &body;
  c.indent = 1;
  c.al = em_alloc(sizeof(ivec) * (size_t)(c.g->values.n + 1));
  c.bij = em_alloc(sizeof(int) * (size_t)(c.g->values.n + 1));
  for (int i = 0; i < c.g->syms.n; i++) {
    const em_sym *s = &c.g->syms.s[i];
    c.dimc[i] = s->derived ? A(&c, "cd%d", i) : A(&c, "s_%s", s->name);
  }
  for (int i = 0; i < c.g->syms.n; i++)
    if (c.g->syms.s[i].derived) {
      const em_sym *s = &c.g->syms.s[i];
      line(&c, "const long long cd%d = (%s + %lldLL - 1) / %lldLL;", i, dim_c(&c, &s->num), (long long)s->den,
           (long long)s->den);
    }
  if (t->kind != EM_K_POINTWISE && (t->anchor < 0 || V(&c, t->anchor)->kind != EM_V_NODE)) {
    fail(&c, "a %s kernel needs an anchor node", em_kkind_name(t->kind));
  } else {
    switch (t->kind) {
    case EM_K_POINTWISE: k_pointwise(&c, launch); break;
    case EM_K_ROW: k_row(&c, launch); break;
    case EM_K_REDUCE: k_reduce(&c, launch); break;
    case EM_K_CONTRACTION: k_contraction(&c, launch); break;
    case EM_K_ATTENTION: k_attention(&c, launch); break;
    default: fail(&c, "unknown kernel kind"); break;
    }
  }
  em_status st = EM_OK;
  if (c.failed) {
    st = em_fail(err, EM_EINPUT, "%s (%s): %s", t->name, em_kkind_name(t->kind), c.err);
    goto cleanup;
  }
  sb_add(&head, "%s\n// kernel %s: %s", PRELUDE, t->name, em_kkind_name(t->kind));
  for (int i = 0; i < t->knobs.n; i++) sb_add(&head, "%s%s=%lld", i ? "," : " ", t->knobs.key[i], (long long)t->knobs.val[i]);
  sb_add(&head, "\nextern \"C\" __global__ void __launch_bounds__(%d) %s(", launch->block[0] * launch->block[1] * launch->block[2], t->name);
  int np = 0;
  for (int i = 0; i < c.g->inputs.n; i++) {
    const em_value *x = V(&c, c.g->inputs.v[i]);
    sb_add(&head, "%s\n    const %s *__restrict__ in%d /* %s %s */", np++ ? "," : "", stype(x->dtype), i, x->name, em_dtype_name(x->dtype));
  }
  for (int j = 0; j < c.g->outputs.n; j++) {
    const em_value *x = V(&c, c.g->outputs.v[j]);
    sb_add(&head, "%s\n    %s *__restrict__ out%d /* %s %s */", np++ ? "," : "", stype(x->dtype), j, x->name, em_dtype_name(x->dtype));
  }
  for (int i = 0; i < c.g->syms.n; i++) {
    if (c.g->syms.s[i].derived) continue;
    sb_add(&head, "%s\n    long long s_%s", np++ ? "," : "", c.g->syms.s[i].name);
    launch->syms[launch->nsyms++] = i;
  }
  sb_add(&head, ") {\n%s}\n", body.s ? body.s : "");
  *src = head.s;
  head.s = NULL;
cleanup:
  free(head.s);
  free(body.s);
  for (int i = 0; i < c.arena.n; i++) free(c.arena.v[i]);
  free(c.arena.v);
  free(c.memo.v);
  free(c.al);
  free(c.bij);
  return st;
}
