-- emmy.online — the online half of the prior: corrections to the offline cost learned from measured rows, kept
-- across tunes in $EMMY_ONLINE_FILE (default ~/.cache/emmy/online.json). The model is additive in log time over
-- knob values per kernel kind (like depth-1 boosted stumps on the knobs): predicted = offline × exp(Σ c[knob=value]),
-- each c the mean log ratio measured/offline of the rows with that value, shrunk toward 0. After a fit it checks
-- itself (rank correlation with the measured times on its own rows); a model that does not beat the offline half
-- there is marked unusable and the offline half is used instead.
local cjson = require "cjson"

local M = {}
M.VERSION = 1

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

local function correction(model, kind, knobs)
  local per = model.kinds and model.kinds[kind]
  if not per then return 0 end
  local corr = 0
  for key, v in pairs(knobs) do
    local e = per[key .. "=" .. tostring(v)]
    if e then corr = corr + e[1] / (e[2] + model.shrink) end
  end
  return corr
end

-- The prediction for a candidate: offline µs corrected, or the offline µs when the model is absent or unusable.
function M.predict(model, kind, knobs, offline_us)
  if not offline_us then return nil end
  if not model or not model.usable then return offline_us end
  return offline_us * math.exp(correction(model, kind, knobs))
end

-- Fits the model on rows {{kind, knobs = {...}, us = measured, offline = offline µs}, ...}.
function M.fit(rows, opts)
  local model = { version = M.VERSION, shrink = opts and opts.shrink or 1, kinds = {}, rows = 0 }
  for _, r in ipairs(rows) do
    if r.us and r.us > 0 and r.offline and r.offline > 0 then
      local per = model.kinds[r.kind] or {}
      model.kinds[r.kind] = per
      local res = math.log(r.us / r.offline)
      for key, v in pairs(r.knobs) do
        local kv = key .. "=" .. tostring(v)
        local e = per[kv] or { 0, 0 }
        e[1], e[2] = e[1] + res, e[2] + 1
        per[kv] = e
      end
      model.rows = model.rows + 1
    end
  end
  -- calibration on its own rows: the corrected order must follow the measured one better than the offline order
  local prior = require "emmy.prior"
  local meas, off, on = {}, {}, {}
  model.usable = true
  for _, r in ipairs(rows) do
    if r.us and r.offline then
      meas[#meas + 1], off[#off + 1] = r.us, r.offline
      on[#on + 1] = M.predict(model, r.kind, r.knobs, r.offline)
    end
  end
  model.rho_offline = #meas > 2 and prior.spearman(off, meas) or 0
  model.rho_online = #meas > 2 and prior.spearman(on, meas) or 0
  model.usable = #meas >= 8 and model.rho_online > model.rho_offline
  return model
end

function M.save(model, path)
  path = path or M.default_path()
  local dir = path:match("^(.*)/[^/]*$")
  if dir and dir ~= "" then require("emmy.sys").mkdir_p(dir) end
  local tmp = path .. ".tmp"
  local f, err = io.open(tmp, "w")
  if not f then return nil, err end
  f:write(cjson.encode(model))
  f:close()
  return os.rename(tmp, path)
end

-- The saved model, or nil (no file, another version, or unreadable: the offline half is used).
function M.load(path)
  local f = io.open(path or M.default_path())
  if not f then return nil end
  local ok, m = pcall(cjson.decode, f:read("*a"))
  f:close()
  if not ok or type(m) ~= "table" or m.version ~= M.VERSION then return nil end
  return m
end

return M
