-- emmy.triage — the findings of a tune-model run (issue 9): every kernel meaningfully behind eager or
-- torch.compile, put into one of the four classes a performance engineer uses, from the files the workflow keeps
-- in its work dir (all plain data, so a test can triage a fixture work dir):
--   bench failure   emmy's variant was wrong or not timed (evidence: eval failures' clusters of the kernel)
--   tier lockout    every measured row is scalar (evidence: the tensor-core gate, its file:line and reason)
--   search shortfall a prior half's pick is more than 5% off the best measured row, or a re-tune of the reproducer
--                   with more patience found a faster variant (evidence: eval variants / online, the re-tune)
--   codegen quality none of the above: the best variant itself is slow (evidence: the ncu side-by-side, the CUDA)
-- and three classes beside them:
--   regime disagreement the re-tune's pick, pinned with --ab, is slower L2-warm than the rules' default by more than
--                   the tune's warm floor: it won only in the tune's L2-flushed regime (evidence: the --ab rows, the
--                   re-tune)
--   masked guards   a dynamic kernel more than 5% slower than the same layer op traced static at the hint, both
--                   the rules' default variant (evidence: both bench rows; at stake: the difference)
--   wrong variants  a kernel whose own pick is correct, but some of its measured variants gave wrong results (evidence: eval failures' clusters with the
--                   knobs every wrong row shares; a compile-only repro with those knobs pinned)
-- Findings are ordered by the µs at stake: (emmy µs - torch's best µs) x the kernel's instances; wrong variants
-- stake no time (the tune kept a correct pick) and come last, largest cluster first.
local M = {}

M.BEHIND = 1.10     -- a kernel this much slower than torch's best is meaningfully behind
M.SHORTFALL = 1.05  -- a pick this much slower than the best measured row is a search shortfall

local torch_best = require("emmy.bench").torch_best

-- Where a kernel kind's CUDA is written: {file, fn} (emitter_site finds the line).
M.EMITTERS = {
  contraction = { file = "src/emit_contraction.c", fn = "ex_k_contraction" },
  attention = { file = "src/emit_attention.c", fn = "k_flash" },
  row = { file = "src/emit_kinds.c", fn = "ex_k_row" },
  reduce = { file = "src/emit_kinds.c", fn = "ex_k_reduce" },
  pointwise = { file = "src/emit_kinds.c", fn = "ex_k_pointwise" },
}

-- "file:line (fn)" of the emitter of kernel kind `kind` in emmy's source tree at root, or nil.
function M.emitter_site(kind, root)
  local e = M.EMITTERS[kind or ""]
  if not e then return nil end
  local f = io.open((root or EMMY_HOME or ".") .. "/" .. e.file)
  if not f then return e.file .. " (" .. e.fn .. ")" end
  local n, line = 0, nil
  for l in f:lines() do
    n = n + 1
    if not line and l:match("^[%w_].-%f[%w_]" .. e.fn .. "%(") then line = n end
  end
  f:close()
  return ("%s:%s (%s)"):format(e.file, line and tostring(line) or "?", e.fn)
end

-- What ncu's side-by-side says is wrong with emmy's kernel against torch's (backend who): the counters that differ
-- most, each a short clause, largest difference first. pr: 61_ncu_metrics.json's table. Returns {clauses}.
function M.diagnose(pr, who)
  local be = pr and pr.backends or {}
  local e, t = be.emmy, be[who]
  if not e or not t then return {} end
  local out = {}
  local function num(x, k) return x and tonumber(x[k]) end
  local et, tt = num(e, "tensor_mma"), num(t, "tensor_mma")
  if et and tt and tt > 5 and et < 0.75 * tt then
    out[#out + 1] = { w = tt / math.max(et, 0.1), s = ("the tensor pipe is busy %.0f%% of the time against %s's %.0f%%: the main"
      .. " loop issues matrix instructions at a lower rate"):format(et, who, tt) }
  end
  local el, tl = num(e, "lsu"), num(t, "lsu")
  if el and tl and tl > 0 and el > 1.5 * tl then
    out[#out + 1] = { w = el / tl, s = ("%.1fx %s's load/store instructions (%d against %d): operands or results go through"
      .. " registers and shared memory in more, narrower steps"):format(el / tl, who, el, tl) }
  end
  local eo, to = num(e, "occupancy"), num(t, "occupancy")
  if eo and to and to > 0 and eo < 0.7 * to then
    out[#out + 1] = { w = to / math.max(eo, 0.1), s = ("achieved occupancy %.0f%% against %.0f%% (%s registers per thread"
      .. " against %s): too few warps in flight to hide latency"):format(eo, to, tostring(e.regs or "?"), tostring(t.regs or "?")) }
  end
  local eb, tb = num(e, "bank_conflicts"), num(t, "bank_conflicts")
  if eb and tb and eb > 1000 and eb > 4 * math.max(tb, 1) then
    out[#out + 1] = { w = eb / math.max(tb, 1), s = ("%d shared-memory bank conflicts against %d"):format(eb, tb) }
  end
  -- where emmy's warps wait most, against torch's warps on the same reason (ncu's stall ratios)
  local profile = require "emmy.profile"
  local top = profile.top_stalls(e)[1]
  local tv = top and num(t, "stall_" .. top.reason)
  if top and tv and top.value >= 0.5 and top.value > 1.5 * math.max(tv, 0.1) then
    out[#out + 1] = { w = top.value / math.max(tv, 0.1), s = ("its warps wait most on %s: %.2f warps stalled per issued instruction"
      .. " against %s's %.2f (%s)"):format(top.reason:gsub("_", " "), top.value, who, tv, profile.STALL_WHY[top.reason] or top.reason) }
  end
  local ek, tk = num(e, "kernels"), num(t, "kernels")
  if ek and tk and tk > ek then
    out[#out + 1] = { w = 1, s = ("%s runs it as %d kernels (emmy: %d)"):format(who, tk, ek) }
  end
  table.sort(out, function(a, b) return a.w > b.w end)
  local r = {}
  for _, c in ipairs(out) do r[#r + 1] = c.s end
  return r
end

-- The whole-graph gap: emmy's whole time against torch's best whole row, and by kind (60_bench_compare.json's
-- by_kind) against the backend with the kernel breakdown closest to that best. Returns {emmy_us, torch_us,
-- torch_backend, ratio, kinds = {{kind, emmy_us, emmy_n, torch_us, torch_n, gap_us}} largest gap first, per_kernel_torch_us
-- (the sum of torch's best per kernel reproducer)} or nil when emmy's whole time or torch's is missing.
function M.whole_gap(whole, bench)
  local e, t, who
  for _, w in ipairs(whole and whole.whole or {}) do
    local s = w.stats and w.stats.median_us
    if s and w.backend == "emmy" then e = s
    elseif s and (not t or s < t) then t, who = s, w.backend end
  end
  if not e or not t then return nil end
  local g = { emmy_us = e, torch_us = t, torch_backend = who, ratio = e / t, kinds = {} }
  local bk = whole.by_kind
  if bk then
    local ref
    for _, b in ipairs(bk.backends or {}) do
      if b ~= "emmy" and (not ref or b == "tcompile") then ref = b end
    end
    g.kinds_backend = ref
    for _, r in ipairs(bk.rows or {}) do
      local er, tr = r.emmy, ref and r[ref]
      if er and tr and (er.us > 0 or tr.us > 0) then
        g.kinds[#g.kinds + 1] = { kind = r.kind, emmy_us = er.us, emmy_n = er.n, torch_us = tr.us, torch_n = tr.n,
          gap_us = er.us - tr.us, i = #g.kinds }
      end
    end
    table.sort(g.kinds, function(a, b) if a.gap_us ~= b.gap_us then return a.gap_us > b.gap_us end return a.i < b.i end)
    for _, k in ipairs(g.kinds) do k.i = nil end
  end
  local sum = 0
  for _, k in ipairs(bench and bench.kernels or {}) do
    local b = torch_best(k)
    if b then sum = sum + b * (k.instances or 1) end
  end
  g.per_kernel_torch_us = sum > 0 and sum or nil
  return g
end

-- A knob string "K=V,K=V" without the structural knobs (a reproducer was formed under its own; they cannot be
-- pinned for one kernel): {"K=V", ...}.
function M.tile_knobs(knobs)
  local structural, out = require("emmy.compiler").STRUCTURAL, {}
  for kv in tostring(knobs or ""):gmatch("[^,]+") do
    local key = kv:match("^([%w_]+)=")
    if key and structural[key] == nil then out[#out + 1] = kv end
  end
  return out
end

-- The tune's pick of kernel `name` (dump/tune.json's kernels) as EMMY_KNOBS pins "name:K=V,…", so that a profile or
-- a re-bench of its reproducer runs the variant the tune chose, not the rules' default; nil without a pick.
function M.pick_pins(tune, name)
  for _, pk in ipairs(tune and tune.kernels or {}) do
    if pk.name == name and pk.best_knobs then
      local t = M.tile_knobs(pk.best_knobs)
      for i, kv in ipairs(t) do t[i] = name .. ":" .. kv end
      return #t > 0 and table.concat(t, ",") or nil
    end
  end
  return nil
end

-- The --ab rows of a re-tune's pick (work dir ab/<kernel>/63_ab.json): the default's and the first pin's.
local function ab_rows(ab)
  local def, pin
  for _, r in ipairs(ab and ab.ab or {}) do
    if r.label == "default" then def = r elseif not pin then pin = r end
  end
  return def, pin
end

-- The --ab check of a re-tune's pick: its L2-warm time over the rules' default's (both ok), or nil.
function M.ab_ratio(ab)
  local def, pin = ab_rows(ab)
  local a, b = pin and pin.status == "ok" and pin.stats and pin.stats.median_us, def and def.stats and def.stats.median_us
  return a and b and b > 0 and a / b or nil
end

-- The --ab check of a re-tune's pick (work dir ab/<kernel>/63_ab.json): an evidence line, or nil.
function M.ab_evidence(ab)
  local def, pin = ab_rows(ab)
  if not pin then return nil end
  if pin.status ~= "ok" then return ("the re-tune's pick pinned with --ab (%s): %s"):format(pin.knobs or "?", tostring(pin.status)) end
  local a, b = pin.stats and pin.stats.median_us, def and def.stats and def.stats.median_us
  return ("the re-tune's pick pinned with --ab and checked against the CPU reference: %.1f µs against the default's %s"
    .. " (%s; both L2-warm bench regime)"):format(a or 0, b and ("%.1f µs"):format(b) or "-", b and a and ("%.2fx"):format(a / b) or "-")
end

-- The emitted CUDA's lines a codegen finding quotes, from the kernel's source at path: the kernel's signature (its
-- launch bounds), the first wait on the operand ring, the first tensor-core instruction and the first store to an
-- output, each {line, text} (text trimmed to 100 characters); {} when the file is missing.
M.QUOTES = { { what = "signature", pat = "__global__" }, { what = "ring wait", pat = "em_mbar_wait%(" },
  { what = "math", pat = "mma[%._]" }, { what = "store", pat = "out%d+%[.-%] *=" } }
function M.cuda_quotes(path)
  local f = path and io.open(path, "rb")
  if not f then return {} end
  local out, found, n, body = {}, {}, 0, false
  for l in f:lines() do
    n = n + 1
    body = body or l:find("__global__", 1, true) ~= nil
    for _, q in ipairs(body and M.QUOTES or {}) do
      if not found[q.what] and l:find(q.pat) then
        found[q.what] = true
        local t = l:gsub("^%s+", "")
        out[#out + 1] = { what = q.what, line = n, text = #t > 100 and (t:sub(1, 97) .. "...") or t }
      end
    end
  end
  f:close()
  table.sort(out, function(a, b) return a.line < b.line end)
  return out
end

-- The kernel's emitted CUDA in work dir w (the compile step's dump/NN_lowering_cuda.kernels/NAME.cu), or nil.
function M.cuda_path(w, name)
  local sys = require "emmy.sys"
  for _, e in ipairs(sys.listdir(w .. "/dump") or {}) do
    local p = ("%s/dump/%s/%s.cu"):format(w, e, name)
    local f = e:match("_lowering_cuda%.kernels$") and io.open(p, "rb")
    if f then
      f:close()
      return p
    end
  end
  return nil
end

-- d: {bench = 62_kernel_bench.json's table, variants = name -> eval variants' result entry, failures = eval
-- failures' result, online = eval online's result (with blame), retunes = name -> {best_us, best_knobs},
-- profiles = name -> 61_ncu_metrics.json's table, repro_dir = the folder of the reproducers, cuda_dir}
-- Returns {{kernel, layer_op, class, title, at_stake_us, emmy_us, torch_us, torch_backend, ratio, evidence = {lines},
-- root_cause, repro, fix, priority}} ordered by µs at stake, and the kernels that are not behind.
function M.classify(d)
  local findings, fine = {}, {}
  local fails_of = {}
  for _, c in ipairs(d.failures or {}) do
    fails_of[c.kernel] = fails_of[c.kernel] or {}
    table.insert(fails_of[c.kernel], c)
  end
  -- eval online --blame: {offline = {...}, online = {...}} per prior half (an older list: the offline half's)
  local blame_of = { offline = {}, online = {} }
  local bl = d.online and d.online.blame or {}
  for _, half in ipairs { "offline", "online" } do
    for _, b in ipairs(bl[1] and (half == "offline" and bl or {}) or bl[half] or {}) do blame_of[half][b.name] = b end
  end
  for _, k in ipairs(d.bench and d.bench.kernels or {}) do
    local e = k.emmy and k.emmy.median_us
    local t, who = torch_best(k)
    local repro = ("%s/%s.torch.json"):format(d.repro_dir or "dump/tune.kernels", k.name)
    local f = { kernel = k.name, layer_op = k.layer_op, emmy_us = e, torch_us = t, torch_backend = who,
      ratio = e and t and e / t or nil, instances = k.instances or 1, evidence = {} }
    local function ev(fmt, ...) f.evidence[#f.evidence + 1] = fmt:format(...) end
    local bad_accuracy = k.accuracy and not k.accuracy:match("^ok")
    if not e or bad_accuracy then
      f.class = "bench failure"
      f.title = ("%s: emmy's variant %s"):format(k.name, bad_accuracy and ("is " .. k.accuracy) or "was not timed")
      f.at_stake_us = (t or 0) * f.instances
      for _, c in ipairs(fails_of[k.name] or {}) do
        ev("%d rows %s: %s", c.count, c.status, tostring(c.error):gsub("%s+", " "):sub(1, 160))
        if c.repro then f.repro = f.repro or c.repro end
      end
      if k.error then ev("bench: %s", k.error) end
      f.root_cause = #f.evidence > 0 and "see the failure clusters (emmy eval failures)" or "the bench row carries no error text"
      f.repro = f.repro or ("emmy run --ir %s"):format(repro)
      f.fix, f.priority = "make the failing variants correct, or gate them off with the reason", "high"
      findings[#findings + 1] = f
    elseif t and e > M.BEHIND * t then
      f.at_stake_us = (e - t) * f.instances
      local v = d.variants and d.variants[k.name]
      local rt = d.retunes and d.retunes[k.name]
      local worst_pick
      for _, half in ipairs { "offline", "online" } do
        local p = v and v["pick_" .. half]
        if p and p.ratio and p.ratio > M.SHORTFALL and (not worst_pick or p.ratio > worst_pick.ratio) then
          worst_pick = { half = half, ratio = p.ratio, rank = p.rank, n = p.n }
        end
      end
      local retune_better = rt and rt.best_us and v and v.best_us and rt.best_us < v.best_us / M.SHORTFALL
      local ab_r = M.ab_ratio(d.abs and d.abs[k.name])
      if v and v.all_scalar then
        f.class = "tier lockout"
        local l = v.lockout and v.lockout[1]
        f.title = ("%s runs the scalar tier only"):format(k.name)
        f.root_cause = l and ("%s:%d: %s"):format(l.file, l.line, l.reason) or "no tensor-core gate passed on the stored facts"
        ev("every one of its %d measured rows is scalar", v.measured or 0)
        f.repro = ("emmy compile --explain %s"):format(repro)
        f.fix, f.priority = "admit the kernel to the tensor-core tier (the gate above)", "high"
      elseif ab_r and ab_r > 1 + require("emmy.tuner").WARM_FLOOR then
        f.class = "regime disagreement"
        f.title = ("%s: the tune's pick is %.2fx the rules' default L2-warm"):format(k.name, ab_r)
        ev("%s", M.ab_evidence(d.abs[k.name]))
        if rt then ev("the re-tune (%s regime: every sample after an L2 flush) picked it at %.1f µs", rt.regime or "deploy", rt.best_us or 0) end
        f.root_cause = "the tune times each variant after an L2 flush (deploy regime: a read of twice the L2, or with "
          .. "EMMY_FLUSH=memset a memset); there the pick beats the default, but L2-warm — as the layer's replay runs "
          .. "it — it loses"
        f.repro = ("emmy run --ir %s --bench --ab %s"):format(repro, table.concat(M.tile_knobs(rt and rt.best_knobs), ","))
        f.fix, f.priority = "keep the default where the pick loses L2-warm (the tune's warm floor), or tune in the bench's "
          .. "regime (emmy tune --regime warm)", "high"
      elseif worst_pick or retune_better then
        f.class = "search shortfall"
        f.title = ("%s: the search did not find its best variant"):format(k.name)
        if worst_pick then
          ev("the %s prior's pick is rank %d/%d, %.2fx of the best measured row", worst_pick.half, worst_pick.rank, worst_pick.n, worst_pick.ratio)
        end
        if rt then
          ev("a re-tune of the reproducer with more patience: best %.1f µs (the tune's best %.1f µs; both %s regime)%s",
            rt.best_us or 0, v and v.best_us or 0, rt.regime or "deploy", retune_better and " — confirmed" or " — not confirmed")
        end
        local abl = M.ab_evidence(d.abs and d.abs[k.name])
        if abl then ev("%s", abl) end
        for _, half in ipairs { "offline", "online" } do
          local b = blame_of[half][k.name]
          if b and b.blind then ev("blame (%s half): BLIND — the pick's and the best's features are identical (a featurizer gap)", half)
          elseif b and b.pushes and b.pushes[1] then
            ev("blame (%s half): the feature %s pushed its pick most (%+.2f µs)", half, b.pushes[1].feature, b.pushes[1].push_us)
          end
        end
        f.root_cause = retune_better and "the patience-bounded search stopped before the better region"
          or ("the %s prior ranks the best variant low"):format(worst_pick and worst_pick.half or "offline")
        f.repro = ("emmy tune %s --patience 64"):format(repro)
        f.fix, f.priority = "fix the prior's features (blame) or raise the patience for this kind", retune_better and "high" or "medium"
      else
        f.class = "codegen quality"
        f.title = ("%s: its best variant is %.2fx torch's %s"):format(k.name, f.ratio, who or "time")
        local pr = d.profiles and d.profiles[k.name]
        local be = pr and pr.backends or {}
        if be.emmy then
          local function m(x, key) return x and x[key] and ("%.1f"):format(x[key]) or "-" end
          ev("ncu (%s): duration %s µs against %s's %s; achieved occupancy %s%% against %s%%; SM throughput %s%% against %s%%",
            pr.clock_control or "none", m(be.emmy, "duration_us"), who or "torch", m(be[who], "duration_us"), m(be.emmy, "occupancy"),
            m(be[who], "occupancy"), m(be.emmy, "sm"), m(be[who], "sm"))
        else
          ev("no ncu profile in the work dir (counters not permitted, or ncu missing)")
        end
        if v and v.best_us then
          ev("tune: best of %d measured variants %.1f µs (%s regime)", v.measured or 0, v.best_us, d.tune and d.tune.regime or "deploy")
        end
        local cu = d.work and M.cuda_path(d.work, k.name)
        for _, q in ipairs(M.cuda_quotes(cu)) do
          ev("emitted CUDA (the rules' default variant), %s line %d, %s: `%s`", cu:match("[^/]+/[^/]+$"), q.line, q.what, q.text)
        end
        local why = M.diagnose(pr, who)
        local site = M.emitter_site(k.kind, d.root)
        f.root_cause = (#why > 0 and (table.concat(why, "; ") .. ".") or "no counter stands out against torch's kernel (see the CUDA source).")
          .. (site and (" Emitter: " .. site) or "")
        f.repro = ("emmy run --ir %s --bench --profile"):format(repro)
        f.fix, f.priority = "a better schedule for this kernel class in the emitter", f.at_stake_us > 5 and "high" or "medium"
      end
      findings[#findings + 1] = f
    else
      fine[#fine + 1] = { kernel = k.name, emmy_us = e, torch_us = t, ratio = e and t and e / t or nil }
    end
  end
  for _, f in ipairs(M.guard_findings(d)) do findings[#findings + 1] = f end
  table.sort(findings, function(a, b) return (a.at_stake_us or 0) > (b.at_stake_us or 0) end)
  for _, f in ipairs(M.wrong_variants(d, fails_of, findings)) do findings[#findings + 1] = f end
  return findings, fine
end

M.GUARDS = 1.05 -- a dynamic kernel this much slower than its static twin at the hint pays for its guards

-- The masked-guard findings: each kernel of the dynamic layer whose static twin (the same layer op in a bench of the
-- layer traced static at the hint, work dir static/62_kernel_bench.json) is more than GUARDS faster — the price of
-- the symbolic length (masked edge tiles, guards on every row, index math on a runtime value). Both sides are the
-- rules' default variants (dynamic/62_kernel_bench.json; without it the tune's bench rows).
function M.guard_findings(d)
  local twin, out = {}, {}
  for _, k in ipairs(d.static and d.static.kernels or {}) do
    if k.layer_op and k.emmy and k.emmy.median_us then twin[k.layer_op] = k end
  end
  for _, k in ipairs((d.dynamic or d.bench or {}).kernels or {}) do
    local s, e = twin[k.layer_op or ""], k.emmy and k.emmy.median_us
    local st = s and s.emmy.median_us
    if st and e and e > M.GUARDS * st and (k.accuracy or "ok"):match("^ok") then
      local f = { kernel = k.name, layer_op = k.layer_op, class = "masked guards", emmy_us = e, torch_us = st,
        torch_backend = "static emmy", ratio = e / st, instances = k.instances or 1, evidence = {} }
      f.at_stake_us = (e - st) * f.instances
      f.title = ("%s: the dynamic seq_len costs %.2fx the same kernel static at the hint"):format(k.name, f.ratio)
      f.evidence[1] = ("dynamic %.1f µs (%s) against static %.1f µs (%s, %s): both L2-warm bench regime"):format(e, k.name, st,
        s.name, d.static.at or "the hint")
      f.root_cause = "the symbolic length's guards: masked edge tiles and a bound check on every row, index math on a"
        .. " runtime value (divisions the static kernel does by a constant)"
      f.repro = ("emmy run --ir %s/%s.torch.json --bench, against the layer traced without --dynamic"):format(d.repro_dir or
        "dump/tune.kernels", k.name)
      f.fix, f.priority = "peel the masked last tile (full tiles without guards), or specialize the kernel at the hint",
        f.at_stake_us > 2 and "high" or "medium"
      out[#out + 1] = f
    end
  end
  return out
end

-- The wrong-variants findings: a kernel with "wrong" failure clusters whose own pick is correct (a kernel already a
-- bench failure has them as its evidence), one finding a cluster, the largest first.
function M.wrong_variants(d, fails_of, findings)
  local failing, out = {}, {}
  for _, f in ipairs(findings) do if f.class == "bench failure" then failing[f.kernel] = true end end
  local layer_op = {}
  for _, k in ipairs(d.bench and d.bench.kernels or {}) do layer_op[k.name] = k.layer_op end
  for name, cs in pairs(fails_of) do
    for _, c in ipairs(failing[name] and {} or cs) do
      if c.status == "wrong" then
        local knobs, apart = {}, {}
        for _, s in ipairs(c.shared or {}) do
          knobs[#knobs + 1] = ("%s=%s"):format(s.knob, tostring(s.value))
          if s.distinguishing then apart[#apart + 1] = ("%s=%s"):format(s.knob, tostring(s.value)) end
        end
        local f = { kernel = name, layer_op = layer_op[name], class = "wrong variants", at_stake_us = 0, count = c.count,
          title = ("%s: %d variant%s gave wrong results%s"):format(name, c.count, c.count == 1 and "" or "s",
            #knobs > 0 and (" (all with " .. table.concat(knobs, ", ") .. ")") or ""),
          evidence = { ("%d rows wrong: %s"):format(c.count, tostring(c.error):gsub("%s+", " "):sub(1, 160)) } }
        if #apart > 0 then
          f.evidence[2] = ("no correct row of the kernel has %s: those knobs set the wrong rows apart"):format(table.concat(apart, ", "))
        end
        f.root_cause = "a correctness bug of the knobs the wrong rows share, or a check that does not model their"
          .. " rounding (the tune kept a correct pick, so no time is at stake)"
        f.repro = c.repro or ("emmy run --ir %s/%s.torch.json --sweep 20"):format(d.repro_dir or "dump/tune.kernels", name)
        f.fix, f.priority = "fix the emitter for these knobs or gate them off with the reason; if the check is at fault,"
          .. " document the tolerance", "high"
        out[#out + 1] = f
      end
    end
  end
  table.sort(out, function(a, b) return a.count > b.count or (a.count == b.count and a.kernel < b.kernel) end)
  return out
end

-- The dominating kernels: the fewest, largest first, that make up at least share (0.8) of emmy's time.
function M.dominating(bench, share)
  share = share or 0.8
  local out, sum = {}, 0
  for _, k in ipairs(bench and bench.kernels or {}) do
    out[#out + 1] = k.name
    sum = sum + (k.in_program_us or (k.emmy and k.emmy.median_us or 0) * (k.instances or 1))
    if k.cum_share and k.cum_share >= share then break end
  end
  return out, sum
end

-- A JSON file's value, or nil when it is missing or not JSON (a work dir's optional files).
local function read_json(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local ok, v = pcall(require("cjson").decode, f:read("*a"))
  f:close()
  return ok and v or nil
end
M.read_json = read_json

-- Everything the report needs, read from work dir w: run.json, dump/tune.json, dump/60_bench_compare.json,
-- dump/62_kernel_bench.json, eval/variants.json (kernel name -> eval variants' entry), eval/failures.json,
-- eval/online.json, retune/<kernel>/tune.json, ab/<kernel>/63_ab.json, profile/<kernel>/61_ncu_metrics.json,
-- static/ and dynamic/62_kernel_bench.json (the layer's defaults traced static at the hint and dynamic; dynamic/'s
-- 60_bench_compare.json: the untuned whole layer), long/tune.json (the workflow's --long search). Missing
-- files are empty.
-- Returns d for reports/tune_findings.lua's render, with the findings classified.
function M.from_workdir(w)
  local d = { work = w, run = read_json(w .. "/run.json") or {}, tune = read_json(w .. "/dump/tune.json") or {},
    whole = read_json(w .. "/dump/60_bench_compare.json") or {}, bench = read_json(w .. "/dump/62_kernel_bench.json") or {},
    variants = read_json(w .. "/eval/variants.json") or {}, online = (read_json(w .. "/eval/online.json") or {}).result,
    repro_dir = w .. "/dump/tune.kernels", retunes = {}, profiles = {}, abs = {},
    static = read_json(w .. "/static/62_kernel_bench.json"), dynamic = read_json(w .. "/dynamic/62_kernel_bench.json"),
    dynamic_whole = read_json(w .. "/dynamic/60_bench_compare.json"), long = read_json(w .. "/long/tune.json") }
  d.failures = (read_json(w .. "/eval/failures.json") or {}).result or {}
  for _, k in ipairs(d.bench.kernels or {}) do
    local rt = read_json(("%s/retune/%s/tune.json"):format(w, k.name))
    if rt and rt.kernels and rt.kernels[1] then
      d.retunes[k.name] = rt.kernels[1]
      d.retunes[k.name].regime = rt.regime
    end
    d.profiles[k.name] = read_json(("%s/profile/%s/61_ncu_metrics.json"):format(w, k.name))
    d.abs[k.name] = read_json(("%s/ab/%s/63_ab.json"):format(w, k.name))
  end
  d.findings, d.fine = M.classify(d)
  d.gap = M.whole_gap(d.whole, d.bench)
  local names, us = M.dominating(d.bench)
  d.dominating = { names = names, us = us }
  return d
end

return M
