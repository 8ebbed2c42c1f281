// heatmap.js: draws an n x m weight matrix into a canvas with token labels,
// a colour legend, and maps pointer positions back to cells. Pixels are
// written straight into one ImageData per map, so n = 512 costs about as
// much as copying a 512 x 512 image.

// viridis at 0, 0.1, .. 1 (matplotlib): perceptually uniform, and its
// lightness rises monotonically, so it still reads in greyscale.
const VIRIDIS = [
  [0x44, 0x01, 0x54], [0x48, 0x24, 0x75], [0x41, 0x44, 0x87],
  [0x35, 0x5f, 0x8d], [0x2a, 0x78, 0x8e], [0x21, 0x91, 0x8c],
  [0x22, 0xa8, 0x84], [0x44, 0xbf, 0x70], [0x7a, 0xd1, 0x51],
  [0xbd, 0xdf, 0x26], [0xfd, 0xe7, 0x25],
];

// 256 RGB triples interpolated between the stops above.
const LUT = (() => {
  const lut = new Uint8Array(256 * 3);
  for (let k = 0; k < 256; k++) {
    const t = (k / 255) * (VIRIDIS.length - 1);
    const i = Math.min(Math.floor(t), VIRIDIS.length - 2);
    const f = t - i;
    for (let c = 0; c < 3; c++)
      lut[k * 3 + c] = Math.round(VIRIDIS[i][c] * (1 - f) + VIRIDIS[i + 1][c] * f);
  }
  return lut;
})();

// The same colours as RGBA words for ImageData, opaque.
const LUT32 = (() => {
  const words = new Uint32Array(256);
  const bytes = new Uint8Array(words.buffer);
  for (let k = 0; k < 256; k++) {
    bytes[k * 4] = LUT[k * 3];
    bytes[k * 4 + 1] = LUT[k * 3 + 1];
    bytes[k * 4 + 2] = LUT[k * 3 + 2];
    bytes[k * 4 + 3] = 255;
  }
  return words;
})();

export function colour_css(t) {
  const k = Math.max(0, Math.min(255, Math.round(t * 255))) * 3;
  return `rgb(${LUT[k]}, ${LUT[k + 1]}, ${LUT[k + 2]})`;
}

const FONT = 'system-ui, -apple-system, "Segoe UI", sans-serif';
const LABEL_MAX_CHARS = 14;

function short_label(s) {
  const t = String(s);
  return t.length > LABEL_MAX_CHARS ? t.slice(0, LABEL_MAX_CHARS - 1) + '\u2026' : t;
}

// A tick step of 1, 2 or 5 times a power of ten giving at most ~8 ticks.
function tick_step(count) {
  const raw = Math.max(1, count / 8);
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const s of [1, 2, 5, 10]) if (s * p >= raw) return s * p;
  return 10 * p;
}

// Lays out and draws map into canvas.
//   map: { values: n*m row-major weights, n, m, rows: [n] labels,
//          cols: [m] labels, vmax: top of the colour scale,
//          gamma: optional exponent on weight / vmax (0.5 lifts the small
//          weights of long sequences out of the dark end),
//          per_row: when true each row is scaled to its own maximum and
//          vmax is ignored (causal maps: early rows no longer dominate) }
//   max_plot: the largest side of the plot area in canvas pixels; cells are
//             square, 1 to 28 pixels.
// The layout is kept on the canvas (canvas.heatmap) for cell_at(), the
// cursor, and mirrored in data-* attributes for scripts and tests.
export function draw_heatmap(canvas, map, max_plot) {
  const { n, m } = map;
  const cell = Math.max(1, Math.min(28, Math.floor(max_plot / Math.max(n, m))));
  const labelled = cell >= 10;
  const font_px = labelled ? Math.min(12, cell - 2) : 10;
  const ctx = canvas.getContext('2d');
  ctx.font = `${font_px}px ${FONT}`;

  let left = 36;
  let top = 22;
  if (labelled) {
    const widest = (labels) => labels.reduce(
      (w, s) => Math.max(w, ctx.measureText(short_label(s)).width), 0);
    left = Math.ceil(widest(map.rows)) + 10;
    top = Math.ceil(widest(map.cols)) + 10;
  }
  const plot_w = m * cell;
  const plot_h = n * cell;
  canvas.width = left + plot_w + 8;
  canvas.height = top + plot_h + 8;

  // White margins only: the plot itself is overwritten by putImageData.
  ctx.fillStyle = '#ffffff';
  ctx.fillRect(0, 0, canvas.width, top);
  ctx.fillRect(0, top + plot_h, canvas.width, canvas.height - top - plot_h);
  ctx.fillRect(0, top, left, plot_h);
  ctx.fillRect(left + plot_w, top, canvas.width - left - plot_w, plot_h);

  // pass 1: the cells. Weights are binned into 1024 steps of [0, vmax]
  // whose colours (after the optional gamma) are looked up once per draw;
  // each cell is then one table lookup written as whole RGBA words.
  const gamma = map.gamma ?? 1;
  const steps = 1024;
  const table = new Uint32Array(steps);
  for (let s = 0; s < steps; s++)
    table[s] = LUT32[Math.round(255 * Math.pow(s / (steps - 1), gamma))];
  const img = ctx.createImageData(plot_w, plot_h);
  const px = new Uint32Array(img.data.buffer);
  const vals = map.values;
  let inv = map.vmax > 0 ? (steps - 1) / map.vmax : 0;
  for (let i = 0; i < n; i++) {
    const row = i * m;
    const line0 = i * cell * plot_w;
    if (map.per_row) {
      let mx = 0;
      for (let j = 0; j < m; j++) if (vals[row + j] > mx) mx = vals[row + j];
      inv = mx > 0 ? (steps - 1) / mx : 0;
    }
    for (let j = 0; j < m; j++) {
      // NaN or negative maps to 0 (>= fails), anything past vmax to the top.
      const v = vals[row + j] * inv + 0.5;
      const colour = table[v >= 1 ? (v < steps - 1 ? v | 0 : steps - 1) : 0];
      if (cell === 1) {
        px[line0 + j] = colour;
      } else {
        const o = line0 + j * cell;
        px.fill(colour, o, o + cell);
      }
    }
    // The other lines of a cell row repeat the first one.
    for (let y = 1; y < cell; y++)
      px.copyWithin(line0 + y * plot_w, line0, line0 + plot_w);
  }
  ctx.putImageData(img, left, top);

  // pass 2: axes. Token labels when cells are tall enough to read them,
  // otherwise position ticks.
  ctx.fillStyle = '#1d1d1f';
  ctx.font = `${font_px}px ${FONT}`;
  if (labelled) {
    ctx.textAlign = 'right';
    ctx.textBaseline = 'middle';
    for (let i = 0; i < n; i++)
      ctx.fillText(short_label(map.rows[i]), left - 5, top + (i + 0.5) * cell);
    ctx.save();
    ctx.translate(left, top - 5);
    ctx.rotate(-Math.PI / 2);
    ctx.textAlign = 'left';
    for (let j = 0; j < m; j++)
      ctx.fillText(short_label(map.cols[j]), 0, (j + 0.5) * cell);
    ctx.restore();
  } else {
    ctx.textBaseline = 'middle';
    ctx.textAlign = 'right';
    const sn = tick_step(n);
    for (let i = 0; i < n; i += sn)
      ctx.fillText(String(i), left - 4, top + (i + 0.5) * cell);
    ctx.textAlign = 'center';
    ctx.textBaseline = 'bottom';
    const sm = tick_step(m);
    for (let j = 0; j < m; j += sm)
      ctx.fillText(String(j), left + (j + 0.5) * cell, top - 4);
  }
  ctx.strokeStyle = '#8a8a8e';
  ctx.lineWidth = 1;
  ctx.strokeRect(left - 0.5, top - 0.5, plot_w + 1, plot_h + 1);

  // The cursor outline reaches 3 pixels past its cell, so past the plot at
  // its edges: keep the plot with that margin to restore it exactly.
  const saved = ctx.getImageData(left - 3, top - 3, plot_w + 6, plot_h + 6);
  canvas.heatmap = { map, cell, left, top, plot_w, plot_h, saved, cursor: null };
  canvas.dataset.plotLeft = String(left);
  canvas.dataset.plotTop = String(top);
  canvas.dataset.cell = String(cell);
  canvas.dataset.n = String(n);
  canvas.dataset.m = String(m);
}

// The cell {i, j} under a client (viewport) position, or null. Accounts for
// CSS scaling of the canvas.
export function cell_at(canvas, client_x, client_y) {
  const h = canvas.heatmap;
  if (!h) return null;
  const rect = canvas.getBoundingClientRect();
  if (rect.width === 0 || rect.height === 0) return null;
  const x = (client_x - rect.left) * (canvas.width / rect.width) - h.left;
  const y = (client_y - rect.top) * (canvas.height / rect.height) - h.top;
  if (x < 0 || y < 0 || x >= h.plot_w || y >= h.plot_h) return null;
  return { i: Math.floor(y / h.cell), j: Math.floor(x / h.cell) };
}

// The client position of a cell's centre (for keyboard tooltips).
export function cell_centre(canvas, i, j) {
  const h = canvas.heatmap;
  const rect = canvas.getBoundingClientRect();
  const sx = rect.width / canvas.width;
  const sy = rect.height / canvas.height;
  return {
    x: rect.left + (h.left + (j + 0.5) * h.cell) * sx,
    y: rect.top + (h.top + (i + 0.5) * h.cell) * sy,
  };
}

// Outlines cell (i, j), or clears the outline when c is null. Restores the
// saved cells first, so only one outline is ever visible.
export function set_cursor(canvas, c) {
  const h = canvas.heatmap;
  if (!h) return;
  const ctx = canvas.getContext('2d');
  ctx.putImageData(h.saved, h.left - 3, h.top - 3);
  h.cursor = c;
  if (!c) return;
  const w = Math.max(h.cell, 3);
  const x = h.left + c.j * h.cell - (w - h.cell) / 2;
  const y = h.top + c.i * h.cell - (w - h.cell) / 2;
  ctx.lineWidth = 2;
  ctx.strokeStyle = '#ff2d55';
  ctx.strokeRect(x - 1, y - 1, w + 2, w + 2);
}

// A horizontal colour bar from 0 to vmax with five labelled ticks; with a
// gamma the ticks sit where those weights land on the bar.
export function draw_legend(canvas, vmax, gamma = 1) {
  const ctx = canvas.getContext('2d');
  const w = canvas.width;
  const bar_h = 12;
  ctx.clearRect(0, 0, w, canvas.height);
  const pad = 14;
  for (let x = 0; x < w - 2 * pad; x++) {
    ctx.fillStyle = colour_css(x / (w - 2 * pad - 1));
    ctx.fillRect(pad + x, 0, 1, bar_h);
  }
  ctx.strokeStyle = '#8a8a8e';
  ctx.strokeRect(pad - 0.5, -0.5, w - 2 * pad + 1, bar_h + 1);
  ctx.fillStyle = '#1d1d1f';
  ctx.font = `11px ${FONT}`;
  ctx.textAlign = 'center';
  ctx.textBaseline = 'top';
  for (let t = 0; t <= 4; t++) {
    const x = pad + (t / 4) * (w - 2 * pad - 1);
    ctx.fillRect(Math.round(x), bar_h, 1, 3);
    ctx.fillText(format_tick(vmax * Math.pow(t / 4, 1 / gamma)), x, bar_h + 4);
  }
}

function format_tick(v) {
  if (v === 0) return '0';
  if (v >= 0.1) return v.toFixed(2);
  return v.toPrecision(2);
}
