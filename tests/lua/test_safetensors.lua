-- emmy.safetensors from Lua: write and read back every dtype, conversions on load, errors as nil, msg,
-- closed handles, and the format checked by an independent reader and writer in Python (numpy only: the
-- safetensors package is not needed).
local st = require "emmy.safetensors"
local ref = require "emmy.ref"

local T = {}
local function test(name, fn) T[#T + 1] = { name, fn } end

local DTYPES = { "bf16", "f16", "f32", "f64", "i32", "i64", "bool" }
local ST_NAME = { bf16 = "BF16", f16 = "F16", f32 = "F32", f64 = "F64", i32 = "I32", i64 = "I64", bool = "BOOL" }

-- The bytes of a safetensors file: header length as u64 little-endian, header, data.
local function st_bytes(header, data)
  local n, b = #header, {}
  for i = 1, 8 do
    b[i] = string.char(n % 256)
    n = math.floor(n / 256)
  end
  return table.concat(b) .. header .. (data or "")
end

local function same_values(a, b, what)
  local x, y = a:to_table(), b:to_table()
  eq(#x, #y, what .. " numel")
  for i = 1, #x do eq(x[i], y[i], what .. " element " .. i) end
end

local function python_numpy()
  local code, out = sh(PY .. " -c 'import numpy, json, struct; print(numpy.__version__)'")
  if code ~= 0 then skip(PY .. " with numpy is not available: " .. out:gsub("\n", " ")) end
end

test("write and read back every dtype", function()
  local d = tmpdir()
  local tensors = {}
  for i, dt in ipairs(DTYPES) do
    local lo, hi = -1000, 1000
    if dt == "bool" then lo, hi = 0, 2 end
    tensors["t." .. dt] = ref.random(dt, { 3, i + 1 }, { seed = 40 + i, mean = 0.25, std = 2, lo = lo, hi = hi })
  end
  local path = d .. "/all.safetensors"
  eq(st.write(path, tensors, { format = "pt", origin = "emmy test" }), true, "write")
  check(not read_file(path .. ".tmp"):find("."), "no .tmp left behind")
  local h = assert(st.open(path))
  check(tostring(h):find("emmy.safetensors " .. path .. " (7 tensors)", 1, true), tostring(h))
  local list = h:tensors()
  eq(#list, 7, "count")
  for i = 2, #list do check(list[i - 1].name < list[i].name, "file order is name order") end
  for _, e in ipairs(list) do
    local dt = e.name:sub(3)
    local t = tensors[e.name]
    eq(e.dtype, ST_NAME[dt], e.name .. " dtype")
    eq(table.concat(e.shape, ","), table.concat(t:shape(), ","), e.name .. " shape")
    eq(e.bytes, t:numel() * ({ bf16 = 2, f16 = 2, f32 = 4, f64 = 8, i32 = 4, i64 = 8, bool = 1 })[dt], e.name .. " bytes")
    check(h:has(e.name), "has " .. e.name)
    local u = assert(h:load(e.name, dt))
    eq(u:dtype(), dt, "loaded dtype")
    same_values(u, t, e.name)
    local v = assert(h:load(e.name)) -- the file's own dtype by default
    eq(v:dtype(), dt, "default dtype")
  end
  check(not h:has("t.nope"), "has a missing name")
  local m = h:metadata()
  eq(m.format, "pt", "metadata format")
  eq(m.origin, "emmy test", "metadata origin")
  h:close()

  assert(st.write(path, { only = tensors["t.f32"] }))
  h = assert(st.open(path))
  eq(#h:tensors(), 1, "rewritten file")
  eq(next(h:metadata()), nil, "no metadata")
  h:close()
end)

test("loading converts between dtypes", function()
  local d = tmpdir()
  local x = ref.tensor("f32", { 4 }, { 1 + 2 ^ -8, 1 + 3 * 2 ^ -9, 0.1, -3.75 })
  local b = ref.tensor("bf16", { 2, 2 }, { 3.140625, -0.5, 1e30, 7 })
  local i = ref.tensor("i64", { 3 }, { -5, 0, 2 ^ 40 })
  assert(st.write(d .. "/c.safetensors", { x = x, b = b, i = i }))
  local h = assert(st.open(d .. "/c.safetensors"))
  local xb = assert(h:load("x", "bf16")):to_table()
  eq(xb[1], 1, "ties to even")
  eq(xb[2], 1 + 2 ^ -7, "rounds up")
  eq(xb[3], ref.tensor("bf16", { 1 }, { 0.1 }):get(1), "0.1 as bf16")
  eq(xb[4], -3.75, "exact")
  same_values(assert(h:load("b", "f32")), ref.tensor("f32", { 4 }, { 3.140625, -0.5, b:get(3), 7 }), "bf16 as f32")
  local ib = assert(h:load("i", "f64")):to_table()
  eq(ib[3], 2 ^ 40, "i64 as f64")
  local bb = assert(h:load("i", "bool")):to_table()
  eq(bb[1], true, "bool -5")
  eq(bb[2], false, "bool 0")
  h:close()
end)

test("bad files and names give nil, msg", function()
  local d = tmpdir()
  local cases = {
    { st_bytes('{"lm_head.weight":{"dtype":"F32","shape":[2,4],"data_offsets":[0,12]}}', ("\0"):rep(12)),
      "tensor 'lm_head.weight': data_offsets [0, 12] hold 12 bytes but shape [2, 4] × F32 needs 32" },
    { "\1\0\0", "at least 8" },
    { st_bytes('{"a":', ""), "not valid JSON" },
    { st_bytes('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', ("\0"):rep(8)), "4 trailing bytes" },
    { st_bytes('{"__metadata__":{"k":1}}', ""), "__metadata__ value for key 'k'" },
  }
  for n, c in ipairs(cases) do
    local path = d .. "/bad" .. n .. ".safetensors"
    write_file(path, c[1])
    local h, msg = st.open(path)
    eq(h, nil, "case " .. n)
    check(type(msg) == "string" and msg:sub(1, #path + 2) == path .. ": ", tostring(msg))
    check(msg:find(c[2], 1, true), ("case %d: wanted %q in %q"):format(n, c[2], msg))
    check(not msg:find("\n"), "one line")
  end
  local h, msg = st.open(d .. "/absent.safetensors")
  check(not h and msg:find("absent.safetensors: cannot open", 1, true), tostring(msg))

  assert(st.write(d .. "/ok.safetensors", { w = ref.tensor("f32", { 1 }, { 1 }) }))
  h = assert(st.open(d .. "/ok.safetensors"))
  local t, msg2 = h:load("missing", "f32")
  check(not t and msg2:find("no tensor 'missing'", 1, true), tostring(msg2))
  h:close()
  local ok, msg3 = st.write(d .. "/no/such/dir/x.safetensors", { w = ref.tensor("f32", { 1 }, { 1 }) })
  check(not ok and msg3:find("cannot write " .. d .. "/no/such/dir/x.safetensors: No such file or directory", 1, true), tostring(msg3))
  ok, msg3 = st.write(d .. "/m.safetensors", { __metadata__ = ref.tensor("f32", { 1 }, { 1 }) })
  check(not ok and msg3:find("reserved", 1, true), tostring(msg3))
end)

test("a closed handle raises; close is idempotent; misuse raises", function()
  local d = tmpdir()
  assert(st.write(d .. "/a.safetensors", { w = ref.tensor("f32", { 2 }, { 1, 2 }) }))
  local h = assert(st.open(d .. "/a.safetensors"))
  local w = assert(h:load("w", "f32"))
  h:close()
  h:close()
  eq(tostring(h), "emmy.safetensors (closed)", "tostring")
  for _, m in ipairs { "tensors", "has", "load", "metadata" } do
    local ok, err = pcall(h[m], h, "w", "f32")
    check(not ok and tostring(err):find("closed safetensors file", 1, true), m .. ": " .. tostring(err))
  end
  eq(w:get(2), 2, "a loaded tensor outlives its file")
  check(not pcall(st.write, d .. "/b.safetensors", { 1 }), "a tensor without a name")
  check(not pcall(st.write, d .. "/b.safetensors", { w = "not a tensor" }), "a value that is not a tensor")
  check(not pcall(st.write, d .. "/b.safetensors", { w = w }, { k = 1 }), "a metadata value that is not a string")
  h = assert(st.open(d .. "/a.safetensors"))
  check(not pcall(h.load, h, "w", "float99"), "unknown dtype")
  h:close()
end)

-- An independent reader: Python's json and numpy read the file emmy wrote, checking the layout rules.
local PY_READ = [==[
import json, struct, sys
import numpy as np
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hb = raw[8:8 + n]
assert n % 8 == 0, "header length not a multiple of 8"
text = hb.decode("utf-8")
assert text == text.rstrip(" ") + " " * (len(text) - len(text.rstrip(" "))), "padding is spaces"
h = json.loads(text)
meta = h.pop("__metadata__", {})
names = list(h.keys())
assert names == sorted(names), "entries sorted by name"
pos = 0
out = {"__metadata__": meta}
dts = {"BF16": "<u2", "F16": "<f2", "F32": "<f4", "F64": "<f8", "I32": "<i4", "I64": "<i8", "BOOL": "|b1"}
for k in names:
    e = h[k]
    assert sorted(e.keys()) == ["data_offsets", "dtype", "shape"], e
    b, end = e["data_offsets"]
    assert b == pos, (k, b, pos)
    buf = raw[8 + n + b: 8 + n + end]
    a = np.frombuffer(buf, dtype=dts[e["dtype"]])
    if e["dtype"] == "BF16":
        a = (a.astype(np.uint32) << 16).view(np.float32)
    assert a.size == int(np.prod(e["shape"])), k
    out[k] = {"dtype": e["dtype"], "shape": e["shape"], "values": [float(v) for v in a.astype(np.float64)]}
    pos = end
assert 8 + n + pos == len(raw), "no trailing bytes"
print(json.dumps(out))
]==]

test("python (json + numpy) reads what emmy writes", function()
  python_numpy()
  local d = tmpdir()
  local tensors = {}
  for i, dt in ipairs(DTYPES) do
    tensors["p_" .. dt] = ref.random(dt, { 2, i }, { seed = i, lo = dt == "bool" and 0 or -50, hi = dt == "bool" and 2 or 50 })
  end
  assert(st.write(d .. "/e.safetensors", tensors, { k = "v" }))
  write_file(d .. "/read.py", PY_READ)
  local code, out = sh(("%s %s/read.py %s/e.safetensors"):format(PY, d, d))
  eq(code, 0, "python reader: " .. out)
  local got = require("cjson").decode(out)
  eq(got.__metadata__.k, "v", "metadata")
  for name, t in pairs(tensors) do
    local g = got[name]
    check(g, "python sees " .. name)
    eq(g.dtype, ST_NAME[t:dtype()], name .. " dtype")
    eq(table.concat(g.shape, ","), table.concat(t:shape(), ","), name .. " shape")
    local want = t:to_table()
    for i = 1, #want do
      local w = want[i]
      if type(w) == "boolean" then w = w and 1 or 0 end
      eq(g.values[i], w, name .. " element " .. i)
    end
  end
end)

-- An independent writer: json.dumps with its default ", " and ": " separators, unsorted keys, no padding.
local PY_WRITE = [==[
import json, struct, sys
import numpy as np
rng = np.random.default_rng(5)
arrs = {
    "z.f32": rng.standard_normal((3, 4)).astype(np.float32),
    "a.i64": rng.integers(-2**40, 2**40, size=(5,)).astype(np.int64),
    "m.f16": rng.standard_normal((2, 3)).astype(np.float16),
    "k.u8": rng.integers(0, 256, size=(7,)).astype(np.uint8),
}
bf = rng.standard_normal((2, 2)).astype(np.float32)
bf_bits = (bf.view(np.uint32) >> 16).astype(np.uint16)  # truncation: any bf16 bit pattern will do
header, data = {"__metadata__": {"from": "python"}}, b""
for k, a in list(arrs.items()) + [("b.bf16", bf_bits)]:
    dt = {"float32": "F32", "int64": "I64", "float16": "F16", "uint8": "U8", "uint16": "BF16"}[str(a.dtype)]
    b = a.tobytes()
    header[k] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [len(data), len(data) + len(b)]}
    data += b
hb = json.dumps(header).encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(hb)) + hb + data)
vals = {k: [float(v) for v in a.astype(np.float64).ravel()] for k, a in arrs.items()}
vals["b.bf16"] = [float(v) for v in (bf_bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64).ravel()]
print(json.dumps(vals))
]==]

test("emmy reads what python (json + numpy) writes", function()
  python_numpy()
  local d = tmpdir()
  write_file(d .. "/write.py", PY_WRITE)
  local code, out = sh(("%s %s/write.py %s/p.safetensors"):format(PY, d, d))
  eq(code, 0, "python writer: " .. out)
  local want = require("cjson").decode(out)
  local h = assert(st.open(d .. "/p.safetensors"))
  eq(h:metadata().from, "python", "metadata")
  local as = { ["z.f32"] = "f32", ["a.i64"] = "i64", ["m.f16"] = "f16", ["k.u8"] = "i32", ["b.bf16"] = "bf16" }
  local order = {}
  for _, e in ipairs(h:tensors()) do order[#order + 1] = e.name end
  eq(table.concat(order, " "), "z.f32 a.i64 m.f16 k.u8 b.bf16", "file order is data order")
  for name, dt in pairs(as) do
    local t = assert(h:load(name))
    eq(t:dtype(), dt, name .. " default dtype")
    local v = t:to_table()
    eq(#v, #want[name], name .. " numel")
    for i = 1, #v do eq(v[i], want[name][i], name .. " element " .. i) end
  end
  h:close()
end)

return T
