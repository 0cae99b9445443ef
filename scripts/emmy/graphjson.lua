-- emmy.graphjson — graph JSON (docs/formats.md) to and from the C IR. Decoding goes through lua-cjson;
-- encoding is emmy's own ordered writer, so a file emmy wrote is reproduced byte for byte.
local cjson = require "cjson"
local ir = require "emmy.ir"

local M = {}

M.FORMAT, M.VERSION = "emmy.graph", 1

local null = cjson.null

local function fail(file, fmt, ...)
  return nil, ("%s: " .. fmt):format(file, ...)
end

local function is_list(t) return type(t) == "table" and (next(t) == nil or t[1] ~= nil) end

-- Decodes JSON text into a graph; returns graph | nil, "file: node 'x': problem".
function M.decode(text, file)
  file = file or "<graph>"
  local ok, doc = pcall(cjson.decode, text)
  if not ok then return fail(file, "malformed JSON: %s", tostring(doc):gsub("^.-: ", "")) end
  if type(doc) ~= "table" or doc[1] ~= nil then return fail(file, "the top level must be an object") end
  if doc.format ~= M.FORMAT then return fail(file, "\"format\" must be %q, got %s", M.FORMAT, tostring(doc.format)) end
  if doc.version ~= M.VERSION then
    return fail(file, "unsupported version %s (this emmy reads version %d)", tostring(doc.version), M.VERSION)
  end
  local g, gerr = ir.new(type(doc.name) == "string" and doc.name or "graph")
  if not g then return fail(file, "%s", gerr) end
  if doc.meta ~= nil then
    if type(doc.meta) ~= "table" or doc.meta[1] ~= nil then return fail(file, "\"meta\" must be an object") end
    for k, v in pairs(doc.meta) do
      if type(v) ~= "string" then return fail(file, "meta '%s' must be a string", tostring(k)) end
      if k == "structural" then
        local oks, serr = require("emmy.compiler").parse_structural(v)
        if not oks then return fail(file, "%s", serr) end
      end
      local okm, merr = g:meta(k, v)
      if not okm then return fail(file, "%s", merr) end
    end
  end
  for k, field in ipairs { "symbols", "inputs", "nodes", "outputs" } do
    local v = doc[field]
    if v ~= nil and not is_list(v) then return fail(file, "\"%s\" must be a list", field) end
  end
  for i, s in ipairs(doc.symbols or {}) do
    if type(s) ~= "table" or type(s.name) ~= "string" then return fail(file, "symbols[%d] needs a \"name\"", i) end
    for _, k in ipairs { "hint", "min", "max" } do
      if s[k] ~= nil and s[k] ~= null and (type(s[k]) ~= "number" or s[k] ~= math.floor(s[k])) then
        return fail(file, "symbol '%s': \"%s\" must be an integer", s.name, k)
      end
    end
    local hint = s.hint ~= null and s.hint or nil
    local okk, err = g:symbol(s.name, { hint = hint, min = s.min, max = s.max })
    if not okk then return fail(file, "%s", err) end
  end
  for i, inp in ipairs(doc.inputs or {}) do
    if type(inp) ~= "table" or type(inp.name) ~= "string" then return fail(file, "inputs[%d] needs a \"name\"", i) end
    if inp.kind ~= nil and inp.kind ~= "activation" and inp.kind ~= "param" then
      return fail(file, "input '%s': \"kind\" must be \"activation\" or \"param\"", inp.name)
    end
    if not is_list(inp.shape) then return fail(file, "input '%s': \"shape\" must be a list", inp.name) end
    local okk, err = g:input(inp.name, inp.dtype, inp.shape, { kind = inp.kind or "activation", weight = inp.weight })
    if not okk then return fail(file, "%s", err) end
  end
  for i, nd in ipairs(doc.nodes or {}) do
    if type(nd) ~= "table" then return fail(file, "nodes[%d] must be an object", i) end
    if type(nd.name) ~= "string" then return fail(file, "nodes[%d] needs a \"name\"", i) end
    if type(nd.op) ~= "string" then return fail(file, "node '%s': needs an \"op\"", nd.name) end
    local args = nd.args or {}
    if type(args) ~= "table" or (next(args) ~= nil and args[1] ~= nil) then
      return fail(file, "node '%s': \"args\" must be an object", nd.name)
    end
    local from = type(nd.from) == "table" and nd.from or {}
    if nd.dtype ~= nil and type(nd.dtype) ~= "string" then
      return fail(file, "node '%s': \"dtype\" must be a string", nd.name)
    end
    if nd.shape ~= nil and not is_list(nd.shape) then return fail(file, "node '%s': \"shape\" must be a list", nd.name) end
    -- the declared dtype and shape are checked against inference in C, without a value table per node
    local name, err = g:node(nd.op, args, { name = nd.name, module = from.module, op = from.op, dtype = nd.dtype,
      shape = nd.shape })
    if not name then return fail(file, "%s", err) end
  end
  for i, o in ipairs(doc.outputs or {}) do
    local okk, err = g:output(tostring(o))
    if not okk then return fail(file, "%s", err) end
  end
  return g
end

function M.read(path)
  local f, err = io.open(path, "rb")
  if not f then return nil, ("%s: cannot read (%s)"):format(path, err:gsub("^.-: ", "")) end
  local text = f:read("*a")
  f:close()
  return M.decode(text, path)
end

-- ---- writer ------------------------------------------------------------------------------------------

local escapes = { ['"'] = '\\"', ["\\"] = "\\\\", ["\b"] = "\\b", ["\f"] = "\\f", ["\n"] = "\\n", ["\r"] = "\\r",
  ["\t"] = "\\t" }

local function str(s)
  return '"' .. s:gsub('[%c"\\]', function(c) return escapes[c] or ("\\u%04x"):format(c:byte()) end) .. '"'
end

-- Shortest text that reads back as the same double.
local function num(x)
  if x ~= x or x == math.huge or x == -math.huge then error("graph JSON cannot hold " .. tostring(x), 0) end
  if x == math.floor(x) and math.abs(x) < 2 ^ 53 then return ("%d"):format(x) end
  for p = 1, 17 do
    local s = ("%." .. p .. "g"):format(x)
    if tonumber(s) == x then return s end
  end
end

local function val(v)
  local t = type(v)
  if v == null or v == nil then return "null" end
  if t == "string" then return str(v) end
  if t == "number" then return num(v) end
  if t == "boolean" then return tostring(v) end
  if t == "table" then
    if v.float ~= nil then return '{"float": ' .. num(v.float) .. "}" end
    local parts = {}
    for i, x in ipairs(v) do parts[i] = val(x) end
    return "[" .. table.concat(parts, ", ") .. "]"
  end
  error("cannot write a " .. t .. " in graph JSON", 0)
end

-- Writes an object from an ordered list of {key, value} pairs, skipping nil values.
local function obj(pairs_)
  local parts = {}
  for _, kv in ipairs(pairs_) do
    if kv[2] ~= nil then parts[#parts + 1] = str(kv[1]) .. ": " .. (kv.raw or val(kv[2])) end
  end
  return "{" .. table.concat(parts, ", ") .. "}"
end

function M.shape_str(shape)
  local parts = {}
  for i, d in ipairs(shape or {}) do parts[i] = tostring(d) end
  return "[" .. table.concat(parts, ", ") .. "]"
end

local function list_block(key, items, last)
  if #items == 0 then return ("  %s: []%s\n"):format(str(key), last and "" or ",") end
  return ("  %s: [\n    %s\n  ]%s\n"):format(str(key), table.concat(items, ",\n    "), last and "" or ",")
end

-- Encodes graph g canonically (see docs/formats.md).
function M.encode(g)
  local syms, inputs, nodes = {}, {}, {}
  for _, s in ipairs(g:symbols()) do
    if not s.derived then
      syms[#syms + 1] = obj { { "name", s.name }, { "hint", s.hint }, { "min", s.min }, { "max", s.max } }
    end
  end
  for _, v in ipairs(g:inputs()) do
    inputs[#inputs + 1] = obj { { "name", v.name }, { "kind", v.kind },
      { "weight", v.kind == "param" and v.weight or nil }, { "dtype", v.dtype }, { "shape", v.shape } }
  end
  for _, n in ipairs(g:nodes()) do
    local args = {}
    for _, kv in ipairs(n.args) do args[#args + 1] = str(kv[1]) .. ": " .. val(kv[2]) end
    local from
    if n.module or n.src_op then from = obj { { "module", n.module }, { "op", n.src_op } } end
    nodes[#nodes + 1] = obj { { "name", n.name }, { "op", n.op }, { "args", true, raw = "{" .. table.concat(args, ", ") .. "}" },
      { "dtype", n.dtype }, { "shape", n.shape }, { "from", from and true, raw = from } }
  end
  local outs = {}
  for i, o in ipairs(g:outputs()) do outs[i] = str(o) end
  local meta, keys = g:meta(), {}
  for k in pairs(meta) do keys[#keys + 1] = k end
  table.sort(keys)
  local mparts = {}
  for i, k in ipairs(keys) do mparts[i] = str(k) .. ": " .. str(meta[k]) end
  local mline = #keys > 0 and ('  "meta": {' .. table.concat(mparts, ", ") .. "},\n") or ""
  return "{\n" ..
    ('  "format": %s,\n  "version": %d,\n  "name": %s,\n'):format(str(M.FORMAT), M.VERSION, str(g:name())) .. mline ..
    list_block("symbols", syms) .. list_block("inputs", inputs) .. list_block("nodes", nodes) ..
    ('  "outputs": [%s]\n}\n'):format(table.concat(outs, ", "))
end

-- Writes g's canonical JSON to path through sys.write_file (temp, checked, fsynced, renamed; opts.sync = false
-- skips the fsyncs). Returns true | nil, "cannot write PATH: <OS error>" (path as it was).
function M.write(g, path, opts)
  return require("emmy.sys").write_file(path, M.encode(g), opts)
end

return M
