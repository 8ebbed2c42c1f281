// heatmap.js: draws an n x m weight matrix into a canvas with token labels
// and maps pointer positions back to cells. The canvas backing store is
// devicePixelRatio times its CSS size, so maps stay sharp on HiDPI screens;
// the CSS size follows the width the caller measured (the card's).
// Pixels are written straight into one ImageData per map; when a map has
// more cells than pixels, each pixel shows the largest weight it covers, so
// a single strong link never disappears between pixels.

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

function rgba_word(r, g, b) {
  const w = new Uint32Array(1);
  new Uint8Array(w.buffer).set([r, g, b, 255]);
  return w[0];
}

// The same colours as RGBA words for ImageData, opaque.
const LUT32 = (() => {
  const words = new Uint32Array(256);
  for (let k = 0; k < 256; k++) words[k] = rgba_word(LUT[k * 3], LUT[k * 3 + 1], LUT[k * 3 + 2]);
  return words;
})();

// Masked keys: light grey (viridis never gets this light and grey), with
// darker diagonal hatching where a cell is at least 4 device pixels wide.
export const MASKED_RGB = [0xe4, 0xe4, 0xe4];
const MASKED = rgba_word(...MASKED_RGB);
const HATCH = '#b0b0b0';

export function colour_css(t) {
  const k = Math.max(0, Math.min(255, Math.round(t * 255))) * 3;
  return `rgb(${LUT[k]}, ${LUT[k + 1]}, ${LUT[k + 2]})`;
}

// Position on the colour bar (0..1) of x = weight / top of its scale.
//   scale: { kind: 'linear' | 'gamma' | 'log', gamma, decades }
export function scale_position(x, scale) {
  if (!(x > 0)) return 0;
  if (x >= 1) return 1;
  if (scale.kind === 'gamma') return Math.pow(x, scale.gamma);
  if (scale.kind === 'log') {
    const t = 1 + Math.log10(x) / scale.decades;
    return t > 0 ? t : 0;
  }
  return x;
}

export const FONT = 'system-ui, -apple-system, "Segoe UI", sans-serif';
const LABEL_MAX_CHARS = 14;

function short_label(s) {
  const t = String(s);
  return t.length > LABEL_MAX_CHARS ? t.slice(0, LABEL_MAX_CHARS - 1) + '\u2026' : t;
}

// A tick step of 1, 2 or 5 times a power of ten giving at most ~8 ticks,
// and ticks at least `room` CSS pixels apart on an axis of cells `cell`
// pixels long, so neighbouring labels never touch ("8" and "10" would
// otherwise read "810" on a narrow map).
function tick_step(count, cell, room) {
  const raw = Math.max(1, count / 8, room / cell);
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const s of [1, 2, 5, 10]) if (s * p >= raw) return s * p;
  return 10 * p;
}

// Gap in CSS pixels kept between two tick labels.
const TICK_GAP = 4;

let hatch_tile = null;
function hatch_pattern(ctx) {
  if (!hatch_tile) {
    hatch_tile = document.createElement('canvas');
    hatch_tile.width = hatch_tile.height = 6;
    const t = hatch_tile.getContext('2d');
    t.fillStyle = HATCH;
    for (let k = 0; k < 6; k++) t.fillRect(k, 5 - k, 1, 1);
  }
  return ctx.createPattern(hatch_tile, 'repeat');
}

// Lays out and draws map into canvas.
//   map: { values: n*m row-major weights, n, m, rows: [n] labels,
//          cols: [m] labels, vmax: top of the colour scale,
//          scale: { kind, gamma, decades, per_row } (see scale.js; per_row
//          scales each row to its own maximum and ignores vmax),
//          hidden: optional Uint8Array n*m, 1 where the key is masked }
//   box: { width: CSS pixels the canvas may use, height: CSS pixels for the
//          plot at most, thumb: no labels or ticks (model-view thumbnails),
//          max_cell: largest cell side in CSS pixels (default 28) }
// The layout is kept on the canvas (canvas.heatmap) for cell_at(), the
// cursor, and mirrored in data-* attributes (in backing-store pixels) for
// scripts and tests.
export function draw_heatmap(canvas, map, box) {
  const { n, m } = map;
  const dpr = window.devicePixelRatio || 1;
  const ctx = canvas.getContext('2d');
  const max_cell = box.max_cell ?? 28;
  const width = Math.max(40, box.width);
  const height = Math.max(40, box.height ?? width);
  const font_px = 11;
  ctx.font = `${font_px}px ${FONT}`;

  // CSS layout: try labels first; keep them when cells are tall enough.
  let left = box.thumb ? 0 : 36;
  let top = box.thumb ? 0 : 22;
  const pad = box.thumb ? 0 : 8;
  let cell = Math.min(max_cell, (width - left - pad) / m, (height - top - pad) / n);
  let labelled = false;
  if (!box.thumb && cell >= 10) {
    const widest = (labels) => labels.reduce(
      (w, s) => Math.max(w, ctx.measureText(short_label(s)).width), 0);
    const l2 = Math.ceil(widest(map.rows)) + 10;
    const t2 = Math.ceil(widest(map.cols)) + 10;
    const c2 = Math.min(max_cell, (width - l2 - pad) / m, (height - t2 - pad) / n);
    if (c2 >= 10) {
      labelled = true;
      left = l2;
      top = t2;
      cell = c2;
    }
  }
  // Backing store: whole device pixels per cell when a cell is at least 3
  // pixels (crisp, equal cells), otherwise the plot takes the whole width
  // in pixels and each pixel pools the cells it covers.
  const cpx = cell * dpr;
  const whole = cpx >= 3;
  const cell_w = whole ? Math.floor(cpx) : Math.max(1, Math.floor(m * cpx)) / m;
  const cell_h = whole ? Math.floor(cpx) : Math.max(1, Math.floor(n * cpx)) / n;
  const plot_w = Math.round(m * cell_w);
  const plot_h = Math.round(n * cell_h);
  const L = Math.round(left * dpr);
  const T = Math.round(top * dpr);
  const P = Math.round(pad * dpr);
  canvas.width = L + plot_w + P;
  canvas.height = T + plot_h + P;
  canvas.style.width = `${canvas.width / dpr}px`;
  canvas.style.aspectRatio = `${canvas.width} / ${canvas.height}`;

  ctx.setTransform(1, 0, 0, 1, 0, 0);
  ctx.fillStyle = '#ffffff';
  ctx.fillRect(0, 0, canvas.width, canvas.height);

  fill_cells(ctx, map, { L, T, plot_w, plot_h, cell_w, cell_h });

  // Hatching over masked cells wide enough to show it, one rectangle per
  // run of masked cells in a row.
  const hid = map.hidden;
  if (hid && cell_w >= 4) {
    ctx.fillStyle = hatch_pattern(ctx);
    for (let i = 0; i < n; i++) {
      let j = 0;
      while (j < m) {
        if (!hid[i * m + j]) { j++; continue; }
        const j0 = j;
        while (j < m && hid[i * m + j]) j++;
        ctx.fillRect(L + j0 * cell_w, T + i * cell_h, (j - j0) * cell_w, cell_h);
      }
    }
  }

  // Axes, drawn in CSS pixels.
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.fillStyle = '#1d1d1f';
  ctx.font = `${font_px}px ${FONT}`;
  const cw = plot_w / dpr / m;
  const ch = plot_h / dpr / n;
  const l_css = L / dpr;
  const t_css = T / dpr;
  if (labelled) {
    ctx.textAlign = 'right';
    ctx.textBaseline = 'middle';
    for (let i = 0; i < n; i++)
      ctx.fillText(short_label(map.rows[i]), l_css - 5, t_css + (i + 0.5) * ch);
    ctx.save();
    ctx.translate(l_css, t_css - 5);
    ctx.rotate(-Math.PI / 2);
    ctx.textAlign = 'left';
    for (let j = 0; j < m; j++)
      ctx.fillText(short_label(map.cols[j]), 0, (j + 0.5) * cw);
    ctx.restore();
  } else if (!box.thumb) {
    // Row ticks stack by the font's height, column ticks side by side by
    // the widest index's width; both are published (start and end of
    // each label along its axis) for tests.
    ctx.textBaseline = 'middle';
    ctx.textAlign = 'right';
    const sn = tick_step(n, ch, font_px + TICK_GAP);
    const row_ticks = [];
    for (let i = 0; i < n; i += sn) {
      const y = t_css + (i + 0.5) * ch;
      ctx.fillText(String(i), l_css - 4, y);
      row_ticks.push([i, y - font_px / 2, y + font_px / 2]);
    }
    ctx.textAlign = 'center';
    ctx.textBaseline = 'bottom';
    const sm = tick_step(m, cw, ctx.measureText(String(m - 1)).width + TICK_GAP);
    const col_ticks = [];
    for (let j = 0; j < m; j += sm) {
      const x = l_css + (j + 0.5) * cw;
      const half = ctx.measureText(String(j)).width / 2;
      ctx.fillText(String(j), x, t_css - 4);
      col_ticks.push([j, x - half, x + half]);
    }
    canvas.dataset.rowTicks = JSON.stringify(row_ticks.map((t) => t.map((v) => Number(v.toFixed(1)))));
    canvas.dataset.colTicks = JSON.stringify(col_ticks.map((t) => t.map((v) => Number(v.toFixed(1)))));
  }
  if (labelled || box.thumb) {
    delete canvas.dataset.rowTicks;
    delete canvas.dataset.colTicks;
  }
  ctx.setTransform(1, 0, 0, 1, 0, 0);
  if (!box.thumb) {
    ctx.strokeStyle = '#8a8a8e';
    ctx.lineWidth = 1;
    ctx.strokeRect(L - 0.5, T - 0.5, plot_w + 1, plot_h + 1);
  }

  // The cursor outline reaches 3 pixels past its cell, so past the plot at
  // its edges: keep the plot with that margin to restore it exactly.
  const M = Math.round(3 * dpr);
  const saved = box.thumb ? null : ctx.getImageData(L - M, T - M, plot_w + 2 * M, plot_h + 2 * M);
  canvas.heatmap = { map, cell_w, cell_h, left: L, top: T, plot_w, plot_h, saved, margin: M, dpr, cursor: null };
  canvas.dataset.plotLeft = String(L);
  canvas.dataset.plotTop = String(T);
  canvas.dataset.plotWidth = String(plot_w);
  canvas.dataset.plotHeight = String(plot_h);
  canvas.dataset.cell = String(cell_w);
  canvas.dataset.cellHeight = String(cell_h);
  canvas.dataset.n = String(n);
  canvas.dataset.m = String(m);
  canvas.dataset.labelled = String(labelled);
}

// The cells of the map into the plot: pass 1 of draw_heatmap.
function fill_cells(ctx, map, g) {
  const { n, m, values: vals, hidden: hid } = map;
  const scale = map.scale ?? { kind: 'linear' };
  const { plot_w, plot_h, cell_w, cell_h } = g;
  // Per row: the factor taking a weight to [0, 1] of its scale.
  const inv = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    let top = map.vmax;
    if (scale.per_row) {
      top = 0;
      for (let j = 0, r = i * m; j < m; j++) if (vals[r + j] > top) top = vals[r + j];
    }
    inv[i] = top > 0 ? 1 / top : 0;
  }
  // Linear and power scales: 4096 bins looked up once per draw; the log
  // scale needs its resolution at the low end, so it is computed per cell.
  const steps = 4096;
  const table = new Uint32Array(steps);
  for (let s = 0; s < steps; s++)
    table[s] = LUT32[Math.round(255 * scale_position(s / (steps - 1), scale))];
  const log = scale.kind === 'log';
  const colour = (v, f) => {
    const x = v * f;
    if (!(x > 0)) return LUT32[0];
    if (log) return LUT32[Math.round(255 * scale_position(x, scale))];
    return table[x < 1 ? (x * (steps - 1) + 0.5) | 0 : steps - 1];
  };

  const img = ctx.createImageData(plot_w, plot_h);
  const px = new Uint32Array(img.data.buffer);
  if (cell_w >= 1 && Number.isInteger(cell_w)) {
    // Whole-pixel cells: one colour per cell, its first line copied down.
    for (let i = 0; i < n; i++) {
      const row = i * m;
      const line0 = i * cell_h * plot_w;
      for (let j = 0; j < m; j++) {
        const c = hid && hid[row + j] ? MASKED : colour(vals[row + j], inv[i]);
        if (cell_w === 1) px[line0 + j] = c;
        else {
          const o = line0 + j * cell_w;
          px.fill(c, o, o + cell_w);
        }
      }
      for (let y = 1; y < cell_h; y++)
        px.copyWithin(line0 + y * plot_w, line0, line0 + plot_w);
    }
  } else {
    // Fewer pixels than cells: each pixel shows the largest scaled weight
    // among its cells, grey only when all of them are masked.
    for (let y = 0; y < plot_h; y++) {
      const i0 = Math.floor(y * n / plot_h);
      const i1 = Math.max(i0 + 1, Math.floor((y + 1) * n / plot_h));
      for (let x = 0; x < plot_w; x++) {
        const j0 = Math.floor(x * m / plot_w);
        const j1 = Math.max(j0 + 1, Math.floor((x + 1) * m / plot_w));
        let best = -1;
        let any_visible = !hid;
        for (let i = i0; i < i1; i++) {
          const r = i * m;
          for (let j = j0; j < j1; j++) {
            if (hid && hid[r + j]) continue;
            any_visible = true;
            const t = vals[r + j] * inv[i];
            if (t > best) best = t;
          }
        }
        px[y * plot_w + x] = any_visible ? colour(best, 1) : MASKED;
      }
    }
  }
  ctx.putImageData(img, g.L, g.T);
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
  return {
    i: Math.min(h.map.n - 1, Math.floor(y / h.cell_h)),
    j: Math.min(h.map.m - 1, Math.floor(x / h.cell_w)),
  };
}

// The key column whose label (above the plot) is under a client position,
// or null.
export function column_at(canvas, client_x, client_y) {
  const h = canvas.heatmap;
  if (!h) return null;
  const rect = canvas.getBoundingClientRect();
  if (rect.width === 0 || rect.height === 0) return null;
  const x = (client_x - rect.left) * (canvas.width / rect.width) - h.left;
  const y = (client_y - rect.top) * (canvas.height / rect.height) - h.top;
  if (x < 0 || x >= h.plot_w || y >= 0) return null;
  return Math.min(h.map.m - 1, Math.floor(x / h.cell_w));
}

// The client position of a cell's centre (for keyboard tooltips).
export function cell_centre(canvas, i, j) {
  const h = canvas.heatmap;
  const rect = canvas.getBoundingClientRect();
  const sx = rect.width / canvas.width;
  const sy = rect.height / canvas.height;
  return {
    x: rect.left + (h.left + (j + 0.5) * h.cell_w) * sx,
    y: rect.top + (h.top + (i + 0.5) * h.cell_h) * sy,
  };
}

// Outlines cell (i, j), or clears the outline when c is null. Restores the
// saved cells first, so only one outline is ever visible.
export function set_cursor(canvas, c) {
  const h = canvas.heatmap;
  if (!h || !h.saved) return;
  const ctx = canvas.getContext('2d');
  ctx.setTransform(1, 0, 0, 1, 0, 0);
  ctx.putImageData(h.saved, h.left - h.margin, h.top - h.margin);
  h.cursor = c;
  if (!c) return;
  const min = 3 * h.dpr;
  const w = Math.max(h.cell_w, min);
  const hh = Math.max(h.cell_h, min);
  const x = h.left + c.j * h.cell_w - (w - h.cell_w) / 2;
  const y = h.top + c.i * h.cell_h - (hh - h.cell_h) / 2;
  ctx.lineWidth = 2 * h.dpr;
  ctx.strokeStyle = '#ff2d55';
  ctx.strokeRect(x - h.dpr, y - h.dpr, w + 2 * h.dpr, hh + 2 * h.dpr);
}

// Sizes a canvas to css_w x css_h CSS pixels at devicePixelRatio and
// returns its context, scaled so drawing code works in CSS pixels.
export function hidpi_context(canvas, css_w, css_h) {
  const dpr = window.devicePixelRatio || 1;
  canvas.width = Math.round(css_w * dpr);
  canvas.height = Math.round(css_h * dpr);
  canvas.style.width = `${css_w}px`;
  canvas.style.height = `${css_h}px`;
  const ctx = canvas.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  return ctx;
}

// A horizontal colour bar from 0 to vmax with five labelled ticks placed
// where those weights land on the bar under the scale, and a grey swatch
// for masked keys.
export function draw_legend(canvas, vmax, scale = { kind: 'linear' }) {
  const w = 300;
  const h = 34;
  const ctx = hidpi_context(canvas, w, h);
  const bar_h = 12;
  const pad = 14;
  const bar_w = w - 2 * pad - 72;
  ctx.clearRect(0, 0, w, h);
  for (let x = 0; x < bar_w; x++) {
    ctx.fillStyle = colour_css(x / (bar_w - 1));
    ctx.fillRect(pad + x, 0, 1.5, bar_h);
  }
  ctx.strokeStyle = '#8a8a8e';
  ctx.lineWidth = 1;
  ctx.strokeRect(pad - 0.5, -0.5, bar_w + 1, bar_h + 1);
  ctx.fillStyle = '#1d1d1f';
  ctx.font = `11px ${FONT}`;
  ctx.textAlign = 'center';
  ctx.textBaseline = 'top';
  for (let t = 0; t <= 4; t++) {
    const p = t / 4;
    // The weight (fraction of the top) that lands at position p.
    let x = p;
    if (scale.kind === 'gamma') x = Math.pow(p, 1 / scale.gamma);
    else if (scale.kind === 'log') x = p === 0 ? 0 : Math.pow(10, (p - 1) * scale.decades);
    const at = pad + p * (bar_w - 1);
    ctx.fillRect(Math.round(at), bar_h, 1, 3);
    ctx.fillText(format_tick(vmax * x), at, bar_h + 4);
  }
  const sx = pad + bar_w + 30;
  ctx.fillStyle = `rgb(${MASKED_RGB.join(',')})`;
  ctx.fillRect(sx, 0, 14, bar_h);
  ctx.fillStyle = hatch_pattern(ctx);
  ctx.fillRect(sx, 0, 14, bar_h);
  ctx.fillStyle = '#1d1d1f';
  ctx.textAlign = 'left';
  ctx.fillText('masked', sx - 4, bar_h + 4);
}

function format_tick(v) {
  if (v === 0) return '0';
  if (v >= 0.1) return v.toFixed(2);
  return v.toPrecision(1);
}
