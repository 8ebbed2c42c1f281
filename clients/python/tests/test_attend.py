"""test_attend.py: Client.attend against a real attnd, v1 fields.

Each answer is held to reference.attend_ref (float64) with the contract's
tolerance; inputs go in as NumPy arrays, torch tensors and plain lists.
"""
import json

import numpy as np
import pytest
import torch

import attnd
from reference import attend_ref, close


def _weights(rng, d, h, g, d_k, d_out=None, bias=False, d_mem=None):
    d_mem = d_mem or d
    f = {"w_q": rng.standard_normal((d, h * d_k)) / np.sqrt(d),
         "w_k": rng.standard_normal((d_mem, g * d_k)) / np.sqrt(d_mem),
         "w_v": rng.standard_normal((d_mem, g * d_k)) / np.sqrt(d_mem)}
    if d_out:
        f["w_o"] = rng.standard_normal((h * d_k, d_out)) / np.sqrt(h * d_k)
    if bias:
        f["b_q"] = rng.standard_normal(h * d_k)
        f["b_k"] = rng.standard_normal(g * d_k)
        f["b_v"] = rng.standard_normal(g * d_k)
        if d_out:
            f["b_o"] = rng.standard_normal(d_out)
    return {k: v.astype(np.float32) for k, v in f.items()}


CASES = [
    # batch (0 = 2-D x), n, m (None = self), d, h, g, d_k, d_out, bias, mask, pad
    (0, 5, None, 8, 2, 2, 4, None, False, "none", False),
    (0, 7, None, 12, 4, 2, 3, 12, True, "causal", False),
    (3, 6, None, 16, 4, 1, 4, 16, True, "none", True),
    (2, 4, 9, 8, 2, 2, 4, 6, False, "none", True),
    (2, 5, 5, 8, 6, 3, 2, None, True, "causal", False),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "B%d-n%d-m%s-h%d-g%d-%s"
                         % (c[0], c[1], c[2], c[4], c[5], c[9]))
def test_attend_matches_reference(client, rng, case):
    B, n, m, d, h, g, d_k, d_out, bias, mask, pad = case
    lead = (B,) if B else ()
    f = _weights(rng, d, h, g, d_k, d_out, bias, d_mem=d + 2 if m else None)
    f["x"] = rng.standard_normal(lead + (n, d)).astype(np.float32)
    if m:
        f["memory"] = rng.standard_normal(lead + (m, d + 2)).astype(
            np.float32)
    mm = m or n
    if pad:
        kpm = np.zeros(lead + (mm,), dtype=bool)
        kpm[..., -2:] = True
        f["key_padding_mask"] = kpm
    r = client.attend(num_heads=h, num_kv_heads=g, mask=mask, **f)
    want = attend_ref(num_heads=h, num_kv_heads=g, mask=mask, **f)
    close(r.output, want["output"])
    close(r.attention, want["attention"])
    assert r.output.dtype == np.float32
    assert r.meta["num_heads"] == h and r.meta["n"] == n
    assert r.meta["m"] == mm


def test_inputs_numpy_torch_lists_agree(client, rng):
    f = _weights(rng, 6, 2, 2, 3, d_out=6, bias=True)
    f["x"] = rng.standard_normal((4, 6)).astype(np.float32)
    a = client.attend(num_heads=2, **f)
    b = client.attend(num_heads=2, **{k: torch.from_numpy(v)
                                      for k, v in f.items()})
    c = client.attend(num_heads=2, **{k: v.tolist() for k, v in f.items()})
    d = client.attend(num_heads=2, **{k: torch.from_numpy(v).double()
                                      for k, v in f.items()})
    for r in (b, c, d):
        np.testing.assert_array_equal(r.output, a.output)
        np.testing.assert_array_equal(r.attention, a.attention)


def test_return_weights_and_tokens(client, rng):
    f = _weights(rng, 4, 2, 2, 2)
    f["x"] = rng.standard_normal((3, 4)).astype(np.float32)
    want = attend_ref(num_heads=2, **f)
    r = client.attend(num_heads=2, return_weights="mean",
                      tokens=["a", "b", "c"], **f)
    close(r.attention, want["attention"].mean(0))
    assert r.tokens == ["a", "b", "c"]
    r = client.attend(num_heads=2, return_weights="none", **f)
    assert r.attention is None
    close(r.output, want["output"])


def test_json_encoding_answer_decodes_too(client, rng):
    f = _weights(rng, 4, 1, 1, 4)
    f["x"] = rng.standard_normal((3, 4)).astype(np.float32)
    r = client.attend(encoding="json", **f)
    assert isinstance(r.output, np.ndarray)
    close(r.output, attend_ref(**f)["output"])


def test_request_is_base64_tensors_and_masks_are_arrays(client, rng):
    f = _weights(rng, 4, 1, 1, 4)
    x = torch.randn(2, 3, 4)
    body = client.request_json(x=x, key_padding_mask=torch.tensor(
        [[False, False, True], [False, True, True]]), positions=np.arange(3),
        **f)
    assert body["encoding"] == "base64"
    assert body["x"]["dtype"] == "float32" and body["x"]["shape"] == [2, 3, 4]
    assert body["w_q"]["shape"] == [4, 4]
    assert body["key_padding_mask"] == [[False, False, True],
                                        [False, True, True]]
    assert body["positions"] == [0, 1, 2]
    json.dumps(body)  # writable as it is
    import base64
    got = np.frombuffer(base64.b64decode(body["x"]["data"]), "<f4")
    np.testing.assert_array_equal(got.reshape(2, 3, 4), x.numpy())


def test_float_mask_in_a_boolean_field_is_refused(client, rng):
    f = _weights(rng, 4, 1, 1, 4)
    with pytest.raises(ValueError, match="attn_bias"):
        client.attend(x=np.ones((3, 4), np.float32),
                      key_padding_mask=np.zeros(3, np.float32), **f)


@pytest.mark.parametrize("field", ["x", "w_q"])
@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_complex_tensor_is_refused_before_sending(client, rng, field, kind):
    """Casting to float32 would drop the imaginary part with no more than
    a ComplexWarning, and compute with the real part. (refs=False: the
    weights encoded before x would otherwise be uploaded first.)"""
    client = attnd.Client(client.url, refs=False)
    f = _weights(rng, 4, 1, 1, 4)
    f["x"] = np.ones((3, 4), np.float32)
    f[field] = f[field].astype(np.complex64) + 1j
    if kind == "torch":
        f[field] = torch.from_numpy(f[field])
    before = client.bytes_sent
    with pytest.raises(ValueError, match="%s: attnd takes real" % field):
        client.attend(**f)
    assert client.bytes_sent == before


@pytest.mark.parametrize("scale", [np.array(0.5), np.float32(0.5),
                                   torch.tensor(0.5)])
def test_zero_d_number_is_a_number(client, rng, scale):
    """A 0-d array or tensor in a number field (scale, softcap) is written
    as a JSON number, not as a tensor object the server refuses."""
    f = _weights(rng, 4, 2, 2, 2)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    got = client.attend(x=x, num_heads=2, scale=scale, **f)
    close(got.output, attend_ref(x, num_heads=2, scale=0.5, **f)["output"])


def test_zero_d_tensor_keeps_its_shape(client, rng):
    """A 0-d x goes with shape [], so the server's error names rank 0,
    what was given (np.ascontiguousarray made it [1], "rank 1")."""
    f = _weights(rng, 4, 1, 1, 4)
    assert client.request_json(x=np.float32(1.0), **f)["x"]["shape"] == []
    with pytest.raises(attnd.Error, match="rank 0"):
        client.attend(x=torch.tensor(1.0), **f)


def test_error_fields(client, rng):
    f = _weights(rng, 4, 1, 1, 4)
    f["w_q"] = f["w_q"][:3]
    with pytest.raises(attnd.Error) as e:
        client.attend(x=np.ones((3, 4), np.float32), **f)
    assert e.value.status == 422
    assert e.value.code == "invalid_request"
    assert e.value.field.startswith("/w_q")
    assert "d_model" in e.value.message


def test_error_bad_enum(client, rng):
    f = _weights(rng, 4, 1, 1, 4)
    with pytest.raises(attnd.Error) as e:
        client.attend(x=np.ones((3, 4), np.float32), mask="diagonal", **f)
    assert (e.value.status, e.value.code, e.value.field) == \
        (422, "invalid_request", "/mask")


def test_error_too_large_and_not_found(server, rng):
    c = attnd.Client(server.url + "/nowhere")
    f = _weights(rng, 4, 1, 1, 4)
    with pytest.raises(attnd.Error) as e:
        c.attend(x=np.ones((3, 4), np.float32), **f)
    assert (e.value.status, e.value.code) == (404, "not_found")


def test_top_k_answer(client, rng):
    f = _weights(rng, 4, 1, 1, 4)
    f["x"] = rng.standard_normal((5, 4)).astype(np.float32)
    r = client.attend(top_k=2, **f)
    assert r.attention.shape == (1, 5, 2, 2)


def test_health_and_metrics(client):
    assert client.healthz()
    assert any(k.startswith("attnd_") or k.startswith("http_")
               for k in client.metrics())


def test_error_of_a_body_that_is_not_the_contract():
    e = attnd.Error.from_http(502, b"<html>Bad Gateway</html>")
    assert (e.status, e.code, e.field) == (502, "http_502", None)
    assert "Bad Gateway" in e.message
    e = attnd.Error.from_http(422, b'{"error":{"code":"invalid_request",'
                              b'"message":"m","field":"/x"}}')
    assert (e.status, e.code, e.message, e.field) == \
        (422, "invalid_request", "m", "/x")
    assert str(e) == "422 invalid_request: m (at /x)"


def test_unreachable_server():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    c = attnd.Client("http://127.0.0.1:%d" % port, timeout=5)
    assert not c.healthz()
    with pytest.raises(OSError):
        c.attend(x=[[1.0]], w_q=[[1.0]], w_k=[[1.0]], w_v=[[1.0]])
