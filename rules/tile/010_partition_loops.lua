-- 010_partition_loops.lua — which tier each kernel may use, and the knob options (TILE / REDUCE / WORK) of
-- each tier. Gates return ok, reason; forks return the candidate option tables of their family.
local atom = use "_atom"

-- EPI_SMEM=e added to the epilogues epis, first where first holds (then it is the lead: returned), else last (lead
-- returned unchanged).
local function offer_epi(epis, e, first, lead)
  if not first then
    epis[#epis + 1] = e
    return lead
  end
  table.insert(epis, 1, e)
  return e
end

-- The flash_wgmma fork's lead (moved to the front of out): by head dim, the query tiles at the hint, the key length,
-- causal or not, and whether an attention mask is read.
local function flash_wgmma_lead(out, k, dev, bqs)
  -- the lead, from a sweep of 25 candidates a case (H200, eleventh session, bench/attention.lua --layout bhsd
  -- --limit 24; docs/performance.md): head dim 64, 128-key tiles two CTAs an SM (b1 s512 causal 9.0 us against
  -- 10.9 for the order above, s2048 54.2 against 66.2, b8 47.3 against 57.9); head dim 128 with query tiles
  -- for every SM, 128-key tiles and the staged output (b1 s2048 non-causal 64.5 against 74.8, causal 43.7
  -- against 45.2, b8 non-causal 53.0 against 55.9); with few query tiles (b1 s512) the order above led up to the
  -- fifty-first session (below).
  -- Both leads store their output in 16-byte chunks (OSMEM=2), which beat OSMEM=1 (head dim 128) and 0 (64) on
  -- all eight BKV=128 cases of a bhsd sweep (H200, fourteenth session): b8 s512 d128 causal 43.5 -> 39.1 us,
  -- non-causal 51.4 -> 47.3, b1 s2048 d128 42.4 -> 39.8 and 63.1 -> 59.5, d64 b1 s512 non-causal 8.9 -> 8.0
  local items64 = math.ceil((type(k.L) == "number" and k.L or 0) / 64) * (k.heads or 1) * (k.batch or 1)
  local long = type(k.L) == "number" and not k.causal and math.ceil(k.L / 128) >= 32
  if k.E == 64 then
    -- three CTAs an SM on 64-key tiles where there are three query tiles an SM or more and items are short
    -- (each CTA's prologue and epilogue are a large share of its few key tiles; a third CTA hides them): b8 s512
    -- causal 44.1 -> 36.4 us (torch 38.5), b1 s2048 causal 51.7 -> 50.5; non-causal b8 s512 persistent 53.5 ->
    -- 47.7 (47.1); b1 s512 (256 tiles) lost 7.2 -> 7.9, b1 s8192 causal 617 -> 665, b1 s2048 non-causal 82.1 ->
    -- 87.5 (H200, twenty-ninth session, bench/attention.lua --pins)
    -- (not with an attention mask — the whole model's SDPA, non-causal with its causal and padding mask read per
    -- score: MINB=3 with a mask is correct there (every k_sdpa of TinyLlama's padded whole model at 513 tokens,
    -- batch 4, matched alone and in order, H200, thirtieth session) but not timed, and spills, NVRTC 13.0: 20 bytes)
    local short = type(k.L) == "number" and k.L <= (k.causal and 2048 or 512)
    if short and not k.masked and items64 >= 3 * (dev.sm_count or 132) then
      if k.causal then
        atom.lead(out, { BQ = 64, BKV = 64, KVST = 3, KVSPLIT = 1, MINB = 3, QPACK = 0, OSMEM = 2, OTMA = 1 })
      else
        atom.lead(out, { BQ = 64, BKV = 64, KVST = 4, KVSPLIT = 1, MINB = 3, QPACK = 0, OSMEM = 4, APERSIST = 1, OTMA = 1 })
      end
    elseif long and not k.masked then
      -- non-causal over 32 key tiles or more: 128-row query tiles, two consumer warpgroups in ping-pong (each K/V
      -- tile read from L2 half as often as with 64-row tiles): b1 s8192 1246.4 -> 1196.3 us (cuDNN 1154.4) (H200,
      -- thirty-second session, bench/ab.lua twice; b1 s2048 lost, 79.2 -> 82.8)
      atom.lead(out, { BQ = 128, BKV = 128, KVST = 3, KVSPLIT = 1, MINB = 1, QPACK = 0, OSMEM = 2, OTMA = 1, PINGPONG = 1 })
    else
      local lead = { BQ = 64, BKV = 128, KVST = 3, KVSPLIT = 1, MINB = 2, QPACK = 0, OSMEM = 2, OTMA = 1 }
      -- persistent with O staged over the last K/V stage, non-causal over 512 keys up to 2048 with a wave of items:
      -- b1 s2048 79.2 -> 78.4 us (cuDNN 78.5), 81.5 -> 80.0 without the in-asm descriptor offsets (H200,
      -- thirty-second session, bench/ab.lua twice); at s8192 no clearer than the run's spread
      -- (not with an attention mask: not timed there)
      if type(k.L) == "number" and not k.causal and not k.masked and k.L > 512 and k.L <= 2048
         and items64 >= (dev.sm_count or 132) then
        lead.APERSIST, lead.OSMEM = 1, 4
      end
      atom.lead(out, lead)
    end
  elseif bqs[1] == 128 then
    -- with PINGPONG=1, which beat it on every such bhsd case of a sweep (H200, fifteenth session, non-causal:
    -- b8 s512 46.5 -> 43.6 us, b1 s2048 58.7 -> 56.6, b1 s8192 870.8 -> 822.0; sixteenth session, causal:
    -- b8 s512 37.9 -> 35.8, b1 s2048 39.4 -> 35.4, b1 s8192 454.6 -> 441.8)
    local lead = { BQ = 128, BKV = 128, KVST = 3, KVSPLIT = 1, MINB = 1, QPACK = 0, OSMEM = 2, PINGPONG = 1 }
    -- persistent (APERSIST=1) where an item is at most four key tiles and there are two items or more an SM
    -- (batch 8 at 512: each CTA's prologue and epilogue are a large share of its few key tiles): b8 s512 d128
    -- non-causal 43.7 -> 41.1 us, causal 36.2 -> 35.7; b1 s2048 causal lost (35.6 -> 36.5), s8192 non-causal
    -- too (825.3 -> 836.7) (H200, eighteenth session, bench/attention.lua --pins)
    local items = math.ceil((type(k.L) == "number" and k.L or 0) / 128) * (k.heads or 1) * (k.batch or 1)
    if type(k.L) == "number" and k.L <= 512 and items >= 2 * (dev.sm_count or 132) then lead.APERSIST = 1 end
    -- non-causal up to 2048 keys with a wave of items or more (b1 s2048: 256 items, 1.94 waves of CTAs without
    -- it): 56.7 -> 55.3 us and 56.9 -> 55.8, torch 55.8 / 56.0 (H200, twenty-ninth session, twice)
    -- (not with an attention mask: correct there — Qwen3's padded whole model at 513, batch 4, every k_sdpa matched,
    -- H200, thirtieth session — but not timed)
    if type(k.L) == "number" and not k.causal and not k.masked and k.L <= 2048 and items >= (dev.sm_count or 132) then lead.APERSIST = 1 end
    -- O staged over the warpgroup's last K/V stage so that Q is released after the last QK^T (OSMEM=4): b8 s512
    -- d128 causal 35.9 -> 33.8 us (torch 32.6); non-causal no faster (40.6 with OSMEM=2) (H200, nineteenth
    -- session, bench/attention.lua --pins "APERSIST=1,OSMEM=4;APERSIST=1,OSMEM=2") until the next item's Q was
    -- requested after its first K/V tile rather than after a stage the epilogue holds (twentieth session): causal
    -- 33.7 -> 31.1 (torch 32.5), non-causal 40.7 -> 36.1 (35.2)
    if lead.APERSIST == 1 then lead.OSMEM = 4 end
    if long then lead.RESCALE = 1 end
    atom.lead(out, lead)
  elseif k.E == 128 and not k.masked and not k.varlen then
    -- few query tiles (the order above, BQ 64, leads): 128-key tiles on a 3-deep ring, one consumer warpgroup, the
    -- 16-byte-store epilogue, instead of the order's first (64-key tiles, KVSPLIT=2, 4 stages, fragment stores) —
    -- faster on all 14 such cases of a sweep, 0.74-0.98 (H100, fifty-first session, bench/attention.lua --layout model
    -- --pins "BKV=128,KVSPLIT=1,KVST=3,OSMEM=2": b1 s512 causal 16/8 heads 8.1 -> 7.9 us, 32/8 (Qwen3-4B) 13.2 ->
    -- 11.7, non-causal 8.5 -> 7.1 and 16.1 -> 13.4; b1 s1024 16/8 17.0 -> 16.5 and 23.4 -> 21.9; b2 s512 16/8 13.2 ->
    -- 12.0 and 16.0 -> 13.5; b1 s256 16, 32 and 64 heads 0.74-0.93; bhsd b1 s512 16/8 8.3 -> 7.9 and 8.5 -> 7.1);
    -- the same without OSMEM=2 lost (1.00-1.08), the 10x-long tune search found it best for Qwen3's sdpa (12.7 us
    -- flushed against the tune's pick 13.2). Not with an attention mask or packed sequences: not timed there.
    atom.lead(out, { BQ = 64, BKV = 128, KVST = 3, KVSPLIT = 1, MINB = 1, QPACK = 0, OSMEM = 2 })
  end
end

-- The wgmma tier's tiles: BM 64, 128 by BN 64, 128, 256 (a dual's BN to 128), and the one-wave lead's BN where it is
-- none of these (atom.persist_small: 128 x 80), each also with WG_WAIT=0.
local function wgmma_tiles(k, dev)
  local out, bns = {}, { 64, 128, 256 }
  local small = atom.persist_small(k, dev)
  if small and small.BN ~= 64 and small.BN ~= 128 then bns[#bns + 1] = small.BN end
  for _, bm in ipairs { 64, 128 } do
    for _, bn in ipairs(bns) do
      if not (k.dual and bn > 128) then
        out[#out + 1] = { MMA = 1, WGMMA = 1, WG_WAIT = 1, BM = bm, BN = bn, BK = 64, WM = bm / 16, WN = 1, TM = 4, TN = 4,
          PAD_SMEM = 0 }
      end
    end
  end
  atom.also(out, "WG_WAIT", 0)
  return out
end

-- The CLUSTER=2 twins (the rule's note) of the first n tiles of out that wait on their wgmma and pair along N.
local function cluster_twins(out, n, k)
  if (k.siblings or 0) <= 1 or k.dual then
    for i = 1, n do
      local o = out[i]
      if o.WG_WAIT == 1 and k.N and math.ceil(k.N / o.BN) % 2 == 0 then out[#out + 1] = atom.with(o, "CLUSTER", 2) end
    end
  end
end

-- PRODUCER=1: one more warpgroup whose first lane issues the TMA loads on "empty" barriers, so the consumer
-- warpgroups never wait at a block barrier in the K loop (what CLUSTER=2 lacked, above; cuBLAS's and
-- CUTLASS's Hopper GEMMs are built this way). Offered last: correct on the H200 (tests/gpu/run.sh producer_*,
-- 2026-11-30) and within 3% of PRODUCER=0 on every Qwen3 projection at seq_len 512 (down 15.6 against 16.1 µs,
-- k+v 13.7 against 14.1; q, o, gate+up the same) — the L2 traffic of the 64×64 tiles, not the loads' issue,
-- sets their time (docs/performance.md, eighth session).
local function producer_twins(out, n, k)
  for i = 1, n do
    local o = out[i]
    if o.WG_WAIT == 1 and not k.stage then out[#out + 1] = atom.with(o, "PRODUCER", 1) end
  end
end

-- A persistent tile o's epilogues (EPI_SMEM values, in order) and the one that leads it.
local function persist_epilogues(k, o)
  local plain = atom.plain_epilogue(k)
  -- (EPI_SMEM=2, the staged loop unrolled: 4096³ 202.6 µs against 207.8 for EPI_SMEM=1, no help where a residual
  -- is read — down at 4096 tokens 93.9 against 53.8 in fragments; H200, 2026-12-01 — offered after both)
  -- EPI_SMEM=3 stages the tile in two column halves (32 KB at 128 x 256, against 66 KB), so 128 x 256 fits a
  -- 4-stage ring beside it: the ring's depth bounds 4096³ (2 stages 307.7 µs, 3 stages 207.8; docs/performance.md,
  -- ninth session). EPI_SMEM=4 stores each half by TMA where the result is the kernel's one output
  -- (k.tma_store), so the consumers issue no global stores: 4096³ 178.5 µs at 128 x 256 and 4 stages
  -- against 203.1 for EPI_SMEM=2 at 3 and 208.1 for EPI_SMEM=3 at 4 (cuBLAS 175.9; the clock marks put
  -- the epilogue at 2.5 µs a tile against 10.5; H200, docs/performance.md, tenth session): first where it
  -- applies. EPI_SMEM=3 alone is no faster than EPI_SMEM=2: offered last.
  local epis = plain and { 1, 0, 2 } or { 0, 1, 2 }
  local lead_epi = plain and 1 or 0
  if k.stage then
    -- a head-local epilogue (RoPE on a Llama q/k projection) reads the tile staged whole: EPI_SMEM 1, 2.
    -- Correct on the H200 (tests/gpu/run.sh persist_rope_*) and slower than the 64 x 64 default in the
    -- TinyLlama layer at 512 tokens (q 128 x 64, 8 stages: 26.0 us against 18.6; k+v 64 x 64: 24.7 against
    -- 17.9, with SPLIT_K=2 24.0; 2026-12-02): one tile a CTA, so nothing hides the epilogue. Offered last.
    -- EPI_SMEM=0 reads the other columns from the thread's own fragments (every shift a multiple of 8;
    -- the resource check refuses it elsewhere): first (atom.rope_in_regs, atom.rope_regs: their notes)
    epis, lead_epi = { 1, 2, 0 }, 1
    if atom.rope_in_regs(k) then epis, lead_epi = { 0, 1, 2 }, 0 end
    -- EPI_SMEM=7 into heads (k.tma_heads: the [B, H, S, D] output stored by TMA, a map of its own dims): RoPE
    -- from the fragments, its values staged and stored as the residual kernels' 7 (TinyLlama's q+RoPE at 4096
    -- tokens, 128 x 128 fragments, 70.7 us against o's 56.5 at 128 x 256 with 7 and torch.compile's 55.5;
    -- H100, thirty-third session). Written without a GPU run: offered after them
    -- — since then correct (H200 at one batch, H100 at 2-8) and the lead (atom.rope_heads: its note)
    if atom.rope_in_regs(k) and k.tma_heads and o.BN % 64 == 0 then lead_epi = offer_epi(epis, 7, atom.rope_heads(k), lead_epi) end
  elseif o.BN % 128 == 0 or o.BN == 64 then
    if k.tma_store and o.BN % 128 == 0 then
      table.insert(epis, 1, 4)
      lead_epi = 4
    elseif k.tma_store then
      -- (BN = 64: the tile's one panel staged whole; written without a GPU run, 2026-12-02: offered last. The
      -- clock marks put q's 128 x 64 fragment epilogue at 6,600 of 16,700 cycles a CTA at 512 tokens)
      epis[#epis + 1] = 4
    end
    -- EPI_SMEM=5: as 3, each half stored 16 bytes a thread, whatever the outputs' layout (2026-12-03);
    -- 6: as 5 with the tile's stores in the next tile's K loop (written without a GPU run: offered last)
    epis[#epis + 1] = 3
    epis[#epis + 1] = 5
    epis[#epis + 1] = 6
    -- 7: the fragments' fused values (a residual added) staged and stored by TMA, where the one output has the
    -- result's shape and is not the plain result (4 is). First at BN 128 and 256: at 4096 tokens the 128 x 256
    -- residual kernels, 4 stages, against the fragment stores (EPI_SMEM=0): Qwen3 o 29.7 -> 26.7 us, down 40.1
    -- -> 37.9, TinyLlama o 58.6 -> 55.2, down 132.1 -> 128.4 (torch 30.4, 40.4, 56.8, 129.0; H200, bench/gemm.lua
    -- --batches 8 --pins EPI_SMEM=7, twenty-third session); the epilogue 11,800 -> 6,700 cycles a tile. Last at
    -- BN 64 (the one-wave 512-token tiles: in the program 9.0 us against 8.7 for EPI_SMEM=5 on Qwen3's o)
    -- (a heads view with no head-local epilogue, a projection under VIEW_OUT=1 without RoPE, the emitter takes as
    -- well (k.tma_heads), but no GPU has run it: not offered)
    if k.tma_fused and not k.tma_store and not k.tma_heads then lead_epi = offer_epi(epis, 7, o.BN % 128 == 0, lead_epi) end
  end
  -- a dual kernel's results stored 16 bytes a thread (EPI_SMEM=5) lead its persistent tiles: k+v at 4096
  -- tokens 35.6 -> 29.1 us, TinyLlama's wide gate/up at 512 tokens 44.6 -> 42.0 (atom.dual_persist's note)
  if k.dual and not k.stage and o.BN % 64 == 0 then
    local e5 = { 5 }
    for _, e in ipairs(epis) do if e ~= 5 then e5[#e5 + 1] = e end end
    epis, lead_epi = e5, 5
  end
  return epis, lead_epi
end

-- The persistent twins (PRODUCER=1, PERSIST=1) of the first n tiles of out, with their epilogues: persist, and lead
-- (the tiles that lead the kernel).
-- PERSIST=1: the persistent warp-specialized pipeline (src/emit_gemm_ws.c): the producer warpgroup hands its
-- registers to the consumers (setmaxnreg 40 / 232), and each CTA loops over output tiles in grouped order
-- (RASTER tile rows a group), so a 128 x 256 tile's 64 x 256 accumulator a warpgroup fits and the next tile's
-- loads overlap this tile's epilogue — CUTLASS's sm90 cooperative kernel is built this way. EPI_SMEM=1 stages
-- each tile's results in shared memory and stores them coalesced. Measured (bench/gemm.lua, H200,
-- 2026-12-01, docs/performance.md "Ninth session"): 4096³ 207.8 µs against 407.3 for the 64 x 64 default
-- (cuBLAS 175.3); at 4096 tokens (Qwen3 layer 0, batch 8) q 43.9 against 69.5, k+v 53.8 against 62.6,
-- o 42.4 against 61.8, gate/up 111.9 against 132.1, down 53.3 against 84.0. At 512 tokens only q_proj
-- gains (9.5 against 11.3, 128 x 64). EPI_SMEM=1 is the faster epilogue for a plain result (q at 4096
-- tokens: 43.9 against 56.5; 4096³: 207.8 against 222.1) and the slower one where the epilogue reads
-- another tensor (down: 92.2 against 53.3) or combines two accumulators (gate/up 133.9 against 111.9).
-- First where at least 8 rows of 128 x 128 tiles at the hint fill every SM (atom.persist_first): 128 x 256
-- (128 x 128 for a dual kernel), the measured best; last elsewhere.
-- Merged siblings (atom.merged_lead): the staged halves stored by the threads (EPI_SMEM=5), the fragment epilogue and
-- EPI_SMEM=3, the 128 x 128 tile with EPI_SMEM=5 first (order_tiles puts its CLUSTER=2 twin before it).
local function persist_tiles(k, dev, out, n)
  local persist, lead = {}, {}
  local e0 = atom.merged_lead(k, dev)
  for i = 1, n do
    local o = out[i]
    if o.WG_WAIT == 1 and e0 then
      local p = atom.with(atom.with(o, "PRODUCER", 1), "PERSIST", 1)
      for _, e in ipairs(e0 == 5 and { 5, 0, 3 } or { 0, 5, 3 }) do
        local q = atom.with(p, "EPI_SMEM", e)
        if o.BM == 128 and o.BN == 128 and e == e0 then lead[#lead + 1] = q else persist[#persist + 1] = q end
      end
    elseif o.WG_WAIT == 1 and ((k.siblings or 0) <= 1 or k.dual) and not (k.stage and (k.epilogue_reductions or 0) > 0) then
      local p = atom.with(atom.with(o, "PRODUCER", 1), "PERSIST", 1)
      local epis, lead_epi = persist_epilogues(k, o)
      local small = atom.persist_small(k, dev) or atom.rope_regs(k, dev) or atom.dual_one_wave(k, dev)
      -- (atom.split2_lead: the 128 x 128 tile, split over K by the SPLIT rule, with the fragment epilogue)
      if atom.split2_lead(k, dev) then small = { BM = 128, BN = 128 } end
      -- (atom.split2_small: the 128 x 64 tile, split over K by the SPLIT rule, with the fragment epilogue)
      if atom.split2_small(k, dev) then small = { BM = 128, BN = 64 } end
      for _, e in ipairs(epis) do
        local q = atom.with(p, "EPI_SMEM", e)
        local first = o.BM == 128 and o.BN == (k.dual and 128 or 256) and e == lead_epi
        -- (atom.persist_small: its tile, the TMA store, the staged 16-byte stores (atom.small_staged) or the
        -- fragment epilogue)
        if small then
          first = o.BM == small.BM and o.BN == small.BN and o.WM == small.BM / 16 and o.WN == 1 and
            e == ((k.stage or k.dual) and lead_epi or k.tma_store and 4 or atom.small_staged(k, dev) and 5 or 0)
        end
        if first then lead[#lead + 1] = q else persist[#persist + 1] = q end
      end
    end
  end
  return persist, lead
end

-- WG_K=2: a 64-row tile's k-steps dealt to two consumer warpgroups (cuBLAS's 64 x 64 kernels at 512 tokens
-- have two); the staged epilogues only (EPI_SMEM 1-5: nothing of the epilogue loaded during the K loop). First
-- for the one-wave 64 x 64 lead with the staged 16-byte stores (atom.kgroup_lead, its note: Qwen3's o and down
-- at 512 tokens), after every persistent tile elsewhere; alone and in a pair.
local function kgroup_twins(k, dev, lead, persist)
  local n, twins = #persist, {}
  local function kg(q) return q.BM == 64 and q.EPI_SMEM >= 1 and q.EPI_SMEM <= 5 end
  for _, q in ipairs(lead) do if kg(q) then twins[#twins + 1] = atom.with(q, "WG_K", 2) end end
  if atom.kgroup_lead(k, dev) then
    for _, q in ipairs(lead) do twins[#twins + 1] = q end
    lead = twins
  else
    for _, q in ipairs(twins) do persist[#persist + 1] = q end
  end
  for i = 1, n do
    if kg(persist[i]) then persist[#persist + 1] = atom.with(persist[i], "WG_K", 2) end
  end
  return lead
end

-- out ordered: the leading persistent tiles, then the rest (first where persistent tiles fill the SMs, else after
-- the plain tiles), then every persistent tile's CLUSTER=2 twin and their PAIR_A=1 twins.
-- CLUSTER=2 with PERSIST=1: CTA pairs on neighbouring tile rows share the B tile, each loading half of it and
-- multicasting it to both (B's L2 reads halved). Correct on the H200 (tests/gpu/run.sh persist_cluster_*) and
-- 2-5% slower than unclustered at 128 x 256 (4096³ 208.6 against 202.6 µs; q at 4096 tokens 45.2 against
-- 43.4; 2026-12-01): L2 bandwidth does not bound these tiles. Offered last.
-- PAIR_A=1: the pair on neighbouring tile columns shares A instead (each loads half its rows): A is two thirds
-- of a 128 x 64 tile's bytes, and cuBLAS's q_proj kernel is a 1x2 cluster; written without a GPU run
-- (2026-12-02), offered after the B-sharing pairs.
local function order_tiles(k, dev, out, lead, persist)
  local clustered = {}
  for _, q in ipairs(lead) do clustered[#clustered + 1] = atom.with(q, "CLUSTER", 2) end
  for _, q in ipairs(persist) do clustered[#clustered + 1] = atom.with(q, "CLUSTER", 2) end
  do
    local n = #clustered
    for i = 1, n do clustered[#clustered + 1] = atom.with(clustered[i], "PAIR_A", 1) end
  end
  if atom.persist_first(k, dev) or atom.persist_small(k, dev) or atom.rope_regs(k, dev) or atom.dual_one_wave(k, dev) or
      atom.merged_lead(k, dev) then
    local rest = out
    out = lead
    for _, q in ipairs(persist) do out[#out + 1] = q end
    for _, o in ipairs(rest) do out[#out + 1] = o end
    -- (merged siblings: the lead's pair of tile rows sharing B first, atom.merged_lead's note)
    if atom.merged_lead(k, dev) then
      local first, later = {}, {}
      for i, q in ipairs(clustered) do if i <= #lead then first[#first + 1] = q else later[#later + 1] = q end end
      for _, q in ipairs(out) do first[#first + 1] = q end
      out, clustered = first, later
    end
  else
    for _, q in ipairs(lead) do out[#out + 1] = q end
    for _, q in ipairs(persist) do out[#out + 1] = q end
  end
  for _, q in ipairs(clustered) do out[#out + 1] = q end
  return out
end

-- WG_PP=1: the two consumer warpgroups take alternate 64-row tiles, their K loops in turn, so one's epilogue runs
-- under the other's K loop (CUTLASS's ping-pong; the 64-row tiles with the fragment epilogue). Correct and slower
-- than every lead it was pinned over (H100, thirty-sixth session: 1.14-1.75x at 512 tokens, 1.2-2.2x against the
-- 128 x 256 cooperative tiles at 4096): the twin of every such candidate, offered after them
local function pingpong_twins(out)
  local n = #out
  for i = 1, n do
    local q = out[i]
    if q.PERSIST == 1 and q.BM == 64 and (q.EPI_SMEM or 0) == 0 and (q.WG_K or 1) == 1 and (q.CLUSTER or 1) == 1 then
      out[#out + 1] = atom.with(q, "WG_PP", 1)
    end
  end
end

-- DUAL_WIDE=1 (a dual kernel): its two weight tiles side by side in each stage, one wgmma of N = 2·BN a k16 step,
-- so the A tile is read from shared memory once instead of twice (a 64 x 64 dual step reads 8 KB a warpgroup
-- for 32 cycles of wgmma work at full rate: shared memory's 128 bytes a cycle). Written without a GPU run
-- (2026-12-03): every candidate's twin, offered after them.
local function dual_wide_twins(out, k, dev)
  local n = #out
  for i = 1, n do out[#out + 1] = atom.with(out[i], "DUAL_WIDE", 1) end
  -- (atom.dual_wide_lead: the persistent 128 x 64 wide dual first)
  if atom.dual_wide_lead(k, dev) then
    atom.lead(out, { PERSIST = 1, BM = 128, BN = 64, WM = 8, WN = 1, EPI_SMEM = 5, DUAL_WIDE = 1 })
  elseif atom.dual_waves(k, dev) and not atom.dual_persist(k, dev) then
    -- (the lead's own wide twin first for the other duals of more than two waves: Qwen3's gate/up at 512
    -- tokens, the non-persistent 64 x 64 tile, 12.5 -> 12.3 µs alone, 13.6 -> 13.3 in the layer, the layer
    -- 68.9 -> 68.7; H200, twenty-fifth session, EMMY_KNOBS=k_linear_silu:DUAL_WIDE=1 ./emmy run … --bench)
    atom.lead(out, atom.with(out[1], "DUAL_WIDE", 1))
  end
end

return {
  -- The Hopper warpgroup tier: wgmma.mma_async m64nBNk16 reading both operands from the TMA-staged,
  -- 128-byte-swizzled tiles through shared-memory descriptors; a warpgroup (4 warps) per 64 rows of the tile.
  -- Offered first wherever its gate passes (sm_90, TMA-eligible operands): the best variant of every Qwen3
  -- projection in a knob sweep (bench/run.sh wgmma, seq_len 512, H200) was a wgmma tile, 64 x 64 x 64 with one
  -- warpgroup: q_proj 12.1 us against 13.2 us for the best mma.sync tile, o_proj 14.5 against 18.6, down 19.2
  -- against 25.6, gate/up dual 21.8 against 24.7; the whole layer 125.3 us against 164.6 us.
  -- WG_WAIT=1 keeps one wgmma group in flight across the k-step boundary (wait_group 1, the stage of the
  -- step before refilled after it retires), offered first: every wgmma tile of q_proj and down timed with both
  -- (bench/gaps.sh, seq_len 512, H200, 2026-11-30) was fastest with WG_WAIT=1 at 64 x 64 x 64, 4 stages:
  -- q_proj 11.5 us against 12.2, down 15.1 against 18.5; the tunes' picks had it for 6 of 7 projections.
  -- CLUSTER=2 pairs neighbouring CTAs along N in a thread-block cluster: they share the A tile, each loads half
  -- of its rows and multicasts them to both (cuBLAS's q_proj kernel is nvjet_sm90_tst_128x64_64x8_1x2, a 1x2
  -- cluster). Why: q_proj at seq_len 512 reads 50.7 MB through L2 against cuBLAS's 32.3 MB, both at 42% of L2
  -- throughput, and its time is in the same ratio (11.3 us against 7.0; ncu, H200, 2026-11-30, docs/performance.md
  -- "Seventh session"). Measured the same day (bench/kernels.lua --tiles with EMMY_CLUSTER=2 / =1, seq_len 512):
  -- correct everywhere, it cuts down's L2 bytes by a quarter (75.9 MB against 100 MB) but is slower for every
  -- projection (q_proj 14.2 us against 12.3, k/v 16.2 against 13.9, o 17.3 against 12.6, down 24.8 against 16.0,
  -- gate/up 24.3 against 22.0): one warpgroup both consumes and produces, so each refill waits for the peer's
  -- release in the main loop. Offered last, after every unclustered tile; a producer warp is the next step.
  { name = "wgmma_tier", family = "TILE", kinds = { "contraction" }, knobs = { WGMMA = 0, WG_WAIT = 0, CLUSTER = 1, PRODUCER = 0, PERSIST = 0, EPI_SMEM = 0, PAIR_A = 0, DUAL_WIDE = 0, WG_K = 1, WG_PP = 0 },
    gate = function(k, dev)
      local ok, why = atom.tma(k, dev)
      if not ok then return false, "wgmma reads TMA-staged tiles: " .. why end
      return true, ("wgmma.mma_async m64nNk16 %s from swizzled shared memory"):format(k.dtype) .. atom.epilogue_note(k)
    end,
    fork = function(k, dev)
      local out = wgmma_tiles(k, dev)
      local n = #out
      cluster_twins(out, n, k)
      producer_twins(out, n, k)
      local persist, lead = persist_tiles(k, dev, out, n)
      lead = kgroup_twins(k, dev, lead, persist)
      out = order_tiles(k, dev, out, lead, persist)
      pingpong_twins(out)
      if k.dual then dual_wide_twins(out, k, dev) end
      -- (atom.dual_one_wave_deep: the persistent 64 x 64 pairs sharing B with the fragment epilogue first)
      if atom.dual_one_wave_deep(k, dev) then
        -- (the first such: its PAIR_A=1 and DUAL_WIDE=1 twins come later in out)
        atom.lead(out, { PERSIST = 1, BM = 64, BN = 64, WM = 4, WN = 1, EPI_SMEM = 0, CLUSTER = 2 })
      end
      return out
    end },

  -- The tensor-core warp tier: WM x WN warps, each a (BM/WM) x (BN/WN) tile of mma.sync m16n8k16 (bf16/f16
  -- operands, f32 accumulation) fed by ldmatrix from padded shared-memory tiles. A symbolic M, a fused
  -- residual or a folded RMSNorm are not reasons to refuse: tiles are masked and the operand loads and the
  -- epilogue are the same as the scalar tier's.
  { name = "warp_tier", family = "TILE", kinds = { "contraction" }, knobs = { MMA = 0, WM = 2, WN = 2, PAD_SMEM = 8 },
    gate = function(k, dev)
      if not atom.is_half(k.dtype) then return false, ("operand dtype %s (mma.sync needs bf16/f16)"):format(k.dtype) end
      if (dev.cc_major or 0) < 8 then return false, ("compute capability %s has no bf16 mma.sync"):format(dev.cc) end
      return true, ("mma.sync m16n8k16 %s, K=%d, M%s"):format(k.dtype, k.K, k.M_symbolic and " symbolic (masked)" or "")
        .. atom.epilogue_note(k)
    end,
    fork = function(k, dev)
      local out = {}
      for _, bm in ipairs { 64, 128 } do
        for _, bn in ipairs { 64, 128 } do
          -- BK=64 first: the best tile of every Qwen3 projection in an exhaustive sweep (bench/run.sh --tiles,
          -- seq_len 512, H200) was 64 x 64 x 64, 4 or 8 warps, a 3-4 stage ring
          for _, bk in ipairs { 64, 32 } do
            for _, wm in ipairs { 2, 1, 4 } do
              for _, wn in ipairs { 2, 1, 4 } do
                local w = wm * wn
                if w >= 2 and w <= 8 and bm % (16 * wm) == 0 and bn % (16 * wn) == 0 then
                  out[#out + 1] = { MMA = 1, BM = bm, BN = bn, BK = bk, WM = wm, WN = wn, TM = 4, TN = 4, PAD_SMEM = 8 }
                end
              end
            end
          end
        end
      end
      -- under TMA (sm_90) the 8-warp 64 x 64 x 64 tile (WM=2, WN=4) leads: best on average over the five
      -- Qwen3 projections in an exhaustive TMA sweep (H200, seq_len 512); cp.async keeps 4 warps first
      if atom.tma(k, dev) then
        local first, rest = {}, {}
        for _, o in ipairs(out) do
          local lead = #first == 0 and o.BM == 64 and o.BN == 64 and o.BK == 64 and o.WM == 2 and o.WN == 4
          if lead then first[1] = o else rest[#rest + 1] = o end
        end
        for _, o in ipairs(rest) do first[#first + 1] = o end
        out = first
      end
      -- the same tiles unpadded (PAD_SMEM=0), after every padded one
      return atom.also(out, "PAD_SMEM", 0)
    end },

  -- Scalar contraction: a BM x BN block tile staged through shared memory BK deep, a TM x TN register tile
  -- per thread.
  { name = "scalar_contraction", family = "TILE", kinds = { "contraction" },
    knobs = { BM = 64, BN = 64, BK = 16, TM = 4, TN = 4 },
    gate = function(k, dev) return true, "scalar tier serves every contraction" .. atom.epilogue_note(k) end,
    fork = function(k, dev)
      local out = {}
      for _, bm in ipairs { 64, 32, 128 } do
        for _, bn in ipairs { 64, 32, 128 } do
          for _, bk in ipairs { 16, 8, 32 } do
            for _, tm in ipairs { 4, 2, 8 } do
              for _, tn in ipairs { 4, 2, 8 } do
                local threads = (bm / tm) * (bn / tn)
                if threads >= 64 and threads <= 256 then
                  out[#out + 1] = { MMA = 0, BM = bm, BN = bn, BK = bk, TM = tm, TN = tn }
                end
              end
            end
          end
        end
      end
      return out
    end },

  -- Split-K: SPLIT_K slices of the K tiles on grid z, partial sums in scratch, the last block of each (m, n)
  -- tile adds them in slice order (deterministic) and runs the epilogue. For short sequences, where the
  -- (m, n) tiles alone leave most SMs idle. Written without a GPU run (2026-11-30): offered after SPLIT_K=1.
  -- With PERSIST=1, SPLIT_K=2 is a 2-CTA cluster on one tile's K halves, rank 1's partials handed to rank 0 through
  -- distributed shared memory (src/emit_gemm_ws.c). Correct on the H200 and slower than SPLIT_K=1 on every Qwen3
  -- projection at 512 tokens (bench/gemm.lua, 2026-12-02, docs/performance.md twelfth session: q at 128 x 128 with
  -- the TMA store 11.1 us against 9.8; its clock marks put the hand-over and the one-sided epilogue at ~3,300 of
  -- rank 0's 13,900 cycles): offered after SPLIT_K=1, as before.
  -- STREAM_K=1 (PERSIST=1, CLUSTER=1): the tiles of the last, partial wave and one full wave before it shared out by
  -- k-tiles over the one-an-SM grid, the pieces' partial sums added in a fixed order by the CTA that finishes the
  -- tile (src/emit_streamk.c): at 512 tokens the 128 x 128 tiles (half the L2 bytes of 128 x 64) come to 64 or 176
  -- tiles, under one or 1.3 waves. Written without a GPU run (2026-12-03): offered last.
  -- SPLIT_L2=1 (PERSIST=1, EPI_SMEM=0): SPLIT_K's parts summed through the launch scratch (L2) by groups of
  -- consecutive CTAs instead of a cluster — the cluster's start and end cost ~3,000 cycles of a split 512-token tile
  -- whose K loop the split shortened by 5,300 (docs/performance.md, twenty-seventh session), and 4-CTA clusters do
  -- not all fit at once; with no cluster, Qwen3's down_proj at 512 tokens can take 128 x 128 tiles split in four (128
  -- CTAs, half the bytes an SM of the 64 x 64 lead). Written without a GPU run (2026-12-05): offered last.
  { name = "split_k", family = "SPLIT", kinds = { "contraction" }, knobs = { SPLIT_K = 1, STREAM_K = 0, SPLIT_L2 = 0 },
    gate = function(k, dev)
      if not k.linear then return false, "a batched matmul's grid z is its batch" end
      return true, ("K=%d in up to 4 slices (warp tier)"):format(k.K)
    end,
    -- SPLIT_K=2 first for atom.split2_lead (a one-wave linear's 128 x 128 tiles halved over a long K; its note) and
    -- atom.split2_small (the 128 x 64 tiles of a residual linear whose lead would be 64 x 64; its note)
    fork = function(k, dev)
      local o = { { SPLIT_K = 1 }, { SPLIT_K = 2 }, { SPLIT_K = 4 }, { SPLIT_K = 1, STREAM_K = 1 },
        { SPLIT_K = 4, SPLIT_L2 = 1 }, { SPLIT_K = 2, SPLIT_L2 = 1 } }
      if atom.split2_lead(k, dev) or atom.split2_small(k, dev) then o[1], o[2] = o[2], o[1] end
      return o
    end },

  -- Block order: RASTER > 1 groups RASTER tile rows so consecutive blocks share A rows and B columns in L2.
  { name = "raster", family = "ORDER", kinds = { "contraction" }, knobs = { RASTER = 1 },
    gate = function(k, dev) return true, "block order over the (M, N) tiles" end,
    -- RASTER=8 first for a dual kernel of more than two waves (atom.dual_waves: gate/up, 18.0 us against 29.9) and
    -- for a result of 4096 x 4096 or more (atom.raster_big: 8192³ 1683.3 -> 1410.7 us), and for the wide one-wave
    -- leads (atom.wide_one_wave: Qwen3-4B's q 18.6 -> 14.8 us)
    fork = function(k, dev)
      local o = { { RASTER = 1 }, { RASTER = 8 }, { RASTER = 4 } }
      if atom.dual_waves(k, dev) or atom.raster_big(k, dev) or atom.wide_one_wave(k, dev) then o[1], o[2] = o[2], o[1] end
      return o
    end },

  -- Row reduction (RMSNorm, softmax, a norm over the last dim): RPB rows per block, THREADS threads striding
  -- over each row; CACHE=0 two passes over memory (the epilogue recomputes its prologue from the inputs),
  -- CACHE=1 one pass (the row's input kept in shared memory for the epilogue).
  -- UNROLL=1 (a constant row): the column loops unrolled, so that a thread's L/THREADS loads issue together instead
  -- of one a loop trip (the loops stride by blockDim.x, unknown to the compiler: ptxas keeps one load a trip);
  -- the lead where the row is constant and not a softmax (measured on the RMSNorm rows: Qwen3 layer 0 81.6 ->
  -- 75.2 us, TinyLlama 145.7 -> 138.6; H200, 2026-12-02, docs/performance.md), its UNROLL=0 twin second; the second option's and the lead's CACHE=1 twins offered last.
  { name = "row_reduction", family = "REDUCE", kinds = { "row" }, knobs = { THREADS = 256, RPB = 1, CACHE = 0, UNROLL = 0 },
    gate = function(k, dev) return true, ("rows of %s elements"):format(tostring(k.L)) end,
    fork = function(k, dev)
      local cap = atom.warps_for(k.L or 1024)
      local out = {}
      -- first: about four elements per thread and 256 threads per block (short rows share a block): measured
      -- best for the 128-element q/k norm + RoPE rows (THREADS=32, RPB=8: 5.7 us against 7.3 us for 128 x 1)
      -- and the 1024-element RMSNorm rows (THREADS=256, RPB=1) on the H200 at seq_len 512
      local t0 = 32
      while type(k.L) == "number" and t0 * 2 <= math.min(256, k.L / 4) do t0 = t0 * 2 end
      local r0 = math.max(1, math.min(8, 256 / t0))
      if t0 <= math.max(cap, 32) then out[1] = { THREADS = t0, RPB = r0, CACHE = 0 } end
      for _, t in ipairs { 256, 128, 512, 64, 1024, 32 } do
        for _, r in ipairs { 1, 2, 4, 8 } do
          for _, cache in ipairs { 0, 1 } do
            local fits = cache == 0 or (type(k.L) == "number" and not k.softmax and k.L * r * 4 <= dev.smem_static)
            if t <= math.max(cap, 32) and t * r <= 1024 and fits and not (t == t0 and r == r0 and cache == 0) then
              out[#out + 1] = { THREADS = t, RPB = r, CACHE = cache }
            end
          end
        end
      end
      local n, lead = #out, out[1]
      for i = 1, n do
        local o = out[i]
        local twin = i <= 2 or (lead and o.THREADS == lead.THREADS and o.RPB == lead.RPB)
        if twin and type(k.L) == "number" and k.L <= 64 * o.THREADS then out[#out + 1] = atom.with(o, "UNROLL", 1) end
      end
      -- the lead's unrolled twin (when there is one) goes first; not for a softmax row (not yet timed)
      if not k.softmax and out[n + 1] and out[1] == lead and lead.THREADS == out[n + 1].THREADS and lead.RPB == out[n + 1].RPB
          and (out[n + 1].CACHE or 0) == (lead.CACHE or 0) then
        local t = out[n + 1]
        for i = n + 1, 2, -1 do out[i] = out[i - 1] end
        out[1] = t
      end
      return out
    end },

  -- Pointwise: a grid-stride loop of BLOCK threads, each taking VEC consecutive elements EPT times a trip.
  { name = "flat_block", family = "WORK", kinds = { "pointwise" }, knobs = { BLOCK = 256, VEC = 1, EPT = 1 },
    gate = function(k, dev) return true, "grid-stride loop" end,
    fork = function(k, dev)
      local out = {}
      for _, b in ipairs { 256, 128, 512, 1024, 64 } do
        for _, v in ipairs { 1, 2, 4, 8 } do
          for _, e in ipairs { 1, 2, 4 } do out[#out + 1] = { BLOCK = b, VEC = v, EPT = e } end
        end
      end
      return out
    end },

  -- Other reductions: one output element per thread, looping over the reduced elements.
  { name = "reduce_block", family = "WORK", kinds = { "reduce" }, knobs = { BLOCK = 256 },
    gate = function(k, dev) return true, "one output element per thread" end,
    fork = function(k, dev) return { { BLOCK = 256 }, { BLOCK = 128 }, { BLOCK = 64 }, { BLOCK = 512 } } end },

  -- Flash attention on Hopper tensor cores (FLASH=2, src/emit_attention_wgmma.c): a TMA producer warpgroup
  -- streams K and V tiles of BKV keys through a KVST-deep ring; a consumer warpgroup per 64 query rows runs
  -- S = QKᵀ and O += PV on wgmma (P from registers) with the online softmax in registers. BQ 64 (one consumer
  -- warpgroup; MINB=2: two CTAs an SM, setmaxnreg 40/216) or 128 (two; QPACK=1: the same rows of two query
  -- heads sharing a KV head, K/V loaded once for both). BQ=128 first where its tiles fill every SM at the hint,
  -- else BQ=64 (twice the CTAs); BKV=64 with a 4-deep ring first. Measured on the H200 (docs/performance.md, tenth
  -- session; Qwen3 layer 0 attention, `emmy run … --bench --ab`): b1 s512 14.7 us (BQ 64, BKV 64, KVST 4) against
  -- 25.1 for the mma.sync tier's best; b8 s512 61.1 (BQ 128) against 131.6; s2048 73.5 (BQ 64, MINB 2) and 76.6
  -- (BQ 128) against 183.5; TinyLlama (head dim 64) 13.0 against 19.1 for BQ 64 with BKV 128. First on sm_90.
  { name = "flash_wgmma", family = "WORK", kinds = { "attention" },
    knobs = { FLASH = 0, BQ = 64, BKV = 32, KVST = 1, KVSPLIT = 1, MINB = 1, QSMEM = 0, QPACK = 0, OSMEM = 0, PINGPONG = 0, APERSIST = 0, RESCALE = 0, OTMA = 0, PSMEM = 0 },
    gate = function(k, dev)
      if (dev.cc_major or 0) < 9 then return false, ("compute capability %s has no wgmma (needs 9.0)"):format(dev.cc) end
      if not atom.is_half(k.dtype) then return false, ("dtype %s (wgmma needs bf16/f16)"):format(k.dtype) end
      if k.E ~= k.Ev or (k.E ~= 64 and k.E ~= 128) then
        return false, ("head dims %s/%s (FLASH=2 takes 64 or 128)"):format(tostring(k.E), tostring(k.Ev))
      end
      if not k.qkv_rows then return false, "Q, K or V is not a view of a kernel input with 16-byte rows (TMA)" end
      -- (an attention mask is read per score: the whole model's SDPA with its padding mask. Measured on the H200,
      -- twenty-sixth session, Qwen3's masked SDPA at batch 4 alone: seq 37 6.1 us against 8.6 for the mma.sync
      -- tier, 512 52.5 against 80.6, 2048 731 against 1071 — torch eager 19.0, 55.0, 498)
      return true, ("wgmma flash attention with a TMA producer, head dim %d%s"):format(k.E, k.causal and ", causal tiles skipped" or "")
    end,
    fork = function(k, dev)
      local out = {}
      local rows = (type(k.L) == "number" and k.L or 0) * (k.heads or 1) * (k.batch or 1)
      local bqs = math.ceil(rows / 128) >= (dev.sm_count or 132) and { 128, 64 } or { 64, 128 }
      local ratio = (k.kv_heads or 0) > 0 and (k.heads or 1) / k.kv_heads or 1
      for _, bq in ipairs(bqs) do
        for _, bkv in ipairs { 64, 128 } do
          for _, st in ipairs { 4, 3, 2 } do
            -- KVSPLIT=2 first where BQ=64 leads (few query tiles): b1 s512 13.5 us against 14.7 (H200, tenth session;
            -- head dim 128 has a lead of its own since the fifty-first session: flash_wgmma_lead)
            for _, split in ipairs(bqs[1] == 64 and { 2, 1 } or { 1, 2 }) do
              -- KVSPLIT=2 (BQ 64): two consumer warpgroups on the same rows take alternate key tiles (a 4-deep
              -- ring: two stages each, the next tile loading while this one is read), merged through shared
              -- memory at the end
              local merge = split == 2 and (k.E / 2 + 4) * 128 * 4 or 0
              local smem = 1024 + bq * k.E * 2 + 2 * st * bkv * k.E * 2 + merge
              for _, pack in ipairs { 0, 1 } do
                -- MINB=3 (head dim 64, 64-key tiles: what 136 registers a consumer thread hold): three CTAs an SM
                for _, minb in ipairs { 1, 2, 3 } do
                  local ok = smem * minb <= (dev.smem_optin or dev.smem_static)
                    and (pack == 0 or (bq == 128 and k.gqa and ratio % 2 == 0)) and (minb == 1 or (bq == 64 and split == 1))
                    and (minb < 3 or (k.E == 64 and bkv == 64))
                    and (split == 1 or (bq == 64 and pack == 0 and st == 4))
                  if ok then
                    out[#out + 1] = { FLASH = 2, BQ = bq, BKV = bkv, KVST = st, KVSPLIT = split, MINB = minb, QSMEM = 0, QPACK = pack }
                  end
                end
              end
            end
          end
        end
      end
      -- OSMEM=1: the output staged in shared memory and stored along the head dim; offered after each option
      atom.also(out, "OSMEM", 1)
      -- OSMEM=2: the same, stored a 16-byte chunk a thread (the element loop's 64 two-byte stores a thread became
      -- 8); offered after every other option, and in the leads below
      do
        local n = #out
        for i = 1, n do if out[i].OSMEM == 1 then out[#out + 1] = atom.with(out[i], "OSMEM", 2) end end
      end
      -- PINGPONG=1 (two Q slices over the same keys: BQ=128, KVSPLIT=1): the warpgroups take turns
      -- issuing their wgmma, one's softmax under the other's products (FlashAttention-3): offered last, on the
      -- 16-byte-store options, and in the head-dim-128 lead below (head dim 64 gained at s8192 only: 1257.1 ->
      -- 1202.9 us with BQ 128 against the BQ 64 lead; b8 s512 and s2048 kept the lead)
      -- (causal: with 128-key tiles only, where both slices take the same number of key tiles)
      do
        local n = #out
        for i = 1, n do
          local o = out[i]
          if o.BQ == 128 and o.KVSPLIT == 1 and o.OSMEM == 2 and (not k.causal or o.BKV == 128) then
            out[#out + 1] = atom.with(o, "PINGPONG", 1)
          end
        end
      end
      -- APERSIST=1 (KVSPLIT=1, QPACK=0, MINB=1): one CTA an SM loops over (query tile, head) items, the next item's
      -- first K/V tiles loading during this one's epilogue (FlashAttention-3's persistent scheduler; for batch 8,
      -- where each CTA runs few key tiles and its prologue and epilogue are a large share: b8 s512 d128 causal 36.0
      -- us against torch's 32.6, H200, seventeenth session). Written without a GPU run: offered last.
      do
        local n = #out
        -- (MINB 2 and 3, one consumer warpgroup: that many CTAs an SM, each looping over items)
        for i = 1, n do
          local o = out[i]
          if o.KVSPLIT == 1 and o.QPACK == 0 and (o.MINB == 1 or o.BQ == 64) then out[#out + 1] = atom.with(o, "APERSIST", 1) end
        end
        -- OSMEM=3 (APERSIST=1): O staged in a buffer of its own, so that Q is released to the next item's load
        -- after the last QK^T (FlashAttention-3's order; the Q tile's size more shared memory — the resource check
        -- keeps the ones that fit: head dim 128 with a 2-deep ring). Offered last (b8 s512 causal 38.0 -> 36.0 us
        -- against OSMEM=2 on the same ring, but that ring loses more than it gains, H200).
        -- OSMEM=4: the same over the warpgroup's last K/V stage, released after the epilogue (no more shared
        -- memory): offered here last, and the persistent head-dim-128 lead below.
        local m = #out
        for i = n + 1, m do
          local o = out[i]
          if o.OSMEM == 2 then
            out[#out + 1] = atom.with(o, "OSMEM", 3)
            -- (O over the stage's K half only: past it, on V, another warpgroup's last P·V may still read it)
            if o.BQ <= o.BKV then out[#out + 1] = atom.with(o, "OSMEM", 4) end
          end
        end
      end
      -- BQ=192 (head dim 64): three consumer warpgroups over one K/V stream (FlashAttention-3's head-dim-64 tile is
      -- 192 x 128, registers 32 / 160), the 16-byte-store epilogue, also persistent (OSMEM 2; not 4: the three O
      -- slices reach a stage's V half, and were wrong so on the H200). 64-key tiles first: at 128 keys the
      -- consumers' O, S and two P sets need more than 160 registers (NVRTC 13.0: 116 bytes spilled, none at 64).
      -- Offered last: correct, and slower than the BQ=64 lead on every d64 case (H200, twenty-fifth session,
      -- bench/attention.lua --pins: b8 s512 causal 47.3 µs against 43.7, non-causal 60.1 against 53.1, b1 s2048
      -- causal 58.1 against 51.4, non-causal 100.4 against 81.7).
      if k.E == 64 then
        for _, bkv in ipairs { 64, 128 } do
          for _, st in ipairs { 3, 2, 4 } do
            if 1024 + 192 * k.E * 2 + 2 * st * bkv * k.E * 2 <= (dev.smem_optin or dev.smem_static) then
              local o = { FLASH = 2, BQ = 192, BKV = bkv, KVST = st, KVSPLIT = 1, MINB = 1, QSMEM = 0, QPACK = 0, OSMEM = 2 }
              out[#out + 1] = o
              out[#out + 1] = atom.with(o, "APERSIST", 1)
            end
          end
        end
      end
      -- (PSMEM=1, 2 — P through shared memory, PV from shared memory: the registers of BKV=192 and of three slices
      -- taking turns, FlashAttention-3's head-dim-64 non-causal 192 x 192 — is not offered: correct on the H200
      -- (psmem_*) and slower than the lead on every case timed — b1 s2048 d64 non-causal, the lead 79.6 us, the best
      -- PSMEM pin 86.7 (BQ 128, ping-pong), FlashAttention-3's tile 96.6; b8 s512 45.7 against 54.4 (H200,
      -- thirty-second session, bench/ab.lua); pins only)
      -- RESCALE=1 (O and the sums corrected only when a row's maximum grew by more than 2^8): a twin of each
      -- 16-byte-store option (OSMEM 2-4), offered last; the lead where an item has 32 key tiles or more
      -- (non-causal), as the first tile always corrects and the vote costs a little on short items (H200,
      -- twenty-ninth session, b1 s8192 d128 non-causal 872.7 -> 822.2 us, twice; s512 and s2048 within +-2%)
      do
        local n = #out
        for i = 1, n do if (out[i].OSMEM or 0) >= 2 then out[#out + 1] = atom.with(out[i], "RESCALE", 1) end end
      end
      -- OTMA=1 (a warpgroup's full staged O tile out by TMA from one thread instead of a 16-byte chunk a thread):
      -- a twin of each staged option (OSMEM 2-4), offered last; the head-dim-64 lead (its items are short, the
      -- epilogue a large share): b8 s512 causal 36.0 -> 34.6 us, non-causal 47.7 -> 46.4, b1 s2048 50.5 -> 49.7 and
      -- 82.1 -> 81.2; head dim 128 not faster (b8 s512 non-causal 35.7 -> 36.3, the others within 1%) (H200,
      -- thirtieth session, twice, bench/attention.lua with the switch at compile time)
      do
        local n = #out
        for i = 1, n do if (out[i].OSMEM or 0) >= 2 then out[#out + 1] = atom.with(out[i], "OTMA", 1) end end
      end
      flash_wgmma_lead(out, k, dev, bqs)
      -- seq_pos (sequences packed end to end, emmy serve --varlen): each CTA's keys from its first row's sequence
      -- start, which the split, persistent and packed schedules do not track (the emitter refuses them)
      if k.varlen then
        local keep = {}
        for _, o in ipairs(out) do
          if o.KVSPLIT == 1 and (o.APERSIST or 0) == 0 and (o.QPACK or 0) == 0 then keep[#keep + 1] = o end
        end
        out = keep
      end
      return out
    end },

  -- Flash attention on the warp tier: BQ query rows per block (a warp per 16), BKV keys per step staged in
  -- shared memory, QKᵀ and PV on mma.sync, online softmax in f32 (base 2). Offered before the scalar options:
  -- measured 35.9 us against 877.5 us for the scalar default (Qwen3 layer 0, seq_len 512, H200, bench/run.sh).
  -- MINB=2 asks ptxas for registers that let two blocks share an SM (__launch_bounds__(threads, 2)): Nsight
  -- Compute found the default variant at 166 registers x 256 threads, one block per SM, no eligible warp 58-68%
  -- of the cycles (bench/gaps.sh, H200, 2026-11-30). Offered after MINB=1, not yet timed.
  -- QSMEM=1 keeps the Q tile in shared memory of its own and reloads its fragments every k-step (D/2 registers
  -- fewer: with MINB=2 the default variant fits 128 registers without spilling, NVRTC); offered after QSMEM=0.
  { name = "flash_tier", family = "WORK", kinds = { "attention" },
    knobs = { FLASH = 0, BQ = 64, BKV = 32, KVST = 1, KVSPLIT = 1, MINB = 1, QSMEM = 0 },
    gate = function(k, dev)
      if not atom.is_half(k.dtype) then return false, ("dtype %s (mma.sync needs bf16/f16)"):format(k.dtype) end
      if k.varlen then return false, "seq_pos (sequences packed end to end): FLASH=2 or the scalar tier take it" end
      if not k.E or k.E ~= k.Ev or k.E % 16 ~= 0 or k.E > 256 then
        return false, ("head dims %s/%s must be equal multiples of 16 up to 256"):format(tostring(k.E), tostring(k.Ev))
      end
      return true, ("mma.sync flash attention, head dim %d%s"):format(k.E, k.causal and ", causal tiles skipped" or "")
    end,
    fork = function(k, dev)
      local out = {}
      -- one shared buffer holds the Q tile, then KVST stages of K and V tiles (KVST=2 double-buffers them; the
      -- emitter refuses it when K or V is not a strided view of a kernel input)
      -- KVSPLIT=2: twice the warps, each half taking alternate K/V tiles, the softmax states merged at the end;
      -- its buffer is dynamic shared memory. First only when the 64-row query tiles at the hint leave SMs idle:
      -- Qwen3 layer 0 SDPA on the H200 (bench/run.sh kvsplit, sdpa2048), at seq_len 512 (128 tiles for 132 SMs)
      -- 23.8 us against 25.4 us for KVSPLIT=1, at 2048 (512 tiles) 172.5 us against 144.1 us
      local tiles = math.ceil((type(k.L) == "number" and k.L or 0) / 64) * (k.heads or 1) * (k.batch or 1)
      for _, split in ipairs(tiles < (dev.sm_count or 132) and { 2, 1 } or { 1, 2 }) do
        for _, kvst in ipairs { 2, 1 } do
          for _, bq in ipairs { 64, 32, 128 } do
            for _, bkv in ipairs { 32, 64, 16 } do
              local bytes = math.max(bq, 2 * bkv * kvst * split) * (k.E + 8) * 2
              local cap = split == 1 and dev.smem_static or (dev.smem_optin or dev.smem_static)
              if bytes <= cap and ((kvst == 1 and split == 1) or k.kv_rows) and bq / 16 * split <= 16 then
                out[#out + 1] = { FLASH = 1, BQ = bq, BKV = bkv, KVST = kvst, KVSPLIT = split, MINB = 1, QSMEM = 0 }
              end
            end
          end
        end
      end
      for i = 1, #out do
        local o = out[i]
        local cap = o.KVSPLIT == 1 and dev.smem_static or (dev.smem_optin or dev.smem_static)
        if (o.BQ + 2 * o.BKV * o.KVST * o.KVSPLIT) * (k.E + 8) * 2 <= cap then
          out[#out + 1] = { FLASH = 1, BQ = o.BQ, BKV = o.BKV, KVST = o.KVST, KVSPLIT = o.KVSPLIT, MINB = 1, QSMEM = 1 }
        end
      end
      return atom.also(out, "MINB", 2)
    end },

  -- Scalar attention: one query row per thread, online softmax in f32, causal rows stop at the diagonal.
  { name = "scalar_attention", family = "WORK", kinds = { "attention" }, knobs = { QROWS = 64, KV_TILE = 0 },
    gate = function(k, dev)
      if not k.E or k.E > 256 or not k.Ev or k.Ev > 256 then
        return false, ("head dims %s/%s must be constants up to 256"):format(tostring(k.E), tostring(k.Ev))
      end
      return true, ("head dim %d, one query row per thread"):format(k.E)
    end,
    -- KV_TILE keys and values staged in shared memory per block (0: every thread reads them itself)
    fork = function(k, dev)
      local out = {}
      for _, q in ipairs { 64, 32, 128, 256 } do
        for _, t in ipairs { 32, 0, 16, 8, 64 } do
          if t * (k.E + k.Ev) * 4 <= dev.smem_static then out[#out + 1] = { QROWS = q, KV_TILE = t } end
        end
      end
      return out
    end },
}
