#!/usr/bin/python3
"""run_http.py: the driver of `make bench-http`, attnd against the FastAPI +
PyTorch peer (tests/bench/peer/app.py) on the same requests, one server after
the other, never both at once: workload by workload, the peer then attnd, so
both figures of a workload come from the same few minutes of a shared
machine; the throughput workloads (1, 2) run --rounds such alternations
(default 3) and keep each server's best round.

Every JSON workload runs in two forms of its numbers (gen_requests.py): the
long form, what Python clients send (json.dumps of float32 .tolist(): 16-17
significant digits, ", " separators), which carries the goals, and the short
compact '%.6g' form beside it.

For each server and each workload, on a freshly started server:
  1. POST the body once and check the answer against a NumPy float64
     reference, element-wise within 1e-4 * (1 + |ref|) (the contract's
     tolerance), and against the other server's answer when there is one;
     a wrong answer stops the benchmark (exit 1): nothing is timed.
  2. time it: wrk (16 connections, one wrk thread, ~10 s) for workloads 1-2,
     requests per second; curl (N sequential requests on one keep-alive
     connection, time_total each) for workloads 3-4, median and p90;
  3. read the server's peak RSS (VmHWM in /proc; for the peer, summed over
     its processes: peer/serve.py and its two uvicorn processes).
Then prints a table with the absolute figures and the attnd/peer ratios
against the goals (20x, 10x, 5x, 3x, on the long form) and, for workload 4,
meta.flops / meta.elapsed_ms against the cblas_sgemm peak measured by
bench_lib --peak-only in the same run. Figures, never a failure on a time.

    run_http.py --attnd build/attnd --peak-bin build/bench/bench_lib \
        --out build/bench [--threads T] [--quick] [--peer-only]
        [--workloads w1,w4] [--forms long,short]
"""
import argparse
import base64
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import http.client

import numpy as np

try:
    import ujson as fastjson
except ImportError:  # the benchmark's deps install it; json is the fallback
    fastjson = json

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import blasenv  # noqa: E402
import gen_requests  # noqa: E402

PY = "/usr/bin/python3"
TOL = 1e-4

# the peer's uvicorn processes, one per core of this 2-core machine, each
# with its own listening socket (peer/serve.py)
PEER_PROCESSES = 2

# the number forms timed (gen_requests.FORMS; --forms narrows them)
FORMS = list(gen_requests.FORMS)

# name, title, how it is timed, goal ratio (attnd over peer, long form) or
# None
WORKLOADS = [
    ("w1", "1 small n=16 d=64 h=4 causal", "wrk", 20.0),
    ("w2", "2 layer n=128 d=256 h=8", "wrk", 10.0),
    ("w3", "3 maps n=512 d=768 h=12", "latency", 5.0),
    ("w3_b64", "3 maps, base64", "latency", None),
    ("w4", "4 outputs n=2048 d=256 h=8", "latency", 3.0),
]


def cases():
    """(case, workload name, number form, title, how timed, goal) for each
    body that is timed, the long form of a workload before its short form;
    the goal stands on the long form only."""
    out = []
    for name, title, how, goal in WORKLOADS:
        for form in gen_requests.forms(name):
            if form not in FORMS and form != "b64":
                continue
            case = name if form == "b64" else "%s.%s" % (name, form)
            label = title if form == "b64" else "%s, %s" % (title, form)
            out.append((case, name, form, label, how,
                        goal if form == "long" else None))
    return out


# -- reference and answer checks ---------------------------------------------

def reference(name, form):
    """float64 output [n][d_out] and per-head weights [h][n][n] (or None)."""
    n, d, h, mask, ret, _enc, _seed = gen_requests.WORKLOADS[name]
    a = gen_requests.inputs(name, form)
    return attention_ref(a, h, mask, ret == "per_head")


def attention_ref(a, h, mask, per_head):
    """Self-attention of a["x"] with w_q, w_k, w_v, w_o in float64: the
    output [n][d_out] and, when per_head, the weights [h][n][n]."""
    n, d = a["x"].shape
    dk = a["w_q"].shape[1] // h

    def heads(t):
        return t.reshape(n, h, dk).transpose(1, 0, 2)

    q, k, v = heads(a["x"] @ a["w_q"]), heads(a["x"] @ a["w_k"]), \
        heads(a["x"] @ a["w_v"])
    s = (q @ k.transpose(0, 2, 1)) / np.sqrt(dk)
    if mask == "causal":
        s = np.where(np.triu(np.ones((n, n), bool), 1), -np.inf, s)
    s = s - s.max(axis=-1, keepdims=True)  # stable: the max is subtracted
    w = np.exp(s)
    w /= w.sum(axis=-1, keepdims=True)
    out = (w @ v).transpose(1, 0, 2).reshape(n, h * dk) @ a["w_o"]
    return out, (w if per_head else None)


def decode(val):
    if isinstance(val, dict):
        raw = base64.b64decode(val["data"])
        return np.frombuffer(raw, dtype="<f4").reshape(val["shape"]).astype(
            np.float64)
    return np.asarray(val, dtype=np.float64)


def post_once(port, body, timeout=600):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", "/attend", body,
                     {"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def check_answer(server, name, port, body, ref, other):
    """Checks one answer; returns (ok, answer arrays, meta, message)."""
    status, data = post_once(port, body)
    if status != 200:
        return False, None, None, "%s %s: HTTP %d: %s" % (
            server, name, status, data[:300].decode("utf-8", "replace"))
    resp = fastjson.loads(data)
    got = {"output": decode(resp["output"])}
    want = {"output": ref[0]}
    if ref[1] is not None:
        if "attention" not in resp:
            return False, None, None, "%s %s: no attention" % (server, name)
        got["attention"] = decode(resp["attention"])
        want["attention"] = ref[1]
    msgs, ok = [], True
    for key in want:
        if got[key].shape != want[key].shape:
            return False, None, None, "%s %s: %s shape %s, expected %s" % (
                server, name, key, got[key].shape, want[key].shape)
        scale = 1.0 + np.abs(want[key])
        err = float(np.max(np.abs(got[key] - want[key]) / scale))
        ok &= err <= TOL
        msg = "%s err/(1+|ref|) %.2e" % (key, err)
        if other is not None:
            agree = float(np.max(np.abs(got[key] - other[key]) / scale))
            ok &= agree <= TOL
            msg += ", vs peer %.2e" % agree
        msgs.append(msg)
    return ok, got, resp.get("meta", {}), "%s %-7s %s: %s" % (
        server, name, "ok" if ok else "MISMATCH", "; ".join(msgs))


# -- servers ----------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A server process started in its own session, so that it and its
    workers are stopped together and by their own ids."""

    def __init__(self, kind, cmd, env, port):
        self.kind, self.port = kind, port
        self.proc = subprocess.Popen(cmd, env=env, start_new_session=True,
                                     stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE)

    def wait_ready(self, processes=1, timeout=90):
        """Until /healthz answers 200, from that many processes (the peer's
        name the one that answered: each new connection may land on
        another)."""
        deadline = time.time() + timeout
        seen = set()
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited with %d: %s" % (
                    self.kind, self.proc.returncode,
                    self.proc.stderr.read().decode()[-2000:]))
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port,
                                                  timeout=2)
                conn.request("GET", "/healthz")
                resp = conn.getresponse()
                body = resp.read()
                conn.close()
                if resp.status == 200:
                    if processes == 1:
                        return
                    seen.add(json.loads(body).get("pid"))
                    if len(seen) >= processes:
                        return
                    continue
            except (OSError, ValueError):
                pass
            time.sleep(0.2)
        raise RuntimeError("%s not ready after %d s (%d of %d processes "
                           "answered)" % (self.kind, timeout, len(seen),
                                          processes))

    def pids(self):
        """Processes of this server's session (the peer's: serve.py and its
        uvicorn processes)."""
        out = []
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % d) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if int(fields[3]) == self.proc.pid:  # session id
                    out.append(int(d))
            except (OSError, IndexError, ValueError):
                pass
        return out

    def cpu_seconds(self):
        """User + system CPU time of the server's processes so far."""
        return sum(self.cpu_by_pid().values())

    def cpu_by_pid(self):
        """{pid: user + system CPU seconds} of the server's processes."""
        out = {}
        for pid in self.pids():
            try:
                with open("/proc/%d/stat" % pid) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                ticks = int(fields[11]) + int(fields[12])  # utime, stime
                out[pid] = ticks / os.sysconf("SC_CLK_TCK")
            except (OSError, IndexError, ValueError):
                pass
        return out

    def peak_rss_mib(self):
        total = 0
        for pid in self.pids():
            try:
                with open("/proc/%d/status" % pid) as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            total += int(line.split()[1])
            except OSError:
                pass
        return total / 1024.0

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        # the peer's processes leave with serve.py; make sure of it
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def start(kind, args, port, extra=()):
    """A server of that kind on port, ready; extra: more attnd options."""
    env = dict(args.env)
    processes = 1
    if kind == "peer":
        env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
        processes = PEER_PROCESSES
        cmd = [PY, os.path.join(HERE, "peer", "serve.py"), "--host",
               "127.0.0.1", "--port", str(port), "--workers",
               str(processes)]
    else:
        # attnd runs with its own defaults: nothing from this environment
        # tunes its BLAS (it picks its core type and threads itself).
        env.pop("OPENBLAS_NUM_THREADS", None)
        env.pop("OPENBLAS_CORETYPE", None)
        cmd = [args.attnd, "--port", str(port), "--quiet"] + list(extra)
    s = Server(kind, cmd, env, port)
    try:
        s.wait_ready(processes)
    except RuntimeError:
        s.stop()
        raise
    return s


# -- timing -----------------------------------------------------------------

def run_wrk(port, body_path, seconds):
    env = dict(os.environ, BENCH_BODY=body_path)
    cmd = ["wrk", "-t1", "-c16", "-d%ds" % seconds, "--timeout", "60s",
           "-s", os.path.join(HERE, "post.lua"),
           "http://127.0.0.1:%d/attend" % port]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True)
    m = re.search(r"^BENCH_JSON (.*)$", res.stdout, re.M)
    if not m:
        raise RuntimeError("wrk: %s %s" % (res.stdout, res.stderr))
    j = json.loads(m.group(1))
    j["rps"] = j["requests"] / (j["duration_us"] * 1e-6)
    j["errors"] = (j["non2xx"] + j["connect_errors"] + j["read_errors"]
                   + j["write_errors"] + j["timeouts"])
    return j


def run_latency(port, body_path, count):
    """count sequential POSTs on one keep-alive connection (curl reuses it
    across the repeated URL); time_total of each, in ms."""
    url = "http://127.0.0.1:%d/attend" % port
    cmd = ["curl", "-sS", "--data-binary", "@" + body_path,
           "-H", "Content-Type: application/json", "-H", "Expect:",
           "-w", "%{http_code} %{time_total} %{size_download} "
                 "%{num_connects}\\n"]
    for _ in range(count):
        cmd += ["-o", "/dev/null", url]
    res = subprocess.run(cmd, capture_output=True, text=True)
    times, codes, size, connects = [], [], 0, 0
    for line in res.stdout.split("\n"):
        parts = line.split()
        if len(parts) == 4:
            codes.append(parts[0])
            times.append(float(parts[1]) * 1e3)
            size = int(parts[2])
            connects += int(parts[3])
    if len(times) != count:
        raise RuntimeError("curl: %s %s" % (res.stdout, res.stderr))
    times.sort()
    return {"n": count, "p50_ms": statistics.median(times),
            "p90_ms": p90(times), "min_ms": times[0],
            "mean_ms": statistics.fmean(times), "times_ms": times,
            "non200": sum(c != "200" for c in codes),
            "response_bytes": size, "connections": connects}


def p90(times):
    """The 90th percentile of a sorted list: the smallest value with at
    least 90% of the list at or below it."""
    return times[min(len(times) - 1, int(np.ceil(0.9 * len(times))) - 1)]


def meta_rate(port, body, count):
    """meta.flops / meta.elapsed_ms over count untimed requests: median
    GFLOP/s of the server's compute and the median elapsed_ms, and the best
    (the sgemm peak it is compared with is a best of 5)."""
    rates, elapsed = [], []
    for _ in range(count):
        status, data = post_once(port, body)
        if status != 200:
            continue
        i = data.rfind(b'"meta"')
        meta = fastjson.loads(data[data.index(b"{", i):data.index(b"}", i) + 1])
        rates.append(meta["flops"] / (meta["elapsed_ms"] * 1e-3) * 1e-9)
        elapsed.append(meta["elapsed_ms"])
    if not rates:
        return None
    return {"gflops": statistics.median(rates), "gflops_best": max(rates),
            "elapsed_ms": statistics.median(elapsed),
            "flops": meta["flops"], "samples": len(rates)}


# -- the run ----------------------------------------------------------------

def bench_one(kind, case, args, bodies, refs, answers):
    """One server on one case (a workload in one number form), freshly
    started: check, time, measure. Returns the figures."""
    cid, name, form, _label, how, _goal = case
    port = free_port()
    srv = start(kind, args, port)
    try:
        with open(bodies[cid], "rb") as f:
            body = f.read()
        ok, got, meta, msg = check_answer(
            kind, cid, port, body, refs[cid],
            answers.get(("peer", cid)) if kind == "attnd" else None)
        print("  check " + msg, flush=True)
        if not ok:
            raise SystemExit("bench-http: wrong answer from %s on %s: "
                             "not timing" % (kind, cid))
        answers[(kind, cid)] = got
        r = {"meta_elapsed_ms": meta.get("elapsed_ms"),
             "body_bytes": len(body)}
        cpu0 = srv.cpu_seconds()
        by_pid0 = srv.cpu_by_pid()
        if how == "wrk":
            r.update(run_wrk(port, bodies[cid], args.wrk_seconds))
            print("  %-6s %-9s %9.1f req/s  p50 %.1f ms  p90 %.1f ms  "
                  "(%d requests, %d errors)" % (
                      kind, cid, r["rps"], r["lat_p50_us"] / 1e3,
                      r["lat_p90_us"] / 1e3, r["requests"], r["errors"]),
                  flush=True)
        else:
            r.update(run_latency(port, bodies[cid], args.latency_n))
            print("  %-6s %-9s p50 %9.1f ms  p90 %9.1f ms  (%d requests,"
                  " %d non-200, response %d bytes, %d connection(s))" % (
                      kind, cid, r["p50_ms"], r["p90_ms"], r["n"],
                      r["non200"], r["response_bytes"],
                      r["connections"]), flush=True)
        # CPU time per request hardly depends on what else the machine
        # runs, unlike wall time: the figure to compare on a busy box.
        done = r["requests"] if how == "wrk" else r["n"]
        r["cpu_ms_per_request"] = ((srv.cpu_seconds() - cpu0) * 1e3
                                   / done if done else None)
        if kind == "peer":
            # each uvicorn process has its own listening socket and the
            # kernel spreads the connections over them; the share of each
            # process shows that both served.
            used = sorted((t - by_pid0.get(pid, 0.0)
                           for pid, t in srv.cpu_by_pid().items()),
                          reverse=True)
            total = sum(used)
            if total > 0:
                r["cpu_shares"] = [round(u / total, 3) for u in used]
                print("  peer CPU by process: %s" % " / ".join(
                    "%.0f%%" % (100 * u / total) for u in used), flush=True)
        if name == "w4" and form == FORMS[0]:
            # the peak read just before and just after these requests (the
            # higher of the two), beside the run-wide one: this machine's
            # peak drifts over minutes
            before = sgemm_peak(args)
            r["compute"] = meta_rate(port, body, args.meta_n)
            near = [v for v in (before, sgemm_peak(args)) if v]
            if r["compute"] and near:
                r["compute"]["peak_alongside"] = max(near)
        r["peak_rss_mib"] = srv.peak_rss_mib()
        r["processes"] = len(srv.pids())
        return r
    finally:
        srv.stop()


def bench_workloads(servers, args, bodies, refs, answers, results):
    """Case by case, the servers one after the other (the peer first:
    attnd's answer is also checked against it), so the two figures of a
    case are taken minutes apart at most, not a whole run apart.
    Throughput workloads run args.rounds such rounds, alternating the
    servers, and keep each server's best round: on a shared machine that
    slows down and speeds up over minutes, the best of a few is the
    steadiest figure, and both servers get the same chances."""
    for case in cases():
        cid, _name, _form, label, how, _goal = case
        rounds = args.rounds if how == "wrk" else 1
        print("\n== workload %s%s" % (
            label, " (%d rounds, best kept)" % rounds if rounds > 1 else ""),
            flush=True)
        for _rnd in range(rounds):
            for kind in servers:
                r = bench_one(kind, case, args, bodies, refs, answers)
                best = results.get((kind, cid))
                if how == "wrk":
                    seen = (best or {}).get("rounds_rps", []) + [r["rps"]]
                    busy = (best or {}).get("rounds_busy", []) + [busy_of(r)]
                    if best is None or r["rps"] > best["rps"]:
                        best = r
                    best["rounds_rps"], best["rounds_busy"] = seen, busy
                else:
                    best = r
                results[(kind, cid)] = best


def busy_of(r):
    """How many of the server's processes did a quarter or more of its
    work in a round (the peer: 1 or 2 uvicorn processes); None for attnd."""
    shares = r.get("cpu_shares")
    return sum(v >= 0.25 for v in shares) if shares else None


def rounds_text(r):
    """A server's requests/s of each round, the peer's marked with the
    processes that served it."""
    busy = r.get("rounds_busy") or [None] * len(r["rounds_rps"])
    return " / ".join("%.1f%s" % (v, " (%d process%s)" % (b, "es" * (b > 1))
                                  if b else "")
                      for v, b in zip(r["rounds_rps"], busy))


def loadavg():
    """The 1, 5 and 15 minute load averages: how busy the machine was."""
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def sgemm_peak(args):
    """Best-of-5 cblas_sgemm 2048^3 GFLOP/s with T threads (bench_lib);
    None when bench_lib is not built or prints no figure."""
    if not os.path.exists(args.peak_bin):
        return None
    out = subprocess.run([args.peak_bin, "--peak-only", "--threads",
                          str(args.threads)], env=args.env,
                         capture_output=True, text=True).stdout.strip()
    try:
        return float(out)
    except ValueError:
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnd", default="build/attnd")
    ap.add_argument("--peak-bin", default="build/bench/bench_lib")
    ap.add_argument("--out", default="build/bench")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--peer-only", action="store_true")
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds of the wrk workloads, servers alternating; "
                         "each keeps its best (default 3; 1 with --quick)")
    ap.add_argument("--workloads", default="",
                    help="comma-separated subset, e.g. w1,w4 (default all)")
    ap.add_argument("--forms", default="",
                    help="number forms of the JSON workloads, e.g. long "
                         "(default: %s)" % ",".join(FORMS))
    args = ap.parse_args()
    if args.workloads:
        keep = args.workloads.split(",")
        WORKLOADS[:] = [w for w in WORKLOADS if w[0] in keep]
    if args.forms:
        FORMS[:] = [f for f in gen_requests.FORMS
                    if f in args.forms.split(",")]
    args.wrk_seconds = 3 if args.quick else 10
    args.rounds = 1 if args.quick else args.rounds
    args.latency_n = 3 if args.quick else 20
    args.meta_n = 3 if args.quick else 10
    for tool in ("wrk", "curl"):
        if not shutil.which(tool):
            print("bench-http: %s not found (make bench-deps)" % tool)
            return 1

    print("bench-http: %d CPUs, %s run, load average %s" % (
        os.cpu_count(),
        "quick" if args.quick else "full", loadavg()), flush=True)
    args.env, blas_note = blasenv.blas_env(args.peak_bin, args.threads)
    print("BLAS for the peer and the sgemm peak: %s; attnd chooses its own"
          % blas_note)
    subprocess.check_call([PY, os.path.join(HERE, "gen_requests.py"),
                           args.out])
    bodies, refs = {}, {}
    for cid, name, form, *_ in cases():
        bodies[cid] = os.path.join(args.out, "requests",
                                   gen_requests.body_file(name, form))
        refs[cid] = reference(name, form)

    peak = None
    if os.path.exists(args.peak_bin):
        peak = sgemm_peak(args)
        print("cblas_sgemm 2048^3 peak, %d threads: %s GFLOP/s" % (
            args.threads, "%.1f" % peak if peak else "?"))

    attnd_ok = not args.peer_only and os.access(args.attnd, os.X_OK)
    if not attnd_ok and not args.peer_only:
        print("bench-http: %s is not built: measuring the peer alone"
              % args.attnd)
    answers, results = {}, {}
    servers = ["peer"] + (["attnd"] if attnd_ok else [])
    print("\npeer: FastAPI + uvicorn (2 processes, a listening socket each, "
          "h11), PyTorch CPU (1 thread per process), ujson")
    if attnd_ok:
        print("attnd: %s --port P --quiet (its defaults)" % args.attnd)
    bench_workloads(servers, args, bodies, refs, answers, results)

    if os.path.exists(args.peak_bin):
        # A second reading after the servers: a busy shared machine only
        # ever lowers one, so the higher of the two is the peak.
        peak_end = sgemm_peak(args)
        print("\ncblas_sgemm 2048^3 peak again after the runs: %s GFLOP/s" % (
            "%.1f" % peak_end if peak_end else "?"))
        if peak_end and (not peak or peak_end > peak):
            peak = peak_end
    report(args, results, peak, servers)
    with open(os.path.join(args.out, "http.json"), "w") as f:
        json.dump({"%s/%s" % k: v for k, v in results.items()}, f, indent=1)
    print("\nwrote %s (load average at the end: %s)" % (
        os.path.join(args.out, "http.json"), loadavg()))
    return 0


def ratio_of(how, p, a):
    """attnd over peer: requests/s for wrk cases, p50 latency otherwise."""
    if not (p and a):
        return None
    if how == "wrk":
        return a["rps"] / p["rps"] if p["rps"] else None
    return p["p50_ms"] / a["p50_ms"] if a["p50_ms"] else None


def report(args, results, peak, servers):
    print("\n== results (%s run; wrk -t1 -c16 -d%ds; latency: %d sequential "
          "requests with curl)" % ("quick" if args.quick else "full",
                                   args.wrk_seconds, args.latency_n))
    print("long: json.dumps of float32 .tolist() (16-17 digits, \", \" "
          "separators), the form the goals stand on; short: compact '%.6g'")
    hdr = "%-36s %-14s %-16s %-16s %8s %6s %-8s %9s %9s" % (
        "workload", "measure", "peer", "attnd", "ratio", "goal", "",
        "attnd RSS", "peer RSS")
    print(hdr)
    print("-" * len(hdr))
    for cid, _name, _form, label, how, goal in cases():
        p, a = results.get(("peer", cid)), results.get(("attnd", cid))
        if how == "wrk":
            meas = "req/s"
            pv = "%.1f" % p["rps"] if p else "-"
            av = "%.1f" % a["rps"] if a else "-"
        else:
            meas = "p50 (p90) ms"
            pv = "%.1f (%.1f)" % (p["p50_ms"], p["p90_ms"]) if p else "-"
            av = "%.1f (%.1f)" % (a["p50_ms"], a["p90_ms"]) if a else "-"
        ratio = ratio_of(how, p, a)
        verdict = ""
        if ratio is not None and goal:
            verdict = "MET" if ratio >= goal else "NOT MET"
        print("%-36s %-14s %-16s %-16s %8s %6s %-8s %9s %9s" % (
            label, meas, pv, av, "%.1fx" % ratio if ratio else "-",
            "%.0fx" % goal if goal else "", verdict,
            "%.0f MiB" % a["peak_rss_mib"] if a else "-",
            "%.0f MiB" % p["peak_rss_mib"] if p else "-"))
    for cid, _name, _form, _label, how, _goal in cases():
        cells = ["%s %s req/s" % (kind, rounds_text(results[(kind, cid)]))
                 for kind in servers
                 if (kind, cid) in results and
                 "rounds_rps" in results[(kind, cid)]]
        if how == "wrk" and cells:
            print("  rounds of %s: %s" % (cid, "; ".join(cells)))
    print("\nwhat the long form costs each server (long over short: time "
          "per request; above 1 is slower):")
    for name, title, how, _goal in WORKLOADS:
        cells = []
        for kind in servers:
            lo = results.get((kind, "%s.long" % name))
            sh = results.get((kind, "%s.short" % name))
            if lo and sh:
                cells.append("%s %.2fx" % (kind, ratio_of(how, lo, sh)))
        if cells:
            print("  %-28s %s" % (title, ", ".join(cells)))
    print("\nserver compute time of the checked request (meta.elapsed_ms), "
          "the rest of the latency being HTTP and JSON:")
    for cid, _name, _form, label, how, goal in cases():
        cells = []
        for kind in servers:
            r = results.get((kind, cid))
            if r and r.get("meta_elapsed_ms") is not None:
                cells.append("%s %.2f ms" % (kind, r["meta_elapsed_ms"]))
        print("  %-36s %s" % (label, ", ".join(cells)))
    print("\nserver CPU time (user + system) per timed request, and its "
          "peer/attnd ratio:")
    for cid, _name, _form, label, how, goal in cases():
        p, a = results.get(("peer", cid)), results.get(("attnd", cid))
        cells = ["%s %.2f ms" % (k, r["cpu_ms_per_request"])
                 for k, r in (("peer", p), ("attnd", a))
                 if r and r["cpu_ms_per_request"] is not None]
        if len(cells) == 2 and a["cpu_ms_per_request"] > 0:
            cells.append("ratio %.1fx" % (p["cpu_ms_per_request"]
                                           / a["cpu_ms_per_request"]))
        print("  %-36s %s" % (label, ", ".join(cells)))
    for kind in servers:
        bad = [n for (k, n), r in results.items() if k == kind and
               (r.get("errors") or r.get("non200"))]
        if bad:
            print("  %s answered errors during timing in: %s" % (
                kind, ", ".join(bad)))
    for kind in servers:
        c = results.get((kind, "w4.%s" % FORMS[0]), {}).get("compute")
        if c:
            frac = ""
            if peak:
                frac = ", %.1f%% of the sgemm peak %.1f GFLOP/s" % (
                    100 * c["gflops"] / peak, peak)
                if kind == "attnd":
                    frac += " (goal >= 50%%): %s" % (
                        "MET" if c["gflops"] / peak >= 0.5 else "NOT MET")
            near = c.get("peak_alongside")
            if near:
                frac += "; %.1f%% of the peak read just before and after " \
                        "these requests, %.1f GFLOP/s" % (
                            100 * c["gflops"] / near, near)
                if kind == "attnd":
                    frac += " (goal >= 50%%): %s" % (
                        "MET" if c["gflops"] / near >= 0.5 else "NOT MET")
            print("workload 4 compute, %s: meta.flops / meta.elapsed_ms = "
                  "%.1f GFLOP/s (elapsed %.1f ms, median of %d)%s" % (
                      kind, c["gflops"], c["elapsed_ms"], c["samples"], frac))
            if peak and c.get("gflops_best"):
                best = c["gflops_best"]
                line = "  best of the %d, against the peak's best of 5: " \
                       "%.1f GFLOP/s, %.1f%% of %.1f" % (
                           c["samples"], best, 100 * best / peak, peak)
                if near:
                    line += ", %.1f%% of %.1f alongside" % (
                        100 * best / near, near)
                print(line)


if __name__ == "__main__":
    sys.exit(main())
