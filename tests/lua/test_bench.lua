-- The bench against torch (emmy.bench, `run|tune --bench`), its files and page, and `emmy compare`, without a GPU:
-- CUPTI records grouped by hand-made timestamps, bench files from a synthetic result (validated against
-- docs/formats.md's "Bench files"), the page in headless Chromium, compare's matching and verdicts, and
-- `emmy run --bench` end to end with the mock driver and PyTorch on the CPU.
local cjson = require "cjson"
local bench = require "emmy.bench"

local T = {}
local function test(name, fn) T[#T + 1] = { name, fn } end

-- The end-to-end runs below name Qwen3's q_proj and its k+v dual: they form them apart (MERGE_SIBLINGS=0, the default
-- before the forty-second session) unless a test sets EMMY_MERGE_SIBLINGS itself.
local emmy = emmy_pinned("EMMY_MERGE_SIBLINGS=0")

-- Builds the mock driver (tests/fixtures/cuda_mock.c) in folder d; skips the test when cc cannot.
local mock_driver = mock_driver_so

local function read(path)
  local f = assert(io.open(path))
  local s = f:read("*a")
  f:close()
  return s
end

test("CUPTI records: replays of the launch sequence, other kernels skipped, in-program times add up to the span", function()
  local plans = {}
  for i, n in ipairs { "k_a", "k_b", "k_a", "k_c" } do plans[i] = { kernel = { name = n } } end
  local recs, t = {}, 1000
  local function rec(name, dur, gap)
    recs[#recs + 1] = { name = name, start_ns = t, end_ns = t + dur }
    t = t + dur + (gap or 500)
  end
  rec("em_flush", 3000) -- another kernel: skipped
  for r = 1, 3 do
    rec("k_a", 2000 + r) rec("k_b", 10000) rec("k_a", 4000) rec("k_c", 1000, 20000)
  end
  rec("k_b", 10000) -- a partial replay at the end: dropped
  local g = assert(bench.group_records(recs, plans))
  eq(g.replays, 3)
  eq(#g.positions, 4)
  eq(g.positions[1].busy_us, 2.002, "median of 2.001, 2.002, 2.003")
  eq(g.positions[1].in_program_us, 2.502, "start to the next kernel's start")
  eq(g.positions[4].in_program_us, 1.0, "the last: to its end")
  eq(g.positions[2].exposed_us, 10.0, "no overlap: exposed = busy")
  -- programmatic dependent launch: k_b starts 1.5 us before k_a ends and waits; that wait is k_a's time
  local pdl = {}
  for r = 0, 1 do
    local t0 = 100000 * r
    pdl[#pdl + 1] = { name = "k_a", start_ns = t0, end_ns = t0 + 3000 }
    pdl[#pdl + 1] = { name = "k_b", start_ns = t0 + 1500, end_ns = t0 + 12000 }
    pdl[#pdl + 1] = { name = "k_a", start_ns = t0 + 12500, end_ns = t0 + 16000 }
    pdl[#pdl + 1] = { name = "k_c", start_ns = t0 + 15000, end_ns = t0 + 17000 }
  end
  local gp = assert(bench.group_records(pdl, plans))
  eq(gp.positions[2].busy_us, 10.5)
  eq(gp.positions[2].exposed_us, 9.0, "from k_a's end")
  eq(gp.positions[4].exposed_us, 1.0, "from the second k_a's end")
  eq(gp.positions[3].exposed_us, 3.5, "started after k_b's end")
  local sum = 0
  for _, p in ipairs(g.positions) do sum = sum + p.in_program_us end
  check(math.abs(sum - g.span_us) < 1e-9, ("in-program sum %.3f = span %.3f"):format(sum, g.span_us))
  local none, err = bench.group_records({ { name = "k_z", start_ns = 1, end_ns = 2 } }, plans)
  check(none == nil and err:find("no replay of the 4-kernel sequence", 1, true), tostring(err))
end)

test("where the whole graph's time goes: torch kernels classified by name, emmy's by kind, summed per backend", function()
  local K = bench.kernel_kind
  eq(K("nvjet_sm90_tst_128x64_64x8_1x2_h_bz_TNT"), "matmul")
  eq(K("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"), "matmul")
  eq(K("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>(Flash_fwd_params)"), "attention")
  eq(K("fmha_cutlassF_bf16_aligned_64x128_rf_sm80"), "attention") -- (attention before cutlass's matmul)
  eq(K("triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_0"), "norm, elementwise")
  eq(K("triton_per_fused__scaled_dot_product_cudnn_attention__to_copy_1"), "norm, elementwise") -- (seen on the H200)
  eq(K("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1_kernel0_0"), "attention")
  eq(K("triton_tem_fused_mm_0"), "matmul")
  eq(K("Memcpy DtoD (Device -> Device)"), "copy")
  eq(K("k_linear_add_f97280", "contraction"), "matmul")
  eq(K("k_sdpa_123d66", "attention"), "attention")
  eq(K("k_rms_norm_8fa63c", "row"), "norm, elementwise")
  local r = bench.by_kind {
    { backend = "eager", kernels = { { name = "nvjet_a", us = 7, count = 1 }, { name = "triton_x", us = 2, count = 2 } } },
    { backend = "tcompile" },
    { backend = "emmy", kernels = { { name = "k_linear_1", us = 11, count = 2, kind = "contraction" },
      { name = "k_sdpa_1", us = 20, count = 1, kind = "attention" } } } }
  eq(table.concat(r.backends, ","), "eager,emmy")
  local by = {}
  for _, row in ipairs(r.rows) do by[row.kind] = row end
  eq(by.matmul.eager.us, 7); eq(by.matmul.emmy.us, 11); eq(by.matmul.emmy.n, 2)
  eq(by.attention.emmy.us, 20); eq(by.attention.eager.us, 0)
  eq(by["norm, elementwise"].eager.us, 2); eq(by["norm, elementwise"].eager.n, 2)
  eq(bench.by_kind { { backend = "emmy", kernels = { { name = "k", us = 1 } } } }, nil)
  -- the matmul row's fused epilogues, said beside it (torch counts them under norm, elementwise)
  eq(table.concat(bench.fused_matmuls { { backend = "eager", kernels = { { name = "k_linear_add_1a2b3c" } } },
    { backend = "emmy", kernels = { { name = "k_linear_7363a2", kind = "contraction" },
      { name = "k_linear_silu_mul_b9e1e1", kind = "contraction" }, { name = "k_linear_add_67d546", kind = "contraction" },
      { name = "k_rms_norm_rope_40c43c", kind = "row" } } } }, "; "),
    "k_linear_add_67d546: add; k_linear_silu_mul_b9e1e1: silu mul")
  -- each backend's matmul kernels, a line (the by-kind row's parts)
  local ml = bench.matmul_lines { { backend = "tcompile", kernels = { { name = "nvjet_sm90_tst_128x64_64x8_1x2_h_bz_TNT", us = 5.31 },
    { name = "triton_poi_fused_add_0", us = 1.2 }, { name = "nvjet_sm90_tst_64x64_64x13_2x1_v_bz_TNT", us = 4.0, count = 2 } } },
    { backend = "emmy", kernels = { { name = "k_rms_norm_1", us = 2, kind = "row" } } } }
  eq(#ml, 1, "emmy has no matmul here")
  eq(ml[1], "tcompile's matmuls (µs a call): nvjet_sm90_tst_128x64_64x8_1x2_h_bz_TNT 5.3, nvjet_sm90_tst_64x64_64x13_2x1_v_bz_TNT 4.0 (x2)")
end)

test("bench: backends parsed, a bad one is a one-line error; where a graph is benched, in words", function()
  local b = assert(bench.parse_backends("emmy,eager"))
  check(b.emmy and b.eager and not b.tcompile, "subset")
  local none, err = bench.parse_backends("eager,inductor")
  check(none == nil and err:find("unknown backend 'inductor'", 1, true), tostring(err))
  local code, _, e = emmy { "run", "x.torch.json", "--bench", "--bench-backends", "eager,nope" }
  check(code == 2 and e:find("unknown backend 'nope'", 1, true) and not e:find("\n.", 1), e)
  local c2, _, e2 = emmy { "run", "x.torch.json", "--bench-backends", "eager" }
  check(c2 == 2 and e2:find("--bench-backends needs --bench", 1, true), e2)
  local ir = require "emmy.ir"
  local g = ir.new()
  g:symbol("seq_len", { hint = 512 })
  eq(bench.at(g, { seq_len = 512 }), "seq_len=512 (symbolic hint)")
  eq(bench.at(g, { seq_len = 7 }), "seq_len=7 (bound)")
  eq(bench.at(ir.new(), {}), "static")
end)

-- A synthetic bench result: three kernels, one of them twice in the program.
local function result(scale, rename)
  local function st(us, spread)
    return { median_us = us, p20_us = us * (1 - (spread or 0.01)), p80_us = us * (1 + (spread or 0.01)), min_us = us * 0.97, samples = 50 }
  end
  local k = {
    { name = "k_linear_aaaaaa", kind = "contraction", layer_op = "self_attn.q_proj linear", coverage = "full", accuracy = "ok",
      knobs = "BM=64,BN=64", instances = 1, emmy = st(11.3 * scale), eager = st(9.2), tcompile = st(9.6), in_program_us = 11.8 * scale },
    { name = rename or "k_sdpa_bbbbbb", kind = "attention", layer_op = "self_attn scaled_dot_product_attention", coverage = "full",
      accuracy = "ok", knobs = "BQ=64", instances = 1, emmy = st(23.6), eager = st(18.2), tcompile = st(18.5), in_program_us = 24.0 },
    { name = "k_rms_norm_cccccc", kind = "row", layer_op = "input_layernorm RMSNorm", coverage = "full", accuracy = "wrong",
      knobs = "THREADS=256", instances = 2, emmy = st(4.3), eager = st(22.5), in_program_us = 9.0 },
  }
  local whole = { { backend = "eager", stats = st(203.7), speedup_vs_eager = 1,
      kernels = { { name = "nvjet_sm90_tst_128x64_64x8_1x2_h_bz_TNT", us = 7.0, count = 1 }, { name = "void at::native::reduce_kernel", us = 3.0, count = 2 } } },
    { backend = "tcompile", stats = st(204.6), speedup_vs_eager = 0.996 },
    { backend = "emmy", stats = st(44.8 * scale, 0.02), speedup_vs_eager = 203.7 / (44.8 * scale),
      kernels = { { name = "k_linear_aaaaaa", us = 11.0 * scale, count = 1, kind = "contraction" }, { name = "k_sdpa_bbbbbb", us = 23.0, count = 1, kind = "attention" } } } }
  return { format = "emmy.bench", version = 1, device = "Test GPU", at = "seq_len=512 (symbolic hint)", regime = "deploy",
    notes = { "tcompile: not timed on k_rms_norm_cccccc" }, whole = whole, by_kind = bench.by_kind(whole),
    in_program = { replays = 20, span_us = 44.8, dropped = 0 }, kernels = k }
end

-- Validates the two bench files against docs/formats.md ("Bench files").
local function validate(dir)
  local w = cjson.decode(read(dir .. "/60_bench_compare.json"))
  local k = cjson.decode(read(dir .. "/62_kernel_bench.json"))
  for _, x in ipairs { w, k } do
    eq(x.format, "emmy.bench")
    eq(x.version, 1)
    check(type(x.device) == "string" and type(x.at) == "string" and type(x.regime) == "string" and type(x.notes) == "table", "common fields")
  end
  check(type(w.whole) == "table" and #w.whole >= 1, "whole rows")
  local function stats_ok(s, what)
    if s == nil then return end
    for _, f in ipairs { "median_us", "p20_us", "p80_us" } do check(type(s[f]) == "number", what .. "." .. f) end
    check(s.p20_us <= s.median_us and s.median_us <= s.p80_us, what .. ": p20 <= median <= p80")
  end
  for _, r in ipairs(w.whole) do
    check(type(r.backend) == "string", "backend")
    stats_ok(r.stats, r.backend)
  end
  for _, r in ipairs(k.kernels) do
    for _, f in ipairs { "name", "kind", "layer_op", "coverage", "accuracy" } do check(type(r[f]) == "string", r.name .. "." .. f) end
    check(r.coverage == "full" or r.coverage == "partial", "coverage word")
    check(type(r.instances) == "number" and r.instances >= 1, "instances")
    stats_ok(r.emmy, r.name .. ".emmy")
    stats_ok(r.eager, r.name .. ".eager")
    stats_ok(r.tcompile, r.name .. ".tcompile")
  end
  return w, k
end

test("bench files: the two JSON files follow the documented format; the page holds both tables and each kernel", function()
  local d = tmpdir()
  local res = result(1)
  bench.write(d, res, { sources = { k_linear_aaaaaa = "extern \"C\" __global__ void k_linear_aaaaaa() {}" },
    repros = { k_linear_aaaaaa = "{\"format\": \"emmy.graph\"}" },
    verdicts = { k_linear_aaaaaa = { { rule = "wgmma", family = "TIER", ok = false, reason = "K % 64 ~= 0", file = "010.lua", line = 3 } } } })
  local w, k = validate(d)
  eq(#k.kernels, 3)
  eq(w.by_kind.backends[1], "eager"); eq(w.by_kind.backends[2], "emmy")
  eq(w.by_kind.rows[1].kind, "matmul"); eq(w.by_kind.rows[1].emmy.us, 11); eq(w.by_kind.rows[1].eager.us, 7)
  eq(w.whole[1].kernels[1].name, "nvjet_sm90_tst_128x64_64x8_1x2_h_bz_TNT")
  local html = read(d .. "/kernels.html")
  check(html:find('<table class="sortable" id="bykind">', 1, true), "the by-kind table")
  check(html:find('<table class="sortable" id="whole">', 1, true) and html:find('<table class="sortable" id="kernels">', 1, true), "two tables")
  check(html:find("extern &quot;C&quot; __global__ void k_linear_aaaaaa", 1, true), "source, escaped")
  check(html:find("K % 64 ~= 0", 1, true) and html:find("REFUSED", 1, true), "gate verdicts")
  check(not html:find("<script src", 1, true) and not html:find("http", 1, true), "self-contained")
  -- printing the tables: whole graph, then kernels by emmy time in the program
  local out = {}
  local real_print = print
  print = function(...) out[#out + 1] = table.concat({ ... }, "\t") end
  local ok, err = pcall(bench.print, res)
  print = real_print
  check(ok, tostring(err))
  local text = table.concat(out, "\n")
  check(text:find("emmy%s+44%.8%s+43%.9%-45%.7%s+4%.55x"), text)
  check(text:find("k_linear_aaaaaa%s+self_attn%.q_proj linear%s+full%s+11%.3"), text)
  check(text:find("sum 44.8 µs = 1.00 of the whole-graph time", 1, true), text)
  check(text:find("x2 wrong", 1, true), "instances and a wrong accuracy flagged: " .. text)
  check(text:find("matmul%s+7%.0%s+1%s+11%.0%s+1"), "by kind: " .. text)
  check(text:find("norm, elementwise%s+3%.0%s+2%s+0%.0%s+0"), "by kind, kernels per call: " .. text)
end)

test("the bench page renders in headless Chromium: the script runs and sorts, a screenshot is taken, no console error", function()
  local chromium
  for _, c in ipairs { "/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome" } do
    if io.open(c) then chromium = c break end
  end
  if not chromium then skip("no Chromium (make test installs Debian's chromium)") end
  local d = tmpdir()
  bench.write(d, result(1), {})
  local base = ("%s --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --user-data-dir=%s/profile --enable-logging=stderr --v=0 ")
    :format(chromium, d)
  local code, dom = sh(base .. ("--dump-dom 'file://%s/kernels.html#selftest' 2> %s/log"):format(d, d))
  local log = read(d .. "/log")
  check(code == 0 and dom:find('data-ready="1"', 1, true), "the page's script ran: " .. log:sub(-600))
  check(dom:find('data-first="k_sdpa_bbbbbb"', 1, true), "sorted by emmy µs, largest first: " .. (dom:match("<body[^>]*>") or dom:sub(1, 300)))
  check(not log:find("Uncaught", 1, true) and not log:find(":ERROR:CONSOLE", 1, true), "console errors: " .. log:sub(-600))
  local c2 = sh(base .. ("--window-size=1400,1000 --screenshot=%s/page.png 'file://%s/kernels.html' 2>/dev/null"):format(d, d))
  local png = io.open(d .. "/page.png", "rb")
  local head = png and png:read(8)
  if png then png:close() end
  check(c2 == 0 and head == "\137PNG\r\n\26\n", "screenshot written")
end)

test("emmy compare: matched ratios within noise, a renamed kernel paired through its Layer-op, a slower run exits 1", function()
  local a, a2, b, c = tmpdir(), tmpdir(), tmpdir(), tmpdir()
  bench.write(a, result(1), {})
  bench.write(a2, result(1.005), {})
  bench.write(b, result(1, "k_sdpa_dddddd"), {})
  bench.write(c, result(1.3), {})
  local code, out, err = emmy { "compare", a, a2 }
  eq(code, 0, err)
  check(out:find("emmy%s+44%.8%s+45%.0%s+1%.005%s+within noise"), out)
  check(out:find("k_linear_aaaaaa%s+self_attn%.q_proj linear%s+same%s+11%.8%s+11%.9%s+1%.005%s+within noise"), out)
  check(not out:find("kernel set changed", 1, true), out)
  local c2, o2 = emmy { "compare", a, b }
  eq(c2, 0, o2)
  check(o2:find("k_sdpa_bbbbbb -> k_sdpa_dddddd", 1, true) and o2:find("renamed", 1, true), o2)
  check(o2:find("the kernel set changed", 1, true), o2)
  local c3, o3 = emmy { "compare", a, c, "--tol", "0.1" }
  eq(c3, 1, "slower beyond tol: exit 1\n" .. o3)
  check(o3:find("k_linear_aaaaaa.-1%.300%s+SLOWER") and o3:find("k_sdpa_bbbbbb.-1%.000%s+within noise"), o3)
  check(o3:find("matmul%s+11%.0%s+14%.3%s+%+3%.3") and o3:find("attention%s+23%.0%s+23%.0%s+%+0%.0"), "by kind: " .. o3)
  local c4, o4 = emmy { "compare", a, c, "--json" }
  local j = cjson.decode(o4)
  check(c4 == 1 and j.slower == 2 and #j.kernels == 3, o4)
  -- bad input: one line, exit 2
  local c5, _, e5 = emmy { "compare", a, a .. "/nope" }
  check(c5 == 2 and e5:find("cannot read", 1, true) and not e5:find("\n.", 1), e5)
  write_file(b .. "/62_kernel_bench.json", cjson.encode { format = "emmy.bench", version = 2 })
  local c6, _, e6 = emmy { "compare", a, b }
  check(c6 == 2 and e6:find("bench file version 2", 1, true), e6)
  local c7, _, e7 = emmy { "compare", a }
  check(c7 == 2 and #e7 > 0, e7)
end)

test("emmy run --bench with the mock driver and PyTorch on the CPU: both tables, the bench files, torch rows timed", function()
  local py = os.getenv("EMMY_PYTHON") or "/usr/bin/python3"
  local okc = sh(py .. " -c 'import torch, numpy' 2>/dev/null")
  if okc ~= 0 then skip(py .. " has no torch/numpy (Debian: python3-torch python3-numpy)") end
  local d = tmpdir()
  local so = mock_driver(d)
  local code, out, err = emmy({ "run", "Qwen/Qwen3-Embedding-0.6B", "--layer", "0", "--dynamic", "seq_len@x:1", "--seq-len", "8",
    "--bench", "--bench-backends", "eager,emmy", "--dump-dir", d .. "/dump" },
    { env = ("EMMY_LIBCUDA=%s EMMY_TORCH_DEVICE=cpu EMMY_PYTHON=%s EMMY_CUBIN_CACHE=%s/cc"):format(so, py, d) })
  -- (the mock driver loads no kernel: the run fails its checks, and the bench says emmy was not benched)
  eq(code, 1, err)
  check(out:find("bench: emmy not benched", 1, true), out)
  check(out:find("benched at seq_len=8 (bound) on Mock GPU", 1, true), out)
  check(out:find("whole graph (speedup vs eager", 1, true) and out:find("eager%s+[%d.]+%s+[%d.]+%-[%d.]+%s+1%.00x"), out)
  check(out:find("k_linear_7363a2%s+self_attn%.q_proj linear%s+full"), out)
  local _, k = validate(d .. "/dump")
  eq(#k.kernels, 9, "one row per distinct kernel")
  for _, r in ipairs(k.kernels) do check(r.eager and r.eager.median_us > 0, r.name .. ": eager timed on the CPU") end
  check(io.open(d .. "/dump/kernels.html") ~= nil, "page written")
end)

test("emmy run --bench, emmy's side end to end on the mock driver (EMMY_MOCK_ANY_KERNEL: every kernel a 2 µs no-op)", function()
  local d = tmpdir()
  local so = mock_driver(d)
  local code, out, err = emmy({ "run", "Qwen/Qwen3-Embedding-0.6B", "--layer", "0", "--dynamic", "seq_len@x:1", "--seq-len", "8",
    "--bench", "--bench-backends", "emmy", "--ab", "BM=128", "--kernel", "linear_7363", "--dump-dir", d .. "/dump" },
    { env = ("EMMY_MOCK_ANY_KERNEL=1 EMMY_LIBCUDA=%s EMMY_LIBCUPTI=/nonexistent EMMY_CUBIN_CACHE=%s/cc"):format(so, d) })
  eq(code, 1, "the no-op kernels are wrong: " .. err)
  -- the whole layer: 10 launches of 2 µs of modeled time; each distinct kernel alone 2 µs
  check(out:find("emmy%s+20%.0%s+20%.0%-20%.0"), out)
  local _, k = validate(d .. "/dump")
  eq(#k.kernels, 9)
  for _, r in ipairs(k.kernels) do
    check(r.emmy and math.abs(r.emmy.median_us - 2) < 1e-3, r.name .. ": 2 µs alone")
    check(r.accuracy ~= "ok", r.name .. ": the no-op's output is wrong and says so")
  end
  check(out:find("note: in-program times: CUPTI", 1, true), "CUPTI missing or refusing is a note: " .. out)
  check(out:find("k_linear_7363a2%s+ab BM=128.-wrong: v24"), "an A/B variant is checked before it is timed: " .. out)
end)

test("bench/gemm.lua --cases: an unknown case is a one-line usage error; qwen4b (Qwen3-4B) is one", function()
  local code, out, err = emmy({ ROOT .. "/bench/gemm.lua", "--cases", "qwen,qwen5" })
  check(code ~= 0, "non-zero exit")
  eq(err, 'emmy: bench/gemm.lua: --cases takes squares, qwen, llama or qwen4b, not "qwen5"\n', "one line")
  eq(out, "", "nothing on stdout")
end)

test("bench/gemm.lua --kernels and --pins on the mock driver: the named kernels only, each pin over the chosen variant", function()
  local d = tmpdir()
  local so = mock_driver(d)
  local env = ("EMMY_MOCK_ANY_KERNEL=1 EMMY_LIBCUDA=%s EMMY_LIBCUPTI=/nonexistent EMMY_CUBIN_CACHE=%s/cc"):format(so, d)
  local code, out, err = emmy({ ROOT .. "/bench/gemm.lua", "--cases", "qwen", "--batches", "1", "--kernels", "add_f97",
    "--match", "X=1", "--pins", "STAGES=6;STAGES=4,RASTER=2", "--json", d .. "/g.json" }, { env = env })
  eq(code, 0, err .. out)
  local j = cjson.decode(read(d .. "/g.json"))
  local roles = {}
  for _, v in ipairs(j.variants) do
    eq(v.kernel, "k_linear_add_f97280", "only the kernel --kernels names")
    roles[#roles + 1] = v.role
  end
  eq(table.concat(roles, ","), "chosen,pinned,pinned")
  check(j.variants[2].knobs:find("STAGES=6", 1, true) and j.variants[3].knobs:find("RASTER=2,", 1, true), j.variants[3].knobs)
  local function rest(k) return (k:gsub("STAGES=%d+", ""):gsub("RASTER=%d+", "")) end
  eq(rest(j.variants[3].knobs), rest(j.variants[1].knobs), "a pin keeps the chosen variant's other knobs")
  -- a pin the emitter refuses (BM=128 with the chosen WM=4) is its own error row; the others still run
  local c3, o3, e3 = emmy({ ROOT .. "/bench/gemm.lua", "--cases", "qwen", "--batches", "1", "--kernels", "add_f97",
    "--match", "X=1", "--pins", "BM=128;STAGES=6", "--json", d .. "/g3.json" }, { env = env })
  eq(c3, 0, e3 .. o3)
  local j3 = cjson.decode(read(d .. "/g3.json"))
  eq(#j3.variants, 3)
  check(j3.variants[2].error:find("^emit: .*WGMMA=1 needs BM 64 or 128 with WM=BM/16"), j3.variants[2].error)
  check(not j3.variants[3].error:find("^emit:"), "the next pin was built: " .. j3.variants[3].error)
  local c2, _, e2 = emmy({ ROOT .. "/bench/gemm.lua", "--pins", "STAGES=99" }, { env = env })
  check(c2 == 2 and e2:find("--pins 'STAGES=99'", 1, true), "a pin outside the knob's values is a usage error: " .. e2)
  -- DIAG (a diagnostic whose results are wrong by design) is timed unchecked, marked, never the best; DIAG=2
  -- without CLUSTER=2 is the emitter's one-line refusal (132 SMs: the chosen variant is the persistent one, split in
  -- two over K — atom.split2_small — so the clustered pins take SPLIT_K=1)
  local c4, o4, e4 = emmy({ ROOT .. "/bench/gemm.lua", "--cases", "qwen", "--batches", "1", "--kernels", "add_f97",
    "--match", "X=1", "--pins", "DIAG=1;CLUSTER=2,SPLIT_K=1,DIAG=3;DIAG=2;CLUSTER=2,SPLIT_K=1,DIAG=7;CLUSTER=2,SPLIT_K=1,DIAG=4",
    "--json", d .. "/g4.json" },
    { env = env .. " EMMY_MOCK_SMS=132" })
  eq(c4, 0, e4 .. o4)
  local j4 = cjson.decode(read(d .. "/g4.json"))
  eq(#j4.variants, 6)
  -- DIAG=7 (3 with no cluster barrier) is timed too; 4 without 2 is refused
  check(j4.variants[5].role == "diag" and j4.variants[5].us and j4.variants[5].knobs:find("CLUSTER=2,DIAG=7", 1, true), tostring(j4.variants[5].knobs))
  check(j4.variants[6].error and j4.variants[6].error:find("DIAG=4 takes a persistent GEMM apart", 1, true), tostring(j4.variants[6].error))
  check(j4.variants[2].role == "diag" and j4.variants[2].us and not j4.variants[2].error, "DIAG=1 timed unchecked")
  check(j4.variants[3].role == "diag" and j4.variants[3].knobs:find("CLUSTER=2,DIAG=3", 1, true), j4.variants[3].knobs)
  check(j4.variants[4].error and j4.variants[4].error:find("DIAG=2 takes a persistent GEMM apart", 1, true), tostring(j4.variants[4].error))
  check(o4:find("unchecked (DIAG=1", 1, true), o4)
  for _, r in ipairs(j4.rows or {}) do check(not tostring(r[11] or ""):find("DIAG", 1, true), "a DIAG variant is never the best") end
end)

test("a kernel that never finishes: the watchdog ends the process after EMMY_HANG_S seconds with one line naming the waiting call and the last launch", function()
  local d = tmpdir()
  local so = mock_driver(d)
  local env = ("EMMY_MOCK_ANY_KERNEL=1 EMMY_MOCK_HANG=1 EMMY_HANG_S=1 EMMY_LIBCUDA=%s EMMY_LIBCUPTI=/nonexistent EMMY_CUBIN_CACHE=%s/cc"):format(so, d)
  local t0 = os.time()
  local code, out, err = emmy({ "60", BIN, "run", "Qwen/Qwen3-Embedding-0.6B", "--layer", "0", "--dynamic", "seq_len@x:1", "--seq-len", "7" },
    { env = env, bin = "timeout" })
  eq(code, 1, err .. out)
  check(os.time() - t0 < 50, "ended by the watchdog, not the timeout")
  local line = err:match("emmy: cuCtxSynchronize has waited [^\n]*")
  check(line and line:find("(last launch: k_", 1, true) and line:find("EMMY_HANG_S", 1, true), err)
  -- EMMY_HANG_S=0: no watchdog (the timeout ends it; with the watchdog the run ends at ~8 s on this machine)
  local c0 = emmy({ "12", BIN, "run", "Qwen/Qwen3-Embedding-0.6B", "--layer", "0", "--dynamic", "seq_len@x:1", "--seq-len", "7" },
    { env = env:gsub("EMMY_HANG_S=1", "EMMY_HANG_S=0"), bin = "timeout" })
  eq(c0, 124, "EMMY_HANG_S=0 waits")
end)

test("bench/gemm.lua --squares takes MxNxK (a plain linear of that shape) beside N; a malformed entry is a one-line usage error before any GPU work", function()
  local d = tmpdir()
  local so = mock_driver(d)
  local env = ("EMMY_MOCK_ANY_KERNEL=1 EMMY_LIBCUDA=%s EMMY_LIBCUPTI=/nonexistent EMMY_CUBIN_CACHE=%s/cc"):format(so, d)
  local code, out, err = emmy({ ROOT .. "/bench/gemm.lua", "--cases", "squares", "--squares", "64,64x192x128", "--limit", "1",
    "--json", d .. "/s.json" }, { env = env })
  eq(code, 0, err .. out)
  local j = cjson.decode(read(d .. "/s.json"))
  local cases = {}
  for _, v in ipairs(j.variants) do cases[v.case] = v end
  check(cases["64³"] and cases["64×192×128"], "both cases: " .. out)
  eq(cases["64×192×128"].flops, 2 * 64 * 192 * 128, "the linear's FLOPs")
  local c2, o2, e2 = emmy({ ROOT .. "/bench/gemm.lua", "--cases", "squares", "--squares", "64x192" }, { env = "EMMY_LIBCUDA=/nonexistent" })
  check(c2 == 2 and e2:find("--squares takes N or MxNxK, not \"64x192\"", 1, true) and not e2:find("\n.", 1) and o2 == "", e2)
end)

test("a persistent clustered grid is capped at the clusters that fit at once (cuOccupancyMaxActiveClusters)", function()
  local d = tmpdir()
  local so = mock_driver(d)
  -- q_proj on the persistent pipeline in 2-CTA clusters: the mock's 4 SMs would take 2 clusters; the driver says 1 fits
  local function grids(max_clusters, extra)
    local log = d .. "/launches" .. max_clusters .. (extra and "x" or "")
    emmy({ "run", "Qwen/Qwen3-Embedding-0.6B", "--layer", "0", "--dynamic", "seq_len@x:1", "--seq-len", "512" },
      { env = (extra and extra .. " " or "") .. ("EMMY_MOCK_ANY_KERNEL=1 EMMY_MOCK_MAX_CLUSTERS=%d EMMY_MOCK_LAUNCH_LOG=%s EMMY_LIBCUDA=%s EMMY_CUBIN_CACHE=%s/cc "
        .. "EMMY_KNOBS=k_linear_7363a2:PERSIST=1,k_linear_7363a2:CLUSTER=2,k_sdpa:APERSIST=0,k_linear_silu_mul:PERSIST=0,k_linear_ad15f3:PERSIST=0"):format(max_clusters, shell_quote(log), so, d) })
    local out = {}
    for l in (read(log) or ""):gmatch("[^\n]+") do
      -- (q_proj's 128 x 64 lead: two consumer warpgroups and the producer's, a one-dimensional grid; the attention
      -- kernel, 384 threads too, is pinned off its persistent form, whose grid the mock's 4 SMs would cap to 4, and so
      -- are the two duals (gate/up, k+v), whose 128 x 64 tiles are many waves of the mock's 4 SMs: atom.dual_wide_lead)
      local gx = l:match("^grid (%d+) 1 1 block 384 1 1 ")
      if gx then out[#out + 1] = tonumber(gx) end
    end
    return out
  end
  local two, one = grids(2), grids(1)
  check(#two > 0 and #one > 0, "the persistent kernel launched")
  for _, g in ipairs(two) do eq(g, 4, "2 clusters fit: the mock's 4 SMs") end
  for _, g in ipairs(one) do eq(g, 2, "1 cluster fits: a grid of one cluster") end
  -- EMMY_PERSIST_CTAS (a diagnostic): at most that many CTAs, whole clusters
  local capped = grids(2, "EMMY_PERSIST_CTAS=3")
  check(#capped > 0, "the persistent kernel launched")
  for _, g in ipairs(capped) do eq(g, 2, "3 CTAs at most, whole 2-CTA clusters: 2") end
end)

test("run --ab: each spec a row beside the default; a gate's refusal, a knob the kernel lacks, pins that exclude each other are refused rows", function()
  local d = tmpdir()
  local so = mock_driver(d)
  local code, out, err = emmy({ "run", "Qwen/Qwen3-Embedding-0.6B", "--layer", "0", "--dynamic", "seq_len@x:1", "--seq-len", "8",
    "--kernel", "linear_7363", "--ab", "BM=128", "--ab", "TMA=0,WGMMA=1", "--ab", "THREADS=64", "--ab", "BM=96",
    "--dump-dir", d .. "/dump" }, { env = ("EMMY_LIBCUDA=%s EMMY_CUBIN_CACHE=%s/cc"):format(so, d) })
  eq(code, 1, "the mock loads no kernel: " .. err)
  check(out:find("k_linear_7363a2%s+ab BM=128%s.-%*BM=128%* %*WM=8%*"), "the realized variant's differing knobs: " .. out)
  check(out:find("the pins TMA=0,WGMMA=1 match no candidate together", 1, true), out)
  check(out:find("refused: THREADS is not a knob of this kernel", 1, true), out)
  check(out:find("pin BM=96 matches no candidate (BM takes 64, 128, 32)", 1, true), out)
  local j = cjson.decode(read(d .. "/dump/63_ab.json"))
  eq(#j.ab, 5, "the default and four specs")
  local c2, _, e2 = emmy { "run", "x.torch.json", "--ab", "bm=1" }
  check(c2 == 2 and e2:find("'bm=1' is not KNOB=N", 1, true), e2)
  local c3, _, e3 = emmy { "run", "x.torch.json", "--ab", "BMM=64" }
  check(c3 == 2 and e3:find("--ab 'BMM=64': 'BMM' is not a knob (did you mean BM?", 1, true), e3)
end)

test("run --pins: the chosen variant of the --kernel ones with the set over it (not EMMY_KNOBS' first candidate that has it), printed; one set only", function()
  local d = tmpdir()
  local so = mock_driver(d)
  local env = ("EMMY_MOCK_ANY_KERNEL=1 EMMY_LIBCUDA=%s EMMY_LIBCUPTI=/nonexistent EMMY_CUBIN_CACHE=%s/cc"):format(so, d)
  local L = { "run", "Qwen/Qwen3-Embedding-0.6B", "--layer", "0", "--dynamic", "seq_len@x:1", "--seq-len", "8", "--kernel", "k_linear_ad15f3" }
  local _, out = emmy(args(L, "--pins", "CLUSTER=2"), { env = env })
  local line = out:match("pinned: k_linear_ad15f3 ([^\n]*)") or ""
  check(line:find("CLUSTER=2,", 1, true) and line:find("PERSIST=1,", 1, true) and line:find("EPI_SMEM=5,", 1, true), "the chosen's knobs kept: " .. out)
  check(not out:find("pinned: k_linear_7363a2", 1, true), "only the --kernel ones")
  local c2, _, e2 = emmy(args(L, "--pins", "STAGES=4;STAGES=6"))
  check(c2 == 2 and e2:find("--pins takes one set", 1, true), e2)
end)

test("run --profile: ncu's CSV parsed and aggregated per backend; unknown metrics dropped and said; ERR_NVGPUCTRPERM is one line", function()
  local profile = require "emmy.profile"
  local csv = table.concat({
    '"ID","Kernel Name","gpu__time_duration.sum","sm__warps_active.avg.pct_of_peak_sustained_active","sm__inst_executed_pipe_lsu.sum","launch__registers_per_thread"',
    '"","","usecond","%","inst","register/thread"',
    '"0","k_linear_aaaaaa","10.5","20","1,000","96"',
    '"1","k_rms_norm_bbbbbb","2.5","60","500","32"',
  }, "\n")
  local rows = profile.parse_csv("==PROF== noise\n" .. csv)
  eq(#rows, 2)
  eq(rows[1].name, "k_linear_aaaaaa")
  eq(rows[1].duration_us, 10.5)
  eq(rows[1].lsu, 1000, "thousands separators")
  local agg = profile.aggregate(rows)
  eq(agg.duration_us, 13)
  check(math.abs(agg.occupancy - (20 * 10.5 + 60 * 2.5) / 13) < 1e-12, "weighted by duration")
  eq(agg.regs, 96)
  eq(agg.lsu, 1500)
  local ns = profile.parse_csv('"ID","Kernel Name","gpu__time_duration.sum"\n"","","nsecond"\n"0","k","2500"')
  eq(ns[1].duration_us, 2.5, "ns to µs")
  local nou = profile.parse_csv('"ID","Kernel Name","gpu__time_duration.sum"\n"0","k","2500"\n"1","k2","500"')
  eq(#nou, 2, "no units row: both kernels")
  eq(nou[1].duration_us, 2.5, "base unit ns")
  -- a stand-in ncu: refuses the FMA pipe metric once, then prints the CSV above for whatever it runs
  local d = tmpdir()
  write_file(d .. "/ncu", "#!/bin/sh\ncase \"$*\" in *pipe_fma*) echo '==ERROR== Failed to find metric sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active'; exit 1;; esac\n"
    .. "cat <<'EOF'\n" .. csv .. "\nEOF\n")
  sh("chmod +x " .. d .. "/ncu")
  local code, o2, e2 = emmy({ ROOT .. "/tests/lua/ncu_probe.lua" }, { env = "EMMY_NCU=" .. d .. "/ncu" })
  eq(code, 0, e2)
  check(o2:find("dropped sm__pipe_fma_cycles_active", 1, true) and o2:find("duration 13.0", 1, true), o2)
  write_file(d .. "/ncu", "#!/bin/sh\necho '==ERROR== ERR_NVGPUCTRPERM - The user does not have permission'\nexit 1\n")
  local c3, o3 = emmy({ ROOT .. "/tests/lua/ncu_probe.lua" }, { env = "EMMY_NCU=" .. d .. "/ncu" })
  check(c3 == 0 and o3:find("error: ncu: this user may not read the GPU's performance counters (ERR_NVGPUCTRPERM)", 1, true), o3)
end)

test("profile.parse_sass: ncu's per-instruction CSV (a table a kernel, whatever its columns) to stall samples by instruction and opcode", function()
  local profile = require "emmy.profile"
  local csv = table.concat({
    "==PROF== Connected to process 1",
    '"Kernel Name","k_sdpa_1"',
    '"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)","stall_long_sb","stall_long_sb (Not Issued)","stall_wait","Instructions Executed"',
    '"0x7f00","HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24","120","100","0","0","90","64"',
    '"0x7f10","@P0 SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR8], R3","300","280","250","240","10","1,024"',
    '"0x7f20","MUFU.EX2 R5, R6","40","30","0","0","","512"',
    '"Kernel Name","k_linear_2"',
    '"Address","Source","Warp Stall Sampling (All Samples)"',
    '"0x10","FFMA R1, R2, R3, R4","7"',
  }, "\n")
  local t = profile.parse_sass(csv)
  eq(#t, 2, "two kernels")
  eq(t[1].kernel, "k_sdpa_1") eq(t[1].total, 460) eq(#t[1].rows, 3)
  eq(t[1].rows[2].reasons.stall_long_sb, 250) eq(t[1].rows[2].reasons.stall_wait, 10)
  eq(t[1].rows[3].reasons.stall_wait, nil, "an empty reason is left out")
  eq(t[1].rows[2].reasons["stall_long_sb (Not Issued)"], nil, "a reason's not-issued twin is left out")
  eq(t[2].kernel, "k_linear_2") eq(t[2].total, 7)
  eq(profile.opcode("@P0 SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR8], R3"), "SYNCS")
  eq(profile.opcode("@!UP1 HGMMA.64x128x16.F32.BF16 R24"), "HGMMA")
  eq(profile.opcode("MUFU.EX2 R5, R6"), "MUFU")
  -- (ncu 2025's export indents the SASS: "      LDC R1, …", "  @!P0  BRA …" read as "?" until the 36th session)
  eq(profile.opcode("      LDC R1, c[0x0][0x28]"), "LDC")
  eq(profile.opcode("  @!P0  BRA 0x7f97c97b4250"), "BRA")
  eq(#profile.parse_sass("no table here"), 0)
  profile.print_sass(t, 2) -- (prints: the opcode table and the top two instructions a kernel)
end)

test("emmy run --profile-sass on the mock driver with a stand-in ncu: the report read back per SASS instruction, the table printed, 62_ncu_sass.csv written", function()
  local d = tmpdir()
  local so = mock_driver(d)
  write_file(d .. "/ncu", table.concat({
    "#!/bin/sh",
    'case "$*" in',
    '  *" -i "*|"-i "*) printf \'%s\\n\' \'"Kernel Name","k_linear_7363a2"\' \'"Address","Source","Warp Stall Sampling (All Samples)","stall_long_sb"\' \'"0x10","@P0 SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR8], R3","90","80"\' \'"0x20","HGMMA.64x64x16.F32.BF16 R24, gdesc[UR4], R24","10","0"\' ;;',
    '  *) echo "==PROF== profiling" ;;',
    "esac",
  }, "\n") .. "\n")
  sh("chmod +x " .. shell_quote(d .. "/ncu"))
  local code, out, err = emmy({ "run", "Qwen/Qwen3-Embedding-0.6B", "--layer", "0", "--dynamic", "seq_len@x:1", "--seq-len", "8",
    "--profile-sass", "2", "--dump-dir", d .. "/dump" },
    { env = ("EMMY_MOCK_ANY_KERNEL=1 EMMY_LIBCUDA=%s EMMY_LIBCUPTI=/nonexistent EMMY_CUBIN_CACHE=%s/cc EMMY_NCU=%s/ncu"):format(so, d, d) })
  eq(code, 1, "the no-op kernels are wrong: " .. err)
  check(out:find("stall samples of k_linear_7363a2: 100 over 2 SASS instructions", 1, true), out)
  check(out:find("SYNCS%s+1%s+90%s+90%.0"), out)
  check(out:find("stall_long_sb 80", 1, true), out)
  check(read_file(d .. "/dump/62_ncu_sass.csv"):find("TRYWAIT", 1, true), "the raw CSV kept")
end)

-- bench/gemm.lua on the mock driver with one pin on Qwen3's down_proj at 512 tokens (extra: more arguments, env: more
-- environment): the pinned variants (their knobs carrying mark) were built and launched — the mock computes nothing, so
-- each is checked and found wrong, never refused by the emitter.
local function mock_pin_bench(d, pin, mark, extra, env)
  local so = mock_driver(d)
  local e = ("%sEMMY_MOCK_SMS=132 EMMY_MOCK_ANY_KERNEL=1 EMMY_LIBCUDA=%s EMMY_LIBCUPTI=/nonexistent EMMY_CUBIN_CACHE=%s/cc")
    :format(env and env .. " " or "", so, d)
  local a = { ROOT .. "/bench/gemm.lua", "--cases", "qwen", "--batches", "1", "--kernels", "add_f97", "--match", "X=1" }
  for _, x in ipairs(extra or {}) do a[#a + 1] = x end
  for _, x in ipairs { "--pins", pin, "--json", d .. "/g.json" } do a[#a + 1] = x end
  local code, out, err = emmy(a, { env = e })
  check(code ~= 2, err .. out)
  local seen = false
  for _, v in ipairs(cjson.decode(read(d .. "/g.json")).variants) do
    if v.knobs:find(mark, 1, true) then
      seen = true
      check(v.error and v.error:find("^wrong"), "built and launched (the mock computes nothing): " .. tostring(v.error))
    end
  end
  check(seen, "the " .. mark .. " pin ran: " .. out)
end

test("bench/gemm.lua --stamp takes a stream-K pin (STAMP=1 with STREAM_K=1: the records first, the slots and flags after): built and launched on the mock driver", function()
  mock_pin_bench(tmpdir(), "BM=128,BN=128,WM=8,WG_K=1,SPLIT_K=1,STREAM_K=1,EPI_SMEM=0,STAGES=4", "STREAM_K=1", { "--stamp" })
end)

test("SPLIT_L2=1 on the mock driver: the persistent grid in whole groups of SPLIT_K CTAs, no cluster, a slot and flags a CTA of scratch", function()
  local d = tmpdir()
  local log = d .. "/launches"
  -- 32 tiles of 128 x 128 split in four would take 128 CTAs; capped at 6 (EMMY_PERSIST_CTAS), whole groups of 4: 4
  mock_pin_bench(d, "BM=128,BN=128,WM=8,WG_K=1,SPLIT_K=4,SPLIT_L2=1,EPI_SMEM=0,STAGES=6", "SPLIT_L2=1", nil,
    "EMMY_PERSIST_CTAS=6 EMMY_MOCK_LAUNCH_LOG=" .. shell_quote(log))
  local grids = {}
  for l in (read(log) or ""):gmatch("[^\n]+") do
    local gx = l:match("^grid (%d+) 1 1 block 384 1 1 smem " .. (1024 + 6 * 32768) .. "$")
    if gx then grids[#grids + 1] = tonumber(gx) end
  end
  check(#grids > 0, "the SPLIT_L2 variant launched: " .. (read(log) or ""))
  for _, g in ipairs(grids) do eq(g, 4, "at most 6 CTAs, whole groups of 4") end
end)

test("bench/detach.sh: a job outlives its start, a wait brings back its log and files, or says it still runs", function()
  local d = tmpdir()
  local env = ("cd %s && DETACH_DIR=%s/j OUT=%s/out "):format(shell_quote(ROOT), d, d)
  local c, o = sh(env .. ("sh bench/detach.sh start j1 sh -c 'echo one; sleep 2; echo two > %s/made; exit 4'"):format(d))
  eq(c, 0, "start: " .. o)
  check(o:find("j1: started (pid ", 1, true), o)
  c, o = sh(env .. "sh bench/detach.sh wait j1 0")
  eq(c, 2, "still running: " .. o)
  check(o:find("j1: still running after 0 s", 1, true), o)
  c, o = sh(env .. ("sh bench/detach.sh wait j1 20 %s/made %s/none"):format(d, d))
  eq(c, 0, "ended: " .. o)
  check(o:find("one\n.*j1: rc 4"), o)
  check(read(d .. "/out/j1.log"):find("one", 1, true) and read(d .. "/out/made"), "the log and the file brought back")
  for _, bad in ipairs { "wait nope 1", "start 'a b' true", "wait j1 x", "bogus j1" } do
    c, o = sh(env .. "sh bench/detach.sh " .. bad)
    eq(c, 1, bad .. ": " .. o)
    eq(#lines_of(o), 1, bad .. ": one line: " .. o)
  end
end)


test("bench/verdict.lua: issues 19 and 20's Done-when rows from bench/status.sh's files, each against its bound; the device named; a missing file said", function()
  local d = tmpdir()
  local function put(name, t)
    local f = assert(io.open(d .. "/" .. name, "w"))
    f:write(cjson.encode(t))
    f:close()
  end
  local function v(case, kernel, role, us) return { case = case, kernel = kernel, role = role, us = us } end
  put("status_squares.json", { device = "NVIDIA H200", cases = { { label = "4096³", kernel = "k_a", torch = { best = "eager", best_us = 170.0 } } },
    variants = { v("4096³", "k_a", "chosen", 180.0), v("4096³", "k_a", "candidate", 178.0) } })
  put("status_gemm.json", { device = "NVIDIA H200", cases = { { label = "qwen b1×512", kernel = "k_q", torch = { best = "compile", best_us = 10.0 } },
    { label = "qwen b1×512", kernel = "k_o", torch = { best = "eager", best_us = 8.0 } } },
    variants = { v("qwen b1×512", "k_q", "chosen", 9.0), v("qwen b1×512", "k_o", "chosen", 8.4), v("qwen b1×512", "k_o", "stamp", 1.0) } })
  put("status_attention.json", { device = "NVIDIA H200", cases = {
    { label = "b1s512 d128 16/8 causal", batch = 1, seq = 512, chosen = { us = 8.5 }, best = { us = 8.5 }, torch = { best = "cudnn", best_us = 10.0 } },
    { label = "b8s512 d128 16/8 causal", batch = 8, seq = 512, chosen = { us = 30.0 }, torch = { best = "cudnn", best_us = 31.0 } } } })
  local c, o, e = emmy { ROOT .. "/bench/verdict.lua", d, "--json", d .. "/v.json" }
  eq(c, 0, e .. o)
  for _, want in ipairs { "Device: NVIDIA H200 — the machine issues 19 and 20 are judged on.",
    "| 19 | 4096³ GEMM (TFLOP/s of cuBLAS's) | 180.0 | 178.0 | 170.0 | eager | 0.955 | >= 0.95 | yes |",
    "| 19 | qwen b1×512 k_q | 9.0 | 9.0 | 10.0 | compile | 0.900 | <= 1.00 | yes |",
    "| 19 | qwen b1×512 k_o | 8.4 | 8.4 | 8.0 | eager | 1.050 | <= 1.00 | **no** |",
    "| 20 | b1s512 d128 16/8 causal | 8.5 | 8.5 | 10.0 | cudnn | 0.850 | <= 0.80 | **no** |",
    "| 20 | b8s512 d128 16/8 causal | 30.0 | - | 31.0 | cudnn | 0.968 | <= 1.00 | yes |",
    "3 of 5 rows met; not found: status_layer_Qwen_Qwen3-Embedding-0_6B.json." } do
    check(o:find(want, 1, true), "missing: " .. want .. "\n" .. o)
  end
  local j = cjson.decode(read(d .. "/v.json"))
  eq(j.met, 3) eq(j.over, 2) eq(j.h200, true)
  -- the layer's by-kind rows (60_bench_compare.json) against torch.compile's; on an H100 the table is a picture only
  put("status_layer_Qwen_Qwen3-Embedding-0_6B.json", { by_kind = { backends = { "eager", "tcompile", "emmy" }, rows = {
    { kind = "matmul", eager = { us = 47.0, n = 7 }, tcompile = { us = 46.3, n = 7 }, emmy = { us = 44.0, n = 4 } },
    { kind = "attention", eager = { us = 10.9, n = 1 }, tcompile = { us = 10.8, n = 1 }, emmy = { us = 8.7, n = 1 } } } } })
  put("status_squares.json", { device = "NVIDIA H100 80GB HBM3", cases = {}, variants = {} })
  c, o = emmy { ROOT .. "/bench/verdict.lua", d }
  eq(c, 0, o)
  -- two calls' folders: each file from the last that has it (here the second's layer file, the first's attention)
  local d2 = tmpdir()
  sh(("cp %s/status_layer_Qwen_Qwen3-Embedding-0_6B.json %s/ && rm %s/status_layer_Qwen_Qwen3-Embedding-0_6B.json"):format(d, d2, d))
  local c3, o3 = emmy { ROOT .. "/bench/verdict.lua", d, d2 }
  eq(c3, 0, o3)
  check(o3:find("by-kind matmul row | 44.0", 1, true) and o3:find("| 20 | b8s512 d128 16/8 causal |", 1, true), o3)
  check(o3:find("not found: status_gemm.json.", 1, true) == nil and o3:find("rows met.", 1, true), o3)
  check(o:find("Device: NVIDIA H100 80GB HBM3 — not an H200", 1, true), o)
  check(o:find("| 19 | Qwen3-Embedding-0.6B layer 0, by-kind matmul row | 44.0 | - | 46.3 | tcompile | 0.950 | <= 1.00 | yes |", 1, true), o)
  check(o:find("| 20 | Qwen3-Embedding-0.6B layer 0, by-kind attention row | 8.7 | - | 10.8 | tcompile | 0.806 | <= 1.00 | yes |", 1, true), o)
  -- not a folder, or no status file: one line, non-zero
  for _, bad in ipairs { { d .. "/nope", 2 }, { tmpdir(), 1 }, { nil, 2 } } do
    local c2, o2, e2 = emmy { ROOT .. "/bench/verdict.lua", bad[1] }
    eq(c2, bad[2], o2 .. e2)
    eq(#lines_of(e2), 1, e2)
  end
end)

test("bench/sass.lua: no graph, an unknown option, or a missing nvdisasm is one line and a non-zero exit (the SASS itself needs nvdisasm, which CI lacks)", function()
  local c1, _, e1 = emmy { ROOT .. "/bench/sass.lua" }
  check(c1 ~= 0 and e1:find("give the graph or model to compile", 1, true), e1)
  local c2, _, e2 = emmy { ROOT .. "/bench/sass.lua", "g.json", "--nope" }
  check(c2 ~= 0 and e2:find("unknown option '--nope'", 1, true), e2)
  local ok, nv = pcall(require, "emmy.nvrtc")
  if not ok or not nv.version() then return end
  local c3, _, e3 = emmy({ ROOT .. "/bench/sass.lua", ROOT .. "/tests/fixtures/sdpa_noncausal.torch.json", "--nvdisasm", "/nonexistent/nvdisasm" })
  check(c3 ~= 0 and e3:find("nvdisasm gave no instructions", 1, true), e3)
  local _, n = e3:gsub("\n", "")
  check(n <= 1, "one line: " .. e3)
end)

return T
