// neuron.js: the neuron view (after BertViz's), from an answer with q and k
// (`return_qk: true`). For one query and one key it shows, per head, the
// query vector, the key vector (of the head's KV head), their element-wise
// product and the score scale * (q . k), so the dimensions that make a
// weight large stand out. Vectors are those of the contract's step 4
// (after qk_norm and RoPE); the score is before softcap, bias and ALiBi.

import { $, state, token, fixed } from './state.js';
import { tensor_of, slice_of } from './api.js';
import { kv_head_of, show_tooltip, hide_tooltip, pin_tooltip, track_touch, arrow_keys } from './views.js';

// The heads and dimensions drawn, and the column pointed at, { i: head,
// j: column (a dimension, or its rank when they are ordered) } or null:
// the cells are a grid of heads by dimensions for the keyboard, each
// showing the q, k and product of one dimension of one head.
const drawn = { heads: 0, dims: 0, cursor: null };

// Diverging colour of v in [-1, 1]: blue below zero, red above, white at 0.
function diverging(v) {
  const t = Math.max(-1, Math.min(1, v));
  const [r, g, b] = t >= 0 ? [178, 24, 43] : [33, 102, 172];
  const a = Math.abs(t);
  const mix = (c) => Math.round(255 + (c - 255) * a);
  return `rgb(${mix(r)}, ${mix(g)}, ${mix(b)})`;
}

function fmt(v) {
  return Math.abs(v) >= 100 ? v.toFixed(1) : v.toFixed(3);
}

function fill_select(sel, labels, want) {
  const same = sel.options.length === labels.length &&
    [...sel.options].every((o, i) => o.dataset.label === labels[i]);
  if (!same) {
    sel.replaceChildren();
    labels.forEach((s, i) => {
      const o = document.createElement('option');
      o.value = String(i);
      o.dataset.label = s;
      o.textContent = `${i}: ${s}`;
      sel.append(o);
    });
    sel.value = String(want);
  }
}

// The vectors of the drawn answer: { q: [h][n][d], k: [g][m][d] } slices
// for the drawn batch element, or null when the answer has none.
function vectors() {
  const q = tensor_of(state.cur?.q);
  const k = tensor_of(state.cur?.k);
  if (!q || !k) return null;
  const qb = q.shape.length === 4 ? slice_of(q, [state.batch]) : q;
  const kb = k.shape.length === 4 ? slice_of(k, [state.batch]) : k;
  if (!qb || !kb || qb.shape.length !== 3 || kb.shape.length !== 3) return null;
  return { q: qb, k: kb };
}

export function render_neuron() {
  const sec = $('neuron-section');
  const v = state.att ? vectors() : null;
  if (!v) {
    sec.hidden = true;
    return;
  }
  sec.hidden = false;
  const [h, n, d] = v.q.shape;
  const m = v.k.shape[1];
  const rows = state.rows.length === n ? state.rows : state.rows.slice(0, n);
  const cols = state.cols.length === m ? state.cols : state.cols.slice(0, m);
  const qsel = $('neuron-query');
  const ksel = $('neuron-key');
  const q0 = state.focus?.kind === 'query' ? state.focus.index : 0;
  fill_select(qsel, rows, Math.min(q0, n - 1));
  // Default key: where the mean map's row of the query peaks.
  const qi = Math.min(n - 1, Number(qsel.value) || 0);
  let best = 0;
  if (state.mean) for (let j = 1; j < m; j++)
    if (state.raw_mean[qi * m + j] > state.raw_mean[qi * m + best]) best = j;
  fill_select(ksel, cols, best);
  const kj = Math.min(m - 1, Number(ksel.value) || 0);
  const scale = Number.isFinite(state.eff?.scale) && state.eff.scale > 0 ? state.eff.scale : 1 / Math.sqrt(d);
  const sorted = $('neuron-sort').checked;

  const box = $('neuron-heads');
  box.replaceChildren();
  Object.assign(drawn, { heads: h, dims: d, cursor: null });
  box.setAttribute('aria-label', `q, k and their product for ${h === 1 ? '1 head' : `${h} heads`} ` +
    `by ${d} dimensions. Arrow keys read a dimension: left and right along the dimensions, up and down across the heads.`);
  $('neuron-caption').textContent = `Query ${token(rows, qi)}, key ${token(cols, kj)}: ` +
    `score = ${fmt(scale)} \u00d7 (q \u00b7 k), d_k = ${d}. ` +
    'Cells: red positive, blue negative, each row scaled to its largest magnitude; hover or tap a cell ' +
    'for its values (or focus the cells and use the arrow keys).';
  for (let i = 0; i < h; i++) {
    const g = kv_head_of(i);
    const qv = v.q.values.subarray((i * n + qi) * d, (i * n + qi + 1) * d);
    const kv = v.k.values.subarray((g * m + kj) * d, (g * m + kj + 1) * d);
    const prod = Array.from(qv, (x, c) => x * kv[c]);
    const dot = prod.reduce((a, b) => a + b, 0);
    const score = scale * dot;
    const weight = state.raw[i]?.[qi * state.att.m + kj];
    const el = document.createElement('div');
    el.className = 'neuron-head';
    el.dataset.neuronHead = String(i);
    el.dataset.kvHead = String(g);
    el.dataset.dot = String(dot);
    el.dataset.score = String(score);
    if (weight !== undefined) el.dataset.weight = String(weight);
    const title = document.createElement('div');
    title.className = 'neuron-title';
    const order = prod.map((p, c) => [p, c]).sort((a, b) => Math.abs(b[0]) - Math.abs(a[0]));
    const top = order.slice(0, 3).map(([p, c]) => `dim ${c} (${p >= 0 ? '+' : '\u2212'}${fmt(Math.abs(p))})`);
    title.textContent = `Head ${i} (KV ${g}): q \u00b7 k = ${fmt(dot)}, score ${fmt(score)}` +
      (weight !== undefined ? `, weight ${fixed(weight, 4)}` : '') +
      `. Largest products: ${top.join(', ')}`;
    el.append(title);
    const strip = document.createElement('div');
    strip.className = 'neuron-strip';
    strip.style.setProperty('--dims', String(d));
    const dims = sorted ? order.map(([, c]) => c) : Array.from({ length: d }, (_, c) => c);
    for (const [name, vec] of [['q', qv], ['k', kv], ['prod', prod]]) {
      const label = document.createElement('span');
      label.className = 'neuron-label';
      label.textContent = name === 'prod' ? 'q\u2218k' : name;
      strip.append(label);
      let mx = 0;
      for (const x of vec) mx = Math.max(mx, Math.abs(x));
      const row = document.createElement('span');
      row.className = 'neuron-row';
      row.dataset.row = name;
      for (const c of dims) {
        const cell = document.createElement('span');
        cell.className = 'neuron-cell';
        cell.dataset.dim = String(c);
        cell.dataset.value = String(vec[c]);
        cell.style.background = diverging(mx > 0 ? vec[c] / mx : 0);
        row.append(cell);
      }
      strip.append(row);
    }
    el.append(strip);
    box.append(el);
  }
}

// A dimension's values, as a cell of it (q, k or product) tells them.
function describe_dim(cell) {
  const head = cell.closest('.neuron-head');
  const d = cell.dataset.dim;
  const value = (row) => fmt(Number(head.querySelector(`[data-row="${row}"] [data-dim="${d}"]`).dataset.value));
  return `head ${head.dataset.neuronHead} \u00b7 dim ${d}: q ${value('q')} \u00b7 k ${value('k')} \u00b7 ` +
    `q\u2218k ${value('prod')}`;
}

// The cells of column c.j of head c.i: q, k and product, top to bottom.
function column_cells(c) {
  const head = $('neuron-heads').querySelector(`[data-neuron-head="${c.i}"]`);
  return [...head.querySelectorAll('.neuron-row')].map((row) => row.children[c.j]);
}

// The column of a cell, { i, j }.
function column_of(cell) {
  return { i: Number(cell.closest('.neuron-head').dataset.neuronHead),
    j: Array.prototype.indexOf.call(cell.parentElement.children, cell) };
}

// Outlines column c and shows its values in the tooltip, beside client
// position at (a pointer's; else the column's middle cell); c null: none.
function point_at(c, at = null) {
  for (const el of $('neuron-heads').querySelectorAll('.neuron-cell.cursor')) el.classList.remove('cursor');
  drawn.cursor = c;
  if (!c) {
    hide_tooltip();
    return;
  }
  const cells = column_cells(c);
  for (const el of cells) el.classList.add('cursor');
  const r = cells[1].getBoundingClientRect();
  const { x, y, touch } = at ?? { x: r.left + r.width / 2, y: r.top + r.height / 2, touch: false };
  show_tooltip(describe_dim(cells[1]), x, y, touch);
}

// The values of the dimension pointed at, in the maps' tooltip: hovered
// with a mouse, tapped on a touch screen (where a title attribute never
// shows), or read with the arrow keys as a map's cells are.
export function attach_neuron() {
  const box = $('neuron-heads');
  const cell_of = (e) => e.target.closest('.neuron-cell');
  box.addEventListener('pointermove', (e) => {
    if (e.pointerType === 'touch') return;
    const cell = cell_of(e);
    point_at(cell && column_of(cell), { x: e.clientX, y: e.clientY, touch: false });
  });
  box.addEventListener('pointerleave', (e) => {
    if (e.pointerType !== 'touch') point_at(null);
  });
  const last = track_touch(box);
  box.addEventListener('click', (e) => {
    const cell = cell_of(e);
    if (!last.touch || !cell) return;
    point_at(column_of(cell), { x: e.clientX, y: e.clientY, touch: true });
    pin_tooltip(box, cell);
  });
  arrow_keys(box, () => ({ n: drawn.heads, m: drawn.dims, cursor: drawn.cursor }), (c) => point_at(c));
}
