#!/usr/bin/python3
"""run_valgrind.py: attnd under valgrind memcheck serves valid and invalid
requests, faults and vanishing clients, then gets SIGTERM.

    run_valgrind.py --attnd build/attnd --corpus tests/fuzz/corpus/codec \
                    --cases tests/cases/invalid

Sent: every request body of the codec corpus (valid requests of every
shape, invalid ones, JSON edge cases), every case of the bad-input table
(HTTP faults and work bombs included), a request whose large response the
client abandons after 1 kB, a client that leaves after half its body, one
that leaves after its headers, and /healthz, /metrics, /openapi.json.
Passes when every request got an answer (or, for the table's `status none`
case, a close), attnd exits 0 after SIGTERM, and valgrind reports 0 errors
and 0 bytes definitely lost (--errors-for-leak-kinds=definite makes a
definite leak an error; --error-exitcode makes any error the exit code).

attnd is started with OPENBLAS_NUM_THREADS=1 and OPENBLAS_CORETYPE=Haswell:
with both set it does not re-execute itself (which would leave valgrind),
and valgrind does not emulate AVX-512, which OpenBLAS would otherwise pick.
"""
import argparse
import json
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attnd_proc  # noqa: E402
import run_cases  # noqa: E402

VALGRIND = ["valgrind", "--leak-check=full", "--show-leak-kinds=definite",
            "--errors-for-leak-kinds=definite", "--error-exitcode=99",
            "--track-origins=no", "--num-callers=30"]


def big_request(n):
    x = [[((i * 7 + j) % 13) / 13.0 for j in range(8)] for i in range(n)]
    w = [[((i + j) % 5) / 5.0 for j in range(8)] for i in range(8)]
    return json.dumps({"x": x, "num_heads": 2, "w_q": w, "w_k": w,
                       "w_v": w}).encode()


def vanish_mid_response(port, body):
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    s.sendall(b"POST /attend HTTP/1.1\r\nHost: v\r\nContent-Type: "
              b"application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
              + body)
    s.recv(1024)
    # RST instead of FIN, the way a killed client goes away.
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                 b"\x01\x00\x00\x00\x00\x00\x00\x00")
    s.close()


def vanish_mid_body(port, body):
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    s.sendall(b"POST /attend HTTP/1.1\r\nHost: v\r\nContent-Type: "
              b"application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
              + body[:len(body) // 2])
    s.close()


def vanish_after_headers(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    s.sendall(b"POST /attend HTTP/1.1\r\nHost: v\r\nContent-Type: "
              b"application/json\r\nContent-Length: 100\r\n\r\n")
    s.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnd", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--cases", required=True)
    args = ap.parse_args()
    log = os.path.join(os.path.dirname(os.path.abspath(args.attnd)),
                       "valgrind-attnd.log")
    t0 = time.monotonic()
    srv = attnd_proc.Attnd(
        args.attnd, ["--quiet", "--threads", "1", "--max-body-bytes",
                     "1048576", "--timeout", "3"],
        wrapper=VALGRIND + ["--log-file=" + log],
        env={"OPENBLAS_NUM_THREADS": "1", "OPENBLAS_CORETYPE": "Haswell"},
        start_timeout=120)
    problems = []
    sent = 0
    statuses = {}
    try:
        for name in sorted(os.listdir(args.corpus)):
            with open(os.path.join(args.corpus, name), "rb") as f:
                body = f.read()
            try:
                r = attnd_proc.post(srv.port, "/attend", body, timeout=120)
                statuses[r.status] = statuses.get(r.status, 0) + 1
            except (attnd_proc.Hang, ConnectionError) as e:
                problems.append("%s: %s" % (name, e))
            sent += 1
        for name in sorted(os.listdir(args.cases)):
            d = os.path.join(args.cases, name)
            want_close = run_cases.parse_expected(d)["status"] == "none"
            try:
                r = attnd_proc.raw_request(srv.port,
                                           run_cases.build_request(d),
                                           timeout=120)
                statuses[r.status] = statuses.get(r.status, 0) + 1
                if want_close:
                    problems.append("%s: answered %d" % (name, r.status))
            except attnd_proc.Hang as e:
                problems.append("%s: %s" % (name, e))
            except ConnectionError as e:
                if not want_close:
                    problems.append("%s: %s" % (name, e))
            sent += 1
        big = big_request(256)
        for _ in range(3):
            vanish_mid_response(srv.port, big)
            vanish_mid_body(srv.port, big)
            vanish_after_headers(srv.port)
            sent += 3
        for path in ("/healthz", "/metrics", "/openapi.json", "/readyz"):
            r = attnd_proc.get(srv.port, path, timeout=60)
            statuses[r.status] = statuses.get(r.status, 0) + 1
            sent += 1
            if r.status != 200:
                problems.append("%s: %d" % (path, r.status))
        # The vanished clients' requests end within --timeout; let them.
        time.sleep(4)
    finally:
        rc = srv.stop(timeout=120)
    with open(log) as f:
        vg = f.read()
    summary = [l.split("== ", 1)[-1] for l in vg.splitlines()
               if "ERROR SUMMARY" in l or "definitely lost" in l or
               "indirectly lost" in l or "All heap blocks" in l]
    print("valgrind: %d requests in %.0f s, statuses %s, attnd exit %s" % (
        sent, time.monotonic() - t0,
        " ".join("%d:%d" % kv for kv in sorted(statuses.items())), rc))
    for l in summary:
        print("  " + l)
    if rc != 0:
        problems.append("attnd exit code %s (99: valgrind found errors or "
                        "definite leaks; see %s)" % (rc, log))
    if not any("ERROR SUMMARY: 0 errors" in l for l in summary):
        problems.append("valgrind error summary is not 0 errors")
    for p in problems:
        print("  FAIL " + p)
    if problems:
        print(vg[-6000:])
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
