-- emmy run — compile a model or graph and run it on the GPU, checking every kernel's output and the final
-- output against the CPU reference (seeded random, non-degenerate inputs; dtype-aware tolerance).
local cli = require "emmy.cli"
local compiler = require "emmy.compiler"
local frontend = require "emmy.frontend"
local inputs = require "emmy.inputs"
local kernels = require "emmy.kernels"
local gpu = require "emmy.gpu"
local dump = require "emmy.dump"
local ref = require "emmy.ref"
local sys = require "emmy.sys"
local tbl = require "emmy.tbl"
local bench = require "emmy.bench"

local function fmt_cmp(c)
  if not c then return "-", "-", "-" end
  return ("%.3g"):format(c.max_abs), ("%.3g"):format(c.max_rel), ("%d/%d"):format(c.mismatches, c.numel)
end


-- The flags and their combinations (a bad one is one usage line): opts, pos and --bench-backends parsed.
local function parse_args(argv)
  local opts, pos = cli.parse(argv, {
    flags = frontend.merge_flags { ["--bind"] = { kind = "string", multi = true }, ["--sweep"] = { kind = "int", default = 0, min = 0 },
      ["--kernel"] = { kind = "string" }, ["--dump-dir"] = { kind = "string" }, ["--json"] = { kind = "bool" },
      ["--ir"] = { kind = "string" }, ["--bench"] = { kind = "bool" }, ["--bench-backends"] = { kind = "string" }, ["--ab"] = { kind = "string", multi = true }, ["--pins"] = { kind = "string" }, ["--picks"] = { kind = "string" },
      ["--profile"] = { kind = "bool" }, ["--profile-sass"] = { kind = "int", default = 0, min = 0 }, ["--pad-rows"] = { kind = "bool" }, ["--clock-control"] = { kind = "string", default = "none" } },
    positional = { "input" }, usage = "emmy run INPUT [--seq-len N]",
  }, "run")
  if opts.ir and pos.input and opts.ir ~= pos.input then
    cli.usage("run: give the graph once: INPUT '%s' and --ir '%s'", pos.input, opts.ir)
  end
  pos.input = pos.input or opts.ir
  local bench_backends, berr = bench.parse_backends(opts.bench_backends)
  if not bench_backends then cli.usage("run: %s", berr) end
  if opts.bench_backends and not opts.bench then cli.usage("run: --bench-backends needs --bench") end
  if opts.clock_control ~= "none" and opts.clock_control ~= "base" then
    cli.usage("run: --clock-control %s (none or base)", opts.clock_control)
  end
  for _, spec in ipairs(opts.ab) do
    local okab, aerr = bench.parse_ab(spec)
    if not okab then cli.usage("run: %s", aerr) end
  end
  if opts.pins and #cli.knob_sets("run", "--pins", opts.pins) ~= 1 then
    cli.usage("run: --pins takes one set K=V,K=V (no ';'): '%s'", opts.pins)
  end
  if opts.ir and not opts.ir:match("%.json$") then
    cli.usage("run: --ir takes a .torch.json graph file, got '%s' (a model is given as INPUT)", opts.ir)
  end
  if not pos.input then cli.usage("run: missing INPUT (usage: emmy run INPUT|--ir FILE.json [--seq-len N])") end
  return opts, pos, bench_backends
end

-- --pins: the chosen variant of each kernel --kernel names (every kernel without it) with the set over it, as
-- `emmy compile --pins` and bench/gemm.lua --pins overlay (EMMY_KNOBS instead takes the rules' first candidate that
-- has the pins, which may differ from the chosen in other knobs); each pinned kernel's variant printed.
local function pin_plans(plans, opts)
  local sel = kernels.named(plans, opts.kernel)
  if #sel == 0 then cli.usage("run: --kernel '%s' matches no kernel", opts.kernel) end
  kernels.pin_choices(sel, cli.knob_sets("run", "--pins", opts.pins)[1])
  for _, p in ipairs(kernels.distinct(sel)) do print(("pinned: %s %s"):format(p.kernel.name, p.choice.string)) end
end

-- The graph (a model, a file) and its binds: --seq-len with --dynamic, --bind, a graph file's seq_len; --pad-rows's
-- conditions. Returns the frontend's result, the graph, the binds and their text.
local function load_graph(opts, pos)
  local seq_bind
  if #opts.dynamic > 0 and opts.seq_len then
    seq_bind, opts.seq_len = opts.seq_len, nil
  end
  local r = frontend.load(pos.input, opts, true)
  local g = r.graph
  local binds = cli.parse_binds(opts.bind)
  if seq_bind then binds[r.dyn.seq or "seq_len"] = seq_bind end
  if r.file and opts.seq_len then
    local has = false
    for _, y in ipairs(g:symbols()) do if y.name == "seq_len" and not y.derived then has = true end end
    if not has then cli.usage("--seq-len: the graph %s has no symbol seq_len (use --bind NAME=N)", r.file) end
    if binds.seq_len and binds.seq_len ~= opts.seq_len then cli.usage("--seq-len %d conflicts with --bind seq_len=%d", opts.seq_len, binds.seq_len) end
    binds.seq_len = opts.seq_len
  end
  local bind = cli.check(g:bind(binds))
  if opts.pad_rows then
    local m
    for _, v in ipairs(g:inputs()) do if v.name == "attention_mask" then m = v end end
    if not m or #m.shape ~= 4 then
      cli.usage("run: --pad-rows needs a whole model with its attention_mask an input (--dynamic seq_len@attention_mask:2 --dynamic seq_len@attention_mask:3)")
    end
    if (tonumber(m.shape[1]) or opts.batch) < 2 then cli.usage("run: --pad-rows pads the rows of a batch: give --batch 2 or more") end
    if opts.bench then cli.usage("run: --pad-rows is a check; --bench times torch on its own unpadded inputs") end
  end
  local b = {}
  for k2, v in pairs(bind) do b[#b + 1] = k2 .. "=" .. v end
  table.sort(b)
  return r, g, bind, b
end

-- Every kernel in order on the GPU, then each output against the reference (s: the run's state). Returns the
-- table's rows, the failures, the kernels that drifted in order and matched alone, and whether the GPU synced.
local function check_in_order(s)
  local cu, g, plans, order, by_name, bufs, ins, vals, bind = s.cu, s.g, s.plans, s.order, s.by_name, s.bufs, s.ins, s.vals, s.bind
  local failed = 0
  local rows = {}
  for i, p in ipairs(plans) do
    local e = by_name[p.kernel.name]
    local status = "ok"
    if e.error then status = e.error
    else
      local ok, lerr = gpu.launch(cu, p, e, bufs, bind)
      if not ok then status = "launch_fail: " .. lerr end
    end
    rows[i] = { i, p.kernel.name, p.choice.string, status }
    if status ~= "ok" then break end
  end
  local sok, serr = cu:sync()
  if not sok then
    print("GPU: " .. serr)
    failed = failed + 1
  end
  for _, p in ipairs(plans) do
    local e = by_name[p.kernel.name]
    local line = sok and e and not e.error and gpu.scratch_summary(bufs, p, e)
    if line then print(line) end
  end
  -- Each kernel's output against the reference. Run in order, a kernel reads what the GPU computed
  -- before it, so in a deep bf16 graph one-ulp differences travel (as between any two bf16
  -- implementations); a kernel that differs in order is run again alone on the reference's inputs, and
  -- only that isolated result decides it (a residual add's tolerance at its terms' magnitude, as the sweeps and the
  -- bench check a variant: gpu.check_output).
  local drifted = 0
  for i, p in ipairs(plans) do
    local row = rows[i]
    if row and row[4] == "ok" and sok then
      local worst
      for _, o in ipairs(p.kernel.outputs) do
        -- (a value a pass added beside a stand-in has no reference of its own: its readers' outputs check it)
        if vals[o] then
          local c, cerr = gpu.check(g, bufs, o, vals[o], bind)
          if not c then row[4] = cerr
          elseif not worst or not c.ok or c.max_rel > worst.max_rel then worst = c end
        end
      end
      if worst and not worst.ok then
        local e = by_name[p.kernel.name]
        local have = {}
        for name in pairs(ins) do have[name] = bufs[name] end
        local kb = gpu.upload_inputs(cu, p.kernel.repro, vals, nil, have)
        local ok, lerr = gpu.launch(cu, p, e, kb, bind)
        if ok then ok, lerr = cu:sync() end
        if not ok then row[4] = "launch_fail: " .. lerr
        else
          local iso
          for _, o in ipairs(p.kernel.outputs) do
            local c = gpu.check_output(p.kernel.repro, kb, o, vals, bind)
            if not iso or not c.ok or c.max_rel > iso.max_rel then iso = c end
          end
          if iso.ok then
            row[4] = "ok (alone)"
            drifted = drifted + 1
            worst = iso
          else
            row[4] = "wrong"
            worst = iso
          end
        end
      end
      row[5], row[6], row[7] = fmt_cmp(worst)
    end
    if row and not row[4]:match("^ok") then failed = failed + 1 end
  end
  return rows, failed, drifted, sok
end

-- --sweep N: N variants of each distinct kernel (--kernel: those named), each alone on the reference's inputs.
-- Returns the failures.
local function sweep_variants(s, opts)
  local cu, g, plans, order, by_name, bufs, ins, vals, bind = s.cu, s.g, s.plans, s.order, s.by_name, s.bufs, s.ins, s.vals, s.bind
  local failed = 0
  -- the sweep: N variants per distinct kernel, each alone on the reference's inputs
  if opts.sweep > 0 and not cu:lost() then
    local swl, who = {}, {}
    for _, p in ipairs(order) do
      if not opts.kernel or p.kernel.name:find(opts.kernel, 1, true) then
        for _, c in ipairs(kernels.sample(p.candidates, opts.sweep, opts.seed + 1)) do
          swl[#swl + 1] = { plan = p, knobs = c.knobs }
          who[#who + 1] = c.string
        end
      end
    end
    print(("\nsweep: %d variants of %d kernels"):format(#swl, #order))
    local sb = gpu.build(cu, swl, { progress = function(done, total)
      if done == total then io.stderr:write(("  compiled %d variants\n"):format(total)) end
    end })
    local per = {}
    for i, it in ipairs(swl) do
      local p, e = it.plan, sb[i]
      local name = p.kernel.name
      -- one line before each launch, so a variant that never finishes is named by the log's last line
      io.stderr:write(("  sweep %d/%d %s %s\n"):format(i, #swl, name, who[i]))
      per[name] = per[name] or { ok = 0, bad = {} }
      local status = e.error
      if not status then
        local kb = gpu.upload_inputs(cu, p.kernel.repro, vals, ins)
        local ok, lerr = gpu.launch(cu, p, e, kb, bind)
        if ok then ok, lerr = cu:sync() end
        if not ok then status = "launch_fail: " .. lerr
        else
          local _, why = gpu.check_outputs(p.kernel.repro, kb, vals, bind)
          status = why
        end
      end
      if status then per[name].bad[#per[name].bad + 1] = who[i] .. " " .. status
      else per[name].ok = per[name].ok + 1 end
      if cu:lost() then break end
    end
    local srows = {}
    for _, p in ipairs(order) do
      local st = per[p.kernel.name]
      if st then
        srows[#srows + 1] = { p.kernel.name, st.ok, #st.bad, st.bad[1] or "" }
        failed = failed + #st.bad
      end
    end
    tbl.print { header = { "kernel", "variants ok", "failed", "first failure" }, rows = srows, align = "lrrl" }
  end
  return failed
end

-- --ab: pinned variants beside each kernel's default (emmy.bench).
local function ab_rows(s, opts)
  local cu, g, plans, order, by_name, bufs, ins, vals, bind = s.cu, s.g, s.plans, s.order, s.by_name, s.bufs, s.ins, s.vals, s.bind
  -- --ab: pinned variants beside each kernel's default (emmy.bench)
  if #opts.ab > 0 and not cu:lost() then
    local picks = {}
    for _, p in ipairs(order) do picks[p.kernel.name] = not by_name[p.kernel.name].error and by_name[p.kernel.name] or nil end
    local abl = order
    if opts.kernel then
      abl = {}
      for _, p in ipairs(order) do if p.kernel.name:find(opts.kernel, 1, true) then abl[#abl + 1] = p end end
    end
    local rows = bench.ab { cu = cu, plans = abl, picks = picks, ins = ins, vals = vals, bind = bind, specs = opts.ab }
    bench.print_ab(rows)
    if opts.dump_dir then require("emmy.dump").write_file(opts.dump_dir .. "/63_ab.json", require("cjson").encode { ab = rows }) end
  end
end

-- --profile and --profile-sass: the graph's kernels under ncu (emmy.profile).
local function profiles(s, opts, r)
  local cu, g, plans, order, by_name, bufs, ins, vals, bind = s.cu, s.g, s.plans, s.order, s.by_name, s.bufs, s.ins, s.vals, s.bind
  -- the reproducer ncu re-runs (--profile, --profile-sass): the input's file, or the graph written to a temporary one
  -- (the second result: remove it after)
  local function repro_file()
    if r.file then return r.file, false end
    local file = os.tmpname() .. ".torch.json"
    cli.must(require("emmy.graphjson").write(g, file, { sync = false }))
    return file, true
  end
  -- --profile: the graph's kernels under ncu beside eager's and torch.compile's (emmy.profile)
  if opts.profile and not cu:lost() then
    local profile = require "emmy.profile"
    local file, temp = repro_file()
    local pr = profile.run { repro = file, graph = g, bind = bind, clock_control = opts.clock_control,
      value_of = function(name) return ins[name] end }
    if temp then os.remove(file) end
    profile.print(pr)
    if opts.dump_dir then
      profile.write(opts.dump_dir, pr)
      print(("profile files: %s/61_ncu_metrics.csv, 61_ncu_metrics.json"):format(opts.dump_dir))
    end
  end
  -- --profile-sass N: emmy's kernels' stall samples per SASS instruction (emmy.profile.sass)
  if (opts.profile_sass or 0) > 0 and not cu:lost() then
    local profile = require "emmy.profile"
    local file, temp = repro_file()
    io.stderr:write("  profile: emmy's kernels under ncu's source counters\n")
    local tables, csv, raw = profile.sass { repro = file, bind = bind, clock_control = opts.clock_control }
    if temp then os.remove(file) end
    if tables then profile.print_sass(tables, opts.profile_sass) else print("note: " .. csv) end
    if opts.dump_dir and (raw or tables) then
      require("emmy.dump").write_file(opts.dump_dir .. "/62_ncu_sass.csv", tables and csv or raw)
      print(("profile file: %s/62_ncu_sass.csv"):format(opts.dump_dir))
    end
  end
end

-- --bench: the whole graph and each kernel against torch eager and torch.compile (emmy.bench); rows: the check's.
local function bench_graph(s, opts, r, rows, ctx, bench_backends)
  local cu, g, plans, order, by_name, bufs, ins, vals, bind = s.cu, s.g, s.plans, s.order, s.by_name, s.bufs, s.ins, s.vals, s.bind
  -- --bench: the whole graph and each kernel against torch eager and torch.compile (emmy.bench)
  if opts.bench and not cu:lost() then
    local accuracy, picks = {}, {}
    for i, p in ipairs(plans) do
      local row = rows[i]
      local st = row and row[4] or "not run"
      if accuracy[p.kernel.name] == nil or not st:match("^ok") then accuracy[p.kernel.name] = st end
      picks[p.kernel.name] = not by_name[p.kernel.name].error and by_name[p.kernel.name] or nil
    end
    local be = bench_backends
    if be.emmy then
      for _, p in ipairs(plans) do
        if not picks[p.kernel.name] then
          be = { eager = be.eager, tcompile = be.tcompile }
          print(("bench: emmy not benched — %s did not build: %s"):format(p.kernel.name, by_name[p.kernel.name].error))
          break
        end
      end
    end
    local res = bench.run { cu = cu, g = g, graph_after = ctx.graph, plans = plans, picks = picks, accuracy = accuracy,
      ins = ins, vals = vals, bind = bind, at = bench.at(g, bind), backends = be,
      model = r.model and not r.file and { model = r.model, mode = opts.layer and "layer" or "whole", layer = opts.layer } or nil }
    bench.print(res)
    if opts.dump_dir then
      local extra = { sources = {}, repros = {}, verdicts = {} }
      for _, p in ipairs(order) do
        local e = by_name[p.kernel.name]
        extra.sources[p.kernel.name] = e.src
        extra.repros[p.kernel.name] = require("emmy.graphjson").encode(p.kernel.repro)
        extra.verdicts[p.kernel.name] = p.eval and p.eval.verdicts
      end
      bench.write(opts.dump_dir, res, extra)
      print(("bench files: %s/60_bench_compare.json, 62_kernel_bench.json, kernels.html"):format(opts.dump_dir))
    end
  end
end

return {
  summary = "run a model or graph on the GPU and check every kernel against the CPU reference",
  usage = "usage: emmy run INPUT|--ir FILE.json [trace flags] [--seq-len N | --bind NAME=N …] [--sweep N] [--kernel SUBSTR]\n" ..
    "                [--seed S] [--pad-rows] [--dump-dir D] [--bench [--bench-backends L]] [--picks FILE] [--pins K=V,…] [--ab K=V,…] [--profile]\n\n" .. frontend.USAGE .. [[

  --ir FILE.json       the graph to run given by name (a dump's <stage>.kernels/<kname>.torch.json
                       reproducer, or any .torch.json graph); the same as giving it as INPUT
  --seq-len N          with --dynamic: run at seq_len = N (the symbol's value); else the static length
  --bind NAME=N        bind a symbol of a graph file (default: its hint)
  --pad-rows           a whole model whose attention_mask is an input (--dynamic seq_len@attention_mask:2 …)
                       with --batch B > 1, or a kernel reproducer of one (its attention_mask [B, 1, S, S]):
                       batch row b's last ⌊b·S / 2B⌋ keys masked as well (a right-padded batch), so the masked
                       attention is checked on rows of different lengths (not with --bench)
  --sweep N            also run N knob assignments per distinct kernel (the chosen one and N-1 random legal
                       ones, seeded), each kernel alone on the reference's inputs
  --bench              then bench the whole graph and each kernel's reproducer in torch eager, torch.compile
                       and emmy (deploy regime: CUDA-graph replay, median with p20/p80, the same inputs; torch
                       through tools/torchref/bench.py with $EMMY_PYTHON), emmy's in-program time per kernel
                       from CUPTI; with --dump-dir also 60_bench_compare.json, 62_kernel_bench.json, kernels.html
  --bench-backends L   the backends to bench (default eager,tcompile,emmy)
  --picks FILE         a tune's picks (its tune.json, `emmy tune … --dump-dir D`): each kernel that is a tuned one
                       (the same name: the same sub-graph, so trace the model as the tune did) runs its pick instead
                       of the rules' choice; a line says how many took one and which picks found no kernel
  --pins "K=V,…"       run the chosen variant of each kernel --kernel names (all without it) with these knobs over
                       it (emmy compile --pins' overlay; EMMY_KNOBS takes the first candidate that has them instead)
  --ab "K=V,…"         (repeatable) also lower each kernel (those --kernel names) with these knobs pinned, check
                       it and time it alone beside its default: an "ab K=V,…" row, the differing knobs marked; a
                       pin a gate refuses (with the gate's reason), a knob the kernel lacks or a realized variant
                       that differs from the pins is a refused row, never benched (with --dump-dir: 63_ab.json)
  --profile            re-run the graph under Nsight Compute (ncu; EMMY_NCU names it): emmy's kernels and the
                       kernels eager and torch.compile launch for the same ops, one side-by-side table of duration,
                       achieved occupancy, SM / DRAM / tensor-pipe / FMA throughput, LSU instructions, shared bank
                       conflicts, registers (with --dump-dir: 61_ncu_metrics.csv and .json); counters not permitted
                       (ERR_NVGPUCTRPERM) is one line and the run goes on
  --profile-sass N     emmy's kernels under ncu's source counters (warp-state PC sampling), read back per SASS
                       instruction: the stall samples by opcode and the N instructions with the most, with their
                       reasons (with --dump-dir: 62_ncu_sass.csv, ncu's CSV as it came)
  --clock-control M    ncu's clock control for --profile: none (default: clocks left alone) or base
  Exit status 1 when any kernel or the final output mismatches.]],
  run = function(argv)
    local opts, pos, bench_backends = parse_args(argv)
    local r, g, bind, b = load_graph(opts, pos)
    print(r.header)
    local cu, err = require("emmy.cuda").open()
    if not cu then cli.fail("emmy run needs a GPU: %s", err) end
    local info = cu:info()
    local t0 = sys.clock()
    local ctx = compiler.run(g)
    local okp, plans = pcall(kernels.plan, ctx, { device = gpu.device(info) })
    if not okp then cli.usage("%s", tostring(plans)) end
    if opts.picks then print(kernels.picks_line(kernels.apply_picks(plans, cli.check(kernels.read_picks(opts.picks))), opts.picks)) end
    if opts.pins then pin_plans(plans, opts) end
    if opts.dump_dir then
      local d = dump.open(opts.dump_dir)
      local srcs = {}
      for _, p in ipairs(kernels.distinct(plans)) do
        local s, la = kernels.emit(p)
        srcs[p.kernel.name] = { src = s, launch = la }
      end
      d.graph_after = ctx.graph
      d:graph("00_graph", g)
      d:kernels(plans, srcs)
    end
    local t1 = sys.clock()
    local ins, provider = cli.check(inputs.for_graph(g, bind, opts.seed, { pad_rows = opts.pad_rows }))
    local vals = cli.check(ref.run(g, ins, { bind = bind, keep_all = true }))
    print(("at %s on %s; %s%s; planned in %.1f s, CPU reference %.1f s"):format(#b > 0 and table.concat(b, " ") or "static",
      info.name, type(provider) == "table" and provider.describe or "seeded random inputs", opts.pad_rows and "; padded rows" or "",
      t1 - t0, sys.clock() - t1))
    -- the chosen variant of every distinct kernel
    local order = kernels.distinct(plans)
    local list = {}
    for _, p in ipairs(order) do list[#list + 1] = { plan = p, knobs = p.choice.knobs } end
    local built = gpu.build(cu, list)
    for _, line in ipairs(kernels.pin_notes(plans)) do io.stderr:write(line, "\n") end
    local by_name = {}
    for i, p in ipairs(order) do by_name[p.kernel.name] = built[i] end
    local bufs = {}
    for name, t in pairs(ins) do bufs[name] = assert(cu:upload(t)) end
    local s = { cu = cu, g = g, plans = plans, order = order, by_name = by_name, bufs = bufs, ins = ins, vals = vals, bind = bind }
    local rows, failed, drifted, sok = check_in_order(s)
    print("")
    tbl.print { header = { "#", "kernel", "knobs", "status", "max abs", "max rel", "mismatches" },
      rows = rows, align = "rllllrr" }
    local final = g:outputs()[1]
    local fc = sok and bufs[final] and gpu.check(g, bufs, final, vals[final], bind)
    local rel = fc and gpu.rel_l2(g, bufs, final, vals[final], bind)
    -- the end-to-end output: element-wise within tolerance, or (deep bf16 graphs whose every kernel matched
    -- alone) a norm-relative drift under 3e-2
    local fin_ok = fc and (fc.ok or (rel < 3e-2 and failed == 0))
    local fa, fr, fm = fmt_cmp(fc)
    print(("\nfinal output %s: %s (max abs %s, max rel %s, %s outside tolerance; ||gpu-ref||/||ref|| %.3g)%s"):format(final,
      fin_ok and "matches the CPU reference" or "MISMATCH", fa, fr, fm, rel or 0,
      drifted > 0 and (" — %d kernels drifted in order and matched alone"):format(drifted) or ""))
    if not fin_ok then failed = failed + 1 end
    -- (each step checks its own flag and that the GPU is still there)
    failed = failed + sweep_variants(s, opts)
    ab_rows(s, opts)
    profiles(s, opts, r)
    bench_graph(s, opts, r, rows, ctx, bench_backends)
    print(("\n%s: %d kernels (%d distinct) at %s, %.1f s"):format(failed == 0 and "PASS" or "FAIL", #plans, #order,
      #b > 0 and table.concat(b, " ") or "static", sys.clock() - t0))
    return failed == 0 and 0 or 1
  end,
}
