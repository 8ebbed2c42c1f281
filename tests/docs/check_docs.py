#!/usr/bin/env python3
"""check_docs.py: the docs agree with the binary and with the tree (python3
stdlib only).

- Options: the table under "## Options" in docs/operations.md lists exactly
  the options `attnd --help` prints, each with the same environment variable
  and the same default (the first `code` span of the default cell, or its
  first word). Rows are `| `--name` | `ATTND_NAME` | `default` | meaning |`;
  an option without a variable leaves both cells empty.
- Metrics: every metric a running attnd exposes on /metrics (names from its
  `# TYPE` lines, started on a free loopback port) is a row of the table under
  "## Metrics" in docs/operations.md, with the same type. Rows the server does
  not expose are reported, not failed: features document their metrics as
  they land.
- Errors: the table under "## Errors" in docs/api.md has a row for every
  code of the error table in service/errors.h (ERRORS_MAP), with each of its
  statuses in the status cell or in the row as "(NNN)", and no other code.
- Examples: each request of README.md and docs/api.md shown with its
  answer (a `curl ... -d '{..}'` block, or a JSON request block, followed
  by a JSON answer block; the request's `localhost:8080` is the fresh
  attnd's address) is sent, and the answer shown must be what attnd
  answers: the same keys in the same order, every number to the digits
  shown (or within 3e-7 * (1 + |x|), the few float32 units in the last
  place another BLAS may differ by), `...` standing for the
  rest of its array, `elapsed_ms` any number. A shell comment after a
  request (`# 201 {...}`) is its expected status and body.
- Links: every relative link and image in README.md and docs/*.md (outside
  code) points to a file that exists, and a `#fragment` into a Markdown file
  to one of its headings.

Usage: check_docs.py [--attnd build/attnd] [--root .]
Exit status 0 when everything agrees, 1 otherwise (every problem is listed).
"""
import argparse
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # no __pycache__ left in the source tree
sys.path.insert(0, os.path.join(HERE, "..", "robust"))
from attnd_proc import Attnd  # noqa: E402

problems = []


def problem(msg):
    problems.append(msg)
    print("  FAIL " + msg)


def ok(msg, since):
    """Prints msg as passed when no problem was found since index since."""
    print(("  ok   " if len(problems) == since else "  --   ") + msg)


# -- the binary ----------------------------------------------------------------

def help_options(binary):
    """{"--name": (env or "", default or "")} from `attnd --help`. An option
    line starts with two spaces and --name; the line after it may read
    `env NAME, default VALUE`."""
    out = subprocess.run([binary, "--help"], capture_output=True, text=True,
                         timeout=30)
    if out.returncode != 0:
        raise SystemExit("%s --help exited %d: %s" %
                         (binary, out.returncode, out.stderr))
    opts, last = {}, None
    for line in out.stdout.splitlines():
        m = re.match(r"^\s{1,8}(--[a-z0-9][a-z0-9-]*)\b", line)
        if m:
            last = m.group(1)
            opts[last] = ("", "")
            continue
        m = re.match(r"^\s+env ([A-Z][A-Z0-9_]*)(?:, default (.*))?$", line)
        if m and last:
            opts[last] = (m.group(1), (m.group(2) or "").strip())
            last = None
    if not opts:
        raise SystemExit("no options found in %s --help:\n%s" %
                         (binary, out.stdout))
    return opts


def exposed_metrics(binary):
    """{name: type} from the `# TYPE` lines of a fresh attnd's /metrics."""
    srv = Attnd(binary, args=["--quiet"])
    try:
        url = "http://127.0.0.1:%d/metrics" % srv.port
        with urllib.request.urlopen(url, timeout=30) as r:
            text = r.read().decode("utf-8")
    finally:
        rc = srv.stop()
        if rc != 0:
            problem("attnd exited %r after SIGTERM: %s" % (rc, srv.log_tail()))
    types = {}
    for line in text.splitlines():
        m = re.match(r"^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (\w+)", line)
        if m:
            types[m.group(1)] = m.group(2)
    if not types:
        problem("/metrics has no # TYPE line:\n" + text[:500])
    return types


# -- the documents ---------------------------------------------------------------

def strip_code_blocks(text):
    """The text with fenced code blocks blanked (line count kept)."""
    out, fence = [], None
    for line in text.split("\n"):
        m = re.match(r"^\s*(```+|~~~+)", line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            out.append("")
        elif m:
            fence = m.group(1)
            out.append("")
        else:
            out.append(line)
    return "\n".join(out)


def section_table(path, heading):
    """Rows (lists of cells) of the first table under `## heading` in path."""
    text = strip_code_blocks(open(path, encoding="utf-8").read())
    rows, inside, in_table = [], False, False
    for line in text.split("\n"):
        if re.match(r"^#{1,6} ", line):
            if inside:
                break
            inside = line.lstrip("#").strip().lower() == heading.lower()
            continue
        if not inside:
            continue
        if line.startswith("|"):
            in_table = True
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if all(re.fullmatch(r":?-+:?", c) for c in cells if c):
                continue  # the separator row
            rows.append(cells)
        elif in_table:
            break
    return rows[1:] if rows else []  # without the header row


def unquote(cell):
    """The first `code` span of a cell, or else its first word."""
    m = re.search(r"`([^`]*)`", cell)
    if m:
        return m.group(1).strip()
    return cell.split()[0] if cell.split() else ""


def checked_table(path, heading, cells):
    """The rows of the table under `## heading` in path with at least
    `cells` cells (1: any); a problem for each shorter row, and for a
    missing table, then None."""
    rows = section_table(path, heading)
    if not rows:
        problem("%s: no table under '## %s'" % (path, heading))
        return None
    kept = []
    for row in rows:
        if len(row) < cells:
            problem("%s %s: a row with %d cells, want %d: %s" %
                    (path, heading.lower(), len(row), cells, " | ".join(row)))
        else:
            kept.append(row)
    return kept


def check_options(binary, ops):
    since = len(problems)
    have = help_options(binary)
    rows = checked_table(ops, "Options", 4)
    if rows is None:
        return
    doc = {}
    for cells in rows:
        name = unquote(cells[0])
        if not name.startswith("--"):
            problem("%s options: first cell %r is not an --option" %
                    (ops, cells[0]))
            continue
        if name in doc:
            problem("%s options: %s has two rows" % (ops, name))
        doc[name] = (unquote(cells[1]), unquote(cells[2]), cells[3])
    for name, (env, default) in have.items():
        if name not in doc:
            problem("option %s (env %s, default %s) is missing from the "
                    "options table of %s" % (name, env or "none",
                                             default or "none", ops))
            continue
        denv, ddef, meaning = doc[name]
        if denv != env:
            problem("option %s: attnd --help says variable %r, %s says %r" %
                    (name, env, ops, denv))
        if default and ddef != default:
            problem("option %s: attnd --help says default %r, %s says %r" %
                    (name, default, ops, ddef))
        if not meaning:
            problem("option %s: no meaning in %s" % (name, ops))
    for name in doc:
        if name not in have:
            problem("%s lists option %s, which attnd --help does not print" %
                    (ops, name))
    ok("options: %d in attnd --help, %d rows in %s" %
       (len(have), len(doc), os.path.relpath(ops)), since)


def check_metrics(binary, ops):
    since = len(problems)
    exposed = exposed_metrics(binary)
    rows = checked_table(ops, "Metrics", 1)
    if rows is None:
        return
    doc = {}
    for cells in rows:
        name = re.sub(r"\{.*", "", unquote(cells[0]))
        doc[name] = unquote(cells[1]) if len(cells) > 1 else ""
    for name, typ in sorted(exposed.items()):
        if name not in doc:
            problem("metric %s (%s) is exposed on /metrics but missing from "
                    "the metrics table of %s" % (name, typ, ops))
        elif doc[name] != typ:
            problem("metric %s: /metrics says %s, %s says %s" %
                    (name, typ, ops, doc[name]))
    ahead = sorted(set(doc) - set(exposed))
    ok("metrics: %d exposed on /metrics, %d rows in the table%s" %
       (len(exposed), len(doc), "; documented, not exposed by this build: " +
        ", ".join(ahead) if ahead else ""), since)


def error_table(root):
    """{code: {status, ...}} from the X(NAME, status, "code") rows of
    ERRORS_MAP in service/errors.h."""
    text = open(os.path.join(root, "service", "errors.h"),
                encoding="utf-8").read()
    row = r'X\(\s*[A-Z_]+\s*,\s*(\d+)\s*,\s*"([a-z_]+)"\s*\)'
    codes = {}
    for status, code in re.findall(row, text):
        codes.setdefault(code, set()).add(status)
    return codes


def check_errors(root):
    since = len(problems)
    api = os.path.join(root, "docs", "api.md")
    have = error_table(root)
    if not have:
        problem("service/errors.h: no X(NAME, status, \"code\") rows")
        return
    rows = checked_table(api, "Errors", 3)
    if rows is None:
        return
    doc = {}
    for cells in rows:
        doc.setdefault(unquote(cells[1]), []).append(cells)
    for code, statuses in sorted(have.items()):
        if code not in doc:
            problem("error code %s (%s) is missing from the errors table of "
                    "%s" % (code, ", ".join(sorted(statuses)), api))
            continue
        for status in sorted(statuses):
            if not any(c[0] == status or "(%s)" % status in c[2]
                       for c in doc[code]):
                problem("error code %s: status %s is not in its row of %s" %
                        (code, status, api))
    for code in sorted(set(doc) - set(have)):
        problem("%s lists error code %s, which service/errors.h does not "
                "have" % (api, code))
    ok("errors: %d codes in service/errors.h, %d in %s" %
       (len(have), len(doc), os.path.relpath(api)), since)


def slug(heading):
    """GitHub's anchor for a heading."""
    h = re.sub(r"[`*_]|<[^>]*>", "", heading.strip().lower())
    h = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", h)
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")


def anchors(path):
    seen, out = {}, set()
    text = strip_code_blocks(open(path, encoding="utf-8").read())
    for line in text.split("\n"):
        m = re.match(r"^#{1,6} (.*)", line)
        if m:
            s = slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else "%s-%d" % (s, n))
    return out


def check_links(root):
    since = len(problems)
    docs = [os.path.join(root, "README.md")]
    ddir = os.path.join(root, "docs")
    docs += sorted(os.path.join(ddir, f) for f in os.listdir(ddir)
                   if f.endswith(".md"))
    count = 0
    for path in docs:
        if not os.path.exists(path):
            problem("%s does not exist" % path)
            continue
        text = strip_code_blocks(open(path, encoding="utf-8").read())
        text = re.sub(r"`[^`\n]*`", "", text)  # inline code is not a link
        targets = re.findall(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", text)
        targets += re.findall(r"^\s*\[[^\]]+\]:\s*(\S+)", text, re.M)
        targets += re.findall(r"<(?:img|a)\s[^>]*(?:src|href)=\"([^\"]+)\"", text)
        for t in targets:
            if re.match(r"^[a-z][a-z0-9+.-]*:", t, re.I):
                continue  # http:, https:, mailto:
            count += 1
            file_part, _, frag = t.partition("#")
            target = (os.path.normpath(os.path.join(os.path.dirname(path), file_part))
                      if file_part else path)
            where = os.path.relpath(path, root)
            if not os.path.exists(target):
                problem("%s links to %s, which does not exist" % (where, t))
            elif frag and target.endswith(".md") and frag not in anchors(target):
                problem("%s links to %s: no heading #%s in %s" %
                        (where, t, frag, os.path.relpath(target, root)))
    ok("links: %d relative links in %d files" % (count, len(docs)), since)


# -- examples --------------------------------------------------------------------

def code_blocks(path):
    """[(language, text)] of the fenced code blocks of a Markdown file."""
    out, fence, lang, buf = [], None, "", []
    with open(path, encoding="utf-8") as f:
        for line in f.read().split("\n"):
            m = re.match(r"^\s*(```+)(\w*)", line)
            if fence:
                if m and len(m.group(1)) >= len(fence) and not m.group(2):
                    out.append((lang, "\n".join(buf)))
                    fence = None
                else:
                    buf.append(line)
            elif m:
                fence, lang, buf = m.group(1), m.group(2), []
    return out


JSON_TOKEN = re.compile(r'\s*("(?:[^"\\]|\\.)*"|-?\d[\d.eE+-]*|\.\.\.|[][{}:,]|true|false|null)')


def json_tokens(text):
    toks, i = [], 0
    text = text.strip()
    while i < len(text):
        m = JSON_TOKEN.match(text, i)
        if not m:
            raise ValueError("cannot read %r" % text[i:i + 20])
        toks.append(m.group(1))
        i = m.end()
        while i < len(text) and text[i].isspace():
            i += 1
    return toks


def is_number(t):
    return bool(re.match(r"^-?\d", t))


def same_number(shown, got):
    """got equals the number shown to the digits shown (or within
    3e-7 * (1 + |x|), the few float32 units in the last place that another
    BLAS may differ by)."""
    mant = shown.lower().split("e")[0].lstrip("-")
    decimals = len(mant.split(".")[1]) if "." in mant else 0
    exp = int(shown.lower().split("e")[1]) if "e" in shown.lower() else 0
    half_unit = 0.5 * 10.0 ** (exp - decimals)
    a, b = float(shown), float(got)
    return abs(a - b) <= max(half_unit, 3e-7 * (1 + abs(a)))


def answer_differs(shown, got):
    """None when the answer text shown matches the answer got, else where
    they part."""
    s, g = json_tokens(shown), json_tokens(got)
    i = j = 0
    depth = 0
    while i < len(s):
        if s[i] == "...":
            # the rest of this array, up to its closing bracket
            d = depth
            while j < len(g) and not (g[j] in "]}" and depth == d):
                depth += 1 if g[j] in "[{" else -1 if g[j] in "]}" else 0
                j += 1
            if j < len(g) and i + 1 < len(s) and s[i + 1] == ",":
                i += 1  # "..., ]" is not written, but tolerate it
            i += 1
            continue
        if j >= len(g):
            return "the answer ends before %s" % " ".join(s[i:i + 5])
        if i >= 2 and s[i - 2] == '"elapsed_ms"' and is_number(s[i]) and is_number(g[j]):
            pass
        elif is_number(s[i]) and is_number(g[j]):
            if not same_number(s[i], g[j]):
                return "%s shown, %s answered (after %s)" % (
                    s[i], g[j], " ".join(s[max(0, i - 6):i]))
        elif s[i] != g[j]:
            return "%s shown, %s answered (after %s)" % (
                s[i], g[j], " ".join(s[max(0, i - 6):i]))
        depth += 1 if s[i] in "[{" else -1 if s[i] in "]}" else 0
        i += 1
        j += 1
    if j < len(g):
        return "the answer goes on: %s" % " ".join(g[j:j + 5])
    return None


def doc_examples(path):
    """[(where, path, request body, content type, status or None, answer
    text)] of a Markdown file."""
    blocks = code_blocks(path)
    out = []
    name = os.path.basename(path)
    for k, (lang, text) in enumerate(blocks):
        nxt = blocks[k + 1] if k + 1 < len(blocks) else ("", "")
        if lang == "sh" and "curl" in text:
            m = re.search(r"curl -s localhost:8080(/\S+)(.*?)-d '(.*?)'", text, re.S)
            if not m:
                continue
            ctype = re.search(r"Content-Type: ([^']+)'", m.group(2))
            c = re.search(r"^# (\d{3}) (.*)$", text[m.end():], re.M)
            if c:
                out.append((name, m.group(1), m.group(3), ctype.group(1) if ctype else None,
                            int(c.group(1)), c.group(2)))
            elif nxt[0] == "json":
                out.append((name, m.group(1), m.group(3), ctype.group(1) if ctype else None,
                            None, nxt[1]))
        elif lang == "json" and nxt[0] == "json" and '"w_q"' in text and "..." not in text \
                and text.lstrip().startswith("{"):
            out.append((name, "/attend", text, "application/json", None, nxt[1]))
    return out


def check_examples(binary, root):
    since = len(problems)
    examples = []
    for doc in ("README.md", os.path.join("docs", "api.md")):
        examples += doc_examples(os.path.join(root, doc))
    srv = Attnd(binary, args=["--quiet"])
    try:
        for where, path, body, ctype, status, shown in examples:
            req = urllib.request.Request("http://127.0.0.1:%d%s" % (srv.port, path),
                                         body.encode(), {"Content-Type": ctype or ""})
            try:
                with urllib.request.urlopen(req, timeout=60) as r:
                    st, got = r.status, r.read().decode("utf-8")
            except urllib.error.HTTPError as e:
                st, got = e.code, e.read().decode("utf-8")
            what = "%s: the example POST %s" % (where, path)
            if status is not None and st != status:
                problem("%s answers %d, the text shows %d: %s" % (what, st, status, got[:200]))
                continue
            if status is None and st != 200:
                problem("%s answers %d: %s" % (what, st, got[:200]))
                continue
            try:
                diff = answer_differs(shown, got)
            except ValueError as e:
                diff = str(e)
            if diff:
                problem("%s: %s" % (what, diff))
    finally:
        rc = srv.stop()
        if rc != 0:
            problem("attnd exited %r after SIGTERM: %s" % (rc, srv.log_tail()))
    if not examples:
        problem("no request examples found in README.md and docs/api.md")
    ok("examples: %d requests of README.md and docs/api.md answered as shown"
       % len(examples), since)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--attnd", default="build/attnd")
    ap.add_argument("--root", default=os.path.normpath(os.path.join(HERE, "..", "..")))
    args = ap.parse_args()
    ops = os.path.join(args.root, "docs", "operations.md")
    check_options(args.attnd, ops)
    check_metrics(args.attnd, ops)
    check_errors(args.root)
    check_examples(args.attnd, args.root)
    check_links(args.root)
    if problems:
        print("docs check: %d problem(s)" % len(problems))
        return 1
    print("docs check: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
