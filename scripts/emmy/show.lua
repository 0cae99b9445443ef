-- emmy.show — human-readable summaries of graphs shared by commands (graph, ref, repl).
local tbl = require "emmy.tbl"

local M = {}

local function shape_str(shape)
  local p = {}
  for i, d in ipairs(shape) do p[i] = tostring(d) end
  return "[" .. table.concat(p, ", ") .. "]"
end
M.shape_str = shape_str

function M.graph_summary(g)
  local counts, order = {}, {}
  for _, n in ipairs(g:nodes()) do
    if not counts[n.op] then order[#order + 1] = n.op end
    counts[n.op] = (counts[n.op] or 0) + 1
  end
  local ops = {}
  for _, op in ipairs(order) do ops[#ops + 1] = { op = op, count = counts[op] } end
  local outs = {}
  for _, o in ipairs(g:outputs()) do
    local v = g:value(o)
    outs[#outs + 1] = { name = o, dtype = v.dtype, shape = v.shape }
  end
  local syms = {}
  for _, s in ipairs(g:symbols()) do if not s.derived then syms[#syms + 1] = s end end
  return { name = g:name(), hash = g:hash(), symbols = syms, inputs = g:inputs(), ops = ops,
    outputs = outs, nodes = g:counts().nodes, static = #syms == 0 }
end

function M.print_graph(g, opts)
  local s = M.graph_summary(g)
  print(("graph %s  hash %s  %d nodes  %s"):format(s.name, s.hash, s.nodes,
    s.static and "static" or "symbolic"))
  if #s.symbols > 0 then
    local rows = {}
    for _, y in ipairs(s.symbols) do
      rows[#rows + 1] = { y.name, y.hint or "-", y.min, y.max }
    end
    print("")
    tbl.print { header = { "symbol", "hint", "min", "max" }, rows = rows, align = "lrrr" }
  end
  local rows = {}
  for _, v in ipairs(s.inputs) do rows[#rows + 1] = { v.name, v.kind, v.dtype, shape_str(v.shape), v.weight or "" } end
  print("")
  tbl.print { header = { "input", "kind", "dtype", "shape", "weight" }, rows = rows }
  rows = {}
  for _, o in ipairs(s.ops) do rows[#rows + 1] = { o.op, o.count } end
  print("")
  tbl.print { header = { "op", "count" }, rows = rows, align = "lr" }
  if opts and opts.nodes then
    rows = {}
    for _, n in ipairs(g:nodes()) do
      local args = {}
      for _, kv in ipairs(n.args) do
        local v = kv[2]
        if type(v) == "table" then
          if v.float then v = tostring(v.float) .. ".0" else v = shape_str(v) end
        elseif type(v) == "userdata" then v = "None" end
        args[#args + 1] = kv[1] .. "=" .. tostring(v)
      end
      rows[#rows + 1] = { n.name, n.op, table.concat(args, " "), n.dtype, shape_str(n.shape) }
    end
    print("")
    tbl.print { header = { "value", "op", "args", "dtype", "shape" }, rows = rows }
  end
  rows = {}
  for _, o in ipairs(s.outputs) do rows[#rows + 1] = { o.name, o.dtype, shape_str(o.shape) } end
  print("")
  tbl.print { header = { "output", "dtype", "shape" }, rows = rows }
end

return M
