/* emit_attention.c — the attention templates of the emitter: scalar attention (a query row per thread,
 * online softmax, optional KV tiles in shared memory) and flash attention on mma.sync (FLASH=1). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emit_impl.h"

/* The key and value element indices ("s" the key row, "e" the head element) of an attention output index oi:
 * batch dims broadcast from the output, the kv head divided by the query/kv head ratio for GQA. */
static void kv_index(ectx *c, const ivec *oi, const em_shape *qs, const em_shape *ks, const em_shape *vs,
                     const em_shape *os, int gqa, ivec *kk, ivec *vv) {
  int r = qs->rank;
  ivec full = *oi;
  full.e[r - 2] = "s";
  full.e[r - 1] = "0LL";
  ivec kb = ex_bcast(c, &full, os, ks), vb = ex_bcast(c, &full, os, vs);
  if (gqa && r >= 3 && !em_dim_eq(&qs->d[r - 3], &ks->d[r - 3])) {
    const char *ratio = ex_A(c, "(%s / %s)", ex_dim_c(c, &qs->d[r - 3]), ex_dim_c(c, &ks->d[r - 3]));
    kb.e[r - 3] = ex_A(c, "(%s / %s)", oi->e[r - 3], ratio);
    vb.e[r - 3] = kb.e[r - 3];
  }
  *kk = kb;
  *vv = vb;
  kk->e[r - 2] = vv->e[r - 2] = "s";
  kk->e[r - 1] = vv->e[r - 1] = "e";
}

/* 1 when value v's rows of D elements can be copied 16 bytes at a time: a strided view of a kernel input
 * (*base, strides st) with the head dim at stride 1 and every other stride a multiple of 8 elements. */
static int rows_copyable(ectx *c, int v, int *base, em_dim *st, int64_t D) {
  const em_shape *s = ex_S(c, v);
  int64_t one;
  if (D % 8 || !ex_strided(c, v, base, st) || !em_dim_is_const(&st[s->rank - 1], &one) || one != 1) return 0;
  for (int i = 0; i < s->rank - 1; i++)
    if (!ex_is_one(&s->d[i]) && !ex_dim_multiple_of(&st[i], 8)) return 0;
  return 1;
}

/* Flash attention on the warp tier (FLASH=1): a block of BQ query rows of one (batch, head), one warp per
 * 16 rows. Q fragments stay in registers; BKV keys and values at a time are staged in shared memory; S = QKᵀ
 * and O += PV run on mma.sync m16n8k16 (P re-packed from the S accumulators into A fragments, V read with
 * ldmatrix.trans); the online softmax keeps each row's max and sum in f32 across the quad of threads that
 * holds it. Causal blocks stop at their last row. The parts below share the facts in an fl_t. */
typedef struct {
  int BQ, BKV, P, kvst, qsm;     /* tile, KVSPLIT, KVST, QSMEM */
  int a, q, k, v, r;             /* the anchor, its operands, the rank */
  const em_shape *qs, *ks, *vs, *os;
  const em_node *an;
  int64_t D;
  em_dtype dt;
  const char *mt, *cvt, *wrow;   /* mma type, the f32 -> 16-bit conversion, this warp's row group */
  int WQ, threads, ND, KD, NS;   /* row-group warps, threads, 8-column blocks of D, 16-deep steps of D, of BKV */
  double scale;
  int causal, gqa, mark;         /* mark: the memo's length after the batch index (reset after each element) */
  ivec oi;                       /* the output index: batch dims x0.., then the row and the element */
  int qb, kb, vb, q_rows, k_rows, v_rows;
  em_dim qst[MAXR], kst[MAXR], vst[MAXR];
} fl_t;

/* The facts of FLASH=1, or an ex_fail naming what it needs. */
static int fl_facts(ectx *c, fl_t *f) {
  f->BQ = EX_KNOB(c, BQ);
  f->BKV = EX_KNOB(c, BKV);
  f->a = c->t->anchor;
  f->an = &c->g->nodes.v[ex_V(c, f->a)->node];
  f->q = f->an->args[0].tensor;
  f->k = f->an->args[1].tensor;
  f->v = f->an->args[2].tensor;
  f->qs = ex_S(c, f->q);
  f->ks = ex_S(c, f->k);
  f->vs = ex_S(c, f->v);
  f->os = ex_S(c, f->a);
  f->r = f->qs->rank;
  int r = f->r;
  int64_t Dv;
  f->dt = ex_V(c, f->a)->dtype;
  if (!em_dim_is_const(&f->qs->d[r - 1], &f->D) || !em_dim_is_const(&f->vs->d[r - 1], &Dv) || f->D != Dv || f->D % 16 || f->D > 256) {
    ex_fail(c, "FLASH=1 needs equal constant head dims, a multiple of 16 up to 256");
    return 0;
  }
  if (f->dt != EM_BF16 && f->dt != EM_F16) {
    ex_fail(c, "FLASH=1 needs bf16/f16, got %s", em_dtype_name(f->dt));
    return 0;
  }
  if (f->an->args[8].present) {
    ex_fail(c, "FLASH=1 takes no seq_pos (sequences packed end to end): FLASH=2 or the scalar tier");
    return 0;
  }
  /* KVSPLIT=2: twice the warps, the two halves of each query row group taking alternate K/V tiles, their
   * softmax states merged through shared memory at the end (more warps per SM at short lengths) */
  f->P = EX_KNOB(c, KVSPLIT);
  int kvst0 = EX_KNOB(c, KVST);
  /* QSMEM=1: the Q tile keeps rows of its own in the buffer (before the K/V stages) and each k-step reloads its
   * fragments with ldmatrix, instead of holding them in registers (D/2 fewer registers per thread) */
  f->qsm = EX_KNOB(c, QSMEM) == 1;
  int BQ = f->BQ, BKV = f->BKV, P = f->P;
  int rows0 = f->qsm ? BQ + 2 * BKV * kvst0 * P : BQ > 2 * BKV * kvst0 * P ? BQ : 2 * BKV * kvst0 * P;
  if (BQ % 16 || BKV % 16 || BQ < 16 || BKV < 16 || kvst0 < 1 || kvst0 > 2 || P < 1 || P > 2 ||
      rows0 * (f->D + 8) * 2 > (P == 1 ? 49152 : 232448)) {
    ex_fail(c, "FLASH=1 needs BQ, BKV multiples of 16, KVST 1 or 2, KVSPLIT 1 or 2 and max(BQ, 2*BKV*KVST*KVSPLIT)*(D+8)*2 "
               "bytes of shared memory (the sum with QSMEM=1; 48 KB static, 227 KB with KVSPLIT=2)");
    return 0;
  }
  f->mt = f->dt == EM_F16 ? "f16" : "bf16";
  f->cvt = f->dt == EM_F16 ? "em_f2h" : "em_f2bf";
  f->WQ = BQ / 16;
  f->threads = 32 * f->WQ * P;
  f->ND = (int)(f->D / 8);
  f->KD = (int)(f->D / 16);
  f->NS = BKV / 8;
  f->scale = f->an->args[6].present ? f->an->args[6].f : 1.0 / sqrt((double)f->D);
  f->causal = f->an->args[5].b;
  f->gqa = f->an->args[7].b;
  f->kvst = EX_KNOB(c, KVST);
  f->wrow = P == 2 ? "wr" : "w";
  return 1;
}

/* The launch, the shared buffer (the Q tile first, its fragments then in registers, then KVST stages of K and V
 * tiles; KVSPLIT=2's buffer is dynamic and also holds the merge), the block's rows and the batch index. */
static void fl_setup(ectx *c, fl_t *f, em_launch *L) {
  int r = f->r, BQ = f->BQ, P = f->P;
  em_shape bat = *f->os;
  bat.rank = r - 2;
  L->block[0] = f->threads;
  snprintf(L->grid[0], sizeof L->grid[0], "cdiv(%s,%d)", em_dim_format(&c->g->syms, &f->os->d[r - 2], (char[128]){0}, 128), BQ);
  snprintf(L->grid[1], sizeof L->grid[1], "%s", bat.rank ? ex_numel_text(c, &bat) : "1");
  int kvst0 = EX_KNOB(c, KVST), BKV = f->BKV;
  int rows = f->qsm ? BQ + 2 * BKV * kvst0 * P : BQ > 2 * BKV * kvst0 * P ? BQ : 2 * BKV * kvst0 * P;
  long long DP = (long long)(f->D + 8);
  if (P == 1) {
    ex_line(c, "__shared__ __align__(16) unsigned short em_sm[%d][%lld];", rows, DP);
  } else {
    /* the buffer also holds the merge: per row-group warp and lane, its o row block, max and sum */
    int64_t merge = (int64_t)f->WQ * 32 * (f->ND * 4 + 4) * 4;
    L->smem = (int64_t)rows * DP * 2 > merge ? (int64_t)rows * DP * 2 : merge;
    ex_line(c, "extern __shared__ __align__(16) unsigned char em_smd[];");
    ex_line(c, "unsigned short (*const em_sm)[%lld] = reinterpret_cast<unsigned short (*)[%lld]>(em_smd);", DP, DP);
  }
  ex_line(c, "unsigned short (*const Qs)[%lld] = em_sm;", DP);
  /* the K/V stages: after the Q tile's rows (QSMEM=1) or over them (its fragments are in registers by then) */
  ex_line(c, "unsigned short (*const em_kvb)[%lld] = em_sm + %d;", DP, f->qsm ? BQ : 0);
  ex_line(c, "const long long Lq = %s, S = %s, bh = blockIdx.y;", ex_dim_c(c, &f->os->d[r - 2]), ex_dim_c(c, &f->ks->d[r - 2]));
  /* causal: the longest query tiles (the last rows) are launched first, so the short ones fill the tail */
  ex_line(c, "const long long q0 = (long long)(%sblockIdx.x) * %d;", f->causal ? "gridDim.x - 1 - " : "", BQ);
  ex_line(c, "const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;");
  if (P == 2) ex_line(c, "const int wr = w %% %d, wp = w / %d;", f->WQ, f->WQ); /* row group, K/V half */
  ivec bi = ex_unravel(c, "bh", &bat);
  f->oi = (ivec){r};
  for (int i = 0; i < r - 2; i++) {
    f->oi.e[i] = ex_A(c, "x%d", i);
    ex_line(c, "const long long x%d = %s;", i, bi.e[i]);
  }
  f->mark = c->memo.n;
}

/* The Q tile into shared memory: Q, K and V that are strided views of kernel inputs with contiguous rows (the
 * head dim at stride 1, every other stride a multiple of 8) are copied 16 bytes at a time with cp.async, rows
 * past the end zero-filled; others go element by element through their expressions. Then the Q fragments (in
 * registers unless QSMEM=1), O, and each row's running max and sum. Returns 0 when it failed c. */
static int fl_load_q(ectx *c, fl_t *f) {
  int r = f->r, BQ = f->BQ, mark = f->mark;
  f->qb = f->kb = f->vb = -1;
  f->q_rows = rows_copyable(c, f->q, &f->qb, f->qst, f->D);
  f->k_rows = rows_copyable(c, f->k, &f->kb, f->kst, f->D);
  f->v_rows = rows_copyable(c, f->v, &f->vb, f->vst, f->D);
  if ((f->kvst == 2 || f->P == 2) && !(f->k_rows && f->v_rows)) {
    ex_fail(c, "KVST=2 and KVSPLIT=2 need keys and values that are strided views of kernel inputs with contiguous rows");
    return 0;
  }
  if (f->q_rows) {
    ivec q0i = f->oi;
    q0i.e[r - 2] = "l";
    q0i.e[r - 1] = "0LL";
    ex_line(c, "for (int t = tid; t < %lld; t += %d) {", (long long)(BQ * f->D / 8), f->threads);
    c->indent++;
    ex_line(c, "const int rr = t / %lld, e = (t %% %lld) * 8;", (long long)(f->D / 8), (long long)(f->D / 8));
    ex_line(c, "const long long l = q0 + rr;");
    ex_line(c, "const bool ok = l < Lq;");
    ex_line(c, "em_cp_async16(&Qs[rr][e], ok ? in%d + %s + e : in%d, ok ? 16 : 0);", ex_input_pos(c, f->qb),
            ex_strided_offset(c, &q0i, f->qs, f->qst), ex_input_pos(c, f->qb));
    c->memo.n = mark;
    c->indent--;
    ex_line(c, "}");
    ex_line(c, "em_cp_commit();");
    ex_line(c, "em_cp_wait<0>();");
  } else {
    ex_line(c, "for (int t = tid; t < %lld; t += %d) {", (long long)(BQ * f->D), f->threads);
    c->indent++;
    ex_line(c, "const int rr = t / %lld, e = t %% %lld;", (long long)f->D, (long long)f->D);
    ex_line(c, "const long long l = q0 + rr;");
    ivec qi = f->oi;
    qi.e[r - 2] = "l";
    qi.e[r - 1] = "e";
    ex_line(c, "float qv = 0.0f;");
    ex_line(c, "if (l < Lq) {");
    c->indent++;
    ex_line(c, "qv = (float)%s;", ex_val(c, f->q, &qi));
    c->memo.n = mark;
    c->indent--;
    ex_line(c, "}");
    ex_line(c, "Qs[rr][e] = %s(qv);", f->cvt);
    c->indent--;
    ex_line(c, "}");
  }
  ex_line(c, "__syncthreads();");
  if (!f->qsm) {
    ex_line(c, "unsigned qf[%d][4];", f->KD);
    ex_line(c, "#pragma unroll");
    ex_line(c, "for (int kd = 0; kd < %d; kd++) em_ldsm_x4(qf[kd], &Qs[%s * 16 + (lane & 15)][kd * 16 + (lane >> 4) * 8]);", f->KD,
            f->wrow);
    ex_line(c, "__syncthreads();"); /* the K/V stages reuse the Q tile's rows */
  }
  ex_line(c, "float o[%d][4];", f->ND);
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int j = 0; j < %d; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;", f->ND);
  ex_line(c, "float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.0f, 0.0f};");
  ex_line(c, "const long long lr0 = q0 + %s * 16 + (lane >> 2), lr1 = lr0 + 8;", f->wrow);
  ex_line(c, "const long long send = %s;", f->causal ? ex_A(c, "(q0 + %d < S ? q0 + %d : S)", BQ, BQ) : "S");
  ex_line(c, "const int nt = (int)((send + %d) / %d);", f->BKV - 1, f->BKV);
  return 1;
}

/* The K/V loop's head with copies: em_kv(st, s0), the cp.async copies of one K and one V tile into stage st;
 * KVSPLIT=2 rounds of two tiles (warp half wp computes tile 2it+wp); KVST=2 double-buffers. Leaves the loop
 * (and for KVSPLIT=2 the `if (em_t < nt)`) open, with Ks, Vs and s0 set. */
static void fl_kv_copy_head(ectx *c, const fl_t *f, const ivec *kk, const ivec *vv) {
  int r = f->r, BKV = f->BKV, mark = f->mark, kvst = f->kvst;
  long long DP = (long long)(f->D + 8);
  ivec k0i = *kk, v0i = *vv;
  k0i.e[r - 1] = "0LL";
  v0i.e[r - 1] = "0LL";
  ex_line(c, "auto em_kv = [&](int st, long long s0) {");
  c->indent++;
  ex_line(c, "unsigned short (*const Kd)[%lld] = em_kvb + st * %d, (*const Vd)[%lld] = em_kvb + st * %d + %d;", DP, 2 * BKV, DP,
          2 * BKV, BKV);
  ex_line(c, "for (int t = tid; t < %lld; t += %d) {", (long long)(BKV * f->D / 8), f->threads);
  c->indent++;
  ex_line(c, "const int ss = t / %lld, e = (t %% %lld) * 8;", (long long)(f->D / 8), (long long)(f->D / 8));
  ex_line(c, "const long long s = s0 + ss;");
  ex_line(c, "const bool ok = s < S;");
  ex_line(c, "em_cp_async16(&Kd[ss][e], ok ? in%d + %s + e : in%d, ok ? 16 : 0);", ex_input_pos(c, f->kb),
          ex_strided_offset(c, &k0i, f->ks, f->kst), ex_input_pos(c, f->kb));
  ex_line(c, "em_cp_async16(&Vd[ss][e], ok ? in%d + %s + e : in%d, ok ? 16 : 0);", ex_input_pos(c, f->vb),
          ex_strided_offset(c, &v0i, f->vs, f->vst), ex_input_pos(c, f->vb));
  c->memo.n = mark;
  c->indent--;
  ex_line(c, "}");
  c->indent--;
  ex_line(c, "};");
  if (f->P == 2) {
    /* round it: tiles 2it (slot 0) and 2it+1 (slot 1) of stage it & 1; warp half wp computes tile 2it+wp */
    ex_line(c, "const int nr = (nt + 1) / 2;");
    ex_line(c, "auto em_round = [&](int st, int it) {");
    ex_line(c, "  if (2 * it < nt) em_kv(st * 2, (long long)(2 * it) * %d);", BKV);
    ex_line(c, "  if (2 * it + 1 < nt) em_kv(st * 2 + 1, (long long)(2 * it + 1) * %d);", BKV);
    ex_line(c, "};");
    if (kvst == 2) {
      ex_line(c, "em_round(0, 0);");
      ex_line(c, "em_cp_commit();");
    }
    ex_line(c, "for (int it = 0; it < nr; it++) {");
    c->indent++;
    if (kvst == 2) {
      ex_line(c, "if (it + 1 < nr) em_round((it + 1) & 1, it + 1);");
      ex_line(c, "em_cp_commit();");
      ex_line(c, "em_cp_wait<1>();");
    } else {
      ex_line(c, "em_round(0, it);");
      ex_line(c, "em_cp_commit();");
      ex_line(c, "em_cp_wait<0>();");
    }
    ex_line(c, "const int em_t = 2 * it + wp;");
    ex_line(c, "const long long s0 = (long long)em_t * %d;", BKV);
    ex_line(c, "unsigned short (*const Ks)[%lld] = em_kvb + (%s * 2 + wp) * %d, (*const Vs)[%lld] = Ks + %d;", DP,
            kvst == 2 ? "(it & 1)" : "0", 2 * BKV, DP, BKV);
    ex_line(c, "__syncthreads();");
    ex_line(c, "if (em_t < nt) {");
    c->indent++;
    return;
  }
  if (kvst == 2) {
    ex_line(c, "if (nt > 0) em_kv(0, 0LL);");
    ex_line(c, "em_cp_commit();");
  }
  ex_line(c, "for (int it = 0; it < nt; it++) {");
  c->indent++;
  ex_line(c, "const long long s0 = (long long)it * %d;", BKV);
  if (kvst == 2) {
    ex_line(c, "if (it + 1 < nt) em_kv((it + 1) & 1, s0 + %d);", BKV);
    ex_line(c, "em_cp_commit();");
    ex_line(c, "em_cp_wait<1>();");
    ex_line(c, "unsigned short (*const Ks)[%lld] = em_kvb + (it & 1) * %d, (*const Vs)[%lld] = Ks + %d;", DP, 2 * BKV, DP, BKV);
  } else {
    ex_line(c, "em_kv(0, s0);");
    ex_line(c, "em_cp_commit();");
    ex_line(c, "em_cp_wait<0>();");
    ex_line(c, "unsigned short (*const Ks)[%lld] = em_kvb, (*const Vs)[%lld] = Ks + %d;", DP, DP, BKV);
  }
  ex_line(c, "__syncthreads();");
}

/* The K/V loop's head without copies: each tile's elements through their expressions into shared memory. */
static void fl_kv_elem_head(ectx *c, const fl_t *f, const ivec *kk, const ivec *vv) {
  int BKV = f->BKV, mark = f->mark;
  long long DP = (long long)(f->D + 8);
  ex_line(c, "for (int it = 0; it < nt; it++) {");
  c->indent++;
  ex_line(c, "const long long s0 = (long long)it * %d;", BKV);
  ex_line(c, "unsigned short (*const Ks)[%lld] = em_kvb, (*const Vs)[%lld] = Ks + %d;", DP, DP, BKV);
  ex_line(c, "for (int t = tid; t < %lld; t += %d) {", (long long)(BKV * f->D), f->threads);
  c->indent++;
  ex_line(c, "const int ss = t / %lld, e = t %% %lld;", (long long)f->D, (long long)f->D);
  ex_line(c, "const long long s = s0 + ss;");
  ex_line(c, "float kv_k = 0.0f, kv_v = 0.0f;");
  ex_line(c, "if (s < S) {");
  c->indent++;
  ex_line(c, "kv_k = (float)%s;", ex_val(c, f->k, kk));
  ex_line(c, "kv_v = (float)%s;", ex_val(c, f->v, vv));
  c->memo.n = mark;
  c->indent--;
  ex_line(c, "}");
  ex_line(c, "Ks[ss][e] = %s(kv_k);", f->cvt);
  ex_line(c, "Vs[ss][e] = %s(kv_v);", f->cvt);
  c->indent--;
  ex_line(c, "}");
  ex_line(c, "__syncthreads();");
}

/* S = Q Kᵀ for this warp's 16 rows x BKV keys (Q from registers or, QSMEM=1, reloaded a step at a time). */
static void fl_qk(ectx *c, const fl_t *f) {
  int NS = f->NS;
  ex_line(c, "float sc[%d][4];", NS);
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int j = 0; j < %d; j++) sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.0f;", NS);
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int kd = 0; kd < %d; kd++) {", f->KD);
  if (f->qsm) {
    ex_line(c, "  unsigned qk[4];");
    ex_line(c, "  em_ldsm_x4(qk, &Qs[%s * 16 + (lane & 15)][kd * 16 + (lane >> 4) * 8]);", f->wrow);
  }
  const char *qa = f->qsm ? "qk" : "qf[kd]";
  ex_line(c, "  #pragma unroll");
  ex_line(c, "  for (int j = 0; j < %d; j += 2) {", NS);
  ex_line(c, "    unsigned t4[4], b0[2], b1[2];");
  ex_line(c, "    em_ldsm_x4(t4, &Ks[j * 8 + (lane >> 4) * 8 + (lane & 7)][kd * 16 + ((lane >> 3) & 1) * 8]);");
  ex_line(c, "    b0[0] = t4[0]; b0[1] = t4[1]; b1[0] = t4[2]; b1[1] = t4[3];");
  ex_line(c, "    em_mma_%s(sc[j], %s, b0);", f->mt, qa);
  ex_line(c, "    em_mma_%s(sc[j + 1], %s, b1);", f->mt, qa);
  ex_line(c, "  }");
  ex_line(c, "}");
}

/* Scale, mask (keys past the end, causal keys after the row, an attention mask's values), the online softmax
 * in base 2 (row max and sum over the quad), P packed as A fragments, O corrected. */
static void fl_softmax(ectx *c, const fl_t *f) {
  int r = f->r, NS = f->NS, mark = f->mark;
  const em_node *an = f->an;
  ex_line(c, "float mx[2] = {mrow[0], mrow[1]};");
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int j = 0; j < %d; j++)", NS);
  ex_line(c, "  #pragma unroll");
  ex_line(c, "  for (int qd = 0; qd < 4; qd++) {");
  c->indent += 2;
  ex_line(c, "const long long s = s0 + j * 8 + (lane & 3) * 2 + (qd & 1), l = qd < 2 ? lr0 : lr1;");
  ex_line(c, "float x = sc[j][qd] * %s;", ex_flit(c, an->args[3].present ? f->scale : f->scale * M_LOG2E, 17));
  ex_line(c, "if (s >= S%s) x = -INFINITY;", f->causal ? " || s > l" : "");
  if (an->args[3].present) {
    int m = an->args[3].tensor;
    ivec full2 = f->oi;
    full2.e[r - 2] = "l";
    full2.e[r - 1] = "s";
    ivec mi = ex_bcast(c, &full2, f->os, ex_S(c, m));
    ex_line(c, "if (s < S && l < Lq) {");
    c->indent++;
    const char *mv = ex_val(c, m, &mi);
    if (ex_V(c, m)->dtype == EM_BOOL) ex_line(c, "if (!(%s)) x = -INFINITY;", mv);
    else ex_line(c, "x += (float)%s;", mv);
    c->memo.n = mark;
    c->indent--;
    ex_line(c, "}");
  }
  if (an->args[3].present) ex_line(c, "x *= %s;", ex_flit(c, M_LOG2E, 17)); /* the softmax runs in base 2 */
  ex_line(c, "sc[j][qd] = x;");
  ex_line(c, "mx[qd >> 1] = fmaxf(mx[qd >> 1], x);");
  c->indent -= 2;
  ex_line(c, "  }");
  ex_line(c, "float corr[2], rs[2] = {0.0f, 0.0f};");
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int h = 0; h < 2; h++) {");
  ex_line(c, "  mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));");
  ex_line(c, "  mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));");
  ex_line(c, "  corr[h] = mx[h] == -INFINITY ? 1.0f : exp2f(mrow[h] - mx[h]);");
  ex_line(c, "}");
  ex_line(c, "unsigned pf[%d][2];", NS * 2);
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int j = 0; j < %d; j++) {", NS);
  ex_line(c, "  float p0 = mx[0] == -INFINITY ? 0.0f : exp2f(sc[j][0] - mx[0]), p1 = mx[0] == -INFINITY ? 0.0f : exp2f(sc[j][1] - mx[0]);");
  ex_line(c, "  float p2 = mx[1] == -INFINITY ? 0.0f : exp2f(sc[j][2] - mx[1]), p3 = mx[1] == -INFINITY ? 0.0f : exp2f(sc[j][3] - mx[1]);");
  ex_line(c, "  rs[0] += p0 + p1;");
  ex_line(c, "  rs[1] += p2 + p3;");
  ex_line(c, "  pf[j][0] = (unsigned)%s(p0) | ((unsigned)%s(p1) << 16);", f->cvt, f->cvt);
  ex_line(c, "  pf[j][1] = (unsigned)%s(p2) | ((unsigned)%s(p3) << 16);", f->cvt, f->cvt);
  ex_line(c, "}");
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int h = 0; h < 2; h++) {");
  ex_line(c, "  rs[h] += __shfl_xor_sync(0xffffffffu, rs[h], 1);");
  ex_line(c, "  rs[h] += __shfl_xor_sync(0xffffffffu, rs[h], 2);");
  ex_line(c, "  lrow[h] = lrow[h] * corr[h] + rs[h];");
  ex_line(c, "  mrow[h] = mx[h];");
  ex_line(c, "}");
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int j = 0; j < %d; j++) {", f->ND);
  ex_line(c, "  o[j][0] *= corr[0]; o[j][1] *= corr[0]; o[j][2] *= corr[1]; o[j][3] *= corr[1];");
  ex_line(c, "}");
}

/* O += P V: P's S fragments re-packed as A fragments (16 keys per step), V through ldmatrix.trans. */
static void fl_pv(ectx *c, const fl_t *f) {
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int ks = 0; ks < %d; ks++) {", f->BKV / 16);
  ex_line(c, "  const unsigned pa[4] = {pf[2 * ks][0], pf[2 * ks][1], pf[2 * ks + 1][0], pf[2 * ks + 1][1]};");
  ex_line(c, "  #pragma unroll");
  ex_line(c, "  for (int j = 0; j < %d; j += 2) {", f->ND);
  ex_line(c, "    unsigned t4[4], b0[2], b1[2];");
  ex_line(c, "    em_ldsm_x4_t(t4, &Vs[ks * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)][j * 8 + (lane >> 4) * 8]);");
  ex_line(c, "    b0[0] = t4[0]; b0[1] = t4[1]; b1[0] = t4[2]; b1[1] = t4[3];");
  ex_line(c, "    em_mma_%s(o[j], pa, b0);", f->mt);
  ex_line(c, "    em_mma_%s(o[j + 1], pa, b1);", f->mt);
  ex_line(c, "  }");
  ex_line(c, "}");
}

/* KVSPLIT=2's merge: the second half's (o, max, sum) per lane through shared memory into the first half, which
 * writes. */
static void fl_merge(ectx *c, const fl_t *f) {
  int ND = f->ND, stride = ND * 4 + 4;
  ex_line(c, "float *const em_mg = reinterpret_cast<float *>(em_smd) + (wr * 32 + lane) * %d;", stride);
  ex_line(c, "if (wp == 1) {");
  ex_line(c, "  #pragma unroll");
  ex_line(c, "  for (int j = 0; j < %d; j++) em_mg[j * 4] = o[j][0], em_mg[j * 4 + 1] = o[j][1], em_mg[j * 4 + 2] = o[j][2], em_mg[j * 4 + 3] = o[j][3];", ND);
  ex_line(c, "  em_mg[%d] = mrow[0]; em_mg[%d] = mrow[1]; em_mg[%d] = lrow[0]; em_mg[%d] = lrow[1];", ND * 4, ND * 4 + 1, ND * 4 + 2,
          ND * 4 + 3);
  ex_line(c, "}");
  ex_line(c, "__syncthreads();");
  ex_line(c, "if (wp == 1) return;");
  ex_line(c, "float em_c1[2], em_c2[2];");
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int h = 0; h < 2; h++) {");
  ex_line(c, "  const float m2 = em_mg[%d + h], l2 = em_mg[%d + h], mn = fmaxf(mrow[h], m2);", ND * 4, ND * 4 + 2);
  ex_line(c, "  em_c1[h] = mrow[h] == -INFINITY ? 0.0f : exp2f(mrow[h] - mn);");
  ex_line(c, "  em_c2[h] = m2 == -INFINITY ? 0.0f : exp2f(m2 - mn);");
  ex_line(c, "  lrow[h] = lrow[h] * em_c1[h] + l2 * em_c2[h];");
  ex_line(c, "}");
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int j = 0; j < %d; j++)", ND);
  ex_line(c, "  for (int qd = 0; qd < 4; qd++) o[j][qd] = o[j][qd] * em_c1[qd >> 1] + em_mg[j * 4 + qd] * em_c2[qd >> 1];");
}

/* The epilogue: each accumulator element (row l, column d) / its row's sum through the fused ops. */
static void fl_epilogue(ectx *c, const fl_t *f) {
  int r = f->r;
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int j = 0; j < %d; j++) {", f->ND);
  c->indent++;
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int qd = 0; qd < 4; qd++) {");
  c->indent++;
  ex_line(c, "const long long l = qd < 2 ? lr0 : lr1, d = j * 8 + (lane & 3) * 2 + (qd & 1);");
  ex_line(c, "if (l >= Lq) continue;");
  ex_line(c, "const float lsum = lrow[qd >> 1];");
  ex_line(c, "const %s em_r = %s;", ex_ctype(f->dt), ex_round_to(c, f->dt, "(lsum > 0.0f ? o[j][qd] / lsum : 0.0f)"));
  c->anchor_var = "em_r";
  ivec di = f->oi;
  di.e[r - 2] = "l";
  di.e[r - 1] = "d";
  ex_write_aligned(c, f->a, di, "an output of the attention kernel is not aligned with its result");
  c->memo.n = f->mark;
  c->indent--;
  ex_line(c, "}");
  c->indent--;
  ex_line(c, "}");
}

static void k_flash(ectx *c, em_launch *L) {
  fl_t f;
  memset(&f, 0, sizeof f);
  if (!fl_facts(c, &f)) return;
  fl_setup(c, &f, L);
  if (!fl_load_q(c, &f)) return;
  ivec kk, vv;
  kv_index(c, &f.oi, f.qs, f.ks, f.vs, f.os, f.gqa, &kk, &vv);
  if (f.k_rows && f.v_rows) fl_kv_copy_head(c, &f, &kk, &vv);
  else fl_kv_elem_head(c, &f, &kk, &vv);
  fl_qk(c, &f);
  fl_softmax(c, &f);
  fl_pv(c, &f);
  if (f.P == 2) {
    c->indent--;
    ex_line(c, "}");
  }
  ex_line(c, "__syncthreads();"); /* this stage is refilled by a later iteration */
  c->indent--;
  ex_line(c, "}");
  if (f.P == 2) fl_merge(c, &f);
  fl_epilogue(c, &f);
}

int ex_sdpa_row_start(ectx *c, const em_node *an, const char *var, const char *x0, const char *row, const char *live) {
  if (!an->args[8].present) return 0;
  int p = an->args[8].tensor, mark = c->memo.n;
  int64_t one;
  ivec pi = {2};
  pi.e[0] = em_dim_is_const(&ex_S(c, p)->d[0], &one) && one == 1 ? "0LL" : x0;
  pi.e[1] = ex_A(c, "(%s ? %s : 0LL)", live, row); /* (a row past the end reads row 0: no load out of bounds) */
  ex_line(c, "const long long %s = %s ? %s - (long long)%s : 0LL;", var, live, row, ex_val(c, p, &pi));
  c->memo.n = mark;
  return 1;
}

/* Scalar attention: a block of QROWS query rows of one (batch, head); each thread keeps its query row and an
 * f32 accumulator in registers and runs an online softmax over the keys. KV_TILE > 0 stages KV_TILE keys and
 * values in shared memory, loaded by the whole block; causal blocks stop at their last row's diagonal. */
void ex_k_attention(ectx *c, em_launch *L) {
  if (EX_KNOB(c, FLASH) == 2) {
    ex_k_flash_wgmma(c, L);
    return;
  }
  if (EX_KNOB(c, FLASH)) {
    k_flash(c, L);
    return;
  }
  int threads = EX_KNOB(c, QROWS), kvt = EX_KNOB(c, KV_TILE);
  int a = c->t->anchor;
  const em_node *an = &c->g->nodes.v[ex_V(c, a)->node];
  int q = an->args[0].tensor, k = an->args[1].tensor, v = an->args[2].tensor;
  const em_shape *qs = ex_S(c, q), *ks = ex_S(c, k), *vs = ex_S(c, v), *os = ex_S(c, a);
  int r = qs->rank;
  int64_t E, Ev;
  if (!em_dim_is_const(&qs->d[r - 1], &E) || !em_dim_is_const(&vs->d[r - 1], &Ev) || E > 256 || Ev > 256) {
    ex_fail(c, "attention needs constant head dims up to 256");
    return;
  }
  if (kvt < 0 || kvt * (E + Ev) * 4 > 49152) {
    ex_fail(c, "KV_TILE=%d needs %lld B of shared memory", kvt, (long long)(kvt * (E + Ev) * 4));
    return;
  }
  double scale = an->args[6].present ? an->args[6].f : 1.0 / sqrt((double)E);
  int causal = an->args[5].b, gqa = an->args[7].b;
  em_shape bat = *os;
  bat.rank = r - 2;
  L->block[0] = threads;
  snprintf(L->grid[0], sizeof L->grid[0], "cdiv(%s,%d)", em_dim_format(&c->g->syms, &os->d[r - 2], (char[128]){0}, 128), threads);
  snprintf(L->grid[1], sizeof L->grid[1], "%s", bat.rank ? ex_numel_text(c, &bat) : "1");
  ex_line(c, "const long long Lq = %s, S = %s;", ex_dim_c(c, &os->d[r - 2]), ex_dim_c(c, &ks->d[r - 2]));
  ex_line(c, "const long long l = (long long)blockIdx.x * %d + threadIdx.x, bh = blockIdx.y;", threads);
  ex_line(c, "const bool live = l < Lq;");
  ivec bi = ex_unravel(c, "bh", &bat);
  ivec oi = {r};
  for (int i = 0; i < r - 2; i++) {
    oi.e[i] = ex_A(c, "x%d", i);
    ex_line(c, "const long long x%d = %s;", i, bi.e[i]);
  }
  oi.e[r - 2] = "l";
  ex_line(c, "float qr[%lld], acc[%lld];", (long long)E, (long long)Ev);
  int mark = c->memo.n;
  ex_line(c, "for (int e = 0; e < %lld; e++) {", (long long)E);
  c->indent++;
  ivec qi = oi;
  qi.e[r - 1] = "e";
  /* loads only inside the guard: a row past the end must not read (seq_len 7 with QROWS=256 faulted) */
  ex_line(c, "qr[e] = 0.0f;");
  ex_line(c, "if (live) {");
  c->indent++;
  ex_line(c, "qr[e] = (float)%s;", ex_val(c, q, &qi));
  c->memo.n = mark;
  c->indent--;
  ex_line(c, "}");
  c->indent--;
  ex_line(c, "}");
  ex_line(c, "for (int e = 0; e < %lld; e++) acc[e] = 0.0f;", (long long)Ev);
  ex_line(c, "float em_m = -INFINITY, em_l = 0.0f;");
  ex_line(c, "const long long send = %s;", causal ? "(l + 1 < S ? l + 1 : S)" : "S");
  /* seq_pos: the row's keys start at its sequence's first row */
  int varlen = ex_sdpa_row_start(c, an, "em_ls", r > 2 ? "x0" : "0LL", "l", "live");
  ivec kk, vv;
  kv_index(c, &oi, qs, ks, vs, os, gqa, &kk, &vv);
  const char *kval = "0", *vval = "0";
  if (kvt > 0) {
    ex_line(c, "__shared__ float Ks[%d][%lld], Vs[%d][%lld];", kvt, (long long)E, kvt, (long long)Ev);
    ex_line(c, "const long long bend = %s;",
         causal ? ex_A(c, "((long long)blockIdx.x * %d + %d < S ? (long long)blockIdx.x * %d + %d : S)", threads, threads, threads, threads)
                : "S");
    ex_line(c, "for (long long s0 = 0; s0 < bend; s0 += %d) {", kvt);
    c->indent++;
    ex_line(c, "for (int t = threadIdx.x; t < %lld; t += %d) {", (long long)(kvt * (E > Ev ? E : Ev)), threads);
    c->indent++;
    ex_line(c, "const int ss = t / %lld, e = t %% %lld;", (long long)(E > Ev ? E : Ev), (long long)(E > Ev ? E : Ev));
    ex_line(c, "const long long s = s0 + ss;");
    /* each load inside its guard (keys past the end must not be read) */
    const struct { const char *arr; int val; const ivec *ix; int64_t len; } kv[2] = {{"Ks", k, &kk, E}, {"Vs", v, &vv, Ev}};
    for (int j = 0; j < 2; j++) {
      ex_line(c, "if (s < S && e < %lld) {", (long long)kv[j].len);
      c->indent++;
      ex_line(c, "%s[ss][e] = (float)%s;", kv[j].arr, ex_val(c, kv[j].val, kv[j].ix));
      c->memo.n = mark;
      c->indent--;
      ex_line(c, "}");
    }
    c->indent--;
    ex_line(c, "}");
    ex_line(c, "__syncthreads();");
    ex_line(c, "for (int ss = 0; live && ss < %d; ss++) {", kvt);
    c->indent++;
    ex_line(c, "const long long s = s0 + ss;");
    ex_line(c, "if (s >= send) break;");
    if (varlen) ex_line(c, "if (s < em_ls) continue;");
    kval = "Ks[ss][e]";
    vval = "Vs[ss][e]";
  } else {
    ex_line(c, "for (long long s = %s; live && s < send; s++) {", varlen ? "em_ls" : "0");
    c->indent++;
  }
  ex_line(c, "float sc = 0.0f;");
  ex_line(c, "for (int e = 0; e < %lld; e++) {", (long long)E);
  c->indent++;
  ex_line(c, "sc += qr[e] * (float)%s;", kvt > 0 ? kval : ex_val(c, k, &kk));
  c->memo.n = mark;
  c->indent--;
  ex_line(c, "}");
  ex_line(c, "sc *= %s;", ex_flit(c, scale, 17));
  if (an->args[3].present) {
    int m = an->args[3].tensor;
    ivec full2 = oi;
    full2.e[r - 1] = "s";
    ivec mi = ex_bcast(c, &full2, os, ex_S(c, m));
    const char *mv = ex_val(c, m, &mi);
    if (ex_V(c, m)->dtype == EM_BOOL) ex_line(c, "if (!(%s)) continue;", mv);
    else ex_line(c, "sc += (float)%s;", mv);
  }
  ex_line(c, "const float mn = fmaxf(em_m, sc), corr = expf(em_m - mn), p = expf(sc - mn);");
  ex_line(c, "em_l = em_l * corr + p;");
  ex_line(c, "for (int e = 0; e < %lld; e++) {", (long long)Ev);
  c->indent++;
  ex_line(c, "acc[e] = acc[e] * corr + p * (float)%s;", kvt > 0 ? vval : ex_val(c, v, &vv));
  c->memo.n = mark;
  c->indent--;
  ex_line(c, "}");
  ex_line(c, "em_m = mn;");
  c->memo.n = mark;
  c->indent--;
  ex_line(c, "}");
  if (kvt > 0) {
    ex_line(c, "__syncthreads();");
    c->indent--;
    ex_line(c, "}");
  }
  ex_line(c, "if (!live) return;");
  ex_line(c, "for (int ev = 0; ev < %lld; ev++) {", (long long)Ev);
  c->indent++;
  ex_line(c, "const %s em_r = %s;", ex_ctype(ex_V(c, a)->dtype), ex_round_to(c, ex_V(c, a)->dtype, "(em_l > 0.0f ? acc[ev] / em_l : 0.0f)"));
  c->anchor_var = "em_r";
  ivec di = oi;
  di.e[r - 1] = "ev";
  ex_write_aligned(c, a, di, "an output of the attention kernel is not aligned with its result");
  c->memo.n = mark;
  c->indent--;
  ex_line(c, "}");
}
