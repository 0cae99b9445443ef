-- bench/gemm.lua — emmy's matrix multiplies against torch in one process: square bf16 GEMMs (4096³, 8192³: the
-- main loop alone; --squares also takes MxNxK, a plain linear of that shape) and the layer-0 projections of
-- Qwen3-Embedding-0.6B and TinyLlama-1.1B (with their fused epilogues) at 512 tokens (batch 1) and 4096 (batch 8 x
-- 512). For each contraction kernel: the chosen variant and every PERSIST=1 candidate (or --pins), each checked
-- against the CPU reference before it is timed (CUDA-graph replay, median of 50); with --torch the same reproducer
-- in torch eager (F.linear: cuBLAS), with --compile also in torch.compile (tens of seconds a kernel).
--   ./emmy bench/gemm.lua [--cases squares,qwen,llama,qwen4b] [--squares 4096,8192,MxNxK] [--batches 1,8] [--torch [--compile]] [--ceilings]
--                         [--all] [--limit N] [--match SETS] [--pins SETS] [--kernels SUBSTR,…] [--json FILE]
-- --all times every candidate of the wgmma tier (not only PERSIST=1); --limit caps the variants a kernel (with
-- --match: a kernel and set, so a broad first set cannot take every place);
-- --match "K=V,K=V;K=V" keeps the candidates whose knobs include every K=V of one of the ';'-separated sets;
-- --pins "K=V,K=V;K=V" adds each set over the chosen variant's knobs (a variant the rules need not list; an illegal
-- one is an error row; a DIAG=n set, the diagnostic knob of src/knobs.h, is printed on its own line and never the best,
-- timed unchecked where n is odd (no wgmma: wrong by design) and checked where it is 2 or 6); --kernels keeps only
-- the kernels whose names contain one of the substrings.
-- --stamp: each PERSIST=1 variant also as STAMP=1 (clock64 marks in its roles, src/emit_gemm_ws.c), checked and
-- timed like the others, then launched once more on a zeroed record and its cycles printed: per k-step the
-- consumers' full-barrier wait, wgmma issue to wait_group 1 and release, per tile their tail and epilogue, the
-- producer's empty-barrier wait and load issue, averaged over the CTAs, and the SM clock from cycles and µs; it
-- ends in a PASS/FAIL line (exit status 1 when a stamped variant was wrong or wrote no record).
-- --cold: also each variant with the L2 flushed before every launch (kernel durations by CUPTI; torch eager's
-- kernels with the same flush, by torch.profiler): the regime of a kernel in a model's program, whose weights
-- stream from HBM — the warm replay keeps them in L2.
io.stdout:setvbuf("line")
local cli = require "emmy.cli"
local compiler = require "emmy.compiler"
local frontend = require "emmy.frontend"
local gpu = require "emmy.gpu"
local inputs = require "emmy.inputs"
local kernels = require "emmy.kernels"
local ref = require "emmy.ref"
local tbl = require "emmy.tbl"
local stamps_lib = require "emmy.stamps"
local bench = require "emmy.bench"
local rules = require "emmy.rules"

local opts = cli.parse(arg, { flags = { ["--cases"] = { kind = "string", default = "squares,qwen,llama" },
  ["--squares"] = { kind = "string", default = "4096,8192" }, ["--batches"] = { kind = "string", default = "1,8" },
  ["--torch"] = { kind = "bool" }, ["--compile"] = { kind = "bool" }, ["--ceilings"] = { kind = "bool" }, ["--all"] = { kind = "bool" },
  ["--limit"] = { kind = "int", default = 200, min = 1 }, ["--match"] = { kind = "string" }, ["--json"] = { kind = "string" },
  ["--stamp"] = { kind = "bool" }, ["--cold"] = { kind = "bool" }, ["--pins"] = { kind = "string" }, ["--kernels"] = { kind = "string" } } },
  "bench/gemm.lua")
local function list_of(s)
  local out = {}
  for x in s:gmatch("[^,]+") do out[#out + 1] = x end
  return out
end
-- --match: a candidate's knobs include every K=V of one of the sets
local match
if opts.match then
  match = {}
  for set in opts.match:gmatch("[^;]+") do
    local m = {}
    for k, v in set:gmatch("([%w_]+)=(%-?%d+)") do m[k] = tonumber(v) end
    match[#match + 1] = m
  end
end
-- --pins: sets of K=V, each knob and value legal in the knob table
local pins = cli.knob_sets("bench/gemm.lua", "--pins", opts.pins)
-- --kernels: a kernel is benched when its name contains one of the substrings (every kernel without it)
local function wanted_kernel(name)
  if not opts.kernels then return true end
  for sub in opts.kernels:gmatch("[^,]+") do if name:find(sub, 1, true) then return true end end
  return false
end
-- the index of the first set a candidate's knobs match (1 without --match), or nil
local function matches(kn)
  if not match then return 1 end
  for i, m in ipairs(match) do
    local ok = true
    for k, v in pairs(m) do if kn[k] ~= v then ok = false end end
    if ok then return i end
  end
  return nil
end
-- the models' layer-0 cases (--cases qwen4b: Qwen3-4B, issue 22's third model; not in the default set)
local MODELS = { { "qwen", "Qwen/Qwen3-Embedding-0.6B" }, { "llama", "TinyLlama/TinyLlama-1.1B-Chat-v1.0" }, { "qwen4b", "Qwen/Qwen3-4B" } }
local want = {}
for _, c in ipairs(list_of(opts.cases)) do
  local known = c == "squares"
  for _, m in ipairs(MODELS) do known = known or m[1] == c end
  if not known then cli.usage("bench/gemm.lua: --cases takes squares, qwen, llama or qwen4b, not %q", c) end
  want[c] = true
end

-- A linear y = x wᵀ with x [m, k], w [n, k] as a graph file (a square: m = n = k).
local function linear_graph(m, n, k)
  local path = os.tmpname() .. ".torch.json"
  local f = assert(io.open(path, "w"))
  f:write(([[{"format": "emmy.graph", "version": 1, "name": "gemm%dx%dx%d", "symbols": [],
  "inputs": [{"name": "x", "kind": "activation", "dtype": "bf16", "shape": [%d, %d]},
             {"name": "w", "kind": "param", "dtype": "bf16", "shape": [%d, %d]}],
  "nodes": [{"name": "y", "op": "aten.linear.default", "args": {"input": "x", "weight": "w"}, "dtype": "bf16", "shape": [%d, %d]}],
  "outputs": ["y"]}]]):format(m, n, k, m, k, n, k, m, n))
  f:close()
  return path
end

local cases = {}
if want.squares then
  -- each entry N (N³) or MxNxK (a plain linear of that shape: e.g. a model's projections side by side)
  for _, s in ipairs(list_of(opts.squares)) do
    local m, n, k = s:match("^(%d+)x(%d+)x(%d+)$")
    if not m then m = s:match("^%d+$"); n, k = m, m end
    if not m then cli.usage("bench/gemm.lua: --squares takes N or MxNxK, not %q", s) end
    local label = (m == n and n == k) and ("%s³"):format(n) or ("%s×%s×%s"):format(m, n, k)
    cases[#cases + 1] = { label = label, input = linear_graph(tonumber(m), tonumber(n), tonumber(k)), load = {}, bind = {} }
  end
end
for _, m in ipairs(MODELS) do
  if want[m[1]] then
    for _, b in ipairs(list_of(opts.batches)) do
      cases[#cases + 1] = { label = ("%s b%s×512"):format(m[1], b), input = m[2], bind = { seq_len = 512 },
        load = { layer = 0, dynamic = { "seq_len@x:1" }, hint = { "seq_len=512" }, batch = tonumber(b) } }
    end
  end
end

local cu = assert(require("emmy.cuda").open())
local info = cu:info()
local dev = gpu.device(info)

local rows, all, kbs, torch_cold, torch_rows = {}, {}, {}, {}, {}
local function time_variant(case, p, it, e, vals, ins)
  if e.error then return nil, e.error end
  -- the kernel's inputs once; its outputs poisoned again for each variant (an unwritten element fails the check)
  local kb = kbs[p.kernel.name]
  if not kb then
    kb = {}
    for _, v in ipairs(p.kernel.repro:inputs()) do kb[v.name] = assert(cu:upload(vals[v.name] or ins[v.name])) end
    kbs[p.kernel.name] = kb
  end
  for _, o in ipairs(p.kernel.repro:outputs()) do if kb[o] then kb[o]:fill(255) end end
  local t, err = gpu.launch(cu, p, e, kb, case.bind)
  if t then t, err = cu:sync() end
  -- (a DIAG variant without the wgmma, DIAG 1, 3, 5, 7, is wrong by design: timed unchecked; 2 and 6 leave out only the
  -- cluster's multicast and barriers, so their results are checked; no DIAG variant is ever the best)
  if t and (it.knobs.DIAG or 0) % 2 == 0 then t, err = gpu.check_outputs(p.kernel.repro, kb, vals, case.bind) end
  if t then t, err = cu:time(function() return gpu.launch(cu, p, e, kb, case.bind) end, { graph = true, reps = 50, warmup = 5 }) end
  local cold
  if t and opts.cold then
    local cerr
    cold, cerr = bench.cold_us(cu, p.kernel.name, function() return gpu.launch(cu, p, e, kb, case.bind) end)
    if not cold then print(("  %s: cold: %s"):format(p.kernel.name, tostring(cerr))) end
    -- the same with the L2 flushed by reading (clean lines: no write-back of the flush's own dirty lines in the run)
    local cr, rerr = bench.cold_us(cu, p.kernel.name, function() return gpu.launch(cu, p, e, kb, case.bind) end, nil, "read")
    if not cr then print(("  %s: cold (read): %s"):format(p.kernel.name, tostring(rerr))) end
    cold = cold and { us = cold, read_us = cr }
  end
  return t and t.median_us, err, cold
end

-- --stamp: a variant's knobs with STAMP=1
local function with_stamp(knobs)
  local out = {}
  for key, v in pairs(knobs) do out[key] = v end
  out.STAMP = 1
  return out
end

local ceil
if opts.ceilings then
  local tmpj = os.tmpname()
  os.execute(("python3 %s/tools/torchref/bench.py --ceilings --json %s > /dev/null 2>&1"):format(EMMY_HOME, tmpj))
  local f = io.open(tmpj)
  local ok, cl = pcall(require("cjson").decode, f and f:read("*a") or "")
  if f then f:close() end
  os.remove(tmpj)
  if ok then ceil = cl.bf16_tflops end
  print(ceil and ("ceiling (torch, this GPU): bf16 matmul %.0f TFLOP/s"):format(ceil) or "ceiling: not measured")
end

for _, case in ipairs(cases) do
  local t0 = os.clock()
  local r = frontend.load(case.input, case.load)
  local g = r.graph
  local bind = assert(g:bind(case.bind))
  case.bind = bind
  local ctx = compiler.run(g)
  local plans = kernels.plan(ctx, { device = dev })
  local ins = assert(inputs.for_graph(g, bind, 0))
  local vals = assert(ref.run(g, ins, { bind = bind, keep_all = true }))
  io.write(("%s: reference in %.0f s\n"):format(case.label, os.clock() - t0))
  local list, jobs, at = {}, {}, {}
  for _, p in ipairs(kernels.distinct(plans)) do
    if p.kernel.kind == "contraction" and wanted_kernel(p.kernel.name) then
      list[#list + 1] = { plan = p, knobs = p.choice.knobs, label = p.choice.string, role = "chosen" }
      local n = {}
      for _, c in ipairs(p.candidates) do
        local set = (c.knobs.PERSIST == 1 or (opts.all and c.knobs.WGMMA == 1)) and matches(c.knobs)
        if c ~= p.choice and set and (n[set] or 0) < opts.limit then
          list[#list + 1] = { plan = p, knobs = c.knobs, label = c.string, role = "swept" }
          n[set] = (n[set] or 0) + 1
        end
      end
      for _, set in ipairs(pins or {}) do
        local kn = gpu.knobs_over(p, set)
        local diag = (kn.DIAG or 0) ~= 0
        list[#list + 1] = { plan = p, knobs = kn, label = rules.knob_string(kn),
          role = diag and "diag" or "pinned" }
      end
      -- --stamp: each PERSIST=1 variant again with STAMP=1, after it
      if opts.stamp then
        for i = #list, 1, -1 do
          local it = list[i]
          if it.plan == p and it.knobs.PERSIST == 1 then
            table.insert(list, i + 1, { plan = p, knobs = with_stamp(it.knobs), label = it.label, role = "stamp", plain = it })
          end
        end
      end
      jobs[#jobs + 1] = { graph = p.kernel.repro, value_of = function(name) return vals[name] or ins[name] end }
      at[#jobs] = p.kernel.name
    end
  end
  local built = gpu.build(cu, list, { keep_going = true })
  local best, chosen = {}, {}
  for i, it in ipairs(list) do
    local p = it.plan
    local us, err, cold = time_variant(case, p, it, built[i], vals, ins)
    it.us, it.cold = us, cold
    local flops = kernels.facts(p.kernel).flops
    local stamps
    if us and it.role == "stamp" then
      stamps, err = stamps_lib.run(cu, p, built[i], kbs[p.kernel.name], case.bind)
      if stamps then
        print(("\nstamps: %s %s %s\n  STAMP=1 %.1f µs (unstamped %s)"):format(case.label, p.kernel.name, it.label, us,
          it.plain.us and ("%.1f µs"):format(it.plain.us) or "not timed"))
        print(stamps_lib.render(stamps, us, bench.sm_clock(cu)))
      else
        us = nil
      end
    end
    all[#all + 1] = { case = case.label, kernel = p.kernel.name, knobs = it.label, role = it.role, us = us, flops = flops,
      error = not us and tostring(err) or nil, stamps = stamps, cold_us = it.role ~= "stamp" and it.cold and it.cold.us or nil,
      cold_read_us = it.role ~= "stamp" and it.cold and it.cold.read_us or nil,
      chosen_knobs = p.choice.string }
    if it.role == "diag" and us then
      local how = it.knobs.DIAG % 2 == 1 and "unchecked (DIAG=%d: a diagnostic, its results wrong by design)"
        or "checked (DIAG=%d: a diagnostic, never the best)"
      print(("  %s %s: %.2f µs, " .. how):format(p.kernel.name, it.label, us, it.knobs.DIAG))
    end
    if it.role == "stamp" or it.role == "diag" then goto next_variant end
    if us and (not best[p.kernel.name] or us < best[p.kernel.name].us) then best[p.kernel.name] = { us = us, knobs = it.label } end
    if it.role == "chosen" then chosen[p.kernel.name] = { us = us, err = err, flops = flops } end
    ::next_variant::
    if not us then print(("  %s %s%s: %s"):format(p.kernel.name, it.label, it.role == "stamp" and " (STAMP=1)" or "", tostring(err))) end
  end
  local torch = {}
  if opts.torch then
    for i, t in ipairs(bench.torch_many(jobs, case.bind,
      { kernels = 5, cold = opts.cold and 30 or nil, backends = { eager = true, tcompile = opts.compile or nil } })) do
      torch[at[i]] = t
      if t.eager and t.eager.cold_us then torch_cold[case.label .. " " .. at[i]] = t.eager.cold_us end
    end
  end
  for _, p in ipairs(kernels.distinct(plans)) do
    local name = p.kernel.name
    if chosen[name] then
      local c, b, t = chosen[name], best[name], torch[name] or {}
      local e, tc = t.eager and t.eager.median_us, t.tcompile and t.tcompile.median_us
      local tb = (e and tc) and math.min(e, tc) or e or tc
      local tf = function(us) return us and ("%.0f"):format(c.flops / us / 1e6) or "-" end
      if tb then -- (torch's faster backend a kernel, for bench/ab.lua's rows as bench/attention.lua's cases[].torch)
        torch_rows[#torch_rows + 1] = { label = case.label, kernel = name, torch = { best_us = tb, best = tb == e and "eager" or "compile" } }
      end
      rows[#rows + 1] = { case.label, name, c.us and ("%.1f"):format(c.us) or ("error: " .. tostring(c.err)),
        b and ("%.1f"):format(b.us) or "-", b and tf(b.us) or "-",
        (b and ceil) and ("%.0f%%"):format(100 * c.flops / b.us / 1e6 / ceil) or "-",
        e and ("%.1f"):format(e) or "-", tc and ("%.1f"):format(tc) or "-", tf(tb),
        (b and tb) and ("%.2f"):format(b.us / tb) or "-", b and b.knobs or "" }
    end
  end
  kbs = {}
  collectgarbage()
end

print(("\nemmy GEMMs on %s (CUDA-graph replay, median of 50; each variant checked against the CPU reference first)"):format(info.name))
tbl.print { header = { "case", "kernel", "chosen µs", "best µs", "best TFLOP/s", "of ceiling", "eager µs", "compile µs",
  "torch TFLOP/s", "best / torch", "best variant" }, rows = rows, align = "llrrrrrrrrl" }
print("best / torch: emmy's best variant over torch's faster backend (below 1: emmy faster)")
if opts.json then
  local f = assert(io.open(opts.json, "w"))
  f:write(require("cjson").encode { device = info.name, ceiling_tflops = ceil, variants = all, rows = rows, cases = torch_rows })
  f:close()
end
-- --cold: every variant's kernel duration with the L2 flushed before each launch (the program's regime, where a
-- kernel's weights come from HBM), against torch eager's kernels the same way
local differ = bench.knob_diff
-- --pins (warm): each pinned variant's time beside its kernel's chosen one, so that a pin that lost is not lost
if pins and not opts.cold then
  local prow, chosen_us = {}, {}
  for _, v in ipairs(all) do if v.role == "chosen" then chosen_us[v.case .. " " .. v.kernel] = v.us end end
  for _, v in ipairs(all) do
    if v.role == "pinned" then
      local c = chosen_us[v.case .. " " .. v.kernel]
      prow[#prow + 1] = { v.case, v.kernel, v.us and ("%.2f"):format(v.us) or "-", c and ("%.2f"):format(c) or "-",
        (v.us and c) and ("%.3f"):format(v.us / c) or "-", differ(v.knobs, v.chosen_knobs), v.error and v.error:sub(1, 60) or "" }
    end
  end
  print("\npinned variants (warm, µs; / chosen below 1: the pin is faster)")
  tbl.print { header = { "case", "kernel", "pinned µs", "chosen µs", "/ chosen", "pins over the chosen", "error" }, rows = prow,
    align = "llrrrll" }
end
if opts.cold then
  print("\ncold L2 (flushed before each launch; kernel durations by CUPTI, median of 30): every variant; the flush a memset (its"
    .. " dirty lines written back during the run) or a read (EMMY_FLUSH=read: clean lines)")
  local vrows, bestc, chosenc = {}, {}, {}
  for _, v in ipairs(all) do
    if v.role ~= "stamp" then
      local key = v.case .. " " .. v.kernel
      vrows[#vrows + 1] = { v.case, v.kernel, v.us and ("%.1f"):format(v.us) or "-", v.cold_us and ("%.1f"):format(v.cold_us) or "-",
        v.cold_read_us and ("%.1f"):format(v.cold_read_us) or "-", differ(v.knobs, v.chosen_knobs) }
      if v.cold_us and (not bestc[key] or v.cold_us < bestc[key].us) then bestc[key] = { us = v.cold_us, knobs = differ(v.knobs, v.chosen_knobs) } end
      if v.role == "chosen" then chosenc[#chosenc + 1] = { key = key, case = v.case, kernel = v.kernel, us = v.cold_us } end
    end
  end
  tbl.print { header = { "case", "kernel", "warm µs", "cold µs", "cold µs, read flush", "variant" }, rows = vrows, align = "llrrrl" }
  local crows = {}
  for _, c in ipairs(chosenc) do
    local b, t = bestc[c.key], torch_cold[c.key]
    crows[#crows + 1] = { c.case, c.kernel, c.us and ("%.1f"):format(c.us) or "-", b and ("%.1f"):format(b.us) or "-",
      t and ("%.1f"):format(t) or "-", (b and t) and ("%.2f"):format(b.us / t) or "-", b and b.knobs or "" }
  end
  print()
  tbl.print { header = { "case", "kernel", "chosen cold µs", "best cold µs", "torch cold µs", "best / torch", "best variant" },
    rows = crows, align = "llrrrrl" }
end
-- --stamp ends in a verdict (tests/gpu/run.sh's persist_stamp case reads it): every stamped variant checked and
-- its records read, or exit status 1
if opts.stamp then
  local n, bad = 0, {}
  for _, v in ipairs(all) do
    if v.role == "stamp" then
      n = n + 1
      if not v.stamps or v.stamps[1].ctas == 0 then bad[#bad + 1] = ("%s %s: %s"):format(v.kernel, v.knobs, v.error or "no record") end
    end
  end
  if n == 0 then bad[1] = "no PERSIST=1 variant was stamped" end
  if #bad == 0 then
    print(("PASS: %d stamped variants checked, their records read"):format(n))
  else
    print(("FAIL: %d of %d stamped variants: %s"):format(#bad, n, table.concat(bad, "; ")))
    os.exit(1)
  end
end
