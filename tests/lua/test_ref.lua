-- The CPU reference from Lua: tensors, .npy round trips, seeded inputs, and the speed of a whole
-- Qwen3-0.6B-sized decoder layer at seq_len 512 (the size every later GPU check needs).
local ref = require "emmy.ref"
local sys = require "emmy.sys"
local graphs = require "graphs"
local inputs = require "emmy.inputs"

local T = {}
local function test(name, fn) T[#T + 1] = { name, fn } end

test("tensor basics and npy round trip", function()
  local d = tmpdir()
  for _, dt in ipairs { "bf16", "f16", "f32", "f64", "i32", "i64", "bool" } do
    local t = ref.random(dt, { 3, 5 }, { seed = 7, lo = -4, hi = 9 })
    eq(t:dtype(), dt, "dtype")
    eq(t:numel(), 15, "numel")
    assert(t:save(d .. "/" .. dt .. ".npy"))
    local u = assert(ref.load(d .. "/" .. dt .. ".npy", dt))
    local a, b = t:to_table(), u:to_table()
    for i = 1, 15 do eq(b[i], a[i], dt .. " element " .. i) end
    check(ref.compare(t, u).ok, dt .. " compare")
  end
  local bf = ref.tensor("bf16", { 2 }, { 1 + 2 ^ -8, 1 + 3 * 2 ^ -9 })
  eq(bf:get(1), 1, "bf16 ties to even")
  eq(bf:get(2), 1 + 2 ^ -7, "bf16 rounds up")
  local bad, err = ref.load(d .. "/nope.npy", "f32")
  check(not bad and err:find("nope.npy"), tostring(err))
end)

test("a residual add's cancellation is compared at its terms' magnitude (one ulp of the rounded result apart)", function()
  -- z = round(round(acc) + r): two correct summation orders may round acc to neighbouring bf16 values (8 and
  -- 8.0625); where r cancels it, z is 0 against 0.0625, outside |z|'s tolerance and within the terms'
  local y = ref.tensor("bf16", { 2, 2 }, { 8, 1, -2, 4 })
  local r = ref.tensor("bf16", { 2 }, { -8.0625, 0.5 })
  local want = ref.tensor("bf16", { 2, 2 }, { -0.0625, 1.5, -10.0625, 4.5 })
  local got = ref.tensor("bf16", { 2, 2 }, { 0, 1.5, -10.0625, 4.5 })
  local plain = ref.compare(got, want)
  check(not plain.ok and plain.mismatches == 1, "without terms: one mismatch")
  local c = ref.compare(got, want, { terms = { y, r } })
  check(c.ok and c.mismatches == 0, "with the terms (r broadcast over rows): within tolerance")
  eq(c.max_rel, plain.max_rel, "the errors reported are the same")
  -- a real error at the same place stays one
  local bad = ref.tensor("bf16", { 2, 2 }, { 0.5, 1.5, -10.0625, 4.5 })
  check(not ref.compare(bad, want, { terms = { y, r } }).ok, "an error of several ulps of the terms is still one")
  -- a term that does not broadcast is ignored
  check(not ref.compare(got, want, { terms = { ref.tensor("bf16", { 3 }, { 9, 9, 9 }) } }).ok, "a term of another shape")
end)

test("seeded inputs are deterministic and non-degenerate", function()
  local g = graphs.block()
  local a = inputs.random(g, { seq_len = 8 }, 3)
  local b = inputs.random(g, { seq_len = 8 }, 3)
  local c = inputs.random(g, { seq_len = 8 }, 4)
  local xa, xb, xc = a.x:to_table(), b.x:to_table(), c.x:to_table()
  local same, diff, zeros = true, false, 0
  for i = 1, #xa do
    same = same and xa[i] == xb[i]
    diff = diff or xa[i] ~= xc[i]
    if xa[i] == 0 then zeros = zeros + 1 end
  end
  check(same, "same seed, same values")
  check(diff, "another seed, other values")
  check(zeros < #xa / 100, "not zeros")
end)

test("a padded batch's attention mask: causal, and row b's last floor(b*S/2B) keys masked (run --pad-rows)", function()
  local shape = { 4, 1, 6, 6 }
  local t = ref.tensor("bool", shape)
  inputs.fill_mask(t, shape, true)
  local v = t:to_table()
  local function at(b, i, j) return v[b * 36 + i * 6 + j + 1] end
  eq(inputs.pad_len(0, 4, 6), 6, "row 0 whole")
  eq(inputs.pad_len(3, 4, 6), 4, "row 3 loses 2 keys")
  check(at(0, 5, 5) and not at(0, 2, 3), "row 0: causal only")
  check(at(3, 5, 3) and not at(3, 5, 4) and not at(3, 5, 5), "row 3: keys 4, 5 masked")
  for b = 0, 3 do for i = 0, 5 do check(at(b, i, 0), "every query keeps key 0 (no row fully masked)") end end
  local u = ref.tensor("bool", shape)
  inputs.fill_mask(u, shape, false)
  check(u:to_table()[3 * 36 + 5 * 6 + 5 + 1], "without pad_rows: causal only")
  -- what run --pad-rows refuses, one line each, before it needs a GPU
  local Q, W = "Qwen/Qwen3-Embedding-0.6B", { "--dynamic", "seq_len@input_ids:1", "--dynamic", "seq_len@attention_mask:2",
    "--dynamic", "seq_len@attention_mask:3", "--dynamic", "seq_len@position_ids:1", "--seq-len", "7" }
  local c1, _, e1 = emmy { "run", Q, "--layer", "0", "--pad-rows" }
  check(c1 == 2 and e1:find("needs a whole model with its attention_mask an input", 1, true) and not e1:find("\n.", 1), e1)
  local a2 = { "run", Q, "--pad-rows" }
  for _, x in ipairs(W) do a2[#a2 + 1] = x end
  local c2, _, e2 = emmy(a2)
  check(c2 == 2 and e2:find("give --batch 2 or more", 1, true), e2)
  a2[#a2 + 1], a2[#a2 + 2], a2[#a2 + 3] = "--batch", "4", "--bench"
  local c3, _, e3 = emmy(a2)
  check(c3 == 2 and e3:find("--pad-rows is a check", 1, true), e3)
end)

test("sdpa's seq_pos (sequences packed end to end, causal in each) equals the packed block-diagonal mask; misuse refused", function()
  local ir = require "emmy.ir"
  local lens, T = { 3, 1, 5, 2 }, 11
  local function graph(varlen)
    local g = ir.new("packed")
    local function inp(name, dt, shape) return assert(g:input(name, dt, shape)) end
    local a = { query = inp("q", "f32", { 1, 4, T, 8 }), key = inp("k", "f32", { 1, 2, T, 8 }), value = inp("v", "f32", { 1, 2, T, 8 }),
      enable_gqa = true }
    if varlen then a.seq_pos, a.is_causal = inp("pos", "i64", { 1, T }), true else a.attn_mask = inp("m", "bool", { 1, 1, T, T }) end
    assert(g:output(assert(g:node("aten.scaled_dot_product_attention.default", a, { name = "o" }))))
    return g
  end
  local ins = {}
  for _, x in ipairs { { "q", { 1, 4, T, 8 } }, { "k", { 1, 2, T, 8 } }, { "v", { 1, 2, T, 8 } } } do
    ins[x[1]] = ref.random("f32", x[2], { seed = #x[1] + 7 })
  end
  ins.pos = ref.tensor("i64", { 1, T })
  local k = 0
  for _, n in ipairs(lens) do for j = 1, n do k = k + 1; ins.pos:set(k, j - 1) end end
  ins.m = ref.packed_mask(lens)
  local a = assert(ref.run(graph(true), ins, {})).o
  local b = assert(ref.run(graph(false), ins, {})).o
  local ta, tb = a:to_table(), b:to_table()
  eq(#ta, 4 * T * 8, "the output's size")
  local worst = 0
  for i = 1, #ta do worst = math.max(worst, math.abs(ta[i] - tb[i])) end
  check(worst < 1e-12, "seq_pos against the mask: max abs difference " .. worst)
  -- refused: without is_causal, with an attn_mask too, of the wrong shape or dtype
  local g = ir.new("bad")
  local q = assert(g:input("q", "f32", { 1, 2, 5, 4 }))
  local p5, pf = assert(g:input("p", "i64", { 1, 5 })), assert(g:input("pf", "f32", { 1, 5 }))
  local p6 = assert(g:input("p6", "i64", { 1, 6 }))
  local function bad(extra, want)
    local args = { query = q, key = q, value = q, seq_pos = p5, is_causal = true }
    for kk, v in pairs(extra) do args[kk] = v end
    local ok, e = g:node("aten.scaled_dot_product_attention.default", args)
    check(not ok and tostring(e):find(want, 1, true), want .. ": " .. tostring(e))
  end
  -- seeded inputs: a seq_pos input is packed positions (each 0 or one more than the row before)
  local ins2 = inputs.random(graph(true), {}, 5)
  local pv = ins2.pos:to_table()
  check(pv[1] == 0, "the first row starts a sequence")
  for i = 2, #pv do check(pv[i] == 0 or pv[i] == pv[i - 1] + 1, "row " .. i .. ": " .. pv[i]) end
  bad({ is_causal = false }, "seq_pos needs is_causal=True")
  bad({ seq_pos = pf }, "seq_pos must be an integer tensor")
  bad({ seq_pos = p6 }, "must be [1 or the first batch dim, L]")
end)

test("qwen3 0.6B layer at seq_len 512 runs in seconds", function()
  local g = graphs.qwen3_layer()
  local bind = { seq_len = 512 }
  local ins = inputs.random(g, bind, 0)
  local t0 = sys.clock()
  local outs = assert(ref.run(g, ins, { bind = bind }))
  local dt = sys.clock() - t0
  local o = outs[g:outputs()[1]]
  eq(table.concat(o:shape(), ","), "1,512,1024", "shape")
  local v = o:to_table()
  local finite = true
  for i = 1, #v do finite = finite and v[i] == v[i] and math.abs(v[i]) < 1e30 end
  check(finite, "finite output")
  print(("    qwen3 layer (seq_len 512, bf16) on the CPU reference: %.2f s with %d threads"):format(dt, sys.nproc()))
  check(dt < 30, ("took %.1f s"):format(dt))
end)

-- emmy run checks each kernel's output against the reference of the source graph by name, so a pass that rebuilds
-- the graph must keep what a name means (a stand-in named after the node it replaces; the ops beside it named apart).
test("canonicalize keeps names: every op case's rebuilt graph computes the source graph's values under their names", function()
  local canon
  for _, p in ipairs(require("emmy.compiler").passes()) do if p.name == "canonicalize" then canon = p end end
  check(canon, "the canonicalize pass")
  local rewritten = 0
  for _, c in ipairs(graphs.op_cases) do
    local g = graphs.case_graph(c)
    local ctx = { graph = g }
    canon.run(ctx)
    local h = ctx.graph
    local bind = assert(g:bind({}))
    local ins = assert(inputs.for_graph(g, bind, 3))
    local a = assert(ref.run(g, ins, { bind = bind, keep_all = true }))
    local b = assert(ref.run(h, ins, { bind = bind, keep_all = true }))
    eq(h:outputs()[1], g:outputs()[1], c.name .. ": the output's name")
    if #h:nodes() ~= #g:nodes() then rewritten = rewritten + 1 end
    for _, n in ipairs(h:nodes()) do
      if g:value(n.name) then
        local want, got = a[n.name], b[n.name]
        check(want and got, c.name .. ": " .. n.name .. " has a reference value on both sides")
        local cmp = ref.compare(got, want)
        check(cmp.ok, ("%s: %s means another value after canonicalize (max abs %g)"):format(c.name, n.name, cmp.max_abs))
      end
    end
  end
  check(rewritten >= 2, "op cases the pass rewrites (softmax.int, 1-d matmul): " .. rewritten)
end)

return T
