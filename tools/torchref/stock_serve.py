#!/usr/bin/env python3
"""stock_serve.py — the stock baseline of `emmy serve --bench --stock` (issue 23): the same model in transformers
(eager, or under torch.compile with --compile) behind the same HTTP API, batched the way a stock PyTorch embedding
server batches: each step takes every waiting request, pads the step's sequences to the longest (right padding, an
attention mask), runs them as one batch and pools each sequence's last real token (L2-normalized).

    python3 tools/torchref/stock_serve.py DIR [--port 0] [--port-file F] [--host 127.0.0.1]
                                          [--max-batch-tokens 2048] [--compile] [--device cuda] [--cudnn-sdpa]

torch's cuDNN SDPA backend is off unless --cudnn-sdpa: it builds an execution plan for every new padded shape
(batch, length), 1.1-2.1 s each the first time and 1.6 ms of CPU a call after that (the H200, torch 2.11, a batch of
four at 500-640 tokens), which made the baseline 2,900 tok/s under a mixed-length load; without it torch's SDPA takes
its memory-efficient kernel for the padding mask (27-60 ms a batch of four in eager).

DIR holds config.json (random weights: the architecture's own initialization, seeded; the bench times the
serving, not the answers) or also model.safetensors. POST /v1/embeddings takes OpenAI's schema with token ids
(an array of ids or an array of arrays); GET /health. Errors are one-line JSON with status 400. Exit status 1 when
torch or transformers is missing or the model cannot be built, with one line on stderr."""

import argparse
import json
import os
import queue
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

try:
    import torch
except ImportError as e:
    sys.stderr.write("stock_serve: needs torch (%s)\n" % e)
    sys.exit(1)


def load(d, device, compile_):
    try:
        from transformers import AutoConfig, AutoModel
    except ImportError as e:
        sys.stderr.write("stock_serve: needs transformers (%s)\n" % e)
        sys.exit(1)
    torch.manual_seed(0)
    kw = {"attn_implementation": "sdpa"}
    if os.path.exists(os.path.join(d, "model.safetensors")):
        model = AutoModel.from_pretrained(d, dtype=torch.bfloat16, **kw)
    else:
        cfg = AutoConfig.from_pretrained(d)
        try:
            model = AutoModel.from_config(cfg, dtype=torch.bfloat16, **kw)
        except TypeError:
            model = AutoModel.from_config(cfg, torch_dtype=torch.bfloat16, **kw)
    model = model.to(device).eval()
    run = torch.compile(model, dynamic=True) if compile_ else model
    return run, int(getattr(model.config, "max_position_embeddings", 32768))


class Job:
    def __init__(self, seqs):
        self.seqs, self.done, self.out, self.err = seqs, threading.Event(), None, None


def batches(jobs, most):
    """Consecutive runs of the jobs' sequences of at most `most` tokens each (a longer sequence runs alone)."""
    run, n = [], 0
    for j in jobs:
        for i, s in enumerate(j.seqs):
            if run and n + len(s) > most:
                yield run
                run, n = [], 0
            run.append((j, i, s))
            n += len(s)
    if run:
        yield run


def embed(model, run, device):
    """One padded batch: the last real token of each sequence, L2-normalized."""
    L = max(len(s) for _, _, s in run)
    ids = torch.zeros((len(run), L), dtype=torch.long)
    mask = torch.zeros((len(run), L), dtype=torch.long)
    for r, (_, _, s) in enumerate(run):
        ids[r, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[r, : len(s)] = 1
    ids, mask = ids.to(device), mask.to(device)
    with torch.no_grad():
        h = model(input_ids=ids, attention_mask=mask).last_hidden_state
        last = mask.sum(dim=1) - 1
        v = h[torch.arange(len(run), device=device), last].float()
        v = torch.nn.functional.normalize(v, p=2, dim=-1)
    return v.cpu().tolist()


def worker(model, q, most, device):
    while True:
        jobs = [q.get()]
        while True:
            try:
                jobs.append(q.get_nowait())
            except queue.Empty:
                break
        for j in jobs:
            j.out = [None] * len(j.seqs)
        try:
            for run in batches(jobs, most):
                for (j, i, _), v in zip(run, embed(model, run, device)):
                    j.out[i] = v
        except Exception as e:  # noqa: BLE001  (the step's requests answered with the error)
            for j in jobs:
                j.err = str(e).splitlines()[0] if str(e) else type(e).__name__
        for j in jobs:
            j.done.set()


def handler(q, max_len):
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def reply(self, status, obj):
            body = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def error(self, status, msg):
            self.reply(status, {"error": {"message": msg, "type": "invalid_request_error", "param": None, "code": None}})

        def do_GET(self):
            if self.path.split("?")[0] == "/health":
                return self.reply(200, {"status": "ok"})
            self.error(404, "no route GET %s" % self.path)

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n) if n else b""
            if self.path.split("?")[0] != "/v1/embeddings":
                return self.error(404, "no route POST %s" % self.path)
            try:
                inp = json.loads(raw or b"null")["input"]
            except (ValueError, KeyError, TypeError):
                return self.error(400, "the body is not a JSON object with an input")
            seqs = [inp] if isinstance(inp, list) and inp and all(isinstance(x, int) for x in inp) else inp
            if not isinstance(seqs, list) or not seqs or not all(isinstance(s, list) and s and all(isinstance(x, int) for x in s) for s in seqs):
                return self.error(400, "input: token ids (an array of ids or an array of arrays) only")
            if any(len(s) > max_len for s in seqs):
                return self.error(400, "a sequence over the model's length %d" % max_len)
            j = Job(seqs)
            q.put(j)
            j.done.wait()
            if j.err:
                return self.error(500, "internal error: %s" % j.err)
            tokens = sum(len(s) for s in seqs)
            self.reply(200, {"object": "list", "model": "stock",
                             "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(j.out)],
                             "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})
    return H


def main(argv):
    p = argparse.ArgumentParser(prog="stock_serve.py")
    p.add_argument("dir")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--port-file")
    p.add_argument("--max-batch-tokens", type=int, default=2048)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--device", default="cuda")
    p.add_argument("--cudnn-sdpa", action="store_true")
    a = p.parse_args(argv)
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.stderr.write("stock_serve: --device cuda: torch sees no GPU\n")
        return 1
    if not a.cudnn_sdpa and hasattr(torch.backends.cuda, "enable_cudnn_sdp"):
        torch.backends.cuda.enable_cudnn_sdp(False)
    try:
        model, max_len = load(a.dir, a.device, a.compile)
    except Exception as e:  # noqa: BLE001
        sys.stderr.write("stock_serve: transformers could not build %s: %s\n" % (a.dir, str(e).splitlines()[0] if str(e) else type(e).__name__))
        return 1
    # a warm-up at a few batch sizes and lengths, before the port is announced: torch.compile's first graphs (one
    # sequence specializes the batch dim to 1, so batches of two and four are compiled here too, not under load) and
    # cuBLAS's plans
    for rows, L in ((1, 1), (1, 64), (1, 512), (2, 300), (4, 500), (3, 701)):
        embed(model, [(None, 0, [1] * min(L - r, max_len)) for r in range(rows)], a.device)
    q = queue.Queue()
    threading.Thread(target=worker, args=(model, q, a.max_batch_tokens, a.device), daemon=True).start()
    # (the listen backlog: http.server's default of 5 drops the SYNs of a burst of connections, which the clients
    # retry 1, 3, 7, 15 and 31 s later — the first GPU run's p99 of 29 s at concurrency 64)
    ThreadingHTTPServer.request_queue_size = 1024
    srv = ThreadingHTTPServer((a.host, a.port), handler(q, max_len))
    srv.daemon_threads = True
    if a.port_file:
        with open(a.port_file, "w") as f:
            f.write(str(srv.server_address[1]))
    sys.stderr.write("stock_serve: serving %s on http://%s:%d (%s)\n" % (a.dir, a.host, srv.server_address[1],
                                                                     "torch.compile" if a.compile else "eager"))
    srv.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
