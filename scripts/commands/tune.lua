-- emmy tune — find, for every distinct kernel of a model, layer or reproducer, the fastest correct variant on this
-- GPU: candidates from rules/tile/, ordered by the prior (rules/prior/), searched with patience (emmy.search),
-- each measured in the bench worker (a child process that owns the CUDA context; a fault or a hang is a row and
-- a fresh worker), every row kept in the tune DB (emmy.tunedb; rows already measured in this context are served
-- from it, so a killed tune resumes).
local cli = require "emmy.cli"
local frontend = require "emmy.frontend"
local gpu = require "emmy.gpu"
local nv = require "emmy.nvrtc"
local kernels = require "emmy.kernels"
local online = require "emmy.online"
local sys = require "emmy.sys"
local tbl = require "emmy.tbl"
local bench = require "emmy.bench"
local tunedb = require "emmy.tunedb"
local tuner = require "emmy.tuner"

-- The tune DB with the run lock held (docs/formats.md, "The run lock"): --clean deletes its rows only when no
-- other tune is writing to it, and no --clean can delete this tune's rows while it runs. Fails the command (the
-- workers closed, a temporary reproducer folder removed) when it cannot be had.
local function open_db(opts, workers, dir)
  local path = tunedb.default_path()
  local db, dberr = tunedb.open_for_run(path, { clean = opts.clean, on_clean = function()
    os.remove(online.default_path())
    nv.clear_cache()
  end })
  if not db then
    tuner.close_workers(workers)
    if not opts.dump_dir then os.execute("rm -rf '" .. dir:gsub("'", "") .. "'") end
    cli.fail("%s", dberr)
  end
  return db, path
end

-- --bench: the chosen fork with each kernel's pick, against torch eager and torch.compile (emmy.bench).
local function bench_picks(r, opts, forks, cheapest, picks, backends)
  local fork = forks[cheapest or 1]
  local pick_of = {}
  for _, pk in ipairs(picks) do pick_of[pk.hash] = pk.best_knobs end
  for j, p in ipairs(fork.plans) do
    for _, c in ipairs(p.candidates) do if c.string == pick_of[fork.hashes[j]] then p.choice = c end end
  end
  print(("\nbench of the %s fork with the tune's picks (a kernel without a correct pick keeps the prior's first)"):format(
    cheapest and "chosen" or "default"))
  local res, berr = bench.session { g = r.graph, graph_after = fork.graph, plans = fork.plans, backends = backends,
    dump_dir = opts.dump_dir,
    model = r.model and not r.file and { model = r.model, mode = opts.layer and "layer" or "whole", layer = opts.layer } or nil }
  if not res then cli.fail("tune --bench: %s", berr) end
end

return {
  summary = "tune every distinct kernel on this GPU (prior-guided search, bench worker, SQLite tune DB)",
  usage = "usage: emmy tune INPUT [trace flags] [--clean] [--patience N] [--max-candidates N] [--gpus N] [--shard I/N] [--dump-dir D] [--bench]\n\n" ..
    frontend.USAGE .. [[

  INPUT is a model (as for emmy trace) or a .torch.json graph (a reproducer from a dump).
  --patience N         stop a kernel's search after N correct measurements without a new best (default 16)
  --max-candidates N   measure at most N variants of a kernel (default: no limit)
  --timeout-ms N       a measurement that takes longer is a timeout row (default 60000)
  --clean              start from an empty tune DB (EMMY_TUNE_DB, default ~/.cache/emmy/tune.db: every row is
                       deleted, the file kept), online half (EMMY_ONLINE_FILE, default ~/.cache/emmy/online.json)
                       and cubin cache; refused, nothing deleted, while another tune is writing to that DB
  --search-batch N     candidates a batch of the search: chosen together, compiled together in the background,
                       the online half refit after each (default 8; a long search that waits on its compiles gains
                       from 16: twice the compiles in flight)
  --precompile N       also compile each kernel's N best-scored candidates ahead (default 0: each batch of the
                       search is compiled in parallel in the background, each candidate measured once its own
                       compile is done)
  --regime R           deploy (default): CUDA-graph replay, 5 warm-up runs then 10 ms more, 50 single-replay
                       samples each after an L2 flush (a read of twice the L2; EMMY_FLUSH=memset writes it, the
                       tune DB's "deploy" rows before the forty-ninth session; a read's are "deploy-read");
                       warm: the same replays without the flush, as emmy run --bench times a layer; rank: plain
                       event timing, 10 reps, no flush, cheaper. Rows are keyed by regime and never mixed.
  --structural default|all  default: the default (or pinned) kernel set only; all: every structural fork
                       (SPLIT_CONE, MERGE_SIBLINGS, VIEW_OUT, DUAL_GATE, ROPE_EPI, NORM_EPI not pinned by
                       EMMY_<KNOB> or EMMY_KNOBS) is formed, each distinct kernel of each tuned once (45 for a
                       Qwen3 layer against 9), each fork priced by the sum of its kernels' best µs
  --budget-s S         the measuring time of the whole tune, shared out among the kernels not yet started
                       (each kernel's search stops when its share is spent: "stopped by time"; default 240,
                       0: no limit)
  --gpus N             one bench worker per GPU (devices 0..N-1 of this host, one GPU model), kernels shared
                       out among them, one tune DB (default 1)
  --shard I/N          tune only shard I (0-based) of N of the distinct kernels (every N-th from the I-th), for N
                       machines or SLURM array tasks, each with its own tune DB (EMMY_TUNE_DB); the shards' DBs
                       are merged with `emmy db merge OUT.db IN.db… --refit` (the prior's online half is refit
                       there, not per shard); not with --bench
  --dump-dir D         keep the reproducers the worker measures in D/tune.kernels and write D/tune.json (the
                       run's stats and each kernel's pick; default: a temporary folder, no JSON); with --bench
                       also D/60_bench_compare.json, D/62_kernel_bench.json and D/kernels.html
  --bench              after the tune, bench the chosen fork with each kernel's pick against torch eager and
                       torch.compile, as a whole and kernel by kernel (as emmy run --bench; at the hints)
  --bench-backends L   the backends to bench (default eager,tcompile,emmy)
  Search: every leaf of a kernel's fork tree (rules/tile/) is scored by the prior; the rules' default is measured
  first (the floor: a tuned kernel is never slower than its default), then the prior's best; after each batch the online trees are refit on the kernel's rows and the next batch is ordered by
  expected improvement over the best so far (a quarter of each batch is drawn at random, seeded); a search stops
  after --patience rows without a new best, or once 24 rows are in and no candidate left is expected to improve
  on the best by half a percent ("confident"; rules/prior/online.lua).
  Measured at the symbols' hints (deploy regime: CUDA-graph replay, median); rows already in the DB for this
  GPU, driver, NVRTC and regime are served from it. After the searches, each kernel also measures the picks of
  the other kernels of its kind that are among its candidates ("stopped by" shows +sibling when one won). In the
  deploy regime a pick that is not the rules' default is then timed L2-warm beside the default (as the layer's
  replay runs it); a pick slower there by more than 2% keeps the default ("stopped by" shows +floor).
  Rows that are not ok are listed at the end, a line each.]],
  run = function(argv)
    local opts, pos = cli.parse(argv, {
      flags = frontend.merge_flags { ["--patience"] = { kind = "int", default = 16, min = 1 },
        ["--max-candidates"] = { kind = "int", min = 1 }, ["--timeout-ms"] = { kind = "int", default = 60000, min = 100 },
        ["--clean"] = { kind = "bool" }, ["--dump-dir"] = { kind = "string" },
        ["--precompile"] = { kind = "int", default = 0, min = 0 }, ["--search-batch"] = { kind = "int", default = 8, min = 1 },
        ["--regime"] = { kind = "string", default = "deploy" }, ["--gpus"] = { kind = "int", default = 1, min = 1 },
        ["--structural"] = { kind = "string", default = "default" }, ["--bench"] = { kind = "bool" },
        ["--bench-backends"] = { kind = "string" }, ["--budget-s"] = { kind = "number", default = 240, min = 0 },
        ["--shard"] = { kind = "string" } },
      positional = { "input" }, usage = "emmy tune INPUT [--clean] [--patience N]",
    }, "tune")
    if not pos.input then cli.usage("tune: missing INPUT (a model or a .torch.json graph)") end
    if opts.search_batch > 64 then cli.usage("tune: --search-batch %d (1 to 64)", opts.search_batch) end
    if not tuner.REGIMES[opts.regime] then cli.usage("tune: --regime %s (deploy, warm or rank)", opts.regime) end
    do
      local ok, why = pcall(tuner.deploy_flush)
      if not ok then cli.usage("tune: %s", why) end
    end
    if opts.structural ~= "all" and opts.structural ~= "default" then
      cli.usage("tune: --structural %s (all or default)", opts.structural)
    end
    local bench_backends, berr = bench.parse_backends(opts.bench_backends)
    if not bench_backends then cli.usage("tune: %s", berr) end
    if opts.bench_backends and not opts.bench then cli.usage("tune: --bench-backends needs --bench") end
    local shard = opts.shard and cli.check(kernels.parse_shard(opts.shard))
    if shard and opts.bench then
      cli.usage("tune: --bench with --shard (a shard has only its kernels' picks: emmy db merge the shards' DBs, then emmy run --bench)")
    end
    local t0 = sys.clock()
    local r = frontend.load(pos.input, opts, true)
    print(r.header)
    -- the workers first: without a GPU there is nothing to tune
    local workers, werr = tuner.start_workers(opts.gpus)
    if not workers then cli.fail("%s", werr) end
    local gi = workers[1].gpu
    local dev = gpu.device(gi)
    -- the structural forks (which kernels exist): each distinct kernel of every fork is tuned once, each fork priced
    -- by the sum of its kernels' best rows
    local forks, tried = kernels.structural_forks(r.graph, dev, { all = opts.structural == "all" })
    local plans = tuner.distinct_plans(forks)
    local nplans = #plans
    if shard then plans = kernels.shard(plans, shard) end
    -- reproducers for the worker
    local dir = opts.dump_dir and (opts.dump_dir .. "/tune.kernels") or os.tmpname()
    if not opts.dump_dir then os.remove(dir) end
    cli.check(sys.mkdir_p(dir))
    local db, path = open_db(opts, workers, dir)
    local _, rev = sys.version()
    local run_id = db:begin_run("emmy tune " .. table.concat(argv, " "), rev, rev and rev:match("dirty") ~= nil)
    local ctx = db:context { gpu = gi.name, cc = gi.cc, driver = tostring(gi.driver_version or ""), nvrtc = tostring(sys.nvrtc() or ""),
      regime = tuner.db_regime(opts.regime) }
    local T = tuner.session { opts = opts, dev = dev, gi = gi, workers = workers, plans = plans, db = db, ctx = ctx,
      run_id = run_id, dir = dir }
    print(("tuning %d distinct kernels of %d structural fork%s (%d assignments) on %s (tune DB %s; prior: %s)"):format(
      #plans, #forks, #forks == 1 and "" or "s", tried, gi.name, path,
      T.model and T.model.usable and ("offline + online half fit on %d rows"):format(T.model.rows) or "offline half"))
    tuner.each_kernel(T, tuner.tune_kernel)
    tuner.each_kernel(T, tuner.second_look)
    tuner.each_kernel(T, tuner.warm_floor)
    db:end_run(run_id)
    -- (a shard's rows are a part: the online half is refit on the merge, emmy db merge --refit)
    local fit, serr = true, nil
    if not shard then fit, serr = tuner.refit_online(T) end
    if not fit then
      tuner.close_workers(workers)
      cli.fail("tune: the online half: %s (the tune DB keeps every row; the next tune refits)", serr)
    end
    tuner.close_workers(workers)
    -- the run's stats are the DB's: every benched variant is one row of this run
    local counts, n_db = db:run_counts(run_id)
    local failures = db:run_failures(run_id)
    db:close()
    if n_db ~= T.stats.benched then
      cli.fail("tune: the tune DB holds %d rows for run %d but %d variants were benched", n_db, run_id, T.stats.benched)
    end
    if not opts.dump_dir then os.execute("rm -rf '" .. dir:gsub("'", "") .. "'") end
    print()
    tbl.print { header = { "kernel", "candidates", "measured", "stopped by", "best µs", "best knobs" }, rows = T.rows,
      align = "lrrlrl" }
    local priced, cheapest = {}, nil
    if shard then
      print(("\nshard %s: %d of %d distinct kernels tuned into %s; merge the shards' DBs (emmy db merge OUT.db … --refit) "
        .. "for every pick, the forks' prices and the prior's refit"):format(opts.shard, #plans, nplans, path))
    else
      priced, cheapest = tuner.price_forks(forks, T.picks)
      tuner.print_forks(priced, cheapest)
    end
    local wall = sys.clock() - t0
    tuner.print_summary(T, wall, path, counts, n_db, failures)
    if opts.dump_dir then
      cli.must(sys.write_file(opts.dump_dir .. "/tune.json", require("cjson").encode { run_id = run_id, db = path,
        regime = opts.regime, gpus = #workers, shard = opts.shard, wall_s = wall, benched = T.stats.benched, served = T.stats.served,
        status = T.stats.status, recorded = counts, kernels = T.picks, structural = priced, spent = T.spent }))
    end
    if opts.bench then bench_picks(r, opts, forks, cheapest, T.picks, bench_backends) end
  end,
}
