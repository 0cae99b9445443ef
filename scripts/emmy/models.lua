-- emmy.models — resolves a model name to its config (and weights) with no network access, in this order:
--   1. a path to a folder holding config.json (and optionally *.safetensors, single or sharded by
--      model.safetensors.index.json);
--   2. the Hugging Face hub cache: $HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub, as
--      models--ORG--NAME/snapshots/<rev>/ (the revision refs/main names, else the newest);
--   3. the configs emmy ships in models/ORG--NAME/config.json (no weights: seeded random weights).
-- Also normalizes a decoder config (Llama / Qwen2 / Qwen3 / Mistral) into the fields the builder needs.
local cjson = require "cjson"
local sys = require "emmy.sys"

local M = {}

M.DEFAULT = "Qwen/Qwen3-Embedding-0.6B"

local function read_json(path)
  local f, err = io.open(path, "rb")
  if not f then return nil, err end
  local text = f:read("*a")
  f:close()
  local ok, doc = pcall(cjson.decode, text)
  if not ok then return nil, ("%s: malformed JSON: %s"):format(path, tostring(doc)) end
  return doc
end
M.read_json = read_json

local function is_file(p) return sys.stat(p) == "file" end
local function is_dir(p) return sys.stat(p) == "dir" end

-- Checks a shard name from an index's weight_map: a relative path of plain components inside dir, whose
-- real path (symlinks resolved) is inside root (dir itself, or for a hub snapshot the models--ORG--NAME folder,
-- whose snapshots link into its blobs/). Returns the path to open, or nil, msg naming the entry.
local function shard_path(index, dir, root, tensor, f)
  local function refuse(why)
    return nil, ("%s: weight_map entry '%s' (tensor '%s') %s; an index names shard files inside the model folder")
      :format(index, tostring(f):gsub("%z", "\\0"), tostring(tensor), why)
  end
  if type(f) ~= "string" or f == "" then return refuse("is not a file name") end
  if f:find("%z") then return refuse("has a NUL byte") end
  if f:sub(1, 1) == "/" then return refuse("is an absolute path") end
  for part in f:gmatch("[^/]+") do
    if part == ".." then return refuse("climbs out with '..'") end
  end
  local path = dir .. "/" .. f
  if not is_file(path) then return nil, ("%s names %s, which is missing"):format(index, f) end
  local real, rerr = sys.realpath(path)
  local real_root = sys.realpath(root)
  if not real or not real_root then return refuse("cannot be resolved (" .. tostring(rerr) .. ")") end
  if real:sub(1, #real_root + 1) ~= real_root .. "/" then return refuse("is a link to " .. real .. ", outside " .. real_root) end
  return path
end

-- The safetensors files of a folder: the shards an index names, else model.safetensors, else every
-- *.safetensors file. Returns a list (possibly empty), or nil, msg for a broken index. root: the folder the
-- index's shards must resolve inside (dir unless given).
local function weight_files(dir, root)
  local index = dir .. "/model.safetensors.index.json"
  if is_file(index) then
    local doc, err = read_json(index)
    if not doc then return nil, err end
    if type(doc.weight_map) ~= "table" then return nil, index .. ": no \"weight_map\"" end
    local seen, files, tensors = {}, {}, {}
    for t in pairs(doc.weight_map) do tensors[#tensors + 1] = tostring(t) end
    table.sort(tensors) -- the first bad entry in name order: the same message every run
    for _, t in ipairs(tensors) do
      local f = doc.weight_map[t]
      if not seen[f] then
        local path, perr = shard_path(index, dir, root or dir, t, f)
        if not path then return nil, perr end
        seen[f] = true
        files[#files + 1] = path
      end
    end
    table.sort(files)
    return files
  end
  if is_file(dir .. "/model.safetensors") then return { dir .. "/model.safetensors" } end
  local files = {}
  for _, f in ipairs(sys.listdir(dir) or {}) do
    if f:match("%.safetensors$") then files[#files + 1] = dir .. "/" .. f end
  end
  return files
end

local function hub_roots()
  local roots = {}
  local function add(p) if p and p ~= "" then roots[#roots + 1] = p end end
  add(os.getenv("HF_HUB_CACHE"))
  if os.getenv("HF_HOME") then add(os.getenv("HF_HOME") .. "/hub") end
  if os.getenv("HOME") then add(os.getenv("HOME") .. "/.cache/huggingface/hub") end
  return roots
end

local function hub_snapshot(root, name)
  local base = ("%s/models--%s"):format(root, name:gsub("/", "--"))
  if not is_dir(base .. "/snapshots") then return nil end
  local ref = io.open(base .. "/refs/main")
  if ref then
    local rev = (ref:read("*l") or ""):match("%S+")
    ref:close()
    if rev and is_file(base .. "/snapshots/" .. rev .. "/config.json") then return base .. "/snapshots/" .. rev end
  end
  local revs = sys.listdir(base .. "/snapshots") or {}
  table.sort(revs)
  for i = #revs, 1, -1 do
    local d = base .. "/snapshots/" .. revs[i]
    if is_file(d .. "/config.json") then return d end
  end
  return nil
end

-- Resolves name; returns { name, dir, source ("path"|"hub"|"shipped"), config (raw), weights (list of
-- files, empty when none), slug } or nil, one-line message listing where emmy looked.
function M.resolve(name)
  name = name or M.DEFAULT
  local looked = {}
  local function found(dir, source)
    local cfg, err = read_json(dir .. "/config.json")
    if not cfg then return nil, err end
    -- a hub snapshot's files are links into the repository folder's blobs/
    local root = source == "hub" and dir:match("^(.*)/snapshots/[^/]+$") or dir
    local files, werr = weight_files(dir, root)
    if not files then return nil, werr end
    return { name = name, dir = dir, source = source, config = cfg, weights = files, slug = M.slug(name) }
  end
  if is_dir(name) then
    if is_file(name .. "/config.json") then return found(name, "path") end
    looked[#looked + 1] = name .. "/config.json"
  elseif not name:match("^[%w_.%-]+/[%w_.%-]+$") then
    looked[#looked + 1] = name .. " (no such folder)"
  end
  if name:match("^[%w_.%-]+/[%w_.%-]+$") then
    for _, root in ipairs(hub_roots()) do
      local snap = hub_snapshot(root, name)
      if snap then return found(snap, "hub") end
      looked[#looked + 1] = ("%s/models--%s"):format(root, name:gsub("/", "--"))
    end
    local shipped = ("%s/models/%s"):format(EMMY_HOME, name:gsub("/", "--"))
    if is_file(shipped .. "/config.json") then return found(shipped, "shipped") end
    looked[#looked + 1] = shipped
  end
  return nil, ("model '%s' not found (looked in: %s); give a folder with config.json or an ORG/NAME emmy ships (ls %s/models)")
    :format(name, table.concat(looked, ", "), EMMY_HOME)
end

function M.slug(name)
  local s = name:gsub("/+$", ""):match("([^/]+)$") or name
  return (s:gsub("[^%w_.%-]", "-"):lower())
end

local SUPPORTED = { llama = true, qwen2 = true, qwen3 = true, mistral = true }

local function num(v, default)
  if v == nil or v == cjson.null then return default end
  return tonumber(v)
end

-- Largest size field a config may give: sizes are C ints in the kernels' launch arithmetic.
M.MAX_SIZE = 2147483647
-- More layers than any published decoder by two orders of magnitude; the graph has ~60 nodes a layer.
M.MAX_LAYERS = 10000
-- The largest finite float32: rope_theta and the rope_scaling factors are used as float32, as HF does.
local FLT_MAX = 3.4028234663852886e38

-- Field k of raw as a number checked by kind: "size" (an integer in [1, MAX_SIZE]), "pos" (finite, > 0),
-- "nonneg" (finite, >= 0); absent or null gives default. Returns the value, or nil and one line naming the
-- file, the field, its value and what it must be (NaN and infinities, which lua-cjson decodes, are refused).
local function field(raw, k, default, kind, where, what)
  local v = raw[k]
  if v == nil or v == cjson.null then
    if default == nil then return nil, ("%s: \"%s\" is missing; it must be %s"):format(where, k, what) end
    return default
  end
  local bad
  if type(v) ~= "number" or v ~= v or v == math.huge or v == -math.huge then bad = true
  elseif kind == "size" then bad = v < 1 or v > M.MAX_SIZE or v ~= math.floor(v)
  elseif kind == "pos" then bad = not (v > 0)
  elseif kind == "nonneg" then bad = not (v >= 0) end
  if bad then
    local shown = type(v) == "string" and ("'" .. v .. "'") or tostring(v)
    return nil, ("%s: \"%s\" is %s; it must be %s"):format(where, k, shown, what)
  end
  return v
end

local SIZE = "a positive integer (at most 2147483647)"

-- Checks rope_scaling (a table or null) as rope_inv_freq reads it; returns true or nil, msg.
local function check_rope_scaling(rs, where)
  if rs == nil or rs == cjson.null then return true end
  if type(rs) ~= "table" then return nil, ("%s: \"rope_scaling\" must be an object or null"):format(where) end
  local w = where .. ": rope_scaling"
  local t = rs.rope_type or rs.type or "default"
  if t == "linear" or t == "llama3" then
    local f, err = field(rs, "factor", t == "llama3" and 8 or 1, "pos", w, "a number > 0")
    if not f then return nil, err end
    if f > FLT_MAX then return nil, ("%s \"factor\" is %s; it must fit a float32"):format(w, tostring(f)) end
  end
  if t == "llama3" then
    local lo, e1 = field(rs, "low_freq_factor", 1, "pos", w, "a number > 0")
    if not lo then return nil, e1 end
    local hi, e2 = field(rs, "high_freq_factor", 4, "pos", w, "a number > low_freq_factor")
    if not hi then return nil, e2 end
    if not (hi > lo) then
      return nil, ("%s: \"high_freq_factor\" %s must be greater than \"low_freq_factor\" %s"):format(w, tostring(hi),
        tostring(lo))
    end
    local old, e3 = field(rs, "original_max_position_embeddings", 8192, "size", w, SIZE)
    if not old then return nil, e3 end
  end
  return true
end

-- Normalizes a raw HF config; returns cfg or nil, msg naming the field. Values no model can have (a size
-- that is not a positive integer, heads that do not divide, rope_theta <= 0, rms_norm_eps < 0, NaN) are
-- refused here, before they become a graph whose outputs are all NaN.
function M.decoder_config(raw, where)
  where = where or "config.json"
  if type(raw) ~= "table" or raw[1] ~= nil then return nil, where .. ": the top level must be an object" end
  local mt = raw.model_type
  if not SUPPORTED[mt] then
    return nil, ("%s: model_type '%s' is not supported (llama, qwen2, qwen3, mistral)"):format(where, tostring(mt))
  end
  local c = { model_type = mt }
  local err
  for _, k in ipairs { "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size" } do
    c[k], err = field(raw, k, nil, "size", where, SIZE)
    if not c[k] then return nil, err end
  end
  if c.num_hidden_layers > M.MAX_LAYERS then
    return nil, ("%s: \"num_hidden_layers\" is %d; emmy builds at most %d layers"):format(where, c.num_hidden_layers,
      M.MAX_LAYERS)
  end
  c.num_key_value_heads, err = field(raw, "num_key_value_heads", c.num_attention_heads, "size", where, SIZE)
  if not c.num_key_value_heads then return nil, err end
  if raw.head_dim == nil or raw.head_dim == cjson.null then
    if c.hidden_size % c.num_attention_heads ~= 0 then
      return nil, ("%s: \"hidden_size\" %d is not a multiple of \"num_attention_heads\" %d (or give \"head_dim\")")
        :format(where, c.hidden_size, c.num_attention_heads)
    end
    c.head_dim = c.hidden_size / c.num_attention_heads
  else
    c.head_dim, err = field(raw, "head_dim", nil, "size", where, SIZE)
    if not c.head_dim then return nil, err end
  end
  if c.head_dim % 2 ~= 0 then
    return nil, ("%s: \"head_dim\" is %d; it must be even (rotary embeddings rotate its two halves)"):format(where,
      c.head_dim)
  end
  if c.num_attention_heads % c.num_key_value_heads ~= 0 then
    return nil, ("%s: %d attention heads are not a multiple of %d kv heads"):format(where, c.num_attention_heads,
      c.num_key_value_heads)
  end
  if (raw.hidden_act or "silu") ~= "silu" then return nil, ("%s: hidden_act '%s' is not supported (silu)"):format(where, tostring(raw.hidden_act)) end
  c.rms_norm_eps, err = field(raw, "rms_norm_eps", 1e-6, "nonneg", where, "a number >= 0 (e.g. 1e-6)")
  if not c.rms_norm_eps then return nil, err end
  c.rope_theta, err = field(raw, "rope_theta", 10000, "pos", where, "a number > 0 (the RoPE base, e.g. 10000)")
  if not c.rope_theta then return nil, err end
  if c.rope_theta > FLT_MAX then
    return nil, ("%s: \"rope_theta\" is %s; it must fit a float32 (the RoPE base, e.g. 10000)"):format(where,
      tostring(c.rope_theta))
  end
  c.max_position_embeddings, err = field(raw, "max_position_embeddings", 2048, "size", where, SIZE)
  if not c.max_position_embeddings then return nil, err end
  local okr, rerr0 = check_rope_scaling(raw.rope_scaling, where)
  if not okr then return nil, rerr0 end
  c.rope_scaling = raw.rope_scaling ~= cjson.null and raw.rope_scaling or nil
  c.tie_word_embeddings = raw.tie_word_embeddings == true
  c.qk_norm = mt == "qwen3"
  -- Qwen2 always has q/k/v biases; others follow attention_bias
  c.qkv_bias = mt == "qwen2" or raw.attention_bias == true
  c.o_bias = mt ~= "qwen2" and raw.attention_bias == true
  c.initializer_range, err = field(raw, "initializer_range", 0.02, "pos", where,
    "a number > 0 (the std of the seeded random weights, e.g. 0.02)")
  if not c.initializer_range then return nil, err end
  local dt = raw.torch_dtype or raw.dtype or "bfloat16"
  c.dtype = ({ bfloat16 = "bf16", float16 = "f16", float32 = "f32" })[dt]
  if not c.dtype then return nil, ("%s: torch_dtype '%s' is not supported"):format(where, tostring(dt)) end
  local sw = raw.use_sliding_window == true and raw.sliding_window ~= cjson.null and raw.sliding_window
  if mt == "mistral" and raw.sliding_window ~= nil and raw.sliding_window ~= cjson.null then sw = raw.sliding_window end
  if sw then
    local swv, serr = field(raw, "sliding_window", nil, "size", where, SIZE)
    if not swv then return nil, serr end
  end
  c.sliding_window = sw or nil
  c.architectures = type(raw.architectures) == "table" and raw.architectures or {}
  local inv, rerr = M.rope_inv_freq(c)
  if not inv then return nil, ("%s: %s"):format(where, rerr) end
  for i = 1, #inv do
    if inv[i] ~= inv[i] or inv[i] == math.huge or inv[i] == -math.huge then
      return nil, ("%s: rope_theta %s and head_dim %d give a non-finite rotary frequency"):format(where,
        tostring(c.rope_theta), c.head_dim)
    end
  end
  return c
end

-- Rotary inverse frequencies as Hugging Face computes them (float32), with rope_scaling applied, and the
-- attention scaling factor. Returns inv_freq (list), scaling, or nil, msg.
function M.rope_inv_freq(c)
  local ffi = require "ffi"
  local f = ffi.new("float[1]")
  local function f32(x) f[0] = x return f[0] end
  local D, base = c.head_dim, c.rope_theta
  local inv = {}
  for i = 0, D - 1, 2 do inv[#inv + 1] = f32(1.0 / f32(base ^ f32(f32(i) / D))) end
  local rs, scaling = c.rope_scaling, 1.0
  if rs then
    local t = rs.rope_type or rs.type or "default"
    if t == "default" then
      -- nothing
    elseif t == "linear" then
      for i = 1, #inv do inv[i] = f32(inv[i] / num(rs.factor, 1)) end
    elseif t == "llama3" then
      local factor, lo, hi = num(rs.factor, 8), num(rs.low_freq_factor, 1), num(rs.high_freq_factor, 4)
      local old = num(rs.original_max_position_embeddings, 8192)
      local lo_wl, hi_wl = old / lo, old / hi
      for i = 1, #inv do
        local wl = 2 * math.pi / inv[i]
        if wl > lo_wl then
          inv[i] = f32(inv[i] / factor)
        elseif wl >= hi_wl then
          local smooth = (old / wl - lo) / (hi - lo)
          inv[i] = f32((1 - smooth) * inv[i] / factor + smooth * inv[i])
        end
      end
    else
      return nil, ("rope_scaling type '%s' is not supported (default, linear, llama3)"):format(t)
    end
  end
  return inv, scaling
end

-- Checkpoint tensor names: "model." prefix for *ForCausalLM checkpoints; files on disk decide when present.
function M.weight_prefix(model, names)
  if names then
    if names["model.embed_tokens.weight"] then return "model." end
    if names["embed_tokens.weight"] then return "" end
  end
  for _, a in ipairs(model.cfg and model.cfg.architectures or {}) do
    if tostring(a):match("ForCausalLM$") then return "model." end
  end
  return ""
end

return M
