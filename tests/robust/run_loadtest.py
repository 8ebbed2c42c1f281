#!/usr/bin/python3
"""run_loadtest.py: attnd under sustained load with faults; prints figures.

    run_loadtest.py --attnd build/attnd --seconds 60 --out build/loadtest

Not a test of speed: it never fails on a time. It does exit 1 when a
correctness rule breaks: a non-2xx answer (or a socket error) on the valid
stream, a 5xx other than 503 on the bad stream, attnd dying or not exiting 0.

One attnd (--quiet, --max-connections 1024, --max-in-flight 128: the load
below holds more than the default 64 requests in flight at once, and the
valid stream is to see no 503; --max-connections-per-ip 0: every client
here comes from 127.0.0.1, as behind a proxy; see docs/operations.md). A 5 s warm-up,
then two consecutive runs of --seconds each, during which at once:
  - valid stream: wrk, 64 connections, small valid requests (tests/bench/post.lua);
  - bad stream: wrk, 8 connections, cycling invalid JSON, 422 requests, a
    413 work bomb, 415, 405 and 404 (wrk_bad.lua);
  - slowloris: 200 connections that trickle request headers one byte per
    second and never finish them;
  - vanishing clients: two threads that ask for a ~1.3 MB response and
    reset the connection after 4 kB, or send half a body and leave;
  - probes: every 2 s, on a fresh connection, GET /healthz and a small
    POST /attend, timed (reported: the slowest of each).
attnd's RSS is sampled after the warm-up and at the end of each run.
Last, the attacks of run_hostile.py's siege against attnd with its default
limits (idle, trickling and uploading clients from other addresses) for
--seconds / 2, and the honest client's latencies.
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attnd_proc  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
# The valid stream is the benchmark's POST script (BENCH_BODY, BENCH_JSON).
POST_LUA = os.path.join(HERE, "..", "bench", "post.lua")
SLOWLORIS = 200


def mat(r, c, seed):
    return [[(((i * 31 + j * 7 + seed) % 17) / 17.0) - 0.5 for j in range(c)]
            for i in range(r)]


def write_bodies(out):
    os.makedirs(out, exist_ok=True)
    paths = {}

    def put(name, data):
        p = os.path.join(out, name)
        with open(p, "wb") as f:
            f.write(data if isinstance(data, bytes) else
                    json.dumps(data).encode())
        paths[name] = p

    # n = 16, d_model = 32, 4 heads with per-head maps: ~ms of work.
    put("valid.json", {"x": mat(16, 32, 1), "num_heads": 4,
                       "w_q": mat(32, 32, 2), "w_k": mat(32, 32, 3),
                       "w_v": mat(32, 32, 4)})
    put("big_response.json", {"x": mat(256, 8, 1), "num_heads": 2,
                              "w_q": mat(8, 8, 2), "w_k": mat(8, 8, 3),
                              "w_v": mat(8, 8, 4)})
    put("bad_json.json", b'{"x": [[1, 2], [3, 4]')
    put("bad_missing.json", {"w_q": [[1]], "w_k": [[1]], "w_v": [[1]]})
    put("bad_ragged.json", {"x": [[1, 2], [3]], "w_q": [[1], [1]],
                            "w_k": [[1], [1]], "w_v": [[1], [1]]})
    put("bad_bomb.json", {"x": [[0]] * 8192, "num_heads": 128,
                          "w_q": [[1] * 128], "w_k": [[1] * 128],
                          "w_v": [[1] * 128]})
    return paths


class Slowloris:
    """n connections that send a request head one byte a second, forever."""

    def __init__(self, port, n):
        self.port = port
        self.n = n
        self.stop = threading.Event()
        self.socks = []
        self.opened = 0
        self.dropped = 0
        self.ready = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        head = (b"POST /attend HTTP/1.1\r\nHost: slow\r\n"
                b"Content-Type: application/json\r\n")
        for _ in range(self.n):
            try:
                s = socket.create_connection(("127.0.0.1", self.port), 5)
                s.setblocking(False)
                self.socks.append([s, 0])
                self.opened += 1
            except OSError:
                self.dropped += 1
        self.ready.set()
        trickle = head + b"X-Trickle: " + b"a" * 100000
        while not self.stop.wait(1.0):
            for entry in self.socks:
                s, pos = entry
                if s is None:
                    continue
                try:
                    s.send(trickle[pos:pos + 1])
                    entry[1] = pos + 1
                except BlockingIOError:
                    pass
                except OSError:
                    self.dropped += 1
                    s.close()
                    entry[0] = None

    def close(self):
        """Closes every connection; returns how many the server still held
        open (no close or reset from its side was pending)."""
        self.stop.set()
        self.t.join(5)
        alive = 0
        for s, _ in self.socks:
            if s is None:
                continue
            try:
                if s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"":
                    s.close()
                    continue  # the server closed it
            except BlockingIOError:
                alive += 1  # nothing to read: still open
            except OSError:
                pass  # reset by the server
            s.close()
        return alive


class Vanishers:
    """Clients that leave mid-response (RST) or mid-body."""

    def __init__(self, port, big_body, n_threads=2):
        self.port = port
        self.body = big_body
        self.stop = threading.Event()
        self.count = 0
        self.errors = 0
        self.ts = [threading.Thread(target=self.run, daemon=True)
                   for _ in range(n_threads)]
        for t in self.ts:
            t.start()

    def run(self):
        head = (b"POST /attend HTTP/1.1\r\nHost: v\r\nContent-Type: "
                b"application/json\r\nContent-Length: %d\r\n\r\n" %
                len(self.body))
        k = 0
        while not self.stop.is_set():
            k += 1
            try:
                s = socket.create_connection(("127.0.0.1", self.port), 10)
                if k % 2:
                    s.sendall(head + self.body)
                    s.settimeout(10)
                    s.recv(4096)
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                 b"\x01\x00\x00\x00\x00\x00\x00\x00")
                else:
                    s.sendall(head + self.body[:len(self.body) // 2])
                s.close()
                self.count += 1
            except OSError:
                self.errors += 1
            time.sleep(0.05)

    def close(self):
        self.stop.set()
        for t in self.ts:
            t.join(15)


class Prober:
    def __init__(self, port, body):
        self.port = port
        self.body = body
        self.stop = threading.Event()
        self.health = []
        self.attend = []
        self.failures = []
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop.wait(2.0):
            for kind, fn in (("healthz", lambda: attnd_proc.get(
                    self.port, "/healthz", timeout=30)),
                             ("attend", lambda: attnd_proc.post(
                                 self.port, "/attend", self.body,
                                 timeout=30))):
                t0 = time.monotonic()
                try:
                    r = fn()
                    dt = time.monotonic() - t0
                    (self.health if kind == "healthz" else
                     self.attend).append(dt)
                    if r.status != 200:
                        self.failures.append("%s %d" % (kind, r.status))
                except (attnd_proc.Hang, ConnectionError, OSError) as e:
                    self.failures.append("%s: %s" % (kind, e))

    def close(self):
        self.stop.set()
        self.t.join(40)


def wrk(args, env, seconds, conns, threads, script, latency=False):
    cmd = [args.wrk, "-t%d" % threads, "-c%d" % conns, "-d%ds" % seconds,
           "--timeout", "10s", "-s", script]
    if latency:
        cmd.append("--latency")
    cmd.append("http://127.0.0.1:%d/attend" % args.port)
    e = dict(os.environ)
    e.update(env)
    return subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)


def figures(output, tag):
    for line in output.decode(errors="replace").splitlines():
        if line.startswith(tag + " "):
            return json.loads(line[len(tag) + 1:])
    raise RuntimeError("no %s line in wrk output:\n%s" % (tag, output))


def run_once(args, paths, srv, label, problems):
    slow = Slowloris(srv.port, SLOWLORIS)
    slow.ready.wait(30)
    van = Vanishers(srv.port, open(paths["big_response.json"], "rb").read())
    probe = Prober(srv.port, open(paths["valid.json"], "rb").read())
    bad_list = ":".join(paths[k] for k in ("bad_json.json",
                                           "bad_missing.json",
                                           "bad_ragged.json",
                                           "bad_bomb.json"))
    bad = wrk(args, {"LOAD_BAD_BODIES": bad_list}, args.seconds, 8, 1,
              os.path.join(HERE, "wrk_bad.lua"))
    good = wrk(args, {"BENCH_BODY": paths["valid.json"]}, args.seconds, 64, 2,
               POST_LUA, latency=True)
    good_out, _ = good.communicate()
    bad_out, _ = bad.communicate()
    probe.close()
    van.close()
    alive = slow.close()
    g = figures(good_out, "BENCH_JSON")
    b = figures(bad_out, "LOAD_BAD_JSON")
    rss = attnd_proc.rss_kib(srv.pid) if srv.alive() else None
    secs = g["duration_us"] / 1e6
    print("%s: valid stream %d requests in %.1f s (%.0f req/s), non-2xx %d, "
          "socket errors connect %d read %d write %d timeout %d" % (
              label, g["requests"], secs, g["requests"] / secs, g["non2xx"],
              g["connect_errors"], g["read_errors"], g["write_errors"],
              g["timeouts"]))
    print("%s: valid latency p50 %.1f ms, p90 %.1f ms, p99 %.1f ms, "
          "max %.1f ms" % (label, g["lat_p50_us"] / 1e3,
                           g["lat_p90_us"] / 1e3, g["lat_p99_us"] / 1e3,
                           g["lat_max_us"] / 1e3))
    print("%s: bad stream %d requests: 2xx %d, 4xx %d, 503 %d, other 5xx "
          "%d; socket errors connect %d read %d write %d timeout %d" % (
              label, b["requests"], b["s2xx"], b["s4xx"], b["s503"],
              b["s5xx_not_503"], b["connect_errors"], b["read_errors"],
              b["write_errors"], b["timeouts"]))
    print("%s: slowloris %d opened, %d still held at the end, %d dropped "
          "by the server" % (label, slow.opened, alive, slow.dropped))
    print("%s: vanishing clients %d (errors %d)" % (label, van.count,
                                                    van.errors))
    if probe.health:
        print("%s: probes during the slowloris: %d x /healthz, slowest "
              "%.1f ms; %d x POST /attend, slowest %.1f ms%s" % (
                  label, len(probe.health), max(probe.health) * 1e3,
                  len(probe.attend), max(probe.attend or [0]) * 1e3,
                  "" if max(probe.health + probe.attend) < 1.0 else
                  "  (OVER 1 s)"))
    print("%s: attnd RSS at the end %s kB" % (label, rss))
    if g["non2xx"] or g["connect_errors"] or g["read_errors"] or \
            g["write_errors"] or g["timeouts"]:
        problems.append("%s: the valid stream saw non-2xx answers or "
                        "socket errors" % label)
    if b["s5xx_not_503"]:
        problems.append("%s: the bad stream got 5xx answers" % label)
    for f in probe.failures[:5]:
        problems.append("%s: probe failed: %s" % (label, f))
    return rss


def siege(args):
    """run_hostile.py's siege for half the run, with its figures; a failed
    check there is a failure here too."""
    cmd = [sys.executable, os.path.join(HERE, "run_hostile.py"), "--attnd",
           args.attnd, "--phases", "siege", "--seconds",
           str(max(16, args.seconds // 2))]
    return subprocess.call(cmd)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnd", required=True)
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--out", default="build/loadtest")
    ap.add_argument("--wrk", default="wrk")
    args = ap.parse_args()
    paths = write_bodies(args.out)
    srv = attnd_proc.Attnd(args.attnd, ["--quiet", "--max-connections",
                                        "1024", "--max-in-flight", "128",
                                        "--max-connections-per-ip", "0"])
    args.port = srv.port
    problems = []
    try:
        warm = wrk(args, {"BENCH_BODY": paths["valid.json"]}, 5, 64, 2,
                   POST_LUA)
        warm.communicate()
        rss0 = attnd_proc.rss_kib(srv.pid)
        print("attnd pid %d on port %d; RSS after warm-up %d kB" % (
            srv.pid, srv.port, rss0))
        rss1 = run_once(args, paths, srv, "run 1", problems)
        rss2 = run_once(args, paths, srv, "run 2", problems)
        if rss1 and rss2:
            print("RSS: after warm-up %d kB, end of run 1 %d kB, end of run "
                  "2 %d kB (run 2 - run 1: %+d kB, %+.1f%%)" % (
                      rss0, rss1, rss2, rss2 - rss1,
                      100.0 * (rss2 - rss1) / rss1))
        if not srv.alive():
            problems.append("attnd died: exit %s" % srv.proc.returncode)
    finally:
        rc = srv.stop(timeout=60)
    print("attnd exit code after SIGTERM: %s" % rc)
    if rc != 0:
        problems.append("attnd exit code %s" % rc)
    if siege(args) != 0:
        problems.append("the siege's checks failed (see above)")
    for p in problems:
        print("  FAIL " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
