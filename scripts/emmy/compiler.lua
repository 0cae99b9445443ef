-- emmy.compiler — the path of a graph through emmy's passes (scripts/passes/NNN_*.lua, in file-name
-- order) into kernels, then through the tiling rules (emmy.rules) into knob assignments and CUDA source.
local sys = require "emmy.sys"

local M = {}

M.PASS_DIR = EMMY_HOME .. "/scripts/passes"

-- The passes, in order: { {file, name, summary, run}, … }.
function M.passes()
  local out = {}
  for _, f in ipairs(sys.listdir(M.PASS_DIR) or {}) do
    if f:match("^%d+_.*%.lua$") then
      local chunk, err = loadfile(M.PASS_DIR .. "/" .. f)
      if not chunk then error(err, 0) end
      local p = chunk()
      p.file = f
      out[#out + 1] = p
    end
  end
  return out
end

-- Runs the passes on graph g; opts.stop_after (pass name), opts.knobs (global pins), opts.on_stage
-- (function(pass, ctx) after each pass). Returns ctx {graph, kernels}.
-- Structural knobs change which kernels exist, so they are read before any kernel is formed: from
-- EMMY_<KNOB>=V or a global EMMY_KNOBS item (no kernel prefix).
-- They and their defaults are the knob table's (src/knobs.h; em_knob_structural lists them): the emitter's check of
-- unread knobs exempts the same set.
M.STRUCTURAL = {}
for _, info in ipairs(require("emmy.knobs").list()) do
  if info.structural then M.STRUCTURAL[info.name] = info.default end
end

-- The structural knobs' values: the defaults, overridden by EMMY_<KNOB> and EMMY_KNOBS. Returns values, and the
-- set of knobs the environment pinned.
function M.structural_pins(env)
  env = env or os.getenv
  local out, pinned = {}, {}
  local items = require("emmy.rules").knob_items(env)
  for key, def in pairs(M.STRUCTURAL) do
    out[key] = def
    local v = env("EMMY_" .. key)
    for _, it in ipairs(items) do
      if not it.who and it.key == key then v = tostring(it.v) end
    end
    if v and v ~= "" then
      if not tonumber(v) or (tonumber(v) ~= 0 and tonumber(v) ~= 1) then
        error(("structural knob %s=%s must be 0 or 1"):format(key, v), 0)
      end
      out[key] = tonumber(v)
      pinned[key] = true
    end
  end
  return out, pinned
end

-- Parses a graph's meta "structural" ("KEY=V,KEY=V", as 030_name_kernels writes it) under the rules the
-- EMMY_<KNOB> variables follow: each item KEY=V, KEY a structural knob, V 0 or 1, no key twice. Returns
-- {KEY = V}, or nil and one line naming the item and what to write instead.
function M.parse_structural(text)
  local out = {}
  if type(text) ~= "string" then return nil, "meta \"structural\" must be a string of KEY=V items" end
  local names = {}
  for key in pairs(M.STRUCTURAL) do names[#names + 1] = key end
  table.sort(names)
  for item in (text .. ","):gmatch("([^,]*),") do
    local key, v = item:match("^%s*([%w_]+)=(%S*)%s*$")
    if not key then
      if item:match("^%s*$") and text:match("^%s*$") then break end -- "" records no knob
      return nil, ("meta \"structural\" item '%s' needs KEY=0 or KEY=1, KEY one of %s"):format(item,
        table.concat(names, ", "))
    end
    if M.STRUCTURAL[key] == nil then
      return nil, ("meta \"structural\": %s is not a structural knob (%s)"):format(key, table.concat(names, ", "))
    end
    if v ~= "0" and v ~= "1" then
      return nil, ("meta \"structural\": structural knob %s=%s must be 0 or 1"):format(key, v)
    end
    if out[key] ~= nil then return nil, ("meta \"structural\": %s is given twice"):format(key) end
    out[key] = tonumber(v)
  end
  return out
end

-- A kernel reproducer records the structural knobs it was formed under (meta "structural", written by
-- 030_name_kernels); re-forming it applies them where the environment does not pin the knob, so it re-forms as
-- the one kernel it reproduces (a folded RMSNorm with SPLIT_CONE=0 stays folded). env: as for structural_pins.
function M.structural_knobs(g, env)
  local kn, pinned = M.structural_pins(env)
  local rec = g.meta and g:meta("structural")
  if rec then
    local vals, err = M.parse_structural(rec)
    if not vals then error(err, 0) end
    for key, v in pairs(vals) do
      if not pinned[key] then kn[key] = v end
    end
  end
  return kn
end

function M.run(g, opts)
  opts = opts or {}
  local ctx = { graph = g, knobs = opts.knobs or M.structural_knobs(g), kernels = nil }
  for _, p in ipairs(M.passes()) do
    p.run(ctx)
    if opts.on_stage then opts.on_stage(p, ctx) end
    if opts.stop_after and (p.name == opts.stop_after or p.file:match("^%d+_(.*)%.lua$") == opts.stop_after) then
      ctx.stopped = p.name
      break
    end
  end
  return ctx
end

return M
