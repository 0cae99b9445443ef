-- GPU: the bench worker measures every kernel reproducer of Qwen3 layer 0 (chosen knobs) in its child process:
-- each answer is "ok" with a time, and a killed child is replaced without losing the next measurement.
local worker = require "emmy.worker"
local sys = require "emmy.sys"
local d = os.tmpname()
os.remove(d)
assert(os.execute(("%s compile Qwen/Qwen3-Embedding-0.6B --layer 0 --dynamic seq_len@x:1 --dump-dir %s > /dev/null 2>&1")
  :format(sys.realpath("/proc/self/exe"), d)) == 0, "dump")
local kd = d .. "/40_lowering_cuda.kernels"
local w = assert(worker.start { test = true })
local bad, n = 0, 0
for _, f in ipairs(sys.listdir(kd)) do
  if f:match("%.torch%.json$") then
    n = n + 1
    local r = w:call({ op = "bench", repro = kd .. "/" .. f, bind = { seq_len = 513 }, reps = 20 }, 120000)
    print(("%-34s %-12s %s"):format(f, r.status, r.median_us and ("%.1f us"):format(r.median_us) or tostring(r.error)))
    if r.status ~= "ok" then bad = bad + 1 end
    if n == 1 then
      assert(w:call({ op = "kill" }, 10000).status == "crashed", "a planted crash is an answer")
    end
  end
end
w:close()
os.execute("rm -rf " .. d)
print((bad == 0 and "PASS" or "FAIL") .. (": %d reproducers benched by the worker, %d not ok, 1 planted crash survived"):format(n, bad))
os.exit(bad == 0 and 0 or 1)
