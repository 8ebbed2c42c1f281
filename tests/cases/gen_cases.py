#!/usr/bin/python3
"""gen_cases.py: writes the bad-input table tests/cases/invalid/<name>/.

    /usr/bin/python3 tests/cases/gen_cases.py tests/cases/invalid

The committed files are the table; this script is how they were written and
how new rows are added (edit ROWS, rerun, review the diff). Each case folder:

  request   the body bytes sent (may be empty)
  expected  `status N`, then optional `code C`, `field /json/pointer`,
            `header Name: value` lines; `field` absent means the response
            must carry no pointer (absent or ""); `status none` means the
            server must close the connection without answering;
            `message S` lines: S must occur in error.message (ignoring
            case; checked by tests/families/run_families.py --messages,
            as tests/robust/run_cases.py does not read them yet)
  method    optional, default POST
  path      optional, default /attend
  headers   optional: the header lines sent instead of the defaults
            (Content-Type: application/json and Content-Length); `{len}`
            stands for the body's length
  pad       optional: that many spaces are put before the body (large
            bodies without committing large files)
  chunked   optional (empty): the body is sent chunked
            (Transfer-Encoding: chunked unless `headers` says otherwise)

The runner (tests/robust/run_cases.py) starts attnd with
--max-body-bytes 1048576 --timeout 3 and every other limit at its default,
so the work bombs below test the shipped defaults.
"""
import base64
import copy
import json
import os
import shutil
import struct
import sys


def mat(r, c, start=0.0):
    return [[round(start + 0.01 * (i * c + j), 3) for j in range(c)]
            for i in range(r)]


def b64(shape, values, dtype="float32"):
    data = struct.pack("<%df" % len(values), *values)
    return {"dtype": dtype, "shape": shape,
            "data": base64.b64encode(data).decode()}


# The base request: n = 3, d_model = 4, h = g = 2, d_k = d_v = 2.
BASE = {"x": mat(3, 4), "num_heads": 2, "w_q": mat(4, 4, 0.1),
        "w_k": mat(4, 4, 0.2), "w_v": mat(4, 4, 0.3)}


def req(**changes):
    r = copy.deepcopy(BASE)
    for k, v in changes.items():
        if v is DROP:
            r.pop(k, None)
        else:
            r[k] = v
    return r


DROP = object()


def with_elem(field, path, value, base=None):
    r = copy.deepcopy(base or BASE)
    t = r[field]
    for p in path[:-1]:
        t = t[p]
    t[path[-1]] = value
    return r


def err(status, code, field=None):
    e = {"status": status, "code": code}
    if field is not None:
        e["field"] = field
    return e


def bad(field=None):
    return err(422, "invalid_request", field)


def big(field=None):
    return err(413, "too_large", field)


BATCH_X = [mat(3, 4), mat(3, 4, 1)]
CROSS = req(memory=mat(5, 6), w_k=mat(6, 4), w_v=mat(6, 4))
L3 = req(w_q=[mat(4, 2), mat(4, 2, 1)], w_k=[mat(4, 2), mat(4, 2, 2)],
         w_v=[mat(4, 2), mat(4, 2, 3)])
GOOD_B64 = b64([3, 4], [float(i) for i in range(12)])


def b64_x(**tensor):
    t = dict(GOOD_B64)
    for k, v in tensor.items():
        if v is DROP:
            t.pop(k)
        else:
            t[k] = v
    return req(x=t)


def raw(s):
    return s.encode() if isinstance(s, str) else s


def chunk_encode(body, size=16):
    out = b""
    for i in range(0, len(body), size):
        part = body[i:i + size]
        out += b"%x\r\n" % len(part) + part + b"\r\n"
    return out + b"0\r\n\r\n"


# Work bombs: small bodies asking for far more than the defaults admit.
# 8192 queries and keys, 128 heads of d_k = 1: 128 * 8192^2 = 8.6e9 map
# values (34 GB) from a body of ~50 kB.
BOMB_MAPS = {"x": [[0]] * 8192, "num_heads": 128, "w_q": [[1] * 128],
             "w_k": [[1] * 128], "w_v": [[1] * 128]}
# Outputs only, but 16384^2 * 128 heads * (d_k + d_v = 8) * 2 = 5.5e11 flops.
BOMB_FLOPS = {"x": [[0]] * 16384, "num_heads": 128, "w_q": [[1] * 512],
              "w_k": [[1] * 512], "w_v": [[1] * 512],
              "return_weights": "none"}

ROWS = [
    # -- missing fields ---------------------------------------------------
    ("missing_x", req(x=DROP), bad("/x")),
    ("missing_w_q", req(w_q=DROP), bad("/w_q")),
    ("missing_w_k", req(w_k=DROP), bad("/w_k")),
    ("missing_w_v", req(w_v=DROP), bad("/w_v")),
    ("empty_object", {}, bad("/x")),
    ("top_level_array", [BASE], bad()),
    ("top_level_number", 1, bad()),
    ("b64_missing_dtype", b64_x(dtype=DROP), bad("/x")),
    ("b64_missing_shape", b64_x(shape=DROP), bad("/x")),
    ("b64_missing_data", b64_x(data=DROP), bad("/x")),
    # -- wrong types ------------------------------------------------------
    ("x_string", req(x="abc"), bad("/x")),
    ("x_number", req(x=5), bad("/x")),
    ("x_null", req(x=None), bad("/x")),
    ("x_elem_string", with_elem("x", [1, 2], "0.5"), bad("/x/1/2")),
    ("x_elem_null", with_elem("x", [0, 0], None), bad("/x/0/0")),
    ("x_elem_bool", with_elem("x", [2, 3], True), bad("/x/2/3")),
    ("x_elem_object", with_elem("x", [2, 1], {}), bad("/x/2/1")),
    ("w_q_elem_string", with_elem("w_q", [3, 1], "1"), bad("/w_q/3/1")),
    ("memory_string", req(memory="x"), bad("/memory")),
    ("num_heads_string", req(num_heads="2"), bad("/num_heads")),
    ("num_heads_fraction", req(num_heads=2.5), bad("/num_heads")),
    ("num_heads_bool", req(num_heads=True), bad("/num_heads")),
    ("num_kv_heads_string", req(num_kv_heads="1"), bad("/num_kv_heads")),
    ("scale_string", req(scale="0.5"), bad("/scale")),
    ("mask_number", req(mask=1), bad("/mask")),
    ("mask_bool", req(mask=True), bad("/mask")),
    ("kpm_numbers", req(key_padding_mask=[1, 0, 0]),
     bad("/key_padding_mask/0")),
    ("kpm_elem_null", req(key_padding_mask=[False, None, False]),
     bad("/key_padding_mask/1")),
    ("kpm_string", req(key_padding_mask="none"), bad("/key_padding_mask")),
    ("tokens_elem_number", req(tokens=["a", 2, "c"]), bad("/tokens/1")),
    ("tokens_string", req(tokens="abc"), bad("/tokens")),
    ("memory_tokens_elem_null", req(memory_tokens=["a", "b", None]),
     bad("/memory_tokens/2")),
    ("return_weights_bool", req(return_weights=False),
     bad("/return_weights")),
    ("encoding_number", req(encoding=1), bad("/encoding")),
    ("b64_data_number", b64_x(data=5), bad("/x/data")),
    ("b64_shape_string", b64_x(shape="3x4"), bad("/x/shape")),
    # -- ragged -----------------------------------------------------------
    ("ragged_x", with_elem("x", [1], [1, 2, 3]), bad("/x/1")),
    ("ragged_x_longer", with_elem("x", [2], [1, 2, 3, 4, 5]), bad("/x/2")),
    ("ragged_w_q", with_elem("w_q", [2], [1, 2]), bad("/w_q/2")),
    ("ragged_w_v", with_elem("w_v", [3], [1, 2, 3]), bad("/w_v/3")),
    ("ragged_batch_x", req(x=[mat(3, 4), mat(2, 4)]), bad("/x/1")),
    ("ragged_batch_row", req(x=[mat(3, 4), [[1, 2, 3, 4], [1, 2, 3, 4],
                                            [1, 2, 3]]]), bad("/x/1/2")),
    ("ragged_w_q_3d", with_elem("w_q", [1], mat(4, 3), base=L3),
     bad("/w_q/1/0")),
    ("mixed_depth_x", with_elem("x", [0, 1], [2]), bad("/x/0/1")),
    ("mixed_depth_row", with_elem("x", [1], 7), bad("/x/1")),
    ("ragged_kpm_batch", req(x=BATCH_X,
                             key_padding_mask=[[False, False, False],
                                               [False, True]]),
     bad("/key_padding_mask/1")),
    # -- empty ------------------------------------------------------------
    ("empty_x", req(x=[]), bad("/x")),
    ("empty_x_row", req(x=[[], [], []]), bad("/x/0")),
    ("empty_w_q", req(w_q=[]), bad("/w_q")),
    ("empty_memory", req(memory=[]), bad("/memory")),
    ("empty_batch", req(x=[[]]), bad("/x/0")),
    ("empty_tokens", req(tokens=[]), bad("/tokens")),
    ("b64_empty_shape", b64_x(shape=[], data=""), bad("/x/shape")),
    ("b64_zero_dim", b64_x(shape=[3, 0], data=""), bad("/x/shape/1")),
    # -- wrong rank -------------------------------------------------------
    ("x_rank1", req(x=[1, 2, 3, 4]), bad("/x")),
    ("x_rank4", req(x=[BATCH_X]), bad("/x")),
    ("w_q_rank1", req(w_q=[1, 2, 3, 4]), bad("/w_q")),
    ("w_q_rank4", req(w_q=[[mat(4, 2)]]), bad("/w_q")),
    ("w_o_rank3", req(w_o=[mat(4, 4)]), bad("/w_o")),
    ("b_q_rank2", req(b_q=[[0.1, 0.2, 0.3, 0.4]]), bad("/b_q")),
    ("kpm_rank2_for_2d_x", req(key_padding_mask=[[False, False, False]]),
     bad("/key_padding_mask")),
    ("memory_rank3_for_2d_x", req(memory=[mat(3, 4)]), bad("/memory")),
    ("memory_rank2_for_3d_x", req(x=BATCH_X, memory=mat(3, 4)),
     bad("/memory")),
    ("b64_rank1_for_x", b64_x(shape=[12]), bad("/x/shape")),
    ("b64_rank4_for_x", b64_x(shape=[1, 1, 3, 4]), bad("/x/shape/3")),
    # -- dimension mismatches ---------------------------------------------
    ("w_q_rows_ne_d_model", req(w_q=mat(3, 4)), bad("/w_q")),
    ("w_k_rows_ne_d_mem", req(w_k=mat(5, 4)), bad("/w_k")),
    ("w_v_rows_ne_d_mem", req(w_v=mat(3, 4)), bad("/w_v")),
    ("cross_w_k_rows_ne_d_mem", req(memory=mat(5, 6), w_k=mat(4, 4),
                                    w_v=mat(6, 4)), bad("/w_k")),
    ("w_k_cols_ne_g_dk", req(w_k=mat(4, 6)), bad("/w_k/0")),
    ("w_v_cols_not_div_g", req(w_v=mat(4, 3)), bad("/w_v/0")),
    ("w_q_cols_not_div_h", req(w_q=mat(4, 5)), bad("/w_q/0")),
    ("w_o_rows_ne_h_dv", req(w_o=mat(3, 2)), bad("/w_o")),
    ("b_q_len", req(b_q=[0.1, 0.2, 0.3]), bad("/b_q")),
    ("b_k_len", req(b_k=[0.1] * 5), bad("/b_k")),
    ("b_v_len", req(b_v=[0.1]), bad("/b_v")),
    ("b_o_len_with_w_o", req(w_o=mat(4, 3), b_o=[0.1] * 4), bad("/b_o")),
    ("b_o_len_without_w_o", req(b_o=[0.1] * 3), bad("/b_o")),
    ("memory_batch_ne_x", req(x=BATCH_X, memory=[mat(3, 4)] * 3),
     bad("/memory")),
    ("kpm_len_ne_m", req(key_padding_mask=[True, False]),
     bad("/key_padding_mask")),
    ("kpm_len_ne_m_cross", dict(CROSS, key_padding_mask=[False] * 3),
     bad("/key_padding_mask")),
    ("kpm_batch_ne_b", req(x=BATCH_X, key_padding_mask=[[False] * 3] * 3),
     bad("/key_padding_mask")),
    ("w_q_3d_heads_ne_h", req(w_q=[mat(4, 2)] * 3, w_k=[mat(4, 2)] * 2,
                              w_v=[mat(4, 2)] * 2), bad("/w_q")),
    ("w_k_3d_heads_ne_g", dict(L3, w_k=[mat(4, 2)] * 3), bad("/w_k")),
    ("w_q_3d_rows_ne_d_model", dict(L3, w_q=[mat(5, 2)] * 2),
     bad("/w_q/0")),
    ("w_k_3d_dk_ne_w_q", dict(L3, w_k=[mat(4, 3)] * 2), bad("/w_k/0/0")),
    # -- heads ------------------------------------------------------------
    ("num_heads_zero", req(num_heads=0), bad("/num_heads")),
    ("num_heads_negative", req(num_heads=-2), bad("/num_heads")),
    ("num_kv_heads_zero", req(num_kv_heads=0), bad("/num_kv_heads")),
    ("num_kv_heads_over_h", req(num_kv_heads=4, w_k=mat(4, 8),
                                w_v=mat(4, 8)), bad("/num_kv_heads")),
    ("heads_not_divisible", req(num_heads=4, num_kv_heads=3,
                                w_q=mat(4, 8), w_k=mat(4, 6),
                                w_v=mat(4, 6)), bad("/num_kv_heads")),
    # -- numbers ----------------------------------------------------------
    ("x_float32_overflow", with_elem("x", [1, 2], 3.5e38), bad("/x/1/2")),
    ("w_q_float32_overflow_neg", with_elem("w_q", [0, 3], -1e39),
     bad("/w_q/0/3")),
    ("x_double_overflow", raw(json.dumps(BASE).replace(
        '"x": [[0.0,', '"x": [[1e400,', 1)), bad("/x/0/0")),
    ("b_v_float32_overflow", req(b_v=[0, 0, 0, 4e38]), bad("/b_v/3")),
    ("scale_zero", req(scale=0), bad("/scale")),
    ("scale_negative", req(scale=-1), bad("/scale")),
    ("scale_float32_overflow", req(scale=1e39), bad("/scale")),
    ("nan_literal", raw(json.dumps(req(scale=0.5)).replace("0.5", "NaN")),
     err(400, "invalid_json")),
    ("infinity_literal", raw(json.dumps(req(scale=0.5)).replace(
        "0.5", "Infinity")), err(400, "invalid_json")),
    ("b64_nan_value", b64_x(data=base64.b64encode(
        struct.pack("<12f", *([0.0] * 11 + [float("nan")]))).decode()),
     bad("/x/data")),
    ("b64_inf_value", b64_x(data=base64.b64encode(
        struct.pack("<12f", *([float("inf")] + [0.0] * 11))).decode()),
     bad("/x/data")),
    # products beyond float32 are computed again in float64; an output
    # beyond it (values of 4e60) has no JSON answer
    ("products_overflow", req(x=[[1e30] * 4] * 3, w_v=[[1e30] * 4] * 4),
     bad()),
    # -- enums ------------------------------------------------------------
    ("mask_unknown", req(mask="diagonal"), bad("/mask")),
    ("mask_case", req(mask="Causal"), bad("/mask")),
    ("return_weights_unknown", req(return_weights="all"),
     bad("/return_weights")),
    ("encoding_unknown", req(encoding="hex"), bad("/encoding")),
    ("b64_dtype_float64", b64_x(dtype="float64"), bad("/x/dtype")),
    ("b64_dtype_float16", b64_x(dtype="float16"), bad("/x/dtype")),
    # -- base64 -----------------------------------------------------------
    ("b64_length_not_multiple_of_4", b64_x(data=GOOD_B64["data"][:-1]),
     bad("/x/data")),
    ("b64_alphabet", b64_x(data="*" + GOOD_B64["data"][1:]), bad("/x/data")),
    ("b64_urlsafe_alphabet", b64_x(shape=[1, 1], data="__8_"),
     bad("/x/data")),
    ("b64_bad_padding", b64_x(shape=[1, 1], data="A==="), bad("/x/data")),
    ("b64_data_short_for_shape", b64_x(shape=[3, 5]), bad("/x/data")),
    ("b64_data_long_for_shape", b64_x(shape=[2, 4]), bad("/x/data")),
    ("b64_shape_negative", b64_x(shape=[-3, 4]), bad("/x/shape/0")),
    ("b64_shape_fraction", b64_x(shape=[3, 4.5]), bad("/x/shape/1")),
    ("b64_shape_wrong_for_w_q", req(w_q=b64([16], [0.0] * 16)),
     bad("/w_q/shape")),
    ("b64_shape_product_overflow",
     b64_x(shape=[4294967296, 4294967296], data=""), bad("/x/shape")),
    # -- token counts -----------------------------------------------------
    ("tokens_count_ne_n", req(tokens=["a", "b"]), bad("/tokens")),
    ("tokens_batch_count_ne_n", req(x=BATCH_X, tokens=[["a", "b", "c"],
                                                       ["d", "e"]]),
     bad("/tokens/1")),
    ("tokens_batch_ne_b", req(x=BATCH_X, tokens=[["a", "b", "c"]]),
     bad("/tokens")),
    ("memory_tokens_count_ne_m", dict(CROSS, memory_tokens=["a"] * 3),
     bad("/memory_tokens")),
    # -- limits and work bombs (413, the shipped defaults) -----------------
    ("bomb_maps_per_head", BOMB_MAPS, big()),
    ("bomb_maps_mean", dict(BOMB_MAPS, return_weights="mean",
                            x=[[0]] * 16384), big()),
    ("bomb_flops", BOMB_FLOPS, big()),
    ("dim_over_max_dim_n", req(x=[[0]] * 16385, w_q=[[0] * 4],
                               w_k=[[0] * 4], w_v=[[0] * 4]), big()),
    ("dim_over_max_dim_m", req(memory=[[0]] * 16385, w_k=[[0] * 4],
                               w_v=[[0] * 4]), big()),
    ("heads_over_max_heads", req(num_heads=129, x=[[0]], w_q=[[0] * 129],
                                 w_k=[[0] * 129], w_v=[[0] * 129]),
     big()),
    ("batch_over_max_batch", req(x=[[[0]]] * 257, w_q=[[0]], w_k=[[0]],
                                 w_v=[[0]], num_heads=1), big()),
    ("b64_shape_over_max_dim", req(x=b64([16385, 1], [0.0] * 16385),
                                   w_q=[[0] * 4], w_k=[[0] * 4],
                                   w_v=[[0] * 4]), big()),
]

# -- v2 (the contract's "v2 additions") ------------------------------------
# The same base request; the pointer names the most specific offending
# part: the element for a bad entry of an array, the member for a bad
# member of a v2 object (/rope/dim, /window/left), the array whose length
# is wrong (/w_qkv for its outer length, /w_qkv/0 for its rows' length,
# as w_q_rows_ne_d_model and w_k_cols_ne_g_dk above, whatever the
# weight_layout), the field itself for a shape that matches none of the
# accepted forms (as w_q_3d_heads_ne_h above), and the field that should
# not be there of an exclusive pair (w_q beside w_qkv).
# `message` entries: substrings the error message must contain
# (case-insensitive).

def msg(expected, *parts):
    return dict(expected, message=list(parts))


def nonfinite_token(token, field, path, sentinel=12345.5):
    """The base request with one number of `field` written as a bare
    token (NaN, Infinity, -Infinity), which JSON does not have."""
    text = json.dumps(with_elem(field, path, sentinel))
    assert text.count(repr(sentinel)) == 1
    return raw(text.replace(repr(sentinel), token))


# w_qkv in the in_out layout: [d_model][(h + 2g) * d_k] = [4][12].
QKV = req(w_q=DROP, w_k=DROP, w_v=DROP, w_qkv=mat(4, 12))
QKV_OUT_IN = dict(QKV, weight_layout="out_in", w_qkv=mat(12, 4))

V2_ROWS = [
    # -- rope ---------------------------------------------------------------
    ("v2_rope_dim_odd", req(rope={"dim": 1}), bad("/rope/dim")),
    ("v2_rope_dim_over_d_k", req(rope={"dim": 4}), bad("/rope/dim")),
    ("v2_rope_inv_freq_len", req(rope={"inv_freq": [1.0, 0.5]}),
     bad("/rope/inv_freq")),
    ("v2_rope_inv_freq_len_partial", req(rope={"dim": 2,
                                               "inv_freq": [1.0, 0.5]}),
     bad("/rope/inv_freq")),
    ("v2_rope_theta_zero", req(rope={"theta": 0}), bad("/rope/theta")),
    ("v2_rope_theta_string", req(rope={"theta": "10000"}),
     bad("/rope/theta")),
    ("v2_rope_style_unknown", req(rope={"style": "neox"}),
     bad("/rope/style")),
    ("v2_rope_attention_factor_negative",
     req(rope={"attention_factor": -1}), bad("/rope/attention_factor")),
    ("v2_rope_unknown_key", req(rope={"thetaa": 10000}),
     msg(bad("/rope/thetaa"), "did you mean", "theta")),
    ("v2_rope_not_object", req(rope=True), bad("/rope")),
    # -- alibi --------------------------------------------------------------
    ("v2_alibi_slopes_len", req(alibi={"slopes": [0.5]}),
     bad("/alibi/slopes")),
    ("v2_alibi_slopes_elem_string", req(alibi={"slopes": [0.5, "x"]}),
     bad("/alibi/slopes/1")),
    ("v2_alibi_unknown_key", req(alibi={"slope": [0.5, 0.25]}),
     msg(bad("/alibi/slope"), "did you mean", "slopes")),
    ("v2_alibi_string", req(alibi="bloom"), bad("/alibi")),
    # -- positions ----------------------------------------------------------
    ("v2_positions_negative", req(positions=[0, -1, 2]),
     bad("/positions/1")),
    ("v2_positions_fraction", req(positions=[0, 1.5, 2]),
     bad("/positions/1")),
    ("v2_positions_string_elem", req(positions=[0, 1, "2"]),
     bad("/positions/2")),
    ("v2_positions_len", req(positions=[0, 1]), bad("/positions")),
    ("v2_positions_batch_ne_b", req(x=BATCH_X, positions=[[0, 1, 2]] * 3),
     bad("/positions")),
    ("v2_positions_batch_row_len", req(x=BATCH_X,
                                       positions=[[0, 1, 2], [0, 1]]),
     bad("/positions/1")),
    ("v2_key_positions_len", dict(CROSS, key_positions=[0, 1, 2]),
     bad("/key_positions")),
    ("v2_key_positions_negative", dict(CROSS, key_positions=[0, 1, 2, -3,
                                                              4]),
     bad("/key_positions/3")),
    # -- attn_bias / attn_mask ------------------------------------------------
    ("v2_attn_bias_shape", req(attn_bias=mat(2, 3)), bad("/attn_bias")),
    ("v2_attn_bias_heads_ne_h", req(attn_bias=[mat(3, 3)] * 3),
     bad("/attn_bias")),
    ("v2_attn_bias_4d_for_2d_x", req(attn_bias=[[mat(3, 3)] * 2]),
     bad("/attn_bias")),
    ("v2_attn_bias_batch_ne_b", req(x=BATCH_X,
                                    attn_bias=[[mat(3, 3)] * 2] * 3),
     bad("/attn_bias")),
    ("v2_attn_bias_ragged", req(attn_bias=[[0, 0, 0], [0, 0], [0, 0, 0]]),
     bad("/attn_bias/1")),
    ("v2_attn_bias_bool", req(attn_bias=[[True] * 3] * 3),
     bad("/attn_bias/0/0")),
    ("v2_attn_bias_float32_overflow",
     req(attn_bias=[[0, 0, 0], [0, 1e39, 0], [0, 0, 0]]),
     bad("/attn_bias/1/1")),
    ("v2_attn_mask_shape", req(attn_mask=[[False] * 2] * 3),
     bad("/attn_mask")),
    ("v2_attn_mask_heads_ne_h", req(attn_mask=[[[False] * 3] * 3] * 4),
     bad("/attn_mask")),
    ("v2_attn_mask_numbers", req(attn_mask=[[0, 1, 0]] * 3),
     bad("/attn_mask/0/0")),
    # -- window / global_tokens ---------------------------------------------
    ("v2_window_left_negative", req(window={"left": -1}),
     bad("/window/left")),
    ("v2_window_right_negative", req(window={"left": 1, "right": -2}),
     bad("/window/right")),
    ("v2_window_fraction", req(window={"right": 1.5}),
     bad("/window/right")),
    ("v2_window_unknown_key", req(window={"lft": 2}),
     msg(bad("/window/lft"), "did you mean", "left")),
    ("v2_window_number", req(window=2), bad("/window")),
    ("v2_global_token_out_of_range", req(window={"left": 1, "right": 1},
                                         global_tokens=[0, 7]),
     bad("/global_tokens/1")),
    ("v2_global_token_negative", req(window={"left": 1},
                                     global_tokens=[-1]),
     bad("/global_tokens/0")),
    # -- softcap --------------------------------------------------------------
    ("v2_softcap_zero", req(softcap=0), bad("/softcap")),
    ("v2_softcap_negative", req(softcap=-50), bad("/softcap")),
    ("v2_softcap_string", req(softcap="50"), bad("/softcap")),
    # -- qk_norm --------------------------------------------------------------
    ("v2_qk_norm_q_weight_len",
     req(qk_norm={"q_weight": [1, 1, 1], "k_weight": [1, 1]}),
     bad("/qk_norm/q_weight")),
    ("v2_qk_norm_k_weight_len_all",
     req(qk_norm={"q_weight": [1] * 4, "k_weight": [1] * 2, "over": "all"}),
     bad("/qk_norm/k_weight")),
    ("v2_qk_norm_over_unknown",
     req(qk_norm={"q_weight": [1, 1], "k_weight": [1, 1], "over": "layer"}),
     bad("/qk_norm/over")),
    ("v2_qk_norm_eps_negative",
     req(qk_norm={"q_weight": [1, 1], "k_weight": [1, 1], "eps": -1e-6}),
     bad("/qk_norm/eps")),
    ("v2_qk_norm_unknown_key",
     req(qk_norm={"q_weight": [1, 1], "k_weight": [1, 1], "oevr": "all"}),
     msg(bad("/qk_norm/oevr"), "did you mean", "over")),
    # -- weight layout, packed projections, value ---------------------------
    ("v2_weight_layout_unknown", req(weight_layout="row_major"),
     bad("/weight_layout")),
    ("v2_weight_layout_case", req(weight_layout="Out_In"),
     bad("/weight_layout")),
    # shapes that would be valid in_out, so that ignoring weight_layout
    # does not pass them
    ("v2_out_in_w_q_in_ne_d_model", req(weight_layout="out_in",
                                        w_q=mat(4, 6)), bad("/w_q/0")),
    ("v2_out_in_w_k_outputs_ne_g_dk", dict(CROSS, weight_layout="out_in",
                                           w_k=mat(6, 6), w_v=mat(4, 6)),
     bad("/w_k")),
    ("v2_w_qkv_with_w_q", dict(QKV, w_q=mat(4, 4, 0.1)), bad("/w_q")),
    ("v2_b_qkv_with_b_q", dict(QKV, b_qkv=[0.0] * 12, b_q=[0.0] * 4),
     bad("/b_q")),
    ("v2_w_qkv_rows_not_divisible", dict(QKV_OUT_IN, w_qkv=mat(10, 4)),
     bad("/w_qkv")),
    ("v2_w_qkv_cols_not_divisible", dict(QKV, w_qkv=mat(4, 10)),
     bad("/w_qkv/0")),
    ("v2_w_qkv_in_ne_d_model", dict(QKV_OUT_IN, w_qkv=mat(12, 5)),
     bad("/w_qkv/0")),
    ("v2_b_qkv_len", dict(QKV, b_qkv=[0.0] * 11), bad("/b_qkv")),
    ("v2_w_qkv_memory_width_ne_d_model", dict(QKV, memory=mat(5, 6)),
     bad("/memory")),
    ("v2_qkv_order_unknown", dict(QKV, qkv_order="kqv"), bad("/qkv_order")),
    ("v2_qkv_order_per_head_gqa", dict(QKV, num_kv_heads=1,
                                       w_qkv=mat(4, 8),
                                       qkv_order="per_head"),
     bad("/qkv_order")),
    ("v2_value_rows_ne_m", dict(CROSS, value=mat(4, 3), w_v=mat(3, 4)),
     bad("/value")),
    ("v2_value_w_v_rows_ne_d_val", dict(CROSS, value=mat(5, 3)),
     bad("/w_v")),
    # -- extras -------------------------------------------------------------
    ("v2_value_norms_string", req(value_norms="yes"), bad("/value_norms")),
    ("v2_return_qk_number", req(return_qk=1), bad("/return_qk")),
    # -- unknown fields -----------------------------------------------------
    ("v2_unknown_field_typo", req(key_pading_mask=[False, False, True]),
     msg(bad("/key_pading_mask"), "did you mean", "key_padding_mask")),
    ("v2_unknown_field_typo_num_heads", req(num_head=2),
     msg(bad("/num_head"), "did you mean", "num_heads")),
    ("v2_unknown_field_far", req(temperature=0.7), bad("/temperature")),
    ("v2_tensor_object_unknown_key", b64_x(order="C"), bad("/x/order")),
    # -- non-finite tokens (400 invalid_json, like nan_literal above) -------
    ("v2_nan_token_in_x", nonfinite_token("NaN", "x", [1, 2]),
     msg(err(400, "invalid_json"), "NaN")),
    ("v2_infinity_token_in_w_q", nonfinite_token("Infinity", "w_q", [0, 3]),
     msg(err(400, "invalid_json"), "Infinity")),
    ("v2_minus_infinity_token_in_w_v", nonfinite_token("-Infinity", "w_v",
                                                       [3, 0]),
     msg(err(400, "invalid_json"), "Infinity")),
]

# HTTP-level faults: (name, body, files, expected). files maps a case file
# name (method, path, headers, pad, chunked) to its content.
GOOD = json.dumps(BASE).encode()
HTTP_ROWS = [
    ("http_get_attend", b"", {"method": "GET", "headers": ""},
     dict(err(405, "method_not_allowed"), header="Allow: POST, OPTIONS")),
    ("http_put_attend", GOOD, {"method": "PUT"},
     dict(err(405, "method_not_allowed"), header="Allow: POST, OPTIONS")),
    ("http_delete_attend", b"", {"method": "DELETE", "headers": ""},
     err(405, "method_not_allowed")),
    ("http_post_healthz", GOOD, {"path": "/healthz"},
     dict(err(405, "method_not_allowed"),
          header="Allow: GET, HEAD, OPTIONS")),
    ("http_post_metrics", GOOD, {"path": "/metrics"},
     err(405, "method_not_allowed")),
    ("http_content_type_text", GOOD,
     {"headers": "Content-Type: text/plain\r\nContent-Length: {len}"},
     err(415, "unsupported_media_type")),
    ("http_content_type_missing", GOOD, {"headers": "Content-Length: {len}"},
     err(415, "unsupported_media_type")),
    ("http_content_type_form", GOOD,
     {"headers": "Content-Type: application/x-www-form-urlencoded\r\n"
                 "Content-Length: {len}"},
     err(415, "unsupported_media_type")),
    ("http_content_type_jsonp", GOOD,
     {"headers": "Content-Type: application/jsonp\r\nContent-Length: {len}"},
     err(415, "unsupported_media_type")),
    ("http_unknown_path", GOOD, {"path": "/nope"}, err(404, "not_found")),
    ("http_unknown_path_get", b"", {"path": "/attend/x", "method": "GET",
                                    "headers": ""}, err(404, "not_found")),
    ("http_path_case", GOOD, {"path": "/Attend"}, err(404, "not_found")),
    ("http_path_trailing_slash", GOOD, {"path": "/attend/"},
     err(404, "not_found")),
    # No Content-Length and no Transfer-Encoding: the request has no body
    # (RFC 9112 6.3), so the body is empty JSON.
    ("http_content_length_missing", GOOD,
     {"headers": "Content-Type: application/json"},
     err(400, "invalid_json")),
    ("http_content_length_short", GOOD,
     {"headers": "Content-Type: application/json\r\nContent-Length: 10"},
     err(400, "invalid_json")),
    # The client sends fewer bytes than it declared and waits: the server
    # gives up after its idle timeout (--timeout 3 here) and closes.
    ("http_content_length_long", GOOD,
     {"headers": "Content-Type: application/json\r\nContent-Length: 5000"},
     {"status": "none"}),
    ("http_content_length_not_a_number", GOOD,
     {"headers": "Content-Type: application/json\r\nContent-Length: 12ab"},
     err(400, "bad_request")),
    ("http_content_length_negative", GOOD,
     {"headers": "Content-Type: application/json\r\nContent-Length: -1"},
     err(400, "bad_request")),
    ("http_content_length_twice_differing", GOOD,
     {"headers": "Content-Type: application/json\r\nContent-Length: {len}"
                 "\r\nContent-Length: 3"},
     err(400, "bad_request")),
    ("http_content_length_over_limit", GOOD,
     {"headers": "Content-Type: application/json\r\n"
                 "Content-Length: 2000000"},
     err(413, "too_large")),
    ("http_content_length_huge", GOOD,
     {"headers": "Content-Type: application/json\r\n"
                 "Content-Length: 99999999999999999999999"},
     err(413, "too_large")),
    ("http_body_over_limit", GOOD, {"pad": "1100000"},
     err(413, "too_large")),
    ("http_chunked_over_limit", GOOD, {"pad": "1100000", "chunked": ""},
     err(413, "too_large")),
    ("http_chunked_invalid_json", b'{"x": [[1, 2]', {"chunked": ""},
     err(400, "invalid_json")),
    ("http_chunked_invalid_request", json.dumps(req(x=DROP)).encode(),
     {"chunked": ""}, bad("/x")),
    ("http_chunked_bad_size", b"", {
        "headers": "Content-Type: application/json\r\n"
                   "Transfer-Encoding: chunked",
        "request_raw": "zz\r\n{}\r\n0\r\n\r\n"},
     err(400, "bad_request")),
    ("http_te_and_content_length", GOOD, {
        "headers": "Content-Type: application/json\r\n"
                   "Transfer-Encoding: chunked\r\nContent-Length: {len}",
        "chunked": ""},
     err(400, "bad_request")),
    ("http_te_gzip", GOOD, {
        "headers": "Content-Type: application/json\r\n"
                   "Transfer-Encoding: gzip"},
     err(400, "bad_request")),
    ("http_te_gzip_chunked", GOOD, {
        "headers": "Content-Type: application/json\r\n"
                   "Transfer-Encoding: gzip, chunked",
        "chunked": ""},
     err(400, "bad_request")),
    # Only the first of two Transfer-Encoding headers is looked at; a
    # proxy that joins them sees "chunked, gzip" and frames the body
    # differently (RFC 9112 6.1: chunked must be the final coding).
    ("http_te_two_headers_chunked_gzip", GOOD, {
        "headers": "Content-Type: application/json\r\n"
                   "Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip",
        "chunked": ""},
     err(400, "bad_request")),
    ("http_expect_continue_over_limit", b"", {
        "headers": "Content-Type: application/json\r\n"
                   "Content-Length: 2000000\r\nExpect: 100-continue"},
     err(413, "too_large")),
    ("http_head_attend", b"", {"method": "HEAD", "headers": ""},
     {"status": 405, "header": "Allow: POST, OPTIONS"}),
    # Positive controls of the same machinery: a chunked valid request and
    # a +json media type are served.
    ("http_chunked_valid", GOOD, {"chunked": ""}, {"status": 200}),
    ("http_json_suffix_type", GOOD, {
        "headers": "Content-Type: application/vnd.api+json; charset=utf-8"
                   "\r\nContent-Length: {len}"}, {"status": 200}),
]


def write_case(root, name, body, expected, files=None):
    d = os.path.join(root, name)
    os.makedirs(d, exist_ok=True)
    files = dict(files or {})
    if "request_raw" in files:
        body = files.pop("request_raw").encode()
    with open(os.path.join(d, "request"), "wb") as f:
        f.write(body)
    for k, v in files.items():
        with open(os.path.join(d, k), "w") as f:
            f.write(v + ("\n" if v else ""))
    lines = ["status %s" % expected["status"]]
    if "code" in expected:
        lines.append("code %s" % expected["code"])
    if "field" in expected:
        lines.append("field %s" % expected["field"])
    if "header" in expected:
        lines.append("header %s" % expected["header"])
    for part in expected.get("message", []):
        lines.append("message %s" % part)
    with open(os.path.join(d, "expected"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "tests/cases/invalid"
    if os.path.isdir(root):
        shutil.rmtree(root)
    names = set()
    for name, body, expected in ROWS + V2_ROWS:
        assert name not in names, name
        names.add(name)
        if not isinstance(body, bytes):
            body = json.dumps(body, separators=(",", ":")).encode()
        write_case(root, name, body, expected)
    for name, body, files, expected in HTTP_ROWS:
        assert name not in names, name
        names.add(name)
        write_case(root, name, body, expected, files)
    print("%d cases" % len(names))


if __name__ == "__main__":
    main()
