-- models/decoder.lua — one builder for the Llama / Qwen2 / Qwen3 / Mistral decoder family, driven by a
-- normalized config (emmy.models.decoder_config). It writes the ATen ops Hugging Face's modules execute, in
-- the same order and dtypes, so the CPU reference equals transformers numerically:
--   RMSNorm in f32 then cast back, times the weight; q/k/v linears (+ bias for Qwen2); Qwen3's per-head
--   q_norm/k_norm before RoPE; RoPE from cos/sin tables (params computed from the config) sliced by the
--   symbolic seq_len or gathered by position_ids; SDPA with is_causal (or the given mask), GQA by
--   enable_gqa, scale head_dim^-0.5; o_proj; residual; SiLU(gate)·up; down; residual.
-- Whole model: input_ids -> embed_tokens -> layers -> norm (-> last-token pooling + L2 normalize).
-- One layer (--layer N): x -> layer N output.
local ir = require "emmy.ir"

local M = {}

local B = {}
B.__index = B

-- A graph under construction with a current provenance (module path, original torch op).
local function builder(name)
  return setmetatable({ g = ir.new(name), module = nil }, B)
end

function B:op(aten, args, src_op, name)
  local v, err = self.g:node(aten, args, { name = name, module = self.module, op = src_op })
  if not v then error(err, 0) end
  return v
end

function B:param(name, dtype, shape)
  local v, err = self.g:input(name, dtype, shape, { kind = "param", weight = name })
  if not v then error(err, 0) end
  return v
end

-- Hugging Face LlamaRMSNorm / Qwen3RMSNorm.forward
function B:rmsnorm(x, w, eps, dtype)
  local src = "RMSNorm"
  local x32 = self:op("aten._to_copy.default", { self = x, dtype = "f32" }, src)
  local sq = self:op("aten.pow.Tensor_Scalar", { self = x32, exponent = 2 }, src)
  local var = self:op("aten.mean.dim", { self = sq, dim = { -1 }, keepdim = true }, src)
  local ve = self:op("aten.add.Tensor", { self = var, other = eps }, src)
  local r = self:op("aten.rsqrt.default", { self = ve }, src)
  local y = self:op("aten.mul.Tensor", { self = x32, other = r }, src)
  local yc = self:op("aten._to_copy.default", { self = y, dtype = dtype }, src)
  return self:op("aten.mul.Tensor", { self = w, other = yc }, src)
end

function B:linear(x, w, b, name)
  return self:op("aten.linear.default", { input = x, weight = w, bias = b }, "torch.nn.functional.linear", name)
end

-- apply_rotary_pos_emb: x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2])
function B:rope(x, cos, sin, D)
  local src = "apply_rotary_pos_emb"
  local h = math.floor(D / 2)
  local x1 = self:op("aten.slice.Tensor", { self = x, dim = -1, start = 0, ["end"] = h }, src)
  local x2 = self:op("aten.slice.Tensor", { self = x, dim = -1, start = h, ["end"] = D }, src)
  local nx2 = self:op("aten.neg.default", { self = x2 }, src)
  local rot = self:op("aten.cat.default", { tensors = { nx2, x1 }, dim = -1 }, src)
  local a = self:op("aten.mul.Tensor", { self = x, other = cos }, src)
  local b = self:op("aten.mul.Tensor", { self = rot, other = sin }, src)
  return self:op("aten.add.Tensor", { self = a, other = b }, src)
end

-- cos/sin [B?, 1, S, D] from the tables: sliced by S, or gathered by position_ids [B, S].
function B:rope_tables(c, S, position_ids)
  local dt, D = c.dtype, c.head_dim
  local ct = self:param("rotary.cos", dt, { c.max_position_embeddings, D })
  local st = self:param("rotary.sin", dt, { c.max_position_embeddings, D })
  local function pick(t)
    if position_ids then
      local e = self:op("aten.embedding.default", { weight = t, indices = position_ids }, "rotary_emb")
      return self:op("aten.unsqueeze.default", { self = e, dim = 1 }, "rotary_emb")
    end
    local s = self:op("aten.slice.Tensor", { self = t, dim = 0, start = 0, ["end"] = S }, "rotary_emb")
    local u = self:op("aten.unsqueeze.default", { self = s, dim = 0 }, "rotary_emb")
    return self:op("aten.unsqueeze.default", { self = u, dim = 1 }, "rotary_emb")
  end
  local prev = self.module
  self.module = "model.rotary_emb"
  local cos, sin = pick(ct), pick(st)
  self.module = prev
  return cos, sin
end

-- One decoder layer: h -> h'. p = weight name prefix of the layer ("model.layers.3."), mod = its module path.
function B:layer(c, h, Bt, S, p, mod, cos, sin, mask)
  local dt, H, Hq, Hkv, D = c.dtype, c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim
  local function P(n, shape) return self:param(p .. n, dt, shape) end
  self.module = mod .. ".input_layernorm"
  local x = self:rmsnorm(h, P("input_layernorm.weight", { H }), c.rms_norm_eps, dt)
  self.module = mod .. ".self_attn"
  local function proj(n, rows, bias)
    self.module = mod .. ".self_attn." .. n
    local y = self:linear(x, P("self_attn." .. n .. ".weight", { rows, H }), bias and P("self_attn." .. n .. ".bias", { rows }) or nil)
    self.module = mod .. ".self_attn"
    return y
  end
  local q = proj("q_proj", Hq * D, c.qkv_bias)
  local k = proj("k_proj", Hkv * D, c.qkv_bias)
  local v = proj("v_proj", Hkv * D, c.qkv_bias)
  q = self:op("aten.view.default", { self = q, size = { Bt, S, Hq, D } }, "view")
  k = self:op("aten.view.default", { self = k, size = { Bt, S, Hkv, D } }, "view")
  v = self:op("aten.view.default", { self = v, size = { Bt, S, Hkv, D } }, "view")
  if c.qk_norm then
    self.module = mod .. ".self_attn.q_norm"
    q = self:rmsnorm(q, P("self_attn.q_norm.weight", { D }), c.rms_norm_eps, dt)
    self.module = mod .. ".self_attn.k_norm"
    k = self:rmsnorm(k, P("self_attn.k_norm.weight", { D }), c.rms_norm_eps, dt)
    self.module = mod .. ".self_attn"
  end
  q = self:op("aten.transpose.int", { self = q, dim0 = 1, dim1 = 2 }, "transpose")
  k = self:op("aten.transpose.int", { self = k, dim0 = 1, dim1 = 2 }, "transpose")
  v = self:op("aten.transpose.int", { self = v, dim0 = 1, dim1 = 2 }, "transpose")
  q = self:rope(q, cos, sin, D)
  k = self:rope(k, cos, sin, D)
  local att = self:op("aten.scaled_dot_product_attention.default", { query = q, key = k, value = v,
    attn_mask = mask, is_causal = mask == nil, enable_gqa = Hq ~= Hkv, scale = D ^ -0.5 },
    "torch.nn.functional.scaled_dot_product_attention")
  att = self:op("aten.transpose.int", { self = att, dim0 = 1, dim1 = 2 }, "transpose")
  att = self:op("aten.reshape.default", { self = att, shape = { Bt, S, Hq * D } }, "reshape")
  self.module = mod .. ".self_attn.o_proj"
  local o = self:linear(att, P("self_attn.o_proj.weight", { H, Hq * D }), c.o_bias and P("self_attn.o_proj.bias", { H }) or nil)
  self.module = mod
  local h1 = self:op("aten.add.Tensor", { self = h, other = o }, "residual_attn")
  self.module = mod .. ".post_attention_layernorm"
  local x2 = self:rmsnorm(h1, P("post_attention_layernorm.weight", { H }), c.rms_norm_eps, dt)
  local I = c.intermediate_size
  self.module = mod .. ".mlp.gate_proj"
  local gt = self:linear(x2, P("mlp.gate_proj.weight", { I, H }))
  self.module = mod .. ".mlp.up_proj"
  local up = self:linear(x2, P("mlp.up_proj.weight", { I, H }))
  self.module = mod .. ".mlp"
  local act = self:op("aten.silu.default", { self = gt }, "torch.nn.functional.silu")
  local gu = self:op("aten.mul.Tensor", { self = act, other = up }, "mul")
  self.module = mod .. ".mlp.down_proj"
  local dn = self:linear(gu, P("mlp.down_proj.weight", { H, I }))
  self.module = mod
  return self:op("aten.add.Tensor", { self = h1, other = dn }, "residual_mlp")
end

local function finite(x) return type(x) == "number" and x == x and x ~= math.huge and x ~= -math.huge end

-- The invariants the builder relies on, for a normalized config from any caller (emmy.models.decoder_config
-- checks a config.json with messages naming its fields): raises one line naming the field and its value.
local function check_config(c)
  for _, k in ipairs { "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings" } do
    local v = c[k]
    if not finite(v) or v < 1 or v ~= math.floor(v) or v > 2147483647 then
      error(("model config: %s = %s must be a positive integer"):format(k, tostring(v)), 0)
    end
  end
  if c.num_attention_heads % c.num_key_value_heads ~= 0 then
    error(("model config: %d attention heads are not a multiple of %d kv heads"):format(c.num_attention_heads,
      c.num_key_value_heads), 0)
  end
  if c.head_dim % 2 ~= 0 then error(("model config: head_dim %d must be even (RoPE)"):format(c.head_dim), 0) end
  if not (finite(c.rope_theta) and c.rope_theta > 0) then
    error(("model config: rope_theta = %s must be a number > 0"):format(tostring(c.rope_theta)), 0)
  end
  if not (finite(c.rms_norm_eps) and c.rms_norm_eps >= 0) then
    error(("model config: rms_norm_eps = %s must be a number >= 0"):format(tostring(c.rms_norm_eps)), 0)
  end
end

-- Builds the graph. opts: layer (N or nil for the whole model), prefix (checkpoint name prefix, "model." or
-- ""), seq_len, batch (static sizes), dyn (emmy.dynamic.parse result or nil), pool ("last" or nil),
-- name. Returns graph (or raises a one-line error string).
function M.build(c, opts)
  check_config(c)
  if c.sliding_window and c.sliding_window < c.max_position_embeddings then
    error(("sliding-window attention (window %d) is not supported"):format(c.sliding_window), 0)
  end
  local b = builder(opts.name or "model")
  local g = b.g
  local dyn = opts.dyn or { inputs = {}, symbols = {} }
  for _, s in ipairs(dyn.symbols) do
    local max = s.role == "seq" and c.max_position_embeddings or 65536
    local ok, err = g:symbol(s.name, { hint = s.hint, min = 1, max = max })
    if not ok then error(err, 0) end
  end
  local S = dyn.seq or opts.seq_len or 512
  local Bt = dyn.batch or opts.batch or 1
  if type(S) == "number" and S > c.max_position_embeddings then
    error(("--seq-len %d is over the model's max_position_embeddings %d"):format(S, c.max_position_embeddings), 0)
  end
  local pre = opts.prefix or ""
  local H = c.hidden_size
  if opts.layer then
    if opts.layer < 0 or opts.layer >= c.num_hidden_layers then
      error(("--layer %d: the model has layers 0..%d"):format(opts.layer, c.num_hidden_layers - 1), 0)
    end
    local x = assert(g:input("x", c.dtype, { Bt, S, H }))
    local cos, sin = b:rope_tables(c, S, nil)
    local out = b:layer(c, x, Bt, S, ("%slayers.%d."):format(pre, opts.layer), ("model.layers.%d"):format(opts.layer), cos, sin)
    assert(g:output(out))
    return g
  end
  local ids = assert(g:input("input_ids", "i64", { Bt, S }))
  local mask, pos
  if dyn.inputs.attention_mask then mask = assert(g:input("attention_mask", "bool", { Bt, 1, S, S })) end
  if dyn.inputs.position_ids then pos = assert(g:input("position_ids", "i64", { Bt, S })) end
  b.module = "model.embed_tokens"
  local emb = b:param(pre .. "embed_tokens.weight", c.dtype, { c.vocab_size, H })
  local h = b:op("aten.embedding.default", { weight = emb, indices = ids }, "torch.nn.functional.embedding")
  local cos, sin = b:rope_tables(c, S, pos)
  for l = 0, c.num_hidden_layers - 1 do
    h = b:layer(c, h, Bt, S, ("%slayers.%d."):format(pre, l), ("model.layers.%d"):format(l), cos, sin, mask)
  end
  b.module = "model.norm"
  h = b:rmsnorm(h, b:param(pre .. "norm.weight", c.dtype, { H }), c.rms_norm_eps, c.dtype)
  if opts.pool == "last" then
    b.module = "pooling"
    local last = type(S) == "number" and S - 1 or (S .. "-1")
    h = b:op("aten.select.int", { self = h, dim = 1, index = last }, "last_token_pool")
    local n = b:op("aten.linalg_vector_norm.default", { self = h, dim = { -1 }, keepdim = true }, "torch.nn.functional.normalize")
    local cl = b:op("aten.clamp_min.default", { self = n, min = 1e-12 }, "torch.nn.functional.normalize")
    local ex = b:op("aten.expand.default", { self = cl, size = { Bt, H } }, "torch.nn.functional.normalize")
    h = b:op("aten.div.Tensor", { self = h, other = ex }, "torch.nn.functional.normalize")
  end
  assert(g:output(h))
  return g
end

M.builder = builder

return M
