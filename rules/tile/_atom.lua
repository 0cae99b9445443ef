-- _atom.lua — helpers shared by the tile rules: the options a knob may take and small predicates.
local A = {}

-- Powers of two from lo to hi.
function A.pow2(lo, hi)
  local out, x = {}, lo
  while x <= hi do
    out[#out + 1] = x
    x = x * 2
  end
  return out
end

-- The smallest multiple of 32 threads covering n, capped at 1024.
function A.warps_for(n)
  local t = math.ceil(n / 32) * 32
  return math.max(32, math.min(1024, t))
end

function A.is_half(dtype) return dtype == "bf16" or dtype == "f16" end

-- Whether a copy engine can move a contraction's operands: both are kernel inputs read as they are (no view, no
-- folded prologue) with 16-byte rows. ok, reason (the cp_async gate; TMA adds its own conditions below).
function A.copyable(k)
  if not k.a_direct then return false, "the left operand is computed in the kernel (a view or a prologue)" end
  if not k.b_direct then return false, "the weight operand is not a kernel input" end
  if k.K % 8 ~= 0 then return false, ("K=%d is not a multiple of 8 (16-byte rows)"):format(k.K) end
  return true, "both operands are contiguous kernel inputs"
end

-- Whether a contraction's operands can travel by TMA on this device: ok, reason (050_use_tma.lua's gate; the
-- tile and copy forks read it too, to put the tile measured best under TMA first).
function A.tma(k, dev)
  if (dev.cc_major or 0) < 9 then return false, ("compute capability %s has no TMA (needs 9.0)"):format(dev.cc) end
  if not A.is_half(k.dtype) then return false, ("operand dtype %s (the warp tier needs bf16/f16)"):format(k.dtype) end
  local ok, why = A.copyable(k)
  if not ok then return false, why end
  if k.siblings > 3 and not k.dual then return false, ("%d merged siblings (a tensor map each: at most 3)"):format(k.siblings) end
  return true, "both operands are kernel inputs: 2-d tensor maps, 128-byte swizzle, zero fill past M"
end

-- What a contraction's gate reason adds for a head-local epilogue (RoPE on a Llama q/k projection): the result
-- tile is staged in shared memory and the engine's resource check keeps BN a multiple of the head width.
function A.epilogue_note(k)
  if not k.stage then return "" end
  return ("; %sRoPE epilogue over the result tile staged in shared memory (BN a multiple of the %d-wide head)"):format(
    (k.epilogue_reductions or 0) > 0 and "per-head norm + " or "", k.stage)
end

-- Appends to the option list out a copy of each of its options with key = v (a fork that offers every option
-- twice, the variants after the originals); returns out.
function A.also(out, key, v)
  local n = #out
  for i = 1, n do out[#out + 1] = A.with(out[i], key, v) end
  return out
end

-- Moves the first option of out whose knobs include every key = value of want to the front (the rest keep their
-- order); out unchanged when none does. Returns out.
function A.lead(out, want)
  for i, o in ipairs(out) do
    local all = true
    for key, v in pairs(want) do if o[key] ~= v then all = false break end end
    if all then
      for j = i, 2, -1 do out[j] = out[j - 1] end
      out[1] = o
      return out
    end
  end
  return out
end

-- A copy of the option table o with key = v.
function A.with(o, key, v)
  local x = {}
  for k2, y in pairs(o) do x[k2] = y end
  x[key] = v
  return x
end

-- A dual kernel (two B tiles a stage: gate/up) whose 64 x 64 tile grid at the hint is more than two waves of one
-- block per SM. There the ring's depth sets how many blocks an SM holds (3 stages of 24 KB: three blocks; 4: two)
-- and the block order sets L2 reuse across waves: Qwen3's gate/up at seq_len 512 (384 tiles on 132 SMs) measured
-- 18.0 us with RASTER=8 and 3 stages against 29.9 with RASTER=1 and 4 (bench/kernels.lua --tiles, H200,
-- 2026-11-30; the tune picked the same). k/v (128 tiles, one wave) was within 2% at every order and depth.
function A.dual_waves(k, dev)
  if not k.dual or not k.M or not k.N then return false end
  return math.ceil(k.M / 64) * math.ceil(k.N / 64) > 2 * (dev.sm_count or 132)
end

-- A dual kernel (gate/up) with fewer than 8 tile rows of 128 at the hint (not atom.persist_first) whose 128 x 64 tile
-- grid is 2.5 waves or more: there the persistent pipeline's 128 x 64 tile with both weight tiles in one wgmma
-- (DUAL_WIDE=1) on a 6-stage ring leads. Measured (H200, nineteenth session): TinyLlama gate/up at 512 tokens (352
-- tiles) 48.2 -> 44.7 us alone (torch 44.5; bench/gemm.lua --match), 48.7 -> 44.8 in the layer, the layer 127.3 ->
-- 122.8 (emmy run --bench, EMMY_KNOBS pins); Qwen3's gate/up (192 tiles, 1.45 waves) lost, 14.2 -> 19.3.
function A.dual_wide_lead(k, dev)
  if not k.dual or not k.M or not k.N or A.persist_first(k, dev) then return false end
  return math.ceil(k.M / 128) * math.ceil(k.N / 64) >= 2.5 * (dev.sm_count or 132)
end

-- A contraction whose result is at least 4096 x 4096 at the hint (four waves and more of 128 x 256 tiles): there
-- RASTER=8 (eight tile rows a group, so that the SMs' concurrent tiles share A rows and B columns in L2) leads.
-- Measured with the persistent 128 x 256 lead, 4 stages (bench/gemm.lua --cases squares --torch --limit 9, H200,
-- eighteenth session): 8192³ 1683.3 -> 1410.7 us (cuBLAS 1600.1), 4096³ 185.9 -> 180.6 (cuBLAS 183.1).
function A.raster_big(k, dev)
  return k.M ~= nil and k.N ~= nil and k.M >= 4096 and k.N >= 4096
end

-- A contraction of at least 8 tile rows of 128 whose 128 x 128 tile grid at the hint fills every SM: there the
-- persistent pipeline (PERSIST=1) beat the 64 x 64 tiles for every Qwen3 projection (4096 tokens) and 4096³
-- (bench/gemm.lua, H200, 2026-12-01). At 512 tokens (4 tile rows) it lost for all but q_proj, TinyLlama's gate/up
-- (176 such tiles) included, so those keep the 64 x 64 default.
function A.persist_first(k, dev)
  if not k.M or not k.N then return false end
  local rows = math.ceil(k.M / 128)
  return rows >= 8 and rows * math.ceil(k.N / 128) >= (dev.sm_count or 132)
end

-- A single linear (no dual, no RoPE stage) with fewer than 8 rows of 128 at the hint (so not persist_first) whose
-- 128 x 64 tiles, else 64 x 64 tiles, make one wave of 90-100% of the SMs: the persistent pipeline's lead tile
-- ({BM, BN}; the TMA store where the result is the one output, else the fragment epilogue with the residual
-- loaded ahead) on an 8-stage ring (050_use_tma). Measured against the 64 x 64 default (bench/gemm.lua --batches 1,
-- alone; `emmy run --bench`, in the Qwen3 layer, where the weights stream from HBM and the ring's depth decides;
-- H200, 2026-12-02, docs/performance.md "Thirteenth session"): Qwen3 q_proj 128 x 64 alone 6.2 against 7.5 µs, in
-- the layer 7.4 (8 stages) and 8.4 (4) against 9.9; o_proj 64 x 64 in the layer 9.2 (8) and 12.0 (4) against
-- 13.1, down_proj 11.8 (8) and 16.1 (4) against 17.2; TinyLlama o_proj 128 x 64 alone 11.3 against 14.3, down_proj
-- 29.9 against 31.5 (4 stages).
function A.persist_small(k, dev)
  if not k.M or not k.N or k.dual or k.stage or (k.siblings or 0) > 1 then return nil end
  local sms, rows = dev.sm_count or 132, math.ceil(k.M / 128)
  if rows >= 8 then return nil end
  -- (64 x 64 only with the fragment epilogue: the measured residual kernels; a plain result's 64 x 64 TMA-store tile
  -- was slower than the default, 8.6 against 7.6 µs for q_proj. 128 x 128 and 128 x 80: the one-wave tiles of
  -- Qwen3-4B's q (N 4096) and o / down (N 2560) at 512 tokens, the rules' note in docs/performance.md, forty-sixth
  -- session; 128 x 80 with a residual only, as cuBLAS's 80 x 128 there)
  for _, t in ipairs { { BM = 128, BN = 128 }, { BM = 128, BN = 64 }, { BM = 128, BN = 80, fragments = true },
      { BM = 64, BN = 64, fragments = true } } do
    local tiles = math.ceil(k.M / t.BM) * math.ceil(k.N / t.BN)
    if tiles >= 0.9 * sms and tiles <= sms and not (t.fragments and k.tma_store) then return t end
  end
  return nil
end

-- A one-wave single linear whose lead is a wide 128-row tile (atom.persist_small: 128 x 128, 128 x 80 — Qwen3-4B's q, o
-- and down at 512 tokens): RASTER=8 and a 6-stage ring lead it. Measured (H100, forty-sixth session, bench/gemm.lua
-- --cases qwen4b --batches 1 --torch --pins, each variant checked): q 128 x 128 TMA store 18.6 us (RASTER=1) -> 14.8
-- (eager 15.6); o 128 x 80 22.4 (RASTER=1, 8 stages) -> 19.9 (6 stages; eager 20.2); down 53.0 -> 46.3 (8 stages
-- 51.6; eager 47.2); the rules before (64 x 64, not persistent) 37.9 / 34.9 / 88.5.
function A.wide_one_wave(k, dev)
  local t = A.persist_small(k, dev)
  return t ~= nil and t.BM == 128 and t.BN ~= 64
end

-- A one-wave single linear (atom.persist_small) with a residual epilogue (not the TMA store) whose 128 x 128 tiles
-- split in two over K come to 90-100% of the SMs with 32 or more k-steps a part: there the persistent 128 x 128
-- tile with SPLIT_K=2 (a 2-CTA cluster a tile, its partial sums reduce-scattered by st.async) on a 4-stage ring
-- leads — half the L2 bytes a FLOP of the 128 x 64 tile, at the price of a 32 KB exchange a tile. Measured (H200,
-- twentieth session, bench/gemm.lua --pins): TinyLlama down_proj at 512 tokens (K 5632) 23.9 -> 22.4 us (torch
-- 21.9); o_proj (K 2048, 16 k-steps a part) lost, 10.9 -> 11.5, and Qwen3's down (32 such tiles) 10.9 -> 13.6.
function A.split2_lead(k, dev)
  if not A.persist_small(k, dev) or k.tma_store or not k.K then return false end
  local sms, tiles = dev.sm_count or 132, math.ceil(k.M / 128) * math.ceil(k.N / 128)
  return 2 * tiles >= 0.9 * sms and 2 * tiles <= sms and k.K / 128 >= 32
end

-- A one-wave single linear with a residual epilogue (not the TMA store) whose lead would be the 64 x 64 tile
-- (atom.persist_small: its 128 x 64 tiles come to under 90% of the SMs) and whose 128 x 64 tiles split in two over K
-- come to 90-100% of them with 16 or more k-steps a part: there the persistent 128 x 64 tile with SPLIT_K=2 (a 2-CTA
-- cluster a tile, the parts reduce-scattered, the fragment epilogue) on a 6-stage ring leads — 24 KB a k-step for
-- twice the 64 x 64 tile's FLOPs (16 KB), where each SM's feed bounds the K loop (docs/performance.md, fortieth
-- session). It lost while the split cluster's start and end cost ~3,000 cycles; with the relaxed start and no closing
-- barrier (forty-first session) it won. Measured (H100, forty-first session, bench/gemm.lua --cases qwen --batches 1
-- --torch --compile --pins, each variant checked): Qwen3 o_proj 8.16 -> 7.59 us (torch eager 7.9, compile 8.3),
-- down_proj 11.32 -> 9.84 (11.4, 11.4); 8 stages 7.67 / 10.78.
function A.split2_small(k, dev)
  local t = A.persist_small(k, dev)
  if not t or t.BM ~= 64 or k.tma_store or not k.K then return false end
  local sms, tiles = dev.sm_count or 132, math.ceil(k.M / 128) * math.ceil(k.N / 64)
  return 2 * tiles >= 0.9 * sms and 2 * tiles <= sms and k.K / 128 >= 16
end

-- A one-wave single linear (atom.persist_small) whose epilogue reads another tensor (a residual: not the TMA store)
-- and whose tile is not split (not atom.split2_lead nor atom.split2_small): its lead tile takes the staged epilogue
-- stored 16 bytes a thread (EPI_SMEM=5, the residual's 16-byte loads of a half issued at once) instead of the fragment
-- epilogue.
-- Measured (H200, twenty-second session, bench/gemm.lua --batches 1 --pins EPI_SMEM=5, each variant checked):
-- Qwen3 o_proj 64 x 64 8.07 -> 7.90 us, down_proj 10.80 -> 10.65, TinyLlama o_proj 128 x 64 10.89 -> 10.02 (torch
-- 10.2); the split TinyLlama down_proj lost (22.07 -> 24.26) and so did the 128 x 256 tiles at 4096 tokens (Qwen3
-- o 30.5 -> 35.3: the loads spill there, so they are not issued at once).
function A.small_staged(k, dev)
  local t = A.persist_small(k, dev)
  return t ~= nil and t.BN % 64 == 0 and not k.tma_store and not A.split2_lead(k, dev) and not A.split2_small(k, dev)
end

-- A one-wave single linear whose lead is the 64 x 64 tile with the staged 16-byte stores (atom.persist_small's 64-row
-- tile and atom.small_staged: Qwen3's o_proj and down_proj at 512 tokens): two consumer warpgroups dealt its k-steps
-- (WG_K=2) on a 12-stage ring lead it. Measured (H200, twenty-fourth session, docs/performance.md), Qwen3 o / down:
-- alone (bench/gemm.lua --pins) 8.0 / 10.8 us -> 7.4 / 9.8-10.0 at 8 stages, 7.9 / 10.6 at 12 (torch 7.7 / 9.3); in
-- the layer (emmy run … --bench, EMMY_KNOBS pins: the weights from HBM) 8.7 / 11.8 -> 8.4 / 12.0 at 8 stages, 8.2 /
-- 11.5 at 12, the layer 71.9 -> 72.0 / 71.4. Twelve stages for the program; 8 win alone.
function A.kgroup_lead(k, dev)
  local t = A.persist_small(k, dev)
  return t ~= nil and t.BM == 64 and A.small_staged(k, dev)
end

-- A RoPE projection whose head-local reads may come from the reading thread's accumulators (every shift a multiple
-- of 8, no per-head reduction, one linear or a dual pair): its persistent tiles take EPI_SMEM=0 first, and where
-- 128-row tiles fill the SMs (atom.persist_first) the 128 x 128 tile leads a dual pair, 128 x 256 one linear. Measured
-- at 4096 tokens (TinyLlama q+RoPE, batch 8 x 512, bench/gemm.lua --cases llama --batches 8, H200, 2026-12-02): 128 x
-- 128 EPI_SMEM=0 99.3 µs, 128 x 64 EPI_SMEM=0 117.0, against the staged 128 x 256 lead's 178.9 (torch eager 170.2);
-- since cos and sin are loaded ahead for one head of a wide tile (thirty-fifth session) 128 x 256 EPI_SMEM=0 58.1
-- against 128 x 128's 70.2 (the same run).
function A.rope_in_regs(k)
  return k.stage and (k.stage_step or 1) % 8 == 0 and (k.epilogue_reductions or 0) == 0 and ((k.siblings or 0) <= 1 or k.dual)
end

-- A RoPE projection of one linear whose head-local reads come from the thread's accumulators (atom.rope_in_regs)
-- and whose one output, [B, H, S, D], takes the heads store (k.tma_heads): its values staged and stored by TMA
-- (EPI_SMEM=7) lead its tiles. Measured (TinyLlama q+RoPE, H200, thirty-fifth
-- session, bench/gemm.lua --pins, each variant checked): at 512 tokens 128 x 64 12.32 -> 11.41 us alone (torch.compile
-- 10.3-11.4 across runs), 13.2 -> 12.8 in the layer's program (bench/ab.lua, EMMY_KNOBS pins); at 4096 tokens 128 x 256
-- 55.2 us against the 128 x 128 fragment epilogue's 70.7 and torch.compile's 59.5 in the same run (8 batches of 512:
-- no tile spans two). A tile that spans batches stores its later batches' rows by the threads (e1c46f0; correct on an
-- H100 in the thirty-sixth session: tests/gpu/run.sh heads7_batch4 rope256), so the lead holds at every batch count.
function A.rope_heads(k)
  return A.rope_in_regs(k) and k.tma_heads and not k.dual
end

-- A RoPE projection whose rotate_half reads stay in the reading thread's accumulators (k.stage_step a multiple of
-- 8, no per-head reduction; one linear or a dual pair) with a grid of one wave or less at the hint: the persistent
-- pipeline with the fragment epilogue (EPI_SMEM=0) on an 8-stage ring leads, 128 x 64 tiles where they fill 90-100%
-- of the SMs, else 64 x 64 (BN at least the head width). Measured in the TinyLlama layer at 512 tokens (H200,
-- 2026-12-02, docs/performance.md "Seventeenth session"): q 128 x 64 18.2 -> 15.2 µs alone, 18.4 -> 16.9 in the
-- program; k+v 64 x 64 16.2 -> 14.4, 16.4 -> 15.1; the layer 135.6 -> 132.5.
function A.rope_regs(k, dev)
  if not A.rope_in_regs(k) or not k.M or not k.N then return nil end
  local sms, bn = dev.sm_count or 132, math.max(64, k.stage)
  for _, t in ipairs { { BM = 128, BN = bn }, { BM = 64, BN = bn } } do
    local tiles = math.ceil(k.M / t.BM) * math.ceil(k.N / t.BN)
    if tiles <= sms and (t.BM == 64 or tiles >= 0.9 * sms) then return t end
  end
  return nil
end

-- A dual kernel whose 64 x 64 tile grid at the hint fills less than half the SMs (TinyLlama's k+v at 512 tokens:
-- 32 tiles): each SM's one block is bound by the bytes its ring has in flight, so the 8-stage ring leads (k+v with
-- RoPE 17.8 -> 16.8 µs alone, 18.3 -> 16.9 in the layer; H200, 2026-12-02, docs/performance.md "Sixteenth session")
function A.dual_sparse(k, dev)
  if not k.dual or not k.M or not k.N then return false end
  return math.ceil(k.M / 64) * math.ceil(k.N / 64) < 0.5 * (dev.sm_count or 132)
end

-- A dual kernel without a RoPE stage whose 64 x 64 tiles make one wave of 90-100% of the SMs (Qwen3's k+v at 512
-- tokens: 128 tiles): there the persistent pipeline's 64 x 64 tile (a producer warp, the results stored 16 bytes a
-- thread, EPI_SMEM=5) on a 6-stage ring leads, where the non-persistent 64 x 64 tile without a producer did. Returns
-- the tile ({BM, BN}) or nil. Measured (H200, twenty-fifth session, docs/performance.md): alone 8.4 -> 7.0 µs warm,
-- 9.5 -> 7.7 with the L2 flushed (8 stages 7.1 / 8.4; torch 8.6 / 10.1: bench/gemm.lua --cold --pins); in the layer
-- (emmy run … --bench, EMMY_KNOBS pins) 9.0 -> 7.9 (8 stages 8.2), the layer 70.5 -> 69.0.
function A.dual_one_wave(k, dev)
  if not k.dual or k.stage or not k.M or not k.N or A.persist_first(k, dev) then return nil end
  local sms, tiles = dev.sm_count or 132, math.ceil(k.M / 64) * math.ceil(k.N / 64)
  if tiles >= 0.9 * sms and tiles <= sms then return { BM = 64, BN = 64 } end
  return nil
end

-- The one-wave persistent dual (atom.dual_one_wave) over a deep K, 32 k-steps of 64 or more (Qwen3-4B's k+v at 512
-- tokens: K 2560, 128 tiles on 132 SMs): there the 64 x 64 tile in CLUSTER=2's pairs of tile rows sharing the two
-- weight tiles (B is two thirds of a dual k-step's bytes), with the fragment epilogue (EPI_SMEM=0) on an 8-stage ring
-- leads. Measured (H100, forty-ninth session, bench/gemm.lua --cases qwen4b --batches 1 --kernels k_linear_8ce62d
-- --torch --cold --pins, each variant checked): 15.4 µs (dual_one_wave's lead, unclustered EPI_SMEM=5 on 6 stages) ->
-- 12.8 warm, 16.4 -> 13.6 cold by reading (torch eager 14.5 / 15.9); 128 x 64 split in two over K 13.1; EPI_SMEM=0
-- alone 16.3. The tunes picked it (12.6 µs L2-warm). Qwen3-0.6B's k+v (K 1024, 16 k-steps) keeps dual_one_wave's lead,
-- measured there (its note); the threshold lies between the two.
function A.dual_one_wave_deep(k, dev)
  return A.dual_one_wave(k, dev) ~= nil and k.K ~= nil and k.K >= 32 * 64
end

-- A dual kernel whose persistent 128 x 128 tile leads (atom.persist_first: k+v and gate/up at 4096 tokens): there a
-- 4-stage ring and the staged epilogue stored 16 bytes a thread (EPI_SMEM=5) lead. Measured (H200, twenty-first
-- session, bench/gemm.lua --pins): Qwen3 k+v (its v written in attention's [B, H, S, D] layout) 36.7 us (3 stages,
-- fragment stores: 11,400 cycles a tile of epilogue) -> 35.6 (4 stages) -> 29.1 (4 stages, EPI_SMEM=5: 7,400);
-- gate/up 4 stages: Qwen3 105.2 -> 102.2, TinyLlama 325.8 -> 294.8.
function A.dual_persist(k, dev)
  return k.dual and A.persist_first(k, dev) and not k.stage
end

-- Merged siblings (MERGE_SIBLINGS=1: Qwen3's q/k/v side by side, N 4096) on the wgmma tier: the persistent 128 x 128
-- tile leads with the staged halves stored 16 bytes a thread (EPI_SMEM=5), in CLUSTER=2's pairs of tile rows sharing
-- B, on a 6-stage ring (050_use_tma.lua). Returns the lead's EPI_SMEM, or nil where the kernel is not merged siblings.
-- Measured against q and the k+v dual apart (H100, forty-second session, bench/gemm.lua --pins, emmy run --bench): at
-- 512 tokens alone 11.7 µs against 5.8 + 7.6-7.8 (6 stages 12.0; 128 x 64, 8 stages 13.3; 64 x 128 14.8; 128 x 256
-- 17.2; the non-persistent 64 x 64 of the rules before 22.2), in the layer 12.5 against 6.4 + 8.4, the layer 70.3 ->
-- 68.3; at 4096 tokens the fragment epilogue's best 74.0 against 24.9 + 27.5. The lead since the forty-fourth session
-- (H100, docs/performance.md): a fragment epilogue took 6,400 cycles of a 19,600-cycle tile (stamps); EPI_SMEM=5 alone
-- 9.7 µs against 11.8, with CLUSTER=2 9.1, and with 6 stages in the layer 10.5 against 12.5 (the layer 68.1 -> 66.2).
function A.merged_lead(k, dev)
  if not ((k.siblings or 0) > 1 and not k.dual and not k.stage) then return nil end
  return 5
end

-- A contraction whose epilogue reads nothing but its own accumulator (no residual or other input, one
-- accumulator): the staged epilogue (EPI_SMEM=1) was the faster one there.
function A.plain_epilogue(k)
  return not k.dual and (k.extra_inputs or 0) == 0
end

return A
