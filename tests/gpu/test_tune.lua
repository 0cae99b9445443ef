-- GPU: emmy tune end to end on Qwen3 layer 0 (tests/gpu/run.sh runs it; `emmy tests/gpu/test_tune.lua [PART...]`
-- runs some of the parts: clean, plant, kill, exhaustive). Each part prints its numbers and one ok/FAIL line;
-- the last line is PASS/FAIL with the count.
--   clean:      a clean tune (every structural fork) finishes in under 5 minutes, every kernel has a correct pick,
--               the stats are the DB's
--   plant:      a test-only rule file (tests/fixtures/plant/) plants faulting, hanging and wrong variants: the
--               tune finishes, each is a row with its status and error, no pick is a planted variant, and each
--               pick is within 10% of the clean tune's
--   kill:       kill -9 in the middle of a tune, the same command again: nothing measured is re-benched and the
--               DB ends with the row count of an uninterrupted run of the same search (--max-candidates 6: the
--               first batch is the prior's order alone, so the search does not depend on the times measured)
--   exhaustive: four kernels' picks against a much larger search of the same kernel in the same DB context
--   structural: --structural all: every structural fork formed, its distinct kernels tuned (patience 4), each fork
--               priced by the sum of its kernels' best µs; the stats are the DB's and the default fork is priced
--   gpus2:      (on a host with two GPUs) the clean tune with --gpus 2: both workers tune kernels, one DB, the
--               stats are the DB's, every pick within 10% of the one-GPU clean tune's when that ran
local sys = require "emmy.sys"
local sqlite = require "emmy.sqlite"
local cjson = require "cjson"
local H = dofile(EMMY_HOME .. "/tests/gpu/harness.lua")
local EXE, OUT, T, L0 = H.EXE, H.OUT, H.T, H.L0
local ROOT = EMMY_HOME
local want, wanted, result = H.want, H.wanted, H.result

local sh = require("emmy.cli").sh

local function tune(env, args, log) return H.run(("env %s %s tune %s"):format(env, EXE, args), log) end

local function read_json(path)
  local f = io.open(path)
  if not f then return nil end
  local t = cjson.decode(f:read("*a"))
  f:close()
  return t
end

local function count(db, sql, ...)
  local h = assert(sqlite.open(db))
  local r = assert(h:rows(sql, ...))
  h:close()
  return r
end

local function stat_line(out) return out:match("\n(done: [^\n]*)") or out:match("\n(stopped: [^\n]*)") or "(no stats line)" end

-- clean -----------------------------------------------------------------------------------------------------------
local clean
if wanted("clean") or wanted("plant") or wanted("exhaustive") then
  local env = ("EMMY_TUNE_DB=%s/clean.db EMMY_ONLINE_FILE=%s/clean.json"):format(T, T)
  local code, out, wall = tune(env, L0 .. " --clean --dump-dir " .. T .. "/clean", OUT .. "/tune_clean.log")
  clean = read_json(T .. "/clean/tune.json")
  os.execute(("cp %s/clean/tune.json %s/tune_clean.json 2>/dev/null"):format(T, OUT))
  print(stat_line(out))
  local ok = code == 0 and clean ~= nil and wall < 300
  local bad = {}
  if clean then
    for _, k in ipairs(clean.kernels) do
      if not k.best_us then bad[#bad + 1] = k.name end
      print(("  %-26s %5d candidates %4d measured  best %7.1f us  %s"):format(k.name, k.candidates, k.measured,
        k.best_us or 0, k.best_knobs or "-"))
    end
    local rows = count(T .. "/clean.db", "SELECT COUNT(*) AS n FROM measurements WHERE run_id = ?", clean.run_id)[1].n
    ok = ok and #bad == 0 and rows == clean.benched
    result(ok, "clean", ("%.0f s wall (limit 300), %d benched = %d DB rows, %d kernels without a pick%s"):format(wall,
      clean.benched, rows, #bad, #bad > 0 and (" (" .. table.concat(bad, ", ") .. ")") or ""))
  else
    result(false, "clean", "exit " .. code .. ": " .. out:sub(-600))
  end
end

-- plant -----------------------------------------------------------------------------------------------------------
if wanted("plant") then
  local rules = T .. "/rules"
  assert(sys.mkdir_p(rules))
  assert(sh(("cp %s/rules/tile/*.lua %s/ && cp %s/tests/fixtures/plant/900_plant.lua %s/"):format(ROOT, rules, ROOT, rules)) == 0)
  local env = ("EMMY_RULES=%s EMMY_TUNE_DB=%s/plant.db EMMY_ONLINE_FILE=%s/plant.json"):format(rules, T, T)
  local code, out, wall = tune(env, L0 .. " --clean --structural default --timeout-ms 8000 --dump-dir " .. T .. "/plant",
    OUT .. "/tune_plant.log")
  local pj = read_json(T .. "/plant/tune.json")
  print(stat_line(out))
  local ok, why = code == 0 and pj ~= nil, {}
  if not ok then why[#why + 1] = "exit " .. code .. ": " .. out:sub(-400) end
  local expect = { ["PLANT=1"] = "launch_fail", ["PLANT=2"] = "timeout", ["PLANT=3"] = "wrong" }
  local seen = {}
  for _, r in ipairs(count(T .. "/plant.db", [[SELECT v.knobs, m.status, m.error, k.name FROM measurements m
      JOIN variants v ON v.id = m.variant_id JOIN kernels k ON k.hash = v.kernel_hash WHERE v.knobs LIKE '%PLANT=%']])) do
    local p = r.knobs:match("PLANT=%d")
    if expect[p] then
      seen[p] = (seen[p] or 0) + 1
      print(("  %-26s %s -> %-11s %s"):format(r.name, p, r.status, tostring(r.error):gsub("\n", " "):sub(1, 110)))
      if r.status ~= expect[p] or not r.error or r.error == "" then
        ok = false
        why[#why + 1] = ("%s %s is %s (want %s with an error)"):format(r.name, p, r.status, expect[p])
      end
    end
  end
  for p, st in pairs(expect) do
    if not seen[p] then ok = false why[#why + 1] = ("no %s row (%s)"):format(st, p) end
  end
  if pj and clean then
    local by = {}
    for _, k in ipairs(clean.kernels) do by[k.name] = k end
    for _, k in ipairs(pj.kernels) do
      local c = by[k.name]
      local planted = k.best_knobs and k.best_knobs:match("PLANT=[123]")
      local ratio = (k.best_us and c and c.best_us) and k.best_us / c.best_us or nil
      print(("  pick %-26s %7.1f us (clean tune %7.1f us, ratio %.2f) %s"):format(k.name, k.best_us or 0,
        c and c.best_us or 0, ratio or 0, k.best_knobs or "-"))
      if not k.best_us or planted or not ratio or ratio > 1.10 then
        ok = false
        why[#why + 1] = ("%s: pick %s at %s us"):format(k.name, tostring(k.best_knobs), tostring(k.best_us))
      end
    end
  end
  result(ok, "plant", ("%.0f s wall; planted rows %d fault, %d hang, %d wrong%s"):format(wall, seen["PLANT=1"] or 0,
    seen["PLANT=2"] or 0, seen["PLANT=3"] or 0, #why > 0 and ("; " .. table.concat(why, "; ")) or ""))
end

-- kill ------------------------------------------------------------------------------------------------------------
if wanted("kill") then
  local args = L0 .. " --max-candidates 6 --precompile 6 --structural default --budget-s 0"
  local envA = ("EMMY_TUNE_DB=%s/a.db EMMY_ONLINE_FILE=%s/a.json"):format(T, T)
  local envB = ("EMMY_TUNE_DB=%s/b.db EMMY_ONLINE_FILE=%s/b.json"):format(T, T)
  local codeA, outA = tune(envA, args .. " --clean", OUT .. "/tune_kill_a.log")
  local rowsA = codeA == 0 and count(T .. "/a.db", "SELECT COUNT(*) AS n FROM measurements")[1].n or -1
  -- the same search, killed with SIGKILL once the DB holds a third of it
  os.execute(("env %s %s tune %s --clean > %s/tune_kill_b1.log 2>&1 & echo $! > %s/pid"):format(envB, EXE, args, OUT, T))
  local f = io.open(T .. "/pid")
  local pid = tonumber(f:read("*a"))
  f:close()
  local t0, rowsK = sys.clock(), 0
  while sys.clock() - t0 < 240 do
    os.execute("sleep 0.2")
    local okc, r = pcall(count, T .. "/b.db", "SELECT COUNT(*) AS n FROM measurements")
    rowsK = okc and r[1].n or 0
    if rowsK >= math.max(1, math.floor(rowsA / 3)) then break end
  end
  os.execute("kill -9 " .. pid)
  os.execute("sleep 1")
  rowsK = count(T .. "/b.db", "SELECT COUNT(*) AS n FROM measurements")[1].n
  local runsK = count(T .. "/b.db", "SELECT COUNT(*) AS n FROM runs WHERE ended IS NULL")[1].n
  local codeB, outB = tune(envB, args, OUT .. "/tune_kill_b2.log")
  local rowsB = count(T .. "/b.db", "SELECT COUNT(*) AS n FROM measurements")[1].n
  local benched, served = outB:match("(%d+) variants benched, (%d+) served")
  benched, served = tonumber(benched), tonumber(served)
  print(stat_line(outA))
  print(stat_line(outB))
  local ok = codeA == 0 and codeB == 0 and runsK == 1 and rowsK < rowsA and served == rowsK and benched == rowsA - rowsK
    and rowsB == rowsA
  result(ok, "kill", ("uninterrupted %d rows; killed (SIGKILL) at %d rows, run left unfinished: %d; resumed: %s served, %s benched; final %d rows")
    :format(rowsA, rowsK, runsK, tostring(served), tostring(benched), rowsB))
end

-- exhaustive ------------------------------------------------------------------------------------------------------
if wanted("exhaustive") and clean then
  local env = ("EMMY_TUNE_DB=%s/clean.db EMMY_ONLINE_FILE=%s/clean.json"):format(T, T)
  local targets = { { "k_rms_norm_8fa63c", "--patience 100000 --budget-s 0" }, { "k_sdpa_123d66", "--patience 100000 --budget-s 0" },
    { "k_linear_7363a2", "--patience 100000 --max-candidates 120 --budget-s 0" },
    { "k_linear_add_67d546", "--patience 100000 --max-candidates 120 --budget-s 0" } }
  local lines, ok = {}, true
  for _, t in ipairs(targets) do
    local k
    for _, x in ipairs(clean.kernels) do if x.name:find(t[1], 1, true) and not k then k = x end end
    local repro = k and (T .. "/clean/tune.kernels/" .. k.name .. ".torch.json")
    if not k then ok = false lines[#lines + 1] = t[1] .. ": not in the clean tune" goto next_target end
    do
      local dd = T .. "/ex_" .. k.name
      local code, out = tune(env, repro .. " " .. t[2] .. " --dump-dir " .. dd, OUT .. "/tune_ex_" .. k.name .. ".log")
      local ej = read_json(dd .. "/tune.json")
      local e = ej and ej.kernels[1]
      if code ~= 0 or not e or not e.best_us then
        ok = false
        lines[#lines + 1] = k.name .. ": the larger search failed: " .. out:sub(-300)
      else
        local ratio = k.best_us / e.best_us
        local l = ("%s: tune pick %.1f us after %d of %d candidates; larger search (%d measured, %s) best %.1f us; pick/best %.3f")
          :format(k.name, k.best_us, k.measured, k.candidates, e.measured, e.stopped, e.best_us, ratio)
        print("  " .. l)
        print(("    pick %s\n    best %s"):format(k.best_knobs, e.best_knobs))
        lines[#lines + 1] = l
        if ratio > 1.05 then ok = false end
      end
    end
    ::next_target::
  end
  result(ok, "exhaustive", table.concat(lines, "; "))
end

-- structural ------------------------------------------------------------------------------------------------------
if wanted("structural") then
  local env = ("EMMY_TUNE_DB=%s/st.db EMMY_ONLINE_FILE=%s/st.json"):format(T, T)
  local code, out, wall = tune(env, L0 .. " --clean --structural all --patience 4 --dump-dir " .. T .. "/st",
    OUT .. "/tune_structural.log")
  local j = read_json(T .. "/st/tune.json")
  print(stat_line(out))
  local ok, why = code == 0 and j ~= nil, {}
  if not ok then why[#why + 1] = "exit " .. code .. ": " .. out:sub(-400) end
  if j then
    local rows = count(T .. "/st.db", "SELECT COUNT(*) AS n FROM measurements WHERE run_id = ?", j.run_id)[1].n
    if rows ~= j.benched then ok = false why[#why + 1] = ("%d benched, %d DB rows"):format(j.benched, rows) end
    local priced, default_priced, chosen = 0, false, nil
    for _, f in ipairs(j.structural or {}) do
      if f.price_us then priced = priced + 1 end
      if f.default and f.price_us then default_priced = true end
      if f.chosen then chosen = f end
    end
    if not default_priced or not chosen then ok = false why[#why + 1] = "the default fork is not priced or none is chosen" end
    print(out:match("(structural forks, priced.-)\n\n") or "(no fork table)")
    result(ok, "structural", ("%.0f s wall, %d kernels, %d benched = %d DB rows, %d of %d forks priced, chosen %s at %s us%s")
      :format(wall, #j.kernels, j.benched, rows, priced, #(j.structural or {}), chosen and chosen.knobs or "-",
        chosen and ("%.1f"):format(chosen.price_us) or "-", #why > 0 and ("; " .. table.concat(why, "; ")) or ""))
  else
    result(false, "structural", table.concat(why, "; "))
  end
end

-- gpus2 -----------------------------------------------------------------------------------------------------------
local function gpu_count()
  local _, o = sh("nvidia-smi -L")
  local n = 0
  for _ in o:gmatch("GPU %d+:") do n = n + 1 end
  return n
end
if want.gpus2 or (next(want) == nil and gpu_count() >= 2) then
  local env = ("EMMY_TUNE_DB=%s/g2.db EMMY_ONLINE_FILE=%s/g2.json"):format(T, T)
  local code, out, wall = tune(env, L0 .. " --clean --gpus 2 --dump-dir " .. T .. "/g2", OUT .. "/tune_gpus2.log")
  local j = read_json(T .. "/g2/tune.json")
  print(stat_line(out))
  local ok, why = code == 0 and j ~= nil, {}
  if not ok then why[#why + 1] = "exit " .. code .. ": " .. out:sub(-400) end
  if j then
    local devs, by = {}, {}
    for _, k in ipairs(clean and clean.kernels or {}) do by[k.name] = k end
    for _, k in ipairs(j.kernels) do
      devs[k.device] = (devs[k.device] or 0) + 1
      local c = by[k.name]
      local ratio = (k.best_us and c and c.best_us) and k.best_us / c.best_us or nil
      print(("  GPU %d %-26s %4d measured  best %7.1f us%s"):format(k.device, k.name, k.measured, k.best_us or 0,
        ratio and (" (one-GPU tune %.1f, ratio %.2f)"):format(c.best_us, ratio) or ""))
      if not k.best_us then ok = false why[#why + 1] = k.name .. " has no pick" end
      if ratio and ratio > 1.10 then ok = false why[#why + 1] = ("%s %.2fx the one-GPU pick"):format(k.name, ratio) end
    end
    local rows = count(T .. "/g2.db", "SELECT COUNT(*) AS n FROM measurements WHERE run_id = ?", j.run_id)[1].n
    if rows ~= j.benched then ok = false why[#why + 1] = ("%d benched, %d DB rows"):format(j.benched, rows) end
    if not (devs[0] and devs[1]) then ok = false why[#why + 1] = "not both GPUs tuned kernels" end
    result(ok, "gpus2", ("%.0f s wall, %d benched = %d DB rows, kernels per GPU: %d on 0, %d on 1%s"):format(wall, j.benched,
      rows, devs[0] or 0, devs[1] or 0, #why > 0 and ("; " .. table.concat(why, "; ")) or ""))
  else
    result(false, "gpus2", table.concat(why, "; "))
  end
end

H.finish("tune on the GPU (parts)")
