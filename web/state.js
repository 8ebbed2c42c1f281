// state.js: what the page last received and what it draws, shared by the
// views; and small helpers they all use.

export const $ = (id) => document.getElementById(id);

export const state = {
  text: '',        // the response body exactly as received (for export)
  resp: null,      // its parsed JSON
  req: null,       // the request as built (a pasted one with its inline
                   // tensors, a generated one without: they stay in
                   // build_worker.js), or null when the text did not parse
  top_k: false,    // the request had top_k: rows are [index, weight] pairs
  layers: null,    // a layers answer: [L] answers, else null
  layer: 0,        // the layer drawn
  cur: null,       // the answer drawn: resp, or resp.layers[layer]
  eff: {},         // the fields that answer was computed from
  cross: false,    // keys are not the query tokens (memory)
  att: null,       // attention_of(cur)
  batch: 0,        // the batch element drawn
  raw: [],         // per head: the returned weights, n*m, for `batch`
  maps: [],        // per head: what is drawn (raw, or norm-based)
  hidden: [],      // per head: Uint8Array n*m of masked keys, or null
  kept: [],        // per head, with top_k: Uint8Array n*m, 1 where a
                   // weight was returned; else null
  mean: null,      // n*m mean over heads of `maps`
  raw_mean: null,  // n*m mean over heads of `raw`
  line_maps: [],   // per head: the token view's maps (row shares)
  norms: null,     // per head: Float32Array|Float64Array m of value norms
  kind: 'raw',     // 'raw' | 'norm' | 'norm_row' (see norm_maps in app.js)
  scale: null,     // resolve_scale()'s answer for this answer
  rows: [],        // query labels
  cols: [],        // key labels
  focus: null,     // token view: { kind: 'query' | 'key', index }
  line_heads: new Set(),
};

export function token(labels, i) {
  return `\u201c${labels[i]}\u201d (${i})`;
}

// v with `digits` decimals, or in exponent form when those would show a
// value that is not 0 as 0 ("weight 0.0000" for 3e-7 reads as no weight;
// long rows and ALiBi give many such weights).
export function fixed(v, digits) {
  const x = Number(v);
  return x !== 0 && Math.abs(x) < 0.5 * 10 ** -digits ? x.toExponential(1) : x.toFixed(digits);
}

// "1 map", "2 maps".
export function plural(count, word) {
  return `${count} ${word}${count === 1 ? '' : 's'}`;
}

// Where a map may draw: its container's content width in CSS pixels.
export function room_of(el, fallback = 400) {
  const w = el?.clientWidth ?? 0;
  if (w <= 0) return fallback;
  const cs = getComputedStyle(el);
  return Math.max(40, w - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight));
}

export const KIND_LABELS = {
  raw: 'weight',
  norm: '\u03b1\u2016f(x)\u2016',
  norm_row: '\u03b1\u2016f(x)\u2016 renormalised',
};
