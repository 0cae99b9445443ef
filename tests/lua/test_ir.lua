-- The graph IR from Lua: inference on symbolic dims, the structural hash (names and hints excluded,
-- stable across processes), clear refusals naming the node.
local ir = require "emmy.ir"
local graphs = require "graphs"
local graphjson = require "emmy.graphjson"

local T = {}
local function test(name, fn) T[#T + 1] = { name, fn } end

-- Recorded once; a change means the hash (and so every kernel identity and tune DB key) changed.
local BLOCK_HASH = "951d4c762f3657ea"

test("block hash is stable across processes", function()
  local h = graphs.block():hash()
  eq(graphs.block():hash(), h, "same process")
  local d = tmpdir()
  assert(graphjson.write(graphs.block(), d .. "/b.json"))
  local code, out = emmy { "graph", d .. "/b.json", "--json" }
  eq(code, 0, "exit")
  check(out:find('"hash":"' .. h .. '"', 1, true), out)
  if BLOCK_HASH ~= "GOLDEN" then eq(h, BLOCK_HASH, "golden hash") end
end)

test("hash ignores names, hints and provenance", function()
  local function build(xname, hint, mod, c)
    local g = ir.new("n" .. xname)
    assert(g:symbol("s" .. xname, { hint = hint, max = 64 }))
    local x = assert(g:input(xname, "bf16", { 1, "s" .. xname, 8 }))
    local y = assert(g:node("aten.mul.Tensor", { self = x, other = c or 2 }, { name = "y" .. xname, module = mod }))
    assert(g:output(y))
    return g:hash()
  end
  local h = build("a", 4, "m.a")
  eq(build("b", 9, "other.module"), h, "renamed")
  check(build("a", 4, "m.a", 3) ~= h, "a different scalar changes the hash")
end)

test("hash sees structure", function()
  local function g1(dt, n)
    local g = ir.new()
    local x = assert(g:input("x", dt, { n, 4 }))
    assert(g:output(assert(g:node("aten.neg.default", { self = x }))))
    return g:hash()
  end
  check(g1("bf16", 3) ~= g1("f16", 3), "dtype")
  check(g1("bf16", 3) ~= g1("bf16", 5), "shape")
end)

test("symbolic inference", function()
  local g = ir.new()
  assert(g:symbol("s", { hint = 7, max = 128 }))
  local x = assert(g:input("x", "bf16", { 1, "s", 64 }))
  local v = assert(g:node("aten.view.default", { self = x, size = { 1, "s", 4, -1 } }))
  eq(table.concat(g:value(v).shape, ","), "1,s,4,16", "view infers -1")
  local r = assert(g:node("aten.reshape.default", { self = v, shape = { -1, 16 } }))
  eq(g:value(r).shape[1], "4*s", "reshape -1 symbolic")
  local c = assert(g:node("aten.cat.default", { tensors = { r, r }, dim = 0 }))
  eq(g:value(c).shape[1], "8*s", "cat sums dims")
  local sl = assert(g:node("aten.slice.Tensor", { self = c, dim = 0, start = 2, ["end"] = "8*s", step = 4 }))
  eq(g:value(sl).shape[1], "cdiv(8*s-2,4)", "strided slice")
  eq(g:eval(g:value(sl).shape[1], { s = 3 }), 6, "eval slice length")
  -- evaluating a cdiv the graph does not hold leaves its symbols as they were (the emitter declares each derived
  -- symbol: one kept would change every source emitted afterwards, and their cubin cache keys)
  local nsyms = #g:symbols()
  eq(g:eval("cdiv(s,16)", { s = 100 }), 7, "eval of a new cdiv")
  eq(#g:symbols(), nsyms, "the new cdiv is not kept in the graph")
  local ok, err = g:node("aten.view.default", { self = x, size = { "s", 3, -1 } })
  check(not ok and err:find("cannot infer %-1"), tostring(err))
  ok, err = g:node("aten.mm.default", { self = x, mat2 = x }, { name = "bad" })
  check(not ok and err:find("^node 'bad' %(aten.mm.default%): expects 2%-d operands"), tostring(err))
end)

test("sdpa checks GQA and masks", function()
  local g = ir.new()
  local q = assert(g:input("q", "bf16", { 1, 4, 8, 16 }))
  local k = assert(g:input("k", "bf16", { 1, 2, 8, 16 }))
  local ok, err = g:node("aten.scaled_dot_product_attention.default", { query = q, key = k, value = k })
  check(not ok and err:find("enable_gqa"), tostring(err))
  assert(g:node("aten.scaled_dot_product_attention.default", { query = q, key = k, value = k, enable_gqa = true, is_causal = true }))
  local m = assert(g:input("m", "bool", { 8, 9 }))
  ok, err = g:node("aten.scaled_dot_product_attention.default", { query = q, key = q, value = q, attn_mask = m })
  check(not ok and err:find("attn_mask"), tostring(err))
end)

test("vocabulary lists every op with its schema", function()
  local ops = ir.ops()
  check(#ops >= 40, "ops")
  local seen = {}
  for _, o in ipairs(ops) do
    check(o.name:match("^aten%.[%w_]+%.[%w_]+$"), o.name)
    seen[o.name] = o
  end
  check(seen["aten.scaled_dot_product_attention.default"], "sdpa")
  eq(seen["aten.add.Tensor"].args[3].name, "alpha", "alpha")
end)

test("closed graph raises", function()
  local g = ir.new()
  g:close()
  g:close()
  local ok, err = pcall(function() return g:hash() end)
  check(not ok and tostring(err):find("closed graph"), tostring(err))
end)

return T
