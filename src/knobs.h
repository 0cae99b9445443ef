/* knobs.h — every tuning knob emmy knows, from one X-macro table: its name, decision family, default, legal
 * values, the kernels that read it and a one-line doc. The emitters read knobs by their enum (EM_KNOB_BM), the
 * rules (scripts/emmy/rules.lua) check what they declare and return against it through `require "emmy.knobs"`,
 * EMMY_KNOBS pins are checked against it, and docs/formats.md's knob table is generated from it
 * (`emmy knobs --update-docs`). A knob no emitter reads and no rule declares does not belong here.
 * Legal values: a list "0,1" or an inclusive range "32..1024". The default is what an emitter assumes for a knob
 * the assignment leaves out; a structural knob's default is the kernel former's (scripts/emmy/compiler.lua). */
#ifndef EM_KNOBS_H
#define EM_KNOBS_H

#include "base.h"

/* X(NAME, FAMILY, DEFAULT, "legal values", "kernels", "doc"), in the order of the documentation table */
#define EM_KNOBS(X)                                                                                                    \
  X(MMA, TILE, 0, "0,1", "contraction", "1: the tensor-core warp tier (mma.sync m16n8k16), 0: scalar")                 \
  X(WM, TILE, 2, "1,2,4,8", "contraction",                                                                             \
    "warps along M (warp tier); the wgmma tier takes BM/16, a warpgroup per 64 rows")                                  \
  X(WN, TILE, 2, "1,2,4,8", "contraction", "warps along N (warp tier); 1 on the wgmma tier")                           \
  X(WGMMA, TILE, 0, "0,1", "contraction (TMA)",                                                                        \
    "1: the Hopper warpgroup tier — `wgmma.mma_async` m64nBNk16 reading both operands from the TMA-staged swizzled "   \
    "tiles through shared-memory descriptors, a warpgroup per 64 rows (WM=BM/16, WN=1, BM 64 or 128, BN up to 256); "  \
    "0: mma.sync. First on sm_90 (measured fastest for every Qwen3 projection)")                                       \
  X(WG_WAIT, TILE, 0, "0,1", "contraction (WGMMA=1, STAGES ≥ 2)",                                                      \
    "1: one wgmma group stays in flight across the k-step boundary (`wgmma.wait_group 1`; the stage of the step "      \
    "before is refilled once every warpgroup has retired it); 0: each step waits for its group")                       \
  X(CLUSTER, TILE, 1, "1,2",                                                                                           \
    "contraction (WGMMA=1, TMA=1, WG_WAIT=1, STAGES ≥ 3, SPLIT_K=1, RASTER=1, an even number of N tiles; any order and tile count with PERSIST=1; merged siblings only with PERSIST=1 and PAIR_A=0)", \
    "2: the kernel is compiled with `__cluster_dims__(2,1,1)`; the two CTAs of a cluster are N-neighbours with the "   \
    "same rows, each loads half of the A tile's rows and multicasts them into both rings (`cp.async.bulk.tensor … "    \
    ".multicast::cluster`), an \"empty\" mbarrier per stage collects both CTAs' releases before a refill (deferred "   \
    "STAGES/2 steps), and a cluster barrier guards the start and the end; 1: no cluster. With PERSIST=1 the pair "    \
    "is two tile rows sharing B (PAIR_A=1: two tile columns sharing A). Offered last, but for merged siblings, whose " \
    "lead it is (docs/performance.md, forty-fourth session)")                                                          \
  X(PAIR_A, TILE, 0, "0,1", "contraction (PERSIST=1, CLUSTER=2)",                                                    \
    "1: the persistent pipeline's CTA pair takes neighbouring tile columns of the same rows and shares the A tile, "  \
    "each CTA loading half its rows and multicasting them into both rings (A is two thirds of a 128 x 64 tile's "     \
    "bytes: cuBLAS's q_proj kernel is a 1x2 cluster); 0: neighbouring tile rows sharing B. Written without a GPU "    \
    "run, offered last")                                                                                               \
  X(WG_PP, TILE, 0, "0,1", "contraction (PERSIST=1, BM=64, WG_K=1, SPLIT_K=1, STREAM_K=0, CLUSTER=1, EPI_SMEM=0)",      \
    "1: the persistent pipeline's two consumer warpgroups (a block of 384 threads) take alternate 64-row tiles of the " \
    "CTA's, their K loops in turn (named barriers 4 and 5), so one's epilogue runs under the other's K loop (CUTLASS's " \
    "ping-pong schedule); 0: one warpgroup a 64-row tile. Correct (H100, thirty-sixth session: GPU cases wgpp_*, 8 of " \
    "8) and slower than every lead it was pinned over: 1.14-1.75x at 512 tokens, 1.2-2.2x at 4096 against the 128 x " \
    "256 cooperative tiles (docs/performance.md): every candidate's twin where it applies, offered last")                                                                           \
  X(WG_K, TILE, 1, "1,2", "contraction (PERSIST=1, BM=64, SPLIT_K=1, STREAM_K=0, EPI_SMEM not 6, K over 64, STAGES >= 3)", \
    "2: the persistent pipeline's 64-row tile has two consumer warpgroups (a block of 384 threads) dealt its k-steps " \
    "in turn, each into its own accumulators; at the tile's end the second hands its partial sums to the first "     \
    "through shared memory and goes on to its next tile while the first runs the epilogue (cuBLAS's 64 x 64 kernels " \
    "at 512 tokens have two consumer warpgroups); 1: one warpgroup a 64 rows. First, at 12 stages, for the one-wave "  \
    "64 x 64 residual kernels that no split tile leads (atom.kgroup_lead; Qwen3 o / down at 512 tokens until the "     \
    "forty-first session, in the layer 8.7 / 11.8 µs -> 8.2 / 11.3; H200, docs/performance.md, twenty-fourth "        \
    "session); after every persistent tile elsewhere")                                                               \
  X(DUAL_WIDE, TILE, 0, "0,1", "contraction (WGMMA=1, a dual pair, 2·BN ≤ 256)",                                        \
    "1: a dual kernel's two weight tiles lie side by side in each stage, one `wgmma` of N = 2·BN (gate's columns, "     \
    "then up's) reads the A tile once a k16 step instead of twice; 0: two wgmma of N = BN. First for the wide "      \
    "persistent 128 x 64 dual (atom.dual_wide_lead: TinyLlama's gate/up at 512 tokens) and as the twin of the "       \
    "non-persistent 64 x 64 lead of a dual of more than two waves (Qwen3's gate/up at 512 tokens: in the layer "       \
    "13.6 -> 13.3 µs; H200, docs/performance.md, twenty-fifth session)")                                               \
  X(PRODUCER, TILE, 0, "0,1",                                                                                          \
    "contraction (WGMMA=1, TMA=1, WG_WAIT=1, STAGES ≥ 2, SPLIT_K=1, CLUSTER=1, no staged epilogue)",                   \
    "1: warp specialization — one more warpgroup (block of 32·WM + 128 threads) whose first lane issues every TMA "    \
    "load, waiting on a per-stage \"empty\" mbarrier that each consumer warp arrives on once `wait_group 1` has "      \
    "retired the stage; the consumer warpgroups only wait for full stages and issue wgmma, with no block barrier in "  \
    "the K loop; the producer leaves after its loop. 0: the consumers' thread 0 issues the loads after a block "       \
    "barrier. Offered last. Correct on the H200 (`sh tests/gpu/run.sh producer`: seq_len 1, 7, 513, 2048, BM 128, "    \
    "an 8-deep ring, a 20-point sweep at 512); within 3% of PRODUCER=0 on every Qwen3 projection at 512")              \
  X(PERSIST, TILE, 0, "0,1",                                                                                           \
    "contraction (PRODUCER=1, TMA=1, WGMMA=1, WG_WAIT=1, BM 64 or 128, STAGES ≥ 2, SPLIT_K=1, one linear or a dual "   \
    "pair, no prologue; a head-local (RoPE) epilogue with EPI_SMEM 1 or 2, or 0 where its column shifts are "        \
    "multiples of 8)",                                                                                                 \
    "1: the persistent warp-specialized pipeline (src/emit_gemm_ws.c): grid = min(tiles, SMs), each CTA loops over "   \
    "output tiles in RASTER-row groups; the producer warpgroup (setmaxnreg 40) streams k-slices through the TMA ring " \
    "on full/empty mbarriers whose phases run across tiles; BM/64 consumer warpgroups (setmaxnreg 232) issue wgmma "   \
    "with one group in flight, the first k-slice with scale-d 0. With CLUSTER=2, CTA pairs on neighbouring tile rows " \
    "share the B tile, each multicasting its half (correct; 2-5% slower than unclustered, offered last). First where at least 8 rows of 128 × 128 "   \
    "tiles at the hint fill every SM (atom.persist_first); 4096³ 207.8 µs against 407.3 (H200, docs/performance.md, " \
    "ninth session); also where one linear's tiles (atom.persist_small) or a dual's 64 x 64 tiles "                     \
    "(atom.dual_one_wave: Qwen3's k+v at 512 tokens, in the layer 9.0 -> 7.9 µs, twenty-fifth session) make one wave")  \
  X(STREAM_K, SPLIT, 0, "0,1", "contraction (PERSIST=1, SPLIT_K=1, CLUSTER=1)",                                         \
    "1: stream-K — the tiles of the last, partial wave (and one full wave before it) are shared out by k-tiles, "   \
    "every CTA of the one-an-SM grid an equal share; a CTA whose piece does not reach its tile's end hands its f32 "  \
    "accumulators over through the launch scratch, the one that does adds them in a fixed order and runs the "        \
    "epilogue (deterministic); 0: whole tiles")                                                                       \
  X(SPLIT_L2, SPLIT, 0, "0,1", "contraction (PERSIST=1, SPLIT_K 2 or 4, CLUSTER=1, EPI_SMEM=0)",                      \
    "1: SPLIT_K's parts of a tile summed through the launch scratch (L2) instead of a cluster's distributed shared "  \
    "memory: no cluster is launched; the SPLIT_K consecutive CTAs of a group take one tile's K parts, each writes "   \
    "the other ranks' column shares of its f32 partial sums to its slot (16-byte stores kept in L2) and raises a "    \
    "flag an owner, waits for its peers' flags, adds their parts in a fixed order (deterministic) and runs the "      \
    "fragment epilogue on its share; an owner lowers each flag once read, and a CTA's next tile waits for its flags " \
    "to be down before writing its slot again. The grid is a multiple of SPLIT_K, every CTA resident (a persistent "  \
    "grid of one CTA an SM). For one-wave split tiles at 512 tokens, where the cluster's start and end cost what the "\
    "split saves (docs/performance.md, twenty-seventh session). Written without a GPU run, offered last; 0: the "     \
    "cluster")                                                                                                         \
  X(EPI_SMEM, TILE, 0, "0,1,2,3,4,5,6,7", "contraction (PERSIST=1)",                                                             \
    "the persistent pipeline's epilogue. 0: each thread stores its own fragments (a RoPE epilogue reads the other "   \
    "half of its head from the thread's own registers: rotate_half's shift is a multiple of 8 columns); 1: each "      \
    "tile's results (bias "                                                                                            \
    "added, rounded) are staged in a padded BM × (BN+8) shared tile behind a consumers-only named barrier and stored " \
    "by consecutive threads along N; 2: as 1 with the store loop unrolled eight deep (4096³ 202.6 µs against 207.8; "   \
    "no help to a residual: down 93.9 against 53.8 in fragments). 1 first for a plain result (q at 4096 tokens "       \
    "43.9 µs against 56.5), 0 first where the epilogue reads another tensor or two accumulators (down 53.3 against "   \
    "92.2); 2 offered last. 3: staged in two column halves of BM × BN/2 in 128-byte-swizzled 64-column panels "     \
    "(unpadded: 32 KB at 128 × 256, so 4 stages fit beside it), each half stored as 2 is; 4: as 3, each half "         \
    "stored by TMA (`cp.async.bulk.tensor` shared → global, one consumer thread, no per-thread stores; a plain "       \
    "result only: one output, the linear's result in its own row-major layout, N a multiple of 8); 5: as 3, each "   \
    "half stored 16 bytes a thread (8 consecutive columns of a row through the fused ops, one vector store an "        \
    "output; any output layout, N a constant multiple of 8); 6: as 5 with the tile staged whole (BM × BN, 64 KB at " \
    "128 × 256) and stored while the next tile's K loop runs, a chunk a thread each k-step (SPLIT_K=1, STREAM_K=0; "  \
    "correct, no faster: offered last); 7: the fragment epilogue's values (the fused ops, a residual loaded ahead) "  \
    "staged as 4's halves and stored by TMA: one output of the result's shape at its own index (SPLIT_K=1, "          \
    "STREAM_K=0; first at BN 128 and 256 where it applies: the 4096-token residual kernels 4-11% faster than with 0; " \
    "last at BN 64), or a Llama q projection's RoPE from the fragments into heads ([B, H, S, D], D a multiple of 64: " \
    "a map of the output's own dims, the box at the tile's first batch, its rows in later batches stored by the threads; the lead for a RoPE q of one batch). "  \
    "3..7 need BN a multiple of 64 (64: one part)")                                                                   \
  X(PAD_SMEM, TILE, 8, "0,8,16", "contraction (warp tier)",                                                            \
    "bf16 elements of padding per shared-memory tile row (8: conflict-free ldmatrix; 0: packed; TMA=1 sets 0: its "    \
    "tiles are swizzled)")                                                                                             \
  X(RASTER, ORDER, 1, "1..16", "contraction",                                                                          \
    "1: row-major block order; G > 1: groups of G tile rows for L2 reuse. 1 first, except a dual kernel whose 64×64 "  \
    "grid at the hint is more than two waves (`atom.dual_waves`: gate/up), where 8 is first (with 3 stages: 18.0 µs "  \
    "against 29.9, docs/performance.md, eighth session)")                                                              \
  X(SPLIT_K, SPLIT, 1, "1..16", "contraction (linear, warp tier)",                                                     \
    "S > 1: grid z splits the K tiles in S slices; partial accumulators go to a per-launch scratch buffer "            \
    "(`launch.scratch_per_tile` bytes per (m, n) tile, zeroed once) and the last block of each tile sums them in "     \
    "slice order (deterministic) before the epilogue; 1: no split. With PERSIST=1 (2 or 4, CLUSTER=1): a cluster "    \
    "of S CTAs on one tile's K parts; EPI_SMEM=0 reduce-scatters the partials through distributed shared memory "     \
    "(each rank sums and stores its 1/S of the columns), a staged epilogue (S=2) hands rank 1's tile to rank 0. "     \
    "Correct on the H200; 4 is slow where the SMs cannot hold every 4-CTA cluster at once (docs/performance.md, "   \
    "thirteenth session). 2 first for the one-wave residual linears whose 128 x 128 (atom.split2_lead: TinyLlama's "  \
    "512-token down) or 128 x 64 tiles (atom.split2_small: Qwen3's 512-token o / down, 7.6 / 9.9 µs against 8.2 / "  \
    "11.2, H100, forty-first session) split in two fill the SMs")                                                   \
  X(BM, TILE, 64, "16,32,64,128,256", "contraction", "block tile rows")                                                \
  X(BN, TILE, 64, "16,32,64,80,96,128,192,256", "contraction", "block tile columns")                                   \
  X(BK, TILE, 16, "8,16,32,64", "contraction", "K depth of a block tile step staged through shared memory")            \
  X(TM, TILE, 4, "1,2,4,8", "contraction", "rows of the per-thread register tile (scalar tier)")                       \
  X(TN, TILE, 4, "1,2,4,8", "contraction", "columns of the per-thread register tile (scalar tier)")                    \
  X(ASYNC, COPY, 0, "0,1", "contraction",                                                                              \
    "1: a STAGES-deep ring of operand tiles in dynamic shared memory (warp tier, operands that are kernel inputs), "   \
    "filled by 16-byte cp.async copies or by TMA; 0: element-wise tile fills")                                         \
  X(STAGES, COPY, 1, "1..12", "contraction",                                                                           \
    "depth of the ASYNC=1 ring: 1–4; 6, 8 and 12 for the wgmma tier on TMA tiles only (after the others: no default "  \
    "uses them; the tune picks 6 for q, o and down, 1–2% at best: docs/performance.md, seventh session). 4 first; 3 "  \
    "first for a dual kernel of more than two waves (`atom.dual_waves`)")                                              \
  X(TMA, STAGE, 0, "0,1", "contraction",                                                                               \
    "1: the ring's tiles staged by `cp.async.bulk.tensor` (2-d tensor maps encoded per launch at the runtime "         \
    "shapes, one mbarrier per stage, 128-byte swizzle; needs sm_90, BK=64, BM and BN ≤ 256, K a multiple of 8, "       \
    "operands that are kernel inputs; merged siblings (up to 3): a tensor map per weight, BN dividing every "          \
    "sibling's width); 0: cp.async. First on sm_90 (measured faster)")                                                 \
  X(THREADS, REDUCE, 256, "32..1024", "row", "threads per row (a multiple of 32)")                                     \
  X(RPB, REDUCE, 1, "1,2,4,8", "row", "rows per block")                                                                \
  X(CACHE, REDUCE, 0, "0,1", "row",                                                                                    \
    "1: one pass, the row's input kept in shared memory for the epilogue; 0: two passes over memory")                  \
  X(UNROLL, REDUCE, 0, "0,1", "row",                                                                                   \
    "1: a constant row's column loops unrolled (each thread issues its L/THREADS loads together, not one a loop "      \
    "trip); 0: loops striding by blockDim.x. The lead of a constant row but a softmax's (the RMSNorm layer rows: "    \
    "Qwen3 layer 0 81.6 -> 75.2 us, H200)")                                                                            \
  X(BLOCK, WORK, 256, "32..1024", "pointwise, reduce", "threads per block of the grid-stride loop")                    \
  X(VEC, WORK, 1, "1,2,4,8", "pointwise", "consecutive elements per thread")                                           \
  X(EPT, WORK, 1, "1,2,4,8", "pointwise", "trips of the grid-stride loop per thread")                                  \
  X(SPLIT_CONE, STRUCT, 1, "0,1", "contraction (structural)",                                                          \
    "1: an RMSNorm feeding a matmul is its own kernel; 0: folded into the matmul's prologue")                          \
  X(VIEW_OUT, STRUCT, 1, "0,1", "structural",                                                                          \
    "1 (default): a result read only through one chain of bijective views (attention before o_proj, v_proj before "    \
    "attention) is written in the chain's final layout; 0: in its own layout")                                         \
  X(ROPE_EPI, STRUCT, 1, "0,1", "structural",                                                                          \
    "1 (default): a linear's kernel also takes the epilogue ops that read its result at other columns of the same "    \
    "head (RoPE's rotate_half on a Llama q/k projection: slices of the last dim, neg, cat); the result tile is "       \
    "staged in shared memory (kernel meta `stage` = the head width D; BN must be a multiple of D); 0: those ops "      \
    "form pointwise kernels")                                                                                          \
  X(NORM_EPI, STRUCT, 0, "0,1", "structural",                                                                          \
    "1: a last-dim mean/sum over a linear's result in R-wide segments (R ≤ 256; Qwen3's q_norm/k_norm over each "      \
    "128-wide head) joins the linear's kernel as a per-segment reduction over the staged result tile (a warp per "     \
    "row and head), followed by the rest of the norm and RoPE; 0 (default until it has run on a GPU): those stay "     \
    "row kernels. Not with MERGE_SIBLINGS=1 and DUAL_GATE=0")                                                        \
  X(DUAL_GATE, DUAL, 1, "0,1", "contraction (structural)",                                                             \
    "1 (default): two linears of equal width on one operand (gate/up, k/v) in one kernel with two accumulators, "      \
    "SiLU(gate)·up as its epilogue; 0: apart")                                                                         \
  X(MERGE_SIBLINGS, MERGE, 1, "0,1", "contraction (structural)",                                                       \
    "1 (default): linears reading the same operand (q/k/v, gate/up) are one kernel, their N side by side; with "      \
    "DUAL_GATE=1 only three or more (q/k/v) whose 128 x 128 tiles make one wave at the hint and that take no "        \
    "head-local epilogue apart (a pair stays dual); 0: apart")                                                         \
  X(MINB, WORK, 1, "1..4", "attention (flash)",                                                                        \
    "blocks per SM the register allocation must allow (`__launch_bounds__(threads, MINB)`): 1 (default) leaves it "    \
    "to ptxas, 2 caps registers for two blocks; 3 (FLASH=2, head dim 64, 64-key tiles: 24 / 136 registers after "     \
    "setmaxnreg) for three — the lead of short causal head-dim-64 attention with three query tiles an SM (b8 s512 "    \
    "44.1 -> 36.4 us, H200)")                                                                                          \
  X(QSMEM, WORK, 0, "0,1", "attention (flash)",                                                                        \
    "1: the Q tile keeps shared-memory rows of its own (before the K/V stages) and its fragments are reloaded with "   \
    "ldmatrix every k-step, D/2 fewer registers per thread; 0 (default): fragments held in registers, the K/V "        \
    "stages overlay the Q rows")                                                                                       \
  X(QROWS, WORK, 64, "32..1024", "attention", "query rows (threads) per block of the scalar tier")                     \
  X(FLASH, WORK, 0, "0,1,2", "attention",                                                                              \
    "2: flash attention on Hopper tensor cores (src/emit_attention_wgmma.c): a TMA producer warpgroup streams K and V " \
    "tiles through a KVST-deep ring, a consumer warpgroup per 64 query rows runs S = QKᵀ and O += PV on wgmma (P from " \
    "registers) with the online softmax in registers; 1: flash attention on mma.sync; 0: the scalar tier")             \
  X(BQ, WORK, 64, "16,32,64,128,192,256", "attention (flash)",                                                        \
    "query rows per block (a warp per 16; FLASH=2: a consumer warpgroup per 64, 192 for head dim 64 only)")             \
  X(BKV, WORK, 32, "16,32,64,128,176,192", "attention (flash)", "keys per step staged in shared memory (176, 192: FLASH=2)")                       \
  X(KVSPLIT, WORK, 1, "1,2", "attention (flash)",                                                                      \
    "2 (first where K/V are strided views): twice the warps per block, the two halves of each query row group "        \
    "taking alternate K/V tiles, their softmax states merged through shared memory before the epilogue (dynamic "      \
    "shared memory); 1: no split")                                                                                     \
  X(KVST, WORK, 1, "1..4", "attention (flash)",                                                                        \
    "K/V tile stages in shared memory: 2 double-buffers them with cp.async (keys and values that are strided views "   \
    "of kernel inputs); 1: one stage. FLASH=2: the TMA ring's depth, 2 to 4")                                          \
  X(PINGPONG, WORK, 0, "0,1", "attention (FLASH=2)",                                                                   \
    "1: the two (BQ=128) or three (BQ=192) Q slices' warpgroups (KVSPLIT=1; causal: BKV=BQ) take turns issuing a key " \
    "tile's wgmma (named barriers 4 or 11, + slice), so one's softmax overlaps another's matrix products (FlashAttention-3's " \
    "ping-pong; three slices written without a GPU run); "                                                            \
    "the head-dim-128 non-causal lead where BQ=128 leads (b8 s512 46.5 -> 43.6 us, H200), else offered last")        \
  X(APERSIST, WORK, 0, "0,1", "attention (FLASH=2)",                                                                   \
    "1: MINB CTAs an SM loop over (query tile, head) items (KVSPLIT=1, QPACK=0; MINB 2, 3: BQ=64; causal: rounds in mirrored " \
    "order), its producer loading the next item's first K/V tiles during this item's epilogue and its Q once Q is "  \
    "released (after the last QK^T with OSMEM=0, else after the epilogue) (FlashAttention-3's persistent scheduler); " \
    "the head-dim-128 lead where items are at most 4 key tiles and 2 or more an SM (b8 s512 43.7 -> 41.1 us, H200), "  \
    "and with MINB=3 the head-dim-64 non-causal one at 512 keys (b8 53.5 -> 47.7 us), " \
    "else offered last")                                                                                              \
  X(OSMEM, WORK, 0, "0,1,2,3,4", "attention (FLASH=2)",                                                                \
    "1: each warpgroup stages O / l (rounded) in its Q slice of shared memory (128-byte swizzled, conflict-free) and " \
    "consecutive threads store consecutive head elements; 2: the same, a thread a 16-byte chunk of eight head "        \
    "elements (one store where the output's head dim is contiguous; with 128-key tiles the head-dim-128 lead with few query tiles " \
    "since the fifty-first session, b1 s512 causal 32/8 heads 13.2 -> 11.7 us, H100); "                            \
    "3 (APERSIST=1): as 2 from a buffer of its own "                                                                  \
    "after the K/V ring (the Q tile's size more shared memory), Q released to the next item after the last QK^T "    \
    "(b8 s512 causal 38.0 -> 36.0 us against OSMEM=2 on the same 2-deep ring, H200); 4 (APERSIST=1): as 3 over the "  \
    "warpgroup's last K/V stage, released after the epilogue (no more shared memory: a 3-deep ring at head dim "    \
    "128); 3 and 4 offered last; 0: each thread stores its own fragments (eight rows an instruction)")               \
  X(RESCALE, WORK, 0, "0,1", "attention (FLASH=2)",                                                                   \
    "1: O and the row sums are corrected only when a warp's row maximum grew by more than 8 (base 2) since the last "  \
    "correction, else P is taken against the stale maximum (P up to 256; FlashAttention-4's conditional rescaling): " \
    "the correction's exp2, its multiplies of O (D/2 a thread) skipped on most key tiles; 0 (default): every tile")   \
  X(OTMA, WORK, 0, "0,1", "attention (FLASH=2, OSMEM 2-4)",                                                         \
    "1: where a warpgroup's 64 rows are all inside the sequence and lie in the output as rows of a matrix (the head "  \
    "dim contiguous, 16-byte aligned; checked where it runs), its staged O goes out as D/64 bulk tensor stores (TMA) " \
    "from one thread, else the 16-byte chunk stores; the head-dim-64 lead (b8 s512 causal 36.0 -> 34.6 us, non-causal " \
    "47.7 -> 46.4, H200), else offered after each staged option; 0 (default): a thread a 16-byte chunk")            \
  X(PSMEM, WORK, 0, "0,1,2", "attention (FLASH=2)",                                                                    \
    "1: P goes from the softmax's registers to shared memory of the warpgroup's own (stmatrix, 128-byte swizzled) "   \
    "and O += PV reads both operands from shared memory, so that no P register set lives across a key tile (the "     \
    "registers that 192-key tiles and three consumer warpgroups need; FlashAttention-3's head-dim-64 non-causal "    \
    "kernel, 192 x 192); 2: two buffers a warpgroup, alternating by tile, P stored during the softmax as each k16 "  \
    "step is packed (no P registers, no store after the PV's wait; twice the shared memory); written without a GPU " \
    "run: pinned only (bench/attention.lua --pins); 0 (default): P from registers")                                  \
  X(QPACK, WORK, 0, "0,1", "attention (FLASH=2)",                                                                      \
    "1: a CTA's consumer warpgroups take the same 64 query rows of consecutive query heads that share a KV head (GQA), " \
    "so each K/V tile is loaded once for them; 0: consecutive 64-row slices of one head's query tile")                 \
  X(KV_TILE, WORK, 0, "0,8,16,32,64,128", "attention",                                                                 \
    "keys and values staged in shared memory per step of the scalar tier (0: none)")                                   \
  X(STAMP, DEBUG, 0, "0,1", "contraction (PERSIST=1; bench/gemm.lua --stamp); attention (FLASH=2; bench/attention.lua --stamp)", \
    "1: the persistent pipeline records clock intervals (lane 0 of each consumer warpgroup and the producer lane: "    \
    "full-barrier waits, wgmma issue to wait_group 1, releases, each tile's head (its coordinates to its K loop: the loads ahead), tail and epilogue, empty-barrier waits "   \
    "and load issue, totals) into a per-CTA scratch record (`launch.scratch_per_tile` bytes; with STREAM_K=1 or "     \
    "SPLIT_L2=1 every CTA's record first, its slots and flags after); bench/gemm.lua --stamp prints them. FLASH=2 attention likewise " \
    "(thread 0 of each consumer warpgroup: the K barrier's wait, PINGPONG's turn, the issue of S and PV, the waits " \
    "for S and PV, the softmax, the epilogue; the producer lane's waits and issue; emit_attention_wgmma.c "          \
    "FA_STAMP_FIELDS), bench/attention.lua --stamp. Never chosen by a rule; "                                         \
    "0: no stamps (the default text)")                                                                                 \
  X(DIAG, DEBUG, 0, "0..7", "contraction (PERSIST=1; bench/gemm.lua --pins)",                                      \
    "a diagnostic to take a persistent GEMM's time apart: 1 the wgmma left out (the ring streams its tiles into "     \
    "shared memory and nothing multiplies them: the transport's time; results wrong), 2 CLUSTER=2 without multicast " \
    "(each CTA loads its whole tiles and releases its own ring: the cluster's launch, placement and barriers), 3 "    \
    "both; 4 added to 2 or 3 (6, 7; SPLIT_K=1) leaves out the cluster barriers at the start and end too (the launch " \
    "and placement alone). bench/gemm.lua marks a DIAG variant, checks 2 and 6 (their results are right) and times "  \
    "the odd ones unchecked; never the best, never chosen by a rule")                                                 \
  X(PLANT, PLANT, 0, "0..4", "any (test-only)",                                                                        \
    "a planted failure (tests/fixtures/plant/): 1 a trap, 2 a hang, 3 a wrong answer (the first block returns at "     \
    "once), 4 a compile error; 0: none")

typedef enum {
#define X(name, fam, def, vals, kinds, doc) EM_KNOB_##name,
  EM_KNOBS(X)
#undef X
  EM_NKNOBS
} em_knob_id;

typedef struct {
  const char *name, *family;
  int64_t def;
  const char *values, *kinds, *doc;
} em_knob_info;

/* The table, indexed by em_knob_id. */
extern const em_knob_info em_knob_table[EM_NKNOBS];

/* The id of the knob named name, or -1. */
int em_knob_find(const char *name);

/* Checks that name is a knob and v one of its legal values. Returns EM_OK, or EM_EINPUT with err naming the knob,
 * the value and what it takes (an unknown name with the nearest knob's name, when one is close). */
em_status em_knob_check(const char *name, int64_t v, char *err);

/* Whether v is among knob id's legal values. */
int em_knob_legal(em_knob_id id, int64_t v);

/* Whether knob id is structural: the kernel former reads it before kernels exist (scripts/passes/, through
 * scripts/emmy/compiler.lua's STRUCTURAL, which is this list), the rules record it in a kernel's knob string, and
 * no emitter reads it. */
int em_knob_structural(em_knob_id id);

/* Whether the table's kernels text of knob id names kernel kind kind ("pointwise", "attention", ...) before any
 * parenthesis, or says "any". */
int em_knob_for_kind(em_knob_id id, const char *kind);

#endif
