"""reference.py: the contract's attention in float64 NumPy, for the tests.

attend_ref computes what POST /attend must answer for the fields the tests
use (v1, and of v2: weight_layout, w_qkv/b_qkv in "qkv" order, value,
attn_mask, attn_bias, positions, rope with the "half" style, value_norms, q
and k), straight from the contract's formulas; close() holds an answer to
it with the contract's tolerance.
"""
import numpy as np


def close(got, want, tol=1e-4):
    """|got - want| <= tol * (1 + |want|) element-wise, shapes equal."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    err = np.abs(got - want) - tol * (1 + np.abs(want))
    assert np.all(err <= 0), "max error %g, over the tolerance at %s" % (
        float(np.max(np.abs(got - want))),
        np.unravel_index(int(np.argmax(err)), err.shape))


def _f64(a):
    return None if a is None else np.asarray(a, dtype=np.float64)


def _rope(t, pos, rope, d_k):
    """Rotates [B][heads][len][d_k] by positions [B][len], "half" style."""
    dim = rope.get("dim", d_k)
    if "inv_freq" in rope:
        freq = np.asarray(rope["inv_freq"], dtype=np.float64)
    else:
        theta = rope.get("theta", 10000.0)
        freq = theta ** (-2.0 * np.arange(dim // 2) / dim)
    f = rope.get("attention_factor", 1.0)
    ang = pos[:, None, :, None] * freq[None, None, None, :]
    cos, sin = np.cos(ang) * f, np.sin(ang) * f
    u, w = t[..., :dim // 2], t[..., dim // 2:dim]
    out = t.copy()
    out[..., :dim // 2] = u * cos - w * sin
    out[..., dim // 2:dim] = u * sin + w * cos
    return out


def _map(a, B, h, n, m, batched):
    """A mask or bias of any accepted shape as [B][h][n][m]."""
    a = np.asarray(a)
    if a.ndim == 2:
        a = a[None, None]
    elif a.ndim == 3:
        a = a[:, None] if batched else a[None]
    return np.broadcast_to(a, (B, h, n, m))


def attend_ref(x, w_q=None, w_k=None, w_v=None, memory=None, value=None,
               w_o=None, b_q=None, b_k=None, b_v=None, b_o=None,
               num_heads=1, num_kv_heads=None, mask="none",
               key_padding_mask=None, scale=None, attn_mask=None,
               attn_bias=None, weight_layout="in_out", w_qkv=None,
               b_qkv=None, rope=None, positions=None, key_positions=None,
               **_):
    """dict(output, attention [B][h][n][m] (or [h][n][m]), value_norms
    [B][h][m], q [B][h][n][d_k], k [B][g][m][d_k]); the batch axis dropped
    when x is 2-D."""
    x = _f64(x)
    batched = x.ndim == 3
    if not batched:
        x = x[None]
    mem = x if memory is None else _f64(memory).reshape(
        (x.shape[0],) + _f64(memory).shape[-2:])
    val = mem if value is None else _f64(value).reshape(
        (x.shape[0],) + _f64(value).shape[-2:])
    h = num_heads
    g = num_kv_heads or h

    def lay(w):
        w = _f64(w)
        if w is None:
            return None
        if w.ndim == 3:  # per head: [heads][d_in][d] or [heads][d][d_in]
            if weight_layout == "out_in":
                w = w.reshape(-1, w.shape[-1])
                return w.T
            return np.concatenate(list(w), axis=1)
        return w.T if weight_layout == "out_in" else w

    if w_qkv is not None:
        w = lay(w_qkv)
        d_k = w.shape[1] // (h + 2 * g)
        wq, wk, wv = w[:, :h * d_k], w[:, h * d_k:(h + g) * d_k], \
            w[:, (h + g) * d_k:]
        if b_qkv is not None:
            b = _f64(b_qkv)
            b_q, b_k, b_v = b[:h * d_k], b[h * d_k:(h + g) * d_k], \
                b[(h + g) * d_k:]
    else:
        wq, wk, wv = lay(w_q), lay(w_k), lay(w_v)
    wo = lay(w_o)
    B, n, m = x.shape[0], x.shape[1], mem.shape[1]
    d_k = wq.shape[1] // h
    d_v = wv.shape[1] // g
    Q = x @ wq + (0 if b_q is None else _f64(b_q))
    K = mem @ wk + (0 if b_k is None else _f64(b_k))
    V = val @ wv + (0 if b_v is None else _f64(b_v))
    Q = Q.reshape(B, n, h, d_k).transpose(0, 2, 1, 3)
    K = K.reshape(B, m, g, d_k).transpose(0, 2, 1, 3)
    V = V.reshape(B, m, g, d_v).transpose(0, 2, 1, 3)
    pos = np.broadcast_to(np.arange(n) if positions is None
                          else np.asarray(positions), (B, n)).astype(float)
    if key_positions is not None:
        kpos = np.asarray(key_positions)
    elif memory is None:
        kpos = pos
    else:
        kpos = np.arange(m)
    kpos = np.broadcast_to(kpos, (B, m)).astype(float)
    if rope is not None:
        Q = _rope(Q, pos, rope, d_k)
        K = _rope(K, kpos, rope, d_k)
    rep = h // g
    Kh = np.repeat(K, rep, axis=1)
    Vh = np.repeat(V, rep, axis=1)
    s = (1 / np.sqrt(d_k) if scale is None else scale) * \
        np.einsum("bhnd,bhmd->bhnm", Q, Kh)
    if attn_bias is not None:
        s = s + _map(_f64(attn_bias), B, h, n, m, batched)
    hidden = np.zeros((B, h, n, m), dtype=bool)
    if mask == "causal":
        hidden |= (kpos[:, None, None, :] > pos[:, None, :, None])
    if key_padding_mask is not None:
        kp = np.broadcast_to(np.asarray(key_padding_mask, dtype=bool), (B, m))
        hidden |= kp[:, None, None, :]
    if attn_mask is not None:
        hidden |= _map(np.asarray(attn_mask, dtype=bool), B, h, n, m,
                       batched)
    s = np.where(hidden, -np.inf, s)
    mx = np.max(s, axis=-1, keepdims=True)
    mx = np.where(np.isfinite(mx), mx, 0)
    e = np.where(hidden, 0, np.exp(s - mx))
    tot = e.sum(-1, keepdims=True)
    A = np.where(tot > 0, e / np.where(tot > 0, tot, 1), 0)
    O = np.einsum("bhnm,bhmd->bhnd", A, Vh)
    cat = O.transpose(0, 2, 1, 3).reshape(B, n, h * d_v)
    out = cat if wo is None else cat @ wo
    if b_o is not None:
        out = out + _f64(b_o)
    if wo is None:
        vn = np.linalg.norm(Vh, axis=-1)
    else:
        vn = np.stack([np.linalg.norm(
            Vh[:, i] @ wo[i * d_v:(i + 1) * d_v], axis=-1)
            for i in range(h)], axis=1)
    res = {"output": out, "attention": A, "value_norms": vn, "q": Q,
           "k": K}
    if not batched:
        res = {k: v[0] for k, v in res.items()}
    return res


def rollout_ref(maps):
    """Attention rollout of per-layer mean maps [n][n] (or [B][n][n])."""
    R = None
    for A in maps:
        A = np.asarray(A, dtype=np.float64)
        n = A.shape[-1]
        Ah = A + np.eye(n)
        Ah = Ah / Ah.sum(-1, keepdims=True)
        R = Ah if R is None else Ah @ R
    return R
