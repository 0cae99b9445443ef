-- bench/sass.lua — a kernel's inner loop in SASS, counted per iteration, without a GPU: each setting's kernel compiled
-- by NVRTC (`emmy compile GRAPH --nvrtc`), disassembled by nvdisasm, its innermost loop that issues wgmma found (the
-- back-edge of smallest span with HGMMA and a softmax's exponentials (32 MUFU or more) in it, or the one with --hgmma N
-- HGMMA) and its instructions counted by
-- opcode, blocks behind a forward branch that mask scores (20 or more FSEL/ISETP) left out. Where a change of emitted
-- text moves the instruction mix (descriptors in uniform registers, sums by the tensor cores, …), this shows it
-- before any device time is spent.
--   ./emmy bench/sass.lua GRAPH [--env "EMMY_NONE=1;EMMY_UNIFORM_KV=1"] [--kernel SUBSTR] [--hgmma N] [--per K]
--                        [--nvdisasm PATH] [--top N] [--with "--layer 0 --dynamic seq_len@x:1"]
-- GRAPH: a graph file (bench/attention.lua --graphs DIR --dry-run writes one a case) or a model (--with: more of
-- emmy compile's arguments, --kernel: the one kernel); --env: settings
-- separated by ';', each NAME=VALUE … (EMMY_KNOBS=… pins a variant); --per K: the loop's iterations hold K key tiles
-- (FLASH=2's two a trip: the default 2); nvdisasm: --nvdisasm, else $EMMY_NVDISASM, else nvdisasm on the PATH.
-- nvdisasm of CUDA 11.8 (Debian bookworm's non-free nvidia-cuda-toolkit: `apt-get download nvidia-cuda-toolkit`,
-- `dpkg -x`) reads NVRTC 13.0's sm_90a cubins once their ELF header has the older layout (OS/ABI 0x33, ABI version 7,
-- flags 0x005a055a), which this script writes into a copy (docs/performance.md, fifty-seventh session).
local cli = require "emmy.cli"
local sys = require "emmy.sys"
local tbl = require "emmy.tbl"

local CMD = "bench/sass.lua"
local opts, pos = cli.parse(arg, { flags = { ["--env"] = { kind = "string", default = "EMMY_NONE=1" },
  ["--kernel"] = { kind = "string" }, ["--hgmma"] = { kind = "int", min = 1 }, ["--per"] = { kind = "int", default = 2, min = 1 },
  ["--nvdisasm"] = { kind = "string" }, ["--top"] = { kind = "int", default = 12, min = 1 }, ["--with"] = { kind = "string", default = "" } },
  positional = { "graph" } }, CMD)
local graph = pos.graph or cli.usage("%s: give the graph or model to compile (usage: emmy help %s)", CMD, CMD)
local nvdisasm = opts.nvdisasm or os.getenv("EMMY_NVDISASM") or "nvdisasm"
local quote = cli.shell_quote

-- The cubin's copy with the older ELF header nvdisasm 11.8 reads (sm_90).
local function patched(path)
  local f = assert(io.open(path, "rb"))
  local b = f:read("*a")
  f:close()
  if #b < 52 or b:sub(1, 4) ~= "\127ELF" then error(("%s: %s is not an ELF file"):format(CMD, path), 0) end
  b = b:sub(1, 7) .. string.char(0x33, 7) .. b:sub(10, 48) .. string.char(0x5a, 0x05, 0x5a, 0x00) .. b:sub(53)
  local out = path .. ".sm90"
  f = assert(io.open(out, "wb"))
  f:write(b)
  f:close()
  return out
end

-- The instructions of SASS text: {line, pred, op} and the labels' lines.
local function parse(text)
  local ins, lab, n = {}, {}, 0
  for l in (text .. "\n"):gmatch("(.-)\n") do
    n = n + 1
    local name = l:match("^(%.L_x_%d+):")
    if name then lab[name] = n end
    local rest = l:match("^%s+/%*%x+%*/%s+(.*)")
    if rest then
      local pred = rest:match("^@%S+%s+")
      local op = (pred and rest:sub(#pred + 1) or rest):match("^([A-Z][A-Z0-9_]*)")
      if op then ins[#ins + 1] = { line = n, pred = pred ~= nil, op = op, target = rest:match("%((%.L_x_%d+)%)") } end
    end
  end
  return ins, lab
end

-- The inner loop's instructions (the path without masking blocks) and its line span: of the back-edges whose span
-- holds HGMMA and 32 MUFU or more (--hgmma N: exactly N HGMMA), those with no other such span inside, the one with
-- the most HGMMA (then the shortest).
local function inner(ins, lab, want)
  local loops, best = {}, nil
  for _, x in ipairs(ins) do
    local t = x.op == "BRA" and x.pred and x.target and lab[x.target] -- (a loop's conditional back-edge; the spin loops of
    if t and t < x.line then                                         -- the barrier waits jump back unconditionally)
      local h, mufu = 0, 0
      for _, y in ipairs(ins) do
        if y.line > t and y.line <= x.line and y.op == "HGMMA" then h = h + 1 end
        if y.line > t and y.line <= x.line and y.op == "MUFU" then mufu = mufu + 1 end
      end
      if (want and h == want) or (not want and h > 0 and mufu >= 32) then loops[#loops + 1] = { t, x.line, h } end
    end
  end
  for _, l in ipairs(loops) do
    local nested = false
    for _, m in ipairs(loops) do
      if m ~= l and m[1] >= l[1] and m[2] <= l[2] and (m[1] > l[1] or m[2] < l[2]) then nested = true end
    end
    if not nested and (not best or l[3] > best[3] or (l[3] == best[3] and l[2] - l[1] < best[2] - best[1])) then best = l end
  end
  if not best then return nil end
  local body, skip = {}, {}
  for _, y in ipairs(ins) do if y.line > best[1] and y.line <= best[2] then body[#body + 1] = y end end
  for _, y in ipairs(body) do
    local tt = y.op == "BRA" and y.pred and y.target and lab[y.target]
    if tt and tt > y.line and tt <= best[2] then
      local m = 0
      for _, z in ipairs(body) do if z.line > y.line and z.line < tt and (z.op == "FSEL" or z.op == "ISETP") then m = m + 1 end end
      if m >= 20 then for _, z in ipairs(body) do if z.line > y.line and z.line < tt then skip[z.line] = true end end end
    end
  end
  local path = {}
  for _, y in ipairs(body) do if not skip[y.line] then path[#path + 1] = y end end
  return path, best
end

local NOT_VECTOR = { HGMMA = true, WARPGROUP = true, BRA = true, SYNCS = true, WARPSYNC = true }
local rows = {}
for setting in (opts.env .. ";"):gmatch("([^;]*);") do
  setting = setting:match("^%s*(.-)%s*$")
  if setting ~= "" then
    local dir = os.tmpname()
    os.remove(dir)
    cli.must(sys.mkdir_p(dir))
    local env = {}
    for kv in setting:gmatch("%S+") do env[#env + 1] = quote(kv) end
    local with = {}
    for w in opts.with:gmatch("%S+") do with[#with + 1] = quote(w) end
    local cmd = ("env %s EMMY_CUBIN_CACHE=%s %s compile %s %s --nvrtc%s > %s 2>&1"):format(table.concat(env, " "), quote(dir),
      quote(EMMY_HOME .. "/emmy"), quote(graph), table.concat(with, " "), opts.kernel and (" --kernel " .. quote(opts.kernel)) or "",
      quote(dir .. "/compile.log"))
    if os.execute(cmd) ~= 0 then error(("%s: %s: emmy compile failed (%s/compile.log)"):format(CMD, setting, dir), 0) end
    local lf = io.open(dir .. "/compile.log")
    local log = lf and lf:read("*a") or ""
    if lf then lf:close() end
    local regs, spills = log:match("%sok%s+(%d+)%s+(%d+)%s")
    local cubins = {}
    for f in io.popen("ls " .. quote(dir) .. "/*.cubin 2>/dev/null"):lines() do cubins[#cubins + 1] = f end
    if #cubins ~= 1 then error(("%s: %s: %d cubins in %s (one kernel: --kernel SUBSTR)"):format(CMD, setting, #cubins, dir), 0) end
    local p = io.popen(("%s -c %s 2>&1"):format(quote(nvdisasm), quote(patched(cubins[1]))))
    local text = p:read("*a")
    p:close()
    local ins, lab = parse(text)
    if #ins == 0 then error(("%s: %s: nvdisasm gave no instructions: %s"):format(CMD, setting, text:sub(1, 200)), 0) end
    local path, span = inner(ins, lab, opts.hgmma)
    if not path then error(("%s: %s: no loop with %s HGMMA"):format(CMD, setting, opts.hgmma or "any"), 0) end
    local count, vec = {}, 0
    for _, y in ipairs(path) do
      count[y.op] = (count[y.op] or 0) + 1
      if not NOT_VECTOR[y.op] and not y.op:match("^U") then vec = vec + 1 end
    end
    local ops = {}
    for op, n in pairs(count) do ops[#ops + 1] = { op, n } end
    table.sort(ops, function(a, b) return a[2] > b[2] or (a[2] == b[2] and a[1] < b[1]) end)
    local top = {}
    for i = 1, math.min(opts.top, #ops) do top[i] = ("%s %g"):format(ops[i][1], ops[i][2] / opts.per) end
    rows[#rows + 1] = { setting, regs and (regs .. " / " .. spills) or "?", ("%d-%d"):format(span[1], span[2]), ("%.1f"):format(#path / opts.per),
      ("%.1f"):format(vec / opts.per), table.concat(top, ", ") }
  end
end
print(("%s: the innermost wgmma loop of %s, instructions a key tile (the loop's trip / %d)"):format(CMD, graph, opts.per))
print(tbl.render({ header = { "setting", "regs / spills", "lines", "instr", "non-uniform", "top opcodes" }, rows = rows, align = "lrlrrl" }))
