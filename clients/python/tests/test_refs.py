"""test_refs.py: weights go by ref once the server holds them, and an
unknown ref costs one inline retry, never a different answer.

The first tests use the real attnd's tensor store (v2: POST /tensors,
attnd_tensor_store_hits_total); the others put store_proxy.StoreProxy in
front of it, so the client's side of the protocol is checked whatever the
server implements.
"""
import json

import numpy as np
import pytest

import attnd
from reference import attend_ref, close
from store_proxy import StoreProxy

D, H = 64, 4   # w_q etc. are 64 x 64 = 4096 values


def _request(rng, n=6, d=D):
    f = {"w_q": rng.standard_normal((d, d)), "w_k": rng.standard_normal((d, d)),
         "w_v": rng.standard_normal((d, d)), "w_o": rng.standard_normal((d, d)),
         "b_o": rng.standard_normal(d)}
    f = {k: (v / np.sqrt(d)).astype(np.float32) for k, v in f.items()}
    f["x"] = rng.standard_normal((n, d)).astype(np.float32)
    return f


def _hits(client):
    return client.metrics().get("attnd_tensor_store_hits_total", 0.0)


def test_second_call_sends_weights_by_ref(server, rng):
    c = attnd.Client(server.url)
    f = _request(rng)
    inline = len(json.dumps(c.request_json(num_heads=H, **f)))
    hits0 = _hits(c)
    r1 = c.attend(num_heads=H, **f)
    sent1 = c.bytes_sent
    f["x"] = rng.standard_normal((6, D)).astype(np.float32)
    r2 = c.attend(num_heads=H, **f)
    sent2 = c.bytes_sent - sent1
    assert c.stats["uploads"] == 5, c.stats
    assert sent2 < inline / 4, (sent2, inline)
    assert _hits(c) >= hits0 + 10  # five refs in each call
    close(r2.output, attend_ref(num_heads=H, **f)["output"])
    assert r1.output.shape == r2.output.shape


def test_unknown_ref_after_restart_uploads_again(own_server, rng):
    c = attnd.Client(own_server.url)
    f = _request(rng)
    want = attend_ref(num_heads=H, **f)
    close(c.attend(num_heads=H, **f).output, want["output"])
    assert c.stats["uploads"] == 5, c.stats
    own_server.restart()  # the store is empty now
    close(c.attend(num_heads=H, **f).output, want["output"])
    # uploaded again and sent by ref again, once
    assert c.stats["uploads"] == 10 and c.stats["ref_retries"] == 1
    assert c.stats["inline_retries"] == 0
    sent = c.bytes_sent
    close(c.attend(num_heads=H, **f).output, want["output"])
    assert c.stats["uploads"] == 10 and c.stats["ref_retries"] == 1
    assert c.bytes_sent - sent < len(json.dumps(
        c.request_json(num_heads=H, **f))) / 4


def test_explicit_upload(server, rng):
    c = attnd.Client(server.url)
    w = rng.standard_normal((3, 5)).astype(np.float32)
    ref = c.upload(w)
    assert ref == attnd.sha256_ref(w)
    assert ref == "sha256:" + __import__("hashlib").sha256(
        w.astype("<f4").tobytes()).hexdigest()


# -- the client's side, through the stand-in store ------------------------

@pytest.fixture
def proxy(server):
    p = StoreProxy(server.url)
    yield p
    p.close()


def test_proxy_refs_on_later_calls(proxy, rng):
    c = attnd.Client(proxy.url)
    f = _request(rng)
    want = attend_ref(num_heads=H, **f)
    inline = len(json.dumps(c.request_json(num_heads=H, **f)))
    close(c.attend(num_heads=H, **f).output, want["output"])
    assert proxy.uploads == 5 and proxy.hits == 5
    before = c.bytes_sent
    close(c.attend(num_heads=H, **f).output, want["output"])
    assert proxy.uploads == 5 and proxy.hits == 10
    assert c.bytes_sent - before < inline / 4


def test_proxy_unknown_ref_uploads_again_once(proxy, rng):
    c = attnd.Client(proxy.url)
    f = _request(rng)
    want = attend_ref(num_heads=H, **f)["output"]
    c.attend(num_heads=H, **f)
    proxy.forget()
    close(c.attend(num_heads=H, **f).output, want)
    assert proxy.misses == 1 and proxy.uploads == 10
    assert c.stats["ref_retries"] == 1 and c.stats["inline_retries"] == 0
    assert b'"ref"' in proxy.attend_bodies[-1]
    close(c.attend(num_heads=H, **f).output, want)
    assert proxy.uploads == 10 and proxy.misses == 1


def test_proxy_store_that_keeps_nothing_goes_inline(proxy, rng):
    # every upload answered, none kept (another replica, a store too
    # small): the retry by ref fails too, and the request goes inline
    c = attnd.Client(proxy.url)
    f = _request(rng)
    want = attend_ref(num_heads=H, **f)["output"]
    proxy.keep = False
    close(c.attend(num_heads=H, **f).output, want)
    assert proxy.misses == 2 and c.stats["ref_retries"] == 1
    assert c.stats["inline_retries"] == 1
    assert b'"ref"' not in proxy.attend_bodies[-1]


def test_proxy_gives_up_refs_after_repeated_losses(proxy, rng):
    c = attnd.Client(proxy.url)
    f = _request(rng)
    for _ in range(attnd._client.MAX_REF_FAILURES):
        c.attend(num_heads=H, **f)
        proxy.forget()
    uploads = proxy.uploads
    close(c.attend(num_heads=H, **f).output,
          attend_ref(num_heads=H, **f)["output"])
    assert proxy.uploads == uploads
    assert b'"ref"' not in proxy.attend_bodies[-1]


def test_no_store_means_inline(server, rng):
    p = StoreProxy(server.url, store=False)
    try:
        c = attnd.Client(p.url)
        f = _request(rng)
        for _ in range(2):
            close(c.attend(num_heads=H, **f).output,
                  attend_ref(num_heads=H, **f)["output"])
        assert c.stats["uploads"] == 0
        assert all(b'"ref"' not in b for b in p.attend_bodies)
    finally:
        p.close()


def test_large_memory_goes_by_ref_from_its_second_use(proxy, rng):
    c = attnd.Client(proxy.url)
    f = _request(rng, d=8)
    mem = rng.standard_normal((600, 8)).astype(np.float32)  # 4800 values
    c.attend(memory=mem, **f)
    assert proxy.uploads == 5  # the weights only
    c.attend(memory=mem, **f)
    assert proxy.uploads == 6  # and now the memory
    assert b'"memory":{"ref"' in proxy.attend_bodies[-1]
    c.attend(x=mem[:5], **{k: v for k, v in f.items() if k != "x"})
    assert b'"x":{"dtype"' in proxy.attend_bodies[-1]  # x never


def test_refs_off(proxy, rng):
    c = attnd.Client(proxy.url, refs=False)
    f = _request(rng)
    c.attend(num_heads=H, **f)
    c.attend(num_heads=H, **f)
    assert proxy.uploads == 0
