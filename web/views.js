// views.js: the per-head maps with their analysis figures, the mean map,
// the head-similarity matrix, the enlarged map, the token view, tooltips
// and PNG export. They draw what state.js holds.

import { $, state, token, room_of, fixed, KIND_LABELS } from './state.js';
import { draw_heatmap, draw_legend, cell_at, cell_centre, set_cursor, column_at } from './heatmap.js';
import { draw_lines, focus_at, head_colour } from './lines.js';
import { scale_name } from './scale.js';

// A head is labelled `focused` only when its typical row puts at least this
// much weight on one key (the analysis's `confidence`, the mean of each
// row's largest weight); a head the service calls focused below it is shown
// as `mixed`. The service calls a head focused when no positional figure
// (first, prev, next, self) reaches 0.5 and entropy_normalized < 0.75.
export const FOCUSED_MIN_CONFIDENCE = 0.5;

export function pattern_label(figs) {
  const p = figs?.pattern;
  if (p === 'focused' && !(Number(figs.confidence) >= FOCUSED_MIN_CONFIDENCE)) return 'mixed';
  return p;
}

// Top of the colour scale for a map: 1 on the unit scale for raw weights,
// otherwise the map's maximum.
export function vmax_of(w) {
  if (state.scale.unit && state.kind === 'raw') return 1;
  let mx = 0;
  for (let k = 0; k < w.length; k++) if (w[k] > mx) mx = w[k];
  return mx > 0 ? mx : 1;
}

// Tooltip text of cell (i, j) of head h (null: the mean over heads).
function describe(h, i, j) {
  const m = state.att.m;
  const k = i * m + j;
  const who = h === null ? 'mean' : state.att.heads > 1 ? `head ${h}` : 'map';
  const parts = [`${who} \u00b7 query ${token(state.rows, i)} \u2192 key ${token(state.cols, j)}`];
  const raw = h === null ? state.raw_mean[k] : state.raw[h][k];
  // With top_k a key outside a row's k largest has no weight in the
  // answer: drawn as 0, it must not read as a weight of 0.
  if (h !== null && state.kept[h] && !state.kept[h][k]) {
    parts.push(`not among the top ${state.att.top_k} of this row (no weight returned)`);
    return parts.join(' \u00b7 ');
  }
  if (state.kind === 'raw') {
    parts.push(`weight ${fixed(raw, 4)}`);
  } else {
    const shown = h === null ? state.mean[k] : state.maps[h][k];
    parts.push(`${KIND_LABELS[state.kind]} ${fixed(shown, 4)}`, `weight ${fixed(raw, 4)}`);
    if (h !== null) parts.push(`\u2016f(x)\u2016 ${Number(state.norms[h][j]).toFixed(3)}`);
  }
  const masked = h === null ? state.hidden.length > 0 && state.hidden.every((x) => x && x[k])
    : state.hidden[h]?.[k];
  if (masked) parts.push('masked');
  return parts.join(' \u00b7 ');
}

function map_data(values, hidden) {
  return { values, n: state.att.n, m: state.att.m, rows: state.rows, cols: state.cols,
    vmax: vmax_of(values), scale: state.scale, hidden };
}

// A mask shared by every head (all heads hide the same cells), for the mean.
function mean_hidden() {
  const hs = state.hidden;
  if (!hs.length || hs.some((x) => !x)) return null;
  const out = new Uint8Array(hs[0].length);
  for (let k = 0; k < out.length; k++) out[k] = hs.every((x) => x[k]) ? 1 : 0;
  return out;
}

// One map with its canvas, scale caption and buttons; drawn after it is in
// the document so it can take its container's width. Per-head canvases
// carry data-head; others do not.
function map_figure(parent, { title, values, hidden, file, head }, before = null) {
  const fig = document.createElement('figure');
  fig.className = 'map';
  const cap = document.createElement('figcaption');
  cap.textContent = [title, top_k_note(), scale_caption(values)].filter(Boolean).join(' \u00b7 ');
  const canvas = document.createElement('canvas');
  if (head !== undefined) canvas.dataset.head = String(head);
  canvas.dataset.scale = scale_name(state.scale);
  canvas.dataset.kind = state.kind;
  if (state.att.top_k) canvas.dataset.topK = String(state.att.top_k);
  canvas.tabIndex = 0;
  canvas.setAttribute('role', 'img');
  canvas.setAttribute('aria-label', `${title}: attention ${KIND_LABELS[state.kind]}, ${state.att.n} queries by ${state.att.m} keys. ` +
    'Arrow keys read cells; Enter enlarges.');
  const h = head ?? null;
  const enlarge = () => open_zoom(title, values, hidden, h, file);
  const bar = document.createElement('div');
  bar.className = 'map-actions';
  const zoom = button('Enlarge', `Enlarge ${title}`, enlarge);
  const png = button('PNG', `Download ${title} as PNG`, () => save_png(canvas, file));
  bar.append(zoom, png);
  fig.append(cap, canvas, bar);
  parent.insertBefore(fig, before);
  draw_heatmap(canvas, map_data(values, hidden),
    { width: room_of(fig), height: Math.max(240, Math.min(window.innerHeight * 0.8, 900)), max_cell: 40 });
  attach_hover(canvas, (i, j) => describe(h, i, j), enlarge);
  return fig;
}

// What a map's colours run over, as its caption says it.
export function scale_caption(values, vmax = vmax_of(values)) {
  return state.scale.per_row ? 'each row 0 to its maximum' : `scale 0 to ${vmax === 1 ? '1' : fixed(vmax, 3)}`;
}

// With top_k, the maps hold only each row's k largest weights.
function top_k_note() {
  return state.att.top_k ? `top ${state.att.top_k} of each row, other keys not returned` : '';
}

function button(text, label, on_click) {
  const b = document.createElement('button');
  b.type = 'button';
  b.textContent = text;
  b.setAttribute('aria-label', label);
  b.addEventListener('click', on_click);
  return b;
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

function head_card(container, i, figs) {
  const card = document.createElement('article');
  card.className = 'card head-card';
  card.style.setProperty('--head-colour', head_colour(i));
  container.append(card);
  const title = state.att.heads > 1 ? `Head ${i} (KV ${kv_head_of(i)})` : 'Map';
  // The figures first, so the map measures the room they leave.
  let dl = null;
  if (figs && typeof figs === 'object') {
    dl = document.createElement('dl');
    dl.className = 'figures';
    dl.setAttribute('aria-label', `Head ${i} analysis`);
    const known = new Set(FIGURES.map(([k]) => k));
    const rows = FIGURES.filter(([k]) => figs[k] !== undefined)
      .concat(Object.keys(figs).filter((k) => !known.has(k)).map((k) => [k, k]));
    for (const [k, label] of rows) {
      const dt = document.createElement('dt');
      dt.textContent = label;
      const dd = document.createElement('dd');
      dd.dataset.figure = k;
      if (k === 'pattern') {
        dd.textContent = pattern_label(figs);
        dd.dataset.servicePattern = String(figs.pattern);
        if (dd.textContent !== figs.pattern)
          dd.title = `The service says ${figs.pattern}; its confidence ${format_figure(figs.confidence)} is below ${FOCUSED_MIN_CONFIDENCE}`;
      } else {
        dd.textContent = format_figure(figs[k]);
      }
      dl.append(dt, dd);
    }
    card.append(dl);
  }
  return map_figure(card, { title, values: state.maps[i], hidden: state.hidden[i],
    file: `attention-head-${i}.png`, head: i }, dl);
}

export function kv_head_of(i) {
  const meta = state.cur?.meta || {};
  const h = meta.num_heads ?? state.att.heads;
  const g = meta.num_kv_heads ?? h;
  return Math.floor(i / Math.max(1, h / g));
}

// The analysis object for the drawn batch element, or null.
export function analysis() {
  const a = state.cur?.analysis;
  if (a == null) return null;
  if (Array.isArray(a)) return a[state.batch] ?? null;
  return typeof a === 'object' ? a : null;
}

export function render_heads() {
  const container = $('head-maps');
  container.replaceChildren();
  const an = analysis();
  for (let i = 0; i < state.maps.length; i++)
    head_card(container, i, an && Array.isArray(an.heads) ? an.heads[i] : null);
  $('legend-label').textContent = (state.kind === 'raw' ? state.scale.text
    : `${state.scale.text} (of ${KIND_LABELS[state.kind]})`) +
    (state.att.top_k ? `. top_k ${state.att.top_k}: keys outside a row's ${state.att.top_k} largest have no ` +
      'weight in the answer and are drawn as 0' : '');
  $('legend').dataset.scale = scale_name(state.scale);
  draw_legend($('legend'), 1, state.scale);

  const mean_card = $('mean-card');
  mean_card.replaceChildren();
  map_figure(mean_card, { title: 'Mean over heads', values: state.mean, hidden: mean_hidden(),
    file: 'attention-mean.png' });
  $('mean-section').hidden = state.maps.length < 2;
  draw_similarity(an);
}

// -- hover, keyboard and tooltip -------------------------------------------------

// Shows text beside client position (x, y): below and right of a mouse
// pointer, above a finger (touch), which hides what is under and below it;
// moved in where it would leave the window.
export function show_tooltip(text, x, y, touch = false) {
  const tip = $('tooltip');
  tip.textContent = text;
  tip.hidden = false;
  const pad = 14;
  const r = tip.getBoundingClientRect();
  let left = x + pad;
  let top = touch ? y - 2 * pad - r.height : y + pad;
  if (left + r.width > window.innerWidth - 4) left = Math.max(4, x - pad - r.width);
  if (top < 4) top = y + 2 * pad;
  if (top + r.height > window.innerHeight - 4) top = Math.max(4, y - pad - r.height);
  tip.style.left = `${left}px`;
  tip.style.top = `${top}px`;
}

// What a tap on a touch screen showed, { owner: the element tapped, what:
// the cell or dimension in it }, or null. Such a tooltip stays until a tap
// elsewhere: a finger has no hover to keep it up, and chromium's mouse
// events after a tap (a mouseleave among them) would hide it at once.
let pinned = null;

export function pin_tooltip(owner, what) {
  pinned = { owner, what };
}

function pinned_to(owner, what) {
  return pinned !== null && pinned.owner === owner && pinned.what === what;
}

export function hide_tooltip() {
  $('tooltip').hidden = true;
  pinned = null;
}

// A tap outside what showed the tooltip hides it, and so does a scroll
// (of the page or of a box in it), which would leave it beside nothing.
export function attach_tooltip() {
  document.addEventListener('pointerdown', (e) => {
    if (pinned && !pinned.owner.contains(e.target)) hide_tooltip();
  }, true);
  document.addEventListener('scroll', () => {
    if (pinned) hide_tooltip();
  }, { capture: true, passive: true });
}

// Whether the pointer pressed last on el was a finger: a tap's click then
// reads a cell rather than acting as a mouse's click does.
export function track_touch(el) {
  const t = { touch: false };
  el.addEventListener('pointerdown', (e) => { t.touch = e.pointerType === 'touch'; });
  return t;
}

// describe(i, j) gives the tooltip; on_cell(i, j) is told of every cell
// pointed at (the token view follows the query row of attention maps). A
// mouse hovers a cell to read it and clicks to enlarge; a finger taps a
// cell to read it and taps it again to enlarge.
export function attach_hover(canvas, describe_cell, enlarge, on_cell = follow_query) {
  const show_cell = (c, x, y, touch) => {
    set_cursor(canvas, c);
    show_tooltip(describe_cell(c.i, c.j), x, y, touch);
    on_cell?.(c.i, c.j);
  };
  // Shows what is at (x, y): a cell, a key's label or nothing; returns
  // the cell's "i,j", or null.
  const point = (x, y, touch) => {
    const c = cell_at(canvas, x, y);
    if (c) {
      show_cell(c, x, y, touch);
      return `${c.i},${c.j}`;
    }
    set_cursor(canvas, null);
    // Over a key's label: the token view shows who attends to it.
    const j = on_cell === follow_query ? column_at(canvas, x, y) : null;
    if (j === null) {
      hide_tooltip();
      return null;
    }
    show_tooltip(`key ${token(state.cols, j)}: the token view shows the queries that attend to it most`,
      x, y, touch);
    follow_key(j);
    return null;
  };
  canvas.addEventListener('pointermove', (e) => {
    if (e.pointerType !== 'touch') point(e.clientX, e.clientY, false);
  });
  // A finger lifted leaves too: what its tap showed stays.
  canvas.addEventListener('pointerleave', (e) => {
    if (e.pointerType === 'touch') return;
    set_cursor(canvas, null);
    hide_tooltip();
  });
  const last = track_touch(canvas);
  canvas.addEventListener('click', (e) => {
    if (!last.touch) {
      enlarge();
      return;
    }
    const c = cell_at(canvas, e.clientX, e.clientY);
    if (c && pinned_to(canvas, `${c.i},${c.j}`)) {
      enlarge();
      return;
    }
    const what = point(e.clientX, e.clientY, true);
    if (what !== null || !$('tooltip').hidden) pin_tooltip(canvas, what);
  });
  arrow_keys(canvas, () => ({ n: canvas.heatmap.map.n, m: canvas.heatmap.map.m, cursor: canvas.heatmap.cursor }),
    (c) => {
      if (c) {
        const p = cell_centre(canvas, c.i, c.j);
        show_cell(c, p.x, p.y);
      } else {
        set_cursor(canvas, null);
        hide_tooltip();
      }
    }, enlarge);
}

// The keyboard over a focusable element el drawn as n x m cells (a map,
// the neuron view): the arrow keys move a cursor from the cell last shown
// (else the first), Shift 10 at a time, and the cell's tooltip, which
// show(c) shows beside cell c = { i, j }, is said by the #cell-live
// region; Enter or Space calls act, when given. Escape, and the focus
// leaving, call show(null) to hide it. grid() gives { n, m, cursor: the
// cell shown, or null }.
export function arrow_keys(el, grid, show, act = null) {
  el.addEventListener('keydown', (e) => {
    const { n, m, cursor } = grid();
    const step = e.shiftKey ? 10 : 1;
    let { i, j } = cursor ?? { i: 0, j: 0 };
    switch (e.key) {
      case 'ArrowUp': i -= step; break;
      case 'ArrowDown': i += step; break;
      case 'ArrowLeft': j -= step; break;
      case 'ArrowRight': j += step; break;
      case 'Enter': case ' ':
        if (!act) return;
        e.preventDefault();
        act();
        return;
      case 'Escape': show(null); return;
      default: return;
    }
    e.preventDefault();
    show({ i: Math.max(0, Math.min(n - 1, i)), j: Math.max(0, Math.min(m - 1, j)) });
    $('cell-live').textContent = $('tooltip').textContent;
  });
  el.addEventListener('blur', () => show(null));
}

function follow_key(j) {
  if (state.focus?.kind === 'key' && state.focus.index === j) return;
  state.focus = { kind: 'key', index: j };
  redraw_lines(true);
}

function follow_query(i) {
  if (state.focus?.kind === 'query' && state.focus.index === i) return;
  state.focus = { kind: 'query', index: i };
  redraw_lines(true);
}

// -- zoom ---------------------------------------------------------------------

export function open_zoom(title, values, hidden, head, file) {
  const dlg = $('zoom');
  hide_tooltip();
  $('zoom-title').textContent = title;
  dlg.dataset.layer = state.layers ? String(state.layer) : '';
  dlg.dataset.head = head === null ? '' : String(head);
  // The same caption as the map's own, and a colour bar in weights (the
  // page's legend is behind the dialog).
  $('zoom-caption').textContent = [top_k_note(), scale_caption(values)].filter(Boolean).join(' \u00b7 ');
  $('zoom-legend').dataset.scale = scale_name(state.scale);
  draw_legend($('zoom-legend'), state.scale.per_row ? 1 : vmax_of(values), state.scale);
  const body = $('zoom-body');
  body.replaceChildren();
  const canvas = document.createElement('canvas');
  canvas.tabIndex = 0;
  canvas.setAttribute('role', 'img');
  canvas.setAttribute('aria-label', `${title}, enlarged. Arrow keys read cells.`);
  canvas.dataset.view = 'zoom';
  const png = button('Download PNG', `Download ${title} as PNG`,
    () => save_png(canvas, file.replace('.png', '-large.png')));
  body.append(canvas, png);
  // A modal dialog sits in the top layer, above any z-index: the tooltip
  // has to live inside it while it is open.
  dlg.append($('tooltip'));
  if (!dlg.open) dlg.showModal();
  // The dialog is at most 95vw wide, less its padding and border.
  const width = Math.max(200, Math.min(window.innerWidth * 0.95 - 40, 1100));
  draw_heatmap(canvas, map_data(values, hidden),
    { width, height: Math.max(300, window.innerHeight - 190), max_cell: 48 });
  attach_hover(canvas, (i, j) => describe(head, i, j), () => {});
  canvas.focus();
}

// -- token view ------------------------------------------------------------------

// Heads the token view draws when an answer arrives: more lines than this
// from one token no longer read apart. The others are a tick away.
export const LINE_HEADS = 12;

export function draw_line_heads() {
  const box = $('line-heads');
  box.querySelectorAll('label').forEach((l) => l.remove());
  const h = state.maps.length;
  box.querySelector('legend').textContent = h > LINE_HEADS
    ? `Heads drawn (the first ${LINE_HEADS} of ${h} at first; tick others to add them)` : 'Heads drawn';
  for (let i = 0; i < state.maps.length; i++) {
    const label = document.createElement('label');
    const cb = document.createElement('input');
    cb.type = 'checkbox';
    cb.checked = state.line_heads.has(i);
    cb.dataset.head = String(i);
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

// The token view's maps: weights, or in the norm-based modes the
// row-renormalised norm-based weights (so lines keep opacity = share).
function line_maps() {
  return state.kind === 'raw' ? state.maps : state.line_maps;
}

export function redraw_lines(scroll = false) {
  if (!state.att) return;
  const canvas = $('lines');
  const heads = [...state.line_heads].filter((h) => h < state.maps.length).sort((a, b) => a - b);
  // The links a head the box asks for, a whole number within its range
  // (1 to 64); 6 while it is empty.
  const box = $('links');
  const asked = box.value.trim() === '' ? 6 : Math.floor(Number(box.value));
  const links = Number.isFinite(asked) ? Math.min(Number(box.max), Math.max(Number(box.min), asked)) : 6;
  draw_lines(canvas, { rows: state.rows, cols: state.cols, n: state.att.n, m: state.att.m,
    maps: line_maps(), heads, focus: state.focus, links, width: room_of($('lines-wrap'), 420) - 2 });
  const f = state.focus;
  canvas.setAttribute('aria-label', !f ? 'Token view'
    : f.kind === 'query' ? `Token view: the keys query ${token(state.rows, f.index)} attends most, heads ${heads.join(', ')}`
      : `Token view: the queries that attend most to key ${token(state.cols, f.index)}, heads ${heads.join(', ')}`);
  // Keep the focused row in sight when a map drives the view.
  if (scroll && f) {
    const wrap = $('lines-wrap');
    const y = canvas.lines.top + (f.index + 0.5) * canvas.lines.row_h;
    if (y < wrap.scrollTop || y > wrap.scrollTop + wrap.clientHeight)
      wrap.scrollTop = Math.max(0, y - wrap.clientHeight / 2);
  }
}

export function attach_lines() {
  const canvas = $('lines');
  canvas.addEventListener('mousemove', (e) => {
    const f = focus_at(canvas, e.clientX, e.clientY);
    if (f && (f.kind !== state.focus?.kind || f.index !== state.focus?.index)) {
      state.focus = f;
      redraw_lines();
    }
  });
  canvas.addEventListener('keydown', (e) => {
    if (!state.att) return;
    const f = state.focus ?? { kind: 'query', index: 0 };
    const count = f.kind === 'query' ? state.att.n : state.att.m;
    let { kind, index } = f;
    switch (e.key) {
      case 'ArrowUp': index--; break;
      case 'ArrowDown': index++; break;
      case 'ArrowLeft': kind = 'query'; break;
      case 'ArrowRight': kind = state.att.m > 0 ? 'key' : kind; break;
      default: return;
    }
    e.preventDefault();
    const limit = (kind === 'query' ? state.att.n : state.att.m) - 1;
    state.focus = { kind, index: Math.max(0, Math.min(limit, kind === f.kind ? index : Math.min(index, count - 1))) };
    redraw_lines(true);
  });
}

// -- similarity ------------------------------------------------------------------

function draw_similarity(an) {
  const sec = $('similarity-section');
  const sim = an?.similarity;
  const h = state.maps.length;
  // One head has nothing to compare with.
  if (h < 2 || !Array.isArray(sim) || sim.length !== h || !sim.every((r) => Array.isArray(r) && r.length === h)) {
    sec.hidden = true;
    return;
  }
  sec.hidden = false;
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
  const cap = document.createElement('p');
  cap.className = 'hint';
  cap.textContent = `0 = identical rows; scale 0 to ${fixed(mx, 3)} (ln 2 \u2248 0.693 is the maximum).` +
    (an.skipped_rows ? ` ${an.skipped_rows} fully masked rows skipped.` : '');
  const card = $('similarity-card');
  card.replaceChildren(canvas, cap);
  draw_heatmap(canvas, { values, n: h, m: h, rows: labels, cols: labels, vmax: mx > 0 ? mx : 1,
    scale: { kind: 'linear' } }, { width: Math.min(room_of(card), 420), height: 420 });
  attach_hover(canvas, (i, j) => `head ${i} vs head ${j} \u00b7 divergence ${fixed(values[i * h + j], 4)}`,
    () => {}, null);
}

// -- exports -------------------------------------------------------------------

export function download(blob, name) {
  const url = URL.createObjectURL(blob);
  const a = document.createElement('a');
  a.href = url;
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

export function save_png(canvas, name) {
  canvas.toBlob((blob) => {
    if (blob) download(blob, name);
  }, 'image/png');
}
