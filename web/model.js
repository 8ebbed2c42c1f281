// model.js: the model view of a `layers` answer: a layers x heads grid of
// thumbnails (clicking one shows that layer below and opens that head's
// map), and the attention rollout (Abnar and Zuidema 2020) when the answer
// has one.

import { $, state, token, room_of, plural, fixed } from './state.js';
import { draw_heatmap } from './heatmap.js';
import { attach_hover, scale_caption } from './views.js';
import { tensor_of, slice_of } from './api.js';

const LABEL_W = 64; // CSS pixels for the "layer l" labels

// layer_maps(l): { maps: [h] n*m raw weights for the drawn batch element,
// hidden: [h] masks or null, n, m }. on_pick(l, h): a thumbnail was chosen.
export function render_model(layer_maps, on_pick) {
  const sec = $('model-section');
  if (!state.layers) {
    sec.hidden = true;
    return;
  }
  sec.hidden = false;
  const L = state.layers.length;
  const grid = $('model-grid');
  grid.replaceChildren();
  const first = layer_maps(0);
  const h = first.maps.length;
  const room = room_of(grid, 800);
  const side = Math.max(28, Math.min(110, Math.floor((room - LABEL_W) / Math.max(1, h)) - 6));
  $('model-caption').textContent = `${plural(L, 'layer')} \u00d7 ${plural(h, 'head')}, each map scaled 0 to its own maximum. ` +
    'Click a map to draw that layer below and enlarge the head.';
  // Column labels: which head each column is.
  const header = document.createElement('div');
  header.className = 'model-row model-header';
  const corner = document.createElement('span');
  corner.className = 'model-label';
  corner.textContent = 'head';
  header.append(corner);
  for (let i = 0; i < h; i++) {
    const cell = document.createElement('span');
    cell.className = 'model-head';
    cell.dataset.head = String(i);
    cell.textContent = String(i);
    header.append(cell);
  }
  grid.append(header);
  for (let l = 0; l < L; l++) {
    const row = document.createElement('div');
    row.className = 'model-row';
    row.dataset.layer = String(l);
    if (l === state.layer) row.classList.add('current');
    const label = document.createElement('span');
    label.className = 'model-label';
    label.textContent = `layer ${l}`;
    row.append(label);
    grid.append(row);
    const lm = l === 0 ? first : layer_maps(l);
    for (let i = 0; i < lm.maps.length; i++) {
      const c = document.createElement('canvas');
      c.dataset.layer = String(l);
      c.dataset.head = String(i);
      c.className = 'thumb';
      c.tabIndex = 0;
      c.setAttribute('role', 'button');
      c.setAttribute('aria-label', `Layer ${l}, head ${i}: open its map`);
      c.title = `layer ${l}, head ${i}`;
      row.append(c);
      let mx = 0;
      for (const v of lm.maps[i]) if (v > mx) mx = v;
      draw_heatmap(c, { values: lm.maps[i], n: lm.n, m: lm.m, rows: [], cols: [],
        vmax: mx > 0 ? mx : 1, scale: { ...state.scale, per_row: state.scale.per_row, unit: false },
        hidden: lm.hidden[i] }, { width: side, height: side, thumb: true });
      // A thumbnail takes whole pixels per cell (and at least 40), so it is
      // seldom `side` wide: the head labels take the width it was drawn at.
      if (l === 0 && i === 0) grid.style.setProperty('--thumb', c.style.width);
      const pick = () => on_pick(l, i);
      c.addEventListener('click', pick);
      c.addEventListener('keydown', (e) => {
        if (e.key === 'Enter' || e.key === ' ') {
          e.preventDefault();
          pick();
        }
      });
    }
  }
  render_rollout();
}

function render_rollout() {
  const box = $('rollout-card');
  const t = tensor_of(state.resp?.rollout);
  if (!t) {
    $('rollout-section').hidden = true;
    box.replaceChildren();
    return;
  }
  $('rollout-section').hidden = false;
  const r = t.shape.length === 3 ? slice_of(t, [state.batch]) : t;
  const n = r.shape[0];
  const m = r.shape[1];
  if (r.shape.length !== 2 || n !== m) throw new Error(`rollout of shape [${t.shape}]`);
  const canvas = document.createElement('canvas');
  canvas.dataset.rollout = 'true';
  canvas.tabIndex = 0;
  canvas.setAttribute('role', 'img');
  canvas.setAttribute('aria-label', `Attention rollout over ${state.layers.length} layers, ${n} by ${n} tokens`);
  let mx = 0;
  for (const v of r.values) if (v > mx) mx = v;
  // Captioned like every other map.
  const fig = document.createElement('figure');
  fig.className = 'map';
  const cap = document.createElement('figcaption');
  cap.textContent = `Rollout \u00b7 ${scale_caption(r.values, mx > 0 ? mx : 1)}`;
  fig.append(cap, canvas);
  box.replaceChildren(fig);
  const rows = state.rows.length === n ? state.rows : Array.from({ length: n }, (_, i) => String(i));
  draw_heatmap(canvas, { values: r.values, n, m, rows, cols: rows, vmax: mx > 0 ? mx : 1,
    scale: { ...state.scale, unit: false } },
  { width: Math.min(room_of(box), 640), height: 640 });
  attach_hover(canvas, (i, j) => `rollout \u00b7 query ${token(rows, i)} \u2192 key ${token(rows, j)} \u00b7 ` +
    `share ${fixed(r.values[i * m + j], 4)}`, () => {}, null);
}
