-- emmy serve on the GPU (tests/gpu/run.sh serve_gpu_check): the embeddings of a mixed batch (lengths 5, 37, 130,
-- 1, 64, packed end to end) with CUDA graphs (the bucket's first run and a replay) and without, each against the
-- CPU reference's (all with --mask): cosine >= 0.999 a row, or exit 1. And --inflight 2's staged runs: two batches (the mix and the
-- same sequences reversed) launched before either is read back, in stream order behind each other; and the default
-- (the attention on the sequences' positions, no mask).
local serve = require "emmy.serve"
local M = arg and arg[1] or "Qwen/Qwen3-Embedding-0.6B"
local function seqs()
  local out, lens, x = {}, { 5, 37, 130, 1, 64 }, 7
  for i, n in ipairs(lens) do
    local s = {}
    for j = 1, n do x = (x * 1103515245 + 12345) % 2147483648; s[j] = x % 150000 end
    out[i] = s
  end
  return out
end
local function emb(opts)
  local srv = assert(serve.open(M, opts))
  local r1 = assert(srv.emb.embed_batch(seqs()))
  local r2 = assert(srv.emb.embed_batch(seqs())) -- (a graph's replay where one was captured)
  return r1, r2
end
local function cos(a, b) local s = 0; for i = 1, #a do s = s + a[i] * b[i] end return s end
local g1, g2 = emb { device = "gpu", graph_step = 128, varlen = false }
local n1 = emb { device = "gpu", graph_step = 0, varlen = false }
local c1 = emb { device = "cpu", varlen = false }
local function staged()
  local srv = assert(serve.open(M, { device = "gpu", graph_step = 128, inflight = 2 }))
  local out = {}
  for round = 1, 2 do -- (the first round captures the buckets' graphs, the second replays them)
    local fwd, rev = seqs(), {}
    for i = #fwd, 1, -1 do rev[#rev + 1] = fwd[i] end
    local ha = assert(srv.emb.launch_batch(fwd))
    local hb = assert(srv.emb.launch_batch(rev))
    local a, b = assert(srv.emb.collect_batch(ha)), assert(srv.emb.collect_batch(hb))
    out[round] = { a = a, b = b }
  end
  return out
end
local st = staged()
-- the default: the attention reads the positions (seq_pos) instead of the mask — the flash kernel's packed path
local v1, v2 = emb { device = "gpu", graph_step = 128 }
local worst = 1
for i = 1, #c1 do
  local a, b, c = cos(g1[i], c1[i]), cos(g2[i], c1[i]), cos(n1[i], c1[i])
  print(("row %d: cosine with the CPU reference: graph's first run %.6f, replay %.6f, no graph %.6f"):format(i, a, b, c))
  worst = math.min(worst, a, b, c)
  local va, vb = cos(v1[i], c1[i]), cos(v2[i], c1[i])
  print(("row %d: positions (default): first run %.6f, replay %.6f"):format(i, va, vb))
  worst = math.min(worst, va, vb)
  for round = 1, 2 do
    local sa, sb = cos(st[round].a[i], c1[i]), cos(st[round].b[#c1 + 1 - i], c1[i])
    print(("row %d: --inflight 2, round %d: the first batch %.6f, the reversed one %.6f"):format(i, round, sa, sb))
    worst = math.min(worst, sa, sb)
  end
end
print(worst >= 0.999 and "PASS" or "FAIL", ("the lowest cosine %.6f"):format(worst))
os.exit(worst >= 0.999 and 0 or 1)
