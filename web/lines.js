// lines.js: the BertViz-style token view. Query tokens on the left, keys on
// the right; from the selected query a line goes to every key, one colour
// per head, with opacity equal to the weight.

// Categorical colours for heads (Okabe-Ito first: distinguishable with the
// common colour-vision deficiencies), cycled past twelve heads.
export const HEAD_COLOURS = [
  '#0072b2', '#e69f00', '#009e73', '#cc79a7', '#d55e00', '#56b4e9',
  '#b8a000', '#000000', '#7f3c8d', '#11a579', '#e73f74', '#3969ac',
];

export function head_colour(i) {
  return HEAD_COLOURS[i % HEAD_COLOURS.length];
}

const FONT = 'system-ui, -apple-system, "Segoe UI", sans-serif';

// Draws the view.
//   view: { rows: [n] labels, cols: [m] labels, n, m,
//           maps: [h] arrays of n*m weights, heads: indices to draw,
//           query: selected row or null }
// Keeps the layout on canvas.lines for row_at().
export function draw_lines(canvas, view) {
  const { n, m } = view;
  const rows = Math.max(n, m);
  const row_h = rows <= 40 ? 20 : Math.max(2, Math.floor(800 / rows));
  const labelled = row_h >= 10;
  const ctx = canvas.getContext('2d');
  ctx.font = `12px ${FONT}`;
  const widest = (labels) => labels.reduce(
    (w, s) => Math.max(w, ctx.measureText(String(s)).width), 0);
  const lw = labelled ? Math.min(140, Math.ceil(Math.max(widest(view.rows), widest(view.cols)))) + 12 : 40;
  const gap = 200;
  canvas.width = lw * 2 + gap;
  canvas.height = rows * row_h + 16;
  const top = 8;
  const x_left = lw;
  const x_right = lw + gap;
  const y_of = (i) => top + (i + 0.5) * row_h;

  ctx.fillStyle = '#ffffff';
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  ctx.font = `12px ${FONT}`;
  ctx.textBaseline = 'middle';

  const q = view.query;
  if (q !== null && q >= 0 && q < n) {
    ctx.fillStyle = '#ffe08a';
    ctx.fillRect(0, top + q * row_h, lw - 4, row_h);
    ctx.lineWidth = Math.max(1, Math.min(3, row_h / 6));
    for (const h of view.heads) {
      const w = view.maps[h];
      ctx.strokeStyle = head_colour(h);
      for (let j = 0; j < m; j++) {
        const a = w[q * m + j];
        if (!(a > 0.002)) continue;
        ctx.globalAlpha = Math.min(1, a);
        ctx.beginPath();
        ctx.moveTo(x_left, y_of(q));
        ctx.lineTo(x_right, y_of(j));
        ctx.stroke();
      }
    }
    ctx.globalAlpha = 1;
  }

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
    ctx.textAlign = 'right';
    if (q !== null) ctx.fillText(String(q), x_left - 10, y_of(q));
  }
  canvas.lines = { top, row_h, n, x_left };
}

function clip(s) {
  const t = String(s);
  return t.length > 18 ? t.slice(0, 17) + '\u2026' : t;
}

// The query row at a client y position over the left half, or null.
export function row_at(canvas, client_x, client_y) {
  const l = canvas.lines;
  if (!l) return null;
  const rect = canvas.getBoundingClientRect();
  const x = (client_x - rect.left) * (canvas.width / rect.width);
  const y = (client_y - rect.top) * (canvas.height / rect.height);
  if (x > l.x_left + 20) return null;
  const i = Math.floor((y - l.top) / l.row_h);
  return i >= 0 && i < l.n ? i : null;
}
