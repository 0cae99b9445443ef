-- emmy.online — the online half of the prior: what the offline cost gets wrong, learned from measured rows and kept
-- across tunes in $EMMY_ONLINE_FILE (default ~/.cache/emmy/online.json). Per kernel kind, small gradient-boosted
-- regression trees (src/prior.c; hyper-parameters in rules/prior/online.lua) predict the residual
-- log(measured µs / offline µs) from the numeric knobs, log(offline µs) and, when the caller passes them, the
-- numeric features of rules/prior/features.lua; the prediction is offline µs × exp(residual). Trees can hold an
-- optimum in the middle of a knob's range and an interaction of two knobs, which a correction per knob value
-- cannot. After a fit the model checks itself: its rank correlation with the measured times must beat the offline
-- half's both on its own rows and out of fold (k-fold: every row predicted by a model fit without its fold);
-- otherwise it is marked unusable and the offline half is used.
local cjson = require "cjson"
local C = require "emmy.prior_c"
local prior = require "emmy.prior"

local M = {}
M.VERSION = 2 -- 1: the additive per-knob-value correction; its files are ignored

function M.default_path()
  local p = os.getenv("EMMY_ONLINE_FILE")
  if p and p ~= "" then return p end
  return (os.getenv("HOME") or ".") .. "/.cache/emmy/online.json"
end

-- "K=V,K=V" -> {K = V}
function M.parse_knobs(s)
  local t = {}
  for k, v in tostring(s):gmatch("([%w_]+)=(%-?%d+)") do t[k] = tonumber(v) end
  return t
end

local LOG_OFFLINE = "log_offline"

-- The model's columns for rows {knobs, features}: the numeric knob names (sorted), log_offline, then "f.NAME" for
-- the numeric features (sorted) when every row has a feature table (trees fit on a mix would learn "features
-- missing" as a signal). A fixed order, so a saved model reads the same vector back.
function M.columns(rows)
  local kn, fn, all = {}, {}, #rows > 0
  for _, r in ipairs(rows) do
    for key, v in pairs(r.knobs or {}) do if type(v) == "number" then kn[key] = true end end
    if type(r.features) ~= "table" then all = false end
    for key, v in pairs(r.features or {}) do if type(v) == "number" then fn[key] = true end end
  end
  local a, b = {}, {}
  for key in pairs(kn) do a[#a + 1] = key end
  if all then for key in pairs(fn) do b[#b + 1] = key end end
  table.sort(a)
  table.sort(b)
  a[#a + 1] = LOG_OFFLINE
  for _, key in ipairs(b) do a[#a + 1] = "f." .. key end
  return a, #b > 0
end

-- The numeric vector of one candidate over columns cols (a column it lacks is missing: NaN).
function M.vector(cols, knobs, offline_us, features)
  local x = {}
  for i, col in ipairs(cols) do
    local v
    if col == LOG_OFFLINE then v = math.log(offline_us)
    elseif col:sub(1, 2) == "f." then v = features and features[col:sub(3)]
    else v = knobs and knobs[col] end
    x[i] = type(v) == "number" and v or 0 / 0
  end
  return x
end

-- The trees of a kind's entry, loaded once per entry (a saved model is plain data; the C model is cached).
local handles = setmetatable({}, { __mode = "k" })
local function trees_of(per)
  local h = handles[per]
  if h == nil then
    -- a malformed entry (a damaged or hand-edited file) predicts nothing: the offline half
    local ok = type(per.gbt) == "table" and type(per.columns) == "table" and per.gbt.ncols == #per.columns
    h = ok and C.gbt_load(per.gbt) or false
    handles[per] = h
  end
  return h or nil
end

-- The prediction for a candidate: offline µs corrected, or the offline µs when the model is absent or unusable or
-- knows nothing of the kind. features: the candidate's feature table (emmy.prior.features); a model fit with
-- features needs them (without: the offline µs), one fit without ignores them.
function M.predict(model, kind, knobs, offline_us, features)
  if not offline_us then return nil end
  if not model or not model.usable or offline_us <= 0 then return offline_us end
  local per = model.kinds and model.kinds[kind]
  local h = per and trees_of(per)
  if not h or (per.features and type(features) ~= "table") then return offline_us end
  return offline_us * math.exp(h:predict(M.vector(per.columns, knobs, offline_us, features)))
end

-- A deterministic permutation of 1..n (Park–Miller, fixed seed): the folds of the calibration.
local function folds_of(n, k)
  local s, idx, fold = 12345, {}, {}
  for i = 1, n do idx[i] = i end
  for i = n, 2, -1 do
    s = s * 16807 % 2147483647
    local j = 1 + s % i
    idx[i], idx[j] = idx[j], idx[i]
  end
  for pos, i in ipairs(idx) do fold[i] = (pos - 1) % k + 1 end
  return fold
end

-- The matrix of rows over cols and the residuals log(us / offline) the trees fit.
local function matrix(rows, cols)
  local X, y = {}, {}
  for i, r in ipairs(rows) do
    X[i] = M.vector(cols, r.knobs, r.offline, r.features)
    y[i] = math.log(r.us / r.offline)
  end
  return X, y
end

-- Trees fit to X, y; a refusal can only come from the hyper-parameters, so it raises naming their file.
local function fit_trees(X, y, p)
  local gbt, err = C.gbt_fit(X, y, p)
  if not gbt then error(("emmy.online: %s (the hyper-parameters of rules/prior/online.lua)"):format(err), 0) end
  return gbt
end

local function measured(r)
  return r.us and r.offline and r.us > 0 and r.offline > 0 and r.us < math.huge and r.offline < math.huge
end

-- Fits trees to rows of one kind ({knobs, us, offline [, features]}) with the hyper-parameters p ({trees, depth,
-- rate, min_leaf, shrink}), without calibration: for a caller that judges the result itself (emmy.search's
-- refit). Rows without a positive us and offline are skipped. Returns predict(knobs, offline_us, features) -> µs,
-- or nil when no row is left.
function M.fit_predictor(rows, p)
  local use = {}
  for _, r in ipairs(rows) do if measured(r) then use[#use + 1] = r end end
  if #use == 0 then return nil end
  local cols = M.columns(use)
  local X, y = matrix(use, cols)
  local gbt = fit_trees(X, y, p)
  return function(knobs, offline_us, features)
    return offline_us * math.exp(gbt:predict(M.vector(cols, knobs, offline_us, features)))
  end
end

-- Rank correlation of predictions and measured times: pooled over all rows, or, when rows carry a `group` (a
-- kernel), the mean over the groups of at least 3 rows: the order within a kernel is what a search uses.
local function rho(rows, pred)
  local groups, order = {}, {}
  for i, r in ipairs(rows) do
    local g = r.group
    if g == nil then g = "" end
    if not groups[g] then groups[g], order[#order + 1] = { p = {}, m = {} }, g end
    local e = groups[g]
    e.p[#e.p + 1], e.m[#e.m + 1] = pred[i], r.us
  end
  local sum, n = 0, 0
  for _, g in ipairs(order) do
    local e = groups[g]
    if #e.m >= 3 then sum, n = sum + C.spearman(e.p, e.m), n + 1 end
  end
  return n > 0 and sum / n or 0
end

-- Fits the model on rows {{kind, knobs = {...}, us = measured µs, offline = offline µs [, features = {...}]
-- [, group = kernel id]}, ...}; rows without a positive us and offline are skipped. opts: params (instead of
-- rules/prior/online.lua's table), prior_dir. Returns the model {version, usable, rows, folds, kinds = {KIND =
-- {columns, features, gbt, rows}}, rho_offline, rho_online (on the rows it was fit on), rho_online_cv (out of
-- fold)}; the rank correlations are pooled over the rows, or means over kernels when the rows carry `group`.
-- Calibration: the rows of each kind are dealt into `folds` folds by a fixed permutation; each fold is predicted
-- by trees fit on the others. The model is usable when it has min_rows rows and its rank correlation beats the
-- offline half's both in sample and out of fold (so trees that only memorize their rows do not pass).
function M.fit(rows, opts)
  local P = opts and opts.params or prior.online_params(opts and opts.prior_dir)
  local model = { version = M.VERSION, kinds = {}, rows = 0, folds = P.folds or 5 }
  local by, kinds = {}, {}
  for _, r in ipairs(rows) do
    if measured(r) and r.kind then
      if not by[r.kind] then by[r.kind], kinds[#kinds + 1] = {}, r.kind end
      local list = by[r.kind]
      list[#list + 1] = r
    end
  end
  table.sort(kinds)
  local all, in_pred, cv_pred, off = {}, {}, {}, {}
  for _, kind in ipairs(kinds) do
    local list = by[kind]
    local cols, with_features = M.columns(list)
    local X, y = matrix(list, cols)
    local gbt = fit_trees(X, y, P.fit)
    model.kinds[kind] = { columns = cols, features = with_features, gbt = gbt:totable(), rows = #list }
    local inp = gbt:predict_many(X)
    gbt:close()
    local fold, cvp = folds_of(#list, model.folds), {}
    for f = 1, model.folds do
      local tx, ty, test = {}, {}, {}
      for i = 1, #list do
        if fold[i] == f then test[#test + 1] = i else tx[#tx + 1], ty[#ty + 1] = X[i], y[i] end
      end
      -- a fold with nothing left to fit on (fewer rows than folds) is predicted in sample
      local g = #test > 0 and #tx > 0 and fit_trees(tx, ty, P.fit)
      for _, i in ipairs(test) do cvp[i] = g and g:predict(X[i]) or inp[i] end
      if g then g:close() end
    end
    for i, r in ipairs(list) do
      all[#all + 1] = r
      in_pred[#all], cv_pred[#all], off[#all] = r.offline * math.exp(inp[i]), r.offline * math.exp(cvp[i]), r.offline
    end
  end
  model.rows = #all
  model.rho_offline = #all > 2 and rho(all, off) or 0
  model.rho_online = #all > 2 and rho(all, in_pred) or 0
  model.rho_online_cv = #all > 2 and rho(all, cv_pred) or 0
  model.usable = #all >= (P.min_rows or 16) and model.rho_online > model.rho_offline
    and model.rho_online_cv > model.rho_offline
  return model
end

-- Saves the model to path (default EMMY_ONLINE_FILE, else ~/.cache/emmy/online.json) through sys.write_file,
-- fsynced: the old file or the whole new one, also after a crash. Returns true | nil, msg (the file as it was).
function M.save(model, path)
  path = path or M.default_path()
  local sys = require "emmy.sys"
  local dir = path:match("^(.*)/[^/]*$")
  if dir and dir ~= "" then
    local ok, err = sys.mkdir_p(dir)
    if not ok then return nil, ("cannot write %s: %s"):format(path, err) end
  end
  return sys.write_file(path, cjson.encode(model))
end

-- The saved model, or nil (no file, another version, or unreadable: the offline half is used).
function M.load(path)
  local f = io.open(path or M.default_path())
  if not f then return nil end
  local ok, m = pcall(cjson.decode, f:read("*a"))
  f:close()
  if not ok or type(m) ~= "table" or m.version ~= M.VERSION or type(m.kinds) ~= "table" then return nil end
  return m
end

return M
