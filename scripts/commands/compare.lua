-- emmy compare — two bench dumps side by side (the 60_bench_compare.json and 62_kernel_bench.json that
-- `emmy run|tune … --bench --dump-dir D` writes): the whole-graph rows, the kernels matched by name, kernels that
-- changed name (re-formed or re-tuned: a new structural hash) paired `old -> new` through their Layer-op, and the
-- kernels on one side only flagged as a kernel-set change. A ratio inside both rows' p20-p80 spread is marked as
-- noise.
local cjson = require "cjson"
local cli = require "emmy.cli"
local tbl = require "emmy.tbl"

local M = {}

local function read_json(path)
  local f = io.open(path, "rb")
  if not f then return nil, ("cannot read %s"):format(path) end
  local text = f:read("*a")
  f:close()
  local ok, v = pcall(cjson.decode, text)
  if not ok or type(v) ~= "table" then return nil, ("%s is not JSON: %s"):format(path, tostring(v)) end
  return v
end

-- Reads a bench dump folder; returns {whole = {...}, kernels = {...}, at, device} or nil, msg.
function M.load(dir)
  local w, err = read_json(dir .. "/60_bench_compare.json")
  if not w then return nil, err .. " (a dump of emmy run|tune … --bench --dump-dir D)" end
  local k, err2 = read_json(dir .. "/62_kernel_bench.json")
  if not k then return nil, err2 end
  for _, x in ipairs { w, k } do
    if x.format ~= "emmy.bench" then return nil, ("%s: not an emmy bench file (format %s)"):format(dir, tostring(x.format)) end
    if x.version ~= 1 then return nil, ("%s: bench file version %s, this emmy reads version 1"):format(dir, tostring(x.version)) end
  end
  return { whole = w.whole or {}, kernels = k.kernels or {}, at = w.at, device = w.device, by_kind = w.by_kind }
end

-- A kernel's emmy time and relative spread: in the program when measured, else alone times its instances.
local function emmy_time(k)
  local s = k.emmy
  local spread = s and s.median_us and s.median_us > 0 and (s.p80_us - s.p20_us) / s.median_us or nil
  if k.in_program_us then return k.in_program_us, spread end
  if s and s.median_us then return s.median_us * (k.instances or 1), spread end
  return nil, spread
end

-- The verdict of ratio r = B / A with relative spreads sa, sb and tolerance tol.
function M.verdict(r, sa, sb, tol)
  if not r then return "-" end
  local noise = math.max(sa or 0, sb or 0, 0.01)
  local d = math.abs(r - 1)
  if d <= noise then return "within noise" end
  if d <= tol then return r < 1 and "faster (within tol)" or "slower (within tol)" end
  return r < 1 and "FASTER" or "SLOWER"
end

-- Pairs the kernels of A and B: by name; then the unmatched by Layer-op (old -> new); the rest one side only.
-- Returns {{a = row|nil, b = row|nil, how = "same"|"renamed"|"only A"|"only B"}}.
function M.pair(ka, kb)
  local by_b, used = {}, {}
  for _, k in ipairs(kb) do by_b[k.name] = k end
  local out, left_a = {}, {}
  for _, k in ipairs(ka) do
    if by_b[k.name] then
      out[#out + 1] = { a = k, b = by_b[k.name], how = "same" }
      used[k.name] = true
    else
      left_a[#left_a + 1] = k
    end
  end
  local by_op = {}
  for _, k in ipairs(kb) do
    if not used[k.name] then
      by_op[k.layer_op or "?"] = by_op[k.layer_op or "?"] or {}
      table.insert(by_op[k.layer_op or "?"], k)
    end
  end
  for _, k in ipairs(left_a) do
    local cands = by_op[k.layer_op or "?"]
    local m = cands and table.remove(cands, 1)
    if m then
      out[#out + 1] = { a = k, b = m, how = "renamed" }
      used[m.name] = true
    else
      out[#out + 1] = { a = k, how = "only A" }
    end
  end
  for _, k in ipairs(kb) do if not used[k.name] then out[#out + 1] = { b = k, how = "only B" } end end
  return out
end

function M.compare(A, B, tol)
  local res = { whole = {}, kernels = {}, set_changed = false, slower = 0 }
  local wb = {}
  for _, w in ipairs(B.whole) do wb[w.backend] = w end
  for _, w in ipairs(A.whole) do
    local x = wb[w.backend]
    local sa, sb = w.stats, x and x.stats
    local r = sa and sb and sa.median_us and sb.median_us and sb.median_us / sa.median_us or nil
    local spa = sa and sa.median_us and (sa.p80_us - sa.p20_us) / sa.median_us
    local spb = sb and sb.median_us and (sb.p80_us - sb.p20_us) / sb.median_us
    local v = M.verdict(r, spa, spb, tol)
    if v == "SLOWER" and w.backend == "emmy" then res.slower = res.slower + 1 end
    res.whole[#res.whole + 1] = { backend = w.backend, a_us = sa and sa.median_us, b_us = sb and sb.median_us, ratio = r, verdict = v }
  end
  for _, p in ipairs(M.pair(A.kernels, B.kernels)) do
    local ta, sa = nil, nil
    local tb, sb = nil, nil
    if p.a then ta, sa = emmy_time(p.a) end
    if p.b then tb, sb = emmy_time(p.b) end
    local r = ta and tb and ta > 0 and tb / ta or nil
    local v = (p.how == "only A" or p.how == "only B") and "kernel-set change" or M.verdict(r, sa, sb, tol)
    if p.how ~= "same" then res.set_changed = true end
    if v == "SLOWER" then res.slower = res.slower + 1 end
    res.kernels[#res.kernels + 1] = { a = p.a and p.a.name, b = p.b and p.b.name, how = p.how,
      layer_op = (p.a or p.b).layer_op, a_us = ta, b_us = tb, ratio = r, verdict = v }
  end
  -- emmy's kernel durations by kind (60_bench_compare.json's by_kind), where both dumps have them
  local function kinds(x)
    local t = {}
    for _, r in ipairs(x.by_kind and x.by_kind.rows or {}) do if r.emmy then t[r.kind] = r.emmy.us end end
    return t
  end
  local ka, kb = kinds(A), kinds(B)
  if next(ka) and next(kb) then
    res.by_kind = {}
    for _, r in ipairs(A.by_kind.rows) do
      local a, b = ka[r.kind], kb[r.kind]
      if a and b and (a > 0 or b > 0) then res.by_kind[#res.by_kind + 1] = { kind = r.kind, a_us = a, b_us = b, delta_us = b - a } end
    end
  end
  return res
end

local function fmt(x, f) return x and (f or "%.1f"):format(x) or "-" end

return {
  summary = "compare two bench dumps: whole-graph and per-kernel ratios, kernel-set changes, noise marked",
  usage = [[usage: emmy compare DUMP_A DUMP_B [--tol 0.10] [--json]

  DUMP_A, DUMP_B: folders written by emmy run|tune … --bench --dump-dir D (60_bench_compare.json and
  62_kernel_bench.json). Ratios are B / A (below 1: B is faster). Kernels are matched by name; a kernel whose
  name changed (re-formed or re-tuned) is paired old -> new through its Layer-op; the rest are kernel-set
  changes. A ratio inside the rows' p20-p80 spread is "within noise"; one inside --tol (default 0.10) is
  "within tol"; beyond it FASTER or SLOWER. Exit status 1 when a kernel or emmy's whole graph is SLOWER.]],
  run = function(argv)
    local opts, pos = cli.parse(argv, { flags = { ["--tol"] = { kind = "number", default = 0.10, min = 0 },
      ["--json"] = { kind = "bool" } }, positional = { "a", "b" }, usage = "emmy compare DUMP_A DUMP_B [--tol 0.10]" }, "compare")
    if not pos.a or not pos.b then cli.usage("compare: give two dump folders (emmy compare DUMP_A DUMP_B)") end
    local A, ea = M.load(pos.a)
    if not A then cli.usage("compare: %s", ea) end
    local B, eb = M.load(pos.b)
    if not B then cli.usage("compare: %s", eb) end
    local res = M.compare(A, B, opts.tol)
    if opts.json then
      print(cjson.encode(res))
      return res.slower > 0 and 1 or 0
    end
    print(("A: %s (%s on %s)\nB: %s (%s on %s)\nratios are B / A: below 1, B is faster; tolerance %.0f%%"):format(pos.a,
      tostring(A.at), tostring(A.device), pos.b, tostring(B.at), tostring(B.device), 100 * opts.tol))
    local rows = {}
    for _, w in ipairs(res.whole) do rows[#rows + 1] = { w.backend, fmt(w.a_us), fmt(w.b_us), fmt(w.ratio, "%.3f"), w.verdict } end
    print("\nwhole graph")
    tbl.print { header = { "backend", "A µs", "B µs", "B / A", "" }, rows = rows, align = "lrrrl" }
    if res.by_kind then
      local br = {}
      for _, r in ipairs(res.by_kind) do br[#br + 1] = { r.kind, fmt(r.a_us), fmt(r.b_us), ("%+.1f"):format(r.delta_us) } end
      print("\nemmy's kernel durations by kind (µs a call, CUPTI)")
      tbl.print { header = { "kind", "A µs", "B µs", "B - A" }, rows = br, align = "lrrr" }
    end
    local kr = {}
    for _, k in ipairs(res.kernels) do
      local name = k.how == "renamed" and (k.a .. " -> " .. k.b) or (k.a or k.b)
      kr[#kr + 1] = { name, k.layer_op or "?", k.how, fmt(k.a_us), fmt(k.b_us), fmt(k.ratio, "%.3f"), k.verdict }
    end
    print("\nper kernel (emmy µs in the program, else alone)")
    tbl.print { header = { "kernel", "layer op", "match", "A µs", "B µs", "B / A", "" }, rows = kr, align = "lllrrrl" }
    if res.set_changed then print("\nthe kernel set changed between A and B (see the match column)") end
    return res.slower > 0 and 1 or 0
  end,
  M = M,
}
