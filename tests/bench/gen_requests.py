#!/usr/bin/python3
"""gen_requests.py: writes the HTTP benchmark's request bodies, the same
bytes on every run (fixed seeds), to OUT/requests/:

  w1.json      small:  n = 16,   d_model = 64,  4 heads, causal, per-head maps
  w2.json      layer:  n = 128,  d_model = 256, 8 heads, per-head maps
  w3.json      maps:   n = 512,  d_model = 768, 12 heads, per-head maps
  w3_b64.json  maps, with every input a float32 base64 tensor object and
               "encoding": "base64" for the response
  w4.json      outputs only: n = 2048, d_model = 256, 8 heads,
               "return_weights": "none"

Every workload is self-attention with W_Q, W_K, W_V and W_O (d_out =
d_model), no biases: an attention layer as a model has it. Inputs are
N(0, 1) for x and N(0, 1/d_model) for the weights, written with 6
significant digits (what a client serialising float32 with %.6g sends);
the numbers in the file are the inputs the float64 reference uses.

    gen_requests.py OUT
"""
import base64
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


def inputs(name):
    """The workload's arrays (float64, already rounded to 6 digits)."""
    n, d, h, _mask, _ret, _enc, seed = WORKLOADS[name]
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    ws = [rng.standard_normal((d, d)) / np.sqrt(d) for _ in range(4)]
    return {"x": rounded(x), "w_q": rounded(ws[0]), "w_k": rounded(ws[1]),
            "w_v": rounded(ws[2]), "w_o": rounded(ws[3])}


def body(name):
    n, d, h, mask, ret, enc, seed = WORKLOADS[name]
    arrs = inputs(name)
    fields = []
    for k in ("x", "w_q", "w_k", "w_v", "w_o"):
        v = b64_tensor(arrs[k]) if enc == "base64" else nested(arrs[k])
        fields.append('"%s":%s' % (k, v))
    fields.append('"num_heads":%d' % h)
    fields.append('"num_kv_heads":%d' % h)
    fields.append('"mask":"%s"' % mask)
    fields.append('"return_weights":"%s"' % ret)
    if enc != "json":
        fields.append('"encoding":"%s"' % enc)
    return "{" + ",".join(fields) + "}"


def main():
    out = os.path.join(sys.argv[1] if len(sys.argv) > 1 else "build/bench",
                       "requests")
    os.makedirs(out, exist_ok=True)
    for name in WORKLOADS:
        path = os.path.join(out, name + ".json")
        data = body(name).encode("ascii")
        with open(path + ".tmp", "wb") as f:
            f.write(data)
        os.replace(path + ".tmp", path)
        print("%-8s %10d bytes  %s" % (name, len(data), path))


if __name__ == "__main__":
    main()
