-- reports/tune_findings.lua — the findings report of a tune-model run (scripts/workflows/tune_model.lua), as a Lua
-- template: render(d) -> markdown. d = {run (the workflow's run.json), tune (dump/tune.json), whole
-- (dump/60_bench_compare.json), bench (dump/62_kernel_bench.json), findings, fine (emmy.triage.classify),
-- dominating = {names, us}, online (eval online's result), work (the work dir)}. Every number says its regime and
-- comes from one of those files; prose is wrapped at 120 columns (tables may overflow). Edit freely: no rebuild.
local R = {}
local bench_rows = require "emmy.bench" -- (torch's best on a row, a kernel list's sum)

local function wrap(text, width, indent)
  width, indent = width or 120, indent or ""
  local out, line = {}, indent
  for word in text:gmatch("%S+") do
    if #line + #word + 1 > width and line ~= indent then
      out[#out + 1] = line
      line = indent .. word
    else
      line = line == indent and (indent .. word) or (line .. " " .. word)
    end
  end
  if line ~= indent then out[#out + 1] = line end
  return table.concat(out, "\n")
end
R.wrap = wrap

local function f1(x) return x and ("%.1f"):format(x) or "-" end
local function ratio(x) return x and ("%.2fx"):format(x) or "-" end

-- A report being written: w.add(line) (nil: an empty line), w.para(text) (wrapped, then an empty line).
local function writer()
  local L = {}
  local w = { lines = L }
  function w.add(s) L[#L + 1] = s or "" end
  function w.para(s) w.add(wrap(s)) w.add() end
  return w
end

-- The title and the run's facts: status, command, date, re-runs, shapes, scope, the tune's totals, the regime.
local function header(w, d)
  local add, para = w.add, w.para
  local run, tune, whole = d.run or {}, d.tune or {}, d.whole or {}
  local what = run.whole and "whole model" or ("layer " .. tostring(run.layer or 0))
  add(("# %s — %s tune findings"):format(run.model or "?", what))
  add()
  local status = #(d.findings or {}) == 0 and "every kernel within 1.10x of torch's best" or
    ("%d finding%s"):format(#d.findings, #d.findings == 1 and "" or "s")
  local g = d.gap
  if g and g.ratio > 1.10 then
    status = ("emmy's whole %s is %s %s's (%s against %s µs); %s"):format(run.whole and "model" or "layer", ratio(g.ratio),
      g.torch_backend, f1(g.emmy_us), f1(g.torch_us), status)
  end
  add(("- **Status:** %s"):format(status))
  add(("- **Command:** `%s`"):format(run.command or "?"))
  add(("- **Date:** %s; **GPU:** %s; emmy %s"):format(run.date or "?", run.gpu or "?", run.emmy or "?"))
  for i = math.max(1, #(run.reruns or {}) - 2), #(run.reruns or {}) do
    local r = run.reruns[i]
    add(("- **Re-run from %s:** `%s` (%s)"):format(r.from or "?", r.command or "?", r.date or "?"))
  end
  add(("- **Shapes:** %s"):format(run.static and "static (--static)" or ("dynamic seq_len, benched at %s"):format(whole.at or "?")))
  if not run.whole then
    -- (what a layer's numbers do not say: the serving comparison is the whole model's)
    add(("- **Scope:** layer %s alone: the served comparison (requests a second through emmy against a stock server)"
      .. " needs the whole model, and these picks are the layer's kernels at its hint — to serve tuned kernels, tune the"
      .. " served graph (`emmy serve MODEL --dump-graph FILE` prints how) and serve with `--picks`"):format(tostring(run.layer or 0)))
  end
  local t = {}
  for st, n in pairs(tune.recorded or {}) do t[#t + 1] = ("%s %d"):format(st, n) end
  table.sort(t)
  add(("- **Tune:** %s s wall, %s variants benched, %s served from the DB; status split: %s"):format(f1(tune.wall_s),
    tostring(tune.benched or "-"), tostring(tune.served or "-"), #t > 0 and table.concat(t, ", ") or "-"))
  add()
  para(("Regime: every time below is %s. The tune's own rows (deploy regime with an L2 flush between samples) are"
    .. " higher than these L2-warm bench rows; the two are never mixed."):format(whole.regime or "?"))
end

-- "Where emmy stands": the whole layer (model) by backend, and a row a kernel against torch.
local function standing(w, d)
  local add = w.add
  local whole, bench = d.whole or {}, d.bench or {}
  add("## Where emmy stands")
  add()
  add("| backend | µs | p20–p80 | vs eager (above 1: faster) |")
  add("| --- | ---: | ---: | ---: |")
  for _, x in ipairs(whole.whole or {}) do
    local st = x.stats
    add(("| %s | %s | %s | %s |"):format(x.backend, f1(st and st.median_us), st and ("%s–%s"):format(f1(st.p20_us), f1(st.p80_us)) or "-",
      ratio(x.speedup_vs_eager)))
  end
  add()
  add("| kernel | layer op | coverage | emmy µs | in program µs | eager µs | torch.compile µs | torch's best / emmy | cum | torch's kernels µs |")
  add("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
  for _, k in ipairs(bench.kernels or {}) do
    local e = k.emmy and k.emmy.median_us
    local b, who = bench_rows.torch_best(k)
    -- the kernel durations of torch's best on the reproducer (torch.profiler), with their count
    local ks, kn = bench_rows.kernels_us(who and k[who].kernels)
    add(("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |"):format(k.name, k.layer_op or "?", k.coverage or "?", f1(e), f1(k.in_program_us),
      f1(k.eager and k.eager.median_us), f1(k.tcompile and k.tcompile.median_us), ratio(e and b and b / e),
      k.cum_share and ("%.0f%%"):format(100 * k.cum_share) or "-", ks and ("%.1f (%g)"):format(ks, kn) or "-"))
  end
  add()
  w.para("torch's kernels µs: the durations of the kernels torch's best runs for that reproducer (launch gaps not"
    .. " counted): beside a one-kernel emmy row, the like-for-like number.")
end

-- The emmy row of a bench-compare file's whole-graph table: its median µs, or nil.
local function whole_emmy(bc)
  for _, x in ipairs((bc or {}).whole or {}) do
    if x.backend == "emmy" and x.stats then return x.stats.median_us end
  end
  return nil
end

-- "Tuned against the rules' defaults" (issue 22's checks): each kernel's tuned time against its default's (the
-- workflow's dynamic/ bench of the layer as the rules give it; the same L2-warm regime), the whole layer both ways,
-- and where in its search the tune found each pick (dump/tune.json: the default's and the pick's deploy-regime µs,
-- rows measured, the pick's row), and with the workflow's --long search (long/tune.json) each pick against the
-- best that search found, the same DB and regime. Nothing without either (a static run without --long).
local function against_defaults(w, d)
  if not d.dynamic and not d.long then return end
  local add = w.add
  local by, picks, long = {}, {}, {}
  for _, k in ipairs((d.dynamic or {}).kernels or {}) do by[k.name] = k.emmy and k.emmy.median_us end
  for _, p in ipairs((d.tune or {}).kernels or {}) do picks[p.name] = p end
  for _, p in ipairs((d.long or {}).kernels or {}) do long[p.name] = p end
  add("## Tuned against the rules' defaults")
  add()
  add("| kernel | default µs | tuned µs | tuned / default | tune (deploy): default → pick µs | rows measured | pick's row | stopped by |"
    .. (d.long and " long search's best µs (rows) | pick / it |" or ""))
  add("| --- | ---: | ---: | ---: | --- | ---: | ---: | --- |" .. (d.long and " ---: | ---: |" or ""))
  local over, at, far, same, spread = {}, {}, {}, 0, {}
  for _, k in ipairs((d.bench or {}).kernels or {}) do
    local t, u, p, l = k.emmy and k.emmy.median_us, by[k.name], picks[k.name] or {}, long[k.name] or {}
    -- (a pick at row 1 is the rules' default itself, measured first: its tuned / default is the bench's spread)
    if p.best_at == 1 then
      same = same + 1
      if t and u and math.abs(t / u - 1) > 0.02 then spread[#spread + 1] = ("%s (%s)"):format(k.name, ratio(t / u)) end
    elseif t and u and t > u then over[#over + 1] = ("%s (%s)"):format(k.name, ratio(t / u)) end
    if p.best_at then at[#at + 1] = p.best_at end
    local r = p.best_us and l.best_us and p.best_us / l.best_us
    if r and r > 1.05 then far[#far + 1] = ("%s (%s)"):format(k.name, ratio(r)) end
    add(("| %s | %s | %s | %s | %s → %s | %s | %s | %s |"):format(k.name, f1(u), f1(t), ratio(t and u and t / u), f1(p.default_us),
      f1(p.best_us), tostring(p.measured or "-"), tostring(p.best_at or "-"), p.stopped or "-")
      .. (d.long and (" %s (%s) | %s |"):format(f1(l.best_us), tostring(l.measured or "-"), ratio(r)) or ""))
  end
  add()
  if d.long then
    w.para(("The long search (the workflow's --long: the same DB, %s regime) found a variant more than 5%% faster than the"
      .. " tune's pick for: %s."):format(d.long.regime or "deploy", #far > 0 and table.concat(far, ", ") or "no kernel"))
  end
  local tw, uw = whole_emmy(d.whole), whole_emmy(d.dynamic_whole)
  local m = bench_rows.median(at)
  w.para(("The whole %s: tuned %s µs against the defaults' %s (%s). %d of %d picks are the rules' default itself, so"
    .. " their tuned / default is the L2-warm bench's run-to-run spread (about 1-2%%; over 2%%: %s); the other picks"
    .. " over their default's time: %s. The median kernel's pick was its search's row %s%s."):format(
    (d.run or {}).whole and "model" or "layer", f1(tw), f1(uw), ratio(tw and uw and tw / uw), same, #((d.bench or {}).kernels or {}),
    #spread > 0 and table.concat(spread, ", ") or "none", #over > 0 and table.concat(over, ", ") or "none",
    m and ("%g"):format(m) or "-", m and (" (issue 22 asks for 64 or fewer)") or ""))
end

-- Where the whole layer (model) is over 1.10x torch's: the gap, and by kind of kernel.
local function gap(w, d)
  local add, run, g = w.add, d.run or {}, d.gap
  if not (g and g.ratio > 1.10) then return end
  add(("### The whole-%s gap to %s"):format(run.whole and "model" or "layer", g.torch_backend))
  add()
  local t = {}
  for _, k in ipairs(g.kinds or {}) do
    if math.abs(k.gap_us) >= 0.5 then t[#t + 1] = ("%s %+.1f µs"):format(k.kind, k.gap_us) end
  end
  w.para(("emmy's whole %s takes %s µs against %s's %s µs (%s). %s%s"):format(run.whole and "model" or "layer",
    f1(g.emmy_us), g.torch_backend, f1(g.torch_us), ratio(g.ratio),
    #t > 0 and ("By kind of kernel (durations, launch gaps not counted), emmy against %s: %s. "):format(g.kinds_backend, table.concat(t, ", ")) or "",
    g.per_kernel_torch_us and ("The per-kernel rows below time each emmy kernel's reproducer alone: torch's best on"
      .. " those adds up to %s µs, %s its whole-graph time, because torch.compile fuses across emmy's kernel"
      .. " boundaries and a reproducer times torch on one cut of the graph.%s"):format(f1(g.per_kernel_torch_us),
      g.per_kernel_torch_us > g.torch_us and "more than" or "against",
      #(g.kinds or {}) > 0 and " The by-kind table is the like-for-like comparison." or "") or ""))
  if #(g.kinds or {}) > 0 then
    add(("| kind | emmy µs | emmy kernels | %s µs | %s kernels | emmy − %s µs |"):format(g.kinds_backend, g.kinds_backend, g.kinds_backend))
    add("| --- | ---: | ---: | ---: | ---: | ---: |")
    for _, k in ipairs(g.kinds) do
      add(("| %s | %s | %g | %s | %g | %+.1f |"):format(k.kind, f1(k.emmy_us), k.emmy_n, f1(k.torch_us), k.torch_n, k.gap_us))
    end
    add()
  end
end

-- Finding i: class and stake, symptom, evidence, root cause, repro, fix.
local function finding(w, i, f)
  local add = w.add
  add(("## Finding %d — %s"):format(i, f.title))
  add()
  if f.class == "wrong variants" then
    add("- **Class:** wrong variants; **at stake:** no time (the tune kept a correct pick), the correctness of the rest")
  else
    add(("- **Class:** %s; **at stake:** %s µs (emmy %s µs against %s's %s µs%s, %s regime)"):format(f.class, f1(f.at_stake_us),
      f1(f.emmy_us), f.torch_backend or "torch", f1(f.torch_us), (f.instances or 1) > 1 and (", x%d in the program"):format(f.instances) or "",
      "L2-warm bench"))
  end
  if f.class == "wrong variants" then
    add(("- **Symptom:** %s (%s): %d of its measured variants gave wrong results; the tune's pick is correct."):format(
      f.kernel, f.layer_op or "?", f.count or 0))
  elseif f.class == "masked guards" then
    add(("- **Symptom:** %s (%s) with a dynamic seq_len takes %s the same kernel static at the hint."):format(f.kernel,
      f.layer_op or "?", ratio(f.ratio)))
  elseif f.class == "bench failure" then
    add(("- **Symptom:** %s (%s): %s; its time does not count."):format(f.kernel, f.layer_op or "?",
      f.emmy_us and "its output is not the reference's" or "emmy's variant was not timed"))
  else
    add(("- **Symptom:** %s (%s) is %s torch's best."):format(f.kernel, f.layer_op or "?", ratio(f.ratio)))
  end
  add("- **Evidence:**")
  for _, e in ipairs(f.evidence or {}) do add((wrap(e, 120, "    "):gsub("^    ", "  - "))) end
  local function bullet(text) add((wrap(text, 120, "  "):gsub("^  ", "- "))) end
  bullet(("**Root cause:** %s"):format(f.root_cause or "?"))
  add(("- **Repro:** `%s`"):format(f.repro or "?"))
  bullet(("**Suggested fix (%s priority):** %s"):format(f.priority or "?", f.fix or "?"))
  add()
end

-- "Prior quality": each prior half's pick regret, rank and correlation a kernel.
local function prior_quality(w, d)
  local add = w.add
  add("## Prior quality")
  add()
  for _, half in ipairs { "offline", "online" } do
    local h = d.online and d.online[half]
    add(("=== %s prior ==="):format(half))
    add()
    if not h or #(h.kernels or {}) == 0 then
      add(("No row carries an %s prediction."):format(half))
    else
      add("| kernel | rows | pick regret | pick rank | rank correlation | best in top k |")
      add("| --- | ---: | ---: | ---: | ---: | --- |")
      for _, r in ipairs(h.kernels) do
        add(("| %s | %d | %s | %d | %s | %s |"):format(r.name, r.rows, ratio(r.regret), r.rank, r.rho and ("%.2f"):format(r.rho) or "-",
          r.hit and "yes" or "no"))
      end
      add()
      add(("Mean regret %s, mean rank correlation %s, best in the top %d for %.0f%% of the kernels."):format(ratio(h.mean_regret),
        h.mean_rho and ("%.2f"):format(h.mean_rho) or "-", h.k or 5, 100 * (h.hit_rate or 0)))
    end
    add()
  end
end

-- "Repro and artifacts" and "Workflow notes" (the steps' times, the run's friction notes).
local function artifacts(w, d)
  local add, run = w.add, d.run or {}
  add("## Repro and artifacts")
  add()
  add(("- Work dir: `%s` (logs of every step, `tune.db`, `dump/`)"):format(d.work or "?"))
  add("- Bench files: `dump/60_bench_compare.json`, `dump/62_kernel_bench.json`, `dump/kernels.html`")
  add("- Reproducers: `dump/tune.kernels/<kernel>.torch.json` (`emmy run --ir FILE --bench`)")
  add("- Triage data: `eval/` (the eval views as JSON), `retune/`, `profile/`; the findings as `findings.json`")
  add()
  add("## Workflow notes")
  add()
  add("| step | status | seconds |")
  add("| --- | --- | ---: |")
  for _, st in ipairs(run.steps or {}) do add(("| %s | %s | %s |"):format(st.name, st.ok and "ok" or "FAIL", f1(st.seconds))) end
  add()
  for _, n in ipairs(run.friction or {}) do add("- " .. n) end
  if #(run.friction or {}) > 0 then add() end
end

function R.render(d)
  local w = writer()
  header(w, d)
  standing(w, d)
  against_defaults(w, d)
  gap(w, d)
  if d.dominating and #d.dominating.names > 0 and (d.dominating.us or 0) > 0 then
    w.para(("Dominating kernels (~80%% of emmy's time): %s — %s µs together (in the program)."):format(
      table.concat(d.dominating.names, ", "), f1(d.dominating.us)))
  end
  for i, f in ipairs(d.findings or {}) do finding(w, i, f) end
  if #(d.fine or {}) > 0 then
    local t = {}
    for _, k in ipairs(d.fine) do t[#t + 1] = ("%s (%s)"):format(k.kernel, ratio(k.ratio)) end
    w.para("Within 1.10x of torch's best or faster (emmy µs / torch's best µs): " .. table.concat(t, ", ") .. ".")
  end
  prior_quality(w, d)
  artifacts(w, d)
  return table.concat(w.lines, "\n")
end

return R
