#!/usr/bin/env python3
"""hf_bench.py — times the real transformers module of a model, the way emmy's bench times its graphs: a layer
(layer N on a hidden state x) or the whole model (on input_ids), with the weights and inputs emmy wrote.

    python3 tools/torchref/hf_bench.py DIR --mode layer|whole [--layer N] [--device cuda|cpu] [--reps 100]
                                       [--warmup 10] [--compile] [--json OUT]

DIR holds config.json, model.safetensors (the checkpoint's names; for a layer only that layer's weights: the
others keep transformers' initialization and are not run) and x.npy (layer) or input_ids.npy (whole).
Timing: bench.py's (CUDA-graph replay with events, plain launches when capture fails; wall clock on the CPU).
Prints the stats as JSON ({median_us, p20_us, p80_us, min_us, samples, method, transformers}); with --compile also
"compile": the same module under torch.compile (its stats, or {"error": why}). Exit status: 0 ok, 1 the module
failed, 2 bad input."""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import numpy as np
    import torch
except ImportError as e:
    sys.stderr.write("hf_bench: needs numpy and torch (%s)\n" % e)
    sys.exit(1)
import bench  # noqa: E402  (the timers)
import hf_check  # noqa: E402  (the model loader)


def main(argv):
    p = argparse.ArgumentParser(prog="hf_bench.py")
    p.add_argument("dir")
    p.add_argument("--mode", choices=("layer", "whole"), required=True)
    p.add_argument("--layer", type=int, default=0)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--json", metavar="OUT")
    p.add_argument("--compile", action="store_true", help="also time torch.compile of the same module")
    a = p.parse_args(argv)
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.stderr.write("hf_bench: --device cuda: torch sees no GPU\n")
        return 1
    try:
        model, base, tver = hf_check.load_model(a.dir, a.device, torch.bfloat16)
    except SystemExit:
        raise
    except Exception as e:  # noqa: BLE001  (one line: why transformers could not build the module)
        sys.stderr.write("hf_bench: transformers could not load %s: %s\n" % (a.dir, str(e).splitlines()[0] if str(e) else type(e).__name__))
        return 1
    try:
        with torch.no_grad():
            if a.mode == "layer":
                x = torch.from_numpy(np.load(os.path.join(a.dir, "x.npy"))).to(device=a.device, dtype=torch.bfloat16)
                S = x.shape[1]
                pos = torch.arange(S, device=a.device).unsqueeze(0).expand(x.shape[0], S)
                cos, sin = base.rotary_emb(x, pos)
                layer = base.layers[a.layer]

                def call(m):
                    return m(x, attention_mask=None, position_ids=pos, position_embeddings=(cos, sin))
                module = layer
            else:
                ids = torch.from_numpy(np.load(os.path.join(a.dir, "input_ids.npy"))).to(device=a.device, dtype=torch.long)

                def call(m):
                    return m(input_ids=ids).last_hidden_state
                module = base
            timer = bench.time_cuda if a.device == "cuda" else bench.time_cpu
            r = timer(lambda _: call(module), None, a.reps, a.warmup)
            if a.compile and not hasattr(torch, "compile"):
                r["compile"] = {"error": "torch %s has no torch.compile" % torch.__version__}
            elif a.compile:
                try:
                    compiled = torch.compile(module, dynamic=False)
                    r["compile"] = timer(lambda _: call(compiled), None, a.reps, a.warmup)
                except Exception as e:  # noqa: BLE001  (the eager row stands; the compile row says why)
                    r["compile"] = {"error": "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")}
    except Exception as e:  # noqa: BLE001
        sys.stderr.write("hf_bench: the module failed: %s: %s\n" % (type(e).__name__, str(e).splitlines()[0] if str(e) else ""))
        return 1
    r["transformers"] = tver
    text = json.dumps(r)
    if a.json:
        try:
            bench.replay.write_file(a.json, text)
        except bench.Fail as e:
            sys.stderr.write("hf_bench: %s\n" % e)
            return e.code
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
