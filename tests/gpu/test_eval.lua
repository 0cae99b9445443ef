-- GPU: the analysis commands (issue 8) after a clean tune of Qwen3 layer 0 on the H200 (tests/gpu/run.sh runs it).
-- Each view must run and print real data: eval variants (a matmul and attention), failures, knobs, online (db and
-- nodes, --blame, --ablate), run --ab on q_proj's reproducer, run --profile on q_proj's and attention's
-- reproducers (the ncu side-by-side), repl --db. Logs go to $OUT; the last line is PASS/FAIL with the count.
local H = dofile(EMMY_HOME .. "/tests/gpu/harness.lua")
local EXE, OUT, T, L0 = H.EXE, H.OUT, H.T, H.L0
local ENV = ("EMMY_TUNE_DB=%s/t.db EMMY_ONLINE_FILE=%s/o.json"):format(T, T)
-- runs one command (with the scratch tune DB) and wants each string of want in its output
local function run(name, cmd, want)
  local code, out, secs = H.run(("env %s %s"):format(ENV, cmd), OUT .. "/eval_" .. name .. ".log")
  local missing = {}
  for _, w in ipairs(want or {}) do if not out:find(w, 1, true) then missing[#missing + 1] = w end end
  local ok = code == 0 and #missing == 0
  H.result(ok, ("%s (%.0f s)"):format(name, secs), not ok and ("missing " .. table.concat(missing, " | ") .. "\n" .. out:sub(-800)) or nil)
  return out
end
run("tune", ("%s tune %s --clean --dump-dir %s/d"):format(EXE, L0, T), { "done:" })
local R = T .. "/d/tune.kernels"
print(run("variants_linear", ("%s eval variants --kernel k_linear_7363a2"):format(EXE), { "offline prior's pick: rank" }):sub(1, 1500))
print(run("variants_sdpa", ("%s eval variants --kernel k_sdpa"):format(EXE), { "k_sdpa_" }):sub(1, 1200))
print(run("failures", ("%s eval failures"):format(EXE), {}):sub(1, 1200))
print(run("knobs", ("%s eval knobs"):format(EXE), { "regret of a knob value" }):sub(1, 2000))
print(run("online_db", ("%s eval online --blame --ablate"):format(EXE), { "=== offline prior ===", "=== online prior ===", "ablation" }):sub(1, 3000))
print(run("online_nodes", ("%s eval online --dataset nodes"):format(EXE), { "=== offline prior ===" }):sub(1, 1500))
print(run("ab", ("%s run --ir %s/k_linear_7363a2.torch.json --ab BM=128 --ab BN=128,BM=64 --ab WGMMA=0"):format(EXE, R),
  { "ab BM=128", "vs default" }):sub(-1500))
print(run("profile_linear", ("%s run --ir %s/k_linear_7363a2.torch.json --profile --dump-dir %s/p1"):format(EXE, R, T),
  { "Nsight Compute, side by side", "duration (µs)" }):sub(-1800))
print(run("profile_sdpa", ("%s run --ir %s/k_sdpa_123d66.torch.json --profile"):format(EXE, R),
  { "Nsight Compute, side by side" }):sub(-1800))
run("repl", ("sh -c %s"):format(("'echo \"for _, k in ipairs(db:kernels()) do print(k.name, k.best_us) end\" | %s repl --db %s/t.db'"):format(EXE, T)),
  { "k_linear_7363a2" })
os.execute("cp " .. T .. "/p1/61_ncu_metrics.json " .. OUT .. "/eval_ncu_linear.json 2>/dev/null")
H.finish("eval on the GPU")
