-- scripts/worker/main.lua — the bench worker's child side (emmy.worker starts it): reads one JSON request per
-- line on stdin, answers one JSON line on stdout. It owns the CUDA context (opened on the first request that
-- needs it) and never outlives a fault: the parent kills and restarts it.
--   {op = "ping"}                                   -> {status = "ok", pid}
--   {op = "info"}                                   -> {status = "ok", gpu = {...}} | {status = "no_gpu", error}
--   {op = "bench", repro = FILE.torch.json, knobs = {K = V}, bind = {name = N}, reps, warmup, warmup_ms, flush,
--    seed, graph}
--     -> {status = "ok" | "compile_fail" | "load_fail" | "launch_fail" | "wrong" | "no_gpu", error,
--         median_us, min_us, p20_us, p80_us, samples, regs, spills, smem, compile_ms, cache_hit, context_lost,
--         phase_ms = {plan, build, ref, run, time} (where the request's time went)}
--     flush = true, "read" or "memset": the L2 is flushed before every sample (twice its size read, or written by a
--     memset; true: $EMMY_FLUSH's, memset unless "read"), one run per sample.
--     retried: an ok row timed on a second capture, the first one's error (its capture was invalidated).
--     context_lost = true: the variant faulted the CUDA context; the worker exits after answering (the parent
--     starts a fresh one for the next request).
-- With EMMY_WORKER_TEST=1 (tests only): {op = "exit"} exits 3, {op = "kill"} dies of SIGKILL, {op = "hang"} spins.
io.stdout:setvbuf("line")
local cjson = require "cjson"
local sys = require "emmy.sys"

local cu, cu_err
local refs, plan_cache = {}, {}
local function device()
  if cu or cu_err then return cu, cu_err end
  local ok, c, err = pcall(function() return require("emmy.cuda").open(tonumber(os.getenv("EMMY_WORKER_DEVICE")) or 0) end)
  if ok and c then cu = c else cu_err = tostring(ok and err or c) end
  return cu, cu_err
end

local function bench(req)
  local graphjson = require "emmy.graphjson"
  local kernels, gpu = require "emmy.kernels", require "emmy.gpu"
  local inputs, ref = require "emmy.inputs", require "emmy.ref"
  local c, err = device()
  if not c then return { status = "no_gpu", error = err } end
  local info = c:info()
  -- where the request's time goes (ms per phase, in the answer): plan, build (compile or cache, load), ref,
  -- run (upload, launch, check), time
  local ph, tp = {}, sys.clock()
  local function lap(name)
    local now = sys.clock()
    ph[name] = (now - tp) * 1e3
    tp = now
  end
  -- the reproducer's plan is the same for every variant: formed once per file (a tune measures a kernel's
  -- variants in a row; planning a contraction evaluates thousands of candidates)
  local pc = plan_cache[req.repro]
  if not pc then
    local g = assert(graphjson.read(req.repro))
    -- the reproducer's main kernel, measured on the reference's values of its own inputs
    local p = kernels.repro_plan(g, gpu.device(info))
    pc = { g = g, p = p }
    plan_cache = { [req.repro] = pc }
  end
  local g, p = pc.g, pc.p
  local bind = assert(g:bind(req.bind or {}))
  lap("plan")
  local okb, built = pcall(gpu.build, c, { { plan = p, knobs = gpu.knobs_over(p, req.knobs) } })
  if not okb then return { status = "emit_fail", error = tostring(built) } end
  local e = built[1]
  local r = e.compile or {}
  local row = { kernel = p.kernel.name, regs = r.regs, spills = r.spill_stores, smem = (r.smem or 0) + (e.launch and e.launch.smem or 0),
    compile_ms = r.ms, cache_hit = r.cache_hit, key = r.key, phase_ms = ph }
  lap("build")
  if e.error then
    row.status, row.error = e.error:match("^(%w+_fail)") or "compile_fail", e.error
    return row
  end
  -- the reference of a reproducer is the same for every variant: computed once per (file, binding, seed)
  local bk = {}
  for name, v in pairs(bind) do bk[#bk + 1] = name .. "=" .. tostring(v) end
  table.sort(bk)
  local key = ("%s|%s|%s"):format(req.repro, table.concat(bk, ","), tostring(req.seed or 0))
  local cached = refs[key]
  if not cached then
    local ins0 = assert(inputs.for_graph(g, bind, req.seed or 0))
    cached = { ins = ins0, vals = assert(ref.run(g, ins0, { bind = bind, keep_all = true })) }
    refs = { [key] = cached } -- one reproducer at a time: a tune measures a kernel's variants in a row
  end
  local ins, vals = cached.ins, cached.vals
  lap("ref")
  local kg = p.kernel.repro
  local bufs = gpu.upload_inputs(c, kg, vals, ins)
  local ok, lerr = gpu.launch(c, p, e, bufs, bind)
  if ok then ok, lerr = c:sync() end
  if not ok then row.status, row.error = "launch_fail", tostring(lerr) return row end
  local right, why = gpu.check_outputs(kg, bufs, vals, bind)
  if not right then
    row.status, row.error = why:match("^wrong") and "wrong" or "launch_fail", why
    return row
  end
  lap("run")
  local t, terr
  t, terr, row.retried = gpu.time_retrying(c, function() return gpu.launch(c, p, e, bufs, bind) end,
    { graph = req.graph ~= false, reps = req.reps or 50, warmup = req.warmup or 5, warmup_ms = req.warmup_ms or 0,
      flush_bytes = req.flush and 2 * math.max(info.l2 or 0, 32 * 1024 * 1024) or 0,
      flush = type(req.flush) == "string" and req.flush or nil })
  lap("time")
  if not t then row.status, row.error = "launch_fail", tostring(terr) return row end
  row.status, row.median_us, row.min_us, row.p20_us, row.p80_us, row.samples = "ok", t.median_us, t.min_us, t.p20_us,
    t.p80_us, t.samples or req.reps or 50
  return row
end

local testing = os.getenv("EMMY_WORKER_TEST") == "1"
for line in io.lines() do
  local ok, req = pcall(cjson.decode, line)
  local resp
  if not ok or type(req) ~= "table" then
    resp = { status = "bad_request", error = "not a JSON object" }
  elseif req.op == "ping" then
    resp = { status = "ok", pid = sys.getpid() }
  elseif req.op == "info" then
    local c, err = device()
    resp = c and { status = "ok", gpu = c:info() } or { status = "no_gpu", error = err }
  elseif req.op == "bench" then
    local okb, r = pcall(bench, req)
    resp = okb and r or { status = "launch_fail", error = tostring(r) }
    if cu and cu:lost() then resp.context_lost = true end
  elseif testing and req.op == "exit" then
    os.exit(3)
  elseif testing and req.op == "kill" then
    os.execute("kill -KILL " .. sys.getpid())
  elseif testing and req.op == "hang" then
    while true do end
  else
    resp = { status = "bad_request", error = ("unknown op %s"):format(tostring(req.op)) }
  end
  io.stdout:write(cjson.encode(resp), "\n")
  if resp.context_lost then os.exit(0) end
end
