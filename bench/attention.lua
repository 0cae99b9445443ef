-- bench/attention.lua — emmy's attention kernel against torch's scaled_dot_product_attention (issue 20): bf16 SDPA
-- with q [B, HQ, S, D] and k, v [B, HKV, S, D] (GQA through enable_gqa, HQ a multiple of HKV), causal and not, the
-- result in the SDPA's own layout o [B, HQ, S, D] (the default, --layout bhsd) or in the model's, o [B, S, HQ·D]
-- (--layout model: transpose(1, 2) and reshape after the SDPA, as the Qwen3 layer's sdpa kernel writes it; torch
-- then pays a copy after its SDPA that a model using flash or cuDNN does not, b8 s512 55 us against 32.5 on the
-- H200, so bhsd is the fair comparison). Each case is a static graph compiled by
-- emmy's compiler; for its attention kernel: the chosen variant, every candidate of a flash tier (FLASH ≠ 0; --all:
-- the scalar tier too) that --match keeps, up to --limit, in the rules' order, and each --pins assignment (the
-- chosen knobs with the pinned ones over them, timed even where the rules do not list it). Every variant is
-- checked before it is timed (CUDA-graph replay, median of 50): against emmy's CPU reference up to seq 2048, above
-- that against torch's eager SDPA output on the GPU (--ref; the table's "check" column says which). torch runs the
-- same graph in tools/torchref/bench.py, one process for every case: eager (torch's own kernel choice) and each
-- SDPA kernel alone (flash, efficient, cudnn: torch.nn.attention.sdpa_kernel), with --compile also torch.compile;
-- its fastest is the torch column. EMMY_KNOBS pins narrow the candidates as in any compile.
--   ./emmy bench/attention.lua [--shapes b1s512,b8s512,b1s2048,b1s8192] [--causal 1,0] [--heads 128:16:8,64:32:4]
--        [--match "K=V,K=V;K=V"] [--pins "K=V,K=V;K=V"] [--limit N] [--all] [--torch eager,flash,efficient,cudnn]
--        [--compile] [--ref auto|cpu|torch] [--layout bhsd|model] [--json FILE] [--graphs DIR] [--dry-run [--nvrtc]]
--        [--stamp] [--strict] [--sources DIR]
-- --shapes bBsS: batch B, sequence S (queries and keys); --heads D:HQ:HKV: head dim, query heads, key/value heads;
-- --causal 1,0: which masks; --match keeps the candidates whose knobs include every K=V of one ';'-separated set;
-- --torch none: no torch timing; --graphs DIR writes each case's graph there (emmy compile DIR/CASE.torch.json);
-- --dry-run plans every case on the target (with no GPU, the deploy H200), emits each variant it would time and
-- prints them, without a GPU; with --nvrtc it also compiles each (registers, spill stores; a failed compile fails),
-- and --sources DIR writes each one's CUDA there (CASE.N.cu, N its row in the printed list). --stamp: each FLASH=2 variant also as STAMP=1 (clock marks in its roles,
-- src/emit_attention_wgmma.c), checked and timed like the others, then launched once more on a zeroed record and its
-- cycles printed: per step (a K/V tile with a next one) a consumer warpgroup's K wait, PINGPONG turn, S and PV issue,
-- S wait, softmax, PV wait with the release; per item its epilogue and the rest; the producer's waits and issue; the
-- CTAs' timeline; a PASS/FAIL line (a stamped variant wrong or without records fails). Exit status 1 when a case's
-- chosen variant gives no checked time (--strict: when any built variant does: wrong, failed or refused at launch;
-- the GPU tests' correctness runs of pinned variants).
io.stdout:setvbuf("line")
local cli = require "emmy.cli"
local compiler = require "emmy.compiler"
local graphjson = require "emmy.graphjson"
local gpu = require "emmy.gpu"
local inputs = require "emmy.inputs"
local kernels = require "emmy.kernels"
local ref = require "emmy.ref"
local rules = require "emmy.rules"
local sys = require "emmy.sys"
local tbl = require "emmy.tbl"
local bench = require "emmy.bench"

local CMD = "bench/attention.lua"
local opts = cli.parse(arg, { flags = {
  ["--shapes"] = { kind = "string", default = "b1s512,b8s512,b1s2048,b1s8192" },
  ["--causal"] = { kind = "string", default = "1,0" }, ["--heads"] = { kind = "string", default = "128:16:8,64:32:4" },
  ["--match"] = { kind = "string" }, ["--pins"] = { kind = "string" }, ["--limit"] = { kind = "int", default = 200, min = 0 },
  ["--all"] = { kind = "bool" }, ["--torch"] = { kind = "string", default = "eager,flash,efficient,cudnn" },
  ["--compile"] = { kind = "bool" }, ["--ref"] = { kind = "string", default = "auto" },
  ["--layout"] = { kind = "string", default = "bhsd" }, ["--json"] = { kind = "string" }, ["--graphs"] = { kind = "string" },
  ["--dry-run"] = { kind = "bool" }, ["--nvrtc"] = { kind = "bool" }, ["--stamp"] = { kind = "bool" },
  ["--strict"] = { kind = "bool" }, ["--sources"] = { kind = "string" } } }, CMD)

-- ---- the command line ----------------------------------------------------------------------------------------

-- The comma-separated items of flag's value s, each matching pat (what: the form, for the message).
local function items(flag, s, pat, what)
  local out = {}
  for x in s:gmatch("[^,]+") do
    local caps = { x:match(pat) }
    if #caps == 0 then cli.usage("%s: %s item '%s' needs %s", CMD, flag, x, what) end
    out[#out + 1] = caps
  end
  if #out == 0 then cli.usage("%s: %s '%s' names nothing; give %s", CMD, flag, s, what) end
  return out
end

local shapes = {}
for _, c in ipairs(items("--shapes", opts.shapes, "^b(%d+)s(%d+)$", "bBATCHsSEQ (b1s512)")) do
  local b, s = tonumber(c[1]), tonumber(c[2])
  if b < 1 or s < 1 then cli.usage("%s: --shapes b%ss%s: batch and sequence must be at least 1", CMD, c[1], c[2]) end
  shapes[#shapes + 1] = { batch = b, seq = s }
end
local heads = {}
for _, c in ipairs(items("--heads", opts.heads, "^(%d+):(%d+):(%d+)$", "HEAD_DIM:Q_HEADS:KV_HEADS (128:16:8)")) do
  local d, hq, hkv = tonumber(c[1]), tonumber(c[2]), tonumber(c[3])
  if d < 1 or hq < 1 or hkv < 1 or hq % hkv ~= 0 then
    cli.usage("%s: --heads %s:%s:%s: every count at least 1, the query heads a multiple of the key/value heads", CMD,
      c[1], c[2], c[3])
  end
  heads[#heads + 1] = { d = d, hq = hq, hkv = hkv }
end
local masks = {}
for _, c in ipairs(items("--causal", opts.causal, "^([01])$", "1 (causal) or 0 (not)")) do masks[#masks + 1] = c[1] == "1" end
if not ({ auto = true, cpu = true, torch = true })[opts.ref] then
  cli.usage("%s: --ref '%s': auto (CPU reference up to seq 2048, torch above), cpu or torch", CMD, opts.ref)
end
if opts.layout ~= "model" and opts.layout ~= "bhsd" then
  cli.usage("%s: --layout '%s': bhsd (o [B, HQ, S, D]) or model (o [B, S, HQ*D])", CMD, opts.layout)
end
-- --torch: bench.py's backends (eager: torch's own pick; the others hold SDPA to one kernel)
local TORCH = { eager = "eager", flash = "sdpa_flash", efficient = "sdpa_efficient", cudnn = "sdpa_cudnn", math = "sdpa_math" }
local torch_eager, torch_more, torch_name = false, {}, { eager = "eager", tcompile = "compile" }
if opts.torch ~= "none" then
  for _, c in ipairs(items("--torch", opts.torch, "^(%a+)$", "eager, flash, efficient, cudnn or math (or none alone)")) do
    local b = TORCH[c[1]]
    if not b then cli.usage("%s: --torch '%s': eager, flash, efficient, cudnn or math (or none alone)", CMD, c[1]) end
    if b == "eager" then torch_eager = true else torch_more[#torch_more + 1] = b end
    torch_name[b] = c[1]
  end
end

-- --match and --pins: sets of K=V separated by ';', each knob and value legal in the knob table
local match, pins = cli.knob_sets(CMD, "--match", opts.match), cli.knob_sets(CMD, "--pins", opts.pins)
local function matches(kn)
  if not match then return true end
  for _, m in ipairs(match) do
    local ok = true
    for k, v in pairs(m) do if kn[k] ~= v then ok = false end end
    if ok then return true end
  end
  return false
end

-- ---- the cases -----------------------------------------------------------------------------------------------

-- The graph JSON of one case: sdpa(q, k, v) and, in the model layout, transpose(1, 2) and reshape to [B, S, HQ*D].
-- The scale is D^-0.5 as transformers computes it (head_dim**-0.5, one ulp from 1/sqrt(D)), so that b1s512 d128 16/8
-- causal is the Qwen3 layer's sdpa kernel itself (the same structural hash, the same name).
local function graph_text(c)
  local B, S, D, HQ, HKV = c.batch, c.seq, c.d, c.hq, c.hkv
  local function shape(...) return "[" .. table.concat({ ... }, ", ") .. "]" end
  local nodes = { ('{"name": "a", "op": "aten.scaled_dot_product_attention.default", "args": {"query": "q", "key": "k", ' ..
    '"value": "v", "is_causal": %s, "scale": %.17g%s}, "dtype": "bf16", "shape": %s, "from": {"module": "attention", ' ..
    '"op": "torch.nn.functional.scaled_dot_product_attention"}}'):format(tostring(c.causal), D ^ -0.5,
    HQ ~= HKV and ', "enable_gqa": true' or "", shape(B, HQ, S, D)) }
  local out = "a"
  if opts.layout == "model" then
    nodes[2] = ('{"name": "t", "op": "aten.transpose.int", "args": {"self": "a", "dim0": 1, "dim1": 2}, "dtype": "bf16", ' ..
      '"shape": %s, "from": {"module": "attention", "op": "transpose"}}'):format(shape(B, S, HQ, D))
    nodes[3] = ('{"name": "o", "op": "aten.reshape.default", "args": {"self": "t", "shape": %s}, "dtype": "bf16", ' ..
      '"shape": %s, "from": {"module": "attention", "op": "reshape"}}'):format(shape(B, S, HQ * D), shape(B, S, HQ * D))
    out = "o"
  end
  return ('{"format": "emmy.graph", "version": 1, "name": "%s", "symbols": [],\n "inputs": [' ..
    '{"name": "q", "kind": "activation", "dtype": "bf16", "shape": %s},\n  ' ..
    '{"name": "k", "kind": "activation", "dtype": "bf16", "shape": %s},\n  ' ..
    '{"name": "v", "kind": "activation", "dtype": "bf16", "shape": %s}],\n "nodes": [%s],\n "outputs": ["%s"]}\n'):format(
    c.slug, shape(B, HQ, S, D), shape(B, HKV, S, D), shape(B, HKV, S, D), table.concat(nodes, ",\n  "), out)
end

local cases = {}
for _, sh in ipairs(shapes) do
  for _, h in ipairs(heads) do
    for _, causal in ipairs(masks) do
      local c = { batch = sh.batch, seq = sh.seq, d = h.d, hq = h.hq, hkv = h.hkv, causal = causal }
      c.label = ("b%ds%d d%d %d/%d %s"):format(c.batch, c.seq, c.d, c.hq, c.hkv, causal and "causal" or "non-causal")
      c.slug = ("sdpa_b%ds%d_d%d_h%dkv%d_%s%s"):format(c.batch, c.seq, c.d, c.hq, c.hkv, causal and "causal" or "full",
        opts.layout == "bhsd" and "_bhsd" or "")
      -- attention's multiply-adds, two matmuls of B·HQ·S·S·D each (2 FLOPs a multiply-add); causal: half of them
      c.flops = 4 * c.batch * c.hq * c.seq * c.seq * c.d / (causal and 2 or 1)
      c.ref = opts.ref == "auto" and (c.seq <= 2048 and "cpu" or "torch") or opts.ref
      cases[#cases + 1] = c
    end
  end
end

-- The variants of an attention plan to time: the chosen one, the swept candidates, the pinned assignments (a pin the
-- kernel does not declare, or one the emitter refuses, is a row with .refused and is not built).
local function variants(p)
  local list, seen = {}, {}
  local function add(kn, label, role)
    if seen[label] then return end
    seen[label] = true
    list[#list + 1] = { plan = p, knobs = kn, label = label, role = role }
  end
  add(p.choice.knobs, p.choice.string, "chosen")
  local n = 0
  for _, c in ipairs(p.candidates) do
    if n >= opts.limit then break end
    if not seen[c.string] and ((c.knobs.FLASH or 0) ~= 0 or opts.all) and matches(c.knobs) then
      add(c.knobs, c.string, "swept")
      n = n + 1
    end
  end
  for _, set in ipairs(pins or {}) do
    local kn = gpu.knobs_over(p, set)
    local label = rules.knob_string(kn)
    local alien = {}
    for k in pairs(set) do if p.eval.declared[k] == nil then alien[#alien + 1] = k end end
    table.sort(alien)
    if #alien > 0 then
      local own = {}
      for k in pairs(p.eval.declared) do own[#own + 1] = k end
      table.sort(own)
      list[#list + 1] = { plan = p, knobs = kn, label = label, role = "pinned",
        refused = ("%s: not a knob of %s (it has %s)"):format(table.concat(alien, ", "), p.kernel.name, table.concat(own, ", ")) }
    else
      add(kn, label, "pinned")
    end
  end
  -- --stamp: each FLASH=2 variant again with STAMP=1 (clock marks in its roles), after it
  if opts.stamp then
    for i = #list, 1, -1 do
      local it = list[i]
      if not it.refused and (it.knobs.FLASH or 0) == 2 then
        local kn = {}
        for k, v in pairs(it.knobs) do kn[k] = v end
        kn.STAMP = 1
        table.insert(list, i + 1, { plan = p, knobs = kn, label = it.label, role = "stamp", plain = it })
      end
    end
  end
  for _, it in ipairs(list) do
    if not it.refused then
      local ok, src, why = pcall(kernels.emit, it.plan, it.knobs)
      if not ok or not src then it.refused = "emit refused: " .. tostring(ok and why or src) end
      if (opts.nvrtc or opts.sources) and ok and src then it.src = src end
    end
  end
  return list
end

-- Every case's graph, kernels and variants on device dev (the GPU's facts, or the target's for --dry-run).
local function plan_cases(dev)
  if opts.graphs then cli.must(sys.mkdir_p(opts.graphs)) end
  for _, c in ipairs(cases) do
    c.g = cli.must(graphjson.decode(graph_text(c), c.slug))
    if opts.graphs then cli.must(graphjson.write(c.g, ("%s/%s.torch.json"):format(opts.graphs, c.slug), { sync = false })) end
    c.bind = cli.must(c.g:bind({}))
    c.plans = kernels.plan(compiler.run(c.g), { device = dev })
    c.att = {}
    for _, p in ipairs(kernels.distinct(c.plans)) do
      if p.kernel.kind == "attention" then c.att[#c.att + 1] = { plan = p, list = variants(p) } end
    end
    if #c.att == 0 then cli.fail("%s: %s formed no attention kernel (%d kernels)", CMD, c.label, #c.plans) end
  end
end

local function count(list, pred)
  local n = 0
  for _, it in ipairs(list) do if pred(it) then n = n + 1 end end
  return n
end

-- ---- --dry-run: the plan of every case, no GPU ---------------------------------------------------------------

if opts.dry_run then
  local dev = kernels.device()
  plan_cases(dev)
  print(("%d cases on %s%s (layout %s); no GPU used"):format(#cases, dev.name, dev.assumed and " (the deploy target)" or "",
    opts.layout))
  local bad = false
  if opts.sources then cli.must(sys.mkdir_p(opts.sources)) end
  for _, c in ipairs(cases) do
    for _, a in ipairs(c.att) do
      local p = a.plan
      print(("%s: %d kernel%s, attention %s: %d candidates, check %s, %.4g GFLOP"):format(c.label, #c.plans,
        #c.plans == 1 and "" or "s", p.kernel.name, #p.candidates, c.ref == "cpu" and "cpu ref" or "torch", c.flops / 1e9))
      local built = {}
      if opts.nvrtc then
        local jobs = {}
        for _, it in ipairs(a.list) do
          if it.src then
            jobs[#jobs + 1] = { source = it.src, arch = dev.arch, name = p.kernel.name .. ".cu", options = { "-std=c++17" }, timeout_ms = 120000 }
            built[#jobs] = it
          end
        end
        local res = require("emmy.nvrtc").compile_many(jobs, {})
        if not res then cli.fail("%s: --nvrtc: NVRTC is not available", CMD) end
        for j, r in ipairs(res) do
          local it = built[j]
          -- (a failure: the log's error lines, not its warnings)
          local errs = {}
          for line in tostring(r.log or ""):gmatch("[^\n]+") do
            if line:find("error", 1, true) and not line:find("warning", 1, true) then errs[#errs + 1] = line end
          end
          it.nv = r.status == "ok" and ("  nvrtc ok, %s registers, %s bytes spilled"):format(tostring(r.regs), tostring(r.spill_stores))
            or ("  nvrtc %s: %s"):format(tostring(r.status), table.concat(errs, " | "):sub(1, 400))
          if r.status ~= "ok" then bad = true end
        end
      end
      for i, it in ipairs(a.list) do
        if opts.sources and it.src then cli.must(sys.write_file(("%s/%s.%d.cu"):format(opts.sources, c.slug, i), it.src)) end
        print(("  %-7s %s%s%s"):format(it.role, it.label, it.refused and ("  refused: " .. it.refused) or "", it.nv or ""))
        if it.role == "chosen" and it.refused then bad = true end
      end
      print(("  %d to time, %d refused"):format(count(a.list, function(it) return not it.refused end),
        count(a.list, function(it) return it.refused end)))
    end
  end
  return bad and 1 or 0
end

-- ---- on the GPU ----------------------------------------------------------------------------------------------

local cu, cerr = require("emmy.cuda").open()
if not cu then cli.fail("%s: no GPU: %s (--dry-run plans the cases without one)", CMD, tostring(cerr)) end
local nv_ok, nv_err = require("emmy.nvrtc").version()
if not nv_ok then cli.fail("%s: NVRTC not found: %s", CMD, tostring(nv_err)) end
local info = cu:info()
plan_cases(gpu.device(info))
local work = os.tmpname()
os.remove(work)
cli.must(sys.mkdir_p(work))

-- torch first, one bench.py process for every case: its times, and eager's outputs where torch is the reference.
-- The inputs are made again for each case (seeded: the same values emmy's variants read) and only one case's are
-- held at a time.
local held_case, held_ins
local function ins_of(c)
  if held_case ~= c then
    held_case, held_ins = nil, nil
    collectgarbage()
    held_ins = cli.must(inputs.for_graph(c.g, c.bind, 0))
    held_case = c
  end
  return held_ins
end
local timing = torch_eager or opts.compile or #torch_more > 0
local jobs, at = {}, {}
for ci, c in ipairs(cases) do
  for ai, a in ipairs(c.att) do
    a.refdir = c.ref == "torch" and ("%s/ref%d_%d"):format(work, ci, ai) or nil
    if timing or a.refdir then
      jobs[#jobs + 1] = { graph = a.plan.kernel.repro, value_of = function(name) return ins_of(c)[name] end, out = a.refdir }
      at[#jobs] = a
    end
  end
end
local t0 = sys.clock()
if #jobs > 0 then
  local res = bench.torch_many(jobs, {}, { backends = { eager = torch_eager or nil, tcompile = opts.compile or nil },
    more = torch_more })
  for i, t in ipairs(res) do at[i].torch = t end
  print(("torch (tools/torchref/bench.py, %d graphs%s): %.0f s"):format(#jobs, timing and "" or ", outputs only",
    sys.clock() - t0))
end

-- One variant: its inputs uploaded once a kernel, its outputs poisoned again (an unwritten element fails the check),
-- launched, checked against vals, timed in the deploy regime (bench.REGIME: CUDA-graph replay, 10 ms of warm-up,
-- median of 50). Returns the timing table, or nil and why.
local function time_variant(c, it, e, kb, vals)
  if it.refused then return nil, it.refused end
  if e.error then return nil, e.error end
  local p = it.plan
  for _, o in ipairs(p.kernel.repro:outputs()) do if kb[o] then kb[o]:fill(255) end end
  local t, err = gpu.launch(cu, p, e, kb, c.bind)
  if t then t, err = cu:sync() end
  if t then t, err = gpu.check_outputs(p.kernel.repro, kb, vals, c.bind) end
  if t then t, err = cu:time(function() return gpu.launch(cu, p, e, kb, c.bind) end, bench.REGIME) end
  return t, err
end

local rows, all, results, failed, notes, stamp_bad = {}, {}, {}, false, {}, {}
local stamps = require "emmy.stamps"
local function fmt(x, f) return x and (f or "%.1f"):format(x) or "-" end
for _, c in ipairs(cases) do
  local ins = ins_of(c)
  local vals, check, noref
  t0 = sys.clock()
  if c.ref == "cpu" then
    vals = cli.must(ref.run(c.g, ins, { bind = c.bind, keep_all = true }))
    check = "cpu ref"
  else
    vals, check = {}, "torch eager"
    for _, a in ipairs(c.att) do
      for _, o in ipairs(a.plan.kernel.repro:outputs()) do
        local t, err = ref.load(("%s/%s.npy"):format(a.refdir, o), a.plan.kernel.repro:value(o).dtype)
        if t then vals[o] = t else noref = ("no reference: torch gave no %s (%s)"):format(o, (a.torch or {}).why or err) end
      end
    end
    if noref then check = "none" end
  end
  print(("%s: reference (%s) in %.1f s"):format(c.label, check, sys.clock() - t0))
  for _, a in ipairs(c.att) do
    local p = a.plan
    local buildable = {}
    for _, it in ipairs(a.list) do if not it.refused and not noref then buildable[#buildable + 1] = it end end
    print(("  %s: %d variants, %d to build and time"):format(p.kernel.name, #a.list, #buildable))
    local built = #buildable > 0 and gpu.build(cu, buildable) or {}
    local kb = {}
    for _, v in ipairs(p.kernel.repro:inputs()) do kb[v.name] = cli.must(cu:upload(vals[v.name] or ins[v.name])) end
    local bi, timed, best, chosen = 0, 0, nil, nil
    local nvar = count(a.list, function(it) return it.role ~= "stamp" end)
    for _, it in ipairs(a.list) do
      local t, err
      if noref or it.refused then
        err = it.refused or noref
      else
        bi = bi + 1
        t, err = time_variant(c, it, built[bi], kb, vals)
      end
      local us = t and t.median_us
      if it.role == "stamp" then
        local st, serr
        if us then st, serr = stamps.run(cu, p, built[bi], kb, c.bind, stamps.read_attention) end
        if st then
          print(("\nstamps: %s %s %s\n  STAMP=1 %.1f µs (unstamped %s)"):format(c.label, p.kernel.name, it.label, us,
            it.plain.us and ("%.1f µs"):format(it.plain.us) or "not timed"))
          print(stamps.render_attention(st, us))
        else
          stamp_bad[#stamp_bad + 1] = ("%s %s: %s"):format(p.kernel.name, it.label, tostring(serr or err))
        end
        all[#all + 1] = { case = c.label, kernel = p.kernel.name, knobs = it.label, role = "stamp", us = us, stamps = st }
        goto next_variant
      end
      it.us = us
      all[#all + 1] = { case = c.label, kernel = p.kernel.name, knobs = it.label, role = it.role, us = us,
        p20_us = t and t.p20_us, p80_us = t and t.p80_us, tflops = us and c.flops / us / 1e6,
        error = not us and tostring(err) or nil }
      if us then timed = timed + 1 else
        print(("  %s %s %s: %s"):format(p.kernel.name, it.role, it.label, tostring(err)))
        if opts.strict then failed = true end
      end
      if us and (not best or us < best.us) then best = { us = us, knobs = it.label } end
      if it.role == "chosen" then chosen = { us = us, knobs = it.label, error = not us and tostring(err) or nil } end
      ::next_variant::
    end
    if not chosen.us then failed = true end
    -- torch's fastest backend
    local t = a.torch or {}
    local tus, tname
    for key, name in pairs(torch_name) do
      local s = t[key]
      if s and s.median_us and (not tus or s.median_us < tus) then tus, tname = s.median_us, name end
    end
    if t.why then notes[#notes + 1] = ("torch on %s: %s"):format(c.label, t.why) end
    local tm = tus and t[tname == "compile" and "tcompile" or TORCH[tname]].method
    if tm and tm ~= "cuda-graph" then
      notes[#notes + 1] = ("torch on %s: %s timed by %s, not CUDA-graph replay"):format(
        c.label, tname, tm)
    end
    print(("  chosen %s µs, best %s µs (%s), torch %s µs (%s), %d of %d variants timed"):format(fmt(chosen.us),
      fmt(best and best.us), best and best.knobs or "-", fmt(tus), tname or "-", timed, nvar))
    rows[#rows + 1] = { c.label, check, ("%d/%d"):format(timed, nvar),
      chosen.us and ("%.1f"):format(chosen.us) or chosen.error:match("^[^:(]*"):gsub("%s+$", ""), fmt(best and best.us),
      fmt(tus), tname or "-", (chosen.us and tus) and ("%.2f"):format(chosen.us / tus) or "-",
      (best and tus) and ("%.2f"):format(best.us / tus) or "-", best and ("%.0f"):format(c.flops / best.us / 1e6) or "-",
      best and best.knobs or "" }
    local tj = { best_us = tus, best = tname, why = t.why }
    for key, name in pairs(torch_name) do tj[name] = t[key] end
    results[#results + 1] = { label = c.label, batch = c.batch, seq = c.seq, head_dim = c.d, heads = c.hq,
      kv_heads = c.hkv, causal = c.causal, flops = c.flops, check = check, kernel = p.kernel.name,
      candidates = #p.candidates, variants = nvar, timed = timed, chosen = chosen, best = best, torch = tj }
  end
  held_case, held_ins = nil, nil
  collectgarbage()
end
os.execute("rm -rf '" .. work:gsub("'", "") .. "'")

print(("\nemmy attention on %s, bf16, output %s (CUDA-graph replay, median of 50; each variant checked first)"):format(
  info.name, opts.layout == "model" and "o [B, S, HQ*D]" or "o [B, HQ, S, D]"))
tbl.print { header = { "case", "check", "timed", "chosen µs", "best µs", "torch µs", "torch", "chosen / torch",
  "best / torch", "best TFLOP/s", "best knobs" }, rows = rows, align = "lllrrrlrrrl" }
local tnames = {}
if torch_eager then tnames[#tnames + 1] = "eager (its own pick)" end
for _, b in ipairs(torch_more) do tnames[#tnames + 1] = torch_name[b] end
if opts.compile then tnames[#tnames + 1] = "compile" end
print(("torch: the fastest of %s; x / torch below 1: emmy faster; TFLOP/s: 4·B·HQ·S²·D, halved when causal"):format(
  #tnames > 0 and table.concat(tnames, ", ") or "nothing (--torch none)"))
for _, n in ipairs(notes) do print(n) end
-- --pins: each pinned variant's time beside its case's chosen one, so that a pin that lost is not lost
if pins then
  local prow, chosen = {}, {}
  for _, v in ipairs(all) do if v.role == "chosen" then chosen[v.case] = v end end
  for _, v in ipairs(all) do
    local c = chosen[v.case]
    if v.role == "pinned" and c then
      prow[#prow + 1] = { v.case, v.us and ("%.1f"):format(v.us) or "-", c.us and ("%.1f"):format(c.us) or "-",
        (v.us and c.us) and ("%.3f"):format(v.us / c.us) or "-", bench.knob_diff(v.knobs, c.knobs),
        v.error and v.error:sub(1, 60) or "" }
    end
  end
  print("\npinned variants (µs; / chosen below 1: the pin is faster)")
  tbl.print { header = { "case", "pinned µs", "chosen µs", "/ chosen", "pins over the chosen", "error" }, rows = prow,
    align = "lrrrll" }
end
if opts.stamp then
  print(#stamp_bad == 0 and "PASS: every stamped variant checked, its records read"
    or ("FAIL: %d stamped variants: %s"):format(#stamp_bad, table.concat(stamp_bad, "; ")))
  if #stamp_bad > 0 then failed = true end
end
if opts.json then
  cli.must(sys.write_file(opts.json, require("cjson").encode { format = "emmy.bench.attention", version = 1,
    device = info.name, layout = opts.layout, cases = results, variants = all, rows = rows }))
end
return failed and 1 or 0
