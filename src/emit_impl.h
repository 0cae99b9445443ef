/* emit_impl.h — what the emitter's core (emit.c: index remapping, values, alignment, the em_emit driver)
 * and its kernel templates (emit_kinds.c: pointwise, row, reduce;
 * emit_contraction.c; emit_attention.c) share. Internal to
 * the emitter; everything here is prefixed ex_. Strings returned by these helpers live in the context's arena
 * until em_emit returns. */
#ifndef EM_EMIT_IMPL_H
#define EM_EMIT_IMPL_H

#include <stdarg.h>

#include "emit.h"

#define MAXR EM_MAX_RANK

typedef struct {
  char *s;
  size_t n, cap;
} sbuf;

typedef struct {
  int rank;
  const char *e[MAXR];
} ivec;

typedef struct {
  int v;
  char *key;
  const char *var;
} memo_ent;

typedef struct {
  const em_tile *t;
  const em_graph *g;
  int64_t kv[EM_NKNOBS];   /* the knob plan: every knob's value (the assignment's, else the table's default); read
                            * only through EX_KNOB, which records the read */
  int kread[EM_NKNOBS];     /* each knob this emission has read: its place in the order of first reads (1, 2, ...);
                            * a knob of the assignment away from its default left at 0 fails the emission (em_emit) */
  int nread;               /* knobs read so far */
  sbuf *out;
  int indent;
  int tmp;
  EM_VEC(char *) arena;
  EM_VEC(memo_ent) memo;
  const char *anchor_var;  /* the anchor's value at the current domain index */
  const char *softmax_mx, *softmax_sum; /* row softmax: the row's max and sum of exp */
  int cache_mode;          /* row CACHE=1: 1 records the first input load of pass 1, 2 serves it from smem */
  const char *cache_key;   /* that load, as text ("in2[i1a2b3c4d]") */
  int anchor;              /* the anchor whose value anchor_var holds (merged siblings switch it) */
  int xanchor;             /* a second anchor with its value at the same index (DUAL_GATE), or -1 */
  const char *xanchor_var;
  const char *stage_arr[2]; /* a linear's result tile staged in shared memory (meta "stage": a head-local
                              * epilogue such as RoPE reads it at other columns): anchor, xanchor; NULL: none */
  em_shape stage_mdims;    /* the result's M dims (its index's leading part linearizes to m) */
  int stage_ld;            /* the staged tile's row stride in elements */
  int stage_reg;           /* 1: no staged tile — a head-local read takes the element from the thread's own
                            * fragments (ex_ctr_stage_read: stage_fn column groups, siblings stage_sib) */
  int stage_fn, stage_sib[2];
  int stage_w, stage_step;  /* the head width and the gcd of the reads' column shifts (meta stage_step) */
  long row_split_end; /* ctr_row_split: where its block ends in out */
  const char *stage_own_n, *stage_own_q; /* the element being computed: its column and its accumulator's last
                                          * index ("n1", "q + 1"); NULL: unknown (ex_ctr_stage_read: a tree) */
  int nhred;               /* head-local reductions over the staged tile (NORM_EPI): value ids; the epilogue reads */
  int hred_v[4];           /* em_hred<j>[(m - m0) * hred_S + (n - n0) / hred_D] at its own (m, n) */
  int hred_S, hred_D;
  int npre;                /* contraction prologue reductions (SPLIT_CONE=0): value ids, their smem rows */
  int pre_v[4];
  const char *pre_arr[4];
  ivec *al;                /* alignment of each value with the domain (NULL entries: not aligned) */
  int *bij;                /* 1 when the alignment is a bijection (the value may be written from it) */
  int *vlink;              /* 1 when a view's alignment was derived across it from its input's (or back) */
  char *dimc[EM_MAX_SYMS]; /* C expressions of the symbols */
  const char *extra_prelude; /* helpers only some kernels need (TMA), placed after ex_PRELUDE */
  int bounds_minb;         /* 1: __launch_bounds__ names MINB even at 1 (a kernel that moves registers between its
                            * warpgroups with setmaxnreg needs the one-block-an-SM cap) */
  const char *more_prelude[6]; /* helpers only some variants need (ex_use_prelude: stamps, TMA stores), after those */
  int nmore;
  struct ex_cap *cap;      /* non-NULL: ex_write_outputs records each store here instead of emitting it */
  int cond_depth;          /* > 0 inside a branch of the element code (a cat's): loads there stay where they are */
  int row_vec;             /* EMMY_ROW_VEC (emit_rowvec.c): a row chunk's V columns; 0: none */
  struct {
    int p;                 /* the input's position */
    em_dtype dt;
    const char *base, *arr; /* the chunk's first index; the array its V elements are loaded into */
  } vreq[16];              /* the chunk loads the element code asked for, placed ahead of it by ex_rowvec_end */
  int nvreq;
  sbuf *row_saved;         /* the kernel's text while the element code goes to a buffer of its own */
  int row_pre;             /* EMMY_ROW_PRELOAD: the chunk count; the requests of both passes kept, loaded before them */
  int row_stride;          /* EMMY_ROW_PRELOAD: columns from a thread's chunk to its next (THREADS·V) */
  sbuf pre_wait;           /* code placed before the grid dependency wait (EMMY_ROW_PRELOAD=2: the weights' loads) */
  int cluster;             /* a template's cluster size other than the contraction's CLUSTER (FLASH=2 with EMMY_KVMC=1), or 0 */
  int failed;
  char err[EM_ERR_MAX];
} ectx;

/* The value of knob NAME (a name of the knob table, knobs.h: another does not compile) in c's plan, recorded as
 * read. Read a knob where the code path that honours it runs: a read marks the knob as realized by the kernel. */
#define EX_KNOB(c, NAME) ex_knob((c), EM_KNOB_##NAME)
static inline int ex_knob(ectx *c, em_knob_id id) {
  if (!c->kread[id]) c->kread[id] = ++c->nread;
  return (int)c->kv[id];
}

void ex_sb_add(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
char *ex_A(ectx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *ex_flit(ectx *c, double v, int digits);
void ex_line(ectx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ex_fail(ectx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Adds prelude text (one of the ex_*_PRELUDE strings) after the kernel's other helpers, once. */
void ex_use_prelude(ectx *c, const char *text);
const char *ex_dim_c(ectx *c, const em_dim *d);
const em_value *ex_V(ectx *c, int v);
const em_shape *ex_S(ectx *c, int v);
const char *ex_ctype(em_dtype t);
const char *ex_stype(em_dtype t);
const char *ex_load_conv(ectx *c, em_dtype t, const char *x);
const char *ex_store_conv(ectx *c, em_dtype t, const char *x);
const char *ex_store_pair(ectx *c, const char *lo, const char *hi);
/* One store of n consecutive converted elements val[0..n) of output p from flat index ix0 (aligned to the n elements'
 * bytes): 2-byte types n = 2, 4, 8 (4, 8, 16 bytes), f32 n = 2, 4, 8 (8 as two 16-byte stores); NULL for others. */
const char *ex_store_chunk(ectx *c, int p, const char *ix0, const char *const *val, int n, em_dtype t);
int ex_env_choice(const char *name, int most);
int ex_env_default_on(const char *name);
/* SDPA's seq_pos (an[8], sequences packed end to end): emits `const long long var = live ? row - seq_pos[b, row] : 0LL;`,
 * b the first batch index x0 (where seq_pos has that dim; x0 is the caller's name for it) — the first key the row
 * attends to. Returns 0 where the attention has no seq_pos (nothing emitted). */
int ex_sdpa_row_start(ectx *c, const em_node *an, const char *var, const char *x0, const char *row, const char *live);
const char *ex_round_to(ectx *c, em_dtype t, const char *x);
const char *ex_idx_name(ectx *c, const char *e);
const char *ex_linearize(ectx *c, const ivec *ix, const em_shape *s);
/* ex_linearize's expression, never named by an index variable and recording nothing (a text to compare or place
 * elsewhere). */
const char *ex_linearize_expr(ectx *c, const ivec *ix, const em_shape *s);
const char *ex_index_diff(ectx *c, const char *x, const char *y);
const char *ex_index_low(ectx *c, const char *x);
ivec ex_unravel(ectx *c, const char *lin, const em_shape *s);
/* The value a chain of view ops over u starts from (a kernel input, say), with u's index ix mapped back to it; -1
 * where u is computed. */
int ex_view_source(ectx *c, int u, ivec *ix);
void ex_split_known(ectx *c, const char *lin, const em_dim *d, const char *q, const char *r);
int ex_tile_split(void);
void ex_split_tile(ectx *c, const char *lin, const char *base, int64_t w, const char *off);
int ex_is_one(const em_dim *d);
/* EMMY_PDL (docs/formats.md): 0 plain launches; 1 trigger at each CTA's top; 2 (unset: the default) the wait alone;
 * 3 the wait, and the persistent GEMM's consumers trigger after their last tile's K loop */
int ex_pdl_mode(void);
ivec ex_bcast(ectx *c, const ivec *ix, const em_shape *out, const em_shape *u);
int ex_axis_of_dim(const em_dim *d, int rank);
int ex_axis_of(const em_arg *a, int rank);
int ex_input_pos(ectx *c, int v);
/* Value v at index ix: a local variable (or expression) of v's compute type, emitted on first use. */
const char *ex_val(ectx *c, int v, const ivec *ix);
/* Propagates the alignment with the domain over same-index elementwise ops and bijective views. */
void ex_align(ectx *c);
void ex_write_outputs(ectx *c, const int *which, int nwhich);
ivec ex_domain_vars(ectx *c, const em_shape *s, const char *lin);
const char *ex_numel_c(ectx *c, const em_shape *s);
char *ex_numel_text(ectx *c, const em_shape *s);
void ex_reset_alignment(ectx *c);
/* Serves value v at index ix from var: the next ex_val of v there returns var (a value loaded ahead). */
void ex_memo_seed(ectx *c, int v, const ivec *ix, const char *var);
/* The positions of the kernel outputs aligned with the domain (at most EX_MAX_OUTS; more fail the emission). */
#define EX_MAX_OUTS 64

/* The stores ex_write_outputs would emit (output position, index text, converted value text), recorded while
 * c->cap points here: the caller emits them itself (two adjacent elements as one store). */
typedef struct ex_cap {
  int n;
  int pos[EX_MAX_OUTS];
  const char *ix[EX_MAX_OUTS], *val[EX_MAX_OUTS];
  int contig[EX_MAX_OUTS]; /* EMMY_ROW_VEC: the store is a chunk's element, contiguous and aligned (ex_rowvec_contig) */
} ex_cap;
int ex_aligned_outputs(ectx *c, int *which);
/* emit_rowvec.c: a row chunk's load of input p at ix (its last index em_c<j>) as element j of a chunk load placed
 * ahead of the element code, or NULL (a load that stays); the element code into body, then the loads and it; a
 * chunk's stores of output t from the elements' captured stores. */
const char *ex_rowvec_load(ectx *c, int p, const ivec *ix, const em_shape *s, em_dtype dt);
int ex_rowvec_contig(ectx *c, const ivec *ix, const em_shape *s, em_dtype dt);
void ex_rowvec_begin(ectx *c, sbuf *body);
void ex_rowvec_end(ectx *c, sbuf *body);
void ex_rowvec_stores(ectx *c, const ex_cap *cap, int t);
void ex_rowvec_preload(ectx *c, int threads);
/* Places v at index ix, aligns, and writes every kernel output; `what` is the error when one is not aligned. */
void ex_write_aligned(ectx *c, int v, ivec ix, const char *what);
const char *ex_output_index(ectx *c, int v, ivec ix, const char **val, int *pos);

/* Strided views: 1 when value v is a chain of views (view, reshape, transpose, permute, expand, unsqueeze,
 * squeeze) of kernel input *base whose elements sit at strides st (elements; 0 for broadcast dims) from the
 * input's start; 0 otherwise. ex_strided_offset is the offset of index ix. */
int ex_strided(ectx *c, int v, int *base, em_dim *st);
const char *ex_strided_offset(ectx *c, const ivec *ix, const em_shape *s, const em_dim *st);
/* 1 when every term of d has a coefficient divisible by m (so d is a multiple of m for any symbol values). */
int ex_dim_multiple_of(const em_dim *d, int64_t m);

/* The kernel templates (emit_kinds.c, emit_contraction.c, emit_attention.c). */
void ex_k_pointwise(ectx *c, em_launch *L);
void ex_k_row(ectx *c, em_launch *L);
void ex_k_reduce(ectx *c, em_launch *L);
void ex_k_contraction(ectx *c, em_launch *L);
void ex_k_attention(ectx *c, em_launch *L);
/* Flash attention on wgmma with a TMA producer (FLASH=2, emit_attention_wgmma.c). */
void ex_k_flash_wgmma(ectx *c, em_launch *L);

/* A contraction's facts, resolved once by ex_k_contraction and shared by its main loops and its epilogue. */
typedef struct {
  int mma, BM, BN, WM, WN, TM, TN, FM, FN, threads; /* tier, tile, warps; FM x FN fragments a warp (MMA=1) */
  int a, A_, B_, B2;        /* the anchor (first linear), its operands, the dual's second weight (or -1) */
  int lin_op, dual, concat, nsib, sib[4];
  int wide;                 /* DUAL_WIDE=1: the dual's weight tiles adjacent a stage, one wgmma of N = 2·BN */
  int64_t sibN[4], sibOff[5]; /* merged siblings' widths and offsets along N */
  const em_shape *os;       /* the anchor's shape, rank r: [batch..., M-dims..., N] */
  int r;
  em_shape mdims, bdims;
  ivec bz;                  /* the batch index (unravelled blockIdx.z) */
  int *dep;                 /* dep[v]: value v reads a linear's result (an epilogue value) */
  int SK, tma, async;
  const char *mma_t;        /* "bf16" or "f16" */
  int BK, stages, CL, WS, wgt, wgw; /* K depth, ring, cluster, producer warpgroup, wgmma and its wait */
  em_dtype opdt;            /* the operands' dtype */
  int pad, persist;         /* PAD_SMEM (bf16 elements after each padded tile row), PERSIST */
  const em_dim *Kd;         /* the contracted dim K (A's last) */
  int rpf;                  /* a residual loaded ahead (ex_ctr_residual): the kernel input read at the result's
                             * own index, its column pairs in registers em_pf[j][q / 2] before the K loop; -1: none */
  const char *jkeep;        /* the fragment epilogue's condition on column group j (NULL: every j): PERSIST=1's
                             * SPLIT_K reduce-scatter leaves each rank its share of the tile's columns */
  int stage_reg;            /* 1: a head-local epilogue reads the thread's own fragments, no staged tile (PERSIST=1
                             * with EPI_SMEM=0; ex_ctr_stage_in_regs says where it may) */
  int npf, pfv[2];          /* other 2-byte inputs loaded ahead (ex_ctr_prefetch: RoPE's cos and sin) at the pair's
                             * own aligned index, into em_pf<t + 1>[j % pfp][q / 2] */
  int pfp;                  /* their period in column groups j: FN, or the head width / 8 where they read a column
                             * only modulo the head width (one row of cos for every head of a wide tile) */
  int s0;                   /* the fragment pairs' sibling: 0, or (merged siblings on PERSIST=1) the one whose
                             * columns the tile is in */
  const char *n0;           /* the tile's first column in that sibling's own columns (NULL: "n0") */
} ex_ctr;

/* The contraction epilogue: split-K's reduction, a staged head-local tile, then every accumulator element
 * (m, n) of this thread (acc[i][j][q] in mma.sync's C-fragment order) through the fused ops to the outputs. */
void ex_ctr_epilogue(ectx *c, const ex_ctr *k, em_launch *L);
/* EPI_SMEM=7's staging of fragment pairs jlo..jhi - 1 (the fused ops' values into the swizzled panels): the one output
 * must be written at the index of value at (-1: the result's own; else the heads view ws_heads_view found). */
void ex_ctr_pairs_staged(ectx *c, const ex_ctr *k, int jlo, int jhi, int hcol, int panel, int at);
/* A register-RoPE epilogue's context (c->stage_*) for the fused ops; 1 (c failed) where the reads cannot come from
 * the thread's own fragments (ex_ctr_stage_in_regs). */
int ex_ctr_stage_regs(ectx *c, const ex_ctr *k, int stageD);
/* A head-local epilogue's head width D (graph meta "stage": RoPE reads the result at other columns of its head), 0
 * without one, -1 (c failed) where the tile cannot hold whole heads: one place for that rule, both pipelines.
 * ex_ctr_head_reductions: how many head-local reductions (NORM_EPI's MEAN/SUM over a head) read the result. */
int ex_ctr_stage_width(ectx *c, const ex_ctr *k);
int ex_ctr_head_reductions(ectx *c, const ex_ctr *k);
/* 1 when node rn is a prologue row reduction (a folded RMSNorm, SPLIT_CONE=0): a mean, sum, amax or vector norm
 * that does not read a linear's result (k->dep). ex_ctr_prologue_reductions: how many the graph has. */
int ex_ctr_is_prologue_reduction(const ex_ctr *k, const em_node *rn);
int ex_ctr_prologue_reductions(ectx *c, const ex_ctr *k);
/* 1 when the head-local reads may come from the reading thread's own accumulator fragments instead of a staged
 * tile: tensor-core fragments of whole rows of the tile (WN=1), every read's column shift a multiple of 8 (graph
 * meta "stage_step": the same lane quad and parity, another column group j), no head-local reduction, no split
 * of the columns (jkeep). The row is always the reader's own: the kernel former admits only last-dim slices between
 * the result and a head-local read. ex_ctr_stage_read: the value of sibling s (0, 1) at column col (text, in N),
 * shift the read's flat index less the reading element's (text; the same row, so the column difference). */
int ex_ctr_stage_in_regs(ectx *c, const ex_ctr *k);
/* 1 when n, the outputs an element of sibling k->s0 writes, is what it should write: every output of the kernel, or
 * (merged siblings, each its own outputs) at least one. */
int ex_ctr_outputs_ok(ectx *c, const ex_ctr *k, int n);
/* Merged siblings: the branch of a tile's epilogue for sibling j opened (on n0: BN divides every width, so a tile lies
 * in one sibling's columns; the caller closes the last with "}"), and the contraction as that sibling's own (ex_ctr.s0,
 * its columns counted from its first: ex_ctr.n0). */
ex_ctr ex_ctr_sibling(ectx *c, const ex_ctr *k, int j);
const char *ex_ctr_stage_read(ectx *c, int s, const char *col, const char *shift);
/* The register-RoPE epilogue's other 2-byte inputs (not the contraction's operands), loaded ahead like the
 * residual: their count into k->npf, k->pfv (at most 2), their period into k->pfp; above 16 column groups a thread
 * only where they repeat every head (pfp = D / 8 <= 8: a 128 x 256 tile keeps 32 registers of them, not 128). */
void ex_ctr_prefetch(ectx *c, ex_ctr *k);
/* The residual of the fragment pairs epilogue, loadable ahead: a 2-byte kernel input the epilogue reads at the
 * result's own index with the result's shape (contiguous rows of N, N even), or -1. ex_ctr_residual_load emits
 * the loads of this thread's pairs into em_pf[j][q / 2] (declared by the caller). */
int ex_ctr_residual(ectx *c, const ex_ctr *k);
void ex_ctr_residual_load(ectx *c, const ex_ctr *k, int jlo, int jhi);
int ex_ctr_at_own_index(ectx *c, const ex_ctr *k, int v);
/* 1 when the current alignment reads value v at value t's own index (t -1: the anchored result's). */
int ex_ctr_at_index_of(ectx *c, const ex_ctr *k, int v, int t);
/* Linear sibling v's value at column nidx from its accumulator element acc: plus its bias (when it has one),
 * rounded to its dtype — what the epilogues and the staged tiles start from. */
const char *ex_ctr_result(ectx *c, int v, const char *acc, const char *nidx);
/* Anchors sibling s's result (text var; a dual's sibling 1 at var2 when given) at the domain index (bz, mi, nv)
 * and aligns the kernel's values with it (ex_align). */
void ex_ctr_anchor(ectx *c, const ex_ctr *k, int s, const char *var, const char *var2, const ivec *mi, const char *nv);
/* Where weight tile b (0; 1: the dual's second) of stage st lies: em_sb + base + st * stride. The A tiles of every
 * stage come first; then each weight in a ring of its own, or with DUAL_WIDE=1 (k->wide) a stage's two weight tiles
 * adjacent, one 2·BN-row K-major tile that a single wgmma of N = 2·BN reads. ex_ctr_b_stage: that address as text. */
void ex_ctr_b_at(const ex_ctr *k, int stages, int b, long long *base, long long *stride);
const char *ex_ctr_b_stage(ectx *c, const ex_ctr *k, int stages, int b);
/* The TMA ring's load of one stage (lambda em_load(st, kt)): A rows m0.., B rows n0.. (B2, siblings). */
void ex_ctr_tma_load(ectx *c, const ex_ctr *k, int stages, int CL, int WS, const char *ktx);
void ex_ctr_tma_load_b(ectx *c, const ex_ctr *k, int stages, const char *ktx, int half);
/* One TMA stage of wgmma (BK=64): four m64nBNk16 on each warpgroup's 64 rows, committed; scale_d is the C
 * expression whose non-zero value keeps the accumulators (0 starts them at zero). */
void ex_wgmma_step(ectx *c, const char *aS, const char *bS, const char *b2S, int BN, int dual, const char *mt,
                   int wait0, const char *scale_d);
/* One wgmma k16 step into accumulator acc (acc[j][q] per 8 columns; with acc_hi, the first n/2 columns in acc and the
 * rest in acc_hi: "acc[0]" for the contraction's): A by descriptor
 * (adesc) or from four registers (areg, their constraint text), B by descriptor, N-major when tnsp; scale_d is the C
 * expression whose non-zero value keeps the accumulator. Shared by the GEMM and flash attention on wgmma. */
void ex_wgmma_insn(ectx *c, int n, const char *mt, const char *acc, const char *acc_hi, const char *adesc, const char *areg,
                   const char *bdesc, const char *scale_d, int tnsp);
/* The same with the descriptors at offsets (16-byte units, literal) from adesc and bdesc, added inside the asm block
 * (aoff unused with areg): only the base descriptors stay live across an unrolled run of steps. */
void ex_wgmma_insn_at(ectx *c, int n, const char *mt, const char *acc, const char *adesc, long aoff, const char *areg,
                      const char *bdesc, long boff, const char *scale_d, int tnsp);
/* The persistent pipeline's stream-K scheduler (STREAM_K=1, emit_streamk.c): the schedule's variables (after
 * em_tiles and nk), the item loop's head (em_t, the piece's k-tiles em_kb..em_ke, em_u its stream-K tile or -1;
 * step: more of the loop's increment, "" or ", em_n++"), the fix-up after a piece's K loop, and the launch scratch a
 * CTA needs. Flash attention's EMMY_ASPLIT shares the schedule and the loop (emit_attention_wgmma_epi.c its fix-up). */
void ex_sk_schedule(ectx *c);
void ex_sk_item_loop(ectx *c, const char *step);
void ex_sk_fixup(ectx *c, const ex_ctr *k, int cw, const char *base, const char *skip);
void ex_sk_raise(ectx *c, int threads);
void ex_sk_gather_wait(ectx *c, int threads);
void ex_sk_pieces_open(ectx *c);
void ex_sk_pieces_close(ectx *c);
long long ex_sk_scratch_per_cta(const ex_ctr *k);
/* The persistent warp-specialized pipeline (PERSIST=1, emit_gemm_ws.c). */
void ex_k_contraction_ws(ectx *c, const ex_ctr *k, em_launch *L);
extern const char ex_PRELUDE[];
extern const char ex_TMA_PRELUDE[];
extern const char ex_CLUSTER_PRELUDE[];
extern const char ex_STAMP_PRELUDE[];
extern const char ex_TMA_STORE_PRELUDE[];
extern const char ex_TMA_STORE4_PRELUDE[];
extern const char ex_SPLIT_PRELUDE[];
extern const char ex_SPLIT_ASYNC_PRELUDE[];
extern const char ex_SPLIT_L2_PRELUDE[];

#endif
