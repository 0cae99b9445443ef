-- The model frontend: resolution order (folder, hub cache, shipped configs), weights (safetensors, sharded,
-- seeded random), dynamic specs and their errors, static vs dynamic graphs, RoPE alive in layer 0.
local cjson = require "cjson"
local ref = require "emmy.ref"
local inputs = require "emmy.inputs"
local graphjson = require "emmy.graphjson"

local T = {}
local function test(name, fn) T[#T + 1] = { name, fn } end

local QWEN = "Qwen/Qwen3-Embedding-0.6B"
local WHOLE_DYN = { "--dynamic", "seq_len@input_ids:1", "--dynamic", "seq_len@attention_mask:2", "--dynamic",
  "seq_len@attention_mask:3", "--dynamic", "seq_len@position_ids:1" }

local function one_line_exit2(argv, fragment, env)
  local code, out, err = emmy(argv, { env = env })
  eq(code, 2, table.concat(argv, " ") .. ": exit (" .. err .. ")")
  eq(#lines_of(err), 1, "one line: " .. err)
  check(err:find(fragment, 1, true), ("expected '%s' in: %s"):format(fragment, err))
  return err
end

-- A tiny Qwen3 config (2 layers) written to dir.
local TINY = { architectures = { "Qwen3ForCausalLM" }, model_type = "qwen3", hidden_size = 32, intermediate_size = 48,
  num_hidden_layers = 2, num_attention_heads = 4, num_key_value_heads = 2, head_dim = 8, hidden_act = "silu",
  max_position_embeddings = 128, rms_norm_eps = 1e-6, rope_theta = 10000, tie_word_embeddings = true,
  vocab_size = 50, attention_bias = false, torch_dtype = "bfloat16" }

local function tiny_dir(extra)
  local d = tmpdir()
  local c = {}
  for k, v in pairs(TINY) do c[k] = v end
  for k, v in pairs(extra or {}) do c[k] = v end
  write_file(d .. "/config.json", cjson.encode(c))
  return d
end

test("resolution: folder, hub cache, shipped; not found lists where", function()
  -- shipped
  local code, out = emmy { "trace", QWEN, "--layer", "0", "--seq-len", "16" }
  eq(code, 0, "shipped exit")
  check(out:find("(shipped)", 1, true), out)
  check(out:find("random weights", 1, true), out)
  -- hub cache wins over shipped; refs/main picks the snapshot
  local hf = tmpdir()
  local base = hf .. "/hub/models--Qwen--Qwen3-Embedding-0.6B"
  sh("mkdir -p " .. base .. "/snapshots/aaa " .. base .. "/snapshots/bbb " .. base .. "/refs")
  local cfg = read_file(ROOT .. "/models/Qwen--Qwen3-Embedding-0.6B/config.json")
  write_file(base .. "/snapshots/aaa/config.json", cfg)
  write_file(base .. "/snapshots/bbb/config.json", cfg)
  write_file(base .. "/refs/main", "aaa\n")
  code, out = emmy({ "trace", QWEN, "--layer", "0", "--seq-len", "16" }, { env = "HF_HOME=" .. hf })
  eq(code, 0, "hub exit")
  check(out:find("snapshots/aaa (hub)", 1, true), out)
  -- a folder path wins over everything
  local d = tiny_dir()
  code, out = emmy({ "trace", d, "--layer", "1", "--seq-len", "8" }, { env = "HF_HOME=" .. hf })
  eq(code, 0, "path exit")
  check(out:find("(path)", 1, true), out)
  -- not found
  local err = one_line_exit2({ "trace", "Nope/Missing-1B", "--layer", "0" }, "model 'Nope/Missing-1B' not found", "HF_HOME=" .. hf)
  check(err:find(hf .. "/hub/models--Nope--Missing-1B", 1, true), err)
  check(err:find("models/Nope--Missing-1B", 1, true), err)
  one_line_exit2({ "trace", "/no/such/dir" }, "/no/such/dir")
end)

test("shipped models trace offline: Qwen3 layer and whole, Llama layer and whole", function()
  local d = tmpdir()
  for _, m in ipairs { QWEN, "Qwen/Qwen3-0.6B", "Qwen/Qwen3-4B", "TinyLlama/TinyLlama-1.1B-Chat-v1.0" } do
    local code, out, err = emmy { "trace", m, "--layer", "0", "--dynamic", "seq_len@x:1", "-o", d .. "/l0.json" }
    eq(code, 0, m .. " layer: " .. err)
    check(out:find("dynamic: seq_len (hint 512)", 1, true), out)
    code, out, err = emmy(args("trace", m, WHOLE_DYN, "-o", d .. "/whole.json"))
    eq(code, 0, m .. " whole: " .. err)
    local g = assert(graphjson.read(d .. "/whole.json"))
    local names = {}
    for _, v in ipairs(g:inputs()) do if v.kind ~= "param" then names[#names + 1] = v.name end end
    eq(table.concat(names, ","), "input_ids,attention_mask,position_ids", m .. " whole-model inputs")
  end
  local code, out = emmy(args("trace", QWEN, WHOLE_DYN, "--pool", "last", "--json"))
  eq(code, 0, "pool")
  local doc = cjson.decode(out)
  eq(doc.graph.outputs[1].shape[2], 1024, "pooled embedding")
  eq(#doc.graph.outputs[1].shape, 2, "pooled rank")
end)

test("dynamic spec errors are one line, exit 2", function()
  local L = { "trace", QWEN, "--layer", "0" }
  one_line_exit2(args(L, "--dynamic", "seq_len@x"), "needs NAME@INPUT:DIM")
  one_line_exit2(args(L, "--dynamic", "seq_len@y:1"), "has no input 'y'")
  one_line_exit2(args(L, "--dynamic", "seq_len@x:3"), "x has 3 dims")
  one_line_exit2(args(L, "--dynamic", "seq_len@x:2"), "the hidden size")
  one_line_exit2(args(L, "--dynamic", "s@x:1", "--dynamic", "s@x:0"), "already the seq dim")
  one_line_exit2(args(L, "--dynamic", "seq_len@x:1", "--hint", "n=7"), "no dynamic dim named 'n'")
  one_line_exit2(args(L, "--dynamic", "seq_len@x:1", "--hint", "seq_len=x"), "needs NAME=INT")
  one_line_exit2(args(L, "--dynamic", "seq_len@x:1", "--seq-len", "64"), "conflicts")
  one_line_exit2(args(L, "--dynamic", "seq_len@x:1", "--hint", "seq_len=99999"), "hint 99999 outside [min 1, max 32768]")
  local W = { "trace", QWEN }
  one_line_exit2(args(W, "--dynamic", "seq_len@input_ids:1", "--dynamic", "n@position_ids:1"), "must be the same symbol")
  one_line_exit2(args(W, "--dynamic", "seq_len@position_ids:1"), "seq_len@input_ids:1")
  one_line_exit2(args(W, "--dynamic", "seq_len@input_ids:1", "--dynamic", "seq_len@attention_mask:2"), "both of its sequence dims")
  one_line_exit2(args(W, "--dynamic", "seq_len@attention_mask:1"), "broadcast head dim")
  one_line_exit2(args(W, "--dynamic", "seq_len@x:1"), "has no input 'x'")
  one_line_exit2(args(L, "9"), "unexpected argument")
  one_line_exit2({ "trace", QWEN, "--layer", "28" }, "layers 0..27")
  one_line_exit2({ "trace", QWEN, "--pool", "mean" }, "only 'last'")
  one_line_exit2({ "trace", QWEN, "--layer", "-1" }, "--layer needs an integer >= 0, got '-1'")
  one_line_exit2({ "trace", QWEN, "--batch", "0" }, "--batch needs an integer >= 1")
  one_line_exit2({ "trace", QWEN, "--seq-len", "0" }, "--seq-len needs an integer >= 1")
  one_line_exit2({ "compile", QWEN, "--nvrtc", "--sample", "0" }, "--sample needs an integer >= 1")
  one_line_exit2({ "run", QWEN, "--sweep", "-2" }, "--sweep needs an integer >= 0")
end)

test("static and dynamic graphs", function()
  local d = tmpdir()
  local code, out = emmy { "trace", QWEN, "--layer", "0", "-o", d .. "/s.json" }
  eq(code, 0, "static")
  check(out:find("static: seq_len 512, batch 1", 1, true), out)
  local gs = assert(graphjson.read(d .. "/s.json"))
  eq(#gs:symbols(), 0, "static has no symbols")
  eq(gs:value("x").shape[2], 512, "static seq")
  code, out = emmy { "trace", QWEN, "--layer", "0", "--dynamic", "seq_len@x:1", "--hint", "seq_len=384", "-o", d .. "/d.json" }
  eq(code, 0, "dynamic")
  local gd = assert(graphjson.read(d .. "/d.json"))
  eq(gd:symbols()[1].name, "seq_len", "symbol")
  eq(gd:symbols()[1].hint, 384, "hint")
  eq(gd:symbols()[1].max, 32768, "max = max_position_embeddings")
  eq(gd:value("x").shape[2], "seq_len", "dynamic seq")
  check(gs:hash() ~= gd:hash(), "static and dynamic differ")
  -- the same structure at another hint hashes the same (hints are not structure)
  code = emmy { "trace", QWEN, "--layer", "0", "--dynamic", "seq_len@x:1", "-o", d .. "/d2.json" }
  eq(assert(graphjson.read(d .. "/d2.json")):hash(), gd:hash(), "hint excluded from hash")
  -- layers share structure: layer 1 hashes like layer 0 (weights' names are not structure)
  code = emmy { "trace", QWEN, "--layer", "1", "--dynamic", "seq_len@x:1", "-o", d .. "/d3.json" }
  eq(assert(graphjson.read(d .. "/d3.json")):hash(), gd:hash(), "layer 1 = layer 0 structurally")
  -- ref says which weights and runs at a bound size
  code, out = emmy { "ref", d .. "/d.json", "--bind", "seq_len=7" }
  eq(code, 0, "ref")
  check(out:find("random weights", 1, true) and out:find("[1, 7, 1024]", 1, true), out)
  code, out = emmy { "ref", d .. "/s.json" }
  check(out:find("at static", 1, true), out)
end)

test("RoPE is alive in layer 0: rotated q differs from q at p > 0, equals it at p = 0", function()
  local d = tmpdir()
  local code = emmy { "trace", QWEN, "--layer", "0", "--dynamic", "seq_len@x:1", "-o", d .. "/l0.json" }
  eq(code, 0, "trace")
  local g = assert(graphjson.read(d .. "/l0.json"))
  local bind = { seq_len = 5 }
  local ins = assert(inputs.for_graph(g, bind, 1))
  local vals = assert(ref.run(g, ins, { bind = bind, keep_all = true }))
  -- the first apply_rotary_pos_emb: its slice reads q, its final add is rotated q
  local q_in, q_out
  for _, n in ipairs(g:nodes()) do
    if n.src_op == "apply_rotary_pos_emb" then
      if not q_in and n.op == "aten.slice.Tensor" then q_in = n.args[1][2] end
      if not q_out and n.op == "aten.add.Tensor" then q_out = n.name end
    end
  end
  check(q_in and q_out, "found the rotary nodes")
  local a, b = vals[q_in] or ins[q_in], vals[q_out]
  eq(table.concat(a:shape(), ","), "1,16,5,128", "q shape [1, heads, seq, head_dim]")
  local x, y = a:to_table(), b:to_table()
  local diff = { 0, 0, 0, 0, 0 }
  for i = 1, #x do
    local p = math.floor((i - 1) / 128) % 5
    diff[p + 1] = diff[p + 1] + math.abs(x[i] - y[i])
  end
  eq(diff[1], 0, "position 0 is not rotated")
  for p = 2, 5 do check(diff[p] > 1, ("position %d rotated (sum |diff| = %g)"):format(p - 1, diff[p])) end
end)

test("weights from safetensors, single and sharded; a wrong shape is one line", function()
  local st = require "emmy.safetensors"
  local d = tiny_dir()
  local code, out = emmy { "trace", d, "--layer", "1", "--seq-len", "6", "-o", d .. "/g.json" }
  eq(code, 0, "trace")
  local g = assert(graphjson.read(d .. "/g.json"))
  -- write every weight (random, seeded) as the checkpoint would hold it
  local ws, shard2 = {}, {}
  for _, v in ipairs(g:inputs()) do
    if v.kind == "param" and not v.name:match("^rotary") then
      local t = ref.random(v.dtype, v.shape, { seed = #ws + 1, std = 0.3 })
      ws[v.name] = t
      if v.name:match("mlp") then shard2[v.name] = t end
    end
  end
  check(ws["model.layers.1.self_attn.q_proj.weight"], "checkpoint names carry the model. prefix for *ForCausalLM")
  assert(st.write(d .. "/model.safetensors", ws))
  local r1
  code, out = emmy { "ref", d .. "/g.json", "--save", d .. "/o1" }
  eq(code, 0, "ref with weights: " .. out)
  check(out:find("weights from 1 safetensors file", 1, true), out)
  -- sharded: same tensors split over two files with an index
  local d2 = tiny_dir()
  local shard1, map = {}, {}
  for k, t in pairs(ws) do
    if not shard2[k] then shard1[k] = t end
    map[k] = shard2[k] and "model-00002-of-00002.safetensors" or "model-00001-of-00002.safetensors"
  end
  assert(st.write(d2 .. "/model-00001-of-00002.safetensors", shard1))
  assert(st.write(d2 .. "/model-00002-of-00002.safetensors", shard2))
  write_file(d2 .. "/model.safetensors.index.json", cjson.encode { metadata = {}, weight_map = map })
  code, out = emmy { "trace", d2, "--layer", "1", "--seq-len", "6", "-o", d2 .. "/g.json" }
  eq(code, 0, "trace sharded")
  code, out = emmy { "ref", d2 .. "/g.json", "--save", d2 .. "/o2" }
  eq(code, 0, "ref sharded: " .. out)
  check(out:find("weights from 2 safetensors file", 1, true), out)
  local out_name = g:outputs()[1]
  local a = assert(ref.load(d .. "/o1/" .. out_name .. ".npy", "bf16"))
  local b = assert(ref.load(d2 .. "/o2/" .. out_name .. ".npy", "bf16"))
  check(ref.compare(a, b, { rtol = 0, atol = 0 }).ok, "single and sharded give the same output")
  -- a weight of the wrong shape
  local d3 = tiny_dir()
  local bad = {}
  for k, t in pairs(ws) do bad[k] = t end
  bad["model.layers.1.mlp.up_proj.weight"] = ref.random("bf16", { 3, 3 }, { seed = 1 })
  assert(st.write(d3 .. "/model.safetensors", bad))
  code = emmy { "trace", d3, "--layer", "1", "--seq-len", "6", "-o", d3 .. "/g.json" }
  eq(code, 0, "trace")
  local c2, _, err = emmy { "ref", d3 .. "/g.json" }
  check(c2 ~= 0 and #lines_of(err) == 1 and err:find("has shape [3, 3]", 1, true), err)
  -- a broken index names the missing shard
  write_file(d2 .. "/model.safetensors.index.json", cjson.encode { weight_map = { x = "model-missing.safetensors" } })
  one_line_exit2({ "trace", d2, "--layer", "0" }, "model-missing.safetensors, which is missing")
end)

test("unsupported configs are one line", function()
  one_line_exit2({ "trace", tiny_dir { model_type = "gpt2" }, "--layer", "0" }, "model_type 'gpt2' is not supported")
  one_line_exit2({ "trace", tiny_dir { hidden_act = "gelu" }, "--layer", "0" }, "hidden_act 'gelu'")
  one_line_exit2({ "trace", tiny_dir { rope_scaling = { rope_type = "dynamic", factor = 2 } }, "--layer", "0" }, "rope_scaling type 'dynamic'")
  one_line_exit2({ "trace", tiny_dir { num_key_value_heads = 3 }, "--layer", "0" }, "not a multiple of 3 kv heads")
end)

return T
