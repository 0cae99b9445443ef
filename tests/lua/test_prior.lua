-- The offline prior (rules/prior/, emmy.prior) against measurement: 3022 warp-tier variants of 11 Qwen3 layer-0
-- contractions timed on the H200 (tests/fixtures/prior/). Its pick must be near each kernel's best and its order
-- must follow the measured one; the weights are data in rules/prior/ (EMMY_PRIOR=DIR reads another folder).
local cjson = require "cjson"
local prior = require "emmy.prior"

local T = {}
local function test(name, fn) T[#T + 1] = { name, fn } end

local function fixture()
  local d = cjson.decode(read_file(ROOT .. "/tests/fixtures/prior/h200_qwen3_l0_s512.json"))
  local by, order = {}, {}
  for _, r in ipairs(d.rows) do
    local name = d.kernel_order[r[1] + 1]
    local c = { MMA = 1, TM = 4, TN = 4, SPLIT_K = 1 }
    for i = 2, #d.columns - 1 do c[d.columns[i]] = r[i] end
    local fk = d.kernels[name]
    if not by[name] then
      by[name] = { k = { kind = "contraction", M = d.M, N = fk.N, K = fk.K, dual = fk.dual or false }, knobs = {}, us = {} }
      order[#order + 1] = name
    end
    local b = by[name]
    b.knobs[#b.knobs + 1] = c
    b.us[#b.us + 1] = r[#r]
  end
  return d, by, order
end

local function score(d, by, order, dir)
  local out = {}
  for _, name in ipairs(order) do
    local b = by[name]
    local pred, best, pick = {}, math.huge, 1
    for i, c in ipairs(b.knobs) do
      pred[i] = assert(prior.offline(b.k, c, d.device, dir))
      best = math.min(best, b.us[i])
      if pred[i] < pred[pick] then pick = i end
    end
    out[name] = { rho = prior.spearman(pred, b.us), ratio = b.us[pick] / best, pred = pred }
  end
  return out
end

test("the offline prior ranks measured tiles and picks near each kernel's best", function()
  local d, by, order = fixture()
  eq(#order, 11, "kernels in the fixture")
  local s = score(d, by, order)
  local sum, lines = 0, {}
  for _, name in ipairs(order) do
    local r = s[name]
    sum = sum + r.rho
    lines[#lines + 1] = ("    %-26s rho %.2f  pick %.2fx best"):format(name, r.rho, r.ratio)
    check(r.ratio <= 1.2, name .. ": the prior's pick is more than 1.2x the best measured variant")
    check(r.rho >= 0.6, name .. ": rank correlation below 0.6")
  end
  print(table.concat(lines, "\n"))
  check(sum / #order >= 0.8, ("mean rank correlation %.2f below 0.8"):format(sum / #order))
end)

test("features are plain numbers; the prior's weights are edited without a rebuild (EMMY_PRIOR)", function()
  local k = { kind = "contraction", M = 512, N = 2048, K = 1024, dual = false }
  local c = { MMA = 1, BM = 64, BN = 64, BK = 64, WM = 2, WN = 4, TM = 4, TN = 4, ASYNC = 1, STAGES = 2, TMA = 1, SPLIT_K = 1 }
  local dev = { sm_count = 132 }
  local f = assert(prior.features(k, c, dev))
  for name, v in pairs(f) do check(type(v) == "number" and v == v, name .. " is a number") end
  eq(f.tiles, 8 * 32, "tiles")
  eq(f.flops, 2 * 512 * 2048 * 1024, "flops")
  eq(prior.features({ kind = "pointwise" }, {}, dev), nil, "no model for the kind: nil")
  local base = prior.offline(k, c, dev)
  local d = tmpdir()
  sh(("cp %s/rules/prior/*.lua %s/"):format(shell_quote(ROOT), d))
  write_file(d .. "/offline.lua", read_file(d .. "/offline.lua"):gsub("fixed_us = 4.0", "fixed_us = 104.0"))
  local edited = prior.offline(k, c, dev, d)
  check(math.abs(edited - base - 100) < 1e-6, ("the edit moves the cost by 100 us: %g -> %g"):format(base, edited))
end)

test("spearman: ranks with ties", function()
  eq(prior.spearman({ 1, 2, 3, 4 }, { 10, 20, 30, 40 }), 1, "same order")
  eq(prior.spearman({ 1, 2, 3, 4 }, { 4, 3, 2, 1 }), -1, "reversed")
  check(math.abs(prior.spearman({ 1, 1, 2 }, { 5, 5, 9 }) - 1) < 1e-12, "ties")
end)

test("prior-guided search over the measured fixture: near the best in a fraction of the benches", function()
  local search = require "emmy.search"
  local d, by, order = fixture()
  local lines, measured, space, runs, within, sum = {}, 0, 0, 0, 0, 0
  for _, name in ipairs(order) do
    local b = by[name]
    local cands, truth, best = {}, {}, math.huge
    for i, c in ipairs(b.knobs) do
      cands[i] = { knobs = c, string = tostring(i) }
      truth[cands[i]] = b.us[i]
      best = math.min(best, b.us[i])
    end
    local worst, n = 1, 0
    for seed = 1, 5 do -- exploration is seeded: judge the search over several seeds, not one lucky draw
      local r = search.run { candidates = cands, patience = 24, batch = 8, seed = seed,
        score = function(c) return prior.offline(b.k, c.knobs, d.device) end,
        measure = function(c) return { status = "ok", median_us = truth[c] } end }
      local ratio = r.best.median_us / best
      runs, sum, n = runs + 1, sum + ratio, n + r.measured
      if ratio <= 1.05 then within = within + 1 end
      worst = math.max(worst, ratio)
      measured, space = measured + r.measured, space + #cands
      check(r.stopped == "patience", name .. ": stopped by " .. r.stopped)
    end
    lines[#lines + 1] = ("    %-26s %5.1f of %3d measured on average; worst of 5 seeds %.3fx the sweep's best"):format(name,
      n / 5, #cands, worst)
  end
  print(table.concat(lines, "\n"))
  print(("    %d of %d runs within 5%% of the sweep's best, mean %.3fx; %d of %d candidates measured"):format(within, runs,
    sum / runs, measured, space))
  check(within >= 0.9 * runs, "at least 90% of the runs end within 5% of the sweep's best")
  check(sum / runs <= 1.03, "on average within 3%")
  check(measured < space / 4, "far fewer measurements than the sweep")
end)

test("online half: fit on measured rows, checked on them, saved and loaded; no better than offline -> unused", function()
  local online = require "emmy.online"
  local d, by, order = fixture()
  local rows = {}
  for _, name in ipairs(order) do
    local b = by[name]
    for i, c in ipairs(b.knobs) do
      rows[#rows + 1] = { kind = "contraction", knobs = c, us = b.us[i], offline = prior.offline(b.k, c, d.device) }
    end
  end
  local m = online.fit(rows)
  print(("    %d rows: rank correlation offline %.3f, online %.3f"):format(m.rows, m.rho_offline, m.rho_online))
  check(m.usable and m.rho_online > m.rho_offline, "the online half follows the measurements better on its rows")
  local path = tmpdir() .. "/sub/online.json"
  assert(online.save(m, path))
  local m2 = assert(online.load(path))
  local c = by[order[1]].knobs[1]
  local p1, p2 = online.predict(m, "contraction", c, 10), online.predict(m2, "contraction", c, 10)
  check(math.abs(p1 - p2) < 1e-9 * p1, ("the same after a round trip: %.17g vs %.17g"):format(p1, p2))
  eq(online.load(tmpdir() .. "/none.json"), nil, "no file: no model")
  -- rows whose times are unrelated to their knobs: nothing to learn, the offline half stays in charge
  local noise = {}
  for i = 1, 40 do noise[i] = { kind = "contraction", knobs = { BM = 64 }, us = (i * 7919) % 97 + 1, offline = i } end
  local mn = online.fit(noise)
  check(not mn.usable, "a model that does not beat the offline half is not used")
  eq(online.predict(mn, "contraction", { BM = 64 }, 10), 10, "the offline prediction")
  eq(online.parse_knobs("BM=64,BN=128,TMA=1").BN, 128, "knob strings parse")
end)

test("search: failures never win, max_candidates and exhaustion stop it, the same seed explores the same way", function()
  local search = require "emmy.search"
  local cands = {}
  for i = 1, 40 do cands[i] = { string = tostring(i), knobs = { i = i } } end
  local function run(seed, max)
    return search.run { candidates = cands, patience = 100, batch = 5, seed = seed, max_candidates = max,
      score = function(c) return c.knobs.i end,
      measure = function(c) return c.knobs.i == 1 and { status = "wrong", error = "x" } or { status = "ok", median_us = 100 - c.knobs.i } end }
  end
  local r = run(3)
  eq(r.stopped, "exhausted", "all measured")
  eq(r.measured, 40, "every candidate once")
  eq(r.best_candidate.knobs.i, 40, "the fastest ok row")
  eq(r.rows[1].row.status, "wrong", "the prior's first pick failed and is a row")
  local a, b2 = run(3, 12), run(3, 12)
  eq(a.stopped, "max_candidates", "max_candidates")
  eq(a.measured, 12, "12 measured")
  local sa, sb = {}, {}
  for i = 1, 12 do sa[i], sb[i] = a.rows[i].candidate.string, b2.rows[i].candidate.string end
  eq(table.concat(sa, ","), table.concat(sb, ","), "the same seed, the same order")
end)

return T
