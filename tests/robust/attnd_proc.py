"""attnd_proc.py: the robustness runners' common parts (python3 stdlib only).

- Attnd: build/attnd as a child process on an ephemeral loopback port (read
  from its "listening" log line), its stderr drained by a thread so the
  child never blocks on a full pipe, stopped with SIGTERM and its exit code
  checked.
- raw_request / Response: one HTTP exchange over a raw socket, so requests
  can carry lying or conflicting headers that an HTTP library would refuse
  to send, with a deadline on the whole exchange (a hang is a failure, not
  a wait).
- rss_kib: a process's resident set from /proc.
"""
import json
import os
import signal
import socket
import subprocess
import threading
import time


class Hang(Exception):
    """The server neither answered nor closed within the deadline."""


class Attnd:
    """A running attnd. `args` are extra command-line flags; `wrapper` a
    command prefix (e.g. valgrind). The port comes from the start-up line."""

    def __init__(self, binary, args=(), wrapper=(), env=None,
                 start_timeout=60.0):
        cmd = list(wrapper) + [binary, "--host", "127.0.0.1", "--port", "0"]
        cmd += list(args)
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, env=full_env)
        self.port = None
        self.lines = []
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        if not self._ready.wait(start_timeout) or self.port is None:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError("attnd did not start: %s" %
                               "".join(self.lines[-20:]))

    def _drain(self):
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace")
            with self._lock:
                # Keep the log bounded: the load test makes many lines.
                if len(self.lines) < 20000:
                    self.lines.append(line)
            if self.port is None and '"listening"' in line:
                try:
                    self.port = int(json.loads(line)["port"])
                except (ValueError, KeyError):
                    pass
                self._ready.set()
        self._ready.set()

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc.poll() is None

    def stop(self, timeout=60.0):
        """SIGTERM, wait; returns the exit code (None if it had to be
        killed after timeout seconds)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            rc = None
        self._reader.join(5)
        return rc

    def log_tail(self, n=20):
        with self._lock:
            return "".join(self.lines[-n:])


class Response:
    def __init__(self, status, headers, body, raw):
        self.status = status
        self.headers = headers  # lower-case name -> value (last wins)
        self.body = body
        self.raw = raw

    def json(self):
        return json.loads(self.body.decode("utf-8"))


def _parse_response(data):
    """Parses one HTTP/1.x response from the start of data. Returns
    (Response, bytes used) or None if data is not complete yet; raises
    ValueError on a malformed answer."""
    end = data.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = data[:end].decode("latin-1").split("\r\n")
    parts = head[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
        raise ValueError("bad status line %r" % head[0])
    status = int(parts[1])
    headers = {}
    for h in head[1:]:
        name, _, value = h.partition(":")
        headers[name.strip().lower()] = value.strip()
    rest = data[end + 4:]
    if "content-length" in headers:
        n = int(headers["content-length"])
        if len(rest) < n:
            return None
        return Response(status, headers, rest[:n], data), end + 4 + n
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = b""
        pos = 0
        while True:
            nl = rest.find(b"\r\n", pos)
            if nl < 0:
                return None
            size = int(rest[pos:nl].split(b";")[0], 16)
            if len(rest) < nl + 2 + size + 2:
                return None
            body += rest[nl + 2:nl + 2 + size]
            pos = nl + 2 + size + 2
            if size == 0:
                # no trailers from attnd: the final CRLF follows at once
                return Response(status, headers, body, data), end + 4 + pos
    if status in (204, 304) or 100 <= status < 200:
        return Response(status, headers, b"", data), end + 4
    return None  # body until close: complete only at EOF


def raw_request(port, data, timeout=10.0, half_close=False, chunks=None,
                chunk_pause=0.0):
    """Sends data (bytes) on a new connection and reads one response.
    chunks: a list of byte strings sent one by one with chunk_pause seconds
    between them (instead of data). half_close: shut down the write side
    after sending. Returns a Response; raises Hang when nothing complete
    arrives before timeout, ConnectionError on a reset or a close with no
    complete response (.partial holds what arrived)."""
    deadline = time.monotonic() + timeout
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            for piece in (chunks if chunks is not None else [data]):
                s.sendall(piece)
                if chunk_pause:
                    time.sleep(chunk_pause)
            if half_close:
                s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # answered and closed before the whole body: read it
        buf = b""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Hang("no complete response within %.1f s (got %r)" %
                           (timeout, buf[:200]))
            s.settimeout(left)
            try:
                got = s.recv(65536)
            except socket.timeout:
                raise Hang("no complete response within %.1f s (got %r)" %
                           (timeout, buf[:200]))
            except ConnectionResetError:
                parsed = _parse_response(buf) if buf else None
                if parsed:
                    return parsed[0]
                err = ConnectionError("reset after %d bytes" % len(buf))
                err.partial = buf
                raise err
            if not got:
                parsed = _parse_response(buf) if buf else None
                if parsed:
                    return parsed[0]
                if buf.find(b"\r\n\r\n") >= 0:
                    # a body framed by the close itself
                    end = buf.find(b"\r\n\r\n")
                    head = buf[:end].decode("latin-1").split("\r\n")
                    status = int(head[0].split(" ")[1])
                    headers = {}
                    for h in head[1:]:
                        name, _, value = h.partition(":")
                        headers[name.strip().lower()] = value.strip()
                    return Response(status, headers, buf[end + 4:], buf)
                err = ConnectionError("closed after %d bytes" % len(buf))
                err.partial = buf
                raise err
            buf += got
            parsed = _parse_response(buf)
            if parsed:
                return parsed[0]
    finally:
        s.close()


def post(port, path, body, content_type="application/json", extra=b"",
         **kw):
    head = (b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            b"Content-Type: %s\r\nContent-Length: %d\r\n" %
            (path.encode(), content_type.encode(), len(body)))
    return raw_request(port, head + extra + b"\r\n" + body, **kw)


def get(port, path, **kw):
    return raw_request(port, b"GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                       b"Connection: close\r\n\r\n" % path.encode(), **kw)


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return None
