"""test_mha.py: Client.mha against torch.nn.MultiheadAttention's forward.

For every combination of batch layout (batch_first either way, unbatched),
key/value source (self-attention, cross-attention, separate key and value,
kdim/vdim), bias, and mask (none, boolean and float key_padding_mask,
boolean and float attn_mask in 2-D and 3-D [B*h][n][m], mixes), the
module's own (attn_output, attn_weights) and Client.mha's agree within
1e-4 * (1 + |module's value|); the weights mode cycles through "mean",
"per_head" and None. Rows where PyTorch gives NaN (every key hidden) are
never drawn.
"""
import itertools

import numpy as np

import pytest
import torch

from reference import close

E, H, N, M, B = 8, 2, 5, 7, 3
KDIM, VDIM = 6, 10

DIMS = ["self", "cross", "kv", "kdim", "kvdim"]
MASKS = ["none", "kpm_bool", "kpm_float", "attn_bool2d", "attn_bool3d",
         "attn_float2d", "attn_float3d", "attn_bool2d+kpm_float",
         "attn_float3d+kpm_bool"]
COMBOS = list(itertools.product([False, True], [True, False], DIMS,
                                [True, False], MASKS))


def _module(dims, bias, batch_first, seed):
    torch.manual_seed(seed)
    kw = {}
    if dims == "kdim":
        kw = {"kdim": KDIM, "vdim": KDIM}
    elif dims == "kvdim":
        kw = {"kdim": KDIM, "vdim": VDIM}
    mod = torch.nn.MultiheadAttention(E, H, bias=bias,
                                      batch_first=batch_first, **kw)
    with torch.no_grad():  # biases are zero at init: make them count
        for p in mod.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return mod.eval()


def _inputs(dims, batched, batch_first, g):
    def seq(length, width):
        shape = (length, width)
        if batched:
            shape = (B, length, width) if batch_first else (length, B, width)
        return torch.randn(shape, generator=g)
    q = seq(N, E)
    if dims == "self":
        return q, q, q, N
    if dims == "cross":
        k = seq(M, E)
        return q, k, k, M
    if dims == "kv":
        return q, seq(M, E), seq(M, E), M
    if dims == "kdim":
        k = seq(M, KDIM)
        return q, k, k, M
    return q, seq(M, KDIM), seq(M, VDIM), M


def _masks(kind, batched, m, g):
    """(key_padding_mask, attn_mask) for this kind; key 0 is never hidden,
    so no row is all hidden."""
    b = B if batched else 1
    kpm = attn = None
    if "kpm" in kind:
        hide = torch.zeros(b, m, dtype=torch.bool)
        hide[:, -1] = True
        hide[0, -2] = True
        if not batched:
            hide = hide[0]
        if kind.endswith("kpm_float"):
            kpm = torch.zeros(hide.shape).masked_fill(hide, float("-inf"))
        else:
            kpm = hide
    if "attn" in kind:
        shape = (N, m) if "2d" in kind else (b * H, N, m)
        hide = torch.rand(shape, generator=g) < 0.3
        hide[..., 0] = False
        if "bool" in kind:
            attn = hide
        else:
            attn = torch.randn(shape, generator=g).masked_fill(
                hide, float("-inf"))
    return kpm, attn


def _forward(mod, *args, **kw):
    """The module's own answer, through its general (Python) path: under
    no_grad torch 1.13 takes a fused fast path that fails on bias=False
    (_native_multi_head_attention wants a qkv_bias tensor)."""
    with torch.enable_grad():
        o, w = mod(*args, **kw)
    return o.detach(), (None if w is None else w.detach())


def _id(c):
    return "%s-%s-%s-%s-%s" % ("bf" if c[0] else "sf",
                               "batched" if c[1] else "unbatched", c[2],
                               "bias" if c[3] else "nobias", c[4])


@pytest.mark.parametrize("combo", COMBOS, ids=[_id(c) for c in COMBOS])
def test_mha_matches_module(client, combo):
    batch_first, batched, dims, bias, mask = combo
    i = COMBOS.index(combo)
    g = torch.Generator().manual_seed(i)
    mod = _module(dims, bias, batch_first, i)
    q, k, v, m = _inputs(dims, batched, batch_first, g)
    kpm, attn = _masks(mask, batched, m, g)
    need, avg = [(True, True), (True, False), (False, True)][i % 3]
    want_o, want_w = _forward(mod, q, k, v, key_padding_mask=kpm,
                              need_weights=need, attn_mask=attn,
                              average_attn_weights=avg)
    got_o, got_w = client.mha(mod, q, k, v, key_padding_mask=kpm,
                              need_weights=need, attn_mask=attn,
                              average_attn_weights=avg)
    assert isinstance(got_o, torch.Tensor)
    assert got_o.dtype == want_o.dtype and got_o.shape == want_o.shape
    close(got_o.numpy(), want_o.numpy())
    if want_w is None:
        assert got_w is None
    else:
        assert got_w.dtype == want_w.dtype and got_w.shape == want_w.shape
        close(got_w.numpy(), want_w.numpy())


@pytest.mark.parametrize("batched,dims", [(True, "self"), (False, "self"),
                                          (True, "cross"), (False, "kv")])
def test_is_causal_is_the_causal_mask(client, batched, dims):
    """torch 1.13's forward has no is_causal: Client.mha's is_causal=True
    must equal the module given an explicit causal attn_mask."""
    g = torch.Generator().manual_seed(7)
    mod = _module(dims, True, True, 7)
    q, k, v, m = _inputs(dims, batched, True, g)
    causal = torch.ones(N, m, dtype=torch.bool).triu(1)
    want_o, want_w = _forward(mod, q, k, v, attn_mask=causal,
                              average_attn_weights=False)
    got_o, got_w = client.mha(mod, q, k, v, is_causal=True,
                              average_attn_weights=False)
    close(got_o.numpy(), want_o.numpy())
    close(got_w.numpy(), want_w.numpy())


def test_float64_module_gets_float64(client):
    mod = _module("self", True, False, 3).double()
    q = torch.randn(4, 2, E, dtype=torch.float64)
    want_o, want_w = _forward(mod, q, q, q)
    got_o, got_w = client.mha(mod, q, q, q)
    assert got_o.dtype == torch.float64 and got_w.dtype == torch.float64
    close(got_o.numpy(), want_o.numpy())
    close(got_w.numpy(), want_w.numpy())


def test_dropout_in_eval_mode_is_fine(client):
    torch.manual_seed(0)
    mod = torch.nn.MultiheadAttention(E, H, dropout=0.5).eval()
    q = torch.randn(N, E)
    want_o, _ = _forward(mod, q, q, q)
    close(client.mha(mod, q, q, q)[0].numpy(), want_o.numpy())


@pytest.mark.parametrize("kw,train,what", [
    ({"add_bias_kv": True}, False, "add_bias_kv"),
    ({"add_zero_attn": True}, False, "add_zero_attn"),
    ({"dropout": 0.1}, True, "dropout"),
])
def test_what_cannot_be_expressed_raises(client, kw, train, what):
    mod = torch.nn.MultiheadAttention(E, H, **kw).train(train)
    q = torch.randn(N, E)
    before = client.bytes_sent
    with pytest.raises(ValueError, match=what):
        client.mha(mod, q, q, q)
    assert client.bytes_sent == before  # refused before sending


def test_nan_in_a_float_mask_raises(client):
    mod = _module("self", True, False, 1)
    q = torch.randn(N, E)
    attn = torch.zeros(N, N)
    attn[1, 2] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        client.mha(mod, q, q, q, attn_mask=attn)


@pytest.mark.parametrize("hide_one", [False, True])
def test_key_padding_mask_of_another_shape_raises(client, hide_one):
    # all false or not, as PyTorch refuses it: one key short of m
    mod = _module("self", True, True, 1)
    q = torch.randn(2, N, E)
    kpm = torch.zeros(2, N - 1, dtype=torch.bool)
    kpm[0, 0] = hide_one
    before = client.bytes_sent
    with pytest.raises(ValueError, match="key_padding_mask has shape"):
        client.mha(mod, q, q, q, key_padding_mask=kpm)
    assert client.bytes_sent == before


def test_float_masks_that_sum_to_minus_infinity_hide_the_key(client):
    """A float attn_mask and a float key_padding_mask are added, as
    PyTorch 2 does (1.13 refuses the pair); two finite large negatives
    (finfo.min, Hugging Face's habit) sum to -inf in float32, a hidden key
    there, not an attn_bias the server refuses as infinite. The module
    gets the summed mask, [B*h][n][m]."""
    mod = _module("self", True, True, 1)
    q = torch.randn(2, N, E)
    lo = torch.finfo(torch.float32).min
    attn = torch.randn(N, N)
    attn[:, -1] = lo
    attn[0, 1] = lo
    kpm = torch.zeros(2, N)
    kpm[:, -1] = lo
    kpm[1, 1] = lo
    total = (attn[None] + kpm[:, None, :]).repeat_interleave(H, dim=0)
    assert torch.isinf(total).any()
    want_o, want_w = _forward(mod, q, q, q, attn_mask=total)
    got_o, got_w = client.mha(mod, q, q, q, attn_mask=attn,
                              key_padding_mask=kpm)
    close(got_o.numpy(), want_o.numpy())
    close(got_w.numpy(), want_w.numpy())


@pytest.mark.parametrize("shape,dtype,hide_one", [
    ((N, N - 1), torch.bool, False),     # all false: never sent
    ((N, N - 1), torch.float32, False),  # all zero: never sent
    ((N, N + 1), torch.bool, True),
    ((H, N, N), torch.bool, True),       # per head, but batched: B*h first
    ((N,), torch.bool, False),
    ((2, H, N, N), torch.bool, True),    # the wire's 4-D form, not PyTorch's
])
def test_attn_mask_of_another_shape_raises(client, shape, dtype, hide_one):
    """PyTorch refuses each of these shapes; so does Client.mha, before
    sending, instead of leaving out a mask that hides nothing, failing in
    a reshape, or sending a shape only the wire takes."""
    mod = _module("self", True, True, 1)
    q = torch.randn(2, N, E)
    attn = torch.zeros(shape, dtype=dtype)
    attn.view(-1)[0] = hide_one
    with pytest.raises((RuntimeError, AssertionError)):
        _forward(mod, q, q, q, attn_mask=attn)
    before = client.bytes_sent
    with pytest.raises(ValueError, match="attn_mask has shape"):
        client.mha(mod, q, q, q, attn_mask=attn)
    assert client.bytes_sent == before


@pytest.mark.parametrize("combo", COMBOS, ids=[_id(c) for c in COMBOS])
def test_mha_request_through_reference(combo):
    """The translation alone, without a server: mha_request's fields given
    to the float64 reference give the module's answer. This holds the
    request (and the reference the v2 tests use) to PyTorch whatever the
    server implements."""
    import attnd
    from reference import attend_ref

    batch_first, batched, dims, bias, mask = combo
    i = COMBOS.index(combo)
    g = torch.Generator().manual_seed(i)
    mod = _module(dims, bias, batch_first, i)
    q, k, v, m = _inputs(dims, batched, batch_first, g)
    kpm, attn = _masks(mask, batched, m, g)
    want_o, want_w = _forward(mod, q, k, v, key_padding_mask=kpm,
                              attn_mask=attn, average_attn_weights=False)
    req, _ = attnd.mha_request(mod, q, k, v, key_padding_mask=kpm,
                               attn_mask=attn, average_attn_weights=False)
    got = attend_ref(**{k_: v_ for k_, v_ in req.items()
                        if k_ not in ("return_weights",)})
    out = got["output"]
    if batched and not batch_first:
        out = out.transpose(1, 0, 2)
    close(out, want_o.numpy())
    close(got["attention"], want_w.numpy())


def test_mha_numpy_inputs_are_a_type_error(client):
    m = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()
    q = np.zeros((1, 3, 8), np.float32)
    with pytest.raises(TypeError, match="Client.mha takes torch tensors"):
        client.mha(m, q, q, q)
