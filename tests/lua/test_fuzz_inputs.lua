-- Seeded, bounded fuzz and fault cases for issue 21's categories 3 (dims and sizes) and 5 (bad input accepted
-- silently). Each test generates many cases from one seed (EMMY_FUZZ_SEED, default 21; a failure names it) and
-- asserts that a refusal is one line naming the problem: nil, msg in process; exit 1 or 2 with one "emmy: …"
-- line on stderr from a command, never a crash or an abort. tests/run.sh runs this file a second time under
-- ./emmy-asan (AddressSanitizer + UBSan), so the C paths it drives in process and in the commands it spawns
-- are checked for memory errors and undefined behaviour too. Every example of the issue is a case here.
local cjson = require "cjson"
local ir = require "emmy.ir"
local ref = require "emmy.ref"
local sys = require "emmy.sys"
local graphjson = require "emmy.graphjson"
local models = require "emmy.models"
local compiler = require "emmy.compiler"

local T = {}
local SEED = tonumber(os.getenv("EMMY_FUZZ_SEED") or "") or 21
local ASAN = BIN:find("asan", 1, true) ~= nil

-- Each test draws from its own stream, so adding a test does not change another's cases.
local function test(name, fn)
  T[#T + 1] = { name, function()
    math.randomseed(SEED + sys.fnv(name) % 1000003)
    local ok, err = pcall(fn)
    if not ok then error(("%s (EMMY_FUZZ_SEED=%d)"):format(tostring(err), SEED), 0) end
  end }
end

local function pick(t) return t[math.random(#t)] end

-- An in-process refusal: nil and one line containing fragment.
local function refused(v, msg, fragment, what)
  check(v == nil, ("%s: accepted (%s)"):format(what, tostring(v)), 2)
  check(type(msg) == "string" and not msg:find("\n"), ("%s: not one line: %s"):format(what, tostring(msg)), 2)
  check(msg:find(fragment, 1, true), ("%s: expected '%s' in: %s"):format(what, fragment, msg), 2)
  return msg
end

-- A command's refusal: exit code (1 or 2, or the one given), one "emmy: " line naming fragment, no sanitizer
-- report, no crash.
local function one_line(argv, fragment, opts)
  opts = opts or {}
  local code, out, err = emmy(argv, opts)
  local what = table.concat(argv, " "):sub(1, 200)
  check(not err:find("Sanitizer", 1, true) and not err:find("runtime error", 1, true), what .. ": sanitizer: " .. err)
  if opts.code then eq(code, opts.code, what .. ": exit (" .. err .. ")")
  else check(code == 1 or code == 2, ("%s: exit %s (%s)"):format(what, tostring(code), err)) end
  eq(#lines_of(err), 1, what .. ": one line: " .. err)
  check(err:match("^emmy: "), what .. ": " .. err)
  check(err:find(fragment, 1, true), ("%s: expected '%s' in: %s"):format(what, fragment, err))
  return err, out
end

local function graph_text(t)
  local doc = { format = "emmy.graph", version = 1, name = t.name or "t", symbols = t.symbols or {},
    inputs = t.inputs or {}, nodes = t.nodes or {}, outputs = t.outputs or {}, meta = t.meta }
  return cjson.encode(doc)
end

local function write_graph(t)
  local p = tmpdir() .. "/g.json"
  write_file(p, type(t) == "string" and t or graph_text(t))
  return p
end

-- ---- category 3: dims and sizes ----------------------------------------------------------------------

local TWO53, TWO62, TWO63, TWO64 = 2 ^ 53, 2 ^ 62, 2 ^ 63, 2 ^ 64
-- literals: text, approximate value; those of 2^63 and more must be refused wherever they appear
local LITS = { { "0", 0 }, { "1", 1 }, { "2", 2 }, { "3", 3 }, { "7", 7 }, { "64", 64 }, { "1000", 1000 },
  { "2147483647", 2147483647 }, { "2147483648", 2147483648 }, { "4294967296", 4294967296 },
  { "3037000499", 3037000499 }, { "3037000500", 3037000500 }, { "9007199254740992", TWO53 },
  { "4611686018427387904", TWO62 }, { "9223372036854775807", TWO63 }, { "9223372036854775808", TWO63 },
  { "18446744073709551616", TWO64 }, { "99999999999999999999999", 1e23 } }

-- A random dim expression over constants (and, when sym, the symbols s and b), with what it must give:
-- e.state "ok" (every intermediate below 2^62: accepted; e.v exact when e.exact), "over" (a literal of 2^63 or
-- more, or an intermediate of 2^64 or more: refused), "amb" (near the limit: either, consistently).
local function gen_expr(depth, sym)
  local function sp() return math.random(4) == 1 and " " or "" end
  local function leaf()
    if sym and math.random(3) == 1 then return { t = pick { "s", "b" }, v = 1, state = "ok", exact = true, sym = true, err = 0 } end
    local l = pick(LITS)
    local big = l[1]:len() > 19 or (l[1]:len() == 19 and l[1] > "9223372036854775807")
    local st = big and "over" or (l[2] >= TWO62 and "amb" or "ok")
    return { t = l[1], v = l[2], state = st, exact = l[2] < TWO53, lit_over = big, err = l[2] * 2 ^ -52 }
  end
  local function judge(v, a, b)
    local st
    if a.state == "over" or (b and b.state == "over") then st = "over"
    elseif math.abs(v) >= TWO64 then st = "over"
    elseif a.state == "ok" and (not b or b.state == "ok") and math.abs(v) < TWO62 then st = "ok"
    else st = "amb" end
    return st
  end
  local function go(d)
    if d <= 0 or math.random(3) == 1 then return leaf() end
    local k = math.random(6)
    local a = go(d - 1)
    local e
    if k <= 3 then
      local b = go(d - 1)
      local op = ({ "+", "-", "*" })[k]
      local v = k == 1 and a.v + b.v or k == 2 and a.v - b.v or a.v * b.v
      e = { t = a.t .. sp() .. op .. sp() .. b.t, v = v, state = judge(v, a, b), sym = a.sym or b.sym,
        lit_over = a.lit_over or b.lit_over }
      e.exact = a.exact and b.exact and math.abs(v) < TWO53 -- a double holds every integer below 2^53
      -- a bound on the double's error: the operands' errors carried through, plus this step's rounding
      e.err = (k == 3 and (math.abs(a.v) * b.err + math.abs(b.v) * a.err + a.err * b.err) or (a.err + b.err))
        + math.abs(v) * 2 ^ -52
      -- * binds tighter than + and -: parenthesize to keep the tree the value was computed on
      e.t = "(" .. e.t .. ")"
    elseif k == 4 then
      e = { t = "-" .. sp() .. a.t, v = -a.v, state = a.state, exact = a.exact, sym = a.sym, lit_over = a.lit_over, err = a.err }
    elseif k == 5 then
      local c = math.random(100)
      local v = math.ceil(a.v / c)
      e = { t = "cdiv(" .. sp() .. a.t .. "," .. sp() .. c .. ")", v = v, state = a.state, exact = a.exact, sym = a.sym,
        lit_over = a.lit_over, err = a.err / c + 1 }
    else
      e = { t = "(" .. sp() .. a.t .. sp() .. ")", v = a.v, state = a.state, exact = a.exact, sym = a.sym,
        lit_over = a.lit_over, err = a.err }
    end
    return e
  end
  return go(depth)
end

local function sym_graph()
  local g = ir.new("dims")
  assert(g:symbol("s", { hint = 8, max = 2 ^ 40 }))
  assert(g:symbol("b", { hint = 2, max = 64 }))
  return g
end

test("dims: random expressions with huge constants are exact or refused, never wrapped", function()
  local n, refusals = 0, 0
  for i = 1, 3000 do
    local e = gen_expr(math.random(1, 5), i % 3 == 0)
    local g = sym_graph()
    local d, err = g:dim(e.t)
    local what = ("dim '%s'"):format(e.t)
    if e.lit_over or (not e.sym and e.state == "over") then
      refused(d, err, "beyond 64 bits", what)
      refusals = refusals + 1
    elseif not e.sym and e.state == "ok" then
      check(d ~= nil, what .. ": refused: " .. tostring(err))
      if e.exact then eq(d, e.v, what) end
    elseif d == nil then
      -- symbolic: a coefficient past 64 bits, too many terms or too many derived symbols, each one line
      check(type(err) == "string" and not err:find("\n") and err:find("dim expression", 1, true), what .. ": " .. tostring(err))
      refusals = refusals + 1
    elseif type(d) == "number" then
      check(math.abs(d) <= TWO53, what .. ": constants past 2^53 are given as text: " .. d)
      if not e.sym and e.exact then eq(d, e.v, what)
      elseif not e.sym then check(math.abs(d - e.v) <= e.err + 1, ("%s: %s vs ~%s"):format(what, d, e.v)) end
    else
      -- the canonical form reads back as itself; a constant past 2^53 is exact text (a double cannot hold it)
      eq(g:dim(d), d, what .. " canonical form")
      if not e.sym then
        check(d:match("^%-?%d+$"), what .. ": a constant: " .. d)
        check(math.abs(tonumber(d) - e.v) <= e.err + 1, ("%s: %s vs ~%s"):format(what, d, e.v))
      end
    end
    n = n + 1
  end
  check(refusals > 300, "the generator reaches the limit often enough: " .. refusals)
  -- the issue's example, by itself and as an input shape
  local g = sym_graph()
  refused(g:dim("9223372036854775807*9223372036854775807"), select(2, g:dim("9223372036854775807*9223372036854775807")),
    "a value beyond 64 bits", "INT64_MAX^2")
  local p = write_graph { inputs = { { name = "x", dtype = "f32", shape = { "9223372036854775807*9223372036854775807" } } },
    outputs = { "x" } }
  one_line({ "graph", p }, "dim expression '9223372036854775807*9223372036854775807': a value beyond 64 bits", { code = 2 })
end)

test("dims: nesting is refused past the depth limit, at every depth and opener", function()
  local g = sym_graph()
  local openers = { { "(", ")", 1 }, { "-", "", 1 }, { "cdiv(", ",3)", 1 }, { "-(", ")", 2 } }
  for i = 1, 400 do
    local depth = i <= 300 and math.random(1, 80) or math.random(100, 20000)
    local open, close, levels = {}, {}, 0
    for k = 1, depth do
      local o = pick(openers)
      open[k], close[depth - k + 1] = o[1], o[2]
      levels = levels + o[3]
    end
    local text = table.concat(open) .. "7" .. table.concat(close) -- a constant: cdiv adds no derived symbols
    local d, err = g:dim(text)
    local what = ("%d levels"):format(levels)
    if levels <= 63 then check(d ~= nil, what .. ": refused: " .. tostring(err))
    else
      refused(d, err, "nesting deeper than 64 levels", what)
      check(#err < 300, what .. ": the expression is quoted, not copied: " .. #err)
    end
  end
  -- the issue's example: 10,000 parentheses segfaulted the parser
  local p = write_graph { inputs = { { name = "x", dtype = "f32", shape = { ("("):rep(10000) .. "1" .. (")"):rep(10000) } } },
    outputs = { "x" } }
  one_line({ "graph", p }, "nesting deeper than 64 levels", { code = 2 })
end)

-- log2 of a shape's element count, and whether it is certainly within / past 2^63-1 (with bytes per element).
local function size_class(shape, bytes)
  local l = math.log(bytes) / math.log(2)
  for _, d in ipairs(shape) do
    if d == 0 then return "ok" end
    l = l + math.log(d) / math.log(2)
  end
  if l < 62.99 then return "ok" elseif l > 63.01 then return "over" end
  return "amb"
end

test("sizes: shapes past 2^63-1 elements or bytes are refused where they enter the graph", function()
  local DIMS = { 0, 1, 3, 1000, 2 ^ 20, 2 ^ 31 - 1, 2 ^ 31, 2 ^ 32, 2 ^ 40, 2 ^ 53 }
  local BYTES = { bf16 = 2, f16 = 2, f32 = 4, f64 = 8, i32 = 4, i64 = 8, bool = 1 }
  local dts = { "bf16", "f16", "f32", "f64", "i32", "i64", "bool" }
  local over = 0
  for i = 1, 1500 do
    local shape = {}
    for k = 1, math.random(1, 6) do shape[k] = pick(DIMS) end
    local dt = pick(dts)
    local g = ir.new("s")
    local v, err = g:input("x", dt, shape)
    local cls = size_class(shape, BYTES[dt])
    local what = ("%s %s"):format(dt, graphjson.shape_str(shape))
    if cls == "ok" then check(v, what .. ": refused: " .. tostring(err))
    elseif cls == "over" then
      refused(v, err, "more than 2^63-1", what)
      over = over + 1
    end
  end
  check(over > 200, "enough shapes past the limit: " .. over)
  -- node results: expand and arange to sizes past the limit
  for i = 1, 300 do
    local g = ir.new("n")
    assert(g:input("one", "f32", { 1, 1 }))
    local a, b = pick(DIMS), pick(DIMS)
    local name, err = g:node("aten.expand.default", { self = "one", size = { a, b } }, { name = "e" })
    local cls = size_class({ a, b }, 4)
    if cls == "ok" then check(name, ("expand to [%s, %s]: %s"):format(a, b, tostring(err)))
    elseif cls == "over" then refused(name, err, "more than 2^63-1", ("expand to [%s, %s]"):format(a, b)) end
    local n = pick { 2 ^ 40, 2 ^ 61, 2 ^ 62 - 1, 2 ^ 53 }
    name, err = g:node("aten.arange.default", { ["end"] = n, dtype = "f64" }, { name = "r" })
    cls = size_class({ n }, 8)
    if cls == "over" then refused(name, err, "more than 2^63-1 bytes", "arange " .. n)
    elseif cls == "ok" then check(name, "arange " .. n .. ": " .. tostring(err)) end
  end
  -- the issue's example: [2147483648]*3 compiled to a kernel whose total was 0
  local p = write_graph { inputs = { { name = "x", dtype = "f32", shape = { 2147483648, 2147483648, 2147483648 } } },
    nodes = { { name = "y", op = "aten.neg.default", args = { self = "x" } } }, outputs = { "y" } }
  for _, cmd in ipairs { "graph", "compile", "ref" } do
    one_line({ cmd, p }, "input 'x': shape [2147483648, 2147483648, 2147483648] has more than 2^63-1 elements", { code = 2 })
  end
end)

test("sizes: symbolic shapes are checked at each binding", function()
  local g = ir.new("cube")
  assert(g:symbol("s", { hint = 8, max = 2 ^ 40 }))
  assert(g:input("x", "f32", { "s", "s", "s" }))
  assert(g:node("aten.select.int", { self = "x", dim = 0, index = "s*s*s*s-1" }, { name = "y" }))
  -- 4 * s^3 bytes: s <= 1321122 fits, 1321123 does not; the index s^4-1 passes 2^63-1 from s = 55109
  local smax = 1321122
  for i = 1, 600 do
    local s = pick { math.random(1, 2 ^ 20), math.random(2 ^ 20, 2 ^ 22), math.random(1, 60000), smax, smax + 1, 2 ^ 40 }
    local b, err = g:bind { s = s }
    local what = "s = " .. s
    if s > smax then refused(b, err, "at s=" .. s .. ", value 'x' [s, s, s] is more than 2^63-1 bytes", what)
    elseif s ^ 4 >= TWO63 * (1 + 1e-9) then refused(b, err, "argument 'index' of node 'y' (aten.select.int)", what)
    elseif s ^ 4 < TWO63 * (1 - 1e-9) then check(b and b.s == s, what .. ": " .. tostring(err)) end
  end
end)

test("bind: bad --bind values are one line naming the symbol, never the hint", function()
  local g = ir.new("b")
  assert(g:symbol("seq_len", { hint = 8, min = 1, max = 64 }))
  assert(g:input("x", "f32", { "seq_len", 4 }))
  local vals = { -5, 0, 65, 1e20, -1e20, 0.5, 2.25, 0 / 0, 1 / 0, -1 / 0, "8", true, {}, 2 ^ 53 + 2, -2 ^ 63 }
  for i = 1, 2000 do
    local v = math.random(3) == 1 and pick(vals) or math.random(-200, 200)
    local b, err = g:bind { seq_len = v }
    local what = "seq_len = " .. tostring(v)
    if type(v) == "number" and v == math.floor(v) and v >= 1 and v <= 64 then check(b and b.seq_len == v, what)
    else refused(b, err, "symbol 'seq_len'", what) end
  end
  refused(g:bind { nope = 3 }, select(2, g:bind { nope = 3 }), "has no symbol 'nope'", "unknown symbol")
  -- through the command: the issue's example, then random bad texts
  local fixture = ROOT .. "/tests/fixtures/block.torch.json"
  one_line({ "ref", fixture, "--bind", "seq_len=-5" }, "symbol 'seq_len' = -5 is outside its range [1, 64]", { code = 2 })
  local texts = { "seq_len=0", "seq_len=65", "seq_len=100000", "seq_len=-1", "seq_len=abc", "seq_len=1.5", "seq_len=1e3",
    "seq_len=", "seq_len=0x10", "seq_len= 5", "seq_len=99999999999999999999", "seq_len=seq_len", "=5", "5",
    "nope=3", "seq_len=-99999999999999999999" }
  for i = 1, ASAN and 5 or 8 do
    local t = table.remove(texts, math.random(#texts))
    one_line({ "ref", fixture, "--bind", t }, t:match("^nope") and "no symbol 'nope'" or (t:match("^seq_len=%-?%d+$") and
      "symbol 'seq_len'" or "--bind"), { code = 2 })
  end
  one_line({ "ref", fixture, "--bind", "seq_len=3", "--bind", "seq_len=4" }, "--bind seq_len is given twice", { code = 2 })
  -- integer options: a value a double cannot hold exactly, infinity or NaN is refused, not cast
  for _, v in ipairs { "99999999999999999999", "inf", "nan", "-inf", "1e400" } do
    one_line({ "ref", fixture, pick { "--seed", "--threads" }, v }, "needs an integer, got '" .. v .. "'", { code = 2 })
  end
end)

-- The memory a process may use here, as emmy's allocator sees it (physical memory or the cgroup's limit).
local function mem_limit()
  local lim = math.huge
  local f = io.open("/proc/meminfo")
  if f then
    local kb = tonumber((f:read("*a"):match("MemTotal:%s*(%d+)")))
    f:close()
    if kb then lim = kb * 1024 end
  end
  for _, p in ipairs { "/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes" } do
    local c = io.open(p)
    if c then
      local v = tonumber(c:read("*l") or "")
      c:close()
      if v and v > 0 and v < lim then lim = v end
    end
  end
  return lim
end

test("allocation: tensors the machine cannot hold are one line, exit 1, never an abort", function()
  local lim = mem_limit()
  check(lim < math.huge, "memory size readable")
  -- in process: shapes from 2x the memory up to 2^63-1 bytes, and past it
  for i = 1, 200 do
    local rows = math.floor(lim / 4 / 2 ^ 20 * (2 + math.random() * 6)) + 1
    local shape = pick { { rows, 2 ^ 20 }, { 2 ^ 31, 2 ^ 31, 2 ^ 31 }, { 2 ^ 31, 2 ^ 31 }, { rows * 2 ^ 20 } }
    local dt = pick { "f32", "f64", "bf16", "i64", "bool" }
    local ok, err = pcall(pick { ref.random, ref.tensor, function(d, s) return ref.full(d, s, 1) end }, dt, shape)
    check(not ok and not tostring(err):find("\n"), "refused in one line: " .. tostring(err))
    check(tostring(err):find("GiB", 1, true) or tostring(err):find("2^63-1", 1, true), tostring(err))
  end
  -- a .npy whose header promises more than the file holds is refused before its shape is allocated
  local npy = tmpdir() .. "/lie.npy"
  local header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1048576, 1048576), }"
  header = header .. (" "):rep(64 - (10 + #header + 1) % 64) .. "\n"
  write_file(npy, "\147NUMPY\1\0" .. string.char(#header % 256, math.floor(#header / 256)) .. header .. "0123456789")
  refused(ref.load(npy, "f32"), select(2, ref.load(npy, "f32")), "data is shorter than its shape needs", "lying .npy")
  -- the command: the issue's example (128 GiB) where this machine gives emmy less, and 4x the memory anyway
  local shapes = { { math.floor(lim / 2 ^ 22) * 4 + 4, 1048576 } }
  if lim < 100 * 2 ^ 30 then table.insert(shapes, 1, { 32768, 1048576 }) end
  for _, shape in ipairs(shapes) do
    local p = write_graph { inputs = { { name = "x", dtype = "f32", shape = shape } },
      nodes = { { name = "y", op = "aten.neg.default", args = { self = "x" } } }, outputs = { "y" } }
    one_line({ "ref", p }, ("input 'x': a f32 tensor [%d, %d] needs"):format(shape[1], shape[2]), { code = 1 })
  end
end)

-- ---- category 5: bad input accepted silently -----------------------------------------------------------

test("structural meta: random records are parsed exactly like EMMY_<KNOB> values or refused", function()
  local keys = {}
  for k in pairs(compiler.STRUCTURAL) do keys[#keys + 1] = k end
  table.sort(keys)
  local bad = 0
  for i = 1, 1500 do
    local items, want, ok = {}, {}, true
    for k = 1, math.random(0, 5) do
      local r = math.random(10)
      local key = r <= 7 and pick(keys) or pick { "FOO", "split_cone", "SPLIT CONE", "", "BM" }
      local v = r <= 5 and pick { "0", "1" } or pick { "0", "1", "2", "-1", "", "01", "x", "1.0", "0 1" }
      local item = pick { key .. "=" .. v, key .. "=" .. v, " " .. key .. "=" .. v .. " ", key, key .. "==" .. v, "" }
      items[#items + 1] = item
      local kk, vv = item:match("^%s*([%w_]+)=([01])%s*$")
      if not kk or compiler.STRUCTURAL[kk] == nil or want[kk] ~= nil then ok = false else want[kk] = tonumber(vv) end
    end
    local text = table.concat(items, ",")
    if text == "" then ok, want = true, {} end
    local got, err = compiler.parse_structural(text)
    local what = ("structural '%s'"):format(text)
    if ok then
      check(got, what .. ": refused: " .. tostring(err))
      for _, k in ipairs(keys) do eq(got[k], want[k], what .. " " .. k) end
    else
      refused(got, err, "meta \"structural\"", what)
      bad = bad + 1
      -- and a graph JSON carrying it is refused when read, naming the file
      if i % 10 == 0 then
        local g2, e2 = graphjson.decode(graph_text { meta = { structural = text } }, "f.json")
        refused(g2, e2, "f.json: meta \"structural\"", what .. " in a graph")
      end
    end
  end
  check(bad > 300, "enough bad records: " .. bad)
  local p = write_graph { meta = { structural = "SPLIT_CONE=7" } }
  one_line({ "graph", p }, "structural knob SPLIT_CONE=7 must be 0 or 1", { code = 2 })
end)

local TINY = { architectures = { "Qwen3ForCausalLM" }, model_type = "qwen3", hidden_size = 32, intermediate_size = 48,
  num_hidden_layers = 2, num_attention_heads = 4, num_key_value_heads = 2, head_dim = 8, hidden_act = "silu",
  max_position_embeddings = 128, rms_norm_eps = 1e-6, rope_theta = 10000, tie_word_embeddings = true,
  vocab_size = 50, attention_bias = false, torch_dtype = "bfloat16", initializer_range = 0.02 }

local function with(extra)
  local c = {}
  for k, v in pairs(TINY) do c[k] = v end
  for k, v in pairs(extra) do c[k] = v end
  return c
end

test("config.json: values no model can have are refused, naming the field", function()
  local SIZES = { "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "vocab_size", "max_position_embeddings", "head_dim" }
  local bad_size = { 0, -1, -64, 1.5, 0 / 0, 1 / 0, -1 / 0, "32", true, 2 ^ 31, 2 ^ 40, {} }
  local FLOATS = { rope_theta = { 0, -1, -1e-9, 0 / 0, 1 / 0, -1 / 0, 1e39, "1e4", false },
    rms_norm_eps = { -1e-6, -1, 0 / 0, 1 / 0, -1 / 0, "1e-6" }, initializer_range = { 0, -0.02, 0 / 0, 1 / 0 } }
  local fkeys = { "rope_theta", "rms_norm_eps", "initializer_range" }
  local n = 0
  for i = 1, 1500 do
    local r = math.random(10)
    local raw, field
    if r <= 4 then
      field = pick(SIZES)
      raw = with { [field] = pick(bad_size) }
    elseif r <= 7 then
      field = pick(fkeys)
      raw = with { [field] = pick(FLOATS[field]) }
    elseif r == 8 then
      -- kv heads that do not divide the heads; an odd head_dim; hidden not divisible by heads without head_dim
      local k = math.random(3)
      if k == 1 then raw, field = with { num_attention_heads = 4, num_key_value_heads = pick { 3, 5, 8 } }, "kv heads"
      elseif k == 2 then raw, field = with { head_dim = pick { 3, 7, 9, 15 } }, "head_dim"
      else raw, field = with { head_dim = cjson.null, hidden_size = pick { 30, 33, 34, 35 } }, "not a multiple" end
    elseif r == 9 then
      local lo = math.random(1, 4)
      raw, field = with { rope_scaling = pick { { rope_type = "llama3", factor = 8, low_freq_factor = lo, high_freq_factor = lo },
        { rope_type = "llama3", factor = 8, low_freq_factor = lo + 1, high_freq_factor = lo },
        { rope_type = "linear", factor = pick { 0, -2, 0 / 0 } }, { rope_type = "llama3", factor = -1 } } }, "rope_scaling"
    else
      -- a valid config: sizes that divide, finite positive floats: accepted
      local heads = pick { 1, 2, 4, 8 }
      local kv = pick { 1, heads }
      local hd = pick { 2, 8, 16, 64 }
      raw = with { num_attention_heads = heads, num_key_value_heads = kv, head_dim = hd, hidden_size = math.random(1, 4096),
        rope_theta = pick { 1, 10000, 1e6, 3e38 }, rms_norm_eps = pick { 0, 1e-12, 1e-6, 0.5 } }
    end
    local c, err = models.decoder_config(raw, "cfg.json")
    if field then
      refused(c, err, field, ("%s = %s"):format(field, tostring(raw[field])))
      check(err:find("^cfg.json: "), err)
      n = n + 1
    else
      check(c, "valid config refused: " .. tostring(err))
    end
  end
  check(n > 1000, "enough bad configs: " .. n)
  -- the issue's examples through the command, and a valid random config whose reference outputs are finite
  local function dir_of(raw)
    local d = tmpdir()
    write_file(d .. "/config.json", cjson.encode(raw))
    return d
  end
  one_line({ "trace", dir_of(with { rope_theta = 0 }), "--layer", "0" }, "\"rope_theta\" is 0; it must be a number > 0",
    { code = 2 })
  one_line({ "trace", dir_of(with { rms_norm_eps = -1e-6 }), "--layer", "0" }, "\"rms_norm_eps\" is -1e-06", { code = 2 })
  one_line({ "trace", dir_of(with { head_dim = cjson.null, hidden_size = 30 }), "--layer", "0" },
    "\"hidden_size\" 30 is not a multiple of \"num_attention_heads\" 4", { code = 2 })
  local d = dir_of(with { rope_theta = pick { 1, 500, 1e6 }, rms_norm_eps = pick { 0, 1e-5 }, hidden_size = 48 })
  local code, out, err = emmy { "trace", d, "--layer", "1", "--seq-len", "5", "-o", d .. "/g.json" }
  eq(code, 0, "trace: " .. err)
  code, out, err = emmy { "ref", d .. "/g.json", "--json" }
  eq(code, 0, "ref: " .. err)
  local res = cjson.decode(out)
  for _, o in ipairs(res.outputs) do eq(o.nonfinite, 0, "a valid config gives finite outputs: " .. o.name) end
end)

-- A lua-side UTF-8 check, independent of emmy's C one: nil when valid, else the byte offset of the problem.
local function utf8_bad(s)
  local i, n = 1, #s
  while i <= n do
    local c = s:byte(i)
    local len, min, cp
    if c < 0x80 then len, cp, min = 1, c, 0
    elseif c >= 0xc2 and c <= 0xdf then len, cp, min = 2, c - 0xc0, 0x80
    elseif c >= 0xe0 and c <= 0xef then len, cp, min = 3, c - 0xe0, 0x800
    elseif c >= 0xf0 and c <= 0xf4 then len, cp, min = 4, c - 0xf0, 0x10000
    else return i end
    if i + len - 1 > n then return i end
    for k = 1, len - 1 do
      local cc = s:byte(i + k)
      if cc < 0x80 or cc > 0xbf then return i end
      cp = cp * 64 + (cc - 0x80)
    end
    if cp < min or cp > 0x10ffff or (cp >= 0xd800 and cp <= 0xdfff) then return i end
    i = i + len
  end
  return nil
end

local function utf8_char(cp)
  if cp < 0x80 then return string.char(cp) end
  if cp < 0x800 then return string.char(0xc0 + math.floor(cp / 64), 0x80 + cp % 64) end
  if cp < 0x10000 then
    return string.char(0xe0 + math.floor(cp / 4096), 0x80 + math.floor(cp / 64) % 64, 0x80 + cp % 64)
  end
  return string.char(0xf0 + math.floor(cp / 262144), 0x80 + math.floor(cp / 4096) % 64, 0x80 + math.floor(cp / 64) % 64,
    0x80 + cp % 64)
end

local INVALID = { "\255", "\192\128", "\193\191", "\237\160\128", "\244\144\128\128", "\128", "\226\130", "\248\136\128\128\128",
  "\224\128\128", "\240\128\128\128", "\191" }

-- A random name: valid UTF-8 (control characters, multi-byte, astral) or, mutated, with a NUL or invalid bytes.
local function random_name()
  local parts = {}
  for k = 1, math.random(1, 10) do
    local r = math.random(10)
    local cp = r <= 5 and math.random(0x20, 0x7e) or r == 6 and math.random(1, 0x1f) or r == 7 and math.random(0x80, 0x7ff)
      or r == 8 and pick { math.random(0x800, 0xd7ff), math.random(0xe000, 0xfffd) } or r == 9 and math.random(0x10000, 0x10ffff)
      or 0x7f
    parts[#parts + 1] = utf8_char(cp)
  end
  local m = math.random(3)
  if m == 1 then table.insert(parts, math.random(#parts + 1), "\0")
  elseif m == 2 then table.insert(parts, math.random(#parts + 1), pick(INVALID)) end
  return table.concat(parts)
end

test("names: NUL bytes and invalid UTF-8 are refused; valid names round-trip as valid JSON", function()
  local kept, refusals = {}, 0
  for i = 1, 1500 do
    local name = random_name()
    if name == "x" then name = "x2" end -- the input every case's graph has
    local valid = not name:find("%z") and not utf8_bad(name)
    local g = ir.new("names")
    assert(g:input("x", "f32", { 2 }))
    local where = math.random(5)
    local ok, err
    if where == 1 then ok, err = g:input(name, "f32", { 2 })
    elseif where == 2 then ok, err = g:node("aten.neg.default", { self = "x" }, { name = name, module = "m", op = "neg" })
    elseif where == 3 then ok, err = g:meta("k", name)
    elseif where == 4 then ok, err = g:meta(name, "v")
    else ok, err = ir.new(name) end
    local what = ("name %q at %d"):format(name, where)
    if valid then
      check(ok, what .. ": refused: " .. tostring(err))
      if where <= 2 and #kept < 200 then kept[#kept + 1] = name end
    else
      refused(ok, err, name:find("%z") and "has a NUL byte" or "is not valid UTF-8", what)
      refusals = refusals + 1
    end
  end
  check(refusals > 500 and #kept > 100, ("both kinds generated: %d refused, %d kept"):format(refusals, #kept))
  -- every valid name (control characters and astral code points included) is written as valid JSON and reads back
  local g = ir.new("names")
  assert(g:input("x", "f32", { 2 }))
  local prev, seen = "x", { x = true }
  for _, name in ipairs(kept) do
    if not seen[name] then
      seen[name] = true
      prev = assert(g:node("aten.neg.default", { self = prev }, { name = name, module = name }))
    end
  end
  assert(g:output(prev))
  assert(g:meta(kept[1], kept[2]))
  local text = graphjson.encode(g)
  check(not utf8_bad(text), "the writer's output is valid UTF-8")
  local okj, doc = pcall(cjson.decode, text)
  check(okj, "the writer's output is valid JSON: " .. tostring(doc))
  local g2 = assert(graphjson.decode(text, "names.json"))
  eq(graphjson.encode(g2), text, "round trip")
  eq(g2:outputs()[1], prev, "last name")
  -- JSON text: a \u0000 escape and raw invalid bytes in a name, through the command (the issue's examples)
  local base = { inputs = { { name = "x", dtype = "f32", shape = { 4 } } },
    nodes = { { name = "y", op = "aten.neg.default", args = { self = "x" } } }, outputs = { "y" } }
  local t = graph_text(base)
  one_line({ "graph", write_graph((t:gsub('"name":"y"', '"name":"y\\u0000evil"', 1))) }, "node name 'y\\x00evil' has a NUL byte",
    { code = 2 })
  one_line({ "graph", write_graph((t:gsub('"name":"y"', '"name":"y\255\254"', 1))) }, "node name 'y\\xff\\xfe' is not valid UTF-8",
    { code = 2 })
  one_line({ "graph", write_graph((t:gsub('"name":"t"', '"name":"t\\u0000x"', 1))) }, "graph name", { code = 2 })
end)

test("index: shard entries escaping the model folder are refused; links inside it are followed", function()
  local d0 = tmpdir()
  local outside = d0 .. "/outside.safetensors"
  write_file(outside, "x")
  local dir = d0 .. "/model"
  sh(("mkdir -p %s/sub && ln -s ../outside.safetensors %s/link-out.safetensors && ln -s sub/b.safetensors %s/link-in.safetensors")
    :format(shell_quote(dir), shell_quote(dir), shell_quote(dir)))
  write_file(dir .. "/config.json", cjson.encode(TINY))
  write_file(dir .. "/a.safetensors", "x")
  write_file(dir .. "/sub/b.safetensors", "x")
  local GOOD = { "a.safetensors", "sub/b.safetensors", "link-in.safetensors", "./a.safetensors" }
  local BAD = { { "../outside.safetensors", "climbs out with '..'" }, { "sub/../../outside.safetensors", "climbs out" },
    { "sub/../a.safetensors", "climbs out" }, { "./../outside.safetensors", "climbs out" },
    { outside, "is an absolute path" }, { "/etc/passwd", "is an absolute path" }, { "link-out.safetensors", "is a link to" },
    { "a\0.safetensors", "has a NUL byte" }, { "", "is not a file name" }, { 5, "is not a file name" },
    { ("../"):rep(40) .. "etc/passwd", "climbs out" } }
  for i = 1, 120 do
    local map, bad = {}, nil
    for k = 1, math.random(1, 6) do
      if math.random(3) == 1 then
        bad = pick(BAD)
        map["t" .. k] = bad[1]
      else
        map["t" .. k] = pick(GOOD)
      end
    end
    write_file(dir .. "/model.safetensors.index.json", cjson.encode { weight_map = map })
    local m, err = models.resolve(dir)
    if bad then refused(m, err, "weight_map entry", "index with an escaping entry")
    else check(m and #m.weights >= 1, "index inside the folder: " .. tostring(err)) end
  end
  -- the first bad entry in tensor-name order is the one named, every run
  write_file(dir .. "/model.safetensors.index.json", cjson.encode { weight_map = { b = "/etc/passwd", a = "../x" } })
  refused(models.resolve(dir), select(2, models.resolve(dir)), "weight_map entry '../x' (tensor 'a') climbs out", "order")
  one_line({ "trace", dir, "--layer", "0" }, "weight_map entry '../x' (tensor 'a') climbs out with '..'", { code = 2 })
  -- a hub snapshot's files are links into the repository's blobs/: accepted
  local hub = tmpdir()
  local repo = hub .. "/models--Org--Tiny"
  sh(("mkdir -p %s/snapshots/r1 %s/blobs %s/refs && echo r1 > %s/refs/main"):format(repo, repo, repo, repo))
  write_file(repo .. "/blobs/cfg", cjson.encode(TINY))
  assert(require("emmy.safetensors").write(repo .. "/blobs/w1", { w = ref.tensor("f32", { 2 }, { 1, 2 }) }))
  write_file(repo .. "/blobs/idx", cjson.encode { weight_map = { w = "w1.safetensors" } })
  sh(("cd %s/snapshots/r1 && ln -s ../../blobs/cfg config.json && ln -s ../../blobs/w1 w1.safetensors && " ..
    "ln -s ../../blobs/idx model.safetensors.index.json"):format(repo))
  local code, out, err = emmy({ "trace", "Org/Tiny", "--layer", "0", "--seq-len", "4" }, { env = "HF_HUB_CACHE=" .. hub })
  eq(code, 0, "hub snapshot: " .. err)
end)

test("loading: a 40,000-node chain loads in well under a second, linearly", function()
  local function chain(n)
    local parts = { '{"format":"emmy.graph","version":1,"name":"chain","symbols":[{"name":"seq_len","hint":8,"min":1,' ..
      '"max":64}],"inputs":[{"name":"x","kind":"activation","dtype":"f32","shape":["seq_len",16]}],"nodes":[' }
    local prev = "x"
    for i = 1, n do
      parts[#parts + 1] = ('%s{"name":"v%d","op":"aten.neg.default","args":{"self":"%s"},"dtype":"f32","shape":' ..
        '["seq_len",16]}'):format(i > 1 and "," or "", i, prev)
      prev = "v" .. i
    end
    parts[#parts + 1] = '],"outputs":["' .. prev .. '"]}'
    return table.concat(parts)
  end
  local function load_cpu(text)
    collectgarbage()
    local t0 = os.clock()
    local g = assert(graphjson.decode(text, "chain.json"))
    local dt = os.clock() - t0
    return dt, g
  end
  -- (the least CPU time of three loads each: a single sample once went past the ratio in a full `make test` on a busy
  -- machine, 0.601 s against 0.084, where alone the two take ~0.43 and ~0.12)
  local function least(text)
    local best, g
    for _ = 1, 3 do
      local dt, gi = load_cpu(text)
      if not best or dt < best then best, g = dt, gi end
    end
    return best, g
  end
  local t10 = least(chain(10000))
  local t40, g = least(chain(40000))
  eq(g:counts().nodes, 40000, "nodes")
  print(("    40,000-node chain: %.3f s of CPU to load (10,000: %.3f s)%s"):format(t40, t10, ASAN and " under ASan" or ""))
  -- quadratic loading (26 s before) would take 16x as long for 4x the nodes
  check(t40 < 6 * t10 + 0.05, ("linear: %.3f s for 40,000 nodes vs %.3f s for 10,000"):format(t40, t10))
  if not ASAN then check(t40 < 0.75, ("well under a second: %.3f s"):format(t40)) end
end)

return T
