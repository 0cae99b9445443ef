-- emmy serve — an OpenAI-compatible embedding server on a whole model (emmy.serve has the routes and the loop).
local cli = require "emmy.cli"
local serve = require "emmy.serve"

return {
  summary = "serve a model's embeddings over HTTP (OpenAI's /v1/embeddings; on the GPU, or the CPU reference)",
  usage = [==[usage: emmy serve MODEL [--device gpu|cpu] [--host H] [--port P] [--port-file F] [--truncate]
                  [--max-len N] [--max-payload BYTES] [--max-queue N] [--seed S] [--requests N]

  Serves MODEL (ORG/NAME or a folder with config.json) with last-token pooling and L2 normalization:
    POST /v1/embeddings   {"input": string | [string] | [token id] | [[token id]], "encoding_format": "float" |
                          "base64", "dimensions": d (truncated and re-normalized)}; usage.prompt_tokens
    POST /tokenize        {"input": string} -> {"tokens": [...], "count": n}
    GET  /v1/models, /health, /metrics (Prometheus text)
  Errors are OpenAI-style JSON: 400 (malformed JSON, empty input, over the model's length unless --truncate, a
  token id outside the vocabulary, text where the model folder has no tokenizer.json), 404, 405, 413 (over
  --max-payload, default 4 MiB), 503 (more than --max-queue requests waiting, default 64).
  --device gpu (default) runs the model's kernels as `emmy run` compiles them (the rules' choices, the tune DB's
  picks), the weights uploaded once and every buffer allocated at the longest sequence; --device cpu runs it on the
  CPU reference (seconds a sequence: for tests and machines without a GPU). Weights are the folder's safetensors,
  else seeded random (--seed), made once at start. --host defaults to 127.0.0.1, --port to
  8000 (0: any free port; --port-file writes the port chosen). --requests N stops after N answers (tests).]==],
  run = function(argv)
    local opts, pos = cli.parse(argv, {
      flags = { ["--device"] = { kind = "string", default = "gpu" }, ["--host"] = { kind = "string", default = "127.0.0.1" },
        ["--port"] = { kind = "int", default = 8000, min = 0 }, ["--port-file"] = { kind = "string" },
        ["--truncate"] = { kind = "bool" }, ["--max-len"] = { kind = "int", min = 1 },
        ["--max-payload"] = { kind = "int", default = 4 * 1024 * 1024, min = 1 }, ["--max-queue"] = { kind = "int", default = 64, min = 1 },
        ["--seed"] = { kind = "int", default = 0 }, ["--requests"] = { kind = "int", min = 1 } },
      positional = { "model" }, required = { "model" }, usage = "emmy serve MODEL [--device gpu|cpu] [--port P]",
    }, "serve")
    if opts.port > 65535 then cli.usage("--port %d: 0 to 65535", opts.port) end
    local function log(msg) io.stderr:write("emmy serve: ", msg, "\n") end
    log(("loading %s (%s)"):format(pos.model, opts.device))
    local srv = cli.check(serve.open(pos.model, { device = opts.device, seed = opts.seed, truncate = opts.truncate,
      max_len = opts.max_len, max_payload = opts.max_payload, max_queue = opts.max_queue, log = log }))
    cli.check(serve.run(srv, opts.host, opts.port, { port_file = opts.port_file, requests = opts.requests }))
    return 0
  end,
}
