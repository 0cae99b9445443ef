-- emmy.prior — the tuner's prior over a kernel's candidates: features (rules/prior/features.lua), the offline
-- half's cost in µs (rules/prior/offline.lua) and the online half's hyper-parameters (rules/prior/online.lua),
-- all editable without a rebuild ($EMMY_PRIOR=DIR for another folder). The formulas they call live in C
-- (emmy.prior_c): the prior files see them as `cost` (cost.roofline(features, weights) -> µs).
local C = require "emmy.prior_c"
local rules = require "emmy.rules"

local M = {}

function M.dir() return os.getenv("EMMY_PRIOR") or (EMMY_HOME .. "/rules/prior") end

local loaded = {}

-- The prior files of dir (default M.dir()), each run once in the rule sandbox: {features, offline, online}.
local function load(dir)
  dir = dir or M.dir()
  if loaded[dir] then return loaded[dir] end
  local env = rules.sandbox(dir, {})
  rawset(env, "cost", { roofline = C.roofline })
  local out = {}
  for _, name in ipairs { "features", "offline", "online" } do out[name] = rules.run_file(env, dir .. "/" .. name .. ".lua", "must return a table") end
  loaded[dir] = out
  return out
end

M.load = load

-- The feature table of kernel facts k with knobs c on dev, or nil when the prior has no model for the kind.
function M.features(k, c, dev, dir)
  local p = load(dir)
  local fn = p.features[k.kind]
  return fn and fn(k, c, dev) or nil
end

-- The offline half's predicted µs, or nil when it has no model for the kind.
function M.offline(k, c, dev, dir)
  local p = load(dir)
  local f = M.features(k, c, dev, dir)
  local fn = p.offline[k.kind]
  return f and fn and fn(f) or nil
end

-- The online half's hyper-parameters (rules/prior/online.lua's table).
function M.online_params(dir) return load(dir).online end

-- Spearman rank correlation of two equal-length lists of numbers (ties get their mean rank; 0 when either list
-- is constant). Computed in C (src/prior.c).
M.spearman = C.spearman

return M
