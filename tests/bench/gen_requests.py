#!/usr/bin/python3
"""gen_requests.py: writes the HTTP benchmark's request bodies, the same
bytes on every run (fixed seeds), to OUT/requests/:

  w1.<form>.json   small:  n = 16,   d_model = 64,  4 heads, causal,
                   per-head maps
  w2.<form>.json   layer:  n = 128,  d_model = 256, 8 heads, per-head maps
  w3.<form>.json   maps:   n = 512,  d_model = 768, 12 heads, per-head maps
  w3_b64.json      maps, with every input a float32 base64 tensor object and
                   "encoding": "base64" for the response
  w4.<form>.json   outputs only: n = 2048, d_model = 256, 8 heads,
                   "return_weights": "none"

Every workload is self-attention with W_Q, W_K, W_V and W_O (d_out =
d_model), no biases: an attention layer as a model has it. Inputs are
N(0, 1) for x and N(0, 1/d_model) for the weights. Each JSON workload is
written in two forms of the numbers:

  long   what Python clients send: json.dumps(a.astype(np.float32).tolist())
         of the whole body, Python's default ", " and ": " separators, each
         number the shortest repr of the float64 of a float32 value (16 to
         17 significant digits: 0.07364532351493835). The main figure.
  short  compact, no spaces, each number written with '%.6g' (6 significant
         digits), the form a client serialising with printf sends.

The inputs the float64 reference uses are exactly the values in the file
(inputs(name, form)). Bodies are only rewritten when this file changed
(a stamp in OUT/requests/), since the long forms take seconds to print.

    gen_requests.py OUT
"""
import base64
import hashlib
import json
import os
import sys

import numpy as np

WORKLOADS = {
    # name: (n, d_model, heads, mask, return_weights, encoding, seed)
    "w1": (16, 64, 4, "causal", "per_head", "json", 1),
    "w2": (128, 256, 8, "none", "per_head", "json", 2),
    "w3": (512, 768, 12, "none", "per_head", "json", 3),
    "w3_b64": (512, 768, 12, "none", "per_head", "base64", 3),
    "w4": (2048, 256, 8, "none", "none", "json", 4),
}

# the number forms of a JSON body, the main one first
FORMS = ("long", "short")


def forms(name):
    """The forms a workload is written in: base64 bodies have one."""
    return ("b64",) if WORKLOADS[name][5] == "base64" else FORMS


def body_file(name, form):
    return name + ".json" if form == "b64" else "%s.%s.json" % (name, form)


def rounded(a):
    """float64 values exactly as '%.6g' writes and a parser reads them."""
    return np.array([float("%.6g" % v) for v in a.ravel()]).reshape(a.shape)


def nested(a):
    """a as nested JSON arrays, numbers written with '%.6g'."""
    if a.ndim == 1:
        return "[" + ",".join("%.6g" % v for v in a) + "]"
    return "[" + ",".join(nested(r) for r in a) + "]"


def b64_tensor(a):
    arr = np.ascontiguousarray(a, dtype="<f4")
    return ('{"dtype":"float32","shape":%s,"data":"%s"}'
            % (json.dumps(list(arr.shape)),
               base64.b64encode(arr.tobytes()).decode("ascii")))


def raw_inputs(n, d, seed):
    """x [n][d] and four [d][d] weights, float64 draws of a fixed seed."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    ws = [rng.standard_normal((d, d)) / np.sqrt(d) for _ in range(4)]
    return {"x": x, "w_q": ws[0], "w_k": ws[1], "w_v": ws[2], "w_o": ws[3]}


def as_form(arrs, form):
    """The arrays as a body of that form carries them: float32 values for
    long and b64, '%.6g'-rounded for short (float64, for the reference)."""
    if form == "short":
        return {k: rounded(v) for k, v in arrs.items()}
    return {k: v.astype(np.float32).astype(np.float64)
            for k, v in arrs.items()}


def inputs(name, form="long"):
    """The workload's arrays (float64), exactly the values its body holds."""
    n, d, _h, _mask, _ret, _enc, seed = WORKLOADS[name]
    return as_form(raw_inputs(n, d, seed), form)


def long_body(fields):
    """json.dumps of a dict whose arrays are float32: what a Python client
    that calls .tolist() on its arrays sends."""
    return json.dumps({k: (v.astype(np.float32).tolist()
                           if isinstance(v, np.ndarray) else v)
                       for k, v in fields.items()})


def body(name, form):
    n, d, h, mask, ret, enc, seed = WORKLOADS[name]
    arrs = inputs(name, form)
    opts = {"num_heads": h, "num_kv_heads": h, "mask": mask,
            "return_weights": ret}
    if form == "long":
        return long_body(dict(arrs, **opts))
    fields = []
    for k in ("x", "w_q", "w_k", "w_v", "w_o"):
        v = b64_tensor(arrs[k]) if form == "b64" else nested(arrs[k])
        fields.append('"%s":%s' % (k, v))
    fields.append('"num_heads":%d' % h)
    fields.append('"num_kv_heads":%d' % h)
    fields.append('"mask":"%s"' % mask)
    fields.append('"return_weights":"%s"' % ret)
    if enc != "json":
        fields.append('"encoding":"%s"' % enc)
    return "{" + ",".join(fields) + "}"


def write_atomic(path, data):
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.replace(path + ".tmp", path)


def main():
    out = os.path.join(sys.argv[1] if len(sys.argv) > 1 else "build/bench",
                       "requests")
    os.makedirs(out, exist_ok=True)
    with open(os.path.abspath(__file__), "rb") as f:
        stamp = hashlib.sha256(f.read()).hexdigest()
    stamp_path = os.path.join(out, "STAMP")
    paths = [os.path.join(out, body_file(name, form))
             for name in WORKLOADS for form in forms(name)]
    try:
        with open(stamp_path) as f:
            fresh = f.read().strip() == stamp
    except OSError:
        fresh = False
    fresh = fresh and all(os.path.exists(p) for p in paths)
    for name in WORKLOADS:
        for form in forms(name):
            path = os.path.join(out, body_file(name, form))
            if not fresh:
                write_atomic(path, body(name, form).encode("ascii"))
            print("%-8s %-5s %10d bytes  %s%s" % (
                name, form, os.path.getsize(path), path,
                " (kept)" if fresh else ""))
    if not fresh:
        write_atomic(stamp_path, (stamp + "\n").encode("ascii"))


if __name__ == "__main__":
    main()
