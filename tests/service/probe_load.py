#!/usr/bin/env python3
"""probe_load.py: probe latency while heavy requests saturate attnd.

Starts ATTND (build/attnd by default) on a free loopback port, keeps
--clients clients posting a heavy /attend (n x d_model, 4 heads, base64, no
maps) in a loop, and meanwhile every 100 ms sends GET /healthz and a tiny
POST /attend on new connections. Prints figures; never fails on a time
(a benchmark, not a test; not part of `make test`).

  python3 tests/service/probe_load.py [--attnd build/attnd] [--seconds 20]
"""
import argparse
import base64
import http.client
import json
import random
import socket
import statistics
import struct
import subprocess
import threading
import time


def tensor(rows, cols, rng):
    vals = [rng.uniform(-1, 1) for _ in range(rows * cols)]
    data = struct.pack('<%df' % len(vals), *vals)
    return {"dtype": "float32", "shape": [rows, cols],
            "data": base64.b64encode(data).decode()}


def request(port, method, path, body=None):
    c = http.client.HTTPConnection('127.0.0.1', port, timeout=300)
    t = time.perf_counter()
    headers = {'Content-Type': 'application/json'} if body else {}
    c.request(method, path, body=body, headers=headers)
    r = c.getresponse()
    r.read()
    c.close()
    return r.status, (time.perf_counter() - t) * 1e3


def pct(v, f):
    v = sorted(v)
    return v[min(len(v) - 1, int(f * len(v)))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--attnd', default='build/attnd')
    ap.add_argument('--seconds', type=float, default=20)
    ap.add_argument('--clients', type=int, default=4)
    ap.add_argument('--n', type=int, default=4096)
    ap.add_argument('--d-model', type=int, default=256)
    ap.add_argument('--threads', type=int, default=0)
    a = ap.parse_args()

    rng = random.Random(1)
    d = a.d_model
    heavy = json.dumps({"x": tensor(a.n, d, rng), "w_q": tensor(d, d, rng),
                        "w_k": tensor(d, d, rng), "w_v": tensor(d, d, rng),
                        "num_heads": 4, "return_weights": "none",
                        "encoding": "base64"}).encode()
    tiny = json.dumps({"x": [[1, 0], [0, 1], [1, 1]], "w_q": [[1, 0], [0, 1]],
                       "w_k": [[1, 0], [0, 1]],
                       "w_v": [[1, 0], [0, 1]]}).encode()
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([a.attnd, '--host', '127.0.0.1', '--port',
                             str(port), '--threads', str(a.threads),
                             '--quiet'], stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                if request(port, 'GET', '/healthz')[0] == 200:
                    break
            except OSError:
                time.sleep(0.05)
        stop = time.time() + a.seconds
        heavy_ms = []

        def heavy_loop():
            while time.time() < stop:
                status, ms = request(port, 'POST', '/attend', heavy)
                if status == 200:
                    heavy_ms.append(ms)

        workers = [threading.Thread(target=heavy_loop)
                   for _ in range(a.clients)]
        for w in workers:
            w.start()
        time.sleep(1.0)
        health, small = [], []
        while time.time() < stop:
            health.append(request(port, 'GET', '/healthz')[1])
            small.append(request(port, 'POST', '/attend', tiny)[1])
            time.sleep(0.1)
        for w in workers:
            w.join()
    finally:
        proc.terminate()
        proc.wait()
    print(f"heavy {a.n}x{d}: {len(heavy_ms)} done in {a.seconds:.0f} s, "
          f"median {statistics.median(heavy_ms):.0f} ms")
    print(f"/healthz: n={len(health)} p50 {pct(health, .5):.2f} "
          f"p99 {pct(health, .99):.2f} max {max(health):.2f} ms")
    print(f"tiny /attend: n={len(small)} p50 {pct(small, .5):.2f} "
          f"p99 {pct(small, .99):.2f} max {max(small):.2f} ms")


if __name__ == '__main__':
    main()
