#!/usr/bin/python3
"""tables_md.py: the Markdown tables of docs/performance.md's service
figures, from the JSON that bench-http, bench-refs and bench-window wrote
(http.json, refs.json, window.json in DIR), so the page shows exactly what
a run measured.

    tables_md.py build/bench
"""
import json
import os
import statistics
import sys

import gen_requests
import run_http
import run_window


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except OSError:
        return None


LABELS = {
    "w1": "1: n = 16, d_model = 64, 4 heads, causal, per-head maps "
          "(wrk, 16 connections)",
    "w2": "2: n = 128, d_model = 256, 8 heads, per-head maps "
          "(wrk, 16 connections)",
    "w3": "3: n = 512, d_model = 768, 12 heads, per-head maps "
          "(20 sequential requests)",
    "w3_b64": "3, base64 tensors in and out",
    "w4": "4: n = 2048, d_model = 256, 8 heads, outputs only "
          "(20 sequential requests)",
}


def http_tables(res):
    names = {name: (LABELS[name], how, goal)
             for name, _title, how, goal in run_http.WORKLOADS}
    print("| workload | measure | long: peer | attnd | ratio (goal) "
          "| short: peer | attnd | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for name in gen_requests.WORKLOADS:
        title, how, goal = names[name]
        cells = []
        for form in gen_requests.forms(name):
            case = name if form == "b64" else "%s.%s" % (name, form)
            p, a = res.get("peer/" + case), res.get("attnd/" + case)
            if not (p and a):
                cells += ["-", "-", "-"]
                continue
            r = run_http.ratio_of(how, p, a)
            if how == "wrk":
                pv, av = "%.1f" % p["rps"], "%.0f" % a["rps"]
            else:
                pv, av = "%.0f ms" % p["p50_ms"], "%.0f ms" % a["p50_ms"]
            rv = "%.1fx" % r
            if form == "long" and goal:
                rv += " (%.0fx, %s)" % (goal, "met" if r >= goal else
                                        "not met")
            cells += [pv, av, rv]
        if len(cells) == 3:  # base64: one form, shown in the long columns
            cells += ["", "", ""]
        print("| %s | %s | %s |" % (
            title, "req/s" if how == "wrk" else "p50",
            " | ".join(cells)))
    print()
    print("| workload | long: peer | attnd | ratio | short: peer | attnd "
          "| ratio |")
    print("|---|---|---|---|---|---|---|")
    for name in gen_requests.WORKLOADS:
        title = names[name][0]
        cells = []
        for form in gen_requests.forms(name):
            case = name if form == "b64" else "%s.%s" % (name, form)
            p, a = res.get("peer/" + case), res.get("attnd/" + case)
            if not (p and a):
                cells += ["-", "-", "-"]
                continue
            pc, ac = p["cpu_ms_per_request"], a["cpu_ms_per_request"]
            cells += ["%.2f ms" % pc, "%.2f ms" % ac, "%.1fx" % (pc / ac)]
        if len(cells) == 3:
            cells += ["", "", ""]
        print("| %s | %s |" % (title, " | ".join(cells)))
    print()
    print("Requests/s of each of the three rounds (the table keeps each "
          "server's best):\n")
    for name in gen_requests.WORKLOADS:
        for form in gen_requests.forms(name):
            case = name if form == "b64" else "%s.%s" % (name, form)
            rounds = [(k, res.get("%s/%s" % (k, case), {}))
                      for k in ("peer", "attnd")]
            if all(r.get("rounds_rps") for _k, r in rounds):
                print("- workload %s, %s form: %s" % (
                    name[1:], form, "; ".join(
                        "%s %s" % (k, run_http.rounds_text(r))
                        for k, r in rounds)))
    c = res.get("attnd/w4.long", {}).get("compute")
    if c:
        print("\nWorkload 4 compute (`meta.flops / meta.elapsed_ms`, median "
              "of 10): %.1f GFLOP/s, %.0f%% of the sgemm peak read just "
              "before and after (%.1f GFLOP/s; goal 50%%)" % (
                  c["gflops"], 100 * c["gflops"] / c["peak_alongside"],
                  c["peak_alongside"]))
    print()


def refs_table(r):
    s = r["summary"]
    print("| way | body | p50 | p90 | requests/s | server CPU a request "
          "| p50 of each round |")
    print("|---|---|---|---|---|---|---|")
    for way in ("inline", "refs"):
        w = s[way]
        print("| %s | %.1f MB | %.1f ms | %.1f ms | %.1f | %.1f ms | %s |" % (
            way, w["body_bytes"] / 1e6, w["p50_ms"], w["p90_ms"], w["rps"],
            w["cpu_ms_per_request"],
            " / ".join("%.1f" % v for v in w["round_p50_ms"])))
    print("\nSpeedup with refs (inline p50 / refs p50): **%.1fx** (goal "
          "4x, %s); per round %s; server CPU time a request %.1fx.\n" % (
              r["speedup"], "met" if r["speedup"] >= 4 else "not met",
              " / ".join("%.1fx" % v for v in r["speedup_per_round"]),
              s["inline"]["cpu_ms_per_request"]
              / s["refs"]["cpu_ms_per_request"]))


def window_table(w):
    print("| variant | meta.elapsed_ms, median (range) | attention part "
          "| CPU time a request, median (range) | attention part |")
    print("|---|---|---|---|---|")
    for name, _n, _win in run_window.VARIANTS:
        e, c = w["elapsed_ms"][name], w["cpu_ms"][name]
        att = w["attention_ms"].get(name)
        catt = w["cpu_attention_ms"].get(name)
        n, win = name.split(" ")
        label = "n = %s, %s" % (n, {"none": "no window",
                                    "left255": "`{\"left\": 255}`",
                                    "left0": "`{\"left\": 0}`"}[win])
        print("| %s | %.1f ms (%.1f .. %.1f) | %s | %.1f ms (%.1f .. %.1f) "
              "| %s |" % (
                  label, statistics.median(e), min(e), max(e),
                  "%.1f ms" % att if att is not None else "projections",
                  statistics.median(c), min(c), max(c),
                  "%.1f ms" % catt if catt is not None else "projections"))
    print("\n| attention part | medians of meta.elapsed_ms | goal | "
          "per round, middle half | fastest rounds | CPU time |")
    print("|---|---|---|---|---|---|")
    print("| no window / window 255, n = 8192 | **%.1fx** | >= 8x, %s "
          "| %.1fx .. %.1fx | %.1fx | %.1fx |" % (
              w["ratio"], "met" if w["ratio"] >= 8 else "not met",
              *run_window.middle_half(w["ratio_per_round"]),
              w["best_ratio"], w["cpu_ratio"]))
    print("| window 255, n = 16384 / n = 8192 | **%.2fx** | <= 2.5x, %s "
          "| %.1fx .. %.1fx | %.2fx | %.2fx |\n" % (
              w["growth"], "met" if w["growth"] <= 2.5 else "not met",
              *run_window.middle_half(w["growth_per_round"]),
              w["best_growth"], w["cpu_growth"]))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "build/bench"
    res = load(os.path.join(out, "http.json"))
    if res:
        http_tables(res)
    r = load(os.path.join(out, "refs.json"))
    if r:
        refs_table(r)
    w = load(os.path.join(out, "window.json"))
    if w:
        window_table(w)
    return 0


if __name__ == "__main__":
    sys.exit(main())
