// lines.js: the BertViz-style token view. Query tokens on the left, keys on
// the right. With a query in focus, lines go to the keys it attends most;
// with a key in focus (hovering the right column), lines come from the
// queries that attend to it most. One colour per head; opacity and width
// follow the weight. Only the strongest links are drawn (per head, the
// `links` largest weights of at least MIN_LINK), so long inputs stay
// readable; rows keep a legible height and the view scrolls.

// 24 categorical colours for heads: Okabe-Ito first (distinguishable with
// the common colour-vision deficiencies), then colours picked greedily to
// be as far as possible (CIEDE2000) from all earlier ones, with a CIELAB
// lightness of 22-72 so lines show on white. Any two of the first 16 are
// at least 26 apart in CIELAB (Delta E 1976). Heads past 24 repeat a colour
// and are drawn dashed.
export const HEAD_COLOURS = [
  '#0072b2', '#e69f00', '#009e73', '#cc79a7', '#d55e00', '#56b4e9',
  '#000000', '#6900a5', '#5a5a00', '#87001e', '#96b400', '#004b4b',
  '#695a69', '#a5a596', '#ff1e4b', '#9669ff', '#783c00', '#d29687',
  '#b41e78', '#a5a5c3', '#1e3c69', '#00692d', '#96784b', '#2dc3c3',
];

export function head_colour(i) {
  return HEAD_COLOURS[i % HEAD_COLOURS.length];
}

// Links of weight below this are never drawn.
export const MIN_LINK = 0.01;

const FONT = 'system-ui, -apple-system, "Segoe UI", sans-serif';
// Chromium refuses canvases taller than 32767 pixels.
const MAX_BACKING = 32000;

// The drawn links: per head, the `k` largest weights among the cells of
// the focused row (query) or column (key), at least MIN_LINK each.
// Returns [[head, query, key, weight], ...].
export function strongest_links(view) {
  const { n, m, focus } = view;
  const out = [];
  if (!focus) return out;
  const k = Math.max(1, view.links ?? 6);
  for (const h of view.heads) {
    const w = view.maps[h];
    const cand = [];
    if (focus.kind === 'key') {
      if (focus.index >= m) continue;
      for (let i = 0; i < n; i++) cand.push([i, focus.index, w[i * m + focus.index]]);
    } else {
      if (focus.index >= n) continue;
      for (let j = 0; j < m; j++) cand.push([focus.index, j, w[focus.index * m + j]]);
    }
    cand.sort((a, b) => b[2] - a[2] || a[0] - b[0] || a[1] - b[1]);
    for (const [i, j, a] of cand.slice(0, k)) if (a >= MIN_LINK) out.push([h, i, j, a]);
  }
  return out;
}

// Draws the view.
//   view: { rows: [n] labels, cols: [m] labels, n, m,
//           maps: [h] arrays of n*m weights (or norm-based values scaled
//           to [0, 1] by the caller), heads: indices to draw,
//           focus: { kind: 'query' | 'key', index } or null,
//           links: per-head link count, width: CSS pixels available }
// Keeps the layout on canvas.lines for focus_at().
export function draw_lines(canvas, view) {
  const { n, m } = view;
  const dpr = window.devicePixelRatio || 1;
  const rows = Math.max(n, m, 1);
  const row_h = Math.max(3, Math.min(18, Math.floor(MAX_BACKING / dpr / (rows + 2))));
  const labelled = row_h >= 12;
  const measure = canvas.getContext('2d');
  measure.font = `12px ${FONT}`;
  const widest = (labels) => labels.reduce(
    (w, s) => Math.max(w, measure.measureText(clip(s)).width), 0);
  const lw = labelled ? Math.min(140, Math.ceil(Math.max(widest(view.rows), widest(view.cols)))) + 12 : 44;
  const width = Math.max(lw * 2 + 120, Math.floor(view.width ?? 420));
  const height = rows * row_h + 16;
  canvas.width = Math.round(width * dpr);
  canvas.height = Math.round(height * dpr);
  canvas.style.width = `${width}px`;
  canvas.style.height = `${height}px`;
  const ctx = canvas.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  const top = 8;
  const x_left = lw;
  const x_right = width - lw;
  const y_of = (i) => top + (i + 0.5) * row_h;

  ctx.fillStyle = '#ffffff';
  ctx.fillRect(0, 0, width, height);
  ctx.font = `12px ${FONT}`;
  ctx.textBaseline = 'middle';

  const f = view.focus;
  const links = strongest_links(view);
  if (f) {
    ctx.fillStyle = '#ffe08a';
    if (f.kind === 'key') ctx.fillRect(x_right + 4, top + f.index * row_h, lw - 4, row_h);
    else ctx.fillRect(0, top + f.index * row_h, lw - 4, row_h);
  }
  for (const [h, i, j, a] of links) {
    ctx.strokeStyle = head_colour(h);
    ctx.setLineDash(h >= 24 ? [4, 3] : []);
    ctx.globalAlpha = Math.max(0.15, Math.min(1, a));
    ctx.lineWidth = 1 + 3 * Math.min(1, a);
    ctx.beginPath();
    ctx.moveTo(x_left, y_of(i));
    ctx.lineTo(x_right, y_of(j));
    ctx.stroke();
  }
  ctx.setLineDash([]);
  ctx.globalAlpha = 1;

  // Labels: all of them when rows are tall enough, else ticks and the
  // labels of the rows that take part in a link.
  ctx.fillStyle = '#1d1d1f';
  if (labelled) {
    ctx.textAlign = 'right';
    for (let i = 0; i < n; i++) ctx.fillText(clip(view.rows[i]), x_left - 6, y_of(i));
    ctx.textAlign = 'left';
    for (let j = 0; j < m; j++) ctx.fillText(clip(view.cols[j]), x_right + 6, y_of(j));
  } else {
    ctx.fillStyle = '#8a8a8e';
    for (let i = 0; i < n; i++) ctx.fillRect(x_left - 8, y_of(i) - 0.5, 6, 1);
    for (let j = 0; j < m; j++) ctx.fillRect(x_right + 2, y_of(j) - 0.5, 6, 1);
    ctx.fillStyle = '#1d1d1f';
    ctx.font = `10px ${FONT}`;
    const qs = new Set(links.map((l) => l[1]));
    const ks = new Set(links.map((l) => l[2]));
    ctx.textAlign = 'right';
    for (const i of qs) ctx.fillText(String(i), x_left - 10, y_of(i));
    ctx.textAlign = 'left';
    for (const j of ks) ctx.fillText(String(j), x_right + 10, y_of(j));
  }
  canvas.lines = { top, row_h, n, m, x_left, x_right, dpr };
  canvas.dataset.focus = f ? `${f.kind}:${f.index}` : '';
  canvas.dataset.links = JSON.stringify(links.map(([h, i, j, a]) => [h, i, j, Number(a.toFixed(6))]));
  canvas.dataset.rowHeight = String(row_h);
  canvas.dataset.top = String(top);
  canvas.dataset.xLeft = String(x_left);
  canvas.dataset.xRight = String(x_right);
}

function clip(s) {
  const t = String(s);
  return t.length > 18 ? t.slice(0, 17) + '\u2026' : t;
}

// The focus under a client position: a query over the left labels, a key
// over the right labels, or null between them.
export function focus_at(canvas, client_x, client_y) {
  const l = canvas.lines;
  if (!l) return null;
  const rect = canvas.getBoundingClientRect();
  const x = (client_x - rect.left) * (canvas.width / rect.width) / l.dpr;
  const y = (client_y - rect.top) * (canvas.height / rect.height) / l.dpr;
  const i = Math.floor((y - l.top) / l.row_h);
  if (x <= l.x_left + 20) return i >= 0 && i < l.n ? { kind: 'query', index: i } : null;
  if (x >= l.x_right - 20) return i >= 0 && i < l.m ? { kind: 'key', index: i } : null;
  return null;
}
