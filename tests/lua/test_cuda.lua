-- emmy.cuda: cuda.open() fails with one line where there is no driver or device; with a device, buffers carry
-- every dtype in its device layout, 0xFF poisons, errors are data and closed handles raise. Where there is no GPU
-- the device tests skip, and the same runtime (contexts, reference counts, sticky errors, graph capture, timing)
-- runs against tests/fixtures/cuda_mock.c, a stand-in libcuda built here with cc.
local cuda = require "emmy.cuda"
local ref = require "emmy.ref"

local T = {}
local function test(name, fn) T[#T + 1] = { name, fn } end

local DTYPES = { "bf16", "f16", "f32", "f64", "i32", "i64", "bool" }
local BYTES = { bf16 = 2, f16 = 2, f32 = 4, f64 = 8, i32 = 4, i64 = 8, bool = 1 }

local function one_line(msg)
  check(type(msg) == "string" and #msg > 0, "an error message: " .. tostring(msg), 2)
  check(not msg:find("\n"), "one line: " .. msg, 2)
  return msg
end

local ctx_cache
local function gpu()
  if ctx_cache then return ctx_cache end
  local c, msg = cuda.open()
  if not c then skip("no GPU: " .. msg) end
  ctx_cache = c
  return c
end

test("open fails cleanly with one line", function()
  local c, msg = cuda.open()
  if c then -- a device is present: ask for one that is not
    c:close()
    c, msg = cuda.open(4096)
    check(c == nil, "cuda.open(4096) succeeded")
    check(one_line(msg):find("does not exist"), msg)
  else
    check(one_line(msg):find("CUDA driver") or msg:find("cuInit"), msg)
  end
end)

test("open with the toolkit's stub libcuda fails cleanly", function()
  local stub
  for _, p in ipairs { "/usr/local/cuda/lib64/stubs/libcuda.so", "/usr/local/cuda/targets/x86_64-linux/lib/stubs/libcuda.so" } do
    if io.open(p) then stub = p break end
  end
  if not stub then skip("no CUDA toolkit stub libcuda.so here") end
  local d = tmpdir()
  write_file(d .. "/open.lua", [[
local cuda = require "emmy.cuda"
local c, msg = cuda.open()
io.write(tostring(c), "|", tostring(msg))
]])
  local code, out, err = emmy({ d .. "/open.lua" }, { env = "EMMY_LIBCUDA=" .. stub })
  eq(code, 0, "exit status (" .. err .. ")")
  local c, msg = out:match("^(.-)|(.*)$")
  eq(c, "nil", "no context from a stub")
  check(one_line(msg):find("cuInit: CUDA_ERROR_STUB_LIBRARY"), msg)
end)

test("misuse raises", function()
  check(not pcall(cuda.open, "zero"), "a device must be a number")
  check(not pcall(cuda.has_symbol), "has_symbol needs a name")
  check(cuda.has_symbol("cuNoSuchFunction") == false, "an absent symbol")
end)

test("device: info describes the GPU", function()
  local i = gpu():info()
  check(#i.name > 0 and i.sm_count > 0 and i.smem_optin >= 48 * 1024 and i.l2 > 0, "attributes")
  check(i.cc == i.cc_major .. "." .. i.cc_minor and i.arch == "sm_" .. i.cc_major .. i.cc_minor, "cc and arch")
  check(i.driver_version >= 11000 and i.total_mem > 0 and i.dram_gbps > 0, "driver and memory")
end)

test("device: every dtype round-trips through its device layout", function()
  local ctx = gpu()
  for k, dt in ipairs(DTYPES) do
    local t = ref.random(dt, { 37, 3 }, { seed = 10 + k, lo = -1000, hi = 1000 })
    if dt == "bool" then t = ref.random(dt, { 37, 3 }, { seed = 10 + k }) end
    local b = assert(ctx:upload(t))
    eq(b:size(), 111 * BYTES[dt], dt .. " bytes")
    local back = assert(b:download(dt, { 37, 3 }))
    eq(back:dtype(), dt, "dtype")
    local x, y = t:to_table(), back:to_table()
    for i = 1, #x do eq(y[i], x[i], dt .. " element " .. i) end
    b:close()
  end
end)

test("device: a download from an offset, an upload of a string's raw bytes (emmy serve's pooled rows and mask)", function()
  local ctx = gpu()
  local t = ref.random("bf16", { 6, 4 }, { seed = 3, lo = -10, hi = 10 })
  local b = assert(ctx:upload(t))
  local row = assert(b:download("bf16", { 1, 4 }, 4 * 4 * 2)):to_table() -- row 5 (1-based), 4 bf16 a row
  local x = t:to_table()
  for i = 1, 4 do eq(row[i], x[16 + i], "row 5, element " .. i) end
  local none, why = b:download("bf16", { 1, 4 }, 6 * 4 * 2)
  check(not none and why:find("at offset 48", 1, true), tostring(why))
  check(not pcall(b.download, b, "bf16", { 1, 4 }, -2), "a negative offset raises")
  local m = assert(ctx:alloc(8))
  assert(m:upload("\1\0\1\1\0\0\0\1"))
  local back = m:download("bool", { 8 }):to_table()
  for i, v in ipairs(back) do back[i] = (v == true or v == 1) and "1" or "0" end
  eq(table.concat(back, ","), "1,0,1,1,0,0,0,1", "the bytes as bools")
  local no, why2 = m:upload(string.rep("x", 9))
  check(not no and why2:find("9 bytes", 1, true), tostring(why2))
  -- the packed mask built into the buffer (emmy serve's batches) equals ref.packed_mask's bytes, over what was there
  local mk = assert(ctx:alloc(100))
  assert(mk:fill(0xFF))
  assert(mk:upload_mask({ 3, 1, 4, 2 }))
  local want, got = ref.packed_mask({ 3, 1, 4, 2 }, "bytes"), mk:download("bool", { 100 }):to_table()
  for i = 1, 100 do
    local g = (got[i] == true or got[i] == 1) and 1 or 0
    if g ~= want:byte(i) then check(false, ("mask byte %d: %d, want %d"):format(i, g, want:byte(i))) break end
  end
  local big, why3 = mk:upload_mask({ 6, 5 })
  check(not big and why3:find("does not fit", 1, true), tostring(why3))
  check(not pcall(mk.upload_mask, mk, { 2, 0 }), "a zero length raises")
end)

test("device: page-locked host buffers: staged tensors and masks copied both ways in stream order, ranges checked", function()
  local ctx = gpu()
  local h = assert(ctx:host(256))
  eq(h:size(), 256, "its size")
  local t = ref.tensor("i64", { 1, 4 })
  for i = 1, 4 do t:set(i, 10 * i) end
  eq(h:put(8, t), 32, "i64 x 4: 32 bytes")
  local n = assert(h:mask(40, { 3, 1, 4, 2 }))
  eq(n, 100, "the mask's bytes")
  local d = assert(ctx:alloc(256))
  assert(d:write_async(h, 0, 140))
  local back = assert(ctx:host(256))
  assert(d:read_async(back, 16, 140))
  local ev = assert(ctx:event())
  assert(ev:record())
  assert(ev:sync())
  eq(table.concat(back:get("i64", { 4 }, 16 + 8):to_table(), ","), "10,20,30,40", "the tensor through the device")
  local want, got = ref.packed_mask({ 3, 1, 4, 2 }, "bytes"), back:get("bool", { 100 }, 16 + 40):to_table()
  for i = 1, 100 do
    local g = (got[i] == true or got[i] == 1) and 1 or 0
    if g ~= want:byte(i) then check(false, ("mask byte %d: %d, want %d"):format(i, g, want:byte(i))) break end
  end
  local no, why = d:write_async(h, 200, 100)
  check(not no and why:find("host offset 200", 1, true), tostring(why))
  local no2, why2 = d:read_async(back, 0, 100, 200)
  check(not no2 and why2:find("holds 256 bytes", 1, true), tostring(why2))
  local no3, why3 = h:mask(200, { 6, 5 })
  check(not no3 and why3:find("does not fit", 1, true), tostring(why3))
  local no4, why4 = h:put(250, t)
  check(not no4 and why4:find("host offset 250", 1, true), tostring(why4))
  check(not pcall(d.write_async, d, h, -1, 4), "a negative offset raises")
end)

test("device: an event pair times the work between on the GPU", function()
  local ctx = gpu()
  local a, b = assert(ctx:event()), assert(ctx:event())
  assert(a:record())
  local buf = assert(ctx:alloc(1048576))
  assert(buf:fill(0))
  assert(b:record())
  local ms = assert(b:ms_since(a))
  check(type(ms) == "number" and ms >= 0, "elapsed ms: " .. tostring(ms))
  check(tostring(a) == "emmy.cuevent", tostring(a))
end)

test("device: the bytes on the device are each dtype's layout", function()
  local ctx = gpu()
  local function as_i32(t, n) return assert(assert(ctx:upload(t)):download("i32", { n })):to_table() end
  local v = as_i32(ref.tensor("f32", { 2 }, { 1.0, -2.0 }), 2)
  eq(v[1], 0x3F800000, "f32 1.0")
  eq(v[2], -0x40000000, "f32 -2.0")
  eq(as_i32(ref.tensor("bf16", { 2 }, { 1.0, 2.0 }), 1)[1], 0x40003F80, "bf16 1.0, 2.0")
  eq(as_i32(ref.tensor("f16", { 2 }, { 1.0, 2.0 }), 1)[1], 0x40003C00, "f16 1.0, 2.0")
  eq(as_i32(ref.tensor("bool", { 4 }, { true, false, true, true }), 1)[1], 0x01010001, "bool bytes")
  v = as_i32(ref.tensor("i64", { 1 }, { -3 }), 2)
  check(v[1] == -3 and v[2] == -1, "i64 -3 little-endian")
  v = as_i32(ref.tensor("f64", { 1 }, { 1.0 }), 2)
  check(v[1] == 0 and v[2] == 0x3FF00000, "f64 1.0")
end)

test("device: fill poisons; errors are data; closed handles raise", function()
  local ctx = gpu()
  local b = assert(ctx:alloc(16))
  assert(b:fill(0xFF))
  local f = b:download("f32", { 4 }):to_table()
  for i = 1, 4 do check(f[i] ~= f[i], "f32 NaN") end
  local h = b:download("bf16", { 8 }):to_table()
  for i = 1, 8 do check(h[i] ~= h[i], "bf16 NaN") end
  eq(b:download("i32", { 4 }):get(1), -1, "i32 poison")
  eq(b:download("bool", { 16 }):get(16), 1, "bool poison")
  assert(b:fill(0))
  eq(b:download("f64", { 2 }):get(2), 0, "zeroed")
  local none, msg = b:download("f32", { 5 })
  check(none == nil and one_line(msg):find("needs 20 bytes"), tostring(msg))
  local ok, msg2 = b:upload(ref.tensor("f64", { 3 }))
  check(ok == nil and one_line(msg2):find("needs 24 bytes"), tostring(msg2))
  local huge, msg3 = ctx:alloc(2 ^ 50)
  check(huge == nil and one_line(msg3):find("^cuMemAlloc_v2%(") and msg3:find("OUT_OF_MEMORY"), tostring(msg3))
  local bad, msg4 = ctx:module("not a cubin")
  check(bad == nil and one_line(msg4):find("^cuModuleLoadDataEx: "), tostring(msg4))
  check(ctx:lost() == nil and ctx:sync(), "the context is still usable")
  b:close()
  b:close() -- idempotent
  check(tostring(b):find("closed"), tostring(b))
  local ok2, e = pcall(b.size, b)
  check(not ok2 and tostring(e):find("closed CUDA buffer"), tostring(e))
  check(not pcall(b.download, b, "f32", { 1 }), "download from a closed buffer raises")
end)

test("device: a buffer outlives the closed context handle that made it", function()
  gpu()
  local c2 = assert(cuda.open())
  local b = assert(c2:upload(ref.tensor("i32", { 2 }, { 5, 6 })))
  c2:close()
  check(tostring(c2):find("closed"), tostring(c2))
  check(not pcall(c2.alloc, c2, 4), "a closed context raises")
  eq(b:download("i32", { 2 }):get(2), 6, "the buffer still reads")
  b:close()
end)

-- The mock's tests: the device tests above and the whole GPU test file run against tests/fixtures/cuda_mock.c.
local function mock_driver()
  local d = tmpdir()
  local so = mock_driver_so(d)
  -- nvcc stand-in: the mock loads any ELF image and runs kernels by name.
  local nvcc = d .. "/nvcc"
  write_file(nvcc, "#!/bin/sh\nwhile [ $# -gt 0 ]; do [ \"$1\" = -o ] && out=$2; shift; done\nprintf '\\177ELFmock' > \"$out\"\n")
  sh("chmod +x " .. shell_quote(nvcc))
  return so, nvcc
end

test("mock driver: the device tests", function()
  local so = mock_driver()
  local code, out, err = emmy({ TESTS .. "/run.lua", "cuda/device" }, { env = "EMMY_LIBCUDA=" .. so })
  local last = lines_of(out)
  last = last[#last] or ""
  check(code == 0 and last:match("^%d+ passed, 0 failed, 0 skipped$") and not last:match("^0 passed"),
    "device tests under the mock: " .. last .. "\n" .. out .. err)
end)

test("mock driver: tests/gpu/test_cuda.lua (launches, sticky errors, a lost context, graph timing)", function()
  local so, nvcc = mock_driver()
  local code, out, err = emmy({ ROOT .. "/tests/gpu/test_cuda.lua" }, { env = "EMMY_LIBCUDA=" .. so .. " NVCC=" .. nvcc })
  local lines = lines_of(out)
  local last = lines[#lines] or ""
  check(code == 0 and last:match("^%d+ passed, 0 failed$"), "GPU test under the mock: " .. last .. "\n" .. out .. err)
  check(out:find("CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered %(last launch: k_null_write%)"),
    "the sticky error line")
end)

return T
