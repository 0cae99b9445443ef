-- op_cases.lua — every op case of tests/lua/graphs.lua on the GPU, and wide row graphs (a row of 1024-4096 columns:
-- the row kernels' warp reduction, unrolled rows and chunked columns at sizes the tiny cases do not reach), each as
-- `emmy run --ir CASE.torch.json --sweep N` (the chosen knobs and N-1 random legal ones, checked against the CPU
-- reference). Usage: emmy tests/gpu/op_cases.lua [SUBSTR…] (only the cases whose name contains one); the graphs and
-- logs go to $OUT (default /tmp/emmy_op_cases); $EMMY_BIN is the emmy to run (default ./emmy); $SWEEP (default 8).
package.path = EMMY_HOME .. "/tests/lua/?.lua;" .. package.path
local graphs, gj = require "graphs", require "emmy.graphjson"
local node = graphs.node

local OUT = os.getenv("OUT") or "/tmp/emmy_op_cases"
local BIN = os.getenv("EMMY_BIN") or "./emmy"
local SWEEP = tonumber(os.getenv("SWEEP") or "") or 8
os.execute("mkdir -p '" .. OUT .. "'")

local function inp(g, name, dt, shape) return assert(g:input(name, dt, shape, { kind = "activation" })) end
local cases = {}
for _, c in ipairs(graphs.op_cases) do cases[#cases + 1] = c end
-- wide rows: softmax in bf16 and f32, F.normalize (a row kernel with a broadcast divide, chunked by default)
for _, w in ipairs { { "softmax_wide_bf16", "bf16", 4096 }, { "softmax_wide_f32", "f32", 2048 } } do
  cases[#cases + 1] = { name = w[1], build = function(g)
    return node(g, "aten._softmax.default", { self = inp(g, "x", w[2], { 37, w[3] }), dim = -1, half_to_float = false })
  end }
end
for _, w in ipairs { { "normalize_wide_bf16", "bf16", 1024 }, { "normalize_wide_f32", "f32", 2048 } } do
  cases[#cases + 1] = { name = w[1], build = function(g)
    local x = inp(g, "x", w[2], { 37, w[3] })
    local n = node(g, "aten.linalg_vector_norm.default", { self = x, dim = { -1 }, keepdim = true })
    local c = node(g, "aten.clamp_min.default", { self = n, min = 1e-12 })
    return node(g, "aten.div.Tensor", { self = x, other = node(g, "aten.expand.default", { self = c, size = { 37, w[3] } }) })
  end }
end

local function selected(name)
  if #arg == 0 then return true end
  for _, a in ipairs(arg) do if name:find(a, 1, true) then return true end end
  return false
end

local passed, failed = 0, {}
for _, c in ipairs(cases) do
  if selected(c.name) then
    local g = graphs.case_graph(c)
    local file, log = OUT .. "/" .. c.name .. ".torch.json", OUT .. "/" .. c.name .. ".log"
    assert(gj.write(g, file, { sync = false }))
    local ok = os.execute(("%s run --ir '%s' --sweep %d > '%s' 2>&1"):format(BIN, file, SWEEP, log))
    ok = ok == true or ok == 0
    print(("%s %s"):format(ok and "ok  " or "FAIL", c.name))
    if ok then passed = passed + 1 else
      failed[#failed + 1] = c.name
      -- the log's last lines through this stream (a shell's tail wrote past the runner's capture)
      local f, lines = io.open(log), {}
      for l in (f and f:read("*a") or ""):gmatch("[^\n]+") do lines[#lines + 1] = l end
      if f then f:close() end
      for i = math.max(1, #lines - 7), #lines do print("    " .. lines[i]) end
    end
  end
end
if passed + #failed == 0 then
  io.stderr:write("op_cases: no op case matches " .. table.concat(arg, " ") .. "\n")
  os.exit(2)
end
if #failed > 0 then
  print(("FAIL: %d of %d op cases (%s)"):format(#failed, passed + #failed, table.concat(failed, ", ")))
  os.exit(1)
end
print(("PASS: %d op cases, each with a sweep of %d"):format(passed, SWEEP))
