-- emmy.dynamic — the --dynamic NAME@INPUT:DIM and --hint NAME=N options: which input dims of a model graph
-- are symbols. The layer graph has one input x [batch, seq, hidden]; the whole-model graph has input_ids
-- [batch, seq] and, when a spec names them, attention_mask [batch, 1, seq, seq] and position_ids [batch, seq].
local cli = require "emmy.cli"

local M = {}

M.DEFAULT_HINT = 512

-- Which dims of which inputs may be symbols, and what they are.
local FORMS = {
  layer = { x = { rank = 3, dims = { [0] = "batch", [1] = "seq" }, other = { [2] = "the hidden size" } } },
  whole = {
    input_ids = { rank = 2, dims = { [0] = "batch", [1] = "seq" } },
    attention_mask = { rank = 4, dims = { [0] = "batch", [2] = "seq", [3] = "seq" }, other = { [1] = "the broadcast head dim" } },
    position_ids = { rank = 2, dims = { [0] = "batch", [1] = "seq" } },
  },
}

local function names_of(form)
  local t = {}
  for k in pairs(FORMS[form]) do t[#t + 1] = k end
  table.sort(t)
  return table.concat(t, ", ")
end

-- Parses specs (list of strings) for form "layer" or "whole" with hints {NAME = N}.
-- Returns { seq = NAME|nil, batch = NAME|nil, inputs = {input = true}, symbols = {{name, hint}, …}, specs = {...} }.
-- Raises a usage error (exit 2) with one line for a malformed or inconsistent spec.
function M.parse(specs, hints, form)
  local f = FORMS[form]
  local out = { inputs = {}, symbols = {}, specs = {} }
  local role_sym = {}
  local mask_dims = {}
  for _, s in ipairs(specs or {}) do
    local name, input, dim = s:match("^([%a_][%w_]*)@([%a_][%w_]*):(%d+)$")
    if not name then cli.usage("--dynamic '%s' needs NAME@INPUT:DIM (e.g. seq_len@x:1)", s) end
    dim = tonumber(dim)
    local inp = f[input]
    if not inp then
      cli.usage("--dynamic '%s': the %s graph has no input '%s' (inputs: %s)", s, form == "layer" and "layer" or "whole-model",
        input, names_of(form))
    end
    if dim >= inp.rank then cli.usage("--dynamic '%s': %s has %d dims (0..%d)", s, input, inp.rank, inp.rank - 1) end
    local role = inp.dims[dim]
    if not role then
      cli.usage("--dynamic '%s': dim %d of %s is %s, which stays static", s, dim, input, inp.other and inp.other[dim] or "static")
    end
    if role_sym[role] and role_sym[role].name ~= name then
      cli.usage("--dynamic '%s': every %s dim must be the same symbol, but %s already is '%s'", s, role,
        role_sym[role].spec, role_sym[role].name)
    end
    for r, v in pairs(role_sym) do
      if r ~= role and v.name == name then
        cli.usage("--dynamic '%s': '%s' is already the %s dim (%s)", s, name, r, v.spec)
      end
    end
    if out.specs[s] then cli.usage("--dynamic '%s' is given twice", s) end
    out.specs[s] = true
    role_sym[role] = role_sym[role] or { name = name, spec = s }
    out[role] = name
    out.inputs[input] = true
    if input == "attention_mask" then mask_dims[dim] = true end
  end
  if form == "whole" and next(out.inputs) then
    if out.seq and not out.specs[out.seq .. "@input_ids:1"] then
      cli.usage("--dynamic: the sequence dim of input_ids must be dynamic too (%s@input_ids:1)", out.seq)
    end
    if out.inputs.attention_mask and out.seq and not (mask_dims[2] and mask_dims[3]) then
      cli.usage("--dynamic: attention_mask needs both of its sequence dims (%s@attention_mask:2 and :3)", out.seq)
    end
  end
  for _, role in ipairs { "batch", "seq" } do
    local name = out[role]
    if name then out.symbols[#out.symbols + 1] = { name = name, role = role, hint = M.DEFAULT_HINT } end
  end
  for k, v in pairs(hints or {}) do
    local hit = false
    for _, sym in ipairs(out.symbols) do
      if sym.name == k then
        sym.hint, hit = v, true
      end
    end
    if not hit then cli.usage("--hint %s=%d: there is no dynamic dim named '%s' (give --dynamic %s@INPUT:DIM)", k, v, k, k) end
    if v < 1 then cli.usage("--hint %s=%d must be at least 1", k, v) end
  end
  return out
end

return M
