"""test_layers.py: Client.layers, a whole model in one request.

Each layer's answer is the one the same request alone gets; rollout is the
Abnar-Zuidema product of the layers' mean maps; layer weights go by ref on
a second call and come back inline after a restart.
"""
import numpy as np
import pytest

import attnd
from reference import attend_ref, close, rollout_ref

L, N, D, H = 3, 5, 8, 2


def _layers(rng, n=N):
    out = []
    for _ in range(L):
        out.append({k: (0.4 * rng.standard_normal((D, D))).astype(np.float32)
                    for k in ("w_q", "w_k", "w_v", "w_o")})
        out[-1]["x"] = rng.standard_normal((n, D)).astype(np.float32)
    return out


def test_layers_each_as_alone_and_rollout(client, rng):
    layers = _layers(rng)
    layers[1]["mask"] = "none"  # a layer's own field beats the default
    r = client.layers(layers, rollout=True, num_heads=H, mask="causal")
    assert r.meta["layers"] == L and len(r.layers) == L
    maps = []
    for lay, got in zip(layers, r.layers):
        f = dict({"num_heads": H, "mask": "causal"}, **lay)
        want = attend_ref(**f)
        close(got.output, want["output"])
        close(got.attention, want["attention"])
        maps.append(want["attention"].mean(0))
    close(r.rollout, rollout_ref(maps))
    assert r.rollout.shape == (N, N)


def test_layer_weights_by_ref(server, rng):
    c = attnd.Client(server.url)
    layers = _layers(rng)
    c.layers(layers, num_heads=H)
    sent = c.bytes_sent
    for lay in layers:
        lay["x"] = rng.standard_normal((N, D)).astype(np.float32)
    r = c.layers(layers, num_heads=H)
    assert c.bytes_sent - sent < 3 * L * N * D * 4 + 4000
    close(r.layers[2].output,
          attend_ref(num_heads=H, **layers[2])["output"])


def test_layers_unknown_ref_after_restart(own_server, rng):
    c = attnd.Client(own_server.url)
    layers = _layers(rng)
    c.layers(layers, num_heads=H)
    own_server.restart()
    r = c.layers(layers, num_heads=H)
    assert c.stats["ref_retries"] == 1 and c.stats["inline_retries"] == 0
    close(r.layers[0].output, attend_ref(num_heads=H, **layers[0])["output"])


def test_rollout_needs_self_attention(client, rng):
    layers = _layers(rng)
    layers[1]["memory"] = rng.standard_normal((7, D)).astype(np.float32)
    with pytest.raises(attnd.Error) as e:
        client.layers(layers, rollout=True, num_heads=H)
    assert (e.value.status, e.value.code) == (422, "invalid_request")


def test_error_points_into_the_layer(client, rng):
    layers = _layers(rng)
    layers[2]["w_q"] = layers[2]["w_q"][:5]
    with pytest.raises(attnd.Error) as e:
        client.layers(layers, num_heads=H)
    assert e.value.field.startswith("/layers/2/w_q")
