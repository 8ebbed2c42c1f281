#!/usr/bin/env python3
"""run_hostile.py: attnd under the attacks of a hostile client, and what an
honest client still gets (python3 stdlib only, raw sockets).

Each attacker comes from its own loopback addresses (127.0.0.2 ..), the
honest client from 127.0.0.200, so the per-address limit applies to the
attackers only, as it would on a network. Phases, each against a fresh
attnd started with the shipped Kubernetes settings (--max-in-flight 8):

  siege     3,000 idle connections, 200 that trickle their headers, 200
            that trickle a body, and 40 uploads of 50 MB at once; the
            tricklers reconnect whenever they are cut off. Meanwhile every
            small POST /attend of the honest client is answered 200 within
            the latency bound, and /healthz and /readyz answer 200. Every
            upload gets an HTTP answer; the peak RSS stays within the
            body budget plus the working memory; /metrics counts the
            cut-offs; then SIGTERM with all of them connected: exit 0
            within the shutdown bound.
  budget    100 slow bodies declaring 8 MB each, more than the 256 MiB
            body budget together: large uploads get 503 with Retry-After
            before a byte is read, and small requests are still served (the
            last sixteenth of the budget is kept for bodies up to 1 MiB).
  reader    a client that reads a 42 MB answer at 4 KB/s is cut off (its
            memory freed, its slot released); SIGTERM meanwhile exits
            within --shutdown-timeout.
  steady    a client that reads that answer steadily at twice
            --min-send-rate for 10 s, then at full speed, is not cut off
            (the kernel's send buffer takes the answer in bursts seconds
            apart) and gets the whole answer.
  slots     one address opens --max-in-flight (8) connections, each asking
            for a 30 MB answer that it reads at 200 KB/s (above
            --min-send-rate, so never cut off), and asks again whenever
            refused: it holds its --max-in-flight-per-ip share (6), and
            every small POST /attend from another address is served; once
            it leaves, its address is served again.
  framing   requests that RFC 9112 says are 400 (whitespace before a colon,
            obs-fold, a bare CR, bad or comma-repeated Content-Length, a
            smuggled request): each answered once, 400 with the JSON error
            body and CORS, never a second status line or a second request.
  bomb      a 197 KB request whose Q alone is 2 GiB (d_model 1, d_k 16384,
            n 16384, m 1, batch 2) under a 3 GiB address-space limit: 413,
            and the RSS does not move.

The bounds are generous for a loaded 2-core machine (the honest latency
bound is the contract's 2 s); figures are printed either way. Exit status 0
when every check holds. --seconds sets the length of the siege (make
loadtest runs it longer); --phases runs some phases only. A hard
RLIMIT_NOFILE under 3,800 scales the idle crowd down (and says so).
"""
import argparse
import json
import os
import resource
import signal
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attnd_proc import Attnd, rss_kib  # noqa: E402

HONEST = "127.0.0.200"
FAILS = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        FAILS.append(what)


def vm_hwm_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def connect(port, src, timeout=10.0):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    return s


def read_response(s, deadline):
    """One response from s (Content-Length or chunked, or until close):
    (status, headers text, body bytes, count of status lines seen)."""
    buf = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no answer (%r)" % buf[:120])
        s.settimeout(left)
        try:
            got = s.recv(1 << 16)
        except ConnectionResetError:
            got = b""
        if not got:
            break
        buf += got
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            continue
        head = buf[:end].decode("latin-1")
        low = head.lower()
        rest = buf[end + 4:]
        if "content-length:" in low:
            n = int(low.split("content-length:")[1].split("\r\n")[0])
            if len(rest) >= n:
                break
        elif "transfer-encoding: chunked" in low and rest.endswith(
                b"\r\n0\r\n\r\n"):
            break
    if not buf:
        raise ConnectionError("closed without an answer")
    end = buf.find(b"\r\n\r\n")
    head = buf[:end].decode("latin-1")
    status = int(head.split(" ", 2)[1])
    return status, head, buf[end + 4:], buf.count(b"HTTP/1.")


def exchange(port, src, req, timeout=10.0):
    s = connect(port, src, timeout)
    try:
        s.sendall(req)
        return read_response(s, time.monotonic() + timeout)
    finally:
        s.close()


def post_req(path, body, close=True):
    return (b"POST %s HTTP/1.1\r\nHost: t\r\nContent-Type: application/json"
            b"\r\nContent-Length: %d\r\n%s\r\n" %
            (path.encode(), len(body),
             b"Connection: close\r\n" if close else b"")) + body


def get_req(path):
    return b"GET %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n" % \
        path.encode()


def small_body():
    n, d = 8, 16
    x = [[((i * 7 + j * 3) % 11) / 10.0 for j in range(d)] for i in range(n)]
    w = [[((i + 2 * j) % 5) / 10.0 for j in range(d)] for i in range(d)]
    return json.dumps({"x": x, "w_q": w, "w_k": w, "w_v": w,
                       "num_heads": 2}).encode()


def metric(port, name):
    _, _, body, _ = exchange(port, HONEST, get_req("/metrics"))
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return None


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


# -- the siege ---------------------------------------------------------------

class Trickler(threading.Thread):
    """Connections that send one byte at a time, from several addresses,
    reconnecting whenever the server cuts one off."""

    def __init__(self, port, addrs, per_addr, opening, stop):
        super().__init__(daemon=True)
        self.port, self.stop, self.opening = port, stop, opening
        self.slots = [(a, None, 0) for a in addrs for _ in range(per_addr)]
        self.cuts = 0
        self.connects = 0

    def _open(self, addr):
        try:
            s = connect(self.port, addr, 5)
            s.setblocking(False)
            s.send(self.opening)
            self.connects += 1
            return s
        except OSError:
            return None

    def run(self):
        while not self.stop.is_set():
            for i, (addr, s, sent) in enumerate(self.slots):
                if s is None:
                    self.slots[i] = (addr, self._open(addr), 0)
                    continue
                try:
                    s.send(b"a" if sent % 2 else b"b")
                    self.slots[i] = (addr, s, sent + 1)
                except OSError:
                    self.cuts += 1
                    s.close()
                    self.slots[i] = (addr, None, 0)
            self.stop.wait(1.0)
        for _, s, _ in self.slots:
            if s:
                s.close()


def upload(port, src, size, out, i):
    t0 = time.monotonic()
    try:
        s = connect(port, src, 60)
    except OSError as e:
        out[i] = ("connect", str(e), 0)
        return
    head = (b"POST /attend HTTP/1.1\r\nHost: t\r\nContent-Type: "
            b"application/json\r\nContent-Length: %d\r\n\r\n" % size)
    chunk = b" " * (1 << 20)
    try:
        s.sendall(head)
        sent = 0
        try:
            while sent < size:
                n = min(len(chunk), size - sent)
                s.sendall(chunk[:n] if n < len(chunk) else chunk)
                sent += n
        except (BrokenPipeError, ConnectionResetError):
            pass  # answered (503) before the body: read it
        st, _, _, _ = read_response(s, time.monotonic() + 60)
        out[i] = ("answer", st, time.monotonic() - t0)
    except (OSError, TimeoutError, ConnectionError) as e:
        out[i] = ("none", str(e), time.monotonic() - t0)
    finally:
        s.close()


def siege(binary, seconds, n_idle):
    print("== siege: %d idle, 200 slow heads, 200 slow bodies, "
          "40 x 50 MB uploads; %g s" % (n_idle, seconds), flush=True)
    budget = 1 << 30
    a = Attnd(binary, ["--quiet", "--threads", "2", "--max-in-flight", "8",
                       "--max-buffered-bytes", str(budget)])
    port = a.port
    body = small_body()
    st, _, _, _ = exchange(port, HONEST, post_req("/attend", body))
    check(st == 200, "honest request before the siege: %d" % st)
    base_rss = rss_kib(a.pid)

    idle = []
    for k in range(n_idle):
        try:
            idle.append(connect(port, "127.0.0.%d" % (10 + k // 60), 10))
        except OSError as e:
            check(False, "idle connection %d: %s" % (k, e))
            break
    stop = threading.Event()
    heads = Trickler(port, ["127.0.0.%d" % i for i in range(2, 6)], 50,
                     b"POST /attend HTTP/1.1\r\nHost: t\r\nX-Slow: ", stop)
    bodies = Trickler(port, ["127.0.0.%d" % i for i in range(6, 10)], 50,
                      b"POST /attend HTTP/1.1\r\nHost: t\r\nContent-Type: "
                      b"application/json\r\nContent-Length: 1048576\r\n\r\n",
                      stop)
    heads.start()
    bodies.start()
    time.sleep(1.0)
    results = [None] * 40
    ups = [threading.Thread(target=upload, daemon=True,
                            args=(port, "127.0.0.%d" % (60 + i // 10),
                                  50 * 1000 * 1000, results, i))
           for i in range(40)]
    for t in ups:
        t.start()

    lat, bad, probes_bad = [], [], []
    t_end = time.monotonic() + seconds
    peak = 0
    while time.monotonic() < t_end:
        t0 = time.monotonic()
        try:
            st, _, _, _ = exchange(port, HONEST, post_req("/attend", body),
                                   timeout=10)
        except (OSError, TimeoutError, ConnectionError) as e:
            st = str(e)
        dt = time.monotonic() - t0
        lat.append(dt)
        if st != 200 or dt >= 2.0:
            bad.append((round(dt, 3), st))
        for path in ("/healthz", "/readyz"):
            try:
                pst, _, _, _ = exchange(port, HONEST, get_req(path), 10)
            except (OSError, TimeoutError, ConnectionError) as e:
                pst = str(e)
            if pst != 200:
                probes_bad.append((path, pst))
        peak = max(peak, rss_kib(a.pid) or 0)
        time.sleep(0.2)
    for t in ups:
        t.join(90)
    lat.sort()
    p50 = lat[len(lat) // 2]
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    print("honest POST /attend: %d requests, p50 %.1f ms, p99 %.1f ms, "
          "max %.1f ms" % (len(lat), p50 * 1e3, p99 * 1e3, lat[-1] * 1e3))
    check(not bad, "every honest POST /attend 200 in under 2 s (%d bad: %s)"
          % (len(bad), bad[:5]))
    check(not probes_bad, "/healthz and /readyz answered 200 (%s)" %
          probes_bad[:5])
    answered = [r for r in results if r and r[0] == "answer"]
    statuses = {}
    for r in answered:
        statuses[r[1]] = statuses.get(r[1], 0) + 1
    print("uploads: %s; slowest answer %.1f s" % (
        statuses, max([r[2] for r in answered] or [0])))
    check(len(answered) == 40, "every 50 MB upload got an HTTP answer "
          "(%d of 40; others: %s)" % (len(answered),
                                      [r for r in results if not r or
                                       r[0] != "answer"][:3]))
    hwm = vm_hwm_kib(a.pid)
    print("RSS: %d MiB before, peak %d MiB sampled, VmHWM %d MiB; body "
          "budget %d MiB" % (base_rss >> 10, peak >> 10, hwm >> 10,
                             budget >> 20))
    check(hwm * 1024 < budget + (512 << 20),
          "peak RSS within the body budget + 512 MiB")
    cut = {}
    for r in ("header_timeout", "slow_body", "budget"):
        cut[r] = metric(port, 'attnd_connections_closed_total{reason="%s"}'
                        % r)
    print("cut off: %s; tricklers cut %d + %d times" %
          (cut, heads.cuts, bodies.cuts))
    if seconds >= 14:
        check(cut["header_timeout"] and cut["slow_body"],
              "slow heads and bodies were cut off")
    check(cut["budget"] and cut["budget"] > 0,
          "uploads over the body budget were refused")
    open_now = metric(port, "attnd_connections_open")
    print("connections open at SIGTERM: %d" % open_now)
    t0 = time.monotonic()
    rc = a.stop(timeout=60)
    dt = time.monotonic() - t0
    print("SIGTERM to exit: %.2f s, exit %s" % (dt, rc))
    check(rc == 0 and dt < 8.0, "exit 0 within 8 s of SIGTERM with %d "
          "connections open" % open_now)
    stop.set()
    heads.join(5)
    bodies.join(5)
    for s in idle:
        s.close()


# -- the body budget held by slow bodies -------------------------------------

def budget(binary):
    print("== budget: 100 slow bodies of 8 MB against a 256 MiB budget",
          flush=True)
    a = Attnd(binary, ["--quiet", "--threads", "2", "--max-buffered-bytes",
                       str(256 << 20)])
    port = a.port
    stop = threading.Event()
    slow = Trickler(port, ["127.0.0.%d" % i for i in range(80, 84)], 25,
                    b"POST /attend HTTP/1.1\r\nHost: t\r\nContent-Type: "
                    b"application/json\r\nContent-Length: 8000000\r\n\r\n",
                    stop)
    slow.start()
    time.sleep(2.0)
    held = metric(port, "attnd_buffered_bytes")
    big = 20 * 1000 * 1000
    st, head, _, _ = exchange(port, HONEST, b"POST /attend HTTP/1.1\r\nHost: "
                              b"t\r\nContent-Type: application/json\r\n"
                              b"Content-Length: %d\r\n\r\n" % big, 10)
    check(st == 503 and "retry-after" in head.lower(),
          "a 20 MB upload gets 503 with Retry-After before its body (%d)" % st)
    bad = []
    for _ in range(10):
        st, _, _, _ = exchange(port, HONEST, post_req("/attend", small_body()))
        if st != 200:
            bad.append(st)
        time.sleep(0.1)
    print("buffered bytes held by the slow bodies: %d MiB of 256" %
          ((held or 0) // (1 << 20)))
    check(not bad, "small requests served meanwhile (%s)" % bad)
    stop.set()
    slow.join(5)
    rc = a.stop()
    check(rc == 0, "exit 0 (%s)" % rc)


# -- readers of a large answer -------------------------------------------------

def large_answer_body():
    """A small request whose answer, with its per-head maps, is 42 MB:
    far more than the kernel's socket buffers hold at once."""
    n, d, h = 640, 16, 8
    x = [[((i * 7 + j * 3) % 11) / 10.0 for j in range(d)] for i in range(n)]
    w = [[((i + 2 * j) % 5) / 10.0 for j in range(d)] for i in range(d)]
    return json.dumps({"x": x, "w_q": w, "w_k": w, "w_v": w,
                       "num_heads": h}).encode()


def reader(binary):
    print("== reader: a 42 MB answer read at 4 KB/s", flush=True)
    a = Attnd(binary, ["--quiet", "--threads", "2", "--rate-window", "2",
                       "--shutdown-timeout", "6"])
    port = a.port
    body = large_answer_body()
    s = connect(port, "127.0.0.70", 30)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.sendall(post_req("/attend", body, close=False))
    t0 = time.monotonic()
    got, closed = 0, None
    while time.monotonic() - t0 < 40:
        try:
            d_ = s.recv(4096)
        except (ConnectionResetError, socket.timeout):
            d_ = b""
        if not d_:
            closed = time.monotonic() - t0
            break
        got += len(d_)
        time.sleep(1.0)
    s.close()
    print("slow reader: %d KiB read, cut off after %s s" %
          (got >> 10, "%.1f" % closed if closed else "never"))
    check(closed is not None and closed < 30,
          "the slow reader was cut off within 30 s")
    slow = metric(port, 'attnd_connections_closed_total{reason="slow_read"}')
    check(slow and slow >= 1, "counted as slow_read (%s)" % slow)
    st, _, _, _ = exchange(port, HONEST, post_req("/attend", small_body()))
    check(st == 200, "served after it: %d" % st)
    # SIGTERM while another slow reader holds an answer: bounded by
    # --shutdown-timeout (6 s here).
    s = connect(port, "127.0.0.71", 30)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.sendall(post_req("/attend", body, close=False))
    s.recv(1024)
    t0 = time.monotonic()
    rc = a.stop(timeout=60)
    dt = time.monotonic() - t0
    s.close()
    print("SIGTERM with a slow reader: exit %s after %.2f s" % (rc, dt))
    check(rc == 0 and dt < 10.0, "exit 0 within --shutdown-timeout (6 s) "
          "+ 4 s")


def dechunk(data):
    """The body of a chunked answer, or None when its framing is broken."""
    out, at = [], 0
    while True:
        eol = data.find(b"\r\n", at)
        if eol < 0:
            return None
        try:
            size = int(data[at:eol].split(b";")[0], 16)
        except ValueError:
            return None
        if size == 0:
            return b"".join(out) if data[eol:] == b"\r\n\r\n" else None
        out.append(data[eol + 2:eol + 2 + size])
        at = eol + 2 + size + 2


def steady(binary):
    # The kernel's send buffer (megabytes, autotuned) takes the first
    # megabytes of the answer at once, and afterwards the server is woken
    # to write only when a third of it is free: the writes come seconds
    # apart however steadily the client reads. The rate is of what the
    # client has acknowledged, so this reader at twice the rate is served.
    rate, window, paced = 64 << 10, 2, 10.0
    print("== steady: a 42 MB answer read at %d KiB/s for %.0f s under "
          "--min-send-rate %d --rate-window %d, then at full speed" %
          (2 * rate >> 10, paced, rate, window), flush=True)
    a = Attnd(binary, ["--quiet", "--threads", "2", "--min-send-rate",
                       str(rate), "--rate-window", str(window)])
    port = a.port
    s = connect(port, "127.0.0.72", 30)
    s.sendall(post_req("/attend", large_answer_body()))
    buf, closed, err = b"", None, ""
    t0 = time.monotonic()
    while time.monotonic() - t0 < paced:
        try:
            got = s.recv(2 * rate // 20)
        except (ConnectionResetError, socket.timeout) as e:
            got, err = b"", " (%s)" % e.__class__.__name__
        if not got:
            closed = time.monotonic() - t0
            break
        buf += got
        ahead = len(buf) / (2 * rate) - (time.monotonic() - t0)
        if ahead > 0:
            time.sleep(ahead)
    steady_kib = len(buf) >> 10
    while closed is None:
        try:
            got = s.recv(1 << 20)
        except (ConnectionResetError, socket.timeout) as e:
            got, err = b"", " (%s)" % e.__class__.__name__
        if not got:
            break
        buf += got
    s.close()
    print("steady reader: %d KiB in the first %.1f s, %d KiB in all%s" %
          (steady_kib, closed if closed is not None else paced,
           len(buf) >> 10, err))
    check(closed is None, "not cut off while reading at twice "
          "--min-send-rate (%s)" % ("%.1f s" % closed if closed else "never"))
    end = buf.find(b"\r\n\r\n")
    whole = None
    if buf.startswith(b"HTTP/1.1 200 ") and end > 0:
        chunked = b"transfer-encoding: chunked" in buf[:end].lower()
        whole = dechunk(buf[end + 4:]) if chunked else buf[end + 4:]
    try:
        answer = json.loads(whole) if whole is not None else None
    except ValueError:
        answer = None
    check(isinstance(answer, dict) and "output" in answer,
          "the whole answer arrived: 200, %d bytes of JSON" %
          (len(whole) if whole else 0))
    slow = metric(port, 'attnd_connections_closed_total{reason="slow_read"}')
    check(slow == 0, "no slow_read counted (%s)" % slow)
    rc = a.stop()
    check(rc == 0, "exit 0 (%s)" % rc)


# -- slots held by one address -----------------------------------------------

def big_answer_body(n=640, d=16, h=8):
    """A small request whose answer is large: per-head maps of n x n for h
    heads, about 30 MB of JSON with the defaults."""
    x = [[((i * 7 + j * 3) % 11) / 10.0 for j in range(d)] for i in range(n)]
    w = [[((i + 2 * j) % 5) / 10.0 for j in range(d)] for i in range(d)]
    return json.dumps({"x": x, "w_q": w, "w_k": w, "w_v": w,
                       "num_heads": h}).encode()


class SlowReaders(threading.Thread):
    """n connections from one address, each asking for a large answer and
    reading it at `rate` bytes/s (just above --min-send-rate, so never cut
    off); one refused or ended asks again a second later, so the address
    holds every slot it can."""

    def __init__(self, port, src, n, body, rate, stop):
        super().__init__(daemon=True)
        self.port, self.src, self.body, self.rate = port, src, body, rate
        self.stop = stop
        self.socks = [None] * n
        self.retry_at = [0.0] * n
        self.refused = 0
        self.read = 0

    def _open(self, i):
        try:
            s = connect(self.port, self.src, 10)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
            s.sendall(post_req("/attend", self.body))
            s.setblocking(False)
            self.socks[i] = [s, b"", time.monotonic(), 0]
        except OSError:
            self.retry_at[i] = time.monotonic() + 1.0

    def run(self):
        tick = 0.1
        while not self.stop.is_set():
            now = time.monotonic()
            for i, entry in enumerate(self.socks):
                if entry is None:
                    if now >= self.retry_at[i]:
                        self._open(i)
                    continue
                s, head, t_open, done = entry
                # Paced by the clock, not by the rounds, which a loaded
                # machine slows: a second's worth at most in one go.
                want = int(min(self.rate * (now - t_open) - done, self.rate))
                ended = False
                while want > 0:
                    try:
                        got = s.recv(min(want, 1 << 16))
                    except BlockingIOError:
                        break
                    except OSError:
                        got = b""
                    if not got:
                        ended = True
                        break
                    want -= len(got)
                    entry[3] += len(got)
                    self.read += len(got)
                    if len(head) < 16:
                        head += got[:16]
                        entry[1] = head
                if head.startswith(b"HTTP/1.1 503"):
                    self.refused += 1
                    ended = True
                if ended:
                    s.close()
                    self.socks[i] = None
                    self.retry_at[i] = now + 1.0
            self.stop.wait(tick)
        for entry in self.socks:
            if entry:
                entry[0].close()

    def holding(self):
        return sum(1 for e in self.socks
                   if e and e[1].startswith(b"HTTP/1.1 200"))


def slots(binary, in_flight=8, seconds=8.0):
    """One address takes every --max-in-flight slot with large answers it
    reads slowly; a client from another address is still served, and the
    address's slots come back once its requests end."""
    print("== slots: %d slow readers of 30 MB answers from one address, "
          "--max-in-flight %d; %g s" % (in_flight, in_flight, seconds),
          flush=True)
    a = Attnd(binary, ["--quiet", "--threads", "2", "--max-in-flight",
                       str(in_flight)])
    port = a.port
    stop = threading.Event()
    hog = SlowReaders(port, "127.0.0.90", in_flight, big_answer_body(),
                      200 << 10, stop)
    hog.start()
    # Until the address holds its share (three quarters of the slots, the
    # default --max-in-flight-per-ip), however long their computing takes.
    share = in_flight * 3 // 4
    deadline = time.monotonic() + 60
    while hog.holding() < share and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)
    body = small_body()
    statuses = {}
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        try:
            st, _, _, _ = exchange(port, HONEST, post_req("/attend", body))
        except (OSError, TimeoutError, ConnectionError) as e:
            st = type(e).__name__
        statuses[st] = statuses.get(st, 0) + 1
        time.sleep(0.1)
    served = statuses.get(200, 0)
    total = sum(statuses.values())
    print("slow readers holding answers: %d; refused %d times; honest "
          "POST /attend from another address: %d of %d served (%s)" %
          (hog.holding(), hog.refused, served, total, statuses))
    check(1 <= hog.holding() <= share, "the slow readers hold answers, at "
          "most their share (%d of %d)" % (share, in_flight))
    check(served == total, "every honest request served while one address "
          "holds what it can")
    per_ip = metric(port, 'attnd_attend_refused_total'
                    '{reason="in_flight_per_ip"}')
    check(per_ip and per_ip >= 1, "the slow readers' extra requests counted "
          "as in_flight_per_ip (%s)" % per_ip)
    stop.set()
    hog.join(10)
    # Their connections closed mid-answer: every slot given back.
    deadline = time.monotonic() + 10
    st = None
    while time.monotonic() < deadline:
        try:
            st, _, _, _ = exchange(port, "127.0.0.90",
                                   post_req("/attend", body))
        except (OSError, TimeoutError, ConnectionError) as e:
            st = type(e).__name__
        if st == 200:
            break
        time.sleep(0.2)
    check(st == 200, "the slow readers' address served again after they "
          "left (%s)" % st)
    rc = a.stop()
    check(rc == 0, "exit 0 (%s)" % rc)


# -- framing -------------------------------------------------------------------

FRAMING = [
    ("space before colon", b"POST /attend HTTP/1.1\r\nHost: t\r\n"
     b"Content-Length : 27\r\n\r\nGET /smuggled HTTP/1.1\r\n\r\n"),
    ("obs-fold", b"POST /attend HTTP/1.1\r\nHost: t\r\nContent-Length:\r\n"
     b" 27\r\n\r\nGET /smuggled HTTP/1.1\r\n\r\n"),
    ("bare CR", b"GET /healthz HTTP/1.1\rHost: t\r\n\r\n"),
    ("Content-Length -1", b"POST /attend HTTP/1.1\r\nHost: t\r\n"
     b"Content-Length: -1\r\n\r\n"),
    ("Content-Length abc", b"POST /attend HTTP/1.1\r\nHost: t\r\n"
     b"Content-Length: abc\r\n\r\n"),
    ("Content-Length N, N", b"POST /attend HTTP/1.1\r\nHost: t\r\n"
     b"Content-Length: 2, 2\r\n\r\n{}"),
    ("Content-Length 2^64", b"POST /attend HTTP/1.1\r\nHost: t\r\n"
     b"Content-Length: 18446744073709551616\r\n\r\n"),
    ("differing Content-Length", b"POST /attend HTTP/1.1\r\nHost: t\r\n"
     b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}"),
    ("Transfer-Encoding and Content-Length", b"POST /attend HTTP/1.1\r\n"
     b"Host: t\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"
     b"0\r\n\r\n"),
    ("Transfer-Encoding gzip", b"POST /attend HTTP/1.1\r\nHost: t\r\n"
     b"Transfer-Encoding: gzip\r\n\r\n"),
    ("bad chunk size", b"POST /attend HTTP/1.1\r\nHost: t\r\nContent-Type: "
     b"application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n"
     b"0\r\n\r\n"),
]


def framing(binary):
    print("== framing", flush=True)
    a = Attnd(binary, ["--quiet", "--threads", "1"])
    for name, req in FRAMING:
        try:
            st, head, body, lines = exchange(a.port, HONEST, req, 10)
            try:
                code = json.loads(body)["error"]["code"]
            except (ValueError, KeyError, TypeError):
                code = None
            want = 413 if name.startswith("Content-Length 2^64") else 400
            ok = (st == want and lines == 1 and
                  code == ("too_large" if want == 413 else "bad_request") and
                  "access-control-allow-origin" in head.lower())
            detail = "%d, %d status line(s), code %s" % (st, lines, code)
        except (OSError, TimeoutError, ConnectionError) as e:
            ok, detail = False, str(e)
        check(ok, "%s: answered once with the JSON body (%s)" %
              (name, detail))
    errs = metric(a.port, 'attnd_connections_closed_total{reason="framing"}')
    check(errs == len(FRAMING), "each counted in /metrics (%s)" % errs)
    rc = a.stop()
    check(rc == 0, "exit 0 (%s)" % rc)


# -- the memory bomb -----------------------------------------------------------

def bomb(binary):
    print("== bomb: Q of 2 GiB from 197 KB, under a 3 GiB address space",
          flush=True)
    limit = 3 << 30

    # The soft limit is lowered for the start of the child only (it is
    # inherited), then restored here.
    old = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (limit, old[1]))
    try:
        a = Attnd(binary, ["--quiet", "--threads", "2", "--max-in-flight",
                           "8"])
    finally:
        resource.setrlimit(resource.RLIMIT_AS, old)
    n, d_k = 16384, 16384
    x = [[[1] for _ in range(n)] for _ in range(2)]
    w = [[1] * d_k]
    body = json.dumps({"x": x, "memory": [[[1]], [[1]]], "w_q": w,
                       "w_k": w, "w_v": [[1]],
                       "return_weights": "none"},
                      separators=(",", ":")).encode()
    before = rss_kib(a.pid)
    st, _, resp, _ = exchange(a.port, HONEST, post_req("/attend", body), 60)
    after = rss_kib(a.pid)
    try:
        code = json.loads(resp)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        code = None
    try:
        msg = json.loads(resp)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        msg = resp[:200]
    print("bomb (%d KB): %d %s (%s); RSS %d -> %d MiB" %
          (len(body) // 1000, st, code, msg, before >> 10, after >> 10))
    check(st == 413 and code == "too_large", "the memory bomb is 413")
    check(after - before < 64 << 10, "RSS unchanged (within 64 MiB)")
    rc = a.stop()
    check(rc == 0, "exit 0 (%s)" % rc)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnd", required=True)
    ap.add_argument("--seconds", type=float, default=16.0,
                    help="length of the siege's honest-client run")
    ap.add_argument("--phases",
                    default="siege,budget,reader,steady,slots,framing,bomb")
    args = ap.parse_args()
    hard = raise_nofile()
    # 3,000 idle connections, and room for the others and this process's
    # own descriptors; a lower hard limit scales the idle crowd down.
    n_idle = min(3000, hard - 800)
    if n_idle < 1000:
        print("RLIMIT_NOFILE hard limit %d: too low for the siege" % hard)
        return 1
    if n_idle < 3000:
        print("RLIMIT_NOFILE hard limit %d: %d idle connections instead of "
              "3000" % (hard, n_idle))
    t0 = time.monotonic()
    for phase in args.phases.split(","):
        {"siege": lambda: siege(args.attnd, args.seconds, n_idle),
         "budget": lambda: budget(args.attnd),
         "reader": lambda: reader(args.attnd),
         "steady": lambda: steady(args.attnd),
         "slots": lambda: slots(args.attnd),
         "framing": lambda: framing(args.attnd),
         "bomb": lambda: bomb(args.attnd)}[phase]()
    print("hostile: %d failure(s) in %.0f s" % (len(FAILS),
                                               time.monotonic() - t0))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
