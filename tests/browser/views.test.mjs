// views.test.mjs: the dashboard's v2 views against canned, contract-shaped
// answers (stub.mjs computes them in node; playwright's page.route serves
// them for POST /attend), so the drawing logic is tested whatever the
// service implements. The page itself still comes from a real attnd.
// Checks: the model view of 3 layers (thumbnails, click to open, rollout),
// base64 layers, the neuron view against q and k and by keyboard, the
// norm-based toggle,
// a window's masked keys drawn grey, tensor-store refs on the second run
// (the status saying "Building the request..." first, and "no tensors as
// refs" on the first), the same weights kept for a new sentence, and the
// inline retry on unknown_ref, refs kept across a change of wire
// format, a 300-token map (pixels pool
// cells), device scale factor 2 on every kind of canvas, a phone's
// width (no sideways scroll, maps above their figures, tick labels
// apart, radios beside their text), a touch screen (a tap reads a cell and
// the tooltip stays, a second tap enlarges, neuron values on a tap), no
// maps or download of an older answer after a failed run,
// requests over the server's limits (from GET /limits) refused in the form
// with their size and the limit, a 413's flag said as what to change, a
// service that never answers (seconds counted, Cancel, the timeout, and
// Cancel while a large request is built), no console errors,
// no request to another origin.
// Environment: ATTND_BIN (required) the server binary.

import { checker, start_server, launch, close, watch, tooltip_weight, tooltip_number, hover_cell, tap_cell,
  plot_variety, run_page, cell_rgb, is_masked_grey, set_form, tick_collisions, select_overflow } from './lib.mjs';
import { make_stub, route_stub, ref_of, start_silent } from './stub.mjs';

const c = checker();
const check = c.check;
const HEAD = (h) => `#head-maps canvas[data-head="${h}"]`;
const close_to = (a, b) => Math.abs(a - b) <= 1e-6 * (1 + Math.abs(b));

// A deterministic small request of `layers` layers, 2 heads, 6 tokens.
function layers_request(L, extra = {}) {
  let s = 11;
  const rnd = () => ((s = (s * 1103515245 + 12345) % 2147483648) / 2147483648) - 0.5;
  const mat = (r, k) => Array.from({ length: r }, () => Array.from({ length: k }, () => Number((2 * rnd()).toFixed(4))));
  return { x: mat(6, 8), num_heads: 2, tokens: ['we', 'saw', 'the', 'cat', 'sit', 'down'],
    layers: Array.from({ length: L }, () => ({ w_q: mat(8, 8), w_k: mat(8, 8), w_v: mat(8, 8) })), ...extra };
}

async function paste_and_run(page, req) {
  await page.check('#source-json');
  await page.fill('#request-json', JSON.stringify(req));
  return run_page(page, true);
}

async function model_checks(page, stub) {
  const req = layers_request(3);
  await paste_and_run(page, req);
  const sent = JSON.parse(stub.bodies.at(-1));
  check(sent.layers.length === 3 && sent.rollout === true && sent.return_weights === 'per_head',
    'a pasted 3-layer request goes out with rollout: true and per-head weights');
  const ans = JSON.parse(stub.handle(JSON.stringify({ ...sent, store: false })).body);
  const thumbs = page.locator('#model-grid canvas[data-layer][data-head]');
  check(await thumbs.count() === 6, 'the model view draws 3 layers x 2 heads', `found ${await thumbs.count()}`);
  check(await page.isVisible('#layer-field'), 'a layer selector appears');
  for (const [l, h] of [[0, 0], [2, 1]]) {
    const v = await plot_variety(page, `#model-grid canvas[data-layer="${l}"][data-head="${h}"]`);
    check(v > 0.05, `thumbnail of layer ${l}, head ${h} is not one colour`);
  }
  await page.locator('#model-grid canvas[data-layer="1"][data-head="1"]').click();
  check(await page.locator('#zoom[open]').count() === 1 && await page.getAttribute('#zoom', 'data-layer') === '1' &&
    await page.getAttribute('#zoom', 'data-head') === '1', 'clicking layer 1, head 1 opens its map');
  const zt = await hover_cell(page, '#zoom[open] canvas[data-view="zoom"]', 3, 2);
  const want = ans.layers[1].attention[1][3][2].toFixed(4);
  check(tooltip_weight(zt) === want && zt.includes('\u201ccat\u201d'), `the enlarged map shows layer 1's weight ${want}`, zt);
  await page.keyboard.press('Escape');
  check(await page.inputValue('#layer') === '1', 'the layer selector follows the click');
  const ht = await hover_cell(page, HEAD(0), 5, 1);
  check(tooltip_weight(ht) === ans.layers[1].attention[0][5][1].toFixed(4), 'the head maps show layer 1', ht);
  await page.selectOption('#layer', '2');
  const ht2 = await hover_cell(page, HEAD(0), 5, 1);
  check(tooltip_weight(ht2) === ans.layers[2].attention[0][5][1].toFixed(4), 'choosing layer 2 draws layer 2', ht2);
  check(await page.locator('#model-row-current, .model-row.current').getAttribute('data-layer') === '2',
    'the grid marks the layer drawn');
  // By keyboard: Enter on a thumbnail opens it, Escape closes it, and focus
  // is back on that thumbnail (the grid was drawn anew meanwhile).
  await page.focus('#model-grid canvas[data-layer="0"][data-head="1"]');
  await page.keyboard.press('Enter');
  const opened = await page.locator('#zoom[open]').count() === 1 && await page.getAttribute('#zoom', 'data-layer') === '0';
  await page.keyboard.press('Escape');
  const back = await page.evaluate(() => {
    const a = document.activeElement;
    return a.tagName === 'CANVAS' && a.isConnected ? `layer ${a.dataset.layer}, head ${a.dataset.head}` : a.tagName;
  });
  check(opened && back === 'layer 0, head 1', 'Enter on a thumbnail opens it; Escape gives focus back to that thumbnail', back);
  await page.selectOption('#layer', '2');

  check(await page.locator('canvas[data-rollout]').count() === 1, 'the rollout map is drawn');
  const rt = await hover_cell(page, 'canvas[data-rollout]', 4, 1);
  check(tooltip_number(rt, 'share') === ans.rollout[4][1].toFixed(4), `rollout tooltip shows ${ans.rollout[4][1].toFixed(4)}`, rt);
  const row_sum = ans.rollout[4].reduce((a, b) => a + b, 0);
  check(Math.abs(row_sum - 1) < 1e-5, 'the stub\'s rollout rows sum to 1 (a sanity check of the canned answer)');

  // The same as base64 tensors (the Python client's form), uploaded.
  await page.selectOption('#encoding', 'base64');
  await page.setInputFiles('#request-file', { name: 'model.json', mimeType: 'application/json',
    buffer: Buffer.from(JSON.stringify(layers_request(2))) });
  await page.waitForFunction(() => document.getElementById('request-json').value.includes('"layers"'));
  await run_page(page, true);
  check(JSON.parse(stub.bodies.at(-1)).encoding === 'base64', 'base64 asked for');
  check(await thumbs.count() === 4 && await page.locator('canvas[data-rollout]').count() === 1,
    'an uploaded 2-layer file with base64 answers draws 2 x 2 thumbnails and the rollout');
  await page.selectOption('#encoding', 'json');

  // The Python client's example (hf_model.py --save-request) writes a
  // batch of one: x [1][n][d], tokens [[...]], rollout null when not asked.
  const one_batch = layers_request(2);
  one_batch.x = [one_batch.x];
  one_batch.tokens = [one_batch.tokens];
  one_batch.rollout = null;
  await paste_and_run(page, one_batch);
  const b_ans = JSON.parse(stub.handle(JSON.stringify({ ...JSON.parse(stub.bodies.at(-1)), store: false })).body);
  check(JSON.parse(stub.bodies.at(-1)).rollout === true, 'a null rollout counts as absent: the page asks for one');
  check(await thumbs.count() === 4 && await page.locator('canvas[data-rollout]').count() === 1,
    'a batch-of-one layers request draws its thumbnails and rollout');
  const bt = await hover_cell(page, 'canvas[data-rollout]', 3, 0);
  check(tooltip_number(bt, 'share') === b_ans.rollout[0][3][0].toFixed(4) && bt.includes('\u201ccat\u201d'),
    'the batched rollout [1][n][n] is drawn with its tokens', bt);

  // No rollout asked: no rollout drawn.
  await page.setChecked('#want-rollout', false);
  await paste_and_run(page, layers_request(2));
  check(await page.locator('canvas[data-rollout]').count() === 0 && !(await page.isVisible('#rollout-section')),
    'without rollout: true no rollout map');
  await page.setChecked('#want-rollout', true);
}

async function neuron_and_norm_checks(page, stub) {
  await page.check('#source-generate');
  await set_form(page, { heads: 4, 'kv-heads': 2 });
  const body = await run_page(page, true);
  const sent = JSON.parse(body);
  check(sent.return_qk === true && sent.value_norms === true, 'the generator asks for return_qk and value_norms');
  const ans = JSON.parse(stub.handle(JSON.stringify({ ...sent, store: false })).body);
  check(await page.isVisible('#neuron-section'), 'the neuron view is shown');
  await page.selectOption('#neuron-query', '7');
  await page.selectOption('#neuron-key', '1');
  const d = ans.q[0][0].length;
  for (const h of [0, 3]) {
    const g = Math.floor(h / 2);
    const el = page.locator(`[data-neuron-head="${h}"]`);
    const read = (row) => el.locator(`[data-row="${row}"] [data-dim]`).evaluateAll(
      (es) => es.map((e) => [Number(e.dataset.dim), Number(e.dataset.value)]));
    const [qs, ks, ps] = [await read('q'), await read('k'), await read('prod')];
    check(qs.length === d && qs.every(([i, v]) => close_to(v, ans.q[h][7][i])), `head ${h}: q of "it" matches the answer's q`);
    check(ks.length === d && ks.every(([i, v]) => close_to(v, ans.k[g][1][i])),
      `head ${h}: k of "animal" is KV head ${g}'s (grouped-query)`);
    check(ps.every(([i, v]) => close_to(v, ans.q[h][7][i] * ans.k[g][1][i])), `head ${h}: products q_d k_d`);
    const dot = ans.q[h][7].reduce((s, x, i) => s + x * ans.k[g][1][i], 0);
    check(close_to(Number(await el.getAttribute('data-score')), dot / Math.sqrt(d)) &&
      await el.getAttribute('data-kv-head') === String(g), `head ${h}: score = (q . k) / sqrt(${d})`);
  }
  await page.check('#neuron-sort');
  const order = await page.locator('[data-neuron-head="0"] [data-row="prod"] [data-dim]').evaluateAll(
    (es) => es.map((e) => Math.abs(Number(e.dataset.value))));
  check(order.every((v, i) => i === 0 || order[i - 1] >= v), 'ordering by |q_d k_d| sorts the dimensions');
  await keyboard_neuron_checks(page, ans, d);
  await page.uncheck('#neuron-sort');

  check(await page.isVisible('#norm-field'), 'the norm-based toggle appears with value_norms');
  const a = ans.attention;
  const vn = ans.value_norms;
  await page.check('#kind-norm');
  const t1 = await hover_cell(page, HEAD(3), 7, 1);
  const w1 = (a[3][7][1] * vn[3][1]).toFixed(4);
  check(tooltip_number(t1, '\u03b1\u2016f\\(x\\)\u2016') === w1, `norm-based: weight x norm = ${w1}`, t1);
  check(await page.getAttribute(HEAD(3), 'data-kind') === 'norm', 'the maps say they are norm-based');
  await page.check('#kind-norm-row');
  const sum = a[3][7].reduce((s, w, j) => s + w * vn[3][j], 0);
  const t2 = await hover_cell(page, HEAD(3), 7, 1);
  const w2 = (a[3][7][1] * vn[3][1] / sum).toFixed(4);
  check(tooltip_number(t2, '\u03b1\u2016f\\(x\\)\u2016 renormalised') === w2, `renormalised rows: ${w2}`, t2);
  const links = JSON.parse(await page.getAttribute('#lines', 'data-links'));
  check(links.every((l) => l[3] <= 1 + 1e-9), 'the token view draws row shares in the norm-based modes');
  await page.check('#kind-raw');
  const t3 = await hover_cell(page, HEAD(3), 7, 1);
  check(tooltip_weight(t3) === a[3][7][1].toFixed(4) && !t3.includes('\u2016'), 'back to raw weights', t3);
  await set_form(page, { heads: 4, 'kv-heads': 4 });
}

// The neuron view by keyboard (query 7, key 1, dimensions ordered): one
// stop for Tab, the arrow keys move over heads (up, down) and dimensions
// (left, right; Shift 10 at a time), outline that column and show what a
// pointer over it shows, which #cell-live says; Escape and Tab away hide it.
async function keyboard_neuron_checks(page, ans, d) {
  const box = page.locator('#neuron-heads');
  const aria = await box.evaluate((el) => ({ tab: el.tabIndex, role: el.getAttribute('role'),
    label: el.getAttribute('aria-label') }));
  check(aria.tab === 0 && aria.role === 'group' && /4 heads by 16 dimensions\. Arrow keys read a dimension/.test(aria.label),
    'neuron view: one keyboard stop, a group whose label says what the arrow keys do', JSON.stringify(aria));
  await page.focus('#neuron-sort');
  await page.keyboard.press('Tab');
  check(await page.evaluate(() => document.activeElement.id) === 'neuron-heads', 'neuron view: Tab reaches the cells');
  // What the cursor outlines, and the dimension a pointer there reads.
  const outlined = () => page.locator('#neuron-heads .neuron-cell.cursor').evaluateAll((es) => es.map((e) =>
    `${e.closest('[data-neuron-head]').dataset.neuronHead}/${e.parentElement.dataset.row}/${e.dataset.dim}`));
  const expected = (h, dim) => {
    const g = Math.floor(h / 2);
    const [q, k] = [ans.q[h][7][dim], ans.k[g][1][dim]];
    const f = (v) => v.toFixed(3);
    return `head ${h} \u00b7 dim ${dim}: q ${f(q)} \u00b7 k ${f(k)} \u00b7 q\u2218k ${f(q * k)}`;
  };
  const dim_at = (h, col) => page.locator(`[data-neuron-head="${h}"] [data-row="prod"] [data-dim]`).nth(col)
    .getAttribute('data-dim').then(Number);
  await page.keyboard.press('ArrowRight');
  await page.keyboard.press('ArrowRight');
  await page.keyboard.press('ArrowDown');
  const dim = await dim_at(1, 2);
  const tip = await page.textContent('#tooltip');
  check(await page.isVisible('#tooltip') && tip === expected(1, dim) && await page.textContent('#cell-live') === tip,
    'neuron view: right, right, down reads head 1\'s third column, and #cell-live says it', `${tip} | ${expected(1, dim)}`);
  const marks = await outlined();
  check(marks.join(' ') === ['q', 'k', 'prod'].map((r) => `1/${r}/${dim}`).join(' '),
    'neuron view: the cursor outlines that column (q, k and product)', marks.join(' '));
  const cell = page.locator(`[data-neuron-head="1"] [data-row="q"] [data-dim="${dim}"]`);
  const r = await cell.boundingBox();
  await page.mouse.move(r.x + r.width / 2, r.y + r.height / 2);
  check(await page.textContent('#tooltip') === tip, 'neuron view: the keyboard shows what the pointer shows there');
  await page.mouse.move(0, 0);
  await page.focus('#neuron-heads');
  await page.keyboard.press('Shift+ArrowRight');
  await page.keyboard.press('Shift+ArrowDown');
  const far = await dim_at(3, 10);
  check(await page.textContent('#tooltip') === expected(3, far),
    `neuron view: Shift moves 10 columns, and stops at the last head (${d} dimensions, 4 heads)`, await page.textContent('#tooltip'));
  await page.keyboard.press('Escape');
  check(await page.isHidden('#tooltip') && (await outlined()).length === 0, 'neuron view: Escape hides the values and the outline');
  await page.keyboard.press('ArrowLeft');
  check(await page.isVisible('#tooltip'), 'neuron view: an arrow key shows them again');
  await page.keyboard.press('Shift+Tab');
  check(await page.isHidden('#tooltip') && (await outlined()).length === 0, 'neuron view: leaving it by keyboard hides them');
}

async function mask_and_long_checks(page) {
  await page.check('#source-generate');
  await set_form(page, { mask: 'causal', 'window-left': 2 });
  await run_page(page, true);
  check(await page.getAttribute('#legend', 'data-scale') === 'row', 'a windowed causal map is scaled per row');
  for (const [q, k, masked] of [[6, 1, true], [6, 4, false], [6, 8, true]]) {
    const tip = await hover_cell(page, HEAD(0), q, k);
    const rgb = await cell_rgb(page, HEAD(0), q, k);
    check(tip.includes('masked') === masked && is_masked_grey(rgb) === masked,
      `window of 2: query ${q}, key ${k} is ${masked ? '' : 'not '}drawn masked`, `${tip} ${JSON.stringify(rgb)}`);
  }
  await set_form(page, { mask: 'none', 'window-left': '', repeat: 30 });
  await run_page(page, true);
  const d = await page.locator(HEAD(0)).evaluate((el) => ({ ...el.dataset }));
  check(Number(d.n) === 300 && Number(d.cell) < 3, `300 tokens: cells of ${Number(d.cell).toFixed(2)} pixels, pooled`);
  check(await plot_variety(page, HEAD(0)) > 0.05, '300 tokens: the map is not one colour');
  const tip = await hover_cell(page, HEAD(0), 150, 42);
  check(/query .*\(150\) \u2192 key .*\(42\)/.test(tip), 'a pooled map still finds the cell under the pointer', tip);
  const wrap = await page.locator('#lines-wrap').evaluate((w) => w.scrollHeight > w.clientHeight);
  check(wrap, 'the token view of 300 tokens scrolls');
  await set_form(page, { repeat: 1 });
}

async function store_checks(page, stub) {
  await page.check('#source-generate');
  await page.fill('#seed', '7'); // weights no earlier step sent
  const said = await statuses_of(page, () => run_page(page, true));
  const first = JSON.parse(stub.bodies.at(-1));
  check(first.store === true && Array.isArray(first.w_q), 'the first run sends tensors inline with store: true');
  check(said[0] === 'Building the request\u2026' && /^Sending to POST \/attend \(no tensors as refs\)\u2026/.test(said[1]),
    'the status says the request is being built, then "no tensors as refs" while it is sent', JSON.stringify(said));
  await run_page(page, true);
  const second = JSON.parse(stub.bodies.at(-1));
  check(['x', 'w_q', 'w_k', 'w_v'].every((f) => second[f]?.ref === ref_of(first[f])),
    'the second run sends x, w_q, w_k and w_v as the refs the first answer named');
  check(/4 tensors sent as refs/.test(await page.textContent('#status')), 'the status line counts the refs');
  await page.fill('#sentence', 'A different sentence for the same weights');
  await run_page(page, true);
  const third = JSON.parse(stub.bodies.at(-1));
  check(Array.isArray(third.x) && ['w_q', 'w_k', 'w_v'].every((f) => third[f]?.ref),
    'a new sentence sends only x inline, the weights as refs');
  const kept = await page.evaluate(async () => {
    const { generate_request } = await import('./generate.js');
    const p = { sentence: 'a b c', d_model: 16, heads: 2, kv_heads: 2, mask: 'none', padding: 0, seed: 9,
      repeat: 1, layers: 1, rope: false, alibi: false, window_left: null, softcap: null };
    const a = generate_request(p);
    const b = generate_request({ ...p, sentence: 'another sentence', mask: 'causal' });
    const c = generate_request({ ...p, kv_heads: 1 });
    return { same: a.w_q === b.w_q && a.w_v === b.w_v, x: a.x !== b.x, other: c.w_q !== b.w_q };
  });
  check(kept.same && kept.x && kept.other,
    'the same weights on a new sentence are the arrays already built, not drawn (nor hashed) again; new KV heads, new weights',
    JSON.stringify(kept));
  // The store forgets w_k: 422 unknown_ref, then the page sends it inline.
  stub.forget(ref_of(first.w_k));
  const before = stub.bodies.length;
  // Chromium logs the 422 itself ("Failed to load resource"), which no
  // script can silence; the page must add nothing of its own.
  const logged = [];
  const on_console = (m) => logged.push(`${m.type()}: ${m.text()}`);
  page.on('console', on_console);
  await run_page(page, true, { posts: 2 });
  page.off('console', on_console);
  check(logged.length === 1 && /^error: Failed to load resource: the server responded with a status of 422/.test(logged[0]),
    'the retry logs nothing but the browser\'s own line for the 422', logged.join(' | '));
  const tries = stub.bodies.slice(before).map((b) => JSON.parse(b));
  check(tries.length === 2 && tries[0].w_k?.ref && Array.isArray(tries[1].w_k) && tries[1].store === true &&
    Array.isArray(tries[1].w_q), 'on 422 unknown_ref the page re-sends the request inline with store: true',
  JSON.stringify(tries.map((t) => Object.keys(t).filter((k) => t[k]?.ref))));
  check(await page.isHidden('#error') && /sent again inline/.test(await page.textContent('#status')),
    'the retry leaves no error on the page, and the status line says what happened');
  await run_page(page, true);
  check(JSON.parse(stub.bodies.at(-1)).w_k?.ref, 'the next run uses refs again');
  await page.setChecked('#use-store', false);
  await run_page(page, true);
  const off = JSON.parse(stub.bodies.at(-1));
  check(off.store === undefined && Array.isArray(off.w_q), 'with the store control off everything is inline');
  await page.setChecked('#use-store', true);
  await page.fill('#seed', '42');
  await page.fill('#sentence', 'The animal didn\'t cross the street because it was tired');
}

// The texts the status line shows while fn runs, in order, without the
// seconds a waiting run counts.
async function statuses_of(page, fn) {
  await page.evaluate(() => {
    window.status_seen = [];
    window.status_watch = new MutationObserver(() => {
      const text = document.getElementById('status').firstChild?.textContent ?? '';
      if (text && window.status_seen.at(-1) !== text) window.status_seen.push(text);
    });
    window.status_watch.observe(document.getElementById('status'), { childList: true, characterData: true, subtree: true });
  });
  await fn();
  return page.evaluate(() => {
    window.status_watch.disconnect();
    return window.status_seen;
  });
}

// After a failed run nothing of the run before it is left: no maps under
// the error, no download of the older answer. flags.refused excuses the
// browser's own log line of the provoked 413.
async function stale_checks(page, flags) {
  await page.check('#source-generate');
  const cleared = async () => ({
    hidden: await page.isHidden('#results'),
    maps: await page.locator('#head-maps canvas, #mean-card canvas, #model-grid canvas').count(),
    download: await page.isDisabled('#export-json'),
  });
  const gone = (s) => s.hidden && s.maps === 0 && s.download;
  const ran = async () => {
    await run_page(page, true);
    return !(await page.isHidden('#results')) && !(await page.isDisabled('#export-json'));
  };

  check(await ran(), 'a run shows its maps and enables the download');
  await set_form(page, { 'kv-heads': 3 });
  await page.click('#run');
  await page.waitForSelector('#error:not([hidden])');
  const form = await cleared();
  check(gone(form), 'a form error clears the previous maps and disables the download', JSON.stringify(form));
  await set_form(page, { 'kv-heads': 4 });

  check(await ran(), 'the next good run draws again');
  const refuse = (route) => route.fulfill({ status: 413, contentType: 'application/json',
    body: JSON.stringify({ error: { code: 'too_large', message: 'the request needs 10 units; the limit --max-flops (ATTND_MAX_FLOPS) is 5' } }) });
  await page.route('**/attend', refuse);
  flags.refused = true;
  await run_page(page, false);
  const big = await cleared();
  check(gone(big), 'a 413 from the service clears the previous maps and disables the download', JSON.stringify(big));
  await page.unroute('**/attend', refuse);
  flags.refused = false;

  check(await ran(), 'and the run after it draws again');
  const down = (route) => route.abort('connectionrefused');
  await page.route('**/attend', down);
  flags.refused = true;
  await page.click('#run');
  await page.waitForSelector('#error:not([hidden])');
  const net = await cleared();
  check(gone(net) && /network_error/.test(await page.textContent('#error')),
    'a service that is down clears the previous maps and disables the download', JSON.stringify(net));
  await page.unroute('**/attend', down);
  flags.refused = false;
  check(await ran() && await page.isHidden('#error'), 'a good run after the failures clears the error and draws');
}

// A phone's width (375 CSS pixels): nothing scrolls sideways, each head's
// map sits above its figures at the card's width, tick labels keep apart,
// each radio stays on the line of its own text.
async function narrow_checks(base) {
  const ctx = await launch(1, { width: 375, height: 740 });
  try {
    const page = ctx.context.pages()[0] ?? await ctx.context.newPage();
    const w = watch(page, new URL(base).origin);
    await route_stub(page, make_stub());
    await page.goto(`${base}/`);
    const sideways = () => page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    const strays = await radios_apart(page, '.source label');
    check(strays.length === 0, '375 px: each Request source radio is on the line of its own text, before it',
      JSON.stringify(strays));
    await run_page(page, true);
    check(await sideways() <= 0, '375 px: the page does not scroll sideways', `${await sideways()} px too wide`);
    const card = await page.locator('#head-maps .head-card').first().evaluate((el) => {
      const c = el.querySelector('canvas').getBoundingClientRect();
      const d = el.querySelector('dl').getBoundingClientRect();
      const inner = el.clientWidth - 2 * parseFloat(getComputedStyle(el).paddingLeft);
      return { canvas_bottom: c.bottom, dl_top: d.top, canvas_w: c.width, inner };
    });
    check(card.canvas_bottom <= card.dl_top && card.canvas_w >= 0.85 * card.inner,
      `375 px: a head's map is above its figures at the card's width (${card.canvas_w.toFixed(0)} of ${card.inner.toFixed(0)} px)`,
      JSON.stringify(card));
    check(await page.getAttribute(HEAD(0), 'data-labelled') === 'true', '375 px: 10 tokens keep their labels');
    const edges = await page.evaluate(() => ['mean-section', 'lines-wrap', 'head-maps'].map(
      (id) => document.getElementById(id).getBoundingClientRect().right));
    check(edges.every((r) => r <= 375 - 8), '375 px: the mean map, the token view and the heads keep a margin on the right',
      JSON.stringify(edges));

    await set_form(page, { repeat: 4 });
    await run_page(page, true);
    const ticks = await tick_collisions(page, HEAD(0));
    check(Array.isArray(ticks) && ticks.length === 0, '375 px, 40 tokens: the position ticks do not touch', JSON.stringify(ticks));
    await page.locator(HEAD(0)).click();
    const dialog = await page.locator('#zoom').evaluate((el) => el.getBoundingClientRect().right);
    const zoom_ticks = await tick_collisions(page, '#zoom[open] canvas[data-view="zoom"]');
    const cut = [...await select_overflow(page, '#scale-mode'), ...await select_overflow(page, '#encoding')];
    check(cut.length === 0, '375 px: every option of Colour scale and Wire format shows whole', cut.join(' | '));
    check(dialog <= 375 && Array.isArray(zoom_ticks) && zoom_ticks.length === 0,
      '375 px: the enlarged map fits the screen and its ticks do not touch', `${dialog} ${JSON.stringify(zoom_ticks)}`);
    await page.keyboard.press('Escape');
    await set_form(page, { repeat: 1 });

    await paste_and_run(page, layers_request(3));
    check(await sideways() <= 0, '375 px: a 3-layer model (grid, rollout, neuron view) does not scroll sideways',
      `${await sideways()} px too wide`);
    // Thumbnails are wider than the grid's share of 375 px for 8 heads.
    await paste_and_run(page, layers_request(2, { num_heads: 8 }));
    const columns = await head_columns(page);
    check(columns.length === 8 && columns.every((c, i) => c.text === String(i) && c.off <= 1),
      '375 px, 8 heads: each head label is over its column of thumbnails', JSON.stringify(columns));

    // A small map of 16 x 16 cells, as a narrow card would draw it.
    await page.evaluate(async () => {
      const { draw_heatmap } = await import('./heatmap.js');
      const c = document.createElement('canvas');
      c.id = 'tick-probe';
      document.body.append(c);
      const labels = Array.from({ length: 16 }, (_, i) => `token${i}`);
      draw_heatmap(c, { values: new Float64Array(256), n: 16, m: 16, rows: labels, cols: labels, vmax: 1,
        scale: { kind: 'linear' } }, { width: 100, height: 100 });
    });
    const small = await tick_collisions(page, '#tick-probe');
    check(Array.isArray(small) && small.length === 0, 'a 100-pixel map of 16 tokens: "8" and "10" do not run together',
      JSON.stringify(small));
    check(w.console.length + w.errors.length + w.foreign.length === 0, '375 px: no errors, no other origin',
      [...w.console, ...w.errors, ...w.foreign].join(' | '));
  } finally {
    await close(ctx);
  }
}

// The labels (selector) whose radio is not on the first line of its own
// text, to the left of it: [] when each radio sits with its text.
function radios_apart(page, selector) {
  return page.locator(selector).evaluateAll((labels) => labels.flatMap((l) => {
    const radio = l.querySelector('input').getBoundingClientRect();
    const text = document.createRange();
    text.setStartAfter(l.querySelector('input'));
    text.setEndAfter(l.lastChild);
    const line = [...text.getClientRects()].find((r) => r.width > 0);
    const mid = (radio.top + radio.bottom) / 2;
    return line && radio.right <= line.left && mid >= line.top && mid <= line.bottom ? []
      : [{ label: l.textContent.trim(), radio: [radio.left, radio.top], text: line && [line.left, line.top] }];
  }));
}

// Refs follow the tensors' values, not their wire text: after a run in
// one wire format, a run in the other sends the same tensors as refs.
async function wire_format_checks(page, stub) {
  await page.check('#source-generate');
  const fields = ['x', 'w_q', 'w_k', 'w_v'];
  for (const [seed, from, to] of [[101, 'json', 'base64'], [102, 'base64', 'json']]) {
    await set_form(page, { seed, encoding: from });
    await run_page(page, true);
    const first = JSON.parse(stub.bodies.at(-1));
    check(fields.every((f) => !first[f]?.ref), `seed ${seed}, ${from}: the first run sends every tensor inline`);
    const refs = JSON.parse(stub.handle(JSON.stringify({ ...first, store: true })).body).meta.refs;
    await set_form(page, { encoding: to });
    await run_page(page, true);
    const next = JSON.parse(stub.bodies.at(-1));
    check((to === 'base64') === (next.encoding === 'base64') && fields.every((f) => next[f]?.ref === refs[f]),
      `switching the wire format from ${from} to ${to} sends x, w_q, w_k and w_v as refs`,
      JSON.stringify(fields.map((f) => (next[f]?.ref ? 'ref' : 'inline'))));
    check(/4 tensors sent as refs/.test(await page.textContent('#status')), `${to}: the status line counts 4 refs`);
  }
  await set_form(page, { seed: 42, encoding: 'json' });
}

// Requests over the server's limits (as GET /limits told them) are
// refused in the form before any work, with the size in the user's terms
// and the limit; a 413 from the service says what to change, and its limit
// is used from then on; an answer to /limits that is not the limits leaves
// the page on the defaults, said to be assumed. Reloads the page at the
// end (the learned limit stays with it).
async function limit_checks(page, stub, base, flags) {
  await page.check('#source-generate');
  const hint = () => page.textContent('#size-hint');
  check(await page.getAttribute('body', 'data-limits') === 'server', 'the page has its limits from GET /limits');
  const over = async () => await page.getAttribute('#size-hint', 'data-over') === 'true';
  const sent_by = async (fn) => {
    const before = stub.bodies.length;
    await fn();
    return stub.bodies.length - before;
  };
  const refused = async () => {
    const t0 = Date.now();
    const sent = await sent_by(async () => {
      await page.click('#run');
      await page.waitForSelector('#error:not([hidden])');
    });
    return { sent, ms: Date.now() - t0, code: await page.getAttribute('#error', 'data-code'),
      text: await page.textContent('#error') };
  };

  await set_form(page, { seed: 103 }); // weights no earlier step stored
  const small = await hint();
  check(!(await over()) && /^About 1\d\d(\.\d)? KiB to send \(the server takes at most 64 MiB, this server's --max-body-bytes\); 400 attention-map values \(at most 16\.8 million/.test(small),
    'the form shows the estimated size and the limits it assumes', small);
  await run_page(page, true);
  const by_ref = await hint();
  check(/^About \d+ B to send, 4 tensors by ref \(/.test(by_ref), 'once the store holds x and the weights, the estimate counts them as refs', by_ref);

  await set_form(page, { sentence: 'a b c', 'd-model': 2048 });
  const big = await hint();
  check(await over() && /^d_model 2048 with 3 weight matrices \(w_q, w_k, w_v\) makes a request of about 11\d MiB; the server takes at most 64 MiB \(this server's --max-body-bytes\): use a smaller d_model or fewer layers/.test(big),
    'd_model 2048: the form says the request is about 116 MiB and the server takes 64 MiB', big);
  const r2048 = await refused();
  check(r2048.sent === 0 && r2048.code === 'too_large' && r2048.ms < 3000 && r2048.text.includes('about 11'),
    `d_model 2048: refused on the page in ${r2048.ms} ms, nothing sent`, JSON.stringify(r2048));
  check(await page.isHidden('#results'), 'd_model 2048: no older maps under the refusal');
  await set_form(page, { encoding: 'base64', 'd-model': 4096 });
  const b64 = await hint();
  check(await over() && /d_model 4096 .* about 256 MiB/.test(b64), 'd_model 4096 in base64: about 256 MiB, refused', b64);
  await set_form(page, { encoding: 'json', 'd-model': 64, layers: 48, sentence: 'The animal didn\'t cross the street because it was tired' });
  check(!(await over()), 'd_model 64 in 48 layers fits');
  await set_form(page, { 'd-model': 512 });
  check(await over() && /in each of 48 layers makes a request of about \d+ MiB/.test(await hint()),
    'd_model 512 in 48 layers: the message names the layers', await hint());
  await set_form(page, { 'd-model': 64, layers: 1, repeat: 500 });
  const maps = await hint();
  check(await over() && /5000 queries \u00d7 5000 keys \u00d7 4 heads make 100\.0 million attention-map values; the server returns at most 16\.8 million \(this server's --max-map-elems\): use fewer tokens, heads or layers/.test(maps),
    '5000 tokens: the form says the maps are over --max-map-elems', maps);
  const r5000 = await refused();
  check(r5000.sent === 0 && r5000.code === 'too_large', '5000 tokens: refused on the page, nothing sent', JSON.stringify(r5000));
  await set_form(page, { repeat: 1 });
  check(!(await over()), 'back to 10 tokens: the form is under the limits again');

  // The service's own 413s, in the words of its messages.
  const answer = (message) => (route) => route.fulfill({ status: 413, contentType: 'application/json',
    body: JSON.stringify({ error: { code: 'too_large', message } }) });
  flags.refused = true;
  const maps_413 = answer('the attention maps of the layers and the rollout would hold 20000000 values together; the limit --max-map-elems (ATTND_MAX_MAP_ELEMS) is 1000000');
  await page.route('**/attend', maps_413);
  await run_page(page, false);
  const maps_advice = await page.textContent('#error .advice').catch(() => '');
  check(/more values than this server returns \(1\.0 million\): use fewer tokens, heads or layers/.test(maps_advice),
    'a 413 naming --max-map-elems says to use fewer tokens, heads or layers', maps_advice);
  await page.unroute('**/attend', maps_413);
  const body_413 = answer('Content-Length is 120000 bytes; the limit --max-body-bytes (ATTND_MAX_BODY_BYTES) is 20000');
  await page.route('**/attend', body_413);
  await run_page(page, false);
  const body_advice = await page.textContent('#error .advice').catch(() => '');
  check(/The request is 117\.2 KiB; this server takes at most 19\.5 KiB: use a smaller d_model/.test(body_advice),
    'a 413 naming --max-body-bytes says how large the request was and what the server takes', body_advice);
  await page.unroute('**/attend', body_413);
  flags.refused = false;
  await set_form(page, { seed: 104 });
  const learned = await hint();
  check(await over() && /at most 19\.5 KiB \(this server's --max-body-bytes\)/.test(learned),
    'after that 413 the form uses this server\'s limit', learned);
  const after = await refused();
  check(after.sent === 0 && after.code === 'too_large', 'and refuses the same request without sending it', JSON.stringify(after));
  // A pasted request is measured as it is.
  await page.check('#source-json');
  const row = Array.from({ length: 64 }, (_, c) => Number((0.5 - c / 64).toFixed(6)));
  await page.fill('#request-json', JSON.stringify({ x: Array.from({ length: 60 }, () => row), w_q: [row], w_k: [row], w_v: [row] }));
  const pasted = await hint();
  check(await over() && /^the request JSON is [23]\d\.\d KiB; the server takes at most 19\.5 KiB \(this server's --max-body-bytes\)/.test(pasted),
    'a pasted request over the limit is measured in the form', pasted);
  const r_pasted = await refused();
  check(r_pasted.sent === 0 && r_pasted.code === 'too_large', 'and is not sent', JSON.stringify(r_pasted));
  await page.check('#source-generate');

  const not_limits = (route) => route.fulfill({ status: 200, contentType: 'text/html', body: '<p>a proxy\'s page</p>' });
  await page.route('**/limits', not_limits);
  await page.goto(`${base}/`);
  await page.waitForSelector('body[data-limits]');
  const assumed = await hint();
  check(await page.getAttribute('body', 'data-limits') === 'default' &&
    /\(the server takes at most 64 MiB, the default --max-body-bytes\)/.test(assumed),
  'a /limits answer that is not JSON leaves the page on the defaults, said to be the defaults', assumed);
  await page.unroute('**/limits', not_limits);
  await page.goto(`${base}/`);
  await page.waitForSelector('body[data-limits="server"]');
}

// Fraction of the zoom dialog's colour bar that is not blank.
function plot_variety_of_legend(page) {
  return page.locator('#zoom-legend').evaluate((c) => {
    const px = c.getContext('2d').getImageData(0, 0, c.width, Math.round(c.height / 3)).data;
    let coloured = 0;
    for (let k = 0; k < px.length; k += 4) if (px[k + 3] > 0) coloured++;
    return coloured / (px.length / 4);
  });
}

// Small things a reader relies on: controls whose text shows whole,
// numbers that do not round to zero, labels that say what a map is.
async function label_checks(page, stub) {
  await page.check('#source-generate');
  stub.elapsed_ms = 0.03;
  await run_page(page, true);
  await page.waitForFunction(() => /Drew/.test(document.getElementById('status').textContent));
  const status = await page.textContent('#status');
  check(/server compute < 0\.1 ms/.test(status), 'a compute of 0.03 ms reads "< 0.1 ms", not "0.0 ms"', status);
  stub.elapsed_ms = 2.345;
  await run_page(page, true);
  await page.waitForFunction(() => /Drew/.test(document.getElementById('status').textContent));
  check(/server compute 2\.3 ms/.test(await page.textContent('#status')), 'and 2.345 ms reads "2.3 ms"');
  stub.elapsed_ms = undefined;
  for (const sel of ['#scale-mode', '#encoding', '#mask']) {
    const cut = await select_overflow(page, sel);
    check(cut.length === 0, `every option of ${sel} shows whole`, cut.join(' | '));
  }
  await page.selectOption('#scale-mode', 'log');
  check(/3 decades/.test(await page.textContent('#scale-mode-note')), 'the note under Colour scale says what the chosen scale does');
  await page.selectOption('#scale-mode', 'auto');
  check(/square root from 48 keys/.test(await page.textContent('#scale-mode-note')), 'and for Automatic, its rule');

  // The token view draws 12 heads of 16 at first, and says so.
  check(await page.textContent('#line-heads legend') === 'Heads drawn', '4 heads: the token view draws them all');
  await set_form(page, { heads: 16, 'kv-heads': 4 });
  await run_page(page, true);
  const drawn = await page.locator('#line-heads input:checked').count();
  const legend = await page.textContent('#line-heads legend');
  check(drawn === 12 && /the first 12 of 16 at first; tick others to add them/.test(legend),
    '16 heads: the token view draws the first 12 and its legend says so', `${drawn} ${legend}`);
  await set_form(page, { heads: 4, 'kv-heads': 4 });

  // The enlarged map and the rollout are captioned like the others.
  await run_page(page, true);
  const head_cap = await page.locator('#head-maps figure.map figcaption').first().textContent();
  await page.locator(HEAD(0)).click();
  const zoom_cap = await page.textContent('#zoom-caption');
  check(/scale 0 to \d\.\d{3}$/.test(zoom_cap) && head_cap.endsWith(zoom_cap) &&
    await page.getAttribute('#zoom-legend', 'data-scale') === 'max' && await plot_variety_of_legend(page) > 0.3,
  'the enlarged map has the head\'s scale caption and a colour bar', `${zoom_cap} | ${head_cap}`);
  await page.keyboard.press('Escape');
  await set_form(page, { mask: 'causal' });
  await run_page(page, true);
  await page.locator(HEAD(1)).click();
  check(await page.textContent('#zoom-caption') === 'each row 0 to its maximum' &&
    await page.getAttribute('#zoom-legend', 'data-scale') === 'row', 'a causal map enlarged: "each row 0 to its maximum"');
  await page.keyboard.press('Escape');
  await set_form(page, { mask: 'none' });
  await paste_and_run(page, layers_request(3));
  const columns = await head_columns(page);
  check(columns.length === 2 && columns.every((c, i) => c.text === String(i) && c.off <= 1),
    'the model grid labels its head columns, each over its thumbnails', JSON.stringify(columns));
  const roll_cap = await page.locator('#rollout-card figcaption').textContent().catch(() => '');
  check(/^Rollout \u00b7 scale 0 to \d\.\d{3}$/.test(roll_cap), 'the rollout map has a scale caption', roll_cap);
  // A weight too small for 4 decimals is not shown as 0.0000, which only a
  // key with no weight at all (here a masked one) reads.
  const tiny = { x: [[4, 0], [0, 4]], w_q: [[1, 0], [0, 1]], w_k: [[1, 0], [0, 1]], w_v: [[1, 0], [0, 1]],
    mask: 'causal', tokens: ['far', 'near'] };
  await paste_and_run(page, tiny);
  const tiny_ans = JSON.parse(stub.handle(JSON.stringify(tiny)).body);
  const small = tiny_ans.attention[0][1][0];
  const small_tip = await hover_cell(page, HEAD(0), 1, 0);
  const masked_tip = await hover_cell(page, HEAD(0), 0, 1);
  check(small > 0 && small < 5e-5 && small_tip.endsWith(`weight ${small.toExponential(1)}`) &&
    masked_tip.endsWith('weight 0.0000 \u00b7 masked'),
  `a weight of ${small.toExponential(3)} reads ${small.toExponential(1)}, a masked key 0.0000`, `${small_tip} | ${masked_tip}`);
  await page.check('#source-generate');
}

// The model grid's head labels: each label's text and how far its centre
// is from the centre of its column of thumbnails, in CSS pixels.
function head_columns(page) {
  return page.evaluate(() => [...document.querySelectorAll('#model-grid .model-head')].map((el) => {
    const r = el.getBoundingClientRect();
    const t = document.querySelector(`#model-grid canvas[data-layer="0"][data-head="${el.dataset.head}"]`).getBoundingClientRect();
    return { text: el.textContent, off: Math.abs(r.left + r.width / 2 - (t.left + t.width / 2)) };
  }));
}

async function hidpi_checks(base) {
  const ctx = await launch(2);
  try {
    const page = ctx.context.pages()[0] ?? await ctx.context.newPage();
    const w = watch(page, new URL(base).origin);
    await route_stub(page, make_stub());
    await page.goto(`${base}/`);
    await paste_and_run(page, layers_request(3));
    await page.check('#source-generate');
    await page.waitForTimeout(300); // a redraw for a new width waits 150 ms
    for (const sel of ['#model-grid canvas[data-layer="0"][data-head="0"]', 'canvas[data-rollout]', HEAD(1), '#lines', '#legend']) {
      const [bw, cw, bh, ch] = await page.locator(sel).evaluate((el) => {
        // clientWidth: the CSS size inside any border.
        return [el.width, el.clientWidth, el.height, el.clientHeight];
      });
      check(Math.abs(bw - 2 * cw) <= 1 && Math.abs(bh - 2 * ch) <= 1, `device scale factor 2: ${sel} is ${bw} x ${bh} for ${cw} x ${ch} CSS pixels`);
    }
    check(w.console.length + w.errors.length + w.foreign.length === 0, 'device scale factor 2: no errors, no other origin',
      [...w.console, ...w.errors, ...w.foreign].join(' | '));
  } finally {
    await close(ctx);
  }
}

// A touch screen at a phone's width: a tap on a cell shows its tooltip,
// above the finger, and it stays (chromium's mouseleave after a tap must
// not hide it); a second tap on that cell enlarges the map, where a tap
// reads a cell the same way; a tap elsewhere hides the tooltip; a tap on a
// neuron-view cell shows that dimension's q, k and product.
async function touch_checks(base) {
  const ctx = await launch(1, { width: 375, height: 740 }, { hasTouch: true });
  const ZOOM = '#zoom[open] canvas[data-view="zoom"]';
  try {
    const page = ctx.context.pages()[0] ?? await ctx.context.newPage();
    const w = watch(page, new URL(base).origin);
    const stub = make_stub();
    await route_stub(page, stub);
    await page.goto(`${base}/`);
    const sent = JSON.parse(await run_page(page, true));
    const a = JSON.parse(stub.handle(JSON.stringify({ ...sent, store: false })).body).attention;
    // Time for whatever chromium sends after a tap.
    const shown = async () => {
      await page.waitForTimeout(300);
      return await page.isVisible('#tooltip') ? await page.textContent('#tooltip') : '(hidden)';
    };
    const at = await tap_cell(page, HEAD(1), 7, 1);
    const tip = await shown();
    check(tooltip_weight(tip) === a[1][7][1].toFixed(4) && await page.locator('#zoom[open]').count() === 0,
      'touch: a tap on a cell shows its weight and the tooltip stays; the map is not enlarged', tip);
    const r = await page.locator('#tooltip').boundingBox();
    check(r && r.x >= 0 && r.x + r.width <= 375 && r.y + r.height <= at.y,
      'touch: the tooltip is inside the screen, above the finger', JSON.stringify({ r, at }));
    await tap_cell(page, HEAD(1), 7, 1);
    check(await page.locator('#zoom[open]').count() === 1 && await page.getAttribute('#zoom', 'data-head') === '1',
      'touch: a second tap on the same cell enlarges the map');
    await tap_cell(page, ZOOM, 3, 2);
    const zoom_tip = await shown();
    check(tooltip_weight(zoom_tip) === a[1][3][2].toFixed(4),
      'touch: in the enlarged map a tap reads a cell and the tooltip stays', zoom_tip);
    await page.locator('#zoom-title').tap();
    check(await page.isHidden('#tooltip'), 'touch: a tap elsewhere hides the tooltip');
    await page.locator('#zoom-close').tap();

    const cell = (row) => page.locator(`[data-neuron-head="2"] [data-row="${row}"] [data-dim="3"]`);
    await cell('k').tap();
    const dim = await shown();
    const value = async (row) => Number(await cell(row).getAttribute('data-value')).toFixed(3);
    const want = `head 2 \u00b7 dim 3: q ${await value('q')} \u00b7 k ${await value('k')} \u00b7 q\u2218k ${await value('prod')}`;
    check(dim === want, 'touch: a tap on a neuron-view cell shows that dimension\'s q, k and product, and stays',
      `${dim} | ${want}`);
    await page.locator('#neuron-caption').tap();
    check(await page.isHidden('#tooltip'), 'touch: a tap beside the neuron view hides them');
    check(w.console.length + w.errors.length + w.foreign.length === 0, 'touch: no errors, no other origin',
      [...w.console, ...w.errors, ...w.foreign].join(' | '));
  } finally {
    await close(ctx);
  }
}

// A service that takes the request and never answers: while the page
// waits, the status counts the seconds and a Cancel button (focused when
// Run was) stops the wait; the timeout (2 s here by ?timeout=2; 120 s by
// default) ends it with an error that says the service did not answer.
// Cancel also stops a large request while it is built, before anything is
// sent, and the page runs it again.
async function silent_checks(base) {
  const silent = await start_silent(base);
  const ctx = await launch(1);
  try {
    const page = ctx.context.pages()[0] ?? await ctx.context.newPage();
    const w = watch(page, silent.base);
    await page.goto(`${silent.base}/`);
    await page.waitForSelector('body[data-limits]');
    await page.click('#run');
    const cancel = page.getByRole('button', { name: 'Cancel request' });
    await cancel.waitFor();
    await page.waitForFunction(() => / [1-9] s$/.test(document.getElementById('status').textContent));
    const waiting = await page.textContent('#status');
    check(silent.posts() === 1 && await page.isDisabled('#run') &&
      /^Sending to POST \/attend .*\u2026 [1-9] s$/.test(waiting),
    'a service that never answers: Run waits disabled and the status counts the seconds', waiting);
    check(await page.evaluate(() => document.activeElement.id) === 'cancel',
      'the Cancel button appears, with the focus Run had');
    await page.keyboard.press('Enter');
    await page.waitForSelector('#error:not([hidden])');
    const told = await page.textContent('#error');
    check(await page.getAttribute('#error', 'data-code') === 'cancelled' &&
      /you cancelled the request after \d+ s, before the service answered/.test(told) &&
      /^Cancelled/.test(await page.textContent('#status')),
    'Enter on Cancel stops the wait: the error box and the status say it was cancelled', told);
    check(await page.isEnabled('#run') && await cancel.isHidden() &&
      await page.evaluate(() => document.activeElement.id) === 'run',
    'after Cancel, Run is back (with the focus) and Cancel gone');

    await page.goto(`${silent.base}/?timeout=2`);
    await page.waitForSelector('body[data-limits]');
    const t0 = Date.now();
    await page.click('#run');
    await page.waitForSelector('#error:not([hidden])', { timeout: 10000 });
    const ms = Date.now() - t0;
    const late = await page.textContent('#error');
    check(await page.getAttribute('#error', 'data-code') === 'timeout' && ms >= 2000 &&
      /the service did not answer within 2 s/.test(late) && /within 2 s/.test(await page.textContent('#status')),
    `with ?timeout=2 the page gives up after ${ms} ms and says the service did not answer`, late);
    check(await page.isEnabled('#run') && await cancel.isHidden(), 'after the timeout, Run is back and Cancel gone');

    // A large request is built off the main thread: while it is built the
    // status says so and counts, and Cancel (with the focus Run had) stops
    // it before anything is sent. The next run builds and sends it.
    await page.goto(`${silent.base}/`);
    await page.waitForSelector('body[data-limits]');
    await set_form(page, { 'd-model': 1280 });
    const posts_before = silent.posts();
    await page.click('#run');
    // What the status says once Cancel shows: on a page that built the
    // request on its main thread, that was only when it was sent.
    const phase = await (await page.waitForFunction(() => !document.getElementById('cancel').hidden &&
      document.getElementById('status').firstChild?.textContent)).jsonValue();
    const focused = await page.evaluate(() => document.activeElement.id);
    check(phase === 'Building the request\u2026' && focused === 'cancel',
      'd_model 1280: while the request is built, Cancel shows, with the focus', `${phase} | focus on ${focused}`);
    await page.keyboard.press('Enter');
    await page.waitForSelector('#error:not([hidden])');
    await page.waitForTimeout(500); // time for a request that should not go
    const unsent = await page.textContent('#error');
    check(await page.getAttribute('#error', 'data-code') === 'cancelled' && silent.posts() === posts_before &&
      /you cancelled the request after \d+ s, while the page built it; nothing was sent/.test(unsent) &&
      /^Nothing sent: cancelled while the request was built/.test(await page.textContent('#status')),
    'Enter on Cancel while the request is built stops it: nothing sent, and the page says so',
    `${unsent} | ${silent.posts() - posts_before} sent`);
    check(await page.isEnabled('#run') && await cancel.isHidden() &&
      await page.evaluate(() => document.activeElement.id) === 'run',
    'after Cancel while building, Run is back (with the focus) and Cancel gone');
    await page.click('#run');
    await page.waitForFunction(() => /^Sending to POST \/attend/.test(document.getElementById('status').textContent),
      null, { timeout: 60000 });
    for (let k = 0; k < 100 && silent.posts() === posts_before; k++) await page.waitForTimeout(50);
    check(silent.posts() === posts_before + 1, 'the next run builds the large request anew and sends it');
    await cancel.click();
    await page.waitForSelector('#error:not([hidden])');
    check(/before the service answered/.test(await page.textContent('#error')) && await page.isEnabled('#run'),
      'Cancel once it is sent: the page stopped waiting for the answer');
    check(w.console.length + w.errors.length + w.foreign.length === 0, 'a silent service: no errors, no other origin',
      [...w.console, ...w.errors, ...w.foreign].join(' | '));
  } finally {
    await close(ctx);
    await silent.close();
  }
}

async function main() {
  const server = await start_server(process.env.ATTND_BIN);
  const { base } = server;
  const origin = new URL(base).origin;
  let ctx = null;
  try {
    ctx = await launch(1);
    const page = ctx.context.pages()[0] ?? await ctx.context.newPage();
    // The unknown_ref step answers 422 on purpose; chromium logs it.
    let allow_422 = false;
    const flags = { refused: false };
    const w = watch(page, origin, (t) => (allow_422 && /status of 422/.test(t)) ||
      (flags.refused && /Failed to load resource: (the server responded with a status of 413|net::ERR_CONNECTION_REFUSED)/.test(t)));
    const stub = make_stub();
    await route_stub(page, stub);
    await page.goto(`${base}/`);
    console.log(`dashboard at ${base}/, POST /attend answered by stub.mjs`);
    for (const [name, fn] of [['model view', () => model_checks(page, stub)],
      ['neuron and norm views', () => neuron_and_norm_checks(page, stub)],
      ['masks and long inputs', () => mask_and_long_checks(page)],
      ['tensor store', async () => { allow_422 = true; await store_checks(page, stub); allow_422 = false; }],
      ['errors clear old results', () => stale_checks(page, flags)],
      ['wire format and refs', () => wire_format_checks(page, stub)],
      ['size limits', () => limit_checks(page, stub, base, flags)],
      ['labels and captions', () => label_checks(page, stub)]]) {
      console.log(name);
      c.group = name;
      try {
        await fn();
      } catch (e) {
        check(false, `${name}: the section could not finish`, e.stack);
      }
    }
    c.group = 'hidpi';
    await hidpi_checks(base);
    c.group = 'narrow';
    console.log('narrow screen');
    await narrow_checks(base);
    c.group = 'touch';
    console.log('touch screen');
    await touch_checks(base);
    c.group = 'silent';
    console.log('a service that does not answer');
    await silent_checks(base);
    c.group = 'hygiene';
    check(w.console.length === 0, 'no console errors', w.console.join(' | '));
    check(w.errors.length === 0, 'no uncaught page errors', w.errors.join(' | '));
    check(w.foreign.length === 0, `every request went to ${origin}`, w.foreign.join(', '));
  } finally {
    await close(ctx);
    server.kill();
  }
}

main().then(() => {
  console.log(`${c.checks - c.failures}/${c.checks} view checks passed`);
  process.exit(c.failures ? 1 : 0);
}, (e) => {
  console.error(`view test aborted: ${e.stack || e}`);
  process.exit(1);
});
