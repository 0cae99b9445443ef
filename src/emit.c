/* emit.c — the emitter's core: values computed by index remapping from the kernel's inputs (views permute,
 * re-linearize and offset indices; elementwise ops broadcast; gathers read indices), the alignment of values
 * with the kernel's domain, and em_emit, which runs a kernel template (emit_kinds.c) and assembles the source.
 * The index algebra those rest on (linearize, unravel, broadcast, strided views) is emit_index.c.
 * Every string built here lives in an arena freed when em_emit returns. */
#include "emit_impl.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- arena strings and the output buffer ---- */

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

void ex_sb_add(sbuf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  sb_vadd(b, fmt, ap);
  va_end(ap);
}


char *ex_A(ectx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
char *ex_A(ectx *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  sbuf b = {0};
  sb_vadd(&b, fmt, ap);
  va_end(ap);
  if (!b.s) b.s = em_strdup("");
  EM_VEC_PUSH(c->arena, b.s);
  return b.s;
}

void ex_line(ectx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ex_line(ectx *c, const char *fmt, ...) {
  for (int i = 0; i < c->indent; i++) ex_sb_add(c->out, "  ");
  va_list ap;
  va_start(ap, fmt);
  sb_vadd(c->out, fmt, ap);
  va_end(ap);
  ex_sb_add(c->out, "\n");
}

void ex_fail(ectx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ex_fail(ectx *c, const char *fmt, ...) {
  if (c->failed) return;
  c->failed = 1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->err, sizeof c->err, fmt, ap);
  va_end(ap);
}

void ex_use_prelude(ectx *c, const char *text) {
  for (int i = 0; i < c->nmore; i++)
    if (c->more_prelude[i] == text) return;
  if (c->nmore == (int)(sizeof c->more_prelude / sizeof c->more_prelude[0])) {
    ex_fail(c, "more prelude parts than the emitter holds");
    return;
  }
  c->more_prelude[c->nmore++] = text;
}

/* ---- knobs ----------------------------------------------------------------------------------------- */

em_status em_knob_set(em_knobs *k, const char *name, int64_t v, char *err) {
  if (em_knob_check(name, v, err)) return EM_EINPUT;
  em_knob_id id = (em_knob_id)em_knob_find(name);
  for (int i = 0; i < k->n; i++)
    if (k->id[i] == id) {
      k->val[i] = v;
      return EM_OK;
    }
  /* distinct table knobs: never more than EM_NKNOBS */
  if (k->n >= EM_NKNOBS) return em_fail(err, EM_EINPUT, "knob %s: the assignment already holds every knob", name);
  /* kept sorted by name, so the knob list prints canonically */
  int i = k->n;
  while (i > 0 && strcmp(em_knob_table[k->id[i - 1]].name, name) > 0) {
    k->id[i] = k->id[i - 1];
    k->val[i] = k->val[i - 1];
    i--;
  }
  k->id[i] = id;
  k->val[i] = v;
  k->n++;
  return EM_OK;
}

int64_t em_knob_value(const em_knobs *k, em_knob_id id) {
  for (int i = 0; i < k->n; i++)
    if (k->id[i] == id) return k->val[i];
  return (unsigned)id < EM_NKNOBS ? em_knob_table[id].def : 0;
}

static const char *kind_names[EM_NKINDS] = {"pointwise", "row", "reduce", "contraction", "attention"};
const char *em_kkind_name(em_kkind k) { return (unsigned)k < EM_NKINDS ? kind_names[k] : "?"; }
int em_kkind_parse(const char *s) {
  for (int i = 0; i < EM_NKINDS; i++)
    if (s && !strcmp(s, kind_names[i])) return i;
  return -1;
}

/* ---- dims, types ------------------------------------------------------------------------------------ */

const char *ex_dim_c(ectx *c, const em_dim *d) {
  em_symtab st = c->g->syms;
  /* a derived symbol (cdiv) by its name too: the kernel computed it once as cd<i> (em_emit), and the text has no cdiv */
  for (int i = 0; i < st.n; i++) {
    snprintf(st.s[i].name, sizeof st.s[i].name, "%s", c->dimc[i]);
    st.s[i].derived = 0;
  }
  char buf[512];
  em_dim_format(&st, d, buf, sizeof buf);
  int64_t k;
  if (em_dim_is_const(d, &k)) return ex_A(c, "%lldLL", (long long)k);
  return ex_A(c, "(%s)", buf);
}

const em_value *ex_V(ectx *c, int v) { return &c->g->values.v[v]; }
const em_shape *ex_S(ectx *c, int v) { return &c->g->values.v[v].shape; }

const char *ex_ctype(em_dtype t) {
  switch (t) {
  case EM_F64: return "double";
  case EM_I32:
  case EM_I64: return "long long";
  case EM_BOOL: return "int";
  default: return "float";
  }
}

const char *ex_stype(em_dtype t) {
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

const char *ex_load_conv(ectx *c, em_dtype t, const char *x) {
  switch (t) {
  case EM_BF16: return ex_A(c, "em_bf2f(%s)", x);
  case EM_F16: return ex_A(c, "em_h2f(%s)", x);
  case EM_BOOL: return ex_A(c, "(int)%s", x);
  default: return ex_A(c, "(%s)%s", ex_ctype(t), x);
  }
}

/* x's argument where x is one call fn(…) spanning it whole, else NULL. */
static const char *ex_unwrap(ectx *c, const char *x, const char *fn) {
  size_t n = strlen(fn), len = strlen(x);
  if (len < n + 2 || strncmp(x, fn, n) || x[n] != '(' || x[len - 1] != ')') return NULL;
  int d = 0;
  for (size_t i = n; i < len; i++) {
    if (x[i] == '(') d++;
    else if (x[i] == ')' && --d == 0 && i != len - 1) return NULL;
  }
  return ex_A(c, "%.*s", (int)(len - n - 2), x + n + 1);
}

/* A value rounded to t and then stored as t is stored without the first rounding (one conversion, not three
 * instructions: the conversions are what a wide epilogue spends its time on). */
const char *ex_store_conv(ectx *c, em_dtype t, const char *x) {
  const char *u;
  switch (t) {
  case EM_BF16: return ex_A(c, "em_f2bf(%s)", (u = ex_unwrap(c, x, "em_rbf")) ? u : x);
  case EM_F16: return ex_A(c, "em_f2h(%s)", (u = ex_unwrap(c, x, "em_rh")) ? u : x);
  case EM_BOOL: return ex_A(c, "(unsigned char)((%s) != 0)", x);
  default: return ex_A(c, "(%s)(%s)", ex_stype(t), x);
  }
}

/* Two 2-byte stored values (ex_store_conv's text) as one 32-bit word, lo in the low half: one packing conversion
 * of both where both are plain conversions. */
const char *ex_store_pair(ectx *c, const char *lo, const char *hi) {
  static const char *const fn[][2] = {{"em_f2bf", "em_pk_bf"}, {"em_f2h", "em_pk_h"}};
  for (int i = 0; i < 2; i++) {
    const char *a = ex_unwrap(c, lo, fn[i][0]), *b = ex_unwrap(c, hi, fn[i][0]);
    if (a && b) return ex_A(c, "%s(%s, %s)", fn[i][1], a, b);
  }
  return ex_A(c, "(unsigned)%s | ((unsigned)%s << 16)", lo, hi);
}

const char *ex_store_chunk(ectx *c, int p, const char *ix0, const char *const *val, int n, em_dtype t) {
  if (em_dtype_bytes(t) == 2 && (n == 2 || n == 4 || n == 8)) {
    const char *w[4];
    for (int i = 0; i < n / 2; i++) w[i] = ex_store_pair(c, val[2 * i], val[2 * i + 1]);
    if (n == 2) return ex_A(c, "*(unsigned *)(out%d + (%s)) = %s;", p, ix0, w[0]);
    if (n == 4)
      return ex_A(c, "asm volatile(\"st.global.v2.b32 [%%0], {%%1, %%2};\" :: \"l\"(out%d + (%s)), \"r\"(%s), \"r\"(%s));", p, ix0, w[0],
                  w[1]);
    /* (by PTX: NVCC split a uint4 assignment into four 4-byte stores) */
    return ex_A(c, "asm volatile(\"st.global.v4.b32 [%%0], {%%1, %%2, %%3, %%4};\" :: \"l\"(out%d + (%s)), \"r\"(%s), \"r\"(%s), "
                   "\"r\"(%s), \"r\"(%s));", p, ix0, w[0], w[1], w[2], w[3]);
  }
  if (t != EM_F32) return NULL;
  if (n == 2) return ex_A(c, "*(float2 *)(out%d + (%s)) = make_float2(%s, %s);", p, ix0, val[0], val[1]);
  if (n == 4) return ex_A(c, "*(float4 *)(out%d + (%s)) = make_float4(%s, %s, %s, %s);", p, ix0, val[0], val[1], val[2], val[3]);
  if (n != 8) return NULL;
  const char *v4 = "asm volatile(\"st.global.v4.f32 [%%0], {%%1, %%2, %%3, %%4};\" :: \"l\"(out%d + (%s) + %d), \"f\"(%s), \"f\"(%s), "
                   "\"f\"(%s), \"f\"(%s));";
  return ex_A(c, "{ %s %s }", ex_A(c, v4, p, ix0, 0, val[0], val[1], val[2], val[3]), ex_A(c, v4, p, ix0, 4, val[4], val[5], val[6], val[7]));
}

/* Rounds an expression computed in the compute type to what dtype t holds. */
const char *ex_round_to(ectx *c, em_dtype t, const char *x) {
  switch (t) {
  case EM_BF16: return ex_A(c, "em_rbf(%s)", x);
  case EM_F16: return ex_A(c, "em_rh(%s)", x);
  case EM_BOOL: return ex_A(c, "((%s) != 0)", x);
  case EM_I32: return ex_A(c, "(long long)(int)(%s)", x);
  case EM_I64: return ex_A(c, "(long long)(%s)", x);
  case EM_F32: return ex_A(c, "(float)(%s)", x);
  default: return x;
  }
}

/* ---- values ------------------------------------------------------------------------------------------ */

static const char *memo_key(ectx *c, int v, const ivec *ix) {
  sbuf b = {0};
  ex_sb_add(&b, "%d", v);
  for (int i = 0; i < ix->rank; i++) ex_sb_add(&b, "|%s", ix->e[i]);
  EM_VEC_PUSH(c->arena, b.s);
  return b.s;
}


/* Serves value v at index ix from var: the next ex_val of v there returns var (a value loaded ahead). */
void ex_memo_seed(ectx *c, int v, const ivec *ix, const char *var) {
  memo_ent m = {v, (char *)memo_key(c, v, ix), var};
  EM_VEC_PUSH(c->memo, m);
}

int ex_input_pos(ectx *c, int v) {
  for (int i = 0; i < c->g->inputs.n; i++)
    if (c->g->inputs.v[i] == v) return i;
  return -1;
}

/* A float literal of v with `digits` significant digits: "%.<digits>g" with ".0" where that printed an integer (a
 * bare "2f" is not C++), then "f" — so 0.5 is "0.5f" and 1 is "1.0f". */
const char *ex_flit(ectx *c, double v, int digits) {
  char b[64];
  snprintf(b, sizeof b, "%.*g", digits, v);
  return ex_A(c, "%s%sf", b, strpbrk(b, ".eEn") ? "" : ".0");
}

static const char *scalar_lit(ectx *c, const em_arg *a, em_dtype out) {
  if (a->is_float) return em_dtype_is_float(out) ? ex_flit(c, a->f, 9) : ex_A(c, "%.17g", a->f);
  return ex_A(c, "(%s)%s", ex_ctype(out), ex_dim_c(c, &a->i));
}

static const char *operand(ectx *c, const em_node *nd, int ai, const ivec *ix, em_dtype out) {
  const em_arg *a = &nd->args[ai];
  if (!a->is_tensor && em_op_spec(nd->op)->args[ai].kind == EM_ARG_TS) return scalar_lit(c, a, out);
  ivec u = ex_bcast(c, ix, &ex_V(c, nd->out)->shape, ex_S(c, a->tensor));
  return ex_val(c, a->tensor, &u);
}

/* View ops: output index -> input index. */
static ivec view_back(ectx *c, const em_node *nd, const ivec *ix) {
  const em_shape *in = ex_S(c, nd->args[0].tensor), *o = &ex_V(c, nd->out)->shape;
  ivec r = {in->rank};
  switch (nd->op) {
  case EM_OP_VIEW:
  case EM_OP_RESHAPE:
  case EM_OP_UNSAFE_VIEW: return ex_unravel(c, ex_linearize(c, ix, o), in);
  case EM_OP_TRANSPOSE: {
    int d0 = ex_axis_of(&nd->args[1], in->rank), d1 = ex_axis_of(&nd->args[2], in->rank);
    for (int i = 0; i < in->rank; i++) r.e[i] = ix->e[i];
    r.e[d0] = ix->e[d1];
    r.e[d1] = ix->e[d0];
    return r;
  }
  case EM_OP_T:
    for (int i = 0; i < in->rank; i++) r.e[i] = ix->e[in->rank - 1 - i];
    return r;
  case EM_OP_PERMUTE:
    for (int i = 0; i < in->rank; i++) r.e[ex_axis_of_dim(&nd->args[1].ilist[i], in->rank)] = ix->e[i];
    return r;
  case EM_OP_EXPAND: {
    int off = o->rank - in->rank;
    for (int i = 0; i < in->rank; i++) r.e[i] = (ex_is_one(&in->d[i]) && !ex_is_one(&o->d[i + off])) ? "0LL" : ix->e[i + off];
    return r;
  }
  case EM_OP_UNSQUEEZE: {
    int d = ex_axis_of(&nd->args[1], o->rank);
    for (int i = 0, k = 0; i < o->rank; i++)
      if (i != d) r.e[k++] = ix->e[i];
    return r;
  }
  case EM_OP_SQUEEZE: {
    if (in->rank == o->rank) {
      for (int i = 0; i < in->rank; i++) r.e[i] = ix->e[i];
      return r;
    }
    int d = ex_axis_of(&nd->args[1], in->rank);
    for (int i = 0, k = 0; i < in->rank; i++) r.e[i] = i == d ? "0LL" : ix->e[k++];
    return r;
  }
  case EM_OP_SLICE: {
    int d = ex_axis_of(&nd->args[1], in->rank);
    for (int i = 0; i < in->rank; i++) r.e[i] = ix->e[i];
    const char *start = "0LL";
    if (nd->args[2].present) {
      int64_t k;
      if (em_dim_is_const(&nd->args[2].i, &k) && k < 0) {
        em_dim kd = em_dim_const(k), s = em_dim_const(0);
        if (em_dim_add(&in->d[d], &kd, &s)) ex_fail(c, "slice start: too many terms or beyond 64 bits");
        start = ex_dim_c(c, &s);
      } else start = ex_dim_c(c, &nd->args[2].i);
    }
    const char *step = ex_dim_c(c, &nd->args[4].i);
    r.e[d] = ex_idx_name(c, ex_A(c, "%s + (%s) * %s", start, ix->e[d], step));
    return r;
  }
  case EM_OP_SELECT: {
    int d = ex_axis_of(&nd->args[1], in->rank);
    int64_t k;
    const char *at;
    if (em_dim_is_const(&nd->args[2].i, &k) && k < 0) {
      em_dim kd = em_dim_const(k), s = em_dim_const(0);
      if (em_dim_add(&in->d[d], &kd, &s)) ex_fail(c, "select index: too many terms or beyond 64 bits");
      at = ex_dim_c(c, &s);
    } else at = ex_dim_c(c, &nd->args[2].i);
    for (int i = 0, j = 0; i < in->rank; i++) r.e[i] = i == d ? at : ix->e[j++];
    return r;
  }
  case EM_OP_CONTIGUOUS:
  case EM_OP_CLONE:
    for (int i = 0; i < in->rank; i++) r.e[i] = ix->e[i];
    return r;
  default: ex_fail(c, "%s is not a view", em_op_name(nd->op)); return r;
  }
}

/* An op whose result is one of its inputs' values, negated or not (neg, cat, clone, contiguous), where every tensor
 * input has the result's dtype: the value is already exact in that dtype, so it is not rounded again (a RoPE's
 * rotate_half was two of the seven bf16 roundings an element of TinyLlama's q epilogue). */
static int exact_op(ectx *c, const em_node *nd, em_dtype t) {
  if (nd->op != EM_OP_NEG && nd->op != EM_OP_CAT && nd->op != EM_OP_CLONE && nd->op != EM_OP_CONTIGUOUS) return 0;
  if (t != EM_BF16 && t != EM_F16 && t != EM_F32) return 0;
  for (int a = 0; a < EM_MAX_ARGS; a++) {
    const em_arg *g = &nd->args[a];
    if (!g->present) continue;
    if (g->tlist) {
      for (int i = 0; i < g->n; i++)
        if (ex_V(c, g->tlist[i])->dtype != t) return 0;
    } else if (g->is_tensor || (a == 0 && nd->op != EM_OP_CAT)) {
      if (ex_V(c, g->tensor)->dtype != t) return 0;
    }
  }
  return 1;
}

static const char *ew(ectx *c, const em_node *nd, const ivec *ix) {
  em_dtype od = ex_V(c, nd->out)->dtype;
  const char *ct = ex_ctype(od);
  const char *x = NULL, *y;
  switch (nd->op) {
  case EM_OP_ADD:
  case EM_OP_SUB: {
    x = operand(c, nd, 0, ix, od);
    y = operand(c, nd, 1, ix, od);
    const char *alpha = scalar_lit(c, &nd->args[2], od);
    int one = !nd->args[2].is_float && ex_is_one(&nd->args[2].i);
    return ex_A(c, "(%s)%s %s %s%s%s", ct, x, nd->op == EM_OP_ADD ? "+" : "-", one ? "" : alpha, one ? "" : " * ", y);
  }
  case EM_OP_MUL: return ex_A(c, "(%s)%s * (%s)%s", ct, operand(c, nd, 0, ix, od), ct, operand(c, nd, 1, ix, od));
  case EM_OP_DIV: return ex_A(c, "(%s)%s / (%s)%s", ct, operand(c, nd, 0, ix, od), ct, operand(c, nd, 1, ix, od));
  case EM_OP_POW: {
    x = operand(c, nd, 0, ix, od);
    const em_arg *e = &nd->args[1];
    int64_t k;
    if (!e->is_float && em_dim_is_const(&e->i, &k) && k == 2) return ex_A(c, "(%s)%s * (%s)%s", ct, x, ct, x);
    return ex_A(c, "powf((float)%s, (float)%s)", x, scalar_lit(c, e, EM_F32));
  }
  case EM_OP_CLAMP_MIN: return ex_A(c, "fmaxf((float)%s, %s)", operand(c, nd, 0, ix, od), scalar_lit(c, &nd->args[1], EM_F32));
  case EM_OP_NEG: return ex_A(c, "-(%s)%s", ct, operand(c, nd, 0, ix, od));
  case EM_OP_RECIPROCAL: return ex_A(c, "1.0f / (float)%s", operand(c, nd, 0, ix, od));
  case EM_OP_RSQRT: return ex_A(c, "1.0f / sqrtf((float)%s)", operand(c, nd, 0, ix, od));
  case EM_OP_SQRT: return ex_A(c, "sqrtf((float)%s)", operand(c, nd, 0, ix, od));
  case EM_OP_EXP: return ex_A(c, "expf((float)%s)", operand(c, nd, 0, ix, od));
  /* a 2-byte result: the hardware exponential and division (a few ulp of f32, far below bf16's rounding; the precise
   * expf and IEEE division cost a SiLU-gated epilogue ~5,000 cycles a 128 x 128 tile) */
  case EM_OP_SILU:
    x = operand(c, nd, 0, ix, od);
    if (em_dtype_bytes(od) == 2) return ex_A(c, "__fdividef((float)%s, 1.0f + __expf(-(float)%s))", x, x);
    return ex_A(c, "(float)%s / (1.0f + expf(-(float)%s))", x, x);
  case EM_OP_SIGMOID:
    x = operand(c, nd, 0, ix, od);
    if (em_dtype_bytes(od) == 2) return ex_A(c, "__fdividef(1.0f, 1.0f + __expf(-(float)%s))", x);
    return ex_A(c, "1.0f / (1.0f + expf(-(float)%s))", x);
  case EM_OP_TANH: return ex_A(c, "tanhf((float)%s)", operand(c, nd, 0, ix, od));
  case EM_OP_COS: return ex_A(c, "cosf((float)%s)", operand(c, nd, 0, ix, od));
  case EM_OP_SIN: return ex_A(c, "sinf((float)%s)", operand(c, nd, 0, ix, od));
  case EM_OP_TO_COPY: return ex_A(c, "(%s)%s", ct, ex_val(c, nd->args[0].tensor, ix));
  case EM_OP_ARANGE:
  case EM_OP_ARANGE_START: {
    const em_arg *st = nd->op == EM_OP_ARANGE ? NULL : &nd->args[0];
    const char *s0 = st ? scalar_lit(c, st, od) : ex_A(c, "(%s)0", ct);
    return ex_A(c, "%s + (%s)%s", s0, ct, ix->e[0]);
  }
  case EM_OP_EMBEDDING:
  case EM_OP_INDEX_SELECT: {
    int emb = nd->op == EM_OP_EMBEDDING;
    int w = nd->args[0].tensor, ids = nd->args[emb ? 1 : 2].tensor;
    const em_shape *ws = ex_S(c, w), *is = ex_S(c, ids);
    ivec ii = {is->rank}, wi = {ws->rank};
    if (emb) {
      for (int i = 0; i < is->rank; i++) ii.e[i] = ix->e[i];
      wi.e[0] = ex_A(c, "(long long)%s", ex_val(c, ids, &ii));
      wi.e[1] = ix->e[ix->rank - 1];
    } else {
      int d = ex_axis_of(&nd->args[1], ws->rank);
      if (is->rank) ii.e[0] = ix->e[d];
      for (int i = 0; i < ws->rank; i++) wi.e[i] = ix->e[i];
      wi.e[d] = ex_A(c, "(long long)%s", ex_val(c, ids, &ii));
    }
    return ex_A(c, "(%s)%s", ct, ex_val(c, w, &wi));
  }
  case EM_OP_CAT: {
    int d = ex_axis_of(&nd->args[1], ex_V(c, nd->out)->shape.rank);
    const char *res = ex_A(c, "v%d", c->tmp++);
    ex_line(c, "%s %s;", ct, res);
    const char *offs = "0LL";
    for (int k = 0; k < nd->args[0].n; k++) {
      int u = nd->args[0].tlist[k];
      const char *end = ex_A(c, "(%s + %s)", offs, ex_dim_c(c, &ex_S(c, u)->d[d]));
      if (k < nd->args[0].n - 1) ex_line(c, "%sif (%s < %s) {", k ? "} else " : "", ix->e[d], end);
      else ex_line(c, "%s{", k ? "} else " : "");
      c->indent++;
      c->cond_depth++;
      int mark = c->memo.n;
      ivec ui = *ix;
      ui.e[d] = ex_A(c, "(%s - %s)", ix->e[d], offs); /* offs is parenthesized */
      ex_line(c, "%s = (%s)%s;", res, ct, ex_val(c, u, &ui));
      c->memo.n = mark; /* values computed inside a branch are not visible after it */
      c->cond_depth--;
      c->indent--;
      offs = end;
    }
    ex_line(c, "}");
    return res;
  }
  default: ex_fail(c, "op %s has no elementwise emission", em_op_name(nd->op)); return "0";
  }
}

/* A view read through its input's index (ex_val resolves it so, no kernel of its own). */
static int is_view_op(const em_node *nd) {
  return em_op_spec(nd->op)->args[0].kind == EM_ARG_T && nd->op != EM_OP_EMBEDDING && nd->op != EM_OP_INDEX_SELECT &&
         (nd->op == EM_OP_VIEW || nd->op == EM_OP_RESHAPE || nd->op == EM_OP_UNSAFE_VIEW || nd->op == EM_OP_TRANSPOSE ||
          nd->op == EM_OP_T || nd->op == EM_OP_PERMUTE || nd->op == EM_OP_EXPAND || nd->op == EM_OP_UNSQUEEZE ||
          nd->op == EM_OP_SQUEEZE || nd->op == EM_OP_SLICE || nd->op == EM_OP_SELECT || nd->op == EM_OP_CONTIGUOUS ||
          nd->op == EM_OP_CLONE);
}

int ex_view_source(ectx *c, int u, ivec *ix) {
  while (ex_V(c, u)->kind == EM_V_NODE) {
    const em_node *nd = &c->g->nodes.v[ex_V(c, u)->node];
    if (!is_view_op(nd)) return -1;
    *ix = view_back(c, nd, ix);
    u = nd->args[0].tensor;
  }
  return u;
}

const char *ex_val(ectx *c, int v, const ivec *ix) {
  if (c->failed) return "0";
  const char *key = memo_key(c, v, ix);
  for (int i = c->memo.n - 1; i >= 0; i--)
    if (c->memo.v[i].v == v && !strcmp(c->memo.v[i].key, key)) return c->memo.v[i].var;
  const em_value *x = ex_V(c, v);
  const char *expr;
  for (int j = 0; j < c->npre; j++)
    if (v == c->pre_v[j]) {
      /* a prologue row reduction: its value for row m of the block, computed before the K loop */
      const em_node *rn = &c->g->nodes.v[x->node];
      const em_shape *xs = ex_S(c, rn->args[0].tensor);
      em_shape lead = *xs;
      lead.rank--;
      ivec li = {lead.rank};
      for (int i = 0; i < lead.rank; i++) li.e[i] = ix->e[i];
      return ex_A(c, "%s[%s - m0]", c->pre_arr[j], ex_linearize(c, &li, &lead));
    }
  for (int j = 0; j < c->nhred; j++)
    if (v == c->hred_v[j]) /* a head-local reduction: the value of the thread's own row and head */
      return ex_A(c, "em_hred%d[(m - m0) * %d + (n - n0) / %d]", j, c->hred_S, c->hred_D);
  int sv = v == c->anchor ? 0 : 1; /* (which staged sibling: a tile in shared memory, or the thread's fragments) */
  if ((v == c->anchor || v == c->xanchor) && (c->stage_arr[sv] || (c->stage_reg && c->stage_sib[sv] >= 0))) {
    /* the staged result tile: at the thread's own index the accumulator's value, elsewhere (within the tile:
     * the rules keep BN a multiple of the head width) the tile element, row m - m0, column n - n0 */
    const ivec *own = &c->al[v];
    int same = own->rank == ix->rank;
    for (int i = 0; same && i < ix->rank; i++) same = !strcmp(own->e[i], ix->e[i]);
    if (same) return v == c->anchor ? c->anchor_var : c->xanchor_var;
    ivec li = {ix->rank - 1};
    for (int i = 0; i < li.rank; i++) li.e[i] = ix->e[i];
    if (c->stage_reg) /* (the read's shift: its flat index less the element's own, both within one row) */
      expr = ex_ctr_stage_read(c, sv, ix->e[ix->rank - 1],
                               ex_index_diff(c, ex_linearize(c, ix, &x->shape), ex_linearize(c, own, &x->shape)));
    else
      expr = ex_load_conv(c, x->dtype, ex_A(c, "%s[(%s - m0) * %d + (%s - n0)]", c->stage_arr[sv],
                                            ex_linearize(c, &li, &c->stage_mdims), c->stage_ld, ix->e[ix->rank - 1]));
    const char *var = ex_A(c, "v%d", c->tmp++);
    ex_line(c, "const %s %s = %s; /* %s, staged */", ex_ctype(x->dtype), var, expr, x->name);
    memo_ent m = {v, (char *)key, var};
    EM_VEC_PUSH(c->memo, m);
    return var;
  }
  if (v == c->xanchor && c->xanchor_var) return c->xanchor_var;
  if (v == c->anchor) {
    if (c->softmax_mx) {
      const em_node *nd = &c->g->nodes.v[x->node];
      const char *in = ex_val(c, nd->args[0].tensor, ix);
      expr = ex_A(c, "expf((float)%s - %s) / %s", in, c->softmax_mx, c->softmax_sum);
      expr = ex_round_to(c, x->dtype, expr);
    } else {
      return c->anchor_var;
    }
  } else if (x->kind != EM_V_NODE) {
    int p = ex_input_pos(c, v);
    const char *ld = c->row_vec ? ex_rowvec_load(c, p, ix, &x->shape, x->dtype) : NULL;
    if (!ld) ld = ex_A(c, "in%d[%s]", p, ex_linearize(c, ix, &x->shape));
    expr = ex_load_conv(c, x->dtype, ld);
    if (c->cache_mode == 1 && !c->cache_key) {
      c->cache_key = ld;
      const char *var = ex_A(c, "v%d", c->tmp++);
      ex_line(c, "const %s %s = %s; /* %s, kept for the second pass */", ex_ctype(x->dtype), var, expr, x->name);
      ex_line(c, "em_row[threadIdx.y][col] = (float)%s;", var);
      memo_ent m = {v, (char *)key, var};
      EM_VEC_PUSH(c->memo, m);
      return var;
    }
    if (c->cache_mode == 2 && c->cache_key && !strcmp(ld, c->cache_key)) expr = ex_A(c, "(%s)em_row[threadIdx.y][col]", ex_ctype(x->dtype));
  } else {
    const em_node *nd = &c->g->nodes.v[x->node];
    if (is_view_op(nd)) {
      /* at the view's aligned index, its input's aligned index (no round trip through linearize/unravel) */
      int at_al = c->vlink && c->vlink[v] && c->al[v].rank == ix->rank;
      for (int i = 0; at_al && i < ix->rank; i++) at_al = !strcmp(c->al[v].e[i], ix->e[i]);
      ivec u = at_al ? c->al[nd->args[0].tensor] : view_back(c, nd, ix);
      return ex_val(c, nd->args[0].tensor, &u);
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
      ex_fail(c, "value '%s' (%s) is a second anchor inside the kernel", x->name, em_op_name(nd->op));
      return "0";
    default: break;
    }
    expr = ew(c, nd, ix);
    if (!exact_op(c, nd, x->dtype)) expr = ex_round_to(c, x->dtype, expr);
  }
  const char *var = ex_A(c, "v%d", c->tmp++);
  ex_line(c, "const %s %s = %s; /* %s */", ex_ctype(x->dtype), var, expr, x->name);
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
  const em_shape *in = ex_S(c, nd->args[0].tensor), *o = &ex_V(c, nd->out)->shape;
  ivec r = {o->rank};
  switch (nd->op) {
  case EM_OP_VIEW:
  case EM_OP_RESHAPE:
  case EM_OP_UNSAFE_VIEW: return ex_unravel(c, ex_linearize(c, ix, in), o);
  case EM_OP_TRANSPOSE: {
    int d0 = ex_axis_of(&nd->args[1], in->rank), d1 = ex_axis_of(&nd->args[2], in->rank);
    for (int i = 0; i < o->rank; i++) r.e[i] = ix->e[i];
    r.e[d0] = ix->e[d1];
    r.e[d1] = ix->e[d0];
    return r;
  }
  case EM_OP_T:
    for (int i = 0; i < o->rank; i++) r.e[i] = ix->e[o->rank - 1 - i];
    return r;
  case EM_OP_PERMUTE:
    for (int i = 0; i < o->rank; i++) r.e[i] = ix->e[ex_axis_of_dim(&nd->args[1].ilist[i], in->rank)];
    return r;
  case EM_OP_UNSQUEEZE: {
    int d = ex_axis_of(&nd->args[1], o->rank);
    for (int i = 0, k = 0; i < o->rank; i++) r.e[i] = i == d ? "0LL" : ix->e[k++];
    return r;
  }
  case EM_OP_SQUEEZE: {
    if (in->rank == o->rank) {
      for (int i = 0; i < o->rank; i++) r.e[i] = ix->e[i];
      return r;
    }
    int d = ex_axis_of(&nd->args[1], in->rank);
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
void ex_align(ectx *c) {
  const em_graph *g = c->g;
  for (int changed = 1; changed && !c->failed;) {
    changed = 0;
    for (int i = 0; i < g->nodes.n; i++) {
      const em_node *nd = &g->nodes.v[i];
      int o = nd->out;
      if (o == c->anchor || o == c->xanchor) continue;
      const em_opspec *sp = em_op_spec(nd->op);
      if (!c->bij[o]) {
        if (is_ew_same_index(nd->op)) {
          for (int a = 0; a < sp->nargs; a++) {
            int isT = sp->args[a].kind == EM_ARG_T || (sp->args[a].kind == EM_ARG_TS && nd->args[a].is_tensor);
            if (!isT || !nd->args[a].present) continue;
            int u = nd->args[a].tensor;
            if (c->bij[u] && em_shape_eq(ex_S(c, u), ex_S(c, o))) {
              c->al[o] = c->al[u];
              c->bij[o] = changed = 1;
              break;
            }
          }
        } else if (is_bijective_view(nd, g) && c->bij[nd->args[0].tensor]) {
          c->al[o] = view_fwd(c, nd, &c->al[nd->args[0].tensor]);
          c->bij[o] = c->vlink[o] = changed = 1;
        }
      }
      if (c->bij[o]) {
        if (is_ew_same_index(nd->op)) {
          for (int a = 0; a < sp->nargs; a++) {
            int isT = sp->args[a].kind == EM_ARG_T || (sp->args[a].kind == EM_ARG_TS && nd->args[a].is_tensor);
            if (!isT || !nd->args[a].present) continue;
            int u = nd->args[a].tensor;
            if (!c->bij[u] && u != c->anchor && u != c->xanchor && em_shape_eq(ex_S(c, u), ex_S(c, o))) {
              c->al[u] = c->al[o];
              c->bij[u] = changed = 1;
            }
          }
        } else if (is_bijective_view(nd, g)) {
          int u = nd->args[0].tensor;
          if (!c->bij[u] && u != c->anchor && u != c->xanchor) {
            c->al[u] = view_back(c, nd, &c->al[o]);
            c->bij[u] = c->vlink[o] = changed = 1;
          }
        }
      }
    }
  }
}

/* Writes every kernel output whose alignment is known; rank_filter selects outputs by numel class:
 * 0 all aligned outputs, 1 only those aligned from the anchor seed (row values). */
void ex_write_outputs(ectx *c, const int *which, int nwhich) {
  for (int k = 0; k < nwhich; k++) {
    int j = which[k];
    int o = c->g->outputs.v[j];
    const em_value *x = ex_V(c, o);
    const char *v = ex_val(c, o, &c->al[o]);
    if (c->cap) {
      if (c->cap->n == EX_MAX_OUTS) {
        ex_fail(c, "more than %d stores recorded", EX_MAX_OUTS);
        return;
      }
      c->cap->pos[c->cap->n] = j;
      c->cap->contig[c->cap->n] = c->row_vec && ex_rowvec_contig(c, &c->al[o], &x->shape, x->dtype);
      c->cap->ix[c->cap->n] = ex_linearize(c, &c->al[o], &x->shape);
      c->cap->val[c->cap->n++] = ex_store_conv(c, x->dtype, v);
      continue;
    }
    ex_line(c, "out%d[%s] = %s;", j, ex_linearize(c, &c->al[o], &x->shape), ex_store_conv(c, x->dtype, v));
  }
}

ivec ex_domain_vars(ectx *c, const em_shape *s, const char *lin) {
  ivec u = ex_unravel(c, lin, s), r = {s->rank};
  for (int i = 0; i < s->rank; i++) {
    r.e[i] = ex_A(c, "x%d", i);
    ex_line(c, "const long long x%d = %s;", i, u.e[i]);
  }
  return r;
}

/* Graph building refuses a shape whose element count cannot be formed (em_shape_check), so the failure
 * branches are for graphs built some other way; they fail the emission rather than loop over nothing. */
const char *ex_numel_c(ectx *c, const em_shape *s) {
  em_dim n;
  int rc = em_shape_numel(s, &n);
  if (rc) {
    ex_fail(c, "the element count of a shape: %s", em_dim_strerror(rc));
    return "0LL";
  }
  return ex_dim_c(c, &n);
}

char *ex_numel_text(ectx *c, const em_shape *s) {
  em_dim n;
  char buf[256];
  int rc = em_shape_numel(s, &n);
  if (rc) {
    ex_fail(c, "the element count of a shape: %s", em_dim_strerror(rc));
    return ex_A(c, "0");
  }
  return ex_A(c, "%s", em_dim_format(&c->g->syms, &n, buf, sizeof buf));
}

void ex_reset_alignment(ectx *c) {
  memset(c->bij, 0, sizeof(int) * (size_t)c->g->values.n);
  memset(c->vlink, 0, sizeof(int) * (size_t)c->g->values.n);
}

/* Splits the kernel outputs into those aligned with the domain and the rest (an error unless handled). */
int ex_aligned_outputs(ectx *c, int *which) {
  int n = 0;
  for (int j = 0; j < c->g->outputs.n && n < EX_MAX_OUTS; j++) {
    int o = c->g->outputs.v[j];
    if (c->bij[o]) which[n++] = j;
  }
  if (c->g->outputs.n > EX_MAX_OUTS) ex_fail(c, "a kernel of more than %d outputs", EX_MAX_OUTS);
  return n;
}

/* The one output's linear index at domain index ix of value v (aligned as ex_write_aligned does), its value text in
 * *val and its position in *pos; NULL when the kernel has more than one output or v's index does not reach it
 * (the caller then writes through ex_write_aligned). Lines the index needs are emitted here. */
/* Value v indexed by ix, and every value that index reaches through views and same-index pointwise ops. */
static void align_from(ectx *c, int v, ivec ix) {
  c->al[v] = ix;
  c->bij[v] = 1;
  ex_align(c);
}

const char *ex_output_index(ectx *c, int v, ivec ix, const char **val, int *pos) {
  if (c->g->outputs.n != 1) return NULL;
  align_from(c, v, ix);
  int o = c->g->outputs.v[0];
  if (!c->bij[o]) return NULL;
  *val = ex_val(c, o, &c->al[o]);
  *pos = 0;
  return ex_linearize(c, &c->al[o], &ex_V(c, o)->shape);
}

void ex_write_aligned(ectx *c, int v, ivec ix, const char *what) {
  align_from(c, v, ix);
  int which[EX_MAX_OUTS] = {0}, n = ex_aligned_outputs(c, which);
  if (n != c->g->outputs.n) ex_fail(c, "%s", what);
  ex_write_outputs(c, which, n);
}

/* A compile-time experiment switch (docs/formats.md): the value of environment variable name where it is exactly one
 * digit 1..most, else 0 (off). */
int ex_env_choice(const char *name, int most) {
  const char *e = getenv(name);
  return e && e[0] >= '1' && e[0] <= '0' + most && !e[1] ? e[0] - '0' : 0;
}

/* A former experiment made the default (docs/formats.md): on unless environment variable name is exactly "0", which
 * emits the earlier text, for A/B runs (EMMY_CLUSTER_LATE, EMMY_TILE_SPLIT, EMMY_SPLIT_RELAXED, …). */
int ex_env_default_on(const char *name) {
  const char *e = getenv(name);
  return !(e && !strcmp(e, "0"));
}

/* EMMY_PDL at compile time (docs/formats.md): 0, 1, 3, 4, else the default 2. */
int ex_pdl_mode(void) {
  const char *p = getenv("EMMY_PDL");
  if (!p || !*p) return 2;
  return !strcmp(p, "0") ? 0 : !strcmp(p, "1") ? 1 : !strcmp(p, "3") ? 3 : !strcmp(p, "4") ? 4 : 2;
}

/* The kernel's TMA tensor maps prefetched by one thread before the grid dependency wait: they do not depend on the
 * previous kernel (CUTLASS's Hopper kernels prefetch theirs first; measured in docs/performance.md, twenty-sixth
 * session). "" for a kernel without tensor maps. */
static const char *tmap_prefetch(ectx *c, const em_launch *launch) {
  if (launch->ntmaps <= 0) return "";
  sbuf sb = {0};
  ex_sb_add(&sb, "  if (threadIdx.x == 0) {\n");
  for (int j = 0; j < launch->ntmaps; j++)
    ex_sb_add(&sb, "    asm volatile(\"prefetch.tensormap [%%0];\" :: \"l\"(reinterpret_cast<unsigned long long>(&tm%d)) : \"memory\");\n", j);
  ex_sb_add(&sb, "  }\n");
  const char *out = ex_A(c, "%s", sb.s);
  free(sb.s);
  return out;
}

/* ---- kernel kinds ------------------------------------------------------------------------------------ */

/* A tier switch: a knob whose legal values are a list from 0 ("0,1", FLASH's "0,1,2"), not a range or sizes. */
static int is_switch(int id) { return !strncmp(em_knob_table[id].values, "0,", 2) && !strstr(em_knob_table[id].values, ".."); }

/* Marks in why[] the knobs of the fork this emission took that left knob id unread: the conditions its kernels
 * text states ("contraction (PERSIST=1)") that the emission read at another value; else the 0/1 switches read
 * before any other knob (the tier: FLASH, MMA). */
static void fork_of(const ectx *c, em_knob_id id, unsigned char *why) {
  const char *s = strchr(em_knob_table[id].kinds, '(');
  int found = 0;
  for (; s && *s; s++) {
    if (!isupper((unsigned char)*s) || isalnum((unsigned char)s[-1]) || s[-1] == '_') continue;
    size_t n = strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
    char name[32];
    if (n < sizeof name && s[n] == '=' && isdigit((unsigned char)s[n + 1])) {
      snprintf(name, sizeof name, "%.*s", (int)n, s);
      int x = em_knob_find(name);
      if (x >= 0 && c->kread[x] && c->kv[x] != strtoll(s + n + 1, NULL, 10)) why[x] = 1, found = 1;
    }
    s += n - 1;
  }
  if (found) return;
  int first = c->nread + 1;
  for (int x = 0; x < EM_NKNOBS; x++)
    if (c->kread[x] && !is_switch(x) && c->kread[x] < first) first = c->kread[x];
  for (int x = 0; x < EM_NKNOBS; x++)
    if (c->kread[x] && is_switch(x) && c->kread[x] < first) why[x] = 1;
}

/* Knobs of the assignment that no code path of this emission read, at a value other than the table's default
 * (structural knobs aside: the kernel former applied them), name a variant the emitted kernel is not: it is the
 * default's. Fails c with one line naming each such knob and its value, the fork that left it unread when it is
 * one of this kernel kind's knobs (fork_of), the kernels it is for, and what to do. Returns 1 when it failed c. */
static int check_unread(ectx *c) {
  const em_knobs *k = &c->t->knobs;
  const char *kind = em_kkind_name(c->t->kind);
  int dead[EM_NKNOBS], n = 0;
  unsigned char why[EM_NKNOBS] = {0};
  for (int i = 0; i < k->n; i++) {
    em_knob_id id = k->id[i];
    if (c->kread[id] || em_knob_structural(id) || k->val[i] == em_knob_table[id].def) continue;
    dead[n++] = i;
    if (em_knob_for_kind(id, kind)) fork_of(c, id, why);
  }
  if (n == 0) return 0;
  sbuf m = {0};
  for (int j = 0; j < n; j++)
    ex_sb_add(&m, "%s%s=%lld", j ? ", " : "", em_knob_table[k->id[dead[j]]].name, (long long)k->val[dead[j]]);
  ex_sb_add(&m, " %s not read by this kernel's emitter", n > 1 ? "are" : "is");
  for (int x = 0, w = 0; x < EM_NKNOBS; x++)
    if (why[x]) ex_sb_add(&m, "%s%s=%lld", w++ ? ", " : " with ", em_knob_table[x].name, (long long)c->kv[x]);
  for (int j = 0; j < n; j++) {
    em_knob_id id = k->id[dead[j]];
    const char *ks = em_knob_table[id].kinds;
    if (em_knob_for_kind(id, kind)) ex_sb_add(&m, "%s%s is for %s", j ? "; " : " (", em_knob_table[id].name, ks);
    else { /* another kind's knob: its kinds without the conditions */
      int kn = (int)strcspn(ks, "(");
      while (kn > 0 && ks[kn - 1] == ' ') kn--;
      ex_sb_add(&m, "%s%s is for %.*s kernels, not %s", j ? "; " : " (", em_knob_table[id].name, kn, ks, kind);
    }
  }
  if (n == 1) ex_sb_add(&m, "): leave it at its default, %lld", (long long)em_knob_table[k->id[dead[0]]].def);
  else {
    ex_sb_add(&m, "): leave them at their defaults (");
    for (int j = 0; j < n; j++)
      ex_sb_add(&m, "%s%s=%lld", j ? ", " : "", em_knob_table[k->id[dead[j]]].name,
                (long long)em_knob_table[k->id[dead[j]]].def);
    ex_sb_add(&m, ")");
  }
  ex_fail(c, "%s", m.s);
  free(m.s);
  return 1;
}

em_status em_emit(const em_tile *t, char **src, em_launch *launch, char *err) {
  ectx c;
  memset(&c, 0, sizeof c);
  c.t = t;
  c.g = t->g;
  c.anchor = t->anchor;
  /* the knob plan: every knob of the table, the assignment's value or the table's default (em_knob_set checked
   * the assignment's names and values) */
  for (int i = 0; i < EM_NKNOBS; i++) c.kv[i] = em_knob_value(&t->knobs, (em_knob_id)i);
  c.xanchor = -1;
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
  c.vlink = em_alloc(sizeof(int) * (size_t)(c.g->values.n + 1));
  for (int i = 0; i < c.g->syms.n; i++) {
    const em_sym *s = &c.g->syms.s[i];
    c.dimc[i] = s->derived ? ex_A(&c, "cd%d", i) : ex_A(&c, "s_%s", s->name);
  }
  for (int i = 0; i < c.g->syms.n; i++)
    if (c.g->syms.s[i].derived) {
      const em_sym *s = &c.g->syms.s[i];
      ex_line(&c, "const long long cd%d = (%s + %lldLL - 1) / %lldLL;", i, ex_dim_c(&c, &s->num), (long long)s->den,
           (long long)s->den);
    }
  if (t->kind != EM_K_POINTWISE && (t->anchor < 0 || ex_V(&c, t->anchor)->kind != EM_V_NODE)) {
    ex_fail(&c, "a %s kernel needs an anchor node", em_kkind_name(t->kind));
  } else if (c.kv[EM_KNOB_STAMP] && !(t->kind == EM_K_CONTRACTION && c.kv[EM_KNOB_PERSIST]) &&
             !(t->kind == EM_K_ATTENTION && c.kv[EM_KNOB_FLASH] == 2)) {
    /* (emit_gemm_ws.c and emit_attention_wgmma.c read STAMP; elsewhere it would be a knob no emitter reads. A guard,
     * not a read: kv[] directly, so that the unread-knob check does not count it) */
    ex_fail(&c, "STAMP=1 stamps the roles of the persistent GEMM (a contraction with PERSIST=1) or of FLASH=2 attention");
  } else if (c.kv[EM_KNOB_DIAG] && (t->kind != EM_K_CONTRACTION || !c.kv[EM_KNOB_PERSIST] ||
                                    ((c.kv[EM_KNOB_DIAG] & 2) && (c.kv[EM_KNOB_CLUSTER] != 2 || c.kv[EM_KNOB_PAIR_A])) ||
                                    ((c.kv[EM_KNOB_DIAG] & 4) && (!(c.kv[EM_KNOB_DIAG] & 2) || c.kv[EM_KNOB_SPLIT_K] != 1)))) {
    ex_fail(&c, "DIAG=%lld takes a persistent GEMM apart (a contraction with PERSIST=1; DIAG 2, 3: CLUSTER=2, PAIR_A=0; "
                "DIAG 6, 7: as 2, 3 with SPLIT_K=1)", (long long)c.kv[EM_KNOB_DIAG]);
  } else {
    switch (t->kind) {
    case EM_K_POINTWISE: ex_k_pointwise(&c, launch); break;
    case EM_K_ROW: ex_k_row(&c, launch); break;
    case EM_K_REDUCE: ex_k_reduce(&c, launch); break;
    case EM_K_CONTRACTION: ex_k_contraction(&c, launch); break;
    case EM_K_ATTENTION: ex_k_attention(&c, launch); break;
    default: ex_fail(&c, "unknown kernel kind"); break;
    }
  }
  em_status st = EM_OK;
  if (c.failed) {
    st = em_fail(err, EM_EINPUT, "%s (%s): %s", t->name, em_kkind_name(t->kind), c.err);
    goto cleanup;
  }
  /* CLUSTER (the contraction's TMA multicast; FLASH=2's EMMY_KVMC): the cluster shape is the kernel's own, so a plain
   * launch forms the clusters (the grid's x is a multiple of it: the emitter checked) */
  long long cl = t->kind == EM_K_CONTRACTION ? EX_KNOB(&c, CLUSTER) : c.cluster > 1 ? c.cluster : 1;
  if (launch->persistent > cl) cl = launch->persistent; /* (PERSIST=1, SPLIT_K=2: a pair on one tile's K halves) */
  ex_sb_add(&head, "%s%s%s", ex_PRELUDE, c.extra_prelude ? c.extra_prelude : "",
            cl > 1 && c.extra_prelude == ex_TMA_PRELUDE ? ex_CLUSTER_PRELUDE : "");
  for (int i = 0; i < c.nmore; i++) ex_sb_add(&head, "%s", c.more_prelude[i]);
  ex_sb_add(&head, "\n// kernel %s: %s", t->name, em_kkind_name(t->kind));
  for (int i = 0; i < t->knobs.n; i++)
    ex_sb_add(&head, "%s%s=%lld", i ? "," : " ", em_knob_table[t->knobs.id[i]].name, (long long)t->knobs.val[i]);
  /* MINB (the flash tier): the blocks per SM the register allocation must allow (__launch_bounds__' second
   * argument); 1 leaves the allocation to ptxas */
  long long minb = EX_KNOB(&c, MINB);
  char cdims[64] = "";
  if (cl > 1) snprintf(cdims, sizeof cdims, "__cluster_dims__(%lld, 1, 1) ", cl);
  if (minb > 1 || launch->persistent || c.bounds_minb) /* (setmaxnreg needs the register cap of one block an SM) */
    ex_sb_add(&head, "\nextern \"C\" __global__ void %s__launch_bounds__(%d, %lld) %s(", cdims,
              launch->block[0] * launch->block[1] * launch->block[2], minb, t->name);
  else
    ex_sb_add(&head, "\nextern \"C\" __global__ void %s__launch_bounds__(%d) %s(", cdims,
              launch->block[0] * launch->block[1] * launch->block[2], t->name);
  int np = 0;
  for (int i = 0; i < c.g->inputs.n; i++) {
    const em_value *x = ex_V(&c, c.g->inputs.v[i]);
    ex_sb_add(&head, "%s\n    const %s *__restrict__ in%d /* %s %s */", np++ ? "," : "", ex_stype(x->dtype), i, x->name, em_dtype_name(x->dtype));
  }
  for (int j = 0; j < c.g->outputs.n; j++) {
    const em_value *x = ex_V(&c, c.g->outputs.v[j]);
    ex_sb_add(&head, "%s\n    %s *__restrict__ out%d /* %s %s */", np++ ? "," : "", ex_stype(x->dtype), j, x->name, em_dtype_name(x->dtype));
  }
  if (launch->scratch_per_tile > 0) ex_sb_add(&head, "%s\n    float *__restrict__ em_scratch", np++ ? "," : "");
  for (int j = 0; j < launch->ntmaps; j++) ex_sb_add(&head, "%s\n    const __grid_constant__ em_tmap tm%d", np++ ? "," : "", j);
  for (int i = 0; i < c.g->syms.n; i++) {
    if (c.g->syms.s[i].derived) continue;
    ex_sb_add(&head, "%s\n    long long s_%s", np++ ? "," : "", c.g->syms.s[i].name);
    launch->syms[launch->nsyms++] = i;
  }
  /* PLANT (test-only, tests/fixtures/plant/): a variant that faults (1: trap), hangs (2: spins on nanosleep, an
   * asm volatile with a memory clobber so that the loop has a side effect; a loop on a volatile local was promoted
   * to a register and deleted), answers wrong (3: the first block returns at once, so its part of the poisoned
   * outputs is never written) or does not compile (4: an #error) */
  static const char *const plant[5] = {"", "  asm volatile(\"trap;\");\n",
                                       "  for (;;) { asm volatile(\"nanosleep.u32 1000;\" ::: \"memory\"); }\n",
                                       "  if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0) return;\n",
                                       "#error \"PLANT=4: a planted compile error\"\n"};
  long long pl = EX_KNOB(&c, PLANT);
  /* Programmatic dependent launch (docs/formats.md; ex_pdl_mode): by default every kernel first waits for the previous grid in
   * the stream (griddepcontrol.wait: its completion and memory), so that the launcher may let this launch begin as
   * that grid's CTAs exit. EMMY_PDL=0: no wait, a plain launch; EMMY_PDL=1 (an experiment, slower): each CTA also
   * lets the next kernel launch as soon as all of this grid's CTAs have started; 4 (an experiment): only the row
   * kernels' (a norm lets the projection after it launch while it runs). Hopper and later
   * (guarded). */
  int pdl_mode = ex_pdl_mode();
  launch->pdl = pdl_mode > 0;
  ex_sb_add(&head, ") {\n%s%s%s%s%s%s%s}\n", pl >= 1 && pl <= 4 ? plant[pl] : "", c.pre_wait.s ? c.pre_wait.s : "",
            pdl_mode ? "#if __CUDA_ARCH__ >= 900\n" : "",
            pdl_mode == 1 || (pdl_mode == 4 && t->kind == EM_K_ROW) ? "  asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\");\n" : "",
            pdl_mode ? tmap_prefetch(&c, launch) : "",
            !pdl_mode ? "" : "  asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");\n#endif\n",
            body.s ? body.s : "");
  /* every knob is read by now: the header's reads (CLUSTER, MINB, PLANT) come last */
  if (check_unread(&c)) {
    st = em_fail(err, EM_EINPUT, "%s (%s): %s", t->name, em_kkind_name(t->kind), c.err);
    goto cleanup;
  }
  *src = head.s;
  head.s = NULL;
cleanup:
  free(head.s);
  free(body.s);
  free(c.pre_wait.s);
  for (int i = 0; i < c.arena.n; i++) free(c.arena.v[i]);
  free(c.arena.v);
  free(c.memo.v);
  free(c.al);
  free(c.bij);
  free(c.vlink);
  return st;
}
