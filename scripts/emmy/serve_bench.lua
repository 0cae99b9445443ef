-- emmy serve --bench: the server as a child process (emmy's, or the stock one in tools/torchref) driven by the
-- load client at each (concurrency, range ratio) point, or soaked; the tables printed and the JSON written
-- (scripts/commands/serve.lua parses the flags; emmy.serve has the server, the load client and the soak).
local cli = require "emmy.cli"
local serve = require "emmy.serve"

local M = {}

local shq = cli.shell_quote

-- --json FILE: t written there (nothing without the flag)
local function write_json(opts, t)
  if not opts.json then return end
  local f = assert(io.open(opts.json, "w"))
  f:write(require("cjson").encode(t), "\n")
  f:close()
end

-- --bench --soak: the soak's table (a row a tenth of the run) and verdict; exit 1 when a well-formed request failed,
-- a malformed one was not answered 4xx, or the server's resident memory grew more than 5% after the first quarter.
local function soak_report(res, model, opts, c, r)
  print(("emmy serve %s soak%s: %.0f s at concurrency %d, %d-token prompts (range ratio %g), %.0f%% malformed"):format(model,
    opts.stock and (" (stock, %s)"):format(opts.stock) or "", res.duration_s, c, opts.random_input_len, r, 100 * opts.malformed))
  local rows, step = {}, math.max(1, math.floor(#res.samples / 10))
  for i, sm in ipairs(res.samples) do
    if i % step == 0 or i == #res.samples then
      rows[#rows + 1] = { ("%.0f"):format(sm.t), sm.ok, sm.failed, sm.malformed_4xx, sm.malformed_other,
        sm.rss_mb and ("%.0f"):format(sm.rss_mb) or "-" }
    end
  end
  require("emmy.tbl").print { header = { "s", "ok", "failed", "malformed 4xx", "malformed other", "resident MB" }, rows = rows,
    align = "rrrrrr" }
  local flat = res.rss_growth and res.rss_growth <= 0.05
  print(("%d well-formed requests answered, %d failed; %d malformed answered 4xx, %d otherwise; %.0f tok/s; resident %s"):format(
    res.ok, res.failed, res.malformed_4xx, res.malformed_other, res.token_throughput,
    res.rss_growth and ("%.0f MB at a quarter of the run, %.0f MB at its end (%+.1f%%: %s)"):format(res.rss_start_mb,
      res.rss_end_mb, 100 * res.rss_growth, flat and "flat" or "GROWING") or "not read (no /proc entry for the server)"))
  write_json(opts, res)
  return (res.failed == 0 and res.malformed_other == 0 and flat ~= false) and 0 or 1
end

-- The comma-separated numbers of a --bench flag's value (each checked by ok, which names the form in its message).
local function numbers(flag, v, ok, form)
  local out = {}
  for x in tostring(v):gmatch("[^,]+") do
    local n = tonumber(x)
    if not n or not ok(n) then cli.usage("%s %s: %s", flag, x, form) end
    out[#out + 1] = n
  end
  if #out == 0 then cli.usage("%s: %s", flag, form) end
  return out
end

-- The server as a child process (`emmy serve … --port 0`, or the stock server), waited for until it listens:
-- {port, pid, stop()}; a child that fails to start is one line and exit 1.
local function start_server(model, opts, max_queue)
  local sys = require "emmy.sys"
  local pf, pidf, logf = os.tmpname(), os.tmpname(), os.tmpname()
  os.remove(pf)
  local child = { "serve", model, "--device", opts.device, "--port", "0", "--port-file", pf, "--seed", opts.seed,
    "--max-queue", max_queue, "--max-payload", opts.max_payload, "--host", opts.host }
  if opts.max_len then child[#child + 1] = "--max-len"; child[#child + 1] = opts.max_len end
  if opts.truncate then child[#child + 1] = "--truncate" end
  if opts.max_batch_tokens then child[#child + 1] = "--max-batch-tokens"; child[#child + 1] = opts.max_batch_tokens end
  child[#child + 1] = "--graph-step"; child[#child + 1] = opts.graph_step
  child[#child + 1] = "--inflight"; child[#child + 1] = opts.inflight
  if opts.varlen then child[#child + 1] = "--varlen" end
  if opts.mask then child[#child + 1] = "--mask" end
  if opts.picks then child[#child + 1] = "--picks"; child[#child + 1] = opts.picks end
  local argv = {}
  for i, a in ipairs(child) do argv[i] = shq(a) end
  local exe = shq(sys.realpath("/proc/self/exe"))
  if opts.stock then -- the stock baseline: the same model in transformers behind the same API (tools/torchref)
    if opts.stock ~= "eager" and opts.stock ~= "compile" then cli.usage("--stock %s: eager or compile", opts.stock) end
    exe = ("%s %s"):format(shq(os.getenv("EMMY_PYTHON") or "python3"), shq(EMMY_HOME .. "/tools/torchref/stock_serve.py"))
    argv = { shq(require("emmy.frontend").model(model).dir), "--port", "0", "--port-file", shq(pf), "--host", shq(opts.host),
      "--max-batch-tokens", tostring(opts.max_batch_tokens or 2048) }
    if opts.stock == "compile" then argv[#argv + 1] = "--compile" end
  end
  local script = os.tmpname()
  local sf = assert(io.open(script, "w"))
  sf:write(("echo $$ > %s\nexec %s %s\n"):format(shq(pidf), exe, table.concat(argv, " ")))
  sf:close()
  os.execute(("sh %s > %s 2>&1 &"):format(shq(script), shq(logf)))
  local port
  local t0 = sys.clock()
  while not port do
    local f = io.open(pf)
    if f then port = tonumber(f:read("*a")); f:close() end
    local lf = io.open(logf)
    local text = lf and lf:read("*a") or ""
    if lf then lf:close() end
    local failed = text:find("\nemmy: ", 1, true) or text:match("^emmy: ") or text:find("Traceback", 1, true)
    for line in text:gmatch("[^\n]+") do
      if line:match("^stock_serve: ") and not line:match("^stock_serve: serving ") then failed = true end
    end
    if not port and not failed then -- (a child that exited without a word: its log, or that it exited)
      local pf2 = io.open(pidf)
      local cpid = pf2 and (pf2:read("*a") or ""):match("%d+")
      if pf2 then pf2:close() end
      local alive = cpid and os.execute("kill -0 " .. cpid .. " 2>/dev/null")
      if cpid and alive ~= 0 and alive ~= true and not sys.stat(pf) then
        failed, text = true, text ~= "" and text or "the server exited without a word"
      end
    end
    if not port and failed then cli.fail("the server did not start: %s", (text:gsub("\n", " | "))) end
    if not port then
      if sys.clock() - t0 > 1800 then cli.fail("the server did not start within 30 minutes: %s", text) end
      os.execute("sleep 0.2")
    end
  end
  local pid = io.open(pidf):read("*a"):match("%d+")
  return { port = port, pid = pid, started_s = sys.clock() - t0, stop = function()
    if pid then os.execute("kill " .. pid .. " 2>/dev/null") end
    os.remove(pf); os.remove(pidf); os.remove(logf); os.remove(script)
  end }
end

-- The emmy GPU server's own account from /metrics (cumulative): {device_s, run_tokens, host = {parse, pack, upload,
-- download, answer}}, or nil (the CPU server, the stock one).
local function server_account(opts, port)
  local st, text = require("emmy.http_c").request(opts.host, port, "GET", "/metrics")
  if st ~= 200 or not text then return nil end
  local dev = tonumber(text:match("\nemmy_device_seconds_total ([%d.eE+-]+)"))
  if not dev then return nil end
  local a = { device_s = dev, run_tokens = tonumber(text:match("\nemmy_run_tokens_total (%d+)")) or 0, host = {} }
  for ph in ("parse pack upload download answer"):gmatch("%a+") do
    a.host[ph] = tonumber(text:match('\nemmy_host_seconds_total{phase="' .. ph .. '"} ([%d.eE+-]+)')) or 0
  end
  return a
end

-- One load point (concurrency c, range ratio r) against the running server: the bench's summary with the server's
-- account over the point (device_s, device_share, run_tokens, padding_share, host_s).
local function bench_point(model, opts, port, vocab, c, r)
  local prompts = serve.prompts(opts.num_prompts, opts.random_input_len, r, vocab, opts.seed)
  local before = server_account(opts, port)
  local res, err = serve.bench(opts.host, port, prompts, c)
  if not res then return nil, err end
  local after = before and server_account(opts, port)
  if after then
    res.device_s = after.device_s - before.device_s
    if res.duration_s > 0 then res.device_share = res.device_s / res.duration_s end
    res.run_tokens = after.run_tokens - before.run_tokens
    if res.run_tokens > 0 then res.padding_share = 1 - res.input_tokens / res.run_tokens end
    res.host_s = {}
    for ph, v in pairs(after.host) do res.host_s[ph] = v - before.host[ph] end
  end
  res.model, res.device, res.num_prompts, res.random_input_len, res.random_range_ratio, res.seed =
    model, opts.device, opts.num_prompts, opts.random_input_len, r, opts.seed
  res.server = opts.stock and ("stock (transformers, %s)"):format(opts.stock == "compile" and "torch.compile" or "eager") or "emmy"
  return res
end

-- One point printed as before: its summary line, table and the server's account.
local function print_point(res, model, opts)
  print(("%s serve %s (--device %s): %d prompts, input len %d, range ratio %g, concurrency %d"):format(
    opts.stock and res.server or "emmy", model, opts.stock and "cuda" or opts.device, opts.num_prompts, opts.random_input_len,
    res.random_range_ratio, res.concurrency))
  require("emmy.tbl").print { header = { "successful", "failed", "duration s", "input tokens", "req/s", "tok/s", "latency mean ms",
    "median ms", "p99 ms" }, rows = { { res.successful, res.failed, ("%.2f"):format(res.duration_s), res.input_tokens,
    ("%.2f"):format(res.request_throughput), ("%.1f"):format(res.token_throughput), ("%.1f"):format(res.latency_mean_ms),
    ("%.1f"):format(res.latency_median_ms), ("%.1f"):format(res.latency_p99_ms) } }, align = "rrrrrrrrr" }
  if res.device_share then
    print(("the model ran %.1f%% of the bench's %.2f s (%.2f s: its runs' GPU time, by CUDA events); the rest is the server's own work and its waits for requests%s")
      :format(100 * res.device_share, res.duration_s, res.device_s,
        res.padding_share and (", %.1f%% of the tokens run padding to a CUDA graph's bucket"):format(100 * res.padding_share) or ""))
  end
  if res.host_s then
    print(("the host's own work around the runs: parsing requests %.3f s, packing %.3f s, uploads %.3f s, reading back and pooling %.3f s, writing answers %.3f s"):format(
      res.host_s.parse, res.host_s.pack, res.host_s.upload, res.host_s.download, res.host_s.answer))
  end
end

-- The server's host work a request (its phases summed over the successful requests), µs, or "-".
local function host_us(r)
  if not r.host_s or r.successful == 0 then return "-" end
  local t = 0
  for _, v in pairs(r.host_s) do t = t + v end
  return ("%.0f"):format(1e6 * t / r.successful)
end

-- Several points against one server: one table, a row a point.
local function print_points(points, model, opts)
  print(("%s serve %s (--device %s): %d prompts a point, input len %d"):format(opts.stock and points[1].server or "emmy", model,
    opts.stock and "cuda" or opts.device, opts.num_prompts, opts.random_input_len))
  local rows = {}
  for _, r in ipairs(points) do
    rows[#rows + 1] = { r.concurrency, ("%g"):format(r.random_range_ratio), r.successful, r.failed, ("%.2f"):format(r.duration_s),
      ("%.1f"):format(r.token_throughput), ("%.1f"):format(r.latency_mean_ms), ("%.1f"):format(r.latency_median_ms),
      ("%.1f"):format(r.latency_p99_ms), r.device_share and ("%.1f%%"):format(100 * r.device_share) or "-",
      r.padding_share and ("%.1f%%"):format(100 * r.padding_share) or "-", host_us(r) }
  end
  require("emmy.tbl").print { header = { "concurrency", "range ratio", "successful", "failed", "duration s", "tok/s",
    "latency mean ms", "median ms", "p99 ms", "model's share", "padding", "host µs a request" }, rows = rows, align = "rrrrrrrrrrrr" }
  print("model's share: the runs' GPU time (CUDA events) over the point's duration; the rest is the server's own work and its waits")
  if points[1].host_s then
    print("host µs a request: the server's parsing, packing, uploads, reading back and pooling, and answers' writing over the requests answered")
  end
end

-- Every (concurrency, range ratio) point against the started server srv, which it stops: the points and their
-- failed requests' count.
local function run_points(model, opts, log, srv, vocab, concs, ratios)
  local points, failed = {}, 0
  for _, c in ipairs(concs) do
    for _, r in ipairs(ratios) do
      local res, err = bench_point(model, opts, srv.port, vocab, c, r)
      if not res then srv.stop(); cli.fail("%s", err) end
      if #concs * #ratios > 1 then log(("%sconcurrency %d, range ratio %g: %.1f tok/s, p99 %.1f ms"):format(
        opts.stock and "stock: " or "", c, r, res.token_throughput, res.latency_p99_ms)) end
      points[#points + 1], failed = res, failed + res.failed
    end
  end
  srv.stop()
  return points, failed
end

-- --vs-stock: emmy's points and the stock server's (the same prompts) as one table, a row a point.
local function print_versus(points, spoints, model, opts)
  print(("emmy against the stock server (transformers, %s) on %s: %d prompts a point, input len %d"):format(
    opts.vs_stock == "compile" and "torch.compile" or "eager", model, opts.num_prompts, opts.random_input_len))
  local rows = {}
  for i, r in ipairs(points) do
    local q = spoints[i]
    rows[#rows + 1] = { r.concurrency, ("%g"):format(r.random_range_ratio), ("%.1f"):format(r.token_throughput),
      ("%.1f"):format(q.token_throughput), q.token_throughput > 0 and ("%.2fx"):format(r.token_throughput / q.token_throughput) or "-",
      ("%.1f / %.1f"):format(r.latency_mean_ms, r.latency_p99_ms), ("%.1f / %.1f"):format(q.latency_mean_ms, q.latency_p99_ms),
      ("%d / %d"):format(r.failed, q.failed), r.device_share and ("%.1f%%"):format(100 * r.device_share) or "-", host_us(r) }
  end
  require("emmy.tbl").print { header = { "concurrency", "range ratio", "emmy tok/s", "stock tok/s", "emmy / stock",
    "emmy mean / p99 ms", "stock mean / p99 ms", "failed (emmy / stock)", "emmy's model share", "emmy host µs a request" },
    rows = rows, align = "rrrrrrrrrr" }
  print("emmy's model share: its runs' GPU time (CUDA events) over the point's duration; host µs a request: its parsing, packing, uploads, reading back and pooling, and answers' writing")
end

-- --bench: the server as a child process, driven with random prompts of token ids by the load client in this one at
-- each (concurrency, range ratio) point in turn (one server for all), or soaked; the summary printed and, with --json,
-- written (one point: its object; several: {points = [...]}).
function M.run(model, opts, log)
  local concs = numbers("--max-concurrency", opts.max_concurrency, function(n) return n >= 1 and n == math.floor(n) end,
    "an integer >= 1 (or a comma-separated list)")
  local ratios = numbers("--random-range-ratio", opts.random_range_ratio, function(n) return n >= 0 and n < 1 end,
    "0 <= R < 1 (or a comma-separated list)")
  if opts.malformed < 0 or opts.malformed >= 1 then cli.usage("--malformed %g: 0 <= F < 1", opts.malformed) end
  if opts.vs_stock then
    if opts.stock or opts.soak then cli.usage("--vs-stock: not with %s", opts.stock and "--stock" or "--soak") end
    if opts.vs_stock ~= "eager" and opts.vs_stock ~= "compile" then cli.usage("--vs-stock %s: eager or compile", opts.vs_stock) end
  end
  local vocab = require("emmy.frontend").model(model).cfg.vocab_size
  local srv = start_server(model, opts, opts.num_prompts + 1)
  log(("server up on port %d after %.1f s; %d prompts of %d tokens a point, %d point%s"):format(srv.port, srv.started_s,
    opts.num_prompts, opts.random_input_len, #concs * #ratios, #concs * #ratios == 1 and "" or "s"))
  if opts.soak then
    local cfg = require("emmy.frontend").model(model).cfg
    local prompts = serve.prompts(opts.num_prompts, opts.random_input_len, ratios[1], vocab, opts.seed)
    local next_at = 0
    local res, err = serve.soak(opts.host, srv.port, prompts, concs[1], opts.soak, opts.malformed, srv.pid,
      { vocab = vocab, max_len = opts.max_len or cfg.max_position_embeddings or 32768, progress = function(sm)
        if sm.t >= next_at then
          log(("soak %4.0f s: %d ok, %d failed, %d malformed answered 4xx, %d otherwise; server %s MB resident"):format(sm.t,
            sm.ok, sm.failed, sm.malformed_4xx, sm.malformed_other, sm.rss_mb and ("%.0f"):format(sm.rss_mb) or "?"))
          next_at = next_at + math.max(10, opts.soak / 20)
        end
      end })
    srv.stop()
    if not res then cli.fail("%s", err) end
    return soak_report(res, model, opts, concs[1], ratios[1])
  end
  local points, failed = run_points(model, opts, log, srv, vocab, concs, ratios)
  if opts.vs_stock then -- the stock server next, on the same prompts: one table of both
    local sopts = setmetatable({ stock = opts.vs_stock }, { __index = opts })
    local ssrv = start_server(model, sopts, opts.num_prompts + 1)
    log(("stock server (%s) up on port %d after %.1f s"):format(opts.vs_stock, ssrv.port, ssrv.started_s))
    local spoints, sfailed = run_points(model, sopts, log, ssrv, vocab, concs, ratios)
    print_versus(points, spoints, model, opts)
    write_json(opts, { model = model, points = points, stock_points = spoints })
    return failed + sfailed == 0 and 0 or 1
  end
  if #points == 1 then print_point(points[1], model, opts) else print_points(points, model, opts) end
  write_json(opts, #points == 1 and points[1] or { model = model, points = points })
  return failed == 0 and 0 or 1
end

return M
