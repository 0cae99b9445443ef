/* emit_ctr_epilogue.c — the contraction's epilogue parts, after the K loop of any tier: SPLIT_K's reduction over
 * the launch scratch, a linear's result (bias, rounding), the staged head-local tile (RoPE, NORM_EPI), and each
 * thread's accumulator elements through the fused ops to the outputs (in adjacent pairs on the tensor-core tiers).
 * The accumulator layout (mma.sync's C fragment repeated over BN/8 column blocks) is shared by every tier, so one
 * epilogue serves them all; emit_contraction.c drives the main loops, emit_gemm_ws.c the persistent pipeline. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emit_impl.h"

/* SPLIT_K: this block's partial accumulators to scratch ([slice][element][thread] per tile, coalesced), a
 * counter per tile; the block that arrives last sums the slices in order 0..S-1 (the same sum whichever block
 * is last), resets the counter for the next launch and runs the epilogue; the others leave. */
static void split_reduce(ectx *c, int SK, int FM, int FN, int threads, int dual) {
  int nacc = FM * FN * 4 * (dual ? 2 : 1);
  ex_line(c, "{");
  c->indent++;
  ex_line(c, "const long long em_tile = (long long)blockIdx.y * gridDim.x + blockIdx.x, em_tiles = (long long)gridDim.x * gridDim.y;");
  ex_line(c, "float *const em_ws = em_scratch + em_tile * %lldLL;", (long long)SK * nacc * threads);
  ex_line(c, "unsigned *const em_cnt = (unsigned *)(em_scratch + em_tiles * %lldLL) + em_tile;", (long long)SK * nacc * threads);
  ex_line(c, "__shared__ int em_last;");
  for (int b = 0; b < (dual ? 2 : 1); b++) {
    ex_line(c, "#pragma unroll");
    ex_line(c, "for (int i = 0; i < %d; i++)", FM);
    ex_line(c, "  for (int j = 0; j < %d; j++)", FN);
    ex_line(c, "    for (int q = 0; q < 4; q++)");
    ex_line(c, "      em_ws[((int)blockIdx.z * %d + %d + (i * %d + j) * 4 + q) * %d + tid] = %s[i][j][q];", nacc, b * FM * FN * 4, FN,
            threads, b ? "acc2" : "acc");
  }
  ex_line(c, "__threadfence();");
  ex_line(c, "__syncthreads();");
  ex_line(c, "if (tid == 0) em_last = atomicAdd(em_cnt, 1u) == %du;", SK - 1);
  ex_line(c, "__syncthreads();");
  ex_line(c, "if (!em_last) return;");
  ex_line(c, "__threadfence();");
  for (int b = 0; b < (dual ? 2 : 1); b++) {
    ex_line(c, "#pragma unroll");
    ex_line(c, "for (int i = 0; i < %d; i++)", FM);
    ex_line(c, "  for (int j = 0; j < %d; j++)", FN);
    ex_line(c, "    for (int q = 0; q < 4; q++) {");
    ex_line(c, "      float em_s = 0.0f;");
    ex_line(c, "      for (int z = 0; z < %d; z++) em_s += __ldcg(&em_ws[(z * %d + %d + (i * %d + j) * 4 + q) * %d + tid]);", SK, nacc,
            b * FM * FN * 4, FN, threads);
    ex_line(c, "      %s[i][j][q] = em_s;", b ? "acc2" : "acc");
    ex_line(c, "    }");
  }
  ex_line(c, "if (tid == 0) *em_cnt = 0u;");
  c->indent--;
  ex_line(c, "}");
}

/* The value of linear sibling v at column nidx from its accumulator element acc: plus its bias (when it has one),
 * rounded to its dtype — what the epilogues and the staged tile start from. */
const char *ex_ctr_result(ectx *c, int v, const char *acc, const char *nidx) {
  const em_node *sn = &c->g->nodes.v[ex_V(c, v)->node];
  if (sn->op == EM_OP_LINEAR && sn->args[2].present) {
    ivec bi = {1, {nidx}};
    acc = ex_A(c, "(%s + (float)%s)", acc, ex_val(c, sn->args[2].tensor, &bi));
  }
  return ex_round_to(c, ex_V(c, v)->dtype, acc);
}

/* The staged tile's stores: every accumulator element (m, n) of this thread inside M and N, as its sibling's
 * result (bias, rounding) in the tile's dtype, into em_stage0 (em_stage1 for a dual pair's second accumulator)
 * at row ml, column nl of a row stride ld. */
static void ctr_stage_store(ectx *c, const ex_ctr *k, em_dtype sdt, int ld, int nst) {
  const int mma = k->mma;
  if (mma) {
    ex_line(c, "for (int i = 0; i < %d; i++)", k->FM);
    ex_line(c, "  for (int j = 0; j < %d; j++)", k->FN);
    ex_line(c, "    for (int q = 0; q < 4; q++) {");
    c->indent += 3;
    ex_line(c, "const int ml = wm * %d + i * 16 + (lane >> 2) + (q >> 1) * 8, nl = wn * %d + j * 8 + (lane & 3) * 2 + (q & 1);",
            k->BM / k->WM, k->BN / k->WN);
  } else {
    ex_line(c, "for (int i = 0; i < %d; i++)", k->TM);
    ex_line(c, "  for (int j = 0; j < %d; j++) {", k->TN);
    c->indent += 2;
    ex_line(c, "const int ml = tr * %d + i, nl = tc * %d + j;", k->TM, k->TN);
  }
  ex_line(c, "const long long n = n0 + nl;");
  ex_line(c, "if (m0 + ml >= M || n >= N) continue;");
  for (int j = 0; j < nst; j++) {
    const char *accv = j ? (mma ? "acc2[i][j][q]" : "acc2[i][j]") : (mma ? "acc[i][j][q]" : "acc[i][j]");
    int mark = c->memo.n;
    ex_line(c, "em_stage%d[ml * %d + nl] = %s;", j, ld, ex_store_conv(c, sdt, ex_ctr_result(c, k->sib[j], accv, "n")));
    c->memo.n = mark;
  }
  c->indent -= mma ? 3 : 2;
  ex_line(c, "%s", mma ? "    }" : "  }");
  ex_line(c, "__syncthreads();");
}

/* One head-local reduction rn (NORM_EPI: Qwen3's q_norm/k_norm over each D-wide head of the staged tile) into
 * em_hred<j>[BM * BN/D]: a warp per (row, head) of the tile sums its D elements, the anchors' values read from
 * the staged tiles (dtype sdt, row stride ld) and the reduction's input aligned with them; the epilogue reads
 * the result of its own row and head. Fails c where rn is not over one D-wide last dim. */
static void ctr_head_reduction(ectx *c, const ex_ctr *k, const em_node *rn, int stageD, em_dtype sdt, int ld) {
  const int BM = k->BM, r = k->r, *sib = k->sib, S = k->BN / stageD;
  const em_shape *xs = ex_S(c, rn->args[0].tensor);
  int64_t R = 0;
  if (!rn->args[1].present || rn->args[1].n != 1 || ex_axis_of_dim(&rn->args[1].ilist[0], xs->rank) != xs->rank - 1 ||
      !em_dim_is_const(&xs->d[xs->rank - 1], &R) || R != stageD || c->nhred == 4) {
    ex_fail(c, "a reduction in a contraction's epilogue must be over one %d-wide head (the last dim)", stageD);
    return;
  }
  int j = c->nhred++;
  c->hred_v[j] = rn->out;
  c->hred_S = S;
  c->hred_D = stageD;
  ex_line(c, "__shared__ float em_hred%d[%d];", j, BM * S);
  ex_line(c, "for (int em_p = threadIdx.x >> 5; em_p < %d; em_p += %d) {", BM * S, k->threads / 32);
  c->indent++;
  ex_line(c, "const int ml = em_p / %d, em_sg = em_p %% %d;", S, S);
  ex_line(c, "const long long m = m0 + ml;");
  ex_line(c, "float em_acc = 0.0f;");
  ex_line(c, "if (m < M) {");
  c->indent++;
  ex_line(c, "for (int em_c = threadIdx.x & 31; em_c < %d; em_c += 32) {", stageD);
  c->indent++;
  ex_line(c, "const int nl = em_sg * %d + em_c;", stageD);
  ex_line(c, "const long long n = n0 + nl;");
  int mark = c->memo.n;
  /* the anchors' values at (m, n) come from the staged tiles; the reduction's input is aligned with them */
  ivec mi2 = ex_unravel(c, "m", &k->mdims);
  ivec di = {r};
  for (int q = 0; q < k->bdims.rank; q++) di.e[q] = ex_A(c, "0LL");
  for (int q = 0; q < k->mdims.rank; q++) di.e[k->bdims.rank + q] = mi2.e[q];
  di.e[r - 1] = "n";
  ex_reset_alignment(c);
  const char *sav = c->anchor_var, *savx = c->xanchor_var;
  int sava = c->anchor, savxa = c->xanchor;
  c->anchor = sib[0];
  c->anchor_var = ex_load_conv(c, sdt, ex_A(c, "em_stage0[ml * %d + nl]", ld));
  c->al[sib[0]] = di;
  c->bij[sib[0]] = 1;
  if (k->dual) {
    c->xanchor = sib[1];
    c->xanchor_var = ex_load_conv(c, sdt, ex_A(c, "em_stage1[ml * %d + nl]", ld));
    c->al[sib[1]] = di;
    c->bij[sib[1]] = 1;
  }
  ex_align(c);
  int u = rn->args[0].tensor;
  if (!c->bij[u]) {
    ex_fail(c, "the head-local reduction's input is not aligned with the result tile");
    return;
  }
  ex_line(c, "em_acc += (float)%s;", ex_val(c, u, &c->al[u]));
  c->memo.n = mark;
  c->anchor_var = sav;
  c->xanchor_var = savx;
  c->anchor = sava;
  c->xanchor = savxa;
  c->indent--;
  ex_line(c, "}");
  c->indent--;
  ex_line(c, "}");
  ex_line(c, "for (int o = 16; o > 0; o >>= 1) em_acc += __shfl_xor_sync(0xffffffffu, em_acc, o);");
  ex_line(c, "if ((threadIdx.x & 31) == 0) em_hred%d[em_p] = %s;", j,
          ex_round_to(c, ex_V(c, rn->out)->dtype, rn->op == EM_OP_MEAN ? ex_A(c, "em_acc / %d.0f", stageD) : "em_acc"));
  c->indent--;
  ex_line(c, "}");
}

/* A head-local epilogue (kernel meta "stage" = D: RoPE's rotate_half reads the result at other columns of the
 * same D-wide head): the result tile, rounded to its dtype, goes to shared memory first (em_stage0, em_stage1),
 * then each head-local reduction (NORM_EPI) over it, behind a block barrier. Nothing without the meta. Returns
 * non-zero when the emission failed. */
int ex_ctr_stage_width(ectx *c, const ex_ctr *k) {
  const char *smeta = em_graph_get_meta(c->g, "stage");
  int stageD = smeta ? atoi(smeta) : 0;
  int64_t nc = 0;
  if (stageD <= 0) return 0;
  /* (BN a multiple of D: the legality table's) */
  if (!k->lin_op || k->concat || !em_dim_is_const(&k->os->d[k->r - 1], &nc) || nc % stageD) {
    ex_fail(c, "a head-local epilogue (D=%d) needs a linear (not merged siblings) and N a multiple of D", stageD);
    return -1;
  }
  return stageD;
}

int ex_ctr_outputs_ok(ectx *c, const ex_ctr *k, int n) { return k->concat ? n >= 1 : n == c->g->outputs.n; }

/* 1 when node rn is a head-local reduction of the staged tile: a mean or sum that reads the linear's result. */
static int is_head_reduction(const ex_ctr *k, const em_node *rn) {
  return rn->out != k->a && k->dep[rn->out] && (rn->op == EM_OP_MEAN || rn->op == EM_OP_SUM);
}

int ex_ctr_head_reductions(ectx *c, const ex_ctr *k) {
  int n = 0;
  for (int i = 0; i < c->g->nodes.n; i++) n += is_head_reduction(k, &c->g->nodes.v[i]);
  return n;
}

int ex_ctr_is_prologue_reduction(const ex_ctr *k, const em_node *rn) {
  return rn->out != k->a && !k->dep[rn->out] &&
         (rn->op == EM_OP_MEAN || rn->op == EM_OP_SUM || rn->op == EM_OP_AMAX || rn->op == EM_OP_VECTOR_NORM);
}

int ex_ctr_prologue_reductions(ectx *c, const ex_ctr *k) {
  int n = 0;
  for (int i = 0; i < c->g->nodes.n; i++) n += ex_ctr_is_prologue_reduction(k, &c->g->nodes.v[i]);
  return n;
}

int ex_ctr_stage_in_regs(ectx *c, const ex_ctr *k) {
  const char *st = em_graph_get_meta(c->g, "stage_step");
  return st && atoi(st) % 8 == 0 && k->mma && k->WN == 1 && !k->jkeep && !k->concat && !ex_ctr_head_reductions(c, k);
}

/* One of the thread's accumulator elements of this row: t = 2 * j + parity over [lo, hi), a tree of selects on the
 * runtime t whose leaves name the registers (no dynamic index: it would put the fragments in local memory). */
static const char *stage_pick(ectx *c, const char *acc, const char *t, int lo, int hi) {
  if (hi - lo == 1) return ex_A(c, "%s[i][%d][(q & 2) + %d]", acc, lo >> 1, lo & 1);
  int mid = (lo + hi) / 2;
  return ex_A(c, "(%s < %d ? %s : %s)", t, mid, stage_pick(c, acc, t, lo, mid), stage_pick(c, acc, t, mid, hi));
}

/* The shifted element, where the element being computed is known (stage_own_n, stage_own_q): a read at column
 * own + d, d a multiple of the step within the head, is group j + d / 8 of the same row and element — a chain of
 * selects on the runtime d whose leaves are constant registers once j is unrolled (the select tree on the
 * tile-relative column made TinyLlama's q epilogue a thousand branches). NULL where the shifts are too many. */
static const char *stage_shifted(ectx *c, const char *acc, const char *d) {
  int st = c->stage_step, w = c->stage_w, ns = st > 0 ? w / st : 0;
  if (!c->stage_own_n || st % 8 || ns < 1 || 2 * ns - 1 > 7) return NULL;
  const char *e = NULL;
  for (int k = -(ns - 1); k <= ns - 1; k++) {
    int g = k * st / 8;
    const char *leaf = g ? ex_A(c, "%s[i][(j + %d >= 0 && j + %d < %d) ? j + %d : 0][%s]", acc, g, g, c->stage_fn, g, c->stage_own_q)
                         : ex_A(c, "%s[i][j][%s]", acc, c->stage_own_q);
    e = e ? ex_A(c, "(%s == %d ? %s : %s)", d, k * st, leaf, e) : leaf;
  }
  return e;
}

const char *ex_ctr_stage_read(ectx *c, int s, const char *col, const char *shift) {
  const char *acc = s ? "acc2" : "acc";
  if (c->stage_own_n) {
    const char *d = ex_A(c, "v%d", c->tmp), *pick = stage_shifted(c, acc, d);
    if (pick) {
      c->tmp++;
      /* the shift as a difference of flat indices, not of columns: a head-local read stays in the element's row,
       * and the compiler folds the difference to a constant where the column's remainder by the row length did
       * not fold (TinyLlama's q epilogue, 14 64-bit operations an element) */
      ex_line(c, "const int %s = (int)(%s);", d, shift);
      return ex_ctr_result(c, c->stage_sib[s], pick, ex_A(c, "(%s + %s)", c->stage_own_n, d));
    }
  }
  /* column col - n0 of the tile is fragment group j = col' / 8, element (q & 2) + col' % 2 of this thread's row
   * (its lane quad holds col' % 8 / 2: the shift is a multiple of 8) */
  const char *cl = ex_A(c, "v%d", c->tmp++), *t = ex_A(c, "v%d", c->tmp++);
  ex_line(c, "const int %s = (int)((%s) - n0), %s = ((%s >> 3) << 1) | (%s & 1);", cl, col, t, cl, cl);
  return ex_ctr_result(c, c->stage_sib[s], stage_pick(c, acc, t, 0, 2 * c->stage_fn), ex_A(c, "(n0 + %s)", cl));
}

int ex_ctr_stage_regs(ectx *c, const ex_ctr *k, int stageD) {
  if (!ex_ctr_stage_in_regs(c, k)) {
    ex_fail(c, "a head-local epilogue from the thread's own fragments needs tensor-core fragments of whole tile rows "
               "(WN=1), column shifts in multiples of 8 (meta stage_step), no head-local reduction, no column split");
    return 1;
  }
  c->stage_reg = 1, c->stage_fn = k->FN, c->stage_sib[0] = k->sib[0], c->stage_sib[1] = k->dual ? k->sib[1] : -1;
  c->stage_w = stageD, c->stage_step = atoi(em_graph_get_meta(c->g, "stage_step"));
  return 0;
}

static int ctr_stage_tile(ectx *c, const ex_ctr *k, em_launch *L) {
  const int BM = k->BM, BN = k->BN, a = k->a;
  int stageD = ex_ctr_stage_width(c, k);
  if (stageD < 0) return 1;
  if (stageD > 0 && k->stage_reg) return ex_ctr_stage_regs(c, k, stageD);
  if (stageD > 0) {
    em_dtype sdt = ex_V(c, a)->dtype;
    int ld = BN + 8, nst = k->dual ? 2 : 1;
    long long esz = em_dtype_bytes(sdt), sbytes = (long long)nst * esz * BM * ld;
    if (k->tma || k->async) {
      /* the tile overlays the operand ring, idle once the K loop is over (every copy landed, every wgmma
       * retired): a separate region would cost blocks per SM (TinyLlama q_proj: 28.0 us beside, measured) */
      if (!k->tma) ex_line(c, "asm volatile(\"cp.async.wait_all;\" ::: \"memory\");");
      ex_line(c, "__syncthreads();");
      if (sbytes > L->smem) L->smem = sbytes;
    } else {
      ex_line(c, "extern __shared__ __align__(16) unsigned char em_dsm[];");
      L->smem = sbytes;
    }
    for (int j = 0; j < nst; j++) {
      c->stage_arr[j] = ex_A(c, "em_stage%d", j);
      ex_line(c, "%s *const em_stage%d = reinterpret_cast<%s *>(em_dsm + %lld);", ex_stype(sdt), j, ex_stype(sdt),
              (long long)j * esz * BM * ld);
    }
    c->stage_mdims = k->mdims;
    c->stage_ld = ld;
    ctr_stage_store(c, k, sdt, ld, nst);
    for (int i = 0; i < c->g->nodes.n && !c->failed; i++) {
      const em_node *rn = &c->g->nodes.v[i];
      if (!is_head_reduction(k, rn)) continue;
      ctr_head_reduction(c, k, rn, stageD, sdt, ld);
    }
    if (c->nhred) ex_line(c, "__syncthreads();");
  }
  return c->failed;
}

/* Every accumulator element (m, n) of this thread (acc[i][j][q] in mma.sync's C-fragment order; acc[i][j] on the
 * scalar tier) through the fused ops to the outputs. */
/* Anchors sibling s's result (value text var; a dual pair's second accumulator, sibling 1, at var2 when given) at
 * the domain index (the batch index bz, the row index mi, column nv) and aligns every value of the kernel with it. */
void ex_ctr_anchor(ectx *c, const ex_ctr *k, int s, const char *var, const char *var2, const ivec *mi, const char *nv) {
  c->anchor = k->sib[s];
  c->anchor_var = var;
  ivec di = {k->r};
  for (int i = 0; i < k->bdims.rank; i++) di.e[i] = k->bz.e[i];
  for (int i = 0; i < k->mdims.rank; i++) di.e[k->bdims.rank + i] = mi->e[i];
  di.e[k->r - 1] = nv;
  ex_reset_alignment(c);
  c->al[k->sib[s]] = di;
  c->bij[k->sib[s]] = 1;
  if (var2) {
    c->xanchor = k->sib[1];
    c->xanchor_var = var2;
    c->al[k->sib[1]] = di;
    c->bij[k->sib[1]] = 1;
  }
  ex_align(c);
}

/* 1 when value v's shape is the result's. */
static int same_shape(ectx *c, const ex_ctr *k, int v) { return em_shape_eq(ex_S(c, v), k->os); }

int ex_ctr_residual(ectx *c, const ex_ctr *k) {
  int64_t nc = 0;
  if (!k->mma || k->dual || k->concat || k->nsib != 1 || !em_dim_is_const(&k->os->d[k->r - 1], &nc) || nc % 2) return -1;
  for (int i = 0; i < c->g->nodes.n; i++) {
    const em_node *nd = &c->g->nodes.v[i];
    const em_opspec *sp = em_op_spec(nd->op);
    if (nd->op != EM_OP_ADD || !same_shape(c, k, nd->out)) continue;
    if (!(sp->args[0].kind == EM_ARG_T || nd->args[0].is_tensor) || !(sp->args[1].kind == EM_ARG_T || nd->args[1].is_tensor)) continue;
    for (int a = 0; a < 2; a++) {
      int v = nd->args[a].tensor, o = nd->args[1 - a].tensor;
      em_dtype dt = ex_V(c, v)->dtype;
      if (ex_V(c, v)->kind != EM_V_NODE && v != k->A_ && v != k->B_ && (o == k->a || k->dep[o]) && same_shape(c, k, v) &&
          same_shape(c, k, o) && (dt == EM_BF16 || dt == EM_F16) && ex_input_pos(c, v) >= 0)
        return v;
    }
  }
  return -1;
}

/* Where the epilogue reads value u at the anchored element: the index a mul or add aligned with the result
 * broadcasts to it (RoPE's x * cos), or rank 0 where no such op reads it. */
static ivec prefetch_index(ectx *c, int u) {
  ivec none = {0};
  for (int i = 0; i < c->g->nodes.n; i++) {
    const em_node *nd = &c->g->nodes.v[i];
    if (!c->al[nd->out].rank || (nd->op != EM_OP_MUL && nd->op != EM_OP_ADD)) continue;
    for (int a = 0; a < 2; a++)
      if (nd->args[a].is_tensor && nd->args[a].tensor == u)
        return ex_bcast(c, &c->al[nd->out], &ex_V(c, nd->out)->shape, ex_S(c, u));
  }
  return none;
}

/* The kernel input behind value u (a view chain over it), read at u's index ix (mapped back), or -1 where u is not
 * a 2-byte input other than the contraction's operands. */
static int prefetch_source(ectx *c, const ex_ctr *k, int u, ivec *ix) {
  int v = ex_view_source(c, u, ix);
  if (v < 0 || v == k->A_ || v == k->B_ || v == k->B2 || v == k->rpf || ex_input_pos(c, v) < 0) return -1;
  em_dtype dt = ex_V(c, v)->dtype;
  return dt == EM_BF16 || dt == EM_F16 ? v : -1;
}

/* Value u's index at this thread's (m, column text col) from the input behind it (the linearized text), or NULL. */
static const char *prefetch_at(ectx *c, const ex_ctr *k, int u, const ivec *mi, const char *col, int *pos) {
  ex_ctr_anchor(c, k, 0, "0.0f", NULL, mi, col);
  ivec ix = prefetch_index(c, u);
  int v = prefetch_source(c, k, u, &ix);
  if (v < 0) return NULL;
  *pos = ex_input_pos(c, v);
  return ex_linearize(c, &ix, ex_S(c, v));
}

static void ctr_split_columns(ectx *c, const ex_ctr *k, const char *col, const char *col1);

/* 1 when index text s names j only as a fragment column's offset modulo the head width D ("(j * 8 + (lane & 3) * 2)
 * % DLL", the pair's second "... + 1) % DLL": ex_split_tile's remainder of a span that D divides); an index name
 * (ex_idx_name's memo) is read through to its text. */
static int column_mod_only(ectx *c, const char *s, int D, int depth) {
  const char *pat[2] = {"(j * 8 + (lane & 3) * 2) %% %dLL", "(j * 8 + (lane & 3) * 2 + 1) %% %dLL"};
  char p[2][64];
  for (int e = 0; e < 2; e++) snprintf(p[e], sizeof p[e], pat[e], D);
  for (const char *x = s; *x; x++) {
    int skip = 0;
    for (int e = 0; e < 2 && !skip; e++)
      if (!strncmp(x, p[e], strlen(p[e]))) skip = (int)strlen(p[e]);
    if (skip) {
      x += skip - 1;
      continue;
    }
    if (!(isalnum((unsigned char)*x) || *x == '_') || (x > s && (isalnum((unsigned char)x[-1]) || x[-1] == '_'))) continue;
    size_t w = 0;
    while (isalnum((unsigned char)x[w]) || x[w] == '_') w++;
    if (w == 1 && *x == 'j') return 0;
    for (int i = c->memo.n - 1; i >= 0; i--) /* an index name: its text */
      if (c->memo.v[i].v == -1 && strlen(c->memo.v[i].var) == w && !strncmp(c->memo.v[i].var, x, w)) {
        if (depth > 8 || !column_mod_only(c, c->memo.v[i].key, D, depth + 1)) return 0;
        break;
      }
    x += w - 1;
  }
  return 1;
}

/* Value u's pair indices at this thread's split columns (prefetch_pair's text) repeat every head of width D: the
 * epilogue may read column group j's from j % (D / 8). */
static int prefetch_repeats(ectx *c, const ex_ctr *k, int u, int D) {
  int mark = c->memo.n, ok = D > 0 && D % 8 == 0 && k->BN / k->WN % D == 0;
  size_t n0 = c->out->n; /* (a probe: the index names it would declare are taken back) */
  ivec mi = ex_unravel(c, "m", &k->mdims);
  ctr_split_columns(c, k, "n", "(n + 1)");
  for (int e = 0; e < 2 && ok; e++) {
    int pos;
    const char *ix = prefetch_at(c, k, u, &mi, e ? "(n + 1)" : "n", &pos);
    ok = ix && column_mod_only(c, ix, D, 0);
  }
  c->memo.n = mark;
  c->out->n = n0;
  c->out->s[n0] = 0;
  return ok;
}

void ex_ctr_prefetch(ectx *c, ex_ctr *k) {
  int mark = c->memo.n;
  k->npf = 0, k->pfp = k->FN;
  ivec mi = ex_unravel(c, "m", &k->mdims);
  ex_ctr_anchor(c, k, 0, "0.0f", NULL, &mi, "n");
  for (int i = 0; i < c->g->nodes.n && k->npf < 2; i++) {
    const em_node *nd = &c->g->nodes.v[i];
    if (!c->al[nd->out].rank || (nd->op != EM_OP_MUL && nd->op != EM_OP_ADD)) continue;
    for (int a = 0; a < 2 && k->npf < 2; a++) {
      int u = nd->args[a].is_tensor ? nd->args[a].tensor : -1, seen = 0;
      if (u < 0 || c->bij[u]) continue;
      for (int t = 0; t < k->npf; t++) seen |= k->pfv[t] == u;
      ivec ix = prefetch_index(c, u);
      if (!seen && prefetch_source(c, k, u, &ix) >= 0) k->pfv[k->npf++] = u;
    }
  }
  c->memo.n = mark;
  if (k->FN <= 16 || !k->npf) return;
  /* (two more registers a column group each: a 128 x 256 tile's 32 groups would spill, so above 16 only the
   * values that repeat every head, loaded for the first head's groups) */
  int D = ex_ctr_stage_width(c, k), ok = D > 0 && D / 8 <= 8;
  for (int t = 0; t < k->npf && ok; t++) ok = prefetch_repeats(c, k, k->pfv[t], D);
  if (ok) k->pfp = D / 8;
  else k->npf = 0;
}

/* A fragment's column (index text col: the lane's column of group j, plus the C text extra) as the warp's first column
 * (a multiple of its span BN / WN) plus the lane's offset in it (ex_split_tile), so that a view's split of a column by
 * the head width folds to the offset (EMMY_TILE_SPLIT=0 leaves it out: docs/formats.md). */
static void ctr_split_column(ectx *c, const ex_ctr *k, const char *col, const char *extra) {
  ex_split_tile(c, col, ex_A(c, "%s + wn * %d", k->n0 ? k->n0 : "n0", k->BN / k->WN), k->BN / k->WN,
                ex_A(c, "j * 8 + (lane & 3) * 2%s", extra));
}

/* A fragment pair's two columns, col and col1 = col + 1 (ctr_split_column). */
static void ctr_split_columns(ectx *c, const ex_ctr *k, const char *col, const char *col1) {
  ctr_split_column(c, k, col, "");
  ctr_split_column(c, k, col1, " + 1");
}

/* Value u's column pair at this thread's (m, n), (m, n + 1) into em_pf<t>[j][q / 2], from the input behind it: one
 * 4-byte load where the two indices are adjacent and the first even, else two. */
static void prefetch_pair(ectx *c, const ex_ctr *k, int u, int t, const ivec *mi) {
  int p = 0;
  const char *a = prefetch_at(c, k, u, mi, "n", &p), *b = prefetch_at(c, k, u, mi, "(n + 1)", &p);
  ex_line(c, "{");
  ex_line(c, "  const long long em_a = %s, em_b = %s;", a, b);
  ex_line(c, "  em_pf%d[j][q >> 1] = !(m < M && n < N) ? 0u : em_b == em_a + 1 && !(em_a & 1) ? *reinterpret_cast<const unsigned *>(in%d + em_a)", t, p);
  ex_line(c, "      : (unsigned)in%d[em_a] | ((unsigned)in%d[em_b] << 16);", p, p);
  ex_line(c, "}");
}

void ex_ctr_residual_load(ectx *c, const ex_ctr *k, int jlo, int jhi) {
  int v = k->rpf, mark = c->memo.n;
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int j = %d; j < %d; j++) {", jlo, jhi);
  if (k->jkeep) ex_line(c, "  if (!(%s)) continue;", k->jkeep);
  ex_line(c, "  #pragma unroll");
  ex_line(c, "  for (int q = 0; q < 4; q += 2) {");
  c->indent += 2;
  ex_line(c, "const long long m = m0 + wm * %d + (lane >> 2) + (q >> 1) * 8, n = n0 + wn * %d + j * 8 + (lane & 3) * 2;", k->BM / k->WM,
          k->BN / k->WN);
  ctr_split_columns(c, k, "n", "(n + 1)");
  ivec mi = ex_unravel(c, "m", &k->mdims);
  if (v >= 0) {
    ex_ctr_anchor(c, k, 0, "0.0f", NULL, &mi, "n");
    const char *ix = ex_linearize(c, &c->al[v], ex_S(c, v));
    ex_line(c, "em_pf[j][q >> 1] = m < M && n < N ? *reinterpret_cast<const unsigned *>(in%d + (%s)) : 0u;", ex_input_pos(c, v), ix);
  }
  if (k->npf && k->pfp < k->FN) ex_line(c, "if (j < %d) { /* (the first head's column groups: the others repeat them) */", k->pfp);
  for (int t = 0; t < k->npf; t++) prefetch_pair(c, k, k->pfv[t], t + 1, &mi);
  if (k->npf && k->pfp < k->FN) ex_line(c, "}");
  c->indent -= 2;
  ex_line(c, "  }");
  ex_line(c, "}");
  c->memo.n = mark;
}

/* 1 when the current alignment reads value v at the anchored result's own index (a residual served from registers). */
int ex_ctr_at_own_index(ectx *c, const ex_ctr *k, int v) { return ex_ctr_at_index_of(c, k, v, -1); }

int ex_ctr_at_index_of(ectx *c, const ex_ctr *k, int v, int t) {
  int a = t >= 0 ? t : k->sib[0];
  if (t >= 0 && !c->bij[t]) return 0;
  if (v < 0 || !c->bij[v] || c->al[v].rank != c->al[a].rank) return 0;
  for (int i = 0; i < c->al[v].rank; i++)
    if (strcmp(c->al[v].e[i], c->al[a].e[i])) return 0;
  return 1;
}

/* The residual loaded ahead at this pair element (e = 0: the low half of em_pf[j][q / 2]), where the alignment reads
 * it at the result's own index (else the epilogue loads it itself). */
static void residual_seed(ectx *c, const ex_ctr *k, int e) {
  int v = k->rpf;
  if (!ex_ctr_at_own_index(c, k, v)) return;
  const char *half = e ? "(unsigned short)(em_pf[j][q >> 1] >> 16)" : "(unsigned short)em_pf[j][q >> 1]";
  ex_memo_seed(c, v, &c->al[v], ex_load_conv(c, ex_V(c, v)->dtype, half));
}

/* The other inputs loaded ahead (ex_ctr_prefetch), at the pair element's own aligned index. */
static void prefetch_seed(ectx *c, const ex_ctr *k, int e) {
  for (int t = 0; t < k->npf; t++) {
    int v = k->pfv[t];
    ivec ix = prefetch_index(c, v);
    if (!ix.rank) continue;
    const char *j = k->pfp < k->FN ? ex_A(c, "j %% %d", k->pfp) : "j";
    const char *half = ex_A(c, e ? "(unsigned short)(em_pf%d[%s][q >> 1] >> 16)" : "(unsigned short)em_pf%d[%s][q >> 1]", t + 1, j);
    ex_memo_seed(c, v, &ix, ex_load_conv(c, ex_V(c, v)->dtype, half));
  }
}

/* One element of an accumulator pair (e = 0: column n, 1: n + 1): the anchors' values (em_r/em_r2, em_s/em_s2),
 * aligned at the domain index, every aligned output's store recorded in cap. Returns the outputs recorded. */
static int ctr_pair_element(ectx *c, const ex_ctr *k, const ivec *mi, int e, ex_cap *cap) {
  const char *nv = e ? "n1" : "n", *acc[2] = {e ? "acc[i][j][q + 1]" : "acc[i][j][q]", e ? "acc2[i][j][q + 1]" : "acc2[i][j][q]"};
  const char *vars[2] = {e ? "em_s" : "em_r", e ? "em_s2" : "em_r2"};
  int na = k->dual ? 2 : 1;
  c->stage_own_n = nv, c->stage_own_q = e ? "q + 1" : "q";
  for (int s = 0; s < na; s++)
    ex_line(c, "const %s %s = %s;", ex_ctype(ex_V(c, k->sib[k->s0 + s])->dtype), vars[s], ex_ctr_result(c, k->sib[k->s0 + s], acc[s], nv));
  ex_ctr_anchor(c, k, k->s0, vars[0], k->dual ? vars[1] : NULL, mi, nv);
  residual_seed(c, k, e);
  prefetch_seed(c, k, e);
  int which[EX_MAX_OUTS] = {0}, n = ex_aligned_outputs(c, which);
  c->cap = cap;
  ex_write_outputs(c, which, n);
  c->cap = NULL;
  return n;
}

/* Rows [B, S] with a symbolic S (RoPE's head-local reads, an output in attention's [B, H, S, D] layout): each of the
 * thread's rows split into batch and position once, before the element loops (em_mq, em_mr: registers once
 * unrolled). Split in the loop, each element divided again: the guard's continue keeps the compiler from sharing a
 * row's division among its columns (TinyLlama's q: 32 64-bit divisions a thread; Qwen3's k+v at batch 8: 32 a
 * tile). Returns the block's start in the text, or -1 where it does not apply (the loop splits m);
 * ctr_row_split_end drops the block where the loop never read it. */
static long ctr_row_split(ectx *c, const ex_ctr *k) {
  const em_shape *md = &k->mdims;
  int64_t v;
  if (!k->mma || md->rank != 2 || em_dim_is_const(&md->d[1], &v)) return -1;
  long start = (long)c->out->n;
  const char *dm = ex_dim_c(c, &md->d[1]);
  ex_line(c, "long long em_mq[%d][2], em_mr[%d][2];", k->FM, k->FM);
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int i = 0; i < %d; i++) {", k->FM);
  ex_line(c, "  #pragma unroll");
  ex_line(c, "  for (int h = 0; h < 2; h++) {");
  ex_line(c, "    const long long m = m0 + wm * %d + i * 16 + (lane >> 2) + h * 8;", k->BM / k->WM);
  ex_line(c, "    em_mq[i][h] = (m) / %s, em_mr[i][h] = (m) - em_mq[i][h] * %s;", dm, dm);
  ex_line(c, "  }");
  ex_line(c, "}");
  c->row_split_end = (long)c->out->n;
  return start;
}

/* After the element loops: ctr_row_split's block (from start) cut out where nothing after it reads em_mq or em_mr
 * (every index folded back to the flat row: the text is what it was without the split). */
static void ctr_row_split_end(ectx *c, long start) {
  if (start < 0 || c->failed) return;
  sbuf *b = c->out;
  size_t end = (size_t)c->row_split_end;
  b->s[b->n] = 0;
  if (strstr(b->s + end, "em_mq[") || strstr(b->s + end, "em_mr[")) return;
  memmove(b->s + start, b->s + end, b->n - end + 1);
  b->n -= end - (size_t)start;
}

/* Row m of the element loop split into its parts: ctr_row_split's where it ran, else in the loop. */
static ivec ctr_row_parts(ectx *c, const ex_ctr *k, long split) {
  if (split >= 0) ex_split_known(c, "m", &k->mdims.d[1], "em_mq[i][q >> 1]", "em_mr[i][q >> 1]");
  return ex_unravel(c, "m", &k->mdims);
}

/* The pair stores: each output's two elements (index a and b, columns n and n + 1) as one store of twice the
 * width where b == a + 1 and a is even (checked where it runs: a view may split the columns), else two. */
static void ctr_pair_stores(ectx *c, const ex_cap *a, const ex_cap *b) {
  for (int t = 0; t < a->n; t++) {
    int p = a->pos[t];
    em_dtype dt = ex_V(c, c->g->outputs.v[p])->dtype;
    const char *two = em_dtype_bytes(dt) == 2 ? ex_A(c, "*reinterpret_cast<unsigned *>(out%d + (%s)) = %s;", p, a->ix[t],
                                                   ex_store_pair(c, a->val[t], b->val[t]))
                      : dt == EM_F32   ? ex_A(c, "*reinterpret_cast<float2 *>(out%d + (%s)) = make_float2(%s, %s);", p, a->ix[t],
                                              a->val[t], b->val[t])
                                       : NULL;
    if (two) { /* (EMMY_TILE_SPLIT: the difference and the parity in parts the compiler folds) */
      const char *adjacent = ex_tile_split() ? ex_A(c, "(%s) == 1", ex_index_diff(c, b->ix[t], a->ix[t]))
                                             : ex_A(c, "(%s) == (%s) + 1", b->ix[t], a->ix[t]);
      ex_line(c, "if (%s && ((%s) & 1) == 0) %s", adjacent, ex_index_low(c, a->ix[t]), two);
      ex_line(c, "else out%d[%s] = %s, out%d[%s] = %s;", p, a->ix[t], a->val[t], p, b->ix[t], b->val[t]);
    } else {
      ex_line(c, "out%d[%s] = %s, out%d[%s] = %s;", p, a->ix[t], a->val[t], p, b->ix[t], b->val[t]);
    }
  }
}

/* The body of a fragment-pair loop (m, n this pair's row and first column): the guard, both elements through the
 * fused ops, their stores recorded in a and b (the caller emits them). Returns the outputs recorded for each, -1
 * where the two elements' counts differ; the alignment is left at element n + 1. */
static int ctr_pair_values(ectx *c, const ex_ctr *k, long split, ex_cap *a, ex_cap *b) {
  ex_line(c, "if (m >= M || n >= N) continue;");
  ex_line(c, "const long long n1 = n + 1;");
  ctr_split_columns(c, k, "n", "n1");
  ivec mi = ctr_row_parts(c, k, split);
  int na = ctr_pair_element(c, k, &mi, 0, a), nb = ctr_pair_element(c, k, &mi, 1, b);
  c->stage_own_n = c->stage_own_q = NULL;
  return nb == na ? na : -1;
}

/* The fragment pairs' loops (m, n: the pair's row and first column, n in sibling k->s0's columns from k->n0): each
 * pair through the fused ops and its stores. Returns the outputs each pair writes. */
static int ctr_pairs_loop(ectx *c, const ex_ctr *k, long split) {
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int i = 0; i < %d; i++) {", k->FM);
  ex_line(c, "  #pragma unroll");
  ex_line(c, "  for (int j = 0; j < %d; j++) {", k->FN);
  if (k->jkeep) ex_line(c, "    if (!(%s)) continue;", k->jkeep);
  ex_line(c, "    #pragma unroll");
  ex_line(c, "    for (int q = 0; q < 4; q += 2) {");
  c->indent += 3;
  ex_line(c, "const long long m = m0 + wm * %d + i * 16 + (lane >> 2) + (q >> 1) * 8, n = %s + wn * %d + j * 8 + (lane & 3) * 2;",
          k->BM / k->WM, k->n0 ? k->n0 : "n0", k->BN / k->WN);
  ex_cap a = {0}, b = {0};
  int na = ctr_pair_values(c, k, split, &a, &b);
  for (int t = 0; t < a.n && !c->failed; t++)
    if (a.pos[t] != b.pos[t]) ex_fail(c, "the pair's stores differ in their outputs");
  if (!c->failed) ctr_pair_stores(c, &a, &b);
  c->indent -= 3;
  ex_line(c, "    }");
  ex_line(c, "  }");
  ex_line(c, "}");
  return na;
}

ex_ctr ex_ctr_sibling(ectx *c, const ex_ctr *k, int j) {
  if (j == k->nsib - 1) ex_line(c, "} else {");
  else ex_line(c, "%sif (n0 < %lldLL) {", j ? "} else " : "", (long long)k->sibOff[j + 1]);
  ex_ctr kj = *k;
  kj.s0 = j;
  kj.n0 = ex_A(c, "(n0 - %lldLL)", (long long)k->sibOff[j]);
  return kj;
}

/* Merged siblings on the persistent pipeline (PERSIST=1 checks that BN divides every width): a tile lies in one
 * sibling's columns, so the branch is taken once a tile, on n0, and each sibling's fragment pairs go through its own
 * fused ops to its own outputs as a linear of its own would (its columns counted from its first). */
static int ctr_concat_pairs(ectx *c, const ex_ctr *k) {
  for (int j = 0; j < k->nsib; j++)
    if (k->sibN[j] % 2) return 0;
  long split = ctr_row_split(c, k);
  int n = 0;
  for (int j = 0; j < k->nsib && !c->failed; j++) {
    ex_ctr kj = ex_ctr_sibling(c, k, j);
    c->indent++;
    int mark = c->memo.n; /* (a sibling's values do not outlive its branch) */
    n += ctr_pairs_loop(c, &kj, split);
    c->memo.n = mark;
    c->indent--;
  }
  ex_line(c, "}");
  if (n != c->g->outputs.n) ex_fail(c, "an output of the merged siblings is not aligned with its result");
  ctr_row_split_end(c, split);
  return 1;
}

/* The tensor-core fragment epilogue in pairs: each thread's accumulator elements q and q + 1 are columns n and
 * n + 1 of one row, so both go through the fused ops and each output gets one store of both where its index
 * allows (the element loop's 2-byte stores touched eight rows a warp instruction, twice as many). One linear or a
 * dual pair with a constant even N (n + 1 < N wherever n < N). Returns 0 where it does not apply. */
static int ctr_fragment_pairs(ectx *c, const ex_ctr *k) {
  int64_t nc = 0;
  if (k->concat && k->persist) return ctr_concat_pairs(c, k);
  if (!k->mma || k->concat || (!k->dual && k->nsib != 1) || !em_dim_is_const(&k->os->d[k->r - 1], &nc) || nc % 2) return 0;
  long split = ctr_row_split(c, k);
  if (ctr_pairs_loop(c, k, split) != c->g->outputs.n) ex_fail(c, "an output of the contraction is not aligned with its result");
  ctr_row_split_end(c, split);
  return 1;
}

static void ctr_fragment_outputs(ectx *c, const ex_ctr *k) {
  const int mma = k->mma, BM = k->BM, BN = k->BN, WM = k->WM, WN = k->WN, TM = k->TM, TN = k->TN, FM = k->FM, FN = k->FN;
  const int dual = k->dual, concat = k->concat, nsib = k->nsib, *sib = k->sib;
  const int64_t *sibOff = k->sibOff;
  /* epilogue: every accumulator element (m, n) of this thread */
  const char *accel = mma ? "acc[i][j][q]" : "acc[i][j]";
  long split = ctr_row_split(c, k);
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int i = 0; i < %d; i++) {", mma ? FM : TM);
  c->indent++;
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int j = 0; j < %d; j++) {", mma ? FN : TN);
  c->indent++;
  if (k->jkeep) ex_line(c, "if (!(%s)) continue;", k->jkeep);
  if (mma) {
    ex_line(c, "#pragma unroll");
    ex_line(c, "for (int q = 0; q < 4; q++) {");
    c->indent++;
    ex_line(c, "const long long m = m0 + wm * %d + i * 16 + (lane >> 2) + (q >> 1) * 8, n = n0 + wn * %d + j * 8 + (lane & 3) * 2 + (q & 1);",
         BM / WM, BN / WN);
    ctr_split_column(c, k, "n", " + (q & 1)");
  } else {
    ex_line(c, "const long long m = m0 + tr * %d + i, n = n0 + tc * %d + j;", TM, TN);
  }
  ex_line(c, "if (m >= M || n >= N) continue;");
  ivec mi = ctr_row_parts(c, k, split);
  int written[EX_MAX_OUTS] = {0}, nwritten = 0;
  if (mma) c->stage_own_n = "n", c->stage_own_q = "q";
  if (dual) {
    /* both accumulators at (m, n): the anchors' values, then every output aligned with them */
    const char *accel2 = mma ? "acc2[i][j][q]" : "acc2[i][j]";
    const char *vals2[2] = {accel, accel2};
    const char *vars[2] = {"em_r", "em_r2"};
    for (int j = 0; j < 2; j++)
      ex_line(c, "const %s %s = %s;", ex_ctype(ex_V(c, sib[j])->dtype), vars[j], ex_ctr_result(c, sib[j], vals2[j], "n"));
    ex_ctr_anchor(c, k, 0, "em_r", "em_r2", &mi, "n");
    int which[EX_MAX_OUTS] = {0}, n = ex_aligned_outputs(c, which);
    for (int q = 0; q < n; q++) written[which[q]] = 1;
    nwritten = n;
    ex_write_outputs(c, which, n);
  }
  for (int j = 0; j < nsib && !c->failed && !dual; j++) {
    const char *nl = "n";
    if (concat) {
      ex_line(c, "%sif (n < %lldLL) {", j ? "} else " : "", (long long)sibOff[j + 1]);
      c->indent++;
      ex_line(c, "const long long nl = n - %lldLL;", (long long)sibOff[j]);
      nl = "nl";
    }
    int m2 = c->memo.n;
    ex_line(c, "const %s em_r = %s;", ex_ctype(ex_V(c, sib[j])->dtype), ex_ctr_result(c, sib[j], accel, nl));
    ex_ctr_anchor(c, k, j, "em_r", NULL, &mi, nl);
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
  c->stage_own_n = c->stage_own_q = NULL;
  if (nwritten != c->g->outputs.n) ex_fail(c, "an output of the contraction is not aligned with its result");
  if (mma) {
    c->indent--;
    ex_line(c, "}");
  }
  c->indent--;
  ex_line(c, "}");
  c->indent--;
  ex_line(c, "}");
  ctr_row_split_end(c, split);
}

/* EPI_SMEM=7: the fragment pairs of columns [jlo·8, jhi·8) of the tile through the fused ops (ctr_pair_element: a
 * residual from em_pf, loaded ahead), each pair's one output packed into the staging buffer em_ep0 (64-column panels
 * of BM rows, panel bytes apart, in the 128-byte swizzle; column hcol of the tile at the buffer's column 0) for the
 * caller's TMA store. The output must be written at the result's own index, or with at >= 0 at the heads view's (checked
 * here: the TMA box is the tile's rows and columns of it, or a head's of them). Rows and columns past the tensor are
 * not staged (TMA does not write them). */
void ex_ctr_pairs_staged(ectx *c, const ex_ctr *k, int jlo, int jhi, int hcol, int panel, int at) {
  int mark = c->memo.n; /* (the values computed in this loop do not outlive it) */
  long split = ctr_row_split(c, k);
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int j = %d; j < %d; j++) {", jlo, jhi);
  ex_line(c, "  #pragma unroll");
  ex_line(c, "  for (int q = 0; q < 4; q += 2) {");
  c->indent += 2;
  ex_line(c, "const int i = 0, ml = wm * 16 + (lane >> 2) + (q >> 1) * 8, nl = j * 8 + (lane & 3) * 2, nh = nl - %d;", hcol);
  ex_line(c, "const long long m = m0 + ml, n = n0 + nl;");
  ex_cap a = {0}, b = {0};
  int na = ctr_pair_values(c, k, split, &a, &b);
  if (na != 1 || !ex_ctr_at_index_of(c, k, c->g->outputs.v[0], at))
    ex_fail(c, at < 0 ? "EPI_SMEM=7 stages one output written at the result's own index"
                      : "EPI_SMEM=7 into heads stages one output written at the heads view's own index");
  ex_line(c, "*reinterpret_cast<unsigned *>(em_ep0 + em_swz((unsigned)(nh >> 6) * %du, ml, nh & 63) + (nh & 7) * 2) = %s;",
          panel, c->failed ? "0u" : ex_store_pair(c, a.val[0], b.val[0]));
  c->indent -= 2;
  ex_line(c, "  }");
  ex_line(c, "}");
  ctr_row_split_end(c, split);
  c->memo.n = mark;
}

void ex_ctr_epilogue(ectx *c, const ex_ctr *k, em_launch *L) {
  if (k->SK > 1) split_reduce(c, k->SK, k->FM, k->FN, k->threads, k->dual);
  if (ctr_stage_tile(c, k, L)) return;
  if (ctr_fragment_pairs(c, k)) return;
  ctr_fragment_outputs(c, k);
}
