-- 020_form_kernels — partitions the graph into kernels, each with at most one heavy anchor:
--   * a contraction (linear/mm/bmm/matmul) or attention (SDPA) anchor takes its elementwise epilogue
--     (residual add, SiLU·mul, casts) — elementwise consumers whose other inputs are already in memory;
--   * a reduction over the last dim (RMSNorm's mean, softmax, a vector norm) forms a row kernel with its
--     prologue cone (the elementwise ops computing its input) and its epilogue (ops on the row, such as the
--     normalisation, the weight, a following RoPE);
--   * other reductions form reduce kernels; leftover elementwise work forms pointwise kernels.
-- Views are index remaps inside the kernels that read them and are never materialized. Elementwise values
-- that depend only on graph inputs (casts of x, rotary table slices) are recomputed by every kernel that
-- reads them. A value crosses kernels through memory: it becomes an output of the kernel that computes it.
-- Structural forks that change which kernels exist read their knob from ctx.knobs (global pins):
--   SPLIT_CONE=1 (default): a contraction never takes its operand's elementwise cone as a prologue.
--   ROPE_EPI=1 (default): a linear's kernel also takes the epilogue ops that read its result at other columns
--   of the same head (RoPE's rotate_half on a Llama q/k projection); the result tile is staged in shared memory.
--   NORM_EPI=1 (off by default): it also takes a per-head RMSNorm of its result (Qwen3's q_norm/k_norm) as a
--   reduction over each head of the staged tile, and what follows it (RoPE); only with ROPE_EPI=1 (the staging).
local opclass = require "emmy.opclass"

local function argmap(n)
  local a = {}
  for _, kv in ipairs(n.args) do a[kv[1]] = kv[2] end
  return a
end
local function last_axis(a, r) return a == -1 or a == r - 1 end
local function gcd(a, b)
  a, b = math.abs(a), math.abs(b)
  while b ~= 0 do a, b = b, a % b end
  return a
end

local function last_dim_reduction(n, g)
  local a = argmap(n)
  local r = #g:value(a.self).shape
  if n.op == "aten._softmax.default" or n.op == "aten.softmax.int" then return last_axis(a.dim, r) end
  local dims = a.dim
  if type(dims) ~= "table" or #dims ~= 1 then return false end
  return last_axis(dims[1], r)
end

-- Tensor arguments by schema kind (strings in int lists are dim expressions, not values).
local TENSOR_KINDS = { T = true, ["T?"] = true, TS = true, ["T[]"] = true }
local kinds_by_op
local function tensor_inputs(n)
  if not kinds_by_op then
    kinds_by_op = {}
    for _, o in ipairs(require("emmy.ir").ops()) do
      local t = {}
      for _, a in ipairs(o.args) do t[a.name] = a.kind end
      kinds_by_op[o.name] = t
    end
  end
  local out = {}
  for _, kv in ipairs(n.args) do
    local v, kind = kv[2], kinds_by_op[n.op][kv[1]]
    if TENSOR_KINDS[kind] then
      if type(v) == "string" then out[#out + 1] = v
      elseif type(v) == "table" and v[1] ~= nil then
        for _, x in ipairs(v) do out[#out + 1] = x end
      end
    end
  end
  return out
end

-- True when a value of ne elements is a whole number of parts of each row of a row kernel (ne divides
-- by the row count and the domain divides by ne), checked on the symbolic sizes.
local function row_part(g, ne, k)
  local rows, dom = k.rows_numel, k.domain_numel
  -- exact division, tested by evaluating at two bindings of the symbols
  for _, s in ipairs { 3, 7 } do
    local b = {}
    for _, y in ipairs(g:symbols()) do if not y.derived then b[y.name] = s end end
    local a, r, d = g:eval(ne, b), g:eval(rows, b), g:eval(dom, b)
    if not (a and r and d) or a % r ~= 0 or d % a ~= 0 then return false end
  end
  return true
end

local function numel_expr(g, shape)
  local parts = {}
  for _, d in ipairs(shape) do parts[#parts + 1] = "(" .. tostring(d) .. ")" end
  return #parts > 0 and g:dim(table.concat(parts, "*")) or 1
end


-- Views that remap every element to exactly one other (same-index reads may see through them).
local BIJECTIVE = { ["aten.view.default"] = true, ["aten.reshape.default"] = true, ["aten._unsafe_view.default"] = true,
  ["aten.transpose.int"] = true, ["aten.t.default"] = true, ["aten.permute.default"] = true,
  ["aten.unsqueeze.default"] = true, ["aten.squeeze.dim"] = true }

-- The pass's shared state: the graph's maps, the classification, the kernels and where each value lives.
local function new_state(ctx)
  local g = ctx.graph
  return {
    ctx = ctx, g = g, knobs = ctx.knobs, nodes = g:nodes(),
    by_name = {}, producer = {}, consumers = {}, is_output = {},
    free = {}, kind_of = {}, absorbed = {}, cone_owner = {},
    kernels = {}, home = {}, same_idx = {}, headloc = {}, segred = {}, anc = {}, folded = {},
    sibling_kernel = {}, shift = nil,
  }
end

-- Indexes the nodes: their positions and tensor inputs, each value's producer and consumers, the outputs.
local function index_graph(S)
  local producer, consumers = S.producer, S.consumers
  for i, n in ipairs(S.nodes) do
    S.by_name[n.name] = n
    n.index = i
    n.inputs = tensor_inputs(n)
    producer[n.name] = n
    consumers[n.name] = {}
  end
  for _, v in ipairs(S.g:inputs()) do consumers[v.name] = {} end
  for _, n in ipairs(S.nodes) do
    for _, x in ipairs(n.inputs) do table.insert(consumers[x], n) end
  end
  for _, o in ipairs(S.g:outputs()) do S.is_output[o] = true end
end

-- Marks the free values: computed from graph inputs alone (recomputable anywhere), no anchor upstream.
local function mark_free(S)
  local free = S.free
  for _, n in ipairs(S.nodes) do
    local f = not opclass.is_anchor(n.op)
    for _, x in ipairs(n.inputs) do
      if S.producer[x] and not free[x] then f = false end
    end
    free[n.name] = f
  end
end

-- Classifies each anchor as a contraction, attention, row (last-dim) or reduce anchor.
local function classify_anchors(S)
  for _, n in ipairs(S.nodes) do
    if opclass.CONTRACTION[n.op] then S.kind_of[n.name] = "contraction"
    elseif opclass.ATTENTION[n.op] then S.kind_of[n.name] = "attention"
    elseif opclass.REDUCTION[n.op] then S.kind_of[n.name] = last_dim_reduction(n, S.g) and "row" or "reduce" end
  end
end

-- The reduced width R of a last-dim mean/sum n that reads a linear's result through elementwise ops and views
-- keeping R-wide segments of its N whole, or nil when it does not.
local function head_norm_width(S, n)
  local g, producer, free, EW = S.g, S.producer, S.free, opclass.ELEMENTWISE
  local ishape = g:value(n.inputs[1]).shape
  local R, y, ok = ishape[#ishape], n.inputs[1], true
  while ok do
    local p = producer[y]
    if not p then ok = false break end
    if p.op == "aten.linear.default" then break end
    local oshape, inshape = g:value(p.name).shape, p.inputs[1] and g:value(p.inputs[1]).shape
    if opclass.VIEW[p.op] then
      local a, r_in = argmap(p), #inshape
      local lo, li = oshape[#oshape], inshape[#inshape]
      if p.op == "aten.view.default" or p.op == "aten.reshape.default" or p.op == "aten._unsafe_view.default" then
        ok = type(lo) == "number" and type(li) == "number" and li % lo == 0
      elseif p.op == "aten.transpose.int" then
        ok = not last_axis(a.dim0, r_in) and not last_axis(a.dim1, r_in)
      else
        ok = false
      end
      y = p.inputs[1]
    elseif EW[p.op] and p.op ~= "aten.cat.default" then
      local dep
      for _, x in ipairs(p.inputs) do
        if producer[x] and not free[x] then
          if dep then ok = false end
          dep = x
        end
      end
      ok = ok and dep ~= nil and numel_expr(g, g:value(dep).shape) == numel_expr(g, oshape)
      y = dep
    else
      ok = false
    end
  end
  local N = ok and g:value(y).shape
  N = N and N[#N]
  if ok and type(R) == "number" and type(N) == "number" and N % R == 0 and R <= 256 then -- (a tile holds it)
    return R
  end
end

-- NORM_EPI=1 (a structural fork, off by default): a last-dim mean/sum whose input is a linear's result seen
-- through elementwise ops and views that keep R-wide segments of its N whole (Qwen3's q_norm/k_norm over each
-- 128-wide head) is no row anchor: it joins the linear's kernel as a head-local reduction over the staged
-- result tile (absorbed[v] = R, the reduced width)
-- (it needs the staged result tile of ROPE_EPI=1, and merged siblings have none: with MERGE_SIBLINGS=1 and
-- DUAL_GATE=0 every sibling merges, so it forms the NORM_EPI=0 kernels; with DUAL_GATE=1 the linears it joins stay
-- apart, staged_operands. With ROPE_EPI=0 its kernel could not be emitted — an output not aligned with the result —
-- so it forms the NORM_EPI=0 kernels too)
local function absorb_head_norms(S)
  local knobs, kind_of = S.knobs, S.kind_of
  local merged = (knobs.MERGE_SIBLINGS or 0) == 1 and (knobs.DUAL_GATE or 0) ~= 1
  if not ((knobs.NORM_EPI or 0) == 1 and (knobs.ROPE_EPI or 1) == 1 and not merged) then return end
  for _, n in ipairs(S.nodes) do
    if kind_of[n.name] == "row" and (n.op == "aten.mean.dim" or n.op == "aten.sum.dim_IntList") then
      local R = head_norm_width(S, n)
      if R then
        S.absorbed[n.name] = R
        kind_of[n.name] = nil
      end
    end
  end
end

-- The prologue cone of row anchor n (dependent elementwise ops and views feeding the reduction): a node joins
-- it only when every consumer is in the cone, is the anchor, or is a possible epilogue of it (reached from the
-- anchor through elementwise ops and views alone). Returns the set of its values.
local function row_cone(S, n)
  local nodes, producer, consumers, free, cone_owner = S.nodes, S.producer, S.consumers, S.free, S.cone_owner
  local epi = { [n.name] = true }
  for _, m in ipairs(nodes) do
    if m.index > n.index and not opclass.is_anchor(m.op) then
      for _, x in ipairs(m.inputs) do if epi[x] then epi[m.name] = true end end
    end
  end
  local cand, stack = {}, { n.inputs[1] }
  while #stack > 0 do
    local v = table.remove(stack)
    local p = producer[v]
    if p and not opclass.is_anchor(p.op) and not free[v] and not cone_owner[v] and not cand[v] then
      cand[v] = true
      for _, x in ipairs(p.inputs) do stack[#stack + 1] = x end
    end
  end
  local changed = true
  while changed do
    changed = false
    for v in pairs(cand) do
      for _, c in ipairs(consumers[v]) do
        if not (cand[c.name] or epi[c.name]) then
          cand[v] = nil
          changed = true
          break
        end
      end
    end
  end
  -- keep only what still feeds the anchor through the cone
  local keep, st = {}, { n.inputs[1] }
  while #st > 0 do
    local v = table.remove(st)
    if cand[v] and not keep[v] then
      keep[v] = true
      for _, x in ipairs(producer[v].inputs) do st[#st + 1] = x end
    end
  end
  return keep
end

-- Assigns each row anchor's prologue cone to it (cone_owner[v] = the anchor), in node order.
local function assign_row_cones(S)
  for _, n in ipairs(S.nodes) do
    if S.kind_of[n.name] == "row" then
      for v in pairs(row_cone(S, n)) do S.cone_owner[v] = n.name end
    end
  end
end

-- A new kernel of this kind and anchor, appended to the kernel list.
local function new_kernel(S, kind, anchor)
  local k = { kind = kind, anchor = anchor, homed = {}, order = #S.kernels + 1 }
  S.kernels[#S.kernels + 1] = k
  return k
end

-- The kernel a value lives in (following views back to what they view); nil for graph inputs / free.
local function kernel_of(S, v)
  while true do
    local p = S.producer[v]
    if not p then return nil end
    if S.home[v] then return S.home[v] end
    if opclass.VIEW[p.op] then v = p.inputs[1] else return nil end
  end
end

-- The symbolic element count of value v.
local function numel(S, v) return numel_expr(S.g, S.g:value(v).shape) end

-- Sets a row kernel's domain: its reduction's input, and the sizes row_part checks epilogues against.
local function row_domain(S, k, n)
  k.domain, k.rows_numel, k.domain_numel = n.inputs[1], numel(S, n.name), numel(S, n.inputs[1])
end

-- True when operand x of node v is read at v's own index: x is a homed value marked same-index, seen
-- through bijective views only, with as many elements as v.
local function same_index(S, x, v)
  if numel(S, x) ~= numel(S, v) then return false end
  local producer, y = S.producer, x
  while producer[y] and opclass.VIEW[producer[y].op] and not S.home[y] do
    if not BIJECTIVE[producer[y].op] then return false end
    y = producer[y].inputs[1]
  end
  return S.same_idx[y] == true
end

-- The segment width D an in-kernel operand x of kernel k is read within, "same" when it is read at the
-- anchor's own index, or nil when neither holds
-- (S.shift: the gcd of the column offsets the head-local reads move by — each slice's start and end, each
-- concatenated piece's width — in head_local's result; every shift is a multiple of it).
local function segment_of(S, x, k)
  local g, producer, home = S.g, S.producer, S.home
  local chain, y = {}, x
  while producer[y] and opclass.VIEW[producer[y].op] and not home[y] do
    table.insert(chain, 1, producer[y])
    y = producer[y].inputs[1]
  end
  if home[y] ~= k then return nil end
  local shape = g:value(y).shape
  local last = shape[#shape]
  if type(last) ~= "number" then return nil end
  local seg = S.headloc[y]
  if not seg and not S.same_idx[y] then return nil end
  for _, c in ipairs(chain) do
    local a, out = argmap(c), g:value(c.name).shape
    local r_in = #g:value(c.inputs[1]).shape
    if c.op == "aten.slice.Tensor" then
      if not last_axis(a.dim, r_in) or (a.step or 1) ~= 1 then return nil end
      seg = seg or last
      local w = g:value(c.name).shape
      S.shift = gcd(S.shift, gcd(type(a.start) == "number" and a.start or 0, type(w[#w]) == "number" and w[#w] or 1))
    elseif seg then
      -- after the remap only views that keep each last-dim row whole (a transpose of other axes)
      if not (c.op == "aten.transpose.int" and not last_axis(a.dim0, r_in) and not last_axis(a.dim1, r_in))
        and not ((c.op == "aten.view.default" or c.op == "aten.reshape.default") and out[#out] == last) then
        return nil
      end
    elseif BIJECTIVE[c.op] and c.op ~= "aten.unsqueeze.default" and c.op ~= "aten.squeeze.dim" then
      local l2 = out[#out]
      if type(l2) ~= "number" or last % l2 ~= 0 then return nil end
      if c.op == "aten.transpose.int" and (last_axis(a.dim0, r_in) or last_axis(a.dim1, r_in)) then return nil end
      if c.op == "aten.permute.default" and not last_axis(a.dims[#a.dims], r_in) then return nil end
      if c.op == "aten.t.default" and r_in > 1 then return nil end
      last = l2
    else
      return nil
    end
  end
  return seg or "same"
end

-- The head-local epilogue of a linear (RoPE's rotate_half on a q/k projection): values that read the
-- linear's result at other columns of the same D-wide segment of its N (a head), through slices of the last
-- dim, negations and concatenations. headloc[v] = D. The emitter stages the result tile in shared memory
-- for them (kernel meta "stage" = D; the tile rules then keep BN a multiple of D).
-- ROPE_EPI=1 (a structural fork, default): take them; 0: they form pointwise kernels of their own.
-- segred[v]: a value per (row, segment) — an absorbed reduction and what is computed from it alone; its
-- readers broadcast it over the segment.
-- Whether node n is such an epilogue of contraction kernel k: its segment width D, whether it reads only
-- per-segment values (segred), and the gcd of its column shifts; nil when it is not.
local function head_local(S, n, k)
  if not k or k.kind ~= "contraction" or (#k.anchors > 1 and not k.dual) then return nil end
  if S.producer[k.anchors[1]].op ~= "aten.linear.default" then return nil end
  local g, home = S.g, S.home
  local shape = g:value(n.name).shape
  local D, a = nil, argmap(n)
  if S.absorbed[n.name] then
    -- the reduction spans one R-wide segment of the result, read at its own index
    local x = n.inputs[1]
    if not (kernel_of(S, x) == k or home[x] == k) or segment_of(S, x, k) ~= "same" then return nil end
    return S.absorbed[n.name], true
  end
  local is_cat = n.op == "aten.cat.default"
  if is_cat and not last_axis(a.dim, #shape) then return nil end
  S.shift = 0
  if not is_cat and not opclass.ELEMENTWISE[n.op] then return nil end
  local all_red = true
  for _, x in ipairs(n.inputs) do
    if kernel_of(S, x) == k or home[x] == k then
      local sg = segment_of(S, x, k)
      if not sg then return nil end
      if sg ~= "same" then
        if D and D ~= sg then return nil end
        D = sg
      end
      local xs = g:value(x).shape
      if is_cat then S.shift = gcd(S.shift, type(xs[#xs]) == "number" and xs[#xs] or 1) end
      if S.segred[x] then
        -- a per-segment value, broadcast over the segment (shape [..., 1] against [..., D])
        if is_cat or xs[#xs] ~= 1 or #xs ~= #shape then return nil end
      else
        all_red = false
        -- an elementwise op reads its other in-kernel operands at its own index (no broadcast)
        if not is_cat and numel(S, x) ~= numel(S, n.name) then return nil end
      end
    elseif is_cat then
      return nil
    end
  end
  if not D or type(shape[#shape]) ~= "number" or shape[#shape] > D then return nil end
  return D, all_red, S.shift
end

-- The merged kernel's 128 x 128 tiles at most in one wave of a GPU of 132 SMs (the H100's and H200's count): the
-- operand's rows at the hint x its linears' widths together. Merged, Qwen3's q/k/v at 512 tokens (128 tiles) take
-- 11.7 µs against 5.8 + 7.6 apart, at 4096 tokens 59.8 against 25.0 + 27.3 (H100, forty-second session: _atom.lua's
-- merged_lead).
local MERGE_TILES = 132
local function merge_fits(S, op)
  local g = S.g
  if S.hint_bind == nil then S.hint_bind = g:bind({}) or false end
  if not S.hint_bind then return false end -- (a symbol without a hint: no size to judge by, apart)
  local sh, rows, n = g:value(op).shape, 1, 0
  for i = 1, #sh - 1 do
    local d = type(sh[i]) == "number" and sh[i] or g:eval(sh[i], S.hint_bind)
    if not d then return false end
    rows = rows * d
  end
  for _, m in ipairs(S.nodes) do
    if m.op == "aten.linear.default" and m.inputs[1] == op then n = n + g:value(m.inputs[2]).shape[1] end
  end
  return math.ceil(rows / 128) * math.ceil(n / 128) <= MERGE_TILES
end

-- The key of linear n's siblings' kernel (nil: a kernel of its own), and whether they form a dual pair:
-- MERGE_SIBLINGS=1 (a structural fork): linears reading the same operand (q/k/v, gate/up) form one
-- kernel whose N is their weights' rows side by side; each keeps its own epilogue.
-- DUAL_GATE=1 (a structural fork): two linears reading the same operand with the same output width
-- (gate/up, k/v) form one kernel with two accumulators over one (m, n) tile, so an epilogue may combine
-- them (SiLU(gate)·up). Both pinned: an operand read by three or more linears (q/k/v) merges them where their tiles
-- make one wave (merge_fits); one read by two (gate/up) keeps the dual pair, and so do linears that take a head-local
-- epilogue apart (staged_operands) and those of more tokens.
local function sibling_key(S, n)
  if not (S.merge or S.dual) or n.op ~= "aten.linear.default" then return nil end
  local op = n.inputs[1]
  if S.merge and not (S.dual and (S.linear_readers[op] <= 2 or S.staged_ops[op] or not merge_fits(S, op))) then return op, false end
  if S.dual then return op .. "|" .. tostring(S.g:value(n.inputs[2]).shape[1]), true end
end

-- Homes anchor n in a kernel of its own, or in its siblings' kernel (sibling_key).
-- A row anchor's kernel also takes its prologue cone (anc[v]: the anchor a homed value derives from within
-- its kernel, for the epilogues of merged siblings).
local function home_anchor(S, n)
  local kind_of, home = S.kind_of, S.home
  local v = n.name
  local key, dual = sibling_key(S, n)
  local k = key and S.sibling_kernel[key]
  if k and dual and #k.anchors >= 2 then k = nil end
  if k then
    k.anchors[#k.anchors + 1] = v
    if dual then k.dual = true end
  else
    k = new_kernel(S, kind_of[v], v)
    k.anchors = { v }
    if key then S.sibling_kernel[key] = k end
    if dual then k.dual_candidate = true end
  end
  home[v] = k
  S.anc[v] = v
  S.same_idx[v] = true
  k.homed[#k.homed + 1] = v
  if kind_of[v] == "row" then
    for _, m in ipairs(S.nodes) do
      if m.index < n.index and S.cone_owner[m.name] == v and not opclass.VIEW[m.op] then
        home[m.name] = k
        table.insert(k.homed, #k.homed, m.name)
      end
    end
    row_domain(S, k, n)
  else
    k.domain = v
  end
end

-- For a dependent elementwise op n: the latest kernel it reads, the anchor its in-kernel operands derive
-- from (false when several), and whether it fits that kernel as a same-index epilogue.
local function epilogue_fit(S, n)
  local producer, home, anc = S.producer, S.home, S.anc
  local v = n.name
  local latest
  for _, x in ipairs(n.inputs) do
    local k = kernel_of(S, x)
    if k and (not latest or k.order > latest.order) then latest = k end
  end
  local fits = false
  -- in a kernel of several anchors, an epilogue follows exactly one of them
  local from
  for _, x in ipairs(n.inputs) do
    local y = x
    while producer[y] and opclass.VIEW[producer[y].op] and not home[y] do y = producer[y].inputs[1] end
    if latest and home[y] == latest and anc[y] then
      if from and from ~= anc[y] then from = false break end
      from = anc[y]
    end
  end
  if latest and latest.dual then
    -- both accumulators share one (m, n) index space: any same-size elementwise epilogue fits
    fits = numel(S, v) == numel(S, latest.anchors[1])
    if fits then anc[v] = from or latest.anchors[1] end
  elseif latest and latest.anchors and #latest.anchors > 1 then
    fits = from and numel(S, v) == numel(S, from) or false
    if fits then anc[v] = from end
  elseif latest and latest.kind == "row" then
    -- any elementwise work within the rows (a RoPE half-row, the normalisation); outputs must align
    fits = row_part(S.g, numel(S, v), latest)
  elseif latest and latest.kind ~= "pointwise" then
    local ne = numel(S, v)
    fits = ne == numel(S, latest.domain)
    if latest.kind == "reduce" then fits = ne == numel(S, latest.anchor) end

  elseif latest then
    fits = numel(S, v) == numel(S, latest.domain)
  end
  -- an epilogue sees an anchor's value at its own index only: every operand from a contraction,
  -- attention or reduce kernel must reach it through same-shape elementwise ops and bijective views
  if fits and latest.kind ~= "row" and latest.kind ~= "pointwise" then
    for _, x in ipairs(n.inputs) do
      if fits and kernel_of(S, x) == latest and not same_index(S, x, v) then fits = false end
    end
  end
  return latest, from, fits
end

-- Homes a dependent elementwise op n: the epilogue of the latest kernel it reads when its size fits (at its
-- own index, or head-local in a linear's kernel), else a pointwise kernel of its own.
local function place_epilogue(S, n)
  local home, anc, absorbed = S.home, S.anc, S.absorbed
  local v = n.name
  local latest, from, fits = epilogue_fit(S, n)
  -- ... or, in a linear's kernel, within the same head (RoPE): staged through shared memory
  local D, red, step
  if absorbed[v] then fits = false end -- (a reduction: never a same-index epilogue)
  if not fits and latest and latest.kind == "contraction" and (S.rope_epi or absorbed[v]) then
    D, red, step = head_local(S, n, latest)
  end
  if absorbed[v] and not D then
    -- (its input did not stay in the linear's kernel: a row kernel after all, reading it from memory)
    local k = new_kernel(S, "row", v)
    k.anchors = { v }
    row_domain(S, k, n)
    home[v], anc[v], S.same_idx[v] = k, v, true
    k.homed[1] = v
  elseif D then
    home[v] = latest
    S.headloc[v] = D
    S.segred[v] = red or nil
    latest.stage = math.max(latest.stage or 0, D)
    -- the gcd of every column shift a head-local read makes (0: none): a multiple of 8 keeps each read in
    -- the reading thread's own accumulator fragments (kernel meta "stage_step")
    latest.stage_step = gcd(latest.stage_step or 0, step or 1)
    anc[v] = from or latest.anchor
    latest.homed[#latest.homed + 1] = v
  elseif fits then
    home[v] = latest
    S.same_idx[v] = true
    anc[v] = anc[v] or latest.anchor
    latest.homed[#latest.homed + 1] = v
  else
    local k = new_kernel(S, "pointwise", nil)
    k.domain = v
    home[v] = k
    k.homed[1] = v
  end
end

-- Walks the nodes in order, forming a kernel for each anchor and placing each dependent elementwise op.
local function place_nodes(S)
  S.rope_epi = (S.knobs.ROPE_EPI or 1) == 1
  S.merge = not S.trial and (S.knobs.MERGE_SIBLINGS or 0) == 1
  S.dual = (S.knobs.DUAL_GATE or 0) == 1
  S.linear_readers = {} -- (sibling_key: how many linears read each operand)
  for _, n in ipairs(S.nodes) do
    if n.op == "aten.linear.default" then S.linear_readers[n.inputs[1]] = (S.linear_readers[n.inputs[1]] or 0) + 1 end
  end
  for _, n in ipairs(S.nodes) do
    local v = n.name
    if S.kind_of[v] then
      home_anchor(S, n)
    elseif opclass.VIEW[n.op] or S.free[v] or S.cone_owner[v] then
      -- views and free values are recomputed by their readers; cone members were homed with their anchor
    else
      place_epilogue(S, n)
    end
  end
end

-- VIEW_OUT=1 (a structural fork): a kernel result read by other kernels only through one chain of
-- bijective views (attention's output, transposed and reshaped before o_proj) is written in the chain's
-- final layout, so its reader gets a plain contiguous operand (which the cp.async copies need).
local function views_out(S)
  if (S.knobs.VIEW_OUT or 0) ~= 1 then return end
  local home, consumers, is_output = S.home, S.consumers, S.is_output
  for _, k in ipairs(S.kernels) do
    if k.kind ~= "pointwise" then
      for _, v in ipairs({ unpack(k.homed) }) do
        local chain, x = {}, v
        while not is_output[x] and #consumers[x] == 1 and BIJECTIVE[consumers[x][1].op] and not home[consumers[x][1].name] do
          x = consumers[x][1].name
          chain[#chain + 1] = x
        end
        local others = false
        for _, c in ipairs(consumers[v]) do if not (#chain > 0 and c.name == chain[1]) and home[c.name] ~= k then others = true end end
        if #chain > 0 and not others then
          for _, w in ipairs(chain) do
            home[w] = k
            k.homed[#k.homed + 1] = w
          end
        end
      end
    end
  end
end

-- Graph outputs that no kernel computes (views, free values) get a pointwise kernel of their own.
local function copy_out_outputs(S)
  for _, o in ipairs(S.g:outputs()) do
    if not S.home[o] then
      local k = new_kernel(S, "pointwise", nil)
      k.domain = o
      k.copy_out = true
      S.home[o] = k
      k.homed[1] = o
    end
  end
end

-- True when row kernel k's results only feed contractions as their left operand (through unhomed views),
-- none of them a graph output.
local function only_feeds_contractions(S, k)
  local home, consumers, is_output = S.home, S.consumers, S.is_output
  local fold = true
  local in_k = {}
  for _, v in ipairs(k.homed) do in_k[v] = true end
  for _, v in ipairs(k.homed) do
    if is_output[v] then fold = false end
    local st = { v }
    while #st > 0 and fold do
      local x = table.remove(st)
      for _, c in ipairs(consumers[x]) do
        if opclass.VIEW[c.op] and not home[c.name] then
          if is_output[c.name] then fold = false end
          st[#st + 1] = c.name
        elseif not in_k[c.name] and not (S.kind_of[c.name] == "contraction" and c.inputs[1] == x) then
          fold = false
        end
      end
    end
  end
  return fold
end

-- SPLIT_CONE=0 (a structural fork): a row kernel whose results only feed contractions as their left
-- operand (RMSNorm before q/k/v or gate/up) is not formed; each contraction recomputes it as a
-- prologue (the row reductions of its block's rows, then the normalised operand in its tile loads).
local function fold_split_cones(S)
  if (S.knobs.SPLIT_CONE or 1) ~= 0 then return end
  local keep = {}
  for _, k in ipairs(S.kernels) do
    if k.kind == "row" and only_feeds_contractions(S, k) then
      for _, v in ipairs(k.homed) do
        S.home[v] = nil
        S.folded[v] = true
      end
    else
      k.order = #keep + 1
      keep[#keep + 1] = k
    end
  end
  S.kernels = keep
end

-- Kernel k's members, in node order: its homed nodes plus the views and free values they read (recomputed
-- here).
local function kernel_members(S, k)
  local producer, home = S.producer, S.home
  local member = {}
  for _, v in ipairs(k.homed) do member[v] = true end
  local stack = {}
  for _, v in ipairs(k.homed) do for _, x in ipairs(producer[v].inputs) do stack[#stack + 1] = x end end
  while #stack > 0 do
    local x = table.remove(stack)
    local p = producer[x]
    if p and not member[x] and not home[x] and (opclass.VIEW[p.op] or S.free[x] or S.folded[x]) then
      member[x] = true
      for _, y in ipairs(p.inputs) do stack[#stack + 1] = y end
    end
  end
  local out = {}
  for _, n in ipairs(S.nodes) do if member[n.name] then out[#out + 1] = n.name end end
  return out
end

-- Kernel k's outputs: its homed values read by another kernel or returned by the graph (through views).
local function kernel_outputs(S, k)
  local home, consumers, is_output = S.home, S.consumers, S.is_output
  local outputs = {}
  for _, v in ipairs(k.homed) do
    local out = is_output[v]
    local stack2 = { v }
    while #stack2 > 0 and not out do
      local x = table.remove(stack2)
      for _, c in ipairs(consumers[x]) do
        if opclass.VIEW[c.op] and not home[c.name] then
          if is_output[c.name] then out = true end
          stack2[#stack2 + 1] = c.name
        elseif home[c.name] ~= k then
          out = true
        end
      end
    end
    if out then outputs[#outputs + 1] = v end
  end
  return outputs
end

-- The kernels up to their epilogues' placement (trial: siblings not merged).
local function place(ctx, trial, staged_ops)
  local S = new_state(ctx)
  S.trial, S.staged_ops = trial, staged_ops or {}
  index_graph(S)
  mark_free(S)
  classify_anchors(S)
  absorb_head_norms(S)
  assign_row_cones(S)
  place_nodes(S)
  return S
end

-- The operands of linears that take a head-local epilogue when not merged (a Llama's q/k/v with RoPE): merged, those
-- epilogues would be kernels of their own (ex_ctr_stage_width: a staged tile is one linear's), so with DUAL_GATE=1
-- MERGE_SIBLINGS=1 leaves their linears apart. Empty unless both are pinned.
local function staged_operands(ctx)
  local knobs, ops = ctx.knobs or {}, {}
  if (knobs.MERGE_SIBLINGS or 0) ~= 1 or (knobs.DUAL_GATE or 0) ~= 1 then return ops end
  local S = place(ctx, true)
  for _, k in ipairs(S.kernels) do
    if k.stage then for _, a in ipairs(k.anchors or {}) do ops[S.by_name[a].inputs[1]] = true end end
  end
  return ops
end

return {
  name = "form_kernels",
  summary = "group ops into kernels around one anchor each (contraction, attention, row/reduce) + pointwise",
  run = function(ctx)
    local S = place(ctx, false, staged_operands(ctx))
    views_out(S)
    copy_out_outputs(S)
    fold_split_cones(S)
    for _, k in ipairs(S.kernels) do
      k.nodes = kernel_members(S, k)
      k.outputs = kernel_outputs(S, k)
    end
    ctx.kernels = S.kernels
  end,
}
