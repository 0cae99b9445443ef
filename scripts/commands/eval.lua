-- emmy eval — why a kernel is slow, from the tune DB (emmy.evalviews): its variants, its failures, the knobs'
-- regrets and the prior's quality. Aligned text, or --json for the same data.
local cjson = require "cjson"
local cli = require "emmy.cli"
local tbl = require "emmy.tbl"
local tunedb = require "emmy.tunedb"
local views = require "emmy.evalviews"

local function fmt(x, f) return x and (f or "%.1f"):format(x) or "-" end

local function print_variants(res, ctx)
  for i, k in ipairs(res) do
    if i > 1 then print("") end
    local counts = {}
    for s, n in pairs(k.counts) do counts[#counts + 1] = ("%s %d"):format(s, n) end
    table.sort(counts)
    print(("%s (%s, %s): %d variants measured (%s), best %s µs [%s regime]"):format(k.name, k.kind or "?", k.hash:sub(1, 12),
      k.measured, table.concat(counts, ", "), fmt(k.best_us), ctx.regime))
    if #k.fixed > 0 then print("  same in every row shown: " .. table.concat(k.fixed, ",")) end
    local header = { "#" }
    for _, key in ipairs(k.varying) do header[#header + 1] = key end
    for _, h in ipairs { "tier", "µs", "p20-p80", "regs", "spills", "smem", "" } do header[#header + 1] = h end
    local rows = {}
    for j, r in ipairs(k.rows) do
      local row = { tostring(j) }
      for _, key in ipairs(k.varying) do row[#row + 1] = tostring(r.knob[key] or "-") end
      local marks = {}
      if k.pick_offline and k.pick_offline.row == r then marks[#marks + 1] = "<- offline prior's pick" end
      if k.pick_online and k.pick_online.row == r then marks[#marks + 1] = "<- online prior's pick" end
      for _, v in ipairs { r.tier or "-", fmt(r.us), (r.p20 and r.p80) and ("%.1f-%.1f"):format(r.p20, r.p80) or "-",
        tostring(r.regs or "-"), tostring(r.spills or "-"), tostring(r.smem or "-"), table.concat(marks, " ") } do
        row[#row + 1] = v
      end
      rows[#rows + 1] = row
    end
    if #rows > 0 then
      local align = "r" .. ("r"):rep(#k.varying) .. "lrrrrrl"
      tbl.print { header = header, rows = rows, align = align, indent = "  " }
    end
    for _, half in ipairs { "offline", "online" } do
      local p = k["pick_" .. half]
      if p then
        print(("  %s prior's pick: rank %d/%d, %.2fx of best%s"):format(half, p.rank, p.n, p.ratio,
          p.rank > 1 and "  <-- misses best" or ""))
      end
    end
    if k.all_scalar then
      local why = {}
      for _, l in ipairs(k.lockout or {}) do why[#why + 1] = ("%s:%d: %s"):format(l.file, l.line, l.reason) end
      print(("  all rows scalar: tensor-core tier never enumerated — gate: %s"):format(#why > 0 and table.concat(why, "; ")
        or "no tensor-core gate refused on the stored facts (pinned to the scalar tier?)"))
    end
  end
end

-- "failed rows: F of M measured (wrong 3, …) in C clusters over K of N kernels"
local function totals_line(t, nclusters)
  local st = {}
  for status, n in pairs(t.by_status) do st[#st + 1] = ("%s %d"):format(status, n) end
  table.sort(st)
  return ("failed rows: %d of %d measured%s in %d cluster%s over %d of %d kernels"):format(t.failed, t.rows,
    #st > 0 and (" (" .. table.concat(st, ", ") .. ")") or "", nclusters, nclusters == 1 and "" or "s", t.failing, t.kernels)
end

local function print_failures(res, totals)
  print(totals_line(totals, #res))
  if #res == 0 then print("no failed rows") return end
  print("")
  for i, c in ipairs(res) do
    if i > 1 then print("") end
    print(("%s  %s  x%d"):format(c.kernel, c.status, c.count))
    print("  error: " .. tostring(c.error):gsub("%s+", " "):sub(1, 300))
    local dist, common = {}, {}
    for _, s in ipairs(c.shared) do
      if s.distinguishing then dist[#dist + 1] = s.knob .. "=" .. s.value else common[#common + 1] = s.knob .. "=" .. s.value end
    end
    if #dist > 0 then print(("  all %d rows have %s (no ok row of the kernel does)"):format(c.count, table.concat(dist, ","))) end
    if #common > 0 then print(("  %s %d rows also share %s (as some ok rows do)"):format(#dist > 0 and "the" or "all", c.count,
      table.concat(common, ","))) end
    if c.repro then print("  repro: " .. c.repro) end
  end
end

local function print_knobs(res)
  local rows = {}
  for _, k in ipairs(res.knobs) do
    for _, v in ipairs(k.values) do
      rows[#rows + 1] = { k.knob, tostring(v.value), tostring(v.kernels), fmt(v.median, "%.2fx"), fmt(v.p90, "%.2fx") }
    end
  end
  print("regret of a knob value: a kernel's best µs with the knob at that value / its best µs (1.00x: the value costs nothing)")
  tbl.print { header = { "knob", "value", "kernels", "median", "p90" }, rows = rows, align = "lrrrr" }
  local pr = {}
  for i, p in ipairs(res.pairs) do
    if i > 10 then break end
    pr[#pr + 1] = { p.pair, tostring(p.kernels), fmt(p.interaction, "%.3f") }
  end
  if #pr > 0 then
    print("\nknob pairs that interact most (mean |log µs - additive fit| of the pair's best rows; median over kernels)")
    tbl.print { header = { "pair", "kernels", "interaction" }, rows = pr, align = "lrr" }
  end
end

local function print_blame(bl, half, why)
  print(("\nblame (%s half): the features that pushed each wrong pick (push: the pick's predicted µs rises by this much"
    .. " when the feature takes the best row's value)"):format(half))
  if why then print("  " .. why) elseif #bl == 0 then print(("  every %s pick is the best measured row"):format(half)) end
  for _, b in ipairs(bl) do
    print(("  %s: pick %.2fx of best (predicted %.1f µs against the best's %.1f)"):format(b.name, b.ratio, b.pick_cost, b.best_cost))
    print("    pick " .. b.pick)
    print("    best " .. b.best)
    if b.blind then
      print("    BLIND: the pick's and the best's features are identical — a featurizer gap (the knobs that differ are not seen)")
    else
      for i, p in ipairs(b.pushes) do
        if i > 6 then break end
        print(("    %-14s pick %-10s best %-10s push %+.2f µs"):format(p.feature, ("%.4g"):format(p.pick_value), ("%.4g"):format(p.best_value), p.push_us))
      end
    end
  end
end

local function print_ablate(ab, half, why)
  if not ab then
    print(("\nablation (%s half): %s"):format(half, why or "nothing to ablate"))
    return
  end
  print(("\nablation (%s half, %d kernels): mean pick regret %s; each feature masked (its median over the kernel's rows)")
    :format(half, ab.kernels, fmt(ab.base_regret, "%.3fx")))
  local rows = {}
  for _, f in ipairs(ab.features) do
    rows[#rows + 1] = { f.feature, fmt(f.regret, "%.3fx"), fmt(f.delta, "%+.3f"), f.delta < -1e-9 and "actively misleading" or "" }
  end
  tbl.print { header = { "feature masked", "regret", "Δ", "" }, rows = rows, align = "lrrl", indent = "  " }
end

local function print_nodes(res)
  for _, half in ipairs { "offline", "online" } do
    print(("\n=== %s prior ==="):format(half))
    local list = res[half]
    if #list == 0 then
      print(("no sibling rows carry a%s %s prediction"):format(half == "offline" and "n" or "", half))
    else
      local rows = {}
      for _, f in ipairs(list) do
        rows[#rows + 1] = { f.family, tostring(f.groups), ("%.3fx"):format(f.mean), ("%.2fx"):format(f.worst), tostring(f.wrong),
          f.worst <= 1 and "exonerated" or (f == list[1] and "steered the search wrong most" or "") }
      end
      print("sibling regret: among rows that differ only in a family's knobs, the option this half preferred over the best sibling")
      tbl.print { header = { "family", "sibling groups", "mean", "worst", "wrong", "" }, rows = rows, align = "lrrrrl" }
    end
  end
end

local function print_online(res)
  for _, half in ipairs { "offline", "online" } do
    local h = res[half]
    print(("\n=== %s prior ==="):format(half))
    if #h.kernels == 0 then
      print(("no row carries a%s %s prediction"):format(half == "offline" and "n" or "", half))
    else
      local rows = {}
      for _, r in ipairs(h.kernels) do
        rows[#rows + 1] = { r.name, tostring(r.rows), ("%.2fx"):format(r.regret), tostring(r.rank), fmt(r.rho, "%.2f"),
          r.hit and "yes" or "no" }
      end
      tbl.print { header = { "kernel", "rows", "pick regret", "pick rank", "rho", ("best in top %d"):format(h.k) }, rows = rows,
        align = "lrrrrl" }
      print(("mean regret %.3fx, mean rank correlation %s, best in top %d for %.0f%% of kernels"):format(h.mean_regret,
        fmt(h.mean_rho, "%.2f"), h.k, 100 * h.hit_rate))
    end
    if res.blame and res.blame[half] then print_blame(res.blame[half], half, res.blame[half .. "_why"]) end
    if res.ablate then print_ablate(res.ablate[half], half, res.ablate[half .. "_why"]) end
  end
end

local VIEWS = { variants = true, failures = true, knobs = true, online = true }

return {
  summary = "analysis views over the tune DB: variants, failures, knobs, the prior's quality",
  usage = [[usage: emmy eval variants|failures|knobs|online [--kernel SUBSTR] [--db PATH] [--context N] [--json]
                 [--top N] [--k N] [--blame] [--ablate]

  variants   per kernel, its measured variants fastest first (--top N, default 10): the knobs that differ, tier,
             µs with p20-p80, registers, spills, shared memory; counts by status; each prior half's pick with its
             rank and ratio to the best ("<-- misses best"); "all rows scalar" with the tensor-core gate's reason
  failures   the totals first (failed rows of those measured, by status, clusters, kernels; --json: totals), then
             failed rows clustered by kernel, status and error (numbers and names normalized): the count, the
             error, the knobs every failing row shares, and a compile-only repro command with them pinned
  knobs      per knob value, the regret of a kernel restricted to it (median and p90 over kernels), and the
             knob pairs that interact most
  online     the prior's quality on the DB's rows (--dataset db), once per half (=== offline prior === and
             === online prior ===): per kernel the pick's regret, rank correlation, best in the top --k (5);
             --dataset nodes: per decision family, the sibling regret of the option the half preferred;
             --blame: per wrong pick of each half, the features that pushed it (BLIND: identical features);
             --ablate: the mean regret with each feature masked (Δ < 0: the feature actively misleads)
  --db PATH  the tune DB (default $EMMY_TUNE_DB, else ~/.cache/emmy/tune.db); --context N: a measuring context
             (default: the one with the most rows). An empty DB, an unknown kernel or another schema version is
             one line and exit status 2.]],
  run = function(argv)
    local view = argv[1]
    if not view or view:match("^%-") then cli.usage("eval: which view? (variants, failures, knobs, online)") end
    if not VIEWS[view] then cli.usage("eval: unknown view '%s' (variants, failures, knobs, online)", view) end
    local rest = {}
    for i = 2, #argv do rest[#rest + 1] = argv[i] end
    local opts = cli.parse(rest, { flags = { ["--kernel"] = { kind = "string" }, ["--db"] = { kind = "string" },
      ["--context"] = { kind = "int", min = 1 }, ["--json"] = { kind = "bool" }, ["--top"] = { kind = "int", default = 10, min = 1 },
      ["--dataset"] = { kind = "string", default = "db" }, ["--k"] = { kind = "int", default = 5, min = 1 },
      ["--blame"] = { kind = "bool" }, ["--ablate"] = { kind = "bool" } } }, "eval " .. view)
    if (opts.blame or opts.ablate) and view ~= "online" then cli.usage("eval %s: --blame and --ablate belong to eval online", view) end
    if view == "variants" and not opts.kernel then cli.usage("eval variants: give --kernel SUBSTR (a part of a kernel's name)") end
    if view == "online" and opts.dataset ~= "db" and opts.dataset ~= "nodes" then
      cli.usage("eval online: --dataset %s (db or nodes)", opts.dataset)
    end
    if opts.dataset == "nodes" and (opts.blame or opts.ablate) then cli.usage("eval online: --blame and --ablate go with --dataset db") end
    local path = opts.db or tunedb.default_path()
    local db, ctx = views.open(path, opts.context)
    if not db then cli.usage("eval %s: %s", view, ctx) end
    if opts.kernel and #views.kernels(db, ctx, opts.kernel) == 0 then
      db:close()
      cli.usage("eval %s: no kernel of %s (context %d) has '%s' in its name", view, path, ctx.id, opts.kernel)
    end
    local res, totals
    if view == "variants" then res = views.variants(db, ctx, opts.kernel, opts.top)
    elseif view == "failures" then
      res = views.failures(db, ctx, opts.kernel)
      totals = views.failure_totals(db, ctx, opts.kernel)
    elseif view == "knobs" then res = views.knobs(db, ctx, opts.kernel)
    elseif opts.dataset == "nodes" then
      res = views.online_nodes(db, ctx, opts.kernel)
    else
      res = views.online_db(db, ctx, opts.kernel, opts.k)
      if opts.blame then
        res.blame = {}
        for _, half in ipairs { "offline", "online" } do res.blame[half], res.blame[half .. "_why"] = views.blame(db, ctx, opts.kernel, half) end
      end
      if opts.ablate then
        res.ablate = {}
        for _, half in ipairs { "offline", "online" } do res.ablate[half], res.ablate[half .. "_why"] = views.ablate(db, ctx, opts.kernel, half) end
      end
    end
    db:close()
    if opts.json then
      if view == "variants" then -- (rows are plain; the picks point at rows: keep their rank and ratio)
        for _, k in ipairs(res) do
          for _, half in ipairs { "offline", "online" } do
            local p = k["pick_" .. half]
            if p then k["pick_" .. half] = { rank = p.rank, n = p.n, ratio = p.ratio, knobs = p.row.knobs } end
          end
        end
      end
      print(cjson.encode { view = view, db = path, context = ctx, result = res, totals = totals })
      return 0
    end
    print(("tune DB %s, context %d (%s, sm_%s, %s regime, %d rows)"):format(path, ctx.id, ctx.gpu, tostring(ctx.cc):gsub("%.", ""),
      ctx.regime, ctx.rows))
    print("")
    if view == "variants" then print_variants(res, ctx)
    elseif view == "failures" then print_failures(res, totals)
    elseif view == "knobs" then print_knobs(res)
    elseif opts.dataset == "nodes" then print_nodes(res)
    else print_online(res) end
    return 0
  end,
}
