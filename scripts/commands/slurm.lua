-- emmy slurm — a GPU-less compile of every (or a sample of the) kernel variants, or a tune of the distinct kernels, as
-- a SLURM job array (emmy.slurm).
local cli = require "emmy.cli"
local slurm = require "emmy.slurm"
local sys = require "emmy.sys"

local USAGE = [==[usage: emmy slurm compile MODEL|GRAPH [emmy compile's flags] --shards N --work-dir D [--sample K]
                          [--cpus C] [--dry-run] [--wait [--timeout S]]
       emmy slurm tune MODEL|GRAPH [emmy tune's flags] --shards N --work-dir D [--gpus-per-task G] [--cpus C]
                       [--dry-run] [--wait [--timeout S]]
       emmy slurm status D
       emmy slurm resubmit D I

  compile: plans the variants once (D/variants.jsonl: `emmy compile … --nvrtc --variants-out`), writes D/task.sh
  (one `emmy compile … --nvrtc --variants D/variants.jsonl --shard $SLURM_ARRAY_TASK_ID/N --results
  D/shard_I.jsonl` a task) and D/merge.sh (the shards' results merged into D/results.jsonl, each variant once,
  equal to one process's `emmy compile … --nvrtc --results`), and submits them: `sbatch --array=0-(N-1)` and the
  merge with `--dependency=afterok` on the array. --dry-run prints the scripts and the sbatch lines, submitting
  nothing; --wait waits for the merge (printing each task's state). The cubin cache ($EMMY_CUBIN_CACHE) is shared
  by the tasks (its writes are atomic). SLURM_CONF and the usual SLURM variables apply.
  tune: D/task.sh tunes shard I of the distinct kernels (`emmy tune … --shard I/N`, its own tune DB D/shard_I.db, a
  GPU a task: --gres=gpu:G, default 1, 0 for none); D/merge.sh merges the shards' DBs into D/tune.db with the
  prior's refit (`emmy db merge … --refit`) and writes `emmy eval variants` and `failures` of it to D/report.txt.
  status: each task pending, running, done or failed, and the merge's. resubmit: task I again (and a merge).]==]

local OWN = { ["--shards"] = "int", ["--work-dir"] = "string", ["--sample"] = "int", ["--cpus"] = "int", ["--dry-run"] = "bool",
  ["--wait"] = "bool", ["--timeout"] = "int", ["--gpus-per-task"] = "int0" }

-- emmy slurm compile's own flags, and the rest (emmy compile's) in order.
local function split_args(argv)
  local own, rest = {}, {}
  local i = 2
  while i <= #argv do
    local a = argv[i]
    local kind = OWN[a]
    if kind == "bool" then own[a] = true
    elseif kind then
      local v = argv[i + 1]
      if v == nil then cli.usage("slurm %s: %s needs a value", argv[1], a) end
      own[a] = kind ~= "string" and tonumber(v) or v
      local lo = kind == "int0" and 0 or 1
      if kind ~= "string" and (not own[a] or own[a] < lo or own[a] ~= math.floor(own[a])) then
        cli.usage("slurm %s: %s %s: %s integer", argv[1], a, v, lo == 0 and "a non-negative" or "a positive")
      end
      i = i + 1
    else
      rest[#rest + 1] = a
    end
    i = i + 1
  end
  return own, rest
end

local function print_status(st)
  local parts = {}
  for _, s in ipairs { "pending", "running", "done", "failed" } do
    if st.counts[s] then parts[#parts + 1] = ("%d %s"):format(st.counts[s], s) end
  end
  local failed = {}
  for i, s in pairs(st.tasks) do if s == "failed" then failed[#failed + 1] = i end end
  table.sort(failed)
  print(("tasks: %s%s; merge: %s"):format(table.concat(parts, ", "), #failed > 0 and (" (failed: " .. table.concat(failed, ",") .. ")") or "",
    st.merge))
end

return {
  summary = "a GPU-less compile of the kernel variants, or a tune of the kernels, as a SLURM job array, merged (submit, status, resubmit)",
  usage = USAGE,
  run = function(argv)
    local action = argv[1]
    if action == "compile" or action == "tune" then
      local own, rest = split_args(argv)
      if not own["--shards"] then cli.usage("slurm %s: --shards N is required", action) end
      if not own["--work-dir"] then cli.usage("slurm %s: --work-dir D is required", action) end
      if #rest == 0 then cli.usage("slurm %s: no MODEL or graph", action) end
      if action == "tune" and own["--sample"] then cli.usage("slurm tune: --sample is compile's (a tune's search decides what it measures)") end
      if action == "compile" and own["--gpus-per-task"] then cli.usage("slurm compile: --gpus-per-task is tune's (the compile needs no GPU)") end
      local dir = sys.realpath(".") .. "/" .. own["--work-dir"]
      if own["--work-dir"]:sub(1, 1) == "/" then dir = own["--work-dir"] end
      local p = { kind = action, dir = dir, exe = sys.realpath("/proc/self/exe"), args = rest, shards = own["--shards"],
        sample = own["--sample"], cpus = own["--cpus"] or 1, gpus = action == "tune" and (own["--gpus-per-task"] or 1) or 0 }
      local res, err = slurm.submit(p, own["--dry-run"])
      if not res then cli.fail("%s", err) end
      if own["--dry-run"] then
        local task, merge = slurm.scripts(p)
        print("# " .. dir .. "/task.sh\n" .. task .. "\n# " .. dir .. "/merge.sh\n" .. merge)
        print(res.commands[1] .. "\n" .. res.commands[2] .. "   # JOB: the array's id")
        return 0
      end
      print(("submitted: array job %s (%d tasks), merge job %s; emmy slurm status %s"):format(res.array_job, p.shards, res.merge_job, dir))
      if own["--wait"] then
        local last = ""
        local ok = slurm.wait(res, own["--timeout"] or 3600, function(st)
          local line = ("%s %s %s"):format(st.counts.pending or 0, st.counts.running or 0, st.counts.done or 0)
          if line ~= last then print_status(st); last = line end
        end)
        print_status(slurm.status(res))
        if not ok then cli.fail("the merge did not finish (emmy slurm status %s; emmy slurm resubmit %s I)", dir, dir) end
        print("merged: " .. slurm.result_file(res))
      end
      return 0
    elseif action == "status" or action == "resubmit" then
      local dir = argv[2] or cli.usage("slurm %s: which work folder?", action)
      local p = cli.check(slurm.load(dir))
      if action == "status" then
        print_status(slurm.status(p))
        return 0
      end
      local i = tonumber(argv[3] or "")
      if not i or i < 0 or i >= p.shards or i ~= math.floor(i) then cli.usage("slurm resubmit: task I in 0..%d", p.shards - 1) end
      local job, mj = slurm.resubmit(p, i)
      if not job then cli.fail("%s", mj) end
      p.array_job, p.merge_job = job, mj
      slurm.save(p)
      print(("task %d resubmitted as job %s, merge job %s"):format(i, job, mj))
      return 0
    end
    cli.usage("slurm: compile, tune, status or resubmit (emmy help slurm)")
  end,
}
