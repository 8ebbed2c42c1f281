#!/usr/bin/python3
"""store_model.py: attnd's tensor store against a model of its contract,
from the outside: seeded random POST /tensors (tensor object, JSON array,
octet-stream), GET and HEAD /tensors/<ref>, /attend and `layers` requests
with refs (bare, reshaped, unknown, malformed) and `store: true`, each
followed by a comparison of the server with a Python model of the store: an
LRU of refs counted as 4 bytes a value and 256 a tensor, within the
--tensor-store-bytes bound; the first shape of each tensor kept; the five
store metrics. Every answer with refs must be the answer of the same
request inline, byte for byte (but meta.elapsed_ms and meta.refs). Then a
phase of concurrent clients on a shared set of refs: no 5xx, answers still
those of the inline requests, and afterwards the entries and bytes metrics
equal to what a HEAD of every ref ever seen finds.

What the contract leaves open is modelled as the service does it (so that
a change there shows), and named where the model does it:
  - the refs of a request are looked up in the order of its body (the top
    level first, then the layers), each found one a hit that makes it the
    most recently used, up to the first that is unknown (one miss) or
    malformed (no lookup); a request that fails keeps those effects;
  - `store: true` stores the fields of each request (of each layer, in
    order) in the order of the field table (x, memory, value, w_q, w_k,
    w_v, w_o, w_qkv, b_q, b_k, b_v, b_o, b_qkv, attn_bias, ...), after the
    computation, and to make room it forgets the tensors the request holds
    by ref only after every other one, but for those whose values it
    copies: a `layers` request's top-level refs (copied into each layer)
    and weights given as [h][d_model][d_k] (copied into [d_model][h*d_k]);
  - a GET or HEAD of a path that is not a ref is a 404 that counts no miss.

Usage: tests/contract/store_model.py [--binary build/attnd] [--seed N]
           [--ops N] [--caps 1500,2600] [--threads N] [--conc-ops N]
           [--port-range LO-HI]
Prints each disagreement (with the operations that led to it) and a
summary; exits 1 on any.
"""
import argparse
import atexit
import base64
import collections
import hashlib
import http.client
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np

AP = argparse.ArgumentParser()
AP.add_argument("--binary", default="build/attnd")
AP.add_argument("--seed", type=int, default=1)
AP.add_argument("--ops", type=int, default=1500, help="operations per capacity")
AP.add_argument("--caps", default="1500,2600,4099",
                help="store capacities in bytes, one sequential run each")
AP.add_argument("--threads", type=int, default=6)
AP.add_argument("--conc-ops", type=int, default=300, help="operations per thread")
AP.add_argument("--conc-cap", type=int, default=5000)
AP.add_argument("--port-range", default="",
                help="LO-HI: start the servers on free ports in this range")
AP.add_argument("--max-fails", type=int, default=20)
AP.add_argument("--shrink", action="store_true", help="shrink a disagreement in what is held")
AP.add_argument("-v", "--verbose", action="store_true")
ARGS = AP.parse_args()

FAILS = []
COUNTS = collections.Counter()
OBSERVED = collections.Counter()


def fail(msg, trace=None):
    FAILS.append(msg)
    print("FAIL " + msg, flush=True)
    if trace:
        for t in trace[-12:]:
            print("     | " + t, flush=True)
    if len(FAILS) >= ARGS.max_fails:
        print("too many failures; stopping", flush=True)
        sys.exit(1)


# ---------------------------------------------------------------- server
def pick_port():
    if not ARGS.port_range:
        with socket.socket() as so:
            so.bind(("127.0.0.1", 0))
            return so.getsockname()[1]
    lo, hi = (int(v) for v in ARGS.port_range.split("-"))
    ports = list(range(lo, hi + 1))
    random.Random(os.getpid()).shuffle(ports)
    for p in ports:
        with socket.socket() as so:
            try:
                so.bind(("127.0.0.1", p))
                return p
            except OSError:
                continue
    raise SystemExit("no free port in %s" % ARGS.port_range)


SERVERS = []


@atexit.register
def _kill_servers():
    """No server outlives the driver, however it ends."""
    for p in SERVERS:
        if p.poll() is None:
            p.kill()
            p.wait()


class Server:
    def __init__(self, cap):
        self.port = pick_port()
        env = dict(os.environ)
        env.pop("ATTND_TENSOR_STORE_BYTES", None)
        self.p = subprocess.Popen([ARGS.binary, "--port", str(self.port), "--host", "127.0.0.1", "--quiet",
                                   "--threads", "2", "--tensor-store-bytes", str(cap)],
                                  env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        SERVERS.append(self.p)
        for _ in range(200):
            try:
                if Client(self.port).req("GET", "/healthz")[0] == 200:
                    return
            except OSError:
                time.sleep(0.02)
        raise SystemExit("attnd did not start on port %d" % self.port)

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        try:
            rc = self.p.wait(20)
        except subprocess.TimeoutExpired:
            self.p.kill()
            rc = self.p.wait()
        err = self.p.stderr.read().decode(errors="replace")
        if rc != 0:
            fail("server exit status %s after SIGTERM: %s" % (rc, err[-500:]))
        return rc


class Client:
    """One kept-alive connection."""

    def __init__(self, port):
        self.port = port
        self.conn = None

    def req(self, method, path, body=None, ctype=None):
        hdrs = {"Content-Type": ctype} if ctype else {}
        if isinstance(body, str):
            body = body.encode()
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            try:
                self.conn.request(method, path, body=body, headers=hdrs)
                r = self.conn.getresponse()
                data = r.read()
                if r.getheader("Connection", "").lower() == "close":
                    self.conn.close()
                    self.conn = None
                return r.status, {k.lower(): v for k, v in r.getheaders()}, data
            except (http.client.HTTPException, ConnectionError):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise

    def metrics(self):
        st, _, data = self.req("GET", "/metrics")
        out = {}
        for name in ("entries", "bytes", "hits_total", "misses_total", "evictions_total"):
            m = re.search(r"^attnd_tensor_store_%s ([0-9]+)$" % name, data.decode(), re.M)
            out[name] = int(m.group(1)) if m else None
        return out


# ---------------------------------------------------------------- tensors
def ref_of(a):
    return "sha256:" + hashlib.sha256(np.asarray(a, "<f4").tobytes()).hexdigest()


def nested(a, shape):
    return np.asarray(a, np.float32).reshape(shape).astype(np.float64).tolist()


def tensor_obj(a, shape):
    return {"dtype": "float32", "shape": list(shape),
            "data": base64.b64encode(np.asarray(a, "<f4").tobytes()).decode()}


def factorizations(count, rng, k=3):
    """A few shapes of rank 1..4 with count values."""
    out = {(count,)}
    divs = [d for d in range(2, count) if count % d == 0]
    for _ in range(12):
        if not divs:
            break
        shape, rest = [], count
        for _r in range(rng.randint(1, 3)):
            ds = [d for d in divs if rest % d == 0 and d < rest]
            if not ds:
                break
            d = rng.choice(ds)
            shape.append(d)
            rest //= d
        shape.append(rest)
        out.add(tuple(shape))
    out = sorted(out)
    rng.shuffle(out)
    return out[:k]


# The attention's dimensions: n = m = 3, d_model = 4, h = 2, d_k = d_v = 2,
# d_out = 3. Roles: canonical shape and the other shapes a field takes.
N, D, H, DK, DOUT = 3, 4, 2, 2, 3
ROLES = {
    "x": [(N, D)],
    "w": [(D, H * DK), (H, D, DK)],
    "w_o": [(H * DK, DOUT)],
    "b": [(H * DK,)],
    "b_o": [(DOUT,)],
    "attn_bias": [(H, N, N)],
    "slopes": [(H,)],
    "qk": [(DK,)],
    "inv_freq": [(1,)],
}
FIELD_ROLE = {"x": "x", "memory": "x", "w_q": "w", "w_k": "w", "w_v": "w", "w_o": "w_o",
              "b_q": "b", "b_k": "b", "b_v": "b", "b_o": "b_o", "attn_bias": "attn_bias",
              "rope.inv_freq": "inv_freq", "alibi.slopes": "slopes", "qk_norm.q_weight": "qk",
              "qk_norm.k_weight": "qk"}
# the objects around the nested ones, and their other members
PARENT_EXTRA = {"rope": {"dim": 2}, "alibi": {}, "qk_norm": {}}
# the order of the service's field table (what `store: true` stores first)
TABLE = ["x", "memory", "value", "w_q", "w_k", "w_v", "w_o", "w_qkv", "b_q", "b_k", "b_v", "b_o", "b_qkv", "attn_bias",
         "rope.inv_freq", "alibi.slopes", "qk_norm.q_weight", "qk_norm.k_weight"]
OVERHEAD = 256


class Pool:
    def __init__(self, rng, cap):
        self.rng = rng
        self.by_role = {}
        self.arr = {}       # ref -> flat float32 values
        self.canon = {}     # ref -> canonical shape
        for role, shapes in ROLES.items():
            cnt = int(np.prod(shapes[0]))
            self.by_role[role] = []
            for _ in range(5 if role in ("w", "x") else 3):
                a = (np.asarray([rng.gauss(0, 1) for _ in range(cnt)], np.float32))
                self.add(a, shapes[0])
                self.by_role[role].append(ref_of(a))
        # blobs only uploaded: a tensor that fits exactly, one a value over,
        # and a few sizes between
        kmax = (cap - OVERHEAD) // 4
        self.kmax = kmax
        self.blobs = []
        for cnt in sorted({1, 7, 24, 60, max(1, kmax // 2), max(1, kmax - 1), kmax}):
            if cnt < 1 or cnt > kmax:
                continue
            for _ in range(2):
                a = np.asarray([rng.uniform(-3, 3) for _ in range(cnt)], np.float32)
                self.add(a, (cnt,))
                self.blobs.append(ref_of(a))
        self.over = []
        for cnt in (max(1, kmax + 1), max(1, kmax + 17)):
            a = np.asarray([rng.uniform(-3, 3) for _ in range(cnt)], np.float32)
            self.over.append(a)

    def add(self, a, shape):
        r = ref_of(a)
        self.arr[r] = np.asarray(a, np.float32).reshape(-1)
        self.canon[r] = tuple(shape)
        return r

    def all_refs(self):
        return list(self.arr.keys())


# ---------------------------------------------------------------- the model
class Model:
    def __init__(self, cap):
        self.cap = cap
        self.lru = collections.OrderedDict()  # ref -> (shape, count); last = newest
        self.hits = self.misses = self.evictions = 0

    def cost(self, count):
        return 4 * count + OVERHEAD

    def bytes(self):
        return sum(self.cost(c) for _s, c in self.lru.values())

    def lookup(self, ref):
        if ref in self.lru:
            self.lru.move_to_end(ref)
            self.hits += 1
            return self.lru[ref][0]
        self.misses += 1
        return None

    def put(self, ref, shape, count, held=()):
        """'too_large', 'existing' (shape kept) or 'created'."""
        if self.cost(count) > self.cap:
            return "too_large"
        if ref in self.lru:
            self.lru.move_to_end(ref)
            return "existing"
        need = self.cost(count)
        for pass_ in (0, 1):
            for r in list(self.lru.keys()):
                if self.cap - self.bytes() >= need:
                    break
                if pass_ == 0 and r in held:
                    continue
                del self.lru[r]
                self.evictions += 1
        self.lru[ref] = (tuple(shape), count)
        return "created"


# ---------------------------------------------------------------- the driver
ELAPSED = re.compile(rb'"elapsed_ms":[-+0-9.eE]+')
REFS = re.compile(rb',"refs":\{[^{}]*\}')


def as_body(items):
    """A request object of (field, value) pairs, "rope.inv_freq" inside
    "rope"."""
    out = collections.OrderedDict()
    for f, v in items:
        if "." in f:
            parent, key = f.split(".")
            if parent not in out:
                out[parent] = collections.OrderedDict(PARENT_EXTRA[parent])
            out[parent][key] = v
        else:
            out[f] = v
    return out


def canon_answer(b):
    return REFS.sub(b"", ELAPSED.sub(b'"elapsed_ms":0', b))


class Run:
    def __init__(self, seed, cap):
        self.rng = random.Random(seed * 7919 + cap)
        self.cap = cap
        self.pool = Pool(self.rng, cap)
        self.model = Model(cap)
        self.server = Server(cap)
        self.c = Client(self.server.port)
        self.trace = []
        self.inline_cache = {}
        self.ok = True
        self.log = []  # (method, path, body, content type, what it does to a model)

    # -- checks -----------------------------------------------------------
    def check_state(self, what):
        m = self.c.metrics()
        md = self.model
        exp = {"entries": len(md.lru), "bytes": md.bytes(), "hits_total": md.hits,
               "misses_total": md.misses, "evictions_total": md.evictions}
        bad = {k: (m[k], exp[k]) for k in exp if m[k] != exp[k]}
        if bad:
            fail("cap %d: after %s: metrics (server, model) %s" % (self.cap, what, bad), self.trace)
            # resynchronise the counters, so one slip is reported once; a
            # difference in what is held ends this run
            md.hits, md.misses, md.evictions = m["hits_total"], m["misses_total"], m["evictions_total"]
            if "entries" in bad or "bytes" in bad:
                self.ok = False

    def expect(self, what, cond, detail=""):
        COUNTS["checks"] += 1
        if not cond:
            fail("cap %d: %s%s" % (self.cap, what, ": " + detail if detail else ""), self.trace)
        return cond

    def error_of(self, data):
        try:
            e = json.loads(data)["error"]
            return e.get("code"), e.get("field")
        except Exception:
            return None, None

    # -- uploads ------------------------------------------------------------
    def upload_body(self, a, shape, form):
        if form == "object":
            return "/tensors", json.dumps(tensor_obj(a, shape)), "application/json"
        if form == "array":
            return "/tensors", json.dumps(nested(a, shape)), "application/json"
        return ("/tensors?shape=" + ",".join(map(str, shape)), np.asarray(a, "<f4").tobytes(),
                "application/octet-stream")

    def op_upload(self):
        rng, pool = self.rng, self.pool
        kind = rng.random()
        form = rng.choice(["object", "array", "octet"])
        if kind < 0.07:
            if not pool.blobs and not self.model.cap:
                return
            a = rng.choice(pool.over)
            shape = rng.choice(factorizations(a.size, rng))
            path, body, ct = self.upload_body(a, shape, form)
            self.trace.append("POST %s over the bound (%d values, cost %d, cap %d)" % (form, a.size, 4 * a.size + 256, self.cap))
            st, h, data = self.c.req("POST", path, body, ct)
            self.log.append(("POST", path, body, ct, lambda m: None))
            self.expect("upload over the bound is 413 too_large", st == 413 and self.error_of(data)[0] == "too_large",
                        "%s %s" % (st, data[:200]))
            return
        if kind < 0.14:
            self.op_bad_upload(form)
            return
        if rng.random() < 0.5 and pool.blobs:
            r = rng.choice(pool.blobs)
        else:
            r = rng.choice(pool.by_role[rng.choice(list(pool.by_role))])
        a = pool.arr[r]
        shapes = factorizations(a.size, rng) + [pool.canon[r]] * 2
        shape = tuple(rng.choice(shapes))
        path, body, ct = self.upload_body(a, shape, form)
        self.trace.append("POST %s %s shape %s" % (form, r[7:19], list(shape)))
        st, h, data = self.c.req("POST", path, body, ct)
        self.log.append(("POST", path, body, ct, lambda m: m.put(r, shape, a.size)))
        res = self.model.put(r, shape, a.size)
        if res == "too_large":
            self.expect("upload over bound 413", st == 413, str(st))
            return
        want_shape = list(self.model.lru[r][0])
        want = {"ref": r, "shape": want_shape, "bytes": 4 * a.size}
        try:
            got = json.loads(data)
        except Exception:
            got = data[:200]
        self.expect("upload status (%s)" % res, st == (201 if res == "created" else 200), "%s %s" % (st, got))
        self.expect("upload answer", got == want, "got %s want %s" % (got, want))

    def op_bad_upload(self, form):
        rng, pool = self.rng, self.pool
        r = rng.choice(pool.blobs + pool.by_role["w"])
        # (blobs is empty when no tensor fits)
        a = pool.arr[r].copy()
        shape = pool.canon[r]
        bad = rng.choice(["nan", "inf", "len", "shape"])
        if bad in ("nan", "inf"):
            a[rng.randrange(a.size)] = np.nan if bad == "nan" else -np.inf
            if form == "array":
                body = json.dumps(nested(a, shape)).replace("NaN", "1e39").replace("-Infinity", "-1e39")
                path, ct = "/tensors", "application/json"
            else:
                path, body, ct = self.upload_body(a, shape, form)
        else:
            raw = np.asarray(a, "<f4").tobytes()
            if bad == "len":
                raw = raw[:-rng.choice([1, 2, 3, 4])] if len(raw) > 4 else raw + b"\0\0"
            else:
                raw = raw + np.asarray([1.5], "<f4").tobytes()
            if form == "octet":
                path, body, ct = "/tensors?shape=" + ",".join(map(str, shape)), raw, "application/octet-stream"
            else:
                body = json.dumps({"dtype": "float32", "shape": list(shape), "data": base64.b64encode(raw).decode()})
                path, ct = "/tensors", "application/json"
        self.trace.append("POST %s invalid (%s) of %s" % (form, bad, r[7:19]))
        st, h, data = self.c.req("POST", path, body, ct)
        self.log.append(("POST", path, body, ct, lambda m: None))
        self.expect("invalid upload (%s, %s) is 4xx" % (bad, form), 400 <= st < 500, "%s %s" % (st, data[:200]))

    # -- GET / HEAD ---------------------------------------------------------
    def op_get(self):
        rng = self.rng
        method = rng.choice(["GET", "HEAD"])
        u = rng.random()
        if u < 0.07:
            path = "/tensors/" + rng.choice(["sha256:" + "A" * 64, "sha256:12", "abc", "sha256:" + "0" * 65])
            self.trace.append("%s %s (not a ref)" % (method, path))
            st, h, data = self.c.req(method, path)
            self.expect("%s of a non-ref is 404" % method, st == 404, str(st))
            return
        if u < 0.55 and self.model.lru:
            r = rng.choice(list(self.model.lru))
        elif u < 0.62:
            r = "sha256:" + hashlib.sha256(str(rng.random()).encode()).hexdigest()
        else:
            r = rng.choice(self.pool.all_refs())
        self.trace.append("%s %s" % (method, r[7:19]))
        st, h, data = self.c.req(method, "/tensors/" + r)
        self.log.append((method, "/tensors/" + r, None, None, lambda m: m.lookup(r)))
        shape = self.model.lookup(r)
        if shape is None:
            self.expect("%s of a ref not held is 404" % method, st == 404, "%s %s" % (st, data[:100]))
            return
        if not self.expect("%s of a held ref is 200" % method, st == 200, "%s %s" % (st, data[:200])):
            return
        if method == "HEAD":
            self.expect("HEAD has no body", data == b"", repr(data[:50]))
            return
        # the upload's answer, then the values as a tensor object's
        want = dict({"ref": r, "shape": list(shape),
                     "bytes": 4 * int(np.prod(shape))},
                    **tensor_obj(self.pool.arr[r], shape))
        got = json.loads(data)
        self.expect("GET answer is the tensor with its first shape", got == want,
                    "got shape %s want %s" % (got.get("shape"), list(shape)))

    # -- /attend ------------------------------------------------------------
    def field_value(self, field, fault):
        """A field's value in the request: (value, shape given or None for
        the stored one, kind, ref). fault: None, or the kind of mistake."""
        rng, pool = self.rng, self.pool
        role = FIELD_ROLE[field]
        shapes = ROLES[role]
        cands = pool.by_role[role]
        stored = [r for r in cands if r in self.model.lru]
        if fault == "unknown":
            if rng.random() < 0.5:
                fake = "sha256:" + hashlib.sha256(("u" + str(rng.random())).encode()).hexdigest()
                return {"ref": fake}, None, "unknown", fake
            r = rng.choice(cands)  # perhaps held, perhaps not
            shape = rng.choice(shapes)
            return {"ref": r, "shape": list(shape)}, shape, "ref", r
        r = rng.choice(stored) if stored and rng.random() < 0.9 else rng.choice(cands)
        if fault == "malformed":
            c = list(shapes[0])
            c[0] = 0
            bad = rng.choice([{"ref": "sha256:" + r[7:].upper()}, {"ref": r[:-1]}, {"ref": 7},
                              {"ref": "sha1:" + r[7:47]}, {"ref": r, "shape": c}, {"ref": r, "foo": 1},
                              {"ref": r + "0"}, {"ref": " " + r}])
            return bad, None, "malformed", r
        if fault == "badcount":
            c = list(rng.choice(shapes))
            c[-1] += 1
            return {"ref": r, "shape": c}, None, "badcount", r
        if r not in self.model.lru or rng.random() < 0.3:
            shape = rng.choice(shapes)
            v = nested(pool.arr[r], shape) if rng.random() < 0.5 else tensor_obj(pool.arr[r], shape)
            return v, shape, "inline", r
        if tuple(self.model.lru[r][0]) in shapes and rng.random() < 0.6:
            return {"ref": r}, None, "ref", r  # the stored shape, known at lookup
        shape = rng.choice(shapes)
        return {"ref": r, "shape": list(shape)}, shape, "ref", r

    def make_fields(self, names, faults=0):
        order = list(names)
        self.rng.shuffle(order)
        # a nested field is read where its object is
        first = {}
        for i, f in enumerate(order):
            first.setdefault(f.split(".")[0], i)
        order.sort(key=lambda f: first[f.split(".")[0]])
        bad = set(self.rng.sample(order, min(faults, len(order))))
        out = []
        for f in order:
            fault = self.rng.choice(["unknown", "unknown", "malformed", "badcount"]) if f in bad else None
            out.append((f,) + self.field_value(f, fault))
        return out

    def faults(self):
        u = self.rng.random()
        return 0 if u < 0.8 else 1 if u < 0.95 else 2

    def walk(self, groups, held, layers=False, model=None):
        """Resolves the refs of groups [(prefix, fields)] in body order.
        Returns (error, inline groups): error None or (code, pointer).
        held gets the refs the request holds until it ends: a `layers`
        request copies its top level's values into each layer and holds
        only its layers' own refs."""
        model = model or self.model
        inline_groups = []
        for prefix, fields in groups:
            inl = []
            for (f, v, shape, kind, r) in fields:
                ptr = prefix + "/" + f.replace(".", "/")
                if kind == "inline":
                    inl.append((f, nested(self.pool.arr[r], shape)))
                    continue
                if kind == "malformed":
                    return ("invalid_request", ptr), None
                got = model.lookup(r)
                if got is None:
                    return ("unknown_ref", ptr), None
                eff = shape if shape is not None else got
                # what the request keeps using: not a top level's values
                # (copied into each layer), nor a 3-D weight (copied into
                # the library's layout)
                if not (layers and prefix == "") and (len(eff) != 3 or f == "attn_bias"):
                    held.add(r)
                if kind == "badcount":
                    return ("invalid_request", ptr), None
                eff = shape if shape is not None else got
                inl.append((f, nested(self.pool.arr[r], eff)))
            inline_groups.append(inl)
        return None, inline_groups

    def inline_answer(self, body):
        if body not in self.inline_cache:
            st, h, data = self.c.req("POST", "/attend", body, "application/json")
            self.inline_cache[body] = (st, data)
            if len(self.inline_cache) > 2000:
                self.inline_cache.pop(next(iter(self.inline_cache)))
        return self.inline_cache[body]

    def do_store(self, fields_by_layer, held, model=None):
        model = model or self.model
        named = []
        for fields in fields_by_layer:
            names = {}
            by = {f: (kind, r) for (f, v, shape, kind, r) in fields}
            shapes = {f: shape for (f, v, shape, kind, r) in fields}
            for f in TABLE:
                if f not in by:
                    continue
                kind, r = by[f]
                if kind == "ref":
                    names[f] = r
                    continue
                res = model.put(r, shapes[f], self.pool.arr[r].size, held)
                if res != "too_large":
                    names[f] = r
            named.append(names)
        return named

    def op_attend(self):
        rng = self.rng
        names = ["x", "w_q", "w_k", "w_v"]
        for opt in ("memory", "w_o", "b_q", "b_k", "b_v", "b_o", "attn_bias"):
            if rng.random() < 0.3:
                names.append(opt)
        for opt in ("rope.inv_freq", "alibi.slopes", "qk_norm.q_weight"):
            if rng.random() < 0.15:
                names.append(opt)
                if opt == "qk_norm.q_weight":
                    names.append("qk_norm.k_weight")
        if "b_o" in names and "w_o" not in names:
            names.remove("b_o")
        fields = self.make_fields(names, self.faults())
        store = rng.random() < 0.25
        body_obj = as_body((f, v) for (f, v, s, k, r) in fields)
        body_obj["num_heads"] = H
        if store:
            body_obj["store"] = True
        body = json.dumps(body_obj)
        self.trace.append("POST /attend%s %s" % (" store" if store else "", ", ".join(
            "%s=%s%s" % (f, k, "" if k == "unknown" else "(" + r[7:19] + ")") for (f, v, s, k, r) in fields)))
        st, h, data = self.c.req("POST", "/attend", body, "application/json")
        self.log_attend(body, [("", fields)], False, store, [fields])
        held = set()
        err, inl = self.walk([("", fields)], held)
        self.finish_attend(st, data, err, inl, store, [fields], held, layers=None)

    def op_layers(self):
        rng = self.rng
        L = rng.randint(1, 3)
        top_names = [f for f in ("w_q", "w_k", "w_v", "w_o") if rng.random() < 0.6]
        layer_names = []
        for _ in range(L):
            ln = ["x"] + [f for f in ("w_q", "w_k", "w_v") if f not in top_names or rng.random() < 0.3]
            layer_names.append(ln)
        top = self.make_fields(top_names, self.faults())
        layers = [self.make_fields(ln, self.faults()) for ln in layer_names]
        store = rng.random() < 0.3
        items = [(f, v) for (f, v, s, k, r) in top]
        items.insert(rng.randint(0, len(items)), ("layers", None))
        body_obj = collections.OrderedDict(items)
        body_obj["layers"] = [collections.OrderedDict((f, v) for (f, v, s, k, r) in lf) for lf in layers]
        body_obj["num_heads"] = H
        if store:
            body_obj["store"] = True
        body = json.dumps(body_obj)
        self.trace.append("POST /attend layers%s top[%s] %s" % (" store" if store else "", ", ".join(
            "%s=%s(%s)" % (f, k, r[7:19]) for (f, v, s, k, r) in top), " | ".join(
            ", ".join("%s=%s(%s)" % (f, k, r[7:19]) for (f, v, s, k, r) in lf) for lf in layers)))
        st, h, data = self.c.req("POST", "/attend", body, "application/json")
        held = set()
        groups = [("", top)] + [("/layers/%d" % i, lf) for i, lf in enumerate(layers)]
        err, inl = self.walk(groups, held, layers=True)
        # each layer's own fields over the top level's
        eff = []
        for lf in layers:
            mine = {f for (f, v, s, k, r) in lf}
            eff.append([t for t in top if t[0] not in mine] + list(lf))
        self.log_attend(body, groups, True, store, eff)
        self.finish_attend(st, data, err, inl, store, eff, held, layers=(top, layers))

    def log_attend(self, body, groups, layers, store, eff):
        def apply(m):
            held = set()
            err, _inl = self.walk(groups, held, layers=layers, model=m)
            if err is None and store:
                self.do_store(eff, held, model=m)
        self.log.append(("POST", "/attend", body, "application/json", apply))

    def finish_attend(self, st, data, err, inl, store, fields_by_layer, held, layers):
        if err is not None:
            code, ptr = self.error_of(data)
            self.expect("attend error %s at %s" % err, st == 422 and code == err[0] and
                        (ptr == err[1] or (ptr or "").startswith(err[1] + "/")),
                        "got %s %s %s" % (st, code, ptr))
            COUNTS["attend_error_" + err[0]] += 1
            return
        if layers is None:
            inline_obj = as_body(inl[0])
        else:
            inline_obj = collections.OrderedDict(inl[0])
            inline_obj["layers"] = [collections.OrderedDict(g) for g in inl[1:]]
        inline_obj["num_heads"] = H
        ist, idata = self.inline_answer(json.dumps(inline_obj))
        if not self.expect("the inline request succeeds", ist == 200, "%s %s" % (ist, idata[:300])):
            return
        if not self.expect("attend with refs 200", st == 200, "%s %s" % (st, data[:300])):
            return
        COUNTS["attend_ok"] += 1
        if any("." in f for fl in fields_by_layer for (f, v, sh, k, r) in fl):
            COUNTS["attend_ok_nested"] += 1
        self.expect("answer with refs byte-identical to inline", canon_answer(data) == canon_answer(idata),
                    "%s\n vs %s" % (data[:200], idata[:200]))
        if store:
            named = self.do_store(fields_by_layer, held)
            js = json.loads(data)
            if layers is None:
                got = [js["meta"].get("refs")]
            else:
                got = [l["meta"].get("refs") for l in js["layers"]]
                self.expect("layers: the top-level meta names no refs", "refs" not in js["meta"], str(js["meta"]))
            self.expect("store: true meta.refs", got == named, "got %s want %s" % (got, named))
            COUNTS["attend_store"] += 1
        else:
            self.expect("no meta.refs without store", b'"refs"' not in data)

    # -- shrinking a disagreement -------------------------------------------
    def replay_differs(self, ops):
        """Whether ops, on a new server, leave it holding other refs than
        the model says."""
        srv = Server(self.cap)
        c = Client(srv.port)
        m = Model(self.cap)
        for (meth, path, body, ct, fn) in ops:
            c.req(meth, path, body, ct)
            fn(m)
        held = {r for r in self.pool.all_refs() if c.req("HEAD", "/tensors/" + r)[0] == 200}
        srv.stop()
        return held != set(m.lru)

    def shrink(self):
        ops = list(self.log)
        if not self.replay_differs(ops):
            print("shrink: the replay agrees with the model; not shrunk", flush=True)
            return
        n = 2
        while len(ops) >= 2:
            chunk = max(1, len(ops) // n)
            for i in range(0, len(ops), chunk):
                cand = ops[:i] + ops[i + chunk:]
                if self.replay_differs(cand):
                    ops = cand
                    n = max(n - 1, 2)
                    break
            else:
                if chunk == 1:
                    break
                n = min(len(ops), 2 * n)
        print("shrink: %d operations leave the server holding other refs than the model:" % len(ops))
        m = Model(self.cap)
        for (meth, path, body, ct, fn) in ops:
            fn(m)
            b = body if isinstance(body, str) else ("<%d bytes>" % len(body) if body else "")
            print("   %s %s %s" % (meth, path[:60], b[:3000]))
            print("      model after (oldest first): %s" % [r[7:19] for r in m.lru])

    # -- the run --------------------------------------------------------------
    def run(self, nops):
        ops = [(self.op_upload, 30), (self.op_get, 20), (self.op_attend, 35), (self.op_layers, 15)]
        total = sum(w for _f, w in ops)
        for i in range(nops):
            u = self.rng.uniform(0, total)
            for f, w in ops:
                if u < w:
                    break
                u -= w
            f()
            COUNTS["ops"] += 1
            self.check_state("op %d" % i)
            if not self.ok:
                if ARGS.shrink:
                    self.shrink()
                break
            if len(self.trace) > 40:
                del self.trace[:20]
        # every ref the model holds is held, every other one is not
        for r in self.pool.all_refs():
            st, _, _ = self.c.req("HEAD", "/tensors/" + r)
            self.model.lookup(r)
            if st != 200 and r in self.model.lru or st == 200 and r not in self.model.lru:
                fail("cap %d: final sweep: HEAD %s is %d, model %s" % (self.cap, r[7:19], st, r in self.model.lru))
        self.check_state("the final sweep")
        self.server.stop()


# ---------------------------------------------------------------- concurrency
def concurrent(seed):
    cap = ARGS.conc_cap
    srv = Server(cap)
    rng0 = random.Random(seed)
    pool = Pool(rng0, cap)
    seen = set()
    seen_lock = threading.Lock()
    errors = []
    inline = {}
    inline_lock = threading.Lock()
    stats = collections.Counter()

    def err(msg):
        with seen_lock:
            errors.append(msg)

    def worker(k):
        rng = random.Random(seed * 1000 + k)
        c = Client(srv.port)
        refs = pool.all_refs()
        roles = [r for rs in pool.by_role.values() for r in rs]
        for _ in range(ARGS.conc_ops):
            u = rng.random()
            try:
                if u < 0.35:
                    # now and then a blob, which may take the whole store
                    r = rng.choice(pool.blobs if rng.random() < 0.03 else roles)
                    a = pool.arr[r]
                    shape = pool.canon[r]
                    form = rng.choice(["object", "array", "octet"])
                    if form == "object":
                        st, h, data = c.req("POST", "/tensors", json.dumps(tensor_obj(a, shape)), "application/json")
                    elif form == "array":
                        st, h, data = c.req("POST", "/tensors", json.dumps(nested(a, shape)), "application/json")
                    else:
                        st, h, data = c.req("POST", "/tensors?shape=" + ",".join(map(str, shape)),
                                            np.asarray(a, "<f4").tobytes(), "application/octet-stream")
                    with seen_lock:
                        seen.add(r)
                    if st not in (200, 201):
                        err("upload %s: %s %s" % (r[7:19], st, data[:200]))
                    else:
                        js = json.loads(data)
                        if js["ref"] != r or js["bytes"] != 4 * a.size:
                            err("upload answer %s" % js)
                    stats["upload %d" % st] += 1
                elif u < 0.55:
                    r = rng.choice(refs)
                    method = rng.choice(["GET", "HEAD"])
                    st, h, data = c.req(method, "/tensors/" + r)
                    if st == 200 and method == "GET":
                        g = json.loads(data)
                        if base64.b64decode(g["data"]) != np.asarray(pool.arr[r], "<f4").tobytes():
                            err("GET %s: other values" % r[7:19])
                    elif st not in (200, 404):
                        err("%s %s: %s" % (method, r[7:19], st))
                    stats["%s %d" % (method, st)] += 1
                else:
                    names = ["x", "w_q", "w_k", "w_v"] + [f for f in ("w_o", "b_q", "memory") if rng.random() < 0.3]
                    body, inl = collections.OrderedDict(), collections.OrderedDict()
                    used = []
                    for f in names:
                        r = rng.choice(pool.by_role[FIELD_ROLE[f]])
                        shape = rng.choice(ROLES[FIELD_ROLE[f]])
                        inl[f] = nested(pool.arr[r], shape)
                        body[f] = {"ref": r, "shape": list(shape)} if rng.random() < 0.7 else inl[f]
                        used.append(r)
                    body["num_heads"] = inl["num_heads"] = H
                    store = rng.random() < 0.3
                    if store:
                        body["store"] = True
                    st, h, data = c.req("POST", "/attend", json.dumps(body), "application/json")
                    ib = json.dumps(inl)
                    with inline_lock:
                        want = inline.get(ib)
                    if want is None:
                        ist, _, want = c.req("POST", "/attend", ib, "application/json")
                        if ist != 200:
                            err("inline %s %s" % (ist, want[:200]))
                        with inline_lock:
                            inline[ib] = want
                    if store:
                        with seen_lock:
                            seen.update(used)
                    if st == 200:
                        if canon_answer(data) != canon_answer(want):
                            err("attend with refs differs from inline")
                    elif st == 422:
                        if json.loads(data)["error"]["code"] != "unknown_ref":
                            err("attend 422 %s" % data[:200])
                    else:
                        err("attend %s %s" % (st, data[:200]))
                    stats["attend %d" % st] += 1
                if st >= 500:
                    err("5xx: %s" % st)
            except Exception as e:  # a dropped connection is a failure too
                err("exception %r" % e)
                c = Client(srv.port)

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(ARGS.threads)]
    t0 = time.time()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    dt = time.time() - t0
    c = Client(srv.port)
    m = c.metrics()
    n200, held_bytes = 0, 0
    for r in sorted(seen):
        st, _, _ = c.req("HEAD", "/tensors/" + r)
        if st == 200:
            n200 += 1
            held_bytes += 4 * pool.arr[r].size + OVERHEAD
    m2 = c.metrics()
    for e in errors[:20]:
        fail("concurrent: " + e)
    if (m["entries"], m["bytes"]) != (n200, held_bytes) or (m2["entries"], m2["bytes"]) != (n200, held_bytes):
        fail("concurrent: metrics entries/bytes %s/%s, a HEAD of every ref seen finds %d/%d" %
             (m["entries"], m["bytes"], n200, held_bytes))
    if m["bytes"] > cap:
        fail("concurrent: %d bytes held over the bound %d" % (m["bytes"], cap))
    if m2["hits_total"] - m["hits_total"] != n200 or m2["misses_total"] - m["misses_total"] != len(seen) - n200:
        fail("concurrent: the sweep moved hits by %d and misses by %d, expected %d and %d" % (
            m2["hits_total"] - m["hits_total"], m2["misses_total"] - m["misses_total"], n200, len(seen) - n200))
    srv.stop()
    COUNTS["concurrent ops"] += ARGS.threads * ARGS.conc_ops
    print("concurrent: %d threads x %d ops in %.1f s, %s; %d refs seen, %d held at the end (%d bytes)" % (
        ARGS.threads, ARGS.conc_ops, dt, dict(sorted(stats.items())), len(seen), n200, held_bytes), flush=True)


def main():
    t0 = time.time()
    for cap in [int(c) for c in ARGS.caps.split(",") if c]:
        run = Run(ARGS.seed, cap)
        run.run(ARGS.ops)
        print("cap %d: %d ops so far, %s" % (cap, COUNTS["ops"], time.time() - t0), flush=True)
    if ARGS.threads > 0 and ARGS.conc_ops > 0:
        concurrent(ARGS.seed)
    print("store_model: seed %d, %s, %.1f s, %d failures" % (ARGS.seed, dict(sorted(COUNTS.items())), time.time() - t0, len(FAILS)))
    sys.exit(1 if FAILS else 0)


if __name__ == "__main__":
    main()
