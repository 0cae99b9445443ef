/* emit_attention_wgmma.c — flash attention on Hopper tensor cores (FLASH=2), as parts over one driver:
 * the operand transport (Q, K and V rows by TMA from 2-d tensor maps over their kernel inputs, 128-byte
 * swizzled), the producer (one lane of the last warpgroup loads the Q tile once and streams K and V tiles
 * through a KVST-deep ring on full/empty mbarriers, K and V on barriers of their own), the consumers (a
 * warpgroup per 64 query rows: S = QKᵀ by wgmma from shared memory, the online softmax in registers in base
 * 2, P re-packed from the S accumulators as the A operand of O += PV by wgmma with P from registers — PSMEM: from
 * a buffer of the warpgroup's own in shared memory — and V N-major), and the epilogue (O / l through the kernel's
 * fused ops to its outputs: emit_attention_wgmma_epi.c; the resolved attention and the shared-memory layout both
 * read, emit_attention_wgmma.h).
 * A CTA's warpgroups take consecutive 64-row slices of one head's query tile (QPACK=0), or the same 64 rows
 * of consecutive query heads that share one KV head (QPACK=1: GQA's K/V tiles loaded once for them). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emit_attention_wgmma.h"

/* Registers a thread keeps after setmaxnreg: producer + consumers within what the block was given at launch
 * (65536 / MINB registers: 40 x 128 + 232 x 256 for two consumer warpgroups, 40 x 128 + 216 x 128 for one
 * at MINB=2; three (BQ=192): 32 x 128 + 160 x 384, FlashAttention-3's split for its head-dim-64 kernels) */
#define FA_PRODUCER_REGS 40
static int fa_producer_regs(const fa_t *f) { return f->NWG == 3 ? 32 : f->minb == 3 ? 24 : FA_PRODUCER_REGS; }

/* The consumers' registers after setmaxnreg, or 0 where the block runs without it (one consumer warpgroup, one
 * block an SM: 255 registers a thread at launch already). setmaxnreg.inc takes only what the block's producer gave
 * back: a thread starts with the launch bound's cap (65536 / (MINB x threads), in 8s) and the consumers may grow
 * by what the producer's warps released (MINB=3: 80 at launch, 24 / 136). */
static int fa_consumer_regs(const fa_t *f) {
  if (f->NWG == 1 && f->minb == 1) return 0;
  int cap = 65536 / (f->minb * 128 * (f->NWG + 1)) / 8 * 8;
  int r = (cap + (cap - fa_producer_regs(f)) / f->NWG) / 8 * 8;
  return r > 240 ? 240 : r;
}

/* STAMP=1: each role sums clock intervals (32-bit %clock) in registers and writes them once, at its end, into the CTA's
 * scratch record of FA_STAMP_ROLES x FA_STAMP_FIELDS unsigned (scripts/emmy/stamps.lua reads it; bench/attention.lua
 * --stamp prints it). Roles 0-2, the consumer warpgroups (thread 0 of each): items, steps (a K/V tile with a next
 * one), the K barrier's wait, PINGPONG's turn, the issue of the next S and this tile's PV (the V barrier's wait
 * included), the wait for S (wait_group 1), the mask and softmax, the wait for PV (wait_group 0) with the release and
 * O's correction, the epilogue, the total; the rest of the total is the first tile's S and softmax, the last PV and
 * the tiles past the range. Role 3, the producer lane: items, loads (K/V tiles), the empty barrier's wait, the
 * loads' issue, total in field 9. Role 4, the timeline (consumer thread 0): %globaltimer at the CTA's entry (low,
 * high) and the consumers' end (low, high), the cycles from entry to the consumers' first wait, 1 in field 9. */
#define FA_STAMP_FIELDS 10
#define FA_STAMP_ROLES 5
static void fa_stamp(ectx *c, const fa_t *f, const char *line) {
  if (f->sp) ex_line(c, "%s", line);
}
/* The interval since em_c added to field i of this warpgroup's sums, em_c moved on. */
static void fa_mark(ectx *c, const fa_t *f, int i) {
  if (f->sp) ex_line(c, "{ const unsigned em_n = em_clock(); em_sa[%d] += em_n - em_c; em_c = em_n; }", i);
}

/* 1 when value v's rows can be loaded by TMA from a 2-d map over its kernel input ([numel/inner, inner]):
 * a strided view with the head dim at stride 1, the row (sequence) stride the input's row length, and every
 * batch stride either a multiple of it or (one head of a row) a constant within it. */
static int fa_rows(ectx *c, int v, int *base, em_dim *st, int64_t D, int64_t *inner) {
  const em_shape *s = ex_S(c, v);
  int r = s->rank;
  int64_t one, rs;
  if (!ex_strided(c, v, base, st) || !em_dim_is_const(&st[r - 1], &one) || one != 1) return 0;
  const em_shape *is = ex_S(c, *base);
  if (!em_dim_is_const(&is->d[is->rank - 1], inner) || *inner % 8 || !em_dim_is_const(&st[r - 2], &rs) || rs != *inner) return 0;
  for (int i = 0; i < r - 2; i++) {
    int64_t bs, n;
    if (ex_is_one(&s->d[i]) || ex_dim_multiple_of(&st[i], *inner)) continue;
    if (!em_dim_is_const(&st[i], &bs) || !em_dim_is_const(&s->d[i], &n) || bs % 8 || bs * (n - 1) + D > *inner) return 0;
  }
  return 1;
}


/* The element offset of (head index bh, row l, element 0) of operand x (Q: qi, K/V: through kv_index) in its
 * kernel input, as a lambda em_<name>(bh, l) -> long long; the batch dims unravel from bh inside it. */
static void fa_offset_fn(ectx *c, const fa_t *f, const char *name, int which) {
  ex_line(c, "auto em_%s = [&](long long bh, long long l) -> long long {", name);
  c->indent++;
  int mark = c->memo.n; /* (values named inside the lambda stay inside it) */
  ivec bi = ex_unravel(c, "bh", &f->bat);
  ivec oi = {f->r};
  for (int i = 0; i < f->r - 2; i++) {
    oi.e[i] = ex_A(c, "x%d", i);
    ex_line(c, "const long long x%d = %s;", i, bi.e[i]);
  }
  ivec ix = oi;
  const em_shape *s = f->qs;
  const em_dim *st = f->qst;
  if (which > 0) {
    int rr = f->r;
    ivec full = oi;
    full.e[rr - 2] = "l";
    full.e[rr - 1] = "0LL";
    ix = ex_bcast(c, &full, f->os, which == 1 ? f->ks : f->vs);
    if (f->gqa && rr >= 3 && !em_dim_eq(&f->qs->d[rr - 3], &f->ks->d[rr - 3]))
      ix.e[rr - 3] = ex_A(c, "(%s / (%s / %s))", oi.e[rr - 3], ex_dim_c(c, &f->qs->d[rr - 3]), ex_dim_c(c, &f->ks->d[rr - 3]));
    s = which == 1 ? f->ks : f->vs;
    st = which == 1 ? f->kst : f->vst;
  }
  ix.e[f->r - 2] = "l";
  ix.e[f->r - 1] = "0LL";
  ex_line(c, "return %s;", ex_strided_offset(c, &ix, s, st));
  c->memo.n = mark;
  c->indent--;
  ex_line(c, "};");
}

/* The head index (blockIdx.y's batch-and-head) of warpgroup w, and its first query row. */
static const char *fa_bh(ectx *c, const fa_t *f, const char *w) {
  const char *y = f->causal || f->persist ? "em_bh" : "blockIdx.y";
  return f->pack ? ex_A(c, "((long long)%s * %d + %s)", y, f->NQ, w) : ex_A(c, "(long long)%s", y);
}
static const char *fa_row0(ectx *c, const fa_t *f, const char *w) { return f->pack ? "q0" : ex_A(c, "(q0 + 64LL * %s)", w); }

/* The producer's Q loads: each consumer warpgroup's 64 rows, on em_qbar. */
static void fa_load_q(ectx *c, const fa_t *f) {
  int nd = (int)(f->D / 64);
  ex_line(c, "em_mbar_expect(&em_qbar, %lldu);", fa_qbytes(f));
  for (int w = 0; w < f->NQ; w++) {
    const char *ws = ex_A(c, "%d", w);
    ex_line(c, "{");
    ex_line(c, "  const long long o = em_qoff(%s, %s);", fa_bh(c, f, ws), fa_row0(c, f, ws));
    ex_line(c, "  const int col = (int)(o %% %lldLL), row = (int)(o / %lldLL);", (long long)f->qin, (long long)f->qin);
    for (int j = 0; j < nd; j++)
      ex_line(c, "  em_tma_2d(em_sb + %lldu, &tm0, col + %d, row, &em_qbar);", (long long)j * f->NQ * 8192 + w * 8192LL, 64 * j);
    ex_line(c, "}");
  }
}

/* APERSIST=1: the loop over this CTA's work items, round r's item em_t. Causal: the rounds alternate direction
 * (round 0 takes items blockIdx.x, round 1 the mirror 2·grid - 1 - blockIdx.x, ...), so the CTA that took one of the
 * longest query tiles first takes one of the shortest next (items are sorted longest first; striding every round
 * the same way left the CTAs of the first round's long tiles with the second round's long tiles too: b1 s2048
 * causal 47.7 us against 35.5 non-persistent, H200). Non-causal items are all alike: stride. */
static void fa_items_loop(ectx *c, const fa_t *f) {
  if (f->split) { /* EMMY_ASPLIT: whole items, then the pieces of this CTA's stream-K range (emit_streamk.c) */
    ex_sk_item_loop(c, ", em_n++");
    c->indent++;
    ex_line(c, "const long long em_r = em_j;");
    return;
  }
  ex_line(c, "for (long long em_r = 0;; em_r++, em_n++) {");
  c->indent++; /* (closed by the caller) */
  if (f->causal)
    ex_line(c, "const long long em_t = (em_r & 1) ? (em_r + 1) * gridDim.x - 1 - blockIdx.x : em_r * gridDim.x + blockIdx.x;");
  else if (f->mc) /* (EMMY_KVMC=1: a cluster's two CTAs take a pair of items, neighbouring query tiles of one head) */
    ex_line(c, "const long long em_t = 2 * (em_r * (gridDim.x / 2) + blockIdx.x / 2) + (blockIdx.x & 1);");
  else
    ex_line(c, "const long long em_t = em_r * gridDim.x + blockIdx.x;");
  ex_line(c, "if (em_t >= em_items) break;");
}

/* A work item's (APERSIST=1) query tile and head from its index em_t, in the order the grid takes them
 * otherwise (causal: the longest query tiles of every head first), its key range and tile count. */
static void fa_item(ectx *c, const fa_t *f) {
  int BQ = 64 * f->NQ;
  if (f->causal) {
    ex_line(c, "const long long em_bh = em_t %% em_nbh, q0 = (em_nq - 1 - em_t / em_nbh) * %d;", BQ);
  } else {
    ex_line(c, "const long long em_bh = em_t / em_nq, q0 = (em_t %% em_nq) * %d;", BQ);
  }
  if (f->split) { /* EMMY_ASPLIT: the piece's key tiles em_kb..em_ke - 1 */
    ex_line(c, "const int em_klo = em_kb, nt = em_ke - em_kb;");
    return;
  }
  ex_line(c, "const long long send = %s;", f->causal ? ex_A(c, "(q0 + %d < S ? q0 + %d : S)", BQ, BQ) : "S");
  ex_line(c, "const int nt = (int)((send + %d) / %d);", f->BKV - 1, f->BKV);
}

/* Whether the key tiles count from em_klo (seq_pos: the CTA's first row's sequence start; EMMY_ASPLIT: the piece's
 * first tile). */
static int fa_klo_on(const fa_t *f) { return f->pos >= 0 || f->split; }

/* EMMY_KVMC=1: this CTA's half of ring use it's K and V tiles (rows rank·BKV/2 on, 1024-byte aligned in each column
 * block, so the 128-byte swizzle is the whole tile's), multicast into both CTAs of the cluster, each CTA's full
 * barrier signalled (its producer expects the whole tile's bytes: its half and the peer's). */
static void fa_mc_loads(ectx *c, const fa_t *f, const char *kt) {
  int nd = (int)(f->D / 64), h = f->BKV / 2;
  long long kvb = fa_kvbytes(f);
  ex_line(c, "em_mbar_expect(&em_fv[st], %lldu);", kvb);
  ex_line(c, "const unsigned em_r = em_cluster_rank();");
  for (int t = 0; t < 2; t++)
    for (int j = 0; j < nd; j++)
      ex_line(c, "em_tma_2d_mc(kb + %lldu + em_r * %du, &tm%d, %scol + %d, %srow + %s * %d + (int)em_r * %d, &em_f%c[st], 3);",
              (t ? kvb : 0) + (long long)j * f->BKV * 128, h * 128, t + 1, t ? "v" : "k", 64 * j, t ? "v" : "k", kt, f->BKV, h,
              t ? 'v' : 'k');
}

/* The producer: lane 0 of the last warpgroup loads each consumer warpgroup's 64 Q rows (em_qbar), then every K
 * and V tile of this CTA's key range, each stage once both its previous uses are released. APERSIST=1: for each
 * item, the first KVST tiles first (their stages free as the consumers finish the last item's main loop), then Q
 * once the consumers have released the last item's (em_qempty: after its last S = QKᵀ, or after its epilogue where
 * that stages O over Q), then the rest. EMMY_KVMC=1: half of each K and V tile, multicast (fa_mc_loads). */
static void fa_producer(ectx *c, const fa_t *f) {
  long long kvb = fa_kvbytes(f);
  int nd = (int)(f->D / 64);
  ex_line(c, "if (wid >= %d) {", 4 * f->NWG);
  c->indent++;
  if (fa_consumer_regs(f)) ex_line(c, "asm volatile(\"setmaxnreg.dec.sync.aligned.u32 %d;\");", fa_producer_regs(f));
  ex_line(c, "if (wid == %d && lane == 0) {", 4 * f->NWG);
  c->indent++;
  fa_stamp(c, f, "unsigned em_pm = 0u, em_pn = 0u, em_pw = 0u, em_pi = 0u; const unsigned em_p0 = em_clock(); /* STAMP */");
  if (f->persist) {
    ex_line(c, "unsigned em_ub = 0, em_n = 0;");
    fa_items_loop(c, f);
    fa_item(c, f);
    /* the next item's Q: where the consumers release it after their last QK^T (OSMEM 0, 3, 4), after the item's
     * first K/V tile, so that its load overlaps this item's last PV and epilogue (OSMEM=4 holds the last of the first
     * ST stages through the epilogue, so Q after them waited for it); else after the first ST (the ring filled first) */
    if (f->osmem == 0 || f->osmem >= 3) ex_line(c, "const int em_qa = 0;");
    else ex_line(c, "const int em_qa = (nt < %d ? nt : %d) - 1;", f->ST, f->ST);
  } else {
    fa_load_q(c, f);
  }
  const char *bh0 = fa_bh(c, f, "0"), *u = f->persist ? "(em_ub + it)" : "it";
  ex_line(c, "const long long ko = em_koff(%s, 0LL), vo = em_voff(%s, 0LL);", bh0, bh0);
  ex_line(c, "const int kcol = (int)(ko %% %lldLL), krow = (int)(ko / %lldLL);", (long long)f->kin, (long long)f->kin);
  ex_line(c, "const int vcol = (int)(vo %% %lldLL), vrow = (int)(vo / %lldLL);", (long long)f->vin, (long long)f->vin);
  ex_line(c, "for (int it = 0; it < nt; it++) {");
  c->indent++;
  ex_line(c, "const int st = %s %% %d;", u, f->ST);
  fa_stamp(c, f, "unsigned em_c = em_clock();");
  ex_line(c, "em_mbar_wait(&em_empty[st], ((unsigned)(%s / %d) & 1u) ^ 1u);", u, f->ST);
  fa_stamp(c, f, "{ const unsigned em_n = em_clock(); em_pw += em_n - em_c; em_c = em_n; }");
  ex_line(c, "const unsigned kb = em_sb + %lldu + (unsigned)st * %lldu;", fa_qbytes(f), 2 * kvb);
  ex_line(c, "em_mbar_expect(&em_fk[st], %lldu);", kvb);
  const char *kt = fa_klo_on(f) ? "(it + em_klo)" : "it"; /* (seq_pos, EMMY_ASPLIT: the key tile of ring use it) */
  if (f->mc) {
    fa_mc_loads(c, f, kt);
  } else {
    for (int j = 0; j < nd; j++)
      ex_line(c, "em_tma_2d(kb + %lldu, &tm1, kcol + %d, krow + %s * %d, &em_fk[st]);", (long long)j * f->BKV * 128, 64 * j, kt, f->BKV);
    ex_line(c, "em_mbar_expect(&em_fv[st], %lldu);", kvb);
    for (int j = 0; j < nd; j++)
      ex_line(c, "em_tma_2d(kb + %lldu, &tm2, vcol + %d, vrow + %s * %d, &em_fv[st]);", kvb + (long long)j * f->BKV * 128, 64 * j,
              kt, f->BKV);
  }
  fa_stamp(c, f, "em_pi += em_clock() - em_c; em_pn++;");
  if (f->persist) {
    ex_line(c, "if (it == em_qa) {");
    c->indent++;
    ex_line(c, "em_mbar_wait(&em_qempty, (em_n & 1u) ^ 1u);");
    fa_load_q(c, f);
    c->indent--;
    ex_line(c, "}");
  }
  c->indent--;
  ex_line(c, "}");
  fa_stamp(c, f, "em_pm++;");
  if (f->persist) {
    ex_line(c, "em_ub += nt;");
    c->indent--;
    ex_line(c, "}");
  }
  if (f->sp) {
    ex_line(c, "unsigned *const em_w = em_st + %d; /* STAMP: the producer's record */", 3 * FA_STAMP_FIELDS);
    ex_line(c, "em_w[0] = em_pm, em_w[1] = em_pn, em_w[2] = em_pw, em_w[3] = em_pi, em_w[9] = em_clock() - em_p0;");
  }
  c->indent--;
  ex_line(c, "}");
  if (f->mc) { /* (EMMY_KVMC=1: no thread leaves before the cluster's last release of a stage has reached its barriers) */
    ex_line(c, "__syncwarp();");
    ex_line(c, "em_cluster_sync();");
  }
  ex_line(c, "return;");
  c->indent--;
  ex_line(c, "}");
}

/* S = Q Kᵀ for this warpgroup's 64 rows and the stage's BKV keys: D/16 wgmma k16 steps from shared memory, unrolled
 * by the emitter. Each wgmma's shared-memory descriptors are the base one's plus the operand's byte offset / 16 (the
 * address field is bits 0-13 of (address & 0x3FFFF) >> 4, and a tile never crosses 256 KB), the offset added inside
 * its wgmma's asm block (ex_wgmma_insn_at) so that only the base descriptors stay live: built from each address, a
 * descriptor cost ~7 ALU instructions a wgmma, and computed outside the asm the compiler hoisted them a step ahead and
 * spilled (docs/performance.md, thirty-first and thirty-second sessions). */
static void fa_qk(ectx *c, const fa_t *f, const char *acc, const char *kbase) {
  ex_line(c, "em_wg_fence();");
  ex_line(c, "const unsigned long long em_qd = em_wg_desc(em_sb + (unsigned)wq * 8192u), em_kd = em_wg_desc(%s);", kbase);
  for (int kd = 0; kd < f->D / 16; kd++)
    ex_wgmma_insn_at(c, f->BKV, f->mt, acc, "em_qd", ((kd >> 2) * f->NQ * 8192 + (kd & 3) * 32) >> 4, NULL, "em_kd",
                     ((kd >> 2) * f->BKV * 128 + (kd & 3) * 32) >> 4, kd ? "1" : "0", 0);
  ex_line(c, "em_wg_commit();");
}

/* The attention mask's index at the score (x0…, l, s): its dims broadcast against the output's. */
static ivec fa_mask_index(ectx *c, const fa_t *f) {
  ivec full = {f->r};
  for (int i = 0; i < f->r - 2; i++) full.e[i] = ex_A(c, "x%d", i);
  full.e[f->r - 2] = "l";
  full.e[f->r - 1] = "s";
  return ex_bcast(c, &full, f->os, ex_S(c, f->mask));
}

/* The scores in base 2: an attention mask's values added (bool: -inf where false) and the keys past the end
 * or (causal) after the row set to -inf, on the tiles that need it. Returns the factor the exponent still
 * applies to a score (scale·log2 e, or 1 where the mask already scaled them). */
static double fa_mask(ectx *c, const fa_t *f, const char *sc) {
  int nj = f->BKV / 8, mark = c->memo.n;
  double sl = f->scale * M_LOG2E;
  if (f->mask >= 0) {
    ivec mi = fa_mask_index(c, f);
    ex_line(c, "#pragma unroll");
    ex_line(c, "for (int j = 0; j < %d; j++)", nj);
    ex_line(c, "  #pragma unroll");
    ex_line(c, "  for (int qd = 0; qd < 4; qd++) {");
    c->indent += 2;
    ex_line(c, "const long long s = s0 + j * 8 + (lane & 3) * 2 + (qd & 1), l = qd < 2 ? lr0 : lr1;");
    ex_line(c, "float x = %s[j][qd] * %s;", sc, ex_flit(c, f->scale, 17));
    ex_line(c, "if (s < S && l < Lq) {");
    c->indent++;
    const char *mv = ex_val(c, f->mask, &mi);
    if (ex_V(c, f->mask)->dtype == EM_BOOL) ex_line(c, "if (!(%s)) x = -INFINITY;", mv);
    else ex_line(c, "x += (float)%s;", mv);
    c->memo.n = mark;
    c->indent--;
    ex_line(c, "}");
    ex_line(c, "%s[j][qd] = x * %s;", sc, ex_flit(c, M_LOG2E, 17));
    c->indent -= 2;
    ex_line(c, "  }");
    sl = 1.0;
  }
  /* seq_pos: keys before a row's own sequence start, on the tiles that hold any (starts grow with the row: lr1's is
   * the later) */
  if (f->pos >= 0) {
    ex_line(c, "if (s0 < em_ls1) {");
    ex_line(c, "  #pragma unroll");
    ex_line(c, "  for (int j = 0; j < %d; j++)", nj);
    ex_line(c, "    #pragma unroll");
    ex_line(c, "    for (int qd = 0; qd < 4; qd++)");
    ex_line(c, "      if (s0 + j * 8 + (lane & 3) * 2 + (qd & 1) < (qd < 2 ? em_ls0 : em_ls1)) %s[j][qd] = -INFINITY;", sc);
    ex_line(c, "}");
  }
  /* the tiles with keys past the end or (causal) after this warpgroup's first row */
  if (f->causal) ex_line(c, "if (s0 + %d > S || s0 + %d > ql0) {", f->BKV, f->BKV - 1);
  else ex_line(c, "if (s0 + %d > S) {", f->BKV);
  ex_line(c, "  #pragma unroll");
  ex_line(c, "  for (int j = 0; j < %d; j++)", nj);
  ex_line(c, "    #pragma unroll");
  ex_line(c, "    for (int qd = 0; qd < 4; qd++) {");
  ex_line(c, "      const long long s = s0 + j * 8 + (lane & 3) * 2 + (qd & 1);");
  ex_line(c, "      if (s >= S%s) %s[j][qd] = -INFINITY;", f->causal ? " || s > (qd < 2 ? lr0 : lr1)" : "", sc);
  ex_line(c, "    }");
  ex_line(c, "}");
  return sl;
}

/* PSMEM: this warpgroup's P buffer (its shared address) — the A operand of k16 step kb2 at + (kb2 / 4)·8 KB +
 * (kb2 % 4)·32 (64-key column blocks of 64 rows x 128 bytes, as Q's slices). PSMEM=2: two a warpgroup, the one of
 * register-set name p ("pa" the first, "pb" the second), as the register sets alternate without it. */
static const char *fa_pb(ectx *c, const fa_t *f, const char *p) {
  if (f->psm == 1) return ex_A(c, "(em_sb + %lldu + (unsigned)wg * %du)", fa_pbuf(f), fa_pwg(f));
  return ex_A(c, "(em_sb + %lldu + (unsigned)wg * %du + %du)", fa_pbuf(f), 2 * fa_pwg(f), p && !strcmp(p, "pb") ? fa_pwg(f) : 0);
}

/* PSMEM: this thread's row of P's buffer for register-set name p (em_pr) and its 16-byte chunks' XOR (em_px). */
static void fa_prow(ectx *c, const fa_t *f, const char *p) {
  ex_line(c, "const unsigned em_pr = %s + (unsigned)(((wid & 3) * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * 128), "
             "em_px = (unsigned)((lane >> 4) ^ (lane & 7));", fa_pb(c, f, p));
}
/* One stmatrix x4 of k16 step kb2 (a C primary expression) from four 32-bit registers (their C expressions). */
static const char *fa_stsm(ectx *c, const char *kb2, const char *r0, const char *r1, const char *r2, const char *r3) {
  return ex_A(c, "asm volatile(\"stmatrix.sync.aligned.m8n8.x4.shared.b16 [%%0], {%%1, %%2, %%3, %%4};\" :: "
                 "\"r\"(em_pr + (unsigned)(%s >> 2) * 8192u + ((((unsigned)(%s & 3) * 2u) ^ em_px) << 4)), "
                 "\"r\"(%s), \"r\"(%s), \"r\"(%s), \"r\"(%s) : \"memory\");", kb2, kb2, r0, r1, r2, r3);
}

/* The online softmax over one tile's scores sc: each row's running max (over the quad of threads holding it),
 * the correction of the old sum (corr0/1, also O's, applied by fa_rescale), P = exp2(s·sl - max·sl) packed two
 * to a register as PV's A fragments (p[k16 block][4], mma's A order), each thread's partial row sums (reduced
 * over the quad at the end). */
/* EMMY_EXP_SPLIT=K at compile time (an experiment, 2..16; the emitted CUDA unchanged without it): every K-th column
 * group's exponentials of P by a degree-3 polynomial on the FMA and integer pipes (em_ex2p) instead of the MUFU, whose
 * ex2 throughput (16 a cycle an SM) matches the tensor cores' work at head dim 64: the MUFU's bursts a little shorter
 * for a few more FMA-pipe issues (the twenty-second session's polynomial for every other column lost 15-60%). */
static int fa_exp_split(void) {
  const char *e = getenv("EMMY_EXP_SPLIT");
  int k = e ? atoi(e) : 0;
  return k >= 2 && k <= 16 ? k : 0;
}
/* EMMY_SMX_PAIRS=1 at compile time (an experiment; unchanged text without it): the row maxima and the row sums of P in
 * two partials (even and odd column groups), halving their dependent chains (16 fmaxf, 16 FADD a row at 128 keys),
 * against the "wait" stalls ncu shows beside cuDNN (thirty-third session). */
static int fa_smx_pairs(void) { return ex_env_choice("EMMY_SMX_PAIRS", 1); }

/* The em_ex2p lambda (EMMY_EXP_SPLIT): 2^x for x up to a few units above 0 (RESCALE=1's stale maxima), -inf and
 * anything under -126 giving 0: the nearest integer r by the 1.5 * 2^23 shifter, 2^(x - r) by a degree-3 polynomial
 * on [-0.5, 0.5] (relative error 7.5e-5, under bf16's P rounding), r added to the exponent bits. */
static void fa_ex2p_fn(ectx *c) {
  ex_line(c, "auto em_ex2p = [](float x) -> float {");
  ex_line(c, "  const float xc = fmaxf(x, -126.0f), t = xc + 12582912.0f, fr = xc - (t - 12582912.0f);");
  ex_line(c, "  const float p = fmaf(fmaf(fmaf(0.0551716154f, fr, 0.242611636f), fr, 0.693261033f), fr, 0.999928044f);");
  ex_line(c, "  const float y = __int_as_float(__float_as_int(p) + (__float_as_int(t) << 23));");
  ex_line(c, "  return x < -126.0f ? 0.0f : y;");
  ex_line(c, "};");
}

static void fa_softmax(ectx *c, const fa_t *f, double sl, const char *sc, const char *p) {
  int nj = f->BKV / 8, pairs = fa_smx_pairs(), split = fa_exp_split();
  ex_line(c, pairs ? "float mx0 = mrow[0], mx1 = mrow[1], my0 = -INFINITY, my1 = -INFINITY;" : "float mx0 = mrow[0], mx1 = mrow[1];");
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int j = 0; j < %d; j++) {", nj);
  if (pairs) {
    ex_line(c, "  if (j & 1) my0 = fmaxf(my0, fmaxf(%s[j][0], %s[j][1])), my1 = fmaxf(my1, fmaxf(%s[j][2], %s[j][3]));", sc, sc, sc, sc);
    ex_line(c, "  else mx0 = fmaxf(mx0, fmaxf(%s[j][0], %s[j][1])), mx1 = fmaxf(mx1, fmaxf(%s[j][2], %s[j][3]));", sc, sc, sc, sc);
  } else {
    ex_line(c, "  mx0 = fmaxf(mx0, fmaxf(%s[j][0], %s[j][1]));", sc, sc);
    ex_line(c, "  mx1 = fmaxf(mx1, fmaxf(%s[j][2], %s[j][3]));", sc, sc);
  }
  ex_line(c, "}");
  if (pairs) ex_line(c, "mx0 = fmaxf(mx0, my0), mx1 = fmaxf(mx1, my1);");
  ex_line(c, "mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));");
  ex_line(c, "mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));");
  ex_line(c, "mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));");
  ex_line(c, "mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));");
  if (f->lazy) {
    /* RESCALE=1: the maxima move (and O and l are corrected) only where a row of the warp grew by more than 8 in
     * base 2 (warp-uniform: the correction's branch does not diverge); else P is taken against the stale maximum */
    ex_line(c, "em_up = __any_sync(0xffffffffu, mx0 * %s > mrow[0] * %s + 8.0f || mx1 * %s > mrow[1] * %s + 8.0f);",
            ex_flit(c, sl, 17), ex_flit(c, sl, 17), ex_flit(c, sl, 17), ex_flit(c, sl, 17));
    ex_line(c, "if (!em_up) mx0 = mrow[0], mx1 = mrow[1];");
  }
  ex_line(c, "const float mb0 = mx0 == -INFINITY ? 0.0f : mx0 * %s, mb1 = mx1 == -INFINITY ? 0.0f : mx1 * %s;", ex_flit(c, sl, 17), ex_flit(c, sl, 17));
  if (f->lazy) ex_line(c, "if (em_up) {");
  ex_line(c, "%scorr0 = em_ex2(mrow[0] * %s - mb0);", f->lazy ? "  " : "", ex_flit(c, sl, 17));
  ex_line(c, "%scorr1 = em_ex2(mrow[1] * %s - mb1);", f->lazy ? "  " : "", ex_flit(c, sl, 17));
  ex_line(c, "%smrow[0] = mx0;", f->lazy ? "  " : "");
  ex_line(c, "%smrow[1] = mx1;", f->lazy ? "  " : "");
  if (f->lazy) {
    ex_line(c, "} else {");
    ex_line(c, "  corr0 = corr1 = 1.0f;");
    ex_line(c, "}");
  }
  if (!f->pvsum) ex_line(c, pairs ? "float rs0 = 0.0f, rs1 = 0.0f, rt0 = 0.0f, rt1 = 0.0f;" : "float rs0 = 0.0f, rs1 = 0.0f;");
  if (f->psm == 2) { /* PSMEM=2: each k16 step's P into the buffer as soon as its two key groups are packed */
    fa_prow(c, f, p);
    ex_line(c, "unsigned em_q0 = 0u, em_q1 = 0u;");
  }
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int j = 0; j < %d; j++) {", nj);
  if (split) { /* (j is a constant once unrolled: each group's exponential is the one or the other) */
    ex_line(c, "  const bool em_pe = j %% %d == %d;", split, split - 1);
    for (int q = 0; q < 4; q++)
      ex_line(c, "  const float p%d = em_pe ? em_ex2p(fmaf(%s[j][%d], %s, -mb%d)) : em_ex2(fmaf(%s[j][%d], %s, -mb%d));", q, sc, q,
              ex_flit(c, sl, 17), q / 2, sc, q, ex_flit(c, sl, 17), q / 2);
  } else {
    ex_line(c, "  const float p0 = em_ex2(fmaf(%s[j][0], %s, -mb0)), p1 = em_ex2(fmaf(%s[j][1], %s, -mb0));", sc, ex_flit(c, sl, 17), sc, ex_flit(c, sl, 17));
    ex_line(c, "  const float p2 = em_ex2(fmaf(%s[j][2], %s, -mb1)), p3 = em_ex2(fmaf(%s[j][3], %s, -mb1));", sc, ex_flit(c, sl, 17), sc, ex_flit(c, sl, 17));
  }
  if (f->pvsum) {
    /* (EMMY_PV_SUM: the sums come with PV) */
  } else if (pairs) {
    ex_line(c, "  if (j & 1) rt0 += p0 + p1, rt1 += p2 + p3;");
    ex_line(c, "  else rs0 += p0 + p1, rs1 += p2 + p3;");
  } else {
    ex_line(c, "  rs0 += p0 + p1;");
    ex_line(c, "  rs1 += p2 + p3;");
  }
  if (f->psm == 2) {
    ex_line(c, "  if (j & 1) %s", fa_stsm(c, "(j >> 1)", "em_q0", "em_q1", "em_pk(p0, p1)", "em_pk(p2, p3)"));
    ex_line(c, "  else em_q0 = em_pk(p0, p1), em_q1 = em_pk(p2, p3);");
  } else {
    ex_line(c, "  %s[j >> 1][(j & 1) * 2] = em_pk(p0, p1);", p);
    ex_line(c, "  %s[j >> 1][(j & 1) * 2 + 1] = em_pk(p2, p3);", p);
  }
  ex_line(c, "}");
  if (f->pvsum) return;
  if (pairs) ex_line(c, "rs0 += rt0, rs1 += rt1;");
  ex_line(c, "lrow[0] = lrow[0] * corr0 + rs0;");
  ex_line(c, "lrow[1] = lrow[1] * corr1 + rs1;");
}

/* O *= the rows' corrections (once the PV group that accumulates into O has retired). */
static void fa_rescale(ectx *c, const fa_t *f) {
  if (f->lazy) ex_line(c, "if (em_up)");
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int j = 0; j < %d; j++) {", fa_ogroups(f));
  ex_line(c, "  o[j][0] *= corr0; o[j][1] *= corr0; o[j][2] *= corr1; o[j][3] *= corr1;");
  ex_line(c, "}");
}

/* V's descriptor `name` at shared address `addr` (N-major: D/64 column blocks BKV·128 bytes apart, 8-key groups 1024);
 * EMMY_PV_SUM: the leading offset (16-byte units) points at the ones block instead. */
static void fa_v_desc(ectx *c, const fa_t *f, const char *name, const char *addr) {
  const char *lbo = f->pvsum ? ex_A(c, "((%s + %lldu - %s) >> 4)", "em_sb", fa_ones(f), addr) : ex_A(c, "%d", f->BKV * 128 >> 4);
  ex_line(c, "const unsigned long long %s = (unsigned long long)((%s & 0x3FFFFu) >> 4) | ((unsigned long long)%s << 16) | "
             "((unsigned long long)(1024 >> 4) << 32) | (1ull << 62);%s",
          name, addr, lbo, f->pvsum ? " /* EMMY_PV_SUM: the ones block at the leading offset */" : "");
}

/* O += P V: BKV/16 wgmma k16 steps, P from registers (PSMEM: from this warpgroup's P buffer), V's tile N-major
 * (its D/64 column blocks BKV·128 bytes apart: the descriptor's leading offset; 8-key groups 1024 bytes apart: its
 * stride offset). EMMY_PV_SUM=1 (head dim 64): N = 72, the ninth column group read from the ones block at the
 * descriptor's leading offset (the second 64-column block of an N-major operand), so that o[8] accumulates each
 * row's sum of P with O — rescaled with it, summed over the quad by the tensor cores. Each k16 step's offset moves
 * the start address 2048 bytes on and the leading offset as far back (one 64-bit add: the fields are disjoint and
 * the offset stays positive), so every step reads the same 16 rows of ones. */
static void fa_pv(ectx *c, const fa_t *f, const char *kbase, const char *p) {
  ex_line(c, "em_wg_fence();");
  ex_line(c, "const unsigned em_va = %s + %lldu;", kbase, fa_kvbytes(f));
  fa_v_desc(c, f, "em_vd", "em_va");
  if (f->psm) ex_line(c, "const unsigned long long em_pd = em_wg_desc(%s);", fa_pb(c, f, p));
  for (int kb2 = 0; kb2 < f->BKV / 16; kb2++)
    ex_wgmma_insn_at(c, (int)f->D + (f->pvsum ? 8 : 0), f->mt, "o", f->psm ? "em_pd" : NULL, ((kb2 >> 2) * 8192 + (kb2 & 3) * 32) >> 4,
                     f->psm ? NULL : ex_A(c, "\"r\"(%s[%d][0]), \"r\"(%s[%d][1]), \"r\"(%s[%d][2]), \"r\"(%s[%d][3])", p, kb2, p, kb2, p, kb2, p, kb2),
                     "em_vd", f->pvsum ? kb2 * 128L - (kb2 * 128L << 16) : kb2 * (2048 >> 4), "1", 1);
  ex_line(c, "em_wg_commit();");
}

/* PSMEM=1: P (register set p, PV's A fragments) into this warpgroup's P buffer, one stmatrix x4 a k16 step — its
 * four 8 x 8 matrices are the fragments' (rows +0 / +8) x (keys +0 / +8), lane l giving the address of row l % 8 of
 * matrix l / 8; the 16-byte chunk XOR the row (128-byte swizzle). Only once the PV that read the buffer retired. */
static void fa_pstore(ectx *c, const fa_t *f, const char *p) {
  ex_line(c, "{");
  c->indent++;
  fa_prow(c, f, p);
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int kb2 = 0; kb2 < %d; kb2++)", f->BKV / 16);
  ex_line(c, "  %s", fa_stsm(c, "kb2", ex_A(c, "%s[kb2][0]", p), ex_A(c, "%s[kb2][1]", p), ex_A(c, "%s[kb2][2]", p), ex_A(c, "%s[kb2][3]", p)));
  c->indent--;
  ex_line(c, "}");
}
/* PSMEM: the stores made visible to the tensor cores' reads (the async proxy) before the next PV. Each warp's
 * wgmma slice reads the 16 rows of P its own lanes wrote, so the warp's own sync suffices (FlashAttention-3). */
static void fa_pfence(ectx *c) {
  ex_line(c, "asm volatile(\"fence.proxy.async.shared::cta;\" ::: \"memory\");");
  ex_line(c, "__syncwarp();");
}

/* Ring use u's stage base in shared memory and its full barriers' phase. */
static void fa_stage(ectx *c, const fa_t *f, const char *var, const char *use) {
  if (f->persist) use = ex_A(c, "em_ub + %s", use); /* (APERSIST: the uses of earlier items first) */
  ex_line(c, "const int st%s = (%s) %% %d;", var, use, f->ST);
  ex_line(c, "const unsigned ph%s = (unsigned)((%s) / %d) & 1u, kb%s = em_sb + %lldu + (unsigned)st%s * %lldu;", var, use, f->ST, var,
          fa_qbytes(f), var, 2 * fa_kvbytes(f));
}

/* One arrival of each warp's first lane on the mbarrier bar (where cond holds, when given). */
static void fa_arrive(ectx *c, const char *cond, const char *bar) {
  ex_line(c, "if (%slane == 0) asm volatile(\"mbarrier.arrive.shared::cta.b64 _, [%%0];\" :: \"r\"(em_smem(&%s)) : \"memory\");",
          cond ? ex_A(c, "%s && ", cond) : "", bar);
}

/* APERSIST=1: this warp's release of its Q slice (em_qempty). */
static void fa_qrelease(ectx *c) { fa_arrive(c, NULL, "em_qempty"); }

/* One arrival of each warp's first lane (where cond holds, when given) on the ring's empty barrier bar: EMMY_KVMC=1, on
 * both CTAs' (either's producer loads half of each stage into both). */
static void fa_ring_arrive(ectx *c, const fa_t *f, const char *cond, const char *bar) {
  if (f->mc)
    ex_line(c, "if (%slane == 0) for (unsigned q = 0; q < 2u; q++) em_mbar_arrive_cluster(&%s, q);", cond ? ex_A(c, "%s && ", cond) : "",
            bar);
  else fa_arrive(c, cond, bar);
}

/* This warpgroup's release of ring use u (stage st<var>). */
static void fa_release(ectx *c, const fa_t *f, const char *var) { fa_ring_arrive(c, f, NULL, ex_A(c, "em_empty[st%s]", var)); }

/* PINGPONG: slice w's turn is named barrier base + w — 4 for two slices, 11 for three (2-4 are the epilogue's
 * per-slice barriers, 6-7 OSMEM=4's, 8-10 the mask vote's) — and the next slice's, the last handing it to the first. */
static int fa_pp_bar(const fa_t *f) { return f->NQ == 2 ? 4 : 11; }
static const char *fa_pp_next(const fa_t *f) { return f->NQ == 2 ? "5 - wq" : "wq == 2 ? 11 : 12 + wq"; }

/* One tile (ring use u) with a next one: the next tile's S = QKᵀ and this tile's O += PV (P in register set p;
 * PSMEM=1: in the P buffer) issued together, the next softmax (into register set pn) while PV runs on the tensor
 * cores, O corrected once PV retired, the stage released (PSMEM=1: then P into the buffer). */
static void fa_step(ectx *c, const fa_t *f, const char *u, const char *p, const char *pn) {
  int nj = f->BKV / 8;
  ex_line(c, "{");
  c->indent++;
  fa_stage(c, f, "", u);
  fa_stage(c, f, "n", ex_A(c, "%s + %d", u, f->P));
  ex_line(c, "const long long s0 = (long long)(%s + %d%s) * %d;", u, f->P, fa_klo_on(f) ? " + em_klo" : "", f->BKV);
  ex_line(c, "float sn[%d][4];", nj);
  fa_stamp(c, f, "unsigned em_c = em_clock();");
  ex_line(c, "em_mbar_wait(&em_fk[stn], phn);");
  fa_mark(c, f, 2);
  /* PINGPONG: this warpgroup's turn (named barrier fa_pp_bar + wq) before its wgmma, the other's turn after them, so one
   * warpgroup's softmax runs while the other's matrix products hold the tensor cores */
  if (f->pp) {
    ex_line(c, "asm volatile(\"bar.sync %%0, 256;\" :: \"r\"(%d + wq) : \"memory\");", fa_pp_bar(f));
    fa_mark(c, f, 3);
  }
  fa_qk(c, f, "sn", "kbn");
  ex_line(c, "em_mbar_wait(&em_fv[st], ph);");
  fa_pv(c, f, "kb", p);
  if (f->pp) ex_line(c, "asm volatile(\"bar.arrive %%0, 256;\" :: \"r\"(%s) : \"memory\");", fa_pp_next(f));
  fa_mark(c, f, 4);
  ex_line(c, "em_wg_wait1();"); /* the next S is in registers; PV may still run */
  fa_mark(c, f, 5);
  fa_softmax(c, f, fa_mask(c, f, "sn"), "sn", pn);
  if (f->psm == 2) fa_pfence(c); /* (P written into the other buffer during the softmax) */
  fa_mark(c, f, 6);
  ex_line(c, "em_wg_wait0();");
  fa_release(c, f, "");
  if (f->psm == 1) fa_pstore(c, f, pn); /* (the PV that read the buffer retired) */
  fa_rescale(c, f);
  if (f->psm == 1) fa_pfence(c);
  fa_mark(c, f, 7);
  fa_stamp(c, f, "em_sa[1]++;");
  c->indent--;
  ex_line(c, "}");
}

/* EMMY_MASK_RANGE=1 (an experiment, compile time; emitted CUDA unchanged without it): with a bool attention mask
 * (KVSPLIT=1, APERSIST=0, OSMEM below 4), the key tiles a warpgroup computes are bounded by its rows' mask, as causal's
 * ntw bounds them by the diagonal: scanning up from the first tile and down from the last, each tile's mask read by
 * the warpgroup and voted on (bar.red.or over its 128 threads, named barrier 8 + wg) until one has a visible key;
 * with PINGPONG both warpgroups take the union (named barrier 10), so that they keep turns. The tiles before the
 * range are waited for and released at once, those after it by the tail loop; the rest of the consumer code runs in
 * a scope where kp and ntw are the range's ends. (A guard on each tile's wgmma instead made ptxas serialize every
 * wgmma: C7520.) */
static int fa_mask_range(ectx *c, const fa_t *f) {
  return f->mask >= 0 && ex_V(c, f->mask)->dtype == EM_BOOL && f->P == 1 && !f->persist && f->osmem < 4 &&
         ex_env_choice("EMMY_MASK_RANGE", 2);
}
/* EMMY_MASK_RANGE=2: each thread's share of a tile's vote read as 16-byte loads — the warpgroup's 64 rows, a row a
 * pair of threads, BKV/2 keys a thread — where the mask is a bool input whose keys lie contiguous and aligned
 * (checked per row at run time; else the keys one by one). The votes of =1 read a byte a score in the wgmma's own
 * layout, BKV/4 loads a thread a tile; the range's scans read the mask over every tile they skip (the H200: 512
 * tokens 52.3 -> 57.9 µs, 2048 730 -> 637, docs/performance.md). Returns whether it emitted the vote's reads. */
static int fa_tile_vote_vec(ectx *c, const fa_t *f) {
  if (ex_env_choice("EMMY_MASK_RANGE", 2) != 2) return 0;
  ivec mi = fa_mask_index(c, f);
  int src = ex_view_source(c, f->mask, &mi);
  if (src < 0 || ex_V(c, src)->kind == EM_V_NODE || ex_V(c, src)->dtype != EM_BOOL) return 0;
  const int p = ex_input_pos(c, src), kpt = f->BKV / 2;
  const char *flat = ex_linearize(c, &mi, &ex_V(c, src)->shape);
  ex_line(c, "{");
  c->indent++;
  ex_line(c, "const int em_vt = threadIdx.x & 127;");
  ex_line(c, "const long long l = ql0 + em_vt / 2, em_s1 = s0 + (em_vt & 1) * %d;", kpt);
  ex_line(c, "if (l < Lq && em_s1 < S) {");
  c->indent++;
  ex_line(c, "long long em_f0, em_f1;");
  ex_line(c, "{ const long long s = em_s1; em_f0 = %s; }", flat);
  ex_line(c, "{ const long long s = em_s1 + %d; em_f1 = %s; }", kpt - 1, flat);
  ex_line(c, "const unsigned char *const em_mp = reinterpret_cast<const unsigned char *>(in%d) + em_f0;", p);
  ex_line(c, "if (em_s1 + %d < S && em_f1 == em_f0 + %d && (reinterpret_cast<unsigned long long>(em_mp) & 15) == 0) {", kpt - 1, kpt - 1);
  ex_line(c, "  #pragma unroll");
  ex_line(c, "  for (int q = 0; q < %d; q++) {", kpt / 16);
  ex_line(c, "    const uint4 em_w = reinterpret_cast<const uint4 *>(em_mp)[q];");
  ex_line(c, "    if (em_w.x | em_w.y | em_w.z | em_w.w) em_m = 1u;");
  ex_line(c, "  }");
  ex_line(c, "} else {");
  ex_line(c, "  for (int k = 0; k < %d; k++) {", kpt);
  ex_line(c, "    const long long s = em_s1 + k;");
  ex_line(c, "    if (s < S && reinterpret_cast<const unsigned char *>(in%d)[%s]) em_m = 1u;", p, flat);
  ex_line(c, "  }");
  ex_line(c, "}");
  c->indent--;
  ex_line(c, "}");
  c->indent--;
  ex_line(c, "}");
  return 1;
}
/* One key tile's vote (s0 its first key): em_v set where a row of this warpgroup sees a key of the tile. */
static void fa_tile_vote(ectx *c, const fa_t *f) {
  int mark = c->memo.n;
  ivec mi = fa_mask_index(c, f);
  ex_line(c, "unsigned em_m = 0u, em_v;");
  if (!fa_tile_vote_vec(c, f)) {
    ex_line(c, "#pragma unroll");
    ex_line(c, "for (int j = 0; j < %d; j++)", f->BKV / 8);
    ex_line(c, "  #pragma unroll");
    ex_line(c, "  for (int qd = 0; qd < 4; qd++) {");
    c->indent += 2;
    ex_line(c, "const long long s = s0 + j * 8 + (lane & 3) * 2 + (qd & 1), l = qd < 2 ? lr0 : lr1;");
    ex_line(c, "if (s < S && l < Lq) {");
    c->indent++;
    ex_line(c, "if (%s) em_m = 1u;", ex_val(c, f->mask, &mi));
    c->memo.n = mark;
    c->indent--;
    ex_line(c, "}");
    c->indent -= 2;
    ex_line(c, "  }");
  }
  ex_line(c, "asm volatile(\"{ .reg .pred p, q; setp.ne.u32 p, %%1, 0; bar.red.or.pred q, %%2, 128, p; selp.u32 %%0, 1, 0, q; }\" "
             ": \"=r\"(em_v) : \"r\"(em_m), \"r\"(8 + wg) : \"memory\");");
}
/* The ring uses lo..hi-1 this warpgroup computes nothing on (its key part's only, KVSPLIT=2): each waited for (its
 * loads landed, so that the release counts toward its own use) and released. Under EMMY_MASK_RANGE no warpgroup
 * may compute on a use, so its K barrier is waited for too: a K load still landing when the stage is refilled
 * would fold two uses into one phase of that barrier (the GPU's first run: a launch failure at seq 513). */
static void fa_pass_tiles(ectx *c, const fa_t *f, const char *lo, const char *hi) {
  ex_line(c, "for (int it = %s; it < %s; it++) {", lo, hi);
  c->indent++;
  if (f->P > 1) ex_line(c, "if (it %% %d != kp) continue;", f->P);
  fa_stage(c, f, "", "it");
  if (fa_mask_range(c, f)) ex_line(c, "em_mbar_wait(&em_fk[st], ph);");
  ex_line(c, "em_mbar_wait(&em_fv[st], ph);");
  fa_release(c, f, "");
  c->indent--;
  ex_line(c, "}");
}

/* The range's scans, the union across warpgroups (PINGPONG), the tiles before it released, and the scope opened. */
static void fa_mask_range_open(ectx *c, const fa_t *f) {
  ex_line(c, "int em_kf = 0, em_kt = ntw; /* EMMY_MASK_RANGE: the key tiles with a visible key, [em_kf, em_kt) */");
  ex_line(c, "for (; em_kf < ntw; em_kf++) {");
  c->indent++;
  ex_line(c, "const long long s0 = (long long)em_kf * %d;", f->BKV);
  fa_tile_vote(c, f);
  ex_line(c, "if (em_v) break;");
  c->indent--;
  ex_line(c, "}");
  ex_line(c, "for (; em_kt > em_kf + 1; em_kt--) {");
  c->indent++;
  ex_line(c, "const long long s0 = (long long)(em_kt - 1) * %d;", f->BKV);
  fa_tile_vote(c, f);
  ex_line(c, "if (em_v) break;");
  c->indent--;
  ex_line(c, "}");
  ex_line(c, "if (em_kf >= ntw) em_kt = em_kf = ntw;");
  if (f->pp) {
    ex_line(c, "__shared__ int em_rng[4];");
    ex_line(c, "if ((threadIdx.x & 127) == 0) em_rng[2 * wq] = em_kf, em_rng[2 * wq + 1] = em_kt;");
    ex_line(c, "asm volatile(\"bar.sync 10, 256;\" ::: \"memory\");");
    ex_line(c, "em_kf = min(em_rng[0], em_rng[2]), em_kt = max(em_rng[1], em_rng[3]);");
  }
  fa_pass_tiles(c, f, "0", "em_kf");
  ex_line(c, "{");
  ex_line(c, "const int kp = em_kf, ntw = em_kt;");
}

/* EMMY_PP_CARRY (the default): the end of an item without the two warpgroups' meeting (barrier 1), so that the first
 * warpgroup starts the next item's tiles while the second still runs this one's last PV and epilogue. The turns stay
 * paired across items: the second warpgroup hands over its last turn of item n (bar.arrive 4), the first takes it as
 * its first turn of item n + 1 (bar.sync 4 in its first step), and no warpgroup can hand over a turn that the other
 * has not taken, since each hand-over follows a turn taken. OSMEM=4's barriers 6 and 7 (each warpgroup's last QKᵀ retired,
 * waited by the other before staging O) need the first warpgroup to be held inside item n + 1 until the second is past
 * item n's epilogue: its second step's turn is the second warpgroup's first hand-over of item n + 1, so items of three
 * or more key tiles (two or more steps) need no meeting; shorter ones keep it. */
static void fa_pp_carry_end(ectx *c, const fa_t *f) {
  ex_line(c, "if (nt < 3) asm volatile(\"bar.sync 1, %d;\" ::: \"memory\"); /* EMMY_PP_CARRY: short items meet */", 128 * f->NQ);
}

/* The consumer warpgroups: this warpgroup's head and rows and its key range (causal: up to its last row). Tile
 * 0's S and softmax first; then for each tile with a next one, the next tile's S = QKᵀ and this tile's O += PV are
 * issued together, the next softmax runs while PV is on the tensor cores, and O is corrected once PV retired; the
 * last tile's PV; the ring uses past this warpgroup's range are only released (after their loads landed, so
 * that each release counts toward its own use); the epilogue. */
static void fa_consumers(ectx *c, const fa_t *f) {
  int regs = fa_consumer_regs(f), nj = f->BKV / 8, kbk = f->BKV / 16;
  if (regs) ex_line(c, "asm volatile(\"setmaxnreg.inc.sync.aligned.u32 %d;\");", regs);
  fa_stamp(c, f, "unsigned em_sa[9] = {0u, 0u, 0u, 0u, 0u, 0u, 0u, 0u, 0u}; const unsigned em_t0 = em_clock(); /* STAMP */");
  if (f->persist) {
    /* APERSIST=1: item after item, the ring's uses and Q's phase counted on */
    ex_line(c, "unsigned em_ub = 0, em_n = 0;");
    fa_items_loop(c, f);
    fa_item(c, f);
  }
  /* warpgroup wg: Q slice wq, key part kp (KVSPLIT=2: the tiles kp, kp + 2, ...) */
  /* (EMMY_UNIFORM_KV: one key part's first tile the constant 0; =2: the warpgroup index broadcast from lane 0 too) */
  int uk = f->P == 1 ? ex_env_choice("EMMY_UNIFORM_KV", 2) : 0;
  ex_line(c, "const int wg = %s, wq = wg %% %d, kp = %s;%s", uk == 2 ? "__shfl_sync(0xffffffffu, wid >> 2, 0)" : "wid >> 2", f->NQ,
          uk ? "0" : ex_A(c, "wg / %d", f->NQ), uk == 2 ? " /* EMMY_UNIFORM_KV=2 */" : uk ? " /* EMMY_UNIFORM_KV: one key part */" : "");
  ex_line(c, "const long long bh = %s;", fa_bh(c, f, "wq"));
  ivec bi = ex_unravel(c, "bh", &f->bat);
  for (int i = 0; i < f->r - 2; i++) ex_line(c, "const long long x%d = %s;", i, bi.e[i]);
  ex_line(c, "const long long ql0 = %s;", fa_row0(c, f, "wq"));
  ex_line(c, "const long long lr0 = ql0 + (wid & 3) * 16 + (lane >> 2), lr1 = lr0 + 8;");
  if (f->causal) ex_line(c, "const int ntw = (int)(((ql0 + 64 < S ? ql0 + 64 : S) + %d) / %d)%s;", f->BKV - 1, f->BKV, f->pos >= 0 ? " - em_klo" : "");
  else ex_line(c, "const int ntw = nt;");
  if (f->pos >= 0) { /* the thread's two rows' first keys (their sequences' starts) */
    const em_node *an = &c->g->nodes.v[ex_V(c, f->a)->node];
    ex_sdpa_row_start(c, an, "em_ls0", f->r > 2 ? "x0" : "0LL", "lr0", "lr0 < Lq");
    ex_sdpa_row_start(c, an, "em_ls1", f->r > 2 ? "x0" : "0LL", "lr1", "lr1 < Lq");
  }
  ex_line(c, "float o[%d][4];", fa_ogroups(f));
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int j = 0; j < %d; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;", fa_ogroups(f));
  ex_line(c, "float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.0f, 0.0f}, corr0, corr1;");
  if (f->lazy) ex_line(c, "bool em_up = true;");
  ex_line(c, "unsigned pa[%d][4], pb[%d][4];", kbk, kbk);
  /* PINGPONG: the first turn is the first warpgroup's (EMMY_PP_CARRY: the first item's; later items' first turn is
   * the second warpgroup's last one of the item before) */
  if (f->pp)
    ex_line(c, "if (wq == %d%s) asm volatile(\"bar.arrive %d, 256;\" ::: \"memory\");", f->NQ - 1, f->carry ? " && em_r == 0" : "",
            fa_pp_bar(f));
  ex_line(c, "em_mbar_wait(&em_qbar, %s);", f->persist ? "em_n & 1u" : "0u");
  if (fa_mask_range(c, f)) fa_mask_range_open(c, f);
  ex_line(c, "if (kp < ntw) {");
  c->indent++;
  ex_line(c, "const long long s0 = (long long)%s * %d;", fa_klo_on(f) ? "(kp + em_klo)" : "kp", f->BKV);
  fa_stage(c, f, "", "kp");
  ex_line(c, "float sc[%d][4];", nj);
  ex_line(c, "em_mbar_wait(&em_fk[st], ph);");
  fa_qk(c, f, "sc", "kb");
  ex_line(c, "em_wg_wait0();");
  fa_softmax(c, f, fa_mask(c, f, "sc"), "sc", "pa");
  if (f->psm == 1) fa_pstore(c, f, "pa");
  if (f->psm) fa_pfence(c);
  (void)nj;
  c->indent--;
  ex_line(c, "}");
  /* two tiles an iteration, so that P alternates between two register sets (a copy from one to the other made
   * ptxas serialize every wgmma: C7513) */
  ex_line(c, "for (int it = kp; it + %d < ntw; it += %d) {", f->P, 2 * f->P);
  c->indent++;
  fa_step(c, f, "it", "pa", "pb");
  ex_line(c, "if (it + %d >= ntw) break;", 2 * f->P);
  fa_step(c, f, ex_A(c, "it + %d", f->P), "pb", "pa");
  c->indent--;
  ex_line(c, "}");
  /* PINGPONG: the second warpgroup's last turn handed back is taken, so that no arrival outlives the loop
   * (EMMY_PP_CARRY: on the CTA's last item only; before, it is the next item's first turn) */
  if (f->pp)
    ex_line(c, "if (wq == 0%s) asm volatile(\"bar.sync %d, 256;\" ::: \"memory\");",
            !f->carry ? "" : f->split ? " && em_j + 1 >= em_ndp + em_nsk" : " && em_t + gridDim.x >= em_items", fa_pp_bar(f));
  if (fa_os4_sync(f)) ex_line(c, "asm volatile(\"bar.arrive %%0, 256;\" :: \"r\"(6 + wq) : \"memory\"); /* this warpgroup's QKᵀ retired */");
  /* APERSIST=1 with an epilogue from the registers (OSMEM=0) or staged in a buffer of its own (OSMEM=3): every
   * S = QKᵀ of this item has retired, so the Q slice is free for the next item's load while the last PV and the
   * epilogue run (FlashAttention-3 releases Q there too); OSMEM 1 and 2 write O over Q and release it after */
  int qearly = f->persist && (f->osmem == 0 || f->osmem >= 3);
  if (qearly) fa_qrelease(c);
  /* OSMEM=4: O is staged over this warpgroup's last ring stage (its K and V read), released after the epilogue */
  if (f->osmem == 4) ex_line(c, "unsigned em_ost = em_sb, em_lst = 0;");
  ex_line(c, "if (kp < ntw) {");
  c->indent++;
  ex_line(c, "const int em_n = (ntw - 1 - kp) / %d;", f->P); /* this part's last tile: kp + P·em_n */
  fa_stage(c, f, "", ex_A(c, "kp + %d * em_n", f->P));
  ex_line(c, "em_mbar_wait(&em_fv[st], ph);");
  if (f->psm == 1) {
    fa_pv(c, f, "kb", NULL); /* (P in the buffer) */
  } else { /* (PSMEM=2: the buffers alternate as the register sets do) */
    ex_line(c, "if (em_n & 1) {");
    c->indent++;
    fa_pv(c, f, "kb", "pb");
    c->indent--;
    ex_line(c, "} else {");
    c->indent++;
    fa_pv(c, f, "kb", "pa");
    c->indent--;
    ex_line(c, "}");
  }
  ex_line(c, "em_wg_wait0();");
  if (f->osmem == 4) ex_line(c, "em_ost = kb, em_lst = st;");
  else fa_release(c, f, "");
  c->indent--;
  ex_line(c, "}");
  fa_pass_tiles(c, f, "ntw", "nt");
  if (f->P > 1) fa_merge(c, f, f->mask >= 0 ? 1.0 : f->scale * M_LOG2E);
  fa_stamp(c, f, "const unsigned em_ce = em_clock();");
  if (f->split) fa_split_fixup(c, f, f->mask >= 0 ? 1.0 : f->scale * M_LOG2E);
  fa_epilogue(c, f);
  if (f->split) {
    c->indent--;
    ex_line(c, "}");
  }
  fa_stamp(c, f, "em_sa[8] += em_clock() - em_ce; em_sa[0]++;");
  if (f->osmem == 4) fa_ring_arrive(c, f, "kp < ntw", "em_empty[em_lst]"); /* (every warp past its reads of the staged O) */
  if (fa_mask_range(c, f)) ex_line(c, "}");
  if (f->persist) {
    /* PINGPONG: both warpgroups past this item (the first's last bar.sync 4 taken) before the second's next
     * bar.arrive 4, which would otherwise complete that barrier with its own two arrivals */
    if (f->carry) fa_pp_carry_end(c, f);
    else if (f->pp || fa_os4_sync(f)) ex_line(c, "asm volatile(\"bar.sync 1, %d;\" ::: \"memory\");", 128 * f->NQ);
    if (!qearly) fa_qrelease(c); /* Q's slices (and the staged O over them) free for the next item's loads */
    ex_line(c, "em_ub += nt;");
    c->indent--;
    ex_line(c, "}");
  }
  if (f->otma && f->L->ntmaps > 3) ex_line(c, "if ((tid & 127) == 0) em_bulk_wait0(); /* OTMA: this thread's stores complete */");
  if (f->mc) ex_line(c, "em_cluster_sync(); /* EMMY_KVMC=1: the peer's releases of this CTA's stages have landed */");
  if (f->sp) {
    ex_line(c, "if ((tid & 127) == 0) { /* STAMP: this warpgroup's record, and (the first) the CTA's timeline */");
    ex_line(c, "  unsigned *const em_w = em_st + (wid >> 2) * %d;", FA_STAMP_FIELDS);
    ex_line(c, "  for (int i = 0; i < 9; i++) em_w[i] = em_sa[i];");
    ex_line(c, "  em_w[9] = em_clock() - em_t0;");
    ex_line(c, "  if (wid == 0) {");
    ex_line(c, "    const unsigned long long em_g1 = em_gtime();");
    ex_line(c, "    unsigned *const em_l = em_st + %d;", 4 * FA_STAMP_FIELDS);
    ex_line(c, "    em_l[0] = (unsigned)em_g0, em_l[1] = (unsigned)(em_g0 >> 32), em_l[2] = (unsigned)em_g1, em_l[3] = (unsigned)(em_g1 >> 32);");
    ex_line(c, "    em_l[4] = em_t0 - em_e0, em_l[9] = 1u;");
    ex_line(c, "  }");
    ex_line(c, "}");
  }
}

/* The facts of FLASH=2, or an ex_fail naming what it needs. */
static int fa_facts(ectx *c, fa_t *f) {
  memset(f, 0, sizeof *f);
  f->a = c->t->anchor;
  const em_node *an = &c->g->nodes.v[ex_V(c, f->a)->node];
  f->q = an->args[0].tensor;
  f->k = an->args[1].tensor;
  f->v = an->args[2].tensor;
  f->mask = an->args[3].present ? an->args[3].tensor : -1;
  f->qs = ex_S(c, f->q);
  f->ks = ex_S(c, f->k);
  f->vs = ex_S(c, f->v);
  f->os = ex_S(c, f->a);
  f->r = f->qs->rank;
  f->dt = ex_V(c, f->a)->dtype;
  f->causal = an->args[5].b;
  f->gqa = an->args[7].b;
  f->pos = an->args[8].present ? an->args[8].tensor : -1;
  int BQ = EX_KNOB(c, BQ);
  f->BKV = EX_KNOB(c, BKV);
  f->ST = EX_KNOB(c, KVST);
  f->pack = EX_KNOB(c, QPACK);
  f->minb = EX_KNOB(c, MINB);
  f->P = EX_KNOB(c, KVSPLIT);
  f->NQ = BQ / 64;
  f->NWG = f->NQ * f->P;
  f->pp = EX_KNOB(c, PINGPONG);
  f->persist = EX_KNOB(c, APERSIST);
  f->osmem = EX_KNOB(c, OSMEM);
  f->sp = (int)EX_KNOB(c, STAMP);
  f->lazy = (int)EX_KNOB(c, RESCALE);
  f->otma = (int)EX_KNOB(c, OTMA);
  f->psm = (int)EX_KNOB(c, PSMEM);
  /* EMMY_KVMC=1 (an experiment, compile time; docs/formats.md): where both CTAs of a cluster take the same key tiles in
   * the same order, one query tile each (APERSIST=1: items paired) — non-causal, KVSPLIT=1, QPACK=0, no seq_pos, no
   * mask range */
  f->mc = ex_env_choice("EMMY_KVMC", 1) && !f->causal && f->P == 1 && !f->pack && f->pos < 0 && !fa_mask_range(c, f);
  /* PINGPONG's turns carried from item to item (the default since the fifty-sixth session; EMMY_PP_CARRY=0 at compile
   * time emits the earlier text, docs/formats.md): persistent ping-pong over items alike — two Q slices, non-causal, no
   * mask, no seq_pos, no multicast (fa_pp_carry_end) */
  f->carry = ex_env_default_on("EMMY_PP_CARRY") && f->persist && f->pp && f->NQ == 2 && !f->causal && f->mask < 0 &&
             f->pos < 0 && !f->mc;
  /* EMMY_ASPLIT=1 (an experiment, compile time; docs/formats.md): the persistent items that would leave the last round
   * short shared out by key tiles (stream-K: every CTA the same key tiles to within one), a split item's pieces merged
   * by its owner — non-causal (items alike), no mask, no seq_pos, KVSPLIT=1, no multicast, no lazy rescale */
  f->split = ex_env_choice("EMMY_ASPLIT", 1) && f->persist && !f->causal && f->mask < 0 && f->pos < 0 && f->P == 1 && !f->mc &&
             !f->lazy;
  if (f->otma && f->osmem < 2) {
    ex_fail(c, "OTMA=1 (O stored by TMA) needs O staged in 64-column swizzled blocks (OSMEM 2-4)");
    return 0;
  }
  if (f->osmem >= 3 && !f->persist) {
    ex_fail(c, "OSMEM=3 and 4 (O staged in a buffer of its own or over the last K/V stage, so that Q is free after the "
               "last QK^T) need APERSIST=1");
    return 0;
  }
  if (f->pos >= 0 && (f->P != 1 || f->persist || f->pack)) {
    ex_fail(c, "FLASH=2 with seq_pos (sequences packed end to end) needs KVSPLIT=1, APERSIST=0 and QPACK=0");
    return 0;
  }
  if (f->persist && (f->P != 1 || f->pack || (f->minb != 1 && f->NWG != 1))) {
    ex_fail(c, "APERSIST=1 needs KVSPLIT=1, QPACK=0 and MINB=1, or MINB 2 or 3 with one consumer warpgroup (BQ=64) (MINB CTAs "
               "an SM looping over (query tile, head) items)");
    return 0;
  }
  if (f->pp && (f->NQ < 2 || f->P != 1 || (f->causal && f->BKV != 64 * f->NQ))) {
    /* (the turns pair the warpgroups' steps one for one: equal tile counts. Causal with BKV = BQ keeps them equal —
     * the 64-row slices' last keys, min(q0 + 64·(i + 1), S) with q0 a multiple of BQ, fall in the same key tile —
     * while 64-key tiles give each later slice a tile more) */
    ex_fail(c, "PINGPONG=1 needs two or three Q slices' warpgroups (BQ 128 or 192, KVSPLIT=1) over equal key tile counts "
               "(causal: BKV=BQ)");
    return 0;
  }
  if (f->pp && f->NQ == 3 && (f->mask >= 0 || f->osmem == 4)) {
    /* (named barriers 6 and 8-10 are OSMEM=4's and the mask vote's, written for two slices) */
    ex_fail(c, "PINGPONG=1 with three Q slices (BQ=192) takes no attention mask and no OSMEM=4");
    return 0;
  }
  int64_t Dv;
  if (!em_dim_is_const(&f->qs->d[f->r - 1], &f->D) || !em_dim_is_const(&f->vs->d[f->r - 1], &Dv) || f->D != Dv ||
      (f->D != 64 && f->D != 128)) {
    ex_fail(c, "FLASH=2 needs equal constant head dims of 64 or 128");
    return 0;
  }
  f->scale = an->args[6].present ? an->args[6].f : 1.0 / sqrt((double)f->D);
  /* EMMY_PV_SUM=1 (an experiment, compile time; docs/formats.md): the row sums of P by PV's wgmma over a ones column —
   * head dim 64 (N 72; at 128 the third column block would sit two leading offsets on), KVSPLIT=1, P from registers,
   * no stream-K split, no multicast (the merges read the threads' partial sums) */
  f->pvsum = ex_env_choice("EMMY_PV_SUM", 1) && f->D == 64 && f->P == 1 && !f->psm && !f->split && !f->mc;
  if (f->dt != EM_BF16 && f->dt != EM_F16) {
    ex_fail(c, "FLASH=2 needs bf16/f16, got %s", em_dtype_name(f->dt));
    return 0;
  }
  f->mt = f->dt == EM_F16 ? "f16" : "bf16";
  f->pk = f->dt == EM_F16 ? "f16x2" : "bf16x2";
  if ((BQ != 64 && BQ != 128 && BQ != 192) || (f->BKV != 64 && f->BKV != 128 && f->BKV != 176 && f->BKV != 192) || f->ST < 2 || f->ST > 4 || f->minb < 1 || f->minb > 3 ||
      (f->minb > 1 && f->NWG != 1) || (f->P != 1 && f->P != 2) || (f->P == 2 && (BQ != 64 || f->pack || f->ST != 4)) ||
      (BQ == 192 && (f->D != 64 || f->minb != 1))) {
    ex_fail(c, "FLASH=2 needs BQ 64, 128 or 192 (a warpgroup per 64 rows; 192: head dim 64, MINB 1), BKV 64, 128, 176 or 192, KVST 2..4, MINB 1 "
               "(2 or 3 with one warpgroup), KVSPLIT 1 or 2 (2: BQ=64, QPACK=0, KVST=4: each part's next tile loads while it reads this one)");
    return 0;
  }
  /* (each warpgroup stages its slice at its own last stage + its slice's offset: past the K half it lands on V, which
   * another warpgroup's last P·V may still read — BQ=192 at BKV=128 so was wrong on the H200, twenty-fifth session) */
  if (f->osmem == 4 && fa_qbytes(f) > fa_kvbytes(f)) {
    ex_fail(c, "OSMEM=4 stages O over a K/V stage's K half: the warpgroups' %lld bytes of O exceed its %lld", fa_qbytes(f), fa_kvbytes(f));
    return 0;
  }
  if (f->minb == 3 && (f->BKV != 64 || f->D != 64)) { /* (S, O and two P sets of 128-key tiles need ~180; head dim 128's O 64 more) */
    ex_fail(c, "MINB=3 (%d registers a consumer thread) holds S, O and P for head dim 64 and 64-key tiles only (BKV=64)", fa_consumer_regs(f));
    return 0;
  }
  long long smem = fa_smem(f);
  if (smem * f->minb > 232448) {
    ex_fail(c, "FLASH=2: %lld B of shared memory a block x MINB=%d exceed 227 KB", smem, f->minb);
    return 0;
  }
  if (!fa_rows(c, f->q, &f->qb, f->qst, f->D, &f->qin) || !fa_rows(c, f->k, &f->kb, f->kst, f->D, &f->kin) ||
      !fa_rows(c, f->v, &f->vb, f->vst, f->D, &f->vin)) {
    ex_fail(c, "FLASH=2 needs Q, K and V that are strided views of kernel inputs whose rows a 2-d tensor map loads (head "
               "dim at stride 1, the sequence stride the input's row length)");
    return 0;
  }
  f->bat = *f->os;
  f->bat.rank = f->r - 2;
  if (f->pack) {
    /* QPACK=1: the NWG query heads of a CTA are consecutive in the innermost batch dim and share one KV head */
    int64_t hq, hk;
    if (f->r < 3 || !f->gqa || !em_dim_is_const(&f->qs->d[f->r - 3], &hq) || !em_dim_is_const(&f->ks->d[f->r - 3], &hk) || hk < 1 ||
        hq % hk || (hq / hk) % f->NWG || f->NWG < 2) {
      ex_fail(c, "QPACK=1 needs GQA with constant head counts, BQ=%d warpgroups' heads sharing a KV head", BQ);
      return 0;
    }
  }
  return 1;
}

/* The number of (batch, head) pairs as a C expression: the output's batch dims multiplied. */
static const char *fa_nbh_c(ectx *c, const fa_t *f) {
  const char *e = "1LL";
  for (int i = 0; i < f->bat.rank; i++) e = ex_A(c, "%s * (%s)", e, ex_dim_c(c, &f->bat.d[i]));
  return e;
}

/* seq_pos: the CTA's first key tile em_klo, that of its first query row's sequence start (starts do not decrease along
 * the rows; QPACK=0, so slice 0's first row q0 is the CTA's first). The ring's uses, the producer's tiles and the
 * consumers' count from it. Returns 0 (nothing emitted) without seq_pos. */
static int fa_klo(ectx *c, const fa_t *f) {
  if (f->pos < 0) return 0;
  ivec bi = ex_unravel(c, fa_bh(c, f, "0"), &f->bat);
  const em_node *an = &c->g->nodes.v[ex_V(c, f->a)->node];
  ex_sdpa_row_start(c, an, "em_q0s", f->r > 2 ? bi.e[0] : "0LL", "q0", "q0 < Lq");
  ex_line(c, "const int em_klo = (int)(em_q0s / %d);", f->BKV);
  return 1;
}

void ex_k_flash_wgmma(ectx *c, em_launch *L) {
  fa_t f;
  if (!fa_facts(c, &f)) return;
  f.L = L;
  int BQ = f.pack ? 64 : 64 * f.NQ;
  L->block[0] = 128 * (f.NWG + 1);
  L->smem = fa_smem(&f);
  c->bounds_minb = 1;
  /* (EMMY_KVMC=1: an even count, the clusters' pairs; a CTA past the last query tile loads its halves and stores no row) */
  snprintf(L->grid[0], sizeof L->grid[0], f.mc ? "2*cdiv(%s,%d)" : "cdiv(%s,%d)",
           em_dim_format(&c->g->syms, &f.os->d[f.r - 2], (char[128]){0}, 128), f.mc ? 2 * BQ : BQ);
  if (f.mc) c->cluster = 2;
  const char *nbh = f.bat.rank ? ex_numel_text(c, &f.bat) : "1";
  if (f.pack) snprintf(L->grid[1], sizeof L->grid[1], "cdiv(%s,%d)", nbh, f.NQ);
  else snprintf(L->grid[1], sizeof L->grid[1], "%s", nbh);
  if (f.persist) { /* every item in x (EMMY_ASPLIT: every key tile of every item), capped at the SMs by the launcher */
    char gx[sizeof L->grid[0]];
    if (f.split)
      snprintf(gx, sizeof gx, "%s*%s*cdiv(%s,%d)", L->grid[0], L->grid[1],
               em_dim_format(&c->g->syms, &f.ks->d[f.r - 2], (char[128]){0}, 128), f.BKV);
    else
      snprintf(gx, sizeof gx, "%s*%s", L->grid[0], L->grid[1]);
    snprintf(L->grid[0], sizeof L->grid[0], "%s", gx);
    snprintf(L->grid[1], sizeof L->grid[1], "1");
    L->persistent = f.mc ? 2 : 1; /* (EMMY_KVMC=1: whole clusters) */
    L->sm_blocks = f.minb;
  }
  L->ntmaps = 3;
  int in[3] = {f.qb, f.kb, f.vb}, rows[3] = {64, f.mc ? f.BKV / 2 : f.BKV, f.mc ? f.BKV / 2 : f.BKV};
  for (int i = 0; i < 3; i++) {
    L->tmaps[i].input = ex_input_pos(c, in[i]);
    L->tmaps[i].box[0] = 64;
    L->tmaps[i].box[1] = rows[i];
  }
  c->extra_prelude = ex_TMA_PRELUDE;
  ex_line(c, "extern __shared__ __align__(1024) unsigned char em_dsm[];");
  ex_line(c, "__shared__ __align__(8) unsigned long long em_qbar, %sem_fk[%d], em_fv[%d], em_empty[%d];", f.persist ? "em_qempty, " : "",
          f.ST, f.ST, f.ST);
  ex_line(c, "const unsigned em_sb = (em_smem(em_dsm) + 1023u) & ~1023u;");
  ex_line(c, "const long long Lq = %s, S = %s;", ex_dim_c(c, &f.os->d[f.r - 2]), ex_dim_c(c, &f.ks->d[f.r - 2]));
  ex_line(c, "const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5;");
  if (f.sp || f.split) /* STAMP's record, then EMMY_ASPLIT's slot and flag, per CTA of the grid */
    L->scratch_per_tile = (f.sp ? 4LL * FA_STAMP_FIELDS * FA_STAMP_ROLES : 0) + (f.split ? 4 * fa_split_slot(&f) + 16 : 0);
  if (f.sp) {
    ex_use_prelude(c, ex_STAMP_PRELUDE);
    ex_line(c, "unsigned *const em_st = reinterpret_cast<unsigned *>(em_scratch) + (blockIdx.y * gridDim.x + blockIdx.x) * %d; /* STAMP */",
            FA_STAMP_FIELDS * FA_STAMP_ROLES);
    ex_line(c, "const unsigned long long em_g0 = em_gtime(); const unsigned em_e0 = em_clock(); /* STAMP: the CTA's entry */");
  }
  if (f.persist) {
    /* (EMMY_KVMC=1: an even count of query tiles a head, so that a pair of items is one head's) */
    if (f.mc)
      ex_line(c, "const long long em_nq = 2 * ((Lq + %d) / %d), em_nbh = %s, em_items = em_nq * em_nbh;", 2 * BQ - 1, 2 * BQ,
              fa_nbh_c(c, &f));
    else
      ex_line(c, "const long long em_nq = (Lq + %d) / %d, em_nbh = %s, em_items = em_nq * em_nbh;", BQ - 1, BQ, fa_nbh_c(c, &f));
    if (f.split) { /* EMMY_ASPLIT: the stream-K schedule over items of nk key tiles, its part of the scratch */
      ex_line(c, "const int em_tiles = (int)em_items, nk = (int)((S + %d) / %d);", f.BKV - 1, f.BKV);
      ex_sk_schedule(c);
      if (f.sp) ex_line(c, "float *const em_skb = em_scratch + (long long)gridDim.x * %d;", FA_STAMP_FIELDS * FA_STAMP_ROLES);
      else ex_line(c, "float *const em_skb = em_scratch;");
    }
  } else if (f.causal) {
    /* causal: the longest query tiles (the last rows) of every head are launched first, the CTAs in launch order
     * (x fastest) taking query tiles longest first across all heads, so the short ones fill the tail */
    ex_line(c, "const unsigned em_lin = blockIdx.y * gridDim.x + blockIdx.x, em_bh = em_lin %% gridDim.y;");
    ex_line(c, "const long long q0 = (long long)(gridDim.x - 1 - em_lin / gridDim.y) * %d;", BQ);
  } else {
    ex_line(c, "const long long q0 = (long long)blockIdx.x * %d;", BQ);
  }
  if (!f.persist) {
    ex_line(c, "const long long send = %s;", f.causal ? ex_A(c, "(q0 + %d < S ? q0 + %d : S)", BQ, BQ) : "S");
    if (fa_klo(c, &f))
      ex_line(c, "const int nt = (int)((send + %d) / %d) - em_klo; /* (seq_pos: the CTA's tiles from em_klo) */", f.BKV - 1, f.BKV);
    else
      ex_line(c, "const int nt = (int)((send + %d) / %d);", f.BKV - 1, f.BKV);
  }
  ex_line(c, "auto em_ex2 = [](float x) -> float {"); /* exp2 on the MUFU (ex2.approx.ftz: -inf gives 0) */
  ex_line(c, "  float y;");
  ex_line(c, "  asm(\"ex2.approx.ftz.f32 %%0, %%1;\" : \"=f\"(y) : \"f\"(x));");
  ex_line(c, "  return y;");
  ex_line(c, "};");
  if (fa_exp_split()) fa_ex2p_fn(c);
  ex_line(c, "auto em_pk = [](float lo, float hi) -> unsigned {");
  ex_line(c, "  unsigned r;");
  ex_line(c, "  asm(\"cvt.rn.%s.f32 %%0, %%1, %%2;\" : \"=r\"(r) : \"f\"(hi), \"f\"(lo));", f.pk);
  ex_line(c, "  return r;");
  ex_line(c, "};");
  fa_offset_fn(c, &f, "qoff", 0);
  fa_offset_fn(c, &f, "koff", 1);
  fa_offset_fn(c, &f, "voff", 2);
  ex_line(c, "if (tid == 0) {");
  ex_line(c, "  em_mbar_init(&em_qbar, 1);");
  if (f.persist) ex_line(c, "  em_mbar_init(&em_qempty, %d);", 4 * f.NQ); /* each consumer warp, once it is done with Q */
  ex_line(c, "  for (int s = 0; s < %d; s++) {", f.ST);
  ex_line(c, "    em_mbar_init(&em_fk[s], 1);");
  ex_line(c, "    em_mbar_init(&em_fv[s], 1);");
  /* each warp's release of the key part that reads it (EMMY_KVMC=1: both CTAs' warps) */
  ex_line(c, "    em_mbar_init(&em_empty[s], %d);", 4 * f.NQ * (f.mc ? 2 : 1));
  ex_line(c, "  }");
  ex_line(c, "  em_mbar_fence_init();");
  ex_line(c, "}");
  if (f.pvsum) { /* EMMY_PV_SUM: the ones block (2048 bytes), seen by the tensor cores' reads after the barrier */
    ex_line(c, "if (tid < 128) {");
    const char *one2 = f.dt == EM_F16 ? "0x3C003C00u" : "0x3F803F80u"; /* (a pair of 1.0) */
    ex_line(c, "  reinterpret_cast<uint4 *>(em_dsm + (em_sb - em_smem(em_dsm)) + %lldu)[tid] = make_uint4(%s, %s, %s, %s);", fa_ones(&f),
            one2, one2, one2, one2);
    ex_line(c, "  asm volatile(\"fence.proxy.async.shared::cta;\" ::: \"memory\");");
    ex_line(c, "}");
  }
  /* (EMMY_KVMC=1: the peer's barriers initialised before its multicasts and releases can reach them) */
  ex_line(c, f.mc ? "em_cluster_sync();" : "__syncthreads();");
  fa_producer(c, &f);
  fa_consumers(c, &f);
}
