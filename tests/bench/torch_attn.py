#!/usr/bin/python3
"""torch_attn.py: times torch.nn.functional.multi_head_attention_forward on
the shapes bench_lib times (self-attention, W_O present, no biases, no mask),
with and without per-head weights, and prints one JSON object on stdout for
run_lib.py. Run with Debian's /usr/bin/python3 and python3-torch.

    torch_attn.py --threads T [--quick] --case N:D_MODEL:HEADS:MODE ...

MODE is per_head (need_weights=True, average_attn_weights=False) or outputs
(need_weights=False). Timing policy matches bench_lib.c: one warm-up (kept
as a sample when it took 2 s or more), then at least 3 repetitions and 1 s
(quick: 1 and 0.2 s), at most 15 (quick: 3), no more once the samples add
up to 10 s; the median is reported.
"""
import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F


CAP_S = 10.0


def mem_available():
    """Bytes the kernel says are available now; 0 when unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def time_case(n, d_model, heads, mode, quick):
    gen = torch.Generator().manual_seed(n * 1000003 + d_model * 31 + heads)
    amp = 1.0 / d_model ** 0.5
    x = torch.rand(n, d_model, generator=gen) * 2 - 1
    # in_proj_weight is [W_q; W_k; W_v] stacked, each (E, E), applied as x W^T.
    w_in = (torch.rand(3 * d_model, d_model, generator=gen) * 2 - 1) * amp
    w_o = (torch.rand(d_model, d_model, generator=gen) * 2 - 1) * amp
    need = mode == "per_head"

    def call():
        return F.multi_head_attention_forward(
            x, x, x, d_model, heads, w_in, None, None, None, False, 0.0,
            w_o, None, training=False, need_weights=need,
            average_attn_weights=False)

    min_reps, max_reps, min_total = (1, 3, 0.2) if quick else (3, 15, 1.0)
    samples = []
    with torch.inference_mode():
        t0 = time.perf_counter()
        out, wts = call()
        first = time.perf_counter() - t0
        shape_ok = tuple(out.shape) == (n, d_model) and (
            not need or tuple(wts.shape) == (heads, n, n))
        del out, wts
        # Same policy as bench_lib.c: a call of seconds is its own warm-up,
        # and repetitions stop once the samples add up to CAP_S.
        if first >= 2.0:
            samples.append(first)
        while len(samples) < max_reps and (
                len(samples) < min_reps or sum(samples) < min_total) and \
                not (samples and sum(samples) >= CAP_S):
            t0 = time.perf_counter()
            out, wts = call()
            samples.append(time.perf_counter() - t0)
            del out, wts
    return {"n": n, "d_model": d_model, "heads": heads, "mode": mode,
            "reps": len(samples), "median_ms": statistics.median(samples) * 1e3,
            "min_ms": min(samples) * 1e3, "shape_ok": shape_ok,
            "status": "ok"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--case", action="append", default=[])
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    for spec in args.case:
        n, d_model, heads, mode = spec.split(":")
        n, d_model, heads = int(n), int(d_model), int(heads)
        # The explicit path keeps the scores, the softmax and the returned
        # weights (3 h n^2 floats) alive at once; skip it when that would
        # take more than half of the available memory.
        need_bytes = 3 * heads * n * n * 4 if mode == "per_head" else heads * n * n * 4
        avail = mem_available()
        if avail and need_bytes > avail / 2:
            rows.append({"n": n, "d_model": d_model, "heads": heads,
                         "mode": mode, "status": "skipped",
                         "reason": "needs %.0f MiB, MemAvailable %.0f MiB"
                                   % (need_bytes / 2**20, avail / 2**20)})
            continue
        rows.append(time_case(n, d_model, heads, mode, args.quick))
        print("torch %-8s n=%-5d d_model=%-4d h=%-2d %9.3f ms" % (
            mode, n, d_model, heads, rows[-1]["median_ms"]), file=sys.stderr)
    json.dump({"torch_version": torch.__version__,
               "threads": torch.get_num_threads(),
               "parallel": torch.__config__.parallel_info().splitlines()[0:3],
               "rows": rows}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
