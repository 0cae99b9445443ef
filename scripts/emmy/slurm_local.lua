-- emmy.slurm_local — a single-node SLURM on this machine from Debian's slurm-wlm and munge (issue 24): its own munge
-- key and socket, a slurm.conf for this host (CPU only, ports of its own) in a folder the caller names, the daemons
-- started there and stopped by the function it returns. The SLURM tests and bench/slurm.lua run on it. Its scheduler is
-- the plain FIFO one, scheduling at once (sched/builtin, no batch delay): backfill's took 0.9 s to start a waiting
-- array task after one ended and 2.2 s to start the merge (0.4 and 1.0 with builtin; slurmctld's log, twenty-ninth
-- session), a share of what the 2-core measure of SLURM's overhead counts.
local sys = require "emmy.sys"
local sh = require("emmy.cli").sh

local M = {}

local function read(path)
  local f = io.open(path)
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

-- One try of M.start with the attempt-th pair of ports.
local function start_once(dir, attempt)
  for _, b in ipairs { "munged", "slurmctld", "slurmd", "sbatch", "squeue" } do
    if sh("command -v " .. b) ~= 0 and sh("test -x /usr/sbin/" .. b) ~= 0 then
      return nil, ("no %s (make test installs Debian's slurm-wlm and munge)"):format(b)
    end
  end
  if select(2, sh("id -u")):match("%d+") ~= "0" then return nil, "slurmd runs as root here and this is not root" end
  local host = select(2, sh("hostname -s")):match("%S+")
  local cpus = sys.nproc()
  -- two ports of its own below the kernel's ephemeral range (32768 and up: a client's connection may hold any port there)
  local port = 10000 + attempt * 10000 + ((tonumber(select(2, sh("echo $$")):match("%d+")) or 0) % 5000) * 2
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
SchedulerType=sched/builtin
SchedulerParameters=sched_min_interval=0,batch_sched_delay=0
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
  -- (each query bounded and the whole wait a minute: a client of a controller that is not there retries for minutes;
  -- a controller that left is said at once, with its log)
  local deadline = os.time() + 60
  while os.time() < deadline do
    local _, s = sh(env .. " timeout 10 sinfo -h -o %t")
    if s:match("idle") then return env, stop end
    local pid = (read(dir .. "/slurmctld.pid") or ""):match("%d+")
    if pid and sh("kill -0 " .. pid) ~= 0 then
      local log = read(dir .. "/slurmctld.log") or ""
      stop()
      error(("slurmctld (port %d) left: %s"):format(port, log:sub(-600)))
    end
    os.execute("sleep 0.2")
  end
  local ctl, d = read(dir .. "/slurmctld.log") or "", read(dir .. "/slurmd.log") or ""
  stop()
  error("the node never became idle: slurmctld: " .. ctl:sub(-400) .. " slurmd: " .. d:sub(-400))
end

-- Starts munged, slurmctld and slurmd in dir; returns "SLURM_CONF=<path>" (an environment prefix for commands) and a
-- stop function, or nil and why where the packages or root are missing. Raises where a daemon does not start; a
-- controller that leaves at once (a port another process took, say) is tried once more on other ports.
function M.start(dir)
  local ok, env, stop = pcall(start_once, dir, 0)
  if ok then return env, stop end
  if not tostring(env):find("slurmctld (port", 1, true) then error(env, 0) end
  local ok2, env2, stop2 = pcall(start_once, dir, 1)
  if ok2 then return env2, stop2 end
  error(tostring(env2) .. " (the first try: " .. tostring(env) .. ")", 0)
end

return M
