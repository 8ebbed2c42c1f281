"""attnd.hf: Hugging Face attention modules as attnd layer requests.

Needs PyTorch, not ``transformers``: modules are recognised by the names of
their attributes, the ones Hugging Face's code uses, so any module built the
same way works.

- Llama-style (Llama, Mistral, Qwen2/3, Gemma, Phi-3 split, OPT, BART):
  ``q_proj``, ``k_proj``, ``v_proj`` and ``o_proj`` (or ``out_proj``,
  ``dense``), ``nn.Linear`` weights ``[out][in]`` sent as they are with
  ``weight_layout: "out_in"``; heads from the module or its ``config``
  (``num_attention_heads``, ``num_key_value_heads`` for grouped-query
  attention, ``head_dim``); RoPE from a ``rotary_emb`` module's
  ``inv_freq`` (the module's own, or the model's for newer Hugging Face
  code) and its ``attention_scaling``; ``q_norm``/``k_norm`` as
  ``qk_norm``; ``sliding_window`` as ``window``; ``attn_logit_softcapping``
  as ``softcap``; causal unless the module's ``is_causal`` is False (BART's
  encoder and cross-attention) or the caller says otherwise; a call with
  ``key_value_states`` (cross-attention) takes them as ``memory``.
- BERT-style: ``self.query``, ``self.key``, ``self.value`` (``nn.Linear``)
  and ``output.dense`` as ``w_o``; no mask (bidirectional). The answer's
  ``output`` is ``output.dense``'s output, before its dropout, residual and
  LayerNorm.
- GPT-2: ``c_attn`` (a ``Conv1D``, weight ``[in][3 d_model]``) as ``w_qkv``
  in the ``in_out`` layout, ``c_proj`` as ``w_o``; causal; the scale follows
  ``scale_attn_weights`` and ``scale_attn_by_inverse_layer_idx``.

``capture(model, ...)`` runs the model once and returns one layer dict per
attention module (its fields and ``x``, the hidden states that entered it),
ready for ``Client.layers``.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import _wire

__all__ = ["attention_kind", "attention_fields", "attention_modules",
           "capture"]


def _linear(mod: Any) -> Tuple[Any, Optional[Any]]:
    return mod.weight.detach(), (None if getattr(mod, "bias", None) is None
                                 else mod.bias.detach())


def _out_proj(module: Any) -> Any:
    for name in ("o_proj", "out_proj", "dense"):
        mod = getattr(module, name, None)
        if mod is not None and hasattr(mod, "weight"):
            return mod
    return None


def attention_kind(module: Any) -> Optional[str]:
    """"llama", "bert" or "gpt2" for a module this file can translate, None
    for any other."""
    if all(hasattr(module, a) for a in ("q_proj", "k_proj", "v_proj")) and \
            _out_proj(module) is not None:
        return "llama"
    inner = getattr(module, "self", None)
    if inner is not None and all(hasattr(inner, a)
                                 for a in ("query", "key", "value")) and \
            hasattr(getattr(module, "output", None), "dense"):
        return "bert"
    if hasattr(module, "c_attn") and hasattr(module, "c_proj"):
        return "gpt2"
    return None


def _cfg(module: Any, config: Any, *names: str) -> Any:
    """The first of these attributes found on the module, then its config."""
    for src in (module, config):
        if src is None:
            continue
        for n in names:
            v = getattr(src, n, None)
            if v is not None:
                return v
    return None


def attention_fields(module: Any, config: Any = None,
                     rotary_emb: Any = None, causal: Optional[bool] = None,
                     layer_idx: Optional[int] = None) -> Dict[str, Any]:
    """The /attend fields of one attention module, every field but ``x``
    (and ``memory``): weights as torch tensors, head counts, mask, scale and
    position rules.

    ``config``: the model config when the module has none
    (``module.config`` otherwise). ``rotary_emb``: the module holding RoPE's
    ``inv_freq`` when the module has no ``rotary_emb`` of its own.
    ``causal``: override the kind's default (True for Llama-style, unless
    the module's ``is_causal`` is False, and GPT-2; False for BERT).
    ``layer_idx``: for GPT-2's ``scale_attn_by_inverse_layer_idx``. Raises ValueError for a module it
    does not know."""
    kind = attention_kind(module)
    if config is None:
        config = getattr(module, "config", None)
    if kind == "llama":
        return _llama(module, config, rotary_emb, causal)
    if kind == "bert":
        return _bert(module, config, causal)
    if kind == "gpt2":
        return _gpt2(module, config, causal, layer_idx)
    raise ValueError("%s is not an attention module attnd.hf knows (it "
                     "looks for q_proj/k_proj/v_proj/o_proj, self.query/"
                     "key/value with output.dense, or c_attn/c_proj)"
                     % type(module).__name__)


def _causal(module: Any, causal: Optional[bool]) -> bool:
    """The caller's choice, else the module's own is_causal (Hugging Face
    sets it False on BART's and Whisper's encoder and cross-attention),
    else causal."""
    if causal is not None:
        return causal
    own = getattr(module, "is_causal", None)
    return own if isinstance(own, bool) else True


def _llama(module: Any, config: Any, rotary_emb: Any,
           causal: Optional[bool]) -> Dict[str, Any]:
    wq, bq = _linear(module.q_proj)
    wk, bk = _linear(module.k_proj)
    wv, bv = _linear(module.v_proj)
    wo, bo = _linear(_out_proj(module))
    h = _cfg(module, config, "num_heads", "num_attention_heads")
    if h is None:
        raise ValueError("%s: no num_heads, and no config with "
                         "num_attention_heads" % type(module).__name__)
    h = int(h)
    g = int(_cfg(module, config, "num_key_value_heads") or h)
    d_k = _cfg(module, config, "head_dim")
    d_k = int(d_k) if d_k else wq.shape[0] // h
    f: Dict[str, Any] = {
        "weight_layout": "out_in", "num_heads": h, "num_kv_heads": g,
        "w_q": wq, "w_k": wk, "w_v": wv, "w_o": wo,
        "b_q": bq, "b_k": bk, "b_v": bv, "b_o": bo,
        "mask": "causal" if _causal(module, causal) else "none",
    }
    scaling = getattr(module, "scaling", None)
    if isinstance(scaling, (int, float)) and \
            abs(scaling * math.sqrt(d_k) - 1) > 1e-6:
        f["scale"] = float(scaling)
    rot = getattr(module, "rotary_emb", None) or rotary_emb
    inv_freq = getattr(rot, "inv_freq", None) if rot is not None else None
    if inv_freq is not None:
        freqs = _wire.to_numpy(inv_freq).astype("float64").ravel()
        rope: Dict[str, Any] = {"inv_freq": [float(v) for v in freqs],
                                "style": "half"}
        if 2 * len(freqs) != d_k:
            rope["dim"] = 2 * len(freqs)
        factor = getattr(rot, "attention_scaling", None)
        if factor is not None and float(factor) != 1.0:
            rope["attention_factor"] = float(factor)
        f["rope"] = rope
    qn, kn = getattr(module, "q_norm", None), getattr(module, "k_norm", None)
    if qn is not None and kn is not None and hasattr(qn, "weight"):
        eps: Any = getattr(qn, "variance_epsilon", None)
        if eps is None:
            eps = getattr(qn, "eps", None)
        if eps is None:
            eps = 1e-6
        f["qk_norm"] = {
            "q_weight": _wire.plain(qn.weight.detach()),
            "k_weight": _wire.plain(kn.weight.detach()),
            "eps": float(eps),
            "over": "head" if qn.weight.numel() == d_k else "all"}
    window = getattr(module, "sliding_window", None)
    if isinstance(window, int) and window > 0:
        f["window"] = {"left": window - 1}
    softcap = _cfg(module, config, "attn_logit_softcapping")
    if softcap:
        f["softcap"] = float(softcap)
    return f


def _bert(module: Any, config: Any, causal: Optional[bool]
          ) -> Dict[str, Any]:
    s = module.self
    wq, bq = _linear(s.query)
    wk, bk = _linear(s.key)
    wv, bv = _linear(s.value)
    wo, bo = _linear(module.output.dense)
    h = _cfg(s, config, "num_attention_heads", "num_heads")
    if h is None:
        raise ValueError("BERT-style attention without num_attention_heads")
    return {"weight_layout": "out_in", "num_heads": int(h),
            "w_q": wq, "w_k": wk, "w_v": wv, "w_o": wo,
            "b_q": bq, "b_k": bk, "b_v": bv, "b_o": bo,
            "mask": "causal" if causal else "none"}


def _gpt2(module: Any, config: Any, causal: Optional[bool],
          layer_idx: Optional[int]) -> Dict[str, Any]:
    if getattr(module, "is_cross_attention", False):
        raise ValueError("GPT-2 cross-attention (q_attn) is not translated")
    w, b = _linear(module.c_attn)      # Conv1D: [d_model][3 d_model]
    wo, bo = _linear(module.c_proj)    # Conv1D: [d_model][d_model]
    h = int(_cfg(module, config, "num_heads", "n_head",
                 "num_attention_heads"))
    d_k = w.shape[1] // 3 // h
    scale = 1.0 / math.sqrt(d_k) if getattr(module, "scale_attn_weights",
                                            True) else 1.0
    if getattr(module, "scale_attn_by_inverse_layer_idx", False):
        idx = layer_idx if layer_idx is not None else getattr(
            module, "layer_idx", None)
        if idx is None:
            raise ValueError("scale_attn_by_inverse_layer_idx needs the "
                             "layer index")
        scale /= float(idx + 1)
    f: Dict[str, Any] = {"num_heads": h, "w_qkv": w, "b_qkv": b,
                         "w_o": wo, "b_o": bo,
                         "mask": "none" if causal is False else "causal"}
    if abs(scale * math.sqrt(d_k) - 1) > 1e-7:
        f["scale"] = scale
    return f


def attention_modules(model: Any) -> List[Tuple[str, Any]]:
    """(name, module) of every attention module in the model that
    attention_kind recognises, outermost only, in registration order."""
    found: List[Tuple[str, Any]] = []
    for name, mod in model.named_modules():
        if any(name.startswith(p + ".") for p, _ in found if p) or (
                found and found[0][0] == "" and name):
            continue
        if attention_kind(mod) is not None:
            found.append((name, mod))
    return found


def _find_rotary(model: Any) -> Any:
    for name, mod in model.named_modules():
        if name.endswith("rotary_emb") and hasattr(mod, "inv_freq"):
            return mod
    return None


def _attention_mask_argument(model: Any, args: Sequence[Any],
                             kwargs: Dict[str, Any]) -> Any:
    """The attention_mask the model was called with, by keyword or by
    position (``model(input_ids, attention_mask)``: the second parameter of
    Hugging Face's forward), found from the signature of its forward."""
    import inspect

    if "attention_mask" in kwargs:
        return kwargs["attention_mask"]
    try:
        bound = inspect.signature(model.forward).bind_partial(*args,
                                                              **kwargs)
    except (TypeError, ValueError):
        return None
    return bound.arguments.get("attention_mask")


def capture(model: Any, *args: Any, modules: Optional[Sequence[Any]] = None,
            causal: Optional[bool] = None, **kwargs: Any
            ) -> List[Dict[str, Any]]:
    """Runs ``model(*args, **kwargs)`` once without gradients and returns one
    layer dict per call of an attention module, in call order: the fields of
    attention_fields and ``x``, the hidden states the module received
    (``[B][n][d_model]``), with ``positions`` when the module was given
    ``position_ids`` and ``key_padding_mask`` when the model is given a 2-D
    ``attention_mask``, by keyword or by position (0 = padding, the
    tokenizer's convention).

    The modules' ``forward`` are wrapped for the run and restored after it:
    a forward pre-hook would not see keyword arguments in every PyTorch
    version (Hugging Face passes ``hidden_states=`` by keyword)."""
    import torch

    mods = list(modules) if modules is not None else [
        m for _, m in attention_modules(model)]
    config = getattr(model, "config", None)
    rotary = _find_rotary(model)
    calls: List[Tuple[int, Any, Any, Any]] = []
    saved = []
    for idx, mod in enumerate(mods):
        own = mod.__dict__.get("forward")
        orig = mod.forward

        def fwd(*a: Any, __orig: Any = orig, __idx: int = idx,
                **k: Any) -> Any:
            hs = a[0] if a else k.get("hidden_states")
            kvs = k.get("key_value_states")
            calls.append((__idx, hs.detach(), k.get("position_ids"),
                          None if kvs is None else kvs.detach()))
            return __orig(*a, **k)

        saved.append((mod, own))
        mod.forward = fwd
    try:
        with torch.no_grad():
            model(*args, **kwargs)
    finally:
        for mod, own in saved:
            if own is None:
                del mod.__dict__["forward"]
            else:
                mod.forward = own
    kpm = None
    am = _attention_mask_argument(model, args, kwargs)
    if am is not None and getattr(am, "dim", lambda: 0)() == 2:
        kpm = (am == 0)
    if not calls:
        raise ValueError(
            "no attention module of %s ran: %s" % (
                type(model).__name__,
                "none was found (attnd.hf knows Llama-style q_proj/k_proj/"
                "v_proj/o_proj, BERT-style self.query/key/value, GPT-2 "
                "c_attn/c_proj)" if not mods else
                "%d were found but the forward called none" % len(mods)))
    layers = []
    for idx, x, pos, kvs in calls:
        mod = mods[idx]
        f = attention_fields(mod, config=getattr(mod, "config", None)
                             or config, rotary_emb=rotary, causal=causal,
                             layer_idx=getattr(mod, "layer_idx", idx))
        f["x"] = x
        if kvs is not None:
            # cross-attention (BART's encoder_attn): keys and values come
            # from the encoder's states
            f["memory"] = kvs
        if pos is not None:
            # [1][n] is shared by every batch element: the [n] form
            f["positions"] = pos[0] if pos.dim() == 2 and \
                pos.shape[0] == 1 else pos
        if kpm is not None and kpm.any():
            f["key_padding_mask"] = kpm
        layers.append(f)
    return layers
