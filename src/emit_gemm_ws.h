/* emit_gemm_ws.h — the persistent GEMM's parts shared by its driver (emit_gemm_ws.c: scheduler, producer, consumers,
 * the split-K and WG_K=2 hand-overs) and its tile epilogues (emit_gemm_ws_epi.c: the staged stores, in halves, by
 * chunks of 16 bytes or by TMA). Internal to the emitter. */
#ifndef EMMY_EMIT_GEMM_WS_H
#define EMMY_EMIT_GEMM_WS_H

#include "emit_impl.h"

/* A part of the staged tile whose 16-byte chunks a set of consumer threads stores (EPI_SMEM=5, 6): `threads` threads,
 * the part `half` columns wide at tile column h * half, staged in 64-column panels `panel` bytes apart, a chunk at its
 * column within the part. col (NULL for none): a C expression for the part's tile column instead, the chunk staged at
 * its column within the tile (WG_K=2's split epilogue: each K group its columns of the one panel). h
 * also names the residual's load slots (em_rqa<h>, em_rva<h>). */
typedef struct {
  int threads, h, half, panel;
  const char *col;
} ws_part;

/* The staged epilogues (EPI_SMEM=1, 2), in halves (3, 4, 5, 6), by TMA from the fragments' fused values (7). */
void ws_epilogue(ectx *c, const ex_ctr *k, int cw, int staged, int stageD);
void ws_epilogue_halves(ectx *c, const ex_ctr *k, int cw, int staged, int tmo, int ahead);
void ws_epilogue_tma_fused(ectx *c, const ex_ctr *k, int cw, int tmo, int heads);
/* EPI_SMEM=5's chunk stores of a part, their residual loads ahead (slots), the fragments' staging */
void ws_chunk_stores(ectx *c, const ex_ctr *k, const ws_part *pt, int pre);
void ws_chunk_slot(ectx *c, const ex_ctr *k, const ws_part *pt, const char *ei);
int ws_chunk_prefetch(ectx *c, const ex_ctr *k, const ws_part *pt);
void ws_stage_frags(ectx *c, const ex_ctr *k, int j0, int j1, int hofs, int panel);
/* EPI_SMEM=6: a tile's chunks stored during the next tile's K loop */
int ws_deferred_chunks(const ex_ctr *k, int threads);
void ws_deferred_chunk(ectx *c, const ex_ctr *k, int threads, const char *cond, const char *j);
void ws_deferred_flush(ectx *c, const ex_ctr *k, int threads, const char *from);
/* The TMA-stored epilogues' conditions (EPI_SMEM=4, 7) and the staging buffers after the ring */
int ws_tma_store_output(ectx *c, const ex_ctr *k, int64_t *n);
int ws_tma_fused_output(ectx *c, const ex_ctr *k, int64_t *n, int *heads);
/* The heads view of a q/k projection: value t = transpose(view(result, [B, S, H, D]), 1, 2) of a [B, S, N] result,
 * D a constant multiple of 64 (*D), where EPI_SMEM=7 stores a [B, H, S, D] output by a map of its own dims; or -1. */
int ws_heads_view(ectx *c, const ex_ctr *k, int64_t *D);
void ws_staging(ectx *c, const ex_ctr *k, long long ring, int staged, long long ep);

#endif
