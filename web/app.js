// app.js: the dashboard's controller. Reads the form, sends the request,
// and draws the per-head maps, the mean map, the token view, the analysis
// figures and the exports. Everything stays on this page's origin.

import { generate_request, check_params, as_base64, tokenize } from './generate.js';
import { post_attend, attention_of, labels_of } from './api.js';
import { draw_heatmap, draw_legend, cell_at, cell_centre, set_cursor } from './heatmap.js';
import { draw_lines, row_at, head_colour } from './lines.js';

const $ = (id) => document.getElementById(id);

// What the page last received; the drawing functions read from here.
const state = {
  text: '',        // the response body exactly as received (for export)
  resp: null,      // its parsed JSON
  cross: false,    // the request had `memory`: keys are not the tokens
  att: null,       // attention_of(resp)
  batch: 0,        // the batch element drawn
  maps: [],        // per head: Float32Array|Float64Array n*m, for `batch`
  mean: null,      // n*m mean over heads
  rows: [],        // query labels
  cols: [],        // key labels
  query: null,     // the query row the token view follows
  line_heads: new Set(),
};

const GRID_PLOT = 360; // largest plot side of a head's map, canvas pixels

// -- form --------------------------------------------------------------------

function form_params() {
  const int = (id) => Number($(id).value === '' ? NaN : $(id).value);
  return {
    sentence: $('sentence').value,
    d_model: int('d-model'),
    heads: int('heads'),
    kv_heads: int('kv-heads'),
    mask: $('mask').value,
    padding: int('padding'),
    seed: int('seed'),
    repeat: int('repeat'),
  };
}

function source() {
  return $('source-json').checked ? 'json' : 'generate';
}

function update_source() {
  const gen = source() === 'generate';
  $('generate-fields').hidden = !gen;
  $('json-fields').hidden = gen;
}

function update_hint() {
  const p = form_params();
  const bad = check_params(p);
  if (bad) {
    $('shape-hint').textContent = bad;
    return;
  }
  const n = tokenize(p.sentence).length * p.repeat + p.padding;
  const dk = Math.floor(p.d_model / p.heads);
  $('shape-hint').textContent =
    `n = m = ${n} tokens, d_k = d_v = ${dk}, ${p.heads} heads over ${p.kv_heads} KV heads` +
    (p.heads === p.kv_heads ? ' (multi-head)' : p.kv_heads === 1 ? ' (multi-query)' : ' (grouped-query)');
}

// The body to send as { body, cross } (cross: the request has `memory`, so
// keys are not the query tokens), or throws an Error whose message is shown.
function request_body() {
  const b64 = $('encoding').value === 'base64';
  if (source() === 'generate') {
    const p = form_params();
    const bad = check_params(p);
    if (bad) throw new Error(bad);
    let req = generate_request(p);
    if ($('want-analysis').checked) req.analysis = true;
    if (b64) req = as_base64(req);
    return { body: JSON.stringify(req), cross: false, top_k: false };
  }
  const text = $('request-json').value;
  if (text.trim() === '') throw new Error('the request JSON box is empty');
  // Text that does not parse goes out unchanged so the service itself says
  // where it breaks (invalid_json with line and column).
  let req;
  try {
    req = JSON.parse(text);
  } catch {
    return { body: text, cross: false, top_k: false };
  }
  if (req === null || typeof req !== 'object' || Array.isArray(req))
    return { body: text, cross: false, top_k: false };
  req.return_weights = 'per_head';
  if ($('want-analysis').checked && req.analysis === undefined) req.analysis = true;
  if (b64 && req.encoding === undefined) req.encoding = 'base64';
  return { body: JSON.stringify(req), cross: req.memory != null,
    top_k: req.top_k != null };
}

// -- status and errors ---------------------------------------------------------

function set_status(msg) {
  $('status').textContent = msg;
}

function show_error(err) {
  const box = $('error');
  box.replaceChildren();
  const head = document.createElement('strong');
  head.textContent = err.status ? `HTTP ${err.status} ${err.code}` : err.code;
  box.append(head, document.createTextNode(`: ${err.message}`));
  if (err.field) {
    const at = document.createElement('span');
    at.className = 'pointer';
    at.append(' at ');
    const code = document.createElement('code');
    code.textContent = err.field;
    at.append(code);
    box.append(at);
  }
  box.dataset.code = err.code;
  box.dataset.field = err.field || '';
  box.hidden = false;
}

function clear_error() {
  const box = $('error');
  box.hidden = true;
  box.replaceChildren();
  delete box.dataset.code;
  delete box.dataset.field;
}

function kib(nbytes) {
  return nbytes < 1024 ? `${nbytes} B` : nbytes < 1048576
    ? `${(nbytes / 1024).toFixed(1)} KiB` : `${(nbytes / 1048576).toFixed(1)} MiB`;
}

// -- running -------------------------------------------------------------------

async function run(event) {
  event?.preventDefault();
  clear_error();
  let body, cross, top_k;
  try {
    ({ body, cross, top_k } = request_body());
  } catch (e) {
    show_error({ status: 0, code: 'form', message: e.message, field: '' });
    set_status('Nothing sent: fix the form first.');
    return;
  }
  const button = $('run');
  button.disabled = true;
  set_status(`Sending ${kib(body.length)} to POST /attend\u2026`);
  const r = await post_attend(body);
  button.disabled = false;
  if (!r.ok) {
    show_error(r.error);
    set_status(r.error.status ? `The service refused the request (HTTP ${r.error.status}).`
      : 'The request failed.');
    return;
  }
  let att;
  try {
    att = attention_of(r.json, top_k);
  } catch (e) {
    show_error({ status: r.status, code: 'bad_response', message: e.message, field: '/attention' });
    set_status('The response could not be drawn.');
    return;
  }
  if (!att) {
    show_error({ status: r.status, code: 'bad_response',
      message: 'the response has no attention field', field: '/attention' });
    set_status('The response could not be drawn.');
    return;
  }
  state.cross = cross;
  state.text = r.text;
  state.resp = r.json;
  state.att = att;
  state.batch = 0;
  state.query = null;
  state.line_heads = new Set(Array.from({ length: Math.min(att.heads, 12) }, (_, i) => i));
  $('export-json').disabled = false;
  fill_batch_select();
  $('results').hidden = false;
  const t0 = performance.now();
  try {
    render();
  } catch (e) {
    // A response the page cannot draw is a bug here or there: say so.
    show_error({ status: r.status, code: 'render_failed', message: e.message, field: '' });
    set_status('The response could not be drawn.');
    return;
  }
  const t1 = performance.now();
  requestAnimationFrame(() => {
    const t2 = performance.now();
    const meta = r.json.meta || {};
    const server = typeof meta.elapsed_ms === 'number' ? `, server compute ${meta.elapsed_ms.toFixed(1)} ms` : '';
    set_status(`HTTP ${r.status}: ${kib(r.text.length)} in ${r.ms.toFixed(0)} ms${server}. ` +
      `B = ${att.batch}, h = ${att.heads}, n = ${att.n}, m = ${att.m}. ` +
      `Drew ${att.heads} maps in ${(t1 - t0).toFixed(0)} ms (${(t2 - t0).toFixed(0)} ms to the next frame).`);
    document.body.dataset.renderMs = (t1 - t0).toFixed(1);
    document.body.dataset.frameMs = (t2 - t0).toFixed(1);
  });
}

function fill_batch_select() {
  const sel = $('batch');
  sel.replaceChildren();
  for (let b = 0; b < state.att.batch; b++) {
    const o = document.createElement('option');
    o.value = String(b);
    o.textContent = `element ${b}`;
    sel.append(o);
  }
  $('batch-field').hidden = !state.att.batched;
}

// The analysis object for the drawn batch element, or null.
function analysis() {
  const a = state.resp?.analysis;
  if (a == null) return null;
  if (Array.isArray(a)) return a[state.batch] ?? null;
  return typeof a === 'object' ? a : null;
}

function select_batch(b) {
  const { heads, n, m, values } = state.att;
  const per = n * m;
  state.maps = [];
  for (let h = 0; h < heads; h++) {
    const off = (b * heads + h) * per;
    state.maps.push(values.subarray(off, off + per));
  }
  // Same array type as the maps, so the drawing loop stays monomorphic.
  const mean = new values.constructor(per);
  for (const w of state.maps) for (let k = 0; k < per; k++) mean[k] += w[k];
  for (let k = 0; k < per; k++) mean[k] /= heads;
  state.mean = mean;
  state.rows = labels_of(state.resp.tokens, b, n);
  const keys = state.resp.memory_tokens ?? (state.cross ? undefined : state.resp.tokens);
  state.cols = labels_of(keys, b, m);
  if (state.query === null || state.query >= n) {
    const it = state.rows.indexOf('it');
    state.query = it >= 0 ? it : 0;
  }
}

// The colour scale's exponent: square root for the "sqrt" choice.
function gamma_of() {
  return $('scale-mode').value === 'sqrt' ? 0.5 : 1;
}

function per_row() {
  return $('scale-mode').value === 'row';
}

function vmax_of(w) {
  if ($('scale-mode').value === 'unit' || per_row()) return 1;
  let mx = 0;
  for (let k = 0; k < w.length; k++) if (w[k] > mx) mx = w[k];
  return mx > 0 ? mx : 1;
}

function kv_head_of(i) {
  const meta = state.resp.meta || {};
  const h = meta.num_heads ?? state.att.heads;
  const g = meta.num_kv_heads ?? h;
  return Math.floor(i / (h / g));
}

function render() {
  select_batch(state.batch);
  const container = $('head-maps');
  container.replaceChildren();
  const an = analysis();
  for (let i = 0; i < state.maps.length; i++) {
    const figs = an && Array.isArray(an.heads) ? an.heads[i] : null;
    container.append(head_card(i, figs));
  }
  $('legend-label').textContent = $('scale-mode').value === 'unit' ? 'Weight'
    : per_row() ? 'Weight as a fraction of its row\'s maximum'
      : 'Weight as a fraction of each map\'s maximum (given in its caption)';
  draw_legend($('legend'), 1, gamma_of());

  const mean_card = $('mean-card');
  mean_card.replaceChildren(map_figure({
    title: 'Mean over heads', values: state.mean, file: 'attention-mean.png',
    describe: (i, j, w) => `mean \u00b7 query ${token(state.rows, i)} \u2192 key ${token(state.cols, j)} \u00b7 weight ${w.toFixed(4)}`,
  }));

  draw_line_heads();
  redraw_lines();
  draw_similarity(an);
}

function token(labels, i) {
  return `\u201c${labels[i]}\u201d (${i})`;
}

// One map with its canvas, legend range, export button and optional
// analysis figures. Per-head canvases carry data-head; others do not.
function map_figure({ title, values, file, head, describe }) {
  const fig = document.createElement('figure');
  fig.className = 'map';
  const cap = document.createElement('figcaption');
  const vmax = vmax_of(values);
  cap.textContent = per_row() ? `${title} \u00b7 each row 0 to its maximum`
    : `${title} \u00b7 scale 0 to ${vmax === 1 ? '1' : vmax.toFixed(3)}`;
  const canvas = document.createElement('canvas');
  if (head !== undefined) canvas.dataset.head = String(head);
  canvas.tabIndex = 0;
  canvas.setAttribute('role', 'img');
  canvas.setAttribute('aria-label', `${title}: attention weights, ${state.att.n} queries by ${state.att.m} keys. ` +
    'Arrow keys read cells; Enter enlarges.');
  draw_heatmap(canvas, { values, n: state.att.n, m: state.att.m, rows: state.rows,
    cols: state.cols, vmax, gamma: gamma_of(), per_row: per_row() }, GRID_PLOT);
  attach_hover(canvas, describe, () => open_zoom(title, values, describe, file));
  const bar = document.createElement('div');
  bar.className = 'map-actions';
  const png = document.createElement('button');
  png.type = 'button';
  png.textContent = 'PNG';
  png.setAttribute('aria-label', `Download ${title} as PNG`);
  png.addEventListener('click', () => save_png(canvas, file));
  const zoom = document.createElement('button');
  zoom.type = 'button';
  zoom.textContent = 'Enlarge';
  zoom.setAttribute('aria-label', `Enlarge ${title}`);
  zoom.addEventListener('click', () => open_zoom(title, values, describe, file));
  bar.append(zoom, png);
  fig.append(cap, canvas, bar);
  return fig;
}

const FIGURES = [
  ['pattern', 'pattern'], ['entropy', 'entropy (nats)'],
  ['entropy_normalized', 'entropy / ln(keys)'], ['confidence', 'confidence'],
  ['self', 'self'], ['prev', 'prev'], ['next', 'next'], ['first', 'first token'],
  ['dominant_offset', 'dominant offset'],
];

function format_figure(v) {
  if (typeof v === 'number') return Number.isInteger(v) ? String(v) : v.toFixed(3);
  if (typeof v === 'string') return v;
  return JSON.stringify(v);
}

function head_card(i, figs) {
  const card = document.createElement('article');
  card.className = 'card head-card';
  card.style.setProperty('--head-colour', head_colour(i));
  const g = kv_head_of(i);
  const title = state.att.heads > 1 || state.resp.meta?.num_heads ? `Head ${i} (KV ${g})` : 'Map';
  card.append(map_figure({
    title, values: state.maps[i], file: `attention-head-${i}.png`, head: i,
    describe: (q, k, w) => `head ${i} \u00b7 query ${token(state.rows, q)} \u2192 key ${token(state.cols, k)} \u00b7 weight ${w.toFixed(4)}`,
  }));
  if (figs && typeof figs === 'object') {
    const dl = document.createElement('dl');
    dl.className = 'figures';
    dl.setAttribute('aria-label', `Head ${i} analysis`);
    const known = new Set(FIGURES.map(([k]) => k));
    const rows = FIGURES.filter(([k]) => figs[k] !== undefined)
      .concat(Object.keys(figs).filter((k) => !known.has(k)).map((k) => [k, k]));
    for (const [k, label] of rows) {
      const dt = document.createElement('dt');
      dt.textContent = label;
      const dd = document.createElement('dd');
      dd.textContent = format_figure(figs[k]);
      dd.dataset.figure = k;
      dl.append(dt, dd);
    }
    card.append(dl);
  }
  return card;
}

// -- hover, keyboard and tooltip -------------------------------------------------

function show_tooltip(text, x, y) {
  const tip = $('tooltip');
  tip.textContent = text;
  tip.hidden = false;
  const pad = 14;
  const r = tip.getBoundingClientRect();
  let left = x + pad;
  let top = y + pad;
  if (left + r.width > window.innerWidth - 4) left = Math.max(4, x - pad - r.width);
  if (top + r.height > window.innerHeight - 4) top = Math.max(4, y - pad - r.height);
  tip.style.left = `${left}px`;
  tip.style.top = `${top}px`;
}

function hide_tooltip() {
  $('tooltip').hidden = true;
}

function attach_hover(canvas, describe, enlarge) {
  const show_cell = (c, x, y) => {
    const h = canvas.heatmap;
    const w = h.map.values[c.i * h.map.m + c.j];
    set_cursor(canvas, c);
    show_tooltip(describe(c.i, c.j, w), x, y);
    if (state.query !== c.i) {
      state.query = c.i;
      redraw_lines();
    }
  };
  canvas.addEventListener('mousemove', (e) => {
    const c = cell_at(canvas, e.clientX, e.clientY);
    if (!c) {
      set_cursor(canvas, null);
      hide_tooltip();
      return;
    }
    show_cell(c, e.clientX, e.clientY);
  });
  canvas.addEventListener('mouseleave', () => {
    set_cursor(canvas, null);
    hide_tooltip();
  });
  canvas.addEventListener('click', enlarge);
  canvas.addEventListener('blur', () => {
    set_cursor(canvas, null);
    hide_tooltip();
  });
  canvas.addEventListener('keydown', (e) => {
    const h = canvas.heatmap;
    const cur = h.cursor ?? { i: 0, j: 0 };
    const step = e.shiftKey ? 10 : 1;
    let { i, j } = cur;
    switch (e.key) {
      case 'ArrowUp': i -= step; break;
      case 'ArrowDown': i += step; break;
      case 'ArrowLeft': j -= step; break;
      case 'ArrowRight': j += step; break;
      case 'Enter': case ' ': e.preventDefault(); enlarge(); return;
      case 'Escape': set_cursor(canvas, null); hide_tooltip(); return;
      default: return;
    }
    e.preventDefault();
    i = Math.max(0, Math.min(h.map.n - 1, i));
    j = Math.max(0, Math.min(h.map.m - 1, j));
    const p = cell_centre(canvas, i, j);
    show_cell({ i, j }, p.x, p.y);
    $('cell-live').textContent = $('tooltip').textContent;
  });
}

// -- zoom ---------------------------------------------------------------------

function open_zoom(title, values, describe, file) {
  const dlg = $('zoom');
  $('zoom-title').textContent = title;
  const body = $('zoom-body');
  body.replaceChildren();
  const canvas = document.createElement('canvas');
  canvas.tabIndex = 0;
  canvas.setAttribute('role', 'img');
  canvas.setAttribute('aria-label', `${title}, enlarged. Arrow keys read cells.`);
  canvas.dataset.view = 'zoom';
  const side = Math.max(300, Math.min(window.innerWidth - 160, window.innerHeight - 200, 1000));
  draw_heatmap(canvas, { values, n: state.att.n, m: state.att.m, rows: state.rows,
    cols: state.cols, vmax: vmax_of(values), gamma: gamma_of(), per_row: per_row() }, side);
  // Cells are whole pixels, so a long sequence may come out no larger than
  // in the grid: scale the canvas up (pixelated) to the room there is.
  if (canvas.width < side) canvas.style.width = `${side}px`;
  attach_hover(canvas, describe, () => {});
  const png = document.createElement('button');
  png.type = 'button';
  png.textContent = 'Download PNG';
  png.addEventListener('click', () => save_png(canvas, file.replace('.png', '-large.png')));
  body.append(canvas, png);
  // A modal dialog sits in the top layer, above any z-index: the tooltip
  // has to live inside it while it is open.
  dlg.append($('tooltip'));
  if (!dlg.open) dlg.showModal();
  canvas.focus();
}

// -- token view ------------------------------------------------------------------

function draw_line_heads() {
  const box = $('line-heads');
  box.querySelectorAll('label').forEach((l) => l.remove());
  for (let i = 0; i < state.maps.length; i++) {
    const label = document.createElement('label');
    const cb = document.createElement('input');
    cb.type = 'checkbox';
    cb.checked = state.line_heads.has(i);
    cb.addEventListener('change', () => {
      if (cb.checked) state.line_heads.add(i); else state.line_heads.delete(i);
      redraw_lines();
    });
    const sw = document.createElement('span');
    sw.className = 'swatch';
    sw.style.background = head_colour(i);
    label.append(cb, sw, ` head ${i}`);
    box.append(label);
  }
}

function redraw_lines() {
  if (!state.att) return;
  const heads = [...state.line_heads].filter((h) => h < state.maps.length).sort((a, b) => a - b);
  draw_lines($('lines'), { rows: state.rows, cols: state.cols, n: state.att.n,
    m: state.att.m, maps: state.maps, heads, query: state.query });
  const q = state.query;
  $('lines').setAttribute('aria-label', q === null ? 'Token view'
    : `Token view: keys attended by query ${token(state.rows, q)} for heads ${heads.join(', ')}`);
}

function attach_lines() {
  const canvas = $('lines');
  canvas.addEventListener('mousemove', (e) => {
    const i = row_at(canvas, e.clientX, e.clientY);
    if (i !== null && i !== state.query) {
      state.query = i;
      redraw_lines();
    }
  });
  canvas.addEventListener('keydown', (e) => {
    if (!state.att || (e.key !== 'ArrowUp' && e.key !== 'ArrowDown')) return;
    e.preventDefault();
    const d = e.key === 'ArrowUp' ? -1 : 1;
    state.query = Math.max(0, Math.min(state.att.n - 1, (state.query ?? 0) + d));
    redraw_lines();
  });
}

// -- similarity ------------------------------------------------------------------

function draw_similarity(an) {
  const sec = $('similarity-section');
  const sim = an?.similarity;
  const h = state.maps.length;
  if (!Array.isArray(sim) || sim.length !== h || !sim.every((r) => Array.isArray(r) && r.length === h)) {
    sec.hidden = true;
    return;
  }
  const values = new Float64Array(h * h);
  let mx = 0;
  for (let i = 0; i < h; i++) for (let j = 0; j < h; j++) {
    values[i * h + j] = Number(sim[i][j]);
    mx = Math.max(mx, values[i * h + j]);
  }
  const labels = Array.from({ length: h }, (_, i) => `head ${i}`);
  const canvas = document.createElement('canvas');
  canvas.tabIndex = 0;
  canvas.setAttribute('role', 'img');
  canvas.setAttribute('aria-label', 'Head similarity: mean Jensen-Shannon divergence between heads');
  draw_heatmap(canvas, { values, n: h, m: h, rows: labels, cols: labels, vmax: mx > 0 ? mx : 1 }, 300);
  attach_hover(canvas, (i, j, w) => `head ${i} vs head ${j} \u00b7 divergence ${w.toFixed(4)}`, () => {});
  const cap = document.createElement('p');
  cap.className = 'hint';
  cap.textContent = `0 = identical rows; scale 0 to ${mx.toFixed(3)} (ln 2 \u2248 0.693 is the maximum).` +
    (an.skipped_rows ? ` ${an.skipped_rows} fully masked rows skipped.` : '');
  $('similarity-card').replaceChildren(canvas, cap);
  sec.hidden = false;
}

// -- exports -------------------------------------------------------------------

function download(blob, name) {
  const url = URL.createObjectURL(blob);
  const a = document.createElement('a');
  a.href = url;
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

function save_png(canvas, name) {
  canvas.toBlob((blob) => {
    if (blob) download(blob, name);
    else show_error({ status: 0, code: 'export', message: 'the browser could not encode the PNG', field: '' });
  }, 'image/png');
}

// -- wiring --------------------------------------------------------------------

function init() {
  $('controls').addEventListener('submit', run);
  for (const el of document.querySelectorAll('input[name="source"]'))
    el.addEventListener('change', update_source);
  for (const id of ['sentence', 'd-model', 'heads', 'kv-heads', 'padding', 'seed', 'repeat'])
    $(id).addEventListener('input', update_hint);
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
    render();
  });
  $('scale-mode').addEventListener('change', () => { if (state.att) render(); });
  $('zoom-close').addEventListener('click', () => $('zoom').close());
  $('zoom').addEventListener('close', () => {
    hide_tooltip();
    document.body.append($('tooltip'));
  });
  attach_lines();
  update_source();
  update_hint();
  draw_legend($('legend'), 1);
}

init();
