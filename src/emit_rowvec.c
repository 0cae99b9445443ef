/* emit_rowvec.c — a row kernel's columns in chunks of V (by default in a kernel without a concatenation;
 * EMMY_ROW_VEC, docs/formats.md): a thread takes V consecutive columns a chunk, the chunk's elements emitted one
 * after another (columns em_c0 .. em_c<V-1>), and every unconditional load of a kernel input at the element's own
 * column becomes one load of the chunk (4, 8 or 16 bytes) made before the elements, every store of an output at it
 * one store after them. Where that is legal is decided here, from the text: the tensor's last dim a constant
 * multiple of V (a chunk then starts at a multiple of V elements, since em_cb is one) and the element's flat index
 * the chunk's plus j; the base pointers are the runtime's own buffers (cuMemAlloc, 256-byte aligned: a kernel never
 * gets a pointer into a buffer, views are index math). The element code is emitted into a buffer of its own first
 * (ex_rowvec_begin), so that the loads it asks for can be placed ahead of it (ex_rowvec_end). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emit_impl.h"

/* Whether text x names only row-level values (x0.., em_cb, the symbols s_*) besides numbers and operators: a load's
 * chunk index made ahead of the elements must not read a value computed inside them (a gather's index). */
static int row_level(const char *x) {
  for (const char *p = x; *p;) {
    if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_') {
      const char *q = p;
      while ((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') || *q == '_') q++;
      size_t n = (size_t)(q - p);
      int ok = (n >= 2 && p[0] == 'x' && strspn(p + 1, "0123456789") == n - 1) || (n == 5 && !strncmp(p, "em_cb", 5)) ||
               (n > 2 && !strncmp(p, "s_", 2)) || (n == 2 && !strncmp(p, "LL", 2));
      if (!ok) return 0;
      p = q;
    } else if (*p >= '0' && *p <= '9') {
      while ((*p >= '0' && *p <= '9') || *p == 'L') p++;
    } else {
      p++;
    }
  }
  return 1;
}

/* The element number j where x is exactly "em_c<j>", else -1. */
static int chunk_elem(const char *x) {
  if (strncmp(x, "em_c", 4) || !x[4] || strspn(x + 4, "0123456789") != strlen(x + 4)) return -1;
  return atoi(x + 4);
}

/* The chunk's flat index where element j of ix (its last index em_c<j>) is at it plus j in a tensor of shape s whose
 * chunks are aligned (its last dim a constant multiple of V), else NULL; *j the element. */
static const char *chunk_base(ectx *c, const ivec *ix, const em_shape *s, int *j) {
  int64_t last;
  if (!ix->rank || (*j = chunk_elem(ix->e[ix->rank - 1])) < 0 || !em_dim_is_const(&s->d[s->rank - 1], &last) ||
      last % c->row_vec)
    return NULL;
  ivec b = *ix;
  b.e[b.rank - 1] = "em_cb";
  const char *base = ex_linearize_expr(c, &b, s), *own = ex_linearize_expr(c, ix, s);
  size_t n = strlen(base);
  /* the last dim added last, at stride 1, and nothing else naming the column */
  if (n < 5 || strcmp(base + n - 5, "em_cb") || strncmp(own, base, n - 5) || strcmp(own + n - 5, ix->e[ix->rank - 1]) ||
      strstr(own, "em_c") != own + n - 5)
    return NULL;
  return base;
}

int ex_rowvec_contig(ectx *c, const ivec *ix, const em_shape *s, em_dtype dt) {
  int j;
  return c->row_vec >= 1 && (em_dtype_bytes(dt) == 2 || (dt == EM_F32 && c->row_vec <= 4)) && chunk_base(c, ix, s, &j);
}

/* The request of input p's chunk that element *j of ix (its last index em_c<j>) lies in, made if new and make: its
 * array, or NULL where the load cannot be a chunk's. */
static const char *chunk_request(ectx *c, int p, const ivec *ix, const em_shape *s, em_dtype dt, int *j, int make) {
  const char *base;
  if (!ex_rowvec_contig(c, ix, s, dt) || !(base = chunk_base(c, ix, s, j)) || !row_level(base)) return NULL;
  for (int i = 0; i < c->nvreq; i++)
    if (c->vreq[i].p == p && !strcmp(c->vreq[i].base, base)) return c->vreq[i].arr;
  if (!make || c->nvreq == (int)(sizeof c->vreq / sizeof c->vreq[0])) return NULL;
  const char *arr = ex_A(c, "em_vr%d", c->tmp++);
  c->vreq[c->nvreq].p = p;
  c->vreq[c->nvreq].dt = dt;
  c->vreq[c->nvreq].base = base;
  c->vreq[c->nvreq++].arr = arr;
  return arr;
}

/* Whether text x is a column em_c<j> plus a constant: parsed by the dims' own parser (em_dim_parse, emmy's LL
 * suffixes dropped, em_c<j> its one symbol; any other name refuses), less the column, a constant *d; *j the element. */
static int col_shift(const char *x, int64_t *d, int *j) {
  const char *c = strstr(x, "em_c");
  char buf[512], name[16], err[EM_ERR_MAX];
  size_t n = 0;
  for (const char *p = x; *p; p++) {
    if (*p == 'L' && p > x && (isdigit((unsigned char)p[-1]) || p[-1] == 'L')) continue;
    if (n + 1 == sizeof buf) return 0;
    buf[n++] = *p;
  }
  buf[n] = 0;
  if (!c || !isdigit((unsigned char)c[4])) return 0;
  *j = atoi(c + 4);
  snprintf(name, sizeof name, "em_c%d", *j);
  em_symtab st = {0};
  em_dim e, col = em_dim_sym(0), k;
  return em_symtab_add(&st, name, -1, 0, INT64_MAX, err) == 0 && em_dim_parse(&st, buf, &e, err) == EM_OK &&
         !em_dim_sub(&e, &col, &k) && em_dim_is_const(&k, d);
}

/* EMMY_ROW_PRELOAD: a load inside a branch of the element code (RoPE's rotate-half partner) at column em_c<j> + d of
 * a chunk the element code already loads unconditionally (the same tensor and the same other indices: the same row),
 * d a whole number k of chunk strides (THREADS·V): element j of chunk em_i + k of that preloaded array. In the branch
 * where the column is in the row, chunk em_i + k is one of this thread's (the row is THREADS·V·chunks columns); in the
 * other (dead) one the chunk number wraps, so the array index stays in range. A chunk not yet loaded (another row:
 * a concatenation along another dim) is never loaded for a branch — it may lie outside the tensor there. */
static const char *partner_load(ectx *c, int p, const ivec *ix, const em_shape *s, em_dtype dt) {
  int64_t d;
  int j, last = ix->rank - 1;
  if (!c->row_pre || !ix->rank || !col_shift(ix->e[last], &d, &j) || d % c->row_stride) return NULL;
  ivec own = *ix;
  own.e[last] = ex_A(c, "em_c%d", j);
  const char *arr = chunk_request(c, p, &own, s, dt, &j, 0);
  int n = c->row_pre, k = (int)(((d / c->row_stride) % n + n) % n);
  return arr ? ex_A(c, "%s[(em_i + %d) %% %d][%d]", arr, k, n, j) : NULL;
}

const char *ex_rowvec_load(ectx *c, int p, const ivec *ix, const em_shape *s, em_dtype dt) {
  int j;
  if (c->cond_depth) return partner_load(c, p, ix, s, dt);
  const char *arr = chunk_request(c, p, ix, s, dt, &j, 1);
  if (!arr) return NULL;
  return c->row_pre ? ex_A(c, "%s[em_i][%d]", arr, j) : ex_A(c, "%s[%d]", arr, j);
}

void ex_rowvec_begin(ectx *c, sbuf *body) {
  memset(body, 0, sizeof *body);
  c->row_saved = c->out;
  c->out = body;
  if (!c->row_pre) c->nvreq = 0;
}

/* One request's load: the chunk at once, through the read-only path (__ldg), into its array (EMMY_ROW_PRELOAD: row
 * em_i of its [chunks][V] array, declared by ex_rowvec_preload). */
static void rowvec_load(ectx *c, int i) {
  int v = c->row_vec, two = c->vreq[i].dt != EM_F32;
  const char *st = ex_stype(c->vreq[i].dt), *arr = c->vreq[i].arr;
  const char *w = two ? (v == 1 ? st : v == 2 ? "unsigned" : v == 4 ? "uint2" : "uint4")
                      : (v == 1 ? "float" : v == 2 ? "float2" : "float4");
  const char *q = ex_A(c, "%s_w", arr);
  ex_line(c, "const %s %s = __ldg((const %s *)(in%d + (%s)));", w, q, w, c->vreq[i].p, c->vreq[i].base);
  if (c->row_pre) arr = ex_A(c, "%s[em_i]", arr);
  else ex_line(c, "%s %s[%d];", st, arr, v);
  if (v == 1) ex_line(c, "%s[0] = %s;", arr, q); /* (EMMY_ROW_PRELOAD's chunks of one column) */
  for (int j = 0; j < v && v > 1; j++) {
    if (!two) ex_line(c, "%s[%d] = %s.%c;", arr, j, q, "xyzw"[j]);
    else
      ex_line(c, "%s[%d] = (unsigned short)(%s%s%s);", arr, j, q, v == 2 ? "" : (const char *[]){".x", ".y", ".z", ".w"}[j / 2],
              j & 1 ? " >> 16" : "");
  }
}

void ex_rowvec_end(ectx *c, sbuf *body) {
  c->out = c->row_saved;
  if (!c->row_pre)
    for (int i = 0; i < c->nvreq; i++) rowvec_load(c, i);
  if (body->s) ex_sb_add(c->out, "%s", body->s);
  free(body->s);
  if (!c->row_pre) c->nvreq = 0;
}

/* The chunk loop of the requests whose "before the wait" mark is pre (pre_wait: EMMY_ROW_PRELOAD=2's weights), each
 * chunk into row em_i of its [chunks][V] array; live: the loop is inside the row's guard. */
static void preload_loop(ectx *c, int threads, const int *early, int pre, int live) {
  int v = c->row_vec, any = 0;
  for (int i = 0; i < c->nvreq; i++)
    if (early[i] == pre) {
      ex_line(c, "%s %s[%d][%d];", ex_stype(c->vreq[i].dt), c->vreq[i].arr, c->row_pre, v);
      any = 1;
    }
  if (!any) return;
  if (live) {
    ex_line(c, "if (live) {");
    c->indent++;
  }
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int em_i = 0; em_i < %d; em_i++) {", c->row_pre);
  c->indent++;
  ex_line(c, "const long long em_cb = (threadIdx.x + em_i * %dLL) * %d;", threads, v);
  for (int i = 0; i < c->nvreq; i++)
    if (early[i] == pre) rowvec_load(c, i);
  c->indent--;
  ex_line(c, "}");
  if (live) {
    c->indent--;
    ex_line(c, "}");
  }
}

/* EMMY_ROW_PRELOAD: every chunk load both passes asked for, each tensor's chunk once, made before the first pass —
 * the row's inputs in registers across the reduction, so the second pass waits on no memory. =2: a weight's chunks
 * (a param input at the column alone: the same for every row) are loaded once, before the grid dependency wait
 * (c->pre_wait), so their loads overlap the previous kernel's tail — no kernel writes a weight. */
void ex_rowvec_preload(ectx *c, int threads) {
  int early[16] = {0};
  if (ex_env_choice("EMMY_ROW_PRELOAD", 2) == 2)
    for (int i = 0; i < c->nvreq; i++)
      early[i] = ex_V(c, c->g->inputs.v[c->vreq[i].p])->kind == EM_V_PARAM && !strcmp(c->vreq[i].base, "em_cb");
  sbuf *out = c->out;
  int indent = c->indent;
  c->out = &c->pre_wait;
  c->indent = 1;
  preload_loop(c, threads, early, 1, 0);
  c->out = out;
  c->indent = indent;
  preload_loop(c, threads, early, 0, 1);
  c->nvreq = 0;
}

/* The chunk's stores of output t (cap[j]: element j's): one store where its elements are contiguous and aligned
 * (ex_rowvec_contig when captured), else one an element. */
void ex_rowvec_stores(ectx *c, const ex_cap *cap, int t) {
  int v = c->row_vec, p = cap[0].pos[t];
  em_dtype dt = ex_V(c, c->g->outputs.v[p])->dtype;
  const char *val[8];
  for (int j = 0; j < v; j++) val[j] = cap[j].val[t];
  const char *one = cap[0].contig[t] ? ex_store_chunk(c, p, cap[0].ix[t], val, v, dt) : NULL;
  if (one) ex_line(c, "%s", one);
  else
    for (int j = 0; j < v; j++) ex_line(c, "out%d[%s] = %s;", p, cap[j].ix[t], cap[j].val[t]);
}
