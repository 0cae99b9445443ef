-- emmy.slurm — a GPU-less compile of a model's kernel variants (or a tune of its kernels, a GPU a task) spread over
-- a SLURM job array (issue 24): the task
-- script (one `emmy compile … --nvrtc --shard I/N --results` a task, I from SLURM_ARRAY_TASK_ID), the merge job
-- that depends on the array (`--dependency=afterok`), their submission, each task's state and a failed task's
-- resubmission. Everything lives in one work folder:
--   D/plan.json       what was submitted (command, shards, job ids)
--   D/variants.jsonl  compile: the variants, planned once by the submitter (`emmy compile … --variants-out`)
--   D/task.sh, D/merge.sh, D/shard_I.log, D/shard_I.jsonl (a task's results), D/results.jsonl (the merge)
local cjson = require "cjson"
local sys = require "emmy.sys"

local M = {}

local shq = require("emmy.cli").shell_quote

local function write(path, text, mode)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
  if mode then os.execute(("chmod %s %s"):format(mode, shq(path))) end
end

local sh = require("emmy.cli").sh

-- A task's output (its presence: the task is done) and the merge's, by the plan's kind ("compile" or "tune").
function M.task_file(p, i)
  return p.kind == "tune" and ("%s/shard_%d/tune.json"):format(p.dir, i) or ("%s/shard_%d.jsonl"):format(p.dir, i)
end
function M.result_file(p) return p.dir .. (p.kind == "tune" and "/tune.db" or "/results.jsonl") end

-- emmy slurm tune's scripts: a task tunes shard I of the distinct kernels into its own DB (D/shard_I.db, its run's
-- JSON in D/shard_I/tune.json); the merge joins the shards' DBs into D/tune.db with the prior's refit and writes
-- the kernels' variants from it (D/report.txt).
local function tune_scripts(p, args)
  local d, exe = shq(p.dir), shq(p.exe)
  local task = table.concat({
    "#!/bin/sh",
    "# one shard of the distinct kernels: emmy tune --shard $SLURM_ARRAY_TASK_ID/" .. p.shards .. ", its own tune DB",
    "set -e",
    ("EMMY_TUNE_DB=%s/shard_\"$SLURM_ARRAY_TASK_ID\".db exec %s tune %s --shard \"$SLURM_ARRAY_TASK_ID/%d\" --dump-dir %s/shard_\"$SLURM_ARRAY_TASK_ID\""):format(
      d, exe, table.concat(args, " "), p.shards, d),
  }, "\n") .. "\n"
  local merge = table.concat({
    "#!/bin/sh",
    "# the shards' tune DBs merged (each row once) with the prior's online half refit on them, and the report",
    "set -e",
    ("rm -f %s/tune.db.tmp"):format(d),
    ("%s db merge %s/tune.db.tmp %s/shard_*.db --refit"):format(exe, d, d),
    ("{ %s eval variants --kernel k_ --db %s/tune.db.tmp; %s eval failures --db %s/tune.db.tmp; } > %s/report.txt"):format(exe, d,
      exe, d, d),
    ("mv %s/tune.db.tmp %s/tune.db"):format(d, d),
  }, "\n") .. "\n"
  return task, merge
end

-- The command's arguments of plan p, each shell-quoted.
local function quoted_args(p)
  local args = {}
  for i, a in ipairs(p.args) do args[i] = shq(a) end
  return args
end

-- The scripts of a plan {kind, dir, exe, args (the command's arguments), shards, sample}: task, merge.
function M.scripts(p)
  local args = quoted_args(p)
  if p.kind == "tune" then return tune_scripts(p, args) end
  -- (the variants are the submitter's list, D/variants.jsonl: a task does not plan the model again — 1.4 of a task's
  -- ~18 s on 2 cores, Qwen3 layer 0's sample of 20; --kernel and --all-variants chose that list)
  local targs = {}
  for i = 1, #args do
    if p.args[i] ~= "--all-variants" and p.args[i] ~= "--kernel" and p.args[i - 1] ~= "--kernel" then targs[#targs + 1] = args[i] end
  end
  local task = table.concat({
    "#!/bin/sh",
    "# one shard of the variants: emmy compile --nvrtc --variants D/variants.jsonl --shard $SLURM_ARRAY_TASK_ID/" .. p.shards,
    "set -e",
    ("exec %s compile %s --nvrtc --variants %s/variants.jsonl --shard \"$SLURM_ARRAY_TASK_ID/%d\" --results %s/shard_\"$SLURM_ARRAY_TASK_ID\".jsonl"):format(
      shq(p.exe), table.concat(targs, " "), shq(p.dir), p.shards, shq(p.dir)),
  }, "\n") .. "\n"
  local merge = table.concat({
    "#!/bin/sh",
    "# the shards' results, merged: each variant once, sorted (equal to one process's --results)",
    "set -e",
    ("cat %s/shard_*.jsonl | sort > %s/results.jsonl.tmp"):format(shq(p.dir), shq(p.dir)),
    ("mv %s/results.jsonl.tmp %s/results.jsonl"):format(shq(p.dir), shq(p.dir)),
  }, "\n") .. "\n"
  return task, merge
end

-- The sbatch command lines of a plan (its array, or the tasks `array` names, then the merge with the array's id in
-- place of JOB).
function M.commands(p, array)
  local d = shq(p.dir)
  local gres = (p.gpus or 0) > 0 and (" --gres=gpu:%d"):format(p.gpus) or ""
  return ("sbatch --parsable --array=%s --cpus-per-task=%d%s --job-name=emmy-shard -o %s/shard_%%a.log %s/task.sh"):format(
      array or ("0-" .. (p.shards - 1)), p.cpus or 1, gres, d, d),
    ("sbatch --parsable --dependency=afterok:JOB --job-name=emmy-merge -o %s/merge.log %s/merge.sh"):format(d, d)
end

-- Writes the scripts; without dry_run submits them. Returns the plan with array_job and merge_job, or nil, msg.
function M.submit(p, dry_run)
  assert(sys.mkdir_p(p.dir))
  local task, merge = M.scripts(p)
  if p.kind == "compile" then
    -- the variants, planned once here (one process's list, in its order), for every task to read
    local rc, out = sh(("%s compile %s --nvrtc%s --variants-out %s/variants.jsonl"):format(shq(p.exe), table.concat(quoted_args(p), " "),
      p.sample and (" --sample " .. p.sample) or "", shq(p.dir)))
    if rc ~= 0 then return nil, "planning the variants (emmy compile … --variants-out): " .. out:gsub("%s+$", ""):gsub("\n", " ") end
  end
  write(p.dir .. "/task.sh", task, "755")
  write(p.dir .. "/merge.sh", merge, "755")
  local c1, c2 = M.commands(p)
  p.commands = { c1, c2 }
  if dry_run then return p end
  local rc, out = sh(c1)
  local job = out:match("^(%d+)")
  if rc ~= 0 or not job then return nil, "sbatch (the array): " .. out:gsub("\n", " ") end
  p.array_job = job
  rc, out = sh((c2:gsub("JOB", job)))
  local mj = out:match("^(%d+)")
  if rc ~= 0 or not mj then return nil, "sbatch (the merge): " .. out:gsub("\n", " ") end
  p.merge_job = mj
  M.save(p)
  return p
end

function M.save(p) write(p.dir .. "/plan.json", cjson.encode(p)) end

function M.load(dir)
  local f = io.open(dir .. "/plan.json")
  if not f then return nil, ("no SLURM plan in %s (emmy slurm compile … --work-dir %s first)"):format(dir, dir) end
  local p = cjson.decode(f:read("*a"))
  f:close()
  return p
end

-- Each task's state: pending or running (squeue), done (its results file), failed (ended without one); and the
-- merge's. Returns {tasks = {[i] = state}, merge = state, counts = {state = n}}.
function M.status(p)
  local live = {}
  local _, q = sh(("squeue -h -o '%%i %%T' -j %s,%s"):format(p.array_job, p.merge_job))
  for id, st in q:gmatch("(%S+) (%S+)") do live[id] = st:lower() end
  local out, counts = { tasks = {} }, {}
  for i = 0, p.shards - 1 do
    local st = live[("%s_%d"):format(p.array_job, i)]
    if not st then
      -- a pending array shows as JOB_[a-b]
      for id, s in pairs(live) do
        local a, b = id:match("^" .. p.array_job .. "_%[(%d+)%-(%d+)")
        if a and i >= tonumber(a) and i <= tonumber(b) then st = s end
      end
    end
    if not st then st = sys.stat(M.task_file(p, i)) == "file" and "done" or "failed" end
    out.tasks[i] = st
    counts[st] = (counts[st] or 0) + 1
  end
  out.merge = live[p.merge_job] or (sys.stat(M.result_file(p)) == "file" and "done" or "waiting or failed")
  out.counts = counts
  return out
end

-- Submits task i again alone (a failed shard), and a merge after it. Returns the new job ids or nil, msg.
function M.resubmit(p, i)
  local c1, c2 = M.commands(p, tostring(i))
  local rc, out = sh(c1)
  local job = out:match("^(%d+)")
  if rc ~= 0 or not job then return nil, "sbatch: " .. out:gsub("\n", " ") end
  rc, out = sh((c2:gsub("JOB", job)))
  local mj = out:match("^(%d+)")
  if rc ~= 0 or not mj then return nil, "sbatch (the merge): " .. out:gsub("\n", " ") end
  return job, mj
end

-- Waits until the merge's results exist or no job of the plan is queued (timeout_s at most); true when merged.
function M.wait(p, timeout_s, progress)
  local t0 = sys.clock()
  while sys.clock() - t0 < (timeout_s or 3600) do
    if sys.stat(M.result_file(p)) == "file" then return true end
    local _, q = sh(("squeue -h -o %%i -j %s,%s"):format(p.array_job, p.merge_job))
    if not q:match("%d") and sys.stat(M.result_file(p)) ~= "file" then
      os.execute("sleep 1")
      return sys.stat(M.result_file(p)) == "file"
    end
    if progress then progress(M.status(p)) end
    os.execute("sleep 1")
  end
  return false
end

return M
