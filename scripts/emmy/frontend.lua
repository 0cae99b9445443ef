-- emmy.frontend — what every command that takes a model does: resolve it, read its config, parse the trace
-- flags (--layer, --dynamic, --hint, --seq-len, --batch, --pool), build the graph and say where it came from.
-- An INPUT that ends in .json is a graph file instead (a kernel reproducer or a saved trace).
local cli = require "emmy.cli"
local dynamic = require "emmy.dynamic"
local graphjson = require "emmy.graphjson"
local models = require "emmy.models"
local decoder = require "models.decoder"

local M = {}

-- Flags shared by trace / compile / run / tune.
M.FLAGS = {
  ["--layer"] = { kind = "int", min = 0 },
  ["--dynamic"] = { kind = "string", multi = true },
  ["--hint"] = { kind = "string", multi = true },
  ["--seq-len"] = { kind = "int", min = 1 },
  ["--batch"] = { kind = "int", default = 1, min = 1 },
  ["--pool"] = { kind = "string" },
  ["--seed"] = { kind = "int", default = 0 },
  ["--dtype"] = { kind = "string" },
}

M.USAGE = [[  MODEL is ORG/NAME (Hugging Face hub cache, then emmy's shipped configs) or a folder with config.json
  (and *.safetensors); emmy never opens a network connection.
  --layer N            one decoder layer: x [batch, seq, hidden] -> layer N's output (default: whole model)
  --dynamic NAME@INPUT:DIM   make that input dim the symbol NAME (repeatable); layer: seq_len@x:1; whole
                       model: seq_len@input_ids:1 seq_len@attention_mask:2 seq_len@attention_mask:3
                       seq_len@position_ids:1 (mask and positions become real inputs when named)
  --hint NAME=N        the symbol's hint (default 512): the size tuning and benching use
  --seq-len L          the static sequence length without --dynamic (default 512)
  --batch B            batch size (default 1)
  --pool last          whole model: last-token pooling + L2 normalization (embedding models)
  --seed S             seed of the random weights when the model folder has none
  --dtype bf16|f16|f32 compute dtype (default: the config's torch_dtype); weights convert exactly]]

function M.merge_flags(extra)
  local t = {}
  for k, v in pairs(M.FLAGS) do t[k] = v end
  for k, v in pairs(extra or {}) do t[k] = v end
  return t
end

local function join(t, sep)
  local out = {}
  for _, v in ipairs(t) do out[#out + 1] = tostring(v) end
  return table.concat(out, sep or " ")
end

-- Resolves and normalizes a model; returns model (with .cfg) or raises a usage error.
function M.model(name)
  local m, err = models.resolve(name)
  if not m then cli.usage("%s", err) end
  local cfg, cerr = models.decoder_config(m.config, m.dir .. "/config.json")
  if not cfg then cli.usage("%s", cerr) end
  m.cfg = cfg
  return m
end

-- Builds the graph for input (model name or .json file) and the parsed flags opts.
-- Returns { graph, model (nil for a file), dyn, static, header (one line: where it came from) }.
-- A graph file takes none of the model flags (they would be silently ignored); with allow_seq_len (emmy run)
-- --seq-len binds the graph's seq_len symbol.
function M.load(input, opts, allow_seq_len)
  if input:match("%.json$") then
    local given
    if opts.layer then given = "--layer" elseif opts.dynamic and #opts.dynamic > 0 then given = "--dynamic"
    elseif opts.hint and #opts.hint > 0 then given = "--hint" elseif opts.pool then given = "--pool"
    elseif opts.dtype then given = "--dtype" elseif opts.batch and opts.batch ~= 1 then given = "--batch"
    elseif opts.seq_len and not allow_seq_len then given = "--seq-len" end
    if given then
      cli.usage("%s applies to a model, not to the graph file %s (%s)", given, input,
        allow_seq_len and "bind its symbols with --bind NAME=N or --seq-len N" or "its symbols keep the file's hints")
    end
    local g, err = graphjson.read(input)
    if not g then cli.usage("%s", err) end
    local syms = 0
    for _, s in ipairs(g:symbols()) do if not s.derived then syms = syms + 1 end end
    local res = { graph = g, static = syms == 0, file = input }
    if g:meta("model") then
      res.model = M.model(g:meta("model"))
    end
    res.header = ("graph %s (%s)%s"):format(input, syms == 0 and "static" or "symbolic",
      g:meta("model") and (", from " .. g:meta("model")) or "")
    return res
  end
  local m = M.model(input)
  m.cfg.native_dtype = m.cfg.dtype
  if opts.dtype then
    if not ({ bf16 = true, f16 = true, f32 = true })[opts.dtype] then cli.usage("--dtype '%s': bf16, f16 or f32", opts.dtype) end
    m.cfg.dtype = opts.dtype
  end
  local form = opts.layer and "layer" or "whole"
  local hints = cli.parse_binds(opts.hint, "--hint")
  local dyn = dynamic.parse(opts.dynamic, hints, form)
  if opts.seq_len and #dyn.symbols > 0 and dyn.seq then
    cli.usage("--seq-len %d conflicts with --dynamic %s (use --hint %s=%d)", opts.seq_len, dyn.seq, dyn.seq, opts.seq_len)
  end
  if opts.pool and opts.pool ~= "last" then cli.usage("--pool '%s': only 'last' is supported", opts.pool) end
  if opts.pool and opts.layer then cli.usage("--pool applies to the whole model, not --layer") end
  -- names of the weights on disk decide the checkpoint prefix
  local names
  if #m.weights > 0 then
    local st = require "emmy.safetensors"
    names = {}
    for _, f in ipairs(m.weights) do
      local h, err = st.open(f)
      if not h then cli.usage("%s", err) end
      for _, t in ipairs(h:tensors()) do names[t.name] = true end
      h:close()
    end
  end
  local prefix = models.weight_prefix(m, names)
  local static = #dyn.symbols == 0
  local gname = m.slug .. (opts.layer and ("-layer" .. opts.layer) or "")
  local ok, g = pcall(decoder.build, m.cfg, { layer = opts.layer, prefix = prefix, seq_len = opts.seq_len,
    batch = opts.batch, dyn = dyn, pool = opts.pool, name = gname })
  if not ok then cli.usage("%s: %s", input, tostring(g)) end
  -- meta is text a graph JSON holds: a path that is not UTF-8 is refused here, not dropped
  local function meta(k, v) cli.check(g:meta(k, v)) end
  meta("model", input)
  meta("source", m.source)
  meta("model_dir", m.dir)
  if opts.layer then meta("layer", tostring(opts.layer)) end
  meta("weights", #m.weights > 0 and "safetensors" or "random")
  if opts.seed and opts.seed ~= 0 then meta("seed", tostring(opts.seed)) end
  if opts.pool then meta("pool", opts.pool) end
  if opts.dtype then meta("dtype", opts.dtype) end
  if static then
    meta("static", ("seq_len=%d batch=%d"):format(opts.seq_len or 512, opts.batch or 1))
  else
    meta("dynamic", join(opts.dynamic))
  end
  local shape_note
  if static then
    shape_note = ("static: seq_len %d, batch %d"):format(opts.seq_len or 512, opts.batch or 1)
  else
    local parts = {}
    for _, s in ipairs(dyn.symbols) do parts[#parts + 1] = ("%s (hint %d)"):format(s.name, s.hint) end
    shape_note = "dynamic: " .. join(parts, ", ")
  end
  local header = ("%s from %s (%s), %s, %s; %s"):format(input, m.dir, m.source,
    opts.layer and ("layer " .. opts.layer) or "whole model", #m.weights > 0 and "safetensors weights" or "random weights",
    shape_note)
  return { graph = g, model = m, dyn = dyn, static = static, header = header }
end

return M
