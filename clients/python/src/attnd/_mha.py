"""_mha.py: torch.nn.MultiheadAttention.forward as an attnd request.

mha_request turns a module and the arguments of its forward into /attend
fields, and a function that turns the answer back into the module's
``(attn_output, attn_weights)``. What the request cannot express raises
ValueError before anything is sent, so the answer is the module's or none.

The translation:

- Weights: ``in_proj_weight`` (or ``q_proj_weight``, ``k_proj_weight``,
  ``v_proj_weight`` when ``kdim``/``vdim`` differ from ``embed_dim``) and
  ``out_proj.weight`` are ``nn.Linear`` weights, ``[out][in]``; they are sent
  transposed (``w_q = W_q^T``, the contract's default ``in_out`` layout, so
  the request is a v1 request whenever the call needs nothing newer).
  ``in_proj_bias`` splits into ``b_q``, ``b_k``, ``b_v``; ``out_proj.bias``
  is ``b_o``. Head ``i`` owns rows ``i*d_k .. (i+1)*d_k-1`` of each
  projection in PyTorch and the same columns of the transposed weight here.
- Inputs: ``query`` is ``x``; ``key`` is ``memory`` unless it is the query
  itself (self-attention); ``value`` goes as the v2 field ``value`` only when
  it differs from ``key`` (``vdim != kdim``, or other tensors). Sequence-first
  inputs (``batch_first=False``) are transposed to ``[B][n][d]`` and the
  output back; unbatched inputs stay 2-D.
- Masks: a boolean ``key_padding_mask`` (true = padded) is the field of that
  name. A boolean ``attn_mask`` is ``attn_mask`` (true = hidden), a 3-D one
  ``[B*h][n][m]`` reshaped to ``[B][h][n][m]``. A float mask (PyTorch adds
  it to the scores) splits in two, since ``attn_bias`` must be finite: its
  ``-inf`` entries hide keys (``attn_mask``, or ``key_padding_mask``), its
  finite entries are ``attn_bias`` (left out when all zero).
  ``is_causal=True`` is ``mask: "causal"``.
- Weights returned: ``need_weights=False`` asks ``return_weights: "none"``,
  ``average_attn_weights`` "mean", otherwise "per_head"; the shapes are the
  module's (``[B][n][m]`` or ``[B][h][n][m]``, without ``B`` unbatched).

One difference remains by design: a query whose every key is hidden gets
zero weights and a zero head output from attnd, NaN from PyTorch.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np
from numpy.typing import NDArray

from . import _wire


def _same(a: Any, b: Any) -> bool:
    """a and b are the same tensor, or equal in shape, dtype and values."""
    if a is b:
        return True
    import torch
    return (tuple(a.shape) == tuple(b.shape) and a.dtype == b.dtype
            and a.device == b.device and bool(torch.equal(a, b)))


def _split_float_mask(m: NDArray[Any], name: str
                      ) -> Tuple[NDArray[Any], Optional[NDArray[Any]]]:
    """A PyTorch additive mask as (hidden: bool, bias: float32 or None):
    -inf entries hide the key, the finite rest is the bias (None when it
    is all zero)."""
    if np.any(np.isnan(m)) or np.any(np.isposinf(m)):
        raise ValueError("%s holds NaN or +inf: no attention can follow "
                         "from it" % name)
    hidden = np.isneginf(m)
    bias = np.where(hidden, np.float32(0), m).astype(np.float32)
    return hidden, (bias if np.any(bias != 0) else None)


def _mask_array(mask: Any, name: str
                ) -> Tuple[NDArray[Any], Optional[NDArray[Any]]]:
    """(hidden, bias) of a boolean, byte or float PyTorch mask."""
    a = _wire.to_numpy(mask)
    if a.dtype.kind == "f":
        return _split_float_mask(a.astype(np.float32), name)
    if a.dtype.kind in "bui":
        return a.astype(bool), None
    raise ValueError("%s: masks are bool or float tensors, not %s"
                     % (name, a.dtype))


def _weights(module: Any) -> Dict[str, NDArray[Any]]:
    """The module's projections in the in_out layout, with their biases."""
    E = module.embed_dim
    if getattr(module, "_qkv_same_embed_dim", True) and \
            getattr(module, "in_proj_weight", None) is not None:
        w = _wire.as_float32(module.in_proj_weight)
        wq, wk, wv = w[:E], w[E:2 * E], w[2 * E:]
    else:
        wq = _wire.as_float32(module.q_proj_weight)
        wk = _wire.as_float32(module.k_proj_weight)
        wv = _wire.as_float32(module.v_proj_weight)
    out = {"w_q": np.ascontiguousarray(wq.T),
           "w_k": np.ascontiguousarray(wk.T),
           "w_v": np.ascontiguousarray(wv.T),
           "w_o": np.ascontiguousarray(
               _wire.as_float32(module.out_proj.weight).T)}
    if getattr(module, "in_proj_bias", None) is not None:
        b = _wire.as_float32(module.in_proj_bias)
        out["b_q"], out["b_k"], out["b_v"] = b[:E], b[E:2 * E], b[2 * E:]
    if getattr(module.out_proj, "bias", None) is not None:
        out["b_o"] = _wire.as_float32(module.out_proj.bias)
    return out


def mha_request(module: Any, query: Any, key: Any, value: Any,
                key_padding_mask: Any = None, need_weights: bool = True,
                attn_mask: Any = None, average_attn_weights: bool = True,
                is_causal: bool = False
                ) -> Tuple[Dict[str, Any], Callable[[Any], Any]]:
    """The /attend fields of ``module(query, key, value, ...)`` and the
    function that turns the Result into ``(attn_output, attn_weights)``.

    ``module``: a ``torch.nn.MultiheadAttention`` (or anything with its
    attributes). Raises ValueError for ``add_bias_kv``, ``add_zero_attn``,
    dropout > 0 in training mode, and masks holding NaN or +inf, and
    TypeError for inputs that are not torch tensors."""
    import torch

    if getattr(module, "bias_k", None) is not None or \
            getattr(module, "bias_v", None) is not None:
        raise ValueError("MultiheadAttention(add_bias_kv=True) is not "
                         "supported: attnd has no learned extra key/value")
    if getattr(module, "add_zero_attn", False):
        raise ValueError("MultiheadAttention(add_zero_attn=True) is not "
                         "supported: attnd has no zero key/value row")
    if module.training and float(getattr(module, "dropout", 0.0)) > 0:
        raise ValueError(
            "MultiheadAttention with dropout=%g in training mode drops "
            "random weights; attnd computes the deterministic attention: "
            "call module.eval() first" % module.dropout)

    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor):
            raise TypeError("%s is a %s; Client.mha takes torch tensors, as "
                            "the module does (Client.attend takes NumPy "
                            "arrays)" % (name, type(t).__name__))
    h = int(module.num_heads)
    batch_first = bool(getattr(module, "batch_first", False))
    batched = query.dim() == 3
    if query.dim() not in (2, 3) or key.dim() != query.dim() or \
            value.dim() != query.dim():
        raise ValueError("query, key and value must all be 2-D (unbatched) "
                         "or all 3-D; got %d, %d, %d dimensions"
                         % (query.dim(), key.dim(), value.dim()))
    self_attention = _same(key, query)
    value_is_key = _same(value, key)

    def rows(t: Any) -> NDArray[Any]:
        a = _wire.as_float32(t)
        if batched and not batch_first:
            a = np.ascontiguousarray(a.transpose(1, 0, 2))
        return a

    req: Dict[str, Any] = {"x": rows(query), "num_heads": h}
    if not self_attention:
        req["memory"] = rows(key)
    if not value_is_key:
        req["value"] = rows(value)
    req.update(_weights(module))
    B = req["x"].shape[0] if batched else 1
    n = req["x"].shape[-2]
    m = req.get("memory", req["x"]).shape[-2]

    hidden_kpm = bias_kpm = None
    if key_padding_mask is not None:
        hidden_kpm, bias_kpm = _mask_array(key_padding_mask,
                                           "key_padding_mask")
        # checked here, as PyTorch does, since an all-false mask is not
        # sent and the server could not refuse its shape
        want = (B, m) if batched else (m,)
        if hidden_kpm.shape != want:
            raise ValueError("key_padding_mask has shape %s; expected %s "
                             "(batch, source length)"
                             % (tuple(hidden_kpm.shape), want))
        if hidden_kpm.any():
            req["key_padding_mask"] = hidden_kpm

    bias = None
    if attn_mask is not None:
        hidden, bias = _mask_array(attn_mask, "attn_mask")
        # checked here, as PyTorch does: a mask that hides nothing is not
        # sent, so the server could not refuse its shape, and a 3-D one is
        # reshaped before it would see it
        allowed = [(n, m), (B * h, n, m) if batched else (h, n, m)]
        if hidden.shape not in allowed:
            raise ValueError("attn_mask has shape %s; expected %s or %s "
                             "(target length, source length; %s first "
                             "for one per head)"
                             % (tuple(hidden.shape), allowed[0], allowed[1],
                                "batch * num_heads" if batched
                                else "num_heads"))
        if hidden.ndim == 3:
            # PyTorch's [B*h][n][m] is [B][h][n][m] on the wire; unbatched
            # it is [h][n][m].
            shape = (B, h, n, m) if batched else (h, n, m)
            hidden = hidden.reshape(shape)
            bias = None if bias is None else bias.reshape(shape)
        if hidden.any():
            req["attn_mask"] = hidden

    if bias_kpm is not None:
        # A finite float key_padding_mask adds to every query's row: its
        # [B][m] (or [m]) broadcast over queries, and over heads when the
        # attn_mask bias has them.
        full: Tuple[int, ...]
        if batched:
            kb, full = bias_kpm[:, None, :], (B, n, m)
            if bias is not None and bias.ndim == 4:
                kb, full = kb[:, None], (B, h, n, m)
        else:
            kb, full = bias_kpm[None, :], (n, m)
            if bias is not None and bias.ndim == 3:
                kb, full = kb[None], (h, n, m)
        with np.errstate(over="ignore"):
            bias = kb if bias is None else bias + kb
        bias = np.broadcast_to(bias, full)
        # Two finite masks can sum to -inf in float32 (a large negative
        # such as torch.finfo(float32).min in each): PyTorch adds them too
        # and so hides those keys, and attn_bias must be finite.
        lost = np.isneginf(bias)
        if lost.any():
            bias = np.where(lost, np.float32(0), bias)
            hidden_am = req.get("attn_mask")
            req["attn_mask"] = lost if hidden_am is None else \
                np.broadcast_to(hidden_am, lost.shape) | lost
    if bias is not None:
        req["attn_bias"] = np.ascontiguousarray(bias, dtype=np.float32)

    if is_causal:
        req["mask"] = "causal"
    if not need_weights:
        req["return_weights"] = "none"
    else:
        req["return_weights"] = "mean" if average_attn_weights \
            else "per_head"

    out_dtype = query.dtype if query.is_floating_point() else torch.float32
    device = query.device

    def post(result: Any) -> Tuple[Any, Optional[Any]]:
        out = result.output
        if batched and not batch_first:
            out = out.transpose(1, 0, 2)
        attn_output = torch.from_numpy(np.ascontiguousarray(out)).to(
            device=device, dtype=out_dtype)
        if not need_weights:
            return attn_output, None
        weights = torch.from_numpy(np.ascontiguousarray(
            result.attention)).to(device=device, dtype=out_dtype)
        return attn_output, weights

    return req, post
