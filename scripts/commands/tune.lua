-- emmy tune — find, for every distinct kernel of a model, layer or reproducer, the fastest correct variant on this
-- GPU: candidates from rules/tile/, ordered by the prior (rules/prior/), searched with patience (emmy.search),
-- each measured in the bench worker (a child process that owns the CUDA context; a fault or a hang is a row and
-- a fresh worker), every row kept in the tune DB (emmy.tunedb; rows already measured in this context are served
-- from it, so a killed tune resumes).
local cli = require "emmy.cli"
local compiler = require "emmy.compiler"
local frontend = require "emmy.frontend"
local gpu = require "emmy.gpu"
local graphjson = require "emmy.graphjson"
local nv = require "emmy.nvrtc"
local kernels = require "emmy.kernels"
local online = require "emmy.online"
local prior = require "emmy.prior"
local search = require "emmy.search"
local sys = require "emmy.sys"
local tbl = require "emmy.tbl"
local bench = require "emmy.bench"
local tunedb = require "emmy.tunedb"
local worker = require "emmy.worker"

local function tier_of(k)
  if k.WGMMA == 1 then return "wgmma" end
  if k.FLASH == 1 then return "flash" end
  if k.MMA == 1 then return "warp" end
  if k.MMA == 0 then return "scalar" end
  return "simt"
end

return {
  summary = "tune every distinct kernel on this GPU (prior-guided search, bench worker, SQLite tune DB)",
  usage = "usage: emmy tune INPUT [trace flags] [--clean] [--patience N] [--max-candidates N] [--gpus N] [--dump-dir D] [--bench]\n\n" ..
    frontend.USAGE .. [[

  INPUT is a model (as for emmy trace) or a .torch.json graph (a reproducer from a dump).
  --patience N         stop a kernel's search after N correct measurements without a new best (default 16)
  --max-candidates N   measure at most N variants of a kernel (default: no limit)
  --timeout-ms N       a measurement that takes longer is a timeout row (default 60000)
  --clean              start from an empty tune DB (EMMY_TUNE_DB, default ~/.cache/emmy/tune.db: every row is
                       deleted, the file kept), online half (EMMY_ONLINE_FILE, default ~/.cache/emmy/online.json)
                       and cubin cache; refused, nothing deleted, while another tune is writing to that DB
  --precompile N       also compile each kernel's N best-scored candidates ahead (default 0: each batch of the
                       search is compiled in parallel just before it is measured)
  --regime deploy|rank deploy (default): CUDA-graph replay, 5 warm-up runs then 10 ms more, 50 single-replay
                       samples each after an L2 flush (a memset of twice the L2); rank: plain event timing,
                       10 reps, no flush, cheaper. Rows are keyed by regime and never mixed.
  --structural default|all  default: the default (or pinned) kernel set only; all: every structural fork
                       (SPLIT_CONE, MERGE_SIBLINGS, VIEW_OUT, DUAL_GATE, ROPE_EPI, NORM_EPI not pinned by
                       EMMY_<KNOB> or EMMY_KNOBS) is formed, each distinct kernel of each tuned once (45 for a
                       Qwen3 layer against 9), each fork priced by the sum of its kernels' best µs
  --budget-s S         the measuring time of the whole tune, shared out among the kernels not yet started
                       (each kernel's search stops when its share is spent: "stopped by time"; default 240,
                       0: no limit)
  --gpus N             one bench worker per GPU (devices 0..N-1 of this host, one GPU model), kernels shared
                       out among them, one tune DB (default 1)
  --dump-dir D         keep the reproducers the worker measures in D/tune.kernels and write D/tune.json (the
                       run's stats and each kernel's pick; default: a temporary folder, no JSON); with --bench
                       also D/60_bench_compare.json, D/62_kernel_bench.json and D/kernels.html
  --bench              after the tune, bench the chosen fork with each kernel's pick against torch eager and
                       torch.compile, as a whole and kernel by kernel (as emmy run --bench; at the hints)
  --bench-backends L   the backends to bench (default eager,tcompile,emmy)
  Search: every leaf of a kernel's fork tree (rules/tile/) is scored by the prior; the rules' default is measured
  first (the floor: a tuned kernel is never slower than its default), then the prior's best; after each batch the online trees are refit on the kernel's rows and the next batch is ordered by
  expected improvement over the best so far (a quarter of each batch is drawn at random, seeded).
  Measured at the symbols' hints (deploy regime: CUDA-graph replay, median); rows already in the DB for this
  GPU, driver, NVRTC and regime are served from it. After the searches, each kernel also measures the picks of
  the other kernels of its kind that are among its candidates ("stopped by" shows +sibling when one won).
  Rows that are not ok are listed at the end, a line each.]],
  run = function(argv)
    local opts, pos = cli.parse(argv, {
      flags = frontend.merge_flags { ["--patience"] = { kind = "int", default = 16, min = 1 },
        ["--max-candidates"] = { kind = "int", min = 1 }, ["--timeout-ms"] = { kind = "int", default = 60000, min = 100 },
        ["--clean"] = { kind = "bool" }, ["--dump-dir"] = { kind = "string" },
        ["--precompile"] = { kind = "int", default = 0, min = 0 },
        ["--regime"] = { kind = "string", default = "deploy" }, ["--gpus"] = { kind = "int", default = 1, min = 1 },
        ["--structural"] = { kind = "string", default = "default" }, ["--bench"] = { kind = "bool" },
        ["--bench-backends"] = { kind = "string" }, ["--budget-s"] = { kind = "number", default = 240, min = 0 } },
      positional = { "input" }, usage = "emmy tune INPUT [--clean] [--patience N]",
    }, "tune")
    if not pos.input then cli.usage("tune: missing INPUT (a model or a .torch.json graph)") end
    if opts.regime ~= "deploy" and opts.regime ~= "rank" then cli.usage("tune: --regime %s (deploy or rank)", opts.regime) end
    if opts.structural ~= "all" and opts.structural ~= "default" then
      cli.usage("tune: --structural %s (all or default)", opts.structural)
    end
    local bench_backends, berr = bench.parse_backends(opts.bench_backends)
    if not bench_backends then cli.usage("tune: %s", berr) end
    if opts.bench_backends and not opts.bench then cli.usage("tune: --bench-backends needs --bench") end
    local t0 = sys.clock()
    local r = frontend.load(pos.input, opts, true)
    local g = r.graph
    print(r.header)
    -- the workers first: without a GPU there is nothing to tune
    local workers = {}
    local function close_all() for _, x in ipairs(workers) do x.w:close() end end
    for d = 0, opts.gpus - 1 do
      local w, werr = worker.start { device = d }
      if not w then close_all() cli.fail("%s", werr) end
      workers[#workers + 1] = { w = w, device = d }
      local info = w:call({ op = "info" }, 60000)
      if info.status ~= "ok" then
        close_all()
        if d == 0 then cli.fail("emmy tune needs a GPU: %s", tostring(info.error)) end
        cli.fail("tune: --gpus %d: device %d: %s", opts.gpus, d, tostring(info.error))
      end
      workers[#workers].gpu = info.gpu
      if d > 0 and info.gpu.name ~= workers[1].gpu.name then
        close_all()
        cli.fail("tune: --gpus %d: device %d is a %s and device 0 a %s (one GPU model per tune DB context)", opts.gpus, d,
          info.gpu.name, workers[1].gpu.name)
      end
    end
    local gi = workers[1].gpu
    local dev = gpu.device(gi)
    -- the structural forks (which kernels exist): each distinct kernel of every fork is tuned once, each fork priced
    -- by the sum of its kernels' best rows
    local forks, tried = kernels.structural_forks(g, dev, { all = opts.structural == "all" })
    local plans, by_hash = {}, {}
    for _, fk in ipairs(forks) do
      for j, p in ipairs(fk.plans) do
        if not by_hash[fk.hashes[j]] then
          by_hash[fk.hashes[j]] = p
          plans[#plans + 1] = p
        end
      end
    end
    -- reproducers for the worker
    local dir = opts.dump_dir and (opts.dump_dir .. "/tune.kernels") or os.tmpname()
    if not opts.dump_dir then os.remove(dir) end
    cli.check(sys.mkdir_p(dir))
    -- the tune DB with the run lock held (docs/formats.md, "The run lock"): --clean deletes its rows only when no
    -- other tune is writing to it, and no --clean can delete this tune's rows while it runs
    local path = tunedb.default_path()
    local db, dberr = tunedb.open_for_run(path, { clean = opts.clean, on_clean = function()
      os.remove(online.default_path())
      nv.clear_cache()
    end })
    if not db then
      close_all()
      if not opts.dump_dir then os.execute("rm -rf '" .. dir:gsub("'", "") .. "'") end
      cli.fail("%s", dberr)
    end
    local ver, rev = sys.version()
    local run_id = db:begin_run("emmy tune " .. table.concat(argv, " "), rev, rev and rev:match("dirty") ~= nil)
    local ctx = db:context { gpu = gi.name, cc = gi.cc, driver = tostring(gi.driver_version or ""), nvrtc = tostring(sys.nvrtc() or ""),
      regime = opts.regime }
    -- the online half of earlier tunes (when it passed its calibration), else the offline half alone
    local model = online.load()
    local function score(f, c)
      return online.predict(model, f.kind or "contraction", c.knobs, prior.offline(f, c.knobs, dev), prior.features(f, c.knobs, dev))
    end
    print(("tuning %d distinct kernels of %d structural fork%s (%d assignments) on %s (tune DB %s; prior: %s)"):format(
      #plans, #forks, #forks == 1 and "" or "s", tried, gi.name, path,
      model and model.usable and ("offline + online half fit on %d rows"):format(model.rows) or "offline half"))
    local stats, rows, picks, last = { benched = 0, served = 0, status = {} }, {}, {}, sys.clock()
    local t_budget = sys.clock() -- --budget-s counts from here (after the forks are planned)
    -- where the wall time goes: the worker's phases (from its answers), the parent's compiles and waits
    local spent = { worker = {}, compile_ahead = 0, bench_wait = 0, cache_hits = 0, compiled = 0 }
    local req_base = opts.regime == "deploy" and { graph = true, reps = 50, warmup = 5, warmup_ms = 10, flush = true }
      or { graph = false, reps = 10, warmup = 2 }
    -- one request on worker wk from inside a kernel's coroutine: yields until the answer is there
    local function bench_on(wk, req)
      wk.w:submit(req, opts.timeout_ms)
      while true do
        local r = wk.w:poll(#workers > 1 and 2 or 1000)
        if r then return r end
        coroutine.yield()
      end
    end
    local state, max_n_opt = {}, opts.max_candidates
    local function tune_kernel(i, p, wk)
      local k = p.kernel
      local f = kernels.facts(k)
      local repro = dir .. "/" .. k.name .. ".torch.json"
      cli.must(graphjson.write(k.repro, repro, { sync = false }))
      local hash = k.repro:hash()
      -- the kernel facts (what rules/prior/features.lua reads), kept so that later refits can featurize its rows
      db:kernel { hash = hash, name = k.name, ops = k.kind, features = f,
        flops = f.flops }
      -- compile in parallel: each batch the search is about to measure (and with --precompile N the prior's N
      -- first candidates) goes through NVRTC's thread pool into the cubin cache, where the worker's build of the
      -- same source finds it; variants already measured in this context are not compiled
      -- (from the reproducer's plan, as the worker forms it: the same source text, so the same cache key)
      local compiled = {}
      local rp
      local function compile_ahead(list)
        rp = rp or kernels.repro_plan(cli.check(graphjson.read(repro)), dev)
        local jobs = {}
        for _, c in ipairs(list) do
          if not compiled[c.string] and not db:measured(ctx, db:variant(hash, c.string, tier_of(c.knobs))) then
            compiled[c.string] = true
            jobs[#jobs + 1] = gpu.job(rp, gpu.knobs_over(rp, c.knobs), gi) -- (a refused variant adds nothing)
          end
        end
        local tc = sys.clock()
        if #jobs > 0 then nv.compile_many(jobs) end
        spent.compile_ahead = spent.compile_ahead + sys.clock() - tc
      end
      if opts.precompile > 0 then
        local ahead = {}
        for _, c in ipairs(p.candidates) do ahead[#ahead + 1] = { c = c, s = score(f, c) or 0 } end
        table.sort(ahead, function(a, b) return a.s < b.s end)
        local first = {}
        for j = 1, math.min(#ahead, opts.precompile) do first[j] = ahead[j].c end
        compile_ahead(first)
      end
      -- this kernel's share of what is left of --budget-s (kernels not yet started, one per worker at a time)
      local deadline
      if opts.budget_s > 0 then
        local left = math.max(0, t_budget + opts.budget_s - sys.clock())
        deadline = sys.clock() + math.max(2, left * #workers / math.max(1, #plans - i + 1))
      end
      local st = { best_us = nil, wk = wk } -- (wk: the worker of the coroutine measuring now)
      -- one candidate measured (or served from the DB) and recorded; order = its place in the kernel's search
      local function measure(c, order, online_us)
        local vid = db:variant(hash, c.string, tier_of(c.knobs))
        local row = db:measured(ctx, vid)
        if row then
          stats.served = stats.served + 1
        else
          local req = { op = "bench", repro = repro, knobs = c.knobs }
          for key, v in pairs(req_base) do req[key] = v end
          local tw = sys.clock()
          row = bench_on(st.wk, req)
          spent.bench_wait = spent.bench_wait + sys.clock() - tw
          for key, v in pairs(type(row.phase_ms) == "table" and row.phase_ms or {}) do
            spent.worker[key] = (spent.worker[key] or 0) + v / 1e3
          end
          if row.cache_hit ~= nil then
            spent.compiled = spent.compiled + 1
            if row.cache_hit then spent.cache_hits = spent.cache_hits + 1 end
          end
          local status = tunedb.STATUS[row.status] and row.status or "launch_fail"
          db:record { run_id = run_id, context_id = ctx, variant_id = vid, status = status, error = row.error,
            median_us = row.median_us, min_us = row.min_us, p20_us = row.p20_us, p80_us = row.p80_us,
            samples = row.samples, regs = row.regs, spills = row.spills, smem = row.smem, compile_ms = row.compile_ms,
            prior_offline = prior.offline(f, c.knobs, dev), prior_online = online_us, search_order = order }
          row.status = status
          stats.benched = stats.benched + 1
        end
        stats.status[row.status] = (stats.status[row.status] or 0) + 1
        if row.status == "ok" and row.median_us and (not st.best_us or row.median_us < st.best_us) then st.best_us = row.median_us end
        if sys.clock() - last > 3 then
          io.stderr:write(("  kernel %d/%d %s: %d measured, best %s\n"):format(i, #plans, k.name, order,
            st.best_us and ("%.1f us"):format(st.best_us) or "-"))
          last = sys.clock()
        end
        return row
      end
      local res = search.run { out_of_time = deadline and function() return sys.clock() > deadline end, candidates = p.candidates, patience = opts.patience, max_candidates = opts.max_candidates,
        seed = 1, score = function(c) return score(f, c) end, before_batch = compile_ahead, measure = measure, default_first = true }
      rows[i] = { k.name, tostring(#p.candidates), tostring(res.measured), res.stopped,
        res.best and ("%.1f"):format(res.best.median_us) or "-", res.best_candidate and res.best_candidate.string or "no correct variant" }
      picks[i] = { name = k.name, hash = hash, kind = k.kind, candidates = #p.candidates, measured = res.measured,
        stopped = res.stopped, best_us = res.best and res.best.median_us or nil,
        best_knobs = res.best_candidate and res.best_candidate.string or nil, device = wk.device }
      io.stderr:write(("  kernel %d/%d %s: %d measured (%s), best %s%s\n"):format(i, #plans, k.name, res.measured, res.stopped,
        res.best and ("%.1f us"):format(res.best.median_us) or "none", #workers > 1 and (" (GPU %d)"):format(wk.device) or ""))
      local tried = {}
      for _, r2 in ipairs(res.rows) do tried[r2.candidate.string] = true end
      state[i] = { measure = measure, compile_ahead = compile_ahead, tried = tried, res = res, st = st }
    end
    -- the second look: each kernel also measures the picks of the other kernels of its kind that are among its
    -- candidates and that its own search did not reach (a patience-bounded search can settle in a region a
    -- sibling's search escaped: o_proj and down are the same GEMM family at N = 1024; a few measurements per
    -- kernel, inside what is left of --budget-s)
    local function second_look(i, p, wk)
      local s2, pk = state[i], picks[i]
      if not s2 or (max_n_opt and s2.res.measured >= max_n_opt) then return end
      local by_string = {}
      for _, c in ipairs(p.candidates) do by_string[c.string] = c end
      local list = {}
      for j, o in ipairs(picks) do
        local c = j ~= i and o.kind == pk.kind and o.best_knobs and by_string[o.best_knobs]
        if c and not s2.tried[c.string] then
          s2.tried[c.string] = true
          list[#list + 1] = c
        end
      end
      if #list == 0 then return end
      s2.st.wk = wk
      s2.compile_ahead(list)
      for _, c in ipairs(list) do
        if opts.budget_s > 0 and sys.clock() > t_budget + opts.budget_s then break end
        pk.measured = pk.measured + 1
        local row = s2.measure(c, pk.measured, nil)
        if row.status == "ok" and row.median_us and (not pk.best_us or row.median_us < pk.best_us) then
          io.stderr:write(("  kernel %d/%d %s: a sibling's pick is faster: %.2f us (was %s)\n"):format(i, #plans,
            pk.name, row.median_us, pk.best_us and ("%.2f"):format(pk.best_us) or "none"))
          pk.best_us, pk.best_knobs, pk.second_look = row.median_us, c.string, true
          rows[i][5], rows[i][6] = ("%.1f"):format(row.median_us), c.string
          if not rows[i][4]:find("+sibling", 1, true) then rows[i][4] = rows[i][4] .. "+sibling" end
        end
        rows[i][3] = tostring(pk.measured)
      end
    end
    -- one coroutine per worker, each taking the next kernel until none is left; a request in flight yields
    local function each_kernel(fn)
      local next_i = 0
      local cos = {}
      for _, wk in ipairs(workers) do
        cos[#cos + 1] = coroutine.create(function()
          while next_i < #plans do
            next_i = next_i + 1
            fn(next_i, plans[next_i], wk)
          end
        end)
      end
      while #cos > 0 do
        for j = #cos, 1, -1 do
          local ok, err = coroutine.resume(cos[j])
          if not ok then
            close_all()
            error(err, 0)
          end
          if coroutine.status(cos[j]) == "dead" then table.remove(cos, j) end
        end
      end
    end
    each_kernel(tune_kernel)
    each_kernel(second_look)
    db:end_run(run_id)
    -- refit the online half on every ok row of this context and keep it for the next tune
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
    if not oks then
      close_all()
      cli.fail("tune: the online half: %s (the tune DB keeps every row; the next tune refits)", serr)
    end
    io.stderr:write(("  online half refit on %d rows: rank correlation %.2f, out of fold %.2f (offline %.2f) — %s\n"):format(
      m2.rows, m2.rho_online, m2.rho_online_cv or 0, m2.rho_offline,
      m2.usable and "used next time" or "not better than the offline half, not used"))
    close_all()
    -- the run's stats are the DB's: every benched variant is one row of this run
    local counts, n_db = db:run_counts(run_id)
    local failures = db:run_failures(run_id)
    db:close()
    if n_db ~= stats.benched then
      cli.fail("tune: the tune DB holds %d rows for run %d but %d variants were benched", n_db, run_id, stats.benched)
    end
    if not opts.dump_dir then os.execute("rm -rf '" .. dir:gsub("'", "") .. "'") end
    print()
    tbl.print { header = { "kernel", "candidates", "measured", "stopped by", "best µs", "best knobs" }, rows = rows,
      align = "lrrlrl" }
    -- each structural fork priced by the sum of its kernel instances' best µs (a fork with a kernel that has no
    -- correct variant is not priced)
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
    if #forks > 1 then
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
    local st = {}
    for s, n in pairs(stats.status) do st[#st + 1] = ("%s %d"):format(s, n) end
    table.sort(st)
    local wall = sys.clock() - t0
    print(("\n%s: %.1f s wall, %d variants benched, %d served from the tune DB; %s (%s regime, at the hints%s)"):format(
      #rows == #plans and "done" or "stopped", wall, stats.benched, stats.served, table.concat(st, ", "), opts.regime,
      #workers > 1 and (", %d GPUs"):format(#workers) or ""))
    local ws = {}
    for _, key in ipairs { "plan", "build", "ref", "run", "time" } do
      if spent.worker[key] then ws[#ws + 1] = ("%s %.1f"):format(key, spent.worker[key]) end
    end
    print(("time: compiling batches ahead %.1f s; waiting on the worker%s %.1f s (its phases, s: %s; cubin cache hits %d of %d builds)")
      :format(spent.compile_ahead, #workers > 1 and "s" or "", spent.bench_wait, #ws > 0 and table.concat(ws, ", ") or "-",
        spent.cache_hits, spent.compiled))
    local rs = {}
    for s2, n in pairs(counts) do rs[#rs + 1] = ("%s %d"):format(s2, n) end
    table.sort(rs)
    print(("tune DB %s: run %d recorded %d rows (%s), as benched"):format(path, run_id, n_db, #rs > 0 and table.concat(rs, ", ") or "none"))
    -- what failed, a line each (the first 12; the tune DB holds them all)
    if #failures > 0 then print(("rows of this run that are not ok (%d):"):format(#failures)) end
    for j, fr in ipairs(failures) do
      if j > 12 then
        print(("  … and %d more"):format(#failures - 12))
        break
      end
      print(("  %s %s %s: %s"):format(fr.status, fr.kernel, fr.knobs, tostring(fr.error or "-"):gsub("%s+", " "):sub(1, 160)))
    end
    if opts.dump_dir then
      cli.must(sys.write_file(opts.dump_dir .. "/tune.json", require("cjson").encode { run_id = run_id, db = path,
        regime = opts.regime, gpus = #workers, wall_s = wall, benched = stats.benched, served = stats.served,
        status = stats.status, recorded = counts, kernels = picks, structural = priced, spent = spent }))
    end
    -- --bench: the chosen fork with each kernel's pick, against torch eager and torch.compile (emmy.bench)
    if opts.bench then
      local fork = forks[cheapest or 1]
      local pick_of = {}
      for _, pk in ipairs(picks) do pick_of[pk.hash] = pk.best_knobs end
      for j, p in ipairs(fork.plans) do
        for _, c in ipairs(p.candidates) do if c.string == pick_of[fork.hashes[j]] then p.choice = c end end
      end
      print(("\nbench of the %s fork with the tune's picks (a kernel without a correct pick keeps the prior's first)"):format(
        cheapest and "chosen" or "default"))
      local res, berr = bench.session { g = g, graph_after = fork.graph, plans = fork.plans, backends = bench_backends,
        dump_dir = opts.dump_dir,
        model = r.model and not r.file and { model = r.model, mode = opts.layer and "layer" or "whole", layer = opts.layer } or nil }
      if not res then cli.fail("tune --bench: %s", berr) end
    end
  end,
}
