#!/usr/bin/env python3
"""test_replay.py — self-test of replay.py: hand-written graphs with seeded random inputs, replayed in a
subprocess and compared with NumPy computations written independently of torch; then the error contract (exit
codes, one line on stderr). Run: python3 tools/torchref/test_replay.py. CUDA cases are reported as skipped where
torch sees no GPU. The last line is `N passed, N failed`; the exit status is 1 when any failed."""

import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPLAY = os.path.join(HERE, "replay.py")
RNG = np.random.default_rng(20240611)
RESULTS = {"passed": 0, "failed": 0, "skipped": []}


def bf16(a):
    """Rounds float32 values to the nearest bf16 (ties to even), kept as float32."""
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32)


def randn(*shape, lo=0.1):
    """Seeded normal values with magnitude at least lo, so no input is zero."""
    x = RNG.standard_normal(shape).astype(np.float32)
    return np.where(np.abs(x) < lo, np.copysign(lo, x), x).astype(np.float32)


def graph(name, inputs, nodes, outputs, symbols=()):
    return {"format": "emmy.graph", "version": 1, "name": name, "symbols": list(symbols), "inputs": inputs,
            "nodes": nodes, "outputs": outputs}


def inp(name, dtype, shape, kind="activation"):
    return {"name": name, "kind": kind, "dtype": dtype, "shape": shape}


def node(name, op, args, dtype, shape):
    return {"name": name, "op": op, "args": args, "dtype": dtype, "shape": shape}


def run(g, arrays, *extra, raw=None):
    """Writes the graph and inputs to a temp dir, runs replay.py; returns (rc, stdout, stderr, {name: array})."""
    with tempfile.TemporaryDirectory() as d:
        gp = os.path.join(d, "g.torch.json")
        with open(gp, "w") as f:
            f.write(raw if raw is not None else json.dumps(g, indent=1))
        ind, outd = os.path.join(d, "in"), os.path.join(d, "out")
        os.makedirs(ind)
        for k, v in arrays.items():
            np.save(os.path.join(ind, k + ".npy"), v)
        p = subprocess.run([sys.executable, REPLAY, gp, "--inputs", ind, "--out", outd] + list(extra),
                           capture_output=True, text=True)
        outs = {}
        if os.path.isdir(outd):
            for fn in os.listdir(outd):
                outs[fn[:-4]] = np.load(os.path.join(outd, fn))
        return p.returncode, p.stdout, p.stderr, outs


def check(name, cond, detail=""):
    if cond:
        RESULTS["passed"] += 1
    else:
        RESULTS["failed"] += 1
        print("FAIL %s %s" % (name, detail))


def check_ok(name, res, want, rtol, atol, dtype=None):
    """The run succeeded silently and every wanted output matches."""
    rc, out, err, outs = res
    if rc != 0 or out or err:
        check(name, False, "rc=%d stdout=%r stderr=%r" % (rc, out, err))
        return
    for k, w in want.items():
        got = outs.get(k)
        if got is None:
            check("%s: %s" % (name, k), False, "no %s.npy" % k)
            continue
        if got.shape != w.shape or (dtype is not None and got.dtype != dtype):
            check("%s: %s" % (name, k), False, "got %s %s, want %s %s" % (got.dtype, got.shape, dtype, w.shape))
            continue
        err_ = np.max(np.abs(got.astype(np.float64) - w)) if w.size else 0.0
        check("%s: %s" % (name, k), np.allclose(got.astype(np.float64), w, rtol=rtol, atol=atol),
              "max abs err %g" % err_)


def check_err(name, res, code, *needles):
    """The run failed with code and one line on stderr starting `replay: ` that contains every needle."""
    rc, out, err, _ = res
    lines = err.splitlines()
    ok = rc == code and not out and len(lines) == 1 and lines[0].startswith("replay: ")
    ok = ok and all(n in lines[0] for n in needles)
    check(name, ok, "rc=%d stderr=%r" % (rc, err))


def devices():
    yield "cpu"
    if torch.cuda.is_available():
        yield "cuda"
    else:
        RESULTS["skipped"].append("cuda cases (torch sees no GPU)")


# ----------------------------------------------------------------------------------------------------------------

def test_rmsnorm():
    """Qwen3/HF RMSNorm: to f32, x*rsqrt(mean(x^2)+eps), back to bf16, times the weight."""
    H = 64
    g = graph("rmsnorm", [inp("x", "bf16", [2, "seq_len", H]),
                          inp("model.norm.weight", "bf16", [H], "param")], [
        node("v1", "aten._to_copy.default", {"self": "x", "dtype": "f32"}, "f32", [2, "seq_len", H]),
        node("v2", "aten.pow.Tensor_Scalar", {"self": "v1", "exponent": 2}, "f32", [2, "seq_len", H]),
        node("v3", "aten.mean.dim", {"self": "v2", "dim": [-1], "keepdim": True}, "f32", [2, "seq_len", 1]),
        node("v4", "aten.add.Tensor", {"self": "v3", "other": 1e-6}, "f32", [2, "seq_len", 1]),
        node("v5", "aten.rsqrt.default", {"self": "v4"}, "f32", [2, "seq_len", 1]),
        node("v6", "aten.mul.Tensor", {"self": "v1", "other": "v5"}, "f32", [2, "seq_len", H]),
        node("v7", "aten._to_copy.default", {"self": "v6", "dtype": "bf16"}, "bf16", [2, "seq_len", H]),
        node("v8", "aten.mul.Tensor", {"self": "model.norm.weight", "other": "v7"}, "bf16", [2, "seq_len", H]),
    ], ["v8"], [{"name": "seq_len", "hint": 5, "min": 1, "max": 4096}])
    for S, extra in ((5, []), (3, ["--bind", "seq_len=3"])):
        x, w = bf16(randn(2, S, H)), bf16(randn(H))
        x64 = x.astype(np.float64)
        n = (x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + 1e-6)).astype(np.float32)
        want = bf16(w * bf16(n)).astype(np.float64)
        for dev in devices():
            res = run(g, {"x": x, "model.norm.weight": w}, "--device", dev, *extra)
            check_ok("rmsnorm S=%d %s" % (S, dev), res, {"v8": want}, rtol=8e-3, atol=1e-3, dtype=np.float32)


def test_linear():
    x, w, b = randn(3, 16), randn(8, 16), randn(8)
    g = graph("linear", [inp("x", "f32", [3, 16]), inp("w", "f32", [8, 16], "param"),
                         inp("b", "f32", [8], "param")],
              [node("y", "aten.linear.default", {"input": "x", "weight": "w", "bias": "b"}, "f32", [3, 8])], ["y"])
    want = x.astype(np.float64) @ w.T.astype(np.float64) + b
    for dev in devices():
        check_ok("linear f32 %s" % dev, run(g, {"x": x, "w": w, "b": b}, "--device", dev), {"y": want},
                 rtol=1e-5, atol=1e-5, dtype=np.float32)
    xb, wb = bf16(x), bf16(w)
    g = graph("linear_bf16", [inp("x", "bf16", [3, 16]), inp("w", "bf16", [8, 16], "param")],
              [node("y", "aten.linear.default", {"input": "x", "weight": "w"}, "bf16", [3, 8])], ["y"])
    want = bf16((xb.astype(np.float64) @ wb.T.astype(np.float64)).astype(np.float32)).astype(np.float64)
    for dev in devices():
        check_ok("linear bf16 %s" % dev, run(g, {"x": xb, "w": wb}, "--device", dev), {"y": want},
                 rtol=8e-3, atol=1e-2, dtype=np.float32)


def sdpa_ref(q, k, v, causal=False, mask=None, scale=None):
    """SDPA in float64 with NumPy: kv heads repeated to the query heads (GQA), keep-mask or additive mask."""
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    rep = q.shape[-3] // k.shape[-3]
    k, v = np.repeat(k, rep, axis=-3), np.repeat(v, rep, axis=-3)
    s = q @ np.swapaxes(k, -1, -2) * (1 / np.sqrt(q.shape[-1]) if scale is None else scale)
    L, S = s.shape[-2:]
    if causal:
        s = np.where(np.arange(S)[None, :] > np.arange(L)[:, None], -np.inf, s)
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


def test_sdpa():
    op = "aten.scaled_dot_product_attention.default"
    # Causal GQA: 4 query heads share 2 kv heads.
    L, E = 6, 8
    q, k, v = bf16(randn(1, 4, L, E)), bf16(randn(1, 2, L, E)), bf16(randn(1, 2, L, E))
    g = graph("sdpa_gqa", [inp("q", "bf16", [1, 4, L, E]), inp("k", "bf16", [1, 2, L, E]),
                           inp("v", "bf16", [1, 2, L, E])],
              [node("o", op, {"query": "q", "key": "k", "value": "v", "is_causal": True, "enable_gqa": True},
                    "bf16", [1, 4, L, E])], ["o"])
    want = bf16(sdpa_ref(q, k, v, causal=True).astype(np.float32)).astype(np.float64)
    for dev in devices():
        check_ok("sdpa causal gqa bf16 %s" % dev, run(g, {"q": q, "k": k, "v": v}, "--device", dev), {"o": want},
                 rtol=2e-2, atol=2e-2, dtype=np.float32)
    # f32, L != S, a boolean keep-mask (every row keeps something) and an explicit scale.
    L, S = 3, 5
    q, k, v = randn(2, 2, L, E), randn(2, 2, S, E), randn(2, 2, S, E)
    m = RNG.random((L, S)) < 0.6
    m[:, 0] = True
    g = graph("sdpa_mask", [inp("q", "f32", [2, 2, L, E]), inp("k", "f32", [2, 2, S, E]),
                            inp("v", "f32", [2, 2, S, E]), inp("m", "bool", [L, S])],
              [node("o", op, {"query": "q", "key": "k", "value": "v", "attn_mask": "m", "scale": 0.3},
                    "f32", [2, 2, L, E])], ["o"])
    want = sdpa_ref(q, k, v, mask=m, scale=0.3)
    for dev in devices():
        check_ok("sdpa bool mask f32 %s" % dev, run(g, {"q": q, "k": k, "v": v, "m": m}, "--device", dev),
                 {"o": want}, rtol=1e-4, atol=1e-5, dtype=np.float32)
    # emmy's seq_pos: sequences of 3, 1, 4 rows packed end to end, causal in each (the mask it stands for).
    lens, T = [3, 1, 4], 8
    pos = np.concatenate([np.arange(n) for n in lens]).reshape(1, T).astype(np.int64)
    keep = np.zeros((T, T), dtype=bool)
    o0 = 0
    for n in lens:
        for i in range(n):
            keep[o0 + i, o0:o0 + i + 1] = True
        o0 += n
    qp, kp, vp = randn(1, 2, T, E), randn(1, 2, T, E), randn(1, 2, T, E)
    gp = graph("sdpa_seq_pos", [inp("q", "f32", [1, 2, T, E]), inp("k", "f32", [1, 2, T, E]),
                                inp("v", "f32", [1, 2, T, E]), inp("p", "i64", [1, T])],
               [node("o", op, {"query": "q", "key": "k", "value": "v", "is_causal": True, "seq_pos": "p"},
                     "f32", [1, 2, T, E])], ["o"])
    want = sdpa_ref(qp, kp, vp, mask=keep)
    for dev in devices():
        check_ok("sdpa seq_pos f32 %s" % dev, run(gp, {"q": qp, "k": kp, "v": vp, "p": pos}, "--device", dev),
                 {"o": want}, rtol=1e-4, atol=1e-5, dtype=np.float32)
    # An additive float mask.
    am = randn(L, S)
    g["inputs"][3] = inp("m", "f32", [L, S])
    g["nodes"][0]["args"] = {"query": "q", "key": "k", "value": "v", "attn_mask": "m"}
    want = sdpa_ref(q, k, v, mask=am)
    for dev in devices():
        check_ok("sdpa float mask f32 %s" % dev, run(g, {"q": q, "k": k, "v": v, "m": am}, "--device", dev),
                 {"o": want}, rtol=1e-4, atol=1e-5, dtype=np.float32)


def test_bench_sdpa():
    """bench.py on an SDPA graph: --out writes eager's outputs (with --backends none, no timing), each sdpa_* backend
    is timed (its max abs difference from eager small) or skipped where torch has no sdpa_kernel; an unknown
    backend is that backend's error; a --batch job's out is written too."""
    op = "aten.scaled_dot_product_attention.default"
    L, E = 12, 16
    q, k, v = bf16(randn(1, 4, L, E)), bf16(randn(1, 2, L, E)), bf16(randn(1, 2, L, E))
    g = graph("sdpa_bench", [inp("q", "bf16", [1, 4, L, E]), inp("k", "bf16", [1, 2, L, E]),
                             inp("v", "bf16", [1, 2, L, E])],
              [node("a", op, {"query": "q", "key": "k", "value": "v", "is_causal": True, "enable_gqa": True},
                    "bf16", [1, 4, L, E]),
               node("t", "aten.transpose.int", {"self": "a", "dim0": 1, "dim1": 2}, "bf16", [1, L, 4, E]),
               node("o", "aten.reshape.default", {"self": "t", "shape": [1, L, 4 * E]}, "bf16", [1, L, 4 * E])],
              ["o"])
    want = bf16(sdpa_ref(q, k, v, causal=True).astype(np.float32)).astype(np.float64)
    want = want.transpose(0, 2, 1, 3).reshape(1, L, 4 * E)
    bench = os.path.join(HERE, "bench.py")
    for dev in devices():
        with tempfile.TemporaryDirectory() as d:
            gp, ind = os.path.join(d, "g.torch.json"), os.path.join(d, "in")
            with open(gp, "w") as f:
                json.dump(g, f)
            os.makedirs(ind)
            for name, a in (("q", q), ("k", k), ("v", v)):
                np.save(os.path.join(ind, name + ".npy"), a)
            outd, jp = os.path.join(d, "out"), os.path.join(d, "b.json")
            p = subprocess.run([sys.executable, bench, gp, "--inputs", ind, "--device", dev, "--backends", "none",
                                "--out", outd, "--json", jp], capture_output=True, text=True)
            ok = p.returncode == 0 and os.path.exists(os.path.join(outd, "o.npy"))
            check("bench.py --backends none --out %s" % dev, ok, "rc=%d %s" % (p.returncode, p.stderr[-300:]))
            if ok:
                got = np.load(os.path.join(outd, "o.npy")).astype(np.float64)
                check("bench.py --out: eager's output %s" % dev,
                      got.shape == want.shape and np.allclose(got, want, rtol=2e-2, atol=2e-2))
                check("bench.py --backends none times nothing %s" % dev, json.load(open(jp))["backends"] == {})
            p = subprocess.run([sys.executable, bench, gp, "--inputs", ind, "--device", dev, "--backends",
                                "eager,sdpa_flash,sdpa_math,sdpa_nope", "--reps", "3", "--warmup", "1", "--json", jp],
                               capture_output=True, text=True)
            r = json.load(open(jp))["backends"] if os.path.exists(jp) else {}
            check("bench.py sdpa backends %s: exit 1 for the unknown one" % dev, p.returncode == 1, p.stderr[-300:])
            check("bench.py eager timed %s" % dev, r.get("eager", {}).get("median_us", 0) > 0, str(r.get("eager")))
            for b in ("sdpa_flash", "sdpa_math"):
                x = r.get(b, {})
                timed = x.get("median_us", 0) > 0 and x.get("max_abs_vs_eager", 1) < 0.05
                refused = "error" in x and "No available kernel" in x["error"]  # (a kernel this device lacks)
                skipped = "sdpa_kernel" in x.get("skipped", "")
                check("bench.py %s %s: timed, refused or skipped" % (b, dev), timed or refused or skipped, str(x))
            check("bench.py unknown backend %s" % dev, "unknown backend 'sdpa_nope'" in r.get("sdpa_nope", {}).get(
                "error", ""), str(r.get("sdpa_nope")))
            jobs = os.path.join(d, "jobs.json")
            with open(jobs, "w") as f:
                json.dump([{"graph": gp, "inputs": ind, "json": os.path.join(d, "j1.json"),
                            "out": os.path.join(d, "o1")}], f)
            p = subprocess.run([sys.executable, bench, "--batch", jobs, "--device", dev, "--backends", "none"],
                               capture_output=True, text=True)
            check("bench.py --batch job out %s" % dev, p.returncode == 0 and os.path.exists(
                os.path.join(d, "o1", "o.npy")), p.stderr[-300:])


def symbolic_graph():
    sym = [{"name": "seq_len", "hint": 3, "min": 1, "max": 1024}]
    return graph("symbolic", [inp("x", "f32", [2, "seq_len", 4, 4])], [
        node("v1", "aten.view.default", {"self": "x", "size": [2, "16*seq_len"]}, "f32", [2, "16*seq_len"]),
        node("v2", "aten.view.default", {"self": "v1", "size": [2, "cdiv(16*seq_len,2)", 2]}, "f32",
             [2, "8*seq_len", 2]),
        node("v3", "aten.slice.Tensor", {"self": "v2", "dim": 1, "start": 0, "end": "seq_len"}, "f32",
             [2, "seq_len", 2]),
        node("v4", "aten.mul.Tensor", {"self": "v3", "other": {"float": 2}}, "f32", [2, "seq_len", 2]),
        node("v5", "aten.arange.default", {"end": "seq_len+1", "dtype": "i32"}, "i32", ["seq_len+1"]),
        node("v6", "aten.arange.default", {"end": "(seq_len-1)*2"}, "i64", ["2*seq_len-2"]),
    ], ["v4", "v5", "v6"], sym)


def test_symbolic():
    g = symbolic_graph()
    for S, extra in ((3, []), (7, ["--bind", "seq_len=7"])):
        x = randn(2, S, 4, 4)
        want = {"v4": x.reshape(2, 8 * S, 2)[:, :S] * 2.0, "v5": np.arange(S + 1), "v6": np.arange(2 * S - 2)}
        for dev in devices():
            res = run(g, {"x": x}, "--device", dev, *extra)
            check_ok("symbolic S=%d %s" % (S, dev), res, want, rtol=0, atol=0)
            outs = res[3]
            check("symbolic S=%d %s: int dtypes" % (S, dev),
                  "v5" in outs and outs["v5"].dtype == np.int32 and outs["v6"].dtype == np.int64)
    x = randn(2, 3, 4, 4)
    rc, out, err, outs = run(g, {"x": x}, "--all")
    check("--all writes every node", rc == 0 and sorted(outs) == ["v%d" % i for i in range(1, 7)], str(sorted(outs)))
    rc, out, err, outs = run(g, {"x": x}, "--verbose")
    check("--verbose prints one line per node", rc == 0 and len(out.splitlines()) == 6 and not err, repr(out))


def test_f16():
    """f16 ops that torch 1.13 has no CPU kernel for (mm, rsqrt, softmax) still replay (computed in f32)."""
    a, b = randn(4, 8).astype(np.float16), randn(8, 5).astype(np.float16)
    g = graph("f16", [inp("a", "f16", [4, 8]), inp("b", "f16", [8, 5])], [
        node("m", "aten.mm.default", {"self": "a", "mat2": "b"}, "f16", [4, 5]),
        node("s", "aten._softmax.default", {"self": "m", "dim": -1, "half_to_float": False}, "f16", [4, 5]),
        node("t", "aten._softmax.default", {"self": "m", "dim": -1, "half_to_float": True}, "f32", [4, 5]),
    ], ["s", "t"])
    m = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float16).astype(np.float64)
    e = np.exp(m - m.max(-1, keepdims=True))
    sm = e / e.sum(-1, keepdims=True)
    for dev in devices():
        res = run(g, {"a": a, "b": b}, "--device", dev)
        check_ok("f16 mm+softmax %s" % dev, res, {"s": sm}, rtol=2e-3, atol=2e-3, dtype=np.float16)
        check_ok("f16 softmax half_to_float %s" % dev, res, {"t": sm}, rtol=1e-3, atol=1e-4, dtype=np.float32)


def test_errors():
    x = randn(2, 3, 4, 4)
    g = symbolic_graph()
    bad = json.loads(json.dumps(g))
    bad["nodes"][2]["op"] = "aten.frobnicate.default"
    check_err("unknown op: exit 2", run(bad, {"x": x}), 2, "g.torch.json", "node 'v3'", "aten.frobnicate.default")
    check_err("missing input file: exit 2", run(g, {}), 2, "input 'x'", "x.npy")
    nohint = json.loads(json.dumps(g))
    del nohint["symbols"][0]["hint"]
    check_err("unbound symbol: exit 2", run(nohint, {"x": x}), 2, "seq_len")
    check_ok("unbound symbol bound by --bind", run(nohint, {"x": x}, "--bind", "seq_len=3"),
             {"v4": x.reshape(2, 24, 2)[:, :3] * 2.0}, rtol=0, atol=0)
    check_err("input shape mismatch: exit 2", run(g, {"x": x}, "--bind", "seq_len=4"), 2, "input 'x'", "[2, 3, 4, 4]")
    check_err("input dtype kind mismatch: exit 2", run(g, {"x": x.astype(np.int32)}), 2, "input 'x'", "int32")
    check_err("bind outside range: exit 2", run(g, {"x": x}, "--bind", "seq_len=0"), 2, "seq_len")
    check_err("bind unknown symbol: exit 2", run(g, {"x": x}, "--bind", "n=3"), 2, "'n'")
    check_err("bad JSON: exit 2", run(None, {"x": x}, raw="{\"format\": "), 2, "bad JSON")
    v2 = json.loads(json.dumps(g))
    v2["version"] = 2
    check_err("version 2: exit 2", run(v2, {"x": x}), 2, "version 2")
    wrong = json.loads(json.dumps(g))
    wrong["nodes"][3]["dtype"] = "bf16"
    check_err("node dtype mismatch: exit 2", run(wrong, {"x": x}), 2, "node 'v4'", "bf16")
    wrong = json.loads(json.dumps(g))
    wrong["nodes"][2]["shape"] = [2, "seq_len+1", 2]
    check_err("node shape mismatch: exit 2", run(wrong, {"x": x}), 2, "node 'v3'", "[2, 4, 2]")
    wrong = json.loads(json.dumps(g))
    wrong["nodes"][0]["args"]["sizes"] = wrong["nodes"][0]["args"].pop("size")
    check_err("unknown argument: exit 2", run(wrong, {"x": x}), 2, "node 'v1'", "'sizes'")
    wrong = json.loads(json.dumps(g))
    wrong["nodes"][0]["args"]["size"] = [2, "16*n"]
    check_err("undeclared symbol in a dim: exit 2", run(wrong, {"x": x}), 2, "node 'v1'", "'n'")
    wrong = json.loads(json.dumps(g))
    wrong["nodes"][1]["args"]["self"] = "v9"
    check_err("undefined value: exit 2", run(wrong, {"x": x}), 2, "node 'v2'", "'v9'")
    a = randn(2, 3)
    mm = graph("mm", [inp("a", "f32", [2, 3])],
               [node("p", "aten.mm.default", {"self": "a", "mat2": "a"}, "f32", [2, 3])], ["p"])
    check_err("torch failure: exit 1", run(mm, {"a": a}), 1, "node 'p' (aten.mm.default)")
    check_err("bad --bind: exit 2", run(g, {"x": x}, "--bind", "seq_len"), 2, "--bind")
    check_err("bad --device: exit 2", run(g, {"x": x}, "--device", "tpu"), 2, "--device")
    if not torch.cuda.is_available():
        check_err("--device cuda without GPU: exit 2", run(g, {"x": x}, "--device", "cuda"), 2, "cuda")
    xb = randn(2, 3, 4, 4) * 1.001
    rms = graph("bf", [inp("x", "bf16", [2, 3, 4, 4])],
                [node("y", "aten.neg.default", {"self": "x"}, "bf16", [2, 3, 4, 4])], ["y"])
    check_err("bf16 input not exactly bf16: exit 2", run(rms, {"x": xb}), 2, "input 'x'", "bf16")


def main():
    for t in (test_rmsnorm, test_linear, test_sdpa, test_bench_sdpa, test_symbolic, test_f16, test_errors):
        t()
    for s in RESULTS["skipped"][:1]:
        print("skipped: %s" % s)
    print("%d passed, %d failed" % (RESULTS["passed"], RESULTS["failed"]))
    return 1 if RESULTS["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
