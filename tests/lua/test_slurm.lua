-- A real SLURM (issue 24): a single-node cluster from Debian's slurm-wlm and munge, started here (its own munge key
-- and socket, slurm.conf for this host, CPU only, ports of its own), runs the GPU-less compile of a sample of
-- TinyLlama layer 0's variants as 4 array tasks and the merge that depends on them; the merged results must equal
-- one process's. Every daemon started is stopped. Skipped, with the reason, where the packages or root are missing.
local sys = require "emmy.sys"

local T = {}
local function test(name, fn) T[#T + 1] = { name, fn } end

local sh = require("emmy.cli").sh

-- Starts the cluster in dir (emmy.slurm_local), or skips with the reason.
local function cluster(dir)
  local env, stop = require("emmy.slurm_local").start(dir)
  if not env then skip(stop) end
  return env, stop
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
    eq(c, 0, "submit and wait: " .. out .. e .. read_file(wd .. "/shard_0.log"))
    check(out:find("tasks: 4 done; merge: done", 1, true), out)
    c, out = emmy({ "slurm", "status", wd }, { env = env })
    eq(c, 0, "status")
    check(out:find("4 done", 1, true), out)
    c, _, e = emmy({ "compile", model[1], model[2], model[3], model[4], model[5], "--nvrtc", "--sample", "2", "--results", dir .. "/one.jsonl" },
      { env = cache })
    eq(c, 0, "one process: " .. e)
    local one, merged = read_file(dir .. "/one.jsonl"), read_file(wd .. "/results.jsonl")
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
    check(read_file(wd .. "/results.jsonl") == one, "the merge after the resubmitted task")
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
    eq(c, 0, "submit and wait: " .. out .. e .. read_file(wd .. "/shard_0.log") .. read_file(wd .. "/merge.log"))
    check(out:find("tasks: 2 done; merge: done", 1, true), out)
    local tunedb = require "emmy.tunedb"
    local db = assert(tunedb.open(wd .. "/tune.db", { readonly = true }))
    local ks = assert(db.h:rows("SELECT name FROM kernels ORDER BY name"))
    db:close()
    eq(#ks, 2, "both shards' kernels in the merged DB")
    local rep = read_file(wd .. "/report.txt")
    check(rep:find(ks[1].name, 1, true) and rep:find(ks[2].name, 1, true), "the report names both kernels: " .. rep)
    check(sys.stat(dir .. "/online.json") == "file", "the merge refit the prior")
    c, out = emmy({ "slurm", "tune", graph, "--shards", "2", "--work-dir", wd .. "2", "--dry-run" }, { env = tenv })
    eq(c, 0, "dry run")
    check(out:find("--gres=gpu:1", 1, true) and out:find("--shard", 1, true) and out:find("db merge", 1, true), out)
  end)
  stop()
  if not ok then error(err, 0) end
end)

test("bench/slurm.lua: one process against SLURM tasks on a cluster of its own; the results equal, the timeline printed", function()
  local okc, why = pcall(function()
    local _, stop = cluster(os.tmpname() .. ".probe") -- (skips, with the reason, where there is no local SLURM)
    stop()
  end)
  if not okc then error(why, 0) end
  local code, out, err = emmy({ ROOT .. "/bench/slurm.lua", "--model", "TinyLlama/TinyLlama-1.1B-Chat-v1.0", "--shards", "2",
    "--sample", "1", "--runs", "1" })
  eq(code, 0, out .. err)
  check(out:find("run 1: one process [%d.]+ s, 2 SLURM tasks and the merge [%d.]+ s: [%d.]+x; the merged results equal one process's"), out)
  check(out:find("the last run's timeline (slurmctld):", 1, true) and out:find("sched: Allocate", 1, true), out)
end)

return T
