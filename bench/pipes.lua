-- bench/pipes.lua — what one instruction costs a warp on this GPU's SM sub-partitions (issue 20: which pipe attention's
-- softmax waits on). Each case is a kernel whose every thread runs U independent chains of one instruction (or a
-- short mix) in an unrolled loop; one block an SM, W warps a block (W/4 a sub-partition); thread 0 of each warp
-- times its loop with %clock. Printed: cycles a warp-instruction a sub-partition (the loop's cycles over iterations x
-- U x warps a sub-partition) at 1, 2 and 4 warps a sub-partition — an instruction at T lanes a clock a
-- sub-partition costs 32/T once the pipe is full (FFMA 1, MUFU ex2 8 on Hopper's 16 a clock an SM) — and the
-- latency-bound single-warp figure beside it.
--   ./emmy bench/pipes.lua [--iters N] [--cases ex2,cvt,...] [--json FILE] [--dry-run]
-- --dry-run: compile the kernels for sm_90a (NVRTC, no GPU) and print their registers.
-- Cases: ffma, fmnmx, ex2, ex2h2 / ex2bf2 (ex2.approx on f16x2 / bf16x2: two a lane), cvt (cvt.rn.bf16x2.f32), prmt (P packed by IADD + PRMT), poly (exp2 by a cubic on the
-- FMA pipe), ex2cvt (one ex2 and half a cvt an element: the softmax's MUFU-class mix), softmax (an element's FFMA,
-- ex2, FADD, half a cvt and an FMNMX, the flash kernel's per-score work).
io.stdout:setvbuf("line")
local cli = require "emmy.cli"
local sys = require "emmy.sys"
local CMD = "bench/pipes.lua"
local opts = cli.parse(arg, { flags = { ["--iters"] = { kind = "int", default = 256, min = 1 },
  ["--cases"] = { kind = "string", default = "ffma,fmnmx,ex2,ex2h2,ex2bf2,cvt,prmt,poly,ex2cvt,softmax" },
  ["--json"] = { kind = "string" }, ["--dry-run"] = { kind = "bool" } } }, CMD)

local U = 8 -- independent chains a thread

-- Each case: the chains' declarations and one step of all U chains (k: the chain, unrolled), in CUDA.
local BODY = {
  ffma = { init = "float a[U]; for (int k = 0; k < U; k++) a[k] = seed + k;",
    step = "a[k] = fmaf(a[k], 0.999f, 0.001f);", sink = "a[k]", per = 1 },
  fmnmx = { init = "float a[U], b[U]; for (int k = 0; k < U; k++) { a[k] = seed + k; b[k] = seed - k; }",
    step = 'asm volatile("max.f32 %0, %0, %1;" : "+f"(a[k]) : "f"(b[k]));', sink = "a[k]", per = 1 },
  ex2 = { init = "float a[U]; for (int k = 0; k < U; k++) a[k] = -seed - k;",
    step = 'asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(a[k]));', sink = "a[k]", per = 1 },
  -- two exponentials a lane an instruction (packed halves): if one costs what ex2.f32 costs, the MUFU pipe does twice
  -- the exponentials a clock in 16-bit (P is rounded to bf16 for PV anyway; the argument's rounding is the question)
  ex2h2 = { init = "unsigned a[U]; for (int k = 0; k < U; k++) a[k] = 0xBC00BC00u + k;",
    step = 'asm volatile("ex2.approx.f16x2 %0, %0;" : "+r"(a[k]));', sink = "__uint_as_float(a[k])", per = 1 },
  ex2bf2 = { init = "unsigned a[U]; for (int k = 0; k < U; k++) a[k] = 0xBF80BF80u + k;",
    step = 'asm volatile("ex2.approx.ftz.bf16x2 %0, %0;" : "+r"(a[k]));', sink = "__uint_as_float(a[k])", per = 1 },
  cvt = { init = "unsigned a[U]; for (int k = 0; k < U; k++) a[k] = __float_as_uint(seed + k);",
    step = 'asm volatile("cvt.rn.bf16x2.f32 %0, %1, %1;" : "=r"(a[k]) : "f"(__uint_as_float(a[k])));', sink = "__uint_as_float(a[k])", per = 1 },
  prmt = { init = "unsigned a[U]; for (int k = 0; k < U; k++) a[k] = __float_as_uint(seed + k);",
    step = "a[k] = __byte_perm(a[k] + 0x8000u, (a[k] ^ 0x10000u) + 0x8000u, 0x7632);", sink = "__uint_as_float(a[k])", per = 1 },
  poly = { init = "float a[U]; for (int k = 0; k < U; k++) a[k] = -seed - k;",
    step = "{ float x = fmaxf(a[k], -127.0f); const float t = x + 12583039.0f, fr = x - (t - 12583039.0f); "
      .. "a[k] = fmaf(fmaf(fmaf(0.0550087441f, fr, 0.242211129f), fr, 0.693282966f), fr, 1.0f) * __uint_as_float(__float_as_uint(t) << 23) - 2.0f; }",
    sink = "a[k]", per = 1 },
  ex2cvt = { init = "float a[U]; unsigned r[U / 2]; for (int k = 0; k < U; k++) a[k] = -seed - k; for (int k = 0; k < U / 2; k++) r[k] = 0;",
    step = 'asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(a[k])); if (k & 1) asm volatile("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r[k >> 1]) : "f"(a[k]), "f"(a[k - 1]));',
    sink = "a[k] + __uint_as_float(r[k >> 1])", per = 1 },
  softmax = { init = "float a[U], m = -seed, s = 0.0f; unsigned r[U / 2]; for (int k = 0; k < U; k++) a[k] = -seed - k; for (int k = 0; k < U / 2; k++) r[k] = 0;",
    step = 'm = fmaxf(m, a[k]); { float p; asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(p) : "f"(fmaf(a[k], 0.18f, -m))); s += p; a[k] = p - 1.0f; } '
      .. 'if (k & 1) asm volatile("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r[k >> 1]) : "f"(a[k]), "f"(a[k - 1]));',
    sink = "a[k] + s + __uint_as_float(r[k >> 1])", per = 1 },
}

local function kernel_src(name, b)
  return ([[
#define U %d
extern "C" __global__ void k_%s(unsigned *cyc, float *sink, int iters, float seed) {
  %s
  __syncthreads();
  const unsigned t0 = clock();
  for (int i = 0; i < iters; i++) {
    #pragma unroll
    for (int k = 0; k < U; k++) { %s }
  }
  const unsigned t1 = clock();
  float acc = 0.0f;
  #pragma unroll
  for (int k = 0; k < U; k++) acc += %s;
  if ((threadIdx.x & 31) == 0) cyc[blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32] = t1 - t0;
  if (acc == 12345.0f) sink[threadIdx.x] = acc;
}
]]):format(U, name, b.init, b.step, b.sink)
end

local cases = {}
for name in opts.cases:gmatch("[^,]+") do
  if not BODY[name] then cli.usage("%s: --cases: unknown case '%s' (ffma, fmnmx, ex2, ex2h2, ex2bf2, cvt, prmt, poly, ex2cvt, softmax)", CMD, name) end
  cases[#cases + 1] = name
end

local function build(arch)
  local srcs = {}
  for _, name in ipairs(cases) do srcs[#srcs + 1] = kernel_src(name, BODY[name]) end
  local r = require("emmy.nvrtc").compile { source = table.concat(srcs, "\n"), arch = arch, name = "pipes.cu", options = { "-std=c++17" } }
  if not r or r.status ~= "ok" then cli.fail("%s: NVRTC: %s", CMD, tostring(r and r.log or "not available")) end
  return r
end
if opts.dry_run then
  local r = build("sm_90a")
  print(("%d kernels compiled for sm_90a (NVRTC), %s registers at most, %s bytes spilled"):format(#cases, tostring(r.regs), tostring(r.spill_stores)))
  return 0
end
local cu, cerr = require("emmy.cuda").open()
if not cu then cli.fail("%s: no GPU: %s (--dry-run compiles without one)", CMD, tostring(cerr)) end
local info = cu:info()
local r = build(info.arch)
local mod = cli.must(cu:module(r.cubin))
local sms = info.sm_count
local cyc = cli.must(cu:alloc(4 * sms * 32))
local sink = cli.must(cu:alloc(4 * 1024))

print(("instruction cost on %s (%d SMs): cycles a warp-instruction a sub-partition, %d chains a thread, %d iterations, one block an SM"):format(info.name, sms, U, opts.iters))
local rows, out = {}, {}
for _, name in ipairs(cases) do
  local fn = cli.must(mod:fn("k_" .. name))
  local row = { name }
  local res = { case = name }
  for _, w in ipairs { 1, 4, 8, 16 } do
    cyc:fill(0)
    cli.must(cu:launch(fn, { grid = { sms }, block = { 32 * w }, args = { cyc, sink, { i32 = opts.iters }, { f32 = 1.5 } } }))
    cli.must(cu:sync())
    local t = cli.must(cyc:download("i32", { sms * w })):to_table()
    local sum = 0
    for i = 1, #t do sum = sum + (t[i] < 0 and t[i] + 2 ^ 32 or t[i]) end
    local mean = sum / #t
    -- w warps on 4 sub-partitions: max(1, w / 4) warps share one
    local per = mean / (opts.iters * U * math.max(1, w / 4))
    row[#row + 1] = ("%.2f"):format(per)
    res["w" .. w] = per
  end
  rows[#rows + 1] = row
  out[#out + 1] = res
end
print(require("emmy.tbl").render { header = { "case", "1 warp (latency)", "1 a sub-partition", "2 a sub-partition", "4 a sub-partition" },
  rows = rows, align = "lrrrr" })
print("(a pipe of T lanes a clock a sub-partition costs 32/T at its full rate: FFMA 1; MUFU ex2 8 where an SM does 16 a clock)")
if opts.json then cli.must(sys.write_file(opts.json, require("cjson").encode { format = "emmy.bench.pipes", device = info.name, rows = out })) end
return 0
