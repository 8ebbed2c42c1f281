#!/usr/bin/python3
"""run_window.py: the driver of `make bench-window`, whether the cost of
sliding-window attention follows the window (O(n w), not O(n^2)).

The request: self-attention with w_q, w_k, w_v and w_o, d_model = 256,
8 heads, mask "causal", return_weights "none", every tensor a base64 float32
tensor object and "encoding": "base64" for the answer, so that neither the
JSON number reader nor the writer is in what is measured. Five variants:

  n = 8192   no window,  window {"left": 255},  window {"left": 0}
  n = 16384              window {"left": 255},  window {"left": 0}

{"left": 0} leaves each query its own key only: its meta.elapsed_ms is
essentially the projections, so the attention part of a request's compute
time is its meta.elapsed_ms minus that of the same n with {"left": 0}.

First one answer of each variant is checked against a NumPy float64
reference on a sample of query rows (within 1e-4 * (1 + |ref|)); a wrong
answer stops the run (exit 1). Then an untimed warm-up round and --runs
rounds (default 15, 5 with --quick), each posting every variant once on one
keep-alive connection, the order rotated from round to round; the figure of
a variant is the median of its meta.elapsed_ms over the rounds. Printed:
each variant's median and range, the attention parts, their ratio no window
/ window 255 at n = 8192 (goal >= 8x; the flop ratio is 16x) and window 255
n = 16384 / n = 8192 (goal <= 2.5x; linear is 2x), each also per round
(the middle half of the rounds' ratios), and the same ratios from each
variant's fastest round (on a shared machine the least disturbed one).
Beside them, the same ratios from the CPU time attnd's threads ran for
each request (the sum of /proc/PID/task/*/schedstat, nanoseconds; it holds
the body's reading and the answer's writing too, alike for the variants of
one n): wall time stretches when other work on the machine takes a core
from the compute threads, CPU time hardly does. Figures, never a failure on a time. Writes
OUT/window.json.

attnd runs with its defaults; if its work limit (--max-flops) refuses a
variant, it is restarted with --max-flops 1e12 and the report says so.

    run_window.py --attnd build/attnd --out build/bench [--quick]
        [--runs R]
"""
import argparse
import http.client
import json
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_requests  # noqa: E402
import run_http  # noqa: E402

D_MODEL, HEADS, WINDOW = 256, 8, 255
SEEDS = {8192: 11, 16384: 12}
# (variant, n, window or None)
VARIANTS = [
    ("8192 none", 8192, None),
    ("8192 left255", 8192, {"left": WINDOW}),
    ("8192 left0", 8192, {"left": 0}),
    ("16384 left255", 16384, {"left": WINDOW}),
    ("16384 left0", 16384, {"left": 0}),
]
GOAL_RATIO, GOAL_GROWTH = 8.0, 2.5
BIG_FLOPS = "1000000000000"
SAMPLE_ROWS = 48


def arrays(n):
    """x [n][d_model] and the four weights, float32."""
    raw = gen_requests.raw_inputs(n, D_MODEL, SEEDS[n])
    return {k: v.astype(np.float32) for k, v in raw.items()}


def body(arrs, window):
    fields = ['"%s":%s' % (k, gen_requests.b64_tensor(arrs[k]))
              for k in ("x", "w_q", "w_k", "w_v", "w_o")]
    fields += ['"num_heads":%d' % HEADS, '"mask":"causal"',
               '"return_weights":"none"', '"encoding":"base64"']
    if window is not None:
        fields.append('"window":%s' % json.dumps(window,
                                                 separators=(",", ":")))
    return ("{" + ",".join(fields) + "}").encode("ascii")


def reference_rows(arrs, window, rows):
    """float64 output rows [len(rows)][d_model] of causal attention with
    an optional left window, from the full K and V."""
    a = {k: v.astype(np.float64) for k, v in arrs.items()}
    dk = D_MODEL // HEADS
    q, k, v = a["x"][rows] @ a["w_q"], a["x"] @ a["w_k"], a["x"] @ a["w_v"]
    out = np.zeros((len(rows), D_MODEL))
    for r, i in enumerate(rows):
        lo = 0 if window is None else max(0, i - window["left"])
        heads = []
        for hh in range(HEADS):
            cols = slice(hh * dk, (hh + 1) * dk)
            s = k[lo:i + 1, cols] @ q[r, cols] / np.sqrt(dk)
            w = np.exp(s - s.max())  # stable: the max is subtracted
            heads.append((w / w.sum()) @ v[lo:i + 1, cols])
        out[r] = np.concatenate(heads) @ a["w_o"]
    return out


class Client:
    """One keep-alive connection to attnd's /attend."""

    def __init__(self, port):
        self.port, self.conn = port, None

    def post(self, data):
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1",
                                                       self.port, timeout=600)
            try:
                self.conn.request("POST", "/attend", data,
                                  {"Content-Type": "application/json"})
                r = self.conn.getresponse()
                return r.status, r.read()
            except (OSError, http.client.HTTPException):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def close(self):
        if self.conn is not None:
            self.conn.close()


def meta_of(data):
    """The answer's meta object, read from its end (the output before it
    is megabytes of base64)."""
    i = data.rfind(b'"meta"')
    return json.loads(data[data.index(b"{", i):data.rindex(b"}")])


def check(client, name, n, window, arrs, data):
    """Posts data once; returns (status, meta or error text, message)."""
    status, ans = client.post(data)
    if status != 200:
        return status, ans[:400].decode("utf-8", "replace"), None
    resp = json.loads(ans)
    got = run_http.decode(resp["output"])
    rows = sorted(set(np.linspace(0, n - 1, SAMPLE_ROWS).astype(int))
                  | {WINDOW, WINDOW + 1})
    want = reference_rows(arrs, window, rows)
    err = float(np.max(np.abs(got[rows] - want) / (1 + np.abs(want))))
    ok = got.shape == (n, D_MODEL) and err <= run_http.TOL
    msg = "%-13s %s: output err/(1+|ref|) %.2e on %d rows, meta.flops %.3g" \
        % (name, "ok" if ok else "MISMATCH", err, len(rows),
           resp["meta"]["flops"])
    if not ok:
        raise SystemExit("bench-window: wrong answer on %s: %s" % (name,
                                                                   msg))
    return status, resp["meta"], msg


def cpu_ns(pid):
    """Nanoseconds that the threads of process pid have run so far."""
    total = 0
    task_dir = "/proc/%d/task" % pid
    for tid in os.listdir(task_dir):
        try:
            with open("%s/%s/schedstat" % (task_dir, tid)) as f:
                total += int(f.read().split()[0])
        except (OSError, IndexError, ValueError):
            pass  # a thread that ended between the listing and the read
    return total


def middle_half(vals):
    """The 25th and 75th percentiles: where the middle half of the
    per-round ratios lie (their extremes are ratios of two noisy small
    differences)."""
    if len(vals) < 2:
        return (vals[0], vals[0]) if vals else (float("nan"),) * 2
    q = statistics.quantiles(vals, n=4)
    return q[0], q[2]


def med_range(vals):
    return "%8.1f ms  (%.1f .. %.1f)" % (statistics.median(vals), min(vals),
                                          max(vals))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnd", default="build/attnd")
    ap.add_argument("--out", default="build/bench")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--runs", type=int, default=0,
                    help="rounds, each variant once a round (default 15; "
                         "5 with --quick)")
    args = ap.parse_args()
    args.runs = args.runs or (5 if args.quick else 15)
    args.env = dict(os.environ)

    print("bench-window: %d CPUs, %s run, load average %s" % (
        os.cpu_count(),
        "quick" if args.quick else "full", run_http.loadavg()), flush=True)
    print("outputs only, d_model = %d, %d heads, causal, base64 tensors in "
          "and out; the attention part = meta.elapsed_ms - that of "
          "window {\"left\": 0}" % (D_MODEL, HEADS))
    arrs = {n: arrays(n) for n in SEEDS}
    bodies = {name: body(arrs[n], w) for name, n, w in VARIANTS}

    extra, note = [], "its defaults"
    port = run_http.free_port()
    srv = run_http.start("attnd", args, port)
    client = Client(port)
    elapsed = {name: [] for name, *_ in VARIANTS}
    cpu = {name: [] for name, *_ in VARIANTS}
    flops = {}
    try:
        for name, n, w in VARIANTS:
            status, meta, msg = check(client, name, n, w, arrs[n],
                                      bodies[name])
            if status == 413 and not extra:
                note = ("--max-flops %s: the default refused %s (%s)"
                        % (BIG_FLOPS, name, meta))
                client.close()
                srv.stop()
                extra = ["--max-flops", BIG_FLOPS]
                port = run_http.free_port()
                srv = run_http.start("attnd", args, port, extra)
                client = Client(port)
                status, meta, msg = check(client, name, n, w, arrs[n],
                                          bodies[name])
            if status != 200:
                raise SystemExit("bench-window: %s: HTTP %d: %s" % (
                    name, status, meta))
            flops[name] = meta["flops"]
            print("  check " + msg, flush=True)
        print("attnd: %s --port P --quiet %s(%s)" % (
            args.attnd, " ".join(extra) + " " if extra else "", note))
        for rnd in range(-1, args.runs):
            k = rnd % len(VARIANTS)
            for name, _n, _w in VARIANTS[k:] + VARIANTS[:k]:
                c0 = cpu_ns(srv.proc.pid)
                status, data = client.post(bodies[name])
                c1 = cpu_ns(srv.proc.pid)
                if status != 200:
                    raise SystemExit("bench-window: %s: HTTP %d: %s" % (
                        name, status, data[:400].decode("utf-8",
                                                        "replace")))
                if rnd >= 0:  # round -1 warms up, untimed
                    elapsed[name].append(meta_of(data)["elapsed_ms"])
                    cpu[name].append((c1 - c0) * 1e-6)
            if rnd < 0:
                continue
            print("  round %d: %s" % (rnd + 1, ", ".join(
                "%s %.1f" % (name, elapsed[name][-1])
                for name, *_ in VARIANTS)), flush=True)
        rss = srv.peak_rss_mib()
    finally:
        client.close()
        srv.stop()

    med = {name: statistics.median(v) for name, v in elapsed.items()}
    att = {"8192 none": med["8192 none"] - med["8192 left0"],
           "8192 left255": med["8192 left255"] - med["8192 left0"],
           "16384 left255": med["16384 left255"] - med["16384 left0"]}
    ratio = att["8192 none"] / att["8192 left255"]
    growth = att["16384 left255"] / att["8192 left255"]
    best = {name: min(v) for name, v in elapsed.items()}
    best_ratio = ((best["8192 none"] - best["8192 left0"])
                  / (best["8192 left255"] - best["8192 left0"]))
    best_growth = ((best["16384 left255"] - best["16384 left0"])
                   / (best["8192 left255"] - best["8192 left0"]))

    def per_round(a, b, c, d):
        """(elapsed[a] - elapsed[b]) / (elapsed[c] - elapsed[d]), round by
        round."""
        out = []
        for i in range(args.runs):
            den = elapsed[c][i] - elapsed[d][i]
            if den > 0:
                out.append((elapsed[a][i] - elapsed[b][i]) / den)
        return out

    r_ratio = per_round("8192 none", "8192 left0", "8192 left255",
                        "8192 left0")
    r_growth = per_round("16384 left255", "16384 left0", "8192 left255",
                         "8192 left0")

    print("\n== windowed attention (%s run, %d rounds, medians of "
          "meta.elapsed_ms; attnd %s)" % (
              "quick" if args.quick else "full", args.runs, note))
    hdr = "%-15s %-30s %-12s %s" % ("variant", "compute (median, range)",
                                     "meta.flops", "attention part")
    print(hdr)
    print("-" * len(hdr))
    for name, *_ in VARIANTS:
        print("%-15s %-30s %-12.3g %s" % (
            name, med_range(elapsed[name]), flops[name],
            "%.1f ms" % att[name] if name in att else "(projections)"))

    def rng(vals):
        return ("middle half %.1fx .. %.1fx" % middle_half(vals)
                if vals else "-")

    print("no window / window %d, n = 8192, attention part: %.1fx (goal >= "
          "%.0fx): %s; per round %s" % (
              WINDOW, ratio, GOAL_RATIO,
              "MET" if ratio >= GOAL_RATIO else "NOT MET", rng(r_ratio)))
    print("window %d, n = 16384 / n = 8192, attention part: %.2fx (goal <= "
          "%.1fx): %s; per round %s" % (
              WINDOW, growth, GOAL_GROWTH,
              "MET" if growth <= GOAL_GROWTH else "NOT MET",
              rng(r_growth)))
    print("from each variant's fastest round: no window / window %d "
          "%.1fx, n = 16384 / n = 8192 %.2fx" % (WINDOW, best_ratio,
                                                 best_growth))
    cmed = {name: statistics.median(v) for name, v in cpu.items()}
    catt = {"8192 none": cmed["8192 none"] - cmed["8192 left0"],
            "8192 left255": cmed["8192 left255"] - cmed["8192 left0"],
            "16384 left255": cmed["16384 left255"] - cmed["16384 left0"]}
    print("\nattnd's CPU time a request (all its threads; median, range), "
          "the cross-check:")
    for name, *_ in VARIANTS:
        print("%-15s %-30s %s" % (
            name, med_range(cpu[name]),
            "%.1f ms" % catt[name] if name in catt else "(projections)"))
    cpu_ratio = cpu_growth = None
    if catt["8192 left255"] > 0:
        cpu_ratio = catt["8192 none"] / catt["8192 left255"]
        cpu_growth = catt["16384 left255"] / catt["8192 left255"]
        print("by CPU time: no window / window %d %.1fx, n = 16384 / n = "
              "8192 %.2fx" % (WINDOW, cpu_ratio, cpu_growth))
    print("whole call, no window / window %d at n = 8192: %.1fx" % (
        WINDOW, med["8192 none"] / med["8192 left255"]))
    print("attnd peak RSS %.0f MiB" % rss)
    out = os.path.join(args.out, "window.json")
    os.makedirs(args.out, exist_ok=True)
    with open(out, "w") as f:
        json.dump({"elapsed_ms": elapsed, "median_ms": med,
                   "attention_ms": att, "meta_flops": flops,
                   "ratio": ratio, "ratio_per_round": r_ratio,
                   "growth": growth, "growth_per_round": r_growth,
                   "best_ratio": best_ratio, "best_growth": best_growth,
                   "cpu_ms": cpu, "cpu_attention_ms": catt,
                   "cpu_ratio": cpu_ratio, "cpu_growth": cpu_growth,
                   "attnd_options": extra}, f, indent=1)
    print("wrote %s (load average at the end: %s)" % (out,
                                                      run_http.loadavg()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
