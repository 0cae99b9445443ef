-- golden.lua — the golden corpus of emitted CUDA (tests/fixtures/cuda_golden/): one pinned variant of every
-- emitter path, listed in MANIFEST.lua. Shared by gen_golden.lua (resolves each entry's pins through the rules and
-- writes the file) and test_golden.lua (re-emits the variant each committed file names in its "// kernel" line
-- and compares byte for byte). Everything runs in-process: no emmy subprocess, no NVRTC.
local compiler = require "emmy.compiler"
local kernels = require "emmy.kernels"
local sys = require "emmy.sys"

local M = {}

M.DIR = EMMY_HOME .. "/tests/fixtures/cuda_golden"
M.MANIFEST = M.DIR .. "/MANIFEST.lua"
M.REGEN = "./emmy tests/lua/gen_golden.lua"

-- The manifest's entries: {file, src = {model | graph | case, layer, dynamic, dtype}, kernel, env, add}, in
-- order (add: one "K=V" of a knob no rule offers, STAMP, set on the variant the pins choose). Raises one line naming
-- the entry for a malformed or repeated one.
function M.manifest()
  local chunk, err = loadfile(M.MANIFEST)
  if not chunk then error(err, 0) end
  setfenv(chunk, {})
  local list = chunk()
  local seen = {}
  for i, e in ipairs(list) do
    local where = ("%s: entry %d (%s)"):format(M.MANIFEST, i, tostring(e.file))
    if type(e.file) ~= "string" or not e.file:match("^[%w_]+__[%w_]+%.cu$") then
      error(where .. ": file must be COMBINATION__KERNEL.cu", 0)
    end
    if type(e.src) ~= "table" or not (e.src.model or e.src.graph or e.src.case) then error(where .. ": src needs model, graph or case", 0) end
    if type(e.kernel) ~= "string" or e.file:sub(-#e.kernel - 3) ~= e.kernel .. ".cu" then
      error(where .. ": the file name must end in __" .. tostring(e.kernel) .. ".cu", 0)
    end
    if seen[e.file] then error(where .. ": the file is listed twice", 0) end
    if e.add ~= nil and (type(e.add) ~= "string" or not e.add:match("^[%w_]+=%d+$")) then
      error(where .. ": add must be one K=V", 0)
    end
    seen[e.file] = true
    e.env = e.env or ""
  end
  return list
end

-- An entry's environment: {EMMY_X = "v"} from "EMMY_X=v EMMY_KNOBS=K=V,..." and its getenv-like function (no
-- other variable is visible, so the caller's environment cannot change what is emitted).
function M.env_of(e)
  local t = {}
  for item in e.env:gmatch("%S+") do
    local k, v = item:match("^(EMMY_[%w_]+)=(.*)$")
    if not k then error(("%s: env item '%s' needs EMMY_NAME=VALUE"):format(e.file, item), 0) end
    t[k] = v
  end
  return t, function(k) return t[k] end
end

-- The knobs an entry pins: {KNOB = n} from EMMY_KNOBS items (global ones; the manifest names one kernel) and
-- EMMY_<KNOB> variables.
function M.pins_of(e)
  local env = M.env_of(e)
  local pins = {}
  for item in (env.EMMY_KNOBS or ""):gmatch("[^,]+") do
    local k, v = item:match("^([%w_]+)=(%-?%d+)$")
    if not k then error(("%s: EMMY_KNOBS item '%s' needs K=V"):format(e.file, item), 0) end
    pins[k] = tonumber(v)
  end
  for k, v in pairs(env) do
    if k ~= "EMMY_KNOBS" then pins[k:sub(6)] = tonumber(v) end
  end
  return pins
end

local function src_args(s)
  if s.case then return "(op case " .. s.case .. " of tests/lua/graphs.lua)" end
  local a = { s.model or s.graph }
  if s.layer then a[#a + 1] = "--layer " .. s.layer end
  for d in (s.dynamic or ""):gmatch("%S+") do a[#a + 1] = "--dynamic " .. d end
  if s.dtype then a[#a + 1] = "--dtype " .. s.dtype end
  return table.concat(a, " ")
end

-- The command that shows an entry's kernel the way a user would (the rules' first candidate under the pins).
function M.command(e)
  if e.src.case then return src_args(e.src) .. ", kernel " .. e.kernel .. (e.env ~= "" and (", " .. e.env) or "") end
  return ("%s./emmy compile %s --kernel %s --ir cuda -o /tmp/%s%s"):format(e.env ~= "" and ("env " .. e.env .. " ") or "",
    src_args(e.src), e.kernel, e.file, e.add and (" (then " .. e.add .. ": no rule offers it, so no pin can)") or "")
end

-- A model's shipped config folder (models/ORG--NAME) when there is one, so that a Hugging Face cache on this
-- machine cannot change the graph; else the name as given.
local function model_path(name)
  local p = EMMY_HOME .. "/models/" .. name:gsub("/", "--")
  if sys.stat(p .. "/config.json") == "file" then return p end
  return name
end

local graphs_cache, formed_cache = {}, {}

-- The graph of a source, memoized: a model layer (emmy.frontend, as emmy compile builds it), a graph file
-- (relative to the checkout) or an op case of tests/lua/graphs.lua.
function M.graph(s)
  local key = src_args(s)
  if graphs_cache[key] then return graphs_cache[key] end
  local g
  if s.case then
    local tests = EMMY_HOME .. "/tests/lua/?.lua;"
    if package.path:sub(1, #tests) ~= tests then package.path = tests .. package.path end
    for _, c in ipairs(require("graphs").op_cases) do
      if c.name == s.case then
        g = require("graphs").case_graph(c)
      end
    end
    if not g then error("no op case " .. s.case .. " in tests/lua/graphs.lua", 0) end
  elseif s.graph then
    local err
    g, err = require("emmy.graphjson").read(EMMY_HOME .. "/" .. s.graph)
    if not g then error(err, 0) end
  else
    local dyn = {}
    for d in (s.dynamic or ""):gmatch("%S+") do dyn[#dyn + 1] = d end
    local ok, r = pcall(require("emmy.frontend").load, model_path(s.model), { layer = s.layer, dynamic = dyn, batch = 1,
      dtype = s.dtype })
    if not ok then error(src_args(s) .. ": " .. tostring(r), 0) end
    g = r.graph
  end
  graphs_cache[key] = g
  return g
end

-- The kernel an entry names, formed under the entry's structural knobs (memoized per source and knobs): the
-- kernel, or nil and a message listing the kernels that were formed.
function M.kernel(e)
  local g = M.graph(e.src)
  local _, envf = M.env_of(e)
  local kn = compiler.structural_knobs(g, envf)
  local key = src_args(e.src) .. " " .. require("emmy.rules").knob_string(kn)
  local ctx = formed_cache[key]
  if not ctx then
    ctx = compiler.run(g, { knobs = kn })
    formed_cache[key] = ctx
  end
  local names = {}
  for _, k in ipairs(ctx.kernels) do
    if k.name == e.kernel then return k end
    names[#names + 1] = k.name
  end
  return nil, ("%s: %s is not formed (formed: %s)"):format(e.file, e.kernel, table.concat(names, " "))
end

-- The kernel name, kind and knob table a source names in its "// kernel NAME: KIND K=V,..." line; nil when
-- there is none.
function M.recorded(src)
  local name, kind, list = src:match("\n// kernel ([%w_]+): (%a+) ?([%w_=,%-]*)\n")
  if not name then return nil end
  local knobs = {}
  for k, v in list:gmatch("([%w_]+)=(%-?%d+)") do knobs[k] = tonumber(v) end
  return name, kind, knobs
end

-- The lines of text s split at every "\n" (the piece after the last one too, "" when s ends in one), so two
-- texts are equal exactly when their lists are.
local function lines(s)
  local t, i = {}, 1
  while true do
    local e = s:find("\n", i, true)
    t[#t + 1] = s:sub(i, (e or #s + 1) - 1)
    if not e then return t end
    i = e + 1
  end
end

-- The first line where texts a and b differ: n, line n of a, line n of b ("<end of file>" past the end); nil
-- when they are equal.
function M.first_diff(a, b)
  if a == b then return nil end
  local la, lb = lines(a), lines(b)
  for n = 1, math.max(#la, #lb) do
    if la[n] ~= lb[n] then return n, la[n] or "<end of file>", lb[n] or "<end of file>" end
  end
end

function M.read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

return M
