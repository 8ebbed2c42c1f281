"""contract_ref.py: the /attend contract's rules (v1 and v2's score rules),
as docs/api.md states them, written out in NumPy float64, for
checking the fixtures, not the service.

gen_families.py runs every fixture's request, read back from the written
JSON, through attend() and requires the family reference's answer to 1e-7
(the 8 digits written): so a fixture's request says, in the contract's
words, what that family's code computes (a wrong field, layout or packing
in a request fails the generation, instead of failing the service for a
fault of the fixture).

attend(request) -> {"output", "attention"?, "value_norms"?, "q"?, "k"?,
"meta"} with the contract's shapes (batch rank following x); meta holds
the response's dimension fields (batch, n, m, d_model, d_mem, num_heads,
num_kv_heads, d_k, d_v, d_out).
"""
import base64
import math

import numpy as np


def _a(v):
    """Numbers as the service reads them: float32, then float64 here; a
    tensor object is decoded."""
    if isinstance(v, dict):
        raw = base64.b64decode(v["data"])
        return np.frombuffer(raw, dtype="<f4").reshape(v["shape"]) \
            .astype(np.float64)
    return np.asarray(v, dtype=np.float32).astype(np.float64)


def _s(v):
    return float(np.float32(v))


def _to_in_out(w, layout):
    """A projection weight as the 2-D in_out matrix [d_in][outputs]; a 3-D
    per-head weight has its heads side by side."""
    w = _a(w)
    if w.ndim == 2:
        return w if layout == "in_out" else w.T
    heads = [w[i] if layout == "in_out" else w[i].T for i in range(len(w))]
    return np.concatenate(heads, axis=1)


def bloom_slopes(h):
    p = 2 ** int(math.floor(math.log2(h)))
    s = [2.0 ** (-8.0 * (i + 1) / p) for i in range(p)]
    s += [2.0 ** (-4.0 * (2 * k + 1) / p) for k in range(h - p)]
    return np.array(s)


def _per_batch(v, B, length, default):
    if v is None:
        return np.tile(np.asarray(default)[None], (B, 1))
    v = np.asarray(v)
    return np.tile(v[None], (B, 1)) if v.ndim == 1 else v


def _maps(v, B, h, batched):
    """attn_bias / attn_mask in any accepted form as [B][h][n][m]."""
    v = np.asarray(v)
    if v.ndim == 2:
        return v[None, None]
    if v.ndim == 3:
        return v[None] if not batched else v[:, None]
    return v


def _rms(v, w, eps):
    return v / np.sqrt(np.mean(v * v, axis=-1, keepdims=True) + eps) * w


def attend(req):
    x = _a(req["x"])
    batched = x.ndim == 3
    if not batched:
        x = x[None]
    has_memory = "memory" in req
    mem = _a(req["memory"]) if has_memory else x
    if has_memory and not batched:
        mem = mem[None]
    val = _a(req["value"]) if "value" in req else mem
    if "value" in req and not batched:
        val = val[None]
    B, n, _ = x.shape
    m = mem.shape[1]
    h = req.get("num_heads", 1)
    g = req.get("num_kv_heads", h)
    layout = req.get("weight_layout", "in_out")

    if "w_qkv" in req:
        w = _to_in_out(req["w_qkv"], layout)
        d = w.shape[1] // (h + 2 * g)
        b = _a(req["b_qkv"]) if "b_qkv" in req else np.zeros(w.shape[1])
        if req.get("qkv_order", "qkv") == "qkv":
            cq = list(range(0, h * d))
            ck = list(range(h * d, (h + g) * d))
            cv = list(range(h * d + g * d, (h + 2 * g) * d))
        else:  # per_head, g == h
            cq = [i * 3 * d + t for i in range(h) for t in range(d)]
            ck = [i * 3 * d + d + t for i in range(h) for t in range(d)]
            cv = [i * 3 * d + 2 * d + t for i in range(h) for t in range(d)]
        wq, wk, wv = w[:, cq], w[:, ck], w[:, cv]
        bq, bk, bv = b[cq], b[ck], b[cv]
    else:
        wq = _to_in_out(req["w_q"], layout)
        wk = _to_in_out(req["w_k"], layout)
        wv = _to_in_out(req["w_v"], layout)
        bq = _a(req.get("b_q", np.zeros(wq.shape[1])))
        bk = _a(req.get("b_k", np.zeros(wk.shape[1])))
        bv = _a(req.get("b_v", np.zeros(wv.shape[1])))
    d_k = wq.shape[1] // h
    d_v = wv.shape[1] // g
    Q = x @ wq + bq
    K = mem @ wk + bk
    V = val @ wv + bv

    pos = _per_batch(req.get("positions"), B, n, np.arange(n))
    if "key_positions" in req:
        kpos = _per_batch(req["key_positions"], B, m, None)
    elif has_memory:
        kpos = _per_batch(None, B, m, np.arange(m))
    else:
        kpos = pos

    Qh = Q.reshape(B, n, h, d_k).transpose(0, 2, 1, 3)  # [B][h][n][d]
    Kh = K.reshape(B, m, g, d_k).transpose(0, 2, 1, 3)
    Vh = V.reshape(B, m, g, d_v).transpose(0, 2, 1, 3)

    qn = req.get("qk_norm")
    if qn is not None:
        eps = _s(qn.get("eps", 1e-6))
        if qn.get("over", "head") == "head":
            Qh = _rms(Qh, _a(qn["q_weight"]), eps)
            Kh = _rms(Kh, _a(qn["k_weight"]), eps)
        else:
            Qa = _rms(Qh.transpose(0, 2, 1, 3).reshape(B, n, h * d_k),
                      _a(qn["q_weight"]), eps)
            Ka = _rms(Kh.transpose(0, 2, 1, 3).reshape(B, m, g * d_k),
                      _a(qn["k_weight"]), eps)
            Qh = Qa.reshape(B, n, h, d_k).transpose(0, 2, 1, 3)
            Kh = Ka.reshape(B, m, g, d_k).transpose(0, 2, 1, 3)

    rope = req.get("rope")
    if rope is not None:
        dim = rope.get("dim", d_k)
        theta = _s(rope.get("theta", 10000.0))
        if "inv_freq" in rope:
            freq = _a(rope["inv_freq"])
        else:
            freq = np.array([theta ** (-2.0 * p / dim)
                             for p in range(dim // 2)])
        f = _s(rope.get("attention_factor", 1.0))
        if rope.get("style", "half") == "half":
            pairs = [(p, p + dim // 2) for p in range(dim // 2)]
        else:
            pairs = [(2 * p, 2 * p + 1) for p in range(dim // 2)]

        def rotate(t, positions):
            t = t.copy()
            ang = positions[:, None, :, None] * freq[None, None, None, :]
            c, s = np.cos(ang), np.sin(ang)
            iu = [u for u, _ in pairs]
            iw = [w for _, w in pairs]
            u, w = t[..., iu], t[..., iw]
            t[..., iu] = f * (u * c - w * s)
            t[..., iw] = f * (u * s + w * c)
            return t
        Qh = rotate(Qh, pos.astype(np.float64))
        Kh = rotate(Kh, kpos.astype(np.float64))

    scale = _s(req["scale"]) if "scale" in req else \
        1.0 / math.sqrt(d_k)
    rep = h // g
    Kr = np.repeat(Kh, rep, axis=1)
    Vr = np.repeat(Vh, rep, axis=1)
    S = scale * (Qh @ Kr.transpose(0, 1, 3, 2))  # [B][h][n][m]
    if "softcap" in req:
        c = _s(req["softcap"])
        S = c * np.tanh(S / c)
    if "attn_bias" in req:
        S = S + _maps(_a(req["attn_bias"]), B, h, batched)
    al = req.get("alibi")
    if al is not None and al is not False:
        slopes = bloom_slopes(h) if al is True else _a(al["slopes"])
        dist = np.abs(pos[:, :, None] - kpos[:, None, :]).astype(np.float64)
        S = S - slopes[None, :, None, None] * dist[:, None]

    visible = np.ones((B, h, n, m), dtype=bool)
    if req.get("mask", "none") == "causal":
        visible &= (kpos[:, None, :] <= pos[:, :, None])[:, None]
    if "key_padding_mask" in req:
        kp = np.asarray(req["key_padding_mask"], dtype=bool)
        kp = np.tile(kp[None], (B, 1)) if kp.ndim == 1 else kp
        visible &= ~kp[:, None, None, :]
    if "attn_mask" in req:
        visible &= ~_maps(np.asarray(req["attn_mask"], dtype=bool), B, h,
                          batched)
    if "window" in req:
        L = req["window"].get("left", None)
        R = req["window"].get("right", None)
        inside = np.ones((B, n, m), dtype=bool)
        dq = pos[:, :, None]
        dk = kpos[:, None, :]
        if L is not None:
            inside &= dq - L <= dk
        if R is not None:
            inside &= dk <= dq + R
        for t in req.get("global_tokens", []):
            if t < n:
                inside[:, t, :] = True
            if t < m:
                inside[:, :, t] = True
        visible &= inside[:, None]

    A = np.zeros_like(S)
    for idx in np.ndindex(B, h, n):
        row = visible[idx]
        if row.any():
            s = np.where(row, S[idx], -np.inf)
            e = np.exp(s - s[row].max())
            A[idx] = e / e.sum()
    O = A @ Vr  # [B][h][n][d_v]
    heads = O.transpose(0, 2, 1, 3).reshape(B, n, h * d_v)
    out = heads
    wo = None
    if "w_o" in req:
        wo = _to_in_out(req["w_o"], layout)
        out = heads @ wo
    if "b_o" in req:
        out = out + _a(req["b_o"])

    res = {"output": out}
    rw = req.get("return_weights", "per_head")
    if rw == "per_head":
        res["attention"] = A
    elif rw == "mean":
        res["attention"] = A.mean(axis=1)
    if req.get("value_norms"):
        vn = np.zeros((B, h, m))
        for i in range(h):
            vj = Vh[:, i // rep]
            sent = vj if wo is None else vj @ wo[i * d_v:(i + 1) * d_v]
            vn[:, i] = np.linalg.norm(sent, axis=-1)
        res["value_norms"] = vn
    if req.get("return_qk"):
        res["q"] = Qh
        res["k"] = Kh
    if not batched:
        res = {k: v[0] for k, v in res.items()}
    res["meta"] = {"batch": B, "n": n, "m": m, "d_model": x.shape[2],
                   "d_mem": mem.shape[2], "num_heads": h,
                   "num_kv_heads": g, "d_k": d_k, "d_v": d_v,
                   "d_out": out.shape[2]}
    return res
