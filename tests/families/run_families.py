#!/usr/bin/python3
"""run_families.py: the model-family fixtures against a real attnd.

    run_families.py --attnd build/attnd [--cases tests/families/cases]
                    [--v1 tests/fixtures/lib]
                    [--messages tests/cases/invalid] [NAME...]

python3 standard library only. Starts attnd on a free loopback port
(tests/robust/attnd_proc.py), then:

  * every tests/families/cases/<name>.json (written by gen_families.py):
    posts its "request", expects 200 and, for every field of "expect"
    (output, attention, value_norms, q, k), the same nested shape and
    |served - expected| <= tol * (1 + |expected|) element-wise, and the
    dimension fields of "meta" (n, m, d_k, d_v, d_out, ...) in the answer's
    meta;
  * with --messages tests/cases/invalid: the bad-input cases whose
    `expected` names substrings of the error message (`message S` lines:
    did-you-mean for a misspelt field, NaN and Infinity tokens), which
    tests/robust/run_cases.py does not check;
  * every v1 fixture tests/fixtures/lib/*.txt (PyTorch's and NumPy's
    answers, written by tests/gen/gen_lib_fixtures.py): the same request
    in v1 form must still get that answer, and an answer without the v2
    extras (value_norms, q, k); once more with the v2 defaults spelled
    out (weight_layout "in_out", positions 0..n-1), which must give the
    same answer.

Prints PASS or FAIL for each case with the worst element (its place, the
served and the expected value, and its error as a share of the allowed
error), and exits 1 when any case fails. NAME arguments pick cases (family
names or v1/<fixture>).
"""
import argparse
import base64
import json
import math
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "robust"))
import attnd_proc  # noqa: E402

ATTND_ARGS = ["--quiet", "--threads", "2"]
V2_EXTRAS = ("value_norms", "q", "k", "rollout")


def shape_of(v):
    """The shape of a nested list of numbers, or None when it is ragged or
    holds something else."""
    if isinstance(v, list):
        if not v:
            return (0,)
        inner = [shape_of(e) for e in v]
        if any(s is None for s in inner) or len(set(inner)) != 1:
            return None
        return (len(v),) + inner[0]
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return ()
    return None


def flat(v, out):
    if isinstance(v, list):
        for e in v:
            flat(e, out)
    else:
        out.append(v)
    return out


def index_of(k, shape):
    idx = []
    for s in reversed(shape):
        idx.append(k % s)
        k //= s
    return "".join("[%d]" % i for i in reversed(idx))


def compare(name, got, want, tol):
    """Returns (ok, text): the worst element of got against want."""
    gs, ws = shape_of(got), shape_of(want)
    if gs is None:
        return False, "%s: not a numeric array (%s)" % (
            name, json.dumps(got)[:120])
    if gs != ws:
        return False, "%s: shape %s, expected %s" % (name, list(gs),
                                                     list(ws))
    g, w = flat(got, []), flat(want, [])
    worst, at = -1.0, 0
    for k, (a, b) in enumerate(zip(g, w)):
        if not isinstance(a, (int, float)) or isinstance(a, bool) or \
                not math.isfinite(a):
            return False, "%s%s: %r, expected %.8g" % (
                name, index_of(k, ws), a, b)
        share = abs(a - b) / (tol * (1.0 + abs(b)))
        if share > worst:
            worst, at = share, k
    if not w:
        return True, "%s: empty" % name
    text = "%s worst %s: %.8g vs %.8g (%.3g of tol)" % (
        name, index_of(at, ws), g[at], w[at], worst)
    return worst <= 1.0, text


def decode_tensor(v):
    """A response tensor object (encoding base64) as nested lists; anything
    else unchanged."""
    if not (isinstance(v, dict) and v.get("dtype") == "float32" and
            isinstance(v.get("shape"), list) and
            isinstance(v.get("data"), str)):
        return v
    raw = base64.b64decode(v["data"], validate=True)
    vals = list(struct.unpack("<%df" % (len(raw) // 4), raw))
    shape = v["shape"]
    if len(vals) != math.prod(shape) or not shape:
        return {"bad tensor object": "shape %s, %d values" % (shape,
                                                              len(vals))}
    return nest(vals, shape)


def post_json(port, body):
    data = body if isinstance(body, bytes) else \
        json.dumps(body, separators=(",", ":")).encode()
    r = attnd_proc.post(port, "/attend", data, timeout=60)
    try:
        js = r.json()
    except (ValueError, UnicodeDecodeError):
        js = None
    return r.status, js, r.body


def check_answer(port, request, expect, tol, body=None, meta=None):
    """Posts, compares; returns (ok, [lines])."""
    try:
        status, js, raw = post_json(port, body or request)
    except (attnd_proc.Hang, ConnectionError) as e:
        return False, ["no answer: %s" % e]
    if status != 200 or not isinstance(js, dict):
        msg = raw[:400].decode("utf-8", "replace")
        if isinstance(js, dict) and isinstance(js.get("error"), dict):
            e = js["error"]
            msg = "%s %s: %s" % (e.get("code"), e.get("field") or "",
                                 e.get("message"))
        return False, ["status %d: %s" % (status, msg)]
    ok, lines = True, []
    for field, want in expect.items():
        if field not in js:
            ok = False
            lines.append("%s: missing from the answer" % field)
            continue
        try:
            served = decode_tensor(js[field])
        except (ValueError, struct.error) as e:
            served = {"bad tensor object": str(e)}
        if isinstance(want, dict):
            want = decode_tensor(want)
        good, text = compare(field, served, want, tol)
        ok = ok and good
        lines.append(text)
    got_meta = js.get("meta") if isinstance(js.get("meta"), dict) else {}
    wrong = ["%s %r (expected %r)" % (k, got_meta.get(k), v)
             for k, v in (meta or {}).items() if got_meta.get(k) != v]
    if wrong:
        ok = False
        lines.append("meta: " + ", ".join(wrong))
    return ok, lines


# -- v1 fixtures (tests/fixtures/lib/*.txt) ---------------------------------

V1_SECTIONS = ("x", "memory", "w_q", "w_k", "w_v", "w_o", "b_q", "b_k",
               "b_v", "b_o", "key_padding", "output", "weights")


def read_v1_fixture(path):
    """The library fixture format of tests/gen/gen_lib_fixtures.py; None
    for a fixture that uses any line beyond v1's (rope, positions, ...:
    those are the library's own v2 checks)."""
    name, dims, mask, scale = None, {}, "none", 0.0
    sections, counts, current = {}, {}, None
    with open(path) as f:
        for line in f:
            words = line.split()
            if not words:
                continue
            key = words[0]
            if key[0].isdigit() or key[0] in "-+.":
                if current is None:
                    return None
                sections[current].extend(float(v) for v in words)
            elif key == "attn_fixture":
                name = words[2]
            elif key == "dims":
                dims = dict(zip(("B", "n", "m", "d_model", "d_mem", "h", "g",
                                 "d_k", "d_v", "d_out"),
                                (int(v) for v in words[1:])))
            elif key == "mask":
                mask = words[1]
            elif key == "scale":
                scale = float(words[1])
            elif key == "end":
                break
            elif key in V1_SECTIONS and len(words) == 2:
                current = key
                sections[key] = []
                counts[key] = int(words[1])
            else:
                return None
    for k, c in counts.items():
        if len(sections[k]) != c:
            raise ValueError("%s: section %s has %d values, its header says "
                             "%d" % (path, k, len(sections[k]), c))
    return (name, dims, mask, scale, sections) if name else None


def nest(values, shape):
    if len(shape) == 1:
        return list(values)
    step = len(values) // shape[0]
    return [nest(values[i * step:(i + 1) * step], shape[1:])
            for i in range(shape[0])]


def v1_case(path):
    """(name, request, expect, dims) of one v1 library fixture (None for
    the others): 2-D x when B == 1."""
    got = read_v1_fixture(path)
    if got is None:
        return None
    name, D, mask, scale, S = got
    B = D["B"]

    def batched(sec, rows, cols):
        a = nest(S[sec], [B, rows, cols])
        return a if B > 1 else a[0]
    req = {"x": batched("x", D["n"], D["d_model"]), "num_heads": D["h"],
           "num_kv_heads": D["g"], "mask": mask}
    if "memory" in S:
        req["memory"] = batched("memory", D["m"], D["d_mem"])
    req["w_q"] = nest(S["w_q"], [D["d_model"], D["h"] * D["d_k"]])
    req["w_k"] = nest(S["w_k"], [D["d_mem"], D["g"] * D["d_k"]])
    req["w_v"] = nest(S["w_v"], [D["d_mem"], D["g"] * D["d_v"]])
    if "w_o" in S:
        req["w_o"] = nest(S["w_o"], [D["h"] * D["d_v"], D["d_out"]])
    for b in ("b_q", "b_k", "b_v", "b_o"):
        if b in S:
            req[b] = S[b]
    if "key_padding" in S:
        kp = [v != 0 for v in S["key_padding"]]
        req["key_padding_mask"] = nest(kp, [B, D["m"]]) if B > 1 else kp
    if scale:
        req["scale"] = scale
    out = nest(S["output"], [B, D["n"], D["d_out"]])
    att = nest(S["weights"], [B, D["h"], D["n"], D["m"]])
    expect = {"output": out if B > 1 else out[0],
              "attention": att if B > 1 else att[0]}
    return "v1/" + name, req, expect, D


def run_v1(port, path, tol):
    case = v1_case(path)
    if case is None:
        return []
    name, req, expect, D = case
    ok, lines = check_answer(port, req, expect, tol)
    if ok:
        # the v1 answer carries none of v2's extras
        status, js, _ = post_json(port, req)
        extra = [k for k in V2_EXTRAS if isinstance(js, dict) and k in js]
        if extra:
            ok = False
            lines.append("v1 request answered with v2 fields %s" % extra)
    spelled = dict(req, weight_layout="in_out")
    n = D["n"]
    spelled["positions"] = [list(range(n))] * D["B"] if D["B"] > 1 else \
        list(range(n))
    ok2, lines2 = check_answer(port, spelled, expect, tol)
    return [(name, ok, lines),
            (name + "+v2_defaults", ok2, lines2)]


# -- error messages of the bad-input table -----------------------------------

def run_messages(port, cases_dir):
    """Cases of tests/cases/invalid whose `expected` has `message S` lines
    (tests/robust/run_cases.py checks their status, code and pointer but
    not these): each S must occur in error.message, ignoring case."""
    import run_cases  # tests/robust, beside attnd_proc
    results = []
    for name in sorted(os.listdir(cases_dir)):
        d = os.path.join(cases_dir, name)
        with open(os.path.join(d, "expected")) as f:
            want = [line[len("message "):].strip() for line in f
                    if line.startswith("message ")]
        if not want:
            continue
        exp = run_cases.parse_expected(d)
        try:
            r = attnd_proc.raw_request(port, run_cases.build_request(d),
                                       timeout=20)
        except (attnd_proc.Hang, ConnectionError) as e:
            results.append(("message/" + name, False, ["no answer: %s" % e]))
            continue
        try:
            e = r.json()["error"]
            message = e.get("message") or ""
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            e, message = {}, ""
        lines = ["status %d, code %s, field %s: %r" % (
            r.status, e.get("code"), e.get("field"), message[:200])]
        ok = r.status == int(exp["status"])
        for part in want:
            if part.lower() not in message.lower():
                ok = False
                lines.append("message lacks %r" % part)
        results.append(("message/" + name, ok, lines))
    return results


# -- main -------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnd", required=True)
    ap.add_argument("--cases", default=os.path.join(HERE, "cases"))
    ap.add_argument("--v1", default=os.path.join(ROOT, "tests", "fixtures",
                                                 "lib"))
    ap.add_argument("--messages", default=None,
                    help="also check the error messages the bad-input "
                    "table asks for (tests/cases/invalid)")
    ap.add_argument("names", nargs="*")
    args = ap.parse_args()

    fam = sorted(f[:-5] for f in os.listdir(args.cases)
                 if f.endswith(".json"))
    v1 = sorted(f for f in os.listdir(args.v1) if f.endswith(".txt")) \
        if os.path.isdir(args.v1) else []
    if args.names:
        fam = [f for f in fam if f in args.names]
        v1 = [f for f in v1 if "v1/" + f[:-4] in args.names]
    if not fam and not v1:
        sys.exit("no cases")

    srv = attnd_proc.Attnd(args.attnd, ATTND_ARGS)
    results = []
    try:
        for name in fam:
            with open(os.path.join(args.cases, name + ".json")) as f:
                case = json.load(f)
            ok, lines = check_answer(srv.port, case["request"],
                                     case["expect"], case["tol"],
                                     meta=case.get("meta"))
            results.append((name, ok, lines, case.get("family", "")))
            if not srv.alive():
                results.append(("(attnd)", False, ["attnd exited (%s) "
                                "during %s" % (srv.proc.returncode, name)],
                                ""))
                break
        if srv.alive():
            for f in v1:
                for name, ok, lines in run_v1(srv.port,
                                              os.path.join(args.v1, f),
                                              1e-4):
                    results.append((name, ok, lines, "v1"))
        if srv.alive() and args.messages and not args.names:
            for name, ok, lines in run_messages(srv.port, args.messages):
                results.append((name, ok, lines, "bad input"))
    finally:
        rc = srv.stop()
    if rc != 0:
        results.append(("(exit)", False,
                        ["attnd exit code %s after SIGTERM" % rc], ""))

    failed = 0
    for name, ok, lines, family in results:
        tag = "PASS" if ok else "FAIL"
        failed += not ok
        label = "%s %-34s %s" % (tag, name, ("(%s)" % family) if family
                                 else "")
        print(label.rstrip())
        for line in lines:
            print("       " + line)
    print("families: %d run, %d passed, %d failed" % (
        len(results), len(results) - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
