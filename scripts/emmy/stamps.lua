-- emmy.stamps — the clock records of a STAMP=1 persistent GEMM (src/emit_gemm_ws.c, WS_STAMP_FIELDS): reading them
-- back from the launch scratch, summing them over the CTAs that ran, and the table bench/gemm.lua --stamp prints.
-- A CTA's record is ROLES x FIELDS unsigned 32-bit counts: roles 1 and 2 the consumer warpgroups (2 is zero at
-- BM 64), role 3 the producer lane. Consumer fields: tiles, k-steps, full-barrier wait, wgmma issue to
-- wait_group 1, release, the tile's tail (wait_group 0 and the last release), epilogue, total, the tiles' heads
-- (coordinates to the K loop: the loads ahead), 0; the producer's: 0, k-steps, empty-barrier wait, load issue, 0, 0,
-- 0, total (0, 0). Role 4 is the CTA's timeline:
-- %globaltimer (ns) at its entry (low, high word) and exit (low, high), the cycles from entry to the consumers' loop,
-- the split-K reduce-scatter's stores, its wait for the peers' parts, its reads, adds and release (thread 0's sums
-- over its tiles; 0 without SPLIT_K), 0, 1.
local tbl = require "emmy.tbl"

local M = { FIELDS = 10, ROLES = 4, TOTAL = 8 } -- (TOTAL: the roles' field of their total cycles)

local function u32(x) return x % 4294967296 end

-- The CTAs' timeline from role `at` (0-based) of records of `roles` roles: {ctas, first_in, last_in, first_out,
-- last_out (ns on the GPU's global timer), prologue (mean cycles), rq, rv, rx (the split-K reduce-scatter's sums)},
-- or nil when no CTA wrote one. (The GEMM's role 4 and attention's role 5 have the same fields.)
local function timeline(v, n, roles, at)
  local t = { ctas = 0, prologue = 0 }
  for cta = 0, n - 1 do
    local b = (cta * roles + at) * M.FIELDS
    if v[b + M.FIELDS] and v[b + M.FIELDS] ~= 0 then -- (the timeline's last field: 1 once written)
      local tin = u32(v[b + 2]) * 4294967296 + u32(v[b + 1])
      local tout = u32(v[b + 4]) * 4294967296 + u32(v[b + 3])
      t.ctas = t.ctas + 1
      t.first_in = math.min(t.first_in or tin, tin)
      t.last_in = math.max(t.last_in or tin, tin)
      t.first_out = math.min(t.first_out or tout, tout)
      t.last_out = math.max(t.last_out or tout, tout)
      t.prologue = t.prologue + u32(v[b + 5])
      t.rq, t.rv, t.rx = (t.rq or 0) + u32(v[b + 6]), (t.rv or 0) + u32(v[b + 7]), (t.rx or 0) + u32(v[b + 8])
    end
  end
  if t.ctas == 0 then return nil end
  t.prologue = t.prologue / t.ctas
  return t
end

-- The first `count` roles of records of `roles` roles summed over the CTAs where they ran (field `total`, their
-- total cycles, non-zero): per role {ctas, f = {sum of each field}, max_total}.
local function sum_roles(v, n, roles, count, total)
  local out = {}
  for r = 1, count do
    out[r] = { ctas = 0, f = {}, max_total = 0 }
    for f = 1, M.FIELDS do out[r].f[f] = 0 end
  end
  for cta = 0, n - 1 do
    for r = 1, count do
      local base = (cta * roles + r - 1) * M.FIELDS
      local t = v[base + total]
      if t and t > 0 then
        local s = out[r]
        s.ctas = s.ctas + 1
        for f = 1, M.FIELDS do s.f[f] = s.f[f] + v[base + f] end
        s.max_total = math.max(s.max_total, t)
      end
    end
  end
  return out
end

-- Sums the records in v (a flat list of n CTAs' records) over the roles that ran (a non-zero total): per role
-- {ctas, f = {sum of each field}, max_total}; roles.timeline from role 4.
function M.summarize(v, n)
  local roles = sum_roles(v, n, M.ROLES, 3, M.TOTAL)
  roles.timeline = timeline(v, n, M.ROLES, 3)
  return roles
end

-- A STAMP=1 variant launched once more on its zeroed record (gpu.scratch) and the records read back by read
-- (M.read, M.read_attention): the summary, or nil, msg.
function M.run(cu, p, e, kb, bind, read)
  local gpu = require "emmy.gpu"
  local buf = gpu.scratch(kb, p)
  if not buf then return nil, "no stamp record (the variant has no scratch)" end
  buf:fill(0)
  local ok, err = gpu.launch(cu, p, e, kb, bind)
  if ok then ok, err = cu:sync() end
  if not ok then return nil, err end
  return (read or M.read)(buf, e.launch and e.launch.scratch_per_tile, e.launched_ctas)
end

-- Reads the records from the scratch buffer buf (every CTA's, as many as it holds): the summary, or nil, msg. per:
-- the launch's scratch bytes a CTA where more than a record (STREAM_K=1: its slots and flags after every CTA's
-- record), so that the CTAs are counted by it; ctas: the launch's grid, where known (the kernel's scratch is kept
-- at its largest launch's size, so a smaller grid's records are followed by its slots, not by more records).
function M.read(buf, per, ctas)
  local rec = 4 * M.FIELDS * M.ROLES
  local n = math.floor(buf:size() / ((per and per > rec) and per or rec))
  if ctas and ctas >= 1 then n = math.min(n, ctas) end
  if n < 1 then return nil, ("a stamp record needs %d bytes; the scratch holds %d"):format(4 * M.FIELDS * M.ROLES, buf:size()) end
  local t, err = buf:download("i32", { n * M.FIELDS * M.ROLES })
  if not t then return nil, err end
  return M.summarize(t:to_table(), n)
end

-- The printed summary of roles (from M.summarize) of a launch that took us µs: a line of counts and the SM clock
-- (the slowest CTA's consumer cycles over us; probe_mhz, when given, a clock probe's reading beside it), a table of
-- cycles per k-step and per tile, and a legend.
function M.render(roles, us, probe_mhz)
  local c0, pr = roles[1], roles[3]
  if c0.ctas == 0 then return "  no consumer record was written" end
  local ghz = c0.max_total / (us * 1e3)
  local out = { ("  %d CTAs; a CTA %.2f tiles, %.1f k-steps; SM clock ≈ %.2f GHz (the slowest CTA's %d cycles in %.1f µs)"):format(
    c0.ctas, c0.f[1] / c0.ctas, c0.f[2] / c0.ctas, ghz, c0.max_total, us)
    .. (probe_mhz and ("; the clock probe after it: %.0f MHz"):format(probe_mhz) or "") }
  local function per(x, n) return n > 0 and ("%.1f"):format(x / n) or "-" end
  local rows = {}
  for r = 1, 2 do
    local s = roles[r]
    if s.ctas > 0 then
      local f, steps, tiles = s.f, s.f[2], s.f[1]
      rows[#rows + 1] = { ("consumer wg%d"):format(r - 1), per(f[3], steps), per(f[4], steps), per(f[5], steps), per(f[9], tiles),
        per(f[6], tiles), per(f[7], tiles), per(f[7] / (ghz * 1e3), tiles), per(f[8], s.ctas), s.max_total,
        ("%.0f%%"):format(100 * (f[3] + f[4] + f[5]) / f[8]), ("%.0f%%"):format(100 * (f[9] + f[6] + f[7]) / f[8]) }
    end
  end
  if pr.ctas > 0 then
    local f = pr.f
    rows[#rows + 1] = { "producer", per(f[3], f[2]), per(f[4], f[2]), "-", "-", "-", "-", "-", per(f[8], pr.ctas), pr.max_total,
      ("%.0f%%"):format(100 * (f[3] + f[4]) / f[8]), "-" }
  end
  out[#out + 1] = tbl.render { header = { "role", "wait/k-step", "work/k-step", "release/k-step", "head/tile", "tail/tile",
    "epilogue/tile", "epilogue µs/tile", "total (mean)", "total (max)", "k-loop", "tile ends" }, rows = rows, align = "lrrrrrrrrrrr",
    indent = "  " }
  local tl = roles.timeline
  if tl then
    out[#out + 1] = ("  timeline (the GPU's global timer): the CTAs entered over %.2f µs and left over %.2f µs; first entry to last exit"
      .. " %.2f µs of the launch's %.1f µs; the prologue (entry to the consumers' loop) %.0f cycles a CTA"):format(
      (tl.last_in - tl.first_in) / 1e3, (tl.last_out - tl.first_out) / 1e3, (tl.last_out - tl.first_in) / 1e3, us, tl.prologue)
    if tl.rq + tl.rv > 0 and c0.f[1] > 0 then
      local tiles = c0.f[1]
      out[#out + 1] = ("  split-K reduce-scatter (thread 0): its stores %.0f cycles a tile, its wait for the peers' parts %.0f,"
        .. " its reads, adds and release %.0f; the epilogue's own stores the rest of the epilogue"):format(tl.rq / tiles, tl.rv / tiles, tl.rx / tiles)
    end
  end
  out[#out + 1] = "  cycles. consumer: wait = full barrier, work = wgmma issue to wait_group 1 (which retires the step before),"
    .. " head = the tile's coordinates to its K loop (the loads ahead), tail = wait_group 0 and the last release;"
    .. " producer: wait = empty barrier, work = expect_tx and the TMA issue; k-loop and tile ends (head, tail,"
    .. " epilogue): shares of the role's total"
  return table.concat(out, "\n")
end

-- ---- FLASH=2 attention's records (src/emit_attention_wgmma.c, FA_STAMP_FIELDS) ------------------------------------
-- A CTA's record is 5 roles x 10 unsigned: roles 1-3 the consumer warpgroups (items, steps, K wait, PINGPONG's turn,
-- S and PV issue, S wait, softmax, PV wait with the release and O's correction, epilogue, total), role 4 the
-- producer lane (items, loads, empty wait, issue, …, total in field 10), role 5 the timeline (%globaltimer entry
-- low, high, the consumers' end low, high, cycles from entry to the consumers' start, …, 1 in field 10).
local A = { FIELDS = 10, ROLES = 5 }
M.ATTENTION = A

function M.read_attention(buf)
  local rec = 4 * A.FIELDS * A.ROLES
  local n = math.floor(buf:size() / rec)
  if n < 1 then return nil, ("an attention stamp record needs %d bytes; the scratch holds %d"):format(rec, buf:size()) end
  local t, err = buf:download("i32", { n * A.FIELDS * A.ROLES })
  if not t then return nil, err end
  local v = t:to_table()
  local roles = sum_roles(v, n, A.ROLES, 4, A.FIELDS)
  roles.timeline = timeline(v, n, A.ROLES, 4)
  roles.records = n
  return roles
end

-- The printed summary of an attention launch's records (M.read_attention) that took us µs.
function M.render_attention(roles, us)
  local c0 = roles[1]
  if c0.ctas == 0 then return "  no consumer record was written" end
  local ghz = c0.max_total / (us * 1e3)
  local out = { ("  %d CTAs with records; a consumer warpgroup %.2f items, %.1f steps (a K/V tile with a next one); SM clock ≈ %.2f GHz"
    .. " (the slowest warpgroup's %d cycles in %.1f µs)"):format(c0.ctas, c0.f[1] / c0.ctas, c0.f[2] / c0.ctas, ghz, c0.max_total, us) }
  local function per(x, n) return n > 0 and ("%.0f"):format(x / n) or "-" end
  local rows = {}
  for r = 1, 3 do
    local s = roles[r]
    if s.ctas > 0 then
      local f, steps = s.f, s.f[2]
      local in_steps = f[3] + f[4] + f[5] + f[6] + f[7] + f[8]
      rows[#rows + 1] = { ("consumer wg%d"):format(r - 1), per(f[3], steps), per(f[4], steps), per(f[5], steps), per(f[6], steps),
        per(f[7], steps), per(f[8], steps), per(f[9], f[1]), per(f[10] - in_steps - f[9], f[1]), per(f[10], s.ctas), s.max_total,
        ("%.0f%%"):format(100 * in_steps / math.max(1, f[10])) }
    end
  end
  local pr = roles[4]
  if pr.ctas > 0 then
    local f = pr.f
    rows[#rows + 1] = { "producer", per(f[3], f[2]), "-", per(f[4], f[2]), "-", "-", "-", "-", "-", per(f[10], pr.ctas), pr.max_total,
      ("%.0f%%"):format(100 * (f[3] + f[4]) / math.max(1, f[10])) }
  end
  out[#out + 1] = tbl.render { header = { "role", "K wait/step", "turn/step", "S+PV issue/step", "S wait/step", "softmax/step",
    "PV wait+release/step", "epilogue/item", "rest/item", "total (mean)", "total (max)", "in steps" }, rows = rows,
    align = "lrrrrrrrrrrr", indent = "  " }
  local tl = roles.timeline
  if tl then
    out[#out + 1] = ("  timeline (the GPU's global timer): the CTAs entered over %.2f µs and the consumers ended over %.2f µs;"
      .. " first entry to last end %.2f µs of the launch's %.1f µs; entry to the consumers' start %.0f cycles a CTA"):format(
      (tl.last_in - tl.first_in) / 1e3, (tl.last_out - tl.first_out) / 1e3, (tl.last_out - tl.first_in) / 1e3, us, tl.prologue)
  end
  out[#out + 1] = "  cycles, thread 0 of each consumer warpgroup (producer: the empty barrier's wait and the loads' issue, a K/V tile);"
    .. " rest: the first tile's S and softmax, the last PV, the tiles past the range, the prologue's waits"
  return table.concat(out, "\n")
end

return M
