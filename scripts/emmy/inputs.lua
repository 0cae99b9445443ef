-- emmy.inputs — seeded random inputs for a graph at a binding: random, non-degenerate, never zeros.
-- Each input's stream is derived from (seed, input name), so a weight gets the same values in every graph
-- that names it. Floats: activations N(0, 1); params of rank >= 2 N(0, 1/sqrt(fan_in)); rank-1 params
-- N(1, 0.1) (norm scales). Integers feeding an embedding or index_select are uniform over the valid rows;
-- other integers uniform in [0, 16). A bool attention mask keeps key 0 for every query, so no row is empty.
local ref = require "emmy.ref"
local sys = require "emmy.sys"

local M = {}

-- Concrete shape of a graph value at binding bind.
function M.concrete_shape(g, shape, bind)
  local out = {}
  for i, d in ipairs(shape) do
    out[i] = type(d) == "number" and d or assert(g:eval(d, bind))
  end
  return out
end

local function int_ranges(g, bind)
  local hi, masks = {}, {}
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
  end
  return hi, masks
end

-- Returns {name = tensor} for every graph input.
function M.random(g, bind, seed)
  seed = seed or 0
  local hi, masks = int_ranges(g, bind)
  local out = {}
  for _, v in ipairs(g:inputs()) do
    local shape = M.concrete_shape(g, v.shape, bind)
    local s = (sys.fnv(v.name) + seed * 1000003) % 2 ^ 48
    local t
    if v.dtype == "bool" then
      t = ref.random("bool", shape, { seed = s })
      if masks[v.name] and #shape >= 1 then
        local S = shape[#shape]
        for i = 1, t:numel(), S do t:set(i, true) end
      end
    elseif v.dtype == "i32" or v.dtype == "i64" then
      t = ref.random(v.dtype, shape, { seed = s, lo = 0, hi = hi[v.name] or 16 })
    elseif v.kind == "param" and #shape >= 2 then
      t = ref.random(v.dtype, shape, { seed = s, std = 1 / math.sqrt(shape[#shape]) })
    elseif v.kind == "param" then
      t = ref.random(v.dtype, shape, { seed = s, mean = 1, std = 0.1 })
    else
      t = ref.random(v.dtype, shape, { seed = s })
    end
    out[v.name] = t
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
