-- bench/attention.lua without a GPU: every case of issue 20's table compiles to one attention kernel (--dry-run,
-- --graphs), the command line refuses what it cannot run with one line and exit 2, --match/--pins/--limit pick the
-- variants, the GPU path end to end on the mock driver (every kernel a no-op: each variant is checked, found wrong
-- and not timed), and torch's reference output (bench.py --out) against emmy's CPU reference.
local cjson = require "cjson"
local graphjson = require "emmy.graphjson"
local ref = require "emmy.ref"

local T = {}
local function test(name, fn) T[#T + 1] = { name, fn } end

local SCRIPT = ROOT .. "/bench/attention.lua"
local function bench(list, o) return emmy(args(SCRIPT, list), o) end

-- The case lines of a --dry-run: {label = {kernel, candidates, check, chosen, swept = {...}, pinned = {...}}}.
local function dry_cases(out)
  local cases, order, cur = {}, {}, nil
  for _, l in ipairs(lines_of(out)) do
    local label, nk, kname, ncand, chk = l:match("^(b%d+s%d+ d%d+ %d+/%d+ [%a-]+): (%d+) kernels?, attention (k_sdpa_%x+): (%d+) candidates, check ([%a ]-), ")
    if label then
      cur = { kernels = tonumber(nk), kernel = kname, candidates = tonumber(ncand), check = chk, swept = {}, pinned = {} }
      cases[label], order[#order + 1] = cur, label
    elseif cur then
      local role, knobs = l:match("^  (%a+)%s+(%S+)")
      if role == "chosen" then cur.chosen = knobs
      elseif role == "swept" or role == "pinned" then table.insert(cur[role], l:match("^  %a+%s+(.*)$")) end
    end
  end
  return cases, order
end

-- A scratch folder and the mock driver built in it (skips without a C compiler or NVRTC): d, the library's path.
local function mock_driver()
  local d = tmpdir()
  local so = mock_driver_so(d)
  local okn, nv = pcall(require, "emmy.nvrtc")
  if not okn or not nv.version() then skip("NVRTC not found") end
  return d, so
end

test("--dry-run --stamp: each FLASH=2 variant also stamped (STAMP=1), and every stamped one emits", function()
  local code, out, err = bench({ "--dry-run", "--limit", "1", "--shapes", "b8s512", "--causal", "1", "--stamp" })
  eq(code, 0, "exit: " .. err)
  local n = 0
  for _, l in ipairs(lines_of(out)) do
    local role, knobs, rest = l:match("^  (%a+)%s+(%S+)(.*)$")
    if role == "stamp" then
      n = n + 1
      check(knobs:find("FLASH=2", 1, true) and not rest:find("refused", 1, true), l)
    end
  end
  check(n >= 2, "a stamped variant a case at least (two head layouts): " .. out)
end)

test("--dry-run: each case of issue 20's table is one attention kernel; b1s512 d128 16/8 causal is the Qwen3 layer's", function()
  local d = tmpdir()
  local code, out, err = bench({ "--dry-run", "--limit", "2", "--graphs", d, "--layout", "model" })
  eq(code, 0, "exit: " .. err)
  check(out:find("16 cases on ", 1, true), out)
  local cases, order = dry_cases(out)
  eq(#order, 16, "4 shapes x 2 head layouts x causal and not: " .. out)
  for _, label in ipairs(order) do
    local c = cases[label]
    eq(c.kernels, 1, label .. ": kernels")
    eq(c.check, label:find("s8192", 1, true) and "torch" or "cpu ref", label .. ": the check")
    check(c.chosen and c.chosen:find("FLASH=[1-9]"), label .. ": a flash tier chosen: " .. tostring(c.chosen))
    eq(#c.swept, 2, label .. ": --limit 2")
    for _, s in ipairs(c.swept) do check(s:find("FLASH=[1-9]") and not s:find("refused", 1, true), label .. ": " .. s) end
  end
  -- the case the model runs: the very kernel the Qwen3 layer forms (its structural hash names it)
  local c2, o2, e2 = emmy { "compile", "Qwen/Qwen3-Embedding-0.6B", "--layer", "0", "--ir", "kernel" }
  eq(c2, 0, e2)
  local qwen = o2:match("(k_sdpa_%x+)%s+attention")
  eq(cases["b1s512 d128 16/8 causal"].kernel, qwen, "the layer's sdpa kernel")
  -- the graph files compile on their own, the output in the model's layout [B, S, HQ*D]
  local c3, o3, e3 = emmy { "compile", d .. "/sdpa_b8s512_d64_h32kv4_full.torch.json", "--ir", "kernel" }
  eq(c3, 0, e3)
  check(o3:find("1 kernels (1 distinct)", 1, true) and o3:find("o bf16[8, 512, 2048]", 1, true), o3)
  local g = assert(graphjson.read(d .. "/sdpa_b1s8192_d128_h16kv8_causal.torch.json"))
  local n = g:nodes()[1]
  eq(n.op, "aten.scaled_dot_product_attention.default")
  local a = {}
  for _, kv in ipairs(n.args) do a[kv[1]] = kv[2] end
  check(a.is_causal == true and a.enable_gqa == true and math.abs(a.scale - 128 ^ -0.5) < 1e-18, cjson.encode(a))
  eq(table.concat(g:value("k").shape, ","), "1,8,8192,128", "k [B, HKV, S, D]")
  -- --layout bhsd: the SDPA's own result, no views after it
  local c4, o4, e4 = bench({ "--dry-run", "--shapes", "b1s64", "--heads", "64:4:2", "--causal", "0", "--layout", "bhsd",
    "--limit", "0", "--graphs", d })
  eq(c4, 0, e4)
  local gb = assert(graphjson.read(d .. "/sdpa_b1s64_d64_h4kv2_full_bhsd.torch.json"))
  eq(#gb:nodes(), 1, "bhsd: the SDPA alone: " .. o4)
  eq(table.concat(gb:value(gb:outputs()[1]).shape, ","), "1,4,64,64")
end)

test("bad flags: one line naming the flag and what it takes, exit 2", function()
  for _, c in ipairs {
    { { "--shapes", "b1x512" }, "--shapes item 'b1x512' needs bBATCHsSEQ" },
    { { "--shapes", "b0s512" }, "batch and sequence must be at least 1" },
    { { "--shapes", "," }, "--shapes ',' names nothing" },
    { { "--heads", "128:16:5" }, "a multiple of the key/value heads" },
    { { "--heads", "128:16" }, "needs HEAD_DIM:Q_HEADS:KV_HEADS" },
    { { "--causal", "2" }, "--causal item '2' needs 1 (causal) or 0 (not)" },
    { { "--ref", "gpu" }, "--ref 'gpu': auto" },
    { { "--layout", "bshd" }, "--layout 'bshd': bhsd" },
    { { "--torch", "flashy" }, "--torch 'flashy': eager, flash, efficient, cudnn or math" },
    { { "--torch", "eager,none" }, "--torch 'none'" },
    { { "--match", "BQ=48" }, "BQ=48 is not a legal value of BQ" },
    { { "--pins", "BQX=64" }, "'BQX' is not a knob" },
    { { "--pins", "BQ" }, "--pins item 'BQ' needs KNOB=INT" },
    { { "--pins", "BQ=64,BQ=32" }, "gives BQ twice" },
    { { "--limit", "-1" }, "--limit needs an integer >= 0" },
    { { "--bogus" }, "unknown option '--bogus'" },
    { { "b1s512" }, "unexpected argument 'b1s512'" },
  } do
    local code, out, err = bench(args(c[1], "--dry-run"))
    local what = table.concat(c[1], " ")
    eq(code, 2, what .. ": exit (" .. err .. ")")
    check(err:find("^emmy: bench/attention.lua: ") or err:find("^emmy: .*bench/attention.lua: "), what .. ": " .. err)
    check(err:find(c[2], 1, true), what .. ": " .. err)
    eq(#lines_of(err), 1, what .. ": one line: " .. err)
    eq(out, "", what .. ": nothing on stdout")
  end
end)

test("--match, --limit, --all and --pins pick the variants; a pin the kernel lacks or the emitter refuses is a row", function()
  local base = { "--dry-run", "--shapes", "b1s512", "--heads", "128:16:8", "--causal", "1" }
  local code, out, err = bench(args(base, "--match", "BQ=32;BKV=64,KVST=1"))
  eq(code, 0, err)
  local c = dry_cases(out)["b1s512 d128 16/8 causal"]
  check(#c.swept > 2, out)
  for _, s in ipairs(c.swept) do check(s:find("BQ=32,", 1, true) or (s:find("BKV=64,", 1, true) and s:find("KVST=1,", 1, true)), s) end
  -- FLASH=0 (the scalar tier) only with --all
  local _, o2 = bench(base)
  check(not o2:find("swept%s+%S*FLASH=0"), "no scalar tier without --all")
  local _, o3 = bench(args(base, "--all", "--limit", "1000"))
  check(o3:find("swept%s+%S*FLASH=0"), "the scalar tier with --all: " .. o3)
  -- --limit 0: the chosen variant and the pins
  local c4, o4, e4 = bench(args(base, "--limit", "0", "--pins", "BQ=128,KVSPLIT=1;BM=64;KVSPLIT=2,KVST=2;BQ=64"))
  eq(c4, 0, e4)
  local p = dry_cases(o4)["b1s512 d128 16/8 causal"]
  eq(#p.swept, 0, "--limit 0")
  eq(#p.pinned, 3, "BQ=64 is the chosen variant itself: one row: " .. o4)
  check(p.pinned[1]:find("^APERSIST=0,BKV=128,BQ=128,FLASH=2,KVSPLIT=1,") and not p.pinned[1]:find("refused", 1, true), p.pinned[1])
  check(p.pinned[2]:find("refused: BM: not a knob of k_sdpa_%x+ %(it has APERSIST, BKV"), p.pinned[2])
  check(p.pinned[3]:find("refused: emit refused: ", 1, true), p.pinned[3])
  check(o4:find("  2 to time, 2 refused", 1, true), o4)
end)

test("on the mock driver: every variant is built, launched and checked before timing; the table, the JSON, exit 1", function()
  local d, so = mock_driver()
  local torch = sh(PY .. " -c 'import torch, numpy' 2>/dev/null") == 0
  local env = ("EMMY_MOCK_ANY_KERNEL=1 EMMY_LIBCUDA=%s EMMY_CUBIN_CACHE=%s/cc EMMY_TORCH_DEVICE=cpu EMMY_PYTHON=%s"):format(
    so, d, PY)
  local small = { "--shapes", "b1s64", "--heads", "64:4:2", "--causal", "1", "--layout", "model" }
  local code, out, err = bench(args(small, "--limit", "1", "--pins", "FLASH=1,BQ=32,BKV=32,KVSPLIT=1,KVST=2,OSMEM=0,OTMA=0;BM=64", "--torch", torch and "eager" or "none",
    "--json", d .. "/a.json"), { env = env })
  eq(code, 1, "the no-op kernels are wrong, so the chosen variant has no time: " .. err)
  check(out:find("b1s64 d64 4/2 causal: reference (cpu ref)", 1, true), out)
  check(out:find("b1s64 d64 4/2 causal%s+cpu ref%s+0/4%s+wrong"), "the table's row: " .. out)
  local j = cjson.decode(read_file(d .. "/a.json"))
  eq(j.format, "emmy.bench.attention")
  eq(j.device, "Mock GPU")
  local roles = {}
  for _, v in ipairs(j.variants) do
    roles[#roles + 1] = v.role
    check(v.us == nil and v.error, v.knobs .. ": no time")
    if v.knobs:find("BM=64", 1, true) then check(v.error:find("not a knob", 1, true), v.error)
    else check(v.error:find("^wrong: o: "), v.knobs .. ": checked before timing: " .. v.error) end
  end
  eq(table.concat(roles, ","), "chosen,swept,pinned,pinned")
  local c1 = j.cases[1]
  eq(c1.check, "cpu ref")
  eq(c1.flops, 4 * 1 * 4 * 64 * 64 * 64 / 2, "causal FLOPs")
  if torch then
    check(c1.torch.eager and c1.torch.eager.median_us > 0 and c1.torch.best == "eager", cjson.encode(c1.torch))
  end
  -- torch as the reference, and no torch at all: no reference, nothing timed, said so
  local c2, o2, e2 = bench(args(small, "--limit", "0", "--ref", "torch", "--torch", "none"),
    { env = env:gsub("EMMY_PYTHON=%S+", "EMMY_PYTHON=/bin/false") })
  eq(c2, 1, e2)
  check(o2:find("chosen APERSIST=0,BKV=%S+: no reference: torch gave no o %(tools/torchref/bench.py gave no result%)"), o2)
  check(o2:find("b1s64 d64 4/2 causal%s+none%s+0/1%s+no reference"), o2)
  if torch then
    local c3, o3, e3 = bench(args(small, "--limit", "0", "--ref", "torch", "--torch", "none"), { env = env })
    eq(c3, 1, e3)
    check(o3:find("b1s64 d64 4/2 causal%s+torch eager%s+0/1%s+wrong"), "torch's output read as the reference: " .. o3)
  end
end)

test("--dry-run --nvrtc compiles each variant (registers, spills); MINB=3 leads b8 s512 d64 causal; a pin the emitter refuses is a row with its reason", function()
  local okn, nv = pcall(require, "emmy.nvrtc")
  if not okn or not nv.version() then skip("NVRTC not found") end
  local small = { "--shapes", "b8s512", "--heads", "64:32:4", "--causal", "1", "--limit", "0", "--dry-run", "--nvrtc" }
  local code, out, err = bench(args(small, "--pins", "MINB=3,BKV=64,KVST=4,OSMEM=2;MINB=3,BKV=64,KVST=4,OSMEM=4,APERSIST=1;RESCALE=1"))
  eq(code, 0, err .. out)
  local c = dry_cases(out)["b8s512 d64 32/4 causal"]
  check(c.chosen:find("MINB=3", 1, true) and c.chosen:find("BKV=64", 1, true), "three CTAs an SM lead b8 s512 causal: " .. c.chosen)
  check(out:find("chosen%s+%S+%s+nvrtc ok, %d+ registers, 0 bytes spilled"), out)
  eq(#c.pinned, 3)
  for _, l in ipairs(c.pinned) do check(l:find("nvrtc ok, %d+ registers, 0 bytes spilled"), l) end
  -- MINB=3 on 128-key tiles: refused by the emitter with the reason (registers), not compiled
  local c2, o2 = bench(args(small, "--pins", "MINB=3,BKV=128,KVST=2"))
  eq(c2, 0, o2)
  check(o2:find("MINB=3 %(136 registers a consumer thread%) holds S, O and P for head dim 64 and 64%-key tiles only"), o2)
end)

test("--dry-run --sources: each variant's CUDA written; PSMEM=1 stores P by stmatrix and reads it by descriptor, three slices take turns (not over OSMEM=4: refused with the reason); 176-key tiles", function()
  local d = tmpdir() .. "/src"
  local pins = "BQ=192,BKV=192,KVST=2,MINB=1,KVSPLIT=1,QPACK=0,OSMEM=2,APERSIST=0,PSMEM=1,PINGPONG=1;BQ=192,BKV=192,KVST=2,MINB=1,KVSPLIT=1,QPACK=0,OSMEM=4,APERSIST=1,PSMEM=1,PINGPONG=1;BQ=192,BKV=176,KVST=2,MINB=1,KVSPLIT=1,QPACK=0,OSMEM=2,APERSIST=0,PSMEM=1;BQ=192,BKV=128,KVST=2,MINB=1,KVSPLIT=1,QPACK=0,OSMEM=2,APERSIST=0,PSMEM=2,PINGPONG=1"
  local code, out, err = bench({ "--dry-run", "--shapes", "b1s513", "--heads", "64:32:4", "--causal", "0", "--limit", "0",
    "--sources", d, "--pins", pins })
  eq(code, 0, err .. out)
  local c = dry_cases(out)["b1s513 d64 32/4 non-causal"]
  eq(#c.pinned, 4)
  check(c.pinned[2]:find("PINGPONG=1 with three Q slices %(BQ=192%) takes no attention mask and no OSMEM=4"), c.pinned[2])
  check(not c.pinned[3]:find("refused", 1, true), c.pinned[3])
  local chosen = read_file(d .. "/sdpa_b1s513_d64_h32kv4_full_bhsd.1.cu")
  check(chosen and not chosen:find("stmatrix", 1, true), "the chosen variant keeps P in registers")
  local src = read_file(d .. "/sdpa_b1s513_d64_h32kv4_full_bhsd.2.cu")
  check(src and src:find("stmatrix.sync.aligned.m8n8.x4.shared.b16", 1, true), "P stored by stmatrix")
  check(src:find("fence.proxy.async.shared::cta", 1, true), "the stores fenced for the tensor cores")
  check(src:find("m64n64k16.f32.bf16.bf16 {[^}]*}, %%32, %%33, p, 1, 1, 0, 1;"), "O += PV with both operands by descriptor")
  check(src:find("wq == 2 ? 11 : 12 + wq", 1, true) and src:find("if (wq == 2) asm volatile(\"bar.arrive 11, 256;\"", 1, true),
    "the three slices hand the turn on in a ring (barriers 11-13: 2-4 are the epilogue's)")
  check(not io.open(d .. "/sdpa_b1s513_d64_h32kv4_full_bhsd.3.cu"), "a refused pin writes no source")
  -- 176 keys: the P buffer's last 64-key column block holds 48 (three k16 steps), a warpgroup's buffer 24 KB
  local s176 = read_file(d .. "/sdpa_b1s513_d64_h32kv4_full_bhsd.4.cu")
  check(s176 and s176:find("for (int kb2 = 0; kb2 < 11; kb2++)", 1, true) and s176:find("(unsigned)wg * 24576u", 1, true), "BKV=176's P buffer")
  -- PSMEM=2: two buffers a warpgroup, P stored during the softmax a k16 step at a time, the buffers alternating
  local s2 = read_file(d .. "/sdpa_b1s513_d64_h32kv4_full_bhsd.5.cu")
  check(s2 and s2:find("if (j & 1) asm volatile(\"stmatrix", 1, true), "P stored in the softmax")
  check(s2:find("(unsigned)wg * 32768u + 0u)", 1, true) and s2:find("(unsigned)wg * 32768u + 16384u)", 1, true), "two 16 KB buffers a warpgroup")
  check(not s2:find("for (int kb2 = 0; kb2 < 8; kb2++)\n%s*asm volatile%(\"stmatrix"), "no store after the PV's wait")
end)

test("bench/pipes.lua: its kernels compile (--dry-run) and run end to end on the mock driver; an unknown case is one line", function()
  local okn, nv = pcall(require, "emmy.nvrtc")
  if not okn or not nv.version() then skip("NVRTC not found") end
  local P = ROOT .. "/bench/pipes.lua"
  local code, out, err = emmy({ P, "--dry-run" })
  eq(code, 0, err)
  check(out:find("^10 kernels compiled for sm_90a %(NVRTC%), %d+ registers at most, 0 bytes spilled"), out)
  local c2, _, e2 = emmy({ P, "--cases", "ex2,nope" })
  eq(c2, 2, e2)
  check(e2:find("unknown case 'nope'", 1, true), e2)
  local d = tmpdir()
  local so = d .. "/libcuda_mock.so"
  local cc, cout = sh(("cc -shared -fPIC -O1 -o %s %s"):format(shell_quote(so), shell_quote(ROOT .. "/tests/fixtures/cuda_mock.c")))
  if cc ~= 0 then skip("cannot build the mock driver: " .. cout:sub(1, 200)) end
  local c3, o3, e3 = emmy({ P, "--iters", "2", "--cases", "ex2,cvt", "--json", d .. "/p.json" },
    { env = ("EMMY_MOCK_ANY_KERNEL=1 EMMY_LIBCUDA=%s EMMY_CUBIN_CACHE=%s/cc"):format(so, d) })
  eq(c3, 0, e3)
  check(o3:find("instruction cost on Mock GPU", 1, true) and o3:find("\nex2 ") and o3:find("\ncvt "), o3)
  local j = cjson.decode(read_file(d .. "/p.json"))
  eq(j.format, "emmy.bench.pipes")
  eq(#j.rows, 2)
  eq(j.rows[1].w1, 0, "the mock's kernels do nothing: the zeroed cycle counts read back")
end)

test("torch's reference (bench.py --out, --backends none) agrees with emmy's CPU reference", function()
  if sh(PY .. " -c 'import torch, numpy' 2>/dev/null") ~= 0 then skip(PY .. " has no torch/numpy") end
  local d = tmpdir()
  local code, _, err = bench { "--dry-run", "--shapes", "b2s40", "--heads", "32:4:2", "--causal", "1", "--limit", "0",
    "--graphs", d, "--layout", "model" }
  eq(code, 0, err)
  local g = assert(graphjson.read(d .. "/sdpa_b2s40_d32_h4kv2_causal.torch.json"))
  local bind = assert(g:bind({}))
  local ins = assert(require("emmy.inputs").for_graph(g, bind, 0))
  assert(require("emmy.sys").mkdir_p(d .. "/in"))
  for name, t in pairs(ins) do assert(t:save(d .. "/in/" .. name .. ".npy")) end
  local c2, o2 = sh(("%s %s/tools/torchref/bench.py %s --inputs %s --device cpu --backends none --out %s"):format(PY,
    shell_quote(ROOT), shell_quote(d .. "/sdpa_b2s40_d32_h4kv2_causal.torch.json"), shell_quote(d .. "/in"),
    shell_quote(d .. "/out")))
  eq(c2, 0, o2)
  local got = assert(ref.load(d .. "/out/o.npy", "bf16"))
  local want = assert(ref.run(g, ins, { bind = bind }))
  local cmp = ref.compare(got, want.o)
  check(cmp.ok, ("max abs %g, %d of %d outside"):format(cmp.max_abs, cmp.mismatches, cmp.numel))
  eq(table.concat(got:shape(), ","), "2,40,128", "o [B, S, HQ*D]")
end)

test("bench/ab.lua: settings interleaved over runs, a median and spread a setting, the ratio to the first; a setting with no timed variant is exit 1; bad flags one line, exit 2", function()
  local d = tmpdir()
  -- a bench that writes --json like bench/attention.lua's, its times scaled by an environment variable
  write_file(d .. "/fake.lua", [[
local out
for i = 1, #arg do if arg[i] == "--json" then out = arg[i + 1] end end
if os.getenv("EMMY_FAKE_FAIL") then os.exit(3) end
local k = tonumber(os.getenv("EMMY_FAKE_SCALE") or "1")
local v = { { case = "c1", knobs = "A=1,B=2", role = "chosen", us = 10 * k },
  { case = "c1", knobs = "A=1,B=3", role = "pinned", us = 12 * k }, { case = "c1", knobs = "A=2,B=2", role = "pinned", error = "wrong" },
  { case = "g1", kernel = "ka", knobs = "X=1,Y=1", role = "chosen", us = 5 }, { case = "g1", kernel = "kb", knobs = "X=3,Y=1", role = "chosen", us = 6 },
  { case = "g1", kernel = "kb", knobs = "X=2,Y=1", role = "pinned", us = 7 } }
local cases = { { label = "c1", torch = { best_us = 11, best = "cudnn" } } }
local f = io.open(out, "w") f:write(require("cjson").encode { variants = v, cases = cases }) f:close()
return 0
]])
  local AB = ROOT .. "/bench/ab.lua"
  local code, out, err = emmy({ AB, "--env", "EMMY_NONE=1;EMMY_FAKE_SCALE=0.9", "--runs", "3", "--json", d .. "/ab.json", "--", d .. "/fake.lua" })
  eq(code, 0, err .. out)
  local runs = {}
  for r, s in out:gmatch("run (%d), (%S+): exit 0") do runs[#runs + 1] = r .. " " .. s end
  eq(table.concat(runs, ";"), "1 EMMY_NONE=1;1 EMMY_FAKE_SCALE=0.9;2 EMMY_NONE=1;2 EMMY_FAKE_SCALE=0.9;3 EMMY_NONE=1;3 EMMY_FAKE_SCALE=0.9", "interleaved")
  check(out:find("c1%s+chosen%s+%(chosen%)%s+10%.0 %(10%.0%-10%.0%)%s+9%.0 %(9%.0%-9%.0%)%s+0%.900"), out)
  check(out:find("c1%s+pinned%s+B=3%s+12%.0"), "a pin named by the knobs it changes: " .. out)
  check(out:find("c1%s+pinned%s+A=2%s+—%s+—%s+—"), "a variant never timed: " .. out)
  check(out:find("c1%s+torch%s+%(cudnn%)%s+11%.0 %(11%.0%-11%.0%)%s+11%.0 %(11%.0%-11%.0%)%s+1%.000"), "torch's row: " .. out)
  local j = require("cjson").decode(read_file(d .. "/ab.json"))
  eq(j.format, "emmy.bench.ab")
  check(out:find("g1 ka%s+chosen%s+%(chosen%)%s+5%.0") and out:find("g1 kb%s+pinned%s+X=2%s+7%.0"),
    "a case of several kernels (bench/gemm.lua's) names each, a pin against its own kernel's chosen: " .. out)
  eq(#j.rows, 7)
  eq(#j.rows[1].settings[2].us, 3)
  check(math.abs(j.rows[1].settings[2].median_us - 9) < 1e-9, "median")
  local c2, o2 = emmy({ AB, "--env", "EMMY_NONE=1;EMMY_FAKE_FAIL=1", "--runs", "1", "--", d .. "/fake.lua" })
  eq(c2, 1, o2)
  check(o2:find("run 1, EMMY_FAKE_FAIL=1: exit 3, no results written") and o2:find("EMMY_FAKE_FAIL=1: no timed variant in any run"), o2)
  -- one setting (the default, EMMY_NONE=1): the bench repeated, its medians and spread, no ratio column
  local c4, o4, e4 = emmy({ AB, "--runs", "2", "--", d .. "/fake.lua" })
  eq(c4, 0, e4 .. o4)
  check(o4:find("c1%s+chosen%s+%(chosen%)%s+10%.0 %(10%.0%-10%.0%)") and not o4:find("/ first", 1, true), o4)
  for _, bad in ipairs { { "--env", ";", "--", "x.lua" }, { "--env", "A=1;B=2" }, { "--env", "A=1;B", "--", "x.lua" },
    { "--env", "A=1;B=2", "--", "x.lua", "--json", "f" } } do
    local c3, o3, e3 = emmy(args(AB, bad))
    eq(c3, 2, o3 .. e3)
    eq(#lines_of(e3), 1, e3)
  end
end)

test("bench/ab.lua over emmy run --bench on the mock driver: the whole graph a backend read from the dump, a row for each setting", function()
  local d, so = mock_driver()
  local env = ("EMMY_MOCK_ANY_KERNEL=1 EMMY_LIBCUDA=%s EMMY_LIBCUPTI=/nonexistent EMMY_CUBIN_CACHE=%s/cc"):format(so, d)
  local code, out, err = emmy({ ROOT .. "/bench/ab.lua", "--env", "EMMY_NONE=1;EMMY_PDL=0;EMMY_KNOBS=k_linear_e4:EPI_SMEM=0", "--runs", "1", "--", "run",
    "Qwen/Qwen3-Embedding-0.6B", "--layer", "0", "--dynamic", "seq_len@x:1", "--seq-len", "16", "--bench", "--bench-backends", "emmy" }, { env = env })
  eq(code, 0, err .. out)
  check(out:find("run 1, EMMY_PDL=0: exit %d+, %d+ rows"), out)
  check(out:find("whole graph%s+emmy%s+[%d.]+%s+[%d.]+%s+[%d.]+"), "the layer's time both ways: " .. out)
  -- the variant a pin resolved to, where it is not the first setting's
  check(out:find("EMMY_KNOBS=k_linear_e4:EPI_SMEM=0: k_linear_e4e144 ran [%w_=,]*EPI_SMEM=0[%w_=,]* %(the first setting's: [%w_=,]*EPI_SMEM=5"), out)
  check(not out:find("EMMY_PDL=0: k_linear", 1, true), "the same variants: no line: " .. out)
  local c2, o2, e2 = emmy({ ROOT .. "/bench/ab.lua", "--env", "A=1;B=2", "--", "run", "x", "--dump-dir", "y", "--bench" })
  eq(c2, 2, o2 .. e2)
  local c3, o3, e3 = emmy({ ROOT .. "/bench/ab.lua", "--env", "A=1;B=2", "--", "run", "x" })
  eq(c3, 2, o3 .. e3)
  check(e3:find("emmy run needs --bench", 1, true), e3)
end)

return T
