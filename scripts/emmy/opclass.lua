-- emmy.opclass — how the compiler sees each op of the vocabulary: index remaps (views, free inside a
-- kernel), elementwise compute, gathers, generators, and the heavy anchors a kernel forms around.
local M = {}

M.VIEW = {
  ["aten.view.default"] = true, ["aten.reshape.default"] = true, ["aten._unsafe_view.default"] = true,
  ["aten.transpose.int"] = true, ["aten.t.default"] = true, ["aten.permute.default"] = true,
  ["aten.expand.default"] = true, ["aten.unsqueeze.default"] = true, ["aten.squeeze.dim"] = true,
  ["aten.slice.Tensor"] = true, ["aten.select.int"] = true, ["aten.contiguous.default"] = true,
  ["aten.clone.default"] = true,
}

-- The views whose result is a strided view of their input (no offset, no copy): what the emitter's strided-view
-- walk (src/emit.c ex_strided) follows back to a kernel input.
M.STRIDED_VIEW = {}
for _, op in ipairs { "aten.view.default", "aten.reshape.default", "aten._unsafe_view.default", "aten.transpose.int",
  "aten.t.default", "aten.permute.default", "aten.expand.default", "aten.unsqueeze.default", "aten.squeeze.dim" } do
  assert(M.VIEW[op])
  M.STRIDED_VIEW[op] = true
end

M.ELEMENTWISE = {
  ["aten.add.Tensor"] = true, ["aten.sub.Tensor"] = true, ["aten.mul.Tensor"] = true, ["aten.div.Tensor"] = true,
  ["aten.pow.Tensor_Scalar"] = true, ["aten.clamp_min.default"] = true, ["aten.neg.default"] = true,
  ["aten.reciprocal.default"] = true, ["aten.rsqrt.default"] = true, ["aten.sqrt.default"] = true,
  ["aten.exp.default"] = true, ["aten.silu.default"] = true, ["aten.sigmoid.default"] = true,
  ["aten.tanh.default"] = true, ["aten.cos.default"] = true, ["aten.sin.default"] = true,
  ["aten._to_copy.default"] = true, ["aten.cat.default"] = true, ["aten.embedding.default"] = true,
  ["aten.index_select.default"] = true, ["aten.arange.default"] = true, ["aten.arange.start"] = true,
}

M.CONTRACTION = {
  ["aten.linear.default"] = true, ["aten.mm.default"] = true, ["aten.bmm.default"] = true, ["aten.matmul.default"] = true,
}

M.REDUCTION = {
  ["aten.mean.dim"] = true, ["aten.sum.dim_IntList"] = true, ["aten.amax.default"] = true,
  ["aten.linalg_vector_norm.default"] = true, ["aten._softmax.default"] = true, ["aten.softmax.int"] = true,
}

M.ATTENTION = { ["aten.scaled_dot_product_attention.default"] = true }

function M.is_anchor(op) return M.CONTRACTION[op] or M.REDUCTION[op] or M.ATTENTION[op] end

-- Short names used in kernel names (k_<ops>_<hash6>), from a node's provenance or its ATen op.
local SRC = {
  ["RMSNorm"] = "rms_norm", ["apply_rotary_pos_emb"] = "rope", ["torch.nn.functional.linear"] = "linear",
  ["torch.nn.functional.scaled_dot_product_attention"] = "sdpa", ["torch.nn.functional.silu"] = "silu",
  ["residual"] = "add", ["residual_attn"] = "add", ["residual_mlp"] = "add", ["torch.nn.functional.embedding"] = "embedding", ["torch.nn.functional.normalize"] = "normalize",
  ["last_token_pool"] = "", ["rotary_emb"] = "", ["view"] = "", ["transpose"] = "", ["reshape"] = "",
}
local SKIP_OPS = { ["aten._to_copy.default"] = true }

function M.short_name(node)
  if node.src_op and SRC[node.src_op] ~= nil then return SRC[node.src_op] end
  if M.VIEW[node.op] or SKIP_OPS[node.op] then return "" end
  if node.src_op and node.src_op:match("^[%w_]+$") then return node.src_op end
  local base = node.op:match("^aten%.([%w_]+)%.") or node.op
  base = base:gsub("^_", "")
  if base == "scaled_dot_product_attention" then return "sdpa" end
  if base == "linalg_vector_norm" then return "norm" end
  return base
end

return M
