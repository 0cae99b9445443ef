-- emmy.tuner — the tune's library half (emmy tune is the command that calls it): the bench workers, one search a
-- distinct kernel (candidates from rules/tile/, ordered by the prior, emmy.search with patience and a time share,
-- each candidate measured in a worker or served from the tune DB), the second look at the siblings' picks, the
-- online half's refit, the structural forks priced, and the report. A session T carries the run's state: its
-- options, device, workers, tune DB context, and the rows, picks and time spent that the report reads.
local cli = require "emmy.cli"
local gpu = require "emmy.gpu"
local graphjson = require "emmy.graphjson"
local nv = require "emmy.nvrtc"
local kernels = require "emmy.kernels"
local online = require "emmy.online"
local prior = require "emmy.prior"
local search = require "emmy.search"
local sys = require "emmy.sys"
local tbl = require "emmy.tbl"
local tunedb = require "emmy.tunedb"
local worker = require "emmy.worker"

local M = {}

-- How each regime times a variant (the worker's bench request): deploy (the default) — CUDA-graph replays, every
-- sample after an L2 flush (the operands from HBM); warm — the same replays without the flush, as `emmy run --bench`
-- times a layer (and the warm floor checks deploy's picks); rank — plain event timing, cheaper. Rows are keyed by
-- regime in the tune DB and never mixed.
M.REGIMES = {
  deploy = { graph = true, reps = 50, warmup = 5, warmup_ms = 10, flush = "read" },
  warm = { graph = true, reps = 50, warmup = 5, warmup_ms = 10, flush = false },
  rank = { graph = false, reps = 10, warmup = 2 },
}

-- The deploy regime's L2 flush: a read of twice the L2 (since the forty-ninth session: clean lines, so a sample pays
-- for its operands from HBM and nothing else), or with EMMY_FLUSH=memset the memset before it, whose dirty lines the
-- timed run writes back as it evicts them — measured (H100, docs/performance.md "Forty-ninth session") to rank
-- Qwen3-4B's down projection's 8-stage ring first (50.3 against the default's 52.4 µs) where L2-warm and in the
-- layer it is 54 against 46; the read flush ranks them as the layer does (53.8 against 43.5).
function M.deploy_flush()
  local e = os.getenv("EMMY_FLUSH")
  if e and e ~= "" and e ~= "read" and e ~= "memset" then error(("EMMY_FLUSH=%s: memset or read"):format(e), 0) end
  return e == "memset" and "memset" or "read"
end

-- The regime's name in the tune DB's contexts: the deploy regime by a read flush is "deploy-read" (its rows are not
-- those of the memset's "deploy").
function M.db_regime(regime) return regime == "deploy" and M.deploy_flush() == "read" and "deploy-read" or regime end

-- The tier a variant's knobs name (the tune DB's variant column).
function M.tier_of(k)
  if k.WGMMA == 1 then return "wgmma" end
  if k.FLASH == 1 then return "flash" end
  if k.MMA == 1 then return "warp" end
  if k.MMA == 0 then return "scalar" end
  return "simt"
end

function M.close_workers(workers) for _, x in ipairs(workers) do x.w:close() end end

-- One bench worker per GPU 0..n-1, all of one GPU model: {{w, device, gpu}, ...} | nil, msg (the workers started
-- are closed). Without a GPU there is nothing to tune, and the message says so.
function M.start_workers(n)
  local workers = {}
  local function fail(msg)
    M.close_workers(workers)
    return nil, msg
  end
  for d = 0, n - 1 do
    local w, werr = worker.start { device = d }
    if not w then return fail(werr) end
    workers[#workers + 1] = { w = w, device = d }
    local info = w:call({ op = "info" }, 60000)
    if info.status ~= "ok" then
      if d == 0 then return fail(("emmy tune needs a GPU: %s"):format(tostring(info.error))) end
      return fail(("tune: --gpus %d: device %d: %s"):format(n, d, tostring(info.error)))
    end
    workers[#workers].gpu = info.gpu
    if d > 0 and info.gpu.name ~= workers[1].gpu.name then
      return fail(("tune: --gpus %d: device %d is a %s and device 0 a %s (one GPU model per tune DB context)"):format(n, d,
        info.gpu.name, workers[1].gpu.name))
    end
  end
  return workers
end

-- The distinct kernels of the structural forks (each tuned once): plans, in the forks' order.
function M.distinct_plans(forks)
  local plans, by_hash = {}, {}
  for _, fk in ipairs(forks) do
    for j, p in ipairs(fk.plans) do
      if not by_hash[fk.hashes[j]] then
        by_hash[fk.hashes[j]] = p
        plans[#plans + 1] = p
      end
    end
  end
  return plans
end

-- A session: cfg = {opts (the command's), dev, gi (the GPU's info), workers, plans, db, ctx, run_id, dir (the
-- reproducers' folder)}. The online half of earlier tunes scores the candidates when it passed its calibration.
function M.session(cfg)
  local T = cfg
  T.model = online.load()
  T.stats = { benched = 0, served = 0, retried = 0, status = {} }
  T.rows, T.picks, T.state, T.last = {}, {}, {}, sys.clock()
  T.t_budget = sys.clock() -- --budget-s counts from here (after the forks are planned)
  -- where the wall time goes: the worker's phases (from its answers), the parent's compiles and waits
  T.spent = { worker = {}, compile_ahead = 0, bench_wait = 0, cache_hits = 0, compiled = 0, ahead = { n = 0, status = {} }, key_missed = 0 }
  T.req_base = {}
  for key, v in pairs(M.REGIMES[T.opts.regime] or M.REGIMES.deploy) do T.req_base[key] = v end
  if T.req_base.flush == "read" then T.req_base.flush = M.deploy_flush() end
  return T
end

local function score(T, f, c)
  return online.predict(T.model, f.kind or "contraction", c.knobs, prior.offline(f, c.knobs, T.dev), prior.features(f, c.knobs, T.dev))
end

-- One request on worker wk from inside a kernel's coroutine: yields until the answer is there.
local function bench_on(T, wk, req)
  wk.w:submit(req, T.opts.timeout_ms)
  while true do
    local r = wk.w:poll(#T.workers > 1 and 2 or 1000)
    if r then return r end
    coroutine.yield()
  end
end

-- Compiling ahead for kernel K (K = {hash, repro, compiled = {}, waiting = {}, batches = {}}): each batch the search
-- is about to measure (and with --precompile N the prior's N first candidates) starts on NVRTC's thread pool in the
-- background, into the cubin cache, where the worker's build of the same source finds it; each candidate goes to the
-- worker as soon as its own compile is done (await_compile), so the batch's measurements run beside its other
-- compiles. Variants already measured in this context are not compiled (from the reproducer's plan, as the worker
-- forms it: the same source text, so the same cache key).
local function compile_ahead(T, K, list)
  K.rp = K.rp or kernels.repro_plan(cli.check(graphjson.read(K.repro)), T.dev)
  local jobs, strings = {}, {}
  local A = T.spent.ahead
  for _, c in ipairs(list) do
    if not K.compiled[c.string] and not T.db:measured(T.ctx, T.db:variant(K.hash, c.string, M.tier_of(c.knobs))) then
      K.compiled[c.string] = true
      local job, why = gpu.job(K.rp, gpu.knobs_over(K.rp, c.knobs), T.gi) -- (a refused variant adds nothing)
      if job then
        jobs[#jobs + 1] = job
        strings[#jobs] = c.string
      else
        A.n, A.status.refused = A.n + 1, (A.status.refused or 0) + 1
        A.first_error = A.first_error or ("refused: " .. tostring(why):match("[^\n]*"))
      end
    end
  end
  if #jobs == 0 then return end
  local b, err = nv.start(jobs)
  if not b then
    A.first_error = A.first_error or ("nvrtc: " .. tostring(err))
    return
  end
  local bt = { b = b, strings = strings }
  K.batches[#K.batches + 1] = bt
  for _, s2 in ipairs(strings) do K.waiting[s2] = bt end
end

-- What a compile ahead gave (batch bt's job j, result r): its status tallied, its cubin key kept (a worker build that
-- misses the cache under another key is counted, so the time line says whether the two meet).
local function compiled_ahead(T, K, bt, j, r)
  local A = T.spent.ahead
  A.n, A.status[r.status] = A.n + 1, (A.status[r.status] or 0) + 1
  A.cpu_s = (A.cpu_s or 0) + (r.ms or 0) / 1e3
  if r.status ~= "ok" and r.status ~= "compile_fail" and not A.first_error then A.first_error = (r.log or r.status):match("[^\n]*") end
  K.ahead_key[bt.strings[j]] = r.key
  K.waiting[bt.strings[j]] = nil
end

-- Waits until candidate c's compile ahead (if one is under way) is done: the worker's build then loads its cubin.
-- With several workers the wait yields to the other kernels' coroutines.
local function await_compile(T, K, c)
  local bt = K.waiting[c.string]
  if not bt then return end
  local tw = sys.clock()
  while K.waiting[c.string] do
    local j, r = bt.b:next(#T.workers > 1 and 2 or 500)
    if j then
      compiled_ahead(T, K, bt, j, r)
    elseif j == false then
      break
    elseif #T.workers > 1 then
      coroutine.yield()
    end
  end
  K.waiting[c.string] = nil
  if bt.b:left() == 0 then bt.b:close() end
  T.spent.compile_ahead = T.spent.compile_ahead + sys.clock() - tw
end

-- Kernel K's compiles ahead that its search did not measure: those not started are cancelled, the running ones end
-- (and may be compiled ahead again: a cancelled one left nothing in the cache, a finished one is a cache hit).
local function close_compiles(K)
  for s2 in pairs(K.waiting) do K.compiled[s2] = nil end
  for _, bt in ipairs(K.batches) do bt.b:close() end
  K.batches, K.waiting = {}, {}
end

-- A worker's answer to a bench request, accounted in T.spent and recorded in the tune DB; returns the row.
local function record(T, K, vid, c, row, order, online_us)
  for key, v in pairs(type(row.phase_ms) == "table" and row.phase_ms or {}) do
    T.spent.worker[key] = (T.spent.worker[key] or 0) + v / 1e3
  end
  if row.cache_hit ~= nil then
    T.spent.compiled = T.spent.compiled + 1
    if row.cache_hit then T.spent.cache_hits = T.spent.cache_hits + 1 end
    local ahead = K.ahead_key and K.ahead_key[c.string]
    if not row.cache_hit and ahead and row.key and row.key ~= ahead then T.spent.key_missed = T.spent.key_missed + 1 end
  end
  local status = tunedb.STATUS[row.status] and row.status or "launch_fail"
  if status == "ok" and row.retried then T.stats.retried = T.stats.retried + 1 end
  T.db:record { run_id = T.run_id, context_id = T.ctx, variant_id = vid, status = status, error = row.error or row.retried,
    median_us = row.median_us, min_us = row.min_us, p20_us = row.p20_us, p80_us = row.p80_us,
    samples = row.samples, regs = row.regs, spills = row.spills, smem = row.smem, compile_ms = row.compile_ms,
    prior_offline = prior.offline(K.facts, c.knobs, T.dev), prior_online = online_us, search_order = order }
  row.status = status
  T.stats.benched = T.stats.benched + 1
  return row
end

-- One candidate of kernel K measured (or served from the DB) and recorded; order = its place in the kernel's search.
local function measure(T, K, c, order, online_us)
  local vid = T.db:variant(K.hash, c.string, M.tier_of(c.knobs))
  local row = T.db:measured(T.ctx, vid)
  if row then
    T.stats.served = T.stats.served + 1
  else
    local req = { op = "bench", repro = K.repro, knobs = c.knobs }
    for key, v in pairs(T.req_base) do req[key] = v end
    await_compile(T, K, c)
    local tw = sys.clock()
    local ans = bench_on(T, K.wk, req)
    T.spent.bench_wait = T.spent.bench_wait + sys.clock() - tw
    row = record(T, K, vid, c, ans, order, online_us)
  end
  T.stats.status[row.status] = (T.stats.status[row.status] or 0) + 1
  if row.status == "ok" and row.median_us and (not K.best_us or row.median_us < K.best_us) then K.best_us = row.median_us end
  if sys.clock() - T.last > 3 then
    io.stderr:write(("  kernel %d/%d %s: %d measured, best %s\n"):format(K.i, #T.plans, K.name, order,
      K.best_us and ("%.1f us"):format(K.best_us) or "-"))
    T.last = sys.clock()
  end
  return row
end

-- Kernel i's share of what is left of --budget-s (kernels not yet started, one per worker at a time): a deadline
-- or nil.
local function deadline_of(T, i)
  if T.opts.budget_s <= 0 then return nil end
  local left = math.max(0, T.t_budget + T.opts.budget_s - sys.clock())
  return sys.clock() + math.max(2, left * #T.workers / math.max(1, #T.plans - i + 1))
end

-- The time of a search's first row where it is candidate c and correct (the rules' default, measured first), or nil.
local function first_ok_us(rows, c)
  local r = rows[1]
  return r and r.candidate == c and r.row.status == "ok" and r.row.median_us or nil
end

-- Kernel i (plan p) searched on worker wk: its reproducer written, its facts in the DB, the search run; its row
-- of the report and its pick kept in T.rows[i], T.picks[i].
function M.tune_kernel(T, i, p, wk)
  local k = p.kernel
  local f = kernels.facts(k)
  local K = { i = i, name = k.name, facts = f, repro = T.dir .. "/" .. k.name .. ".torch.json", compiled = {}, ahead_key = {}, waiting = {}, batches = {}, wk = wk }
  cli.must(graphjson.write(k.repro, K.repro, { sync = false }))
  K.hash = k.repro:hash()
  -- the kernel facts (what rules/prior/features.lua reads), kept so that later refits can featurize its rows
  T.db:kernel { hash = K.hash, name = k.name, ops = k.kind, features = f, flops = f.flops }
  if T.opts.precompile > 0 then
    local ahead = {}
    for _, c in ipairs(p.candidates) do ahead[#ahead + 1] = { c = c, s = score(T, f, c) or 0 } end
    table.sort(ahead, function(a, b) return a.s < b.s end)
    local first = {}
    for j = 1, math.min(#ahead, T.opts.precompile) do first[j] = ahead[j].c end
    compile_ahead(T, K, first)
  end
  local deadline = deadline_of(T, i)
  local res = search.run { out_of_time = deadline and function() return sys.clock() > deadline end, candidates = p.candidates,
    patience = T.opts.patience, max_candidates = T.opts.max_candidates, seed = 1, default_first = true, batch = T.opts.search_batch,
    score = function(c) return score(T, f, c) end, before_batch = function(list) compile_ahead(T, K, list) end,
    measure = function(c, order, online_us) return measure(T, K, c, order, online_us) end }
  close_compiles(K)
  T.rows[i] = { k.name, tostring(#p.candidates), tostring(res.measured), res.stopped,
    res.best and ("%.1f"):format(res.best.median_us) or "-", res.best_candidate and res.best_candidate.string or "no correct variant" }
  T.picks[i] = { name = k.name, hash = K.hash, kind = k.kind, candidates = #p.candidates, measured = res.measured,
    stopped = res.stopped, best_us = res.best and res.best.median_us or nil,
    best_knobs = res.best_candidate and res.best_candidate.string or nil, device = wk.device,
    -- (the pick's row in the search, and the rules' default's time: it is measured first, the floor)
    best_at = res.best_at, default_us = first_ok_us(res.rows, p.candidates[1]) }
  io.stderr:write(("  kernel %d/%d %s: %d measured (%s), best %s%s, %.0f s into the tune\n"):format(i, #T.plans, k.name,
    res.measured, res.stopped, res.best and ("%.1f us"):format(res.best.median_us) or "none",
    #T.workers > 1 and (" (GPU %d)"):format(wk.device) or "", sys.clock() - T.t_budget))
  local tried = {}
  for _, r2 in ipairs(res.rows) do tried[r2.candidate.string] = true end
  T.state[i] = { K = K, tried = tried, res = res }
end

-- The second look: kernel i also measures the picks of the other kernels of its kind that are among its
-- candidates and that its own search did not reach (a patience-bounded search can settle in a region a sibling's
-- search escaped: o_proj and down are the same GEMM family at N = 1024; a few measurements per kernel, inside
-- what is left of --budget-s).
function M.second_look(T, i, p, wk)
  local s2, pk, rows = T.state[i], T.picks[i], T.rows
  if not s2 or (T.opts.max_candidates and s2.res.measured >= T.opts.max_candidates) then return end
  local by_string = {}
  for _, c in ipairs(p.candidates) do by_string[c.string] = c end
  local list = {}
  for j, o in ipairs(T.picks) do
    local c = j ~= i and o.kind == pk.kind and o.best_knobs and by_string[o.best_knobs]
    if c and not s2.tried[c.string] then
      s2.tried[c.string] = true
      list[#list + 1] = c
    end
  end
  if #list == 0 then return end
  s2.K.wk = wk
  compile_ahead(T, s2.K, list)
  for _, c in ipairs(list) do
    if T.opts.budget_s > 0 and sys.clock() > T.t_budget + T.opts.budget_s then break end
    pk.measured = pk.measured + 1
    local row = measure(T, s2.K, c, pk.measured, nil)
    if row.status == "ok" and row.median_us and (not pk.best_us or row.median_us < pk.best_us) then
      io.stderr:write(("  kernel %d/%d %s: a sibling's pick is faster: %.2f us (was %s)\n"):format(i, #T.plans,
        pk.name, row.median_us, pk.best_us and ("%.2f"):format(pk.best_us) or "none"))
      pk.best_us, pk.best_knobs, pk.second_look, pk.best_at = row.median_us, c.string, true, pk.measured
      rows[i][5], rows[i][6] = ("%.1f"):format(row.median_us), c.string
      if not rows[i][4]:find("+sibling", 1, true) then rows[i][4] = rows[i][4] .. "+sibling" end
    end
    rows[i][3] = tostring(pk.measured)
  end
  close_compiles(s2.K)
end

-- The floor where the layer runs: the deploy regime times each variant after an L2 flush, and a pick that wins there
-- can lose L2-warm, as the kernel runs in a CUDA-graph replay of the layer (forty-eighth session, H100: Qwen3-4B's down
-- projection, the pick STAGES=8 53.1 µs flushed, 54.9 warm against the rules' default's 45.8 warm and 46.8 in the
-- layer's program — the tuned layer slower than the untuned). Kernel i's pick, where it is not the rules' default, is
-- timed once more beside the default L2-warm (M.REGIMES.warm, the bench regime; not recorded in the tune DB, whose
-- rows are the deploy regime's); a pick slower there by more than M.WARM_FLOOR keeps the default.
M.WARM_FLOOR = 0.02
function M.warm_floor(T, i, p, wk)
  local pk, s2 = T.picks[i], T.state[i]
  local def = p.candidates[1]
  if T.opts.regime ~= "deploy" or not pk or not s2 or not pk.best_knobs or not def or pk.best_knobs == def.string
    or not pk.default_us then return end
  local pick
  for _, c in ipairs(p.candidates) do if c.string == pk.best_knobs then pick = c break end end
  if not pick then return end
  local tw = sys.clock()
  local function warm(c)
    local req = { op = "bench", repro = s2.K.repro, knobs = c.knobs }
    for key, v in pairs(M.REGIMES.warm) do req[key] = v end
    local r = bench_on(T, wk, req)
    return r.status == "ok" and r.median_us or nil
  end
  local wd, wp = warm(def), warm(pick)
  T.spent.floor = (T.spent.floor or 0) + sys.clock() - tw
  pk.warm = { default_us = wd, pick_us = wp }
  if not (wd and wp and wp > wd * (1 + M.WARM_FLOOR)) then return end
  io.stderr:write(("  kernel %d/%d %s: the pick is %.2fx the rules' default L2-warm (%.1f against %.1f us): the default kept\n")
    :format(i, #T.plans, pk.name, wp / wd, wp, wd))
  pk.floor = { knobs = pk.best_knobs, us = pk.best_us, warm_us = wp, default_warm_us = wd }
  pk.best_knobs, pk.best_us, pk.best_at = def.string, pk.default_us, 1
  local row = T.rows[i]
  row[4], row[5], row[6] = row[4] .. "+floor", ("%.1f"):format(pk.default_us), def.string
end

-- fn(T, i, plan, worker) for every kernel: one coroutine per worker, each taking the next kernel until none is
-- left; a request in flight yields. An error closes the workers and is raised again.
function M.each_kernel(T, fn)
  local next_i = 0
  local cos = {}
  for _, wk in ipairs(T.workers) do
    cos[#cos + 1] = coroutine.create(function()
      while next_i < #T.plans do
        next_i = next_i + 1
        fn(T, next_i, T.plans[next_i], wk)
      end
    end)
  end
  while #cos > 0 do
    for j = #cos, 1, -1 do
      local ok, err = coroutine.resume(cos[j])
      if not ok then
        M.close_workers(T.workers)
        error(err, 0)
      end
      if coroutine.status(cos[j]) == "dead" then table.remove(cos, j) end
    end
  end
end

-- The online half refit on every ok row of this context and saved for the next tune: the fit | nil, msg.
function M.refit_online(T) return M.refit_from_db(T.db, T.ctx, T.dev) end

-- The online half refit on the rows of tune DB db in context ctx (features at device dev) and saved: m2 | nil, msg.
-- `emmy tune` calls it after its searches, `emmy db merge --refit` on the merged rows.
function M.refit_from_db(db, ctx, dev)
  local fit = {}
  local cjson = require "cjson"
  for _, r in ipairs(db:fit_rows(ctx)) do
    local knobs = online.parse_knobs(r.knobs)
    local okf, facts = pcall(cjson.decode, r.facts or "")
    fit[#fit + 1] = { kind = r.kind, knobs = knobs, us = r.us, offline = r.offline, group = r.hash,
      features = okf and type(facts) == "table" and facts.kind and prior.features(facts, knobs, dev) or nil }
  end
  local m2 = online.fit(fit)
  local oks, serr = online.save(m2)
  if not oks then return nil, serr end
  io.stderr:write(("  online half refit on %d rows: rank correlation %.2f, out of fold %.2f (offline %.2f) — %s\n"):format(
    m2.rows, m2.rho_online, m2.rho_online_cv or 0, m2.rho_offline,
    m2.usable and "used next time" or "not better than the offline half, not used"))
  return m2
end

-- `emmy db merge --refit`: the online half refit on the merged DB at path, in its context with the most measurements
-- (features at the deploy target's limits) and saved. Returns the model (with .context, the context's words) | nil, msg.
function M.refit_merged(path)
  local tunedb = require "emmy.tunedb"
  local db, err = tunedb.open(path, { readonly = true })
  if not db then return nil, err end
  local best, n = nil, -1
  for _, c in ipairs(db:contexts()) do
    local k = #db:fit_rows(c.id)
    if k > n then best, n = c, k end
  end
  if not best then db:close(); return nil, "no measurements to fit" end
  local m2, ferr = M.refit_from_db(db, best.id, require("emmy.kernels").deploy_device())
  db:close()
  if not m2 then return nil, ferr end
  m2.context = ("%s, driver %s, NVRTC %s, %s regime"):format(best.gpu, best.driver, best.nvrtc, best.regime)
  return m2
end

-- Each structural fork priced by the sum of its kernel instances' best µs (a fork with a kernel that has no correct
-- variant is not priced): priced (a row a fork: knobs, kernels, price_us, missing, default, chosen), the cheapest's
-- index or nil.
function M.price_forks(forks, picks)
  local best_of = {}
  for _, pk in ipairs(picks) do best_of[pk.hash] = pk.best_us end
  local priced, cheapest = {}, nil
  for fi, fk in ipairs(forks) do
    local sum, missing = 0, nil
    for j, p in ipairs(fk.plans) do
      local b = best_of[fk.hashes[j]]
      if b then sum = sum + b else missing = missing or p.kernel.name end
    end
    local keys = {}
    for key, v in pairs(fk.knobs) do keys[#keys + 1] = key .. "=" .. v end
    table.sort(keys)
    priced[fi] = { knobs = table.concat(keys, ","), kernels = #fk.plans, price_us = not missing and sum or nil,
      missing = missing, default = fi == 1 }
    if not missing and (not cheapest or sum < priced[cheapest].price_us) then cheapest = fi end
  end
  if cheapest then priced[cheapest].chosen = true end
  return priced, cheapest
end

-- The forks' table (when there is more than one).
function M.print_forks(priced, cheapest)
  if #priced <= 1 then return end
  local frows = {}
  for _, pf in ipairs(priced) do
    frows[#frows + 1] = { pf.knobs, tostring(pf.kernels), pf.price_us and ("%.1f"):format(pf.price_us) or "-",
      pf.price_us and cheapest and ("%.2f"):format(pf.price_us / priced[cheapest].price_us) or ("no correct " .. pf.missing),
      (pf.chosen and "chosen" or "") .. (pf.default and (pf.chosen and ", default" or "default") or "") }
  end
  table.sort(frows, function(a, b) return (tonumber(a[3]) or math.huge) < (tonumber(b[3]) or math.huge) end)
  print(("\nstructural forks, priced by the sum of their kernel instances' best µs (at the hints):"))
  tbl.print { header = { "structural knobs", "kernels", "µs", "vs cheapest", "" }, rows = frows, align = "lrrrl" }
end

-- The run's closing lines: what was benched and served, where the time went, the DB's rows of this run (counts
-- by status, n_db) and the first failures, a line each. wall: the run's seconds.
function M.print_summary(T, wall, path, counts, n_db, failures)
  local st = {}
  for s, n in pairs(T.stats.status) do st[#st + 1] = ("%s %d"):format(s, n) end
  table.sort(st)
  print(("\n%s: %.1f s wall, %d variants benched, %d served from the tune DB; %s (%s regime, at the hints%s)"):format(
    #T.rows == #T.plans and "done" or "stopped", wall, T.stats.benched, T.stats.served, table.concat(st, ", "), T.opts.regime,
    #T.workers > 1 and (", %d GPUs"):format(#T.workers) or ""))
  local ws = {}
  for _, key in ipairs { "plan", "build", "ref", "run", "time" } do
    if T.spent.worker[key] then ws[#ws + 1] = ("%s %.1f"):format(key, T.spent.worker[key]) end
  end
  local A, as = T.spent.ahead, {}
  for s2, n in pairs(A.status) do as[#as + 1] = ("%s %d"):format(s2, n) end
  table.sort(as)
  print(("time: waiting on the compiles ahead %.1f s (%d variants, %.1f s of NVRTC threads%s); waiting on the worker%s %.1f s (its phases, s: %s; cubin cache hits %d of %d builds%s)")
    :format(T.spent.compile_ahead, A.n, A.cpu_s or 0, #as > 0 and (": " .. table.concat(as, ", ")) or "", #T.workers > 1 and "s" or "",
      T.spent.bench_wait, #ws > 0 and table.concat(ws, ", ") or "-", T.spent.cache_hits, T.spent.compiled,
      T.spent.key_missed > 0 and ("; %d built under another key than their compile ahead"):format(T.spent.key_missed) or ""))
  if T.stats.retried > 0 then
    print(("  %d variant%s timed on a second capture (the first one invalidated; its error in the tune DB's error column of the ok row)")
      :format(T.stats.retried, T.stats.retried == 1 and "" or "s"))
  end
  if T.spent.floor then print(("  the picks timed L2-warm beside the rules' defaults (the floor where the layer runs): %.1f s"):format(T.spent.floor)) end
  if A.first_error then print("  the first compile ahead that failed: " .. A.first_error:sub(1, 200)) end
  local rs = {}
  for s2, n in pairs(counts) do rs[#rs + 1] = ("%s %d"):format(s2, n) end
  table.sort(rs)
  print(("tune DB %s: run %d recorded %d rows (%s), as benched"):format(path, T.run_id, n_db, #rs > 0 and table.concat(rs, ", ") or "none"))
  -- what failed, a line each (the first 12; the tune DB holds them all)
  if #failures > 0 then print(("rows of this run that are not ok (%d):"):format(#failures)) end
  for j, fr in ipairs(failures) do
    if j > 12 then
      print(("  … and %d more"):format(#failures - 12))
      break
    end
    print(("  %s %s %s: %s"):format(fr.status, fr.kernel, fr.knobs, tostring(fr.error or "-"):gsub("%s+", " "):sub(1, 160)))
  end
end

return M
