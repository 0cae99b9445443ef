-- graphs.lua — test graphs: one small graph per op of the vocabulary, and decoder layers (the composite
-- block checked against the PyTorch oracle, a Qwen3-0.6B-sized layer for the speed check).
local ir = require "emmy.ir"

local M = {}

local decoder = require "models.decoder"

local function node(g, op, args, name)
  return assert(g:node(op, args, { name = name }))
end
M.node = node

-- A normalized decoder config (emmy.models.decoder_config's fields) for a layer of the given sizes.
local function cfg(t)
  return { model_type = "qwen3", hidden_size = t.hidden, intermediate_size = t.inter, num_hidden_layers = 1,
    num_attention_heads = t.heads, num_key_value_heads = t.kv_heads, head_dim = t.head_dim, vocab_size = 64,
    rms_norm_eps = 1e-6, rope_theta = 1e6, max_position_embeddings = t.max_pos, qk_norm = true, qkv_bias = false,
    o_bias = false, dtype = "bf16", initializer_range = 0.02 }
end

local function layer(name, c, hint)
  local dyn = { inputs = {}, seq = "seq_len", symbols = { { name = "seq_len", role = "seq", hint = hint } } }
  return decoder.build(c, { layer = 0, dyn = dyn, name = name })
end

-- The composite of the done-when list: RMSNorm, linear, Qwen3 q/k norm, RoPE sliced by the symbolic
-- seq_len, causal GQA SDPA (4 query / 2 kv heads), o_proj, residual and the SiLU-gated MLP, built by the
-- same decoder builder the model frontend uses.
function M.block()
  return layer("block", cfg { hidden = 64, heads = 4, kv_heads = 2, head_dim = 16, inter = 96, max_pos = 64 }, 8)
end

-- A Qwen3-0.6B-sized layer (hidden 1024, 16/8 heads of 128, MLP 3072).
function M.qwen3_layer()
  return layer("qwen3_0.6b_layer", cfg { hidden = 1024, heads = 16, kv_heads = 8, head_dim = 128, inter = 3072,
    max_pos = 4096 }, 512)
end

-- One graph per op of the vocabulary (small shapes, symbolic where the op allows it).
-- Each case: name, build(g) that declares inputs and returns the output value.
M.op_cases = {}
local function case(name, build) M.op_cases[#M.op_cases + 1] = { name = name, build = build } end
local function inp(g, name, dt, shape, kind) return assert(g:input(name, dt, shape, { kind = kind or "activation" })) end

-- The graph of op case c ({name, build}; tests/gpu/op_cases.lua's own cases too): build's value its output.
function M.case_graph(c)
  local g = ir.new(c.name)
  assert(g:output(c.build(g)))
  return g
end

local unary = { "neg", "reciprocal", "rsqrt", "sqrt", "exp", "silu", "sigmoid", "tanh", "cos", "sin" }
for _, u in ipairs(unary) do
  for _, dt in ipairs { "bf16", "f32" } do
    case(u .. "_" .. dt, function(g)
      local x = inp(g, "x", dt, { 3, 7 })
      if u == "rsqrt" or u == "sqrt" or u == "reciprocal" then
        x = node(g, "aten.add.Tensor", { self = node(g, "aten.mul.Tensor", { self = x, other = x }), other = 0.5 })
      end
      return node(g, "aten." .. u .. ".default", { self = x })
    end)
  end
end
for _, b in ipairs { "add", "sub", "mul", "div" } do
  case(b .. "_broadcast_bf16", function(g)
    local x, y = inp(g, "x", "bf16", { 2, 3, 5 }), inp(g, "y", "bf16", { 3, 1 })
    if b == "div" then y = node(g, "aten.add.Tensor", { self = node(g, "aten.mul.Tensor", { self = y, other = y }), other = 1 }) end
    return node(g, "aten." .. b .. ".Tensor", { self = x, other = y })
  end)
  case(b .. "_scalar_f32", function(g)
    return node(g, "aten." .. b .. ".Tensor", { self = inp(g, "x", "f32", { 4, 6 }), other = 0.37 })
  end)
end
case("add_alpha_promote", function(g)
  return node(g, "aten.add.Tensor", { self = inp(g, "x", "bf16", { 4, 6 }), other = inp(g, "y", "f32", { 6 }), alpha = 2 })
end)
case("mul_int_float", function(g)
  return node(g, "aten.mul.Tensor", { self = inp(g, "x", "i64", { 5 }), other = { float = 2 } })
end)
case("pow_clamp", function(g)
  local x = node(g, "aten.pow.Tensor_Scalar", { self = inp(g, "x", "f32", { 4, 5 }), exponent = 3 })
  return node(g, "aten.clamp_min.default", { self = x, min = -0.25 })
end)
case("mm_bf16", function(g) return node(g, "aten.mm.default", { self = inp(g, "a", "bf16", { 9, 33 }), mat2 = inp(g, "b", "bf16", { 33, 17 }) }) end)
case("bmm_f32", function(g) return node(g, "aten.bmm.default", { self = inp(g, "a", "f32", { 3, 5, 8 }), mat2 = inp(g, "b", "f32", { 3, 8, 4 }) }) end)
case("matmul_broadcast", function(g)
  return node(g, "aten.matmul.default", { self = inp(g, "a", "f32", { 2, 1, 5, 8 }), other = inp(g, "b", "f32", { 3, 8, 6 }) })
end)
case("matmul_vec", function(g) return node(g, "aten.matmul.default", { self = inp(g, "a", "f32", { 8 }), other = inp(g, "b", "f32", { 2, 8, 3 }) }) end)
case("matmul_vec_right", function(g) return node(g, "aten.matmul.default", { self = inp(g, "a", "f32", { 2, 3, 8 }), other = inp(g, "b", "f32", { 8 }) }) end)
case("matmul_dot", function(g) return node(g, "aten.matmul.default", { self = inp(g, "a", "f32", { 8 }), other = inp(g, "b", "f32", { 8 }) }) end)
case("linear_bias_sym", function(g)
  assert(g:symbol("n", { hint = 5, max = 32 }))
  return node(g, "aten.linear.default", { input = inp(g, "x", "bf16", { 2, "n", 24 }), weight = inp(g, "w", "bf16", { 12, 24 }, "param"),
    bias = inp(g, "b", "bf16", { 12 }, "param") })
end)
case("mean_sum_amax", function(g)
  local x = inp(g, "x", "f32", { 3, 4, 5 })
  local m = node(g, "aten.mean.dim", { self = x, dim = { 1, -1 }, keepdim = true })
  local s = node(g, "aten.sum.dim_IntList", { self = x, dim = { 2 } })
  local a = node(g, "aten.amax.default", { self = x, dim = { 2 }, keepdim = false })
  local t = node(g, "aten.add.Tensor", { self = s, other = a })
  return node(g, "aten.add.Tensor", { self = t, other = node(g, "aten.view.default", { self = m, size = { 3, 1 } }) })
end)
case("vector_norm_normalize", function(g)
  -- F.normalize(x, p=2, dim=-1) as PyTorch decomposes it
  local x = inp(g, "x", "bf16", { 3, 16 })
  local n = node(g, "aten.linalg_vector_norm.default", { self = x, dim = { -1 }, keepdim = true })
  local c = node(g, "aten.clamp_min.default", { self = n, min = 1e-12 })
  local e = node(g, "aten.expand.default", { self = c, size = { 3, 16 } })
  return node(g, "aten.div.Tensor", { self = x, other = e })
end)
case("mean_bf16_all", function(g) return node(g, "aten.mean.dim", { self = inp(g, "x", "bf16", { 6, 10 }), dim = ir.null }) end)
case("sum_int", function(g) return node(g, "aten.sum.dim_IntList", { self = inp(g, "x", "i32", { 4, 5 }), dim = { 1 } }) end)
case("softmax", function(g) return node(g, "aten._softmax.default", { self = inp(g, "x", "f32", { 3, 9 }), dim = -1, half_to_float = false }) end)
case("softmax_int_dtype", function(g) return node(g, "aten.softmax.int", { self = inp(g, "x", "bf16", { 3, 9 }), dim = 0, dtype = "f32" }) end)
case("sdpa_causal_gqa", function(g)
  assert(g:symbol("s", { hint = 6, max = 64 }))
  return node(g, "aten.scaled_dot_product_attention.default", { query = inp(g, "q", "bf16", { 1, 4, "s", 8 }),
    key = inp(g, "k", "bf16", { 1, 2, "s", 8 }), value = inp(g, "v", "bf16", { 1, 2, "s", 8 }), is_causal = true, enable_gqa = true })
end)
case("sdpa_mask_scale", function(g)
  return node(g, "aten.scaled_dot_product_attention.default", { query = inp(g, "q", "f32", { 2, 2, 5, 4 }),
    key = inp(g, "k", "f32", { 2, 2, 7, 4 }), value = inp(g, "v", "f32", { 2, 2, 7, 3 }), attn_mask = inp(g, "m", "bool", { 5, 7 }),
    scale = 0.3 })
end)
case("sdpa_float_mask", function(g)
  return node(g, "aten.scaled_dot_product_attention.default", { query = inp(g, "q", "f32", { 1, 2, 5, 4 }),
    key = inp(g, "k", "f32", { 1, 2, 5, 4 }), value = inp(g, "v", "f32", { 1, 2, 5, 4 }), attn_mask = inp(g, "m", "f32", { 1, 1, 5, 5 }) })
end)
case("cat_slice_select", function(g)
  assert(g:symbol("s", { hint = 7, max = 64 }))
  local x, y = inp(g, "x", "f32", { 2, "s", 4 }), inp(g, "y", "f32", { 2, 3, 4 })
  local c = node(g, "aten.cat.default", { tensors = { x, y }, dim = 1 })
  local s = node(g, "aten.slice.Tensor", { self = c, dim = 1, start = 1, ["end"] = "s+2", step = 2 })
  local t = node(g, "aten.slice.Tensor", { self = s, dim = -1, start = -3 })
  return node(g, "aten.select.int", { self = t, dim = 0, index = -1 })
end)
case("views", function(g)
  assert(g:symbol("s", { hint = 5, max = 64 }))
  local x = inp(g, "x", "f32", { 1, "s", 12 })
  local v = node(g, "aten.view.default", { self = x, size = { "s", 3, -1 } })
  local p = node(g, "aten.permute.default", { self = v, dims = { 2, 0, 1 } })
  local c = node(g, "aten.contiguous.default", { self = p })
  local r = node(g, "aten.reshape.default", { self = c, shape = { 4, "3*s" } })
  local t = node(g, "aten.t.default", { self = r })
  -- clone keeps t's strides in ATen, so only a contiguous copy may be viewed flat
  local u = node(g, "aten._unsafe_view.default", { self = node(g, "aten.contiguous.default", { self = node(g, "aten.clone.default", { self = t }) }), size = { -1 } })
  local e = node(g, "aten.expand.default", { self = node(g, "aten.unsqueeze.default", { self = u, dim = 0 }), size = { 2, -1 } })
  return node(g, "aten.squeeze.dim", { self = node(g, "aten.unsqueeze.default", { self = e, dim = -1 }), dim = 2 })
end)
case("embedding_index_select", function(g)
  assert(g:symbol("s", { hint = 6, max = 64 }))
  local w = inp(g, "w", "bf16", { 50, 8 }, "param")
  local ids = inp(g, "ids", "i64", { 1, "s" })
  local e = node(g, "aten.embedding.default", { weight = w, indices = ids })
  local pos = inp(g, "pos", "i64", { "s" })
  local tab = inp(g, "table", "f32", { 40, 8 }, "param")
  local r = node(g, "aten.index_select.default", { self = tab, dim = 0, index = pos })
  return node(g, "aten.add.Tensor", { self = e, other = r })
end)
case("arange_to_copy", function(g)
  assert(g:symbol("s", { hint = 9, max = 64 }))
  local a = node(g, "aten.arange.default", { ["end"] = "s" })
  local b = node(g, "aten.arange.start", { start = 2, ["end"] = "s+2", dtype = "f32" })
  local af = node(g, "aten._to_copy.default", { self = a, dtype = "f32" })
  local inv = inp(g, "inv_freq", "f32", { 4 }, "param")
  local o = node(g, "aten.mul.Tensor", { self = node(g, "aten.unsqueeze.default", { self = node(g, "aten.add.Tensor", { self = af, other = b }), dim = 1 }),
    other = inv })
  return node(g, "aten._to_copy.default", { self = node(g, "aten.cos.default", { self = o }), dtype = "bf16" })
end)

-- Two distinct kernels of a few candidates each (a pointwise silu·mul, a softmax row), written to path: what the
-- shard tests (tune --shard, slurm tune) split between their shards.
function M.two_kernels(path)
  local g = ir.new("two")
  local x = assert(g:input("x", "bf16", { 64, 256 }, { kind = "activation" }))
  local y = node(g, "aten.silu.default", { self = x }, "y")
  assert(g:output(node(g, "aten.mul.Tensor", { self = y, other = x }, "z")))
  local w = assert(g:input("w", "bf16", { 64, 128 }, { kind = "activation" }))
  assert(g:output(node(g, "aten._softmax.default", { self = w, dim = -1, half_to_float = false }, "s")))
  assert(require("emmy.graphjson").write(g, path))
  return path
end

return M
