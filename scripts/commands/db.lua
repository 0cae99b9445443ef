-- emmy db — tune DB maintenance: `emmy db merge OUT.db IN.db…` (emmy.tunedb's merge).
local cli = require "emmy.cli"
local tunedb = require "emmy.tunedb"

return {
  summary = "tune DB maintenance: merge tune DBs (shards of one tune, several machines of one kind)",
  usage = [[usage: emmy db merge OUT.db IN.db… [--force] [--refit]

  Copies every run, context, kernel, variant and measurement of the IN tune DBs into OUT (created where missing),
  each row once: merging the same rows again adds nothing, and a DB that already holds another's rows takes none
  of them twice. All of it happens in one transaction: a merge that fails or is killed midway leaves OUT as it
  was. DBs measured on another GPU, driver or NVRTC than the others (OUT's rows included) are refused, nothing
  merged, unless --force. Prints the rows each input added. --refit: then the prior's online half is refit on OUT's
  rows (the context with the most measurements) and saved where `emmy tune` keeps it ($EMMY_ONLINE_FILE), so the
  next tune on any machine starts from every shard's measurements.]],
  run = function(argv)
    local opts, pos = cli.parse(argv, { flags = { ["--force"] = { kind = "bool" }, ["--refit"] = { kind = "bool" } },
      positional = { "action", "out", "inputs..." }, required = { "action", "out" }, usage = "emmy db merge OUT.db IN.db… [--force] [--refit]" }, "db")
    if pos.action ~= "merge" then cli.usage("db: unknown action '%s' (merge)", tostring(pos.action)) end
    local ins = pos.inputs or {}
    if #ins == 0 then cli.usage("db merge: no input DB (emmy db merge OUT.db IN.db…)") end
    for _, p in ipairs(ins) do
      if p == pos.out then cli.usage("db merge: %s is both the output and an input", p) end
    end
    local res, err, code = tunedb.merge(pos.out, ins, { force = opts.force })
    if not res then
      if code == 2 then cli.usage("db merge: %s", err) end
      cli.fail("db merge: %s", err)
    end
    local tot = { runs = 0, contexts = 0, kernels = 0, variants = 0, measurements = 0 }
    for _, a in ipairs(res) do
      print(("%s: %d measurements, %d variants, %d kernels, %d contexts, %d runs added"):format(a.path, a.measurements,
        a.variants, a.kernels, a.contexts, a.runs))
      for k in pairs(tot) do tot[k] = tot[k] + a[k] end
    end
    print(("%s: %d measurements, %d variants, %d kernels, %d contexts, %d runs added from %d DBs"):format(pos.out,
      tot.measurements, tot.variants, tot.kernels, tot.contexts, tot.runs, #res))
    if opts.refit then
      local m2, rerr = require("emmy.tuner").refit_merged(pos.out)
      if not m2 then cli.fail("db merge --refit: %s (the merged DB is written)", rerr) end
      print(("online half refit on %d rows of %s (%s): %s"):format(m2.rows, pos.out, m2.context,
        m2.usable and "used by the next tune" or "not better than the offline half, not used"))
    end
    return 0
  end,
}
