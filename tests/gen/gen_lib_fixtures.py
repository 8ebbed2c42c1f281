#!/usr/bin/python3
"""gen_lib_fixtures.py: writes the library's reference fixtures (tests/fixtures/lib).

Run with Debian's interpreter and python3-torch (`make fixtures`):
    /usr/bin/python3 tests/gen/gen_lib_fixtures.py tests/fixtures/lib

Four sources of truth, none of them our own C code:
  * mha_*     torch.nn.functional.multi_head_attention_forward (need_weights,
              average_attn_weights=False), computed in float64;
  * gqa_*/mqa_* an explicit float64 NumPy computation (torch 1.13 has no
              grouped-query attention); the same NumPy code is first checked
              against torch on every MHA case, to 1e-10;
  * lesson_*  the lesson's 3-token NumPy example (np.random.seed(0), W_Q, W_K,
              W_V = np.random.randn(4, 4) * 0.5 in that order).
  * family_*  the score rules of model families, in float64 PyTorch written
              the way those models' code does it (Hugging Face rotate_half
              RoPE, GPT-J's rotate_every_two, BLOOM's slope * key_position
              ALiBi, Gemma 2's softcap, Mistral's sliding-window mask, T5's
              bias, Qwen3's and OLMo 2's RMS norms, Longformer's global
              tokens, MultiheadAttention's separate value source).

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
The score rules add, each when used (before w_v for value):
    positions <B*n> ints, key_positions <B*m> ints
    rope <dim> <theta> <style 0 half, 1 interleaved> <attention factor>
    inv_freq <dim/2>, qk_norm <over 1 head, 2 all> <eps>, q_weight, k_weight
    softcap 1 <cap>, alibi_slopes <h>, window 1 <left> <right> (-1 unbounded)
    score_bias <count> <stride_b> <stride_h> then floats, score_mask likewise
    with 0/1, global_tokens <count> ints, value <count> <d_val> then floats
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


# -- the score rules of model families, in float64 PyTorch -----------------

def t64(a):
    return torch.tensor(np.asarray(a), dtype=torch.float64)


def hf_rotate_half(x):
    """Hugging Face's rotate_half (Llama, Mistral, Qwen, GPT-NeoX)."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def gptj_rotate_every_two(x):
    """GPT-J's rotate_every_two (interleaved pairs)."""
    x1 = x[..., ::2]
    x2 = x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def apply_rope(x, pos, cfg):
    """x [B][heads][len][d_k], pos [B][len]: the first rope_dim entries
    rotate (partial rotary passes the rest through)."""
    dim = cfg["rope_dim"]
    theta = cfg.get("theta", 10000.0)
    if cfg.get("inv_freq") is not None:
        inv_freq = t64(cfg["inv_freq"])
    else:
        inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2,
                                                 dtype=torch.float64) / dim))
    freqs = pos.to(torch.float64)[..., None] * inv_freq     # [B][len][dim/2]
    factor = cfg.get("factor", 1.0)
    rot, rest = x[..., :dim], x[..., dim:]
    if cfg["style"] == 0:
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = (emb.cos() * factor)[:, None]
        sin = (emb.sin() * factor)[:, None]
        rot = rot * cos + hf_rotate_half(rot) * sin
    else:
        cos = (torch.repeat_interleave(freqs.cos(), 2, dim=-1) * factor)[:, None]
        sin = (torch.repeat_interleave(freqs.sin(), 2, dim=-1) * factor)[:, None]
        rot = rot * cos + gptj_rotate_every_two(rot) * sin
    return torch.cat((rot, rest), dim=-1)


def rms_norm(x, weight, eps):
    """Qwen3RMSNorm / OLMo2RMSNorm in float64."""
    variance = x.pow(2).mean(-1, keepdim=True)
    return weight * (x * torch.rsqrt(variance + eps))


def family_attention(a, dims, cfg):
    """The attention of a model family in PyTorch, from the arrays a (our
    layout) and the rules in cfg. Returns output and weights, float64."""
    B, n, m = dims["B"], dims["n"], dims["m"]
    h, g, d_k, d_v = dims["h"], dims["g"], dims["d_k"], dims["d_v"]
    x = t64(a["x"])
    mem = t64(a["memory"]) if a.get("memory") is not None else x
    val = t64(a["value"]) if a.get("value") is not None else mem
    q = x @ t64(a["w_q"])
    k = mem @ t64(a["w_k"])
    v = val @ t64(a["w_v"])
    if cfg.get("qk_norm") == 2:                      # OLMo 2: whole row
        q = rms_norm(q, t64(a["q_weight"]), cfg["eps"])
        k = rms_norm(k, t64(a["k_weight"]), cfg["eps"])
    q = q.view(B, n, h, d_k).transpose(1, 2)          # [B][h][n][d_k]
    k = k.view(B, m, g, d_k).transpose(1, 2)
    v = v.view(B, m, g, d_v).transpose(1, 2)
    if cfg.get("qk_norm") == 1:                      # Qwen3: per head
        q = rms_norm(q, t64(a["q_weight"]), cfg["eps"])
        k = rms_norm(k, t64(a["k_weight"]), cfg["eps"])
    pos = t64(a["positions"]) if a.get("positions") is not None else \
        torch.arange(n, dtype=torch.float64).expand(B, n)
    if a.get("key_positions") is not None:
        kpos = t64(a["key_positions"])
    elif a.get("memory") is None:
        kpos = pos
    else:
        kpos = torch.arange(m, dtype=torch.float64).expand(B, m)
    if cfg.get("rope_dim"):
        q = apply_rope(q, pos, cfg)
        k = apply_rope(k, kpos, cfg)
    # Hugging Face's repeat_kv: query head i reads key/value head i // (h/g)
    k = k.repeat_interleave(h // g, dim=1)
    v = v.repeat_interleave(h // g, dim=1)
    scale = cfg.get("scale") or 1.0 / np.sqrt(d_k)
    s = (q @ k.transpose(-1, -2)) * scale             # [B][h][n][m]
    if cfg.get("softcap"):                            # Gemma 2
        s = torch.tanh(s / cfg["softcap"]) * cfg["softcap"]
    if a.get("score_bias") is not None:               # T5
        s = s + t64(a["score_bias_full"])
    if a.get("alibi_slopes") is not None:
        # BLOOM's build_alibi_tensor: slope * key_position, which under a
        # causal mask gives the weights of -slope * |pos[a] - kpos[b]|
        s = s + t64(a["alibi_slopes"])[None, :, None, None] * \
            kpos[:, None, None, :]
    hidden = torch.zeros(B, h, n, m, dtype=torch.bool)
    dq = pos[:, None, :, None] - kpos[:, None, None, :]
    if cfg.get("causal"):
        hidden |= dq < 0
    if a.get("key_padding") is not None:
        hidden |= torch.tensor(a["key_padding"])[:, None, None, :]
    if a.get("score_mask") is not None:
        hidden |= torch.tensor(a["score_mask_full"])
    if cfg.get("window"):
        left, right = cfg["window"]
        outside = torch.zeros_like(hidden)
        if left is not None:                          # Mistral: W = left + 1
            outside |= dq > left
        if right is not None:
            outside |= -dq > right
        for t in cfg.get("global_tokens", []):        # Longformer
            if t < n:
                outside[:, :, t, :] = False
            if t < m:
                outside[:, :, :, t] = False
        hidden |= outside
    s = s.masked_fill(hidden, float("-inf"))
    w = torch.softmax(s, dim=-1).nan_to_num(0.0)      # hidden rows: zeros
    o = (w @ v).transpose(1, 2).reshape(B, n, h * d_v)
    if a.get("w_o") is not None:
        o = o @ t64(a["w_o"])
    return o.numpy(), w.numpy()


def family_case(out_dir, name, rng, dims, cfg, cross=False, w_o=True,
                d_val=None, positions=None, key_padding=None, bias_form=None,
                mask_form=None, x_amp=1.0, alibi=False):
    B, n, m = dims["B"], dims["n"], dims["m"]
    h, g, d_k, d_v = dims["h"], dims["g"], dims["d_k"], dims["d_v"]
    d_model = dims["d_model"]
    d_mem = dims["d_mem"] if cross else d_model
    dims = dict(dims, d_mem=d_mem, d_out=d_model if w_o else h * d_v)
    a = dict(x=f32(rng.uniform(-x_amp, x_amp, (B, n, d_model))),
             memory=f32(rng.uniform(-1, 1, (B, m, d_mem))) if cross else None)
    if d_val:
        a["value"] = f32(rng.uniform(-1, 1, (B, m, d_val)))
    a.update(w_q=f32(rng.uniform(-0.5, 0.5, (d_model, h * d_k))),
             w_k=f32(rng.uniform(-0.5, 0.5, (d_mem, g * d_k))),
             w_v=f32(rng.uniform(-0.5, 0.5, (d_val or d_mem, g * d_v))),
             w_o=f32(rng.uniform(-0.5, 0.5, (h * d_v, dims["d_out"])))
             if w_o else None)
    if positions is not None:
        a["positions"] = np.asarray(positions[0], dtype=np.int64)
        if positions[1] is not None:
            a["key_positions"] = np.asarray(positions[1], dtype=np.int64)
    if cfg.get("inv_freq") is not None:
        cfg["inv_freq"] = f32(cfg["inv_freq"])
    if cfg.get("qk_norm"):
        qn = d_k if cfg["qk_norm"] == 1 else h * d_k
        kn = d_k if cfg["qk_norm"] == 1 else g * d_k
        a["q_weight"] = f32(rng.uniform(0.5, 1.5, qn))
        a["k_weight"] = f32(rng.uniform(0.5, 1.5, kn))
    if alibi:
        # BLOOM's slopes for a power-of-two h: 2^(-8 (i + 1) / h)
        a["alibi_slopes"] = f32([2.0 ** (-8.0 * (i + 1) / h)
                                 for i in range(h)])
    if key_padding is not None:
        a["key_padding"] = np.asarray(key_padding, dtype=bool)
    shapes = {"nm": (n, m), "hnm": (h, n, m), "bnm": (B, n, m),
              "bhnm": (B, h, n, m)}
    if bias_form:
        a["score_bias"] = f32(rng.uniform(-2, 2, shapes[bias_form]))
        a["score_bias_full"] = broadcast_map(a["score_bias"], bias_form,
                                             B, h)
    if mask_form:
        mk = rng.uniform(0, 1, shapes[mask_form]) < 0.3
        mk.reshape(-1, m)[1] = True                   # a fully hidden row
        a["score_mask"] = mk
        a["score_mask_full"] = broadcast_map(mk, mask_form, B, h)
    out, weights = family_attention(a, dims, cfg)
    write_family(out_dir, name, dims, cfg, a, out, weights, bias_form,
                 mask_form)


def broadcast_map(mp, form, B, h):
    """A map in one of the broadcast forms as [B][h][n][m]."""
    if form == "nm":
        mp = mp[None, None]
    elif form == "hnm":
        mp = mp[None]
    elif form == "bnm":
        mp = mp[:, None]
    n, m = mp.shape[-2:]
    return np.broadcast_to(mp, (B, h, n, m)).copy()


def map_strides(form, h, n, m):
    nm = n * m
    return {"nm": (0, 0), "hnm": (0, nm), "bnm": (nm, 0),
            "bhnm": (h * nm, nm)}[form]


def write_family(out_dir, name, dims, cfg, a, out, weights, bias_form,
                 mask_form):
    h, n, m = dims["h"], dims["n"], dims["m"]
    lines = ["attn_fixture 1 %s" % name,
             "dims " + " ".join(str(dims[k]) for k in
                                ("B", "n", "m", "d_model", "d_mem", "h", "g",
                                 "d_k", "d_v", "d_out")),
             "mask %s" % ("causal" if cfg.get("causal") else "none"),
             "scale %.9g" % (cfg.get("scale") or 0.0)]

    def floats(sec, arr, extra=""):
        arr = np.asarray(arr)
        lines.append("%s %d%s" % (sec, arr.size, extra))
        lines.append(fmt_values(arr, "%.9g"))

    def ints(sec, arr, extra=""):
        arr = np.asarray(arr).astype(np.int64)
        lines.append("%s %d%s" % (sec, arr.size, extra))
        lines.append(fmt_values(arr, "%d", per_line=32))

    floats("x", a["x"])
    if a.get("memory") is not None:
        floats("memory", a["memory"])
    if a.get("value") is not None:
        floats("value", a["value"], " %d" % a["value"].shape[-1])
    for sec in ("w_q", "w_k", "w_v", "w_o"):
        if a.get(sec) is not None:
            floats(sec, a[sec])
    if a.get("key_padding") is not None:
        ints("key_padding", a["key_padding"])
    for sec in ("positions", "key_positions"):
        if a.get(sec) is not None:
            ints(sec, a[sec])
    if cfg.get("rope_dim"):
        lines.append("rope %d %.17g %d %.17g" % (
            cfg["rope_dim"], cfg.get("theta", 10000.0), cfg["style"],
            cfg.get("factor", 1.0)))
        if cfg.get("inv_freq") is not None:
            floats("inv_freq", cfg["inv_freq"])
    if cfg.get("qk_norm"):
        lines.append("qk_norm %d %.17g" % (cfg["qk_norm"], cfg["eps"]))
        floats("q_weight", a["q_weight"])
        floats("k_weight", a["k_weight"])
    if cfg.get("softcap"):
        lines.append("softcap 1 %.9g" % cfg["softcap"])
    if a.get("alibi_slopes") is not None:
        floats("alibi_slopes", a["alibi_slopes"])
    if bias_form:
        floats("score_bias", a["score_bias"],
               " %d %d" % map_strides(bias_form, h, n, m))
    if mask_form:
        ints("score_mask", a["score_mask"],
             " %d %d" % map_strides(mask_form, h, n, m))
    if cfg.get("window"):
        left, right = cfg["window"]
        lines.append("window 1 %d %d" % (-1 if left is None else left,
                                         -1 if right is None else right))
    if cfg.get("global_tokens"):
        ints("global_tokens", cfg["global_tokens"])
    floats("output", out)
    floats("weights", weights)
    lines.append("end")
    with open(os.path.join(out_dir, name + ".txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def family_cases(out_dir, rng):
    base = dict(B=2, n=6, m=6, d_model=16, d_mem=16, h=4, g=2, d_k=8, d_v=8)
    # Llama: GQA, RoPE (rotate_half), a block that continues a sequence
    family_case(out_dir, "family_llama_rope_positions", rng, base,
                dict(causal=True, rope_dim=8, style=0),
                positions=([[3, 4, 5, 6, 7, 8], [10, 11, 12, 13, 14, 15]],
                           None))
    # GPT-J style pairs, partial rotary, YaRN-like frequencies and factor
    family_case(out_dir, "family_gptj_partial_yarn", rng,
                dict(base, B=1, h=2, g=2),
                dict(causal=True, rope_dim=4, style=1, factor=1.2,
                     inv_freq=[0.25, 0.025]))
    # BLOOM: ALiBi with key padding
    family_case(out_dir, "family_bloom_alibi", rng, dict(base, g=4),
                dict(causal=True), alibi=True,
                key_padding=[[0, 0, 0, 0, 0, 1], [1, 0, 0, 0, 0, 0]])
    # Gemma 2: softcap on large scores, Mistral's sliding window (W = 4)
    family_case(out_dir, "family_gemma2_softcap_window", rng,
                dict(base, B=1, n=9, m=9, h=2, g=1),
                dict(causal=True, softcap=5.0, window=(3, None)), x_amp=4.0)
    # T5: a relative bias [h][n][m] with scale 1, cross-attention, and a
    # boolean mask [B][n][m]
    family_case(out_dir, "family_t5_bias_mask", rng,
                dict(base, n=5, m=7, d_mem=12, h=2, g=2),
                dict(scale=1.0), cross=True, bias_form="hnm",
                mask_form="bnm")
    # Qwen3: per-head q/k norm before RoPE; a separate value source
    family_case(out_dir, "family_qwen3_qknorm_value", rng,
                dict(base, n=4, m=6, d_mem=12),
                dict(qk_norm=1, eps=1e-6, rope_dim=8, style=0),
                cross=True, d_val=5)
    # OLMo 2: q/k norm over the whole projected row
    family_case(out_dir, "family_olmo2_qknorm_all", rng,
                dict(base, B=1, n=5, m=5, h=2, g=2),
                dict(causal=True, qk_norm=2, eps=1e-6, rope_dim=8, style=0))
    # Longformer: a two-sided window with global tokens, a mask per head
    family_case(out_dir, "family_longformer_global", rng,
                dict(base, B=1, n=12, m=12, h=2, g=2),
                dict(window=(2, 2), global_tokens=[0, 7]),
                mask_form="bhnm")


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
    family_cases(out_dir, np.random.default_rng(20261201))


if __name__ == "__main__":
    main()
