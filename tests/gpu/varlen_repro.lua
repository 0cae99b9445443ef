-- emmy serve --varlen's attention on the GPU (tests/gpu/run.sh varlen_*): the packed Qwen3 graph with SDPA's seq_pos
-- (serve.varlen_graph) planned, its attention kernel's reproducer written to DIR/<kernel>.torch.json, the path printed.
-- Then `emmy run --ir DIR/<kernel>.torch.json --bind seq_len=N --sweep 20` checks its candidates against the CPU
-- reference on packed positions of seeded lengths (emmy.inputs).
local serve, compiler, kernels, graphjson = require "emmy.serve", require "emmy.compiler", require "emmy.kernels", require "emmy.graphjson"
local frontend = require "emmy.frontend"
local model, dir = arg[1] or "Qwen/Qwen3-Embedding-0.6B", assert(arg[2], "usage: varlen_repro.lua MODEL DIR")
local DYN = { "seq_len@input_ids:1", "seq_len@attention_mask:2", "seq_len@attention_mask:3", "seq_len@position_ids:1" }
local g = assert(serve.varlen_graph(frontend.load(model, { dynamic = DYN, hint = { "seq_len=512" } }).graph))
for _, p in ipairs(kernels.distinct(kernels.plan(compiler.run(g)))) do
  if p.kernel.kind == "attention" then
    local path = ("%s/%s.torch.json"):format(dir, p.kernel.name)
    assert(graphjson.write(p.kernel.repro, path))
    print(path)
    return
  end
end
error("no attention kernel in the varlen graph")
