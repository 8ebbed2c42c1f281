// store.js: the page's side of the service's tensor store. A request sent
// with `store: true` comes back with meta.refs, {field: "sha256:..."} (per
// layer in a layers request); the page remembers which inline value each
// ref stands for, and later requests carrying an identical value send
// {"ref": ...} in its place. Re-running the same weights on a new sentence
// then sends only x. The store may forget anything at any time: on a 422
// whose code is unknown_ref the caller drops what it knew and sends the
// request inline again (with store: true, so the refs come back).
//
// Values are recognised by a fingerprint of their JSON text (two 32-bit
// FNV-1a hashes and the length), not by SHA-256: crypto.subtle exists only
// in secure contexts, and the dashboard is often served over plain HTTP.

// The float-valued tensor fields of the contract (v1 and v2); boolean
// masks, positions and token lists never take refs.
export const TENSOR_FIELDS = ['x', 'memory', 'value', 'w_q', 'w_k', 'w_v', 'w_o',
  'b_q', 'b_k', 'b_v', 'b_o', 'w_qkv', 'b_qkv', 'attn_bias'];

const known = new Map(); // fingerprint -> "sha256:..."

export function fingerprint(value) {
  const s = JSON.stringify(value);
  let a = 0x811c9dc5;
  let b = 0x01000193 ^ s.length;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193);
    b = Math.imul(b ^ c, 0x5bd1e995) ^ (b >>> 15);
  }
  return `${s.length}:${(a >>> 0).toString(16)}:${(b >>> 0).toString(16)}`;
}

function is_ref(v) {
  return v !== null && typeof v === 'object' && !Array.isArray(v) && typeof v.ref === 'string';
}

function is_tensor(v) {
  return Array.isArray(v) || (v !== null && typeof v === 'object' && typeof v.data === 'string');
}

// Replaces known tensors of one object (top level or a layer) in place;
// returns the pointers replaced.
function substitute(obj, prefix, fps) {
  const done = [];
  for (const f of TENSOR_FIELDS) {
    const v = obj[f];
    if (!is_tensor(v)) continue;
    const fp = fingerprint(v);
    fps.set(`${prefix}/${f}`, fp);
    const ref = known.get(fp);
    if (ref) {
      obj[f] = { ref };
      done.push(`${prefix}/${f}`);
    }
  }
  return done;
}

// The request to send: a copy of req with store: true and every tensor the
// store is known to hold replaced by its ref. Returns { req, refs: [JSON
// pointers sent as refs], fps: Map pointer -> fingerprint of the inline
// value, for remember() }.
export function with_refs(req) {
  const out = { ...req, store: true };
  const fps = new Map();
  const refs = substitute(out, '', fps);
  if (Array.isArray(req.layers)) {
    out.layers = req.layers.map((l, i) => {
      if (l === null || typeof l !== 'object') return l;
      const c = { ...l };
      refs.push(...substitute(c, `/layers/${i}`, fps));
      return c;
    });
  }
  return { req: out, refs, fps };
}

// Records the refs of a response to a request built by with_refs().
export function remember(sent, resp) {
  const note = (refs, ptr_of) => {
    if (!refs || typeof refs !== 'object') return;
    for (const [field, ref] of Object.entries(refs)) {
      if (typeof ref !== 'string' || !ref.startsWith('sha256:')) continue;
      const fp = ptr_of(field);
      if (fp) known.set(fp, ref);
    }
  };
  const fps = sent.fps;
  note(resp?.meta?.refs, (f) => fps.get(`/${f}`));
  if (Array.isArray(resp?.layers))
    resp.layers.forEach((ans, i) => note(ans?.meta?.refs,
      (f) => fps.get(`/layers/${i}/${f}`) ?? fps.get(`/${f}`)));
}

export function forget_all() {
  known.clear();
}

export function known_count() {
  return known.size;
}

export { is_ref };
