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
  usage = "usage: emmy tune INPUT [trace flags] [--clean] [--patience N] [--max-candidates N] [--dump-dir D]\n\n" ..
    frontend.USAGE .. [[

  INPUT is a model (as for emmy trace) or a .torch.json graph (a reproducer from a dump).
  --patience N         stop a kernel's search after N measurements without a new best (default 24)
  --max-candidates N   measure at most N variants of a kernel (default: no limit)
  --timeout-ms N       a measurement that takes longer is a timeout row (default 60000)
  --clean              start from an empty tune DB (EMMY_TUNE_DB, default ~/.cache/emmy/tune.db), online half
                       (EMMY_ONLINE_FILE, default ~/.cache/emmy/online.json) and cubin cache
  --precompile N       compile each kernel's N best-scored candidates ahead, in parallel (default 32)
  --regime deploy|rank deploy (default): CUDA-graph replay, 50 reps; rank: plain event timing, 10 reps, cheaper.
                       Rows are keyed by regime and never mixed.
  --dump-dir D         keep the reproducers the worker measures in D/tune.kernels (default: a temporary folder)
  Measured at the symbols' hints (deploy regime: CUDA-graph replay, median); rows already in the DB for this
  GPU, driver, NVRTC and regime are served from it.]],
  run = function(argv)
    local opts, pos = cli.parse(argv, {
      flags = frontend.merge_flags { ["--patience"] = { kind = "int", default = 24, min = 1 },
        ["--max-candidates"] = { kind = "int", min = 1 }, ["--timeout-ms"] = { kind = "int", default = 60000, min = 100 },
        ["--clean"] = { kind = "bool" }, ["--dump-dir"] = { kind = "string" },
        ["--precompile"] = { kind = "int", default = 32, min = 0 },
        ["--regime"] = { kind = "string", default = "deploy" } },
      positional = { "input" }, usage = "emmy tune INPUT [--clean] [--patience N]",
    }, "tune")
    if not pos.input then cli.usage("tune: missing INPUT (a model or a .torch.json graph)") end
    if opts.regime ~= "deploy" and opts.regime ~= "rank" then cli.usage("tune: --regime %s (deploy or rank)", opts.regime) end
    local t0 = sys.clock()
    local r = frontend.load(pos.input, opts, true)
    local g = r.graph
    print(r.header)
    -- the worker first: without a GPU there is nothing to tune
    local w, werr = worker.start()
    if not w then cli.fail("%s", werr) end
    local info = w:call({ op = "info" }, 60000)
    if info.status ~= "ok" then
      w:close()
      cli.fail("emmy tune needs a GPU: %s", tostring(info.error))
    end
    local gi = info.gpu
    local dev = { name = gi.name, sm_count = gi.sm_count, smem_static = 49152, smem_optin = gi.smem_optin, max_threads = 1024,
      regs_per_block = 65536, cc = gi.cc, cc_major = gi.cc_major }
    local plans = kernels.distinct(kernels.plan(compiler.run(g), { device = dev }))
    -- reproducers for the worker
    local dir = opts.dump_dir and (opts.dump_dir .. "/tune.kernels") or os.tmpname()
    if not opts.dump_dir then os.remove(dir) end
    cli.check(sys.mkdir_p(dir))
    local path = tunedb.default_path()
    if opts.clean then
      for _, sfx in ipairs { "", "-wal", "-shm" } do os.remove(path .. sfx) end
      os.remove(online.default_path())
      nv.clear_cache()
    end
    local db = cli.check(tunedb.open(path))
    local ver, rev = sys.version()
    local run_id = db:begin_run("emmy tune " .. table.concat(argv, " "), rev, rev and rev:match("dirty") ~= nil)
    local ctx = db:context { gpu = gi.name, cc = gi.cc, driver = tostring(gi.driver_version or ""), nvrtc = tostring(sys.nvrtc() or ""),
      regime = opts.regime }
    -- the online half of earlier tunes (when it passed its calibration), else the offline half alone
    local model = online.load()
    local function score(f, c)
      return online.predict(model, f.kind or "contraction", c.knobs, prior.offline(f, c.knobs, dev))
    end
    print(("tuning %d distinct kernels on %s (tune DB %s; prior: %s)"):format(#plans, gi.name, path,
      model and model.usable and ("offline + online half fit on %d rows"):format(model.rows) or "offline half"))
    local stats, rows, last = { benched = 0, served = 0, status = {} }, {}, sys.clock()
    for i, p in ipairs(plans) do
      local k = p.kernel
      local f = kernels.facts(k)
      local repro = dir .. "/" .. k.name .. ".torch.json"
      cli.check(graphjson.write(k.repro, repro))
      local hash = k.repro:hash()
      db:kernel { hash = hash, name = k.name, ops = k.kind, features = { M = f.M, N = f.N, K = f.K, L = f.L },
        flops = f.M and f.N and f.K and 2 * f.M * f.N * f.K or nil }
      -- compile ahead, in parallel: the prior's first candidates go through NVRTC's thread pool into the cubin
      -- cache, where the worker's build of the same source finds them
      local ahead = {}
      for _, c in ipairs(p.candidates) do ahead[#ahead + 1] = { c = c, s = score(f, c) or 0 } end
      table.sort(ahead, function(a, b) return a.s < b.s end)
      local jobs = {}
      for j = 1, math.min(#ahead, opts.precompile) do
        local src = kernels.emit(p, ahead[j].c.knobs)
        if src then jobs[#jobs + 1] = { source = src, arch = gpu.arch(gi), name = k.name .. ".cu", options = { "-std=c++17" } } end
      end
      if #jobs > 0 then nv.compile_many(jobs) end
      local best_us
      local res = search.run { candidates = p.candidates, patience = opts.patience, max_candidates = opts.max_candidates,
        seed = 1, score = function(c) return score(f, c) end,
        measure = function(c, order, online)
          local vid = db:variant(hash, c.string, tier_of(c.knobs))
          local row = db:measured(ctx, vid)
          if row then
            stats.served = stats.served + 1
          else
            row = w:call({ op = "bench", repro = repro, knobs = c.knobs, graph = opts.regime == "deploy",
              reps = opts.regime == "deploy" and 50 or 10, warmup = opts.regime == "deploy" and 5 or 2 }, opts.timeout_ms)
            local status = tunedb.STATUS[row.status] and row.status or "launch_fail"
            db:record { run_id = run_id, context_id = ctx, variant_id = vid, status = status, error = row.error,
              median_us = row.median_us, min_us = row.min_us, p20_us = row.p20_us, p80_us = row.p80_us,
              samples = row.samples, regs = row.regs, spills = row.spills, smem = row.smem, compile_ms = row.compile_ms,
              prior_offline = prior.offline(f, c.knobs, dev), prior_online = online, search_order = order }
            row.status = status
            stats.benched = stats.benched + 1
          end
          stats.status[row.status] = (stats.status[row.status] or 0) + 1
          if row.status == "ok" and row.median_us and (not best_us or row.median_us < best_us) then best_us = row.median_us end
          if sys.clock() - last > 3 then
            io.stderr:write(("  kernel %d/%d %s: %d measured, best %s\n"):format(i, #plans, k.name, order,
              best_us and ("%.1f us"):format(best_us) or "-"))
            last = sys.clock()
          end
          return row
        end }
      rows[#rows + 1] = { k.name, tostring(#p.candidates), tostring(res.measured), res.stopped,
        res.best and ("%.1f"):format(res.best.median_us) or "-", res.best_candidate and res.best_candidate.string or "no correct variant" }
      io.stderr:write(("  kernel %d/%d %s: %d measured (%s), best %s\n"):format(i, #plans, k.name, res.measured, res.stopped,
        res.best and ("%.1f us"):format(res.best.median_us) or "none"))
    end
    db:end_run(run_id)
    -- refit the online half on every ok row of this context and keep it for the next tune
    local fit = {}
    for _, r in ipairs(db:fit_rows(ctx)) do
      fit[#fit + 1] = { kind = r.kind, knobs = online.parse_knobs(r.knobs), us = r.us, offline = r.offline }
    end
    local m2 = online.fit(fit)
    online.save(m2)
    io.stderr:write(("  online half refit on %d rows: rank correlation %.2f (offline %.2f) — %s\n"):format(m2.rows,
      m2.rho_online, m2.rho_offline, m2.usable and "used next time" or "not better than the offline half, not used"))
    w:close()
    db:close()
    if not opts.dump_dir then os.execute("rm -rf '" .. dir:gsub("'", "") .. "'") end
    print()
    tbl.print { header = { "kernel", "candidates", "measured", "stopped by", "best µs", "best knobs" }, rows = rows,
      align = "lrrlrl" }
    local st = {}
    for s, n in pairs(stats.status) do st[#st + 1] = ("%s %d"):format(s, n) end
    table.sort(st)
    print(("\n%s: %.1f s wall, %d variants benched, %d served from the tune DB; %s (%s regime, at the hints)"):format(
      #rows == #plans and "done" or "stopped", sys.clock() - t0, stats.benched, stats.served, table.concat(st, ", "), opts.regime))
  end,
}
