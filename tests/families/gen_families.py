#!/usr/bin/python3
"""gen_families.py: writes the model-family fixtures tests/families/cases/.

    /usr/bin/python3 tests/families/gen_families.py tests/families/cases

(`make families`; needs Debian's python3-torch and python3-numpy, not part
of `make test`.) Each fixture is one JSON file:

    {"family": ..., "about": ..., "tol": 1e-4,
     "meta": {"batch", "n", "m", "d_model", "d_mem", "num_heads",
              "num_kv_heads", "d_k", "d_v", "d_out"},
     "request": <the POST /attend body>,
     "expect": {"output": ..., "attention": ..., and when asked
                "value_norms", "q", "k"}}

An answer passes when every expected value r is matched by the served value
s with |s - r| <= tol * (1 + |r|) (the contract's bound), with the same
nested shape, and when the answer's meta has these dimension fields.

The expected values are never computed with the service's rules. Each
family's attention is written here the way that family's own code writes
it (the Hugging Face transformers modelling files, Meta's original Llama,
torch.nn.MultiheadAttention itself): its rotate_half or rotate_every_two or
complex rotation, its repeat_kv, its additive masks built from its own mask
functions, BLOOM's build_alibi_tensor, T5's relative position buckets,
Longformer's windowed-plus-global scores. The request is then the contract's
spelling of that model's configuration (weight_layout "out_in" for
nn.Linear weights, w_qkv for packed projections, rope, alibi, window, ...).

Every request is also read back from its JSON and run through the
contract's rules (contract_ref.py, NumPy): generation fails unless that
gives the family's answer to 1e-7 (the 8 digits written), so each request
says in the contract's terms exactly what the model computes.

Every input is rounded to float32 first (the service reads float32) and
written as the shortest decimal that reads back as that float32; the
references run in float64 on those values. Each case is also run a second
time in float32 (rotation tables from float64, as a careful float32
implementation would build them), and generation fails if that float32 run
is not well inside the tolerance: a fixture must be passable by a correct
float32 service, not only by a float64 one.
"""
import base64
import json
import math
import os
import sys
import zlib

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import contract_ref  # noqa: E402

TOL = 1e-4
F64 = torch.float64
F32 = torch.float32
# How much of the tolerance the float32 run of a case may use.
F32_BUDGET = 0.25


# -- inputs -----------------------------------------------------------------

class In(np.ndarray):
    """A float32 input array: written with float32 shortest digits."""


def inp(a):
    return np.asarray(a, dtype=np.float32).view(In)


class Gen:
    """Seeded inputs with few decimal digits (small files), as float32."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def normal(self, *shape, scale=1.0, digits=2):
        return inp(np.round(self.rng.normal(0.0, scale, shape), digits))

    def uniform(self, *shape, lo=-1.0, hi=1.0, digits=3):
        return inp(np.round(self.rng.uniform(lo, hi, shape), digits))

    def linear(self, d_out, d_in, scale=None):
        """An nn.Linear weight [out][in], about Kaiming-uniform sized."""
        s = scale if scale is not None else 1.0 / math.sqrt(d_in)
        return self.uniform(d_out, d_in, lo=-s, hi=s, digits=2)


def T(a, dt):
    """An input (float32 values) as a torch tensor of dtype dt."""
    return torch.from_numpy(np.asarray(a, dtype=np.float64)).to(dt)


def f32(v):
    """A scalar rounded to float32 (what the service reads)."""
    return float(np.float32(v))


# -- shared Hugging Face pieces (copied across Llama-derived models) ---------

def rotate_half(x):
    """Rotates half the hidden dims of the input."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(
        batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen,
                                 head_dim)


def default_inv_freq(base, dim):
    """HF _compute_default_rope_parameters (in float64 here)."""
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64)
                           .to(F64) / dim))


def rotary_cos_sin(inv_freq, position_ids, attention_scaling, dt):
    """HF LlamaRotaryEmbedding.forward, position_ids [B][n]: cos, sin
    [B][n][dim]. Built in float64 and cast: HF builds them in float32, which
    at positions in the thousands is off by 1e-3 in the angle."""
    inv_freq_expanded = inv_freq.to(F64)[None, :, None].expand(
        position_ids.shape[0], -1, 1)
    position_ids_expanded = position_ids[:, None, :].to(F64)
    freqs = (inv_freq_expanded @ position_ids_expanded).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos = emb.cos() * attention_scaling
    sin = emb.sin() * attention_scaling
    return cos.to(dt), sin.to(dt)


def hf_mask(dt, cache_position, kv_length, batch, attention_mask=None,
            sliding_window=None):
    """transformers.masking_utils: causal_mask_function (kv_idx <= q_idx),
    sliding_window_overlay (kv_idx > q_idx - sliding_window) and
    padding_mask_function (attention_mask[b, kv_idx]) and-ed, then turned
    into the additive 4-D mask [B][1][q][kv] (0 or the dtype's min).
    cache_position: [q] or [B][q] absolute positions of the queries."""
    cp = cache_position if cache_position.dim() == 2 else \
        cache_position[None, :].expand(batch, -1)
    q_idx = cp[:, :, None]
    kv_idx = torch.arange(kv_length)[None, None, :]
    allowed = kv_idx <= q_idx
    if sliding_window is not None:
        allowed = allowed & (kv_idx > q_idx - sliding_window)
    if attention_mask is not None:
        allowed = allowed & attention_mask[:, None, :].bool()
    min_dtype = torch.finfo(dt).min
    return torch.where(allowed, torch.zeros((), dtype=dt),
                       torch.full((), min_dtype, dtype=dt))[:, None, :, :]


def eager_attention_forward(query, key, value, attention_mask, scaling,
                            num_key_value_groups, softcap=None):
    """HF eager_attention_forward (Llama; Gemma 2's adds the soft cap)."""
    key_states = repeat_kv(key, num_key_value_groups)
    value_states = repeat_kv(value, num_key_value_groups)
    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    if softcap is not None:
        attn_weights = attn_weights / softcap
        attn_weights = torch.tanh(attn_weights)
        attn_weights = attn_weights * softcap
    if attention_mask is not None:
        causal_mask = attention_mask[:, :, :, : key_states.shape[-2]]
        attn_weights = attn_weights + causal_mask
    attn_weights = F.softmax(attn_weights, dim=-1)
    attn_output = torch.matmul(attn_weights, value_states)
    attn_output = attn_output.transpose(1, 2).contiguous()
    return attn_output, attn_weights


class RMSNorm:
    """Qwen3RMSNorm / Olmo2RMSNorm."""

    def __init__(self, weight, eps):
        self.weight = weight
        self.eps = eps

    def __call__(self, hidden_states):
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.eps)
        return self.weight * hidden_states


def llama_family_forward(dt, W, cfg, x, position_ids, mask4d):
    """LlamaAttention.forward and its relatives, selected by cfg:
    cfg["qk_norm"] "head" (Qwen3: norm after view, before transpose) or
    "all" (OLMo 2: norm of the whole projection before view); cfg["softcap"]
    (Gemma 2); cfg["packed"] (Phi-3's qkv_proj split by offsets).
    Returns output, weights [B][h][n][m], q [B][h][n][d], k [B][g][m][d],
    v [B][g][m][d]."""
    h, g, d = cfg["h"], cfg["g"], cfg["d"]
    input_shape = x.shape[:-1]
    hidden_shape = (*input_shape, -1, d)
    if cfg.get("packed"):
        qkv = F.linear(x, T(W["qkv"], dt))
        query_pos = h * d
        q_lin = qkv[..., :query_pos]
        k_lin = qkv[..., query_pos: query_pos + g * d]
        v_lin = qkv[..., query_pos + g * d:]
    else:
        b = {k: (T(W[k], dt) if k in W else None) for k in ("bq", "bk", "bv")}
        q_lin = F.linear(x, T(W["q"], dt), b["bq"])
        k_lin = F.linear(x, T(W["k"], dt), b["bk"])
        v_lin = F.linear(x, T(W["v"], dt), b["bv"])
    norm = cfg.get("qk_norm")
    if norm == "head":
        q_norm = RMSNorm(T(W["q_norm"], dt), cfg["eps"])
        k_norm = RMSNorm(T(W["k_norm"], dt), cfg["eps"])
        query_states = q_norm(q_lin.view(hidden_shape)).transpose(1, 2)
        key_states = k_norm(k_lin.view(hidden_shape)).transpose(1, 2)
    elif norm == "all":
        q_norm = RMSNorm(T(W["q_norm"], dt), cfg["eps"])
        k_norm = RMSNorm(T(W["k_norm"], dt), cfg["eps"])
        query_states = q_norm(q_lin).view(hidden_shape).transpose(1, 2)
        key_states = k_norm(k_lin).view(hidden_shape).transpose(1, 2)
    else:
        query_states = q_lin.view(hidden_shape).transpose(1, 2)
        key_states = k_lin.view(hidden_shape).transpose(1, 2)
    value_states = v_lin.view(hidden_shape).transpose(1, 2)
    cos, sin = rotary_cos_sin(cfg["inv_freq"], position_ids,
                              cfg.get("attention_scaling", 1.0), dt)
    query_states, key_states = apply_rotary_pos_emb(query_states, key_states,
                                                    cos, sin)
    attn_output, attn_weights = eager_attention_forward(
        query_states, key_states, value_states, mask4d, cfg["scaling"],
        h // g, softcap=cfg.get("softcap"))
    attn_output = attn_output.reshape(*input_shape, -1).contiguous()
    attn_output = F.linear(attn_output, T(W["o"], dt))
    return {"output": attn_output, "attention": attn_weights,
            "q": query_states, "k": key_states, "v": value_states}


# -- fixture assembly -------------------------------------------------------

CASES = []


def case(fn):
    CASES.append(fn)
    return fn


def twice(forward):
    """forward(dt) -> dict of tensors; returns the float64 results as numpy
    and the share of the tolerance the float32 run used (worst element)."""
    r64 = {k: v.detach().numpy() for k, v in forward(F64).items()}
    r32 = {k: v.detach().to(F64).numpy() for k, v in forward(F32).items()}
    used = 0.0
    for k in r64:
        a, b = r64[k], r32[k]
        assert a.shape == b.shape, k
        assert np.isfinite(a).all(), "non-finite reference in %s" % k
        err = np.abs(a - b) / (TOL * (1.0 + np.abs(a)))
        used = max(used, float(err.max()) if err.size else 0.0)
    return r64, used


def value_norms(v, w_o_out_in, h, g):
    """||V_j[b] W_o^(i)||: v [g][m][d_v], w_o nn.Linear weight
    [d_out][h*d_v]; head i owns its input columns i*d_v .. (i+1)*d_v-1."""
    d_v = v.shape[-1]
    out = np.zeros((h, v.shape[-2]))
    for i in range(h):
        j = i // (h // g)
        wo = np.asarray(w_o_out_in, dtype=np.float64)
        wo_i = wo[:, i * d_v:(i + 1) * d_v]
        out[i] = np.linalg.norm(v[j] @ wo_i.T, axis=-1)
    return out


# -- Llama / Mistral / Qwen ---------------------------------------------------

def llama_weights(G, d_model, h, g, d, bias=False):
    W = {"q": G.linear(h * d, d_model), "k": G.linear(g * d, d_model),
         "v": G.linear(g * d, d_model), "o": G.linear(d_model, h * d)}
    if bias:
        W.update(bq=G.uniform(h * d, lo=-0.5, hi=0.5),
                 bk=G.uniform(g * d, lo=-0.5, hi=0.5),
                 bv=G.uniform(g * d, lo=-0.5, hi=0.5))
    return W


def llama_request(W, x, **extra):
    r = {"x": x, "num_heads": extra.pop("h"), "num_kv_heads": extra.pop("g"),
         "weight_layout": "out_in",
         "w_q": W["q"], "w_k": W["k"], "w_v": W["v"], "w_o": W["o"]}
    for k in ("bq", "bk", "bv"):
        if k in W:
            r["b_" + k[1]] = W[k]
    r.update(extra)
    return r


def prefill(dt, W, cfg, x, sliding_window=None, attention_mask=None,
            position_ids=None):
    """A whole prompt x [B][n][d] through llama_family_forward, with HF's
    causal mask over cache positions 0..n-1."""
    B, n, _ = x.shape
    cache_position = torch.arange(n)
    if position_ids is None:
        position_ids = cache_position[None, :].expand(B, -1)
    mask = hf_mask(dt, cache_position, n, B, attention_mask, sliding_window)
    return llama_family_forward(dt, W, cfg, x, position_ids, mask)


@case
def llama_gqa_rope(G):
    h, g, d, d_model, n = 4, 2, 8, 8, 7
    W = llama_weights(G, d_model, h, g, d)
    x = G.normal(n, d_model)
    cfg = dict(h=h, g=g, d=d, inv_freq=default_inv_freq(10000.0, d),
               scaling=d ** -0.5)

    def fwd(dt):
        r = prefill(dt, W, cfg, T(x, dt)[None])
        return {"output": r["output"][0], "attention": r["attention"][0]}
    req = llama_request(W, x, h=h, g=g, mask="causal", rope={})
    return "Llama", ("LlamaAttention: GQA h=4 g=2, rotate_half RoPE with "
                     "the default theta (rope: {}), causal, nn.Linear "
                     "weights as out_in"), req, fwd


@case
def qwen2_bias_rope(G):
    h, g, d, d_model, n = 4, 2, 8, 8, 6
    W = llama_weights(G, d_model, h, g, d, bias=True)
    x = G.normal(n, d_model)
    cfg = dict(h=h, g=g, d=d, inv_freq=default_inv_freq(1000000.0, d),
               scaling=d ** -0.5)

    def fwd(dt):
        r = prefill(dt, W, cfg, T(x, dt)[None])
        return {"output": r["output"][0], "attention": r["attention"][0]}
    req = llama_request(W, x, h=h, g=g, mask="causal",
                        rope={"theta": 1000000.0})
    return "Qwen2", ("Qwen2Attention: q/k/v biases, rope_theta 1e6, GQA, "
                     "causal, out_in"), req, fwd


def llama3_inv_freq(base, dim, factor=8.0, low_freq_factor=1.0,
                    high_freq_factor=4.0, old_context_len=8192):
    """HF _compute_llama3_parameters."""
    inv_freq = default_inv_freq(base, dim)
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen,
                                 inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (
        high_freq_factor - low_freq_factor)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + \
        smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen >
                                                        low_freq_wavelen)
    return torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)


@case
def llama3_inv_freq_long_positions(G):
    h, g, d, d_model = 4, 2, 8, 8
    positions = [0, 3, 100, 2047, 5000, 8191, 12000, 12001]
    n = len(positions)
    W = llama_weights(G, d_model, h, g, d)
    x = G.normal(n, d_model)
    # d = 8 has 4 frequencies: one kept, one smoothed, two divided by 8.
    inv = inp(llama3_inv_freq(500000.0, d).numpy())
    cfg = dict(h=h, g=g, d=d, inv_freq=T(inv, F64), scaling=d ** -0.5)
    pos = torch.tensor(positions)

    def fwd(dt):
        mask = hf_mask(dt, torch.arange(n), n, 1)
        # the keys' cache slots are 0..n-1 but their positions are `pos`:
        # HF's causal test compares slots; with increasing positions the two
        # agree, which is what the contract's position rule needs.
        r = llama_family_forward(dt, W, cfg, T(x, dt)[None], pos[None], mask)
        return {"output": r["output"][0], "attention": r["attention"][0]}
    req = llama_request(W, x, h=h, g=g, mask="causal", positions=positions,
                        rope={"inv_freq": inv})
    return "Llama 3", ("Llama 3.1 rope_scaling (factor 8, low 1, high 4, "
                       "original 8192) frequencies passed as rope.inv_freq; "
                       "positions up to 12001 (a float32 angle t*freq would "
                       "be off by ~1e-3 there: the contract's float64 "
                       "reference needs the angle in double)"), req, fwd


def yarn_parameters(base, dim, factor, original_max_position_embeddings,
                    beta_fast=32, beta_slow=1):
    """HF _compute_yarn_parameters: (inv_freq, attention_factor)."""
    def get_mscale(scale, mscale=1):
        if scale <= 1:
            return 1.0
        return 0.1 * mscale * math.log(scale) + 1.0

    attention_factor = get_mscale(factor)

    def find_correction_dim(num_rotations, dim, base, max_position_embeddings):
        return (dim * math.log(max_position_embeddings /
                               (num_rotations * 2 * math.pi))) / (
            2 * math.log(base))

    def find_correction_range(low_rot, high_rot, dim, base,
                              max_position_embeddings):
        low = math.floor(find_correction_dim(low_rot, dim, base,
                                             max_position_embeddings))
        high = math.ceil(find_correction_dim(high_rot, dim, base,
                                             max_position_embeddings))
        return max(low, 0), min(high, dim - 1)

    def linear_ramp_factor(min_, max_, dim):
        if min_ == max_:
            max_ += 0.001
        linear_func = (torch.arange(dim, dtype=F64) - min_) / (max_ - min_)
        return torch.clamp(linear_func, 0, 1)

    pos_freqs = base ** (torch.arange(0, dim, 2).to(F64) / dim)
    inv_freq_extrapolation = 1.0 / pos_freqs
    inv_freq_interpolation = 1.0 / (factor * pos_freqs)
    low, high = find_correction_range(beta_fast, beta_slow, dim, base,
                                      original_max_position_embeddings)
    inv_freq_extrapolation_factor = 1 - linear_ramp_factor(low, high,
                                                           dim // 2)
    inv_freq = inv_freq_interpolation * (1 - inv_freq_extrapolation_factor) \
        + inv_freq_extrapolation * inv_freq_extrapolation_factor
    return inv_freq, attention_factor


@case
def yarn_attention_factor(G):
    h, g, d, d_model, n = 2, 1, 16, 8, 6
    W = llama_weights(G, d_model, h, g, d)
    x = G.normal(n, d_model)
    inv64, factor = yarn_parameters(10000.0, d, 4.0, 4096)
    inv = inp(inv64.numpy())
    factor = f32(factor)
    positions = [0, 1, 2, 50, 300, 900]
    pos = torch.tensor(positions)
    cfg = dict(h=h, g=g, d=d, inv_freq=T(inv, F64), scaling=d ** -0.5,
               attention_scaling=factor)

    def fwd(dt):
        r = llama_family_forward(dt, W, cfg, T(x, dt)[None], pos[None],
                                 hf_mask(dt, torch.arange(n), n, 1))
        return {"output": r["output"][0], "attention": r["attention"][0]}
    req = llama_request(W, x, h=h, g=g, mask="causal", positions=positions,
                        rope={"inv_freq": inv, "attention_factor": factor})
    return "YaRN (Qwen2/Llama rope_scaling type yarn)", (
        "YaRN factor 4 over 4096: its blended frequencies as rope.inv_freq "
        "and its attention_factor 0.1 ln 4 + 1 (cos and sin scaled), MQA "
        "(g=1), d_k 16"), req, fwd


@case
def llama_decode_step(G):
    """One new token at position m-1 against the m cached keys: the last row
    of the whole prompt's attention."""
    h, g, d, d_model, m = 4, 2, 8, 8, 9
    W = llama_weights(G, d_model, h, g, d)
    hidden = G.normal(m, d_model)
    cfg = dict(h=h, g=g, d=d, inv_freq=default_inv_freq(10000.0, d),
               scaling=d ** -0.5)

    def fwd(dt):
        r = prefill(dt, W, cfg, T(hidden, dt)[None])
        return {"output": r["output"][0, -1:], "attention":
                r["attention"][0, :, -1:]}
    req = llama_request(W, hidden[-1:], h=h, g=g, memory=hidden,
                        positions=[m - 1], mask="causal", rope={})
    return "Llama", ("decode step: x is the newest hidden state, memory all "
                     "m=9 (key_positions default 0..m-1), positions [m-1]; "
                     "expected = last row of the full prompt"), req, fwd


@case
def meta_llama_chunk_3d_out_in(G):
    """Meta's original llama/model.py: interleaved pairs through
    view_as_complex, a KV cache, start_pos > 0; weights sent per head as
    [h][d_k][d_model] (out_in 3-D)."""
    h, g, d, d_model = 4, 2, 8, 8
    start_pos, seqlen = 5, 4
    W = llama_weights(G, d_model, h, g, d)
    hidden = G.normal(start_pos + seqlen, d_model)

    def precompute_freqs_cis(dim, end, theta=10000.0):
        freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)]
                                 .to(F64) / dim))
        t = torch.arange(end, dtype=F64)
        freqs = torch.outer(t, freqs)
        return torch.polar(torch.ones_like(freqs), freqs)

    def apply_rotary_emb(xq, xk, freqs_cis):
        xq_ = torch.view_as_complex(xq.reshape(*xq.shape[:-1], -1, 2))
        xk_ = torch.view_as_complex(xk.reshape(*xk.shape[:-1], -1, 2))
        shape = [1, xq_.shape[1], 1, xq_.shape[-1]]
        fc = freqs_cis.view(*shape)
        xq_out = torch.view_as_real(xq_ * fc).flatten(3)
        xk_out = torch.view_as_real(xk_ * fc).flatten(3)
        return xq_out, xk_out

    def attention(dt, xx, sp, freqs_cis, mask, cache_k, cache_v):
        bsz, sl, _ = xx.shape
        xq = F.linear(xx, T(W["q"], dt)).view(bsz, sl, h, d)
        xk = F.linear(xx, T(W["k"], dt)).view(bsz, sl, g, d)
        xv = F.linear(xx, T(W["v"], dt)).view(bsz, sl, g, d)
        xq, xk = apply_rotary_emb(xq, xk, freqs_cis)
        cache_k[:bsz, sp: sp + sl] = xk
        cache_v[:bsz, sp: sp + sl] = xv
        keys = cache_k[:bsz, : sp + sl]
        values = cache_v[:bsz, : sp + sl]
        keys = repeat_kv(keys.transpose(1, 2), h // g)
        values = repeat_kv(values.transpose(1, 2), h // g)
        xq = xq.transpose(1, 2)
        scores = torch.matmul(xq, keys.transpose(2, 3)) / math.sqrt(d)
        if mask is not None:
            scores = scores + mask
        scores = F.softmax(scores, dim=-1)
        output = torch.matmul(scores, values)
        output = output.transpose(1, 2).contiguous().view(bsz, sl, -1)
        return F.linear(output, T(W["o"], dt)), scores

    def fwd(dt):
        cdt = torch.complex128 if dt == F64 else torch.complex64
        fc = precompute_freqs_cis(d, 32).to(cdt)
        ck = torch.zeros(1, 32, g, d, dtype=dt)
        cv = torch.zeros(1, 32, g, d, dtype=dt)
        xx = T(hidden, dt)[None]
        # the earlier call filled the cache with the first start_pos tokens
        m0 = torch.triu(torch.full((start_pos, start_pos), float("-inf"),
                                   dtype=dt), diagonal=1)
        attention(dt, xx[:, :start_pos], 0, fc[:start_pos], m0, ck, cv)
        mask = torch.full((seqlen, seqlen), float("-inf"), dtype=dt)
        mask = torch.triu(mask, diagonal=1)
        mask = torch.hstack([torch.zeros((seqlen, start_pos), dtype=dt),
                             mask])
        out, scores = attention(dt, xx[:, start_pos:], start_pos,
                                fc[start_pos: start_pos + seqlen], mask, ck,
                                cv)
        return {"output": out[0], "attention": scores[0]}
    req = {"x": hidden[start_pos:], "memory": hidden, "num_heads": h,
           "num_kv_heads": g, "weight_layout": "out_in",
           "w_q": W["q"].reshape(h, d, d_model),
           "w_k": W["k"].reshape(g, d, d_model),
           "w_v": W["v"].reshape(g, d, d_model), "w_o": W["o"],
           "positions": list(range(start_pos, start_pos + seqlen)),
           "mask": "causal", "rope": {"style": "interleaved"}}
    return "Llama (Meta's original code)", (
        "Meta llama model.py Attention: complex rotation of interleaved "
        "pairs, a 4-token chunk at start_pos 5 against the cache of 9 "
        "(memory), 3-D out_in per-head weights"), req, fwd


@case
def llama_batch_decode_left_padded(G):
    """Batched generation, two new tokens per sequence, HF left padding:
    sequence 0 has 9 tokens, sequence 1 has 6 behind 3 pads. Expected: each
    sequence's own unpadded prompt, its last two rows."""
    h, g, d, d_model = 4, 2, 8, 8
    L = [9, 6]
    m = 9
    W = llama_weights(G, d_model, h, g, d)
    seqs = [G.normal(L[0], d_model), G.normal(L[1], d_model)]
    pad = G.normal(m - L[1], d_model)
    cfg = dict(h=h, g=g, d=d, inv_freq=default_inv_freq(10000.0, d),
               scaling=d ** -0.5)
    memory = np.stack([seqs[0], np.concatenate([pad, seqs[1]])]).view(In)
    attention_mask = np.array([[1] * m, [0] * (m - L[1]) + [1] * L[1]])
    # HF generate: position_ids = cumsum(attention_mask) - 1, pads set to 1
    position_ids = np.cumsum(attention_mask, -1) - 1
    position_ids[attention_mask == 0] = 1

    def fwd(dt):
        outs, maps = [], []
        for b in range(2):
            r = prefill(dt, W, cfg, T(seqs[b], dt)[None])
            a = torch.zeros(h, 2, m, dtype=dt)
            a[:, :, m - L[b]:] = r["attention"][0, :, -2:]
            outs.append(r["output"][0, -2:])
            maps.append(a)
        return {"output": torch.stack(outs), "attention": torch.stack(maps)}
    req = llama_request(W, memory[:, -2:], h=h, g=g, memory=memory,
                        positions=position_ids[:, -2:].tolist(),
                        key_positions=position_ids.tolist(),
                        key_padding_mask=(attention_mask == 0).tolist(),
                        mask="causal", rope={})
    return "Llama", ("batched decode of 2 tokens per sequence, HF left "
                     "padding: positions [B][n] and key_positions [B][m] "
                     "from cumsum(attention_mask)-1 (pads at 1), "
                     "key_padding_mask; expected from each sequence alone"
                     ), req, fwd


@case
def mistral_sliding_window(G):
    h, g, d, d_model, n, W_ = 4, 2, 8, 8, 12, 4
    W = llama_weights(G, d_model, h, g, d)
    x = G.normal(n, d_model)
    cfg = dict(h=h, g=g, d=d, inv_freq=default_inv_freq(10000.0, d),
               scaling=d ** -0.5)

    def fwd(dt):
        r = prefill(dt, W, cfg, T(x, dt)[None], sliding_window=W_)
        return {"output": r["output"][0], "attention": r["attention"][0]}
    req = llama_request(W, x, h=h, g=g, mask="causal", rope={},
                        window={"left": W_ - 1})
    return "Mistral", ("sliding_window 4 (current HF masking_utils: kv_idx "
                       "> q_idx - 4) as window.left 3 with causal, n=12"
                       ), req, fwd


@case
def mistral_decode_window(G):
    """A decode step under the sliding window: the query at position m-1
    sees keys m-4 .. m-1 of memory. A service that measured the window
    from the query's index 0 instead of positions[0] would see key 0."""
    h, g, d, d_model, m, W_ = 4, 2, 8, 8, 12, 4
    W = llama_weights(G, d_model, h, g, d)
    hidden = G.normal(m, d_model)
    cfg = dict(h=h, g=g, d=d, inv_freq=default_inv_freq(10000.0, d),
               scaling=d ** -0.5)

    def fwd(dt):
        r = prefill(dt, W, cfg, T(hidden, dt)[None], sliding_window=W_)
        return {"output": r["output"][0, -1:],
                "attention": r["attention"][0, :, -1:]}
    req = llama_request(W, hidden[-1:], h=h, g=g, memory=hidden,
                        positions=[m - 1], mask="causal", rope={},
                        window={"left": W_ - 1})
    return "Mistral", ("decode step under sliding_window 4: x the newest "
                       "hidden state, memory all 12, positions [11], "
                       "window.left 3; expected = last row of the prompt"
                       ), req, fwd


@case
def phi3_packed_qkv_gqa(G):
    h, g, d, d_model, n = 4, 2, 8, 8, 6
    Wqkv = G.linear((h + 2 * g) * d, d_model)
    Wo = G.linear(d_model, h * d)
    x = G.normal(n, d_model)
    W = {"qkv": Wqkv, "o": Wo}
    cfg = dict(h=h, g=g, d=d, inv_freq=default_inv_freq(10000.0, d),
               scaling=d ** -0.5, packed=True)

    def fwd(dt):
        r = prefill(dt, W, cfg, T(x, dt)[None])
        return {"output": r["output"][0], "attention": r["attention"][0]}
    req = {"x": x, "num_heads": h, "num_kv_heads": g,
           "weight_layout": "out_in", "w_qkv": Wqkv, "w_o": Wo,
           "mask": "causal", "rope": {}}
    return "Phi-3", ("Phi3Attention: qkv_proj split at h*d and h*d + g*d "
                     "(w_qkv, qkv_order qkv, out_in), GQA, RoPE"), req, fwd


def must_matter(dt, r, cfg_without, run):
    """Fails generation when the answer without a rule is not far from the
    answer with it (the fixture would not test the rule)."""
    other = run(cfg_without)
    diff = float((r["attention"] - other["attention"]).abs().max())
    assert diff > 0.05, "the rule changes the weights by only %g" % diff


@case
def gemma2_softcap(G):
    h, g, d, d_model, n = 4, 2, 8, 8, 8
    W = llama_weights(G, d_model, h, g, d)
    # large q and k so that raw scores reach well past the cap of 50
    W["q"] = inp(W["q"] * 6)
    W["k"] = inp(W["k"] * 6)
    x = G.normal(n, d_model)
    scaling = f32(6.0 ** -0.5)  # query_pre_attn_scalar 6
    cfg = dict(h=h, g=g, d=d, inv_freq=default_inv_freq(10000.0, d),
               scaling=scaling, softcap=50.0)

    def fwd(dt):
        r = prefill(dt, W, cfg, T(x, dt)[None])
        if dt == F64:
            must_matter(dt, r, dict(cfg, softcap=None),
                        lambda c: prefill(dt, W, c, T(x, dt)[None]))
        return {"output": r["output"][0], "attention": r["attention"][0]}
    req = llama_request(W, x, h=h, g=g, mask="causal", rope={},
                        scale=scaling, softcap=50.0)
    return "Gemma 2", ("attn_logit_softcapping 50 on raw scores up to ~130, "
                       "scaling query_pre_attn_scalar**-0.5 (6) as scale, "
                       "global layer (causal)"), req, fwd


@case
def gemma2_local_softcap(G):
    h, g, d, d_model, n, W_ = 2, 1, 8, 8, 10, 3
    W = llama_weights(G, d_model, h, g, d)
    W["q"] = inp(W["q"] * 16)
    W["k"] = inp(W["k"] * 16)
    x = G.normal(n, d_model)
    scaling = f32(8.0 ** -0.5)
    cfg = dict(h=h, g=g, d=d, inv_freq=default_inv_freq(10000.0, d),
               scaling=scaling, softcap=50.0)

    def fwd(dt):
        r = prefill(dt, W, cfg, T(x, dt)[None], sliding_window=W_)
        if dt == F64:
            must_matter(dt, r, dict(cfg, softcap=None),
                        lambda c: prefill(dt, W, c, T(x, dt)[None],
                                          sliding_window=W_))
        return {"output": r["output"][0], "attention": r["attention"][0]}
    req = llama_request(W, x, h=h, g=g, mask="causal", rope={},
                        scale=scaling, softcap=50.0, window={"left": W_ - 1})
    return "Gemma 2", ("local (sliding) layer: window 3 and soft cap 50 "
                       "(raw scores up to ~470), MQA"), req, fwd


@case
def qwen3_qk_norm_head(G):
    h, g, d, d_model, n = 4, 2, 8, 8, 7
    W = llama_weights(G, d_model, h, g, d)
    W["q_norm"] = G.uniform(d, lo=0.5, hi=1.5)
    W["k_norm"] = G.uniform(d, lo=0.5, hi=1.5)
    x = G.normal(n, d_model)
    eps = f32(1e-6)
    cfg = dict(h=h, g=g, d=d, inv_freq=default_inv_freq(1000000.0, d),
               scaling=d ** -0.5, qk_norm="head", eps=eps)

    def fwd(dt):
        r = prefill(dt, W, cfg, T(x, dt)[None])
        return {"output": r["output"][0], "attention": r["attention"][0]}
    req = llama_request(W, x, h=h, g=g, mask="causal",
                        rope={"theta": 1000000.0},
                        qk_norm={"q_weight": W["q_norm"],
                                 "k_weight": W["k_norm"], "eps": eps,
                                 "over": "head"})
    return "Qwen3", ("Qwen3Attention: q_norm/k_norm (RMSNorm over head_dim) "
                     "after the view, before RoPE; GQA"), req, fwd


@case
def olmo2_qk_norm_all(G):
    h, g, d, d_model, n = 4, 2, 8, 8, 7
    W = llama_weights(G, d_model, h, g, d)
    W["q_norm"] = G.uniform(h * d, lo=0.5, hi=1.5)
    W["k_norm"] = G.uniform(g * d, lo=0.5, hi=1.5)
    x = G.normal(n, d_model)
    eps = f32(1e-6)
    cfg = dict(h=h, g=g, d=d, inv_freq=default_inv_freq(500000.0, d),
               scaling=d ** -0.5, qk_norm="all", eps=eps)

    def fwd(dt):
        r = prefill(dt, W, cfg, T(x, dt)[None])
        return {"output": r["output"][0], "attention": r["attention"][0]}
    req = llama_request(W, x, h=h, g=g, mask="causal",
                        rope={"theta": 500000.0},
                        qk_norm={"q_weight": W["q_norm"],
                                 "k_weight": W["k_norm"], "eps": eps,
                                 "over": "all"})
    return "OLMo 2", ("Olmo2Attention: q_norm over all h*d_k and k_norm over "
                      "all g*d_k before the view, then RoPE"), req, fwd


@case
def qwen3_value_norms_return_qk(G):
    h, g, d, d_model, n = 4, 2, 8, 8, 6
    W = llama_weights(G, d_model, h, g, d)
    W["q_norm"] = G.uniform(d, lo=0.5, hi=1.5)
    W["k_norm"] = G.uniform(d, lo=0.5, hi=1.5)
    x = G.normal(n, d_model)
    eps = f32(1e-6)
    cfg = dict(h=h, g=g, d=d, inv_freq=default_inv_freq(1000000.0, d),
               scaling=d ** -0.5, qk_norm="head", eps=eps)

    def fwd(dt):
        r = prefill(dt, W, cfg, T(x, dt)[None])
        return {"output": r["output"][0], "attention": r["attention"][0],
                "q": r["q"][0], "k": r["k"][0], "v": r["v"][0]}
    req = llama_request(W, x, h=h, g=g, mask="causal",
                        rope={"theta": 1000000.0},
                        qk_norm={"q_weight": W["q_norm"],
                                 "k_weight": W["k_norm"], "eps": eps},
                        value_norms=True, return_qk=True)

    def post(r):
        r["value_norms"] = value_norms(r.pop("v"), W["o"], h, g)
        return r
    return "Qwen3", ("value_norms ||V_j[b] W_o^(i)|| (o_proj's columns of "
                     "head i) and return_qk (q [h][n][d_k] and k [g][m][d_k]"
                     " after q/k norm and RoPE, the tensors HF multiplies)"
                     ), req, fwd, post


def tensor_object(a):
    """The contract's tensor object: float32 little-endian, base64."""
    a = np.asarray(a, dtype="<f4")
    return {"dtype": "float32", "shape": list(a.shape),
            "data": base64.b64encode(a.tobytes()).decode()}


@case
def qwen3_extras_base64(G):
    got = qwen3_value_norms_return_qk(G)
    family, about, req, fwd, post = got
    req = dict(req, encoding="base64",
               qk_norm=dict(req["qk_norm"],
                            q_weight=tensor_object(req["qk_norm"]
                                                   ["q_weight"])))
    return family, ("the same with encoding base64: output, attention, "
                    "value_norms, q and k come back as tensor objects; "
                    "qk_norm.q_weight sent as one"), req, fwd, post


# -- GPT-J, GPT-NeoX, GPT-2 --------------------------------------------------

@case
def gptj_interleaved_partial(G):
    h, d, d_model, n, rotary_dim = 2, 8, 16, 7, 4
    Wq, Wk, Wv = (G.linear(d_model, d_model) for _ in range(3))
    Wo = G.linear(d_model, d_model)
    x = G.normal(n, d_model)

    def create_sinusoidal_positions(num_pos, dim):
        inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=F64)
                                    / dim))
        sinusoid_inp = torch.einsum("i , j -> i j",
                                    torch.arange(num_pos, dtype=F64),
                                    inv_freq.to(F64))
        return torch.cat((torch.sin(sinusoid_inp), torch.cos(sinusoid_inp)),
                         dim=1)

    def rotate_every_two(t):
        x1 = t[:, :, :, ::2]
        x2 = t[:, :, :, 1::2]
        t = torch.stack((-x2, x1), dim=-1)
        return t.flatten(-2)

    def apply_rotary_pos_emb_gptj(tensor, sin, cos):
        sin = torch.repeat_interleave(sin[:, :, None, :], 2, 3)
        cos = torch.repeat_interleave(cos[:, :, None, :], 2, 3)
        return (tensor * cos) + (rotate_every_two(tensor) * sin)

    def fwd(dt):
        hs = T(x, dt)[None]
        query = F.linear(hs, T(Wq, dt)).view(1, n, h, d)
        key = F.linear(hs, T(Wk, dt)).view(1, n, h, d)
        value = F.linear(hs, T(Wv, dt)).view(1, n, h, d).permute(0, 2, 1, 3)
        embed_positions = create_sinusoidal_positions(32, rotary_dim).to(dt)
        sincos = embed_positions[torch.arange(n)[None]]
        sin, cos = torch.split(sincos, sincos.shape[-1] // 2, dim=-1)
        k_rot, k_pass = key[:, :, :, :rotary_dim], key[:, :, :, rotary_dim:]
        q_rot, q_pass = query[:, :, :, :rotary_dim], \
            query[:, :, :, rotary_dim:]
        k_rot = apply_rotary_pos_emb_gptj(k_rot, sin, cos)
        q_rot = apply_rotary_pos_emb_gptj(q_rot, sin, cos)
        key = torch.cat([k_rot, k_pass], dim=-1).permute(0, 2, 1, 3)
        query = torch.cat([q_rot, q_pass], dim=-1).permute(0, 2, 1, 3)
        attn_weights = torch.matmul(query, key.transpose(-1, -2))
        causal_mask = torch.tril(torch.ones(n, n, dtype=torch.bool))
        mask_value = torch.tensor(torch.finfo(dt).min, dtype=dt)
        attn_weights = torch.where(causal_mask, attn_weights, mask_value)
        attn_weights = attn_weights / math.sqrt(d)  # scale_attn
        attn_weights = F.softmax(attn_weights, dim=-1)
        attn_output = torch.matmul(attn_weights, value)
        attn_output = attn_output.permute(0, 2, 1, 3).reshape(1, n, h * d)
        return {"output": F.linear(attn_output, T(Wo, dt))[0],
                "attention": attn_weights[0]}
    req = {"x": x, "num_heads": h, "weight_layout": "out_in", "w_q": Wq,
           "w_k": Wk, "w_v": Wv, "w_o": Wo, "mask": "causal",
           "rope": {"dim": rotary_dim, "style": "interleaved"}}
    return "GPT-J", ("GPTJAttention: rotate_every_two (interleaved pairs) on "
                     "the first rotary_dim 4 of head_dim 8, the rest passed "
                     "through; causal"), req, fwd


@case
def gptneox_packed_per_head(G):
    h, d, d_model, n = 2, 16, 32, 7
    rotary_ndims = int(d * 0.25)
    Wqkv = G.linear(3 * d_model, d_model)
    bqkv = G.uniform(3 * d_model, lo=-0.3, hi=0.3)
    Wd = G.linear(d_model, d_model)
    bd = G.uniform(d_model, lo=-0.3, hi=0.3)
    x = G.normal(n, d_model)

    def fwd(dt):
        hs = T(x, dt)[None]
        qkv = F.linear(hs, T(Wqkv, dt), T(bqkv, dt))
        qkv = qkv.view(1, n, h, 3 * d)
        query = qkv[..., :d].permute(0, 2, 1, 3)
        key = qkv[..., d: 2 * d].permute(0, 2, 1, 3)
        value = qkv[..., 2 * d:].permute(0, 2, 1, 3)
        query_rot, query_pass = query[..., :rotary_ndims], \
            query[..., rotary_ndims:]
        key_rot, key_pass = key[..., :rotary_ndims], key[..., rotary_ndims:]
        cos, sin = rotary_cos_sin(default_inv_freq(10000.0, rotary_ndims),
                                  torch.arange(n)[None], 1.0, dt)
        query, key = apply_rotary_pos_emb(query_rot, key_rot, cos, sin)
        query = torch.cat((query, query_pass), dim=-1)
        key = torch.cat((key, key_pass), dim=-1)
        norm_factor = d ** -0.5
        attn_scores = torch.matmul(query, key.transpose(-1, -2)) * norm_factor
        causal_mask = torch.tril(torch.ones(n, n, dtype=torch.bool))
        mask_value = torch.tensor(torch.finfo(dt).min, dtype=dt)
        attn_scores = torch.where(causal_mask, attn_scores, mask_value)
        attn_weights = F.softmax(attn_scores, dim=-1)
        attn_output = torch.matmul(attn_weights, value)
        attn_output = attn_output.permute(0, 2, 1, 3).reshape(1, n, h * d)
        return {"output": F.linear(attn_output, T(Wd, dt), T(bd, dt))[0],
                "attention": attn_weights[0]}
    req = {"x": x, "num_heads": h, "weight_layout": "out_in",
           "w_qkv": Wqkv, "b_qkv": bqkv, "qkv_order": "per_head",
           "w_o": Wd, "b_o": bd, "mask": "causal",
           "rope": {"dim": rotary_ndims}}
    return "GPT-NeoX", ("GPTNeoXAttention: query_key_value viewed [h][3*d] "
                        "(qkv_order per_head, with its bias), rotary_pct "
                        "0.25 (rope.dim 4 of 16, rotate_half), dense with "
                        "bias"), req, fwd


@case
def gpt2_c_attn_in_out(G):
    h, d_model, n, B = 4, 16, 6, 2
    d = d_model // h
    c_attn_w = G.uniform(d_model, 3 * d_model, lo=-0.4, hi=0.4)
    c_attn_b = G.uniform(3 * d_model, lo=-0.2, hi=0.2)
    c_proj_w = G.uniform(d_model, d_model, lo=-0.4, hi=0.4)
    c_proj_b = G.uniform(d_model, lo=-0.2, hi=0.2)
    x = G.normal(B, n, d_model)
    attention_mask = torch.tensor([[1] * n, [1] * (n - 2) + [0] * 2])

    def conv1d(t, w, b, dt):
        size_out = t.size()[:-1] + (w.shape[1],)
        t = torch.addmm(T(b, dt), t.view(-1, t.size(-1)), T(w, dt))
        return t.view(size_out)

    def split_heads(t):
        return t.view(t.size()[:-1] + (h, d)).permute(0, 2, 1, 3)

    def fwd(dt):
        hs = T(x, dt)
        query, key, value = conv1d(hs, c_attn_w, c_attn_b, dt).split(
            d_model, dim=2)
        query, key, value = split_heads(query), split_heads(key), \
            split_heads(value)
        attn_weights = torch.matmul(query, key.transpose(-1, -2))
        attn_weights = attn_weights / torch.full(
            [], value.size(-1) ** 0.5, dtype=dt)
        causal_mask = torch.tril(torch.ones(n, n, dtype=torch.bool))
        mask_value = torch.full([], torch.finfo(dt).min, dtype=dt)
        attn_weights = torch.where(causal_mask, attn_weights, mask_value)
        ext = (1.0 - attention_mask[:, None, None, :].to(dt)) * \
            torch.finfo(dt).min
        attn_weights = attn_weights + ext
        attn_weights = F.softmax(attn_weights, dim=-1)
        attn_output = torch.matmul(attn_weights, value)
        attn_output = attn_output.permute(0, 2, 1, 3).reshape(B, n, d_model)
        return {"output": conv1d(attn_output, c_proj_w, c_proj_b, dt),
                "attention": attn_weights}
    req = {"x": x, "num_heads": h, "w_qkv": c_attn_w, "b_qkv": c_attn_b,
           "w_o": c_proj_w, "b_o": c_proj_b, "mask": "causal",
           "key_padding_mask": (attention_mask == 0).tolist()}
    return "GPT-2", ("GPT2Attention: Conv1D c_attn [in][3*out] (w_qkv in the "
                     "default in_out layout, qkv order) split in q, k, v; "
                     "batch of 2, the second right-padded by 2"), req, fwd


# -- ALiBi: BLOOM, MPT --------------------------------------------------------

def build_alibi_tensor(attention_mask, num_heads, dtype):
    """HF BLOOM build_alibi_tensor (float64 here)."""
    batch_size, seq_length = attention_mask.shape
    closest_power_of_2 = 2 ** math.floor(math.log2(num_heads))
    base = torch.tensor(2 ** (-(2 ** -(math.log2(closest_power_of_2) - 3))),
                        dtype=F64)
    powers = torch.arange(1, 1 + closest_power_of_2, dtype=torch.int32)
    slopes = torch.pow(base, powers)
    if closest_power_of_2 != num_heads:
        extra_base = torch.tensor(
            2 ** (-(2 ** -(math.log2(2 * closest_power_of_2) - 3))),
            dtype=F64)
        num_remaining_heads = min(closest_power_of_2,
                                  num_heads - closest_power_of_2)
        extra_powers = torch.arange(1, 1 + 2 * num_remaining_heads, 2,
                                    dtype=torch.int32)
        slopes = torch.cat([slopes, torch.pow(extra_base, extra_powers)],
                           dim=0)
    arange_tensor = ((attention_mask.cumsum(dim=-1) - 1) *
                     attention_mask)[:, None, :]
    alibi = slopes[..., None] * arange_tensor
    return alibi.reshape(batch_size * num_heads, 1, seq_length).to(dtype)


def bloom_forward(dt, W, h, x, attention_mask):
    """BloomAttention.forward (no cache) over x [B][n][d_model]; returns
    output and attention_probs [B][h][n][n]."""
    B, n, d_model = x.shape
    d = d_model // h
    alibi = build_alibi_tensor(attention_mask, h, dt)
    fused_qkv = F.linear(x, T(W["qkv"], dt), T(W["bqkv"], dt))
    fused_qkv = fused_qkv.view(B, n, h, 3, d)
    query_layer = fused_qkv[..., 0, :].transpose(1, 2).reshape(B * h, n, d)
    key_layer = fused_qkv[..., 1, :].permute(0, 2, 3, 1).reshape(B * h, d, n)
    value_layer = fused_qkv[..., 2, :].transpose(1, 2).reshape(B * h, n, d)
    inv_norm_factor = 1.0 / math.sqrt(d)
    matmul_result = alibi.baddbmm(batch1=query_layer, batch2=key_layer,
                                  beta=1.0, alpha=inv_norm_factor)
    attention_scores = matmul_result.view(B, h, n, n)
    causal = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
    masked = causal[None, None] | (attention_mask == 0)[:, None, None, :]
    attn_weights = torch.masked_fill(attention_scores, masked,
                                     torch.finfo(dt).min)
    attention_probs = F.softmax(attn_weights, dim=-1)
    context_layer = torch.bmm(attention_probs.view(B * h, n, n), value_layer)
    context_layer = context_layer.view(B, h, n, d).permute(0, 2, 1, 3)
    context_layer = context_layer.reshape(B, n, h * d)
    output = F.linear(context_layer, T(W["dense"], dt), T(W["bdense"], dt))
    return output, attention_probs


def bloom_weights(G, d_model):
    return {"qkv": G.linear(3 * d_model, d_model),
            "bqkv": G.uniform(3 * d_model, lo=-0.3, hi=0.3),
            "dense": G.linear(d_model, d_model),
            "bdense": G.uniform(d_model, lo=-0.3, hi=0.3)}


def bloom_request(W, x, h, **extra):
    r = {"x": x, "num_heads": h, "weight_layout": "out_in",
         "w_qkv": W["qkv"], "b_qkv": W["bqkv"], "qkv_order": "per_head",
         "w_o": W["dense"], "b_o": W["bdense"], "mask": "causal",
         "alibi": True}
    r.update(extra)
    return r


@case
def bloom_alibi_h6(G):
    h, d_model, n, B = 6, 12, 8, 2
    W = bloom_weights(G, d_model)
    # large enough q.k that slopes of 1/2 .. 1/256 over 8 keys all matter
    x = G.normal(B, n, d_model, scale=2.0)
    attention_mask = torch.tensor([[1] * n, [1] * (n - 3) + [0] * 3])

    def fwd(dt):
        out, probs = bloom_forward(dt, W, h, T(x, dt), attention_mask)
        return {"output": out, "attention": probs}
    req = bloom_request(W, x, h,
                        key_padding_mask=(attention_mask == 0).tolist())
    return "BLOOM", ("BloomAttention: build_alibi_tensor (slope * key "
                     "position) with h=6 (slopes 2^-2..2^-8 and the extra "
                     "2^-1, 2^-3), query_key_value viewed [h][3][d] "
                     "(per_head) with bias; batch of 2, the second "
                     "right-padded by 3"), req, fwd


@case
def bloom_decode_step(G):
    """The newest token at position m-1 against m keys: the last row of the
    prompt. A service that measured ALiBi distances from query index 0
    instead of positions[0] gets a different row."""
    h, d_model, m = 6, 12, 9
    W = bloom_weights(G, d_model)
    hidden = G.normal(m, d_model, scale=2.0)

    def fwd(dt):
        out, probs = bloom_forward(dt, W, h, T(hidden, dt)[None],
                                   torch.ones(1, m, dtype=torch.int64))
        return {"output": out[0, -1:], "attention": probs[0, :, -1:]}
    req = bloom_request(W, hidden[-1:], h, memory=hidden, positions=[m - 1])
    return "BLOOM", ("decode step with ALiBi: x the newest hidden state, "
                     "memory all 9, positions [8]"), req, fwd


@case
def mpt_alibi_explicit_slopes(G):
    h, d_model, n = 6, 12, 8
    d = d_model // h
    Wqkv = G.linear(3 * d_model, d_model)
    Wo = G.linear(d_model, d_model)
    x = G.normal(n, d_model, scale=2.0)

    def gen_slopes(n_heads, alibi_bias_max=8):
        """MPT gen_slopes: not BLOOM's for a head count that is not a
        power of two (its extra heads interleave)."""
        _n_heads = 2 ** math.ceil(math.log2(n_heads))
        m = torch.arange(1, _n_heads + 1, dtype=F64)
        m = m.mul(alibi_bias_max / _n_heads)
        slopes = 1.0 / torch.pow(2, m)
        if _n_heads != n_heads:
            slopes = torch.concat([slopes[1::2], slopes[::2]])[:n_heads]
        return slopes.view(1, n_heads, 1, 1)

    slopes = gen_slopes(h)
    slopes32 = inp(slopes.flatten().numpy())

    def fwd(dt):
        hs = T(x, dt)[None]
        qkv = F.linear(hs, T(Wqkv, dt))
        query, key, value = qkv.chunk(3, dim=2)
        q = query.view(1, n, h, d).permute(0, 2, 1, 3)
        k = key.view(1, n, h, d).permute(0, 2, 3, 1)
        v = value.view(1, n, h, d).permute(0, 2, 1, 3)
        softmax_scale = 1 / math.sqrt(d)
        attn_weight = q.matmul(k) * softmax_scale
        # build_alibi_bias (not full): key offsets 1-n .. 0 times slope
        alibi_bias = torch.arange(1 - n, 1, dtype=dt).view(1, 1, 1, n)
        alibi_bias = alibi_bias * T(slopes32, dt).view(1, h, 1, 1)
        attn_weight = attn_weight + alibi_bias
        min_val = torch.finfo(dt).min
        causal_mask = torch.ones(n, n, dtype=torch.bool).tril()
        attn_weight = attn_weight.masked_fill(~causal_mask.view(1, 1, n, n),
                                              min_val)
        attn_weight = torch.softmax(attn_weight, dim=-1)
        out = attn_weight.matmul(v)
        out = out.permute(0, 2, 1, 3).reshape(1, n, h * d)
        return {"output": F.linear(out, T(Wo, dt))[0],
                "attention": attn_weight[0]}
    req = {"x": x, "num_heads": h, "weight_layout": "out_in",
           "w_qkv": Wqkv, "w_o": Wo, "mask": "causal",
           "alibi": {"slopes": slopes32}}
    return "MPT", ("MPT: Wqkv chunked in q, k, v (qkv_order qkv), "
                   "gen_slopes for 6 heads passed as alibi.slopes (they "
                   "differ from BLOOM's), causal"), req, fwd


# -- T5 -----------------------------------------------------------------------

def t5_relative_position_bucket(relative_position, bidirectional=True,
                                num_buckets=32, max_distance=128):
    """T5Attention._relative_position_bucket."""
    relative_buckets = 0
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).to(torch.long) * \
            num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position,
                                       torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    relative_position_if_large = max_exact + (
        torch.log(relative_position.float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).to(torch.long)
    relative_position_if_large = torch.min(
        relative_position_if_large,
        torch.full_like(relative_position_if_large, num_buckets - 1))
    relative_buckets += torch.where(is_small, relative_position,
                                    relative_position_if_large)
    return relative_buckets


def t5_compute_bias(table, query_length, key_length, bidirectional,
                    num_buckets, max_distance):
    """T5Attention.compute_bias: [1][h][q][k] of embedding values."""
    context_position = torch.arange(query_length)[:, None]
    memory_position = torch.arange(key_length)[None, :]
    relative_position = memory_position - context_position
    bucket = t5_relative_position_bucket(relative_position, bidirectional,
                                         num_buckets, max_distance)
    values = torch.from_numpy(np.asarray(table, dtype=np.float64))[bucket]
    return values.permute([2, 0, 1]).unsqueeze(0)


def t5_forward(dt, W, h, x, position_bias):
    """T5Attention.forward: no 1/sqrt(d) scaling."""
    B, n, d_model = x.shape
    inner = W["q"].shape[0]
    d = inner // h

    def shape(s):
        return s.view(B, -1, h, d).transpose(1, 2)
    query_states = shape(F.linear(x, T(W["q"], dt)))
    key_states = shape(F.linear(x, T(W["k"], dt)))
    value_states = shape(F.linear(x, T(W["v"], dt)))
    scores = torch.matmul(query_states, key_states.transpose(3, 2))
    scores += position_bias
    attn_weights = F.softmax(scores, dim=-1)
    attn_output = torch.matmul(attn_weights, value_states)
    attn_output = attn_output.transpose(1, 2).contiguous().view(B, -1, inner)
    return F.linear(attn_output, T(W["o"], dt)), attn_weights


def t5_weights(G, d_model, h, d):
    # T5 initialises q with a 1/sqrt(d) smaller scale, since it has no
    # scaling; these sizes keep the scores of order one.
    return {"q": G.linear(h * d, d_model, scale=0.25),
            "k": G.linear(h * d, d_model), "v": G.linear(h * d, d_model),
            "o": G.linear(d_model, h * d)}


@case
def t5_encoder_relative_bias(G):
    h, d, d_model, n = 4, 4, 8, 12
    num_buckets, max_distance = 8, 16
    W = t5_weights(G, d_model, h, d)
    table = G.normal(num_buckets, h)  # relative_attention_bias.weight
    x = G.normal(n, d_model)
    bias = t5_compute_bias(table, n, n, True, num_buckets, max_distance)

    def fwd(dt):
        out, probs = t5_forward(dt, W, h, T(x, dt)[None], bias.to(dt))
        return {"output": out[0], "attention": probs[0]}
    req = {"x": x, "num_heads": h, "weight_layout": "out_in", "w_q": W["q"],
           "w_k": W["k"], "w_v": W["v"], "w_o": W["o"], "scale": 1,
           "attn_bias": inp(bias[0].numpy())}
    return "T5", ("T5Attention (encoder): bidirectional relative position "
                  "buckets (8 buckets, max_distance 16, so the log buckets "
                  "are used) as attn_bias [h][n][m], scale 1"), req, fwd


@case
def t5_decoder_batch_shared_bias(G):
    h, d, d_model, n, B = 4, 4, 8, 7, 2
    num_buckets, max_distance = 8, 16
    W = t5_weights(G, d_model, h, d)
    table = G.normal(num_buckets, h)
    x = G.normal(B, n, d_model)
    bias = t5_compute_bias(table, n, n, False, num_buckets, max_distance)
    attention_mask = torch.tensor([[1] * n, [1] * (n - 2) + [0] * 2])

    def fwd(dt):
        # get_extended_attention_mask for a decoder: causal and padding,
        # (1 - mask) * min, added to the position bias
        causal = torch.tril(torch.ones(n, n))
        ext = causal[None, None] * attention_mask[:, None, None, :]
        ext = (1.0 - ext.to(dt)) * torch.finfo(dt).min
        out, probs = t5_forward(dt, W, h, T(x, dt), bias.to(dt) + ext)
        return {"output": out, "attention": probs}
    req = {"x": x, "num_heads": h, "weight_layout": "out_in", "w_q": W["q"],
           "w_k": W["k"], "w_v": W["v"], "w_o": W["o"], "scale": 1,
           "mask": "causal", "attn_bias": inp(bias.numpy()),
           "key_padding_mask": (attention_mask == 0).tolist()}
    return "T5", ("T5 decoder self-attention: unidirectional buckets, one "
                  "bias for the batch as [1][h][n][m], causal, the second "
                  "sequence right-padded"), req, fwd


@case
def t5_encoder_bias_tensor_object(G):
    got = t5_encoder_relative_bias(G)
    family, about, req, fwd = got
    req = dict(req, attn_bias=tensor_object(req["attn_bias"]))
    return family, ("T5 encoder bias sent as a float32 tensor object "
                    "(base64), like any v1 matrix"), req, fwd


# -- Longformer ---------------------------------------------------------------

@case
def longformer_window_global(G):
    """LongformerSelfAttention's rules: query / sqrt(d) first; each query's
    band of keys i-w..i+w (w = attention_window // 2) minus the global and
    padded keys, with the global keys' scores concatenated in front; the
    global queries' rows come from a full attention (query_global,
    key_global, value_global: here equal to the local projections, as the
    contract's single request defines them). Written per row instead of
    with the sliding-chunk trick; same scores, same softmax."""
    h, d, d_model, n = 2, 8, 16, 14
    attention_window = 4
    w = attention_window // 2
    glob = [0, 9]
    Wq, Wk, Wv = (G.linear(d_model, d_model) for _ in range(3))
    bq, bk, bv = (G.uniform(d_model, lo=-0.3, hi=0.3) for _ in range(3))
    x = G.normal(n, d_model)

    def fwd(dt):
        hs = T(x, dt)
        query_vectors = F.linear(hs, T(Wq, dt), T(bq, dt))
        key_vectors = F.linear(hs, T(Wk, dt), T(bk, dt))
        value_vectors = F.linear(hs, T(Wv, dt), T(bv, dt))
        query_vectors = query_vectors / math.sqrt(d)
        qv = query_vectors.view(n, h, d).transpose(0, 1)
        kv = key_vectors.view(n, h, d).transpose(0, 1)
        vv = value_vectors.view(n, h, d).transpose(0, 1)
        out = torch.zeros(h, n, d, dtype=dt)
        probs_full = torch.zeros(h, n, n, dtype=dt)
        is_global = torch.zeros(n, dtype=torch.bool)
        is_global[glob] = True
        for i in range(n):
            if is_global[i]:
                continue
            band = [j for j in range(i - w, i + w + 1)
                    if 0 <= j < n and not is_global[j]]
            keys = glob + band  # global key scores first, then the band
            scores = qv[:, i:i + 1] @ kv[:, keys].transpose(1, 2)
            p = F.softmax(scores, dim=-1)
            out[:, i] = (p @ vv[:, keys])[:, 0]
            probs_full[:, i, keys] = p[:, 0]
        # global rows: _compute_global_attn_output_from_hidden_states
        global_query = F.linear(hs[glob], T(Wq, dt), T(bq, dt)) / math.sqrt(d)
        gq = global_query.view(len(glob), h, d).transpose(0, 1)
        gs = torch.bmm(gq, kv.transpose(1, 2))
        gp = F.softmax(gs, dim=-1)
        out[:, glob] = torch.bmm(gp, vv)
        probs_full[:, glob] = gp
        attn_output = out.transpose(0, 1).reshape(n, h * d)
        return {"output": attn_output, "attention": probs_full}
    req = {"x": x, "num_heads": h, "weight_layout": "out_in", "w_q": Wq,
           "w_k": Wk, "w_v": Wv, "b_q": bq, "b_k": bk, "b_v": bv,
           "window": {"left": w, "right": w}, "global_tokens": glob}
    return "Longformer", ("attention_window 4 as window {left 2, right 2}, "
                          "global_tokens [0, 9] (queries see all, all see "
                          "them), q/k/v biases, no output projection (the "
                          "self-attention block alone)"), req, fwd


# -- torch.nn.MultiheadAttention ---------------------------------------------

def mha_module(G, E, h, kdim=None, vdim=None):
    """A MultiheadAttention with float32-valued parameters: (module factory
    by dtype, the parameters as numpy inputs)."""
    kdim = kdim or E
    vdim = vdim or E
    P = {"bias": G.uniform(3 * E, lo=-0.3, hi=0.3),
         "out_w": G.linear(E, E), "out_b": G.uniform(E, lo=-0.3, hi=0.3)}
    if kdim == E and vdim == E:
        P["in_w"] = G.linear(3 * E, E)
    else:
        P["q_w"] = G.linear(E, E)
        P["k_w"] = G.linear(E, kdim)
        P["v_w"] = G.linear(E, vdim)

    def make(dt):
        torch.manual_seed(0)
        mod = torch.nn.MultiheadAttention(E, h, kdim=kdim, vdim=vdim,
                                          batch_first=True).to(dt)
        mod.eval()
        with torch.no_grad():
            if "in_w" in P:
                mod.in_proj_weight.copy_(T(P["in_w"], dt))
            else:
                mod.q_proj_weight.copy_(T(P["q_w"], dt))
                mod.k_proj_weight.copy_(T(P["k_w"], dt))
                mod.v_proj_weight.copy_(T(P["v_w"], dt))
            mod.in_proj_bias.copy_(T(P["bias"], dt))
            mod.out_proj.weight.copy_(T(P["out_w"], dt))
            mod.out_proj.bias.copy_(T(P["out_b"], dt))
        return mod
    return make, P


def mha_request(P, x, h, **extra):
    r = {"x": x, "num_heads": h, "weight_layout": "out_in",
         "w_o": P["out_w"], "b_o": P["out_b"]}
    if "in_w" in P:
        r.update(w_qkv=P["in_w"], b_qkv=P["bias"], qkv_order="qkv")
    else:
        E = P["q_w"].shape[0]
        r.update(w_q=P["q_w"], w_k=P["k_w"], w_v=P["v_w"],
                 b_q=P["bias"][:E], b_k=P["bias"][E:2 * E],
                 b_v=P["bias"][2 * E:])
    r.update(extra)
    return r


@case
def torch_mha_mask2d_padding(G):
    E, h, B, n = 16, 4, 2, 6
    make, P = mha_module(G, E, h)
    x = G.normal(B, n, E)
    rng = np.random.default_rng(11)
    attn_mask = rng.random((n, n)) < 0.35
    attn_mask[:, 0] = False  # every row keeps a key (torch gives NaN else)
    kpm = np.zeros((B, n), dtype=bool)
    kpm[1, -2:] = True

    def fwd(dt):
        mod = make(dt)
        xx = T(x, dt)
        out, w = mod(xx, xx, xx, key_padding_mask=torch.from_numpy(kpm),
                     need_weights=True, attn_mask=torch.from_numpy(attn_mask),
                     average_attn_weights=False)
        return {"output": out, "attention": w}
    req = mha_request(P, x, h, attn_mask=attn_mask.tolist(),
                      key_padding_mask=kpm.tolist())
    return "torch.nn.MultiheadAttention", (
        "in_proj_weight/in_proj_bias as w_qkv/b_qkv (qkv), out_proj as "
        "w_o/b_o (out_in); boolean 2-D attn_mask (True hides) and "
        "key_padding_mask, average_attn_weights=False"), req, fwd


@case
def torch_mha_mask3d_cross_mean(G):
    E, h, B, n, m = 16, 4, 2, 5, 7
    make, P = mha_module(G, E, h)
    x = G.normal(B, n, E)
    mem = G.normal(B, m, E)
    rng = np.random.default_rng(12)
    attn_mask = rng.random((B * h, n, m)) < 0.4
    attn_mask[:, :, 3] = False

    def fwd(dt):
        mod = make(dt)
        mm = T(mem, dt)
        out, w = mod(T(x, dt), mm, mm, need_weights=True,
                     attn_mask=torch.from_numpy(attn_mask),
                     average_attn_weights=True)
        return {"output": out, "attention": w}
    req = mha_request(P, x, h, memory=mem,
                      attn_mask=attn_mask.reshape(B, h, n, m).tolist(),
                      return_weights="mean")
    return "torch.nn.MultiheadAttention", (
        "cross-attention with a 3-D attn_mask [B*h][n][m] sent as "
        "[B][h][n][m], average_attn_weights=True as return_weights "
        "mean"), req, fwd


@case
def torch_mha_kdim_vdim_value(G):
    E, h, n, m, kdim, vdim = 16, 2, 5, 6, 12, 8
    make, P = mha_module(G, E, h, kdim=kdim, vdim=vdim)
    q = G.normal(n, E)
    key = G.normal(m, kdim)
    value = G.normal(m, vdim)

    def fwd(dt):
        mod = make(dt)
        # unbatched (2-D) inputs
        out, w = mod(T(q, dt), T(key, dt), T(value, dt), need_weights=True,
                     average_attn_weights=False)
        return {"output": out, "attention": w}
    req = mha_request(P, q, h, memory=key, value=value)
    return "torch.nn.MultiheadAttention", (
        "kdim 12 and vdim 8 != embed_dim 16: q/k/v_proj_weight as w_q/w_k/"
        "w_v (out_in), in_proj_bias split in b_q/b_k/b_v, key as memory and "
        "a separate value; unbatched 2-D inputs"), req, fwd


# -- writing ------------------------------------------------------------------

def fmt_in(v):
    s = str(np.float32(v))
    return s[:-2] if s.endswith(".0") else s


def to_json(obj, expect=False):
    """JSON text: inputs with float32 shortest digits, expected values with
    8 significant digits (1e-8 relative, far inside the tolerance)."""
    if isinstance(obj, In):
        return to_json_nested(np.asarray(obj).tolist(), fmt_in)
    if isinstance(obj, np.ndarray):
        return to_json_nested(obj.tolist(), lambda v: "%.8g" % v)
    if isinstance(obj, dict):
        return "{" + ",".join('"%s":%s' % (k, to_json(v, expect))
                              for k, v in obj.items()) + "}"
    if isinstance(obj, (list, tuple)):
        return "[" + ",".join(to_json(v, expect) for v in obj) + "]"
    if obj is True:
        return "true"
    if obj is False:
        return "false"
    if isinstance(obj, (int, np.integer)):
        return str(int(obj))
    if isinstance(obj, float):
        return fmt_in(obj) if not expect else "%.8g" % obj
    if isinstance(obj, str):
        return json.dumps(obj)
    raise TypeError(type(obj))


def to_json_nested(v, fmt):
    if isinstance(v, list):
        return "[" + ",".join(to_json_nested(e, fmt) for e in v) + "]"
    if isinstance(v, bool):
        return "true" if v else "false"
    return fmt(v)


def write_case(out_dir, name, family, about, req, expect, meta):
    lines = ['{"family": %s,' % to_json(family),
             ' "about": %s,' % to_json(about),
             ' "tol": %g,' % TOL,
             ' "meta": %s,' % to_json(meta),
             ' "request": {']
    items = list(req.items())
    for i, (k, v) in enumerate(items):
        lines.append('  "%s": %s%s' % (k, to_json(v),
                                       "," if i + 1 < len(items) else ""))
    lines.append(' },')
    lines.append(' "expect": {')
    items = list(expect.items())
    for i, (k, v) in enumerate(items):
        lines.append('  "%s": %s%s' % (k, to_json(np.asarray(v), True),
                                       "," if i + 1 < len(items) else ""))
    lines.append(' }}')
    with open(os.path.join(out_dir, name + ".json"), "w") as f:
        f.write("\n".join(lines) + "\n")


def meta_of(req, family):
    """The dimension fields of the answer's meta: from the family's model
    (the request's shapes), written out per packing."""
    x = np.asarray(req["x"]) if not isinstance(req["x"], dict) else None
    B = x.shape[0] if x.ndim == 3 else 1
    n, d_model = x.shape[-2], x.shape[-1]
    mem = np.asarray(req["memory"]) if "memory" in req else x
    m, d_mem = mem.shape[-2], mem.shape[-1]
    h = req.get("num_heads", 1)
    g = req.get("num_kv_heads", h)
    out_in = req.get("weight_layout") == "out_in"
    if "w_qkv" in req:
        outs = np.asarray(req["w_qkv"]).shape[0 if out_in else 1]
        d_k = d_v = outs // (h + 2 * g)
    else:
        wq, wv = np.asarray(req["w_q"]), np.asarray(req["w_v"])
        d_k = (wq.shape[1] if wq.ndim == 3 else wq.shape[0] // h) \
            if out_in else (wq.shape[2] if wq.ndim == 3 else wq.shape[1] // h)
        d_v = (wv.shape[1] if wv.ndim == 3 else wv.shape[0] // g) \
            if out_in else (wv.shape[2] if wv.ndim == 3 else wv.shape[1] // g)
    if "w_o" in req:
        d_out = np.asarray(req["w_o"]).shape[0 if out_in else 1]
    else:
        d_out = h * d_v
    return {"batch": B, "n": n, "m": m, "d_model": d_model, "d_mem": d_mem,
            "num_heads": h, "num_kv_heads": g, "d_k": d_k, "d_v": d_v,
            "d_out": d_out}


def contract_check(path):
    """The written request (read back from JSON) through the contract's
    rules (contract_ref.py): the largest relative difference from the
    written expectation."""
    with open(path) as f:
        fx = json.load(f)
    got = contract_ref.attend(fx["request"])
    assert fx["meta"] == got.pop("meta"), (fx["meta"], path)
    worst = 0.0
    for k, want in fx["expect"].items():
        want = np.asarray(want, dtype=np.float64)
        assert got[k].shape == want.shape, (k, got[k].shape, want.shape)
        worst = max(worst, float((np.abs(got[k] - want) /
                                  (1.0 + np.abs(want))).max()))
    return worst


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "tests/families/cases"
    only = set(sys.argv[2:])
    os.makedirs(out_dir, exist_ok=True)
    torch.set_grad_enabled(False)
    worst = 0.0
    for fn in CASES:
        name = fn.__name__
        if only and name not in only:
            continue
        got = fn(Gen(zlib.crc32(name.encode())))
        family, about, req, fwd = got[:4]
        post = got[4] if len(got) > 4 else None
        ref, used = twice(fwd)
        if post:
            ref = post(ref)
        worst = max(worst, used)
        if used > F32_BUDGET:
            sys.exit("%s: a float32 run uses %.2f of the tolerance (more "
                     "than %.2f): make the case better conditioned" %
                     (name, used, F32_BUDGET))
        write_case(out_dir, name, family, about, req, ref,
                   meta_of(req, family))
        path = os.path.join(out_dir, name + ".json")
        agree = contract_check(path)
        if agree > 1e-7:
            sys.exit("%s: the contract's rules applied to the request differ "
                     "from the family's answer by %.3g: the request does "
                     "not say what the model computes" % (name, agree))
        size = os.path.getsize(path)
        print("%-36s %-28s %6d bytes  float32 run %.3f of tol" %
              (name, family[:28], size, used))
    if not only:
        # a case taken out of CASES leaves no stale file behind
        for f in sorted(os.listdir(out_dir)):
            if f.endswith(".json") and f[:-5] not in {c.__name__
                                                      for c in CASES}:
                os.remove(os.path.join(out_dir, f))
                print("removed %s" % f)
    print("%d cases, worst float32 run %.3f of the tolerance" % (
        len(CASES) if not only else len(only), worst))


if __name__ == "__main__":
    main()
