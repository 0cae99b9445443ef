-- emmy compile — the GPU-free half of the compiler: passes, kernel formation, tiling rules, CUDA emission
-- and (with --nvrtc) in-process compilation of every kernel.
local cli = require "emmy.cli"
local compiler = require "emmy.compiler"
local frontend = require "emmy.frontend"
local graphjson = require "emmy.graphjson"
local kernels = require "emmy.kernels"
local dump = require "emmy.dump"
local show = require "emmy.show"
local tbl = require "emmy.tbl"

local function passes_table()
  local rows = {}
  for _, p in ipairs(compiler.passes()) do rows[#rows + 1] = { p.file, p.name, p.summary or "" } end
  tbl.print { header = { "file", "pass", "what it does" }, rows = rows }
end

local function shapes(g, names)
  local out = {}
  for _, n in ipairs(names) do
    local v = g:value(n)
    out[#out + 1] = ("%s %s%s"):format(n, v.dtype, show.shape_str(v.shape))
  end
  return table.concat(out, ", ")
end


-- --nvrtc: compiles the variants of which ({plan, cand}, in order; sources: each distinct kernel's chosen variant,
-- emitted already) for dev, a chunk at a time in forked compiles; prints a row a variant (a summary a kernel with
-- many), writes --results. Returns the exit status (1 when a variant failed).
local function nvrtc_compile(which, sources, dev, opts)
  local nv = require "emmy.nvrtc"
  local sys = require "emmy.sys"
  if opts.shard then
    local total = #which
    which = kernels.shard(which, cli.check(kernels.parse_shard(opts.shard)))
    io.stderr:write(("shard %s: %d of %d variants\n"):format(opts.shard, #which, total))
  end
  -- emitted and compiled a chunk at a time, each result kept as its numbers only: every candidate's source
  -- (~9 KB) and cubin (~45 KB) held at once — Qwen3 layer 0 has 29,462 — is ~1.6 GB; a chunk at a time the
  -- process stays near 200 MB (measured, 2 cores). (It was not what limits the rate on a 32-core host:
  -- ~20 compiles a second there either way, docs/performance.md, eighth session.)
  local res, t0, last = {}, sys.clock(), 0
  local chunk = math.max(256, 16 * sys.nproc())
  for base = 1, #which, chunk do
    local jobs, at = {}, {}
    for i = base, math.min(#which, base + chunk - 1) do
      local w, p = which[i], which[i].plan
      local src, la
      if w.cand == p.choice then src, la = sources[p.kernel.name].src, sources[p.kernel.name].launch
      else src, la = kernels.emit(p, w.cand.knobs) end
      -- shared memory: ptxas's static bytes plus the launch's dynamic bytes (the cp.async ring)
      w.dyn = type(la) == "table" and la.smem or 0
      -- a forked compile with a deadline: a pathological variant becomes a timeout row, never a hang; a
      -- variant the emitter refuses is an emit_fail row (a gate or the resource check should have refused it)
      if src then
        jobs[#jobs + 1] = { source = src, arch = dev.arch, name = p.kernel.name .. ".cu",
          options = { "-std=c++17" }, timeout_ms = 120000 }
        at[#jobs] = i
      else
        res[i] = { status = "emit_fail", log = "error: " .. tostring(la) }
      end
    end
    -- (a SLURM task compiles on the CPUs it was given, not on every CPU of the node it shares)
    local compiled = nv.compile_many(jobs, { threads = tonumber(os.getenv("SLURM_CPUS_PER_TASK") or "") or 0, progress = function(done)
      local now = sys.clock()
      local d, total = base - 1 + done, #which
      if now - last > 3 or d == total then
        local left = d > 0 and d < total and (now - t0) / d * (total - d) or nil
        io.stderr:write(("  nvrtc %d/%d (%.1fs%s)\n"):format(d, total, now - t0,
          left and (", about %.0f s left"):format(left) or ""))
        last = now
      end
    end })
    if not compiled then cli.fail("NVRTC is not available") end
    for j, r2 in ipairs(compiled) do
      res[at[j]] = { status = r2.status, regs = r2.regs, spill_stores = r2.spill_stores, smem = r2.smem, ms = r2.ms,
        cache_hit = r2.cache_hit, log = r2.status ~= "ok" and r2.log or nil }
    end
    jobs, compiled = nil, nil
    collectgarbage()
  end
  local rows, bad = {}, 0
  local many = opts.all_variants or opts.sample
  -- with many variants per kernel: one summary row per kernel (ranges), then a row per failed variant
  local per, korder = {}, {}
  for i, r2 in ipairs(res) do
    local w = which[i]
    if r2.status ~= "ok" then bad = bad + 1 end
    if r2.smem then r2.smem = r2.smem + w.dyn end
    if not many or r2.status ~= "ok" then
      rows[#rows + 1] = { w.plan.kernel.name, w.cand.string, r2.status, r2.regs or "-", r2.spill_stores or "-",
        r2.smem or "-", ("%.0f"):format(r2.ms or 0), r2.cache_hit and "hit" or "" }
    end
    if many then
      local name = w.plan.kernel.name
      local a = per[name]
      if not a then
        a = { n = 0, ok = 0, hits = 0, ms = 0 }
        per[name] = a
        korder[#korder + 1] = name
      end
      a.n, a.ms = a.n + 1, a.ms + (r2.ms or 0)
      if r2.cache_hit then a.hits = a.hits + 1 end
      if r2.status == "ok" then
        a.ok = a.ok + 1
        local rg, sp, sm = r2.regs or 0, r2.spill_stores or 0, r2.smem or 0
        a.rlo, a.rhi = math.min(a.rlo or rg, rg), math.max(a.rhi or rg, rg)
        a.spill, a.spilled = math.max(a.spill or 0, sp), (a.spilled or 0) + (sp > 0 and 1 or 0)
        a.smem = math.max(a.smem or 0, sm)
      end
    end
    if r2.status ~= "ok" then io.stderr:write(("%s %s: %s\n"):format(w.plan.kernel.name, w.cand.string,
      (r2.log or ""):match("[^\n]*error[^\n]*") or r2.status)) end
  end
  print("")
  if many then
    local srows = {}
    for _, name in ipairs(korder) do
      local a = per[name]
      srows[#srows + 1] = { name, a.n, a.n - a.ok, a.rlo and (a.rlo == a.rhi and tostring(a.rlo) or (a.rlo .. "-" .. a.rhi)) or "-",
        a.spill and (a.spilled > 0 and ("%d (%d of %d)"):format(a.spill, a.spilled, a.ok) or "0") or "-", a.smem or "-", ("%.0f"):format(a.ms),
        ("%d/%d"):format(a.hits, a.n) }
    end
    tbl.print { header = { "kernel", "variants", "failed", "regs", "max spill B", "max smem B", "ms", "cache hits" },
      rows = srows, align = "lrrrrrrr" }
    if #rows > 0 then print("") end
  end
  if not many or #rows > 0 then
    tbl.print { header = { "kernel", "knobs", "status", "regs", "spill B", "smem B", "ms", "cache" }, rows = rows,
      align = "lllrrrrl" }
  end
  if opts.results then cli.must(sys.write_file(opts.results, kernels.results_jsonl(which, res))) end
  print(("\nNVRTC %s for %s: %d compiled, %d failed, %.1f s"):format(nv.version() or "?", dev.arch, #res - bad, bad,
    sys.clock() - t0))
  return bad > 0 and 1 or 0
end

return {
  summary = "compile a model or graph to kernels: passes, kernel/tile IR, CUDA source, gate verdicts (no GPU)",
  usage = "usage: emmy compile INPUT [trace flags] [--ir graph|kernel|tile|cuda] [--explain] [--kernel SUBSTR]\n" ..
    "                    [--passes] [--stop-after PASS] [--nvrtc] [--all-variants] [--dump-dir D] [-o FILE]\n\n" ..
    "  INPUT is a model (as for emmy trace) or a .torch.json graph.\n" .. frontend.USAGE .. [[

  --ir graph           the graph after the passes (JSON with -o)
  --ir kernel          each kernel: kind, anchor, ops, inputs -> outputs, the torch ops it covers
  --ir tile            each kernel's chosen knob assignment, candidate count and launch shape
  --ir cuda            each distinct kernel's CUDA source (the chosen variant; -o FILE writes them all)
  --explain            every tiling gate's verdict and reason, per kernel
  --kernel SUBSTR      only kernels whose name contains SUBSTR
  --pins "K=V,K=V"     the selected kernels' chosen knobs with these over them, a variant the rules need not list
                       (bench/gemm.lua --pins' overlay; --ir cuda and --nvrtc then show and compile it, e.g. STAMP=1)
  --passes             list the passes and stop; --stop-after PASS stops after that pass
  --nvrtc              compile each distinct kernel in-process (registers, spills, shared memory)
  --all-variants       with --nvrtc: compile every candidate, not only the chosen one
  --sample N           with --nvrtc: the chosen candidate and N-1 others drawn at random (seeded by --seed)
  --shard I/N          with --nvrtc: compile only shard I (0-based) of N of the variants — every N-th of the list
                       (kernel order, then candidate order) from the I-th, so N shards together compile each once
  --results FILE       with --nvrtc: one JSON line a variant (kernel, knobs, status, regs, spills, smem), sorted
  --variants-out FILE  with --nvrtc: write the variants it would compile (one JSON line each, in order) and stop
  --variants FILE      with --nvrtc: compile the variants of FILE (--variants-out's) without planning the model
                       again (emmy slurm compile's tasks: the submitter plans once)
  --dump-dir D         write the stage files (docs/formats.md: dump layout)
  Knob pins: EMMY_KNOBS="K=V,kname:K=V", EMMY_<KNOB>=V; a pin a gate refuses is an error naming the gate.
  Rules come from rules/tile/ (EMMY_RULES=DIR to use another folder); editing them needs no rebuild.]],
  run = function(argv)
    local opts, pos = cli.parse(argv, {
      flags = frontend.merge_flags { ["--ir"] = { kind = "string" }, ["--explain"] = { kind = "bool" },
        ["--kernel"] = { kind = "string" }, ["--passes"] = { kind = "bool" }, ["--stop-after"] = { kind = "string" },
        ["--nvrtc"] = { kind = "bool" }, ["--all-variants"] = { kind = "bool" }, ["--dump-dir"] = { kind = "string" },
        ["--sample"] = { kind = "int", min = 1 }, ["--shard"] = { kind = "string" }, ["--results"] = { kind = "string" },
        ["--variants"] = { kind = "string" }, ["--variants-out"] = { kind = "string" }, ["--pins"] = { kind = "string" },
        ["-o"] = { kind = "string" }, ["--json"] = { kind = "bool" } },
      positional = { "input" }, usage = "emmy compile INPUT [--ir graph|kernel|tile|cuda]",
    }, "compile")
    if opts.passes then
      passes_table()
      return 0
    end
    if not pos.input and opts.ir and opts.ir:match("%.json$") then
      cli.usage("compile: --ir names the IR to show (graph, kernel, tile, cuda); give the graph file as INPUT: emmy compile %s", opts.ir)
    end
    if not pos.input then cli.usage("compile: missing INPUT (usage: emmy compile INPUT [--ir kernel])") end
    for _, f in ipairs { "variants", "variants_out" } do
      if opts[f] and not opts.nvrtc then cli.usage("compile: --%s needs --nvrtc", (f:gsub("_", "-"))) end
    end
    if opts.variants and (opts.sample or opts.all_variants or opts.kernel or opts.variants_out) then
      cli.usage("compile: --variants names the variants itself (not with --sample, --all-variants, --kernel or --variants-out)")
    end
    if opts.ir and not ({ graph = true, kernel = true, tile = true, cuda = true })[opts.ir] then
      cli.usage("compile: --ir '%s': graph, kernel, tile or cuda", opts.ir)
    end
    local r = frontend.load(pos.input, opts)
    print(r.header)
    local d = opts.dump_dir and dump.open(opts.dump_dir)
    if d then d:graph("00_graph", r.graph) end
    local ok, ctx = pcall(compiler.run, r.graph, {
      stop_after = opts.stop_after,
      on_stage = function(p, c) if d then d:stage(p, c) end end,
    })
    if not ok then
      if cli.is_error(ctx) then error(ctx, 0) end -- a usage error (a bad EMMY_KNOBS item) keeps its exit code
      cli.fail("%s", tostring(ctx))
    end
    if opts.ir == "graph" or not ctx.kernels then
      if opts.o then cli.must(graphjson.write(ctx.graph, opts.o)) end
      show.print_graph(ctx.graph, { nodes = true })
      return 0
    end
    if opts.variants then
      -- the submitter's plan (emmy slurm compile): the listed variants over this model's kernels, not planned again
      local which = cli.check(kernels.read_variants(ctx, opts.variants))
      print(("%d variants from %s"):format(#which, opts.variants))
      return nvrtc_compile(which, {}, kernels.device(), opts)
    end
    local okp, plans, dev = pcall(kernels.plan, ctx)
    if not okp then cli.usage("%s", tostring(plans)) end
    local sel = kernels.named(plans, opts.kernel)
    if opts.kernel and #sel == 0 then cli.usage("--kernel '%s' matches no kernel", opts.kernel) end
    if opts.pins then
      local sets = cli.knob_sets("compile", "--pins", opts.pins)
      if #sets ~= 1 then cli.usage("compile: --pins takes one set K=V,K=V (no ';'): '%s'", opts.pins) end
      kernels.pin_choices(sel, sets[1])
    end
    print(("%d kernels (%d distinct), target %s%s"):format(#plans, #kernels.distinct(plans), dev.name,
      dev.assumed and " (no GPU here: the deploy target's limits)" or ""))
    -- emit every distinct chosen variant (the emitter refusing one is an error naming it)
    local sources = {}
    for _, p in ipairs(kernels.distinct(plans)) do
      local src, la = kernels.emit(p)
      if not src then cli.fail("%s", la) end
      sources[p.kernel.name] = { src = src, launch = la }
    end
    -- (after the emission: an error stays one line)
    for _, line in ipairs(kernels.pin_notes(plans)) do io.stderr:write(line, "\n") end
    if d then d:kernels(plans, sources) end
    if opts.explain then
      for _, p in ipairs(sel) do
        print(("\n%s  (%s)"):format(p.kernel.name, p.kernel.kind))
        local rows = {}
        for _, v in ipairs(p.eval.verdicts) do
          rows[#rows + 1] = { v.rule, v.family, v.ok and "ok" or "REFUSED", v.reason, ("%s:%d"):format(v.file, v.line) }
        end
        tbl.print { header = { "gate", "family", "verdict", "reason", "where" }, rows = rows, indent = "  " }
        print(("  %d candidates%s; chosen: %s"):format(#p.candidates,
          #p.eval.rejected > 0 and (", " .. #p.eval.rejected .. " rejected by the resource check") or "",
          p.choice and p.choice.string or "none"))
      end
    end
    if opts.ir == "kernel" or (not opts.ir and not opts.explain) then
      local rows = {}
      for i, p in ipairs(sel) do
        local k = p.kernel
        rows[#rows + 1] = { i, k.name, k.kind, k.anchor and k.repro:value(k.anchor) and
          (function() for _, n in ipairs(k.repro:nodes()) do if n.name == k.anchor then return n.op end end end)() or "-",
          #k.nodes, shapes(k.repro, k.outputs) }
      end
      tbl.print { header = { "#", "kernel", "kind", "anchor", "ops", "outputs" }, rows = rows, align = "rllllr" }
      if opts.ir == "kernel" then
        for _, p in ipairs(sel) do
          local k = p.kernel
          print(("\n%s  %s  hash %s"):format(k.name, k.kind, k.hash))
          print("  domain " .. kernels.domain_text(p.facts))
          local ins = {}
          for _, v in ipairs(k.repro:inputs()) do ins[#ins + 1] = v.name end
          print("  reads  " .. shapes(k.repro, ins))
          print("  writes " .. shapes(k.repro, k.outputs))
          for _, n in ipairs(k.repro:nodes()) do
            print(("    %-8s %-42s %s %s%s"):format(n.name, n.op, n.dtype, show.shape_str(n.shape),
              n.name == k.anchor and "   <- anchor" or ""))
          end
        end
      end
    end
    if opts.ir == "tile" then
      local rows = {}
      for _, p in ipairs(sel) do
        local s = sources[p.kernel.name]
        rows[#rows + 1] = { p.kernel.name, p.kernel.kind, #p.candidates, p.choice and p.choice.string or "-",
          table.concat(s.launch.grid, " x "), table.concat(s.launch.block, "x") }
      end
      tbl.print { header = { "kernel", "kind", "candidates", "chosen knobs", "grid", "block" }, rows = rows, align = "llrlll" }
    end
    if opts.ir == "cuda" then
      local texts = {}
      for _, p in ipairs(kernels.distinct(sel)) do texts[#texts + 1] = sources[p.kernel.name].src end
      if opts.o then
        cli.must(require("emmy.sys").write_file(opts.o, table.concat(texts, "\n")))
        print("wrote " .. opts.o)
      else
        print(table.concat(texts, "\n"))
      end
    end
    if opts.nvrtc then
      local which = kernels.variant_list(sel, opts)
      if opts.variants_out then
        cli.must(require("emmy.sys").write_file(opts.variants_out, kernels.variants_jsonl(which)))
        print(("wrote %s: %d variants"):format(opts.variants_out, #which))
        return 0
      end
      local rc = nvrtc_compile(which, sources, dev, opts)
      if rc ~= 0 then return rc end
    end
    if d then print("dump: " .. d.dir) end
    return 0
  end,
}
