#!/usr/bin/python3
"""run_jsonsuite.py: every JSONTestSuite test_parsing file POSTed to /attend
of a real attnd.

    run_jsonsuite.py --attnd build/attnd --suite tests/robust/jsontestsuite

Expected, per file (none of them is a valid request of the contract):
  n_*  400 invalid_json (not JSON at all)
  y_*  422 invalid_request (valid JSON, but not a request object with the
       required fields)
  i_*  400 or 422 (implementation-defined JSON)
Each answer must be a JSON error body {"error":{"code","message",...}} whose
code matches the status; never a 5xx, a reset or a hang. /healthz must answer
200 after each file. Exits 1 listing every file that broke a rule.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attnd_proc  # noqa: E402

CODE_FOR = {400: "invalid_json", 422: "invalid_request"}


def expected_statuses(name):
    if name.startswith("n_"):
        return (400,)
    if name.startswith("y_"):
        return (422,)
    return (400, 422)


def check_one(port, path):
    """Returns None when the file was handled as expected, else a reason."""
    name = os.path.basename(path)
    with open(path, "rb") as f:
        body = f.read()
    try:
        r = attnd_proc.post(port, "/attend", body, timeout=20)
    except attnd_proc.Hang as e:
        return "hang: %s" % e
    except ConnectionError as e:
        return "connection lost: %s" % e
    why = None
    want = expected_statuses(name)
    if r.status not in want:
        why = "status %d, expected %s" % (r.status, " or ".join(
            str(s) for s in want))
    else:
        try:
            err = r.json()["error"]
            if err.get("code") != CODE_FOR[r.status]:
                why = "status %d with code %r" % (r.status, err.get("code"))
            elif not isinstance(err.get("message"), str) or \
                    not err["message"]:
                why = "error without a message"
            elif "field" in err and err["field"] and \
                    not err["field"].startswith("/"):
                why = "field %r is not a JSON Pointer" % err["field"]
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            why = "status %d with a body that is not a JSON error: %r" % (
                r.status, r.body[:200])
    try:
        h = attnd_proc.get(port, "/healthz", timeout=10)
        if h.status != 200:
            why = (why + "; " if why else "") + "/healthz then %d" % h.status
    except (attnd_proc.Hang, ConnectionError) as e:
        why = (why + "; " if why else "") + "/healthz then failed: %s" % e
    return why


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnd", required=True)
    ap.add_argument("--suite", required=True)
    args = ap.parse_args()
    files = sorted(os.listdir(os.path.join(args.suite, "test_parsing")))
    srv = attnd_proc.Attnd(args.attnd, ["--quiet", "--threads", "1"])
    failures = []
    counts = {}
    try:
        for name in files:
            why = check_one(srv.port,
                            os.path.join(args.suite, "test_parsing", name))
            counts[name[:2]] = counts.get(name[:2], 0) + 1
            if why:
                failures.append("%s: %s" % (name, why))
            if not srv.alive():
                failures.append("%s: attnd exited (%s)" %
                                (name, srv.proc.returncode))
                break
    finally:
        rc = srv.stop()
    if rc != 0:
        failures.append("attnd exit code %s after SIGTERM" % rc)
    print("jsonsuite: %d files (%s), %d failures" % (
        len(files), ", ".join("%s%d" % (k, v) for k, v in
                              sorted(counts.items())), len(failures)))
    for f in failures:
        print("  FAIL " + f)
    if failures:
        print(srv.log_tail())
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
