-- emmy graph — read a graph JSON, check it, print its summary and structural hash, optionally rewrite it.
local cli = require "emmy.cli"
local graphjson = require "emmy.graphjson"
local show = require "emmy.show"

return {
  summary = "check a graph JSON, print its summary and hash, rewrite it canonically (-o)",
  usage = [[usage: emmy graph FILE.torch.json [-o OUT.torch.json] [--nodes] [--json]

  Reads the graph (docs/formats.md), runs shape and dtype inference on every node, and prints its name,
  structural hash, symbols, inputs, op counts and outputs. -o writes the canonical JSON (reading a file emmy
  wrote and writing it again gives the same bytes). --nodes lists every node. --json prints the summary as
  JSON. A malformed file is one line naming the file, the node and the problem; exit 2.]],
  run = function(argv)
    local opts, pos = cli.parse(argv, {
      flags = { ["-o"] = { kind = "string" }, ["--nodes"] = { kind = "bool" }, ["--json"] = { kind = "bool" } },
      positional = { "file" }, required = { "file" }, usage = "emmy graph FILE.torch.json [-o OUT]",
    }, "graph")
    local g = cli.check(graphjson.read(pos.file))
    if opts.o then cli.must(graphjson.write(g, opts.o)) end
    if opts.json then
      print(require("cjson").encode(show.graph_summary(g)))
    else
      show.print_graph(g, { nodes = opts.nodes })
      if opts.o then print("wrote " .. opts.o) end
    end
    return 0
  end,
}
