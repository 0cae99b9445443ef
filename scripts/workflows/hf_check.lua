-- workflows/hf_check.lua — checks emmy's graph of a model against Hugging Face transformers.
--   emmy scripts/workflows/hf_check.lua --model M [--layer N] [--whole] [--seq-lens 37,512] [--dir D]
--                                       [--python python3] [--device cuda|cpu] [--no-run]
-- Traces the layer (seq_len@x:1) and/or the whole model (the four whole-model dynamic specs), writes the
-- model's weights (random with HF's initializer statistics, or the real ones) as D/model.safetensors with
-- its config.json, runs emmy's CPU reference at each seq_len on seeded random inputs (random token ids, never
-- zeros), saves inputs and outputs, then runs tools/torchref/hf_check.py on D, which loads the same weights
-- into transformers and compares. --no-run stops before Python (the folder is ready for it).
local cli = require "emmy.cli"
local cjson = require "cjson"
local frontend = require "emmy.frontend"
local inputs = require "emmy.inputs"
local ref = require "emmy.ref"
local sys = require "emmy.sys"
local st = require "emmy.safetensors"

local opts = cli.parse(arg, { flags = {
  ["--model"] = { kind = "string", default = "Qwen/Qwen3-Embedding-0.6B" }, ["--layer"] = { kind = "int" },
  ["--whole"] = { kind = "bool" }, ["--seq-lens"] = { kind = "string", default = "37,512" },
  ["--dir"] = { kind = "string" }, ["--python"] = { kind = "string", default = "python3" },
  ["--device"] = { kind = "string" }, ["--no-run"] = { kind = "bool" }, ["--pool"] = { kind = "string" },
  ["--dtypes"] = { kind = "string", default = "bf16,f32" },
} }, "hf_check.lua")
if not opts.layer and not opts.whole then opts.layer = 0 end
local seqs = {}
for s in opts.seq_lens:gmatch("%d+") do seqs[#seqs + 1] = tonumber(s) end
local model = frontend.model(opts.model)
local dir = opts.dir or ("_tune/hf-check-" .. model.slug)
cli.check(sys.mkdir_p(dir))
local t0 = sys.clock()
local function say(fmt, ...) print(("[%6.1fs] " .. fmt):format(sys.clock() - t0, ...)) io.stdout:flush() end

local graphs = {}
for dt in opts.dtypes:gmatch("[%w]+") do
  if opts.layer then
    graphs[#graphs + 1] = { mode = "layer", dtype = dt,
      r = frontend.load(opts.model, { layer = opts.layer, dtype = dt, dynamic = { "seq_len@x:1" } }) }
  end
  if opts.whole then
    graphs[#graphs + 1] = { mode = "whole", dtype = dt, r = frontend.load(opts.model, { pool = opts.pool, dtype = dt,
      dynamic = { "seq_len@input_ids:1", "seq_len@attention_mask:2", "seq_len@attention_mask:3", "seq_len@position_ids:1" } }) }
  end
end

-- the weights, once, under their checkpoint names, for every graph
local weights = require("emmy.weights")
local w = cli.check(weights.open(model, {}))
say("%s: %s", opts.model, w.describe)
local ws, n, bytes = {}, 0, 0
for _, gr in ipairs(graphs) do
  local g = gr.r.graph
  for _, v in ipairs(g:inputs()) do
    if v.kind == "param" and not v.name:match("^rotary%.") and not ws[v.weight] then
      ws[v.weight] = cli.check(w:get(v.weight, model.cfg.dtype, v.shape))
      n, bytes = n + 1, bytes + ws[v.weight]:numel() * 2
    end
  end
end
cli.must(st.write(dir .. "/model.safetensors", ws, { format = "pt" })) -- transformers requires format=pt
cli.must(sys.write_file(dir .. "/config.json", cjson.encode(model.config)))
say("wrote %d weights (%.1f MB) to %s/model.safetensors", n, bytes / 1e6, dir)
ws = nil
collectgarbage()

local cases = {}
for _, gr in ipairs(graphs) do
  local g = gr.r.graph
  for _, S in ipairs(seqs) do
    local name = ("%s-%s-%s-seq%d"):format(model.slug, gr.mode == "layer" and ("layer" .. opts.layer) or "whole", gr.dtype, S)
    local bind = { seq_len = S }
    local ins = cli.check(inputs.for_graph(g, bind, S))
    local t1 = sys.clock()
    local outs = cli.check(ref.run(g, ins, { bind = bind }))
    local dt = sys.clock() - t1
    local case = { name = name, mode = gr.mode, layer = opts.layer, seq_len = S, pool = gr.mode == "whole" and opts.pool or nil,
      dtype = gr.dtype, inputs = {} }
    for _, v in ipairs(g:inputs()) do
      if v.kind ~= "param" then
        local f = name .. "." .. v.name .. ".npy"
        cli.must(ins[v.name]:save(dir .. "/" .. f))
        case.inputs[v.name] = f
      end
    end
    case.output = name .. ".out.npy"
    cli.must(outs[g:outputs()[1]]:save(dir .. "/" .. case.output))
    cases[#cases + 1] = case
    say("%s: CPU reference %.2f s", name, dt)
  end
end
cli.must(sys.write_file(dir .. "/cases.json", cjson.encode { model = opts.model, weights = w.describe, cases = cases }))
if opts.no_run then
  say("ready: %s %s/tools/torchref/hf_check.py %s", opts.python, EMMY_HOME, dir)
  return 0
end
local cmd = ("%s %s/tools/torchref/hf_check.py %s%s"):format(opts.python, EMMY_HOME, dir,
  opts.device and (" --device " .. opts.device) or "")
say("running %s", cmd)
local rc = os.execute(cmd)
if type(rc) == "number" and rc > 255 then rc = math.floor(rc / 256) end
say("results in %s/hf_check.json", dir)
return rc == 0 and 0 or 1
