-- emmy.evalviews — the analysis views over a tune DB (`emmy eval …`): each view returns plain data (printed as
-- aligned text or JSON by scripts/commands/eval.lua), so tests check its numbers against values worked out by
-- hand. Rows are the latest measurement of each variant in one measuring context (the context with the most
-- rows unless one is given); rows of different contexts are never mixed.
local cjson = require "cjson"
local tunedb = require "emmy.tunedb"

local M = {}

local function parse_knobs(s)
  local t = {}
  for key, v in (s or ""):gmatch("([%w_]+)=(%-?[%d.]+)") do t[key] = tonumber(v) end
  return t
end
M.parse_knobs = parse_knobs

-- Opens a tune DB read-only (nothing is written, also on read-only media): one line when it does not exist, is
-- not a tune DB, has another schema version or is empty. Returns db, context {id, gpu, regime, rows} | nil, msg.
function M.open(path, context_id)
  local db, oerr = tunedb.open(path, { readonly = true })
  if not db then return nil, oerr end
  local ctxs = assert(db.h:rows([[SELECT c.id, c.gpu, c.cc, c.regime, COUNT(m.id) AS rows FROM contexts c
    LEFT JOIN measurements m ON m.context_id = c.id GROUP BY c.id ORDER BY rows DESC, c.id DESC]]))
  if #ctxs == 0 or ctxs[1].rows == 0 then
    db:close()
    return nil, ("%s: the tune DB has no measurements yet (run emmy tune first)"):format(path)
  end
  local ctx = ctxs[1]
  if context_id then
    ctx = nil
    for _, c in ipairs(ctxs) do if c.id == context_id then ctx = c end end
    if not ctx then
      db:close()
      return nil, ("%s: no context %d (the DB has %d)"):format(path, context_id, #ctxs)
    end
  end
  return db, ctx
end

-- The latest row of every variant of the kernels whose name contains substr (all when nil), grouped by kernel:
-- {{hash, name, kind, facts, rows = {{knobs, knob = {K = v}, tier, status, error, us, p20, p80, regs, spills, smem,
-- offline, online, order}}}} in the order of the kernels' first measurement.
function M.kernels(db, ctx, substr)
  local rows = assert(db.h:rows([[SELECT k.hash, k.name, k.ops AS kind, k.features, v.knobs, v.tier, m.status, m.error,
      m.median_us AS us, m.p20_us AS p20, m.p80_us AS p80, m.regs, m.spills, m.smem, m.prior_offline AS offline,
      m.prior_online AS online, m.search_order AS ord, m.id
    FROM measurements m JOIN variants v ON v.id = m.variant_id JOIN kernels k ON k.hash = v.kernel_hash
    WHERE m.context_id = ? AND m.id = (SELECT MAX(m2.id) FROM measurements m2 WHERE m2.context_id = m.context_id
      AND m2.variant_id = m.variant_id)
    ORDER BY m.id]], ctx.id))
  local out, by = {}, {}
  for _, r in ipairs(rows) do
    if not substr or r.name:find(substr, 1, true) then
      local k = by[r.hash]
      if not k then
        local okf, facts = pcall(cjson.decode, r.features or "null")
        k = { hash = r.hash, name = r.name, kind = r.kind, facts = okf and facts ~= cjson.null and facts or nil, rows = {} }
        by[r.hash] = k
        out[#out + 1] = k
      end
      k.rows[#k.rows + 1] = { knobs = r.knobs, knob = parse_knobs(r.knobs), tier = r.tier, status = r.status, error = r.error,
        us = r.us, p20 = r.p20, p80 = r.p80, regs = r.regs, spills = r.spills, smem = r.smem, offline = r.offline,
        online = r.online, order = r.ord }
    end
  end
  return out
end

local function ok_rows(k)
  local t = {}
  for _, r in ipairs(k.rows) do if r.status == "ok" and r.us then t[#t + 1] = r end end
  table.sort(t, function(a, b) return a.us < b.us or (a.us == b.us and a.knobs < b.knobs) end)
  return t
end
M.ok_rows = ok_rows

-- The prior's pick among a kernel's ok rows: the row with the lowest prediction of `half` ("offline" or
-- "online"); its rank among the ok rows by measured time and its ratio to the best. nil when no row has it.
function M.prior_pick(oks, half)
  local pick
  for _, r in ipairs(oks) do
    local p = r[half]
    if p and (not pick or p < pick[half]) then pick = r end
  end
  if not pick then return nil end
  local rank
  for i, r in ipairs(oks) do if r == pick then rank = i end end
  return { row = pick, rank = rank, n = #oks, ratio = pick.us / oks[1].us }
end

-- Why a kernel has no tensor-core row: the refused verdicts of its tensor-core tier gates, evaluated on the facts
-- the tune stored (rules/tile/). Returns {{rule, file, line, reason}} (empty when a gate passed or none applies).
local TC_RULES = { warp_tier = true, wgmma_tier = true, flash_tier = true }
function M.lockout(k)
  if not k.facts then return {} end
  local rules, kernels = require "emmy.rules", require "emmy.kernels"
  local okr, ev = pcall(rules.evaluate, rules.load(), k.facts, kernels.device())
  if not okr then return { { rule = "?", file = "?", line = 0, reason = "the rules could not be evaluated: " .. tostring(ev) } } end
  local out, passed = {}, false
  for _, v in ipairs(ev.verdicts) do
    if TC_RULES[v.rule] then
      if v.ok then passed = true else out[#out + 1] = { rule = v.rule, file = v.file, line = v.line, reason = v.reason } end
    end
  end
  return passed and {} or out
end

-- eval variants: per kernel its ok rows fastest first (top n), the knobs that differ among them, counts by
-- status, both prior halves' picks, and the scalar lockout when every row is scalar.
function M.variants(db, ctx, substr, top)
  local res = {}
  for _, k in ipairs(M.kernels(db, ctx, substr)) do
    local oks = ok_rows(k)
    local counts = {}
    for _, r in ipairs(k.rows) do counts[r.status] = (counts[r.status] or 0) + 1 end
    local shown = {}
    for i = 1, math.min(top or 10, #oks) do shown[i] = oks[i] end
    -- the knobs whose value differs among the shown rows (the rest are printed once)
    local varying, fixed = {}, {}
    local first = shown[1] and shown[1].knob or {}
    local keys = {}
    for key in pairs(first) do keys[#keys + 1] = key end
    table.sort(keys)
    for _, key in ipairs(keys) do
      local same = true
      for _, r in ipairs(shown) do if r.knob[key] ~= first[key] then same = false end end
      if same then fixed[#fixed + 1] = key .. "=" .. first[key] else varying[#varying + 1] = key end
    end
    local all_scalar = #k.rows > 0
    for _, r in ipairs(k.rows) do if r.tier ~= "scalar" then all_scalar = false end end
    local tc = k.kind == "contraction" or k.kind == "attention"
    res[#res + 1] = { name = k.name, hash = k.hash, kind = k.kind, rows = shown, measured = #k.rows, ok = #oks,
      counts = counts, varying = varying, fixed = fixed, best_us = oks[1] and oks[1].us,
      pick_offline = M.prior_pick(oks, "offline"), pick_online = M.prior_pick(oks, "online"),
      all_scalar = tc and all_scalar or false, lockout = tc and all_scalar and M.lockout(k) or nil }
  end
  return res
end

-- Normalizes an error text for clustering: numbers, hex ids, kernel names and knob strings become placeholders.
function M.normalize_error(e)
  e = tostring(e or "")
  e = e:gsub("k_[%w_]+_%x%x%x%x%x%x", "K")
  e = e:gsub("%u[%u_]*=%-?%d+[%w_=,]*", "KNOBS")
  e = e:gsub("0x%x+", "X")
  e = e:gsub("%d+", "N")
  e = e:gsub("%s+", " ")
  return e
end

-- The trace flags of a tune's command line (the input and the model flags), for a repro command.
local TRACE_FLAGS = { ["--layer"] = 1, ["--dynamic"] = 1, ["--hint"] = 1, ["--pool"] = 1, ["--dtype"] = 1, ["--batch"] = 1,
  ["--static"] = 0 }
function M.trace_args(command)
  local toks = {}
  for t in (command or ""):gmatch("%S+") do toks[#toks + 1] = t end
  local out, i = {}, 1
  while toks[i] and toks[i] ~= "tune" do i = i + 1 end
  i = i + 1
  if toks[i] and not toks[i]:match("^%-") then out[#out + 1] = toks[i] i = i + 1 end
  while toks[i] do
    local n = TRACE_FLAGS[toks[i]]
    if n then
      for j = 0, n do out[#out + 1] = toks[i + j] end
      i = i + n + 1
    else
      i = i + 1
    end
  end
  return out
end

-- eval failures: failed rows clustered by (kernel, status, normalized error); per cluster its count, one error
-- text, the knob assignments every failing row shares (first those no ok row of the kernel has), and a
-- compile-only repro command with the shared knobs pinned.
function M.failures(db, ctx, substr)
  local cmd_of = {}
  for _, r in ipairs(assert(db.h:rows([[SELECT DISTINCT k.name, r.command FROM measurements m JOIN variants v ON v.id = m.variant_id
      JOIN kernels k ON k.hash = v.kernel_hash JOIN runs r ON r.id = m.run_id WHERE m.context_id = ? AND m.status <> 'ok'
      ORDER BY m.id]], ctx.id))) do cmd_of[r.name] = cmd_of[r.name] or r.command end
  local clusters, order = {}, {}
  for _, k in ipairs(M.kernels(db, ctx, substr)) do
    local oks = ok_rows(k)
    for _, r in ipairs(k.rows) do
      if r.status ~= "ok" then
        local key = k.name .. "\0" .. r.status .. "\0" .. M.normalize_error(r.error)
        local c = clusters[key]
        if not c then
          c = { kernel = k.name, status = r.status, error = r.error or "", pattern = M.normalize_error(r.error), rows = {}, oks = oks }
          clusters[key] = c
          order[#order + 1] = c
        end
        c.rows[#c.rows + 1] = r
      end
    end
  end
  local out = {}
  for _, c in ipairs(order) do
    local shared = {}
    local first = c.rows[1].knob
    local keys = {}
    for key in pairs(first) do keys[#keys + 1] = key end
    table.sort(keys)
    for _, key in ipairs(keys) do
      local same = true
      for _, r in ipairs(c.rows) do if r.knob[key] ~= first[key] then same = false break end end
      if same then
        -- does no ok row of the kernel have it? then it sets the failures apart
        local in_an_ok = false
        for _, r in ipairs(c.oks) do if r.knob[key] == first[key] then in_an_ok = true break end end
        shared[#shared + 1] = { knob = key, value = first[key], distinguishing = not in_an_ok }
      end
    end
    table.sort(shared, function(a, b)
      if a.distinguishing ~= b.distinguishing then return a.distinguishing end
      return a.knob < b.knob
    end)
    -- (a structural knob is not pinned for one kernel: the kernel's reproducer records the ones it was formed under)
    local pins, structural = {}, require("emmy.compiler").STRUCTURAL
    for _, s in ipairs(shared) do
      if structural[s.knob] == nil then pins[#pins + 1] = ("%s:%s=%s"):format(c.kernel, s.knob, s.value) end
    end
    local targs = M.trace_args(cmd_of[c.kernel])
    local repro = #targs > 0 and ("EMMY_KNOBS=%s emmy compile %s --kernel %s --nvrtc"):format(table.concat(pins, ","),
      table.concat(targs, " "), c.kernel) or nil
    out[#out + 1] = { kernel = c.kernel, status = c.status, count = #c.rows, error = c.error, pattern = c.pattern,
      shared = shared, repro = repro }
  end
  table.sort(out, function(a, b) return a.count > b.count or (a.count == b.count and a.kernel < b.kernel) end)
  return out
end

-- The totals behind the failures view: {rows = measured rows (the latest of each variant), failed, by_status =
-- {status = n}, kernels = kernels measured, failing = kernels with a failed row}.
function M.failure_totals(db, ctx, substr)
  local t = { rows = 0, failed = 0, by_status = {}, kernels = 0, failing = 0 }
  for _, k in ipairs(M.kernels(db, ctx, substr)) do
    t.kernels = t.kernels + 1
    local bad = false
    for _, r in ipairs(k.rows) do
      t.rows = t.rows + 1
      if r.status ~= "ok" then
        t.failed = t.failed + 1
        t.by_status[r.status] = (t.by_status[r.status] or 0) + 1
        bad = true
      end
    end
    if bad then t.failing = t.failing + 1 end
  end
  return t
end

local function quantile(xs, q)
  if #xs == 0 then return nil end
  local s = { unpack(xs) }
  table.sort(s)
  local pos = 1 + (#s - 1) * q
  local lo = math.floor(pos)
  local hi = math.min(#s, lo + 1)
  return s[lo] + (s[hi] - s[lo]) * (pos - lo)
end
M.quantile = quantile

-- eval knobs: per knob and value, the regret of restricting a kernel to that value (its best µs with the knob at
-- the value / its best µs overall) across the kernels that measured the value: median and p90; and the pairs of
-- knobs whose effects interact most (per kernel, the log best time of each measured value pair against an
-- additive fit of the pair's margins; the mean absolute residual, the median over kernels).
function M.knobs(db, ctx, substr)
  local per = {} -- per[knob][value] = {regrets}
  local pair_scores = {}
  for _, k in ipairs(M.kernels(db, ctx, substr)) do
    local oks = ok_rows(k)
    if #oks > 0 then
      local best = oks[1].us
      local by_kv = {}
      for _, r in ipairs(oks) do
        for key, v in pairs(r.knob) do
          by_kv[key] = by_kv[key] or {}
          if not by_kv[key][v] or r.us < by_kv[key][v] then by_kv[key][v] = r.us end
        end
      end
      local keys = {}
      for key, vals in pairs(by_kv) do
        local nv = 0
        for _ in pairs(vals) do nv = nv + 1 end
        if nv > 1 then
          keys[#keys + 1] = key
          per[key] = per[key] or {}
          for v, us in pairs(vals) do
            per[key][v] = per[key][v] or {}
            table.insert(per[key][v], us / best)
          end
        end
      end
      table.sort(keys)
      -- interactions between the knobs that vary in this kernel
      for i = 1, #keys do
        for j = i + 1, #keys do
          local a, b = keys[i], keys[j]
          local cell, ra, cb = {}, {}, {}
          for _, r in ipairs(oks) do
            local va, vb = r.knob[a], r.knob[b]
            local id = va .. "|" .. vb
            local l = math.log(r.us)
            if not cell[id] or l < cell[id].l then cell[id] = { a = va, b = vb, l = l } end
          end
          local n, sum = 0, 0
          for _, c in pairs(cell) do
            ra[c.a] = ra[c.a] or {}
            cb[c.b] = cb[c.b] or {}
            table.insert(ra[c.a], c.l)
            table.insert(cb[c.b], c.l)
            n, sum = n + 1, sum + c.l
          end
          local na, nb = 0, 0
          for _ in pairs(ra) do na = na + 1 end
          for _ in pairs(cb) do nb = nb + 1 end
          if na > 1 and nb > 1 and n >= 4 then
            local grand = sum / n
            local function mean(t) local s = 0 for _, x in ipairs(t) do s = s + x end return s / #t end
            local res = 0
            for _, c in pairs(cell) do res = res + math.abs(c.l - (mean(ra[c.a]) + mean(cb[c.b]) - grand)) end
            local key = a .. " x " .. b
            pair_scores[key] = pair_scores[key] or {}
            table.insert(pair_scores[key], res / n)
          end
        end
      end
    end
  end
  local knobs = {}
  for key, vals in pairs(per) do
    local rows = {}
    for v, regs in pairs(vals) do
      rows[#rows + 1] = { value = v, kernels = #regs, median = quantile(regs, 0.5), p90 = quantile(regs, 0.9) }
    end
    table.sort(rows, function(x, y) return x.value < y.value end)
    knobs[#knobs + 1] = { knob = key, values = rows }
  end
  table.sort(knobs, function(x, y) return x.knob < y.knob end)
  local pairs_out = {}
  for key, s in pairs(pair_scores) do
    pairs_out[#pairs_out + 1] = { pair = key, kernels = #s, interaction = quantile(s, 0.5) }
  end
  table.sort(pairs_out, function(x, y) return x.interaction > y.interaction or (x.interaction == y.interaction and x.pair < y.pair) end)
  return { knobs = knobs, pairs = pairs_out }
end

-- eval online --dataset db: per kernel and prior half, the pick's regret (the µs of the row the half predicts
-- fastest / the best µs), the rank correlation of its predictions with the measured times, and whether the best
-- row is in its top k; with aggregates (mean regret, mean rho, top-k hit rate). Only rows with a prediction of
-- that half count.
function M.online_db(db, ctx, substr, k_top)
  k_top = k_top or 5
  local out = { offline = { kernels = {} }, online = { kernels = {} } }
  for _, k in ipairs(M.kernels(db, ctx, substr)) do
    local oks = ok_rows(k)
    for _, half in ipairs { "offline", "online" } do
      local rs = {}
      for _, r in ipairs(oks) do if r[half] then rs[#rs + 1] = r end end
      if #rs > 0 then
        local pick = M.prior_pick(rs, half)
        local xs, ys = {}, {}
        for i, r in ipairs(rs) do xs[i], ys[i] = r[half], r.us end
        local by_pred = { unpack(rs) }
        table.sort(by_pred, function(a, b) return a[half] < b[half] end)
        local hit = false
        for i = 1, math.min(k_top, #by_pred) do if by_pred[i] == rs[1] then hit = true end end
        table.insert(out[half].kernels, { name = k.name, rows = #rs, regret = pick.ratio, rank = pick.rank,
          rho = #xs >= 2 and require("emmy.prior").spearman(xs, ys) or nil, hit = hit })
      end
    end
  end
  for _, half in ipairs { "offline", "online" } do
    local h = out[half]
    local n, sr, srho, nrho, hits = #h.kernels, 0, 0, 0, 0
    for _, r in ipairs(h.kernels) do
      sr = sr + r.regret
      if r.rho then srho, nrho = srho + r.rho, nrho + 1 end
      if r.hit then hits = hits + 1 end
    end
    h.mean_regret = n > 0 and sr / n or nil
    h.mean_rho = nrho > 0 and srho / nrho or nil
    h.hit_rate = n > 0 and hits / n or nil
    h.k = k_top
  end
  return out
end

-- eval online --dataset nodes: per decision family (TILE, STAGE, COPY, SPLIT, ORDER, REDUCE, WORK, … from
-- rules/tile/), the sibling regret: among rows that differ only in that family's knobs, the µs of the option the
-- prior half preferred (its lowest prediction) over the best measured sibling. Returns per half {{family, groups,
-- mean, worst, wrong (groups where the preferred option was not the best)}}, worst family first; a family at
-- 1.00x everywhere is exonerated.
function M.online_nodes(db, ctx, substr)
  local rules, kernels = require "emmy.rules", require "emmy.kernels"
  local rl, dev = rules.load(), kernels.device()
  local acc = { offline = {}, online = {} }
  for _, k in ipairs(M.kernels(db, ctx, substr)) do
    local oks = ok_rows(k)
    local okr, ev = false, nil
    if k.facts then okr, ev = pcall(rules.evaluate, rl, k.facts, dev) end
    if okr and #oks > 1 then
      local fam_knobs = {}
      for key, fam in pairs(ev.family_of) do
        fam_knobs[fam] = fam_knobs[fam] or {}
        fam_knobs[fam][key] = true
      end
      for fam, ks in pairs(fam_knobs) do
        local groups = {}
        for _, r in ipairs(oks) do
          local parts = {}
          for key, v in pairs(r.knob) do if not ks[key] then parts[#parts + 1] = key .. "=" .. v end end
          table.sort(parts)
          local id = table.concat(parts, ",")
          groups[id] = groups[id] or {}
          table.insert(groups[id], r)
        end
        for _, grp in pairs(groups) do
          if #grp > 1 then
            local best = grp[1] -- (oks are fastest first, so each group is too)
            for _, half in ipairs { "offline", "online" } do
              local pref
              for _, r in ipairs(grp) do -- (equal predictions: the one measured first, as the tuner's order had it)
                if r[half] and (not pref or r[half] < pref[half] or (r[half] == pref[half] and (r.order or 0) < (pref.order or 0))) then
                  pref = r
                end
              end
              if pref then
                local a = acc[half][fam] or { family = fam, groups = 0, sum = 0, worst = 1, wrong = 0 }
                acc[half][fam] = a
                local reg = pref.us / best.us
                a.groups, a.sum, a.worst = a.groups + 1, a.sum + reg, math.max(a.worst, reg)
                if reg > 1 then a.wrong = a.wrong + 1 end
              end
            end
          end
        end
      end
    end
  end
  local out = {}
  for _, half in ipairs { "offline", "online" } do
    local list = {}
    for _, a in pairs(acc[half]) do
      list[#list + 1] = { family = a.family, groups = a.groups, mean = a.sum / a.groups, worst = a.worst, wrong = a.wrong }
    end
    table.sort(list, function(x, y) return x.mean > y.mean or (x.mean == y.mean and x.family < y.family) end)
    out[half] = list
  end
  return out
end

-- The offline half's features and cost of a row of kernel k (nil when the prior has no model for its kind or the
-- stored facts do not featurize).
local function featurize(k, knob)
  if not k.facts then return nil end
  local prior, kernels = require "emmy.prior", require "emmy.kernels"
  local dev = kernels.device()
  local okf, f = pcall(prior.features, k.facts, knob, dev)
  if not okf or not f then return nil end
  local fn = prior.load().offline[k.facts.kind or k.kind]
  if not fn then return nil end
  local okc, c = pcall(fn, f)
  return okc and c and f or nil, okc and c or nil, fn
end

-- The offline cost of scored row x with feature key set to value (x's own cost when the formula refuses it).
local function cost_with(x, key, value)
  local g = {}
  for k2, v in pairs(x.f) do g[k2] = v end
  g[key] = value
  local okc, c = pcall(x.fn, g)
  return okc and c or nil
end

-- A kernel's ok rows (fastest first) that the offline half can featurize: {{row, f, cost, fn}}.
local function scored_rows(k)
  local scored = {}
  for _, r in ipairs(ok_rows(k)) do
    local f, c, fn = featurize(k, r.knob)
    if f then scored[#scored + 1] = { row = r, f = f, cost = c, fn = fn } end
  end
  return scored
end

-- The row with the lowest cost_of(x); equal costs: the one measured first, as the tuner's order had it.
local function offline_pick(scored, cost_of)
  local pick, pc
  for _, x in ipairs(scored) do
    local c = cost_of(x)
    if c and (not pc or c < pc or (c == pc and (x.row.order or 0) < (pick.row.order or 0))) then pick, pc = x, c end
  end
  return pick
end

-- The saved model a prior half predicts with: nil for "offline"; for "online" the online half, or nil, why when
-- there is no usable one.
local function half_model(half)
  if half ~= "online" then return nil end
  local model = require("emmy.online").load()
  if not (model and model.usable) then return nil, "no usable online half (EMMY_ONLINE_FILE)" end
  return model
end

-- The predicted µs of half ("offline", or "online" with its saved model) for scored row x of kernel kind, with
-- feature key set to value when key is given: nil when the half has nothing to say.
local function half_cost(half, model, kind, x, key, value)
  local c = key and cost_with(x, key, value) or x.cost
  if half == "offline" or not c then return c end
  local f = x.f
  if key then
    f = {}
    for k2, v in pairs(x.f) do f[k2] = v end
    f[key] = value
  end
  return require("emmy.online").predict(model, kind, x.row.knob, c, f)
end

-- eval online --blame: per kernel whose pick by a prior half (the lowest prediction among its ok rows: the offline
-- cost, or the saved online half's prediction) is not the best row, each feature's push: the pick's prediction
-- with that feature set to the best row's value, minus its prediction (> 0: the pick's value made it look cheaper
-- than it was; the largest first). A pick whose features equal the best's is BLIND: the featurizer cannot tell them
-- apart. half: "offline" (default) or "online" (nothing without a usable online half: the second result says so).
-- Returns {{name, pick, best, ratio, blind, pushes = {{feature, pick_value, best_value, push_us}}}}.
function M.blame(db, ctx, substr, half)
  half = half or "offline"
  local model, why = half_model(half)
  if why then return {}, why end
  local out = {}
  for _, k in ipairs(M.kernels(db, ctx, substr)) do
    local scored = scored_rows(k)
    local kind = k.facts and k.facts.kind or k.kind
    for _, x in ipairs(scored) do x.half_cost = half_cost(half, model, kind, x) end
    if #scored > 1 then
      local best, pick = scored[1], offline_pick(scored, function(x) return x.half_cost end)
      if pick and pick.row.us > best.row.us then
        local pushes, blind = {}, true
        local names = {}
        for key in pairs(pick.f) do names[#names + 1] = key end
        table.sort(names)
        for _, key in ipairs(names) do
          if pick.f[key] ~= best.f[key] then
            blind = false
            local c = half_cost(half, model, kind, pick, key, best.f[key])
            if c then
              pushes[#pushes + 1] = { feature = key, pick_value = pick.f[key], best_value = best.f[key], push_us = c - pick.half_cost }
            end
          end
        end
        table.sort(pushes, function(a, b) return a.push_us > b.push_us end)
        out[#out + 1] = { name = k.name, half = half, pick = pick.row.knobs, best = best.row.knobs, ratio = pick.row.us / best.row.us,
          pick_cost = pick.half_cost, best_cost = best.half_cost, blind = blind, pushes = pushes }
      end
    end
  end
  return out
end

-- eval online --ablate: for each feature, a prior half's pick (half: "offline", the default, or "online" through its
-- saved model) re-made with that feature masked (set to its median over the kernel's rows) in every row; the Δ of
-- the mean regret over kernels (< 0: masking the feature helps — it actively misleads). Returns {half, base_regret,
-- kernels = n, features = {{feature, regret, delta}}} (largest harm first), or nil, why for an online half that is
-- not there.
function M.ablate(db, ctx, substr, half)
  half = half or "offline"
  local model, why = half_model(half)
  if why then return nil, why end
  local per = {}
  for _, k in ipairs(M.kernels(db, ctx, substr)) do
    local scored = scored_rows(k)
    local kind = k.facts and k.facts.kind or k.kind
    for _, x in ipairs(scored) do x.kind, x.half_cost = kind, half_cost(half, model, kind, x) end
    if #scored > 1 then per[#per + 1] = scored end
  end
  local function regret(scored, cost_of)
    local pick = offline_pick(scored, cost_of)
    return pick and pick.row.us / scored[1].row.us or 1
  end
  local function mean_regret(cost_of)
    if #per == 0 then return nil end
    local s = 0
    for _, scored in ipairs(per) do s = s + regret(scored, cost_of) end
    return s / #per
  end
  local base = mean_regret(function(x) return x.half_cost end)
  local names, seen = {}, {}
  for _, scored in ipairs(per) do
    for key in pairs(scored[1].f) do if not seen[key] then seen[key] = true names[#names + 1] = key end end
  end
  table.sort(names)
  local feats = {}
  for _, key in ipairs(names) do feats[#feats + 1] = { feature = key } end
  -- masked costs: per kernel and feature
  for _, scored in ipairs(per) do
    for _, key in ipairs(names) do
      local vals = {}
      for _, x in ipairs(scored) do if type(x.f[key]) == "number" then vals[#vals + 1] = x.f[key] end end
      local med = quantile(vals, 0.5)
      for _, x in ipairs(scored) do
        x.masked = x.masked or {}
        x.masked[key] = med and half_cost(half, model, x.kind, x, key, med) or x.half_cost
      end
    end
  end
  for _, ft in ipairs(feats) do
    ft.regret = mean_regret(function(x) return x.masked[ft.feature] end)
    ft.delta = ft.regret - base
  end
  table.sort(feats, function(a, b) return a.delta < b.delta or (a.delta == b.delta and a.feature < b.feature) end)
  return { half = half, base_regret = base, kernels = #per, features = feats }
end

-- The tune DB in the REPL (`emmy repl --db PATH`): an object with the views as methods. kernels() lists the
-- context's kernels {name, hash, kind, measured, ok, best_us}; variants{kernel = SUBSTR, top = N}, failures{kernel =},
-- knobs{kernel =}, online{kernel =, k =} are the eval views' data; sql(query, ...) runs a read query with bound
-- parameters; close() closes it. Returns the object or nil, msg (as M.open).
function M.repl_db(path, context_id)
  local db, ctx = M.open(path, context_id)
  if not db then return nil, ctx end
  local o = { path = path, context = ctx }
  function o:kernels()
    local out = {}
    for _, k in ipairs(M.kernels(db, ctx)) do
      local oks = ok_rows(k)
      out[#out + 1] = { name = k.name, hash = k.hash, kind = k.kind, measured = #k.rows, ok = #oks, best_us = oks[1] and oks[1].us }
    end
    return out
  end
  function o:variants(a) a = a or {} return M.variants(db, ctx, a.kernel, a.top) end
  function o:failures(a) a = a or {} return M.failures(db, ctx, a.kernel) end
  function o:knobs(a) a = a or {} return M.knobs(db, ctx, a.kernel) end
  function o:online(a) a = a or {} return M.online_db(db, ctx, a.kernel, a.k) end
  function o:sql(q, ...) return db.h:rows(q, ...) end
  function o:close() db:close() end
  return o
end

return M
