#!/usr/bin/env python3
"""bench.py — times an emmy graph JSON (a whole layer or one kernel's reproducer) in PyTorch eager and
torch.compile on the same inputs, the way emmy times its kernels: warm-up, then CUDA-graph replay of the whole
graph (plain CUDA events when capture fails, said in the result), median of many samples with p20/p80.

    python3 tools/torchref/bench.py GRAPH.torch.json --inputs DIR [--bind NAME=N] [--device cuda]
                                    [--backends eager,compile] [--reps 100] [--warmup 10] [--json OUT]
                                    [--nvtx-once]

Inputs are DIR/<input name>.npy as replay.py reads them (emmy writes them). The graph is replayed op by op with
torch.ops.aten (replay.py's argument conversion); torch.compile compiles that same function. torch.compile's
outputs are checked against eager (max abs difference in the result). Exit status: 0 ok, 2 bad input, 1 a
backend failed (the others are still reported)."""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import replay  # noqa: E402  (the op-by-op machinery)
from replay import Fail, torch  # noqa: E402


def build(g, env, device):
    """The graph as a torch.fx GraphModule of its aten calls (arguments resolved once, here), and a function
    values -> outputs calling it. torch.compile compiles the GraphModule: dynamo sees only the aten calls, never
    the JSON walking, so it captures the whole graph in one piece (no graph breaks, no per-op Python)."""
    fxg = torch.fx.Graph()
    values = {}
    names = []
    for i in g["inputs"]:
        values[i["name"]] = fxg.placeholder("in_%d" % len(names))
        names.append(i["name"])
    for node in g["nodes"]:
        fn, schema, _fallback = replay.resolve_op(node["op"])
        pos, kw = replay.call_args(node, schema, values, env, device)
        values[node["name"]] = fxg.call_function(fn, tuple(pos), kw)
    fxg.output([values[o] for o in g["outputs"]])
    gm = torch.fx.GraphModule(torch.nn.Module(), fxg)
    return gm, names


def graph_breaks():
    """Dynamo's running count of graph breaks in this process (0 where torch has no dynamo)."""
    try:
        from torch._dynamo.utils import counters
        return sum(counters["graph_break"].values())
    except (ImportError, AttributeError):
        return 0


def caller(module, names):
    """values -> outputs through module (the GraphModule or its compiled form)."""
    return lambda inputs: module(*[inputs[n] for n in names])


def time_cuda(fn, args, reps, warmup):
    """Median/p20/p80 µs of fn(args) by CUDA-graph replay (events around each replay); falls back to plain
    launches timed with events when capture fails."""
    for _ in range(warmup):
        fn(args)
    torch.cuda.synchronize()
    method = "cuda-graph"
    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                fn(args)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn(args)
        call = graph.replay
    except Exception:  # a backend that cannot be captured is timed with plain launches
        method = "events"
        call = lambda: fn(args)  # noqa: E731
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        call()
        b.record()
        b.synchronize()
        samples.append(a.elapsed_time(b) * 1000.0)
    return summarize(samples, method)


def time_cpu(fn, args, reps, warmup):
    for _ in range(warmup):
        fn(args)
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn(args)
        samples.append((time.perf_counter() - t0) * 1e6)
    return summarize(samples, "wall-clock")


def summarize(samples, method):
    q = sorted(samples)
    pick = lambda f: q[min(len(q) - 1, int(f * len(q)))]  # noqa: E731
    return {"median_us": statistics.median(q), "min_us": q[0], "p20_us": pick(0.2), "p80_us": pick(0.8),
            "samples": len(q), "method": method}


def ceilings(out):
    """The GPU's measured rates: an 8192^3 bf16 matmul (TFLOP/s) and a 2 GiB device copy (GB/s read+write),
    random data, medians of CUDA-event samples."""
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    mm = time_cuda(lambda _: torch.mm(a, b), None, 20, 3)
    src = torch.randn(2 ** 30 // 2, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    cp = time_cuda(lambda _: dst.copy_(src), None, 20, 3)
    r = {"device": torch.cuda.get_device_name(0), "bf16_tflops": 2 * n ** 3 / mm["median_us"] / 1e6,
         "copy_gbps": 2 * src.numel() * 2 / cp["median_us"] / 1e3, "matmul": mm, "copy": cp}
    text = json.dumps(r, indent=1)
    if out:
        with open(out, "w") as f:
            f.write(text)
    print(text)
    return 0


def main(argv):
    if "--ceilings" in argv:
        out = argv[argv.index("--json") + 1] if "--json" in argv else None
        if not torch.cuda.is_available():
            sys.stderr.write("bench: --ceilings needs a GPU\n")
            return 1
        return ceilings(out)
    p = argparse.ArgumentParser(prog="bench.py")
    p.add_argument("graph", nargs="?")
    p.add_argument("--inputs", metavar="DIR")
    p.add_argument("--batch", metavar="FILE",
                   help="a JSON list of jobs {graph, inputs, json}: each graph benched in this one process (the other "
                        "options apply to every job; one job's failure is its JSON's error, the others go on)")
    p.add_argument("--bind", action="append", default=[], metavar="NAME=N")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    p.add_argument("--backends", default="eager,compile")
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--json", metavar="OUT")
    p.add_argument("--nvtx-once", action="store_true",
                   help="no timing: after one warm-up call, one call of each backend inside the NVTX range "
                        "emmy_profile_<backend> (for ncu --nvtx --nvtx-include emmy_profile_<backend>/)")
    a = p.parse_args(argv)
    if a.batch:
        try:
            jobs = json.load(open(a.batch))
        except (OSError, ValueError) as e:
            sys.stderr.write("bench: --batch %s: %s\n" % (a.batch, e))
            return 2
        rc = 0
        for job in jobs:
            r = bench_one(job["graph"], job["inputs"], job.get("json"), a, quiet=True)
            if r != 0:
                rc = 1
                if job.get("json") and not os.path.exists(job["json"]):
                    with open(job["json"], "w") as f:
                        json.dump({"graph": job["graph"], "backends": {}, "error": "bench.py exit %d (see its log)" % r}, f)
        return rc
    if not a.graph or not a.inputs:
        p.error("give GRAPH --inputs DIR, or --batch FILE")
    return bench_one(a.graph, a.inputs, a.json, a)


def bench_one(graph, inputs_dir, json_out, a, quiet=False):
    """Benches one graph with the options of a; writes json_out; returns the exit status."""
    try:
        g = replay.load_graph(graph)
        env = replay.bind_symbols(g, replay.parse_binds(a.bind))
        device = torch.device(a.device)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise Fail("--device cuda: torch sees no GPU", 1)
        inputs = {i["name"]: replay.load_input(i, inputs_dir, env, device) for i in g["inputs"]}
    except Fail as e:
        sys.stderr.write("bench: %s: %s\n" % (graph, e))
        return e.code
    try:
        gm, names = build(g, env, device)
    except Fail as e:
        sys.stderr.write("bench: %s: %s\n" % (graph, e))
        return e.code
    eager = caller(gm, names)
    if hasattr(torch, "_dynamo"):  # (a batch compiles many graphs in one process: each starts from a clean
        torch._dynamo.reset()      # dynamo, so no cache limit makes a later graph fall back to eager)
    timer = time_cuda if device.type == "cuda" else time_cpu
    result = {"graph": graph, "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
              "torch": torch.__version__, "bind": env, "backends": {}}
    rc = 0
    with torch.no_grad():
        ref = eager(inputs)
        for backend in a.backends.split(","):
            try:
                if backend == "eager":
                    fn = eager
                elif backend == "compile":
                    if not hasattr(torch, "compile"):
                        result["backends"][backend] = {"skipped": "torch %s has no torch.compile" % torch.__version__}
                        continue
                    breaks0 = graph_breaks()
                    fn = caller(torch.compile(gm, dynamic=False), names)
                else:
                    raise Fail("unknown backend '%s' (eager, compile)" % backend)
                out = fn(inputs)
                diff = max(float((x.float() - y.float()).abs().max()) if x.numel() else 0.0 for x, y in zip(out, ref))
                if a.nvtx_once:  # (NVTX ranges only on the GPU: a CPU build of torch has none)
                    if device.type == "cuda":
                        torch.cuda.synchronize()
                        torch.cuda.nvtx.range_push("emmy_profile_" + backend)
                    fn(inputs)
                    if device.type == "cuda":
                        torch.cuda.synchronize()
                        torch.cuda.nvtx.range_pop()
                    result["backends"][backend] = {"nvtx_range": "emmy_profile_" + backend, "max_abs_vs_eager": diff}
                    continue
                r = timer(fn, inputs, a.reps, a.warmup)
                r["max_abs_vs_eager"] = diff
                if backend == "compile":  # (dynamo's count: 0 means the graph compiled in one piece)
                    r["graph_breaks"] = graph_breaks() - breaks0
                result["backends"][backend] = r
            except Exception as e:  # one failing backend is a row, not the end of the run
                result["backends"][backend] = {"error": replay.first_line(e)}
                rc = 1
    text = json.dumps(result, indent=1)
    if json_out:
        with open(json_out, "w") as f:
            f.write(text)
    if not quiet:
        print(text)
    return rc




if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
