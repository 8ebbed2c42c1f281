// generate.js: a deterministic POST /attend request from a sentence and a
// seed. The same seed and inputs always give the same request, so a map seen
// on the page can be reproduced (and compared) anywhere.

// mulberry32: a 32-bit state PRNG; tiny, fast and good enough for weights.
export function mulberry32(seed) {
  let a = seed >>> 0;
  return function next() {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// Standard normal deviates by Box-Muller; u1 is kept away from 0 for log().
export function gaussian(rand) {
  const u1 = Math.max(rand(), 1e-12);
  const u2 = rand();
  return Math.sqrt(-2 * Math.log(u1)) * Math.cos(2 * Math.PI * u2);
}

// FNV-1a of a string, so equal tokens get equal embeddings.
function hash_string(s) {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

export function tokenize(sentence) {
  return sentence.split(/\s+/).filter((t) => t.length > 0);
}

// Rounded to 5 significant digits: keeps JSON requests small and the values
// exactly representable in the text the user sees.
function round5(v) {
  return Number(v.toPrecision(5));
}

function matrix(rows, cols, fill) {
  const out = new Array(rows);
  for (let r = 0; r < rows; r++) {
    const row = new Array(cols);
    for (let c = 0; c < cols; c++) row[c] = round5(fill(r, c));
    out[r] = row;
  }
  return out;
}

// Checks the form values; returns a message or null.
export function check_params(p) {
  const ints = [['d_model', p.d_model], ['heads', p.heads],
    ['KV heads', p.kv_heads]];
  for (const [name, v] of ints)
    if (!Number.isInteger(v) || v < 1) return `${name} must be an integer >= 1`;
  if (!Number.isInteger(p.padding) || p.padding < 0)
    return 'pad tokens must be an integer >= 0';
  if (!Number.isInteger(p.repeat) || p.repeat < 1)
    return 'repeat must be an integer >= 1';
  if (!Number.isInteger(p.seed) || p.seed < 0 || p.seed > 4294967295)
    return 'seed must be an integer from 0 to 4294967295';
  if (p.heads % p.kv_heads !== 0)
    return `KV heads (${p.kv_heads}) must divide heads (${p.heads})`;
  if (p.d_model < p.heads)
    return `d_model (${p.d_model}) must be at least the number of heads (${p.heads}) so d_k >= 1`;
  if (tokenize(p.sentence).length === 0) return 'the sentence has no tokens';
  if (p.rope) {
    if (!(p.rope_theta > 0)) return 'RoPE theta must be a number > 0';
    if (Math.floor(p.d_model / p.heads) < 2) return 'RoPE needs d_k = d_model / heads of at least 2';
  }
  if (p.window_left !== null && (!Number.isInteger(p.window_left) || p.window_left < 0))
    return 'the window\'s left reach must be an integer >= 0 (empty: no window)';
  if (p.softcap !== null && !(p.softcap > 0))
    return 'softcap must be a number > 0 (empty: none)';
  if (!Number.isInteger(p.layers ?? 1) || (p.layers ?? 1) < 1 || (p.layers ?? 1) > 48)
    return 'layers must be an integer from 1 to 48';
  return null;
}

// -- size, before anything is built ---------------------------------------
//
// A large d_model makes a request of hundreds of megabytes that takes the
// tab many seconds to build; these figures let the page refuse it first.

// Bytes a number takes in a generated request. JSON: values rounded to 5
// significant digits, with a comma ("-0.012345,"): 8.1 for x, and for the
// weights 8.9 at d_model 64 rising to 9.7 at 2048 as their values (about
// 1/sqrt(d_model)) gain leading zeros, fitted to generated requests within
// 2%; a full float64 would take about 20. base64: 4 bytes of float32 in
// 16/3 characters.
const JSON_X_BYTES = 8.1;
const json_w_bytes = (d) => 8.9 + 0.155 * Math.max(0, Math.log2(d / 64));
const B64_BYTES = 16 / 3;
// {"ref": "sha256:<64 hex digits>"} and its field name.
const REF_BYTES = 90;

// The keys of the tensors the generator makes for p: x, and each layer's
// weights (w_q, w_k and w_v together). Equal keys, equal values, so a
// tensor the store holds can be recognised before it is built.
export function tensor_keys(p) {
  const x = JSON.stringify([p.seed, p.d_model, p.sentence, p.repeat, p.padding]);
  const layers = Array.from({ length: p.layers ?? 1 },
    (_, l) => JSON.stringify([p.seed, p.d_model, p.heads, p.kv_heads, l]));
  return { x, layers };
}

// The size of generate_request(p) with the options of the page, without
// building it. opts: { base64, held: Set of tensor_keys() values the store
// holds (sent as refs), rollout, return_qk }. Returns
//   { n, d, dk, layers, mats: weight matrices a layer, refs: tensors
//     counted as refs,
//     bytes: the body, x_bytes, w_bytes (all layers' weights),
//     b64_bytes: the body in base64 with nothing by ref,
//     maps: attention-map values (all layers and the rollout),
//     output: the largest layer output, qk: queries and keys returned }.
export function estimate_request(p, opts = {}) {
  const words = tokenize(p.sentence);
  const n = words.length * p.repeat + p.padding;
  const d = p.d_model;
  const h = p.heads;
  const g = p.kv_heads;
  const dk = Math.floor(d / h);
  const layers = p.layers ?? 1;
  const keys = tensor_keys(p);
  const held = opts.held ?? new Set();
  const x_count = n * d;
  const w_count = d * dk * (h + 2 * g);
  const fixed = 400 + p.repeat * words.reduce((t, w) => t + w.length + 3, 0) + p.padding * 8 +
    (p.padding > 0 ? n * 6 : 0);
  const x_inline = x_count * (opts.base64 ? B64_BYTES : JSON_X_BYTES);
  const w_inline = w_count * (opts.base64 ? B64_BYTES : json_w_bytes(d));
  const x_bytes = held.has(keys.x) ? REF_BYTES : x_inline;
  let w_bytes = 0;
  let refs = held.has(keys.x) ? 1 : 0;
  for (const k of keys.layers) {
    w_bytes += held.has(k) ? 3 * REF_BYTES : w_inline;
    refs += held.has(k) ? 3 : 0;
  }
  const maps = layers * h * n * n + (layers > 1 && opts.rollout ? n * n : 0);
  return {
    n, d, dk, layers, mats: 3, refs,
    bytes: Math.round(fixed + x_bytes + w_bytes),
    x_bytes: Math.round(x_bytes),
    w_bytes: Math.round(w_bytes),
    b64_bytes: Math.round(fixed + (x_count + layers * w_count) * B64_BYTES),
    maps,
    output: n * h * dk,
    qk: opts.return_qk ? n * (h + g) * dk : 0,
  };
}

// The weights of the last request built, by tensor_keys() layer key:
// running the same weights on a new sentence then neither draws them again
// (1.4 s at d_model 1280) nor, as they are the same arrays, hashes them
// again for refs (store.js remembers fingerprints by array). Nothing
// changes a built request's tensors. Only the last request's are kept, so
// the cache holds no more than that request already does.
let weight_cache = new Map();

// Layer l's weights for p, drawn from the seed or taken from the cache;
// kept, with the key, in next (the cache after this request).
function layer_weights(p, l, key, next) {
  const w = weight_cache.get(key) ?? draw_weights(p, l);
  next.set(key, w);
  return w;
}

// Layer 0's weights come from the seed alone (as before layers existed),
// layer l's from the seed and l.
function draw_weights(p, l) {
  const d = p.d_model;
  const h = p.heads;
  const g = p.kv_heads;
  const dk = Math.floor(d / h);
  const rand = mulberry32((p.seed ^ 0x9e3779b9 ^ Math.imul(l, 0x85ebca6b)) >>> 0);
  const sd = 1 / Math.sqrt(d);
  const gains = [];
  for (let i = 0; i < h; i++) gains.push(0.6 + 3 * rand());
  const w_q = matrix(d, h * dk, (_, c) => gaussian(rand) * sd *
    gains[Math.floor(c / dk)]);
  const w_k = matrix(d, g * dk, () => gaussian(rand) * sd);
  const w_v = matrix(d, g * dk, () => gaussian(rand) * sd);
  return { w_q, w_k, w_v };
}

// Builds the request object. Shapes: x [n][d_model], w_q [d_model][h*d_k],
// w_k and w_v [d_model][g*d_k], with d_k = floor(d_model / h).
//
// Embeddings are a per-word random vector plus a sinusoidal position code,
// so repeated words resemble each other and position matters. Each query
// head gets its own gain, so some heads come out broad and others focused:
// with unit-variance x and N(0, 1/d_model) weights the scaled scores have a
// standard deviation of about the head's gain.
export function generate_request(p) {
  const words = [];
  for (let r = 0; r < p.repeat; r++) words.push(...tokenize(p.sentence));
  const tokens = words.concat(new Array(p.padding).fill('[PAD]'));
  const n = tokens.length;
  const d = p.d_model;
  const h = p.heads;
  const g = p.kv_heads;
  const dk = Math.floor(d / h);

  const embedding = new Map();
  for (const t of new Set(tokens.map((w) => w.toLowerCase()))) {
    const rand = mulberry32(hash_string(t) ^ p.seed);
    const v = new Float64Array(d);
    for (let c = 0; c < d; c++) v[c] = gaussian(rand);
    embedding.set(t, v);
  }
  const x = matrix(n, d, (i, c) => {
    const e = embedding.get(tokens[i].toLowerCase())[c];
    const freq = Math.pow(10000, -2 * Math.floor(c / 2) / d);
    const pos = c % 2 === 0 ? Math.sin(i * freq) : Math.cos(i * freq);
    return e + 0.7 * pos;
  });

  const keys = tensor_keys(p).layers;
  const next = new Map();
  const weights = (l) => layer_weights(p, l, keys[l], next);
  const req = {
    x,
    num_heads: h,
    num_kv_heads: g,
    mask: p.mask,
    tokens,
    return_weights: 'per_head',
  };
  const layers = p.layers ?? 1;
  if (layers > 1) req.layers = Array.from({ length: layers }, (_, l) => weights(l));
  else Object.assign(req, weights(0));
  if (p.padding > 0)
    req.key_padding_mask = tokens.map((_, i) => i >= n - p.padding);
  // The rules of model families (contract v2). x and the weights stay the
  // same, so one sentence can be compared with and without each rule.
  if (p.rope) {
    req.rope = { theta: p.rope_theta };
    if (dk % 2 === 1) req.rope.dim = dk - 1;
  }
  if (p.alibi) req.alibi = true;
  if (p.window_left !== null) req.window = { left: p.window_left };
  if (p.softcap !== null) req.softcap = p.softcap;
  weight_cache = next;
  return req;
}

// to_tensor()'s answers by array: cached weights are encoded once, and as
// the same tensor objects their fingerprints are not computed again.
const tensors = new WeakMap();

// Little-endian float32 bytes of a nested numeric array, as a contract
// tensor object {dtype, shape, data}.
export function to_tensor(nested) {
  let t = tensors.get(nested);
  if (!t) {
    t = encode_tensor(nested);
    tensors.set(nested, t);
  }
  return t;
}

function encode_tensor(nested) {
  const shape = [];
  for (let a = nested; Array.isArray(a); a = a[0]) shape.push(a.length);
  const flat = nested.flat(shape.length - 1);
  const bytes = new Uint8Array(flat.length * 4);
  const view = new DataView(bytes.buffer);
  for (let i = 0; i < flat.length; i++) view.setFloat32(i * 4, flat[i], true);
  let bin = '';
  const chunk = 0x8000;
  for (let i = 0; i < bytes.length; i += chunk)
    bin += String.fromCharCode.apply(null, bytes.subarray(i, i + chunk));
  return { dtype: 'float32', shape, data: btoa(bin) };
}

// The request with its matrices as base64 tensors and base64 responses.
export function as_base64(req) {
  const out = { ...req, encoding: 'base64' };
  const conv = (o) => {
    const c = { ...o };
    for (const k of ['x', 'w_q', 'w_k', 'w_v']) if (Array.isArray(c[k])) c[k] = to_tensor(c[k]);
    return c;
  };
  Object.assign(out, conv(req));
  if (Array.isArray(req.layers)) out.layers = req.layers.map(conv);
  return out;
}
