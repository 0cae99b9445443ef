-- emmy trace — build a model's (or one layer's) graph from its config and write the graph JSON.
local cli = require "emmy.cli"
local frontend = require "emmy.frontend"
local graphjson = require "emmy.graphjson"
local graphstats = require "emmy.graphstats"
local show = require "emmy.show"
local tbl = require "emmy.tbl"

return {
  summary = "build a model's or one layer's graph from its config.json, write the graph JSON, print a summary",
  usage = "usage: emmy trace MODEL [--layer N] [--dynamic NAME@INPUT:DIM]… [--hint NAME=N] [--seq-len L] [--batch B]\n" ..
    "                  [--pool last] [-o FILE.torch.json] [--json]\n\n" .. frontend.USAGE .. [[

  -o FILE              write the graph JSON (with op provenance: the HF module and torch op of every node)
  --json               print the summary as JSON
  Prints op counts, parameters, symbols, and FLOPs and bytes at the hint (or the static size).]],
  run = function(argv)
    local opts, pos = cli.parse(argv, {
      flags = frontend.merge_flags { ["-o"] = { kind = "string" }, ["--json"] = { kind = "bool" } },
      positional = { "model" }, required = { "model" }, usage = "emmy trace MODEL [--layer N] -o FILE",
    }, "trace")
    local r = frontend.load(pos.model, opts)
    local g = r.graph
    if opts.o then cli.must(graphjson.write(g, opts.o)) end
    local bind = cli.check(g:bind({}))
    local st = graphstats.compute(g, bind)
    local summary = show.graph_summary(g)
    if opts.json then
      print(require("cjson").encode { header = r.header, graph = summary, bind = bind, stats = st, file = opts.o })
      return 0
    end
    print(r.header)
    print(("graph %s  hash %s  %d nodes"):format(g:name(), g:hash(), summary.nodes))
    local b = {}
    for k, v in pairs(bind) do b[#b + 1] = ("%s=%d"):format(k, v) end
    table.sort(b)
    local at = r.static and "static size" or ("hint " .. table.concat(b, " "))
    print("")
    tbl.print { header = { "", "at " .. at }, align = "lr", rows = {
      { "FLOPs (causal attention counted once)", graphstats.human(st.flops, "FLOP") },
      { "  of which matmuls", graphstats.human(st.matmul_flops, "FLOP") },
      { "  of which attention", graphstats.human(st.attn_flops, "FLOP") },
      { "parameters", ("%s (%s)"):format(graphstats.human(st.params), graphstats.human(st.param_bytes, "B")) },
      { "rotary cos/sin tables (computed from the config)", graphstats.human(st.tables or 0, "B") },
      { "graph inputs + outputs", graphstats.human(st.io_bytes, "B") },
      { "unfused traffic (each op reads and writes once)", graphstats.human(st.traffic, "B") },
      { "minimum traffic (weights + inputs + outputs)", graphstats.human(st.param_bytes + st.io_bytes, "B") },
    } }
    if #summary.symbols > 0 then
      local rows = {}
      for _, y in ipairs(summary.symbols) do rows[#rows + 1] = { y.name, y.hint or "-", y.min, y.max } end
      print("")
      tbl.print { header = { "symbol", "hint", "min", "max" }, rows = rows, align = "lrrr" }
    end
    local rows = {}
    for _, v in ipairs(g:inputs()) do
      if v.kind ~= "param" then rows[#rows + 1] = { v.name, v.dtype, show.shape_str(v.shape) } end
    end
    print("")
    tbl.print { header = { "input", "dtype", "shape" }, rows = rows }
    rows = {}
    for _, o in ipairs(summary.ops) do rows[#rows + 1] = { o.op, o.count } end
    table.sort(rows, function(x, y) return x[2] > y[2] or (x[2] == y[2] and x[1] < y[1]) end)
    print("")
    tbl.print { header = { "op", "count" }, rows = rows, align = "lr" }
    rows = {}
    for _, o in ipairs(summary.outputs) do rows[#rows + 1] = { o.name, o.dtype, show.shape_str(o.shape) } end
    print("")
    tbl.print { header = { "output", "dtype", "shape" }, rows = rows }
    if opts.o then print("\nwrote " .. opts.o) end
    return 0
  end,
}
