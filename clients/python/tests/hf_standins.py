"""hf_standins.py: small torch models built like Hugging Face's, for attnd.hf.

The attribute names are those of transformers' modeling code (LlamaAttention,
BertAttention, GPT2Attention), the math is written out here in plain torch:
attnd.hf must translate them without transformers installed. Each model
records what its attention modules return in .outputs (for BERT, what
output.dense returns, the part attnd computes).
"""
import math
from types import SimpleNamespace

import torch
from torch import nn


def rotate_half(x):
    x1, x2 = x[..., :x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class RotaryEmbedding(nn.Module):
    def __init__(self, dim, base=10000.0, scaling=1.0):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (base ** (
            torch.arange(0, dim, 2).float() / dim)), persistent=False)
        self.attention_scaling = scaling

    def forward(self, position_ids):
        freqs = position_ids[..., None].float() * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * self.attention_scaling,
                emb.sin() * self.attention_scaling)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(1 + 0.2 * torch.randn(dim))
        self.variance_epsilon = eps

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(var + self.variance_epsilon) * self.weight


class LlamaAttention(nn.Module):
    """q_proj/k_proj/v_proj/o_proj, grouped-query heads, RoPE on the first
    rotary_dim entries of each head (the rest pass through), causal; with
    qk_norm, Qwen3's per-head q_norm/k_norm before RoPE; with
    sliding_window W, Mistral's window (a query sees its W latest keys)."""

    def __init__(self, config, layer_idx, rotary_dim=None, bias=False,
                 qk_norm=False, sliding_window=None):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.head_dim = config.head_dim
        h, g, E = (config.num_attention_heads, config.num_key_value_heads,
                   config.hidden_size)
        self.q_proj = nn.Linear(E, h * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(E, g * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(E, g * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(h * self.head_dim, E, bias=False)
        self.rotary_dim = rotary_dim or self.head_dim
        self.rotary_emb = RotaryEmbedding(self.rotary_dim,
                                          scaling=config.rope_scaling)
        self.scaling = self.head_dim ** -0.5
        if qk_norm:
            self.q_norm = RMSNorm(self.head_dim, eps=1e-5)
            self.k_norm = RMSNorm(self.head_dim, eps=1e-5)
        self.sliding_window = sliding_window

    def forward(self, hidden_states, position_ids=None, attention_mask=None):
        B, n, _ = hidden_states.shape
        cfg = self.config
        h, g, d = cfg.num_attention_heads, cfg.num_key_value_heads, \
            self.head_dim
        q = self.q_proj(hidden_states).view(B, n, h, d).transpose(1, 2)
        k = self.k_proj(hidden_states).view(B, n, g, d).transpose(1, 2)
        v = self.v_proj(hidden_states).view(B, n, g, d).transpose(1, 2)
        if hasattr(self, "q_norm"):
            q, k = self.q_norm(q), self.k_norm(k)
        cos, sin = self.rotary_emb(position_ids)
        cos, sin = cos[:, None], sin[:, None]
        r = self.rotary_dim
        q = torch.cat((q[..., :r] * cos + rotate_half(q[..., :r]) * sin,
                       q[..., r:]), -1)
        k = torch.cat((k[..., :r] * cos + rotate_half(k[..., :r]) * sin,
                       k[..., r:]), -1)
        k = k.repeat_interleave(h // g, dim=1)
        v = v.repeat_interleave(h // g, dim=1)
        s = q @ k.transpose(-1, -2) * self.scaling
        hide = torch.ones(n, n, dtype=torch.bool).triu(1)
        if self.sliding_window:
            hide = hide | torch.ones(n, n, dtype=torch.bool).tril(
                -self.sliding_window)
        if attention_mask is not None:
            hide = hide | (attention_mask == 0)[:, None, None, :]
        s = s.masked_fill(hide, float("-inf"))
        o = torch.softmax(s, -1) @ v
        return self.o_proj(o.transpose(1, 2).reshape(B, n, h * d)), None


class TinyLlama(nn.Module):
    def __init__(self, vocab=50, hidden=16, heads=4, kv_heads=2, layers=2,
                 rotary_dim=None, bias=False, rope_scaling=1.0,
                 qk_norm=False, sliding_window=None):
        super().__init__()
        self.config = SimpleNamespace(
            hidden_size=hidden, num_attention_heads=heads,
            num_key_value_heads=kv_heads, head_dim=hidden // heads,
            rope_scaling=rope_scaling)
        self.embed_tokens = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList()
        for i in range(layers):
            block = nn.Module()
            block.input_layernorm = nn.LayerNorm(hidden)
            block.self_attn = LlamaAttention(self.config, i, rotary_dim,
                                             bias, qk_norm, sliding_window)
            block.mlp = nn.Linear(hidden, hidden)
            self.layers.append(block)
        self.outputs = []

    def forward(self, input_ids, attention_mask=None):
        self.outputs = []
        x = self.embed_tokens(input_ids)
        pos = torch.arange(input_ids.shape[1])[None]
        for block in self.layers:
            a, _ = block.self_attn(
                hidden_states=block.input_layernorm(x), position_ids=pos,
                attention_mask=attention_mask)
            self.outputs.append(a)
            x = x + a
            x = x + torch.tanh(block.mlp(x))
        return x


class BertSelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.num_attention_heads = heads
        self.attention_head_size = hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)

    def forward(self, hidden_states, attention_mask=None):
        B, n, E = hidden_states.shape
        h, d = self.num_attention_heads, self.attention_head_size

        def heads(t):
            return t.view(B, n, h, d).transpose(1, 2)
        q, k, v = (heads(self.query(hidden_states)),
                   heads(self.key(hidden_states)),
                   heads(self.value(hidden_states)))
        s = q @ k.transpose(-1, -2) / math.sqrt(d)
        if attention_mask is not None:
            s = s.masked_fill((attention_mask == 0)[:, None, None, :],
                              float("-inf"))
        return (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(B, n, E)


class BertSelfOutput(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        self.LayerNorm = nn.LayerNorm(hidden)

    def forward(self, ctx, residual):
        return self.LayerNorm(self.dense(ctx) + residual)


class BertAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.self = BertSelfAttention(hidden, heads)
        self.output = BertSelfOutput(hidden)

    def forward(self, hidden_states, attention_mask=None):
        return self.output(self.self(hidden_states, attention_mask),
                           hidden_states)


class TinyBert(nn.Module):
    def __init__(self, vocab=50, hidden=12, heads=3, layers=2):
        super().__init__()
        self.config = SimpleNamespace(hidden_size=hidden,
                                      num_attention_heads=heads)
        self.embeddings = nn.Embedding(vocab, hidden)
        self.layer = nn.ModuleList()
        for _ in range(layers):
            block = nn.Module()
            block.attention = BertAttention(hidden, heads)
            block.intermediate = nn.Linear(hidden, hidden)
            self.layer.append(block)
        self.outputs = []

    def forward(self, input_ids, attention_mask=None):
        self.outputs = []
        hooks = [b.attention.output.dense.register_forward_hook(
            lambda m, i, o: self.outputs.append(o)) for b in self.layer]
        x = self.embeddings(input_ids)
        for block in self.layer:
            x = block.attention(x, attention_mask)
            x = x + torch.tanh(block.intermediate(x))
        for hk in hooks:
            hk.remove()
        return x


class Conv1D(nn.Module):
    """GPT-2's projection: weight [in][out], y = x W + b."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.2)
        self.bias = nn.Parameter(torch.randn(nf) * 0.1)

    def forward(self, x):
        return x @ self.weight + self.bias


class GPT2Attention(nn.Module):
    def __init__(self, hidden, heads, layer_idx, by_layer=False):
        super().__init__()
        self.embed_dim = hidden
        self.num_heads = heads
        self.head_dim = hidden // heads
        self.split_size = hidden
        self.scale_attn_weights = True
        self.scale_attn_by_inverse_layer_idx = by_layer
        self.layer_idx = layer_idx
        self.is_cross_attention = False
        self.c_attn = Conv1D(3 * hidden, hidden)
        self.c_proj = Conv1D(hidden, hidden)

    def forward(self, hidden_states, attention_mask=None):
        B, n, E = hidden_states.shape
        h, d = self.num_heads, self.head_dim
        q, k, v = self.c_attn(hidden_states).split(self.split_size, dim=2)
        q, k, v = (t.view(B, n, h, d).transpose(1, 2) for t in (q, k, v))
        s = q @ k.transpose(-1, -2)
        if self.scale_attn_weights:
            s = s / math.sqrt(d)
        if self.scale_attn_by_inverse_layer_idx:
            s = s / float(self.layer_idx + 1)
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1),
                          float("-inf"))
        o = (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(B, n, E)
        return self.c_proj(o), None


class TinyGPT2(nn.Module):
    def __init__(self, vocab=50, hidden=12, heads=3, layers=3,
                 by_layer=False):
        super().__init__()
        self.config = SimpleNamespace(n_head=heads, hidden_size=hidden)
        self.wte = nn.Embedding(vocab, hidden)
        self.h = nn.ModuleList()
        for i in range(layers):
            block = nn.Module()
            block.ln_1 = nn.LayerNorm(hidden)
            block.attn = GPT2Attention(hidden, heads, i, by_layer)
            self.h.append(block)
        self.outputs = []

    def forward(self, input_ids):
        self.outputs = []
        x = self.wte(input_ids)
        for block in self.h:
            a, _ = block.attn(block.ln_1(x))
            self.outputs.append(a)
            x = x + a
        return x


class BartAttention(nn.Module):
    """BART's attention: q/k/v/out_proj with biases, the query scaled
    after its bias, is_causal set per use (encoder and cross-attention
    False), keys and values from key_value_states in cross-attention."""

    def __init__(self, hidden, heads, is_causal=False):
        super().__init__()
        self.num_heads = heads
        self.head_dim = hidden // heads
        self.scaling = self.head_dim ** -0.5
        self.is_causal = is_causal
        self.k_proj = nn.Linear(hidden, hidden)
        self.v_proj = nn.Linear(hidden, hidden)
        self.q_proj = nn.Linear(hidden, hidden)
        self.out_proj = nn.Linear(hidden, hidden)

    def forward(self, hidden_states, key_value_states=None):
        B, n, E = hidden_states.shape
        src = hidden_states if key_value_states is None else \
            key_value_states
        h, d, m = self.num_heads, self.head_dim, src.shape[1]
        q = (self.q_proj(hidden_states) * self.scaling).view(
            B, n, h, d).transpose(1, 2)
        k = self.k_proj(src).view(B, m, h, d).transpose(1, 2)
        v = self.v_proj(src).view(B, m, h, d).transpose(1, 2)
        s = q @ k.transpose(-1, -2)
        if self.is_causal:
            s = s.masked_fill(torch.ones(n, m, dtype=torch.bool).triu(1),
                              float("-inf"))
        o = (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(B, n, E)
        return self.out_proj(o), None, None


class TinyBart(nn.Module):
    """One encoder self-attention, one decoder self-attention (causal) and
    one cross-attention, in that order."""

    def __init__(self, vocab=50, hidden=16, heads=4):
        super().__init__()
        self.config = SimpleNamespace(d_model=hidden)
        self.embed = nn.Embedding(vocab, hidden)
        self.encoder_attn_self = BartAttention(hidden, heads)
        self.self_attn = BartAttention(hidden, heads, is_causal=True)
        self.encoder_attn = BartAttention(hidden, heads)
        self.outputs = []

    def forward(self, input_ids, decoder_input_ids):
        self.outputs = []
        e = self.embed(input_ids)
        a = self.encoder_attn_self(e)[0]
        self.outputs.append(a)
        e = e + a
        x = self.embed(decoder_input_ids)
        a = self.self_attn(hidden_states=x)[0]
        self.outputs.append(a)
        x = x + a
        a = self.encoder_attn(hidden_states=x, key_value_states=e)[0]
        self.outputs.append(a)
        return x + a
