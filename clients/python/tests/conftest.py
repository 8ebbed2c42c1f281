"""conftest.py: a real attnd for the client's tests.

ATTND_BIN names the binary (make test-python sets it). Each server runs on
127.0.0.1 at a port picked free beforehand (so a test can restart it on the
same address), with its log drained by a thread so it never blocks.
"""
import os
import signal
import socket
import subprocess
import threading
import time
from typing import List, Optional

import numpy as np
import pytest

import attnd


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A running attnd on 127.0.0.1:port; restart() keeps the port."""

    def __init__(self, binary: str, args: List[str] = ()) -> None:
        self.binary = binary
        self.args = list(args)
        self.port = _free_port()
        self.proc: Optional[subprocess.Popen] = None
        self.lines: List[str] = []
        self.start()

    @property
    def url(self) -> str:
        return "http://127.0.0.1:%d" % self.port

    def start(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            ready = threading.Event()
            self.proc = subprocess.Popen(
                [self.binary, "--host", "127.0.0.1", "--port",
                 str(self.port), "--quiet"] + self.args,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE)
            threading.Thread(target=self._drain, args=(self.proc, ready),
                             daemon=True).start()
            ready.wait(timeout)
            if self.proc.poll() is None and self._listening():
                return
            self.proc.wait()
            if time.monotonic() > deadline:
                raise RuntimeError("attnd did not start: " +
                                   "".join(self.lines[-10:]))
            time.sleep(0.2)  # the port of a stopped server, not yet free

    def _drain(self, proc: subprocess.Popen, ready: threading.Event) -> None:
        for raw in proc.stderr:
            line = raw.decode("utf-8", "replace")
            if len(self.lines) < 2000:
                self.lines.append(line)
            if '"listening"' in line:
                ready.set()
        ready.set()

    def _listening(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), 2).close()
            return True
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def restart(self) -> None:
        self.stop()
        self.start()


def _binary() -> str:
    path = os.environ.get("ATTND_BIN")
    if not path or not os.access(path, os.X_OK):
        pytest.exit("ATTND_BIN must name the attnd binary (got %r); "
                    "make test-python sets it" % path, returncode=2)
    return path


@pytest.fixture(scope="session")
def server():
    s = Server(_binary())
    yield s
    s.stop()


@pytest.fixture
def own_server():
    """A server of the test's own, which it may restart."""
    s = Server(_binary())
    yield s
    s.stop()


@pytest.fixture
def client(server):
    return attnd.Client(server.url, timeout=60)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)

