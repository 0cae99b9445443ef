-- bench/slurm.lua — issue 24's measure of SLURM's overhead on this machine: the same GPU-less compile of a sample of
-- variants as one process (`emmy compile MODEL … --nvrtc --sample N --results F`) and as N SLURM array tasks with
-- their merge (`emmy slurm compile MODEL … --shards N --sample N --work-dir D --wait`) on a single-node cluster
-- started here (emmy.slurm_local: Debian's slurm-wlm and munge, root), each with a cold cubin cache, --runs times,
-- alternating; prints each pair's seconds, their ratio, whether the merged results equal one process's, and the
-- cluster's own timeline of the last run (the tasks' allocations and ends, from slurmctld's log). Exit 1 when a run
-- fails or the results differ.
--   ./emmy bench/slurm.lua [--model M] [--shards 4] [--sample 20] [--runs 2] [--keep DIR]
io.stdout:setvbuf("line")
local cli = require "emmy.cli"
local sys = require "emmy.sys"
local CMD = "bench/slurm.lua"
local opts = cli.parse(arg, { flags = { ["--model"] = { kind = "string", default = "Qwen/Qwen3-Embedding-0.6B" },
  ["--shards"] = { kind = "int", default = 4, min = 1 }, ["--sample"] = { kind = "int", default = 20, min = 1 },
  ["--runs"] = { kind = "int", default = 2, min = 1 }, ["--keep"] = { kind = "string" } } }, CMD)

local dir = opts.keep or os.tmpname()
if not opts.keep then os.remove(dir) end
cli.must(sys.mkdir_p(dir))
local env, stop = require("emmy.slurm_local").start(dir .. "/cluster")
if not env then cli.fail("%s: no local SLURM: %s", CMD, stop) end
local q = cli.shell_quote
local exe = q(sys.realpath("/proc/self/exe"))
local model = ("%s --layer 0 --dynamic seq_len@x:1"):format(q(opts.model))
local failed = false
local ok, err = pcall(function()
  for r = 1, opts.runs do
    local one, wd = ("%s/one_%d.jsonl"):format(dir, r), ("%s/work_%d"):format(dir, r)
    os.execute(("rm -rf %s %s/cc1 %s/cc2"):format(q(wd), q(dir), q(dir)))
    local t0 = sys.clock()
    local c1, o1 = cli.sh(("EMMY_CUBIN_CACHE=%s/cc1 %s compile %s --nvrtc --sample %d --results %s"):format(q(dir), exe, model,
      opts.sample, q(one)))
    local t1 = sys.clock()
    local c2, o2 = cli.sh(("%s EMMY_CUBIN_CACHE=%s/cc2 %s slurm compile %s --shards %d --sample %d --work-dir %s --wait"):format(env,
      q(dir), exe, model, opts.shards, opts.sample, q(wd)))
    local t2 = sys.clock()
    local a = io.open(one)
    local b = io.open(wd .. "/results.jsonl")
    local same = a and b and a:read("*a") == b:read("*a")
    if a then a:close() end
    if b then b:close() end
    print(("run %d: one process %.1f s, %d SLURM tasks and the merge %.1f s: %.2fx; the merged results %s"):format(r,
      t1 - t0, opts.shards, t2 - t1, (t2 - t1) / (t1 - t0), same and "equal one process's" or "DIFFER"))
    if c1 ~= 0 or c2 ~= 0 or not same then
      failed = true
      print((c1 ~= 0 and o1 or o2):sub(-600))
    end
  end
  local log = io.open(dir .. "/cluster/slurmctld.log")
  if log then
    print("the last run's timeline (slurmctld):")
    local lines = {}
    for l in log:lines() do
      if l:find("sched: Allocate", 1, true) or l:find("WEXITSTATUS", 1, true) then lines[#lines + 1] = "  " .. l end
    end
    log:close()
    for i = math.max(1, #lines - 2 * (opts.shards + 1) + 1), #lines do print(lines[i]) end
  end
end)
stop()
if not ok then cli.fail("%s: %s", CMD, tostring(err)) end
return failed and 1 or 0
