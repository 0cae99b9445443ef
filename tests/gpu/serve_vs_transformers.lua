-- emmy serve against transformers itself (tests/gpu/run.sh serve_gpu_vs_transformers; issue 23's "served embeddings of
-- a mixed-length batch match transformers"): a copy of the model's folder given transformers' own seeded
-- initialization as model.safetensors (tools/torchref/embed_ref.py --init), so that both load the same weights; a
-- mixed batch (lengths 5, 37, 130, 1, 513, 64) packed end to end on emmy's GPU server (a CUDA graph's first run and
-- its replay), each sequence run alone in transformers (bf16, SDPA): cosine >= 0.999 a row, or exit 1.
local serve = require "emmy.serve"
local cjson = require "cjson"
local sys = require "emmy.sys"
local cli = require "emmy.cli"
local M = arg and arg[1] or "Qwen/Qwen3-Embedding-0.6B"
local PY = os.getenv("EMMY_PYTHON") or "python3"
local src = require("emmy.frontend").model(M).dir
local dir = os.tmpname()
os.remove(dir)
assert(sys.mkdir_p(dir))
assert(os.execute(("cp %s/config.json %s/"):format(cli.shell_quote(src), cli.shell_quote(dir))))
local t0 = sys.clock()
local ok = os.execute(("%s tools/torchref/embed_ref.py %s --init"):format(PY, cli.shell_quote(dir)))
if ok ~= 0 and ok ~= true then os.execute("rm -rf " .. cli.shell_quote(dir)); print("FAIL\tembed_ref.py --init"); os.exit(1) end
print(("weights: transformers' initialization written in %.1f s"):format(sys.clock() - t0))
local seqs, x = {}, 11
for i, n in ipairs { 5, 37, 130, 1, 513, 64 } do
  local s = {}
  for j = 1, n do x = (x * 1103515245 + 12345) % 2147483648; s[j] = x % 150000 end
  seqs[i] = s
end
local sf = dir .. "/seqs.json"
local f = assert(io.open(sf, "w"))
f:write(cjson.encode(seqs))
f:close()
local p = assert(io.popen(("%s tools/torchref/embed_ref.py %s --seqs %s"):format(PY, cli.shell_quote(dir), cli.shell_quote(sf))))
local want = cjson.decode(p:read("*a"))
p:close()
local srv = assert(serve.open(dir, { device = "gpu", graph_step = 128 }))
local g1 = assert(srv.emb.embed_batch(seqs))
local g2 = assert(srv.emb.embed_batch(seqs))
local function cos(a, b) local s = 0; for i = 1, #a do s = s + a[i] * b[i] end return s end
local worst = 1
for i = 1, #seqs do
  local a, b = cos(g1[i], want[i]), cos(g2[i], want[i])
  print(("row %d (%d tokens): cosine with transformers: graph's first run %.6f, replay %.6f"):format(i, #seqs[i], a, b))
  worst = math.min(worst, a, b)
end
os.execute("rm -rf " .. cli.shell_quote(dir))
print(worst >= 0.999 and "PASS" or "FAIL", ("the lowest cosine %.6f"):format(worst))
os.exit(worst >= 0.999 and 0 or 1)
