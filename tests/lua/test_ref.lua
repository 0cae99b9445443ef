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

return T
