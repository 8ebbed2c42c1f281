// dashboard.test.mjs: drives the dashboard served by a real attnd in
// Debian's headless chromium (playwright-core, no downloaded browser) and
// checks what a user of the page relies on:
//   - one non-blank canvas per head after #run;
//   - the tooltip over a cell shows the weight the service returned for
//     that cell (same request fetched from node; equal to 4 decimals), for
//     per-head maps, the mean map, and a pasted batched cross-attention
//     request in base64;
//   - a bad pasted request shows the service's error code and JSON pointer
//     in #error, and invalid JSON shows invalid_json;
//   - PNG and JSON exports download real files;
//   - no console errors, no page errors, and every request the page made
//     went to its own origin.
// Environment: ATTND_BIN (required) the server binary; SCREENSHOT (optional)
// where to save a full-page screenshot. The server is killed however the
// test ends.

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';

const CHROMIUM = process.env.CHROMIUM_BIN || '/usr/bin/chromium';
const ATTND = process.env.ATTND_BIN;
const SCREENSHOT = process.env.SCREENSHOT || '';

let failures = 0;
let checks = 0;
function check(ok, what, detail = '') {
  checks++;
  if (ok) {
    console.log(`  ok   ${what}`);
  } else {
    failures++;
    console.log(`  FAIL ${what}${detail ? `: ${detail}` : ''}`);
  }
}

function free_port() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Starts attnd and waits for /healthz; rejects if it exits first.
async function start_server(port) {
  const child = spawn(ATTND, ['--port', String(port), '--host', '127.0.0.1', '--quiet'],
    { stdio: ['ignore', 'inherit', 'inherit'] });
  let exited = null;
  child.once('exit', (code, sig) => { exited = `exited with ${code ?? sig}`; });
  const base = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 200; i++) {
    if (exited) throw new Error(`attnd ${exited} before answering /healthz`);
    try {
      const r = await fetch(`${base}/healthz`);
      if (r.ok) return { child, base };
    } catch {
      // not listening yet
    }
    await sleep(50);
  }
  child.kill('SIGKILL');
  throw new Error('attnd did not answer /healthz within 10 s');
}

// The service's answer to body, straight from node.
async function post(base, body) {
  const r = await fetch(`${base}/attend`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body,
  });
  return { status: r.status, json: await r.json() };
}

// The number printed after "weight" or "divergence" in the tooltip.
function tooltip_weight(text) {
  const m = /(?:weight|divergence) (-?\d+\.\d{4})\b/.exec(text);
  return m ? m[1] : null;
}

// Moves the mouse over cell (i, j) of the canvas matched by selector, using
// the layout the page publishes in data-* attributes; returns the tooltip.
async function hover_cell(page, selector, i, j) {
  const canvas = page.locator(selector);
  await canvas.scrollIntoViewIfNeeded();
  const box = await canvas.boundingBox();
  const d = await canvas.evaluate((el) => ({ ...el.dataset, width: el.width }));
  const s = box.width / d.width;
  const cell = Number(d.cell);
  await page.mouse.move(box.x + (Number(d.plotLeft) + (j + 0.5) * cell) * s,
    box.y + (Number(d.plotTop) + (i + 0.5) * cell) * s);
  return (await page.textContent('#tooltip')) ?? '';
}

// Fraction of plot pixels that differ from the first one (0: blank).
function plot_variety(page, selector) {
  return page.locator(selector).evaluate((c) => {
    const { plotLeft, plotTop, cell, n, m } = c.dataset;
    const w = Number(cell) * Number(m);
    const h = Number(cell) * Number(n);
    const px = c.getContext('2d').getImageData(Number(plotLeft), Number(plotTop), w, h).data;
    let differ = 0;
    for (let k = 4; k < px.length; k += 4)
      if (px[k] !== px[0] || px[k + 1] !== px[1] || px[k + 2] !== px[2]) differ++;
    return differ / (px.length / 4);
  });
}

// Runs the page's current form and returns the body it posted.
async function run_page(page, expect_ok) {
  const posted = page.waitForRequest((r) => r.url().endsWith('/attend') && r.method() === 'POST');
  const answered = page.waitForResponse((r) => r.url().endsWith('/attend'));
  await page.click('#run');
  const body = (await posted).postData();
  await answered;
  if (expect_ok) {
    await page.waitForFunction(() => /^HTTP 200/.test(document.getElementById('status').textContent));
  } else {
    await page.waitForSelector('#error:not([hidden])');
  }
  return body;
}

async function main() {
  if (!ATTND || !fs.existsSync(ATTND)) throw new Error(`ATTND_BIN (${ATTND}) is not a file`);
  const port = await free_port();
  const { child, base } = await start_server(port);
  const kill = () => { if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL'); };
  process.once('exit', kill);
  for (const sig of ['SIGINT', 'SIGTERM']) process.once(sig, () => { kill(); process.exit(1); });

  const user_dir = fs.mkdtempSync(path.join(os.tmpdir(), 'attnd-chromium-'));
  let context = null;
  try {
    context = await chromium.launchPersistentContext(user_dir, {
      executablePath: CHROMIUM,
      headless: true,
      args: ['--headless', '--no-sandbox', '--disable-gpu',
        '--disable-background-networking', '--disable-component-update', '--no-first-run'],
      viewport: { width: 1400, height: 1000 },
      acceptDownloads: true,
    });
    context.setDefaultTimeout(30000);
    const page = context.pages()[0] ?? await context.newPage();

    const origin = new URL(base).origin;
    const console_errors = [];
    const page_errors = [];
    const foreign = [];
    const failed = [];
    let expecting_http_error = false;
    let aborting = false;
    page.on('console', (msg) => {
      if (msg.type() !== 'error') return;
      // Chromium logs every non-2xx fetch as "Failed to load resource"; the
      // error steps below provoke exactly those on purpose.
      if (expecting_http_error && /Failed to load resource: the server responded with a status of 4\d\d/.test(msg.text()))
        return;
      if (aborting && /Failed to load resource: net::ERR_CONNECTION_RESET/.test(msg.text()))
        return;
      console_errors.push(msg.text());
    });
    page.on('pageerror', (e) => page_errors.push(e.message));
    page.on('request', (r) => {
      if (new URL(r.url()).origin !== origin) foreign.push(r.url());
    });
    page.on('requestfailed', (r) => {
      // The network-failure step aborts /attend on purpose.
      if (!(aborting && r.url().endsWith('/attend'))) failed.push(`${r.url()} ${r.failure()?.errorText}`);
    });

    console.log(`dashboard at ${base}/`);
    const home = await page.goto(`${base}/`);
    check(home.status() === 200, 'GET / answers 200', `status ${home.status()}`);
    check((home.headers()['content-type'] ?? '').startsWith('text/html'), 'GET / is text/html',
      home.headers()['content-type']);

    // -- the default sentence ----------------------------------------------
    const heads = Number(await page.inputValue('#heads'));
    const body = await run_page(page, true);
    const req = JSON.parse(body);
    check(req.return_weights === 'per_head', 'the page asks for per-head weights');
    const ref = await post(base, body);
    check(ref.status === 200, 'the same request from node answers 200', `status ${ref.status}`);
    const att = ref.json.attention;
    check(Array.isArray(att) && att.length === heads, `the service returned ${heads} maps`);

    check(!(await page.isVisible('#batch')), 'no batch selector for a request without a batch axis');
    const canvases = page.locator('canvas[data-head]');
    check(await canvases.count() === heads, `one canvas per head (${heads})`,
      `found ${await canvases.count()}`);
    for (let i = 0; i < heads; i++) {
      const v = await plot_variety(page, `canvas[data-head="${i}"]`);
      check(v > 0.05, `head ${i}'s map is not one colour`, `${(v * 100).toFixed(1)}% of pixels differ`);
    }

    const tokens = req.tokens;
    const it = tokens.indexOf('it');
    const animal = tokens.indexOf('animal');
    for (const [h, q, k] of [[1, it, animal], [0, 0, 0], [heads - 1, tokens.length - 1, 2]]) {
      const tip = await hover_cell(page, `canvas[data-head="${h}"]`, q, k);
      const want = att[h][q][k].toFixed(4);
      check(tooltip_weight(tip) === want, `tooltip of head ${h}, query ${q}, key ${k} shows ${want}`, tip);
      check(tip.includes(`\u201c${tokens[q]}\u201d`) && tip.includes(`\u201c${tokens[k]}\u201d`),
        'the tooltip names the query and key tokens', tip);
    }
    let mean = 0;
    for (let h = 0; h < heads; h++) mean += att[h][it][animal];
    mean /= heads;
    const mean_tip = await hover_cell(page, '#mean-card canvas', it, animal);
    check(tooltip_weight(mean_tip) === mean.toFixed(4), `mean-map tooltip shows ${mean.toFixed(4)}`, mean_tip);

    // Per-head figures (issue 8) beside each map, and the similarity matrix.
    const figures = page.locator('dd[data-figure="entropy"]');
    const an = ref.json.analysis;
    check(req.analysis === true && Array.isArray(an?.heads) && an.heads.length === heads,
      'the page asks for analysis and the service returns one entry per head');
    if (Array.isArray(an?.heads)) {
      check(await figures.count() === heads, 'an entropy figure beside every head',
        `found ${await figures.count()}`);
      for (const [h, key] of [[0, 'entropy'], [heads - 1, 'confidence']]) {
        const want = Number(an.heads[h][key]).toFixed(3);
        const shown = await page.locator(`dd[data-figure="${key}"]`).nth(h).textContent();
        check(shown === want, `head ${h}'s ${key} shows ${want}`, shown);
      }
      const pattern = await page.locator('dd[data-figure="pattern"]').nth(1).textContent();
      check(pattern === an.heads[1].pattern, `head 1's pattern shows ${an.heads[1].pattern}`, pattern);
      check(await page.isVisible('#similarity-section'), 'the head-similarity matrix is shown');
      const sim_tip = await hover_cell(page, '#similarity-card canvas', 0, heads - 1);
      const sim_want = Number(an.similarity[0][heads - 1]).toFixed(4);
      check(tooltip_weight(sim_tip) === sim_want, `similarity tooltip (0, ${heads - 1}) shows ${sim_want}`, sim_tip);
    }

    // Clicking a head opens the enlarged view; Escape closes it.
    await page.locator('canvas[data-head="0"]').click();
    check(await page.locator('#zoom[open] canvas').count() === 1, 'clicking a head opens the enlarged map');
    const zoom_tip = await hover_cell(page, '#zoom[open] canvas', it, animal);
    check(tooltip_weight(zoom_tip) === att[0][it][animal].toFixed(4) && await page.isVisible('#tooltip'),
      `the enlarged map's tooltip shows ${att[0][it][animal].toFixed(4)}`, zoom_tip);
    await page.keyboard.press('Escape');
    check(await page.locator('#zoom[open]').count() === 0, 'Escape closes the enlarged map');

    // Keyboard: a focused map reads cells with the arrow keys.
    await page.locator('canvas[data-head="0"]').focus();
    await page.keyboard.press('ArrowRight');
    await page.keyboard.press('ArrowDown');
    const key_tip = (await page.textContent('#tooltip')) ?? '';
    check(tooltip_weight(key_tip) === att[0][1][1].toFixed(4),
      'arrow keys move to cell (1, 1) of head 0 and show its weight', key_tip);
    check((await page.textContent('#cell-live')) === key_tip,
      'the cell read with the keyboard is announced in the #cell-live region');

    if (SCREENSHOT) {
      await page.mouse.move(5, 5);
      await page.screenshot({ path: SCREENSHOT, fullPage: true });
      console.log(`  screenshot: ${SCREENSHOT}`);
    }

    // -- causal mask and padding from the form -------------------------------
    await page.selectOption('#mask', 'causal');
    await page.fill('#padding', '2');
    const masked_body = await run_page(page, true);
    const masked_req = JSON.parse(masked_body);
    const mn = masked_req.tokens.length;
    check(masked_req.mask === 'causal' && masked_req.key_padding_mask?.length === mn &&
      masked_req.key_padding_mask.filter(Boolean).length === 2 &&
      masked_req.key_padding_mask[mn - 1] === true,
      'the generated request carries the causal mask and 2 trailing padded keys');
    const masked_ref = await post(base, masked_body);
    const ma = masked_ref.json.attention;
    for (const [h, q, k, why] of [[2, 3, 5, 'a future key'], [1, mn - 1, mn - 2, 'a padded key'],
      [1, 4, 2, 'a visible key']]) {
      const tip = await hover_cell(page, `canvas[data-head="${h}"]`, q, k);
      const want = ma?.[h]?.[q]?.[k]?.toFixed(4);
      check(masked_ref.status === 200 && tooltip_weight(tip) === want,
        `causal + padding: head ${h}, query ${q}, key ${k} (${why}) shows ${want}`, tip);
    }
    check(ma?.[2]?.[3]?.[5] === 0 && ma?.[1]?.[mn - 1]?.[mn - 2] === 0,
      'the service gives masked keys weight 0');
    await page.selectOption('#mask', 'none');
    await page.fill('#padding', '0');

    // -- exports -------------------------------------------------------------
    const png_dl = page.waitForEvent('download');
    await page.locator('canvas[data-head="0"] ~ .map-actions button', { hasText: 'PNG' }).click();
    const png = await png_dl;
    const png_bytes = fs.readFileSync(await png.path());
    check(png.suggestedFilename() === 'attention-head-0.png', 'PNG export is named attention-head-0.png',
      png.suggestedFilename());
    check(png_bytes.subarray(1, 4).toString() === 'PNG', 'PNG export is a PNG file');
    const json_dl = page.waitForEvent('download');
    await page.click('#export-json');
    const exported = JSON.parse(fs.readFileSync(await (await json_dl).path(), 'utf8'));
    const exported_w = exported.attention?.[1]?.[4]?.[2];
    check(exported.meta?.mask === 'causal' && typeof exported_w === 'number' &&
      Math.abs(exported_w - ma[1][4][2]) <= 1e-6,
      'JSON export holds the last response (head 1, query 4, key 2 within 1e-6 of node\'s answer)',
      String(exported_w));

    // -- a pasted batched cross-attention request, base64 both ways ----------
    const cross = {
      x: [[[1, 0], [0, 1], [1, 1]], [[2, 0], [0, 0.5], [-1, 1]]],
      memory: [[[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 1]],
        [[0, 0, 1], [1, 0, 0], [0, 2, 0], [1, -1, 0]]],
      num_heads: 2, num_kv_heads: 1,
      w_q: [[1, 0, 0.5, -1], [0, 1, 1, 0.5]],
      w_k: [[1, 0], [0, 1], [1, -1]],
      w_v: [[1, 0], [0, 1], [1, 1]],
      tokens: [['a', 'b', 'c'], ['d', 'e', 'f']],
      memory_tokens: [['k0', 'k1', 'k2', 'k3'], ['m0', 'm1', 'm2', 'm3']],
    };
    await page.check('#source-json');
    // Loaded through the file input, as a user uploading a request would.
    await page.setInputFiles('#request-file', { name: 'cross.json', mimeType: 'application/json',
      buffer: Buffer.from(JSON.stringify(cross)) });
    await page.waitForFunction(() => document.getElementById('request-json').value.length > 0);
    check(JSON.parse(await page.inputValue('#request-json')).memory_tokens?.[1]?.[3] === 'm3',
      'an uploaded request file lands in the JSON box');
    await page.selectOption('#encoding', 'base64');
    const cross_body = await run_page(page, true);
    check(JSON.parse(cross_body).encoding === 'base64', 'base64 wire format asks for base64 responses');
    const cross_ref = await post(base, JSON.stringify({ ...cross, return_weights: 'per_head', analysis: true }));
    check(await canvases.count() === 2, 'two canvases for the two heads of the batched request',
      `found ${await canvases.count()}`);
    check(await page.isVisible('#batch'), 'a batch element selector appears for a batched request');
    await page.selectOption('#batch', '1');
    const cross_tip = await hover_cell(page, 'canvas[data-head="1"]', 2, 3);
    const cross_want = cross_ref.json.attention?.[1]?.[1]?.[2]?.[3]?.toFixed(4);
    check(cross_ref.status === 200 && tooltip_weight(cross_tip) === cross_want,
      `batch 1, head 1, query "f" -> key "m3" shows ${cross_want}`, cross_tip);
    check(cross_tip.includes('\u201cf\u201d') && cross_tip.includes('\u201cm3\u201d'),
      'cross-attention tooltip uses tokens and memory_tokens', cross_tip);
    const cross_entropy = cross_ref.json.analysis?.[1]?.heads?.[1]?.entropy;
    const shown_entropy = await page.locator('dd[data-figure="entropy"]').nth(1).textContent().catch(() => null);
    check(typeof cross_entropy === 'number' && shown_entropy === cross_entropy.toFixed(3),
      `batch 1's analysis is shown for batch 1 (head 1 entropy ${cross_entropy?.toFixed(3)})`, String(shown_entropy));
    await page.selectOption('#encoding', 'json');

    // -- top_k: sparse rows drawn as maps ---------------------------------------
    // The same batched request with top_k 2: the page sends top_k and draws
    // the [index, weight] pairs as maps: a top-2 cell shows the dense
    // weight, any other cell of the row shows 0.
    await page.fill('#request-json', JSON.stringify({ ...cross, top_k: 2 }));
    const topk_body = await run_page(page, true);
    check(JSON.parse(topk_body).top_k === 2, 'a pasted top_k is sent');
    check(await canvases.count() === 2, 'top_k rows are drawn, one canvas per head',
      `found ${await canvases.count()}`);
    await page.selectOption('#batch', '1');
    const dense_row = cross_ref.json.attention?.[1]?.[1]?.[2] ?? [];
    const order = dense_row.map((w, j) => [w, j]).sort((a, b) => b[0] - a[0] || a[1] - b[1]);
    const [top_w, top_j] = order[0] ?? [NaN, 0];
    const [, low_j] = order[order.length - 1] ?? [NaN, 0];
    const top_tip = await hover_cell(page, 'canvas[data-head="1"]', 2, top_j);
    check(tooltip_weight(top_tip) === top_w?.toFixed(4),
      `top_k map: batch 1, head 1, query 2, key ${top_j} shows ${top_w?.toFixed(4)}`, top_tip);
    const low_tip = await hover_cell(page, 'canvas[data-head="1"]', 2, low_j);
    check(tooltip_weight(low_tip) === '0.0000',
      `top_k map: key ${low_j}, outside the top 2 of its row, shows 0.0000`, low_tip);

    // -- errors ---------------------------------------------------------------
    expecting_http_error = true;
    const ragged = {
      x: [[1, 0], [0]], w_q: [[1, 0], [0, 1]], w_k: [[1, 0], [0, 1]], w_v: [[1, 0], [0, 1]],
    };
    await page.fill('#request-json', JSON.stringify(ragged));
    const bad_body = await run_page(page, false);
    const bad_ref = await post(base, bad_body);
    const bad_err = bad_ref.json.error ?? {};
    check(bad_ref.status === 422 && bad_err.code === 'invalid_request',
      'a ragged x is refused with 422 invalid_request', `${bad_ref.status} ${bad_err.code}`);
    const err_text = (await page.textContent('#error')) ?? '';
    check(err_text.includes(bad_err.code) && err_text.includes(String(bad_ref.status)),
      `#error shows HTTP ${bad_ref.status} and the code ${bad_err.code}`, err_text);
    // The message may quote the pointer too: check the pointer's own element.
    const shown_field = await page.locator('#error .pointer code').textContent().catch(() => null);
    check(Boolean(bad_err.field) && shown_field === bad_err.field,
      `#error shows the JSON pointer ${bad_err.field} as the error's field`, String(shown_field));
    check(err_text.includes(bad_err.message), '#error shows the service\'s message', err_text);
    check(await canvases.count() === 2, 'the previous maps stay on the page after an error');

    await page.fill('#request-json', '{"x": [[1, 2],');
    const broken_body = await run_page(page, false);
    check(broken_body === '{"x": [[1, 2],', 'text that does not parse is sent unchanged');
    const broken_text = (await page.textContent('#error')) ?? '';
    check(broken_text.includes('invalid_json') && broken_text.includes('400'),
      '#error shows HTTP 400 invalid_json for a body that is not JSON', broken_text);
    expecting_http_error = false;

    // A network failure (the request aborted before any answer) is shown too.
    await page.fill('#request-json', JSON.stringify(cross));
    await page.route('**/attend', (route) => route.abort('connectionreset'));
    aborting = true;
    await page.click('#run');
    await page.waitForSelector('#error:not([hidden])');
    const net_text = (await page.textContent('#error')) ?? '';
    check(net_text.includes('network_error'), '#error shows a network failure as network_error', net_text);
    await page.unroute('**/attend');
    aborting = false;

    // A form error is shown without sending anything.
    await page.check('#source-generate');
    await page.fill('#kv-heads', '3');
    let sent = false;
    const on_req = (r) => { if (r.url().endsWith('/attend')) sent = true; };
    page.on('request', on_req);
    await page.click('#run');
    await page.waitForSelector('#error:not([hidden])');
    page.off('request', on_req);
    check(!sent && /must divide/.test((await page.textContent('#error')) ?? ''),
      'KV heads that do not divide heads are refused on the page, nothing sent');

    // -- hygiene ---------------------------------------------------------------
    const aria = await page.evaluate(() => ['status', 'error'].map(
      (id) => document.getElementById(id).getAttribute('aria-live')));
    check(aria[0] === 'polite' && aria[1] === 'assertive', '#status and #error are aria-live regions');
    const unlabelled = await page.evaluate(() => [...document.querySelectorAll('input, select, textarea')]
      .filter((el) => !(el.labels && el.labels.length) && !el.getAttribute('aria-label'))
      .map((el) => el.id || el.name));
    check(unlabelled.length === 0, 'every form control has a label', unlabelled.join(', '));
    check(console_errors.length === 0, 'no console errors', console_errors.join(' | '));
    check(page_errors.length === 0, 'no uncaught page errors', page_errors.join(' | '));
    check(foreign.length === 0, `every request went to ${origin}`, foreign.join(', '));
    check(failed.length === 0, 'no failed requests', failed.join(', '));
  } finally {
    if (context) await context.close().catch(() => {});
    kill();
    fs.rmSync(user_dir, { recursive: true, force: true });
  }
}

main().then(() => {
  console.log(`${checks - failures}/${checks} browser checks passed`);
  process.exit(failures ? 1 : 0);
}, (e) => {
  console.error(`browser test aborted: ${e.stack || e}`);
  console.log(`${checks - failures}/${checks} browser checks passed before the abort`);
  process.exit(1);
});
