#!/usr/bin/python3
"""run_refs.py: the driver of `make bench-refs`, what the tensor store saves
a client that re-runs one layer on new inputs.

The request: self-attention, n = 128, d_model = 768, 12 heads, per-head
maps, with w_q, w_k, w_v and w_o, every number in the long form that Python
clients send (json.dumps of float32 .tolist(), as gen_requests.py writes
it). Two ways to send it to one attnd:

  inline  every request carries x and the four weights (2.4 million
          numbers, about 54 MB);
  refs    the four weights are stored once (POST /tensors, raw float32 with
          ?shape=), and every request carries x inline and
          {"ref": "sha256:..."} for each weight.

First the checks, before any timing: the refs the server answers are the
SHA-256 of the float32 bytes computed here, and a request with store: true
names the same ones in meta.refs; the inline answer matches a NumPy float64
reference within 1e-4 * (1 + |ref|); the inline and the refs answers are the
same bytes once meta.elapsed_ms is blanked. A failed check stops the run
(exit 1).

Then --rounds rounds (default 3, 1 with --quick), each timing both ways with
--count sequential requests on one keep-alive connection (curl, time_total
of each; default 20), inline and refs alternating which goes first. Printed:
median and p90 latency over all requests of a way, requests/s (sequential:
1000 / the mean latency), server CPU time per request (median of the
rounds), the speedup (inline median over refs median; goal >= 4x) and the
range of the per-round figures, and the ratio of CPU time per request.
Figures, never a failure on a time. Writes OUT/refs.json.

    run_refs.py --attnd build/attnd --out build/bench [--quick]
        [--rounds R] [--count N]
"""
import argparse
import hashlib
import http.client
import json
import os
import re
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_requests  # noqa: E402
import run_http  # noqa: E402

N, D_MODEL, HEADS, SEED = 128, 768, 12, 5
WEIGHTS = ("w_q", "w_k", "w_v", "w_o")
GOAL = 4.0


def arrays():
    """x [n][d_model] and the four weights, float32."""
    raw = gen_requests.raw_inputs(N, D_MODEL, SEED)
    return {k: v.astype(np.float32) for k, v in raw.items()}


def ref_of(a):
    """The store's name of a float32 array: sha256 of its little-endian
    bytes in row-major order."""
    return "sha256:" + hashlib.sha256(
        np.ascontiguousarray(a, dtype="<f4").tobytes()).hexdigest()


def bodies(arrs):
    """(inline body, refs body, inline body with store: true), the first
    two as a Python client writes them with json.dumps."""
    opts = {"num_heads": HEADS, "num_kv_heads": HEADS,
            "return_weights": "per_head"}
    inline = dict(arrs, **opts)
    refs = dict(opts, x=arrs["x"], **{k: {"ref": ref_of(arrs[k])}
                                      for k in WEIGHTS})
    # the same key order as inline, so only the weights' text differs
    refs = {k: refs[k] for k in inline}
    return (gen_requests.long_body(inline), gen_requests.long_body(refs),
            gen_requests.long_body(dict(inline, store=True)))


def request(port, method, path, body=None, ctype="application/json"):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    try:
        conn.request(method, path, body,
                     {"Content-Type": ctype} if body is not None else {})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def blank_elapsed(data):
    """The answer with meta.elapsed_ms's value replaced, the only part of
    two answers to the same request that may differ."""
    return re.sub(rb'"elapsed_ms":\s*[-+0-9.eE]+', b'"elapsed_ms":0', data)


def checks(port, arrs, inline, refs_body, store_body):
    """Stores the weights and runs the checks; returns a list of lines, or
    raises SystemExit on a failed one."""
    lines = []
    for k in WEIGHTS:
        a = np.ascontiguousarray(arrs[k], dtype="<f4")
        status, data = request(
            port, "POST", "/tensors?shape=%d,%d" % a.shape, a.tobytes(),
            "application/octet-stream")
        if status not in (200, 201):
            raise SystemExit("bench-refs: POST /tensors %s: HTTP %d: %s" % (
                k, status, data[:300].decode("utf-8", "replace")))
        got = json.loads(data)["ref"]
        if got != ref_of(a):
            raise SystemExit("bench-refs: POST /tensors %s answered %s, "
                             "expected %s" % (k, got, ref_of(a)))
    lines.append("stored the four weights with POST /tensors (raw float32, "
                 "%d bytes each); refs are the sha256 computed here"
                 % (arrs["w_q"].size * 4))

    status, data = request(port, "POST", "/attend", store_body)
    if status != 200:
        raise SystemExit("bench-refs: store: true: HTTP %d: %s" % (
            status, data[:300].decode("utf-8", "replace")))
    meta_refs = json.loads(data)["meta"].get("refs", {})
    bad = [k for k in WEIGHTS if meta_refs.get(k) != ref_of(arrs[k])]
    if bad:
        raise SystemExit("bench-refs: store: true named other refs for %s: "
                         "%s" % (",".join(bad), meta_refs))
    lines.append("store: true names the same refs in meta.refs")

    ref = run_http.attention_ref(
        {k: v.astype(np.float64) for k, v in arrs.items()}, HEADS, "none",
        True)
    ok, _got, _meta, msg = run_http.check_answer(
        "attnd", "inline", port, inline.encode("ascii"), ref, None)
    lines.append("check " + msg)
    if not ok:
        raise SystemExit("bench-refs: wrong answer: not timing")

    s1, a1 = request(port, "POST", "/attend", inline)
    s2, a2 = request(port, "POST", "/attend", refs_body)
    if s1 != 200 or s2 != 200:
        raise SystemExit("bench-refs: HTTP %d inline, %d refs: %s" % (
            s1, s2, (a2 if s2 != 200 else a1)[:300].decode(
                "utf-8", "replace")))
    b1, b2 = blank_elapsed(a1), blank_elapsed(a2)
    if b1 != b2:
        at = next((i for i in range(min(len(b1), len(b2)))
                   if b1[i] != b2[i]), min(len(b1), len(b2)))
        raise SystemExit("bench-refs: the refs answer differs from the "
                         "inline one at byte %d (%d and %d bytes): %r / %r"
                         % (at, len(b1), len(b2), b1[at - 40:at + 40],
                            b2[at - 40:at + 40]))
    lines.append("inline and refs answers: the same %d bytes "
                 "(meta.elapsed_ms blanked)" % len(b1))
    return lines


def fmt_range(vals, unit=""):
    return "%.1f .. %.1f%s" % (min(vals), max(vals), unit)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnd", default="build/attnd")
    ap.add_argument("--out", default="build/bench")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--count", type=int, default=20,
                    help="sequential requests a way and round (default 20)")
    args = ap.parse_args()
    if args.quick:
        args.rounds = 1
    args.env = dict(os.environ)

    print("bench-refs: %d CPUs, %s run, load average %s" % (
        os.cpu_count(),
        "quick" if args.quick else "full", run_http.loadavg()), flush=True)
    arrs = arrays()
    inline, refs_body, store_body = bodies(arrs)
    req_dir = os.path.join(args.out, "requests")
    os.makedirs(req_dir, exist_ok=True)
    paths = {}
    for way, text in (("inline", inline), ("refs", refs_body)):
        paths[way] = os.path.join(req_dir, "rerun.%s.json" % way)
        gen_requests.write_atomic(paths[way], text.encode("ascii"))
        print("%-7s %10d bytes  %s" % (way, len(text), paths[way]))
    print("n = %d, d_model = %d, %d heads, per-head maps, w_q w_k w_v w_o; "
          "long-form JSON numbers" % (N, D_MODEL, HEADS))

    port = run_http.free_port()
    srv = run_http.start("attnd", args, port)
    print("attnd: %s --port P --quiet (its defaults)" % args.attnd)
    results = {"inline": [], "refs": []}
    try:
        for line in checks(port, arrs, inline, refs_body, store_body):
            print("  " + line, flush=True)
        for rnd in range(args.rounds):
            order = ("inline", "refs") if rnd % 2 == 0 else ("refs", "inline")
            for way in order:
                cpu0 = srv.cpu_seconds()
                r = run_http.run_latency(port, paths[way], args.count)
                r["cpu_ms_per_request"] = ((srv.cpu_seconds() - cpu0) * 1e3
                                           / r["n"])
                results[way].append(r)
                print("  round %d %-6s p50 %8.2f ms  p90 %8.2f ms  %7.1f "
                      "req/s  CPU %.2f ms/request  (%d requests, %d non-200, "
                      "%d connection(s))" % (
                          rnd + 1, way, r["p50_ms"], r["p90_ms"],
                          1e3 / r["mean_ms"], r["cpu_ms_per_request"], r["n"],
                          r["non200"], r["connections"]), flush=True)
        rss = srv.peak_rss_mib()
    finally:
        srv.stop()

    summary = {}
    for way in ("inline", "refs"):
        times = sorted(t for r in results[way] for t in r["times_ms"])
        summary[way] = {
            "requests": len(times), "p50_ms": statistics.median(times),
            "p90_ms": run_http.p90(times),
            "rps": 1e3 / statistics.fmean(times),
            "cpu_ms_per_request": statistics.median(
                r["cpu_ms_per_request"] for r in results[way]),
            "round_p50_ms": [r["p50_ms"] for r in results[way]],
            "non200": sum(r["non200"] for r in results[way]),
            "body_bytes": os.path.getsize(paths[way])}
    speedup = summary["inline"]["p50_ms"] / summary["refs"]["p50_ms"]
    per_round = [a["p50_ms"] / b["p50_ms"]
                 for a, b in zip(results["inline"], results["refs"])]

    print("\n== re-running a layer: n = %d, d_model = %d, %d heads, per-head "
          "maps (%s run, %d round(s) of %d sequential keep-alive requests "
          "a way)" % (N, D_MODEL, HEADS, "quick" if args.quick else "full",
                      args.rounds, args.count))
    hdr = "%-8s %12s %10s %10s %9s %10s %18s" % (
        "way", "body", "p50 ms", "p90 ms", "req/s", "CPU ms/req",
        "round p50s ms")
    print(hdr)
    print("-" * len(hdr))
    for way in ("inline", "refs"):
        s = summary[way]
        print("%-8s %10.2f MB %10.2f %10.2f %9.1f %10.2f %18s" % (
            way, s["body_bytes"] / 1e6, s["p50_ms"], s["p90_ms"], s["rps"],
            s["cpu_ms_per_request"], fmt_range(s["round_p50_ms"])))
    print("speedup with refs (inline p50 / refs p50): %.1fx (goal >= %.0fx): "
          "%s; per round %s" % (speedup, GOAL,
                                "MET" if speedup >= GOAL else "NOT MET",
                                ", ".join("%.1fx" % v for v in per_round)))
    print("server CPU time per request, inline / refs: %.1fx (the figure "
          "that hardly depends on what else the machine runs)" % (
              summary["inline"]["cpu_ms_per_request"]
              / summary["refs"]["cpu_ms_per_request"]))
    bad = sum(s["non200"] for s in summary.values())
    if bad:
        print("  %d requests answered other than 200 during timing" % bad)
    print("attnd peak RSS %.0f MiB" % rss)
    out = os.path.join(args.out, "refs.json")
    with open(out, "w") as f:
        json.dump({"summary": summary, "speedup": speedup,
                   "speedup_per_round": per_round, "rounds": results}, f,
                  indent=1)
    print("wrote %s (load average at the end: %s)" % (out,
                                                      run_http.loadavg()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
