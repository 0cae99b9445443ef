-- emmy eval over a small synthetic tune DB (tests/lua/test_eval.lua): every view's numbers against values worked
-- out by hand, and the one-line answers for an empty DB, an unknown kernel and another schema version.
local cjson = require "cjson"
local tunedb = require "emmy.tunedb"
local views = require "emmy.evalviews"

local T = {}
local function test(name, fn) T[#T + 1] = { name, fn } end

-- The DB: two kernels in one context (plus one row in another context, never mixed in).
--   k_linear_aaaaaa (contraction): ok rows
--     BM=64,BN=64,TMA=1   10 us  offline 12  online 11
--     BM=64,BN=128,TMA=1  12 us  offline  9  online 13   <- the offline prior's pick: rank 2/4, 1.20x
--     BM=128,BN=64,TMA=1  15 us  offline 20  online 10   <- the online prior's pick: rank 3/4, 1.50x
--     BM=128,BN=128,TMA=0 30 us  offline 25  online 30
--   and failures: 3 x launch_fail "cuLaunchKernel(k_linear_aaaaaa): CUDA_ERROR_INVALID_VALUE (grid 8x1x1)" with
--   TMA=1,BM=256 (grid sizes differ: one cluster), 1 x wrong.
--   k_rms_norm_bbbbbb (row): THREADS=128 8 us, THREADS=256 6 us (offline 5 and 7: the pick misses, 1.33x).
--   k_sdpa_cccccc (attention): scalar rows only (FLASH=0 pinned): 40 us, 50 us.
local function build(path)
  local db = assert(tunedb.open(path))
  local run = db:begin_run("emmy tune Qwen/Qwen3-Embedding-0.6B --layer 0 --dynamic seq_len@x:1 --clean --patience 4", "abc", false)
  local ctx = db:context { gpu = "Test GPU", cc = "9.0", driver = "13000", nvrtc = "13.0", regime = "deploy" }
  local other = db:context { gpu = "Other GPU", cc = "8.0", driver = "12000", nvrtc = "12.0", regime = "deploy" }
  db:kernel { hash = "aaaa", name = "k_linear_aaaaaa", ops = "contraction", features = { kind = "contraction", M = 512, N = 2048, K = 1024 } }
  db:kernel { hash = "bbbb", name = "k_rms_norm_bbbbbb", ops = "row", features = { kind = "row" } }
  db:kernel { hash = "cccc", name = "k_sdpa_cccccc", ops = "attention", features = { kind = "attention" } }
  local order = 0
  local function row(c, hash, knobs, tier, status, us, off, onl, err)
    order = order + 1
    local v = db:variant(hash, knobs, tier)
    db:record { run_id = run, context_id = c, variant_id = v, status = status, error = err, median_us = us,
      p20_us = us and us * 0.98, p80_us = us and us * 1.02, samples = us and 50, regs = 64, spills = 0, smem = 32768,
      prior_offline = off, prior_online = onl, search_order = order }
  end
  row(ctx, "aaaa", "BM=64,BN=64,TMA=1", "wgmma", "ok", 10, 12, 11)
  row(ctx, "aaaa", "BM=64,BN=128,TMA=1", "wgmma", "ok", 12, 9, 13)
  row(ctx, "aaaa", "BM=128,BN=64,TMA=1", "wgmma", "ok", 15, 20, 10)
  row(ctx, "aaaa", "BM=128,BN=128,TMA=0", "warp", "ok", 30, 25, 30)
  for i, g in ipairs { 8, 16, 32 } do
    row(ctx, "aaaa", ("BM=256,BN=%d,TMA=1"):format(32 * i), "wgmma", "launch_fail", nil, nil, nil,
      ("cuLaunchKernel(k_linear_aaaaaa): CUDA_ERROR_INVALID_VALUE (grid %dx1x1)"):format(g))
  end
  row(ctx, "aaaa", "BM=64,BN=256,TMA=0", "warp", "wrong", nil, nil, nil, "max abs 3.5 outside tolerance")
  row(ctx, "bbbb", "THREADS=128", "simt", "ok", 8, 5)
  row(ctx, "bbbb", "THREADS=256", "simt", "ok", 6, 7)
  row(ctx, "cccc", "FLASH=0,QROWS=64", "scalar", "ok", 40, 1)
  row(ctx, "cccc", "FLASH=0,QROWS=32", "scalar", "ok", 50, 2)
  row(other, "aaaa", "BM=64,BN=64,TMA=1", "wgmma", "ok", 1, 1)
  db:end_run(run)
  db:close()
end

local function opened()
  local path = tmpdir() .. "/tune.db"
  build(path)
  local db, ctx = assert(views.open(path))
  return db, ctx, path
end

test("eval views: the context with the most rows; variants fastest first, both prior picks with rank and ratio", function()
  local db, ctx = opened()
  eq(ctx.gpu, "Test GPU")
  eq(ctx.rows, 12)
  local res = views.variants(db, ctx, "linear", 10)
  eq(#res, 1)
  local k = res[1]
  eq(k.measured, 8)
  eq(k.ok, 4)
  eq(k.counts.launch_fail, 3)
  eq(k.counts.wrong, 1)
  eq(k.best_us, 10)
  eq(k.rows[1].knobs, "BM=64,BN=64,TMA=1")
  eq(k.rows[4].us, 30)
  eq(table.concat(k.varying, ","), "BM,BN,TMA")
  eq(k.pick_offline.rank, 2)
  eq(k.pick_offline.n, 4)
  check(math.abs(k.pick_offline.ratio - 1.2) < 1e-12, "offline pick 12/10")
  eq(k.pick_online.rank, 3)
  check(math.abs(k.pick_online.ratio - 1.5) < 1e-12, "online pick 15/10")
  check(not k.all_scalar, "a wgmma row exists")
  local r2 = views.variants(db, ctx, "rms_norm", 1)[1]
  eq(#r2.rows, 1, "--top 1")
  eq(r2.pick_offline.rank, 2)
  check(math.abs(r2.pick_offline.ratio - 8 / 6) < 1e-12, "8/6")
  check(r2.pick_online == nil, "no online predictions")
  local r3 = views.variants(db, ctx, "sdpa", 10)[1]
  check(r3.all_scalar, "every attention row is scalar")
  db:close()
end)

test("eval failures: clusters by kernel, status and normalized error; shared knobs that tell failures apart; repro", function()
  local db, ctx = opened()
  local res = views.failures(db, ctx)
  eq(#res, 2)
  local c = res[1]
  eq(c.kernel, "k_linear_aaaaaa")
  eq(c.status, "launch_fail")
  eq(c.count, 3, "three grid sizes, one cluster")
  eq(c.pattern, "cuLaunchKernel(K): CUDA_ERROR_INVALID_VALUE (grid NxNxN)")
  eq(c.shared[1].knob, "BM")
  eq(c.shared[1].value, 256)
  check(c.shared[1].distinguishing, "no ok row has BM=256")
  eq(c.shared[2].knob, "TMA")
  check(not c.shared[2].distinguishing, "ok rows have TMA=1 too")
  eq(#c.shared, 2, "BN differs among the failures")
  eq(c.repro, "EMMY_KNOBS=k_linear_aaaaaa:BM=256,k_linear_aaaaaa:TMA=1 emmy compile Qwen/Qwen3-Embedding-0.6B --layer 0 "
    .. "--dynamic seq_len@x:1 --kernel k_linear_aaaaaa --nvrtc")
  eq(res[2].status, "wrong")
  eq(res[2].count, 1)
  eq(views.normalize_error("cuLaunchKernel(k_rope_f6f526): x (grid 512x1x1, BLOCK=256,EPT=2 at 0x7f00)"),
    "cuLaunchKernel(K): x (grid NxNxN, KNOBS at X)")
  db:close()
end)

test("eval knobs: a value's regret per kernel, median and p90; knob pairs by interaction", function()
  local db, ctx = opened()
  local res = views.knobs(db, ctx)
  local by = {}
  for _, k in ipairs(res.knobs) do
    by[k.knob] = {}
    for _, v in ipairs(k.values) do by[k.knob][v.value] = v end
  end
  -- k_linear: best 10; BM=64 -> 10 (1.0), BM=128 -> 15 (1.5); BN=64 -> 10, BN=128 -> 12 (1.2); TMA=0 -> 30 (3.0)
  eq(by.BM[128].median, 1.5)
  eq(by.BN[128].median, 1.2)
  eq(by.TMA[0].median, 3.0)
  eq(by.TMA[1].median, 1.0)
  -- THREADS: one kernel, best 6: 128 -> 8/6; QROWS: best 40: 32 -> 1.25
  check(math.abs(by.THREADS[128].median - 8 / 6) < 1e-12, "8/6")
  eq(by.QROWS[32].p90, 1.25)
  check(by.FLASH == nil, "a knob with one value is not listed")
  -- pairs: BM x BN has the four cells 10, 12, 15, 30 (log additive residual > 0); the others fewer cells
  local top = res.pairs[1]
  eq(top.pair, "BM x BN")
  local l = { math.log(10), math.log(12), math.log(15), math.log(30) } -- (64,64) (64,128) (128,64) (128,128)
  local grand = (l[1] + l[2] + l[3] + l[4]) / 4
  local r64, r128 = (l[1] + l[2]) / 2, (l[3] + l[4]) / 2
  local c64, c128 = (l[1] + l[3]) / 2, (l[2] + l[4]) / 2
  local want = (math.abs(l[1] - (r64 + c64 - grand)) + math.abs(l[2] - (r64 + c128 - grand))
    + math.abs(l[3] - (r128 + c64 - grand)) + math.abs(l[4] - (r128 + c128 - grand))) / 4
  check(math.abs(top.interaction - want) < 1e-12, ("interaction %.6f, by hand %.6f"):format(top.interaction, want))
  db:close()
end)

test("eval online --dataset db: per half the pick's regret, rank correlation, best in the top k; aggregates", function()
  local db, ctx = opened()
  local res = views.online_db(db, ctx, nil, 1)
  local off = {}
  for _, r in ipairs(res.offline.kernels) do off[r.name] = r end
  -- k_linear offline: predictions 12, 9, 20, 25 against 10, 12, 15, 30 -> ranks (2,1,3,4) vs (1,2,3,4): rho 0.8
  check(math.abs(off.k_linear_aaaaaa.rho - 0.8) < 1e-12, tostring(off.k_linear_aaaaaa.rho))
  check(not off.k_linear_aaaaaa.hit, "top 1 is the 12 us row")
  check(math.abs(off.k_rms_norm_bbbbbb.rho + 1) < 1e-12, "inverted")
  check(off.k_sdpa_cccccc.hit and off.k_sdpa_cccccc.regret == 1, "the sdpa pick is the best")
  check(math.abs(res.offline.mean_regret - (1.2 + 8 / 6 + 1) / 3) < 1e-12, "mean regret")
  check(math.abs(res.offline.hit_rate - 1 / 3) < 1e-12, "hit rate")
  eq(#res.online.kernels, 1, "only k_linear has online predictions")
  -- online: 11, 13, 10, 30 -> ranks (2,3,1,4) vs (1,2,3,4): rho = 1 - 6*(1+1+4+0)/(4*15) = 0.4
  check(math.abs(res.online.kernels[1].rho - 0.4) < 1e-12, tostring(res.online.kernels[1].rho))
  db:close()
end)

test("emmy eval: the four views print; --json; an empty DB, an unknown kernel, another schema, no DB: one line", function()
  local _, _, path = opened()
  local c1, o1, e1 = emmy { "eval", "variants", "--kernel", "linear", "--db", path }
  eq(c1, 0, e1)
  check(o1:find("offline prior's pick: rank 2/4, 1.20x of best  <-- misses best", 1, true), o1)
  check(o1:find("online prior's pick: rank 3/4, 1.50x of best", 1, true), o1)
  local c2, o2 = emmy { "eval", "variants", "--kernel", "sdpa", "--db", path }
  check(c2 == 0 and o2:find("all rows scalar: tensor-core tier never enumerated — gate:", 1, true), o2)
  local c3, o3 = emmy { "eval", "failures", "--db", path }
  check(c3 == 0 and o3:find("all 3 rows have BM=256", 1, true) and o3:find("repro: EMMY_KNOBS=", 1, true), o3)
  check(o3:find("\nfailed rows: 4 of 12 measured (launch_fail 3, wrong 1) in 2 clusters over 1 of 3 kernels\n", 1, true), "the totals first: " .. o3)
  local c4, o4 = emmy { "eval", "knobs", "--db", path }
  check(c4 == 0 and o4:find("BM x BN", 1, true), o4)
  local c5, o5 = emmy { "eval", "online", "--db", path }
  check(c5 == 0 and o5:find("=== offline prior ===", 1, true) and o5:find("=== online prior ===", 1, true), o5)
  local c6, o6 = emmy { "eval", "failures", "--db", path, "--json" }
  local j = cjson.decode(o6)
  check(c6 == 0 and j.view == "failures" and j.result[1].count == 3 and j.totals.failed == 4 and j.totals.rows == 12, o6)
  -- one line each
  local function one_line(args, want)
    local c, _, e = emmy(args)
    check(c == 2 and e:find(want, 1, true) and not e:find("\n.", 1), table.concat(args, " ") .. ": " .. e)
  end
  one_line({ "eval", "variants", "--kernel", "nope", "--db", path }, "no kernel of")
  one_line({ "eval", "variants", "--db", tmpdir() .. "/none.db", "--kernel", "x" }, "no tune DB at")
  local empty = tmpdir() .. "/empty.db"
  assert(tunedb.open(empty)):close()
  one_line({ "eval", "failures", "--db", empty }, "has no measurements yet")
  local other = tmpdir() .. "/v9.db"
  local h = assert(require("emmy.sqlite").open(other))
  assert(h:exec(("PRAGMA application_id = %d; PRAGMA user_version = 9"):format(tunedb.APP_ID)))
  h:close()
  one_line({ "eval", "knobs", "--db", other }, "has schema version 9, written by a newer emmy")
  local foreign = tmpdir() .. "/notes.db"
  h = assert(require("emmy.sqlite").open(foreign))
  assert(h:exec("CREATE TABLE notes (t TEXT)"))
  h:close()
  one_line({ "eval", "knobs", "--db", foreign }, "is a SQLite database of another program")
  one_line({ "eval", "sideways" }, "unknown view 'sideways'")
end)

test("emmy repl --db: the tune DB with helpers (kernels, variants, failures, sql); a missing DB is one line", function()
  local _, _, path = opened()
  local code, out, err = emmy({ "repl", "--db", path }, { stdin = table.concat({
    "for _, k in ipairs(db:kernels()) do print('K', k.name, k.measured, k.ok, k.best_us) end",
    "print('V', db:variants{kernel = 'linear'}[1].pick_offline.rank)",
    "print('F', db:failures()[1].count)",
    "print('S', db:sql('SELECT COUNT(*) AS n FROM measurements WHERE status = ?', 'ok')[1].n)",
  }, "\n") .. "\n" })
  eq(code, 0, err)
  check(out:find("K\tk_linear_aaaaaa\t8\t4\t10", 1, true) and out:find("K\tk_sdpa_cccccc\t2\t2\t40", 1, true), out)
  check(out:find("V\t2", 1, true) and out:find("F\t3", 1, true) and out:find("S\t9", 1, true), out)
  local c2, _, e2 = emmy { "repl", "--db", tmpdir() .. "/none.db" }
  check(c2 == 2 and e2:find("no tune DB at", 1, true) and not e2:find("\n.", 1), e2)
end)

test("eval online --blame and --ablate on a real projection's facts: the features that pushed a wrong pick, BLIND, Δ regret", function()
  local frontend, compiler, kernels, prior = require "emmy.frontend", require "emmy.compiler", require "emmy.kernels", require "emmy.prior"
  local g = frontend.load("Qwen/Qwen3-Embedding-0.6B", { layer = 0, dynamic = { "seq_len@x:1" } }).graph
  local p
  local apart = {} -- (q_proj apart from k and v: MERGE_SIBLINGS=0)
  for key, v in pairs(compiler.STRUCTURAL) do apart[key] = v end
  apart.MERGE_SIBLINGS = 0
  for _, q in ipairs(kernels.plan(compiler.run(g, { knobs = apart }))) do if q.kernel.name == "k_linear_7363a2" then p = q end end
  local dev = kernels.device()
  -- the lowest-cost candidate L, another with different features O, and L with only RASTER changed (same features)
  local scored = {}
  for _, c in ipairs(p.candidates) do scored[#scored + 1] = { c = c, cost = prior.offline(p.facts, c.knobs, dev) } end
  table.sort(scored, function(a, b) return a.cost < b.cost end)
  local L, O, Lr = scored[1].c, nil, nil
  for _, x in ipairs(scored) do
    local same_but_raster, differs = true, false
    for key, v in pairs(x.c.knobs) do
      if L.knobs[key] ~= v then differs = true if key ~= "RASTER" then same_but_raster = false end end
    end
    if differs and same_but_raster and not Lr then Lr = x.c end
    if not same_but_raster and x.c.knobs.BM ~= L.knobs.BM and not O then O = x.c end
  end
  assert(O and Lr, "candidates found")
  local path = tmpdir() .. "/blame.db"
  local db = assert(tunedb.open(path))
  local run = db:begin_run("emmy tune x", "abc", false)
  local ctx = db:context { gpu = "Test GPU", cc = "9.0", driver = "13000", nvrtc = "13.0", regime = "deploy" }
  db:kernel { hash = "h1", name = "k_linear_7363a2", ops = "contraction", features = p.facts }
  db:kernel { hash = "h2", name = "k_linear_blind00", ops = "contraction", features = p.facts }
  local function row(hash, c, us, order)
    db:record { run_id = run, context_id = ctx, variant_id = db:variant(hash, c.string, "wgmma"), status = "ok", median_us = us,
      p20_us = us, p80_us = us, samples = 50, prior_offline = prior.offline(p.facts, c.knobs, dev), search_order = order }
  end
  row("h1", L, 20, 1) row("h1", O, 10, 2)     -- the offline pick L is 2x the best O
  row("h2", L, 20, 1) row("h2", Lr, 10, 2)    -- L and Lr differ in RASTER alone: a feature now (raster), not BLIND
  -- L and Ls differ in a knob the featurizer does not see (STAMP, never offered by a rule): BLIND
  local Ls = { string = L.string .. ",STAMP=1", knobs = {} }
  for key, v in pairs(L.knobs) do Ls.knobs[key] = v end
  Ls.knobs.STAMP = 1
  db:kernel { hash = "h3", name = "k_linear_blind01", ops = "contraction", features = p.facts }
  row("h3", L, 20, 1) row("h3", Ls, 10, 2)
  db:end_run(run)
  db:close()
  local vdb, vctx = assert(views.open(path))
  local bl = views.blame(vdb, vctx)
  eq(#bl, 3)
  local by = {}
  for _, b in ipairs(bl) do by[b.name] = b end
  local b1 = by.k_linear_7363a2
  eq(b1.ratio, 2)
  check(not b1.blind and #b1.pushes > 0, "features differ")
  -- by hand: swap each feature of L to O's value and re-cost; the largest rise first
  local fL, fO = prior.features(p.facts, L.knobs, dev), prior.features(p.facts, O.knobs, dev)
  local cost = prior.load().offline.contraction
  local want, wkey = -math.huge, nil
  for key, v in pairs(fL) do
    if fO[key] ~= v then
      local h = {}
      for k2, x in pairs(fL) do h[k2] = x end
      h[key] = fO[key]
      local d = cost(h) - cost(fL)
      if d > want then want, wkey = d, key end
    end
  end
  eq(b1.pushes[1].feature, wkey)
  check(math.abs(b1.pushes[1].push_us - want) < 1e-9, ("push %.4f, by hand %.4f"):format(b1.pushes[1].push_us, want))
  check(not by.k_linear_blind00.blind and by.k_linear_blind00.pushes[1].feature == "raster", "RASTER alone: the raster feature")
  check(by.k_linear_blind01.blind, "identical features: BLIND")
  local ab = views.ablate(vdb, vctx)
  eq(ab.kernels, 3)
  eq(ab.base_regret, 2, "both offline picks are 2x")
  for _, f in ipairs(ab.features) do check(math.abs(f.delta - (f.regret - 2)) < 1e-12, f.feature) end
  -- nodes: L and Lr differ only in RASTER (family ORDER) and the prior cannot tell them apart: the option it
  -- preferred (L, measured first) is 2x its best sibling
  local nodes = views.online_nodes(vdb, vctx)
  local order_fam
  for _, f in ipairs(nodes.offline) do if f.family == "ORDER" then order_fam = f end end
  check(order_fam and order_fam.groups == 1 and order_fam.mean == 2 and order_fam.wrong == 1, cjson.encode(nodes.offline))
  eq(nodes.offline[1].family, "ORDER", "the family that steered wrong first")
  eq(#nodes.online, 0, "no online predictions")
  vdb:close()
  local code, out, err = emmy({ "eval", "online", "--db", path, "--blame", "--ablate" },
    { env = "EMMY_ONLINE_FILE=" .. shell_quote(tmpdir() .. "/none.json") })
  eq(code, 0, err)
  check(out:find("BLIND: the pick's and the best's features are identical", 1, true) and out:find("ablation (offline half, 3 kernels)", 1, true), out)
  -- blame per prior half: the online half's says why it has nothing (no saved online half here)
  check(out:find("blame (offline half)", 1, true) and out:find("blame (online half)", 1, true), out)
  check(out:find("no usable online half (EMMY_ONLINE_FILE)", 1, true), out)
  check(out:find("ablation (online half): no usable online half", 1, true), out)
  local c2, o2, e2 = emmy { "eval", "online", "--db", path, "--dataset", "nodes" }
  eq(c2, 0, e2)
  check(o2:find("ORDER%s+1%s+2%.000x%s+2%.00x%s+1%s+steered the search wrong most"), o2)
end)

return T
