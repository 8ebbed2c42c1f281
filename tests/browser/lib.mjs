// lib.mjs: what the browser tests share: a checker that counts, the attnd
// process, a headless Debian chromium (playwright-core, no downloaded
// browser), and helpers that read the dashboard through the data-*
// attributes it publishes.

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';

export const CHROMIUM = process.env.CHROMIUM_BIN || '/usr/bin/chromium';
export const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu',
  '--disable-background-networking', '--disable-component-update', '--no-first-run'];

// check(ok, what, detail): prints and counts; group names a section so the
// summary can say which sections failed.
export function checker() {
  const c = { checks: 0, failures: 0, failed: new Map(), group: 'main' };
  c.check = (ok, what, detail = '') => {
    c.checks++;
    if (ok) {
      console.log(`  ok   ${what}`);
    } else {
      c.failures++;
      c.failed.set(c.group, (c.failed.get(c.group) ?? 0) + 1);
      console.log(`  FAIL ${what}${detail ? `: ${detail}` : ''}`);
    }
    return ok;
  };
  return c;
}

export function free_port() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Starts attnd and waits for /healthz; rejects if it exits first. The
// process is killed when node exits, however it exits.
export async function start_server(bin, extra_args = []) {
  if (!bin || !fs.existsSync(bin)) throw new Error(`ATTND_BIN (${bin}) is not a file`);
  const port = await free_port();
  const child = spawn(bin, ['--port', String(port), '--host', '127.0.0.1', '--quiet', ...extra_args],
    { stdio: ['ignore', 'inherit', 'inherit'] });
  let exited = null;
  child.once('exit', (code, sig) => { exited = `exited with ${code ?? sig}`; });
  const kill = () => { if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL'); };
  process.once('exit', kill);
  for (const sig of ['SIGINT', 'SIGTERM']) process.once(sig, () => { kill(); process.exit(1); });
  const base = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 200; i++) {
    if (exited) throw new Error(`attnd ${exited} before answering /healthz`);
    try {
      const r = await fetch(`${base}/healthz`);
      if (r.ok) return { child, base, kill };
    } catch {
      // not listening yet
    }
    await sleep(50);
  }
  kill();
  throw new Error('attnd did not answer /healthz within 10 s');
}

// A persistent chromium context (so downloads work) with the given
// device scale factor and viewport (CSS pixels), and other options of
// playwright's (hasTouch: a touch screen); returns { context, user_dir }.
export async function launch(scale = 1, viewport = { width: 1400, height: 1000 }, options = {}) {
  const user_dir = fs.mkdtempSync(path.join(os.tmpdir(), 'attnd-chromium-'));
  const context = await chromium.launchPersistentContext(user_dir, {
    executablePath: CHROMIUM,
    headless: true,
    args: CHROMIUM_ARGS,
    viewport,
    deviceScaleFactor: scale,
    acceptDownloads: true,
    ...options,
  });
  context.setDefaultTimeout(30000);
  return { context, user_dir };
}

export async function close(ctx) {
  if (ctx?.context) await ctx.context.close().catch(() => {});
  if (ctx?.user_dir) fs.rmSync(ctx.user_dir, { recursive: true, force: true });
}

// Watches a page: console errors, page errors, requests to other origins.
// allow(text) may excuse a console error the test provokes on purpose.
export function watch(page, origin, allow = () => false) {
  const w = { console: [], errors: [], foreign: [] };
  page.on('console', (msg) => {
    if (msg.type() === 'error' && !allow(msg.text())) w.console.push(msg.text());
  });
  page.on('pageerror', (e) => w.errors.push(e.message));
  page.on('request', (r) => {
    const u = new URL(r.url());
    if (u.protocol !== 'data:' && u.protocol !== 'blob:' && u.origin !== origin) w.foreign.push(r.url());
  });
  return w;
}

// The service's answer to body, straight from node.
export async function post(base, body) {
  const r = await fetch(`${base}/attend`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body,
  });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, json };
}

// The number printed after `label` in a tooltip (4 decimals), or null.
export function tooltip_number(text, label = '(?:weight|divergence|share)') {
  const m = new RegExp(`${label} (-?\\d+\\.\\d{4})\\b`).exec(text);
  return m ? m[1] : null;
}

export const tooltip_weight = (text) => tooltip_number(text);

// The client position of cell (i, j) of the canvas matched by selector,
// scrolled into sight, from the layout the page publishes in data-*
// attributes (backing-store pixels).
async function cell_point(page, selector, i, j) {
  const canvas = page.locator(selector);
  await canvas.scrollIntoViewIfNeeded();
  const box = await canvas.boundingBox();
  const d = await canvas.evaluate((el) => ({ ...el.dataset, width: el.width }));
  const s = box.width / d.width;
  const cw = Number(d.cell);
  const ch = Number(d.cellHeight ?? d.cell);
  return { x: inside(box.x + (Number(d.plotLeft) + j * cw) * s, cw * s),
    y: inside(box.y + (Number(d.plotTop) + i * ch) * s, ch * s) };
}

// Moves the mouse over cell (i, j) of the canvas matched by selector;
// returns the tooltip's text.
export async function hover_cell(page, selector, i, j) {
  const p = await cell_point(page, selector, i, j);
  await page.mouse.move(p.x, p.y);
  return (await page.textContent('#tooltip')) ?? '';
}

// Taps cell (i, j) with a finger (a context with hasTouch); returns the
// point tapped.
export async function tap_cell(page, selector, i, j) {
  const p = await cell_point(page, selector, i, j);
  await page.touchscreen.tap(p.x, p.y);
  return p;
}

// A client coordinate in [start, start + size): the centre, or for a cell
// under 2 CSS pixels a whole pixel inside it, as chromium drops the
// fraction of a mouse position.
function inside(start, size) {
  if (size >= 2) return start + size / 2;
  const whole = Math.ceil(start + 0.01);
  return whole < start + size ? whole : start + size / 2;
}

// The RGB of the backing-store pixel at the centre of cell (i, j).
export function cell_rgb(page, selector, i, j) {
  return page.locator(selector).evaluate((c, [i, j]) => {
    const d = c.dataset;
    const x = Math.floor(Number(d.plotLeft) + (j + 0.5) * Number(d.cell));
    const y = Math.floor(Number(d.plotTop) + (i + 0.5) * Number(d.cellHeight ?? d.cell));
    return [...c.getContext('2d').getImageData(x, y, 1, 1).data.slice(0, 3)];
  }, [i, j]);
}

// The masked colour (light grey) or its hatching (a darker grey): equal
// channels and light, which viridis never is.
export function is_masked_grey([r, g, b]) {
  return r === g && g === b && r >= 0xa0;
}

// Fraction of plot pixels that differ from the first one (0: blank).
export function plot_variety(page, selector) {
  return page.locator(selector).evaluate((c) => {
    const { plotLeft, plotTop, plotWidth, plotHeight } = c.dataset;
    const px = c.getContext('2d').getImageData(Number(plotLeft), Number(plotTop),
      Number(plotWidth), Number(plotHeight)).data;
    let differ = 0;
    for (let k = 4; k < px.length; k += 4)
      if (px[k] !== px[0] || px[k + 1] !== px[1] || px[k + 2] !== px[2]) differ++;
    return differ / (px.length / 4);
  });
}

// Clicks #run and returns the body the page posted (the last one, when the
// page retries); waits for the status line or the error box.
export async function run_page(page, expect_ok, { posts = 1 } = {}) {
  const bodies = [];
  const on_req = (r) => { if (r.url().endsWith('/attend') && r.method() === 'POST') bodies.push(r.postData()); };
  page.on('request', on_req);
  // A generated request is posted as a Blob, whose bytes chromium gives
  // playwright only for a request it intercepts: this route lets POST
  // /attend go on (to the test's own routes, else the server) as it is.
  await page.route('**/attend', pass_on);
  const answered = page.waitForResponse((r) => r.url().endsWith('/attend'));
  await page.evaluate(() => { document.getElementById('status').textContent = ''; });
  await page.click('#run');
  await answered;
  try {
    if (expect_ok)
      await page.waitForFunction(() => /^HTTP 200/.test(document.getElementById('status').textContent));
    else
      await page.waitForSelector('#error:not([hidden])');
  } finally {
    page.off('request', on_req);
    await page.unroute('**/attend', pass_on);
  }
  if (bodies.length < posts) await sleep(100);
  return bodies[bodies.length - 1];
}

const pass_on = (route) => route.fallback();

// sRGB hex -> CIELAB (D65), for colour distances.
export function lab(hex) {
  const v = parseInt(hex.replace('#', ''), 16);
  const c = [v >> 16 & 255, v >> 8 & 255, v & 255].map((x) => {
    const t = x / 255;
    return t <= 0.04045 ? t / 12.92 : ((t + 0.055) / 1.055) ** 2.4;
  });
  const X = (c[0] * 0.4124 + c[1] * 0.3576 + c[2] * 0.1805) / 0.95047;
  const Y = c[0] * 0.2126 + c[1] * 0.7152 + c[2] * 0.0722;
  const Z = (c[0] * 0.0193 + c[1] * 0.1192 + c[2] * 0.9505) / 1.08883;
  const f = (t) => (t > 216 / 24389 ? Math.cbrt(t) : (24389 / 27 * t + 16) / 116);
  return [116 * f(Y) - 16, 500 * (f(X) - f(Y)), 200 * (f(Y) - f(Z))];
}

export function rgb_hex(css) {
  const m = /rgba?\((\d+),\s*(\d+),\s*(\d+)/.exec(css);
  return m ? '#' + m.slice(1, 4).map((x) => Number(x).toString(16).padStart(2, '0')).join('') : css;
}

// Sets form controls by id: booleans check, selects select, others fill.
export async function set_form(page, fields) {
  for (const [id, v] of Object.entries(fields)) {
    if (typeof v === 'boolean') await page.setChecked(`#${id}`, v);
    else if (await page.locator(`#${id}`).evaluate((el) => el.tagName === 'SELECT')) await page.selectOption(`#${id}`, v);
    else await page.fill(`#${id}`, String(v));
  }
}

// Hovers key j in the token view's right column (scrolled into sight).
export async function hover_lines_key(page, j) {
  const canvas = page.locator('#lines');
  const d = await canvas.evaluate((el) => ({ ...el.dataset }));
  const y = Number(d.top) + (j + 0.5) * Number(d.rowHeight);
  await canvas.evaluate((el, at) => { el.parentElement.scrollTop = Math.max(0, at - 100); }, y);
  await canvas.scrollIntoViewIfNeeded();
  const box = await canvas.boundingBox();
  await page.mouse.move(box.x + Number(d.xRight) + 10, box.y + y);
}

// Moves the mouse over the label of key column j, above the plot.
export async function hover_column(page, selector, j) {
  const canvas = page.locator(selector);
  await canvas.scrollIntoViewIfNeeded();
  const box = await canvas.boundingBox();
  const d = await canvas.evaluate((el) => ({ ...el.dataset, width: el.width }));
  const s = box.width / d.width;
  await page.mouse.move(box.x + (Number(d.plotLeft) + (j + 0.5) * Number(d.cell)) * s,
    box.y + (Number(d.plotTop) - 8) * s);
  return (await page.textContent('#tooltip')) ?? '';
}

// The pairs of neighbouring tick labels of a map that overlap or sit
// closer than gap CSS pixels (data-row-ticks, data-col-ticks: [index,
// start, end] along each axis); [] when they are apart, null when the map
// publishes no ticks (it draws token labels instead).
export function tick_collisions(page, selector, gap = 2) {
  return page.locator(selector).evaluate((el, g) => {
    if (!el.dataset.colTicks || !el.dataset.rowTicks) return null;
    const out = [];
    for (const axis of ['rowTicks', 'colTicks']) {
      const t = JSON.parse(el.dataset[axis]);
      for (let k = 1; k < t.length; k++)
        if (t[k][1] - t[k - 1][2] < g) out.push(`${axis} ${t[k - 1][0]} and ${t[k][0]}`);
    }
    return out;
  }, gap);
}

// The options of a select whose text does not fit it (text, padding and
// about 20 pixels of arrow wider than the control): [] when all fit.
export function select_overflow(page, selector) {
  return page.locator(selector).evaluate((el) => {
    const cs = getComputedStyle(el);
    const ctx = document.createElement('canvas').getContext('2d');
    ctx.font = `${cs.fontWeight} ${cs.fontSize} ${cs.fontFamily}`;
    const room = el.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight) - 20;
    return [...el.options].filter((o) => ctx.measureText(o.text).width > room)
      .map((o) => `${o.text} (${ctx.measureText(o.text).width.toFixed(0)} > ${room.toFixed(0)} px)`);
  });
}
