#!/usr/bin/python3
"""gen_lib_fixtures.py: writes the library's reference fixtures (tests/fixtures/lib).

Run with Debian's interpreter and python3-torch (`make fixtures`):
    /usr/bin/python3 tests/gen/gen_lib_fixtures.py tests/fixtures/lib

Three sources of truth, none of them our own C code:
  * mha_*     torch.nn.functional.multi_head_attention_forward (need_weights,
              average_attn_weights=False), computed in float64;
  * gqa_*/mqa_* an explicit float64 NumPy computation (torch 1.13 has no
              grouped-query attention); the same NumPy code is first checked
              against torch on every MHA case, to 1e-10;
  * lesson_*  the lesson's 3-token NumPy example (np.random.seed(0), W_Q, W_K,
              W_V = np.random.randn(4, 4) * 0.5 in that order).

File format (one fixture per file, read by tests/lib/test_util.c):
    attn_fixture 1 <name>
    dims B n m d_model d_mem h g d_k d_v d_out
    mask none|causal
    scale <s>                 (0: the default 1/sqrt(d_k))
    <section> <count>         then <count> whitespace-separated numbers
    ...
    end
Sections: x, memory (absent: self-attention), w_q, w_k, w_v, w_o, b_q, b_k,
b_v, b_o (each absent when not used), key_padding (0/1, absent when none),
output [B][n][d_out] and weights [B][h][n][m] (expected, float64 printed with
%.9g). Inputs are float32 values printed with %.9g, which reads back exactly;
the expected values are computed from those same float32 values.
"""

import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

SECTION_ORDER = ["x", "memory", "w_q", "w_k", "w_v", "w_o",
                 "b_q", "b_k", "b_v", "b_o", "key_padding",
                 "output", "weights"]


def f32(a):
    """Rounds to float32 and back to float64: the values the C side reads."""
    return np.asarray(a, dtype=np.float32).astype(np.float64)


def ref_attention(x, mem, w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o,
                  h, g, d_k, d_v, causal, key_padding, scale):
    """The contract's computation in float64, written out head by head.

    x [B][n][d_model], mem [B][m][d_mem] (None: x), weights in our layout
    (row-major, heads side by side), key_padding [B][m] bool or None.
    Returns output [B][n][d_out] and weights [B][h][n][m].
    """
    if mem is None:
        mem = x
    B, n, _ = x.shape
    m = mem.shape[1]
    if not scale:
        scale = 1.0 / np.sqrt(d_k)
    q = x @ w_q + (b_q if b_q is not None else 0.0)
    k = mem @ w_k + (b_k if b_k is not None else 0.0)
    v = mem @ w_v + (b_v if b_v is not None else 0.0)
    heads = np.zeros((B, n, h * d_v))
    weights = np.zeros((B, h, n, m))
    group = h // g
    for b in range(B):
        allowed = np.ones((n, m), dtype=bool)
        if causal:
            allowed &= np.arange(m)[None, :] <= np.arange(n)[:, None]
        if key_padding is not None:
            allowed &= ~key_padding[b][None, :]
        for i in range(h):
            j = i // group  # key/value head of query head i
            qi = q[b, :, i * d_k:(i + 1) * d_k]
            kj = k[b, :, j * d_k:(j + 1) * d_k]
            vj = v[b, :, j * d_v:(j + 1) * d_v]
            s = scale * (qi @ kj.T)
            s = np.where(allowed, s, -np.inf)
            for r in range(n):
                if not allowed[r].any():
                    continue  # fully masked row: zero weights, zero output
                e = np.exp(s[r] - s[r].max())
                weights[b, i, r] = e / e.sum()
            heads[b, :, i * d_v:(i + 1) * d_v] = weights[b, i] @ vj
    out = heads if w_o is None else heads @ w_o
    if b_o is not None:
        out = out + b_o
    return out, weights


def fmt_values(values, spec, per_line=8):
    flat = np.asarray(values).reshape(-1)
    lines = []
    for start in range(0, flat.size, per_line):
        lines.append(" ".join(spec % v for v in flat[start:start + per_line]))
    return "\n".join(lines)


def write_fixture(out_dir, name, dims, causal, scale, arrays):
    """arrays: section name -> numpy array (None sections are left out)."""
    lines = ["attn_fixture 1 %s" % name,
             "dims " + " ".join(str(dims[k]) for k in
                                ("B", "n", "m", "d_model", "d_mem", "h", "g",
                                 "d_k", "d_v", "d_out")),
             "mask %s" % ("causal" if causal else "none"),
             "scale %.9g" % scale]
    for sec in SECTION_ORDER:
        a = arrays.get(sec)
        if a is None:
            continue
        a = np.asarray(a)
        if sec == "key_padding":
            body = fmt_values(a.astype(np.int64), "%d", per_line=32)
        else:
            body = fmt_values(a, "%.9g")
        lines.append("%s %d" % (sec, a.size))
        lines.append(body)
    lines.append("end")
    with open(os.path.join(out_dir, name + ".txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def mha_case(out_dir, name, rng, B, n, m, d_model, d_mem, h, cross,
             biases, causal, key_padding):
    """One MHA fixture from torch's multi_head_attention_forward.

    torch stores a projection as [out][in] and computes x W^T; ours is
    [in][out] and computes x W, so every weight is written transposed.
    torch always applies out_proj, so these fixtures always carry W_O."""
    E = d_model
    d_k = E // h
    x = f32(rng.uniform(-1, 1, (B, n, d_model)))
    mem = f32(rng.uniform(-1, 1, (B, m, d_mem))) if cross else None
    tq = f32(rng.uniform(-0.5, 0.5, (E, d_model)))
    tk = f32(rng.uniform(-0.5, 0.5, (E, d_mem)))
    tv = f32(rng.uniform(-0.5, 0.5, (E, d_mem)))
    to = f32(rng.uniform(-0.5, 0.5, (E, E)))
    in_bias = f32(rng.uniform(-0.5, 0.5, 3 * E)) if biases else None
    out_bias = f32(rng.uniform(-0.5, 0.5, E)) if biases else None
    kpm = None
    if key_padding is not None:
        kpm = np.asarray(key_padding, dtype=bool)

    src = mem if cross else x
    tt = lambda a: None if a is None else torch.tensor(a, dtype=torch.float64)
    query = tt(x).transpose(0, 1)           # torch wants [n][B][E]
    key = tt(src).transpose(0, 1)
    separate = cross and d_mem != d_model
    kwargs = dict(need_weights=True, average_attn_weights=False,
                  training=False)
    if kpm is not None:
        kwargs["key_padding_mask"] = torch.tensor(kpm)
    if causal:
        # bool attn_mask: True marks a position that may not be attended
        kwargs["attn_mask"] = torch.triu(torch.ones(n, m, dtype=torch.bool),
                                         diagonal=1)
    if separate:
        kwargs.update(use_separate_proj_weight=True, q_proj_weight=tt(tq),
                      k_proj_weight=tt(tk), v_proj_weight=tt(tv))
        in_proj_weight = None
    else:
        in_proj_weight = tt(np.concatenate([tq, tk, tv], axis=0))
    out, attn = F.multi_head_attention_forward(
        query, key, key, E, h, in_proj_weight, tt(in_bias), None, None,
        False, 0.0, tt(to), tt(out_bias), **kwargs)
    out = out.transpose(0, 1).numpy()       # [B][n][d_out]
    attn = attn.numpy()                     # [B][h][n][m]

    w_q, w_k, w_v, w_o = tq.T, tk.T, tv.T, to.T
    b_q = b_k = b_v = None
    if biases:
        b_q, b_k, b_v = in_bias[:E], in_bias[E:2 * E], in_bias[2 * E:]
    mine_out, mine_w = ref_attention(x, mem, w_q, w_k, w_v, w_o, b_q, b_k,
                                     b_v, out_bias, h, h, d_k, d_k, causal,
                                     kpm, 0.0)
    # The NumPy reference used for the GQA fixtures must agree with torch.
    assert np.allclose(mine_out, out, rtol=0, atol=1e-10), name
    assert np.allclose(mine_w, attn, rtol=0, atol=1e-10), name

    dims = dict(B=B, n=n, m=m, d_model=d_model, d_mem=d_mem, h=h, g=h,
                d_k=d_k, d_v=d_k, d_out=E)
    write_fixture(out_dir, name, dims, causal, 0.0, dict(
        x=x, memory=mem, w_q=w_q, w_k=w_k, w_v=w_v, w_o=w_o, b_q=b_q,
        b_k=b_k, b_v=b_v, b_o=out_bias, key_padding=kpm, output=out,
        weights=attn))


def numpy_case(out_dir, name, rng, B, n, m, d_model, d_mem, h, g, d_k, d_v,
               d_out, cross, w_o, biases, causal, key_padding, scale):
    """One GQA/MQA fixture from the explicit float64 NumPy computation."""
    x = f32(rng.uniform(-1, 1, (B, n, d_model)))
    mem = f32(rng.uniform(-1, 1, (B, m, d_mem))) if cross else None
    wd = d_mem if cross else d_model
    arr = dict(
        x=x, memory=mem,
        w_q=f32(rng.uniform(-0.5, 0.5, (d_model, h * d_k))),
        w_k=f32(rng.uniform(-0.5, 0.5, (wd, g * d_k))),
        w_v=f32(rng.uniform(-0.5, 0.5, (wd, g * d_v))),
        w_o=f32(rng.uniform(-0.5, 0.5, (h * d_v, d_out))) if w_o else None)
    if biases:
        arr.update(b_q=f32(rng.uniform(-0.5, 0.5, h * d_k)),
                   b_k=f32(rng.uniform(-0.5, 0.5, g * d_k)),
                   b_v=f32(rng.uniform(-0.5, 0.5, g * d_v)),
                   b_o=f32(rng.uniform(-0.5, 0.5, d_out)))
    kpm = None if key_padding is None else np.asarray(key_padding, dtype=bool)
    scale = float(np.float32(scale))
    out, weights = ref_attention(
        x, mem, arr["w_q"], arr["w_k"], arr["w_v"], arr.get("w_o"),
        arr.get("b_q"), arr.get("b_k"), arr.get("b_v"), arr.get("b_o"),
        h, g, d_k, d_v, causal, kpm, scale)
    arr.update(key_padding=kpm, output=out, weights=weights)
    dims = dict(B=B, n=n, m=m, d_model=d_model, d_mem=wd, h=h, g=g,
                d_k=d_k, d_v=d_v, d_out=d_out)
    write_fixture(out_dir, name, dims, causal, scale, arr)


def lesson_cases(out_dir):
    """The lesson's 3-token example, unmasked and causal, single head."""
    x = np.array([[1, 0, 1, 0], [0, 2, 0, 2], [1, 1, 1, 1]], dtype=np.float64)
    np.random.seed(0)
    w_q = np.random.randn(4, 4) * 0.5
    w_k = np.random.randn(4, 4) * 0.5
    w_v = np.random.randn(4, 4) * 0.5
    # The library reads float32; the expected values use exactly those.
    w_q, w_k, w_v = f32(w_q), f32(w_k), f32(w_v)
    dims = dict(B=1, n=3, m=3, d_model=4, d_mem=4, h=1, g=1, d_k=4, d_v=4,
                d_out=4)
    for causal in (False, True):
        out, weights = ref_attention(x[None], None, w_q, w_k, w_v, None,
                                     None, None, None, None, 1, 1, 4, 4,
                                     causal, None, 0.0)
        name = "lesson_3token_causal" if causal else "lesson_3token"
        write_fixture(out_dir, name, dims, causal, 0.0, dict(
            x=x[None], w_q=w_q, w_k=w_k, w_v=w_v, output=out,
            weights=weights))


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/lib"
    os.makedirs(out_dir, exist_ok=True)
    torch.set_num_threads(1)
    rng = np.random.default_rng(20240229)

    mha_case(out_dir, "mha_self", rng, B=1, n=5, m=5, d_model=8, d_mem=8,
             h=2, cross=False, biases=True, causal=False, key_padding=None)
    mha_case(out_dir, "mha_cross_kdim", rng, B=1, n=4, m=6, d_model=8,
             d_mem=5, h=4, cross=True, biases=True, causal=False,
             key_padding=None)
    mha_case(out_dir, "mha_causal", rng, B=1, n=6, m=6, d_model=12,
             d_mem=12, h=3, cross=False, biases=True, causal=True,
             key_padding=None)
    mha_case(out_dir, "mha_key_padding", rng, B=3, n=5, m=5, d_model=8,
             d_mem=8, h=2, cross=False, biases=True, causal=False,
             key_padding=[[0, 0, 0, 0, 1], [0, 1, 0, 1, 1], [0, 0, 0, 0, 0]])
    mha_case(out_dir, "mha_causal_padding", rng, B=2, n=5, m=5, d_model=8,
             d_mem=8, h=4, cross=False, biases=True, causal=True,
             key_padding=[[0, 0, 1, 0, 1], [0, 0, 0, 1, 1]])
    mha_case(out_dir, "mha_batch_cross_nobias", rng, B=4, n=3, m=7,
             d_model=6, d_mem=6, h=3, cross=True, biases=False,
             causal=False, key_padding=None)

    numpy_case(out_dir, "gqa_self_causal", rng, B=2, n=6, m=6, d_model=16,
               d_mem=16, h=4, g=2, d_k=4, d_v=3, d_out=10, cross=False,
               w_o=True, biases=True, causal=True, key_padding=None,
               scale=0.0)
    numpy_case(out_dir, "mqa_cross_padding", rng, B=2, n=5, m=7, d_model=8,
               d_mem=6, h=4, g=1, d_k=3, d_v=5, d_out=20, cross=True,
               w_o=False, biases=False, causal=False,
               key_padding=[[0, 0, 0, 0, 0, 1, 1], [1, 0, 0, 1, 0, 0, 0]],
               scale=0.0)
    numpy_case(out_dir, "gqa_h8_g2_scale", rng, B=2, n=7, m=7, d_model=12,
               d_mem=12, h=8, g=2, d_k=2, d_v=4, d_out=9, cross=False,
               w_o=True, biases=True, causal=True,
               key_padding=[[0, 0, 0, 1, 0, 0, 1], [0, 0, 0, 0, 0, 0, 1]],
               scale=0.3)

    lesson_cases(out_dir)


if __name__ == "__main__":
    main()
