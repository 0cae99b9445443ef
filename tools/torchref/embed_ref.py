#!/usr/bin/env python3
"""embed_ref.py — transformers' own embeddings of a model folder, for emmy serve's check against transformers (issue 23).

    python3 tools/torchref/embed_ref.py DIR --init
    python3 tools/torchref/embed_ref.py DIR --seqs FILE [--device cuda]

--init: DIR holds config.json (and nothing else of the weights); writes DIR/model.safetensors with the architecture's own
initialization (transformers' AutoModel.from_config, seeded, bf16), keeping DIR's config.json as it was — so that emmy
and transformers load the same weights. --seqs FILE: a JSON array of sequences of token ids; prints a JSON array of
their embeddings, each sequence run alone (no padding, no mask), its last token's hidden state L2-normalized (the
model's last-token pooling), in float32. Exit status 1 with one line on stderr when torch or transformers is missing."""

import json
import os
import shutil
import sys

try:
    import torch
    from transformers import AutoConfig, AutoModel
except ImportError as e:
    sys.stderr.write("embed_ref: needs torch and transformers (%s)\n" % e)
    sys.exit(1)


def init(d):
    cfg_path = os.path.join(d, "config.json")
    keep = cfg_path + ".emmy-keep"
    shutil.copyfile(cfg_path, keep)
    torch.manual_seed(0)
    cfg = AutoConfig.from_pretrained(d)
    try:
        model = AutoModel.from_config(cfg, dtype=torch.bfloat16)
    except TypeError:
        model = AutoModel.from_config(cfg, torch_dtype=torch.bfloat16)
    model.save_pretrained(d, safe_serialization=True)
    os.replace(keep, cfg_path)


def embed(d, seqs, device):
    model = AutoModel.from_pretrained(d, dtype=torch.bfloat16, attn_implementation="sdpa").to(device).eval()
    out = []
    with torch.no_grad():
        for s in seqs:
            h = model(input_ids=torch.tensor([s], dtype=torch.long, device=device)).last_hidden_state
            v = torch.nn.functional.normalize(h[0, -1].float(), p=2, dim=-1)
            out.append(v.cpu().tolist())
    return out


def main(argv):
    if not argv or argv[0].startswith("-"):
        sys.stderr.write("usage: embed_ref.py DIR --init | --seqs FILE [--device cuda]\n")
        return 2
    d, rest = argv[0], argv[1:]
    if "--init" in rest:
        init(d)
        return 0
    if "--seqs" not in rest:
        sys.stderr.write("embed_ref: --init or --seqs FILE\n")
        return 2
    with open(rest[rest.index("--seqs") + 1]) as f:
        seqs = json.load(f)
    device = rest[rest.index("--device") + 1] if "--device" in rest else ("cuda" if torch.cuda.is_available() else "cpu")
    json.dump(embed(d, seqs, device), sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
