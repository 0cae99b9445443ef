-- tests/gpu/test_cuda.lua — the CUDA driver runtime on a real GPU: `./emmy tests/gpu/test_cuda.lua`.
-- Builds its kernels with nvcc (-cubin -arch=sm_XY of the device), checks numerics against the host reference on
-- seeded random inputs with poisoned outputs, errors as one-line data (non-sticky and sticky), fast failure after a
-- lost context (for the rest of the process: a new process gets a working device), and event / CUDA-graph timing
-- of a 64 MB copy.
-- Last line: N passed, N failed. Exit status 1 when any failed.
local cuda = require "emmy.cuda"
local ref = require "emmy.ref"
local sys = require "emmy.sys"

local NVCC = os.getenv("NVCC") or "/usr/local/cuda/bin/nvcc"

local KERNELS = [[
extern "C" __global__ void k_add_bf16(const unsigned short *a, const unsigned short *b, float *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __uint_as_float((unsigned)a[i] << 16) + __uint_as_float((unsigned)b[i] << 16);
}

extern "C" __global__ void k_args(long long *out, int a, long long b, float c) {
  if (threadIdx.x == 0) {
    out[0] = a;
    out[1] = b;
    out[2] = (long long)(c * 1000.0f);
  }
}

extern "C" __global__ void k_smem_sum(unsigned long long *out, int n) {
  extern __shared__ int s[];
  for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = i;
  __syncthreads();
  unsigned long long acc = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) acc += (unsigned long long)s[n - 1 - i];
  atomicAdd(out, acc);
}

extern "C" __global__ void k_copy(const float4 *__restrict__ src, float4 *__restrict__ dst, long long n4) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n4) dst[i] = src[i];
}

extern "C" __global__ void k_null_write(float *p) { p[threadIdx.x] = 1.0f; }

#if __CUDA_ARCH__ >= 900 || !defined(__CUDA_ARCH__)
extern "C" __global__ void __cluster_dims__(2, 1, 1) k_pair(float *p) { p[blockIdx.x] = 1.0f; }
#endif
]]

local tests, S = {}, {}
-- Every buffer made, so that the recovery test can close them all: a collection alone may not find them dead
-- (stale stack slots keep values reachable).
local bufs = setmetatable({}, { __mode = "k" })
local function keep(b, msg)
  if b then bufs[b] = true end
  return b, msg
end
local function alloc(n) return keep(S.ctx:alloc(n)) end
local function upload(t) return keep(S.ctx:upload(t)) end
local function test(name, fn) tests[#tests + 1] = { name, fn } end
local function check(cond, msg) if not cond then error(msg or "check failed", 2) end return cond end
local function eq(a, b, what)
  if a ~= b then error(("%s: got %s, expected %s"):format(what or "eq", tostring(a), tostring(b)), 2) end
end
local function one_line(msg)
  check(type(msg) == "string" and #msg > 0, "an error message: " .. tostring(msg))
  check(not msg:find("\n"), "one line: " .. msg)
  return msg
end
local function say(fmt, ...) print(("     " .. fmt):format(...)) end

local function shell_quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
local function read_all(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

local function launch1d(fn, n, args, block)
  block = block or 256
  return S.ctx:launch(fn, { grid = { math.ceil(n / block) }, block = { block }, args = args })
end

test("open and describe the device", function()
  local ctx, msg = cuda.open()
  check(ctx, "cuda.open: " .. tostring(msg))
  S.ctx = ctx
  local i = ctx:info()
  say("%s, cc %s, %d SMs, smem optin %d B, L2 %.1f MiB, clock %d MHz, DRAM peak %.0f GB/s, %.1f GiB, driver %d",
    i.name, i.cc, i.sm_count, i.smem_optin, i.l2 / 2 ^ 20, i.clock_khz / 1000, i.dram_gbps, i.total_mem / 2 ^ 30,
    i.driver_version)
  check(i.sm_count > 0 and i.smem_optin >= 48 * 1024 and i.l2 > 0 and i.driver_version >= 11000, "sane attributes")
  check(tostring(ctx):find(i.name, 1, true), tostring(ctx))
end)

test("driver symbols", function()
  local names = { "cuGraphInstantiateWithFlags", "cuGraphInstantiate", "cuGraphInstantiate_v2",
    "cuStreamBeginCapture_v2", "cuEventElapsedTime_v2", "cuCtxSynchronize_v2", "cuMemAlloc_v2", "cuLaunchKernel" }
  local have = {}
  for _, n in ipairs(names) do have[#have + 1] = n .. "=" .. (cuda.has_symbol(n) and "yes" or "no") end
  say("%s", table.concat(have, " "))
  check(cuda.has_symbol("cuGraphInstantiateWithFlags") and cuda.has_symbol("cuStreamBeginCapture_v2"), "graph API")
end)

test("build and load kernels (nvcc -cubin)", function()
  local dir = os.tmpname()
  os.remove(dir)
  assert(sys.mkdir_p(dir))
  S.dir = dir
  local f = assert(io.open(dir .. "/k.cu", "wb"))
  f:write(KERNELS)
  f:close()
  local arch = S.ctx:info().arch
  local cmd = ("%s -cubin -O3 -arch=%s -o %s %s > %s 2>&1"):format(shell_quote(NVCC), arch, shell_quote(dir .. "/k.cubin"),
    shell_quote(dir .. "/k.cu"), shell_quote(dir .. "/nvcc.log"))
  local t0 = sys.clock()
  local r = os.execute(cmd)
  check(r == 0 or r == true, "nvcc failed: " .. (read_all(dir .. "/nvcc.log") or cmd))
  local image = check(read_all(dir .. "/k.cubin"), "no cubin")
  local mod, msg = S.ctx:module(image)
  check(mod, msg)
  S.mod = mod
  for _, name in ipairs { "k_add_bf16", "k_args", "k_smem_sum", "k_copy", "k_null_write" } do
    S[name] = check(mod:fn(name))
  end
  if S.ctx:info().cc_major >= 9 then S.k_pair = check(mod:fn("k_pair")) end
  local a = S.k_add_bf16:attrs()
  say("nvcc %.1fs, cubin %d bytes; k_add_bf16: %d regs, %d local B, max %d threads, binary sm_%d",
    sys.clock() - t0, #image, a.regs, a.local_bytes, a.max_threads, a.binary_version)
  check(a.regs > 0 and a.max_threads >= 256, "attributes")
  local none, m2 = mod:fn("k_missing")
  check(none == nil and one_line(m2):find("cuModuleGetFunction%(k_missing%)"), m2)
  local bad, m3 = S.ctx:module("not a cubin")
  check(bad == nil and one_line(m3):find("cuModuleLoadDataEx"), m3)
end)

test("bf16 add against the host reference (poisoned output)", function()
  local n = 1000003
  local a = ref.random("bf16", { n }, { seed = 1 })
  local b = ref.random("bf16", { n }, { seed = 2 })
  local want = ref.tensor("f32", { n })
  for i = 1, n do want:set(i, a:get(i) + b:get(i)) end
  local da, db = assert(upload(a)), assert(upload(b))
  eq(da:size(), 2 * n, "bf16 buffer bytes")
  local out = assert(alloc(4 * n))
  assert(out:fill(0xFF))
  local poisoned = out:download("f32", { 4 })
  check(poisoned:get(1) ~= poisoned:get(1), "0xFF poison reads back as NaN")
  local ok, msg = launch1d(S.k_add_bf16, n, { da, db, out, { i32 = n } })
  check(ok, msg)
  check(S.ctx:sync())
  local got = assert(out:download("f32", { n }))
  local c = ref.compare(got, want)
  say("n=%d: max_abs %g, %d mismatches", n, c.max_abs, c.mismatches)
  check(c.ok, ("mismatch: max_abs %g, %d of %d"):format(c.max_abs, c.mismatches, c.numel))
  -- the same inputs round-trip bit-exactly
  local back = da:download("bf16", { n })
  check(ref.compare(back, a, { rtol = 0, atol = 0 }).ok, "bf16 round trip")
end)

test("argument kinds i32 / i64 / f32 / ptr", function()
  local out = assert(alloc(24))
  assert(out:fill(0))
  local big = 2 ^ 40 + 3
  check(S.ctx:launch(S.k_args, { grid = { 1 }, block = { 32 }, args = { { ptr = out }, { i32 = -5 }, { i64 = big }, { f32 = 1.5 } } }))
  check(S.ctx:sync())
  local v = out:download("i64", { 3 }):to_table()
  eq(v[1], -5, "i32")
  eq(v[2], big, "i64")
  eq(v[3], 1500, "f32")
  check(not pcall(S.ctx.launch, S.ctx, S.k_args, { args = { 5 } }), "an untagged number is misuse")
end)

test("dynamic shared memory above 48 KB, and errors that leave the context usable", function()
  local n = 25600 -- 100 KB of int
  local out = assert(alloc(8))
  assert(out:fill(0))
  local ok, msg = S.ctx:launch(S.k_smem_sum, { grid = { 1 }, block = { 256 }, smem = 4 * n, args = { out, { i32 = n } } })
  check(ok, msg)
  check(S.ctx:sync())
  eq(out:download("i64", { 1 }):get(1), n * (n - 1) / 2, "sum through 100 KB of dynamic shared memory")
  check(S.k_smem_sum:attrs().max_dynamic_smem >= 4 * n, "attribute set by the launch")
  local optin = S.ctx:info().smem_optin
  local ok2, m2 = S.ctx:launch(S.k_smem_sum, { grid = { 1 }, block = { 256 }, smem = optin + 1024, args = { out, { i32 = n } } })
  check(not ok2 and one_line(m2):find("bytes of dynamic shared memory exceed the device's", 1, true), tostring(m2))
  say("%s", m2)
  local ok3, m3 = S.ctx:launch(S.k_add_bf16, { grid = { 1 }, block = { 2048 }, args = { out, out, out, { i32 = 0 } } })
  check(not ok3 and one_line(m3):find("cuLaunchKernel%(k_add_bf16%)"), tostring(m3))
  say("%s", m3)
  local huge, m4 = S.ctx:alloc(2 ^ 50)
  check(not huge and one_line(m4):find("cuMemAlloc_v2") and m4:find("OUT_OF_MEMORY"), tostring(m4))
  check(S.ctx:lost() == nil, "context still usable")
  check(S.ctx:sync())
end)

test("max_clusters: how many clusters of a kernel's compiled shape fit at once", function()
  if not S.k_pair then
    say("compute capability %s: no clusters", S.ctx:info().cc)
    return
  end
  -- (150 KB: two such CTAs overflow an SM's 228 KB, so a cluster takes two SMs; two of 100 KB share one SM, and
  -- the H200 answered 132 clusters of them, sixteenth session)
  local n, msg = S.k_pair:max_clusters({ 2, 1, 1 }, { 128, 1, 1 }, 150 * 1024)
  check(n, msg)
  local sms = S.ctx:info().sm_count
  say("k_pair (2-CTA clusters, 150 KB each): %d clusters of %d SMs' pairs", n, sms)
  check(n == -1 or (n >= 1 and 2 * n <= sms), "at most one 150 KB CTA an SM: " .. n)
end)

test("timing: 64 MB copy with events and with graph replay", function()
  local bytes = 64 * 2 ^ 20
  local n4 = bytes / 16
  local src, dst = assert(alloc(bytes)), assert(alloc(bytes))
  assert(src:upload(ref.random("f32", { bytes / 4 }, { seed = 3 })))
  assert(dst:fill(0xFF))
  local function body() return launch1d(S.k_copy, n4, { src, dst, { i64 = n4 } }) end
  check(body())
  check(S.ctx:sync())
  local c = ref.compare(dst:download("f32", { bytes / 4 }), src:download("f32", { bytes / 4 }), { rtol = 0, atol = 0 })
  check(c.ok, "copy is exact")
  local peak = S.ctx:info().dram_gbps
  local res = {}
  for _, graph in ipairs { false, true } do
    local t, msg = S.ctx:time(body, { reps = 50, warmup = 5, graph = graph })
    check(t, msg)
    local gbs = 2 * bytes / (t.median_us * 1e-6) / 1e9
    say("k_copy 64 MiB %-6s median %.1f us (min %.1f, p20 %.1f, p80 %.1f; %d samples x %d): %.0f GB/s read+write, %.0f%% of %.0f GB/s peak",
      graph and "graph" or "events", t.median_us, t.min_us, t.p20_us, t.p80_us, t.samples, t.batch, gbs, 100 * gbs / peak, peak)
    check(t.samples == 50 and #t.all_us == 50 and t.graph == graph, "result shape")
    check(t.min_us <= t.p20_us and t.p20_us <= t.median_us and t.median_us <= t.p80_us, "ordered quantiles")
    check(t.median_us > 5 and t.median_us < 5000, "sane time")
    check(gbs > 500, "sane bandwidth")
    res[graph] = t.median_us
  end
  check(res[true] < 2 * res[false] and res[false] < 2 * res[true], "graph and events agree within 2x")
end)

test("timing: a short kernel is batched; two kernels per replay; callback failures", function()
  local n = 65536
  local a, b = assert(upload(ref.random("bf16", { n }, { seed = 4 }))), assert(upload(ref.random("bf16", { n }, { seed = 5 })))
  local out = assert(alloc(4 * n))
  local function one() return launch1d(S.k_add_bf16, n, { a, b, out, { i32 = n } }) end
  local function two()
    local ok, msg = one()
    if not ok then return nil, msg end
    return one()
  end
  local t1 = assert(S.ctx:time(one, { reps = 30, graph = true }))
  local t2 = assert(S.ctx:time(two, { reps = 30, graph = true }))
  local t3 = assert(S.ctx:time(one, { reps = 30, graph = false }))
  say("k_add_bf16 n=%d: graph %.2f us/replay (batch %d), 2 kernels %.2f us/replay (batch %d), events %.2f us (batch %d)",
    n, t1.median_us, t1.batch, t2.median_us, t2.batch, t3.median_us, t3.batch)
  check(t1.batch > 1, "a replay under 20 us is batched")
  check(t1.median_us > 0.5 and t1.median_us < 20, "sane short time")
  check(t2.median_us > t1.median_us, "two kernels take longer than one")
  local ok, e = pcall(S.ctx.time, S.ctx, function() error("boom") end, { reps = 2 })
  check(not ok and tostring(e):find("boom"), "a raised error propagates: " .. tostring(e))
  ok, e = pcall(S.ctx.time, S.ctx, function() error("boom in capture") end, { reps = 2, graph = true })
  check(not ok and tostring(e):find("boom in capture"), "a raised error in capture propagates: " .. tostring(e))
  local none, msg = S.ctx:time(function() return nil, "launch refused" end, { reps = 2, graph = true })
  check(none == nil and msg == "launch refused", tostring(msg))
  local none2, msg2 = S.ctx:time(function() return S.ctx:sync() end, { reps = 2, graph = true })
  check(none2 == nil and one_line(msg2), "sync during capture fails: " .. tostring(msg2))
  say("%s", msg2)
  check(S.ctx:lost() == nil, "context still usable")
  check(S.ctx:time(one, { reps = 5, graph = true }), "capture works again")
end)

test("timing: warm-up by time, and the L2 flushed between single-run samples", function()
  local n = 4 * 1024 * 1024 -- 8 MB per bf16 operand: the three buffers fit the 50 MB L2 when it is not flushed
  local a, b = assert(upload(ref.random("bf16", { n }, { seed = 6 }))), assert(upload(ref.random("bf16", { n }, { seed = 7 })))
  local out = assert(alloc(4 * n))
  local function one() return launch1d(S.k_add_bf16, n, { a, b, out, { i32 = n } }) end
  local warm = assert(S.ctx:time(one, { reps = 40, graph = true, warmup_ms = 20 }))
  local cold = assert(S.ctx:time(one, { reps = 40, graph = true, warmup_ms = 20, flush_bytes = 256 * 1024 * 1024 }))
  say("k_add_bf16 n=%d: L2 warm %.2f us (batch %d), flushed %.2f us (batch %d, %d samples)", n, warm.median_us,
    warm.batch, cold.median_us, cold.batch, cold.samples)
  check(cold.flushed == true and warm.flushed == false, "the flushed flag")
  check(cold.batch == 1 and cold.samples == 40 and #cold.all_us == 40, "one run per flushed sample")
  check(cold.median_us > 0.95 * warm.median_us, "reading from HBM is not faster than from L2")
  -- the flush by reading (EMMY_FLUSH=read): the L2 left clean, the operands still from HBM
  local cold_r = assert(S.ctx:time(one, { reps = 40, graph = true, warmup_ms = 20, flush_bytes = 256 * 1024 * 1024, flush = "read" }))
  say("flushed by reading %.2f us (%d samples)", cold_r.median_us, cold_r.samples)
  check(cold_r.flushed == true and cold_r.samples == 40, "flushed by reading: one run a sample")
  check(cold_r.median_us > 0.95 * warm.median_us, "read-flushed: not faster than from L2")
  local cold_m = assert(S.ctx:time(one, { reps = 4, graph = true, flush_bytes = 256 * 1024 * 1024, flush = "memset" }))
  check(cold_m.flushed == true and cold_m.samples == 4, "flush = \"memset\" asked for in the call")
  check(not pcall(S.ctx.time, S.ctx, one, { reps = 2, flush_bytes = 1e6, flush = "write" }), "an unknown flush raises")
  local bad = select(2, S.ctx:time(one, { reps = 2, warmup_ms = -1 }))
  check(bad and bad:find("warmup_ms", 1, true), tostring(bad))
end)

test("a faulting kernel: one-line sticky error, then every call fails fast", function()
  local ok, msg = S.ctx:launch(S.k_null_write, { grid = { 1 }, block = { 32 }, args = { { ptr = 0 } } })
  if ok then ok, msg = S.ctx:sync() end
  check(not ok, "the fault is reported")
  say("%s", msg)
  one_line(msg)
  check(msg:find("CUDA_ERROR_ILLEGAL_ADDRESS") and (msg:find("cuLaunchKernel") or msg:find("cuCtxSynchronize")), msg)
  check(msg:find("k_null_write", 1, true), "names the kernel: " .. msg)
  check(S.ctx:lost(), "marked lost")
  local t0 = sys.clock()
  local b, m2 = S.ctx:alloc(16)
  local _, m3 = S.ctx:sync()
  local c2, m4 = cuda.open()
  local dt = sys.clock() - t0
  say("%s", m2)
  check(not b and one_line(m2):find("refused") and m2:find("ILLEGAL_ADDRESS"), tostring(m2))
  check(one_line(m3):find("refused"), tostring(m3))
  check(not c2 and one_line(m4):find("unusable in this process"), tostring(m4))
  check(dt < 0.5, ("fast failure (%.3fs)"):format(dt))
end)

test("after a lost context: handles close cleanly, the device stays refused, a new process works", function()
  for b in pairs(bufs) do b:close() end
  local ctx = S.ctx
  for _, k in ipairs { "k_add_bf16", "k_args", "k_smem_sum", "k_copy", "k_null_write", "mod", "ctx" } do
    if S[k] then S[k]:close() end
    S[k] = nil
  end
  collectgarbage("collect")
  check(not pcall(ctx.alloc, ctx, 4), "a closed handle raises")
  local t0 = sys.clock()
  local c2, msg = cuda.open()
  check(not c2 and one_line(msg):find("unusable in this process") and msg:find("ILLEGAL_ADDRESS"), tostring(msg))
  check(sys.clock() - t0 < 0.5, "refused at once")
  local dir = S.dir or os.tmpname()
  local script = dir .. "/fresh.lua"
  local f = assert(io.open(script, "wb"))
  f:write([=[
local cuda, ref = require "emmy.cuda", require "emmy.ref"
local ctx = assert(cuda.open())
local b = assert(ctx:upload(ref.tensor("i32", { 3 }, { 7, -8, 9 })))
local v = assert(b:download("i32", { 3 })):to_table()
assert(ctx:sync())
io.write(("%d %d %d"):format(v[1], v[2], v[3]))
]=])
  f:close()
  local bin = os.getenv("EMMY_BIN") or (EMMY_HOME .. "/emmy")
  local p = assert(io.popen(shell_quote(bin) .. " " .. shell_quote(script) .. " 2>&1"))
  local out = p:read("*a")
  p:close()
  eq(out, "7 -8 9", "a new process uses the device")
end)

local passed, failed = 0, 0
for _, t in ipairs(tests) do
  local t0 = sys.clock()
  local ok, e = xpcall(t[2], debug.traceback)
  if ok then
    passed = passed + 1
    print(("ok   gpu/cuda/%s (%.2fs)"):format(t[1], sys.clock() - t0))
  else
    failed = failed + 1
    print(("FAIL gpu/cuda/%s\n    %s"):format(t[1], tostring(e):gsub("\n", "\n    ")))
  end
  io.stdout:flush()
end
if S.dir then os.execute("rm -rf " .. shell_quote(S.dir)) end
print(("%d passed, %d failed"):format(passed, failed))
return failed == 0 and 0 or 1
