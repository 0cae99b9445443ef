/* emit_kinds.c — the kernel templates of the emitter for the one-pass kinds: pointwise, row (a reduction over
 * the last dim with its prologue and epilogue) and reduce. The contraction templates are emit_contraction.c,
 * attention's emit_attention.c. Each lays out the loops and shared memory of its kind and asks the core
 * (emit.c) for values by index. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emit_impl.h"

/* Pointwise: a grid-stride loop; each thread takes VEC consecutive elements, EPT times per loop trip. */
void ex_k_pointwise(ectx *c, em_launch *L) {
  int threads = EX_KNOB(c, BLOCK), vec = EX_KNOB(c, VEC), ept = EX_KNOB(c, EPT);
  if (vec < 1 || ept < 1) {
    ex_fail(c, "VEC=%d and EPT=%d must be at least 1", vec, ept);
    return;
  }
  int o0 = c->g->outputs.v[0];
  const em_shape *ds = ex_S(c, o0);
  L->block[0] = threads;
  snprintf(L->grid[0], sizeof L->grid[0], "cdiv(%s,%d)", ex_numel_text(c, ds), threads * vec * ept);
  ex_line(c, "const long long total = %s, stride = (long long)gridDim.x * blockDim.x * %d;", ex_numel_c(c, ds), vec);
  ex_line(c, "for (long long l0 = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * %d; l0 < total; l0 += stride * %d) {", vec,
       ept);
  c->indent++;
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int em_e = 0; em_e < %d; em_e++) {", ept);
  c->indent++;
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int em_v = 0; em_v < %d; em_v++) {", vec);
  c->indent++;
  ex_line(c, "const long long lin = l0 + em_e * stride + em_v;");
  ex_line(c, "if (lin >= total) break;");
  ivec d = ex_domain_vars(c, ds, "lin");
  ex_write_aligned(c, o0, d, "a pointwise kernel's outputs must share one index space");
  c->indent--;
  ex_line(c, "}");
  c->indent--;
  ex_line(c, "}");
  c->indent--;
  ex_line(c, "}");
}

static const char *red_init(em_op op) { return op == EM_OP_AMAX ? "-INFINITY" : "0.0f"; }

/* A row's column loop: each thread's columns threadIdx.x + i·THREADS of the live row. unroll (UNROLL=1, a constant
 * row of Lk elements): the ceil(Lk/THREADS) trips unrolled, so the thread's loads issue together. Closed by
 * row_loop_close. */
static void row_loop_open(ectx *c, int unroll, int threads, int64_t Lk) {
  if (!unroll) {
    ex_line(c, "for (long long col = threadIdx.x; live && col < L; col += blockDim.x) {");
    c->indent++;
    return;
  }
  ex_line(c, "if (live) {");
  c->indent++;
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int em_i = 0; em_i < %lld; em_i++) {", (long long)((Lk + threads - 1) / threads));
  c->indent++;
  ex_line(c, "const long long col = threadIdx.x + em_i * %dLL;", threads);
  if (Lk % threads) ex_line(c, "if (col >= L) break;");
}

static void row_loop_close(ectx *c, int unroll) {
  for (int i = 0; i < (unroll ? 2 : 1); i++) {
    c->indent--;
    ex_line(c, "}");
  }
}

/* A row's sum (max: maximum) of each thread's partial in the variable v, left in v: across the block's warps through
 * em_red, or — with a warp a row (THREADS=32), the default; EMMY_WARP_RED=0 the earlier text — by the warp's shuffles
 * alone (the same value: with one warp em_block_sum's second stage adds zeros), without the block barriers that make
 * the RPB warps of a block wait for each other's loads. */
static void row_reduce(ectx *c, int warp, const char *v, int max) {
  if (!warp) {
    ex_line(c, "%s = %s(%s, em_red);", v, max ? "em_block_max" : "em_block_sum", v);
    return;
  }
  if (max) ex_line(c, "for (int em_o = 16; em_o > 0; em_o >>= 1) %s = fmaxf(%s, __shfl_xor_sync(0xffffffffu, %s, em_o));", v, v, v);
  else ex_line(c, "for (int em_o = 16; em_o > 0; em_o >>= 1) %s += __shfl_xor_sync(0xffffffffu, %s, em_o);", v, v);
}

/* Whether (the default; EMMY_ROW_EXACT=0 the earlier text) the row count is a multiple of RPB for every value of its
 * symbols (each coefficient of its polynomial is: Qwen3's q_norm has 16·seq_len rows, 8 a block), so no block has a
 * row past the end and 'live' is the constant true — the guard gone, a row's two passes one straight run the compiler
 * can schedule loads across. */
static int rows_exact(ectx *c, const em_shape *lead, int rpb) {
  em_dim n, q, d = em_dim_const(rpb);
  return ex_env_default_on("EMMY_ROW_EXACT") && !em_shape_numel(lead, &n) && !em_dim_divexact(&n, &d, &q);
}

/* EMMY_ROW_VEC=V (2, 4, 8; emit_rowvec.c): the columns in chunks of V where the row is a constant multiple of
 * THREADS·V and unrolled (not CACHE, not softmax); 1: the widest of 8, 4, 2 (at most 16 bytes of the kernel's widest
 * input) that fits a thread's columns — half of them where the kernel concatenates (RoPE's rotate-half: a chunk and
 * its partner then stay one thread's, and the half a chunk is in is known); 0: a column a step. Unset (the default,
 * measured in docs/performance.md): 1 in a kernel without a concatenation, 0 in one with (RoPE's norms lose). */
static int row_vec_of(ectx *c, int unroll, int cache, int softmax, int threads, int64_t Lk) {
  const char *e = getenv("EMMY_ROW_VEC");
  int v = ex_env_choice("EMMY_ROW_VEC", 8), cats = 0;
  for (int i = 0; i < c->g->nodes.n; i++) cats += c->g->nodes.v[i].op == EM_OP_CAT;
  if (!e || !*e) v = cats ? 0 : 1;
  if (!unroll || cache || softmax) return 0;
  if (!(v == 1 || v == 2 || v == 4 || v == 8)) v = 0;
  if (v == 1) {
    int64_t per = Lk / threads;
    for (int i = 0; i < cats; i++) per /= 2;
    int most = 8; /* (16 bytes of the kernel's widest input) */
    for (int i = 0; i < c->g->inputs.n; i++)
      if (em_dtype_bytes(ex_V(c, c->g->inputs.v[i])->dtype) == 4) most = 4;
    for (v = most < 8 ? most : 8; v >= 2 && (per % v || Lk % ((int64_t)threads * v)); v /= 2) {
    }
  }
  if (v >= 2 && Lk % ((int64_t)threads * v) == 0) return v;
  /* EMMY_ROW_PRELOAD on a row not chunked: chunks of one column, so its loads can be made ahead too (RoPE's norms) */
  return ex_env_choice("EMMY_ROW_PRELOAD", 2) && Lk % threads == 0 ? 1 : 0;
}

/* The chunk loop of EMMY_ROW_VEC (closed by row_loop_close(c, 1)): chunk em_i of the thread starts at column em_cb. */
static void row_chunks_open(ectx *c, int threads, int v, int64_t Lk) {
  ex_line(c, "if (live) {");
  c->indent++;
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int em_i = 0; em_i < %lld; em_i++) {", (long long)(Lk / ((int64_t)threads * v)));
  c->indent++;
  ex_line(c, "const long long em_cb = (threadIdx.x + em_i * %dLL) * %d;", threads, v);
}

/* EMMY_ROW_PRELOAD=1 or 2 (an experiment; chunked rows only): the two passes' text kept in rest while their chunk loads
 * are collected, then (row_pre_close) the loads made first and the passes after them. The kernel's text, or NULL
 * where it is off. */
static sbuf *row_pre_open(ectx *c, int vec, int threads, int64_t Lk, sbuf *rest) {
  if (!vec || !ex_env_choice("EMMY_ROW_PRELOAD", 2)) return NULL;
  sbuf *kept = c->out;
  memset(rest, 0, sizeof *rest);
  c->out = rest;
  c->row_pre = (int)(Lk / ((int64_t)threads * vec));
  c->row_stride = threads * vec;
  c->nvreq = 0;
  return kept;
}

static void row_pre_close(ectx *c, sbuf *kept, int threads, sbuf *rest) {
  if (!kept) return;
  c->out = kept;
  ex_rowvec_preload(c, threads);
  if (rest->s) ex_sb_add(c->out, "%s", rest->s);
  free(rest->s);
  c->row_pre = 0;
}

/* Element j of a chunk: its column em_c<j>, the last index of xi. */
static void row_chunk_elem(ectx *c, ivec *xi, int j) {
  ex_line(c, "const long long em_c%d = em_cb + %d;", j, j);
  xi->e[xi->rank - 1] = ex_A(c, "em_c%d", j);
}

/* The reduction's step at one element of the row (its input x at xi) into em_acc. */
static void row_acc_step(ectx *c, em_op op, int xin, const ivec *xi, int cache) {
  c->cache_mode = cache ? 1 : 0;
  const char *x = ex_val(c, xin, xi);
  c->cache_mode = 0;
  if (op == EM_OP_AMAX) ex_line(c, "em_acc = fmaxf(em_acc, (float)%s);", x);
  else if (op == EM_OP_VECTOR_NORM) ex_line(c, "em_acc += (float)%s * (float)%s;", x, x);
  else ex_line(c, "em_acc += (float)%s;", x);
}

/* The full-row outputs at xi (aligned with the reduction input; softmax: the anchor too); which / the count. */
static int row_outputs_at(ectx *c, int xin, int a, int softmax, const ivec *xi, int *which) {
  ex_reset_alignment(c);
  c->al[xin] = *xi;
  c->bij[xin] = 1;
  if (softmax) {
    c->al[a] = *xi;
    c->bij[a] = 1;
  }
  ex_align(c);
  int n = ex_aligned_outputs(c, which);
  ex_write_outputs(c, which, n);
  return n;
}

/* The full-row outputs of a chunk of V elements (EMMY_ROW_VEC): each element's stores captured, then a chunk store an
 * output (emit_rowvec.c). */
static int row_outputs_chunk(ectx *c, int xin, int a, ivec xi, int v, int *which) {
  ex_cap cap[8] = {{0}};
  int n = 0, w[EX_MAX_OUTS];
  for (int j = 0; j < v && !c->failed; j++) {
    row_chunk_elem(c, &xi, j);
    c->cap = &cap[j];
    int nj = row_outputs_at(c, xin, a, 0, &xi, j ? w : which);
    c->cap = NULL;
    if (!j) n = nj;
    for (int t = 0; t < cap[0].n && !c->failed; t++)
      if (cap[j].n != cap[0].n || cap[j].pos[t] != cap[0].pos[t]) ex_fail(c, "the chunk's elements store different outputs");
      else cap[0].contig[t] &= cap[j].contig[t]; /* (one store only where every element's index is the chunk's form) */
  }
  for (int t = 0; t < cap[0].n && !c->failed; t++) ex_rowvec_stores(c, cap, t);
  return n;
}

void ex_k_row(ectx *c, em_launch *L) {
  int threads = EX_KNOB(c, THREADS), rpb = EX_KNOB(c, RPB);
  int cache = EX_KNOB(c, CACHE), unroll = EX_KNOB(c, UNROLL);
  int warp = threads == 32 && ex_env_default_on("EMMY_WARP_RED");
  if (threads % 32 || rpb < 1 || threads * rpb > 1024) {
    ex_fail(c, "THREADS=%d x RPB=%d: threads per row must be a multiple of 32, at most 1024 per block", threads, rpb);
    return;
  }
  int a = c->t->anchor;
  const em_node *an = &c->g->nodes.v[ex_V(c, a)->node];
  int xin = an->args[0].tensor;
  const em_shape *xs = ex_S(c, xin);
  int r = xs->rank;
  const char *Lc = ex_dim_c(c, &xs->d[r - 1]);
  L->block[0] = threads;
  L->block[1] = rpb;
  em_shape lead = *xs;
  lead.rank = r - 1;
  snprintf(L->grid[0], sizeof L->grid[0], "cdiv(%s,%d)", ex_numel_text(c, &lead), rpb);
  int softmax = an->op == EM_OP_SOFTMAX || an->op == EM_OP_SOFTMAX_INT;
  /* RPB rows per block, THREADS threads (x) per row; every thread runs the same loop trips so the
   * block-wide barriers of the reductions stay uniform, and 'live' guards the work of rows past the end */
  int64_t Lk = 0;
  if (unroll && (!em_dim_is_const(&xs->d[r - 1], &Lk) || Lk > 64LL * threads)) {
    ex_fail(c, "UNROLL=1 needs a constant row of at most 64·THREADS elements");
    return;
  }
  if (cache) {
    if (!em_dim_is_const(&xs->d[r - 1], &Lk) || Lk * rpb * 4 > 49152) {
      ex_fail(c, "CACHE=1 needs a constant row of at most %d floats per block", 49152 / 4 / rpb);
      return;
    }
    ex_line(c, "__shared__ float em_row[%d][%lld];", rpb, (long long)Lk);
  }
  int vec = c->row_vec = row_vec_of(c, unroll, cache, softmax, threads, Lk);
  if (!warp) {
    ex_line(c, "__shared__ float em_red_all[%d][32];", rpb);
    ex_line(c, "float *em_red = em_red_all[threadIdx.y];");
  }
  /* The block's shape told to the compiler (the default; EMMY_TID_ASSUME=0 the earlier text): a thread's columns
   * threadIdx.x + i·THREADS then have known ranges, so RoPE's rotate-half branch on the column folds and a row's
   * partner loads merge with its own */
  if (ex_env_default_on("EMMY_TID_ASSUME"))
    ex_line(c, "__builtin_assume(threadIdx.x < %du); __builtin_assume(threadIdx.y < %du);", threads, rpb);
  ex_line(c, "const long long rows = %s, L = %s;", ex_numel_c(c, &lead), Lc);
  int exact = rows_exact(c, &lead, rpb);
  ex_line(c, "for (long long rb = (long long)blockIdx.x * %d; rb < rows; rb += (long long)gridDim.x * %d) {", rpb, rpb);
  c->indent++;
  ex_line(c, "const long long row = rb + threadIdx.y;");
  ex_line(c, exact ? "const bool live = true; /* rows: a multiple of %d */" : "const bool live = row < rows;", rpb);
  ivec pre = ex_unravel(c, "row", &lead);
  ivec xi = {r};
  for (int i = 0; i < r - 1; i++) {
    xi.e[i] = ex_A(c, "x%d", i);
    ex_line(c, "const long long x%d = %s;", i, pre.e[i]);
  }
  xi.e[r - 1] = "col";
  int mark = c->memo.n;
  const char *red = "em_r";
  sbuf rest;
  sbuf *kept = row_pre_open(c, vec, threads, Lk, &rest);
  if (softmax) {
    ex_line(c, "float em_mx = -INFINITY, em_sum = 0.0f;");
    row_loop_open(c, unroll, threads, Lk);
    ex_line(c, "em_mx = fmaxf(em_mx, (float)%s);", ex_val(c, xin, &xi));
    c->memo.n = mark;
    row_loop_close(c, unroll);
    row_reduce(c, warp, "em_mx", 1);
    row_loop_open(c, unroll, threads, Lk);
    ex_line(c, "em_sum += expf((float)%s - em_mx);", ex_val(c, xin, &xi));
    c->memo.n = mark;
    row_loop_close(c, unroll);
    row_reduce(c, warp, "em_sum", 0);
    c->softmax_mx = "em_mx";
    c->softmax_sum = "em_sum";
  } else {
    ex_line(c, "float em_acc = %s;", red_init(an->op));
    if (vec) {
      sbuf body;
      row_chunks_open(c, threads, vec, Lk);
      ex_rowvec_begin(c, &body);
      ivec xj = xi;
      for (int j = 0; j < vec; j++) {
        row_chunk_elem(c, &xj, j);
        row_acc_step(c, an->op, xin, &xj, 0);
      }
      ex_rowvec_end(c, &body);
    } else {
      row_loop_open(c, unroll, threads, Lk);
      row_acc_step(c, an->op, xin, &xi, cache);
    }
    c->memo.n = mark;
    row_loop_close(c, unroll);
    row_reduce(c, warp, "em_acc", an->op == EM_OP_AMAX);
    const char *fin = an->op == EM_OP_MEAN ? "em_acc / (float)L" : an->op == EM_OP_VECTOR_NORM ? "sqrtf(em_acc)" : "em_acc";
    ex_line(c, "const %s %s = %s;", ex_ctype(ex_V(c, a)->dtype), red, ex_round_to(c, ex_V(c, a)->dtype, fin));
    c->anchor_var = red;
  }
  /* full-row outputs: aligned with the reduction input (CACHE=1: the row's input from shared memory; each
   * thread reads back only the columns it stored, so no barrier is needed) */
  int which[EX_MAX_OUTS] = {0}, n;
  if (vec) {
    sbuf body;
    row_chunks_open(c, threads, vec, Lk);
    ex_rowvec_begin(c, &body);
    n = row_outputs_chunk(c, xin, a, xi, vec, which);
    ex_rowvec_end(c, &body);
  } else {
    row_loop_open(c, unroll, threads, Lk);
    c->cache_mode = cache && !softmax ? 2 : 0;
    n = row_outputs_at(c, xin, a, softmax, &xi, which);
    c->cache_mode = 0;
  }
  c->memo.n = mark;
  row_loop_close(c, unroll);
  row_pre_close(c, kept, threads, &rest);
  c->row_vec = 0;
  /* per-row outputs (e.g. a kept reduction) aligned with the anchor */
  int done = n;
  if (!softmax && done < c->g->outputs.n) {
    int wrote[64];
    memcpy(wrote, which, sizeof(int) * (size_t)n);
    ex_reset_alignment(c);
    ivec ai = {ex_S(c, a)->rank};
    for (int i = 0; i < ai.rank; i++) ai.e[i] = i < r - 1 ? xi.e[i] : "0LL";
    c->al[a] = ai;
    c->bij[a] = 1;
    ex_line(c, "if (live && threadIdx.x == 0) {");
    c->indent++;
    ex_align(c);
    int w2[64], n2 = 0;
    for (int j = 0; j < c->g->outputs.n; j++) {
      int seen = 0;
      for (int k = 0; k < n; k++) seen |= wrote[k] == j;
      if (!seen && c->bij[c->g->outputs.v[j]]) w2[n2++] = j;
    }
    ex_write_outputs(c, w2, n2);
    done += n2;
    c->memo.n = mark;
    c->indent--;
    ex_line(c, "}");
  }
  if (done != c->g->outputs.n) ex_fail(c, "an output of the row kernel is not aligned with its rows");
  if (!warp) ex_line(c, "__syncthreads();"); /* (em_red is reused by the next row; a warp's own shuffles need none) */
  c->indent--;
  ex_line(c, "}");
}

void ex_k_reduce(ectx *c, em_launch *L) {
  int threads = EX_KNOB(c, BLOCK);
  int a = c->t->anchor;
  const em_node *an = &c->g->nodes.v[ex_V(c, a)->node];
  int xin = an->args[0].tensor;
  const em_shape *xs = ex_S(c, xin), *os = ex_S(c, a);
  int softmax = an->op == EM_OP_SOFTMAX || an->op == EM_OP_SOFTMAX_INT;
  int vn = an->op == EM_OP_VECTOR_NORM;
  int di = vn ? 2 : 1, ki = di + 1;
  int mark_r[MAXR] = {0};
  if (softmax) mark_r[ex_axis_of(&an->args[1], xs->rank)] = 1;
  else if (!an->args[di].present || an->args[di].n == 0)
    for (int i = 0; i < xs->rank; i++) mark_r[i] = 1;
  else
    for (int k = 0; k < an->args[di].n; k++) mark_r[ex_axis_of_dim(&an->args[di].ilist[k], xs->rank)] = 1;
  int keep = softmax ? 1 : an->args[ki].b;
  L->block[0] = threads;
  snprintf(L->grid[0], sizeof L->grid[0], "cdiv(%s,%d)", ex_numel_text(c, os), threads);
  em_shape rs = {0};
  for (int i = 0; i < xs->rank; i++)
    if (mark_r[i]) rs.d[rs.rank++] = xs->d[i];
  ex_line(c, "const long long total = %s, nred = %s;", ex_numel_c(c, os), ex_numel_c(c, &rs));
  ex_line(c, "for (long long lin = (long long)blockIdx.x * blockDim.x + threadIdx.x; lin < total; lin += (long long)gridDim.x * blockDim.x) {");
  c->indent++;
  ivec d = ex_domain_vars(c, os, "lin");
  int mark = c->memo.n;
  /* input index: kept dims from the output index, reduced dims from the loop counter */
  ivec xi = {xs->rank};
  int k = 0;
  ex_line(c, "float em_acc = %s, em_mx = -INFINITY;", red_init(an->op));
  for (int pass = softmax ? 0 : 1; pass < 2; pass++) {
    ex_line(c, "for (long long j = 0; j < nred; j++) {");
    c->indent++;
    ivec ri = ex_unravel(c, "j", &rs);
    k = 0;
    for (int i = 0, rr = 0; i < xs->rank; i++) {
      if (mark_r[i]) {
        xi.e[i] = ri.e[rr++];
        if (keep) k++;
      } else xi.e[i] = d.e[k++];
    }
    const char *x = ex_val(c, xin, &xi);
    if (softmax && pass == 0) ex_line(c, "em_mx = fmaxf(em_mx, (float)%s);", x);
    else if (softmax) ex_line(c, "em_acc += expf((float)%s - em_mx);", x);
    else if (an->op == EM_OP_AMAX) ex_line(c, "em_acc = fmaxf(em_acc, (float)%s);", x);
    else if (vn) ex_line(c, "em_acc += (float)%s * (float)%s;", x, x);
    else ex_line(c, "em_acc += (float)%s;", x);
    c->memo.n = mark;
    c->indent--;
    ex_line(c, "}");
  }
  if (softmax) {
    c->softmax_mx = "em_mx";
    c->softmax_sum = "em_acc";
  } else {
    const char *fin = an->op == EM_OP_MEAN ? "em_acc / (float)nred" : vn ? "sqrtf(em_acc)" : "em_acc";
    ex_line(c, "const %s em_r = %s;", ex_ctype(ex_V(c, a)->dtype), ex_round_to(c, ex_V(c, a)->dtype, fin));
    c->anchor_var = "em_r";
  }
  ex_write_aligned(c, a, d, "an output of the reduce kernel is not aligned with the reduction");
  c->indent--;
  ex_line(c, "}");
}
