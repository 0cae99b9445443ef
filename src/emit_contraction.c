/* emit_contraction.c — the contraction templates of the emitter: the scalar tier (a TM x TN register tile per
 * thread) and the warp tier (mma.sync m16n8k16 from ldmatrix fragments, cp.async copies into a STAGES ring),
 * with folded RMSNorm prologues, merged siblings and dual accumulators; each ends in the epilogue parts of
 * emit_ctr_epilogue.c (ex_ctr_epilogue). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctr_legal.h"
#include "emit_gemm_ws.h"
#include "emit_impl.h"

/* Where a tile step reads its operands: padded arrays As/Bs/Bs2 indexed by a ring slot st ("[st]" or ""), or
 * (swz) the shared addresses a, b, b2 of 128-byte-swizzled tiles staged by TMA. */
typedef struct {
  int swz;
  const char *st;        /* padded: the ring-slot subscript */
  const char *a, *b, *b2; /* swizzled: this stage's tile addresses */
} tile_src;

/* ldmatrix.x4 of operand `which` (0 A, 1 B, 2 B2) at (row, col) of its tile into dst. */
static const char *ldsm(ectx *c, const tile_src *s, int which, const char *dst, const char *row, const char *col) {
  if (s->swz) return ex_A(c, "em_ldsm_x4s(%s, em_swz(%s, %s, %s));", dst, which == 0 ? s->a : which == 1 ? s->b : s->b2, row, col);
  return ex_A(c, "em_ldsm_x4(%s, &%s%s[%s][%s]);", dst, which == 0 ? "As" : which == 1 ? "Bs" : "Bs2", s->st, row, col);
}

/* One shared-memory tile's worth of warp-tier math: for each 16-deep K slice, A fragments (ldmatrix) for the
 * warp's FM row blocks, B fragments two n-blocks at a time, then FM x FN mma.sync into acc (and acc2 for a
 * dual kernel). */
static void mma_tile_step(ectx *c, const tile_src *s, int BK, int FM, int FN, int WTM, int WTN, int dual, const char *mt) {
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int kk = 0; kk < %d; kk += 16) {", BK);
  ex_line(c, "  unsigned af[%d][4], bf[%d][2];", FM, FN);
  if (dual) ex_line(c, "  unsigned bf2[%d][2];", FN);
  ex_line(c, "  #pragma unroll");
  ex_line(c, "  for (int i = 0; i < %d; i++)", FM);
  ex_line(c, "    %s", ldsm(c, s, 0, "af[i]", ex_A(c, "wm * %d + i * 16 + (lane & 15)", WTM), "kk + (lane >> 4) * 8"));
  ex_line(c, "  #pragma unroll");
  ex_line(c, "  for (int j = 0; j < %d; j += 2) {", FN);
  ex_line(c, "    unsigned t4[4];");
  for (int b = 0; b < (dual ? 2 : 1); b++) {
    const char *frag = b ? "bf2" : "bf";
    ex_line(c, "    %s", ldsm(c, s, b + 1, "t4", ex_A(c, "wn * %d + j * 8 + (lane >> 4) * 8 + (lane & 7)", WTN), "kk + ((lane >> 3) & 1) * 8"));
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

/* The wgmma of one k16 step into accumulator acc (acc[j][q], n/8 x 4 f32): A from shared memory (adesc, a
 * descriptor expression) or from registers (areg, four 32-bit registers' text), B by descriptor, N-major when
 * tnsp; scale_d is the C expression whose non-zero value keeps the accumulator. */
/* The wgmma instruction; with off (ex_wgmma_insn_at), the descriptors' offsets (16-byte units) are added inside the
 * asm block, so that the compiler keeps only the base descriptors live (not one 64-bit value a k16 step). */
static void wgmma_insn(ectx *c, int n, const char *mt, const char *acc, const char *acc_hi, const char *adesc, const char *areg,
                       const char *bdesc, const char *scale_d, int tnsp, const long *off) {
  int nreg = n / 2, half = acc_hi ? nreg / 2 : nreg;
  sbuf regs = {0}, ops = {0}, adds = {0};
  for (int i = 0; i < nreg; i++) ex_sb_add(&regs, "%s%%%d", i ? ", " : "", i);
  for (int i = 0; i < nreg; i++)
    ex_sb_add(&ops, "%s\"+f\"(%s[%d][%d])", i ? ", " : "", i < half ? acc : acc_hi, (i % half) / 4, i % 4);
  /* (a 64-bit add: adding to the low word alone, through mov.b64 {lo, hi}, left the d128 leads' spills as they were
   * without the offsets, NVRTC 13.0; a zero offset adds nothing) */
  const char *da = areg ? NULL : ex_A(c, "%%%d", nreg), *db = ex_A(c, "%%%d", nreg + (areg ? 4 : 1));
  for (int i = areg ? 1 : 0; off && i < 2; i++) {
    if (!off[i]) continue;
    const char *nm = i ? "db" : "da";
    ex_sb_add(&adds, " .reg .b64 %s; add.s64 %s, %s, %ld;", nm, nm, i ? db : da, off[i]);
    if (i) db = nm;
    else da = nm;
  }
  if (areg)
    ex_line(c, "asm volatile(\"{ .reg .pred p;%s setp.ne.b32 p, %%%d, 0; wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s {%s}, "
               "{%%%d, %%%d, %%%d, %%%d}, %s, p, 1, 1, %d; }\"",
            adds.s ? adds.s : "", nreg + 5, n, mt, mt, regs.s, nreg, nreg + 1, nreg + 2, nreg + 3, db, tnsp);
  else
    ex_line(c, "asm volatile(\"{ .reg .pred p;%s setp.ne.b32 p, %%%d, 0; wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s {%s}, "
               "%s, %s, p, 1, 1, 0, %d; }\"",
            adds.s ? adds.s : "", nreg + 2, n, mt, mt, regs.s, da, db, tnsp);
  ex_line(c, "             : %s", ops.s);
  if (areg)
    ex_line(c, "             : %s, \"l\"(%s), \"r\"(%s));", areg, bdesc, scale_d);
  else
    ex_line(c, "             : \"l\"(%s), \"l\"(%s), \"r\"(%s));", adesc, bdesc, scale_d);
  free(regs.s);
  free(ops.s);
  free(adds.s);
}
void ex_wgmma_insn(ectx *c, int n, const char *mt, const char *acc, const char *acc_hi, const char *adesc, const char *areg,
                   const char *bdesc, const char *scale_d, int tnsp) {
  wgmma_insn(c, n, mt, acc, acc_hi, adesc, areg, bdesc, scale_d, tnsp, NULL);
}
void ex_wgmma_insn_at(ectx *c, int n, const char *mt, const char *acc, const char *adesc, long aoff, const char *areg,
                      const char *bdesc, long boff, const char *scale_d, int tnsp) {
  const long off[2] = {aoff, boff};
  wgmma_insn(c, n, mt, acc, NULL, adesc, areg, bdesc, scale_d, tnsp, off);
}

/* The WGMMA tier's step over one TMA stage (BK=64): each warpgroup (4 warps, 64 rows of A) issues four
 * wgmma.mma_async m64nBNk16 (A and B from shared-memory descriptors of the 128-byte-swizzled K-major tiles,
 * advanced 32 bytes per k16) and commits them; with wait0 it waits for them (WG_WAIT=0), else the caller keeps
 * one group in flight (WG_WAIT=1: wgmma.wait_group 1 after the next group is issued). The accumulator layout
 * per warp is mma.sync's m16n8 C fragment repeated over BN/8 column blocks, so acc[0][j][q] (WM = BM/16 warps,
 * WN = 1) and the shared epilogue apply unchanged. */
void ex_wgmma_step(ectx *c, const char *aS, const char *bS, const char *b2S, int BN, int dual, const char *mt, int wait0,
                   const char *scale_d) {
  ex_line(c, "em_wg_fence();");
  ex_line(c, "{");
  c->indent++;
  ex_line(c, "const unsigned em_wa = %s + (unsigned)(wid >> 2) * 8192u;", aS); /* this warpgroup's 64 rows of A */
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int kk = 0; kk < 4; kk++) {");
  c->indent++;
  if (dual == 2) /* DUAL_WIDE=1: both weight tiles adjacent, one instruction of N = 2·BN (acc's columns, then acc2's) */
    ex_wgmma_insn(c, 2 * BN, mt, "acc[0]", "acc2[0]", "em_wg_desc(em_wa + kk * 32)", NULL, ex_A(c, "em_wg_desc(%s + kk * 32)", bS),
                  scale_d, 0);
  else
    for (int b = 0; b < (dual ? 2 : 1); b++)
      ex_wgmma_insn(c, BN, mt, b ? "acc2[0]" : "acc[0]", NULL, "em_wg_desc(em_wa + kk * 32)", NULL,
                    ex_A(c, "em_wg_desc(%s + kk * 32)", b ? b2S : bS), scale_d, 0);
  c->indent--;
  ex_line(c, "}");
  c->indent--;
  ex_line(c, "}");
  ex_line(c, "em_wg_commit();");
  if (wait0) ex_line(c, "em_wg_wait0();");
}

/* The K tiles of this block: all of them, or with SPLIT_K=S slice blockIdx.z of S (kt0.., nk of them). */
static void split_range(ectx *c, int SK, int BK) {
  if (SK == 1) {
    ex_line(c, "const int nk = (int)((K + %d - 1) / %d);", BK, BK);
    return;
  }
  ex_line(c, "const int em_nkt = (int)((K + %d - 1) / %d), em_per = (em_nkt + %d) / %d, kt0 = (int)blockIdx.z * em_per;", BK, BK,
          SK - 1, SK);
  ex_line(c, "const int nk = max(0, min(em_nkt, kt0 + em_per) - kt0);");
}

void ex_ctr_b_at(const ex_ctr *k, int stages, int b, long long *base, long long *stride) {
  const long long abytes = 128LL * k->BM, bbytes = 128LL * k->BN;
  if (k->wide) *base = stages * abytes + b * bbytes, *stride = 2 * bbytes;
  else *base = stages * (abytes + b * bbytes), *stride = bbytes;
}

const char *ex_ctr_b_stage(ectx *c, const ex_ctr *k, int stages, int b) {
  long long base, stride;
  ex_ctr_b_at(k, stages, b, &base, &stride);
  return ex_A(c, "(em_sb + %lldu + st * %lldu)", base, stride);
}

/* The B tile loads of a stage (em_load's second half; each line indented for its block): merged siblings' from the
 * weight their n0 falls in, a dual pair's two, else one. half (CLUSTER=2's pair of tile rows sharing B): each CTA
 * loads its half of every B tile (em_cr's) and multicasts it into both CTAs' rings at the same offset. */
void ex_ctr_tma_load_b(ectx *c, const ex_ctr *k, int stages, const char *ktx, int half) {
  const long long abytes = 128LL * k->BM, bbytes = 128LL * k->BN;
  const char *fn = half ? "em_tma_2d_mc" : "em_tma_2d", *dst = half ? ex_A(c, " + em_cr * %lldu", bbytes / 2) : "",
             *col = half ? ex_A(c, " + (int)em_cr * %d", k->BN / 2) : "", *mask = half ? ", (unsigned short)3" : "";
  if (k->concat)
    for (int j = 0; j < k->nsib; j++)
      ex_line(c, "    %sif (n0 < %lldLL) %s(em_sb + %lldu + st * %lldu%s, &tm%d, %s * 64, (int)(n0 - %lldLL)%s, &em_bar[st]%s);",
              j ? "else " : "", (long long)k->sibOff[j + 1], fn, stages * abytes, bbytes, dst, 1 + j, ktx,
              (long long)k->sibOff[j], col, mask);
  else
    for (int b = 0; b < (k->dual ? 2 : 1); b++) {
      long long base, stride;
      ex_ctr_b_at(k, stages, b, &base, &stride);
      ex_line(c, "    %s(em_sb + %lldu + st * %lldu%s, &tm%d, %s * 64, (int)n0%s, &em_bar[st]%s);", fn, base, stride, dst, 1 + b,
              ktx, col, mask);
    }
}

void ex_ctr_tma_load(ectx *c, const ex_ctr *k, int stages, int CL, int WS, const char *ktx) {
  const int BM = k->BM, dual = k->dual;
  const long long abytes = 128LL * BM, bbytes = 128LL * k->BN;
  ex_line(c, "auto em_load = [&](int st, int kt) {");
  ex_line(c, WS ? "  {" : "  if (tid == 0) {"); /* (WS: only the producer's lane calls it) */
  if (CL > 1) {
    /* the stage's previous tile retired in both CTAs (its release (kt/S - 1)), then this CTA's half of A to both */
    ex_line(c, "    if (kt >= %d) em_mbar_wait(&em_empty[st], (unsigned)(kt / %d - 1) & 1u);", stages, stages);
    ex_line(c, "    em_mbar_expect(&em_bar[st], %lldu);", abytes + bbytes * (dual ? 2 : 1));
    ex_line(c, "    em_tma_2d_mc(em_sb + st * %lldu + em_cr * %lldu, &tm0, %s * 64, (int)m0 + (int)em_cr * %d, &em_bar[st], (unsigned short)%d);",
            abytes, abytes / CL, ktx, BM / CL, (1 << CL) - 1);
  } else {
    ex_line(c, "    em_mbar_expect(&em_bar[st], %lldu);", abytes + bbytes * (dual ? 2 : 1));
    ex_line(c, "    em_tma_2d(em_sb + st * %lldu, &tm0, %s * 64, (int)m0, &em_bar[st]);", abytes, ktx);
  }
  ex_ctr_tma_load_b(c, k, stages, ktx, 0);
  ex_line(c, "  }");
  ex_line(c, "};");
}

/* Prologue row reductions (a folded RMSNorm, SPLIT_CONE=0): one warp per row of the block before the K loop, each
 * row's result in shared memory (c->pre_v, c->pre_arr) for the operand fill. */
static void ctr_prologue(ectx *c, const ex_ctr *k) {
  const int BM = k->BM, threads = k->threads;
  /* prologue row reductions (a folded RMSNorm): one warp per row of the block, before the K loop */
  for (int i = 0; i < c->g->nodes.n && !c->failed; i++) {
    const em_node *rn = &c->g->nodes.v[i];
    if (!ex_ctr_is_prologue_reduction(k, rn)) continue; /* (one reading the result is the epilogue's) */
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
}

/* The TMA ring's main loop (TMA=1): barriers, the ring's first loads, and per K tile the wait for its stage, the
 * math (wgmma or mma.sync on the swizzled tile) and the refill — one role, PRODUCER=1's producer warpgroup, or
 * CLUSTER=2's pairs along N. */
static void ctr_tma_mainloop(ectx *c, const ex_ctr *k, const char *ktx) {
  const int BM = k->BM, BN = k->BN, WM = k->WM, WN = k->WN, FM = k->FM, FN = k->FN;
  const int threads = k->threads, dual = k->dual;
  const int SK = k->SK, stages = k->stages, CL = k->CL, WS = k->WS, wgt = k->wgt, wgw = k->wgw;
  const char *mma_t = k->mma_t;
  long long abytes = 128LL * BM;
  split_range(c, SK, 64);
  ex_line(c, "if (tid == 0) {");
  ex_line(c, "  for (int s = 0; s < %d; s++) em_mbar_init(&em_bar[s], 1);", stages);
  /* the empty barriers' arrivals: each CTA of the cluster, or each consumer warp under the producer */
  if (CL > 1 || WS) ex_line(c, "  for (int s = 0; s < %d; s++) em_mbar_init(&em_empty[s], %d);", stages, CL > 1 ? CL : threads / 32);
  ex_line(c, "  em_mbar_fence_init();");
  ex_line(c, "}");
  /* (a cluster: the peer's multicast and arrivals may only reach barriers that are initialised) */
  if (CL > 1) ex_line(c, "em_cluster_sync();");
  else ex_line(c, "__syncthreads();");
  if (CL > 1) ex_line(c, "const unsigned em_cr = em_cluster_rank();");
  /* one stage: A rows m0.., B rows n0.. (and B2), K columns kt*64.., all on the stage's barrier */
  ex_ctr_tma_load(c, k, stages, CL, WS, ktx);
  /* CLUSTER: the refill of a stage waits for the peer's release, which crosses SMs (hundreds of cycles); so the
   * stage released at step kt-1 is refilled CD steps later, when the peer's release has long arrived (measured
   * with CD=1: every k-step ~400 cycles longer than unclustered, H200); the ring is filled whole first and
   * runs STAGES-CD steps ahead */
  int CD = CL > 1 ? (stages / 2 > 1 ? stages / 2 : 1) : 1;
  if (WS) {
    /* the producer: every k-step's tile once its stage's previous tile is released (release kt/S - 1) */
    ex_line(c, "if (wid >= %d) {", threads / 32);
    ex_line(c, "  if (wid == %d && lane == 0)", threads / 32);
    ex_line(c, "    for (int kt = 0; kt < nk; kt++) {");
    ex_line(c, "      if (kt >= %d) em_mbar_wait(&em_empty[kt %% %d], (unsigned)(kt / %d - 1) & 1u);", stages, stages, stages);
    ex_line(c, "      em_load(kt %% %d, kt);", stages);
    ex_line(c, "    }");
    ex_line(c, "  return;");
    ex_line(c, "}");
  }
  for (int st = 0; st < (WS ? 0 : stages - (CL > 1 ? 0 : 1)); st++)
    ex_line(c, "if (%d < nk) em_load(%d, %d);", st, st, st);
  /* WG_WAIT=1 (wgmma, 2+ stages): the group of step kt is still running while step kt+1 waits for its tile; the
   * stage of step kt-1 is refilled once every warpgroup's wait_group 1 has retired kt-1's group */
  int inflight = wgt && stages > 1 && wgw == 1;
  ex_line(c, "for (int kt = 0; kt < nk; kt++) {");
  c->indent++;
  ex_line(c, "const int st = kt %% %d;", stages);
  if (stages == 1) ex_line(c, "em_load(0, kt);");
  ex_line(c, "em_mbar_wait(&em_bar[st], (unsigned)(kt / %d) & 1u);", stages);
  if (!inflight) {
    /* every thread is past the previous step, so its stage may be refilled */
    ex_line(c, "__syncthreads();");
    if (stages > 1) ex_line(c, "if (kt + %d < nk) em_load((kt + %d) %% %d, kt + %d);", stages - 1, stages - 1, stages, stages - 1);
  }
  const char *aS = ex_A(c, "(em_sb + st * %lldu)", abytes);
  const char *bS = ex_ctr_b_stage(c, k, stages, 0), *b2S = ex_ctr_b_stage(c, k, stages, 1);
  if (wgt) {
    ex_wgmma_step(c, aS, bS, b2S, BN, k->wide ? 2 : dual, mma_t, !inflight, "1");
  } else {
    tile_src ts = {1, "", aS, bS, b2S};
    mma_tile_step(c, &ts, 64, FM, FN, BM / WM, BN / WN, dual, mma_t);
  }
  if (inflight && WS) {
    /* kt-1's group retired in this warp: its stage is released by every consumer warp (no block barrier) */
    ex_line(c, "em_wg_wait1();");
    ex_line(c, "if (kt >= 1 && lane == 0) asm volatile(\"mbarrier.arrive.shared::cta.b64 _, [%%0];\" :: \"r\"(em_smem(&em_empty[(kt - 1) %% %d])) : \"memory\");",
            stages);
  } else if (inflight) {
    ex_line(c, "em_wg_wait1();");
    ex_line(c, "__syncthreads();");
    /* CLUSTER: step kt-1's stage is free here; both CTAs release it (their refills multicast into each other) */
    if (CL > 1) {
      ex_line(c, "if (tid == 0 && kt >= 1 && kt + %d < nk) for (unsigned q = 0; q < %du; q++) em_mbar_arrive_cluster(&em_empty[(kt - 1) %% %d], q);",
              stages - 1, CL, stages);
      ex_line(c, "if (kt >= %d && kt + %d < nk) em_load((kt - %d) %% %d, kt + %d);", CD, stages - CD, CD, stages, stages - CD);
    } else {
      ex_line(c, "if (kt + %d < nk) em_load((kt + %d) %% %d, kt + %d);", stages - 1, stages - 1, stages, stages - 1);
    }
  }
  if (stages == 1) ex_line(c, "__syncthreads();");
  c->indent--;
  ex_line(c, "}");
  if (inflight) ex_line(c, "em_wg_wait0();");
  if (CL > 1) ex_line(c, "em_cluster_sync(); /* no arrival or multicast may reach a CTA that has left */");
}

/* The cp.async ring's main loop (ASYNC=1): STAGES-1 tiles in flight, one cp.async group a tile. */
static void ctr_async_mainloop(ectx *c, const ex_ctr *k, const char *ktx) {
  const int BM = k->BM, BN = k->BN, BK = k->BK, WM = k->WM, WN = k->WN, FM = k->FM, FN = k->FN;
  const int threads = k->threads, dual = k->dual, nsib = k->nsib, SK = k->SK, stages = k->stages;
  const int A_ = k->A_, B_ = k->B_, B2 = k->B2, *sib = k->sib;
  const int64_t *sibOff = k->sibOff;
  const char *mma_t = k->mma_t;
  int ap = ex_input_pos(c, A_);
  split_range(c, SK, BK);
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
    if (SK > 1) ex_line(c, "if (%d < nk) em_load(%d, (long long)(kt0 + %d) * %d);", st, st, st, BK);
    else ex_line(c, "if (%d < nk) em_load(%d, %dLL);", st, st, st * BK);
    ex_line(c, "em_cp_commit();");
  }
  ex_line(c, "for (int kt = 0; kt < nk; kt++) {");
  c->indent++;
  ex_line(c, "const int st = kt %% %d;", stages);
  if (stages == 1) {
    ex_line(c, "em_load(0, (long long)%s * %d);", ktx, BK);
    ex_line(c, "em_cp_commit();");
  }
  ex_line(c, "em_cp_wait<%d>();", stages > 1 ? stages - 2 : 0);
  ex_line(c, "__syncthreads();");
  if (stages > 1) {
    ex_line(c, "if (kt + %d < nk) em_load((kt + %d) %% %d, (long long)(%skt + %d) * %d);", stages - 1, stages - 1, stages,
            SK > 1 ? "kt0 + " : "", stages - 1, BK);
    ex_line(c, "em_cp_commit();");
  }
  tile_src ts = {0, "[st]", NULL, NULL, NULL};
  mma_tile_step(c, &ts, BK, FM, FN, BM / WM, BN / WN, dual, mma_t);
  if (stages == 1) ex_line(c, "__syncthreads();");
  c->indent--;
  ex_line(c, "}");
  ex_line(c, "em_cp_wait<0>();");
}

/* The element fill of the A tile at k0: element (m, k) of the left operand through ex_val (a view, a folded
 * prologue; on a matmul the batch index broadcast into A's shape), zero past M or K, into As[m][k] as bf16/f16 on
 * the warp tier or As[k][m] as float on the scalar tier. */
static void ctr_fill_a(ectx *c, const ex_ctr *k) {
  const int BM = k->BM, BK = k->BK, r = k->r;
  const em_shape *as = ex_S(c, k->A_);
  int mark = c->memo.n;
  ex_line(c, "for (int e = tid; e < %d; e += %d) {", BM * BK, k->threads);
  c->indent++;
  ex_line(c, "const int mm = e / %d, kk = e %% %d;", BK, BK);
  ex_line(c, "const long long m = m0 + mm, k = k0 + kk;");
  ex_line(c, "float av = 0.0f;");
  ex_line(c, "if (m < M && k < K) {");
  c->indent++;
  ivec mi = ex_unravel(c, "m", &k->mdims), ai = {as->rank};
  em_shape outm = *k->os;
  if (k->lin_op) {
    for (int i = 0; i < as->rank - 1; i++) ai.e[i] = mi.e[i];
  } else {
    ivec full = {r};
    for (int i = 0; i < k->bdims.rank; i++) full.e[i] = k->bz.e[i];
    full.e[r - 2] = "m";
    full.e[r - 1] = "0LL";
    ivec bb = ex_bcast(c, &full, &outm, as);
    for (int i = 0; i < as->rank - 1; i++) ai.e[i] = bb.e[i];
    ai.e[as->rank - 2] = "m";
  }
  ai.e[as->rank - 1] = "k";
  ex_line(c, "av = (float)%s;", ex_val(c, k->A_, &ai));
  c->memo.n = mark;
  c->indent--;
  ex_line(c, "}");
  if (k->mma) ex_line(c, "As[mm][kk] = %s;", k->opdt == EM_F16 ? "em_f2h(av)" : "em_f2bf(av)");
  else ex_line(c, "As[kk][mm] = av;");
  c->indent--;
  ex_line(c, "}");
}

/* The element fill of the B tile at k0: element (n, k) of the right operand (weight [N, K] for a linear, each
 * merged sibling's columns from its own weight; [.., K, N] with the batch index broadcast otherwise) and of the
 * dual's second weight, zero past N or K, into Bs (Bs2) in the layout of As. */
static void ctr_fill_b(ectx *c, const ex_ctr *k) {
  const int BN = k->BN, BK = k->BK, r = k->r, dual = k->dual, lin_op = k->lin_op, concat = k->concat, mma = k->mma;
  const em_shape *bs = ex_S(c, k->B_);
  int mark = c->memo.n;
  ex_line(c, "for (int e = tid; e < %d; e += %d) {", BN * BK, k->threads);
  c->indent++;
  ex_line(c, "const int nn = e / %d, kk = e %% %d;", BK, BK);
  ex_line(c, "const long long n = n0 + nn, k = k0 + kk;");
  ex_line(c, dual ? "float bv = 0.0f, bv2 = 0.0f;" : "float bv = 0.0f;");
  ex_line(c, "if (n < N && k < K) {");
  c->indent++;
  ivec bi = {bs->rank};
  if (dual) {
    ivec b2 = {2, {"n", "k"}};
    ex_line(c, "bv2 = (float)%s;", ex_val(c, k->B2, &b2));
  }
  if (lin_op && concat) {
    for (int j = 0; j < k->nsib; j++) {
      const em_node *sn = &c->g->nodes.v[ex_V(c, k->sib[j])->node];
      if (j < k->nsib - 1) ex_line(c, "%sif (n < %lldLL) {", j ? "} else " : "", (long long)k->sibOff[j + 1]);
      else ex_line(c, "} else {");
      c->indent++;
      int m2 = c->memo.n;
      ivec bj = {2, {ex_A(c, "(n - %lldLL)", (long long)k->sibOff[j]), "k"}};
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
    for (int i = 0; i < k->bdims.rank; i++) full.e[i] = k->bz.e[i];
    full.e[r - 2] = "0LL";
    full.e[r - 1] = "n";
    ivec bb = ex_bcast(c, &full, k->os, bs);
    for (int i = 0; i < bs->rank; i++) bi.e[i] = bb.e[i];
    bi.e[bs->rank - 2] = "k";
    bi.e[bs->rank - 1] = "n";
  }
  if (!(lin_op && concat)) ex_line(c, "bv = (float)%s;", ex_val(c, k->B_, &bi));
  c->memo.n = mark;
  c->indent--;
  ex_line(c, "}");
  if (mma) ex_line(c, "Bs[nn][kk] = %s;", k->opdt == EM_F16 ? "em_f2h(bv)" : "em_f2bf(bv)");
  else ex_line(c, "Bs[kk][nn] = bv;");
  if (dual && mma) ex_line(c, "Bs2[nn][kk] = %s;", k->opdt == EM_F16 ? "em_f2h(bv2)" : "em_f2bf(bv2)");
  else if (dual) ex_line(c, "Bs2[kk][nn] = bv2;");
  c->indent--;
  ex_line(c, "}");
}

/* The scalar tier's step over a filled tile: per kk of BK, a column of TM A values and a row of TN B values in
 * registers, their outer product added to acc (and, for a dual pair, Bs2's row to acc2). */
static void ctr_scalar_step(ectx *c, const ex_ctr *k) {
  const int TM = k->TM, TN = k->TN;
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int kk = 0; kk < %d; kk++) {", k->BK);
  ex_line(c, "  float ar[%d], br[%d];", TM, TN);
  ex_line(c, "  #pragma unroll");
  ex_line(c, "  for (int i = 0; i < %d; i++) ar[i] = As[kk][tr * %d + i];", TM, TM);
  ex_line(c, "  #pragma unroll");
  ex_line(c, "  for (int j = 0; j < %d; j++) br[j] = Bs[kk][tc * %d + j];", TN, TN);
  ex_line(c, "  #pragma unroll");
  ex_line(c, "  for (int i = 0; i < %d; i++)", TM);
  ex_line(c, "    #pragma unroll");
  ex_line(c, "    for (int j = 0; j < %d; j++) acc[i][j] += ar[i] * br[j];", TN);
  if (k->dual) {
    ex_line(c, "  #pragma unroll");
    ex_line(c, "  for (int j = 0; j < %d; j++) br[j] = Bs2[kk][tc * %d + j];", TN, TN);
    ex_line(c, "  #pragma unroll");
    ex_line(c, "  for (int i = 0; i < %d; i++)", TM);
    ex_line(c, "    #pragma unroll");
    ex_line(c, "    for (int j = 0; j < %d; j++) acc2[i][j] += ar[i] * br[j];", TN);
  }
  ex_line(c, "}");
}

/* The element-fill main loop: per BK-deep step k0 (split-K: within this block's slice of K tiles), the A and B
 * tiles filled element by element through ex_val (views, a folded prologue) into shared memory, then the
 * mma.sync step or the scalar step, between block barriers. */
static void ctr_fill_mainloop(ectx *c, const ex_ctr *k) {
  const int BK = k->BK;
  if (k->SK > 1) {
    split_range(c, k->SK, BK);
    ex_line(c, "for (long long k0 = (long long)kt0 * %d; k0 < K && k0 < (long long)(kt0 + nk) * %d; k0 += %d) {", BK, BK, BK);
  } else {
    ex_line(c, "for (long long k0 = 0; k0 < K; k0 += %d) {", BK);
  }
  c->indent++;
  ctr_fill_a(c, k);
  ctr_fill_b(c, k);
  ex_line(c, "__syncthreads();");
  if (k->mma) {
    tile_src ts = {0, "", NULL, NULL, NULL};
    mma_tile_step(c, &ts, BK, k->FM, k->FN, k->BM / k->WM, k->BN / k->WN, k->dual, k->mma_t);
  } else {
    ctr_scalar_step(c, k);
  }
  ex_line(c, "__syncthreads();");
  c->indent--;
  ex_line(c, "}");
}

/* The tier and its tile into k: MMA, BM, BN, BK, TM, TN, WM, WN, ASYNC, STAGES, WGMMA, WG_WAIT and PAD_SMEM (read
 * in this order), the anchor and its operands' dtype, the block's threads and a warp's FM x FN fragments. Fails c
 * and returns non-zero for operands the tier does not take or a block outside 32..1024 threads (the tile's shape
 * against its tier is the legality table's, ctr_legal.c). */
static int ctr_tier(ectx *c, ex_ctr *k) {
  k->mma = EX_KNOB(c, MMA);
  k->BM = EX_KNOB(c, BM), k->BN = EX_KNOB(c, BN);
  k->BK = EX_KNOB(c, BK), k->TM = EX_KNOB(c, TM), k->TN = EX_KNOB(c, TN);
  k->WM = EX_KNOB(c, WM), k->WN = EX_KNOB(c, WN);
  k->async = EX_KNOB(c, ASYNC), k->stages = EX_KNOB(c, STAGES);
  k->wgt = EX_KNOB(c, WGMMA), k->wgw = EX_KNOB(c, WG_WAIT);
  /* PAD_SMEM: bf16 elements added to each tile row (8 keeps ldmatrix rows on distinct banks; 0 packs them) */
  k->pad = EX_KNOB(c, PAD_SMEM);
  const int BM = k->BM, BN = k->BN, TM = k->TM, TN = k->TN, WM = k->WM, WN = k->WN;
  if (k->pad % 8 || k->pad < 0) {
    ex_fail(c, "PAD_SMEM=%d must be a non-negative multiple of 8 (16-byte rows)", k->pad);
    return 1;
  }
  k->a = c->t->anchor;
  k->opdt = ex_V(c, k->a)->dtype;
  k->mma_t = k->opdt == EM_F16 ? "f16" : "bf16";
  if (k->mma && k->opdt != EM_BF16 && k->opdt != EM_F16) {
    ex_fail(c, "MMA=1 needs bf16/f16 operands, got %s", em_dtype_name(k->opdt));
    return 1;
  }
  k->threads = k->mma ? 32 * WM * WN : (BM / TM) * (BN / TN);
  if (k->threads > 1024 || k->threads < 32) {
    ex_fail(c, "%d threads is outside 32..1024", k->threads);
    return 1;
  }
  k->FM = BM / WM / 16, k->FN = BN / WN / 8;
  return 0;
}

/* The operands and the result's layout into k: the anchor's operands A and B (and K, A's last dim), the linears
 * that share its tile (merged siblings side by side along N, or DUAL_GATE's pair with the second weight B2), and
 * the result's M and batch dims. Fails c and returns non-zero for a shape no template covers. */
static int ctr_operands(ectx *c, ex_ctr *k) {
  const em_node *an = &c->g->nodes.v[ex_V(c, k->a)->node];
  const em_shape *os = k->os = ex_S(c, k->a);
  int lin_op = k->lin_op = an->op == EM_OP_LINEAR;
  int A_ = k->A_ = an->args[0].tensor;
  k->B_ = an->args[1].tensor;
  const em_shape *as = ex_S(c, A_), *bs = ex_S(c, k->B_);
  if (!lin_op && (as->rank < 2 || bs->rank < 2)) {
    ex_fail(c, "matmul with a 1-d operand has no contraction emission");
    return 1;
  }
  /* merged siblings (MERGE_SIBLINGS=1): linears of the kernel reading the same operand, N side by side */
  int *sib = k->sib, nsib = 0;
  int64_t *sibN = k->sibN, *sibOff = k->sibOff;
  if (lin_op)
    for (int i = 0; i < c->g->nodes.n && nsib < 4; i++) {
      const em_node *sn = &c->g->nodes.v[i];
      if (sn->op == EM_OP_LINEAR && sn->args[0].tensor == A_) {
        const em_shape *ws = ex_S(c, sn->args[1].tensor);
        if (!em_dim_is_const(&ws->d[0], &sibN[nsib])) {
          ex_fail(c, "merged siblings need constant output widths");
          return 1;
        }
        sib[nsib] = sn->out;
        sibOff[nsib + 1] = sibOff[nsib] + sibN[nsib];
        nsib++;
      }
    }
  if (nsib == 0) {
    sib[0] = k->a;
    nsib = 1;
  }
  k->nsib = nsib;
  /* DUAL_GATE=1: two siblings of equal width share the (m, n) tile with two accumulators (Bs2, acc2), so
   * the epilogue may combine them; otherwise several siblings are concatenated along N */
  const char *dmeta = em_graph_get_meta(c->g, "dual");
  int dual = k->dual = dmeta && dmeta[0] == '1' && nsib == 2 && sibN[0] == sibN[1];
  if (dmeta && dmeta[0] == '1' && !dual) {
    ex_fail(c, "a dual kernel needs two linears of equal width on one operand");
    return 1;
  }
  k->wide = EX_KNOB(c, DUAL_WIDE);
  k->concat = nsib > 1 && !dual;
  k->B2 = dual ? c->g->nodes.v[ex_V(c, sib[1])->node].args[1].tensor : -1;
  /* out = [batch..., M-dims..., N]; linear folds all leading dims into M, the others keep batch dims */
  int r = k->r = os->rank;
  if (lin_op)
    for (int i = 0; i < r - 1; i++) k->mdims.d[k->mdims.rank++] = os->d[i];
  else {
    for (int i = 0; i < r - 2; i++) k->bdims.d[k->bdims.rank++] = os->d[i];
    k->mdims.d[k->mdims.rank++] = os->d[r - 2];
  }
  k->Kd = &as->d[as->rank - 1];
  return 0;
}

/* The launch's shape: a block of k->threads, a grid of N tiles x M tiles x batch, and TMA and SPLIT_K into k.
 * SPLIT_K=S: grid z splits the K tiles in S slices; each block writes its partial accumulators to scratch and the
 * last block of an (m, n) tile (a counter) sums them in slice order, so the result is deterministic. Fails c and
 * returns non-zero where SPLIT_K > 1 is not over a linear. */
static int ctr_launch_shape(ectx *c, ex_ctr *k, em_launch *L) {
  const int BM = k->BM, BN = k->BN, r = k->r;
  L->block[0] = k->threads;
  if (k->concat) snprintf(L->grid[0], sizeof L->grid[0], "cdiv(%lld,%d)", (long long)k->sibOff[k->nsib], BN);
  else snprintf(L->grid[0], sizeof L->grid[0], "cdiv(%s,%d)", em_dim_format(&c->g->syms, &k->os->d[r - 1], (char[128]){0}, 128), BN);
  snprintf(L->grid[1], sizeof L->grid[1], "cdiv(%s,%d)", ex_numel_text(c, &k->mdims), BM);
  snprintf(L->grid[2], sizeof L->grid[2], "%s", k->bdims.rank ? ex_numel_text(c, &k->bdims) : "1");
  k->tma = EX_KNOB(c, TMA);
  if (k->wgt) c->extra_prelude = ex_TMA_PRELUDE;
  int SK = k->SK = EX_KNOB(c, SPLIT_K);
  if (SK > 1 && !k->lin_op) {
    ex_fail(c, "SPLIT_K=%d splits a linear's K (this contraction is a matmul)", SK);
    return 1;
  }
  if (SK > 1) {
    snprintf(L->grid[2], sizeof L->grid[2], "%d", SK);
    L->scratch_per_tile = 4LL * SK * k->FM * k->FN * 4 * (k->dual ? 2 : 1) * k->threads + 4;
  }
  return 0;
}

/* k->dep: which values read a linear's result (nodes are in order). A reduction among them is a head-local
 * epilogue reduction over the staged tile (NORM_EPI), not a prologue. The array is freed with the arena. */
static void ctr_epilogue_values(ectx *c, ex_ctr *k) {
  int *dep = em_alloc(sizeof(int) * (size_t)(c->g->values.n + 1));
  EM_VEC_PUSH(c->arena, (char *)dep); /* freed with the arena, on every way out */
  k->dep = dep;
  for (int i = 0; i < c->g->nodes.n; i++) {
    const em_node *nd = &c->g->nodes.v[i];
    const em_opspec *sp = em_op_spec(nd->op);
    int d = nd->op == EM_OP_LINEAR || nd->op == EM_OP_MM || nd->op == EM_OP_BMM || nd->op == EM_OP_MATMUL;
    for (int q = 0; q < sp->nargs && !d; q++) {
      const em_arg *ar = &nd->args[q];
      if (!ar->present) continue;
      if ((sp->args[q].kind == EM_ARG_T || sp->args[q].kind == EM_ARG_TOPT || (sp->args[q].kind == EM_ARG_TS && ar->is_tensor)) &&
          ar->tensor >= 0 && dep[ar->tensor])
        d = 1;
      if (sp->args[q].kind == EM_ARG_TLIST)
        for (int t = 0; t < ar->n; t++) d |= dep[ar->tlist[t]];
    }
    dep[nd->out] = d;
  }
}

/* The facts of the legality table (ctr_legal.h) from the resolved contraction: its siblings, the head-local
 * epilogue's metas and reductions, a constant K and N, the outputs a TMA-stored epilogue needs, and the prologue's
 * reductions. Reads no knob: em_emit_ctr_facts gives the same facts to the rules. */
static void ctr_facts(ectx *c, const ex_ctr *k, em_ctr_facts *f) {
  const char *stage = em_graph_get_meta(c->g, "stage"), *step = em_graph_get_meta(c->g, "stage_step");
  int64_t v = 0;
  int heads;
  memset(f, 0, sizeof *f);
  f->dual = k->dual;
  f->siblings = k->nsib;
  f->nwidths = k->lin_op ? (k->nsib < EM_CTR_MAX_WIDTHS ? k->nsib : EM_CTR_MAX_WIDTHS) : 0;
  for (int j = 0; j < f->nwidths; j++) f->widths[j] = k->sibN[j];
  f->stage = stage && atoi(stage) > 0 ? atoi(stage) : 0;
  f->stage_step = step ? atoi(step) : 1;
  f->head_reductions = ex_ctr_head_reductions(c, k);
  f->K = em_dim_is_const(k->Kd, &v) ? v : 0;
  f->N = em_dim_is_const(&k->os->d[k->r - 1], &v) ? v : 0;
  f->tma_fused = ws_tma_fused_output(c, k, &v, &heads) >= 0;
  f->tma_heads = f->tma_fused && heads >= 0;
  f->tma_store = ws_tma_store_output(c, k, &v) >= 0;
  f->prologue_reductions = ex_ctr_prologue_reductions(c, k);
}

/* ex_k_contraction's resolution up to its legality check, in a context of the table's default knobs (ctr_operands
 * reads DUAL_WIDE, which no fact depends on) that emits nothing. */
em_status em_emit_ctr_facts(const em_graph *g, int anchor, em_ctr_facts *f, char *err) {
  em_tile t = {.g = g, .kind = EM_K_CONTRACTION, .anchor = anchor, .name = "facts"};
  ectx c;
  ex_ctr K = {0};
  memset(&c, 0, sizeof c);
  memset(f, 0, sizeof *f);
  c.t = &t, c.g = g, c.anchor = anchor, c.xanchor = -1;
  for (int i = 0; i < EM_NKNOBS; i++) c.kv[i] = em_knob_table[i].def;
  K.rpf = -1, K.a = anchor;
  const em_value *av = anchor >= 0 && anchor < g->values.n ? ex_V(&c, anchor) : NULL;
  em_op op = av && av->kind == EM_V_NODE ? g->nodes.v[av->node].op : EM_NOPS;
  if (op != EM_OP_LINEAR && op != EM_OP_MM && op != EM_OP_BMM && op != EM_OP_MATMUL)
    ex_fail(&c, "the anchor is not a contraction");
  else if (!ctr_operands(&c, &K)) {
    ctr_epilogue_values(&c, &K);
    ctr_facts(&c, &K, f);
  }
  em_status st = c.failed ? em_fail(err, EM_EINPUT, "%s", c.err) : EM_OK;
  for (int i = 0; i < c.arena.n; i++) free(c.arena.v[i]);
  free(c.arena.v);
  return st;
}

/* The legality table's verdict on the knob plan (read as it is, not through EX_KNOB: the table reads every knob
 * and realizes none). Fails c with the table's reason and returns non-zero where a rule refuses it. */
static int ctr_legal(ectx *c, const ex_ctr *k) {
  em_ctr_facts f;
  char why[EM_ERR_MAX];
  ctr_facts(c, k, &f);
  if (!em_ctr_refusal(&f, c->kv, why)) return 0;
  ex_fail(c, "%s", why);
  return 1;
}

/* CLUSTER, PERSIST and PRODUCER into k, and PRODUCER=1's extra warpgroup in the block (their combinations are the
 * legality table's). Fails c and returns non-zero where a cluster outside the persistent pipeline is not over one
 * linear (or a dual pair) of a constant N.
 * CLUSTER=2 (wgmma on TMA tiles): the two CTAs of a cluster are neighbours along N with the same m0, so they
 * share the A tile; each loads half its rows and multicasts them into both CTAs' rings, halving A's L2 reads.
 * A stage is refilled only when both CTAs have retired its wgmma groups (an "empty" mbarrier per stage, one
 * arrival from each CTA), and neither leaves while the other may still signal its barriers.
 * PRODUCER=1 (warp specialization, wgmma on TMA tiles): one more warpgroup whose first lane only issues the TMA
 * loads — it waits on a stage's "empty" mbarrier (an arrival from every consumer warp once its wait_group has
 * retired the stage's wgmma group) and refills it; the consumer warpgroups only wait for full stages and issue
 * wgmma, with no block-wide barrier in the K loop. The producer leaves after its loop, so the epilogue may
 * have no block-wide barrier (no staged epilogue) and split-K's reduction is not offered. */
static int ctr_roles(ectx *c, ex_ctr *k, em_launch *L) {
  int CL = k->CL = EX_KNOB(c, CLUSTER), persist = k->persist = EX_KNOB(c, PERSIST);
  int64_t ncst = 0;
  /* (PERSIST=1 pairs its CTAs along M, any number of tiles) */
  if (CL != 1 && !persist && (!k->lin_op || !em_dim_is_const(&k->os->d[k->r - 1], &ncst))) {
    ex_fail(c, "CLUSTER=%d pairs the N tiles of one linear or a dual pair: a constant N", CL);
    return 1;
  }
  /* (the table's wgmma tile keeps the consumers at 256 threads or fewer) */
  if ((k->WS = EX_KNOB(c, PRODUCER))) L->block[0] = k->threads + 128;
  return 0;
}

/* TMA=1's launch: the ring's tiles come from cp.async.bulk.tensor (one thread issues them on the stage's
 * mbarrier), BK=64 rows of 128 bytes in the 128-byte swizzle; rows past M or N and columns past K arrive as zeros.
 * Sets the ring's dynamic shared memory (1024 bytes of alignment slack, then STAGES stages of A, B and B2 tiles),
 * the TMA prelude and a tensor map per operand (merged siblings: one per weight, each block's B tile from the weight
 * its n0 falls in: the table has BN divide every sibling's width, so a tile never straddles two). Fails c and
 * returns non-zero where the operands do not fit (the tile is the table's). */
static int ctr_tma_launch(ectx *c, const ex_ctr *k, em_launch *L) {
  const int BM = k->BM, BN = k->BN, dual = k->dual, concat = k->concat, nsib = k->nsib;
  const int *sib = k->sib;
  int64_t kc = 0;
  int a_in = ex_V(c, k->A_)->kind != EM_V_NODE;
  int b_in = ex_V(c, k->B_)->kind != EM_V_NODE && (!dual || ex_V(c, k->B2)->kind != EM_V_NODE);
  for (int j = 0; concat && j < nsib; j++) b_in &= ex_V(c, c->g->nodes.v[ex_V(c, sib[j])->node].args[1].tensor)->kind != EM_V_NODE;
  if (!k->lin_op || (concat && nsib > 3) || !a_in || !b_in || !em_dim_is_const(k->Kd, &kc) || kc % 8) {
    ex_fail(c, "TMA=1 needs a linear (or up to 3 merged siblings) whose operands are kernel inputs, K a multiple of 8");
    return 1;
  }
  em_ctr_smem S; /* (the ring: ctr_legal.c) */
  em_ctr_tma_smem(c->kv, dual, &S);
  L->smem = 1024 + S.ring;
  c->extra_prelude = ex_TMA_PRELUDE;
  L->ntmaps = concat ? 1 + nsib : dual ? 3 : 2;
  L->tmaps[0].input = ex_input_pos(c, k->A_);
  L->tmaps[0].box[0] = 64;
  L->tmaps[0].box[1] = BM / k->CL; /* (CLUSTER=2: each CTA loads half the rows) */
  L->tmaps[1].input = ex_input_pos(c, k->B_);
  L->tmaps[1].box[0] = 64;
  L->tmaps[1].box[1] = BN;
  if (dual) {
    L->tmaps[2].input = ex_input_pos(c, k->B2);
    L->tmaps[2].box[0] = 64;
    L->tmaps[2].box[1] = BN;
  }
  for (int j = 0; concat && j < nsib; j++) {
    L->tmaps[1 + j].input = ex_input_pos(c, c->g->nodes.v[ex_V(c, sib[j])->node].args[1].tensor);
    L->tmaps[1 + j].box[0] = 64;
    L->tmaps[1 + j].box[1] = BN;
  }
  return 0;
}

/* The bytes of one operand's cp.async ring (ASYNC=1 without TMA): STAGES tiles of rows x (BK + PAD_SMEM) bf16. */
static long long ring_bytes(const ex_ctr *k, int rows) { return 2LL * k->stages * rows * (k->BK + k->pad); }

/* ASYNC=1's launch (without TMA): operand rows are copied 16 bytes at a time with cp.async into a STAGES-deep
 * ring of tiles in dynamic shared memory (beyond 48 KB the launcher opts the function in), which needs operands
 * that are kernel inputs with a contiguous K (a multiple of 8; the tier and the ring's depth are the table's). Sets
 * the ring's bytes; fails c and returns non-zero otherwise. */
static int ctr_async_launch(ectx *c, const ex_ctr *k, em_launch *L) {
  int64_t kc = 0;
  int a_in = ex_V(c, k->A_)->kind != EM_V_NODE;
  int b_in = 1;
  for (int j = 0; j < k->nsib; j++) b_in &= ex_V(c, c->g->nodes.v[ex_V(c, k->sib[j])->node].args[1].tensor)->kind != EM_V_NODE;
  if (!k->lin_op || !a_in || !b_in || !em_dim_is_const(k->Kd, &kc) || kc % 8) {
    ex_fail(c, "ASYNC=1 needs a linear whose operands are kernel inputs, K a multiple of 8");
    return 1;
  }
  L->smem = ring_bytes(k, k->BM) + ring_bytes(k, k->BN) * (k->dual ? 2 : 1);
  return 0;
}

/* The block's shared tiles: TMA=1's 1024-aligned dynamic ring (em_dsm, its base em_sb) with a full mbarrier per
 * stage (and an empty one under CLUSTER=2 or PRODUCER=1); ASYNC=1's cp.async ring As/Bs(/Bs2)[STAGES] of padded
 * bf16 rows in dynamic shared memory; otherwise static As/Bs(/Bs2) tiles, padded bf16 [rows][BK] on the warp
 * tier and float [BK][rows + 1] on the scalar tier. */
static void ctr_shared_tiles(ectx *c, const ex_ctr *k) {
  const int BM = k->BM, BN = k->BN, BK = k->BK, pad = k->pad, stages = k->stages, dual = k->dual;
  if (k->tma) {
    ex_line(c, "extern __shared__ __align__(1024) unsigned char em_dsm[];");
    ex_line(c, "__shared__ __align__(8) unsigned long long em_bar[%d];", stages);
    if (k->CL > 1 || k->WS) ex_line(c, "__shared__ __align__(8) unsigned long long em_empty[%d];", stages);
    ex_line(c, "const unsigned em_sb = (em_smem(em_dsm) + 1023u) & ~1023u;");
  } else if (k->async) {
    int bkp = BK + pad;
    long long abytes = ring_bytes(k, BM), bbytes = ring_bytes(k, BN);
    ex_line(c, "extern __shared__ __align__(16) unsigned char em_dsm[];");
    ex_line(c, "unsigned short (*const As)[%d][%d] = reinterpret_cast<unsigned short (*)[%d][%d]>(em_dsm);", BM, bkp, BM, bkp);
    ex_line(c, "unsigned short (*const Bs)[%d][%d] = reinterpret_cast<unsigned short (*)[%d][%d]>(em_dsm + %lld);", BN, bkp, BN,
            bkp, abytes);
    if (dual)
      ex_line(c, "unsigned short (*const Bs2)[%d][%d] = reinterpret_cast<unsigned short (*)[%d][%d]>(em_dsm + %lld);", BN, bkp,
              BN, bkp, abytes + bbytes);
  } else if (k->mma) {
    ex_line(c, "__shared__ __align__(16) unsigned short As[%d][%d], Bs[%d][%d];", BM, BK + pad, BN, BK + pad);
    if (dual) ex_line(c, "__shared__ __align__(16) unsigned short Bs2[%d][%d];", BN, BK + pad);
  } else {
    ex_line(c, "__shared__ float As[%d][%d], Bs[%d][%d];", BK, BM + 1, BK, BN + 1);
    if (dual) ex_line(c, "__shared__ float Bs2[%d][%d];", BK, BN + 1);
  }
}

/* The block's place: the extents M, N, K and the tile origin m0, n0 with the batch (or split-K slice) bz. RASTER=1
 * takes the tile from blockIdx as it is; RASTER > 1 is the grouped order, where RASTER consecutive blocks walk down
 * RASTER tile rows before the next column, so the A rows and B columns they share stay in L2. */
static void ctr_tile_origin(ectx *c, const ex_ctr *k) {
  const int BM = k->BM, BN = k->BN;
  ex_line(c, "const long long M = %s, N = %s, K = %s;", ex_numel_c(c, &k->mdims),
       k->concat ? ex_A(c, "%lldLL", (long long)k->sibOff[k->nsib]) : ex_dim_c(c, &k->os->d[k->r - 1]), ex_dim_c(c, k->Kd));
  int raster = EX_KNOB(c, RASTER);
  if (raster > 1) {
    ex_line(c, "const int em_b = blockIdx.y * gridDim.x + blockIdx.x, em_first = em_b / (%d * gridDim.x) * %d;", raster, raster);
    ex_line(c, "const int em_gs = min((int)gridDim.y - em_first, %d), em_in = em_b %% (%d * gridDim.x);", raster, raster);
    ex_line(c, "const long long m0 = (long long)(em_first + em_in %% em_gs) * %d, n0 = (long long)(em_in / em_gs) * %d, bz = blockIdx.z;",
            BM, BN);
  } else {
    ex_line(c, "const long long m0 = (long long)blockIdx.y * %d, n0 = (long long)blockIdx.x * %d, bz = blockIdx.z;", BM, BN);
  }
}

/* The thread's place and its zeroed accumulators: on the warp tier its lane, warp and warp tile (wm, wn) and
 * acc[FM][FN][4] in mma.sync's C-fragment order; on the scalar tier its register tile (tr, tc) and acc[TM][TN]; a
 * dual pair has acc2 beside acc. */
static void ctr_accumulators(ectx *c, const ex_ctr *k) {
  const int FM = k->FM, FN = k->FN, TM = k->TM, TN = k->TN;
  if (k->mma) {
    ex_line(c, "const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5, wm = wid / %d, wn = wid %% %d;", k->WN, k->WN);
    ex_line(c, "float acc[%d][%d][4];", FM, FN);
    ex_line(c, "#pragma unroll");
    ex_line(c, "for (int i = 0; i < %d; i++)", FM);
    ex_line(c, "  for (int j = 0; j < %d; j++)", FN);
    ex_line(c, "    for (int q = 0; q < 4; q++) acc[i][j][q] = 0.0f;");
    if (k->dual) {
      ex_line(c, "float acc2[%d][%d][4];", FM, FN);
      ex_line(c, "for (int i = 0; i < %d; i++)", FM);
      ex_line(c, "  for (int j = 0; j < %d; j++)", FN);
      ex_line(c, "    for (int q = 0; q < 4; q++) acc2[i][j][q] = 0.0f;");
    }
  } else {
    ex_line(c, "const int tid = threadIdx.x, tr = tid / %d, tc = tid %% %d;", k->BN / TN, k->BN / TN);
    ex_line(c, "float acc[%d][%d];", TM, TN);
    ex_line(c, "#pragma unroll");
    ex_line(c, "for (int i = 0; i < %d; i++)", TM);
    ex_line(c, "  for (int j = 0; j < %d; j++) acc[i][j] = 0.0f;", TN);
    if (k->dual) {
      ex_line(c, "float acc2[%d][%d];", TM, TN);
      ex_line(c, "for (int i = 0; i < %d; i++)", TM);
      ex_line(c, "  for (int j = 0; j < %d; j++) acc2[i][j] = 0.0f;", TN);
    }
  }
}

/* Contractions. MMA=0: the scalar tier, a TM x TN register tile per thread over float tiles in shared
 * memory. MMA=1: the warp tier, WM x WN warps each computing a (BM/WM) x (BN/WN) tile with
 * mma.sync.m16n8k16 (bf16/f16 in, f32 accumulation) on fragments loaded by ldmatrix from bf16/f16 tiles.
 * Both fill the tiles element by element through the operand's expression (views, a folded RMSNorm,
 * merged siblings' weights), masked at M, N and K edges, and share one epilogue. ASYNC=1 and TMA=1 stage the
 * tiles in a ring instead; with TMA=1, PERSIST=1 hands the resolved contraction to emit_gemm_ws.c. */
void ex_k_contraction(ectx *c, em_launch *L) {
  ex_ctr K = {0};
  K.rpf = -1;
  if (ctr_tier(c, &K) || ctr_operands(c, &K)) return;
  ctr_epilogue_values(c, &K);
  if (ctr_legal(c, &K) || ctr_launch_shape(c, &K, L) || ctr_roles(c, &K, L)) return;
  if (K.tma ? ctr_tma_launch(c, &K, L) : K.async ? ctr_async_launch(c, &K, L) : 0) return;
  if (K.tma && K.persist) {
    ex_k_contraction_ws(c, &K, L);
    return;
  }
  ctr_shared_tiles(c, &K);
  ctr_tile_origin(c, &K);
  ctr_accumulators(c, &K);
  K.bz = ex_unravel(c, "bz", &K.bdims);
  const char *ktx = K.SK > 1 ? "(kt0 + kt)" : "kt";
  ctr_prologue(c, &K);
  if (K.tma) ctr_tma_mainloop(c, &K, ktx);
  else if (K.async) ctr_async_mainloop(c, &K, ktx);
  else ctr_fill_mainloop(c, &K);
  ex_ctr_epilogue(c, &K, L);
}
