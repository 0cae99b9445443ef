-- emmy.bench — where emmy stands against PyTorch eager and torch.compile, as a whole and kernel by kernel
-- (`emmy run … --bench`, `emmy tune … --bench`). The deploy regime: CUDA-graph replay, warm-up, many reps, the
-- median with p20/p80; the same inputs for every backend (the CPU reference's, at the symbolic hint or the
-- static shape). Eager and torch.compile run in tools/torchref/bench.py (a subprocess, graphs replayed op by
-- op); emmy's kernels are timed alone (each reproducer) and in the program (CUPTI kernel records of the
-- whole-graph replay). The SM clock is read before and after each row (a probe kernel: clock64 against the
-- global timer), and a row whose clock moved is flagged.
local cjson = require "cjson"
local gpu = require "emmy.gpu"
local graphjson = require "emmy.graphjson"
local kernels = require "emmy.kernels"
local sys = require "emmy.sys"
local tbl = require "emmy.tbl"

local M = {}

M.BACKENDS = { "eager", "tcompile", "emmy" }
M.FORMAT_VERSION = 1
-- the deploy regime's timing options (emmy's cu:time and bench.py's --reps/--warmup)
M.REGIME = { graph = true, reps = 50, warmup = 5, warmup_ms = 10 }
M.LAYER_REPS = 30
M.DRIFT = 0.03 -- a row whose SM clock moved by more than this share is flagged
M.COMPILE_TOL = 0.125 -- torch.compile's output is checked against eager's: a larger max abs difference is said

-- The K=V items of knob string label that base lacks ("(chosen)" when none): what a pinned variant changes.
function M.knob_diff(label, base)
  local have, out = {}, {}
  for kv in base:gmatch("[^,]+") do have[kv] = true end
  for kv in label:gmatch("[^,]+") do if not have[kv] then out[#out + 1] = kv end end
  return #out > 0 and table.concat(out, ",") or "(chosen)"
end

-- Parses --bench-backends ("eager,tcompile,emmy" in any order, a subset); returns a set or nil, msg.
function M.parse_backends(s)
  local set, n = {}, 0
  for b in (s or "eager,tcompile,emmy"):gmatch("[^,]+") do
    local ok = false
    for _, x in ipairs(M.BACKENDS) do if x == b then ok = true end end
    if not ok then return nil, ("--bench-backends: unknown backend '%s' (eager, tcompile, emmy)"):format(b) end
    set[b], n = true, n + 1
  end
  if n == 0 then return nil, "--bench-backends: no backend given (eager, tcompile, emmy)" end
  return set
end

-- The SM clock in MHz: a one-thread kernel spins on %globaltimer for spin_ns (default 100 µs) and counts clock64
-- cycles.
local PROBE = [[
extern "C" __global__ void em_clock_probe(long long *out, long long spin_ns) {
  unsigned long long t0, t1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  long long c0 = clock64();
  do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1)); } while ((long long)(t1 - t0) < spin_ns);
  long long c1 = clock64();
  out[0] = c1 - c0;
  out[1] = (long long)(t1 - t0);
}
]]
local probes = setmetatable({}, { __mode = "k" })
function M.sm_clock(cu, spin_ns)
  local p = probes[cu]
  if p == nil then
    local nv = require "emmy.nvrtc"
    local r = nv.compile_many({ { source = PROBE, arch = gpu.arch(cu:info()), name = "em_clock_probe.cu", options = { "-std=c++17" } } })[1]
    local mod = r and r.status == "ok" and cu:module(r.cubin)
    local fn = mod and mod:fn("em_clock_probe")
    local out = fn and cu:alloc(16)
    p = out and { mod = mod, fn = fn, out = out } or false
    probes[cu] = p
  end
  if not p then return nil end
  local ok = cu:launch(p.fn, { grid = { 1, 1, 1 }, block = { 1, 1, 1 }, smem = 0, args = { p.out, { i64 = spin_ns or 100000 } } })
  if not ok or not cu:sync() then return nil end
  local t = p.out:download("i64", { 2 })
  local cycles, ns = t and t:get(1), t and t:get(2)
  if not cycles or not ns or ns <= 0 then return nil end
  return cycles / ns * 1000
end

-- Runs timer() between two clock reads; returns its result with .clock = {before, after, drift} added (drift:
-- true when the clock moved by more than M.DRIFT).
function M.with_clock(cu, timer)
  M.sm_clock(cu, 1000000) -- (a first millisecond of spinning, so an idle GPU's low clock is not read as "before")
  local before = M.sm_clock(cu)
  local t, err = timer()
  local after = M.sm_clock(cu)
  if t and before and after then
    t.clock = { before_mhz = before, after_mhz = after, drift = math.abs(after - before) / before > M.DRIFT }
  end
  return t, err
end

local function python() return os.getenv("EMMY_PYTHON") or "python3" end
M.python = python

-- Writes graph gr and its inputs (value_of(name) -> tensor) as a tools/torchref job in folder d: d/g.torch.json
-- and d/in/<input>.npy. Returns true, or nil and why.
function M.write_job(d, gr, value_of)
  local ok, err = sys.mkdir_p(d .. "/in")
  if not ok then return nil, err end
  ok, err = graphjson.write(gr, d .. "/g.torch.json", { sync = false })
  if not ok then return nil, err end
  for _, v in ipairs(gr:inputs()) do
    local t = value_of(v.name)
    if not t then return nil, "no value for input " .. v.name end
    ok, err = t:save(d .. "/in/" .. v.name .. ".npy")
    if not ok then return nil, err end
  end
  return true
end

-- The last non-blank line of a log file ("" when none): why a tools/torchref script gave no result.
local function last_line(path)
  local last = ""
  local f = io.open(path)
  for l in (f and f:lines() or function() end) do if l:match("%S") then last = l end end
  if f then f:close() end
  return last
end

-- Where a graph is benched, in words: "seq_len=512 (symbolic hint)", "seq_len=7 (bound)" or "static".
function M.at(g, bind)
  local parts = {}
  for _, y in ipairs(g:symbols()) do
    if not y.derived then
      local v = bind[y.name]
      parts[#parts + 1] = ("%s=%s (%s)"):format(y.name, tostring(v), v == y.hint and "symbolic hint" or "bound")
    end
  end
  return #parts > 0 and table.concat(parts, ", ") or "static"
end

-- Times graphs in PyTorch in one tools/torchref/bench.py process (--batch: one Python start, one torch import for
-- all of them). jobs = {{graph, value_of = fn(name) -> tensor, out = DIR|nil}}, bound by bind; o.backends: set with
-- eager and/or tcompile; o.more: a list of bench.py's other backends (sdpa_flash, …), each result keyed by its
-- name; o.device ("cuda" unless EMMY_TORCH_DEVICE says otherwise); o.kernels = N: also each backend's kernels
-- (bench.py --kernels N). A job's out: eager's outputs are written there as <output name>.npy (bench.py --out), even
-- with no backend to time. Returns one result per job: {eager = stats|nil, tcompile = stats|nil, [more] = stats|nil,
-- why = text|nil}; stats = {median_us, p20_us, p80_us, min_us, samples, method, batch, max_abs_vs_eager,
-- kernels = {{name, us, count}} with o.kernels}.
function M.torch_many(jobs, bind, o)
  o = o or {}
  local want = {}
  if not o.backends or o.backends.eager then want[#want + 1] = "eager" end
  if not o.backends or o.backends.tcompile then want[#want + 1] = "compile" end
  for _, b in ipairs(o.more or {}) do want[#want + 1] = b end
  local outs = false
  for _, job in ipairs(jobs) do outs = outs or job.out ~= nil end
  local res = {}
  if #want == 0 and not outs then
    for i = 1, #jobs do res[i] = {} end
    return res
  end
  local d = os.tmpname()
  os.remove(d)
  assert(sys.mkdir_p(d))
  local batch = {}
  for i, job in ipairs(jobs) do
    local jd = ("%s/%d"):format(d, i)
    local ok, why = M.write_job(jd, job.graph, job.value_of)
    if ok then
      batch[#batch + 1] = { graph = jd .. "/g.torch.json", inputs = jd .. "/in", json = jd .. "/b.json", out = job.out, i = i }
    else
      res[i] = { why = why }
    end
  end
  require("emmy.dump").write_file(d .. "/batch.json", cjson.encode(batch))
  local binds = {}
  for k, v in pairs(bind or {}) do binds[#binds + 1] = ("--bind %s=%d"):format(k, v) end
  table.sort(binds)
  os.execute(("%s %s/tools/torchref/bench.py --batch %s/batch.json %s --device %s --backends %s --reps %d --warmup %d%s > %s/log 2>&1")
    :format(python(), EMMY_HOME, d, table.concat(binds, " "), o.device or os.getenv("EMMY_TORCH_DEVICE") or "cuda",
      #want > 0 and table.concat(want, ",") or "none", o.reps or 100, o.warmup or 10,
      (o.kernels and (" --kernels %d"):format(o.kernels) or "") .. (o.cold and (" --cold %d"):format(o.cold) or ""), d, d))
  local last = last_line(d .. "/log")
  for _, b in ipairs(batch) do
    local jf = io.open(b.json)
    local ok, r = pcall(cjson.decode, jf and jf:read("*a") or "")
    if jf then jf:close() end
    local out, whys = {}, {}
    for _, w in ipairs(want) do
      local key = w == "compile" and "tcompile" or w
      local x = ok and r.backends and r.backends[w]
      if x and x.median_us then out[key] = x
      elseif x then whys[#whys + 1] = ("%s: %s"):format(key, x.error or x.skipped or "no time") end
    end
    if not ok then whys[#whys + 1] = last ~= "" and last or "tools/torchref/bench.py gave no result" end
    if ok and r.error then whys[#whys + 1] = r.error end
    out.why = #whys > 0 and table.concat(whys, "; ") or nil
    out.device = ok and r.device or nil
    res[b.i] = out
  end
  os.execute("rm -rf '" .. d:gsub("'", "") .. "'")
  return res
end

-- One graph in PyTorch (M.torch_many of one job).
function M.torch(gr, value_of, bind, o)
  return M.torch_many({ { graph = gr, value_of = value_of } }, bind, o)[1]
end

-- The real transformers module on the same weights and inputs (tools/torchref/hf_bench.py): for a model's layer
-- (mode "layer": layer N on x) or the whole model (mode "whole": on input_ids). model: emmy.frontend's model (its
-- config.json); g, ins: the graph and its input values (weights under their checkpoint names); compile: also the
-- module under torch.compile. Returns stats (with .compile: stats or {error}), or nil and why.
function M.transformers(model, mode, layer, g, ins, compile)
  local st = require "emmy.safetensors"
  local d = os.tmpname()
  os.remove(d)
  assert(sys.mkdir_p(d))
  local function done(...) os.execute("rm -rf '" .. d:gsub("'", "") .. "'") return ... end
  local ws, have = {}, false
  for _, v in ipairs(g:inputs()) do
    if v.kind == "param" and v.weight and not v.name:match("^rotary%.") then ws[v.weight], have = ins[v.name], true
    elseif v.kind ~= "param" and (v.name == "x" or v.name == "input_ids") then
      local ok, err = ins[v.name]:save(d .. "/" .. v.name .. ".npy")
      if not ok then return done(nil, err) end
    end
  end
  if not have then return done(nil, "the graph has no weights under checkpoint names") end
  local ok, err = st.write(d .. "/model.safetensors", ws, { format = "pt" })
  if not ok then return done(nil, err) end
  ok, err = sys.write_file(d .. "/config.json", cjson.encode(model.config), { sync = false })
  if not ok then return done(nil, err) end
  os.execute(("%s %s/tools/torchref/hf_bench.py %s --mode %s --layer %d --device %s%s --json %s/b.json > %s/log 2>&1")
    :format(python(), EMMY_HOME, d, mode, layer or 0, os.getenv("EMMY_TORCH_DEVICE") or "cuda",
      compile and " --compile" or "", d, d))
  local jf = io.open(d .. "/b.json")
  local okj, r = pcall(cjson.decode, jf and jf:read("*a") or "")
  if jf then jf:close() end
  if okj and r.median_us then return done(r) end
  local last = last_line(d .. "/log")
  return done(nil, last ~= "" and last or "tools/torchref/hf_bench.py gave no result")
end

-- Launches every kernel of plans in order (picks[name] = a built variant of gpu.build); true | nil, msg.
local function launch_all(cu, plans, picks, bufs, bind)
  for _, p in ipairs(plans) do
    local ok, err = gpu.launch(cu, p, picks[p.kernel.name], bufs, bind)
    if not ok then return nil, err end
  end
  return true
end

-- Times every kernel of plans, in order, as one captured graph (picks[name] = a built variant of gpu.build).
function M.graph_time(cu, plans, picks, bufs, bind, reps)
  local ok, err = launch_all(cu, plans, picks, bufs, bind)
  if not ok then return nil, err end
  ok, err = cu:sync()
  if not ok then return nil, err end
  return cu:time(function() return launch_all(cu, plans, picks, bufs, bind) end,
    { graph = true, reps = reps or M.LAYER_REPS, warmup = 3 })
end

-- Each kernel's time inside the whole-graph replay, from CUPTI kernel records of `reps` replays: per launch
-- position i, the median over replays of busy (end - start), of exposed time (end - the later of its start and
-- the previous kernel's end: a kernel launched early under programmatic dependent launch waits in
-- griddepcontrol.wait while its predecessor runs, and that wait is the predecessor's time, not its own) and of
-- in-program time (start to the next kernel's start; the last: its end), so the in-program times add up to the
-- replay's span. Returns {positions = {{name, busy_us, exposed_us, in_program_us}}, replays = n, span_us = median
-- span, dropped} | nil, msg.
-- CUPTI kernel records of what timer() launches: recs, dropped | nil, msg.
local function recorded(timer)
  local cuda = require "emmy.cuda"
  local ok, err = cuda.records_start()
  if not ok then return nil, err end
  local t, terr = timer()
  local recs, dropped = cuda.records_stop()
  if not t then return nil, terr end
  if not recs then return nil, dropped end
  return recs, dropped
end

-- The in-program times of the launch sequence plans (M.in_program without the experiment below); flush_bytes: the
-- L2 flushed before each replay (a buffer of that many bytes filled).
local function in_program_of(cu, plans, picks, bufs, bind, reps, flush_bytes)
  local t, err = M.graph_time(cu, plans, picks, bufs, bind, 3) -- (captured once, warm)
  if not t then return nil, err end
  local recs, dropped = recorded(function()
    return cu:time(function() return launch_all(cu, plans, picks, bufs, bind) end,
      { graph = true, reps = reps, warmup = 0, flush_bytes = flush_bytes })
  end)
  if not recs then return nil, dropped end
  return M.group_records(recs, plans, dropped)
end

function M.in_program(cu, plans, picks, bufs, bind, reps)
  reps = reps or 20
  -- EMMY_INPROG_REPEAT=n (an experiment): each kernel launched n times in a row; every position's times go to
  -- stderr, and the first launch of each stands for the kernel (is a kernel slower first, after other kernels?)
  local rep = tonumber(os.getenv("EMMY_INPROG_REPEAT") or "")
  if not rep or rep < 2 then return in_program_of(cu, plans, picks, bufs, bind, reps) end
  local seq = {}
  for _, p in ipairs(plans) do for _ = 1, rep do seq[#seq + 1] = p end end
  local ip, err = in_program_of(cu, seq, picks, bufs, bind, reps)
  if not ip then return nil, err end
  local out = { positions = {}, replays = ip.replays, span_us = ip.span_us, dropped = ip.dropped }
  for i, pos in ipairs(ip.positions) do
    io.stderr:write(("  in-program x%d %3d %-28s busy %7.2f exposed %7.2f\n"):format(rep, i, pos.name, pos.busy_us, pos.exposed_us))
    if (i - 1) % rep == 0 then out.positions[#out.positions + 1] = pos end
  end
  return out
end

local function median(xs)
  if #xs == 0 then return nil end
  local s = { unpack(xs) }
  table.sort(s)
  local n = #s
  return n % 2 == 1 and s[(n + 1) / 2] or (s[n / 2] + s[n / 2 + 1]) / 2
end
M.median = median

-- The median CUPTI duration (µs) of the kernel `name` over `reps` launches (launch(): one), the L2 flushed before
-- each (a memset of twice its size, or with flush = "read" a read of as much): the regime of a kernel in a program,
-- whose weights come from HBM. nil, msg.
function M.cold_us(cu, name, launch, reps, flush)
  local l2 = cu:info().l2 or 0
  local recs, err = recorded(function()
    return cu:time(launch, { graph = true, reps = reps or 30, warmup = 2, flush_bytes = 2 * math.max(l2, 32 * 1024 * 1024),
      flush = flush })
  end)
  if not recs then return nil, err end
  local d = {}
  for _, r in ipairs(recs) do if r.name == name then d[#d + 1] = (r["end_ns"] - r.start_ns) / 1e3 end end
  if #d == 0 then return nil, "CUPTI: no record of " .. name end
  return median(d)
end

-- Groups CUPTI records (GPU start order) into replays of the plans' launch sequence (records of other kernels
-- are skipped; a replay that does not match the sequence is dropped). See M.in_program.
function M.group_records(recs, plans, dropped)
  local seq, names = {}, {}
  for i, p in ipairs(plans) do seq[i] = p.kernel.name names[p.kernel.name] = true end
  local mine = {}
  for _, r in ipairs(recs) do if names[r.name] then mine[#mine + 1] = r end end
  local busy, exposed, inprog, spans = {}, {}, {}, {}
  for i = 1, #seq do busy[i], exposed[i], inprog[i] = {}, {}, {} end
  local i, replays = 1, 0
  while i + #seq - 1 <= #mine do
    local match = true
    for j = 1, #seq do if mine[i + j - 1].name ~= seq[j] then match = false break end end
    if match then
      for j = 1, #seq do
        local r = mine[i + j - 1]
        local nxt = j < #seq and mine[i + j] or nil
        busy[j][#busy[j] + 1] = (r["end_ns"] - r.start_ns) / 1e3
        local from = j > 1 and math.max(r.start_ns, mine[i + j - 2]["end_ns"]) or r.start_ns
        exposed[j][#exposed[j] + 1] = math.max(0, r["end_ns"] - from) / 1e3
        inprog[j][#inprog[j] + 1] = ((nxt and nxt.start_ns or r["end_ns"]) - r.start_ns) / 1e3
      end
      spans[#spans + 1] = (mine[i + #seq - 1]["end_ns"] - mine[i].start_ns) / 1e3
      replays = replays + 1
      i = i + #seq
    else
      i = i + 1
    end
  end
  if replays == 0 then return nil, ("CUPTI: no replay of the %d-kernel sequence among %d kernel records"):format(#seq, #recs) end
  local out = { positions = {}, replays = replays, span_us = median(spans), dropped = dropped or 0 }
  for j = 1, #seq do
    out.positions[j] = { name = seq[j], busy_us = median(busy[j]), exposed_us = median(exposed[j]), in_program_us = median(inprog[j]) }
  end
  return out
end

local function stats(t)
  if not t then return nil end
  return { median_us = t.median_us, p20_us = t.p20_us, p80_us = t.p80_us, min_us = t.min_us, samples = t.samples,
    clock = t.clock }
end

local function fmt(x, f) return x and (f or "%.1f"):format(x) or "-" end

-- torch's faster backend on a per-kernel row (or any {eager = stats, tcompile = stats}): its median µs and its name
-- ("eager" | "tcompile"), or nil when neither was timed.
function M.torch_best(row)
  local b, who
  for _, name in ipairs { "eager", "tcompile" } do
    local s = row[name]
    if s and s.median_us and (not b or s.median_us < b) then b, who = s.median_us, name end
  end
  return b, who
end

-- The summed durations (µs per call) and count of a kernel list ({{name, us, count}}: bench.py --kernels, CUPTI),
-- or nil when there is none.
function M.kernels_us(list)
  if not list or #list == 0 then return nil end
  local us, n = 0, 0
  for _, k in ipairs(list) do us, n = us + k.us, n + (k.count or 1) end
  return us, n
end

-- The kind of work a kernel does, from emmy's kernel kind or a torch kernel's name (cuBLAS, flash/cuDNN attention,
-- Triton and ATen kernels): "matmul", "attention", "copy" or "norm, elementwise".
M.KINDS = { "matmul", "attention", "norm, elementwise", "copy" }
function M.kernel_kind(name, kind)
  if kind then
    return kind == "contraction" and "matmul" or kind == "attention" and "attention" or "norm, elementwise"
  end
  local n = name:lower()
  -- a Triton kernel is named after the ops it fuses (triton_per_fused__scaled_dot_product_cudnn_attention__to_copy…
  -- is the norm and RoPE around attention): its template matmuls are triton_tem_…mm…, the rest elementwise
  if n:find("^triton_") then return n:find("^triton_tem_") and "matmul" or "norm, elementwise" end
  if n:find("flash") or n:find("fmha") or n:find("attention") or n:find("sdpa") then return "attention" end
  if n:find("gemm") or n:find("nvjet") or n:find("xmma") or n:find("cutlass") or n:find("cublas") or n:find("matmul")
    or n:find("splitk") or n:find("wgmma") then return "matmul" end
  if n:find("^memcpy") or n:find("^memset") or n:find("copy_kernel") or n:find("catarray") then return "copy" end
  return "norm, elementwise"
end

-- Where each backend's whole-graph time goes: kernel durations (µs per call, launch gaps excluded) summed by kind,
-- for the whole rows that carry their kernels. Returns {backends = {names}, rows = {{kind, [backend] = {us, n}}}} or
-- nil when fewer than two backends have kernels.
-- emmy's matmul kernels (by the whole-graph breakdown) whose names carry fused epilogue ops, as "name: op op":
-- k_linear_silu_mul_b9e1e1 -> "k_linear_silu_mul_b9e1e1: silu mul".
function M.fused_matmuls(whole)
  local out = {}
  for _, w in ipairs(whole) do
    if w.backend == "emmy" then
      for _, k in ipairs(w.kernels or {}) do
        local ops = k.name:match("^k_linear_(.-)_%x+$")
        if ops and M.kernel_kind(k.name, k.kind) == "matmul" then out[#out + 1] = k.name .. ": " .. ops:gsub("_", " ") end
      end
    end
  end
  table.sort(out)
  return out
end

-- Each backend's matmul kernels in the whole graph, a line a backend: "tcompile's matmuls (µs a call): nvjet_… 5.3,
-- …" (longest first; names past 48 characters cut), so that the by-kind row's parts can be set against emmy's.
function M.matmul_lines(whole)
  local out = {}
  for _, w in ipairs(whole) do
    local parts = {}
    for _, k in ipairs(w.kernels or {}) do
      if M.kernel_kind(k.name, k.kind) == "matmul" then
        local name = #k.name > 48 and k.name:sub(1, 45) .. "..." or k.name
        parts[#parts + 1] = ("%s %.1f%s"):format(name, k.us, (k.count or 1) > 1 and (" (x%g)"):format(k.count) or "")
      end
    end
    if #parts > 0 then out[#out + 1] = ("%s's matmuls (µs a call): %s"):format(w.backend, table.concat(parts, ", ")) end
  end
  return out
end

function M.by_kind(whole)
  local names, rows, at = {}, {}, {}
  for _, k in ipairs(M.KINDS) do
    at[k] = { kind = k }
    rows[#rows + 1] = at[k]
  end
  for _, w in ipairs(whole) do
    if w.kernels and #w.kernels > 0 then
      names[#names + 1] = w.backend
      for _, r in ipairs(rows) do r[w.backend] = { us = 0, n = 0 } end
      for _, k in ipairs(w.kernels) do
        local c = at[M.kernel_kind(k.name, k.kind)][w.backend]
        c.us, c.n = c.us + k.us, c.n + (k.count or 1)
      end
    end
  end
  if #names < 2 then return nil end
  return { backends = names, rows = rows }
end

-- emmy's kernels in the program (M.in_program's positions), as torch's are listed: {{name, us (exposed µs a call),
-- busy_us (end - start), count, kind}}, longest first.
function M.program_kernels(ip, plans)
  local ks, at = {}, {}
  for i, pos in ipairs(ip.positions) do
    local e = at[pos.name]
    if not e then
      e = { name = pos.name, us = 0, busy_us = 0, count = 0, kind = plans[i].kernel.kind }
      at[pos.name] = e
      ks[#ks + 1] = e
    end
    e.us, e.busy_us, e.count = e.us + pos.exposed_us, e.busy_us + pos.busy_us, e.count + 1
  end
  table.sort(ks, function(x, y) return x.us > y.us end)
  return ks
end

-- A time known only by its median (a whole row's statistics: p20 = p80 = median).
local function one_time(us) return { median_us = us, p20_us = us, p80_us = us } end

-- The whole bench of a compiled model or layer on the GPU. a = {cu, g (the graph), graph_after (the graph the
-- kernels were formed on), plans, picks (name -> built variant, each checked), accuracy (name -> "ok"|"wrong"|…),
-- ins, vals, bind, at (text: "seq_len=512 (symbolic hint)" | "static"), backends (set), model (optional: {model =
-- emmy.frontend's model, mode = "layer"|"whole", layer = N}: also the transformers module's row)}. Returns the result table (docs/formats.md, "Bench files").
function M.run(a)
  local cu, plans, picks, bind = a.cu, a.plans, a.picks, a.bind
  local be = a.backends or { eager = true, tcompile = true, emmy = true }
  local info = cu:info()
  local res = { format = "emmy.bench", version = M.FORMAT_VERSION, device = info.name, at = a.at,
    regime = ("deploy: CUDA-graph replay, warm-up, median of %d (layer: %d) with p20/p80, L2 warm, same inputs for every backend")
      :format(M.REGIME.reps, M.LAYER_REPS), whole = {}, kernels = {}, notes = {} }
  local function note(s) res.notes[#res.notes + 1] = s end
  -- (each step with the seconds since the bench began: where a long bench's time goes)
  local t0 = sys.clock()
  local function progress(s) io.stderr:write(("  bench: %s (%.0f s)\n"):format(s, sys.clock() - t0)) end
  -- the whole graph
  local bufs = {}
  for name, t in pairs(a.ins) do bufs[name] = assert(cu:upload(t)) end
  local whole, t_whole = {}, nil
  local cold = os.getenv("EMMY_INPROG_COLD") == "1"
  if be.eager or be.tcompile then
    progress("the whole graph in torch (op-by-op replay)")
    local t = M.torch(a.g, function(n) return a.ins[n] end, bind, { backends = be, kernels = 5, cold = cold and 20 or nil })
    t_whole = t
    if t.why then note("torch on the whole graph: " .. t.why) end
    if be.eager then whole[#whole + 1] = { backend = "eager", t = t.eager, kernels = t.eager and t.eager.kernels } end
    if be.tcompile then whole[#whole + 1] = { backend = "tcompile", t = t.tcompile, kernels = t.tcompile and t.tcompile.kernels } end
  end
  if a.model and (be.eager or be.tcompile) then
    progress("the transformers module" .. (be.tcompile and " (eager and torch.compile)" or ""))
    local t, why = M.transformers(a.model.model, a.model.mode, a.model.layer, a.g, a.ins, be.tcompile)
    whole[#whole + 1] = { backend = "transformers (eager module)", t = t }
    if why then note("transformers module: " .. why) end
    if be.tcompile and t then
      local c = t.compile
      t.compile = nil
      whole[#whole + 1] = { backend = "transformers (torch.compile)", t = c and c.median_us and c or nil }
      if not (c and c.median_us) then
        note("transformers module under torch.compile: " .. tostring(c and c.error or "no result"))
      end
    end
  end
  -- EMMY_INPROG_COLD=1 (an experiment): the program's kernels also with the L2 flushed before every call, emmy's (CUPTI,
  -- the replays) and torch.compile's (bench.py --cold), two more columns of the by-kind table: is a matmul's time in
  -- the program its weights' HBM latency for torch.compile's kernels too, or do its weights stay in L2 across calls?
  if cold and t_whole and t_whole.tcompile and t_whole.tcompile.cold_kernels then
    local c = t_whole.tcompile
    whole[#whole + 1] = { backend = "tcompile, L2 flushed", t = one_time(c.cold_us), kernels = c.cold_kernels }
  end
  local inprog
  if be.emmy then
    progress("emmy's whole graph")
    if os.getenv("EMMY_REUSE") ~= "0" then
      local got, want = gpu.plan_reuse(cu, bufs, plans, bind, a.g)
      progress(("emmy's intermediate values in %.1f MB of buffers (one a value: %.1f MB)"):format(got / 1e6, want / 1e6))
    end
    local t, err = M.with_clock(cu, function() return M.graph_time(cu, plans, picks, bufs, bind) end)
    if not t then note("emmy whole graph: " .. tostring(err)) end
    local ip, ierr = M.in_program(cu, plans, picks, bufs, bind)
    if ip then inprog = ip else note("in-program times: " .. tostring(ierr)) end
    whole[#whole + 1] = { backend = "emmy", t = t, kernels = ip and M.program_kernels(ip, plans) }
    if cold then
      local ipc = in_program_of(cu, plans, picks, bufs, bind, 20, 2 * math.max(cu:info().l2 or 0, 32 * 1024 * 1024))
      if ipc then
        whole[#whole + 1] = { backend = "emmy, L2 flushed", t = one_time(ipc.span_us), kernels = M.program_kernels(ipc, plans) }
      end
    end
  end
  local eager_us
  for _, w in ipairs(whole) do if w.backend == "eager" and w.t then eager_us = w.t.median_us end end
  for _, w in ipairs(whole) do
    res.whole[#res.whole + 1] = { backend = w.backend, stats = stats(w.t), kernels = w.kernels,
      speedup_vs_eager = eager_us and w.t and eager_us / w.t.median_us or nil }
  end
  res.by_kind = M.by_kind(res.whole)
  if inprog then res.in_program = { replays = inprog.replays, span_us = inprog.span_us, dropped = inprog.dropped } end
  -- each kernel: its reproducer alone in the three backends, and its time in the program
  local seen, order = {}, {}
  for i, p in ipairs(plans) do
    local row = seen[p.kernel.name]
    if not row then
      local layer_op, coverage = kernels.layer_op(a.graph_after, p.kernel)
      row = { name = p.kernel.name, kind = p.kernel.kind, hash = p.kernel.hash, knobs = p.choice and p.choice.string,
        layer_op = layer_op, coverage = coverage, accuracy = a.accuracy and a.accuracy[p.kernel.name] or "unchecked",
        instances = 0, in_program_us = inprog and 0 or nil, busy_us = inprog and 0 or nil, plan = p }
      seen[p.kernel.name] = row
      order[#order + 1] = row
    end
    row.instances = row.instances + 1
    if inprog then
      row.in_program_us = row.in_program_us + inprog.positions[i].in_program_us
      row.busy_us = row.busy_us + inprog.positions[i].busy_us
    end
  end
  local vals = a.vals
  for n, row in ipairs(order) do
    local p = row.plan
    progress(("kernel %d/%d %s"):format(n, #order, row.name))
    if be.emmy then
      local e = picks[row.name]
      local kb = gpu.upload_inputs(cu, p.kernel.repro, vals, a.ins)
      local t, err = gpu.launch(cu, p, e, kb, bind)
      if t then t, err = cu:sync() end
      if t then
        t, err = M.with_clock(cu, function()
          return cu:time(function() return gpu.launch(cu, p, e, kb, bind) end, M.REGIME)
        end)
      end
      row.emmy = stats(t)
      if not t then row.error = tostring(err) end
    end
  end
  -- torch on every kernel's reproducer, in one Python process
  if be.eager or be.tcompile then
    progress(("torch on the %d reproducers"):format(#order))
    local jobs = {}
    for i, row in ipairs(order) do
      jobs[i] = { graph = row.plan.kernel.repro, value_of = function(name) return vals[name] or a.ins[name] end }
    end
    for i, t in ipairs(M.torch_many(jobs, bind, { backends = be, kernels = 5 })) do
      order[i].eager, order[i].tcompile = t.eager, t.tcompile
      if t.why then order[i].torch_note = t.why end
    end
  end
  -- sorted by emmy µs (in the program when measured, else alone), with the cumulative share
  local function key(r) return r.in_program_us or (r.emmy and r.emmy.median_us * r.instances) or -1 end
  table.sort(order, function(x, y) return key(x) > key(y) end)
  local total = 0
  for _, r in ipairs(order) do total = total + math.max(0, key(r)) end
  local cum = 0
  for _, r in ipairs(order) do
    cum = cum + math.max(0, key(r))
    r.share = total > 0 and key(r) / total or nil
    r.cum_share = total > 0 and cum / total or nil
    r.plan = nil
    res.kernels[#res.kernels + 1] = r
  end
  return res
end

-- Runs built variant e of plan p alone on the reference's values (vals, else the inputs ins) and checks its
-- outputs. Returns the kernel's buffers, or nil and "launch_fail: …" / "wrong: …".
function M.check_alone(cu, p, e, ins, vals, bind)
  local kb = gpu.upload_inputs(cu, p.kernel.repro, vals, ins)
  local ok, err = gpu.launch(cu, p, e, kb, bind)
  if ok then ok, err = cu:sync() end
  if not ok then return nil, "launch_fail: " .. tostring(err) end
  local _, why = gpu.check_outputs(p.kernel.repro, kb, vals, bind)
  if why then return nil, why:match("^wrong") and why or ("wrong: " .. why) end
  return kb
end

-- A bench outside `emmy run` (emmy tune --bench): opens the GPU, computes the CPU reference of graph g at its
-- hints, builds each kernel's chosen variant (plans[i].choice), checks each alone against the reference, then
-- benches, prints and (with a.dump_dir) writes the bench files. a = {g, graph_after, plans, backends, seed,
-- dump_dir, model (as M.run's)}. Returns the result, or nil, msg.
function M.session(a)
  local inputs, ref = require "emmy.inputs", require "emmy.ref"
  local cu, err = require("emmy.cuda").open()
  if not cu then return nil, "bench needs a GPU: " .. tostring(err) end
  local g = a.g
  local bind, berr = g:bind({})
  if not bind then return nil, berr end
  io.stderr:write("  bench: the CPU reference\n")
  local ins, ierr = inputs.for_graph(g, bind, a.seed or 0)
  if not ins then return nil, ierr end
  local vals, rerr = ref.run(g, ins, { bind = bind, keep_all = true })
  if not vals then return nil, rerr end
  local order = kernels.distinct(a.plans)
  local list = {}
  for i, p in ipairs(order) do list[i] = { plan = p, knobs = p.choice.knobs } end
  local ok, built = pcall(gpu.build, cu, list)
  if not ok then return nil, tostring(built) end
  local picks, accuracy, extra = {}, {}, { sources = {}, repros = {}, verdicts = {} }
  for i, p in ipairs(order) do
    local e, name = built[i], p.kernel.name
    extra.sources[name], extra.repros[name], extra.verdicts[name] = e.src, graphjson.encode(p.kernel.repro), p.eval and p.eval.verdicts
    if e.error then accuracy[name] = e.error
    else
      local kb, why = M.check_alone(cu, p, e, ins, vals, bind)
      accuracy[name] = kb and "ok" or why
      if kb then picks[name] = e end
    end
  end
  local be = a.backends or { eager = true, tcompile = true, emmy = true }
  for _, p in ipairs(order) do
    if be.emmy and not picks[p.kernel.name] then
      be = { eager = be.eager, tcompile = be.tcompile }
      print(("bench: emmy not benched — %s: %s"):format(p.kernel.name, accuracy[p.kernel.name]))
    end
  end
  local res = M.run { cu = cu, g = g, graph_after = a.graph_after, plans = a.plans, picks = picks, accuracy = accuracy,
    ins = ins, vals = vals, bind = bind, at = M.at(g, bind), backends = be, model = a.model }
  M.print(res)
  if a.dump_dir then
    M.write(a.dump_dir, res, extra)
    print(("bench files: %s/60_bench_compare.json, 62_kernel_bench.json, kernels.html"):format(a.dump_dir))
  end
  return res
end

-- Parses an --ab spec "K=V,K2=V2" into {K = v}; nil, msg when malformed.
function M.parse_ab(spec)
  local pins, n = {}, 0
  for item in spec:gmatch("[^,]+") do
    local key, v = item:match("^%s*([%u][%u%d_]*)=(%-?%d+)%s*$")
    if not key then return nil, ("--ab '%s': '%s' is not KNOB=N"):format(spec, item) end
    local knobs = require "emmy.knobs"
    if not knobs.info(key) then return nil, ("--ab '%s': %s"):format(spec, select(2, knobs.check(key, 0))) end
    pins[key], n = tonumber(v), n + 1
  end
  if n == 0 then return nil, ("--ab '%s': no KNOB=N"):format(spec) end
  return pins
end

-- A/B: each distinct kernel's default pick (plans[i].choice, built as picks[name]) and, per spec, the variant the
-- pins select, lowered fresh, checked against the reference and timed alone in the deploy regime. A pin a gate
-- refuses, a knob the kernel does not have, or a realized variant whose knobs differ from the pins is a refused
-- row (never benched). Returns {{kernel, label, knobs, status, stats, ratio (µs / default µs), diff = {"K=V"}}}.
function M.ab(a)
  local rules = require "emmy.rules"
  local cu, bind = a.cu, a.bind
  local out = {}
  local function time_one(p, e)
    local kb, why = M.check_alone(cu, p, e, a.ins, a.vals, bind)
    if not kb then return nil, why end
    return M.with_clock(cu, function() return cu:time(function() return gpu.launch(cu, p, e, kb, bind) end, M.REGIME) end)
  end
  for _, p in ipairs(a.plans) do
    local name = p.kernel.name
    local base = p.choice
    local bt, berr
    if a.picks[name] then bt, berr = time_one(p, a.picks[name]) else berr = "the default did not build" end
    out[#out + 1] = { kernel = name, label = "default", knobs = base.string, status = bt and "ok" or berr, stats = stats(bt), diff = {} }
    for _, spec in ipairs(a.specs) do
      local pins = assert(M.parse_ab(spec))
      local row = { kernel = name, label = "ab " .. spec, diff = {} }
      out[#out + 1] = row
      local missing = {}
      for key in pairs(pins) do if p.eval.declared[key] == nil then missing[#missing + 1] = key end end
      table.sort(missing)
      if #missing > 0 then
        row.status = ("refused: %s %s not a knob of this kernel"):format(table.concat(missing, ", "), #missing > 1 and "are" or "is")
        goto next_spec
      end
      do
        local okp, cands = pcall(rules.apply_pins, name, p.eval, (function() local t = {} for k, v in pairs(pins) do t[k] = v end return t end)())
        if not okp then row.status = "refused: " .. tostring(cands) goto next_spec end
        local c = cands[1]
        for key, v in pairs(pins) do
          if c.knobs[key] ~= v then
            row.status = ("refused: the realized variant has %s=%s, not the pinned %d"):format(key, tostring(c.knobs[key]), v)
            goto next_spec
          end
        end
        row.knobs = c.string
        for key, v in pairs(c.knobs) do if base.knobs[key] ~= v then row.diff[#row.diff + 1] = key .. "=" .. v end end
        table.sort(row.diff)
        local okb, built = pcall(gpu.build, cu, { { plan = p, knobs = c.knobs } })
        local e = okb and built[1] or { error = tostring(built) }
        if e.error then row.status = e.error goto next_spec end
        local t, err = time_one(p, e)
        row.status, row.stats = t and "ok" or err, stats(t)
        if t and bt then row.ratio = t.median_us / bt.median_us end
      end
      ::next_spec::
    end
  end
  return out
end

function M.print_ab(rows)
  local tr = {}
  for _, r in ipairs(rows) do
    local s = r.stats
    tr[#tr + 1] = { r.kernel, r.label, fmt(s and s.median_us), s and ("%.1f-%.1f"):format(s.p20_us, s.p80_us) or "-",
      r.ratio and ("%.2fx"):format(r.ratio) or (r.label == "default" and "1.00x" or "-"),
      #r.diff > 0 and ("*" .. table.concat(r.diff, "* *") .. "*") or (r.label == "default" and (r.knobs or "") or ""),
      r.status ~= "ok" and r.status or "" }
  end
  print("\nA/B: each pinned variant lowered fresh, checked, timed alone beside the default (µs / default: below 1 is faster; *K=V*: knobs that differ)")
  tbl.print { header = { "kernel", "variant", "µs", "p20-p80", "vs default", "knobs", "" }, rows = tr, align = "llrrrll" }
end

-- The two tables, aligned text.
function M.print(res)
  print(("\nbenched at %s on %s; %s"):format(res.at, res.device, res.regime))
  local rows = {}
  for _, w in ipairs(res.whole) do
    local s = w.stats
    local drift = s and s.clock and s.clock.drift and ("  clock drift %.0f -> %.0f MHz"):format(s.clock.before_mhz, s.clock.after_mhz) or ""
    rows[#rows + 1] = { w.backend, fmt(s and s.median_us), s and ("%.1f-%.1f"):format(s.p20_us, s.p80_us) or "-",
      w.speedup_vs_eager and ("%.2fx"):format(w.speedup_vs_eager) or "-", drift }
  end
  print("\nwhole graph (speedup vs eager: above 1 is faster than eager)")
  tbl.print { header = { "backend", "µs", "p20-p80", "vs eager", "" }, rows = rows, align = "lrrrl" }
  if res.by_kind then
    local h, al, kr = { "kind" }, "l", {}
    for _, b in ipairs(res.by_kind.backends) do h[#h + 1], h[#h + 2], al = b .. " µs", "kernels", al .. "rr" end
    local tot = {}
    for _, r in ipairs(res.by_kind.rows) do
      local row = { r.kind }
      for _, b in ipairs(res.by_kind.backends) do
        row[#row + 1], row[#row + 2] = fmt(r[b].us), ("%g"):format(r[b].n)
        tot[b] = (tot[b] or 0) + r[b].us
      end
      kr[#kr + 1] = row
    end
    local row = { "sum" }
    for _, b in ipairs(res.by_kind.backends) do row[#row + 1], row[#row + 2] = fmt(tot[b]), "" end
    kr[#kr + 1] = row
    print("\nwhere the whole graph's time goes, by kind (kernel durations per call, µs; launch gaps not counted)")
    tbl.print { header = h, rows = kr, align = al }
    local fused = M.fused_matmuls(res.whole)
    if #fused > 0 then
      print(("emmy's matmul row carries the epilogues fused into its kernels (%s), which torch's rows count under "
        .. "norm, elementwise"):format(table.concat(fused, ", ")))
    end
    for _, line in ipairs(M.matmul_lines(res.whole)) do print(line) end
  end
  if res.in_program then
    local emmy
    for _, w in ipairs(res.whole) do if w.backend == "emmy" and w.stats then emmy = w.stats.median_us end end
    local sum = 0
    for _, k in ipairs(res.kernels) do sum = sum + (k.in_program_us or 0) end
    print(("in-program kernel times (CUPTI, %d replays): sum %.1f µs%s"):format(res.in_program.replays, sum,
      emmy and (" = %.2f of the whole-graph time"):format(sum / emmy) or ""))
  end
  local kr = {}
  for _, k in ipairs(res.kernels) do
    local e = k.emmy and k.emmy.median_us
    local best_torch = M.torch_best(k)
    local flag = ""
    if k.emmy and k.emmy.clock and k.emmy.clock.drift then flag = " clock drift" end
    if k.accuracy ~= "ok" and k.accuracy ~= "ok (alone)" then flag = flag .. " " .. k.accuracy end
    kr[#kr + 1] = { k.name, k.layer_op, k.coverage, fmt(e), k.emmy and ("%.1f-%.1f"):format(k.emmy.p20_us, k.emmy.p80_us) or "-",
      fmt(k.in_program_us), fmt(k.eager and k.eager.median_us), fmt(k.tcompile and k.tcompile.median_us),
      (e and best_torch) and ("%.2fx"):format(best_torch / e) or "-",
      k.cum_share and ("%.0f%%"):format(100 * k.cum_share) or "-", (k.instances > 1 and ("x%d"):format(k.instances) or "") .. flag }
  end
  print("\nper kernel, by emmy µs in the program (emmy µs: the reproducer alone; vs torch: torch's best / emmy, above 1 is emmy faster)")
  tbl.print { header = { "kernel", "layer op", "coverage", "emmy µs", "p20-p80", "in program", "eager µs", "tcompile µs",
    "vs torch", "cum", "" }, rows = kr, align = "lllrrrrrrrl" }
  for _, n in ipairs(res.notes) do print("note: " .. n) end
  for _, k in ipairs(res.kernels) do
    local d = k.tcompile and k.tcompile.max_abs_vs_eager
    if d and d > M.COMPILE_TOL then
      print(("note: torch.compile on %s differs from eager by %.3g (max abs): its time is of another result"):format(k.name, d))
    end
    if k.torch_note then print(("note: torch on %s: %s"):format(k.name, k.torch_note)) end
    if k.error then print(("note: emmy on %s: %s"):format(k.name, k.error)) end
  end
end

-- Writes 60_bench_compare.json (the whole-graph rows), 62_kernel_bench.json (every per-kernel row) and
-- kernels.html into dump folder dir; extra = {sources = name -> CUDA source, repros = name -> reproducer JSON,
-- verdicts = name -> gate verdicts} (emmy.benchhtml).
function M.write(dir, res, extra)
  local write = require("emmy.dump").write_file
  assert(sys.mkdir_p(dir))
  local common = { format = res.format, version = res.version, device = res.device, at = res.at, regime = res.regime,
    notes = res.notes }
  local w = {}
  for k, v in pairs(common) do w[k] = v end
  w.whole, w.in_program, w.by_kind = res.whole, res.in_program, res.by_kind
  write(dir .. "/60_bench_compare.json", cjson.encode(w))
  local k = {}
  for key, v in pairs(common) do k[key] = v end
  k.kernels = res.kernels
  write(dir .. "/62_kernel_bench.json", cjson.encode(k))
  write(dir .. "/kernels.html", require("emmy.benchhtml").page(res, extra or {}))
end

return M
