#!/usr/bin/env python3
"""replay.py — replays an emmy graph JSON (docs/formats.md) with PyTorch, one torch.ops.aten call per node, so
that emmy's CPU reference can be checked against an outside oracle. Standard library, torch and numpy only; runs
on Debian's torch 1.13 (CPU) and on torch 2.x (CPU or CUDA).

Exit status: 0 ok; 2 the graph, its inputs or the command line are wrong (including a node whose result dtype or
shape differs from the graph's); 1 a torch call failed. Every error is one line on stderr starting `replay: `."""

import argparse
import json
import math
import os
import re
import sys

try:
    import numpy as np
    import torch
except ImportError as _e:
    sys.stderr.write("replay: %s needs numpy and torch (%s); Debian: apt-get install python3-numpy python3-torch\n"
                     % (sys.executable, _e))
    sys.exit(1)

EMMY_DTYPES = {
    "bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32, "f64": torch.float64,
    "i32": torch.int32, "i64": torch.int64, "bool": torch.bool,
}
DTYPE_NAMES = {v: k for k, v in EMMY_DTYPES.items()}
FLOAT_DTYPES = ("bf16", "f16", "f32", "f64")
INT_DTYPES = {"i32": np.int32, "i64": np.int64}
TORCH_MAJOR = int(torch.__version__.split(".")[0])


class Fail(Exception):
    """One-line failure; code 2 for bad input, 1 for a runtime failure."""

    def __init__(self, msg, code=2):
        super().__init__(msg)
        self.code = code


def write_file(path, data, sync=False):
    """Writes data (str or bytes, or a function of a binary file object) to path the way emmy's src/file.c does:
    a temp file in the same folder, the writes and the close checked, fsync when sync, then a rename; on any
    failure path is as it was, the temp removed, and Fail(one line naming path and the OS error, code 1)."""
    d = os.path.dirname(path) or "."
    tmp = os.path.join(d, "%s.tmp.%d" % (os.path.basename(path), os.getpid()))
    try:
        with open(tmp, "wb") as f:
            if callable(data):
                data(f)
            else:
                f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            if sync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise Fail("cannot write %s: %s" % (path, e.strerror or e), 1)


def first_line(e):
    """The first non-empty line of an exception's message (torch messages run over many lines)."""
    for line in str(e).splitlines():
        if line.strip():
            return line.strip()
    return type(e).__name__


# ---------------------------------------------------------------------------------------------------------------
# Dim expressions: integers, symbol names, + - *, parentheses, cdiv(expr, expr) (ceil division).

_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(.))")


def eval_dim(text, env):
    """Evaluates a dim expression string with the symbol values in env; raises Fail on a syntax error or an
    undeclared symbol."""
    toks = []
    for m in _TOKEN.finditer(text):
        if m.group(1):
            toks.append(("int", int(m.group(1))))
        elif m.group(2):
            toks.append(("name", m.group(2)))
        elif m.group(3) and not m.group(3).isspace():
            toks.append(("op", m.group(3)))
    pos = [0]

    def peek():
        return toks[pos[0]] if pos[0] < len(toks) else ("end", None)

    def take(kind, val=None):
        t = peek()
        if t[0] != kind or (val is not None and t[1] != val):
            raise Fail("dim expression '%s': unexpected %s" % (text, "end" if t[0] == "end" else repr(t[1])))
        pos[0] += 1
        return t[1]

    def expr():
        v = term()
        while peek() in (("op", "+"), ("op", "-")):
            v = v + term() if take("op") == "+" else v - term()
        return v

    def term():
        v = unary()
        while peek() == ("op", "*"):
            take("op")
            v *= unary()
        return v

    def unary():
        if peek() == ("op", "-"):
            take("op")
            return -unary()
        return atom()

    def atom():
        t = peek()
        if t[0] == "int":
            return take("int")
        if t == ("name", "cdiv"):
            take("name")
            take("op", "(")
            a = expr()
            take("op", ",")
            b = expr()
            take("op", ")")
            if b <= 0:
                raise Fail("dim expression '%s': cdiv by %d" % (text, b))
            return -(-a // b)
        if t[0] == "name":
            name = take("name")
            if name not in env:
                raise Fail("dim expression '%s': undeclared symbol '%s'" % (text, name))
            return env[name]
        take("op", "(")
        v = expr()
        take("op", ")")
        return v

    v = expr()
    if peek()[0] != "end":
        raise Fail("dim expression '%s': unexpected %r" % (text, peek()[1]))
    return v


def eval_int(v, env, what):
    """A SymInt from JSON: an integer or a dim expression string."""
    if isinstance(v, bool):
        raise Fail("%s: wants an integer or dim expression, got %s" % (what, json.dumps(v)))
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str):
        try:
            return eval_dim(v, env)
        except Fail as e:
            raise Fail("%s: %s" % (what, e))
    raise Fail("%s: wants an integer or dim expression, got %s" % (what, json.dumps(v)))


def eval_shape(shape, env, what):
    if not isinstance(shape, list):
        raise Fail("%s: shape must be a list, got %s" % (what, json.dumps(shape)))
    return [eval_int(d, env, what) for d in shape]


# ---------------------------------------------------------------------------------------------------------------
# Graph file.

def load_graph(path):
    """Reads and checks the top-level structure of a graph file; per-node checks happen while replaying."""
    try:
        with open(path, "r", encoding="utf-8") as f:
            g = json.load(f)
    except OSError as e:
        raise Fail("cannot read: %s" % (e.strerror or e))
    except ValueError as e:
        raise Fail("bad JSON: %s" % first_line(e))
    if not isinstance(g, dict):
        raise Fail("not a graph object")
    if g.get("format") != "emmy.graph":
        raise Fail("format is %s, want \"emmy.graph\"" % json.dumps(g.get("format")))
    if g.get("version") != 1:
        raise Fail("version %s is not supported (this replay reads version 1)" % json.dumps(g.get("version")))
    for key in ("inputs", "nodes", "outputs"):
        if not isinstance(g.get(key), list):
            raise Fail("missing or non-list field '%s'" % key)
    if not isinstance(g.get("symbols", []), list):
        raise Fail("field 'symbols' must be a list")
    seen = set()
    for kind, items in (("input", g["inputs"]), ("node", g["nodes"])):
        for i, it in enumerate(items):
            need = ("name", "dtype", "shape") + (("op", "args") if kind == "node" else ())
            if not isinstance(it, dict) or any(k not in it for k in need):
                raise Fail("%s #%d: needs fields %s" % (kind, i, ", ".join(need)))
            name = it["name"]
            if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
                raise Fail("%s #%d: bad name %s" % (kind, i, json.dumps(name)))
            if name in seen:
                raise Fail("%s '%s': name defined twice" % (kind, name))
            seen.add(name)
            if it["dtype"] not in EMMY_DTYPES:
                raise Fail("%s '%s': unknown dtype %s" % (kind, name, json.dumps(it["dtype"])))
    for o in g["outputs"]:
        if o not in seen:
            raise Fail("output %s is not a defined value" % json.dumps(o))
    return g


def parse_binds(items):
    """['NAME=N', ...] -> {NAME: N}; a malformed item is a Fail naming it."""
    binds = {}
    for b in items:
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)=(-?\d+)", b)
        if not m:
            raise Fail("--bind %s: wants NAME=N with N an integer" % b)
        binds[m.group(1)] = int(m.group(2))
    return binds


def bind_symbols(g, binds):
    """Symbol values: --bind first, then the hint; every declared symbol must get one within [min, max]."""
    env = {}
    declared = set()
    for s in g.get("symbols", []):
        if not isinstance(s, dict) or not isinstance(s.get("name"), str):
            raise Fail("symbols: each needs a name")
        declared.add(s["name"])
    for name in binds:
        if name not in declared:
            raise Fail("--bind %s: the graph declares no symbol '%s'" % (name, name))
    for s in g.get("symbols", []):
        name = s["name"]
        if name in binds:
            v = binds[name]
        elif isinstance(s.get("hint"), int) and not isinstance(s.get("hint"), bool):
            v = s["hint"]
        else:
            raise Fail("symbol '%s' is unbound: it has no hint; pass --bind %s=N" % (name, name))
        lo, hi = s.get("min", 1), s.get("max", 2**31 - 1)
        if not lo <= v <= hi:
            raise Fail("symbol '%s'=%d is outside [%d, %d]" % (name, v, lo, hi))
        env[name] = v
    return env


# ---------------------------------------------------------------------------------------------------------------
# Ops and their schemas.

class Arg:
    """One schema argument: name, kwarg_only, kind (tensor, tensors, int, ints, float, bool, scalar, dtype, other),
    whether it may be None, whether it has a default."""

    def __init__(self, name, kwarg_only, kind, optional, has_default):
        self.name, self.kwarg_only, self.kind = name, kwarg_only, kind
        self.optional, self.has_default = optional, has_default


def arg_kind(name, t):
    """Classifies a torch schema type string. dtype shows as Optional[int] in TorchScript, hence the name test."""
    if name == "dtype" or "ScalarType" in t:
        return "dtype"
    if "Tensor" in t:
        return "tensors" if ("List" in t or "[]" in t) else "tensor"
    if "List" in t or "[]" in t:
        return "ints" if "int" in t or "SymInt" in t else "other"
    if "int" in t or "SymInt" in t:
        return "int"
    if "float" in t:
        return "float"
    if "bool" in t:
        return "bool"
    if "number" in t or "Scalar" in t:
        return "scalar"
    return "other"


def torch_schema(op):
    out = []
    for a in op._schema.arguments:
        t = str(a.type)
        out.append(Arg(a.name, a.kwarg_only, arg_kind(a.name, t), t.startswith("Optional[") or t.endswith("?"),
                       a.has_default_value()))
    return out


def sdpa_fallback(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """aten.scaled_dot_product_attention from the ATen math path, for torch builds without it (1.13): computes in
    float32 (float64 stays float64) and casts back to query's dtype. Rows masked entirely give zeros, as ATen's
    _safe_softmax does since torch 2.5."""
    if dropout_p != 0.0:
        raise Fail("dropout_p=%g is random; replay needs 0.0" % dropout_p)
    if is_causal and attn_mask is not None:
        raise Fail("attn_mask must be None when is_causal is true (as in ATen)", 1)
    acc = torch.float64 if query.dtype == torch.float64 else torch.float32
    q, k, v = query.to(acc), key.to(acc), value.to(acc)
    L, S, E = q.shape[-2], k.shape[-2], q.shape[-1]
    if enable_gqa and q.dim() >= 3 and q.shape[-3] != k.shape[-3]:
        hq, hkv = q.shape[-3], k.shape[-3]
        if hkv == 0 or hq % hkv != 0 or v.shape[-3] != hkv:
            raise Fail("enable_gqa: %d query heads are not a multiple of %d key/value heads" % (hq, hkv), 1)
        k = k.repeat_interleave(hq // hkv, dim=-3)
        v = v.repeat_interleave(hq // hkv, dim=-3)
    s = (1.0 / math.sqrt(E)) if scale is None else scale
    scores = torch.matmul(q, k.transpose(-2, -1)) * s
    if is_causal:
        keep = torch.ones(L, S, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask.to(acc)
    dead = torch.isneginf(scores).all(dim=-1, keepdim=True)
    probs = torch.softmax(scores.masked_fill(dead, 0.0), dim=-1).masked_fill(dead, 0.0)
    return torch.matmul(probs, v).to(query.dtype)


def seq_pos_mask(p):
    """emmy's SDPA seq_pos (src/ops.h: sequences packed end to end along L, causal in each) as the boolean mask ATen
    takes, [B or 1, 1, L, L]: query row l keeps keys l - p[.., l] .. l."""
    L = p.shape[-1]
    rows = torch.arange(L, device=p.device)
    start = rows - p.to(torch.long)
    keys = rows.view(1, 1, L)
    return ((keys <= rows.view(1, L, 1)) & (keys >= start.unsqueeze(-1))).unsqueeze(1)


def seq_pos_node(node):
    """An SDPA node with emmy's seq_pos as the same node reading attn_mask <node>.seq_pos_mask instead (which the
    caller makes with seq_pos_mask), and the seq_pos value's name; (node, None) for any other node."""
    a = node["args"] if isinstance(node["args"], dict) else {}
    if node["op"] != "aten.scaled_dot_product_attention.default" or "seq_pos" not in a:
        return node, None
    b = dict(a)
    p = b.pop("seq_pos")
    b["attn_mask"], b["is_causal"] = node["name"] + ".seq_pos_mask", False
    return dict(node, args=b), p


# Ops that a torch build may lack, with schemas written from ATen's (src/ops.h names the same arguments).
FALLBACKS = {
    "aten.scaled_dot_product_attention.default": (sdpa_fallback, [
        Arg("query", False, "tensor", False, False), Arg("key", False, "tensor", False, False),
        Arg("value", False, "tensor", False, False), Arg("attn_mask", False, "tensor", True, True),
        Arg("dropout_p", False, "float", False, True), Arg("is_causal", False, "bool", False, True),
        Arg("scale", True, "float", True, True), Arg("enable_gqa", True, "bool", False, True)]),
}


def resolve_op(opname):
    """(callable, schema, is_fallback) for "aten.<packet>.<overload>"; Fail(2) when neither torch nor FALLBACKS
    has it."""
    parts = opname.split(".") if isinstance(opname, str) else []
    if len(parts) != 3 or parts[0] != "aten" or not parts[1] or not parts[2]:
        raise Fail("op %s is not of the form aten.<name>.<overload>" % json.dumps(opname))
    try:
        op = getattr(getattr(torch.ops.aten, parts[1]), parts[2])
        return op, torch_schema(op), False
    except (AttributeError, RuntimeError):
        pass
    if opname in FALLBACKS:
        fn, schema = FALLBACKS[opname]
        return fn, schema, True
    raise Fail("unknown op: torch %s has no torch.ops.%s and replay has no fallback" % (torch.__version__, opname))


def json_number(v, what):
    """A JSON scalar as Python: {"float": x} is a float, an integral number an int, otherwise a float."""
    if isinstance(v, dict):
        if set(v) == {"float"} and isinstance(v["float"], (int, float)) and not isinstance(v["float"], bool):
            return float(v["float"])
        raise Fail("%s: unknown object %s" % (what, json.dumps(v)))
    if isinstance(v, bool):
        return v
    if isinstance(v, float) and v.is_integer() and abs(v) < 2**53:
        return int(v)
    if isinstance(v, (int, float)):
        return v
    raise Fail("%s: wants a number, got %s" % (what, json.dumps(v)))


def convert_arg(a, v, values, env, what):
    """The Python value torch gets for JSON value v of schema argument a."""
    if v is None:
        if a.optional:
            return None
        raise Fail("%s: null for a non-optional argument" % what)
    if a.kind in ("tensor", "tensors"):
        if a.kind == "tensors":
            if not isinstance(v, list):
                raise Fail("%s: wants a list of value names" % what)
            return [convert_arg(Arg(a.name, False, "tensor", False, False), x, values, env, what) for x in v]
        if isinstance(v, str):
            if v not in values:
                raise Fail("%s: '%s' is not a value defined before this node" % (what, v))
            return values[v]
        return json_number(v, what)  # TS: torch wraps a Python number as a scalar operand
    if a.kind == "dtype":
        if v not in EMMY_DTYPES:
            raise Fail("%s: unknown dtype %s" % (what, json.dumps(v)))
        return EMMY_DTYPES[v]
    if a.kind == "ints":
        if not isinstance(v, list):
            raise Fail("%s: wants a list of dims" % what)
        return [eval_int(x, env, what) for x in v]
    if a.kind == "int":
        return eval_int(v, env, what)
    if a.kind == "bool":
        if not isinstance(v, bool):
            raise Fail("%s: wants true or false, got %s" % (what, json.dumps(v)))
        return v
    if a.kind == "float":
        if isinstance(v, str):
            raise Fail("%s: wants a number, got %s" % (what, json.dumps(v)))
        return float(json_number(v, what))
    if a.kind == "scalar":
        return eval_int(v, env, what) if isinstance(v, str) else json_number(v, what)
    raise Fail("%s: replay does not pass arguments of this type" % what)


def call_args(node, schema, values, env, device):
    """Positional and keyword arguments in schema order: positional while every earlier one is present, keywords
    for the rest and for kwarg-only ones. Omitted arguments are left to ATen's defaults."""
    args = node["args"]
    if not isinstance(args, dict):
        raise Fail("args must be an object")
    names = {a.name for a in schema}
    for k in args:
        if k not in names:
            raise Fail("unknown argument '%s'" % k)
    pos, kw, gap = [], {}, False
    factory = not any(a.kind in ("tensor", "tensors") for a in schema)
    for a in schema:
        if a.name not in args:
            if a.name == "device" and factory and device.type != "cpu":
                kw["device"] = device  # factory ops (arange) are created on the replay device
            elif not a.has_default and not a.optional:
                raise Fail("missing argument '%s'" % a.name)
            gap = True
            continue
        v = convert_arg(a, args[a.name], values, env, "argument '%s'" % a.name)
        if a.kwarg_only or gap:
            kw[a.name] = v
        else:
            pos.append(v)
    return pos, kw


def _dtype_unsupported(err):
    # Observed on torch 1.13 CPU: every op in src/ops.h runs in bf16; in f16, mm/bmm/matmul/linear, clamp_min,
    # rsqrt, sqrt, exp, silu, sigmoid, tanh, cos, sin and softmax have no Half kernel. _softmax with
    # half_to_float=True is CUDA-only (still so on torch 2.11). Those calls are computed in float32 and rounded to
    # the node's dtype, which is what the bf16/f16 kernels do internally (float accumulation, one rounding).
    m = str(err)
    return ("not implemented for 'Half'" in m or "not implemented for 'BFloat16'" in m
            or "half to float conversion is not supported on CPU" in m)


def _upcast(x):
    if isinstance(x, torch.Tensor) and x.dtype in (torch.float16, torch.bfloat16):
        return x.float()
    if isinstance(x, list):
        return [_upcast(y) for y in x]
    if x in (torch.float16, torch.bfloat16):
        return torch.float32
    return x


def run_node(fn, pos, kw, want_dtype, device):
    """Calls the op; on a CPU dtype gap (see _dtype_unsupported) computes in float32 and rounds. Returns
    (result, upcast?)."""
    try:
        return fn(*pos, **kw), False
    except RuntimeError as e:
        if device.type != "cpu" or not _dtype_unsupported(e):
            raise
        kw2 = {k: _upcast(v) for k, v in kw.items()}
        pos2 = [_upcast(v) for v in pos]
        if "half_to_float" in kw2:
            kw2["half_to_float"] = False
        elif fn is torch.ops.aten._softmax.default and len(pos2) >= 3:
            pos2[2] = False
        try:
            r = fn(*pos2, **kw2)
        except RuntimeError:
            raise e
        if isinstance(r, torch.Tensor) and r.is_floating_point() and want_dtype.is_floating_point:
            r = r.to(want_dtype)
        return r, True


# ---------------------------------------------------------------------------------------------------------------
# Tensors in and out.

def load_input(inp, inputs_dir, env, device):
    """Reads DIR/<name>.npy, checks its shape and dtype kind, converts to the input's dtype on device."""
    name, dt = inp["name"], inp["dtype"]
    where = "input '%s'" % name
    path = os.path.join(inputs_dir, name + ".npy")
    if not os.path.isfile(path):
        raise Fail("%s: %s does not exist" % (where, path))
    try:
        arr = np.load(path, allow_pickle=False)
    except Exception as e:
        raise Fail("%s: cannot read %s: %s" % (where, path, first_line(e)))
    want = eval_shape(inp["shape"], env, where)
    if list(arr.shape) != want:
        raise Fail("%s: %s has shape %s, the graph says %s (symbols %s)" % (
            where, os.path.basename(path), list(arr.shape), want,
            ", ".join("%s=%d" % kv for kv in sorted(env.items())) or "none"))
    kind = arr.dtype.kind
    if dt in FLOAT_DTYPES and kind != "f" or dt in INT_DTYPES and kind not in "iu" or dt == "bool" and kind != "b":
        raise Fail("%s: %s holds %s, the graph says %s" % (where, os.path.basename(path), arr.dtype, dt))
    if dt in INT_DTYPES and arr.size:
        info = np.iinfo(INT_DTYPES[dt])
        if arr.min() < info.min or arr.max() > info.max:
            raise Fail("%s: %s has values outside %s" % (where, os.path.basename(path), dt))
    arr = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("="))
    t = torch.from_numpy(arr)
    if dt == "bf16":
        t32 = t.float()
        t = t32.to(torch.bfloat16)
        bad = (t.float() != t32) & ~torch.isnan(t32)
        if bool(bad.any()):
            raise Fail("%s: %s has values not exactly representable in bf16 (bf16 tensors are stored as float32 "
                       "holding bf16 values; round them first)" % (where, os.path.basename(path)))
    else:
        t = t.to(EMMY_DTYPES[dt])
    return t.to(device)


def to_numpy(t):
    """bf16 → float32; every other dtype as its NumPy type."""
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        t = t.float()
    return t.contiguous().numpy()  # np.ascontiguousarray would turn a 0-d result into shape (1,)


def save(out_dir, name, t):
    a = to_numpy(t)
    write_file(os.path.join(out_dir, name + ".npy"), lambda f: np.save(f, a))


# ---------------------------------------------------------------------------------------------------------------

def replay(g, inputs_dir, out_dir, env, device, write_all, verbose):
    values = {}
    for inp in g["inputs"]:
        values[inp["name"]] = load_input(inp, inputs_dir, env, device)
    # Values die after their last use unless written out, so long graphs need no more memory than eager torch.
    last_use = {}
    for i, node in enumerate(g["nodes"]):
        args = node["args"] if isinstance(node["args"], dict) else {}
        for v in args.values():
            for x in (v if isinstance(v, list) else [v]):
                if isinstance(x, str):
                    last_use[x] = i
    dies_at = {}
    for x, i in last_use.items():
        dies_at.setdefault(i, []).append(x)
    keep = set(g["outputs"])
    for i, node in enumerate(g["nodes"]):
        name, opname = node["name"], node["op"]
        where = "node '%s' (%s)" % (name, opname)
        try:
            node, seq_pos = seq_pos_node(node)
            if seq_pos is not None:
                values[name + ".seq_pos_mask"] = seq_pos_mask(values[seq_pos])
            fn, schema, fallback = resolve_op(opname)
            pos, kw = call_args(node, schema, values, env, device)
            want_shape = eval_shape(node["shape"], env, "shape")
        except Fail as e:
            raise Fail("%s: %s" % (where, e), e.code)
        want_dtype = EMMY_DTYPES[node["dtype"]]
        try:
            with torch.no_grad():
                r, upcast = run_node(fn, pos, kw, want_dtype, device)
        except Fail as e:
            raise Fail("%s: %s" % (where, e), e.code)
        except Exception as e:
            raise Fail("%s: torch failed: %s" % (where, first_line(e)), 1)
        if not isinstance(r, torch.Tensor):
            raise Fail("%s: returned %s, not a tensor" % (where, type(r).__name__), 1)
        if r.dtype != want_dtype or list(r.shape) != want_shape:
            raise Fail("%s: torch gives %s %s, the graph says %s %s" % (
                where, DTYPE_NAMES.get(r.dtype, str(r.dtype)), list(r.shape), node["dtype"], want_shape))
        values[name] = r
        if verbose:
            print("%s = %s -> %s %s%s%s" % (name, opname, node["dtype"], want_shape,
                                           " (python fallback)" if fallback else "",
                                           " (computed in f32)" if upcast else ""))
        if write_all:
            save(out_dir, name, r)
        for x in dies_at.get(i, ()):
            if x not in keep and x in values:
                del values[x]
    for o in g["outputs"]:
        save(out_dir, o, values[o])


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise Fail(message)


def main(argv):
    p = _Parser(prog="replay.py", description="Replay an emmy graph JSON with torch.ops.aten.")
    p.add_argument("graph", help="GRAPH.torch.json")
    p.add_argument("--inputs", required=True, metavar="DIR", help="folder holding <input name>.npy")
    p.add_argument("--out", required=True, metavar="DIR", help="folder for <output name>.npy (created)")
    p.add_argument("--bind", action="append", default=[], metavar="NAME=N", help="symbol value (else its hint)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--all", action="store_true", help="also write every node's value")
    p.add_argument("--verbose", action="store_true", help="print one line per node")
    try:  # command-line errors name no graph
        a = p.parse_args(argv)
        binds = parse_binds(a.bind)
        device = torch.device(a.device)
        if a.device == "cuda" and not torch.cuda.is_available():
            raise Fail("--device cuda: torch %s sees no CUDA device" % torch.__version__)
        if not os.path.isdir(a.inputs):
            raise Fail("--inputs %s: not a folder" % a.inputs)
    except Fail as e:
        print("replay: %s" % e, file=sys.stderr)
        return e.code
    prefix = "replay: %s: " % a.graph
    try:
        g = load_graph(a.graph)
        env = bind_symbols(g, binds)
        os.makedirs(a.out, exist_ok=True)
        replay(g, a.inputs, a.out, env, device, a.all, a.verbose)
    except Fail as e:
        print(prefix + " ".join(str(e).split()), file=sys.stderr)
        return e.code
    except Exception as e:  # a bug here or an I/O failure: still one line
        print(prefix + "%s: %s" % (type(e).__name__, first_line(e)), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
