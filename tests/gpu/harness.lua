-- tests/gpu/harness.lua — what the GPU test scripts (test_tune, test_bench, test_eval) share:
--   local H = dofile(EMMY_HOME .. "/tests/gpu/harness.lua")
-- H.EXE (this emmy), H.OUT ($OUT or /tmp: logs), H.T (a fresh scratch folder), H.L0 and H.WHOLE (Qwen3 layer 0 and
-- the whole model with their dynamic specs), H.wanted(part) (the parts named on the command line, all when none;
-- H.want: the set of those named), H.result(ok, name, msg) (an ok/FAIL line, counted), H.run(cmd, log) -> exit
-- 0|1, the log's text, seconds, and H.finish(what) (removes H.T, prints the PASS/FAIL line with the counts, exits).
io.stdout:setvbuf("line") -- a run cut short by a deadline keeps what it printed
local sys = require "emmy.sys"

local H = {}
H.EXE = sys.realpath("/proc/self/exe")
H.OUT = os.getenv("OUT") or "/tmp"
H.T = os.tmpname()
os.remove(H.T)
assert(sys.mkdir_p(H.T))
H.L0 = "Qwen/Qwen3-Embedding-0.6B --layer 0 --dynamic seq_len@x:1"
H.WHOLE = "Qwen/Qwen3-Embedding-0.6B --dynamic seq_len@input_ids:1 --dynamic seq_len@attention_mask:2 " ..
  "--dynamic seq_len@attention_mask:3 --dynamic seq_len@position_ids:1"

local want = {}
for _, a in ipairs(arg or {}) do want[a] = true end
H.want = want -- (the parts named: a part that runs only when named, or by default only on some hosts, reads it)
function H.wanted(part) return next(want) == nil or want[part] == true end

local passed, failed = 0, 0
function H.result(ok, name, msg)
  if ok then passed = passed + 1 else failed = failed + 1 end
  print(("%s %s%s"):format(ok and "ok  " or "FAIL", name, msg and (": " .. msg) or ""))
end

-- Runs shell command cmd with its output in file log; returns 0 (success) or 1, the log's text and the seconds taken.
function H.run(cmd, log)
  local t0 = sys.clock()
  local code = os.execute(("%s > %s 2>&1"):format(cmd, log))
  local f = io.open(log)
  local out = f and f:read("*a") or ""
  if f then f:close() end
  return (code == 0 or code == true) and 0 or 1, out, sys.clock() - t0
end

function H.finish(what)
  os.execute("rm -rf " .. H.T)
  print(("%s: %s, %d passed, %d failed"):format(failed == 0 and "PASS" or "FAIL", what, passed, failed))
  os.exit(failed == 0 and 0 or 1)
end

return H
