// stub.mjs: a contract-shaped stand-in for POST /attend, computed in node,
// for testing the dashboard's drawing independently of the service. It
// covers what the dashboard's generator and the view tests send: 2-D x,
// in_out 2-D weights, heads and KV heads, mask, key_padding_mask, window,
// softcap, scale, layers and rollout, return_qk, value_norms, a few
// analysis figures per head, base64
// encoding, and a tensor store with refs (real SHA-256 refs) that can be
// told to forget. It is not a second implementation of the service: no
// batches, memory, RoPE or ALiBi. start_silent is a server that takes
// POST /attend and never answers.

import crypto from 'node:crypto';
import http from 'node:http';

function f32_bytes(flat) {
  const buf = Buffer.alloc(flat.length * 4);
  flat.forEach((v, i) => buf.writeFloatLE(v, i * 4));
  return buf;
}

function shape_of(a) {
  const s = [];
  for (let x = a; Array.isArray(x); x = x[0]) s.push(x.length);
  return s;
}

function tensor(nested) {
  const shape = shape_of(nested);
  return { dtype: 'float32', shape, data: f32_bytes(nested.flat(shape.length - 1)).toString('base64') };
}

function untensor(t) {
  const buf = Buffer.from(t.data, 'base64');
  const flat = Array.from({ length: buf.length / 4 }, (_, i) => buf.readFloatLE(i * 4));
  const build = (dims, off) => (dims.length === 1 ? flat.slice(off, off + dims[0])
    : Array.from({ length: dims[0] }, (_, i) => build(dims.slice(1), off + i * dims.slice(1).reduce((a, b) => a * b, 1))));
  return build(t.shape, 0);
}

const FLOAT_FIELDS = ['x', 'w_q', 'w_k', 'w_v', 'w_o', 'b_q', 'b_k', 'b_v', 'b_o'];

export function ref_of(nested) {
  const shape = shape_of(nested);
  return `sha256:${crypto.createHash('sha256').update(f32_bytes(nested.flat(shape.length - 1))).digest('hex')}`;
}

const matmul = (a, b) => a.map((row) => b[0].map((_, c) => row.reduce((s, v, k) => s + v * b[k][c], 0)));

// One layer's answer (v1 shape plus the v2 extras); fields already
// resolved to nested arrays. A batched x ([B][n][d]) is answered element
// by element, the results stacked with the batch axis first.
function one(f) {
  if (Array.isArray(f.x?.[0]?.[0])) {
    const parts = f.x.map((xb, b) => one_element({ ...f, x: xb, tokens: f.tokens?.[b],
      key_padding_mask: Array.isArray(f.key_padding_mask?.[0]) ? f.key_padding_mask[b] : f.key_padding_mask }));
    const out = { ...parts[0], meta: { ...parts[0].meta, batch: parts.length } };
    for (const k of ['output', 'attention', 'q', 'k', 'value_norms']) if (parts[0][k]) out[k] = parts.map((p) => p[k]);
    if (f.tokens) out.tokens = f.tokens;
    return out;
  }
  return one_element(f);
}

function one_element(f) {
  const x = f.x;
  const n = x.length;
  const h = f.num_heads ?? 1;
  const g = f.num_kv_heads ?? h;
  const Q = matmul(x, f.w_q);
  const K = matmul(x, f.w_k);
  const V = matmul(x, f.w_v);
  const dk = Q[0].length / h;
  const dv = V[0].length / g;
  const scale = f.scale ?? 1 / Math.sqrt(dk);
  const att = [];
  const qs = [];
  const ks = [];
  const vn = [];
  for (let j = 0; j < g; j++) ks.push(K.map((r) => r.slice(j * dk, (j + 1) * dk)));
  for (let i = 0; i < h; i++) {
    const j = Math.floor(i / (h / g));
    const q = Q.map((r) => r.slice(i * dk, (i + 1) * dk));
    qs.push(q);
    vn.push(V.map((r) => Math.hypot(...r.slice(j * dv, (j + 1) * dv))));
    att.push(q.map((qa, a) => {
      const s = ks[j].map((kb, b) => {
        let v = scale * qa.reduce((t, u, c) => t + u * kb[c], 0);
        if (f.softcap) v = f.softcap * Math.tanh(v / f.softcap);
        const hide = (f.mask === 'causal' && b > a) || f.key_padding_mask?.[b] === true ||
          (f.window?.left !== undefined && b < a - f.window.left) ||
          (f.window?.right !== undefined && b > a + f.window.right);
        return hide ? -Infinity : v;
      });
      const mx = Math.max(...s);
      if (mx === -Infinity) return s.map(() => 0);
      const e = s.map((v) => Math.exp(v - mx));
      const sum = e.reduce((p, v) => p + v, 0);
      return e.map((v) => Math.fround(v / sum));
    }));
  }
  const heads_out = att.map((A, i) => {
    const j = Math.floor(i / (h / g));
    return A.map((row) => V[0].slice(j * dv, (j + 1) * dv).map((_, c) =>
      row.reduce((s, w, b) => s + w * V[b][j * dv + c], 0)));
  });
  const output = Array.from({ length: n }, (_, a) => heads_out.flatMap((o) => o[a]));
  const out = { output, attention: att };
  if (f.tokens) out.tokens = f.tokens;
  out.meta = { batch: 1, n, m: n, d_model: x[0].length, d_mem: x[0].length, num_heads: h, num_kv_heads: g,
    d_k: dk, d_v: dv, d_out: output[0].length, mask: f.mask ?? 'none', params: 0, flops: 0, elapsed_ms: 0.1 };
  if (f.return_qk) {
    out.q = qs;
    out.k = ks;
  }
  if (f.value_norms) out.value_norms = vn;
  if (f.analysis) out.analysis = { heads: att.map(figures) };
  return out;
}

// A head's figures as the analysis names them (a subset: entropy,
// normalised entropy, confidence and a pattern from the two).
function figures(A) {
  let ent = 0;
  let conf = 0;
  for (const row of A) {
    ent -= row.reduce((s, w) => s + (w > 0 ? w * Math.log(w) : 0), 0);
    conf += Math.max(...row);
  }
  ent /= A.length;
  conf /= A.length;
  const norm = A[0].length > 1 ? ent / Math.log(A[0].length) : 0;
  return { pattern: norm >= 0.75 ? 'broad' : 'focused', entropy: ent, entropy_normalized: norm, confidence: conf };
}

function rollout(layers) {
  if (layers[0].meta.batch > 1 || Array.isArray(layers[0].attention[0][0][0]))
    return layers[0].attention.map((_, b) => rollout(layers.map((l) => ({ attention: l.attention[b], meta: { batch: 1 } }))));
  const n = layers[0].attention[0].length;
  let R = null;
  for (const ans of layers) {
    const A = ans.attention;
    const hat = Array.from({ length: n }, (_, a) => {
      const row = Array.from({ length: n }, (_, b) => A.reduce((s, Ah) => s + Ah[a][b], 0) / A.length + (a === b ? 1 : 0));
      const sum = row.reduce((p, v) => p + v, 0);
      return row.map((v) => v / sum);
    });
    R = R ? matmul(hat, R) : hat;
  }
  return R.map((row) => row.map(Math.fround));
}

// The stub: { handle(body) -> { status, body }, forget(ref), bodies,
// elapsed_ms }.
export function make_stub() {
  const store = new Map();
  const bodies = [];
  const error = (status, code, message, field) => ({ status, body: JSON.stringify({ error: { code, message, field } }) });

  function resolve(obj, prefix) {
    const out = { ...obj };
    for (const k of FLOAT_FIELDS) {
      const v = obj[k];
      if (v && typeof v === 'object' && !Array.isArray(v)) {
        if (typeof v.ref === 'string') {
          if (!store.has(v.ref)) return { err: error(422, 'unknown_ref', `the store holds no ${v.ref}`, `${prefix}/${k}`) };
          out[k] = store.get(v.ref);
        } else if (typeof v.data === 'string') {
          out[k] = untensor(v);
        }
      }
    }
    return { out };
  }

  function keep(fields, original) {
    const refs = {};
    for (const k of FLOAT_FIELDS) {
      if (!Array.isArray(fields[k])) continue;
      const r = ref_of(fields[k]);
      store.set(r, fields[k]);
      if (original[k] !== undefined) refs[k] = r;
    }
    return refs;
  }

  function encode(ans, b64) {
    if (!b64) return ans;
    const out = { ...ans };
    for (const k of ['output', 'attention', 'q', 'k', 'value_norms']) if (out[k]) out[k] = tensor(out[k]);
    return out;
  }

  function handle(text) {
    bodies.push(text);
    let req;
    try {
      req = JSON.parse(text);
    } catch (e) {
      return error(400, 'invalid_json', e.message, '');
    }
    const b64 = req.encoding === 'base64';
    const top = resolve(req, '');
    if (top.err) return top.err;
    if (!Array.isArray(req.layers)) {
      const ans = one(top.out);
      if (stub.elapsed_ms !== undefined) ans.meta.elapsed_ms = stub.elapsed_ms;
      if (req.store) ans.meta.refs = keep(top.out, req);
      return { status: 200, body: JSON.stringify(encode(ans, b64)) };
    }
    const answers = [];
    for (let l = 0; l < req.layers.length; l++) {
      const lr = resolve(req.layers[l], `/layers/${l}`);
      if (lr.err) return lr.err;
      const fields = { ...top.out, ...lr.out };
      delete fields.layers;
      const ans = one(fields);
      if (req.store) ans.meta.refs = keep(fields, { ...req, ...req.layers[l] });
      answers.push(ans);
    }
    const out = { layers: answers.map((a) => encode(a, b64)),
      meta: { layers: answers.length, params: 0, flops: 0, elapsed_ms: 0.3 } };
    if (req.rollout) out.rollout = b64 ? tensor(rollout(answers)) : rollout(answers);
    return { status: 200, body: JSON.stringify(out) };
  }

  // elapsed_ms: meta.elapsed_ms of the answers to come (default 0.1).
  const stub = { handle, bodies, forget: (r) => store.delete(r), store, one, rollout, elapsed_ms: undefined };
  return stub;
}

// Installs the stub on a playwright page for POST .../attend.
export async function route_stub(page, stub) {
  await page.route('**/attend', async (route) => {
    const r = stub.handle(route.request().postData() ?? '');
    await route.fulfill({ status: r.status, contentType: 'application/json', body: r.body });
  });
}

// A server that takes POST /attend and never answers, as a stopped attnd
// or a hung proxy does, and passes every other request to upstream (a
// real attnd: the page, its modules, /limits). Resolves to { base, posts:
// () => POSTs taken, close() }.
export function start_silent(upstream) {
  const waiting = new Set();
  let posts = 0;
  const server = http.createServer(async (req, res) => {
    if (req.method === 'POST' && req.url.endsWith('/attend')) {
      posts++;
      waiting.add(res);
      req.resume();
      return;
    }
    const r = await fetch(upstream + req.url, { method: req.method });
    res.writeHead(r.status, { 'Content-Type': r.headers.get('content-type') ?? 'application/octet-stream' });
    res.end(Buffer.from(await r.arrayBuffer()));
  });
  const close = () => new Promise((resolve) => {
    for (const res of waiting) res.destroy();
    server.closeAllConnections();
    server.close(resolve);
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () =>
    resolve({ base: `http://127.0.0.1:${server.address().port}`, posts: () => posts, close })));
}
