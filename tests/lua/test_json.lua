-- Graph JSON: canonical write/read/write byte identity, the committed fixture, and one-line errors (exit 2)
-- for malformed files, unknown ops, shape mismatches and unbound symbols.
local graphjson = require "emmy.graphjson"
local graphs = require "graphs"

local T = {}
local function test(name, fn) T[#T + 1] = { name, fn } end

local FIXTURE = ROOT .. "/tests/fixtures/block.torch.json"

test("block round-trips byte-identically", function()
  local g = graphs.block()
  local a = graphjson.encode(g)
  local g2 = assert(graphjson.decode(a, "a"))
  local b = graphjson.encode(g2)
  eq(b, a, "write -> read -> write")
  eq(g2:hash(), g:hash(), "hash survives the round trip")
end)

test("every op case round-trips", function()
  for _, c in ipairs(graphs.op_cases) do
    local g = graphs.case_graph(c)
    local a = graphjson.encode(g)
    local g2, err = graphjson.decode(a, c.name)
    check(g2, c.name .. ": " .. tostring(err))
    eq(graphjson.encode(g2), a, c.name)
    eq(g2:hash(), g:hash(), c.name .. " hash")
  end
end)

test("committed fixture matches the builder", function()
  -- the fixture is what the builder writes; if the format changes, regenerate it with tests/lua/gen_fixtures.lua
  local text = read_file(FIXTURE)
  eq(text, graphjson.encode(graphs.block()), "fixture")
  local d = tmpdir()
  local code, out, err = emmy { "graph", FIXTURE, "-o", d .. "/b.json" }
  eq(code, 0, "exit: " .. err)
  eq(read_file(d .. "/b.json"), text, "emmy graph -o rewrites identically")
  check(out:find("hash " .. graphs.block():hash()), out)
end)

test("dims are canonical", function()
  local ir = require "emmy.ir"
  local g = ir.new()
  assert(g:symbol("s", { hint = 4 }))
  assert(g:symbol("b", { hint = 2 }))
  eq(g:dim("s*16"), "16*s", "coefficient first")
  eq(g:dim("(s+1)*(s-1)"), "s*s-1", "expanded")
  eq(g:dim("b*s+s*b-2*s*b+7"), 7, "cancels to a constant")
  eq(g:dim("cdiv(16*s,8)"), "2*s", "exact ceil-div")
  eq(g:dim("cdiv(s,64)"), "cdiv(s,64)", "derived symbol")
  eq(g:eval("cdiv(s,64)", { s = 65 }), 2, "derived value")
  eq(g:eval("s*b+1", { s = 7, b = 3 }), 22, "eval")
end)

-- Each bad input: the file text, a fragment the error must contain.
local base = [[{"format": "emmy.graph", "version": 1, "name": "t",
  "symbols": [{"name": "s", "hint": 4, "min": 1, "max": 64}],
  "inputs": [{"name": "x", "kind": "activation", "dtype": "f32", "shape": ["s", 8]},
             {"name": "w", "kind": "param", "dtype": "f32", "shape": [8, 3]}],
  "nodes": [%s],
  "outputs": [%s]}]]
local good_node = [[{"name": "y", "op": "aten.mm.default", "args": {"self": "x", "mat2": "w"}, "dtype": "f32", "shape": ["s", 3]}]]
local bad = {
  { "malformed JSON", '{"format": "emmy.graph", "version": 1, "nodes": [', "malformed JSON" },
  { "not an object", "[1, 2]", "top level" },
  { "wrong format", '{"format": "onnx", "version": 1}', "\"format\"" },
  { "wrong version", '{"format": "emmy.graph", "version": 7}', "unsupported version 7" },
  { "unknown op", base:format([[{"name": "y", "op": "aten.frobnicate.default", "args": {"self": "x"}}]], '"y"'),
    "node 'y': unknown op 'aten.frobnicate.default'" },
  { "unknown arg", base:format([[{"name": "y", "op": "aten.mm.default", "args": {"self": "x", "mat3": "w"}}]], '"y"'),
    "unknown argument 'mat3'" },
  { "missing arg", base:format([[{"name": "y", "op": "aten.mm.default", "args": {"self": "x"}}]], '"y"'),
    "argument 'mat2' is missing" },
  { "undefined value", base:format([[{"name": "y", "op": "aten.mm.default", "args": {"self": "x", "mat2": "zz"}}]], '"y"'),
    "unknown value 'zz'" },
  { "shape mismatch", base:format([[{"name": "y", "op": "aten.mm.default", "args": {"self": "w", "mat2": "w"}}]], '"y"'),
    "node 'y' (aten.mm.default): inner dims differ" },
  { "declared shape disagrees", base:format([[{"name": "y", "op": "aten.mm.default", "args": {"self": "x", "mat2": "w"}, "shape": ["s", 4]}]], '"y"'),
    "\"shape\" says [s, 4] but inference gives [s, 3]" },
  { "unbound symbol", base:format([[{"name": "y", "op": "aten.view.default", "args": {"self": "x", "size": ["n", 8]}}]], '"y"'),
    "unbound symbol 'n'" },
  { "unbound symbol in input", [[{"format": "emmy.graph", "version": 1, "inputs": [{"name": "x", "dtype": "f32", "shape": ["q", 2]}]}]],
    "unbound symbol 'q'" },
  { "bad dtype", [[{"format": "emmy.graph", "version": 1, "inputs": [{"name": "x", "dtype": "f8", "shape": [2]}]}]],
    "unknown dtype 'f8'" },
  { "bad output", base:format(good_node, '"nope"'), "output 'nope' is not a value" },
  { "duplicate name", base:format(good_node .. ", " .. good_node, '"y"'), "value name 'y' is used twice" },
  { "view size mismatch", base:format([[{"name": "y", "op": "aten.view.default", "args": {"self": "x", "size": ["s", 9]}}]], '"y"'),
    "has 8*s elements but size asks for 9*s" },
  { "bool where int", base:format([[{"name": "y", "op": "aten.transpose.int", "args": {"self": "x", "dim0": true, "dim1": 0}}]], '"y"'),
    "argument 'dim0'" },
  { "symbol hint out of range", [[{"format": "emmy.graph", "version": 1, "symbols": [{"name": "s", "hint": 100, "max": 64}]}]],
    "hint 100 outside" },
}

test("bad files give one line and exit 2", function()
  local d = tmpdir()
  for i, b in ipairs(bad) do
    local path = ("%s/bad%d.torch.json"):format(d, i)
    write_file(path, b[2])
    local code, out, err = emmy { "graph", path }
    eq(code, 2, b[1] .. " exit (" .. err .. ")")
    eq(#lines_of(err), 1, b[1] .. ": one line: " .. err)
    check(err:find(path, 1, true), b[1] .. ": names the file: " .. err)
    check(err:find(b[3], 1, true), b[1] .. ": expected '" .. b[3] .. "' in: " .. err)
    check(not err:find("traceback"), b[1])
  end
  local code, _, err = emmy { "graph", d .. "/missing.json" }
  eq(code, 2, "missing file")
  check(err:find("cannot read"), err)
end)

test("unbound symbol at run time", function()
  local d = tmpdir()
  write_file(d .. "/nohint.json", [[{"format": "emmy.graph", "version": 1, "symbols": [{"name": "s"}],
    "inputs": [{"name": "x", "kind": "activation", "dtype": "f32", "shape": ["s", 2]}],
    "nodes": [{"name": "y", "op": "aten.neg.default", "args": {"self": "x"}}], "outputs": ["y"]}]])
  local code, _, err = emmy { "ref", d .. "/nohint.json" }
  eq(code, 2, "exit")
  eq(#lines_of(err), 1, "one line")
  check(err:find("symbol 's' is unbound"), err)
  code, _, err = emmy { "ref", d .. "/nohint.json", "--bind", "s=3", "--bind", "t=2" }
  eq(code, 2, "unknown symbol exit")
  check(err:find("no symbol 't'"), err)
  code, _, err = emmy { "ref", d .. "/nohint.json", "--bind", "s=0" }
  eq(code, 2, "out of range exit")
  check(err:find("s"), err)
  code = emmy { "ref", d .. "/nohint.json", "--bind", "s=3" }
  eq(code, 0, "bound")
end)

return T
