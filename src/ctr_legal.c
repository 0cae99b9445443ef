/* ctr_legal.c — the contraction's legality table (ctr_legal.h): a rule a part's requirement, each a predicate over
 * the knob plan and the graph's facts with its reason; the first that refuses names the reason, so the order is
 * the one `--explain` has always shown, the tier's tile last. A reason's %lld take the values the predicate puts
 * in its a[]. */
#include <stdio.h>
#include <string.h>

#include "ctr_legal.h"

#define K(NAME) kv[EM_KNOB_##NAME]

typedef int (*ctr_rule_fn)(const em_ctr_facts *f, const int64_t *kv, long long *a);

typedef struct {
  ctr_rule_fn refuses; /* 1 where the rule refuses the plan (a[]: the reason's values) */
  const char *reason;  /* a printf format of up to six %lld */
} ctr_rule;

/* merged siblings: several linears side by side along N (a dual pair shares the tile instead) */
static int concat(const em_ctr_facts *f) { return f->siblings > 1 && !f->dual; }

/* x is not a multiple of d (a d that is not positive divides nothing) */
static int off(int64_t x, int64_t d) { return d <= 0 || x % d != 0; }

/* transport: the cp.async ring and split-K's partial sums are the warp tier's; wgmma reads TMA's tiles */
static int async_mma(const em_ctr_facts *f, const int64_t *kv, long long *a) { return K(ASYNC) == 1 && K(MMA) != 1; }
static int split_mma(const em_ctr_facts *f, const int64_t *kv, long long *a) { return K(SPLIT_K) > 1 && K(MMA) != 1; }
static int wgmma_tma(const em_ctr_facts *f, const int64_t *kv, long long *a) {
  return K(WGMMA) == 1 && (K(TMA) != 1 || K(MMA) != 1);
}
static int wg_wait(const em_ctr_facts *f, const int64_t *kv, long long *a) {
  return K(WG_WAIT) == 1 && (K(WGMMA) != 1 || K(STAGES) < 2);
}

/* scheduler: stream-K and the split through L2 are the persistent pipeline's */
static int stream_k(const em_ctr_facts *f, const int64_t *kv, long long *a) {
  return K(STREAM_K) != 0 && (K(STREAM_K) != 1 || K(PERSIST) != 1 || K(SPLIT_K) != 1 || K(CLUSTER) != 1 ||
                              K(EPI_SMEM) == 6 || K(EPI_SMEM) == 7);
}
static int split_l2(const em_ctr_facts *f, const int64_t *kv, long long *a) {
  return K(SPLIT_L2) != 0 && (K(SPLIT_L2) != 1 || K(PERSIST) != 1 || (K(SPLIT_K) != 2 && K(SPLIT_K) != 4) ||
                              K(CLUSTER) != 1 || K(EPI_SMEM) != 0 || K(STREAM_K) != 0);
}

/* math: a dual pair's two weight tiles in one wgmma */
static int dual_wide(const em_ctr_facts *f, const int64_t *kv, long long *a) {
  return K(DUAL_WIDE) != 0 && (K(DUAL_WIDE) != 1 || !f->dual || K(WGMMA) != 1 || 2 * K(BN) > 256);
}

/* roles: two consumer warpgroups over K, or on alternate tiles */
static int wg_k(const em_ctr_facts *f, const int64_t *kv, long long *a) {
  return K(WG_K) != 1 && (K(WG_K) != 2 || K(PERSIST) != 1 || K(BM) != 64 || K(SPLIT_K) != 1 || K(STREAM_K) != 0 ||
                          K(EPI_SMEM) == 6 || (f->K > 0 && f->K <= 64) || K(STAGES) < 3);
}
static int wg_pp(const em_ctr_facts *f, const int64_t *kv, long long *a) {
  return K(WG_PP) != 0 && (K(WG_PP) != 1 || K(PERSIST) != 1 || K(BM) != 64 || K(WG_K) != 1 || K(SPLIT_K) != 1 ||
                           K(STREAM_K) != 0 || K(CLUSTER) != 1 || K(EPI_SMEM) != 0);
}

/* transport: clusters — the persistent pipeline's pairs of tiles (PAIR_A: sharing A), else wgmma's multicast pairs
 * along N */
static int pair_a(const em_ctr_facts *f, const int64_t *kv, long long *a) {
  return K(PAIR_A) != 0 && (K(PAIR_A) != 1 || K(PERSIST) != 1 || K(CLUSTER) != 2);
}
static int cluster_pairs(const em_ctr_facts *f, const int64_t *kv, long long *a) {
  a[0] = K(CLUSTER);
  return K(CLUSTER) != 1 && K(PERSIST) == 1 && K(CLUSTER) != 2;
}
static int cluster_multicast(const em_ctr_facts *f, const int64_t *kv, long long *a) {
  a[0] = K(CLUSTER);
  return K(CLUSTER) != 1 && K(PERSIST) != 1 &&
         (K(CLUSTER) != 2 || K(WGMMA) != 1 || K(TMA) != 1 || K(WG_WAIT) != 1 || K(STAGES) < 3 || K(SPLIT_K) != 1 ||
          K(RASTER) != 1);
}
static int cluster_merged(const em_ctr_facts *f, const int64_t *kv, long long *a) {
  return K(CLUSTER) != 1 && K(PERSIST) != 1 && concat(f);
}
static int cluster_odd(const em_ctr_facts *f, const int64_t *kv, long long *a) {
  if (K(CLUSTER) == 1 || K(PERSIST) == 1 || f->N <= 0 || K(BN) <= 0) return 0;
  a[0] = f->N, a[1] = (f->N + K(BN) - 1) / K(BN), a[2] = K(BN);
  return a[1] % 2 != 0;
}

/* roles: the producer warpgroup; (PERSIST=1 with SPLIT_K=2 or 4: the CTAs of a cluster take one tile's K parts,
 * CLUSTER=1; 4 reduces for the fragment epilogue only, EPI_SMEM=0) */
static int producer(const em_ctr_facts *f, const int64_t *kv, long long *a) {
  int64_t sk = K(SPLIT_K), e = K(EPI_SMEM);
  int split_ok = sk == 1 || (K(PERSIST) == 1 && K(CLUSTER) == 1 && ((sk == 2 && e != 6 && e != 7) || (sk == 4 && e == 0)));
  return K(PRODUCER) != 0 && (K(PRODUCER) != 1 || K(WGMMA) != 1 || K(TMA) != 1 || K(WG_WAIT) != 1 || K(STAGES) < 2 ||
                              !split_ok || (K(CLUSTER) != 1 && K(PERSIST) != 1));
}
/* SPLIT_K's reduce-scatter (PERSIST=1, EPI_SMEM=0; through a cluster or SPLIT_L2's scratch) deals each warp's column groups of 8 (BN/WN/8) to the split's
 * ranks in equal runs: the split must divide them (BN=80 with SPLIT_K=4 left two groups to a fifth rank, and the
 * launch failed: H100, forty-sixth session) */
static int split_cols(const em_ctr_facts *f, const int64_t *kv, long long *a) {
  int64_t fn = K(WN) > 0 ? K(BN) / K(WN) / 8 : 0;
  a[0] = K(SPLIT_K), a[1] = K(BN), a[2] = fn;
  return K(PERSIST) == 1 && K(SPLIT_K) > 1 && K(EPI_SMEM) == 0 && off(fn, K(SPLIT_K));
}
/* a head-local epilogue (RoPE) under the producer: the persistent pipeline's staged tile (EPI_SMEM 1, 2, fenced by
 * the consumers' named barrier), or EPI_SMEM 0, 7 reading the thread's own fragments where every column shift is a
 * multiple of 8 and the tile's columns are not split; no head-local reduction (the emitter's
 * ex_ctr_stage_in_regs) */
static int producer_stage(const em_ctr_facts *f, const int64_t *kv, long long *a) {
  int64_t e = K(EPI_SMEM);
  int regs = (e == 0 || e == 7) && f->stage_step % 8 == 0 && K(SPLIT_K) == 1;
  return K(PRODUCER) != 0 && f->stage > 0 && !(K(PERSIST) == 1 && (e == 1 || e == 2 || regs) && f->head_reductions == 0);
}

/* scheduler: the persistent pipeline; merged siblings in it */
static int persist(const em_ctr_facts *f, const int64_t *kv, long long *a) {
  return K(PERSIST) != 0 && (K(PERSIST) != 1 || K(PRODUCER) != 1 || (K(BM) != 64 && K(BM) != 128));
}
static int persist_merged(const em_ctr_facts *f, const int64_t *kv, long long *a) {
  int64_t e = K(EPI_SMEM);
  return K(PERSIST) != 0 && concat(f) &&
         (!(e == 0 || ((e == 3 || e == 5) && K(WG_K) == 1)) || (K(CLUSTER) != 1 && K(PAIR_A) != 0) || K(SPLIT_K) != 1 ||
          K(STREAM_K) != 0);
}

/* epilogue: the persistent pipeline's staged epilogues */
static int epi_persist(const em_ctr_facts *f, const int64_t *kv, long long *a) {
  return K(EPI_SMEM) != 0 && (K(EPI_SMEM) < 0 || K(EPI_SMEM) > 7 || K(PERSIST) != 1);
}
static int epi_panels(const em_ctr_facts *f, const int64_t *kv, long long *a) {
  a[0] = K(EPI_SMEM), a[1] = K(BN);
  return K(EPI_SMEM) >= 3 && K(BN) % 64 != 0;
}
static int epi_tma_fused(const em_ctr_facts *f, const int64_t *kv, long long *a) { return K(EPI_SMEM) == 7 && !f->tma_fused; }
static int epi_tma_store(const em_ctr_facts *f, const int64_t *kv, long long *a) { return K(EPI_SMEM) == 4 && !f->tma_store; }
static int epi_chunks(const em_ctr_facts *f, const int64_t *kv, long long *a) {
  a[0] = K(EPI_SMEM);
  return K(EPI_SMEM) >= 5 && off(f->N, 8);
}

/* transport: the ring's depth, the TMA box and its swizzle */
static int stages(const em_ctr_facts *f, const int64_t *kv, long long *a) {
  a[0] = K(STAGES);
  return K(STAGES) > 4 && (K(TMA) != 1 || K(WGMMA) != 1);
}
static int tma_ring(const em_ctr_facts *f, const int64_t *kv, long long *a) {
  return K(TMA) == 1 && (K(MMA) != 1 || K(ASYNC) != 1);
}
static int tma_bk(const em_ctr_facts *f, const int64_t *kv, long long *a) {
  a[0] = K(BK);
  return K(TMA) == 1 && K(BK) != 64;
}
static int tma_box(const em_ctr_facts *f, const int64_t *kv, long long *a) {
  a[0] = K(BM), a[1] = K(BN);
  return K(TMA) == 1 && (K(BM) > 256 || K(BN) > 256);
}
static int tma_pad(const em_ctr_facts *f, const int64_t *kv, long long *a) { return K(TMA) == 1 && K(PAD_SMEM) != 0; }
/* merged siblings: a tensor map a weight, each tile's B from one of them */
static int tma_widths(const em_ctr_facts *f, const int64_t *kv, long long *a) {
  if (K(TMA) != 1 || !concat(f)) return 0;
  for (int i = 0; i < f->nwidths; i++)
    if (off(f->widths[i], K(BN))) {
      a[0] = K(BN), a[1] = f->widths[i];
      return 1;
    }
  return 0;
}

/* epilogue: a head-local epilogue reads whole heads of the tile */
static int rope_heads(const em_ctr_facts *f, const int64_t *kv, long long *a) {
  a[0] = f->stage, a[1] = K(BN);
  return f->stage > 0 && K(BN) % f->stage != 0;
}

/* math: the tier's tile — mma.sync's warps of 16-row, 8-column fragments (wgmma: a warpgroup per 64 rows), the
 * scalar tier's register tiles */
static int mma_tile(const em_ctr_facts *f, const int64_t *kv, long long *a) {
  a[0] = K(BM), a[1] = K(BN), a[2] = K(BK), a[3] = K(WM), a[4] = K(WN);
  return K(MMA) != 0 && (off(K(BM), 16 * K(WM)) || off(K(BN), 16 * K(WN)) || K(BK) % 16 || K(BK) < 16);
}
static int wgmma_tile(const em_ctr_facts *f, const int64_t *kv, long long *a) {
  return K(MMA) != 0 && K(WGMMA) != 0 &&
         (K(WM) != K(BM) / 16 || K(WN) != 1 || (K(BM) != 64 && K(BM) != 128) || K(BN) % 16 || K(BN) > 256);
}
static int scalar_tile(const em_ctr_facts *f, const int64_t *kv, long long *a) {
  a[0] = K(BM), a[1] = K(BN), a[2] = K(TM), a[3] = K(TN);
  return K(MMA) == 0 && (off(K(BM), K(TM)) || off(K(BN), K(TN)));
}

/* math: a tile width that is not a power of two (80, 96, 192: one wave of 128-row tiles where N is 2560) is run in
 * the subset the GPU has checked — the persistent wgmma pipeline, one CTA a tile, the fragment epilogue */
static int odd_bn(const em_ctr_facts *f, const int64_t *kv, long long *a) {
  a[0] = K(BN);
  return (K(BN) & (K(BN) - 1)) != 0 && (K(WGMMA) != 1 || K(PERSIST) != 1 || K(EPI_SMEM) != 0 || K(SPLIT_K) != 1 ||
                                        K(STREAM_K) != 0 || K(SPLIT_L2) != 0 || K(CLUSTER) != 1 || K(WG_K) != 1 ||
                                        K(WG_PP) != 0);
}

static const ctr_rule rules[] = {
    {async_mma, "ASYNC=1 needs the warp tier (MMA=1)"},
    {split_mma, "SPLIT_K > 1 needs the warp tier (MMA=1)"},
    {wgmma_tma, "WGMMA=1 reads TMA-staged swizzled tiles (TMA=1)"},
    {wg_wait, "WG_WAIT=1 keeps a wgmma group in flight over a ring of 2+ stages (WGMMA=1, STAGES >= 2)"},
    {stream_k, "STREAM_K=1 shares the persistent pipeline's last tiles out by k-tiles (PERSIST=1, SPLIT_K=1, CLUSTER=1, "
               "not EPI_SMEM=6 or 7)"},
    {split_l2, "SPLIT_L2=1 sums the persistent pipeline's SPLIT_K parts through the launch scratch (PERSIST=1, SPLIT_K 2 "
               "or 4, CLUSTER=1, EPI_SMEM=0, STREAM_K=0)"},
    {dual_wide, "DUAL_WIDE=1 is one wgmma over a dual kernel's two adjacent weight tiles (WGMMA=1, a dual pair, 2·BN <= 256)"},
    {wg_k, "WG_K=2 deals a 64-row persistent tile's k-steps to two consumer warpgroups (PERSIST=1, BM=64, SPLIT_K=1, "
           "STREAM_K=0, EPI_SMEM not 6, K over 64: one k-step would leave the second group's sums unwritten; STAGES >= 3: "
           "a group frees its step u - 2 once it has waited for step u, one stage over a ring of 2)"},
    {wg_pp, "WG_PP=1 gives the persistent pipeline's two consumer warpgroups alternate 64-row tiles (PERSIST=1, BM=64, "
            "WG_K=1, SPLIT_K=1, STREAM_K=0, CLUSTER=1, EPI_SMEM=0)"},
    {pair_a, "PAIR_A=1 is the persistent pipeline's pair sharing A (PERSIST=1, CLUSTER=2)"},
    {cluster_pairs, "CLUSTER=%lld: the persistent pipeline's clusters are pairs"},
    {cluster_multicast, "CLUSTER=%lld multicasts wgmma's TMA tiles in pairs (CLUSTER=2 with WGMMA=1, TMA=1, WG_WAIT=1, "
                        "STAGES >= 3, SPLIT_K=1, RASTER=1)"},
    {cluster_merged, "CLUSTER=2: merged siblings are not clustered"},
    {cluster_odd, "CLUSTER=2 pairs N tiles: N=%lld makes %lld tiles of BN=%lld, an odd number"},
    {producer, "PRODUCER=1 feeds wgmma consumers from a producer warpgroup (WGMMA=1, TMA=1, WG_WAIT=1, STAGES >= 2, "
               "SPLIT_K=1 (2 with PERSIST=1 and CLUSTER=1 but not EPI_SMEM=6 or 7, 4 also with EPI_SMEM=0), CLUSTER=1 "
               "unless PERSIST=1)"},
    {split_cols, "SPLIT_K=%lld's reduce-scatter deals a warp's column groups of 8 in equal runs: BN=%lld makes %lld "
                 "groups, not a multiple"},
    {producer_stage, "PRODUCER=1 with a head-local (RoPE) epilogue: PERSIST=1 with EPI_SMEM 1 or 2 (or 0 or 7 with "
                     "SPLIT_K=1 and column shifts in multiples of 8) and no head-local reduction (the producer leaves "
                     "after its loop, so no block-barrier epilogue)"},
    {persist, "PERSIST=1 is the persistent producer/consumer pipeline (PRODUCER=1, BM 64 or 128)"},
    {persist_merged, "PERSIST=1 over merged siblings: the fragment epilogue or the staged halves stored by the threads, on "
                     "one CTA a tile or CLUSTER=2's pair of tile rows sharing B (EPI_SMEM 0, 3 or 5 (3, 5: WG_K=1), "
                     "PAIR_A=0, SPLIT_K=1, STREAM_K=0)"},
    {epi_persist, "EPI_SMEM=1..7 are the persistent pipeline's staged epilogues (PERSIST=1)"},
    {epi_panels, "EPI_SMEM=%lld stages the tile in two halves of whole 64-column panels (BN 64 in one part): BN=%lld is "
                 "not a multiple of 64"},
    {epi_tma_fused, "EPI_SMEM=7 stores the fused epilogue's one output by TMA: one linear, one bf16/f16 output of the "
                    "result's shape written at its own index (or of its heads view's, [B, H, S, D] with D a multiple of "
                    "64), N a constant multiple of 8"},
    {epi_tma_store, "EPI_SMEM=4 stores the tile by TMA: one output, the linear's result or a contiguous view of it (no "
                    "dual, no fused op), bf16/f16, N a constant multiple of 8"},
    {epi_chunks, "EPI_SMEM=%lld stores 8 columns a thread: N a constant multiple of 8"},
    {stages, "a ring of %lld stages is the wgmma tier's on TMA tiles (WGMMA=1, TMA=1); the others stop at 4"},
    {tma_ring, "TMA=1 stages the warp tier's ring (MMA=1, ASYNC=1)"},
    {tma_bk, "TMA=1 needs BK=64 (128-byte swizzled rows), got BK=%lld"},
    {tma_box, "TMA box rows BM=%lld, BN=%lld exceed 256"},
    {tma_pad, "TMA=1 tiles are swizzled, not padded (PAD_SMEM=0)"},
    {tma_widths, "merged siblings under TMA: BN=%lld does not divide a sibling's width %lld (a tile would straddle two "
                 "weights)"},
    {rope_heads, "the RoPE epilogue reads whole heads of %lld columns: BN=%lld is not a multiple"},
    {mma_tile, "MMA=1 needs BM %% (16*WM) == 0, BN %% (16*WN) == 0, BK %% 16 == 0 (BM=%lld BN=%lld BK=%lld WM=%lld "
               "WN=%lld)"},
    {odd_bn, "BN=%lld (not a power of two) is the persistent wgmma pipeline's with the fragment epilogue (WGMMA=1, "
             "PERSIST=1, EPI_SMEM=0, SPLIT_K=1, STREAM_K=0, SPLIT_L2=0, CLUSTER=1, WG_K=1, WG_PP=0)"},
    {wgmma_tile, "WGMMA=1 needs BM 64 or 128 with WM=BM/16, WN=1 (a warpgroup per 64 rows) and BN a multiple of 16 up "
                 "to 256"},
    {scalar_tile, "BM=%lld, BN=%lld are not multiples of TM=%lld, TN=%lld"},
};

const char *em_ctr_refusal(const em_ctr_facts *f, const int64_t kv[EM_NKNOBS], char *why) {
  for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
    long long a[6] = {0};
    if (!rules[i].refuses(f, kv, a)) continue;
    snprintf(why, EM_ERR_MAX, rules[i].reason, a[0], a[1], a[2], a[3], a[4], a[5]);
    return why;
  }
  return NULL;
}

/* A TMA ring's shared memory (em_ctr_smem's note): the ring's 128-byte rows (BK = 64, the tma_bk rule) of the A tile
 * and each B tile a stage, then PERSIST=1's staging buffers, its split-K peers' partial sums and WG_K=2's. */
void em_ctr_tma_smem(const int64_t kv[EM_NKNOBS], int dual, em_ctr_smem *s) {
  const long long BM = K(BM), BN = K(BN), st = K(STAGES), nacc = dual ? 2 : 1, epi = K(EPI_SMEM), sk = K(SPLIT_K);
  memset(s, 0, sizeof *s);
  s->ring = st * 128 * (BM + BN * nacc);
  /* EPI_SMEM 1, 2: typed rows padded by 8; 3 and up: 64-column swizzled panels, half the tile at a time where BN >= 128
   * (EPI_SMEM=6 the whole tile) */
  if (epi == 1 || epi == 2) s->ep = 2 * BM * (BN + 8);
  else if (epi >= 3) s->ep = BM * BN * (BN >= 128 && epi != 6 ? 1 : 2);
  s->staging = nacc * s->ep;
  /* SPLIT_K in a cluster (PERSIST=1, SPLIT_L2=0): EPI_SMEM=0, the parts of this rank's columns from SPLIT_K - 1
   * peers; a staged epilogue (SPLIT_K=2), rank 1's whole tile in rank 0 */
  int split = K(PERSIST) == 1 && sk >= 2 && !K(SPLIT_L2);
  if (split) s->split = (epi ? 4LL : 4LL * (sk - 1) / sk) * BM * BN * nacc;
  if (K(WG_K) == 2) s->kgroup = 4LL * BM * BN * nacc;
  s->total = 1024 + s->ring + s->staging + s->split + s->kgroup;
  /* the static mbarriers: PERSIST=1's full and empty a stage, the split's two */
  s->barriers = K(PERSIST) == 1 ? 16 * st + (split ? 16 : 0) : 0;
}
