-- emmy.prior — the tuner's prior over a kernel's candidates: features (rules/prior/features.lua) and the offline
-- half's cost in µs (rules/prior/offline.lua), both editable without a rebuild ($EMMY_PRIOR=DIR for another
-- folder). The online half (learned from the tune DB) is issue 6's next piece.
local rules = require "emmy.rules"

local M = {}

function M.dir() return os.getenv("EMMY_PRIOR") or (EMMY_HOME .. "/rules/prior") end

local loaded = {}

local function load(dir)
  dir = dir or M.dir()
  if loaded[dir] then return loaded[dir] end
  local env = rules.sandbox(dir, {})
  local out = {}
  for _, name in ipairs { "features", "offline" } do out[name] = rules.run_file(env, dir .. "/" .. name .. ".lua", "must return a table") end
  loaded[dir] = out
  return out
end

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

-- Spearman rank correlation of two equal-length lists (ties get their mean rank).
function M.spearman(a, b)
  local function ranks(x)
    local idx = {}
    for i = 1, #x do idx[i] = i end
    table.sort(idx, function(i, j) return x[i] < x[j] end)
    local r, i = {}, 1
    while i <= #idx do
      local j = i
      while j < #idx and x[idx[j + 1]] == x[idx[i]] do j = j + 1 end
      for q = i, j do r[idx[q]] = (i + j) / 2 end
      i = j + 1
    end
    return r
  end
  local ra, rb, n = ranks(a), ranks(b), #a
  local ma, mb = (n + 1) / 2, (n + 1) / 2
  local sab, saa, sbb = 0, 0, 0
  for i = 1, n do
    sab = sab + (ra[i] - ma) * (rb[i] - mb)
    saa = saa + (ra[i] - ma) ^ 2
    sbb = sbb + (rb[i] - mb) ^ 2
  end
  return (saa > 0 and sbb > 0) and sab / math.sqrt(saa * sbb) or 0
end

return M
