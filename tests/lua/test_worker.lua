-- The bench worker's process plumbing (emmy.worker, scripts/worker/main.lua, sys.spawn) without a GPU: requests
-- and answers as JSON lines, a child that dies or hangs becomes a "crashed" / "timeout" answer and is replaced,
-- unknown requests are answered, and on a machine without a GPU a bench request says so.
local worker = require "emmy.worker"
local sys = require "emmy.sys"

local T = {}
local function test(name, fn) T[#T + 1] = { name, fn } end

test("sys.spawn: lines both ways, a deadline, the way a child ended", function()
  local p = assert(sys.spawn { "sh", "-c", "while read l; do echo got:$l; done" })
  assert(p:send("hello"))
  eq(p:recv(5000), "got:hello", "answer")
  local none, why = p:recv(100)
  check(none == nil and why == "timeout", tostring(why))
  p:kill()
  p:kill()
  local q = assert(sys.spawn { "sh", "-c", "echo one; exit 7" })
  eq(q:recv(5000), "one", "a line before exiting")
  local _, how = q:recv(5000)
  eq(how, "exited: status 7", "the exit status")
  local ok, err = q:send("x")
  check(not ok and err:find("exited", 1, true), tostring(err))
end)

test("worker: faults and hangs are answers, the worker is replaced, the next request is served", function()
  local w = assert(worker.start { test = true })
  local a = w:call({ op = "ping" }, 10000)
  eq(a.status, "ok", "ping")
  local k = w:call({ op = "kill" }, 10000)
  eq(k.status, "crashed", "a child killed by a signal")
  check(k.error:find("signal 9", 1, true), k.error)
  local b = w:call({ op = "ping" }, 10000)
  eq(b.status, "ok", "a fresh child answers")
  check(b.pid ~= a.pid, "it is another process")
  local h = w:call({ op = "hang" }, 300)
  eq(h.status, "timeout", "a hang past the deadline")
  local e = w:call({ op = "exit" }, 10000)
  eq(e.status, "crashed", "a child that exits")
  eq(w:call({ op = "nope" }, 10000).status, "bad_request", "unknown op")
  eq(w.restarts, 3, "three replacements")
  w:close()
end)

test("worker: a bench request on a machine without a GPU says so", function()
  if sys.cuda() then skip("this machine has a GPU") end
  local w = assert(worker.start())
  local r = w:call({ op = "bench", repro = ROOT .. "/tests/fixtures/block.torch.json", bind = { seq_len = 5 } }, 30000)
  eq(r.status, "no_gpu", "status")
  check(r.error and #r.error > 0, "the reason")
  w:close()
end)

test("gpu.time_retrying: an invalidated capture is captured once more and its error kept; other failures are not retried", function()
  local gpu = require "emmy.gpu"
  local function ctx(answers)
    local c = { calls = 0 }
    function c:time() self.calls = self.calls + 1 local a = answers[self.calls] return a[1], a[2] end
    function c:lost() return false end
    return c
  end
  local inv = "cuLaunchKernel(k): CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: operation failed due to a previous error during capture"
  local c = ctx { { nil, inv }, { { median_us = 3 } } }
  local t, err, first = gpu.time_retrying(c, function() end, {})
  check(t and t.median_us == 3 and err == nil and first == inv and c.calls == 2, "retried once, the first error kept")
  c = ctx { { nil, inv }, { nil, "cuLaunchKernel(k): CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES" } }
  t, err, first = gpu.time_retrying(c, function() end, {})
  check(not t and err:find("OUT_OF_RESOURCES (captured twice; the first: cuLaunchKernel(k): CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", 1, true)
    and first == inv, tostring(err))
  c = ctx { { nil, "cuLaunchKernel(k): CUDA_ERROR_INVALID_VALUE" }, { { median_us = 1 } } }
  t, err, first = gpu.time_retrying(c, function() end, {})
  check(not t and err:find("INVALID_VALUE", 1, true) and first == nil and c.calls == 1, "not retried")
  c = ctx { { { median_us = 2 } } }
  t = gpu.time_retrying(c, function() end, {})
  check(t.median_us == 2 and c.calls == 1, "a first success is the answer")
end)

test("gpu.upload_inputs: a kernel input from the reference, else the inputs, else a buffer held; none names it", function()
  local gpu = require "emmy.gpu"
  local kg = { inputs = function() return { { name = "x" }, { name = "w" } } end }
  local cu = { upload = function(_, t) return { from = t } end }
  local kb = gpu.upload_inputs(cu, kg, { x = "rx" }, { x = "ix", w = "iw" })
  check(kb.x.from == "rx" and kb.w.from == "iw", "the reference first, then the inputs")
  kb = gpu.upload_inputs(cu, kg, { x = "rx" }, nil, { w = "held" })
  check(kb.w == "held" and kb.x.from == "rx", "a held buffer as it is")
  local ok, err = pcall(gpu.upload_inputs, cu, kg, { x = "rx" }, {})
  check(not ok and err == "kernel input w has no value: neither the reference nor the inputs hold that name", tostring(err))
  cu.upload = function() return nil, "out of memory" end
  ok, err = pcall(gpu.upload_inputs, cu, kg, { x = "rx", w = "rw" }, {})
  check(not ok and err == "upload of kernel input x: out of memory", tostring(err))
end)

-- The tune's bookkeeping, end to end, against the mock driver (tests/fixtures/cuda_mock.c): the mock loads no
-- emitted kernel, so every variant is a load_fail row — which is what this test is about: the search, the worker
-- and the DB agree, failures are rows, and a re-run serves every row from the DB (a killed tune resumes).
test("emmy tune with the mock driver: failures are rows, a re-run re-measures nothing, more patience adds only new rows, --gpus 2 shares the kernels", function()
  local d = tmpdir()
  local so = mock_driver_so(d)
  local env = ("EMMY_LIBCUDA=%s EMMY_TUNE_DB=%s/tune.db EMMY_CUBIN_CACHE=%s/cubin EMMY_ONLINE_FILE=%s/online.json"):format(so, d, d, d)
  local L0 = { "tune", "Qwen/Qwen3-Embedding-0.6B", "--layer", "0", "--dynamic", "seq_len@x:1", "--precompile", "2" }
  local function tune(extra)
    local a = {}
    for _, x in ipairs(L0) do a[#a + 1] = x end
    for _, x in ipairs(extra) do a[#a + 1] = x end
    local c, o, e = emmy(a, { env = env })
    eq(c, 0, "tune exit: " .. e)
    return o
  end
  local o1 = tune { "--clean", "--patience", "2" }
  check(o1:find("16 variants benched, 0 served from the tune DB; load_fail 16", 1, true), o1)
  -- every build of the worker finds its compile ahead in the cubin cache (the time line's tally)
  check(o1:find("threads: ok %d+%)") and o1:find("cubin cache hits 16 of 16 builds)", 1, true), o1)
  local o2 = tune { "--patience", "2" }
  check(o2:find("0 variants benched, 16 served from the tune DB", 1, true), "resume: " .. o2)
  local o3 = tune { "--patience", "3" }
  check(o3:find("8 variants benched, 16 served from the tune DB", 1, true), "more patience: " .. o3)
  local db = assert(require("emmy.sqlite").open(d .. "/tune.db"))
  eq(db:rows("SELECT COUNT(*) AS n FROM measurements")[1].n, 24, "rows in the DB")
  eq(db:rows("SELECT COUNT(*) AS n FROM runs WHERE ended IS NOT NULL")[1].n, 3, "three finished runs")
  db:close()
  -- --gpus 2: two workers (the mock's two devices) share the kernels and one DB; a third device does not exist
  local env2 = ("EMMY_MOCK_DEVICES=2 EMMY_LIBCUDA=%s EMMY_TUNE_DB=%s/tune2.db EMMY_CUBIN_CACHE=%s/cubin EMMY_ONLINE_FILE=%s/online2.json"):format(so, d, d, d)
  local a2 = { "--clean", "--patience", "2", "--gpus", "2", "--dump-dir", d .. "/g2" }
  for i = #L0, 1, -1 do table.insert(a2, 1, L0[i]) end
  local c5, o5, e5 = emmy(a2, { env = env2 })
  eq(c5, 0, "--gpus 2: " .. e5)
  check(o5:find("16 variants benched, 0 served from the tune DB; load_fail 16 (deploy regime, at the hints, 2 GPUs)", 1, true), o5)
  check(o5:find("run 1 recorded 16 rows (load_fail 16), as benched", 1, true), o5)
  local j = require("cjson").decode(assert(io.open(d .. "/g2/tune.json")):read("*a"))
  local devs = {}
  for _, k in ipairs(j.kernels) do devs[k.device] = (devs[k.device] or 0) + 1 end
  check(#j.kernels == 8 and (devs[0] or 0) > 0 and (devs[1] or 0) > 0, "both workers tuned kernels: " .. require("cjson").encode(devs))
  a2[#a2 - 2] = "3"
  local c6, _, e6 = emmy(a2, { env = env2 })
  check(c6 == 1 and #lines_of(e6) == 1 and e6:find("--gpus 3: device 2", 1, true), e6)
  -- every structural fork: 64 assignments form 20 distinct kernel sets of 45 distinct kernels, each tuned once
  -- (ROPE_EPI=0 changes nothing in Qwen3 and turns NORM_EPI off; MERGE_SIBLINGS=1 with DUAL_GATE=0 merges gate/up too,
  -- with DUAL_GATE=1 only q/k/v: the same merged q|k|v kernel in both)
  local a3 = { "tune", "Qwen/Qwen3-Embedding-0.6B", "--layer", "0", "--dynamic", "seq_len@x:1", "--precompile", "0",
    "--patience", "1", "--clean", "--structural", "all" }
  local c7, o7, e7 = emmy(a3, { env = env })
  eq(c7, 0, "--structural all: " .. e7)
  check(o7:find("tuning 45 distinct kernels of 24 structural forks (64 assignments)", 1, true), o7)
  check(o7:find("structural forks, priced by the sum of their kernel instances' best µs", 1, true), o7)
  check(o7:find("45 variants benched", 1, true), o7)
  local c8, _, e8 = emmy({ "tune", "x.torch.json", "--structural", "some" })
  check(c8 ~= 0 and #lines_of(e8) >= 1 and e8:find("--structural some (all or default)", 1, true), "usage error: " .. e8)
  -- without a driver: one line, exit 1
  local c4, _, e4 = emmy(L0, { env = "EMMY_LIBCUDA=/nonexistent/libcuda.so" })
  check(c4 == 1 and #lines_of(e4) == 1 and e4:find("emmy tune needs a GPU", 1, true), e4)
end)

test("emmy tune: the worker's builds meet the compiles ahead after a launch (a grid's cdiv evaluated leaves the graph as it was)", function()
  local d = tmpdir()
  local so = mock_driver_so(d)
  -- a dynamic projection's reproducer: its persistent grid is a cdiv of seq_len; the mock runs any kernel as a no-op
  -- (every row is wrong, after a real launch)
  local c0, _, e0 = emmy({ "compile", "Qwen/Qwen3-Embedding-0.6B", "--layer", "0", "--dynamic", "seq_len@x:1", "--kernel",
    "k_linear_add", "--dump-dir", d .. "/dump" })
  eq(c0, 0, e0)
  local repro
  for _, f in ipairs(sys.listdir(d .. "/dump/40_lowering_cuda.kernels") or {}) do
    if f:match("^k_linear_add_.*%.torch%.json$") then repro = d .. "/dump/40_lowering_cuda.kernels/" .. f end
  end
  check(repro, "a k_linear_add reproducer in the dump")
  local env = ("EMMY_MOCK_ANY_KERNEL=1 EMMY_MOCK_SMS=132 EMMY_LIBCUDA=%s EMMY_TUNE_DB=%s/tune.db EMMY_CUBIN_CACHE=%s/cubin EMMY_ONLINE_FILE=%s/online.json")
    :format(so, d, d, d)
  local c, o, e = emmy({ "tune", repro, "--patience", "6" }, { env = env })
  eq(c, 0, "tune exit: " .. e)
  check(o:find("wrong 6", 1, true) and o:find("cubin cache hits 6 of 6 builds)", 1, true), o)
  -- the warm regime: its own rows (another context), the same variants from the cache
  local cw, ow, ew = emmy({ "tune", repro, "--patience", "6", "--regime", "warm" }, { env = env })
  eq(cw, 0, "tune exit: " .. ew)
  check(ow:find("6 variants benched, 0 served from the tune DB; wrong 6 (warm regime", 1, true), ow)
  local db = assert(require("emmy.sqlite").open(d .. "/tune.db"))
  eq(#db:rows("SELECT id FROM contexts WHERE regime = 'warm'"), 1, "a warm context")
  db:close()
end)

test("tune's warm floor: a pick slower L2-warm than the rules' default keeps the default; a faster one stays", function()
  local tuner = require "emmy.tuner"
  -- a worker that answers each bench request at once with us_of(knobs, request)
  local function fake_worker(us_of)
    local pending
    return { submit = function(_, req) pending = req end, close = function() end,
      poll = function()
        local r = pending
        pending = nil
        return r and { status = "ok", median_us = us_of(r.knobs, r) }
      end }
  end
  local function session(pick_string, us_of)
    local def = { string = "STAGES=6", knobs = { STAGES = 6 } }
    local pick = { string = pick_string, knobs = { STAGES = tonumber(pick_string:match("%d+")) } }
    return { opts = { regime = "deploy" }, workers = { { w = fake_worker(us_of), device = 0 } },
      plans = { { candidates = { def, pick } } }, state = { { K = { repro = "r.torch.json" } } }, spent = {},
      picks = { { name = "k", best_knobs = pick.string, best_us = 53.1, default_us = 55.0, best_at = 7 } },
      rows = { { "k", "2", "7", "patience", "53.1", pick.string } } }
  end
  -- (Qwen3-4B's down projection on the H100: the pick 54.9 us warm against the default's 45.8)
  local T = session("STAGES=8", function(k, req)
    check(req.flush == false and req.graph == true and req.repro == "r.torch.json", "the bench regime, the kernel's reproducer")
    return k.STAGES == 8 and 54.9 or 45.8
  end)
  tuner.each_kernel(T, tuner.warm_floor)
  local pk = T.picks[1]
  eq(pk.best_knobs, "STAGES=6", "the default kept")
  eq(pk.best_us, 55.0, "its deploy-regime time")
  eq(pk.floor.knobs, "STAGES=8", "the pick on record")
  eq(pk.floor.warm_us, 54.9)
  eq(T.rows[1][4], "patience+floor")
  eq(T.rows[1][6], "STAGES=6")
  local T2 = session("STAGES=4", function(k) return k.STAGES == 4 and 45.0 or 45.8 end)
  tuner.each_kernel(T2, tuner.warm_floor)
  eq(T2.picks[1].best_knobs, "STAGES=4", "a pick faster warm too stays")
  eq(T2.picks[1].floor, nil)
  eq(T2.picks[1].warm.default_us, 45.8)
  -- within 2%: the pick stays; the rank regime (no flush) is not checked
  local T3 = session("STAGES=8", function(k) return k.STAGES == 8 and 46.5 or 45.8 end)
  tuner.each_kernel(T3, tuner.warm_floor)
  eq(T3.picks[1].best_knobs, "STAGES=8", "within the floor's 2%")
  local T4 = session("STAGES=8", function() error("no request in the rank regime") end)
  T4.opts.regime = "rank"
  tuner.each_kernel(T4, tuner.warm_floor)
  eq(T4.picks[1].best_knobs, "STAGES=8")
end)

test("the deploy regime's flush: a read by default, EMMY_FLUSH=memset the memset; the tune DB's regime names them apart", function()
  local tuner = require "emmy.tuner"
  local saved = os.getenv("EMMY_FLUSH")
  check(saved == nil or saved == "", "the test runs without EMMY_FLUSH")
  eq(tuner.REGIMES.deploy.flush, "read")
  eq(tuner.deploy_flush(), "read")
  eq(tuner.db_regime("deploy"), "deploy-read")
  eq(tuner.db_regime("warm"), "warm")
  eq(tuner.db_regime("rank"), "rank")
  local T = tuner.session { opts = { regime = "deploy" }, dev = {}, gi = {}, workers = {}, plans = {}, ctx = 1 }
  eq(T.req_base.flush, "read", "the worker's request asks for the read")
  local Tw = tuner.session { opts = { regime = "warm" }, dev = {}, gi = {}, workers = {}, plans = {}, ctx = 1 }
  eq(Tw.req_base.flush, false)
  -- an EMMY_FLUSH that is neither is one line before the tune measures anything
  local code, _, err = emmy({ "tune", "Qwen/Qwen3-Embedding-0.6B", "--layer", "0" }, { env = "EMMY_FLUSH=write EMMY_LIBCUDA=/nonexistent" })
  check(code ~= 0, "refused")
  check(err:find("tune: EMMY_FLUSH=write: memset or read", 1, true) and not err:find("CUDA driver", 1, true), err)
end)

return T
