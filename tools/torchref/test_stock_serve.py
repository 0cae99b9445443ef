#!/usr/bin/env python3
"""test_stock_serve.py — the self-test of stock_serve.py's serving (no transformers, no GPU): the model replaced by
a tiny module whose hidden state at a token is a fixed vector of its id, so that an embedding is the normalized
vector of its sequence's last token whatever the padding. Checks the pooling with padded batches, concurrent
requests batched together, the API's shape and its errors. Last line: N passed, N failed."""

import json
import os
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import torch
except ImportError:
    print("skip stock_serve (no torch)\n0 passed, 0 failed")
    sys.exit(0)
import stock_serve  # noqa: E402

H = 8


class Out:
    def __init__(self, h):
        self.last_hidden_state = h


class Tiny(torch.nn.Module):
    """hidden[b, t] = a fixed vector of input_ids[b, t] (zeros where the mask is 0, to catch a pooled pad)."""
    calls = 0

    def forward(self, input_ids, attention_mask):
        Tiny.calls += 1
        ids = input_ids.float().unsqueeze(-1)
        k = torch.arange(1, H + 1, dtype=torch.float32)
        h = torch.sin(ids * k) + 0.1 * k
        return Out(h * attention_mask.unsqueeze(-1).float())


def want(tok):
    k = torch.arange(1, H + 1, dtype=torch.float32)
    v = torch.sin(torch.tensor(float(tok)) * k) + 0.1 * k
    return (v / v.norm()).tolist()


def post(port, body, raw=False):
    data = body if raw else json.dumps(body).encode()
    req = urllib.request.Request("http://127.0.0.1:%d/v1/embeddings" % port, data=data, method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def main():
    stock_serve.load = lambda d, device, compile_: (Tiny(), 64)
    pf = tempfile.mktemp()
    threading.Thread(target=stock_serve.main, args=([".", "--device", "cpu", "--port", "0", "--port-file", pf,
                                                      "--max-batch-tokens", "16"],), daemon=True).start()
    for _ in range(100):
        if os.path.exists(pf) and open(pf).read().strip():
            break
        time.sleep(0.05)
    port = int(open(pf).read())
    os.remove(pf)
    results = []

    def case(name, ok, detail=""):
        results.append(ok)
        print(("ok   " if ok else "FAIL ") + name + ("" if ok else ": " + str(detail)))

    def close(a, b):
        return len(a) == len(b) and all(abs(x - y) < 1e-5 for x, y in zip(a, b))

    st, r = post(port, {"input": [[5, 6, 7], [9], [3, 4]]})
    case("a padded batch: each embedding is its sequence's last token's, normalized", st == 200 and
         [d["index"] for d in r["data"]] == [0, 1, 2] and close(r["data"][0]["embedding"], want(7)) and
         close(r["data"][1]["embedding"], want(9)) and close(r["data"][2]["embedding"], want(4)) and
         r["usage"]["prompt_tokens"] == 6, (st, r))
    st, r = post(port, {"input": [11, 12]})
    case("one sequence of ids", st == 200 and len(r["data"]) == 1 and close(r["data"][0]["embedding"], want(12)), (st, r))
    st, r = post(port, {"input": [list(range(1, 13)), [40] * 10]})
    case("runs of at most --max-batch-tokens tokens (12 + 10 over 16: two runs)", st == 200 and
         close(r["data"][0]["embedding"], want(12)) and close(r["data"][1]["embedding"], want(40)), (st, r))
    got, calls0 = [None] * 16, Tiny.calls

    def one(i):
        got[i] = post(port, {"input": [i + 1, i + 2]})
    ts = [threading.Thread(target=one, args=(i,)) for i in range(16)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    case("16 concurrent requests, each its own answer", all(g and g[0] == 200 and close(g[1]["data"][0]["embedding"], want(i + 2))
                                                            for i, g in enumerate(got)), got[:2])
    case("concurrent requests batched together (fewer runs than requests)", Tiny.calls - calls0 < 16, Tiny.calls - calls0)
    for name, body in (("text input", {"input": "hello"}), ("an empty input", {"input": []}),
                       ("no input", {"x": 1}), ("over the model's length", {"input": list(range(65))})):
        st, r = post(port, body)
        case("400 for " + name, st == 400 and "message" in r.get("error", {}), (st, r))
    st, r = post(port, b"{not json", raw=True)
    case("400 for malformed JSON", st == 400, (st, r))
    with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=10) as h:
        case("GET /health", h.status == 200 and json.loads(h.read())["status"] == "ok")
    failed = results.count(False)
    print("%d passed, %d failed" % (len(results) - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
