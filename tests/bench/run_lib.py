#!/usr/bin/python3
"""run_lib.py: the driver of `make bench-lib`.

Runs bench_lib (the C benchmark: sgemm peak, answer checks, scaling in n,
two thread configurations), then torch_attn.py on the same shapes with the
same thread count, and prints them side by side with the ratio
torch_time / attn_time per row, the fitted log-log slopes and the goal rows
of the library's goals. Writes to OUT: lib_c.csv (bench_lib's rows), torch_attn.json,
lib_vs_torch.csv (merged) and scaling.png (gnuplot, log-log time against n).
Prints figures; exits non-zero only when a program fails or an answer check
fails, never on a time.
"""
import argparse
import csv
import json
import math
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import blasenv  # noqa: E402

PY = "/usr/bin/python3"


def read_c_csv(path):
    meta, rows = {}, []
    with open(path) as f:
        lines = f.read().splitlines()
    for line in lines:
        if line.startswith("#"):
            for kv in line.lstrip("# ").split():
                k, v = kv.split("=", 1)
                meta[k] = v
    for r in csv.DictReader(l for l in lines if not l.startswith("#")):
        rows.append(r)
    return meta, rows


def slope(points):
    """Least-squares slope of log t against log n; None under 2 points."""
    pts = [(math.log(n), math.log(t)) for n, t in points if t]
    if len(pts) < 2:
        return None
    k = len(pts)
    sx = sum(p[0] for p in pts)
    sy = sum(p[1] for p in pts)
    sxx = sum(p[0] ** 2 for p in pts)
    sxy = sum(p[0] * p[1] for p in pts)
    return (k * sxy - sx * sy) / (k * sxx - sx * sx)


def fmt(v, spec, width):
    return format(v, spec).rjust(width) if v is not None else "-".rjust(width)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    quick = ["--quick"] if args.quick else []
    env, blas_note = blasenv.blas_env(args.bin, args.threads)

    print("bench-lib: %s, %d CPUs, load average %s" % (
        cpu_model(),
        os.cpu_count(), loadavg()), flush=True)
    print("BLAS for bench_lib and torch: %s" % blas_note)
    if "OPENBLAS_CORETYPE" in env:
        slow = subprocess.run(
            [args.bin, "--peak-only", "--threads", str(args.threads)] + quick,
            env=blasenv.default_detection_env(args.threads),
            capture_output=True, text=True).stdout.strip()
        print("(for comparison, cblas_sgemm 2048^3 with OpenBLAS's own "
              "kernel choice: %s GFLOP/s, %d threads)" % (slow, args.threads),
              flush=True)
    c_csv = os.path.join(args.out, "lib_c.csv")
    rc = subprocess.call([args.bin, "--threads", str(args.threads), "--csv",
                          c_csv] + quick, env=env)
    if rc != 0:
        print("bench-lib: bench_lib failed (exit %d)" % rc)
        return 1
    meta, crows = read_c_csv(c_csv)
    # The higher of the two readings (before and after the runs) is the
    # machine's peak; a shared machine only ever lowers a reading.
    peak = max(float(meta["sgemm_peak_gflops"]),
               float(meta.get("sgemm_peak_end_gflops", 0)))

    shapes = []
    for r in crows:
        if r["status"] == "skipped":
            continue
        key = (int(r["n"]), int(r["d_model"]), int(r["heads"]), r["mode"])
        if key not in shapes:
            shapes.append(key)
    cmd = [PY, os.path.join(HERE, "torch_attn.py"), "--threads",
           str(args.threads)] + quick
    for s in shapes:
        cmd += ["--case", "%d:%d:%d:%s" % s]
    print("\n== PyTorch: torch.nn.functional.multi_head_attention_forward, "
          "torch.set_num_threads(%d)" % args.threads, flush=True)
    res = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True)
    if res.returncode != 0:
        print("bench-lib: torch_attn.py failed (exit %d)" % res.returncode)
        return 1
    tj = json.loads(res.stdout)
    with open(os.path.join(args.out, "torch_attn.json"), "w") as f:
        json.dump(tj, f, indent=1)
    trows = {(r["n"], r["d_model"], r["heads"], r["mode"]): r
             for r in tj["rows"]}

    def c_row(config, key):
        for r in crows:
            if (r["config"] == config and (int(r["n"]), int(r["d_model"]),
                                           int(r["heads"]), r["mode"]) == key):
                return r
        return None

    def ms(r):
        return float(r["median_ms"]) if r and r.get("median_ms") else None

    print("\n== side by side (median ms; GFLOP/s from attn_flops; peak = "
          "cblas_sgemm %.1f GFLOP/s, %d threads; torch %s)" % (
              peak, args.threads, tj["torch_version"]))
    hdr = ("%-8s %5s %5s %3s | %10s %7s %6s | %10s %7s %6s | %10s %6s | "
           "%9s %9s" % ("mode", "n", "d_mod", "h", "blas ms", "GFLOP/s",
                        "%peak", "exec ms", "GFLOP/s", "%peak", "torch ms",
                        "%peak", "torch/bls", "torch/exe"))
    print(hdr)
    print("-" * len(hdr))
    merged = []
    for key in shapes:
        b, e, t = c_row("blas", key), c_row("exec", key), trows.get(key)
        bm, em = ms(b), ms(e)
        tm = t.get("median_ms") if t and t["status"] == "ok" else None
        flops = int((b or e)["flops"]) if (b or e) and (b or e)["flops"] else None

        def gf(m):
            return flops / (m * 1e-3) * 1e-9 if (m and flops) else None

        def pk(m):
            return 100 * gf(m) / peak if gf(m) else None

        rb = tm / bm if (tm and bm) else None
        re_ = tm / em if (tm and em) else None
        print("%-8s %5d %5d %3d | %s %s %s | %s %s %s | %s %s | %s %s" % (
            key[3], key[0], key[1], key[2],
            fmt(bm, ".3f", 10), fmt(gf(bm), ".1f", 7), fmt(pk(bm), ".1f", 6),
            fmt(em, ".3f", 10), fmt(gf(em), ".1f", 7), fmt(pk(em), ".1f", 6),
            fmt(tm, ".3f", 10), fmt(pk(tm), ".1f", 6),
            fmt(rb, ".2f", 9), fmt(re_, ".2f", 9)))
        merged.append({"mode": key[3], "n": key[0], "d_model": key[1],
                       "heads": key[2], "flops": flops, "blas_ms": bm,
                       "exec_ms": em, "torch_ms": tm,
                       "blas_gflops": gf(bm), "exec_gflops": gf(em),
                       "torch_gflops": gf(tm), "torch_over_blas": rb,
                       "torch_over_exec": re_})
    for key in shapes:
        t = trows.get(key)
        if t and t["status"] != "ok":
            print("torch %s n=%d skipped: %s" % (key[3], key[0], t["reason"]))

    print("\nfitted log-log slope of time against n (d_model=256, h=8):")
    for mode in ("per_head", "outputs"):
        parts = []
        for name, col in (("blas", "blas_ms"), ("exec", "exec_ms"),
                          ("torch", "torch_ms")):
            pts = [(m["n"], m[col]) for m in merged
                   if m["mode"] == mode and m["d_model"] == 256 and m[col]]
            s = slope(pts)
            parts.append("%s %s (%d points)" % (
                name, "%.2f" % s if s is not None else "-", len(pts)))
        print("  %-8s %s" % (mode, ", ".join(parts)))

    print("\ngoals:")
    g1 = next((m for m in merged if m["mode"] == "outputs" and m["n"] == 2048
               and m["d_model"] == 256), None)
    if g1:
        for cfg in ("blas", "exec"):
            v = g1[cfg + "_gflops"]
            if v:
                print("  outputs-only n=2048 d_model=256 h=8, %s: %.1f%% of "
                      "sgemm peak (goal >= 50%%): %s" % (
                          cfg, 100 * v / peak,
                          "MET" if v / peak >= 0.5 else "NOT MET"))
    if "paired_frac_median" in meta:
        # the same goal, each call paired with an sgemm peak run just before
        # it (bench_lib's bench_pair): the two on one statistic, one window
        fm = float(meta["paired_frac_median"])
        print("  outputs-only n=2048 d_model=256 h=8, %s, paired with the "
              "peak over %s alternations: median %.3f ms against the sgemm's "
              "median %.1f GFLOP/s = %.1f%% of peak (goal >= 50%%): %s; "
              "best against best %.1f%%" % (
                  meta["paired_config"], meta["paired_pairs"],
                  float(meta["paired_att_median_ms"]),
                  float(meta["paired_peak_median_gflops"]), 100 * fm,
                  "MET" if fm >= 0.5 else "NOT MET",
                  100 * float(meta["paired_frac_best"])))
    g2 = next((m for m in merged if m["mode"] == "per_head" and m["n"] == 512
               and m["d_model"] == 768), None)
    if g2:
        for cfg in ("blas", "exec"):
            r = g2["torch_over_" + cfg]
            if r:
                print("  per-head n=512 d_model=768 h=12, %s: torch/attn = "
                      "%.2fx (goal >= 1.5x): %s" % (
                          cfg, r, "MET" if r >= 1.5 else "NOT MET"))

    out_csv = os.path.join(args.out, "lib_vs_torch.csv")
    with open(out_csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(merged[0].keys()))
        w.writeheader()
        for m in merged:
            w.writerow(m)
    print("\nwrote %s, %s, %s" % (c_csv, out_csv,
                                   os.path.join(args.out, "torch_attn.json")))
    plot(args.out, merged, peak, args.threads)
    print("load average at the end: %s" % loadavg())
    return 0


def plot(out, merged, peak, threads):
    if not shutil.which("gnuplot"):
        print("gnuplot not found: no PNG")
        return
    series = [("blas_ms", "per_head", "attn, per-head weights (blas)"),
              ("blas_ms", "outputs", "attn, outputs only (blas)"),
              ("exec_ms", "per_head", "attn, per-head weights (exec)"),
              ("exec_ms", "outputs", "attn, outputs only (exec)"),
              ("torch_ms", "per_head", "torch, need_weights=True"),
              ("torch_ms", "outputs", "torch, need_weights=False")]
    dat = os.path.join(out, "scaling.dat")
    plots = []
    with open(dat, "w") as f:
        idx = 0
        for col, mode, title in series:
            pts = [(m["n"], m[col]) for m in merged
                   if m["mode"] == mode and m["d_model"] == 256 and m[col]]
            if not pts:
                continue
            f.write("# %s\n" % title)
            for n, t in pts:
                f.write("%d %.6f\n" % (n, t))
            f.write("\n\n")
            plots.append("'%s' index %d with linespoints lw 2 title '%s'"
                         % (dat, idx, title))
            idx += 1
    png = os.path.join(out, "scaling.png")
    script = "\n".join([
        "set terminal pngcairo size 900,600 noenhanced" if has_cairo()
        else "set terminal png size 900,600 noenhanced",
        "set output '%s'" % png,
        "set logscale xy",
        "set xlabel 'n (self-attention, d_model = 256, 8 heads)'",
        "set ylabel 'median time per call (ms)'",
        "set title 'attn_forward vs torch multi_head_attention_forward, "
        "%d threads, sgemm peak %.0f GFLOP/s'" % (threads, peak),
        "set key top left",
        "set grid",
        "set xtics (128, 512, 2048, 8192)",
        "plot " + ", ".join(plots),
    ]) + "\n"
    gp = os.path.join(out, "scaling.gp")
    with open(gp, "w") as f:
        f.write(script)
    rc = subprocess.call(["gnuplot", gp])
    print("wrote %s (gnuplot exit %d)" % (png, rc))


def has_cairo():
    try:
        r = subprocess.run(["gnuplot", "-e", "set terminal"],
                           capture_output=True, text=True)
        return "pngcairo" in (r.stdout + r.stderr)
    except OSError:
        return False


def loadavg():
    """The 1, 5 and 15 minute load averages: how busy the machine was."""
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


if __name__ == "__main__":
    sys.exit(main())
