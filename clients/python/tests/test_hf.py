"""test_hf.py: attnd.hf on stand-ins of Hugging Face attention modules.

The stand-ins (hf_standins.py) carry the attribute names of Llama, BERT and
GPT-2 attention. Each layer dict that attnd.hf.capture makes is held to
what the module computed twice: through the float64 reference (the
translation alone, no server) and through attnd with Client.layers.
"""
import pytest
import torch

import attnd.hf as hf
from attnd._wire import to_numpy
from hf_standins import TinyBart, TinyBert, TinyGPT2, TinyLlama
from reference import attend_ref, close


def _np(layer):
    return {k: (to_numpy(v) if isinstance(v, torch.Tensor) else v)
            for k, v in layer.items() if v is not None}


MODELS = {
    "llama-gqa": lambda: TinyLlama(),
    "llama-mha-bias": lambda: TinyLlama(heads=2, kv_heads=2, bias=True),
    "llama-mqa-partial-rope": lambda: TinyLlama(kv_heads=1, rotary_dim=2,
                                                rope_scaling=0.8),
    "qwen3-qk-norm-window": lambda: TinyLlama(qk_norm=True,
                                              sliding_window=3),
    "bert": lambda: TinyBert(),
    "gpt2": lambda: TinyGPT2(),
    "gpt2-inverse-layer-scale": lambda: TinyGPT2(by_layer=True),
}


def _run(name, padded):
    torch.manual_seed(0)
    model = MODELS[name]().eval()
    ids = torch.randint(0, 50, (2, 6))
    kwargs = {}
    if padded and not name.startswith("gpt2"):
        am = torch.ones(2, 6, dtype=torch.long)
        am[1, -2:] = 0
        kwargs["attention_mask"] = am
    layers = hf.capture(model, ids, **kwargs)
    return model, layers


CASES = [(m, p) for m in MODELS for p in (False, True)
         if not (p and m.startswith("gpt2"))]
# The reference has no qk_norm or window: those go through attnd alone.
REF_CASES = [c for c in CASES if not c[0].startswith("qwen3")]


def _case_id(c):
    return c[0] + ("-padded" if c[1] else "")


@pytest.mark.parametrize("case", REF_CASES,
                         ids=[_case_id(c) for c in REF_CASES])
def test_capture_through_reference(case):
    model, layers = _run(*case)
    assert len(layers) == len(model.outputs) >= 2
    for lay, want in zip(layers, model.outputs):
        got = attend_ref(**_np(lay))
        close(got["output"], want.detach().numpy())


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_capture_through_attnd(client, case):
    model, layers = _run(*case)
    r = client.layers(layers)
    assert len(r.layers) == len(model.outputs)
    for got, want in zip(r.layers, model.outputs):
        close(got.output, want.detach().numpy())


@pytest.mark.parametrize("name", ["llama-gqa", "bert"])
def test_attention_mask_given_by_position(client, name):
    """model(ids, attention_mask), as Hugging Face's forward takes it: the
    padding reaches the layers as it does by keyword."""
    torch.manual_seed(0)
    model = MODELS[name]().eval()
    ids = torch.randint(0, 50, (2, 6))
    am = torch.ones(2, 6, dtype=torch.long)
    am[1, -2:] = 0
    layers = hf.capture(model, ids, am)
    assert all(lay["key_padding_mask"].equal(am == 0) for lay in layers)
    r = client.layers(layers)
    for got, want in zip(r.layers, model.outputs):
        close(got.output, want.detach().numpy())


def test_bart_encoder_decoder_and_cross_attention(client):
    """BART's modules say is_causal False for the encoder and the
    cross-attention, whose keys and values are the encoder's states
    (key_value_states): bidirectional self-attention, causal decoder
    self-attention, and cross-attention over 7 encoder positions from 5
    decoder ones."""
    torch.manual_seed(0)
    model = TinyBart().eval()
    layers = hf.capture(model, torch.randint(0, 50, (2, 7)),
                        torch.randint(0, 50, (2, 5)))
    assert [lay["mask"] for lay in layers] == ["none", "causal", "none"]
    assert "memory" not in layers[1]
    assert tuple(layers[2]["memory"].shape) == (2, 7, 16)
    r = client.layers(layers)
    assert len(r.layers) == len(model.outputs) == 3
    for got, want in zip(r.layers, model.outputs):
        close(got.output, want.detach().numpy())


def test_kinds_and_fields():
    llama, bert, gpt2 = TinyLlama(), TinyBert(), TinyGPT2()
    assert [hf.attention_kind(m) for _, m in hf.attention_modules(llama)] \
        == ["llama", "llama"]
    assert [n for n, _ in hf.attention_modules(bert)] == \
        ["layer.0.attention", "layer.1.attention"]
    assert len(hf.attention_modules(gpt2)) == 3
    f = hf.attention_fields(llama.layers[0].self_attn)
    assert f["weight_layout"] == "out_in"
    assert (f["num_heads"], f["num_kv_heads"]) == (4, 2)
    assert tuple(f["w_k"].shape) == (8, 16)  # [g*d_k][d_model], as stored
    assert f["rope"]["style"] == "half" and len(f["rope"]["inv_freq"]) == 2
    assert "scale" not in f and f["mask"] == "causal"
    g = hf.attention_fields(gpt2.h[0].attn)
    assert tuple(g["w_qkv"].shape) == (12, 36) and "weight_layout" not in g
    b = hf.attention_fields(bert.layer[0].attention)
    assert b["mask"] == "none" and "b_o" in b
    with pytest.raises(ValueError, match="not an attention module"):
        hf.attention_fields(torch.nn.Linear(2, 2))


def test_capture_restores_forward():
    model = TinyLlama()
    attn = model.layers[0].self_attn
    hf.capture(model, torch.randint(0, 50, (1, 4)))
    assert "forward" not in attn.__dict__


def test_request_json_for_the_dashboard(client):
    _, layers = _run("llama-gqa", False)
    body = client.request_json(layers=layers, rollout=True)
    assert body["rollout"] is True and len(body["layers"]) == 2
    assert body["layers"][0]["w_q"]["dtype"] == "float32"
    assert "ref" not in str(body)


def test_capture_without_attention_modules_says_so():
    import torch
    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    with pytest.raises(ValueError, match="no attention module of Sequential"):
        hf.capture(model, torch.zeros(1, 4))
