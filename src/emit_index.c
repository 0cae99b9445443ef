/* emit_index.c — the emitter's index algebra, as C expression text: long index expressions named once a scope,
 * linearize and unravel with the records that fold an unravelled index back without a division (and a row's
 * split computed ahead, ex_split_known), broadcasting, axis arguments, and strided views of kernel inputs (the
 * offset of an index through the strides a chain of views leaves). emit.c's values and alignment rest on it. */
#include "emit_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- index vectors ---------------------------------------------------------------------------------- */

/* Keeps index expressions short by naming long ones. The name is a function of the expression and is
 * declared once per scope (index temps live in the memo table, so leaving a scope forgets them), so the same
 * index computed in two scopes reads the same — the row kernel's single pass relies on that. */
const char *ex_idx_name(ectx *c, const char *e) {
  if (strlen(e) < 48) return e;
  for (int i = c->memo.n - 1; i >= 0; i--)
    if (c->memo.v[i].v == -1 && !strcmp(c->memo.v[i].key, e)) return c->memo.v[i].var;
  uint64_t h = em_fnv1a(EM_FNV_SEED, e, strlen(e));
  const char *n = ex_A(c, "i%08llx", (unsigned long long)(h & 0xffffffffULL));
  ex_line(c, "const long long %s = %s;", n, e);
  memo_ent m = {-1, ex_A(c, "%s", e), n};
  EM_VEC_PUSH(c->memo, m);
  return n;
}

/* Records that index text lin divided by dim d is q, remainder r, both computed elsewhere (a row's parts hoisted
 * out of an element loop; memo entries with v == -4, scoped like index names): ex_unravel takes them rather than
 * dividing again. */
void ex_split_known(ectx *c, const char *lin, const em_dim *d, const char *q, const char *r) {
  const char *dm = ex_dim_c(c, d);
  memo_ent mq = {-4, (char *)ex_A(c, "q\x1f%s\x1f%s", lin, dm), (char *)q}, mr = {-4, (char *)ex_A(c, "r\x1f%s\x1f%s", lin, dm), (char *)r};
  EM_VEC_PUSH(c->memo, mq);
  EM_VEC_PUSH(c->memo, mr);
}

/* Records that index text lin is base + off with base a multiple of w and 0 <= off < w (a thread's column in the
 * fragment epilogue: its warp's first column, a multiple of the warp's column span w, plus its place in that span;
 * memo entries with v == -5, scoped like index names). ex_unravel then splits lin by a constant k that w divides, or
 * that divides w, without dividing the whole: lin % k is base % k + off (the compiler folds base % k to 0 where k
 * divides base's factor) or off % k, and lin / k is base / k (+ off / k) — so a head-local read of RoPE or of a
 * column view becomes the lane's own offset, constant once the loop is unrolled. */
/* The tile split below and the index parts read through it: the default since 2026-12-05 (docs/formats.md, the
 * measurement); EMMY_TILE_SPLIT=0 at compile time emits the earlier text, for A/B runs. */
int ex_tile_split(void) { return ex_env_default_on("EMMY_TILE_SPLIT"); }

void ex_split_tile(ectx *c, const char *lin, const char *base, int64_t w, const char *off) {
  if (!ex_tile_split()) return;
  memo_ent m = {-5, (char *)ex_A(c, "%s", lin), ex_A(c, "%s\x1f%lld\x1f%s", base, (long long)w, off)};
  EM_VEC_PUSH(c->memo, m);
}

/* lin split by the constant k through its ex_split_tile record (*q, *r), or 0 where it has none k fits. */
static int split_tile(ectx *c, const char *lin, int64_t k, const char **q, const char **r) {
  for (int i = c->memo.n - 1; i >= 0; i--) {
    if (c->memo.v[i].v != -5 || strcmp(c->memo.v[i].key, lin)) continue;
    const char *v = c->memo.v[i].var, *s1 = strchr(v, '\x1f'), *s2 = s1 ? strchr(s1 + 1, '\x1f') : NULL;
    if (!s2 || k <= 0) return 0;
    const char *base = ex_A(c, "%.*s", (int)(s1 - v), v), *off = s2 + 1;
    int64_t w = strtoll(s1 + 1, NULL, 10);
    if (w <= 0) return 0;
    if (k == w) { /* base % k is 0, off < k */
      *q = ex_A(c, "(%s) / %lldLL", base, (long long)k);
      *r = ex_A(c, "(%s)", off);
    } else if (k % w == 0) {
      *q = ex_A(c, "(%s) / %lldLL", base, (long long)k);
      *r = ex_A(c, "(%s) %% %lldLL + (%s)", base, (long long)k, off);
    } else if (w % k == 0) {
      *q = ex_A(c, "(%s) / %lldLL + (%s) / %lldLL", base, (long long)k, off, (long long)k);
      *r = ex_A(c, "(%s) %% %lldLL", off, (long long)k);
    } else {
      return 0;
    }
    return 1;
  }
  return 0;
}

static const char *split_known(ectx *c, char which, const char *lin, const char *dm) {
  const char *key = ex_A(c, "%c\x1f%s\x1f%s", which, lin, dm);
  for (int i = c->memo.n - 1; i >= 0; i--)
    if (c->memo.v[i].v == -4 && !strcmp(c->memo.v[i].key, key)) return c->memo.v[i].var;
  return NULL;
}

/* ex_unravel records each step (quotient, remainder, dim) -> the index it split, as memo entries with v == -2
 * (scoped like index names), so that ex_linearize folds (q) * d + r back into that index: an output written
 * at the flat index its loop unraveled costs no division. */
static const char *unravel_key(ectx *c, const char *q, const char *r, const char *dm) {
  return ex_A(c, "%s\x1f%s\x1f%s", q, r, dm);
}

static const char *unravel_undo(ectx *c, const char *q, const char *r, const char *dm) {
  const char *key = unravel_key(c, q, r, dm);
  for (int i = c->memo.n - 1; i >= 0; i--)
    if (c->memo.v[i].v == -2 && !strcmp(c->memo.v[i].key, key)) return c->memo.v[i].var;
  return NULL;
}

/* ex_linearize records each step it could not undo, (a) * d + b with a constant d and b an index of a dim of d
 * (0 <= b < d), as a memo entry with v == -3 (scoped like index names): its text (and its name) -> "a\x1fd\x1fb".
 * ex_unravel splits such a text by a constant dim k dividing d without a division of the whole: its remainder
 * is (b) % k and its quotient (a) * (d / k) + (b) / k, or a itself where k == d. So an output written through a
 * view that splits the columns (heads) divides the column index by constants, and the row index m by the
 * sequence length once, not the flat index per element. */
static void linear_record(ectx *c, const char *e, const char *a, int64_t d, const char *b) {
  memo_ent m = {-3, (char *)ex_A(c, "%s", e), ex_A(c, "%s\x1f%lld\x1f%s", a, (long long)d, b)};
  EM_VEC_PUSH(c->memo, m);
}

/* The recorded (a, d, b) of text e, or 0. */
static int linear_parts(ectx *c, const char *e, const char **a, int64_t *d, const char **b) {
  for (int i = c->memo.n - 1; i >= 0; i--) {
    if (c->memo.v[i].v != -3 || strcmp(c->memo.v[i].key, e)) continue;
    const char *v = c->memo.v[i].var, *s1 = strchr(v, '\x1f'), *s2 = s1 ? strchr(s1 + 1, '\x1f') : NULL;
    if (!s2) return 0;
    *a = ex_A(c, "%.*s", (int)(s1 - v), v);
    *d = strtoll(s1 + 1, NULL, 10);
    *b = s2 + 1;
    return 1;
  }
  return 0;
}

/* x - y for two flat indices, as text the compiler folds: where both are (a) * d + b over the same a (y's b split
 * by x's d through its tile record: the element's own column, x a read in its row), the difference of their b. A
 * read of the partner in RoPE's head is then a constant shift; as (x) - (y) the 64-bit products did not cancel and
 * the partner's selects stayed (docs/formats.md, EMMY_TILE_SPLIT). */
const char *ex_index_diff(ectx *c, const char *x, const char *y) {
  const char *ax, *bx, *ay, *by, *tq, *tr;
  int64_t dx, dy;
  if (ex_tile_split() && linear_parts(c, x, &ax, &dx, &bx) && linear_parts(c, y, &ay, &dy, &by) && dx > 0) {
    if (dy == dx && !strcmp(ax, ay)) return ex_A(c, "(%s) - (%s)", bx, by);
    if (dy % dx == 0 && split_tile(c, by, dx, &tq, &tr) && !strcmp(ax, ex_A(c, "(%s) * %lldLL + %s", ay, (long long)(dy / dx), tq)))
      return ex_A(c, "(%s) - (%s)", bx, tr);
  }
  return ex_A(c, "(%s) - (%s)", x, y);
}

/* The part of flat index x that decides its parity: b where x is (a) * d + b with d even (linear_record), else x. */
const char *ex_index_low(ectx *c, const char *x) {
  const char *a, *b;
  int64_t d;
  if (ex_tile_split() && linear_parts(c, x, &a, &d, &b) && d % 2 == 0) return b;
  return x;
}

/* The flat index of ix in s as one expression (row-major); record: the linear parts of each step recorded
 * (linear_record), *a, *k, *b the last step's (a NULL where it has none). */
static const char *lin_expr(ectx *c, const ivec *ix, const em_shape *s, int record, const char **a, int64_t *k, const char **b) {
  const char *e = ix->e[0];
  *a = *b = NULL;
  *k = 0;
  for (int i = 1; i < s->rank; i++) {
    const char *dm = ex_dim_c(c, &s->d[i]), *u;
    if (ex_is_one(&s->d[i]) && !strcmp(ix->e[i], "0LL")) continue;
    if ((u = unravel_undo(c, e, ix->e[i], dm))) {
      e = u;
      *a = NULL;
    } else {
      *a = e;
      *b = ix->e[i];
      e = ex_A(c, "(%s) * %s + %s", e, dm, ix->e[i]);
      if (em_dim_is_const(&s->d[i], k) && *k > 0) {
        if (record) linear_record(c, e, *a, *k, *b);
      } else {
        *a = NULL;
      }
    }
  }
  return e;
}

const char *ex_linearize(ectx *c, const ivec *ix, const em_shape *s) {
  if (s->rank == 0) return "0LL";
  const char *a, *b;
  int64_t k;
  const char *e = lin_expr(c, ix, s, 1, &a, &k, &b);
  const char *name = ex_idx_name(c, e);
  if (a && name != e) linear_record(c, name, a, k, b);
  return name;
}

const char *ex_linearize_expr(ectx *c, const ivec *ix, const em_shape *s) {
  const char *a, *b;
  int64_t k;
  return s->rank == 0 ? "0LL" : lin_expr(c, ix, s, 0, &a, &k, &b);
}

/* A symbolic dim whose outer dims all have extent 1 (a dynamic sequence at batch 1) takes the rest of the index
 * whole, the outer dims 0 — no 64-bit division or remainder by the runtime extent. The same values for every index
 * in range; an index past the end (a masked tile's rows, which the kernels guard by the flat index) gets the dim past
 * its extent instead of wrapping around. EMMY_UNIT_OUTER at compile time (docs/formats.md): unset, every kernel but
 * a contraction (measured in the forty-ninth session: the norms 5-11% faster, a contraction's epilogue 2-6% slower);
 * 0, none (the text before); 1, every kernel. */
static int unit_outer_on(const ectx *c) {
  const char *e = getenv("EMMY_UNIT_OUTER");
  if (e && !strcmp(e, "0")) return 0;
  if (e && !strcmp(e, "1")) return 1;
  return !c->t || c->t->kind != EM_K_CONTRACTION;
}

static int outer_dims_one(const ectx *c, const em_shape *s, int i) {
  if (!unit_outer_on(c) || em_dim_is_const(&s->d[i], &(int64_t){0})) return 0;
  for (int j = 0; j < i; j++)
    if (!ex_is_one(&s->d[j])) return 0;
  return 1;
}

ivec ex_unravel(ectx *c, const char *lin, const em_shape *s) {
  ivec r = {s->rank};
  const char *rest = lin;
  for (int i = s->rank - 1; i >= 0; i--) {
    int64_t k;
    if (i == 0) r.e[i] = rest;
    else if (em_dim_is_const(&s->d[i], &k) && k == 1) r.e[i] = "0LL";
    else if (outer_dims_one(c, s, i)) {
      r.e[i] = rest;
      for (int j = 0; j < i; j++) r.e[j] = "0LL";
      memo_ent m = {-2, (char *)unravel_key(c, "0LL", rest, ex_dim_c(c, &s->d[i])), rest};
      EM_VEC_PUSH(c->memo, m);
      break;
    } else {
      const char *dm = ex_dim_c(c, &s->d[i]), *whole = rest, *a, *b;
      int64_t d;
      const char *tq, *tr;
      if (em_dim_is_const(&s->d[i], &k) && k > 0 && linear_parts(c, rest, &a, &d, &b) && d % k == 0) {
        /* (a) * d + b split by k, a divisor of d (linear_record); b split through its tile record where it has one */
        int tile = d != k && split_tile(c, b, k, &tq, &tr);
        r.e[i] = d == k ? b : tile ? tr : ex_idx_name(c, ex_A(c, "(%s) %% %s", b, dm));
        if (d == k) rest = a;
        else {
          const char *bq = tile ? tq : ex_idx_name(c, ex_A(c, "(%s) / %s", b, dm));
          rest = ex_A(c, "(%s) * %lldLL + %s", a, (long long)(d / k), bq);
          linear_record(c, rest, a, d / k, bq);
        }
      } else if (split_known(c, 'q', rest, dm)) {
        r.e[i] = split_known(c, 'r', rest, dm);
        rest = split_known(c, 'q', rest, dm);
      } else if (em_dim_is_const(&s->d[i], &k) && split_tile(c, rest, k, &tq, &tr)) {
        r.e[i] = tr;
        rest = tq;
      } else {
        r.e[i] = ex_idx_name(c, ex_A(c, "(%s) %% %s", rest, dm));
        rest = ex_idx_name(c, ex_A(c, "(%s) / %s", rest, dm));
      }
      memo_ent m = {-2, (char *)unravel_key(c, rest, r.e[i], dm), whole};
      EM_VEC_PUSH(c->memo, m);
    }
  }
  return r;
}


int ex_is_one(const em_dim *d) {
  int64_t k;
  return em_dim_is_const(d, &k) && k == 1;
}

/* Index of a broadcast operand u of an op whose output has shape out. */
ivec ex_bcast(ectx *c, const ivec *ix, const em_shape *out, const em_shape *u) {
  ivec r = {u->rank};
  int off = out->rank - u->rank;
  for (int i = 0; i < u->rank; i++) r.e[i] = (ex_is_one(&u->d[i]) && !ex_is_one(&out->d[i + off])) ? "0LL" : ix->e[i + off];
  return r;
}

int ex_axis_of_dim(const em_dim *d, int rank) {
  int64_t k = 0;
  em_dim_is_const(d, &k);
  return (int)(k < 0 ? k + rank : k);
}

int ex_axis_of(const em_arg *a, int rank) { return ex_axis_of_dim(&a->i, rank); }

/* ---- strided views ------------------------------------------------------------------------------------ */

/* Contiguous strides of shape s (elements). */
static int contiguous_strides(const em_shape *s, em_dim *st) {
  em_dim acc = em_dim_const(1);
  for (int i = s->rank - 1; i >= 0; i--) {
    st[i] = acc;
    if (em_dim_mul(&acc, &s->d[i], &acc)) return -1;
  }
  return 0;
}

/* The strides of a reshape of a strided tensor, as PyTorch's view computes them: the dims are matched in
 * groups of equal element count, and each group of input dims must itself be contiguous (size-1 dims aside).
 * Returns -1 when the reshape is not a view of the strided input. */
static int reshape_strides(const em_shape *in, const em_dim *ist, const em_shape *o, em_dim *ost) {
  int i = 0, j = 0;
  while (i < in->rank || j < o->rank) {
    int i0 = i, j0 = j;
    em_dim pa = em_dim_const(1), pb = em_dim_const(1), q;
    if (i < in->rank && em_dim_mul(&pa, &in->d[i++], &pa)) return -1;
    if (j < o->rank && em_dim_mul(&pb, &o->d[j++], &pb)) return -1;
    while (!em_dim_eq(&pa, &pb)) {
      if (i < in->rank && !em_dim_divexact(&pb, &pa, &q)) {
        if (em_dim_mul(&pa, &in->d[i++], &pa)) return -1;
      } else if (j < o->rank && !em_dim_divexact(&pa, &pb, &q)) {
        if (em_dim_mul(&pb, &o->d[j++], &pb)) return -1;
      } else return -1;
    }
    /* input dims i0..i-1 must be contiguous among themselves; the group's innermost stride is the base */
    int last = -1;
    for (int k = i - 1; k >= i0; k--) {
      if (ex_is_one(&in->d[k])) continue;
      if (last >= 0) {
        em_dim want;
        if (em_dim_mul(&ist[last], &in->d[last], &want) || !em_dim_eq(&want, &ist[k])) return -1;
      }
      last = k;
    }
    /* the innermost non-1 input dim of the group carries the group's unit stride */
    em_dim unit = em_dim_const(1);
    for (int k = i - 1; k >= i0; k--)
      if (!ex_is_one(&in->d[k])) {
        unit = ist[k];
        break;
      }
    for (int k = j - 1; k >= j0; k--) {
      ost[k] = unit;
      if (em_dim_mul(&unit, &o->d[k], &unit)) return -1;
    }
  }
  return 0;
}

int ex_strided(ectx *c, int v, int *base, em_dim *st) {
  int chain[16], n = 0;
  int x = v;
  while (ex_V(c, x)->kind == EM_V_NODE) {
    const em_node *nd = &c->g->nodes.v[ex_V(c, x)->node];
    switch (nd->op) {
    case EM_OP_VIEW: case EM_OP_RESHAPE: case EM_OP_UNSAFE_VIEW: case EM_OP_TRANSPOSE: case EM_OP_T:
    case EM_OP_PERMUTE: case EM_OP_EXPAND: case EM_OP_UNSQUEEZE: case EM_OP_SQUEEZE: break;
    default: return 0;
    }
    if (n == 16) return 0;
    chain[n++] = ex_V(c, x)->node;
    x = nd->args[0].tensor;
  }
  *base = x;
  em_dim cur[MAXR];
  if (contiguous_strides(ex_S(c, x), cur)) return 0;
  for (int k = n - 1; k >= 0; k--) {
    const em_node *nd = &c->g->nodes.v[chain[k]];
    const em_shape *in = ex_S(c, nd->args[0].tensor), *o = &ex_V(c, nd->out)->shape;
    em_dim nx[MAXR];
    switch (nd->op) {
    case EM_OP_VIEW: case EM_OP_RESHAPE: case EM_OP_UNSAFE_VIEW:
      if (reshape_strides(in, cur, o, nx)) return 0;
      break;
    case EM_OP_TRANSPOSE: {
      int d0 = ex_axis_of(&nd->args[1], in->rank), d1 = ex_axis_of(&nd->args[2], in->rank);
      for (int i = 0; i < in->rank; i++) nx[i] = cur[i];
      nx[d0] = cur[d1];
      nx[d1] = cur[d0];
      break;
    }
    case EM_OP_T:
      for (int i = 0; i < in->rank; i++) nx[i] = cur[in->rank - 1 - i];
      break;
    case EM_OP_PERMUTE:
      for (int i = 0; i < in->rank; i++) nx[i] = cur[ex_axis_of_dim(&nd->args[1].ilist[i], in->rank)];
      break;
    case EM_OP_EXPAND: {
      int off = o->rank - in->rank;
      for (int i = 0; i < o->rank; i++)
        nx[i] = i < off || (ex_is_one(&in->d[i - off]) && !ex_is_one(&o->d[i])) ? em_dim_const(0) : cur[i - off];
      break;
    }
    case EM_OP_UNSQUEEZE: {
      int d = ex_axis_of(&nd->args[1], o->rank);
      for (int i = 0, q = 0; i < o->rank; i++) nx[i] = i == d ? em_dim_const(0) : cur[q++];
      break;
    }
    case EM_OP_SQUEEZE:
      for (int i = 0, q = 0; i < in->rank; i++)
        if (in->rank == o->rank || !ex_is_one(&in->d[i]) || i != ex_axis_of(&nd->args[1], in->rank)) nx[q++] = cur[i];
      break;
    default: return 0;
    }
    for (int i = 0; i < o->rank; i++) cur[i] = nx[i];
  }
  for (int i = 0; i < ex_S(c, v)->rank; i++) st[i] = cur[i];
  return 1;
}

const char *ex_strided_offset(ectx *c, const ivec *ix, const em_shape *s, const em_dim *st) {
  const char *e = NULL;
  for (int i = 0; i < s->rank; i++) {
    int64_t k;
    if (ex_is_one(&s->d[i]) || !strcmp(ix->e[i], "0LL") || (em_dim_is_const(&st[i], &k) && k == 0)) continue;
    const char *t = em_dim_is_const(&st[i], &k) && k == 1 ? ex_A(c, "%s", ix->e[i]) : ex_A(c, "(%s) * %s", ix->e[i], ex_dim_c(c, &st[i]));
    e = e ? ex_A(c, "%s + %s", e, t) : t;
  }
  return e ? ex_idx_name(c, e) : "0LL";
}

int ex_dim_multiple_of(const em_dim *d, int64_t m) {
  for (int i = 0; i < d->n; i++)
    if (d->t[i].coef % m) return 0;
  return 1;
}
