"""_client.py: attnd.Client, its result and its error.

One Client talks to one attnd URL over urllib (stdlib only). It sends
float tensors as base64 tensor objects, asks for base64 answers, and keeps
a record of the tensors the server's store holds, so that weights sent
before go by ref (``{"ref": "sha256:..."}``) instead of by value.

Refs never change an answer: a ref the server does not hold (a restart,
another replica, a store that forgot it) comes back as 422 ``unknown_ref``,
and the client then forgets every ref and sends the same request inline.
A server without a store (v1, or the store turned off: ``POST /tensors``
answers 404) is remembered and gets everything inline.

A request with fields newer than v1 goes only to a server that refuses
fields it does not know (v2 does, v1 ignores them): the client asks once,
and refuses to send rather than let a v1 server compute another attention.
"""
from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set

import numpy as np
from numpy.typing import NDArray

from . import _wire

# A tensor that is not a weight (w_*, b_*) goes by ref only above this many
# values, and only from its second use: the first use of a large memory or
# attn_bias sends it inline, since most are never sent again.
REF_MIN_VALUES = 4096
# Hashes of large non-weights sent once, kept at most: one per distinct
# tensor a long-lived client sends, so it needs a bound.
MAX_SEEN = 4096
# After this many unknown_ref answers in a row (each followed by a new
# upload), the refs are not worth their round trips (replicas that do not
# share a store, a store too small for the model): everything goes inline.
MAX_REF_FAILURES = 3
# The v1 request fields (and the v1 server's extensions analysis, top_k).
# A v1 server ignores any other field, so a request that uses one is sent
# only to a server that refuses what it does not know (see _check_strict).
V1_FIELDS = frozenset({
    "x", "memory", "num_heads", "num_kv_heads", "w_q", "w_k", "w_v", "w_o",
    "b_q", "b_k", "b_v", "b_o", "mask", "key_padding_mask", "scale",
    "return_weights", "encoding", "tokens", "memory_tokens", "analysis",
    "top_k",
})
# The field of the probe request: no server knows it.
PROBE_FIELD = "attnd_client_probe"


class Error(Exception):
    """An error answer of attnd: HTTP ``status`` and the contract's error
    object (``code``, ``message`` and ``field``, a JSON Pointer into the
    request, or None). Status 0 with code ``unsupported_field`` is the
    client's own refusal, before sending: the request uses a field the
    server would ignore (a v1 server), which would compute a different
    attention in silence. Network failures are not Errors: they raise
    urllib's ``URLError`` / ``OSError`` as they come."""

    def __init__(self, status: int, code: str, message: str,
                 field: Optional[str] = None,
                 headers: Optional[Mapping[str, str]] = None) -> None:
        super().__init__("%s%s: %s%s" % (
            "%d " % status if status else "", code, message,
            " (at %s)" % field if field else ""))
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.headers = dict(headers or {})

    @classmethod
    def from_http(cls, status: int, body: bytes,
                  headers: Optional[Mapping[str, str]] = None) -> "Error":
        """The Error of an HTTP answer; a body that is not the contract's
        error object keeps its text as the message, code "http_<status>"."""
        try:
            err = json.loads(body.decode("utf-8"))["error"]
            return cls(status, str(err.get("code", "http_%d" % status)),
                       str(err.get("message", "")), err.get("field"),
                       headers)
        except (ValueError, KeyError, TypeError, AttributeError):
            return cls(status, "http_%d" % status,
                       body.decode("utf-8", "replace")[:500], None, headers)


@dataclass
class Result:
    """One /attend answer with its tensors as float32 NumPy arrays.

    ``output``: ``[n][d_out]`` or ``[B][n][d_out]``; ``attention``: per head
    ``[h][n][m]`` (``[B]`` first for a batch), ``[n][m]`` for "mean", None
    for "none"; ``value_norms`` ``[h][m]``, ``q`` ``[h][n][d_k]``, ``k``
    ``[g][m][d_k]`` when asked for; ``rollout`` ``[n][n]`` and ``layers`` (one
    Result per layer) for a layers request; ``meta`` as the server sent it;
    ``extra`` every other field of the answer (``tokens``, ``analysis``,
    ...) unchanged.
    """
    output: Optional[NDArray[Any]] = None
    attention: Optional[NDArray[Any]] = None
    value_norms: Optional[NDArray[Any]] = None
    q: Optional[NDArray[Any]] = None
    k: Optional[NDArray[Any]] = None
    rollout: Optional[NDArray[Any]] = None
    layers: Optional[List["Result"]] = None
    meta: Dict[str, Any] = field(default_factory=dict)
    extra: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Result":
        r = cls(meta=dict(doc.get("meta") or {}))
        for name, value in doc.items():
            if name in _wire.RESPONSE_TENSORS:
                setattr(r, name, _wire.decode_value(value))
            elif name == "layers" and isinstance(value, list):
                r.layers = [cls.from_json(v) for v in value]
            elif name != "meta":
                r.extra[name] = value
        return r

    @property
    def tokens(self) -> Optional[List[Any]]:
        """The query labels echoed back, when the request had ``tokens``."""
        return self.extra.get("tokens")


class Client:
    """A client of one attnd service.

    ``url``: the service's base URL (``http://localhost:8080``).
    ``timeout``: seconds for each HTTP exchange.
    ``refs``: send weights by ref to the server's tensor store (True, the
    default) or always inline (False).

    ``bytes_sent`` counts the request bodies sent (uploads included);
    ``stats`` counts uploads, refs sent, ``ref_retries`` (requests sent
    again by ref, the weights uploaded again, after ``unknown_ref``) and
    ``inline_retries`` (sent again inline, when that failed too or refs
    are given up). A Client may be shared by threads.
    """

    def __init__(self, url: str = "http://localhost:8080",
                 timeout: float = 60.0, refs: bool = True) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.use_refs = refs
        self.bytes_sent = 0
        self.stats: Dict[str, int] = {"uploads": 0, "refs_sent": 0,
                                      "ref_retries": 0,
                                      "inline_retries": 0}
        self._lock = threading.Lock()
        self._stored: Set[str] = set()   # refs the server is believed to hold
        self._seen: Set[str] = set()     # refs of large non-weights sent once
        self._store_ok = True       # False: no store (404) or gave up
        self._ref_failures = 0
        self._strict: Optional[bool] = None  # refuses unknown fields?

    # -- public calls ------------------------------------------------------

    def attend(self, **fields: Any) -> Result:
        """POST /attend with these fields (the contract's names: ``x``,
        ``w_q``, ``num_heads``, ``mask``, ...). Tensor fields take NumPy
        arrays, torch tensors or nested lists. ``encoding`` defaults to
        "base64". Raises Error for an error answer."""
        if "layers" in fields:
            layers = fields.pop("layers")
            return self.layers(layers, **fields)
        fields.setdefault("encoding", "base64")
        return self._post_attend(fields, None)

    def layers(self, layers: Sequence[Mapping[str, Any]],
               rollout: bool = False, **defaults: Any) -> Result:
        """POST /attend with ``layers``: one entry per layer (each usually
        its own ``x`` and weights), ``defaults`` the fields every layer
        shares. The Result has ``layers`` (one Result each) and, with
        ``rollout=True``, ``rollout``."""
        defaults.setdefault("encoding", "base64")
        if rollout:
            defaults["rollout"] = True
        return self._post_attend(defaults, list(layers))

    def mha(self, module: Any, query: Any, key: Any, value: Any,
            key_padding_mask: Any = None, need_weights: bool = True,
            attn_mask: Any = None, average_attn_weights: bool = True,
            is_causal: bool = False) -> Any:
        """``module(query, key, value, ...)`` for a
        ``torch.nn.MultiheadAttention``, computed by attnd: the same
        arguments, and ``(attn_output, attn_weights)`` as torch tensors of
        the shapes the module returns (weights None when ``need_weights`` is
        False). Raises ValueError for what the service cannot express
        (``add_bias_kv``, ``add_zero_attn``, dropout in training mode). See
        attnd.mha_request for the translation."""
        from ._mha import mha_request
        req, post = mha_request(
            module, query, key, value, key_padding_mask=key_padding_mask,
            need_weights=need_weights, attn_mask=attn_mask,
            average_attn_weights=average_attn_weights, is_causal=is_causal)
        return post(self.attend(**req))

    def request_json(self, layers: Optional[Sequence[Mapping[str, Any]]]
                     = None, **fields: Any) -> Dict[str, Any]:
        """The request body these arguments make, every tensor inline (no
        refs), as a dict: ``json.dumps`` of it is a self-contained request,
        e.g. a file for the dashboard's "load a request"."""
        fields.setdefault("encoding", "base64")
        body = self._encode(fields, "", False)
        if layers is not None:
            body["layers"] = [self._encode(dict(l), "/layers/%d" % i, False)
                              for i, l in enumerate(layers)]
        return body

    def upload(self, tensor: Any) -> str:
        """POST /tensors: stores one float tensor and returns its ref
        (``"sha256:<hex>"``). Raises Error when the server has no store."""
        a = _wire.as_float32(tensor)
        ref = _wire.sha256_ref(a)
        doc = self._request_json(
            "POST", "/tensors?shape=" + ",".join(str(d) for d in a.shape),
            a.tobytes(), "application/octet-stream")
        if doc.get("ref") != ref:
            raise Error(200, "bad_ref", "the server named the upload %r, "
                        "expected %r" % (doc.get("ref"), ref))
        with self._lock:
            self._stored.add(ref)
            self.stats["uploads"] += 1
        return ref

    def forget_refs(self) -> None:
        """Forget which tensors the server holds: every weight is uploaded
        again on its next use."""
        with self._lock:
            self._stored.clear()
            self._seen.clear()

    def healthz(self) -> bool:
        """True when GET /healthz answers 200."""
        try:
            self._request("GET", "/healthz")
            return True
        except (Error, OSError):
            return False

    def metrics(self) -> Dict[str, float]:
        """GET /metrics as {sample name with labels: value}."""
        text = self._request("GET", "/metrics")[1].decode("utf-8")
        out: Dict[str, float] = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            name, _, val = line.rpartition(" ")
            try:
                out[name] = float(val)
            except ValueError:
                pass
        return out

    # -- the request path --------------------------------------------------

    def _post_attend(self, top: Dict[str, Any],
                     layers: Optional[List[Mapping[str, Any]]]) -> Result:
        names = {k for k, v in top.items() if v is not None}
        for lay in layers or ():
            names.update(k for k, v in lay.items() if v is not None)
        if layers is not None:
            names.add("layers")
        newer = sorted(names - V1_FIELDS)
        if newer:
            self._check_strict(newer)
        use_refs = self.use_refs and self._store_ok
        body = self._body(top, layers, use_refs)
        try:
            doc = self._post_body(body)
        except Error as e:
            if e.code != "unknown_ref":
                raise
            doc = self._resend(top, layers)
        else:
            # refs that held from an earlier call: the store keeps them
            if use_refs and b'"ref"' in body:
                with self._lock:
                    self._ref_failures = 0
        return Result.from_json(doc)

    def _post_body(self, body: bytes) -> Dict[str, Any]:
        return self._request_json("POST", "/attend", body,
                                  "application/json")

    def _resend(self, top: Dict[str, Any],
                layers: Optional[List[Mapping[str, Any]]]) -> Dict[str, Any]:
        """After unknown_ref (the store lost a tensor: a restart, an
        eviction): uploads the weights again and sends the request by ref,
        as on a first call, so that the next call finds them too; if the
        store loses them again at once (replicas that do not share one, a
        store too small), the very same request inline. The answer is the
        same."""
        self._refs_lost()
        if self.use_refs and self._store_ok:
            with self._lock:
                self.stats["ref_retries"] += 1
            try:
                return self._post_body(self._body(top, layers, True))
            except Error as e:
                if e.code != "unknown_ref":
                    raise
                self._refs_lost()
        with self._lock:
            self.stats["inline_retries"] += 1
        return self._post_body(self._body(top, layers, False))

    def _refs_lost(self) -> None:
        """After unknown_ref: forgets what the store was believed to hold;
        after MAX_REF_FAILURES losses with no call in between whose refs
        held, stops using refs."""
        with self._lock:
            self._stored.clear()
            self._seen.clear()
            self._ref_failures += 1
            if self._ref_failures >= MAX_REF_FAILURES:
                self._store_ok = False

    def _check_strict(self, newer: List[str]) -> None:
        """Raises Error(0, "unsupported_field") when the server ignores
        fields it does not know, as v1 servers do: it would answer a request
        with ``newer`` fields as if they were absent. Asked once per Client
        with a one-token request that carries an unknown field: a v2 server
        answers 422 naming that field."""
        if self._strict is None:
            probe = {"x": [[1.0]], "w_q": [[1.0]], "w_k": [[1.0]],
                     "w_v": [[1.0]], "return_weights": "none",
                     PROBE_FIELD: True}
            try:
                self._request("POST", "/attend", json.dumps(probe).encode(),
                              "application/json")
                strict = False
            except Error as e:
                if e.status != 422:
                    return  # cannot tell; the request itself will say
                strict = True
            self._strict = strict
        if not self._strict:
            raise Error(0, "unsupported_field",
                        "the server at %s ignores request fields it does "
                        "not know (a v1 attnd), so it would compute this "
                        "request without %s: refused before sending"
                        % (self.url, ", ".join(newer)),
                        "/layers" if "layers" in newer else "/" + newer[0])

    def _body(self, top: Dict[str, Any],
              layers: Optional[List[Mapping[str, Any]]],
              use_refs: bool) -> bytes:
        doc = self._encode(top, "", use_refs)
        if layers is not None:
            doc["layers"] = [self._encode(dict(l), "/layers/%d" % i,
                                          use_refs)
                             for i, l in enumerate(layers)]
        return json.dumps(doc, separators=(",", ":"),
                          allow_nan=False).encode("utf-8")

    def _encode(self, fields: Mapping[str, Any], where: str,
                use_refs: bool) -> Dict[str, Any]:
        """The JSON object of one request (or one layer): float tensors as
        tensor objects or refs, masks and positions as arrays, the rest
        plain. None values are left out (an absent optional field)."""
        out: Dict[str, Any] = {}
        for name, value in fields.items():
            if value is None:
                continue
            if name in _wire.BOOL_FIELDS:
                out[name] = _wire.bool_list(value, where + "/" + name)
            elif name in _wire.INT_FIELDS:
                out[name] = _wire.int_list(value, where + "/" + name)
            elif name in _wire.FLOAT_FIELDS or _is_float_array(value):
                out[name] = self._float_field(name, value, use_refs)
            else:
                out[name] = _wire.plain(value)
        return out

    def _float_field(self, name: str, value: Any, use_refs: bool) -> Any:
        if _wire.is_tensor_object(value) or (
                isinstance(value, dict) and "ref" in value):
            return value  # already in wire form
        try:
            a = _wire.as_float32(value)
        except _wire.ComplexValuesError as e:
            raise ValueError("%s: %s" % (name, e)) from None
        except (ValueError, TypeError):
            return _wire.plain(value)  # ragged: the server names the spot
        weight = name.startswith(("w_", "b_"))
        if use_refs and (weight or (name != "x" and a.size > REF_MIN_VALUES)):
            ref = self._ref_for(a, weight)
            if ref is not None:
                with self._lock:
                    self.stats["refs_sent"] += 1
                return {"ref": ref, "shape": [int(d) for d in a.shape]}
        return _wire.tensor_object(a)

    def _ref_for(self, a: NDArray[Any], weight: bool) -> Optional[str]:
        """The ref to send for a, uploading it first when the server does
        not hold it yet; None to send it inline (no store, or a large
        non-weight seen for the first time)."""
        ref = _wire.sha256_ref(a)
        with self._lock:
            if ref in self._stored:
                return ref
            if not self._store_ok:
                return None
            if not weight and ref not in self._seen:
                if len(self._seen) >= MAX_SEEN:
                    self._seen.clear()  # a bound, not a cache policy
                self._seen.add(ref)
                return None
        try:
            self.upload(a)
        except Error as e:
            if e.status in (404, 405):
                with self._lock:
                    self._store_ok = False  # no store on this server
            return None  # too large, busy, ...: inline this time
        return ref

    # -- HTTP --------------------------------------------------------------

    def _request(self, method: str, path: str, body: Optional[bytes] = None,
                 content_type: Optional[str] = None) -> Any:
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        req = urllib.request.Request(self.url + path, data=body,
                                     method=method, headers=headers)
        if body is not None:
            with self._lock:
                self.bytes_sent += len(body)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            data = e.read()
            raise Error.from_http(e.code, data, dict(e.headers or {})) \
                from None

    def _request_json(self, method: str, path: str, body: bytes,
                      content_type: str) -> Dict[str, Any]:
        _, data = self._request(method, path, body, content_type)
        doc: Dict[str, Any] = json.loads(data.decode("utf-8"))
        return doc


def _is_float_array(value: Any) -> bool:
    """True for an array or tensor of floats given under a field name this
    client does not know (a newer server's): it goes as a tensor object. A
    0-d one is a number (``scale=torch.tensor(0.5)``, ``softcap``), which
    plain() writes as a JSON number."""
    if isinstance(value, np.ndarray):
        return bool(value.dtype.kind == "f" and value.ndim > 0)
    if _wire.is_torch(value):
        return bool(value.is_floating_point() and value.dim() > 0)
    return False


