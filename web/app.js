// app.js: the dashboard's controller. Reads the form, builds the request
// (a generated one in build_worker.js) and sends it (with tensor-store refs
// when it can), keeps what came back in state.js and has the views draw
// it. Everything stays on this page's origin.

import { generate_request, check_params, tokenize, estimate_request, tensor_keys } from './generate.js';
import { post_attend, add_options, attention_of, labels_of, tensor_of, slice_of } from './api.js';
import { $, state, plural } from './state.js';
import { resolve_scale } from './scale.js';
import { effective_request, uneven_rows, mask_reader } from './masks.js';
import { with_refs, ref_table, remember, forget_all, unknown_ref } from './store.js';
import { build } from './build.js';
import { judge_generated, judge_json, judge_body, advice_for, load_limits, limit_of } from './limits.js';
import { render_heads, draw_line_heads, redraw_lines, attach_lines, open_zoom, download,
  hide_tooltip, attach_tooltip, LINE_HEADS } from './views.js';
import { render_model } from './model.js';
import { render_neuron, attach_neuron } from './neuron.js';
import { index_of_byte, locate } from './locate.js';

// -- form --------------------------------------------------------------------

function form_params() {
  const int = (id) => Number($(id).value === '' ? NaN : $(id).value);
  const opt = (id) => ($(id).value.trim() === '' ? null : Number($(id).value));
  return {
    sentence: $('sentence').value,
    d_model: int('d-model'),
    heads: int('heads'),
    kv_heads: int('kv-heads'),
    mask: $('mask').value,
    padding: int('padding'),
    seed: int('seed'),
    repeat: int('repeat'),
    layers: int('layers'),
    rope: $('rope').checked,
    rope_theta: Number($('rope-theta').value),
    alibi: $('alibi').checked,
    window_left: opt('window-left'),
    softcap: opt('softcap'),
  };
}

function source() {
  return $('source-json').checked ? 'json' : 'generate';
}

function update_source() {
  const gen = source() === 'generate';
  $('generate-fields').hidden = !gen;
  $('json-fields').hidden = gen;
  update_hint();
}

// tensor_keys() of generated tensors the store holds: a request of them
// is estimated with refs in their place, as it will be sent.
const held = new Set();

// The generated request's size, judged before anything is built; inline:
// as the JSON box gets it (JSON numbers, nothing by ref).
function judge_form(p, inline = false) {
  const base64 = !inline && $('encoding').value === 'base64';
  const est = estimate_request(p, { base64, held: !inline && $('use-store').checked ? held : new Set(),
    rollout: $('want-rollout').checked, return_qk: $('want-qk').checked });
  return judge_generated(est, p, base64);
}

function show_size(text, over) {
  const el = $('size-hint');
  el.textContent = over ?? text;
  el.classList.toggle('over', Boolean(over));
  el.dataset.over = over ? 'true' : 'false';
}

function update_hint() {
  const p = form_params();
  $('rope-theta').disabled = !p.rope;
  if (source() === 'json') {
    const text = $('request-json').value;
    const size = judge_json(text);
    show_size(text.trim() === '' ? '' : size.text, size.over);
  }
  const bad = check_params(p);
  if (bad) {
    $('shape-hint').textContent = bad;
    if (source() === 'generate') show_size('', null);
    return;
  }
  if (source() === 'generate') {
    const size = judge_form(p);
    show_size(size.text, size.over);
  }
  const n = tokenize(p.sentence).length * p.repeat + p.padding;
  const dk = Math.floor(p.d_model / p.heads);
  const rules = [p.rope && `RoPE (theta ${p.rope_theta})`, p.alibi && 'ALiBi',
    p.window_left !== null && `window of ${p.window_left} keys to the left`,
    p.softcap !== null && `softcap ${p.softcap}`].filter(Boolean);
  $('shape-hint').textContent =
    `n = m = ${n} tokens, d_k = d_v = ${dk}, ${p.heads} heads over ${p.kv_heads} KV heads` +
    (p.heads === p.kv_heads ? ' (multi-head)' : p.kv_heads === 1 ? ' (multi-query)' : ' (grouped-query)') +
    (p.layers > 1 ? `, ${p.layers} layers` : '') +
    (rules.length ? `; ${rules.join(', ')}` : '');
}

// What the Options ask for, for add_options().
function wanted() {
  return { analysis: $('want-analysis').checked, return_qk: $('want-qk').checked,
    value_norms: $('want-norms').checked, rollout: $('want-rollout').checked };
}

// What keeps the form's request from being built, as an Error whose
// message is shown, or null. Checked before any work: a request over the
// server's limits would take seconds to build only to be refused.
function form_error() {
  if (source() === 'json')
    return $('request-json').value.trim() === '' ? new Error('the request JSON box is empty') : null;
  const p = form_params();
  const bad = check_params(p);
  if (bad) return new Error(bad);
  const over = judge_form(p).over;
  return over ? Object.assign(new Error(over), { code: 'too_large' }) : null;
}

// The request of a form without form_error(), as { req: object, cross,
// top_k, by_ref: whether it goes with refs (the store used), sent: its
// body, as with_refs() gives it with body, the JSON to send (a string, or
// a Blob), again(): a promise of sent with the refs known then (after
// an unknown_ref) }, and keys (its tensor_keys()) when generated; or
// { text } when the pasted text does not parse. Rejects with an Error
// whose message is shown, or with signal's reason when it aborts.
async function build_request(signal) {
  const b64 = $('encoding').value === 'base64';
  const store = $('use-store').checked;
  if (source() === 'generate') {
    const p = form_params();
    // Built, fingerprinted and written in build_worker.js, where the
    // tensors stay: the page keeps the rest of the request.
    const ask = (msg) => build({ ...msg, refs: store ? ref_table() : null }, signal);
    const sent = await ask({ p, b64, want: wanted() });
    return { req: sent.req, cross: false, top_k: false, by_ref: store, sent, again: () => ask({}),
      keys: tensor_keys(p) };
  }
  const text = $('request-json').value;
  // A pasted request is parsed and written here, on the page: let the
  // status line show first.
  await painted();
  // Text that does not parse goes out unchanged so the service itself says
  // where it breaks (invalid_json with line and column).
  let req;
  try {
    req = JSON.parse(text);
  } catch {
    return { text };
  }
  if (req === null || typeof req !== 'object' || Array.isArray(req)) return { text };
  req.return_weights = 'per_head';
  if (Array.isArray(req.layers))
    req.layers = req.layers.map((l) => {
      if (l === null || typeof l !== 'object' || l.return_weights === undefined) return l;
      const c = { ...l };
      delete c.return_weights;
      return c;
    });
  add_options(req, wanted());
  if (b64 && req.encoding === undefined) req.encoding = 'base64';
  // A pasted request that says store: false keeps everything inline.
  const by_ref = store && req.store !== false;
  const encode = () => {
    const sent = with_refs(req, by_ref ? ref_table() : null);
    return { ...sent, body: JSON.stringify(sent.req) };
  };
  return { req, cross: req.memory != null, top_k: req.top_k != null, by_ref, sent: encode(),
    again: async () => encode() };
}

// -- status and errors ---------------------------------------------------------

function set_status(msg) {
  $('status').textContent = msg;
}

// The status line of a run that failed with err.
function failed_status(err) {
  if (err.status) return `The service refused the request (HTTP ${err.status}).`;
  return {
    form: 'Nothing sent: fix the form first.',
    too_large: 'Nothing sent: the request is over the server\'s limits.',
    build_failed: 'Nothing sent: the request could not be built.',
    cancelled: err.unsent ? 'Nothing sent: cancelled while the request was built.'
      : 'Cancelled: the page stopped waiting for the answer.',
    timeout: `No answer from the service within ${answer_timeout_s()} s.`,
  }[err.code] ?? 'The request failed.';
}

function show_error(err) {
  const box = $('error');
  box.replaceChildren();
  const advice = advice_for(err);
  const head = document.createElement('strong');
  head.textContent = err.status ? `HTTP ${err.status} ${err.code}` : err.code;
  box.append(head, ': ');
  // The pointer is shown once: where the message names it (the service's
  // messages often start with it), else after the message.
  const msg = err.message;
  const at = err.field ? msg.indexOf(err.field) : -1;
  const whole = at >= 0 && !/[\w/]/.test(msg.charAt(at + err.field.length));
  if (err.field) {
    const ptr = document.createElement('span');
    ptr.className = 'pointer';
    const code = document.createElement('code');
    code.textContent = err.field;
    if (whole) {
      ptr.append(code);
      box.append(msg.slice(0, at), ptr, msg.slice(at + err.field.length));
    } else {
      ptr.append(' at ', code);
      box.append(msg, ptr);
    }
  } else {
    box.append(msg);
  }
  if (advice) {
    const p = document.createElement('p');
    p.className = 'advice';
    p.textContent = advice;
    box.append(p);
  }
  box.dataset.code = err.code;
  box.dataset.field = err.field || '';
  box.hidden = false;
  // A 413 may have taught the page this server's limit.
  if (advice) update_hint();
}

function clear_error() {
  const box = $('error');
  box.hidden = true;
  box.replaceChildren();
  delete box.dataset.code;
  delete box.dataset.field;
}

// What a failed run leaves: nothing of the run before it. Its maps under
// the new error would read as the answer to the request that failed, and
// the download would hand out that older answer.
function clear_results() {
  if ($('zoom').open) $('zoom').close();
  hide_tooltip();
  $('results').hidden = true;
  for (const id of ['head-maps', 'mean-card', 'model-grid', 'rollout-card', 'neuron-heads', 'similarity-card'])
    $(id).replaceChildren();
  Object.assign(state, { text: '', resp: null, req: null, layers: null, cur: null, att: null,
    raw: [], maps: [], hidden: [], kept: [], mean: null, raw_mean: null, line_maps: [], norms: null, focus: null });
  state.line_heads = new Set();
  $('export-json').disabled = true;
  delete document.body.dataset.renderMs;
  delete document.body.dataset.frameMs;
}

// A run that failed: the error, a status line, and no older results.
function fail_run(err, status) {
  clear_results();
  show_error(err);
  set_status(status);
}

// Selects in the request box where the service says a request from it
// breaks: the byte of an invalid_json (sent as typed), or the value an
// error's field points at, so a long or minified request need not be
// searched by hand.
function point_at_error(err) {
  const box = $('request-json');
  const text = box.value;
  const byte = err.code === 'invalid_json' ? /\(byte (\d+)\)/.exec(err.message) : null;
  let range = null;
  if (byte) {
    const i = index_of_byte(text, Number(byte[1]));
    range = [i, Math.min(text.length, i + 1)];
  } else if (err.field) {
    range = locate(text, err.field);
  }
  if (!range) return;
  box.focus();
  box.setSelectionRange(range[0], range[1]);
}

function kib(nbytes) {
  return nbytes < 1024 ? `${nbytes} B` : nbytes < 1048576
    ? `${(nbytes / 1024).toFixed(1)} KiB` : `${(nbytes / 1048576).toFixed(1)} MiB`;
}

// -- a request in flight -------------------------------------------------------

// Seconds the page waits for an answer, from when the request is sent,
// before it gives up. A generated request near the body limit takes about
// 4 s here from Run to the maps, under a second of it waiting for the
// answer; a service that took the connection and never answers (stopped,
// or behind a hung proxy) would otherwise hold the page forever.
// ?timeout=SECONDS in the page's address sets another.
const ANSWER_TIMEOUT_S = 120;

function answer_timeout_s() {
  const asked = Number(new URLSearchParams(location.search).get('timeout'));
  return asked > 0 ? asked : ANSWER_TIMEOUT_S;
}

// The run under way, building its request or waiting for the answer, or
// null: { controller, t0, clock, timer (set once the request is sent),
// seconds: the element counting them }.
let flight = null;

function waited_s() {
  return Math.floor((performance.now() - flight.t0) / 1000);
}

function tick() {
  flight.seconds.textContent = ` ${waited_s()} s`;
}

// Shows the Cancel button and starts the clock, from the click on: a
// large request takes seconds to build before it is sent. Returns the
// signal that stops the run.
function take_off(from_run) {
  const controller = new AbortController();
  flight = { controller, t0: performance.now(), seconds: document.createElement('span'),
    clock: setInterval(tick, 1000), timer: 0 };
  // Said every second, the count would drown whatever else a screen
  // reader has to say; it is there to be seen.
  flight.seconds.setAttribute('aria-hidden', 'true');
  $('cancel').hidden = false;
  // Run is disabled while it waits: a keyboard user's focus goes on to
  // the one control that can act.
  if (from_run) $('cancel').focus();
  return controller.signal;
}

// The request goes out: from now on the service has the timeout's seconds
// to answer.
function start_timeout() {
  const limit = answer_timeout_s();
  flight.timer = setTimeout(() => flight.controller.abort({ code: 'timeout',
    message: `the service did not answer within ${limit} s, so the page stopped waiting ` +
      '(it may be stopped, overloaded, or behind a proxy that does not answer)' }), limit * 1000);
}

// The status line while a run waits: what it is doing, and for how long.
function say(msg) {
  tick();
  $('status').replaceChildren(msg, flight.seconds);
}

function cancel() {
  if (!flight) return;
  flight.controller.abort(flight.timer
    ? { code: 'cancelled', message: `you cancelled the request after ${waited_s()} s, before the service answered` }
    : { code: 'cancelled', unsent: true,
      message: `you cancelled the request after ${waited_s()} s, while the page built it; nothing was sent` });
}

// The run has its answer, or its error: Cancel goes, Run comes back
// (with the focus, when Cancel had it).
function land() {
  clearInterval(flight.clock);
  clearTimeout(flight.timer);
  flight = null;
  const had_focus = document.activeElement === $('cancel');
  $('cancel').hidden = true;
  $('run').disabled = false;
  if (had_focus) $('run').focus();
}

// -- running -------------------------------------------------------------------

// Sends the built request (signal stops it); with the store on, known
// tensors go as refs, and a 422 unknown_ref (the store forgot one) is
// answered by sending everything inline once more. Returns { r, refs:
// pointers sent as refs, retried: '' or what the status line says of the
// retry }.
async function send(built, signal) {
  start_timeout();
  // A body over the server's limit is not sent: the service would only
  // refuse it after the upload.
  const post = (body) => {
    const over = judge_body(body, built.req ? 'the request' : 'the request JSON');
    return over ? { ok: false, error: { status: 0, code: 'too_large', message: over, field: '' } }
      : post_attend(body, signal);
  };
  if (!built.req) {
    say(`Sending ${kib(built.text.length)} to POST /attend\u2026`);
    return { r: await post(built.text), refs: [], retried: '' };
  }
  let sent = built.sent;
  if (!built.by_ref) {
    say('Sending to POST /attend\u2026');
    return { r: await post(sent.body), refs: [], retried: '' };
  }
  say(`Sending to POST /attend (${sent.refs.length ? plural(sent.refs.length, 'tensor') : 'no tensors'} as refs)\u2026`);
  let r = await post(sent.body);
  let retried = '';
  if (!r.ok && r.error.code === 'unknown_ref') {
    retried = unknown_ref(sent, r.error.field, limit_of('--tensor-store-bytes'))
      ? 'the store is too small to keep a tensor and forgot it at once: sent again inline, that tensor inline from now on'
      : 'the store had forgotten a tensor: sent again inline';
    forget_all();
    held.clear();
    say('The store had forgotten a tensor: sending the request again inline\u2026');
    try {
      sent = await built.again();
    } catch (e) {
      return { r: { ok: false, error: run_error(e) }, refs: [], retried };
    }
    r = await post(sent.body);
  }
  if (r.ok && built.keys) {
    note_held(built.keys, remember(sent, r.json), Array.isArray(built.req.layers));
    update_hint();
  } else if (r.ok) {
    remember(sent, r.json);
  }
  return { r, refs: sent.refs, retried };
}

// Marks the generated tensors the store holds after a run (ptrs: their
// JSON pointers), so the next estimate counts them as refs.
function note_held(keys, ptrs, layered) {
  if (ptrs.has('/x')) held.add(keys.x);
  keys.layers.forEach((k, l) => {
    const at = layered ? `/layers/${l}` : '';
    if (['w_q', 'w_k', 'w_v'].every((f) => ptrs.has(`${at}/${f}`))) held.add(k);
  });
}

// Resolves once the page has painted what was just changed, or after
// 100 ms in a hidden tab, where frames wait.
function painted() {
  return new Promise((resolve) => {
    requestAnimationFrame(() => setTimeout(resolve, 0));
    setTimeout(resolve, 100);
  });
}

// This server's limits, asked for once at load (init); settles either
// way, after which document.body.dataset.limits says where they came
// from: 'server' or 'default'.
let limits_loaded = Promise.resolve();

// A request that could not be built or sent (an Error, or the reason a
// run's signal aborted with) as a run's error.
function run_error(e) {
  return { status: 0, code: e.code ?? 'form', message: e.message, field: '', unsent: e.unsent ?? false };
}

async function run(event) {
  event?.preventDefault();
  // A run started before the limits came would judge it by the defaults.
  await limits_loaded;
  clear_error();
  const bad = form_error();
  if (bad) {
    const err = run_error(bad);
    fail_run(err, failed_status(err));
    return;
  }
  const button = $('run');
  const from_run = document.activeElement === button;
  button.disabled = true;
  // A large request takes seconds to build: the status says so and counts
  // them, and Cancel stops it.
  const signal = take_off(from_run);
  say('Building the request\u2026');
  let built;
  try {
    built = await build_request(signal);
  } catch (e) {
    land();
    const err = run_error(e);
    fail_run(err, failed_status(err));
    return;
  }
  const { r, refs, retried } = await send(built, signal);
  land();
  document.body.dataset.refsSent = String(refs.length);
  if (!r.ok) {
    fail_run(r.error, failed_status(r.error));
    if (r.error.status && !built.keys) point_at_error(r.error);
    update_hint();
    return;
  }
  const fail = (message, field) =>
    fail_run({ status: r.status, code: 'bad_response', message, field }, 'The response could not be drawn.');
  const layers = Array.isArray(r.json.layers) ? r.json.layers : null;
  if (layers && !layers.length) return fail('the response has an empty layers array', '/layers');
  let att;
  try {
    att = attention_of(layers ? layers[0] : r.json, built.top_k);
  } catch (e) {
    return fail(e.message, layers ? '/layers/0/attention' : '/attention');
  }
  if (!att) return fail('the response has no attention field', layers ? '/layers/0/attention' : '/attention');
  state.text = r.text;
  state.resp = r.json;
  state.req = built.req ?? null;
  state.top_k = built.top_k ?? false;
  state.cross = built.cross ?? false;
  state.layers = layers;
  state.layer = 0;
  state.batch = 0;
  state.focus = null;
  state.line_heads = new Set(Array.from({ length: Math.min(att.heads, LINE_HEADS) }, (_, i) => i));
  $('export-json').disabled = false;
  $('results').hidden = false;
  const t0 = performance.now();
  try {
    select();
    fill_selects();
    render();
  } catch (e) {
    // A response the page cannot draw is a bug here or there: say so.
    fail_run({ status: r.status, code: 'render_failed', message: e.message, field: '' },
      'The response could not be drawn.');
    return;
  }
  const t1 = performance.now();
  requestAnimationFrame(() => {
    const t2 = performance.now();
    const meta = r.json.meta || {};
    const server = typeof meta.elapsed_ms === 'number' ? `, server compute ${compute_ms(meta.elapsed_ms)}` : '';
    const a = state.att;
    const what = layers ? `${plural(layers.length, 'layer')} of ${plural(a.heads, 'head')}`
      : plural(a.heads, 'map');
    set_status(`HTTP ${r.status}: ${kib(r.text.length)} in ${r.ms.toFixed(0)} ms${server}` +
      (refs.length ? `, ${plural(refs.length, 'tensor')} sent as refs` : '') +
      (retried ? ` (${retried})` : '') + '. ' +
      `B = ${a.batch}, h = ${a.heads}, n = ${a.n}, m = ${a.m}. ` +
      `Drew ${what} in ${(t1 - t0).toFixed(0)} ms (${(t2 - t0).toFixed(0)} ms to the next frame).`);
    document.body.dataset.renderMs = (t1 - t0).toFixed(1);
    document.body.dataset.frameMs = (t2 - t0).toFixed(1);
  });
}

// A small request computes in microseconds: "0.0 ms" would read as nothing.
function compute_ms(ms) {
  return ms < 0.1 ? '< 0.1 ms' : `${ms.toFixed(1)} ms`;
}

function fill_selects() {
  const sel = $('batch');
  sel.replaceChildren();
  for (let b = 0; b < state.att.batch; b++) sel.append(new Option(`element ${b}`, String(b)));
  $('batch-field').hidden = !state.att.batched;
  const ls = $('layer');
  ls.replaceChildren();
  for (let l = 0; l < (state.layers?.length ?? 0); l++) ls.append(new Option(`layer ${l}`, String(l)));
  $('layer-field').hidden = !state.layers;
}

// The raw maps of layer l (or the only answer) for the drawn batch element.
function layer_maps(l) {
  const cur = state.layers ? state.layers[l] : state.resp;
  const att = l === state.layer && state.att ? state.att : attention_of(cur, state.top_k);
  const { heads, n, m, values } = att;
  const b = Math.min(state.batch, att.batch - 1);
  const per = n * m;
  const maps = [];
  const kept = [];
  for (let h = 0; h < heads; h++) {
    const from = (b * heads + h) * per;
    maps.push(values.subarray(from, from + per));
    kept.push(att.kept ? att.kept.subarray(from, from + per) : null);
  }
  const read = mask_reader(effective_request(state.req, state.layers ? l : null), att);
  const hidden = maps.map((w, h) => (read ? read(b, h, w) : null));
  return { att, maps, hidden, kept, n, m };
}

// Derives what is drawn from the response, the layer and the batch element.
function select() {
  state.cur = state.layers ? state.layers[state.layer] : state.resp;
  state.eff = effective_request(state.req, state.layers ? state.layer : null);
  state.att = attention_of(state.cur, state.top_k);
  if (!state.att) throw new Error(`layer ${state.layer} has no attention`);
  if (state.batch >= state.att.batch) state.batch = 0;
  const b = state.batch;
  const { n, m } = state.att;
  const lm = layer_maps(state.layer);
  state.raw = lm.maps;
  state.hidden = lm.hidden;
  state.kept = lm.kept;
  state.rows = labels_of(state.cur.tokens ?? state.resp.tokens, b, n);
  const cross = state.cross || state.eff.memory != null;
  const keys = state.cur.memory_tokens ?? (cross ? undefined : state.cur.tokens ?? state.resp.tokens);
  state.cols = labels_of(keys, b, m);
  state.scale = resolve_scale($('scale-mode').value, { uneven_rows: uneven_rows(state.eff), m });
  state.raw_mean = mean_of(state.raw);
  norm_maps();
  if (!state.focus || state.focus.index >= (state.focus.kind === 'key' ? m : n)) {
    const it = state.rows.indexOf('it');
    state.focus = { kind: 'query', index: it >= 0 ? it : 0 };
  }
}

function mean_of(maps) {
  const per = maps[0]?.length ?? 0;
  // Same array type as the maps, so the drawing loop stays monomorphic.
  const mean = maps[0] ? new maps[0].constructor(per) : new Float64Array(0);
  for (const w of maps) for (let k = 0; k < per; k++) mean[k] += w[k];
  for (let k = 0; k < per; k++) mean[k] /= maps.length;
  return mean;
}

// The norm-based maps of Kobayashi et al. 2020: weight x the norm of what
// the key sends through the head (value_norms), as they are ('norm') or
// with each row divided by its sum ('norm_row'). Without value_norms in
// the answer only the raw weights exist.
function norm_maps() {
  const t = tensor_of(state.cur.value_norms);
  const { heads, n, m } = state.att;
  const vn = t && (t.shape.length === 3 ? slice_of(t, [state.batch]) : t);
  const ok = vn && vn.shape.length === 2 && vn.shape[0] === heads && vn.shape[1] === m;
  $('norm-field').hidden = !ok;
  const kind = ok ? document.querySelector('input[name="weight-kind"]:checked')?.value ?? 'raw' : 'raw';
  state.kind = kind;
  state.norms = ok ? Array.from({ length: heads }, (_, h) => vn.values.subarray(h * m, (h + 1) * m)) : null;
  if (kind === 'raw') {
    state.maps = state.raw;
    state.mean = state.raw_mean;
    state.line_maps = state.raw;
    return;
  }
  const scaled = state.raw.map((w, h) => {
    const nv = state.norms[h];
    const out = new Float64Array(n * m);
    for (let i = 0; i < n; i++) for (let j = 0; j < m; j++) out[i * m + j] = w[i * m + j] * nv[j];
    return out;
  });
  const renorm = scaled.map((w) => {
    const out = new Float64Array(w.length);
    for (let i = 0; i < n; i++) {
      let s = 0;
      for (let j = 0; j < m; j++) s += w[i * m + j];
      for (let j = 0; j < m; j++) out[i * m + j] = s > 0 ? w[i * m + j] / s : 0;
    }
    return out;
  });
  state.maps = kind === 'norm' ? scaled : renorm;
  state.mean = mean_of(state.maps);
  state.line_maps = renorm;
}

// The width of #results the maps were last drawn for.
let drawn_width = 0;

function render() {
  drawn_width = $('results').clientWidth;
  render_heads();
  draw_line_heads();
  redraw_lines();
  render_model(layer_maps, pick_layer_head);
  render_neuron();
}

function pick_layer_head(l, h) {
  state.layer = l;
  $('layer').value = String(l);
  select();
  render();
  // render() drew the grid anew: focus the new thumbnail, which the
  // dialog gives focus back to when it closes (a keyboard user keeps
  // their place instead of starting again from the top of the page).
  $('model-grid').querySelector(`canvas[data-layer="${l}"][data-head="${h}"]`)?.focus();
  open_zoom(`Layer ${l}, head ${h}`, state.maps[h], state.hidden[h], h, `attention-layer-${l}-head-${h}.png`);
}

function redraw_all() {
  if (!state.att) return;
  select();
  render();
}

// -- wiring --------------------------------------------------------------------

function init() {
  $('controls').addEventListener('submit', run);
  $('cancel').addEventListener('click', cancel);
  for (const el of document.querySelectorAll('input[name="source"]'))
    el.addEventListener('change', update_source);
  for (const id of ['sentence', 'd-model', 'heads', 'kv-heads', 'padding', 'seed', 'repeat',
    'layers', 'rope', 'rope-theta', 'alibi', 'window-left', 'softcap', 'request-json'])
    $(id).addEventListener('input', update_hint);
  for (const id of ['encoding', 'use-store', 'want-rollout', 'want-qk'])
    $(id).addEventListener('change', update_hint);
  $('reseed').addEventListener('click', () => {
    $('seed').value = String(Math.floor(Math.random() * 4294967296));
    update_hint();
  });
  $('show-request').addEventListener('click', () => {
    const p = form_params();
    const bad = check_params(p);
    if (bad) {
      show_error({ status: 0, code: 'form', message: bad, field: '' });
      return;
    }
    const over = judge_form(p, true).over;
    if (over) {
      show_error({ status: 0, code: 'too_large', message: over, field: '' });
      return;
    }
    clear_error();
    $('request-json').value = JSON.stringify(generate_request(p));
    $('source-json').checked = true;
    update_source();
    $('request-json').focus();
  });
  $('request-file').addEventListener('change', async () => {
    const f = $('request-file').files[0];
    if (!f) return;
    try {
      $('request-json').value = await f.text();
      $('source-json').checked = true;
      update_source();
      set_status(`Loaded ${f.name} (${kib(f.size)}).`);
    } catch (e) {
      show_error({ status: 0, code: 'file', message: `could not read ${f.name}: ${e.message}`, field: '' });
    }
  });
  $('export-json').addEventListener('click', () => {
    if (state.text) download(new Blob([state.text], { type: 'application/json' }), 'attention-response.json');
  });
  $('batch').addEventListener('change', () => {
    state.batch = Number($('batch').value);
    redraw_all();
  });
  $('layer').addEventListener('change', () => {
    state.layer = Number($('layer').value);
    redraw_all();
  });
  $('scale-mode').addEventListener('change', redraw_all);
  // The note under a select says what its chosen option does.
  for (const sel of document.querySelectorAll('select[aria-describedby]')) {
    const note = () => {
      $(sel.getAttribute('aria-describedby')).textContent = sel.selectedOptions[0]?.dataset.note ?? '';
    };
    sel.addEventListener('change', note);
    note();
  }
  for (const el of document.querySelectorAll('input[name="weight-kind"]'))
    el.addEventListener('change', redraw_all);
  $('links').addEventListener('input', () => redraw_lines());
  for (const id of ['neuron-query', 'neuron-key', 'neuron-sort'])
    $(id).addEventListener('change', () => { if (state.att) render_neuron(); });
  $('zoom-close').addEventListener('click', () => $('zoom').close());
  $('zoom').addEventListener('close', () => {
    hide_tooltip();
    document.body.append($('tooltip'));
  });
  // Maps take their card's width: draw again when the page's width changes
  // (not for a scroll bar's few pixels).
  let timer = 0;
  new ResizeObserver(() => {
    clearTimeout(timer);
    timer = setTimeout(() => {
      if (state.att && Math.abs($('results').clientWidth - drawn_width) >= 24) render();
    }, 150);
  }).observe($('results'));
  // A new devicePixelRatio (browser zoom, another screen): redraw sharp.
  const watch_dpr = () => {
    matchMedia(`(resolution: ${window.devicePixelRatio}dppx)`).addEventListener('change', () => {
      if (state.att) render();
      watch_dpr();
    }, { once: true });
  };
  watch_dpr();
  attach_lines();
  attach_neuron();
  attach_tooltip();
  update_source();
  update_hint();
  limits_loaded = load_limits().then((from) => {
    document.body.dataset.limits = from;
    update_hint();
  });
}

init();
