// store.js: the page's side of the service's tensor store. A request sent
// with `store: true` comes back with meta.refs, {field: "sha256:..."} (per
// layer in a layers request); the page remembers which inline value each
// ref stands for, and later requests carrying an identical value send
// {"ref": ...} in its place. Re-running the same weights on a new sentence
// then sends only x. The store may forget anything at any time: on a 422
// whose code is unknown_ref the caller drops what it knew and sends the
// request inline again (with store: true, so the refs come back). A ref
// forgotten right after it was stored, by a store too small for the
// request, is sent inline from then on (unknown_ref()).
//
// Values are recognised by what the ref itself is computed from: their
// float32 values. The same numbers sent as JSON or as a base64 tensor are
// one tensor to the store, so switching the wire format keeps using refs.
// The fingerprint is the shape and two 32-bit hashes of the values' bit
// patterns, not SHA-256: crypto.subtle exists only in secure contexts, and
// the dashboard is often served over plain HTTP.
//
// What the store holds is known on the page; a generated request's tensors
// live in build_worker.js, which fingerprints them there: with_refs() takes
// the refs to use as a table (ref_table()), so it runs in either.

// The float-valued tensor fields of the contract (v1 and v2); boolean
// masks, positions and token lists never take refs.
export const TENSOR_FIELDS = ['x', 'memory', 'value', 'w_q', 'w_k', 'w_v', 'w_o',
  'b_q', 'b_k', 'b_v', 'b_o', 'w_qkv', 'b_qkv', 'attn_bias'];

const known = new Map(); // fingerprint -> "sha256:..."
// Fingerprints of the tensors the last answer named, and of those the store
// could not keep (sent inline for the rest of the session).
let fresh = new Set();
const unkept = new Set();

// The float32 bit patterns of a tensor field, nested numbers or a base64
// tensor object, as { shape, bits: Uint32Array }; null for anything else.
function float32_bits(value) {
  if (Array.isArray(value)) {
    const shape = [];
    for (let a = value; Array.isArray(a); a = a[0]) shape.push(a.length);
    // Ragged or non-numeric arrays still get bits: the service refuses
    // such a request, so nothing is remembered for them.
    const flat = value.flat(Infinity).map(Number);
    return { shape, bits: new Uint32Array(Float32Array.from(flat).buffer) };
  }
  if (value?.dtype !== 'float32' || typeof value.data !== 'string' || !Array.isArray(value.shape)) return null;
  let bin;
  try {
    bin = atob(value.data);
  } catch {
    return null;
  }
  // Little-endian words on the wire, read the same on any platform.
  const bytes = new Uint8Array(bin.length - (bin.length % 4));
  for (let i = 0; i < bytes.length; i++) bytes[i] = bin.charCodeAt(i);
  const view = new DataView(bytes.buffer);
  const bits = new Uint32Array(bytes.length / 4);
  for (let i = 0; i < bits.length; i++) bits[i] = view.getUint32(4 * i, true);
  return { shape: value.shape, bits };
}

// fingerprint()'s answers by array or tensor object. The page never
// changes a tensor it has built, and the generator hands out the same
// arrays for the same weights: running them on a new sentence hashes only
// x (hashing 4.9 million weights took 0.4 s). A pasted request is parsed
// anew each run, so its tensors are new objects, never found here.
const fingerprints = new WeakMap();

// The key of a tensor's values, or null for a value that is no float32
// tensor (never sent as a ref).
export function fingerprint(value) {
  if (value === null || typeof value !== 'object') return null;
  let fp = fingerprints.get(value);
  if (fp === undefined) {
    fp = hash_tensor(value);
    fingerprints.set(value, fp);
  }
  return fp;
}

function hash_tensor(value) {
  const t = float32_bits(value);
  if (!t) return null;
  const w = t.bits;
  let a = 0x811c9dc5;
  let b = 0x01000193 ^ w.length;
  for (let i = 0; i < w.length; i++) {
    a = Math.imul(a ^ w[i], 0x01000193);
    a ^= a >>> 13;
    b = Math.imul(b ^ w[i], 0x5bd1e995) ^ (b >>> 15);
  }
  return `${t.shape.join('x')}:${(a >>> 0).toString(16)}:${(b >>> 0).toString(16)}`;
}

function is_tensor(v) {
  return Array.isArray(v) || (v !== null && typeof v === 'object' && typeof v.data === 'string');
}

// Replaces the tensors of one object (top level or a layer) that table
// has refs for, in place; returns the pointers replaced.
function substitute(obj, prefix, fps, table) {
  const done = [];
  for (const f of TENSOR_FIELDS) {
    const v = obj[f];
    if (!is_tensor(v)) continue;
    const fp = fingerprint(v);
    if (!fp) continue;
    fps.set(`${prefix}/${f}`, fp);
    const ref = table.get(fp);
    if (ref) {
      obj[f] = { ref };
      done.push(`${prefix}/${f}`);
    }
  }
  return done;
}

// The refs a request may carry now: a Map fingerprint -> "sha256:..." of
// every tensor the store is known to hold, less those it cannot keep. A
// copy, which a worker can be sent.
export function ref_table() {
  const table = new Map();
  for (const [fp, ref] of known) if (!unkept.has(fp)) table.set(fp, ref);
  return table;
}

// The request to send: a copy of req with store: true and every tensor
// table (from ref_table()) has a ref for replaced by it; with table null
// (the store not used) req itself, nothing fingerprinted. Returns { req,
// refs: [JSON pointers sent as refs], fps: Map pointer -> fingerprint of
// the inline value, for remember() }.
export function with_refs(req, table) {
  if (!table) return { req, refs: [], fps: new Map() };
  const out = { ...req, store: true };
  const fps = new Map();
  const refs = substitute(out, '', fps, table);
  if (Array.isArray(req.layers)) {
    out.layers = req.layers.map((l, i) => {
      if (l === null || typeof l !== 'object') return l;
      const c = { ...l };
      refs.push(...substitute(c, `/layers/${i}`, fps, table));
      return c;
    });
  }
  return { req: out, refs, fps };
}

// Records the refs of a response to a request built by with_refs().
// Returns the pointers of the request's tensors the store now holds and
// that later requests will send as refs: those the answer named and those
// sent as refs, less any the store cannot keep.
export function remember(sent, resp) {
  const held = new Set(sent.refs);
  fresh = new Set();
  const note = (refs, ptr_of) => {
    if (!refs || typeof refs !== 'object') return;
    for (const [field, ref] of Object.entries(refs)) {
      if (typeof ref !== 'string' || !ref.startsWith('sha256:')) continue;
      const ptr = ptr_of(field);
      const fp = ptr && sent.fps.get(ptr);
      if (!fp || unkept.has(fp)) continue;
      known.set(fp, ref);
      fresh.add(fp);
      held.add(ptr);
    }
  };
  const fps = sent.fps;
  note(resp?.meta?.refs, (f) => (fps.has(`/${f}`) ? `/${f}` : null));
  if (Array.isArray(resp?.layers))
    resp.layers.forEach((ans, i) => note(ans?.meta?.refs,
      (f) => (fps.has(`/layers/${i}/${f}`) ? `/layers/${i}/${f}` : fps.has(`/${f}`) ? `/${f}` : null)));
  return held;
}

// Bytes the store counts for the tensors of sent (from with_refs): 4 a
// value and 256 each (docs/operations.md), each distinct tensor once. A
// fingerprint begins with the tensor's shape.
function stored_bytes(sent) {
  let bytes = 0;
  for (const fp of new Set(sent.fps.values()))
    bytes += 4 * fp.split(':')[0].split('x').reduce((a, b) => a * Number(b), 1) + 256;
  return bytes;
}

// A 422 unknown_ref for the tensor at JSON pointer ptr of sent (from
// with_refs), from a store of store_bytes. A ref the answer just before had
// named, of a request whose tensors the store cannot hold together, was
// forgotten as the rest were stored, and would be each time: sent by ref it
// would cost every run a 422 and the whole request again. That tensor goes
// inline for the rest of the session. Returns whether it was such a ref. A
// store large enough forgot it for some other reason (other clients'
// tensors): it is sent by ref again once stored again.
export function unknown_ref(sent, ptr, store_bytes) {
  const fp = sent.fps.get(ptr);
  if (!fp || !fresh.has(fp) || stored_bytes(sent) <= store_bytes) return false;
  unkept.add(fp);
  return true;
}

export function forget_all() {
  known.clear();
  fresh = new Set();
}
