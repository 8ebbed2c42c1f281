"""store_proxy.py: the contract's tensor store, in front of a real attnd.

A stand-in that lets the client's ref logic be tested whatever the server
behind it implements: POST /tensors keeps raw float32 uploads by their
sha256; POST /attend replaces every {"ref": ...} of the body by the tensor
object it names (422 unknown_ref with the field's pointer when it holds no
such tensor) and forwards the request to attnd; anything else is forwarded
as it is. forget() empties the store (a restart); keep = False answers
uploads without keeping them (a store that forgets at once); store=False answers 404
to /tensors (a store turned off); keep_only drops every other top-level
field of /attend bodies, as a server that ignores fields it does not know
(v1) would.
"""
import base64
import hashlib
import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class StoreProxy:
    def __init__(self, upstream: str, store: bool = True,
                 keep_only=None) -> None:
        self.upstream = upstream
        self.store = store
        self.keep_only = keep_only  # field names kept; others dropped
        self.tensors = {}   # hex -> (bytes, shape)
        self.keep = True    # False: uploads are answered, not kept
        self.hits = 0
        self.misses = 0
        self.uploads = 0
        self.attend_bodies = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, status, body, ctype="application/json"):
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _error(self, status, code, message, field=None):
                self._send(status, json.dumps({"error": {
                    "code": code, "message": message,
                    "field": field}}).encode())

            def do_GET(self):
                self._forward("GET", None)

            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                url = urllib.parse.urlsplit(self.path)
                if url.path == "/tensors":
                    return self._upload(url, body)
                if url.path == "/attend":
                    proxy.attend_bodies.append(body)
                    try:
                        doc = json.loads(body)
                        doc = proxy._resolve(doc, "")
                        if proxy.keep_only is not None:
                            doc = {k: v for k, v in doc.items()
                                   if k in proxy.keep_only}
                    except KeyError as e:
                        return self._error(422, "unknown_ref",
                                           "no such tensor", e.args[0])
                    body = json.dumps(doc).encode()
                self._forward("POST", body)

            def _upload(self, url, body):
                if not proxy.store:
                    return self._error(404, "not_found", "no such path")
                q = urllib.parse.parse_qs(url.query)
                shape = [int(v) for v in q["shape"][0].split(",")]
                hx = hashlib.sha256(body).hexdigest()
                known = hx in proxy.tensors
                if not known and proxy.keep:
                    proxy.tensors[hx] = (body, shape)
                proxy.uploads += 1
                self._send(200 if known else 201, json.dumps({
                    "ref": "sha256:" + hx,
                    "shape": proxy.tensors[hx][1] if known else shape,
                    "bytes": len(body)}).encode())

            def _forward(self, method, body):
                req = urllib.request.Request(
                    proxy.upstream + self.path, data=body, method=method,
                    headers={"Content-Type": self.headers.get(
                        "Content-Type", "application/json")})
                try:
                    with urllib.request.urlopen(req, timeout=60) as r:
                        status, data = r.status, r.read()
                except urllib.error.HTTPError as e:
                    status, data = e.code, e.read()
                self._send(status, data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       daemon=True)
        self.thread.start()

    def _resolve(self, value, where):
        if isinstance(value, dict):
            if "ref" in value:
                hx = value["ref"][len("sha256:"):]
                if hx not in self.tensors:
                    self.misses += 1
                    raise KeyError(where)
                self.hits += 1
                data, shape = self.tensors[hx]
                return {"dtype": "float32",
                        "shape": value.get("shape", shape),
                        "data": base64.b64encode(data).decode()}
            return {k: self._resolve(v, where + "/" + k)
                    for k, v in value.items()}
        if isinstance(value, list) and value and isinstance(value[0], dict):
            return [self._resolve(v, "%s/%d" % (where, i))
                    for i, v in enumerate(value)]
        return value

    def forget(self) -> None:
        self.tensors.clear()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
