-- 050_use_tma.lua — operand transport for the warp tier: cp.async row copies, and TMA (cp.async.bulk.tensor
-- into 128-byte-swizzled shared memory on an mbarrier).
local atom = use "_atom"

return {
  -- cp.async: 16-byte asynchronous copies of operand rows into a STAGES-deep ring of shared-memory tiles,
  -- for the warp tier, when both operands are kernel inputs read as they are (no view, no folded prologue).
  { name = "cp_async", family = "COPY", kinds = { "contraction" }, knobs = { ASYNC = 0, STAGES = 1 },
    gate = function(k, dev) return atom.copyable(k) end,
    fork = function(k, dev)
      -- under TMA (sm_90) the wgmma 64 x 64 x 64 tile (the first tile there) was best with a 4-stage ring for
      -- every projection but gate/up (3 stages, within 1%): bench/run.sh wgmma, seq_len 512, H200
      -- Deeper rings (6, 8: the wgmma tier on TMA tiles only, the resource check says so) come last, so no
      -- default changes: cuBLAS's kernels for these shapes are named nvjet_sm90_tst_64x64_64x13 (64x64 tiles, BK 64,
      -- 13 stages by the name), and emmy's down_proj spends ~650 cycles a k-step against ~256 of wgmma work (H200,
      -- 2026-11-30, docs/performance.md "Sixth session"); not yet measured in emmy.
      if atom.tma(k, dev) then
        local o = { { ASYNC = 1, STAGES = 4 }, { ASYNC = 1, STAGES = 3 }, { ASYNC = 1, STAGES = 2 }, { ASYNC = 0, STAGES = 1 },
          { ASYNC = 1, STAGES = 1 }, { ASYNC = 1, STAGES = 6 }, { ASYNC = 1, STAGES = 8 }, { ASYNC = 1, STAGES = 12 } }
        -- (the option of n stages moved to the front, the others keeping their order)
        local function first(n)
          local at = 1
          for i, x in ipairs(o) do if x.STAGES == n and x.ASYNC == 1 then at = i break end end
          local s = o[at]
          for i = at, 2, -1 do o[i] = o[i - 1] end
          o[1] = s
        end
        -- A dual kernel of more than two waves (atom.dual_waves: gate/up) takes 3 stages first: three blocks an SM
        -- against two (18.0 us against 25.7 at RASTER=8, seq_len 512, H200, 2026-11-30).
        -- (not the persistent 128 x 128 dual lead, atom.dual_persist: 4 stages, its note)
        if atom.dual_waves(k, dev) and not atom.dual_persist(k, dev) then o[1], o[2] = o[2], o[1] end
        -- (the wide persistent dual lead, atom.dual_wide_lead: 6 stages, 192 KB of its 32 KB stages in flight)
        if atom.dual_wide_lead(k, dev) then first(6) end
        -- The persistent lead of a one-wave grid (atom.persist_small), and a dual grid of less than half the SMs
        -- (atom.dual_sparse, its note), take 8 stages first: in the program its
        -- weights stream from HBM, and the deeper ring was 1-4 µs faster there (Qwen3 layer 0, 512 tokens: q 7.4
        -- against 8.4, o 9.2 against 12.0, down 11.8 against 16.1; H200, 2026-12-02)
        if atom.persist_small(k, dev) or atom.dual_sparse(k, dev) or atom.rope_regs(k, dev) then first(8) end
        -- (the wide one-wave leads take 6, atom.wide_one_wave: 8 stages of 128 x 128 do not fit, and 128 x 80's down
        -- was 46.3 us at 6 against 51.6 at 8)
        if atom.wide_one_wave(k, dev) then first(6) end
        -- The two-warpgroup 64 x 64 lead (atom.kgroup_lead) takes 12: in the program 0.3-0.5 us faster than 8 (its
        -- note)
        if atom.kgroup_lead(k, dev) then first(12) end
        -- The split 128 x 128 lead (atom.split2_lead; 8 stages of 32 KB do not fit) takes 6 before 4: TinyLlama's
        -- down_proj at 512 tokens 22.7 -> 22.1 us alone, 29.4 -> 25.3 with the L2 flushed (its weights from HBM, as
        -- in the program; torch 21.7 / 24.8; H200, bench/gemm.lua --batches 1 --cold, twenty-third session)
        if atom.split2_lead(k, dev) then first(6) end
        -- The split 128 x 64 lead (atom.split2_small) takes 6 too: Qwen3's o / down at 512 tokens 7.59 / 9.84 us
        -- against 7.67 / 10.78 at 8 (H100, forty-first session, its note)
        if atom.split2_small(k, dev) then first(6) end
        -- The one-wave persistent dual lead (atom.dual_one_wave: Qwen3's k+v at 512 tokens) takes 6: in the program
        -- 7.9 µs against 8.2 at 8 stages (its note)
        if atom.dual_one_wave(k, dev) then first(6) end
        -- Merged siblings' lead (atom.merged_lead) takes 6: in the layer 10.5 µs against 11.0 at 4 (CLUSTER=2 with
        -- EPI_SMEM=5; H100, forty-fourth session)
        if atom.merged_lead(k, dev) then first(6) end
        -- (over a deep K, atom.dual_one_wave_deep, 8: its note)
        if atom.dual_one_wave_deep(k, dev) then first(8) end
        return o
      end
      -- three stages first: measured 24.2 us against 107.5 us for element-wise fills (q_proj, seq_len 512, H200).
      -- The ring is dynamic shared memory, so deep rings of large tiles fit (the resource check caps it at the
      -- opt-in limit).
      -- Four stages of BK=64 tiles lead the exhaustive sweep (q_proj 18.3 us against 24.4 us for 3 x 32).
      return { { ASYNC = 1, STAGES = 4 }, { ASYNC = 1, STAGES = 3 }, { ASYNC = 1, STAGES = 2 }, { ASYNC = 0, STAGES = 1 },
        { ASYNC = 1, STAGES = 1 } }
    end },
  -- TMA: the ring's tiles staged by cp.async.bulk.tensor (one thread per stage, on an mbarrier) in the 128-byte
  -- swizzle, the tensor maps encoded per launch with the runtime seq_len (rows past M arrive as zeros). The
  -- hardware limits are the legality table's (src/ctr_legal.c, the resource check's and the emitter's): BK=64
  -- (128-byte box rows), box rows BM, BN <= 256; 16-byte aligned rows (K a multiple of 8) and rank 2 (leading dims
  -- fold into M) are the emitter's.
  { name = "use_tma", family = "STAGE", kinds = { "contraction" }, knobs = { TMA = 0 },
    gate = function(k, dev) return atom.tma(k, dev) end,
    -- TMA first: measured faster than the cp.async ring for every Qwen3 projection (bench/run.sh --tiles, seq_len
    -- 512, H200: q_proj 13.4 us against 18.2 us, down 25.5 against 33.5, gate/up dual 24.8 against 35.6)
    -- TMA=1 lays the tiles out itself (128-byte swizzle), so it sets PAD_SMEM=0
    fork = function(k, dev) return { { TMA = 1, PAD_SMEM = 0 }, { TMA = 0 } } end },
}
