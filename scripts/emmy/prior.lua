-- emmy.prior — the tuner's prior over a kernel's candidates: features (rules/prior/features.lua), the offline
-- half's cost in µs (rules/prior/offline.lua) and the online half's hyper-parameters (rules/prior/online.lua),
-- all editable without a rebuild ($EMMY_PRIOR=DIR for another folder). The formulas they call live in C
-- (emmy.prior_c): the prior files see them as `cost` (cost.roofline(features, weights) -> µs).
local C = require "emmy.prior_c"
local sandbox = require "emmy.sandbox"

local M = {}

function M.dir() return os.getenv("EMMY_PRIOR") or (EMMY_HOME .. "/rules/prior") end

local loaded = {}

-- The prior files of dir (default M.dir()), each run once in the rule sandbox: {features, offline, online, display}.
local function load(dir)
  dir = dir or M.dir()
  if loaded[dir] then return loaded[dir] end
  local display = sandbox.display(dir, EMMY_HOME .. "/rules/prior", "rules/prior")
  local env = sandbox.env(dir, display)
  rawset(env, "cost", { roofline = C.roofline })
  local out = { display = display }
  for _, name in ipairs { "features", "offline", "online" } do
    out[name] = sandbox.run_file(env, dir .. "/" .. name .. ".lua", display .. "/" .. name .. ".lua", "must return a table")
  end
  loaded[dir] = out
  return out
end

-- Calls the prior formula p[file][kind] in the sandbox (the leading table arguments read-only, named by views);
-- returns its result, nil when the prior has no formula for the kind; raises one line naming the file and line.
local function formula(p, file, kind, views, ...)
  local fn = p[file][kind]
  if fn == nil then return nil end
  local path = ("%s/%s.lua"):format(p.display, file)
  if type(fn) ~= "function" then error(("%s:1: %s.%s is a %s, not a function"):format(path, file, tostring(kind), type(fn)), 0) end
  return (sandbox.call({ file = path, line = sandbox.line_of(fn), what = file .. "." .. tostring(kind), views = views }, fn, ...))
end

M.load = load

-- The feature table of kernel facts k with knobs c on dev, or nil when the prior has no model for the kind.
function M.features(k, c, dev, dir)
  local p = load(dir)
  local f = formula(p, "features", k.kind, { "k", "c", "dev" }, k, c, dev)
  if f ~= nil and type(f) ~= "table" then
    error(("%s/features.lua:%d: features.%s returned a %s, not a table"):format(p.display, sandbox.line_of(p.features[k.kind]),
      tostring(k.kind), type(f)), 0)
  end
  return f
end

-- The offline half's predicted µs, or nil when it has no model for the kind.
function M.offline(k, c, dev, dir)
  local p = load(dir)
  local f = M.features(k, c, dev, dir)
  if not f then return nil end
  local us = formula(p, "offline", k.kind, nil, f)
  if us ~= nil and type(us) ~= "number" then
    error(("%s/offline.lua:%d: offline.%s returned a %s, not a number of µs"):format(p.display, sandbox.line_of(p.offline[k.kind]),
      tostring(k.kind), type(us)), 0)
  end
  return us
end

-- The online half's hyper-parameters (rules/prior/online.lua's table).
function M.online_params(dir) return load(dir).online end

-- Spearman rank correlation of two equal-length lists of numbers (ties get their mean rank; 0 when either list
-- is constant). Computed in C (src/prior.c).
M.spearman = C.spearman

return M
