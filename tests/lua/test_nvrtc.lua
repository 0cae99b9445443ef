-- emmy.nvrtc from Lua: a cubin for sm_90a with its ptxas figures, compile errors as data, spills and stack
-- frames, 8 jobs in parallel returned in order with progress, the cubin cache (hit, miss on a changed option,
-- EMMY_CUBIN_CACHE, clearing), the timeout, and misuse raising. Every compile uses a temporary cache folder;
-- without NVRTC the compiling tests skip.
local nvrtc = require "emmy.nvrtc"

local T = {}
local function test(name, fn) T[#T + 1] = { name, fn } end

local function need_nvrtc()
  local v, err = nvrtc.version()
  if not v then skip("NVRTC not found: " .. tostring(err)) end
  return v
end

local ADD = [[
extern "C" __global__ void add(float *y, const float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += x[i];
}
]]

local SLOW = [[
template <int N> struct U { __device__ static float f(float x) {
  return U<N - 1>::f(x * 1.000001f + (float)N) * 0.999f + __sinf(x); } };
template <> struct U<0> { __device__ static float f(float x) { return x; } };
__global__ void slow(float *y) {
  float x = y[threadIdx.x];
#pragma unroll
  for (int i = 0; i < 64; i++) x = U<180>::f(x + i);
  y[threadIdx.x] = x;
}
]]

-- Files in dir other than the marker every test folder gets (sys.listdir of an empty folder trips UBSan in
-- lib_sys.c's qsort(NULL, 0, …), so the folders are never empty).
local function marked_dir()
  local d = tmpdir()
  write_file(d .. "/marker", "")
  return d
end
local function nfiles(dir)
  return #require("emmy.sys").listdir(dir) - 1
end

test("version", function()
  local v = need_nvrtc()
  check(v:match("^%d+%.%d+$"), "version " .. v)
  local sys = require "emmy.sys"
  eq(v, sys.nvrtc(), "nvrtc.version agrees with sys.nvrtc")
end)

test("compile a cubin for sm_90a", function()
  need_nvrtc()
  local r = nvrtc.compile { source = ADD, arch = "sm_90a", cache_dir = tmpdir() }
  eq(r.status, "ok", "status")
  check(type(r.cubin) == "string" and #r.cubin > 100, "cubin bytes")
  eq(r.cubin:sub(1, 4), "\127ELF", "ELF magic")
  check(r.regs and r.regs > 0, "registers parsed")
  eq(r.spill_stores, 0, "spill stores")
  eq(r.stack, 0, "stack frame")
  eq(#r.kernels, 1, "one kernel")
  eq(r.kernels[1].name, "add", "kernel name")
  eq(r.kernels[1].entry, true, "an entry")
  eq(r.cache_hit, false, "first compile misses")
  check(r.ms > 0 and r.compile_ms > 0, "times")
  check(r.key:match("^%x+$") and #r.key == 32, "key")
  check(r.log:find("Compiling entry function 'add' for 'sm_90a'", 1, true), "ptxas log kept")
end)

test("PTX for compute_90a", function()
  need_nvrtc()
  local r = nvrtc.compile { source = ADD, arch = "compute_90a", cache = false }
  eq(r.status, "ok", "status")
  check(r.ptx and r.ptx:find(".entry add", 1, true), "ptx text")
  eq(r.cubin, nil, "no cubin")
  eq(r.regs, nil, "no ptxas figures for PTX")
end)

test("a syntax error is a compile_fail result", function()
  need_nvrtc()
  local r = nvrtc.compile { source = "__global__ void bad(float *y) {\n  y[0] = undefined_thing + 1;\n}\n",
    name = "bad.cu", cache_dir = tmpdir() }
  eq(r.status, "compile_fail", "status")
  check(r.log:find('bad.cu(2): error: identifier "undefined_thing" is undefined', 1, true), "log: " .. r.log)
  eq(r.cubin, nil, "no cubin")
end)

test("a huge local array shows stack and spills", function()
  need_nvrtc()
  local src = [[
__global__ void local_array(float *y, const float *x, int n) {
  float a[4096];
  for (int i = 0; i < 4096; i++) a[i] = x[(i * 7 + threadIdx.x) % n];
  y[threadIdx.x] = a[(threadIdx.x * 3) % 4096] + a[x[0] > 0 ? 5 : 9];
}
__global__ void pressure(float *y, const float *x, int n) {
  float a[96];
#pragma unroll
  for (int k = 0; k < 96; k++) a[k] = x[threadIdx.x + k * n];
  float s = 0;
#pragma unroll
  for (int k = 0; k < 96; k++) s += a[k] * a[(k * 5) % 96] + a[(k * 7) % 96];
#pragma unroll
  for (int k = 0; k < 96; k++) y[threadIdx.x + k * n] = a[k] * s;
}
]]
  local r = nvrtc.compile { source = src, options = { "-maxrregcount=32" }, cache_dir = tmpdir() }
  eq(r.status, "ok", "status")
  check(r.stack >= 16384, "stack " .. tostring(r.stack))
  check(r.spill_stores > 0 and r.spill_loads > 0, "spills")
  local by = {}
  for _, k in ipairs(r.kernels) do by[k.name] = k end
  check(by._Z11local_arrayPfPKfi.stack >= 16384, "local_array stack")
  check(by._Z8pressurePfPKfi.spill_stores > 0, "pressure spills")
  eq(by._Z8pressurePfPKfi.regs, 32, "maxrregcount honoured")
end)

test("name expressions", function()
  need_nvrtc()
  local r = nvrtc.compile { source = "template <int N> __global__ void scale(float *y) { y[threadIdx.x] *= N; }",
    name_expressions = { "scale<4>", "scale<8>" }, cache = false }
  eq(r.status, "ok", "status")
  eq(r.lowered["scale<4>"], "_Z5scaleILi4EEvPf", "lowered 4")
  eq(r.lowered["scale<8>"], "_Z5scaleILi8EEvPf", "lowered 8")
end)

test("compile_many: 8 kernels in order, progress on this thread", function()
  need_nvrtc()
  local dir, jobs = tmpdir(), {}
  for i = 1, 8 do
    jobs[i] = { source = ('extern "C" __global__ void k%d(float *y) { y[threadIdx.x] *= %d.0f; }'):format(i, i + 1),
      cache_dir = dir }
  end
  local calls, seen = {}, {}
  local rs = nvrtc.compile_many(jobs, { threads = 4, progress = function(done, total, index, status)
    calls[#calls + 1] = done
    eq(total, 8, "total")
    eq(status, "ok", "status in progress")
    seen[index] = (seen[index] or 0) + 1
    jobs[index].source = nil -- editing the job tables while others compile is harmless
  end })
  eq(#rs, 8, "results")
  for i = 1, 8 do
    eq(rs[i].status, "ok", "status " .. i)
    eq(rs[i].kernels[1].name, "k" .. i, "result " .. i .. " is job " .. i)
    eq(rs[i].cubin:sub(1, 4), "\127ELF", "cubin " .. i)
    eq(calls[i], i, "done counts up")
    eq(seen[i], 1, "progress once per job")
  end
end)

test("compile_many: a raising progress cancels and re-raises", function()
  need_nvrtc()
  local jobs = {}
  for i = 1, 6 do jobs[i] = { source = ADD, cache = false } end
  local ok, err = pcall(nvrtc.compile_many, jobs, { threads = 1, progress = function() error("stop here") end })
  eq(ok, false, "raised")
  check(tostring(err):find("stop here", 1, true), "the progress error: " .. tostring(err))
end)

test("start: a batch in the background gives each job once as it finishes; close cancels what has not started", function()
  need_nvrtc()
  local dir, jobs = tmpdir(), {}
  for i = 1, 6 do
    jobs[i] = { source = ('extern "C" __global__ void b%d(float *y) { y[threadIdx.x] += %d.0f; }'):format(i, i), cache_dir = dir }
  end
  local b = assert(nvrtc.start(jobs, { threads = 3 }))
  for i = 1, 6 do jobs[i].source = nil end -- the batch holds what it borrowed
  local seen, n = {}, 0
  while true do
    local j, r = b:next(1000)
    if j == false then break end
    if j then
      n = n + 1
      eq(seen[j], nil, "job " .. j .. " given once")
      seen[j] = true
      eq(r.status, "ok", "status " .. j)
      eq(r.kernels[1].name, "b" .. j, "result " .. j .. " is job " .. j)
      eq(b:left(), 6 - n, "left")
    end
  end
  eq(n, 6, "every job given")
  eq(b:next(), false, "nothing after the last")
  b:close()
  b:close() -- idempotent
  -- the same sources again: cache hits, so the worker's builds would meet them
  local b2 = assert(nvrtc.start({ { source = ('extern "C" __global__ void b1(float *y) { y[threadIdx.x] += 1.0f; }'), cache_dir = dir } }))
  local j, r = b2:next(-1)
  eq(j, 1, "index")
  eq(r.cache_hit, true, "hit")
  -- closing with jobs not started: one thread, a slow job first, so the rest are cancelled (close returns once the
  -- running one ends)
  local slow = { { source = SLOW, cache = false, timeout_ms = 300 } }
  for i = 2, 5 do slow[i] = { source = ADD, cache = false } end
  local b3 = assert(nvrtc.start(slow, { threads = 1 }))
  eq(b3:next(0), nil, "none finished yet")
  b3:close()
  eq(b3:next(), false, "closed")
end)

test("cache: hit, changed option misses, failures cached, clear", function()
  need_nvrtc()
  local dir = marked_dir()
  local a = nvrtc.compile { source = ADD, cache_dir = dir }
  local b = nvrtc.compile { source = ADD, cache_dir = dir }
  eq(a.cache_hit, false, "first misses")
  eq(b.cache_hit, true, "second hits")
  eq(b.cubin, a.cubin, "same cubin")
  eq(b.regs, a.regs, "same registers")
  check(b.ms < 20 and b.ms < a.ms, ("hit is fast: %.2f ms vs %.2f ms"):format(b.ms, a.ms))
  local c = nvrtc.compile { source = ADD, cache_dir = dir, options = { "-DVARIANT=2" } }
  eq(c.cache_hit, false, "changed option misses")
  check(c.key ~= a.key, "another key")
  local d = nvrtc.compile { source = ADD, cache_dir = dir, lineinfo = true }
  eq(d.cache_hit, false, "lineinfo misses")
  local bad = { source = "__global__ void bad() { nope; }", cache_dir = dir }
  eq(nvrtc.compile(bad).cache_hit, false, "failure compiled")
  local again = nvrtc.compile(bad)
  eq(again.status, "compile_fail", "failure record")
  eq(again.cache_hit, true, "failure record hit")
  eq(nfiles(dir), 7, "3 cubins, 4 sidecars")
  eq(nvrtc.cache_dir(dir), dir, "cache_dir with an override")
  eq(nvrtc.clear_cache(dir), 7, "files removed")
  eq(nfiles(dir), 0, "only the marker is left")
  eq(nvrtc.compile { source = ADD, cache_dir = dir }.cache_hit, false, "miss after clear")
end)

test("cache trim: least recently used entries go first, whole entries, down to 90% of the cap; others stay", function()
  local dir = tmpdir()
  local function put(name, bytes, age_s)
    write_file(dir .. "/" .. name, ("x"):rep(bytes))
    sh(("touch -d @%d %s"):format(os.time() - age_s, shell_quote(dir .. "/" .. name)))
  end
  local keys = {}
  for i = 1, 4 do
    keys[i] = ("%032x"):format(i)
    put(keys[i] .. ".cubin", 1000, 1000 - i * 100) -- entry 1 oldest
    put(keys[i] .. ".meta", 100, 1000 - i * 100)
  end
  put(("%032x"):format(9) .. ".cubin.tmp.1.1", 5000, 5000) -- a temporary file: not an entry
  write_file(dir .. "/README", "mine")
  local kept, removed = nvrtc.trim_cache(100000, dir)
  eq(kept, 4400); eq(removed, 0) -- under the cap: nothing
  kept, removed = nvrtc.trim_cache(3000, dir) -- goal 2700: the two oldest entries go
  eq(kept, 2200); eq(removed, 4)
  for i = 1, 4 do eq(io.open(dir .. "/" .. keys[i] .. ".cubin") ~= nil, i > 2, "entry " .. i) end
  check(io.open(dir .. "/README") and io.open(dir .. "/" .. ("%032x"):format(9) .. ".cubin.tmp.1.1"), "other files stay")
  -- a hit touches the entry: entry 3 becomes the newest, so entry 4 goes before it
  sh(("touch %s"):format(shell_quote(dir .. "/" .. keys[3] .. ".meta")))
  kept, removed = nvrtc.trim_cache(1500, dir)
  eq(kept, 1100); eq(removed, 2)
  check(io.open(dir .. "/" .. keys[3] .. ".cubin") and not io.open(dir .. "/" .. keys[4] .. ".cubin"), "least recently used first")
  eq(select(1, nvrtc.trim_cache(10, dir .. "/missing")), 0, "a missing folder is no error")
end)

test("EMMY_CUBIN_CACHE picks the folder; off disables", function()
  need_nvrtc()
  local dir, scripts = marked_dir(), tmpdir()
  write_file(scripts .. "/c.lua", ([[
local nvrtc = require "emmy.nvrtc"
local r = nvrtc.compile { source = %q }
print(r.status, r.cache_hit, nvrtc.cache_dir() or "off")
]]):format(ADD))
  local code, out, err = emmy({ scripts .. "/c.lua" }, { env = "EMMY_CUBIN_CACHE=" .. dir })
  eq(code, 0, "exit: " .. err)
  eq(out, "ok\tfalse\t" .. dir .. "\n", "first run")
  code, out = emmy({ scripts .. "/c.lua" }, { env = "EMMY_CUBIN_CACHE=" .. dir })
  eq(out, "ok\ttrue\t" .. dir .. "\n", "second run hits")
  eq(nfiles(dir), 2, "one entry")
  code, out = emmy({ scripts .. "/c.lua" }, { env = "EMMY_CUBIN_CACHE=off" })
  eq(out, "ok\tfalse\toff\n", "off")
end)

test("EMMY_LIBNVRTC: a path given is the only one tried (no fallback to the system's library)", function()
  need_nvrtc()
  local code, out, err = emmy({ "info" }, { env = "EMMY_LIBNVRTC=/nonexistent/libnvrtc.so" })
  eq(code, 0, "info runs without NVRTC: " .. err)
  check(out:find("nvrtc%s+unavailable") and out:find("/nonexistent/libnvrtc.so", 1, true), "says which path failed: " .. out)
end)

test("timeout: a slow compile is killed", function()
  need_nvrtc()
  local dir = marked_dir()
  local r = nvrtc.compile { source = SLOW, timeout_ms = 50, cache_dir = dir }
  eq(r.status, "timeout", "status")
  check(r.ms < 1000, ("killed promptly: %.0f ms"):format(r.ms))
  check(r.log:find("50 ms timeout", 1, true), "log says why")
  eq(nfiles(dir), 0, "a timeout is not cached")
  local ok = nvrtc.compile { source = ADD, timeout_ms = 60000, cache = false }
  eq(ok.status, "ok", "a forked compile within its deadline")
  eq(ok.cubin:sub(1, 4), "\127ELF", "forked cubin")
end)

test("misuse raises", function()
  local function raises(f, pat)
    local ok, err = pcall(f)
    eq(ok, false, "raised")
    check(tostring(err):find(pat, 1, true), "message: " .. tostring(err))
  end
  raises(function() nvrtc.compile { source = ADD, optons = {} } end, "unknown job field 'optons'")
  raises(function() nvrtc.compile { arch = "sm_90a" } end, "no source")
  raises(function() nvrtc.compile { source = ADD, options = { 1 } } end, "options[1] is not a string")
  raises(function() nvrtc.compile_many({ { source = ADD } }, { thread = 2 }) end, "unknown option 'thread'")
  raises(function() nvrtc.start({ { source = ADD } }, { thread = 2 }) end, "unknown option 'thread'")
  raises(function() nvrtc.start({ { sorce = ADD } }) end, "unknown job field 'sorce'")
  if nvrtc.version() then
    raises(function() nvrtc.compile { source = ADD, arch = "sm90", cache = false } end, "arch 'sm90'")
  end
end)

test("parse_log", function()
  local r = nvrtc.parse_log([[
ptxas info    : Compiling entry function '_Z1kPf' for 'sm_90a'
ptxas info    : Function properties for _Z1kPf
ptxas         .     8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 8 bytes cumulative stack size, 384 bytes smem
]])
  eq(r.regs, 40, "regs")
  eq(r.smem, 384, "smem")
  eq(r.stack, 8, "stack")
  eq(r.kernels[1].barriers, 1, "barriers")
  eq(r.kernels[1].cmem0, nil, "cmem0 absent")
  eq(#nvrtc.STATUS, 6, "statuses")
end)

test("tools/sass_count.sh by emmy's NVRTC: a kernel's SASS instructions, registers, spills; a compile error is a row and exit 1", function()
  need_nvrtc()
  if os.execute("command -v readelf > /dev/null 2>&1") ~= 0 then skip("no readelf") end
  local d = marked_dir()
  write_file(d .. "/add.cu", ADD)
  write_file(d .. "/bad.cu", "this is not CUDA\n")
  local p = io.popen(("SASS_VIA=nvrtc EMMY_BIN=%s sh %s/tools/sass_count.sh %s/add.cu %s/bad.cu 2>&1; echo rc=$?"):format(
    shell_quote(BIN), shell_quote(ROOT), shell_quote(d), shell_quote(d)))
  local out = p:read("*a")
  p:close()
  local n, regs = out:match("add%.cu: (%d+) SASS instructions, Used (%d+) registers, 0 bytes spill stores")
  check(n and tonumber(n) > 4 and tonumber(regs) > 0, out)
  check(out:find("bad.cu: does not compile: compile_fail", 1, true) and out:find("rc=1", 1, true), out)
end)

test("every golden CUDA file compiles for sm_90a (text that matches its golden byte for byte may still not be CUDA)", function()
  need_nvrtc()
  local golden = require "golden"
  local jobs, files, cache = {}, {}, os.getenv("EMMY_CUBIN_CACHE") ~= "off" and tmpdir() or nil
  for _, e in ipairs(golden.manifest()) do
    local src = golden.read(golden.DIR .. "/" .. e.file)
    if src then
      files[#files + 1] = e.file
      jobs[#jobs + 1] = { source = src, arch = "sm_90a", name = e.file, options = { "-std=c++17" }, cache_dir = cache }
    end
  end
  check(#jobs >= 100, "the golden corpus has its files")
  local bad = {}
  for i, r in ipairs(nvrtc.compile_many(jobs)) do
    if r.status ~= "ok" then
      bad[#bad + 1] = ("%s: %s %s"):format(files[i], r.status, ((r.log or ""):match("[^\n]*error[^\n]*") or ""))
    end
  end
  check(#bad == 0, #bad .. " golden files do not compile:\n  " .. table.concat(bad, "\n  "))
end)

return T
