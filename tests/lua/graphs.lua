-- graphs.lua — test graphs built with emmy.ir: op-level cases and a Llama/Qwen3-style decoder layer
-- (RMSNorm, q/k/v linears, per-head q/k norm, rotary embedding sliced by the symbolic seq_len, causal GQA
-- SDPA, o_proj, residual, SiLU-gated MLP). `layer(cfg)` builds both the small composite used against the
-- PyTorch oracle and the Qwen3-0.6B-sized layer used for the speed check.
local ir = require "emmy.ir"

local M = {}

local function node(g, op, args, name)
  return assert(g:node(op, args, { name = name }))
end
M.node = node

-- HF LlamaRMSNorm / Qwen3RMSNorm: computed in f32, cast back, times the weight.
function M.rmsnorm(g, x, w, eps, dtype, prefix)
  local x32 = node(g, "aten._to_copy.default", { self = x, dtype = "f32" })
  local sq = node(g, "aten.pow.Tensor_Scalar", { self = x32, exponent = 2 })
  local var = node(g, "aten.mean.dim", { self = sq, dim = { -1 }, keepdim = true })
  local ve = node(g, "aten.add.Tensor", { self = var, other = eps })
  local r = node(g, "aten.rsqrt.default", { self = ve })
  local y = node(g, "aten.mul.Tensor", { self = x32, other = r })
  local yc = node(g, "aten._to_copy.default", { self = y, dtype = dtype })
  return node(g, "aten.mul.Tensor", { self = w, other = yc })
end

-- rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2]); x*cos + rotate_half(x)*sin
function M.rope(g, x, cos, sin, D)
  local x1 = node(g, "aten.slice.Tensor", { self = x, dim = -1, start = 0, ["end"] = math.floor(D / 2) })
  local x2 = node(g, "aten.slice.Tensor", { self = x, dim = -1, start = math.floor(D / 2), ["end"] = D })
  local nx2 = node(g, "aten.neg.default", { self = x2 })
  local rot = node(g, "aten.cat.default", { tensors = { nx2, x1 }, dim = -1 })
  local a = node(g, "aten.mul.Tensor", { self = x, other = cos })
  local b = node(g, "aten.mul.Tensor", { self = rot, other = sin })
  return node(g, "aten.add.Tensor", { self = a, other = b })
end

-- cfg: hidden, heads, kv_heads, head_dim, inter, max_pos, eps, dtype, seq (a number = static, or
-- {name=, hint=, max=} = symbolic), qk_norm (Qwen3), mlp (bool), name
function M.layer(cfg)
  local g = ir.new(cfg.name or "layer")
  local dt = cfg.dtype or "bf16"
  local H, Hq, Hkv, D = cfg.hidden, cfg.heads, cfg.kv_heads, cfg.head_dim
  local S = cfg.seq
  if type(S) == "table" then
    assert(g:symbol(S.name, { hint = S.hint, min = 1, max = S.max }))
    S = S.name
  end
  local function param(name, shape) return assert(g:input(name, dt, shape, { kind = "param", weight = name })) end
  local x = assert(g:input("x", dt, { 1, S, H }))
  local ln1 = param("input_layernorm.weight", { H })
  local wq = param("self_attn.q_proj.weight", { Hq * D, H })
  local wk = param("self_attn.k_proj.weight", { Hkv * D, H })
  local wv = param("self_attn.v_proj.weight", { Hkv * D, H })
  local wo = param("self_attn.o_proj.weight", { H, Hq * D })
  local qn, kn
  if cfg.qk_norm then
    qn = param("self_attn.q_norm.weight", { D })
    kn = param("self_attn.k_norm.weight", { D })
  end
  local cos_t = param("rotary.cos", { cfg.max_pos, D })
  local sin_t = param("rotary.sin", { cfg.max_pos, D })
  local h = M.rmsnorm(g, x, ln1, cfg.eps, dt)
  local function heads(w, n)
    local p = node(g, "aten.linear.default", { input = h, weight = w })
    local v = node(g, "aten.view.default", { self = p, size = { 1, S, n, D } })
    return v
  end
  local q, k, v = heads(wq, Hq), heads(wk, Hkv), heads(wv, Hkv)
  if cfg.qk_norm then
    q = M.rmsnorm(g, q, qn, cfg.eps, dt)
    k = M.rmsnorm(g, k, kn, cfg.eps, dt)
  end
  q = node(g, "aten.transpose.int", { self = q, dim0 = 1, dim1 = 2 })
  k = node(g, "aten.transpose.int", { self = k, dim0 = 1, dim1 = 2 })
  v = node(g, "aten.transpose.int", { self = v, dim0 = 1, dim1 = 2 })
  local cos = node(g, "aten.slice.Tensor", { self = cos_t, dim = 0, start = 0, ["end"] = S })
  local sin = node(g, "aten.slice.Tensor", { self = sin_t, dim = 0, start = 0, ["end"] = S })
  cos = node(g, "aten.unsqueeze.default", { self = node(g, "aten.unsqueeze.default", { self = cos, dim = 0 }), dim = 1 })
  sin = node(g, "aten.unsqueeze.default", { self = node(g, "aten.unsqueeze.default", { self = sin, dim = 0 }), dim = 1 })
  q = M.rope(g, q, cos, sin, D)
  k = M.rope(g, k, cos, sin, D)
  local att = node(g, "aten.scaled_dot_product_attention.default",
    { query = q, key = k, value = v, is_causal = true, enable_gqa = Hq ~= Hkv })
  local at = node(g, "aten.transpose.int", { self = att, dim0 = 1, dim1 = 2 })
  local flat = node(g, "aten.reshape.default", { self = at, shape = { 1, S, Hq * D } })
  local o = node(g, "aten.linear.default", { input = flat, weight = wo })
  local h1 = node(g, "aten.add.Tensor", { self = x, other = o })
  local out = h1
  if cfg.mlp then
    local ln2 = param("post_attention_layernorm.weight", { H })
    local wg = param("mlp.gate_proj.weight", { cfg.inter, H })
    local wu = param("mlp.up_proj.weight", { cfg.inter, H })
    local wd = param("mlp.down_proj.weight", { H, cfg.inter })
    local h2 = M.rmsnorm(g, h1, ln2, cfg.eps, dt)
    local gt = node(g, "aten.linear.default", { input = h2, weight = wg })
    local up = node(g, "aten.linear.default", { input = h2, weight = wu })
    local act = node(g, "aten.mul.Tensor", { self = node(g, "aten.silu.default", { self = gt }), other = up })
    local dn = node(g, "aten.linear.default", { input = act, weight = wd })
    out = node(g, "aten.add.Tensor", { self = h1, other = dn })
  end
  assert(g:output(out))
  return g
end

-- The composite of the done-when list: RMSNorm, linear, rotary, causal GQA SDPA (symbolic seq_len).
function M.block()
  return M.layer { name = "block", hidden = 64, heads = 4, kv_heads = 2, head_dim = 16, inter = 96, max_pos = 64,
    eps = 1e-6, seq = { name = "seq_len", hint = 8, max = 64 }, qk_norm = true, mlp = true }
end

function M.qwen3_layer(seq)
  return M.layer { name = "qwen3_0.6b_layer", hidden = 1024, heads = 16, kv_heads = 8, head_dim = 128, inter = 3072,
    max_pos = 4096, eps = 1e-6, seq = seq or { name = "seq_len", hint = 512, max = 4096 }, qk_norm = true, mlp = true }
end

-- One graph per op of the vocabulary (small shapes, symbolic where the op allows it).
-- Each case: name, build(g) that declares inputs and returns the output value.
M.op_cases = {}
local function case(name, build) M.op_cases[#M.op_cases + 1] = { name = name, build = build } end
local function inp(g, name, dt, shape, kind) return assert(g:input(name, dt, shape, { kind = kind or "activation" })) end

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

return M
