-- bench/kernels.lua — times each kernel of a model layer on the GPU (CUDA-graph replay, median of many reps,
-- inputs taken from the CPU reference so every kernel reads real data): the chosen variant, the scalar tier
-- for contractions, with --sweep N the best of N sampled variants, with --torch the same reproducer in
-- PyTorch eager and torch.compile, with --ceilings the share of the GPU's measured bf16 matmul and copy
-- ceilings; and the whole layer as one graph. Run on the GPU machine (pins such as EMMY_DUAL_GATE=1 apply):
-- --tiles adds every warp-tier tile of each contraction and every flash point; each variant is checked against
-- the reference before it is timed; --json FILE writes every variant's row and the whole-layer times.
--   ./emmy bench/kernels.lua [--model M] [--layer N] [--seq-len L] [--sweep N] [--tiles] [--torch] [--ceilings]
--                            [--kernel SUBSTR] [--json FILE]
-- --kernel keeps the kernels whose name contains SUBSTR (and skips the whole-layer times).
io.stdout:setvbuf("line") -- a run cut short by a deadline keeps what it printed
local cli = require "emmy.cli"
local compiler = require "emmy.compiler"
local frontend = require "emmy.frontend"
local gpu = require "emmy.gpu"
local inputs = require "emmy.inputs"
local kernels = require "emmy.kernels"
local ref = require "emmy.ref"
local tbl = require "emmy.tbl"

local opts = cli.parse(arg, { flags = { ["--model"] = { kind = "string", default = "Qwen/Qwen3-Embedding-0.6B" },
  ["--layer"] = { kind = "int", default = 0 }, ["--seq-len"] = { kind = "int", default = 512 },
  ["--torch"] = { kind = "bool" }, ["--python"] = { kind = "string", default = "python3" },
  ["--sweep"] = { kind = "int", default = 0, min = 0 }, ["--ceilings"] = { kind = "bool" }, ["--tiles"] = { kind = "bool" },
  ["--json"] = { kind = "string" }, ["--kernel"] = { kind = "string" } } },
  "bench/kernels.lua")
local r = frontend.load(opts.model, { layer = opts.layer, dynamic = { "seq_len@x:1" }, hint = { "seq_len=" .. opts.seq_len } })
local g = r.graph
local bind = assert(g:bind({ seq_len = opts.seq_len }))
local cu = assert(require("emmy.cuda").open())
local info = cu:info()
local ctx = compiler.run(g)
local plans = kernels.plan(ctx, { device = gpu.device(info) })
local ins = assert(inputs.for_graph(g, bind, 0))
local vals = assert(ref.run(g, ins, { bind = bind, keep_all = true }))

local BYTES = { bf16 = 2, f16 = 2, f32 = 4, f64 = 8, i32 = 4, i64 = 8, bool = 1 }
local function bytes_of(kg)
  local n = 0
  local function add(name)
    local v = kg:value(name)
    local e = 1
    for _, d in ipairs(gpu.concrete(kg, v.shape, bind)) do e = e * d end
    n = n + e * BYTES[v.dtype]
  end
  for _, v in ipairs(kg:inputs()) do add(v.name) end
  for _, o in ipairs(kg:outputs()) do add(o) end
  return n
end

local list = {}
for _, p in ipairs(kernels.distinct(plans)) do
  if opts.kernel and not p.kernel.name:find(opts.kernel, 1, true) then goto next_plan end
  list[#list + 1] = { plan = p, knobs = p.choice.knobs, label = p.choice.string }
  if opts.sweep > 1 then
    for i, c in ipairs(kernels.sample(p.candidates, opts.sweep, 7)) do
      if i > 1 then list[#list + 1] = { plan = p, knobs = c.knobs, label = c.string, swept = true } end
    end
  end
  if opts.tiles then
    -- every warp-tier tile of a contraction (cp.async ring with padded rows or TMA, plain block order) and every flash
    -- attention point: the exhaustive sweep that sets the fork order of rules/tile/
    for _, c in ipairs(p.candidates) do
      local kn = c.knobs
      -- (split-K only for the wgmma tiles, where the offline prior ranks it first and no timing exists yet)
      -- (a row kernel — the norms — has a few dozen points: all of them)
      if c ~= p.choice and ((p.kernel.kind == "contraction" and kn.MMA == 1 and kn.ASYNC == 1 and (kn.PAD_SMEM == 8 or kn.TMA == 1)
          and kn.RASTER == 1 and ((kn.SPLIT_K or 1) == 1 or kn.WGMMA == 1)) or (p.kernel.kind == "attention" and kn.FLASH == 1)
          or p.kernel.kind ~= "contraction" and p.kernel.kind ~= "attention") then
        list[#list + 1] = { plan = p, knobs = kn, label = c.string, swept = true }
      end
    end
  end
  if p.kernel.kind == "contraction" and p.choice.knobs.MMA == 1 then
    for _, c in ipairs(p.candidates) do
      if c.knobs.MMA == 0 then
        list[#list + 1] = { plan = p, knobs = c.knobs, label = c.string, scalar = true }
        break
      end
    end
  end
  ::next_plan::
end
if #list == 0 then cli.fail("bench: no kernel's name contains '%s'", tostring(opts.kernel)) end
local rows, chosen, best, all, measured = {}, {}, {}, {}, {}
local function measure(it, e)
  local p = it.plan
  if e.error then
    local role = it.scalar and "scalar" or it.swept and "swept" or "chosen"
    rows[#rows + 1] = { p.kernel.name, role, it.label, e.error, "", "" }
    all[#all + 1] = { kernel = p.kernel.name, knobs = it.label, role = role, error = e.error }
    return
  end
  local kb = {}
  for _, v in ipairs(p.kernel.repro:inputs()) do kb[v.name] = assert(cu:upload(vals[v.name] or ins[v.name])) end
  -- one launch first: it allocates the outputs, which a graph capture may not do
  local t, err = gpu.launch(cu, p, e, kb, bind)
  if t then t, err = cu:sync() end
  -- correct first: every output against the CPU reference (a wrong variant is a row, never the best)
  if t then t, err = gpu.check_outputs(p.kernel.repro, kb, vals, bind) end
  if t then t, err = cu:time(function() return gpu.launch(cu, p, e, kb, bind) end, { graph = true, reps = 50, warmup = 5 }) end
  local f = kernels.facts(p.kernel)
  local us = t and t.median_us
  local rate = "-"
  if us and p.kernel.kind == "contraction" then
    rate = ("%.1f TFLOP/s"):format(f.flops / us / 1e6)
  elseif us then
    rate = ("%.0f GB/s"):format(bytes_of(p.kernel.repro) / us / 1e3)
  end
  local role = it.scalar and "scalar" or it.swept and "swept" or "chosen"
  local row = { p.kernel.name, role, it.label,
    us and ("%.1f"):format(us) or ("error: " .. tostring(err)), t and ("%.1f-%.1f"):format(t.p20_us, t.p80_us) or "", rate }
  row.us, row.flops, row.bytes = us, p.kernel.kind == "contraction" and f.flops or nil, bytes_of(p.kernel.repro)
  row.e, row.knobs = e, it.knobs
  if us then
    measured[p.kernel.name] = measured[p.kernel.name] or {}
    table.insert(measured[p.kernel.name], { us = us, knobs = it.knobs })
  end
  all[#all + 1] = { kernel = p.kernel.name, knobs = it.label, role = role, us = us, error = not us and tostring(err) or nil }
  if not it.swept then rows[#rows + 1] = row end
  if us and (not best[p.kernel.name] or us < best[p.kernel.name].us) then best[p.kernel.name] = row end
  if us and not it.scalar and not it.swept then chosen[p.kernel.name] = e end
end
local built = gpu.build(cu, list)
for i, it in ipairs(list) do measure(it, built[i]) end
-- --tiles, second pass: the three fastest tiles of each contraction and its chosen one, under every CTA order and
-- ring depth (RASTER, STAGES) — the tile pass keeps RASTER=1, and the order is what wins for gate/up (the tune's
-- RASTER=8 on the chosen 64×64 tile: 18.1 µs against 29.9), not always on the fastest RASTER=1 tile
if opts.tiles then
  local function tile_key(kn)
    local ks = {}
    for k, v in pairs(kn) do if k ~= "RASTER" and k ~= "STAGES" then ks[#ks + 1] = k .. "=" .. tostring(v) end end
    table.sort(ks)
    return table.concat(ks, ",")
  end
  local seen, more = {}, {}
  for _, it in ipairs(list) do seen[it.plan.kernel.name .. "|" .. it.label] = true end
  for _, p in ipairs(kernels.distinct(plans)) do
    local m = measured[p.kernel.name]
    if p.kernel.kind == "contraction" and m then
      table.sort(m, function(a, b) return a.us < b.us end)
      local keys, nk = { [tile_key(p.choice.knobs)] = true }, 0
      for _, x in ipairs(m) do
        local k = tile_key(x.knobs)
        if not keys[k] and nk < 3 then keys[k], nk = true, nk + 1 end
      end
      for _, c in ipairs(p.candidates) do
        if keys[tile_key(c.knobs)] and not seen[p.kernel.name .. "|" .. c.string] then
          seen[p.kernel.name .. "|" .. c.string] = true
          more[#more + 1] = { plan = p, knobs = c.knobs, label = c.string, swept = true }
        end
      end
    end
  end
  if #more > 0 then
    local built2 = gpu.build(cu, more)
    for i, it in ipairs(more) do measure(it, built2[i]) end
  end
end
if opts.sweep > 1 or opts.tiles then
  for _, r0 in ipairs(rows) do
    local b = best[r0[1]]
    if r0[2] == "chosen" and b and b ~= r0 then
      local r2 = { b[1], "best of sweep", b[3], b[4], b[5], b[6] }
      r2.us, r2.flops, r2.bytes = b.us, b.flops, b.bytes
      table.insert(rows, r2)
    end
  end
  table.sort(rows, function(x, y) return x[1] < y[1] or (x[1] == y[1] and x[2] < y[2]) end)
end
-- --ceilings: the GPU's bf16 matmul and copy rates measured with torch (tools/torchref/bench.py --ceilings)
if opts.ceilings then
  local tmpj = os.tmpname()
  os.execute(("%s %s/tools/torchref/bench.py --ceilings --json %s > /dev/null 2>&1"):format(opts.python, EMMY_HOME, tmpj))
  local f = io.open(tmpj)
  local ok, cl = pcall(require("cjson").decode, f and f:read("*a") or "")
  if f then f:close() end
  os.remove(tmpj)
  if ok then
    print(("ceilings (torch, this GPU): bf16 matmul %.0f TFLOP/s, copy %.0f GB/s"):format(cl.bf16_tflops, cl.copy_gbps))
    for _, r0 in ipairs(rows) do
      if r0.us then
        r0[9] = r0.flops and ("%.0f%% of bf16"):format(100 * r0.flops / r0.us / 1e6 / cl.bf16_tflops)
          or ("%.0f%% of copy"):format(100 * r0.bytes / r0.us / 1e3 / cl.copy_gbps)
      end
    end
  else
    print("ceilings: could not be measured (torch missing?)")
  end
end
-- --torch: each kernel's reproducer in PyTorch eager and torch.compile on the same inputs, in one bench.py process
-- (emmy.bench's torch rows), with torch's kernels of one call (torch.profiler): "torch kernels µs" is the sum of
-- their durations for the faster backend — launch gaps left out, as in a one-kernel emmy row
local torch_notes = {}
if opts.torch then
  local jobs, at = {}, {}
  for _, row in ipairs(rows) do
    if row[2] == "chosen" and not row[7] then
      local p
      for _, q in ipairs(plans) do if q.kernel.name == row[1] then p = q end end
      jobs[#jobs + 1] = { graph = p.kernel.repro, value_of = function(name) return vals[name] or ins[name] end }
      at[#jobs] = row
    end
  end
  local bench = require "emmy.bench"
  for i, t in ipairs(bench.torch_many(jobs, { seq_len = opts.seq_len }, { kernels = 5 })) do
    local row = at[i]
    local e, c = t.eager and t.eager.median_us, t.tcompile and t.tcompile.median_us
    row[7], row[8] = e and ("%.1f"):format(e) or "-", c and ("%.1f"):format(c) or "-"
    local _, who = bench.torch_best(t)
    local sum, n = bench.kernels_us(who and t[who].kernels)
    if sum then row[10] = ("%.1f (%g)"):format(sum, n) end
    if t.why then torch_notes[#torch_notes + 1] = ("torch on %s: %s"):format(row[1], tostring(t.why)) end
  end
end
print(("%s layer %d at seq_len=%d on %s (CUDA-graph replay, median of 50, default knobs)"):format(opts.model, opts.layer,
  opts.seq_len, info.name))
tbl.print { header = { "kernel", "variant", "knobs", "µs", "p20-p80", "rate", "eager µs", "compile µs", "of ceiling",
  "torch kernels µs (n)" }, rows = rows, align = "lllrrrrrrr" }
for _, n in ipairs(torch_notes) do print(n) end
-- the whole layer, every kernel in order, as one captured graph (only when every chosen variant built)
if opts.kernel then
  if opts.json then
    cli.must(require("emmy.sys").write_file(opts.json, require("cjson").encode { model = opts.model, layer = opts.layer,
      seq_len = opts.seq_len, device = info.name, variants = all, kernel = opts.kernel }))
  end
  os.exit(0)
end
for _, p in ipairs(plans) do
  if not chosen[p.kernel.name] then
    print(("\nwhole layer: not timed — the chosen variant of %s did not build or launch (see its row)"):format(p.kernel.name))
    os.exit(1)
  end
end
local bufs = {}
for name, t in pairs(ins) do bufs[name] = assert(cu:upload(t)) end
for _, p in ipairs(plans) do assert(gpu.launch(cu, p, chosen[p.kernel.name], bufs, bind)) end
assert(cu:sync())
local tl = cu:time(function()
  for _, p in ipairs(plans) do
    local ok, err = gpu.launch(cu, p, chosen[p.kernel.name], bufs, bind)
    if not ok then return nil, err end
  end
  return true
end, { graph = true, reps = 30, warmup = 3 })
print(("\nwhole layer (%d kernels, chosen variants): %.1f µs median (p20 %.1f, p80 %.1f)"):format(#plans, tl.median_us,
  tl.p20_us, tl.p80_us))
local layer = { chosen_us = tl.median_us }
-- the whole layer with each kernel's best measured variant (when a sweep ran)
if opts.sweep > 1 or opts.tiles then
  local function pick(p) return best[p.kernel.name] and best[p.kernel.name].e or chosen[p.kernel.name] end
  for _, p in ipairs(plans) do assert(gpu.launch(cu, p, pick(p), bufs, bind)) end
  assert(cu:sync())
  local tb = cu:time(function()
    for _, p in ipairs(plans) do
      local ok, err = gpu.launch(cu, p, pick(p), bufs, bind)
      if not ok then return nil, err end
    end
    return true
  end, { graph = true, reps = 30, warmup = 3 })
  layer.best_us = tb.median_us
  print(("whole layer (%d kernels, best of sweep per kernel): %.1f µs median (p20 %.1f, p80 %.1f)"):format(#plans,
    tb.median_us, tb.p20_us, tb.p80_us))
end
-- the same layer graph in PyTorch eager and torch.compile, same inputs
if opts.torch then
  local t = require("emmy.bench").torch(g, function(name) return ins[name] end, { seq_len = opts.seq_len })
  layer.eager_us, layer.compile_us = t.eager and t.eager.median_us, t.tcompile and t.tcompile.median_us
  print(("whole layer in torch (op-by-op replay of the same graph): eager %s µs, torch.compile %s µs"):format(
    layer.eager_us and ("%.1f"):format(layer.eager_us) or "-", layer.compile_us and ("%.1f"):format(layer.compile_us) or "-"))
  if t.why then print("torch on the layer: " .. tostring(t.why)) end
  local mine = layer.best_us or layer.chosen_us
  if layer.compile_us then
    print(("emmy (%s) / torch.compile = %.2f (below 1: emmy faster)"):format(layer.best_us and "best of sweep" or "chosen",
      mine / layer.compile_us))
  end
end
if opts.json then
  cli.must(require("emmy.sys").write_file(opts.json, require("cjson").encode { model = opts.model, layer = opts.layer,
    seq_len = opts.seq_len, device = info.name, variants = all, whole_layer = layer }))
end
