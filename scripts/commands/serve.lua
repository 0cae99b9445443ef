-- emmy serve — an OpenAI-compatible embedding server on a whole model (emmy.serve has the routes and the loop).
local cli = require "emmy.cli"
local serve = require "emmy.serve"

return {
  summary = "serve a model's embeddings over HTTP (OpenAI's /v1/embeddings; on the GPU, or the CPU reference)",
  usage = [==[usage: emmy serve MODEL [--device gpu|cpu] [--host H] [--port P] [--port-file F] [--truncate]
                  [--max-len N] [--max-payload BYTES] [--max-queue N] [--max-batch-tokens N] [--graph-step S]
                  [--inflight N] [--varlen | --mask] [--seed S] [--requests N] [--bench [--num-prompts N] [--random-input-len L] [--random-range-ratio R]
                  [--max-concurrency C] [--stock eager|compile | --vs-stock eager|compile] [--soak SECONDS [--malformed F]] [--json FILE]]

  Serves MODEL (ORG/NAME or a folder with config.json) with last-token pooling and L2 normalization:
    POST /v1/embeddings   {"input": string | [string] | [token id] | [[token id]], "encoding_format": "float" |
                          "base64", "dimensions": d (truncated and re-normalized)}; usage.prompt_tokens
    POST /tokenize        {"input": string} -> {"tokens": [...], "count": n}
    GET  /v1/models, /health, /metrics (Prometheus text)
  Errors are OpenAI-style JSON: 400 (malformed JSON, empty input, over the model's length unless --truncate, a
  token id outside the vocabulary, text where the model folder has no tokenizer.json), 404, 405, 413 (over
  --max-payload, default 4 MiB), 503 (more than --max-queue requests waiting, default 64).
  --bench starts the server as a child process and drives it like `vllm bench serve --backend openai-embeddings`:
  --num-prompts N (100) random prompts of token ids, each of --random-input-len L (512) tokens, uniform in
  [L(1-R), L(1+R)] with --random-range-ratio R (0), over --max-concurrency C (16) keep-alive connections; it prints
  successful and failed requests, duration, input tokens, req/s, tok/s and the latency mean, median and p99 (and
  writes them with --json FILE). C and R may be comma-separated lists: each (C, R) point runs in turn against one
  server (started once) and the points print as one table (--json: {points = [...]}). Exit 1 when a request failed. --stock eager|compile benches the stock baseline
  instead: the same model in transformers (eager, or under torch.compile) behind the same API on the GPU
  (tools/torchref/stock_serve.py: each step's sequences padded to the longest, as a stock PyTorch server batches
  them; $EMMY_PYTHON, else python3), under the same load. --vs-stock eager|compile benches emmy and then the stock
  server on the same prompts and prints one table of both (tok/s, their ratio, latency mean / p99; --json: {points,
  stock_points}). --soak SECONDS drives it that long instead (the prompts
  cycled, in rounds of 16 requests a connection) with a fraction --malformed F (0.05) of malformed requests (not JSON,
  no input, an empty one, a token id outside the vocabulary, a sequence over the model's length), sampling the
  server's resident memory after each round; it prints a row a tenth of the run and exits 1 when a well-formed
  request failed, a malformed one was not answered 4xx, or the resident memory grew more than 5% after the first
  quarter of the run.
  Batching: each step takes every waiting request in arrival order and packs the sequences of the embeddings
  requests end to end (no padding between them; positions restart at each sequence; the attention is
  block-diagonal and causal) into model runs of at most --max-batch-tokens tokens (default: 2048 on the GPU, the
  model's length on the CPU); a request whose sequences exceed it alone still runs, in several.
  --device gpu (default) runs the model's kernels as `emmy run` compiles them (the rules' choices, the tune DB's
  picks), the weights uploaded once and every buffer allocated at the longest sequence; with --graph-step S
  (default 128; 0: none) a run's token count is rounded up to a multiple of S (a padding sequence after the
  others fills it), and each such bucket's kernels are captured into a CUDA graph at its first run and replayed
  after. The steps overlap the model: while a run is on the GPU the server takes and parses new requests, and it
  launches the next run before it writes and sends the last one's answers. --inflight N (default 2; 1: one run at a
  time, launched and read back by the host) keeps up to N runs on the GPU: each run's inputs are staged in
  page-locked memory and copied, the run launched and its pooled rows copied back, all in stream order behind the
  runs before it, so the GPU goes from one run to the next without waiting for the host. Each attention is given
  the sequences' positions (SDPA's seq_pos: keys from the row's own sequence start, causal) instead of the T x T
  block-diagonal mask: nothing of T² size is built, uploaded or read, and the flash kernel skips the key tiles
  before its rows' sequences; where something other than SDPA reads the mask it serves with the mask (one line
  says so). --mask serves with the mask always; --varlen requires the positions (an error where they cannot be
  used). docs/performance.md has both measured. --device cpu runs it on the CPU reference (seconds a sequence: for tests and machines without a GPU).
  Weights are the folder's safetensors, else seeded random (--seed), made once at start. --host defaults to
  127.0.0.1, --port to 8000 (0: any free port; --port-file writes the port chosen). --requests N stops after N
  answers (tests). --picks FILE: a tune's picks (tune.json) for the kernels of the served graph that are tuned ones
  (the same name: the same sub-graph — a tune of the layer traced for serving, not of the 512-token layer); a line
  says how many took one. --dump-graph FILE writes the graph it would serve (packed, varlen where the model allows)
  as a .torch.json and exits, with the commands that tune it and serve the picks.]==],
  run = function(argv)
    local opts, pos = cli.parse(argv, {
      flags = { ["--device"] = { kind = "string", default = "gpu" }, ["--host"] = { kind = "string", default = "127.0.0.1" },
        ["--port"] = { kind = "int", default = 8000, min = 0 }, ["--port-file"] = { kind = "string" },
        ["--truncate"] = { kind = "bool" }, ["--max-len"] = { kind = "int", min = 1 },
        ["--max-payload"] = { kind = "int", default = 4 * 1024 * 1024, min = 1 }, ["--max-queue"] = { kind = "int", default = 64, min = 1 },
        ["--max-batch-tokens"] = { kind = "int", min = 1 }, ["--graph-step"] = { kind = "int", default = 128, min = 0 },
        ["--inflight"] = { kind = "int", default = 2, min = 1 }, ["--varlen"] = { kind = "bool" }, ["--mask"] = { kind = "bool" }, ["--picks"] = { kind = "string" }, ["--dump-graph"] = { kind = "string" },
        ["--seed"] = { kind = "int", default = 0 }, ["--requests"] = { kind = "int", min = 1 },
        ["--bench"] = { kind = "bool" }, ["--num-prompts"] = { kind = "int", default = 100, min = 1 },
        ["--random-input-len"] = { kind = "int", default = 512, min = 1 }, ["--random-range-ratio"] = { kind = "string", default = "0" },
        ["--max-concurrency"] = { kind = "string", default = "16" }, ["--json"] = { kind = "string" },
        ["--stock"] = { kind = "string" }, ["--vs-stock"] = { kind = "string" }, ["--soak"] = { kind = "number", min = 1 }, ["--malformed"] = { kind = "number", default = 0.05 } },
      positional = { "model" }, required = { "model" }, usage = "emmy serve MODEL [--device gpu|cpu] [--port P]",
    }, "serve")
    if opts.port > 65535 then cli.usage("--port %d: 0 to 65535", opts.port) end
    if opts.varlen and opts.mask then cli.usage("--varlen and --mask: one or the other") end
    local varlen = opts.varlen or (not opts.mask and nil) -- (nil: the positions where the graph allows them)
    local function log(msg) io.stderr:write("emmy serve: ", msg, "\n") end
    if opts.dump_graph then
      for _, line in ipairs(cli.check(serve.dump_graph(pos.model, opts.dump_graph, { seed = opts.seed, varlen = varlen }))) do print(line) end
      return
    end
    if opts.bench then return require("emmy.serve_bench").run(pos.model, opts, log) end
    log(("loading %s (%s)"):format(pos.model, opts.device))
    local srv = cli.check(serve.open(pos.model, { device = opts.device, seed = opts.seed, truncate = opts.truncate,
      max_len = opts.max_len, max_payload = opts.max_payload, max_queue = opts.max_queue, max_batch_tokens = opts.max_batch_tokens, graph_step = opts.graph_step, inflight = opts.inflight, varlen = varlen, picks = opts.picks, log = log }))
    cli.check(serve.run(srv, opts.host, opts.port, { port_file = opts.port_file, requests = opts.requests }))
    return 0
  end,
}
