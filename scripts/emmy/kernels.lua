-- emmy.kernels — from a compiled graph (emmy.compiler) to variants: each kernel's facts for the rules, the
-- rules' verdicts and candidates, the chosen knobs (pins applied) and the emitted CUDA source.
local ir = require "emmy.ir"
local rules = require "emmy.rules"
local sys = require "emmy.sys"

local M = {}

-- The H200 the project deploys on: the target where no GPU is present, and the one the golden corpus
-- (tests/fixtures/cuda_golden/) is planned for on every machine. A fresh table each call.
function M.deploy_device()
  return { name = "NVIDIA H200", sm_count = 132, smem_static = 49152, smem_optin = 232448, max_threads = 1024,
    regs_per_block = 65536, cc = "9.0", cc_major = 9, arch = "sm_90a", assumed = true }
end

-- The target device: the GPU when one is present, else the deploy target (said so).
function M.device()
  local gpu = sys.cuda()
  local d = M.deploy_device()
  if gpu then
    d.name, d.sm_count, d.cc, d.assumed = gpu.name, gpu.sm_count, gpu.cc, false
    d.cc_major = tonumber(gpu.cc:match("^(%d+)"))
    d.arch = "sm_" .. gpu.cc:gsub("%.", "") .. (gpu.cc == "9.0" and "a" or "")
  end
  return d
end

local function args_of(n)
  local a = {}
  for _, kv in ipairs(n.args) do a[kv[1]] = kv[2] end
  return a
end

local function at_hint(g, d, bind)
  if type(d) == "number" then return d, false end
  return g:eval(d, bind), true
end

-- A contraction's facts that the legality table (src/ctr_legal.c) judges a variant on, as the emitter resolves them
-- (ir.ctr_facts: one computation, which the emitter's own check reads too, so that a candidate the rules keep is one
-- the emitter takes): dual, siblings and sibling_widths (the linears on the anchor's operand: merged side by side, or
-- a dual pair), stage and stage_step (a head-local epilogue's head width and the gcd of its reads' column shifts),
-- epilogue_reductions (head-local, over the staged result: NORM_EPI=1), prologue_reductions (a folded RMSNorm:
-- SPLIT_CONE=0) with split_cone, and the outputs the TMA-stored epilogues need: tma_store (EPI_SMEM=4), tma_fused
-- (EPI_SMEM=7) and tma_heads (7 into the result's [B, H, S, D] heads view). K and N are the rules' own, at the hint.
local function legality_facts(f, g, k)
  -- (where the emitter builds no contraction over the anchor, every variant fails with its reason: none of these)
  local cf = ir.ctr_facts(g, k.anchor) or { siblings = 1, sibling_widths = {}, stage = 0, stage_step = 1,
    epilogue_reductions = 0, prologue_reductions = 0 }
  f.dual, f.siblings, f.sibling_widths = cf.dual == true, cf.siblings, cf.sibling_widths
  f.stage = cf.stage > 0 and cf.stage or nil
  f.stage_step = cf.stage_step
  f.prologue_reductions, f.epilogue_reductions = cf.prologue_reductions, cf.epilogue_reductions
  f.split_cone = f.prologue_reductions > 0 and 0 or 1
  f.tma_store, f.tma_fused, f.tma_heads = cf.tma_store == true, cf.tma_fused == true, cf.tma_heads == true
end

-- A contraction's facts: M (M_symbolic), N, K, bias, epilogue, reductions, operands, siblings, stores, flops.
local function contraction_facts(f, g, k, nodes, bind, a)
  local n = nodes[k.anchor]
  local x = args_of(n)
  local A = g:value(x.input or x.self)
  local out = a.shape
  f.N = at_hint(g, out[#out], bind)
  local m = 1
  for i = 1, #out - 1 do
    local v, sym = at_hint(g, out[i], bind)
    m = m * v
    f.M_symbolic = f.M_symbolic or sym
  end
  f.M = m
  f.K = at_hint(g, A.shape[#A.shape], bind)
  f.has_bias = x.bias ~= nil and type(x.bias) == "string"
  f.epilogue = #g:nodes() - 1
  legality_facts(f, g, k)
  -- operands a copy engine can move: kernel inputs read as they are (no view, no computed prologue)
  local function is_input(name)
    for _, v in ipairs(g:inputs()) do if v.name == name then return true end end
    return false
  end
  f.linear = n.op == "aten.linear.default"
  f.a_direct = n.op == "aten.linear.default" and is_input(x.input)
  f.b_direct = n.op == "aten.linear.default" and is_input(x.weight)
  -- kernel inputs that are no linear's operand or bias (a residual the epilogue adds, RoPE's tables)
  local operands = {}
  for _, mm in ipairs(g:nodes()) do
    if mm.op == "aten.linear.default" then
      local y = args_of(mm)
      for _, key in ipairs { "input", "weight", "bias" } do if type(y[key]) == "string" then operands[y[key]] = true end end
    end
  end
  f.extra_inputs = 0
  for _, v in ipairs(g:inputs()) do if not operands[v.name] then f.extra_inputs = f.extra_inputs + 1 end end
  -- the multiply-adds of every weight the kernel applies to its operand (a dual or merged kernel: the sum of
  -- its siblings' widths, not the anchor's alone)
  local width = 0
  for _, w in ipairs(f.sibling_widths) do width = width + w end
  f.flops = 2 * f.M * f.K * math.max(f.N, width)
end

-- An attention's facts: E, Ev, L, S, heads, kv_heads, causal, gqa, masked, varlen, kv_rows, qkv_rows, batch.
local function attention_facts(f, g, k, nodes, bind)
  local x = args_of(nodes[k.anchor])
  local q, kk, v = g:value(x.query), g:value(x.key), g:value(x.value)
  local r = #q.shape
  f.E = type(q.shape[r]) == "number" and q.shape[r] or nil
  f.Ev = type(v.shape[r]) == "number" and v.shape[r] or nil
  f.L = at_hint(g, q.shape[r - 1], bind)
  f.S = at_hint(g, kk.shape[r - 1], bind)
  f.heads = r >= 3 and at_hint(g, q.shape[r - 2], bind) or 1
  f.kv_heads = r >= 3 and at_hint(g, kk.shape[r - 2], bind) or 1
  f.causal = x.is_causal == true
  f.gqa = x.enable_gqa == true
  f.masked = type(x.attn_mask) == "string"
  f.varlen = type(x.seq_pos) == "string" -- (sequences packed end to end: emmy serve --varlen)
  -- keys and values whose rows a copy engine can move: view ops only (no computed values) down to a kernel
  -- input with 16-byte rows; the emitter checks the strides exactly (emit.c: ex_strided)
  local strided = require("emmy.opclass").STRIDED_VIEW
  local function rows_of(name)
    local n = nodes[name]
    while n and strided[n.op] do
      name = args_of(n).self
      n = nodes[name]
    end
    if n then return false end
    local sh = g:value(name).shape
    return type(f.E) == "number" and f.E % 8 == 0 and type(sh[#sh]) == "number" and sh[#sh] % 8 == 0
  end
  f.kv_rows = rows_of(x.key) and rows_of(x.value)
  f.qkv_rows = f.kv_rows and rows_of(x.query)
  local b = 1
  for i = 1, r - 3 do b = b * at_hint(g, q.shape[i], bind) end
  f.batch = b
end

-- Facts a rule may read: kind, dtype, ops, name, hash, and per kind the extents at the hint (with a
-- *_symbolic flag when the extent depends on a symbol).
function M.facts(k)
  local g = k.repro
  local bind = assert(g:bind({}))
  local f = { name = k.name, kind = k.kind, hash = k.hash, ops = {}, nodes = #k.nodes }
  for _, n in ipairs(g:nodes()) do f.ops[#f.ops + 1] = n.op end
  local a = k.anchor and g:value(k.anchor)
  local nodes = {}
  for _, n in ipairs(g:nodes()) do nodes[n.name] = n end
  f.dtype = (a or g:value(g:outputs()[1])).dtype
  if k.kind == "contraction" then
    contraction_facts(f, g, k, nodes, bind, a)
  elseif k.kind == "row" or k.kind == "reduce" then
    f.softmax = nodes[k.anchor].op:match("softmax") ~= nil
    local x = g:value(args_of(nodes[k.anchor]).self)
    f.L = at_hint(g, x.shape[#x.shape], bind)
    local rows = 1
    for i = 1, #x.shape - 1 do rows = rows * at_hint(g, x.shape[i], bind) end
    f.rows = rows
  elseif k.kind == "attention" then
    attention_facts(f, g, k, nodes, bind)
  else
    local o = g:value(g:outputs()[1])
    local n = 1
    for _, d in ipairs(o.shape) do n = n * at_hint(g, d, bind) end
    f.numel = n
  end
  return f
end

-- The iteration domain in words: parallel and reduction axes with their extents at the hint.
function M.domain_text(f)
  if f.kind == "contraction" then
    return ("parallel M=%d%s N=%d; reduction K=%d"):format(f.M, f.M_symbolic and " (symbolic)" or "", f.N, f.K)
  elseif f.kind == "row" then
    return ("parallel rows=%d; reduction over each row L=%d"):format(f.rows, f.L)
  elseif f.kind == "reduce" then
    return ("parallel outputs; reduction L=%d"):format(f.L)
  elseif f.kind == "attention" then
    return ("parallel query rows=%d x heads %d (kv heads %d); reduction over keys S=%d%s; head dims %s/%s"):format(
      f.L, f.heads, f.kv_heads, f.S, f.causal and " (causal)" or "", tostring(f.E), tostring(f.Ev))
  end
  return ("parallel elements=%d"):format(f.numel or 0)
end

-- Runs the rules on every kernel. Returns list of plans {kernel, facts, eval, candidates (after pins),
-- choice (first candidate)}; a refused pin raises one line naming the gate, and so does a pin no kernel of ctx has
-- (rules.check_pins) unless opts.check_pins is false (the caller checks the whole run's plans itself). Kernels of
-- one name (the same structure: a whole model's layers) are evaluated once and share the facts and the verdicts;
-- each plan has its own candidate list (the whole Qwen3 model: 281 kernels, 13 names).
function M.plan(ctx, opts)
  opts = opts or {}
  local dev = opts.device or M.device()
  local rl = opts.rules or rules.load()
  local plans, by_name = {}, {}
  for _, k in ipairs(ctx.kernels) do
    local e = by_name[k.name]
    if not e then
      local f = M.facts(k)
      local ev = rules.evaluate(rl, f, dev)
      local pins = rules.pins(k.name, ev.declared, opts.env)
      e = { facts = f, eval = ev, pins = pins, candidates = rules.apply_pins(k.name, ev, pins) }
      by_name[k.name] = e
    end
    local cands = {}
    for i, c in ipairs(e.candidates) do cands[i] = c end
    plans[#plans + 1] = { kernel = k, facts = e.facts, eval = e.eval, candidates = cands, choice = cands[1], pins = e.pins,
      rules_choice = e.eval.candidates[1] }
  end
  if opts.check_pins ~= false then rules.check_pins(plans, opts.env) end
  return plans, dev
end

-- One line for each distinct kernel whose pins (EMMY_KNOBS, EMMY_<KNOB>) took a candidate differing from the rules'
-- choice in knobs it did not pin: a pin takes the first candidate with every pinned knob, whose other knobs are
-- that candidate's (pinning EPI_SMEM=5 on a kernel whose 128 x 128 lead has EPI_SMEM=0 may run a 64 x 64 tile).
function M.pin_notes(plans)
  local lines = {}
  for _, p in ipairs(M.distinct(plans)) do
    local c, r = p.choice, p.rules_choice
    if c and r and c ~= r and next(p.pins or {}) then
      local beyond, was = {}, {}
      local keys = {}
      for key in pairs(c.knobs) do keys[#keys + 1] = key end
      table.sort(keys)
      for _, key in ipairs(keys) do
        if p.pins[key] == nil and c.knobs[key] ~= r.knobs[key] then
          beyond[#beyond + 1] = ("%s=%s"):format(key, tostring(c.knobs[key]))
          was[#was + 1] = ("%s=%s"):format(key, tostring(r.knobs[key]))
        end
      end
      if #beyond > 0 then
        lines[#lines + 1] = ("pins: %s runs %s beyond its pins (the first candidate with them; the rules' choice has %s)"):format(
          p.kernel.name, table.concat(beyond, ","), table.concat(was, ","))
      end
    end
  end
  return lines
end

-- The plans whose kernel name contains substr (every plan where substr is nil), in order.
function M.named(plans, substr)
  local out = {}
  for _, p in ipairs(plans) do
    if not substr or p.kernel.name:find(substr, 1, true) then out[#out + 1] = p end
  end
  return out
end

-- The first plan of each distinct kernel (a kernel name), in order.
function M.distinct(plans)
  local seen, out = {}, {}
  for _, p in ipairs(plans) do
    if not seen[p.kernel.name] then
      seen[p.kernel.name] = true
      out[#out + 1] = p
    end
  end
  return out
end

-- The structural forks of graph g on dev: every assignment of the structural knobs (compiler.STRUCTURAL) that the
-- environment did not pin — only the pinned/default one when opts.all is false — compiled and planned; the
-- assignments that form the same kernels (the same multiset of structural hashes) are one fork. Returns
-- {{knobs = {KNOB = v}, plans = every kernel instance's plan, hashes = {plan's hash, ...}, graph = the graph the
-- kernels were formed on}, ...}, the default
-- assignment first, and the number of assignments tried.
function M.structural_forks(g, dev, opts)
  local compiler = require "emmy.compiler"
  local base, pinned = compiler.structural_pins()
  local free = {}
  if opts and opts.all then
    for key in pairs(compiler.STRUCTURAL) do if not pinned[key] then free[#free + 1] = key end end
    table.sort(free)
  end
  local forks, seen, tried, all = {}, {}, 0, {}
  for bits = 0, 2 ^ #free - 1 do
    local kn = {}
    for key, v in pairs(base) do kn[key] = v end
    -- bit i flips free knob i away from its default value, so bits = 0 is the default assignment
    for i, key in ipairs(free) do
      if math.floor(bits / 2 ^ (i - 1)) % 2 == 1 then kn[key] = 1 - base[key] end
    end
    tried = tried + 1
    local ctx = compiler.run(g, { knobs = kn })
    local plans = M.plan(ctx, { device = dev, check_pins = false })
    for _, p in ipairs(plans) do all[#all + 1] = p end
    local hashes = {}
    for i, p in ipairs(plans) do hashes[i] = p.kernel.repro:hash() end
    local sorted = { unpack(hashes) }
    table.sort(sorted)
    local sig = table.concat(sorted, ",")
    if not seen[sig] then
      seen[sig] = true
      forks[#forks + 1] = { knobs = kn, plans = plans, hashes = hashes, graph = ctx.graph }
    end
  end
  rules.check_pins(all)
  return forks, tried
end

-- Which original torch ops (by module) kernel k covers: {{module, op, nodes, coverage = "full"|"partial"}, ...} in
-- its provenance order; "full" when every node of that (module, op) in graph g (the graph the kernels were formed
-- on) is in the kernel. Memoized per graph.
local totals_of = setmetatable({}, { __mode = "k" })
function M.coverage(g, k)
  local totals = g and totals_of[g]
  if g and not totals then
    totals = {}
    for _, n in ipairs(g:nodes()) do
      local key = (n.module or "?") .. " " .. (n.src_op or n.op)
      totals[key] = (totals[key] or 0) + 1
    end
    totals_of[g] = totals
  end
  local cov = {}
  for _, pr in ipairs(k.provenance or {}) do
    local key = (pr.module or "?") .. " " .. pr.op
    cov[#cov + 1] = { module = pr.module, op = pr.op, nodes = pr.nodes,
      coverage = (totals and totals[key] and pr.nodes >= totals[key]) and "full" or "partial" }
  end
  return cov
end

-- A kernel's Layer-op and its coverage in one word. Index remaps (views, transposes) and recomputed tables (the
-- rotary cache) are left out; the main op is a contraction or attention when the kernel has one, else the first
-- op left; siblings with the same op join it ("self_attn.k_proj+v_proj linear"); modules lose the
-- model.layers.N. prefix. Coverage is "full" when every op left is covered wholly, else "partial".
local REMAP = { view = true, reshape = true, transpose = true, permute = true, unsqueeze = true, expand = true,
  contiguous = true, rotary_emb = true }
local function short_op(op) return (op:gsub("^torch%.nn%.functional%.", ""):gsub("^torch%.", "")) end
function M.layer_op(g, k)
  local cov = M.coverage(g, k)
  local real = {}
  for _, c in ipairs(cov) do if not REMAP[short_op(c.op)] then real[#real + 1] = c end end
  if #real == 0 then real = cov end
  local main = real[1]
  for _, c in ipairs(real) do
    local o = short_op(c.op)
    if o == "linear" or o:match("attention") then main = c break end
  end
  if not main then return "?", "partial", cov end
  local function short(m) return ((m or "?"):gsub("^model%.layers%.%d+%.", ""):gsub("^model%.", "")) end
  local mods, full = { short(main.module) }, true
  for _, c in ipairs(real) do
    if c ~= main and c.op == main.op then mods[#mods + 1] = short(c.module):match("[^.]+$") end
    if c.coverage ~= "full" then full = false end
  end
  return table.concat(mods, "+") .. " " .. short_op(main.op), full and "full" or "partial", cov
end

-- The plan of a reproducer's main kernel on dev: a reproducer may re-form with a copy kernel for a view it
-- returns, so the main one is the first contraction, else attention, row, reduce, pointwise. The bench worker
-- measures this plan and the tuner compiles ahead from it (the same source, so the cubin cache serves the worker).
-- (The run's pins were checked against the whole run's kernels where it was planned, not against this one.)
function M.repro_plan(g, dev)
  local plans = M.plan(require("emmy.compiler").run(g), { device = dev, check_pins = false })
  local RANK = { contraction = 1, attention = 2, row = 3, reduce = 4, pointwise = 5 }
  local p = plans[1]
  for _, q in ipairs(plans) do if (RANK[q.kernel.kind] or 9) < (RANK[p.kernel.kind] or 9) then p = q end end
  return p
end

-- A seeded shuffle of the candidates, the chosen one first.
function M.sample(cands, n, seed)
  local idx = {}
  for i = 2, #cands do idx[#idx + 1] = i end
  local x = seed * 2654435761 % 4294967296
  for i = #idx, 2, -1 do
    x = (x * 1103515245 + 12345) % 2147483648
    local j = x % i + 1
    idx[i], idx[j] = idx[j], idx[i]
  end
  local out = { cands[1] }
  for i = 1, math.min(n - 1, #idx) do out[#out + 1] = cands[idx[i]] end
  return out
end

-- `emmy compile --pins`: each plan's chosen variant replaced by its knobs with set (K = V) over them (a variant the
-- rules need not list; the emitter refuses a knob the kernel does not have). Plans sharing a kernel are pinned once.
function M.pin_choices(plans, set)
  local done = {}
  for _, p in ipairs(plans) do
    if not done[p.choice] then
      local kn = require("emmy.gpu").knobs_over(p, set) -- (gpu requires this module: loaded here, not at the top)
      done[p.choice] = { knobs = kn, string = require("emmy.rules").knob_string(kn) }
    end
    p.choice = done[p.choice]
  end
end

-- A tune's picks (tune.json's `kernels`: {name, best_knobs}, the warm floor already applied) as the choices of plans:
-- a plan takes its kernel's pick where the kernel is the tuned one (its name: the same sub-graph, so the same hash)
-- and the pick is among its candidates. Returns {applied = n distinct kernels, kernels = n distinct kernels of plans,
-- absent = {names picked but not in plans}, refused = {names whose pick is not a candidate here}}.
function M.apply_picks(plans, picks)
  local want, absent, refused, applied, seen = {}, {}, {}, {}, {}
  for _, pk in ipairs(picks or {}) do
    if type(pk) == "table" and pk.name and pk.best_knobs then want[pk.name] = pk.best_knobs end
  end
  local n = 0
  for _, p in ipairs(plans) do
    local name, s = p.kernel.name, want[p.kernel.name]
    if not seen[name] then n, seen[name] = n + 1, true end
    if s then
      local hit
      for _, c in ipairs(p.candidates) do
        if c.string == s then hit = c break end
      end
      if hit then p.choice, applied[name] = hit, true else refused[name] = true end
    end
  end
  local out = { applied = 0, kernels = n, absent = {}, refused = {} }
  for _ in pairs(applied) do out.applied = out.applied + 1 end
  for name in pairs(want) do if not seen[name] then absent[#absent + 1] = name end end
  for name in pairs(refused) do out.refused[#out.refused + 1] = name end
  table.sort(absent)
  table.sort(out.refused)
  out.absent = absent
  return out
end

-- Reads a tune's picks from path (tune.json, `emmy tune --dump-dir D`): the kernels list | nil, msg.
function M.read_picks(path)
  local t, err = require("emmy.models").read_json(path)
  if not t then return nil, ("--picks %s"):format(tostring(err)) end
  if type(t) ~= "table" or type(t.kernels) ~= "table" then
    return nil, ("--picks %s: not a tune's summary (tune.json with a kernels list)"):format(path)
  end
  return t.kernels
end

-- The line that says what apply_picks did.
function M.picks_line(r, path)
  local extra = {}
  if #r.absent > 0 then extra[#extra + 1] = ("not in this graph: %s"):format(table.concat(r.absent, ", ")) end
  if #r.refused > 0 then extra[#extra + 1] = ("not a candidate here: %s"):format(table.concat(r.refused, ", ")) end
  return ("picks: %d of %d distinct kernels take the tune's pick from %s%s"):format(r.applied, r.kernels, path,
    #extra > 0 and ("; " .. table.concat(extra, "; ")) or "")
end

-- Emits the CUDA source of a plan's variant (knobs: a candidate's knob table).
function M.emit(plan, knobs)
  local k = plan.kernel
  return ir.emit(k.repro, { kind = k.kind, anchor = k.anchor, name = k.name, knobs = knobs or (plan.choice and plan.choice.knobs) or {} })
end

-- The variants `emmy compile --nvrtc` compiles, in order: each distinct kernel's chosen candidate, every candidate
-- (opts.all_variants) or the chosen and opts.sample - 1 others drawn by a seeded shuffle (opts.seed). {{plan, cand}, ...}
function M.variant_list(plans, opts)
  local which = {}
  for _, p in ipairs(M.distinct(plans)) do
    local list = opts.all_variants and p.candidates or { p.choice }
    if opts.sample and opts.sample > 1 then list = M.sample(p.candidates, opts.sample, (opts.seed or 0) + 1) end
    for _, c in ipairs(list) do which[#which + 1] = { plan = p, cand = c } end
  end
  return which
end

-- A variant list as JSON lines ({"kernel", "knobs" (a table), "string"}), in its order: what `emmy slurm compile`
-- plans once and its tasks read (`emmy compile --variants`), so that no task plans the model again.
function M.variants_jsonl(which)
  local cjson = require "cjson"
  local lines = {}
  for i, w in ipairs(which) do
    lines[i] = cjson.encode({ kernel = w.plan.kernel.name, knobs = w.cand.knobs, string = w.cand.string })
  end
  return table.concat(lines, "\n") .. (#lines > 0 and "\n" or "")
end

-- The variant list of path (M.variants_jsonl's lines) over the kernels of ctx (compiler.run's, not planned: a
-- variant's plan is {kernel = k} with the first kernel of its name). Returns the list, or nil, msg naming the line.
function M.read_variants(ctx, path)
  local cjson = require "cjson"
  local f, err = io.open(path)
  if not f then return nil, ("--variants: %s"):format(err) end
  local by_name = {}
  for _, k in ipairs(ctx.kernels) do if not by_name[k.name] then by_name[k.name] = { kernel = k } end end
  local which, n = {}, 0
  for line in f:lines() do
    n = n + 1
    if line:find("%S") then
      local ok, v = pcall(cjson.decode, line)
      if not ok or type(v) ~= "table" or type(v.kernel) ~= "string" or type(v.knobs) ~= "table" or type(v.string) ~= "string" then
        f:close()
        return nil, ("--variants %s:%d: not a variant line ({\"kernel\", \"knobs\", \"string\"})"):format(path, n)
      end
      local p = by_name[v.kernel]
      if not p then
        f:close()
        return nil, ("--variants %s:%d: kernel %s is not a kernel of this model (written for another model or flags?)"):format(path, n, v.kernel)
      end
      which[#which + 1] = { plan = p, cand = { knobs = v.knobs, string = v.string } }
    end
  end
  f:close()
  return which
end

-- "I/N" (0 <= I < N) as {i, n}, or nil, msg.
function M.parse_shard(spec)
  local i, n = tostring(spec):match("^(%d+)/(%d+)$")
  i, n = tonumber(i), tonumber(n)
  if not i or n < 1 or i >= n then return nil, ("--shard %s: I/N with 0 <= I < N (e.g. 0/4)"):format(tostring(spec)) end
  return { i = i, n = n }
end

-- Shard s of list: every n-th item from the i-th (0-based), so the n shards together hold each item once and each
-- takes its share of every kernel (a kernel's variants cost alike to compile; contiguous ranges left the shards with
-- the attention and matmul variants a third slower than the others: Qwen3 layer 0's sample of 20 a kernel as 4 SLURM
-- tasks on 2 cores took 1.30x one process).
function M.shard(list, s)
  local out = {}
  for k = s.i + 1, #list, s.n do out[#out + 1] = list[k] end
  return out
end

-- One JSON line a compiled variant ({kernel, knobs, status, regs, spills, smem}), sorted: shards' files
-- concatenated and sorted equal one process's.
function M.results_jsonl(which, res)
  local cjson = require "cjson"
  local lines = {}
  for i, w in ipairs(which) do
    local r = res[i] or {}
    local function j(x) return cjson.encode(x == nil and cjson.null or x) end -- (keys in a fixed order: lines compare)
    lines[#lines + 1] = ('{"kernel":%s,"knobs":%s,"status":%s,"regs":%s,"spills":%s,"smem":%s}'):format(j(w.plan.kernel.name),
      j(w.cand.string), j(r.status or "none"), j(r.regs), j(r.spill_stores), j(r.smem))
  end
  table.sort(lines)
  return table.concat(lines, "\n") .. (#lines > 0 and "\n" or "")
end

return M
