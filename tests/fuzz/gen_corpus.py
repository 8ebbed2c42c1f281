#!/usr/bin/python3
"""gen_corpus.py: writes the fuzz harnesses' seed corpus.

    /usr/bin/python3 tests/fuzz/gen_corpus.py tests/fuzz/corpus

corpus/codec/: request bodies: valid requests of every shape the contract
accepts (2-D and 3-D x, cross-attention memory, both weight layouts, GQA and
MQA, w_o and biases, masks, key padding, scale, every return_weights and
encoding, base64 tensors, tokens), invalid ones, and JSON edge cases (deep
nesting, huge exponents, invalid UTF-8, lone surrogates, duplicate keys).
corpus/http/: whole HTTP requests: each of a few bodies under the header
variants attnd must judge (methods, paths, content types, Content-Length
missing or lying, chunked, Transfer-Encoding with Content-Length, pipelining).

Deterministic (seeded); the output is committed, so regenerate only to add
seeds. Sizes stay within the harnesses' small limits (max_dim 64).

corpus/codec_found/ and corpus/http_found/ are not written here: they hold
inputs the fuzzer found in long runs (`make fuzz`), merged and minimised
with libFuzzer's -merge=1, minus the seeds; `make test-fuzz-corpus` replays
them with the seeds.
"""
import base64
import json
import os
import random
import struct
import sys

RNG = random.Random(7)


def mat(r, c):
    return [[round(RNG.uniform(-1, 1), 3) for _ in range(c)] for _ in range(r)]


def vec(n):
    return [round(RNG.uniform(-1, 1), 3) for _ in range(n)]


def b64(shape, values):
    data = struct.pack("<%df" % len(values), *values)
    return {"dtype": "float32", "shape": shape,
            "data": base64.b64encode(data).decode()}


def flat(x):
    if isinstance(x, list):
        out = []
        for e in x:
            out.extend(flat(e))
        return out
    return [x]


def request(n=3, d_model=4, h=2, g=None, d_k=2, d_v=None, m=None, d_mem=None,
            batch=None, layout3=False, w_o=False, biases=False, **extra):
    g = g or h
    d_v = d_v or d_k
    req = {}
    xs = mat(n, d_model)
    if batch:
        xs = [mat(n, d_model) for _ in range(batch)]
    req["x"] = xs
    src = d_model
    if m is not None:
        d_mem = d_mem or d_model
        mem = mat(m, d_mem)
        if batch:
            mem = [mat(m, d_mem) for _ in range(batch)]
        req["memory"] = mem
        src = d_mem
    req["num_heads"] = h
    if g != h:
        req["num_kv_heads"] = g
    if layout3:
        req["w_q"] = [mat(d_model, d_k) for _ in range(h)]
        req["w_k"] = [mat(src, d_k) for _ in range(g)]
        req["w_v"] = [mat(src, d_v) for _ in range(g)]
    else:
        req["w_q"] = mat(d_model, h * d_k)
        req["w_k"] = mat(src, g * d_k)
        req["w_v"] = mat(src, g * d_v)
    d_out = h * d_v
    if w_o:
        d_out = 3
        req["w_o"] = mat(h * d_v, d_out)
    if biases:
        req["b_q"] = vec(h * d_k)
        req["b_k"] = vec(g * d_k)
        req["b_v"] = vec(g * d_v)
        if w_o:
            req["b_o"] = vec(d_out)
    req.update(extra)
    return req


def valid_requests():
    out = {}
    out["self_2d"] = request()
    out["self_1head"] = request(h=1, d_k=4)
    out["self_3d_layout"] = request(layout3=True)
    out["gqa"] = request(h=4, g=2, d_model=8)
    out["mqa"] = request(h=4, g=1, d_model=8)
    out["cross"] = request(m=5, d_mem=6)
    out["batch"] = request(batch=2)
    out["batch_cross_padding"] = request(
        batch=2, m=4, key_padding_mask=[[False, False, True, True],
                                        [False, True, False, True]])
    out["kpm_1d"] = request(key_padding_mask=[False, True, False])
    out["kpm_all_masked"] = request(key_padding_mask=[True, True, True])
    out["causal"] = request(mask="causal")
    out["wo_biases"] = request(w_o=True, biases=True)
    out["scale"] = request(scale=0.125)
    out["mean"] = request(return_weights="mean")
    out["none"] = request(return_weights="none")
    out["base64_out"] = request(encoding="base64")
    out["base64_out_batch_mean"] = request(batch=2, encoding="base64",
                                           return_weights="mean")
    out["tokens"] = request(tokens=["a", "b\u00e9", "\ud83d\ude00"])
    out["tokens_cross"] = request(m=2, tokens=["q1", "q2", "q3"],
                                  memory_tokens=["k1", "k2"])
    out["tokens_batch"] = request(batch=2, tokens=[["a", "b", "c"],
                                                   ["d", "e", "f"]])
    out["d_v_differs"] = request(d_k=2, d_v=3)
    r = request()
    r["x"] = b64([3, 4], flat(r["x"]))
    r["w_q"] = b64([4, 4], flat(r["w_q"]))
    out["base64_in"] = r
    r = request(layout3=True, w_o=True, biases=True)
    r["w_k"] = b64([2, 4, 2], flat(r["w_k"]))
    r["b_o"] = b64([3], flat(r["b_o"]))
    out["base64_in_3d_bias"] = r
    r = request(batch=2, m=2)
    r["memory"] = b64([2, 2, 4], flat(r["memory"]))
    out["base64_in_batch_memory"] = r
    out["n1"] = request(n=1, d_model=1, h=1, d_k=1)
    out["zeros"] = {"x": [[0, 0]], "w_q": [[0], [0]], "w_k": [[0], [0]],
                    "w_v": [[0], [0]]}
    out["exponents"] = {"x": [[1e-45, -3.4e3]], "w_q": [[1E0], [-0.0]],
                        "w_k": [[2e-1], [1e+1]], "w_v": [[5], [6]]}
    return out


def invalid_requests():
    base = request()
    out = {}
    for f in ("x", "w_q", "w_k", "w_v"):
        r = dict(base)
        del r[f]
        out["missing_" + f] = r
    out["ragged"] = dict(base, x=[[1, 2, 3, 4], [1, 2]])
    out["empty_x"] = dict(base, x=[])
    out["rank1_x"] = dict(base, x=[1, 2, 3])
    out["string_num"] = dict(base, scale="1")
    out["bad_enum"] = dict(base, mask="diagonal")
    out["bad_heads"] = dict(base, num_heads=3)
    out["kv_heads_bad"] = dict(base, num_kv_heads=0)
    out["kpm_len"] = dict(base, key_padding_mask=[True])
    out["b64_bad_len"] = dict(base, x={"dtype": "float32", "shape": [3, 4],
                                       "data": "AAAA"})
    out["b64_bad_alpha"] = dict(base, x={"dtype": "float32", "shape": [1, 1],
                                         "data": "AA*A"})
    out["b64_dtype"] = dict(base, x={"dtype": "float64", "shape": [1, 1],
                                     "data": "AAAAAAAAAAA="})
    out["tokens_len"] = dict(base, tokens=["a"])
    out["big_dims"] = dict(base, x={"dtype": "float32",
                                    "shape": [100000, 100000], "data": ""})
    return out


def raw_bodies():
    return {
        "deep_arrays": b"[" * 600 + b"]" * 600,
        "deep_objects": b'{"x":' * 600 + b"1" + b"}" * 600,
        "deep_in_field": b'{"tokens":' + b"[" * 300 + b"]" * 300 + b"}",
        "huge_exponent": b'{"x":[[1e999999999999]],"w_q":[[1]],"w_k":[[1]],'
                         b'"w_v":[[1]]}',
        "tiny_exponent": b'{"x":[[1e-999999999999]],"w_q":[[1]],'
                         b'"w_k":[[1]],"w_v":[[1]]}',
        "float32_overflow": b'{"x":[[3.5e38]],"w_q":[[1]],"w_k":[[1]],'
                            b'"w_v":[[1]]}',
        "long_number": b'{"scale":0.' + b"1" * 5000 + b'}',
        "invalid_utf8": b'{"tokens":["\xff\xfe"]}',
        "overlong_utf8": b'{"tokens":["\xc0\xaf"]}',
        "lone_surrogate": b'{"tokens":["\\ud800"]}',
        "lone_low_surrogate": b'{"tokens":["\\udc00x"]}',
        "duplicate_keys": b'{"x":[[1]],"x":[[2]],"w_q":[[1]],"w_k":[[1]],'
                          b'"w_v":[[1]]}',
        "nul_in_string": b'{"tokens":["a\\u0000b"]}',
        "raw_control": b'{"tokens":["a\x01b"]}',
        "bom": b'\xef\xbb\xbf{}',
        "trailing": b'{} {}',
        "empty": b'',
        "ws_only": b' \n\t ',
        "nan_literal": b'{"scale":NaN}',
        "minus_zero_heads": b'{"num_heads":-0}',
        "heads_float": b'{"num_heads":2.0}',
        "heads_huge": b'{"num_heads":18446744073709551617}',
        "unknown_field": b'{"foo":{"bar":[1,{"baz":null}]}}',
    }


def chunked(body, size=7):
    out = b""
    for i in range(0, len(body), size):
        part = body[i:i + size]
        out += b"%x\r\n" % len(part) + part + b"\r\n"
    return out + b"0\r\n\r\n"


def http_requests(body):
    post = b"POST /attend HTTP/1.1\r\nHost: f\r\n"
    json_ct = b"Content-Type: application/json\r\n"
    cl = b"Content-Length: %d\r\n" % len(body)
    out = {
        "ok": post + json_ct + cl + b"Connection: close\r\n\r\n" + body,
        "keepalive_pipelined": post + json_ct + cl + b"\r\n" + body +
        b"GET /healthz HTTP/1.1\r\nHost: f\r\n\r\n",
        "http10": b"POST /attend HTTP/1.0\r\n" + json_ct + cl + b"\r\n" +
        body,
        "chunked": post + json_ct + b"Transfer-Encoding: chunked\r\n\r\n" +
        chunked(body),
        "te_and_cl": post + json_ct + cl +
        b"Transfer-Encoding: chunked\r\n\r\n" + chunked(body),
        "te_gzip": post + json_ct + b"Transfer-Encoding: gzip\r\n\r\n" + body,
        "cl_short": post + json_ct +
        b"Content-Length: %d\r\n\r\n" % (len(body) // 2) + body,
        "cl_long": post + json_ct +
        b"Content-Length: %d\r\n\r\n" % (len(body) + 100) + body,
        "cl_huge": post + json_ct +
        b"Content-Length: 99999999999999999999\r\n\r\n" + body,
        "cl_negative": post + json_ct + b"Content-Length: -1\r\n\r\n" + body,
        "cl_twice": post + json_ct + cl + cl + b"\r\n" + body,
        "no_cl": post + json_ct + b"\r\n" + body,
        "text_plain": post + b"Content-Type: text/plain\r\n" + cl +
        b"\r\n" + body,
        "json_suffix": post +
        b"Content-Type: application/vnd.x+json; charset=utf-8\r\n" + cl +
        b"\r\n" + body,
        "put": b"PUT /attend HTTP/1.1\r\nHost: f\r\n" + json_ct + cl +
        b"\r\n" + body,
    }
    return out


def http_misc():
    get = b"GET %s HTTP/1.1\r\nHost: f\r\nConnection: close\r\n\r\n"
    out = {}
    for name, path in (("healthz", b"/healthz"), ("livez", b"/livez"),
                       ("readyz", b"/readyz"), ("metrics", b"/metrics"),
                       ("openapi", b"/openapi.json"), ("root", b"/"),
                       ("unknown", b"/nope"), ("long_path", b"/" + b"a" * 4000),
                       ("query", b"/healthz?x=1&y=%00"),
                       ("dotdot", b"/../../etc/passwd")):
        out["get_" + name] = get % path
    out["options"] = (b"OPTIONS /attend HTTP/1.1\r\nHost: f\r\n"
                      b"Origin: http://a\r\n"
                      b"Access-Control-Request-Method: POST\r\n\r\n")
    out["head"] = b"HEAD /healthz HTTP/1.1\r\nHost: f\r\n\r\n"
    out["delete_healthz"] = b"DELETE /healthz HTTP/1.1\r\nHost: f\r\n\r\n"
    out["garbage"] = b"\x00\x01\x02 not http\r\n\r\n"
    out["no_version"] = b"GET /healthz\r\n\r\n"
    out["http2_preface"] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    out["header_no_colon"] = b"GET /healthz HTTP/1.1\r\nHost f\r\n\r\n"
    out["huge_header"] = (b"GET /healthz HTTP/1.1\r\nX: " + b"a" * 20000 +
                          b"\r\n\r\n")
    out["bare_lf"] = b"GET /healthz HTTP/1.1\nHost: f\n\n"
    return out


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "tests/fuzz/corpus"
    codec_dir = os.path.join(root, "codec")
    http_dir = os.path.join(root, "http")
    os.makedirs(codec_dir, exist_ok=True)
    os.makedirs(http_dir, exist_ok=True)
    bodies = {}
    for name, req in valid_requests().items():
        bodies["valid_" + name] = json.dumps(req).encode()
    for name, req in invalid_requests().items():
        bodies["invalid_" + name] = json.dumps(req).encode()
    for name, raw in raw_bodies().items():
        bodies["json_" + name] = raw
    for name, body in bodies.items():
        with open(os.path.join(codec_dir, name + ".json"), "wb") as f:
            f.write(body)
    for bname in ("valid_self_2d", "valid_base64_out", "invalid_ragged",
                  "json_deep_arrays"):
        for name, raw in http_requests(bodies[bname]).items():
            with open(os.path.join(http_dir, "%s_%s.http" % (name, bname)),
                      "wb") as f:
                f.write(raw)
    for name, raw in http_misc().items():
        with open(os.path.join(http_dir, name + ".http"), "wb") as f:
            f.write(raw)
    print("%d codec seeds, %d http seeds" % (len(os.listdir(codec_dir)),
                                              len(os.listdir(http_dir))))


if __name__ == "__main__":
    main()
