/* test_ctr_legal.c — the contraction's legality table (ctr_legal.h): a persistent wgmma plan and the plain tiers
 * pass, a rule refuses with its reason and the values it names, and the graph's facts (a dual pair, merged
 * siblings' widths, N, a head-local epilogue) decide the rules that read them. */
#include <string.h>

#include "ctr_legal.h"
#include "unit.h"

/* Every knob at the table's default. */
static void defaults(int64_t *kv) {
  for (int i = 0; i < EM_NKNOBS; i++) kv[i] = em_knob_table[i].def;
}

/* The persistent wgmma pipeline at 128 x 128: MMA, TMA, WGMMA, WG_WAIT, PRODUCER, PERSIST, 4 stages. */
static void persistent(int64_t *kv) {
  defaults(kv);
  kv[EM_KNOB_MMA] = kv[EM_KNOB_ASYNC] = kv[EM_KNOB_TMA] = kv[EM_KNOB_WGMMA] = kv[EM_KNOB_WG_WAIT] = 1;
  kv[EM_KNOB_PRODUCER] = kv[EM_KNOB_PERSIST] = 1;
  kv[EM_KNOB_BM] = kv[EM_KNOB_BN] = 128, kv[EM_KNOB_BK] = 64, kv[EM_KNOB_WM] = 8, kv[EM_KNOB_WN] = 1;
  kv[EM_KNOB_STAGES] = 4, kv[EM_KNOB_PAD_SMEM] = 0;
}

/* One linear of N = 2048, K = 1024 that a TMA-stored epilogue may write. */
static em_ctr_facts one_linear(void) {
  em_ctr_facts f = {0};
  f.siblings = 1, f.stage_step = 1, f.K = 1024, f.N = 2048, f.tma_fused = f.tma_store = 1;
  return f;
}

/* 1 when the table refuses kv for f with a reason containing part. */
static int refused_with(const em_ctr_facts *f, const int64_t *kv, const char *part) {
  char why[EM_ERR_MAX];
  const char *r = em_ctr_refusal(f, kv, why);
  if (r && !strstr(r, part)) fprintf(stderr, "    refused: %s\n", r);
  return r && strstr(r, part);
}

TEST(ctr_legal_passes_the_tiers) {
  int64_t kv[EM_NKNOBS];
  char why[EM_ERR_MAX];
  em_ctr_facts f = one_linear();
  defaults(kv); /* the scalar tier, 64 x 64 tiles of 4 x 4 */
  CHECK(em_ctr_refusal(&f, kv, why) == NULL);
  kv[EM_KNOB_MMA] = 1, kv[EM_KNOB_ASYNC] = 1, kv[EM_KNOB_STAGES] = 3; /* mma.sync over cp.async's ring */
  CHECK(em_ctr_refusal(&f, kv, why) == NULL);
  persistent(kv);
  CHECK(em_ctr_refusal(&f, kv, why) == NULL);
  kv[EM_KNOB_EPI_SMEM] = 5, kv[EM_KNOB_CLUSTER] = 2, kv[EM_KNOB_STAGES] = 6;
  CHECK(em_ctr_refusal(&f, kv, why) == NULL);
}

TEST(ctr_legal_names_the_rule_and_its_values) {
  int64_t kv[EM_NKNOBS];
  em_ctr_facts f = one_linear();
  persistent(kv);
  kv[EM_KNOB_STAGES] = 1;
  CHECK(refused_with(&f, kv, "WG_WAIT=1 keeps a wgmma group in flight over a ring of 2+ stages"));
  persistent(kv);
  kv[EM_KNOB_BK] = 32;
  CHECK(refused_with(&f, kv, "TMA=1 needs BK=64 (128-byte swizzled rows), got BK=32"));
  persistent(kv);
  kv[EM_KNOB_PAD_SMEM] = 8; /* (a plan that leaves PAD_SMEM out has the table's default, 8) */
  CHECK(refused_with(&f, kv, "TMA=1 tiles are swizzled, not padded (PAD_SMEM=0)"));
  persistent(kv);
  kv[EM_KNOB_EPI_SMEM] = 3, kv[EM_KNOB_BN] = 32;
  CHECK(refused_with(&f, kv, "EPI_SMEM=3 stages the tile in two halves of whole 64-column panels (BN 64 in one part): "
                             "BN=32 is not a multiple of 64"));
  persistent(kv);
  kv[EM_KNOB_SPLIT_K] = 2, kv[EM_KNOB_CLUSTER] = 2;
  CHECK(refused_with(&f, kv, "PRODUCER=1 feeds wgmma consumers from a producer warpgroup"));
  persistent(kv);
  kv[EM_KNOB_WM] = 4; /* wgmma: a warpgroup per 64 rows */
  CHECK(refused_with(&f, kv, "WGMMA=1 needs BM 64 or 128 with WM=BM/16"));
  defaults(kv);
  kv[EM_KNOB_TM] = 8, kv[EM_KNOB_BN] = 16, kv[EM_KNOB_TN] = 32;
  CHECK(refused_with(&f, kv, "BM=64, BN=16 are not multiples of TM=8, TN=32"));
  defaults(kv);
  kv[EM_KNOB_EPI_SMEM] = 1;
  CHECK(refused_with(&f, kv, "EPI_SMEM=1..7 are the persistent pipeline's staged epilogues (PERSIST=1)"));
}

TEST(ctr_legal_reads_the_graph_facts) {
  int64_t kv[EM_NKNOBS];
  char why[EM_ERR_MAX];
  em_ctr_facts f = one_linear();
  persistent(kv);
  kv[EM_KNOB_DUAL_WIDE] = 1, kv[EM_KNOB_BN] = 64;
  CHECK(refused_with(&f, kv, "DUAL_WIDE=1 is one wgmma over a dual kernel's two adjacent weight tiles"));
  f.dual = 1, f.siblings = 2;
  CHECK(em_ctr_refusal(&f, kv, why) == NULL);
  /* merged siblings: BN divides every width */
  f = one_linear();
  f.siblings = 3, f.nwidths = 3, f.widths[0] = 2048, f.widths[1] = 1000, f.widths[2] = 1024;
  persistent(kv);
  CHECK(refused_with(&f, kv, "merged siblings under TMA: BN=128 does not divide a sibling's width 1000"));
  /* wgmma's multicast pairs along N: an even number of N tiles */
  f = one_linear();
  f.N = 384;
  persistent(kv);
  kv[EM_KNOB_PRODUCER] = kv[EM_KNOB_PERSIST] = 0, kv[EM_KNOB_CLUSTER] = 2;
  CHECK(refused_with(&f, kv, "CLUSTER=2 pairs N tiles: N=384 makes 3 tiles of BN=128, an odd number"));
  f.N = 0; /* (N unknown: the emitter checks a constant N itself) */
  CHECK(em_ctr_refusal(&f, kv, why) == NULL);
  /* a head-local epilogue: whole heads in the tile; from the fragments where the shifts are multiples of 8 */
  f = one_linear();
  f.stage = 128;
  persistent(kv);
  CHECK(refused_with(&f, kv, "PRODUCER=1 with a head-local (RoPE) epilogue"));
  f.stage_step = 64;
  CHECK(em_ctr_refusal(&f, kv, why) == NULL);
  kv[EM_KNOB_BN] = 64;
  CHECK(refused_with(&f, kv, "the RoPE epilogue reads whole heads of 128 columns: BN=64 is not a multiple"));
  kv[EM_KNOB_BN] = 128;
  f.head_reductions = 1;
  CHECK(refused_with(&f, kv, "no head-local reduction"));
  /* the TMA-stored epilogues' outputs, 8 columns a thread */
  f = one_linear();
  f.tma_store = 0;
  persistent(kv);
  kv[EM_KNOB_EPI_SMEM] = 4;
  CHECK(refused_with(&f, kv, "EPI_SMEM=4 stores the tile by TMA"));
  f.N = 1020;
  kv[EM_KNOB_EPI_SMEM] = 5;
  CHECK(refused_with(&f, kv, "EPI_SMEM=5 stores 8 columns a thread: N a constant multiple of 8"));
  /* WG_K=2: more than one k-step */
  f = one_linear();
  f.K = 64;
  persistent(kv);
  kv[EM_KNOB_BM] = 64, kv[EM_KNOB_WM] = 4, kv[EM_KNOB_WG_K] = 2;
  CHECK(refused_with(&f, kv, "WG_K=2 deals a 64-row persistent tile's k-steps"));
  f.K = 128;
  CHECK(em_ctr_refusal(&f, kv, why) == NULL);
}

/* A tile width that is not a power of two (128 x 80: Qwen3-4B's o and down at 512 tokens) is the persistent wgmma
 * pipeline's with the fragment epilogue, one CTA a tile; the mma.sync tier and the staged epilogues refuse it. */
TEST(ctr_legal_odd_bn_is_the_fragment_epilogues) {
  int64_t kv[EM_NKNOBS];
  char why[EM_ERR_MAX];
  em_ctr_facts f = one_linear();
  persistent(kv);
  kv[EM_KNOB_BN] = 80, kv[EM_KNOB_STAGES] = 6, kv[EM_KNOB_RASTER] = 8;
  CHECK(em_ctr_refusal(&f, kv, why) == NULL);
  kv[EM_KNOB_EPI_SMEM] = 1;
  CHECK(refused_with(&f, kv, "BN=80 (not a power of two) is the persistent wgmma pipeline's"));
  persistent(kv);
  kv[EM_KNOB_BN] = 96, kv[EM_KNOB_SPLIT_K] = 2;
  CHECK(refused_with(&f, kv, "BN=96 (not a power of two)"));
  /* the split's reduce-scatter deals the 10 column groups of BN=80 to the ranks: 4 does not divide them (the rule
   * before odd_bn, so it names the cause) */
  persistent(kv);
  kv[EM_KNOB_BN] = 80, kv[EM_KNOB_SPLIT_K] = 4;
  CHECK(refused_with(&f, kv, "SPLIT_K=4's reduce-scatter deals a warp's column groups of 8 in equal runs: BN=80 makes 10"));
  kv[EM_KNOB_BN] = 96; /* 12 groups: the split divides them; odd_bn still fences 96 */
  CHECK(refused_with(&f, kv, "BN=96 (not a power of two)"));
  kv[EM_KNOB_BN] = 16; /* 2 groups (a pin) */
  CHECK(refused_with(&f, kv, "BN=16 makes 2 groups"));
  defaults(kv);
  kv[EM_KNOB_MMA] = 1, kv[EM_KNOB_ASYNC] = 1, kv[EM_KNOB_STAGES] = 3, kv[EM_KNOB_BN] = 80, kv[EM_KNOB_BK] = 64;
  kv[EM_KNOB_WN] = 1;
  CHECK(refused_with(&f, kv, "BN=80 (not a power of two)"));
}
