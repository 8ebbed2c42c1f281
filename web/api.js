// api.js: POST /attend from the page, the extras its Options add to a
// request, and the response's attention maps as flat typed arrays whatever
// their wire form (nested JSON or base64 tensor).

// The extras the Options ask for (want: { analysis, return_qk,
// value_norms, rollout }, booleans), added to a request object where the
// request does not say otherwise; the rollout only to a layers request
// without memory. Returns req, changed.
export function add_options(req, want) {
  if (want.analysis && req.analysis == null) req.analysis = true;
  if (want.return_qk && req.return_qk == null) req.return_qk = true;
  if (want.value_norms && req.value_norms == null) req.value_norms = true;
  if (Array.isArray(req.layers) && want.rollout && req.rollout == null &&
      req.memory == null && !req.layers.some((l) => l && l.memory != null))
    req.rollout = true;
  return req;
}

// Sends body (a string, or a Blob of its UTF-8 bytes; sent as is) to
// ./attend on this page's origin.
// Resolves to { ok: true, status, text, json, ms } or
// { ok: false, error: { status, code, message, field } }; never throws, so
// the caller always has something to show. signal (an AbortSignal, or
// none) stops the request, sending or reading; its reason, { code,
// message }, is then the error.
export async function post_attend(body, signal = null) {
  const t0 = performance.now();
  const stopped = () => ({ ok: false, error: { status: 0, field: '', ...signal.reason } });
  let res;
  try {
    res = await fetch('attend', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body,
      signal,
    });
  } catch (e) {
    if (signal?.aborted) return stopped();
    return { ok: false, error: { status: 0, code: 'network_error',
      message: `the request did not reach the service (${e.message})`, field: '' } };
  }
  let text;
  try {
    text = await res.text();
  } catch (e) {
    if (signal?.aborted) return stopped();
    return { ok: false, error: { status: res.status, code: 'network_error',
      message: `the response was cut off (${e.message})`, field: '' } };
  }
  const ms = performance.now() - t0;
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {
    // Not JSON: a proxy's error page or a broken server; show what came.
  }
  if (!res.ok) {
    const err = json && typeof json === 'object' && json.error;
    if (err && typeof err === 'object')
      return { ok: false, error: { status: res.status,
        code: String(err.code ?? 'unknown'), message: String(err.message ?? ''),
        field: err.field == null ? '' : String(err.field) } };
    return { ok: false, error: { status: res.status, code: `http_${res.status}`,
      message: text.slice(0, 300) || res.statusText, field: '' } };
  }
  if (json === null || typeof json !== 'object')
    return { ok: false, error: { status: res.status, code: 'bad_response',
      message: 'the service answered 200 with a body that is not a JSON object', field: '' } };
  return { ok: true, status: res.status, text, json, ms };
}

// Decodes a {dtype: "float32", shape, data} tensor to { shape, values }.
export function decode_tensor(t) {
  if (t.dtype !== 'float32' || !Array.isArray(t.shape) || typeof t.data !== 'string')
    throw new Error('tensor object without float32 dtype, shape and data');
  const bin = atob(t.data);
  const count = t.shape.reduce((a, b) => a * b, 1);
  if (bin.length !== count * 4)
    throw new Error(`tensor of shape [${t.shape}] carries ${bin.length} bytes, not ${count * 4}`);
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  const view = new DataView(bytes.buffer);
  const values = new Float32Array(count);
  for (let i = 0; i < count; i++) values[i] = view.getFloat32(i * 4, true);
  return { shape: t.shape, values };
}

// The shape of a nested array (first element along each axis).
function nested_shape(a) {
  const shape = [];
  for (let x = a; Array.isArray(x); x = x[0]) shape.push(x.length);
  return shape;
}

// Flattens a nested numeric array row-major into a Float64Array, keeping
// the service's values exactly (no float32 rounding on the page).
function flatten(a, shape) {
  const count = shape.reduce((p, q) => p * q, 1);
  const out = new Float64Array(count);
  let k = 0;
  const walk = (x, depth) => {
    if (depth === shape.length - 1) {
      for (let i = 0; i < x.length; i++) out[k++] = Number(x[i]);
    } else {
      for (let i = 0; i < x.length; i++) walk(x[i], depth + 1);
    }
  };
  walk(a, 0);
  if (k !== count) throw new Error('ragged attention array in the response');
  return out;
}

// The response's attention as { batch, heads, n, m, values, batched } with
// values B*h*n*m row-major. The page always asks for per-head maps, so rank
// 4 is [B][h][n][m] and rank 3 is [h][n][m]; a rank-2 map (a mean) is shown
// as one head.
// The largest dense map set the page expands top-k rows into (values).
const MAX_DENSE = 32 * 1024 * 1024;

// The attention of a response as { batch, heads, n, m, values, batched,
// top_k, kept } with values dense [B][h][n][m]. A request with `top_k`
// gets rows of [index, weight] pairs ([..][n][k][2]); they are expanded
// into dense maps (zeros elsewhere) using meta.m, so they draw like any
// other map; top_k is then k and kept (dense like values) is 1 where a
// weight was returned. Otherwise top_k is 0 and kept null.
export function attention_of(resp, top_k = false) {
  const a = resp.attention;
  if (a == null) return null;
  let shape, values;
  if (Array.isArray(a)) {
    shape = nested_shape(a);
    values = flatten(a, shape);
  } else if (typeof a === 'object') {
    ({ shape, values } = decode_tensor(a));
  } else {
    throw new Error('attention is neither an array nor a tensor object');
  }
  let kept = null;
  let k = 0;
  if (top_k) ({ shape, values, kept, k } = expand_top_k(shape, values, resp.meta));
  if (shape.length < 2 || shape.length > 4)
    throw new Error(`attention of rank ${shape.length}`);
  const batched = shape.length === 4;
  const batch = batched ? shape[0] : 1;
  const heads = shape.length >= 3 ? shape[shape.length - 3] : 1;
  const n = shape[shape.length - 2];
  const m = shape[shape.length - 1];
  return { batch, heads, n, m, values, batched, top_k: k, kept };
}

function expand_top_k(shape, pairs, meta) {
  const m = meta?.m;
  if (shape.length < 3 || shape[shape.length - 1] !== 2 || !Number.isInteger(m))
    throw new Error('top_k attention is not [..][n][k][2] pairs with meta.m');
  const k = shape[shape.length - 2];
  const rows = pairs.length / (2 * k);
  if (rows * m > MAX_DENSE)
    throw new Error(`top_k maps of ${rows} rows x ${m} keys are too large to draw here`);
  const dense = new Float32Array(rows * m);
  const kept = new Uint8Array(rows * m);
  for (let r = 0; r < rows; r++)
    for (let q = 0; q < k; q++) {
      const at = 2 * (r * k + q), idx = pairs[at];
      if (idx >= 0 && idx < m) {
        dense[r * m + idx] = pairs[at + 1];
        kept[r * m + idx] = 1;
      }
    }
  return { shape: [...shape.slice(0, -2), m], values: dense, kept, k };
}

// Any numeric field of a response (nested arrays or a base64 tensor
// object) as { shape, values } with values row-major; null when absent.
export function tensor_of(field) {
  if (field == null) return null;
  if (Array.isArray(field)) {
    const shape = nested_shape(field);
    return { shape, values: flatten(field, shape) };
  }
  if (typeof field === 'object') return decode_tensor(field);
  throw new Error('a numeric field is neither an array nor a tensor object');
}

// The slice of t at the leading indices idx (e.g. [b, head]) as
// { shape: rest, values }, or null when t is missing or too small.
export function slice_of(t, idx) {
  if (!t || idx.length > t.shape.length) return null;
  let off = 0;
  for (let a = 0; a < idx.length; a++) {
    if (idx[a] < 0 || idx[a] >= t.shape[a]) return null;
    off = off * t.shape[a] + idx[a];
  }
  const rest = t.shape.slice(idx.length);
  const size = rest.reduce((p, q) => p * q, 1);
  return { shape: rest, values: t.values.subarray(off * size, (off + 1) * size) };
}

// Labels for batch element b of a tokens field ([n] or [B][n]), or indices.
export function labels_of(field, b, count) {
  let t = field;
  if (Array.isArray(t) && Array.isArray(t[0])) t = t[b];
  if (Array.isArray(t) && t.length === count) return t.map(String);
  return Array.from({ length: count }, (_, i) => String(i));
}
