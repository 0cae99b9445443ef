-- emmy.profile — `emmy run … --profile`: a reproducer's kernels under Nsight Compute (ncu), emmy's beside the
-- kernels eager PyTorch and torch.compile launch for the same ops, one aligned table. ncu runs with an explicit
-- --clock-control (none by default: the clocks are left alone, as measurements here are), a kernel-name filter
-- for emmy (its kernels are k_*) and NVTX ranges for torch (tools/torchref/bench.py --nvtx-once wraps one call of
-- each backend in a range), and a curated metric set; metrics this GPU or ncu does not know are dropped and said.
-- emmy's own CUPTI timing is not used while ncu is attached (the profiled run does not bench).
local cjson = require "cjson"
local sys = require "emmy.sys"

local M = {}

-- The curated metrics: {key, ncu metric, label, unit conversion}.
M.METRICS = {
  { key = "duration_us", metric = "gpu__time_duration.sum", label = "duration (µs)", time = true },
  { key = "occupancy", metric = "sm__warps_active.avg.pct_of_peak_sustained_active", label = "achieved occupancy (%)", pct = true },
  { key = "sm", metric = "sm__throughput.avg.pct_of_peak_sustained_elapsed", label = "SM throughput (%)", pct = true },
  { key = "dram", metric = "dram__throughput.avg.pct_of_peak_sustained_elapsed", label = "DRAM throughput (%)", pct = true },
  -- (on sm_90 the hmma pipe counts wgmma too: cuBLAS's wgmma kernels read 45% here on the H200; the gmma metric
  -- is not known to ncu 2025.3)
  { key = "tensor_mma", metric = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active", label = "tensor pipe (%)", pct = true },
  { key = "fma", metric = "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active", label = "FMA pipe (%)", pct = true },
  -- the XU pipe (MUFU: ex2, rcp; conversions) and the ALU pipe (integer, compare, min/max, logic): which of attention's
  -- softmax pipes is full (issue 20)
  { key = "xu", metric = "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active", label = "XU pipe (%)", pct = true },
  { key = "alu", metric = "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active", label = "ALU pipe (%)", pct = true },
  { key = "lsu", metric = "sm__inst_executed_pipe_lsu.sum", label = "LSU instructions", sum = true },
  { key = "bank_conflicts", metric = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum", label = "shared-memory bank conflicts", sum = true },
  { key = "regs", metric = "launch__registers_per_thread", label = "registers per thread", max = true },
  -- the launch's shape (the largest over a backend's kernels): how cuBLAS's kernel is built beside emmy's — its grid,
  -- block, cluster and shared memory (nvjet_sm90_tst_64x64_64x13_2x1 against emmy's 64 x 64 tile, issue 19)
  { key = "grid", metric = "launch__grid_size", label = "grid (blocks)", max = true },
  { key = "block", metric = "launch__block_size", label = "block (threads)", max = true },
  { key = "cluster", metric = "launch__cluster_dim_x", label = "cluster x (blocks)", max = true },
  { key = "cluster_y", metric = "launch__cluster_dim_y", label = "cluster y (blocks)", max = true },
  { key = "smem_dyn", metric = "launch__shared_mem_per_block_dynamic", label = "dynamic shared memory (bytes)", max = true },
  { key = "issue", metric = "smsp__issue_active.avg.pct_of_peak_sustained_active", label = "issue slots busy (%)", pct = true },
  { key = "l2", metric = "lts__throughput.avg.pct_of_peak_sustained_elapsed", label = "L2 throughput (%)", pct = true },
  { key = "l2_bytes", metric = "lts__t_bytes.sum", label = "L2 bytes", sum = true },
  -- the bytes the crossbar delivers from L2 into the SMs (TMA's included) and that port's share of its peak: whether a
  -- 64 x 64 tile is bound by each SM's feed rather than by L2 as a whole (a 2-CTA cluster's multicast halves a shared
  -- operand's L2 reads, not the bytes each SM takes in; issue 19)
  { key = "xbar_bytes", metric = "l1tex__m_xbar2l1tex_read_bytes.sum", label = "L2 -> SM bytes", sum = true },
  { key = "xbar", metric = "l1tex__m_xbar2l1tex_read_bytes.sum.pct_of_peak_sustained_elapsed", label = "L2 -> SM port (%)", pct = true },
  -- the L1 / shared-memory unit: its busiest sub-unit's share of peak, and the shared memory's data-path share (TMA's
  -- writes and wgmma's operand reads go through it: whether a 64 x 64 tile's ring is bound by shared memory; issue 19)
  { key = "l1", metric = "l1tex__throughput.avg.pct_of_peak_sustained_active", label = "L1 / shared throughput (%)", pct = true },
  { key = "smem_data", metric = "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed", label = "shared memory LSU wavefronts (%)", pct = true },
  { key = "mem_sm", metric = "sm__memory_throughput.avg.pct_of_peak_sustained_active", label = "SM memory throughput (%)", pct = true },
}

-- Where warps wait: ncu's stall reasons, each as warps stalled for that reason per issued instruction (the
-- WarpStateStats section's ratios; they sum to the cycles between two issues of a warp). Each is a METRICS row
-- (key stall_<reason>, weighted by duration like the percentages) and M.STALL_WHY says what it means.
M.STALLS = { "long_scoreboard", "barrier", "wait", "math_pipe_throttle", "mio_throttle", "short_scoreboard", "lg_throttle",
  "membar", "sleeping", "no_instruction", "dispatch_stall", "branch_resolving", "not_selected", "selected", "drain", "misc",
  "tex_throttle", "imc_miss" }
M.STALL_WHY = {
  long_scoreboard = "waiting on global or L2 data (loads, TMA transactions behind an mbarrier)",
  barrier = "waiting at a block-wide barrier (__syncthreads) for the slowest warp",
  wait = "fixed-latency waits (dependent instructions, wgmma and mbarrier polling between tries)",
  math_pipe_throttle = "the math pipe is full (the kernel is compute-bound there)",
  mio_throttle = "the shared-memory / special-instruction queue is full",
  short_scoreboard = "waiting on shared-memory loads or special-function results",
  lg_throttle = "the global load/store queue is full (many narrow accesses)",
  membar = "memory fences",
  sleeping = "sleeping (nanosleep or a suspended mbarrier wait)",
  no_instruction = "instruction fetch (cache misses, jumps)",
  dispatch_stall = "the dispatcher", branch_resolving = "branch targets", not_selected = "another warp was picked",
  selected = "issuing", drain = "stores draining at exit", misc = "miscellaneous", tex_throttle = "the texture queue",
  imc_miss = "constant-cache misses",
}
for _, r in ipairs(M.STALLS) do
  M.METRICS[#M.METRICS + 1] = { key = "stall_" .. r, metric = ("smsp__average_warps_issue_stalled_%s_per_issue_active.ratio"):format(r),
    label = "stall: " .. r:gsub("_", " ") .. " (warps per issue)", pct = true, ratio = true, stall = r }
end

-- The stall reasons of one backend's aggregate, largest first: {{reason, value}} (only those measured).
function M.top_stalls(agg)
  local out = {}
  for _, r in ipairs(M.STALLS) do
    local v = agg and tonumber(agg["stall_" .. r])
    if v and r ~= "selected" and r ~= "not_selected" then out[#out + 1] = { reason = r, value = v } end
  end
  table.sort(out, function(a, b) return a.value > b.value end)
  return out
end

function M.ncu_path()
  local env = os.getenv("EMMY_NCU")
  if env and env ~= "" then return env end
  local p = io.popen("command -v ncu 2>/dev/null || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1")
  local s = p and p:read("*l")
  if p then p:close() end
  return s and s ~= "" and s or nil
end

local sq = require("emmy.cli").shell_quote

-- Splits one CSV line (ncu quotes every field).
local function csv_fields(line)
  local out, i = {}, 1
  while i <= #line do
    if line:sub(i, i) == '"' then
      local j, buf = i + 1, {}
      while j <= #line do
        local ch = line:sub(j, j)
        if ch == '"' then
          if line:sub(j + 1, j + 1) == '"' then buf[#buf + 1] = '"' j = j + 2
          else j = j + 1 break end
        else buf[#buf + 1] = ch j = j + 1 end
      end
      out[#out + 1] = table.concat(buf)
      i = j + 1 -- (skip the comma)
    else
      local j = line:find(",", i, true) or (#line + 1)
      out[#out + 1] = line:sub(i, j - 1)
      i = j + 1
    end
  end
  return out
end
M.csv_fields = csv_fields

local TIME_US = { nsecond = 1e-3, usecond = 1, msecond = 1e3, second = 1e6 }

-- Parses ncu --csv --page raw output: the header row (ID, …, Kernel Name, …, metrics), the units row, one row per
-- kernel. Returns {{name, [key] = value in the table's units}} with times in µs.
function M.parse_csv(text)
  local lines = {}
  for l in text:gmatch("[^\r\n]+") do if l:sub(1, 1) == '"' then lines[#lines + 1] = l end end
  if #lines < 2 then return {} end
  local header = csv_fields(lines[1])
  local col = {}
  for i, h in ipairs(header) do col[h] = i end
  -- the units row (its ID cell is empty) is there in --page raw; without it, every metric is in its base unit
  local second = csv_fields(lines[2])
  local has_units = (second[col["ID"] or 1] or "") == ""
  local units = has_units and second or {}
  local rows = {}
  for r = has_units and 3 or 2, #lines do
    local f = csv_fields(lines[r])
    local row = { name = f[col["Kernel Name"] or 0] or "?" }
    for _, m in ipairs(M.METRICS) do
      local i = col[m.metric]
      local v = i and tonumber((f[i] or ""):gsub(",", ""), 10)
      if v and m.time then v = v * (TIME_US[units[i]] or 1e-3) end
      row[m.key] = v
    end
    rows[#rows + 1] = row
  end
  return rows
end

-- Aggregates a backend's kernels: durations and counts summed, percentages weighted by duration, registers max.
function M.aggregate(rows)
  local out = { kernels = #rows }
  local total = 0
  for _, r in ipairs(rows) do total = total + (r.duration_us or 0) end
  for _, m in ipairs(M.METRICS) do
    local acc, wsum, any = 0, 0, false
    for _, r in ipairs(rows) do
      local v = r[m.key]
      if v then
        any = true
        if m.pct then
          local w = total > 0 and (r.duration_us or 0) or 1
          acc, wsum = acc + v * w, wsum + w
        elseif m.max then acc = math.max(acc, v)
        else acc = acc + v end
      end
    end
    if any then out[m.key] = m.pct and (wsum > 0 and acc / wsum or nil) or acc end
  end
  return out
end

-- Runs cmd under ncu with the metrics; drops metrics ncu does not know and runs again once. Returns csv text,
-- dropped metric names, or nil and the one-line reason (counters not permitted, ncu missing or failing).
function M.ncu(cmd, filter, opts)
  local ncu = M.ncu_path()
  if not ncu then return nil, "ncu (Nsight Compute) not found: set EMMY_NCU to its path" end
  local metrics = {}
  for _, m in ipairs(M.METRICS) do metrics[#metrics + 1] = m.metric end
  local dropped = {}
  for _ = 1, 2 do
    local full = ("%s --clock-control %s --metrics %s --csv --page raw %s %s 2>&1"):format(sq(ncu), opts.clock_control or "none",
      table.concat(metrics, ","), filter, cmd)
    local p = io.popen(full)
    local out = p:read("*a")
    p:close()
    if out:find("ERR_NVGPUCTRPERM", 1, true) then
      return nil, "ncu: this user may not read the GPU's performance counters (ERR_NVGPUCTRPERM)"
    end
    local unknown = {}
    for name in out:gmatch("Failed to find metric[s]? ([%w_%.]+)") do unknown[name] = true end
    if next(unknown) == nil then
      if not out:find('"Kernel Name"', 1, true) then
        local err = out:match("==ERROR==[^\n]*") or out:match("==PROF==[^\n]*") or out:sub(-200)
        return nil, "ncu: no kernel profiled: " .. tostring(err):gsub("%s+", " ")
      end
      return out, dropped
    end
    local keep = {}
    for _, m in ipairs(metrics) do if unknown[m] then dropped[#dropped + 1] = m else keep[#keep + 1] = m end end
    metrics = keep
  end
  return nil, "ncu: metrics unknown to this ncu or GPU: " .. table.concat(dropped, ", ")
end

-- The profile of reproducer file repro (bound by binds, a list of "NAME=N"): emmy's kernels, then eager and
-- torch.compile on the inputs value_of gives. Returns {backends = {emmy = agg, eager = agg, tcompile = agg},
-- kernels = {backend = rows}, csv = {backend = text}, notes = {...}}.
function M.run(a)
  local res = { backends = {}, kernels = {}, csv = {}, notes = {}, clock_control = a.clock_control or "none" }
  local binds = {}
  for k, v in pairs(a.bind or {}) do binds[#binds + 1] = ("%s=%d"):format(k, v) end
  table.sort(binds)
  local exe = sys.realpath("/proc/self/exe")
  local bargs = {}
  for _, b in ipairs(binds) do bargs[#bargs + 1] = "--bind " .. b end
  io.stderr:write("  profile: emmy's kernels under ncu\n")
  local csv, dropped = M.ncu(("env EMMY_PROFILED=1 EMMY_HANG_S=0 %s run --ir %s %s"):format(sq(exe), sq(a.repro), table.concat(bargs, " ")),
    "--kernel-name regex:^k_", a)
  if not csv then
    res.notes[#res.notes + 1] = dropped
    return res
  end
  if #dropped > 0 then res.notes[#res.notes + 1] = "not measured here: " .. table.concat(dropped, ", ") end
  res.csv.emmy = csv
  res.kernels.emmy = M.parse_csv(csv)
  res.backends.emmy = M.aggregate(res.kernels.emmy)
  -- torch: each backend once inside an NVTX range, the inputs written as for emmy.bench's torch rows
  local bench = require "emmy.bench"
  local d = os.tmpname()
  os.remove(d)
  local okw, werr = bench.write_job(d, a.graph, a.value_of)
  if not okw then
    res.notes[#res.notes + 1] = "torch: " .. werr
    return res
  end
  local py = bench.python()
  for _, b in ipairs { { "eager", "eager" }, { "tcompile", "compile" } } do
    io.stderr:write(("  profile: %s under ncu\n"):format(b[1]))
    local tcsv, terr = M.ncu(("%s %s/tools/torchref/bench.py %s/g.torch.json --inputs %s/in --backends %s --nvtx-once %s")
      :format(py, EMMY_HOME, d, d, b[2], table.concat(bargs, " ")), ("--nvtx --nvtx-include emmy_profile_%s/"):format(b[2]), a)
    if tcsv then
      res.csv[b[1]] = tcsv
      res.kernels[b[1]] = M.parse_csv(tcsv)
      res.backends[b[1]] = M.aggregate(res.kernels[b[1]])
    else
      res.notes[#res.notes + 1] = b[1] .. ": " .. tostring(terr)
    end
  end
  os.execute("rm -rf " .. sq(d))
  return res
end

-- Source-level stall sampling (`emmy run … --profile-sass N`, issue 19's "measure the main loop"): emmy's kernels under
-- ncu's SourceCounters section (the warp-state PC sampling), the report read back per SASS instruction (`ncu -i REP
-- --page source --csv --print-source sass`). M.parse_sass reads that CSV whatever its column set: a table begins at
-- a header row that names a "Source" column and a "Warp Stall Sampling" one; its rows are instructions. Returns
-- {{kernel = name or "#i", rows = {{addr, sass, samples, reasons = {name = n}}}, total = samples}}.
function M.parse_sass(text)
  local tables, cur, kernel = {}, nil, nil
  for line in text:gmatch("[^\r\n]+") do
    local name = line:match("^%s*Kernel Name:?%s*\"?([^\"]+)") or line:match('^"Kernel Name","([^"]+)"')
    if name then kernel = name end
    if line:sub(1, 1) == '"' then
      local f = csv_fields(line)
      local src, samp, addr = nil, nil, nil
      for i, h in ipairs(f) do
        if h == "Source" then src = i end
        if h == "Address" then addr = i end
        if not samp and h:find("Warp Stall Sampling", 1, true) and not h:find("Not%-issued") then samp = i end
      end
      if src and samp then
        local reasons = {}
        for i, h in ipairs(f) do
          -- (ncu also writes each reason's "(Not Issued)" twin: the samples without an issue, a subset; left out)
          if i ~= samp and (h:lower():find("stall", 1, true) or h:find("^smsp__pcsamp")) and not h:find("Warp Stall Sampling", 1, true)
            and not h:lower():find("not.issued") then
            reasons[#reasons + 1] = { i = i, name = h }
          end
        end
        cur = { kernel = kernel or ("#" .. (#tables + 1)), rows = {}, total = 0, src = src, samp = samp, addr = addr, reasons = reasons }
        tables[#tables + 1] = cur
        kernel = nil
      elseif cur then
        local n = tonumber((f[cur.samp] or ""):gsub(",", ""), 10)
        if n then
          local row = { addr = cur.addr and f[cur.addr] or "", sass = f[cur.src] or "", samples = n, reasons = {} }
          for _, r in ipairs(cur.reasons) do
            local v = tonumber((f[r.i] or ""):gsub(",", ""), 10)
            if v and v > 0 then row.reasons[r.name] = v end
          end
          cur.rows[#cur.rows + 1] = row
          cur.total = cur.total + n
        end
      end
    end
  end
  for _, t in ipairs(tables) do t.src, t.samp, t.addr, t.reasons = nil, nil, nil, nil end
  return tables
end

-- A SASS line's opcode without predicate and modifiers' operands ("@P0 HGMMA.64x64x16.F32.BF16 R24, …" -> "HGMMA").
local function opcode(sass)
  local s = sass:gsub("^%s+", ""):gsub("^@!?U?P%w+%s+", "")
  return (s:match("^([%u%d_]+)") or "?")
end
M.opcode = opcode

-- Prints each kernel's stall samples: by opcode, then the top instructions with their reasons.
function M.print_sass(tables, top)
  local tbl = require "emmy.tbl"
  for _, t in ipairs(tables) do
    if t.total > 0 then
      print(("\nstall samples of %s: %d over %d SASS instructions"):format(t.kernel, t.total, #t.rows))
      local by, order = {}, {}
      for _, r in ipairs(t.rows) do
        local op = opcode(r.sass)
        if not by[op] then by[op] = { n = 0, count = 0 } order[#order + 1] = op end
        by[op].n, by[op].count = by[op].n + r.samples, by[op].count + 1
      end
      table.sort(order, function(a, b) return by[a].n > by[b].n end)
      local rows = {}
      for i = 1, math.min(#order, 12) do
        local op = order[i]
        rows[#rows + 1] = { op, tostring(by[op].count), tostring(by[op].n), ("%.1f"):format(100 * by[op].n / t.total) }
      end
      tbl.print { header = { "opcode", "instructions", "samples", "%" }, rows = rows, align = "lrrr" }
      local sorted = {}
      for _, r in ipairs(t.rows) do sorted[#sorted + 1] = r end
      table.sort(sorted, function(a, b) return a.samples > b.samples end)
      rows = {}
      for i = 1, math.min(#sorted, top) do
        local r = sorted[i]
        local rs = {}
        for name, v in pairs(r.reasons) do rs[#rs + 1] = { name = name, v = v } end
        table.sort(rs, function(a, b) return a.v > b.v end)
        local why = {}
        for j = 1, math.min(#rs, 3) do why[#why + 1] = ("%s %d"):format(rs[j].name, rs[j].v) end
        rows[#rows + 1] = { r.addr, ("%.1f"):format(100 * r.samples / t.total), r.sass:sub(1, 60), table.concat(why, ", ") }
      end
      tbl.print { header = { "address", "%", "SASS", "reasons (samples)" }, rows = rows, align = "lrll" }
    end
  end
end

-- Runs emmy's kernels of reproducer repro under ncu's source counters and reads them back per SASS instruction.
-- Returns the tables (M.parse_sass) and the raw CSV, or nil and a one-line reason.
function M.sass(a)
  local ncu = M.ncu_path()
  if not ncu then return nil, "ncu (Nsight Compute) not found: set EMMY_NCU to its path" end
  local binds = {}
  for k, v in pairs(a.bind or {}) do binds[#binds + 1] = ("--bind %s=%d"):format(k, v) end
  table.sort(binds)
  local rep = os.tmpname()
  local exe = sys.realpath("/proc/self/exe")
  local cmd = ("%s --clock-control %s --section SourceCounters --section WarpStateStats --kernel-name regex:^k_ -f -o %s env EMMY_PROFILED=1 EMMY_HANG_S=0 %s run --ir %s %s 2>&1")
    :format(sq(ncu), a.clock_control or "none", sq(rep), sq(exe), sq(a.repro), table.concat(binds, " "))
  local p = io.popen(cmd)
  local out = p:read("*a")
  p:close()
  if out:find("ERR_NVGPUCTRPERM", 1, true) then return nil, "ncu: this user may not read the GPU's performance counters (ERR_NVGPUCTRPERM)" end
  local p2 = io.popen(("%s -i %s.ncu-rep --page source --csv --print-source sass 2>&1"):format(sq(ncu), sq(rep)))
  local csv = p2:read("*a")
  p2:close()
  os.remove(rep .. ".ncu-rep")
  os.remove(rep)
  local tables = M.parse_sass(csv)
  if #tables == 0 then
    return nil, "ncu: no per-instruction table read back: " .. (csv:sub(1, 300):gsub("%s+", " ")), csv
  end
  return tables, csv
end

function M.print(res)
  if next(res.backends) == nil then
    print("\nprofile: nothing measured")
    for _, n in ipairs(res.notes) do print("note: " .. n) end
    return
  end
  local tbl = require "emmy.tbl"
  local cols = { "emmy", "eager", "tcompile" }
  local rows = { { "kernels", tostring(res.backends.emmy and res.backends.emmy.kernels or "-"),
    tostring(res.backends.eager and res.backends.eager.kernels or "-"), tostring(res.backends.tcompile and res.backends.tcompile.kernels or "-") } }
  for _, m in ipairs(M.METRICS) do
    local row, big = { m.label }, false
    for _, c in ipairs(cols) do
      local v = res.backends[c] and res.backends[c][m.key]
      big = big or (v or 0) >= 0.05
      row[#row + 1] = v and ((m.sum and "%.0f" or m.ratio and "%.2f" or "%.1f"):format(v)) or "-"
    end
    if not m.stall or big then rows[#rows + 1] = row end -- (stall reasons under 0.05 everywhere: left out)
  end
  print(("\nNsight Compute, side by side (--clock-control %s; per backend: durations and counts summed over its kernels, percentages weighted by duration)"):format(res.clock_control))
  tbl.print { header = { "metric", "emmy", "eager", "tcompile" }, rows = rows, align = "lrrr" }
  for _, n in ipairs(res.notes) do print("note: " .. n) end
end

-- Writes 61_ncu_metrics.csv (each backend's raw ncu CSV under a "# backend" line) and 61_ncu_metrics.json.
function M.write(dir, res)
  local write = require("emmy.dump").write_file
  assert(sys.mkdir_p(dir))
  local parts = {}
  for _, b in ipairs { "emmy", "eager", "tcompile" } do
    if res.csv[b] then parts[#parts + 1] = "# " .. b .. "\n" .. res.csv[b] end
  end
  write(dir .. "/61_ncu_metrics.csv", table.concat(parts, "\n"))
  write(dir .. "/61_ncu_metrics.json", cjson.encode { clock_control = res.clock_control, backends = res.backends,
    kernels = res.kernels, notes = res.notes })
end

return M
