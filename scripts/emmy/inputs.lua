-- emmy.inputs — seeded random inputs for a graph at a binding: random, non-degenerate, never zeros.
-- Each input's stream is derived from (seed, input name), so a weight gets the same values in every graph
-- that names it. Floats: activations N(0, 1); params of rank >= 2 N(0, 1/sqrt(fan_in)); rank-1 params
-- N(1, 0.1) (norm scales). Integers feeding an embedding or index_select are uniform over the valid rows;
-- other integers uniform in [0, 16), an attention's seq_pos packed sequences of seeded lengths. A bool attention
-- mask keeps key 0 for every query, so no row is empty.
local ref = require "emmy.ref"
local sys = require "emmy.sys"

local M = {}

-- ref.random, ref.tensor: a tensor the machine cannot hold raises one line (emmy.ref); this returns it as
-- nil, msg, 1 (a runtime failure: cli.check exits 1).
local function new_tensor(name, fn, ...)
  local ok, t = pcall(fn, ...)
  if ok then return t end
  return nil, ("input '%s': %s"):format(name, tostring(t)), 1
end

-- Concrete shape of a graph value at binding bind.
function M.concrete_shape(g, shape, bind)
  local out = {}
  for i, d in ipairs(shape) do
    out[i] = type(d) == "number" and d or assert(g:eval(d, bind))
  end
  return out
end

local function int_ranges(g, bind)
  local hi, masks, seqpos = {}, {}, {}
  local function dim_of(name, k)
    local v = g:value(name)
    local d = v.shape[k]
    return type(d) == "number" and d or g:eval(d, bind)
  end
  for _, n in ipairs(g:nodes()) do
    local a = {}
    for _, kv in ipairs(n.args) do a[kv[1]] = kv[2] end
    if n.op == "aten.embedding.default" then
      hi[a.indices] = dim_of(a.weight, 1)
    elseif n.op == "aten.index_select.default" then
      local v = g:value(a.self)
      local d = a.dim or 0
      if d < 0 then d = d + #v.shape end
      hi[a.index] = dim_of(a.self, d + 1)
    elseif n.op == "aten.scaled_dot_product_attention.default" and type(a.attn_mask) == "string" then
      masks[a.attn_mask] = true
    end
    if n.op == "aten.scaled_dot_product_attention.default" and type(a.seq_pos) == "string" then seqpos[a.seq_pos] = true end
  end
  return hi, masks, seqpos
end

-- SDPA's seq_pos ([B or 1, L]): each row's position in its sequence, sequences of seeded lengths (1 to L/2 + 1,
-- first 1 to 64) packed end to end along L, the same in every batch row.
local function fill_seq_pos(t, shape, s)
  local L, x, p = shape[#shape], s % 2147483647 + 1, 0
  local left = 0
  for i = 1, L do
    if left == 0 then
      x = (x * 48271) % 2147483647
      left = 1 + x % (i == 1 and 64 or (math.floor(L / 2) + 1))
      p = 0
    end
    for b = 0, math.floor(t:numel() / L) - 1 do t:set(b * L + i, p) end
    p, left = p + 1, left - 1
  end
end

-- Inputs of a graph traced from a model (meta "model"): params from the model's weights (safetensors or
-- seeded random with HF's initializer statistics, rotary tables computed), input_ids uniform over the
-- vocabulary, position_ids 0..seq_len-1, attention_mask causal, x N(0, 1). opts.pad_rows: the mask also pads
-- the batch's rows to different lengths (M.pad_len: row b's last ⌊b·S / 2B⌋ keys masked, as a right-padded
-- tokenizer batch). Returns inputs, weights provider (describe says which weights), or nil, msg.
function M.for_model(g, bind, seed, opts)
  local frontend = require "emmy.frontend"
  local weights = require "emmy.weights"
  local model = frontend.model(g:meta("model"))
  model.cfg.native_dtype = model.cfg.dtype
  if g:meta("dtype") then model.cfg.dtype = g:meta("dtype") end
  local wseed = tonumber(g:meta("seed") or "0")
  local w, err = weights.open(model, { seed = wseed })
  if not w then return nil, err end
  local out, rerr, code = M.random(g, bind, seed, true)
  if not out then return nil, rerr, code end
  for _, v in ipairs(g:inputs()) do
    local shape = M.concrete_shape(g, v.shape, bind)
    if v.kind == "param" then
      local t, e2, c2 = w:get(v.weight or v.name, v.dtype, shape)
      if not t then return nil, e2, c2 end
      out[v.name] = t
    elseif v.name == "position_ids" then
      local t, terr, code = new_tensor(v.name, ref.tensor, v.dtype, shape)
      if not t then return nil, terr, code end
      local S = shape[#shape]
      for i = 1, t:numel() do t:set(i, (i - 1) % S) end
      out[v.name] = t
    elseif v.name == "attention_mask" and #shape == 4 then
      local t, terr, code = new_tensor(v.name, ref.tensor, v.dtype, shape)
      if not t then return nil, terr, code end
      M.fill_mask(t, shape, opts and opts.pad_rows)
      out[v.name] = t
    end
  end
  return out, w
end

-- Fills a [B, H, L, S] boolean attention mask: causal (key j seen by query i where j <= i), and with pad_rows
-- batch row b's keys from M.pad_len on masked too.
function M.fill_mask(t, shape, pad_rows)
  local L, S = shape[3], shape[4]
  local per_row = shape[2] * L * S
  for i = 1, t:numel() do
    local k, valid = (i - 1) % (L * S), S
    if pad_rows then valid = M.pad_len(math.floor((i - 1) / per_row), shape[1], S) end
    t:set(i, (k % S) <= math.floor(k / S) and (k % S) < valid)
  end
end

-- The keys batch row b (0-based) of B keeps under opts.pad_rows: S - ⌊b·S / 2B⌋ (row 0 whole, none below S/2).
function M.pad_len(b, B, S)
  return S - math.floor(b * S / (2 * B))
end

-- Inputs for any graph: from the model when it was traced from one, else seeded random (opts: M.for_model's).
function M.for_graph(g, bind, seed, opts)
  if g:meta("model") then return M.for_model(g, bind, seed, opts) end
  return M.random(g, bind, seed)
end

-- Returns {name = tensor} for every graph input (every activation only, with no_params), or nil, msg
-- when an input cannot be allocated (one line naming the input, its size and the machine's memory).
function M.random(g, bind, seed, no_params)
  seed = seed or 0
  local hi, masks, seqpos = int_ranges(g, bind)
  local out = {}
  local function random(dt, shape, o) return new_tensor(o.name, ref.random, dt, shape, o) end
  for _, v in ipairs(g:inputs()) do
    local shape = M.concrete_shape(g, v.shape, bind)
    local s = (sys.fnv(v.name) + seed * 1000003) % 2 ^ 48
    local t, err, code
    if no_params and v.kind == "param" then
      -- filled by the caller
    elseif v.dtype == "bool" then
      t, err, code = random("bool", shape, { seed = s, name = v.name })
      if t and masks[v.name] and #shape >= 1 then
        local S = shape[#shape]
        for i = 1, t:numel(), S do t:set(i, true) end
      end
    elseif v.dtype == "i32" or v.dtype == "i64" then
      t, err, code = random(v.dtype, shape, { seed = s, lo = 0, hi = hi[v.name] or 16, name = v.name })
      if t and seqpos[v.name] then fill_seq_pos(t, shape, s) end
    elseif v.kind == "param" and #shape >= 2 then
      t, err, code = random(v.dtype, shape, { seed = s, std = 1 / math.sqrt(shape[#shape]), name = v.name })
    elseif v.kind == "param" then
      t, err, code = random(v.dtype, shape, { seed = s, mean = 1, std = 0.1, name = v.name })
    else
      t, err, code = random(v.dtype, shape, { seed = s, name = v.name })
    end
    if err then return nil, err, code end
    if t then out[v.name] = t end
  end
  return out
end

-- Loads DIR/<name>.npy for every input.
function M.load(g, dir)
  local out = {}
  for _, v in ipairs(g:inputs()) do
    local t, err = ref.load(dir .. "/" .. v.name .. ".npy", v.dtype)
    if not t then return nil, err end
    out[v.name] = t
  end
  return out
end

return M
