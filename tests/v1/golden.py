"""golden.py: v1 requests answered exactly as before (python3 stdlib only).

A request that uses none of the contract's v2 fields must get the v1 answer
byte for byte. `record` posts every request of the table below to a given
attnd and writes the answers to tests/v1/golden/<name>.json; `check` posts
them again to another attnd and compares the bodies byte for byte, with
meta.elapsed_ms and meta.analysis_ms (compute times, the only parts that
may differ) blanked.

  python3 tests/v1/golden.py record --attnd <v1 build> --out tests/v1/golden
  python3 tests/v1/golden.py check --attnd build/attnd --golden tests/v1/golden
"""
import argparse
import json
import os
import random
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "robust"))
from attnd_proc import Attnd, raw_request  # noqa: E402


def matrix(rng, rows, cols):
    # float32-exact values, written as Python writes them (17 digits)
    return [[rng.randrange(-32768, 32768) / 32768.0 * 1.7
             for _ in range(cols)] for _ in range(rows)]


def cases():
    """(name, request body as text) pairs covering every v1 option."""
    rng = random.Random(20261201)
    out = []

    def add(name, n=4, d=6, h=2, dk=3, **extra):
        req = {"x": matrix(rng, n, d), "w_q": matrix(rng, d, h * dk),
               "w_k": matrix(rng, d, h * dk), "w_v": matrix(rng, d, h * dk),
               "num_heads": h}
        req.update(extra)
        out.append((name, json.dumps(req)))
        return req

    add("basic")
    add("one_head", h=1)
    add("causal", mask="causal")
    add("scale", scale=0.25)
    add("mean", return_weights="mean")
    add("none", return_weights="none")
    add("base64", encoding="base64")
    add("w_o_biases", w_o=matrix(rng, 6, 5), b_o=[0.5] * 5,
        b_q=[0.25] * 6, b_k=[-0.125] * 6, b_v=[1.0] * 6)
    add("kpm", key_padding_mask=[False, True, False, False])
    add("kpm_all_masked", key_padding_mask=[True] * 4)
    add("tokens", tokens=["a", "b", "c", "d"])
    add("analysis", analysis=True)
    add("top_k", top_k=2)
    add("top_k_mean", top_k=3, return_weights="mean")
    # grouped-query and multi-query
    d, h, g, dk = 8, 4, 2, 2
    out.append(("gqa", json.dumps({
        "x": matrix(rng, 5, d), "w_q": matrix(rng, d, h * dk),
        "w_k": matrix(rng, d, g * dk), "w_v": matrix(rng, d, g * dk),
        "num_heads": h, "num_kv_heads": g, "mask": "causal"})))
    out.append(("mqa", json.dumps({
        "x": matrix(rng, 3, d), "w_q": matrix(rng, d, h * dk),
        "w_k": matrix(rng, d, dk), "w_v": matrix(rng, d, dk),
        "num_heads": h, "num_kv_heads": 1})))
    # cross-attention with labels, batched with per-batch padding
    out.append(("cross", json.dumps({
        "x": matrix(rng, 3, 4), "memory": matrix(rng, 5, 6),
        "w_q": matrix(rng, 4, 4), "w_k": matrix(rng, 6, 4),
        "w_v": matrix(rng, 6, 4), "num_heads": 2,
        "tokens": ["q0", "q1", "q2"],
        "memory_tokens": ["k0", "k1", "k2", "k3", "k4"]})))
    out.append(("batched", json.dumps({
        "x": [matrix(rng, 3, 4), matrix(rng, 3, 4)],
        "w_q": matrix(rng, 4, 4), "w_k": matrix(rng, 4, 4),
        "w_v": matrix(rng, 4, 4), "num_heads": 2,
        "key_padding_mask": [[False, False, True], [False, False, False]],
        "tokens": [["a", "b", "c"], ["d", "e", "f"]]})))
    # per-head 3-D weights, spaced and indented JSON, a tensor object
    out.append(("weights_3d", json.dumps({
        "x": matrix(rng, 3, 4),
        "w_q": [matrix(rng, 4, 2), matrix(rng, 4, 2)],
        "w_k": [matrix(rng, 4, 2), matrix(rng, 4, 2)],
        "w_v": [matrix(rng, 4, 3), matrix(rng, 4, 3)],
        "num_heads": 2}, indent=2)))
    out.append(("tensor_object", json.dumps({
        "x": {"dtype": "float32", "shape": [1, 2], "data": "AACAPwAAAEA="},
        "w_q": [[1.0], [0.5]], "w_k": [[0.25], [1.0]], "w_v": [[2.0], [1.0]]})))
    out.append(("nulls", json.dumps({
        "x": matrix(rng, 2, 2), "w_q": matrix(rng, 2, 2),
        "w_k": matrix(rng, 2, 2), "w_v": matrix(rng, 2, 2),
        "memory": None, "w_o": None, "mask": None})))
    return out


TIMES = re.compile(rb'"(elapsed_ms|analysis_ms)":[-0-9.eE+]+')


def blank(body):
    return TIMES.sub(lambda m: b'"' + m.group(1) + b'":0', body)


def post(port, body):
    data = body.encode()
    r = raw_request(port, b"POST /attend HTTP/1.1\r\nHost: t\r\n"
                    b"Content-Type: application/json\r\nContent-Length: " +
                    str(len(data)).encode() + b"\r\nConnection: close\r\n\r\n"
                    + data)
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["record", "check"])
    ap.add_argument("--attnd", required=True)
    ap.add_argument("--golden", default=os.path.join(
        os.path.dirname(__file__), "golden"))
    args = ap.parse_args()
    srv = Attnd(args.attnd, args=["--threads", "2"])
    failed = 0
    try:
        for name, body in cases():
            path = os.path.join(args.golden, name + ".json")
            r = post(srv.port, body)
            if r.status != 200:
                print("FAIL %s: status %s %r" % (name, r.status, r.body[:200]))
                failed += 1
                continue
            got = blank(r.body)
            if args.mode == "record":
                os.makedirs(args.golden, exist_ok=True)
                with open(path, "wb") as f:
                    f.write(got)
                print("recorded %s (%d bytes)" % (name, len(got)))
                continue
            with open(path, "rb") as f:
                want = f.read()
            if got != want:
                at = next((i for i in range(min(len(got), len(want)))
                           if got[i] != want[i]), min(len(got), len(want)))
                print("FAIL %s: differs at byte %d: %r vs %r" % (
                    name, at, got[max(0, at - 40):at + 40],
                    want[max(0, at - 40):at + 40]))
                failed += 1
            else:
                print("PASS %s (%d bytes, identical)" % (name, len(got)))
    finally:
        srv.stop()
    if args.mode == "check":
        print("v1 golden: %d run, %d failed" % (len(cases()), failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
