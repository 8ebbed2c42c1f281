"""test_v2.py: Client.attend with the v2 fields, against the reference.

weight_layout "out_in", packed w_qkv/b_qkv, a separate value source,
attn_mask and attn_bias, positions and RoPE, value_norms and return_qk,
unknown fields refused by name; and the client's refusal to send v2 fields
to a server that would ignore them.
"""
import numpy as np
import pytest
import torch

import attnd
from attnd._client import V1_FIELDS
from reference import attend_ref, close
from store_proxy import StoreProxy


def _f32(rng, *shape, s=1.0):
    return (s * rng.standard_normal(shape)).astype(np.float32)


def test_out_in_layout_equals_in_out(client, rng):
    d, h, d_k = 8, 2, 4
    w = {k: _f32(rng, d, h * d_k, s=0.3) for k in ("w_q", "w_k", "w_v")}
    w["w_o"] = _f32(rng, h * d_k, 6, s=0.3)
    x = _f32(rng, 2, 5, d)
    a = client.attend(x=x, num_heads=h, **w)
    b = client.attend(x=x, num_heads=h, weight_layout="out_in",
                      **{k: np.ascontiguousarray(v.T) for k, v in w.items()})
    close(b.output, a.output)
    close(b.attention, a.attention)


def test_w_qkv_packed_gqa(client, rng):
    d, h, g, d_k = 12, 4, 2, 3
    f = {"x": _f32(rng, 5, d),
         "w_qkv": _f32(rng, (h + 2 * g) * d_k, d, s=0.3),
         "b_qkv": _f32(rng, (h + 2 * g) * d_k),
         "w_o": _f32(rng, d, h * d_k, s=0.3),
         "num_heads": h, "num_kv_heads": g, "weight_layout": "out_in",
         "mask": "causal"}
    r = client.attend(**f)
    want = attend_ref(**f)
    close(r.output, want["output"])
    close(r.attention, want["attention"])


def test_separate_value(client, rng):
    f = {"x": _f32(rng, 2, 4, 8), "memory": _f32(rng, 2, 6, 5),
         "value": _f32(rng, 2, 6, 7), "w_q": _f32(rng, 8, 4, s=0.4),
         "w_k": _f32(rng, 5, 4, s=0.4), "w_v": _f32(rng, 7, 4, s=0.4),
         "num_heads": 2}
    r = client.attend(**f)
    close(r.output, attend_ref(**f)["output"])


def test_attn_mask_and_bias(client, rng):
    B, h, n, m, d = 2, 3, 4, 6, 6
    hide = rng.random((B, h, n, m)) < 0.3
    hide[..., 0] = False
    f = {"x": _f32(rng, B, n, d), "memory": _f32(rng, B, m, d),
         "w_q": _f32(rng, d, h * 2), "w_k": _f32(rng, d, h * 2),
         "w_v": _f32(rng, d, h * 2), "num_heads": h,
         "attn_mask": hide, "attn_bias": _f32(rng, n, m)}
    r = client.attend(**f)
    want = attend_ref(**f)
    close(r.output, want["output"])
    close(r.attention, want["attention"])
    assert np.all(r.attention[hide] == 0)


def test_rope_positions_qk_and_value_norms(client, rng):
    d, h, d_k = 8, 2, 4
    inv = (10000.0 ** (-np.arange(2) / 2)).tolist()
    f = {"x": _f32(rng, 5, d), "w_q": _f32(rng, d, h * d_k),
         "w_k": _f32(rng, d, h * d_k), "w_v": _f32(rng, d, h * d_k),
         "w_o": _f32(rng, h * d_k, d), "num_heads": h, "mask": "causal",
         "positions": np.arange(3, 8), "rope": {"inv_freq": inv}}
    r = client.attend(value_norms=True, return_qk=True, **f)
    want = attend_ref(**f)
    close(r.output, want["output"])
    close(r.q, want["q"])
    close(r.k, want["k"])
    close(r.value_norms, want["value_norms"])


def test_torch_tensors_in_v2_fields(client, rng):
    f = {"x": torch.randn(4, 6), "w_qkv": torch.randn(18, 6) * 0.3,
         "weight_layout": "out_in", "num_heads": 2,
         "attn_mask": torch.eye(4, dtype=torch.bool)[:, [1, 2, 3, 0]]}
    r = client.attend(**f)
    close(r.output, attend_ref(**{k: (v.numpy() if hasattr(v, "numpy")
                                      else v) for k, v in f.items()})
          ["output"])


def test_unknown_field_named(client, rng):
    f = {"x": _f32(rng, 3, 4), "w_q": _f32(rng, 4, 4),
         "w_k": _f32(rng, 4, 4), "w_v": _f32(rng, 4, 4)}
    with pytest.raises(attnd.Error) as e:
        client.attend(num_haeds=2, **f)
    assert (e.value.status, e.value.code, e.value.field) == \
        (422, "invalid_request", "/num_haeds")
    assert "num_heads" in e.value.message


def test_v2_fields_to_a_lenient_server_are_refused(server, rng):
    p = StoreProxy(server.url, keep_only=V1_FIELDS)
    try:
        c = attnd.Client(p.url)
        f = {"x": _f32(rng, 3, 4), "w_q": _f32(rng, 4, 4),
             "w_k": _f32(rng, 4, 4), "w_v": _f32(rng, 4, 4)}
        c.attend(**f)  # v1 fields: fine
        n = len(p.attend_bodies)
        with pytest.raises(attnd.Error) as e:
            c.attend(attn_mask=np.eye(3, dtype=bool), **f)
        assert (e.value.status, e.value.code, e.value.field) == \
            (0, "unsupported_field", "/attn_mask")
        # only the probe went out, never the request
        assert len(p.attend_bodies) == n + 1
        assert b"attnd_client_probe" in p.attend_bodies[-1]
    finally:
        p.close()
