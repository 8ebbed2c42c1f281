// masks.js: which keys the request hid from which queries, so maps can
// draw masked keys apart from keys whose weight is merely near zero.
// The rules are the contract's: mask "causal" (by positions), a sliding
// window (with global tokens exempt from it), key_padding_mask and
// attn_mask. A cell is drawn as masked only when a rule hides it AND the
// service gave it weight 0 exactly, so a rule this page reads differently
// from the service (or one a server does not know) never greys out a real
// weight.

function row_of(field, b, batched) {
  if (!Array.isArray(field)) return null;
  if (batched && Array.isArray(field[0])) return field[b] ?? null;
  return field;
}

// The fields one answer was computed from: a layer's own fields over the
// request's top level (the contract's defaulting rule).
export function effective_request(req, layer) {
  if (!req || typeof req !== 'object') return {};
  const layers = Array.isArray(req.layers) ? req.layers : null;
  if (!layers || layer === null || layer === undefined) return req;
  const out = { ...req, ...(layers[layer] ?? {}) };
  delete out.layers;
  return out;
}

// True when rows see different numbers of keys by the request's rules
// (causal or windowed): the automatic colour scale then goes per row.
export function uneven_rows(req) {
  return req?.mask === 'causal' || (req?.window != null && typeof req.window === 'object');
}

// A function (b, head, weights) -> Uint8Array n*m (1: masked) or null when
// the request hides nothing. weights: the head's n*m weights for element b.
export function mask_reader(req, dims) {
  const { n, m } = dims;
  const batched = dims.batched;
  const causal = req.mask === 'causal';
  const win = req.window && typeof req.window === 'object' ? req.window : null;
  const kpm = req.key_padding_mask;
  const am = req.attn_mask;
  if (!causal && !win && !Array.isArray(kpm) && !Array.isArray(am)) return null;
  const has_memory = req.memory != null;
  const globals = new Set(Array.isArray(req.global_tokens) ? req.global_tokens : []);

  return (b, head, weights) => {
    const pos = row_of(req.positions, b, batched);
    let kp_field = row_of(req.key_positions, b, batched);
    if (!kp_field && !has_memory) kp_field = pos;
    const p = Float64Array.from({ length: n }, (_, i) => (pos && Number.isFinite(pos[i]) ? pos[i] : i));
    const kp = Float64Array.from({ length: m }, (_, j) => (kp_field && Number.isFinite(kp_field[j]) ? kp_field[j] : j));
    const pad = row_of(kpm, b, batched);
    const amap = attn_mask_of(am, b, head, batched);
    const out = new Uint8Array(n * m);
    let any = false;
    for (let i = 0; i < n; i++) {
      const pi = p[i];
      for (let j = 0; j < m; j++) {
        const k = i * m + j;
        if (weights[k] !== 0) continue;
        const kj = kp[j];
        let hide = causal && kj > pi;
        if (!hide && win && !globals.has(i) && !globals.has(j)) {
          if (Number.isFinite(win.left) && kj < pi - win.left) hide = true;
          if (Number.isFinite(win.right) && kj > pi + win.right) hide = true;
        }
        if (!hide && pad && pad[j] === true) hide = true;
        if (!hide && amap && amap[i]?.[j] === true) hide = true;
        if (hide) {
          out[k] = 1;
          any = true;
        }
      }
    }
    return any ? out : null;
  };
}

// The [n][m] boolean map of attn_mask for element b and head, from any of
// its shapes: [n][m], [h][n][m] (2-D x), [B][n][m] (batched x),
// [B][h][n][m] with a leading 1 shared by every element.
function attn_mask_of(am, b, head, batched) {
  if (!Array.isArray(am)) return null;
  let depth = 0;
  for (let a = am; Array.isArray(a); a = a[0]) depth++;
  if (depth === 2) return am;
  if (depth === 3) return batched ? am[b] : am[head];
  if (depth === 4) return (am.length === 1 ? am[0] : am[b])?.[head] ?? null;
  return null;
}
