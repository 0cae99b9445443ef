-- workflows/tune_model.lua — emmy's main job on one model: tune it, bench it against PyTorch eager and
-- torch.compile, triage every kernel that is behind, and write the findings report.
--   emmy scripts/workflows/tune_model.lua [--model M] [--layer N | --whole] [--static] [--sample N | --all]
--                                         [--from STEP] [--work DIR] [--report FILE] [--shard I/N] [--long N]
--                                         [--regime deploy|warm|rank]
-- Steps (each a function; --from STEP re-runs from STEP on, reading the earlier steps' files in the work dir):
--   setup    the work dir _tune/tune-model-<slug>/ (dump/, eval/, retune/, profile/, a log per step), the GPU,
--            NVRTC, ncu and whether it may read the counters
--   trace    the layer (default: --layer 0 with a dynamic seq_len) or the whole model (--whole: the four
--            whole-model dynamic specs); --static keeps the traced shapes
--   compile  passes, kernels, every gate's reason, CUDA emission (no GPU)
--   nvrtc    NVRTC compiles of the candidates with their registers, spills and shared memory (no GPU): the chosen
--            one and N-1 others a kernel (--sample N; 40 with a GPU, 100 without), --all every one (hours without
--            a GPU: `emmy slurm compile` spreads it over a cluster)
--   run      on a GPU: every kernel against the CPU reference with a 20-point knob sweep
--   tune     on a GPU: a clean emmy tune with --bench (its stats, both tables, the bench files in dump/)
--   long     with --long N (a check, not the default: N times the tune's time): the search again on the same tune
--            DB with N times the patience and the time budget (long/tune.json), so the report can say how far each
--            pick is from what a search N times as long finds (issue 22's check: within 5% at N = 10)
--   triage   on a GPU: for each kernel behind torch's best, the eval views as JSON (eval/), a re-tune of the
--            reproducer with 3x the patience where a prior half missed (retune/) and its pick pinned with --ab
--            beside the default (ab/), ncu side by side for the rest on the tune's pick (profile/, when the
--            counters may be read), and (a dynamic layer) its default variants benched static at the hint and
--            dynamic (static/, dynamic/: the masked guards' price)
--   report   the findings (emmy.triage) rendered by scripts/reports/tune_findings.lua into
--            plans/<slug>-layer<N>-tune-findings.md (plans/<slug>-whole-tune-findings.md), and findings.json
-- --regime deploy|warm|rank: the tune's, the long search's and the re-tunes' timing (emmy tune --regime; default deploy).
-- --work DIR: another work dir; --report FILE: another report path; --budget S: the whole run's seconds (510): the
-- triage's re-tunes and ncu profiles, most µs at stake first, stop when the next would not fit (said in the report).
-- --shard I/N: this machine's part of a run spread over N (SLURM array tasks or hosts, each its own --work dir):
-- the nvrtc step compiles every N-th variant from the I-th (`compile --nvrtc --shard`), the tune step tunes every
-- N-th distinct kernel into the work dir's tune.db (`tune --shard`, no bench); run, triage and report need every
-- kernel and are left to the merge (the summary prints it: `emmy db merge OUT.db <the shards' tune.db> --refit`,
-- then `emmy eval variants --db OUT.db`; `emmy slurm tune` does both on a cluster).
-- run.json in the work dir records the command, the date, the GPU and every step's time; the last lines summarize.
local cli = require "emmy.cli"
local cjson = require "cjson"
local sys = require "emmy.sys"
local models = require "emmy.models"

local STEPS = { "setup", "trace", "compile", "nvrtc", "run", "tune", "long", "triage", "report" }
local opts = cli.parse(arg, { flags = {
  ["--model"] = { kind = "string", default = models.DEFAULT }, ["--layer"] = { kind = "int", default = 0 },
  ["--whole"] = { kind = "bool" }, ["--static"] = { kind = "bool" }, ["--sample"] = { kind = "int" },
  ["--all"] = { kind = "bool" }, ["--from"] = { kind = "string" }, ["--work"] = { kind = "string" },
  ["--report"] = { kind = "string" }, ["--budget"] = { kind = "int", default = 510 }, ["--long"] = { kind = "int", min = 0, default = 0 }, ["--shard"] = { kind = "string" },
  ["--regime"] = { kind = "string", default = "deploy" },
} }, "tune_model.lua")
if not require("emmy.tuner").REGIMES[opts.regime] then cli.usage("tune_model.lua: --regime %s (deploy, warm or rank)", opts.regime) end
local shard = opts.shard
if shard then
  local ok, why = require("emmy.kernels").parse_shard(shard)
  if not ok then cli.usage("tune_model.lua: %s", why) end
end
local from = 1
if opts.from then
  from = nil
  for i, s in ipairs(STEPS) do if s == opts.from then from = i end end
  if not from then cli.usage("tune_model.lua: --from %s (one of %s)", opts.from, table.concat(STEPS, ", ")) end
end

local slug = models.slug(opts.model)
local work = opts.work or ("%s/_tune/tune-model-%s"):format(EMMY_HOME, slug)
for _, d in ipairs { "dump", "eval", "retune", "profile" } do assert(sys.mkdir_p(work .. "/" .. d)) end
local t0 = sys.clock()
local function say(fmt, ...) print(("[%6.1fs] " .. fmt):format(sys.clock() - t0, ...)) io.stdout:flush() end
local shq = cli.shell_quote
local read_json = require("emmy.triage").read_json
local write_file = require("emmy.dump").write_file

-- run.json: kept across --from runs (the earlier steps' entries stay)
local run = read_json(work .. "/run.json") or {}
local args = {}
for _, a in ipairs(arg) do args[#args + 1] = a end
run.model, run.layer, run.whole, run.static = opts.model, not opts.whole and opts.layer or nil, opts.whole or false, opts.static or false
if from == 1 then run.steps, run.friction = {}, {} end
run.steps, run.friction = run.steps or {}, run.friction or {}
-- the command and date are the full run's; a --from run is listed beside them (the report names both)
local this = "emmy scripts/workflows/tune_model.lua" .. (#args > 0 and (" " .. table.concat(args, " ")) or "")
local now = os.date("!%Y-%m-%d %H:%M UTC")
if from == 1 or not run.command then run.command, run.date, run.reruns = this, now, nil
else
  run.reruns = run.reruns or {}
  run.reruns[#run.reruns + 1] = { command = this, date = now, from = STEPS[from] }
end
local function record(name, ok, seconds, log)
  for i = #run.steps, 1, -1 do if run.steps[i].name == name then table.remove(run.steps, i) end end
  run.steps[#run.steps + 1] = { name = name, ok = ok, seconds = seconds, log = log }
  write_file(work .. "/run.json", cjson.encode(run), { sync = true }) -- read back by a --from run
end
local function friction(s) run.friction[#run.friction + 1] = s say("note: %s", s) end

-- Runs an emmy command, its output teed to the work dir (or to out_file alone); returns success.
local function emmy(name, argv, env, out_file)
  local parts = {}
  for i, a in ipairs(argv) do parts[i] = shq(a) end
  local log = ("%s/%s.log"):format(work, name)
  say("%s: emmy %s", name, table.concat(argv, " "))
  local cmd
  if out_file then
    cmd = ("%s%s %s > %s 2> %s"):format(env and (env .. " ") or "", shq(EMMY_HOME .. "/emmy"), table.concat(parts, " "), shq(out_file), shq(log))
  else
    cmd = ("%s%s %s 2>&1 | tee %s; exit ${PIPESTATUS[0]}"):format(env and (env .. " ") or "", shq(EMMY_HOME .. "/emmy"),
      table.concat(parts, " "), shq(log))
  end
  local rc = os.execute("bash -c " .. shq(cmd))
  if type(rc) == "number" and rc > 255 then rc = math.floor(rc / 256) end
  return rc == 0 or rc == true, log
end

local trace = { opts.model }
if opts.whole then
  if not opts.static then
    for _, d in ipairs { "seq_len@input_ids:1", "seq_len@attention_mask:2", "seq_len@attention_mask:3", "seq_len@position_ids:1" } do
      trace[#trace + 1] = "--dynamic"
      trace[#trace + 1] = d
    end
  end
else
  trace[#trace + 1] = "--layer"
  trace[#trace + 1] = tostring(opts.layer)
  if not opts.static then
    trace[#trace + 1] = "--dynamic"
    trace[#trace + 1] = "seq_len@x:1"
  end
end
local function with(cmd, extra)
  local t = { cmd }
  for _, a in ipairs(trace) do t[#t + 1] = a end
  for _, a in ipairs(extra) do t[#t + 1] = a end
  return t
end
local DB = "EMMY_TUNE_DB=" .. shq(work .. "/tune.db") .. " EMMY_ONLINE_FILE=" .. shq(work .. "/online.json")

local gpu, gerr = sys.cuda()
local nvrtc, nerr = sys.nvrtc()
local ncu_ok = os.execute("command -v ncu >/dev/null 2>&1 || ls /opt/nvidia/nsight-compute/*/ncu >/dev/null 2>&1")
ncu_ok = ncu_ok == 0 or ncu_ok == true
local skipped = {}

local S = {}
function S.setup()
  say("model %s; work dir %s", opts.model, work)
  say("GPU: %s", gpu and ("%s (sm_%s)"):format(gpu.name, gpu.cc:gsub("%.", "")) or ("none — " .. gerr))
  say("NVRTC: %s; ncu: %s", nvrtc or ("none — " .. nerr), ncu_ok and "found" or "not found")
  run.gpu = gpu and ("%s (sm_%s)"):format(gpu.name, gpu.cc:gsub("%.", "")) or "none"
  local v, rev = sys.version()
  run.emmy = ("%s (git %s)"):format(v, rev)
  if not ncu_ok then friction("ncu not found: the codegen findings carry no counters") end
  return true
end
function S.trace() return emmy("trace", with("trace", { "-o", work .. "/graph.torch.json" })) end
function S.compile() return emmy("compile", with("compile", { "--explain", "--dump-dir", work .. "/dump" })) end
function S.nvrtc()
  if not nvrtc then say("nvrtc: skipped — NVRTC not found (%s)", nerr) return true end
  local flags = with("compile", { "--nvrtc" })
  -- a sample a kernel: 40 with a GPU (the tune compiles the variants it benches), 100 without (this step is then
  -- the compile's whole check, and every candidate of Qwen3 layer 0 — 29,462 — is two hours on two cores: --all,
  -- or spread over SLURM with `emmy slurm compile`); cached cubins are reused on a re-run
  if opts.all then
    flags[#flags + 1] = "--all-variants"
    say("nvrtc: every candidate of every kernel (--all; 0.05–4 s of one core each, ~0.5 s on average: hours on a few cores; cached cubins reused)")
  else
    local n = opts.sample or (gpu and 40 or 100)
    flags[#flags + 1] = "--sample"
    flags[#flags + 1] = tostring(n)
    say("nvrtc: the chosen variant and %d others a kernel (--all: every candidate, hours without a GPU)", n - 1)
  end
  if shard then
    flags[#flags + 1] = "--shard"
    flags[#flags + 1] = shard
    say("nvrtc: shard %s of the variants", shard)
  end
  return emmy("nvrtc", flags)
end
-- (--shard: the steps that need every kernel, left to the merge)
local function for_merge(step)
  if not shard then return false end
  say("%s: left to the merge of the shards (--shard %s)", step, shard)
  return true
end
function S.run()
  if for_merge("run") then return nil end
  if not gpu then skipped[#skipped + 1] = "run" return nil end
  return emmy("run", with("run", { "--sweep", "20" }))
end
function S.tune()
  if not gpu then skipped[#skipped + 1] = "tune" return nil end
  if shard then return emmy("tune", with("tune", { "--clean", "--shard", shard, "--regime", opts.regime, "--dump-dir", work .. "/dump" }), DB) end
  return emmy("tune", with("tune", { "--clean", "--bench", "--regime", opts.regime, "--dump-dir", work .. "/dump" }), DB)
end
function S.long()
  if opts.long <= 0 or shard then return nil end
  if not gpu then skipped[#skipped + 1] = "long" return nil end
  -- (the tune's defaults, --patience 16 and --budget-s 240 GPU-seconds, times N; the rows already in the DB are
  -- served from it; every GPU of the host measures, one bench worker each, and --budget-s is wall time: N = 10 is
  -- 40 minutes on one GPU, 5 on eight)
  local n = math.max(1, gpu.device_count or 1)
  local wall = math.ceil(240 * opts.long / n)
  say("long: the search again with %d times the patience and GPU time on %d GPU%s (%d s)", opts.long, n, n == 1 and "" or "s", wall)
  -- (batches of 16: the long search waits on its compiles, 123 of 179 s at 10x on an H100 in batches of 8 — forty-eighth
  -- session — and twice the compiles in flight halve the waits)
  return emmy("long", with("tune", { "--patience", tostring(16 * opts.long), "--budget-s", tostring(wall), "--search-batch", "16", "--regime", opts.regime,
    "--gpus", tostring(n), "--dump-dir", work .. "/long" }), DB)
end
function S.triage()
  if for_merge("triage") then return nil end
  if not gpu then skipped[#skipped + 1] = "triage" return nil end
  local triage = require "emmy.triage"
  local bench = read_json(work .. "/dump/62_kernel_bench.json")
  if not bench then friction("triage: no dump/62_kernel_bench.json (did the tune step run?)") return false end
  local ok = true
  ok = emmy("eval_failures", { "eval", "failures", "--json" }, DB, work .. "/eval/failures.json") and ok
  ok = emmy("eval_online", { "eval", "online", "--blame", "--json" }, DB, work .. "/eval/online.json") and ok
  local variants = {}
  local d = { bench = bench, failures = (read_json(work .. "/eval/failures.json") or {}).result,
    online = (read_json(work .. "/eval/online.json") or {}).result, variants = variants }
  -- the kernels behind torch's best (the triage's own test), each with its variants view
  local findings = triage.classify(d)
  for _, f in ipairs(findings) do
    local out = ("%s/eval/variants_%s.json"):format(work, f.kernel)
    if emmy("eval_variants_" .. f.kernel, { "eval", "variants", "--kernel", f.kernel, "--json" }, DB, out) then
      local j = read_json(out)
      variants[f.kernel] = j and j.result and j.result[1]
    end
  end
  write_file(work .. "/eval/variants.json", cjson.encode(variants))
  -- re-classified with the variants: a search shortfall is confirmed by a re-tune with 3x the patience; the
  -- codegen ones get the ncu side-by-side. Most µs at stake first, each only if it fits the run's --budget
  -- (its cost guessed from the last one of its kind: on the H200 a profile took 41-50 s, a re-tune 26 s).
  local cost, left_out = { retune = 30, profile = 50, static = 80 }, {}
  local function fits(kind, kernel)
    if sys.clock() - t0 + cost[kind] <= opts.budget then return true end
    left_out[#left_out + 1] = ("%s %s"):format(kind, kernel)
    return false
  end
  local tune = read_json(work .. "/dump/tune.json")
  for _, f in ipairs(triage.classify(d)) do
    local repro = ("%s/dump/tune.kernels/%s.torch.json"):format(work, f.kernel)
    local t1 = sys.clock()
    if f.class == "search shortfall" and fits("retune", f.kernel) then
      local rdir = work .. "/retune/" .. f.kernel
      emmy("retune_" .. f.kernel, { "tune", repro, "--patience", "48", "--regime", opts.regime, "--dump-dir", rdir }, DB)
      -- the re-tune's rank-1 row pinned with --ab: checked against the reference and timed beside the default
      local rt = read_json(rdir .. "/tune.json")
      local best = rt and rt.kernels and rt.kernels[1] and triage.tile_knobs(rt.kernels[1].best_knobs)
      if best and #best > 0 then
        emmy("ab_" .. f.kernel, { "run", "--ir", repro, "--bench", "--bench-backends", "emmy", "--ab", table.concat(best, ","),
          "--dump-dir", work .. "/ab/" .. f.kernel }, DB)
      end
      cost.retune = sys.clock() - t1
    elseif f.class == "codegen quality" and ncu_ok and fits("profile", f.kernel) then
      -- the profile runs the tune's pick (its knobs pinned), not the rules' default
      local pins = triage.pick_pins(tune, f.kernel)
      emmy("profile_" .. f.kernel, { "run", "--ir", repro, "--profile", "--dump-dir", work .. "/profile/" .. f.kernel },
        pins and ("EMMY_KNOBS=" .. shq(pins)) or nil)
      cost.profile = sys.clock() - t1
      local pr = read_json(("%s/profile/%s/61_ncu_metrics.json"):format(work, f.kernel))
      for _, n in ipairs(pr and pr.notes or {}) do friction(("ncu on %s: %s"):format(f.kernel, n)) end
    end
  end
  -- the masked guards' price: the layer's default variants benched (emmy alone) traced static at the hint and
  -- dynamic, like for like; their kernels matched by layer op (emmy.triage guard_findings)
  if not opts.static and not opts.whole and fits("static", "the static layer") then
    local t1 = sys.clock()
    for _, v in ipairs { { "static", {} }, { "dynamic", { "--dynamic", "seq_len@x:1" } } } do
      local argv = { "run", opts.model, "--layer", tostring(opts.layer) }
      for _, a in ipairs(v[2]) do argv[#argv + 1] = a end
      for _, a in ipairs { "--bench", "--bench-backends", "emmy", "--dump-dir", work .. "/" .. v[1] } do argv[#argv + 1] = a end
      emmy(v[1], argv, DB)
    end
    cost.static = sys.clock() - t1
  end
  if #left_out > 0 then
    friction(("triage: left out to stay inside --budget %d s (run them by hand, or raise --budget): %s"):format(opts.budget,
      table.concat(left_out, ", ")))
  end
  return ok
end
function S.report()
  if for_merge("report") then return nil end
  if not read_json(work .. "/dump/62_kernel_bench.json") then
    skipped[#skipped + 1] = "report"
    say("report: needs the tune's bench files (a GPU) — skipped")
    return nil
  end
  local d = require("emmy.triage").from_workdir(work)
  d.run = run
  local md = require("reports.tune_findings").render(d)
  local path = opts.report or ("%s/plans/%s-%s-tune-findings.md"):format(EMMY_HOME, slug, opts.whole and "whole" or ("layer" .. opts.layer))
  assert(sys.mkdir_p(path:match("^(.*)/[^/]*$") or "."))
  write_file(path, md .. "\n")
  write_file(work .. "/findings.json", cjson.encode { findings = d.findings, fine = d.fine, dominating = d.dominating })
  say("report: %s (%d findings)", path, #d.findings)
  return true
end

for i = from, #STEPS do
  local name = STEPS[i]
  local t1 = sys.clock()
  local ok, log = S[name]()
  if ok ~= nil then record(name, ok, sys.clock() - t1, log) end
end

print("")
print(("summary (%.1f s):"):format(sys.clock() - t0))
for _, s in ipairs(run.steps) do
  print(("  %-8s %-4s %6.1f s  %s"):format(s.name, s.ok and "ok" or "FAIL", s.seconds, s.log or ""))
end
if #skipped > 0 then print(("need a GPU, skipped: %s (%s)"):format(table.concat(skipped, ", "), gerr or "no GPU")) end
if shard then
  print(("shard %s: this work dir's tune.db holds its kernels (with a GPU); merge the shards' DBs and read them:"):format(shard))
  print(("  emmy db merge OUT.db %s <the other shards' tune.db> --refit && emmy eval variants --db OUT.db"):format(shq(work .. "/tune.db")))
end
local failed = 0
for _, s in ipairs(run.steps) do if not s.ok then failed = failed + 1 end end
return failed == 0 and 0 or 1
