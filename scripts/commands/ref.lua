-- emmy ref — run a graph on the CPU reference interpreter with seeded random (or given) inputs.
local cli = require "emmy.cli"
local graphjson = require "emmy.graphjson"
local inputs = require "emmy.inputs"
local ref = require "emmy.ref"
local sys = require "emmy.sys"
local tbl = require "emmy.tbl"
local show = require "emmy.show"

return {
  summary = "run a graph on the CPU reference (seeded random inputs), print or save the outputs",
  usage = [[usage: emmy ref FILE.torch.json [--bind NAME=N]… [--seed S] [--inputs DIR] [--save DIR] [--all]
                [--threads N] [--json]

  Runs the graph at a concrete binding of its symbols (each symbol's hint unless --bind gives a value),
  computing in f32 with f64 accumulation and rounding to bf16/f16 where the graph's dtypes say.
  Inputs are seeded random (activations N(0,1), weights N(0,1/sqrt(fan_in)), norm scales N(1,0.1), indices
  uniform over valid rows), or DIR/<input>.npy with --inputs. --save writes every input and output as
  DIR/<name>.npy (every intermediate value with --all). Prints each output's shape and statistics.]],
  run = function(argv)
    local opts, pos = cli.parse(argv, {
      flags = { ["--bind"] = { kind = "string", multi = true }, ["--seed"] = { kind = "int", default = 0 },
        ["--inputs"] = { kind = "string" }, ["--save"] = { kind = "string" }, ["--all"] = { kind = "bool" },
        ["--threads"] = { kind = "int", default = 0 }, ["--json"] = { kind = "bool" } },
      positional = { "file" }, required = { "file" }, usage = "emmy ref FILE.torch.json [--bind NAME=N]",
    }, "ref")
    local g = cli.check(graphjson.read(pos.file))
    local bind = cli.check(g:bind(cli.parse_binds(opts.bind)))
    local ins
    local provider
    if opts.inputs then ins = cli.check(inputs.load(g, opts.inputs)) else ins, provider = cli.check(inputs.for_graph(g, bind, opts.seed)) end
    local t0 = sys.clock()
    local outs = cli.check(ref.run(g, ins, { bind = bind, keep_all = opts.all, threads = opts.threads }))
    local dt = sys.clock() - t0
    if opts.save then
      cli.check(sys.mkdir_p(opts.save))
      for name, t in pairs(ins) do cli.must(t:save(opts.save .. "/" .. name .. ".npy")) end
      for name, t in pairs(outs) do cli.must(t:save(opts.save .. "/" .. name .. ".npy")) end
    end
    local rows, js = {}, {}
    for _, o in ipairs(g:outputs()) do
      local t = outs[o]
      local s = t:stats() -- in C: a Lua table of a large output's values would cost gigabytes
      rows[#rows + 1] = { o, t:dtype(), show.shape_str(t:shape()), ("%.4g"):format(s.mean), ("%.4g"):format(s.std),
        ("%.4g"):format(s.min), ("%.4g"):format(s.max), s.nonfinite }
      js[#js + 1] = { name = o, dtype = t:dtype(), shape = t:shape(), mean = s.mean, std = s.std, min = s.min,
        max = s.max, nonfinite = s.nonfinite }
    end
    if opts.json then
      print(require("cjson").encode { graph = g:name(), bind = bind, seconds = dt, outputs = js })
      return 0
    end
    local b = {}
    for k, v in pairs(bind) do b[#b + 1] = k .. "=" .. v end
    table.sort(b)
    print(("graph %s  at %s  CPU reference %.3f s"):format(g:name(), #b > 0 and table.concat(b, " ") or "static", dt))
    if g:meta("model") then
      print(("model %s, %s"):format(g:meta("model"), opts.inputs and ("inputs from " .. opts.inputs) or
        (type(provider) == "table" and provider.describe or "")))
    end
    print("")
    tbl.print { header = { "output", "dtype", "shape", "mean", "std", "min", "max", "non-finite" }, rows = rows,
      align = "lllrrrrr" }
    if opts.save then print("\nsaved inputs and outputs to " .. opts.save) end
    return 0
  end,
}
