-- emmy.graphstats — a graph's work at a binding: FLOPs (matmuls 2·M·N·K, attention's two products with the
-- causal half counted once, one per element elsewhere), parameter count and bytes, graph input/output bytes
-- and the unfused memory traffic (every non-view node reading its inputs and writing its output once).
local M = {}

local BYTES = { bf16 = 2, f16 = 2, f32 = 4, f64 = 8, i32 = 4, i64 = 8, bool = 1 }
local VIEWS = {
  ["aten.view.default"] = true, ["aten.reshape.default"] = true, ["aten._unsafe_view.default"] = true,
  ["aten.transpose.int"] = true, ["aten.t.default"] = true, ["aten.permute.default"] = true,
  ["aten.expand.default"] = true, ["aten.unsqueeze.default"] = true, ["aten.squeeze.dim"] = true,
  ["aten.slice.Tensor"] = true, ["aten.select.int"] = true,
}
M.VIEWS = VIEWS

local function numel(g, shape, bind)
  local n = 1
  for _, d in ipairs(shape) do n = n * (type(d) == "number" and d or g:eval(d, bind)) end
  return n
end

function M.compute(g, bind)
  local vals = {}
  local st = { flops = 0, params = 0, param_bytes = 0, io_bytes = 0, traffic = 0, matmul_flops = 0, attn_flops = 0 }
  for _, v in ipairs(g:inputs()) do
    local n = numel(g, v.shape, bind)
    vals[v.name] = { n = n, bytes = n * BYTES[v.dtype], shape = v.shape }
    if v.kind == "param" and v.name:match("^rotary%.") then
      st.tables = (st.tables or 0) + n * BYTES[v.dtype]
    elseif v.kind == "param" then
      st.params = st.params + n
      st.param_bytes = st.param_bytes + n * BYTES[v.dtype]
    else
      st.io_bytes = st.io_bytes + n * BYTES[v.dtype]
    end
  end
  local function dim(shape, i)
    local d = shape[i < 0 and #shape + 1 + i or i]
    return type(d) == "number" and d or g:eval(d, bind)
  end
  for _, n in ipairs(g:nodes()) do
    local out = numel(g, n.shape, bind)
    vals[n.name] = { n = out, bytes = out * BYTES[n.dtype], shape = n.shape }
    local a = {}
    for _, kv in ipairs(n.args) do a[kv[1]] = kv[2] end
    local f = 0
    if n.op == "aten.linear.default" then
      f = 2 * out * dim(vals[a.weight].shape, -1)
      st.matmul_flops = st.matmul_flops + f
    elseif n.op == "aten.mm.default" or n.op == "aten.bmm.default" or n.op == "aten.matmul.default" then
      f = 2 * out * dim(vals[a.self].shape, -1)
      st.matmul_flops = st.matmul_flops + f
    elseif n.op == "aten.scaled_dot_product_attention.default" then
      local q, k = vals[a.query].shape, vals[a.key].shape
      local L, S, E = dim(q, -2), dim(k, -2), dim(q, -1)
      local Ev = dim(n.shape, -1)
      local heads = out / (L * Ev)
      local pairs_ = a.is_causal == true and (L * S - L * (L - 1) / 2) or L * S
      f = heads * pairs_ * 2 * (E + Ev)
      st.attn_flops = st.attn_flops + f
    elseif not VIEWS[n.op] then
      f = out
    end
    st.flops = st.flops + f
    if not VIEWS[n.op] then
      local reads = 0
      for _, kv in ipairs(n.args) do
        local v = kv[2]
        if type(v) == "string" and vals[v] then reads = reads + vals[v].bytes end
        if type(v) == "table" then
          for _, x in ipairs(v) do if type(x) == "string" and vals[x] then reads = reads + vals[x].bytes end end
        end
      end
      st.traffic = st.traffic + reads + out * BYTES[n.dtype]
    end
  end
  for _, o in ipairs(g:outputs()) do st.io_bytes = st.io_bytes + vals[o].bytes end
  return st
end

function M.human(n, unit)
  local s = { "", "K", "M", "G", "T", "P" }
  local i = 1
  while math.abs(n) >= 1000 and i < #s do n, i = n / 1000, i + 1 end
  return ("%.3g %s%s"):format(n, s[i], unit or "")
end

return M
