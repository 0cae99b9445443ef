/* emit_kinds.c — the kernel templates of the emitter: pointwise, row (a reduction over the last dim with its
 * prologue and epilogue), reduce, contraction (scalar and mma.sync warp tiers, cp.async copies) and attention.
 * Each lays out the loops and shared memory of its kind and asks the core (emit.c) for values by index. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emit_impl.h"

/* Pointwise: a grid-stride loop; each thread takes VEC consecutive elements, EPT times per loop trip. */
void ex_k_pointwise(ectx *c, em_launch *L) {
  int threads = em_knob_get(&c->t->knobs, "BLOCK", 256), vec = em_knob_get(&c->t->knobs, "VEC", 1),
      ept = em_knob_get(&c->t->knobs, "EPT", 1);
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

void ex_k_row(ectx *c, em_launch *L) {
  int threads = em_knob_get(&c->t->knobs, "THREADS", 256), rpb = em_knob_get(&c->t->knobs, "RPB", 1);
  int cache = em_knob_get(&c->t->knobs, "CACHE", 0);
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
  if (cache) {
    if (!em_dim_is_const(&xs->d[r - 1], &Lk) || Lk * rpb * 4 > 49152) {
      ex_fail(c, "CACHE=1 needs a constant row of at most %d floats per block", 49152 / 4 / rpb);
      return;
    }
    ex_line(c, "__shared__ float em_row[%d][%lld];", rpb, (long long)Lk);
  }
  ex_line(c, "__shared__ float em_red_all[%d][32];", rpb);
  ex_line(c, "float *em_red = em_red_all[threadIdx.y];");
  ex_line(c, "const long long rows = %s, L = %s;", ex_numel_c(c, &lead), Lc);
  ex_line(c, "for (long long rb = (long long)blockIdx.x * %d; rb < rows; rb += (long long)gridDim.x * %d) {", rpb, rpb);
  c->indent++;
  ex_line(c, "const long long row = rb + threadIdx.y;");
  ex_line(c, "const bool live = row < rows;");
  ivec pre = ex_unravel(c, "row", &lead);
  ivec xi = {r};
  for (int i = 0; i < r - 1; i++) {
    xi.e[i] = ex_A(c, "x%d", i);
    ex_line(c, "const long long x%d = %s;", i, pre.e[i]);
  }
  xi.e[r - 1] = "col";
  int mark = c->memo.n;
  const char *red = "em_r";
  if (softmax) {
    ex_line(c, "float em_mx = -INFINITY, em_sum = 0.0f;");
    ex_line(c, "for (long long col = threadIdx.x; live && col < L; col += blockDim.x) {");
    c->indent++;
    ex_line(c, "em_mx = fmaxf(em_mx, (float)%s);", ex_val(c, xin, &xi));
    c->memo.n = mark;
    c->indent--;
    ex_line(c, "}");
    ex_line(c, "em_mx = em_block_max(em_mx, em_red);");
    ex_line(c, "for (long long col = threadIdx.x; live && col < L; col += blockDim.x) {");
    c->indent++;
    ex_line(c, "em_sum += expf((float)%s - em_mx);", ex_val(c, xin, &xi));
    c->memo.n = mark;
    c->indent--;
    ex_line(c, "}");
    ex_line(c, "em_sum = em_block_sum(em_sum, em_red);");
    c->softmax_mx = "em_mx";
    c->softmax_sum = "em_sum";
  } else {
    ex_line(c, "float em_acc = %s;", red_init(an->op));
    ex_line(c, "for (long long col = threadIdx.x; live && col < L; col += blockDim.x) {");
    c->indent++;
    c->cache_mode = cache ? 1 : 0;
    const char *x = ex_val(c, xin, &xi);
    c->cache_mode = 0;
    if (an->op == EM_OP_AMAX) ex_line(c, "em_acc = fmaxf(em_acc, (float)%s);", x);
    else if (an->op == EM_OP_VECTOR_NORM) ex_line(c, "em_acc += (float)%s * (float)%s;", x, x);
    else ex_line(c, "em_acc += (float)%s;", x);
    c->memo.n = mark;
    c->indent--;
    ex_line(c, "}");
    ex_line(c, "em_acc = %s(em_acc, em_red);", an->op == EM_OP_AMAX ? "em_block_max" : "em_block_sum");
    const char *fin = an->op == EM_OP_MEAN ? "em_acc / (float)L" : an->op == EM_OP_VECTOR_NORM ? "sqrtf(em_acc)" : "em_acc";
    ex_line(c, "const %s %s = %s;", ex_ctype(ex_V(c, a)->dtype), red, ex_round_to(c, ex_V(c, a)->dtype, fin));
    c->anchor_var = red;
  }
  /* full-row outputs: aligned with the reduction input (CACHE=1: the row's input from shared memory; each
   * thread reads back only the columns it stored, so no barrier is needed) */
  ex_line(c, "for (long long col = threadIdx.x; live && col < L; col += blockDim.x) {");
  c->indent++;
  c->cache_mode = cache && !softmax ? 2 : 0;
  ex_reset_alignment(c);
  c->al[xin] = xi;
  c->bij[xin] = 1;
  if (softmax) {
    c->al[a] = xi;
    c->bij[a] = 1;
  }
  ex_align(c);
  int which[EX_MAX_OUTS] = {0}, n = ex_aligned_outputs(c, which);
  ex_write_outputs(c, which, n);
  c->cache_mode = 0;
  c->memo.n = mark;
  c->indent--;
  ex_line(c, "}");
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
  ex_line(c, "__syncthreads();");
  c->indent--;
  ex_line(c, "}");
}

void ex_k_reduce(ectx *c, em_launch *L) {
  int threads = em_knob_get(&c->t->knobs, "BLOCK", 256);
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

/* One shared-memory tile's worth of warp-tier math: for each 16-deep K slice, A fragments (ldmatrix) for the
 * warp's FM row blocks, B fragments two n-blocks at a time, then FM x FN mma.sync into acc (and acc2 for a
 * dual kernel). st indexes the ring slot ("[st]") or is "" without one. */
static void mma_tile_step(ectx *c, const char *st, int BK, int FM, int FN, int WTM, int WTN, int dual, const char *mt) {
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int kk = 0; kk < %d; kk += 16) {", BK);
  ex_line(c, "  unsigned af[%d][4], bf[%d][2];", FM, FN);
  if (dual) ex_line(c, "  unsigned bf2[%d][2];", FN);
  ex_line(c, "  #pragma unroll");
  ex_line(c, "  for (int i = 0; i < %d; i++)", FM);
  ex_line(c, "    em_ldsm_x4(af[i], &As%s[wm * %d + i * 16 + (lane & 15)][kk + (lane >> 4) * 8]);", st, WTM);
  ex_line(c, "  #pragma unroll");
  ex_line(c, "  for (int j = 0; j < %d; j += 2) {", FN);
  ex_line(c, "    unsigned t4[4];");
  for (int b = 0; b < (dual ? 2 : 1); b++) {
    const char *arr = b ? "Bs2" : "Bs", *frag = b ? "bf2" : "bf";
    ex_line(c, "    em_ldsm_x4(t4, &%s%s[wn * %d + j * 8 + (lane >> 4) * 8 + (lane & 7)][kk + ((lane >> 3) & 1) * 8]);", arr, st, WTN);
    ex_line(c, "    %s[j][0] = t4[0]; %s[j][1] = t4[1]; %s[j + 1][0] = t4[2]; %s[j + 1][1] = t4[3];", frag, frag, frag, frag);
  }
  ex_line(c, "  }");
  for (int b = 0; b < (dual ? 2 : 1); b++) {
    ex_line(c, "  #pragma unroll");
    ex_line(c, "  for (int i = 0; i < %d; i++)", FM);
    ex_line(c, "    #pragma unroll");
    ex_line(c, "    for (int j = 0; j < %d; j++) em_mma_%s(%s[i][j], af[i], %s[j]);", FN, mt, b ? "acc2" : "acc", b ? "bf2" : "bf");
  }
  ex_line(c, "}");
}

/* Contractions. MMA=0: the scalar tier, a TM x TN register tile per thread over float tiles in shared
 * memory. MMA=1: the warp tier, WM x WN warps each computing a (BM/WM) x (BN/WN) tile with
 * mma.sync.m16n8k16 (bf16/f16 in, f32 accumulation) on fragments loaded by ldmatrix from bf16/f16 tiles.
 * Both fill the tiles element by element through the operand's expression (views, a folded RMSNorm,
 * merged siblings' weights), masked at M, N and K edges, and share one epilogue. */
void ex_k_contraction(ectx *c, em_launch *L) {
  int mma = em_knob_get(&c->t->knobs, "MMA", 0);
  int BM = em_knob_get(&c->t->knobs, "BM", 64), BN = em_knob_get(&c->t->knobs, "BN", 64);
  int BK = em_knob_get(&c->t->knobs, "BK", 16), TM = em_knob_get(&c->t->knobs, "TM", 4), TN = em_knob_get(&c->t->knobs, "TN", 4);
  int WM = em_knob_get(&c->t->knobs, "WM", 2), WN = em_knob_get(&c->t->knobs, "WN", 2);
  int async = em_knob_get(&c->t->knobs, "ASYNC", 0), stages = em_knob_get(&c->t->knobs, "STAGES", 1);
  /* PAD_SMEM: bf16 elements added to each tile row (8 keeps ldmatrix rows on distinct banks; 0 packs them) */
  int pad = em_knob_get(&c->t->knobs, "PAD_SMEM", 8);
  if (pad % 8 || pad < 0) {
    ex_fail(c, "PAD_SMEM=%d must be a non-negative multiple of 8 (16-byte rows)", pad);
    return;
  }
  int threads;
  int a = c->t->anchor;
  em_dtype opdt = ex_V(c, a)->dtype;
  const char *mma_t = opdt == EM_F16 ? "f16" : "bf16";
  if (mma) {
    if (opdt != EM_BF16 && opdt != EM_F16) {
      ex_fail(c, "MMA=1 needs bf16/f16 operands, got %s", em_dtype_name(opdt));
      return;
    }
    if (BM % (16 * WM) || BN % (16 * WN) || BK % 16 || BK < 16) {
      ex_fail(c, "MMA=1 needs BM %% (16*WM) == 0, BN %% (16*WN) == 0, BK %% 16 == 0 (BM=%d BN=%d BK=%d WM=%d WN=%d)", BM, BN,
           BK, WM, WN);
      return;
    }
    threads = 32 * WM * WN;
  } else {
    if (BM % TM || BN % TN) {
      ex_fail(c, "BM=%d, BN=%d are not multiples of TM=%d, TN=%d", BM, BN, TM, TN);
      return;
    }
    threads = (BM / TM) * (BN / TN);
  }
  if (threads > 1024 || threads < 32) {
    ex_fail(c, "%d threads is outside 32..1024", threads);
    return;
  }
  const em_node *an = &c->g->nodes.v[ex_V(c, a)->node];
  const em_shape *os = ex_S(c, a);
  int lin_op = an->op == EM_OP_LINEAR;
  int A_ = an->args[0].tensor, B_ = an->args[1].tensor;
  const em_shape *as = ex_S(c, A_), *bs = ex_S(c, B_);
  if (!lin_op && (as->rank < 2 || bs->rank < 2)) {
    ex_fail(c, "matmul with a 1-d operand has no contraction emission");
    return;
  }
  /* merged siblings (MERGE_SIBLINGS=1): linears of the kernel reading the same operand, N side by side */
  int sib[4], nsib = 0;
  int64_t sibN[4], sibOff[5] = {0};
  if (lin_op)
    for (int i = 0; i < c->g->nodes.n && nsib < 4; i++) {
      const em_node *sn = &c->g->nodes.v[i];
      if (sn->op == EM_OP_LINEAR && sn->args[0].tensor == A_) {
        const em_shape *ws = ex_S(c, sn->args[1].tensor);
        if (!em_dim_is_const(&ws->d[0], &sibN[nsib])) {
          ex_fail(c, "merged siblings need constant output widths");
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
  /* DUAL_GATE=1: two siblings of equal width share the (m, n) tile with two accumulators (Bs2, acc2), so
   * the epilogue may combine them; otherwise several siblings are concatenated along N */
  const char *dmeta = em_graph_get_meta(c->g, "dual");
  int dual = dmeta && dmeta[0] == '1' && nsib == 2 && sibN[0] == sibN[1];
  if (dmeta && dmeta[0] == '1' && !dual) {
    ex_fail(c, "a dual kernel needs two linears of equal width on one operand");
    return;
  }
  int concat = nsib > 1 && !dual;
  int B2 = dual ? c->g->nodes.v[ex_V(c, sib[1])->node].args[1].tensor : -1;
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
  if (concat) snprintf(L->grid[0], sizeof L->grid[0], "cdiv(%lld,%d)", (long long)sibOff[nsib], BN);
  else snprintf(L->grid[0], sizeof L->grid[0], "cdiv(%s,%d)", em_dim_format(&c->g->syms, &os->d[r - 1], (char[128]){0}, 128), BN);
  snprintf(L->grid[1], sizeof L->grid[1], "cdiv(%s,%d)", ex_numel_text(c, &mdims), BM);
  snprintf(L->grid[2], sizeof L->grid[2], "%s", bdims.rank ? ex_numel_text(c, &bdims) : "1");
  /* ASYNC=1: operand rows copied 16 bytes at a time with cp.async into a STAGES-deep ring of tiles; needs
   * the warp tier and operands that are kernel inputs with a contiguous K (a multiple of 8) */
  if (async) {
    int64_t kc = 0;
    int a_in = ex_V(c, A_)->kind != EM_V_NODE;
    int b_in = 1;
    for (int j = 0; j < nsib; j++) b_in &= ex_V(c, c->g->nodes.v[ex_V(c, sib[j])->node].args[1].tensor)->kind != EM_V_NODE;
    if (!mma || !lin_op || !a_in || !b_in || !em_dim_is_const(Kd, &kc) || kc % 8 || stages < 1 || stages > 4) {
      ex_fail(c, "ASYNC=1 needs MMA=1, a linear whose operands are kernel inputs, K a multiple of 8, STAGES 1..4");
      return;
    }
    ex_line(c, "__shared__ __align__(16) unsigned short As[%d][%d][%d], Bs[%d][%d][%d];", stages, BM, BK + pad, stages, BN, BK + pad);
    if (dual) ex_line(c, "__shared__ __align__(16) unsigned short Bs2[%d][%d][%d];", stages, BN, BK + pad);
  } else if (mma) {
    ex_line(c, "__shared__ __align__(16) unsigned short As[%d][%d], Bs[%d][%d];", BM, BK + pad, BN, BK + pad);
    if (dual) ex_line(c, "__shared__ __align__(16) unsigned short Bs2[%d][%d];", BN, BK + pad);
  } else {
    ex_line(c, "__shared__ float As[%d][%d], Bs[%d][%d];", BK, BM + 1, BK, BN + 1);
    if (dual) ex_line(c, "__shared__ float Bs2[%d][%d];", BK, BN + 1);
  }
  ex_line(c, "const long long M = %s, N = %s, K = %s;", ex_numel_c(c, &mdims),
       concat ? ex_A(c, "%lldLL", (long long)sibOff[nsib]) : ex_dim_c(c, &os->d[r - 1]), ex_dim_c(c, Kd));
  int raster = em_knob_get(&c->t->knobs, "RASTER", 1);
  if (raster > 1) {
    /* grouped order: RASTER consecutive blocks walk down RASTER tile rows before the next column, so the
     * A rows and B columns they share stay in L2 */
    ex_line(c, "const int em_b = blockIdx.y * gridDim.x + blockIdx.x, em_first = em_b / (%d * gridDim.x) * %d;", raster, raster);
    ex_line(c, "const int em_gs = min((int)gridDim.y - em_first, %d), em_in = em_b %% (%d * gridDim.x);", raster, raster);
    ex_line(c, "const long long m0 = (long long)(em_first + em_in %% em_gs) * %d, n0 = (long long)(em_in / em_gs) * %d, bz = blockIdx.z;",
            BM, BN);
  } else {
    ex_line(c, "const long long m0 = (long long)blockIdx.y * %d, n0 = (long long)blockIdx.x * %d, bz = blockIdx.z;", BM, BN);
  }
  int FM = BM / WM / 16, FN = BN / WN / 8;
  if (mma) {
    ex_line(c, "const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5, wm = wid / %d, wn = wid %% %d;", WN, WN);
    ex_line(c, "float acc[%d][%d][4];", FM, FN);
    ex_line(c, "#pragma unroll");
    ex_line(c, "for (int i = 0; i < %d; i++)", FM);
    ex_line(c, "  for (int j = 0; j < %d; j++)", FN);
    ex_line(c, "    for (int q = 0; q < 4; q++) acc[i][j][q] = 0.0f;");
    if (dual) {
      ex_line(c, "float acc2[%d][%d][4];", FM, FN);
      ex_line(c, "for (int i = 0; i < %d; i++)", FM);
      ex_line(c, "  for (int j = 0; j < %d; j++)", FN);
      ex_line(c, "    for (int q = 0; q < 4; q++) acc2[i][j][q] = 0.0f;");
    }
  } else {
    ex_line(c, "const int tid = threadIdx.x, tr = tid / %d, tc = tid %% %d;", BN / TN, BN / TN);
    ex_line(c, "float acc[%d][%d];", TM, TN);
    ex_line(c, "#pragma unroll");
    ex_line(c, "for (int i = 0; i < %d; i++)", TM);
    ex_line(c, "  for (int j = 0; j < %d; j++) acc[i][j] = 0.0f;", TN);
    if (dual) {
      ex_line(c, "float acc2[%d][%d];", TM, TN);
      ex_line(c, "for (int i = 0; i < %d; i++)", TM);
      ex_line(c, "  for (int j = 0; j < %d; j++) acc2[i][j] = 0.0f;", TN);
    }
  }
  ivec bz = ex_unravel(c, "bz", &bdims);
  /* prologue row reductions (a folded RMSNorm): one warp per row of the block, before the K loop */
  for (int i = 0; i < c->g->nodes.n && !c->failed; i++) {
    const em_node *rn = &c->g->nodes.v[i];
    if (rn->out == a || !(rn->op == EM_OP_MEAN || rn->op == EM_OP_SUM || rn->op == EM_OP_AMAX || rn->op == EM_OP_VECTOR_NORM))
      continue;
    int vn = rn->op == EM_OP_VECTOR_NORM, di = vn ? 2 : 1;
    const em_shape *xs = ex_S(c, rn->args[0].tensor);
    if (!rn->args[di].present || rn->args[di].n != 1 || ex_axis_of_dim(&rn->args[di].ilist[0], xs->rank) != xs->rank - 1 ||
        c->npre == 4) {
      ex_fail(c, "a reduction in a contraction's prologue must be over the last dim");
      return;
    }
    int j = c->npre++;
    c->pre_v[j] = rn->out;
    c->pre_arr[j] = ex_A(c, "em_pre%d", j);
    em_shape lead = *xs;
    lead.rank--;
    ex_line(c, "__shared__ float em_pre%d[%d];", j, BM);
    ex_line(c, "for (int rr = tid >> 5; rr < %d; rr += %d) {", BM, threads / 32);
    c->indent++;
    ex_line(c, "const long long m = m0 + rr;");
    ex_line(c, "float em_acc = %s;", rn->op == EM_OP_AMAX ? "-INFINITY" : "0.0f");
    ex_line(c, "if (m < M) {");
    c->indent++;
    ex_line(c, "for (long long col = tid & 31; col < %s; col += 32) {", ex_dim_c(c, &xs->d[xs->rank - 1]));
    c->indent++;
    int mark0 = c->memo.n;
    ivec li = ex_unravel(c, "m", &lead), xi = {xs->rank};
    for (int q = 0; q < lead.rank; q++) xi.e[q] = li.e[q];
    xi.e[xs->rank - 1] = "col";
    const char *xv = ex_val(c, rn->args[0].tensor, &xi);
    if (rn->op == EM_OP_AMAX) ex_line(c, "em_acc = fmaxf(em_acc, (float)%s);", xv);
    else if (vn) ex_line(c, "em_acc += (float)%s * (float)%s;", xv, xv);
    else ex_line(c, "em_acc += (float)%s;", xv);
    c->memo.n = mark0;
    c->indent--;
    ex_line(c, "}");
    c->indent--;
    ex_line(c, "}");
    if (rn->op == EM_OP_AMAX)
      ex_line(c, "for (int o = 16; o > 0; o >>= 1) em_acc = fmaxf(em_acc, __shfl_xor_sync(0xffffffffu, em_acc, o));");
    else
      ex_line(c, "for (int o = 16; o > 0; o >>= 1) em_acc += __shfl_xor_sync(0xffffffffu, em_acc, o);");
    const char *fin = rn->op == EM_OP_MEAN ? ex_A(c, "em_acc / (float)%s", ex_dim_c(c, &xs->d[xs->rank - 1]))
                      : vn                  ? "sqrtf(em_acc)"
                                            : "em_acc";
    ex_line(c, "if ((tid & 31) == 0) em_pre%d[rr] = %s;", j, ex_round_to(c, ex_V(c, rn->out)->dtype, fin));
    c->indent--;
    ex_line(c, "}");
  }
  if (c->npre) ex_line(c, "__syncthreads();");
  if (async) {
    int ap = ex_input_pos(c, A_);
    ex_line(c, "const int nk = (int)((K + %d - 1) / %d);", BK, BK);
    /* one tile into ring slot st: A rows m0.., B rows n0.. (each merged sibling from its own weight) */
    ex_line(c, "auto em_load = [&](int st, long long k0) {");
    c->indent++;
    ex_line(c, "for (int e = tid; e < %d; e += %d) {", BM * BK / 8, threads);
    ex_line(c, "  const int r = e / %d, cc = (e %% %d) * 8;", BK / 8, BK / 8);
    ex_line(c, "  const long long m = m0 + r, k = k0 + cc;");
    ex_line(c, "  const bool ok = m < M && k < K;");
    ex_line(c, "  em_cp_async16(&As[st][r][cc], in%d + (ok ? m * K + k : 0), ok ? 16 : 0);", ap);
    ex_line(c, "}");
    ex_line(c, "for (int e = tid; e < %d; e += %d) {", BN * BK / 8, threads);
    ex_line(c, "  const int r = e / %d, cc = (e %% %d) * 8;", BK / 8, BK / 8);
    ex_line(c, "  const long long n = n0 + r, k = k0 + cc;");
    ex_line(c, "  const bool ok = n < N && k < K;");
    if (dual) {
      ex_line(c, "  em_cp_async16(&Bs[st][r][cc], in%d + (ok ? n * K + k : 0), ok ? 16 : 0);", ex_input_pos(c, B_));
      ex_line(c, "  em_cp_async16(&Bs2[st][r][cc], in%d + (ok ? n * K + k : 0), ok ? 16 : 0);", ex_input_pos(c, B2));
    } else if (nsib > 1) {
      sbuf chain = {0};
      for (int j = 0; j < nsib; j++) {
        int wp = ex_input_pos(c, c->g->nodes.v[ex_V(c, sib[j])->node].args[1].tensor);
        if (j < nsib - 1) ex_sb_add(&chain, "n < %lldLL ? in%d + (n - %lldLL) * K + k : ", (long long)sibOff[j + 1], wp, (long long)sibOff[j]);
        else ex_sb_add(&chain, "in%d + (n - %lldLL) * K + k", wp, (long long)sibOff[j]);
      }
      ex_line(c, "  em_cp_async16(&Bs[st][r][cc], ok ? (%s) : in%d, ok ? 16 : 0);", chain.s,
           ex_input_pos(c, c->g->nodes.v[ex_V(c, sib[0])->node].args[1].tensor));
      EM_VEC_PUSH(c->arena, chain.s);
    } else {
      ex_line(c, "  em_cp_async16(&Bs[st][r][cc], in%d + (ok ? n * K + k : 0), ok ? 16 : 0);", ex_input_pos(c, B_));
    }
    ex_line(c, "}");
    c->indent--;
    ex_line(c, "};");
    for (int st = 0; st < stages - 1; st++) {
      ex_line(c, "if (%d < nk) em_load(%d, %dLL);", st, st, st * BK);
      ex_line(c, "em_cp_commit();");
    }
    ex_line(c, "for (int kt = 0; kt < nk; kt++) {");
    c->indent++;
    ex_line(c, "const int st = kt %% %d;", stages);
    if (stages == 1) {
      ex_line(c, "em_load(0, (long long)kt * %d);", BK);
      ex_line(c, "em_cp_commit();");
    }
    ex_line(c, "em_cp_wait<%d>();", stages > 1 ? stages - 2 : 0);
    ex_line(c, "__syncthreads();");
    if (stages > 1) {
      ex_line(c, "if (kt + %d < nk) em_load((kt + %d) %% %d, (long long)(kt + %d) * %d);", stages - 1, stages - 1, stages,
           stages - 1, BK);
      ex_line(c, "em_cp_commit();");
    }
    mma_tile_step(c, "[st]", BK, FM, FN, BM / WM, BN / WN, dual, mma_t);
    if (stages == 1) ex_line(c, "__syncthreads();");
    c->indent--;
    ex_line(c, "}");
    ex_line(c, "em_cp_wait<0>();");
    goto epilogue;
  }
  ex_line(c, "for (long long k0 = 0; k0 < K; k0 += %d) {", BK);
  c->indent++;
  int mark = c->memo.n;
  /* A tile: element (m, k) of the left operand */
  ex_line(c, "for (int e = tid; e < %d; e += %d) {", BM * BK, threads);
  c->indent++;
  ex_line(c, "const int mm = e / %d, kk = e %% %d;", BK, BK);
  ex_line(c, "const long long m = m0 + mm, k = k0 + kk;");
  ex_line(c, "float av = 0.0f;");
  ex_line(c, "if (m < M && k < K) {");
  c->indent++;
  {
    ivec mi = ex_unravel(c, "m", &mdims), ai = {as->rank};
    em_shape outm = *os;
    if (lin_op) {
      for (int i = 0; i < as->rank - 1; i++) ai.e[i] = mi.e[i];
    } else {
      ivec full = {r};
      for (int i = 0; i < bdims.rank; i++) full.e[i] = bz.e[i];
      full.e[r - 2] = "m";
      full.e[r - 1] = "0LL";
      ivec bb = ex_bcast(c, &full, &outm, as);
      for (int i = 0; i < as->rank - 1; i++) ai.e[i] = bb.e[i];
      ai.e[as->rank - 2] = "m";
    }
    ai.e[as->rank - 1] = "k";
    ex_line(c, "av = (float)%s;", ex_val(c, A_, &ai));
  }
  c->memo.n = mark;
  c->indent--;
  ex_line(c, "}");
  if (mma) ex_line(c, "As[mm][kk] = %s;", opdt == EM_F16 ? "em_f2h(av)" : "em_f2bf(av)");
  else ex_line(c, "As[kk][mm] = av;");
  c->indent--;
  ex_line(c, "}");
  /* B tile: element (n, k) of the right operand (weight [N, K] for linear, [.., K, N] otherwise) */
  ex_line(c, "for (int e = tid; e < %d; e += %d) {", BN * BK, threads);
  c->indent++;
  ex_line(c, "const int nn = e / %d, kk = e %% %d;", BK, BK);
  ex_line(c, "const long long n = n0 + nn, k = k0 + kk;");
  ex_line(c, dual ? "float bv = 0.0f, bv2 = 0.0f;" : "float bv = 0.0f;");
  ex_line(c, "if (n < N && k < K) {");
  c->indent++;
  {
    ivec bi = {bs->rank};
    if (dual) {
      ivec b2 = {2, {"n", "k"}};
      ex_line(c, "bv2 = (float)%s;", ex_val(c, B2, &b2));
    }
    if (lin_op && concat) {
      for (int j = 0; j < nsib; j++) {
        const em_node *sn = &c->g->nodes.v[ex_V(c, sib[j])->node];
        if (j < nsib - 1) ex_line(c, "%sif (n < %lldLL) {", j ? "} else " : "", (long long)sibOff[j + 1]);
        else ex_line(c, "} else {");
        c->indent++;
        int m2 = c->memo.n;
        ivec bj = {2, {ex_A(c, "(n - %lldLL)", (long long)sibOff[j]), "k"}};
        ex_line(c, "bv = (float)%s;", ex_val(c, sn->args[1].tensor, &bj));
        c->memo.n = m2;
        c->indent--;
      }
      ex_line(c, "}");
    } else if (lin_op) {
      bi.e[0] = "n";
      bi.e[1] = "k";
    } else {
      ivec full = {r};
      for (int i = 0; i < bdims.rank; i++) full.e[i] = bz.e[i];
      full.e[r - 2] = "0LL";
      full.e[r - 1] = "n";
      ivec bb = ex_bcast(c, &full, os, bs);
      for (int i = 0; i < bs->rank; i++) bi.e[i] = bb.e[i];
      bi.e[bs->rank - 2] = "k";
      bi.e[bs->rank - 1] = "n";
    }
    if (!(lin_op && concat)) ex_line(c, "bv = (float)%s;", ex_val(c, B_, &bi));
  }
  c->memo.n = mark;
  c->indent--;
  ex_line(c, "}");
  if (mma) ex_line(c, "Bs[nn][kk] = %s;", opdt == EM_F16 ? "em_f2h(bv)" : "em_f2bf(bv)");
  else ex_line(c, "Bs[kk][nn] = bv;");
  if (dual && mma) ex_line(c, "Bs2[nn][kk] = %s;", opdt == EM_F16 ? "em_f2h(bv2)" : "em_f2bf(bv2)");
  else if (dual) ex_line(c, "Bs2[kk][nn] = bv2;");
  c->indent--;
  ex_line(c, "}");
  ex_line(c, "__syncthreads();");
  if (mma) {
    mma_tile_step(c, "", BK, FM, FN, BM / WM, BN / WN, dual, mma_t);
  } else {
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int kk = 0; kk < %d; kk++) {", BK);
  ex_line(c, "  float ar[%d], br[%d];", TM, TN);
  ex_line(c, "  #pragma unroll");
  ex_line(c, "  for (int i = 0; i < %d; i++) ar[i] = As[kk][tr * %d + i];", TM, TM);
  ex_line(c, "  #pragma unroll");
  ex_line(c, "  for (int j = 0; j < %d; j++) br[j] = Bs[kk][tc * %d + j];", TN, TN);
  ex_line(c, "  #pragma unroll");
  ex_line(c, "  for (int i = 0; i < %d; i++)", TM);
  ex_line(c, "    #pragma unroll");
  ex_line(c, "    for (int j = 0; j < %d; j++) acc[i][j] += ar[i] * br[j];", TN);
  if (dual) {
    ex_line(c, "  #pragma unroll");
    ex_line(c, "  for (int j = 0; j < %d; j++) br[j] = Bs2[kk][tc * %d + j];", TN, TN);
    ex_line(c, "  #pragma unroll");
    ex_line(c, "  for (int i = 0; i < %d; i++)", TM);
    ex_line(c, "    #pragma unroll");
    ex_line(c, "    for (int j = 0; j < %d; j++) acc2[i][j] += ar[i] * br[j];", TN);
  }
  ex_line(c, "}");
  }
  ex_line(c, "__syncthreads();");
  c->indent--;
  ex_line(c, "}");
epilogue:;
  /* epilogue: every accumulator element (m, n) of this thread */
  const char *accel = mma ? "acc[i][j][q]" : "acc[i][j]";
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int i = 0; i < %d; i++) {", mma ? FM : TM);
  c->indent++;
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int j = 0; j < %d; j++) {", mma ? FN : TN);
  c->indent++;
  if (mma) {
    ex_line(c, "#pragma unroll");
    ex_line(c, "for (int q = 0; q < 4; q++) {");
    c->indent++;
    ex_line(c, "const long long m = m0 + wm * %d + i * 16 + (lane >> 2) + (q >> 1) * 8, n = n0 + wn * %d + j * 8 + (lane & 3) * 2 + (q & 1);",
         BM / WM, BN / WN);
  } else {
    ex_line(c, "const long long m = m0 + tr * %d + i, n = n0 + tc * %d + j;", TM, TN);
  }
  ex_line(c, "if (m >= M || n >= N) continue;");
  ivec mi = ex_unravel(c, "m", &mdims);
  int written[EX_MAX_OUTS] = {0}, nwritten = 0;
  if (dual) {
    /* both accumulators at (m, n): the anchors' values, then every output aligned with them */
    const char *accel2 = mma ? "acc2[i][j][q]" : "acc2[i][j]";
    const char *vals2[2] = {accel, accel2};
    const char *vars[2] = {"em_r", "em_r2"};
    for (int j = 0; j < 2; j++) {
      const em_node *sn = &c->g->nodes.v[ex_V(c, sib[j])->node];
      const char *accv = vals2[j];
      if (sn->args[2].present) {
        ivec bi = {1, {"n"}};
        accv = ex_A(c, "(%s + (float)%s)", vals2[j], ex_val(c, sn->args[2].tensor, &bi));
      }
      ex_line(c, "const %s %s = %s;", ex_ctype(ex_V(c, sib[j])->dtype), vars[j], ex_round_to(c, ex_V(c, sib[j])->dtype, accv));
    }
    c->anchor = sib[0];
    c->anchor_var = "em_r";
    c->xanchor = sib[1];
    c->xanchor_var = "em_r2";
    ivec di = {r};
    for (int i = 0; i < bdims.rank; i++) di.e[i] = bz.e[i];
    for (int i = 0; i < mdims.rank; i++) di.e[bdims.rank + i] = mi.e[i];
    di.e[r - 1] = "n";
    ex_reset_alignment(c);
    c->al[sib[0]] = c->al[sib[1]] = di;
    c->bij[sib[0]] = c->bij[sib[1]] = 1;
    ex_align(c);
    int which[EX_MAX_OUTS] = {0}, n = ex_aligned_outputs(c, which);
    for (int q = 0; q < n; q++) written[which[q]] = 1;
    nwritten = n;
    ex_write_outputs(c, which, n);
  }
  for (int j = 0; j < nsib && !c->failed && !dual; j++) {
    const em_node *sn = &c->g->nodes.v[ex_V(c, sib[j])->node];
    const char *nl = "n";
    if (concat) {
      ex_line(c, "%sif (n < %lldLL) {", j ? "} else " : "", (long long)sibOff[j + 1]);
      c->indent++;
      ex_line(c, "const long long nl = n - %lldLL;", (long long)sibOff[j]);
      nl = "nl";
    }
    int m2 = c->memo.n;
    const char *accv = accel;
    if (lin_op && sn->args[2].present) {
      ivec bi = {1, {nl}};
      accv = ex_A(c, "(%s + (float)%s)", accel, ex_val(c, sn->args[2].tensor, &bi));
    }
    ex_line(c, "const %s em_r = %s;", ex_ctype(ex_V(c, sib[j])->dtype), ex_round_to(c, ex_V(c, sib[j])->dtype, accv));
    c->anchor = sib[j];
    c->anchor_var = "em_r";
    ivec di = {r};
    for (int i = 0; i < bdims.rank; i++) di.e[i] = bz.e[i];
    for (int i = 0; i < mdims.rank; i++) di.e[bdims.rank + i] = mi.e[i];
    di.e[r - 1] = nl;
    ex_reset_alignment(c);
    c->al[sib[j]] = di;
    c->bij[sib[j]] = 1;
    ex_align(c);
    int which[EX_MAX_OUTS] = {0}, n = 0;
    for (int q = 0; q < c->g->outputs.n && q < EX_MAX_OUTS; q++)
      if (!written[q] && c->bij[c->g->outputs.v[q]]) {
        which[n++] = q;
        written[q] = 1;
      }
    nwritten += n;
    ex_write_outputs(c, which, n);
    c->memo.n = m2;
    if (concat) c->indent--;
  }
  if (concat) ex_line(c, "}");
  if (nwritten != c->g->outputs.n) ex_fail(c, "an output of the contraction is not aligned with its result");
  if (mma) {
    c->indent--;
    ex_line(c, "}");
  }
  c->indent--;
  ex_line(c, "}");
  c->indent--;
  ex_line(c, "}");
}

/* The key and value element indices ("s" the key row, "e" the head element) of an attention output index oi:
 * batch dims broadcast from the output, the kv head divided by the query/kv head ratio for GQA. */
static void kv_index(ectx *c, const ivec *oi, const em_shape *qs, const em_shape *ks, const em_shape *vs,
                     const em_shape *os, int gqa, ivec *kk, ivec *vv) {
  int r = qs->rank;
  ivec full = *oi;
  full.e[r - 2] = "s";
  full.e[r - 1] = "0LL";
  ivec kb = ex_bcast(c, &full, os, ks), vb = ex_bcast(c, &full, os, vs);
  if (gqa && r >= 3 && !em_dim_eq(&qs->d[r - 3], &ks->d[r - 3])) {
    const char *ratio = ex_A(c, "(%s / %s)", ex_dim_c(c, &qs->d[r - 3]), ex_dim_c(c, &ks->d[r - 3]));
    kb.e[r - 3] = ex_A(c, "(%s / %s)", oi->e[r - 3], ratio);
    vb.e[r - 3] = kb.e[r - 3];
  }
  *kk = kb;
  *vv = vb;
  kk->e[r - 2] = vv->e[r - 2] = "s";
  kk->e[r - 1] = vv->e[r - 1] = "e";
}

/* Flash attention on the warp tier (FLASH=1): a block of BQ query rows of one (batch, head), one warp per
 * 16 rows. Q fragments stay in registers; BKV keys and values at a time are staged in shared memory; S = QKᵀ
 * and O += PV run on mma.sync m16n8k16 (P re-packed from the S accumulators into A fragments, V read with
 * ldmatrix.trans); the online softmax keeps each row's max and sum in f32 across the quad of threads that
 * holds it. Causal blocks stop at their last row. */
static void k_flash(ectx *c, em_launch *L) {
  int BQ = em_knob_get(&c->t->knobs, "BQ", 64), BKV = em_knob_get(&c->t->knobs, "BKV", 32);
  int a = c->t->anchor;
  const em_node *an = &c->g->nodes.v[ex_V(c, a)->node];
  int q = an->args[0].tensor, k = an->args[1].tensor, v = an->args[2].tensor;
  const em_shape *qs = ex_S(c, q), *ks = ex_S(c, k), *vs = ex_S(c, v), *os = ex_S(c, a);
  int r = qs->rank;
  int64_t D, Dv;
  em_dtype dt = ex_V(c, a)->dtype;
  if (!em_dim_is_const(&qs->d[r - 1], &D) || !em_dim_is_const(&vs->d[r - 1], &Dv) || D != Dv || D % 16 || D > 256) {
    ex_fail(c, "FLASH=1 needs equal constant head dims, a multiple of 16 up to 256");
    return;
  }
  if (dt != EM_BF16 && dt != EM_F16) {
    ex_fail(c, "FLASH=1 needs bf16/f16, got %s", em_dtype_name(dt));
    return;
  }
  if (BQ % 16 || BKV % 16 || BQ < 16 || BKV < 16 || (BQ + 2 * BKV) * (D + 8) * 2 > 49152) {
    ex_fail(c, "FLASH=1 needs BQ, BKV multiples of 16 and (BQ+2*BKV)*(D+8)*2 <= 49152 B");
    return;
  }
  const char *mt = dt == EM_F16 ? "f16" : "bf16", *cvt = dt == EM_F16 ? "em_f2h" : "em_f2bf";
  int warps = BQ / 16, threads = 32 * warps, ND = (int)(D / 8), KD = (int)(D / 16), NS = BKV / 8;
  double scale = an->args[6].present ? an->args[6].f : 1.0 / sqrt((double)D);
  int causal = an->args[5].b, gqa = an->args[7].b;
  em_shape bat = *os;
  bat.rank = r - 2;
  L->block[0] = threads;
  snprintf(L->grid[0], sizeof L->grid[0], "cdiv(%s,%d)", em_dim_format(&c->g->syms, &os->d[r - 2], (char[128]){0}, 128), BQ);
  snprintf(L->grid[1], sizeof L->grid[1], "%s", bat.rank ? ex_numel_text(c, &bat) : "1");
  ex_line(c, "__shared__ __align__(16) unsigned short Qs[%d][%lld], Ks[%d][%lld], Vs[%d][%lld];", BQ, (long long)(D + 8), BKV,
          (long long)(D + 8), BKV, (long long)(D + 8));
  ex_line(c, "const long long Lq = %s, S = %s, q0 = (long long)blockIdx.x * %d, bh = blockIdx.y;", ex_dim_c(c, &os->d[r - 2]),
          ex_dim_c(c, &ks->d[r - 2]), BQ);
  ex_line(c, "const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;");
  ivec bi = ex_unravel(c, "bh", &bat);
  ivec oi = {r};
  for (int i = 0; i < r - 2; i++) {
    oi.e[i] = ex_A(c, "x%d", i);
    ex_line(c, "const long long x%d = %s;", i, bi.e[i]);
  }
  int mark = c->memo.n;
  /* Q tile -> smem -> fragments. Operands that are kernel inputs in their own [..., rows, D] layout are copied
   * 16 bytes at a time with cp.async (rows past the end zero-filled); others go through their expressions. */
  int q_in = ex_V(c, q)->kind != EM_V_NODE, k_in = ex_V(c, k)->kind != EM_V_NODE, v_in = ex_V(c, v)->kind != EM_V_NODE;
  if (q_in) {
    ivec q0i = oi;
    q0i.e[r - 2] = "l";
    q0i.e[r - 1] = "0LL";
    ex_line(c, "for (int t = tid; t < %lld; t += %d) {", (long long)(BQ * D / 8), threads);
    c->indent++;
    ex_line(c, "const int rr = t / %lld, e = (t %% %lld) * 8;", (long long)(D / 8), (long long)(D / 8));
    ex_line(c, "const long long l = q0 + rr;");
    ex_line(c, "const bool ok = l < Lq;");
    ex_line(c, "em_cp_async16(&Qs[rr][e], ok ? in%d + %s + e : in%d, ok ? 16 : 0);", ex_input_pos(c, q),
            ex_linearize(c, &q0i, qs), ex_input_pos(c, q));
    c->indent--;
    ex_line(c, "}");
    ex_line(c, "em_cp_commit();");
    ex_line(c, "em_cp_wait<0>();");
  } else {
    ex_line(c, "for (int t = tid; t < %lld; t += %d) {", (long long)(BQ * D), threads);
    c->indent++;
    ex_line(c, "const int rr = t / %lld, e = t %% %lld;", (long long)D, (long long)D);
    ex_line(c, "const long long l = q0 + rr;");
    ivec qi = oi;
    qi.e[r - 2] = "l";
    qi.e[r - 1] = "e";
    ex_line(c, "float qv = 0.0f;");
    ex_line(c, "if (l < Lq) {");
    c->indent++;
    ex_line(c, "qv = (float)%s;", ex_val(c, q, &qi));
    c->memo.n = mark;
    c->indent--;
    ex_line(c, "}");
    ex_line(c, "Qs[rr][e] = %s(qv);", cvt);
    c->indent--;
    ex_line(c, "}");

  }
  ex_line(c, "__syncthreads();");
  ex_line(c, "unsigned qf[%d][4];", KD);
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int kd = 0; kd < %d; kd++) em_ldsm_x4(qf[kd], &Qs[w * 16 + (lane & 15)][kd * 16 + (lane >> 4) * 8]);", KD);
  ex_line(c, "float o[%d][4];", ND);
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int j = 0; j < %d; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;", ND);
  ex_line(c, "float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.0f, 0.0f};");
  ex_line(c, "const long long lr0 = q0 + w * 16 + (lane >> 2), lr1 = lr0 + 8;");
  ex_line(c, "const long long send = %s;", causal ? ex_A(c, "(q0 + %d < S ? q0 + %d : S)", BQ, BQ) : "S");
  ivec kk, vv;
  kv_index(c, &oi, qs, ks, vs, os, gqa, &kk, &vv);
  ex_line(c, "for (long long s0 = 0; s0 < send; s0 += %d) {", BKV);
  c->indent++;
  ex_line(c, "__syncthreads();");
  if (k_in && v_in) {
    ivec k0i = kk, v0i = vv;
    k0i.e[r - 1] = "0LL";
    v0i.e[r - 1] = "0LL";
    ex_line(c, "for (int t = tid; t < %lld; t += %d) {", (long long)(BKV * D / 8), threads);
    c->indent++;
    ex_line(c, "const int ss = t / %lld, e = (t %% %lld) * 8;", (long long)(D / 8), (long long)(D / 8));
    ex_line(c, "const long long s = s0 + ss;");
    ex_line(c, "const bool ok = s < S;");
    ex_line(c, "em_cp_async16(&Ks[ss][e], ok ? in%d + %s + e : in%d, ok ? 16 : 0);", ex_input_pos(c, k),
            ex_linearize(c, &k0i, ks), ex_input_pos(c, k));
    ex_line(c, "em_cp_async16(&Vs[ss][e], ok ? in%d + %s + e : in%d, ok ? 16 : 0);", ex_input_pos(c, v),
            ex_linearize(c, &v0i, vs), ex_input_pos(c, v));
    c->memo.n = mark;
    c->indent--;
    ex_line(c, "}");
    ex_line(c, "em_cp_commit();");
    ex_line(c, "em_cp_wait<0>();");
    ex_line(c, "__syncthreads();");
  } else {
    ex_line(c, "for (int t = tid; t < %lld; t += %d) {", (long long)(BKV * D), threads);
    c->indent++;
    ex_line(c, "const int ss = t / %lld, e = t %% %lld;", (long long)D, (long long)D);
    ex_line(c, "const long long s = s0 + ss;");
    ex_line(c, "float kv_k = 0.0f, kv_v = 0.0f;");
    ex_line(c, "if (s < S) {");
    c->indent++;
    ex_line(c, "kv_k = (float)%s;", ex_val(c, k, &kk));
    ex_line(c, "kv_v = (float)%s;", ex_val(c, v, &vv));
    c->memo.n = mark;
    c->indent--;
    ex_line(c, "}");
    ex_line(c, "Ks[ss][e] = %s(kv_k);", cvt);
    ex_line(c, "Vs[ss][e] = %s(kv_v);", cvt);
    c->indent--;
    ex_line(c, "}");
    ex_line(c, "__syncthreads();");
  }
  /* S = Q Kᵀ for this warp's 16 rows x BKV keys */
  ex_line(c, "float sc[%d][4];", NS);
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int j = 0; j < %d; j++) sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.0f;", NS);
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int kd = 0; kd < %d; kd++) {", KD);
  ex_line(c, "  #pragma unroll");
  ex_line(c, "  for (int j = 0; j < %d; j += 2) {", NS);
  ex_line(c, "    unsigned t4[4], b0[2], b1[2];");
  ex_line(c, "    em_ldsm_x4(t4, &Ks[j * 8 + (lane >> 4) * 8 + (lane & 7)][kd * 16 + ((lane >> 3) & 1) * 8]);");
  ex_line(c, "    b0[0] = t4[0]; b0[1] = t4[1]; b1[0] = t4[2]; b1[1] = t4[3];");
  ex_line(c, "    em_mma_%s(sc[j], qf[kd], b0);", mt);
  ex_line(c, "    em_mma_%s(sc[j + 1], qf[kd], b1);", mt);
  ex_line(c, "  }");
  ex_line(c, "}");
  /* scale, mask, online softmax */
  ex_line(c, "float mx[2] = {mrow[0], mrow[1]};");
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int j = 0; j < %d; j++)", NS);
  ex_line(c, "  #pragma unroll");
  ex_line(c, "  for (int qd = 0; qd < 4; qd++) {");
  c->indent += 2;
  ex_line(c, "const long long s = s0 + j * 8 + (lane & 3) * 2 + (qd & 1), l = qd < 2 ? lr0 : lr1;");
  ex_line(c, "float x = sc[j][qd] * %.17gf;", scale);
  ex_line(c, "if (s >= S%s) x = -INFINITY;", causal ? " || s > l" : "");
  if (an->args[3].present) {
    int m = an->args[3].tensor;
    ivec full2 = oi;
    full2.e[r - 2] = "l";
    full2.e[r - 1] = "s";
    ivec mi = ex_bcast(c, &full2, os, ex_S(c, m));
    ex_line(c, "if (s < S && l < Lq) {");
    c->indent++;
    const char *mv = ex_val(c, m, &mi);
    if (ex_V(c, m)->dtype == EM_BOOL) ex_line(c, "if (!(%s)) x = -INFINITY;", mv);
    else ex_line(c, "x += (float)%s;", mv);
    c->memo.n = mark;
    c->indent--;
    ex_line(c, "}");
  }
  ex_line(c, "sc[j][qd] = x;");
  ex_line(c, "mx[qd >> 1] = fmaxf(mx[qd >> 1], x);");
  c->indent -= 2;
  ex_line(c, "  }");
  ex_line(c, "float corr[2], rs[2] = {0.0f, 0.0f};");
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int h = 0; h < 2; h++) {");
  ex_line(c, "  mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));");
  ex_line(c, "  mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));");
  ex_line(c, "  corr[h] = mx[h] == -INFINITY ? 1.0f : expf(mrow[h] - mx[h]);");
  ex_line(c, "}");
  ex_line(c, "unsigned pf[%d][2];", NS * 2);
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int j = 0; j < %d; j++) {", NS);
  ex_line(c, "  float p0 = mx[0] == -INFINITY ? 0.0f : expf(sc[j][0] - mx[0]), p1 = mx[0] == -INFINITY ? 0.0f : expf(sc[j][1] - mx[0]);");
  ex_line(c, "  float p2 = mx[1] == -INFINITY ? 0.0f : expf(sc[j][2] - mx[1]), p3 = mx[1] == -INFINITY ? 0.0f : expf(sc[j][3] - mx[1]);");
  ex_line(c, "  rs[0] += p0 + p1;");
  ex_line(c, "  rs[1] += p2 + p3;");
  ex_line(c, "  pf[j][0] = (unsigned)%s(p0) | ((unsigned)%s(p1) << 16);", cvt, cvt);
  ex_line(c, "  pf[j][1] = (unsigned)%s(p2) | ((unsigned)%s(p3) << 16);", cvt, cvt);
  ex_line(c, "}");
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int h = 0; h < 2; h++) {");
  ex_line(c, "  rs[h] += __shfl_xor_sync(0xffffffffu, rs[h], 1);");
  ex_line(c, "  rs[h] += __shfl_xor_sync(0xffffffffu, rs[h], 2);");
  ex_line(c, "  lrow[h] = lrow[h] * corr[h] + rs[h];");
  ex_line(c, "  mrow[h] = mx[h];");
  ex_line(c, "}");
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int j = 0; j < %d; j++) {", ND);
  ex_line(c, "  o[j][0] *= corr[0]; o[j][1] *= corr[0]; o[j][2] *= corr[1]; o[j][3] *= corr[1];");
  ex_line(c, "}");
  /* O += P V: P's S fragments re-packed as A fragments (16 keys per step), V through ldmatrix.trans */
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int ks = 0; ks < %d; ks++) {", BKV / 16);
  ex_line(c, "  const unsigned pa[4] = {pf[2 * ks][0], pf[2 * ks][1], pf[2 * ks + 1][0], pf[2 * ks + 1][1]};");
  ex_line(c, "  #pragma unroll");
  ex_line(c, "  for (int j = 0; j < %d; j += 2) {", ND);
  ex_line(c, "    unsigned t4[4], b0[2], b1[2];");
  ex_line(c, "    em_ldsm_x4_t(t4, &Vs[ks * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)][j * 8 + (lane >> 4) * 8]);");
  ex_line(c, "    b0[0] = t4[0]; b0[1] = t4[1]; b1[0] = t4[2]; b1[1] = t4[3];");
  ex_line(c, "    em_mma_%s(o[j], pa, b0);", mt);
  ex_line(c, "    em_mma_%s(o[j + 1], pa, b1);", mt);
  ex_line(c, "  }");
  ex_line(c, "}");
  c->indent--;
  ex_line(c, "}");
  /* epilogue: each accumulator element (row l, column d) */
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int j = 0; j < %d; j++) {", ND);
  c->indent++;
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int qd = 0; qd < 4; qd++) {");
  c->indent++;
  ex_line(c, "const long long l = qd < 2 ? lr0 : lr1, d = j * 8 + (lane & 3) * 2 + (qd & 1);");
  ex_line(c, "if (l >= Lq) continue;");
  ex_line(c, "const float lsum = lrow[qd >> 1];");
  ex_line(c, "const %s em_r = %s;", ex_ctype(dt), ex_round_to(c, dt, "(lsum > 0.0f ? o[j][qd] / lsum : 0.0f)"));
  c->anchor_var = "em_r";
  ivec di = oi;
  di.e[r - 2] = "l";
  di.e[r - 1] = "d";
  ex_write_aligned(c, a, di, "an output of the attention kernel is not aligned with its result");
  c->memo.n = mark;
  c->indent--;
  ex_line(c, "}");
  c->indent--;
  ex_line(c, "}");
}

/* Scalar attention: a block of QROWS query rows of one (batch, head); each thread keeps its query row and an
 * f32 accumulator in registers and runs an online softmax over the keys. KV_TILE > 0 stages KV_TILE keys and
 * values in shared memory, loaded by the whole block; causal blocks stop at their last row's diagonal. */
void ex_k_attention(ectx *c, em_launch *L) {
  if (em_knob_get(&c->t->knobs, "FLASH", 0)) {
    k_flash(c, L);
    return;
  }
  int threads = em_knob_get(&c->t->knobs, "QROWS", 64), kvt = em_knob_get(&c->t->knobs, "KV_TILE", 0);
  int a = c->t->anchor;
  const em_node *an = &c->g->nodes.v[ex_V(c, a)->node];
  int q = an->args[0].tensor, k = an->args[1].tensor, v = an->args[2].tensor;
  const em_shape *qs = ex_S(c, q), *ks = ex_S(c, k), *vs = ex_S(c, v), *os = ex_S(c, a);
  int r = qs->rank;
  int64_t E, Ev;
  if (!em_dim_is_const(&qs->d[r - 1], &E) || !em_dim_is_const(&vs->d[r - 1], &Ev) || E > 256 || Ev > 256) {
    ex_fail(c, "attention needs constant head dims up to 256");
    return;
  }
  if (kvt < 0 || kvt * (E + Ev) * 4 > 49152) {
    ex_fail(c, "KV_TILE=%d needs %lld B of shared memory", kvt, (long long)(kvt * (E + Ev) * 4));
    return;
  }
  double scale = an->args[6].present ? an->args[6].f : 1.0 / sqrt((double)E);
  int causal = an->args[5].b, gqa = an->args[7].b;
  em_shape bat = *os;
  bat.rank = r - 2;
  L->block[0] = threads;
  snprintf(L->grid[0], sizeof L->grid[0], "cdiv(%s,%d)", em_dim_format(&c->g->syms, &os->d[r - 2], (char[128]){0}, 128), threads);
  snprintf(L->grid[1], sizeof L->grid[1], "%s", bat.rank ? ex_numel_text(c, &bat) : "1");
  ex_line(c, "const long long Lq = %s, S = %s;", ex_dim_c(c, &os->d[r - 2]), ex_dim_c(c, &ks->d[r - 2]));
  ex_line(c, "const long long l = (long long)blockIdx.x * %d + threadIdx.x, bh = blockIdx.y;", threads);
  ex_line(c, "const bool live = l < Lq;");
  ivec bi = ex_unravel(c, "bh", &bat);
  ivec oi = {r};
  for (int i = 0; i < r - 2; i++) {
    oi.e[i] = ex_A(c, "x%d", i);
    ex_line(c, "const long long x%d = %s;", i, bi.e[i]);
  }
  oi.e[r - 2] = "l";
  ex_line(c, "float qr[%lld], acc[%lld];", (long long)E, (long long)Ev);
  int mark = c->memo.n;
  ex_line(c, "for (int e = 0; e < %lld; e++) {", (long long)E);
  c->indent++;
  ivec qi = oi;
  qi.e[r - 1] = "e";
  ex_line(c, "qr[e] = live ? (float)%s : 0.0f;", ex_val(c, q, &qi));
  c->memo.n = mark;
  c->indent--;
  ex_line(c, "}");
  ex_line(c, "for (int e = 0; e < %lld; e++) acc[e] = 0.0f;", (long long)Ev);
  ex_line(c, "float em_m = -INFINITY, em_l = 0.0f;");
  ex_line(c, "const long long send = %s;", causal ? "(l + 1 < S ? l + 1 : S)" : "S");
  ivec kk, vv;
  kv_index(c, &oi, qs, ks, vs, os, gqa, &kk, &vv);
  const char *kval = "0", *vval = "0";
  if (kvt > 0) {
    ex_line(c, "__shared__ float Ks[%d][%lld], Vs[%d][%lld];", kvt, (long long)E, kvt, (long long)Ev);
    ex_line(c, "const long long bend = %s;",
         causal ? ex_A(c, "((long long)blockIdx.x * %d + %d < S ? (long long)blockIdx.x * %d + %d : S)", threads, threads, threads, threads)
                : "S");
    ex_line(c, "for (long long s0 = 0; s0 < bend; s0 += %d) {", kvt);
    c->indent++;
    ex_line(c, "for (int t = threadIdx.x; t < %lld; t += %d) {", (long long)(kvt * (E > Ev ? E : Ev)), threads);
    c->indent++;
    ex_line(c, "const int ss = t / %lld, e = t %% %lld;", (long long)(E > Ev ? E : Ev), (long long)(E > Ev ? E : Ev));
    ex_line(c, "const long long s = s0 + ss;");
    /* both loads in one scope: their index temporaries are shared, forgotten only when the loop closes */
    ex_line(c, "if (s < S && e < %lld) Ks[ss][e] = (float)%s;", (long long)E, ex_val(c, k, &kk));
    ex_line(c, "if (s < S && e < %lld) Vs[ss][e] = (float)%s;", (long long)Ev, ex_val(c, v, &vv));
    c->memo.n = mark;
    c->indent--;
    ex_line(c, "}");
    ex_line(c, "__syncthreads();");
    ex_line(c, "for (int ss = 0; live && ss < %d; ss++) {", kvt);
    c->indent++;
    ex_line(c, "const long long s = s0 + ss;");
    ex_line(c, "if (s >= send) break;");
    kval = "Ks[ss][e]";
    vval = "Vs[ss][e]";
  } else {
    ex_line(c, "for (long long s = 0; live && s < send; s++) {");
    c->indent++;
  }
  ex_line(c, "float sc = 0.0f;");
  ex_line(c, "for (int e = 0; e < %lld; e++) {", (long long)E);
  c->indent++;
  ex_line(c, "sc += qr[e] * (float)%s;", kvt > 0 ? kval : ex_val(c, k, &kk));
  c->memo.n = mark;
  c->indent--;
  ex_line(c, "}");
  ex_line(c, "sc *= %.17gf;", scale);
  if (an->args[3].present) {
    int m = an->args[3].tensor;
    ivec full2 = oi;
    full2.e[r - 1] = "s";
    ivec mi = ex_bcast(c, &full2, os, ex_S(c, m));
    const char *mv = ex_val(c, m, &mi);
    if (ex_V(c, m)->dtype == EM_BOOL) ex_line(c, "if (!(%s)) continue;", mv);
    else ex_line(c, "sc += (float)%s;", mv);
  }
  ex_line(c, "const float mn = fmaxf(em_m, sc), corr = expf(em_m - mn), p = expf(sc - mn);");
  ex_line(c, "em_l = em_l * corr + p;");
  ex_line(c, "for (int e = 0; e < %lld; e++) {", (long long)Ev);
  c->indent++;
  ex_line(c, "acc[e] = acc[e] * corr + p * (float)%s;", kvt > 0 ? vval : ex_val(c, v, &vv));
  c->memo.n = mark;
  c->indent--;
  ex_line(c, "}");
  ex_line(c, "em_m = mn;");
  c->memo.n = mark;
  c->indent--;
  ex_line(c, "}");
  if (kvt > 0) {
    ex_line(c, "__syncthreads();");
    c->indent--;
    ex_line(c, "}");
  }
  ex_line(c, "if (!live) return;");
  ex_line(c, "for (int ev = 0; ev < %lld; ev++) {", (long long)Ev);
  c->indent++;
  ex_line(c, "const %s em_r = %s;", ex_ctype(ex_V(c, a)->dtype), ex_round_to(c, ex_V(c, a)->dtype, "(em_l > 0.0f ? acc[ev] / em_l : 0.0f)"));
  c->anchor_var = "em_r";
  ivec di = oi;
  di.e[r - 1] = "ev";
  ex_write_aligned(c, a, di, "an output of the attention kernel is not aligned with its result");
  c->memo.n = mark;
  c->indent--;
  ex_line(c, "}");
}

const char ex_PRELUDE[] =
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
    "static __device__ __forceinline__ void em_ldsm_x4_t(unsigned *r, const void *p) {\n"
    "  asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\"\n"
    "               : \"=r\"(r[0]), \"=r\"(r[1]), \"=r\"(r[2]), \"=r\"(r[3]) : \"r\"(em_smem(p)));\n"
    "}\n"
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

