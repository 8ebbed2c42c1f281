#!/usr/bin/python3
"""run_shutdown.py: SIGTERM during load loses no accepted request.

    run_shutdown.py --attnd build/attnd [--clients 16] [--load-s 1.5]

CLIENTS threads POST valid requests (a few milliseconds of compute each),
one connection per request (the last round: keep-alive connections), as
fast as they can; after LOAD_S seconds
attnd gets SIGTERM and the clients go on until their connections are
refused. Every request is classified from the client's side:

  ok        200 with a complete JSON body holding `output`
  refused   503 `unavailable` with Retry-After (refused before it started)
  no_conn   connect() refused: the listening socket is closed
  backlog   connection reset or closed with not one byte of answer, after
            SIGTERM: the connection sat in the kernel's accept queue when
            attnd closed its listening socket, or was an idle keep-alive
            connection closed by the stopping daemon, so attnd never saw
            the request (cross-checked below with attnd's own log)
  BAD       anything else: another status, a partial answer, a reset
            before SIGTERM, a hang

and from attnd's side: its per-request log must show every POST /attend it
received ending 200 or 503, none closed or timed out mid-way, and as many
200 lines as the clients counted `ok`. attnd must exit 0.

Then attnd must also exit 0 after SIGTERM while a client keeps trickling
a request body (the drain closes it at once with 503; --body-timeout would
cut it otherwise).

Last, a client waiting for an answer of about a megabyte pipelines
GET /readyz on the same connection after SIGTERM, before it reads: the
answer must arrive whole and the connection end without a reset, whenever
the signal and the second request come.
"""
import argparse
import json
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attnd_proc  # noqa: E402


def body(n=96, d_model=64, h=4, weights="mean"):
    x = [[((i * 31 + j * 7) % 17) / 17.0 - 0.5 for j in range(d_model)]
         for i in range(n)]
    w = [[((i * 13 + j * 3) % 11) / 11.0 - 0.5 for j in range(d_model)]
         for i in range(d_model)]
    return json.dumps({"x": x, "num_heads": h, "w_q": w, "w_k": w, "w_v": w,
                       "return_weights": weights}).encode()


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.bad = []

    def add(self, kind, detail=None):
        with self.lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            if kind == "BAD" and len(self.bad) < 20:
                self.bad.append(detail)


class KeepAlive:
    """One persistent connection: requests one after another on the same
    socket until the server closes it."""

    def __init__(self, port):
        self.port = port
        self.sock = None

    def post(self, data):
        """Returns (Response or None, reused): None when the connection
        ended with not one byte of answer; raises ConnectionError (with
        .partial) when it ended mid-answer."""
        reused = self.sock is not None
        if self.sock is None:
            self.sock = socket.create_connection(("127.0.0.1", self.port),
                                                 timeout=30)
        head = (b"POST /attend HTTP/1.1\r\nHost: k\r\nContent-Type: "
                b"application/json\r\nContent-Length: %d\r\n\r\n" %
                len(data))
        buf = b""
        try:
            self.sock.sendall(head + data)
            while True:
                got = self.sock.recv(65536)
                if not got:
                    break
                buf += got
                parsed = attnd_proc._parse_response(buf)
                if parsed:
                    r = parsed[0]
                    if r.headers.get("connection", "").lower() == "close":
                        self.close()
                    return r, reused
        except (ConnectionResetError, BrokenPipeError):
            pass
        self.close()
        if buf:
            err = ConnectionError("closed after %d bytes" % len(buf))
            err.partial = buf
            raise err
        return None, reused

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def client_keepalive(port, data, stop_at, sigterm_at, tally):
    conn = KeepAlive(port)
    while time.monotonic() < stop_at[0]:
        try:
            r, reused = conn.post(data)
        except ConnectionRefusedError:
            tally.add("no_conn")
            if sigterm_at[0] is None:
                tally.add("BAD", "connection refused before SIGTERM")
            time.sleep(0.01)
            continue
        except ConnectionError as e:
            tally.add("BAD", "%s (partial %r)" % (
                e, getattr(e, "partial", b"")[:80]))
            continue
        except OSError as e:
            tally.add("BAD", "socket error %s" % e)
            conn.close()
            continue
        if r is None:
            # Closed with no answer: an idle keep-alive connection closed
            # by the stopping daemon, or one in the accept queue.
            if sigterm_at[0] is not None:
                tally.add("backlog")
            else:
                tally.add("BAD", "connection closed without an answer "
                          "before SIGTERM (reused %s)" % reused)
            continue
        classify(r, tally)
    conn.close()


def classify(r, tally):
    if r.status == 200:
        try:
            ok = "output" in r.json()
        except ValueError:
            ok = False
        tally.add("ok" if ok else "BAD",
                  None if ok else "200 with a broken body")
    elif r.status == 503:
        try:
            code = r.json()["error"]["code"]
        except (ValueError, KeyError, TypeError):
            code = None
        if code == "unavailable" and "retry-after" in r.headers:
            tally.add("refused")
        else:
            tally.add("BAD", "503 without the contract's body/header")
    else:
        tally.add("BAD", "status %d %r" % (r.status, r.body[:120]))


def client(port, data, stop_at, sigterm_at, tally):
    while time.monotonic() < stop_at[0]:
        try:
            r = attnd_proc.post(port, "/attend", data, timeout=30)
        except ConnectionRefusedError:
            tally.add("no_conn")
            if sigterm_at[0] is None:
                tally.add("BAD", "connection refused before SIGTERM")
            time.sleep(0.01)
            continue
        except attnd_proc.Hang as e:
            tally.add("BAD", "hang: %s" % e)
            continue
        except ConnectionError as e:
            partial = getattr(e, "partial", b"")
            if not partial and sigterm_at[0] is not None:
                tally.add("backlog")
            else:
                tally.add("BAD", "%s (partial %r)" % (e, partial[:80]))
            continue
        except OSError as e:
            tally.add("BAD", "socket error %s" % e)
            continue
        classify(r, tally)


def trickling_upload_round(args, failures):
    """attnd must exit 0 after SIGTERM while a client still trickles a
    request body one byte a second (forever): the drain closes an upload
    that has not reached compute (with 503), and --body-timeout would cut
    it otherwise, so it cannot hold the drain. Liveness, not speed: the cap
    is 60 s."""
    srv = attnd_proc.Attnd(args.attnd, ["--quiet", "--body-timeout", "3"])
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    sock.sendall(b"POST /attend HTTP/1.1\r\nHost: t\r\nContent-Type: "
                 b"application/json\r\nContent-Length: 100000\r\n\r\n{")
    stop = threading.Event()

    def trickle():
        while not stop.wait(1.0):
            try:
                sock.send(b" ")
            except OSError:
                return

    t = threading.Thread(target=trickle, daemon=True)
    t.start()
    time.sleep(0.5)
    t0 = time.monotonic()
    srv.proc.send_signal(15)
    try:
        rc = srv.proc.wait(60)
    except Exception:
        rc = None
    took = time.monotonic() - t0
    stop.set()
    sock.close()
    rc = srv.stop() if rc is None else rc
    print("trickling upload (--body-timeout 3): attnd exit %s %.1f s after "
          "SIGTERM" % (rc, took))
    if rc != 0:
        failures.append("a trickling upload held the drain: exit %s after "
                        "60 s" % rc)


def in_flight(port):
    r = attnd_proc.get(port, "/metrics")
    for line in r.body.decode().splitlines():
        if line.startswith("attnd_http_requests_in_flight "):
            return float(line.split()[1])
    return None


def pipelined_round(args, failures):
    """SIGTERM while a client waits for an answer of about a megabyte; the
    client then pipelines GET /readyz on the same connection and only then
    reads. Whatever the moment (SIGTERM at once, 20 ms after the request,
    while it is read or computed, or once its answer is with the kernel;
    the GET at once or 50 ms later),
    the first answer arrives whole: 200 with the output, or 503 when its
    body was still being read (an upload is refused on shutdown), and the
    connection ends without a reset. Closing a socket whose read side is
    shut, or closed, while the client still sends makes the kernel reset
    it, dropping the rest of the answer."""
    data = body(n=2000, weights="none")
    head = (b"POST /attend HTTP/1.1\r\nHost: p\r\nContent-Type: "
            b"application/json\r\nContent-Length: %d\r\n\r\n" % len(data))
    for when in ("at once", "after 20 ms", "answered"):
        for gap in (0.0, 0.05):
            srv = attnd_proc.Attnd(args.attnd, ["--quiet", "--threads", "1"])
            sock = socket.create_connection(("127.0.0.1", srv.port),
                                            timeout=30)
            sock.sendall(head + data)
            if when == "after 20 ms":
                time.sleep(0.02)
            elif when == "answered":
                # with the kernel once the request is no longer in flight
                # (but the one asking); a kernel that cannot hold it all
                # yet leaves it being sent, which is tried too
                t0 = time.monotonic()
                while in_flight(srv.port) > 1 and time.monotonic() - t0 < 5:
                    time.sleep(0.01)
            srv.proc.send_signal(15)
            time.sleep(gap)
            buf, err = b"", None
            try:
                sock.sendall(b"GET /readyz HTTP/1.1\r\nHost: p\r\n\r\n")
                while True:
                    got = sock.recv(65536)
                    if not got:
                        break
                    buf += got
            except OSError as e:
                err = e
            sock.close()
            rc = srv.stop(timeout=60)
            try:
                parsed = attnd_proc._parse_response(buf)
            except ValueError:
                parsed = None
            r = parsed[0] if parsed else None
            whole = r is not None and (
                (r.status == 200 and b'"output"' in r.body) or
                (r.status == 503 and b'"unavailable"' in r.body))
            print("pipelined after SIGTERM (%s, GET %g s later): %s, %d "
                  "bytes, %s, exit %s" % (
                      when, gap, r.status if r else "no whole answer",
                      len(buf), "reset" if err else "orderly end", rc))
            if not whole or err is not None:
                failures.append("pipelined after SIGTERM (%s, GET %g s "
                                "later): %d bytes, then %s" % (
                                    when, gap, len(buf),
                                    err or "the end"))
            if rc != 0:
                failures.append("pipelined after SIGTERM (%s): attnd exit "
                                "code %s" % (when, rc))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnd", required=True)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--load-s", type=float, default=1.5)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    data = body()
    failures = []
    for rnd in range(args.rounds):
        srv = attnd_proc.Attnd(args.attnd, ["--threads", "2"])
        tally = Tally()
        stop_at = [time.monotonic() + 3600]
        sigterm_at = [None]
        # The last round keeps its connections alive between requests.
        keepalive = rnd == args.rounds - 1
        threads = [threading.Thread(target=client_keepalive if keepalive
                                    else client,
                                    args=(srv.port, data, stop_at,
                                          sigterm_at, tally))
                   for _ in range(args.clients)]
        for t in threads:
            t.start()
        time.sleep(args.load_s)
        sigterm_at[0] = time.monotonic()
        srv.proc.send_signal(15)
        stop_at[0] = time.monotonic() + 1.5
        for t in threads:
            t.join(60)
        rc = srv.stop(timeout=60)
        # attnd's side: one JSON line per request.
        served = {}
        lost = []
        for line in srv.lines:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("path") != "/attend":
                continue
            st = rec.get("status")
            served[st] = served.get(st, 0) + 1
            if st not in (200, 503):
                lost.append(line.strip())
        c = tally.counts
        print("round %d (%s): client ok %d, refused-503 %d, no-connection %d, "
              "reset-in-backlog %d, BAD %d; attnd logged %s; exit %s" % (
                  rnd + 1, "keep-alive" if keepalive else "connection per "
                  "request", c.get("ok", 0), c.get("refused", 0),
                  c.get("no_conn", 0), c.get("backlog", 0), c.get("BAD", 0),
                  " ".join("%s:%d" % kv for kv in sorted(
                      served.items(), key=lambda kv: str(kv[0]))), rc))
        for b in tally.bad:
            failures.append("round %d: %s" % (rnd + 1, b))
        for l in lost[:10]:
            failures.append("round %d: attnd ended a request %s" % (rnd + 1,
                                                                    l))
        if served.get(200, 0) != c.get("ok", 0):
            failures.append("round %d: attnd logged %d answers 200, clients "
                            "received %d" % (rnd + 1, served.get(200, 0),
                                             c.get("ok", 0)))
        if c.get("ok", 0) == 0:
            failures.append("round %d: no request completed" % (rnd + 1))
        if rc != 0:
            failures.append("round %d: attnd exit code %s" % (rnd + 1, rc))
    trickling_upload_round(args, failures)
    pipelined_round(args, failures)
    for f in failures:
        print("  FAIL " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
