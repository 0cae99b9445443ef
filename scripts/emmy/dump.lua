-- emmy.dump — the dump folder of a compile or run (docs/formats.md, "Dump layout"): numbered stage files
-- (00_graph.torch.json, one file per pass), and NN_lowering_cuda.kernels/ with each kernel's CUDA source
-- (.cu), reproducer (.torch.json) and summary (.txt: ops, shapes, which original torch ops it covers).
local cjson = require "cjson"
local graphjson = require "emmy.graphjson"
local sys = require "emmy.sys"

local M = {}
local D = {}
D.__index = D

function M.open(dir)
  local ok, err = sys.mkdir_p(dir)
  if not ok then error(err, 0) end
  return setmetatable({ dir = dir, n = 0 }, D)
end

-- Writes text (a string or a list of strings) to path, a file of a dump folder or another file a command
-- writes, through sys.write_file: the old file or the whole new one, never a mix; opts.sync (default false
-- here: a crash may lose a dump file, a failure never leaves a torn one). Raises "cannot write PATH: <OS
-- error>" (one line) when it cannot.
local function write(path, text, opts)
  local ok, err = sys.write_file(path, text, { sync = opts and opts.sync or false })
  if not ok then error(err, 0) end
end
M.write_file = write

function D:graph(stem, g)
  write(("%s/%s.torch.json"):format(self.dir, stem), graphjson.encode(g))
end

function D:stage(pass, ctx)
  self.n = self.n + 10
  if ctx.kernels then
    self.graph_after = ctx.graph
    local list = {}
    for _, k in ipairs(ctx.kernels) do
      list[#list + 1] = { name = k.name, kind = k.kind, anchor = k.anchor, nodes = k.nodes, outputs = k.outputs }
    end
    write(("%s/%02d_%s.json"):format(self.dir, self.n, pass.name), cjson.encode { pass = pass.name, kernels = list })
  else
    write(("%s/%02d_%s.torch.json"):format(self.dir, self.n, pass.name), graphjson.encode(ctx.graph))
  end
end

local function shape_str(s)
  local p = {}
  for i, d in ipairs(s) do p[i] = tostring(d) end
  return "[" .. table.concat(p, ", ") .. "]"
end

-- Writes the lowering folder; coverage of each original op is "full" when all its nodes are in the kernel.
function D:kernels(plans, sources)
  self.n = self.n + 10
  local kdir = ("%s/%02d_lowering_cuda.kernels"):format(self.dir, self.n)
  local okd, derr = sys.mkdir_p(kdir)
  if not okd then error(derr, 0) end
  self.kernel_dir = kdir
  local index, seen = {}, {}
  local kernels = require "emmy.kernels"
  for i, p in ipairs(plans) do
    local k = p.kernel
    local cov = kernels.coverage(self.graph_after, k)
    index[#index + 1] = { order = i, name = k.name, kind = k.kind, hash = k.hash, knobs = p.choice and p.choice.string,
      candidates = #p.candidates, outputs = k.outputs, coverage = cov }
    if not seen[k.name] then
      seen[k.name] = true
      local s = sources[k.name]
      write(kdir .. "/" .. k.name .. ".cu", s.src)
      write(kdir .. "/" .. k.name .. ".torch.json", graphjson.encode(k.repro))
      local lines = { ("kernel %s  kind %s  hash %s"):format(k.name, k.kind, k.hash),
        ("knobs  %s (%d candidates)"):format(p.choice and p.choice.string or "-", #p.candidates),
        ("launch grid %s  block %s"):format(table.concat(s.launch.grid, " x "), table.concat(s.launch.block, "x")), "", "reads:" }
      for _, v in ipairs(k.repro:inputs()) do lines[#lines + 1] = ("  %-48s %s %s"):format(v.name, v.dtype, shape_str(v.shape)) end
      lines[#lines + 1] = "writes:"
      for _, o in ipairs(k.outputs) do
        local v = k.repro:value(o)
        lines[#lines + 1] = ("  %-48s %s %s"):format(o, v.dtype, shape_str(v.shape))
      end
      lines[#lines + 1] = "ops:"
      for _, n in ipairs(k.repro:nodes()) do
        lines[#lines + 1] = ("  %-8s %-44s %s %s%s"):format(n.name, n.op, n.dtype, shape_str(n.shape), n.name == k.anchor and "  <- anchor" or "")
      end
      lines[#lines + 1] = "covers (original torch ops):"
      for _, c in ipairs(cov) do
        lines[#lines + 1] = ("  %-7s %s %s (%d ops)"):format(c.coverage, c.module or "?", c.op, c.nodes)
      end
      lines[#lines + 1] = "gates:"
      for _, v in ipairs(p.eval.verdicts) do
        lines[#lines + 1] = ("  %-20s %-7s %s (%s:%d)"):format(v.rule, v.ok and "ok" or "REFUSED", v.reason, v.file, v.line)
      end
      write(kdir .. "/" .. k.name .. ".txt", table.concat(lines, "\n") .. "\n")
    end
  end
  write(kdir .. "/kernels.json", cjson.encode { kernels = index })
end

return M
