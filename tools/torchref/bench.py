#!/usr/bin/env python3
"""bench.py — times an emmy graph JSON (a whole layer or one kernel's reproducer) in PyTorch eager and
torch.compile on the same inputs, the way emmy times its kernels: warm-up, then CUDA-graph replay of the whole
graph (plain CUDA events when capture fails, said in the result), median of many samples with p20/p80.

    python3 tools/torchref/bench.py GRAPH.torch.json --inputs DIR [--bind NAME=N] [--device cuda]
                                    [--backends eager,compile,sdpa_flash,…] [--reps 100] [--warmup 10]
                                    [--json OUT]
                                    [--out DIR] [--nvtx-once]

Inputs are DIR/<input name>.npy as replay.py reads them (emmy writes them). The graph is replayed op by op with
torch.ops.aten (replay.py's argument conversion); torch.compile compiles that same function. torch.compile's
outputs are checked against eager (max abs difference in the result). The backends sdpa_flash, sdpa_efficient,
sdpa_cudnn and sdpa_math are eager with aten's scaled_dot_product_attention held to that one kernel
(torch.nn.attention.sdpa_kernel, torch >= 2.3); one that refuses the inputs is an error naming torch's reasons.
--out DIR writes eager's outputs as DIR/<output name>.npy (replay.py's format): a reference on the GPU for what
emmy's CPU reference is too slow to compute. Exit status: 0 ok, 2 bad input, 1 a backend failed (the others are
still reported)."""

import argparse
import json
import os
import re
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import replay  # noqa: E402  (the op-by-op machinery)
from replay import Fail, torch  # noqa: E402


def build(g, env, device):
    """(GraphModule, input names): the graph as a torch.fx GraphModule of its aten calls (arguments resolved once,
    here; its inputs positional, in the graph's input order). torch.compile compiles the GraphModule: dynamo sees
    only the aten calls, never the JSON walking (before 2026-11-30 it traced that loop, and ran at eager's speed)."""
    fxg = torch.fx.Graph()
    values = {}
    names = []
    for i in g["inputs"]:
        values[i["name"]] = fxg.placeholder("in_%d" % len(names))
        names.append(i["name"])
    for node in g["nodes"]:
        node, seq_pos = replay.seq_pos_node(node)  # (emmy's seq_pos: the mask it stands for, made in the graph)
        if seq_pos is not None:
            values[node["name"] + ".seq_pos_mask"] = fxg.call_function(replay.seq_pos_mask, (values[seq_pos],))
        fn, schema, _fallback = replay.resolve_op(node["op"])
        pos, kw = replay.call_args(node, schema, values, env, device)
        values[node["name"]] = fxg.call_function(fn, tuple(pos), kw)
    fxg.output([values[o] for o in g["outputs"]])
    gm = torch.fx.GraphModule(torch.nn.Module(), fxg)
    return gm, names


# the backends that hold aten's scaled_dot_product_attention to one kernel, by torch.nn.attention.SDPBackend name
SDPA_BACKENDS = {"sdpa_flash": "FLASH_ATTENTION", "sdpa_efficient": "EFFICIENT_ATTENTION",
                 "sdpa_cudnn": "CUDNN_ATTENTION", "sdpa_math": "MATH"}


def sdpa_only(backend, fn):
    """fn with every call under torch.nn.attention.sdpa_kernel(<backend's SDPBackend>) (a fresh context a call: the
    kernel is chosen at each call, and fixed in a captured CUDA graph), or None when this torch has no
    sdpa_kernel or no such backend."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        which = getattr(SDPBackend, SDPA_BACKENDS[backend])
    except (ImportError, AttributeError):
        return None

    def call(inputs):
        with sdpa_kernel(which):
            return fn(inputs)
    return call


def refusal(caught):
    """torch's reasons for a refused SDPA kernel, from the warnings it gave ("Flash attention requires …"), one
    line; "" when none."""
    out = []
    for w in caught:
        lines = str(w.message).strip().splitlines()
        m = re.sub(r"\s*\(Triggered internally at .*$", "", lines[0]) if lines else ""
        if m and not m.endswith(":") and m not in out:  # ("… kernel not used because:" heads the reasons)
            out.append(m)
    return "; ".join(out[:3])


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


MIN_SAMPLE_US = 200.0  # a replay is at least this much GPU time (see time_cuda)
CALIBRATE_CALLS = 32   # calls per replay when calibrating a short fn


def capture(fn, args, k):
    """A CUDA graph of k back-to-back calls of fn(args) (side-stream warm-up first, as torch asks)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn(args)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(k):
            fn(args)
    return graph


def time_cuda(fn, args, reps, warmup):
    """Median/p20/p80 µs of one fn(args) on the GPU, as emmy times its kernels (src/cuda.c em_cu_time): fn captured
    into a CUDA graph of k back-to-back calls, replays chained (one event between consecutive replays, no host wait),
    a sample = one replay / k. k makes a replay at least MIN_SAMPLE_US of GPU time, so the host's cost of a replay
    from Python (tens of µs on the lent H200, a VM: measured 2026-11-30, a 7 µs cuBLAS kernel timed at 19 µs with
    20 µs replays) never starves the stream. The GPU time of one call is calibrated on a replay of
    CALIBRATE_CALLS calls (one replay's launch latency spread over them) unless a single call is already long.
    Falls back to plain launches (k calls between events) when capture fails, said in the result's method."""
    for _ in range(warmup):
        fn(args)
    torch.cuda.synchronize()

    def span(call, n):  # µs of n calls between two events
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(n):
            call()
        b.record()
        b.synchronize()
        return a.elapsed_time(b) * 1000.0

    def calls_for(once):
        return max(1, min(4096, int(-(-MIN_SAMPLE_US // max(once, 0.05)))))

    method = "cuda-graph"
    try:
        graph = capture(fn, args, 1)
        once = span(graph.replay, 3) / 3
        if once < MIN_SAMPLE_US:  # (short: the span above may be the host's launch cost, not the GPU's)
            cal = capture(fn, args, CALIBRATE_CALLS)
            cal.replay()
            once = min(once, span(cal.replay, 1) / CALIBRATE_CALLS)
            del cal
            k = calls_for(once)
            graph = capture(fn, args, k)
        else:
            k = 1
        call = graph.replay
    except Exception:  # a backend that cannot be captured is timed with plain launches
        method = "events"
        k = calls_for(span(lambda: fn(args), 3) / 3)

        def call():
            for _ in range(k):
                fn(args)
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(reps + 1)]
    ev[0].record()
    for i in range(reps):
        call()
        ev[i + 1].record()
    ev[reps].synchronize()
    samples = [ev[i].elapsed_time(ev[i + 1]) * 1000.0 / k for i in range(reps)]
    r = summarize(samples, method)
    r["batch"] = k
    return r


def kernel_breakdown(fn, args, runs):
    """The kernels one fn(args) runs on the GPU and their durations (torch.profiler over `runs` plain calls, so no
    graph hides them): [{name, us, count}] per call, longest first. Kernel durations only: launch gaps are not in
    them, so they add up to less than the replay time."""
    from torch.profiler import profile, ProfilerActivity
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(runs):
            fn(args)
        torch.cuda.synchronize()
    out = []
    for e in prof.key_averages():
        us = getattr(e, "device_time_total", None)
        if us is None:
            us = getattr(e, "cuda_time_total", 0)
        if us and us > 0 and e.count:
            out.append({"name": e.key, "us": us / runs, "count": e.count / runs})
    out.sort(key=lambda x: -x["us"])
    return out


def cold_time(fn, args, runs, per_kernel=None):
    """The median over `runs` calls of fn's kernels' summed durations (torch.profiler), the L2 flushed before each
    call by filling a buffer of twice its size: the regime of a kernel in a model's program, whose weights stream
    from HBM (emmy's bench.cold_us times its kernels the same way). per_kernel: a list that receives each kernel's
    mean duration a call, [{name, us, count}] as kernel_breakdown's."""
    from torch.profiler import profile, ProfilerActivity
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 0
    flush = torch.empty(2 * max(l2, 32 << 20), dtype=torch.uint8, device="cuda")
    fn(args)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(runs):
            flush.fill_(i & 255)
            fn(args)
        torch.cuda.synchronize()
    kern = [e for e in prof.events() if getattr(e, "device_type", None) is not None and str(e.device_type).endswith("CUDA")]
    kern.sort(key=lambda e: e.time_range.start)
    totals, cur, per = [], None, {}
    for e in kern:
        if "fill" in e.name.lower():  # (the flush: fn's own kernels follow it)
            if cur is not None:
                totals.append(cur)
            cur = 0.0
        elif cur is not None:
            cur += e.time_range.elapsed_us()
            us, n = per.get(e.name, (0.0, 0))
            per[e.name] = (us + e.time_range.elapsed_us(), n + 1)
    if cur is not None:
        totals.append(cur)
    if per_kernel is not None and totals:
        per_kernel.extend(sorted(({"name": k, "us": us / len(totals), "count": n / len(totals)} for k, (us, n) in per.items()),
                                 key=lambda x: -x["us"]))
    totals = [t for t in totals if t > 0]
    return statistics.median(totals) if totals else None


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
        try:
            replay.write_file(out, text)
        except Fail as e:
            sys.stderr.write("bench: %s\n" % e)
            return e.code
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
                   help="a JSON list of jobs {graph, inputs, json, out (optional)}: each graph benched in this one "
                        "process (the other options apply to every job; one job's failure is its JSON's error, the "
                        "others go on)")
    p.add_argument("--bind", action="append", default=[], metavar="NAME=N")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    p.add_argument("--backends", default="eager,compile")
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--json", metavar="OUT")
    p.add_argument("--out", metavar="DIR", help="also eager's outputs, as DIR/<output name>.npy")
    p.add_argument("--kernels", type=int, default=0, metavar="N",
                   help="also each backend's kernels and their durations (torch.profiler over N plain calls; GPU only)")
    p.add_argument("--cold", type=int, default=0, metavar="N",
                   help="also the median of N calls' kernel durations with the L2 flushed before each (GPU only)")
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
            r = bench_one(job["graph"], job["inputs"], job.get("json"), a, quiet=True, out_dir=job.get("out"))
            if r != 0:
                rc = 1
                if job.get("json") and not os.path.exists(job["json"]):
                    try:
                        replay.write_file(job["json"], json.dumps(
                            {"graph": job["graph"], "backends": {}, "error": "bench.py exit %d (see its log)" % r}))
                    except Fail as e:
                        sys.stderr.write("bench: %s\n" % e)
        return rc
    if not a.graph or not a.inputs:
        p.error("give GRAPH --inputs DIR, or --batch FILE")
    return bench_one(a.graph, a.inputs, a.json, a, out_dir=a.out)


def bench_one(graph, inputs_dir, json_out, a, quiet=False, out_dir=None):
    """Benches one graph with the options of a; writes json_out (and eager's outputs into out_dir when given);
    returns the exit status."""
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
        try:
            ref = eager(inputs)
            if out_dir:
                os.makedirs(out_dir, exist_ok=True)
                for name, t in zip(g["outputs"], ref):
                    replay.save(out_dir, name, t)
        except Exception as e:  # (a batch goes on to its next graph)
            result["error"] = "eager: %s" % replay.first_line(e)
            ref = None
            rc = 1
        backends = [b for b in a.backends.split(",") if b and b != "none"] if ref is not None else []
        for backend in backends:
            try:
                if backend == "eager":
                    fn = eager
                elif backend == "compile":
                    if not hasattr(torch, "compile"):
                        result["backends"][backend] = {"skipped": "torch %s has no torch.compile" % torch.__version__}
                        continue
                    breaks0 = graph_breaks()
                    fn = caller(torch.compile(gm, dynamic=False), names)
                elif backend in SDPA_BACKENDS:
                    fn = sdpa_only(backend, eager)
                    if fn is None:
                        result["backends"][backend] = {"skipped": "torch %s has no torch.nn.attention.sdpa_kernel "
                                                       "with this backend" % torch.__version__}
                        continue
                else:
                    raise Fail("unknown backend '%s' (eager, compile, %s, none)" % (backend, ", ".join(SDPA_BACKENDS)))
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    try:
                        out = fn(inputs)
                    except Exception as e:
                        why = refusal(caught)
                        raise RuntimeError(replay.first_line(e) + (" (%s)" % why if why else "")) from e
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
                if a.kernels > 0 and device.type == "cuda":
                    try:
                        r["kernels"] = kernel_breakdown(fn, inputs, a.kernels)
                    except Exception as e:  # the time stands without the breakdown
                        r["kernels_error"] = replay.first_line(e)
                if a.cold > 0 and device.type == "cuda":
                    try:
                        per = []
                        r["cold_us"] = cold_time(fn, inputs, a.cold, per)
                        r["cold_kernels"] = per
                    except Exception as e:  # the time stands without it
                        r["cold_error"] = replay.first_line(e)
                if backend == "compile":  # (dynamo's count: 0 means the graph compiled in one piece)
                    r["graph_breaks"] = graph_breaks() - breaks0
                result["backends"][backend] = r
            except Exception as e:  # one failing backend is a row, not the end of the run
                result["backends"][backend] = {"error": replay.first_line(e)}
                rc = 1
    text = json.dumps(result, indent=1)
    if json_out:
        try:
            replay.write_file(json_out, text)
        except Fail as e:
            sys.stderr.write("bench: %s\n" % e)
            return e.code
    if not quiet:
        print(text)
    return rc




if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
