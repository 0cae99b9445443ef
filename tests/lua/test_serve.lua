-- emmy serve (scripts/emmy/serve.lua, src/http.c): the routes, OpenAI's embedding schema and its errors on a tiny
-- Qwen3-architecture model folder (config.json and a byte-level tokenizer.json written here; random weights) on
-- the CPU reference, then the same server over HTTP in a child process (keep-alive transport, 413, --requests).
local cjson = require "cjson"
local http = require "emmy.http_c"
local serve = require "emmy.serve"
local sys = require "emmy.sys"

local T = {}
local function test(name, fn) T[#T + 1] = { name, fn } end

local function write_file(path, s)
  local f = assert(io.open(path, "w"))
  f:write(s)
  f:close()
end

-- A tiny model folder: 2 layers of hidden 64, a 1000-token vocabulary, 128 positions; a tokenizer whose
-- vocabulary is a, b, ab and Ġ (a space, byte-level) with the merge "a b".
local DIR
local function model_dir()
  if DIR then return DIR end
  DIR = os.tmpname()
  os.remove(DIR)
  assert(sys.mkdir_p(DIR))
  write_file(DIR .. "/config.json", cjson.encode {
    architectures = { "Qwen3ForCausalLM" }, model_type = "qwen3", hidden_size = 64, intermediate_size = 128,
    num_hidden_layers = 2, num_attention_heads = 4, num_key_value_heads = 2, head_dim = 16, hidden_act = "silu",
    max_position_embeddings = 128, rms_norm_eps = 1e-6, rope_theta = 10000, tie_word_embeddings = true,
    vocab_size = 1000, attention_bias = false, torch_dtype = "bfloat16" })
  write_file(DIR .. "/tokenizer.json", cjson.encode {
    model = { type = "BPE", vocab = { a = 0, b = 1, ab = 2, ["Ġ"] = 3 }, merges = { "a b" } },
    pre_tokenizer = { type = "ByteLevel", add_prefix_space = false, use_regex = true } })
  return DIR
end

local SRV
local function server()
  SRV = SRV or assert(serve.open(model_dir(), { device = "cpu", max_len = 16, max_payload = 2000 }))
  return SRV
end

local function post(path, t)
  local st, out = server():route("POST", path, type(t) == "string" and t or cjson.encode(t))
  return st, cjson.decode(out)
end

local function norm(v)
  local s = 0
  for _, x in ipairs(v) do s = s + x * x end
  return math.sqrt(s)
end

test("ref.pack_ids: the sequences' ids end to end, each token's position in its own sequence, the padding zeros", function()
  local ref = require "emmy.ref"
  local ids, pos = ref.pack_ids({ { 5, 6, 7 }, { 9 }, { 11, 12 } }, 2)
  check(table.concat(ids:to_table(), ",") == "5,6,7,9,11,12,0,0", table.concat(ids:to_table(), ","))
  check(table.concat(pos:to_table(), ",") == "0,1,2,0,0,1,0,1", table.concat(pos:to_table(), ","))
  check(table.concat(ids:shape(), ",") == "1,8" and ids:dtype() == "i64", "shape")
  check(not pcall(ref.pack_ids, { { 1, 2.5 } }, 0), "a fractional id is an error")
end)

test("the packed mask as the device's bytes equals the reference tensor (block-diagonal, causal)", function()
  local ref = require "emmy.ref"
  local lens = { 3, 1, 4, 2 }
  local t, b = ref.packed_mask(lens), ref.packed_mask(lens, "bytes")
  check(#b == 100, "10 x 10 bytes: " .. #b)
  for i = 1, 100 do
    check(t:get(i) == b:byte(i), ("element %d: %s in the tensor, %d in the bytes"):format(i, tostring(t:get(i)), b:byte(i)))
  end
  check(b:byte(1 + 3 * 10 + 3) == 1 and b:byte(1 + 3 * 10 + 2) == 0, "row 3 (the second sequence) sees only itself")
  check(not pcall(ref.packed_mask, lens, "other"), "an unknown form is an error")
end)

test("embeddings: token ids, arrays of them, text; unit vectors; usage counts the tokens", function()
  local st, r = post("/v1/embeddings", { input = { 1, 2, 3 } })
  check(st == 200 and r.object == "list" and #r.data == 1 and #r.data[1].embedding == 64, cjson.encode(r):sub(1, 200))
  check(math.abs(norm(r.data[1].embedding) - 1) < 1e-2, "norm " .. norm(r.data[1].embedding))
  check(r.usage.prompt_tokens == 3 and r.usage.total_tokens == 3, cjson.encode(r.usage))
  st, r = post("/v1/embeddings", { input = { { 1, 2 }, { 4, 5, 6 } } })
  check(st == 200 and #r.data == 2 and r.data[2].index == 1 and r.usage.prompt_tokens == 5, cjson.encode(r):sub(1, 200))
  -- "ab ab": ab, then Ġ ab (the merge applied)
  local st2, t = post("/tokenize", { input = "ab ab" })
  check(st2 == 200 and cjson.encode(t.tokens) == "[2,3,2]" and t.count == 3, cjson.encode(t))
  local st3, r3 = post("/v1/embeddings", { input = "ab ab" })
  local st4, r4 = post("/v1/embeddings", { input = { 2, 3, 2 } })
  check(st3 == 200 and st4 == 200, "text and its ids")
  for i = 1, 64 do check(r3.data[1].embedding[i] == r4.data[1].embedding[i], "text and ids differ at " .. i) end
  st, r = post("/v1/embeddings", { input = { "ab", "b a" } })
  check(st == 200 and #r.data == 2, cjson.encode(r):sub(1, 200))
end)

test("embeddings: dimensions truncate and re-normalize; base64 is the float32 bytes", function()
  local _, full = post("/v1/embeddings", { input = { 7, 8 } })
  local st, r = post("/v1/embeddings", { input = { 7, 8 }, dimensions = 8 })
  check(st == 200 and #r.data[1].embedding == 8, "8 dims")
  check(math.abs(norm(r.data[1].embedding) - 1) < 1e-6, "re-normalized")
  local s = norm { unpack(full.data[1].embedding, 1, 8) }
  check(math.abs(r.data[1].embedding[1] - full.data[1].embedding[1] / s) < 1e-6, "a prefix, rescaled")
  st, r = post("/v1/embeddings", { input = { 7, 8 }, encoding_format = "base64", dimensions = 2 })
  check(st == 200 and type(r.data[1].embedding) == "string" and #r.data[1].embedding == 12, cjson.encode(r))
  check(serve.base64_f32 { 1.0 } == "AACAPw==", serve.base64_f32 { 1.0 })
end)

test("errors are OpenAI-style JSON with the status a client can act on", function()
  local function err(st_want, t, needle)
    local st, r = post("/v1/embeddings", t)
    check(st == st_want and r.error and r.error.message:find(needle, 1, true), st .. " " .. cjson.encode(r))
  end
  err(400, "{not json", "not a JSON object")
  err(400, {}, "input is missing")
  err(400, { input = {} }, "input is missing or empty")
  err(400, { input = "" }, "empty string")
  err(400, { input = { 1, 1000 } }, "is not a token id")
  err(400, { input = { 1, 1.5 } }, "is not a token id")
  err(400, { input = { 1.5 } }, "input: a string")
  err(400, { input = { true } }, "input: a string")
  local long = {}
  for i = 1, 17 do long[i] = 1 end
  err(400, { input = long }, "over the model's 16")
  err(400, { input = { 1 }, encoding_format = "hex" }, "encoding_format")
  err(400, { input = { 1 }, dimensions = 65 }, "dimensions")
  err(404, { input = { 1 }, model = "other" }, "is not served here")
  err(413, { input = string.rep("a", 2100) }, "over the limit")
  local st, out = server():route("GET", "/v1/embeddings", "")
  check(st == 405 and out:find("does not take GET", 1, true), out)
  st, out = server():route("GET", "/nowhere", "")
  check(st == 404, out)
  local bad = assert(serve.open(model_dir(), { device = "cpu", truncate = true, max_len = 4 }))
  st, out = bad:route("POST", "/v1/embeddings", cjson.encode { input = long })
  check(st == 200 and cjson.decode(out).usage.prompt_tokens == 4, "--truncate: " .. out:sub(1, 120))
  local s2, e2 = serve.open(model_dir(), { device = "tpu" })
  check(not s2 and e2:find("cpu or gpu", 1, true), tostring(e2))
end)

test("models, health and Prometheus metrics", function()
  local st, out = server():route("GET", "/v1/models", "")
  local m = cjson.decode(out)
  check(st == 200 and m.data[1].id == model_dir() and m.data[1].tokenizer == true and m.data[1].dimensions == 64, out)
  st, out = server():route("GET", "/health", "")
  check(st == 200 and out:find('"ok"', 1, true), out)
  local _, text = server():route("GET", "/metrics", "")
  check(text:find('emmy_requests_total{route="/v1/embeddings",outcome="ok"}', 1, true), text:sub(1, 300))
  check(text:find("emmy_inference_seconds_count", 1, true) and text:find("emmy_prompt_tokens_total", 1, true), "histograms")
end)

-- Starts `emmy serve DIR ARGS` in the background; returns its port (or fails with its log) and the log's path.
local function start(args, env)
  local pf, log = os.tmpname(), os.tmpname()
  os.remove(pf)
  os.execute(("%s %s serve %s %s --port 0 --port-file %s > %s 2>&1 &"):format(env or "", BIN, model_dir(), args, pf, log))
  local port
  for _ = 1, 600 do
    local f = io.open(pf)
    if f then port = tonumber(f:read("*a")); f:close() end
    if port then break end
    os.execute("sleep 0.1")
  end
  check(port, "no port file; log: " .. (io.open(log):read("*a") or ""))
  os.remove(pf)
  return port, log
end

test("over HTTP: a child `emmy serve` answers with keep-alive, JSON errors and 413, and stops after --requests", function()
  local port, log = start("--device cpu --requests 5 --max-payload 2000")
  local st, body = http.request("127.0.0.1", port, "GET", "/health")
  check(st == 200 and body:find("ok", 1, true), tostring(st) .. " " .. tostring(body))
  st, body = http.request("127.0.0.1", port, "POST", "/v1/embeddings", cjson.encode { input = { 1, 2 } })
  check(st == 200 and #cjson.decode(body).data[1].embedding == 64, tostring(body):sub(1, 200))
  st, body = http.request("127.0.0.1", port, "POST", "/v1/embeddings", "{broken")
  check(st == 400 and cjson.decode(body).error, tostring(body))
  st, body = http.request("127.0.0.1", port, "POST", "/v1/embeddings", string.rep("x", 3000))
  check(st == 413 and cjson.decode(body).error, tostring(st) .. " " .. tostring(body))
  st, body = http.request("127.0.0.1", port, "GET", "/metrics")
  check(st == 200 and body:find("emmy_requests_total", 1, true), tostring(body):sub(1, 200))
  local gone
  for _ = 1, 50 do
    gone = not http.request("127.0.0.1", port, "GET", "/health", nil, nil, 200)
    if gone then break end
    os.execute("sleep 0.1")
  end
  check(gone, "the server still answers after --requests 5")
  os.remove(log)
end)

-- The mock driver (tests/fixtures/cuda_mock.c) built in folder d; skips the test where cc cannot.
local mock_driver = mock_driver_so

test("--device gpu: the kernels built once, a run launched at its bucket of tokens and captured as a CUDA graph for the next (the mock driver: the plumbing)", function()
  local d = tmpdir()
  local so = mock_driver(d)
  local port, log = start("--device gpu --requests 4 --max-batch-tokens 64",
    ("EMMY_MOCK_ANY_KERNEL=1 EMMY_MOCK_LAUNCH_LOG=%s/launches EMMY_LIBCUDA=%s EMMY_CUBIN_CACHE=%s/cc"):format(d, so, d))
  -- (the mock computes nothing: its buffers keep their 0xFF poison, so the answer is the non-finite 500)
  local function served(st, body)
    return st == 200 and #cjson.decode(body).data[1].embedding == 64 or st == 500 and body:find("non-finite", 1, true)
  end
  local st, body = http.request("127.0.0.1", port, "POST", "/v1/embeddings", cjson.encode { input = { 1, 2, 3 } })
  check(served(st, body), tostring(st) .. " " .. tostring(body):sub(1, 200) .. " log: " .. (io.open(log):read("*a") or ""))
  st, body = http.request("127.0.0.1", port, "POST", "/v1/embeddings", cjson.encode { input = { { 4, 5 }, { 6 } } })
  check(served(st, body), tostring(body):sub(1, 200))
  st = http.request("127.0.0.1", port, "GET", "/health")
  check(st == 200, "health")
  local long = {}
  for i = 1, 65 do long[i] = i end
  st, body = http.request("127.0.0.1", port, "POST", "/v1/embeddings", cjson.encode { input = long })
  check(st == 400 and body:find("over this GPU server's --max-batch-tokens 64", 1, true),
    "a sequence longer than the buffers (--max-batch-tokens 64) is a 400: " .. tostring(st) .. " " .. tostring(body))
  local launches = io.open(d .. "/launches"):read("*a")
  local _, n = launches:gsub("\n", "")
  check(n >= 9, "launches for three sequences: " .. n)
  os.remove(log)
end)

test("a batch packs sequences end to end: each embedding equals its sequence's alone, and the reference's pooling", function()
  local srv = server()
  local a, b, c = { 5, 6, 7, 8 }, { 9 }, { 10, 11, 12 }
  local st1, r1 = post("/v1/embeddings", { input = { a, b, c } })
  check(st1 == 200, "batch")
  for i, sq in ipairs { a, b, c } do
    local st, r = post("/v1/embeddings", { input = sq })
    check(st == 200, "alone")
    for k = 1, 64 do
      check(math.abs(r.data[1].embedding[k] - r1.data[i].embedding[k]) < 1e-6,
        ("sequence %d, element %d: %g alone, %g packed"):format(i, k, r.data[1].embedding[k], r1.data[i].embedding[k]))
    end
  end
  check(srv.metrics.runs >= 4 and srv.metrics.batch_requests[1] >= 4, "one run a request here")
  -- the same sequence through the pooled graph (`emmy run MODEL --pool last`, the reference, the same weights)
  local frontend, inputs, ref = require "emmy.frontend", require "emmy.inputs", require "emmy.ref"
  local g = frontend.load(model_dir(), { pool = "last", seq_len = #a }).graph
  local ins = assert(inputs.for_model(g, {}, 0))
  for j = 1, #a do ins.input_ids:set(j, a[j]) end
  local o = assert(ref.run(g, ins, {}))[g:outputs()[1]]
  local dot = 0
  for k = 1, 64 do dot = dot + o:get(k) * r1.data[1].embedding[k] end
  check(dot > 0.999, "cosine with the pooled graph's embedding: " .. dot)
end)

test("the default: positions where the graph allows them, else the mask with one line; --varlen where it cannot: the error", function()
  local real, logged = serve.varlen_graph, {}
  serve.varlen_graph = function() return nil, "--varlen: n1 (aten.where.self) reads attention_mask" end
  local ok, srv = pcall(serve.open, model_dir(), { device = "cpu", max_len = 16, log = function(m) logged[#logged + 1] = m end })
  local ok2, e2 = pcall(serve.open, model_dir(), { device = "cpu", max_len = 16, varlen = true })
  serve.varlen_graph = real
  check(ok and srv and srv.emb.embed_batch({ { 5, 6 }, { 7 } }), "the default falls back to the mask: " .. tostring(srv))
  check(table.concat(logged, "\n"):find("reads attention_mask; serving with the mask", 1, true), "the line: " .. table.concat(logged, "\n"))
  check(not ok2 or not e2, "--varlen errors")
end)

test("--varlen: the packed graph's attention takes the positions (seq_pos) instead of the mask; the same embeddings", function()
  local v = assert(serve.open(model_dir(), { device = "cpu", max_len = 16, varlen = true }))
  local seqs = { { 5, 6, 7, 8 }, { 9 }, { 10, 11, 12 }, { 13, 14, 15, 16, 17, 18 } }
  local want = assert(serve.open(model_dir(), { device = "cpu", max_len = 16, varlen = false })).emb.embed_batch(seqs)
  local got = assert(v.emb.embed_batch(seqs))
  for i = 1, #seqs do
    for k = 1, 64 do
      check(math.abs(got[i][k] - want[i][k]) < 1e-6, ("sequence %d, element %d: %g with seq_pos, %g with the mask"):format(i, k, got[i][k], want[i][k]))
    end
  end
  -- the graph: no attention_mask input, every attention reads position_ids as seq_pos, causal
  local g = serve.varlen_graph(require("emmy.frontend").load(model_dir(), { dynamic = { "seq_len@input_ids:1",
    "seq_len@attention_mask:2", "seq_len@attention_mask:3", "seq_len@position_ids:1" }, hint = { "seq_len=16" } }).graph)
  check(not g:value("attention_mask"), "attention_mask dropped")
  local n = 0
  for _, nd in ipairs(g:nodes()) do
    if nd.op == "aten.scaled_dot_product_attention.default" then
      local a = {}
      for _, kv in ipairs(nd.args) do a[kv[1]] = kv[2] end
      check(a.seq_pos == "position_ids" and a.is_causal == true and a.attn_mask == nil, "the attention's args")
      n = n + 1
    end
  end
  check(n >= 1, "an attention")
end)

test("a step packs the waiting requests' sequences into one run; a bad request is answered alone", function()
  local srv = server()
  local runs = srv.metrics.runs
  local q = {
    { id = 1, method = "POST", path = "/v1/embeddings", body = cjson.encode { input = { 1, 2, 3 } } },
    { id = 2, method = "POST", path = "/v1/embeddings", body = "{oops" },
    { id = 3, method = "GET", path = "/health", body = "" },
    { id = 4, method = "POST", path = "/v1/embeddings", body = cjson.encode { input = { { 4, 5 }, { 6 } } } },
  }
  local out = srv:step(q)
  check(#out == 4, "every request answered: " .. #out)
  check(out[1].status == 200 and out[2].status == 400 and out[3].status == 200 and out[4].status == 200,
    ("%d %d %d %d"):format(out[1].status, out[2].status, out[3].status, out[4].status))
  check(srv.metrics.runs == runs + 1, "one model run for three sequences of two requests")
  check(#cjson.decode(out[4].body).data == 2 and cjson.decode(out[1].body).usage.prompt_tokens == 3, "split back")
  -- past the budget: the next request waits for the next step
  local small = assert(serve.open(model_dir(), { device = "cpu", max_batch_tokens = 4 }))
  local out2 = small:step { q[1], q[4] }
  check(#out2 == 1 and out2[1].id == 1, "the second request waits: " .. #out2)
end)

test("--bench: random prompts over keep-alive connections; the summary printed and written as JSON", function()
  local p1 = serve.prompts(50, 20, 0.5, 1000, 7)
  local p2 = serve.prompts(50, 20, 0.5, 1000, 7)
  local lo, hi = 99, 0
  for i, ids in ipairs(p1) do
    lo, hi = math.min(lo, #ids), math.max(hi, #ids)
    check(#ids == #p2[i] and ids[1] == p2[i][1], "the same seed gives the same prompts")
    for _, id in ipairs(ids) do check(id >= 0 and id < 1000, "an id in the vocabulary") end
  end
  check(lo >= 10 and hi <= 30 and hi > lo, ("lengths in [10, 30], mixed: %d..%d"):format(lo, hi))
  local js = os.tmpname()
  local c = os.execute(("%s serve %s --device cpu --bench --num-prompts 24 --random-input-len 12 --random-range-ratio 0.5 "
    .. "--max-concurrency 4 --json %s > /dev/null 2>&1"):format(BIN, model_dir(), js))
  check(c == 0 or c == true, "--bench exit status " .. tostring(c))
  local r = cjson.decode(io.open(js):read("*a"))
  check(r.successful == 24 and r.failed == 0 and r.input_tokens >= 24 * 6 and r.concurrency == 4, cjson.encode(r))
  check(r.latency_p99_ms >= r.latency_median_ms and r.token_throughput > 0 and r.request_throughput > 0, cjson.encode(r))
  os.remove(js)
end)

test("--bench over several (concurrency, range ratio) points: one server, one table, {points} in the JSON", function()
  local js = os.tmpname()
  local c = os.execute(("%s serve %s --device cpu --bench --num-prompts 8 --random-input-len 6 --random-range-ratio 0,0.5 "
    .. "--max-concurrency 1,3 --json %s > /dev/null 2>&1"):format(BIN, model_dir(), js))
  check(c == 0 or c == true, "exit status " .. tostring(c))
  local r = cjson.decode(io.open(js):read("*a"))
  os.remove(js)
  check(r.points and #r.points == 4, cjson.encode(r))
  local seen = {}
  for _, p in ipairs(r.points) do
    check(p.successful == 8 and p.failed == 0, cjson.encode(p))
    seen[p.concurrency .. "/" .. p.random_range_ratio] = true
  end
  check(seen["1/0"] and seen["1/0.5"] and seen["3/0"] and seen["3/0.5"], "every point: " .. cjson.encode(r.points))
  c = os.execute(("%s serve %s --bench --max-concurrency 2,0 > /dev/null 2>&1"):format(BIN, model_dir()))
  check(c ~= 0 and c ~= true, "--max-concurrency 2,0: exit status " .. tostring(c))
end)

test("--bench --soak: well-formed requests all answered, malformed ones 4xx, the server's memory sampled", function()
  local js = os.tmpname()
  local c = os.execute(("%s serve %s --device cpu --bench --soak 3 --malformed 0.3 --num-prompts 8 --random-input-len 6 "
    .. "--max-concurrency 2 --json %s > /dev/null 2>&1"):format(BIN, model_dir(), js))
  local r = cjson.decode(io.open(js):read("*a"))
  os.remove(js)
  check(r.failed == 0 and r.malformed_other == 0 and r.ok > 0 and r.malformed_4xx > 0, cjson.encode(r))
  check(#r.samples >= 1 and r.samples[1].rss_mb and r.samples[1].rss_mb > 1 and r.duration_s >= 3, cjson.encode(r.samples[1] or {}))
  -- (the exit status also answers for the memory: 0 when flat; a 3-second run on the CPU reference may still grow)
  check(c == 0 or c == true or (r.rss_growth and r.rss_growth > 0.05), "--soak exit status " .. tostring(c))
  c = os.execute(("%s serve %s --bench --soak 1 --malformed 1.5 > /dev/null 2>&1"):format(BIN, model_dir()))
  check(c ~= 0 and c ~= true, "--malformed 1.5: exit status " .. tostring(c))
end)

test("--device gpu on the mock driver: the loop that overlaps the host with the runs answers every request (--inflight 1, 2, 3; the positions or --mask)", function()
  local d = tmpdir()
  local so = mock_driver(d)
  -- (the mock's kernels do nothing; EMMY_MOCK_FILL keeps the embeddings finite, which the server checks)
  local env = ("EMMY_LIBCUDA=%s EMMY_MOCK_ANY_KERNEL=1 EMMY_MOCK_SMS=132 EMMY_LIBCUPTI=/nonexistent EMMY_MOCK_FILL=0x3c EMMY_CUBIN_CACHE=%s")
    :format(shell_quote(so), shell_quote(d .. "/cubins"))
  for _, ci in ipairs { { 4, 1, "--mask" }, { 1, 1, "--mask" }, { 4, 2, "--mask" }, { 1, 2 }, { 8, 3 }, { 4, 2 }, { 4, 1, "--varlen" } } do -- (concurrency, --inflight)
    local c, inf = ci[1], ci[2]
    local js = ("%s/b%d_%d%s.json"):format(d, c, inf, (ci[3] or ""):gsub("-", ""))
    local rc = os.execute(("%s %s serve %s --device gpu --bench --num-prompts 40 --random-input-len 20 --random-range-ratio 0.5 "
      .. "--max-concurrency %d --inflight %d %s --json %s > %s/log 2>&1"):format(env, BIN, model_dir(), c, inf, ci[3] or "", js, d))
    local r = cjson.decode(io.open(js):read("*a"))
    check((rc == 0 or rc == true) and r.successful == 40 and r.failed == 0, ("concurrency %d, inflight %d: %s"):format(c, inf, cjson.encode(r)))
    check(r.device_s and r.host_s and r.host_s.pack, "the server's account: " .. cjson.encode(r))
  end
end)

test("--bench --stock: a stock server that cannot start (its python exits at once) is one line and exit 1", function()
  local log = os.tmpname()
  local c = os.execute(("EMMY_PYTHON=false %s serve %s --bench --stock eager --num-prompts 2 > %s 2>&1"):format(BIN, model_dir(), log))
  local out = io.open(log):read("*a")
  os.remove(log)
  check(c ~= 0 and c ~= true, "exit status " .. tostring(c))
  check(out:find("emmy: the server did not start: the server exited without a word", 1, true), out)
  c = os.execute(("%s serve %s --bench --stock bogus > /dev/null 2>&1"):format(BIN, model_dir()))
  check(c ~= 0 and c ~= true, "--stock bogus: exit status " .. tostring(c))
end)

test("--bench --vs-stock: emmy and then the stock server on the same prompts, one table of both ({points, stock_points})", function()
  -- (the stock server here: a stand-in "python" that serves the model with emmy's CPU reference on the port file given)
  local d = tmpdir()
  local fake = d .. "/python"
  local f = assert(io.open(fake, "w"))
  f:write(("#!/bin/sh\nshift\ndir=$1; shift\npf=\nwhile [ $# -gt 0 ]; do case $1 in --port-file) pf=$2; shift;; esac; shift; done\n"
    .. "exec %s serve \"$dir\" --device cpu --port 0 --port-file \"$pf\"\n"):format(shell_quote(BIN)))
  f:close()
  os.execute("chmod +x " .. shell_quote(fake))
  local js, log = d .. "/vs.json", d .. "/vs.log"
  local c = os.execute(("EMMY_PYTHON=%s %s serve %s --device cpu --bench --vs-stock eager --num-prompts 6 --random-input-len 6 "
    .. "--max-concurrency 1,2 --json %s > %s 2>&1"):format(shell_quote(fake), BIN, model_dir(), js, log))
  local out = io.open(log):read("*a")
  check(c == 0 or c == true, "exit status " .. tostring(c) .. ": " .. out)
  check(out:find("emmy against the stock server (transformers, eager)", 1, true) and out:find("emmy / stock", 1, true), out)
  local r = cjson.decode(io.open(js):read("*a"))
  check(#r.points == 2 and #r.stock_points == 2, cjson.encode(r))
  for i = 1, 2 do
    check(r.points[i].successful == 6 and r.stock_points[i].successful == 6 and r.points[i].concurrency == r.stock_points[i].concurrency,
      cjson.encode(r))
  end
  for _, bad in ipairs { "--vs-stock bogus", "--vs-stock eager --stock eager", "--vs-stock eager --soak 3" } do
    c = os.execute(("%s serve %s --bench %s > /dev/null 2>&1"):format(BIN, model_dir(), bad))
    check(c ~= 0 and c ~= true, bad .. ": exit status " .. tostring(c))
  end
end)

test("emmy serve --dump-graph: the served graph as a .torch.json whose kernels, tuned with q, k and v apart, are the served ones by name (so --picks applies)", function()
  local d = tmpdir()
  local path = d .. "/served.torch.json"
  local c, o, e = emmy({ "serve", "Qwen/Qwen3-Embedding-0.6B", "--dump-graph", path })
  eq(c, 0, e)
  check(o:find("EMMY_MERGE_SIBLINGS=0 emmy tune " .. path .. " --dump-dir " .. d .. "/served.tune", 1, true), o)
  check(o:find("emmy serve Qwen/Qwen3-Embedding-0.6B --picks " .. d .. "/served.tune/tune.json", 1, true), o)
  -- the kernels serve compiles (packed, varlen, MERGE_SIBLINGS=0) against the file's under EMMY_MERGE_SIBLINGS=0
  local c2, o2, e2 = emmy({ "compile", path }, { env = "EMMY_MERGE_SIBLINGS=0" })
  eq(c2, 0, e2)
  local from_file = {}
  for n in o2:gmatch("k_[%w_]-_%x%x%x%x%x%x") do from_file[n] = true end
  local frontend, compiler, serve = require "emmy.frontend", require "emmy.compiler", require "emmy.serve"
  local r = frontend.load("Qwen/Qwen3-Embedding-0.6B", { dynamic = { "seq_len@input_ids:1", "seq_len@attention_mask:2",
    "seq_len@attention_mask:3", "seq_len@position_ids:1" }, seed = 0, hint = { "seq_len=512" } })
  local kn = compiler.structural_pins()
  kn.MERGE_SIBLINGS = 0
  local n, missing = 0, {}
  for _, k in ipairs(compiler.run(serve.varlen_graph(r.graph), { knobs = kn }).kernels) do
    if not from_file[k.name] then missing[#missing + 1] = k.name end
    n = n + 1
  end
  check(n > 0 and #missing == 0, "served kernels not in the dumped graph: " .. table.concat(missing, " "))
end)

return T
