#!/usr/bin/python3
"""combos.py: attnd's /attend against its wire contract, on seeded random
requests that combine the contract's features (v1 and v2) at random.

Usage: tests/contract/combos.py [--binary build/attnd] [--seed N]
           [--cases N] [--invalid N] [--port P] [--port-range LO-HI] [-v]

Each valid case draws one request from the whole field space: batch or not,
self- or cross-attention, a separate `value`, MHA/GQA/MQA, d_k != d_v,
`w_o` and biases, 2-D or 3-D per-head weights in either `weight_layout`,
packed `w_qkv`/`b_qkv` in either `qkv_order`, the causal mask,
`key_padding_mask`, `scale`, `positions`/`key_positions` (unordered and
repeated too), `rope` (partial `dim`, `theta`, `inv_freq`, both styles,
`attention_factor`), `alibi` (true or slopes), `attn_bias` and `attn_mask`
in every accepted shape, `window` with `global_tokens`, `softcap`,
`qk_norm`, the three `return_weights`, both encodings, tensor objects for
float fields, `value_norms`, `return_qk`, tokens, and `layers` with
per-layer overrides and `rollout`. Every returned tensor and the meta are
held to a float64 NumPy reference written here from the contract's text,
within 1e-4 * (1 + |reference|) element-wise (draws keep the scores
moderate, so the bound is about the service, not conditioning). A few
cases have x, memory and value near 1e19, so that scores overflow float32
and the service must compute them again in float64: their outputs, value
norms, q and k are held to 1e-4 * (1 + the tensor's largest |reference|),
since float32 inputs of that size carry more rounding than the element-wise
bound allows where an element is a difference of two near 1e38.

Some cases are also sent a second time, changed in a way the contract says
changes nothing (or changes it in a known way):
  refs      tensors uploaded to POST /tensors and named by ref: the same
            body, byte for byte, but for meta.elapsed_ms;
  encoding  json against base64: the same float32 values;
  layout    out_in with the weights transposed against in_out;
  packed    w_qkv/b_qkv against the separate w_q, w_k, w_v and biases;
  batch     a batched request against each batch element alone;
  layers    a one-layer `layers` request against the request alone;
  mean      return_weights "mean" against the mean of "per_head".
These are required to agree to the same tolerance as the reference
(refs: exactly).

A separate stream draws near-valid requests that break one rule, and
requires the contract's status, code and field pointer.

Starts the binary on a free loopback port (or talks to one already running
on --port). Prints one line per failed check, with the seed and case
number that reproduce it, and a summary; exits 1 on any failure.
"""
import argparse
import base64
import copy
import http.client
import json
import math
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np

AP = argparse.ArgumentParser()
AP.add_argument("--binary", default="build/attnd")
AP.add_argument("--seed", type=int, default=1)
AP.add_argument("--cases", type=int, default=300)
AP.add_argument("--invalid", type=int, default=-1,
                help="invalid cases (default: a third of --cases)")
AP.add_argument("--port", type=int, default=0)
AP.add_argument("--port-range", default="",
                help="LO-HI: start the server on a free port in this range")
AP.add_argument("--only", type=int, default=-1, help="run only this case")
AP.add_argument("--dump", action="store_true",
                help="print the request of every failed case")
AP.add_argument("-v", "--verbose", action="store_true")
ARGS = AP.parse_args()

HOST, PORT = "127.0.0.1", ARGS.port
N_CHECKS = 0
FAILS = []
CASE = ""
TOL = 1e-4


def check(name, cond, detail=""):
    global N_CHECKS
    N_CHECKS += 1
    if not cond:
        line = "FAIL seed %d %s %s%s" % (ARGS.seed, CASE, name,
                                        (": " + detail) if detail else "")
        FAILS.append(line)
        print(line, flush=True)
    return bool(cond)


# ---------------------------------------------------------------- HTTP
def request(method, path, body=None, headers=None):
    conn = http.client.HTTPConnection(HOST, PORT, timeout=60)
    if body is not None and not isinstance(body, (bytes, bytearray)):
        body = body.encode()
    conn.request(method, path, body=body, headers=dict(headers or {}))
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, data


def attend(req):
    st, data = request("POST", "/attend", json.dumps(req),
                       {"Content-Type": "application/json"})
    try:
        js = json.loads(data)
    except ValueError:
        js = None
    return st, js, data


def upload(a):
    """POST /tensors a float32 array as a tensor object; its ref."""
    st, data = request("POST", "/tensors", json.dumps(tensor_object(a)),
                       {"Content-Type": "application/json"})
    if not check("upload status", st in (200, 201),
                 "%s %s" % (st, data[:200])):
        return None
    return json.loads(data)["ref"]


def strip_elapsed(b):
    return re.sub(rb'"elapsed_ms":[-+0-9.eE]+', b'"elapsed_ms":0', b)


def free_port():
    if not ARGS.port_range:
        with socket.socket() as so:
            so.bind((HOST, 0))
            return so.getsockname()[1]
    lo, hi = (int(v) for v in ARGS.port_range.split("-"))
    for port in random.Random().sample(range(lo, hi + 1), hi - lo + 1):
        with socket.socket() as so:
            try:
                so.bind((HOST, port))
                return port
            except OSError:
                continue
    sys.exit("no free port in %s" % ARGS.port_range)


class Server:
    """The binary on a loopback port, as check_contract.py starts it."""

    def __init__(self, port):
        env = dict(os.environ)
        env.pop("ATTND_TENSOR_STORE_BYTES", None)
        self.p = subprocess.Popen(
            [ARGS.binary, "--port", str(port), "--host", HOST, "--quiet"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            try:
                request("GET", "/healthz")
                return
            except OSError:
                time.sleep(0.05)

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        try:
            return self.p.wait(10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            return None


# ---------------------------------------------------------------- tensors
def tensor_object(a):
    a = np.asarray(a, dtype="<f4")
    return {"dtype": "float32", "shape": list(a.shape),
            "data": base64.b64encode(a.tobytes()).decode()}


def decode(o):
    raw = base64.b64decode(o["data"])
    return np.frombuffer(raw, dtype="<f4").astype(np.float64) \
        .reshape(o["shape"])


def arr(v):
    """A float field as the service reads it: float32 values, in float64."""
    if isinstance(v, dict):
        return decode(v)
    return np.asarray(v, dtype=np.float32).astype(np.float64)


def f32(a):
    return np.asarray(a, dtype=np.float32).astype(np.float64)


def tl(a):
    return np.asarray(a).tolist()


def got_value(v, encoding):
    """An answer's tensor as float64, whichever encoding it came in; None
    when it is not of that encoding's form."""
    if encoding == "base64":
        if not (isinstance(v, dict) and v.get("dtype") == "float32"
                and isinstance(v.get("shape"), list)):
            return None
        return decode(v)
    if isinstance(v, dict):
        return None
    try:
        return np.asarray(v, dtype=np.float64)
    except (TypeError, ValueError):
        return None


def close(name, got, want, scaled=False):
    """got within TOL * (1 + |want|) element-wise; with scaled, within
    TOL * (1 + max |want|), for tensors of a request whose inputs are near
    float32's range, where one element can be the difference of two near
    1e38 and float32 inputs alone carry more rounding than that."""
    want = np.asarray(want, dtype=np.float64)
    if not check(name + " form", got is not None, "not a tensor"):
        return False
    if not check(name + " shape", got.shape == want.shape,
                 "got %s expected %s" % (got.shape, want.shape)):
        return False
    if got.size == 0:
        return True
    size = np.abs(want).max() if scaled else np.abs(want)
    excess = np.abs(got - want) - TOL * (1 + size)
    bad = ~(excess <= 0)
    if bad.any():
        i = np.unravel_index(np.argmax(np.where(np.isnan(excess), np.inf,
                                                excess)), want.shape)
        return check(name, False, "at %s got %r expected %r (%d of %d off)"
                     % (list(i), got[i], want[i], int(bad.sum()), want.size))
    return True


# ---------------------------------------------------------------- reference
FLOAT_FIELDS = ("x", "memory", "value", "w_q", "w_k", "w_v", "w_o", "b_q",
                "b_k", "b_v", "b_o", "w_qkv", "b_qkv", "attn_bias")
NESTED_FLOAT = (("rope", "inv_freq"), ("alibi", "slopes"),
                ("qk_norm", "q_weight"), ("qk_norm", "k_weight"))
CORE_WEIGHTS = ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o",
                "w_qkv", "b_qkv")


def bloom_slopes(h):
    """ALiBi's `true`: p the largest power of two <= h, 2^(-8(i+1)/p) for
    the first p heads, 2^(-4(2k+1)/p) for the rest."""
    p = 1 << (h.bit_length() - 1)
    return np.array([2.0 ** (-8.0 * (i + 1) / p) for i in range(p)]
                    + [2.0 ** (-4.0 * (2 * k + 1) / p) for k in range(h - p)])


def heads_of(w, heads, layout):
    """A projection weight (2-D with heads side by side in the output axis,
    or 3-D per head) as [heads][d_in][d_head], y = x W."""
    w = arr(w)
    if w.ndim == 3:
        return w if layout == "in_out" else w.transpose(0, 2, 1)
    if layout == "out_in":
        w = w.T
    d = w.shape[1] // heads
    return np.stack([w[:, i * d:(i + 1) * d] for i in range(heads)])


def per_batch(v, B, default):
    """An [L] or [B][L] integer/boolean field as [B][L]."""
    v = np.asarray(default if v is None else v)
    return np.broadcast_to(v, (B, v.shape[-1])) if v.ndim == 1 else v


def maps(v, batched):
    """attn_bias / attn_mask in an accepted shape, broadcastable to
    [B][h][n][m]: [n][m]; [h][n][m] (2-D x) or [B][n][m] (batched x);
    [B][h][n][m] or [1][h][n][m]."""
    v = np.asarray(v)
    if v.ndim == 2:
        return v[None, None]
    if v.ndim == 3:
        return v[:, None] if batched else v[None]
    return v


def rms(v, w, eps):
    return v / np.sqrt(np.mean(v * v, axis=-1, keepdims=True) + eps) * w


def rotate(t, pos, freq, dim, style, factor):
    """RoPE on the first `dim` entries of t [B][H][L][d] at positions
    [B][L]: pair (u, w) at angle t * freq_p becomes
    factor * (u cos - w sin, u sin + w cos)."""
    half = dim // 2
    if style == "half":
        iu, iw = np.arange(half), np.arange(half) + half
    else:
        iu, iw = np.arange(0, dim, 2), np.arange(1, dim, 2)
    ang = pos[:, None, :, None] * freq[None, None, None, :]
    c, s = np.cos(ang), np.sin(ang)
    u, w = t[..., iu].copy(), t[..., iw].copy()
    t = t.copy()
    t[..., iu] = factor * (u * c - w * s)
    t[..., iw] = factor * (u * s + w * c)
    return t


def reference(req):
    """The contract's answer to one (non-layers) request in float64: every
    tensor with a leading batch axis, and the meta's dimensions."""
    x = arr(req["x"])
    batched = x.ndim == 3
    if not batched:
        x = x[None]
    B, n, d_model = x.shape
    has_memory = req.get("memory") is not None
    mem = arr(req["memory"]) if has_memory else x
    val = arr(req["value"]) if req.get("value") is not None else mem
    mem = mem if mem.ndim == 3 else mem[None]
    val = val if val.ndim == 3 else val[None]
    m = mem.shape[1]
    h = req.get("num_heads", 1)
    g = req.get("num_kv_heads", h)
    layout = req.get("weight_layout", "in_out")

    if "w_qkv" in req:
        w = arr(req["w_qkv"])
        w = w if layout == "in_out" else w.T
        d_k = d_v = w.shape[1] // (h + 2 * g)
        b = arr(req["b_qkv"]) if "b_qkv" in req else np.zeros(w.shape[1])
        if req.get("qkv_order", "qkv") == "qkv":
            cq = np.arange(h * d_k)
            ck = h * d_k + np.arange(g * d_k)
            cv = (h + g) * d_k + np.arange(g * d_v)
        else:
            head = np.arange(h)[:, None] * 3 * d_k
            cq = (head + np.arange(d_k)).ravel()
            ck = (head + d_k + np.arange(d_k)).ravel()
            cv = (head + 2 * d_k + np.arange(d_k)).ravel()
        wq, wk, wv = (heads_of(w[:, c], k, "in_out")
                      for c, k in ((cq, h), (ck, g), (cv, g)))
        bq, bk, bv = b[cq], b[ck], b[cv]
    else:
        wq = heads_of(req["w_q"], h, layout)
        wk = heads_of(req["w_k"], g, layout)
        wv = heads_of(req["w_v"], g, layout)
        d_k, d_v = wq.shape[2], wv.shape[2]
        bq = arr(req["b_q"]) if "b_q" in req else np.zeros(h * d_k)
        bk = arr(req["b_k"]) if "b_k" in req else np.zeros(g * d_k)
        bv = arr(req["b_v"]) if "b_v" in req else np.zeros(g * d_v)
    # [B][heads][L][d_head]
    Q = np.einsum("bnd,hde->bhne", x, wq) + bq.reshape(h, 1, d_k)
    K = np.einsum("bmd,gde->bgme", mem, wk) + bk.reshape(g, 1, d_k)
    V = np.einsum("bmd,gde->bgme", val, wv) + bv.reshape(g, 1, d_v)

    pos = per_batch(req.get("positions"), B, np.arange(n)).astype(float)
    if req.get("key_positions") is not None:
        kpos = per_batch(req["key_positions"], B, None).astype(float)
    elif has_memory:
        kpos = per_batch(None, B, np.arange(m)).astype(float)
    else:
        kpos = pos

    qn = req.get("qk_norm")
    if qn is not None:
        eps = float(np.float32(qn.get("eps", 1e-6)))
        qw, kw = arr(qn["q_weight"]), arr(qn["k_weight"])
        if qn.get("over", "head") == "head":
            Q, K = rms(Q, qw, eps), rms(K, kw, eps)
        else:
            Qr = rms(Q.transpose(0, 2, 1, 3).reshape(B, n, h * d_k), qw, eps)
            Kr = rms(K.transpose(0, 2, 1, 3).reshape(B, m, g * d_k), kw, eps)
            Q = Qr.reshape(B, n, h, d_k).transpose(0, 2, 1, 3)
            K = Kr.reshape(B, m, g, d_k).transpose(0, 2, 1, 3)

    ro = req.get("rope")
    if ro is not None:
        dim = ro.get("dim", d_k)
        if "inv_freq" in ro:
            freq = arr(ro["inv_freq"])
        else:
            theta = float(np.float32(ro.get("theta", 10000.0)))
            freq = theta ** (-2.0 * np.arange(dim // 2) / dim)
        style = ro.get("style", "half")
        fac = float(np.float32(ro.get("attention_factor", 1.0)))
        Q = rotate(Q, pos, freq, dim, style, fac)
        K = rotate(K, kpos, freq, dim, style, fac)

    scale = float(np.float32(req["scale"])) if "scale" in req \
        else 1.0 / math.sqrt(d_k)
    kv = np.arange(h) // (h // g)
    S = scale * np.einsum("bhne,bhme->bhnm", Q, K[:, kv])
    if "softcap" in req:
        c = float(np.float32(req["softcap"]))
        S = c * np.tanh(S / c)
    if "attn_bias" in req:
        S = S + maps(arr(req["attn_bias"]), batched)
    al = req.get("alibi")
    if al is not None and al is not False:
        slopes = bloom_slopes(h) if al is True else arr(al["slopes"])
        dist = np.abs(pos[:, :, None] - kpos[:, None, :])
        S = S - slopes[None, :, None, None] * dist[:, None]

    hidden = np.zeros((B, h, n, m), dtype=bool)
    if req.get("mask", "none") == "causal":
        hidden |= (kpos[:, None, :] > pos[:, :, None])[:, None]
    if req.get("key_padding_mask") is not None:
        kp = per_batch(req["key_padding_mask"], B, None).astype(bool)
        hidden |= kp[:, None, None, :]
    if req.get("attn_mask") is not None:
        hidden |= maps(np.asarray(req["attn_mask"], dtype=bool), batched)
    wd = req.get("window")
    if wd is not None:
        out = np.zeros((B, n, m), dtype=bool)
        if wd.get("left") is not None:
            out |= kpos[:, None, :] < pos[:, :, None] - wd["left"]
        if wd.get("right") is not None:
            out |= kpos[:, None, :] > pos[:, :, None] + wd["right"]
        for t in req.get("global_tokens") or []:
            if t < n:
                out[:, t, :] = False
            if t < m:
                out[:, :, t] = False
        hidden |= out[:, None]

    top = np.max(np.where(hidden, -np.inf, S), axis=-1, keepdims=True)
    E = np.where(hidden, 0.0, np.exp(S - np.where(np.isfinite(top), top, 0)))
    den = E.sum(-1, keepdims=True)
    A = np.where(den > 0, E / np.where(den > 0, den, 1), 0.0)
    O = np.einsum("bhnm,bhme->bhne", A, V[:, kv])
    out = O.transpose(0, 2, 1, 3).reshape(B, n, h * d_v)
    wo = None
    if "w_o" in req:
        wo = arr(req["w_o"])
        wo = wo if layout == "in_out" else wo.T
        out = out @ wo
    if "b_o" in req:
        out = out + arr(req["b_o"])
    vn = np.zeros((B, h, m))
    for i in range(h):
        sent = V[:, kv[i]]
        if wo is not None:
            sent = sent @ wo[i * d_v:(i + 1) * d_v]
        vn[:, i] = np.linalg.norm(sent, axis=-1)
    return {"output": out, "attention": A, "value_norms": vn, "q": Q,
            "k": K, "batched": batched,
            "meta": {"batch": B, "n": n, "m": m, "d_model": d_model,
                     "d_mem": mem.shape[2], "num_heads": h,
                     "num_kv_heads": g, "d_k": d_k, "d_v": d_v,
                     "d_out": out.shape[2],
                     "mask": req.get("mask", "none")}}


def params_of(req):
    """meta.params: the weight and bias values of the request, as PyTorch
    counts the attention module's parameters: the projections' weights and
    biases and qk_norm's two weights; not the score inputs (attn_bias,
    ALiBi's slopes, RoPE's inv_freq), which are not parameters."""
    n = sum(int(arr(req[k]).size) for k in CORE_WEIGHTS if k in req)
    qn = req.get("qk_norm")
    if isinstance(qn, dict):
        n += sum(int(arr(qn[f]).size) for f in ("q_weight", "k_weight")
                 if f in qn)
    return n


def rollout(attns):
    """Abnar and Zuidema's rollout over [B][n][n] head-mean maps."""
    R = None
    for A in attns:
        Ah = A + np.eye(A.shape[-1])
        Ah = Ah / Ah.sum(-1, keepdims=True)
        R = Ah if R is None else Ah @ R
    return R


# ---------------------------------------------------------------- checking
def check_single(name, req, js, scaled=False):
    """One answer (a request alone, or one layer's) against reference();
    scaled: huge inputs, see close()."""
    with np.errstate(over="ignore"):
        ref = reference(req)
    if not check(name + " answer is an object", isinstance(js, dict)
                 and "output" in js, str(js)[:200]):
        return ref
    enc = req.get("encoding", "json")

    def sq(a):
        return a if ref["batched"] else a[0]

    close(name + " output", got_value(js["output"], enc), sq(ref["output"]),
          scaled)
    rw = req.get("return_weights", "per_head")
    if rw == "none":
        check(name + " no attention", "attention" not in js)
    elif check(name + " has attention", "attention" in js):
        want = ref["attention"] if rw == "per_head" \
            else ref["attention"].mean(axis=1)
        close(name + " attention " + rw, got_value(js["attention"], enc),
              sq(want))
    for field, keys in (("value_norms", ("value_norms",)),
                        ("return_qk", ("q", "k"))):
        for k in keys:
            if req.get(field):
                if check(name + " has " + k, k in js):
                    close(name + " " + k, got_value(js[k], enc), sq(ref[k]),
                          scaled)
            else:
                check(name + " no " + k + " unless asked", k not in js)
    for t in ("tokens", "memory_tokens"):
        if t in req:
            check(name + " echoes " + t, js.get(t) == req[t],
                  str(js.get(t))[:100])
        else:
            check(name + " no " + t, t not in js)
    meta = js.get("meta") if isinstance(js.get("meta"), dict) else {}
    for k, v in ref["meta"].items():
        check(name + " meta." + k, meta.get(k) == v,
              "got %r expected %r" % (meta.get(k), v))
    for k in ("params", "flops", "elapsed_ms"):
        check(name + " meta." + k + " is a number",
              isinstance(meta.get(k), (int, float))
              and not isinstance(meta.get(k), bool), str(meta.get(k)))
    p = params_of(req)
    if p is not None:
        check(name + " meta.params", meta.get("params") == p,
              "got %r expected %r" % (meta.get("params"), p))
    return ref


def layer_request(req, i):
    """Layer i of a layers request as the request alone: the top level's
    fields as defaults, the layer's own over them."""
    sub = {k: v for k, v in req.items()
           if k not in ("layers", "rollout", "store")}
    sub.update(req["layers"][i])
    return sub


def check_answer(name, req, st, js, data, scaled=False):
    if not check(name + " status 200", st == 200,
                 "got %s %s" % (st, data[:300])):
        return False
    n_fail = len(FAILS)
    if "layers" not in req:
        check_single(name, req, js, scaled)
        return len(FAILS) == n_fail
    L = len(req["layers"])
    if not check(name + " layers answer", isinstance(js, dict)
                 and isinstance(js.get("layers"), list)
                 and len(js["layers"]) == L, str(js)[:200]):
        return False
    refs = [check_single("%s layer %d" % (name, i), layer_request(req, i),
                         js["layers"][i]) for i in range(L)]
    meta = js.get("meta") or {}
    check(name + " meta.layers", meta.get("layers") == L, str(meta))
    for k in ("params", "flops"):
        total = sum((lj.get("meta") or {}).get(k, 0) for lj in js["layers"])
        check(name + " meta." + k + " summed", meta.get(k) == total,
              "got %r, the layers' sum %r" % (meta.get(k), total))
    if req.get("rollout"):
        if check(name + " has rollout", "rollout" in js):
            want = rollout([r["attention"].mean(axis=1) for r in refs])
            got = got_value(js["rollout"], req.get("encoding", "json"))
            close(name + " rollout", got,
                  want if refs[0]["batched"] else want[0])
    else:
        check(name + " no rollout unless asked", "rollout" not in js)
    return len(FAILS) == n_fail


# ---------------------------------------------------------------- drawing
class Draw:
    """One case's random choices, from its own seeded generator."""

    def __init__(self, seed):
        self.r = random.Random(seed)
        self.np = np.random.default_rng(seed)

    def p(self, prob):
        return self.r.random() < prob

    def pick(self, *opts):
        return self.r.choice(opts)

    def int(self, lo, hi):
        return self.r.randint(lo, hi)

    def normal(self, *shape, s=1.0):
        return f32(self.np.standard_normal(shape) * s)

    def bools(self, *shape, prob=0.3):
        return self.np.random(shape) < prob


def draw_config(d):
    """The dimensions and which features a case uses."""
    c = {}
    c["B"] = d.pick(None, None, 1, 2, 3)
    c["n"] = d.int(1, 8) if d.p(0.9) else d.int(9, 12)
    c["cross"] = d.p(0.35)
    c["m"] = d.int(1, 9) if c["cross"] else c["n"]
    h = d.pick(1, 1, 2, 2, 3, 4, 4, 5, 6)
    divisors = [g for g in range(1, h + 1) if h % g == 0]
    c["h"], c["g"] = h, d.pick(*divisors)
    c["d_model"] = d.int(1, 10)
    c["packed"] = d.p(0.25)
    c["d_k"] = d.int(1, 4)
    c["d_v"] = c["d_k"] if c["packed"] or d.p(0.4) else d.int(1, 4)
    c["d_mem"] = c["d_model"] if c["packed"] or not c["cross"] \
        else d.int(1, 10)
    c["value"] = d.p(0.2)
    c["d_val"] = c["d_model"] if c["packed"] else d.int(1, 8)
    c["qkv_order"] = d.pick("qkv", "per_head") \
        if c["packed"] and c["g"] == h else "qkv"
    c["layout"] = d.pick("in_out", "out_in")
    c["d_out"] = d.int(1, 8) if d.p(0.5) else None
    return c


def weight(d, layout, d_in, heads, d_head, per_head):
    """A projection in the request's layout, scaled so that outputs stay
    near unit size."""
    w = d.normal(heads, d_in, d_head, s=1.0 / math.sqrt(d_in))
    if per_head:
        return w if layout == "in_out" else w.transpose(0, 2, 1)
    w2 = np.concatenate(list(w), axis=1)
    return w2 if layout == "in_out" else w2.T


def draw_tensors(d, c):
    """x, memory, value and the projections for a config: the fields as
    numpy arrays (float32 values), to be written into a request."""
    t = {}
    B, n, m = c["B"], c["n"], c["m"]
    lead = (B,) if B else ()
    t["x"] = d.normal(*lead, n, c["d_model"])
    if c["cross"]:
        t["memory"] = d.normal(*lead, m, c["d_mem"])
    if c["value"]:
        t["value"] = d.normal(*lead, m, c["d_val"])
    d_v_in = c["d_val"] if c["value"] else c["d_mem"]
    h, g, dk, dv, lay = c["h"], c["g"], c["d_k"], c["d_v"], c["layout"]
    if c["packed"]:
        tot = (h + 2 * g) * dk
        w = d.normal(c["d_model"], tot, s=1.0 / math.sqrt(c["d_model"]))
        t["w_qkv"] = w if lay == "in_out" else w.T
        if d.p(0.5):
            t["b_qkv"] = d.normal(tot, s=0.5)
    else:
        t["w_q"] = weight(d, lay, c["d_model"], h, dk, d.p(0.3))
        t["w_k"] = weight(d, lay, c["d_mem"], g, dk, d.p(0.3))
        t["w_v"] = weight(d, lay, d_v_in, g, dv, d.p(0.3))
        for k, size in (("b_q", h * dk), ("b_k", g * dk), ("b_v", g * dv)):
            if d.p(0.3):
                t[k] = d.normal(size, s=0.5)
    d_out = c["d_out"]
    if d_out:
        w = d.normal(h * dv, d_out, s=1.0 / math.sqrt(h * dv))
        t["w_o"] = w if lay == "in_out" else w.T
    if d.p(0.25):
        t["b_o"] = d.normal(d_out or h * dv, s=0.5)
    return t


def draw_positions(d, length, B):
    """Positions: ordered, shifted, unordered or with repeats, shared or
    per batch element."""
    def one():
        kind = d.pick("offset", "perm", "repeat", "random")
        if kind == "offset":
            start = d.int(0, 20)
            return list(range(start, start + length))
        if kind == "perm":
            return d.r.sample(range(length + 3), length)
        if kind == "repeat":
            return sorted(d.int(0, length) for _ in range(length))
        return [d.int(0, 40) for _ in range(length)]
    if B and d.p(0.5):
        return [one() for _ in range(B)]
    return one()


def draw_map_shape(d, c):
    """One accepted shape of attn_bias / attn_mask."""
    h, n, m, B = c["h"], c["n"], c["m"], c["B"]
    if not B:
        return d.pick((n, m), (h, n, m))
    return d.pick((n, m), (B, n, m), (B, h, n, m), (1, h, n, m))


def draw_rules(d, c, req):
    """The score rules and the other optional fields, into req."""
    B, n, m, h, g, dk = c["B"], c["n"], c["m"], c["h"], c["g"], c["d_k"]
    if d.p(0.4):
        req["mask"] = d.pick("none", "causal", "causal")
    if d.p(0.25):
        req["key_padding_mask"] = tl(d.bools(*((B, m) if B and d.p(0.5)
                                               else (m,))))
    if d.p(0.25):
        req["scale"] = float(np.float32(d.r.uniform(0.2, 1.2)))
    if d.p(0.3):
        req["positions"] = draw_positions(d, n, B)
    if d.p(0.3 if c["cross"] else 0.15):
        req["key_positions"] = draw_positions(d, m, B)
    if d.p(0.3) and (dk >= 2):
        ro = {}
        dim = dk if dk % 2 == 0 else dk - 1
        if d.p(0.4) or dk % 2:
            dim = d.pick(*range(2, dim + 1, 2))
            ro["dim"] = dim
        if d.p(0.4):
            ro["theta"] = d.pick(10000, 500000, 100.0, 1e6, 10)
        if d.p(0.3):
            ro["inv_freq"] = tl(f32(d.np.uniform(0.01, 1.0, dim // 2)))
        if d.p(0.5):
            ro["style"] = d.pick("half", "interleaved")
        if d.p(0.3):
            ro["attention_factor"] = float(np.float32(d.r.uniform(0.5, 1.5)))
        req["rope"] = ro
    if d.p(0.2):
        req["alibi"] = True if d.p(0.5) else \
            {"slopes": tl(f32(d.np.uniform(0, 0.5, h)))}
    if d.p(0.25):
        req["attn_bias"] = d.normal(*draw_map_shape(d, c))
    if d.p(0.2):
        req["attn_mask"] = tl(d.bools(*draw_map_shape(d, c), prob=0.25))
    if d.p(0.25):
        wd = {}
        kind = d.pick("left", "right", "both", "neither")
        if kind in ("left", "both"):
            wd["left"] = d.int(0, 4)
        if kind in ("right", "both"):
            wd["right"] = d.int(0, 4)
        req["window"] = wd
        if d.p(0.4):
            req["global_tokens"] = d.r.sample(range(min(n, m)),
                                              d.int(0, min(n, m, 3)))
    if d.p(0.2):
        req["softcap"] = float(np.float32(d.r.uniform(0.5, 5)))
    if d.p(0.2):
        over = d.pick("head", "all")
        lq, lk = (dk, dk) if over == "head" else (h * dk, g * dk)
        qn = {"q_weight": tl(f32(d.np.uniform(0.5, 1.5, lq))),
              "k_weight": tl(f32(d.np.uniform(0.5, 1.5, lk)))}
        if over == "all" or d.p(0.5):
            qn["over"] = over
        if d.p(0.5):
            qn["eps"] = d.pick(1e-6, 1e-5, 0.01, 0.5)
        req["qk_norm"] = qn
    if d.p(0.5):
        req["return_weights"] = d.pick("per_head", "mean", "none")
    if d.p(0.4):
        req["encoding"] = d.pick("json", "base64")
    if d.p(0.25):
        req["value_norms"] = True
    if d.p(0.25):
        req["return_qk"] = True
    if d.p(0.2):
        words = ["tok%d" % i for i in range(n)]
        req["tokens"] = [words] * B if B and d.p(0.5) else words
    if d.p(0.15):
        words = ["k\u00e9y %d" % i for i in range(m)]
        req["memory_tokens"] = [words] * B if B and d.p(0.5) else words


def as_json(v):
    return tl(v) if isinstance(v, np.ndarray) else v


def write_tensors(d, req, t, objects):
    """The tensors into req, some as base64 tensor objects when asked."""
    for k, v in t.items():
        req[k] = tensor_object(v) if objects and d.p(0.3) else as_json(v)
    if "attn_bias" in req and isinstance(req["attn_bias"], np.ndarray):
        v = req["attn_bias"]
        req["attn_bias"] = tensor_object(v) if objects and d.p(0.3) \
            else tl(v)
    if objects:
        for o, f in NESTED_FLOAT:
            if isinstance(req.get(o), dict) and f in req[o] and d.p(0.3):
                req[o][f] = tensor_object(req[o][f])


HUGE = float(np.float32(1e19))


def huge(req):
    """req with x, memory and value times 1e19: scores beyond float32,
    which the service must compute again in float64."""
    for k in ("x", "memory", "value"):
        if k in req:
            a = f32(arr(req[k]) * HUGE)
            req[k] = tensor_object(a) if isinstance(req[k], dict) else tl(a)
    return req


def draw_request(seed):
    """One valid request (sometimes a `layers` one), its config, and
    whether its inputs are huge."""
    d = Draw(seed)
    c = draw_config(d)
    objects = d.p(0.4)
    if d.p(0.05):
        req = {"num_heads": c["h"], "num_kv_heads": c["g"],
               "weight_layout": c["layout"]}
        if c["packed"]:
            req["qkv_order"] = c["qkv_order"]
        draw_rules(d, c, req)
        write_tensors(d, req, draw_tensors(d, c), objects)
        return huge(req), c, True
    if not d.p(0.2):
        req = {}
        if c["h"] != 1 or d.p(0.3):
            req["num_heads"] = c["h"]
        if c["g"] != c["h"] or d.p(0.2):
            req["num_kv_heads"] = c["g"]
        if c["layout"] != "in_out" or d.p(0.2):
            req["weight_layout"] = c["layout"]
        if c["packed"] and (c["qkv_order"] != "qkv" or d.p(0.3)):
            req["qkv_order"] = c["qkv_order"]
        draw_rules(d, c, req)
        write_tensors(d, req, draw_tensors(d, c), objects)
        return req, c, False
    # layers: shared fields at the top, each layer its own x and weights
    # (some shared), and some of the top's fields overridden per layer
    top = {"num_heads": c["h"], "num_kv_heads": c["g"],
           "weight_layout": c["layout"]}
    if c["packed"]:
        top["qkv_order"] = c["qkv_order"]
    draw_rules(d, c, top)
    shared = draw_tensors(d, c)
    top_t = {k: v for k, v in shared.items()
             if k not in ("x", "memory", "value") and d.p(0.3)}
    write_tensors(d, top, top_t, objects)
    layers = []
    for _ in range(d.int(1, 3)):
        own = {k: v for k, v in draw_tensors(d, c).items()
               if k not in top_t}
        # a layer's own tensors are those of the same config: keep the
        # config's optional tensors the same set as the shared draw
        own = {k: v for k, v in own.items() if k in shared}
        for k in shared:
            if k not in top_t and k not in own:
                own[k] = shared[k]
        lay = {}
        write_tensors(d, lay, own, objects)
        if d.p(0.3):
            lay["mask"] = d.pick("none", "causal")
        if d.p(0.2):
            lay["return_weights"] = d.pick("per_head", "mean", "none")
        if d.p(0.2):
            lay["scale"] = float(np.float32(d.r.uniform(0.2, 1.2)))
        if d.p(0.15):
            lay["encoding"] = d.pick("json", "base64")
        if d.p(0.15) and "rope" not in top and c["d_k"] >= 2:
            lay["rope"] = {"dim": 2 * (c["d_k"] // 2),
                           "style": d.pick("half", "interleaved")}
        layers.append(lay)
    top["layers"] = layers
    if not c["cross"] and not any("memory" in l for l in layers) and \
            d.p(0.6):
        top["rollout"] = True
    return top, c, False


def tensor_paths(req):
    """(container, key) for every float tensor of a request, layers too."""
    out = []

    def scan(obj):
        for k in FLOAT_FIELDS:
            if k in obj:
                out.append((obj, k))
        for o, f in NESTED_FLOAT:
            if isinstance(obj.get(o), dict) and f in obj[o]:
                out.append((obj[o], f))
    scan(req)
    for lay in req.get("layers", []):
        scan(lay)
    return out


# ---------------------------------------------------------------- metamorphic
def same_values(name, a, b, exact=False):
    """Two answers of equal meaning, value by value (float32 from either
    encoding); exact, or within the contract's tolerance."""
    if isinstance(a, dict) and "data" in a:
        a = decode(a)
    if isinstance(b, dict) and "data" in b:
        b = decode(b)
    if isinstance(a, dict) and isinstance(b, dict):
        keys = sorted(set(a) | set(b))
        for k in keys:
            if k == "elapsed_ms":
                continue
            if not check("%s .%s in both" % (name, k), k in a and k in b):
                continue
            same_values("%s.%s" % (name, k), a[k], b[k], exact)
        return
    if isinstance(a, list) and isinstance(b, list) and \
            any(isinstance(v, dict) for v in a + b):
        if check(name + " length", len(a) == len(b)):
            for i, (u, v) in enumerate(zip(a, b)):
                same_values("%s[%d]" % (name, i), u, v, exact)
        return
    if isinstance(a, (list, np.ndarray)) and \
            isinstance(b, (list, np.ndarray)):
        try:
            ga = np.asarray(a, dtype=np.float64)
            gb = np.asarray(b, dtype=np.float64)
        except (TypeError, ValueError):
            check(name + " equal", a == b, "%s vs %s" % (str(a)[:80],
                                                         str(b)[:80]))
            return
        if exact:
            ga = np.asarray(ga, dtype=np.float32)
            gb = np.asarray(gb, dtype=np.float32)
            if check(name + " shape", ga.shape == gb.shape,
                     "%s vs %s" % (ga.shape, gb.shape)):
                diff = ga != gb
                if diff.any():
                    i = np.unravel_index(np.argmax(diff), ga.shape)
                    check(name + " equal", False, "at %s %r vs %r"
                          % (list(i), ga[i], gb[i]))
            return
        close(name, ga, gb)
        return
    check(name + " equal", a == b, "%r vs %r" % (a, b))


def strip_meta(js, keys=("elapsed_ms",)):
    js = copy.deepcopy(js)
    for part in [js] + list(js.get("layers", [])):
        for k in keys:
            (part.get("meta") or {}).pop(k, None)
    return js


def meta_refs(d, req, js, data):
    """Tensors as refs: the same bytes but for meta.elapsed_ms."""
    alt = copy.deepcopy(req)
    paths = tensor_paths(alt)
    chosen = [p for p in paths if d.p(0.5)] or paths[:1]
    for obj, k in chosen:
        a = arr(obj[k])
        ref = upload(a)
        if ref is None:
            return
        obj[k] = {"ref": ref} if d.p(0.7) else \
            {"ref": ref, "shape": list(a.shape)}
    st, js2, data2 = attend(alt)
    if check("refs status", st == 200, "%s %s" % (st, data2[:200])):
        check("refs same bytes", strip_elapsed(data) == strip_elapsed(data2),
              "%s vs %s" % (data[:120], data2[:120]))


def meta_encoding(d, req, js, data):
    """json against base64: the same float32 values."""
    alt = copy.deepcopy(req)
    enc = "base64" if req.get("encoding", "json") == "json" else "json"
    alt["encoding"] = enc
    for lay in alt.get("layers", []):
        lay.pop("encoding", None)
    base = copy.deepcopy(req)
    base["encoding"] = req.get("encoding", "json")
    for lay in base.get("layers", []):
        lay.pop("encoding", None)
    st1, js1, _ = attend(base)
    st2, js2, data2 = attend(alt)
    if check("encoding status", st1 == 200 and st2 == 200,
             "%s %s" % (st2, data2[:200])):
        same_values("encoding", strip_meta(js1), strip_meta(js2), exact=True)


def transpose_weights(obj):
    """obj's projection weights in the other layout."""
    for k in ("w_q", "w_k", "w_v", "w_o", "w_qkv"):
        if k in obj:
            a = arr(obj[k])
            a = a.T if a.ndim == 2 else a.transpose(0, 2, 1)
            obj[k] = tensor_object(a) if isinstance(obj[k], dict) else tl(a)


def meta_layout(d, req, js, data):
    """The other weight_layout with every weight transposed."""
    alt = copy.deepcopy(req)
    lay = req.get("weight_layout", "in_out")
    alt["weight_layout"] = "out_in" if lay == "in_out" else "in_out"
    transpose_weights(alt)
    for layer in alt.get("layers", []):
        transpose_weights(layer)
    st, js2, data2 = attend(alt)
    if check("layout status", st == 200, "%s %s" % (st, data2[:200])):
        same_values("layout", strip_meta(js), strip_meta(js2))


def meta_packed(d, req, js, data):
    """w_qkv and b_qkv against the separate projections they pack."""
    h = req.get("num_heads", 1)
    g = req.get("num_kv_heads", h)
    alt = copy.deepcopy(req)
    lay = alt.get("weight_layout", "in_out")
    w = arr(alt.pop("w_qkv"))
    w = w if lay == "in_out" else w.T
    dk = w.shape[1] // (h + 2 * g)
    if alt.pop("qkv_order", "qkv") == "qkv":
        cols = (np.arange(h * dk), h * dk + np.arange(g * dk),
                (h + g) * dk + np.arange(g * dk))
    else:
        head = np.arange(h)[:, None] * 3 * dk
        cols = tuple((head + o * dk + np.arange(dk)).ravel()
                     for o in range(3))
    for k, c in zip(("w_q", "w_k", "w_v"), cols):
        part = w[:, c]
        alt[k] = tl(part if lay == "in_out" else part.T)
    if "b_qkv" in alt:
        b = arr(alt.pop("b_qkv"))
        for k, c in zip(("b_q", "b_k", "b_v"), cols):
            alt[k] = tl(b[c])
    st, js2, data2 = attend(alt)
    if check("packed status", st == 200, "%s %s" % (st, data2[:200])):
        same_values("packed", strip_meta(js), strip_meta(js2))


BATCHED_FIELDS = ("x", "memory", "value", "positions", "key_positions",
                  "key_padding_mask", "tokens", "memory_tokens")


def element(req, b):
    """Batch element b of a batched request, as a 2-D request."""
    one = copy.deepcopy(req)
    for k in BATCHED_FIELDS:
        if k not in one:
            continue
        v = one[k]
        if isinstance(v, dict):
            one[k] = tl(decode(v)[b])
        elif k in ("x", "memory", "value") or \
                (isinstance(v[0], list)):
            one[k] = v[b]
    for k in ("attn_bias", "attn_mask"):
        if k in one:
            v = arr(one[k]) if k == "attn_bias" else np.asarray(one[k])
            if v.ndim == 3:
                v = v[b]
            elif v.ndim == 4:
                v = v[0 if v.shape[0] == 1 else b]
            one[k] = tl(v)
    return one


def meta_batch(d, req, js, data):
    """A batched request against each element alone."""
    enc = req.get("encoding", "json")
    for b in range(len(arr(req["x"]))):
        st, js2, data2 = attend(element(req, b))
        if not check("batch element status", st == 200,
                     "%s %s" % (st, data2[:200])):
            return
        for k in ("output", "attention", "value_norms", "q", "k"):
            if k in js:
                same_values("batch element %d %s" % (b, k),
                            got_value(js[k], enc)[b],
                            got_value(js2[k], enc))
        for k in ("tokens", "memory_tokens"):
            if k in js:
                check("batch element %d %s" % (b, k),
                      js2.get(k) == element(req, b)[k])
        mb, m1 = js.get("meta", {}), js2.get("meta", {})
        for k in ("n", "m", "d_model", "d_mem", "d_k", "d_v", "d_out",
                  "params"):
            check("batch element %d meta.%s" % (b, k), mb.get(k) == m1.get(k),
                  "%r vs %r" % (mb.get(k), m1.get(k)))


def meta_one_layer(d, req, js, data):
    """A one-layer `layers` request against the request alone."""
    if d.p(0.5):
        one = {"layers": [req]}
    else:
        one = {k: v for k, v in req.items() if k != "x"}
        one["layers"] = [{"x": req["x"]}]
    st, js2, data2 = attend(one)
    if check("one layer status", st == 200, "%s %s" % (st, data2[:200])):
        check("one layer answer", isinstance(js2.get("layers"), list)
              and len(js2["layers"]) == 1, str(js2)[:200])
        same_values("one layer", strip_meta(js),
                    strip_meta(js2["layers"][0]), exact=True)
        for k in ("params", "flops"):
            check("one layer meta." + k, js2["meta"].get(k) ==
                  js["meta"].get(k))


def meta_mean(d, req, js, data):
    """return_weights mean against the mean of per_head."""
    a, b = copy.deepcopy(req), copy.deepcopy(req)
    a["return_weights"], b["return_weights"] = "per_head", "mean"
    enc = req.get("encoding", "json")
    st1, js1, _ = attend(a)
    st2, js2, _ = attend(b)
    if check("mean status", st1 == 200 and st2 == 200):
        ph = got_value(js1["attention"], enc)
        axis = 1 if arr(req["x"]).ndim == 3 else 0
        close("mean of per_head", got_value(js2["attention"], enc),
              ph.mean(axis=axis))
        same_values("mean output", js1["output"], js2["output"])


def metamorphics(req, c, scaled):
    """(name, function) for the relations that apply to a request (to a
    huge one, only the exact ones)."""
    out = [("refs", meta_refs), ("encoding", meta_encoding)]
    if scaled:
        return out
    single = "layers" not in req
    out.append(("layout", meta_layout))
    if single and "w_qkv" in req:
        out.append(("packed", meta_packed))
    if single and arr(req["x"]).ndim == 3:
        out.append(("batch", meta_batch))
    if single:
        out.append(("layers", meta_one_layer))
        out.append(("mean", meta_mean))
    return out


# ---------------------------------------------------------------- invalid
def small_valid(d):
    """A plain valid request to break one rule of."""
    n, dm, h, dk = d.int(2, 5), d.int(2, 6), d.pick(1, 2, 4), d.int(2, 3)
    B = d.pick(None, 2)
    lead = [B] if B else []
    return {"x": tl(d.normal(*lead, n, dm)), "num_heads": h,
            "w_q": tl(d.normal(dm, h * dk)), "w_k": tl(d.normal(dm, h * dk)),
            "w_v": tl(d.normal(dm, h * dk))}, (B, n, dm, h, dk)


def draw_invalid(seed):
    """(name, request or raw body, status, code, field pointers accepted):
    a valid request with one rule broken."""
    d = Draw(seed)
    req, (B, n, dm, h, dk) = small_valid(d)
    m = n
    k = d.int(0, 27)
    bad = "invalid_request"
    if k == 0:
        req["num_kv_heads"] = h + 1
        req["w_k"] = tl(d.normal(dm, (h + 1) * dk))
        req["w_v"] = tl(d.normal(dm, (h + 1) * dk))
        return "num_kv_heads > h", req, 422, bad, ["/num_kv_heads"]
    if k == 1:
        req["num_heads"], req["num_kv_heads"] = 3, 2
        req["w_q"] = tl(d.normal(dm, 3 * dk))
        req["w_k"] = tl(d.normal(dm, 2 * dk))
        req["w_v"] = tl(d.normal(dm, 2 * dk))
        return "h % g != 0", req, 422, bad, ["/num_kv_heads"]
    if k == 2:
        req["w_k"] = tl(d.normal(dm + 1, h * dk))
        return "w_k rows", req, 422, bad, ["/w_k"]
    if k == 3:
        name = d.pick("key_pading_mask", "scael", "rop", "wq")
        req[name] = 1
        return "unknown field", req, 422, bad, ["/" + name]
    if k == 4:
        req["rope"] = {"dim": 2, "thetta": 100}
        return "unknown key in rope", req, 422, bad, ["/rope/thetta"]
    if k == 5:
        req["mask"] = d.pick("Causal", "full", "")
        return "mask enum", req, 422, bad, ["/mask"]
    if k == 6:
        req["rope"] = {"dim": dk + 2 - dk % 2}
        return "rope dim > d_k", req, 422, bad, ["/rope/dim", "/rope"]
    if k == 7:
        req["rope"] = {"dim": 1}
        return "rope dim odd", req, 422, bad, ["/rope/dim", "/rope"]
    if k == 8:
        req["rope"] = {"dim": 2, "inv_freq": [0.5, 0.25]}
        return "rope inv_freq length", req, 422, bad, ["/rope/inv_freq"]
    if k == 9:
        req["alibi"] = {"slopes": [0.5] * (h + 1)}
        return "alibi slopes length", req, 422, bad, ["/alibi/slopes"]
    if k == 10:
        req["attn_bias"] = tl(d.normal(n, m + 1))
        return "attn_bias shape", req, 422, bad, ["/attn_bias"]
    if k == 11:
        if B:
            req["attn_bias"] = tl(d.normal(B + 1, h, n, m))
            return "attn_bias [B+1][h][n][m]", req, 422, bad, ["/attn_bias"]
        req["attn_bias"] = tl(d.normal(1, h, n, m))
        return "attn_bias 4-D with 2-D x", req, 422, bad, ["/attn_bias"]
    if k == 12:
        req["key_padding_mask"] = [[False] * m] * (B + 1 if B else 1)
        return "key_padding_mask batch", req, 422, bad, ["/key_padding_mask"]
    if k == 13:
        i = d.int(0, n - 1)
        req["positions"] = list(range(n))
        req["positions"][i] = d.pick(-1, 1.5, "2", True)
        return "positions entry", req, 422, bad, \
            ["/positions/%d" % i, "/positions"]
    if k == 14:
        req["window"] = {"left": d.pick(-1, 0.5), "right": 1}
        return "window left", req, 422, bad, ["/window/left", "/window"]
    if k == 15:
        field = d.pick("softcap", "scale")
        req[field] = d.pick(0, -1.0)
        return field + " <= 0", req, 422, bad, ["/" + field]
    if k == 16:
        req["qk_norm"] = {"q_weight": [1.0] * (dk + 1), "k_weight": [1.0] * dk}
        return "qk_norm q_weight length", req, 422, bad, \
            ["/qk_norm/q_weight"]
    if k == 17:
        req["tokens"] = ["t"] * (n + 1)
        return "tokens count", req, 422, bad, ["/tokens"]
    if k == 18:
        req["qkv_order"] = "per_head"
        req["num_heads"], req["num_kv_heads"] = 2, 1
        for f in ("w_q", "w_k", "w_v"):
            del req[f]
        req["w_qkv"] = tl(d.normal(dm, 4 * dk))
        return "per_head with g != h", req, 422, bad, \
            ["/qkv_order", "/num_kv_heads", "/w_qkv"]
    if k == 19:
        req["w_qkv"] = tl(d.normal(dm, 3 * h * dk))
        return "w_qkv with w_q", req, 422, bad, \
            ["/w_qkv", "/w_q", "/w_k", "/w_v"]
    if k == 20:
        req["w_v"] = {"ref": "sha256:" + "0" * 64}
        return "unknown ref", req, 422, "unknown_ref", ["/w_v"]
    if k == 21:
        req["layers"] = [{"x": req.pop("x")},
                         {"x": tl(d.normal(n, dm + 1))}]
        return "layer x width", req, 422, bad, \
            ["/layers/1/x", "/layers/1/w_q", "/w_q"]
    if k == 22:
        req["memory"] = tl(d.normal(*([B + 1] if B else [2]), 3, dm))
        return "memory batch", req, 422, bad, ["/memory"]
    if k == 23:
        i = d.int(0, dm - 1)
        req["w_q"][i][0] = 1e39
        return "number over float32", req, 422, bad, ["/w_q/%d/0" % i]
    if k == 24:
        raw = json.dumps(req).replace('"num_heads": %d' % h,
                                      '"num_heads": %d, "scale": NaN' % h)
        return "NaN", raw, 400, "invalid_json", [None]
    if k == 25:
        req["encoding"] = d.pick("hex", "BASE64")
        return "encoding enum", req, 422, bad, ["/encoding"]
    if k == 26:
        t = tensor_object(arr(req["w_q"]))
        t[d.pick("dtyp", "extra")] = 1
        req["w_q"] = t
        return "tensor object unknown key", req, 422, bad, \
            ["/w_q/dtyp", "/w_q/extra"]
    req["window"] = {"left": 1}
    req["global_tokens"] = [n + 2]
    return "global token out of range", req, 422, bad, \
        ["/global_tokens/0", "/global_tokens"]


def run_invalid(i, seed):
    global CASE
    name, req, status, code, fields = draw_invalid(seed)
    CASE = "invalid %d (%s)" % (i, name)
    body = req if isinstance(req, str) else json.dumps(req)
    st, data = request("POST", "/attend", body,
                       {"Content-Type": "application/json"})
    try:
        err = json.loads(data)["error"]
    except (ValueError, KeyError, TypeError):
        err = None
    ok = check("status", st == status, "got %s %s" % (st, data[:200]))
    ok = ok and check("error body", isinstance(err, dict)
                      and isinstance(err.get("message"), str), str(data[:200]))
    if ok:
        check("code", err.get("code") == code, "got %r" % err.get("code"))
        f = err.get("field")
        check("field", f in fields or any(
            isinstance(f, str) and w and f.startswith(w + "/")
            for w in fields),
            "got %r expected one of %r (%s)" % (f, fields, err["message"]))
    if ARGS.dump and FAILS and FAILS[-1].startswith("FAIL seed %d %s"
                                                    % (ARGS.seed, CASE)):
        print("  request:", body[:4000])


# ---------------------------------------------------------------- main
def run_valid(i, seed):
    global CASE
    req, c, scaled = draw_request(seed)
    CASE = "case %d" % i + (" (huge)" if scaled else "")
    n_fail = len(FAILS)
    st, js, data = attend(req)
    if not check_answer("answer", req, st, js, data, scaled):
        if ARGS.dump:
            print("  request:", json.dumps(req)[:6000])
        return
    d = Draw(seed + 7)
    rel = metamorphics(req, c, scaled)
    for name, fn in d.r.sample(rel, min(len(rel), 2)):
        CASE = "case %d [%s]" % (i, name)
        fn(d, req, js, data)
    if ARGS.dump and len(FAILS) > n_fail:
        print("  request:", json.dumps(req)[:6000])


def main():
    global PORT
    server = None
    if not PORT:
        PORT = free_port()
        server = Server(PORT)
    try:
        request("GET", "/healthz")
    except OSError as ex:
        sys.exit("cannot reach the server on port %d: %s" % (PORT, ex))
    n_invalid = ARGS.invalid if ARGS.invalid >= 0 else ARGS.cases // 3
    base = ARGS.seed * 1000003
    cases = range(ARGS.cases) if ARGS.only < 0 else [ARGS.only]
    for i in cases:
        run_valid(i, base + i)
    for i in range(n_invalid) if ARGS.only < 0 else []:
        run_invalid(i, base + 500009 + i)
    if server:
        check("the server exits 0 on SIGTERM", server.stop() == 0)
    print("seed %d: %d valid cases, %d invalid; %d checks, %d failed"
          % (ARGS.seed, len(cases), n_invalid if ARGS.only < 0 else 0,
             N_CHECKS, len(FAILS)))
    sys.exit(1 if FAILS else 0)


if __name__ == "__main__":
    main()
