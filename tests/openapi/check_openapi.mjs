// check_openapi.mjs: GET /openapi.json is a valid OpenAPI 3 document and
// describes what attnd answers. The document is validated with
// @seriousme/openapi-schema-validator; then real requests go to a running
// attnd (every path and method it routes, v1 and v2 answers, base64, the
// tensor store, layers with rollout, top_k and analysis, and every error
// status it can be made to give), and each answer must have its status,
// its content type and its headers (Allow, Retry-After, Location, CORS) in
// the document, and its JSON body must validate, with ajv (JSON Schema
// draft 4, the dialect of OpenAPI 3.0), against the schema given for that
// status. Every request body that attnd computes must validate against
// AttendRequest; of the bad bodies of tests/cases/invalid, the ones the
// schema can tell (an unknown field, a wrong type, a bad enum value) must
// fail it, and the count of the others (shapes, dimensions) is printed.
//
// Usage: ATTND_BIN=build/attnd node tests/openapi/check_openapi.mjs
// (ATTND_PORT=P uses ports P and P+1 instead of free ones.)

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import Ajv from 'ajv-draft-04';
import add_formats from 'ajv-formats';
import { Validator } from '@seriousme/openapi-schema-validator';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, '..', '..');
const BIN = path.resolve(process.env.ATTND_BIN || path.join(ROOT, 'build', 'attnd'));

let checks = 0;
const failures = [];
function check(ok, what, detail = '') {
  checks++;
  if (!ok) {
    failures.push(what);
    console.log(`FAIL ${what}${detail ? `: ${String(detail).slice(0, 600)}` : ''}`);
  }
  return ok;
}

// -- attnd processes ---------------------------------------------------------

function free_port() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

const children = [];
process.once('exit', () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
});

async function start(port_offset, args = []) {
  const port = process.env.ATTND_PORT ? Number(process.env.ATTND_PORT) + port_offset
    : await free_port();
  const child = spawn(BIN, ['--port', String(port), '--host', '127.0.0.1', '--quiet',
    '--threads', '1', ...args], { stdio: ['ignore', 'ignore', 'inherit'] });
  children.push(child);
  const base = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 200; i++) {
    if (child.exitCode !== null) throw new Error(`attnd exited with ${child.exitCode}`);
    try {
      if ((await fetch(`${base}/healthz`)).ok) return { child, base, port };
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error('attnd did not answer /healthz within 10 s');
}

// One request on a socket of its own, for what fetch will not send (a bad
// request line, both framings, headers that stop half way). Resolves with
// { status, headers (lower-case names), body } or status 0 when the
// connection closes without an answer.
function raw(port, text, linger_ms = 0) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    let data = '';
    s.on('data', (d) => { data += d.toString('latin1'); });
    s.on('error', () => {});
    s.on('close', () => {
      const m = /^HTTP\/1\.[01] (\d{3})[^\r]*\r\n([\s\S]*?)\r\n\r\n([\s\S]*)$/.exec(data);
      if (!m) return resolve({ status: 0, headers: {}, body: data });
      const headers = {};
      for (const line of m[2].split('\r\n')) {
        const i = line.indexOf(':');
        headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
      }
      resolve({ status: Number(m[1]), headers, body: m[3] });
    });
    s.write(text);
    setTimeout(() => s.end(), linger_ms);
  });
}

// -- the document --------------------------------------------------------------

let doc;
let ajv;
let ajv_closed;

// The document with every object schema that lists its properties closed
// (additionalProperties false unless it says otherwise): answers are held to
// it, so a field attnd sends that the document does not name fails, while
// the document itself leaves answers open to fields added later.
function closed(node) {
  if (Array.isArray(node)) return node.map(closed);
  if (!node || typeof node !== 'object') return node;
  const out = {};
  for (const [k, v] of Object.entries(node)) out[k] = closed(v);
  if (out.properties && typeof out.properties === 'object' && !('additionalProperties' in out))
    out.additionalProperties = false;
  return out;
}

function pointer(ref) {
  let node = doc;
  for (const part of ref.replace(/^#\//, '').split('/'))
    node = node[part.replace(/~1/g, '/').replace(/~0/g, '~')];
  return node;
}

const deref = (o) => (o && o.$ref ? deref(pointer(o.$ref)) : o);
const esc = (s) => s.replace(/~/g, '~0').replace(/\//g, '~1');

const compiled = new Map();
function validator(ref, strict) {
  const key = `${strict}${ref}`;
  if (!compiled.has(key))
    compiled.set(key, (strict ? ajv_closed : ajv).compile({ $ref: `openapi.json${ref}` }));
  return compiled.get(key);
}

function schema_errors(ref, value, strict = false) {
  const v = validator(ref, strict);
  if (v(value)) return null;
  return JSON.stringify(v.errors.slice(0, 4));
}

// The path template of the document that a concrete path matches.
function template(p) {
  p = p.split('?')[0];
  if (doc.paths[p]) return p;
  for (const t of Object.keys(doc.paths)) {
    const re = new RegExp(`^${t.replace(/\{[^}]+\}/g, '[^/]+')}$`);
    if (re.test(p)) return t;
  }
  return null;
}

// Where the document describes the answer to method on path with status:
// the JSON pointer of the response object, or null. A path the document
// does not list answers components/responses/NotFound, a method its path
// does not list components/responses/MethodNotAllowed.
function response_ref(method, p, status) {
  const t = template(p);
  if (!t) return status === 404 ? '#/components/responses/NotFound' : null;
  const op = doc.paths[t][method.toLowerCase()];
  if (!op) return status === 405 ? '#/components/responses/MethodNotAllowed' : null;
  const key = op.responses[String(status)] ? String(status) : 'default';
  if (!op.responses[key]) return null;
  // What HttpError lists, and nothing else, falls to the default answer.
  if (key === 'default' && ![400, 408, 414, 431, 500, 503, 505].includes(status)) return null;
  const r = op.responses[key];
  return r.$ref || `#/paths/${esc(t)}/${method.toLowerCase()}/responses/${key}`;
}

const HEADER_CHECKED = ['allow', 'retry-after', 'location', 'access-control-allow-origin',
  'access-control-allow-methods', 'access-control-allow-headers', 'access-control-max-age'];

// Holds one real answer against the document.
function check_answer(name, method, p, ans) {
  const where = `${name}: ${method} ${p} -> ${ans.status}`;
  const ref = response_ref(method, p, ans.status);
  if (!check(ref !== null, `${where} is described`)) return;
  const resp = deref(pointer(ref));
  const documented = Object.fromEntries(Object.entries(resp.headers || {})
    .map(([k, v]) => [k.toLowerCase(), deref(v)]));
  for (const h of HEADER_CHECKED)
    if (ans.headers[h] !== undefined)
      check(documented[h] !== undefined, `${where}: header ${h} is described`);
  for (const [h, spec] of Object.entries(documented))
    if (spec.required) check(ans.headers[h] !== undefined, `${where}: header ${h} is sent`);
  if (method === 'HEAD' || ans.status === 204 || ans.body === '') {
    check(method === 'HEAD' || ans.status === 204 || !resp.content,
      `${where}: an empty body is described as such`);
    return;
  }
  const type = (ans.headers['content-type'] || '').split(';')[0].trim();
  const key = Object.keys(resp.content || {}).find((k) => k.split(';')[0].trim() === type);
  if (!check(key !== undefined, `${where}: content type ${type} is described`)) return;
  if (type !== 'application/json') return;
  let body;
  try {
    body = JSON.parse(ans.body);
  } catch (e) {
    check(false, `${where}: body is JSON`, e.message);
    return;
  }
  const errs = schema_errors(`${ref}/content/${esc(key)}/schema`, body, true);
  check(errs === null, `${where}: body validates`, errs);
  return body;
}

async function send(base, method, p, { body, type, headers = {} } = {}) {
  const h = { ...headers };
  if (type) h['Content-Type'] = type;
  const r = await fetch(base + p, { method, headers: h, body });
  const text = method === 'HEAD' ? '' : await r.text();
  const hs = {};
  r.headers.forEach((v, k) => { hs[k] = v; });
  return { status: r.status, headers: hs, body: text };
}

async function call(name, base, method, p, opts = {}, expect = undefined) {
  const ans = await send(base, method, p, opts);
  if (expect !== undefined)
    check(ans.status === expect, `${name}: ${method} ${p} answers ${expect}`,
      `${ans.status} ${ans.body.slice(0, 300)}`);
  return { ans, body: check_answer(name, method, p, ans) };
}

// POST /attend with a request object: the request must validate against
// AttendRequest when attnd computes it.
async function attend(name, base, req, expect = 200) {
  const errs = schema_errors('#/components/schemas/AttendRequest', req);
  if (expect === 200) check(errs === null, `${name}: request validates`, errs);
  const r = await call(name, base, 'POST', '/attend',
    { body: JSON.stringify(req), type: 'application/json' }, expect);
  return r.body;
}

// -- requests ------------------------------------------------------------------

const I2 = [[1, 0], [0, 1]];
const X3 = [[1, 0], [0, 1], [1, 1]];
const small = (extra = {}) => ({ x: X3, w_q: I2, w_k: I2, w_v: I2, ...extra });
const f32b64 = (vals) => Buffer.from(new Float32Array(vals).buffer).toString('base64');
const tensor = (shape, vals) => ({ dtype: 'float32', shape, data: f32b64(vals) });

function v1_requests() {
  const b = [[[1, 0], [0, 1]], [[1, 1], [0, 2]]];
  return {
    basic: small({ tokens: ['a', 'b', 'c'], mask: 'causal' }),
    mean: small({ return_weights: 'mean', memory_tokens: ['a', 'b', 'c'] }),
    none: small({ return_weights: 'none' }),
    base64: small({ encoding: 'base64', scale: 0.5 }),
    batched: { x: b, w_q: I2, w_k: I2, w_v: I2, key_padding_mask: [[false, true], [false, false]],
      tokens: [['a', 'b'], ['c', 'd']] },
    batched_mean_base64: { x: b, w_q: I2, w_k: I2, w_v: I2, return_weights: 'mean', encoding: 'base64' },
    cross: small({ memory: [[1, 2, 3], [3, 2, 1]], w_k: [[1, 0], [0, 1], [1, 1]],
      w_v: [[1, 0], [0, 1], [1, 1]], key_padding_mask: [false, true] }),
    gqa_w_o_biases: { x: X3, num_heads: 2, num_kv_heads: 1, w_q: [[1, 0], [0, 1]],
      w_k: [[1], [0]], w_v: [[0], [1]], w_o: [[1, 0], [0, 1]], b_q: [0, 1], b_k: [1], b_v: [0],
      b_o: [1, 1] },
    weights_3d: { x: X3, num_heads: 2, w_q: [[[1], [0]], [[0], [1]]], w_k: [[[1], [0]], [[0], [1]]],
      w_v: [[[1], [0]], [[0], [1]]] },
    tensor_objects: { x: tensor([3, 2], [1, 0, 0, 1, 1, 1]), w_q: tensor([2, 2], [1, 0, 0, 1]),
      w_k: I2, w_v: I2 },
    integral_floats: small({ num_heads: 1.0 }),
  };
}

function v2_requests() {
  return {
    extras_json: small({ value_norms: true, return_qk: true, positions: [3, 4, 5],
      rope: { theta: 100, dim: 2, style: 'interleaved', attention_factor: 1.5 },
      window: { left: 1 }, global_tokens: [0], softcap: 30,
      qk_norm: { q_weight: [1, 1], k_weight: [1, 1], eps: 1e-5, over: 'head' } }),
    extras_base64: small({ value_norms: true, return_qk: true, encoding: 'base64',
      alibi: { slopes: [0.5] }, attn_bias: [[0, 0, 1], [0, 1, 0], [1, 0, 0]],
      attn_mask: [[false, false, true], [false, false, false], [true, false, false]] }),
    out_in_w_qkv: { x: X3, weight_layout: 'out_in', w_qkv: [[1, 0], [0, 1], [1, 0], [0, 1], [1, 1], [0, 1]],
      b_qkv: [0, 0, 0, 0, 0, 0], qkv_order: 'per_head', alibi: true, mask: 'causal',
      key_positions: [0, 1, 2] },
    value: small({ value: [[1, 2, 3], [4, 5, 6], [7, 8, 9]], w_v: [[1, 0], [0, 1], [1, 1]] }),
    rope_inv_freq: small({ rope: { inv_freq: [0.5] } }),
    top_k_analysis: small({ top_k: 2, analysis: true }),
    top_k_mean_base64: small({ top_k: 1, return_weights: 'mean', encoding: 'base64' }),
    analysis_batched_none: { x: [X3, X3], w_q: I2, w_k: I2, w_v: I2, analysis: true,
      return_weights: 'none' },
    attn_bias_4d_shared: { x: [X3, X3], w_q: I2, w_k: I2, w_v: I2,
      attn_bias: [[[[0, 0, 0], [0, 0, 0], [0, 0, 0]]]] },
  };
}

function family_requests() {
  const dir = path.join(ROOT, 'tests', 'families', 'cases');
  const out = {};
  for (const f of fs.readdirSync(dir).filter((f) => f.endsWith('.json')).sort())
    out[`family ${f}`] = JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8')).request;
  return out;
}

// tests/cases/invalid cases that are a plain POST /attend of a body.
function invalid_cases() {
  const dir = path.join(ROOT, 'tests', 'cases', 'invalid');
  const out = [];
  for (const name of fs.readdirSync(dir).sort()) {
    const files = fs.readdirSync(path.join(dir, name));
    if (files.some((f) => ['method', 'path', 'headers', 'pad', 'chunked'].includes(f))) continue;
    const expected = fs.readFileSync(path.join(dir, name, 'expected'), 'utf8');
    const status = Number((/^status (\d+)/m.exec(expected) || [])[1]);
    if (!status) continue;
    out.push({ name, status, body: fs.readFileSync(path.join(dir, name, 'request'), 'utf8') });
  }
  return out;
}

// The keywords whose failure means the schema itself told a bad request
// from a good one (not a shape or a dimension, which JSON Schema cannot
// relate across fields).
const SCHEMA_CATCHABLE = /^(v2_unknown_field|v2_.*_unknown_key|v2_tensor_object_unknown_key|.*_string$|.*_bool$|.*_number$|mask_unknown|mask_case|encoding_unknown|return_weights_unknown|v2_weight_layout_(case|unknown)|v2_qkv_order_unknown|v2_rope_style_unknown|v2_qk_norm_over_unknown|num_heads_(zero|negative|fraction)|num_kv_heads_zero|scale_(zero|negative)|v2_softcap_(zero|negative)|v2_rope_theta_zero|v2_rope_attention_factor_negative|v2_qk_norm_eps_negative|v2_window_(left|right)_negative|v2_window_fraction|v2_positions_(negative|fraction)|v2_key_positions_negative|v2_global_token_negative|b64_(dtype_float16|dtype_float64|missing_data|missing_dtype|missing_shape|shape_negative|shape_fraction|shape_string|zero_dim|empty_shape)|x_elem_(bool|null|object|string)|x_null|top_level_(array|number)|missing_(x|w_q|w_k|w_v)|empty_object|kpm_(numbers|string|elem_null)|v2_attn_mask_numbers|v2_attn_bias_bool|w_q_elem_string)$/;

// -- the run -------------------------------------------------------------------

async function main() {
  const srv = await start(0);
  const base = srv.base;

  // 1. The document.
  const text = await (await fetch(`${base}/openapi.json`)).text();
  check(text === fs.readFileSync(path.join(ROOT, 'service', 'attend', 'openapi.json'), 'utf8'),
    'GET /openapi.json serves service/attend/openapi.json');
  doc = JSON.parse(text);
  const res = await new Validator().validate(structuredClone(doc));
  check(res.valid, `the document is valid OpenAPI ${doc.openapi}`, JSON.stringify(res.errors));
  // What the schema of the format cannot say: each operation of a path
  // with {name} in it declares that parameter (at the path or the
  // operation), as tools that generate clients require.
  for (const [p, item] of Object.entries(doc.paths))
    for (const name of [...p.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]))
      for (const [m, op] of Object.entries(item)) {
        if (m === 'parameters') continue;
        const declared = [...(item.parameters || []), ...(op.parameters || [])]
          .map(deref).some((x) => x.in === 'path' && x.name === name && x.required === true);
        check(declared, `${m.toUpperCase()} ${p} declares its path parameter ${name}`);
      }
  ajv = new Ajv({ strict: false, allErrors: true, validateSchema: false });
  add_formats(ajv);
  ajv.addSchema(doc, 'openapi.json');
  ajv_closed = new Ajv({ strict: false, allErrors: true, validateSchema: false });
  add_formats(ajv_closed);
  ajv_closed.addSchema(closed(doc), 'openapi.json');

  // Every layer field is a request field: one list, held here.
  const req_props = Object.keys(doc.components.schemas.AttendRequest.properties);
  const layer_props = Object.keys(doc.components.schemas.AttendLayer?.properties || {});
  check(JSON.stringify(layer_props) === JSON.stringify(req_props
    .filter((k) => !['layers', 'rollout', 'store'].includes(k))),
    'AttendLayer has every AttendRequest field but layers, rollout and store', layer_props.join());

  // 2. Every path and method attnd routes is described: OPTIONS names them.
  const ref0 = `sha256:${'0'.repeat(64)}`;
  const paths = ['/attend', '/healthz', '/livez', '/readyz', '/metrics', '/openapi.json',
    '/tensors', `/tensors/${ref0}`, '/'];
  for (const p of paths) {
    const { ans } = await call('options', base, 'OPTIONS', p, {}, 204);
    const allow = (ans.headers.allow || '').split(/,\s*/).filter(Boolean);
    for (const m of allow)
      check(doc.paths[template(p)]?.[m.toLowerCase()] !== undefined,
        `${m} ${template(p)} is in the document`);
    for (const m of Object.keys(doc.paths[template(p)] || {}))
      if (['get', 'head', 'post', 'put', 'delete', 'options', 'patch'].includes(m))
        check(allow.includes(m.toUpperCase()), `${m} ${template(p)} is allowed by attnd`);
    await call('wrong method', base, 'DELETE', p, {}, 405);
    await call('cors', base, 'OPTIONS', p,
      { headers: { Origin: 'http://example.test', 'Access-Control-Request-Method': 'POST' } }, 204);
  }
  for (const p of ['/healthz', '/livez', '/readyz', '/metrics', '/openapi.json', '/']) {
    await call('get', base, 'GET', p, { headers: { Origin: 'http://example.test' } }, 200);
    await call('head', base, 'HEAD', p, {}, 200);
  }
  await call('unknown path', base, 'GET', '/nope', {}, 404);

  // 3. /attend answers, v1 and v2.
  for (const [name, req] of Object.entries(v1_requests())) await attend(`v1 ${name}`, base, req);
  for (const [name, req] of Object.entries(v2_requests())) await attend(`v2 ${name}`, base, req);
  for (const [name, req] of Object.entries(family_requests())) await attend(name, base, req);
  // A null is an absent optional field; the document marks no field
  // nullable (OpenAPI 3.0 has no null type for the oneOf fields), so the
  // request validates once its nulls are dropped.
  const nulls = small({ mask: null, scale: null, tokens: null, rope: null });
  const no_nulls = Object.fromEntries(Object.entries(nulls).filter(([, v]) => v !== null));
  const nerr = schema_errors('#/components/schemas/AttendRequest', no_nulls);
  check(nerr === null, 'nulls dropped: request validates', nerr);
  await call('nulls are absent fields', base, 'POST', '/attend',
    { body: JSON.stringify(nulls), type: 'application/json' }, 200);
  // In a layer a null has a meaning (the top-level default does not apply
  // there), and the document says so: such a request validates as it is.
  const layer_null = { ...small({ rope: { theta: 10000 } }), layers: [{ rope: null }, {}] };
  const lerr = schema_errors('#/components/schemas/AttendRequest', layer_null);
  check(lerr === null, 'a null in a layer validates', lerr);
  await call('a null in a layer', base, 'POST', '/attend',
    { body: JSON.stringify(layer_null), type: 'application/json' }, 200);

  // 4. The tensor store and refs.
  const t22 = tensor([2, 2], [1, 0, 0, 1]);
  const up = await call('store json tensor', base, 'POST', '/tensors',
    { body: JSON.stringify({ ...t22, data: f32b64([2, 0, 0, 2]) }), type: 'application/json' }, 201);
  check(up.ans.headers.location === `/tensors/${up.body?.ref}`, 'POST /tensors 201: Location');
  await call('store again', base, 'POST', '/tensors',
    { body: JSON.stringify({ ...t22, data: f32b64([2, 0, 0, 2]) }), type: 'application/json' }, 200);
  const arr = await call('store json array', base, 'POST', '/tensors',
    { body: '[[1,2],[3,4],[5,6]]', type: 'application/json' }, 201);
  const oct = await call('store octet-stream', base, 'POST', '/tensors?shape=2,3',
    { body: Buffer.from(new Float32Array([1, 2, 3, 4, 5, 7]).buffer), type: 'application/octet-stream' }, 201);
  await call('store octet-stream bad length', base, 'POST', '/tensors?shape=2,2',
    { body: Buffer.alloc(12), type: 'application/octet-stream' }, 422);
  await call('store octet-stream no shape', base, 'POST', '/tensors',
    { body: Buffer.alloc(12), type: 'application/octet-stream' }, 422);
  await call('store a ref', base, 'POST', '/tensors',
    { body: JSON.stringify({ ref: up.body?.ref }), type: 'application/json' }, 422);
  await call('store bad json', base, 'POST', '/tensors', { body: '[1,', type: 'application/json' }, 400);
  await call('store wrong type', base, 'POST', '/tensors', { body: '[1]', type: 'text/plain' }, 415);
  await call('store get', base, 'GET', `/tensors/${up.body?.ref}`, {}, 200);
  await call('store head', base, 'HEAD', `/tensors/${up.body?.ref}`, {}, 200);
  await call('store get unknown', base, 'GET', `/tensors/${ref0}`, {}, 404);
  await call('store head unknown', base, 'HEAD', `/tensors/${ref0}`, {}, 404);
  await call('store get malformed', base, 'GET', '/tensors/sha256:abc', {}, 404);
  const w = { ref: up.body?.ref };
  const vec = async (vals) => (await call('store vector', base, 'POST', '/tensors',
    { body: JSON.stringify(vals), type: 'application/json' })).body?.ref;
  const v2 = { ref: await vec([0.5, 0.25]) };
  const v1 = { ref: await vec([0.5]) };
  const bias = { ref: await vec([0, 1, 0, 1, 0, 1, 0, 1, 0]), shape: [3, 3] };
  await attend('refs in every float field', base, {
    x: { ref: arr.body?.ref }, memory: { ref: oct.body?.ref, shape: [3, 2] },
    value: { ref: oct.body?.ref, shape: [3, 2] },
    w_q: w, w_k: { ref: up.body?.ref, shape: [2, 2] }, w_v: w, w_o: w,
    b_q: v2, b_k: v2, b_v: v2, b_o: v2, attn_bias: bias,
    rope: { inv_freq: v1 }, alibi: { slopes: v1 },
    qk_norm: { q_weight: v2, k_weight: v2 },
  });
  await attend('refs for w_qkv and b_qkv', base, { x: { ref: arr.body?.ref },
    w_qkv: { ref: arr.body?.ref, shape: [2, 3] }, b_qkv: { ref: await vec([0, 0.5, 1]) } });
  await attend('unknown ref', base, small({ w_k: { ref: ref0 } }), 422);
  await attend('ref with another count', base, small({ w_k: { ref: up.body?.ref, shape: [3] } }), 422);
  const stored = await attend('store: true', base, small({ store: true }));
  await attend('stored refs used', base, { x: { ref: stored?.meta?.refs?.x }, w_q: w, w_k: w, w_v: w });

  // 5. Layers.
  const layers = { w_q: I2, w_k: I2, w_v: I2, return_weights: 'mean', rollout: true,
    layers: [{ x: [[1, 0], [0, 1]] }, { x: [[0, 1], [1, 1]], w_q: { ref: up.body?.ref } }] };
  await attend('layers rollout', base, layers);
  await attend('layers rollout base64 store', base, { ...layers, encoding: 'base64', store: true });
  await attend('layers json', base, { ...layers, rollout: false, return_weights: 'per_head',
    layers: [{ x: X3, tokens: ['a', 'b', 'c'], top_k: 1 }] });
  await attend('layers error inside', base, { ...layers, layers: [{ x: X3 }, { x: [[1]] }] }, 422);
  await attend('rollout over cross-attention', base, { ...layers,
    layers: [{ x: X3, memory: [[1, 0]] }] }, 422);

  // 6. Errors: the bad-input table, and what fetch can send.
  let catchable = 0;
  let caught = 0;
  let uncaught = 0;
  for (const c of invalid_cases()) {
    let req;
    try {
      req = JSON.parse(c.body);
    } catch {
      req = undefined;
    }
    await call(`invalid ${c.name}`, base, 'POST', '/attend',
      { body: c.body, type: 'application/json' }, c.status);
    if (req === undefined || c.status !== 422) continue;
    const errs = schema_errors('#/components/schemas/AttendRequest', req);
    if (SCHEMA_CATCHABLE.test(c.name)) {
      catchable++;
      check(errs !== null, `invalid ${c.name}: the schema refuses it too`);
    } else if (errs !== null) caught++;
    else uncaught++;
  }
  console.log(`bad requests (422): ${catchable} the schema must refuse, ${caught} more it refuses, `
    + `${uncaught} only attnd can tell (shapes, dimensions)`);
  await call('not json', base, 'POST', '/attend', { body: '{"x":', type: 'application/json' }, 400);
  await call('NaN', base, 'POST', '/attend', { body: '{"x":[[NaN]]}', type: 'application/json' }, 400);
  await call('text/plain', base, 'POST', '/attend', { body: '{}', type: 'text/plain' }, 415);
  await call('no type', base, 'POST', '/attend', { body: '{}' }, 415);
  await call('charset', base, 'POST', '/attend',
    { body: JSON.stringify(small()), type: 'application/json; charset=utf-8' }, 200);
  await call('+json', base, 'POST', '/attend',
    { body: JSON.stringify(small()), type: 'application/vnd.attnd+json' }, 200);
  const port = srv.port;
  // attnd answers these and closes without reading the rest, which fetch
  // reports as a failure: a socket of their own.
  const long_line = await raw(port, `GET /healthz?${'a'.repeat(9000)} HTTP/1.1\r\nHost: x\r\n\r\n`);
  check(long_line.status === 414, 'a request line over 8 KiB answers 414', long_line.status);
  check_answer('long request line', 'GET', '/healthz', long_line);
  const big = await raw(port, `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(17000)}\r\n\r\n`);
  check(big.status === 431, 'headers over 16 KiB answer 431', big.status);
  check_answer('large headers', 'GET', '/healthz', big);
  const v505 = await raw(port, 'GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n');
  check(v505.status === 505, 'HTTP/2.0 request line answers 505', v505.status);
  check_answer('bad version', 'GET', '/healthz', v505);
  const both = await raw(port, 'POST /attend HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n'
    + 'Transfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n0\r\n\r\n');
  check(both.status === 400, 'Transfer-Encoding with Content-Length answers 400', both.status);
  check_answer('two framings', 'POST', '/attend', both);

  // 7. Limits, capacity, draining, a store that is off: servers of their own.
  const lim = await start(1, ['--max-body-bytes', '40000', '--max-buffered-bytes', '20000',
    '--header-timeout', '1', '--drain-delay', '3']);
  await call('body over --max-body-bytes', lim.base, 'POST', '/attend',
    { body: ' '.repeat(50000), type: 'application/json' }, 413);
  // a body that never fits the budget is 413; one that does not fit while
  // another upload holds part of it, 503
  await call('body over --max-buffered-bytes', lim.base, 'POST', '/attend',
    { body: ' '.repeat(30000), type: 'application/json' }, 413);
  await call('store body over --max-buffered-bytes', lim.base, 'POST', '/tensors',
    { body: ' '.repeat(30000), type: 'application/json' }, 413);
  const holder = net.connect(lim.port, '127.0.0.1');
  await new Promise((ok) => holder.once('connect', ok));
  holder.write('POST /attend HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n'
    + 'Content-Length: 15000\r\n\r\n' + ' '.repeat(100));
  await new Promise((ok) => setTimeout(ok, 200));
  await call('body over what --max-buffered-bytes leaves', lim.base, 'POST', '/attend',
    { body: ' '.repeat(15000), type: 'application/json' }, 503);
  await call('store body over what --max-buffered-bytes leaves', lim.base, 'POST', '/tensors',
    { body: ' '.repeat(15000), type: 'application/json' }, 503);
  holder.destroy();
  await call('store body over --max-body-bytes', lim.base, 'POST', '/tensors',
    { body: ' '.repeat(50000), type: 'application/json' }, 413);
  const off = await start(2, ['--tensor-store-bytes', '0']);
  await call('store off', off.base, 'POST', '/tensors', { body: '[1]', type: 'application/json' }, 404);
  await call('store off get', off.base, 'GET', `/tensors/${ref0}`, {}, 404);
  const refs = await attend('store off, store: true', off.base, small({ store: true }));
  check(JSON.stringify(refs?.meta?.refs) === '{}', 'store off: meta.refs is {}');
  off.child.kill('SIGTERM');
  const slow = await raw(lim.port, 'GET /healthz HTTP/1.1\r\nHost: x\r\n', 2500);
  check(slow.status === 408, 'headers that stop half way answer 408', slow.status);
  check_answer('slow headers', 'GET', '/healthz', slow);
  lim.child.kill('SIGTERM');
  await new Promise((r) => setTimeout(r, 300));
  await call('draining', lim.base, 'GET', '/readyz', {}, 503);
  await call('draining, still alive', lim.base, 'GET', '/healthz', {}, 200);
  lim.child.kill('SIGKILL');

  srv.child.kill('SIGTERM');
  console.log(`${checks} checks, ${failures.length} failed`);
  process.exit(failures.length ? 1 : 0);
}

main().catch((e) => {
  console.log(`FAIL ${e.stack}`);
  process.exit(1);
});
