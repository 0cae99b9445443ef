-- emmy.search — the tuner's search over one kernel's candidates: flat and prior-guided. Every candidate is
-- scored by the prior; the best-scored are measured first, in batches; some picks explore (drawn at random
-- from the rest, seeded) so a misleading prior cannot hide a region; after every batch the rest are re-ordered by
-- expected improvement over the best so far under an online model (emmy.online's boosted trees) fit on the rows
-- measured so far (the trees give a mean; the spread grows with a candidate's distance in knobs from the nearest
-- measured one, so unexplored regions keep a chance); the search stops after `patience`
-- measurements without a new best, when the refit expects no candidate left to improve on the best by more than
-- params.search.ei_stop ("confident"), at `max_candidates`, or when nothing is left. Measuring is the caller's
-- (a GPU bench, rows served from the tune DB, or a table of known times in a test), and so is what a failure
-- means: a row whose status is not "ok" never becomes the best.
local online = require "emmy.online"

local M = {}

-- A small deterministic generator (the same seed, the same exploration), independent of math.random's state.
local function rng(seed)
  local s = (seed or 1) % 2147483647
  if s <= 0 then s = s + 2147483646 end
  return function(n)
    s = s * 16807 % 2147483647
    return 1 + s % n
  end
end

-- The standard normal CDF (Abramowitz & Stegun 7.1.26 on erf; |error| < 1.5e-7).
local function phi_cdf(z)
  local x = math.abs(z) / math.sqrt(2)
  local t = 1 / (1 + 0.3275911 * x)
  local erf = 1 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * math.exp(-x * x)
  return z >= 0 and 0.5 * (1 + erf) or 0.5 * (1 - erf)
end

-- opts: candidates = {{knobs=, string=}, ...}; score = fn(c) -> predicted µs (lower first) | nil (last);
-- measure = fn(c, order, online) -> row {status = "ok"|..., median_us = µs, ...} (online: the model's prediction
-- for c once the online model has been fit, else nil); patience (default 24); max_candidates (default all);
-- batch (default 8); explore (share of each batch, default 0.25); seed; online = false keeps the prior's order
-- (no refit); features = fn(c) -> feature table (emmy.prior.features), extra columns for the online model;
-- params = the online hyper-parameters (default rules/prior/online.lua's; the refit reads params.search);
-- before_batch = fn({c, ...}) called with each batch's candidates before the first of them is measured;
-- default_first = true measures candidates[1] (the rules' default) first, whatever the prior says, so a search's best
-- is never slower than the default when the default is correct (the floor a tuned kernel keeps).
-- Returns {best = row|nil, best_candidate, rows = {{candidate, row, order, explored}}, measured = n,
-- stopped = "patience"|"confident"|"max_candidates"|"time"|"exhausted"}. out_of_time = fn() -> true once the kernel's time
-- is up: the search stops before its next measurement (after at least one).
-- Each unmeasured candidate's distance (e.dist): the smallest share of knobs in which it differs from a measured
-- one, folded over rows[from + 1 ..].
local function fold_distances(rows, from, scored, done)
  for j = from + 1, #rows do
    local mk = rows[j].candidate.knobs or {}
    for _, e in ipairs(scored) do
      if not done[e.i] then
        local kn, nk, diff = e.c.knobs or {}, 0, 0
        for key, v in pairs(mk) do
          nk = nk + 1
          if kn[key] ~= v then diff = diff + 1 end
        end
        local d = nk > 0 and diff / nk or 1
        if not e.dist or d < e.dist then e.dist = d end
      end
    end
  end
end

-- Each unmeasured, prior-scored candidate's predicted µs (e.adj = predict(e)) and, once there is a best (b: its log
-- µs), its expected improvement in log time (e.ei): with m = log(e.adj) and sigma = spread * (floor + e.dist),
-- EI = (b - m) Phi(z) + sigma phi(z), z = (b - m) / sigma.
local function score_ei(scored, done, predict, b, spread, floor)
  for _, e in ipairs(scored) do
    if e.s and e.s > 0 and not done[e.i] then
      e.adj = predict(e)
      if b and e.adj and e.adj > 0 then
        local sigma = spread * (floor + (e.dist or 1))
        local gain = b - math.log(e.adj)
        local z = gain / sigma
        e.ei = gain * phi_cdf(z) + sigma * math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
      end
    end
  end
end

-- The largest expected improvement among the candidates left, or nil while one of them has none.
local function largest_ei(scored, done)
  local top = 0
  for _, e in ipairs(scored) do
    if not done[e.i] then
      if not e.ei then return nil end
      top = math.max(top, e.ei)
    end
  end
  return top
end

function M.run(opts)
  local cands = opts.candidates
  local patience, batch = opts.patience or 24, opts.batch or 8
  local max_n = math.min(opts.max_candidates or #cands, #cands)
  local explore = opts.explore or 0.25
  local rand = rng(opts.seed)
  -- prior order: scored candidates by predicted time, unscored after them in their given order
  local scored = {}
  for i, c in ipairs(cands) do scored[i] = { c = c, s = opts.score and opts.score(c) or nil, i = i } end
  -- by expected improvement once the online model is fit (higher first), else by the prior's prediction (lower
  -- first); unscored last, ties in the given order
  local function by_prediction(a, b)
    if a.ei and b.ei and a.ei ~= b.ei then return a.ei > b.ei end
    local x, y = a.adj or a.s, b.adj or b.s
    if x and y then return x < y or (x == y and a.i < b.i) end
    if x or y then return x ~= nil end
    return a.i < b.i
  end
  table.sort(scored, by_prediction)
  if opts.default_first then
    for j, e in ipairs(scored) do
      if e.i == 1 then
        table.remove(scored, j)
        table.insert(scored, 1, e)
        break
      end
    end
  end
  local done, rows = {}, {}
  -- patience counts correct rows without a new best; once a best exists a failed row (a fault, a hang, a wrong
  -- answer) does not count, so planted or broken variants cannot end a search early — unless failures alone
  -- reach 4 x patience since the last best (a region that does not build)
  local best, best_c, best_at, since, fails = nil, nil, nil, 0, 0
  local next_prior = 1
  local function pick_prior()
    while next_prior <= #scored and done[scored[next_prior].i] do next_prior = next_prior + 1 end
    return scored[next_prior]
  end
  local function pick_random()
    local left = {}
    for _, e in ipairs(scored) do if not done[e.i] then left[#left + 1] = e end end
    return #left > 0 and left[rand(#left)] or nil
  end
  -- the online model, refit after every batch on the ok rows measured so far: emmy.online's trees on the log of
  -- measured / prior µs over the knobs, the log prior µs and the features when opts.features gives them; an
  -- unmeasured candidate's score becomes the model's prediction. Before params.search.min_rows ok rows, and for
  -- unscored candidates, the prior's order stands. (Ordering by the prediction measured better on the fixture
  -- than blending it with the prior by min or geometric mean; the exploration share stays seeded.)
  local P -- the hyper-parameters, read at the first refit
  local confident = false -- (refit: no candidate left is expected to improve on the best by params.search.ei_stop)
  local dist_upto = 0 -- rows[1..dist_upto] are folded into every candidate's distance (e.dist)
  local features = opts.features
  local fcache = {}
  local function feat(e)
    if not features then return nil end
    if fcache[e.i] == nil then fcache[e.i] = features(e.c) or false end
    return fcache[e.i] or nil
  end
  local function refit()
    local fit = {}
    for _, r in ipairs(rows) do
      local e = r.entry
      if r.row.status == "ok" and r.row.median_us and e.s and e.s > 0 then
        fit[#fit + 1] = { knobs = e.c.knobs or {}, us = r.row.median_us, offline = e.s, features = feat(e) }
      end
    end
    P = P or opts.params or require("emmy.prior").online_params()
    if #fit < (P.search.min_rows or 1) then return end
    local predict = online.fit_predictor(fit, P.search)
    if not predict then return end
    -- expected improvement in log time: with m = log(predicted µs), b = log(best µs) and a spread sigma,
    -- EI = (b - m) Phi(z) + sigma phi(z), z = (b - m) / sigma. sigma = the spread of the measured log times
    -- (how far apart variants of this kernel land) times (floor + the share of knobs in which the candidate
    -- differs from its nearest measured candidate): near a measured point the trees' mean is trusted, far from
    -- every one it is not. The distance is kept per candidate and updated with the rows new since the last refit.
    local sum, sum2, nfit = 0, 0, #fit
    for _, r in ipairs(fit) do local l = math.log(r.us) sum, sum2 = sum + l, sum2 + l * l end
    local spread = math.sqrt(math.max(sum2 / nfit - (sum / nfit) ^ 2, 0))
    local S = P.search
    spread = math.max(spread, S.ei_min_spread or 0.02)
    fold_distances(rows, dist_upto, scored, done)
    dist_upto = #rows
    local b = best and math.log(best.median_us)
    score_ei(scored, done, function(e) return predict(e.c.knobs or {}, e.s, feat(e)) end, b, spread, S.ei_floor or 0.25)
    table.sort(scored, by_prediction)
    next_prior = 1
    -- the prior's confidence: once every candidate left has an expected improvement and the largest is below
    -- S.ei_stop (in log time: 0.01 is about 1%), more measurements are not expected to pay
    if S.ei_stop and b and #rows >= (S.ei_stop_after or 0) then
      local top = largest_ei(scored, done)
      if top then confident = top < S.ei_stop end
    end
  end
  local stopped = "exhausted"
  while true do
    if #rows >= max_n then
      if max_n < #cands then stopped = "max_candidates" end
      break
    end
    if #rows > 0 and opts.online ~= false then refit() end
    if confident then
      stopped = "confident"
      break
    end
    local n_explore = #rows == 0 and 0 or math.floor(batch * explore + 0.5)
    local picks = {}
    for j = 1, batch do
      local e = (j > batch - n_explore) and pick_random() or pick_prior()
      if not e then break end
      done[e.i] = true
      picks[#picks + 1] = { e = e, explored = j > batch - n_explore }
    end
    if #picks == 0 then break end
    -- the caller may prepare the batch at once (the tuner compiles it in parallel before measuring it)
    if opts.before_batch then
      -- (at most the measurements patience and max_candidates leave room for)
      local cs = {}
      for i = 1, math.min(#picks, math.max(1, patience - since), max_n - #rows) do cs[i] = picks[i].e.c end
      opts.before_batch(cs)
    end
    local stop = false
    for _, p in ipairs(picks) do
      if #rows >= max_n then stopped, stop = "max_candidates", true break end
      if #rows > 0 and opts.out_of_time and opts.out_of_time() then stopped, stop = "time", true break end
      local row = opts.measure(p.e.c, #rows + 1, p.e.adj) or { status = "no_result" }
      rows[#rows + 1] = { candidate = p.e.c, row = row, order = #rows + 1, explored = p.explored, entry = p.e }
      if row.status == "ok" and row.median_us and (not best or row.median_us < best.median_us) then
        best, best_c, best_at, since, fails = row, p.e.c, #rows, 0, 0
      elseif row.status == "ok" or not best then
        since = since + 1
      else
        fails = fails + 1
      end
      if since >= patience or fails >= 4 * patience then stopped, stop = "patience", true break end
    end
    if stop then break end
  end
  return { best = best, best_candidate = best_c, best_at = best_at, rows = rows, measured = #rows, stopped = stopped }
end

return M
