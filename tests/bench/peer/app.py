"""app.py: the benchmark's peer, what a user would pick instead of attnd: a
small FastAPI service on uvicorn, PyTorch on the CPU, JSON via ujson.

It serves POST /attend with the contract fields the benchmark workloads use
(x, memory, w_q, w_k, w_v in 2-D or per-head 3-D form, optional w_o and
biases, num_heads, num_kv_heads, mask, key_padding_mask, scale,
return_weights, encoding, float32 base64 tensor objects) and answers with the
same shape (output, attention, meta). It is a benchmark peer, not a second
implementation of the contract: validation stops at what keeps it from
crashing, and errors use the contract's JSON error body.

PyTorch's matrix products go through Debian's OpenBLAS, whose kernels the
benchmark driver picks with OPENBLAS_CORETYPE exactly as for attnd and the
library (see blasenv.py), so both servers compute on the same kernels.

Run (two processes on two cores, one torch thread each; serve.py gives
each its own listening socket):
    /usr/bin/python3 tests/bench/peer/serve.py --port 8081
"""
import base64
import os
import time

# One intra-op thread per worker: two worker processes share the two cores.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import ujson  # noqa: E402
from fastapi import FastAPI, Request  # noqa: E402
from fastapi.responses import Response  # noqa: E402

torch.set_num_threads(1)
app = FastAPI()


class ApiError(Exception):
    def __init__(self, status, code, message, field=""):
        super().__init__(message)
        self.status, self.code, self.message, self.field = (
            status, code, message, field)


def bad(field, message):
    return ApiError(422, "invalid_request", message, field)


def tensor(req, name, ranks, required=False):
    """The float32 array of field `name` (nested lists or a base64 tensor
    object), with a rank in `ranks`; None when absent and not required."""
    val = req.get(name)
    if val is None:
        if required:
            raise bad("/" + name, "missing required field %s" % name)
        return None
    try:
        if isinstance(val, dict):
            if val.get("dtype") != "float32":
                raise bad("/%s/dtype" % name, "dtype must be float32")
            shape = [int(s) for s in val["shape"]]
            raw = base64.b64decode(val["data"], validate=True)
            arr = np.frombuffer(raw, dtype="<f4").reshape(shape)
        else:
            arr = np.asarray(val, dtype=np.float32)
    except ApiError:
        raise
    except (ValueError, TypeError, KeyError) as e:
        raise bad("/" + name, "%s: not a float32 array: %s" % (name, e))
    if arr.ndim not in ranks:
        raise bad("/" + name, "%s: expected rank %s, found %d" % (
            name, " or ".join(map(str, ranks)), arr.ndim))
    if not np.isfinite(arr).all():
        raise bad("/" + name, "%s: numbers must be finite in float32" % name)
    return torch.from_numpy(np.ascontiguousarray(arr))


def projection(w, heads, d_in, name):
    """[d_in][heads*d] from either the 2-D or the per-head 3-D form."""
    if w.dim() == 3:
        if w.shape[0] != heads or w.shape[1] != d_in:
            raise bad("/" + name, "%s: expected [%d][%d][d], found %s" % (
                name, heads, d_in, list(w.shape)))
        return w.permute(1, 0, 2).reshape(d_in, -1)
    if w.shape[0] != d_in or w.shape[1] % heads:
        raise bad("/" + name, "%s: expected [%d][%d*d], found %s" % (
            name, d_in, heads, list(w.shape)))
    return w


def encode(t, encoding):
    if encoding == "base64":
        arr = t.contiguous().numpy().astype("<f4", copy=False)
        return {"dtype": "float32", "shape": list(arr.shape),
                "data": base64.b64encode(arr.tobytes()).decode("ascii")}
    return t.tolist()


def attend(req):
    if not isinstance(req, dict):
        raise bad("", "the body must be a JSON object")
    h = req.get("num_heads", 1)
    g = req.get("num_kv_heads", h)
    if not isinstance(h, int) or not isinstance(g, int) or h < 1 or g < 1 \
            or h % g:
        raise bad("/num_kv_heads", "num_heads and num_kv_heads must be "
                  "integers >= 1 with num_heads %% num_kv_heads == 0")
    mask = req.get("mask", "none")
    ret = req.get("return_weights", "per_head")
    encoding = req.get("encoding", "json")
    if mask not in ("none", "causal"):
        raise bad("/mask", "mask must be \"none\" or \"causal\"")
    if ret not in ("per_head", "mean", "none"):
        raise bad("/return_weights", "return_weights must be \"per_head\", "
                  "\"mean\" or \"none\"")
    if encoding not in ("json", "base64"):
        raise bad("/encoding", "encoding must be \"json\" or \"base64\"")

    x = tensor(req, "x", (2, 3), required=True)
    batched = x.dim() == 3
    if not batched:
        x = x.unsqueeze(0)
    mem = tensor(req, "memory", (2, 3))
    if mem is None:
        mem = x
    elif mem.dim() == 2:
        mem = mem.unsqueeze(0)
    B, n, d_model = x.shape
    m, d_mem = mem.shape[1], mem.shape[2]
    if mem.shape[0] != B:
        raise bad("/memory", "memory batch %d != x batch %d" % (
            mem.shape[0], B))
    w_q = projection(tensor(req, "w_q", (2, 3), True), h, d_model, "w_q")
    w_k = projection(tensor(req, "w_k", (2, 3), True), g, d_mem, "w_k")
    w_v = projection(tensor(req, "w_v", (2, 3), True), g, d_mem, "w_v")
    w_o = tensor(req, "w_o", (2,))
    d_k, d_v = w_q.shape[1] // h, w_v.shape[1] // g
    if w_k.shape[1] != g * d_k:
        raise bad("/w_k", "w_k: d_k %d != w_q's %d" % (w_k.shape[1] // g, d_k))
    d_out = w_o.shape[1] if w_o is not None else h * d_v
    if w_o is not None and w_o.shape[0] != h * d_v:
        raise bad("/w_o", "w_o: expected [%d][d_out]" % (h * d_v))
    biases = {}
    for name, size in (("b_q", h * d_k), ("b_k", g * d_k), ("b_v", g * d_v),
                       ("b_o", d_out)):
        b = tensor(req, name, (1,))
        if b is not None and b.shape[0] != size:
            raise bad("/" + name, "%s: expected [%d]" % (name, size))
        biases[name] = b
    kpm = req.get("key_padding_mask")
    if kpm is not None:
        try:
            kpm = torch.as_tensor(np.asarray(kpm, dtype=bool))
        except (ValueError, TypeError):
            raise bad("/key_padding_mask", "key_padding_mask: booleans")
        if kpm.dim() == 1:
            kpm = kpm.unsqueeze(0).expand(B, m)
        if tuple(kpm.shape) != (B, m):
            raise bad("/key_padding_mask", "key_padding_mask: expected [%d]"
                      % m)
    scale = req.get("scale", 1.0 / d_k ** 0.5)

    t0 = time.perf_counter()
    with torch.inference_mode():
        q = x @ w_q
        k = mem @ w_k
        v = mem @ w_v
        if biases["b_q"] is not None:
            q = q + biases["b_q"]
        if biases["b_k"] is not None:
            k = k + biases["b_k"]
        if biases["b_v"] is not None:
            v = v + biases["b_v"]
        q = q.view(B, n, h, d_k).transpose(1, 2)           # [B][h][n][d_k]
        k = k.view(B, m, g, d_k).transpose(1, 2)           # [B][g][m][d_k]
        v = v.view(B, m, g, d_v).transpose(1, 2)           # [B][g][m][d_v]
        if g != h:
            k = k.repeat_interleave(h // g, dim=1)
            v = v.repeat_interleave(h // g, dim=1)
        s = (q @ k.transpose(-2, -1)) * scale               # [B][h][n][m]
        if mask == "causal":
            s = s.masked_fill(torch.ones(n, m, dtype=torch.bool).triu(1),
                              float("-inf"))
        if kpm is not None:
            s = s.masked_fill(kpm[:, None, None, :], float("-inf"))
        a = torch.softmax(s, dim=-1)
        if mask == "causal" or kpm is not None:
            a = torch.nan_to_num(a, nan=0.0)  # fully masked rows
        o = (a @ v).transpose(1, 2).reshape(B, n, h * d_v)
        if w_o is not None:
            o = o @ w_o
        if biases["b_o"] is not None:
            o = o + biases["b_o"]
    elapsed_ms = (time.perf_counter() - t0) * 1e3

    if not batched:
        o = o[0]
    resp = {"output": encode(o, encoding)}
    if ret == "per_head":
        resp["attention"] = encode(a if batched else a[0], encoding)
    elif ret == "mean":
        am = a.mean(dim=1)
        resp["attention"] = encode(am if batched else am[0], encoding)
    for name in ("tokens", "memory_tokens"):
        if name in req:
            resp[name] = req[name]
    params = (w_q.numel() + w_k.numel() + w_v.numel()
              + (w_o.numel() if w_o is not None else 0)
              + sum(b.numel() for b in biases.values() if b is not None))
    # multiply-adds times two, counted as the library's attn_flops does
    macs = (B * n * d_model * h * d_k + B * m * d_mem * g * d_k
            + B * m * d_mem * g * d_v + B * h * n * m * (d_k + d_v)
            + (B * n * h * d_v * d_out if w_o is not None else 0))
    resp["meta"] = {"batch": B, "n": n, "m": m, "d_model": d_model,
                    "d_mem": d_mem, "num_heads": h, "num_kv_heads": g,
                    "d_k": d_k, "d_v": d_v, "d_out": d_out, "mask": mask,
                    "params": params, "flops": 2 * macs,
                    "elapsed_ms": elapsed_ms}
    return resp


def error_response(e):
    body = {"error": {"code": e.code, "message": e.message,
                      "field": e.field}}
    return Response(ujson.dumps(body), status_code=e.status,
                    media_type="application/json")


@app.post("/attend")
async def post_attend(request: Request):
    ctype = request.headers.get("content-type", "")
    if not ctype.split(";")[0].strip().lower() == "application/json":
        return error_response(ApiError(415, "unsupported_media_type",
                                       "POST /attend needs application/json"))
    body = await request.body()
    try:
        req = ujson.loads(body)
    except ValueError as e:
        return error_response(ApiError(400, "invalid_json", str(e)))
    try:
        resp = attend(req)
    except ApiError as e:
        return error_response(e)
    return Response(ujson.dumps(resp), media_type="application/json")


@app.get("/healthz")
async def healthz():
    # pid: which process answered (serve.py runs one per core)
    return {"status": "ok", "pid": os.getpid()}
