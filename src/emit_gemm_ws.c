/* emit_gemm_ws.c — the persistent warp-specialized Hopper GEMM (PERSIST=1), a driver over three parts: the tile
 * scheduler (a persistent loop over output tiles in grouped order), the producer (one lane of the last warpgroup
 * streams every tile's k-slices through the TMA ring on full/empty mbarriers) and the consumers (BM/64
 * warpgroups issuing wgmma from the ring; WG_K=2: two on a 64-row tile, dealt its k-steps in turn); each tile ends in the contraction's shared epilogue, a staged one
 * with coalesced stores, or one staged in halves (stored by the threads or by TMA: emit_gemm_ws_epi.c). The producer
 * gives its registers to the consumers (setmaxnreg), so a 64 x 256 f32 accumulator a warpgroup fits.
 * STAMP=1 adds clock marks to both roles (ws_stamp) and nothing else. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emit_gemm_ws.h"

/* Registers a thread of each role keeps after setmaxnreg: 40 x 128 + 232 x 256 = 168 x 384, what the block was
 * given at launch (setmaxnreg.inc waits for registers the block gave back: 64 + 224 hung on the H200). */
#define WS_PRODUCER_REGS 40
#define WS_CONSUMER_REGS 232

/* STAMP=1: each role sums clock intervals in registers (32-bit %clock: an interval and a CTA's sum stay below
 * 2^31 cycles, about a second) and its first thread writes them to the CTA's record in the launch scratch when
 * its loop ends: WS_STAMP_FIELDS unsigned a role, roles 0 and 1 the consumer warpgroups (1 unused at BM 64), 2
 * the producer lane. Consumer fields: tiles, k-steps, full-barrier wait, wgmma issue to wait_group 1, release,
 * the tile's tail (wait_group 0 and the last release), epilogue, total (tile loop entry to exit), the tiles' heads
 * (from a tile's coordinates to its K loop: the loads ahead, WG_PP's turn), 0; the producer's: 0, k-steps,
 * empty-barrier wait, load issue, 0, 0, 0, total, 0, 0. Role 3 is the CTA's timeline,
 * written by thread 0 as it leaves: %globaltimer (ns) at the CTA's entry (low, high word) and as it leaves (low,
 * high), the cycles from entry to the consumers' loop (the prologue: barrier init, the block or cluster barrier,
 * setmaxnreg), SPLIT_K's reduce-scatter (EPI_SMEM=0) stores, its wait for the peers' parts, its reads, adds and
 * release (thread 0's sums; 0 without it), 0, 1. bench/gemm.lua --stamp reads this layout (scripts/emmy/stamps.lua). */
#define WS_STAMP_FIELDS 10
#define WS_STAMP_ROLES 4

/* One line of stamp code, emitted only when st (STAMP=1) is set. */
static void ws_stamp(ectx *c, int st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void ws_stamp(ectx *c, int st, const char *fmt, ...) {
  if (!st) return;
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  ex_line(c, "%s", line);
}

/* The scheduler: em_tm x em_tn tiles, CTA blockIdx.x taking every gridDim.x-th (the launcher caps the grid at
 * the SM count); tile em_t's (m0, n0) in groups of `raster` tile rows, so the tiles running at once share A rows
 * and B columns in L2. */
static void ws_tile_count(ectx *c, const ex_ctr *k, int cl) {
  ex_line(c, "const int em_tm = (int)((M + %d - 1) / %d), em_tn = (int)((N + %d - 1) / %d), em_tiles = em_tm * em_tn;", k->BM,
          k->BM, k->BN, k->BN);
  /* CLUSTER=2: the two CTAs of a cluster take a pair of tiles on neighbouring tile rows (rank r the row 2p + r)
   * with the same columns, so they share the B tile; em_tp pair rows, em_pairs pairs. PAIR_A=1: neighbouring tile
   * columns (rank r the column 2p + r) of the same rows, sharing the A tile; em_tp pair columns */
  if (cl == 2 && EX_KNOB(c, PAIR_A)) ex_line(c, "const int em_tp = (em_tn + 1) / 2, em_pairs = em_tm * em_tp;");
  else if (cl == 2) ex_line(c, "const int em_tp = (em_tm + 1) / 2, em_pairs = em_tp * em_tn;");
}

/* This CTA's tile loop: every gridDim.x-th tile, (CLUSTER=2) every (gridDim.x / 2)-th pair of its cluster, or
 * (SPLIT_K=2, 4) every (gridDim.x / SPLIT_K)-th tile, the cluster's CTAs on its K parts. */
static void ws_tile_loop(ectx *c, int cl, int sk) {
  if (EX_KNOB(c, STREAM_K)) ex_sk_item_loop(c, "");
  else if (cl == 2) ex_line(c, "for (int em_t = blockIdx.x / 2; em_t < em_pairs; em_t += gridDim.x / 2) {");
  else if (sk >= 2) ex_line(c, "for (int em_t = blockIdx.x / %d; em_t < em_tiles; em_t += gridDim.x / %d) {", sk, sk);
  else ex_line(c, "for (int em_t = blockIdx.x; em_t < em_tiles; em_t += gridDim.x) {");
}

/* SPLIT_K=2, 4: this CTA's K tiles of the tile, kt0.. (nkc of them): rank r the r-th part of nk / SPLIT_K (rounded
 * up; the last parts may be short or empty). Returns the loop bound's name. */
static const char *ws_k_range(ectx *c, int sk) {
  if (EX_KNOB(c, STREAM_K)) return "em_ke"; /* (from em_kb: ws_k_first) */
  if (sk < 2) return "nk";
  ex_line(c, "const int em_kh = (nk + %d) / %d, kt0 = (int)em_cr * em_kh, nkc = max(0, min(nk, kt0 + em_kh) - kt0);", sk - 1, sk);
  return "nkc";
}

/* The K loop's first k-tile: a stream-K piece's em_kb, else 0. */
static const char *ws_k_first(ectx *c) { return EX_KNOB(c, STREAM_K) ? "em_kb" : "0"; }

static void ws_tile_coords(ectx *c, const ex_ctr *k, int raster, int cl) {
  const int pa = cl == 2 && EX_KNOB(c, PAIR_A);
  const char *rows = cl == 2 && !pa ? "em_tp" : "em_tm";
  ex_line(c, "const int em_grp = %d * %s, em_first = em_t / em_grp * %d;", raster, pa ? "em_tp" : "em_tn", raster);
  ex_line(c, "const int em_gs = min(%s - em_first, %d), em_in = em_t %% em_grp;", rows, raster);
  if (pa)
    ex_line(c, "const long long m0 = (long long)(em_first + em_in %% em_gs) * %d, n0 = ((long long)(em_in / em_gs) * 2 + em_cr) * %d;",
            k->BM, k->BN);
  else if (cl == 2)
    ex_line(c, "const long long m0 = ((long long)(em_first + em_in %% em_gs) * 2 + em_cr) * %d, n0 = (long long)(em_in / em_gs) * %d;",
            k->BM, k->BN);
  else
    ex_line(c, "const long long m0 = (long long)(em_first + em_in %% em_gs) * %d, n0 = (long long)(em_in / em_gs) * %d;", k->BM,
            k->BN);
  /* the register-RoPE epilogue's indices fold only where the compiler knows the origin is not negative (its
   * remainders by powers of two become masks): TinyLlama's q epilogue 2,497 -> 1,727 PTX instructions */
  if (k->stage_reg) ex_line(c, "__builtin_assume(m0 >= 0); __builtin_assume(n0 >= 0);");
}

/* DIAG (a diagnostic knob, docs/formats.md): 1 the wgmma left out, 2 CLUSTER=2's ring without multicast, 3 both; 4
 * with 2 (6, 7): no cluster barrier either. */
static int ws_diag(ectx *c) { return (int)EX_KNOB(c, DIAG); }
/* DIAG 6, 7: CLUSTER=2 launched with each CTA's ring its own and no cluster barrier at the start or end (nothing of
 * one CTA reaches the other), so that the cluster's launch and placement are timed alone. */
static int ws_diag_nosync(ectx *c, int cl) { return cl == 2 && (ws_diag(c) & 6) == 6; }
/* The ring's cluster: 2 where both CTAs' producers write each stage and both CTAs' consumers release it (CLUSTER=2's
 * multicast), else 1 (DIAG 2: the cluster launched, each CTA's ring its own). */
static int ws_ring_cl(ectx *c, int cl) { return cl == 2 && !(ws_diag(c) & 2) ? 2 : 1; }
/* The default since the forty-first session (EMMY_CL2_NOEND=0 at compile time: the closing barrier; docs/formats.md):
 * CLUSTER=2's multicast ring without the closing cluster barrier; instead the producer, after its last load, waits as
 * for `stages` more (CUTLASS's producer tail): once every stage's last use is released by both CTAs' consumers, no
 * arrival can reach this CTA any more, and the peer's multicasts into it are waited for by its own consumers. */
static int ws_cl2_noend(ectx *c, int cl) { return ws_ring_cl(c, cl) == 2 && !ws_diag_nosync(c, cl) && ex_env_default_on("EMMY_CL2_NOEND"); }

/* SPLIT_K 2, 4: the split's CTAs of a tile are a cluster (their parts summed through distributed shared memory), or
 * with SPLIT_L2=1 a group of consecutive CTAs summing them through the launch scratch (ws_split_reduce_l2). */
static int ws_split_cluster(ectx *c, int sk) { return sk >= 2 && !EX_KNOB(c, SPLIT_L2); }
static int ws_split_l2(ectx *c, int sk) { return sk >= 2 && EX_KNOB(c, SPLIT_L2); }

/* One k-step's wgmma group (ex_wgmma_step), or with DIAG 1 only its fence and commit: an empty group. */
static void ws_mma_step(ectx *c, const ex_ctr *k, const char *aS, const char *bS, const char *b2S, const char *scale_d) {
  if (ws_diag(c) & 1) {
    ex_line(c, "em_wg_fence();");
    ex_line(c, "em_wg_commit(); /* DIAG: no wgmma */");
    return;
  }
  ex_wgmma_step(c, aS, bS, b2S, k->BN, k->wide ? 2 : k->dual, k->mma_t, 0, scale_d);
}

/* CLUSTER=2's stage load: this CTA's A tile, and its half of the shared B tile (B2) multicast into both CTAs'
 * rings at the same offset; each CTA's full barrier takes its A and both halves of B. PAIR_A=1: its half of the
 * shared A tile's rows multicast, its own B tiles (the halves land 1024-byte aligned, so the 128-byte swizzle of
 * the whole tile holds). */
static void ws_cluster_load(ectx *c, const ex_ctr *k, int stages) {
  long long abytes = 128LL * k->BM, bbytes = 128LL * k->BN;
  ex_line(c, "auto em_load = [&](int st, int kt) {");
  ex_line(c, "  em_mbar_expect(&em_bar[st], %lldu);", abytes + bbytes * (k->dual ? 2 : 1));
  if (EX_KNOB(c, PAIR_A)) {
    ex_line(c, "  em_tma_2d_mc(em_sb + st * %lldu + em_cr * %lldu, &tm0, kt * 64, (int)m0 + (int)em_cr * %d, &em_bar[st], (unsigned short)3);",
            abytes, abytes / 2, k->BM / 2);
  } else {
    ex_line(c, "  em_tma_2d(em_sb + st * %lldu, &tm0, kt * 64, (int)m0, &em_bar[st]);", abytes);
  }
  /* (its own B tiles with PAIR_A=1, else its half of them; merged siblings: the pair's columns are in one weight) */
  c->indent--; /* (ex_ctr_tma_load_b's lines are indented for a block one level in) */
  ex_ctr_tma_load_b(c, k, stages, "kt", !EX_KNOB(c, PAIR_A));
  c->indent++;
  ex_line(c, "};");
}

/* The producer: every k-slice of every tile of this CTA, each once its stage's previous use is released (the
 * empty barrier's phase of use it/S - 1; the first pass waits on the phase before the first, which is complete). */
static void ws_producer(ectx *c, const ex_ctr *k, int stages, int raster, int cw, int cl, int sk, int sp) {
  ex_line(c, "if (wid >= %d) {", cw);
  c->indent++;
  ex_line(c, "asm volatile(\"setmaxnreg.dec.sync.aligned.u32 %d;\");", WS_PRODUCER_REGS);
  ex_line(c, "if (wid == %d && lane == 0) {", cw);
  c->indent++;
  ex_line(c, "int em_it = 0;");
  ws_stamp(c, sp, "unsigned em_sw = 0, em_si = 0; /* STAMP: empty-barrier waits, load issue */");
  ws_stamp(c, sp, "const unsigned em_s0 = em_clock();");
  ws_tile_loop(c, cl, sk);
  c->indent++;
  ws_tile_coords(c, k, raster, cl);
  const char *nkv = ws_k_range(c, sk);
  if (ws_ring_cl(c, cl) == 2) ws_cluster_load(c, k, stages);
  else ex_ctr_tma_load(c, k, stages, 1, 1, "kt");
  ex_line(c, "for (int kt = %s; kt < %s; kt++, em_it++) {", ws_k_first(c), nkv);
  ex_line(c, "  const int st = em_it %% %d;", stages);
  ws_stamp(c, sp, "  const unsigned em_c0 = em_clock();");
  ex_line(c, "  em_mbar_wait(&em_empty[st], ((unsigned)(em_it / %d) & 1u) ^ 1u);", stages);
  ws_stamp(c, sp, "  const unsigned em_c1 = em_clock();");
  const char *kx = sk >= 2 ? "kt0 + kt" : "kt";
  ex_line(c, "  em_load(st, %s);", kx);
  ws_stamp(c, sp, "  em_sw += em_c1 - em_c0, em_si += em_clock() - em_c1;");
  ex_line(c, "}");
  c->indent--;
  ex_line(c, "}");
  if (sp) {
    ex_line(c, "{");
    ex_line(c, "  unsigned *const em_w = em_st + %d;", 2 * WS_STAMP_FIELDS);
    ex_line(c, "  em_w[0] = 0u, em_w[1] = (unsigned)em_it, em_w[2] = em_sw, em_w[3] = em_si;");
    ex_line(c, "  em_w[4] = 0u, em_w[5] = 0u, em_w[6] = 0u, em_w[7] = em_clock() - em_s0;");
    ex_line(c, "}");
  }
  if (ws_cl2_noend(c, cl)) /* (after the stamps: their totals keep their meaning) */
    ex_line(c, "for (int em_q = 0; em_q < %d; em_q++, em_it++) em_mbar_wait(&em_empty[em_it %% %d], ((unsigned)(em_it / %d) & 1u) ^ 1u); /* EMMY_CL2_NOEND: the producer's tail */",
            stages, stages, stages);
  c->indent--;
  ex_line(c, "}");
  if (cl == 2 || ws_split_cluster(c, sk)) {
    /* (no return: every thread of the cluster's CTAs meets at the closing cluster barrier; DIAG 6, 7 have none) */
    c->indent--;
    ex_line(c, "} else {");
    c->indent++;
    return;
  }
  ex_line(c, "return;");
  c->indent--;
  ex_line(c, "}");
}

/* A consumer warp's release of ring use u: one arrival of its first lane on the stage's empty barrier (on both CTAs'
 * with CLUSTER=2's multicast ring). */
static void ws_release(ectx *c, const char *cond, const char *use, int stages, int cl) {
  if (ws_ring_cl(c, cl) == 2) /* both CTAs' producers write this stage (B's halves): release it to both */
    ex_line(c, "if (%slane == 0) for (unsigned q = 0; q < 2u; q++) em_mbar_arrive_cluster(&em_empty[(%s) %% %d], q);", cond, use,
            stages);
  else
    ex_line(c, "if (%slane == 0) asm volatile(\"mbarrier.arrive.shared::cta.b64 _, [%%0];\" :: \"r\"(em_smem(&em_empty[(%s) %% %d])) : \"memory\");",
            cond, use, stages);
}

/* A rank with no K tiles of the tile (nk < SPLIT_K) contributes zeros. */
static void ws_split_zero(ectx *c, const ex_ctr *k) {
  ex_line(c, "if (nkc == 0) {");
  ex_line(c, "  #pragma unroll");
  ex_line(c, "  for (int j = 0; j < %d; j++) {", k->FN);
  for (int s = 0; s < (k->dual ? 2 : 1); s++)
    ex_line(c, "    %s[0][j][0] = %s[0][j][1] = %s[0][j][2] = %s[0][j][3] = 0.0f;", s ? "acc2" : "acc", s ? "acc2" : "acc",
            s ? "acc2" : "acc", s ? "acc2" : "acc");
  ex_line(c, "  }");
  ex_line(c, "}");
}

/* The accumulators (acc, and a dual's acc2) plus the partial sums a peer wrote to buffer buf (float4 j of thread t of
 * `threads` at (j + s * FN) * threads + t), in a fixed order: the same sum every run. */
static void ws_acc_add(ectx *c, const ex_ctr *k, const char *buf, int threads) {
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int j = 0; j < %d; j++) {", k->FN);
  for (int s = 0; s < (k->dual ? 2 : 1); s++) {
    const char *a = s ? "acc2" : "acc";
    ex_line(c, "  const float4 em_x%d = %s[(j + %d) * %d];", s, buf, s * k->FN, threads);
    ex_line(c, "  %s[0][j][0] += em_x%d.x, %s[0][j][1] += em_x%d.y, %s[0][j][2] += em_x%d.z, %s[0][j][3] += em_x%d.w;", a, s, a, s, a, s,
            a, s);
  }
  ex_line(c, "}");
}

/* The late cluster wait (the default since 2026-12-04; EMMY_CLUSTER_LATE=0 at compile time emits the earlier text): SPLIT_K's cluster (CLUSTER=1)
 * arrives on the cluster barrier once its mbarriers are initialised and waits for the peers only before its first
 * exchange (or at the kernel's end), so that its producer starts loading without waiting for the other CTAs to be
 * placed and initialised — the split variants' K loop is 40% shorter than the whole tile's at 512 tokens but their
 * fixed costs ate it (docs/performance.md, twenty-seventh session). (CLUSTER=2's producer multicasts into the peer
 * from its first load, so it keeps the barrier at the start.) */
/* (measured on the H200: every split variant 2-4% faster alone, the TinyLlama layer 113.7 / 114.3 -> 113.1 / 113.0 us,
 * twenty-eighth and twenty-ninth sessions) */
static int ws_cluster_late(ectx *c, int cl, int sk) {
  return cl == 1 && ws_split_cluster(c, sk) && ex_env_default_on("EMMY_CLUSTER_LATE");
}
/* The default since the forty-first session (EMMY_SPLIT_RELAXED=0 at compile time: release; docs/formats.md): the late
 * cluster arrive relaxed instead of release — the mbarriers' init is fenced to the cluster already
 * (fence.mbarrier_init), as CLUSTER=2's start has been since the thirty-ninth session, where the release had cost
 * ~1,100 cycles before the first load; here every thread arrives, the producer among them, before the block barrier
 * that lets it load. */
static int ws_split_relaxed(void) { return ex_env_default_on("EMMY_SPLIT_RELAXED"); }
/* The default since the forty-first session (EMMY_SPLIT_NOEND=0 at compile time: the barrier; docs/formats.md): the
 * late-waiting split cluster without the closing cluster barrier (arrive.release, wait.acquire), whose release may cost
 * what the start's did. Nothing reaches a rank after its last wait: each exchange's data is waited for by its owner
 * (em_rfull), the reduce-scatter leaves out the last tile's release already, and with this the hand-over (SPLIT_K=2,
 * staged) leaves out its own. */
static int ws_split_noend(ectx *c, int cl, int sk) { return ws_cluster_late(c, cl, sk) && ex_env_default_on("EMMY_SPLIT_NOEND"); }

/* SPLIT_K=2's hand-over, after both CTAs' K halves retired: rank 1 waits until rank 0 has read its last
 * partials (em_rempty, in rank 1), writes this tile's accumulators into rank 0's buffer em_rb (float4 j of
 * consumer thread t at (j * threads + t) * 16: each store a warp's 512 contiguous bytes) and arrives on rank 0's
 * em_rfull; rank 0 waits for them, adds them to its own (rank 0's half + rank 1's: the same sum every run),
 * releases the buffer and goes on to the epilogue (emitted by the caller inside the else this opens). A rank
 * with no K tiles (nk == 1) hands over zeros. */
static void ws_split_handover(ectx *c, const ex_ctr *k, int cw) {
  int threads = 32 * cw, nst = k->dual ? 2 : 1;
  ws_split_zero(c, k);
  ex_line(c, "if (em_cr != 0) {");
  c->indent++;
  ex_line(c, "em_mbar_wait_acquire(&em_rempty, (em_n & 1u) ^ 1u);");
  ex_line(c, "const unsigned em_ra = em_mapa(em_rb, 0u) + (unsigned)tid * 16u;");
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int j = 0; j < %d; j++) {", k->FN);
  for (int s = 0; s < nst; s++) {
    const char *a = s ? "acc2" : "acc";
    ex_line(c, "  em_st_cluster4(em_ra + (unsigned)(j + %d) * %du, %s[0][j][0], %s[0][j][1], %s[0][j][2], %s[0][j][3]);", s * k->FN,
            threads * 16, a, a, a, a);
  }
  ex_line(c, "}");
  ex_line(c, "em_mbar_arrive_release(&em_rfull, 0u);");
  c->indent--;
  ex_line(c, "} else {");
  c->indent++;
  ex_line(c, "em_mbar_wait_acquire(&em_rfull, em_n & 1u);");
  ex_line(c, "const float4 *const em_rv = reinterpret_cast<const float4 *>(em_dsm + (em_rb - em_smem(em_dsm))) + tid;");
  ws_acc_add(c, k, "em_rv", threads);
  if (ws_split_noend(c, 1, 2)) ex_line(c, "if (em_t + (int)gridDim.x / 2 < em_tiles) em_mbar_arrive_release(&em_rempty, 1u); /* EMMY_SPLIT_NOEND: none after the last tile */");
  else ex_line(c, "em_mbar_arrive_release(&em_rempty, 1u);");
}

/* The barrier after the mbarriers' init: the cluster's (CLUSTER=2, a SPLIT_K cluster: a peer's multicasts and
 * arrivals may only reach initialised barriers), else the block's. CLUSTER=2's arrive is relaxed — the init is fenced
 * to the cluster already (fence.mbarrier_init), as CUTLASS's sm90 kernels start; the arrive's release cost ~1,100
 * cycles of its prologue (docs/formats.md). */
static void ws_start_barrier(ectx *c, int cl, int sk) {
  const int cluster = (cl == 2 && !ws_diag_nosync(c, cl)) || ws_split_cluster(c, sk);
  if (cl == 2 && cluster)
    ex_line(c, "asm volatile(\"barrier.cluster.arrive.relaxed.aligned;\\n\\tbarrier.cluster.wait.aligned;\" ::: \"memory\"); /* the init fenced to the cluster */");
  else
    ex_line(c, cluster ? "em_cluster_sync();" : "__syncthreads();");
}

static void ws_cluster_wait_once(ectx *c) {
  ex_line(c, "if (!em_cw) {");
  ex_line(c, "  asm volatile(\"barrier.cluster.wait.acquire.aligned;\" ::: \"memory\");");
  ex_line(c, "  em_cw = 1u;");
  ex_line(c, "}");
}

/* A reduce-scatter's gather: this rank's share of the column groups (j / (FN / SPLIT_K) == em_cr) plus its SPLIT_K - 1
 * peers' parts, em_p from p0 on, in that fixed order (the same sum every run). Peer part float4 of (s, j) at
 * open ((P * nacc + s) * FN/SPLIT_K + j % (FN/SPLIT_K)) * threads close (P: the part's index in the buffer read); pre:
 * a line emitted before each part's loads (its address), or NULL. */
static void ws_share_add(ectx *c, const ex_ctr *k, int sk, int threads, int p0, const char *pre, const char *open, const char *P,
                         const char *close) {
  int nst = k->dual ? 2 : 1, fs = k->FN / sk;
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int j = 0; j < %d; j++) {", k->FN);
  ex_line(c, "  if (j / %d != (int)em_cr) continue;", fs);
  ex_line(c, "  #pragma unroll");
  ex_line(c, "  for (int em_p = %d; em_p < %d; em_p++) {", p0, p0 + sk - 1);
  if (pre) ex_line(c, "    %s", pre);
  for (int s = 0; s < nst; s++) {
    const char *a = s ? "acc2" : "acc";
    ex_line(c, "    const float4 em_x%d = %s((%s * %d + %d) * %d + j %% %d) * %d%s;", s, open, P, nst, s, fs, fs, threads, close);
    ex_line(c, "    %s[0][j][0] += em_x%d.x, %s[0][j][1] += em_x%d.y, %s[0][j][2] += em_x%d.z, %s[0][j][3] += em_x%d.w;", a, s, a, s, a,
            s, a, s);
  }
  ex_line(c, "  }");
  ex_line(c, "}");
}

/* SPLIT_K=2, 4 with the fragment epilogue (EPI_SMEM=0): a reduce-scatter of the tile's partial sums across the
 * cluster. Rank r owns the column groups j with j / (FN / SPLIT_K) == r of every consumer thread's fragments: each
 * thread sends its other groups into their owners' buffers em_rb (distributed shared memory; slot p = the sender's
 * distance past the owner less one, float4 ((p * nacc + s) * FN/SPLIT_K + j % (FN/SPLIT_K)) * threads + tid, so a
 * warp's store is 512 contiguous bytes) by st.async, each store's bytes counted on the owner's em_rfull (the owner's
 * one expect_tx arrival a tile: no fence a thread); then it waits for its own, adds the peers' parts in slot order
 * (the same sum every run), and releases them (em_rempty, in each sender: one arrival a warp). Every rank then runs
 * the epilogue on its share (k->jkeep), so the tile's epilogue is split SPLIT_K ways. sp: STAMP=1 (the stores and
 * the wait for the peers' parts, em_sq and em_sv). */
static void ws_split_reduce(ectx *c, const ex_ctr *k, int cw, int sk, int sp) {
  int threads = 32 * cw, nst = k->dual ? 2 : 1, fs = k->FN / sk;
  ws_split_zero(c, k);
  ws_stamp(c, sp, "const unsigned em_q0 = em_clock();");
  ex_line(c, "em_mbar_wait_acquire(&em_rempty, (em_n & 1u) ^ 1u); /* the owners have read this CTA's last parts */");
  ex_line(c, "if (tid == 0) em_mbar_expect(&em_rfull, %du); /* the peers' parts, in bytes */", (sk - 1) * threads * fs * nst * 16);
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int j = 0; j < %d; j++) {", k->FN);
  c->indent++;
  ex_line(c, "const unsigned em_o = (unsigned)(j / %d);", fs);
  ex_line(c, "if (em_o == em_cr) continue;");
  ex_line(c, "const unsigned em_p = (em_cr + %du - em_o) %% %du;", sk - 1, sk);
  ex_line(c, "const unsigned em_ra = em_mapa(em_rb, em_o) + ((em_p * %du + (unsigned)(j %% %d)) * %du + (unsigned)tid) * 16u;", nst * fs, fs,
          threads);
  ex_line(c, "const unsigned em_rf = em_mapa(em_smem(&em_rfull), em_o);");
  for (int s = 0; s < nst; s++) {
    const char *a = s ? "acc2" : "acc";
    ex_line(c, "em_st_async4(em_ra + %du, %s[0][j][0], %s[0][j][1], %s[0][j][2], %s[0][j][3], em_rf);", s * fs * threads * 16, a, a, a, a);
  }
  c->indent--;
  ex_line(c, "}");
  ws_stamp(c, sp, "const unsigned em_q1 = em_clock();");
  ex_line(c, "em_mbar_wait_acquire(&em_rfull, em_n & 1u);");
  ws_stamp(c, sp, "const unsigned em_q2 = em_clock();");
  ws_stamp(c, sp, "em_sq += em_q1 - em_q0, em_sv += em_q2 - em_q1;");
  ex_line(c, "{");
  c->indent++;
  ex_line(c, "const float4 *const em_rv = reinterpret_cast<const float4 *>(em_dsm + (em_rb - em_smem(em_dsm))) + tid;");
  ws_share_add(c, k, sk, threads, 0, NULL, "em_rv[", "em_p", "]");
  c->indent--;
  ex_line(c, "}");
  ex_line(c, "__syncwarp();");
  /* EMMY_CLUSTER_LATE (above) also leaves out the release after the CTA's last tile: the ranks of a tile take the
   * same tiles, so no peer waits for it, and a release at cluster scope is not free (the split is the cluster) */
  if (ws_cluster_late(c, 1, sk)) ex_line(c, "if (lane == 0 && em_t + (int)gridDim.x / %d < em_tiles)", sk);
  else ex_line(c, "if (lane == 0)");
  ex_line(c, "  for (unsigned em_q = 1; em_q < %du; em_q++) em_mbar_arrive_release(&em_rempty, (em_cr + em_q) %% %du);", sk, sk);
  ws_stamp(c, sp, "em_sx += em_clock() - em_q2;");
}

/* SPLIT_L2=1: ws_split_reduce's reduce-scatter through the launch scratch (L2) instead of distributed shared memory,
 * so no cluster is launched. The group's SPLIT_K consecutive CTAs (rank em_cr = blockIdx.x % SPLIT_K) take one tile's
 * K parts. Each writes the fragments of the columns the other ranks own to its slot (float4 ((o * nacc + s) *
 * FN/SPLIT_K + j % (FN/SPLIT_K)) * threads + tid for owner o, a warp's store 512 contiguous bytes, kept in L2),
 * meets the other consumers at named barrier 1, and thread o raises flag [this CTA][o] (st.release.gpu after the
 * barrier, as CUTLASS's split-K barrier does); threads of the peers' ranks wait for flags [peer][em_cr]
 * (ld.acquire.gpu), the consumers meet and add the peers' parts in rank order from the next one on (the same sum
 * every run); after the epilogue they meet again and lower those flags (ws_split_lower_l2). From its second tile on a
 * CTA first waits for its own flags to be down (its owners have read its last parts). Every flag raised in a launch
 * is lowered in it, so the flags are zero at every launch (the launcher zeroes the scratch once). sp: STAMP=1 (em_sq
 * the stores and the wait for the owners, em_sv the wait for the peers, em_sx the reads). */
static void ws_split_reduce_l2(ectx *c, const ex_ctr *k, int cw, int sk, int sp) {
  int threads = 32 * cw, nst = k->dual ? 2 : 1, fs = k->FN / sk;
  long long slot = (long long)k->BM * k->BN * nst / 4; /* float4s */
  const char *peer = ex_A(c, "if (tid < %d && tid != (int)em_cr)", sk);
  const char *bar = ex_A(c, "asm volatile(\"bar.sync 1, %d;\" ::: \"memory\");", threads);
  ws_split_zero(c, k);
  ws_stamp(c, sp, "const unsigned em_q0 = em_clock();");
  ex_line(c, "float4 *const em_lw = reinterpret_cast<float4 *>(em_lb) + (long long)blockIdx.x * %lldLL + tid; /* this CTA's slot */", slot);
  ex_line(c, "unsigned *const em_lf = reinterpret_cast<unsigned *>(em_lb + (long long)gridDim.x * %lldLL); /* flags [sender][owner] */",
          4 * slot);
  ex_line(c, "const int em_lg = (int)blockIdx.x - (int)em_cr; /* the group's first CTA */");
  ex_line(c, "if (em_n != 0u) { /* the owners have read this CTA's last parts */");
  ex_line(c, "  %s em_flag_wait(em_lf + blockIdx.x * %d + tid, 0u);", peer, sk);
  ex_line(c, "  %s", bar);
  ex_line(c, "}");
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int j = 0; j < %d; j++) {", k->FN);
  c->indent++;
  ex_line(c, "const int em_o = j / %d;", fs);
  ex_line(c, "if (em_o == (int)em_cr) continue;");
  for (int s = 0; s < nst; s++) {
    const char *a = s ? "acc2" : "acc";
    ex_line(c, "__stcg(em_lw + ((em_o * %d + %d) * %d + j %% %d) * %d, make_float4(%s[0][j][0], %s[0][j][1], %s[0][j][2], %s[0][j][3]));",
            nst, s, fs, fs, threads, a, a, a, a);
  }
  c->indent--;
  ex_line(c, "}");
  ex_line(c, "%s", bar);
  ex_line(c, "%s em_flag_set(em_lf + blockIdx.x * %d + tid, 1u);", peer, sk);
  ws_stamp(c, sp, "const unsigned em_q1 = em_clock();");
  ex_line(c, "%s em_flag_wait(em_lf + (em_lg + tid) * %d + (int)em_cr, 1u); /* the peers' parts of this rank's columns */", peer, sk);
  ex_line(c, "%s", bar);
  ws_stamp(c, sp, "const unsigned em_q2 = em_clock();");
  ws_stamp(c, sp, "em_sq += em_q1 - em_q0, em_sv += em_q2 - em_q1;");
  ws_share_add(c, k, sk, threads, 1,
               ex_A(c, "const float4 *const em_lr = reinterpret_cast<const float4 *>(em_lb) + (long long)(em_lg + ((int)em_cr + em_p) %% %d) * %lldLL + tid;",
                    sk, slot),
               "__ldcg(em_lr + ", "(int)em_cr", ")");
  ws_stamp(c, sp, "em_sx += em_clock() - em_q2;");
}

/* SPLIT_L2=1, after the epilogue (off the tile's path): once every consumer has read the peers' parts (named barrier
 * 1), the flags they raised for this rank are lowered (st.release.gpu 0), so each may write its slot again. */
static void ws_split_lower_l2(ectx *c, int cw, int sk) {
  ex_line(c, "asm volatile(\"bar.sync 1, %d;\" ::: \"memory\");", 32 * cw);
  ex_line(c, "if (tid < %d && tid != (int)em_cr) em_flag_set(em_lf + (em_lg + tid) * %d + (int)em_cr, 0u); /* read */", sk, sk);
}

/* EMMY_EARLY_REL=1 (an experiment, compile time; emitted CUDA unchanged without it): a consumer warp about to wait for
 * a stage that has not landed first retires its wgmma group of the step before (wait_group 0) and releases that
 * step's stage, instead of holding it until its next group is issued. The H200's stamps put the persistent rings'
 * feed at about the bytes in flight over ~2,400 cycles (Little's law: Qwen3 down 8 of 12 stages in flight with the
 * wgmma, 58 B/clk an SM; 12 without it, 72 B/clk): a stage held while its consumer waits for the next is a stage
 * not loading. Where the stage has landed, the step runs as before (one group in flight across the boundary). The
 * warp decides as one (__all_sync), so each of its releases is made once. Returns whether it is on. */
static int ws_early_rel(ectx *c) { return ex_env_choice("EMMY_EARLY_REL", 1); }

/* Before the step's full-barrier wait on stage st (parity expression par): under EMMY_EARLY_REL, em_rd = whether the stage has
 * landed; where not, the step before retired and released (cond, prev: as for the release after the step). */
static void ws_early_release(ectx *c, const char *par, const char *cond, const char *prev, int stages, int cl) {
  if (!ws_early_rel(c)) return;
  ex_line(c, "unsigned em_rd;");
  ex_line(c, "asm volatile(\"{ .reg .pred p; mbarrier.test_wait.parity.shared::cta.b64 p, [%%1], %%2; selp.u32 %%0, 1, 0, p; }\" "
             ": \"=r\"(em_rd) : \"r\"(em_smem(&em_bar[st])), \"r\"(%s) : \"memory\");", par);
  ex_line(c, "em_rd = __all_sync(0xffffffffu, em_rd); /* EMMY_EARLY_REL: landed for the whole warp */");
  ex_line(c, "if (!em_rd) {");
  c->indent++;
  ex_line(c, "em_wg_wait0();");
  ws_release(c, cond, prev, stages, cl);
  c->indent--;
  ex_line(c, "}");
}

/* The release after a step: the early one's condition added under EMMY_EARLY_REL (not made twice). */
static const char *ws_late_cond(ectx *c, const char *cond) { return ws_early_rel(c) ? ex_A(c, "em_rd && %s", cond) : cond; }

/* WG_K=2: the tile's k-steps dealt between two consumer warpgroups of one 64-row tile, group em_g taking steps
 * em_g, em_g + 2, … into its own accumulators (its first step with scale-d 0), each releasing the stages it read;
 * em_it still counts every k-step of the tile, so the ring's phases stay the producer's. cuBLAS's 64 x 64 kernels
 * at 512 tokens run so (384 threads a CTA: a producer and two consumer warpgroups). */
static void ws_kgroup_loop(ectx *c, const ex_ctr *k, int stages, int cl, int sp) {
  long long abytes = 128LL * k->BM;
  ex_line(c, "for (int kt = em_g; kt < nk; kt += 2) {");
  c->indent++;
  ex_line(c, "const int em_u = em_it + kt, st = em_u %% %d;", stages);
  ws_stamp(c, sp, "const unsigned em_c0 = em_clock();");
  ws_early_release(c, ex_A(c, "(unsigned)(em_u / %d) & 1u", stages), "kt >= em_g + 2 && ", "em_u - 2", stages, cl);
  ex_line(c, "em_mbar_wait(&em_bar[st], (unsigned)(em_u / %d) & 1u);", stages);
  ws_stamp(c, sp, "const unsigned em_c1 = em_clock();");
  const char *aS = ex_A(c, "(em_sb + st * %lldu)", abytes);
  const char *bS = ex_ctr_b_stage(c, k, stages, 0), *b2S = ex_ctr_b_stage(c, k, stages, 1);
  ws_mma_step(c, k, aS, bS, b2S, "((kt - em_g) | kk)");
  ex_line(c, "em_wg_wait1();");
  ws_stamp(c, sp, "const unsigned em_c2 = em_clock();");
  ws_release(c, ws_late_cond(c, "kt >= em_g + 2 && "), "em_u - 2", stages, cl);
  ws_stamp(c, sp, "em_sw += em_c1 - em_c0, em_sm += em_c2 - em_c1, em_sr += em_clock() - em_c2, em_sk++;");
  c->indent--;
  ex_line(c, "}");
  ws_stamp(c, sp, "const unsigned em_c3 = em_clock();");
  ex_line(c, "em_wg_wait0();");
  ws_release(c, "em_g < nk && ", "em_it + nk - 1 - ((nk - 1 - em_g) & 1)", stages, cl);
  ex_line(c, "em_it += nk;");
}

/* WG_K=2 with EPI_SMEM=5: K group 0 issues every 16-byte residual load of its tile's epilogue (ws_chunk_slot, each
 * half's chunks) before its K loop, so their latency is under the loop instead of after it (the group keeps 32
 * accumulators a thread: room for the 16-32 registers). Emits the loads where there is a residual and returns 1, else
 * 0. Measured against the loads after the loop (docs/performance.md, twenty-fourth session): Qwen3 o_proj in the
 * layer 8.2 -> 7.9 us, the layer 70.8 -> 70.5. */
static int ws_kgroup_ahead(ectx *c, const ex_ctr *k, int split) {
  if (ex_ctr_residual(c, k) < 0) return 0;
  if (split) {
    /* (WG_K=2 split: each group its own columns' chunks, every one of them: BN 64 has two a thread) */
    const ws_part pt = {128, 0, k->BN / 2, 128 * k->BM, ex_A(c, "em_g * %d", k->BN / 2)};
    return ws_chunk_prefetch(c, k, &pt) > 0;
  }
  int parts = k->BN >= 128 ? 2 : 1, half = k->BN / parts, nch = k->BM * (half / 8) / 128;
  for (int h = 0; h < parts; h++) {
    ex_line(c, "uint4 em_rqa%d[%d];", h, nch);
    ex_line(c, "bool em_rva%d[%d];", h, nch);
  }
  ex_line(c, "if (em_g == 0) {");
  c->indent++;
  for (int h = 0; h < parts; h++) {
    ex_line(c, "#pragma unroll");
    ex_line(c, "for (int em_i = 0; em_i < %d; em_i++) {", nch);
    c->indent++;
    const ws_part pt = {128, h, half, 128 * k->BM, NULL};
    ws_chunk_slot(c, k, &pt, "em_i");
    c->indent--;
    ex_line(c, "}");
  }
  c->indent--;
  ex_line(c, "}");
  return 1;
}

/* WG_K=2's hand-over at a tile's end: group 1 writes its accumulators into the buffer em_kr (float4 j of thread t at
 * j * 128 + t: a warp's store 512 contiguous bytes), arrives on named barrier 3 and goes on to its next tile; group
 * 0 waits there, adds them to its own (the same sum every run) and runs the epilogue. Group 1 rewrites the buffer
 * only after named barrier 2, where group 0 arrives once it has read it and another tile follows (em_kn: tiles
 * handed over). */
static void ws_kgroup_handover(ectx *c, const ex_ctr *k, int cl) {
  int nst = k->dual ? 2 : 1;
  ex_line(c, "float4 *const em_kv = reinterpret_cast<float4 *>(em_dsm + (em_kr - em_smem(em_dsm))) + tid;");
  ex_line(c, "if (em_g == 1) {");
  ex_line(c, "  if (em_kn++) asm volatile(\"bar.sync 2, 256;\" ::: \"memory\");");
  ex_line(c, "  #pragma unroll");
  ex_line(c, "  for (int j = 0; j < %d; j++) {", k->FN);
  for (int s = 0; s < nst; s++) {
    const char *a = s ? "acc2" : "acc";
    ex_line(c, "    em_kv[(j + %d) * 128] = make_float4(%s[0][j][0], %s[0][j][1], %s[0][j][2], %s[0][j][3]);", s * k->FN, a, a, a, a);
  }
  ex_line(c, "  }");
  ex_line(c, "  asm volatile(\"bar.arrive 3, 256;\" ::: \"memory\");");
  ex_line(c, "  continue;");
  ex_line(c, "}");
  ex_line(c, "asm volatile(\"bar.sync 3, 256;\" ::: \"memory\");");
  ws_acc_add(c, k, "em_kv", 128);
  ex_line(c, "if (em_t + %s < %s) asm volatile(\"bar.arrive 2, 256;\" ::: \"memory\");", cl == 2 ? "gridDim.x / 2" : "gridDim.x",
          cl == 2 ? "em_pairs" : "em_tiles");
}

/* WG_K=2's tile epilogue split between the two K groups by columns (BN 64, EPI_SMEM=5; docs/performance.md, twenty-
 * sixth session): each group hands the other the partial sums of the other's half of the columns (ws_kgroup_exchange)
 * and adds the other's into its own half, stages its half in the one panel and stores its chunks, its residual
 * loaded before its K loop (ws_kgroup_split_epilogue) — the exchange and the epilogue each half of group 0's alone
 * after a whole hand-over, at the price of group 1 no longer going on to its next tile at once (the 512-token
 * one-wave kernels have one tile a CTA). The hand-over and epilogue took 1,955 cycles a tile against 1,413 for one
 * warpgroup's epilogue (Qwen3 down, docs/performance.md, twenty-fourth session). */
static int ws_kg_split(const ex_ctr *k, int staged) {
  return staged == 5 && k->BN == 64;
}

/* The split epilogue's exchange: group g writes the fragments of the other group's columns into its region of em_kr (float4
 * slot (g * nacc + s) * FN/2 + j of thread t at slot * 128 + t), both meet at named barrier 3, and each adds the
 * other's region into its own columns (the same sum every run). Named barrier 2 first from the second tile on: the
 * last tile's regions read. Each group's columns as constants in its own branch (the accumulators stay registers). */
static void ws_kgroup_exchange(ectx *c, const ex_ctr *k) {
  int nst = k->dual ? 2 : 1, hf = k->FN / 2;
  ex_line(c, "float4 *const em_kv = reinterpret_cast<float4 *>(em_dsm + (em_kr - em_smem(em_dsm))) + tid;");
  ex_line(c, "if (em_kn++) asm volatile(\"bar.sync 2, 256;\" ::: \"memory\");");
  for (int pass = 0; pass < 2; pass++) {
    if (pass) ex_line(c, "asm volatile(\"bar.sync 3, 256;\" ::: \"memory\");");
    for (int g = 0; g < 2; g++) {
      ex_line(c, g ? "} else {" : "if (em_g == 0) {");
      ex_line(c, "  #pragma unroll");
      ex_line(c, "  for (int j = 0; j < %d; j++) {", hf);
      for (int s = 0; s < nst; s++) {
        const char *a = s ? "acc2" : "acc";
        if (!pass) {
          int jo = (1 - g) * hf; /* the other group's columns, into this group's region */
          ex_line(c, "    em_kv[(%d + j) * 128] = make_float4(%s[0][j + %d][0], %s[0][j + %d][1], %s[0][j + %d][2], %s[0][j + %d][3]);",
                  (g * nst + s) * hf, a, jo, a, jo, a, jo, a, jo);
        } else {
          int jo = g * hf; /* this group's columns, from the other's region */
          ex_line(c, "    const float4 em_x%d = em_kv[(%d + j) * 128];", s, ((1 - g) * nst + s) * hf);
          ex_line(c, "    %s[0][j + %d][0] += em_x%d.x, %s[0][j + %d][1] += em_x%d.y, %s[0][j + %d][2] += em_x%d.z, %s[0][j + %d][3] += em_x%d.w;",
                  a, jo, s, a, jo, s, a, jo, s, a, jo, s);
        }
      }
      ex_line(c, "  }");
    }
    ex_line(c, "}");
  }
}

/* The split epilogue: each group stages its columns of the tile in the one panel (its own named barrier on both
 * sides: 1 for group 0, 4 for group 1) and stores their chunks; ahead: the residual loaded before the K loop. */
static void ws_kgroup_split_epilogue(ectx *c, const ex_ctr *k, int ahead) {
  int hf = k->FN / 2, panel = 128 * k->BM;
  const char *bar = "if (em_g == 0) asm volatile(\"bar.sync 1, 128;\" ::: \"memory\"); else asm volatile(\"bar.sync 4, 128;\" ::: \"memory\");";
  ex_line(c, "%s", bar);
  ex_line(c, "if (em_g == 0) {");
  c->indent++;
  ws_stage_frags(c, k, 0, hf, 0, panel);
  c->indent--;
  ex_line(c, "} else {");
  c->indent++;
  ws_stage_frags(c, k, hf, k->FN, 0, panel);
  c->indent--;
  ex_line(c, "}");
  const ws_part pt = {128, 0, k->BN / 2, panel, ex_A(c, "em_g * %d", k->BN / 2)};
  int pre = ahead ? k->BM * (pt.half / 8) / 128 : ws_chunk_prefetch(c, k, &pt);
  ex_line(c, "%s", bar);
  ws_chunk_stores(c, k, &pt, pre);
}

/* The consumers: per tile, every k-slice's wgmma group on its full stage with one group in flight (the stage of
 * the step before is released once wait_group 1 retired it), then the last release and the epilogue. The first
 * k-slice's wgmma starts the accumulators at zero (scale-d = (kt | kk) != 0), so no tile clears them. tmo: the
 * output's tensor map (EPI_SMEM=4, 7); heads: EPI_SMEM=7 into heads (ws_heads_view), else -1; sp: STAMP=1. */
/* WG_PP=1 (ping-pong): consumer warpgroup g takes the CTA's tiles g, g + 2, ... (every 2 * gridDim.x-th tile from
 * blockIdx.x + g * gridDim.x), their ring uses where the producer (every tile of the CTA, in order) put them: tile
 * number i's from i * nk. The K loops go in turn: tile i's waits for tile i - 1's (named barrier 4 + its warpgroup:
 * the other's arrival and this one's wait, 256 threads), so a warpgroup waits on a stage only once every earlier use
 * of it is complete (a parity wait reads the current or the previous phase) and its epilogue runs under the other's
 * K loop. */
static void ws_pingpong_loop(ectx *c) {
  ex_line(c, "for (int em_t = blockIdx.x + em_g * gridDim.x; em_t < em_tiles; em_t += 2 * gridDim.x) {");
}

static void ws_pingpong_tile(ectx *c, int sp) {
  ex_line(c, "const int em_i = (em_t - (int)blockIdx.x) / (int)gridDim.x; /* WG_PP: the tile's number in the CTA's */");
  ex_line(c, "em_it = em_i * nk;");
  ws_stamp(c, sp, "em_sk += nk;");
}

/* The staged halves (EPI_SMEM 3, 5) of merged siblings: the tile's sibling picked once, on n0, and its halves staged
 * and stored as its own linear's (its columns counted from its first). */
static void ws_concat_halves(ectx *c, const ex_ctr *k, int cw, int staged) {
  for (int j = 0; j < k->nsib && !c->failed; j++) {
    ex_ctr kj = ex_ctr_sibling(c, k, j);
    c->indent++;
    ws_epilogue_halves(c, &kj, cw, staged, -1, 0);
    c->indent--;
  }
  ex_line(c, "}");
}

static void ws_consumers(ectx *c, const ex_ctr *k, em_launch *L, int stages, int raster, int staged, int cl, int sk, int tmo,
                         int heads, int sp) {
  long long abytes = 128LL * k->BM;
  const int wgk = EX_KNOB(c, WG_K), pp = EX_KNOB(c, WG_PP), two = wgk == 2 || pp;
  ex_line(c, "asm volatile(\"setmaxnreg.inc.sync.aligned.u32 %d;\");", WS_CONSUMER_REGS);
  if (two) {
    /* (WG_K=2, WG_PP=1: each warpgroup sees itself as the tile's one warpgroup: its own thread and warp numbers) */
    ex_line(c, "const int em_g = wid >> 2;");
    ex_line(c, "{");
    c->indent++;
    ex_line(c, "const int tid = threadIdx.x & 127, wid = tid >> 5;");
    if (wgk == 2) ex_line(c, "unsigned em_kn = 0; /* WG_K=2: tiles handed over */");
  }
  ex_line(c, "const int wm = wid, wn = 0;");
  ex_line(c, "float acc[1][%d][4];", k->FN);
  if (k->dual) ex_line(c, "float acc2[1][%d][4];", k->FN);
  ex_line(c, "int em_it = 0;");
  /* the fragment epilogue's view of the tile: the split's reduction is done here (SPLIT_K: each rank its share of
   * the columns), and a residual it adds is loaded into registers before the tile's K loop */
  ex_ctr k1 = *k;
  k1.SK = 1;
  if (sk >= 2 && !staged) k1.jkeep = ex_A(c, "j / %d == (int)em_cr", k->FN / sk);
  k1.rpf = staged && staged != 7 ? -1 : ex_ctr_residual(c, k); /* (7: the fragments' values, staged for TMA) */
  k1.stage_reg = (!staged || staged == 7) && ex_ctr_stage_width(c, k) > 0; /* RoPE from the thread's own fragments */
  if (k1.rpf >= 0) ex_line(c, "unsigned em_pf[%d][2]; /* the residual's column pairs, loaded ahead */", k->FN);
  k1.npf = 0, k1.pfp = k->FN;
  if (k1.stage_reg) ex_ctr_prefetch(c, &k1); /* RoPE's cos and sin, loaded ahead too */
  for (int t = 0; t < k1.npf; t++) ex_line(c, "unsigned em_pf%d[%d][2]; /* %s's column pairs, loaded ahead */", t + 1, k1.pfp, ex_V(c, k1.pfv[t])->name);
  ws_stamp(c, sp, "unsigned em_sn = 0, em_sw = 0, em_sm = 0, em_sr = 0, em_stl = 0, em_se = 0, em_sh = 0; /* STAMP: see WS_STAMP_FIELDS */");
  if (sk >= 2 && !staged) ws_stamp(c, sp, "unsigned em_sq = 0, em_sv = 0, em_sx = 0; /* STAMP: the reduce-scatter's stores, its wait, its reads and release */");
  if (two) ws_stamp(c, sp, "unsigned em_sk = 0; /* STAMP: this warpgroup's k-steps */");
  ws_stamp(c, sp, "const unsigned em_s0 = em_clock();");
  if (ws_split_l2(c, sk)) ex_line(c, "unsigned em_n = 0; /* SPLIT_L2: the tiles reduced (from the second on, a slot is rewritten) */");
  else if (sk >= 2)
    ex_line(c, staged ? "unsigned em_n = 0; /* SPLIT_K=2: the tiles handed over, the parity of em_rfull / em_rempty */"
                      : "unsigned em_n = 0; /* SPLIT_K: the tiles reduced, the parity of em_rfull / em_rempty */");
  if (staged == 6) ex_line(c, "long long em_pm0 = -1, em_pn0 = 0; /* EPI_SMEM=6: the staged tile's origin */");
  if (pp) ws_pingpong_loop(c);
  else ws_tile_loop(c, cl, sk);
  c->indent++;
  ws_tile_coords(c, &k1, raster, cl);
  if (pp) ws_pingpong_tile(c, sp);
  const char *nkv = ws_k_range(c, sk);
  ws_stamp(c, sp, "em_sn++;");
  ws_stamp(c, sp, "const unsigned em_c5 = em_clock(); /* STAMP: the tile's head, to its K loop */");
  /* A 128 x 256 tile's residual pairs are loaded half before the K loop and half after it, under the last wgmma
   * group: the 64 registers of all of them beside the 128 accumulators spill 52 bytes at 232 a consumer thread, half
   * of them none (nvcc -Xptxas -v), and the split is faster at every residual kernel of 4096 tokens measured
   * (docs/performance.md, twenty-third session) */
  int pfs = k1.rpf >= 0 && !k1.npf && sk == 1 && k->FN >= 32 ? k->FN / 2 : k->FN;
  if (k1.rpf >= 0 || k1.npf) ex_ctr_residual_load(c, &k1, 0, pfs);
  if (pp) ex_line(c, "if (em_i >= 1) asm volatile(\"bar.sync %%0, 256;\" :: \"r\"(5 - em_g) : \"memory\"); /* WG_PP: the other warpgroup's K loop is done */");
  ws_stamp(c, sp, "em_sh += em_clock() - em_c5;");
  const int skm = EX_KNOB(c, STREAM_K);
  const int kg_split = wgk == 2 && ws_kg_split(k, staged);
  const int kg_ahead = wgk == 2 && staged == 5 && ws_kgroup_ahead(c, k, kg_split);
  if (wgk == 2) {
    ws_kgroup_loop(c, k, stages, cl, sp);
  } else {
  ex_line(c, "for (int kt = %s; kt < %s; kt++, em_it++) {", ws_k_first(c), nkv);
  c->indent++;
  ex_line(c, "const int st = em_it %% %d;", stages);
  ws_stamp(c, sp, "const unsigned em_c0 = em_clock();");
  ws_early_release(c, ex_A(c, "(unsigned)(em_it / %d) & 1u", stages), skm ? "kt > em_kb && " : "kt >= 1 && ", "em_it - 1", stages, cl);
  ex_line(c, "em_mbar_wait(&em_bar[st], (unsigned)(em_it / %d) & 1u);", stages);
  ws_stamp(c, sp, "const unsigned em_c1 = em_clock();");
  const char *aS = ex_A(c, "(em_sb + st * %lldu)", abytes);
  const char *bS = ex_ctr_b_stage(c, k, stages, 0), *b2S = ex_ctr_b_stage(c, k, stages, 1);
  ws_mma_step(c, k, aS, bS, b2S, skm ? "((kt - em_kb) | kk)" : "(kt | kk)");
  if (staged == 6) ws_deferred_chunk(c, k, k->BM / 16 * 32, ex_A(c, "em_pm0 >= 0 && kt < %d", ws_deferred_chunks(k, k->BM / 16 * 32)), "kt");
  ex_line(c, "em_wg_wait1();");
  ws_stamp(c, sp, "const unsigned em_c2 = em_clock();");
  ws_release(c, ws_late_cond(c, skm ? "kt > em_kb && " : "kt >= 1 && "), "em_it - 1", stages, cl);
  ws_stamp(c, sp, "em_sw += em_c1 - em_c0, em_sm += em_c2 - em_c1, em_sr += em_clock() - em_c2;");
  c->indent--;
  ex_line(c, "}");
  ws_stamp(c, sp, "const unsigned em_c3 = em_clock();");
  if (pfs < k->FN) ex_ctr_residual_load(c, &k1, pfs, k->FN);
  ex_line(c, "em_wg_wait0();");
  ws_release(c, skm ? "em_ke > em_kb && " : sk >= 2 ? "nkc >= 1 && " : "nk >= 1 && ", "em_it - 1", stages, cl);
  }
  /* WG_PP=1: the K loop of the CTA's next tile (the other warpgroup's) may start */
  if (pp) ex_line(c, "if (em_t + (int)gridDim.x < em_tiles) asm volatile(\"bar.arrive %%0, 256;\" :: \"r\"(4 + em_g) : \"memory\");");
  /* EMMY_PDL=3 (an experiment): the next kernel may launch once every CTA's consumers are past their last tile's K
   * loop, so its launch and prologue overlap this grid's last epilogues */
  if (ex_pdl_mode() == 3 && !skm && !pp)
    ex_line(c, "if (em_t + gridDim.x / %d >= %s) asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\");",
            cl == 2 ? 2 : sk >= 2 ? sk : 1, cl == 2 ? "em_pairs" : "em_tiles");
  ws_stamp(c, sp, "const unsigned em_c4 = em_clock();");
  /* a stream-K piece: hand over (STAMP: its marks taken before it leaves the item), or gather and go on to the epilogue */
  if (skm)
    ex_sk_fixup(c, k, k->BM / 16, sp ? "em_skb" : "em_scratch", sp ? "em_stl += em_c4 - em_c3, em_se += em_clock() - em_c4;" : NULL);
  if (kg_split) ws_kgroup_exchange(c, k);
  else if (wgk == 2) ws_kgroup_handover(c, k, cl);
  if (ws_cluster_late(c, cl, sk)) ws_cluster_wait_once(c);
  if (ws_split_l2(c, sk)) {
    ws_split_reduce_l2(c, k, k->BM / 16, sk, sp);
  } else if (sk >= 2 && !staged) {
    ws_split_reduce(c, k, k->BM / 16, sk, sp);
  } else if (sk == 2) {
    ws_split_handover(c, k, k->BM / 16);
  }
  if (staged == 7) ws_epilogue_tma_fused(c, &k1, k->BM / 16, tmo, heads);
  else if (kg_split) ws_kgroup_split_epilogue(c, k, kg_ahead);
  else if (staged >= 3 && k->concat) ws_concat_halves(c, k, k->BM / 16, staged);
  else if (staged >= 3) ws_epilogue_halves(c, k, k->BM / 16, staged, tmo, kg_ahead);
  else if (staged) ws_epilogue(c, k, k->BM / 16, staged, ex_ctr_stage_width(c, k));
  else ex_ctr_epilogue(c, &k1, L); /* each thread's fragments, in place */
  if (sk == 2 && staged) {
    c->indent--;
    ex_line(c, "}");
  }
  if (ws_split_l2(c, sk)) ws_split_lower_l2(c, k->BM / 16, sk);
  if (sk >= 2) ex_line(c, "em_n++;");
  ws_stamp(c, sp, "em_stl += em_c4 - em_c3, em_se += em_clock() - em_c4;");
  c->indent--;
  ex_line(c, "}");
  /* (the CTA may not leave while its last stores read shared memory) */
  if (staged == 4 || staged == 7) ex_line(c, "if (tid == 0) em_bulk_wait0();");
  if (staged == 6) ws_deferred_flush(c, k, k->BM / 16 * 32, "0");
  if (sp) {
    ex_line(c, "if ((tid & 127) == 0) {");
    ex_line(c, "  unsigned *const em_w = em_st + %s * %d;", two ? "em_g" : "(tid >> 7)", WS_STAMP_FIELDS);
    ex_line(c, "  em_w[0] = em_sn, em_w[1] = %s, em_w[2] = em_sw, em_w[3] = em_sm;", two ? "em_sk" : "(unsigned)em_it");
    ex_line(c, "  em_w[4] = em_sr, em_w[5] = em_stl, em_w[6] = em_se, em_w[7] = em_clock() - em_s0, em_w[8] = em_sh;");
    ex_line(c, "}");
    ex_line(c, two ? "if (em_g == 0 && tid == 0) {" : "if (tid == 0) {");
    ex_line(c, "  unsigned *const em_w = em_st + %d;", 3 * WS_STAMP_FIELDS);
    ex_line(c, "  const unsigned long long em_g1 = em_gtime();");
    ex_line(c, "  em_w[0] = (unsigned)em_g0, em_w[1] = (unsigned)(em_g0 >> 32), em_w[2] = (unsigned)em_g1, em_w[3] = (unsigned)(em_g1 >> 32);");
    ex_line(c, "  em_w[4] = em_s0 - em_e0, em_w[5] = %s, em_w[6] = %s, em_w[7] = %s, em_w[8] = 0u, em_w[9] = 1u;",
            sk >= 2 && !staged ? "em_sq" : "0u", sk >= 2 && !staged ? "em_sv" : "0u", sk >= 2 && !staged ? "em_sx" : "0u");
    ex_line(c, "}");
  }
  if (two) {
    c->indent--;
    ex_line(c, "}");
  }
}

/* WG_K=2 (two consumer warpgroups dealt a 64-row tile's k-steps) where the kernel allows it beyond the legality
 * table's rule: group 0 alone runs the epilogue, so nothing of it may be loaded into registers during the K loop (a
 * residual or RoPE's tables ahead of the fragment or TMA-fused epilogue). Returns 1 after ex_fail. */
static int ws_kgroups_refused(ectx *c, const ex_ctr *k, int wgk, int staged) {
  if (wgk == 1) return 0;
  int ahead = (!staged || staged == 7) && ex_ctr_residual(c, k) >= 0;
  if (!ahead && !(!staged && ex_ctr_stage_width(c, k) > 0)) return 0;
  ex_fail(c, "WG_K=2 deals a 64-row tile's k-steps to two consumer warpgroups: no residual or RoPE table loaded ahead "
             "(EPI_SMEM 0 or 7 with a residual, a RoPE from the fragments)");
  return 1;
}

/* The ring's shared memory: the dynamic buffer (1024-aligned) and the full/empty barriers. */
static void ws_shared_decls(ectx *c, int stages) {
  ex_line(c, "extern __shared__ __align__(1024) unsigned char em_dsm[];");
  ex_line(c, "__shared__ __align__(8) unsigned long long em_bar[%d], em_empty[%d];", stages, stages);
  ex_line(c, "const unsigned em_sb = (em_smem(em_dsm) + 1023u) & ~1023u;");
}

/* The barriers' initialisation, for the one thread the caller's condition picks. empty: a stage's releases (each
 * consumer warp of the one warpgroup set that used it: a K group, a WG_PP turn; of both CTAs with CLUSTER=2); the split's (SPLIT_K: the reduce-scatter's one expect_tx
 * arrival of the owner and a warp's release from each peer; SPLIT_K=2's staged hand-over, an arrival of every
 * consumer thread). */
static void ws_barrier_init(ectx *c, int stages, int empty, int sk, int staged, int cw) {
  ex_line(c, "for (int s = 0; s < %d; s++) em_mbar_init(&em_bar[s], 1);", stages);
  ex_line(c, "for (int s = 0; s < %d; s++) em_mbar_init(&em_empty[s], %d);", stages, empty);
  if (sk >= 2 && !staged) ex_line(c, "em_mbar_init(&em_rfull, 1), em_mbar_init(&em_rempty, %d);", cw * (sk - 1));
  else if (sk >= 2) ex_line(c, "em_mbar_init(&em_rfull, %d), em_mbar_init(&em_rempty, %d);", 32 * cw, 32 * cw);
  ex_line(c, "em_mbar_fence_init();");
}

/* The text of the kernel's N: the linear's, or merged siblings' widths together. */
static const char *ws_n_text(ectx *c, const ex_ctr *k, int c_expr) {
  if (k->concat) return ex_A(c, c_expr ? "%lldLL" : "%lld", (long long)k->sibOff[k->nsib]);
  if (c_expr) return ex_dim_c(c, &k->os->d[k->r - 1]);
  char buf[128];
  return ex_A(c, "%s", em_dim_format(&c->g->syms, &k->os->d[k->r - 1], buf, sizeof buf));
}

/* The M, N, K of the kernel's linear as C constants. */
static void ws_sizes(ectx *c, const ex_ctr *k) {
  const em_shape *as = ex_S(c, k->A_);
  ex_line(c, "const long long M = %s, N = %s, K = %s;", ex_numel_c(c, &k->mdims), ws_n_text(c, k, 1), ex_dim_c(c, &as->d[as->rank - 1]));
}

/* What the persistent pipeline needs of the graph beyond the legality table's rules (ctr_legal.c: the knobs'
 * combinations, merged siblings, the head-local epilogue's forms, the TMA-stored outputs): fails c and returns 1
 * where it does not build the kernel. Sets heads (EPI_SMEM=7 into heads: ws_heads_view, else -1), opos (the
 * TMA-stored output's position: EPI_SMEM 4, 7) and nout (the result's constant N where that epilogue needs it). */
static int ws_refused(ectx *c, const ex_ctr *k, int staged, int *heads, int *opos, int64_t *nout) {
  if (ex_ctr_stage_width(c, k) < 0 || ws_kgroups_refused(c, k, EX_KNOB(c, WG_K), staged)) return 1;
  if (ex_ctr_prologue_reductions(c, k)) { /* (a folded RMSNorm runs with every thread before the K loop) */
    ex_fail(c, "PERSIST=1: the persistent pipeline has no prologue phase (a folded RMSNorm, SPLIT_CONE=0)");
    return 1;
  }
  int two_byte = 1;
  for (int s = 0; s < (k->dual ? 2 : 1); s++) two_byte &= ex_V(c, k->sib[s])->dtype == EM_BF16 || ex_V(c, k->sib[s])->dtype == EM_F16;
  if (staged >= 3 && !two_byte) {
    ex_fail(c, "EPI_SMEM=%d stages the tile in halves of 2-byte results (bf16/f16)", staged);
    return 1;
  }
  /* (the table has checked both outputs: tma_store, tma_fused) */
  *heads = -1;
  *opos = staged == 4 ? ws_tma_store_output(c, k, nout) : staged == 7 ? ws_tma_fused_output(c, k, nout, heads) : -1;
  return 0;
}

/* The launch's block count and tensor-map boxes: a tile a CTA (the launcher caps the persistent grid at the SMs), a
 * pair a cluster (CLUSTER=2: each CTA loads half the shared tile), a k-tile a CTA (stream-K), SPLIT_K CTAs a tile. */
static void ws_grid(ectx *c, const ex_ctr *k, em_launch *L, int cl, int sk) {
  /* (the launcher's cap keeps the grid a multiple of the cluster) */
  L->persistent = cl == 2 ? 2 : ws_split_cluster(c, sk) ? sk : 1;
  L->group = ws_split_l2(c, sk) ? sk : 1;
  L->scratch_per_tile = 0; /* (SPLIT_K reduces in shared memory, not in the launch scratch of the other tiers) */
  const char *ntext = ws_n_text(c, k, 0);
  if (cl == 2 && EX_KNOB(c, PAIR_A)) {
    /* pairs of tile columns, two CTAs a pair; A's tensor map loads half a tile (each CTA its half, multicast) */
    snprintf(L->grid[0], sizeof L->grid[0], "cdiv(%s,%d)*cdiv(%s,%d)*2", ex_numel_text(c, &k->mdims), k->BM, ntext, 2 * k->BN);
    L->tmaps[0].box[1] = k->BM / 2;
    for (int b = 1; b <= (k->dual ? 2 : 1); b++) L->tmaps[b].box[1] = k->BN;
  } else if (cl == 2) {
    /* pairs of tile rows, two CTAs a pair; B's tensor map loads half a tile (each CTA its half, multicast) */
    snprintf(L->grid[0], sizeof L->grid[0], "cdiv(%s,%d)*cdiv(%s,%d)*2", ex_numel_text(c, &k->mdims), 2 * k->BM, ntext, k->BN);
    L->tmaps[0].box[1] = k->BM;
    for (int b = 1; b <= (k->concat ? k->nsib : k->dual ? 2 : 1); b++) L->tmaps[b].box[1] = ws_ring_cl(c, cl) == 2 ? k->BN / 2 : k->BN;
  } else if (EX_KNOB(c, STREAM_K)) {
    /* (stream-K: a CTA an SM, or one a k-tile where there are fewer) */
    const em_shape *as = ex_S(c, k->A_);
    snprintf(L->grid[0], sizeof L->grid[0], "cdiv(%s,%d)*cdiv(%s,%d)*cdiv(%s,64)", ex_numel_text(c, &k->mdims), k->BM, ntext, k->BN,
             em_dim_format(&c->g->syms, &as->d[as->rank - 1], (char[128]){0}, 128));
    L->scratch_per_tile = ex_sk_scratch_per_cta(k);
  } else {
    snprintf(L->grid[0], sizeof L->grid[0], "cdiv(%s,%d)*cdiv(%s,%d)%s", ex_numel_text(c, &k->mdims), k->BM, ntext, k->BN,
             sk == 2 ? "*2" : sk == 4 ? "*4" : "");
  }
  snprintf(L->grid[1], sizeof L->grid[1], "1");
  snprintf(L->grid[2], sizeof L->grid[2], "1");
}

void ex_k_contraction_ws(ectx *c, const ex_ctr *k, em_launch *L) {
  int stages = EX_KNOB(c, STAGES), raster = EX_KNOB(c, RASTER);
  int pp = EX_KNOB(c, WG_PP), wgk = EX_KNOB(c, WG_K);
  int cw = k->BM / 16 * wgk * (pp ? 2 : 1); /* consumer warps: a warpgroup per 64 rows (WG_K=2, WG_PP=1: two) */
  int staged = EX_KNOB(c, EPI_SMEM), cl = EX_KNOB(c, CLUSTER), sp = EX_KNOB(c, STAMP), sk = k->SK;
  int heads = -1, opos = -1;
  int64_t nout = 0;
  if (ws_refused(c, k, staged, &heads, &opos, &nout)) return;
  L->block[0] = 32 * cw + 128;
  ws_grid(c, k, L, cl, sk);
  int tmo = -1;
  if (staged == 4 || staged == 7) {
    /* the output as rows x N (a contiguous view folds its dims), a 64-column box of BM rows in the 128-byte swizzle */
    tmo = L->ntmaps++;
    L->tmaps[tmo].input = opos;
    L->tmaps[tmo].output = 1;
    L->tmaps[tmo].inner = nout;
    L->tmaps[tmo].box[0] = 64;
    L->tmaps[tmo].box[1] = k->BM;
    ex_use_prelude(c, ex_TMA_STORE_PRELUDE);
    if (heads >= 0) { /* (into heads: the output's own dims, [B, H, S, D] as (D, S, H, B)) */
      L->tmaps[tmo].own = 1;
      ex_use_prelude(c, ex_TMA_STORE4_PRELUDE);
    }
  }
  if (ws_split_l2(c, sk)) {
    /* SPLIT_L2=1: a slot of the tile's f32 partial sums a CTA (the parts of the other ranks' columns) and its flags */
    L->scratch_per_tile = 4LL * k->BM * k->BN * (k->dual ? 2 : 1) + 16;
    ex_use_prelude(c, ex_SPLIT_L2_PRELUDE);
  }
  if (sp) {
    /* per CTA (the launcher's grid is one CTA a "tile"): the records first, every CTA's, then stream-K's or
     * SPLIT_L2's part */
    L->scratch_per_tile += 4LL * WS_STAMP_FIELDS * WS_STAMP_ROLES;
    ex_use_prelude(c, ex_STAMP_PRELUDE);
  }
  ws_shared_decls(c, stages);
  em_ctr_smem S; /* (the ring, the staging buffers, the split's and WG_K's partial sums: ctr_legal.c) */
  em_ctr_tma_smem(c->kv, k->dual, &S);
  ws_staging(c, k, S.ring, staged, S.ep);
  L->smem = 1024 + S.ring + S.staging;
  if (ws_split_cluster(c, sk)) {
    /* the peers' partial accumulators (f32): EPI_SMEM=0, the parts of this rank's columns, SPLIT_K - 1 slots of
     * BM x BN / SPLIT_K; a staged epilogue (SPLIT_K=2), rank 1's whole tile in rank 0 */
    ex_use_prelude(c, ex_SPLIT_PRELUDE);
    if (!staged) ex_use_prelude(c, ex_SPLIT_ASYNC_PRELUDE);
    ex_line(c, "__shared__ __align__(8) unsigned long long em_rfull, em_rempty;");
    ex_line(c, "const unsigned em_rb = em_sb + %lldu;", (long long)L->smem - 1024);
    L->smem += S.split;
  }
  if (wgk == 2) {
    /* WG_K=2: K group 1's partial accumulators (f32), handed to group 0 at each tile's end */
    ex_line(c, "const unsigned em_kr = em_sb + %lldu;", (long long)L->smem - 1024);
    L->smem += S.kgroup;
  }
  if (sp) {
    ex_line(c, "unsigned *const em_st = reinterpret_cast<unsigned *>(em_scratch) + blockIdx.x * %d; /* STAMP: this CTA's record */",
            WS_STAMP_FIELDS * WS_STAMP_ROLES);
    ex_line(c, "const unsigned long long em_g0 = em_gtime(); const unsigned em_e0 = em_clock(); /* STAMP: the CTA's entry */");
    if (EX_KNOB(c, STREAM_K))
      ex_line(c, "float *const em_skb = em_scratch + (long long)gridDim.x * %d; /* STREAM_K: its slots and flags after the records */",
              WS_STAMP_FIELDS * WS_STAMP_ROLES);
  }
  if (ws_split_l2(c, sk))
    ex_line(c, sp ? "float *const em_lb = em_scratch + (long long)gridDim.x * %d; /* SPLIT_L2: its slots and flags after the records */"
                  : "float *const em_lb = em_scratch; /* SPLIT_L2: every CTA's slot, then their flags */",
            WS_STAMP_FIELDS * WS_STAMP_ROLES);
  ws_sizes(c, k);
  ex_line(c, "const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5;");
  ex_line(c, "const int nk = (int)((K + 63) / 64);");
  ws_tile_count(c, k, cl);
  if (EX_KNOB(c, STREAM_K)) ex_sk_schedule(c);
  if (cl == 2 || ws_split_cluster(c, sk)) ex_line(c, "const unsigned em_cr = em_cluster_rank();");
  else if (ws_split_l2(c, sk)) ex_line(c, "const unsigned em_cr = blockIdx.x %% %du; /* SPLIT_L2: this CTA's K part of its group's tile */", sk);
  ex_line(c, "if (tid == 0) {");
  c->indent++;
  ws_barrier_init(c, stages, k->BM / 16 * ws_ring_cl(c, cl), ws_split_cluster(c, sk) ? sk : 1, staged, cw);
  c->indent--;
  ex_line(c, "}");
  /* (a cluster: the peer's multicasts and arrivals may only reach barriers that are initialised) */
  if (ws_cluster_late(c, cl, sk)) {
    if (ws_split_relaxed())
      ex_line(c, "asm volatile(\"barrier.cluster.arrive.relaxed.aligned;\" ::: \"memory\"); /* the late cluster wait: waited before the first exchange (EMMY_SPLIT_RELAXED) */");
    else
      ex_line(c, "asm volatile(\"barrier.cluster.arrive.release.aligned;\" ::: \"memory\"); /* the late cluster wait: waited before the first exchange */");
    ex_line(c, "__syncthreads();");
    ex_line(c, "unsigned em_cw = 0u;");
  } else {
    ws_start_barrier(c, cl, sk);
  }
  ws_producer(c, k, stages, raster, cw, cl, sk, sp);
  ws_consumers(c, k, L, stages, raster, staged, cl, sk, tmo, heads, sp);
  if (cl == 2 || ws_split_cluster(c, sk)) {
    c->indent--;
    ex_line(c, "}");
    if (ws_cluster_late(c, cl, sk)) ws_cluster_wait_once(c);
    /* (a thread that has not waited: the producer warpgroup's others, any of a CTA with no tiles; not warp-aligned) */
    if (!ws_diag_nosync(c, cl) && !ws_split_noend(c, cl, sk) && !ws_cl2_noend(c, cl))
      ex_line(c, "em_cluster_sync(); /* no multicast or arrival may reach a CTA that has left */");
  }
}
