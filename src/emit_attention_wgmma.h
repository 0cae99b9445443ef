/* emit_attention_wgmma.h — the parts of flash attention on wgmma (FLASH=2) share this: the resolved attention
 * (fa_t, made once by fa_facts in emit_attention_wgmma.c) and the block's shared-memory layout; the epilogue
 * (emit_attention_wgmma_epi.c) writes O out of the consumers' registers through it. */
#ifndef EMIT_ATTENTION_WGMMA_H
#define EMIT_ATTENTION_WGMMA_H

#include "emit_impl.h"

typedef struct {
  int a, q, k, v, mask;          /* the anchor, its operands, the attention mask (or -1) */
  const em_shape *qs, *ks, *vs, *os;
  int r;                         /* rank; batch dims 0..r-3 */
  int64_t D;                     /* head dim (Q, K and V) */
  int NWG, BKV, ST, pack, minb;  /* consumer warpgroups, keys a tile, ring depth, QPACK, MINB */
  int P, NQ;                     /* KVSPLIT (warpgroups splitting one row slice's tiles), Q slices (NWG / P) */
  int causal, gqa;
  int pos;                       /* seq_pos (sequences packed end to end: each CTA's keys from its first row's
                                  * sequence start, tile em_klo; rows masked before their own start), or -1 */
  int pp;                        /* PINGPONG: the two Q slices' warpgroups take turns issuing a tile's wgmma */
  int persist;                   /* APERSIST: CTAs loop over (query tile, head) items, the ring's uses counted on */
  int osmem;                     /* OSMEM: 0 from the registers, 1 and 2 staged over Q, 3 in a buffer of its own, 4 over
                                  * the last K/V stage */
  int sp;                        /* STAMP: clock marks in the roles (FA_STAMP_FIELDS) */
  int lazy;                      /* RESCALE=1: O and l corrected only when a warp's row maximum grew by more than 2^8 */
  int otma;                      /* OTMA=1: a full staged O tile stored by TMA from one thread */
  int psm;                       /* PSMEM: P through shared memory of each warpgroup's own (1: one buffer, stored after the
                                  * PV that read it; 2: two, stored during the softmax), PV from shared memory */
  int mc;                        /* EMMY_KVMC=1: a 2-CTA cluster's K/V tiles loaded half by each CTA, multicast into both */
  int carry;                     /* EMMY_PP_CARRY (default; =0 off): PINGPONG's turns carried from item to item */
  int split;                     /* EMMY_ASPLIT=1: the last items shared out by key tiles (stream-K, emit_streamk.c) */
  int pvsum;                     /* EMMY_PV_SUM=1: the row sums of P by PV's wgmma over a ones column (o[D/8]) */
  em_launch *L;                  /* the launch (OTMA=1 adds the output's tensor map to it) */
  double scale;
  em_dtype dt;
  const char *mt, *pk;           /* "bf16"/"f16"; the f32-pair to 16-bit-pair conversion */
  int qb, kb, vb;                /* the kernel inputs Q, K and V are views of */
  em_dim qst[MAXR], kst[MAXR], vst[MAXR];
  int64_t qin, kin, vin;         /* their inputs' row lengths (the tensor maps' inner extent) */
  em_shape bat;                  /* the output's batch dims */
} fa_t;

/* Shared memory: the Q tile (D/64 column blocks of NWG x 64 rows), then ST stages of a K and a V tile (D/64
 * column blocks of BKV rows each), every block 1024-byte aligned (the 128-byte swizzle's period). */
static inline long long fa_qbytes(const fa_t *f) { return (long long)f->NQ * 64 * f->D * 2; }
/* OSMEM=4 with two Q slices stages each
 * slice's O over K rows of the last stage that the other warpgroup's last QKᵀ also reads; nothing but the tensor
 * cores' issue order keeps that QKᵀ ahead of the O writes (PINGPONG hands the turn over once it is issued, not
 * retired). With it, each warpgroup arrives on barrier 6 + wq once its loop's wgmma have retired and waits on the
 * other's (7 - wq) before staging O; the items then end on barrier 1 (both warpgroups), so that no arrival of the next
 * item completes a barrier this one still waits on (EMMY_PP_CARRY: only items of fewer than three key tiles, where
 * the turns do not already hold the first warpgroup back; fa_pp_carry_end). */
static inline int fa_os4_sync(const fa_t *f) { return f->osmem == 4 && f->NQ == 2 ; }
/* KVSPLIT=2's merge: the second warpgroup's O, max and sum per thread, [element][thread] (f32) */
static inline long long fa_mergebytes(const fa_t *f) { return f->P > 1 ? (f->D / 2 + 4) * 128LL * 4 : 0; }
static inline long long fa_kvbytes(const fa_t *f) { return (long long)f->BKV * f->D * 2; }
/* The end of the K/V ring: KVSPLIT=2's merge area starts there, then OSMEM=3's O buffer, then PSMEM's P buffers. */
static inline long long fa_ringend(const fa_t *f) { return fa_qbytes(f) + 2LL * f->ST * fa_kvbytes(f); }
/* OSMEM=3's O buffer: after the ring (and the merge area), the size of the Q tile; 0 where O is staged over Q. */
static inline long long fa_obuf(const fa_t *f) { return f->osmem == 3 ? fa_ringend(f) + fa_mergebytes(f) : 0; }
/* PSMEM=1's P buffers: after the ring, the merge area and OSMEM=3's O buffer, a warpgroup's 64 x BKV tile of P each
 * (BKV/64 column blocks of 8 KB, rounded up — BKV=176's last block holds 48 keys —, 128-byte swizzled K-major: the A
 * operand's layout, as Q's slices). */
static inline long long fa_pbuf(const fa_t *f) {
  return fa_ringend(f) + fa_mergebytes(f) + (f->osmem == 3 ? fa_qbytes(f) : 0);
}
static inline int fa_pwg(const fa_t *f) { return (f->BKV + 63) / 64 * 8192; }
static inline long long fa_pbytes(const fa_t *f) { return f->psm ? (long long)f->NWG * f->psm * fa_pwg(f) : 0; }
/* EMMY_PV_SUM=1's ones block: 16 keys x 128 bytes of 1.0 after everything else (every k16 step of PV reads it as the
 * second 64-column block of V, the descriptor's leading offset pointing there), 1024-byte aligned. */
static inline long long fa_ones(const fa_t *f) { return (fa_pbuf(f) + fa_pbytes(f) + 1023) / 1024 * 1024; }
/* The block's dynamic shared memory: alignment slack, Q, the K/V ring, the merge area, OSMEM=3's O buffer, P, the
 * ones block. */
static inline long long fa_smem(const fa_t *f) { return 1024 + (f->pvsum ? fa_ones(f) + 2048 : fa_pbuf(f) + fa_pbytes(f)); }
/* O's column groups a thread holds: D/8, and EMMY_PV_SUM's row sums. */
static inline int fa_ogroups(const fa_t *f) { return (int)(f->D / 8) + (f->pvsum ? 1 : 0); }

/* EMMY_ASPLIT: a CTA's slot of the launch scratch, the floats of its consumer warpgroups' partial O, row maxima and
 * sums, [warpgroup][float4 group][thread] (D/8 groups of O, then one of the two maxima and two sums); the flags after
 * the grid's slots, 16 bytes a CTA */
static inline long long fa_split_slot(const fa_t *f) { return (long long)f->NQ * 128 * (f->D / 2 + 4); }

/* emit_attention_wgmma_epi.c: O / l through the kernel's fused ops to its outputs (OSMEM 0-4, OTMA), and KVSPLIT=2's
 * merge of the two key parts' softmax states before it (sl: the factor the exponent applies to a score). */
void fa_epilogue(ectx *c, const fa_t *f);
void fa_merge(ectx *c, const fa_t *f, double sl);
/* EMMY_ASPLIT's fix-up before the epilogue: a piece that does not reach its item's last key tile hands its partial
 * state over (and opens the branch that skips the epilogue); the owner of a split item merges the pieces below it.
 * The caller emits the epilogue and closes the branch with "}". */
void fa_split_fixup(ectx *c, const fa_t *f, double sl);

#endif
