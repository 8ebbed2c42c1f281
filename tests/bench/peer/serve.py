"""serve.py: runs the benchmark's peer (app.py) as one uvicorn process per
core, each accepting on its own listening socket bound to the same port
(SO_REUSEPORT), so the kernel spreads a run's connections over all of them.

uvicorn's own --workers share one listening socket, and whichever worker
wakes first may accept every connection of a run: the peer then served a
whole run on one core, at half its throughput, in most rounds. With a
socket each, wrk's 16 connections land on both processes (all on one has a
chance of 2^-15).

    /usr/bin/python3 tests/bench/peer/serve.py --port 8081 [--workers 2]

SIGTERM or SIGINT stops the processes. /healthz names the process that
answered (pid), so a driver can wait until every one has answered.
"""
import argparse
import os
import signal
import socket
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()

    socks = []
    for _ in range(args.workers):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        s.bind((args.host, args.port))
        s.listen(2048)
        socks.append(s)

    children = []
    for s in socks:
        pid = os.fork()
        if pid == 0:
            for other in socks:
                if other is not s:
                    other.close()
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            # the app (and PyTorch) is loaded in each process, after the fork
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            import uvicorn
            import app

            config = uvicorn.Config(app.app, log_level="warning",
                                    access_log=False)
            uvicorn.Server(config).run(sockets=[s])
            os._exit(0)
        children.append(pid)
    for s in socks:
        s.close()

    def stop(_sig, _frame):
        for pid in children:
            try:
                os.kill(pid, signal.SIGTERM)
            except OSError:
                pass

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    status = 0
    for pid in children:
        while True:
            try:
                _, st = os.waitpid(pid, 0)
                break
            except InterruptedError:
                continue
            except ChildProcessError:
                st = 0
                break
        if st != 0 and status == 0:
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
