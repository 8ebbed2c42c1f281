#!/usr/bin/python3
"""run_cases.py: the bad-input table (tests/cases/invalid/<name>/, format in
tests/cases/gen_cases.py) against a real attnd over raw sockets.

    run_cases.py --attnd build/attnd --cases tests/cases/invalid [NAME...]

attnd runs with --max-body-bytes 1048576 --timeout 3 (every other limit at
its default). For each case: the status; for an error, a JSON body
{"error":{"code","message","field"?}} with the expected code, a non-empty
message and the expected JSON Pointer in `field` (or none); expected
headers; then /healthz must still answer 200.

Known failures: cases listed in tests/robust/known_failures_cases.txt (one
`name  reason` a line) are still run; their failure is printed loudly as
KNOWN and does not fail the run, but a listed case that now passes fails
the run, so the list cannot go stale (remove the line once fixed).
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attnd_proc  # noqa: E402

ATTND_ARGS = ["--quiet", "--threads", "2", "--max-body-bytes", "1048576",
              "--timeout", "3"]
TIMEOUT_S = 3


def read(d, name, mode="r"):
    p = os.path.join(d, name)
    if not os.path.exists(p):
        return None
    with open(p, mode) as f:
        return f.read()


def build_request(d):
    body = read(d, "request", "rb") or b""
    pad = read(d, "pad")
    if pad:
        body = b" " * int(pad) + body
    chunked = read(d, "chunked") is not None
    if chunked:
        enc = b""
        for i in range(0, len(body), 4096):
            part = body[i:i + 4096]
            enc += b"%x\r\n" % len(part) + part + b"\r\n"
        body = enc + b"0\r\n\r\n"
    method = (read(d, "method") or "POST").strip()
    path = (read(d, "path") or "/attend").strip()
    headers = read(d, "headers")
    if headers is None:
        headers = "Content-Type: application/json\r\n" + (
            "Transfer-Encoding: chunked" if chunked else
            "Content-Length: {len}")
    headers = headers.strip().replace("{len}", str(len(body)))
    head = "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" % (
        method, path)
    if headers:
        head += "\r\n".join(h.strip() for h in headers.split("\n")
                            if h.strip()) + "\r\n"
    return head.encode() + b"\r\n" + body


def parse_expected(d):
    exp = {"headers": []}
    for line in read(d, "expected").splitlines():
        key, _, value = line.partition(" ")
        if key == "header":
            exp["headers"].append(value)
        elif key:
            exp[key] = value
    return exp


def run_case(port, d):
    """Returns a list of reasons the case failed (empty when it passed)."""
    exp = parse_expected(d)
    data = build_request(d)
    fails = []
    t0 = time.monotonic()
    try:
        r = attnd_proc.raw_request(port, data, timeout=TIMEOUT_S + 15)
    except attnd_proc.Hang as e:
        return ["hang: %s" % e]
    except ConnectionError as e:
        if exp["status"] == "none":
            if time.monotonic() - t0 > TIMEOUT_S + 10:
                fails.append("closed only after %.1f s" %
                             (time.monotonic() - t0))
            return fails
        return ["connection lost before a response: %s" % e]
    if exp["status"] == "none":
        return ["expected no answer (connection closed), got status %d" %
                r.status]
    if r.status != int(exp["status"]):
        fails.append("status %d, expected %s (body %r)" % (
            r.status, exp["status"], r.body[:300]))
    for h in exp["headers"]:
        name, _, value = h.partition(":")
        got = r.headers.get(name.strip().lower())
        if got != value.strip():
            fails.append("header %s: %r, expected %r" % (name, got,
                                                         value.strip()))
    if "code" in exp:
        try:
            e = r.json()["error"]
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            fails.append("body is not a JSON error: %r" % r.body[:300])
            return fails
        if e.get("code") != exp["code"]:
            fails.append("code %r, expected %r (message %r)" % (
                e.get("code"), exp["code"], e.get("message")))
        if not isinstance(e.get("message"), str) or not e["message"]:
            fails.append("no message")
        want_field = exp.get("field", "")
        if (e.get("field") or "") != want_field:
            fails.append("field %r, expected %r (message %r)" % (
                e.get("field"), want_field or None, e.get("message")))
    if r.status == 200:
        try:
            out = r.json()
            if "output" not in out:
                fails.append("200 without output")
        except ValueError:
            fails.append("200 body is not JSON")
    return fails


def load_known(path):
    known = {}
    if path and os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith("#"):
                    name, _, why = line.partition(" ")
                    known[name] = why.strip()
    return known


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnd", required=True)
    ap.add_argument("--cases", required=True)
    ap.add_argument("--known", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)),
        "known_failures_cases.txt"))
    ap.add_argument("names", nargs="*")
    args = ap.parse_args()
    names = args.names or sorted(os.listdir(args.cases))
    known = load_known(args.known)
    srv = attnd_proc.Attnd(args.attnd, ATTND_ARGS)
    failed, known_failed, fixed = [], [], []
    try:
        for name in names:
            fails = run_case(srv.port, os.path.join(args.cases, name))
            try:
                h = attnd_proc.get(srv.port, "/healthz", timeout=10)
                if h.status != 200:
                    fails.append("/healthz then %d" % h.status)
            except (attnd_proc.Hang, ConnectionError) as e:
                fails.append("/healthz then failed: %s" % e)
            if not srv.alive():
                fails.append("attnd exited (%s)" % srv.proc.returncode)
            if fails and name in known:
                known_failed.append((name, fails))
            elif fails:
                failed.append((name, fails))
            elif name in known:
                fixed.append(name)
            if not srv.alive():
                break
    finally:
        rc = srv.stop()
    if rc != 0:
        failed.append(("(exit)", ["attnd exit code %s after SIGTERM" % rc]))
    print("cases: %d run, %d passed, %d failed, %d KNOWN failures" % (
        len(names), len(names) - len(failed) - len(known_failed),
        len(failed), len(known_failed)))
    for name, fails in failed:
        print("  FAIL %s: %s" % (name, "; ".join(fails)))
    if known_failed:
        print("  !!! KNOWN FAILURES (service bugs listed in %s; not "
              "counted as failures until fixed):" %
              os.path.basename(args.known))
        for name, fails in known_failed:
            print("  KNOWN %s [%s]: %s" % (name, known[name],
                                           "; ".join(fails)[:240]))
    for name in fixed:
        print("  FIXED %s passes now: remove it from %s" % (
            name, os.path.basename(args.known)))
    return 1 if failed or fixed else 0


if __name__ == "__main__":
    sys.exit(main())
