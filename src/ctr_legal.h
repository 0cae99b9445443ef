/* ctr_legal.h — which knob combinations a contraction may take, in one place: a table of rules, each a part's
 * requirement with its reason, over the knob plan and the facts the kernel's graph gives. The emitter
 * (emit_contraction.c) refuses a variant with the reason before it emits anything, and the rules' resource check
 * (scripts/emmy/rules.lua, through `knobs.ctr_refusal`) drops the candidate with the same words. What only the graph
 * can say (operands that are kernel inputs, K a multiple of 8, a constant N for a cluster, dtypes, a residual loaded
 * ahead) stays with the emitter. */
#ifndef EM_CTR_LEGAL_H
#define EM_CTR_LEGAL_H

#include "knobs.h"

#define EM_CTR_MAX_WIDTHS 8

/* What a contraction's graph gives the rules. The emitter fills it from the resolved contraction, once: for its own
 * check, and (em_emit_ctr_facts, `ir.ctr_facts`) for the kernel summary of scripts/emmy/kernels.lua, which the rules'
 * check (`knobs.ctr_refusal`) reads back with K and N at the shape hint instead. */
typedef struct {
  int dual;            /* DUAL_GATE's pair: two linears of equal width on one operand, two accumulators */
  int siblings;        /* the linears reading the anchor's operand, the anchor among them (merged side by side
                        * along N where more than one and not a dual pair; 0 or 1: one) */
  int nwidths;         /* the siblings' widths known (a linear's: the anchor's alone, a dual pair's, or merged
                        * siblings'), at most EM_CTR_MAX_WIDTHS; the table reads merged siblings' */
  int64_t widths[EM_CTR_MAX_WIDTHS];
  int64_t stage;       /* a head-local epilogue's head width D (meta "stage", RoPE); 0: none */
  int64_t stage_step;  /* the gcd of its reads' column shifts (meta "stage_step"); 1 where there is no meta */
  int head_reductions; /* reductions over the staged result tile (NORM_EPI) */
  int64_t K, N;        /* the contraction's K and its result's N where known; 0 where not (a symbolic dim) */
  int tma_fused;       /* EPI_SMEM=7's output: one 2-byte output of the result's (or its heads view's) shape */
  int tma_store;       /* EPI_SMEM=4's output: the linear's result or a contiguous view of it, 2-byte, alone */
  /* read by the tile rules, not by the table */
  int tma_heads;       /* tma_fused's output is the result's heads view [B, H, S, D] (ws_heads_view) */
  int prologue_reductions; /* row reductions before the K loop (a folded RMSNorm, SPLIT_CONE=0) */
} em_ctr_facts;

/* The first rule that refuses knob plan kv (every knob's value by em_knob_id, the assignment's or the table's
 * default) for a contraction with facts f: writes its reason into why (EM_ERR_MAX bytes) and returns why; NULL
 * where every rule holds. The rules read the contraction's non-structural knobs only (knobs.h: em_knob_for_kind,
 * em_knob_structural), the ones the Lua binding passes. */
const char *em_ctr_refusal(const em_ctr_facts *f, const int64_t kv[EM_NKNOBS], char *why);

/* The shared memory of a contraction on a TMA ring (TMA=1: the wgmma tier and the persistent pipeline), in one place
 * for the emitter's launch (emit_contraction.c ctr_tma_launch, emit_gemm_ws.c) and the rules' resource check
 * (`knobs.ctr_smem`). Dynamic shared memory from the 1 KB-aligned base, bytes: */
typedef struct {
  long long ring;     /* STAGES x the A tile and each B tile */
  long long ep;       /* one accumulator's staging buffer after the ring (EPI_SMEM 1..7; 0 without) */
  long long staging;  /* every accumulator's (ep x 2 for a dual) */
  long long split;    /* SPLIT_K's peers' f32 partial sums in the cluster (PERSIST=1, SPLIT_L2=0) */
  long long kgroup;   /* WG_K=2's second K group's f32 partial sums */
  long long total;    /* 1024 (the alignment's slack) + all of the above: the launch's dynamic shared memory */
  long long barriers; /* static shared memory of the mbarriers besides (PERSIST=1) */
} em_ctr_smem;

/* Fills s for knob plan kv (every knob's value by em_knob_id) of a contraction with dual accumulators or not. The
 * parts a plan does not have are 0. */
void em_ctr_tma_smem(const int64_t kv[EM_NKNOBS], int dual, em_ctr_smem *s);

#endif
