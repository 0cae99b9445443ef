-- A real SLURM (issue 24): a single-node cluster from Debian's slurm-wlm and munge, started here (its own munge key
-- and socket, slurm.conf for this host, CPU only, ports of its own), runs the GPU-less compile of a sample of
-- TinyLlama layer 0's variants as 4 array tasks and the merge that depends on them; the merged results must equal
-- one process's. Every daemon started is stopped. Skipped, with the reason, where the packages or root are missing.
local sys = require "emmy.sys"

local T = {}
local function test(name, fn) T[#T + 1] = { name, fn } end

local sh = require("emmy.cli").sh

local function read(path)
  local f = io.open(path)
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

-- Starts munged, slurmctld and slurmd in dir; returns the SLURM_CONF path and a stop function.
local function cluster(dir)
  for _, b in ipairs { "munged", "slurmctld", "slurmd", "sbatch", "squeue" } do
    if sh("command -v " .. b) ~= 0 and sh("test -x /usr/sbin/" .. b) ~= 0 then
      skip(("no %s (make test installs Debian's slurm-wlm and munge)"):format(b))
    end
  end
  if select(2, sh("id -u")):match("%d+") ~= "0" then skip("slurmd runs as root here and this is not root") end
  local host = select(2, sh("hostname -s")):match("%S+")
  local cpus = sys.nproc()
  local port = 20000 + (tonumber(select(2, sh("echo $$")):match("%d+")) or 0) % 20000
  assert(sys.mkdir_p(dir .. "/m") and sys.mkdir_p(dir .. "/state") and sys.mkdir_p(dir .. "/spool"))
  sh(("dd if=/dev/urandom of=%s/m/munge.key bs=1024 count=1 && chmod 600 %s/m/munge.key"):format(dir, dir))
  local pids = {}
  local function stop()
    for _, f in ipairs { "slurmd.pid", "slurmctld.pid", "m/munged.pid" } do
      local pid = (read(dir .. "/" .. f) or ""):match("%d+")
      if pid then sh("kill " .. pid); pids[#pids + 1] = pid end
    end
    for _ = 1, 50 do
      local alive = false
      for _, pid in ipairs(pids) do if sh("kill -0 " .. pid) == 0 then alive = true end end
      if not alive then break end
      os.execute("sleep 0.1")
    end
  end
  local c, out = sh(("/usr/sbin/munged --key-file=%s/m/munge.key --socket=%s/m/munge.sock --pid-file=%s/m/munged.pid "
    .. "--log-file=%s/m/munged.log --seed-file=%s/m/seed"):format(dir, dir, dir, dir, dir))
  if c ~= 0 then stop(); error("munged: " .. out) end
  local conf = dir .. "/slurm.conf"
  local f = assert(io.open(conf, "w"))
  f:write(([[ClusterName=emmytest
SlurmctldHost=%s(127.0.0.1)
SlurmctldPort=%d
SlurmdPort=%d
AuthType=auth/munge
AuthInfo=socket=%s/m/munge.sock
CredType=cred/munge
StateSaveLocation=%s/state
SlurmdSpoolDir=%s/spool
SlurmctldPidFile=%s/slurmctld.pid
SlurmdPidFile=%s/slurmd.pid
SlurmctldLogFile=%s/slurmctld.log
SlurmdLogFile=%s/slurmd.log
SlurmUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
NodeName=%s NodeAddr=127.0.0.1 CPUs=%d State=UNKNOWN
PartitionName=emmy Nodes=%s Default=YES MaxTime=INFINITE State=UP
]]):format(host, port, port + 1, dir, dir, dir, dir, dir, dir, dir, host, cpus, host))
  f:close()
  local env = "SLURM_CONF=" .. conf
  -- (addresses given as 127.0.0.1 and the node named on slurmd's command line: no name lookup of the host needed)
  c, out = sh(("%s /usr/sbin/slurmctld -c -f %s && %s /usr/sbin/slurmd -f %s -N %s"):format(env, conf, env, conf, host))
  if c ~= 0 then stop(); error("slurm: " .. out) end
  for _ = 1, 100 do
    local _, s = sh(env .. " sinfo -h -o %t")
    if s:match("idle") then return env, stop end
    os.execute("sleep 0.2")
  end
  local logs = (read(dir .. "/slurmctld.log") or "") .. (read(dir .. "/slurmd.log") or "")
  stop()
  error("the node never became idle: " .. logs:sub(-600))
end

test("emmy slurm compile: 4 array tasks and a merge on a real single-node SLURM equal one process", function()
  local dir = os.tmpname()
  os.remove(dir)
  assert(sys.mkdir_p(dir))
  local env, stop = cluster(dir)
  local ok, err = pcall(function()
    local wd = dir .. "/work"
    local model = { "TinyLlama/TinyLlama-1.1B-Chat-v1.0", "--layer", "0", "--dynamic", "seq_len@x:1" }
    local cache = "EMMY_CUBIN_CACHE=" .. dir .. "/cubin"
    local c, out, e = emmy({ "slurm", "compile", model[1], model[2], model[3], model[4], model[5], "--shards", "4", "--sample", "2",
      "--work-dir", wd, "--dry-run" }, { env = env .. " " .. cache })
    eq(c, 0, "dry run: " .. e)
    check(out:find("--array=0-3", 1, true) and out:find("--dependency=afterok:JOB", 1, true) and out:find("--shard", 1, true), out)
    check(sys.stat(wd .. "/plan.json") == nil, "a dry run submits nothing")
    c, out, e = emmy({ "slurm", "compile", model[1], model[2], model[3], model[4], model[5], "--shards", "4", "--sample", "2",
      "--work-dir", wd, "--wait", "--timeout", "600" }, { env = env .. " " .. cache })
    eq(c, 0, "submit and wait: " .. out .. e .. (read(wd .. "/shard_0.log") or ""))
    check(out:find("tasks: 4 done; merge: done", 1, true), out)
    c, out = emmy({ "slurm", "status", wd }, { env = env })
    eq(c, 0, "status")
    check(out:find("4 done", 1, true), out)
    c, _, e = emmy({ "compile", model[1], model[2], model[3], model[4], model[5], "--nvrtc", "--sample", "2", "--results", dir .. "/one.jsonl" },
      { env = cache })
    eq(c, 0, "one process: " .. e)
    local one, merged = read(dir .. "/one.jsonl"), read(wd .. "/results.jsonl")
    check(one and #one > 0 and one == merged, "the merged results differ from one process's")
    -- a lost shard is failed in the status, and resubmitted alone it completes the merge again
    os.remove(wd .. "/shard_2.jsonl")
    os.remove(wd .. "/results.jsonl")
    c, out = emmy({ "slurm", "status", wd }, { env = env })
    check(out:find("3 done, 1 failed (failed: 2)", 1, true), out)
    c, out, e = emmy({ "slurm", "resubmit", wd, "2" }, { env = env .. " " .. cache })
    eq(c, 0, "resubmit: " .. e)
    for _ = 1, 600 do
      if sys.stat(wd .. "/results.jsonl") == "file" then break end
      os.execute("sleep 0.2")
    end
    os.execute("sleep 0.5")
    check(read(wd .. "/results.jsonl") == one, "the merge after the resubmitted task")
  end)
  stop()
  if not ok then error(err, 0) end
end)

test("emmy slurm tune: 2 array tasks (the mock driver, no GPU) and the merge into one tune DB with the prior's refit", function()
  local dir = os.tmpname()
  os.remove(dir)
  assert(sys.mkdir_p(dir))
  local mock = dir .. "/libcuda_mock.so"
  local okc = os.execute(("cc -shared -fPIC -O1 -o %s %s/tests/fixtures/cuda_mock.c 2>/dev/null"):format(mock, EMMY_HOME))
  if okc ~= 0 and okc ~= true then skip("cannot build the mock driver with cc") end
  local env, stop = cluster(dir)
  local ok, err = pcall(function()
    -- two distinct kernels: one a shard
    package.path = EMMY_HOME .. "/tests/lua/?.lua;" .. package.path
    local graph = require("graphs").two_kernels(dir .. "/two.torch.json")
    local wd = dir .. "/tune"
    local tenv = ("%s EMMY_LIBCUDA=%s EMMY_CUBIN_CACHE=%s/cubin EMMY_ONLINE_FILE=%s/online.json"):format(env, mock, dir, dir)
    local c, out, e = emmy({ "slurm", "tune", graph, "--patience", "1", "--shards", "2", "--gpus-per-task", "0", "--work-dir", wd,
      "--wait", "--timeout", "300" }, { env = tenv })
    eq(c, 0, "submit and wait: " .. out .. e .. (read(wd .. "/shard_0.log") or "") .. (read(wd .. "/merge.log") or ""))
    check(out:find("tasks: 2 done; merge: done", 1, true), out)
    local tunedb = require "emmy.tunedb"
    local db = assert(tunedb.open(wd .. "/tune.db", { readonly = true }))
    local ks = assert(db.h:rows("SELECT name FROM kernels ORDER BY name"))
    db:close()
    eq(#ks, 2, "both shards' kernels in the merged DB")
    local rep = read(wd .. "/report.txt") or ""
    check(rep:find(ks[1].name, 1, true) and rep:find(ks[2].name, 1, true), "the report names both kernels: " .. rep)
    check(sys.stat(dir .. "/online.json") == "file", "the merge refit the prior")
    c, out = emmy({ "slurm", "tune", graph, "--shards", "2", "--work-dir", wd .. "2", "--dry-run" }, { env = tenv })
    eq(c, 0, "dry run")
    check(out:find("--gres=gpu:1", 1, true) and out:find("--shard", 1, true) and out:find("db merge", 1, true), out)
  end)
  stop()
  if not ok then error(err, 0) end
end)

return T
