/* emit_streamk.c — the persistent pipeline's stream-K scheduler (STREAM_K=1): the tiles that would leave the last
 * wave short are shared out by k-tiles, so every CTA of the grid gets the same number of k-steps to within one.
 *
 * Schedule (G = gridDim.x CTAs, T tiles of nk k-tiles each): with W = T / G full waves and R = T % G tiles left,
 * the last R tiles plus one full wave (when there is one) are the stream-K tiles, the others are whole tiles
 * taken as before (CTA c every G-th from c). The stream-K tiles' k-tiles in order, I of them, are cut into G
 * contiguous ranges, CTA c's [c·I/G, (c+1)·I/G). A range covers the tail of one tile, whole tiles, and the head of
 * another; the CTA takes them last tile first, so that the piece it hands over (a head that does not reach the
 * tile's end) is the first thing it does after its whole tiles, and the piece it owns (a tail that reaches the
 * end) is the last.
 *
 * Fix-up (deterministic): a CTA whose piece does not reach its tile's end writes its f32 accumulators to its slot
 * of the launch scratch ([acc][column group][thread] float4s, coalesced) and raises its flag; the CTA whose piece
 * reaches the end waits for the flags of the CTAs below it that cover the tile's first k-tiles, adds their slots
 * to its own accumulators in descending CTA order (the same sum every run), lowers the flags for the next launch,
 * and runs the epilogue. A CTA hands over at most one piece (its range's last tile), so a slot a CTA is enough,
 * and it never waits before handing over: the only wait is the owner's, on pieces done before any wait, by CTAs
 * that are resident (the grid is at most one CTA an SM, launched whole). */
#include <stdio.h>

#include "emit_impl.h"

void ex_sk_schedule(ectx *c) {
  ex_line(c, "/* STREAM_K: em_tdp whole tiles, then em_tsk tiles shared out by k-tiles (emit_streamk.c) */");
  ex_line(c, "const int em_G = (int)gridDim.x, em_rem = em_tiles %% em_G;");
  ex_line(c, "const int em_tsk = em_rem ? em_rem + (em_tiles >= em_G ? em_G : 0) : 0, em_tdp = em_tiles - em_tsk;");
  ex_line(c, "const long long em_I = (long long)em_tsk * nk, em_i0 = (long long)blockIdx.x * em_I / em_G,");
  ex_line(c, "                em_i1 = ((long long)blockIdx.x + 1) * em_I / em_G;");
  ex_line(c, "const int em_ndp = (int)blockIdx.x < em_tdp ? (em_tdp - 1 - (int)blockIdx.x) / em_G + 1 : 0;");
  ex_line(c, "const int em_nsk = em_i1 > em_i0 ? (int)((em_i1 - 1) / nk - em_i0 / nk) + 1 : 0;");
}

void ex_sk_item_loop(ectx *c, const char *step) {
  ex_line(c, "for (int em_j = 0; em_j < em_ndp + em_nsk; em_j++%s) {", step);
  c->indent++;
  ex_line(c, "int em_t, em_kb = 0, em_ke = nk, em_u = -1;");
  ex_line(c, "if (em_j < em_ndp) em_t = (int)blockIdx.x + em_j * em_G;");
  ex_line(c, "else {");
  ex_line(c, "  em_u = (int)((em_i1 - 1) / nk) - (em_j - em_ndp); /* the range's tiles, last first */");
  ex_line(c, "  em_kb = (int)max(em_i0 - (long long)em_u * nk, 0LL), em_ke = (int)min(em_i1 - (long long)em_u * nk, (long long)nk);");
  ex_line(c, "  em_t = em_tdp + em_u;");
  ex_line(c, "}");
  c->indent--;
}

/* A hand-over's end: the slot's stores visible, the consumer threads (named barrier 1) past them, the flag raised. */
void ex_sk_raise(ectx *c, int threads) {
  ex_line(c, "__threadfence();");
  ex_line(c, "asm volatile(\"bar.sync 1, %d;\" ::: \"memory\");", threads);
  ex_line(c, "if (tid == 0) asm volatile(\"st.release.gpu.global.u32 [%%0], 1;\" :: \"l\"(em_flag + blockIdx.x * 4) : \"memory\");");
}

/* The owner's wait: thread 0 waits for the flags of the CTAs below whose ranges reach into the tile (em_u), lowering
 * each for the next launch, then the consumer threads meet (named barrier 1); em_ts is the tile's first k-tile. */
void ex_sk_gather_wait(ectx *c, int threads) {
  ex_line(c, "const long long em_ts = (long long)em_u * nk; /* the tile's first k-tile in the stream-K order */");
  ex_line(c, "if (tid == 0)");
  ex_line(c, "  for (int em_c = (int)blockIdx.x - 1; em_c >= 0; em_c--) {");
  ex_line(c, "    if (((long long)em_c + 1) * em_I / em_G == (long long)em_c * em_I / em_G) continue; /* (an empty range) */");
  ex_line(c, "    unsigned em_f;");
  ex_line(c, "    do asm volatile(\"ld.acquire.gpu.global.u32 %%0, [%%1];\" : \"=r\"(em_f) : \"l\"(em_flag + em_c * 4) : \"memory\"); while (!em_f);");
  ex_line(c, "    em_flag[em_c * 4] = 0u;");
  ex_line(c, "    if ((long long)em_c * em_I / em_G <= em_ts) break;");
  ex_line(c, "  }");
  ex_line(c, "asm volatile(\"bar.sync 1, %d;\" ::: \"memory\");", threads);
}

/* The owner's loop over the pieces below it, from blockIdx.x - 1 down (em_c; empty ranges skipped), to the one that
 * holds the tile's first k-tile: its head, the caller's body, its tail. */
void ex_sk_pieces_open(ectx *c) {
  ex_line(c, "for (int em_c = (int)blockIdx.x - 1; em_c >= 0; em_c--) {");
  c->indent++;
  ex_line(c, "if (((long long)em_c + 1) * em_I / em_G == (long long)em_c * em_I / em_G) continue;");
}
void ex_sk_pieces_close(ectx *c) {
  ex_line(c, "if ((long long)em_c * em_I / em_G <= em_ts) break;");
  c->indent--;
  ex_line(c, "}");
}

/* After a piece's K loop (consumers): hand over (and skip the epilogue) or gather. cw consumer warps; base: the text of
 * the stream-K part of the launch scratch (em_scratch, or after STAMP=1's records); skip: a line emitted before a
 * hand-over leaves the item (STAMP=1's tail and epilogue marks), or NULL. */
void ex_sk_fixup(ectx *c, const ex_ctr *k, int cw, const char *base, const char *skip) {
  int threads = 32 * cw, nst = k->dual ? 2 : 1;
  long long slot = (long long)k->BM * k->BN * nst; /* floats */
  ex_line(c, "if (em_u >= 0 && (em_kb > 0 || em_ke < nk)) {");
  c->indent++;
  ex_line(c, "unsigned *const em_flag = reinterpret_cast<unsigned *>(%s + (long long)em_G * %lldLL);", base, slot);
  ex_line(c, "if (em_ke < nk) { /* a head: this CTA's slot, then its flag */");
  c->indent++;
  ex_line(c, "float4 *const em_w = reinterpret_cast<float4 *>(%s + (long long)blockIdx.x * %lldLL) + tid;", base, slot);
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int j = 0; j < %d; j++) {", k->FN);
  for (int s = 0; s < nst; s++) {
    const char *a = s ? "acc2" : "acc";
    ex_line(c, "  __stcg(em_w + (j + %d) * %d, make_float4(%s[0][j][0], %s[0][j][1], %s[0][j][2], %s[0][j][3]));", s * k->FN, threads, a,
            a, a, a);
  }
  ex_line(c, "}");
  ex_sk_raise(c, threads);
  if (skip) ex_line(c, "%s", skip);
  ex_line(c, "continue;");
  c->indent--;
  ex_line(c, "}");
  /* the owner: the CTAs below it whose ranges reach into this tile, from blockIdx.x - 1 down */
  ex_sk_gather_wait(c, threads);
  ex_sk_pieces_open(c);
  ex_line(c, "const float4 *const em_r = reinterpret_cast<const float4 *>(%s + (long long)em_c * %lldLL) + tid;", base, slot);
  ex_line(c, "#pragma unroll");
  ex_line(c, "for (int j = 0; j < %d; j++) {", k->FN);
  for (int s = 0; s < nst; s++) {
    const char *a = s ? "acc2" : "acc";
    ex_line(c, "  const float4 em_x%d = __ldcg(em_r + (j + %d) * %d);", s, s * k->FN, threads);
    ex_line(c, "  %s[0][j][0] += em_x%d.x, %s[0][j][1] += em_x%d.y, %s[0][j][2] += em_x%d.z, %s[0][j][3] += em_x%d.w;", a, s, a, s, a, s,
            a, s);
  }
  ex_line(c, "}");
  ex_sk_pieces_close(c);
  c->indent--;
  ex_line(c, "}");
}

long long ex_sk_scratch_per_cta(const ex_ctr *k) { return 4LL * k->BM * k->BN * (k->dual ? 2 : 1) + 16; }
