#!/usr/bin/python3
"""calibrate_f32.py: measures the service's estimate of float32's rounding
error (service/attend/run.c, codec__loose) against the error float32
actually makes, to set CODEC_F32_ERROR, the estimate above which a request
is computed again in float64.

The server must answer in float32 alone, its fallback off:

    make BUILD=build/calib EXTRA_CFLAGS=-DCODEC_F32_ERROR=1e300 build/calib/attnd
    build/calib/attnd --port 19400 --quiet & P=$!
    tools/calibrate_f32.py 19400 [COUNT [SEED]] > calib.jsonl
    kill $P

It sends COUNT random requests (300 by default): d_model 4 to 512,
grouped heads, self- or cross-attention, causal or not, rope or not, W_O
or not, x and weight scales 0.3 to 16 times the unit ones (x of N(0, 1),
weights of N(0, 1/d_model)), a third with large constant offsets in q and
k (big b_q and b_k, as real models' projection biases are, where every
score is large and nearly equal), and the benchmark's workloads w1 to w4
(tests/bench/gen_requests.py). For each it computes the estimate's parts
from the inputs in float64 (largest head-slice norm of Q and of K, largest
|v|, longest column of W_O) and float32's error against a float64 NumPy
reference, prints one JSON line a request, and on stderr the table of
thresholds: float32's misses of the contract's 1e-4 (1 + |ref|) the
threshold catches, and the requests it computes again needlessly.
"""
import base64
import http.client
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "tests", "bench"))
import gen_requests  # noqa: E402

TOL = 1e-4
U = 2.0 ** -24
THRESHOLDS = (1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 3e-4, 5e-4, 1e-3, 2e-3)


def f32(a):
    return np.asarray(a, dtype=np.float32).astype(np.float64)


def tensor(a):
    a = np.ascontiguousarray(a, dtype="<f4")
    return {"dtype": "float32", "shape": list(a.shape),
            "data": base64.b64encode(a.tobytes()).decode("ascii")}


def untensor(v):
    if isinstance(v, dict):
        return np.frombuffer(base64.b64decode(v["data"]),
                             dtype="<f4").reshape(v["shape"]).astype(np.float64)
    return np.array(v, dtype=np.float64)


def rope_half(t, pos, theta=10000.0):
    """t [heads][L][d_k] rotated by the 'half' style at positions pos."""
    d = t.shape[-1]
    fr = theta ** (-2.0 * np.arange(d // 2) / d)
    ang = pos[:, None] * fr[None, :]
    c, s = np.cos(ang), np.sin(ang)
    a, b = t[..., :d // 2], t[..., d // 2:]
    return np.concatenate([a * c - b * s, a * s + b * c], axis=-1)


def reference(r):
    """The contract's computation in float64 over r's float32 values, for
    the fields this script sends. Returns the output, the per-head
    weights, and the estimate's parts: the largest head-slice norm of Q
    and of K, the largest |v|, the longest column of W_O (1 without)."""
    x = f32(r["x"])
    mem = f32(r["memory"]) if "memory" in r else x
    n, m = x.shape[0], mem.shape[0]
    h, g = r["num_heads"], r["num_kv_heads"]
    q = x @ f32(r["w_q"]) + (f32(r["b_q"]) if "b_q" in r else 0)
    k = mem @ f32(r["w_k"]) + (f32(r["b_k"]) if "b_k" in r else 0)
    v = mem @ f32(r["w_v"]) + (f32(r["b_v"]) if "b_v" in r else 0)
    d_k, d_v = q.shape[1] // h, v.shape[1] // g
    q = q.reshape(n, h, d_k).transpose(1, 0, 2)
    k = k.reshape(m, g, d_k).transpose(1, 0, 2)
    v = v.reshape(m, g, d_v).transpose(1, 0, 2)
    if "rope" in r:
        q = rope_half(q, np.arange(n, dtype=np.float64))
        k = rope_half(k, np.arange(m, dtype=np.float64))
    kx = np.repeat(k, h // g, axis=0)
    vx = np.repeat(v, h // g, axis=0)
    a = np.empty((h, n, m))
    heads = np.empty((h, n, d_v))
    for i in range(h):  # a head at a time: w4's scores are 268 MB in all
        s = q[i] @ kx[i].T / math.sqrt(d_k)
        if r.get("mask") == "causal":
            s = np.where(np.tril(np.ones((n, m), bool)), s, -np.inf)
        e = np.exp(s - s.max(-1, keepdims=True))
        a[i] = e / e.sum(-1, keepdims=True)
        heads[i] = a[i] @ vx[i]
    cat = heads.transpose(1, 0, 2).reshape(n, -1)
    col = 1.0
    if "w_o" in r:
        w_o = f32(r["w_o"])
        cat = cat @ w_o
        col = float(np.sqrt((w_o ** 2).sum(0)).max())
    parts = {"d_k": d_k,
             "nq": float(np.linalg.norm(q, axis=-1).max()),
             "nk": float(np.linalg.norm(k, axis=-1).max()),
             "qmax": float(np.abs(q).max()), "kmax": float(np.abs(k).max()),
             "vmax": float(np.abs(v).max()), "col": col}
    return cat, a, parts


def rel_err(got, ref):
    return float((np.abs(got - ref) / (1 + np.abs(ref))).max())


def post(port, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/attend", json.dumps(body),
              {"Content-Type": "application/json"})
    resp = c.getresponse()
    data = resp.read()
    c.close()
    if resp.status != 200:
        raise RuntimeError("status %d: %s" % (resp.status, data[:300]))
    return json.loads(data)


def random_request(rng):
    """One random request (arrays float32) and its kind."""
    d_model = int(round(2 ** rng.uniform(2, 9)))
    h = int(rng.choice([c for c in (1, 2, 4, 8, 16) if c <= d_model]))
    d_k = max(1, d_model // h)
    g = int(rng.choice([c for c in (1, 2, 4, 8, 16) if h % c == 0]))
    n = int(round(2 ** rng.uniform(1, 6)))
    cross = rng.random() < 0.25
    m = int(round(2 ** rng.uniform(1, 6))) if cross else n
    sx, sw = 2 ** rng.uniform(math.log2(0.3), 4, size=2)
    ws = sw / math.sqrt(d_model)
    r = {"x": rng.standard_normal((n, d_model)) * sx,
         "w_q": rng.standard_normal((d_model, h * d_k)) * ws,
         "w_k": rng.standard_normal((d_model, g * d_k)) * ws,
         "w_v": rng.standard_normal((d_model, g * d_k)) * ws,
         "num_heads": h, "num_kv_heads": g,
         "return_weights": "per_head"}
    if cross:
        r["memory"] = rng.standard_normal((m, d_model)) * sx
    elif rng.random() < 0.5:
        r["mask"] = "causal"
    if rng.random() < 0.5:
        r["w_o"] = rng.standard_normal((h * d_k, d_model)) / math.sqrt(h * d_k)
    if d_k % 2 == 0 and rng.random() < 0.25:
        r["rope"] = {}
    kind = "random"
    if rng.random() < 0.35:
        # large constant offsets: q and k of nearly one direction each
        kind = "biased"
        r["x"] *= 10 ** rng.uniform(-2, 0)
        r["b_q"] = rng.standard_normal(h * d_k) * 10 ** rng.uniform(0, 2)
        r["b_k"] = rng.standard_normal(g * d_k) * 10 ** rng.uniform(1, 3.5)
        if rng.random() < 0.5:
            r["b_v"] = rng.standard_normal(g * d_k) * 10 ** rng.uniform(-1, 1)
    return {k: (v.astype(np.float32) if isinstance(v, np.ndarray) else v)
            for k, v in r.items()}, kind


def tiny_biased(rng):
    """The shape float32 was first seen to miss at: one input feature,
    d_k = 2, small x and large b_q, b_k."""
    n = int(rng.integers(3, 12))
    r = {"x": rng.standard_normal((n, 1)) * 10 ** rng.uniform(-2, 0),
         "w_q": rng.standard_normal((1, 2)), "w_k": rng.standard_normal((1, 2)),
         "w_v": rng.standard_normal((1, 2)),
         "b_q": rng.standard_normal(2) * 10 ** rng.uniform(0, 2),
         "b_k": rng.standard_normal(2) * 10 ** rng.uniform(1, 3.5),
         "num_heads": 1, "num_kv_heads": 1, "return_weights": "per_head"}
    return {k: (v.astype(np.float32) if isinstance(v, np.ndarray) else v)
            for k, v in r.items()}, "tiny-biased"


def bench_request(name):
    n, d, h, mask, ret, _enc, _seed = gen_requests.WORKLOADS[name]
    arrs = gen_requests.inputs(name)
    r = {k: v.astype(np.float32) for k, v in arrs.items()}
    r.update({"num_heads": h, "num_kv_heads": h, "mask": mask,
              "return_weights": ret})
    return r, "bench-" + name


def measure(port, r, kind):
    body = {k: (tensor(v) if isinstance(v, np.ndarray) else v)
            for k, v in r.items()}
    body["encoding"] = "base64"
    got = post(port, body)
    out, a, parts = reference(r)
    rec = dict(parts, kind=kind, n=r["x"].shape[0], d_model=r["x"].shape[1],
               h=r["num_heads"], g=r["num_kv_heads"],
               weights=r["return_weights"] != "none",
               err_output=rel_err(untensor(got["output"]), out))
    rec["err_weights"] = (rel_err(untensor(got["attention"]), a)
                          if rec["weights"] else 0.0)
    return rec


def estimate(rec):
    """codec__loose's estimate from a record's parts."""
    t = U / math.sqrt(rec["d_k"]) * rec["nq"] * rec["nk"]
    return t * max(rec["vmax"] * rec["col"], 1.0 if rec["weights"] else 0.0)


def estimate_absmax(rec):
    """The estimate from max|q| and max|k| alone, for comparison."""
    return (U * math.sqrt(rec["d_k"]) * rec["qmax"] * rec["kmax"] *
            rec["vmax"] * rec["col"])


def table(recs, est, out):
    misses = [r for r in recs if max(r["err_output"], r["err_weights"]) > TOL]
    bench = [r for r in recs if r["kind"].startswith("bench")]
    print("%d requests, %d float32 misses; misses' smallest estimate %.3g"
          % (len(recs), len(misses),
             min((est(r) for r in misses), default=float("nan"))), file=out)
    print("benchmark estimates: " + ", ".join(
        "%s %.3g" % (r["kind"][6:], est(r)) for r in bench), file=out)
    print("%10s %14s %22s" % ("threshold", "misses caught",
                              "false recomputations"), file=out)
    for t in THRESHOLDS:
        caught = sum(est(r) > t for r in misses)
        false = sum(est(r) > t for r in recs if r not in misses)
        print("%10.0e %8d of %-4d %12d of %-4d" % (t, caught, len(misses),
              false, len(recs) - len(misses)), file=out)


def main():
    port = int(sys.argv[1])
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    rng = np.random.default_rng(int(sys.argv[3]) if len(sys.argv) > 3 else 1)
    recs = []
    for name in ("w1", "w2", "w3", "w4"):
        recs.append(measure(port, *bench_request(name)))
        print(json.dumps(recs[-1]), flush=True)
    for i in range(count):
        r, kind = tiny_biased(rng) if i % 10 == 0 else random_request(rng)
        recs.append(measure(port, r, kind))
        print(json.dumps(recs[-1]), flush=True)
    print("estimate: 2^-24 scale max||q_i|| max||k_j|| "
          "max(max|v| col, 1 with weights)", file=sys.stderr)
    table(recs, estimate, sys.stderr)
    print("\nestimate from absmax: 2^-24 scale d_k max|q| max|k| max|v| col",
          file=sys.stderr)
    table(recs, estimate_absmax, sys.stderr)


if __name__ == "__main__":
    main()
