// build_worker.js: a module Web Worker that builds the generated request
// off the page's main thread. At d_model 1280 drawing the weights,
// fingerprinting them for refs and writing 45 MiB of JSON take about 2 s,
// which on the main thread would stop the status line's count and the
// Cancel button. The caches that make a new sentence on the same weights
// quick (generate.js keeps the last request's weights and their base64
// tensors, store.js their fingerprints) live here, with the tensors;
// build.js talks to it.
//
// Messages, one at a time:
//   { id, p, b64, want, refs }  builds generate_request(p) with the Options
//       (want, for add_options), in base64 tensors when b64, and keeps it;
//   { id, refs }  the request kept, again (the retry after unknown_ref).
// refs is a ref_table() of the page's (null: the store is not used). The
// answer is { id, body: the JSON to send, as a Blob, req: the request
// without its tensors (to a build; null to again), refs, fps: as
// with_refs() gives them }, or { id, error }. A Blob crosses to the page as
// a handle, and fetch() sends it as it is; a string of 45 MiB it would
// encode on the page's main thread (0.3 s here, a second with developer
// tools attached).

import { generate_request, as_base64 } from './generate.js';
import { add_options } from './api.js';
import { with_refs, TENSOR_FIELDS } from './store.js';

// The request last built.
let kept = null;

// What the page keeps of a request (masks.js reads its other fields): it
// needs no copy of the tensors.
function without_tensors(req) {
  const strip = (o) => {
    if (o === null || typeof o !== 'object') return o;
    const c = { ...o };
    for (const f of TENSOR_FIELDS) delete c[f];
    return c;
  };
  const out = strip(req);
  if (Array.isArray(req.layers)) out.layers = req.layers.map(strip);
  return out;
}

self.addEventListener('message', ({ data }) => {
  const { id } = data;
  try {
    const build = data.p !== undefined;
    if (build) {
      const req = add_options(generate_request(data.p), data.want);
      kept = data.b64 ? as_base64(req) : req;
    } else if (!kept) {
      throw new Error('no request was built to send again');
    }
    const sent = with_refs(kept, data.refs);
    const body = new Blob([JSON.stringify(sent.req)], { type: 'application/json' });
    self.postMessage({ id, body, req: build ? without_tensors(kept) : null, refs: sent.refs, fps: sent.fps });
  } catch (e) {
    self.postMessage({ id, error: e.message });
  }
});
