/* emit_gemm_ws_epi.c — the persistent GEMM's tile epilogues (emit_gemm_ws.c drives them): the staged epilogue with
 * coalesced stores (EPI_SMEM=1, 2), the tile staged in halves of 64-column swizzled panels and stored by the threads
 * (3), by TMA (4), 16 bytes a thread with the residual's loads issued ahead (5), during the next tile's K loop (6), and
 * the fragments' fused values stored by TMA (7); the conditions of the TMA-stored ones and the staging buffers. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "emit_gemm_ws.h"

static void ws_staged_value(ectx *c, const ex_ctr *k, int s, const char *elem);
void ws_epilogue_tma_fused(ectx *c, const ex_ctr *k, int cw, int tmo, int heads);
static void ws_staged_outputs(ectx *c, const ex_ctr *k);

/* The staged epilogue (EPI_SMEM=1, 2), a tile's results through shared memory so that the stores are coalesced: each consumer
 * thread writes its fragments' values (the linear's result: bias added, rounded to its dtype) into a padded
 * BM x (BN + 8) tile (two for a dual kernel), then consecutive threads take consecutive columns through the fused
 * ops to the outputs. The fragment order's stores touched eight rows with 2-byte elements an instruction.
 * A named barrier of the consumer warps (1; the producer never joins) fences the tile on both sides. */
void ws_epilogue(ectx *c, const ex_ctr *k, int cw, int staged, int stageD) {
  int ld = k->BN + 8, nst = k->dual ? 2 : 1, threads = 32 * cw;
  ex_line(c, "asm volatile(\"bar.sync 1, %d;\" ::: \"memory\");", threads);
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int j = 0; j < %d; j++) {", k->FN);
  ex_line(c, "  #pragma unroll");
  ex_line(c, "  for (int q = 0; q < 4; q++) {");
  c->indent += 2;
  ex_line(c, "const int ml = wm * 16 + (lane >> 2) + (q >> 1) * 8, nl = j * 8 + (lane & 3) * 2 + (q & 1);");
  ex_line(c, "const long long n = n0 + nl;");
  for (int s = 0; s < nst; s++) {
    int mark = c->memo.n;
    em_dtype dt = ex_V(c, k->sib[s])->dtype;
    ex_line(c, "em_ep%d[ml * %d + nl] = %s;", s, ld,
            ex_store_conv(c, dt, ex_ctr_result(c, k->sib[s], s ? "acc2[0][j][q]" : "acc[0][j][q]", "n")));
    c->memo.n = mark;
  }
  c->indent -= 2;
  ex_line(c, "  }");
  ex_line(c, "}");
  ex_line(c, "asm volatile(\"bar.sync 1, %d;\" ::: \"memory\");", threads);
  /* a head-local epilogue (RoPE) reads the result at other columns of its head from the staged tile */
  if (stageD > 0) {
    for (int s = 0; s < nst; s++) c->stage_arr[s] = ex_A(c, "em_ep%d", s);
    c->stage_mdims = k->mdims;
    c->stage_ld = ld;
  }
  if (staged == 2) {
    /* EPI_SMEM=2: a constant trip count unrolled eight deep with the guard inside, so the loads of eight elements'
     * other inputs (a residual) are in flight together; EPI_SMEM=1's loop waits for each in turn */
    ex_line(c, "#pragma unroll 8");
    ex_line(c, "for (int em_i = 0; em_i < %d; em_i++) {", k->BM * k->BN / threads);
    c->indent++;
    ex_line(c, "const int em_e = tid + em_i * %d, ml = em_e / %d, nl = em_e %% %d;", threads, k->BN, k->BN);
    ex_line(c, "const long long m = m0 + ml, n = n0 + nl;");
    ex_line(c, "if (m < M && n < N) {");
    c->indent++;
  } else {
    ex_line(c, "for (int em_e = tid; em_e < %d; em_e += %d) {", k->BM * k->BN, threads);
    c->indent++;
    ex_line(c, "const int ml = em_e / %d, nl = em_e %% %d;", k->BN, k->BN);
    ex_line(c, "const long long m = m0 + ml, n = n0 + nl;");
    ex_line(c, "if (m >= M || n >= N) continue;");
  }
  for (int s = 0; s < nst; s++) ws_staged_value(c, k, s, ex_A(c, "em_ep%d[ml * %d + nl]", s, ld));
  ws_staged_outputs(c, k);
  c->stage_arr[0] = c->stage_arr[1] = NULL;
  if (staged == 2) {
    c->indent--;
    ex_line(c, "}");
  }
  c->indent--;
  ex_line(c, "}");
}

/* The stores of the chunk's output t (8 captured elements a->ix / a->val, e = 0..7): one 16-byte store (two for
 * f32) where the 8 indices are consecutive and the address 16-byte aligned, else one store an element. */
static void ws_chunk_write(ectx *c, const ex_cap *a, int t) {
  int p = a[0].pos[t];
  em_dtype dt = ex_V(c, c->g->outputs.v[p])->dtype;
  const char *ix0 = a[0].ix[t], *ix7 = a[7].ix[t];
  const char *val[8];
  for (int e = 0; e < 8; e++) val[e] = a[e].val[t];
  const char *one = ex_store_chunk(c, p, ix0, val, 8, dt);
  if (one) {
    ex_line(c, "if ((%s) == (%s) + 7 && ((unsigned long long)(out%d + (%s)) & 15) == 0) %s", ix7, ix0, p, ix0, one);
    ex_line(c, "else {");
    c->indent++;
  }
  for (int e = 0; e < 8; e++) ex_line(c, "out%d[%s] = %s;", p, a[e].ix[t], a[e].val[t]);
  if (one) {
    c->indent--;
    ex_line(c, "}");
  }
}

/* A residual (ex_ctr_residual: a 2-byte input read at the result's own index) for the chunk's 8 elements: one 16-byte
 * load (em_rq) where its 8 indices are consecutive and the address 16-byte aligned (em_rv), else each element loads
 * its own (ws_chunk_residual_seed). pre: WS_PRE_NONE loads it here; WS_PRE_LOAD only loads it into em_rqa<h>[ei] /
 * em_rva<h>[ei] (ws_chunk_prefetch: every chunk's load in flight at once, not one latency a chunk); WS_PRE_USE takes it
 * from there. Returns the residual, or -1. */
enum { WS_PRE_NONE, WS_PRE_LOAD, WS_PRE_USE };
static int ws_chunk_residual(ectx *c, const ex_ctr *k, const ivec *mi, int pre, const char *ei, int h) {
  int rv = ex_ctr_residual(c, k);
  if (rv < 0) return -1;
  const char *ix[2];
  for (int e = 0; e < 2; e++) {
    ex_ctr_anchor(c, k, 0, "0.0f", NULL, mi, e ? "em_n7" : "em_n0");
    if (!c->bij[rv]) return -1;
    ix[e] = ex_linearize(c, &c->al[rv], ex_S(c, rv));
  }
  int p = ex_input_pos(c, rv);
  const char *ok = ex_A(c, "(%s) == (%s) + 7 && ((unsigned long long)(in%d + (%s)) & 15) == 0", ix[1], ix[0], p, ix[0]);
  const char *ld = ex_A(c, "*reinterpret_cast<const uint4 *>(in%d + (%s))", p, ix[0]);
  if (pre == WS_PRE_LOAD) {
    ex_line(c, "em_rva%d[%s] = %s;", h, ei, ok);
    ex_line(c, "if (em_rva%d[%s]) em_rqa%d[%s] = %s;", h, ei, h, ei, ld);
  } else if (pre == WS_PRE_USE) {
    ex_line(c, "const bool em_rv = em_rva%d[%s];", h, ei);
    ex_line(c, "const uint4 em_rq = em_rqa%d[%s];", h, ei);
  } else {
    ex_line(c, "const bool em_rv = %s;", ok);
    ex_line(c, "const uint4 em_rq = em_rv ? %s : make_uint4(0u, 0u, 0u, 0u);", ld);
  }
  return rv;
}

/* Element e's residual (rv, ws_chunk_residual) served from em_rq where the alignment reads it at the result's own
 * index, else loaded by the element itself. */
static void ws_chunk_residual_seed(ectx *c, const ex_ctr *k, int rv, int e) {
  if (!ex_ctr_at_own_index(c, k, rv)) return;
  em_dtype dt = ex_V(c, rv)->dtype;
  const char *ix = ex_linearize(c, &c->al[rv], ex_S(c, rv));
  const char *reg = ex_load_conv(c, dt, ex_A(c, "(unsigned short)(em_rq.%c%s)", "xyzw"[e / 2], e & 1 ? " >> 16" : ""));
  const char *own = ex_load_conv(c, dt, ex_A(c, "in%d[%s]", ex_input_pos(c, rv), ix));
  ex_memo_seed(c, rv, &c->al[rv], ex_A(c, "(em_rv ? %s : %s)", reg, own));
}

static void ws_chunk(ectx *c, const ex_ctr *k, const ws_part *pt, const char *ei, const char *m0v, const char *n0v, int pre);

/* EPI_SMEM=5: the staged half stored 16 bytes a thread. Consecutive threads take consecutive 8-column chunks of the
 * half (one 16-byte read of the swizzled panel an accumulator), each of the 8 elements goes through the fused ops,
 * and each output gets one 16-byte store of them (ws_chunk_write); a residual comes in one 16-byte load
 * (ws_chunk_residual). EPI_SMEM=3 stored 2 bytes a thread and the
 * fragment epilogue (0) 4 bytes a thread over eight rows an instruction: at 128 x 256 its stores kept the LSU
 * busy ~10,700 cycles a tile against the K loop's ~15,500 (ncu's long-scoreboard stalls on the stores' sources). */
void ws_chunk_slot(ectx *c, const ex_ctr *k, const ws_part *pt, const char *ei);

void ws_chunk_stores(ectx *c, const ex_ctr *k, const ws_part *pt, int pre) {
  int nch = k->BM * (pt->half / 8) / pt->threads;
  ex_line(c, pre ? "#pragma unroll" : "#pragma unroll 2");
  ex_line(c, "for (int em_i = 0; em_i < %d; em_i++) {", nch);
  c->indent++;
  ws_chunk(c, k, pt, "em_i", "m0", k->n0 ? k->n0 : "n0", pre ? WS_PRE_USE : WS_PRE_NONE);
  if (pre && pre < nch) {
    /* (the chunk pre ahead: its load in flight while this one and the next are stored) */
    ex_line(c, "if (em_i + %d < %d) {", pre, nch);
    c->indent++;
    ws_chunk_slot(c, k, pt, ex_A(c, "(em_i + %d)", pre));
    c->indent--;
    ex_line(c, "}");
  }
  c->indent--;
  ex_line(c, "}");
}

/* Chunk ei's residual load into its slot (false and zeros where the chunk has none). */
void ws_chunk_slot(ectx *c, const ex_ctr *k, const ws_part *pt, const char *ei) {
  ex_line(c, "em_rva%d[%s] = false, em_rqa%d[%s] = make_uint4(0u, 0u, 0u, 0u);", pt->h, ei, pt->h, ei);
  ws_chunk(c, k, pt, ei, "m0", k->n0 ? k->n0 : "n0", WS_PRE_LOAD);
}

/* EPI_SMEM=5 with a residual: the 16-byte residual loads of half h's first chunks issued together after the half is
 * staged and before the barrier, each later chunk's while the chunk WS_PRE_DEPTH before it is stored (one latency a
 * half instead of one a chunk in ws_chunk_stores' loop). At most WS_PRE_DEPTH in flight (16 registers), 2 at BN 256:
 * all 8 of a 128 x 256 half at once spilled beside the other half's live accumulator (32 registers; Qwen3 o at 4096
 * tokens 30.5 -> 35.3 us, H200, twenty-second session), 3 or 4 still spill there (nvcc -Xptxas -v). Returns the
 * depth, 0 where there is no residual. */
#define WS_PRE_DEPTH 4
int ws_chunk_prefetch(ectx *c, const ex_ctr *k, const ws_part *pt) {
  if (ex_ctr_residual(c, k) < 0) return 0;
  int nch = k->BM * (pt->half / 8) / pt->threads, most = k->BN > 128 ? 2 : WS_PRE_DEPTH, depth = nch < most ? nch : most;
  ex_line(c, "uint4 em_rqa%d[%d];", pt->h, nch);
  ex_line(c, "bool em_rva%d[%d];", pt->h, nch);
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int em_i = 0; em_i < %d; em_i++) {", depth);
  c->indent++;
  ws_chunk_slot(c, k, pt, "em_i");
  c->indent--;
  ex_line(c, "}");
  return depth;
}

/* One chunk of ws_chunk_stores: chunk ei (a text) of this thread in half h of the staged tile whose origin is
 * (m0v, n0v), in the caller's scope (a loop's body, a condition's block). */
static void ws_chunk(ectx *c, const ex_ctr *k, const ws_part *pt, const char *ei, const char *m0v, const char *n0v, int pre) {
  int nst = k->dual ? 2 : 1, per_row = pt->half / 8, mark = c->memo.n, h = pt->h;
  if (pt->col)
    ex_line(c, "const int em_e = tid + %s * %d, ml = em_e / %d, nh = em_e %% %d * 8, nl = nh + (%s);", ei, pt->threads, per_row, per_row,
            pt->col);
  else
    ex_line(c, "const int em_e = tid + %s * %d, ml = em_e / %d, nh = em_e %% %d * 8, nl = nh + %d;", ei, pt->threads, per_row, per_row,
            h * pt->half);
  ex_line(c, "const long long m = %s + ml, n = %s + nl;", m0v, n0v);
  ex_line(c, "if (m < M && n < N) {");
  c->indent++;
  if (pre != WS_PRE_LOAD) {
    const char *sc = pt->col ? "nl" : "nh"; /* (the chunk's column in the staged panels) */
    ex_line(c, "const unsigned em_o = em_swz((unsigned)(%s >> 6) * %du, ml, %s & 63);", sc, pt->panel, sc);
    for (int s = 0; s < nst; s++) ex_line(c, "const uint4 em_q%d = *reinterpret_cast<const uint4 *>(em_ep%d + em_o);", s, s);
  }
  int64_t cv;
  if (k->mdims.rank == 2 && !em_dim_is_const(&k->mdims.d[1], &cv)) {
    /* rows [B, S] with a symbolic S: the row's batch and position once for its 8 elements */
    const char *dm = ex_dim_c(c, &k->mdims.d[1]);
    ex_line(c, "const long long em_mq = m / %s, em_mr = m - em_mq * %s;", dm, dm);
    ex_split_known(c, "m", &k->mdims.d[1], "em_mq", "em_mr");
  }
  ivec mi = ex_unravel(c, "m", &k->mdims);
  ex_cap cap[8] = {{0}};
  for (int e = 0; e < 8; e++) ex_line(c, "const long long em_n%d = n + %d;", e, e);
  int rv = ws_chunk_residual(c, k, &mi, pre, ei, h);
  for (int e = 0; e < 8 && !c->failed && pre != WS_PRE_LOAD; e++) {
    for (int s = 0; s < nst; s++) {
      em_dtype dt = ex_V(c, k->sib[k->s0 + s])->dtype;
      const char *raw = ex_A(c, "(unsigned short)(em_q%d.%c%s)", s, "xyzw"[e / 2], e & 1 ? " >> 16" : "");
      ex_line(c, "const %s em_r%s_%d = %s;", ex_ctype(dt), s ? "2" : "", e, ex_load_conv(c, dt, raw));
    }
    ex_ctr_anchor(c, k, k->s0, ex_A(c, "em_r_%d", e), k->dual ? ex_A(c, "em_r2_%d", e) : NULL, &mi, ex_A(c, "em_n%d", e));
    ws_chunk_residual_seed(c, k, rv, e);
    int which[EX_MAX_OUTS] = {0}, n = ex_aligned_outputs(c, which);
    if (!ex_ctr_outputs_ok(c, k, n)) ex_fail(c, "an output of the contraction is not aligned with its result");
    c->cap = &cap[e];
    ex_write_outputs(c, which, n);
    c->cap = NULL;
  }
  for (int t = 0; t < cap[0].n && !c->failed; t++) {
    for (int e = 1; e < 8; e++)
      if (cap[e].n != cap[0].n || cap[e].pos[t] != cap[0].pos[t]) ex_fail(c, "the chunk's stores differ in their outputs");
    if (!c->failed) ws_chunk_write(c, cap, t);
  }
  c->indent--;
  ex_line(c, "}");
  c->memo.n = mark;
}

/* EPI_SMEM=6: the tile's results staged whole (BN/64 swizzled panels an accumulator, EPI_SMEM=5's chunks) and
 * stored while the next tile's K loop runs: chunk j of this thread at k-step j, between the wgmma issue and its
 * wait, the rest (K shorter than the chunks) after the loop, the last tile's after the tile loop
 * (ws_deferred_flush). em_pm0 < 0: no tile staged. The consumers' named barrier before the tile is written again
 * keeps the readers of the previous one. Each thread's chunks a tile (NC): BM x BN / 8 / threads. */
int ws_deferred_chunks(const ex_ctr *k, int threads) { return k->BM * k->BN / 8 / threads; }

void ws_deferred_chunk(ectx *c, const ex_ctr *k, int threads, const char *cond, const char *j) {
  ex_line(c, "if (%s) {", cond);
  c->indent++;
  ex_line(c, "const int em_j = %s;", j);
  const ws_part pt = {threads, 0, k->BN, 128 * k->BM, NULL};
  ws_chunk(c, k, &pt, "em_j", "em_pm0", "em_pn0", WS_PRE_NONE);
  c->indent--;
  ex_line(c, "}");
}

void ws_deferred_flush(ectx *c, const ex_ctr *k, int threads, const char *from) {
  ex_line(c, "if (em_pm0 >= 0)");
  ex_line(c, "  for (int em_jj = %s; em_jj < %d; em_jj++) {", from, ws_deferred_chunks(k, threads));
  c->indent += 2;
  ws_deferred_chunk(c, k, threads, "true", "em_jj");
  c->indent -= 2;
  ex_line(c, "  }");
}

/* EPI_SMEM=4, 7: one consumer thread stores half h's staged panels (half / 64 of them, panel bytes apart) by TMA to
 * output map tm<tmo>, one bulk group (the caller has fenced the writes for the async proxy and passed a barrier). */
static void ws_tma_store_half(ectx *c, int h, int half, int panel, int tmo) {
  ex_line(c, "if (tid == 0) {");
  for (int p = 0; p < half / 64; p++)
    ex_line(c, "  em_tma_store_2d(&tm%d, em_epa + %du, (int)n0 + %d, (int)m0);", tmo, p * panel, h * half + p * 64);
  ex_line(c, "  em_bulk_commit();");
  ex_line(c, "}");
}

/* EPI_SMEM=7 into heads: the panels of half h to the [B, H, S, D] output's map of its own dims (d, s, h, b): a panel
 * of 64 columns is one head's (or part of one: D a multiple of 64) for the tile's BM rows; the rows m = b * S + s
 * from m0 on lie in batch b0 = m0 / S from s0 = m0 % S, and the box is stored there (rows past S are not written: the
 * map's bounds). Where the tile passes into the batches after b0 (S not a multiple of BM), those rows are stored by
 * the threads from the panels: a TMA store's box may not start at a negative row (a box at s0 - S in batch b0 + 1
 * faulted with an illegal instruction on the H200, batch 4 x 37 tokens). */
static void ws_tma_store_half_heads(ectx *c, const ex_ctr *k, int h, int half, int panel, int tmo, int64_t D, int threads) {
  int64_t N = 0;
  em_dim_is_const(&k->os->d[k->r - 1], &N);
  int cpr = half / 64 * 8; /* (16-byte chunks a row of the half) */
  ex_line(c, "{");
  ex_line(c, "  const long long em_hs = %s, em_hb = %s;", ex_dim_c(c, &k->os->d[1]), ex_dim_c(c, &k->os->d[0]));
  ex_line(c, "  const int em_b0 = (int)(m0 / em_hs), em_s0 = (int)(m0 - em_b0 * em_hs);");
  ex_line(c, "  if (tid == 0) {");
  for (int p = 0; p < half / 64; p++)
    ex_line(c, "    em_tma_store_4d(&tm%d, em_epa + %du, (int)((n0 + %d) %% %lld), em_s0, (int)((n0 + %d) / %lld), em_b0);", tmo,
            p * panel, h * half + p * 64, (long long)D, h * half + p * 64, (long long)D);
  ex_line(c, "    em_bulk_commit();");
  ex_line(c, "  }");
  ex_line(c, "  if (em_s0 + %d > em_hs && em_b0 + 1 < em_hb) { /* the rows in the batches after b0, by the threads */", k->BM);
  ex_line(c, "    const int em_r0 = (int)(em_hs - em_s0), em_rn = (int)min((long long)%d, M - m0);", k->BM);
  ex_line(c, "    for (int em_x = em_r0 * %d + tid; em_x < em_rn * %d; em_x += %d) {", cpr, cpr, threads);
  ex_line(c, "      const int em_r = em_x / %d, em_p = em_x %% %d / 8, em_c = em_x %% 8;", cpr, cpr);
  ex_line(c, "      const long long em_b = (m0 + em_r) / em_hs, em_s = m0 + em_r - em_b * em_hs, em_n = n0 + %d + em_p * 64 + em_c * 8;", h * half);
  ex_line(c, "      if (em_n >= %lldLL) continue;", (long long)N);
  ex_line(c, "      const uint4 em_v = *reinterpret_cast<const uint4 *>(em_ep0 + em_p * %du + em_r * 128 + ((em_c ^ (em_r & 7)) << 4));", panel);
  ex_line(c, "      *reinterpret_cast<uint4 *>(out0 + ((em_b * %lldLL + em_n / %lldLL) * em_hs + em_s) * %lldLL + em_n %% %lldLL) = em_v;",
          (long long)(N / D), (long long)D, (long long)D, (long long)D);
  ex_line(c, "    }");
  ex_line(c, "  }");
  ex_line(c, "}");
}

/* The fragments j0 <= j < j1 of the accumulators (the linear's results, rounded to the outputs' dtype) written two
 * columns a 32-bit word into the staged panels (ws_epilogue_halves' layout), their column less hofs. */
void ws_stage_frags(ectx *c, const ex_ctr *k, int j0, int j1, int hofs, int panel) {
  int nst = k->dual ? 2 : 1;
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int j = %d; j < %d; j++) {", j0, j1);
  ex_line(c, "  #pragma unroll");
  ex_line(c, "  for (int q = 0; q < 4; q += 2) {");
  c->indent += 2;
  ex_line(c, "const int ml = wm * 16 + (lane >> 2) + (q >> 1) * 8, nl = j * 8 + (lane & 3) * 2, nh = nl - %d;", hofs);
  ex_line(c, "const long long n = %s + nl;", k->n0 ? k->n0 : "n0");
  ex_line(c, "const unsigned em_o = em_swz((unsigned)(nh >> 6) * %du, ml, nh & 63) + (nh & 7) * 2;", panel);
  for (int s = 0; s < nst; s++) {
    int mark = c->memo.n, v = k->sib[k->s0 + s];
    em_dtype dt = ex_V(c, v)->dtype;
    const char *acc = s ? "acc2" : "acc";
    const char *lo = ex_store_conv(c, dt, ex_ctr_result(c, v, ex_A(c, "%s[0][j][q]", acc), "n"));
    const char *hi = ex_store_conv(c, dt, ex_ctr_result(c, v, ex_A(c, "%s[0][j][q + 1]", acc), "(n + 1)"));
    ex_line(c, "*reinterpret_cast<unsigned *>(em_ep%d + em_o) = %s;", s, ex_store_pair(c, lo, hi));
    c->memo.n = mark;
  }
  c->indent -= 2;
  ex_line(c, "  }");
  ex_line(c, "}");
}

/* The epilogue in halves (EPI_SMEM=3, 4, 5): the tile's results staged half its columns at a time in one buffer of
 * BM x BN/2 elements an accumulator (32 KB at 128 x 256, so a 4-stage ring fits beside it). The buffer holds
 * 64-column panels, BM rows of 128 bytes each, in the 128-byte swizzle (16-byte chunk q of row r at q ^ r % 8):
 * TMA's SWIZZLE_128B layout of a 64 x BM box (the buffer is 1024-aligned), and free of bank conflicts both for the
 * fragment writes (a warp's eight rows fall on distinct chunks) and for reads along a row. Each thread writes its
 * two adjacent columns as one 32-bit word. EPI_SMEM=3: consecutive threads take consecutive columns of the half
 * through the fused ops (EPI_SMEM=2's unrolled loop). EPI_SMEM=4: the writers fence their writes for the async
 * proxy and one consumer thread stores the half's panels by TMA to output map tm<tmo> (a bulk group); it waits
 * until those stores have read the buffer (wait_group.read) before the buffer is written again, so the consumers
 * never wait for global memory. */
void ws_epilogue_halves(ectx *c, const ex_ctr *k, int cw, int staged, int tmo, int ahead) {
  /* (BN = 64: one part, the whole tile's single panel) */
  int threads = 32 * cw, nst = k->dual ? 2 : 1, parts = k->BN >= 128 && staged != 6 ? 2 : 1, half = k->BN / parts;
  int panel = 128 * k->BM;
  if (staged == 6) ws_deferred_flush(c, k, threads, "nk"); /* (the chunks K was too short for) */
  for (int h = 0; h < parts; h++) {
    if (staged == 4) ex_line(c, "if (tid == 0) em_bulk_wait_read0(); /* the last stores have read the buffer */");
    ex_line(c, "asm volatile(\"bar.sync 1, %d;\" ::: \"memory\");", threads);
    ws_stage_frags(c, k, h * k->FN / parts, (h + 1) * k->FN / parts, h * half, panel);
    if (staged == 4) ex_line(c, "em_fence_async_smem();");
    /* (after the half's accumulators are staged: they are dead, the loads in flight across the barrier) */
    const ws_part pt = {threads, h, half, panel, NULL};
    int pre = staged == 5 && ahead ? k->BM * (half / 8) / threads : staged == 5 ? ws_chunk_prefetch(c, k, &pt) : 0;
    ex_line(c, "asm volatile(\"bar.sync 1, %d;\" ::: \"memory\");", threads);
    if (staged == 4) {
      ws_tma_store_half(c, h, half, panel, tmo);
      continue;
    }
    if (staged == 5) {
      ws_chunk_stores(c, k, &pt, pre);
      continue;
    }
    if (staged == 6) {
      ex_line(c, "em_pm0 = m0, em_pn0 = n0;");
      continue;
    }
    int mark = c->memo.n; /* (values computed in this loop do not outlive it) */
    ex_line(c, "#pragma unroll 8");
    ex_line(c, "for (int em_i = 0; em_i < %d; em_i++) {", k->BM * half / threads);
    c->indent++;
    ex_line(c, "const int em_e = tid + em_i * %d, ml = em_e / %d, nh = em_e %% %d, nl = nh + %d;", threads, half, half, h * half);
    ex_line(c, "const long long m = m0 + ml, n = %s + nl;", k->n0 ? k->n0 : "n0");
    ex_line(c, "if (m < M && n < N) {");
    c->indent++;
    ex_line(c, "const unsigned em_o = em_swz((unsigned)(nh >> 6) * %du, ml, nh & 63) + (nh & 7) * 2;", panel);
    for (int s = 0; s < nst; s++) ws_staged_value(c, k, s, ex_A(c, "*reinterpret_cast<const unsigned short *>(em_ep%d + em_o)", s));
    ws_staged_outputs(c, k);
    c->indent--;
    ex_line(c, "}");
    c->indent--;
    ex_line(c, "}");
    c->memo.n = mark;
  }
}

/* A staged epilogue's value of accumulator s at (ml, nl) from the staged element text elem: em_r, em_r2. */
static void ws_staged_value(ectx *c, const ex_ctr *k, int s, const char *elem) {
  em_dtype dt = ex_V(c, k->sib[k->s0 + s])->dtype;
  ex_line(c, "const %s %s = %s;", ex_ctype(dt), s ? "em_r2" : "em_r", ex_load_conv(c, dt, elem));
}

/* A staged epilogue's writes at (m, n): em_r (em_r2) anchor the linear's (the dual's) result at the domain index,
 * and every output, aligned with it, is written through the fused ops. */
static void ws_staged_outputs(ectx *c, const ex_ctr *k) {
  ivec mi = ex_unravel(c, "m", &k->mdims);
  ex_ctr_anchor(c, k, k->s0, "em_r", k->dual ? "em_r2" : NULL, &mi, "n");
  int which[EX_MAX_OUTS] = {0}, n = ex_aligned_outputs(c, which);
  if (!ex_ctr_outputs_ok(c, k, n)) ex_fail(c, "an output of the contraction is not aligned with its result");
  ex_write_outputs(c, which, n);
}

/* EPI_SMEM=4's condition: the kernel's one output is the linear's result (one linear, no dual) or a contiguous view
 * of it (view, reshape, squeeze, unsqueeze: the same row-major order), of 2-byte elements, with a constant N a
 * multiple of 8 (16-byte rows for the tensor map). Returns the output's position and sets *n, or -1. */
/* What a TMA-stored epilogue (EPI_SMEM=4, 7) needs of any kernel: one linear (no dual, no concatenated siblings) and
 * one output, a constant N a multiple of 8 (set in *n), value v of 2-byte elements. */
static int ws_tma_one_output(ectx *c, const ex_ctr *k, int v, int64_t *n) {
  em_dtype dt = ex_V(c, v)->dtype;
  return !k->dual && !k->concat && c->g->outputs.n == 1 && em_dim_is_const(&k->os->d[k->r - 1], n) && *n % 8 == 0 &&
         (dt == EM_BF16 || dt == EM_F16);
}

int ws_tma_store_output(ectx *c, const ex_ctr *k, int64_t *n) {
  if (!ws_tma_one_output(c, k, k->a, n)) return -1;
  int v = c->g->outputs.v[0];
  while (v != k->a) {
    const em_value *x = ex_V(c, v);
    if (x->kind != EM_V_NODE) return -1;
    const em_node *nd = &c->g->nodes.v[x->node];
    if (nd->op != EM_OP_VIEW && nd->op != EM_OP_RESHAPE && nd->op != EM_OP_UNSAFE_VIEW && nd->op != EM_OP_UNSQUEEZE &&
        nd->op != EM_OP_SQUEEZE)
      return -1;
    v = nd->args[0].tensor;
  }
  return 0;
}

int ws_heads_view(ectx *c, const ex_ctr *k, int64_t *D) {
  if (k->r != 3) return -1;
  for (int i = 0; i < c->g->nodes.n; i++) {
    const em_node *tn = &c->g->nodes.v[i];
    if (tn->op != EM_OP_TRANSPOSE) continue;
    int vin = tn->args[0].tensor;
    const em_value *x = ex_V(c, vin);
    if (x->kind != EM_V_NODE) continue;
    const em_node *vn = &c->g->nodes.v[x->node];
    const em_shape *vs = ex_S(c, vin);
    if ((vn->op != EM_OP_VIEW && vn->op != EM_OP_RESHAPE && vn->op != EM_OP_UNSAFE_VIEW) || vn->args[0].tensor != k->a ||
        vs->rank != 4)
      continue;
    int d0 = ex_axis_of(&tn->args[1], 4), d1 = ex_axis_of(&tn->args[2], 4);
    if (d0 + d1 != 3 || d0 * d1 != 2) continue; /* (dims 1 and 2) */
    if (em_dim_eq(&vs->d[0], &k->os->d[0]) && em_dim_eq(&vs->d[1], &k->os->d[1]) && em_dim_is_const(&vs->d[3], D) && *D % 64 == 0)
      return tn->out;
  }
  return -1;
}

/* EPI_SMEM=7's condition: one linear (no dual, no merged siblings), its one output of 2-byte elements with the
 * result's shape (the fused ops' result, a residual added, written at the result's own index: ex_ctr_pairs_staged
 * checks the alignment) or with the shape of the heads view (*heads: ws_heads_view's value, else -1), N a constant
 * multiple of 8. Returns the output's position (0), or -1. */
int ws_tma_fused_output(ectx *c, const ex_ctr *k, int64_t *n, int *heads) {
  *heads = -1;
  if (c->g->outputs.n != 1 || k->nsib != 1) return -1;
  int v = c->g->outputs.v[0];
  if (!ws_tma_one_output(c, k, v, n)) return -1;
  if (em_shape_eq(ex_S(c, v), k->os)) return 0;
  int64_t D = 0;
  int t = ws_heads_view(c, k, &D);
  if (t < 0 || !em_shape_eq(ex_S(c, v), ex_S(c, t))) return -1;
  *heads = t;
  return 0;
}

/* EPI_SMEM=7: the fragment epilogue's values (the fused ops on each thread's column pairs, a residual loaded ahead
 * of the K loop as for EPI_SMEM=0) packed into EPI_SMEM=4's swizzled half buffer instead of stored from the
 * fragments, and the half stored by TMA from one thread: the consumers issue no global stores (the fragments' 4-byte
 * stores over eight rows an instruction were 11,100 of a 128 x 256 tile's ~50,000 cycles at 4096 tokens, TinyLlama
 * o_proj, H200, twenty-second session). Written without a GPU run. */
void ws_epilogue_tma_fused(ectx *c, const ex_ctr *k, int cw, int tmo, int heads) {
  int threads = 32 * cw, parts = k->BN >= 128 ? 2 : 1, half = k->BN / parts, panel = 128 * k->BM;
  int64_t D = 0; /* (into heads: the head width, the view's last dim, ws_heads_view's check) */
  if (heads >= 0) em_dim_is_const(&ex_S(c, heads)->d[3], &D);
  /* (RoPE from the thread's own fragments: its context for the fused ops) */
  int stageD = ex_ctr_stage_width(c, k);
  if (stageD < 0 || (stageD > 0 && ex_ctr_stage_regs(c, k, stageD))) return;
  for (int h = 0; h < parts; h++) {
    ex_line(c, "if (tid == 0) em_bulk_wait_read0(); /* the last stores have read the buffer */");
    ex_line(c, "asm volatile(\"bar.sync 1, %d;\" ::: \"memory\");", threads);
    if (heads >= 0) ex_line(c, "{ /* (each half's row split its own) */");
    ex_ctr_pairs_staged(c, k, h * k->FN / parts, (h + 1) * k->FN / parts, h * half, panel, heads);
    if (heads >= 0) ex_line(c, "}");
    ex_line(c, "em_fence_async_smem();");
    ex_line(c, "asm volatile(\"bar.sync 1, %d;\" ::: \"memory\");", threads);
    if (heads >= 0) ws_tma_store_half_heads(c, k, h, half, panel, tmo, D, threads);
    else ws_tma_store_half(c, h, half, panel, tmo);
  }
}

/* The staging buffers after the ring (EPI_SMEM 1..7), ep bytes each (em_ctr_tma_smem): declares em_ep<s> (typed and
 * padded rows for 1, 2; bytes in 64-column swizzled panels for 3 and up, and em_epa, the buffer's shared address, for
 * 4 and 7). */
void ws_staging(ectx *c, const ex_ctr *k, long long ring, int staged, long long ep) {
  int nst = k->dual ? 2 : 1;
  if (staged == 1 || staged == 2) {
    for (int s = 0; s < nst; s++)
      ex_line(c, "%s *const em_ep%d = reinterpret_cast<%s *>(em_dsm + (em_sb - em_smem(em_dsm)) + %lldu);",
              ex_stype(ex_V(c, k->sib[s])->dtype), s, ex_stype(ex_V(c, k->sib[s])->dtype), ring + s * ep);
  } else if (staged >= 3) {
    for (int s = 0; s < nst; s++)
      ex_line(c, "unsigned char *const em_ep%d = em_dsm + (em_sb - em_smem(em_dsm)) + %lldu;", s, ring + s * ep);
    if (staged == 4 || staged == 7) ex_line(c, "const unsigned em_epa = em_sb + %lldu;", ring);
  }
}
