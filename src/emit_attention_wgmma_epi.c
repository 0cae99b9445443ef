/* emit_attention_wgmma_epi.c — flash attention on wgmma (FLASH=2): the epilogue, O from the consumers' registers to
 * the kernel's outputs — straight from the fragments (OSMEM=0, a 32-bit pair store where the output allows it) or
 * staged in shared memory as 128-byte-swizzled 64-column blocks (OSMEM 1-4) and stored a 16-byte chunk a thread or,
 * OTMA=1, by TMA from one thread — and KVSPLIT=2's merge of the two key parts before it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emit_attention_wgmma.h"

/* The lambda em_ix(l, d): the output's index of row l, head element d, where the kernel's one output is the
 * attention's result through views (no fused op), in the compute dtype; returns 1 and sets *pos (the output's
 * position), else emits nothing and returns 0. */
static int fa_index_fn(ectx *c, const fa_t *f, ivec di, int *pos) {
  if (f->dt != ex_V(c, f->a)->dtype || c->g->outputs.n != 1 || ex_V(c, c->g->outputs.v[0])->dtype != f->dt) return 0;
  size_t n0 = c->out->n;
  int mark = c->memo.n;
  const char *val = NULL;
  ex_line(c, "auto em_ix = [&](long long l, long long d) -> long long {");
  c->indent++;
  const char *ix = ex_output_index(c, f->a, di, &val, pos);
  int ok = ix && val && !strcmp(val, c->anchor_var) && !c->failed;
  if (ok) ex_line(c, "return %s;", ix);
  c->indent--;
  c->memo.n = mark;
  ex_reset_alignment(c);
  if (!ok) {
    c->out->n = n0;
    c->out->s[n0] = 0;
    return 0;
  }
  ex_line(c, "};");
  return 1;
}

/* The pair store: where the kernel's one output is the attention's result through views, in the compute dtype, a
 * thread's two adjacent head elements of a row go out as one 32-bit store when the output index is contiguous
 * along the head dim and even (checked where it runs; else the element loop). Returns 1 when it emitted the
 * branch's opening (the caller closes it with "} else {" and the element loop). The index steps 1 from head
 * element 0 to 1 and D-1 from 0 to D-1, which a view splitting the head dim would not give. */
static int fa_pair_store(ectx *c, const fa_t *f, ivec di) {
  int pos = 0;
  if (!fa_index_fn(c, f, di, &pos)) return 0;
  ex_line(c, "if (em_ix(lr0, 1) - em_ix(lr0, 0) == 1 && em_ix(lr0, %d) - em_ix(lr0, 0) == %d && ((em_ix(lr0, 0) | em_ix(lr1, 0)) & 1) == 0) {",
          (int)f->D - 1, (int)f->D - 1);
  ex_line(c, "  %s *const em_p0 = out%d + em_ix(lr0, (lane & 3) * 2), *const em_p1 = out%d + em_ix(lr1, (lane & 3) * 2);",
          ex_stype(f->dt), pos, pos);
  ex_line(c, "  #pragma unroll");
  ex_line(c, "  for (int j = 0; j < %d; j++) {", (int)(f->D / 8));
  ex_line(c, "    if (lr0 < Lq) *reinterpret_cast<unsigned *>(em_p0 + j * 8) = em_pk(o[j][0] * em_il[0], o[j][1] * em_il[0]);");
  ex_line(c, "    if (lr1 < Lq) *reinterpret_cast<unsigned *>(em_p1 + j * 8) = em_pk(o[j][2] * em_il[1], o[j][3] * em_il[1]);");
  ex_line(c, "  }");
  ex_line(c, "} else {");
  return 1;
}

/* OSMEM=2's store of the staged slice: a thread a 16-byte chunk (eight head elements of a row) from shared memory
 * to the output, one 16-byte store where the output's index steps 1 and 7 over the chunk from a multiple of 8 (a
 * contiguous head dim; checked where it runs), else eight element stores. Only where the output is the result
 * through views (fa_index_fn); returns 0 (nothing emitted) elsewhere, and the caller's element loop runs. */
/* OTMA=1: where this warpgroup's 64 rows are all
 * inside the sequence and lie in the output as rows of a [numel / inner, inner] matrix (inner: the output's last dim;
 * the head dim contiguous, the next row `inner` elements on, the D columns inside one row, 16-byte aligned — checked
 * where it runs), the staged O (OSMEM 2-4: 128-byte swizzled 64-column blocks, the TMA's own layout) goes out as D/64
 * bulk tensor stores from one thread, which waits until they have read the buffer; else the 16-byte chunk stores
 * (the caller's). The consumers then issue no global stores for a full tile: the chunk stores' index arithmetic and
 * 8-16 stores a thread were a large share of the epilogue's ~1,500 cycles an item (stamps, H200, twenty-ninth
 * session). Emits the branch's opening (the caller closes it); returns 1, or 0 where it emitted nothing. */
static int fa_tma_store(ectx *c, const fa_t *f, int pos) {
  const em_shape *os = ex_S(c, c->g->outputs.v[pos]);
  if (os->rank < 2 || f->L->ntmaps >= 4) return 0;
  int tmo = f->L->ntmaps++;
  f->L->tmaps[tmo].input = pos;
  f->L->tmaps[tmo].output = 1;
  f->L->tmaps[tmo].box[0] = 64;
  f->L->tmaps[tmo].box[1] = 64;
  ex_use_prelude(c, ex_TMA_STORE_PRELUDE);
  int D = (int)f->D;
  ex_line(c, "const long long em_i0 = em_ix(ql0, 0), em_in = %s;", ex_dim_c(c, &os->d[os->rank - 1]));
  ex_line(c, "if (ql0 + 64 <= Lq && em_ix(ql0, %d) - em_i0 == %d && em_ix(ql0 + 1, 0) - em_i0 == em_in && em_i0 %% em_in + %d <= em_in &&",
          D - 1, D - 1, D);
  ex_line(c, "    (em_i0 & 7) == 0) { /* OTMA: a full tile by TMA */");
  ex_line(c, "  if ((tid & 127) == 0) {");
  for (int b = 0; b < D / 64; b++)
    ex_line(c, "    em_tma_store_2d(&tm%d, em_smem(em_os) + %du, (int)(em_i0 %% em_in) + %d, (int)(em_i0 / em_in));", tmo, b * f->NQ * 8192,
            b * 64);
  ex_line(c, "    em_bulk_commit();");
  ex_line(c, "    em_bulk_wait_read0(); /* the staged O read: its buffer may be released */");
  ex_line(c, "  }");
  ex_line(c, "} else {");
  c->indent++;
  return 1;
}

static int fa_chunk_store(ectx *c, const fa_t *f, ivec di) {
  int pos = 0, cpr = (int)(f->D / 8);
  if (em_dtype_bytes(f->dt) != 2 || f->D % 8 || !fa_index_fn(c, f, di, &pos)) return 0;
  int tma = f->otma ? fa_tma_store(c, f, pos) : 0;
  ex_line(c, "#pragma unroll 4");
  ex_line(c, "for (int em_i = 0; em_i < %d; em_i++) {", 64 * cpr / 128);
  c->indent++;
  ex_line(c, "const int em_e = em_i * 128 + (tid & 127), r = em_e / %d, dc = (em_e %% %d) * 8;", cpr, cpr);
  ex_line(c, "const long long l = ql0 + r;");
  ex_line(c, "if (l >= Lq) continue;");
  ex_line(c, "const long long i0 = em_ix(l, dc), i1 = em_ix(l, dc + 1), i7 = em_ix(l, dc + 7);");
  ex_line(c, "if (i1 == i0 + 1 && i7 == i0 + 7 && (i0 & 7) == 0) *reinterpret_cast<uint4 *>(out%d + i0) = *reinterpret_cast<const uint4 *>(em_oa(r, dc));",
          pos);
  ex_line(c, "else for (int e = 0; e < 8; e++) out%d[em_ix(l, dc + e)] = *em_oa(r, dc + e);", pos);
  c->indent--;
  ex_line(c, "}");
  if (tma) {
    c->indent--;
    ex_line(c, "}");
  }
  return 1;
}

/* EMMY_O_STSM=1 (an experiment, compile time; docs/formats.md): the staged O (OSMEM 1-4) written by stmatrix x4,
 * four 8 x 8 blocks an instruction, instead of a 32-bit store a pair. The accumulator's fragment is stmatrix's own
 * layout (a thread's pair: row lane / 4, columns 2 (lane % 4)), so one instruction takes o[j] and o[j + 1], both row
 * halves; lanes 8m..8m+7 give the rows of block m (m: j + m / 2, rows + 8 (m % 2)), each a 16-byte chunk of the
 * swizzled staging, whose XOR keeps the eight rows in distinct banks. A thread issues D / 16 shared stores, not D / 4
 * (cuDNN's epilogue issues half emmy's LSU instructions at head dim 128: docs/performance.md, fifty-fifth session). */
static int fa_o_stsm(const fa_t *f) { return ex_env_choice("EMMY_O_STSM", 1) && f->D % 16 == 0; }

static void fa_o_stsm_stage(ectx *c, const fa_t *f) {
  const char *v[4];
  for (int q = 0; q < 4; q++) { /* block q: o[j + q / 2], row half q % 2 */
    const char *lo = ex_A(c, "o[j + %d][%d] * em_il[%d]", q / 2, (q % 2) * 2, q % 2);
    const char *hi = ex_A(c, "o[j + %d][%d] * em_il[%d]", q / 2, (q % 2) * 2 + 1, q % 2);
    v[q] = ex_store_pair(c, ex_store_conv(c, f->dt, lo), ex_store_conv(c, f->dt, hi));
  }
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int j = 0; j < %d; j += 2) { /* EMMY_O_STSM: four 8 x 8 blocks an instruction */", (int)(f->D / 8));
  ex_line(c, "  const int em_m = lane >> 3, r = (wid & 3) * 16 + (em_m & 1) * 8 + (lane & 7), d = (j + (em_m >> 1)) * 8;");
  ex_line(c, "  asm volatile(\"stmatrix.sync.aligned.m8n8.x4.shared.b16 [%%0], {%%1, %%2, %%3, %%4};\" :: \"r\"(em_smem(em_oa(r, d))),");
  ex_line(c, "               \"r\"(%s), \"r\"(%s),", v[0], v[1]);
  ex_line(c, "               \"r\"(%s), \"r\"(%s) : \"memory\");", v[2], v[3]);
  ex_line(c, "}");
}

/* The epilogue: O over the row sums (their reciprocals, once a row), each output element through the output's
 * index (fused views), two adjacent elements a 32-bit store where the output allows it (fa_pair_store); OSMEM=1:
 * staged in this warpgroup's Q slice (free once its last S is done), stored along the head dim; 2: the same, a
 * 16-byte chunk a thread (fa_chunk_store); 3 (APERSIST=1): as 2 from a buffer of its own past the ring, so that Q
 * is released to the next item's load before the epilogue; 4 (APERSIST=1): as 3 over the warpgroup's last K/V ring
 * stage (read by then; released after the epilogue), no more shared memory. */
void fa_epilogue(ectx *c, const fa_t *f) {
  int nd = (int)(f->D / 8), osmem = f->osmem, staged = osmem >= 1;
  ex_line(c, "float em_il[2];");
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int h = 0; h < 2; h++) {");
  if (f->pvsum) { /* EMMY_PV_SUM: the row's whole sum in o[D/8] (every column of the ones block) */
    ex_line(c, "  const float em_l = o[%d][h * 2];", nd);
    ex_line(c, "  em_il[h] = em_l > 0.0f ? 1.0f / em_l : 0.0f;");
  } else {
    ex_line(c, "  lrow[h] += __shfl_xor_sync(0xffffffffu, lrow[h], 1);");
    ex_line(c, "  lrow[h] += __shfl_xor_sync(0xffffffffu, lrow[h], 2);");
    ex_line(c, "  em_il[h] = lrow[h] > 0.0f ? 1.0f / lrow[h] : 0.0f;");
  }
  ex_line(c, "}");
  int mark = c->memo.n;
  ivec di = {f->r};
  for (int i = 0; i < f->r - 2; i++) di.e[i] = ex_A(c, "x%d", i);
  di.e[f->r - 2] = "l";
  di.e[f->r - 1] = "d";
  int pair = 0;
  if (staged) {
    const char *st = ex_stype(f->dt);
    /* element (row r, head element d) of this warpgroup's slice: 64-column block d/64 (NQ slices of 8 KB a
     * block), 128-byte rows, 16-byte chunks XOR the row */
    if (fa_os4_sync(f)) ex_line(c, "asm volatile(\"bar.sync %%0, 256;\" :: \"r\"(7 - wq) : \"memory\"); /* the other's last QKᵀ retired */");
    if (osmem == 4) ex_line(c, "unsigned char *const em_os = em_dsm + (em_ost - em_smem(em_dsm)) + wq * 8192;");
    else if (fa_obuf(f)) ex_line(c, "unsigned char *const em_os = em_dsm + (em_sb - em_smem(em_dsm)) + %lldu + wq * 8192;", fa_obuf(f));
    else ex_line(c, "unsigned char *const em_os = em_dsm + (em_sb - em_smem(em_dsm)) + wq * 8192;");
    ex_line(c, "auto em_oa = [&](int r, int d) -> %s * {", st);
    ex_line(c, "  return reinterpret_cast<%s *>(em_os + (d >> 6) * %d + r * 128 + ((((d & 63) >> 3) ^ (r & 7)) << 4) + (d & 7) * 2);", st,
            f->NQ * 8192);
    ex_line(c, "};");
    if (fa_o_stsm(f)) fa_o_stsm_stage(c, f);
    else {
      ex_line(c, "#pragma unroll");
      ex_line(c, "for (int j = 0; j < %d; j++) {", nd);
      ex_line(c, "  #pragma unroll");
      ex_line(c, "  for (int h = 0; h < 2; h++) {");
      ex_line(c, "    const int r = (wid & 3) * 16 + (lane >> 2) + h * 8, d = j * 8 + (lane & 3) * 2;");
      ex_line(c, "    const float v0 = o[j][h * 2] * em_il[h], v1 = o[j][h * 2 + 1] * em_il[h];");
      /* the pair (d even: 4-byte aligned in its 16-byte chunk) as one packing conversion and one 32-bit store (two
       * 2-byte stores were 0.5-2% slower at b8 s512, H200, twenty-ninth session) */
      ex_line(c, "    *reinterpret_cast<unsigned *>(em_oa(r, d)) = %s;",
              ex_store_pair(c, ex_store_conv(c, f->dt, "v0"), ex_store_conv(c, f->dt, "v1")));
      ex_line(c, "  }");
      ex_line(c, "}");
    }
    /* (immediate barrier ids: a register id makes ptxas reserve all sixteen) */
    /* (slice w's barrier 2 + w; PINGPONG's turns with three slices are 11-13) */
    if (f->otma) ex_line(c, "em_fence_async_smem(); /* OTMA: O's writes seen by the bulk stores */");
    sbuf bs = {0};
    for (int w = 0; w < f->NQ; w++)
      ex_sb_add(&bs, "%sasm volatile(\"bar.sync %d, 128;\" ::: \"memory\");",
                f->NQ == 1 ? "" : w == 0 ? "if (wq == 0) " : w == f->NQ - 1 ? " else " : ex_A(c, " else if (wq == %d) ", w), 2 + w);
    ex_line(c, "%s", bs.s);
    free(bs.s);
    c->anchor_var = "em_r";
    if (osmem >= 2 && fa_chunk_store(c, f, di)) {
      c->memo.n = mark;
      return;
    }
    /* 128 threads: D/… rows a pass, a thread a head element */
    int rows = (int)(128 / f->D);
    ex_line(c, "#pragma unroll 4");
    ex_line(c, "for (int em_i = 0; em_i < %d; em_i++) {", 64 / rows);
    c->indent++;
    ex_line(c, "const int r = em_i * %d + (tid & 127) / %d, dd = (tid & 127) %% %d;", rows, (int)f->D, (int)f->D);
    ex_line(c, "const long long l = ql0 + r, d = dd;");
    ex_line(c, "if (l >= Lq) continue;");
    ex_line(c, "const %s em_r = %s;", ex_ctype(f->dt), ex_load_conv(c, f->dt, "*em_oa(r, dd)"));
  } else {
    c->anchor_var = "em_r";
    pair = fa_pair_store(c, f, di);
    if (pair) c->indent++;
    ex_line(c, "#pragma unroll");
    ex_line(c, "for (int j = 0; j < %d; j++) {", nd);
    c->indent++;
    ex_line(c, "#pragma unroll");
    ex_line(c, "for (int qd = 0; qd < 4; qd++) {");
    c->indent++;
    ex_line(c, "const long long l = qd < 2 ? lr0 : lr1, d = j * 8 + (lane & 3) * 2 + (qd & 1);");
    ex_line(c, "if (l >= Lq) continue;");
    ex_line(c, "const %s em_r = %s;", ex_ctype(f->dt), ex_round_to(c, f->dt, "o[j][qd] * em_il[qd >> 1]"));
  }
  c->anchor_var = "em_r";
  ex_write_aligned(c, f->a, di, "an output of the attention kernel is not aligned with its result");
  c->memo.n = mark;
  c->indent--;
  ex_line(c, "}");
  if (!staged) {
    c->indent--;
    ex_line(c, "}");
  }
  if (pair) {
    c->indent--;
    ex_line(c, "}");
  }
}

/* Two softmax states' merge for row h (inside a loop over h): with the other's maximum m2 and partial sum l2 and the
 * common maximum mn in scope, this thread's factor c1 and the other's c2 (sl: the factor the exponent applies to a
 * score), and the merged partial sum in lrow[h]. KVSPLIT=2's merge and EMMY_ASPLIT's fix-up. */
static void fa_merge_row(ectx *c, double sl) {
  ex_line(c, "  const float mb = mn == -INFINITY ? 0.0f : mn * %s;", ex_flit(c, sl, 17));
  ex_line(c, "  const float c1 = em_ex2(mrow[h] * %s - mb), c2 = em_ex2(m2 * %s - mb);", ex_flit(c, sl, 17), ex_flit(c, sl, 17));
  ex_line(c, "  lrow[h] = lrow[h] * c1 + l2 * c2;");
}

/* KVSPLIT=2: the second key part's warpgroup hands its O, row maxima and partial sums to the first through
 * shared memory (a consumers-only named barrier), then leaves; the first rescales both to the common max. */
void fa_merge(ectx *c, const fa_t *f, double sl) {
  int nd = (int)(f->D / 8), n = nd * 4 + 4;
  ex_line(c, "float *const em_mg = reinterpret_cast<float *>(em_dsm + (em_sb - em_smem(em_dsm)) + %lldu) + (tid & 127);",
          fa_ringend(f));
  ex_line(c, "if (kp == 1) {");
  ex_line(c, "  #pragma unroll");
  ex_line(c, "  for (int j = 0; j < %d; j++)", nd);
  ex_line(c, "    for (int q = 0; q < 4; q++) em_mg[(j * 4 + q) * 128] = o[j][q];");
  ex_line(c, "  em_mg[%d] = mrow[0]; em_mg[%d] = mrow[1]; em_mg[%d] = lrow[0]; em_mg[%d] = lrow[1];", (n - 4) * 128, (n - 3) * 128,
          (n - 2) * 128, (n - 1) * 128);
  ex_line(c, "}");
  ex_line(c, "asm volatile(\"bar.sync 1, 256;\" ::: \"memory\");");
  ex_line(c, "if (kp == 1) return;");
  ex_line(c, "float em_c2[2];");
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int h = 0; h < 2; h++) {");
  ex_line(c, "  const float m2 = em_mg[(%d + h) * 128], l2 = em_mg[(%d + h) * 128], mn = fmaxf(mrow[h], m2);", n - 4, n - 2);
  fa_merge_row(c, sl);
  ex_line(c, "  em_c2[h] = c2;");
  ex_line(c, "  if (h == 0) corr0 = c1; else corr1 = c1;");
  ex_line(c, "}");
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int j = 0; j < %d; j++)", nd);
  ex_line(c, "  for (int q = 0; q < 4; q++) o[j][q] = o[j][q] * (q < 2 ? corr0 : corr1) + em_mg[(j * 4 + q) * 128] * em_c2[q >> 1];");
}

/* EMMY_ASPLIT=1: the stream-K fix-up (the schedule and its rules: emit_streamk.c). A piece that stops short of its
 * item's last key tile (em_ke < nk) hands over: each consumer thread writes its unnormalized O, row maxima and partial
 * row sums to the CTA's slot (fa_split_slot), the consumers meet, thread 0 raises the flag, and the epilogue is skipped
 * (OSMEM=4's barrier 7 - wq still taken, so that no arrival outlives the item). The piece that reaches the last tile
 * from past the first (em_kb > 0) owns the item: thread 0 waits for the flags of the CTAs below whose ranges reach into
 * it and lowers them, the consumers meet, and each thread merges those slots into its state in descending CTA order
 * (the same result every run) before the epilogue. */
void fa_split_fixup(ectx *c, const fa_t *f, double sl) {
  int nd = (int)(f->D / 8), thr = 128 * f->NQ;
  long long slot = fa_split_slot(f);
  ex_line(c, "unsigned *const em_flag = reinterpret_cast<unsigned *>(em_skb + (long long)em_G * %lldLL);", slot);
  ex_line(c, "if (em_u >= 0 && em_ke < nk) { /* EMMY_ASPLIT: a piece handed over */");
  c->indent++;
  if (fa_os4_sync(f)) ex_line(c, "asm volatile(\"bar.sync %%0, 256;\" :: \"r\"(7 - wq) : \"memory\");");
  ex_line(c, "float4 *const em_w = reinterpret_cast<float4 *>(em_skb + (long long)blockIdx.x * %lldLL) + wq * %d + (tid & 127);", slot,
          (nd + 1) * 128);
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int j = 0; j < %d; j++) __stcg(em_w + j * 128, make_float4(o[j][0], o[j][1], o[j][2], o[j][3]));", nd);
  ex_line(c, "__stcg(em_w + %d, make_float4(mrow[0], mrow[1], lrow[0], lrow[1]));", nd * 128);
  ex_sk_raise(c, thr);
  c->indent--;
  ex_line(c, "} else {");
  c->indent++;
  ex_line(c, "if (em_u >= 0 && em_kb > 0) { /* EMMY_ASPLIT: the owner merges the pieces below */");
  c->indent++;
  ex_sk_gather_wait(c, thr);
  ex_sk_pieces_open(c);
  ex_line(c, "const float4 *const em_rp = reinterpret_cast<const float4 *>(em_skb + (long long)em_c * %lldLL) + wq * %d + (tid & 127);",
          slot, (nd + 1) * 128);
  ex_line(c, "const float4 em_ml = __ldcg(em_rp + %d);", nd * 128);
  ex_line(c, "float em_k1[2], em_k2[2];");
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int h = 0; h < 2; h++) {");
  ex_line(c, "  const float m2 = h ? em_ml.y : em_ml.x, l2 = h ? em_ml.w : em_ml.z, mn = fmaxf(mrow[h], m2);");
  fa_merge_row(c, sl);
  ex_line(c, "  em_k1[h] = c1, em_k2[h] = c2, mrow[h] = mn;");
  ex_line(c, "}");
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int j = 0; j < %d; j++) {", nd);
  ex_line(c, "  const float4 em_x = __ldcg(em_rp + j * 128);");
  ex_line(c, "  o[j][0] = o[j][0] * em_k1[0] + em_x.x * em_k2[0], o[j][1] = o[j][1] * em_k1[0] + em_x.y * em_k2[0];");
  ex_line(c, "  o[j][2] = o[j][2] * em_k1[1] + em_x.z * em_k2[1], o[j][3] = o[j][3] * em_k1[1] + em_x.w * em_k2[1];");
  ex_line(c, "}");
  ex_sk_pieces_close(c);
  c->indent--;
  ex_line(c, "}");
}
