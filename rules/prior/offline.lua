-- offline.lua — the offline half of the prior: a hand-set roofline-style cost (µs) over the features, useful
-- before anything is measured. The weights are the device's peak rates and the efficiency of each tier and
-- transport; they were set by hand against the exhaustive tile sweeps of 2026-11-30 on the H200
-- (tests/fixtures/prior/: 3022 measured warp-tier variants of 11 contractions; over them the cost ranks with a
-- mean Spearman rho of 0.85 and picks within 1.15x of each kernel's best, 1.03x on average — tested in
-- tests/lua/test_prior.lua). Edit the weights and re-run the test: no rebuild.
local W = {
  clock_ghz = 1.98,
  -- FLOP per cycle per SM: FFMA, mma.sync, wgmma (dense bf16; wgmma's is the device peak: over the 104 timed
  -- wgmma tiles of tests/fixtures/prior/h200_qwen3_l0_s512_wgmma.json the cost ranks with mean rho 0.84 and
  -- picks within 1% of each kernel's best; split-K tiles have not been timed)
  rate = { [0] = 256, [1] = 2048, [2] = 4096 },
  transport = { [0] = 0.12, [1] = 0.55, [2] = 0.8 }, -- element-wise fills, cp.async ring, TMA
  stage_hide = 0.55,      -- each further ring stage hides this fraction of the remaining copy latency
  warps_full = 12,        -- resident warps per SM that keep the tensor pipe fed
  bk_sync = 24,           -- a k-tile barrier costs as much as this many K columns of math
  reuse_half = 1.5,       -- warp-tile operand reuse at which the tile step runs at half rate
  l2_gbps = 9000, dram_gbps = 4000,
  fixed_us = 4.0,         -- launch and replay overhead of one kernel (measured: one-kernel graphs, 4-5 us)
  split_us = 1.5,         -- split-K's fixed cost (the last block's sum; the partials' traffic is split_bytes
                          -- through L2); no split-K variant has been timed yet
}

local O = { weights = W }

-- The roofline over the features, in C (src/prior.c, em_prior_roofline): per SM, a tile's math at the tier's rate
-- times the efficiency of feeding it (transport and its ring stages, occupancy, warp-tile operand reuse, the k-tile
-- barrier); the busiest SM runs its tiles per_sm at a time, a partial last round costing a full one; against the
-- L2 and DRAM traffic; plus the launch and the split-K round trip. To try another formula, write it here in Lua
-- over f and W instead (no rebuild).
function O.contraction(f) return cost.roofline(f, W) end

return O
