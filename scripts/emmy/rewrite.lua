-- emmy.rewrite — rebuilds a graph node by node, letting a function replace any node with other ops.
-- fn(node, builder, args_by_name) returns the name of the value that stands for the node's result, or nil
-- to copy the node as it is. Names, provenance, symbols, inputs, outputs and meta are kept.
local ir = require "emmy.ir"

local M = {}

local B = {}
B.__index = B

-- name: the value's name (fresh: a suffix when taken); a stand-in is named after the node it stands for
-- (b:op(..., node.name)), so the rebuilt graph's names mean what the source graph's mean. Without a name, the
-- node's name with a suffix that no value of either graph has (the ops beside the stand-in).
function B:op(aten, args, name)
  local v, err = self.g:node(aten, self:map_args(args), { name = name and self:fresh(name) or self:aside(),
    module = self.cur.module, op = self.cur.src_op })
  if not v then error(err, 0) end
  return v
end

function B:dtype(v) return self.g:value(v).dtype end

function B:fresh(name)
  if not self.g:value(name) then return name end
  local i = 1
  while self.g:value(name .. "_" .. i) do i = i + 1 end
  return name .. "_" .. i
end

function B:aside()
  local i = 1
  while self.g:value(self.cur.name .. "_" .. i) or self.source:value(self.cur.name .. "_" .. i) do i = i + 1 end
  return self.cur.name .. "_" .. i
end

-- args may refer to old value names; map them to their stand-ins
function B:map_args(args)
  local out = {}
  for k, v in pairs(args) do
    if type(v) == "string" and self.map[v] then
      out[k] = self.map[v]
    elseif type(v) == "table" and v[1] ~= nil then
      local t = {}
      for i, x in ipairs(v) do t[i] = type(x) == "string" and self.map[x] or x end
      out[k] = t
    else
      out[k] = v
    end
  end
  return out
end

-- opts.drop_inputs: {name = true} of inputs left out (no node of the rebuilt graph may read them).
function M.rebuild(g, fn, opts)
  local drop = opts and opts.drop_inputs or {}
  local ng = ir.new(g:name())
  for k, v in pairs(g:meta()) do ng:meta(k, v) end
  for _, s in ipairs(g:symbols()) do
    if not s.derived then assert(ng:symbol(s.name, { hint = s.hint, min = s.min, max = s.max })) end
  end
  local b = setmetatable({ g = ng, source = g, map = {} }, B)
  for _, v in ipairs(g:inputs()) do
    if not drop[v.name] then
      assert(ng:input(v.name, v.dtype, v.shape, { kind = v.kind, weight = v.weight }))
      b.map[v.name] = v.name
    end
  end
  for _, n in ipairs(g:nodes()) do
    local a = {}
    for _, kv in ipairs(n.args) do a[kv[1]] = kv[2] end
    b.cur = n
    local ma = b:map_args(a)
    local r = fn(n, b, ma)
    if r then
      b.map[n.name] = r
    else
      local v, err = ng:node(n.op, ma, { name = b:fresh(n.name), module = n.module, op = n.src_op })
      if not v then error(err, 0) end
      b.map[n.name] = v
    end
  end
  for _, o in ipairs(g:outputs()) do assert(ng:output(b.map[o])) end
  return ng
end

return M
