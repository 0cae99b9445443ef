-- emmy.weights — the tensors behind a model graph's params, by checkpoint name: memory-mapped safetensors
-- when the model folder has them, else deterministic seeded random weights with Hugging Face's initializer
-- statistics (normal(0, initializer_range) for linears and embeddings, ones for norms, zeros for biases).
-- The rotary tables "rotary.cos" / "rotary.sin" are computed from the config, as HF computes them.
local ref = require "emmy.ref"
local sys = require "emmy.sys"
local models = require "emmy.models"

local M = {}
local P = {}
P.__index = P

M.ROPE_COS, M.ROPE_SIN = "rotary.cos", "rotary.sin"

-- Opens the weights of a resolved model (models.resolve + cfg). opts.seed (random weights), opts.random
-- (force random even when files exist). Returns provider | nil, msg.
function M.open(model, opts)
  opts = opts or {}
  local p = setmetatable({ model = model, cfg = model.cfg, seed = opts.seed or 0, where = {}, handles = {},
    names = {} }, P)
  if #model.weights > 0 and not opts.random then
    local st = require "emmy.safetensors"
    for _, f in ipairs(model.weights) do
      local h, err = st.open(f)
      if not h then return nil, err end
      p.handles[#p.handles + 1] = h
      for _, t in ipairs(h:tensors()) do
        p.where[t.name] = h
        p.names[t.name] = t
      end
    end
    p.random = false
    p.describe = ("weights from %d safetensors file(s) in %s"):format(#model.weights, model.dir)
  else
    p.random = true
    p.describe = ("random weights (seed %d: normal(0, %g) for linears and embeddings, ones for norms)"):format(p.seed,
      model.cfg.initializer_range)
  end
  p.prefix = models.weight_prefix(model, not p.random and p.names or nil)
  return p
end

function P:close()
  for _, h in ipairs(self.handles) do h:close() end
  self.handles = {}
end

local function shape_eq(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end

local function shape_str(s) return "[" .. table.concat(s, ", ") .. "]" end

function P:rope(dtype, rows)
  if not self.rope_cache or self.rope_cache.dtype ~= dtype or self.rope_cache.rows ~= rows then
    local inv, scaling = models.rope_inv_freq(self.cfg)
    if not inv then return nil, scaling end
    local c, s = ref.rope_tables(dtype, rows, inv, scaling)
    self.rope_cache = { dtype = dtype, rows = rows, [M.ROPE_COS] = c, [M.ROPE_SIN] = s }
  end
  return self.rope_cache
end

-- The tensor for weight `name` as dtype with the given concrete shape; nil, msg when absent or mismatched,
-- nil, msg, 1 when it cannot be allocated.
function P:get(name, dtype, shape)
  if name == M.ROPE_COS or name == M.ROPE_SIN then
    local okr, rc, err = pcall(self.rope, self, dtype, shape[1])
    if not okr then return nil, ("weight '%s': %s"):format(name, tostring(rc)), 1 end
    if not rc then return nil, err end
    return rc[name]
  end
  if not self.random then
    local h = self.where[name]
    if not h then return nil, ("weight '%s' is not in %s"):format(name, self.model.dir) end
    local info = self.names[name]
    if not shape_eq(info.shape, shape) then
      return nil, ("weight '%s' has shape %s in %s but the graph needs %s"):format(name, shape_str(info.shape),
        self.model.dir, shape_str(shape))
    end
    return h:load(name, dtype)
  end
  local seed = (sys.fnv(name) + self.seed * 7919) % 2 ^ 48
  -- emmy.ref raises one line for a tensor the machine cannot hold; it is returned as nil, msg
  local ok, t = pcall(function()
    if name:match("norm%.weight$") then return ref.full(dtype, shape, 1) end
    if name:match("%.bias$") then return ref.full(dtype, shape, 0) end
    -- drawn in the checkpoint's dtype, so a graph in another dtype sees the same (exactly converted) weights
    local native = self.cfg.native_dtype or dtype
    local r = ref.random(native, shape, { seed = seed, std = self.cfg.initializer_range })
    if native ~= dtype then r = r:cast(dtype) end
    return r
  end)
  if not ok then return nil, ("weight '%s': %s"):format(name, tostring(t)), 1 end
  return t
end

return M
