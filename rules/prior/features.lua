-- features.lua — what the prior knows about a kernel and one knob assignment on a device: each feature a plain
-- number, named, so the offline cost (offline.lua) and the online half read the same vector. Edit freely: the
-- engine (scripts/emmy/prior.lua) only passes them through.
--   k: kernel facts (emmy.kernels.facts: kind, M, N, K, dual, siblings, E, L, S, causal, heads, ...)
--   c: the knob assignment; dev: {sm_count, smem_optin, cc_major, ...}
local function cdiv(a, b) return math.floor((a + b - 1) / b) end

local F = {}

function F.contraction(k, c, dev)
  local M, N, K = k.M, k.N, k.K
  local nb = k.dual and 2 or 1                              -- weight operands sharing each tile
  local mma, wg = c.MMA == 1, c.WGMMA == 1
  local BM, BN, BK = c.BM, c.BN, c.BK
  local threads = mma and 32 * c.WM * c.WN or (BM / c.TM) * (BN / c.TN)
  local SK = c.SPLIT_K or 1
  local stages = (c.ASYNC == 1) and (c.STAGES or 1) or 1
  local smem
  if c.TMA == 1 then smem = 1024 + 128 * (BM + BN * nb) * stages
  elseif mma then smem = 2 * (BM + BN * nb) * (BK + (c.PAD_SMEM or 8)) * stages
  else smem = 4 * BK * (BM + 1 + (BN + 1) * nb) end
  -- registers: the accumulators, fragments and addresses per thread (ptxas caps at 255)
  local acc = mma and (BM / c.WM) * (BN / c.WN) / 32 * nb or c.TM * c.TN * nb
  local regs = math.min(255, 40 + acc + (mma and (BM / c.WM / 16 * 4 + BN / c.WN / 8 * 2 * nb) or 0))
  local per_sm = math.max(1, math.min(math.floor(2048 / threads), math.floor(232448 / math.max(smem, 1)),
    math.floor(65536 / (threads * regs)), 32))
  local tiles = cdiv(M, BM) * cdiv(N, BN) * SK
  local sms = dev.sm_count or 132
  local busiest = cdiv(tiles, sms)                           -- tiles the busiest SM runs
  local resident = math.min(busiest, per_sm)                 -- of those, at once
  return {
    flops = 2 * M * N * K * nb,
    bytes = 2 * (M * K + N * K * nb + M * N * (k.dual and 1 or 1)),
    tile_flops = 2 * BM * BN * nb * K / SK,
    tiles = tiles, busiest = busiest, waves = busiest / per_sm, resident = resident,
    warps = resident * threads / 32, per_sm = per_sm, threads = threads, smem = smem, regs = regs,
    -- operand reuse of a warp's tile: mma per ldmatrix (k16 step)
    reuse = mma and (BM / c.WM / 16) * (BN / c.WN / 8) * nb / ((BM / c.WM / 16) + (BN / c.WN / 16) * nb) or 1,
    tier = wg and 2 or (mma and 1 or 0), transport = c.TMA == 1 and 2 or (c.ASYNC == 1 and 1 or 0),
    stages = stages, bk = BK, split = SK, masked = (cdiv(M, BM) * BM - M) / (cdiv(M, BM) * BM),
    -- split-K: each slice writes its f32 partial tile to scratch and the last block reads them all back
    split_bytes = SK > 1 and 2 * 4 * M * N * nb * SK or 0,
    l2_bytes = 2 * (M * K * cdiv(N, BN) + N * K * nb * cdiv(M, BM)),
    -- the pipeline's knobs the numbers above do not see, so that two variants that time differently never share
    -- a feature vector (issue 22: the blame's BLIND pairs): the persistent pipeline, its producer warpgroup, the
    -- cluster and the operand its pair shares, the epilogue, the tile order, wgmma's wait depth
    persist = c.PERSIST or 0, producer = c.PRODUCER or 0, cluster = c.CLUSTER or 1, epi = c.EPI_SMEM or 0,
    raster = c.RASTER or 1, wg_wait = c.WG_WAIT or 0, pair_a = c.PAIR_A or 0,
  }
end

return F
